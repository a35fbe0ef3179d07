//! Quiescence detection (`start_quiescence_detection`, `qd_create`,
//! `qd_process`, `qd_created`, `qd_processed`), checked by results only.
//!
//! The central test is a random message storm: every PE starts messages that
//! each carry a *budget*, the number of handler runs its whole subtree of
//! messages will cost (itself included). A handler spends one unit and splits
//! the rest among the messages it makes (a send, a fan-out to two PEs, a list
//! send, a local enqueue, a broadcast), so the job's total number of handler
//! runs is the sum of the initial budgets, known before the job starts.
//! Every quiescence callback asserts that the whole storm has been handled,
//! and every storm handler asserts that no callback has run yet: a callback
//! that fires early, late, twice or never fails the test.
//!
//! Every job runs under a hang guard (`within(30, ...)`; 10 s for the one-PE
//! livelock test). Tests marked "Regression" once failed on runtime bugs.
use crate::common;

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{msg_u64, read_u64, run, run_user, within};
use converse::{Message, my_pe, num_pes};

/// A tiny deterministic generator (xorshift64*), so that the storm is the
/// same on every run.
#[derive(Clone, Copy)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        // Mix the seed so that nearby seeds give unrelated streams; never 0.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n > 0`).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

// ---------------------------------------------------------------------------
// The storm
// ---------------------------------------------------------------------------

/// One message a PE starts the storm with.
struct Seedling {
    dest: usize,
    budget: u64,
    seed: u64,
    /// Whether it goes through the local scheduler queue instead of a send.
    enqueue: bool,
}

/// The messages PE `pe` of `n` starts the storm with (a pure function, so
/// the test knows the total before the job runs).
fn seedlings(seed: u64, pe: usize, n: usize) -> Vec<Seedling> {
    let mut rng = Rng::new(seed ^ ((pe as u64 + 1) << 32));
    let count = 2 + rng.below(3);
    (0..count)
        .map(|_| Seedling {
            dest: rng.below(n as u64) as usize,
            budget: 1 + rng.below(150),
            seed: rng.next(),
            enqueue: rng.below(4) == 0,
        })
        .collect()
}

/// The number of handler runs the storm costs: the sum of the budgets.
fn storm_total(seed: u64, n: usize) -> u64 {
    (0..n)
        .flat_map(|pe| seedlings(seed, pe, n))
        .map(|s| s.budget)
        .sum()
}

/// What a storm job shares between its PEs and the test.
struct Storm {
    expected: u64,
    /// Storm handler runs so far.
    runs: AtomicU64,
    /// Set by the first quiescence callback to run.
    quiet: AtomicBool,
    /// How often each detection request's callback ran (see `request_pe`).
    fired: Vec<AtomicU32>,
    fired_total: AtomicUsize,
    /// How often the storm handlers used each way of passing budget on (the
    /// constants below), so the test can tell the storm is not degenerate.
    actions: [AtomicU64; ACTIONS],
}

/// Ways a storm handler passes budget on, indexes into `Storm::actions`.
const FAN_OUT: usize = 0;
const LIST_SEND: usize = 1;
const ENQUEUE: usize = 2;
const BROADCAST: usize = 3;
const SEND: usize = 4;
const ACTIONS: usize = 5;

impl Storm {
    fn new(seed: u64, n: usize) -> Storm {
        Storm {
            expected: storm_total(seed, n),
            runs: AtomicU64::new(0),
            quiet: AtomicBool::new(false),
            fired: (0..requests(n)).map(|_| AtomicU32::new(0)).collect(),
            fired_total: AtomicUsize::new(0),
            actions: Default::default(),
        }
    }
}

/// Detection requests in a storm of `n` PEs: PE 0 at the start of its start
/// function, PE n-1 at the end of its own, and one from inside the handler
/// of each PE's first seedling (wherever that runs, mid-storm).
fn requests(n: usize) -> usize {
    2 + n
}

/// Asks for quiescence detection as request `index` of the storm; the
/// callback checks the storm is over and ends the job after the last one.
fn storm_request(storm: &Arc<Storm>, index: usize) {
    let storm = storm.clone();
    let pe = my_pe();
    converse::start_quiescence_detection(move || {
        assert_eq!(my_pe(), pe, "request {index}: callback on the wrong PE");
        assert_eq!(
            storm.runs.load(SeqCst),
            storm.expected,
            "request {index} (PE {pe}): quiescence reported before the storm was handled"
        );
        storm.quiet.store(true, SeqCst);
        let before = storm.fired[index].fetch_add(1, SeqCst);
        assert_eq!(before, 0, "request {index}: callback ran twice");
        if storm.fired_total.fetch_add(1, SeqCst) + 1 == storm.fired.len() {
            converse::exit(0);
        }
    });
}

/// A storm message: `[budget, seed, ask]` where `ask` is 0 or one plus the
/// index of the detection request its handler makes.
fn storm_msg(handler: usize, budget: u64, seed: u64, ask: u64) -> Message {
    msg_u64(handler, &[budget, seed, ask])
}

/// The storm handler: spends one unit of the message's budget and passes the
/// rest on in randomly chosen ways.
fn storm_handler(storm: &Arc<Storm>, msg: &Message) {
    let me = msg.handler();
    assert!(
        !storm.quiet.load(SeqCst),
        "PE {}: a storm message ran after quiescence was reported",
        my_pe()
    );
    storm.runs.fetch_add(1, SeqCst);
    let (budget, seed, ask) = (read_u64(msg, 0), read_u64(msg, 8), read_u64(msg, 16));
    assert!(budget >= 1, "a storm message without budget");
    if ask > 0 {
        storm_request(storm, ask as usize - 1);
    }
    let n = num_pes() as u64;
    let mut rng = Rng::new(seed);
    let mut rest = budget - 1;
    while rest > 0 {
        let to = |rng: &mut Rng| rng.below(n) as usize;
        match rng.below(10) {
            // Fan out to two PEs (maybe the same one), budgets split unevenly.
            0 | 1 if rest >= 2 => {
                let first = 1 + rng.below(rest - 1);
                converse::sync_send_and_free(to(&mut rng), storm_msg(me, first, rng.next(), 0));
                converse::sync_send_and_free(
                    to(&mut rng),
                    storm_msg(me, rest - first, rng.next(), 0),
                );
                storm.actions[FAN_OUT].fetch_add(1, SeqCst);
                rest = 0;
            }
            // One shared buffer to two distinct PEs.
            2 if rest >= 2 && n >= 2 => {
                let a = to(&mut rng);
                let b = (a + 1 + rng.below(n - 1) as usize) % n as usize;
                let each = rest / 2;
                converse::sync_list_send(&[a, b], &storm_msg(me, each, rng.next(), 0));
                storm.actions[LIST_SEND].fetch_add(1, SeqCst);
                rest -= 2 * each;
            }
            // The local scheduler queue.
            3 | 4 => {
                converse::enqueue(storm_msg(me, rest, rng.next(), 0));
                storm.actions[ENQUEUE].fetch_add(1, SeqCst);
                rest = 0;
            }
            // Every PE, this one included.
            5 if rest >= n => {
                let each = rest / n;
                converse::sync_broadcast_all(&storm_msg(me, each, rng.next(), 0));
                storm.actions[BROADCAST].fetch_add(1, SeqCst);
                rest -= each * n;
            }
            // A plain send of part or all of the rest.
            _ => {
                let part = 1 + rng.below(rest);
                converse::sync_send_and_free(to(&mut rng), storm_msg(me, part, rng.next(), 0));
                storm.actions[SEND].fetch_add(1, SeqCst);
                rest -= part;
            }
        }
    }
    assert!(
        !storm.quiet.load(SeqCst),
        "PE {}: quiescence was reported while a storm handler ran",
        my_pe()
    );
}

/// Runs the storm with `seed` on `pes` PEs in nodes of `ppn`, and checks the
/// totals from outside once the job has ended.
fn run_storm(seed: u64, pes: usize, ppn: usize) -> [u64; ACTIONS] {
    let storm = Arc::new(Storm::new(seed, pes));
    let shared = storm.clone();
    let code = within(30, move || {
        run(pes, ppn, move |_| {
            let storm = shared.clone();
            let h = converse::register_handler(move |msg: Message| storm_handler(&storm, &msg));
            let pe = my_pe();
            let n = num_pes();
            if pe == 0 {
                storm_request(&shared, 0);
            }
            for (i, s) in seedlings(seed, pe, n).into_iter().enumerate() {
                let ask = if i == 0 { 3 + pe as u64 } else { 0 };
                let msg = storm_msg(h, s.budget, s.seed, ask);
                if s.enqueue {
                    converse::enqueue(msg);
                } else {
                    converse::sync_send_and_free(s.dest, msg);
                }
            }
            if pe == n - 1 {
                storm_request(&shared, 1);
            }
        })
    });
    let what = format!("seed {seed}, +p {pes} ++ppn {ppn}");
    assert_eq!(code, 0, "{what}: exit code");
    assert_eq!(
        storm.runs.load(SeqCst),
        storm.expected,
        "{what}: handler runs"
    );
    let fired: Vec<u32> = storm.fired.iter().map(|f| f.load(SeqCst)).collect();
    assert!(
        fired.iter().all(|&f| f == 1),
        "{what}: each request must be answered exactly once: {fired:?}"
    );
    std::array::from_fn(|i| storm.actions[i].load(SeqCst))
}

#[test]
fn storm_is_reported_quiescent_exactly_once_per_request_after_its_last_message() {
    let layouts = [
        (1, 1),
        (2, 1),
        (2, 2),
        (3, 1),
        (3, 3),
        (4, 1),
        (4, 2),
        (5, 1),
        (6, 2),
        (6, 3),
        (7, 1),
        (8, 2),
        (8, 4),
        (9, 1),
        (9, 3),
    ];
    let mut actions = [0; ACTIONS];
    for (i, &(pes, ppn)) in layouts.iter().enumerate() {
        for k in 0..4 {
            let used = run_storm(1000 * k + i as u64, pes, ppn);
            for (total, n) in actions.iter_mut().zip(used) {
                *total += n;
            }
        }
    }
    // Every way of passing budget on was exercised.
    assert!(actions.iter().all(|&n| n > 0), "{actions:?}");
}

#[test]
fn storm_budgets_are_what_the_test_expects() {
    // The arithmetic the storm test relies on: totals are deterministic and
    // the generator is not degenerate.
    assert_eq!(storm_total(5, 4), storm_total(5, 4));
    assert_ne!(storm_total(5, 4), storm_total(6, 4));
    let mut rng = Rng::new(0);
    let draws: Vec<u64> = (0..100).map(|_| rng.below(10)).collect();
    assert!((0..10).all(|d| draws.contains(&d)), "{draws:?}");
}

// ---------------------------------------------------------------------------
// Small jobs
// ---------------------------------------------------------------------------

/// A chain of `hops` messages on one PE, alternating self-sends and local
/// enqueues: the callback sees every link handled and, with nothing else in
/// the job, created and processed counts equal to the number of links.
#[test]
fn single_pe_job_is_quiescent_after_its_chain() {
    const LINKS: u64 = 500;
    let runs = Arc::new(AtomicU64::new(0));
    let fired = Arc::new(AtomicU32::new(0));
    let (r, f) = (runs.clone(), fired.clone());
    let code = within(30, move || {
        run(1, 1, move |_| {
            let (r2, f2) = (r.clone(), f.clone());
            converse::start_quiescence_detection(move || {
                assert_eq!(f2.fetch_add(1, SeqCst), 0, "callback ran twice");
                assert_eq!(r2.load(SeqCst), LINKS);
                assert_eq!(converse::qd_created(), LINKS);
                assert_eq!(converse::qd_processed(), LINKS);
                converse::exit(0);
            });
            let (r3, f3) = (r.clone(), f.clone());
            let h = converse::register_handler(move |msg: Message| {
                assert_eq!(f3.load(SeqCst), 0, "a link ran after quiescence");
                let done = r3.fetch_add(1, SeqCst) + 1;
                assert_eq!(read_u64(&msg, 0), done);
                if done < LINKS {
                    let next = msg_u64(msg.handler(), &[done + 1]);
                    if done % 2 == 0 {
                        converse::sync_send_and_free(0, next);
                    } else {
                        converse::enqueue(next);
                    }
                }
            });
            converse::sync_send_and_free(0, msg_u64(h, &[1]));
        })
    });
    assert_eq!(code, 0);
    assert_eq!(runs.load(SeqCst), LINKS);
    assert_eq!(fired.load(SeqCst), 1);
}

/// A job that sends nothing: requests from PE 0 and from the last PE are
/// each answered once, on their own PE.
#[test]
fn job_without_messages_is_quiescent() {
    for (pes, ppn) in [(1, 1), (2, 1), (3, 3), (4, 2), (5, 1)] {
        let fired: Arc<Vec<AtomicU32>> = Arc::new((0..2).map(|_| AtomicU32::new(0)).collect());
        let total = Arc::new(AtomicUsize::new(0));
        let (f, t) = (fired.clone(), total.clone());
        let code = within(30, move || {
            run(pes, ppn, move |_| {
                let me = my_pe();
                let mine: Vec<usize> = [(0, 0), (num_pes() - 1, 1)]
                    .into_iter()
                    .filter(|&(pe, _)| pe == me)
                    .map(|(_, index)| index)
                    .collect();
                for index in mine {
                    let (f, t) = (f.clone(), t.clone());
                    converse::start_quiescence_detection(move || {
                        assert_eq!(my_pe(), me);
                        assert_eq!(f[index].fetch_add(1, SeqCst), 0, "request {index} twice");
                        if t.fetch_add(1, SeqCst) + 1 == 2 {
                            converse::exit(0);
                        }
                    });
                }
            })
        });
        assert_eq!(code, 0, "+p {pes} ++ppn {ppn}");
        let fired: Vec<u32> = fired.iter().map(|f| f.load(SeqCst)).collect();
        assert_eq!(fired, [1, 1], "+p {pes} ++ppn {ppn}");
    }
}

/// Shared state of the two-phase job.
#[derive(Default)]
struct Phases {
    /// Handler runs of phase 1 and phase 2 messages.
    runs: [AtomicU64; 2],
    /// Callback runs of the first and the second detection.
    fired: [AtomicU32; 2],
}

/// Hops each phase message makes around the ring after its first delivery.
const RING_HOPS: u64 = 20;

/// Two detections in a row: the first is requested at the start while phase
/// 1 (a ring chain from every PE) runs; its callback starts phase 2 (a
/// broadcast, each copy starting a ring chain) and requests the second —
/// before sending (`request_first`) or after. Each callback runs once, after
/// all the messages of its phase and before any message of the next.
fn two_detections(pes: usize, ppn: usize, request_first: bool) {
    let st = Arc::new(Phases::default());
    let shared = st.clone();
    let code = within(30, move || {
        run(pes, ppn, move |_| {
            let st = shared.clone();
            let ring = converse::register_handler(move |msg: Message| {
                let (phase, left) = (read_u64(&msg, 0) as usize, read_u64(&msg, 8));
                // Phase 1 runs before the first callback, phase 2 after it
                // and before the second.
                assert_eq!(st.fired[0].load(SeqCst), phase as u32 - 1, "phase {phase}");
                assert_eq!(st.fired[1].load(SeqCst), 0, "phase {phase} after the end");
                st.runs[phase - 1].fetch_add(1, SeqCst);
                if left > 0 {
                    let next = (my_pe() + 1) % num_pes();
                    let msg = msg_u64(msg.handler(), &[phase as u64, left - 1]);
                    converse::sync_send_and_free(next, msg);
                }
            });
            if my_pe() == 0 {
                let st = shared.clone();
                converse::start_quiescence_detection(move || {
                    let n = num_pes() as u64;
                    assert_eq!(st.fired[0].fetch_add(1, SeqCst), 0, "first callback twice");
                    assert_eq!(st.runs[0].load(SeqCst), n * (RING_HOPS + 1));
                    assert_eq!(st.runs[1].load(SeqCst), 0);
                    let second = {
                        let st = st.clone();
                        move || {
                            assert_eq!(st.fired[1].fetch_add(1, SeqCst), 0, "second twice");
                            assert_eq!(st.fired[0].load(SeqCst), 1);
                            assert_eq!(st.runs[1].load(SeqCst), n * (RING_HOPS + 1));
                            converse::exit(0);
                        }
                    };
                    let phase2 = msg_u64(ring, &[2, RING_HOPS]);
                    if request_first {
                        converse::start_quiescence_detection(second);
                        converse::sync_broadcast_all(&phase2);
                    } else {
                        converse::sync_broadcast_all(&phase2);
                        converse::start_quiescence_detection(second);
                    }
                });
            }
            converse::sync_send_and_free(my_pe(), msg_u64(ring, &[1, RING_HOPS]));
        })
    });
    let what = format!("+p {pes} ++ppn {ppn}, request_first {request_first}");
    assert_eq!(code, 0, "{what}");
    let n = pes as u64;
    let runs: Vec<u64> = st.runs.iter().map(|r| r.load(SeqCst)).collect();
    assert_eq!(runs, [n * (RING_HOPS + 1); 2], "{what}");
    let fired: Vec<u32> = st.fired.iter().map(|f| f.load(SeqCst)).collect();
    assert_eq!(fired, [1, 1], "{what}");
}

#[test]
fn second_detection_started_from_first_callback_after_sending() {
    for (pes, ppn) in [(1, 1), (3, 1), (4, 2), (6, 3)] {
        two_detections(pes, ppn, false);
    }
}

#[test]
fn second_detection_started_from_first_callback_before_sending() {
    for (pes, ppn) in [(1, 1), (3, 1), (4, 2), (6, 3)] {
        two_detections(pes, ppn, true);
    }
}

// ---------------------------------------------------------------------------
// qd_create / qd_process / the counters
// ---------------------------------------------------------------------------

/// How long the PE holding uncounted work polls before releasing it. Only
/// the strength of the check depends on it (detection waves go round during
/// it), never the verdict.
const HOLD: Duration = Duration::from_millis(300);
/// A guard against a broken runtime: polling loops give up after this.
const GIVE_UP: Duration = Duration::from_secs(20);

/// Polls the scheduler (user-calls-scheduler mode) until `done`, failing if
/// that takes longer than [`GIVE_UP`].
fn poll_until(done: impl Fn() -> bool, what: &str) {
    let start = Instant::now();
    while !done() {
        converse::schedule_poll();
        assert!(
            start.elapsed() < GIVE_UP,
            "PE {}: gave up waiting for {what}",
            my_pe()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// In user-calls-scheduler mode (so that a PE can wait without any message
/// in flight), the last PE counts `created` messages with `qd_create`; the
/// first PE's detection must not report quiescence while they are
/// outstanding. After [`HOLD`] the last PE releases them with one message
/// per entry of `releases` (each handler calls `qd_process` with the
/// entry), sent to PE 0 — a different PE than the one that counted them, as
/// the sums are global. The callback checks every release ran.
fn held_by_qd_create(pes: usize, created: usize, releases: &'static [usize]) {
    held_by_qd_create_within(30, pes, created, releases)
}

/// [`held_by_qd_create`] under a hang guard of `secs` seconds.
fn held_by_qd_create_within(secs: u64, pes: usize, created: usize, releases: &'static [usize]) {
    let fired = Arc::new(AtomicBool::new(false));
    let released = Arc::new(AtomicUsize::new(0));
    let (f, r) = (fired.clone(), released.clone());
    let code = within(secs, move || {
        run_user(pes, 1, move |_| {
            let (f2, r2) = (f.clone(), r.clone());
            let release = converse::register_handler(move |msg: Message| {
                assert!(!f2.load(SeqCst), "a release ran after quiescence");
                converse::qd_process(read_u64(&msg, 0) as usize);
                r2.fetch_add(1, SeqCst);
            });
            let last = num_pes() - 1;
            if my_pe() == last {
                converse::qd_create(created);
            }
            if my_pe() == 0 {
                let (f3, r3) = (f.clone(), r.clone());
                converse::start_quiescence_detection(move || {
                    assert_eq!(
                        r3.load(SeqCst),
                        releases.len(),
                        "quiescence reported while qd_create'd work was outstanding"
                    );
                    f3.store(true, SeqCst);
                });
            }
            if my_pe() == last {
                for &n in releases {
                    let start = Instant::now();
                    while start.elapsed() < HOLD {
                        converse::schedule_poll();
                        assert!(!f.load(SeqCst), "quiescence reported during the hold");
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    converse::sync_send_and_free(0, msg_u64(release, &[n as u64]));
                }
            }
            poll_until(|| f.load(SeqCst), "quiescence");
        })
    });
    assert_eq!(code, 0);
    assert!(fired.load(SeqCst));
    assert_eq!(released.load(SeqCst), releases.len());
}

#[test]
fn qd_create_holds_quiescence_until_qd_process() {
    held_by_qd_create(2, 1, &[1]);
    held_by_qd_create(3, 1, &[1]);
}

/// The same on one PE: `schedule_poll` must return once nothing is ready,
/// even with a detection pending that cannot succeed yet. (Regression: the
/// retry of a failed wave used to be queued in PE 0's own scheduler queue,
/// so on one PE something was always ready and the poll never returned.)
#[test]
fn qd_create_holds_quiescence_on_one_pe_without_livelocking_the_poll() {
    // A shorter guard than the other jobs': the whole job needs [`HOLD`].
    held_by_qd_create_within(10, 1, 1, &[1]);
}

#[test]
fn partial_qd_process_still_holds_quiescence() {
    held_by_qd_create(3, 3, &[2, 1]);
}

/// What each send counts as created on the sending PE (one per PE it
/// reaches), what `qd_create`/`qd_process` add, and that at quiescence the
/// job-wide sums agree and equal the messages of the job.
#[test]
fn qd_counters_count_each_message_once() {
    let reports = Arc::new(Mutex::new(Vec::new()));
    let shared = reports.clone();
    let code = within(30, move || {
        run(4, 2, move |_| {
            let reports = shared.clone();
            // Each PE records its counters as it handles the final broadcast.
            let report = converse::register_handler(move |_msg: Message| {
                let entry = (my_pe(), converse::qd_created(), converse::qd_processed());
                let len = {
                    let mut r = reports.lock().unwrap();
                    r.push(entry);
                    r.len()
                };
                if len == num_pes() {
                    converse::exit(0);
                }
            });
            let sink = converse::register_handler(|_msg: Message| {});
            if my_pe() != 0 {
                return;
            }
            let n = num_pes() as u64;
            let msg = Message::new(sink, 8);
            // (what, created, processed) on this PE.
            let steps: [(&str, u64, u64, &dyn Fn()); 8] = [
                ("sync_send", 1, 0, &|| converse::sync_send(2, &msg)),
                ("enqueue", 1, 0, &|| converse::enqueue(msg.clone())),
                ("broadcast_all", n, 0, &|| {
                    converse::sync_broadcast_all(&msg)
                }),
                ("broadcast", n - 1, 0, &|| converse::sync_broadcast(&msg)),
                ("list_send", 3, 0, &|| {
                    converse::sync_list_send(&[3, 0, 1], &msg)
                }),
                ("node_send", 1, 0, &|| converse::sync_node_send(1, &msg)),
                ("qd_create", 3, 0, &|| converse::qd_create(3)),
                ("qd_process", 0, 3, &|| converse::qd_process(3)),
            ];
            for (what, created, processed, step) in steps {
                let before = (converse::qd_created(), converse::qd_processed());
                step();
                let after = (converse::qd_created(), converse::qd_processed());
                assert_eq!(after, (before.0 + created, before.1 + processed), "{what}");
            }
            converse::start_quiescence_detection(move || {
                converse::sync_broadcast_all(&Message::new(report, 0));
            });
        })
    });
    assert_eq!(code, 0);
    let r = reports.lock().unwrap();
    assert_eq!(r.len(), 4, "{r:?}");
    let created: u64 = r.iter().map(|x| x.1).sum();
    let processed: u64 = r.iter().map(|x| x.2).sum();
    // Sink messages (1 + 1 + 4 + 3 + 3 + 1), `qd_create(3)` and the four
    // reports; each was processed once.
    assert_eq!((created, processed), (13 + 3 + 4, 13 + 3 + 4), "{r:?}");
}

/// Regression: a handler that runs the scheduler itself used to be
/// answered mid-handler by detection waves (a wave request taken by the
/// nested `schedule_poll` was answered at once, with counters that balance
/// while the outer handler still runs), so the callback ran before the
/// handler had sent its last message. PEs now answer only when idle outside
/// every handler.
///
/// The test: a handler that polls (a nested `schedule_poll`, the manual's
/// way for long computations to stay responsive) is still running, so
/// quiescence must not be reported until it has returned and the message it
/// sends last has been handled.
fn nested_poll(pes: usize) {
    let fired = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(AtomicU32::new(0));
    let (f, d) = (fired.clone(), finished.clone());
    let code = within(30, move || {
        run(pes, 1, move |_| {
            let (f2, d2) = (f.clone(), d.clone());
            let last = converse::register_handler(move |_msg: Message| {
                assert!(!f2.load(SeqCst), "the last message ran after quiescence");
                d2.fetch_add(1, SeqCst);
            });
            let f3 = f.clone();
            let long = converse::register_handler(move |_msg: Message| {
                let start = Instant::now();
                while start.elapsed() < HOLD {
                    converse::schedule_poll();
                    assert!(
                        !f3.load(SeqCst),
                        "quiescence reported while a handler was running"
                    );
                    std::thread::sleep(Duration::from_millis(1));
                }
                converse::sync_send_and_free(0, Message::new(last, 0));
            });
            if my_pe() == 0 {
                let (f4, d4) = (f.clone(), d.clone());
                converse::start_quiescence_detection(move || {
                    assert_eq!(d4.load(SeqCst), 1, "quiescence reported too early");
                    f4.store(true, SeqCst);
                    converse::exit(0);
                });
            }
            if my_pe() == num_pes() - 1 {
                converse::sync_send_and_free(my_pe(), Message::new(long, 0));
            }
        })
    });
    assert_eq!(code, 0);
    assert_eq!(finished.load(SeqCst), 1);
}

#[test]
fn handler_polling_the_scheduler_keeps_the_job_busy() {
    nested_poll(2);
    nested_poll(3);
}

// ---------------------------------------------------------------------------
// A request that joins a detection already under way
// ---------------------------------------------------------------------------

/// Regression: a request that reached PE 0 while a pair of waves ran was
/// answered by that pair, although its PE had already been counted in it
/// before it sent the message it then asked about. In user-calls-scheduler
/// mode (every PE polls from main code), PE 0 keeps detection running (each
/// callback asks again) while PE 1 repeatedly polls, sends PE 2 a slow work
/// message and asks; each answer must come after that work was handled.
#[test]
fn a_request_joining_a_running_detection_waits_for_its_own_messages() {
    const ROUNDS: usize = 40;
    static DONE: AtomicUsize = AtomicUsize::new(0);
    static STOP: AtomicBool = AtomicBool::new(false);
    static EARLY: AtomicUsize = AtomicUsize::new(0);
    static ANSWERED: AtomicUsize = AtomicUsize::new(0);
    fn keep_detecting() {
        if !STOP.load(SeqCst) {
            converse::start_quiescence_detection(keep_detecting);
        }
    }
    let code = within(60, || {
        run_user(3, 1, |_| {
            let work = converse::register_handler(|_m: Message| {
                std::thread::sleep(Duration::from_millis(2));
                DONE.fetch_add(1, SeqCst);
            });
            let poll_until_stopped = |pause: Duration| {
                let start = Instant::now();
                while !STOP.load(SeqCst) {
                    converse::schedule_poll();
                    std::thread::sleep(pause);
                    assert!(start.elapsed() < GIVE_UP, "PE {} gave up", my_pe());
                }
            };
            match my_pe() {
                0 => {
                    keep_detecting();
                    poll_until_stopped(Duration::from_micros(300));
                }
                1 => {
                    for i in 0..ROUNDS {
                        for _ in 0..8 {
                            std::thread::sleep(Duration::from_micros(700));
                            converse::schedule_poll();
                        }
                        converse::sync_send(2, &Message::new(work, 0));
                        converse::start_quiescence_detection(move || {
                            if DONE.load(SeqCst) <= i {
                                EARLY.fetch_add(1, SeqCst);
                            }
                            ANSWERED.fetch_add(1, SeqCst);
                        });
                    }
                    poll_until(|| ANSWERED.load(SeqCst) == ROUNDS, "the answers");
                    STOP.store(true, SeqCst);
                }
                _ => poll_until_stopped(Duration::from_micros(50)),
            }
        })
    });
    assert_eq!(code, 0);
    assert_eq!(ANSWERED.load(SeqCst), ROUNDS);
    assert_eq!(
        EARLY.load(SeqCst),
        0,
        "answers that came before their own message was handled"
    );
}

// ---------------------------------------------------------------------------
// Timers hold quiescence; conditions do not
// ---------------------------------------------------------------------------

/// Hops of the chain each PE starts at once (so the early work is
/// `pes * (EARLY_HOPS + 1)` handler runs).
const EARLY_HOPS: u64 = 10;
/// Hops of the chain the last PE's timer starts.
const LATE_HOPS: u64 = 999;
/// Delay of the last PE's timer. Only how much of the job it covers depends
/// on it, never the verdict.
const LATE_MS: f64 = 300.0;

/// What the timer job shares with the test.
#[derive(Default)]
struct TimerJob {
    /// Chain handler runs so far.
    runs: AtomicU64,
    /// Runs of each timer callback: the last PE's (starts the late chain),
    /// PE 1's (does nothing), PE 2's first (registers the second) and
    /// second (sends one message).
    timers: [AtomicU32; 4],
    fired: AtomicU32,
}

/// The handler runs the timer job must see before quiescence: the early
/// chains, the late chain and PE 2's one message.
fn timer_job_total(pes: usize) -> u64 {
    let early = pes as u64 * (EARLY_HOPS + 1);
    let late = LATE_HOPS + 1;
    early + late + u64::from(pes > 2)
}

/// Regression (the report: a 1 s timer on PE 3 that sends work, quiescence
/// reported after 41 of 1,041 work units): a pending `call_fn_after` timer
/// is work the job will do without any message in flight, so quiescence
/// must wait for it and for the work it makes. The last PE's timer starts
/// the long chain; on PE 1 a timer that makes no work must still let the
/// job become quiescent once it fired (its PE waits with nothing queued);
/// on PE 2 a timer registers a second timer that sends one message.
fn timer_holds_quiescence(pes: usize, user_scheduler: bool) {
    let st = Arc::new(TimerJob::default());
    let shared = st.clone();
    let code = within(30, move || {
        let start = move |_: &[String]| {
            let st = shared.clone();
            let s = st.clone();
            let chain = converse::register_handler(move |msg: Message| {
                assert_eq!(s.fired.load(SeqCst), 0, "a chain link ran after quiescence");
                s.runs.fetch_add(1, SeqCst);
                let left = read_u64(&msg, 0);
                if left > 0 {
                    let next = (my_pe() + 1) % num_pes();
                    converse::sync_send_and_free(next, msg_u64(msg.handler(), &[left - 1]));
                }
            });
            let n = num_pes();
            let me = my_pe();
            if me == 0 {
                let st = st.clone();
                converse::start_quiescence_detection(move || {
                    assert_eq!(st.fired.fetch_add(1, SeqCst), 0, "callback ran twice");
                    let timers: Vec<u32> = st.timers.iter().map(|t| t.load(SeqCst)).collect();
                    let want = match n {
                        1 => [1, 0, 0, 0],
                        2 => [1, 1, 0, 0],
                        _ => [1, 1, 1, 1],
                    };
                    assert_eq!(timers, want, "quiescence reported with timers pending");
                    assert_eq!(
                        st.runs.load(SeqCst),
                        timer_job_total(n),
                        "quiescence reported before the timers' work was done"
                    );
                    if !user_scheduler {
                        converse::exit(0);
                    }
                });
            }
            if me == n - 1 {
                let st = st.clone();
                converse::call_fn_after(
                    move |_| {
                        st.timers[0].fetch_add(1, SeqCst);
                        converse::sync_send_and_free(me, msg_u64(chain, &[LATE_HOPS]));
                    },
                    LATE_MS,
                );
            }
            if me == 1 && n > 1 {
                let st = st.clone();
                converse::call_fn_after(
                    move |_| {
                        st.timers[1].fetch_add(1, SeqCst);
                    },
                    200.0,
                );
            }
            if me == 2 && n > 2 {
                let st = st.clone();
                converse::call_fn_after(
                    move |_| {
                        st.timers[2].fetch_add(1, SeqCst);
                        let st = st.clone();
                        converse::call_fn_after(
                            move |_| {
                                st.timers[3].fetch_add(1, SeqCst);
                                converse::sync_send_and_free(0, msg_u64(chain, &[0]));
                            },
                            150.0,
                        );
                    },
                    100.0,
                );
            }
            converse::sync_send_and_free(me, msg_u64(chain, &[EARLY_HOPS]));
            if user_scheduler {
                let st = st.clone();
                poll_until(|| st.fired.load(SeqCst) == 1, "quiescence");
            }
        };
        if user_scheduler {
            run_user(pes, pes, start)
        } else {
            run(pes, pes, start)
        }
    });
    let what = format!("+p {pes}, user scheduler {user_scheduler}");
    assert_eq!(code, 0, "{what}");
    assert_eq!(st.fired.load(SeqCst), 1, "{what}");
    assert_eq!(st.runs.load(SeqCst), timer_job_total(pes), "{what}");
}

#[test]
fn pending_timer_holds_quiescence_until_its_work_is_done() {
    timer_holds_quiescence(4, false);
}

#[test]
fn pending_timer_holds_quiescence_on_one_pe() {
    timer_holds_quiescence(1, false);
}

#[test]
fn pending_timer_holds_quiescence_in_user_scheduler_mode() {
    timer_holds_quiescence(3, true);
}

/// Condition callbacks do not hold quiescence (only timers do): kept
/// periodic callbacks that stay registered for the whole job, and once
/// callbacks on conditions that are not raised before the answer (a
/// daily periodic condition, a user condition), let a job with no message
/// and no timer outstanding be reported quiescent. The job has some work so
/// that the answer comes after it, not before.
#[test]
fn kept_periodic_and_unraised_conditions_do_not_hold_quiescence() {
    use converse::{Condition, call_on_condition, call_on_condition_keep};
    const HOPS: u64 = 50;
    let runs = Arc::new(AtomicU64::new(0));
    let once_runs = Arc::new(AtomicU32::new(0));
    let fired = Arc::new(AtomicU32::new(0));
    let (r, o, f) = (runs.clone(), once_runs.clone(), fired.clone());
    // A hang guard shorter than the others': a held detection would hang.
    let code = within(10, move || {
        run(3, 3, move |_| {
            let r2 = r.clone();
            let ring = converse::register_handler(move |msg: Message| {
                r2.fetch_add(1, SeqCst);
                let left = read_u64(&msg, 0);
                if left > 0 {
                    let next = (my_pe() + 1) % num_pes();
                    converse::sync_send_and_free(next, msg_u64(msg.handler(), &[left - 1]));
                }
            });
            // Never cancelled: these stay registered until the job ends.
            let ticks = Rc::new(Cell::new(0u64));
            call_on_condition_keep(Condition::PERIODIC, move |_| ticks.set(ticks.get() + 1));
            call_on_condition_keep(Condition::PERIODIC_10MS, |_| {});
            for cond in [Condition::PERIODIC_1DAY, Condition::user(3)] {
                let o = o.clone();
                call_on_condition(cond, move |_| {
                    o.fetch_add(1, SeqCst);
                });
            }
            if my_pe() == 0 {
                let (r3, f3) = (r.clone(), f.clone());
                converse::start_quiescence_detection(move || {
                    assert_eq!(r3.load(SeqCst), 3 * (HOPS + 1));
                    assert_eq!(f3.fetch_add(1, SeqCst), 0, "callback ran twice");
                    converse::exit(0);
                });
            }
            converse::sync_send_and_free(my_pe(), msg_u64(ring, &[HOPS]));
        })
    });
    assert_eq!(code, 0);
    assert_eq!(fired.load(SeqCst), 1);
    assert_eq!(runs.load(SeqCst), 3 * (HOPS + 1));
    assert_eq!(once_runs.load(SeqCst), 0, "an unraised condition ran");
}
