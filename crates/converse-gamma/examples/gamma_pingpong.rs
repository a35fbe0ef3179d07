//! A GAMMA program as the document writes them: sequential until
//! `gamma_init`, then SPMD. Node 0 and node 1 bounce a counter through
//! active ports; every node then sends its number to node 0, which
//! gathers them into one `GO_AHEAD` buffer; all meet at a barrier.
//!
//! `cargo build -p convrun && cargo run -p converse-gamma --example
//! gamma_pingpong -- 3`: started by hand, `gamma_init(3)` replicates the
//! program through `convrun` (beside it in `target/`). Or under the
//! launcher: `convrun +p 3 target/debug/examples/gamma_pingpong 3`.
use std::cell::Cell;
use std::rc::Rc;

use converse_gamma::{self as gamma, Buffer, Dest, DestNode, GO_AHEAD, GO_BACK};

fn main() {
    let num_nodes: i32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2);
    if let Err(e) = gamma::init(num_nodes, std::env::args()) {
        eprintln!("{e}");
        std::process::exit(e.code().abs());
    }
    let me = gamma::my_node().unwrap();
    let n = gamma::how_many_nodes().unwrap();
    let pid = gamma::my_par_pid().unwrap();
    let to = |node, port| {
        Some(Dest {
            node: DestNode::Node(node),
            par_pid: pid,
            port,
        })
    };

    // Port 1: the counter between nodes 0 and 1, counted by a handler.
    let counter = Buffer::new(8);
    let bounces = Rc::new(Cell::new(0));
    let b = Rc::clone(&bounces);
    let on_counter = Rc::new(move || {
        b.set(b.get() + 1);
        gamma::signal(2).unwrap();
    });
    if me < 2 && n > 1 {
        gamma::set_active_port(
            1,
            to(1 - me, 1),
            Some(on_counter),
            None,
            1,
            GO_BACK,
            Some(counter.clone()),
            8,
        )
        .unwrap();
    }
    // Port 3: every node's number, gathered at node 0.
    let gathered = Buffer::new(n as usize);
    if me == 0 {
        gamma::set_passive_port(3, None, 3, GO_AHEAD, Some(gathered.clone()), n as usize).unwrap();
    } else {
        gamma::set_passive_port(3, to(0, 3), 0, GO_BACK, None, 0).unwrap();
    }
    gamma::sync().unwrap();

    let t0 = gamma::time();
    let rounds = 1000u64;
    if n > 1 && me < 2 {
        for i in 0..rounds {
            if me == 0 {
                gamma::send(1, &(2 * i).to_le_bytes()).unwrap();
            }
            gamma::wait(2, 1).unwrap();
            let x = u64::from_le_bytes(counter.borrow()[..].try_into().unwrap());
            if me == 1 {
                gamma::send(1, &(x + 1).to_le_bytes()).unwrap();
            }
        }
    }
    let us = gamma::time_diff(gamma::time(), t0);
    if me == 0 {
        gamma::wait(3, u64::from(n - 1)).unwrap();
    } else {
        gamma::send(3, &[me as u8]).unwrap();
    }
    gamma::sync().unwrap();
    if me == 0 {
        let mut got = gathered.borrow()[..n as usize - 1].to_vec();
        got.sort();
        println!(
            "group {pid}: {n} nodes; {} bounces between nodes 0 and 1, {:.2} us a round trip; \
             node 0 gathered {got:?}",
            bounces.get(),
            us / rounds as f64
        );
    }
    let code = gamma::exit().unwrap();
    std::process::exit(code);
}
