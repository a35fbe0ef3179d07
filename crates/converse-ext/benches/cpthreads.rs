//! Converse-POSIX threads: a mutex handed back and forth between two
//! pthreads of one PE, beside two plain Converse threads yielding to each
//! other in the same run.
//!
//! `cargo bench -p converse-ext --bench cpthreads`
//!
//! - `cpthread_mutex_handoff`: thread A holds the mutex, B waits for it;
//!   A unlocks (the mutex passes to B, which is awakened) and locks again
//!   (it waits); B runs, unlocks (back to A) and locks again; and so on.
//!   The figure is the time of one hand-off, a switch included.
//! - Baseline `cth_yield_switch`: two `converse::Thread`s calling
//!   `yield_now` in turn: the time of one switch.
#[path = "../../converse/benches/common/mod.rs"]
mod common;

use std::cell::Cell;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use converse::{Converse, Event, Thread};
use converse_ext::cpthreads::{
    self, PthreadAttr, PthreadMutex, cpthreads_start_main, pthread_create, pthread_join,
};

/// Nanoseconds per hand-off and per yield switch, measured in one job.
fn measure(n: u64) -> (f64, f64) {
    let out: Arc<Mutex<(f64, f64)>> = Arc::default();
    let o = Arc::clone(&out);
    cpthreads::install();
    Converse::new()
        .args(["cpthreads", "+p", "1"])
        .run(move |args| {
            let o = Arc::clone(&o);
            cpthreads_start_main(
                move |_| {
                    // Hand-offs.
                    let m = Rc::new(PthreadMutex::default());
                    let done = Rc::new(Cell::new(false));
                    m.lock().unwrap();
                    let (mb, db) = (Rc::clone(&m), Rc::clone(&done));
                    let b = pthread_create(&PthreadAttr::new(), move || {
                        loop {
                            mb.lock().unwrap();
                            if db.get() {
                                mb.unlock().unwrap();
                                return Box::new(());
                            }
                            mb.unlock().unwrap();
                        }
                    })
                    .unwrap();
                    converse::yield_now(); // B waits for the mutex
                    let t0 = Instant::now();
                    for _ in 0..n {
                        m.unlock().unwrap();
                        m.lock().unwrap();
                    }
                    let handoff = t0.elapsed().as_secs_f64() * 1e9 / (2 * n) as f64;
                    done.set(true);
                    m.unlock().unwrap();
                    pthread_join(b).unwrap();

                    // Yield switches between two plain threads.
                    // This thread waits on an event meanwhile, out of the
                    // rotation.
                    let left = Rc::new(Cell::new(2 * n));
                    let finished = Rc::new(Event::new());
                    let t0 = Instant::now();
                    for _ in 0..2 {
                        let (l, f) = (Rc::clone(&left), Rc::clone(&finished));
                        Thread::create(
                            move || {
                                while l.get() > 0 {
                                    l.set(l.get() - 1);
                                    converse::yield_now();
                                }
                                if !f.is_set() {
                                    f.set();
                                }
                            },
                            0,
                        )
                        .awaken();
                    }
                    finished.wait();
                    let switch = t0.elapsed().as_secs_f64() * 1e9 / (2 * n) as f64;
                    *o.lock().unwrap() = (handoff, switch);
                    converse::exit(0);
                },
                args,
            );
        })
        .expect("runtime flags");
    *out.lock().unwrap()
}

fn main() {
    let n = common::iterations(1_000_000);
    let (mut handoff, mut switch) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..3 {
        let (h, s) = measure(n);
        handoff = handoff.min(h);
        switch = switch.min(s);
    }
    common::line(
        "cpthread_mutex_handoff",
        handoff,
        "ns",
        "cth_yield_switch",
        switch,
        "ns",
    );
}
