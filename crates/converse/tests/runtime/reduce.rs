//! Integration tests of reductions (`src/cmi/reduce.rs`): the eight calls,
//! matching by call order and by ID, several reductions in flight, PE lists
//! and groups (also groups whose definition has not reached a PE yet), large
//! contributions, dynamic IDs, ownership, and a property test of the struct
//! form.
//!
//! Every job ends by quiescence detection started on PE 0, and the results
//! are collected by the result handlers into a shared log that is checked
//! after the job: a reduction that never completes shows up as a missing
//! result (not a hang), one delivered twice as an extra one. Each
//! contribution carries a tag naming its reduction, and every merge asserts
//! that the tags agree, so contributions of different reductions merged
//! together fail the test on the spot.
//!
//! Concatenations are checked against the order the module documents: the
//! children's contributions are merged in spanning-tree order, so "local,
//! then children" concatenation is the pre-order walk of the k-ary heap over
//! the PE list (children of position j: k·j+1 ..= k·j+k), computed here
//! independently of the runtime's `SpanningTree`.
use crate::common;
use common::*;

use converse::{Converse, Group, Message, ReductionId};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

// ---------------------------------------------------------------------------
// Job set-up
// ---------------------------------------------------------------------------

/// The branching factors every test runs with.
const BRANCHES: [usize; 3] = [1, 2, 4];

fn divisors(p: usize) -> Vec<usize> {
    (1..=p).filter(|d| p.is_multiple_of(*d)).collect()
}

/// Every (PEs, PEs per node) layout with 1 to 9 PEs.
fn layouts() -> Vec<(usize, usize)> {
    (1..=9)
        .flat_map(|p| divisors(p).into_iter().map(move |ppn| (p, ppn)))
        .collect()
}

/// Every layout with every branching factor of [`BRANCHES`].
fn configs() -> Vec<(usize, usize, usize)> {
    layouts()
        .into_iter()
        .flat_map(|(p, ppn)| BRANCHES.map(|k| (p, ppn, k)))
        .collect()
}

/// Runs `start` on `p` PEs in nodes of `ppn` with spanning-tree branching
/// factor `k`, under a hang guard, and asserts that the job exits with 0.
fn job(p: usize, ppn: usize, k: usize, start: impl Fn(&[String]) + Send + Sync + 'static) {
    let code = within(20, move || {
        let args = [
            "reduce".to_string(),
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

/// On PE 0: ends the job once nothing is left to do anywhere.
fn end_at_quiescence() {
    if converse::my_pe() == 0 {
        converse::start_quiescence_detection(|| converse::exit(0));
    }
}

// ---------------------------------------------------------------------------
// The reduced value: sum, max and concatenation, tagged with its reduction
// ---------------------------------------------------------------------------

/// One reduction's value: the sum and max of the contributions and the
/// concatenation of the contributing PEs ("local, then children").
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
struct Agg {
    tag: u64,
    sum: u64,
    max: u64,
    pes: Vec<u64>,
}

/// PE `pe`'s contribution to the reduction tagged `tag` (1..=23, not
/// monotonic in `pe`, so the max is not simply the last PE's).
fn value(pe: usize, tag: u64) -> u64 {
    (pe as u64 * 37 + tag * 11 + 5) % 23 + 1
}

impl Agg {
    /// PE `pe`'s contribution to reduction `tag`.
    fn of_pe(tag: u64, pe: usize) -> Agg {
        let v = value(pe, tag);
        Agg {
            tag,
            sum: v,
            max: v,
            pes: vec![pe as u64],
        }
    }

    /// The calling PE's contribution to reduction `tag`.
    fn mine(tag: u64) -> Agg {
        Agg::of_pe(tag, converse::my_pe())
    }

    /// The struct-form merge: local first, then the children in order.
    fn merge(mut self, children: Vec<Agg>) -> Agg {
        assert!(
            !children.is_empty(),
            "PE {}: merge called without children",
            converse::my_pe()
        );
        for c in children {
            assert_eq!(
                c.tag,
                self.tag,
                "PE {}: contributions of different reductions merged together",
                converse::my_pe()
            );
            self.sum += c.sum;
            self.max = self.max.max(c.max);
            self.pes.extend(c.pes);
        }
        self
    }

    /// As a message for `handler`: words `tag, sum, max, pes...`.
    fn to_msg(&self, handler: usize) -> Message {
        let mut words = vec![self.tag, self.sum, self.max];
        words.extend(&self.pes);
        msg_u64(handler, &words)
    }

    fn of_msg(msg: &Message) -> Agg {
        let words: Vec<u64> = msg
            .payload()
            .chunks_exact(8)
            .map(|w| u64::from_le_bytes(w.try_into().unwrap()))
            .collect();
        assert!(words.len() >= 3, "short reduction message: {words:?}");
        Agg {
            tag: words[0],
            sum: words[1],
            max: words[2],
            pes: words[3..].to_vec(),
        }
    }

    /// The calling PE's contribution to reduction `tag`, as a message.
    fn mine_msg(tag: u64, handler: usize) -> Message {
        Agg::mine(tag).to_msg(handler)
    }
}

/// The message-form merge: a new message for the local message's handler.
fn merge_msgs(local: Message, children: Vec<Message>) -> Message {
    let handler = local.handler();
    for c in &children {
        assert_eq!(c.handler(), handler, "a child's message lost its handler");
    }
    Agg::of_msg(&local)
        .merge(children.iter().map(Agg::of_msg).collect())
        .to_msg(handler)
}

/// The pre-order walk of the k-ary heap over `members` (positions), i.e.
/// the documented "local, then children in tree order" concatenation.
fn preorder(members: &[usize], k: usize) -> Vec<u64> {
    fn walk(j: usize, members: &[usize], k: usize, out: &mut Vec<u64>) {
        out.push(members[j] as u64);
        for c in k * j + 1..=k * j + k {
            if c < members.len() {
                walk(c, members, k, out);
            }
        }
    }
    let mut out = Vec::new();
    if !members.is_empty() {
        walk(0, members, k, &mut out);
    }
    out
}

// ---------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Form {
    Msg,
    Struct,
}

/// A result as delivered: by which form's handler, on which PE.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Got {
    tag: u64,
    form: Form,
    root: usize,
    agg: Agg,
}

type Log = Arc<Mutex<Vec<Got>>>;

fn new_log() -> Log {
    Arc::new(Mutex::new(Vec::new()))
}

/// Registers the result handlers `(message form, struct form)`, which log
/// what they get and where. Same order on every PE.
fn result_handlers(log: &Log) -> (usize, usize) {
    let l = log.clone();
    let hm = converse::register_handler(move |m: Message| {
        let agg = Agg::of_msg(&m);
        let got = Got {
            tag: agg.tag,
            form: Form::Msg,
            root: converse::my_pe(),
            agg,
        };
        l.lock().unwrap().push(got);
    });
    let l = log.clone();
    let hs = converse::register_handler(move |m: Message| {
        let agg: Agg = converse::decode_struct_result(&m).expect("struct result decodes");
        let got = Got {
            tag: agg.tag,
            form: Form::Struct,
            root: converse::my_pe(),
            agg,
        };
        l.lock().unwrap().push(got);
    });
    (hm, hs)
}

/// The result expected of reduction `tag` over `members` (root first) with
/// branching factor `k`.
fn expect(tag: u64, form: Form, members: &[usize], k: usize) -> Got {
    Got {
        tag,
        form,
        root: members[0],
        agg: Agg {
            tag,
            sum: members.iter().map(|&p| value(p, tag)).sum(),
            max: members.iter().map(|&p| value(p, tag)).max().unwrap(),
            pes: preorder(members, k),
        },
    }
}

fn all_pes(n: usize) -> Vec<usize> {
    (0..n).collect()
}

/// Asserts that `log` holds exactly `expected` (in any order); returns the
/// log sorted.
fn check(log: &Log, mut expected: Vec<Got>, ctx: &str) -> Vec<Got> {
    let mut got = log.lock().unwrap().clone();
    got.sort();
    expected.sort();
    if got != expected {
        let missing: Vec<&Got> = expected.iter().filter(|e| !got.contains(e)).collect();
        let extra: Vec<&Got> = got.iter().filter(|g| !expected.contains(g)).collect();
        panic!(
            "{ctx}: results differ\n  expected but not delivered: {missing:#?}\n  delivered but not expected: {extra:#?}"
        );
    }
    got
}

/// A small deterministic generator (SplitMix64) for scrambled PE lists.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn shuffle(&mut self, v: &mut [usize]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }
}

// ---------------------------------------------------------------------------
// 1. The eight calls
// ---------------------------------------------------------------------------

/// The list of `list_reduce` in the eight-call test: reversed, so rooted at
/// the last PE.
fn reversed(n: usize) -> Vec<usize> {
    (0..n).rev().collect()
}

/// The list of `list_reduce_struct`: rotated by n/2.
fn rotated(n: usize) -> Vec<usize> {
    (0..n).map(|i| (i + n / 2) % n).collect()
}

/// The group of the eight-call test: rotated by one, so rooted at PE 1.
fn rotated_by_one(n: usize) -> Vec<usize> {
    (0..n).map(|i| (i + 1) % n).collect()
}

/// Runs the eight calls once on every PE (tags 0..8) and returns the sorted
/// results.
fn eight_calls(p: usize, ppn: usize, k: usize) -> Vec<Got> {
    let log = new_log();
    let l = log.clone();
    job(p, ppn, k, move |_| {
        let (hm, hs) = result_handlers(&l);
        let ids: [ReductionId; 6] = std::array::from_fn(|_| converse::global_reduction_id());
        let n = converse::num_pes();
        // The group's ID comes from its creator (the last PE) in a
        // broadcast, which may overtake the group's definition.
        let go = converse::register_handler(move |m: Message| {
            let g = Group::from_id(read_u64(&m, 0) as u32);
            converse::group_reduce(g, Agg::mine_msg(6, hm), merge_msgs, ids[4]);
            converse::group_reduce_struct(g, Agg::mine(7), Agg::merge, hs, ids[5]);
        });
        converse::reduce(Agg::mine_msg(0, hm), merge_msgs);
        converse::reduce_struct(Agg::mine(1), Agg::merge, hs);
        converse::reduce_id(Agg::mine_msg(2, hm), merge_msgs, ids[0]);
        converse::reduce_struct_id(Agg::mine(3), Agg::merge, hs, ids[1]);
        converse::list_reduce(&reversed(n), Agg::mine_msg(4, hm), merge_msgs, ids[2]);
        converse::list_reduce_struct(&rotated(n), Agg::mine(5), Agg::merge, hs, ids[3]);
        if converse::my_pe() == n - 1 {
            let g = converse::establish_group(&rotated_by_one(n));
            converse::sync_broadcast_all_and_free(msg_u64(go, &[g.id() as u64]));
        }
        end_at_quiescence();
    });
    let all = all_pes(p);
    let expected = vec![
        expect(0, Form::Msg, &all, k),
        expect(1, Form::Struct, &all, k),
        expect(2, Form::Msg, &all, k),
        expect(3, Form::Struct, &all, k),
        expect(4, Form::Msg, &reversed(p), k),
        expect(5, Form::Struct, &rotated(p), k),
        expect(6, Form::Msg, &rotated_by_one(p), k),
        expect(7, Form::Struct, &rotated_by_one(p), k),
    ];
    check(&log, expected, &format!("p={p} ppn={ppn} k={k}"))
}

#[test]
fn eight_calls_give_sum_max_and_tree_order_concatenation_on_their_roots() {
    for (p, ppn, k) in configs() {
        let first = eight_calls(p, ppn, k);
        // Every PE exactly once in every concatenation.
        for got in &first {
            let set: BTreeSet<u64> = got.agg.pes.iter().copied().collect();
            assert_eq!(set.len(), got.agg.pes.len(), "a PE twice: {got:?}");
        }
        // Children are merged in tree order: the same result every run.
        let second = eight_calls(p, ppn, k);
        assert_eq!(first, second, "p={p} ppn={ppn} k={k}: runs differ");
    }
}

// ---------------------------------------------------------------------------
// 2. Several reductions in flight
// ---------------------------------------------------------------------------

#[test]
fn many_call_order_reductions_in_flight_match_by_call_order() {
    for (p, ppn, k) in configs() {
        let log = new_log();
        let l = log.clone();
        job(p, ppn, k, move |_| {
            let (hm, hs) = result_handlers(&l);
            // Six in a row before any can complete; the two forms share the
            // call count.
            for tag in 0..6 {
                if tag % 2 == 0 {
                    converse::reduce(Agg::mine_msg(tag, hm), merge_msgs);
                } else {
                    converse::reduce_struct(Agg::mine(tag), Agg::merge, hs);
                }
            }
            // Results run as handlers, never inside the call that completed
            // the reduction (on one PE every call completes its reduction):
            // PE 0, the root, has not run its scheduler yet.
            if converse::my_pe() == 0 {
                assert!(
                    l.lock().unwrap().is_empty(),
                    "a result ran inside a reduce call"
                );
            }
            // Four more later, from a handler, still in the same order.
            let later = converse::register_handler(move |_m: Message| {
                for tag in 6..10 {
                    if tag % 2 == 0 {
                        converse::reduce_struct(Agg::mine(tag), Agg::merge, hs);
                    } else {
                        converse::reduce(Agg::mine_msg(tag, hm), merge_msgs);
                    }
                }
            });
            converse::sync_send_and_free(converse::my_pe(), Message::new(later, 0));
            end_at_quiescence();
        });
        let all = all_pes(p);
        let expected = (0..10)
            .map(|tag| {
                let form = if (tag < 6) == (tag % 2 == 0) {
                    Form::Msg
                } else {
                    Form::Struct
                };
                expect(tag, form, &all, k)
            })
            .collect();
        check(&log, expected, &format!("p={p} ppn={ppn} k={k}"));
    }
}

/// The tagged reductions of the ID-order test: ID'd ones (any order) and two
/// call-order ones (tags 2 and 5, which must keep their relative order).
const ID_TAGS: [u64; 6] = [0, 1, 3, 4, 6, 7];

/// Contributes the calling PE's part of reduction `tag` of the ID-order test.
fn contribute_id_test(tag: u64, hm: usize, hs: usize, ids: [ReductionId; 6]) {
    let n = converse::num_pes();
    match tag {
        0 => converse::reduce_id(Agg::mine_msg(0, hm), merge_msgs, ids[0]),
        1 => converse::reduce_struct_id(Agg::mine(1), Agg::merge, hs, ids[1]),
        2 => converse::reduce(Agg::mine_msg(2, hm), merge_msgs),
        3 => converse::reduce_id(Agg::mine_msg(3, hm), merge_msgs, ids[2]),
        4 => converse::list_reduce(&reversed(n), Agg::mine_msg(4, hm), merge_msgs, ids[3]),
        5 => converse::reduce_struct(Agg::mine(5), Agg::merge, hs),
        6 => converse::list_reduce_struct(&rotated(n), Agg::mine(6), Agg::merge, hs, ids[4]),
        7 => converse::reduce_struct_id(Agg::mine(7), Agg::merge, hs, ids[5]),
        _ => unreachable!(),
    }
}

/// The order in which PE `pe` makes the calls of the ID-order test.
fn id_test_order(pe: usize) -> Vec<u64> {
    let mut seq = ID_TAGS.to_vec();
    match pe % 3 {
        0 => {}
        1 => seq.reverse(),
        _ => seq.rotate_left(pe % ID_TAGS.len()),
    }
    // The call-order ones at PE-dependent places, 2 before 5.
    let a = pe % (seq.len() + 1);
    seq.insert(a, 2);
    let b = a + 1 + (pe * 3) % (seq.len() - a);
    seq.insert(b, 5);
    seq
}

#[test]
fn id_reductions_contributed_in_different_orders_on_different_pes() {
    for (p, ppn, k) in configs() {
        let log = new_log();
        let l = log.clone();
        job(p, ppn, k, move |_| {
            let (hm, hs) = result_handlers(&l);
            let ids: [ReductionId; 6] = std::array::from_fn(|_| converse::global_reduction_id());
            let me = converse::my_pe();
            let order = id_test_order(me);
            // Even PEs make all their calls at start-up; odd PEs make half
            // of them at start-up and the rest later, from a handler, so
            // contributions often reach parents that have not called yet.
            let split = if me.is_multiple_of(2) {
                order.len()
            } else {
                order.len() / 2
            };
            let rest = Rc::new(RefCell::new(order[split..].to_vec()));
            let later = converse::register_handler(move |_m: Message| {
                for tag in rest.borrow_mut().drain(..) {
                    contribute_id_test(tag, hm, hs, ids);
                }
            });
            for &tag in &order[..split] {
                contribute_id_test(tag, hm, hs, ids);
            }
            converse::sync_send_and_free(me, Message::new(later, 0));
            end_at_quiescence();
        });
        let all = all_pes(p);
        let expected = vec![
            expect(0, Form::Msg, &all, k),
            expect(1, Form::Struct, &all, k),
            expect(2, Form::Msg, &all, k),
            expect(3, Form::Msg, &all, k),
            expect(4, Form::Msg, &reversed(p), k),
            expect(5, Form::Struct, &all, k),
            expect(6, Form::Struct, &rotated(p), k),
            expect(7, Form::Struct, &all, k),
        ];
        check(&log, expected, &format!("p={p} ppn={ppn} k={k}"));
    }
}

#[test]
fn a_global_id_is_reused_after_its_reduction_completed() {
    const ROUNDS: u64 = 4;
    for (p, ppn, k) in configs() {
        let log = new_log();
        let l = log.clone();
        job(p, ppn, k, move |_| {
            let id = converse::global_reduction_id();
            // Round r's result, on PE 0, starts round r + 1 on every PE,
            // with the same ID; the rounds alternate forms.
            let next = Rc::new(Cell::new(0usize));
            let relays = Rc::new(Cell::new((0usize, 0usize)));
            let log_and_go = {
                let (l, next) = (l.clone(), next.clone());
                move |form: Form, agg: Agg| {
                    let tag = agg.tag;
                    let root = converse::my_pe();
                    l.lock().unwrap().push(Got {
                        tag,
                        form,
                        root,
                        agg,
                    });
                    if tag + 1 < ROUNDS {
                        converse::sync_broadcast_all_and_free(msg_u64(next.get(), &[tag + 1]));
                    }
                }
            };
            let go = log_and_go.clone();
            let relay_m =
                converse::register_handler(move |m: Message| go(Form::Msg, Agg::of_msg(&m)));
            let go = log_and_go;
            let relay_s = converse::register_handler(move |m: Message| {
                go(Form::Struct, converse::decode_struct_result(&m).unwrap())
            });
            relays.set((relay_m, relay_s));
            let contribute = move |tag: u64| {
                let (relay_m, relay_s) = relays.get();
                if tag.is_multiple_of(2) {
                    converse::reduce_struct_id(Agg::mine(tag), Agg::merge, relay_s, id);
                } else {
                    converse::reduce_id(Agg::mine_msg(tag, relay_m), merge_msgs, id);
                }
            };
            let c = contribute.clone();
            next.set(converse::register_handler(move |m: Message| {
                c(read_u64(&m, 0))
            }));
            contribute(0);
            end_at_quiescence();
        });
        let all = all_pes(p);
        let expected = (0..ROUNDS)
            .map(|r| {
                let form = if r % 2 == 0 { Form::Struct } else { Form::Msg };
                expect(r, form, &all, k)
            })
            .collect();
        check(&log, expected, &format!("p={p} ppn={ppn} k={k}"));
    }
}

// ---------------------------------------------------------------------------
// 3. Subsets: PE lists and groups
// ---------------------------------------------------------------------------

/// Six scrambled sub-lists of `0..n`; the first is all PEs rooted at the
/// last one.
fn sub_lists(n: usize, seed: u64) -> Vec<Vec<usize>> {
    let mut rng = Rng::new(seed);
    (0..6)
        .map(|i| {
            let mut perm = all_pes(n);
            rng.shuffle(&mut perm);
            if i == 0 {
                let at = perm.iter().position(|&p| p == n - 1).unwrap();
                perm.swap(0, at);
                perm
            } else {
                let len = 1 + rng.below(n);
                perm.truncate(len);
                perm
            }
        })
        .collect()
}

#[test]
fn list_reductions_over_scrambled_subsets() {
    for (p, ppn, k) in configs() {
        let seed = (p * 100 + ppn * 10 + k) as u64;
        let lists = Arc::new(sub_lists(p, seed));
        let log = new_log();
        let (l, ls) = (log.clone(), lists.clone());
        job(p, ppn, k, move |_| {
            let (hm, hs) = result_handlers(&l);
            let ids: Vec<ReductionId> = (0..ls.len())
                .map(|_| converse::global_reduction_id())
                .collect();
            let me = converse::my_pe();
            let mut mine: Vec<usize> = (0..ls.len()).filter(|&i| ls[i].contains(&me)).collect();
            if me % 2 == 1 {
                mine.reverse();
            }
            for i in mine {
                let tag = i as u64;
                if i % 2 == 0 {
                    converse::list_reduce(&ls[i], Agg::mine_msg(tag, hm), merge_msgs, ids[i]);
                } else {
                    converse::list_reduce_struct(&ls[i], Agg::mine(tag), Agg::merge, hs, ids[i]);
                }
            }
            end_at_quiescence();
        });
        let expected = lists
            .iter()
            .enumerate()
            .map(|(i, list)| {
                let form = if i % 2 == 0 { Form::Msg } else { Form::Struct };
                expect(i as u64, form, list, k)
            })
            .collect();
        check(
            &log,
            expected,
            &format!("p={p} ppn={ppn} k={k} lists={lists:?}"),
        );
    }
}

/// The groups of the group test: `(tag, creator, members)`. Groups 0 and 1
/// are made by the last PE (group 0 includes it, group 1 does not), group 2
/// by PE n/2.
fn test_groups(n: usize) -> Vec<(u64, usize, Vec<usize>)> {
    let mut rng = Rng::new(n as u64 * 7919);
    let mut g0 = all_pes(n);
    rng.shuffle(&mut g0);
    let mut g1: Vec<usize> = (0..n - 1).collect();
    rng.shuffle(&mut g1);
    let mut groups = vec![(0, n - 1, g0)];
    if !g1.is_empty() {
        groups.push((1, n - 1, g1));
    }
    groups.push((2, n / 2, reversed(n)));
    groups
}

#[test]
fn group_reductions_on_groups_from_nonzero_creators_before_their_definition() {
    for (p, ppn, k) in configs() {
        let log = new_log();
        let l = log.clone();
        job(p, ppn, k, move |_| {
            let (hm, hs) = result_handlers(&l);
            let ids: [ReductionId; 3] = std::array::from_fn(|_| converse::global_reduction_id());
            let contribute = move |tag: u64, g: Group| match tag {
                0 => converse::group_reduce(g, Agg::mine_msg(0, hm), merge_msgs, ids[0]),
                1 => converse::group_reduce_struct(g, Agg::mine(1), Agg::merge, hs, ids[1]),
                _ => converse::group_reduce(g, Agg::mine_msg(2, hm), merge_msgs, ids[2]),
            };
            // The group's ID arrives straight from its creator, usually
            // before the definition (which travels down a tree): the
            // contribution must wait for the definition.
            let go = converse::register_handler(move |m: Message| {
                contribute(read_u64(&m, 0), Group::from_id(read_u64(&m, 8) as u32));
            });
            let me = converse::my_pe();
            for (tag, creator, members) in test_groups(converse::num_pes()) {
                if creator != me {
                    continue;
                }
                let g = converse::establish_group(&members);
                for m in members {
                    if m == me {
                        contribute(tag, g);
                    } else {
                        converse::sync_send_and_free(m, msg_u64(go, &[tag, g.id() as u64]));
                    }
                }
            }
            end_at_quiescence();
        });
        let expected = test_groups(p)
            .into_iter()
            .map(|(tag, _, members)| {
                let form = if tag == 1 { Form::Struct } else { Form::Msg };
                expect(tag, form, &members, k)
            })
            .collect();
        check(&log, expected, &format!("p={p} ppn={ppn} k={k}"));
    }
}

// ---------------------------------------------------------------------------
// 4. Large contributions
// ---------------------------------------------------------------------------

const MIB: usize = 1 << 20;

/// Results reduced to `(what, PE it was delivered on, a count)`.
type Tally = Arc<Mutex<Vec<(&'static str, usize, usize)>>>;

/// PE `pe`'s 1 MiB contribution: word `j` (little-endian `u64`) is
/// `pe * j + 1`.
fn big_payload(pe: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(MIB);
    for j in 0..MIB / 8 {
        v.extend_from_slice(&((pe * j + 1) as u64).to_le_bytes());
    }
    v
}

/// Adds `other` into `acc`, word by word.
fn add_words(acc: &mut [u8], other: &[u8]) {
    assert_eq!(
        (acc.len(), other.len()),
        (MIB, MIB),
        "a contribution lost bytes"
    );
    for (a, b) in acc.chunks_exact_mut(8).zip(other.chunks_exact(8)) {
        let s = u64::from_le_bytes((&*a).try_into().unwrap())
            + u64::from_le_bytes(b.try_into().unwrap());
        a.copy_from_slice(&s.to_le_bytes());
    }
}

/// The words of `sum` that are not the sum of `n` PEs' contributions
/// (`usize::MAX` if it is not 1 MiB long).
fn bad_words(sum: &[u8], n: usize) -> usize {
    if sum.len() != MIB {
        return usize::MAX;
    }
    sum.chunks_exact(8)
        .enumerate()
        .filter(|&(j, w)| {
            u64::from_le_bytes(w.try_into().unwrap()) != (j * n * (n - 1) / 2 + n) as u64
        })
        .count()
}

/// A 1 MiB struct contribution. Serialized as one byte string (rather than
/// byte by byte) to keep the unoptimized test build fast.
struct Big {
    bytes: Vec<u8>,
}

impl Serialize for Big {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.bytes)
    }
}

impl<'de> Deserialize<'de> for Big {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Big, D::Error> {
        struct Bytes;
        impl serde::de::Visitor<'_> for Bytes {
            type Value = Big;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a byte string")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Big, E> {
                Ok(Big { bytes: v.to_vec() })
            }
        }
        d.deserialize_bytes(Bytes)
    }
}

#[test]
fn one_mib_contributions_reduce_correctly() {
    let picked: Vec<(usize, usize, usize)> = configs()
        .into_iter()
        .filter(|&(p, ppn, _)| [(1, 1), (2, 1), (5, 5), (9, 3)].contains(&(p, ppn)))
        .collect();
    for (p, ppn, k) in picked {
        // (result, PE it was delivered on, wrong words)
        let log: Tally = Arc::default();
        let l = log.clone();
        job(p, ppn, k, move |_| {
            let n = converse::num_pes();
            let me = converse::my_pe();
            let l1 = l.clone();
            let words = converse::register_handler(move |m: Message| {
                let what = if m.info() == 1 { "list" } else { "all" };
                l1.lock()
                    .unwrap()
                    .push((what, converse::my_pe(), bad_words(m.payload(), n)));
            });
            let l2 = l.clone();
            let bytes = converse::register_handler(move |m: Message| {
                let big: Big = converse::decode_struct_result(&m).unwrap();
                l2.lock()
                    .unwrap()
                    .push(("struct", converse::my_pe(), bad_words(&big.bytes, n)));
            });
            // Adds the children into `local` and returns it.
            let add_in_place = |mut local: Message, children: Vec<Message>| {
                for c in &children {
                    add_words(local.payload_mut(), c.payload());
                }
                local
            };
            let payload = big_payload(me);
            let msg = Message::from_payload(words, &payload);
            let mut list_msg = msg.to_owned_copy();
            list_msg.set_info(1);
            converse::reduce(msg, add_in_place);
            converse::reduce_struct(
                Big { bytes: payload },
                |mut local: Big, children: Vec<Big>| {
                    for c in children {
                        add_words(&mut local.bytes, &c.bytes);
                    }
                    local
                },
                bytes,
            );
            let id = converse::global_reduction_id();
            converse::list_reduce(&reversed(n), list_msg, add_in_place, id);
            end_at_quiescence();
        });
        let mut got = log.lock().unwrap().clone();
        got.sort();
        let mut want = vec![("all", 0, 0), ("list", p - 1, 0), ("struct", 0, 0)];
        want.sort();
        assert_eq!(
            got, want,
            "p={p} ppn={ppn} k={k}: (result, root, wrong words)"
        );
    }
}

// ---------------------------------------------------------------------------
// 5. Dynamic IDs
// ---------------------------------------------------------------------------

/// How a dynamic ID was obtained, where it was seen, its number and data.
type IdLog = Arc<Mutex<Vec<(&'static str, usize, u32, Vec<u8>)>>>;

#[test]
fn dynamic_ids_local_and_remote_are_unique_and_usable() {
    for (p, ppn, k) in configs() {
        let log = new_log();
        let id_log: IdLog = Arc::default();
        let (l, il) = (log.clone(), id_log.clone());
        job(p, ppn, k, move |_| {
            let (hm, hs) = result_handlers(&l);
            let n = converse::num_pes();
            let me = converse::my_pe();
            let il = il.clone();
            let seen = move |what: &'static str, id: ReductionId, data: &[u8]| {
                assert_eq!(ReductionId::from_raw(id.raw()), Some(id));
                il.lock().unwrap().push((what, me, id.raw(), data.to_vec()));
            };
            // PE 0's own dynamic IDs, broadcast and used by every PE (in
            // reverse order on odd PEs).
            let use_local = converse::register_handler(move |m: Message| {
                let mut tags = vec![0u64, 1, 2];
                if converse::my_pe() % 2 == 1 {
                    tags.reverse();
                }
                for tag in tags {
                    let raw = read_u64(&m, 8 * tag as usize) as u32;
                    let id = ReductionId::from_raw(raw).expect("a dynamic ID");
                    if tag == 1 {
                        converse::reduce_struct_id(Agg::mine(tag), Agg::merge, hs, id);
                    } else {
                        converse::reduce_id(Agg::mine_msg(tag, hm), merge_msgs, id);
                    }
                }
            });
            // Each PE asks for an ID for all PEs; each PE uses each ID as it
            // arrives, so in different orders.
            let s = seen.clone();
            let for_all = converse::register_handler(move |m: Message| {
                let (id, data) = converse::dynamic_reduction_reply(&m).expect("a reply");
                s("all", id, data);
                let text = std::str::from_utf8(data).unwrap();
                let origin: u64 = text.strip_prefix("dyn from ").unwrap().parse().unwrap();
                converse::reduce_struct_id(Agg::mine(100 + origin), Agg::merge, hs, id);
            });
            // The last PE asks for an ID for PE n/2, which hands it on.
            let use_one = converse::register_handler(move |m: Message| {
                let id = ReductionId::from_raw(read_u64(&m, 0) as u32).unwrap();
                converse::reduce_id(Agg::mine_msg(200, hm), merge_msgs, id);
            });
            let s = seen.clone();
            let for_one = converse::register_handler(move |m: Message| {
                let (id, data) = converse::dynamic_reduction_reply(&m).expect("a reply");
                s("one", id, data);
                converse::sync_broadcast_all_and_free(msg_u64(use_one, &[id.raw() as u64]));
            });
            // PE 0 asks itself, and uses the ID in a list reduction of one.
            let s = seen.clone();
            let for_zero = converse::register_handler(move |m: Message| {
                let (id, data) = converse::dynamic_reduction_reply(&m).expect("a reply");
                s("zero", id, data);
                converse::list_reduce(&[0], Agg::mine_msg(300, hm), merge_msgs, id);
            });
            if me == 0 {
                let ids: Vec<ReductionId> =
                    (0..3).map(|_| converse::dynamic_reduction_id()).collect();
                for &id in &ids {
                    seen("local", id, &[]);
                }
                let raws: Vec<u64> = ids.iter().map(|id| id.raw() as u64).collect();
                converse::sync_broadcast_all_and_free(msg_u64(use_local, &raws));
                converse::dynamic_reduction_id_remote(for_zero, Some(0), b"zero");
            }
            converse::dynamic_reduction_id_remote(
                for_all,
                None,
                format!("dyn from {me}").as_bytes(),
            );
            if me == n - 1 {
                converse::dynamic_reduction_id_remote(for_one, Some(n / 2), b"one");
            }
            end_at_quiescence();
        });
        let ctx = format!("p={p} ppn={ppn} k={k}");
        let all = all_pes(p);
        let mut expected = vec![
            expect(0, Form::Msg, &all, k),
            expect(1, Form::Struct, &all, k),
            expect(2, Form::Msg, &all, k),
            expect(200, Form::Msg, &all, k),
            expect(300, Form::Msg, &[0], k),
        ];
        expected.extend((0..p as u64).map(|o| expect(100 + o, Form::Struct, &all, k)));
        check(&log, expected, &ctx);

        let ids = id_log.lock().unwrap().clone();
        let of = |what: &str| -> Vec<(usize, u32, Vec<u8>)> {
            ids.iter()
                .filter(|e| e.0 == what)
                .map(|e| (e.1, e.2, e.3.clone()))
                .collect()
        };
        let local = of("local");
        assert_eq!(local.len(), 3, "{ctx}");
        let one = of("one");
        assert_eq!(one.len(), 1, "{ctx}: {one:?}");
        assert_eq!((one[0].0, &one[0].2[..]), (p / 2, &b"one"[..]), "{ctx}");
        let zero = of("zero");
        assert_eq!(zero.len(), 1, "{ctx}: {zero:?}");
        assert_eq!((zero[0].0, &zero[0].2[..]), (0, &b"zero"[..]), "{ctx}");
        // Every PE got every PE's "for all" ID, with that PE's data.
        let for_all = of("all");
        let mut per_pe: BTreeMap<usize, BTreeSet<(u32, Vec<u8>)>> = BTreeMap::new();
        for (pe, raw, data) in &for_all {
            assert!(
                per_pe.entry(*pe).or_default().insert((*raw, data.clone())),
                "{ctx}: twice"
            );
        }
        assert_eq!(per_pe.len(), p, "{ctx}: PEs that got replies");
        let first = per_pe[&0].clone();
        assert!(
            per_pe.values().all(|s| *s == first),
            "{ctx}: PEs got different replies: {per_pe:?}"
        );
        let datas: BTreeSet<Vec<u8>> = first.iter().map(|(_, d)| d.clone()).collect();
        let want: BTreeSet<Vec<u8>> = (0..p)
            .map(|o| format!("dyn from {o}").into_bytes())
            .collect();
        assert_eq!(datas, want, "{ctx}");
        // All IDs distinct.
        let mut raws: Vec<u32> = local.iter().chain(&one).chain(&zero).map(|e| e.1).collect();
        raws.extend(first.iter().map(|(r, _)| *r));
        let distinct: BTreeSet<u32> = raws.iter().copied().collect();
        assert_eq!(distinct.len(), raws.len(), "{ctx}: IDs repeat: {raws:?}");
        assert_eq!(raws.len(), 5 + p, "{ctx}");
    }
}

#[test]
fn global_and_dynamic_ids_never_collide() {
    job(2, 1, 4, |_| {
        let globals: Vec<ReductionId> = (0..50).map(|_| converse::global_reduction_id()).collect();
        if converse::my_pe() == 0 {
            let dynamics: Vec<ReductionId> =
                (0..50).map(|_| converse::dynamic_reduction_id()).collect();
            let all: BTreeSet<u32> = globals.iter().chain(&dynamics).map(|i| i.raw()).collect();
            assert_eq!(all.len(), 100, "global and dynamic IDs collide");
            for id in globals.iter().chain(&dynamics) {
                assert_eq!(ReductionId::from_raw(id.raw()), Some(*id));
            }
        }
        end_at_quiescence();
    });
}

// ---------------------------------------------------------------------------
// 6. Ownership
// ---------------------------------------------------------------------------

/// Counts the drops of the values the PEs contributed, per reduction.
struct DropToken(Arc<[AtomicUsize; 3]>, usize);

impl Drop for DropToken {
    fn drop(&mut self) {
        self.0[self.1].fetch_add(1, Ordering::SeqCst);
    }
}

/// A contribution that cannot be cloned; only the contributed originals
/// carry a token (decoded copies do not).
#[derive(Serialize, Deserialize)]
struct Owned {
    tag: u64,
    pes: Vec<u64>,
    #[serde(skip)]
    token: Option<DropToken>,
}

/// (result, PE it was delivered on, PEs or payload words, drops of that
/// reduction's contributions when it was delivered)
type OwnLog = Arc<Mutex<Vec<(&'static str, usize, Vec<u64>, usize)>>>;

#[test]
fn struct_data_is_moved_in_and_dropped_once_and_message_merge_may_return_local() {
    const NAMES: [&str; 3] = ["struct", "struct_id", "list_struct"];
    const MARK: u64 = 0xabcd_0000;
    for (p, ppn, k) in configs() {
        let drops: Arc<[AtomicUsize; 3]> = Arc::default();
        let log: OwnLog = Arc::default();
        // merge calls per PE
        let merges: Arc<Mutex<Vec<usize>>> = Arc::new(Mutex::new(vec![0; p]));
        let (d, l, mc) = (drops.clone(), log.clone(), merges.clone());
        job(p, ppn, k, move |_| {
            let n = converse::num_pes();
            let me = converse::my_pe();
            let (l2, d2) = (l.clone(), d.clone());
            let owned_result = converse::register_handler(move |m: Message| {
                let v: Owned = converse::decode_struct_result(&m).unwrap();
                assert!(v.token.is_none());
                let t = v.tag as usize;
                let dropped = d2[t].load(Ordering::SeqCst);
                l2.lock()
                    .unwrap()
                    .push((NAMES[t], converse::my_pe(), v.pes.clone(), dropped));
            });
            let words = |m: &Message| {
                (0..m.payload_len() / 8)
                    .map(|i| read_u64(m, 8 * i))
                    .collect()
            };
            let l2 = l.clone();
            let h_a = converse::register_handler(move |m: Message| {
                l2.lock()
                    .unwrap()
                    .push(("msg to a", converse::my_pe(), words(&m), 0));
            });
            let l2 = l.clone();
            let h_b = converse::register_handler(move |m: Message| {
                l2.lock()
                    .unwrap()
                    .push(("msg to b", converse::my_pe(), words(&m), 0));
            });
            let mk = |tag: u64| Owned {
                tag,
                pes: vec![me as u64],
                token: Some(DropToken(d.clone(), tag as usize)),
            };
            let merge_owned = |mut local: Owned, children: Vec<Owned>| {
                assert!(
                    local.token.is_some(),
                    "the local value is the contributed one"
                );
                for c in children {
                    assert!(c.token.is_none());
                    local.pes.extend(c.pes);
                }
                local
            };
            let id = converse::global_reduction_id();
            let list_id = converse::global_reduction_id();
            converse::reduce_struct(mk(0), merge_owned, owned_result);
            converse::reduce_struct_id(mk(1), merge_owned, owned_result, id);
            converse::list_reduce_struct(&reversed(n), mk(2), merge_owned, owned_result, list_id);
            // Message form: words [sum, marker of the PE whose message this
            // is]; the merge adds into `local` and returns it, and on PE 0
            // also redirects the result to handler b.
            let mc = mc.clone();
            converse::reduce(
                msg_u64(h_a, &[value(me, 9), MARK + me as u64]),
                move |mut local: Message, children: Vec<Message>| {
                    let me = converse::my_pe();
                    mc.lock().unwrap()[me] += 1;
                    assert_eq!(read_u64(&local, 8), MARK + me as u64);
                    let kids = converse::span_tree_children(me);
                    assert_eq!(children.len(), kids.len());
                    let mut sum = read_u64(&local, 0);
                    for (c, &kid) in children.iter().zip(&kids) {
                        assert_eq!(c.src_pe(), kid, "children not in tree order");
                        // The child's merge returned its own local message.
                        assert_eq!(read_u64(c, 8), MARK + kid as u64);
                        assert_eq!(c.handler(), h_a);
                        sum += read_u64(c, 0);
                    }
                    local.payload_mut()[..8].copy_from_slice(&sum.to_le_bytes());
                    if me == 0 {
                        local.set_handler(h_b);
                    }
                    local
                },
            );
            end_at_quiescence();
        });
        let ctx = format!("p={p} ppn={ppn} k={k}");
        let mut got = log.lock().unwrap().clone();
        got.sort();
        let all = all_pes(p);
        let sum: u64 = (0..p).map(|i| value(i, 9)).sum();
        // The merge on PE 0 sends the result to b, if PE 0 has children.
        let to = if p > 1 { "msg to b" } else { "msg to a" };
        // A struct result is delivered after all p contributions to its
        // reduction were consumed and dropped, each once.
        let mut want = vec![
            ("struct", 0, preorder(&all, k), p),
            ("struct_id", 0, preorder(&all, k), p),
            ("list_struct", p - 1, preorder(&reversed(p), k), p),
            (to, 0, vec![sum, MARK], 0),
        ];
        want.sort();
        assert_eq!(got, want, "{ctx}: (result, root, PEs or words, drops then)");
        for (t, name) in NAMES.iter().enumerate() {
            assert_eq!(drops[t].load(Ordering::SeqCst), p, "{ctx}: {name} drops");
        }
        // The merge runs exactly on the PEs with children, once.
        let tree = converse::SpanningTree::new(p, k, 0);
        let want_merges: Vec<usize> = (0..p)
            .map(|i| usize::from(tree.num_children(i) > 0))
            .collect();
        assert_eq!(
            *merges.lock().unwrap(),
            want_merges,
            "{ctx}: merge calls per PE"
        );
    }
}

#[test]
fn broadcast_copies_may_be_contributed_and_merged_in_place() {
    // A broadcast's copies share one buffer; contributing them as they are
    // and merging into `local` in place (copy-on-write) must not change what
    // the PEs that have not handled their copy yet read.
    for (p, ppn, k) in configs() {
        let log = new_log();
        let l = log.clone();
        job(p, ppn, k, move |_| {
            let (hm, _hs) = result_handlers(&l);
            let id = converse::global_reduction_id();
            let bc = converse::register_handler(move |m: Message| {
                let me = converse::my_pe();
                assert_eq!(
                    Agg::of_msg(&m),
                    Agg::of_pe(0, 0),
                    "PE {me}: broadcast copy changed"
                );
                let add = |mut local: Message, children: Vec<Message>| {
                    let mut sum = read_u64(&local, 8);
                    for c in &children {
                        sum += read_u64(c, 8);
                    }
                    local.payload_mut()[8..16].copy_from_slice(&sum.to_le_bytes());
                    local.payload_mut()[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
                    local
                };
                let mut copy = m.to_owned_copy();
                copy.set_handler(hm);
                // Only the root's handler matters: other PEs contribute the
                // shared copy untouched.
                let mut m = m;
                if me == 0 {
                    m.set_handler(hm);
                }
                converse::reduce(m, add);
                converse::list_reduce(&rotated(converse::num_pes()), copy, add, id);
            });
            if converse::my_pe() == 0 {
                converse::sync_broadcast_all_and_free(Agg::of_pe(0, 0).to_msg(bc));
            }
            end_at_quiescence();
        });
        let one = Agg::of_pe(0, 0);
        let mut got: Vec<Got> = log.lock().unwrap().clone();
        got.sort();
        // Merged on a root with children: max word overwritten.
        let max = if p > 1 { u64::MAX } else { one.max };
        let result = |root: usize| Got {
            tag: 0,
            form: Form::Msg,
            root,
            agg: Agg {
                tag: 0,
                sum: one.sum * p as u64,
                max,
                pes: vec![0],
            },
        };
        let mut want = vec![result(0), result(rotated(p)[0])];
        want.sort();
        assert_eq!(got, want, "p={p} ppn={ppn} k={k}");
    }
}

#[test]
fn merge_functions_may_start_reductions_and_empty_contributions_work() {
    for (p, ppn, k) in configs() {
        let log = new_log();
        // (what, PE, payload length)
        let empties: Tally = Arc::default();
        let (l, e) = (log.clone(), empties.clone());
        job(p, ppn, k, move |_| {
            let (hm, hs) = result_handlers(&l);
            let ids: [ReductionId; 9] = std::array::from_fn(|_| converse::global_reduction_id());
            let ids2: [ReductionId; 9] = std::array::from_fn(|_| converse::global_reduction_id());
            let e1 = e.clone();
            let unit = converse::register_handler(move |m: Message| {
                let () = converse::decode_struct_result(&m).unwrap();
                e1.lock()
                    .unwrap()
                    .push(("unit", converse::my_pe(), m.payload_len()));
            });
            let e2 = e.clone();
            let empty = converse::register_handler(move |m: Message| {
                e2.lock()
                    .unwrap()
                    .push(("empty", converse::my_pe(), m.payload_len()));
            });
            // The merges of reductions 0 and 1 each start a reduction over
            // their own PE alone (tags 10 + PE and 20 + PE).
            converse::reduce_struct(
                Agg::mine(0),
                move |local: Agg, children: Vec<Agg>| {
                    let me = converse::my_pe();
                    let tag = 10 + me as u64;
                    converse::list_reduce_struct(&[me], Agg::mine(tag), Agg::merge, hs, ids[me]);
                    local.merge(children)
                },
                hs,
            );
            converse::reduce(
                Agg::mine_msg(1, hm),
                move |local: Message, children: Vec<Message>| {
                    let me = converse::my_pe();
                    let tag = 20 + me as u64;
                    let mine = Agg::mine_msg(tag, hm);
                    converse::list_reduce(&[me], mine, merge_msgs, ids2[me]);
                    merge_msgs(local, children)
                },
            );
            converse::reduce_struct((), |(), _: Vec<()>| (), unit);
            converse::reduce(Message::new(empty, 0), |local, _| local);
            end_at_quiescence();
        });
        let all = all_pes(p);
        let tree = converse::SpanningTree::new(p, k, 0);
        let mut expected = vec![
            expect(0, Form::Struct, &all, k),
            expect(1, Form::Msg, &all, k),
        ];
        for pe in (0..p).filter(|&pe| tree.num_children(pe) > 0) {
            expected.push(expect(10 + pe as u64, Form::Struct, &[pe], k));
            expected.push(expect(20 + pe as u64, Form::Msg, &[pe], k));
        }
        check(&log, expected, &format!("p={p} ppn={ppn} k={k}"));
        let mut got = empties.lock().unwrap().clone();
        got.sort();
        assert_eq!(
            got,
            vec![("empty", 0, 0), ("unit", 0, 0)],
            "p={p} ppn={ppn} k={k}"
        );
    }
}

#[test]
fn reductions_complete_in_user_calls_scheduler_mode() {
    // No scheduler runs unless the PEs poll: each polls until PE 0 has the
    // result (interior PEs must merge their children's contributions).
    for (p, ppn) in layouts() {
        let sum = Arc::new(AtomicUsize::new(usize::MAX));
        let s = sum.clone();
        let code = within(20, move || {
            run_user(p, ppn, move |_| {
                let s2 = s.clone();
                let dest = converse::register_handler(move |m: Message| {
                    let v: u64 = converse::decode_struct_result(&m).unwrap();
                    s2.store(v as usize, Ordering::SeqCst);
                });
                let me = converse::my_pe() as u64;
                converse::reduce_struct(
                    me + 1,
                    |a: u64, r: Vec<u64>| a + r.iter().sum::<u64>(),
                    dest,
                );
                while s.load(Ordering::SeqCst) == usize::MAX {
                    converse::schedule_poll();
                    std::thread::yield_now();
                }
            })
        });
        assert_eq!(code, 0, "p={p} ppn={ppn}");
        assert_eq!(
            sum.load(Ordering::SeqCst),
            p * (p + 1) / 2,
            "p={p} ppn={ppn}"
        );
    }
}

// ---------------------------------------------------------------------------
// Waiting for a message while reduction contributions arrive
// ---------------------------------------------------------------------------

/// Regression test for a runtime bug: fails at commit 957c7a6, fixed in
/// edd73ac (`take_from_stash` no longer matches runtime messages).
///
/// A reduction contribution travels with the result's handler index in its
/// header's `handler` field (module comment of `src/cmi/reduce.rs`, "Wire
/// format"). At 957c7a6, `deliver_specific_msg(h)` picked messages by that
/// field alone (`take_from_stash`, `src/csd/mod.rs:220`), so when a
/// contribution whose result handler is `h` arrived first, it "delivered"
/// that runtime message (the reduction code stored it) and returned without
/// running handler `h`, whose user message had not run yet. Expected: it
/// returns only after handler `h` ran.
#[test]
fn deliver_specific_msg_is_not_satisfied_by_a_reduction_contribution() {
    const RESULT: u64 = 1;
    const PING: u64 = 2;
    for ppn in [1, 2] {
        let seen: Arc<Mutex<Vec<(usize, u64)>>> = Arc::default();
        let s = seen.clone();
        job(2, ppn, 4, move |_| {
            let log = s.clone();
            // One handler for the reduction's result and for a plain message.
            let h = converse::register_handler(move |m: Message| {
                log.lock()
                    .unwrap()
                    .push((converse::my_pe(), read_u64(&m, 0)));
            });
            let mine = || msg_u64(h, &[RESULT, 1]);
            let add = |mut local: Message, children: Vec<Message>| {
                let sum =
                    read_u64(&local, 8) + children.iter().map(|c| read_u64(c, 8)).sum::<u64>();
                local.payload_mut()[8..16].copy_from_slice(&sum.to_le_bytes());
                local
            };
            if converse::my_pe() == 1 {
                // PE 1 (a leaf under PE 0) contributes, then sends PE 0 a
                // plain message for the same handler.
                converse::reduce(mine(), add);
                converse::sync_send_and_free(0, msg_u64(h, &[PING, 0]));
            } else {
                converse::deliver_specific_msg(h);
                let ran = s.lock().unwrap().contains(&(0, PING));
                assert!(
                    ran,
                    "deliver_specific_msg({h}) returned on PE 0 without running handler {h}: \
                     it took PE 1's reduction contribution (whose header names handler {h}) \
                     for a message for that handler"
                );
                converse::reduce(mine(), add);
            }
            end_at_quiescence();
        });
        let mut got = seen.lock().unwrap().clone();
        got.sort();
        assert_eq!(got, vec![(0, RESULT), (0, PING)], "ppn={ppn}");
    }
}

/// Regression test for the same bug as above (fails at 957c7a6): a
/// `dynamic_reduction_id_remote` request is a runtime message whose header
/// `handler` field holds its kind, `Kind::DynamicIdRequest` = 2
/// (`src/cmi/system.rs:20`). PE 0 waiting in `deliver_specific_msg(2)` for
/// a user handler numbered 2 took the request for its message, served it
/// and returned without running handler 2. Expected: it returns only after
/// handler 2 ran.
#[test]
fn deliver_specific_msg_is_not_satisfied_by_a_dynamic_id_request() {
    const H: usize = 2;
    let seen: Arc<Mutex<Vec<(usize, u64)>>> = Arc::default();
    let s = seen.clone();
    job(2, 1, 4, move |_| {
        let log = s.clone();
        converse::number_handler(H, move |m: Message| {
            log.lock()
                .unwrap()
                .push((converse::my_pe(), read_u64(&m, 0)));
        });
        let reply = converse::register_handler(|_m: Message| {});
        if converse::my_pe() == 1 {
            converse::dynamic_reduction_id_remote(reply, Some(1), b"request");
            converse::sync_send_and_free(0, msg_u64(H, &[7]));
        } else {
            converse::deliver_specific_msg(H);
            assert!(
                s.lock().unwrap().contains(&(0, 7)),
                "deliver_specific_msg({H}) returned on PE 0 without running handler {H}: \
                 it took PE 1's dynamic reduction ID request for a message for that handler"
            );
        }
        end_at_quiescence();
    });
    assert_eq!(*seen.lock().unwrap(), vec![(0, 7)]);
}

// ---------------------------------------------------------------------------
// Disagreements abort the job, naming the reduction
// ---------------------------------------------------------------------------

/// Environment variable naming the error scenario a child process runs.
const ERROR_SCENARIO: &str = "CONVERSE_REDUCE_ERROR_SCENARIO";

/// A job in which the PEs disagree about a reduction (it must abort).
fn error_scenario(name: &str) -> i32 {
    let start = move |name: String| {
        move |_: &[String]| {
            let h = converse::register_handler(|_m: Message| {});
            let id = converse::global_reduction_id();
            let me = converse::my_pe();
            let keep = |local: Message, _: Vec<Message>| local;
            match name.as_str() {
                // PE 1 uses the struct form where the others use messages.
                "form" => {
                    if me == 1 {
                        converse::reduce_struct(1u64, |a, _| a, h);
                    } else {
                        converse::reduce(Message::new(h, 0), keep);
                    }
                }
                // PE 2 lists the PEs in another order.
                "lists" => {
                    let list = if me == 2 { [0, 2, 1] } else { [0, 1, 2] };
                    converse::list_reduce(&list, Message::new(h, 0), keep, id);
                }
                // PE 1 calls with a list that does not name it.
                "not_in_list" => {
                    if me == 1 {
                        converse::list_reduce(&[0, 2], Message::new(h, 0), keep, id);
                    }
                }
                // PE 0 joins one ID twice while its children are pending.
                "twice" => {
                    if me == 0 {
                        converse::reduce_id(Message::new(h, 0), keep, id);
                        converse::reduce_id(Message::new(h, 0), keep, id);
                    }
                }
                // Dynamic IDs come from PE 0 only.
                "dynamic" => {
                    if me == 1 {
                        let _ = converse::dynamic_reduction_id();
                    }
                }
                other => panic!("unknown scenario {other}"),
            }
        }
    };
    Converse::new()
        .args(["reduce", "+p", "3", "++spantree-branch", "2"])
        .run(start(name.to_string()))
        .unwrap()
}

/// Runs the scenario named by [`ERROR_SCENARIO`], if set, and exits the
/// process with its code. Does nothing in a normal test run.
#[test]
fn reduce_error_child() {
    let Ok(name) = std::env::var(ERROR_SCENARIO) else {
        return;
    };
    let code = error_scenario(&name);
    eprintln!("scenario {name} returned {code}");
    std::process::exit(90)
}

/// Runs error scenario `name` in a child process (killed after 20 s) and
/// returns its exit code and standard error.
fn run_error_scenario(name: &str) -> (Option<i32>, String) {
    use std::io::Read;
    let exe = std::env::current_exe().unwrap();
    let mut child = std::process::Command::new(exe)
        .args([
            "--exact",
            common::test_path(module_path!(), "reduce_error_child"),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ERROR_SCENARIO, name)
        .env("RUST_BACKTRACE", "0")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > std::time::Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("error scenario {name} hangs instead of aborting");
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    (status.code(), reader.join().unwrap())
}

#[test]
fn disagreements_about_a_reduction_abort_naming_it() {
    let cases: [(&str, &[&str]); 5] = [
        (
            "form",
            &[
                "PEs disagree on reduction #0",
                "the struct form",
                "the message form",
            ],
        ),
        (
            "lists",
            &["PEs disagree on the PEs taking part in reduction with global ID"],
        ),
        ("not_in_list", &["PE 1 aborting", "does not contain PE 1"]),
        (
            "twice",
            &[
                "PE 0 aborting",
                "PE 0 joined reduction with global ID",
                "twice",
            ],
        ),
        (
            "dynamic",
            &[
                "PE 1 aborting",
                "dynamic_reduction_id may only be called on PE 0",
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

// ---------------------------------------------------------------------------
// 7. Property: the struct-form sum is the sequential sum
// ---------------------------------------------------------------------------

fn struct_sum(p: usize, ppn: usize, k: usize, values: Vec<u64>) -> Vec<(usize, u64)> {
    let log: Arc<Mutex<Vec<(usize, u64)>>> = Arc::default();
    let l = log.clone();
    let values = Arc::new(values);
    job(p, ppn, k, move |_| {
        let l = l.clone();
        let dest = converse::register_handler(move |m: Message| {
            let sum: u64 = converse::decode_struct_result(&m).unwrap();
            l.lock().unwrap().push((converse::my_pe(), sum));
        });
        let mine = values[converse::my_pe()];
        converse::reduce_struct(
            mine,
            |a: u64, rest: Vec<u64>| a + rest.iter().sum::<u64>(),
            dest,
        );
        end_at_quiescence();
    });
    log.lock().unwrap().clone()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 24,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn struct_sum_equals_sequential_sum(
        p in 1usize..=9,
        pick in 0usize..16,
        k in 1usize..=5,
        values in proptest::collection::vec(any::<u32>(), 9),
    ) {
        let divs = divisors(p);
        let ppn = divs[pick % divs.len()];
        let values: Vec<u64> = values.into_iter().map(u64::from).collect();
        let want: u64 = values[..p].iter().sum();
        let got = struct_sum(p, ppn, k, values);
        prop_assert_eq!(got, vec![(0, want)], "p={} ppn={} k={}", p, ppn, k);
    }
}
