//! Timers, periodic checks and conditions on every PE: a periodic condition
//! counts ticks, a chain of `call_fn_after` timers checks that none fires
//! early, idle edges are counted, and a user condition ends the run.
//!
//! `cargo run --release --example timers -- +p 2 [seconds]` prints, per PE,
//! how many 100 ms ticks it saw (about 10 per second), how late its timers
//! fired, and how often it went idle, then `timers: ok`.
use std::cell::Cell;
use std::rc::Rc;

use converse::{Condition, Converse, cmi_printf};

/// Timers in the chain, each `STEP_MS` after the previous.
const STEPS: u32 = 20;
const STEP_MS: f64 = 50.0;

fn main() -> std::process::ExitCode {
    let status = Converse::new()
        .default_pes(2)
        .main(|args| {
            let seconds: f64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1.0);
            let ticks = Rc::new(Cell::new(0u32));
            let idle = Rc::new(Cell::new(0u32));
            let worst_late_ms = Rc::new(Cell::new(0.0f64));

            let t = ticks.clone();
            let periodic = converse::call_on_condition_keep(Condition::PERIODIC_100MS, move |_| {
                t.set(t.get() + 1)
            });
            let i = idle.clone();
            let idle_edges =
                converse::call_on_condition_keep(Condition::PROCESSOR_BEGIN_IDLE, move |_| {
                    i.set(i.get() + 1)
                });

            // The user condition ends the run on this PE.
            let done = Condition::user(0);
            let (t, i, w) = (ticks.clone(), idle.clone(), worst_late_ms.clone());
            converse::call_on_condition(done, move |_| {
                converse::cancel_call_on_condition(Condition::PERIODIC_100MS, periodic);
                converse::cancel_call_on_condition(Condition::PROCESSOR_BEGIN_IDLE, idle_edges);
                cmi_printf!(
                    "PE {}: {} ticks of PERIODIC_100MS in {seconds} s, {STEPS} timers at most {:.2} ms late (never early), {} idle periods\n",
                    converse::my_pe(),
                    t.get(),
                    w.get(),
                    i.get()
                );
                converse::exit_scheduler();
            });

            // A chain of timers, each registered by the previous one.
            fn step(k: u32, due: f64, worst: Rc<Cell<f64>>, end_after_ms: f64) {
                converse::call_fn_after(
                    move |now| {
                        let late_ms = (now - due) * 1e3;
                        assert!(late_ms >= -1e-3, "timer {k} fired {late_ms} ms early");
                        worst.set(worst.get().max(late_ms));
                        if k + 1 < STEPS {
                            step(k + 1, converse::wall_timer() + STEP_MS / 1e3, worst, end_after_ms);
                        } else {
                            // The end: after the rest of the run time.
                            converse::call_fn_after(
                                |_| converse::raise_condition(Condition::user(0)),
                                end_after_ms,
                            );
                        }
                    },
                    STEP_MS,
                );
            }
            let rest_ms = (seconds * 1e3 - f64::from(STEPS) * STEP_MS).max(0.0);
            step(0, converse::wall_timer() + STEP_MS / 1e3, worst_late_ms, rest_ms);
        })
        ;
    if status == std::process::ExitCode::SUCCESS {
        println!("timers: ok");
    }
    status
}
