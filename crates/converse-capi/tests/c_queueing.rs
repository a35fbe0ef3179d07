//! The C programs of `tests/c/queueing/`: the scheduler's general and node
//! enqueues with their order (`CsdEnqueueGeneral`, `CsdNodeEnqueue*`,
//! `CsdEmpty`, `CsdNodeEmpty`, `CsdLength`), Cqs as a C data structure
//! (`queueing.h`), Crn (`conv-random.h`), and wrong arguments ending the
//! job; in one process and under `convrun`.
mod common;

use common::{expect_ok, text};

const DIR: &str = "queueing";

fn direct(name: &str, args: &[&str]) -> std::process::Output {
    common::direct(DIR, name, args)
}

fn convrun(args: &[&str], name: &str) -> std::process::Output {
    common::convrun(DIR, args, name)
}

/// The order `order.c`'s messages must run in: priority 0 (`m`), `.01`
/// (`g`), integer -3 LIFO then FIFO (`e`, `d`, `f`), long -1 (`i`), the
/// middle priority's LIFO items newest first (`k` is ILIFO 0, `b` LIFO)
/// then its FIFO items oldest first (`a`, `j`), integer 5 (`c`), `.11`
/// (`h`), integer `INT_MAX` (`z`).
const PE_ORDER: &str = "mgedfikbajchz";

#[test]
fn enqueued_messages_run_in_priority_order_on_every_pe() {
    for (out, pes) in [
        (direct("order", &["+p", "1"]), 1),
        (direct("order", &["+p", "2"]), 2),
        (convrun(&["+p", "2"], "order"), 2),
    ] {
        let mut want = vec![format!("order: all {pes} PEs ran their queue in order")];
        for pe in 0..pes {
            want.push(format!("PE {pe} before: CsdEmpty 1 CsdLength 0"));
            want.push(format!("PE {pe} queued: CsdEmpty 0 CsdLength 13"));
            want.push(format!(
                "PE {pe} ran {PE_ORDER}; then CsdEmpty 1 CsdLength 0"
            ));
        }
        let want: Vec<&str> = want.iter().map(String::as_str).collect();
        expect_ok(&out, &want);
    }
}

#[test]
fn node_messages_run_on_their_node_merged_by_priority_with_the_pe_queue() {
    // One PE on the node: its queue (A: -10, B: middle, C: 3) and the
    // node's (y: -5, then the middle: x LIFO, v, w FIFO, then z: .11)
    // merge by priority, the PE's queue first on ties.
    let alone = [
        "PE 0 before: CsdNodeEmpty 1",
        "PE 0 queued: CsdNodeEmpty 0 CsdLength 3 CsdNodeLength 5",
        "PE 0 alone on node 0 ran AyBxvwCz; then CsdNodeEmpty 1 CsdEmpty 1",
        "node: 5 node messages ran on their own node; node 0's queue empty 1",
    ];
    expect_ok(&direct("node", &["+p", "1"]), &alone);
    // Two PEs share the node: either may run each node message.
    expect_ok(
        &direct("node", &["+p", "2", "++ppn", "2"]),
        &["node: 5 node messages ran on their own node; node 0's queue empty 1"],
    );
    // Two nodes of two PEs, in two processes.
    expect_ok(
        &convrun(&["+p", "4", "++ppn", "2"], "node"),
        &["node: 10 node messages ran on their own node; node 0's queue empty 1"],
    );
    // Two nodes of one PE each: each merges as above.
    expect_ok(
        &convrun(&["+p", "2"], "node"),
        &[
            "PE 1 alone on node 1 ran AyBxvwCz; then CsdNodeEmpty 1 CsdEmpty 1",
            "PE 0 alone on node 0 ran AyBxvwCz; then CsdNodeEmpty 1 CsdEmpty 1",
            "node: 10 node messages ran on their own node; node 0's queue empty 1",
        ],
    );
}

#[test]
fn cqs_is_a_priority_queue_for_c_programs() {
    let out = direct("cqs", &["+p", "1"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    let want = [
        "new queue: empty 1 length 0 max 0 dequeue NULL",
        "queued: empty 0 length 12 max 12",
        "front priority: bits 32 ints 1 word 0x40000000",
        // .01, integer -1 (LIFO g, then FIFO d, f), the middle (LIFO l, c
        // newest first; FIFO a, b and integer 0 k oldest first), .1 0 1
        // (three words), long 7 (.1 then 7), integer 100.
        "enumerated: hgdflcabkije (length still 12)",
        "front priority after two: bits 32 ints 1 word 0x7fffffff",
        "after removing a: length 10",
        "dequeued: hgdflc-bkije; then empty 1 length 0 max 12",
        "middle priority: bits 32 ints 1 word 0x80000000",
        "PrioGT(q front, r front) 0, PrioGT(r front, q front) 1",
        "PrioGT(.1, .10...0) 0 0",
        "cqs: done",
    ];
    assert_eq!(stdout.lines().collect::<Vec<_>>(), want, "{stderr}");
}

#[test]
fn crn_streams_repeat_for_a_seed_and_differ_across_seeds() {
    let size = std::mem::size_of::<converse_capi::random::CrnStream>();
    let align = std::mem::align_of::<converse_capi::random::CrnStream>();
    let sizes = format!("sizeof(CrnStream) {size}, alignment {align}");
    for out in [
        direct("random", &["+p", "2"]),
        convrun(&["+p", "2"], "random"),
    ] {
        expect_ok(&out, &[&sizes, "random: all 2 PEs checked"]);
        let (stdout, _) = text(&out);
        assert_eq!(
            stdout
                .lines()
                .filter(|l| l.contains(": crn checks passed"))
                .count(),
            2,
            "{stdout}"
        );
    }
}

#[test]
fn wrong_arguments_end_the_job_naming_the_call_and_the_value() {
    let cases = [
        ("csd", "CsdEnqueueGeneral: 42 is no queueing strategy"),
        ("node", "CsdNodeEnqueueGeneral: 1 is no queueing strategy"),
        ("cqs", "CqsEnqueueGeneral: -7 is no queueing strategy"),
        ("bits", "CqsEnqueueGeneral: priobits -3 is negative"),
        (
            "noprio",
            "CsdEnqueueGeneral: strategy 4 needs an int priority, but prioptr is null",
        ),
        ("nullq", "CqsLength: the queue is null"),
        (
            "crntype",
            "CrnInitStream: stream type 3: the types are 0, 1 and 2",
        ),
        (
            "crnzero",
            "CrnDouble: the stream was not initialised by CrnInitStream",
        ),
    ];
    for (case, message) in cases {
        let out = direct("badcall", &["+p", "2", case]);
        let (stdout, stderr) = text(&out);
        assert_eq!(
            out.status.code(),
            Some(converse::ABORT_EXIT_CODE),
            "{case}: {stdout}{stderr}"
        );
        assert!(
            stderr.contains(&format!("PE 0 aborting: {message}")),
            "{case}: {stderr}"
        );
        assert!(!stdout.contains("returned"), "{case}: {stdout}");
    }
    let out = convrun(&["+p", "2"], "badcall");
    let (stdout, stderr) = text(&out);
    assert_eq!(
        out.status.code(),
        Some(converse::ABORT_EXIT_CODE),
        "{stdout}{stderr}"
    );
    assert!(
        stderr.contains("CsdEnqueueGeneral: 42 is no queueing strategy"),
        "{stderr}"
    );
}
