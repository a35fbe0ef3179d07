//! User-level threads (Cth): creation, the main flow as a thread, suspend,
//! awaken and yield against the scheduler's priority queue, direct
//! transfers (`resume`), `free`, the "next" field, scheduling strategies,
//! thread-private variables (Ctv), events and sleep, many threads, threads
//! on several PEs, and how threads end a job (exit, panic).
//!
//! Every test asserts what ran and in which order, never how long it took
//! (except that `sleep(ms)` lasts at least `ms`, its contract). Jobs run
//! under [`common::within`], so a hang fails the test instead of blocking
//! the run.
//!
//! Fault paths that abort the process (overflow, blocking in a handler,
//! awakening twice, ...) are in `faults.rs`.
use crate::common;

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use converse::cth::DEFAULT_STACK_SIZE;
use converse::{BitPrio, Converse, Ctv, Event, Message, Queueing, Thread, my_pe, num_pes};
use proptest::prelude::*;

/// Longest a job of this file may run before it counts as a hang.
const HANG_SECS: u64 = 120;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// What ran on one PE, in order.
type Log = Rc<RefCell<Vec<String>>>;

fn new_log() -> Log {
    Log::default()
}

fn push(log: &Log, entry: impl Into<String>) {
    log.borrow_mut().push(entry.into());
}

fn take(log: &Log) -> Vec<String> {
    std::mem::take(&mut *log.borrow_mut())
}

/// A handler that logs `m<tag>` for each message, the tag being the first
/// payload word.
fn logging_handler(log: &Log) -> usize {
    let log = log.clone();
    converse::register_handler(move |msg: Message| {
        push(&log, format!("m{}", common::read_u64(&msg, 0)));
    })
}

fn tagged(handler: usize, tag: u64) -> Message {
    common::msg_u64(handler, &[tag])
}

/// Runs `body` as the start function of a user-calls-scheduler job of
/// `pes` PEs (nodes of `ppn`), checking that the job exits with 0 and that
/// `body` returned on every PE (its assertions all passed).
fn user_job(pes: usize, ppn: usize, body: impl Fn() + Send + Sync + 'static) {
    let finished = Arc::new(AtomicUsize::new(0));
    let f = finished.clone();
    let code = common::within(HANG_SECS, move || {
        common::run_user(pes, ppn, move |_| {
            body();
            f.fetch_add(1, Ordering::SeqCst);
        })
    });
    assert_eq!(code, 0, "exit code");
    assert_eq!(
        finished.load(Ordering::SeqCst),
        pes,
        "the start function returned on every PE"
    );
}

/// [`user_job`] on one PE.
fn solo(body: impl Fn() + Send + Sync + 'static) {
    user_job(1, 1, body);
}

/// Runs a normal-mode job (start function, then the scheduler) with the
/// command line `words` and returns its exit code.
fn normal_job(words: &[&str], start: impl Fn(&[String]) + Send + Sync + 'static) -> i32 {
    let words: Vec<String> = std::iter::once("threads")
        .chain(words.iter().copied())
        .map(String::from)
        .collect();
    common::within(HANG_SECS, move || {
        Converse::new()
            .args(words)
            .run(start)
            .unwrap_or_else(|e| panic!("bad command line: {e}"))
    })
}

/// Counts drops of the values it is attached to.
struct DropCount(Rc<Cell<usize>>);

impl Drop for DropCount {
    fn drop(&mut self) {
        self.0.set(self.0.get() + 1);
    }
}

/// A thread that logs `<name><i>` and yields, `rounds` times.
fn yielder(log: &Log, name: &'static str, rounds: usize) -> Thread {
    let log = log.clone();
    Thread::create(
        move || {
            for i in 0..rounds {
                push(&log, format!("{name}{i}"));
                converse::yield_now();
            }
        },
        0,
    )
}

// ---------------------------------------------------------------------------
// 1. Identity, creation, stack sizes
// ---------------------------------------------------------------------------

#[test]
fn main_flow_is_a_thread_with_id_0_on_every_pe() {
    user_job(3, 3, || {
        let me = Thread::current();
        assert!(me.is_main_flow());
        assert_eq!(me.id(), 0);
        assert_eq!(me, Thread::current(), "current() is stable");
        assert_eq!(me.clone(), me, "clones compare equal");
        assert!(!me.is_finished());
        assert!(!me.is_migratable());
        assert_eq!(me.stack_size(), 0);
        assert_eq!(me.next(), None);
        // Still the same flow after a scheduler pass.
        converse::schedule_poll();
        assert_eq!(Thread::current(), me);
        assert_eq!(Thread::current().id(), 0);
    });
}

#[test]
fn main_flow_in_normal_mode_start_function_and_handlers_is_thread_0() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let code = normal_job(&["+p", "2"], move |_| {
        let start_flow = Thread::current();
        assert!(start_flow.is_main_flow());
        assert_eq!(start_flow.id(), 0);
        let s = s.clone();
        // Handlers run by the scheduler after the start function run on the
        // same (main) flow.
        let h = converse::register_handler(move |_msg: Message| {
            let t = Thread::current();
            s.lock().unwrap().push((my_pe(), t.id(), t.is_main_flow()));
            converse::exit_scheduler();
        });
        converse::sync_send_and_free(my_pe(), Message::new(h, 0));
    });
    assert_eq!(code, 0);
    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    assert_eq!(seen, [(0, 0, true), (1, 0, true)]);
}

#[test]
fn created_thread_runs_only_once_awakened_and_on_its_pe() {
    user_job(2, 1, || {
        let ran_on: Rc<Cell<Option<usize>>> = Rc::default();
        let inside: Rc<RefCell<Option<Thread>>> = Rc::default();
        let (r, i) = (ran_on.clone(), inside.clone());
        let t = Thread::create(
            move || {
                r.set(Some(my_pe()));
                *i.borrow_mut() = Some(Thread::current());
            },
            0,
        );
        assert!(!t.is_main_flow());
        assert_ne!(t.id(), 0);
        assert!(!t.is_finished());
        // Not run by the scheduler before it is awakened.
        converse::schedule_poll();
        assert_eq!(ran_on.get(), None, "a created thread does not run yet");
        assert!(!t.is_finished());
        t.awaken();
        assert!(!converse::csd::is_empty(), "the awakened thread is queued");
        assert_eq!(ran_on.get(), None, "awaken only queues the thread");
        converse::schedule_poll();
        assert_eq!(ran_on.get(), Some(my_pe()), "it ran on its creating PE");
        assert_eq!(
            inside.borrow().as_ref(),
            Some(&t),
            "current() inside the body is the thread"
        );
        assert!(t.is_finished(), "a thread whose body returned is finished");
        assert!(converse::csd::is_empty());
        // Back on the main flow.
        assert_eq!(Thread::current().id(), 0);
    });
}

#[test]
fn thread_ids_are_distinct_and_not_zero() {
    solo(|| {
        let threads: Vec<Thread> = (0..50).map(|_| Thread::create(|| {}, 0)).collect();
        let mut ids: Vec<u64> = threads.iter().map(Thread::id).collect();
        assert!(ids.iter().all(|&id| id != 0));
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 50);
        for (i, a) in threads.iter().enumerate() {
            for b in &threads[i + 1..] {
                assert_ne!(a, b, "distinct threads compare unequal");
            }
        }
        for t in &threads {
            t.awaken();
        }
        converse::schedule_poll();
        assert!(threads.iter().all(Thread::is_finished));
    });
}

/// A thread body that fills a stack buffer of `bytes` (0, 40 KiB or
/// 300 KiB) and stores its checksum in `out`.
fn touch_stack(bytes: usize, out: &Rc<Cell<u64>>) -> impl FnOnce() + 'static {
    // Not inlined: the closure's own frame must stay small.
    #[inline(never)]
    fn fill<const N: usize>() -> u64 {
        let mut buf = [0u8; N];
        for (i, b) in buf.iter_mut().enumerate() {
            *b = i as u8;
        }
        std::hint::black_box(&mut buf);
        buf.iter().map(|&b| u64::from(b)).sum()
    }
    let out = out.clone();
    move || {
        out.set(match bytes {
            0 => 0,
            40_960 => fill::<40_960>(),
            307_200 => fill::<307_200>(),
            _ => unreachable!("no such buffer size"),
        })
    }
}

#[test]
fn stack_size_zero_means_the_default() {
    solo(|| {
        let t = Thread::create(|| {}, 0);
        assert_eq!(t.stack_size(), DEFAULT_STACK_SIZE);
        let m = Thread::create_migratable(|| {}, 0);
        assert_eq!(m.stack_size(), DEFAULT_STACK_SIZE);
        t.awaken();
        m.awaken();
        converse::schedule_poll();
        assert!(t.is_finished() && m.is_finished());
    });
}

#[test]
fn stack_sizes_follow_create_and_the_stacksize_flag() {
    let checked = Arc::new(AtomicUsize::new(0));
    let c = checked.clone();
    let code = common::within(HANG_SECS, move || {
        Converse::new()
            .args(["threads", "+p", "2", "+stacksize", "96K"])
            .run_user_scheduler(move |_| {
                let sum = Rc::new(Cell::new(0));
                // 0: the +stacksize default.
                let d = Thread::create(touch_stack(40 << 10, &sum), 0);
                assert_eq!(d.stack_size(), 96 << 10);
                d.awaken();
                converse::schedule_poll();
                assert!(d.is_finished());
                assert_eq!(sum.get(), expected_sum(40 << 10));
                // Explicit sizes are respected, whatever the default.
                let big = Thread::create(touch_stack(300 << 10, &sum), 512 << 10);
                assert_eq!(big.stack_size(), 512 << 10);
                big.awaken();
                converse::schedule_poll();
                assert!(big.is_finished());
                assert_eq!(sum.get(), expected_sum(300 << 10));
                let odd = Thread::create(|| {}, 100_000);
                assert_eq!(odd.stack_size(), 100_000);
                let m = Thread::create_migratable(|| {}, 200_000);
                assert_eq!(m.stack_size(), 200_000);
                // A tiny request still gets a usable stack.
                let tiny = Thread::create(touch_stack(0, &sum), 1);
                assert!(tiny.stack_size() >= 1);
                for t in [&odd, &m, &tiny] {
                    t.awaken();
                }
                converse::schedule_poll();
                assert!(odd.is_finished() && m.is_finished() && tiny.is_finished());
                c.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap()
    });
    assert_eq!(code, 0);
    assert_eq!(checked.load(Ordering::SeqCst), 2);
}

fn expected_sum(n: usize) -> u64 {
    (0..n).map(|i| u64::from(i as u8)).sum()
}

#[test]
fn create_migratable_marks_the_thread() {
    solo(|| {
        let ran = Rc::new(Cell::new(0));
        let (r1, r2) = (ran.clone(), ran.clone());
        let m = Thread::create_migratable(
            move || {
                assert!(Thread::current().is_migratable());
                r1.set(r1.get() + 1);
                converse::yield_now();
                r1.set(r1.get() + 1);
            },
            0,
        );
        let t = Thread::create(move || r2.set(r2.get() + 10), 0);
        assert!(m.is_migratable());
        assert!(!t.is_migratable());
        m.awaken();
        t.awaken();
        converse::schedule_poll();
        assert_eq!(ran.get(), 12, "a migratable thread runs like any other");
        assert!(m.is_finished() && t.is_finished());
        assert!(m.is_migratable(), "the flag stays after it finishes");
    });
}

// ---------------------------------------------------------------------------
// 2. Suspend, awaken, yield; the main flow blocks while messages flow
// ---------------------------------------------------------------------------

#[test]
fn suspend_and_awaken_round_trips() {
    solo(|| {
        const ROUNDS: usize = 200;
        let count = Rc::new(Cell::new(0));
        let c = count.clone();
        let t = Thread::create(
            move || {
                for _ in 0..ROUNDS {
                    c.set(c.get() + 1);
                    converse::suspend();
                }
            },
            0,
        );
        for round in 1..=ROUNDS {
            t.awaken();
            converse::schedule_poll();
            assert_eq!(count.get(), round);
            assert!(!t.is_finished());
            // Suspended: the scheduler does not run it again by itself.
            converse::schedule_poll();
            assert_eq!(count.get(), round);
        }
        t.awaken();
        converse::schedule_poll();
        assert!(t.is_finished());
        assert_eq!(count.get(), ROUNDS);
    });
}

#[test]
fn a_handler_awakens_a_suspended_thread() {
    let result = Arc::new(Mutex::new(Vec::new()));
    let r = result.clone();
    let code = normal_job(&["+p", "2"], move |_| {
        let log = new_log();
        let sleeper: Rc<RefCell<Option<Thread>>> = Rc::default();
        let wake = {
            let (log, sleeper) = (log.clone(), sleeper.clone());
            converse::register_handler(move |_msg: Message| {
                push(&log, "handler");
                sleeper.borrow().as_ref().expect("set").awaken();
            })
        };
        let t = {
            let (log, r) = (log.clone(), r.clone());
            Thread::create(
                move || {
                    push(&log, "before");
                    // A message will awaken this thread.
                    converse::sync_send_and_free(my_pe(), Message::new(wake, 0));
                    converse::suspend();
                    push(&log, "after");
                    r.lock().unwrap().push((my_pe(), take(&log)));
                    converse::exit_scheduler();
                },
                0,
            )
        };
        *sleeper.borrow_mut() = Some(t.clone());
        t.awaken();
    });
    assert_eq!(code, 0);
    let mut result = result.lock().unwrap().clone();
    result.sort();
    let want: Vec<String> = ["before", "handler", "after"].map(String::from).into();
    assert_eq!(result, [(0, want.clone()), (1, want)]);
}

#[test]
fn yield_now_interleaves_threads_and_the_main_flow_in_fifo_order() {
    solo(|| {
        let log = new_log();
        let threads = [
            yielder(&log, "A", 3),
            yielder(&log, "B", 3),
            yielder(&log, "C", 3),
        ];
        for t in &threads {
            t.awaken();
        }
        for i in 0..3 {
            push(&log, format!("M{i}"));
            converse::yield_now();
        }
        assert_eq!(
            take(&log),
            [
                "M0", "A0", "B0", "C0", "M1", "A1", "B1", "C1", "M2", "A2", "B2", "C2"
            ]
        );
        assert!(threads.iter().all(|t| !t.is_finished()));
        // Each is queued once more: its last yield returns and it ends.
        converse::schedule_poll();
        assert!(take(&log).is_empty());
        assert!(threads.iter().all(Thread::is_finished));
        assert_eq!(Thread::current().id(), 0);
    });
}

#[test]
fn yielding_threads_interleave_with_messages_in_fifo_order() {
    solo(|| {
        let log = new_log();
        let h = logging_handler(&log);
        let a = yielder(&log, "A", 2);
        let b = yielder(&log, "B", 2);
        a.awaken();
        converse::enqueue(tagged(h, 1));
        b.awaken();
        converse::enqueue(tagged(h, 2));
        converse::schedule_poll();
        // A0 yields behind m1, B0, m2.
        assert_eq!(take(&log), ["A0", "m1", "B0", "m2", "A1", "B1"]);
        assert!(a.is_finished() && b.is_finished());
    });
}

/// Arrived messages run before queued work, so a message a thread sends
/// itself runs before the next thread in the queue when it yields.
#[test]
fn a_yield_lets_arrived_messages_run_first() {
    solo(|| {
        let log = new_log();
        let h = logging_handler(&log);
        let a = {
            let log = log.clone();
            Thread::create(
                move || {
                    push(&log, "A0");
                    converse::sync_send_and_free(0, tagged(h, 1));
                    converse::yield_now();
                    push(&log, "A1");
                },
                0,
            )
        };
        let b = yielder(&log, "B", 2);
        a.awaken();
        b.awaken();
        converse::schedule_poll();
        assert_eq!(take(&log), ["A0", "m1", "B0", "A1", "B1"]);
    });
}

/// `schedule_count(n)` counts thread tokens as deliveries, one per
/// resumption, however the threads yield.
#[test]
fn schedule_count_counts_each_thread_resumption() {
    solo(|| {
        let log = new_log();
        let a = yielder(&log, "A", 5);
        let b = yielder(&log, "B", 5);
        a.awaken();
        b.awaken();
        assert_eq!(converse::schedule_count(3), 0);
        assert_eq!(take(&log), ["A0", "B0", "A1"]);
        assert_eq!(converse::schedule_count(4), 0);
        assert_eq!(take(&log), ["B1", "A2", "B2", "A3"]);
        converse::schedule_poll();
        assert_eq!(take(&log), ["B3", "A4", "B4"]);
        assert!(a.is_finished() && b.is_finished());
    });
}

/// A thread that spins on `yield_now` until a message from another PE
/// arrives: the yields must let the scheduler take the message.
#[test]
fn a_thread_spinning_on_yield_sees_messages_from_another_pe() {
    user_job(2, 1, || {
        let got = Rc::new(Cell::new(0u64));
        let g = got.clone();
        let h = converse::register_handler(move |msg: Message| {
            g.set(common::read_u64(&msg, 0));
        });
        let stop = converse::register_handler(|_msg: Message| converse::exit_scheduler());
        if my_pe() == 1 {
            // Let PE 0's thread spin for a while first.
            std::thread::sleep(Duration::from_millis(20));
            converse::sync_send_and_free(0, tagged(h, 42));
            converse::schedule_forever();
            return;
        }
        let spins = Rc::new(Cell::new(0u64));
        let (got2, spins2) = (got.clone(), spins.clone());
        let spinner = Thread::create(
            move || {
                while got2.get() == 0 {
                    spins2.set(spins2.get() + 1);
                    converse::yield_now();
                }
            },
            0,
        );
        spinner.awaken();
        // The main flow spins too, by yielding.
        while !spinner.is_finished() {
            converse::yield_now();
        }
        assert_eq!(got.get(), 42);
        assert!(spins.get() >= 1);
        converse::sync_send_and_free(1, Message::new(stop, 0));
    });
}

#[test]
fn the_start_function_in_normal_mode_may_yield() {
    let result = Arc::new(Mutex::new(Vec::new()));
    let r = result.clone();
    let code = normal_job(&["+p", "2"], move |_| {
        let log = new_log();
        let t = yielder(&log, "T", 1);
        t.awaken();
        push(&log, "start");
        // The raw primitives are allowed everywhere: the scheduler runs T
        // on top of the suspended start function.
        converse::yield_now();
        push(&log, "start again");
        r.lock()
            .unwrap()
            .push((my_pe(), take(&log), t.is_finished()));
        converse::exit_scheduler();
    });
    assert_eq!(code, 0);
    let mut result = result.lock().unwrap().clone();
    result.sort();
    let want: Vec<String> = ["start", "T0", "start again"].map(String::from).into();
    assert_eq!(result, [(0, want.clone(), false), (1, want, false)]);
}

/// PE 0's main flow waits on an event that a thread sets once a message
/// round trip to PE 1 completes: the scheduler keeps delivering messages
/// (and running threads) while the main flow is blocked.
#[test]
fn main_flow_waits_on_an_event_while_messages_flow() {
    user_job(2, 1, || {
        let log = new_log();
        let event = Rc::new(Event::new());
        let standin: Rc<RefCell<Option<Thread>>> = Rc::default();
        let stop = converse::register_handler(|_msg: Message| converse::exit_scheduler());
        let pong = {
            let (log, event, standin) = (log.clone(), event.clone(), standin.clone());
            converse::register_handler(move |msg: Message| {
                push(&log, format!("pong {}", common::read_u64(&msg, 0)));
                *standin.borrow_mut() = Some(Thread::current());
                event.set();
            })
        };
        let ping = converse::register_handler(move |msg: Message| {
            let n = common::read_u64(&msg, 0);
            converse::sync_send_and_free(0, tagged(pong, n + 1));
        });
        let local = logging_handler(&log);
        if my_pe() == 1 {
            converse::schedule_forever();
            return;
        }
        let main = Thread::current();
        let t = {
            let log = log.clone();
            Thread::create(
                move || {
                    push(&log, "thread sends");
                    converse::sync_send_and_free(my_pe(), tagged(local, 7));
                    converse::sync_send_and_free(1, tagged(ping, 41));
                },
                0,
            )
        };
        t.awaken();
        assert!(!event.is_set());
        event.wait();
        assert!(event.is_set());
        let mut seen = take(&log);
        assert_eq!(seen.remove(0), "thread sends");
        seen.sort();
        assert_eq!(seen, ["m7", "pong 42"]);
        assert!(t.is_finished());
        assert_eq!(Thread::current(), main, "the main flow is back");
        // The pong handler ran on the scheduler standing in for the
        // suspended main flow: a flow without a coroutine, but not the
        // main flow itself.
        let s = standin.borrow().clone().expect("pong ran");
        assert!(s.is_main_flow());
        assert_ne!(s, main);
        assert_ne!(s.id(), 0);
        converse::sync_send_and_free(1, Message::new(stop, 0));
    });
}

/// PE 0's main flow sleeps: its own message, a thread and a round trip to
/// PE 1 all complete while it sleeps (it polls nothing itself).
#[test]
fn main_flow_sleeps_while_messages_and_threads_run() {
    user_job(2, 2, || {
        let log = new_log();
        let stop = converse::register_handler(|_msg: Message| converse::exit_scheduler());
        let pong = logging_handler(&log);
        let ping = converse::register_handler(move |msg: Message| {
            converse::sync_send_and_free(0, tagged(pong, common::read_u64(&msg, 0)));
        });
        let local = logging_handler(&log);
        if my_pe() == 1 {
            converse::schedule_forever();
            return;
        }
        converse::sync_send_and_free(0, tagged(local, 1));
        converse::sync_send_and_free(1, tagged(ping, 2));
        let t = yielder(&log, "T", 3);
        t.awaken();
        let start = Instant::now();
        converse::sleep(20.0);
        assert!(
            start.elapsed() >= Duration::from_millis(20),
            "sleep(20) returned after {:?}",
            start.elapsed()
        );
        assert_eq!(Thread::current().id(), 0);
        // Local work ran during the first sleep; the answer from PE 1 comes
        // during one of the sleeps (however slow PE 1 is).
        while !log.borrow().iter().any(|e| e == "m2") {
            converse::sleep(5.0);
        }
        let mut seen = take(&log);
        seen.sort();
        assert_eq!(seen, ["T0", "T1", "T2", "m1", "m2"]);
        assert!(t.is_finished());
        converse::sync_send_and_free(1, Message::new(stop, 0));
    });
}

#[test]
fn threads_sleep_while_others_run() {
    solo(|| {
        let log = new_log();
        let done = Rc::new(Event::new());
        let sleeper = {
            let (log, done) = (log.clone(), done.clone());
            Thread::create(
                move || {
                    push(&log, "sleeper starts");
                    let start = Instant::now();
                    converse::sleep(200.0);
                    assert!(start.elapsed() >= Duration::from_millis(200));
                    push(&log, "sleeper wakes");
                    done.set();
                },
                0,
            )
        };
        let worker = yielder(&log, "worker ", 3);
        sleeper.awaken();
        worker.awaken();
        done.wait();
        assert_eq!(
            take(&log),
            [
                "sleeper starts",
                "worker 0",
                "worker 1",
                "worker 2",
                "sleeper wakes"
            ]
        );
        assert!(sleeper.is_finished());
    });
}

#[test]
fn check_can_block_allows_threads_and_the_user_mode_main_flow() {
    solo(|| {
        // The main flow of a user-calls-scheduler job may block.
        converse::check_can_block("a test");
        let ok = Rc::new(Cell::new(false));
        let o = ok.clone();
        let t = Thread::create(
            move || {
                converse::check_can_block("a test");
                o.set(true);
            },
            0,
        );
        t.awaken();
        converse::schedule_poll();
        assert!(ok.get());
    });
}

/// A handler may resume a thread directly; the thread may block (it is a
/// thread, not the handler), and control comes back to the handler when it
/// suspends.
#[test]
fn a_thread_resumed_from_a_handler_may_block() {
    solo(|| {
        let log = new_log();
        let event = Rc::new(Event::new());
        let t = {
            let (log, event) = (log.clone(), event.clone());
            Thread::create(
                move || {
                    push(&log, "thread waits");
                    event.wait();
                    push(&log, "thread done");
                },
                0,
            )
        };
        let h = {
            let (log, t) = (log.clone(), t.clone());
            converse::register_handler(move |_msg: Message| {
                push(&log, "handler resumes");
                t.resume();
                push(&log, "handler continues");
            })
        };
        converse::sync_send_and_free(0, Message::new(h, 0));
        converse::schedule_poll();
        assert_eq!(
            take(&log),
            ["handler resumes", "thread waits", "handler continues"]
        );
        event.set();
        converse::schedule_poll();
        assert_eq!(take(&log), ["thread done"]);
        assert!(t.is_finished());
    });
}

// ---------------------------------------------------------------------------
// 3, 4. Priorities: awaken_prio, threads and messages, yield_prio
// ---------------------------------------------------------------------------

/// A priority as a long integer (integer `p` is long `p << 32`, the
/// middle priority is 0) and whether the strategy is LIFO.
fn model_key(q: &Queueing) -> (i64, bool) {
    let int = |p: i32| i64::from(p) << 32;
    let bits = |b: &BitPrio| {
        assert_eq!(b.bits(), 32, "the strategies below use integer bit-vectors");
        i64::from((b.words()[0] ^ 0x8000_0000) as i32) << 32
    };
    match q {
        Queueing::Fifo => (0, false),
        Queueing::Lifo => (0, true),
        Queueing::IFifo(p) => (int(*p), false),
        Queueing::ILifo(p) => (int(*p), true),
        Queueing::LFifo(p) => (*p, false),
        Queueing::LLifo(p) => (*p, true),
        Queueing::BFifo(b) => (bits(b), false),
        Queueing::BLifo(b) => (bits(b), true),
    }
}

/// The order in which the queue model runs items enqueued in order with
/// these strategies: by priority; among equals, LIFO items newest first,
/// then FIFO items oldest first.
fn model_order(items: &[Queueing]) -> Vec<usize> {
    let mut buckets: BTreeMap<i64, VecDeque<usize>> = BTreeMap::new();
    for (i, q) in items.iter().enumerate() {
        let (key, lifo) = model_key(q);
        let bucket = buckets.entry(key).or_default();
        if lifo {
            bucket.push_front(i);
        } else {
            bucket.push_back(i);
        }
    }
    buckets.into_values().flatten().collect()
}

/// Integer-priority strategies over a few priorities (so ties are common).
fn int_strategy() -> impl Strategy<Value = Queueing> {
    prop_oneof![
        (-3i32..=3).prop_map(Queueing::IFifo),
        (-3i32..=3).prop_map(Queueing::ILifo),
    ]
}

/// Every kind of strategy, on priorities that land on the same few values
/// (and, for long ones, just after them).
fn any_strategy() -> impl Strategy<Value = Queueing> {
    prop_oneof![
        Just(Queueing::Fifo),
        Just(Queueing::Lifo),
        (-3i32..=3).prop_map(Queueing::IFifo),
        (-3i32..=3).prop_map(Queueing::ILifo),
        (-3i64..=3, 0i64..2).prop_map(|(p, lo)| Queueing::LFifo((p << 32) + lo)),
        (-3i64..=3, 0i64..2).prop_map(|(p, lo)| Queueing::LLifo((p << 32) + lo)),
        (-3i32..=3).prop_map(|p| Queueing::BFifo(BitPrio::from_int(p))),
        (-3i32..=3).prop_map(|p| Queueing::BLifo(BitPrio::from_int(p))),
    ]
}

/// Enqueues item `i` with `items[i]`: a thread token (awaken_prio) where
/// `is_thread[i]`, else a message (enqueue_general); each logs its index
/// when it runs. Returns the order they ran in.
fn run_in_priority_order(items: Vec<Queueing>, is_thread: Vec<bool>) -> Vec<usize> {
    let order = Arc::new(Mutex::new(Vec::new()));
    let o = order.clone();
    let items = Arc::new(items);
    solo(move || {
        let ran: Rc<RefCell<Vec<usize>>> = Rc::default();
        let h = {
            let ran = ran.clone();
            converse::register_handler(move |msg: Message| {
                ran.borrow_mut().push(common::read_u64(&msg, 0) as usize);
            })
        };
        let mut threads = Vec::new();
        for (i, q) in items.iter().enumerate() {
            if is_thread[i] {
                let ran = ran.clone();
                let t = Thread::create(move || ran.borrow_mut().push(i), 0);
                t.awaken_prio(q.clone());
                threads.push(t);
            } else {
                converse::enqueue_general(tagged(h, i as u64), q.clone());
            }
        }
        assert_eq!(ran.borrow().len(), 0, "nothing runs before the scheduler");
        converse::schedule_poll();
        assert!(converse::csd::is_empty());
        assert!(threads.iter().all(Thread::is_finished));
        *o.lock().unwrap() = ran.borrow().clone();
    });
    order.lock().unwrap().clone()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 48,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Threads awakened with integer priorities run in the queue model's
    /// order.
    #[test]
    fn awakened_threads_run_in_priority_order(
        items in proptest::collection::vec(int_strategy(), 1..120)
    ) {
        let want = model_order(&items);
        let n = items.len();
        let got = run_in_priority_order(items, vec![true; n]);
        prop_assert_eq!(got, want);
    }

    /// Thread tokens and enqueued messages share one priority order, with
    /// every kind of strategy.
    #[test]
    fn threads_and_messages_share_one_priority_order(
        items in proptest::collection::vec((any_strategy(), any::<bool>()), 1..120)
    ) {
        let (items, is_thread): (Vec<Queueing>, Vec<bool>) = items.into_iter().unzip();
        let want = model_order(&items);
        let got = run_in_priority_order(items, is_thread);
        prop_assert_eq!(got, want);
    }
}

#[test]
fn awaken_prio_with_a_seeded_mix_of_priorities() {
    // A fixed pseudo-random sequence (xorshift), so a failure reproduces.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _round in 0..5 {
        let n = 300;
        let items: Vec<Queueing> = (0..n)
            .map(|_| {
                let p = (next() % 9) as i32 - 4;
                match next() % 4 {
                    0 => Queueing::IFifo(p),
                    1 => Queueing::ILifo(p),
                    2 => Queueing::IFifo(p * 1000),
                    _ => Queueing::ILifo(p * 100_000),
                }
            })
            .collect();
        let is_thread: Vec<bool> = (0..n).map(|_| next() % 3 != 0).collect();
        let want = model_order(&items);
        assert_eq!(run_in_priority_order(items, is_thread), want);
    }
}

#[test]
fn an_awakened_thread_is_placed_among_queued_messages_by_priority() {
    solo(|| {
        let log = new_log();
        let h = logging_handler(&log);
        converse::enqueue_general(tagged(h, 1), Queueing::IFifo(-5));
        converse::enqueue_general(tagged(h, 2), Queueing::IFifo(0));
        converse::enqueue_general(tagged(h, 3), Queueing::IFifo(5));
        let mk = |name: &'static str| {
            let log = log.clone();
            Thread::create(move || push(&log, name), 0)
        };
        mk("T+5 fifo").awaken_prio(Queueing::IFifo(5));
        mk("T0 lifo").awaken_prio(Queueing::ILifo(0));
        mk("T-9").awaken_prio(Queueing::IFifo(-9));
        mk("T default").awaken();
        mk("Tlong").awaken_prio(Queueing::LFifo(-(5 << 32) + 1));
        converse::schedule_poll();
        assert_eq!(
            take(&log),
            [
                "T-9",
                "m1",
                "Tlong",
                "T0 lifo",
                "m2",
                "T default",
                "m3",
                "T+5 fifo"
            ]
        );
    });
}

#[test]
fn yield_prio_places_the_thread_among_queued_work() {
    solo(|| {
        let log = new_log();
        let h = logging_handler(&log);
        for (tag, p) in [(1, -10), (2, 0), (3, 5), (4, 10), (5, 10)] {
            converse::enqueue_general(tagged(h, tag), Queueing::IFifo(p));
        }
        let t = {
            let log = log.clone();
            Thread::create(
                move || {
                    push(&log, "T0");
                    // Behind m3 (FIFO among priority 5).
                    converse::yield_prio(Queueing::IFifo(5));
                    push(&log, "T1");
                    // In front of m4 and m5 (LIFO among priority 10).
                    converse::yield_prio(Queueing::ILifo(10));
                    push(&log, "T2");
                    // Behind them.
                    converse::yield_prio(Queueing::IFifo(10));
                    push(&log, "T3");
                },
                0,
            )
        };
        t.awaken_prio(Queueing::IFifo(-100));
        converse::schedule_poll();
        assert_eq!(
            take(&log),
            ["T0", "m1", "m2", "m3", "T1", "T2", "m4", "m5", "T3"]
        );
        assert!(t.is_finished());
    });
}

#[test]
fn the_main_flow_yields_by_priority() {
    solo(|| {
        let log = new_log();
        let h = logging_handler(&log);
        converse::enqueue_general(tagged(h, 1), Queueing::IFifo(1));
        converse::enqueue_general(tagged(h, 2), Queueing::IFifo(-1));
        converse::enqueue_general(tagged(h, 3), Queueing::IFifo(0));
        let t = yielder(&log, "T", 1);
        t.awaken_prio(Queueing::IFifo(-2));
        // LIFO at 0: in front of m3.
        converse::yield_prio(Queueing::ILifo(0));
        assert_eq!(take(&log), ["T0", "m2"]);
        // T is queued again (FIFO, 0): behind m3; the main flow goes at 1,
        // behind m1 (FIFO).
        converse::yield_prio(Queueing::IFifo(1));
        assert_eq!(take(&log), ["m3", "m1"]);
        assert!(t.is_finished());
        assert!(converse::csd::is_empty());
    });
}

// ---------------------------------------------------------------------------
// 5. resume
// ---------------------------------------------------------------------------

#[test]
fn resume_transfers_control_at_once_and_leaves_the_caller_suspended() {
    solo(|| {
        let log = new_log();
        let h = logging_handler(&log);
        let b = {
            let log = log.clone();
            Thread::create(
                move || {
                    push(&log, "B1");
                    converse::suspend();
                    push(&log, "B2");
                },
                0,
            )
        };
        let a = {
            let (log, b) = (log.clone(), b.clone());
            Thread::create(
                move || {
                    push(&log, "A1");
                    b.resume();
                    push(&log, "A2");
                },
                0,
            )
        };
        a.awaken();
        // Queued behind A: runs only after B suspends.
        converse::enqueue(tagged(h, 1));
        converse::schedule_poll();
        assert_eq!(take(&log), ["A1", "B1", "m1"]);
        assert!(!a.is_finished() && !b.is_finished());
        // A stays suspended until someone awakens it.
        converse::schedule_poll();
        assert!(take(&log).is_empty());
        a.awaken();
        converse::schedule_poll();
        assert_eq!(take(&log), ["A2"]);
        assert!(a.is_finished() && !b.is_finished());
        b.awaken();
        converse::schedule_poll();
        assert_eq!(take(&log), ["B2"]);
        assert!(b.is_finished());
    });
}

#[test]
fn resume_chains_through_several_threads() {
    solo(|| {
        let log = new_log();
        let threads: Rc<RefCell<Vec<Thread>>> = Rc::default();
        for i in 0..5usize {
            let (log, list) = (log.clone(), threads.clone());
            let t = Thread::create(
                move || {
                    push(&log, format!("T{i}"));
                    let next = list.borrow().get(i + 1).cloned();
                    if let Some(next) = next {
                        next.resume();
                        push(&log, format!("T{i} back"));
                    }
                },
                0,
            );
            threads.borrow_mut().push(t);
        }
        let first = threads.borrow()[0].clone();
        first.awaken();
        converse::schedule_poll();
        // T4 returned: the chain ends, nobody continues the others.
        assert_eq!(take(&log), ["T0", "T1", "T2", "T3", "T4"]);
        let all = threads.borrow().clone();
        assert!(all[4].is_finished());
        assert!(all[..4].iter().all(|t| !t.is_finished()));
        for t in all[..4].iter().rev() {
            t.awaken();
        }
        converse::schedule_poll();
        assert_eq!(take(&log), ["T3 back", "T2 back", "T1 back", "T0 back"]);
        assert!(all.iter().all(Thread::is_finished));
        // Break the cycle: each closure holds the list.
        threads.borrow_mut().clear();
    });
}

#[test]
fn main_flow_resumes_a_thread_and_gets_control_back_when_it_suspends() {
    solo(|| {
        let log = new_log();
        let t = {
            let log = log.clone();
            Thread::create(
                move || {
                    push(&log, "T1");
                    converse::suspend();
                    push(&log, "T2");
                    converse::yield_now();
                    push(&log, "T3");
                },
                0,
            )
        };
        push(&log, "M1");
        t.resume();
        push(&log, "M2");
        assert!(!t.is_finished());
        assert_eq!(Thread::current().id(), 0);
        t.resume();
        push(&log, "M3");
        assert_eq!(take(&log), ["M1", "T1", "M2", "T2", "M3"]);
        // T yielded: it is queued, and the scheduler finishes it.
        converse::schedule_poll();
        assert_eq!(take(&log), ["T3"]);
        assert!(t.is_finished());
    });
}

/// A thread resumes the main flow, which is suspended: the main flow
/// continues at once and the thread stays suspended.
#[test]
fn a_thread_resumes_the_suspended_main_flow() {
    solo(|| {
        let log = new_log();
        let main = Thread::current();
        let t = {
            let log = log.clone();
            Thread::create(
                move || {
                    push(&log, "T1");
                    main.resume();
                    push(&log, "T2");
                },
                0,
            )
        };
        let other = yielder(&log, "O", 1);
        t.awaken();
        other.awaken();
        push(&log, "M suspends");
        converse::suspend();
        push(&log, "M back");
        // `other` was queued behind T: the main flow came back first.
        assert_eq!(take(&log), ["M suspends", "T1", "M back"]);
        assert!(!t.is_finished());
        converse::schedule_poll();
        assert_eq!(take(&log), ["O0"]);
        assert!(!t.is_finished(), "T stays suspended until awakened");
        t.awaken();
        converse::schedule_poll();
        assert_eq!(take(&log), ["T2"]);
        assert!(t.is_finished() && other.is_finished());
    });
}

/// The main flow resumes a thread that transfers straight back to it (as a
/// central scheduling thread would). The main flow then suspends: it must
/// stay suspended until something awakens it.
#[test]
fn main_flow_that_was_resumed_back_by_a_thread_then_suspends_normally() {
    solo(|| {
        let log = new_log();
        let main = Thread::current();
        let t = {
            let (log, main) = (log.clone(), main.clone());
            Thread::create(
                move || {
                    push(&log, "T transfers back");
                    main.resume();
                    push(&log, "T again");
                },
                0,
            )
        };
        t.resume();
        push(&log, "M");
        assert!(!t.is_finished());
        let waker = {
            let (log, main) = (log.clone(), main.clone());
            Thread::create(
                move || {
                    push(&log, "waker");
                    main.awaken();
                },
                0,
            )
        };
        waker.awaken();
        converse::suspend();
        push(&log, "M awakened");
        assert_eq!(
            take(&log),
            ["T transfers back", "M", "waker", "M awakened"],
            "the main flow's suspend returned before anything awakened it"
        );
        t.awaken();
        converse::schedule_poll();
        assert!(t.is_finished());
    });
}

// ---------------------------------------------------------------------------
// 6. free
// ---------------------------------------------------------------------------

#[test]
fn free_then_suspend_finishes_the_thread_and_drops_its_stack_values() {
    solo(|| {
        let drops = Rc::new(Cell::new(0));
        let log = new_log();
        let t = {
            let (drops, log) = (drops.clone(), log.clone());
            Thread::create(
                move || {
                    let _a = DropCount(drops.clone());
                    let _b = Box::new([DropCount(drops.clone()), DropCount(drops.clone())]);
                    push(&log, "freeing");
                    let me = Thread::current();
                    me.free();
                    push(&log, "still running until it suspends");
                    converse::suspend();
                    push(&log, "never");
                },
                0,
            )
        };
        t.awaken();
        converse::schedule_poll();
        assert_eq!(take(&log), ["freeing", "still running until it suspends"]);
        assert!(t.is_finished());
        assert_eq!(drops.get(), 3, "the values on its stack were dropped");
        converse::schedule_poll();
        assert!(take(&log).is_empty(), "a freed thread never runs again");
        assert!(t.is_finished());
    });
}

#[test]
fn free_then_yield_never_comes_back() {
    solo(|| {
        let drops = Rc::new(Cell::new(0));
        let log = new_log();
        let t = {
            let (drops, log) = (drops.clone(), log.clone());
            Thread::create(
                move || {
                    let _a = DropCount(drops.clone());
                    Thread::current().free();
                    // A transfer counts as suspending too.
                    push(&log, "transfer");
                    Thread::create(|| {}, 0).resume();
                    push(&log, "never");
                },
                0,
            )
        };
        t.awaken();
        converse::schedule_poll();
        assert_eq!(take(&log), ["transfer"]);
        assert!(t.is_finished());
        assert_eq!(drops.get(), 1);
    });
}

static FREED_CTV: Ctv<Cell<u64>> = Ctv::new(|| Cell::new(0));

/// Records, when dropped, the running thread and its `FREED_CTV` value.
struct SeeContext(Rc<RefCell<Vec<(u64, u64)>>>);

impl Drop for SeeContext {
    fn drop(&mut self) {
        let me = Thread::current().id();
        self.0.borrow_mut().push((me, FREED_CTV.with(Cell::get)));
    }
}

/// The destructors of a freed thread's stack values run as that thread:
/// they see it as the current thread, and its thread-private values.
#[test]
fn a_freed_thread_drops_its_values_in_its_own_context() {
    solo(|| {
        FREED_CTV.with(|v| v.set(99));
        let seen: Rc<RefCell<Vec<(u64, u64)>>> = Rc::default();
        let s = seen.clone();
        let t = Thread::create(
            move || {
                FREED_CTV.with(|v| v.set(5));
                let _g = SeeContext(s);
                Thread::current().free();
                converse::suspend();
            },
            0,
        );
        t.awaken();
        converse::schedule_poll();
        assert!(t.is_finished());
        assert_eq!(*seen.borrow(), [(t.id(), 5)]);
        assert_eq!(FREED_CTV.with(Cell::get), 99);
        assert_eq!(Thread::current().id(), 0);
    });
}

#[test]
fn a_returned_thread_drops_its_values_and_its_closure() {
    solo(|| {
        let drops = Rc::new(Cell::new(0));
        let captured = DropCount(drops.clone());
        let d = drops.clone();
        let t = Thread::create(
            move || {
                let _local = DropCount(d.clone());
                let _keep = &captured;
                converse::yield_now();
            },
            0,
        );
        t.awaken();
        converse::schedule_poll();
        assert!(t.is_finished());
        assert_eq!(drops.get(), 2, "the local and the captured value");
    });
}

// ---------------------------------------------------------------------------
// 7. next / set_next
// ---------------------------------------------------------------------------

#[test]
fn next_links_threads() {
    solo(|| {
        let a = Thread::create(|| {}, 0);
        let b = Thread::create(|| {}, 0);
        let c = Thread::create(|| {}, 0);
        assert_eq!(a.next(), None);
        a.set_next(Some(b.clone()));
        b.set_next(Some(c.clone()));
        assert_eq!(a.next(), Some(b.clone()));
        // Walk the list.
        let mut walked = vec![a.id()];
        let mut cur = a.clone();
        while let Some(n) = cur.next() {
            walked.push(n.id());
            cur = n;
        }
        assert_eq!(walked, [a.id(), b.id(), c.id()]);
        // The main flow has the field too.
        let main = Thread::current();
        main.set_next(Some(a.clone()));
        assert_eq!(Thread::current().next(), Some(a.clone()));
        main.set_next(None);
        // The runtime ignores it: the threads run and keep it.
        a.awaken();
        converse::schedule_poll();
        assert!(a.is_finished() && !b.is_finished());
        assert_eq!(a.next(), Some(b.clone()));
        a.set_next(None);
        assert_eq!(a.next(), None);
        b.set_next(None);
        for t in [&b, &c] {
            t.awaken();
        }
        converse::schedule_poll();
    });
}

/// A lock built the way the manual suggests: waiters linked through their
/// "next" fields, suspended, and awakened in order.
#[test]
fn a_lock_built_on_next_hands_over_in_arrival_order() {
    struct Lock {
        held: Cell<bool>,
        head: RefCell<Option<Thread>>,
        tail: RefCell<Option<Thread>>,
    }
    impl Lock {
        fn lock(&self) {
            if !self.held.replace(true) {
                return;
            }
            let me = Thread::current();
            me.set_next(None);
            match self.tail.borrow_mut().replace(me.clone()) {
                Some(tail) => tail.set_next(Some(me)),
                None => *self.head.borrow_mut() = Some(me),
            }
            // Ownership is handed over by unlock.
            converse::suspend();
        }
        fn unlock(&self) {
            let head = self.head.borrow_mut().take();
            match head {
                None => self.held.set(false),
                Some(t) => {
                    let next = t.next();
                    t.set_next(None);
                    if next.is_none() {
                        *self.tail.borrow_mut() = None;
                    }
                    *self.head.borrow_mut() = next;
                    t.awaken();
                }
            }
        }
    }
    solo(|| {
        let lock = Rc::new(Lock {
            held: Cell::new(false),
            head: RefCell::default(),
            tail: RefCell::default(),
        });
        let log = new_log();
        let threads: Vec<Thread> = (0..6)
            .map(|i| {
                let (lock, log) = (lock.clone(), log.clone());
                Thread::create(
                    move || {
                        lock.lock();
                        push(&log, format!("in {i}"));
                        converse::yield_now();
                        push(&log, format!("out {i}"));
                        lock.unlock();
                    },
                    0,
                )
            })
            .collect();
        for t in threads.iter().rev() {
            t.awaken();
        }
        converse::schedule_poll();
        let want: Vec<String> = (0..6)
            .rev()
            .flat_map(|i| [format!("in {i}"), format!("out {i}")])
            .collect();
        assert_eq!(take(&log), want, "mutual exclusion, arrival order");
        assert!(threads.iter().all(Thread::is_finished));
        assert!(!lock.held.get());
    });
}

// ---------------------------------------------------------------------------
// 8. Strategy hooks
// ---------------------------------------------------------------------------

type ReadyQueue = Rc<RefCell<VecDeque<Thread>>>;

/// Gives `t` a strategy that keeps it in `ready` (recording the queueing
/// it was awakened with) and, when it suspends, transfers to the first
/// ready thread, or to `fallback` if there is none.
fn route_through(
    t: &Thread,
    ready: &ReadyQueue,
    given: &Rc<RefCell<Vec<Queueing>>>,
    fallback: &Thread,
) {
    let (r1, r2, g, fallback) = (
        ready.clone(),
        ready.clone(),
        given.clone(),
        fallback.clone(),
    );
    t.set_strategy(
        move |t, q| {
            g.borrow_mut().push(q);
            r1.borrow_mut().push_back(t.clone());
        },
        move || {
            let next = r2.borrow_mut().pop_front();
            next.unwrap_or_else(|| fallback.clone())
        },
    );
}

#[test]
fn strategy_hooks_route_threads_through_a_user_queue() {
    solo(|| {
        let log = new_log();
        let ready: ReadyQueue = Rc::default();
        let given: Rc<RefCell<Vec<Queueing>>> = Rc::default();
        let main = Thread::current();
        // Each logs whether the scheduler queue is empty when it runs.
        let mk = |name: &'static str| {
            let log = log.clone();
            let t = Thread::create(
                move || {
                    for i in 0..2 {
                        push(&log, format!("{name}{i}"));
                        assert!(converse::csd::is_empty(), "no token in the scheduler queue");
                        converse::yield_now();
                    }
                },
                0,
            );
            route_through(&t, &ready, &given, &main);
            t
        };
        let (a, b, c) = (mk("A"), mk("B"), mk("C"));
        a.awaken();
        b.awaken_prio(Queueing::IFifo(7));
        c.awaken();
        assert!(converse::csd::is_empty(), "awaken went to the user queue");
        assert_eq!(ready.borrow().len(), 3);
        assert_eq!(
            *given.borrow(),
            [Queueing::Fifo, Queueing::IFifo(7), Queueing::Fifo],
            "the awaken function gets the queueing"
        );
        // The scheduler does not see them.
        converse::schedule_poll();
        assert!(take(&log).is_empty());
        // Run the first; each suspend (in yield_now) transfers to the next
        // ready thread, never through the scheduler.
        let first = ready.borrow_mut().pop_front().unwrap();
        first.resume();
        // A returned after its last yield: the chain came back here.
        assert_eq!(take(&log), ["A0", "B0", "C0", "A1", "B1", "C1"]);
        assert!(a.is_finished());
        assert!(!b.is_finished() && !c.is_finished());
        assert_eq!(ready.borrow().len(), 2);
        loop {
            let next = ready.borrow_mut().pop_front();
            match next {
                Some(t) => t.resume(),
                None => break,
            }
        }
        assert!(b.is_finished() && c.is_finished());
        assert!(take(&log).is_empty());
        assert!(converse::csd::is_empty());
    });
}

#[test]
fn set_strategy_default_restores_the_scheduler_queue() {
    solo(|| {
        let log = new_log();
        let ready: ReadyQueue = Rc::default();
        let given: Rc<RefCell<Vec<Queueing>>> = Rc::default();
        let main = Thread::current();
        let t = {
            let log = log.clone();
            Thread::create(
                move || {
                    push(&log, "T0");
                    // Back to the defaults, then suspend: to the scheduler
                    // (here, back to the main flow that resumed us).
                    Thread::current().set_strategy_default();
                    converse::suspend();
                    push(&log, "T1");
                },
                0,
            )
        };
        route_through(&t, &ready, &given, &main);
        t.awaken();
        assert!(converse::csd::is_empty());
        assert_eq!(ready.borrow().len(), 1);
        let first = ready.borrow_mut().pop_front().unwrap();
        first.resume();
        assert_eq!(take(&log), ["T0"]);
        assert!(!t.is_finished());
        t.awaken();
        assert!(ready.borrow().is_empty(), "no longer the user queue");
        assert!(!converse::csd::is_empty(), "the scheduler queue again");
        converse::schedule_poll();
        assert_eq!(take(&log), ["T1"]);
        assert!(t.is_finished());

        // Set and reset from outside before it runs.
        let u = {
            let log = log.clone();
            Thread::create(move || push(&log, "U"), 0)
        };
        route_through(&u, &ready, &given, &main);
        u.set_strategy_default();
        u.awaken_prio(Queueing::IFifo(3));
        assert!(ready.borrow().is_empty());
        converse::schedule_poll();
        assert_eq!(take(&log), ["U"]);
        assert_eq!(given.borrow().len(), 1, "only t's first awaken was routed");
    });
}

/// Threads with a strategy whose choose function falls back to the main
/// flow (a central scheduler) when the user queue is empty: a suspend with
/// nothing ready transfers to the main flow.
#[test]
fn strategy_choose_may_return_the_main_flow() {
    solo(|| {
        let log = new_log();
        let ready: ReadyQueue = Rc::default();
        let given: Rc<RefCell<Vec<Queueing>>> = Rc::default();
        let main = Thread::current();
        let workers: Vec<Thread> = (0..3)
            .map(|i| {
                let log = log.clone();
                let t = Thread::create(
                    move || {
                        for round in 0..2 {
                            push(&log, format!("W{i}.{round}"));
                            converse::suspend();
                        }
                    },
                    0,
                );
                route_through(&t, &ready, &given, &main);
                t
            })
            .collect();
        for round in 0..3 {
            for w in &workers {
                w.awaken();
            }
            // Run the ready queue; the chain comes back here when a worker
            // suspends with nothing ready (rounds 0, 1) or returns (round 2).
            loop {
                let next = ready.borrow_mut().pop_front();
                let Some(t) = next else { break };
                t.resume();
                assert_eq!(Thread::current(), main);
            }
            let want: Vec<String> = if round < 2 {
                (0..3).map(|i| format!("W{i}.{round}")).collect()
            } else {
                Vec::new()
            };
            assert_eq!(take(&log), want, "round {round}");
        }
        assert!(workers.iter().all(Thread::is_finished));
        assert!(converse::csd::is_empty());
    });
}

/// The same, then the main flow suspends: it must stay suspended until
/// something awakens it.
#[test]
fn main_flow_suspends_normally_after_a_strategy_thread_chose_it() {
    solo(|| {
        let log = new_log();
        let ready: ReadyQueue = Rc::default();
        let given: Rc<RefCell<Vec<Queueing>>> = Rc::default();
        let main = Thread::current();
        let w = {
            let log = log.clone();
            Thread::create(
                move || {
                    push(&log, "W suspends");
                    converse::suspend();
                    push(&log, "W done");
                },
                0,
            )
        };
        route_through(&w, &ready, &given, &main);
        w.resume();
        assert_eq!(take(&log), ["W suspends"]);
        let waker = {
            let (log, main) = (log.clone(), main.clone());
            Thread::create(
                move || {
                    push(&log, "waker");
                    main.awaken();
                },
                0,
            )
        };
        waker.awaken();
        converse::suspend();
        push(&log, "main");
        assert_eq!(
            take(&log),
            ["waker", "main"],
            "the main flow's suspend returned before anything awakened it"
        );
        w.set_strategy_default();
        w.awaken();
        converse::schedule_poll();
        assert!(w.is_finished() && waker.is_finished());
    });
}

// ---------------------------------------------------------------------------
// 9. Ctv
// ---------------------------------------------------------------------------

static CTV_VALUE: Ctv<Cell<u64>> = Ctv::new(|| {
    CTV_VALUE_INITS.fetch_add(1, Ordering::SeqCst);
    Cell::new(u64::MAX)
});
static CTV_VALUE_INITS: AtomicUsize = AtomicUsize::new(0);

#[test]
fn ctv_values_are_private_to_each_of_5000_threads() {
    const THREADS: usize = 5000;
    solo(|| {
        let inits_before = CTV_VALUE_INITS.load(Ordering::SeqCst);
        assert_eq!(
            CTV_VALUE.get().get(),
            u64::MAX,
            "the main flow's first value"
        );
        CTV_VALUE.with(|v| v.set(777));
        let ok = Rc::new(Cell::new(0));
        let threads: Vec<Thread> = (0..THREADS)
            .map(|i| {
                let ok = ok.clone();
                Thread::create(
                    move || {
                        let mine = i as u64;
                        assert_eq!(CTV_VALUE.with(Cell::get), u64::MAX, "fresh value");
                        CTV_VALUE.with(|v| v.set(mine));
                        // Every other thread sets its own meanwhile.
                        converse::yield_now();
                        assert_eq!(CTV_VALUE.with(Cell::get), mine);
                        CTV_VALUE.set(Cell::new(mine * 2));
                        converse::yield_now();
                        assert_eq!(CTV_VALUE.get().get(), mine * 2);
                        ok.set(ok.get() + 1);
                    },
                    64 << 10,
                )
            })
            .collect();
        for t in &threads {
            t.awaken();
        }
        converse::schedule_poll();
        assert_eq!(ok.get(), THREADS);
        assert!(threads.iter().all(Thread::is_finished));
        assert_eq!(CTV_VALUE.with(Cell::get), 777, "the main flow kept its own");
        assert_eq!(
            CTV_VALUE_INITS.load(Ordering::SeqCst) - inits_before,
            THREADS + 1,
            "the initializer ran once per thread (and once for the main flow)"
        );
    });
}

static CTV_LAZY: Ctv<RefCell<Vec<u32>>> = Ctv::new(|| {
    CTV_LAZY_INITS.fetch_add(1, Ordering::SeqCst);
    RefCell::new(vec![1, 2, 3])
});
static CTV_LAZY_INITS: AtomicUsize = AtomicUsize::new(0);
static CTV_OTHER: Ctv<Cell<i32>> = Ctv::new(|| Cell::new(-1));

#[test]
fn ctv_initializer_runs_on_first_access_only() {
    solo(|| {
        let inits = || CTV_LAZY_INITS.load(Ordering::SeqCst);
        let before = inits();
        let silent = Thread::create(|| CTV_OTHER.with(|v| v.set(5)), 0);
        let reader = Thread::create(
            || {
                assert_eq!(*CTV_LAZY.get().borrow(), [1, 2, 3]);
                CTV_LAZY.with(|v| v.borrow_mut().push(4));
                converse::yield_now();
                assert_eq!(*CTV_LAZY.get().borrow(), [1, 2, 3, 4]);
                assert_eq!(CTV_OTHER.with(Cell::get), -1, "a separate variable");
            },
            0,
        );
        // `set` first: the initializer does not run.
        let setter = Thread::create(
            || {
                CTV_LAZY.set(RefCell::new(vec![9]));
                converse::yield_now();
                assert_eq!(*CTV_LAZY.get().borrow(), [9]);
            },
            0,
        );
        for t in [&silent, &reader, &setter] {
            t.awaken();
        }
        converse::schedule_poll();
        assert!(silent.is_finished() && reader.is_finished() && setter.is_finished());
        assert_eq!(inits() - before, 1, "only the reader ran the initializer");
        // The main flow's value is made on its own first access.
        assert_eq!(*CTV_LAZY.get().borrow(), [1, 2, 3]);
        assert_eq!(inits() - before, 2);
        assert_eq!(*CTV_LAZY.get().borrow(), [1, 2, 3]);
        assert_eq!(inits() - before, 2);
    });
}

static CTV_SEEN: Ctv<Cell<i32>> = Ctv::new(|| Cell::new(-1));

/// `get_of` (`CtvAccessOther`) reaches another thread's value: set before
/// that thread runs, read back after it changed it; the main flow's own
/// value stays apart.
#[test]
fn ctv_get_of_reaches_another_threads_value() {
    solo(|| {
        let worker = Thread::create(
            || {
                assert_eq!(CTV_SEEN.with(Cell::get), 41, "set by the main flow");
                CTV_SEEN.with(|v| v.set(42));
                converse::suspend();
            },
            0,
        );
        CTV_SEEN.get_of(&worker).set(41);
        assert_eq!(CTV_SEEN.with(Cell::get), -1, "the main flow's own value");
        worker.awaken();
        converse::schedule_poll();
        assert_eq!(CTV_SEEN.get_of(&worker).get(), 42);
        let me = Thread::current();
        assert!(Rc::ptr_eq(&CTV_SEEN.get_of(&me), &CTV_SEEN.get()));
    });
}

static CTV_PE: Ctv<Cell<usize>> = Ctv::new(|| Cell::new(usize::MAX));

#[test]
fn ctv_main_flows_of_different_pes_are_separate() {
    user_job(4, 2, || {
        assert_eq!(CTV_PE.with(Cell::get), usize::MAX);
        CTV_PE.with(|v| v.set(my_pe()));
        let t = Thread::create(
            || {
                assert_eq!(CTV_PE.with(Cell::get), usize::MAX);
                CTV_PE.with(|v| v.set(100 + my_pe()));
                converse::yield_now();
                assert_eq!(CTV_PE.with(Cell::get), 100 + my_pe());
            },
            0,
        );
        t.awaken();
        converse::schedule_poll();
        assert!(t.is_finished());
        assert_eq!(CTV_PE.with(Cell::get), my_pe());
    });
}

static CTV_DROPS: Ctv<RefCell<Option<DropCount>>> = Ctv::new(|| RefCell::new(None));

#[test]
fn ctv_values_are_dropped_with_their_thread() {
    solo(|| {
        let drops = Rc::new(Cell::new(0));
        for _ in 0..10 {
            let d = drops.clone();
            // The handle is not kept: the thread goes when it finishes.
            Thread::create(
                move || {
                    CTV_DROPS.with(|v| *v.borrow_mut() = Some(DropCount(d)));
                    converse::yield_now();
                },
                0,
            )
            .awaken();
        }
        converse::schedule_poll();
        assert_eq!(drops.get(), 10);
        // A kept handle keeps the values until it is dropped.
        let d = drops.clone();
        let kept = Thread::create(
            move || CTV_DROPS.with(|v| *v.borrow_mut() = Some(DropCount(d))),
            0,
        );
        kept.awaken();
        converse::schedule_poll();
        assert!(kept.is_finished());
        assert!(drops.get() >= 10);
        drop(kept);
        assert_eq!(drops.get(), 11);
    });
}

// ---------------------------------------------------------------------------
// 10. Event
// ---------------------------------------------------------------------------

/// A thread that logs `name`, waits on `event`, then logs `name done`.
fn waiter(log: &Log, event: &Rc<Event>, name: String) -> Thread {
    let (log, event) = (log.clone(), event.clone());
    Thread::create(
        move || {
            push(&log, name.clone());
            event.wait();
            push(&log, format!("{name} done"));
        },
        0,
    )
}

#[test]
fn event_wakes_its_waiters_in_the_order_they_started_waiting() {
    solo(|| {
        let log = new_log();
        let event = Rc::new(Event::new());
        let waiters: Vec<Thread> = (0..5)
            .map(|i| waiter(&log, &event, format!("W{i}")))
            .collect();
        // Start them in reverse.
        for w in waiters.iter().rev() {
            w.awaken();
        }
        converse::schedule_poll();
        assert_eq!(take(&log), ["W4", "W3", "W2", "W1", "W0"]);
        assert!(!event.is_set());
        assert!(waiters.iter().all(|w| !w.is_finished()));
        event.set();
        assert!(event.is_set());
        converse::schedule_poll();
        assert_eq!(
            take(&log),
            ["W4 done", "W3 done", "W2 done", "W1 done", "W0 done"]
        );
        assert!(waiters.iter().all(Thread::is_finished));
    });
}

#[test]
fn event_wait_on_a_set_event_returns_at_once() {
    solo(|| {
        let log = new_log();
        let event = Rc::new(Event::new());
        event.set();
        let x = waiter(&log, &event, "X".into());
        let y = yielder(&log, "Y", 1);
        x.awaken();
        y.awaken();
        converse::schedule_poll();
        assert_eq!(take(&log), ["X", "X done", "Y0"], "X did not suspend");
        // Nor does the main flow.
        let z = yielder(&log, "Z", 1);
        z.awaken();
        event.wait();
        assert!(take(&log).is_empty(), "the main flow did not suspend");
        converse::schedule_poll();
        assert_eq!(take(&log), ["Z0"]);
    });
}

#[test]
fn event_reset_makes_wait_block_again() {
    solo(|| {
        let log = new_log();
        let event = Rc::new(Event::default());
        event.set();
        event.reset();
        assert!(!event.is_set());
        let w = waiter(&log, &event, "W".into());
        w.awaken();
        converse::schedule_poll();
        assert_eq!(take(&log), ["W"]);
        event.set();
        // Setting a set event does nothing (no second awaken).
        event.set();
        converse::schedule_poll();
        assert_eq!(take(&log), ["W done"]);
        assert!(w.is_finished());
        // Reuse after reset.
        event.reset();
        let v = waiter(&log, &event, "V".into());
        v.awaken();
        converse::schedule_poll();
        assert_eq!(take(&log), ["V"]);
        event.set();
        converse::schedule_poll();
        assert_eq!(take(&log), ["V done"]);
    });
}

#[test]
fn event_waiters_ignore_spurious_wakeups() {
    solo(|| {
        let log = new_log();
        let event = Rc::new(Event::new());
        let w = waiter(&log, &event, "W".into());
        w.awaken();
        converse::schedule_poll();
        assert_eq!(take(&log), ["W"]);
        // Awakened by someone else: it goes on waiting.
        for _ in 0..3 {
            w.awaken();
            converse::schedule_poll();
            assert!(take(&log).is_empty());
            assert!(!w.is_finished());
        }
        event.set();
        converse::schedule_poll();
        assert_eq!(take(&log), ["W done"]);
        assert!(w.is_finished());
    });
}

#[test]
fn event_set_from_a_handler_wakes_threads_and_the_main_flow() {
    solo(|| {
        let log = new_log();
        let event = Rc::new(Event::new());
        let h = {
            let (log, event) = (log.clone(), event.clone());
            converse::register_handler(move |_msg: Message| {
                push(&log, "handler sets");
                event.set();
            })
        };
        let w = waiter(&log, &event, "W".into());
        w.awaken();
        let sender = {
            let log = log.clone();
            Thread::create(
                move || {
                    push(&log, "send");
                    converse::sync_send_and_free(0, Message::new(h, 0));
                },
                0,
            )
        };
        sender.awaken();
        // The main flow starts waiting before W does: it is awakened first
        // and continues as soon as its token runs, before W's.
        event.wait();
        push(&log, "main done");
        assert_eq!(take(&log), ["W", "send", "handler sets", "main done"]);
        converse::schedule_poll();
        assert_eq!(take(&log), ["W done"]);
        assert!(w.is_finished() && sender.is_finished());
    });
}

// ---------------------------------------------------------------------------
// 11. Many threads
// ---------------------------------------------------------------------------

#[test]
fn twenty_thousand_short_lived_threads_one_after_another() {
    solo(|| {
        const N: usize = 20_000;
        let count = Rc::new(Cell::new(0));
        for i in 0..N {
            let c = count.clone();
            // Two sizes, so the pool serves both.
            let size = if i % 2 == 0 { 0 } else { 64 << 10 };
            let t = Thread::create(move || c.set(c.get() + 1), size);
            t.awaken();
            converse::schedule_poll();
            assert!(t.is_finished());
        }
        assert_eq!(count.get(), N);
    });
}

#[test]
fn a_chain_of_twenty_thousand_threads_each_creating_the_next() {
    fn link(left: usize, count: Rc<Cell<usize>>) {
        count.set(count.get() + 1);
        if left > 1 {
            Thread::create(move || link(left - 1, count), 0).awaken();
        }
    }
    solo(|| {
        let count = Rc::new(Cell::new(0));
        let c = count.clone();
        Thread::create(move || link(20_000, c), 0).awaken();
        converse::schedule_poll();
        assert_eq!(count.get(), 20_000);
    });
}

#[test]
fn two_thousand_threads_live_at_once() {
    solo(|| {
        const N: usize = 2000;
        let event = Rc::new(Event::new());
        let started = Rc::new(Cell::new(0));
        let finished = Rc::new(Cell::new(0));
        let threads: Vec<Thread> = (0..N)
            .map(|i| {
                let (event, started, finished) = (event.clone(), started.clone(), finished.clone());
                Thread::create(
                    move || {
                        // Something on the stack that must survive.
                        let mine = [i; 16];
                        started.set(started.get() + 1);
                        event.wait();
                        assert!(std::hint::black_box(mine).iter().all(|&v| v == i));
                        finished.set(finished.get() + 1);
                    },
                    0,
                )
            })
            .collect();
        for t in &threads {
            t.awaken();
        }
        converse::schedule_poll();
        assert_eq!(started.get(), N);
        assert_eq!(finished.get(), 0);
        assert!(threads.iter().all(|t| !t.is_finished()));
        event.set();
        converse::schedule_poll();
        assert_eq!(finished.get(), N);
        assert!(threads.iter().all(Thread::is_finished));
    });
}

// ---------------------------------------------------------------------------
// 12. Several PEs
// ---------------------------------------------------------------------------

/// Per PE state of the fib computation.
struct Fib {
    request: Cell<usize>,
    answer: Cell<usize>,
    done: Cell<usize>,
    waiting: RefCell<BTreeMap<u64, Rc<Pending>>>,
    next_key: Cell<u64>,
    threads: Cell<usize>,
    next_pe: Cell<usize>,
}

struct Pending {
    sum: Cell<u64>,
    answers: Cell<u32>,
    done: Event,
}

const NO_PARENT: u64 = u64::MAX;

fn fib_thread(
    state: Rc<Fib>,
    n: u64,
    parent_pe: u64,
    parent_key: u64,
    result: Arc<Mutex<Option<u64>>>,
) {
    let pe = my_pe();
    state.threads.set(state.threads.get() + 1);
    let value = if n < 2 {
        n
    } else {
        let pending = Rc::new(Pending {
            sum: Cell::new(0),
            answers: Cell::new(0),
            done: Event::new(),
        });
        let key = state.next_key.get();
        state.next_key.set(key + 1);
        state.waiting.borrow_mut().insert(key, pending.clone());
        for child in [n - 1, n - 2] {
            let dest = state.next_pe.get();
            state.next_pe.set((dest + 1) % num_pes());
            let msg = common::msg_u64(state.request.get(), &[child, pe as u64, key]);
            converse::sync_send_and_free(dest, msg);
        }
        pending.done.wait();
        assert_eq!(my_pe(), pe, "a thread stays on its PE");
        pending.sum.get()
    };
    if parent_pe == NO_PARENT {
        *result.lock().unwrap() = Some(value);
        converse::sync_broadcast_all(&Message::new(state.done.get(), 0));
    } else {
        let msg = common::msg_u64(state.answer.get(), &[parent_key, value]);
        converse::sync_send_and_free(parent_pe as usize, msg);
    }
}

/// fib(n) with a thread per call, spread over 4 PEs in 2 nodes: each
/// thread sends two requests, blocks on an event until both answers are
/// back, and answers its parent.
#[test]
fn fib_with_a_thread_per_call_on_4_pes_in_2_nodes() {
    const N: u64 = 14;
    let result: Arc<Mutex<Option<u64>>> = Arc::default();
    let threads = Arc::new(AtomicUsize::new(0));
    let (r, th) = (result.clone(), threads.clone());
    let code = normal_job(&["+p", "4", "++ppn", "2"], move |_| {
        let state = Rc::new(Fib {
            request: Cell::new(0),
            answer: Cell::new(0),
            done: Cell::new(0),
            waiting: RefCell::default(),
            next_key: Cell::new(1),
            threads: Cell::new(0),
            next_pe: Cell::new((my_pe() + 1) % num_pes()),
        });
        let request = {
            let (state, r) = (state.clone(), r.clone());
            converse::register_handler(move |msg: Message| {
                let (n, parent, key) = (
                    common::read_u64(&msg, 0),
                    common::read_u64(&msg, 8),
                    common::read_u64(&msg, 16),
                );
                let (state, r) = (state.clone(), r.clone());
                // The handler only creates the thread; the thread blocks.
                Thread::create(move || fib_thread(state, n, parent, key, r), 0).awaken();
            })
        };
        let answer = {
            let state = state.clone();
            converse::register_handler(move |msg: Message| {
                let (key, value) = (common::read_u64(&msg, 0), common::read_u64(&msg, 8));
                let pending = state
                    .waiting
                    .borrow()
                    .get(&key)
                    .cloned()
                    .expect("a waiting thread");
                pending.sum.set(pending.sum.get() + value);
                pending.answers.set(pending.answers.get() + 1);
                if pending.answers.get() == 2 {
                    state.waiting.borrow_mut().remove(&key);
                    pending.done.set();
                }
            })
        };
        let done = {
            let (state, th) = (state.clone(), th.clone());
            converse::register_handler(move |_msg: Message| {
                assert!(state.waiting.borrow().is_empty());
                th.fetch_add(state.threads.get(), Ordering::SeqCst);
                converse::exit_scheduler();
            })
        };
        state.request.set(request);
        state.answer.set(answer);
        state.done.set(done);
        if my_pe() == 0 {
            let msg = common::msg_u64(request, &[N, NO_PARENT, 0]);
            converse::sync_send_and_free(0, msg);
        }
    });
    assert_eq!(code, 0);
    assert_eq!(*result.lock().unwrap(), Some(377));
    // One thread per call: calls(n) = 2 fib(n+1) - 1.
    assert_eq!(threads.load(Ordering::SeqCst), 2 * 610 - 1);
}

static RING_CTV: Ctv<Cell<u64>> = Ctv::new(|| Cell::new(0));

/// A token passed around 4 PEs (2 nodes) by one long-lived thread per PE,
/// each blocking on an event until the token arrives.
#[test]
fn a_token_ring_of_blocking_threads_on_4_pes() {
    const LAPS: u64 = 50;
    let results = Arc::new(Mutex::new(Vec::new()));
    let r = results.clone();
    let code = normal_job(&["+p", "4", "++ppn", "2"], move |_| {
        let arrived = Rc::new(Event::new());
        let token = Rc::new(Cell::new(0u64));
        let stop = converse::register_handler(|_msg: Message| converse::exit_scheduler());
        let pass = {
            let (arrived, token) = (arrived.clone(), token.clone());
            converse::register_handler(move |msg: Message| {
                token.set(common::read_u64(&msg, 0));
                assert!(!arrived.is_set(), "one token at a time");
                arrived.set();
            })
        };
        let r = r.clone();
        let t = Thread::create(
            move || {
                let me = my_pe();
                let id = Thread::current().id();
                let next = (me + 1) % num_pes();
                RING_CTV.with(|v| v.set(1000 + me as u64));
                if me == 0 {
                    converse::sync_send_and_free(next, tagged(pass, 1));
                }
                let mut last = 0;
                for lap in 0..LAPS {
                    arrived.wait();
                    arrived.reset();
                    assert_eq!(my_pe(), me);
                    assert_eq!(Thread::current().id(), id);
                    assert_eq!(RING_CTV.with(Cell::get), 1000 + me as u64);
                    last = token.get();
                    if me != 0 || lap + 1 < LAPS {
                        converse::sync_send_and_free(next, tagged(pass, last + 1));
                    }
                }
                r.lock().unwrap().push((me, last));
                if me == 0 {
                    converse::sync_broadcast_all(&Message::new(stop, 0));
                }
            },
            0,
        );
        t.awaken();
    });
    assert_eq!(code, 0);
    let mut results = results.lock().unwrap().clone();
    results.sort();
    // PE k receives 4 (lap) + k on each lap; PE 0 receives multiples of 4.
    assert_eq!(
        results,
        [
            (0, 4 * LAPS),
            (1, 4 * (LAPS - 1) + 1),
            (2, 4 * (LAPS - 1) + 2),
            (3, 4 * (LAPS - 1) + 3)
        ]
    );
}

#[test]
fn threads_on_every_pe_run_on_their_own_pe() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    user_job(4, 2, move || {
        let threads: Vec<Thread> = (0..20)
            .map(|i| {
                let s = s.clone();
                let pe = my_pe();
                Thread::create(
                    move || {
                        converse::yield_now();
                        assert_eq!(my_pe(), pe);
                        s.lock().unwrap().push((pe, i));
                    },
                    0,
                )
            })
            .collect();
        for t in &threads {
            t.awaken();
        }
        converse::schedule_poll();
        assert!(threads.iter().all(Thread::is_finished));
    });
    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    let want: Vec<(usize, i32)> = (0..4)
        .flat_map(|pe| (0..20).map(move |i| (pe, i)))
        .collect();
    assert_eq!(seen, want);
}

// ---------------------------------------------------------------------------
// How threads end a job
// ---------------------------------------------------------------------------

#[test]
fn exit_from_a_thread_ends_the_job_with_its_code() {
    let code = normal_job(&["+p", "2"], |_| {
        if my_pe() == 1 {
            Thread::create(
                || {
                    converse::yield_now();
                    converse::exit(5);
                },
                0,
            )
            .awaken();
        }
    });
    assert_eq!(code, 5);
}

#[test]
fn exit_scheduler_from_threads_ends_a_normal_mode_job() {
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    let code = normal_job(&["+p", "3"], move |_| {
        let r = r.clone();
        Thread::create(
            move || {
                converse::yield_now();
                r.fetch_add(1, Ordering::SeqCst);
                converse::exit_scheduler();
            },
            0,
        )
        .awaken();
    });
    assert_eq!(code, 0);
    assert_eq!(ran.load(Ordering::SeqCst), 3);
}

#[test]
#[should_panic(expected = "deliberate panic in a user-level thread")]
fn a_panic_in_a_thread_is_reraised_by_run() {
    normal_job(&["+p", "1"], |_| {
        Thread::create(
            || {
                converse::yield_now();
                panic!("deliberate panic in a user-level thread");
            },
            0,
        )
        .awaken();
    });
}

/// Sets its flag when dropped (from any OS thread).
struct SetOnDrop(Arc<AtomicUsize>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A thread left suspended when the job ends must not keep its PE alive:
/// the PE's handler closures (and queued messages) are dropped at the end
/// of the job either way.
#[test]
fn a_suspended_thread_does_not_keep_its_pe_alive_after_the_job() {
    for leave_suspended in [false, true] {
        let dropped = Arc::new(AtomicUsize::new(0));
        let d = dropped.clone();
        let code = common::within(HANG_SECS, move || {
            common::run_user(1, 1, move |_| {
                let held = SetOnDrop(d.clone());
                converse::register_handler(move |_msg: Message| {
                    let _ = &held;
                });
                if leave_suspended {
                    Thread::create(converse::suspend, 0).awaken();
                    converse::schedule_poll();
                }
            })
        });
        assert_eq!(code, 0);
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            1,
            "handler closure dropped at job end (thread left suspended: {leave_suspended})"
        );
    }
}

/// The start function of a user-calls-scheduler job returns while threads
/// are suspended (one waiting, one never started, one queued): the job
/// still ends cleanly.
#[test]
fn a_job_ends_cleanly_with_threads_still_suspended() {
    let code = common::within(HANG_SECS, || {
        common::run_user(2, 2, |_| {
            let event = Rc::new(Event::new());
            let e = event.clone();
            let waiting = Thread::create(
                move || {
                    let _held = vec![1u8; 1000];
                    e.wait();
                    unreachable!("the event is never set");
                },
                0,
            );
            waiting.awaken();
            converse::schedule_poll();
            assert!(!waiting.is_finished());
            let _never_started = Thread::create(|| unreachable!("never awakened"), 0);
            Thread::create(|| {}, 0).awaken();
        })
    });
    assert_eq!(code, 0);
}
