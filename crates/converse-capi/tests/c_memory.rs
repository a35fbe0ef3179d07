//! The C and C++ programs of `tests/c/memory/`: PUP (`pup_c.h`), struct
//! reductions with C pup, merge and delete functions, isomalloc,
//! quiescence detection and `CmiRegisterHandlerEx`, run in one process
//! (`+p 1`, `+p 4 ++ppn 2`, more) and under `convrun` in two processes.
mod common;

use common::{expect_ok, text};

const DIR: &str = "memory";

fn direct(name: &str, args: &[&str]) -> std::process::Output {
    common::direct(DIR, name, args)
}

fn convrun(args: &[&str], name: &str) -> std::process::Output {
    common::convrun(DIR, args, name)
}

/// Asserts that the job was aborted with a message containing each of
/// `parts`.
fn expect_abort(out: &std::process::Output, parts: &[&str]) {
    let (stdout, stderr) = text(out);
    assert_eq!(
        out.status.code(),
        Some(converse::ABORT_EXIT_CODE),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    for p in parts {
        assert!(stderr.contains(p), "missing `{p}` in:\n{stderr}");
    }
}

#[test]
fn pup_round_trips_on_every_pe() {
    let lines = |n: usize| {
        [
            format!("pup: record sized, packed and unpacked on {n} PEs"),
            format!("pup: arrays of every type round-trip on {n} PEs"),
        ]
    };
    for (args, n) in [(&["+p", "1"][..], 1), (&["+p", "4", "++ppn", "2"][..], 4)] {
        let want = lines(n);
        let want: Vec<&str> = want.iter().map(String::as_str).collect();
        expect_ok(&direct("pup", args), &want);
        if n > 1 {
            expect_ok(&convrun(args, "pup"), &want);
        }
    }
}

#[test]
fn a_pup_overrun_ends_the_job_naming_it() {
    let out = direct("pup", &["+p", "2", "overrun-pack"]);
    let (stdout, _) = text(&out);
    // The record's size (146 bytes on LP64), as the program printed it.
    let n: usize = stdout
        .lines()
        .find_map(|l| l.strip_prefix("pup: packing "))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no size in:\n{stdout}"));
    expect_abort(
        &out,
        &[
            "PE 0 aborting: pup_bytes: packing 8 bytes at offset",
            &format!(
                "overruns the {}-byte buffer (only 7 more can be written)",
                n - 1
            ),
        ],
    );
    let out = direct("pup", &["+p", "2", "overrun-unpack"]);
    expect_abort(
        &out,
        &[
            "PE 0 aborting: pup_bytes: unpacking 8 bytes at offset",
            &format!(
                "overruns the {}-byte buffer (only 7 more can be read)",
                n - 1
            ),
        ],
    );
}

/// The lines `reduce.c` prints with `n` PEs: sums of (kind + 1) · 100 +
/// pe², over all PEs for the order and ID forms and over the odd PEs
/// (PE 0 alone with one PE) for the list, rooted at its first (highest).
fn reduce_lines(n: usize) -> Vec<String> {
    let value = |kind: usize, pe: usize| (kind + 1) * 100 + pe * pe;
    let all: Vec<usize> = (0..n).collect();
    let mut list: Vec<usize> = (1..n).rev().filter(|p| p % 2 == 1).collect();
    if list.is_empty() {
        list.push(0);
    }
    let line = |name: &str, kind: usize, pes: &[usize], root: usize| {
        let sum: usize = pes.iter().map(|&p| value(kind, p)).sum();
        let max = pes.iter().map(|&p| value(kind, p)).max().unwrap();
        format!(
            "{name}: sum {sum} max {max} count {} on PE {root}",
            pes.len()
        )
    };
    vec![
        line("order", 0, &all, 0),
        line("id", 1, &all, 0),
        line("list", 2, &list, list[0]),
        format!(
            "deletes: {} in all, once per reduction on every PE but the root",
            2 * (n - 1)
        ),
    ]
}

#[test]
fn struct_reductions_by_order_by_id_and_over_a_list() {
    for (args, n) in [
        (&["+p", "1"][..], 1),
        (&["+p", "4", "++ppn", "2"][..], 4),
        // Branching factor 4: PE 1 has children 5 and 6, an inner node.
        (&["+p", "7"][..], 7),
        (&["+p", "6", "++spantree-branch", "2"][..], 6),
    ] {
        let want = reduce_lines(n);
        let want: Vec<&str> = want.iter().map(String::as_str).collect();
        expect_ok(&direct("reduce", args), &want);
    }
    let want = reduce_lines(4);
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    for netmod in ["shm", "tcp"] {
        let out = convrun(&["+p", "4", "++ppn", "2", "++netmod", netmod], "reduce");
        expect_ok(&out, &want);
    }
}

/// The lines `nodered.c` prints with `pes` PEs in `nodes` nodes: sums of
/// (kind + 1) · 1000 + who², over the nodes for the node forms, over the
/// PEs for the remote dynamic ID, over the even PEs for the group.
fn nodered_lines(pes: usize, nodes: usize) -> Vec<String> {
    let value = |kind: usize, who: usize| (kind + 1) * 1000 + who * who;
    let sum = |kind: usize, whos: &mut dyn Iterator<Item = usize>| -> (usize, usize) {
        whos.fold((0, 0), |(s, c), w| (s + value(kind, w), c + 1))
    };
    let mut lines = Vec::new();
    for (kind, name) in ["nmsg", "nmsgid", "nstruct", "nstructid", "ndyn"]
        .iter()
        .enumerate()
    {
        let (s, c) = sum(kind, &mut (0..nodes));
        lines.push(match *name {
            "nstruct" | "nstructid" => format!("{name}: sum {s} count {c}"),
            _ => format!("{name}: sum {s} count {c} on node 0"),
        });
    }
    let (s, c) = sum(5, &mut (0..pes));
    lines.push(format!("pdyn: sum {s} count {c} on PE 0"));
    let (s, c) = sum(6, &mut (0..pes).filter(|p| p % 2 == 0));
    lines.push(format!("group: sum {s} count {c}"));
    lines.push("all 7 reductions done".into());
    // deleteFn: on every node but node 0, for each of the two node struct
    // reductions; on every group member but the first.
    let members = pes.div_ceil(2);
    lines.push(format!("deletes: {} in all", 2 * (nodes - 1) + members - 1));
    lines
}

#[test]
fn node_reductions_group_struct_reductions_and_remote_dynamic_ids() {
    for (args, pes, nodes) in [
        (&["+p", "1"][..], 1, 1),
        (&["+p", "4", "++ppn", "2"][..], 4, 2),
        (
            &["+p", "6", "++ppn", "3", "++spantree-branch", "1"][..],
            6,
            2,
        ),
        (
            &["+p", "8", "++ppn", "2", "++spantree-branch", "2"][..],
            8,
            4,
        ),
        (&["+p", "5", "++ppn", "1"][..], 5, 5),
        (&["+p", "3"][..], 3, 1),
    ] {
        let want = nodered_lines(pes, nodes);
        let want: Vec<&str> = want.iter().map(String::as_str).collect();
        expect_ok(&direct("nodered", args), &want);
    }
    let want = nodered_lines(6, 3);
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    for netmod in ["shm", "tcp"] {
        let out = convrun(&["+p", "6", "++ppn", "2", "++netmod", netmod], "nodered");
        expect_ok(&out, &want);
    }
}

#[test]
fn cth_pup_moves_a_suspended_thread_with_its_stack() {
    let lines = |to: usize| {
        [
            "cthpup: packed the thread on PE 0".to_string(),
            format!("cthpup: thread moved from PE 0 to PE {to} with its stack"),
        ]
    };
    for (args, to) in [(&["+p", "2"][..], 1), (&["+p", "4", "++ppn", "2"][..], 3)] {
        let want = lines(to);
        let want: Vec<&str> = want.iter().map(String::as_str).collect();
        expect_ok(&direct("cthpup", args), &want);
    }
    // Across processes, with the code at one address in every process.
    for netmod in ["shm", "tcp"] {
        let out = convrun(
            &["++no-aslr", "+p", "4", "++ppn", "2", "++netmod", netmod],
            "cthpup",
        );
        let want = lines(3);
        let want: Vec<&str> = want.iter().map(String::as_str).collect();
        expect_ok(&out, &want);
    }
    // A thread that never ran is refused by name.
    let out = direct("cthpup", &["refuse", "+p", "1"]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("CthPup: cannot pack thread") && stderr.contains("it is not suspended"),
        "{stderr}"
    );
    // Bytes claiming more than their buffer holds are refused before any
    // allocation.
    let out = direct("cthpup", &["garbage", "+p", "1"]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("CthPup: a packed thread of 1073741824 bytes cannot be read here (8 bytes are left to unpack)"),
        "{stderr}"
    );
}

#[test]
fn isomalloc_blocks_are_distinct_in_range_and_freed() {
    for (args, n) in [(&["+p", "1"][..], 1), (&["+p", "4", "++ppn", "2"][..], 4)] {
        let a = format!("isomalloc: {n} PEs, {n} distinct blocks in range");
        let b = format!("isomalloc: blocks checked and freed on {n} PEs");
        expect_ok(&direct("iso", args), &[&a, &b]);
        if n > 1 {
            expect_ok(&convrun(args, "iso"), &[&a, &b]);
        }
    }
    expect_abort(
        &direct("iso", &["+p", "2", "double-free"]),
        &["PE 0 aborting: CmiIsomallocFree(0x", "(freed already?)"],
    );
}

#[test]
fn quiescence_fires_after_a_burst_and_waits_for_cqd_work() {
    let lines = |n: usize| {
        [
            format!("qd: fired on {n} PEs after 320 hops each"),
            "qd: CQd counts move as asked".to_owned(),
            "qd: held by CQdCreate until CQdProcess".to_owned(),
        ]
    };
    for (args, n) in [(&["+p", "1"][..], 1), (&["+p", "4", "++ppn", "2"][..], 4)] {
        let want = lines(n);
        let want: Vec<&str> = want.iter().map(String::as_str).collect();
        expect_ok(&direct("qd", args), &want);
    }
    let want = lines(4);
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    for netmod in ["shm", "tcp"] {
        let out = convrun(&["+p", "4", "++ppn", "2", "++netmod", netmod], "qd");
        expect_ok(&out, &want);
    }
    expect_abort(
        &direct("qd", &["+p", "2", "bad-state"]),
        &["PE 0 aborting: CQdCreate: 0x0 is not PE 0's CQdState"],
    );
}

#[test]
fn handler_ex_gets_its_pes_user_pointer() {
    for (args, n) in [(&["+p", "1"][..], 1), (&["+p", "4", "++ppn", "2"][..], 4)] {
        let line = format!("handlerEx: {n} PEs got their own pointer, twice each");
        expect_ok(&direct("hex", args), &[&line]);
        if n > 1 {
            // Two processes: the handler tables agree although each PE
            // registered its own pointer.
            expect_ok(&convrun(args, "hex"), &[&line]);
        }
    }
}

#[test]
fn the_headers_work_from_cpp() {
    expect_ok(
        &direct("cxx", &["+p", "2"]),
        &[
            "cxx: reduced 1 1 on PE 0",
            "cxx: quiescence after the reduction",
        ],
    );
    expect_ok(
        &convrun(&["+p", "4", "++ppn", "2"], "cxx"),
        &[
            "cxx: reduced 6 2 on PE 0",
            "cxx: quiescence after the reduction",
        ],
    );
}
