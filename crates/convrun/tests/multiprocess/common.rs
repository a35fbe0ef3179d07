//! What driver cases share: starting a job through `convrun` and reading
//! what it did.
#![allow(dead_code)] // each case file uses a different subset

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The launcher under test.
pub const CONVRUN: &str = env!("CARGO_BIN_EXE_convrun");

/// This test binary: the program every job runs.
pub fn me() -> String {
    std::env::current_exe()
        .expect("the test binary's path")
        .display()
        .to_string()
}

/// The network modules every core-runtime program runs over. `auto` runs
/// on two pretend hosts (`++virtual-hosts 2`: process `n` on host `n % 2`),
/// so that some pairs of processes talk over shm and others over tcp.
pub const NETMODS: &[&str] = &["shm", "tcp", "auto"];

/// The layouts every core-runtime program runs on over `netmod`: (PEs, PEs
/// per process). Over `auto`, layouts that mix both modules: 4 processes
/// (two shm pairs, tcp between them) and 3 (one shm pair).
pub fn layouts(netmod: &str) -> &'static [(usize, usize)] {
    if netmod == "auto" {
        &[(4, 1), (6, 2)]
    } else {
        &[(4, 2), (3, 1)]
    }
}

/// The launcher's arguments that choose `netmod` (see [`NETMODS`]).
pub fn netmod_args(netmod: &str) -> Vec<&str> {
    let mut args = vec!["++netmod", netmod];
    if netmod == "auto" {
        args.extend_from_slice(&["++virtual-hosts", "2"]);
    }
    args
}

/// What a finished job left.
#[derive(Debug)]
pub struct Finished {
    /// The launcher's exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Finished {
    /// Panics with the job's output unless it exited with `code`.
    pub fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code,
            Some(code),
            "job exit code\n--- stdout\n{}\n--- stderr\n{}",
            self.stdout,
            self.stderr
        );
        self
    }

    /// Panics with the job's output unless stdout has a line equal to `line`.
    pub fn expect_line(&self, line: &str) -> &Self {
        assert!(
            self.stdout.lines().any(|l| l == line),
            "no line `{line}`\n--- stdout\n{}\n--- stderr\n{}",
            self.stdout,
            self.stderr
        );
        self
    }

    /// Why this run of core program `name` (over `ranks` processes of `ppn`
    /// PEs, module `netmod`, started as `how`) is not what it should be:
    /// exit code 0, the start-up banner and `ok NAME`; `None` if it is.
    pub fn core_run_fault(
        &self,
        name: &str,
        ranks: usize,
        ppn: usize,
        netmod: &str,
        how: &str,
    ) -> Option<String> {
        let ok = format!("ok {name}");
        let banner = format!(
            "converse: {} PEs in {ranks} processes of {ppn} PE{}, netmod {netmod}",
            ranks * ppn,
            if ppn == 1 { "" } else { "s" }
        );
        let lines: Vec<&str> = self.stdout.lines().collect();
        let right = self.code == Some(0)
            && lines.contains(&ok.as_str())
            && lines.contains(&banner.as_str());
        (!right).then(|| {
            format!(
                "=== {name} {how}: expected code 0, `{banner}` and `{ok}`, got {:?}\n--- stdout\n{}\n--- stderr\n{}",
                self.code, self.stdout, self.stderr
            )
        })
    }

    /// Asserts that standard error has the whole line `line` (a last line
    /// without a newline counts).
    pub fn expect_err_line(&self, line: &str) -> &Self {
        assert!(
            self.stderr.split('\n').any(|l| l == line),
            "stderr has no line `{line}`:\n{:?}",
            self.stderr
        );
        self
    }
}

/// Runs `convrun ARGS` with a hang guard of `limit`: past it the launcher is
/// killed and the case fails.
pub fn convrun(args: &[&str], limit: Duration) -> Finished {
    convrun_with(args, limit, |_| {})
}

/// `convrun` as in [`convrun`], with its command changed by `setup` first
/// (working directory, environment).
pub fn convrun_with(args: &[&str], limit: Duration, setup: impl FnOnce(&mut Command)) -> Finished {
    launch_with(CONVRUN, args, limit, setup)
}

/// Runs launcher `program` (`convrun`, `mpiexec`) with `args` as in
/// [`convrun_with`].
pub fn launch_with(
    program: &str,
    args: &[&str],
    limit: Duration,
    setup: impl FnOnce(&mut Command),
) -> Finished {
    let start = Instant::now();
    let mut cmd = Command::new(program);
    setup(&mut cmd);
    let mut child = cmd
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program} does not start: {e}"));
    let out = std::thread::spawn({
        let mut s = child.stdout.take().unwrap();
        move || {
            let mut v = String::new();
            std::io::Read::read_to_string(&mut s, &mut v).ok();
            v
        }
    });
    let err = std::thread::spawn({
        let mut s = child.stderr.take().unwrap();
        move || {
            let mut v = String::new();
            std::io::Read::read_to_string(&mut s, &mut v).ok();
            v
        }
    });
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the launcher") {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{program} {args:?} did not finish within {limit:?}\n--- stdout\n{}\n--- stderr\n{}",
                out.join().unwrap(),
                err.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Finished {
        code: status.code(),
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
        elapsed: start.elapsed(),
    }
}

/// Runs child program `name` of this binary as a job of `pes` PEs in
/// processes of `ppn`, over `netmod`, with `extra` arguments after the name.
pub fn job(netmod: &str, pes: usize, ppn: usize, name: &str, extra: &[&str]) -> Finished {
    let (p, n) = (pes.to_string(), ppn.to_string());
    let me = me();
    let mut args = vec!["+p", &p, "++ppn", &n];
    args.extend(netmod_args(netmod));
    args.extend_from_slice(&[&me, name]);
    args.extend_from_slice(extra);
    convrun(&args, Duration::from_secs(60))
}
