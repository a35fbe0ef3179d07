//! Parameter marshalling: an `#[invokable]` ping-pong of two `i32`s
//! between two PEs, beside the hand-written message ping-pong doing the
//! same in the same run.
//!
//! `cargo bench -p converse-ext --bench cpm`
//!
//! - `cpm_invoke_rtt`: PE 0 calls `Cpm_pong(cpm::send(1), a, b)`; PE 1's
//!   `pong` calls back `Cpm_pong(cpm::send(0), a + 1, b)`; and so on. The
//!   figure is one round trip: two launches (pack, allocate, send) and two
//!   invocations (unpack, call).
//! - Baseline `msg_pingpong_rtt`: the same exchange written by hand: a
//!   handler reads the two `i32`s from an 8-byte payload and sends a new
//!   message with the answer.
//!
//! - `cpm_launch`: the launch alone, into a destination that drops the
//!   message; baseline `msg_build`: the same message built by hand and
//!   dropped (both allocate and free it).
//!
//! Both ping-pongs run in one job on PEs pinned to CPUs 0 and 1,
//! alternating, fifteen times each (short runs: this machine's speed
//! drifts over seconds, and both should see its best); the best of each
//! is printed.
#[path = "../../converse/benches/common/mod.rs"]
mod common;

use std::cell::Cell;
use std::hint::black_box;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use converse::{Converse, Event, Message, Thread};
use converse_ext::cpm::{self, Destination, invokable};

thread_local! {
    /// PE 0: round trips left in this measurement.
    static LEFT: Cell<u64> = const { Cell::new(0) };
    /// PE 0: set when they are done.
    static DONE: std::cell::RefCell<Option<Rc<Event>>> = const { std::cell::RefCell::new(None) };
}

/// PE 0 counts a round trip down; true while more are to go.
fn another_round() -> bool {
    let left = LEFT.get() - 1;
    LEFT.set(left);
    if left == 0 {
        DONE.with_borrow(|d| d.as_ref().expect("a measurement").set());
    }
    left > 0
}

#[invokable]
fn pong(a: i32, b: i32) {
    if converse::my_pe() == 1 {
        Cpm_pong(cpm::send(0), a + 1, b);
    } else if another_round() {
        Cpm_pong(cpm::send(1), a, b);
    }
}

/// A destination that drops what it is given: the launch alone.
struct Dropped;

impl Destination for Dropped {
    fn env_size(&self) -> usize {
        0
    }
    fn send(&self, msg: Message) {
        black_box(msg);
    }
}

/// Nanoseconds per call of `f`, best of 5 runs of `n`.
fn per_call(n: u64, mut f: impl FnMut(u64)) -> f64 {
    common::best_of(5, || {
        let t0 = Instant::now();
        for i in 0..n {
            f(i);
        }
        t0.elapsed().as_secs_f64() * 1e9 / n as f64
    })
}

/// The hand-written exchange's message: two `i32`s.
fn message(handler: usize, a: i32, b: i32) -> Message {
    let mut m = Message::new(handler, 8);
    m.payload_mut()[..4].copy_from_slice(&a.to_le_bytes());
    m.payload_mut()[4..].copy_from_slice(&b.to_le_bytes());
    m
}

fn main() {
    let rounds = common::iterations(50_000);
    let out: Arc<Mutex<[f64; 4]>> = Arc::default();
    let o = Arc::clone(&out);
    let code = Converse::new()
        .args(["cpm", "+p", "2"])
        .run(move |_| {
            let me = converse::my_pe();
            common::pin_to_cpu(me);
            let hand = Rc::new(Cell::new(0));
            let h = Rc::clone(&hand);
            let index = converse::register_handler(move |m: Message| {
                let p = m.payload();
                let a = i32::from_le_bytes([p[0], p[1], p[2], p[3]]);
                let b = i32::from_le_bytes([p[4], p[5], p[6], p[7]]);
                if converse::my_pe() == 1 {
                    converse::sync_send_and_free(0, message(h.get(), a + 1, b));
                } else if another_round() {
                    converse::sync_send_and_free(1, message(h.get(), a, b));
                }
            });
            hand.set(index);
            if me != 0 {
                return;
            }
            let o = Arc::clone(&o);
            Thread::create(
                move || {
                    let measure = |invokable: bool| {
                        let done = Rc::new(Event::new());
                        DONE.set(Some(Rc::clone(&done)));
                        LEFT.set(rounds);
                        let t0 = Instant::now();
                        if invokable {
                            Cpm_pong(cpm::send(1), 0, 7);
                        } else {
                            converse::sync_send_and_free(1, message(index, 0, 7));
                        }
                        done.wait();
                        t0.elapsed().as_secs_f64() * 1e9 / rounds as f64
                    };
                    let (mut cpm_best, mut hand_best) = (f64::INFINITY, f64::INFINITY);
                    for _ in 0..15 {
                        if std::env::var_os("ONLY_HAND").is_none() {
                            cpm_best = cpm_best.min(measure(true));
                        }
                        if std::env::var_os("ONLY_CPM").is_none() {
                            hand_best = hand_best.min(measure(false));
                        }
                    }
                    let calls = rounds * 40;
                    let launch = per_call(calls, |i| Cpm_pong(Dropped, black_box(i as i32), 7));
                    let build = per_call(calls, |i| {
                        black_box(message(black_box(index), i as i32, 7));
                    });
                    *o.lock().unwrap() = [cpm_best, hand_best, launch, build];
                    converse::exit(0);
                },
                0,
            )
            .awaken();
        })
        .expect("runtime flags");
    assert_eq!(code, 0);
    let [cpm_rtt, hand_rtt, launch, build] = *out.lock().unwrap();
    common::line(
        "cpm_invoke_rtt",
        cpm_rtt,
        "ns",
        "msg_pingpong_rtt",
        hand_rtt,
        "ns",
    );
    common::line("cpm_launch", launch, "ns", "msg_build", build, "ns");
}
