//! How late `call_fn_after` fires, at the default timer resolution (5 ms)
//! and at 1 ms, on an idle PE (parked until the timer is due) and on a busy
//! one (a message loop keeps it running; it polls timers once per
//! resolution). Baseline: how late `std::thread::sleep` wakes for the same
//! delays, measured in the same run (the operating system's timer, which the
//! idle PE's timed wait also rests on).
//!
//! `cargo bench -p converse --bench timers`
//!
//! One timer is pending at a time; delays cycle through 1..=10 ms. Lateness is
//! measured from the due instant (registration + delay) to the callback.
mod common;

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use converse::{Converse, Message};

fn delay_ms(i: u64) -> u64 {
    1 + i % 10
}

/// Median and maximum of `v`, in microseconds.
fn median_max(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[v.len() - 1])
}

fn sleep_lateness(n: u64) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let d = Duration::from_millis(delay_ms(i));
            let due = Instant::now() + d;
            std::thread::sleep(d);
            Instant::now().duration_since(due).as_secs_f64() * 1e6
        })
        .collect()
}

/// Schedules `n` timers one after another on the calling PE and returns
/// their lateness in microseconds; with `busy`, a self-send loop keeps the PE
/// running meanwhile.
fn timer_lateness(n: u64, busy: bool) -> Vec<f64> {
    let late = Rc::new(RefCell::new(Vec::new()));
    let done = Rc::new(Cell::new(false));
    let spin = {
        let done = done.clone();
        converse::register_handler(move |msg: Message| {
            if !done.get() {
                converse::sync_send_and_free(converse::my_pe(), msg);
            }
        })
    };
    fn arm(i: u64, n: u64, late: Rc<RefCell<Vec<f64>>>, done: Rc<Cell<bool>>) {
        let d = Duration::from_millis(delay_ms(i));
        let due = Instant::now() + d;
        converse::call_fn_after(
            move |_| {
                late.borrow_mut()
                    .push(Instant::now().duration_since(due).as_secs_f64() * 1e6);
                if i + 1 < n {
                    arm(i + 1, n, late, done);
                } else {
                    done.set(true);
                    converse::exit_scheduler();
                }
            },
            d.as_secs_f64() * 1e3,
        );
    }
    arm(0, n, late.clone(), done.clone());
    if busy {
        converse::sync_send_and_free(converse::my_pe(), Message::new(spin, 8));
    }
    converse::schedule_forever();
    // Let the spinning message see `done` and stop.
    converse::schedule_poll();
    late.take()
}

fn main() {
    let n = common::iterations(300).max(3);
    let results: Arc<Mutex<Vec<(String, f64, f64)>>> = Arc::default();
    let out = results.clone();
    Converse::new()
        .args(["timers", "+p", "1"])
        .run_user_scheduler(move |_| {
            for (res_name, res) in [("res5ms", 0.005), ("res1ms", 0.001)] {
                converse::set_resolution(res);
                for (mode, busy) in [("idle", false), ("busy", true)] {
                    let (median, max) = median_max(timer_lateness(n, busy));
                    out.lock()
                        .unwrap()
                        .push((format!("{mode}_{res_name}"), median, max));
                }
            }
        })
        .expect("valid flags");
    let (base_median, base_max) = median_max(sleep_lateness(n));
    for (name, median, max) in results.lock().unwrap().iter() {
        common::line(
            &format!("ccd_timer_late_median_{name}"),
            *median,
            "us",
            "thread_sleep_late_median",
            base_median,
            "us",
        );
        common::line(
            &format!("ccd_timer_late_max_{name}"),
            *max,
            "us",
            "thread_sleep_late_max",
            base_max,
            "us",
        );
    }
}
