//! Broadcasts, multicast groups, list sends and the spanning trees they travel
//! along (`cmi::bcast`, `cmi::group`, `cmi::spantree`): who receives what,
//! exactly once, with the payload intact and the root as sender; send order;
//! copy semantics; multicasts that race their group's definition; and the
//! spanning-tree queries, for 1 to 9 PEs in every node layout and several
//! branching factors.
//!
//! Every job ends by quiescence detection (PE 0 calls `exit(0)` once no
//! message is in flight anywhere), so a duplicate delivery is recorded before
//! the job ends and a lost one makes the job hang (caught by `within`).
use crate::common;
use common::*;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use converse::{CommHandle, Converse, Group, Message, SpanningTree, my_node, my_pe, num_pes};

// ---------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------

/// First payload word: what kind of traffic a message is.
const BCAST: u64 = 1;
const MCAST: u64 = 2;
const LIST: u64 = 3;
const FORWARDED: u64 = 4;

/// Number of `u64` words at the start of every test payload.
const WORDS: usize = 4;
/// Filler bytes after the words, derived from them (so a damaged or mixed-up
/// payload shows).
const FILLER: usize = 23;

/// The payload of a test message: `words` (little-endian) then filler bytes
/// that depend on every word.
fn body(words: [u64; WORDS]) -> Vec<u8> {
    let mut bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let seed = words.iter().fold(0x9e37_79b9u64, |a, &w| {
        a.wrapping_mul(1_000_003).wrapping_add(w)
    });
    bytes.extend((0..FILLER).map(|i| (seed >> (i % 8 * 8)) as u8 ^ i as u8));
    bytes
}

/// What a recording handler saw.
#[derive(Clone, Debug)]
struct Got {
    /// Receiving PE and its node (as `my_pe`/`my_node` said).
    pe: usize,
    node: usize,
    /// `src_pe()` and `handler()` of the message.
    src: usize,
    handler: usize,
    /// Whether the copy handed to the handler shares its buffer.
    shared: bool,
    payload: Vec<u8>,
}

impl Got {
    fn of(msg: &Message) -> Got {
        Got {
            pe: my_pe(),
            node: my_node(),
            src: msg.src_pe(),
            handler: msg.handler(),
            shared: msg.is_shared(),
            payload: msg.payload().to_vec(),
        }
    }

    fn word(&self, i: usize) -> u64 {
        u64::from_le_bytes(self.payload[i * 8..i * 8 + 8].try_into().unwrap())
    }

    fn words(&self) -> [u64; WORDS] {
        std::array::from_fn(|i| self.word(i))
    }

    /// Asserts the payload is exactly what `body` made from its words.
    fn assert_intact(&self, ctx: &str) {
        assert!(
            self.payload.len() == WORDS * 8 + FILLER && self.payload == body(self.words()),
            "{ctx}: damaged payload {self:?}"
        );
    }
}

type Log = Arc<Mutex<Vec<Got>>>;

/// A handler that records every message it receives in `log`.
fn recorder(log: &Log) -> impl Fn(Message) + 'static {
    let log = log.clone();
    move |msg: Message| log.lock().unwrap().push(Got::of(&msg))
}

/// Every layout of 1 to 9 PEs: each divisor of `p` is a valid `++ppn`.
fn layouts() -> Vec<(usize, usize)> {
    (1..=9)
        .flat_map(|p| {
            (1..=p)
                .filter(move |ppn| p % ppn == 0)
                .map(move |ppn| (p, ppn))
        })
        .collect()
}

/// A smaller set: 1 PE, each layout of 4, 6, 8 and 9 PEs, and 5 and 7 PEs
/// split both ways.
fn some_layouts() -> Vec<(usize, usize)> {
    layouts()
        .into_iter()
        .filter(|&(p, _)| matches!(p, 1 | 4 | 5 | 6 | 7 | 8 | 9))
        .collect()
}

/// Runs `start` on `p` PEs in nodes of `ppn`, with `++spantree-branch k` if
/// `k` is given, under a 20 s hang guard; returns the exit code.
fn job(
    p: usize,
    ppn: usize,
    k: Option<usize>,
    start: impl Fn(&[String]) + Send + Sync + 'static,
) -> i32 {
    let mut a = args(p, ppn);
    if let Some(k) = k {
        a.extend(["++spantree-branch".to_string(), k.to_string()]);
    }
    within(20, move || {
        Converse::new()
            .args(a)
            .run(start)
            .unwrap_or_else(|e| panic!("bad command line: {e}"))
    })
}

/// Ends the job with exit code 0 once it is quiescent. Called at the end of
/// `start` on every PE; acts on PE 0.
fn exit_when_quiet() {
    if my_pe() == 0 {
        converse::start_quiescence_detection(|| converse::exit(0));
    }
}

/// Waits for an asynchronous send to release its buffer.
fn wait(handle: CommHandle) {
    while !handle.is_sent() {
        std::hint::spin_loop();
    }
    handle.release();
}

// ---------------------------------------------------------------------------
// The twelve broadcasts
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
struct Bcast {
    name: &'static str,
    /// To nodes (one PE per node) rather than to PEs.
    node: bool,
    /// The caller (its node) included.
    all: bool,
    /// Takes `&Message` (the caller keeps its message).
    copies: bool,
}

const fn b(name: &'static str, node: bool, all: bool, copies: bool) -> Bcast {
    Bcast {
        name,
        node,
        all,
        copies,
    }
}

/// The twelve broadcast calls, indexed by "kind" in the payloads.
const BCASTS: [Bcast; 12] = [
    b("sync_broadcast", false, false, true),
    b("sync_broadcast_and_free", false, false, false),
    b("sync_broadcast_all", false, true, true),
    b("sync_broadcast_all_and_free", false, true, false),
    b("async_broadcast", false, false, true),
    b("async_broadcast_all", false, true, true),
    b("sync_node_broadcast", true, false, true),
    b("sync_node_broadcast_and_free", true, false, false),
    b("sync_node_broadcast_all", true, true, true),
    b("sync_node_broadcast_all_and_free", true, true, false),
    b("async_node_broadcast", true, false, true),
    b("async_node_broadcast_all", true, true, true),
];

/// Broadcasts `msg` with the copying broadcast `kind`.
fn bcast_ref(kind: usize, msg: &Message) {
    match kind {
        0 => converse::sync_broadcast(msg),
        2 => converse::sync_broadcast_all(msg),
        4 => wait(converse::async_broadcast(msg)),
        5 => wait(converse::async_broadcast_all(msg)),
        6 => converse::sync_node_broadcast(msg),
        8 => converse::sync_node_broadcast_all(msg),
        10 => wait(converse::async_node_broadcast(msg)),
        11 => wait(converse::async_node_broadcast_all(msg)),
        _ => panic!("{} is no copying broadcast", BCASTS[kind].name),
    }
}

/// Broadcasts `msg` with broadcast `kind`. For the copying kinds, checks that
/// the caller's message (header included) is untouched afterwards.
fn bcast(kind: usize, msg: Message) {
    match kind {
        1 => converse::sync_broadcast_and_free(msg),
        3 => converse::sync_broadcast_all_and_free(msg),
        7 => converse::sync_node_broadcast_and_free(msg),
        9 => converse::sync_node_broadcast_all_and_free(msg),
        _ => {
            let before = msg.as_bytes().to_vec();
            bcast_ref(kind, &msg);
            assert_eq!(
                msg.as_bytes(),
                &before[..],
                "{} changed the caller's message",
                BCASTS[kind].name
            );
        }
    }
}

/// Checks the deliveries in `got` (all of one broadcast of `kind` from
/// `root`, on `p` PEs in nodes of `ppn`): each PE (node) the call names got
/// it exactly once, no one else did; intact, from `root`, as a shared copy.
fn check_bcast_targets(got: &[&Got], p: usize, ppn: usize, root: usize, kind: usize, ctx: &str) {
    let bc = BCASTS[kind];
    let ctx = format!("{ctx} root={root} {}", bc.name);
    for g in got {
        g.assert_intact(&ctx);
        assert_eq!(g.src, root, "{ctx}: src_pe() is not the root: {g:?}");
        assert_eq!(g.node, g.pe / ppn, "{ctx}: my_node() on PE {}", g.pe);
        assert!(g.shared, "{ctx}: copy on PE {} is not shared", g.pe);
    }
    if bc.node {
        let nodes = p / ppn;
        let mut per_node = vec![Vec::new(); nodes];
        for g in got {
            per_node[g.node].push(g.pe);
        }
        for (n, pes) in per_node.iter().enumerate() {
            let expected = usize::from(n != root / ppn || bc.all);
            assert_eq!(
                pes.len(),
                expected,
                "{ctx}: node {n} should be handled by {expected} PE(s), was by PEs {pes:?}"
            );
        }
    } else {
        let mut per_pe = vec![0; p];
        for g in got {
            per_pe[g.pe] += 1;
        }
        let expected: Vec<usize> = (0..p).map(|q| usize::from(q != root || bc.all)).collect();
        assert_eq!(per_pe, expected, "{ctx}: deliveries per PE");
    }
}

/// Every PE sends each of the twelve broadcasts once, in order; every
/// delivery is checked, and the order in which each PE saw each root's
/// broadcasts.
#[test]
fn each_broadcast_reaches_exactly_its_targets_once_from_every_root() {
    for (p, ppn) in layouts() {
        for k in [1, 2, 4] {
            let log: Log = Arc::default();
            let l = log.clone();
            let code = job(p, ppn, Some(k), move |_| {
                let h = converse::register_handler(recorder(&l));
                let me = my_pe() as u64;
                for kind in 0..BCASTS.len() {
                    bcast(
                        kind,
                        Message::from_payload(h, &body([BCAST, me, kind as u64, 0])),
                    );
                }
                exit_when_quiet();
            });
            let ctx = format!("p={p} ppn={ppn} k={k}");
            assert_eq!(code, 0, "{ctx}");
            let log = log.lock().unwrap();
            assert!(
                log.iter()
                    .all(|g| g.word(0) == BCAST && g.handler == log[0].handler)
            );
            for root in 0..p {
                for kind in 0..BCASTS.len() {
                    let got: Vec<&Got> = log
                        .iter()
                        .filter(|g| g.word(1) == root as u64 && g.word(2) == kind as u64)
                        .collect();
                    check_bcast_targets(&got, p, ppn, root, kind, &ctx);
                }
                // Send order: on every PE, the broadcasts to PEs of one root
                // arrive in the order sent; so do the broadcasts to nodes on
                // nodes other than the root's (the root's own node may hand
                // its copies to any of its PEs, in any order).
                for q in 0..p {
                    let from_root = |node: bool| -> Vec<u64> {
                        log.iter()
                            .filter(|g| g.pe == q && g.word(1) == root as u64)
                            .filter(|g| BCASTS[g.word(2) as usize].node == node)
                            .map(|g| g.word(2))
                            .collect()
                    };
                    let pe_kinds = from_root(false);
                    assert!(
                        pe_kinds.is_sorted(),
                        "{ctx}: PE {q} got root {root}'s broadcasts in the order {pe_kinds:?}"
                    );
                    if q / ppn != root / ppn {
                        let node_kinds = from_root(true);
                        assert!(
                            node_kinds.is_sorted(),
                            "{ctx}: PE {q} got root {root}'s node broadcasts in the order {node_kinds:?}"
                        );
                    }
                }
            }
        }
    }
}

/// Many broadcasts from one non-zero root, the kinds mixed: every PE sees them
/// in send order.
#[test]
fn broadcasts_from_one_root_arrive_in_send_order() {
    const N: u64 = 60;
    for (p, ppn) in some_layouts() {
        for k in [1, 2] {
            let root = p - 1 - (p - 1) / 3;
            let log: Log = Arc::default();
            let l = log.clone();
            let code = job(p, ppn, Some(k), move |_| {
                let h = converse::register_handler(recorder(&l));
                if my_pe() == root {
                    for seq in 0..N {
                        // Cycle through the six broadcasts to PEs.
                        let kind = (seq % 6) as usize;
                        let msg =
                            Message::from_payload(h, &body([BCAST, root as u64, kind as u64, seq]));
                        bcast(kind, msg);
                    }
                    for seq in 0..N {
                        let kind = 6 + (seq % 6) as usize;
                        let msg =
                            Message::from_payload(h, &body([BCAST, root as u64, kind as u64, seq]));
                        bcast(kind, msg);
                    }
                }
                exit_when_quiet();
            });
            let ctx = format!("p={p} ppn={ppn} k={k} root={root}");
            assert_eq!(code, 0, "{ctx}");
            let log = log.lock().unwrap();
            for q in 0..p {
                let seqs = |node: bool| -> Vec<u64> {
                    log.iter()
                        .filter(|g| g.pe == q && BCASTS[g.word(2) as usize].node == node)
                        .map(|g| g.word(3))
                        .collect()
                };
                // The root gets only the "all" kinds, the others every one.
                let expected: Vec<u64> = (0..N)
                    .filter(|s| q != root || BCASTS[(s % 6) as usize].all)
                    .collect();
                assert_eq!(seqs(false), expected, "{ctx}: broadcasts seen by PE {q}");
                if q / ppn != root / ppn && q % ppn == 0 {
                    // On a node other than the root's, a node broadcast is
                    // handled by the node's first PE, where the tree brings
                    // it (`cmi::bcast`, "Route").
                    let expected: Vec<u64> = (0..N).collect();
                    assert_eq!(
                        seqs(true),
                        expected,
                        "{ctx}: node broadcasts seen by PE {q}"
                    );
                }
            }
            for seq in 0..N {
                for node in 0..p / ppn {
                    let n = log
                        .iter()
                        .filter(|g| BCASTS[g.word(2) as usize].node && g.word(3) == seq)
                        .filter(|g| g.node == node)
                        .count();
                    let all = BCASTS[6 + (seq % 6) as usize].all;
                    assert_eq!(
                        n,
                        usize::from(node != root / ppn || all),
                        "{ctx}: node broadcast {seq} on node {node}"
                    );
                }
            }
        }
    }
}

/// Payloads of many sizes (none, under and over a 16-byte chunk, large) come
/// through broadcasts intact. Each kind has a handler of its own (empty
/// payloads cannot say which call sent them).
#[test]
fn broadcast_payloads_of_every_size_arrive_intact() {
    const SIZES: [usize; 8] = [0, 1, 15, 16, 17, 33, 4096, 100_003];
    const KINDS: [usize; 5] = [0, 3, 5, 8, 9];
    fn pattern(size: usize, kind: usize) -> Vec<u8> {
        (0..size).map(|i| (i * 7 + size + kind) as u8).collect()
    }
    for (p, ppn) in [(1, 1), (3, 1), (6, 2), (8, 4)] {
        let log: Log = Arc::default();
        let handlers = Arc::new(Mutex::new(Vec::new()));
        let (l, hs) = (log.clone(), handlers.clone());
        let root = p / 2;
        let code = job(p, ppn, None, move |_| {
            let h: Vec<usize> = KINDS
                .iter()
                .map(|_| converse::register_handler(recorder(&l)))
                .collect();
            if my_pe() == 0 {
                *hs.lock().unwrap() = h.clone();
            }
            if my_pe() == root {
                for size in SIZES {
                    for (i, kind) in KINDS.into_iter().enumerate() {
                        bcast(kind, Message::from_payload(h[i], &pattern(size, kind)));
                    }
                }
            }
            exit_when_quiet();
        });
        let ctx = format!("p={p} ppn={ppn}");
        assert_eq!(code, 0, "{ctx}");
        let log = log.lock().unwrap();
        let handlers = handlers.lock().unwrap();
        assert!(log.iter().all(|g| g.src == root), "{ctx}");
        let nodes = p / ppn;
        let mut total = 0;
        for size in SIZES {
            for (i, kind) in KINDS.into_iter().enumerate() {
                let bc = BCASTS[kind];
                let want = pattern(size, kind);
                let n = log
                    .iter()
                    .filter(|g| g.handler == handlers[i] && g.payload == want)
                    .count();
                let expected = match (bc.node, bc.all) {
                    (false, false) => p - 1,
                    (false, true) => p,
                    (true, false) => nodes - 1,
                    (true, true) => nodes,
                };
                assert_eq!(n, expected, "{ctx} size={size} {}", bc.name);
                total += expected;
            }
        }
        assert_eq!(log.len(), total, "{ctx}: no stray deliveries");
    }
}

/// The copying broadcasts leave the caller's message usable: changed after
/// the call, the receivers still see what it held at the call. A receiver
/// that writes to its copy does not change anyone else's.
#[test]
fn copying_broadcasts_leave_the_callers_message_reusable() {
    for (p, ppn) in some_layouts() {
        let root = p - 1;
        let log: Log = Arc::default();
        let l = log.clone();
        let code = job(p, ppn, Some(2), move |_| {
            let l = l.clone();
            let h = converse::register_handler(move |msg: Message| {
                l.lock().unwrap().push(Got::of(&msg));
                // Scribble on our copy (copy-on-write).
                let mut msg = msg;
                msg.payload_mut().fill(0xEE);
                assert!(!msg.is_shared());
            });
            if my_pe() == root {
                for kind in (0..BCASTS.len()).filter(|&k| BCASTS[k].copies) {
                    let mut msg =
                        Message::from_payload(h, &body([BCAST, root as u64, kind as u64, 0]));
                    bcast_ref(kind, &msg);
                    // Reuse the message at once for a second broadcast...
                    msg.payload_mut()
                        .copy_from_slice(&body([BCAST, root as u64, kind as u64, 1]));
                    bcast_ref(kind, &msg);
                    // ...and scribble on it afterwards (then send it to
                    // ourselves, to show what it held).
                    msg.payload_mut().fill(0xAA);
                    converse::sync_send_and_free(root, msg);
                }
            }
            exit_when_quiet();
        });
        let ctx = format!("p={p} ppn={ppn}");
        assert_eq!(code, 0, "{ctx}");
        let log = log.lock().unwrap();
        // The root's scribbled sends to itself arrive as they were sent.
        let scribbled = log
            .iter()
            .filter(|g| g.payload.iter().all(|&b| b == 0xAA))
            .count();
        assert_eq!(scribbled, 8, "{ctx}");
        let copies: Vec<&Got> = log.iter().filter(|g| g.payload[0] != 0xAA).collect();
        for kind in (0..BCASTS.len()).filter(|&k| BCASTS[k].copies) {
            for seq in 0..2 {
                let got: Vec<&Got> = copies
                    .iter()
                    .copied()
                    .filter(|g| g.word(2) == kind as u64 && g.word(3) == seq)
                    .collect();
                check_bcast_targets(&got, p, ppn, root, kind, &format!("{ctx} seq={seq}"));
            }
        }
    }
}

/// A handler that sends its broadcast copy on sends a plain message: it
/// arrives once, where it was sent, and goes no further (sent to the first PE
/// of a node, it would be broadcast again if it kept the routing flags).
#[test]
fn a_broadcast_copy_passed_on_arrives_once_as_a_plain_message() {
    for (p, ppn) in some_layouts() {
        for k in [1, 4] {
            let root = (p - 1) / 2;
            let log: Log = Arc::default();
            let handlers = Arc::new(Mutex::new((0, 0)));
            let (l, hs) = (log.clone(), handlers.clone());
            let code = job(p, ppn, Some(k), move |_| {
                let plain = converse::register_handler(recorder(&l));
                let l1 = l.clone();
                let from_bcast = converse::register_handler(move |msg: Message| {
                    l1.lock().unwrap().push(Got::of(&msg));
                    let mut msg = msg;
                    msg.payload_mut()[..8].copy_from_slice(&FORWARDED.to_le_bytes());
                    msg.set_handler(plain);
                    converse::sync_send_and_free((my_pe() + 1) % num_pes(), msg);
                });
                let l2 = l.clone();
                let from_node_bcast = converse::register_handler(move |msg: Message| {
                    l2.lock().unwrap().push(Got::of(&msg));
                    // Untouched payload, new handler; to the next node's
                    // first PE, by a list send.
                    let mut msg = msg;
                    msg.set_handler(plain);
                    let next = (my_node() + 1) % converse::num_nodes();
                    converse::sync_list_send_and_free(&[converse::node_first(next)], msg);
                });
                if my_pe() == 0 {
                    *hs.lock().unwrap() = (from_bcast, from_node_bcast);
                }
                if my_pe() == root {
                    let r = root as u64;
                    converse::sync_broadcast_all(&Message::from_payload(
                        from_bcast,
                        &body([BCAST, r, 2, 0]),
                    ));
                    converse::sync_node_broadcast_all_and_free(Message::from_payload(
                        from_node_bcast,
                        &body([BCAST, r, 9, 0]),
                    ));
                }
                exit_when_quiet();
            });
            let ctx = format!("p={p} ppn={ppn} k={k}");
            assert_eq!(code, 0, "{ctx}");
            let log = log.lock().unwrap();
            let (hb, hnb) = *handlers.lock().unwrap();
            let bc: Vec<&Got> = log.iter().filter(|g| g.handler == hb).collect();
            check_bcast_targets(&bc, p, ppn, root, 2, &ctx);
            let nbc: Vec<&Got> = log.iter().filter(|g| g.handler == hnb).collect();
            check_bcast_targets(&nbc, p, ppn, root, 9, &ctx);
            let plain: Vec<&Got> = log
                .iter()
                .filter(|g| g.handler != hb && g.handler != hnb)
                .collect();
            // One forwarded copy per PE (from the PE before it) and one per
            // node (to its first PE, from whichever PE handled the node
            // before it).
            let mut expected: Vec<(usize, usize, u64)> = (0..p)
                .map(|q| (q, (q + p - 1) % p, FORWARDED))
                .chain(
                    nbc.iter()
                        .map(|g| ((g.node + 1) % (p / ppn) * ppn, g.pe, BCAST)),
                )
                .collect();
            let mut seen: Vec<(usize, usize, u64)> =
                plain.iter().map(|g| (g.pe, g.src, g.word(0))).collect();
            expected.sort();
            seen.sort();
            assert_eq!(
                seen, expected,
                "{ctx}: forwarded copies (PE, src, first word)"
            );
            for g in &plain {
                let w = g.words();
                let original = [BCAST, w[1], w[2], w[3]];
                assert_eq!(g.payload[8..], body(original)[8..], "{ctx}: {g:?}");
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Multicasts and list sends
// ---------------------------------------------------------------------------

/// The groups of the multicast test, for `p` PEs: odd PEs (listed backwards),
/// all PEs, none, PE 0 alone, all but the creator `p - 1`, all PEs rotated.
fn test_groups(p: usize) -> Vec<Vec<usize>> {
    vec![
        (0..p).filter(|q| q % 2 == 1).rev().collect(),
        (0..p).collect(),
        vec![],
        vec![0],
        (0..p - 1).collect(),
        (0..p).map(|i| (i + p / 2) % p).collect(),
    ]
}

/// The lists of the list-send test, for sender `s` of `p` PEs.
fn test_lists(p: usize, s: usize) -> Vec<Vec<usize>> {
    vec![
        vec![],
        (0..p).collect(),
        vec![s],
        (0..p).filter(|&q| q != s).rev().collect(),
        (0..p).step_by(2).collect(),
    ]
}

/// The three ways to multicast.
fn multicast(kind: u64, group: Group, msg: Message) {
    let before = msg.as_bytes().to_vec();
    match kind {
        0 => converse::sync_multicast(group, &msg),
        1 => return converse::sync_multicast_and_free(group, msg),
        2 => wait(converse::async_multicast(group, &msg)),
        _ => unreachable!(),
    }
    assert_eq!(
        msg.as_bytes(),
        &before[..],
        "multicast changed the caller's message"
    );
}

/// The three ways to send to a list.
fn list_send(kind: u64, pes: &[usize], msg: Message) {
    let before = msg.as_bytes().to_vec();
    match kind {
        0 => converse::sync_list_send(pes, &msg),
        1 => return converse::sync_list_send_and_free(pes, msg),
        2 => wait(converse::async_list_send(pes, &msg)),
        _ => unreachable!(),
    }
    assert_eq!(
        msg.as_bytes(),
        &before[..],
        "list send changed the caller's message"
    );
}

/// Checks that the deliveries whose payload words are `key` (traffic
/// family, sender, destination set, call) reached exactly `members` of the
/// `p` PEs, once each, intact and from the sender.
fn check_members(log: &[Got], key: [u64; WORDS], members: &[usize], p: usize, ctx: &str) {
    let ctx = format!("{ctx} {key:?} to {members:?}");
    let mut per_pe = vec![0; p];
    for g in log.iter().filter(|g| g.words() == key) {
        g.assert_intact(&ctx);
        assert_eq!(g.src as u64, key[1], "{ctx}: src_pe() {g:?}");
        per_pe[g.pe] += 1;
    }
    let expected: Vec<usize> = (0..p).map(|q| usize::from(members.contains(&q))).collect();
    assert_eq!(per_pe, expected, "{ctx}: deliveries per PE");
}

/// Groups established on the last PE, used by it and by every other PE (which
/// gets their IDs in a list send that may overtake the definitions), with
/// each of the three multicast calls; and list sends of every shape from
/// every PE.
#[test]
fn multicasts_and_list_sends_reach_each_member_once() {
    for (p, ppn) in layouts() {
        for k in [1, 2, 4] {
            let log: Log = Arc::default();
            let l = log.clone();
            let code = job(p, ppn, Some(k), move |_| {
                let h = converse::register_handler(recorder(&l));
                let send_all = move |groups: &[Group]| {
                    let me = my_pe() as u64;
                    for (i, &g) in groups.iter().enumerate() {
                        for kind in 0..3 {
                            let msg = Message::from_payload(h, &body([MCAST, me, i as u64, kind]));
                            multicast(kind, g, msg);
                        }
                    }
                };
                let ids = converse::register_handler(move |msg: Message| {
                    let groups: Vec<Group> = msg
                        .payload()
                        .chunks(8)
                        .map(|w| Group::from_id(u64::from_le_bytes(w.try_into().unwrap()) as u32))
                        .collect();
                    send_all(&groups);
                });
                let me = my_pe();
                let creator = p - 1;
                if me == creator {
                    let groups: Vec<Group> = test_groups(p)
                        .iter()
                        .map(|pes| converse::establish_group(pes))
                        .collect();
                    send_all(&groups);
                    let words: Vec<u64> = groups.iter().map(|g| u64::from(g.id())).collect();
                    let others: Vec<usize> = (0..p).filter(|&q| q != me).collect();
                    converse::sync_list_send_and_free(&others, msg_u64(ids, &words));
                }
                for (i, pes) in test_lists(p, me).iter().enumerate() {
                    for kind in 0..3 {
                        let msg =
                            Message::from_payload(h, &body([LIST, me as u64, i as u64, kind]));
                        list_send(kind, pes, msg);
                    }
                }
                exit_when_quiet();
            });
            let ctx = format!("p={p} ppn={ppn} k={k}");
            assert_eq!(code, 0, "{ctx}");
            let log = log.lock().unwrap();
            for s in 0..p {
                for (i, members) in test_groups(p).iter().enumerate() {
                    for kind in 0..3 {
                        check_members(&log, [MCAST, s as u64, i as u64, kind], members, p, &ctx);
                    }
                }
                for (i, pes) in test_lists(p, s).iter().enumerate() {
                    for kind in 0..3 {
                        check_members(&log, [LIST, s as u64, i as u64, kind], pes, p, &ctx);
                    }
                }
            }
            let expected: usize = p * test_groups(p).iter().map(Vec::len).sum::<usize>() * 3
                + (0..p)
                    .map(|s| test_lists(p, s).iter().map(Vec::len).sum::<usize>())
                    .sum::<usize>()
                    * 3;
            assert_eq!(log.len(), expected, "{ctx}: no stray deliveries");
        }
    }
}

/// A multicast's caller may reuse its message at once; a member that writes
/// to its copy does not change the others'.
#[test]
fn multicast_and_list_send_copies_are_independent() {
    for (p, ppn) in [(4, 1), (6, 3), (9, 9)] {
        let log: Log = Arc::default();
        let l = log.clone();
        let code = job(p, ppn, Some(2), move |_| {
            let l = l.clone();
            let h = converse::register_handler(move |msg: Message| {
                l.lock().unwrap().push(Got::of(&msg));
                let mut msg = msg;
                msg.payload_mut().fill(0xEE);
            });
            if my_pe() == 1 {
                let g = converse::establish_group(&(0..p).rev().collect::<Vec<_>>());
                let mut msg = Message::from_payload(h, &body([MCAST, 1, 0, 0]));
                converse::sync_multicast(g, &msg);
                msg.payload_mut().copy_from_slice(&body([MCAST, 1, 0, 1]));
                converse::sync_list_send(&(0..p).collect::<Vec<_>>(), &msg);
                msg.payload_mut().copy_from_slice(&body([MCAST, 1, 0, 2]));
                wait(converse::async_multicast(g, &msg));
                msg.payload_mut().fill(0xAA);
            }
            exit_when_quiet();
        });
        assert_eq!(code, 0);
        let log = log.lock().unwrap();
        for seq in 0..3 {
            let all: Vec<usize> = (0..p).collect();
            check_members(
                &log,
                [MCAST, 1, 0, seq],
                &all,
                p,
                &format!("p={p} ppn={ppn}"),
            );
        }
        assert_eq!(log.len(), 3 * p);
    }
}

// ---------------------------------------------------------------------------
// Multicasts racing their group's definition
// ---------------------------------------------------------------------------

/// A job of 9 PEs in nodes of `ppn`, branching factor 2, in which `busy` (a
/// PE on the definitions' way from PE 0 to PE 8) sleeps 200 ms in a handler
/// before PE 0 establishes any group: definitions reach PE 8 (and the other
/// PEs below `busy`) late. With `ppn` 1 the node tree is 0 -> 1, 2; 1 -> 3,
/// 4; 3 -> 7, 8 and `busy` is 1; with `ppn` 3 it is node 0 -> nodes 1, 2 and
/// `busy` is 6, the first PE of node 2 (PEs 6, 7, 8).
///
/// `on_pe0` runs on PE 0 after the busy message is sent, given the recording
/// handler and a handler that multicasts, with each of the three calls, to
/// each group whose ID is in its payload, tagging the messages with the
/// receiving PE. Returns what the recording handler saw.
fn racing_job(ppn: usize, on_pe0: impl Fn(usize, usize) + Send + Sync + 'static) -> Vec<Got> {
    let busy = if ppn == 1 { 1 } else { 6 };
    let log: Log = Arc::default();
    let l = log.clone();
    let code = job(9, ppn, Some(2), move |_| {
        let h = converse::register_handler(recorder(&l));
        let sleeper = converse::register_handler(|_msg: Message| {
            std::thread::sleep(Duration::from_millis(200));
        });
        let relay = converse::register_handler(move |msg: Message| {
            let me = my_pe() as u64;
            for (i, w) in msg.payload().chunks(8).enumerate() {
                let g = Group::from_id(u64::from_le_bytes(w.try_into().unwrap()) as u32);
                for kind in 0..3 {
                    let m = Message::from_payload(h, &body([MCAST, me, i as u64, kind]));
                    multicast(kind, g, m);
                }
            }
        });
        if my_pe() == 0 {
            converse::sync_send_and_free(busy, Message::new(sleeper, 0));
            on_pe0(h, relay);
        }
        exit_when_quiet();
    });
    assert_eq!(code, 0, "ppn={ppn}");
    let log = log.lock().unwrap();
    log.clone()
}

/// Receiver side: PE 0 multicasts to groups right after establishing them;
/// the copies reach PEs 7 and 8 (and, through PE 8, others) before the
/// definitions, and must still be delivered, once.
#[test]
fn a_multicast_that_overtakes_its_group_definition_is_delivered_once() {
    // PE 8 a leaf; PE 8 an inner member of the member tree (its children 5
    // and 6 know the group early, through PE 2); PE 0 no member (the copy
    // goes to PE 8 first, which must pass it on to 7 and 3 once it knows the
    // group); all PEs.
    let groups: Vec<Vec<usize>> = vec![
        vec![0, 8, 7],
        vec![0, 8, 7, 5, 6, 3, 4],
        vec![8, 7, 3],
        (0..9).rev().collect(),
    ];
    for ppn in [1, 3] {
        let gs = groups.clone();
        let log = racing_job(ppn, move |h, _relay| {
            for (i, pes) in gs.iter().enumerate() {
                let g = converse::establish_group(pes);
                for kind in 0..3 {
                    multicast(
                        kind,
                        g,
                        Message::from_payload(h, &body([MCAST, 0, i as u64, kind])),
                    );
                }
            }
        });
        for (i, members) in groups.iter().enumerate() {
            for kind in 0..3 {
                check_members(
                    &log,
                    [MCAST, 0, i as u64, kind],
                    members,
                    9,
                    &format!("ppn={ppn}"),
                );
            }
        }
        let total: usize = groups.iter().map(Vec::len).sum::<usize>() * 3;
        assert_eq!(log.len(), total, "ppn={ppn}: no stray deliveries");
    }
}

/// Sender side: PE 0 establishes groups and sends their IDs straight to PEs
/// 8, 7 and 4, which multicast to them at once, before the definitions reach
/// them (the runtime relays through the creator). Members, non-members, a
/// group without its creator, an empty group.
#[test]
fn a_multicast_sent_before_the_sender_knows_the_group_is_delivered_once() {
    let groups: Vec<Vec<usize>> = vec![
        vec![0, 8, 7],
        vec![8, 7, 3],
        vec![2, 5, 6],
        vec![],
        vec![4, 8, 1, 0, 7],
    ];
    let senders = [8usize, 7, 4];
    for ppn in [1, 3] {
        let gs = groups.clone();
        let log = racing_job(ppn, move |_h, relay| {
            let ids: Vec<u64> = gs
                .iter()
                .map(|pes| u64::from(converse::establish_group(pes).id()))
                .collect();
            for s in senders {
                converse::sync_send_and_free(s, msg_u64(relay, &ids));
            }
        });
        for s in senders {
            for (i, members) in groups.iter().enumerate() {
                for kind in 0..3 {
                    let key = [MCAST, s as u64, i as u64, kind];
                    check_members(&log, key, members, 9, &format!("ppn={ppn}"));
                }
            }
        }
        let total: usize = groups.iter().map(Vec::len).sum::<usize>() * 3 * senders.len();
        assert_eq!(log.len(), total, "ppn={ppn}: no stray deliveries");
    }
}

/// Group definitions and a multicast released from waiting do not disturb
/// later traffic: a second group established on a busy PE's subtree, then a
/// broadcast after it, all arrive once. (Mixes the pending path with plain
/// broadcasts on the same PEs.)
#[test]
fn pending_multicasts_mix_with_broadcasts() {
    let woke = Arc::new(AtomicBool::new(false));
    let w = woke.clone();
    let log: Log = Arc::default();
    let l = log.clone();
    let code = job(9, 1, Some(2), move |_| {
        let h = converse::register_handler(recorder(&l));
        let w = w.clone();
        let sleeper = converse::register_handler(move |_msg: Message| {
            std::thread::sleep(Duration::from_millis(100));
            w.store(true, Ordering::SeqCst);
        });
        if my_pe() == 0 {
            converse::sync_send_and_free(1, Message::new(sleeper, 0));
            let g = converse::establish_group(&[0, 8, 7, 3, 4]);
            multicast(0, g, Message::from_payload(h, &body([MCAST, 0, 0, 0])));
            converse::sync_broadcast_all(&Message::from_payload(h, &body([BCAST, 0, 2, 0])));
            multicast(1, g, Message::from_payload(h, &body([MCAST, 0, 0, 1])));
        }
        exit_when_quiet();
    });
    assert_eq!(code, 0);
    assert!(woke.load(Ordering::SeqCst));
    let log = log.lock().unwrap();
    for kind in 0..2 {
        check_members(
            &log,
            [MCAST, 0, 0, kind],
            &[0, 8, 7, 3, 4],
            9,
            "pending+bcast",
        );
    }
    let bc: Vec<&Got> = log.iter().filter(|g| g.word(0) == BCAST).collect();
    check_bcast_targets(&bc, 9, 1, 0, 2, "pending+bcast");
    assert_eq!(log.len(), 5 * 2 + 9);
}

// ---------------------------------------------------------------------------
// Spanning trees
// ---------------------------------------------------------------------------

/// `⌈log_k n⌉` for `k >= 2`.
fn ceil_log(n: usize, k: usize) -> usize {
    let (mut depth, mut reach) = (0, 1usize);
    while reach < n {
        reach *= k;
        depth += 1;
    }
    depth
}

/// Checks a tree given by `parent` and `children` over `0..n` rooted at 0
/// with branching factor `k` against `SpanningTree::new(n, k, 0)` and the
/// shape rules (panics on a mismatch; the job re-raises it).
fn check_tree(
    n: usize,
    k: usize,
    parent: impl Fn(usize) -> Option<usize>,
    num_children: impl Fn(usize) -> usize,
    children: impl Fn(usize) -> Vec<usize>,
    what: &str,
) {
    let reference = SpanningTree::new(n, k, 0);
    let mut seen = vec![0; n];
    let mut depth = vec![0; n];
    let mut frontier = vec![0];
    seen[0] += 1;
    assert_eq!(parent(0), None, "{what}: the root has a parent");
    while let Some(m) = frontier.pop() {
        let kids = children(m);
        assert_eq!(
            kids,
            reference.children(m).collect::<Vec<_>>(),
            "{what}: children of {m}"
        );
        assert_eq!(
            num_children(m),
            kids.len(),
            "{what}: number of children of {m}"
        );
        assert!(kids.len() <= k, "{what}: {m} has {} children", kids.len());
        for c in kids {
            assert!(c < n, "{what}: child {c} of {m}");
            assert_eq!(parent(c), Some(m), "{what}: parent of {c}");
            seen[c] += 1;
            depth[c] = depth[m] + 1;
            frontier.push(c);
        }
    }
    assert!(
        seen.iter().all(|&s| s == 1),
        "{what}: times each member was reached {seen:?}"
    );
    for (m, &d) in depth.iter().enumerate() {
        assert_eq!(parent(m), reference.parent(m), "{what}: parent of {m}");
        assert_eq!(d, reference.depth_of(m), "{what}: depth of {m}");
    }
    let max = depth.iter().copied().max().unwrap_or(0);
    assert_eq!(max, reference.depth(), "{what}: depth");
    if k >= 2 {
        assert!(
            max <= ceil_log(n, k),
            "{what}: depth {max} > ceil(log_{k} {n})"
        );
    } else {
        assert_eq!(max, n - 1, "{what}: a 1-ary tree is a chain");
    }
}

/// The spanning-tree queries on every PE, for every layout and branching
/// factors 1 to 4 (and the default, 4).
#[test]
fn spanning_tree_queries_match_the_k_ary_tree() {
    for (p, ppn) in layouts() {
        for k in [None, Some(1), Some(2), Some(3), Some(4)] {
            let done = Arc::new(Mutex::new(vec![0; p]));
            let d = done.clone();
            let code = job(p, ppn, k, move |_| {
                let me = my_pe();
                let branch = k.unwrap_or(4);
                assert_eq!(converse::spanning_tree_branch(), branch);
                assert_eq!(converse::span_tree_root(), 0);
                let what = format!("PE {me} of p={p} ppn={ppn} k={branch}");
                check_tree(
                    num_pes(),
                    branch,
                    converse::span_tree_parent,
                    converse::num_span_tree_children,
                    converse::span_tree_children,
                    &format!("{what} (PEs)"),
                );
                assert_eq!(converse::num_nodes(), p / ppn);
                check_tree(
                    converse::num_nodes(),
                    branch,
                    converse::node_span_tree_parent,
                    converse::num_node_span_tree_children,
                    converse::node_span_tree_children,
                    &format!("{what} (nodes)"),
                );
                d.lock().unwrap()[me] += 1;
                exit_when_quiet();
            });
            assert_eq!(code, 0, "p={p} ppn={ppn} k={k:?}");
            assert_eq!(*done.lock().unwrap(), vec![1; p], "p={p} ppn={ppn} k={k:?}");
        }
    }
}

/// The pure trees, for roots other than 0 too (what broadcasts from other
/// roots and multicasts use): every member reached once, depth bounded.
#[test]
fn spanning_tree_values_for_every_root() {
    for n in 1..=20 {
        for k in 1..=5 {
            for root in 0..n {
                let t = SpanningTree::new(n, k, root);
                assert_eq!(
                    (t.len(), t.branch(), t.root(), t.is_empty()),
                    (n, k, root, false)
                );
                let mut seen = HashMap::new();
                let mut stack = vec![root];
                while let Some(m) = stack.pop() {
                    *seen.entry(m).or_insert(0) += 1;
                    for c in t.children(m) {
                        assert_eq!(t.parent(c), Some(m));
                        assert_eq!(t.depth_of(c), t.depth_of(m) + 1);
                        stack.push(c);
                    }
                }
                assert_eq!(seen.len(), n, "n={n} k={k} root={root}");
                assert!(seen.values().all(|&c| c == 1));
                if k >= 2 {
                    assert!(t.depth() <= ceil_log(n, k));
                }
            }
        }
    }
    assert!(SpanningTree::new(0, 2, 0).is_empty());
    assert_eq!(SpanningTree::new(0, 2, 0).depth(), 0);
}

/// The builder's branching factor applies when the command line sets none;
/// `++spantree-branch` wins over it.
#[test]
fn branch_factor_from_builder_and_command_line() {
    for (extra, builder, want) in [(None, Some(3), 3), (Some(2), Some(3), 2), (None, None, 4)] {
        let mut a = args(4, 2);
        if let Some(k) = extra {
            a.extend(["++spantree-branch".to_string(), format!("{k}")]);
        }
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let code = within(20, move || {
            let mut c = Converse::new().args(a);
            if let Some(k) = builder {
                c = c.spanning_tree_branch(k);
            }
            c.run(move |_| {
                s.lock().unwrap().push(converse::spanning_tree_branch());
                exit_when_quiet();
            })
            .unwrap()
        });
        assert_eq!(code, 0);
        assert_eq!(*seen.lock().unwrap(), vec![want; 4]);
    }
}

// ---------------------------------------------------------------------------
// Processor groups (`Pgrp`)
// ---------------------------------------------------------------------------

#[test]
fn processor_group_tree_and_multicast() {
    for (p, ppn) in [(1, 1), (4, 2), (7, 1), (9, 3)] {
        let got: Arc<Mutex<Vec<usize>>> = Arc::default();
        let g = got.clone();
        let code = within(20, move || {
            run(p, ppn, move |_| {
                let g = g.clone();
                let h = converse::register_handler(move |m: Message| {
                    assert_eq!(m.payload(), b"pgrp");
                    g.lock().unwrap().push(my_pe());
                });
                let root = num_pes() - 1;
                if my_pe() == root {
                    let mut grp = converse::ProcGroup::create();
                    assert_eq!((grp.root(), grp.members()), (root, &[root][..]));
                    let others: Vec<usize> = (0..root).collect();
                    let (first, rest) = others.split_at(others.len().min(2));
                    grp.add_children(root, first);
                    if let Some(&c) = first.first() {
                        grp.add_children(c, rest);
                        assert_eq!(grp.parent(c), Some(root));
                        assert_eq!(grp.children(c), rest);
                        assert_eq!(grp.num_children(c), rest.len());
                    }
                    assert_eq!(grp.parent(root), None);
                    assert_eq!(grp.num_children(root), first.len());
                    assert_eq!(grp.members().len(), num_pes());
                    assert!(
                        grp.async_multicast(&Message::from_payload(h, b"pgrp"))
                            .is_sent()
                    );
                    grp.destroy();
                    exit_when_quiet_from_any_pe();
                }
            })
        });
        assert_eq!(code, 0);
        let mut got = got.lock().unwrap().clone();
        got.sort_unstable();
        assert_eq!(
            got,
            (0..p - 1).collect::<Vec<_>>(),
            "p={p}: every member but the caller, once"
        );
    }
}

/// Ends the job once nothing is in flight (callable on any PE).
fn exit_when_quiet_from_any_pe() {
    converse::start_quiescence_detection(|| converse::exit(0));
}

/// `group_members` answers on the creator at once and elsewhere once the
/// definition is in; `when_group_known` runs its work with the members on
/// every PE that asks, whether the definition has arrived or not (the ID
/// races it to every PE here).
#[test]
fn group_members_are_looked_up_and_waited_for() {
    for ppn in [1, 3] {
        type Seen = Arc<Mutex<Vec<(usize, Vec<usize>)>>>;
        let seen: Seen = Arc::default();
        let s = seen.clone();
        let code = job(9, ppn, Some(2), move |_| {
            let s = s.clone();
            let ask = converse::register_handler(move |m: Message| {
                let g = Group::from_id(read_u64(&m, 0) as u32);
                if let Some(pes) = converse::group_members(g) {
                    assert_eq!(pes, [3, 1, 2, 8], "PE {}", my_pe());
                }
                let s = s.clone();
                converse::when_group_known(g, move |pes| {
                    s.lock().unwrap().push((my_pe(), pes.to_vec()));
                });
            });
            if my_pe() == 2 {
                let g = converse::establish_group(&[3, 1, 2, 8]);
                assert_eq!(
                    converse::group_members(g).as_deref(),
                    Some(&[3, 1, 2, 8][..])
                );
                converse::sync_broadcast_all_and_free(msg_u64(ask, &[g.id() as u64]));
            }
            exit_when_quiet();
        });
        assert_eq!(code, 0);
        let mut seen = seen.lock().unwrap().clone();
        seen.sort();
        let want: Vec<(usize, Vec<usize>)> = (0..9).map(|p| (p, vec![3, 1, 2, 8])).collect();
        assert_eq!(seen, want, "ppn={ppn}");
    }
}
