//! Every send function of the Cmi layer: to a PE, to a node, vectors of
//! pieces, several messages in one go; ordering, exactly-once node delivery,
//! self-sends, empty and large payloads, and an oversubscribed ring.
use crate::common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use converse::{Message, my_node, my_pe};

/// What a logging handler saw: a tag naming the handler, the receiving PE and
/// the message's payload, header handler index and source PE.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    tag: &'static str,
    pe: usize,
    payload: Vec<u8>,
    handler: usize,
    src: usize,
}

type Log = Arc<Mutex<Vec<Seen>>>;

/// A handler that appends what it receives to `log` and ends the job with
/// exit code 0 once `log` holds `total` entries.
fn logger(tag: &'static str, log: &Log, total: usize) -> impl Fn(Message) + 'static {
    let log = log.clone();
    move |msg: Message| {
        let full = {
            let mut log = log.lock().unwrap();
            log.push(Seen {
                tag,
                pe: my_pe(),
                payload: msg.payload().to_vec(),
                handler: msg.handler(),
                src: msg.src_pe(),
            });
            log.len() == total
        };
        if full {
            converse::exit(0);
        }
    }
}

fn payloads(log: &Log) -> Vec<Vec<u8>> {
    log.lock()
        .unwrap()
        .iter()
        .map(|s| s.payload.clone())
        .collect()
}

#[test]
fn sync_send_copies_and_the_message_stays_reusable() {
    let log: Log = Arc::default();
    let l = log.clone();
    let code = common::run(2, 2, move |_| {
        let h = converse::register_handler(logger("recv", &l, 3));
        if my_pe() == 0 {
            let mut msg = Message::from_payload(h, b"payload one");
            let before = msg.as_bytes().to_vec();
            converse::sync_send(1, &msg);
            // The caller's message is untouched (header included) and reusable.
            assert_eq!(msg.as_bytes(), &before[..]);
            msg.payload_mut()[8..].copy_from_slice(b"two");
            converse::sync_send(1, &msg);
            assert_eq!(msg.payload(), b"payload two");
            converse::sync_send_and_free(1, msg);
        }
    });
    assert_eq!(code, 0);
    let log = log.lock().unwrap();
    let got: Vec<&[u8]> = log.iter().map(|s| &s.payload[..]).collect();
    assert_eq!(
        got,
        [&b"payload one"[..], b"payload two", b"payload two"],
        "in send order, each with the payload at the time of its send"
    );
    assert!(
        log.iter()
            .all(|s| s.pe == 1 && s.src == 0 && s.handler == log[0].handler)
    );
}

#[test]
fn async_send_handle_reports_sent_and_releases() {
    let log: Log = Arc::default();
    let l = log.clone();
    let code = common::run(2, 1, move |_| {
        let h = converse::register_handler(logger("recv", &l, 2));
        if my_pe() == 1 {
            let mut msg = Message::from_payload(h, b"async 1");
            let before = msg.as_bytes().to_vec();
            let handle = converse::async_send(0, &msg);
            while !handle.is_sent() {
                std::hint::spin_loop();
            }
            assert!(handle.clone().is_sent());
            handle.release();
            assert_eq!(msg.as_bytes(), &before[..]);
            // Once sent, the buffer may be reused.
            msg.payload_mut()[6] = b'2';
            let handle = converse::async_send(0, &msg);
            while !handle.is_sent() {
                std::hint::spin_loop();
            }
            drop(handle);
        }
    });
    assert_eq!(code, 0);
    assert_eq!(payloads(&log), [b"async 1".to_vec(), b"async 2".to_vec()]);
    assert!(log.lock().unwrap().iter().all(|s| s.pe == 0 && s.src == 1));
}

#[test]
fn node_sends_reach_a_pe_of_the_destination_node() {
    let log: Log = Arc::default();
    let l = log.clone();
    // Two nodes of two PEs; PE 0 sends to node 1 with each node-send flavour.
    let code = common::run(4, 2, move |_| {
        let h = converse::register_handler(logger("node", &l, 3));
        if my_pe() == 0 {
            let mut msg = Message::from_payload(h, b"sync");
            let before = msg.as_bytes().to_vec();
            converse::sync_node_send(1, &msg);
            assert_eq!(msg.as_bytes(), &before[..]);
            msg.payload_mut().copy_from_slice(b"asyn");
            let handle = converse::async_node_send(1, &msg);
            while !handle.is_sent() {
                std::hint::spin_loop();
            }
            handle.release();
            assert_eq!(msg.payload(), b"asyn");
            converse::sync_node_send_and_free(1, Message::from_payload(h, b"free"));
        }
    });
    assert_eq!(code, 0);
    let log = log.lock().unwrap();
    let mut got: Vec<&[u8]> = log.iter().map(|s| &s.payload[..]).collect();
    got.sort();
    assert_eq!(got, [&b"asyn"[..], b"free", b"sync"]);
    for s in log.iter() {
        assert!(s.pe == 2 || s.pe == 3, "node 1 is PEs 2 and 3, got {s:?}");
        assert_eq!(s.src, 0);
    }
}

#[test]
fn vector_sends_concatenate_their_pieces() {
    let log: Log = Arc::default();
    let l = log.clone();
    let code = common::run(2, 2, move |_| {
        let h = converse::register_handler(logger("vec", &l, 5));
        if my_pe() == 0 {
            let header = Message::new(h, 0);
            let parts: Vec<Vec<u8>> = vec![
                header.as_bytes().to_vec(),
                b"hello ".to_vec(),
                b"vector ".to_vec(),
                b"world".to_vec(),
            ];
            converse::sync_vector_send(1, &parts);
            // The pieces are untouched and reusable.
            assert_eq!(parts[1], b"hello ");
            let handle = converse::async_vector_send(1, &parts);
            while !handle.is_sent() {
                std::hint::spin_loop();
            }
            handle.release();
            converse::sync_vector_send_and_free(1, parts);
            // Pieces of different kinds (slices) and a header split across two
            // pieces: the message is still their plain concatenation.
            let bytes = header.as_bytes();
            converse::sync_vector_send(1, &[&bytes[..10], &bytes[10..], b"split"]);
            // A header with no payload at all.
            converse::sync_vector_send(1, &[header.as_bytes()]);
        }
    });
    assert_eq!(code, 0);
    assert_eq!(
        payloads(&log),
        [
            b"hello vector world".to_vec(),
            b"hello vector world".to_vec(),
            b"hello vector world".to_vec(),
            b"split".to_vec(),
            vec![],
        ]
    );
    let log = log.lock().unwrap();
    assert!(log.iter().all(|s| s.pe == 1 && s.src == 0));
}

#[test]
fn vector_send_sets_the_size_field() {
    let sizes = Arc::new(Mutex::new(Vec::new()));
    let s = sizes.clone();
    let code = common::run(1, 1, move |_| {
        let s = s.clone();
        let h = converse::register_handler(move |msg: Message| {
            s.lock()
                .unwrap()
                .push((msg.len(), msg.header().total_size as usize));
            converse::exit(0);
        });
        // The header piece claims a zero-length payload; the runtime fixes it.
        let header = Message::new(h, 0);
        converse::sync_vector_send(0, &[header.as_bytes(), &[7u8; 100]]);
    });
    assert_eq!(code, 0);
    let expected = converse::MSG_HEADER_SIZE + 100;
    assert_eq!(*sizes.lock().unwrap(), [(expected, expected)]);
}

#[test]
fn multiple_send_delivers_each_message_to_its_handler_in_order() {
    let log: Log = Arc::default();
    let l = log.clone();
    let code = common::run(2, 2, move |_| {
        converse::init_multiple_send_routine();
        let a = converse::register_handler(logger("A", &l, 13));
        let b = converse::register_handler(logger("B", &l, 13));
        let c = converse::register_handler(logger("C", &l, 13));
        if my_pe() == 0 {
            let first = Message::from_payload(c, b"before");
            let m1 = Message::from_payload(a, b"one");
            let m2 = Message::from_payload(b, &[2u8; 40]);
            let m3 = Message::new(c, 0);
            let m4 = Message::from_payload(a, b"four, a little longer than a chunk");
            let last = Message::from_payload(b, b"after");
            let before = m2.as_bytes().to_vec();
            for dest in [1, 0] {
                converse::sync_send(dest, &first);
                converse::multiple_send(dest, &[&m1, &m2, &m3, &m4]);
                converse::sync_send(dest, &last);
            }
            // The messages are not consumed.
            assert_eq!(m2.as_bytes(), &before[..]);
            // A bundle of one, and an empty bundle, are fine too.
            converse::multiple_send(1, &[&m1]);
            converse::multiple_send(1, &[]);
        }
    });
    assert_eq!(code, 0);
    let log = log.lock().unwrap();
    for pe in [0, 1] {
        let seen: Vec<(&str, &[u8])> = log
            .iter()
            .filter(|s| s.pe == pe)
            .map(|s| (s.tag, &s.payload[..]))
            .collect();
        let mut expected: Vec<(&str, &[u8])> = vec![
            ("C", b"before"),
            ("A", b"one"),
            ("B", &[2u8; 40]),
            ("C", b""),
            ("A", b"four, a little longer than a chunk"),
            ("B", b"after"),
        ];
        if pe == 1 {
            expected.push(("A", b"one"));
        }
        assert_eq!(seen, expected, "messages on PE {pe}");
    }
    assert_eq!(log.len(), 13);
}

#[test]
fn messages_between_a_pair_of_pes_arrive_in_order_under_concurrency() {
    const PER_SENDER: u64 = 10_000;
    let received = Arc::new(AtomicUsize::new(0));
    let r = received.clone();
    let code = common::run(4, 4, move |_| {
        let r = r.clone();
        // Next sequence number expected from each PE (used on PE 0 only).
        let next = std::cell::RefCell::new(vec![0u64; converse::num_pes()]);
        let h = converse::register_handler(move |msg: Message| {
            let (src, seq) = (
                common::read_u64(&msg, 0) as usize,
                common::read_u64(&msg, 8),
            );
            assert_eq!(src, msg.src_pe());
            let mut next = next.borrow_mut();
            assert_eq!(
                seq, next[src],
                "message {seq} from PE {src} arrived out of order"
            );
            next[src] += 1;
            let total = r.fetch_add(1, Ordering::Relaxed) + 1;
            if total == 3 * PER_SENDER as usize {
                assert!(next[1..].iter().all(|&n| n == PER_SENDER));
                converse::exit(0);
            }
        });
        if my_pe() != 0 {
            let me = my_pe() as u64;
            for seq in 0..PER_SENDER {
                // Mix the send flavours; all keep the pair's order.
                let msg = common::msg_u64(h, &[me, seq]);
                match seq % 3 {
                    0 => converse::sync_send(0, &msg),
                    1 => converse::sync_send_and_free(0, msg),
                    _ => converse::async_send(0, &msg).release(),
                }
            }
        }
    });
    assert_eq!(code, 0);
    assert_eq!(received.load(Ordering::Relaxed), 30_000);
}

#[test]
fn node_sends_are_handled_exactly_once_by_a_pe_of_the_node() {
    const PER_PE: u64 = 500;
    const PES: u64 = 8;
    let handled = Arc::new(Mutex::new(Vec::new()));
    let hd = handled.clone();
    let code = common::run(8, 4, move |_| {
        let hd = hd.clone();
        let h = converse::register_handler(move |msg: Message| {
            assert_eq!(my_node(), 1);
            let done = {
                let mut hd = hd.lock().unwrap();
                hd.push((common::read_u64(&msg, 0), my_pe()));
                hd.len() as u64 == PER_PE * PES
            };
            if done {
                converse::exit(0);
            }
        });
        let me = my_pe() as u64;
        for i in 0..PER_PE {
            let msg = common::msg_u64(h, &[me * PER_PE + i]);
            match i % 3 {
                0 => converse::sync_node_send(1, &msg),
                1 => converse::sync_node_send_and_free(1, msg),
                _ => converse::async_node_send(1, &msg).release(),
            }
        }
    });
    assert_eq!(code, 0);
    let handled = handled.lock().unwrap();
    let mut count: HashMap<u64, usize> = HashMap::new();
    for &(id, pe) in handled.iter() {
        assert!(
            (4..8).contains(&pe),
            "node 1 is PEs 4..7, message {id} ran on PE {pe}"
        );
        *count.entry(id).or_default() += 1;
    }
    assert_eq!(count.len() as u64, PER_PE * PES, "every id handled");
    assert!(count.values().all(|&n| n == 1), "no id handled twice");
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 % 251) as u8).collect()
}

#[test]
fn self_sends_empty_payloads_and_a_large_payload() {
    const MIB: usize = 1 << 20;
    let log: Log = Arc::default();
    let l = log.clone();
    let code = common::run(2, 2, move |_| {
        // PE 1 sends the large message back to PE 0 and to itself.
        let echo = {
            let l = l.clone();
            move |msg: Message| {
                l.lock().unwrap().push(Seen {
                    tag: "echo",
                    pe: my_pe(),
                    payload: msg.payload().to_vec(),
                    handler: msg.handler(),
                    src: msg.src_pe(),
                });
                let mut msg = msg;
                msg.set_handler(msg.info() as usize);
                converse::sync_send(0, &msg);
                converse::sync_send_and_free(1, msg);
            }
        };
        let echo = converse::register_handler(echo);
        let h = converse::register_handler(logger("recv", &l, 9));
        if my_pe() == 0 {
            for i in 0..3u8 {
                converse::sync_send_and_free(0, Message::from_payload(h, &[i]));
            }
            converse::sync_send(0, &Message::new(h, 0));
            converse::sync_send(1, &Message::new(h, 0));
            let mut big = Message::from_payload(echo, &pattern(MIB));
            big.set_info(h as u32);
            converse::sync_send(1, &big);
            big.set_handler(h);
            converse::sync_send_and_free(0, big);
        }
    });
    assert_eq!(code, 0);
    let log = log.lock().unwrap();
    let on = |pe: usize| -> Vec<(&str, usize, usize)> {
        log.iter()
            .filter(|s| s.pe == pe)
            .map(|s| (s.tag, s.payload.len(), s.src))
            .collect()
    };
    let mut pe0 = on(0);
    // The echo from PE 1 and PE 0's own self-sends are not ordered.
    pe0.sort();
    assert_eq!(
        pe0,
        [
            ("recv", 0, 0),
            ("recv", 1, 0),
            ("recv", 1, 0),
            ("recv", 1, 0),
            ("recv", MIB, 0),
            ("recv", MIB, 1)
        ]
    );
    let mut pe1 = on(1);
    pe1.sort();
    assert_eq!(pe1, [("echo", MIB, 0), ("recv", 0, 0), ("recv", MIB, 1)]);
    let self_sent: Vec<&[u8]> = log
        .iter()
        .filter(|s| s.pe == 0 && s.payload.len() == 1)
        .map(|s| &s.payload[..])
        .collect();
    assert_eq!(self_sent, [[0u8], [1], [2]], "self-sends keep their order");
    let big = pattern(MIB);
    let bigs = log.iter().filter(|s| s.payload.len() == MIB);
    assert_eq!(bigs.clone().count(), 4);
    for s in bigs {
        assert!(s.payload == big, "large payload corrupted on PE {}", s.pe);
    }
}

#[test]
fn oversubscribed_ring_passes_a_token_ten_thousand_hops() {
    const HOPS: u64 = 10_000;
    let per_pe: Arc<Vec<AtomicUsize>> = Arc::new((0..8).map(|_| AtomicUsize::new(0)).collect());
    let end = Arc::new(Mutex::new(None));
    let (p, e) = (per_pe.clone(), end.clone());
    let code = common::run(8, 8, move |_| {
        let (p, e) = (p.clone(), e.clone());
        let token = converse::register_handler(move |mut msg: Message| {
            let hops = common::read_u64(&msg, 0) + 1;
            p[my_pe()].fetch_add(1, Ordering::Relaxed);
            if hops == HOPS {
                *e.lock().unwrap() = Some((hops, my_pe()));
                converse::exit(0);
            }
            msg.payload_mut()[..8].copy_from_slice(&hops.to_le_bytes());
            converse::sync_send_and_free((my_pe() + 1) % converse::num_pes(), msg);
        });
        if my_pe() == 0 {
            converse::sync_send_and_free(1, common::msg_u64(token, &[0]));
        }
    });
    assert_eq!(code, 0);
    // The k-th hop lands on PE k mod 8.
    assert_eq!(*end.lock().unwrap(), Some((HOPS, (HOPS % 8) as usize)));
    let counts: Vec<usize> = per_pe.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    assert_eq!(counts, [1250; 8]);
}

/// A handler that floods a busy PE can see when a send would block
/// (`would_block`): PE 1 sits in a handler while PE 0's handler sends to it
/// until `would_block(1)`; once PE 1 has taken every message, it is false
/// again. A PE never blocks on itself, and a node of this process never.
#[test]
fn a_flooding_handler_sees_when_a_send_would_block() {
    use std::sync::atomic::AtomicBool;
    static SENT: AtomicUsize = AtomicUsize::new(0);
    static TAKEN: AtomicUsize = AtomicUsize::new(0);
    static HOLDING: AtomicBool = AtomicBool::new(false);
    static RELEASED: AtomicBool = AtomicBool::new(false);
    let code = converse::Converse::new()
        .args(["prog", "+p", "2"])
        .run(|_| {
            let done = converse::register_handler(|_m: Message| {
                assert!(!converse::would_block(1), "PE 1 took every message");
                converse::exit(0);
            });
            let sink = converse::register_handler(move |_m: Message| {
                if TAKEN.fetch_add(1, Ordering::AcqRel) + 1 == SENT.load(Ordering::Acquire) {
                    converse::sync_send_and_free(0, Message::new(done, 0));
                }
            });
            let hold = converse::register_handler(|_m: Message| {
                HOLDING.store(true, Ordering::Release);
                while !RELEASED.load(Ordering::Acquire) {
                    std::thread::yield_now();
                }
            });
            let flood = converse::register_handler(move |_m: Message| {
                assert!(!converse::would_block(0), "a PE never blocks on itself");
                assert!(
                    !converse::node_would_block(0),
                    "nor on a node of its process"
                );
                // PE 1 is busy (in `hold`) for the whole flood, so nothing
                // is taken before `SENT` is known.
                while !HOLDING.load(Ordering::Acquire) {
                    std::thread::yield_now();
                }
                let mut sent = 0;
                while !converse::would_block(1) {
                    converse::sync_send_and_free(1, Message::new(sink, 0));
                    sent += 1;
                }
                assert!(sent > 1, "PE 1's inbox took more than one message first");
                SENT.store(sent, Ordering::Release);
                RELEASED.store(true, Ordering::Release);
            });
            if my_pe() == 1 {
                converse::sync_send_and_free(1, Message::new(hold, 0));
            } else {
                converse::sync_send_and_free(0, Message::new(flood, 0));
            }
        })
        .expect("the job starts");
    assert_eq!(code, 0);
    assert_eq!(TAKEN.load(Ordering::Acquire), SENT.load(Ordering::Acquire));
}
