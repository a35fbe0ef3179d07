//! Logging through `tracing` (`proc::log`): `CONVERSE_LOG` and the stderr
//! subscriber, checked on child processes whose stderr the test reads.
//!
//! The parent re-executes this test binary with `--exact child_entry` and
//! `CONVERSE_LOG_TEST_SCENARIO=<name>`; [`child_entry`] runs the scenario (a
//! job) and exits the process with its code. `CONVERSE_LOG` is set or
//! removed per run; `CONVERSE_LOG_TEST_OWN_SUBSCRIBER` makes the child
//! install a global subscriber of its own first (one that writes every
//! event to stdout), as a program using `tracing` would.
#[cfg(feature = "ccs")]
use crate::ccs_job;
use crate::common;

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use converse::{ABORT_EXIT_CODE, Converse};

const SCENARIO_VAR: &str = "CONVERSE_LOG_TEST_SCENARIO";
const OWN_SUBSCRIBER_VAR: &str = "CONVERSE_LOG_TEST_OWN_SUBSCRIBER";
/// Longest a child may run before it counts as a hang.
const TIMEOUT: Duration = Duration::from_secs(60);
/// The line the `abort` scenario ends with.
const ABORT_LINE: &str = "converse: PE 1 aborting: the log test aborts";
/// Written by the child's own subscriber before each event, on stdout.
const SEEN: &str = "seen:";

// ---------------------------------------------------------------------------
// Parent side.
// ---------------------------------------------------------------------------

struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Outcome {
    fn describe(&self) -> String {
        format!(
            "exit {:?}\n--- child stderr ---\n{}\n--- child stdout ---\n{}",
            self.code, self.stderr, self.stdout
        )
    }

    /// The stderr lines holding `needle`.
    fn lines_with(&self, needle: &str) -> usize {
        self.stderr.lines().filter(|l| l.contains(needle)).count()
    }

    fn expect_code(&self, code: i32) {
        assert_eq!(self.code, Some(code), "{}", self.describe());
    }

    fn expect_line(&self, needle: &str) {
        assert!(
            self.lines_with(needle) > 0,
            "stderr lacks {needle:?}\n{}",
            self.describe()
        );
    }
}

/// Runs `scenario` in a child with `CONVERSE_LOG` set to `log` (removed
/// for `None`), and the child's own subscriber if `own_subscriber`.
fn run(scenario: &str, log: Option<&str>, own_subscriber: bool) -> Outcome {
    let mut cmd = Command::new(std::env::current_exe().expect("path of the test binary"));
    cmd.args([
        "--exact",
        common::test_path(module_path!(), "child_entry"),
        "--nocapture",
        "--test-threads=1",
    ])
    .env(SCENARIO_VAR, scenario)
    .env("RUST_BACKTRACE", "0")
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    match log {
        Some(value) => cmd.env("CONVERSE_LOG", value),
        None => cmd.env_remove("CONVERSE_LOG"),
    };
    if own_subscriber {
        cmd.env(OWN_SUBSCRIBER_VAR, "1");
    } else {
        cmd.env_remove(OWN_SUBSCRIBER_VAR);
    }
    let mut child = cmd.spawn().expect("spawn the child test process");
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = r.read_to_end(&mut bytes);
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("piped stdout")));
    let err = drain(Box::new(child.stderr.take().expect("piped stderr")));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("poll the child") {
            break status;
        }
        if start.elapsed() >= TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "scenario `{scenario}` hung: killed after {TIMEOUT:?}\n--- stderr ---\n{}",
                err.join().unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Outcome {
        code: status.code(),
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// The scenario that exercises the most start-up and shutdown events: a
/// job with a CCS server and one request, if the build has CCS.
const BUSY: &str = if cfg!(feature = "ccs") {
    "ccs"
} else {
    "clean"
};

#[test]
fn debug_shows_the_start_up_and_shutdown_events() {
    let out = run(BUSY, Some("debug"), false);
    out.expect_code(0);
    out.expect_line("converse: DEBUG: rt::launch: no launcher placed this process");
    if cfg!(feature = "ccs") {
        out.expect_line("converse: INFO: ccs::server: CCS server started addr=127.0.0.1:");
        out.expect_line("converse: DEBUG: ccs::server: CCS connection accepted peer=");
        out.expect_line(
            "converse: DEBUG: ccs::server: CCS request handed to its PE handler=\"stop\"",
        );
        out.expect_line("converse: INFO: ccs::server: CCS server stopped");
    }
    // Every log line is one whole line of its own.
    for line in out.stderr.lines().filter(|l| l.contains("converse:")) {
        assert!(
            line.starts_with("converse: "),
            "{line:?}\n{}",
            out.describe()
        );
    }
    // Case does not matter; info leaves the debug events out.
    let out = run(BUSY, Some("INFO"), false);
    out.expect_code(0);
    assert_eq!(out.lines_with("DEBUG"), 0, "{}", out.describe());
    if cfg!(feature = "ccs") {
        out.expect_line("converse: INFO: ccs::server: CCS server started");
    }
}

#[test]
fn by_default_a_clean_run_prints_no_log_line() {
    for log in [None, Some(""), Some("error"), Some("off")] {
        let out = run(BUSY, log, false);
        out.expect_code(0);
        assert_eq!(
            out.lines_with("converse:"),
            0,
            "CONVERSE_LOG={log:?}\n{}",
            out.describe()
        );
    }
}

#[test]
fn a_bad_level_warns_once_and_the_run_goes_on() {
    let out = run("clean", Some("bogus"), false);
    out.expect_code(0);
    assert_eq!(out.lines_with("CONVERSE_LOG"), 1, "{}", out.describe());
    let warning = out
        .stderr
        .lines()
        .find(|l| l.contains("CONVERSE_LOG"))
        .expect("counted");
    for word in ["bogus", "off", "error", "warn", "info", "debug", "trace"] {
        assert!(warning.contains(word), "{warning:?}");
    }
    // The default level: nothing else.
    assert_eq!(out.lines_with("converse:"), 1, "{}", out.describe());
}

#[test]
fn an_abort_line_appears_exactly_once_at_any_level() {
    for log in [
        None,
        Some("debug"),
        Some("trace"),
        Some("off"),
        Some("bogus"),
    ] {
        let out = run("abort", log, false);
        out.expect_code(ABORT_EXIT_CODE);
        assert_eq!(
            out.lines_with(ABORT_LINE),
            1,
            "CONVERSE_LOG={log:?}\n{}",
            out.describe()
        );
    }
}

#[test]
fn a_programs_own_subscriber_gets_the_events_and_errors_still_reach_stderr() {
    let out = run("abort", Some("debug"), true);
    out.expect_code(ABORT_EXIT_CODE);
    // The runtime printed the line itself, once; our subscriber stayed out.
    assert_eq!(out.lines_with(ABORT_LINE), 1, "{}", out.describe());
    assert_eq!(out.lines_with("converse: DEBUG"), 0, "{}", out.describe());
    // The program's subscriber saw the debug events and the abort, marked
    // as printed already.
    for needle in [
        "seen: DEBUG converse::rt::launch: no launcher placed this process",
        "seen: ERROR converse::proc::exit: PE 1 aborting: the log test aborts printed=true",
    ] {
        assert!(
            out.stdout.lines().any(|l| l.contains(needle)),
            "stdout lacks {needle:?}\n{}",
            out.describe()
        );
    }
}

// ---------------------------------------------------------------------------
// Child side.
// ---------------------------------------------------------------------------

#[test]
fn child_entry() {
    let Ok(scenario) = std::env::var(SCENARIO_VAR) else {
        return;
    };
    if std::env::var_os(OWN_SUBSCRIBER_VAR).is_some() {
        tracing::subscriber::set_global_default(ToStdout)
            .expect("no subscriber is set before the first job");
    }
    let code = match scenario.as_str() {
        "clean" => Converse::new()
            .args(["log", "+p", "2"])
            .run(|_| {
                if converse::my_pe() == 0 {
                    converse::exit(0);
                }
            })
            .unwrap(),
        "abort" => Converse::new()
            .args(["log", "+p", "2"])
            .run(|_| {
                if converse::my_pe() == 1 {
                    converse::abort("the log test aborts");
                }
            })
            .unwrap(),
        #[cfg(feature = "ccs")]
        "ccs" => {
            ccs_job::with_server(&["log", "+p", "2", "++server"], 60, || {}, |_addr| ());
            0
        }
        other => panic!("no scenario {other}"),
    };
    let _ = std::io::stdout().flush();
    std::process::exit(code);
}

/// A program's own subscriber: every event, as `seen: LEVEL target:
/// message key=value…` on stdout.
struct ToStdout;

impl tracing::Subscriber for ToStdout {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Line(String);
        impl tracing::field::Visit for Line {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0.push_str(&format!(" {value:?}"));
                } else {
                    self.0.push_str(&format!(" {}={value:?}", field.name()));
                }
            }
        }
        let meta = event.metadata();
        let mut line = Line(format!("{SEEN} {} {}:", meta.level(), meta.target()));
        event.record(&mut line);
        line.0.push('\n');
        let _ = std::io::stdout().lock().write_all(line.0.as_bytes());
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}
