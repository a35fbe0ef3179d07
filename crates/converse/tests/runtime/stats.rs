//! `+stats` and `+stats-plot FILE` on one process: the table process 0
//! prints at the end of the job has a row per PE with the messages the
//! job sent and handled, the named handler among the top ones with its
//! calls, shares that add up to 100 %; the plot is SVG with a row per PE.
//!
//! The table goes to the process's stderr, so each job runs in a child:
//! this test binary again, running only `child_entry` with the job's
//! flags in an environment variable.
use std::process::{Command, Stdio};

use crate::common;
use converse::{Converse, Message};

const FLAGS_VAR: &str = "CONVERSE_STATS_TEST_FLAGS";

/// Pings PE 0 sends to each other PE; each is answered with a pong.
const PINGS: usize = 10;

fn temp(tag: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("converse-stats-{tag}-{}.svg", std::process::id()))
}

/// PE 0's pongs still to come.
static LEFT: converse::Cpv<std::cell::Cell<usize>> = converse::Cpv::new();

fn on_pong(_msg: Message) {
    let left = LEFT.with(|l| {
        l.set(l.get() - 1);
        l.get()
    });
    if left == 0 {
        converse::exit(0);
    }
}

/// The child's job: 3 PEs; PE 0 pings PEs 1 and 2 `PINGS` times each.
#[test]
fn child_entry() {
    let Ok(flags) = std::env::var(FLAGS_VAR) else {
        return;
    };
    let mut args = vec!["stats".to_string(), "+p".into(), "3".into()];
    args.extend(flags.split_whitespace().map(String::from));
    let code = Converse::new()
        .args(args)
        .run(|_| {
            LEFT.initialize(std::cell::Cell::new(PINGS * 2));
            let pong = converse::register_handler(on_pong);
            let ping = converse::register_handler(move |mut msg: Message| {
                msg.set_handler(pong);
                converse::sync_send_and_free(0, msg);
            });
            if converse::my_pe() == 0 {
                for _ in 0..PINGS {
                    for pe in 1..3 {
                        converse::sync_send_and_free(pe, Message::new(ping, 16));
                    }
                }
            }
        })
        .unwrap();
    assert_eq!(code, 0);
}

/// Runs the job with `flags` in a child; its stderr.
fn run(flags: &str) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            common::test_path(module_path!(), "child_entry"),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(FLAGS_VAR, flags)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .output()
        .expect("run the child");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "the child failed:\n{err}");
    err
}

/// The table's rows: label and numbers.
fn rows(stderr: &str) -> Vec<(String, Vec<f64>)> {
    let mut lines = stderr.lines().skip_while(|l| !l.contains("busy %"));
    lines.next().expect("a header line");
    lines
        .take_while(|l| !l.starts_with("converse:"))
        .map(|l| {
            let mut cells = l.split_whitespace();
            let label = cells.next().unwrap().to_string();
            (label, cells.map(|c| c.parse().unwrap()).collect())
        })
        .collect()
}

#[test]
fn the_table_counts_the_messages_and_the_plot_has_a_row_per_pe() {
    let path = temp("plot");
    let file = path.display().to_string();
    let err = run(&format!("+stats-plot {file}"));
    let rows = rows(&err);
    let labels: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(labels, ["0", "1", "2", "all"], "{err}");
    // busy %, idle %, overhead %, sent, bytes, handled, runtime.
    for (label, v) in &rows {
        assert_eq!(v.len(), 7, "{err}");
        let sum = v[0] + v[1] + v[2];
        assert!(
            (sum - 100.0).abs() <= 0.25,
            "row {label} sums to {sum}\n{err}"
        );
        if v[3] > 0.0 {
            assert_eq!(v[4] % v[3], 0.0, "bytes are whole messages: {err}");
            assert!(v[4] >= 16.0 * v[3]);
        }
    }
    let n = PINGS as f64;
    let counts = |i: usize| (rows[i].1[3], rows[i].1[5]);
    assert_eq!(
        counts(0),
        (2.0 * n, 2.0 * n),
        "PE 0: pings out, pongs in\n{err}"
    );
    assert_eq!(counts(1), (n, n), "{err}");
    assert_eq!(counts(2), (n, n), "{err}");
    assert_eq!(counts(3), (4.0 * n, 4.0 * n), "{err}");
    // The handlers by name, with their calls.
    let calls = |name: &str| -> Option<u64> {
        err.lines()
            .skip_while(|l| !l.contains("top handlers by time"))
            .find(|l| l.split_whitespace().next() == Some(name))
            .map(|l| l.split_whitespace().nth(1).unwrap().parse().unwrap())
    };
    assert_eq!(
        calls("runtime::stats::on_pong"),
        Some(2 * PINGS as u64),
        "{err}"
    );
    assert!(
        err.contains(&format!("converse: stats plot written to {file} (3 PEs")),
        "{err}"
    );
    let svg = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(svg.starts_with("<?xml") && svg.contains("<svg "), "{svg}");
    assert!(svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("<g class=\"pe\"").count(), 3);
    for pe in 0..3 {
        assert_eq!(svg.matches(&format!(">PE {pe}</text>")).count(), 1);
    }
    assert!(svg.contains("Utilisation of 3 PEs"));
    // Well formed enough: every element opened is closed.
    assert_eq!(svg.matches("<g ").count(), svg.matches("</g>").count());
    assert_eq!(svg.matches("<text").count(), svg.matches("</text>").count());
}

#[test]
fn stats_and_a_timeline_together() {
    let path =
        std::env::temp_dir().join(format!("converse-stats-trace-{}.json", std::process::id()));
    let file = path.display().to_string();
    let err = run(&format!("+stats +trace {file}"));
    assert_eq!(rows(&err).len(), 4, "{err}");
    assert!(
        !err.contains("stats plot"),
        "no plot without +stats-plot: {err}"
    );
    assert!(
        err.contains(&format!("converse: trace written to {file}")),
        "{err}"
    );
    let trace: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(
        trace["converse"]["user_messages_sent"],
        4 * PINGS,
        "{}",
        trace["converse"]
    );
}

#[test]
fn without_the_flag_there_is_no_table() {
    let err = run("");
    assert!(!err.contains("busy %"), "{err}");
}

#[test]
fn bad_stats_flags_are_refused() {
    let e = Converse::new()
        .args(["t", "+stats-plot"])
        .run(|_| {})
        .unwrap_err();
    assert!(e.to_string().contains("`+stats-plot` needs a value"), "{e}");
    let e = Converse::new()
        .args(["t", "+p", "2", "+stats-plot", "/nonexistent-dir/u.svg"])
        .run(|_| panic!("the job must not start"))
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("+stats-plot: cannot create /nonexistent-dir/u.svg"),
        "{e}"
    );
}
