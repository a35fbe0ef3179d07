//! The C and C++ programs of `tests/c/threads/`: user-level threads (Cth),
//! thread-private variables (Ctv), conditions and timers (Ccd), built with
//! their Makefile and `convcc`, run in one process and under `convrun`.
//! Each program logs what happened in order and the test compares the
//! log; nothing depends on timings.
mod common;

use common::{expect_ok, text};

const DIR: &str = "threads";

fn direct(name: &str, args: &[&str]) -> std::process::Output {
    common::direct(DIR, name, args)
}

fn convrun(args: &[&str], name: &str) -> std::process::Output {
    common::convrun(DIR, args, name)
}

/// The line each PE of `prog` prints, for PEs `0..pes`.
fn per_pe(prog: &str, pes: usize, rest: &str) -> Vec<String> {
    (0..pes)
        .map(|pe| format!("{prog}: PE {pe}: {rest}"))
        .collect()
}

fn expect_lines(out: &std::process::Output, lines: &[String]) {
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    expect_ok(out, &lines);
}

/// Created, suspended, awakened, yielding, resumed, by priority, ended by
/// returning and by `CthFree(CthSelf()); CthSuspend();`, in this order.
const CTH_LOG: &str = "A1 B1 C1 A2 B2 C2 p-3 p0 p2 p5 C3 R1 C4 R2 C5 M C6";

#[test]
fn threads_run_suspend_awaken_and_end_in_order() {
    expect_lines(&direct("cth", &["+p", "1"]), &per_pe("cth", 1, CTH_LOG));
    expect_lines(&direct("cth", &["+p", "2"]), &per_pe("cth", 2, CTH_LOG));
    expect_lines(&convrun(&["+p", "2"], "cth"), &per_pe("cth", 2, CTH_LOG));
}

#[test]
fn a_strategy_schedules_its_threads_and_the_default_comes_back() {
    // CthAwaken's values (FIFO, 0, NULL), CthAwakenPrio's own (IFIFO, prio
    // 7, by pointer), CthYield's rebuilt (FIFO), CthYieldPrio's (prio 3).
    let log = "aw1:2:0:- aw2:4:0:7 1a aw1:2:0:- 2a aw2:4:0:3 1b 2b S1 3 S2";
    expect_lines(
        &direct("strategy", &["+p", "1"]),
        &per_pe("strategy", 1, log),
    );
    expect_lines(
        &direct("strategy", &["+p", "2"]),
        &per_pe("strategy", 2, log),
    );
}

/// What `ctv` prints on PEs `0..pes`: PE `pe`'s threads 1, 2, 3 hold
/// `1000 pe + 10 id`, its main flow `100 + pe`.
fn ctv_lines(pes: usize) -> Vec<String> {
    (0..pes)
        .map(|pe| {
            format!(
                "ctv: PE {pe}: 3 threads, sum {}, main flow kept {}",
                3000 * pe + 60,
                100 + pe
            )
        })
        .collect()
}

#[test]
fn ctv_values_are_per_thread_in_c() {
    expect_lines(&direct("ctv", &["+p", "1"]), &ctv_lines(1));
    expect_lines(&direct("ctv", &["+p", "2"]), &ctv_lines(2));
    expect_lines(&convrun(&["+p", "2"], "ctv"), &ctv_lines(2));
    // Two PEs per node, two nodes in one process and in two.
    let layout = ["+p", "4", "++ppn", "2"];
    expect_lines(&direct("ctv", &layout), &ctv_lines(4));
    expect_lines(&convrun(&layout, "ctv"), &ctv_lines(4));
    expect_lines(
        &common::convrun_with(DIR, &[], "ctv", &layout),
        &ctv_lines(4),
    );
}

#[test]
fn ctv_values_are_constructed_and_destroyed_per_thread_in_cpp() {
    // Main flow, w1, w2 and last each construct one; w1 (returned), w2
    // (freed itself: its stack unwound, `~w2` its local's destructor) and
    // last are destroyed when they end.
    let line = "constructed 4, destroyed 3: w1 w2 ~w2 last";
    expect_lines(&direct("ctvpp", &["+p", "1"]), &per_pe("ctvpp", 1, line));
    expect_lines(&direct("ctvpp", &["+p", "2"]), &per_pe("ctvpp", 2, line));
    let layout = ["+p", "4", "++ppn", "2"];
    expect_lines(&direct("ctvpp", &layout), &per_pe("ctvpp", 4, line));
    expect_lines(&convrun(&layout, "ctvpp"), &per_pe("ctvpp", 4, line));
}

#[test]
fn conditions_timers_and_resolutions() {
    // One-shots before kept ones, each oldest first; the cancelled ones
    // never; the kept one at CcdUSERMAX too.
    let line = "timers fired, periodic fired, idle fired, user: o1 o2 k1 k2 | k1 k2 | k2 | max";
    let mut lines = per_pe("ccd", 1, line);
    lines.push("ccd: resolutions 0.005 0.001 0.001 0.0005".into());
    expect_lines(&direct("ccd", &["+p", "1"]), &lines);
    let mut lines = per_pe("ccd", 2, line);
    lines.push("ccd: resolutions 0.005 0.001 0.001 0.0005".into());
    expect_lines(&direct("ccd", &["+p", "2"]), &lines);
    expect_lines(&convrun(&["+p", "2"], "ccd"), &per_pe("ccd", 2, line));
}

#[test]
fn cpp_takes_callbacks_of_both_types() {
    expect_lines(
        &direct("ccdpp", &["+p", "2"]),
        &per_pe("ccdpp", 2, "a b c d t1 t2"),
    );
}

#[test]
fn a_condition_converse_rs_lacks_ends_the_job_by_name() {
    let cases = [
        (
            direct("ccdbad", &["+p", "2"]),
            "PE 0 aborting: CcdCallOnCondition: condition 4 (Charm++'s CcdPROCESSOR_LONG_IDLE) is not one converse-rs has",
        ),
        (
            direct("ccdbad", &["+p", "1", "raise"]),
            "PE 0 aborting: CcdRaiseCondition: condition 600 is not one converse-rs has",
        ),
    ];
    for (out, want) in cases {
        let (_, stderr) = text(&out);
        assert_eq!(
            out.status.code(),
            Some(converse::ABORT_EXIT_CODE),
            "{stderr}"
        );
        assert!(stderr.contains(want), "{stderr}");
        assert!(stderr.contains("CcdUSER 22 to 517"), "{stderr}");
    }
}

#[test]
fn a_thread_handle_of_an_ended_thread_or_another_pe_ends_the_job() {
    let cases = [
        (direct("stale", &["+p", "1"]), 0),
        (direct("stale", &["+p", "2", "otherpe"]), 1),
        (convrun(&["+p", "2"], "stale"), 0),
    ];
    for (out, pe) in cases {
        let (_, stderr) = text(&out);
        assert_eq!(
            out.status.code(),
            Some(converse::ABORT_EXIT_CODE),
            "{stderr}"
        );
        assert!(
            stderr.contains(&format!("PE {pe} aborting: CthAwaken: 0x")),
            "{stderr}"
        );
        let why =
            format!("is no live thread of PE {pe} (a thread that has ended, or one of another PE)");
        assert!(stderr.contains(&why), "{stderr}");
    }
}
