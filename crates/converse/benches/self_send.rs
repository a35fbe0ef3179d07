//! One-PE self-send throughput (send, queue, dispatch), beside a plain
//! `VecDeque` push/pop loop of the same-sized item.
//!
//! `cargo bench -p converse --bench self_send`
//!
//! A handler passes the message it received back to its own PE until the
//! count is reached; each message costs one send, one scheduler step and
//! one handler dispatch. Three forms, one figure each:
//!
//! - `self_send_rate`: `sync_send_and_free` (the message moves on);
//! - `self_enqueue_rate`: `enqueue` (the PE's scheduler queue, FIFO at the
//!   middle priority), what every `CsdEnqueue` and seed costs;
//! - `self_send_copy_rate`: `sync_send` of a copy, the original dropped
//!   (an allocation and a free per message).
//!
//! Each figure is the best of three runs (the fastest time per message).
//!
//! `typed_pod_self_send_rate` and `typed_self_send_rate`: a `u64` counter
//! sent on to the same PE in a new message each hop through a typed
//! handler (`converse::pod_handler_slot`, its bytes; `handler_slot`,
//! postcard), each against the same with the byte API
//! (`bytes_self_send_rate`: `Message::from_payload` of its 8 bytes, read
//! back by hand), in the same job.
//!
//! `trace_overhead_self_send`: the `sync_send_and_free` loop in a job that
//! records a timeline (`+trace`, the default ring, which wraps) against
//! the same loop in a job that does not, run in turns in this process.
mod common;

use std::cell::Cell;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use converse::{Converse, Message};

/// How the handler passes its message on.
#[derive(Clone, Copy)]
enum Form {
    SendAndFree,
    Enqueue,
    SendCopy,
}

/// Nanoseconds per message for `form`, best of three runs (on a PE).
fn measure(form: Form, n: u64) -> f64 {
    let left = Rc::new(Cell::new(0u64));
    let (l, done) = (left.clone(), Rc::new(Cell::new(false)));
    let d = done.clone();
    let forward = converse::register_handler(move |msg: Message| {
        let k = l.get();
        if k == 0 {
            d.set(true);
            converse::exit_scheduler();
            return;
        }
        l.set(k - 1);
        match form {
            Form::SendAndFree => converse::sync_send_and_free(0, msg),
            Form::Enqueue => converse::enqueue(msg),
            Form::SendCopy => converse::sync_send(0, &msg),
        }
    });
    common::best_of(3, || {
        left.set(n);
        done.set(false);
        let t0 = Instant::now();
        converse::sync_send_and_free(0, Message::new(forward, 8));
        converse::schedule_forever();
        assert!(done.get(), "the scheduler stopped early");
        t0.elapsed().as_secs_f64() * 1e9 / n as f64
    })
}

/// The figures, in the order they are printed.
const FIGURES: [(&str, Form); 3] = [
    ("self_send_rate", Form::SendAndFree),
    ("self_enqueue_rate", Form::Enqueue),
    ("self_send_copy_rate", Form::SendCopy),
];

/// Nanoseconds per message of the `sync_send_and_free` loop in a job of
/// one PE started with `flags`.
fn send_and_free_in_job(flags: &[&str], n: u64) -> f64 {
    let ns: Arc<Mutex<f64>> = Arc::default();
    let out = ns.clone();
    let mut args = vec!["self_send", "+p", "1"];
    args.extend_from_slice(flags);
    Converse::new()
        .args(args)
        .run(move |_| {
            *out.lock().unwrap() = measure(Form::SendAndFree, n);
            converse::exit_scheduler();
        })
        .expect("runtime flags");
    *ns.lock().unwrap()
}

/// `trace_overhead_self_send`: traced and untraced jobs in turns, the best
/// of each.
fn trace_overhead(n: u64) {
    let file = std::env::temp_dir().join(format!("self_send_trace_{}.json", std::process::id()));
    let file = file.display().to_string();
    let (mut plain, mut traced) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..2 {
        plain = plain.min(send_and_free_in_job(&[], n));
        traced = traced.min(send_and_free_in_job(&["+trace", &file], n));
    }
    let _ = std::fs::remove_file(&file);
    common::line(
        "trace_overhead_self_send",
        1e3 / traced,
        "Mmsg/s",
        "self_send_untraced",
        1e3 / plain,
        "Mmsg/s",
    );
}

/// Nanoseconds per hop of a `u64` counter sent on to the same PE in a new
/// message each hop: through a typed handler (postcard, then `Pod`), or with the byte
/// API (`Message::from_payload` of its 8 bytes, read back by hand), best
/// of three runs each, in turns.
fn value_sends(n: u64) -> (f64, f64, f64) {
    let done = Rc::new(Cell::new(false));
    let d = done.clone();
    let pod_slot = converse::pod_handler_slot::<u64>();
    let pod = pod_slot.handler();
    pod_slot.fill(move |k: u64| {
        if k == 0 {
            d.set(true);
            converse::exit_scheduler();
        } else {
            pod.send(0, &(k - 1));
        }
    });
    let d = done.clone();
    let typed_slot = converse::handler_slot::<u64>();
    let typed = typed_slot.handler();
    typed_slot.fill(move |k: u64| {
        if k == 0 {
            d.set(true);
            converse::exit_scheduler();
        } else {
            typed.send(0, &(k - 1));
        }
    });
    let d = done.clone();
    let bytes = converse::register_handler(move |msg: Message| {
        let k = u64::from_le_bytes(msg.payload()[..8].try_into().unwrap());
        if k == 0 {
            d.set(true);
            converse::exit_scheduler();
        } else {
            let next = Message::from_payload(msg.handler(), &(k - 1).to_le_bytes());
            converse::sync_send_and_free(0, next);
        }
    });
    let run = |start: &dyn Fn()| {
        done.set(false);
        let t0 = Instant::now();
        start();
        converse::schedule_forever();
        assert!(done.get(), "the scheduler stopped early");
        t0.elapsed().as_secs_f64() * 1e9 / n as f64
    };
    let (mut t, mut p, mut b) = (f64::INFINITY, f64::INFINITY, f64::INFINITY);
    for _ in 0..3 {
        t = t.min(run(&|| typed.send(0, &n)));
        p = p.min(run(&|| pod.send(0, &n)));
        b = b.min(run(&|| {
            converse::sync_send_and_free(0, Message::from_payload(bytes, &n.to_le_bytes()))
        }));
    }
    (t, p, b)
}

fn main() {
    let n = common::iterations(20_000_000);
    if common::wanted("typed_self_send_rate") {
        let out: Arc<Mutex<(f64, f64, f64)>> = Arc::default();
        let o = out.clone();
        Converse::new()
            .args(["self_send", "+p", "1"])
            .run(move |_| {
                *o.lock().unwrap() = value_sends(n / 4);
                converse::exit_scheduler();
            })
            .expect("runtime flags");
        let (typed, pod, bytes) = *out.lock().unwrap();
        common::line(
            "typed_pod_self_send_rate",
            1e3 / pod,
            "Mmsg/s",
            "bytes_self_send_rate",
            1e3 / bytes,
            "Mmsg/s",
        );
        common::line(
            "typed_self_send_rate",
            1e3 / typed,
            "Mmsg/s",
            "bytes_self_send_rate",
            1e3 / bytes,
            "Mmsg/s",
        );
    }
    let figures: Arc<Mutex<Vec<Option<f64>>>> = Arc::default();
    let out = figures.clone();
    Converse::new()
        .args(["self_send", "+p", "1"])
        .run(move |_| {
            let measured =
                FIGURES.map(|(name, form)| common::wanted(name).then(|| measure(form, n)));
            *out.lock().unwrap() = measured.to_vec();
            converse::exit_scheduler();
        })
        .expect("runtime flags");
    let base = common::best_of(3, || common::vecdeque_push_pop_secs(n) * 1e9 / n as f64);
    let figures = figures.lock().unwrap();
    for ((name, _), ns) in FIGURES.iter().zip(figures.iter()) {
        let Some(ns) = ns else { continue };
        common::line(
            name,
            1e3 / ns,
            "Mmsg/s",
            "vecdeque_push_pop",
            1e3 / base,
            "Mops/s",
        );
    }
    drop(figures);
    if common::wanted("trace_overhead_self_send") {
        trace_overhead(n / 4);
    }
}
