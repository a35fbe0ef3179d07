//! GAMMA's messages between nodes, as bytes: the payload of one Converse
//! message, little-endian.
//!
//! A message of data between two nodes of one group carries no bytes of
//! GAMMA's own: its ports and flags ride in the Converse header's info
//! word ([`data_info`]), its sender is the message's source PE, its
//! payload is the data. (Measured: a 9-byte header put an 8-byte message
//! past one cache line and cost 0.25 µs a hop between processes.) Every
//! other message has info 0 and a payload of one of these kinds:
//!
//! ```text
//! DATA    [1][flags u8][src par-pid u8][src node u16][src port u16][dest port u16][body...]
//! CREDIT  [2][port u16][par-pid u8][node u16]
//!                                  flow control: that node re-posted its buffer
//! ARRIVE  [3][epoch u32]           gamma_sync: a node reached barrier `epoch`
//! RELEASE [4][epoch u32]           gamma_sync: every node reached it
//! LEFT    [5]                      the sender left the group (gamma_exit)
//! PARPID  [6][par-pid u8]          node 0 tells the group its parallel pid
//! INTER   [7][payload...]          a frame from another group (DATA, CREDIT, BYE)
//! BYE     [8][par-pid u8][node u16] (frames) that node of another group left
//! ABANDON [9][epoch u32]           gamma_sync: barrier `epoch` failed (a node left)
//! OFFER   [10][src port u16][dest port u16][id u64][addr u64][len u64]
//!                                  a large message the receiver reads itself
//!                                  (`len` bytes at `addr` in the sender's
//!                                  process, exposed for gets: see `node`)
//! TAKEN   [11][id u64]             the receiver has stored offer `id`
//! ```
//!
//! Between groups (see `intergroup`) DATA carries its full header, since
//! the sender is no PE of this job.
//!
//! # Invariants
//!
//! [`decode`] never trusts its input: a short payload, an unknown kind,
//! extra bytes after a fixed-size kind, flags or ports out of range are an
//! `Err` naming what is wrong; the caller aborts the job naming the
//! sender.

/// Flag: the sender asked for flow control (`gamma_send_flowctl`).
pub const FLOWCTL: u8 = 1;

/// The highest port and semaphore number.
pub const MAX_PORT: u16 = 1024;

const DATA: u8 = 1;
const CREDIT: u8 = 2;
const ARRIVE: u8 = 3;
const RELEASE: u8 = 4;
const LEFT: u8 = 5;
const PARPID: u8 = 6;
/// The kind of a frame from another group, as its reader posts it.
pub const INTER: u8 = 7;
const BYE: u8 = 8;
const ABANDON: u8 = 9;
const OFFER: u8 = 10;
const TAKEN: u8 = 11;

/// Bytes before a DATA message's body.
pub const DATA_HEADER: usize = 9;

/// Info-word bit: a message of data within the group.
const INFO_DATA: u32 = 1 << 31;
/// Info-word bit: it asked for flow control.
const INFO_FLOWCTL: u32 = 1 << 30;
const PORT_BITS: u32 = 11;
const PORT_MASK: u32 = (1 << PORT_BITS) - 1;

/// The info word of a message of data within the group.
pub fn data_info(flowctl: bool, src_port: u16, dest_port: u16) -> u32 {
    INFO_DATA
        | if flowctl { INFO_FLOWCTL } else { 0 }
        | (u32::from(src_port) << PORT_BITS)
        | u32::from(dest_port)
}

/// A message of data within the group, read from its info word:
/// `Ok(Some((flowctl, src_port, dest_port)))`; `Ok(None)` for info 0 (a
/// message of another kind); `Err` for a malformed word.
pub fn parse_info(info: u32) -> Result<Option<(bool, u16, u16)>, String> {
    if info == 0 {
        return Ok(None);
    }
    if info & INFO_DATA == 0
        || info & !(INFO_DATA | INFO_FLOWCTL | (PORT_MASK << PORT_BITS) | PORT_MASK) != 0
    {
        return Err(format!("info word {info:#x}"));
    }
    let src_port = ((info >> PORT_BITS) & PORT_MASK) as u16;
    let dest_port = (info & PORT_MASK) as u16;
    for (what, p) in [("source port", src_port), ("destination port", dest_port)] {
        if p > MAX_PORT {
            return Err(format!("{what} {p} is beyond port {MAX_PORT}"));
        }
    }
    Ok(Some((info & INFO_FLOWCTL != 0, src_port, dest_port)))
}

/// A decoded message.
#[derive(Debug, PartialEq, Eq)]
pub enum Wire<'a> {
    Data {
        flags: u8,
        src_par_pid: u8,
        src_node: u16,
        src_port: u16,
        dest_port: u16,
        body: &'a [u8],
    },
    Credit {
        port: u16,
        src_par_pid: u8,
        src_node: u16,
    },
    Arrive {
        epoch: u32,
    },
    Release {
        epoch: u32,
    },
    Left,
    ParPid(u8),
    Inter(&'a [u8]),
    Bye {
        src_par_pid: u8,
        src_node: u16,
    },
    Abandon {
        epoch: u32,
    },
    Offer {
        src_port: u16,
        dest_port: u16,
        id: u64,
        addr: u64,
        len: u64,
    },
    Taken {
        id: u64,
    },
}

/// Writes a DATA header into `out[..DATA_HEADER]`.
pub fn data_header(
    out: &mut [u8],
    flags: u8,
    src_par_pid: u8,
    src_node: u16,
    src_port: u16,
    dest_port: u16,
) {
    out[0] = DATA;
    out[1] = flags;
    out[2] = src_par_pid;
    out[3..5].copy_from_slice(&src_node.to_le_bytes());
    out[5..7].copy_from_slice(&src_port.to_le_bytes());
    out[7..9].copy_from_slice(&dest_port.to_le_bytes());
}

/// The payload of a message of a fixed-size kind.
pub fn encode(w: &Wire<'_>) -> Vec<u8> {
    match *w {
        Wire::Data {
            flags,
            src_par_pid,
            src_node,
            src_port,
            dest_port,
            body,
        } => {
            let mut v = vec![0; DATA_HEADER + body.len()];
            data_header(&mut v, flags, src_par_pid, src_node, src_port, dest_port);
            v[DATA_HEADER..].copy_from_slice(body);
            v
        }
        Wire::Credit {
            port,
            src_par_pid,
            src_node,
        } => {
            let mut v = vec![CREDIT];
            v.extend_from_slice(&port.to_le_bytes());
            v.push(src_par_pid);
            v.extend_from_slice(&src_node.to_le_bytes());
            v
        }
        Wire::Arrive { epoch } => [&[ARRIVE][..], &epoch.to_le_bytes()].concat(),
        Wire::Release { epoch } => [&[RELEASE][..], &epoch.to_le_bytes()].concat(),
        Wire::Left => vec![LEFT],
        Wire::ParPid(p) => vec![PARPID, p],
        Wire::Inter(frame) => [&[INTER][..], frame].concat(),
        Wire::Bye {
            src_par_pid,
            src_node,
        } => {
            let mut v = vec![BYE, src_par_pid];
            v.extend_from_slice(&src_node.to_le_bytes());
            v
        }
        Wire::Abandon { epoch } => [&[ABANDON][..], &epoch.to_le_bytes()].concat(),
        Wire::Offer {
            src_port,
            dest_port,
            id,
            addr,
            len,
        } => {
            let mut v = vec![OFFER];
            v.extend_from_slice(&src_port.to_le_bytes());
            v.extend_from_slice(&dest_port.to_le_bytes());
            for word in [id, addr, len] {
                v.extend_from_slice(&word.to_le_bytes());
            }
            v
        }
        Wire::Taken { id } => [&[TAKEN][..], &id.to_le_bytes()].concat(),
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn port_at(b: &[u8], at: usize, what: &str) -> Result<u16, String> {
    let p = u16_at(b, at);
    if p > MAX_PORT {
        return Err(format!("{what} {p} is beyond port {MAX_PORT}"));
    }
    Ok(p)
}

/// Reads a payload; `Err` says what is malformed.
pub fn decode(b: &[u8]) -> Result<Wire<'_>, String> {
    let exact = |n: usize| -> Result<(), String> {
        if b.len() == n {
            Ok(())
        } else {
            Err(format!("kind {} with {} bytes, not {n}", b[0], b.len()))
        }
    };
    let Some(&kind) = b.first() else {
        return Err("an empty payload".into());
    };
    match kind {
        DATA => {
            if b.len() < DATA_HEADER {
                return Err(format!(
                    "a data message of {} bytes, header {DATA_HEADER}",
                    b.len()
                ));
            }
            let flags = b[1];
            if flags & !FLOWCTL != 0 {
                return Err(format!("unknown flags {flags:#x}"));
            }
            Ok(Wire::Data {
                flags,
                src_par_pid: b[2],
                src_node: u16_at(b, 3),
                src_port: port_at(b, 5, "source port")?,
                dest_port: port_at(b, 7, "destination port")?,
                body: &b[DATA_HEADER..],
            })
        }
        CREDIT => {
            exact(6)?;
            Ok(Wire::Credit {
                port: port_at(b, 1, "credited port")?,
                src_par_pid: b[3],
                src_node: u16_at(b, 4),
            })
        }
        ARRIVE | RELEASE | ABANDON => {
            exact(5)?;
            let epoch = u32::from_le_bytes([b[1], b[2], b[3], b[4]]);
            Ok(match kind {
                ARRIVE => Wire::Arrive { epoch },
                RELEASE => Wire::Release { epoch },
                _ => Wire::Abandon { epoch },
            })
        }
        BYE => {
            exact(4)?;
            Ok(Wire::Bye {
                src_par_pid: b[1],
                src_node: u16_at(b, 2),
            })
        }
        LEFT => {
            exact(1)?;
            Ok(Wire::Left)
        }
        PARPID => {
            exact(2)?;
            Ok(Wire::ParPid(b[1]))
        }
        OFFER => {
            exact(29)?;
            Ok(Wire::Offer {
                src_port: port_at(b, 1, "source port")?,
                dest_port: port_at(b, 3, "destination port")?,
                id: u64_at(b, 5),
                addr: u64_at(b, 13),
                len: u64_at(b, 21),
            })
        }
        TAKEN => {
            exact(9)?;
            Ok(Wire::Taken { id: u64_at(b, 1) })
        }
        INTER => {
            if b.len() < 2 {
                return Err("an empty frame from another group".into());
            }
            Ok(Wire::Inter(&b[1..]))
        }
        k => Err(format!("unknown kind {k}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips() {
        let all = [
            Wire::Data {
                flags: FLOWCTL,
                src_par_pid: 7,
                src_node: 300,
                src_port: 1024,
                dest_port: 5,
                body: b"hello",
            },
            Wire::Data {
                flags: 0,
                src_par_pid: 1,
                src_node: 0,
                src_port: 0,
                dest_port: 0,
                body: b"",
            },
            Wire::Credit {
                port: 9,
                src_par_pid: 3,
                src_node: 700,
            },
            Wire::Bye {
                src_par_pid: 4,
                src_node: 2,
            },
            Wire::Abandon { epoch: 12 },
            Wire::Arrive { epoch: 3 },
            Wire::Release { epoch: u32::MAX },
            Wire::Left,
            Wire::ParPid(200),
            Wire::Inter(&[2, 1, 0]),
            Wire::Offer {
                src_port: 1024,
                dest_port: 3,
                id: u64::MAX,
                addr: 0x7f00_1234_5678,
                len: 4 << 20,
            },
            Wire::Taken { id: 17 },
        ];
        for w in all {
            assert_eq!(decode(&encode(&w)).unwrap(), w);
        }
    }

    #[test]
    fn info_words_round_trip_and_bad_ones_are_refused() {
        for (f, s, d) in [(false, 0, 0), (true, 1022, 5), (false, 1024, 1024)] {
            assert_eq!(parse_info(data_info(f, s, d)), Ok(Some((f, s, d))));
        }
        assert_eq!(parse_info(0), Ok(None));
        for bad in [
            1,
            INFO_DATA | 1025,
            INFO_DATA | (1025 << PORT_BITS),
            INFO_DATA | (1 << 29),
        ] {
            assert!(parse_info(bad).is_err(), "{bad:#x}");
        }
    }

    #[test]
    fn malformed_payloads_are_refused() {
        for bad in [
            &[][..],
            &[9],
            &[1, 0, 0, 0],
            &[1, 4, 0, 0, 0, 0, 0, 0, 0],
            &[1, 0, 0, 0, 0, 0x01, 0x04, 0, 0],
            &[1, 0, 0, 0, 0, 0, 0, 0x01, 0x04],
            &[2, 0],
            &[2, 0, 0, 0],
            &[2, 0, 0, 0, 0, 0, 0],
            &[8, 0, 0],
            &[9, 0],
            &[3, 0, 0, 0],
            &[5, 0],
            &[6],
            &[7],
            &[10, 0, 0, 0, 0],
            &[11, 1, 2, 3],
            &[11, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        ] {
            assert!(decode(bad).is_err(), "{bad:?}");
        }
        // An offer naming a port past the last.
        let mut offer = encode(&Wire::Offer {
            src_port: 0,
            dest_port: 0,
            id: 1,
            addr: 2,
            len: 3,
        });
        offer[3..5].copy_from_slice(&1025u16.to_le_bytes());
        assert!(
            decode(&offer)
                .unwrap_err()
                .contains("destination port 1025")
        );
        for cut in 0..offer.len() {
            assert!(decode(&offer[..cut]).is_err(), "{cut} bytes");
        }
    }
}
