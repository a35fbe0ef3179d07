//! The large-message transfer's packets (the Nemesis spec's LMT), as data:
//! the ready-to-send with the sender's cookie (`LmtRts`), the
//! clear-to-send with the receiver's (`LmtCts`), a cookie changed during a
//! transfer (`LmtCookie`), and the end of a transfer (`LmtDone`). A module
//! sends them as frames of their kind (`frame`) and reads them back with
//! [`Packet::parse`]; which hook each goes to, and what the transfers in
//! flight are, is `lmt_transfers`' business (the spec's hooks and its CH3
//! side). shm runs [`Mode::Get`] (`LmtRts` lends the sender's buffer, the
//! receiver reads it, `LmtDone` gives it back), [`Mode::Put`] (`LmtRts`
//! asks for a buffer, `LmtCts` gives the receiver's, the sender writes it,
//! `LmtDone` tells the receiver it is full) and [`Mode::Cooperative`]
//! (`LmtRts`, `LmtCts`, then the message through the cells both processes
//! copy through: the Null mode's exchange).
//!
//! A cookie is what the other side needs to move the bytes: here the
//! address and length of a buffer and the transfer's id (the spec leaves
//! its contents to the module).
//!
//! # Invariants
//!
//! - A packet's frame body is exactly its fixed size; anything else is
//!   malformed, and [`Packet::parse`] says so naming the kind and size. It
//!   never panics and never trusts a length without checking it against
//!   the receiver's limit.
//! - `encode` then `parse` gives the same packet back, whatever the
//!   frame stream around it and however it is cut (the reassembler's
//!   business; tested below).
use crate::frame::{FrameHeader, FrameKind};

/// How shm moves a message too large for its ordinary path (the spec's
/// transfer modes; its `Null` mode, `lmt_transfers::NullHooks`, is what a
/// module with no hooks of its own runs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// The receiver reads the sender's buffer (shm: `process_vm_readv`):
    /// RTS with the sender's cookie, DONE back. The default: no round
    /// trip before the bytes move, and the sender's stream goes on.
    #[default]
    Get,
    /// The sender writes into the receiver's buffer (shm:
    /// `process_vm_writev`): RTS, CTS with the receiver's cookie, DONE.
    /// The receiver allocates the message only when it answers, and the
    /// sender's later messages to that process wait for the CTS.
    Put,
    /// Both sides copy through shared buffers (shm: RTS, CTS, then the
    /// cells, the sender filling while the receiver empties; no DONE).
    Cooperative,
}

impl Mode {
    /// Every mode, by the name `++lmt` takes.
    pub const NAMES: [(&'static str, Mode); 3] = [
        ("get", Mode::Get),
        ("put", Mode::Put),
        ("coop", Mode::Cooperative),
    ];

    /// The mode `name` spells (`get`, `put`, `coop`), if any.
    pub fn parse(name: &str) -> Option<Mode> {
        Self::NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, m)| m)
    }

    /// The name `++lmt` spells it by.
    pub fn name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(_, m)| *m == self)
            .map(|&(n, _)| n)
            .expect("every mode is named")
    }
}

/// A buffer in one process that the other may read or write (the spec's
/// cookie): its address there, its length, and the transfer's id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cookie {
    /// The buffer's address in the process that owns it.
    pub addr: u64,
    /// Its length in bytes.
    pub len: u64,
    /// The transfer it belongs to (chosen by the sender, unique among its
    /// transfers in flight to that peer).
    pub id: u64,
}

/// Bytes of an encoded [`Cookie`].
pub const COOKIE_LEN: usize = 24;

impl Cookie {
    fn encode(&self) -> [u8; COOKIE_LEN] {
        let mut b = [0u8; COOKIE_LEN];
        b[..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..16].copy_from_slice(&self.len.to_le_bytes());
        b[16..].copy_from_slice(&self.id.to_le_bytes());
        b
    }

    fn decode(b: &[u8; COOKIE_LEN]) -> Cookie {
        let word = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        Cookie {
            addr: word(0),
            len: word(8),
            id: word(16),
        }
    }
}

/// One LMT packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packet {
    /// Ready to send: the sender's buffer (Get mode: the receiver reads
    /// it).
    Rts(Cookie),
    /// Clear to send: the receiver's buffer (Put mode: the sender writes
    /// it).
    Cts(Cookie),
    /// A cookie changed during the transfer.
    Cookie(Cookie),
    /// The transfer `id` is over.
    Done {
        /// The transfer.
        id: u64,
    },
}

impl Packet {
    /// The frame kind that carries it.
    pub fn kind(&self) -> FrameKind {
        match self {
            Packet::Rts(_) => FrameKind::LmtRts,
            Packet::Cts(_) => FrameKind::LmtCts,
            Packet::Cookie(_) => FrameKind::LmtCookie,
            Packet::Done { .. } => FrameKind::LmtDone,
        }
    }

    /// The frame body.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Packet::Rts(c) | Packet::Cts(c) | Packet::Cookie(c) => c.encode().to_vec(),
            Packet::Done { id } => id.to_le_bytes().to_vec(),
        }
    }

    /// The frame header of this packet: its kind and length, the rest
    /// (`src`, `tag`, `flags`) from `base`.
    pub fn header_from(&self, base: FrameHeader) -> FrameHeader {
        FrameHeader {
            kind: self.kind(),
            len: self.encode().len() as u32,
            ..base
        }
    }

    /// The frame header of this packet from process `src`.
    pub fn header(&self, src: usize) -> FrameHeader {
        FrameHeader {
            kind: self.kind(),
            flags: 0,
            len: match self {
                Packet::Done { .. } => 8,
                _ => COOKIE_LEN as u32,
            },
            src: src as u32,
            tag: 0,
        }
    }

    /// The packet a frame of `kind` with `body` carries, from process
    /// `peer`. A cookie may name at most `max_len` bytes (the receiver's
    /// payload limit). The error names the peer and what was wrong.
    pub fn parse(
        kind: FrameKind,
        body: &[u8],
        peer: usize,
        max_len: usize,
    ) -> Result<Packet, String> {
        let malformed = || {
            format!(
                "malformed data from process {peer}: a {kind:?} packet of {} bytes",
                body.len()
            )
        };
        let cookie = || -> Result<Cookie, String> {
            let bytes: &[u8; COOKIE_LEN] = body.try_into().map_err(|_| malformed())?;
            let c = Cookie::decode(bytes);
            if c.len > max_len as u64 {
                return Err(format!(
                    "malformed data from process {peer}: a large message of {} bytes (at most {max_len})",
                    c.len
                ));
            }
            Ok(c)
        };
        match kind {
            FrameKind::LmtRts => cookie().map(Packet::Rts),
            FrameKind::LmtCts => cookie().map(Packet::Cts),
            FrameKind::LmtCookie => cookie().map(Packet::Cookie),
            FrameKind::LmtDone => {
                let id: [u8; 8] = body.try_into().map_err(|_| malformed())?;
                Ok(Packet::Done {
                    id: u64::from_le_bytes(id),
                })
            }
            FrameKind::Message | FrameKind::Control | FrameKind::LmtData => {
                Err(format!("process {peer}: a {kind:?} frame is no LMT packet"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{FRAME_HEADER_SIZE, FrameBody, Reassembler};
    use proptest::prelude::*;

    const MAX: usize = 1 << 30;

    fn cookie() -> impl Strategy<Value = Cookie> {
        (any::<u64>(), 0..=MAX as u64, any::<u64>()).prop_map(|(addr, len, id)| Cookie {
            addr,
            len,
            id,
        })
    }

    fn packet() -> impl Strategy<Value = Packet> {
        prop_oneof![
            cookie().prop_map(Packet::Rts),
            cookie().prop_map(Packet::Cts),
            cookie().prop_map(Packet::Cookie),
            any::<u64>().prop_map(|id| Packet::Done { id }),
        ]
    }

    /// A frame of a stream: an LMT packet, or other bytes between them.
    #[derive(Clone, Debug)]
    enum Item {
        Lmt(Packet),
        Control(Vec<u8>),
    }

    fn item() -> impl Strategy<Value = Item> {
        prop_oneof![
            packet().prop_map(Item::Lmt),
            proptest::collection::vec(any::<u8>(), 0..40).prop_map(Item::Control),
        ]
    }

    proptest! {
        /// The cookie exchange survives any chunking of the stream: every
        /// packet comes back equal, in order, among the other frames.
        #[test]
        fn packets_come_back_under_any_chunking(
            items in proptest::collection::vec(item(), 1..20),
            cuts in proptest::collection::vec(1usize..64, 1..50),
        ) {
            let mut stream = Vec::new();
            for it in &items {
                let (h, body) = match it {
                    Item::Lmt(p) => (p.header(3), p.encode()),
                    Item::Control(b) => (
                        FrameHeader { kind: FrameKind::Control, flags: 0, len: b.len() as u32, src: 3, tag: 0 },
                        b.clone(),
                    ),
                };
                stream.extend_from_slice(&h.encode());
                stream.extend_from_slice(&body);
            }
            let mut reasm = Reassembler::new(3, MAX);
            let mut got: Vec<Item> = Vec::new();
            let mut rest = &stream[..];
            let mut k = 0;
            while !rest.is_empty() {
                let n = cuts[k % cuts.len()].min(rest.len());
                k += 1;
                reasm.handle(&rest[..n], |h, body| {
                    let bytes = match body {
                        FrameBody::Bytes(b) => b,
                        FrameBody::Message(m) => m.as_bytes().to_vec(),
                    };
                    got.push(match h.kind {
                        FrameKind::Control => Item::Control(bytes),
                        kind => Item::Lmt(Packet::parse(kind, &bytes, 3, MAX).unwrap()),
                    });
                }).unwrap();
                rest = &rest[n..];
            }
            prop_assert!(reasm.is_idle());
            prop_assert_eq!(got.len(), items.len());
            for (g, w) in got.iter().zip(&items) {
                match (g, w) {
                    (Item::Lmt(a), Item::Lmt(b)) => prop_assert_eq!(a, b),
                    (Item::Control(a), Item::Control(b)) => prop_assert_eq!(a, b),
                    _ => prop_assert!(false, "{g:?} for {w:?}"),
                }
            }
        }

        /// Any body of any LMT kind parses or is refused with the peer
        /// named; it never panics.
        #[test]
        fn parse_never_panics(kind in 3u8..=6, body in proptest::collection::vec(any::<u8>(), 0..40)) {
            let kind = match kind {
                3 => FrameKind::LmtRts,
                4 => FrameKind::LmtCts,
                5 => FrameKind::LmtCookie,
                _ => FrameKind::LmtDone,
            };
            if let Err(e) = Packet::parse(kind, &body, 9, 1000) {
                prop_assert!(e.contains("process 9"), "{}", e);
            }
        }
    }

    #[test]
    fn modes_are_named() {
        for (name, mode) in Mode::NAMES {
            assert_eq!(Mode::parse(name), Some(mode));
            assert_eq!(mode.name(), name);
        }
        assert_eq!(Mode::parse("rdma"), None);
        assert_eq!(Mode::default(), Mode::Get);
    }

    #[test]
    fn sizes_and_limits_are_checked() {
        let rts = Packet::Rts(Cookie {
            addr: 1,
            len: 2000,
            id: 3,
        });
        let e = Packet::parse(FrameKind::LmtRts, &rts.encode(), 1, 1000).unwrap_err();
        assert!(
            e.contains("a large message of 2000 bytes (at most 1000)"),
            "{e}"
        );
        let e = Packet::parse(FrameKind::LmtRts, &[0; 8], 1, 1000).unwrap_err();
        assert_eq!(
            e,
            "malformed data from process 1: a LmtRts packet of 8 bytes"
        );
        let e = Packet::parse(FrameKind::LmtDone, &[0; 9], 1, 1000).unwrap_err();
        assert_eq!(
            e,
            "malformed data from process 1: a LmtDone packet of 9 bytes"
        );
        assert_eq!(
            Packet::parse(FrameKind::LmtDone, &7u64.to_le_bytes(), 1, 1000),
            Ok(Packet::Done { id: 7 })
        );
        assert_eq!(rts.header(5).len as usize, COOKIE_LEN);
        assert_eq!(FRAME_HEADER_SIZE, 16);
    }
}
