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

/// A `Pod` handler gets its value back bit for bit, through send,
/// broadcast and multicast; a bytes handler borrows what was sent.
#[test]
fn pod_and_bytes_values_arrive_whole() {
    let got: Arc<Mutex<Vec<(usize, String)>>> = Arc::new(Mutex::new(Vec::new()));
    let log = got.clone();
    // PE 0 hears 3 pod sends; PEs 1..4 hear one broadcast each; PEs 2 and
    // 3 hear one multicast of bytes each: 3 + 3 + 2 reports.
    let code = common::run(4, 2, move |_| {
        let log = log.clone();
        let done = converse::handler({
            let log = log.clone();
            move |(pe, what): (usize, String)| {
                let n = {
                    let mut log = log.lock().unwrap();
                    log.push((pe, what));
                    log.len()
                };
                if n == 8 {
                    converse::exit(0);
                }
            }
        });
        let pod = converse::pod_handler(move |v: [u64; 3]| {
            done.send(0, &(converse::my_pe(), format!("pod {v:?}")));
        });
        let bytes = converse::bytes_handler(move |b: &[u8]| {
            done.send(0, &(converse::my_pe(), format!("bytes {b:?}")));
        });
        let me = converse::my_pe();
        if me != 0 {
            pod.send(0, &[me as u64, u64::MAX, 0x0102_0304_0506_0708]);
        } else {
            pod.broadcast(&[7, 8, 9]);
            let group = converse::establish_group(&[2, 3]);
            bytes.multicast(group, &[1, 2, 255]);
        }
    });
    assert_eq!(code, 0);
    let mut got = got.lock().unwrap().clone();
    got.sort();
    let mut want = vec![];
    for pe in 1..4 {
        want.push((
            0,
            format!("pod [{pe}, 18446744073709551615, 72623859790382856]"),
        ));
        want.push((pe, "pod [7, 8, 9]".to_string()));
    }
    want.push((2, "bytes [1, 2, 255]".to_string()));
    want.push((3, "bytes [1, 2, 255]".to_string()));
    want.sort();
    assert_eq!(got, want);
}

/// `enqueue_with` runs values by priority: smaller integer priorities
/// first, whatever order they were enqueued in.
#[test]
fn enqueued_values_run_by_priority() {
    let order: Arc<Mutex<Vec<i32>>> = Arc::new(Mutex::new(Vec::new()));
    let log = order.clone();
    let code = common::run(1, 1, move |_| {
        let log = log.clone();
        let work = converse::pod_handler(move |prio: i32| {
            let n = {
                let mut log = log.lock().unwrap();
                log.push(prio);
                log.len()
            };
            if n == 5 {
                converse::exit(0);
            }
        });
        for prio in [3, -2, 10, 0, -7] {
            work.enqueue_with(&prio, converse::Queueing::IFifo(prio));
        }
    });
    assert_eq!(code, 0);
    assert_eq!(*order.lock().unwrap(), vec![-7, -2, 0, 3, 10]);
}

/// A function that logs what it is given with the calling PE, and ends
/// the job once `all` entries are in.
fn recorder(log: Arc<Mutex<Vec<(usize, String)>>>, all: usize) -> impl Fn(String) + Clone {
    move |what: String| {
        let n = {
            let mut log = log.lock().unwrap();
            log.push((converse::my_pe(), what));
            log.len()
        };
        if n == all {
            converse::exit(0);
        }
    }
}

/// Typed reductions end in a typed handler on their root: by call order
/// over every PE, by ID, and over a PE list (the result on its first PE).
#[test]
fn typed_reductions_end_in_their_handler() {
    let results: Arc<Mutex<Vec<(usize, String)>>> = Arc::new(Mutex::new(Vec::new()));
    let log = results.clone();
    let code = common::run(6, 2, move |_| {
        let record = recorder(log.clone(), 3);
        let r = record.clone();
        let sum = converse::handler(move |s: u64| r(format!("sum {s}")));
        let r = record.clone();
        let extremes = converse::handler(move |(lo, hi): (i64, i64)| r(format!("lo {lo} hi {hi}")));
        let names = converse::handler(move |v: Vec<String>| record(format!("names {v:?}")));
        let id = converse::global_reduction_id();
        let list_id = converse::global_reduction_id();
        let me = converse::my_pe();
        converse::reduction(me as u64 * 10, |a, rest| a + rest.iter().sum::<u64>()).then(sum);
        let v = me as i64 - 2;
        converse::reduction((v, v), |(lo, hi), rest| {
            rest.iter()
                .fold((lo, hi), |(l, h), &(a, b)| (l.min(a), h.max(b)))
        })
        .by_id(id)
        .then(extremes);
        if [4, 1, 3].contains(&me) {
            converse::reduction(vec![format!("pe{me}")], |mut a, rest| {
                a.extend(rest.into_iter().flatten());
                a.sort();
                a
            })
            .over(&[4, 1, 3], list_id)
            .then(names);
        }
    });
    assert_eq!(code, 0);
    let mut got = results.lock().unwrap().clone();
    got.sort();
    assert_eq!(
        got,
        vec![
            (0, "lo -2 hi 3".to_string()),
            (0, "sum 150".to_string()),
            (4, r#"names ["pe1", "pe3", "pe4"]"#.to_string()),
        ]
    );
}

/// `exit_on_quiescence` ends a job whose work dies down with code 0, once
/// every message has run; and a program's own exit code still wins.
#[test]
fn a_job_ends_when_quiescent() {
    let hops = Arc::new(Mutex::new(0u32));
    let h = hops.clone();
    let code = converse::Converse::new()
        .args(common::args(3, 1))
        .exit_on_quiescence()
        .run(move |_| {
            let h = h.clone();
            let slot = converse::pod_handler_slot::<u32>();
            let next = slot.handler();
            slot.fill(move |left: u32| {
                *h.lock().unwrap() += 1;
                if left > 0 {
                    next.send((converse::my_pe() + 1) % converse::num_pes(), &(left - 1));
                }
            });
            if converse::my_pe() == 0 {
                next.send(1, &20);
            }
        })
        .unwrap();
    assert_eq!(code, 0);
    assert_eq!(*hops.lock().unwrap(), 21);
    let code = converse::Converse::new()
        .args(common::args(2, 1))
        .exit_on_quiescence()
        .run(|_| {
            if converse::my_pe() == 1 {
                converse::exit(6);
            }
        })
        .unwrap();
    assert_eq!(code, 6);
}

/// `Converse::main` gives the job's exit code as the process's status,
/// and a job that cannot start as status 1.
#[test]
fn main_returns_the_exit_status() {
    use std::process::ExitCode;
    let status = converse::Converse::new()
        .args(common::args(2, 1))
        .main(|_| converse::exit(3));
    assert_eq!(status, ExitCode::from(3));
    let status = converse::Converse::new()
        .args(["prog", "+p", "zero"])
        .main(|_| converse::exit(0));
    assert_eq!(status, ExitCode::FAILURE);
}

/// `then_run`: the root's own function gets the result, by call order, by
/// ID and over a PE list (whose root is its first PE); the other PEs'
/// functions never run and are dropped.
#[test]
fn a_reduction_ends_in_the_roots_function() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static DROPPED: AtomicUsize = AtomicUsize::new(0);
    struct Counted;
    impl Drop for Counted {
        fn drop(&mut self) {
            DROPPED.fetch_add(1, Ordering::SeqCst);
        }
    }
    DROPPED.store(0, Ordering::SeqCst);
    let results: Arc<Mutex<Vec<(usize, String)>>> = Arc::new(Mutex::new(Vec::new()));
    let log = results.clone();
    let code = common::run(4, 2, move |_| {
        let me = converse::my_pe();
        let record = recorder(log.clone(), 3);
        let id = converse::global_reduction_id();
        let list_id = converse::global_reduction_id();
        let add = |a: u64, rest: Vec<u64>| a + rest.iter().sum::<u64>();
        let (r, counted) = (record.clone(), Counted);
        converse::reduction(me as u64, add).then_run(move |sum| {
            let _keep = &counted;
            r(format!("order {sum}"));
        });
        let r = record.clone();
        converse::reduction(vec![me], |mut a, rest| {
            a.extend(rest.into_iter().flatten());
            a.sort();
            a
        })
        .by_id(id)
        .then_run(move |all| r(format!("id {all:?}")));
        if me != 0 {
            converse::reduction(1u64 << me, add)
                .over(&[3, 1, 2], list_id)
                .then_run(move |bits| record(format!("list {bits}")));
        }
    });
    assert_eq!(code, 0);
    let mut got = results.lock().unwrap().clone();
    got.sort();
    assert_eq!(
        got,
        vec![
            (0, "id [0, 1, 2, 3]".to_string()),
            (0, "order 6".to_string()),
            (3, "list 14".to_string()),
        ]
    );
    // Four PEs each gave a `Counted` to the first reduction: all dropped
    // (the root's after it ran).
    assert_eq!(DROPPED.load(Ordering::SeqCst), 4);
}
