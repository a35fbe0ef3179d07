//! The machine layer: topology queries, runtime flags, handler registration,
//! pseudo-globals (`Cpv`, `Csv`), node locks and barriers, timers and I/O.
use crate::common;

use std::cell::Cell;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use converse::{
    ArgError, Converse, Cpv, Csv, Message, NodeLock, StartError, my_node, my_node_size, my_pe,
    my_rank, node_first, node_of, node_size, num_nodes, num_pes, rank_of,
};

/// Checks every topology query on the calling PE for a job of `pes` PEs in
/// nodes of `ppn`.
fn check_topology(pes: usize, ppn: usize) {
    let pe = my_pe();
    assert!(pe < pes);
    assert_eq!(num_pes(), pes);
    assert_eq!(num_nodes(), pes / ppn);
    assert_eq!(my_node(), pe / ppn);
    assert_eq!(my_rank(), pe % ppn);
    assert_eq!(my_node_size(), ppn);
    assert_eq!(node_first(my_node()) + my_rank(), pe);
    assert_eq!(node_of(pe), my_node());
    assert_eq!(rank_of(pe), my_rank());
    for node in 0..num_nodes() {
        assert_eq!(node_first(node), node * ppn);
        assert_eq!(node_size(node), ppn);
    }
    for p in 0..pes {
        assert_eq!(node_of(p), p / ppn);
        assert_eq!(rank_of(p), p % ppn);
    }
    // One process: one host, whatever the nodes, its PEs in order.
    use converse::machine::hosts;
    assert_eq!(hosts::num_physical_nodes(), 1);
    assert_eq!(hosts::physical_node_of(pe), 0);
    assert_eq!(hosts::physical_rank(pe), pe);
    assert_eq!(hosts::pes_on_physical_node(0), (0..pes).collect::<Vec<_>>());
    assert_eq!(hosts::num_pes_on_physical_node(0), pes);
    assert_eq!(hosts::first_pe_on_physical_node(0), 0);
    assert!(hosts::same_physical_node(0, pes - 1));
    assert!(hosts::num_cores() >= 1);
}

#[test]
fn topology_queries_on_every_pe() {
    for (pes, ppn) in [(6, 3), (6, 1), (6, 6)] {
        let seen = Arc::new(Mutex::new(BTreeSet::new()));
        let s = seen.clone();
        let code = common::run(pes, ppn, move |_| {
            check_topology(pes, ppn);
            s.lock().unwrap().insert(my_pe());
            converse::exit_scheduler();
        });
        assert_eq!(code, 0);
        assert_eq!(
            *seen.lock().unwrap(),
            (0..pes).collect(),
            "+p {pes} ++ppn {ppn}"
        );
    }
    // +p 4 without ++ppn: one node of 4 PEs.
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let s = seen.clone();
    let code = Converse::new()
        .args(["test", "+p", "4"])
        .run(move |_| {
            check_topology(4, 4);
            assert_eq!(num_nodes(), 1);
            s.lock().unwrap().insert(my_pe());
            converse::exit_scheduler();
        })
        .unwrap();
    assert_eq!(code, 0);
    assert_eq!(*seen.lock().unwrap(), (0..4).collect());
}

#[test]
fn runtime_flags_are_removed_from_the_program_arguments() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let code = Converse::new()
        .args([
            "prog", "alpha", "+p", "4", "-v", "++ppn", "2", "beta", "--x=1", "gamma",
        ])
        .run(move |args| {
            assert_eq!((num_pes(), num_nodes()), (4, 2));
            s.lock().unwrap().push(args.to_vec());
            converse::exit_scheduler();
        })
        .unwrap();
    assert_eq!(code, 0);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 4);
    for args in seen.iter() {
        assert_eq!(args, &["prog", "alpha", "-v", "beta", "--x=1", "gamma"]);
    }

    // Glued values, and the defaults when flags are absent.
    let code = Converse::new()
        .args(["prog", "+p3", "x", "++ppn=1"])
        .run(|args| {
            assert_eq!(args, ["prog", "x"]);
            assert_eq!((num_pes(), num_nodes()), (3, 3));
            converse::exit_scheduler();
        })
        .unwrap();
    assert_eq!(code, 0);
    let code = Converse::new()
        .args(["prog", "y"])
        .default_pes(2)
        .run_user_scheduler(|args| {
            assert_eq!(args, ["prog", "y"]);
            assert_eq!((num_pes(), num_nodes()), (2, 1));
        })
        .unwrap();
    assert_eq!(code, 0);

    // Bad command lines are errors, and nothing runs.
    let never = |_: &[String]| panic!("a bad command line must not start the job");
    assert_eq!(
        Converse::new().args(["prog", "+bogus"]).run(never),
        Err(StartError::Flags(ArgError::UnknownFlag("+bogus".into())))
    );
    assert_eq!(
        Converse::new()
            .args(["prog", "+p", "6", "++ppn", "4"])
            .run(never),
        Err(StartError::Flags(ArgError::Layout { pes: 6, ppn: 4 }))
    );
    assert!(matches!(
        Converse::new().args(["prog", "+p", "0"]).run(never),
        Err(StartError::Flags(ArgError::BadValue { .. }))
    ));
}

#[test]
fn register_handler_gives_the_same_index_on_every_pe() {
    let indices = Arc::new(Mutex::new(Vec::new()));
    let ran = Arc::new(AtomicUsize::new(0));
    let (ix, r) = (indices.clone(), ran.clone());
    let code = common::run(4, 2, move |_| {
        let r = r.clone();
        let a = converse::register_handler(|_msg: Message| {});
        let b = converse::register_handler(move |msg: Message| {
            assert_eq!(msg.payload(), b"to b");
            if r.fetch_add(1, Ordering::Relaxed) + 1 == 4 {
                converse::exit(0);
            }
        });
        let c = converse::register_handler(|_msg: Message| {});
        ix.lock().unwrap().push((my_pe(), [a, b, c]));
        // Every PE sends to the next: index b means b everywhere.
        converse::sync_send(
            (my_pe() + 1) % num_pes(),
            &Message::from_payload(b, b"to b"),
        );
    });
    assert_eq!(code, 0);
    let indices = indices.lock().unwrap();
    assert_eq!(indices.len(), 4);
    let first = indices[0].1;
    assert!(indices.iter().all(|(_, ix)| *ix == first));
    let distinct: BTreeSet<usize> = first.into_iter().collect();
    assert_eq!(distinct.len(), 3);
    assert!(!distinct.contains(&0), "index 0 is never a handler");
}

#[test]
fn local_handlers_and_handler_lookup() {
    let code = common::run_user(2, 2, |_| {
        let calls = std::rc::Rc::new(Cell::new(0u32));
        let registered = {
            let calls = calls.clone();
            converse::register_handler(move |msg: Message| {
                calls.set(calls.get() + 1);
                assert_eq!(msg.info(), 42);
            })
        };
        // A different number of local handlers on each PE is fine.
        let mut locals = Vec::new();
        for _ in 0..=my_pe() {
            let calls = calls.clone();
            locals.push(converse::register_handler_local(move |msg: Message| {
                calls.set(calls.get() + 100);
                assert_eq!(msg.payload(), b"local");
            }));
        }
        let distinct: BTreeSet<usize> = locals.iter().copied().collect();
        assert_eq!(distinct.len(), locals.len());
        assert!(!distinct.contains(&registered) && !distinct.contains(&0));

        // Lookup by index and by message.
        assert!(converse::handler_function(0).is_none());
        assert!(converse::handler_function(999).is_none());
        let f = converse::handler_function(registered).expect("registered");
        let mut msg = Message::new(registered, 0);
        msg.set_info(42);
        f(msg.clone());
        assert_eq!(calls.get(), 1, "handler_function gives the handler");
        let g = converse::handler_of(&msg).expect("the message's handler");
        g(msg.clone());
        assert_eq!(calls.get(), 2);

        // Header accessors.
        let last = *locals.last().unwrap();
        let mut local_msg = Message::from_payload(registered, b"local");
        assert_eq!(local_msg.handler(), registered);
        local_msg.set_handler(last);
        assert_eq!(local_msg.handler(), last);
        assert_eq!(local_msg.info(), 0);
        local_msg.set_info(7);
        assert_eq!(local_msg.info(), 7);
        assert_eq!(local_msg.payload(), b"local");
        assert!(converse::handler_of(&local_msg).is_some());

        // Sending keeps the handler and the info slot.
        converse::sync_send(my_pe(), &local_msg);
        converse::sync_send(my_pe(), &msg);
        converse::schedule_poll();
        assert_eq!(calls.get(), 103);
    });
    assert_eq!(code, 0);
}

#[test]
fn global_handlers_numbered_on_the_other_pes() {
    const PES: usize = 4;
    let on_zero = Arc::new(AtomicUsize::new(0));
    let numbered = Arc::new(Mutex::new(Vec::new()));
    let total = Arc::new(AtomicUsize::new(0));
    let (z, n, t) = (on_zero.clone(), numbered.clone(), total.clone());
    let code = common::run(PES, 2, move |_| {
        // Counts handled messages job-wide; the last one ends the job.
        let count = {
            let t = t.clone();
            move || {
                if t.fetch_add(1, Ordering::Relaxed) + 1 == 2 * (PES - 1) {
                    converse::exit(0);
                }
            }
        };
        let install = {
            let (n, count) = (n.clone(), count.clone());
            converse::register_handler(move |msg: Message| {
                let g = common::read_u64(&msg, 0) as usize;
                let (n, count) = (n.clone(), count.clone());
                converse::number_handler(g, move |msg: Message| {
                    assert_eq!(msg.payload(), b"numbered");
                    n.lock().unwrap().push(my_pe());
                    count();
                });
                assert!(converse::handler_function(g).is_some());
                // The number now works here, and on PE 0.
                converse::sync_send(my_pe(), &Message::from_payload(g, b"numbered"));
                converse::sync_send(0, &Message::from_payload(g, b"global"));
            })
        };
        if my_pe() == 0 {
            let (z, count) = (z.clone(), count.clone());
            let g = converse::register_handler_global(move |msg: Message| {
                assert_eq!(msg.payload(), b"global");
                assert_eq!(my_pe(), 0);
                z.fetch_add(1, Ordering::Relaxed);
                count();
            });
            assert!(g != 0 && g != install);
            for pe in 1..PES {
                converse::sync_send(pe, &common::msg_u64(install, &[g as u64]));
            }
        }
    });
    assert_eq!(code, 0);
    assert_eq!(on_zero.load(Ordering::Relaxed), PES - 1);
    let mut numbered = numbered.lock().unwrap().clone();
    numbered.sort();
    assert_eq!(numbered, [1, 2, 3]);
}

static PE_VALUE: Cpv<Cell<usize>> = Cpv::new();
static PE_NAME: Cpv<String> = Cpv::new();

#[test]
fn cpv_values_are_private_to_each_pe() {
    let results = Arc::new(Mutex::new(Vec::new()));
    let r = results.clone();
    let code = common::run_user(4, 2, move |_| {
        let me = my_pe();
        assert!(!PE_VALUE.is_initialized());
        assert!(PE_VALUE.try_get().is_none());
        PE_VALUE.initialize(Cell::new(me * 10));
        assert!(PE_VALUE.is_initialized());
        assert_eq!(PE_VALUE.try_get().map(|v| v.get()), Some(me * 10));
        PE_NAME.initialize(format!("PE {me}"));
        // Every PE updates its own value many times while the others do too.
        for _ in 0..1000 {
            PE_VALUE.with(|v| v.set(v.get() + 1));
            std::thread::yield_now();
        }
        converse::node_barrier();
        assert_eq!(PE_VALUE.with(|v| v.get()), me * 10 + 1000);
        assert_eq!(*PE_NAME.get(), format!("PE {me}"));
        // A handler on this PE sees this PE's value.
        let h = converse::register_handler(|_msg: Message| {
            PE_VALUE.with(|v| v.set(v.get() + 1));
        });
        converse::sync_send(me, &Message::new(h, 0));
        converse::schedule_poll();
        // Initializing again replaces the value.
        let before = PE_VALUE.get();
        PE_VALUE.initialize(Cell::new(7));
        r.lock()
            .unwrap()
            .push((me, before.get(), PE_VALUE.with(|v| v.get())));
    });
    assert_eq!(code, 0);
    let mut results = results.lock().unwrap().clone();
    results.sort();
    assert_eq!(
        results,
        [(0, 1001, 7), (1, 1011, 7), (2, 1021, 7), (3, 1031, 7)]
    );
}

static NODE_COUNTER: Csv<AtomicUsize> = Csv::new();

#[test]
fn csv_is_one_value_per_node_initialized_once() {
    let inits = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (i, s) = (inits.clone(), seen.clone());
    let code = common::run_user(6, 3, move |_| {
        assert!(!NODE_COUNTER.is_initialized());
        // Nobody initializes before every PE of the node checked the above.
        converse::node_barrier();
        // Every PE initializes; the initializer runs once per node.
        NODE_COUNTER.initialize(|| {
            i.fetch_add(1, Ordering::Relaxed);
            AtomicUsize::new(my_node() * 100)
        });
        assert!(NODE_COUNTER.is_initialized());
        NODE_COUNTER.with(|c| c.fetch_add(1, Ordering::Relaxed));
        converse::node_barrier();
        let value = NODE_COUNTER.get().load(Ordering::Relaxed);
        s.lock().unwrap().push((my_pe(), value));
    });
    assert_eq!(code, 0);
    assert_eq!(
        inits.load(Ordering::Relaxed),
        2,
        "one initialization per node"
    );
    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    // Each node's three PEs shared one counter, separate from the other node's.
    assert_eq!(seen, [(0, 3), (1, 3), (2, 3), (3, 103), (4, 103), (5, 103)]);
}

static BASE: Csv<usize> = Csv::new();
static DERIVED: Csv<usize> = Csv::new();

#[test]
fn csv_initializer_may_read_another_csv() {
    // Hangs (instead of failing) if initialize holds a lock that reading a
    // Csv needs, so run under a hang detector.
    let code = common::within(5, || {
        common::run_user(2, 2, |_| {
            BASE.initialize(|| 20);
            converse::node_barrier();
            DERIVED.initialize(|| *BASE.get() + 1);
            assert_eq!(*DERIVED.get(), 21);
        })
    });
    assert_eq!(code, 0);
}

static GUARDED: Csv<NodeLock<u64>> = Csv::new();

#[test]
fn node_lock_guards_a_shared_counter() {
    const ROUNDS: u64 = 5_000;
    let totals = Arc::new(Mutex::new(Vec::new()));
    let t = totals.clone();
    let code = common::run_user(8, 4, move |_| {
        GUARDED.initialize(|| NodeLock::new(0));
        let lock = GUARDED.get();
        for _ in 0..ROUNDS {
            let mut g = lock.lock();
            // A read-modify-write that would lose updates without the lock.
            let v = *g;
            std::hint::black_box(&v);
            *g = v + 1;
        }
        converse::node_barrier();
        let total = *lock.lock();
        t.lock().unwrap().push(total);
        converse::node_barrier();

        // try_lock fails while another PE holds the lock...
        let held = (my_rank() == 0).then(|| lock.lock());
        converse::node_barrier();
        if my_rank() != 0 {
            assert!(lock.try_lock().is_none(), "rank 0 holds the lock");
        }
        converse::node_barrier();
        if let Some(guard) = held {
            converse::unlock(guard);
        }
        converse::node_barrier();
        // ...and succeeds once it is free.
        if my_rank() == 1 {
            let mut g = lock.try_lock().expect("the lock is free");
            *g += 1;
        }
        converse::node_barrier();
        assert_eq!(*lock.lock(), 4 * ROUNDS + 1);
    });
    assert_eq!(code, 0);
    assert_eq!(*totals.lock().unwrap(), [4 * ROUNDS; 8]);
}

#[test]
fn node_lock_outside_a_job() {
    let lock = NodeLock::new(vec![1]);
    lock.lock().push(2);
    let g = lock.try_lock().unwrap();
    assert_eq!(*g, [1, 2]);
    converse::unlock(g);
    assert_eq!(lock.destroy(), [1, 2]);
}

static ARRIVED: Csv<AtomicUsize> = Csv::new();

#[test]
fn node_barrier_waits_for_every_pe_of_the_node() {
    const ROUNDS: usize = 20;
    let checks = Arc::new(AtomicUsize::new(0));
    let c = checks.clone();
    let code = common::run_user(8, 4, move |_| {
        ARRIVED.initialize(|| AtomicUsize::new(0));
        let arrived = ARRIVED.get();
        let size = my_node_size();
        for round in 0..ROUNDS {
            // Phase 1 of this round.
            arrived.fetch_add(1, Ordering::SeqCst);
            converse::node_barrier();
            // Every PE of the node has done phase 1 of this round; none can
            // be past phase 1 of the next (it needs us at the barrier).
            let n = arrived.load(Ordering::SeqCst);
            assert!(
                (round + 1) * size <= n && n <= (round + 2) * size,
                "round {round}: {n} arrivals on PE {}",
                my_pe()
            );
            c.fetch_add(1, Ordering::Relaxed);
        }
    });
    assert_eq!(code, 0);
    assert_eq!(checks.load(Ordering::Relaxed), 8 * ROUNDS);
}

fn busy_work() {
    let mut x = 0u64;
    for i in 0..3_000_000u64 {
        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
    }
}

#[test]
fn timers_advance() {
    let code = common::run_user(2, 2, |_| {
        let (t0, w0, c0) = (
            converse::timer(),
            converse::wall_timer(),
            converse::cpu_timer(),
        );
        assert!(t0 >= 0.0 && w0 >= 0.0 && c0 >= 0.0);
        busy_work();
        let (t1, w1, c1) = (
            converse::timer(),
            converse::wall_timer(),
            converse::cpu_timer(),
        );
        assert!(t1 > t0, "timer: {t0} then {t1}");
        assert!(w1 > w0, "wall_timer: {w0} then {w1}");
        assert!(c1 > c0, "cpu_timer: {c0} then {c1}");
    });
    assert_eq!(code, 0);
}

#[test]
fn printing_from_every_pe() {
    let code = common::run_user(3, 3, |_| {
        converse::printf(format_args!("printf from PE {}\n", my_pe()));
        converse::error(format_args!("error from PE {}\n", my_pe()));
        converse::cmi_printf!("cmi_printf! from PE {} of {}\n", my_pe(), num_pes());
        converse::cmi_error!("cmi_error! from PE {}\n", my_pe());
    });
    assert_eq!(code, 0);
}

#[test]
fn cpv_destructor_may_use_other_cpvs() {
    // Re-initializing a Cpv drops the old value; its destructor reads
    // another Cpv, which needs the PE's state not to be borrowed then.
    static READ_IN_DROP: Cpv<Cell<u32>> = Cpv::new();
    static HOLDER: Cpv<ReadsOnDrop> = Cpv::new();
    struct ReadsOnDrop;
    impl Drop for ReadsOnDrop {
        fn drop(&mut self) {
            READ_IN_DROP.with(|c| c.set(c.get() + 1));
        }
    }
    let code = common::run_user(2, 2, |_| {
        READ_IN_DROP.initialize(Cell::new(0));
        HOLDER.initialize(ReadsOnDrop);
        HOLDER.initialize(ReadsOnDrop);
        assert_eq!(READ_IN_DROP.with(|c| c.get()), 1);
    });
    assert_eq!(code, 0);
}

#[test]
fn starting_a_job_on_a_pe_thread_is_refused_before_any_pe_starts() {
    let inner_starts = Arc::new(AtomicUsize::new(0));
    let seen = inner_starts.clone();
    let code = common::run_user(1, 1, move |_| {
        let counter = seen.clone();
        let nested = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Converse::new().args(["inner", "+p", "3"]).run(move |_| {
                counter.fetch_add(1, Ordering::SeqCst);
            })
        }));
        assert!(nested.is_err(), "a PE thread cannot start a second job");
    });
    assert_eq!(code, 0);
    assert_eq!(
        inner_starts.load(Ordering::SeqCst),
        0,
        "no PE of the refused job ran"
    );
}

#[test]
fn panic_in_pe0_teardown_is_raised_after_every_pe_stopped() {
    static PANICS_ON_DROP: Cpv<PanicOnDrop> = Cpv::new();
    struct PanicOnDrop;
    impl Drop for PanicOnDrop {
        fn drop(&mut self) {
            panic!("drop panics on PE {}", my_pe());
        }
    }
    let pe1_done = Arc::new(AtomicUsize::new(0));
    let done = pe1_done.clone();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        common::run_user(2, 2, move |_| {
            if my_pe() == 0 {
                PANICS_ON_DROP.initialize(PanicOnDrop);
            } else {
                std::thread::sleep(std::time::Duration::from_millis(100));
                done.store(1, Ordering::SeqCst);
            }
        })
    }));
    assert!(result.is_err(), "the destructor's panic reaches the caller");
    assert_eq!(
        pe1_done.load(Ordering::SeqCst),
        1,
        "PE 1 finished before run returned"
    );
}

#[test]
fn a_pinned_pe_0_gives_the_callers_thread_its_processors_back() {
    use converse::machine::affinity;
    let before = affinity::current_thread_cpus().expect("the thread's processors");
    if before.len() < 2 {
        return; // nothing to tell apart on one processor
    }
    // PE 0 of a job started here runs on this thread and is pinned to
    // one processor for the job's life, not beyond it.
    Converse::new()
        .args(["prog", "+p", "1", "+setcpuaffinity"])
        .init_returns(|_| {})
        .expect("the job starts");
    assert_eq!(affinity::current_thread_cpus().unwrap().len(), 1, "pinned");
    assert_eq!(converse::finish(0), 0);
    assert_eq!(affinity::current_thread_cpus().unwrap(), before);
}
