//! GAMMA in one process: nodes as threads (`gamma::run`). Across
//! processes: `gamma_*` in `convrun`'s multi-process tests.
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use converse_gamma::{
    self as gamma, BROADCAST, Buffer, Dest, DestNode, ERR_MSGTOOLONG, Error, GO_AHEAD, GO_BACK,
    SendHandle,
};

fn to(node: u16, port: u16) -> Option<Dest> {
    Some(Dest {
        node: DestNode::Node(node),
        par_pid: gamma::my_par_pid().unwrap(),
        port,
    })
}

fn group(nodes: i32, body: impl Fn() + Send + Sync + 'static) {
    let code = gamma::run(nodes, ["gamma"], body).expect("the group starts");
    assert_eq!(code, 0);
}

#[test]
fn two_nodes_ping_pong_through_active_ports() {
    let rounds = 500u64;
    let seen = Arc::new(AtomicU64::new(0));
    let s = Arc::clone(&seen);
    group(2, move || {
        let me = gamma::my_node().unwrap();
        let other = 1 - me;
        let inbox = Buffer::new(8);
        let count = Rc::new(std::cell::Cell::new(0u64));
        let (b, c) = (inbox.clone(), Rc::clone(&count));
        // The receiver handler checks the value and signals semaphore 5.
        let receiver = Rc::new(move || {
            assert_eq!(gamma::active_port(), Some(3));
            let x = u64::from_le_bytes(b.borrow()[..].try_into().unwrap());
            assert_eq!(x, c.get() * 2 + 2 - u64::from(gamma::my_node().unwrap()));
            c.set(c.get() + 1);
            gamma::signal(5).unwrap();
        });
        gamma::set_active_port(
            3,
            to(other, 3),
            Some(receiver),
            None,
            4,
            GO_BACK,
            Some(inbox.clone()),
            8,
        )
        .unwrap();
        gamma::sync().unwrap();
        for i in 0..rounds {
            if me == 0 {
                gamma::send(3, &(2 * i + 1).to_le_bytes()).unwrap();
                assert_eq!(gamma::wait(5, 1), Ok(0));
            } else {
                assert_eq!(gamma::wait(5, 1), Ok(0));
                gamma::send(3, &(2 * i + 2).to_le_bytes()).unwrap();
            }
        }
        // Every arrival counted on the port's semaphore 4 as well.
        assert_eq!(gamma::test(4).unwrap(), rounds);
        s.fetch_add(count.get(), Ordering::Relaxed);
    });
    assert_eq!(seen.load(Ordering::Relaxed), 2 * rounds);
}

#[test]
fn every_node_gathers_into_node_zeros_go_ahead_buffer() {
    let nodes = 4u16;
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = Arc::clone(&got);
    group(nodes as i32, move || {
        let me = gamma::my_node().unwrap();
        let n = gamma::how_many_nodes().unwrap();
        assert_eq!(n, nodes);
        // Node k sends k+1 bytes of value k: 2 + 3 + 4 = 9 bytes in all.
        let total: usize = (1..n as usize).map(|k| k + 1).sum();
        let gather = Buffer::new(total);
        if me == 0 {
            gamma::set_passive_port(7, None, 7, GO_AHEAD, Some(gather.clone()), total).unwrap();
        } else {
            gamma::set_passive_port(7, to(0, 7), 7, GO_BACK, None, 0).unwrap();
        }
        gamma::sync().unwrap();
        if me == 0 {
            assert_eq!(gamma::wait(7, u64::from(n - 1)), Ok(0));
            *g.lock().unwrap() = gather.to_vec();
        } else {
            gamma::send(7, &vec![me as u8; me as usize + 1]).unwrap();
        }
    });
    let mut bytes = got.lock().unwrap().clone();
    // Arrival order is free; each message is contiguous.
    let mut runs = Vec::new();
    while let Some(&b) = bytes.first() {
        let len = bytes.iter().take_while(|&&x| x == b).count();
        runs.push((b, len));
        bytes.drain(..len);
    }
    runs.sort();
    assert_eq!(runs, vec![(1, 2), (2, 3), (3, 4)]);
}

/// What an error handler saw: (port, errno).
type Errors = Arc<Mutex<Vec<(Option<u16>, u8)>>>;

#[test]
fn a_message_too_long_is_cut_and_the_error_handler_runs() {
    let errors: Errors = Arc::default();
    let e = Arc::clone(&errors);
    let results = Arc::new(Mutex::new(Vec::new()));
    let r = Arc::clone(&results);
    group(2, move || {
        let me = gamma::my_node().unwrap();
        let short = Buffer::new(4);
        let gather = Buffer::new(6);
        let e = Arc::clone(&e);
        let on_error = Rc::new(move || {
            e.lock()
                .unwrap()
                .push((gamma::active_port(), gamma::errno()));
            gamma::sigerr(9).unwrap();
        });
        let received = Rc::new(std::cell::Cell::new(0));
        let rc = Rc::clone(&received);
        let on_receive = Rc::new(move || {
            assert_eq!(gamma::errno(), 0);
            rc.set(rc.get() + 1);
        });
        if me == 1 {
            gamma::set_active_port(
                1,
                None,
                Some(on_receive.clone()),
                Some(on_error.clone()),
                9,
                GO_BACK,
                Some(short.clone()),
                4,
            )
            .unwrap();
            gamma::set_active_port(
                2,
                None,
                Some(on_receive),
                Some(on_error),
                9,
                GO_AHEAD,
                Some(gather.clone()),
                6,
            )
            .unwrap();
        } else {
            gamma::set_passive_port(1, to(1, 1), 0, GO_BACK, None, 0).unwrap();
            gamma::set_passive_port(2, to(1, 2), 0, GO_BACK, None, 0).unwrap();
        }
        gamma::sync().unwrap();
        if me == 0 {
            gamma::send(1, b"abcdefgh").unwrap(); // 8 bytes into 4: cut
            gamma::send(2, b"1234").unwrap(); // fits
            gamma::send(2, b"5678").unwrap(); // 2 bytes of room left: cut
            gamma::send(2, b"").unwrap(); // empty: the receiver handler runs
        } else {
            // Four arrivals on semaphore 9, two of them errors.
            let errs = gamma::wait(9, 4).unwrap();
            r.lock()
                .unwrap()
                .push((errs, short.to_vec(), gather.to_vec()));
            // The receiver handler ran for "1234" and for the empty one.
            assert_eq!(received.get(), 2);
            // The error count was reset by that wait.
            gamma::signal(9).unwrap();
            assert_eq!(gamma::wait(9, 1), Ok(0));
        }
        gamma::sync().unwrap();
    });
    assert_eq!(
        *results.lock().unwrap(),
        vec![(2, b"abcd".to_vec(), b"123456".to_vec())]
    );
    let mut seen = errors.lock().unwrap().clone();
    seen.sort();
    assert_eq!(
        seen,
        vec![(Some(1), ERR_MSGTOOLONG), (Some(2), ERR_MSGTOOLONG)]
    );
}

#[test]
fn flow_control_loses_and_overwrites_nothing_with_a_slow_receiver() {
    let per_sender = 60u32;
    let received = Arc::new(AtomicUsize::new(0));
    let rc = Arc::clone(&received);
    group(4, move || {
        let me = gamma::my_node().unwrap();
        let n = gamma::how_many_nodes().unwrap();
        let slot = Buffer::new(8);
        if me == 0 {
            gamma::set_passive_port(4, None, 4, GO_BACK, Some(slot.clone()), 8).unwrap();
        } else {
            gamma::set_passive_port(4, to(0, 4), 0, GO_BACK, None, 0).unwrap();
        }
        gamma::sync().unwrap();
        if me == 0 {
            // One message at a time in the buffer: read it, then release.
            let mut next = vec![0u32; n as usize];
            for k in 0..per_sender * u32::from(n - 1) {
                assert_eq!(gamma::wait(4, 1), Ok(0));
                if k % 7 == 0 {
                    // Slow: while the buffer is not released, polling
                    // stores nothing more in it (the senders are held
                    // back, or their messages wait at this port).
                    for _ in 0..3 {
                        std::thread::sleep(std::time::Duration::from_micros(100));
                        assert_eq!(gamma::test(4), Ok(0));
                    }
                }
                let (from, seq) = {
                    let b = slot.borrow();
                    (
                        u32::from_le_bytes(b[..4].try_into().unwrap()),
                        u32::from_le_bytes(b[4..].try_into().unwrap()),
                    )
                };
                assert_eq!(seq, next[from as usize], "from node {from}");
                next[from as usize] += 1;
                gamma::post_recv(4, &slot, 8).unwrap();
                rc.fetch_add(1, Ordering::Relaxed);
            }
            // Nothing more came.
            assert_eq!(gamma::test(4), Ok(0));
        } else {
            let mut handles = Vec::new();
            for seq in 0..per_sender {
                let mut m = u32::from(me).to_le_bytes().to_vec();
                m.extend_from_slice(&seq.to_le_bytes());
                if seq % 2 == 0 {
                    gamma::send_flowctl(4, &m).unwrap();
                } else {
                    // Non-blocking: queued in order behind the credit.
                    handles.push(gamma::isend_flowctl(4, &m).unwrap());
                }
            }
            for h in handles {
                gamma::wsend(h).unwrap();
                assert_eq!(gamma::tsend(h), Ok(true));
            }
        }
    });
    assert_eq!(received.load(Ordering::Relaxed), 3 * per_sender as usize);
}

#[test]
fn broadcast_barrier_and_semaphores() {
    let nodes = 5;
    let passed = Arc::new(AtomicU64::new(0));
    let p = Arc::clone(&passed);
    group(nodes, move || {
        let me = gamma::my_node().unwrap();
        let n = u64::from(gamma::how_many_nodes().unwrap());
        let inbox = Buffer::new(16);
        let dest = Dest {
            node: BROADCAST,
            par_pid: gamma::my_par_pid().unwrap(),
            port: 6,
        };
        gamma::set_passive_port(6, Some(dest), 6, GO_AHEAD, Some(inbox.clone()), 16).unwrap();
        gamma::sync().unwrap();
        // Every node broadcasts its number: each gets the n - 1 others.
        gamma::send(6, &[me as u8]).unwrap();
        assert_eq!(gamma::wait(6, n - 1), Ok(0));
        let mut got = inbox.borrow()[..n as usize - 1].to_vec();
        got.sort();
        let others: Vec<u8> = (0..n as u8).filter(|&k| k != me as u8).collect();
        assert_eq!(got, others);
        // Barriers: nobody passes barrier k before all reached it.
        for k in 1..=10u64 {
            p.fetch_add(1, Ordering::SeqCst);
            gamma::sync().unwrap();
            assert!(p.load(Ordering::SeqCst) >= k * n);
        }
    });
    assert_eq!(passed.load(Ordering::SeqCst), 10 * nodes as u64);
}

#[test]
fn messages_wait_for_their_port_and_for_atomic_sections() {
    let ok = Arc::new(AtomicUsize::new(0));
    let o = Arc::clone(&ok);
    group(2, move || {
        let me = gamma::my_node().unwrap();
        let inbox = Buffer::new(4);
        if me == 0 {
            gamma::set_passive_port(2, to(1, 2), 0, GO_BACK, None, 0).unwrap();
            // Sent before node 1 set its port up.
            gamma::send(2, b"earl").unwrap();
            gamma::sync().unwrap();
            gamma::sync().unwrap();
            gamma::send(2, b"late").unwrap();
        } else {
            gamma::sync().unwrap();
            let calls = Rc::new(std::cell::Cell::new(0));
            let c = Rc::clone(&calls);
            let handler = Rc::new(move || c.set(c.get() + 1));
            gamma::set_active_port(
                2,
                None,
                Some(handler),
                None,
                2,
                GO_BACK,
                Some(inbox.clone()),
                4,
            )
            .unwrap();
            // Stored as the port was set up.
            assert_eq!(gamma::test(2), Ok(1));
            assert_eq!(inbox.to_vec(), b"earl");
            gamma::sync().unwrap();
            // Inside an atomic section a poll stores nothing.
            gamma::atomic(|| {
                for _ in 0..200 {
                    converse::schedule_poll();
                    std::thread::sleep(std::time::Duration::from_micros(50));
                }
                assert_eq!(calls.get(), 1);
                assert_eq!(inbox.to_vec(), b"earl");
            })
            .unwrap();
            assert_eq!(gamma::wait(2, 2), Ok(0));
            assert_eq!(inbox.to_vec(), b"late");
            assert_eq!(calls.get(), 2);
        }
        o.fetch_add(1, Ordering::Relaxed);
    });
    assert_eq!(ok.load(Ordering::Relaxed), 2);
}

#[test]
fn refusals_carry_the_documents_negative_codes() {
    assert_eq!(gamma::my_node(), Err(Error::NotInitialized));
    assert_eq!(gamma::send(1, b"x").map_err(|e| e.code()), Err(-1));
    group(2, || {
        let me = gamma::my_node().unwrap();
        let pid = gamma::my_par_pid().unwrap();
        assert!((1..=254).contains(&pid));
        let bad = |r: gamma::Result<()>| r.unwrap_err();
        assert_eq!(
            bad(gamma::set_passive_port(1025, None, 0, GO_BACK, None, 0)),
            Error::BadPort(1025)
        );
        assert_eq!(
            bad(gamma::set_passive_port(1023, None, 0, GO_BACK, None, 0)),
            Error::Reserved(1023)
        );
        assert_eq!(
            bad(gamma::set_passive_port(1, None, 1024, GO_BACK, None, 0)),
            Error::Reserved(1024)
        );
        assert_eq!(
            bad(gamma::set_passive_port(1, to(me, 1), 0, GO_BACK, None, 0)),
            Error::SelfConnection(1)
        );
        assert_eq!(
            bad(gamma::set_passive_port(1, to(9, 1), 0, GO_BACK, None, 0)),
            Error::BadNode(9)
        );
        // No group has parallel pid 255 (they are 1..=254).
        let other_group = Dest {
            node: DestNode::Node(1 - me),
            par_pid: 255,
            port: 1,
        };
        assert_eq!(
            bad(gamma::set_passive_port(
                1,
                Some(other_group),
                0,
                GO_BACK,
                None,
                0
            ))
            .code(),
            -5
        );
        assert!(matches!(
            bad(gamma::set_passive_port(
                1,
                None,
                0,
                GO_BACK,
                Some(Buffer::new(2)),
                3
            )),
            Error::BadBuffer(_)
        ));
        assert_eq!(bad(gamma::send(1, b"x")), Error::NotOutput(1));
        assert!(matches!(
            bad(gamma::post_recv(8, &Buffer::new(1), 1)),
            Error::BadBuffer(_)
        ));
        gamma::set_passive_port(1, to(1 - me, 1), 1, GO_BACK, Some(Buffer::new(4)), 4).unwrap();
        assert_eq!(
            bad(gamma::send_2p(1, &[0; 21], b"")),
            Error::FirstPieceTooLong(21)
        );
        assert_eq!(
            gamma::send_2p(1, &[0; 20], b"").map_err(|e| e.code()),
            Ok(())
        );
        assert_eq!(
            gamma::wsend(SendHandle(999)),
            Err(Error::UnknownHandle(999))
        );
        assert_eq!(gamma::tsend(SendHandle(0)), Err(Error::UnknownHandle(0)));
        let h = gamma::isend_2p(1, b"ab", b"cd").unwrap();
        assert_eq!(gamma::tsend(h), Ok(true));
        // Two arrivals; the 20-byte one was cut to the 4-byte buffer, and a
        // passive port (no error handler) counts that as an error.
        assert_eq!(gamma::wait(1, 2), Ok(1));
        assert_eq!(gamma::active_port(), None);
        assert_eq!(gamma::errno(), 0);
        gamma::sync().unwrap();
    });
    // The node ended with its PE (this thread was PE 0).
    assert_eq!(gamma::my_node(), Err(Error::NotInitialized));
}

#[test]
fn a_wait_that_can_never_end_is_an_error() {
    let outcome = Arc::new(Mutex::new(None));
    let o = Arc::clone(&outcome);
    group(2, move || {
        if gamma::my_node().unwrap() == 1 {
            gamma::exit().unwrap();
            // No longer a member.
            assert_eq!(gamma::my_node(), Err(Error::NotInitialized));
            return;
        }
        gamma::set_passive_port(1, None, 1, GO_BACK, None, 0).unwrap();
        *o.lock().unwrap() = Some(gamma::wait(1, 1));
    });
    let got = outcome.lock().unwrap().take().unwrap();
    assert!(
        matches!(&got, Err(Error::Deadlock(why)) if why.contains("every other node has left")),
        "{got:?}"
    );
}

/// The two groups' parallel pids, as their nodes 0 publish them.
type Pids = Arc<(Mutex<[u8; 2]>, Condvar)>;

/// Publishes group `g`'s parallel pid (node 0) and waits for the other's.
fn meet(pids: &Pids, g: usize) -> u8 {
    let (lock, cv) = &**pids;
    let mut p = lock.lock().unwrap();
    if gamma::my_node().unwrap() == 0 {
        p[g] = gamma::my_par_pid().unwrap();
        cv.notify_all();
    }
    while p[1 - g] == 0 {
        p = cv.wait(p).unwrap();
    }
    p[1 - g]
}

#[test]
fn two_groups_started_apart_exchange_messages() {
    let pids: Pids = Arc::default();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let per_sender = 30u32;
    let start = |g: usize| {
        let (pids, seen) = (Arc::clone(&pids), Arc::clone(&seen));
        std::thread::spawn(move || {
            group(2, move || {
                let other = meet(&pids, g);
                let me = gamma::my_node().unwrap();
                assert_ne!(other, gamma::my_par_pid().unwrap());
                let inbox = Buffer::new(4);
                if g == 0 {
                    // Every node of A takes B's broadcast on port 4.
                    gamma::set_passive_port(4, None, 4, GO_BACK, Some(inbox.clone()), 4).unwrap();
                    if me == 1 {
                        // Flow-controlled messages to B's node 0, port 3.
                        let to_b = Dest {
                            node: DestNode::Node(0),
                            par_pid: other,
                            port: 3,
                        };
                        gamma::set_passive_port(3, Some(to_b), 0, GO_BACK, None, 0).unwrap();
                        for seq in 0..per_sender {
                            gamma::send_flowctl(3, &seq.to_le_bytes()).unwrap();
                        }
                    }
                    assert_eq!(gamma::wait(4, 1), Ok(0));
                    assert_eq!(inbox.to_vec(), b"from");
                    seen.lock()
                        .unwrap()
                        .push(format!("A{me} got the broadcast"));
                } else if me == 0 {
                    gamma::set_passive_port(3, None, 3, GO_BACK, Some(inbox.clone()), 4).unwrap();
                    for seq in 0..per_sender {
                        assert_eq!(gamma::wait(3, 1), Ok(0));
                        if seq % 5 == 0 {
                            std::thread::sleep(std::time::Duration::from_millis(1));
                            assert_eq!(gamma::test(3), Ok(0), "overwritten before released");
                        }
                        assert_eq!(inbox.to_vec(), seq.to_le_bytes());
                        gamma::post_recv(3, &inbox, 4).unwrap();
                    }
                    seen.lock()
                        .unwrap()
                        .push(format!("B0 got {per_sender} in order"));
                } else {
                    let to_a = Dest {
                        node: BROADCAST,
                        par_pid: other,
                        port: 4,
                    };
                    gamma::set_passive_port(5, Some(to_a), 0, GO_BACK, None, 0).unwrap();
                    gamma::send(5, b"from").unwrap();
                }
                // Each group waits for its own nodes before leaving.
                gamma::sync().unwrap();
            })
        })
    };
    let (a, b) = (start(0), start(1));
    a.join().unwrap();
    b.join().unwrap();
    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    assert_eq!(
        seen,
        [
            "A0 got the broadcast",
            "A1 got the broadcast",
            "B0 got 30 in order"
        ]
    );
}

#[test]
fn a_message_waits_while_its_ports_handler_runs() {
    let ok = Arc::new(AtomicUsize::new(0));
    let o = Arc::clone(&ok);
    group(2, move || {
        let me = gamma::my_node().unwrap();
        if me == 0 {
            gamma::set_passive_port(1, to(1, 1), 0, GO_BACK, None, 0).unwrap();
            gamma::sync().unwrap();
            gamma::send(1, b"one").unwrap();
            gamma::send(1, b"two").unwrap();
            gamma::sync().unwrap();
            return;
        }
        let inbox = Buffer::new(3);
        let b = inbox.clone();
        let seen = Rc::new(std::cell::RefCell::new(Vec::new()));
        let s = Rc::clone(&seen);
        let handler = Rc::new(move || {
            let first = s.borrow().is_empty();
            s.borrow_mut().push(b.to_vec());
            if first {
                // Polling inside the handler: "two" has arrived (node 0
                // sent it right after), but is not stored over "one".
                for _ in 0..50 {
                    assert_eq!(gamma::test(1), Ok(1));
                    std::thread::sleep(std::time::Duration::from_micros(100));
                }
                assert_eq!(b.to_vec(), b"one");
            }
        });
        gamma::set_active_port(1, None, Some(handler), None, 1, GO_BACK, Some(inbox), 3).unwrap();
        gamma::sync().unwrap();
        assert_eq!(gamma::wait(1, 2), Ok(0));
        assert_eq!(*seen.borrow(), [b"one".to_vec(), b"two".to_vec()]);
        gamma::sync().unwrap();
        o.fetch_add(1, Ordering::Relaxed);
    });
    assert_eq!(ok.load(Ordering::Relaxed), 1);
}

#[test]
fn a_barrier_a_node_left_fails_everywhere_instead_of_hanging() {
    let errors = Arc::new(AtomicUsize::new(0));
    let e = Arc::clone(&errors);
    group(3, move || {
        let me = gamma::my_node().unwrap();
        if me == 2 {
            gamma::exit().unwrap();
            return;
        }
        match gamma::sync() {
            Err(Error::Deadlock(why)) => {
                assert!(why.contains("has left the group"), "{why}");
                e.fetch_add(1, Ordering::Relaxed);
            }
            other => panic!("node {me}: {other:?}"),
        }
    });
    assert_eq!(errors.load(Ordering::Relaxed), 2);
}

#[test]
fn a_wait_on_messages_stuck_at_an_unset_port_is_an_error() {
    let outcome = Arc::new(Mutex::new(None));
    let o = Arc::clone(&outcome);
    group(2, move || {
        if gamma::my_node().unwrap() == 1 {
            gamma::set_passive_port(5, to(0, 5), 0, GO_BACK, None, 0).unwrap();
            gamma::send(5, b"never stored").unwrap();
            gamma::exit().unwrap();
            return;
        }
        gamma::set_passive_port(6, None, 6, GO_BACK, None, 0).unwrap();
        *o.lock().unwrap() = Some(gamma::wait(6, 1));
    });
    let got = outcome.lock().unwrap().take().unwrap();
    assert!(matches!(got, Err(Error::Deadlock(_))), "{got:?}");
}

#[test]
fn flow_controlled_broadcasts_go_on_when_a_receiver_leaves() {
    let done = Arc::new(AtomicUsize::new(0));
    let d = Arc::clone(&done);
    group(3, move || {
        let me = gamma::my_node().unwrap();
        let pid = gamma::my_par_pid().unwrap();
        let slot = Buffer::new(1);
        if me == 0 {
            let all = Dest {
                node: BROADCAST,
                par_pid: pid,
                port: 1,
            };
            gamma::set_passive_port(1, Some(all), 0, GO_BACK, None, 0).unwrap();
        } else {
            gamma::set_passive_port(1, None, 1, GO_BACK, Some(slot.clone()), 1).unwrap();
        }
        gamma::sync().unwrap();
        if me == 0 {
            // The second waits for both credits; node 2 leaves instead of
            // giving its second one, node 1 gives it late.
            for k in 0..3u8 {
                gamma::send_flowctl(1, &[k]).unwrap();
            }
        } else if me == 2 {
            assert_eq!(gamma::wait(1, 1), Ok(0));
            gamma::post_recv(1, &slot, 1).unwrap();
            assert_eq!(gamma::wait(1, 1), Ok(0));
            gamma::exit().unwrap();
            d.fetch_add(1, Ordering::Relaxed);
            return;
        } else {
            for k in 0..3u8 {
                assert_eq!(gamma::wait(1, 1), Ok(0));
                assert_eq!(slot.to_vec(), [k]);
                std::thread::sleep(std::time::Duration::from_millis(5));
                gamma::post_recv(1, &slot, 1).unwrap();
            }
        }
        d.fetch_add(1, Ordering::Relaxed);
    });
    assert_eq!(done.load(Ordering::Relaxed), 3);
}

#[test]
fn queued_sends_keep_the_destination_they_were_sent_to() {
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = Arc::clone(&got);
    group(3, move || {
        let me = gamma::my_node().unwrap();
        let slot = Buffer::new(1);
        if me == 0 {
            gamma::set_passive_port(1, to(1, 1), 0, GO_BACK, None, 0).unwrap();
        } else {
            gamma::set_passive_port(1, None, 1, GO_BACK, Some(slot.clone()), 1).unwrap();
        }
        gamma::sync().unwrap();
        if me == 0 {
            gamma::send_flowctl(1, b"a").unwrap();
            let h = gamma::isend_flowctl(1, b"b").unwrap(); // queued for node 1
            gamma::set_passive_port(1, to(2, 1), 0, GO_BACK, None, 0).unwrap();
            gamma::wsend(h).unwrap();
            gamma::send(1, b"c").unwrap(); // the new binding: node 2
        } else if me == 1 {
            for _ in 0..2 {
                assert_eq!(gamma::wait(1, 1), Ok(0));
                g.lock().unwrap().push((1, slot.to_vec()));
                gamma::post_recv(1, &slot, 1).unwrap();
            }
        } else {
            assert_eq!(gamma::wait(1, 1), Ok(0));
            g.lock().unwrap().push((2, slot.to_vec()));
        }
        gamma::sync().unwrap();
    });
    let mut got = got.lock().unwrap().clone();
    got.sort();
    assert_eq!(
        got,
        [(1, b"a".to_vec()), (1, b"b".to_vec()), (2, b"c".to_vec())]
    );
}

#[test]
fn a_send_failures_error_handler_waits_for_the_atomic_section() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    group(2, move || {
        let me = gamma::my_node().unwrap();
        if me == 1 {
            gamma::set_passive_port(1, None, 1, GO_BACK, Some(Buffer::new(1)), 1).unwrap();
            gamma::sync().unwrap();
            // Takes the first message, never re-posts, leaves.
            assert_eq!(gamma::wait(1, 1), Ok(0));
            gamma::exit().unwrap();
            return;
        }
        let log = Rc::new(std::cell::RefCell::new(Vec::new()));
        let l = Rc::clone(&log);
        let on_error = Rc::new(move || {
            l.borrow_mut().push(format!(
                "error {} on port {:?}",
                gamma::errno(),
                gamma::active_port()
            ));
        });
        gamma::set_active_port(1, to(1, 1), None, Some(on_error), 1, GO_BACK, None, 0).unwrap();
        gamma::sync().unwrap();
        gamma::send_flowctl(1, b"a").unwrap();
        let h = gamma::isend_flowctl(1, b"b").unwrap(); // waits for node 1's credit
        gamma::atomic(|| {
            // Node 1 leaves: the queued send fails, here, inside the section.
            let failed = loop {
                match gamma::tsend(h) {
                    Ok(false) => std::thread::sleep(std::time::Duration::from_micros(100)),
                    other => break other,
                }
            };
            assert!(matches!(failed, Err(Error::SendFailure(_))), "{failed:?}");
            log.borrow_mut().push("atomic ends".to_string());
        })
        .unwrap();
        s.lock().unwrap().extend(log.borrow().iter().cloned());
    });
    assert_eq!(
        *seen.lock().unwrap(),
        [
            "atomic ends".to_string(),
            format!("error {} on port Some(1)", gamma::ERR_SENDFAILURE)
        ]
    );
}
