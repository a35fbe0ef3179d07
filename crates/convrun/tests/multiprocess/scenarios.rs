//! The core runtime's programs, run over every network module and layout:
//! each child program checks its own results and ends the job with 0 only
//! if they were right.
//!
//! # How a program checks itself
//!
//! A job's PEs live in several processes, so nothing can be looked at after
//! the job: every check runs inside it. A failed check prints `CHECK FAILED
//! on PE n: ...` to standard error and ends the job with [`FAIL`] (3).
//!
//! Most programs count what they expect with a [`Tally`] on PE 0: a PE that
//! saw something reports a key (`"recv pe2"`, `"pe r1 s4 p3"`), PE 0 fails on
//! a key it does not expect or gets once too often, and once every expected
//! report is in it waits for quiescence (so that a late duplicate would
//! still be seen and fail the job) and prints `ok NAME`. A watchdog on PE 0
//! names the missing reports and ends the job with [`TIMED_OUT`] (4) if they
//! do not all come within [`WATCHDOG_MS`]. (The watchdog is a kept periodic
//! condition, cancelled once the reports are in, not a `call_fn_after`
//! timer: a pending timer holds quiescence detection until it fires.)
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::time::{Duration, Instant};

use converse::{
    CommHandle, Condition, Converse, Event, Group, Message, ProcGroup, ReductionId, Thread,
    cmi_error, cmi_printf, my_node, my_pe, node_of, num_nodes, num_pes,
};

use crate::Case;
use crate::common::{self, Finished};

/// The extensions' tree search through the seed balancer, run across
/// processes by `ext_cld`.
#[path = "../../../converse-ext/examples/cld_tree.rs"]
#[allow(dead_code)]
mod cld_tree;

/// The extensions' stencil on a parallel array of threads, run across
/// processes by `ext_cpath`.
#[path = "../../../converse-ext/examples/cpath_stencil.rs"]
#[allow(dead_code)]
mod cpath_stencil;

/// The typed-API examples (issue 52), each run in one process and across
/// processes by `typed_examples`.
#[path = "../../../converse/examples/pi.rs"]
#[allow(dead_code)]
mod pi;
#[path = "../../../converse-ext/examples/remote_calls.rs"]
#[allow(dead_code)]
mod remote_calls;
#[path = "../../../converse/examples/work_queue.rs"]
#[allow(dead_code)]
mod work_queue;

/// Exit code of a job whose program found a wrong result.
const FAIL: i32 = 3;
/// Exit code of a job whose expected reports did not all arrive in time.
const TIMED_OUT: i32 = 4;
/// How long PE 0 waits for a program's reports before giving up.
const WATCHDOG_MS: f64 = 15_000.0;
/// Hang guard of one job, as the driver sees it.
const JOB_LIMIT: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------
// Checking inside a job
// ---------------------------------------------------------------------------

/// Ends the job with [`FAIL`], saying what was wrong and where.
fn fail(what: &str) -> ! {
    cmi_error!("CHECK FAILED on PE {}: {what}\n", my_pe());
    converse::exit(FAIL)
}

/// Fails the job (see [`fail`]) unless `cond` holds.
macro_rules! check {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            fail(&format!($($arg)+))
        }
    };
}

/// A message for `handler`: `words` as little-endian `u64`s, then `tail`.
fn msg_words(handler: usize, words: &[u64], tail: &[u8]) -> Message {
    let mut payload = Vec::with_capacity(words.len() * 8 + tail.len());
    for w in words {
        payload.extend_from_slice(&w.to_le_bytes());
    }
    payload.extend_from_slice(tail);
    Message::from_payload(handler, &payload)
}

/// Word `i` of `msg`'s payload (see [`msg_words`]); fails the job if the
/// payload is too short.
fn word(msg: &Message, i: usize) -> u64 {
    let p = msg.payload();
    check!(
        p.len() >= (i + 1) * 8,
        "payload of {} bytes has no word {i}",
        p.len()
    );
    u64::from_le_bytes(p[i * 8..i * 8 + 8].try_into().unwrap())
}

/// Every word of `msg`'s payload.
fn all_words(msg: &Message) -> Vec<u64> {
    msg.payload()
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// `len` bytes that depend on `seed` and on the position (a period of 251,
/// prime, so that no power-of-two boundary lines up with it). Built from
/// slices, so that megabytes cost little even unoptimized.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let table: Vec<u8> = (0..251u32).map(|i| (i * 97 + 13) as u8).collect();
    let mut v = Vec::with_capacity(len);
    let mut at = (seed % 251) as usize;
    while v.len() < len {
        let take = (251 - at).min(len - v.len());
        v.extend_from_slice(&table[at..at + take]);
        at = 0;
    }
    v
}

/// Fails unless `got` is `pattern(expected_len, seed)`, naming the first
/// differing byte.
fn check_pattern(got: &[u8], expected_len: usize, seed: u64, what: &str) {
    check!(
        got.len() == expected_len,
        "{what}: {} payload bytes, expected {expected_len}",
        got.len()
    );
    let want = pattern(expected_len, seed);
    if got != &want[..] {
        let at = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
        fail(&format!(
            "{what}: payload differs at byte {at} of {expected_len} (got {}, expected {})",
            got[at], want[at]
        ));
    }
}

/// Waits (spinning: the network's progress thread completes them) until
/// every handle says its send is done; fails after 10 s.
fn wait_sent(handles: &[CommHandle], what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !handles.iter().all(CommHandle::is_sent) {
        check!(
            Instant::now() < deadline,
            "{what}: {} of {} async handles still not sent after 10 s",
            handles.iter().filter(|h| !h.is_sent()).count(),
            handles.len()
        );
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Reports a refused command line, in one write (a launcher that ends the
/// job may cut a line written in pieces).
fn bad_command_line(e: &converse::StartError) {
    converse::cmi_error!("bad command line: {e}\n");
}

/// Runs `start` as a normal-mode job on this process's command line.
fn run_normal(start: impl Fn(&[String]) + Send + Sync + 'static) -> i32 {
    Converse::new().run(start).unwrap_or_else(|e| {
        bad_command_line(&e);
        2
    })
}

/// The program argument at `i` (0 is the program, 1 the child's name).
fn arg<T: std::str::FromStr>(args: &[String], i: usize) -> T {
    args.get(i)
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| fail(&format!("argument {i} missing or bad in {args:?}")))
}

/// PE 0's count of what the program's PEs reported (see the module comment).
struct Tally {
    name: &'static str,
    handler: Cell<usize>,
    /// Key -> (expected, got); PE 0 only.
    counts: RefCell<BTreeMap<String, (u64, u64)>>,
    remaining: Cell<u64>,
    finished: Cell<bool>,
    /// The watchdog's periodic callback, while it is registered (PE 0).
    watchdog: Cell<Option<usize>>,
}

impl Tally {
    /// Registers the tally's handler: call it at the same point of the
    /// handler order on every PE. `expect` (called on PE 0 only) lists every
    /// report key with the number of times it must come.
    fn new(name: &'static str, expect: impl FnOnce() -> Vec<(String, u64)>) -> Rc<Tally> {
        let tally = Rc::new(Tally {
            name,
            handler: Cell::new(0),
            counts: RefCell::new(BTreeMap::new()),
            remaining: Cell::new(0),
            finished: Cell::new(false),
            watchdog: Cell::new(None),
        });
        let t = tally.clone();
        tally
            .handler
            .set(converse::register_handler(move |msg: Message| {
                t.on_report(msg)
            }));
        if my_pe() == 0 {
            let mut counts = tally.counts.borrow_mut();
            for (key, n) in expect() {
                counts.entry(key).or_insert((0, 0)).0 += n;
            }
            tally.remaining.set(counts.values().map(|c| c.0).sum());
            drop(counts);
            let t = tally.clone();
            let since = Instant::now();
            let limit = Duration::from_secs_f64(WATCHDOG_MS / 1e3);
            let index = converse::call_on_condition_keep(Condition::PERIODIC_100MS, move |_| {
                if since.elapsed() >= limit {
                    t.watchdog();
                }
            });
            tally.watchdog.set(Some(index));
        }
        tally
    }

    /// Reports `key` to PE 0.
    fn report(&self, key: impl Into<String>) {
        let key = key.into();
        converse::sync_send_and_free(0, Message::from_payload(self.handler.get(), key.as_bytes()));
    }

    fn on_report(&self, msg: Message) {
        let key = String::from_utf8_lossy(msg.payload()).into_owned();
        check!(my_pe() == 0, "report `{key}` reached PE {}", my_pe());
        let all_in = {
            let mut counts = self.counts.borrow_mut();
            let Some(c) = counts.get_mut(&key) else {
                drop(counts);
                fail(&format!(
                    "unexpected report `{key}` (from PE {})",
                    msg.src_pe()
                ));
            };
            c.1 += 1;
            if c.1 > c.0 {
                let (want, got) = *c;
                drop(counts);
                fail(&format!(
                    "report `{key}` came {got} times, expected {want} (the last from PE {})",
                    msg.src_pe()
                ));
            }
            self.remaining.set(self.remaining.get() - 1);
            self.remaining.get() == 0
        };
        if all_in {
            self.finished.set(true);
            if let Some(index) = self.watchdog.take() {
                converse::cancel_call_on_condition(Condition::PERIODIC_100MS, index);
            }
            let name = self.name;
            // Quiescence first: a duplicate still in flight must get here
            // (and fail the job) before the verdict.
            converse::start_quiescence_detection(move || {
                cmi_printf!("ok {name}\n");
                converse::exit(0);
            });
        }
    }

    fn watchdog(&self) {
        if self.finished.get() {
            return;
        }
        let counts = self.counts.borrow();
        let missing: Vec<String> = counts
            .iter()
            .filter(|(_, c)| c.1 < c.0)
            .map(|(k, c)| format!("`{k}` ({}/{})", c.1, c.0))
            .collect();
        let shown = missing
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        cmi_error!(
            "TIMED OUT on PE 0: {} of {} reports missing after {} ms, {} keys: {shown}{}\n",
            self.remaining.get(),
            counts.values().map(|c| c.0).sum::<u64>(),
            WATCHDOG_MS,
            missing.len(),
            if missing.len() > 20 { ", ..." } else { "" }
        );
        drop(counts);
        converse::exit(TIMED_OUT)
    }
}

// ---------------------------------------------------------------------------
// core_topology: the topology queries, in user-calls-scheduler mode
// ---------------------------------------------------------------------------

/// Args: PES PPN. Every PE checks every topology query against the layout
/// and tells PE 0 its process id and `CONVERSE_NODE`; PE 0 checks that the
/// PEs of a node share a process and that nodes are distinct processes.
fn topology() -> i32 {
    let start = |args: &[String]| {
        let (pes, ppn): (usize, usize) = (arg(args, 2), arg(args, 3));
        let me = my_pe();
        check!(num_pes() == pes, "num_pes {} != {pes}", num_pes());
        check!(
            num_nodes() == pes / ppn,
            "num_nodes {} != {}",
            num_nodes(),
            pes / ppn
        );
        check!(
            my_node() == me / ppn,
            "my_node {} != {}",
            my_node(),
            me / ppn
        );
        check!(
            converse::my_rank() == me % ppn,
            "my_rank {} != {}",
            converse::my_rank(),
            me % ppn
        );
        check!(
            converse::my_node_size() == ppn,
            "my_node_size {} != {ppn}",
            converse::my_node_size()
        );
        for n in 0..pes / ppn {
            check!(
                converse::node_first(n) == n * ppn,
                "node_first({n}) = {} != {}",
                converse::node_first(n),
                n * ppn
            );
            check!(
                converse::node_size(n) == ppn,
                "node_size({n}) = {} != {ppn}",
                converse::node_size(n)
            );
        }
        for p in 0..pes {
            check!(
                node_of(p) == p / ppn,
                "node_of({p}) = {} != {}",
                node_of(p),
                p / ppn
            );
            check!(
                converse::rank_of(p) == p % ppn,
                "rank_of({p}) = {} != {}",
                converse::rank_of(p),
                p % ppn
            );
        }
        let env_node: u64 = std::env::var("CONVERSE_NODE")
            .or_else(|_| std::env::var("PMI_RANK"))
            .or_else(|_| std::env::var("PMIX_RANK"))
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(u64::MAX);
        let seen: Rc<RefCell<Vec<Vec<u64>>>> = Rc::default();
        let s = seen.clone();
        let h =
            converse::register_handler(move |msg: Message| s.borrow_mut().push(all_words(&msg)));
        let words = [
            me as u64,
            my_node() as u64,
            converse::my_rank() as u64,
            u64::from(std::process::id()),
            env_node,
        ];
        converse::sync_send_and_free(0, msg_words(h, &words, &[]));
        if me != 0 {
            return; // this PE is done: user-calls-scheduler mode
        }
        let deadline = Instant::now() + Duration::from_secs(15);
        while seen.borrow().len() < pes {
            converse::schedule_poll();
            check!(
                Instant::now() < deadline,
                "only {} of {pes} topology reports after 15 s",
                seen.borrow().len()
            );
            std::thread::sleep(Duration::from_micros(100));
        }
        let seen = seen.borrow();
        let mut pid_of_node: HashMap<u64, u64> = HashMap::new();
        let mut pes_seen = vec![false; pes];
        for w in seen.iter() {
            let (pe, node, rank, pid, env) = (w[0] as usize, w[1], w[2], w[3], w[4]);
            check!(
                pe < pes && !std::mem::replace(&mut pes_seen[pe], true),
                "PE {pe} reported twice or is out of range"
            );
            check!(
                node == (pe / ppn) as u64 && rank == (pe % ppn) as u64,
                "PE {pe} says node {node} rank {rank}"
            );
            check!(
                env == node,
                "PE {pe} of node {node} runs in the process convrun numbered {env}"
            );
            let first = *pid_of_node.entry(node).or_insert(pid);
            check!(
                first == pid,
                "node {node} spans processes {first} and {pid}"
            );
        }
        let mut pids: Vec<u64> = pid_of_node.values().copied().collect();
        pids.sort();
        pids.dedup();
        check!(
            pids.len() == pes / ppn,
            "{} nodes run in {} distinct processes",
            pes / ppn,
            pids.len()
        );
        cmi_printf!("ok core_topology\n");
    };
    Converse::new()
        .run_user_scheduler(start)
        .unwrap_or_else(|e| {
            bad_command_line(&e);
            2
        })
}

// ---------------------------------------------------------------------------
// core_sends: every flavour of point-to-point send, every pair, in order
// ---------------------------------------------------------------------------

/// Rounds of [`SENDS_PER_ROUND`] messages from every PE to every PE.
const SEND_ROUNDS: u64 = 60;
/// One round: sync, sync-and-free, async, three vector flavours, and a
/// multiple send of three.
const SENDS_PER_ROUND: u64 = 9;

/// Which of the two receiving handlers (tags 0, 1) message `seq` goes to.
fn send_tag(seq: u64) -> u64 {
    u64::from(matches!(seq % SENDS_PER_ROUND, 1 | 4 | 7))
}

/// Filler length of message `seq` (one in fifty is larger than a socket
/// read).
fn send_fill(seq: u64) -> usize {
    if seq % 50 == 23 {
        70_000 + seq as usize
    } else {
        (seq as usize * 37) % 300
    }
}

fn send_seed(src: usize, dest: usize, seq: u64) -> u64 {
    src as u64 * 1_000_003 + dest as u64 * 1009 + seq
}

fn sends() -> i32 {
    run_normal(|_| {
        let (p, me) = (num_pes(), my_pe());
        let tally = Tally::new("core_sends", || {
            (0..p)
                .flat_map(|q| [(format!("recv pe{q}"), 1), (format!("sent pe{q}"), 1)])
                .collect()
        });
        converse::init_multiple_send_routine();
        let next = Rc::new(RefCell::new(vec![0u64; p]));
        let received = Rc::new(Cell::new(0u64));
        let receiver = |tag: u64| {
            let (next, received, tally) = (next.clone(), received.clone(), tally.clone());
            move |msg: Message| {
                let (src, dest, seq, t) =
                    (word(&msg, 0), word(&msg, 1), word(&msg, 2), word(&msg, 3));
                let src = src as usize;
                check!(
                    src < p && src == msg.src_pe(),
                    "message says it is from PE {src}, header says PE {}",
                    msg.src_pe()
                );
                check!(
                    dest as usize == me,
                    "message for PE {dest} arrived on PE {me}"
                );
                check!(
                    t == tag && send_tag(seq) == tag,
                    "message {seq} from PE {src} (tag {t}) ran handler {tag}"
                );
                let expected = next.borrow()[src];
                check!(
                    seq == expected,
                    "from PE {src}: message {seq} arrived when {expected} was next (order or loss)"
                );
                check_pattern(
                    &msg.payload()[32..],
                    send_fill(seq),
                    send_seed(src, me, seq),
                    &format!("message {seq} from PE {src}"),
                );
                next.borrow_mut()[src] += 1;
                received.set(received.get() + 1);
                if received.get() == SEND_ROUNDS * SENDS_PER_ROUND * p as u64 {
                    tally.report(format!("recv pe{me}"));
                }
            }
        };
        let handlers = [
            converse::register_handler(receiver(0)),
            converse::register_handler(receiver(1)),
        ];
        let make = |dest: usize, seq: u64| {
            let tag = send_tag(seq);
            let fill = pattern(send_fill(seq), send_seed(me, dest, seq));
            msg_words(
                handlers[tag as usize],
                &[me as u64, dest as u64, seq, tag],
                &fill,
            )
        };
        let mut handles = Vec::new();
        for round in 0..SEND_ROUNDS {
            for k in 0..p {
                let dest = (me + k) % p;
                let s = round * SENDS_PER_ROUND;
                let m = make(dest, s);
                let before = m.as_bytes().to_vec();
                converse::sync_send(dest, &m);
                check!(m.as_bytes() == &before[..], "sync_send changed its message");
                converse::sync_send_and_free(dest, make(dest, s + 1));
                let m = make(dest, s + 2);
                handles.push(converse::async_send(dest, &m));
                // Vectors: a header, then the payload in two pieces.
                let split = |m: &Message| -> Vec<Vec<u8>> {
                    let header = Message::new(m.handler(), 0);
                    let payload = m.payload();
                    vec![
                        header.as_bytes().to_vec(),
                        payload[..10].to_vec(),
                        payload[10..].to_vec(),
                    ]
                };
                let parts = split(&make(dest, s + 3));
                converse::sync_vector_send(dest, &parts);
                converse::sync_vector_send_and_free(dest, split(&make(dest, s + 4)));
                let parts = split(&make(dest, s + 5));
                handles.push(converse::async_vector_send(dest, &parts));
                let (a, b, c) = (make(dest, s + 6), make(dest, s + 7), make(dest, s + 8));
                converse::multiple_send(dest, &[&a, &b, &c]);
            }
        }
        wait_sent(&handles, "point-to-point sends");
        tally.report(format!("sent pe{me}"));
    })
}

// ---------------------------------------------------------------------------
// core_large: payloads from 0 bytes to several MiB, checked byte for byte
// ---------------------------------------------------------------------------

/// The payload sizes every PE sends every PE, in this order.
const LARGE_SIZES: &[usize] = &[
    0,
    1,
    7,
    31,
    32,
    33,
    4095,
    65_535,
    65_536,
    65_537,
    300_001,
    1 << 20,
    (3 << 20) + 5,
    0,
];
/// Sent to the next PE only (in the ring of PEs), after the others.
const LARGE_RING_SIZE: usize = (6 << 20) + 3;

fn large() -> i32 {
    run_normal(|_| {
        let (p, me) = (num_pes(), my_pe());
        let tally = Tally::new("core_large", || {
            (0..p)
                .flat_map(|q| [(format!("recv pe{q}"), 1), (format!("sent pe{q}"), 1)])
                .collect()
        });
        let sizes = move |src: usize, dest: usize| -> Vec<usize> {
            let mut v = LARGE_SIZES.to_vec();
            if dest == (src + 1) % p {
                v.push(LARGE_RING_SIZE);
            }
            v
        };
        let seed =
            |src: usize, dest: usize, i: usize| (src * 7919 + dest * 104_729 + i * 31) as u64;
        let next = Rc::new(RefCell::new(vec![0usize; p]));
        let received = Rc::new(Cell::new(0usize));
        let total: usize = (0..p).map(|src| sizes(src, me).len()).sum();
        let h = {
            let (next, received, tally) = (next.clone(), received.clone(), tally.clone());
            converse::register_handler(move |msg: Message| {
                let src = msg.src_pe();
                check!(src < p, "header names PE {src} as the sender");
                let i = next.borrow()[src];
                let expected = sizes(src, me);
                check!(
                    i < expected.len(),
                    "message {i} from PE {src}: only {} were sent",
                    expected.len()
                );
                check!(
                    msg.len() == converse::MSG_HEADER_SIZE + msg.payload().len(),
                    "message {i} from PE {src}: len {} != header + payload {}",
                    msg.len(),
                    msg.payload().len()
                );
                check_pattern(
                    msg.payload(),
                    expected[i],
                    seed(src, me, i),
                    &format!("message {i} from PE {src} (sizes in order {expected:?})"),
                );
                next.borrow_mut()[src] += 1;
                received.set(received.get() + 1);
                if received.get() == total {
                    tally.report(format!("recv pe{me}"));
                }
            })
        };
        let mut handles = Vec::new();
        let most = LARGE_SIZES.len() + 1;
        for i in 0..most {
            for k in 0..p {
                let dest = (me + k) % p;
                let list = sizes(me, dest);
                let Some(&len) = list.get(i) else { continue };
                let m = Message::from_payload(h, &pattern(len, seed(me, dest, i)));
                match i % 5 {
                    0 => converse::sync_send(dest, &m),
                    1 => converse::sync_send_and_free(dest, m),
                    2 => handles.push(converse::async_send(dest, &m)),
                    3 => {
                        let b = m.as_bytes();
                        let cut = (converse::MSG_HEADER_SIZE + len / 3).min(b.len());
                        converse::sync_vector_send(dest, &[&b[..cut], &b[cut..]]);
                    }
                    _ => converse::multiple_send(dest, &[&m]),
                }
            }
        }
        wait_sent(&handles, "large sends");
        tally.report(format!("sent pe{me}"));
    })
}

// ---------------------------------------------------------------------------
// core_node_sends: node sends land once on a PE of the node
// ---------------------------------------------------------------------------

const NODE_SENDS: u64 = 40;

fn node_sends() -> i32 {
    run_normal(|_| {
        let (p, me, nodes) = (num_pes(), my_pe(), num_nodes());
        let tally = Tally::new("core_node_sends", || {
            let mut v = Vec::new();
            for src in 0..p {
                v.push((format!("sent pe{src}"), 1));
                for node in 0..nodes {
                    for seq in 0..NODE_SENDS {
                        v.push((format!("s{src} n{node} q{seq}"), 1));
                    }
                }
            }
            v
        });
        // Every ninth a large one, sent by `sync_node_send` (seq % 3 == 0):
        // over tcp it goes from the sender's own buffer.
        let fill = |seq: u64| {
            if seq % 9 == 3 {
                70_000 + seq as usize
            } else {
                (seq as usize * 13) % 200
            }
        };
        let h = {
            let tally = tally.clone();
            converse::register_handler(move |msg: Message| {
                let (src, node, seq) = (word(&msg, 0), word(&msg, 1) as usize, word(&msg, 2));
                check!(
                    node == my_node(),
                    "node send for node {node} from PE {src} ran on PE {} of node {}",
                    my_pe(),
                    my_node()
                );
                check!(
                    src as usize == msg.src_pe(),
                    "node send from PE {src} says it is from PE {}",
                    msg.src_pe()
                );
                check_pattern(
                    &msg.payload()[24..],
                    fill(seq),
                    seq + src * 1000,
                    &format!("node send {seq} from PE {src}"),
                );
                tally.report(format!("s{src} n{node} q{seq}"));
            })
        };
        let mut handles = Vec::new();
        for seq in 0..NODE_SENDS {
            for k in 0..nodes {
                let node = (my_node() + k) % nodes;
                let m = msg_words(
                    h,
                    &[me as u64, node as u64, seq],
                    &pattern(fill(seq), seq + me as u64 * 1000),
                );
                match seq % 3 {
                    0 => converse::sync_node_send(node, &m),
                    1 => converse::sync_node_send_and_free(node, m),
                    _ => handles.push(converse::async_node_send(node, &m)),
                }
            }
        }
        wait_sent(&handles, "node sends");
        tally.report(format!("sent pe{me}"));
    })
}

// ---------------------------------------------------------------------------
// core_bcast: every broadcast flavour from every PE
// ---------------------------------------------------------------------------

const BCAST_REPS: u64 = 2;
/// 0-5 to PEs, 6-11 to nodes (each: sync, sync-and-free, all, all-and-free,
/// async, async all), 12 a large sync broadcast to all PEs.
const BCAST_VARIANTS: u64 = 13;

fn bcast_to_nodes(v: u64) -> bool {
    (6..12).contains(&v)
}

fn bcast_includes_root(v: u64) -> bool {
    matches!(v % 6, 2 | 3 | 5) || v == 12
}

fn bcast_len(v: u64, seq: u64) -> usize {
    if v == 12 {
        (1 << 20) + 3
    } else {
        (seq as usize * 29) % 500
    }
}

/// With `check_src`, every copy must say the root sent it (`src_pe()`), as
/// in-process copies do.
fn bcast(check_src: bool) -> i32 {
    run_normal(move |_| {
        let (p, me, nodes) = (num_pes(), my_pe(), num_nodes());
        let tally = Tally::new("core_bcast", || {
            let mut v = Vec::new();
            for root in 0..p {
                v.push((format!("sent r{root}"), 1));
                for rep in 0..BCAST_REPS {
                    for var in 0..BCAST_VARIANTS {
                        let seq = rep * BCAST_VARIANTS + var;
                        let all = bcast_includes_root(var);
                        if bcast_to_nodes(var) {
                            for n in (0..nodes).filter(|&n| all || n != node_of(root)) {
                                v.push((format!("node r{root} s{seq} n{n}"), 1));
                            }
                        } else {
                            for q in (0..p).filter(|&q| all || q != root) {
                                v.push((format!("pe r{root} s{seq} p{q}"), 1));
                            }
                        }
                    }
                }
            }
            v
        });
        // Last PE-broadcast sequence number seen from each root.
        let last: Rc<RefCell<Vec<Option<u64>>>> = Rc::new(RefCell::new(vec![None; p]));
        let h = {
            let tally = tally.clone();
            converse::register_handler(move |msg: Message| {
                let (root, seq, var) = (word(&msg, 0) as usize, word(&msg, 1), word(&msg, 2));
                check!(
                    !check_src || root == msg.src_pe(),
                    "broadcast {seq} (variant {var}) from PE {root} arrived on PE {me} with src_pe() = {} (expected the root, as in-process)",
                    msg.src_pe()
                );
                check_pattern(
                    &msg.payload()[24..],
                    bcast_len(var, seq),
                    seq * 7 + root as u64,
                    &format!("broadcast {seq} (variant {var}) from PE {root}"),
                );
                if bcast_to_nodes(var) {
                    tally.report(format!("node r{root} s{seq} n{}", my_node()));
                } else {
                    let prev = last.borrow_mut()[root].replace(seq);
                    check!(
                        prev.is_none_or(|prev| prev < seq),
                        "broadcast {seq} from PE {root} arrived after its broadcast {prev:?}"
                    );
                    tally.report(format!("pe r{root} s{seq} p{me}"));
                }
            })
        };
        let mut handles = Vec::new();
        for rep in 0..BCAST_REPS {
            for var in 0..BCAST_VARIANTS {
                let seq = rep * BCAST_VARIANTS + var;
                let m = msg_words(
                    h,
                    &[me as u64, seq, var],
                    &pattern(bcast_len(var, seq), seq * 7 + me as u64),
                );
                match var {
                    0 => converse::sync_broadcast(&m),
                    1 => converse::sync_broadcast_and_free(m),
                    2 | 12 => converse::sync_broadcast_all(&m),
                    3 => converse::sync_broadcast_all_and_free(m),
                    4 => handles.push(converse::async_broadcast(&m)),
                    5 => handles.push(converse::async_broadcast_all(&m)),
                    6 => converse::sync_node_broadcast(&m),
                    7 => converse::sync_node_broadcast_and_free(m),
                    8 => converse::sync_node_broadcast_all(&m),
                    9 => converse::sync_node_broadcast_all_and_free(m),
                    10 => handles.push(converse::async_node_broadcast(&m)),
                    _ => handles.push(converse::async_node_broadcast_all(&m)),
                }
            }
        }
        wait_sent(&handles, "broadcasts");
        tally.report(format!("sent r{me}"));
    })
}

// ---------------------------------------------------------------------------
// core_reduce: every reduction form, global, over lists and over a group
// ---------------------------------------------------------------------------

/// Merge for word messages: word 0 is a tag every contribution shares (kept),
/// the others are summed.
fn merge_sum(local: Message, children: Vec<Message>) -> Message {
    let mut acc = all_words(&local);
    for child in &children {
        let w = all_words(child);
        check!(
            w.len() == acc.len() && w[0] == acc[0],
            "merging reduction {}: a child contributed {w:?}",
            acc[0]
        );
        for (a, b) in acc.iter_mut().zip(&w).skip(1) {
            *a += b;
        }
    }
    msg_words(local.handler(), &acc, &[])
}

/// Words of the large contribution of each PE.
const REDUCE_BIG_WORDS: u64 = 20_000;

fn reduce() -> i32 {
    run_normal(|_| {
        let (p, me) = (num_pes(), my_pe());
        let pu = p as u64;
        let tally = Tally::new("core_reduce", || {
            [
                "reduce round0",
                "reduce round1",
                "reduce round2",
                "reduce big",
                "reduce_struct",
                "reduce_id",
                "reduce_struct_id",
                "list_reduce",
                "list_reduce_struct",
                "group_reduce",
                "group_reduce_struct",
                "dynamic",
            ]
            .iter()
            .map(|k| (k.to_string(), 1))
            .collect()
        });
        let list1: Vec<usize> = (1..p).rev().collect();
        let list2: Vec<usize> = std::iter::once(1).chain((0..p).step_by(2)).collect();
        let members: Vec<usize> = vec![p - 1, 0, 1];
        let id_a = converse::global_reduction_id();
        let id_b = converse::global_reduction_id();
        let id_list1 = converse::global_reduction_id();
        let id_list2 = converse::global_reduction_id();
        let id_group = converse::global_reduction_id();
        let id_group_s = converse::global_reduction_id();
        let t = tally.clone();
        let h_round = converse::register_handler(move |msg: Message| {
            check!(my_pe() == 0, "reduce result on PE {}", my_pe());
            let w = all_words(&msg);
            let round = w[0];
            let want = [round, pu * (pu + 1) / 2 + round * pu, pu, (1 << pu) - 1];
            check!(
                w == want,
                "reduce round {round}: got {w:?}, expected {want:?}"
            );
            t.report(format!("reduce round{round}"));
        });
        let t = tally.clone();
        let h_big = converse::register_handler(move |msg: Message| {
            check!(my_pe() == 0, "big reduce result on PE {}", my_pe());
            let w = all_words(&msg);
            check!(
                w.len() == REDUCE_BIG_WORDS as usize + 1,
                "big reduce: {} words",
                w.len()
            );
            for (i, &x) in w.iter().enumerate().skip(1) {
                let i = i as u64;
                let want = i * pu * (pu - 1) / 2 + pu;
                check!(x == want, "big reduce word {i}: {x} != {want}");
            }
            t.report("reduce big");
        });
        let t = tally.clone();
        let h_struct = converse::register_handler(move |msg: Message| {
            let v: Vec<u64> = converse::decode_struct_result(&msg)
                .unwrap_or_else(|e| fail(&format!("reduce_struct: {e}")));
            check!(
                my_pe() == 0 && v == vec![1; p],
                "reduce_struct on PE {}: {v:?}",
                my_pe()
            );
            t.report("reduce_struct");
        });
        let t = tally.clone();
        let h_id = converse::register_handler(move |msg: Message| {
            let w = all_words(&msg);
            let squares: u64 = (0..pu).map(|q| q * q).sum();
            check!(
                my_pe() == 0 && w == [7, squares],
                "reduce_id on PE {}: {w:?}",
                my_pe()
            );
            t.report("reduce_id");
        });
        let t = tally.clone();
        let h_struct_id = converse::register_handler(move |msg: Message| {
            let v: (u64, u64) = converse::decode_struct_result(&msg)
                .unwrap_or_else(|e| fail(&format!("reduce_struct_id: {e}")));
            check!(
                my_pe() == 0 && v == (5, (pu - 1) * 10 + 5),
                "reduce_struct_id on PE {}: {v:?}",
                my_pe()
            );
            t.report("reduce_struct_id");
        });
        let (t, l1) = (tally.clone(), list1.clone());
        let h_list = converse::register_handler(move |msg: Message| {
            let w = all_words(&msg);
            let want = [11, l1.iter().map(|&q| q as u64).sum(), l1.len() as u64];
            check!(
                my_pe() == l1[0] && w == want,
                "list_reduce over {l1:?} on PE {}: {w:?}, expected {want:?}",
                my_pe()
            );
            t.report("list_reduce");
        });
        let (t, l2) = (tally.clone(), list2.clone());
        let h_list_s = converse::register_handler(move |msg: Message| {
            let v: Vec<u64> = converse::decode_struct_result(&msg)
                .unwrap_or_else(|e| fail(&format!("list_reduce_struct: {e}")));
            let mut want: Vec<u64> = l2.iter().map(|&q| q as u64).collect();
            want.sort();
            check!(
                my_pe() == l2[0] && v == want,
                "list_reduce_struct over {l2:?} on PE {}: {v:?}",
                my_pe()
            );
            t.report("list_reduce_struct");
        });
        let (t, m) = (tally.clone(), members.clone());
        let h_group = converse::register_handler(move |msg: Message| {
            let w = all_words(&msg);
            let want = [13, m.iter().map(|&q| q as u64 + 1).sum(), m.len() as u64];
            check!(
                my_pe() == m[0] && w == want,
                "group_reduce over {m:?} on PE {}: {w:?}, expected {want:?}",
                my_pe()
            );
            t.report("group_reduce");
        });
        let (t, m) = (tally.clone(), members.clone());
        let h_group_s = converse::register_handler(move |msg: Message| {
            let v: (u64, u64) = converse::decode_struct_result(&msg)
                .unwrap_or_else(|e| fail(&format!("group_reduce_struct: {e}")));
            let want = (m.len() as u64, m.iter().map(|&q| 1u64 << q).sum());
            check!(
                my_pe() == m[0] && v == want,
                "group_reduce_struct over {m:?} on PE {}: {v:?}, expected {want:?}",
                my_pe()
            );
            t.report("group_reduce_struct");
        });
        // The group's ID, from its creator (PE 0), to its members.
        let h_gid = converse::register_handler(move |msg: Message| {
            let group = Group::from_id(word(&msg, 0) as u32);
            let me = my_pe() as u64;
            converse::group_reduce(
                group,
                msg_words(h_group, &[13, me + 1, 1], &[]),
                merge_sum,
                id_group,
            );
            converse::group_reduce_struct(
                group,
                (1u64, 1u64 << me),
                |a: (u64, u64), kids: Vec<(u64, u64)>| {
                    kids.iter().fold(a, |acc, k| (acc.0 + k.0, acc.1 + k.1))
                },
                h_group_s,
                id_group_s,
            );
        });
        let t = tally.clone();
        let h_dyn_result = converse::register_handler(move |msg: Message| {
            let w = all_words(&msg);
            let want = [17, (0..pu).map(|q| q + 100).sum()];
            check!(
                my_pe() == 0 && w == want,
                "dynamic-ID reduction on PE {}: {w:?}, expected {want:?}",
                my_pe()
            );
            t.report("dynamic");
        });
        // A dynamic reduction ID, asked for by PE 1, delivered to every PE.
        let h_dyn = converse::register_handler(move |msg: Message| {
            let Some((id, data)) = converse::dynamic_reduction_reply(&msg) else {
                fail("dynamic_reduction_reply does not read the reply")
            };
            check!(data == b"dyn-data", "dynamic ID came with data {data:?}");
            let id: ReductionId = id;
            let me = my_pe() as u64;
            converse::reduce_id(msg_words(h_dyn_result, &[17, me + 100], &[]), merge_sum, id);
        });

        let mu = me as u64;
        // Call-order reductions (both forms share the order).
        let round = |r: u64| msg_words(h_round, &[r, mu + 1 + r, 1, 1 << mu], &[]);
        converse::reduce(round(0), merge_sum);
        let mut one_hot = vec![0u64; p];
        one_hot[me] = 1;
        converse::reduce_struct(
            one_hot,
            |mut a: Vec<u64>, kids: Vec<Vec<u64>>| {
                for k in kids {
                    check!(
                        k.len() == a.len(),
                        "reduce_struct: child of length {}",
                        k.len()
                    );
                    a.iter_mut().zip(k).for_each(|(x, y)| *x += y);
                }
                a
            },
            h_struct,
        );
        converse::reduce(round(1), merge_sum);
        let big: Vec<u64> = std::iter::once(99)
            .chain((1..=REDUCE_BIG_WORDS).map(|i| i * mu + 1))
            .collect();
        converse::reduce(msg_words(h_big, &big, &[]), merge_sum);
        converse::reduce(round(2), merge_sum);
        // By ID.
        converse::reduce_id(msg_words(h_id, &[7, mu * mu], &[]), merge_sum, id_a);
        converse::reduce_struct_id(
            (mu * 10 + 5, mu * 10 + 5),
            |a: (u64, u64), kids: Vec<(u64, u64)>| {
                kids.iter()
                    .fold(a, |acc, k| (acc.0.min(k.0), acc.1.max(k.1)))
            },
            h_struct_id,
            id_b,
        );
        // Over PE lists.
        if list1.contains(&me) {
            converse::list_reduce(
                &list1,
                msg_words(h_list, &[11, mu, 1], &[]),
                merge_sum,
                id_list1,
            );
        }
        if list2.contains(&me) {
            converse::list_reduce_struct(
                &list2,
                vec![mu],
                |mut a: Vec<u64>, kids: Vec<Vec<u64>>| {
                    for k in kids {
                        a.extend(k);
                    }
                    a.sort();
                    a
                },
                h_list_s,
                id_list2,
            );
        }
        // Over a group: made on PE 0, its ID sent to the members.
        if me == 0 {
            let group = converse::establish_group(&members);
            for &q in &members {
                converse::sync_send_and_free(q, msg_words(h_gid, &[u64::from(group.id())], &[]));
            }
        }
        if me == 1 {
            converse::dynamic_reduction_id_remote(h_dyn, None, b"dyn-data");
        }
    })
}

// ---------------------------------------------------------------------------
// core_groups: multicast groups, list sends, processor groups
// ---------------------------------------------------------------------------

/// Group tags: A (all PEs, reversed), B ([1, last]), C ([last, 0], made on
/// the last PE), list sends, processor group.
const G_A: u64 = 0;
const G_B: u64 = 1;
const G_C: u64 = 2;
const G_LIST: u64 = 3;
const G_PGRP: u64 = 4;

/// With `check_src`, every copy must say its sender sent it (`src_pe()`), as
/// in-process copies do.
fn groups(check_src: bool) -> i32 {
    run_normal(move |_| {
        let (p, me) = (num_pes(), my_pe());
        let group_a: Vec<usize> = (0..p).rev().collect();
        let group_b: Vec<usize> = vec![1, p - 1];
        let group_c: Vec<usize> = vec![p - 1, 0];
        let list_of = |sender: usize| -> Vec<usize> { (1..p).map(|k| (sender + k) % p).collect() };
        let everyone_rev: Vec<usize> = (0..p).rev().collect();
        // What is sent: (group tag, variant, sender, receivers).
        let plan = {
            let (a, b, c) = (group_a.clone(), group_b.clone(), group_c.clone());
            let everyone_rev = everyone_rev.clone();
            move || -> Vec<(u64, u64, usize, Vec<usize>)> {
                let mut v = vec![
                    (G_A, 0, 0, a.clone()),
                    (G_B, 1, 0, b.clone()),
                    (G_A, 2, 0, a.clone()),
                    (G_B, 3, 0, b.clone()),
                    (G_C, 6, p - 1, c.clone()),
                    (G_PGRP, 10, 0, (1..p).collect()),
                ];
                for q in 1..p {
                    v.push((G_A, 4, q, a.clone()));
                    v.push((G_B, 5, q, b.clone()));
                }
                for q in 0..p {
                    v.push((G_LIST, 7, q, list_of(q)));
                    v.push((G_LIST, 8, q, list_of(q)));
                    v.push((G_LIST, 9, q, everyone_rev.clone()));
                }
                v
            }
        };
        let tally = Tally::new("core_groups", || {
            let mut v: Vec<(String, u64)> = (0..p).map(|q| (format!("sent pe{q}"), 1)).collect();
            for (g, var, sender, to) in plan() {
                for q in to {
                    v.push((format!("mc g{g} v{var} s{sender} p{q}"), 1));
                }
            }
            v
        });
        let mlen = |var: u64| if var == 3 { 300_007 } else { var as usize * 11 };
        let h = {
            let tally = tally.clone();
            converse::register_handler(move |msg: Message| {
                let (g, var, sender) = (word(&msg, 0), word(&msg, 1), word(&msg, 2));
                check!(
                    !check_src || sender as usize == msg.src_pe(),
                    "multicast/list send g{g} v{var} from PE {sender} arrived on PE {} with src_pe() = {} (expected the sender, as in-process)",
                    my_pe(),
                    msg.src_pe()
                );
                check_pattern(
                    &msg.payload()[24..],
                    mlen(var),
                    var * 3 + sender,
                    &format!("multicast g{g} v{var} from PE {sender}"),
                );
                tally.report(format!("mc g{g} v{var} s{sender} p{}", my_pe()));
            })
        };
        let m = move |g: u64, var: u64| {
            msg_words(
                h,
                &[g, var, me as u64],
                &pattern(mlen(var), var * 3 + me as u64),
            )
        };
        // Another PE multicasts to groups it got the IDs of from PE 0 (it
        // may not have their definitions yet).
        let h_relay = converse::register_handler(move |msg: Message| {
            let (a, b) = (
                Group::from_id(word(&msg, 0) as u32),
                Group::from_id(word(&msg, 1) as u32),
            );
            converse::sync_multicast(a, &m(G_A, 4));
            converse::sync_multicast_and_free(b, m(G_B, 5));
        });
        let mut handles = Vec::new();
        if me == 0 {
            // Multicasts right after the definitions: they may overtake them.
            let a = converse::establish_group(&group_a);
            let b = converse::establish_group(&group_b);
            converse::sync_multicast(a, &m(G_A, 0));
            converse::sync_multicast_and_free(b, m(G_B, 1));
            handles.push(converse::async_multicast(a, &m(G_A, 2)));
            converse::sync_multicast(b, &m(G_B, 3));
            for q in 1..p {
                converse::sync_send_and_free(
                    q,
                    msg_words(h_relay, &[u64::from(a.id()), u64::from(b.id())], &[]),
                );
            }
            let mut pg = ProcGroup::create();
            pg.add_children(0, &[1]);
            pg.add_children(1, &(2..p).collect::<Vec<_>>());
            check!(
                pg.root() == 0
                    && pg.parent(1) == Some(0)
                    && pg.parent(2) == Some(1)
                    && pg.num_children(1) == p - 2
                    && pg.children(0) == [1],
                "processor group tree: {pg:?}"
            );
            handles.push(pg.async_multicast(&m(G_PGRP, 10)));
        }
        if me == p - 1 {
            let c = converse::establish_group(&group_c);
            converse::sync_multicast(c, &m(G_C, 6));
        }
        let list = list_of(me);
        converse::sync_list_send(&list, &m(G_LIST, 7));
        converse::sync_list_send_and_free(&list, m(G_LIST, 8));
        handles.push(converse::async_list_send(&everyone_rev, &m(G_LIST, 9)));
        wait_sent(&handles, "multicasts and list sends");
        tally.report(format!("sent pe{me}"));
    })
}

// ---------------------------------------------------------------------------
// core_qd: quiescence detection after a cross-process storm
// ---------------------------------------------------------------------------

const QD_CHAINS: u64 = 30;
const QD_HOPS: u64 = 20;
const QD_BCAST_HOPS: u64 = 3;
/// PE 1 holds one unit of outside work (`qd_create`) this long.
const QD_HOLD_MS: f64 = 150.0;

fn qd() -> i32 {
    run_normal(|_| {
        let (p, me) = (num_pes(), my_pe());
        let pu = p as u64;
        let total = pu * QD_CHAINS * (QD_HOPS + 1) + pu * pu * (QD_BCAST_HOPS + 1);
        let tally = Tally::new("core_qd", || {
            vec![
                ("qd on PE 0".to_string(), 1),
                (format!("qd on PE {}", p - 1), 1),
            ]
        });
        let count = Rc::new(Cell::new(0u64));
        let released = Rc::new(Cell::new(me != 1));
        let id0 = converse::global_reduction_id();
        let id_last = converse::global_reduction_id();
        let t = tally.clone();
        let h_total = converse::register_handler(move |msg: Message| {
            let (which, handled, released): (u64, u64, u64) = converse::decode_struct_result(&msg)
                .unwrap_or_else(|e| fail(&format!("qd total: {e}")));
            check!(
                handled == total,
                "quiescence declared (callback on PE {which}) with {handled} of {total} storm messages handled"
            );
            check!(
                released == pu,
                "quiescence declared (callback on PE {which}) while PE 1 still held work it had qd_create'd"
            );
            t.report(format!("qd on PE {which}"));
        });
        let (c, r) = (count.clone(), released.clone());
        let h_collect = converse::register_handler(move |msg: Message| {
            let which = word(&msg, 0);
            let id = if which == 0 { id0 } else { id_last };
            converse::reduce_struct_id(
                (which, c.get(), u64::from(r.get())),
                |a: (u64, u64, u64), kids: Vec<(u64, u64, u64)>| {
                    kids.iter()
                        .fold(a, |acc, k| (acc.0, acc.1 + k.1, acc.2 + k.2))
                },
                h_total,
                id,
            );
        });
        let h_work = converse::register_handler(move |msg: Message| {
            count.set(count.get() + 1);
            let (origin, chain, hops) = (word(&msg, 0), word(&msg, 1), word(&msg, 2));
            if hops > 0 {
                let me = my_pe();
                let dest = (me + 1 + ((origin + chain + hops) as usize % (p - 1))) % p;
                let fill = if chain % 3 == 0 { 3000 } else { 0 };
                converse::sync_send_and_free(
                    dest,
                    msg_words(msg.handler(), &[origin, chain, hops - 1], &vec![0u8; fill]),
                );
            }
        });
        if me == 1 {
            converse::qd_create(1);
            converse::call_fn_after(
                move |_| {
                    released.set(true);
                    converse::qd_process(1);
                },
                QD_HOLD_MS,
            );
        }
        for chain in 0..QD_CHAINS {
            let dest = (me + 1 + chain as usize) % p;
            converse::sync_send_and_free(
                dest,
                msg_words(h_work, &[me as u64, chain, QD_HOPS], &[]),
            );
        }
        converse::sync_broadcast_all_and_free(msg_words(
            h_work,
            &[me as u64, 1000, QD_BCAST_HOPS],
            &[],
        ));
        if me == 0 || me == p - 1 {
            let which = me as u64;
            converse::start_quiescence_detection(move || {
                converse::sync_broadcast_all_and_free(msg_words(h_collect, &[which], &[]));
            });
        }
    })
}

// ---------------------------------------------------------------------------
// core_threads: threads blocked on events, awakened from other processes
// ---------------------------------------------------------------------------

const FIB_N: u32 = 13;
const RING_ROUNDS: u64 = 15;

/// A fib thread waiting for its two children's answers.
struct Pending {
    sum: Cell<u64>,
    answers: Cell<u32>,
    done: Event,
}

struct FibState {
    request: Cell<usize>,
    answer: Cell<usize>,
    waiting: RefCell<HashMap<u64, Rc<Pending>>>,
    next_key: Cell<u64>,
    next_pe: Cell<usize>,
    tally: Rc<Tally>,
}

const FIB_ROOT: u64 = u64::MAX;

fn fib_thread(st: Rc<FibState>, n: u64, parent_pe: u64, parent_key: u64) {
    let value = if n < 2 {
        n
    } else {
        let pending = Rc::new(Pending {
            sum: Cell::new(0),
            answers: Cell::new(0),
            done: Event::new(),
        });
        let key = st.next_key.get();
        st.next_key.set(key + 1);
        st.waiting.borrow_mut().insert(key, pending.clone());
        for child in [n - 1, n - 2] {
            let dest = st.next_pe.get();
            st.next_pe.set((dest + 1) % num_pes());
            converse::sync_send_and_free(
                dest,
                msg_words(st.request.get(), &[child, my_pe() as u64, key], &[]),
            );
        }
        pending.done.wait();
        check!(
            pending.answers.get() == 2,
            "fib({n}) thread woke with {} answers",
            pending.answers.get()
        );
        pending.sum.get()
    };
    if parent_pe == FIB_ROOT {
        let want = (0..n).fold((0u64, 1u64), |(a, b), _| (b, a + b)).0;
        check!(value == want, "fib({n}) = {value}, expected {want}");
        st.tally.report("fib");
        return;
    }
    converse::sync_send_and_free(
        parent_pe as usize,
        msg_words(st.answer.get(), &[parent_key, value], &[]),
    );
}

fn threads() -> i32 {
    run_normal(|_| {
        let (p, me) = (num_pes(), my_pe());
        let tally = Tally::new("core_threads", || {
            let mut v = vec![("fib".to_string(), 1), ("ring final".to_string(), 1)];
            v.extend((0..p).map(|q| (format!("ring pe{q}"), 1)));
            v
        });
        let st = Rc::new(FibState {
            request: Cell::new(0),
            answer: Cell::new(0),
            waiting: RefCell::default(),
            next_key: Cell::new(0),
            next_pe: Cell::new((me + 1) % p),
            tally: tally.clone(),
        });
        let s = st.clone();
        st.request
            .set(converse::register_handler(move |msg: Message| {
                let (n, parent, key) = (word(&msg, 0), word(&msg, 1), word(&msg, 2));
                let s = s.clone();
                Thread::create(move || fib_thread(s, n, parent, key), 0).awaken();
            }));
        let s = st.clone();
        st.answer
            .set(converse::register_handler(move |msg: Message| {
                let (key, value) = (word(&msg, 0), word(&msg, 1));
                let Some(pending) = s.waiting.borrow().get(&key).cloned() else {
                    fail(&format!(
                        "fib answer for key {key}, which no thread waits for"
                    ))
                };
                pending.sum.set(pending.sum.get() + value);
                pending.answers.set(pending.answers.get() + 1);
                if pending.answers.get() == 2 {
                    s.waiting.borrow_mut().remove(&key);
                    pending.done.set();
                }
            }));
        // The token ring: one thread per PE, awakened by the token's arrival.
        let token = Rc::new((Event::new(), Cell::new(0u64)));
        let tk = token.clone();
        let h_token = converse::register_handler(move |msg: Message| {
            check!(
                !tk.0.is_set(),
                "a token arrived while the last one was not taken yet"
            );
            tk.1.set(word(&msg, 0));
            tk.0.set();
        });
        let t = tally.clone();
        let ring = move || {
            let next = (me + 1) % p;
            let pu = p as u64;
            for round in 0..RING_ROUNDS {
                let value = if me == 0 && round == 0 {
                    0
                } else {
                    token.0.wait();
                    token.0.reset();
                    token.1.get()
                };
                let want = round * pu + me as u64;
                check!(
                    value == want,
                    "token ring round {round}: token {value}, expected {want}"
                );
                if round == 0 {
                    converse::sleep(2.0);
                }
                converse::sync_send_and_free(next, msg_words(h_token, &[value + 1], &[]));
            }
            if me == 0 {
                token.0.wait();
                let value = token.1.get();
                check!(
                    value == RING_ROUNDS * pu,
                    "token ring ended with {value}, expected {}",
                    RING_ROUNDS * pu
                );
                t.report("ring final");
            }
            t.report(format!("ring pe{me}"));
        };
        Thread::create(ring, 0).awaken();
        if me == 0 {
            let s = st.clone();
            Thread::create(move || fib_thread(s, u64::from(FIB_N), FIB_ROOT, 0), 0).awaken();
        }
    })
}

// ---------------------------------------------------------------------------
// core_init_returns: ConverseInit-returns mode, one main thread per process
// ---------------------------------------------------------------------------

/// Polls the scheduler until `done()`; fails after 15 s.
fn poll_until(done: impl Fn() -> bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !done() {
        converse::schedule_poll();
        check!(
            Instant::now() < deadline,
            "{what}: still waiting after 15 s"
        );
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// One PE's part (the same on the PEs `init_returns` starts and on each
/// process's main thread, its first PE): report to PE 0, which answers every
/// PE once all have reported; wait for the answer.
/// Prints on PE 0 the job's hosts as the physical-node queries see them:
/// `hosts N: H0 H1 ...` (the host of every PE, in order), what `convrun`
/// said of them (`hosts-var VALUE` of `CONVERSE_HOSTS`, `-` unset), then
/// `ok core_hosts`.
fn hosts() -> i32 {
    run_normal(|_| {
        if my_pe() != 0 {
            return;
        }
        use converse::machine::hosts;
        let of: Vec<String> = (0..num_pes())
            .map(|pe| hosts::physical_node_of(pe).to_string())
            .collect();
        let var = std::env::var("CONVERSE_HOSTS").unwrap_or_else(|_| "-".into());
        cmi_printf!(
            "hosts {}: {}\nhosts-var {var}\nok core_hosts\n",
            hosts::num_physical_nodes(),
            of.join(" ")
        );
        converse::exit(0);
    })
}

fn init_returns_pe() {
    let (p, me) = (num_pes(), my_pe());
    let reports: Rc<RefCell<Vec<u64>>> = Rc::default();
    let r = reports.clone();
    let h_report =
        converse::register_handler(move |msg: Message| r.borrow_mut().push(word(&msg, 0)));
    let answer: Rc<Cell<Option<u64>>> = Rc::default();
    let a = answer.clone();
    let h_answer = converse::register_handler(move |msg: Message| {
        check!(
            a.replace(Some(word(&msg, 0))).is_none(),
            "a second answer from PE 0"
        );
    });
    converse::sync_send_and_free(0, msg_words(h_report, &[me as u64], &[]));
    if me == 0 {
        poll_until(
            || reports.borrow().len() == p,
            "PE 0 waiting for every PE's report",
        );
        let mut got = reports.borrow().clone();
        got.sort();
        check!(
            got == (0..p as u64).collect::<Vec<_>>(),
            "reports from PEs {got:?}"
        );
        for q in 0..p {
            converse::sync_send_and_free(q, msg_words(h_answer, &[q as u64 * 3 + 1], &[]));
        }
    }
    poll_until(|| answer.get().is_some(), "waiting for PE 0's answer");
    let want = me as u64 * 3 + 1;
    check!(
        answer.get() == Some(want),
        "answer {:?}, expected {want}",
        answer.get()
    );
}

fn init_returns() -> i32 {
    if let Err(e) = Converse::new().init_returns(|_| init_returns_pe()) {
        bad_command_line(&e);
        return 2;
    }
    let first = converse::node_first(my_node());
    check!(
        my_pe() == first,
        "init_returns made the main thread PE {}, not its process's first PE {first}",
        my_pe()
    );
    init_returns_pe();
    if my_pe() == 0 {
        cmi_printf!("ok core_init_returns\n");
    }
    converse::finish(0)
}

// ---------------------------------------------------------------------------
// core_exit and core_panic: one PE ends the whole job
// ---------------------------------------------------------------------------

/// The PE that ends the job: the last one (in the last process; rank 1 of
/// its process when processes have two PEs).
fn ender() -> usize {
    num_pes() - 1
}

/// Keeps PE 0 and the first PE of process 1 busy with a ping-pong of a large
/// message, has every
/// PE answer PE 0, then tells the [`ender`] to `end` the job (in a handler,
/// or in a user-level thread when `in_thread`).
fn ending_job(end: fn(), in_thread: bool) -> i32 {
    run_normal(move |_| {
        let me = my_pe();
        let partner = converse::node_first(1);
        // A 256 KiB message bounced between the two processes without end:
        // the job must end with it in flight.
        let h_ping = converse::register_handler(move |mut msg: Message| {
            let n = word(&msg, 0);
            msg.payload_mut()[..8].copy_from_slice(&(n + 1).to_le_bytes());
            let to = if my_pe() == 0 { partner } else { 0 };
            converse::sync_send_and_free(to, msg);
        });
        let h_end = converse::register_handler(move |_msg: Message| {
            check!(my_pe() == ender(), "end message on PE {}", my_pe());
            if in_thread {
                Thread::create(
                    move || {
                        converse::sleep(1.0);
                        end();
                    },
                    0,
                )
                .awaken();
            } else {
                end();
            }
        });
        let acks = Rc::new(Cell::new(0usize));
        let h_ack = converse::register_handler(move |_msg: Message| {
            acks.set(acks.get() + 1);
            if acks.get() == num_pes() - 1 {
                converse::sync_send_and_free(ender(), Message::new(h_end, 0));
            }
        });
        let h_hello = converse::register_handler(move |_msg: Message| {
            converse::sync_send_and_free(0, Message::new(h_ack, 0));
        });
        if me == 0 {
            converse::sync_send_and_free(partner, msg_words(h_ping, &[0], &[0; 256 << 10]));
            converse::sync_broadcast(&Message::new(h_hello, 0));
        }
    })
}

fn exit_seven() {
    cmi_printf!("exiting from PE {} with 7\n", my_pe());
    converse::exit(7)
}

/// Process 0 registers two handlers in one order, every other process in
/// the other: each process's PEs agree among themselves, so only the check
/// across processes can see it.
fn handler_mismatch() -> i32 {
    run_normal(|_args| {
        fn first(_m: Message) {}
        fn second(_m: Message) {}
        if my_node() == 0 {
            converse::register_handler(first);
            converse::register_handler(second);
        } else {
            converse::register_handler(second);
            converse::register_handler(first);
        }
    })
}

fn deliberate_panic() {
    panic!("deliberate panic on PE {}", my_pe())
}

// ---------------------------------------------------------------------------
// core_huge: messages from 0 B to 64 MiB to another process and back
// ---------------------------------------------------------------------------

/// Payload sizes of `core_huge`: around the modules' thresholds (a cell,
/// MPI's eager limit, the single-copy threshold) and up to 64 MiB.
const HUGE_SIZES: [usize; 10] = [
    0,
    1,
    (16 << 10) - 40,
    (16 << 10) + 1,
    (64 << 10) + 7,
    (1 << 20) + (64 << 10) + 1,
    (4 << 20) - 1,
    (16 << 20) + 3,
    64 << 20,
    5,
];

/// PE 0 sends each size of [`HUGE_SIZES`] to the last PE (in another
/// process), one at a time; it checks the bytes and sends them back, and
/// PE 0 checks them again.
fn huge() -> i32 {
    run_normal(|_| {
        let (p, me) = (num_pes(), my_pe());
        let last = p - 1;
        let step = Rc::new(Cell::new(0usize));
        let h = Rc::new(Cell::new(0usize));
        let handler = {
            let (step, h) = (step.clone(), h.clone());
            converse::register_handler(move |msg: Message| {
                let i = step.get();
                check!(i < HUGE_SIZES.len(), "more messages than sizes");
                let what = format!("size {} (message {i})", HUGE_SIZES[i]);
                check_pattern(msg.payload(), HUGE_SIZES[i], i as u64 * 7 + 1, &what);
                if converse::my_pe() == last {
                    step.set(i + 1);
                    converse::sync_send_and_free(0, msg);
                    return;
                }
                step.set(i + 1);
                if i + 1 == HUGE_SIZES.len() {
                    cmi_printf!("ok core_huge\n");
                    converse::exit(0);
                }
                let next = Message::from_payload(
                    h.get(),
                    &pattern(HUGE_SIZES[i + 1], (i as u64 + 1) * 7 + 1),
                );
                converse::sync_send_and_free(last, next);
            })
        };
        h.set(handler);
        if me == 0 {
            check!(node_of(last) != node_of(0), "core_huge needs two processes");
            converse::sync_send_and_free(
                last,
                Message::from_payload(handler, &pattern(HUGE_SIZES[0], 1)),
            );
        }
    })
}

// ---------------------------------------------------------------------------
// core_rdma: one-sided puts and gets from PE 0 into every other PE's memory
// ---------------------------------------------------------------------------

/// Sizes PE 0 puts and gets at the last PE (another process); the other PEs
/// get the small ones.
const RDMA_SIZES: [usize; 7] = [0, 1, 7, 4096 + 3, (64 << 10) + 5, (1 << 20) + 9, 64 << 20];
const RDMA_SMALL: usize = 5;

/// Every PE but 0 registers a buffer (`dma_alloc`) and tells PE 0 where it
/// is; PE 0 puts patterns there and gets them back (handles and
/// callbacks), then checks that reaching past a buffer is refused.
fn rdma() -> i32 {
    use converse::cmi::rdma;
    thread_local! {
        static BUF: RefCell<Option<rdma::DmaBuffer>> = const { RefCell::new(None) };
        static WHERE: RefCell<Vec<(usize, u64, usize)>> = const { RefCell::new(Vec::new()) };
    }
    run_normal(|_| {
        let (p, me) = (num_pes(), my_pe());
        let last = p - 1;
        let at = converse::register_handler(|m: Message| {
            let w: Vec<u64> = m
                .payload()
                .chunks(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                .collect();
            WHERE.with(|v| v.borrow_mut().push((w[0] as usize, w[1], w[2] as usize)));
        });
        if me != 0 {
            let len = if me == last {
                (64 << 20) + 64
            } else {
                (64 << 10) + 64
            };
            let buf = rdma::dma_alloc(len);
            let words = [me as u64, buf.addr(), len as u64];
            BUF.with(|b| *b.borrow_mut() = Some(buf));
            converse::sync_send_and_free(0, msg_words(at, &words, &[]));
            return;
        }
        while WHERE.with(|v| v.borrow().len()) < p - 1 {
            converse::deliver_specific_msg(at);
        }
        let targets = WHERE.with(|v| v.borrow().clone());
        for &(pe, addr, len) in &targets {
            let sizes = if pe == last {
                &RDMA_SIZES[..]
            } else {
                &RDMA_SIZES[..RDMA_SMALL]
            };
            for (i, &size) in sizes.iter().enumerate() {
                let what = format!("{size} bytes at PE {pe}");
                let data = pattern(size, (pe * 31 + i) as u64);
                // At the buffer's end, so that its last byte is used too.
                let spot = addr + (len - size) as u64;
                let h = rdma::put(pe, &data, spot);
                if let Err(e) = h.wait() {
                    fail(&format!("put of {what}: {e}"));
                }
                let h = rdma::get(pe, spot, size);
                match h.wait() {
                    Ok(got) => {
                        check_pattern(&got, size, (pe * 31 + i) as u64, &format!("get of {what}"))
                    }
                    Err(e) => fail(&format!("get of {what}: {e}")),
                }
            }
            // From and into registered memory of this PE (over shm, the
            // single copies straight between the two buffers).
            let size = sizes[sizes.len() - 1];
            let mine = std::sync::Arc::new(rdma::dma_alloc(size + 8));
            let data = pattern(size, 99);
            mine.write(8, &data);
            let h = rdma::put_from(pe, &mine, 8, size, addr);
            check!(h.wait().is_ok(), "put_from of {size} bytes to PE {pe}");
            let back = std::sync::Arc::new(rdma::dma_alloc(size + 3));
            let h = rdma::get_into(pe, addr, &back, 3, size);
            check!(h.wait().is_ok(), "get_into of {size} bytes from PE {pe}");
            let mut got = vec![0; size];
            back.read(3, &mut got);
            check_pattern(&got, size, 99, &format!("get_into from PE {pe}"));
            // Callbacks: each runs once, on this PE, after its operation.
            let ran = Rc::new(Cell::new(0));
            let data = pattern(100, 7);
            {
                let ran = ran.clone();
                rdma::put_cb(pe, &data, addr, move |r| {
                    check!(r.is_ok(), "put_cb to PE {pe}: {r:?}");
                    check!(my_pe() == 0, "put_cb ran on PE {}", my_pe());
                    ran.set(ran.get() + 1);
                });
            }
            {
                let ran = ran.clone();
                rdma::get_cb(pe, addr, 100, move |r| {
                    check!(my_pe() == 0, "get_cb ran on PE {}", my_pe());
                    match r {
                        Ok(got) => check_pattern(&got, 100, 7, "get_cb"),
                        Err(e) => fail(&format!("get_cb from PE {pe}: {e}")),
                    }
                    ran.set(ran.get() + 10);
                });
            }
            while ran.get() < 11 {
                converse::schedule_count(1);
            }
            check!(
                ran.get() == 11,
                "callbacks ran {} (1 put, 10 get)",
                ran.get()
            );
            // The same memory through a global pointer: it dereferences
            // only in its own process.
            let g = rdma::GlobalPtr { pe, addr, len };
            check!(
                g.dref().is_some() == (node_of(pe) == node_of(0)),
                "dref of a pointer to PE {pe}: {:?}",
                g.dref()
            );
            check!(g.put(b"global").wait().is_ok(), "global put to PE {pe}");
            check!(
                g.sync_get(6).ok().as_deref() == Some(&b"global"[..]),
                "global sync_get from PE {pe}"
            );
            // Past the end of the buffer (in the messages, and large enough
            // for one copy between processes, written by the target or
            // read by this process), and somewhere never registered.
            let (single, read) = (rdma::SINGLE_COPY_MIN * 2, rdma::INITIATOR_READS_MIN * 2);
            for (spot, n) in [
                (addr + len as u64 - 3, 10),
                (addr + len as u64 - 4096, single),
                (addr + len as u64 - 4096, read),
                (8, 1),
            ] {
                match rdma::get(pe, spot, n).wait() {
                    Ok(_) => fail(&format!(
                        "a get of {n} bytes at {spot:#x} on PE {pe} was allowed"
                    )),
                    Err(e) => check!(
                        e.target_pe == pe && e.why.contains("refused: no range registered"),
                        "get outside: {e}"
                    ),
                }
                let h = rdma::put(pe, &vec![1; n], spot);
                check!(
                    h.wait().is_err(),
                    "a put of {n} bytes at {spot:#x} on PE {pe} was allowed"
                );
            }
        }
        cmi_printf!("ok core_rdma\n");
        converse::exit(0);
    })
}

// ---------------------------------------------------------------------------
// core_persistent: sends on persistent channels, both ways of making one
// ---------------------------------------------------------------------------

/// Longest message (header included) of `core_persistent`'s channels.
const PERSISTENT_MAX: usize = 8 << 10;
/// Messages per channel; every fifth is too long for it, every fifth too
/// short (a small message goes the ordinary way: `MIN_CHANNEL_MESSAGE`).
const PERSISTENT_MSGS: u64 = 40;

/// A `core_persistent` message's payload length: 6000 bytes, 10,000 (over
/// the channel's limit) for every fifth, and 100 (under its smallest) for
/// every fifth.
fn persistent_len(seq: u64) -> usize {
    match seq % 5 {
        4 => 10_000,
        3 => 100,
        _ => 6000,
    }
}

/// Every PE but 0 opens a channel to itself and sends the request to PE 0;
/// PE 0 makes a channel to each of them itself too, and sends a stream on
/// each (some messages over the limit, some small). The receivers check
/// order and contents, and that messages from another process within the
/// limit came in the channels' buffers (shared, at most a channel's
/// buffers of addresses: no allocation per message) and the longer and
/// the small ones did not.
fn persistent() -> i32 {
    use converse::cmi::persistent::{self, PersistentReq};
    thread_local! {
        static REQS: RefCell<Vec<PersistentReq>> = const { RefCell::new(Vec::new()) };
        static REPORTS: Cell<usize> = const { Cell::new(0) };
        /// Receiver: next sequence number, in-buffer messages, their
        /// addresses.
        static SEEN: RefCell<(u64, u64, std::collections::BTreeSet<usize>)> =
            const { RefCell::new((0, 0, std::collections::BTreeSet::new())) };
    }
    run_normal(|_| {
        let (p, me) = (num_pes(), my_pe());
        let req_h = converse::register_handler(|m: Message| {
            let req = PersistentReq::from_bytes(m.payload())
                .unwrap_or_else(|| fail("a malformed persistent request"));
            REQS.with(|r| r.borrow_mut().push(req));
        });
        let report_h = converse::register_handler(|m: Message| {
            let w = all_words(&m);
            let (from, in_buffer, addresses) = (w[0] as usize, w[1], w[2]);
            if node_of(from) != node_of(0) {
                check!(
                    in_buffer >= 2,
                    "PE {from}: {in_buffer} messages came in a channel's buffer"
                );
                check!(
                    addresses <= 2 * persistent::buffers_per_channel(PERSISTENT_MAX) as u64,
                    "PE {from}: messages came at {addresses} addresses (two channels)"
                );
            } else {
                check!(
                    in_buffer == 0,
                    "PE {from}: same-process messages in a buffer"
                );
            }
            REPORTS.with(|r| r.set(r.get() + 1));
        });
        let data_h = converse::register_handler(move |m: Message| {
            let me = my_pe();
            let seq = word(&m, 0);
            let (expected, _, _) = SEEN.with(|s| s.borrow().clone());
            check!(
                seq == expected,
                "PE {me}: message {seq} came when {expected} was due"
            );
            let n = seq % PERSISTENT_MSGS;
            check_pattern(
                &m.payload()[8..],
                persistent_len(n),
                seq,
                "persistent message",
            );
            let remote = node_of(0) != node_of(me);
            if remote && m.len() > PERSISTENT_MAX {
                check!(
                    !m.is_shared(),
                    "PE {me}: message {seq} over the limit came in a buffer"
                );
            }
            if remote && m.len() <= converse::cmi::persistent::MIN_CHANNEL_MESSAGE {
                check!(
                    !m.is_shared(),
                    "PE {me}: small message {seq} came in a channel's buffer"
                );
            }
            SEEN.with(|s| {
                let mut s = s.borrow_mut();
                s.0 += 1;
                if m.is_shared() {
                    s.1 += 1;
                    s.2.insert(m.as_bytes().as_ptr() as usize);
                }
            });
            if seq + 1 == 2 * PERSISTENT_MSGS {
                let (_, in_buffer, addresses) = SEEN.with(|s| s.borrow().clone());
                let words = [me as u64, in_buffer, addresses.len() as u64];
                converse::sync_send_and_free(0, msg_words(report_h, &words, &[]));
            }
        });
        if me != 0 {
            let req = persistent::create_receiver_persistent(PERSISTENT_MAX);
            check!(
                req.pe == me && req.max_bytes == PERSISTENT_MAX,
                "request {req:?}"
            );
            converse::sync_send_and_free(0, Message::from_payload(req_h, &req.to_bytes()));
            return;
        }
        while REQS.with(|r| r.borrow().len()) < p - 1 {
            converse::deliver_specific_msg(req_h);
        }
        let reqs = REQS.with(|r| r.borrow().clone());
        for req in reqs {
            let pe = req.pe;
            let remote = node_of(pe) != node_of(0);
            // Sender-made: ready once PE `pe` answers (never in-process).
            let made = persistent::create_persistent(pe, PERSISTENT_MAX);
            while remote && !made.is_ready() {
                converse::schedule_count(1);
            }
            check!(
                made.is_ready() == remote,
                "{made:?} ready: {}",
                made.is_ready()
            );
            // Receiver-made: ready at once.
            let registered = persistent::register_receive_persistent(req);
            check!(registered.is_ready() == remote, "{registered:?}");
            for (round, handle) in [made, registered].into_iter().enumerate() {
                persistent::use_persistent(std::slice::from_ref(&handle));
                for n in 0..PERSISTENT_MSGS {
                    let seq = round as u64 * PERSISTENT_MSGS + n;
                    let msg = msg_words(data_h, &[seq], &pattern(persistent_len(n), seq));
                    if n % 2 == 0 {
                        converse::sync_send(pe, &msg);
                    } else {
                        converse::sync_send_and_free(pe, msg);
                    }
                }
                persistent::use_persistent(&[]);
                handle.destroy();
                check!(!handle.is_ready() && handle.is_destroyed(), "{handle:?}");
            }
        }
        persistent::destroy_all_persistent();
        while REPORTS.with(Cell::get) < p - 1 {
            converse::deliver_specific_msg(report_h);
        }
        cmi_printf!("ok core_persistent\n");
        converse::exit(0);
    })
}

// ---------------------------------------------------------------------------
// core_migrate: a thread that moves itself through every PE, processes too
// ---------------------------------------------------------------------------

/// Moves `core_migrate`'s thread makes.
const MIGRATE_HOPS: usize = 1000;

/// A list of boxes on the thread's heap.
struct MigrateLink {
    value: u64,
    next: Option<Box<MigrateLink>>,
}

/// A migratable thread made on PE 0 builds a list on its heap and an array
/// on its stack, then moves itself from PE to PE (every other hop to the
/// last PE, another process) `MIGRATE_HOPS` times, checking both after
/// every move; it ends the job from wherever it is.
fn migrate() -> i32 {
    use converse::cth::migrate::migrate_self;
    run_normal(|_| {
        if my_pe() != 0 {
            return;
        }
        let t = Thread::create_migratable(
            || {
                let p = num_pes();
                let mut array = [0u64; 300];
                for (i, x) in array.iter_mut().enumerate() {
                    *x = i as u64 * 7919;
                }
                converse::cth::on_thread_heap(|| {
                    let mut list: Option<Box<MigrateLink>> = None;
                    for value in 0..100 {
                        list = Some(Box::new(MigrateLink { value, next: list }));
                    }
                    let mut crossings = 0;
                    for hop in 0..MIGRATE_HOPS {
                        let from = my_pe();
                        let dest = if hop % 2 == 0 { p - 1 } else { (from + 1) % p };
                        migrate_self(dest);
                        check!(my_pe() == dest, "hop {hop}: on PE {} not {dest}", my_pe());
                        if node_of(from) != node_of(dest) {
                            crossings += 1;
                        }
                        let mut at = list.as_deref();
                        let mut expect = 100;
                        while let Some(l) = at {
                            expect -= 1;
                            check!(
                                l.value == expect,
                                "hop {hop}: list value {} not {expect}",
                                l.value
                            );
                            at = l.next.as_deref();
                        }
                        check!(expect == 0, "hop {hop}: the list lost {expect} links");
                        check!(
                            array.iter().enumerate().all(|(i, &x)| x == i as u64 * 7919),
                            "hop {hop}: the stack array changed"
                        );
                    }
                    check!(
                        num_nodes() == 1 || crossings >= MIGRATE_HOPS / 2,
                        "only {crossings} moves crossed processes"
                    );
                });
                cmi_printf!("ok core_migrate\n");
                converse::exit(0);
            },
            64 << 10,
        );
        t.awaken();
    })
}

// ---------------------------------------------------------------------------
// ext_futures: futures filled from every PE, other processes included
// ---------------------------------------------------------------------------

/// A thread on PE 0 makes a future per other PE and sends each its handle;
/// each PE fills its future with its number, and the thread waits for
/// them all; then async code on PE 0 awaits one more, filled by the last
/// PE.
fn ext_futures() -> i32 {
    use converse_ext::futures::{self, Cfuture};
    futures::install();
    run_normal(|_| {
        let fill = converse::register_handler(|m: Message| {
            let f = Cfuture::from_bytes(m.payload())
                .unwrap_or_else(|| fail("a malformed future handle"));
            futures::set(f, &(my_pe() as u64).to_le_bytes());
        });
        if my_pe() != 0 {
            return;
        }
        Thread::create(
            move || {
                let p = num_pes();
                let mine: Vec<Cfuture> = (1..p).map(|_| futures::create()).collect();
                for (pe, f) in (1..p).zip(&mine) {
                    converse::sync_send_and_free(pe, Message::from_payload(fill, &f.to_bytes()));
                }
                for (pe, f) in (1..p).zip(&mine) {
                    let v = futures::wait(*f);
                    check!(
                        *v == (pe as u64).to_le_bytes(),
                        "future of PE {pe} holds {:?}",
                        &*v
                    );
                    futures::destroy(*f);
                }
                // Async code awaits one more, filled by the last PE.
                converse_ext::tasks::spawn(async move {
                    let last = p - 1;
                    let f = futures::create();
                    converse::sync_send_and_free(last, Message::from_payload(fill, &f.to_bytes()));
                    let v = f.await;
                    check!(
                        *v == (last as u64).to_le_bytes(),
                        "the awaited future holds {:?}",
                        &*v
                    );
                    cmi_printf!("ok ext_futures\n");
                    converse::exit(0);
                });
            },
            0,
        )
        .awaken();
    })
}

// ---------------------------------------------------------------------------
// ext_cms: master-slave across processes
// ---------------------------------------------------------------------------

/// PE 0 fires two phases of tasks (squaring numbers) that the PEs take in
/// turn, collects them, then takes three more through a consumer; every
/// response must be the square.
fn ext_cms() -> i32 {
    use converse_ext::cms;
    fn worker(task: &[u8]) -> Vec<u8> {
        let n = u64::from_le_bytes(task.try_into().expect("a u64"));
        (n * n).to_le_bytes().to_vec()
    }
    fn square(r: &[u8]) -> u64 {
        u64::from_le_bytes(r.try_into().expect("a u64"))
    }
    run_normal(|_| {
        let tasks = 2 * num_pes();
        cms::init(worker, tasks);
        if my_pe() == 0 {
            for phase in 0..2u64 {
                for j in 0..tasks {
                    cms::fire_task(j, &(phase * 100 + j as u64).to_le_bytes());
                }
                cms::await_responses();
                for j in 0..tasks {
                    let n = phase * 100 + j as u64;
                    let r =
                        cms::get_response(j).unwrap_or_else(|| fail(&format!("no response {j}")));
                    check!(
                        square(&r) == n * n,
                        "phase {phase}: response {j} is {}",
                        square(&r)
                    );
                }
            }
            for i in 0..3 {
                cms::fire_task(i, &(7 + i as u64).to_le_bytes());
            }
            let seen = Rc::new(Cell::new(0u32));
            let counted = seen.clone();
            cms::process_responses(move |r, refnum| {
                let n = 7 + refnum as u64;
                check!(
                    square(&r) == n * n,
                    "consumer: response {refnum} is {}",
                    square(&r)
                );
                counted.set(counted.get() | 1 << refnum);
            });
            check!(seen.get() == 0b111, "the consumer saw {:#b}", seen.get());
            cmi_printf!("ok ext_cms\n");
        }
        cms::exit();
    })
}

// ---------------------------------------------------------------------------
// ext_cld: seed load balancing across processes
// ---------------------------------------------------------------------------

/// The tree search of `converse-ext/examples/cld_tree.rs`: arguments `N
/// CUTOFF [int]` and a `+balancer`. The example checks the answer, that
/// every seed ran once, and that seeds were packed exactly when they left
/// their process; PE 0 prints its figures.
fn ext_cld() -> i32 {
    converse_ext::cld::install();
    run_normal(|args| cld_tree::start(&args[1..]))
}

/// The prioritized sends of `cld` across processes: a seed to the last
/// node's queue, one to the last PE, one broadcast to all PEs and one to
/// all nodes. Each is packed
/// (its pack function marks it) exactly when it lands in another process
/// than PE 0's, and runs with its own handler back; PE 0 counts the runs.
fn ext_cld_sends() -> i32 {
    use converse_ext::cld::{self, Dest, NodeDest, SeedInfo};
    fn pack(mut m: Message) -> Message {
        m.payload_mut()[1] = 1;
        m
    }
    fn info(m: &Message) -> SeedInfo {
        SeedInfo::new(m, converse::Queueing::IFifo(-1)).with_pack(pack)
    }
    cld::install();
    run_normal(|_| {
        let info_fn = cld::register_info_fn(info);
        let runs = Rc::new(Cell::new(0usize));
        let r = Rc::clone(&runs);
        let counted = converse::register_handler(move |_m: Message| {
            r.set(r.get() + 1);
            // 1 node seed + 1 PE seed + one broadcast copy per PE and one
            // per node.
            if r.get() == 2 + num_pes() + num_nodes() {
                cmi_printf!("ok ext_cld_sends\n");
                converse::exit(0);
            }
        });
        let own = Rc::new(Cell::new(0));
        let o = Rc::clone(&own);
        own.set(converse::register_handler(move |m: Message| {
            check!(m.handler() == o.get(), "the seed's own handler is back");
            let away = !converse::machine::process_pes().contains(&0);
            check!(
                (m.payload()[1] == 1) == away,
                "seed kind {} on PE {}: packed {}, in another process than PE 0 {away}",
                m.payload()[0],
                my_pe(),
                m.payload()[1]
            );
            if m.payload()[0] == 0 {
                check!(
                    converse::my_node() == num_nodes() - 1,
                    "the node seed ran on node {}",
                    converse::my_node()
                );
            }
            if m.payload()[0] == 1 {
                check!(
                    my_pe() == num_pes() - 1,
                    "the PE seed ran on PE {}",
                    my_pe()
                );
            }
            converse::sync_send_and_free(0, Message::new(counted, 0));
        }));
        if my_pe() != 0 {
            return;
        }
        let seed = |kind: u8| Message::from_payload(own.get(), &[kind, 0]);
        cld::node_enqueue(NodeDest::Node(num_nodes() - 1), seed(0), info_fn);
        cld::enqueue(Dest::Pe(num_pes() - 1), seed(1), info_fn);
        cld::enqueue(Dest::BroadcastAll, seed(2), info_fn);
        cld::node_enqueue(NodeDest::BroadcastAll, seed(3), info_fn);
    })
}

/// A pthread function called in the start function: the job ends with the
/// manual's explanation (pthreads only in pthreads; §9.5).
fn ext_cpthreads_outside() -> i32 {
    use converse_ext::cpthreads;
    cpthreads::install();
    run_normal(|_| {
        let attr = cpthreads::PthreadAttr::new();
        let t = cpthreads::pthread_create(&attr, || Box::new(())).expect("a thread");
        let _ = cpthreads::pthread_join(t);
    })
}

/// PE 0 sends the last PE (another process) a forged seed whose own
/// handler is the balancer's: the job must end naming the sender, not
/// pass the seed around for ever.
fn ext_cld_forged() -> i32 {
    use converse_ext::cld;
    cld::install();
    run_normal(|_| {
        if my_pe() != 0 {
            return;
        }
        let mut m = Message::new(cld::balance_handler_index(), 8);
        cld::switch_handler(&mut m, cld::handler_index());
        converse::sync_send_and_free(num_pes() - 1, m);
    })
}

// ---------------------------------------------------------------------------
// ext_cpm: #[invokable] functions across processes
// ---------------------------------------------------------------------------

/// The destinations `ext_cpm` launches through, by number.
const CPM_KINDS: [&str; 9] = [
    "send",
    "fifo",
    "ififo",
    "blifo",
    "enqueue",
    "thread",
    "thread_size",
    "all",
    "others",
];

/// Where an `ext_cpm` invocation ran, told to PE 0.
#[converse_ext::invokable]
fn cpm_ran(kind: u8, from: usize, on: usize, in_thread: bool, numbers: Vec<usize>) {
    thread_local! {
        static GOT: RefCell<BTreeMap<(u8, usize, usize), bool>> = const { RefCell::new(BTreeMap::new()) };
    }
    let mine = cpm_handler_numbers();
    check!(
        numbers == mine,
        "PE {on} has handler numbers {numbers:?} for the invokables, PE 0 {mine:?}"
    );
    let p = num_pes();
    let done = GOT.with_borrow_mut(|got| {
        check!(
            got.insert((kind, from, on), in_thread).is_none(),
            "{} from PE {from} ran twice on PE {on}",
            CPM_KINDS[kind as usize]
        );
        let expected = (CPM_KINDS.len() - 1) * p * p + p * (p - 1);
        got.len() == expected
    });
    if !done {
        return;
    }
    GOT.with_borrow(|got| {
        for (&(kind, from, on), &in_thread) in got {
            let name = CPM_KINDS[kind as usize];
            check!(
                in_thread == name.starts_with("thread"),
                "{name} from PE {from} on PE {on}: in a thread {in_thread}"
            );
        }
    });
    cmi_printf!("ok ext_cpm\n");
    converse::exit(0);
}

/// Runs where the destination says, and tells PE 0.
#[converse_ext::invokable]
fn cpm_run(kind: u8, from: usize, text: &str) {
    check!(text == "marshalled", "the text arrived as {text:?}");
    let in_thread = !Thread::current().is_main_flow();
    Cpm_cpm_ran(
        converse_ext::cpm::send(0),
        kind,
        from,
        my_pe(),
        in_thread,
        cpm_handler_numbers(),
    );
}

/// Never registered: launching it must abort.
#[converse_ext::invokable(explicit)]
fn cpm_unregistered() {}

/// The handler numbers of this file's invokables and `cpm-peer`'s.
fn cpm_handler_numbers() -> Vec<usize> {
    use converse_ext::cpm;
    let mut n = vec![
        cpm::handler_index(&CPM_CPM_RAN),
        cpm::handler_index(&CPM_CPM_RUN),
    ];
    n.extend(cpm_peer::handler_numbers());
    n
}

/// Every PE invokes `cpm_run` on every PE through every destination; each
/// run tells PE 0, which checks that each ran once, where and how it
/// should, and that every PE has the same handler numbers for two crates'
/// invokables.
fn ext_cpm() -> i32 {
    use converse_ext::cpm::{self, CPM_ALL, CPM_OTHERS};
    run_normal(|_| {
        let me = my_pe();
        let text = "marshalled";
        for pe in 0..num_pes() {
            Cpm_cpm_run(cpm::send(pe), 0, me, text);
            Cpm_cpm_run(cpm::enqueue_fifo(pe), 1, me, text);
            Cpm_cpm_run(cpm::enqueue_ififo(pe, -2), 2, me, text);
            let prio = converse::BitPrio::new(40, &[7, 0xff00_0000]).unwrap();
            Cpm_cpm_run(cpm::enqueue_blifo(pe, prio), 3, me, text);
            Cpm_cpm_run(cpm::enqueue(pe, converse::Queueing::LLifo(9)), 4, me, text);
            Cpm_cpm_run(cpm::make_thread(pe), 5, me, text);
            Cpm_cpm_run(cpm::make_thread_size(pe, 128 << 10), 6, me, text);
        }
        Cpm_cpm_run(cpm::send(CPM_ALL), 7, me, text);
        Cpm_cpm_run(cpm::enqueue_lifo(CPM_OTHERS), 8, me, text);
    })
}

/// PE 0 sends the last PE (another process) an invocation whose envelope
/// length overruns the message, then (with `args`) one whose arguments do
/// not unpack: the job must end naming the sender.
fn ext_cpm_forged() -> i32 {
    run_normal(move |args| {
        if my_pe() != 0 {
            return;
        }
        let bad_args = args.get(2).is_some_and(|a| a == "args");
        let handler = converse_ext::cpm::handler_index(&CPM_CPM_RUN);
        let payload: &[u8] = if bad_args {
            &[0, 0, 0, 0, 1, 0xff, 0xff]
        } else {
            &[200, 0, 0, 0, 1, 2]
        };
        converse::sync_send_and_free(num_pes() - 1, Message::from_payload(handler, payload));
    })
}

#[converse_ext::invokable(explicit)]
fn cpm_first(n: u32) {
    cmi_printf!("cpm_first({n}) on PE {}\n", my_pe());
}

#[converse_ext::invokable(explicit)]
fn cpm_second(n: u32) {
    cmi_printf!("cpm_second({n}) on PE {}\n", my_pe());
}

/// Odd PEs register two explicit invokables in the other order: the
/// core's comparison of handler tables must see it (each invoker is its
/// own function type) and end the job.
fn ext_cpm_misordered() -> i32 {
    use converse_ext::cpm;
    run_normal(|_| {
        if my_pe().is_multiple_of(2) {
            cpm::register(&CPM_CPM_FIRST);
            cpm::register(&CPM_CPM_SECOND);
        } else {
            cpm::register(&CPM_CPM_SECOND);
            cpm::register(&CPM_CPM_FIRST);
        }
        if my_pe() == 0 {
            Cpm_cpm_first(cpm::send(1), 7);
        }
    })
}

/// Launching an `#[invokable(explicit)]` function nobody registered.
fn ext_cpm_unregistered() -> i32 {
    run_normal(|_| {
        if my_pe() == 0 {
            Cpm_cpm_unregistered(converse_ext::cpm::send(0));
        }
    })
}

// ---------------------------------------------------------------------------
// ext_cpath: parallel arrays of threads across processes
// ---------------------------------------------------------------------------

/// The stencil of `converse-ext/examples/cpath_stencil.rs`: arguments `N
/// ITERATIONS MAPPER`. Element `[0, 0]` compares the gathered grid with
/// the sequential computation and prints whether they are equal.
fn ext_cpath() -> i32 {
    converse_ext::cpath::install();
    run_normal(|args| cpath_stencil::start(&args[1..]))
}

/// CPath's refusals, each ending the job (argument: which): `outside`, a
/// receive in the start function; `forged`, a short message to the
/// module's delivery handler on the last PE (another process); `mapper`,
/// a mapper that names no PE; `mismatch`, two elements of one reduction
/// with different element sizes; `typed`, a typed reducer given another
/// element size; `gone`, a reduction waiting for an element that
/// returned. Forged messages from PE 0 to PE 1 (+p 2), built by hand
/// (the module's wire format): `forged_create`, a second creation of a
/// started element; `forged_twice`, a delivery listing one element twice;
/// `forged_mapper`, a descriptor whose mapper names no PE; `conflict`, a
/// delivery whose descriptor contradicts the one PE 1 knows. And from
/// PE 1 to PE 0: `forged_partial`, a partial reduction claiming the
/// array has 16 elements, not 8.
fn ext_cpath_refused() -> i32 {
    use converse_ext::cpath::{self, CPATH_ALL, CPath};
    /// A reducer of any element size (the first of the program's).
    const BYTEWISE: usize = 4;
    /// Little-endian pieces of a payload.
    fn u32s(out: &mut Vec<u8>, v: &[u32]) {
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        v.iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
    }
    fn u64s(out: &mut Vec<u8>, v: &[u64]) {
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        v.iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
    }
    /// A descriptor's bytes with its sequence number, mapper and
    /// dimensions replaced (creator u32, seq u64, home u32, thread_fn
    /// u32, mapper u32, dims).
    fn forge(p: &CPath, seq: Option<u64>, mapper: Option<u32>, dims: Option<&[u32]>) -> Vec<u8> {
        let mut b = p.to_bytes();
        if let Some(seq) = seq {
            b[4..12].copy_from_slice(&seq.to_le_bytes());
        }
        if let Some(m) = mapper {
            b[20..24].copy_from_slice(&m.to_le_bytes());
        }
        if let Some(dims) = dims {
            b.truncate(24);
            u32s(&mut b, dims);
        }
        b
    }
    /// A delivery of no data with tag 1 to `elements`.
    fn delivery(desc: &[u8], elements: &[u64]) -> Message {
        let mut b = desc.to_vec();
        b.push(0);
        u32s(&mut b, &[1]);
        b.extend_from_slice(&0u64.to_le_bytes());
        u64s(&mut b, elements);
        Message::from_payload(cpath::delivery_handler_index(), &b)
    }
    fn waits(_: &CPath, _: &[u32]) {
        let _ = cpath::recv().tag(99).wait();
    }
    /// Element [1] (on PE 1 under round-robin on 2 PEs) sends PE 0 a
    /// partial of a sum over all elements, claiming 16 elements.
    fn forges_partial(path: &CPath, ix: &[u32]) {
        if ix != [1] {
            return waits(path, ix);
        }
        let d = forge(path, None, None, Some(&[16]));
        let mut b = d.clone();
        u32s(&mut b, &[CPATH_ALL]);
        u32s(&mut b, &[1]);
        b.extend_from_slice(&0u64.to_le_bytes());
        b.extend_from_slice(&(cpath::REDUCER_SUM_I64 as u32).to_le_bytes());
        b.extend_from_slice(&1u64.to_le_bytes());
        b.extend_from_slice(&8u64.to_le_bytes());
        b.extend_from_slice(&d);
        u32s(&mut b, &[0]);
        b.extend_from_slice(&8u64.to_le_bytes());
        b.extend_from_slice(&7i64.to_le_bytes());
        converse::sync_send_and_free(0, Message::from_payload(cpath::partial_handler_index(), &b));
    }
    fn typed(path: &CPath, _: &[u32]) {
        cpath::reduce()
            .over(path, &[])
            .tag(1)
            .reducer(cpath::REDUCER_SUM_I64)
            .bytes(1, 4, &[0; 4])
            .dest(path, &[])
            .contribute();
    }
    /// Element [0] contributes, [1] returns without.
    fn one_leaves(path: &CPath, ix: &[u32]) {
        if ix == [0] {
            cpath::reduce()
                .over(path, &[CPATH_ALL])
                .tag(3)
                .reducer(cpath::REDUCER_SUM_I64)
                .data_of(&[1i64])
                .dest(path, &[0])
                .contribute();
            let _ = cpath::recv().tag(3).wait();
        }
    }
    fn mismatched(path: &CPath, ix: &[u32]) {
        let v = [ix[0] as u8; 8];
        let eltsize = if ix[0] == 1 { 4 } else { 8 };
        cpath::reduce()
            .over(path, &[CPATH_ALL])
            .tag(1)
            .reducer(BYTEWISE)
            .bytes(1, eltsize, &v[..eltsize])
            .dest(path, &[0])
            .contribute();
    }
    cpath::install();
    run_normal(|args| {
        let mode = args.get(2).map_or("", String::as_str);
        let f = cpath::register_thread_fn(mismatched);
        let beyond = cpath::register_mapper(|_, _| num_pes());
        fn leaves(_: &CPath, _: &[u32]) {}
        let leaver = cpath::register_thread_fn(leaves);
        assert_eq!(cpath::register_reducer(|_, _, _| {}), BYTEWISE);
        let waiter = cpath::register_thread_fn(waits);
        let partial_forger = cpath::register_thread_fn(forges_partial);
        let typed_fn = cpath::register_thread_fn(typed);
        let one_leaves_fn = cpath::register_thread_fn(one_leaves);
        if my_pe() != 0 {
            return;
        }
        let rr = cpath::MAPPER_ROUND_ROBIN;
        match mode {
            "outside" => {
                let _ = cpath::recv().tag(1).wait();
            }
            "forged" => {
                converse::sync_send_and_free(
                    num_pes() - 1,
                    Message::from_payload(cpath::delivery_handler_index(), &[1, 2, 3]),
                );
            }
            "discarded" => {
                // An element on the last PE returns at once; two messages
                // for it are never received: reported, and the job ends
                // normally.
                let last = num_pes() - 1;
                let one = cpath::make_thread(leaver, last);
                for t in [5, 6] {
                    cpath::send().dest(&one, &[]).tag(t).bytes(b"x").send();
                }
                converse::start_quiescence_detection(|| converse::exit(0));
            }
            "mapper" => {
                cpath::make_array(f, beyond, &[2, 3]);
            }
            "mismatch" => {
                cpath::make_array(f, cpath::MAPPER_ROUND_ROBIN, &[4]);
            }
            "typed" => {
                cpath::make_thread(typed_fn, 0);
            }
            "gone" => {
                cpath::make_array(one_leaves_fn, cpath::MAPPER_PE0, &[2]);
            }
            "forged_create" => {
                let p = cpath::make_array(waiter, rr, &[2]);
                let mut b = p.to_bytes();
                u64s(&mut b, &[1]);
                converse::sync_send_and_free(
                    1,
                    Message::from_payload(cpath::creation_handler_index(), &b),
                );
            }
            "forged_twice" => {
                let p = cpath::make_array(waiter, rr, &[4]);
                converse::sync_send_and_free(1, delivery(&p.to_bytes(), &[1, 1]));
            }
            "forged_mapper" => {
                let p = cpath::make_array(waiter, rr, &[2]);
                let d = forge(&p, Some(1000), Some(beyond as u32), None);
                converse::sync_send_and_free(1, delivery(&d, &[1]));
            }
            "conflict" => {
                let p = cpath::make_array(waiter, rr, &[2]);
                let d = forge(&p, None, None, Some(&[4]));
                converse::sync_send_and_free(1, delivery(&d, &[1]));
            }
            "forged_partial" => {
                cpath::make_array(partial_forger, rr, &[8]);
            }
            other => fail(&format!("unknown mode {other}")),
        }
    })
}

// ---------------------------------------------------------------------------
// core_isomalloc: unique addresses across processes; a block that migrates
// ---------------------------------------------------------------------------

/// Every PE allocates blocks and reports their ranges to PE 0, which checks
/// that no two overlap; then a block holding a linked list travels from
/// PE 0 to the last PE (another process), is changed there, and comes
/// back, its internal pointers valid all the way.
fn isomalloc_case() -> i32 {
    use converse::isomalloc::{self, PackedBlock};
    #[repr(C)]
    struct Node {
        value: u64,
        next: *mut Node,
    }
    /// The list's values, following its pointers.
    fn walk(block: std::ptr::NonNull<u8>) -> Vec<u64> {
        let mut v = Vec::new();
        let mut at = block.as_ptr() as *const Node;
        while !at.is_null() {
            // SAFETY: a list built below, in a live block.
            unsafe {
                v.push((*at).value);
                at = (*at).next;
            }
        }
        v
    }
    thread_local! {
        static RANGES: RefCell<Vec<(u64, u64)>> = const { RefCell::new(Vec::new()) };
    }
    run_normal(|_| {
        let (p, me) = (num_pes(), my_pe());
        let last = p - 1;
        let ranges = converse::register_handler(move |m: Message| {
            let w: Vec<u64> = m
                .payload()
                .chunks(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                .collect();
            RANGES.with(|r| r.borrow_mut().extend(w.chunks(2).map(|c| (c[0], c[1]))));
        });
        let traveller = {
            converse::register_handler(move |m: Message| {
                let packed =
                    PackedBlock::from_bytes(m.payload()).unwrap_or_else(|| fail("a packed block"));
                let block = isomalloc::isomalloc_unpack(&packed)
                    .unwrap_or_else(|e| fail(&format!("unpack on PE {}: {e}", my_pe())));
                check!(block.as_ptr() as u64 == packed.addr, "moved");
                let got = walk(block);
                // Each hop adds one to every value: the first says how
                // many hops so far.
                let hop = got.first().copied().unwrap_or(0) as usize;
                let want: Vec<u64> = (0..50).map(|i| i + hop as u64).collect();
                check!(got == want, "hop {hop} on PE {}: {got:?}", my_pe());
                // One more to every value, through the pointers.
                let mut at = block.as_ptr() as *mut Node;
                while !at.is_null() {
                    // SAFETY: the list, in the live block.
                    unsafe {
                        (*at).value += 1;
                        at = (*at).next;
                    }
                }
                if hop + 1 == 10 {
                    // SAFETY: not used after.
                    check!(unsafe { isomalloc::isomalloc_free(block) }.is_ok(), "free");
                    cmi_printf!("ok core_isomalloc\n");
                    converse::exit(0);
                }
                // SAFETY: not used here after.
                let packed = unsafe { isomalloc::isomalloc_pack(block) }
                    .unwrap_or_else(|e| fail(&format!("pack: {e}")));
                let next = if my_pe() == 0 { last } else { 0 };
                converse::sync_send_and_free(
                    next,
                    Message::from_payload(traveller_id(), &packed.to_bytes()),
                );
            })
        };
        TRAVELLER.with(|t| t.set(traveller));
        // Blocks of several sizes on every PE, reported to PE 0.
        let mut words = Vec::new();
        for k in 0..8 {
            let size = 1 + k * 5000;
            let b = isomalloc::isomalloc(size)
                .unwrap_or_else(|e| fail(&format!("isomalloc on PE {me}: {e}")));
            let len = isomalloc::isomalloc_length(b.as_ptr()).unwrap_or(0);
            check!(len >= size, "length {len} for {size}");
            words.extend([b.as_ptr() as u64, len as u64]);
        }
        converse::sync_send_and_free(0, msg_words(ranges, &words, &[]));
        if me != 0 {
            return;
        }
        while RANGES.with(|r| r.borrow().len()) < 8 * p {
            converse::deliver_specific_msg(ranges);
        }
        let mut all = RANGES.with(|r| r.borrow().clone());
        all.sort();
        for w in all.windows(2) {
            check!(w[0].0 + w[0].1 <= w[1].0, "blocks overlap: {w:?}");
        }
        // The traveller: 50 nodes in one block.
        let block = isomalloc::isomalloc(50 * std::mem::size_of::<Node>())
            .unwrap_or_else(|e| fail(&format!("isomalloc: {e}")));
        let nodes = block.as_ptr() as *mut Node;
        for i in 0..50 {
            // SAFETY: inside the fresh block.
            unsafe {
                nodes.add(i).write(Node {
                    value: i as u64,
                    next: if i < 49 {
                        nodes.add(i + 1)
                    } else {
                        std::ptr::null_mut()
                    },
                })
            };
        }
        // SAFETY: not used here after.
        let packed = unsafe { isomalloc::isomalloc_pack(block) }
            .unwrap_or_else(|e| fail(&format!("pack: {e}")));
        converse::sync_send_and_free(last, Message::from_payload(traveller, &packed.to_bytes()));
    })
}

thread_local! {
    /// `core_isomalloc`'s traveller handler, for its own sends.
    static TRAVELLER: Cell<usize> = const { Cell::new(0) };
}

fn traveller_id() -> usize {
    TRAVELLER.with(Cell::get)
}

// ---------------------------------------------------------------------------
// The registry and the driver
// ---------------------------------------------------------------------------

/// Runs child program `name` if it is one of these; returns its exit code.
pub fn child(name: &str, args: &[String]) -> Option<i32> {
    let in_thread = args.iter().any(|a| a == "thread");
    let check_src = args.iter().any(|a| a == "src");
    Some(match name {
        "core_topology" => topology(),
        "core_sends" => sends(),
        "core_large" => large(),
        "core_huge" => huge(),
        "core_rdma" => rdma(),
        "core_isomalloc" => isomalloc_case(),
        "core_persistent" => persistent(),
        "core_migrate" => migrate(),
        "ext_futures" => ext_futures(),
        "ext_cms" => ext_cms(),
        "ext_cld" => ext_cld(),
        "ext_cpm" => ext_cpm(),
        "ext_cpm_forged" => ext_cpm_forged(),
        "ext_cpm_unregistered" => ext_cpm_unregistered(),
        "ext_cpm_misordered" => ext_cpm_misordered(),
        "ext_cld_forged" => ext_cld_forged(),
        "ext_cld_sends" => ext_cld_sends(),
        "ext_cpthreads_outside" => ext_cpthreads_outside(),
        "ext_cpath" => ext_cpath(),
        "ext_cpath_refused" => ext_cpath_refused(),
        "core_node_sends" => node_sends(),
        "core_bcast" => bcast(check_src),
        "core_reduce" => reduce(),
        "core_groups" => groups(check_src),
        "core_qd" => qd(),
        "core_threads" => threads(),
        "core_init_returns" => init_returns(),
        "core_hosts" => hosts(),
        "core_exit" => ending_job(exit_seven, in_thread),
        "core_panic" => ending_job(deliberate_panic, in_thread),
        "core_handler_mismatch" => handler_mismatch(),
        "typed_reductions" => typed_reductions(),
        "typed_pi" => run_normal(|args| pi::start(&args[1..])),
        "typed_work_queue" => run_normal(|args| work_queue::start(&args[1..])),
        "typed_remote_calls" => run_normal(|args| remote_calls::start(&args[1..])),
        _ => return None,
    })
}

/// Starts child program `name` as a job of `pes` PEs in processes of `ppn`
/// over `netmod`, as `common::job` does but with a shorter hang guard.
pub(crate) fn start_job(
    netmod: &str,
    pes: usize,
    ppn: usize,
    name: &str,
    extra: &[&str],
) -> Finished {
    start_job_with(&[], netmod, pes, ppn, name, extra)
}

/// [`start_job`] with more launcher flags.
fn start_job_with(
    launcher: &[&str],
    netmod: &str,
    pes: usize,
    ppn: usize,
    name: &str,
    extra: &[&str],
) -> Finished {
    let me = common::me();
    let (p, n) = (pes.to_string(), ppn.to_string());
    let mut args = launcher.to_vec();
    args.extend_from_slice(&["+p", &p, "++ppn", &n]);
    args.extend(common::netmod_args(netmod));
    args.extend_from_slice(&[&me, name]);
    args.extend_from_slice(extra);
    common::convrun(&args, JOB_LIMIT)
}

/// What a failed job left, for a panic message.
pub(crate) fn output(f: &Finished) -> String {
    format!(
        "exit code {:?} after {:.2} s\n--- stdout\n{}\n--- stderr\n{}",
        f.code,
        f.elapsed.as_secs_f64(),
        f.stdout,
        f.stderr
    )
}

/// The jobs of one driver case: each is run on every netmod and layout, and
/// the case fails at the end, naming every job that went wrong (one bad
/// layout does not hide another).
#[derive(Default)]
pub(crate) struct Jobs {
    failures: Vec<String>,
}

impl Jobs {
    /// Runs `name extra...` everywhere; `judge(job, pes)` says what is wrong
    /// with a finished job, if anything. In `extra`, `{pes}` and `{ppn}`
    /// stand for the layout's numbers.
    pub(crate) fn run(
        &mut self,
        name: &str,
        extra: &[&str],
        judge: impl Fn(&Finished, usize) -> Option<String>,
    ) {
        for netmod in common::NETMODS {
            for &(pes, ppn) in common::layouts(netmod) {
                let extra: Vec<String> = extra
                    .iter()
                    .map(|e| {
                        e.replace("{pes}", &pes.to_string())
                            .replace("{ppn}", &ppn.to_string())
                    })
                    .collect();
                let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
                let f = start_job(netmod, pes, ppn, name, &extra);
                if let Some(why) = judge(&f, pes) {
                    self.failures.push(format!(
                        "=== {name} {extra:?} over {netmod}, +p {pes} ++ppn {ppn}: {why}\n{}",
                        output(&f)
                    ));
                }
            }
        }
    }

    /// Runs `name extra...` everywhere; each job must end with 0 and print
    /// `ok NAME`.
    pub(crate) fn ok(&mut self, name: &str, extra: &[&str]) -> &mut Self {
        let ok = format!("ok {name}");
        self.run(name, extra, |f, _| {
            (f.code != Some(0) || !f.stdout.lines().any(|l| l == ok))
                .then(|| format!("expected exit code 0 and a line `{ok}`"))
        });
        self
    }

    /// Fails the case if any job went wrong.
    pub(crate) fn check(&self) {
        assert!(
            self.failures.is_empty(),
            "{} job(s) failed:\n{}",
            self.failures.len(),
            self.failures.join("\n")
        );
    }
}

fn core_topology() {
    Jobs::default()
        .ok("core_topology", &["{pes}", "{ppn}"])
        .check();
}

fn core_sends() {
    Jobs::default().ok("core_sends", &[]).check();
}

fn core_large() {
    Jobs::default().ok("core_large", &[]).check();
}

/// Messages of 0 B to 64 MiB between two processes, contents checked both
/// ways, over shm, tcp and both (`mpiexec_core` runs it over mpi).
fn core_huge() {
    Jobs::default().ok("core_huge", &[]).check();
}

/// `core_huge` between two processes over shm in each large-message mode
/// (`++lmt`; Get, the default, runs in `core_huge`), the mode said in the
/// start-up line.
fn core_huge_in_every_lmt_mode() {
    let mut failures = Vec::new();
    for mode in ["get", "put", "coop"] {
        let f = start_job("shm", 2, 1, "core_huge", &["++lmt", mode]);
        let said = if mode == "get" {
            "netmod shm\n".to_string()
        } else {
            format!("netmod shm (large messages: {mode})\n")
        };
        if f.code != Some(0) || !f.stdout.contains("ok core_huge") || !f.stdout.contains(&said) {
            failures.push(format!("=== core_huge ++lmt {mode}:\n{}", output(&f)));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// One-sided puts and gets (0 B to 64 MiB) from PE 0 into every other
/// PE's registered memory, in this process and others, over shm, tcp and
/// both: contents, callbacks, refusals.
fn core_rdma() {
    Jobs::default().ok("core_rdma", &[]).check();
}

/// Isomalloc blocks of every PE never overlap, in this process or others;
/// a block with a linked list inside goes back and forth between PE 0 and
/// the last PE (another process) ten times, its pointers valid.
fn core_isomalloc() {
    Jobs::default().ok("core_isomalloc", &[]).check();
}

/// Persistent channels from PE 0 to every other PE, made by the sender
/// and by the receiver, over shm, tcp and both: order, contents, and the
/// receivers' buffers reused (over the limit: the ordinary way).
fn core_persistent() {
    Jobs::default().ok("core_persistent", &[]).check();
}

/// `core_migrate` on every netmod and layout with `++no-aslr`; and
/// without it, between two processes, the move refused naming the cause.
fn core_migrate() {
    let mut failures = Vec::new();
    for netmod in common::NETMODS {
        for &(pes, ppn) in common::layouts(netmod) {
            let f = start_job_with(&["++no-aslr"], netmod, pes, ppn, "core_migrate", &[]);
            if f.code != Some(0) || !f.stdout.contains("ok core_migrate") {
                failures.push(format!(
                    "=== core_migrate over {netmod}, +p {pes} ++ppn {ppn}:\n{}",
                    output(&f)
                ));
            }
        }
    }
    let f = start_job("shm", 2, 1, "core_migrate", &[]);
    if f.code == Some(0) || !f.stderr.contains("address-space randomisation off") {
        failures.push(format!(
            "=== core_migrate without ++no-aslr: expected a refusal naming the cause\n{}",
            output(&f)
        ));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Futures of the extensions library filled from every PE, over shm, tcp
/// and both.
fn ext_futures_case() {
    Jobs::default().ok("ext_futures", &[]).check();
}

/// `#[invokable]` functions through every destination from every PE,
/// over shm, tcp and both; forged invocations and an unregistered
/// invokable end the job naming the sender, or the function.
fn ext_cpm_case() {
    let mut jobs = Jobs::default();
    jobs.ok("ext_cpm", &[]);
    for (extra, why) in [
        ("envelope", "its envelope overruns it"),
        ("args", "the arguments of"),
    ] {
        let f = start_job("tcp", 2, 1, "ext_cpm_forged", &[extra]);
        if f.code == Some(0)
            || !f
                .stderr
                .contains("a malformed Cpm message from PE 0 on PE 1")
            || !f.stderr.contains(why)
        {
            jobs.failures.push(format!(
                "=== ext_cpm_forged {extra}: expected an abort naming the sender and {why:?}\n{}",
                output(&f)
            ));
        }
    }
    // In one process and between two.
    for ppn in [2, 1] {
        let f = start_job("shm", 2, ppn, "ext_cpm_misordered", &[]);
        if f.code == Some(0)
            || !f.stderr.contains("handler tables differ")
            || !f.stderr.contains("cpm_first")
            || f.stdout.contains("cpm_first(7)")
        {
            jobs.failures.push(format!(
                "=== ext_cpm_misordered ++ppn {ppn}: expected the handler check to end the job\n{}",
                output(&f)
            ));
        }
    }
    let f = start_job("shm", 2, 1, "ext_cpm_unregistered", &[]);
    if f.code == Some(0)
        || !f
            .stderr
            .contains("cpm_unregistered is not registered on PE 0")
    {
        jobs.failures.push(format!(
            "=== ext_cpm_unregistered: expected an abort naming the function\n{}",
            output(&f)
        ));
    }
    jobs.check();
}

/// The extensions library's master-slave, over shm, tcp and both.
fn ext_cms_case() {
    Jobs::default().ok("ext_cms", &[]).check();
}

/// The tree search under every seed-balancing strategy, over shm, tcp and
/// both: the answer, and for the strategies that move seeds, some seeds
/// that ran in another process than the one that made them (packed on the
/// way, which the example checks). An unknown `+balancer` ends the job
/// with the names it takes; a forged seed ends it naming its sender.
fn ext_cld_case() {
    let mut jobs = Jobs::default();
    for (strategy, prio) in [
        ("none", "bits"),
        ("rand", "bits"),
        ("neighbor", "bits"),
        ("workstealing", "bits"),
        ("workstealing", "int"),
        ("ring", "bits"),
    ] {
        jobs.run(
            "ext_cld",
            &["24", "8", prio, "+balancer", strategy],
            |f, _| {
                let line = f
                    .stdout
                    .lines()
                    .find(|l| l.starts_with("fib(24) = 46368 from 5167 seeds"));
                let Some(line) = line else {
                    return Some("expected the answer line".to_string());
                };
                if f.code != Some(0) {
                    return Some(format!("exit code {:?}", f.code));
                }
                let left: u64 = line
                    .split(" left their process")
                    .next()
                    .and_then(|s| s.rsplit(' ').next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                let moves = matches!(strategy, "rand" | "workstealing");
                (moves && left == 0).then(|| "no seed left its process".to_string())
            },
        );
    }
    jobs.ok("ext_cld_sends", &[]);
    let f = start_job("tcp", 2, 1, "ext_cld_forged", &[]);
    if f.code == Some(0)
        || !f.stderr.contains("a seed from PE 0 on PE 1 names handler")
        || !f.stderr.contains("the balancer's")
    {
        jobs.failures.push(format!(
            "=== ext_cld_forged: expected an abort naming the sender and the handler\n{}",
            output(&f)
        ));
    }
    let f = start_job("shm", 2, 1, "ext_cld", &["20", "8", "+balancer", "bogus"]);
    if f.code == Some(0)
        || !f.stderr.contains("unknown +balancer `bogus`")
        || !f.stderr.contains("workstealing")
    {
        jobs.failures.push(format!(
            "=== ext_cld +balancer bogus: expected a refusal listing the strategies\n{}",
            output(&f)
        ));
    }
    jobs.check();
}

/// Converse-POSIX threads refuse a blocking call outside a pthread, with
/// the manual's explanation (the threads themselves are tested in
/// `converse-ext/tests/cpthreads.rs`).
fn ext_cpthreads_case() {
    let f = start_job("shm", 2, 1, "ext_cpthreads_outside", &[]);
    assert!(
        f.code != Some(0)
            && f.stderr.contains("pthread_join on PE ")
            && f.stderr.contains("outside a pthread")
            && f.stderr.contains("Cpthreads_start_main"),
        "expected a refusal naming the call and the remedy\n{}",
        output(&f)
    );
}

/// The stencil on a parallel array of threads, over shm, tcp and both,
/// under two built-in mappers and the example's own (which puts element
/// `[0, 0]` on the last PE): the gathered grid must equal the sequential
/// computation. Then CPath's refusals, each naming its cause.
fn ext_cpath_case() {
    let mut jobs = Jobs::default();
    for mapper in ["block", "rr", "columns"] {
        jobs.run("ext_cpath", &["12", "3", mapper], |f, _| {
            (f.code != Some(0)
                || !f
                    .stdout
                    .contains("cpath_stencil: equal to the sequential computation"))
            .then(|| "expected exit code 0 and the grid equal to the sequential one".to_string())
        });
    }
    let refusals: [(&str, &[&str]); 11] = [
        ("outside", &["CPathRecv would block in the start function"]),
        (
            "forged",
            &[
                "a malformed CPath element message from PE 0",
                "message too short",
            ],
        ),
        (
            "mapper",
            &[
                "CPath array 1 of PE 0 (2×3): mapper 4 put element [0, 0] on PE 2, but the job has 2 PEs",
            ],
        ),
        (
            "mismatch",
            &[
                "gave 1 values of 8 bytes",
                "gave 1 values of 4 bytes",
                "element [1]",
            ],
        ),
        (
            "typed",
            &["CPathReduce on PE 0: reducer 0 combines values of 8 bytes, not 4"],
        ),
        (
            "gone",
            &["element [1] returned without contributing to it, so it can never complete"],
        ),
        (
            "forged_create",
            &[
                "a malformed CPath creation message from PE 0 on PE 1",
                "element [1] of CPath array 1 of PE 0 (2) already started on this PE",
            ],
        ),
        (
            "forged_twice",
            &[
                "a malformed CPath element message from PE 0 on PE 1",
                "not strictly increasing",
            ],
        ),
        (
            "forged_mapper",
            &[
                "a malformed CPath element message from PE 0 on PE 1",
                "mapper 4 put element [1] on PE 2, but the job has 2 PEs",
            ],
        ),
        (
            "conflict",
            &[
                "a malformed CPath element message from PE 0 on PE 1",
                "dims: [4]",
                "conflicts with",
                "dims: [2]",
                "from a creation message from PE 0",
            ],
        ),
        (
            "forged_partial",
            &[
                "a malformed CPath partial reduction message from PE 1 on PE 0",
                "dims: [16]",
                "conflicts with",
                "dims: [8]",
                "made on this PE",
            ],
        ),
    ];
    let f = start_job("shm", 2, 1, "ext_cpath_refused", &["discarded"]);
    // Reported when the thread returns (those that came before) or on
    // arrival (those after): two in all, whichever way.
    let reported: usize = f
        .stderr
        .lines()
        .filter(|l| l.contains("discarded unreceived"))
        .filter_map(|l| {
            l.split(" message(s)")
                .next()?
                .rsplit(' ')
                .next()?
                .parse::<usize>()
                .ok()
        })
        .sum();
    if f.code != Some(0) || reported != 2 || !f.stderr.contains("PE 1: ") {
        jobs.failures.push(format!(
            "=== ext_cpath_refused discarded: expected exit code 0 and the two discarded messages reported\n{}",
            output(&f)
        ));
    }
    for (mode, wanted) in refusals {
        let f = start_job("shm", 2, 1, "ext_cpath_refused", &[mode]);
        if f.code == Some(0) || !wanted.iter().all(|w| f.stderr.contains(w)) {
            jobs.failures.push(format!(
                "=== ext_cpath_refused {mode}: expected a refusal saying {wanted:?}\n{}",
                output(&f)
            ));
        }
    }
    jobs.check();
}

fn core_node_sends() {
    Jobs::default().ok("core_node_sends", &[]).check();
}

/// Runs `name` everywhere with the default spanning trees (branching 4: one
/// hop from the root to every other process) and with chains (branching 1:
/// collectives pass through every process in turn).
fn ok_on_both_trees(name: &str) {
    Jobs::default()
        .ok(name, &[])
        .ok(name, &["++spantree-branch1"])
        .check();
}

fn core_bcast() {
    ok_on_both_trees("core_bcast");
}

fn core_reduce() {
    ok_on_both_trees("core_reduce");
}

fn core_groups() {
    ok_on_both_trees("core_groups");
}

fn core_qd() {
    ok_on_both_trees("core_qd");
}

fn core_threads() {
    Jobs::default().ok("core_threads", &[]).check();
}

fn core_init_returns() {
    Jobs::default().ok("core_init_returns", &[]).check();
}

/// `src_pe()` of collective copies that other PEs passed on: broadcasts
/// down the trees (chains of processes with branching 1), multicasts
/// relayed by a group member of another process. In-process, every copy
/// says it is from the root or the sender (the in-process `bcast.rs` tests
/// assert it); `core_bcast` and `core_groups` check everything else.
fn core_src_pe() {
    Jobs::default()
        .ok("core_bcast", &["src"])
        .ok("core_bcast", &["src", "++spantree-branch1"])
        .ok("core_groups", &["src"])
        .ok("core_groups", &["src", "++spantree-branch1"])
        .check();
}

/// How long a job ended by one PE may take at most: less than the 5 s
/// `convrun` gives the other processes before it kills them, so a process
/// that does not end by itself fails the case.
const ENDING_LIMIT: Duration = Duration::from_secs(4);

fn core_exit() {
    let mut jobs = Jobs::default();
    for mode in ["handler", "thread"] {
        jobs.run("core_exit", &[mode], |f, pes| {
            let want = format!("exiting from PE {} with 7", pes - 1);
            (f.code != Some(7) || !f.stdout.lines().any(|l| l == want) || f.elapsed >= ENDING_LIMIT)
                .then(|| {
                    format!("expected exit code 7 within {ENDING_LIMIT:?} and a line `{want}`")
                })
        });
    }
    jobs.check();
}

fn core_panic() {
    let mut jobs = Jobs::default();
    for mode in ["handler", "thread"] {
        jobs.run("core_panic", &[mode], |f, _| {
            let ended = matches!(f.code, Some(c) if c != 0);
            (!ended || !f.stderr.contains("deliberate panic on PE") || f.elapsed >= ENDING_LIMIT)
                .then(|| format!("expected a non-zero exit code within {ENDING_LIMIT:?} and the panic message on stderr"))
        });
    }
    jobs.check();
}

fn core_handler_mismatch() {
    let mut jobs = Jobs::default();
    jobs.run("core_handler_mismatch", &[], |f, _| {
        let ended = matches!(f.code, Some(c) if c != 0);
        let named = f
            .stderr
            .contains("handler tables differ between processes at index")
            && f.stderr.contains("::first (registered at ")
            && f.stderr.contains("::second (registered at ");
        (!ended || !named || f.elapsed >= ENDING_LIMIT).then(|| {
            format!("expected a non-zero exit code within {ENDING_LIMIT:?} naming both handlers")
        })
    });
    jobs.check();
}

/// The driver cases.
/// The physical-node queries on pretend hosts: `convrun` hands every
/// process the hosts of all (`CONVERSE_HOSTS`), as a list for a small job
/// and as MPICH's mapping where that is shorter (16 processes dealt to 3
/// hosts in turn: `(vector,(0,3,1))`), and every PE answers alike.
fn core_hosts() {
    let me = common::me();
    let dealt: Vec<String> = (0..16).map(|n| (n % 3).to_string()).collect();
    for (processes, hosts, want, var) in [
        ("4", "2", "hosts 2: 0 0 1 1 0 0 1 1".to_string(), "0,1,0,1"),
        (
            "16",
            "3",
            format!("hosts 3: {}", dealt.join(" ")),
            "(vector,(0,3,1))",
        ),
    ] {
        let ppn = if processes == "4" { "2" } else { "1" };
        let pes = (ppn.parse::<usize>().unwrap() * processes.parse::<usize>().unwrap()).to_string();
        let f = common::convrun(
            &[
                "+p",
                &pes,
                "++ppn",
                ppn,
                "++netmod",
                "auto",
                "++virtual-hosts",
                hosts,
                &me,
                "core_hosts",
            ],
            JOB_LIMIT,
        );
        f.expect_code(0)
            .expect_line(&want)
            .expect_line(&format!("hosts-var {var}"))
            .expect_line("ok core_hosts");
    }
}

/// Ends a typed reduction of `typed_reductions` on its root: prints what
/// it got, and counts it on PE 0.
#[converse_ext::invokable]
fn typed_reduction_ended(how: String, value: u64) {
    cmi_printf!("typed reduction {how} = {value} on PE {}\n", my_pe());
    Cpm_typed_reduction_counted(converse_ext::cpm::send(0));
}

#[converse_ext::invokable]
fn typed_reduction_counted() {
    thread_local!(static SEEN: Cell<u32> = const { Cell::new(0) });
    if SEEN.with(|s| {
        s.set(s.get() + 1);
        s.get()
    }) == 3
    {
        converse::exit(0);
    }
}

/// Typed reductions across processes: one ending in a typed handler (call
/// order), one in the root's function (by ID), one in an invokable over a
/// PE list whose root is the last PE (another process).
fn typed_reductions() -> i32 {
    run_normal(|_| {
        let me = my_pe() as u64;
        let n = num_pes();
        let add = |a: u64, rest: Vec<u64>| a + rest.iter().sum::<u64>();
        let id = converse::global_reduction_id();
        let list_id = converse::global_reduction_id();
        let handler = converse::handler(|sum: u64| {
            Cpm_typed_reduction_ended(converse_ext::cpm::send(my_pe()), "handler".into(), sum)
        });
        converse::reduction(me, add).then(handler);
        converse::reduction(me * me, add).by_id(id).then_run(|sum| {
            Cpm_typed_reduction_ended(converse_ext::cpm::send(my_pe()), "then_run".into(), sum)
        });
        let pes: Vec<usize> = (0..n).rev().collect();
        converse::reduction(("invokable".to_string(), 1u64), |(how, a), rest| {
            (how, a + rest.iter().map(|(_, b)| b).sum::<u64>())
        })
        .over(&pes, list_id)
        .then(&CPM_TYPED_REDUCTION_ENDED);
    })
}

/// What is wrong with a finished run of typed example `name` on `pes`
/// PEs, if anything: each checks its own answer (a wrong π ends with 1),
/// and prints what is compared here.
fn judge_typed_example(name: &str, f: &Finished, pes: usize) -> Option<String> {
    if f.code != Some(0) {
        return Some(format!("exit code {:?}", f.code));
    }
    let lines: Vec<&str> = f.stdout.lines().collect();
    let has = |want: &str| lines.contains(&want);
    match name {
        "typed_pi" => (!lines.iter().any(|l| {
            l.starts_with("pi is about 3.1")
                && l.ends_with(&format!(" from {} darts", 20_000 * pes))
        }))
        .then(|| "expected `pi is about 3.1… from N darts`".into()),
        "typed_work_queue" => {
            let ran = lines.iter().filter(|l| l.starts_with("job ")).count();
            (ran != 20 || !has("all 20 jobs done, total 13300"))
                .then(|| format!("expected 20 jobs and their total, got {ran} jobs"))
        }
        _ => {
            let steps = [111, 112, 22, 113, 41, 23, 106, 114];
            (1..=8u64).zip(steps).find_map(|(k, s)| {
                let want = format!(
                    "{} takes {s} steps (counted on PE {})",
                    27 * k,
                    k as usize % pes
                );
                (!has(&want)).then(|| format!("expected `{want}`"))
            })
        }
    }
}

/// The typed API's three examples (`pi`, `work_queue`, `remote_calls`):
/// in one process (the test binary started as the program itself, no
/// launcher), then under convrun on every network module and layout; and
/// typed reductions ending in a handler, a function and an invokable
/// across processes (`typed_reductions`).
fn typed_examples_case() {
    let mut jobs = Jobs::default();
    for (name, extra) in [
        ("typed_pi", &["20000"][..]),
        ("typed_work_queue", &[][..]),
        ("typed_remote_calls", &[][..]),
    ] {
        for pes in [1, 4] {
            let p = pes.to_string();
            let mut args = vec![name];
            args.extend_from_slice(extra);
            args.extend_from_slice(&["+p", &p]);
            let f = common::launch_with(&common::me(), &args, JOB_LIMIT, |c| {
                c.env("CONVERSE_TEST_CHILD", "1");
            });
            if let Some(why) = judge_typed_example(name, &f, pes) {
                jobs.failures.push(format!(
                    "=== {name} in one process, +p {pes}: {why}\n{}",
                    output(&f)
                ));
            }
        }
        jobs.run(name, extra, |f, pes| judge_typed_example(name, f, pes));
    }
    jobs.run("typed_reductions", &[], |f, pes| {
        let n = pes as u64;
        let want = [
            format!("typed reduction handler = {} on PE 0", n * (n - 1) / 2),
            format!(
                "typed reduction then_run = {} on PE 0",
                (0..n).map(|k| k * k).sum::<u64>()
            ),
            format!("typed reduction invokable = {n} on PE {}", pes - 1),
        ];
        if f.code != Some(0) {
            return Some(format!("exit code {:?}", f.code));
        }
        want.iter()
            .find(|w| !f.stdout.lines().any(|l| l == w.as_str()))
            .map(|w| format!("expected `{w}`"))
    });
    jobs.check();
}

pub fn cases() -> Vec<Case> {
    vec![
        ("typed_examples", typed_examples_case),
        ("core_topology", core_topology),
        ("core_hosts", core_hosts),
        ("core_sends", core_sends),
        ("core_large", core_large),
        ("core_huge", core_huge),
        ("core_huge_in_every_lmt_mode", core_huge_in_every_lmt_mode),
        ("core_rdma", core_rdma),
        ("core_isomalloc", core_isomalloc),
        ("core_persistent", core_persistent),
        ("core_migrate", core_migrate),
        ("ext_futures", ext_futures_case),
        ("ext_cms", ext_cms_case),
        ("ext_cld", ext_cld_case),
        ("ext_cpm", ext_cpm_case),
        ("ext_cpthreads", ext_cpthreads_case),
        ("ext_cpath", ext_cpath_case),
        ("core_node_sends", core_node_sends),
        ("core_bcast", core_bcast),
        ("core_reduce", core_reduce),
        ("core_groups", core_groups),
        ("core_qd", core_qd),
        ("core_threads", core_threads),
        ("core_init_returns", core_init_returns),
        ("core_src_pe", core_src_pe),
        ("core_exit", core_exit),
        ("core_panic", core_panic),
        ("core_handler_mismatch", core_handler_mismatch),
    ]
}
