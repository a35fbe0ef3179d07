//! The regression guard of the C path: the operations of the side-by-side
//! table with Charm++ (docs/benchmarks.md), written in C the way Charm++'s
//! own `benchmarks/converse` programs write them (`commbench_c.c`, built
//! with `convcc`), each printed beside the same operation written with the
//! Rust API in this process (the in-run baseline) and the ratio, C over
//! Rust: the C layer's cost over the core's. Two PEs in one process,
//! pinned to CPUs 0 and 1; each figure is the best of three loops after an
//! untimed tenth, and the C program and the Rust job alternate three times
//! (each side's best is printed).
//!
//! - `c_send_free_self_0B`, `c_send_free_self_256B`: a handler gives its
//!   message back to its own PE (`CmiSyncSendAndFree`), the scheduler runs
//!   it again; ns per message. Baseline: `sync_send_and_free`.
//! - `c_enqueue_self`: the same through `CsdEnqueue`. Baseline: `enqueue`.
//! - `c_yield`: `CthYield` of the main thread with nothing else to run.
//!   Baseline: `yield_now`.
//! - `c_node_barrier_2pe`: one `CmiNodeBarrier` of both PEs. Baseline:
//!   `node_barrier`.
//! - `c_forward_1MiB`, `c_forward_8MiB`: one way of a ping-pong whose
//!   handlers send on the message they received (`CmiSyncSendAndFree`: a
//!   pointer moves, whatever the size); µs. Baseline: the same in Rust.
//!
//! `cargo bench -p converse-capi --bench commbench_c`;
//! `CONVERSE_BENCH_QUICK` runs 100 times fewer operations,
//! `CONVERSE_BENCH_ONLY=NAME` prints only the figures whose names contain
//! `NAME`.
mod c_program;
#[path = "../../converse/benches/common/mod.rs"]
mod common;

use std::cell::Cell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use converse::{Converse, Message};

const RUNS: usize = 3;
/// Payload sizes of the self-send rows.
const SELF_SIZES: [usize; 2] = [0, 256];
/// Payload sizes of the forwarding rows.
const FORWARD_SIZES: [usize; 2] = [1 << 20, 8 << 20];

/// Seconds of `f(n)` at its best of [`RUNS`], after one untimed tenth.
fn best_of(n: u64, mut f: impl FnMut(u64) -> f64) -> f64 {
    f(n / 10 + 1);
    common::best_of(RUNS, || f(n))
}

/// Seconds for `n` calls of `f`.
fn seconds_of(n: u64, mut f: impl FnMut()) -> f64 {
    let t0 = Instant::now();
    for _ in 0..n {
        f();
    }
    t0.elapsed().as_secs_f64()
}

/// The Rust side's figures, by the C program's names.
fn run_rust(ops: u64, round_trips: u64) -> HashMap<String, f64> {
    let results: Arc<Mutex<HashMap<String, f64>>> = Arc::default();
    let out = results.clone();
    let code = Converse::new()
        .args(["commbench-c", "+p", "2"])
        .run(move |_| {
            let me = converse::my_pe();
            common::pin_to_cpu(me);
            let left = Rc::new(Cell::new(0u64));
            let l = left.clone();
            let self_h = converse::register_handler(move |msg: Message| {
                l.set(l.get() - 1);
                if l.get() == 0 {
                    return converse::exit_scheduler();
                }
                converse::sync_send_and_free(converse::my_pe(), msg);
            });
            let l = left.clone();
            let enqueue_h = converse::register_handler(move |msg: Message| {
                l.set(l.get() - 1);
                if l.get() == 0 {
                    return converse::exit_scheduler();
                }
                converse::enqueue(msg);
            });
            // As the C program's: PE 1 sends back; a header-only message
            // stops it. PE 0 counts round trips.
            let l = left.clone();
            let forward_h = Rc::new(Cell::new(0usize));
            let fh = forward_h.clone();
            forward_h.set(converse::register_handler(move |msg: Message| {
                if converse::my_pe() == 1 {
                    if msg.payload().is_empty() {
                        return converse::exit_scheduler();
                    }
                    return converse::sync_send_and_free(0, msg);
                }
                l.set(l.get() - 1);
                if l.get() == 0 {
                    converse::sync_send_and_free(1, Message::new(fh.get(), 0));
                    return converse::exit_scheduler();
                }
                converse::sync_send_and_free(1, msg);
            }));
            let put = |name: String, v: f64| {
                if me == 0 {
                    out.lock().unwrap().insert(name, v);
                }
            };

            let barriers = ops / 10;
            let t = best_of(barriers, |n| seconds_of(n, converse::node_barrier));
            put("node_barrier_ns".into(), t * 1e9 / barriers as f64);
            if me != 0 {
                for _ in 0..FORWARD_SIZES.len() * (RUNS + 1) {
                    converse::scheduler(-1);
                }
                return;
            }
            let self_loop = |handler: usize, size: usize, enqueue: bool, n: u64| {
                left.set(n);
                let t0 = Instant::now();
                let m = Message::new(handler, size);
                if enqueue {
                    converse::enqueue(m);
                } else {
                    converse::sync_send_and_free(0, m);
                }
                converse::scheduler(-1);
                t0.elapsed().as_secs_f64()
            };
            for size in SELF_SIZES {
                let t = best_of(ops, |n| self_loop(self_h, size, false, n));
                put(format!("send_free_self_{size}B_ns"), t * 1e9 / ops as f64);
            }
            let t = best_of(ops, |n| self_loop(enqueue_h, 0, true, n));
            put("enqueue_self_ns".into(), t * 1e9 / ops as f64);
            let t = best_of(ops, |n| seconds_of(n, converse::yield_now));
            put("yield_ns".into(), t * 1e9 / ops as f64);
            for size in FORWARD_SIZES {
                let t = best_of(round_trips, |n| {
                    left.set(n);
                    let t0 = Instant::now();
                    converse::sync_send_and_free(1, Message::new(forward_h.get(), size));
                    converse::scheduler(-1);
                    t0.elapsed().as_secs_f64()
                });
                put(
                    format!("forward_{}MiB_us", size >> 20),
                    t * 1e6 / (2 * round_trips) as f64,
                );
            }
            converse::exit(0);
        })
        .expect("the Rust job starts");
    assert_eq!(code, 0);
    results.lock().unwrap().clone()
}

fn main() {
    let ops = common::iterations(1_000_000);
    let round_trips = common::iterations(200_000).max(20);
    let program = c_program::build("commbench_c.c", "commbench_c");
    // The figures, by name: (best of C, best of Rust).
    let mut best: HashMap<String, (f64, f64)> = HashMap::new();
    for _ in 0..RUNS {
        let args = [
            "+p".into(),
            "2".into(),
            ops.to_string(),
            round_trips.to_string(),
        ];
        let c = c_program::run(&program, &args);
        let rust = run_rust(ops, round_trips);
        for (name, r) in rust {
            let e = best.entry(name.clone()).or_insert((f64::MAX, f64::MAX));
            *e = (e.0.min(c.get(&name)), e.1.min(r));
        }
    }
    let rows = SELF_SIZES
        .iter()
        .map(|s| format!("send_free_self_{s}B_ns"))
        .chain(["enqueue_self_ns".into(), "yield_ns".into()])
        .chain(["node_barrier_ns".into()])
        .chain(
            FORWARD_SIZES
                .iter()
                .map(|s| format!("forward_{}MiB_us", s >> 20)),
        );
    for key in rows {
        let (stem, unit) = key.rsplit_once('_').expect("a unit suffix");
        let stem = if stem == "node_barrier" {
            "node_barrier_2pe"
        } else {
            stem
        };
        let name = format!("c_{stem}");
        if common::wanted(&name) {
            let (c, rust) = best[&key];
            common::line(&name, c, unit, &format!("rust_{stem}"), rust, unit);
        }
    }
}
