//! What each core call a program puts in an inner loop costs, one line per
//! call, in the style of Charm++'s commbench: so that a regression in any
//! of them shows.
//!
//! `cargo bench -p converse --bench commbench`
//!
//! Two PEs in one process, pinned to CPUs 0 and 1. Every figure is the mean
//! time of one operation over a loop of them, best of three loops:
//!
//! - `alloc_free_<size>`: `Message::new` and drop (`CmiAlloc`/`CmiFree`).
//!   Baseline: a `Box<[u8]>` of the same size, zeroed, made and dropped.
//! - `self_<form>`: a handler passes its message on to its own PE in one of
//!   the send or enqueue forms, and the scheduler runs it again: send, queue,
//!   scheduler step and dispatch. `send_and_free` (`CmiSyncSendAndFree`),
//!   `send_copy` (`CmiSyncSend`: a copy made, the original freed),
//!   `enqueue_fifo`, `enqueue_lifo` (`CsdEnqueueFifo/Lifo`), `enqueue_ififo`
//!   (an integer priority, `CQS_QUEUEING_IFIFO`), `enqueue_bfifo` (a 64-bit
//!   bit-vector priority). Baseline: a `VecDeque` push + pop.
//! - `neighbour_<form>_8B`: PE 0 streams messages to PE 1, whose handler
//!   counts them; per message, from the first send to the last handled.
//!   `send_and_free` (each one allocated), `send_copy` (`CmiSyncSend` of one
//!   message), `async_send` (`CmiAsyncSend`). Baseline: none (the cost is the
//!   sending PE's, the receiver runs in parallel).
//! - `neighbour_pingpong_rtt_8B`: a message bounced between the two PEs.
//!   Baseline: none (`pingpong` prints it beside a raw cache-line round
//!   trip).
//! - `broadcast_all_8B`: PE 0 broadcasts to both PEs (`CmiSyncBroadcastAll`),
//!   in a stream; per broadcast, until PE 1 handled the last. Baseline: the
//!   neighbour send-and-free stream.
//! - `bcast_reduce_round_8B`: a broadcast whose handlers contribute to a sum
//!   reduction (`CmiReduce`) whose result starts the next round. Baseline:
//!   the ping-pong round trip.
//! - `wall_timer`, `cpu_timer`, `timer`, `my_pe`, `cpv_with`: one call.
//!   Baseline: `Instant::now()` for the timers, a thread-local read for the
//!   others.
//!
//! `CONVERSE_BENCH_QUICK` runs 100 times fewer operations (CI's smoke check);
//! `CONVERSE_BENCH_ONLY=NAME` runs the figures whose names contain `NAME`.
mod common;

use std::cell::Cell;
use std::hint::black_box;
use std::rc::Rc;
use std::sync::{Arc, Barrier, Mutex};
use std::time::Instant;

use converse::{BitPrio, Converse, Cpv, Message, Queueing};

/// One printed line: name, ns, baseline name, baseline ns (`None`: `baseline none`).
type Row = (String, f64, Option<(String, f64)>);

/// Mean ns per operation of `run(n)`, which does `n` operations and returns
/// the seconds they took; best of three.
fn per_op(n: u64, mut run: impl FnMut(u64) -> f64) -> f64 {
    common::best_of(3, || run(n) * 1e9 / n as f64)
}

/// Seconds for `n` calls of `f`.
fn time_calls<R>(n: u64, mut f: impl FnMut() -> R) -> f64 {
    let t0 = Instant::now();
    for _ in 0..n {
        black_box(f());
    }
    t0.elapsed().as_secs_f64()
}

/// How a handler passes its message on to its own PE.
#[derive(Clone, Copy)]
enum SelfForm {
    SendAndFree,
    SendCopy,
    EnqueueFifo,
    EnqueueLifo,
    EnqueueIFifo,
    EnqueueBFifo,
}

const SELF_FORMS: [(&str, SelfForm); 6] = [
    ("self_send_and_free", SelfForm::SendAndFree),
    ("self_send_copy", SelfForm::SendCopy),
    ("self_enqueue_fifo", SelfForm::EnqueueFifo),
    ("self_enqueue_lifo", SelfForm::EnqueueLifo),
    ("self_enqueue_ififo", SelfForm::EnqueueIFifo),
    ("self_enqueue_bfifo", SelfForm::EnqueueBFifo),
];

/// How PE 0 streams messages to PE 1.
#[derive(Clone, Copy)]
enum StreamForm {
    SendAndFree,
    SendCopy,
    AsyncSend,
    BroadcastAll,
}

fn main() {
    let rows: Arc<Mutex<Vec<Row>>> = Arc::default();
    let out = rows.clone();
    let barrier = Arc::new(Barrier::new(2));
    Converse::new()
        .args(["commbench", "+p", "2"])
        .run_user_scheduler(move |_| {
            let me = converse::my_pe();
            common::pin_to_cpu(me);
            let push = |name: &str, ns: f64, base: Option<(&str, f64)>| {
                if me == 0 {
                    let base = base.map(|(n, v)| (n.to_string(), v));
                    out.lock().unwrap().push((name.to_string(), ns, base));
                }
            };

            // Stops PE 0's scheduler (sent by PE 1) or PE 1's (sent by PE 0).
            let stop = converse::register_handler(|_m: Message| converse::exit_scheduler());

            // The self loop: `left` counts down; at 0 the scheduler stops.
            let left = Rc::new(Cell::new(0u64));
            let self_handlers: Vec<usize> = SELF_FORMS
                .iter()
                .map(|&(_, form)| {
                    let left = left.clone();
                    let prio = BitPrio::new(64, &[0x7FFF_FFFF, 0x1234_5678]).expect("2 words");
                    converse::register_handler(move |msg: Message| {
                        let k = left.get();
                        if k == 0 {
                            return converse::exit_scheduler();
                        }
                        left.set(k - 1);
                        match form {
                            SelfForm::SendAndFree => converse::sync_send_and_free(me, msg),
                            SelfForm::SendCopy => converse::sync_send(me, &msg),
                            SelfForm::EnqueueFifo => converse::enqueue_fifo(msg),
                            SelfForm::EnqueueLifo => converse::enqueue_lifo(msg),
                            SelfForm::EnqueueIFifo => {
                                converse::enqueue_general(msg, Queueing::IFifo(-3))
                            }
                            SelfForm::EnqueueBFifo => {
                                converse::enqueue_general(msg, Queueing::BFifo(prio.clone()))
                            }
                        }
                    })
                })
                .collect();

            // The stream's receiver: counts; at the last, tells PE 0.
            let expected = Rc::new(Cell::new(0u64));
            let got = expected.clone();
            let sink = converse::register_handler(move |_m: Message| {
                // PE 0's own broadcast copies are not counted.
                if me != 1 {
                    return;
                }
                let k = got.get() - 1;
                got.set(k);
                if k == 0 {
                    converse::sync_send_and_free(0, Message::new(stop, 0));
                    converse::exit_scheduler();
                }
            });

            // Ping-pong and broadcast-reduce rounds: `rounds` counts down on
            // PE 0; at 0 both schedulers stop.
            let rounds = Rc::new(Cell::new(0u64));
            let finish = move || {
                converse::exit_scheduler();
                converse::sync_send_and_free(1, Message::new(stop, 0));
            };
            let r = rounds.clone();
            let bounce = converse::register_handler(move |m: Message| {
                if me == 0 {
                    let k = r.get() - 1;
                    r.set(k);
                    if k == 0 {
                        return finish();
                    }
                }
                converse::sync_send_and_free(1 - me, m);
            });
            let r = rounds.clone();
            let go = Rc::new(Cell::new(0usize));
            let go_again = go.clone();
            let result = converse::register_handler(move |_m: Message| {
                let k = r.get() - 1;
                r.set(k);
                if k == 0 {
                    return finish();
                }
                converse::sync_broadcast_all_and_free(Message::new(go_again.get(), 8));
            });
            go.set(converse::register_handler(move |_m: Message| {
                converse::reduce(Message::new(result, 8), |mut sum, rest| {
                    for r in &rest {
                        let add = u64::from_le_bytes(r.payload()[..8].try_into().unwrap());
                        let s = u64::from_le_bytes(sum.payload()[..8].try_into().unwrap());
                        sum.payload_mut()[..8].copy_from_slice(&(s + add).to_le_bytes());
                    }
                    sum
                });
            }));

            // PE 0 measures alone while PE 1 waits in its scheduler.
            let alone = |f: &mut dyn FnMut()| {
                barrier.wait();
                if me == 0 {
                    f();
                    converse::sync_send_and_free(1, Message::new(stop, 0));
                } else {
                    converse::schedule_forever();
                }
                barrier.wait();
            };

            for size in [8usize, 4096] {
                let name = format!("alloc_free_{}", common::size_name(size));
                if !common::wanted(&name) {
                    continue;
                }
                let n = common::iterations(if size <= 8 { 20_000_000 } else { 2_000_000 });
                let mut ns = 0.0;
                let mut base = 0.0;
                alone(&mut || {
                    ns = per_op(n, |n| time_calls(n, || Message::new(1, size)));
                    let bytes = size + converse::MSG_HEADER_SIZE;
                    base = per_op(n, |n| time_calls(n, || vec![0u8; bytes].into_boxed_slice()));
                });
                push(&name, ns, Some(("box_alloc_free", base)));
            }

            let self_n = common::iterations(10_000_000);
            let vecdeque = per_op(self_n, common::vecdeque_push_pop_secs);
            for (&(name, _), &handler) in SELF_FORMS.iter().zip(&self_handlers) {
                if !common::wanted(name) {
                    continue;
                }
                let mut ns = 0.0;
                alone(&mut || {
                    ns = per_op(self_n, |n| {
                        left.set(n);
                        let t0 = Instant::now();
                        converse::sync_send_and_free(0, Message::new(handler, 8));
                        converse::schedule_forever();
                        t0.elapsed().as_secs_f64()
                    });
                });
                push(name, ns, Some(("vecdeque_push_pop", vecdeque)));
            }

            // Streams from PE 0 to PE 1.
            let stream = |form: StreamForm, n: u64| -> f64 {
                barrier.wait();
                expected.set(n);
                barrier.wait();
                let t0 = Instant::now();
                if me == 0 {
                    let one = Message::new(sink, 8);
                    for _ in 0..n {
                        match form {
                            StreamForm::SendAndFree => {
                                converse::sync_send_and_free(1, Message::new(sink, 8))
                            }
                            StreamForm::SendCopy => converse::sync_send(1, &one),
                            StreamForm::AsyncSend => {
                                black_box(converse::async_send(1, &one));
                            }
                            StreamForm::BroadcastAll => {
                                converse::sync_broadcast_all(&one);
                            }
                        }
                    }
                    // Until PE 1's "done" (a broadcast's own copies meanwhile).
                    converse::schedule_forever();
                } else {
                    converse::schedule_forever();
                }
                t0.elapsed().as_secs_f64()
            };
            let stream_n = common::iterations(2_000_000);
            let mut send_and_free_stream = None;
            for (name, form) in [
                ("neighbour_send_and_free_8B", StreamForm::SendAndFree),
                ("neighbour_send_copy_8B", StreamForm::SendCopy),
                ("neighbour_async_send_8B", StreamForm::AsyncSend),
                ("broadcast_all_8B", StreamForm::BroadcastAll),
            ] {
                if !common::wanted(name) {
                    continue;
                }
                let ns = per_op(stream_n, |n| stream(form, n));
                match form {
                    StreamForm::SendAndFree => {
                        send_and_free_stream = Some(ns);
                        push(name, ns, None);
                    }
                    StreamForm::BroadcastAll => push(
                        name,
                        ns,
                        send_and_free_stream.map(|b| ("neighbour_send_and_free_8B", b)),
                    ),
                    _ => push(name, ns, None),
                }
            }

            let round_trip = |start: &dyn Fn(), n: u64| -> f64 {
                barrier.wait();
                rounds.set(n);
                barrier.wait();
                let t0 = Instant::now();
                if me == 0 {
                    start();
                }
                converse::schedule_forever();
                t0.elapsed().as_secs_f64()
            };
            let rounds_n = common::iterations(200_000);
            let pingpong = per_op(rounds_n, |n| {
                round_trip(
                    &|| converse::sync_send_and_free(1, Message::new(bounce, 8)),
                    n,
                )
            });
            if common::wanted("neighbour_pingpong_rtt_8B") {
                push("neighbour_pingpong_rtt_8B", pingpong, None);
            }
            if common::wanted("bcast_reduce_round_8B") {
                let ns = per_op(rounds_n, |n| {
                    round_trip(
                        &|| converse::sync_broadcast_all_and_free(Message::new(go.get(), 8)),
                        n,
                    )
                });
                push(
                    "bcast_reduce_round_8B",
                    ns,
                    Some(("neighbour_pingpong_rtt_8B", pingpong)),
                );
            }

            // Calls with no message.
            let calls_n = common::iterations(20_000_000);
            let cpv: Cpv<u64> = Cpv::new();
            cpv.initialize(7);
            thread_local! {
                static PLAIN: Cell<u64> = const { Cell::new(7) };
            }
            let mut timers = [0.0; 6];
            alone(&mut || {
                timers = [
                    per_op(calls_n, |n| time_calls(n, converse::wall_timer)),
                    per_op(calls_n, |n| time_calls(n, converse::cpu_timer)),
                    per_op(calls_n, |n| time_calls(n, converse::timer)),
                    per_op(calls_n, |n| time_calls(n, Instant::now)),
                    per_op(calls_n, |n| time_calls(n, converse::my_pe)),
                    per_op(calls_n, |n| time_calls(n, || cpv.with(|v| *v))),
                ];
            });
            let plain = per_op(calls_n, |n| time_calls(n, || PLAIN.with(Cell::get)));
            let now = timers[3];
            for (name, ns, base) in [
                ("wall_timer", timers[0], ("instant_now", now)),
                ("cpu_timer", timers[1], ("instant_now", now)),
                ("timer", timers[2], ("instant_now", now)),
                ("my_pe", timers[4], ("thread_local_read", plain)),
                ("cpv_with", timers[5], ("thread_local_read", plain)),
            ] {
                if common::wanted(name) {
                    push(name, ns, Some(base));
                }
            }
            barrier.wait();
        })
        .expect("runtime flags");
    for (name, ns, base) in rows.lock().unwrap().iter() {
        match base {
            Some((base, base_ns)) => common::line(name, *ns, "ns", base, *base_ns, "ns"),
            None => println!("bench {name} {ns:.1} ns baseline none"),
        }
    }
}
