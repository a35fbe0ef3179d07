//! The C API against the Rust API, same program, same run:
//!
//! - `capi_self_send_rate`: a handler sends its message back to its own PE
//!   with `CmiSyncSendAndFree` until a count is reached (`capi_bench.c`),
//!   beside `rust_self_send_rate`, the same loop written with
//!   `converse::sync_send_and_free` in this process. Million messages per
//!   second; the ratio is C's rate over Rust's (the target, ≥ 0.91, is the
//!   C layer costing at most 1.1× the Rust one).
//! - `capi_pingpong_rtt_8B`: an 8-byte message bounced between PE 0 and
//!   PE 1 (`+p 2`, one process), each PE pinned to the CPU of its number,
//!   beside `rust_pingpong_rtt_8B`, the same in Rust. Microseconds per round
//!   trip; the ratio is C over Rust (target ≤ 1.1).
//!
//! - `capi_csv_access`: an increment of a `Csv` variable (`CsvAccess`,
//!   the node's element), beside `capi_cpv_access`, the same of a `Cpv`
//!   variable (a thread-local): nanoseconds each, both in the C program,
//!   in turns; the ratio is Csv over Cpv (target ≤ 1.1: no call per
//!   access).
//!
//! Both sides have the same shape: PE 0 sends the first message and runs
//! a nested scheduler until the last handler stops it; each figure is the
//! best of three timed runs after an untimed tenth. The C program and the
//! Rust job alternate, three times, and each side's best is printed.
//!
//! `cargo bench -p converse-capi --bench capi` (it builds
//! `libconverse_capi.a` and the C program with `convcc` first).
mod c_program;
#[path = "../../converse/benches/common/mod.rs"]
mod common;

use std::cell::Cell;
use std::path::Path;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use converse::{Converse, Message};

const RUNS: usize = 3;

/// The C program's figures: (ns per self-send, µs per round trip), and
/// (ns per Csv access, ns per Cpv access).
fn run_c(program: &Path, self_count: u64, rounds: u64) -> ((f64, f64), (f64, f64)) {
    let args = [
        "+p".into(),
        "2".into(),
        self_count.to_string(),
        rounds.to_string(),
    ];
    let f = c_program::run(program, &args);
    (
        (f.get("self_send_ns"), f.get("pingpong_rtt_us")),
        (f.get("csv_access_ns"), f.get("cpv_access_ns")),
    )
}

/// The same two loops in Rust, in a job of this process: (ns per
/// self-send, µs per round trip).
fn run_rust(self_count: u64, rounds: u64) -> (f64, f64) {
    let results: Arc<Mutex<(f64, f64)>> = Arc::default();
    let out = results.clone();
    let code = Converse::new()
        .args(["capi-bench", "+p", "2"])
        .run(move |_| {
            let me = converse::my_pe();
            common::pin_to_cpu(me);
            let left = Rc::new(Cell::new(0u64));
            let l = left.clone();
            let self_h = converse::register_handler(move |msg: Message| {
                l.set(l.get() - 1);
                if l.get() == 0 {
                    converse::exit_scheduler();
                    return;
                }
                converse::sync_send_and_free(converse::my_pe(), msg);
            });
            // Registered in the same order on both PEs: ping, then pong.
            let pong_index = Rc::new(Cell::new(0usize));
            let ping_index = Rc::new(Cell::new(0usize));
            let pi = pong_index.clone();
            let ping = converse::register_handler(move |mut msg: Message| {
                msg.set_handler(pi.get());
                converse::sync_send_and_free(0, msg);
            });
            ping_index.set(ping);
            let (l, pingi) = (left.clone(), ping_index.clone());
            let pong = converse::register_handler(move |mut msg: Message| {
                l.set(l.get() - 1);
                if l.get() == 0 {
                    converse::exit_scheduler();
                    return;
                }
                msg.set_handler(pingi.get());
                converse::sync_send_and_free(1, msg);
            });
            pong_index.set(pong);
            if me != 0 {
                return;
            }
            let self_once = |n: u64| {
                left.set(n);
                let t0 = Instant::now();
                converse::sync_send_and_free(0, Message::new(self_h, 0));
                converse::scheduler(-1);
                t0.elapsed().as_secs_f64()
            };
            self_once(self_count / 10 + 1);
            let self_best = common::best_of(RUNS, || self_once(self_count));
            let ping_once = |n: u64| {
                left.set(n);
                let t0 = Instant::now();
                converse::sync_send_and_free(1, Message::new(ping, 8));
                converse::scheduler(-1);
                t0.elapsed().as_secs_f64()
            };
            ping_once(rounds / 10 + 1);
            let ping_best = common::best_of(RUNS, || ping_once(rounds));
            *out.lock().unwrap() = (
                self_best * 1e9 / self_count as f64,
                ping_best * 1e6 / rounds as f64,
            );
            converse::exit(0);
        })
        .expect("the Rust job starts");
    assert_eq!(code, 0);
    *results.lock().unwrap()
}

fn main() {
    let self_count = common::iterations(2_000_000);
    let rounds = common::iterations(200_000);
    let program = c_program::build("capi_bench.c", "capi_bench");
    let (mut c_best, mut rust_best) = ((f64::MAX, f64::MAX), (f64::MAX, f64::MAX));
    let mut access_best = (f64::MAX, f64::MAX);
    for _ in 0..RUNS {
        let (c, access) = run_c(&program, self_count, rounds);
        access_best = (access_best.0.min(access.0), access_best.1.min(access.1));
        let r = run_rust(self_count, rounds);
        c_best = (c_best.0.min(c.0), c_best.1.min(c.1));
        rust_best = (rust_best.0.min(r.0), rust_best.1.min(r.1));
    }
    if common::wanted("capi_self_send_rate") {
        common::line(
            "capi_self_send_rate",
            1e3 / c_best.0,
            "M msg/s",
            "rust_self_send_rate",
            1e3 / rust_best.0,
            "M msg/s",
        );
    }
    if common::wanted("capi_csv_access") {
        common::line(
            "capi_csv_access",
            access_best.0,
            "ns",
            "capi_cpv_access",
            access_best.1,
            "ns",
        );
    }
    if common::wanted("capi_pingpong_rtt_8B") {
        common::line(
            "capi_pingpong_rtt_8B",
            c_best.1,
            "us",
            "rust_pingpong_rtt_8B",
            rust_best.1,
            "us",
        );
    }
}
