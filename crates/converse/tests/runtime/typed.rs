//! Typed handlers (`converse::handler`, `converse::handler_slot`): values
//! of any serde type arrive whole through every way of sending, and slots
//! let handlers that send to each other be registered in any order.
use crate::common;

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Reading {
    from: usize,
    label: String,
    values: Vec<f64>,
}

fn reading(from: usize, label: &str) -> Reading {
    Reading {
        from,
        label: label.into(),
        values: vec![from as f64, 0.5, -1e9],
    }
}

/// `send`, `broadcast`, `broadcast_all` and `enqueue` each bring the value
/// whole, to the PEs they name.
#[test]
fn values_arrive_whole_through_every_send() {
    let got: Arc<Mutex<Vec<(usize, Reading)>>> = Arc::new(Mutex::new(Vec::new()));
    let pes = 4;
    // To PE 0: 3 sends and 3 enqueues of its own; broadcast from PE 1 to
    // 3 PEs, broadcast_all from PE 2 to 4.
    let total = 3 + 1 + 3 + 4;
    let log = got.clone();
    let code = common::run(pes, 2, move |_| {
        let log = log.clone();
        let h = converse::handler(move |r: Reading| {
            let done = {
                let mut log = log.lock().unwrap();
                log.push((converse::my_pe(), r));
                log.len() == total
            };
            if done {
                converse::exit(0);
            }
        });
        let me = converse::my_pe();
        if me != 0 {
            h.send(0, &reading(me, "send"));
        } else {
            h.enqueue(&reading(0, "enqueue"));
        }
        if me == 1 {
            h.broadcast(&reading(1, "broadcast"));
        }
        if me == 2 {
            h.broadcast_all(&reading(2, "all"));
        }
    });
    assert_eq!(code, 0);
    let got = got.lock().unwrap();
    let count = |label: &str, at: Option<usize>| {
        got.iter()
            .filter(|(pe, r)| r.label == label && at.is_none_or(|a| a == *pe))
            .count()
    };
    assert_eq!(count("send", Some(0)), 3);
    assert_eq!(count("enqueue", Some(0)), 1);
    assert_eq!(count("broadcast", None), 3);
    assert!(got.iter().all(|(pe, r)| r.label != "broadcast" || *pe != 1));
    assert_eq!(count("all", None), 4);
    for (_, r) in got.iter() {
        assert_eq!(*r, reading(r.from, &r.label));
    }
}

/// Two handlers that send to each other: the one registered first sends
/// to the one registered after it through a slot, filled once both exist.
#[test]
fn a_slot_lets_handlers_send_to_each_other_in_any_order() {
    let code = common::run(2, 1, |_| {
        let pong_slot = converse::handler_slot::<u32>();
        let pong_handler = pong_slot.handler();
        let ping = converse::handler(move |n: u32| pong_handler.send(0, &(n + 1)));
        pong_slot.fill(move |n: u32| {
            if n >= 10 {
                converse::exit(i32::try_from(n).unwrap());
            } else {
                ping.send(1, &(n + 1));
            }
        });
        if converse::my_pe() == 0 {
            ping.send(1, &0);
        }
    });
    // 0 → 1 → 2 … : pong sees 1, 3, 5, 7, 9, 11.
    assert_eq!(code, 11);
}
