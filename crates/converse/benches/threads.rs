//! User-level thread costs, each beside the bare corosensei operation
//! underneath, measured in the same run.
//!
//! `cargo bench -p converse --bench threads`
//!
//! - `cth_yield_switch`: two threads on one PE yield to each other through
//!   the scheduler (`yield_now`: awaken self into the priority queue, suspend,
//!   the scheduler takes the other's token and resumes it); time per switch.
//!   Baseline: one resume/suspend pair of two bare coroutines.
//! - `cth_create_finish`: create an empty thread, awaken it, let the scheduler
//!   run it to its end (its stack goes back to the pool); time per thread.
//!   Baseline: a bare coroutine created on a reused stack, run to its end,
//!   stack taken back.
mod common;

use std::cell::Cell;
use std::hint::black_box;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use converse::{Converse, Thread};
use corosensei::stack::DefaultStack;
use corosensei::{Coroutine, CoroutineResult};

/// Nanoseconds per resume/suspend pair of two bare coroutines taking turns.
fn bare_switch_ns(n: u64) -> f64 {
    let body = |y: &corosensei::Yielder<(), ()>, ()| loop {
        y.suspend(());
    };
    let mut a: Coroutine<(), (), ()> = Coroutine::new(body);
    let mut b: Coroutine<(), (), ()> = Coroutine::new(body);
    let t0 = Instant::now();
    for _ in 0..n {
        black_box(a.resume(()));
        black_box(b.resume(()));
    }
    t0.elapsed().as_nanos() as f64 / (2 * n) as f64
}

/// Nanoseconds per bare coroutine created on a reused stack and run to its
/// end.
fn bare_create_ns(n: u64) -> f64 {
    let mut stack = Some(DefaultStack::new(converse::cth::DEFAULT_STACK_SIZE).expect("stack"));
    let t0 = Instant::now();
    for i in 0..n {
        let mut co: Coroutine<(), (), u64, DefaultStack> =
            Coroutine::with_stack(stack.take().expect("returned"), move |_, ()| black_box(i));
        match co.resume(()) {
            CoroutineResult::Return(v) => {
                black_box(v);
            }
            CoroutineResult::Yield(()) => unreachable!("the body does not yield"),
        }
        stack = Some(co.into_stack());
    }
    t0.elapsed().as_nanos() as f64 / n as f64
}

fn main() {
    common::pin_to_cpu(0);
    let n = common::iterations(5_000_000);
    let figures: Arc<Mutex<(f64, f64)>> = Arc::default();
    let out = figures.clone();
    Converse::new()
        .args(["threads", "+p", "1"])
        .run_user_scheduler(move |_| {
            let switch = common::best_of(3, || {
                let finished = Rc::new(Cell::new(0));
                for _ in 0..2 {
                    let f = finished.clone();
                    Thread::create(
                        move || {
                            for _ in 0..n {
                                converse::yield_now();
                            }
                            f.set(f.get() + 1);
                        },
                        0,
                    )
                    .awaken();
                }
                let t0 = Instant::now();
                while finished.get() < 2 {
                    converse::schedule_poll();
                }
                t0.elapsed().as_nanos() as f64 / (2 * n) as f64
            });
            let create = common::best_of(3, || {
                let ran = Rc::new(Cell::new(0u64));
                let t0 = Instant::now();
                for _ in 0..n {
                    let r = ran.clone();
                    Thread::create(move || r.set(r.get() + 1), 0).awaken();
                    converse::schedule_poll();
                }
                assert_eq!(ran.get(), n, "every thread ran");
                t0.elapsed().as_nanos() as f64 / n as f64
            });
            *out.lock().unwrap() = (switch, create);
        })
        .expect("valid flags");
    let (switch, create) = *figures.lock().unwrap();
    let bare_switch = common::best_of(3, || bare_switch_ns(n));
    let bare_create = common::best_of(3, || bare_create_ns(n));
    common::line(
        "cth_yield_switch",
        switch,
        "ns",
        "corosensei_switch",
        bare_switch,
        "ns",
    );
    common::line(
        "cth_create_finish",
        create,
        "ns",
        "corosensei_create_run",
        bare_create,
        "ns",
    );
}
