//! Regression tests for bugs two code reviews found in the thread and timer
//! layers (`cth`, `ccd`): each test is the reviewer's reproduction, and each
//! failed (or hung, or aborted the process) before its fix. The `rN` tests
//! come from the first review (its numbering), the rest from the second;
//! each test's comment says what was wrong.
//!
//! A few failures abort the whole test process rather than fail one test
//! (the runtime aborts on a misused thread); CI still reports them.
use crate::common;

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use converse::{Condition, Converse, Event, Message, Thread};

type Log = Rc<RefCell<Vec<String>>>;

fn push(log: &Log, s: impl Into<String>) {
    log.borrow_mut().push(s.into());
}

fn solo(body: impl Fn() + Send + Sync + 'static) {
    let done = Arc::new(AtomicUsize::new(0));
    let d = done.clone();
    let code = common::within(20, move || {
        common::run_user(1, 1, move |_| {
            body();
            d.fetch_add(1, Ordering::SeqCst);
        })
    });
    assert_eq!(code, 0);
    assert_eq!(done.load(Ordering::SeqCst), 1);
}

/// A: run_token sets `resumed` on a main flow that is running.
#[test]
fn r1_stale_wakeup_from_own_token() {
    solo(|| {
        let log: Log = Rc::default();
        let main = Thread::current();
        main.awaken();
        converse::schedule_poll(); // consumes main's token while main runs
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
        let got = log.borrow().clone();
        converse::schedule_poll();
        assert_eq!(got, ["waker", "M awakened"]);
    });
}

/// A': a thread resumed by the main flow awakens it then suspends (the
/// Converse pattern of a scheduling thread); the main flow gets control back
/// at once, and its token later leaves a stale flag.
#[test]
fn r1b_stale_wakeup_thread_awakens_running_main() {
    solo(|| {
        let log: Log = Rc::default();
        let main = Thread::current();
        let t = {
            let (log, main) = (log.clone(), main.clone());
            Thread::create(
                move || {
                    push(&log, "T");
                    main.awaken();
                    converse::suspend();
                },
                0,
            )
        };
        t.resume();
        push(&log, "M back");
        converse::schedule_poll(); // runs main's (stale) token
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
        let got = log.borrow().clone();
        converse::schedule_poll();
        assert_eq!(got, ["T", "M back", "waker", "M awakened"]);
    });
}

/// C: direct yields keep switching threads after exit_scheduler.
#[test]
fn r2_direct_yield_ignores_exit_scheduler() {
    solo(|| {
        let log: Log = Rc::default();
        let mk = |name: &'static str, stop_at: Option<usize>| {
            let log = log.clone();
            Thread::create(
                move || {
                    for i in 0..4 {
                        push(&log, format!("{name}{i}"));
                        if Some(i) == stop_at {
                            converse::exit_scheduler();
                        }
                        converse::yield_now();
                    }
                },
                0,
            )
        };
        let a = mk("A", Some(1));
        let b = mk("B", None);
        a.awaken();
        b.awaken();
        converse::schedule_forever();
        push(&log, "returned");
        let got = log.borrow().clone();
        converse::schedule_poll();
        assert_eq!(got, ["A0", "B0", "A1", "returned"]);
    });
}

/// D: a timer callback that polls the scheduler (legal in a handler) while a
/// direct yield is in progress resumes the yielding thread, which runs.
#[test]
fn r3_timer_callback_polls_during_direct_yield() {
    solo(|| {
        let log: Log = Rc::default();
        let mk = |name: &'static str| {
            let log = log.clone();
            Thread::create(
                move || {
                    for i in 0..4 {
                        push(&log, format!("{name}{i}"));
                        converse::yield_now();
                    }
                },
                0,
            )
        };
        let a = mk("A");
        let b = mk("B");
        a.awaken();
        b.awaken();
        // Both have run once (and are Suspended): then arm a timer.
        converse::schedule_count(2);
        converse::call_fn_after(|_| converse::schedule_poll(), 0.0);
        converse::schedule_poll();
        let got = log.borrow().clone();
        eprintln!("{got:?}");
    });
}

/// D': a timer callback that sends itself a message during a direct yield:
/// the message must run before the next thread (arrived messages first).
#[test]
fn r3b_timer_message_runs_before_next_thread() {
    solo(|| {
        let log: Log = Rc::default();
        let h = {
            let log = log.clone();
            converse::register_handler(move |_m: Message| push(&log, "M"))
        };
        let mk = |name: &'static str| {
            let log = log.clone();
            Thread::create(
                move || {
                    for i in 0..3 {
                        push(&log, format!("{name}{i}"));
                        converse::yield_now();
                    }
                },
                0,
            )
        };
        let a = mk("A");
        let b = mk("B");
        a.awaken();
        b.awaken();
        converse::schedule_count(2);
        {
            let log = log.clone();
            converse::call_fn_after(
                move |_| {
                    push(&log, "timer");
                    converse::sync_send(0, &Message::new(h, 0));
                },
                0.0,
            );
        }
        converse::schedule_poll();
        let got = log.borrow().clone();
        let t = got.iter().position(|s| s == "timer").unwrap();
        assert_eq!(got[t + 1], "M", "{got:?}");
    });
}

/// E: free then yield_now on an otherwise empty queue: the thread is not
/// freed and goes on running.
#[test]
fn r4_free_then_yield_keeps_running() {
    solo(|| {
        let log: Log = Rc::default();
        let t = {
            let log = log.clone();
            Thread::create(
                move || {
                    Thread::current().free();
                    converse::yield_now();
                    push(&log, "after free+yield");
                },
                0,
            )
        };
        t.awaken();
        converse::schedule_poll();
        let got = log.borrow().clone();
        assert!(got.is_empty(), "{got:?}");
    });
}

/// E': same with another thread queued: aborts later, at an unrelated
/// scheduler step, with "resume of ... which has finished".
#[test]
fn r4b_free_then_yield_with_other_thread() {
    solo(|| {
        let t = Thread::create(
            || {
                Thread::current().free();
                converse::yield_now();
            },
            0,
        );
        let other = Thread::create(
            || {
                converse::yield_now();
                converse::yield_now();
            },
            0,
        );
        other.awaken();
        converse::schedule_count(1); // other runs once, suspended & queued
        t.awaken();
        converse::schedule_poll();
    });
}

/// B: init_returns main flow waiting on an Event when another PE exits.
#[test]
fn r5_init_returns_main_waits_while_job_exits() {
    common::within(10, || {
        Converse::new()
            .args(common::args(2, 2))
            .init_returns(|_| {
                std::thread::sleep(std::time::Duration::from_millis(100));
                converse::exit(3);
            })
            .unwrap();
        let ev = Event::new();
        // A thread that would never set it; the job exits meanwhile.
        ev.wait();
        converse::finish(0)
    });
}

/// Event: set then reset before the waiter runs loses the wake-up.
#[test]
fn r6_event_set_reset_loses_wakeup() {
    solo(|| {
        let ev = Rc::new(Event::new());
        let passed = Rc::new(Cell::new(false));
        let t = {
            let (ev, passed) = (ev.clone(), passed.clone());
            Thread::create(
                move || {
                    ev.wait();
                    passed.set(true);
                },
                0,
            )
        };
        t.awaken();
        converse::schedule_poll();
        ev.set();
        ev.reset();
        converse::schedule_poll();
        assert!(
            passed.get(),
            "the waiter was awakened by set but went back to waiting"
        );
    });
}

/// Ccd: huge delays and resolutions panic instead of clamping.
#[test]
fn r7_huge_delay() {
    solo(|| {
        converse::call_fn_after(|_| {}, 1e30);
    });
}

#[test]
fn r7b_huge_resolution() {
    solo(|| {
        converse::set_resolution(1e30);
    });
}

/// STILL_IDLE keeps a PE busy without messages; QD calls it strictly idle,
/// and the reduction stall check aborts a job that would complete.
#[test]
fn r8_still_idle_progress_vs_stall_check() {
    let code = common::within(30, || {
        common::run(2, 2, |_| {
            let h = converse::register_handler(|_m: Message| converse::exit(0));
            let merge = |m: Message, _kids: Vec<Message>| m;
            if converse::my_pe() == 0 {
                converse::reduce(Message::new(h, 0), merge);
            } else {
                let start = Instant::now();
                let done = Rc::new(Cell::new(false));
                converse::call_on_condition_keep(Condition::PROCESSOR_STILL_IDLE, move |_| {
                    // "external progress": contribute after 2.5 s
                    if !done.get() && start.elapsed().as_secs_f64() > 2.5 {
                        done.set(true);
                        converse::reduce(Message::new(h, 0), merge);
                    }
                });
            }
        })
    });
    assert_eq!(code, 0);
}

#[test]
fn r5_control_schedule_forever_returns() {
    common::within(10, || {
        Converse::new()
            .args(common::args(2, 2))
            .init_returns(|_| {
                std::thread::sleep(std::time::Duration::from_millis(100));
                converse::exit(3);
            })
            .unwrap();
        converse::schedule_forever();
        eprintln!(
            "schedule_forever returned; exiting={}",
            converse::job_exiting()
        );
        converse::finish(0)
    });
}

#[test]
fn r8_control_timer() {
    let code = common::within(30, || {
        common::run(2, 2, |_| {
            let h = converse::register_handler(|_m: Message| converse::exit(0));
            let merge = |m: Message, _kids: Vec<Message>| m;
            if converse::my_pe() == 0 {
                converse::reduce(Message::new(h, 0), merge);
            } else {
                converse::call_fn_after(
                    move |_| converse::reduce(Message::new(h, 0), merge),
                    2500.0,
                );
            }
        })
    });
    assert_eq!(code, 0);
}

/// A thread suspended inside a handler (of a scheduler it polls) leaves the
/// PE's handler depth raised: the main flow may then not block.
#[test]
fn r9_thread_suspended_in_handler_leaks_handler_depth() {
    solo(|| {
        let parked: Rc<RefCell<Option<Thread>>> = Rc::default();
        let h = {
            let parked = parked.clone();
            converse::register_handler(move |_m: Message| {
                *parked.borrow_mut() = Some(Thread::current());
                converse::suspend(); // raw suspend: allowed everywhere
            })
        };
        let t = Thread::create(
            move || {
                converse::sync_send(0, &Message::new(h, 0));
                converse::schedule_poll(); // h runs on this thread's stack
            },
            0,
        );
        t.awaken();
        converse::schedule_poll();
        assert!(parked.borrow().is_some());
        eprintln!("main flow now sleeps 1 ms (not in any handler)");
        converse::sleep(1.0);
        eprintln!("slept");
        parked.borrow().clone().unwrap().awaken();
        converse::schedule_poll();
    });
}

/// finish() on an init_returns PE 0 parks without a deadline: a sleeping
/// thread on PE 0 never wakes, and a PE waiting for it hangs.
#[test]
fn r10_finish_parks_past_timers() {
    common::within(10, || {
        Converse::new()
            .args(common::args(2, 2))
            .init_returns(|_| {
                let _h = converse::register_handler(noop);
                assert_eq!(converse::schedule_count(1), 0);
            })
            .unwrap();
        let h = converse::register_handler(noop);
        let t = Thread::create(
            move || {
                converse::sleep(20.0);
                converse::sync_send(1, &Message::new(h, 0));
            },
            0,
        );
        t.awaken();
        converse::finish(0)
    });
}

fn noop(_m: Message) {}

/// Same leak, sched_depth: exit_scheduler outside any scheduler is lost.
#[test]
fn r9b_thread_suspended_in_nested_scheduler_eats_exit_scheduler() {
    solo(|| {
        let parked: Rc<RefCell<Option<Thread>>> = Rc::default();
        let h = {
            let parked = parked.clone();
            converse::register_handler(move |_m: Message| {
                *parked.borrow_mut() = Some(Thread::current());
                converse::suspend();
            })
        };
        let t = Thread::create(
            move || {
                converse::sync_send(0, &Message::new(h, 0));
                converse::schedule_poll();
            },
            0,
        );
        t.awaken();
        converse::schedule_poll();
        converse::exit_scheduler(); // no scheduler runs: the next returns at once
        eprintln!("calling schedule_forever after exit_scheduler");
        converse::schedule_forever();
        eprintln!("returned");
        parked.borrow().clone().unwrap().awaken();
        converse::schedule_poll();
    });
}

// ---------------------------------------------------------------------------
// Second review
// ---------------------------------------------------------------------------

/// A thread that suspends inside a handler it polled for (the r9 pattern),
/// left suspended when the job ends: `unwind_suspended` force-unwinds its
/// stack with the PE's depths at 0 (the trampoline took the thread's own
/// depths off when it suspended and nothing re-applies them), so the
/// handler's `HandlerRunning` guard subtracts below 0: overflow panic during
/// the forced unwind, "panic in a destructor during cleanup", SIGABRT of the
/// whole process (debug builds; release builds wrap silently at teardown).
/// Regression of e4f4ac3 (passed before it).
#[test]
fn teardown_unwinds_thread_suspended_in_handler() {
    solo(|| {
        let h = converse::register_handler(|_m: Message| {
            converse::suspend(); // raw suspend: allowed everywhere
        });
        let t = Thread::create(
            move || {
                converse::sync_send(0, &Message::new(h, 0));
                converse::schedule_poll(); // h runs on this thread's stack
                unreachable!("never awakened");
            },
            0,
        );
        t.awaken();
        converse::schedule_poll();
        assert!(!t.is_finished());
    });
}

/// A thread frees itself inside a handler it polled for, then transfers
/// to another thread: `destroy` unwinds the freed stack after the
/// trampoline already put the PE's depths back to its base, so the
/// handler's guard takes the handler depth (and the nested scheduler's the
/// scheduler depth) below 0. Debug builds abort (overflow panic during the
/// unwind); release builds wrap to u32::MAX, and the thread that runs next
/// (not in any handler) is refused to block: "sleep would block in a
/// handler". Regression of e4f4ac3 (passed before it).
#[test]
fn free_inside_handler_then_resume_other() {
    solo(|| {
        let slept = Rc::new(Cell::new(false));
        let u = {
            let slept = slept.clone();
            Thread::create(
                move || {
                    converse::sleep(1.0);
                    slept.set(true);
                },
                0,
            )
        };
        let h = {
            let u = u.clone();
            converse::register_handler(move |_m: Message| {
                Thread::current().free();
                u.resume();
            })
        };
        let t = Thread::create(
            move || {
                converse::sync_send(0, &Message::new(h, 0));
                converse::schedule_poll();
                unreachable!("freed");
            },
            0,
        );
        t.awaken();
        converse::schedule_poll();
        assert!(t.is_finished());
        while !slept.get() {
            converse::schedule_poll();
        }
    });
}

/// exit_scheduler from a thread, then a nested scheduler in that thread
/// that resumes another thread: the nested `run_token` overwrites
/// `direct_gen` with the new stop count and nothing puts it back, so the
/// first thread's later yields switch directly (here: keep running) instead
/// of returning to the stopped outer scheduler (r2 fixed only the case
/// without a nested scheduler). Also failed before e4f4ac3.
#[test]
fn nested_run_token_hides_exit_scheduler_from_direct_yield() {
    solo(|| {
        let log: Log = Rc::default();
        let a = {
            let log = log.clone();
            Thread::create(
                move || {
                    for i in 0..4 {
                        push(&log, format!("A{i}"));
                        if i == 1 {
                            converse::exit_scheduler();
                            converse::schedule_poll();
                        }
                        converse::yield_now();
                    }
                },
                0,
            )
        };
        let b = {
            let log = log.clone();
            Thread::create(
                move || {
                    for i in 0..4 {
                        push(&log, format!("B{i}"));
                        converse::yield_now();
                    }
                },
                0,
            )
        };
        a.awaken();
        b.awaken();
        converse::schedule_forever();
        push(&log, "returned");
        let got = log.borrow().clone();
        converse::schedule_poll();
        assert_eq!(got, ["A0", "B0", "A1", "B1", "B2", "B3", "returned"]);
    });
}

/// On a worker PE, a thread that calls `Event::wait` while another PE has
/// called `exit` returns at once, with the event not set (the early return
/// is meant for the init_returns main flow only); the code after it runs on
/// a state it never expected (a panic there would be re-raised by `run`).
/// Regression of e4f4ac3.
#[test]
fn event_wait_returns_early_on_worker_pe_during_exit() {
    let after = Arc::new(AtomicUsize::new(0));
    let a = after.clone();
    let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let code = common::within(20, move || {
        common::run(2, 2, move |_| {
            if converse::my_pe() == 1 {
                // Exit once PE 0's thread runs.
                while !started.load(Ordering::SeqCst) {
                    std::hint::spin_loop();
                }
                converse::exit(7);
            }
            let started = started.clone();
            let a = a.clone();
            Thread::create(
                move || {
                    // The exit of PE 1 lands while this thread runs.
                    started.store(true, Ordering::SeqCst);
                    while !converse::job_exiting() {
                        std::hint::spin_loop();
                    }
                    let ev = Event::new();
                    ev.wait();
                    // Never reached if wait blocks as documented.
                    a.fetch_add(1, Ordering::SeqCst);
                },
                0,
            )
            .awaken();
        })
    });
    assert_eq!(code, 7);
    assert_eq!(
        after.load(Ordering::SeqCst),
        0,
        "Event::wait returned with the event not set"
    );
}

/// Same for `sleep`: on a worker PE it returns before its time (the comment
/// in `sleep` says only the init_returns main flow gets there). Regression
/// of e4f4ac3.
#[test]
fn sleep_returns_early_on_worker_pe_during_exit() {
    let early = Arc::new(AtomicUsize::new(0));
    let e = early.clone();
    let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let code = common::within(20, move || {
        common::run(2, 2, move |_| {
            if converse::my_pe() == 1 {
                // Exit once PE 0's thread runs.
                while !started.load(Ordering::SeqCst) {
                    std::hint::spin_loop();
                }
                converse::exit(7);
            }
            let started = started.clone();
            let e = e.clone();
            Thread::create(
                move || {
                    started.store(true, Ordering::SeqCst);
                    while !converse::job_exiting() {
                        std::hint::spin_loop();
                    }
                    let start = std::time::Instant::now();
                    converse::sleep(1000.0);
                    if start.elapsed().as_millis() < 1000 {
                        e.fetch_add(1, Ordering::SeqCst);
                    }
                },
                0,
            )
            .awaken();
        })
    });
    assert_eq!(code, 7);
    assert_eq!(early.load(Ordering::SeqCst), 0, "sleep returned early");
}

/// Same root cause as `nested_run_token_hides_exit_scheduler_from_direct_yield`,
/// with `direct_streak`: the main flow
/// waits on an event; a thread sets it and then loops { awaken a helper
/// thread; schedule_poll (which runs the main flow's token and the
/// helper's, each nested `run_token` resetting the streak to 0); yield_now
/// }. Each yield finds an empty queue and "switches directly" to itself, so
/// control never gets back to the main flow's stand-in loop, which would
/// end at once (its flag is set): the main flow starves until the thread
/// gives up (a live-lock if the thread waits for the main flow).
#[test]
fn nested_run_token_resets_direct_streak_and_starves_main_flow() {
    solo(|| {
        let ev = Rc::new(Event::new());
        let stop = Rc::new(Cell::new(false));
        let iters = Rc::new(Cell::new(0u32));
        let v = Thread::create(
            || loop {
                converse::suspend();
            },
            0,
        );
        let t = {
            let (ev, stop, iters) = (ev.clone(), stop.clone(), iters.clone());
            Thread::create(
                move || {
                    ev.set();
                    while !stop.get() && iters.get() < 10_000 {
                        iters.set(iters.get() + 1);
                        v.awaken();
                        converse::schedule_poll();
                        converse::yield_now();
                    }
                },
                0,
            )
        };
        t.awaken();
        ev.wait();
        stop.set(true);
        let n = iters.get();
        converse::schedule_poll();
        assert!(
            n < 100,
            "the main flow got control back after {n} iterations"
        );
    });
}

/// The main flow of an init_returns job yields while the job is exiting:
/// the stand-in loop returns at once (exiting) but leaves the main flow's
/// token queued (`queued` stays true), so the next `yield_now` aborts the
/// process with "the main flow of PE 0 awakened twice".
#[test]
fn init_returns_main_flow_yields_twice_while_exiting() {
    let code = common::within(10, || {
        converse::Converse::new()
            .args(common::args(2, 2))
            .init_returns(|_| converse::exit(3))
            .unwrap();
        while !converse::job_exiting() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        converse::yield_now();
        converse::yield_now();
        converse::finish(0)
    });
    assert_eq!(code, 3);
}

/// Asks which PE it is on when dropped.
struct AsksPe;

impl Drop for AsksPe {
    fn drop(&mut self) {
        let _ = converse::my_pe();
    }
}

static MAIN_CTV: converse::Ctv<RefCell<Option<AsksPe>>> = converse::Ctv::new(|| RefCell::new(None));

/// The main flow's thread-private values are dropped with the `Pe`, after
/// it was uninstalled (unlike Cpv values, dropped while the PE is still
/// installed): a destructor that asks which PE it is on panics, and the
/// job re-raises that panic.
#[test]
fn main_flow_ctv_values_dropped_after_uninstall() {
    let code = common::within(10, || {
        common::run_user(1, 1, |_| {
            MAIN_CTV.with(|v| *v.borrow_mut() = Some(AsksPe));
        })
    });
    assert_eq!(code, 0);
}
