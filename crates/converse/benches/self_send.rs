//! One-PE self-send throughput (send, queue, dispatch), beside a plain
//! `VecDeque` push/pop loop of the same-sized item.
//!
//! `cargo bench -p converse --bench self_send`
//!
//! A handler forwards the message it received to its own PE with
//! `sync_send_and_free` until the count is reached: each message costs one
//! send (header stamping, the self-send FIFO), one scheduler step and one
//! handler dispatch.
mod common;

use std::cell::Cell;
use std::collections::VecDeque;
use std::hint::black_box;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use converse::{Converse, Message};

fn baseline_rate(n: u64) -> f64 {
    let mut q: VecDeque<[u64; 4]> = VecDeque::with_capacity(16);
    q.push_back([1, 2, 3, 4]);
    let t0 = Instant::now();
    for i in 0..n {
        let mut item = q.pop_front().expect("one item circulates");
        item[0] = black_box(item[0].wrapping_add(i));
        q.push_back(black_box(item));
    }
    black_box(&q);
    n as f64 / t0.elapsed().as_secs_f64()
}

fn main() {
    let n = common::iterations(20_000_000);
    let rate: Arc<Mutex<f64>> = Arc::default();
    let out = rate.clone();
    Converse::new()
        .args(["self_send", "+p", "1"])
        .run(move |_| {
            let left = Rc::new(Cell::new(0u64));
            let start = Rc::new(Cell::new(Instant::now()));
            let (l, s, o) = (left.clone(), start.clone(), out.clone());
            let forward = converse::register_handler(move |msg: Message| {
                let k = l.get();
                if k == 0 {
                    *o.lock().unwrap() = n as f64 / s.get().elapsed().as_secs_f64();
                    converse::exit_scheduler();
                    return;
                }
                l.set(k - 1);
                converse::sync_send_and_free(0, msg);
            });
            let measured = common::best_of(3, || {
                left.set(n);
                start.set(Instant::now());
                converse::sync_send_and_free(0, Message::new(forward, 8));
                converse::schedule_forever();
                *out.lock().unwrap()
            });
            *out.lock().unwrap() = measured;
            converse::exit_scheduler();
        })
        .expect("runtime flags");
    let base = common::best_of(3, || baseline_rate(n));
    let rate = *rate.lock().unwrap();
    common::line(
        "self_send_rate",
        rate / 1e6,
        "Mmsg/s",
        "vecdeque_push_pop",
        base / 1e6,
        "Mops/s",
    );
}
