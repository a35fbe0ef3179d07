//! `++watchdog S`: a job that stops moving while work is pending is
//! reported (what every PE waits for, its queues, its last handlers) and
//! aborted; one that idles by design is left alone; SIGQUIT dumps and the
//! job goes on.
//!
//! The watchdog aborts the whole process, so each job runs in a child
//! process: the test binary re-executes itself with `--exact child_entry`
//! and the scenario's name in [`SCENARIO_VAR`].
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common;
use converse::{ABORT_EXIT_CODE, Converse, Message};

const SCENARIO_VAR: &str = "CONVERSE_WATCHDOG_SCENARIO";
/// Printed by the SIGQUIT scenario once its PEs run.
const READY: &str = "watchdog scenario ready";

struct Outcome {
    code: Option<i32>,
    stderr: String,
    elapsed: Duration,
}

/// Runs `scenario` in a child; `on_ready` gets the child's pid once it
/// printed [`READY`] on stderr (or at once if `wait_ready` is false).
fn run_child(scenario: &str, wait_ready: bool, on_ready: impl FnOnce(u32)) -> Outcome {
    use std::io::BufRead;
    let started = Instant::now();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            common::test_path(module_path!(), "child_entry"),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(SCENARIO_VAR, scenario)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let err = child.stderr.take().unwrap();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in std::io::BufReader::new(err).lines() {
            let Ok(line) = line else { break };
            if line.contains(READY) {
                let _ = ready_tx.send(());
            }
            all += &line;
            all.push('\n');
        }
        all
    });
    if wait_ready {
        ready_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the child says it is ready");
    }
    on_ready(pid);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = reader.join().unwrap();
    Outcome {
        code: status.and_then(|s| s.code()),
        stderr,
        elapsed: started.elapsed(),
    }
}

fn on_spin(_msg: Message) {
    // A handler that never returns.
    loop {
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn on_nothing(_msg: Message) {}

#[test]
fn child_entry() {
    let Ok(scenario) = std::env::var(SCENARIO_VAR) else {
        return;
    };
    let code = match scenario.as_str() {
        // PEs 0..=2 join reduction #0; PE 3 never does.
        "reduction" => Converse::new()
            .args(["wd", "+p", "4", "++watchdog", "2"])
            .run(|_| {
                let done = converse::register_handler(|_| converse::exit(0));
                if converse::my_pe() != 3 {
                    converse::reduce(Message::from_payload(done, &[1]), |mine, _others| mine);
                }
            })
            .unwrap(),
        // PE 1 is stuck in a handler while PE 0 sends it more.
        "stuck" => Converse::new()
            .args(["wd", "+p", "2", "++watchdog", "0.5"])
            .run(|_| {
                let spin = converse::register_handler(on_spin);
                let nothing = converse::register_handler(on_nothing);
                if converse::my_pe() == 0 {
                    converse::sync_send_and_free(1, Message::from_payload(spin, &[]));
                    converse::sync_send_and_free(1, Message::from_payload(nothing, &[]));
                }
            })
            .unwrap(),
        // Idle for six watchdog periods with nothing pending, then done.
        "idle" => Converse::new()
            .args(["wd", "+p", "2", "++watchdog", "0.2"])
            .run(|_| {
                if converse::my_pe() == 0 {
                    converse::call_fn_after(|_| converse::exit(0), 1200.0);
                }
            })
            .unwrap(),
        // Two user-level threads compute and yield for four periods: no
        // handler begins, but the PE moves.
        "threads" => Converse::new()
            .args(["wd", "+p", "1", "++watchdog", "0.3"])
            .run(|_| {
                let until = Instant::now() + Duration::from_millis(1200);
                for _ in 0..2 {
                    converse::Thread::create(
                        move || {
                            while Instant::now() < until {
                                std::thread::sleep(Duration::from_millis(1));
                                converse::yield_now();
                            }
                            converse::exit(0);
                        },
                        64 << 10,
                    )
                    .awaken();
                }
            })
            .unwrap(),
        // Runs a while; the parent sends SIGQUIT meanwhile.
        "sigquit" => Converse::new()
            .args(["wd", "+p", "2", "++watchdog", "100"])
            .run(|_| {
                let nothing = converse::register_handler(on_nothing);
                if converse::my_pe() == 0 {
                    converse::sync_send_and_free(1, Message::from_payload(nothing, &[]));
                    eprintln!("{READY}");
                    converse::call_fn_after(|_| converse::exit(0), 2500.0);
                }
            })
            .unwrap(),
        // Messages go round once, then nothing: no PE calls exit. The
        // process ends itself after 3 s (the watchdog's period is 0.3 s).
        "forgotten" => Converse::new()
            .args(["wd", "+p", "3", "++watchdog", "0.3"])
            .run(|_| {
                let nothing = converse::register_handler(on_nothing);
                converse::sync_broadcast_and_free(Message::from_payload(nothing, &[]));
                if converse::my_pe() == 0 {
                    std::thread::spawn(|| {
                        std::thread::sleep(Duration::from_secs(3));
                        std::process::exit(9);
                    });
                }
            })
            .unwrap(),
        other => panic!("no scenario {other}"),
    };
    std::process::exit(code);
}

#[test]
fn a_deadlocked_reduction_names_the_pe_that_never_contributed() {
    let out = run_child("reduction", false, |_| {});
    assert_eq!(out.code, Some(ABORT_EXIT_CODE), "{}", out.stderr);
    let e = &out.stderr;
    assert!(e.contains("converse: watchdog: "), "{e}");
    // One line per PE.
    for pe in 0..4 {
        assert!(
            e.contains(&format!("converse: watchdog: PE {pe}: ")),
            "PE {pe}: {e}"
        );
    }
    assert!(
        e.contains("converse: watchdog: PE 3 never contributed to reduction #0"),
        "{e}"
    );
    assert!(e.contains("waits for PEs [3]"), "{e}");
    assert!(e.contains("converse: aborting: watchdog: "), "{e}");
}

#[test]
fn a_pe_stuck_in_a_handler_is_reported_with_its_queue() {
    let out = run_child("stuck", false, |_| {});
    assert_eq!(out.code, Some(ABORT_EXIT_CODE), "{}", out.stderr);
    let e = &out.stderr;
    assert!(
        e.contains("began a handler for 0.5 s while work is pending"),
        "{e}"
    );
    let pe1 = e
        .lines()
        .find(|l| l.starts_with("converse: watchdog: PE 1: "))
        .unwrap_or_else(|| panic!("{e}"));
    assert!(
        pe1.contains("in handler runtime::watchdog::on_spin for "),
        "{pe1}"
    );
    assert!(pe1.contains("did not answer"), "{pe1}");
    let pe0 = e
        .lines()
        .find(|l| l.starts_with("converse: watchdog: PE 0: "))
        .unwrap_or_else(|| panic!("{e}"));
    assert!(pe0.contains("idle for"), "{pe0}");
    assert!(pe0.contains("queues: inbox 0"), "{pe0}");
    assert!(out.elapsed < Duration::from_secs(30));
}

#[test]
fn an_idle_job_with_nothing_pending_is_left_alone() {
    let out = run_child("idle", false, |_| {});
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(!out.stderr.contains("watchdog"), "{}", out.stderr);
}

/// A job left quiescent with no exit pending is named once, in one line,
/// and goes on.
#[test]
fn a_job_left_quiescent_is_said_once() {
    let out = run_child("forgotten", false, |_| {});
    assert_eq!(out.code, Some(9), "{}", out.stderr);
    let notices: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("has been quiescent"))
        .collect();
    assert_eq!(
        notices,
        [
            "converse: the job has been quiescent for 0.3 s (++watchdog 0.3): no message or timer \
          is pending and no PE has called exit; it waits for work from outside (CCS), or an exit \
          is missing (the job goes on)"
        ],
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("aborting"), "{}", out.stderr);
}

#[test]
fn threads_that_yield_make_progress() {
    let out = run_child("threads", false, |_| {});
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(!out.stderr.contains("watchdog"), "{}", out.stderr);
}

#[test]
fn sigquit_dumps_and_the_job_goes_on() {
    let out = run_child("sigquit", true, |pid| {
        // SAFETY: kill(2) on the child's pid, which is alive (it waits
        // 2.5 s before it exits).
        unsafe {
            libc::kill(pid as i32, libc::SIGQUIT);
        }
    });
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let e = &out.stderr;
    assert!(e.contains(READY), "{e}");
    assert!(
        e.contains("SIGQUIT: what each PE of process 0 does (the job goes on)"),
        "{e}"
    );
    assert!(e.contains("converse: watchdog: PE 1: "), "{e}");
    assert!(
        e.contains("last handlers (oldest first): runtime::watchdog::on_nothing"),
        "{e}"
    );
}

#[test]
fn bad_periods_are_refused_by_name() {
    for bad in [
        ["++watchdog", "0"],
        ["++watchdog", "-1"],
        ["++watchdog", "soon"],
    ] {
        let err = Converse::new()
            .args(["t", "+p", "1", bad[0], bad[1]])
            .run(|_| converse::exit(0))
            .unwrap_err();
        assert!(err.to_string().contains("++watchdog"), "{bad:?}: {err}");
    }
}
