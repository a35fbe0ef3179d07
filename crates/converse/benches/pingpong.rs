//! PE-to-PE ping-pong round trip, 8 B to 1 MiB, beside a raw atomic
//! cache-line ping-pong between the same two PE threads.
//!
//! `cargo bench -p converse --bench pingpong`
//!
//! Two figures per size: `pe_pingpong_rtt_<size>` bounces one message with
//! `sync_send_and_free` (ownership moves, as Converse programs forward the
//! message they received: no copy in-process), and
//! `pe_pingpong_copy_rtt_<size>` with `sync_send` (a copy per hop). The
//! baseline runs on the same two PE threads, before the message figures; both
//! threads are pinned to CPUs 0 and 1.
//!
//! `typed_pod_pingpong_rtt_8B`: a `u64` counter bounced in a new message
//! each hop through a typed handler (`converse::pod_handler_slot`),
//! against the same with the byte API (`bytes_pingpong_rtt_8B`:
//! `Message::from_payload` of its 8 bytes, read back by hand), best of
//! three in turns.
mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use converse::{Converse, Message};

const SIZES: [usize; 7] = [8, 64, 512, 4 << 10, 32 << 10, 256 << 10, 1 << 20];

fn rounds_for(size: usize) -> u64 {
    common::iterations(if size <= 4096 { 200_000 } else { 20_000 })
}

/// Raw round trip: PE 0 writes odd values, PE 1 answers with the next even.
fn raw_rtt(flag: &AtomicU64, rounds: u64) -> f64 {
    let me = converse::my_pe();
    let t0 = Instant::now();
    for i in 0..rounds {
        if me == 0 {
            flag.store(2 * i + 1, Ordering::Release);
            while flag.load(Ordering::Acquire) != 2 * i + 2 {
                std::hint::spin_loop();
            }
        } else {
            while flag.load(Ordering::Acquire) != 2 * i + 1 {
                std::hint::spin_loop();
            }
            flag.store(2 * i + 2, Ordering::Release);
        }
    }
    t0.elapsed().as_secs_f64() / rounds as f64
}

fn main() {
    let results: Arc<Mutex<Vec<String>>> = Arc::default();
    let out = results.clone();
    let typed_result: Arc<Mutex<Option<(f64, f64)>>> = Arc::default();
    let typed_figure = typed_result.clone();
    let flag = Arc::new(AtomicU64::new(0));
    let remaining = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(std::sync::Barrier::new(2));
    Converse::new()
        .args(["pingpong", "+p", "2"])
        .run_user_scheduler(move |_| {
            let me = converse::my_pe();
            let other = 1 - me;
            // Pin PE 0 and PE 1 to different CPUs, as the C reference in
            // ../shared/bench/limits.c does: without it the raw baseline
            // swings by 50% with where the scheduler puts the two threads.
            common::pin_to_cpu(me);
            // PE 1 always bounces; PE 0 bounces until the round trips are
            // done (`remaining` counts them down), then drops the message.
            let countdown = remaining.clone();
            let bounce = move |msg: Message, copy: bool| {
                if me == 0 && countdown.fetch_sub(1, Ordering::Relaxed) == 1 {
                    return;
                }
                if copy {
                    converse::sync_send(other, &msg);
                } else {
                    converse::sync_send_and_free(other, msg);
                }
            };
            let bounce = std::rc::Rc::new(bounce);
            let b = bounce.clone();
            let bounce_move = converse::register_handler(move |m: Message| b(m, false));
            let bounce_copy = converse::register_handler(move |m: Message| bounce(m, true));
            // A `u64` counter bounced in a new message each hop: through a
            // typed `Pod` handler, and with the byte API by hand.
            let countdown = remaining.clone();
            let typed_slot = converse::pod_handler_slot::<u64>();
            let typed = typed_slot.handler();
            typed_slot.fill(move |k: u64| {
                if me == 0 && countdown.fetch_sub(1, Ordering::Relaxed) == 1 {
                    return;
                }
                typed.send(other, &(k + 1));
            });
            let countdown = remaining.clone();
            let bytes = converse::register_handler(move |m: Message| {
                if me == 0 && countdown.fetch_sub(1, Ordering::Relaxed) == 1 {
                    return;
                }
                let k = u64::from_le_bytes(m.payload()[..8].try_into().unwrap());
                let next = Message::from_payload(m.handler(), &(k + 1).to_le_bytes());
                converse::sync_send_and_free(other, next);
            });
            let raw_rounds = common::iterations(2_000_000);
            barrier.wait();
            flag.store(0, Ordering::SeqCst);
            barrier.wait();
            let raw = common::best_of(3, || {
                barrier.wait();
                flag.store(0, Ordering::SeqCst);
                barrier.wait();
                raw_rtt(&flag, raw_rounds)
            });
            let measure = |size: usize, handler: usize, rounds: u64| {
                barrier.wait();
                remaining.store(rounds, Ordering::SeqCst);
                barrier.wait();
                let t0 = Instant::now();
                if me == 0 {
                    converse::sync_send_and_free(1, Message::new(handler, size));
                }
                converse::schedule_count(rounds as usize);
                t0.elapsed().as_secs_f64() / rounds as f64
            };
            measure(8, bounce_move, common::iterations(100_000)); // warm-up
            let rounds = rounds_for(8);
            let (mut t, mut b) = (f64::INFINITY, f64::INFINITY);
            for _ in 0..3 {
                t = t.min(measure(8, typed.index(), rounds));
                b = b.min(measure(8, bytes, rounds));
            }
            if me == 0 {
                typed_figure.lock().unwrap().replace((t * 1e6, b * 1e6));
            }
            for size in SIZES {
                let rounds = rounds_for(size);
                for (handler, copy) in [(bounce_move, false), (bounce_copy, true)] {
                    let rtt = measure(size, handler, rounds);
                    if me == 0 {
                        let name = if copy {
                            "pe_pingpong_copy_rtt"
                        } else {
                            "pe_pingpong_rtt"
                        };
                        out.lock().unwrap().push(format!(
                            "{}_{}|{}|{}",
                            name,
                            common::size_name(size),
                            rtt * 1e6,
                            raw * 1e6
                        ));
                    }
                }
            }
        })
        .expect("runtime flags");
    if let Some((typed, bytes)) = *typed_result.lock().unwrap() {
        common::line(
            "typed_pod_pingpong_rtt_8B",
            typed,
            "us",
            "bytes_pingpong_rtt_8B",
            bytes,
            "us",
        );
    }
    for row in results.lock().unwrap().iter() {
        let f: Vec<&str> = row.split('|').collect();
        common::line(
            f[0],
            f[1].parse().unwrap(),
            "us",
            "cacheline_rtt",
            f[2].parse().unwrap(),
            "us",
        );
    }
}
