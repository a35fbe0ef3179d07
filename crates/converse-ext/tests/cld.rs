//! Seed load balancing (`cld`): the tree search of `examples/cld_tree.rs`
//! under every strategy, in one process (across processes: `ext_cld` in
//! `convrun`'s multi-process tests), and the module's calls one by one.
#[path = "../examples/cld_tree.rs"]
mod example;

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Mutex;

use converse::{Message, Queueing};
use converse_ext::cld::{self, Dest, NodeDest, SeedInfo};

/// Jobs of this file run one at a time (they share the example's report).
static SERIAL: Mutex<()> = Mutex::new(());

fn job(args: &[&str], start: impl Fn(&[String]) + Send + Sync + 'static) -> i32 {
    cld::install();
    converse::Converse::new()
        .args(args.iter().copied())
        .run(start)
        .expect("the job starts")
}

fn tree(args: &[&str]) -> example::Report {
    *example::REPORT.lock().unwrap() = None;
    assert_eq!(job(args, example::start), 0, "{args:?}");
    example::REPORT
        .lock()
        .unwrap()
        .take()
        .expect("PE 0 reported")
}

fn fib(n: u64) -> u64 {
    (0..n).fold((0, 1), |(a, b), _| (b, a + b)).0
}

#[test]
fn every_strategy_gives_the_answer_and_runs_every_seed_once() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let layouts: [&[&str]; 3] = [&["+p", "1"], &["+p", "2"], &["+p", "4", "++ppn", "2"]];
    for strategy in ["none", "rand", "neighbor", "workstealing", "ring", "test"] {
        for layout in layouts {
            for prio in ["bits", "int"] {
                let mut args = vec!["cld_tree", "22", "8", prio];
                args.extend_from_slice(layout);
                args.extend_from_slice(&["+balancer", strategy]);
                let r = tree(&args);
                // The example checked the seeds' count and positions and the
                // trails; here, what it reported.
                assert_eq!(r.answer, fib(22), "{args:?}");
                assert_eq!(r.seeds, 1973, "{args:?}");
                assert_eq!(r.per_pe.iter().sum::<u64>(), r.seeds, "{args:?}");
                assert_eq!(r.packs, 0, "one process: nothing packed ({args:?})");
                assert_eq!(r.left_process, 0, "{args:?}");
                let name = if strategy == "test" { "ring" } else { strategy };
                assert_eq!(r.strategy, name);
                if strategy == "none" {
                    assert_eq!(r.moved, 0, "{args:?}");
                }
                let several = layout.len() > 2 || layout[1] != "1";
                if several && (strategy == "rand" || strategy == "workstealing") {
                    assert!(r.moved > 0, "seeds moved under {args:?}");
                }
            }
        }
    }
}

#[test]
fn the_default_strategy_is_workstealing() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let r = tree(&["cld_tree", "20", "8", "+p", "2"]);
    assert_eq!(r.strategy, cld::DEFAULT_STRATEGY);
    assert_eq!(r.answer, fib(20));
}

/// A seed for `handler` whose info function reads an `i32` priority from
/// its payload.
fn prio_seed(handler: usize, prio: i32, tag: u32) -> Message {
    let mut p = prio.to_le_bytes().to_vec();
    p.extend_from_slice(&tag.to_le_bytes());
    Message::from_payload(handler, &p)
}

fn prio_info(msg: &Message) -> SeedInfo {
    let p = i32::from_le_bytes(msg.payload()[..4].try_into().unwrap());
    SeedInfo::new(msg, Queueing::IFifo(p))
}

fn tag(msg: &Message) -> u32 {
    u32::from_le_bytes(msg.payload()[4..8].try_into().unwrap())
}

/// The token queue through the public calls: counts, the load, which seed
/// `get_token` takes, and the order the rest run in.
#[test]
fn the_token_queue_counts_and_orders_exactly() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let code = job(&["t", "+p", "1"], |_| {
        let info = cld::register_info_fn(prio_info);
        let ran = Rc::new(RefCell::new(Vec::new()));
        let r = Rc::clone(&ran);
        let handler = converse::register_handler(move |m: Message| {
            r.borrow_mut().push(tag(&m));
            if r.borrow().len() == 4 {
                assert_eq!(*r.borrow(), [3, 4, 1, 2]);
                assert_eq!(cld::count_tokens(), 0);
                assert_eq!(cld::load(), 0);
                converse::exit(0);
            }
        });
        let prios = [(1, 5), (2, 5), (3, -1), (4, 2), (5, -7)];
        for (t, p) in prios {
            let mut seed = prio_seed(handler, p, t);
            cld::set_info_fn(&mut seed, info);
            cld::put_token(seed);
        }
        assert_eq!(cld::count_tokens(), 5);
        assert_eq!(cld::load(), 5);
        // The most urgent goes.
        let taken = cld::get_token().expect("a token");
        assert_eq!(tag(&taken), 5);
        assert_eq!(cld::count_tokens(), 4);
        // Its token message still waits, but the load does not count it.
        assert_eq!(converse::csd::length(), 5);
        assert_eq!(cld::load(), 4);
    });
    assert_eq!(code, 0);
}

/// `Dest::Pe`, the broadcasts and the node forms deliver each seed once,
/// with its own handler back; `multiple_send` moves exactly what it says.
#[test]
fn seeds_go_where_they_are_sent_once() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let code = job(&["t", "+p", "4", "++ppn", "2", "+balancer", "none"], |_| {
        let info = cld::register_info_fn(prio_info);
        // Every PE counts what it ran, by tag; PE 0 gathers at the end.
        let ran: Rc<RefCell<Vec<(u32, usize)>>> = Rc::default();
        let r = Rc::clone(&ran);
        let own = Rc::new(Cell::new(0));
        let o = Rc::clone(&own);
        own.set(converse::register_handler(move |m: Message| {
            assert_eq!(m.handler(), o.get(), "the seed's own handler is back");
            r.borrow_mut().push((tag(&m), converse::my_pe()));
        }));
        let all: Rc<RefCell<Vec<(u32, usize)>>> = Rc::default();
        let a = Rc::clone(&all);
        let gather = converse::register_handler(move |m: Message| {
            for c in m.payload().chunks(8) {
                let t = u32::from_le_bytes(c[..4].try_into().unwrap());
                let pe = u32::from_le_bytes(c[4..].try_into().unwrap()) as usize;
                a.borrow_mut().push((t, pe));
            }
        });
        let r = Rc::clone(&ran);
        let report = converse::register_handler(move |_m: Message| {
            let bytes: Vec<u8> = r
                .borrow()
                .iter()
                .flat_map(|(t, pe)| [t.to_le_bytes(), (*pe as u32).to_le_bytes()].concat())
                .collect();
            converse::sync_send_and_free(0, Message::from_payload(gather, &bytes));
        });
        let a = Rc::clone(&all);
        let check = converse::register_handler(move |_m: Message| {
            let mut got = a.borrow().clone();
            got.sort_unstable();
            let mut want = vec![(1, 2)];
            want.extend((1..4).map(|pe| (2, pe)));
            want.extend((0..4).map(|pe| (3, pe)));
            // Node seeds: one run on a PE of node 1, one on node 0.
            let node_runs: Vec<_> = got.iter().filter(|(t, _)| *t == 4 || *t == 5).collect();
            assert_eq!(node_runs.len(), 2, "{got:?}");
            for (t, pe) in node_runs {
                let node = if *t == 4 { 1 } else { 0 };
                assert_eq!(converse::node_of(*pe), node, "{got:?}");
            }
            // Multiple send: 3 moved to PE 3, 2 stayed on PE 0.
            want.extend([(6, 0), (6, 0), (6, 3), (6, 3), (6, 3)]);
            got.retain(|(t, _)| *t != 4 && *t != 5);
            want.sort_unstable();
            assert_eq!(got, want);
            converse::exit(0);
        });
        if converse::my_pe() != 0 {
            return;
        }
        let h = own.get();
        cld::enqueue(Dest::Pe(2), prio_seed(h, 0, 1), info);
        cld::enqueue(Dest::Broadcast, prio_seed(h, 0, 2), info);
        cld::enqueue(Dest::BroadcastAll, prio_seed(h, 0, 3), info);
        cld::node_enqueue(NodeDest::Node(1), prio_seed(h, 0, 4), info);
        cld::node_enqueue(NodeDest::Anywhere, prio_seed(h, 0, 5), info);
        for p in 0..5 {
            let mut seed = prio_seed(h, p, 6);
            cld::set_info_fn(&mut seed, info);
            cld::put_token(seed);
        }
        assert_eq!(cld::multiple_send(3, 3), 3);
        assert_eq!(cld::count_tokens(), 2);
        assert_eq!(cld::stats().relocated_messages, 3);
        converse::start_quiescence_detection(move || {
            converse::sync_broadcast_all_and_free(Message::new(report, 0));
            converse::start_quiescence_detection(move || {
                converse::sync_send_and_free(0, Message::new(check, 0));
            });
        });
    });
    assert_eq!(code, 0);
}

/// A strategy of the program's own, chosen by `+balancer`: every seed that
/// may go anywhere goes to the last PE.
#[test]
fn a_registered_strategy_is_chosen_by_name() {
    struct ToLast;
    impl cld::Strategy for ToLast {
        fn name(&self) -> &'static str {
            "to-last"
        }
        fn place(&self, _cld: &cld::Balancer, seed: Message, _info: SeedInfo) {
            cld::send_seed(converse::num_pes() - 1, seed);
        }
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(cld::register_strategy("to-last", || Box::new(ToLast)));
    assert!(!cld::register_strategy("to-last", || Box::new(ToLast)));
    assert!(!cld::register_strategy("rand", || Box::new(ToLast)));
    assert!(cld::strategy_names().contains(&"to-last"));
    let code = job(&["t", "+p", "3", "+balancer", "to-last"], |_| {
        assert_eq!(cld::get_strategy(), "to-last");
        let info = cld::register_info_fn(prio_info);
        let count = Rc::new(Cell::new(0));
        let c = Rc::clone(&count);
        let handler = converse::register_handler(move |_m: Message| {
            assert_eq!(converse::my_pe(), 2);
            c.set(c.get() + 1);
            if c.get() == 6 {
                converse::exit(0);
            }
        });
        for t in 0..2 {
            cld::enqueue(Dest::Anywhere, prio_seed(handler, 0, t), info);
        }
    });
    assert_eq!(code, 0);
}

#[test]
fn switching_the_handler_keeps_the_info_function() {
    let mut m = Message::new(77, 4);
    cld::set_info_fn(&mut m, 9);
    cld::switch_handler(&mut m, 5);
    assert_eq!(m.handler(), 5);
    assert_eq!(cld::info_fn_index(&m), 9);
    cld::restore_handler(&mut m);
    assert_eq!(m.handler(), 77);
    assert_eq!(cld::info_fn_index(&m), 9);
}

/// The movable pool is bounded: a strategy that keeps every seed here gets
/// `MOVABLE_MAX` tokens, the rest wait in the scheduler queue, and all of
/// them run.
#[test]
fn the_movable_pool_is_bounded() {
    struct KeepHere;
    impl cld::Strategy for KeepHere {
        fn name(&self) -> &'static str {
            "keep-here"
        }
        fn place(&self, cld: &cld::Balancer, seed: Message, info: SeedInfo) {
            cld.keep(seed, info.queueing);
        }
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    cld::register_strategy("keep-here", || Box::new(KeepHere));
    let extra = 100;
    let code = job(&["t", "+p", "2", "+balancer", "keep-here"], move |_| {
        let info = cld::register_info_fn(prio_info);
        let ran = Rc::new(Cell::new(0));
        let r = Rc::clone(&ran);
        let total = cld::MOVABLE_MAX + extra;
        let handler = converse::register_handler(move |_m: Message| {
            r.set(r.get() + 1);
            if r.get() == total {
                assert_eq!(cld::count_tokens(), 0);
                converse::exit(0);
            }
        });
        if converse::my_pe() != 0 {
            return;
        }
        for t in 0..total {
            cld::enqueue(Dest::Anywhere, prio_seed(handler, 0, t as u32), info);
        }
        assert_eq!(cld::count_tokens(), cld::MOVABLE_MAX);
        assert_eq!(cld::load(), total);
    });
    assert_eq!(code, 0);
}
