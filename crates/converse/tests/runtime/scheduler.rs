//! The scheduler (Csd): pass order, priorities, node and PE queues, the
//! scheduler entry points, `deliver_msgs`, `deliver_specific_msg`, and the
//! three ways of running a job.
use crate::common;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use converse::csd::{is_empty, length, node_is_empty};
use converse::{BitPrio, Converse, Message, Queueing, my_pe};

/// Tags (the first payload word) of the messages handled on one PE, in order.
type Tags = Rc<RefCell<Vec<u64>>>;

/// A handler that appends each message's tag to `tags`.
fn tagger(tags: &Tags) -> impl Fn(Message) + 'static {
    let tags = tags.clone();
    move |msg: Message| tags.borrow_mut().push(common::read_u64(&msg, 0))
}

fn tagged(handler: usize, tag: u64) -> Message {
    common::msg_u64(handler, &[tag])
}

fn take(tags: &Tags) -> Vec<u64> {
    std::mem::take(&mut *tags.borrow_mut())
}

#[test]
fn arrived_messages_run_before_queued_ones() {
    let order = Arc::new(Mutex::new(Vec::new()));
    let o = order.clone();
    let code = common::run(1, 1, move |_| {
        let o = o.clone();
        let h = converse::register_handler(move |msg: Message| {
            let done = {
                let mut o = o.lock().unwrap();
                o.push(common::read_u64(&msg, 0));
                o.len() == 2
            };
            if done {
                converse::exit(0); // unwinds: hold no lock
            }
        });
        converse::enqueue_general(tagged(h, 1), Queueing::IFifo(-1000));
        converse::sync_send(0, &tagged(h, 2));
    });
    assert_eq!(code, 0);
    assert_eq!(
        *order.lock().unwrap(),
        [2, 1],
        "the sent message runs first"
    );
}

#[test]
fn messages_from_other_pes_run_before_queued_ones() {
    let code = common::run_user(2, 2, |_| {
        let tags = Tags::default();
        let h = converse::register_handler(tagger(&tags));
        let ready = converse::register_handler(|_msg: Message| {});
        if my_pe() == 1 {
            converse::sync_send(0, &tagged(h, 2));
            converse::sync_send(0, &Message::new(ready, 0));
        } else {
            converse::enqueue_general(tagged(h, 1), Queueing::IFifo(i32::MIN));
            converse::node_enqueue_general(tagged(h, 3), Queueing::IFifo(i32::MIN + 1));
            // Once `ready` ran, the message sent before it has arrived too.
            converse::deliver_specific_msg(ready);
            assert!(take(&tags).is_empty());
            converse::schedule_poll();
            // Arrived first, however urgent the queued ones.
            assert_eq!(take(&tags), [2, 1, 3]);
        }
    });
    assert_eq!(code, 0);
}

#[test]
fn priorities_order_the_queue_on_every_pe() {
    // +p 8 on a small machine: oversubscribed.
    let checked = Arc::new(AtomicUsize::new(0));
    let c = checked.clone();
    let code = common::run_user(8, 8, move |_| {
        let tags = Tags::default();
        let h = converse::register_handler(tagger(&tags));
        // .01: more urgent than every integer priority above -2^30.
        let quarter = BitPrio::new(2, &[0x4000_0000]).unwrap();
        // .1 written with one bit: the middle priority.
        let middle = BitPrio::new(1, &[0x8000_0000]).unwrap();
        let items = [
            (0, Queueing::IFifo(5)),
            (1, Queueing::IFifo(-5)),
            (2, Queueing::ILifo(5)),
            (3, Queueing::Fifo),
            (4, Queueing::IFifo(0)),
            (5, Queueing::Lifo),
            (6, Queueing::ILifo(0)),
            (7, Queueing::BFifo(quarter)),
            (8, Queueing::BFifo(middle.clone())),
            (9, Queueing::LFifo(0)),
            (10, Queueing::IFifo(i32::MAX)),
            (11, Queueing::BLifo(middle)),
            (12, Queueing::IFifo(-5)),
            (13, Queueing::LLifo(-1)),
        ];
        assert!(is_empty());
        for (tag, q) in items {
            converse::enqueue_general(tagged(h, tag), q);
        }
        assert!(!is_empty());
        converse::schedule_poll();
        assert!(is_empty());
        // Smaller first; among equals the LIFO items newest first, then the
        // FIFO items oldest first. Integer, long and bit-vector 0/.1 and the
        // plain Fifo/Lifo are all the middle priority.
        assert_eq!(
            take(&tags),
            [7, 1, 12, 13, 11, 6, 5, 3, 4, 8, 9, 2, 0, 10],
            "on PE {}",
            my_pe()
        );
        c.fetch_add(1, Ordering::Relaxed);
    });
    assert_eq!(code, 0);
    assert_eq!(checked.load(Ordering::Relaxed), 8);
}

#[test]
fn node_queue_and_pe_queue_compete_by_priority() {
    let code = common::run_user(1, 1, |_| {
        let tags = Tags::default();
        let h = converse::register_handler(tagger(&tags));
        assert!(is_empty() && node_is_empty());

        converse::enqueue_general(tagged(h, 1), Queueing::IFifo(0));
        converse::node_enqueue_general(tagged(h, 2), Queueing::IFifo(-1));
        assert!(!is_empty() && !node_is_empty());
        converse::schedule_poll();
        assert_eq!(take(&tags), [2, 1], "the more urgent node message first");
        assert!(is_empty() && node_is_empty());

        converse::enqueue_general(tagged(h, 3), Queueing::IFifo(-1));
        converse::node_enqueue_general(tagged(h, 4), Queueing::IFifo(0));
        converse::schedule_poll();
        assert_eq!(take(&tags), [3, 4], "the more urgent PE message first");

        // Long and bit-vector priorities compare in the same space: .1 is
        // more urgent than .1000…01, and long -1 than .1.
        let just_after_middle = BitPrio::new(64, &[0x8000_0000, 1]).unwrap();
        converse::node_enqueue_general(tagged(h, 8), Queueing::BFifo(just_after_middle));
        converse::enqueue_general(tagged(h, 9), Queueing::Fifo);
        converse::schedule_poll();
        assert_eq!(take(&tags), [9, 8]);
        converse::enqueue_general(tagged(h, 10), Queueing::IFifo(0));
        converse::node_enqueue_general(tagged(h, 11), Queueing::LLifo(-1));
        converse::schedule_poll();
        assert_eq!(take(&tags), [11, 10]);

        // Only the node queue non-empty.
        converse::node_enqueue_general(tagged(h, 5), Queueing::IFifo(7));
        assert!(is_empty() && !node_is_empty());
        converse::schedule_poll();
        assert_eq!(take(&tags), [5]);

        // Arrived messages before the node queue, however urgent.
        converse::node_enqueue_general(tagged(h, 6), Queueing::IFifo(i32::MIN));
        converse::sync_send(0, &tagged(h, 7));
        converse::schedule_poll();
        assert_eq!(take(&tags), [7, 6]);
    });
    assert_eq!(code, 0);
}

#[test]
fn enqueue_shorthands() {
    let code = common::run_user(1, 1, |_| {
        let tags = Tags::default();
        let h = converse::register_handler(tagger(&tags));
        converse::enqueue(tagged(h, 1));
        converse::enqueue_fifo(tagged(h, 2));
        converse::enqueue_lifo(tagged(h, 3));
        converse::enqueue(tagged(h, 4));
        converse::enqueue_lifo(tagged(h, 5));
        assert!(!is_empty() && node_is_empty());
        converse::schedule_poll();
        assert_eq!(take(&tags), [5, 3, 1, 2, 4]);

        converse::node_enqueue(tagged(h, 1));
        converse::node_enqueue_fifo(tagged(h, 2));
        converse::node_enqueue_lifo(tagged(h, 3));
        converse::node_enqueue(tagged(h, 4));
        converse::node_enqueue_lifo(tagged(h, 5));
        assert!(is_empty() && !node_is_empty());
        converse::schedule_poll();
        assert_eq!(take(&tags), [5, 3, 1, 2, 4]);
        assert!(node_is_empty());
    });
    assert_eq!(code, 0);
}

#[test]
fn length_counts_the_pe_queue_only() {
    // One PE per node, so the node queue's message can only run on PE 0.
    let code = common::run_user(2, 1, |_| {
        let tags = Tags::default();
        let h = converse::register_handler(tagger(&tags));
        let ready = converse::register_handler(|_msg: Message| {});
        if my_pe() == 1 {
            converse::sync_send(0, &tagged(h, 9));
            converse::sync_send(0, &Message::new(ready, 0));
            return;
        }
        assert_eq!(length(), 0);
        converse::enqueue(tagged(h, 1));
        converse::enqueue_lifo(tagged(h, 2));
        converse::enqueue_general(tagged(h, 3), Queueing::IFifo(-5));
        converse::enqueue_general(
            tagged(h, 4),
            Queueing::BLifo(BitPrio::new(2, &[0x4000_0000]).unwrap()),
        );
        assert_eq!(length(), 4);
        // An awakened thread waits in the same queue.
        let ran = Rc::new(Cell::new(false));
        let r = ran.clone();
        converse::Thread::create(move || r.set(true), 0).awaken();
        assert_eq!(length(), 5);
        // Not counted: the node queue, messages sent to self, arrived ones.
        converse::node_enqueue(tagged(h, 5));
        converse::sync_send(0, &tagged(h, 6));
        assert_eq!(length(), 5);
        assert!(!is_empty());
        converse::deliver_specific_msg(ready);
        assert!(take(&tags).is_empty(), "only `ready` ran");
        assert_eq!(length(), 5, "the arrived message is not in the queue");
        converse::schedule_poll();
        assert_eq!(length(), 0);
        assert!(is_empty() && ran.get());
        let mut all = take(&tags);
        all.sort();
        assert_eq!(all, [1, 2, 3, 4, 5, 6, 9]);
    });
    assert_eq!(code, 0);
}

#[test]
fn node_queue_messages_run_once_on_a_pe_of_their_node() {
    const PER_PE: u64 = 100;
    let ran = Arc::new(Mutex::new(Vec::new()));
    let r = ran.clone();
    let code = common::run(8, 4, move |_| {
        let r = r.clone();
        let h = converse::register_handler(move |msg: Message| {
            let done = {
                let mut r = r.lock().unwrap();
                r.push((common::read_u64(&msg, 0), my_pe()));
                r.len() as u64 == 8 * PER_PE
            };
            if done {
                converse::exit(0);
            }
        });
        for i in 0..PER_PE {
            let msg = tagged(h, my_pe() as u64 * PER_PE + i);
            match i % 3 {
                0 => converse::node_enqueue(msg),
                1 => converse::node_enqueue_lifo(msg),
                _ => converse::node_enqueue_general(msg, Queueing::IFifo(i as i32)),
            }
        }
    });
    assert_eq!(code, 0);
    let ran = ran.lock().unwrap();
    let mut count: HashMap<u64, usize> = HashMap::new();
    for &(id, pe) in ran.iter() {
        let origin = (id / PER_PE) as usize;
        assert_eq!(
            pe / 4,
            origin / 4,
            "message {id} from PE {origin} ran on PE {pe}"
        );
        *count.entry(id).or_default() += 1;
    }
    assert_eq!(count.len() as u64, 8 * PER_PE);
    assert!(count.values().all(|&n| n == 1));
}

#[test]
fn schedule_count_poll_and_scheduler_n() {
    let code = common::run_user(1, 1, |_| {
        let tags = Tags::default();
        let h = converse::register_handler(tagger(&tags));
        let stop = {
            let tags = tags.clone();
            converse::register_handler(move |_msg: Message| {
                tags.borrow_mut().push(u64::MAX);
                converse::exit_scheduler();
            })
        };
        for tag in 0..5 {
            converse::sync_send(0, &tagged(h, tag));
        }
        assert_eq!(converse::schedule_count(3), 0);
        assert_eq!(take(&tags), [0, 1, 2]);
        assert_eq!(converse::scheduler(2), 0);
        assert_eq!(take(&tags), [3, 4]);
        // Nothing ready: polling returns at once.
        converse::schedule_poll();
        assert_eq!(converse::scheduler(0), 0);
        assert!(take(&tags).is_empty());
        assert_eq!(converse::schedule_count(0), 0);

        // Queued messages count as delivered too.
        converse::enqueue(tagged(h, 5));
        converse::sync_send(0, &tagged(h, 6));
        assert_eq!(converse::scheduler(2), 0);
        assert_eq!(take(&tags), [6, 5]);

        // A scheduler stopped early returns n minus the number delivered.
        converse::sync_send(0, &tagged(h, 7));
        converse::sync_send(0, &Message::new(stop, 0));
        converse::sync_send(0, &tagged(h, 8));
        assert_eq!(converse::schedule_count(10), 8);
        assert_eq!(take(&tags), [7, u64::MAX]);
        converse::schedule_poll();
        assert_eq!(take(&tags), [8]);

        // schedule_forever and scheduler(-1) run until a handler stops them.
        converse::sync_send(0, &tagged(h, 9));
        converse::sync_send(0, &Message::new(stop, 0));
        converse::sync_send(0, &tagged(h, 10));
        converse::schedule_forever();
        assert_eq!(take(&tags), [9, u64::MAX]);
        converse::sync_send(0, &Message::new(stop, 0));
        assert_eq!(converse::scheduler(-1), 0);
        assert_eq!(take(&tags), [10, u64::MAX]);

        // A stop requested outside any scheduler stops the next one.
        converse::exit_scheduler();
        converse::sync_send(0, &tagged(h, 11));
        converse::schedule_forever();
        assert!(take(&tags).is_empty());
        converse::schedule_poll();
        assert_eq!(take(&tags), [11]);
    });
    assert_eq!(code, 0);
}

#[test]
fn schedule_count_waits_for_messages_from_other_pes() {
    let code = common::run_user(4, 2, |_| {
        let tags = Tags::default();
        let h = converse::register_handler(tagger(&tags));
        if my_pe() != 0 {
            for i in 0..10 {
                converse::sync_send(0, &tagged(h, my_pe() as u64 * 100 + i));
            }
        } else {
            assert_eq!(converse::schedule_count(30), 0);
            let mut got = take(&tags);
            got.sort();
            let expected: Vec<u64> = (1..4)
                .flat_map(|p| (0..10).map(move |i| p * 100 + i))
                .collect();
            assert_eq!(got, expected);
        }
    });
    assert_eq!(code, 0);
}

#[test]
fn exit_scheduler_in_a_handler_stops_schedule_forever() {
    // Normal mode: each PE's scheduler stops when its `stop` message runs;
    // the job then ends by itself with code 0.
    let stopped = Arc::new(AtomicUsize::new(0));
    let s = stopped.clone();
    let code = common::run(2, 2, move |_| {
        let s = s.clone();
        let stop = converse::register_handler(move |_msg: Message| {
            s.fetch_add(1, Ordering::Relaxed);
            converse::exit_scheduler();
        });
        if my_pe() == 0 {
            converse::sync_send(1, &Message::new(stop, 0));
            converse::sync_send(0, &Message::new(stop, 0));
        }
    });
    assert_eq!(code, 0);
    assert_eq!(stopped.load(Ordering::Relaxed), 2);

    // User-calls-scheduler mode: schedule_forever returns to its caller.
    let returned = Arc::new(AtomicUsize::new(0));
    let r = returned.clone();
    let code = common::run_user(2, 2, move |_| {
        let stop = converse::register_handler(|_msg: Message| converse::exit_scheduler());
        converse::sync_send((my_pe() + 1) % 2, &Message::new(stop, 0));
        converse::schedule_forever();
        r.fetch_add(1, Ordering::Relaxed);
    });
    assert_eq!(code, 0);
    assert_eq!(returned.load(Ordering::Relaxed), 2);
}

#[test]
fn nested_schedulers_inside_a_handler() {
    let code = common::run_user(1, 1, |_| {
        let tags = Tags::default();
        let h = converse::register_handler(tagger(&tags));
        let stop = converse::register_handler(|_msg: Message| converse::exit_scheduler());
        let outer = {
            let tags = tags.clone();
            converse::register_handler(move |msg: Message| {
                let kind = common::read_u64(&msg, 0);
                tags.borrow_mut().push(100 + kind);
                converse::sync_send(0, &tagged(h, 1));
                converse::sync_send(0, &tagged(h, 2));
                match kind {
                    // A nested poll delivers the messages sent meanwhile.
                    0 => converse::schedule_poll(),
                    // A stop delivered by a nested schedule_forever stops
                    // every scheduler running then (Converse's CsdStopFlag):
                    // the nested one, and the outer once control is back.
                    _ => {
                        converse::sync_send(0, &Message::new(stop, 0));
                        converse::sync_send(0, &tagged(h, 3));
                        converse::schedule_forever();
                    }
                }
                tags.borrow_mut().push(200 + kind);
            })
        };
        converse::sync_send(0, &tagged(outer, 0));
        converse::sync_send(0, &tagged(h, 50));
        converse::schedule_poll();
        assert_eq!(take(&tags), [100, 50, 1, 2, 200]);

        converse::sync_send(0, &tagged(outer, 1));
        assert_eq!(
            converse::schedule_count(2),
            1,
            "the stop reaches the outer scheduler too, after one delivery"
        );
        assert_eq!(take(&tags), [101, 1, 2, 201]);
        // A scheduler started after the stop is not affected by it.
        converse::schedule_poll();
        assert_eq!(take(&tags), [3]);
    });
    assert_eq!(code, 0);
}

#[test]
fn deliver_msgs_delivers_arrived_messages_only() {
    let code = common::run_user(2, 2, |_| {
        let tags = Tags::default();
        let h = converse::register_handler(tagger(&tags));
        if my_pe() == 1 {
            for tag in 10..14 {
                converse::sync_send(0, &tagged(h, tag));
            }
            return;
        }
        converse::enqueue_general(tagged(h, 99), Queueing::IFifo(i32::MIN));
        converse::node_enqueue(tagged(h, 98));
        assert_eq!(converse::deliver_msgs(0), 0);
        let mut left = 4;
        while left > 0 {
            // PE 1's messages arrive whenever they do; count them down.
            left = converse::deliver_msgs(left);
        }
        assert_eq!(take(&tags), [10, 11, 12, 13]);
        for tag in 0..3 {
            converse::sync_send(0, &tagged(h, tag));
        }
        assert_eq!(converse::deliver_msgs(10), 7);
        assert_eq!(take(&tags), [0, 1, 2]);
        // Nothing arrived is left; the queued messages are not delivered.
        assert_eq!(converse::deliver_msgs(10), 10);
        assert!(take(&tags).is_empty());
        assert!(!is_empty() && !node_is_empty());

        for tag in 3..6 {
            converse::sync_send(0, &tagged(h, tag));
        }
        assert_eq!(converse::deliver_msgs(2), 0);
        assert_eq!(take(&tags), [3, 4]);
        converse::schedule_poll();
        assert_eq!(take(&tags), [5, 99, 98]);
    });
    assert_eq!(code, 0);
}

#[test]
fn deliver_specific_msg_runs_only_the_first_match() {
    let code = common::run_user(2, 2, |_| {
        let tags = Tags::default();
        let a = converse::register_handler(tagger(&tags));
        let b = converse::register_handler(tagger(&tags));
        let done = converse::register_handler(|_msg: Message| {});
        if my_pe() == 1 {
            converse::sync_send(0, &tagged(a, 1));
            converse::sync_send(0, &tagged(b, 2));
            converse::sync_send(0, &tagged(a, 3));
            converse::sync_send(0, &tagged(b, 4));
            // A bundle holding the target between two other messages.
            let (m5, m6, m7) = (tagged(a, 5), tagged(b, 6), tagged(a, 7));
            converse::multiple_send(0, &[&m5, &m6, &m7]);
            converse::sync_send(0, &tagged(a, 8));
            converse::sync_send(0, &Message::new(done, 0));
            return;
        }
        converse::enqueue_general(tagged(a, 99), Queueing::IFifo(i32::MIN));
        // Waits for the arrival, runs the first b only.
        converse::deliver_specific_msg(b);
        assert_eq!(take(&tags), [2]);
        // Wait until everything from PE 1 has arrived (and is set aside).
        converse::deliver_specific_msg(done);
        assert!(take(&tags).is_empty());
        // The scheduler runs the other messages in their original order,
        // before the (more urgent) queued message.
        assert_eq!(converse::schedule_count(2), 0);
        assert_eq!(take(&tags), [1, 3]);
        converse::deliver_specific_msg(b);
        assert_eq!(take(&tags), [4]);
        // The target inside a bundle: only it runs.
        converse::deliver_specific_msg(b);
        assert_eq!(take(&tags), [6]);
        assert_eq!(converse::schedule_count(4), 0);
        assert_eq!(take(&tags), [5, 7, 8, 99]);

        // The same with self-sends.
        converse::sync_send(0, &tagged(a, 11));
        converse::sync_send(0, &tagged(b, 12));
        converse::sync_send(0, &tagged(a, 13));
        converse::deliver_specific_msg(b);
        assert_eq!(take(&tags), [12]);
        converse::schedule_poll();
        assert_eq!(take(&tags), [11, 13]);
    });
    assert_eq!(code, 0);
}

#[test]
fn deliver_specific_msg_leaves_node_messages_to_the_other_pes() {
    // Node 0 is PEs 0 and 1. PE 0 waits in deliver_specific_msg for replies
    // that only the node messages' handler sends; PE 1 is free to run them.
    // Were PE 0 to take a node message aside while it waits, no PE could run
    // it and the job would hang: run under a hang detector. PE 1 starts late
    // so that PE 0 is the only PE of the node polling when they arrive (the
    // result does not depend on it).
    const ROUNDS: usize = 20;
    let code = common::within(5, || {
        common::run_user(4, 2, |_| {
            let replies = Rc::new(Cell::new(0));
            let reply = {
                let replies = replies.clone();
                converse::register_handler(move |_msg: Message| replies.set(replies.get() + 1))
            };
            let work = converse::register_handler(move |_msg: Message| {
                assert_eq!(converse::my_node(), 0);
                converse::sync_send(0, &Message::new(reply, 0));
            });
            let stop = converse::register_handler(|_msg: Message| converse::exit_scheduler());
            match my_pe() {
                0 => {
                    for _ in 0..ROUNDS {
                        converse::deliver_specific_msg(reply);
                    }
                    assert_eq!(replies.get(), ROUNDS);
                    converse::sync_send(1, &Message::new(stop, 0));
                }
                1 => {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    converse::schedule_forever();
                }
                2 => {
                    for _ in 0..ROUNDS {
                        converse::sync_node_send(0, &Message::new(work, 0));
                    }
                }
                _ => {}
            }
        })
    });
    assert_eq!(code, 0);
}

#[test]
fn node_message_wakes_a_pe_that_will_run_it() {
    // Node 0 is PEs 0 and 1. PE 1 parks in its scheduler first; then PE 0
    // parks in deliver_specific_msg (it waits for its own messages only);
    // then PE 2 sends node 0 a message. The wake-up must go to PE 1, which
    // runs it: waking PE 0 instead would leave the message unrun and the job
    // hung.
    let code = common::within(10, || {
        common::run_user(4, 2, |_| {
            let reply = converse::register_handler(|_msg: Message| {});
            let work = converse::register_handler(move |_msg: Message| {
                assert_eq!(my_pe(), 1);
                converse::sync_send(0, &Message::new(reply, 0));
            });
            let stop = converse::register_handler(|_msg: Message| converse::exit_scheduler());
            match my_pe() {
                0 => {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    converse::deliver_specific_msg(reply);
                    converse::sync_send(1, &Message::new(stop, 0));
                }
                1 => converse::schedule_forever(),
                2 => {
                    std::thread::sleep(std::time::Duration::from_millis(200));
                    converse::sync_node_send(0, &Message::new(work, 0));
                }
                _ => {}
            }
        })
    });
    assert_eq!(code, 0);
}

#[test]
fn schedule_count_counts_each_message_of_a_multiple_send() {
    let code = common::run_user(1, 1, |_| {
        let tags = Tags::default();
        let h = converse::register_handler(tagger(&tags));
        let (m0, m1, m2) = (tagged(h, 0), tagged(h, 1), tagged(h, 2));
        converse::multiple_send(0, &[&m0, &m1, &m2]);
        // "Delivered in order, as if sent one by one": three messages.
        assert_eq!(converse::schedule_count(3), 0);
        assert_eq!(
            take(&tags),
            [0, 1, 2],
            "schedule_count(3) ran three handlers"
        );
    });
    assert_eq!(code, 0);
}

#[test]
fn deliver_msgs_counts_each_message_of_a_multiple_send() {
    let code = common::run_user(1, 1, |_| {
        let tags = Tags::default();
        let h = converse::register_handler(tagger(&tags));
        let (m0, m1, m2) = (tagged(h, 0), tagged(h, 1), tagged(h, 2));
        converse::multiple_send(0, &[&m0, &m1, &m2]);
        assert_eq!(converse::deliver_msgs(10), 7, "three messages delivered");
        assert_eq!(take(&tags), [0, 1, 2]);
        converse::multiple_send(0, &[&m0, &m1, &m2]);
        assert_eq!(converse::deliver_msgs(2), 0);
        assert_eq!(take(&tags), [0, 1], "deliver_msgs(2) ran two handlers");
    });
    assert_eq!(code, 0);
}

#[test]
fn normal_mode_returns_the_exit_code() {
    let code = common::run(3, 1, |_| {
        let quit = converse::register_handler(|msg: Message| {
            assert_eq!(my_pe(), 0);
            converse::exit(common::read_u64(&msg, 0) as i32);
        });
        if my_pe() == 2 {
            converse::sync_send(0, &tagged(quit, 7));
        }
    });
    assert_eq!(code, 7);

    // From a start function, on a PE other than 0.
    let code = common::run(2, 2, |_| {
        if my_pe() == 1 {
            converse::exit(3);
        }
    });
    assert_eq!(code, 3);

    // No exit at all: every scheduler stopped, code 0.
    let code = common::run(2, 2, |_| converse::exit_scheduler());
    assert_eq!(code, 0);
}

#[test]
fn user_calls_scheduler_mode() {
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    let code = common::run_user(4, 2, move |args| {
        assert_eq!(args, ["test"]);
        let count = Rc::new(RefCell::new(Vec::new()));
        let h = {
            let count = count.clone();
            converse::register_handler(move |msg: Message| {
                count.borrow_mut().push(msg.src_pe());
            })
        };
        if my_pe() != 0 {
            converse::sync_send(0, &Message::new(h, 0));
            return; // this PE is done
        }
        while count.borrow().len() < 3 {
            converse::schedule_poll();
        }
        let mut c = count.borrow().clone();
        c.sort();
        *g.lock().unwrap() = c;
    });
    assert_eq!(code, 0);
    assert_eq!(*got.lock().unwrap(), [1, 2, 3]);

    // exit works in this mode too.
    let code = common::run_user(2, 2, |_| {
        let quit = converse::register_handler(|_msg: Message| converse::exit(7));
        if my_pe() == 1 {
            converse::sync_send(0, &Message::new(quit, 0));
        } else {
            converse::schedule_forever();
            unreachable!("exit ends the scheduler");
        }
    });
    assert_eq!(code, 7);
}

/// The handlers of the `init_returns` job; registered the same way on the
/// calling thread (PE 0) and in the start function of the other PEs.
fn init_returns_handlers(log: &Rc<RefCell<Vec<(u64, usize)>>>) -> (usize, usize) {
    let l = log.clone();
    let to_zero = converse::register_handler(move |msg: Message| {
        l.borrow_mut()
            .push((common::read_u64(&msg, 0), msg.src_pe()));
    });
    let reply = converse::register_handler(move |_msg: Message| {
        converse::sync_send(0, &tagged(to_zero, 2));
    });
    (to_zero, reply)
}

#[test]
fn init_returns_and_finish() {
    let started = Arc::new(AtomicUsize::new(0));
    let s = started.clone();
    Converse::new()
        .args(common::args(3, 3))
        .init_returns(move |args| {
            assert_eq!(args, ["test"]);
            s.fetch_add(1, Ordering::Relaxed);
            let log = Rc::default();
            let (to_zero, _) = init_returns_handlers(&log);
            converse::sync_send(0, &tagged(to_zero, 1));
            // Wait for PE 0's reply; its handler answers PE 0.
            assert_eq!(converse::schedule_count(1), 0);
        })
        .unwrap();
    // This thread is now PE 0 of the job.
    assert_eq!((my_pe(), converse::num_pes()), (0, 3));
    let log = Rc::default();
    let (_, reply) = init_returns_handlers(&log);
    while log.borrow().len() < 2 {
        converse::schedule_poll();
    }
    let mut hellos = log.borrow().clone();
    hellos.sort();
    assert_eq!(hellos, [(1, 1), (1, 2)]);
    for pe in 1..3 {
        converse::sync_send(pe, &Message::new(reply, 0));
    }
    assert_eq!(converse::schedule_count(2), 0);
    let mut all = log.borrow().clone();
    all.sort();
    assert_eq!(all, [(1, 1), (1, 2), (2, 1), (2, 2)]);
    assert_eq!(converse::finish(5), 5);
    assert_eq!(
        started.load(Ordering::Relaxed),
        2,
        "PE 0 does not run start"
    );
}

#[test]
fn stop_then_nested_poll_still_stops_the_outer_scheduler() {
    // The handler asks to stop, then polls: the poll started after the
    // request, so it is not stopped by it (and does not consume it); the
    // outer schedule_forever returns once the handler is done.
    let code = common::within(10, || {
        common::run_user(1, 1, |_| {
            let h = converse::register_handler(|_msg: Message| {
                converse::exit_scheduler();
                converse::schedule_poll();
            });
            converse::sync_send(0, &Message::new(h, 0));
            converse::schedule_forever();
        })
    });
    assert_eq!(code, 0);
}

#[test]
fn init_returns_finish_waits_for_the_other_start_functions() {
    // The manual: shutdown starts when PE 0 calls ConverseExit *and* the
    // other PEs return from their start functions. PE 1 is still busy when
    // PE 0 finishes; it must still get PE 0's message, answer it (PE 0 keeps
    // delivering while it waits), and return normally.
    let handled = Arc::new(AtomicUsize::new(0));
    let seen = handled.clone();
    let code = common::within(10, move || {
        let register = move || {
            let seen = seen.clone();
            converse::register_handler(move |msg: Message| {
                seen.fetch_add(1, Ordering::SeqCst);
                if my_pe() == 1 {
                    // Answer PE 0, which is inside finish() by now.
                    let mut answer = msg;
                    answer.payload_mut()[0] = 2;
                    converse::sync_send_and_free(0, answer);
                }
            })
        };
        let on_pe1 = register.clone();
        Converse::new()
            .args(common::args(2, 2))
            .init_returns(move |_| {
                let h = on_pe1();
                std::thread::sleep(std::time::Duration::from_millis(100));
                converse::deliver_specific_msg(h);
            })
            .unwrap();
        let h = register();
        converse::sync_send(1, &Message::from_payload(h, &[1]));
        converse::finish(6)
    });
    assert_eq!(code, 6);
    assert_eq!(
        handled.load(Ordering::SeqCst),
        2,
        "PE 1 handled it and PE 0 its answer"
    );
}
