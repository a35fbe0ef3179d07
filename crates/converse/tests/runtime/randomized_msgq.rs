//! `+randomized_msgq [seed]`: arrivals that Converse does not order among
//! themselves run in a seeded random order; what it promises (one
//! sender's messages in order, arrivals before queued work, priorities)
//! holds; a program that relies on an unpromised order fails.
//!
//! Each job makes its arrivals deterministic: PE 0 waits, in its start
//! function, until every message it will handle is in its queues, so the
//! only thing that orders them is the scheduler.
use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use converse::{Converse, Message, Queueing};

/// Messages each sender sends PE 0.
const EACH: u64 = 10;

/// What PE 0 handled, as (sender, k), in order.
type Order = Arc<Mutex<Vec<(u64, u64)>>>;

/// A job of `pes` PEs: PEs 1.. each send PE 0 `EACH` messages, PE 0
/// sends itself `EACH` (and queues `EACH` more, urgent but queued), waits
/// until all have arrived, then runs them. Returns the exit code and the
/// order PE 0 handled the arrivals in (the queued ones last, checked).
fn run_job(pes: usize, flags: &[&str]) -> (i32, Vec<(u64, u64)>) {
    let order: Order = Arc::new(Mutex::new(Vec::new()));
    let sent = Arc::new(AtomicUsize::new(0));
    let (o, s) = (order.clone(), sent.clone());
    let mut args = vec!["shuffle".to_string(), "+p".into(), pes.to_string()];
    args.extend(flags.iter().map(|f| f.to_string()));
    let total = (pes as u64 + 1) * EACH;
    let code = Converse::new()
        .args(args)
        .run(move |_| {
            let o = o.clone();
            let h = converse::register_handler(move |msg: Message| {
                let done = {
                    let mut o = o.lock().unwrap();
                    o.push((common::read_u64(&msg, 0), common::read_u64(&msg, 8)));
                    o.len() as u64 == total
                };
                if done {
                    converse::exit(0);
                }
            });
            let me = converse::my_pe() as u64;
            if me != 0 {
                for k in 0..EACH {
                    converse::sync_send_and_free(0, common::msg_u64(h, &[me, k]));
                }
                s.fetch_add(1, Ordering::Release);
                return;
            }
            for k in 0..EACH {
                converse::sync_send_and_free(0, common::msg_u64(h, &[0, k]));
                // Queued work, however urgent, runs after every arrival.
                converse::enqueue_general(common::msg_u64(h, &[99, k]), Queueing::IFifo(-1000));
            }
            while s.load(Ordering::Acquire) < pes - 1 {
                std::thread::yield_now();
            }
        })
        .unwrap();
    let order = std::mem::take(&mut *order.lock().unwrap());
    (code, order)
}

/// The arrivals of `order` (the queued ones, sender 99, must come last and
/// in their FIFO order), checked to keep each sender's order.
fn arrivals(order: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let split = order.len() - EACH as usize;
    let queued: Vec<(u64, u64)> = order[split..].to_vec();
    assert_eq!(
        queued,
        (0..EACH).map(|k| (99, k)).collect::<Vec<_>>(),
        "queued work after every arrival, in its order: {order:?}"
    );
    let arrived = order[..split].to_vec();
    for src in 0..=3 {
        let ks: Vec<u64> = arrived.iter().filter(|m| m.0 == src).map(|m| m.1).collect();
        assert!(
            ks.iter().copied().eq(0..ks.len() as u64),
            "sender {src}'s messages out of order: {arrived:?}"
        );
    }
    arrived
}

#[test]
fn one_seed_one_order_and_seeds_differ() {
    common::within(120, || {
        let (code, a) = run_job(4, &["+randomized_msgq", "11"]);
        assert_eq!(code, 0);
        let a = arrivals(&a);
        assert_eq!(a.len(), 40);
        let (code, b) = run_job(4, &["+randomized_msgq=11"]);
        assert_eq!(code, 0);
        assert_eq!(a, arrivals(&b), "one seed, one order");
        let mut others = 0;
        for seed in 12..16 {
            let (code, c) = run_job(4, &["+randomized_msgq", &seed.to_string()]);
            assert_eq!(code, 0);
            if arrivals(&c) != a {
                others += 1;
            }
        }
        assert!(
            others >= 3,
            "only {others} of 4 other seeds changed the order"
        );
        // The senders interleave: not one after the other as they reached
        // the inbox.
        let runs = a.windows(2).filter(|w| w[0].0 != w[1].0).count();
        assert!(runs > 10, "{runs} changes of sender in {a:?}");
    });
}

#[test]
fn without_the_flag_the_pass_order_stands() {
    if std::env::var_os(converse::machine::args::RANDOMIZED_MSGQ_ENV).is_some() {
        eprintln!(
            "skipped: {} is set",
            converse::machine::args::RANDOMIZED_MSGQ_ENV
        );
        return;
    }
    common::within(120, || {
        let (code, order) = run_job(2, &[]);
        assert_eq!(code, 0);
        // Inbox first (PE 1's, sent while PE 0 waited), then self-sends:
        // an order Converse does not promise, but this runtime keeps.
        let arrived = arrivals(&order);
        let expect: Vec<(u64, u64)> = (0..EACH)
            .map(|k| (1, k))
            .chain((0..EACH).map(|k| (0, k)))
            .collect();
        assert_eq!(arrived, expect);
    });
}

/// A program that relies on the inbox being taken before the PE's own
/// sends: it exits with 3 when that does not hold.
fn relying_program(flags: &[&str]) -> i32 {
    let (code, order) = run_job(2, flags);
    assert_eq!(code, 0);
    let arrived = arrivals(&order);
    let relied = arrived[..EACH as usize].iter().all(|m| m.0 == 1);
    if relied { 0 } else { 3 }
}

#[test]
fn a_program_relying_on_an_unpromised_order_fails_under_it() {
    common::within(120, || {
        for seed in ["1", "2", "3"] {
            assert_eq!(
                relying_program(&["+randomized_msgq", seed]),
                3,
                "seed {seed}"
            );
        }
        if std::env::var_os(converse::machine::args::RANDOMIZED_MSGQ_ENV).is_none() {
            assert_eq!(relying_program(&[]), 0);
        }
    });
}

#[test]
fn bad_seeds_are_refused_by_name() {
    for bad in [
        "+randomized_msgq=x",
        "+randomized_msgq=-1",
        "+randomized_msgq=18446744073709551616",
    ] {
        let err = Converse::new()
            .args(["t", "+p", "1", bad])
            .run(|_| converse::exit(0))
            .unwrap_err();
        assert!(err.to_string().contains("+randomized_msgq"), "{bad}: {err}");
    }
    // A word that is no number after the flag is the program's.
    let (flags, rest) =
        converse::machine::args::parse(&["t", "+randomized_msgq", "input.txt"].map(String::from))
            .unwrap();
    assert_eq!(
        flags.randomized_msgq,
        Some(converse::machine::args::MsgqSeed::Draw)
    );
    assert_eq!(rest, ["t", "input.txt"]);
}
