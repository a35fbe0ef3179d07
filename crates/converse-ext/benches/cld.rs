//! Seed load balancing (`cld`): the speed-up of the unbalanced tree search
//! of `examples/cld_tree.rs` under each strategy, and the cost of a seed
//! that stays where it was made.
//!
//! `cargo bench -p converse-ext --bench cld [-- FILTER]` (only the figures
//! whose names contain FILTER)
//!
//! - `cld_speedup_<strategy>_p<P>`: the tree search (fib(41), cut-off 16:
//!   about 390,000 seeds, under a second on one PE) on `+p P` against the
//!   same program on `+p 1`, in the same run, the two alternating, best of
//!   five each (this host's speed drifts between runs). The line gives both times; the speed-up is their ratio's
//!   inverse, printed after it. On `+p 8` the 8 PEs share this machine's
//!   2 cores (oversubscribed).
//! - `cld_enqueue_local` (`+p 1`) and `cld_enqueue_token` (`+p 2`): a
//!   handler gives its message back to `cld::enqueue(Dest::Anywhere, …)`
//!   until a count is reached, against a handler that gives it to
//!   `converse::enqueue_general` at the same priority. On one PE the
//!   balancer enqueues the seed at once (after asking its info function);
//!   on two, under the default strategy, the seed waits as a movable token
//!   (the token queue, a token message in the scheduler queue, the seed
//!   run when the token's turn comes), which is what every seed pays under
//!   `neighbor`, `workstealing` and `ring`. The second PE spins in its
//!   start function meanwhile, so it steals nothing.
#[path = "../../converse/benches/common/mod.rs"]
mod common;
#[path = "../examples/cld_tree.rs"]
#[allow(dead_code)]
mod example;

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use converse::{Converse, Message, Queueing};
use converse_ext::cld::{self, Dest, SeedInfo};

/// Seconds of the tree search on `pes` PEs under `strategy`.
fn tree(n: &str, pes: usize, strategy: &str) -> f64 {
    *example::REPORT.lock().unwrap() = None;
    let p = pes.to_string();
    let code = Converse::new()
        .args(["cld_tree", n, "16", "+p", &p, "+balancer", strategy])
        .run(example::start)
        .expect("runtime flags");
    assert_eq!(code, 0);
    let r = example::REPORT.lock().unwrap().take().expect("a report");
    r.seconds
}

fn info(msg: &Message) -> SeedInfo {
    let p = i32::from_le_bytes(msg.payload()[..4].try_into().unwrap());
    SeedInfo::new(msg, Queueing::IFifo(p))
}

/// Seeds (or messages) per second through a handler that gives its
/// message back, with `cld` or with the plain enqueue, on PE 0 of a job of
/// `pes` PEs.
fn enqueue_rate(pes: usize, n: u64, through_cld: bool) -> f64 {
    let rate: Arc<Mutex<f64>> = Arc::default();
    let out = Arc::clone(&rate);
    let done = Arc::new(AtomicBool::new(false));
    let p = pes.to_string();
    Converse::new()
        .args(["cld_enqueue", "+p", &p])
        .run(move |_| {
            let info_fn = cld::register_info_fn(info);
            let left = Rc::new(Cell::new(0u64));
            let start = Rc::new(Cell::new(Instant::now()));
            let (l, s, o, d) = (left.clone(), start.clone(), out.clone(), done.clone());
            let again = converse::register_handler(move |msg: Message| {
                let k = l.get();
                if k == 0 {
                    *o.lock().unwrap() = n as f64 / s.get().elapsed().as_secs_f64();
                    d.store(true, Ordering::Release);
                    converse::exit(0);
                }
                l.set(k - 1);
                if through_cld {
                    cld::enqueue(Dest::Anywhere, msg, info_fn);
                } else {
                    converse::enqueue_general(msg, Queueing::IFifo(-3));
                }
            });
            if converse::my_pe() != 0 {
                while !done.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
                return;
            }
            left.set(n);
            start.set(Instant::now());
            let msg = Message::from_payload(again, &(-3i32).to_le_bytes());
            converse::enqueue_general(msg, Queueing::IFifo(-3));
        })
        .expect("runtime flags");
    *rate.lock().unwrap()
}

fn main() {
    cld::install();
    let quick = std::env::var_os("CONVERSE_BENCH_QUICK").is_some();
    let n = if quick { "28" } else { "41" };
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    let wanted = |name: &str| filter.as_ref().is_none_or(|f| name.contains(f.as_str()));
    for strategy in ["workstealing", "neighbor", "rand", "ring", "none"] {
        for pes in [2, 8] {
            let name = format!("cld_speedup_{strategy}_p{pes}");
            if !wanted(&name) {
                continue;
            }
            let (mut one, mut many) = (f64::INFINITY, f64::INFINITY);
            for _ in 0..5 {
                one = one.min(tree(n, 1, strategy));
                many = many.min(tree(n, pes, strategy));
            }
            common::line(&name, many, "s", "cld_tree_p1", one, "s");
            println!("  speed-up {:.2}x", one / many);
        }
    }
    let count = common::iterations(5_000_000);
    for (name, pes) in [("cld_enqueue_local", 1), ("cld_enqueue_token", 2)] {
        if !wanted(name) {
            continue;
        }
        let (mut cld_rate, mut base_rate) = (0f64, 0f64);
        for _ in 0..3 {
            cld_rate = cld_rate.max(enqueue_rate(pes, count, true));
            base_rate = base_rate.max(enqueue_rate(pes, count, false));
        }
        // Time per seed against time per plain enqueue: the ratio is the
        // cost factor.
        common::line(
            name,
            1e9 / cld_rate,
            "ns",
            "enqueue_general",
            1e9 / base_rate,
            "ns",
        );
    }
}
