//! Integration tests of node reductions (`src/cmi/node_reduce.rs`): the four
//! calls over every layout of up to 8 PEs and three branching factors, with
//! the contribution made by a PE that is not always its node's first;
//! matching by call order and by ID (global IDs contributed in different
//! orders on different nodes, dynamic IDs handed out remotely to every
//! node); and the errors: a node joining twice, a dynamic ID asked for off
//! node 0, a node that never joins (the stall report).
//!
//! Results are logged by the result handlers (with the PE they ran on) and
//! checked after the job, which ends at quiescence: a reduction that never
//! completes shows as a missing result, not a hang. Concatenations follow
//! the documented tree order: the pre-order walk of the k-ary heap over the
//! nodes, computed here independently of the runtime.
use crate::common;
use common::*;

use converse::{Converse, Message, NodeReductionId};
use std::sync::{Arc, Mutex};

fn job(p: usize, ppn: usize, k: usize, start: impl Fn(&[String]) + Send + Sync + 'static) {
    let code = within(20, move || {
        let args = [
            "node_reduce".to_string(),
            "+p".into(),
            p.to_string(),
            "++ppn".into(),
            ppn.to_string(),
            "++spantree-branch".into(),
            k.to_string(),
        ];
        Converse::new()
            .args(args)
            .run(start)
            .unwrap_or_else(|e| panic!("bad command line: {e}"))
    });
    assert_eq!(code, 0, "p={p} ppn={ppn} k={k}: exit code");
}

fn end_at_quiescence() {
    if converse::my_pe() == 0 {
        converse::start_quiescence_detection(|| converse::exit(0));
    }
}

/// The PE of `node` that contributes: its rank varies with the node.
fn contributor(node: usize, ppn: usize) -> usize {
    node * ppn + (node * 7 + 3) % ppn
}

/// The pre-order walk of the k-ary heap over nodes `0..n`.
fn preorder(n: usize, k: usize) -> Vec<u64> {
    fn walk(j: usize, n: usize, k: usize, out: &mut Vec<u64>) {
        out.push(j as u64);
        for c in k * j + 1..=k * j + k {
            if c < n {
                walk(c, n, k, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(0, n, k, &mut out);
    out
}

/// A result: (tag, the PE it ran on, the concatenated nodes).
type Log = Arc<Mutex<Vec<(u64, usize, Vec<u64>)>>>;

fn words(msg: &Message) -> Vec<u64> {
    msg.payload()
        .chunks_exact(8)
        .map(|w| u64::from_le_bytes(w.try_into().unwrap()))
        .collect()
}

/// Message form: words `tag, nodes...`; the merge appends the children's
/// nodes (after checking their tags).
fn concat_msgs(local: Message, children: Vec<Message>) -> Message {
    let mut w = words(&local);
    for c in &children {
        let cw = words(c);
        assert_eq!(cw[0], w[0], "contributions of different reductions merged");
        w.extend(&cw[1..]);
    }
    msg_u64(local.handler(), &w)
}

/// Struct form: `(tag, nodes)`.
fn concat_structs(mut local: (u64, Vec<u64>), children: Vec<(u64, Vec<u64>)>) -> (u64, Vec<u64>) {
    for (tag, nodes) in children {
        assert_eq!(tag, local.0, "contributions of different reductions merged");
        local.1.extend(nodes);
    }
    local
}

/// Registers (message-form, struct-form) result handlers logging to `log`.
fn result_handlers(log: &Log) -> (usize, usize) {
    let l = log.clone();
    let hm = converse::register_handler(move |m: Message| {
        let w = words(&m);
        l.lock()
            .unwrap()
            .push((w[0], converse::my_pe(), w[1..].to_vec()));
    });
    let l = log.clone();
    let hs = converse::register_handler(move |m: Message| {
        let (tag, nodes): (u64, Vec<u64>) = converse::decode_struct_result(&m).unwrap();
        l.lock().unwrap().push((tag, converse::my_pe(), nodes));
    });
    (hm, hs)
}

fn check(log: &Log, tags: &[u64], nodes: usize, ppn: usize, k: usize, ctx: &str) {
    let mut got = log.lock().unwrap().clone();
    got.sort();
    let order = preorder(nodes, k);
    assert_eq!(got.len(), tags.len(), "{ctx}: results {got:?}");
    for ((tag, pe, concat), want) in got.iter().zip(tags) {
        assert_eq!(tag, want, "{ctx}: results {got:?}");
        assert!(
            *pe < ppn,
            "{ctx}: result {tag} ran on PE {pe}, not on node 0"
        );
        assert_eq!(concat, &order, "{ctx}: result {tag}");
    }
}

#[test]
fn the_four_calls_reduce_over_nodes_in_tree_order_on_every_layout() {
    for p in 1..=8 {
        for ppn in (1..=p).filter(|d| p % d == 0) {
            for k in [1, 2, 4] {
                let log = Log::default();
                let l = log.clone();
                job(p, ppn, k, move |_| {
                    let (hm, hs) = result_handlers(&l);
                    let me = converse::my_pe();
                    let node = converse::my_node();
                    if me == contributor(node, ppn) {
                        let n = node as u64;
                        converse::node_reduce(msg_u64(hm, &[1, n]), concat_msgs);
                        converse::node_reduce_struct((2u64, vec![n]), concat_structs, hs);
                        let a = converse::global_node_reduction_id();
                        let b = converse::global_node_reduction_id();
                        // Odd nodes contribute to the ID reductions in the
                        // other order.
                        let by_id = |id: NodeReductionId, tag: u64| {
                            if tag == 3 {
                                converse::node_reduce_id(msg_u64(hm, &[3, n]), concat_msgs, id);
                            } else {
                                converse::node_reduce_struct_id(
                                    (4u64, vec![n]),
                                    concat_structs,
                                    hs,
                                    id,
                                );
                            }
                        };
                        if node.is_multiple_of(2) {
                            by_id(a, 3);
                            by_id(b, 4);
                        } else {
                            by_id(b, 4);
                            by_id(a, 3);
                        }
                        converse::node_reduce(msg_u64(hm, &[5, n]), concat_msgs);
                    }
                    end_at_quiescence();
                });
                check(
                    &log,
                    &[1, 2, 3, 4, 5],
                    p / ppn,
                    ppn,
                    k,
                    &format!("p={p} ppn={ppn} k={k}"),
                );
            }
        }
    }
}

#[test]
fn dynamic_node_ids_reach_every_node_once_and_are_usable() {
    for (p, ppn) in [(1, 1), (4, 2), (6, 2), (6, 3), (5, 1)] {
        let log = Log::default();
        let l = log.clone();
        job(p, ppn, 2, move |_| {
            let (hm, _) = result_handlers(&l);
            let got = converse::register_handler(move |m: Message| {
                let (id, data) = converse::dynamic_node_reduction_reply(&m).expect("a reply");
                assert_eq!(data, b"node ids");
                let n = converse::my_node() as u64;
                converse::node_reduce_id(msg_u64(hm, &[7, n]), concat_msgs, id);
            });
            // The last node's first PE asks; every node gets the ID once,
            // through its node queue, and contributes with it.
            let nodes = converse::num_nodes();
            if converse::my_pe() == (nodes - 1) * ppn {
                converse::dynamic_node_reduction_id_remote(got, None, b"node ids");
            }
            // Node 0 may take IDs itself; they differ from the remote one.
            if converse::my_pe() == 0 {
                let a = converse::dynamic_node_reduction_id();
                let b = converse::dynamic_node_reduction_id();
                assert_ne!(a, b);
                assert_eq!(NodeReductionId::from_raw(a.raw()), Some(a));
                assert!(converse::ReductionId::from_raw(a.raw()).is_none());
            }
            end_at_quiescence();
        });
        check(&log, &[7], p / ppn, ppn, 2, &format!("p={p} ppn={ppn}"));
    }
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

const ERROR_SCENARIO: &str = "CONVERSE_NODE_REDUCE_ERROR_SCENARIO";

fn error_scenario(name: &str) -> i32 {
    let name = name.to_string();
    Converse::new()
        .args(["node_reduce", "+p", "4", "++ppn", "2"])
        .run(move |_: &[String]| {
            let h = converse::register_handler(|_m: Message| {});
            let keep = |local: Message, _: Vec<Message>| local;
            // PE 1 contributes with the ID PE 0 sends it.
            let also = converse::register_handler(move |m: Message| {
                let id = NodeReductionId::from_raw(read_u64(&m, 0) as u32).unwrap();
                converse::node_reduce_id(Message::new(h, 0), keep, id);
            });
            let me = converse::my_pe();
            match name.as_str() {
                // Both PEs of node 0 contribute to one ID; node 1 never
                // does, so the first deposit still waits when the second
                // comes.
                "twice" => {
                    if me == 0 {
                        let id = converse::global_node_reduction_id();
                        converse::node_reduce_id(Message::new(h, 0), keep, id);
                        converse::sync_send_and_free(1, msg_u64(also, &[id.raw() as u64]));
                    }
                }
                "dynamic" => {
                    if me == 3 {
                        let _ = converse::dynamic_node_reduction_id();
                    }
                }
                // Only node 0 joins: the stall check reports it.
                "stall" => {
                    if me == 1 {
                        converse::node_reduce(Message::new(h, 0), keep);
                    }
                }
                other => panic!("unknown scenario {other}"),
            }
        })
        .unwrap()
}

/// Runs the scenario named by [`ERROR_SCENARIO`], if set (a child process
/// of [`node_reduction_errors_abort_naming_the_node`]).
#[test]
fn node_reduce_error_child() {
    let Ok(name) = std::env::var(ERROR_SCENARIO) else {
        return;
    };
    let code = error_scenario(&name);
    eprintln!("scenario {name} returned {code}");
    std::process::exit(90)
}

fn run_error_scenario(name: &str) -> (Option<i32>, String) {
    let exe = std::env::current_exe().unwrap();
    let out = within(30, {
        let name = name.to_string();
        move || {
            std::process::Command::new(exe)
                .args([
                    "--exact",
                    common::test_path(module_path!(), "node_reduce_error_child"),
                    "--nocapture",
                ])
                .env(ERROR_SCENARIO, name)
                .env("RUST_BACKTRACE", "0")
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap()
        }
    });
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn node_reduction_errors_abort_naming_the_node() {
    let cases: [(&str, &[&str]); 3] = [
        (
            "twice",
            &[
                "PE 1 aborting",
                "node 0 joined node reduction with global ID",
                "twice: PEs 0 and 1 both called it",
                "one PE per node",
            ],
        ),
        (
            "dynamic",
            &[
                "PE 3 aborting",
                "dynamic_node_reduction_id may only be called on node 0",
            ],
        ),
        (
            "stall",
            &[
                "can never complete",
                "node 0 joined node reduction #0",
                "waits for nodes [1]",
            ],
        ),
    ];
    let runs: Vec<_> = cases
        .iter()
        .map(|&(name, _)| std::thread::spawn(move || run_error_scenario(name)))
        .collect();
    for ((name, needles), run) in cases.iter().zip(runs) {
        let (code, stderr) = run.join().unwrap();
        assert_eq!(
            code,
            Some(converse::ABORT_EXIT_CODE),
            "scenario {name}: stderr:\n{stderr}"
        );
        for needle in *needles {
            assert!(
                stderr.contains(needle),
                "scenario {name}: stderr lacks {needle:?}:\n{stderr}"
            );
        }
    }
}
