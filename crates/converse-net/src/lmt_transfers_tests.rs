//! The transfer engine between two ends in one process: each end's
//! packets go into the other's queue as frames, and test hooks move the
//! bytes through a shared "memory" (buffers named by a number, as a
//! cookie's address names memory of the other process).
use super::*;
use crate::frame::FRAME_HEADER_SIZE;
use crate::lmt::COOKIE_LEN;
use std::collections::VecDeque;
use std::sync::Arc;

const MAX: usize = 1 << 20;

/// Memory both ends reach: buffers by address.
#[derive(Default)]
struct Memory {
    buffers: Mutex<HashMap<u64, Vec<u8>>>,
    next: AtomicU64,
}

impl Memory {
    fn put(&self, bytes: Vec<u8>) -> u64 {
        let addr = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        lock(&self.buffers).insert(addr, bytes);
        addr
    }
}

/// One end of the VC: its frames to the other end.
struct End {
    me: usize,
    peer: usize,
    out: Mutex<VecDeque<(FrameHeader, Vec<u8>)>>,
}

impl LmtVc for End {
    fn peer(&self) -> usize {
        self.peer
    }
    fn send_packet(&self, base: FrameHeader, packet: Packet) -> Result<(), NetError> {
        let h = FrameHeader {
            src: self.me as u32,
            ..packet.header_from(base)
        };
        lock(&self.out).push_back((h, packet.encode()));
        Ok(())
    }
    fn send_data(&self, t: &mut SendTransfer) -> Result<(), NetError> {
        let msg = t.msg.take().expect("lent");
        let h = FrameHeader {
            kind: FrameKind::LmtData,
            flags: FROM_SENDER,
            len: msg.len() as u32,
            src: self.me as u32,
            tag: t.id as u32,
        };
        lock(&self.out).push_back((h, msg.as_bytes().to_vec()));
        Ok(())
    }
}

/// The modes of the spec, over `Memory`.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// The receiver copies from the sender's buffer, then says DONE.
    Get,
    /// The receiver gives a buffer (CTS), the sender fills it, says DONE.
    Put,
    /// As Put, but the receiver moves its buffer after the CTS (COOKIE).
    PutMoved,
}

struct Hooks {
    mode: Mode,
    memory: Arc<Memory>,
    cookies: AtomicUsize,
    /// Where each end receives each Put transfer: (end, id) to address.
    put_at: Mutex<HashMap<(usize, u64), u64>>,
}

fn message(len: usize, seed: u8) -> Message {
    let mut bytes: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(seed)).collect();
    bytes[8..12].copy_from_slice(&(len as u32).to_le_bytes());
    Message::from_bytes(&bytes).unwrap()
}

impl LmtHooks<End> for Hooks {
    fn initiate_lmt(&self, vc: &End, t: &SendTransfer) -> Result<(), String> {
        let addr = match self.mode {
            Mode::Get => self
                .memory
                .put(t.msg.as_ref().expect("lent").as_bytes().to_vec()),
            _ => 0,
        };
        send_rts(vc, t, t.cookie(addr))
    }
    fn start_recv(&self, vc: &End, t: &mut RecvTransfer, s: Cookie) -> Result<Progress, String> {
        match self.mode {
            Mode::Get => {
                let bytes = lock(&self.memory.buffers)
                    .remove(&s.addr)
                    .ok_or("no such buffer")?;
                t.msg = Some(Message::from_bytes(&bytes).map_err(|e| e.to_string())?);
                send_done(vc, t.header, t.id, false)?;
                Ok(Progress::Done)
            }
            Mode::Put | Mode::PutMoved => {
                let addr = self.memory.put(vec![0; t.header.len as usize]);
                lock(&self.put_at).insert((vc.me, t.id), addr);
                send_cts(
                    vc,
                    t,
                    Cookie {
                        addr,
                        len: u64::from(t.header.len),
                        id: t.id,
                    },
                )?;
                if self.mode == Mode::PutMoved {
                    let moved = self.memory.put(vec![0; t.header.len as usize]);
                    lock(&self.memory.buffers).remove(&addr);
                    lock(&self.put_at).insert((vc.me, t.id), moved);
                    let cookie = Cookie {
                        addr: moved,
                        len: u64::from(t.header.len),
                        id: t.id,
                    };
                    send_cookie(vc, &Side::Receiving(t), cookie)?;
                }
                Ok(Progress::Pending)
            }
        }
    }
    fn start_send(&self, vc: &End, t: &mut SendTransfer, r: Cookie) -> Result<Progress, String> {
        if self.mode == Mode::PutMoved {
            // Its cookie changes next: write once it has.
            return Ok(Progress::Pending);
        }
        self.write(vc, t, r)
    }
    fn handle_cookie(&self, vc: &End, t: Side<'_>, cookie: Cookie) -> Result<Progress, String> {
        self.cookies.fetch_add(1, Ordering::Relaxed);
        match t {
            Side::Sending(t) => self.write(vc, t, cookie),
            Side::Receiving(_) => Err("a cookie from the sender".into()),
        }
    }
    fn done_send(&self, _: &End, _: &mut SendTransfer) -> Result<Progress, String> {
        Ok(Progress::Done)
    }
    fn done_recv(&self, vc: &End, t: &mut RecvTransfer) -> Result<Progress, String> {
        let addr = lock(&self.put_at)
            .remove(&(vc.me, t.id))
            .ok_or("no buffer given")?;
        let bytes = lock(&self.memory.buffers)
            .remove(&addr)
            .ok_or("no such buffer")?;
        t.msg = Some(Message::from_bytes(&bytes).map_err(|e| e.to_string())?);
        Ok(Progress::Done)
    }
}

impl Hooks {
    fn write(&self, vc: &End, t: &mut SendTransfer, r: Cookie) -> Result<Progress, String> {
        let mut buffers = lock(&self.memory.buffers);
        let buf = buffers.get_mut(&r.addr).ok_or("no such buffer")?;
        buf.copy_from_slice(t.msg.as_ref().expect("lent").as_bytes());
        drop(buffers);
        send_done(vc, t.header, t.id, true)?;
        Ok(Progress::Done)
    }
}

/// Two ends and their engines.
struct Pair {
    ends: [End; 2],
    transfers: [Transfers; 2],
}

fn pair() -> Pair {
    Pair {
        ends: [
            End {
                me: 0,
                peer: 1,
                out: Mutex::new(VecDeque::new()),
            },
            End {
                me: 1,
                peer: 0,
                out: Mutex::new(VecDeque::new()),
            },
        ],
        transfers: [Transfers::new(1, MAX), Transfers::new(0, MAX)],
    }
}

fn msg_header(len: usize, tag: u32) -> FrameHeader {
    FrameHeader {
        kind: FrameKind::Message,
        flags: 0,
        len: len as u32,
        src: 0,
        tag,
    }
}

impl Pair {
    /// Moves frames both ways until none is left; the messages each end
    /// handed up, or the first error.
    fn run(&self, hooks: &dyn LmtHooks<End>) -> Result<[Vec<(FrameHeader, Message)>; 2], String> {
        let mut got = [Vec::new(), Vec::new()];
        loop {
            let mut moved = false;
            for (to, got) in got.iter_mut().enumerate() {
                let frame = lock(&self.ends[1 - to].out).pop_front();
                let Some((h, body)) = frame else { continue };
                moved = true;
                let body = if h.kind == FrameKind::LmtData {
                    FrameBody::Message(Message::from_bytes(&body).unwrap())
                } else {
                    FrameBody::Bytes(body)
                };
                if let Some(m) = self.transfers[to].on_frame(&self.ends[to], hooks, h, body)? {
                    got.push(m);
                }
            }
            if !moved {
                return Ok(got);
            }
        }
    }
}

fn hooks(mode: Mode) -> Hooks {
    Hooks {
        mode,
        memory: Arc::new(Memory::default()),
        cookies: AtomicUsize::new(0),
        put_at: Mutex::new(HashMap::new()),
    }
}

/// Every mode moves messages both ways at once, with the same ids each
/// way; each arrives whole with its header, and every lent buffer comes
/// back.
#[test]
fn every_mode_moves_messages_both_ways() {
    let cases: [(&str, Box<dyn LmtHooks<End>>); 4] = [
        ("null", Box::new(NullHooks)),
        ("get", Box::new(hooks(Mode::Get))),
        ("put", Box::new(hooks(Mode::Put))),
        ("put with a cookie change", Box::new(hooks(Mode::PutMoved))),
    ];
    for (name, hooks) in cases {
        let p = pair();
        let mut sent = [Vec::new(), Vec::new()];
        for (k, len) in [64usize, 5000, 70_000].into_iter().enumerate() {
            for (from, sent) in sent.iter_mut().enumerate() {
                let m = message(len, 3 + k as u8 + from as u8);
                sent.push(m.as_bytes().to_vec());
                let id = p.transfers[from]
                    .send(&p.ends[from], &*hooks, msg_header(len, 40 + k as u32), m)
                    .unwrap();
                assert_eq!(id, k as u64 + 1, "{name}: the same ids each way");
            }
        }
        assert!(p.transfers[0].lent_bytes() > 0);
        let got = p.run(&*hooks).unwrap_or_else(|e| panic!("{name}: {e}"));
        for (to, got) in got.iter().enumerate() {
            assert_eq!(got.len(), 3, "{name}");
            for (k, (h, m)) in got.iter().enumerate() {
                assert_eq!(
                    (h.kind, h.tag, h.len as usize),
                    (FrameKind::Message, 40 + k as u32, m.len()),
                    "{name}"
                );
                assert!(
                    m.as_bytes() == sent[1 - to][k],
                    "{name}: message {k} to {to}"
                );
            }
            assert_eq!(p.transfers[to].lent_bytes(), 0, "{name}: lent buffers back");
            assert!(!p.transfers[to].receiving(), "{name}");
        }
    }
}

/// A cookie change reaches the sender's hook (`lmt_handle_cookie`).
#[test]
fn a_changed_cookie_reaches_the_senders_hook() {
    let p = pair();
    let h = hooks(Mode::PutMoved);
    p.transfers[0]
        .send(&p.ends[0], &h, msg_header(100, 1), message(100, 5))
        .unwrap();
    let got = p.run(&h).unwrap();
    assert_eq!(got[1].len(), 1);
    assert_eq!(h.cookies.load(Ordering::Relaxed), 1);
}

/// Packets about no transfer in flight (each way), twice, or
/// with the wrong length are refused, naming the peer; none panics.
#[test]
fn malformed_packets_are_refused_naming_the_peer() {
    let p = pair();
    let end = &p.ends[1];
    let t = &p.transfers[1];
    let frame = |p: Packet, flags: u8| {
        let h = FrameHeader {
            flags,
            ..p.header_from(msg_header(0, 0))
        };
        (h, FrameBody::Bytes(p.encode()))
    };
    let cookie = |id, len| Cookie { addr: 0, len, id };
    let cases = [
        (
            frame(Packet::Cts(cookie(9, 100)), 0),
            "clear to send transfer 9, which this process is not sending",
        ),
        (
            frame(Packet::Done { id: 9 }, 0),
            "done with transfer 9, which this process is not sending",
        ),
        (
            frame(Packet::Done { id: 9 }, FROM_SENDER),
            "done with transfer 9, which this process is not receiving",
        ),
        (
            frame(Packet::Cookie(cookie(9, 100)), FROM_SENDER),
            "a cookie for transfer 9, which this process is not receiving",
        ),
        (
            frame(Packet::Rts(cookie(9, 4)), FROM_SENDER),
            "a large message of 4 bytes",
        ),
        (
            frame(Packet::Rts(cookie(9, MAX as u64 + 1)), FROM_SENDER),
            "(at most 1048576)",
        ),
    ];
    for ((h, body), want) in cases {
        let e = t.on_frame(end, &NullHooks, h, body).unwrap_err();
        assert!(e.contains("process 0") && e.contains(want), "{e}");
    }
    // A second RTS with an id in flight; data of the wrong length; data
    // of no transfer.
    let (h, body) = frame(Packet::Rts(cookie(3, 100)), FROM_SENDER);
    assert!(t.on_frame(end, &NullHooks, h, body).unwrap().is_none());
    let (h, body) = frame(Packet::Rts(cookie(3, 100)), FROM_SENDER);
    let e = t.on_frame(end, &NullHooks, h, body).unwrap_err();
    assert!(e.contains("a second transfer 3"), "{e}");
    let data = |id: u32, len: usize| {
        let h = FrameHeader {
            kind: FrameKind::LmtData,
            flags: FROM_SENDER,
            len: len as u32,
            src: 0,
            tag: id,
        };
        (h, FrameBody::Message(message(len, 1)))
    };
    let (h, body) = data(3, 99);
    let e = t.on_frame(end, &NullHooks, h, body).unwrap_err();
    assert!(
        e.contains("99 bytes of data for transfer 3 of 100 bytes"),
        "{e}"
    );
    let (h, body) = data(4, 100);
    let e = t.on_frame(end, &NullHooks, h, body).unwrap_err();
    assert!(
        e.contains("data of transfer 4, which is not in flight"),
        "{e}"
    );
    // The null mode sends no DONE or COOKIE.
    let p = pair();
    p.transfers[0]
        .send(&p.ends[0], &NullHooks, msg_header(100, 1), message(100, 2))
        .unwrap();
    let (h, body) = frame(Packet::Done { id: 1 }, 0);
    let e = p.transfers[0]
        .on_frame(&p.ends[0], &NullHooks, h, body)
        .unwrap_err();
    assert!(e.contains("of the null mode"), "{e}");
    // Bodies of every LMT kind and any length parse or are refused.
    for kind in [
        FrameKind::LmtRts,
        FrameKind::LmtCts,
        FrameKind::LmtCookie,
        FrameKind::LmtDone,
    ] {
        for len in [0, 7, 8, COOKIE_LEN, 40] {
            let h = FrameHeader {
                kind,
                flags: 0,
                len: len as u32,
                src: 0,
                tag: 0,
            };
            let _ = t.on_frame(end, &NullHooks, h, FrameBody::Bytes(vec![0xAB; len]));
        }
    }
    assert_eq!(FRAME_HEADER_SIZE, 16);
}

/// A send whose hook fails is not left in flight; `abandon` gives back
/// what was lent.
#[test]
fn failed_sends_and_abandoned_transfers_lend_nothing() {
    struct Refuse;
    impl LmtHooks<End> for Refuse {
        fn initiate_lmt(&self, _: &End, _: &SendTransfer) -> Result<(), String> {
            Err("no room".into())
        }
        fn start_recv(&self, _: &End, _: &mut RecvTransfer, _: Cookie) -> Result<Progress, String> {
            unreachable!()
        }
        fn start_send(&self, _: &End, _: &mut SendTransfer, _: Cookie) -> Result<Progress, String> {
            unreachable!()
        }
        fn handle_cookie(&self, _: &End, _: Side<'_>, _: Cookie) -> Result<Progress, String> {
            unreachable!()
        }
        fn done_send(&self, _: &End, _: &mut SendTransfer) -> Result<Progress, String> {
            unreachable!()
        }
        fn done_recv(&self, _: &End, _: &mut RecvTransfer) -> Result<Progress, String> {
            unreachable!()
        }
    }
    let p = pair();
    let e = p.transfers[0]
        .send(&p.ends[0], &Refuse, msg_header(64, 1), message(64, 1))
        .unwrap_err();
    assert_eq!(e, NetError::peer(1, "no room"));
    assert_eq!(p.transfers[0].lent_bytes(), 0);
    p.transfers[0]
        .send(&p.ends[0], &NullHooks, msg_header(64, 1), message(64, 1))
        .unwrap();
    assert_eq!(p.transfers[0].abandon(), 64);
    assert_eq!(p.transfers[0].lent_bytes(), 0);
}

/// Ids stay below 2^32 and skip one still in flight when they wrap.
#[test]
fn ids_wrap_below_two_to_the_32_past_those_in_flight() {
    let p = pair();
    let t = &p.transfers[0];
    let send = || {
        t.send(&p.ends[0], &NullHooks, msg_header(64, 1), message(64, 1))
            .unwrap()
    };
    assert_eq!(send(), 1);
    t.set_next(u64::from(u32::MAX));
    assert_eq!(send(), u64::from(u32::MAX));
    // 2^32 wraps to 0, then 1 is still in flight: 2.
    assert_eq!(send(), 0);
    assert_eq!(send(), 2);
    assert_eq!(t.lent_bytes(), 4 * 64);
}
