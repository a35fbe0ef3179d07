//! Conditions, periodic checks and timers (Ccd), checked against the
//! manual's chapter "Timers, Periodic Checks, and Conditions":
//!
//! - the idle edges (`PROCESSOR_BEGIN_IDLE`, `PROCESSOR_STILL_IDLE`,
//!   `PROCESSOR_BEGIN_BUSY`) in the order the scheduler raises them, and
//!   once versus keep callbacks;
//! - the periodic conditions, counted over a known time on an idle PE and on
//!   a busy one (tolerance windows are wide: these tests must pass on a
//!   loaded two-core machine);
//! - timers (`call_fn_after`): never early, in due order, on a parked PE, on
//!   a busy PE, registered from inside a timer, in user-scheduler mode;
//! - the resolution calls;
//! - the condition calls (`call_on_condition*`, `cancel_call_on_condition`,
//!   `raise_condition`) and `Condition::user`;
//! - `Condition::QUIESCENCE`;
//! - `Condition::SIGUSR1`/`SIGUSR2` after a real `kill`;
//! - the reduction stall check, which must not abort a job whose PEs still
//!   have timers or periodic callbacks pending (run in a child process,
//!   since an abort ends the whole process).
//!
//! Section 9 holds regression tests for bugs these tests found (a once
//! still-idle callback that makes work or stops the scheduler; timers on a
//! PE whose handlers are long).
//!
//! Every job runs under a hang guard. Times are `wall_timer()` seconds.
mod common;

use std::cell::{Cell, RefCell};
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{msg_u64, read_u64, run, run_user, within};
use converse::{
    Condition, Message, call_fn_after, call_on_condition, call_on_condition_keep,
    cancel_call_on_condition, my_pe, raise_condition, wall_timer,
};

/// Float slack for comparing wall times (the timer's `Instant`s are turned
/// into `f64` seconds).
const EPS: f64 = 1e-6;

/// Runs a normal-mode job on `pes` PEs (one node) under a hang guard and
/// returns its exit code.
fn job(pes: usize, start: impl Fn(&[String]) + Send + Sync + 'static) -> i32 {
    within(60, move || run(pes, pes, start))
}

/// Runs a user-scheduler-mode job on `pes` PEs (one node) under a hang guard.
fn user_job(pes: usize, start: impl Fn(&[String]) + Send + Sync + 'static) -> i32 {
    within(60, move || run_user(pes, pes, start))
}

/// A self-sending message storm that keeps the calling PE busy until `stop`
/// is set. Registers one handler (call it at the same point on every PE).
struct Storm {
    stop: Rc<Cell<bool>>,
    runs: Rc<Cell<u64>>,
}

impl Storm {
    fn register() -> (Storm, usize) {
        let stop = Rc::new(Cell::new(false));
        let runs = Rc::new(Cell::new(0u64));
        let (s, r) = (stop.clone(), runs.clone());
        let h = converse::register_handler(move |msg: Message| {
            r.set(r.get() + 1);
            if !s.get() {
                // The message goes back to its own PE: the PE always has
                // work and never idles.
                converse::sync_send_and_free(my_pe(), msg);
            }
        });
        (Storm { stop, runs }, h)
    }

    fn start(h: usize) {
        converse::sync_send_and_free(my_pe(), Message::new(h, 8));
    }
}

// ---------------------------------------------------------------------------
// 1. Idle edges
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ev {
    BeginIdle,
    StillIdle,
    BeginBusy,
    Handler(u64),
}

/// Registers keep callbacks on the three idle conditions that push their
/// event to `log`.
fn log_idle_edges(log: &Arc<Mutex<Vec<Ev>>>) {
    for (cond, ev) in [
        (Condition::PROCESSOR_BEGIN_IDLE, Ev::BeginIdle),
        (Condition::PROCESSOR_STILL_IDLE, Ev::StillIdle),
        (Condition::PROCESSOR_BEGIN_BUSY, Ev::BeginBusy),
    ] {
        let log = log.clone();
        call_on_condition_keep(cond, move |_| log.lock().unwrap().push(ev));
    }
}

/// Splits an event log into idle periods: each is the number of
/// `StillIdle`s between a `BeginIdle` and the `BeginBusy` that ends it,
/// followed by the handler that ran. Panics if the log is not of the shape
/// (BeginIdle StillIdle* BeginBusy Handler)*.
fn idle_periods(log: &[Ev]) -> Vec<(usize, u64)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < log.len() {
        assert_eq!(log[i], Ev::BeginIdle, "at {i}: log {log:?}");
        i += 1;
        let mut still = 0;
        while log.get(i) == Some(&Ev::StillIdle) {
            still += 1;
            i += 1;
        }
        assert_eq!(log.get(i), Some(&Ev::BeginBusy), "at {i}: log {log:?}");
        i += 1;
        match log.get(i) {
            Some(&Ev::Handler(tag)) => out.push((still, tag)),
            other => {
                panic!("at {i}: expected the handler after BeginBusy, got {other:?}: log {log:?}")
            }
        }
        i += 1;
    }
    out
}

/// PE 0 idles twice for about 60 ms, each time until a message from PE 1
/// arrives: BeginIdle when it first finds nothing, StillIdle repeatedly
/// while it waits, BeginBusy when the message arrives, before its handler.
/// Once callbacks on the edges run once; keep callbacks every time.
#[test]
fn idle_edges_frame_each_idle_period() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let once = Arc::new(Mutex::new([0usize; 3]));
    let (l, o) = (log.clone(), once.clone());
    let code = job(2, move |_| {
        let l2 = l.clone();
        let h = converse::register_handler(move |msg: Message| {
            let tag = read_u64(&msg, 0);
            l2.lock().unwrap().push(Ev::Handler(tag));
            if tag == 2 {
                converse::exit_scheduler();
            }
        });
        let go = converse::register_handler(move |_msg: Message| {
            // On PE 1: let PE 0 idle a while before each message.
            for tag in 1..=2 {
                std::thread::sleep(Duration::from_millis(60));
                converse::sync_send(0, &msg_u64(h, &[tag]));
            }
            converse::exit_scheduler();
        });
        if my_pe() == 0 {
            log_idle_edges(&l);
            for (i, cond) in [
                Condition::PROCESSOR_BEGIN_IDLE,
                Condition::PROCESSOR_STILL_IDLE,
                Condition::PROCESSOR_BEGIN_BUSY,
            ]
            .into_iter()
            .enumerate()
            {
                let o = o.clone();
                call_on_condition(cond, move |_| o.lock().unwrap()[i] += 1);
            }
            converse::sync_send(1, &Message::new(go, 0));
        }
    });
    assert_eq!(code, 0);
    let log = log.lock().unwrap().clone();
    let periods = idle_periods(&log);
    assert_eq!(
        periods.iter().map(|p| p.1).collect::<Vec<_>>(),
        [1, 2],
        "two idle periods, each ended by one message: {log:?}"
    );
    for (still, tag) in &periods {
        // ~60 ms of idleness at the default 5 ms resolution: about a dozen.
        assert!(
            *still >= 2,
            "before message {tag}: only {still} StillIdle in ~60 ms of idleness: {log:?}"
        );
    }
    assert_eq!(*once.lock().unwrap(), [1, 1, 1], "once callbacks ran once");
}

/// `schedule_poll` has no idle edges (as in Converse); `schedule_count`,
/// which waits, does. A message already waiting does not make the PE idle.
#[test]
fn poll_has_no_idle_edges_but_waiting_schedulers_do() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    let code = user_job(1, move |_| {
        let l2 = l.clone();
        let h = converse::register_handler(move |msg: Message| {
            l2.lock().unwrap().push(Ev::Handler(read_u64(&msg, 0)));
        });
        log_idle_edges(&l);
        let take = || std::mem::take(&mut *l.lock().unwrap());
        converse::schedule_poll();
        assert_eq!(take(), [], "an empty poll raises nothing");
        converse::sync_send(0, &msg_u64(h, &[1]));
        converse::schedule_poll();
        assert_eq!(take(), [Ev::Handler(1)]);
        converse::sync_send(0, &msg_u64(h, &[2]));
        assert_eq!(converse::schedule_count(1), 0);
        assert_eq!(take(), [Ev::Handler(2)], "work was ready: never idle");
        // Nothing ready: idle until a timer sends the message.
        call_fn_after(move |_| converse::sync_send(0, &msg_u64(h, &[3])), 30.0);
        assert_eq!(converse::schedule_count(1), 0);
        let got = take();
        let periods = idle_periods(&got);
        assert_eq!(periods.len(), 1, "{got:?}");
        assert_eq!(periods[0].1, 3, "{got:?}");
        assert!(periods[0].0 >= 1, "{got:?}");
    });
    assert_eq!(code, 0);
}

// ---------------------------------------------------------------------------
// 2. Periodic conditions
// ---------------------------------------------------------------------------

#[derive(Debug, Default, Clone)]
struct PeriodicReport {
    /// Raises of PERIODIC, PERIODIC_10MS, PERIODIC_100MS, PERIODIC_10S.
    counts: [usize; 4],
    registered: f64,
    first_10ms: Option<f64>,
    first_100ms: Option<f64>,
    elapsed_ms: f64,
    storm_runs: u64,
    begin_idle: usize,
}

/// Counts the periodic conditions on a one-PE job for `window_ms`, with the
/// PE idle or kept busy by a self-send storm.
fn periodic_counts(busy: bool, window_ms: f64) -> PeriodicReport {
    let out = Arc::new(Mutex::new(None));
    let o = out.clone();
    let code = job(1, move |_| {
        let (storm, h) = Storm::register();
        let counts = Rc::new(RefCell::new(PeriodicReport::default()));
        let begin_idle = Rc::new(Cell::new(0usize));
        {
            let b = begin_idle.clone();
            call_on_condition_keep(Condition::PROCESSOR_BEGIN_IDLE, move |_| b.set(b.get() + 1));
        }
        if busy {
            Storm::start(h);
        }
        counts.borrow_mut().registered = wall_timer();
        for (i, cond) in [
            Condition::PERIODIC,
            Condition::PERIODIC_10MS,
            Condition::PERIODIC_100MS,
            Condition::PERIODIC_10S,
        ]
        .into_iter()
        .enumerate()
        {
            let c = counts.clone();
            call_on_condition_keep(cond, move |t| {
                let mut c = c.borrow_mut();
                c.counts[i] += 1;
                if i == 1 && c.first_10ms.is_none() {
                    c.first_10ms = Some(t);
                }
                if i == 2 && c.first_100ms.is_none() {
                    c.first_100ms = Some(t);
                }
            });
        }
        let o = o.clone();
        call_fn_after(
            move |t| {
                storm.stop.set(true);
                let mut report = counts.borrow().clone();
                report.elapsed_ms = (t - report.registered) * 1000.0;
                report.storm_runs = storm.runs.get();
                report.begin_idle = begin_idle.get();
                *o.lock().unwrap() = Some(report);
                converse::exit_scheduler();
            },
            window_ms,
        );
    });
    assert_eq!(code, 0);
    let report = out.lock().unwrap().take().expect("the end timer ran");
    eprintln!("periodic (busy: {busy}): {report:?}");
    report
}

/// Checks a periodic report of a `window_ms` run: about one raise per period,
/// never more than the elapsed time allows, none before the first period.
fn check_periodic(r: &PeriodicReport, window_ms: f64) {
    let [c1, c10, c100, c10s] = r.counts;
    assert!(
        r.elapsed_ms >= window_ms - 1e-3,
        "the end timer fired early: {r:?}"
    );
    // Fixed rate from registration: at most elapsed / period raises.
    let most = |period_ms: f64| (r.elapsed_ms / period_ms).floor() as usize + 1;
    let expect10 = (window_ms / 10.0) as usize; // 50 for 500 ms
    assert!(
        (expect10 * 7 / 10..=most(10.0)).contains(&c10),
        "PERIODIC_10MS raised {c10} times in {:.1} ms (expected about {expect10}): {r:?}",
        r.elapsed_ms
    );
    let expect100 = (window_ms / 100.0) as usize;
    assert!(
        (expect100 * 6 / 10..=most(100.0)).contains(&c100),
        "PERIODIC_100MS raised {c100} times in {:.1} ms (expected about {expect100}): {r:?}",
        r.elapsed_ms
    );
    assert!(
        (10..=most(1.0)).contains(&c1),
        "PERIODIC raised {c1} times in {:.1} ms: {r:?}",
        r.elapsed_ms
    );
    assert_eq!(c10s, 0, "PERIODIC_10S raised within {window_ms} ms");
    let first10 = r.first_10ms.expect("PERIODIC_10MS ran");
    assert!(
        first10 >= r.registered + 0.010 - EPS,
        "PERIODIC_10MS first raised {:.3} ms after registration",
        (first10 - r.registered) * 1e3
    );
    let first100 = r.first_100ms.expect("PERIODIC_100MS ran");
    assert!(
        first100 >= r.registered + 0.100 - EPS,
        "PERIODIC_100MS first raised {:.3} ms after registration",
        (first100 - r.registered) * 1e3
    );
}

#[test]
fn periodic_conditions_on_an_idle_pe() {
    let r = periodic_counts(false, 500.0);
    check_periodic(&r, 500.0);
    assert_eq!(r.storm_runs, 0);
    assert_eq!(r.begin_idle, 1, "the PE idled once, throughout");
}

#[test]
fn periodic_conditions_on_a_busy_pe() {
    let r = periodic_counts(true, 500.0);
    check_periodic(&r, 500.0);
    assert_eq!(r.begin_idle, 0, "the PE was busy throughout: {r:?}");
    assert!(r.storm_runs > 1000, "the storm ran: {r:?}");
}

/// A periodic callback, once cancelled, is not called again; a once
/// callback on a periodic condition runs once.
#[test]
fn periodic_cancel_and_once() {
    let out = Arc::new(Mutex::new((0usize, 0usize, 0usize)));
    let o = out.clone();
    let code = job(1, move |_| {
        let keep = Rc::new(Cell::new(0usize));
        let once = Rc::new(Cell::new(0usize));
        let other = Rc::new(Cell::new(0usize));
        let idx = Rc::new(Cell::new(usize::MAX));
        {
            let (k, i) = (keep.clone(), idx.clone());
            idx.set(call_on_condition_keep(
                Condition::PERIODIC_10MS,
                move |_| {
                    k.set(k.get() + 1);
                    if k.get() == 3 {
                        cancel_call_on_condition(Condition::PERIODIC_10MS, i.get());
                    }
                },
            ));
        }
        {
            let n = once.clone();
            call_on_condition(Condition::PERIODIC_10MS, move |_| n.set(n.get() + 1));
        }
        {
            let n = other.clone();
            let i = call_on_condition_keep(Condition::PERIODIC, move |_| n.set(n.get() + 1));
            cancel_call_on_condition(Condition::PERIODIC, i);
        }
        let o = o.clone();
        call_fn_after(
            move |_| {
                *o.lock().unwrap() = (keep.get(), once.get(), other.get());
                converse::exit_scheduler();
            },
            200.0,
        );
    });
    assert_eq!(code, 0);
    assert_eq!(*out.lock().unwrap(), (3, 1, 0));
}

// ---------------------------------------------------------------------------
// 3. Timers
// ---------------------------------------------------------------------------

/// One timer's record.
#[derive(Clone, Debug)]
struct Fired {
    pe: usize,
    id: usize,
    /// The delay it was given (ms), and the one it counts as (ms).
    asked_ms: f64,
    delay_ms: f64,
    /// `wall_timer()` just before and just after `call_fn_after`.
    reg_lo: f64,
    reg_hi: f64,
    /// The callback's argument and `wall_timer()` inside it.
    arg: f64,
    at: f64,
}

/// The delays the timer tests use, in a scrambled order (ms).
const DELAYS: [f64; 20] = [
    25.0, 0.0, 10.0, 3.0, 1.0, 0.0, 25.0, 1.0, 3.0, 10.0, 2.5, 0.0, 7.0, 1.0, 10.0, 3.0, 25.0, 0.5,
    15.0, 0.0,
];

/// Registers timers with `delays` on the calling PE. Each appends its record
/// to `log`; the last to fire calls `done`.
fn register_timers(
    delays: &[f64],
    log: &Arc<Mutex<Vec<Fired>>>,
    done: impl Fn() + Clone + 'static,
) -> Rc<Cell<usize>> {
    let left = Rc::new(Cell::new(delays.len()));
    for (id, &asked) in delays.iter().enumerate() {
        let delay_ms = if asked.is_finite() && asked > 0.0 {
            asked
        } else {
            0.0
        };
        let (log, left, done) = (log.clone(), left.clone(), done.clone());
        let pe = my_pe();
        let reg_lo = wall_timer();
        let slot = Rc::new(Cell::new(0.0));
        let s = slot.clone();
        call_fn_after(
            move |arg| {
                let at = wall_timer();
                assert_eq!(my_pe(), pe, "timer {id} ran on the wrong PE");
                log.lock().unwrap().push(Fired {
                    pe,
                    id,
                    asked_ms: asked,
                    delay_ms,
                    reg_lo,
                    reg_hi: s.get(),
                    arg,
                    at,
                });
                left.set(left.get() - 1);
                if left.get() == 0 {
                    done();
                }
            },
            asked,
        );
        slot.set(wall_timer());
    }
    left
}

/// Checks the records of one PE's timers (in firing order): each fired once,
/// never early, and in due order.
fn check_timers(fired: &[Fired], count: usize) -> f64 {
    let mut ids: Vec<usize> = fired.iter().map(|f| f.id).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..count).collect::<Vec<_>>(), "each fired once");
    let mut latest = 0.0f64;
    for f in fired {
        let due = f.reg_lo + f.delay_ms / 1000.0;
        assert!(
            f.arg >= due - EPS && f.at >= due - EPS,
            "timer {} (asked {} ms) fired {:.4} ms early: {f:?}",
            f.id,
            f.asked_ms,
            (due - f.arg) * 1e3
        );
        assert!(f.arg <= f.at + EPS, "argument after the call: {f:?}");
        latest = latest.max(f.arg - (f.reg_hi + f.delay_ms / 1000.0));
    }
    for pair in fired.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        // `a` ran first, so it cannot have been due strictly after `b`.
        let a_earliest_due = a.reg_lo + a.delay_ms / 1000.0;
        let b_latest_due = b.reg_hi + b.delay_ms / 1000.0;
        assert!(
            a_earliest_due <= b_latest_due + EPS,
            "timer {} (due {:.4}) ran before timer {} (due by {:.4}): {fired:#?}",
            a.id,
            a_earliest_due,
            b.id,
            b_latest_due
        );
        assert!(b.arg >= a.arg - EPS, "polls go forward in time");
    }
    latest
}

/// Timers on parked PEs: no message at all is sent; every PE registers
/// timers (and one that never fires) and stops its scheduler when they have
/// all fired, so only the timers can wake it.
#[test]
fn timers_fire_on_parked_idle_pes_never_early_and_in_order() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let never = Arc::new(AtomicUsize::new(0));
    let (l, nv) = (log.clone(), never.clone());
    let code = job(2, move |_| {
        let nv = nv.clone();
        call_fn_after(
            move |_| {
                nv.fetch_add(1, SeqCst);
            },
            f64::INFINITY,
        );
        let mut delays = DELAYS.to_vec();
        delays.extend([-5.0, f64::NAN, f64::NEG_INFINITY]);
        if my_pe() == 1 {
            delays.reverse();
        }
        register_timers(&delays, &l, converse::exit_scheduler);
    });
    assert_eq!(code, 0);
    assert_eq!(never.load(SeqCst), 0, "a timer of infinite delay fired");
    let log = log.lock().unwrap();
    for pe in 0..2 {
        let mine: Vec<Fired> = log.iter().filter(|f| f.pe == pe).cloned().collect();
        let late = check_timers(&mine, DELAYS.len() + 3);
        // A parked PE wakes at its deadline; a second would mean it waited
        // for something else.
        assert!(late < 1.0, "PE {pe}: a timer fired {late:.3} s late");
    }
}

/// Timers on a PE kept busy by a self-send storm (it never idles): they fire
/// between messages, never early, in due order.
#[test]
fn timers_fire_on_a_busy_pe() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let out = Arc::new(Mutex::new((0u64, 0u64, 0usize)));
    let (l, o) = (log.clone(), out.clone());
    let code = job(1, move |_| {
        let (storm, h) = Storm::register();
        let storm = Rc::new(storm);
        let begin_idle = Rc::new(Cell::new(0usize));
        {
            let b = begin_idle.clone();
            call_on_condition_keep(Condition::PROCESSOR_BEGIN_IDLE, move |_| b.set(b.get() + 1));
        }
        Storm::start(h);
        let runs_at_first = Rc::new(Cell::new(None));
        {
            let (s, r) = (storm.clone(), runs_at_first.clone());
            call_fn_after(move |_| r.set(Some(s.runs.get())), 0.0);
        }
        let (s, o) = (storm.clone(), o.clone());
        register_timers(&DELAYS, &l, move || {
            s.stop.set(true);
            *o.lock().unwrap() = (
                runs_at_first.get().expect("the 0 ms timer ran first"),
                s.runs.get(),
                begin_idle.get(),
            );
            converse::exit_scheduler();
        });
    });
    assert_eq!(code, 0);
    let (first, last, idle) = *out.lock().unwrap();
    assert_eq!(idle, 0, "the PE idled: it was meant to be busy");
    assert!(
        last > first,
        "no message ran between the first and last timers ({first}, {last})"
    );
    let log = log.lock().unwrap();
    let late = check_timers(&log, DELAYS.len());
    assert!(late < 1.0, "a timer fired {late:.3} s late");
}

/// A timer registered from inside a timer callback (a chain, with 0 ms
/// links too) counts its delay from its own registration and runs in a
/// later poll.
#[test]
fn timers_registered_from_timer_callbacks() {
    const CHAIN: [f64; 8] = [0.0, 1.0, 3.0, 10.0, 25.0, 0.0, 2.0, 5.0];
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    let code = job(1, move |_| {
        fn link(i: usize, log: Arc<Mutex<Vec<Fired>>>) {
            let delay = CHAIN[i];
            let reg_lo = wall_timer();
            call_fn_after(
                move |arg| {
                    let at = wall_timer();
                    log.lock().unwrap().push(Fired {
                        pe: my_pe(),
                        id: i,
                        asked_ms: delay,
                        delay_ms: delay,
                        reg_lo,
                        reg_hi: reg_lo,
                        arg,
                        at,
                    });
                    if i + 1 < CHAIN.len() {
                        link(i + 1, log);
                    } else {
                        converse::exit_scheduler();
                    }
                },
                delay,
            );
        }
        link(0, l.clone());
    });
    assert_eq!(code, 0);
    let log = log.lock().unwrap();
    assert_eq!(
        log.iter().map(|f| f.id).collect::<Vec<_>>(),
        (0..CHAIN.len()).collect::<Vec<_>>()
    );
    for (i, f) in log.iter().enumerate() {
        assert!(
            f.arg >= f.reg_lo + f.delay_ms / 1000.0 - EPS,
            "link {i} fired early: {f:?}"
        );
        if i > 0 {
            // Registered inside the previous callback, after its poll began.
            assert!(f.reg_lo >= log[i - 1].at - EPS);
            assert!(f.arg > log[i - 1].arg, "link {i} ran in its parent's poll");
        }
    }
    let total: f64 = CHAIN.iter().sum();
    assert!(log.last().unwrap().arg - log[0].reg_lo >= total / 1000.0 - EPS);
}

/// Timers fire on several PEs of a job, each on its own PE, while the PEs
/// exchange messages.
#[test]
fn timers_on_every_pe_of_a_talking_job() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    let pes = 3;
    let code = job(pes, move |_| {
        let pong_runs = Rc::new(Cell::new(0u64));
        let stop = Rc::new(Cell::new(false));
        let (pr, st) = (pong_runs.clone(), stop.clone());
        let ping = converse::register_handler(move |msg: Message| {
            pr.set(pr.get() + 1);
            if !st.get() {
                let next = (my_pe() + 1) % converse::num_pes();
                converse::sync_send_and_free(next, msg);
            }
        });
        converse::sync_send_and_free((my_pe() + 1) % pes, Message::new(ping, 0));
        let stop2 = stop.clone();
        register_timers(&DELAYS, &l, move || {
            stop2.set(true);
            converse::exit_scheduler();
        });
    });
    assert_eq!(code, 0);
    let log = log.lock().unwrap();
    for pe in 0..pes {
        let mine: Vec<Fired> = log.iter().filter(|f| f.pe == pe).cloned().collect();
        check_timers(&mine, DELAYS.len());
    }
}

/// In user-scheduler mode, `schedule_poll` runs due timers and only those.
#[test]
fn timers_fire_from_schedule_poll() {
    let code = user_job(1, |_| {
        let fired = Rc::new(Cell::new(None));
        let f = fired.clone();
        let reg = wall_timer();
        call_fn_after(move |t| f.set(Some(t)), 300.0);
        converse::schedule_poll();
        assert_eq!(fired.get(), None, "a 300 ms timer fired at once");
        let start = Instant::now();
        while fired.get().is_none() {
            assert!(start.elapsed() < Duration::from_secs(20), "never fired");
            converse::schedule_poll();
            std::thread::sleep(Duration::from_micros(200));
        }
        assert!(fired.get().unwrap() >= reg + 0.3 - EPS);
    });
    assert_eq!(code, 0);
}

// ---------------------------------------------------------------------------
// 4. Resolution
// ---------------------------------------------------------------------------

fn approx(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[test]
fn resolution_calls() {
    let checked = Arc::new(AtomicUsize::new(0));
    let c = checked.clone();
    let code = user_job(2, move |_| {
        use converse::ccd::resolution;
        use converse::{increase_resolution, reset_resolution, set_resolution};
        let pe = my_pe();
        assert!(approx(resolution(), 0.005), "PE {pe}: default");
        assert!(approx(set_resolution(0.001), 0.005));
        assert!(approx(resolution(), 0.001));
        // Longer than the default: clamped to it.
        assert!(approx(set_resolution(0.02), 0.001));
        assert!(approx(resolution(), 0.005));
        assert!(approx(set_resolution(0.002), 0.005));
        assert!(approx(reset_resolution(), 0.002));
        assert!(approx(resolution(), 0.005));
        assert!(approx(reset_resolution(), 0.005));
        // Increase only ever shortens; returns the resolution before.
        assert!(approx(increase_resolution(0.01), 0.005));
        assert!(approx(resolution(), 0.005));
        assert!(approx(increase_resolution(0.001), 0.005));
        assert!(approx(resolution(), 0.001));
        assert!(approx(increase_resolution(0.003), 0.001));
        assert!(approx(resolution(), 0.001));
        assert!(approx(increase_resolution(0.0005), 0.001));
        assert!(approx(resolution(), 0.0005));
        // Arbitrarily short is allowed.
        assert!(approx(set_resolution(1e-6), 0.0005));
        assert!(approx(resolution(), 1e-6));
        let old = set_resolution(0.0);
        assert!(approx(old, 1e-6));
        assert!(resolution() > 0.0 && resolution() <= 1e-6);
        let tiny = resolution();
        assert!(approx(reset_resolution(), tiny));
        assert!(approx(resolution(), 0.005));
        c.fetch_add(1, SeqCst);
    });
    assert_eq!(code, 0);
    assert_eq!(checked.load(SeqCst), 2);
}

/// With a short resolution, timers still never fire early, on a busy PE.
#[test]
fn short_resolution_timers_on_a_busy_pe() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    let code = job(1, move |_| {
        converse::set_resolution(0.0005);
        let (storm, h) = Storm::register();
        Storm::start(h);
        register_timers(&DELAYS, &l, move || {
            storm.stop.set(true);
            converse::exit_scheduler();
        });
    });
    assert_eq!(code, 0);
    check_timers(&log.lock().unwrap(), DELAYS.len());
}

// ---------------------------------------------------------------------------
// 5. The condition calls
// ---------------------------------------------------------------------------

type Log = Rc<RefCell<Vec<&'static str>>>;

fn push(log: &Log, what: &'static str) -> impl FnMut(f64) + 'static {
    let log = log.clone();
    move |_| log.borrow_mut().push(what)
}

fn take(log: &Log) -> Vec<&'static str> {
    std::mem::take(&mut *log.borrow_mut())
}

/// Runs `body` on a one-PE user-scheduler job (the condition calls are
/// synchronous, no scheduler needed).
fn on_one_pe(body: impl Fn() + Send + Sync + 'static) {
    assert_eq!(user_job(1, move |_| body()), 0);
}

#[test]
fn indices_are_distinct_and_never_reused() {
    on_one_pe(|| {
        let conds = [
            Condition::user(0),
            Condition::user(1),
            Condition::USER_MAX,
            Condition::PROCESSOR_BEGIN_IDLE,
            Condition::PERIODIC_1DAY,
        ];
        let mut seen = std::collections::HashSet::new();
        let mut registered = Vec::new();
        for round in 0..20 {
            for &cond in &conds {
                let idx = if round % 2 == 0 {
                    call_on_condition(cond, |_| {})
                } else {
                    call_on_condition_keep(cond, |_| {})
                };
                assert!(seen.insert(idx), "index {idx} handed out twice");
                registered.push((cond, idx));
            }
        }
        for (cond, idx) in registered {
            cancel_call_on_condition(cond, idx);
        }
        for &cond in &conds {
            let idx = call_on_condition(cond, |_| {});
            assert!(seen.insert(idx), "index {idx} reused after cancel");
            cancel_call_on_condition(cond, idx);
        }
    });
}

/// A raise runs the callbacks registered before it: every once callback,
/// oldest first, then every kept one, oldest first, however the two kinds
/// were interleaved when registered (Charm++'s order: `CcdRaiseCondition`
/// walks its one-shot list, then its keep list). Once callbacks are dropped
/// after their call; kept ones stay.
#[test]
fn raise_runs_once_callbacks_then_kept_ones_each_oldest_first() {
    on_one_pe(|| {
        let log = Log::default();
        let u = Condition::user(5);
        raise_condition(u); // nothing registered: nothing happens
        call_on_condition_keep(u, push(&log, "k1"));
        call_on_condition(u, push(&log, "o2"));
        call_on_condition_keep(u, push(&log, "k3"));
        call_on_condition(u, push(&log, "o4"));
        raise_condition(u);
        assert_eq!(take(&log), ["o2", "o4", "k1", "k3"]);
        raise_condition(u);
        assert_eq!(take(&log), ["k1", "k3"]);
        call_on_condition(u, push(&log, "o5"));
        call_on_condition_keep(u, push(&log, "k6"));
        call_on_condition(u, push(&log, "o7"));
        raise_condition(u);
        assert_eq!(take(&log), ["o5", "o7", "k1", "k3", "k6"]);
        raise_condition(u);
        assert_eq!(take(&log), ["k1", "k3", "k6"]);
        // Other conditions are untouched.
        raise_condition(Condition::user(6));
        raise_condition(Condition::USER_MAX);
        assert_eq!(take(&log), [] as [&str; 0]);
    });
}

/// The same order for a condition the runtime raises (a periodic one),
/// and where we differ from Charm++: a kept callback that a once callback
/// registers during the raise first runs in the next raise (Charm++ walks
/// its keep list after the one-shot list, so it would run it at once).
#[test]
fn runtime_raises_use_the_same_order_and_later_registrations_wait() {
    let out = Arc::new(Mutex::new(Vec::new()));
    let o = out.clone();
    let code = job(1, move |_| {
        let log = Log::default();
        let raises = Cell::new(0u32);
        let p = Condition::PERIODIC_10MS;
        let index = Rc::new(Cell::new(usize::MAX));
        let (log1, i, o) = (log.clone(), index.clone(), o.clone());
        index.set(call_on_condition_keep(p, move |_| {
            log1.borrow_mut().push("k1");
            raises.set(raises.get() + 1);
            if raises.get() == 2 {
                cancel_call_on_condition(p, i.get());
                *o.lock().unwrap() = take(&log1);
                converse::exit_scheduler();
            }
        }));
        {
            let log2 = log.clone();
            call_on_condition(p, move |_| {
                log2.borrow_mut().push("o2");
                call_on_condition_keep(p, push(&log2, "k-new"));
            });
        }
        call_on_condition(p, push(&log, "o3"));
    });
    assert_eq!(code, 0);
    // First raise: o2, o3, then k1 (not k-new); second: k1, then k-new,
    // which has not run yet when k1 ends the job.
    assert_eq!(*out.lock().unwrap(), ["o2", "o3", "k1", "k1"]);
}

/// Callbacks get the wall time of the raise.
#[test]
fn callbacks_get_the_wall_time() {
    on_one_pe(|| {
        let got = Rc::new(Cell::new(-1.0));
        let g = got.clone();
        call_on_condition(Condition::user(0), move |t| g.set(t));
        let before = wall_timer();
        raise_condition(Condition::user(0));
        let after = wall_timer();
        assert!(
            got.get() >= before - EPS && got.get() <= after + EPS,
            "{before} <= {} <= {after}",
            got.get()
        );
    });
}

#[test]
fn cancel_removes_once_and_keep_callbacks() {
    on_one_pe(|| {
        let log = Log::default();
        let u = Condition::user(1);
        let a = call_on_condition_keep(u, push(&log, "a"));
        let b = call_on_condition(u, push(&log, "b"));
        call_on_condition_keep(u, push(&log, "c"));
        let d = call_on_condition(u, push(&log, "d"));
        cancel_call_on_condition(u, a);
        cancel_call_on_condition(u, b);
        raise_condition(u);
        // The once callback first (see the order test above).
        assert_eq!(take(&log), ["d", "c"]);
        // Cancelling again, or an index that already ran, does nothing.
        cancel_call_on_condition(u, a);
        cancel_call_on_condition(u, d);
        raise_condition(u);
        assert_eq!(take(&log), ["c"]);
        // Cancelling under the wrong condition does nothing.
        let v = Condition::user(2);
        let e = call_on_condition_keep(v, push(&log, "e"));
        cancel_call_on_condition(u, e);
        raise_condition(v);
        assert_eq!(take(&log), ["e"]);
        cancel_call_on_condition(v, e);
        raise_condition(v);
        assert_eq!(take(&log), [] as [&str; 0]);
    });
}

/// Cancelling from inside a callback (the manual forbids it; the runtime
/// allows it): a callback cancelled during the raise before its turn is
/// skipped (a kept one cancelled by a once callback, which runs before
/// every kept one, or by an earlier kept one); a kept one cancelled after
/// it ran is not kept; a callback may cancel itself.
#[test]
fn cancel_from_inside_a_callback() {
    on_one_pe(|| {
        let log = Log::default();
        let u = Condition::user(3);
        let ids = Rc::new(RefCell::new(Vec::<usize>::new()));
        // Registration order, by position in `ids`: a b c o d e f.
        {
            let (log, ids2) = (log.clone(), ids.clone());
            // a: cancels b (later in the run order) and itself.
            let a = call_on_condition_keep(u, move |_| {
                log.borrow_mut().push("a");
                let ids = ids2.borrow();
                cancel_call_on_condition(u, ids[1]);
                cancel_call_on_condition(u, ids[0]);
            });
            ids.borrow_mut().push(a);
        }
        ids.borrow_mut()
            .push(call_on_condition_keep(u, push(&log, "b")));
        ids.borrow_mut()
            .push(call_on_condition_keep(u, push(&log, "c")));
        {
            let (log, ids2) = (log.clone(), ids.clone());
            // o (once, so first of all): cancels f, registered last.
            let o = call_on_condition(u, move |_| {
                log.borrow_mut().push("o");
                cancel_call_on_condition(u, ids2.borrow()[6]);
            });
            ids.borrow_mut().push(o);
        }
        {
            let (log, ids2) = (log.clone(), ids.clone());
            // d: cancels c, which already ran in this raise.
            let d = call_on_condition_keep(u, move |_| {
                log.borrow_mut().push("d");
                cancel_call_on_condition(u, ids2.borrow()[2]);
            });
            ids.borrow_mut().push(d);
        }
        ids.borrow_mut()
            .push(call_on_condition_keep(u, push(&log, "e")));
        ids.borrow_mut()
            .push(call_on_condition_keep(u, push(&log, "f")));
        raise_condition(u);
        assert_eq!(take(&log), ["o", "a", "c", "d", "e"]);
        raise_condition(u);
        assert_eq!(take(&log), ["d", "e"]);
    });
}

/// Callbacks registered while a condition is being raised wait for its next
/// raise; a callback may register on and raise another condition, whose
/// prior callbacks (its own registration included) run at once.
#[test]
fn registrations_during_a_raise_wait_for_the_next() {
    on_one_pe(|| {
        let log = Log::default();
        let u = Condition::user(10);
        let v = Condition::user(11);
        let first = Rc::new(Cell::new(true));
        {
            let (log, first) = (log.clone(), first.clone());
            call_on_condition_keep(u, move |_| {
                log.borrow_mut().push("a");
                if first.replace(false) {
                    call_on_condition(u, push(&log, "new-once"));
                    call_on_condition_keep(u, push(&log, "new-keep"));
                    call_on_condition(v, push(&log, "v"));
                    raise_condition(v);
                    log.borrow_mut().push("a-end");
                }
            });
        }
        call_on_condition(u, push(&log, "b"));
        raise_condition(u);
        // The once callback b first, then the kept a.
        assert_eq!(take(&log), ["b", "a", "v", "a-end"]);
        raise_condition(u);
        assert_eq!(take(&log), ["new-once", "a", "new-keep"]);
        raise_condition(u);
        assert_eq!(take(&log), ["a", "new-keep"]);
        raise_condition(v);
        assert_eq!(take(&log), [] as [&str; 0]);
    });
}

/// A callback that raises its own condition does not recurse forever (and
/// does not trip a borrow).
#[test]
fn raising_the_same_condition_from_its_callback_terminates() {
    on_one_pe(|| {
        let u = Condition::user(20);
        let runs = Rc::new(Cell::new(0usize));
        let r = runs.clone();
        call_on_condition_keep(u, move |_| {
            r.set(r.get() + 1);
            if r.get() < 100 {
                raise_condition(u);
            }
        });
        raise_condition(u);
        let first = runs.get();
        assert!((1..=2).contains(&first), "ran {first} times in one raise");
        raise_condition(u);
        assert!(runs.get() > first, "still registered");
    });
}

/// Conditions are per PE: raising on one PE runs only its callbacks.
#[test]
fn conditions_are_per_pe() {
    let counts = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let c = counts.clone();
    let code = user_job(2, move |_| {
        let c = c.clone();
        let pe = my_pe();
        call_on_condition_keep(Condition::user(7), move |_| {
            assert_eq!(my_pe(), pe);
            c[pe].fetch_add(1, SeqCst);
        });
        if pe == 0 {
            raise_condition(Condition::user(7));
            raise_condition(Condition::user(7));
        }
    });
    assert_eq!(code, 0);
    assert_eq!(counts[0].load(SeqCst), 2);
    assert_eq!(counts[1].load(SeqCst), 0);
}

#[test]
fn user_conditions_and_numbers() {
    let max_k = Condition::USER_MAX.number() - Condition::USER.number();
    assert_eq!(Condition::user(0), Condition::USER);
    assert_eq!(Condition::user(max_k), Condition::USER_MAX);
    for k in 0..=max_k {
        assert_eq!(Condition::user(k).number(), Condition::USER.number() + k);
    }
    for n in 0..=Condition::USER_MAX.number() {
        assert_eq!(Condition::from_number(n).unwrap().number(), n);
    }
    assert_eq!(
        Condition::from_number(Condition::USER_MAX.number() + 1),
        None
    );
    assert_eq!(Condition::from_number(usize::MAX), None);
    let system = [
        Condition::PROCESSOR_BEGIN_IDLE,
        Condition::PROCESSOR_STILL_IDLE,
        Condition::PROCESSOR_BEGIN_BUSY,
        Condition::PERIODIC,
        Condition::PERIODIC_10MS,
        Condition::PERIODIC_100MS,
        Condition::PERIODIC_1S,
        Condition::PERIODIC_10S,
        Condition::PERIODIC_1MIN,
        Condition::PERIODIC_10MIN,
        Condition::PERIODIC_1HOUR,
        Condition::PERIODIC_12HOUR,
        Condition::PERIODIC_1DAY,
        Condition::QUIESCENCE,
        Condition::SIGUSR1,
        Condition::SIGUSR2,
    ];
    let mut numbers: Vec<usize> = system.iter().map(|c| c.number()).collect();
    numbers.sort_unstable();
    numbers.dedup();
    assert_eq!(
        numbers.len(),
        system.len(),
        "system conditions are distinct"
    );
    assert!(
        system.iter().all(|c| *c < Condition::USER),
        "user conditions come after every system one"
    );
}

#[test]
#[should_panic(expected = "past CcdUSERMAX")]
fn user_condition_past_max_panics() {
    Condition::user(Condition::USER_MAX.number() - Condition::USER.number() + 1);
}

#[test]
fn user_condition_far_past_max_panics() {
    for k in [
        Condition::USER_MAX.number() - Condition::USER.number() + 1,
        10_000,
        usize::MAX / 2,
    ] {
        let r = std::panic::catch_unwind(|| Condition::user(k));
        assert!(r.is_err(), "Condition::user({k}) did not panic");
    }
}

// ---------------------------------------------------------------------------
// 6. QUIESCENCE
// ---------------------------------------------------------------------------

/// Hops of the tokens of the quiescence storm.
const TOKENS: [u64; 5] = [300, 1, 150, 77, 400];

fn storm_total() -> u64 {
    TOKENS.iter().map(|h| h + 1).sum()
}

/// Registers the storm's handler: a token with `h` hops left goes to the
/// next PE with `h - 1`; every run counts in `runs`.
fn register_token(runs: &Arc<AtomicU64>) -> usize {
    let runs = runs.clone();
    converse::register_handler(move |msg: Message| {
        runs.fetch_add(1, SeqCst);
        let left = read_u64(&msg, 0);
        if left > 0 {
            let next = (my_pe() + 1) % converse::num_pes();
            converse::sync_send_and_free(next, msg_u64(msg.handler(), &[left - 1]));
        }
    })
}

/// After a token storm PE 0 starts, once callbacks on QUIESCENCE (on PE 0
/// and PE 2) run exactly once each, on their PE, after every storm message
/// was handled.
#[test]
fn quiescence_condition_runs_once_after_the_storm() {
    let runs = Arc::new(AtomicU64::new(0));
    let fired = Arc::new([
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    ]);
    let both = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (r, f, s) = (runs.clone(), fired.clone(), seen.clone());
    let code = job(3, move |_| {
        let token = register_token(&r);
        let pe = my_pe();
        if pe == 0 {
            for hops in TOKENS {
                converse::sync_send_and_free(1, msg_u64(token, &[hops]));
            }
        }
        if pe == 0 || pe == 2 {
            let (r, f, s, b) = (r.clone(), f.clone(), s.clone(), both.clone());
            call_on_condition(Condition::QUIESCENCE, move |_| {
                assert_eq!(my_pe(), pe);
                s.lock().unwrap().push((pe, r.load(SeqCst)));
                f[pe].fetch_add(1, SeqCst);
                if b.fetch_add(1, SeqCst) + 1 == 2 {
                    // Both ran: leave a grace period for a wrong second call.
                    call_fn_after(|_| converse::exit(0), 200.0);
                }
            });
        }
    });
    assert_eq!(code, 0);
    let fired: Vec<usize> = fired.iter().map(|x| x.load(SeqCst)).collect();
    assert_eq!(fired, [1, 0, 1]);
    for (pe, at) in seen.lock().unwrap().iter() {
        assert_eq!(*at, storm_total(), "PE {pe}: raised before the storm ended");
    }
    assert_eq!(runs.load(SeqCst), storm_total());
}

/// A keep callback on QUIESCENCE runs once per detection and does not start
/// detections by itself (no endless loop); a new registration starts a new
/// detection, which runs both (the once callback first). A callback
/// registered from inside the raise starts the next detection.
#[test]
fn quiescence_keep_callback_does_not_loop() {
    let runs = Arc::new(AtomicU64::new(0));
    let events = Arc::new(Mutex::new(Vec::<(&'static str, u64)>::new()));
    let (r, ev) = (runs.clone(), events.clone());
    let code = job(2, move |_| {
        let token = register_token(&r);
        if my_pe() != 0 {
            return;
        }
        for hops in TOKENS {
            converse::sync_send_and_free(1, msg_u64(token, &[hops]));
        }
        let keep_runs = Rc::new(Cell::new(0usize));
        {
            let (k, ev, r) = (keep_runs.clone(), ev.clone(), r.clone());
            call_on_condition_keep(Condition::QUIESCENCE, move |_| {
                k.set(k.get() + 1);
                ev.lock().unwrap().push(("keep", r.load(SeqCst)));
            });
        }
        let ev = ev.clone();
        let r = r.clone();
        // Well after the first detection (the fifth raise of a periodic
        // condition, not a timer: a pending timer would hold the detection
        // until it fired): the keep callback ran once.
        let raises = Cell::new(0);
        let index = Rc::new(Cell::new(usize::MAX));
        let i = index.clone();
        index.set(call_on_condition_keep(
            Condition::PERIODIC_100MS,
            move |_| {
                raises.set(raises.get() + 1);
                if raises.get() < 5 {
                    return;
                }
                cancel_call_on_condition(Condition::PERIODIC_100MS, i.get());
                ev.lock().unwrap().push(("check", keep_runs.get() as u64));
                let (ev, r) = (ev.clone(), r.clone());
                call_on_condition(Condition::QUIESCENCE, move |_| {
                    ev.lock().unwrap().push(("once", r.load(SeqCst)));
                    let ev = ev.clone();
                    // Registered during the raise: the next detection.
                    call_on_condition(Condition::QUIESCENCE, move |_| {
                        ev.lock().unwrap().push(("inner", 0));
                        let ev = ev.clone();
                        call_fn_after(
                            move |_| {
                                ev.lock().unwrap().push(("end", 0));
                                converse::exit(0);
                            },
                            300.0,
                        );
                    });
                });
            },
        ));
    });
    assert_eq!(code, 0);
    let total = storm_total();
    assert_eq!(
        *events.lock().unwrap(),
        [
            ("keep", total),
            ("check", 1),
            // Once callbacks run before kept ones.
            ("once", total),
            ("keep", total),
            ("inner", 0),
            ("keep", total),
            ("end", 0),
        ]
    );
}

// ---------------------------------------------------------------------------
// 7. Signals
// ---------------------------------------------------------------------------

fn send_signal(sig: libc::c_int) {
    // SAFETY: kill(2) on our own process with a signal whose handler the
    // runtime installed when the callbacks were registered.
    let rc = unsafe { libc::kill(libc::getpid(), sig) };
    assert_eq!(rc, 0, "kill: {}", std::io::Error::last_os_error());
}

/// What the signal test saw.
#[derive(Debug, Default)]
struct SignalLog {
    /// (event, wall time): "kill1", "usr1-pe0", "usr1-pe1", "once1",
    /// "kill2", "usr2", ...
    events: Vec<(&'static str, f64)>,
}

/// SIGUSR1 and SIGUSR2 sent to the process with kill(2): the SIGUSR1
/// callbacks run on the schedulers of both PEs that registered them, soon;
/// the SIGUSR2 callback does not run for SIGUSR1, nor SIGUSR1's for
/// SIGUSR2; a once callback runs for the first signal only.
///
/// The only test in this file that sends signals (they go to the whole
/// process); the handlers are installed before the first one is sent.
#[test]
fn signal_conditions_after_kill() {
    let log = Arc::new(Mutex::new(SignalLog::default()));
    let l = log.clone();
    let code = job(2, move |_| {
        let l = l.clone();
        let note = move |what: &'static str| l.lock().unwrap().events.push((what, wall_timer()));
        // On PE 0: PE 1 has registered / PE 1's SIGUSR1 callback ran.
        let stage = Rc::new(Cell::new(0u32));
        let usr1_pe1 = Rc::new(Cell::new(0u32));
        let usr1_pe0 = Rc::new(Cell::new(0u32));
        let usr2 = Rc::new(Cell::new(0u32));
        // Moves the protocol on (PE 0), after any event.
        let advance: Rc<dyn Fn()> = {
            let (stage, u1a, u1b, u2, note) = (
                stage.clone(),
                usr1_pe0.clone(),
                usr1_pe1.clone(),
                usr2.clone(),
                note.clone(),
            );
            Rc::new(move || match stage.get() {
                1 if u1a.get() == 1 && u1b.get() == 1 => {
                    assert_eq!(u2.get(), 0, "SIGUSR2 callback ran for SIGUSR1");
                    stage.set(2);
                    note("kill2");
                    send_signal(libc::SIGUSR2);
                }
                2 if u2.get() == 1 => {
                    assert_eq!(u1a.get(), 1, "SIGUSR1 callback ran for SIGUSR2");
                    stage.set(3);
                    note("kill1");
                    send_signal(libc::SIGUSR1);
                }
                3 if u1a.get() == 2 && u1b.get() == 2 => {
                    stage.set(4);
                    let note = note.clone();
                    call_fn_after(
                        move |_| {
                            note("end");
                            converse::exit(0);
                        },
                        200.0,
                    );
                }
                _ => {}
            })
        };
        let usr1_from_pe1 = {
            let (u1b, advance) = (usr1_pe1.clone(), advance.clone());
            converse::register_handler(move |_msg: Message| {
                u1b.set(u1b.get() + 1);
                advance();
            })
        };
        let ready = {
            let (stage, note) = (stage.clone(), note.clone());
            converse::register_handler(move |_msg: Message| {
                stage.set(1);
                note("kill1");
                send_signal(libc::SIGUSR1);
            })
        };
        if my_pe() == 1 {
            let note = note.clone();
            call_on_condition_keep(Condition::SIGUSR1, move |_| {
                assert_eq!(my_pe(), 1);
                note("usr1-pe1");
                converse::sync_send(0, &Message::new(usr1_from_pe1, 0));
            });
            converse::sync_send(0, &Message::new(ready, 0));
            return;
        }
        {
            // Registered first, so it runs before the keep callback moves
            // the protocol on.
            let note = note.clone();
            call_on_condition(Condition::SIGUSR1, move |_| note("once1"));
        }
        {
            let (u, note, advance) = (usr1_pe0.clone(), note.clone(), advance.clone());
            call_on_condition_keep(Condition::SIGUSR1, move |_| {
                assert_eq!(my_pe(), 0);
                note("usr1-pe0");
                u.set(u.get() + 1);
                advance();
            });
        }
        {
            let (u, note, advance) = (usr2.clone(), note.clone(), advance.clone());
            call_on_condition_keep(Condition::SIGUSR2, move |_| {
                note("usr2");
                u.set(u.get() + 1);
                advance();
            });
        }
    });
    assert_eq!(code, 0);
    let events = log.lock().unwrap().events.clone();
    let count = |w: &str| events.iter().filter(|e| e.0 == w).count();
    assert_eq!(count("usr1-pe0"), 2, "{events:?}");
    assert_eq!(count("usr1-pe1"), 2, "{events:?}");
    assert_eq!(count("once1"), 1, "{events:?}");
    assert_eq!(count("usr2"), 1, "{events:?}");
    // Each callback runs within a second of the kill before it.
    let mut last_kill = None;
    for &(what, t) in &events {
        if what.starts_with("kill") {
            last_kill = Some((what, t));
        } else if what != "end" {
            let (kill, tk) = last_kill.expect("a callback before any kill");
            let want = if what == "usr2" { "kill2" } else { "kill1" };
            assert_eq!(kill, want, "{what} after {kill}: {events:?}");
            assert!(
                t >= tk - EPS && t - tk < 1.0,
                "{what} {:.3} s after {kill}",
                t - tk
            );
        }
    }
}

// ---------------------------------------------------------------------------
// 8. Reduction stall check vs pending timers (child processes)
// ---------------------------------------------------------------------------

/// Environment variable naming the scenario the child process runs.
const SCENARIO_VAR: &str = "CONVERSE_CCD_SCENARIO";
const CHILD_TEST: &str = "child_entry";
const STARTED: &str = "ccd scenario starting:";
const RETURNED: &str = "ccd scenario returned:";
const REDUCTION_RESULT: &str = "reduction result";
const CHILD_TIMEOUT: Duration = Duration::from_secs(60);

struct Outcome {
    code: Option<i32>,
    stderr: String,
    elapsed: Duration,
}

/// Runs scenario `name` in a child process (this test binary, filtered to
/// [`child_entry`]).
fn run_scenario(name: &str) -> Outcome {
    let exe = std::env::current_exe().expect("path of the test binary");
    let mut child = Command::new(exe)
        .args(["--exact", CHILD_TEST, "--nocapture", "--test-threads=1"])
        .env(SCENARIO_VAR, name)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the child test process");
    let mut err = child.stderr.take().expect("piped stderr");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("poll the child") {
            break status;
        }
        if start.elapsed() >= CHILD_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "scenario `{name}` hung; stderr:\n{}",
                reader.join().unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Outcome {
        code: status.code(),
        stderr: reader.join().unwrap_or_default(),
        elapsed: start.elapsed(),
    }
}

fn print_result_and_exit(msg: Message) {
    let sum: u64 = converse::decode_struct_result(&msg).expect("a u64 result");
    eprintln!("{REDUCTION_RESULT} {sum}");
    converse::exit(0);
}

fn add(local: u64, children: Vec<u64>) -> u64 {
    local + children.iter().sum::<u64>()
}

fn scenario_job(start: impl Fn(&[String]) + Send + Sync + 'static) -> i32 {
    run(2, 2, start)
}

/// The scenarios; each returns the job's exit code.
fn scenario(name: &str) -> i32 {
    match name {
        // PE 1 contributes from a timer 1.5 s on; PE 0 waits in the
        // reduction, idle (its stall check comes after 1 s).
        "contribute_from_timer" => scenario_job(|_| {
            let result = converse::register_handler(print_result_and_exit);
            if my_pe() == 0 {
                converse::reduce_struct(2u64, add, result);
            } else {
                call_fn_after(move |_| converse::reduce_struct(1u64, add, result), 1500.0);
            }
        }),
        // The root (PE 0) contributes from a timer; PE 1's contribution
        // waits on PE 0.
        "root_contributes_from_timer" => scenario_job(|_| {
            let result = converse::register_handler(print_result_and_exit);
            if my_pe() == 0 {
                call_fn_after(move |_| converse::reduce_struct(2u64, add, result), 1500.0);
            } else {
                converse::reduce_struct(1u64, add, result);
            }
        }),
        // PE 1 contributes from a periodic callback, at its 15th raise.
        "contribute_from_periodic" => scenario_job(|_| {
            let result = converse::register_handler(print_result_and_exit);
            if my_pe() == 0 {
                converse::reduce_struct(2u64, add, result);
            } else {
                let raises = Rc::new(Cell::new(0u32));
                let idx = Rc::new(Cell::new(usize::MAX));
                let i = idx.clone();
                idx.set(call_on_condition_keep(
                    Condition::PERIODIC_100MS,
                    move |_| {
                        raises.set(raises.get() + 1);
                        if raises.get() == 15 {
                            cancel_call_on_condition(Condition::PERIODIC_100MS, i.get());
                            converse::reduce_struct(1u64, add, result);
                        }
                    },
                ));
            }
        }),
        // The control: PE 1 has a timer that does not contribute; once it
        // has fired nothing can complete the reduction, and the stall check
        // must still find that out.
        "timer_without_contribution" => scenario_job(|_| {
            let result = converse::register_handler(print_result_and_exit);
            if my_pe() == 0 {
                converse::reduce_struct(2u64, add, result);
            } else {
                call_fn_after(|_| eprintln!("idle timer fired"), 1500.0);
            }
        }),
        other => panic!("unknown scenario {other}"),
    }
}

/// The child side: runs the scenario named in the environment, if any, and
/// exits the process with its exit code.
#[test]
fn child_entry() {
    let Ok(name) = std::env::var(SCENARIO_VAR) else {
        return;
    };
    eprintln!("{STARTED} {name}");
    let code = scenario(&name);
    eprintln!("{RETURNED} {name} returned {code}");
    let _ = std::io::stderr().flush();
    std::process::exit(code)
}

fn expect_completed(name: &str) {
    let out = run_scenario(name);
    let report = format!(
        "scenario `{name}`: exit {:?} after {:.2?}; stderr:\n{}",
        out.code, out.elapsed, out.stderr
    );
    assert!(out.stderr.contains(STARTED), "{report}");
    assert!(!out.stderr.contains("can never complete"), "{report}");
    assert_eq!(out.code, Some(0), "{report}");
    assert!(
        out.stderr.contains(&format!("{REDUCTION_RESULT} 3")),
        "{report}"
    );
    assert!(out.elapsed >= Duration::from_millis(1500), "{report}");
}

/// A reduction that completes from a timer (past the 1 s stall check) is not
/// taken for a stalled one.
#[test]
fn reduction_waits_for_a_pending_timer() {
    expect_completed("contribute_from_timer");
}

#[test]
fn reduction_waits_for_a_pending_timer_on_the_root() {
    expect_completed("root_contributes_from_timer");
}

#[test]
fn reduction_waits_for_periodic_callbacks() {
    expect_completed("contribute_from_periodic");
}

/// Pending timers postpone the stall check's verdict, not forever: once the
/// timer has fired and nothing else can happen, the stuck reduction is
/// reported.
#[test]
fn reduction_stall_is_still_found_after_the_timer_fired() {
    let out = run_scenario("timer_without_contribution");
    let report = format!(
        "exit {:?} after {:.2?}; stderr:\n{}",
        out.code, out.elapsed, out.stderr
    );
    assert_eq!(out.code, Some(converse::ABORT_EXIT_CODE), "{report}");
    assert!(out.stderr.contains("can never complete"), "{report}");
    assert!(out.stderr.contains("idle timer fired"), "{report}");
    assert!(!out.stderr.contains(RETURNED), "{report}");
}

// ---------------------------------------------------------------------------
// 9. Regression tests for runtime bugs these tests found (now fixed)
// ---------------------------------------------------------------------------

/// What a `STILL_IDLE` callback does in the [`still_idle_once`] jobs.
#[derive(Clone, Copy)]
enum Act {
    Enqueue,
    SendToSelf,
    ExitScheduler,
}

/// A one-PE job whose only `PROCESSOR_STILL_IDLE` callback, a once one,
/// makes work (or stops the scheduler). The scheduler must notice before it
/// parks; it must end within a few seconds.
fn still_idle_once(act: Act) {
    let code = within(10, move || {
        run(1, 1, move |_| {
            let h = converse::register_handler(|_m: Message| converse::exit_scheduler());
            call_on_condition(Condition::PROCESSOR_STILL_IDLE, move |_| match act {
                Act::Enqueue => converse::enqueue(Message::new(h, 0)),
                Act::SendToSelf => converse::sync_send(0, &Message::new(h, 0)),
                Act::ExitScheduler => converse::exit_scheduler(),
            });
        })
    });
    assert_eq!(code, 0);
}

/// The same from a `BEGIN_IDLE` callback works (the scheduler looks again
/// after raising it): the control for the ignored tests below.
#[test]
fn begin_idle_once_callback_may_make_work_or_stop() {
    for act in [Act::Enqueue, Act::SendToSelf, Act::ExitScheduler] {
        let code = within(10, move || {
            run(1, 1, move |_| {
                let h = converse::register_handler(|_m: Message| converse::exit_scheduler());
                call_on_condition(Condition::PROCESSOR_BEGIN_IDLE, move |_| match act {
                    Act::Enqueue => converse::enqueue(Message::new(h, 0)),
                    Act::SendToSelf => converse::sync_send(0, &Message::new(h, 0)),
                    Act::ExitScheduler => converse::exit_scheduler(),
                });
            })
        });
        assert_eq!(code, 0);
    }
}

#[test]
fn still_idle_once_callback_that_enqueues() {
    still_idle_once(Act::Enqueue);
}

#[test]
fn still_idle_once_callback_that_sends_to_self() {
    still_idle_once(Act::SendToSelf);
}

#[test]
fn still_idle_once_callback_that_exits_the_scheduler() {
    still_idle_once(Act::ExitScheduler);
}

/// Work made by a keep `STILL_IDLE` callback waits a whole timer resolution
/// (the PE parks until its next STILL_IDLE deadline before it looks).
#[test]
fn still_idle_keep_callback_work_runs_promptly() {
    let out = Arc::new(Mutex::new(Vec::new()));
    let o = out.clone();
    let code = job(1, move |_| {
        let o2 = o.clone();
        let h = converse::register_handler(move |m: Message| {
            let t0 = f64::from_le_bytes(m.payload()[..8].try_into().unwrap());
            let mut o = o2.lock().unwrap();
            o.push((wall_timer() - t0) * 1e3);
            if o.len() == 21 {
                converse::exit_scheduler();
            }
        });
        call_on_condition_keep(Condition::PROCESSOR_STILL_IDLE, move |_| {
            converse::enqueue(Message::from_payload(h, &wall_timer().to_le_bytes()));
        });
    });
    assert_eq!(code, 0);
    let mut lat = out.lock().unwrap().clone();
    lat.sort_by(f64::total_cmp);
    let median = lat[lat.len() / 2];
    assert!(
        median < 2.0,
        "median delay {median:.3} ms from a STILL_IDLE callback's enqueue to its handler: {lat:?}"
    );
}

/// A busy PE whose handlers take 20 ms each gives its scheduler control
/// every 20 ms, but it reads the clock only every `CLOCK_EVERY` (16)
/// deliveries, so timers and periodic conditions wait 16 handlers (320 ms)
/// instead of one. The manual: a timer runs "the first time the scheduler
/// gets control after" its delay, polled at a 5 ms resolution. (Charm++
/// adapts the number of deliveries it skips to the resolution.)
#[test]
fn timers_and_periodics_keep_up_with_slow_handlers() {
    let out = Arc::new(Mutex::new((0usize, Vec::new(), 0u64)));
    let o = out.clone();
    let code = job(1, move |_| {
        let stop = Rc::new(Cell::new(false));
        let runs = Rc::new(Cell::new(0u64));
        let (s, r) = (stop.clone(), runs.clone());
        let h = converse::register_handler(move |msg: Message| {
            r.set(r.get() + 1);
            let t = Instant::now();
            while t.elapsed() < Duration::from_millis(20) {
                std::hint::spin_loop();
            }
            if !s.get() {
                converse::sync_send_and_free(0, msg);
            }
        });
        converse::sync_send_and_free(0, Message::new(h, 0));
        let count = Rc::new(Cell::new(0usize));
        let c = count.clone();
        call_on_condition_keep(Condition::PERIODIC_10MS, move |_| c.set(c.get() + 1));
        for d in [30.0, 100.0] {
            let o = o.clone();
            let reg = wall_timer();
            call_fn_after(
                move |t| o.lock().unwrap().1.push((d, (t - reg) * 1e3 - d)),
                d,
            );
        }
        let o = o.clone();
        call_fn_after(
            move |_| {
                stop.set(true);
                let mut g = o.lock().unwrap();
                g.0 = count.get();
                g.2 = runs.get();
                converse::exit_scheduler();
            },
            600.0,
        );
    });
    assert_eq!(code, 0);
    let (periodic, late, runs) = out.lock().unwrap().clone();
    for (d, late_ms) in &late {
        // Due during one 20 ms handler: run after it (+ resolution, + slack).
        assert!(
            *late_ms < 150.0,
            "a {d} ms timer fired {late_ms:.1} ms late with 20 ms handlers ({runs} ran)"
        );
    }
    // The scheduler got control ~30 times in 600 ms, each time after more
    // than 10 ms: about one raise per handler.
    assert!(
        periodic >= 10,
        "PERIODIC_10MS raised {periodic} times in 600 ms of 20 ms handlers ({runs} ran)"
    );
}
