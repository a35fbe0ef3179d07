//! Collectives on 2 PEs, beside ping-pong round trips measured in the same
//! run, and the hop counts of broadcasts and reductions on up to 4096
//! simulated PEs.
//!
//! `cargo bench -p converse --bench collectives`
//!
//! - `bcast_reduce_2pe`: one round = PE 0 broadcasts an 8-byte message to
//!   both PEs (`sync_broadcast_all_and_free`), each PE's handler contributes
//!   8 bytes to a sum reduction (`reduce`), and the result's handler on PE 0
//!   starts the next round. Baseline: the 8-byte ping-pong round trip
//!   (`sync_send_and_free` both ways) between the same two PE threads. Each
//!   is the best of five runs, the two taken in turns.
//! - `reduce_<size>`: the same round with `size`-byte contributions, merged
//!   by adding them word by word (so the merge reads every byte). Baseline:
//!   the `size`-byte ping-pong round trip with a copy per hop (`sync_send`:
//!   the bytes really move, as a contribution's do).
//! - `bcast_hops_<n>` and `reduce_hops_<n>`: the most hops any PE is from the
//!   root along the runtime's own routes (one PE per node, branching 4), for
//!   `n` = 2 … 4096: computed, not timed. Baseline: ⌈log₄ n⌉.
//!
//! - `node_barrier_2pe`: one `node_barrier` (`CmiNodeBarrier`) of the two
//!   PEs of one node, a round each. Baseline: the same two threads meeting
//!   at a counter on one atomic, spinning (the raw operation underneath: a
//!   cache line passed both ways). Best of five, taken in turns.
//!
//! Both PE threads are pinned to CPUs 0 and 1, as in the ping-pong bench.
//! `CONVERSE_BENCH_ONLY=bcast` runs the first figure only (with its
//! baseline), `=reduce_8B` that size only.
mod common;

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Instant;

use converse::{Converse, Message, SpanningTree};

const SIZES: [usize; 6] = [8, 512, 4 << 10, 32 << 10, 256 << 10, 1 << 20];

fn rounds_for(size: usize) -> u64 {
    common::iterations(if size <= 4096 { 100_000 } else { 5_000 })
}

/// Adds `b`'s payload into `a`'s, word by word.
fn add_into(a: &mut Message, b: &Message) {
    for (x, y) in a
        .payload_mut()
        .chunks_exact_mut(8)
        .zip(b.payload().chunks_exact(8))
    {
        let s = u64::from_le_bytes((&*x).try_into().unwrap())
            .wrapping_add(u64::from_le_bytes(y.try_into().unwrap()));
        x.copy_from_slice(&s.to_le_bytes());
    }
}

/// Hops from PE 0 to the farthest PE of a broadcast over `n` PEs in nodes of
/// `ppn`: down the node tree, then one more inside a node.
fn bcast_hops(n: usize, ppn: usize, k: usize) -> usize {
    let nodes = SpanningTree::new(n / ppn, k, 0);
    (0..n)
        .map(|pe| nodes.depth_of(pe / ppn) + usize::from(pe % ppn != 0))
        .max()
        .unwrap_or(0)
}

fn ceil_log(n: usize, k: usize) -> usize {
    let (mut d, mut reach) = (0, 1);
    while reach < n {
        reach *= k;
        d += 1;
    }
    d
}

/// One figure: name, value, baseline name, baseline value (all in µs).
type Row = (String, f64, String, f64);

fn main() {
    let results: Arc<Mutex<Vec<Row>>> = Arc::default();
    let out = results.clone();
    let barrier = Arc::new(Barrier::new(2));
    let remaining = Arc::new(AtomicU64::new(0));
    let raw_meetings = Arc::new(AtomicU64::new(0));
    Converse::new()
        .args(["collectives", "+p", "2"])
        .run_user_scheduler(move |_| {
            let me = converse::my_pe();
            let other = 1 - me;
            common::pin_to_cpu(me);
            let size = Rc::new(Cell::new(8usize));

            // Stops both schedulers once a measurement is done.
            let stop = converse::register_handler(|_m: Message| converse::exit_scheduler());
            let finish = move || {
                converse::exit_scheduler();
                converse::sync_send_and_free(1, Message::new(stop, 0));
            };

            // Ping-pong: PE 0 counts round trips down.
            let countdown = remaining.clone();
            let bounce = converse::register_handler(move |m: Message| {
                if me == 0 && countdown.fetch_sub(1, Ordering::Relaxed) == 1 {
                    return finish();
                }
                converse::sync_send_and_free(other, m);
            });
            let countdown = remaining.clone();
            let bounce_copy = converse::register_handler(move |m: Message| {
                if me == 0 && countdown.fetch_sub(1, Ordering::Relaxed) == 1 {
                    return finish();
                }
                converse::sync_send(other, &m);
            });

            // Broadcast-then-reduce rounds.
            let countdown = remaining.clone();
            let go = Rc::new(Cell::new(0usize));
            let go_for_result = go.clone();
            let result = converse::register_handler(move |_m: Message| {
                if countdown.fetch_sub(1, Ordering::Relaxed) == 1 {
                    return finish();
                }
                converse::sync_broadcast_all_and_free(Message::new(go_for_result.get(), 8));
            });
            let sz = size.clone();
            go.set(converse::register_handler(move |_m: Message| {
                let contribution = Message::new(result, sz.get());
                converse::reduce(contribution, |mut local, rest| {
                    for r in &rest {
                        add_into(&mut local, r);
                    }
                    local
                });
            }));

            let measure = |rounds: u64, start: &dyn Fn()| {
                barrier.wait();
                remaining.store(rounds, Ordering::SeqCst);
                barrier.wait();
                let t0 = Instant::now();
                if me == 0 {
                    start();
                }
                converse::schedule_forever();
                t0.elapsed().as_secs_f64() / rounds as f64 * 1e6
            };
            let pingpong = |bytes: usize, rounds: u64| {
                measure(rounds, &|| {
                    converse::sync_send_and_free(1, Message::new(bounce, bytes))
                })
            };
            let pingpong_copy = |bytes: usize, rounds: u64| {
                measure(rounds, &|| {
                    converse::sync_send_and_free(1, Message::new(bounce_copy, bytes))
                })
            };

            let bcast_reduce = |bytes: usize, rounds: u64| {
                size.set(bytes);
                measure(rounds, &|| {
                    converse::sync_broadcast_all_and_free(Message::new(go.get(), 8))
                })
            };

            pingpong(8, common::iterations(50_000)); // warm-up
            bcast_reduce(8, common::iterations(50_000));
            let rounds = common::iterations(200_000);
            // The best of five of each, taken in turns: this host switches
            // between a fast and a slow cross-core mode within seconds, and
            // the figure and its baseline must meet the same modes (three
            // of one, then three of the other, put 0.71 and 3.2 in two
            // runs a minute apart).
            let (mut rtt, mut round) = (f64::INFINITY, f64::INFINITY);
            for _ in 0..5 {
                rtt = rtt.min(pingpong(8, rounds));
                round = round.min(bcast_reduce(8, rounds));
            }
            if me == 0 {
                out.lock().unwrap().push((
                    "bcast_reduce_2pe".into(),
                    round,
                    "pe_pingpong_rtt_8B".into(),
                    rtt,
                ));
            }
            if common::wanted("node_barrier") && converse::my_node_size() == 2 {
                let rounds = common::iterations(200_000);
                let node_barrier = || {
                    barrier.wait();
                    let t0 = Instant::now();
                    for _ in 0..rounds {
                        converse::node_barrier();
                    }
                    t0.elapsed().as_secs_f64() / rounds as f64 * 1e6
                };
                let raw_barrier = || {
                    barrier.wait();
                    let base = raw_meetings.load(Ordering::SeqCst);
                    barrier.wait();
                    let t0 = Instant::now();
                    for r in 1..=rounds {
                        raw_meetings.fetch_add(1, Ordering::AcqRel);
                        while raw_meetings.load(Ordering::Acquire) < base + 2 * r {
                            std::hint::spin_loop();
                        }
                    }
                    t0.elapsed().as_secs_f64() / rounds as f64 * 1e6
                };
                let (mut ours, mut raw) = (f64::INFINITY, f64::INFINITY);
                for _ in 0..5 {
                    ours = ours.min(node_barrier());
                    raw = raw.min(raw_barrier());
                }
                if me == 0 {
                    out.lock().unwrap().push((
                        "node_barrier_2pe".into(),
                        ours,
                        "raw_spin_barrier_2pe".into(),
                        raw,
                    ));
                }
            }
            for bytes in SIZES {
                if !common::wanted(&format!("reduce_{}", common::size_name(bytes))) {
                    continue;
                }
                let rounds = rounds_for(bytes);
                let rtt = common::best_of(2, || pingpong_copy(bytes, rounds));
                let round = common::best_of(2, || bcast_reduce(bytes, rounds));
                if me == 0 {
                    out.lock().unwrap().push((
                        format!("reduce_{}", common::size_name(bytes)),
                        round,
                        format!("pe_pingpong_copy_rtt_{}", common::size_name(bytes)),
                        rtt,
                    ));
                }
            }
        })
        .expect("runtime flags");
    for (name, value, base, base_value) in results.lock().unwrap().iter() {
        common::line(name, *value, "us", base, *base_value, "us");
    }
    let mut n = 2;
    while n <= 4096 {
        let log = ceil_log(n, 4) as f64;
        let bcast = bcast_hops(n, 1, 4) as f64;
        let reduce = SpanningTree::new(n, 4, 0).depth() as f64;
        common::line(
            &format!("bcast_hops_{n}"),
            bcast,
            "hops",
            "log4_n",
            log,
            "hops",
        );
        common::line(
            &format!("reduce_hops_{n}"),
            reduce,
            "hops",
            "log4_n",
            log,
            "hops",
        );
        n *= 2;
    }
}
