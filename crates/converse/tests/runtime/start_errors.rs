//! Start-up's typed errors as a program sees them: a process whose
//! launcher environment is malformed, or whose launcher cannot be reached,
//! gets a `StartError` of the right kind, with the message start-up
//! prints and the error underneath as its `source()`.
//!
//! The environment is the process's own, so each case runs in a child:
//! the parent re-executes this test binary with `--exact child_entry`,
//! the case's name in `CASE_VAR` and the launcher's variables set; the
//! child's `child_entry` checks the error (a failed check fails the
//! child, which the parent reports with its output).
use std::error::Error as _;
use std::process::Command;

use crate::common;
use converse::{BootstrapError, Converse, JoinError, StartError};

const CASE_VAR: &str = "CONVERSE_START_ERRORS_CASE";

/// Every variable a launcher might have set, removed from the child's
/// environment before the case's own are set (the test may itself run
/// under a launcher).
const LAUNCHER_VARS: &[&str] = &[
    "CONVERSE_LAUNCHER",
    "CONVERSE_NODE",
    "CONVERSE_NODES",
    "CONVERSE_JOB_KEY",
    "CONVERSE_SHM_ID",
    "CONVERSE_NETMOD",
    "CONVERSE_HOST",
    "CONVERSE_HOSTS",
    "CONVERSE_TIMEOUT",
    "CONVERSE_HOST_PES",
    "PMI_FD",
    "PMI_RANK",
    "PMI_SIZE",
    "PMIX_NAMESPACE",
    "PMIX_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "SLURM_STEP_ID",
    "SLURM_STEP_NUM_TASKS",
    "FLUX_JOB_SIZE",
];

/// A job key as `convrun` passes it (64 hexadecimal digits).
const KEY: &str = "5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c";

/// Runs case `case` in a child with `vars` set; fails with its output if
/// the child's checks failed.
fn run_case(case: &str, vars: &[(&str, &str)]) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        common::test_path(module_path!(), "child_entry"),
        "--nocapture",
        "--test-threads=1",
    ]);
    for var in LAUNCHER_VARS {
        cmd.env_remove(var);
    }
    cmd.env(CASE_VAR, case);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "case {case}: {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("case {case} checked")),
        "case {case}: the child did not run it"
    );
}

/// The error a job started in this process's environment returns.
fn start_error() -> StartError {
    Converse::new()
        .args(["prog"])
        .run(|_| converse::exit_scheduler())
        .expect_err("start-up refused")
}

#[test]
fn a_malformed_convrun_environment_is_a_bootstrap_error() {
    run_case(
        "not_a_number",
        &[
            ("CONVERSE_LAUNCHER", "127.0.0.1:1"),
            ("CONVERSE_NODE", "one"),
            ("CONVERSE_NODES", "2"),
        ],
    );
    run_case(
        "unset",
        &[
            ("CONVERSE_LAUNCHER", "127.0.0.1:1"),
            ("CONVERSE_NODE", "1"),
            ("CONVERSE_NODES", "2"),
        ],
    );
}

#[test]
fn a_malformed_pmi_environment_is_a_bootstrap_error() {
    if cfg!(feature = "mpi") {
        // MPI's own start-up takes a PMI launcher's environment there.
        return;
    }
    run_case(
        "pmi_fd",
        &[("PMI_FD", "abc"), ("PMI_RANK", "0"), ("PMI_SIZE", "2")],
    );
}

#[test]
fn an_unreachable_launcher_is_a_join_error_over_the_io_error() {
    run_case(
        "unreachable",
        &[
            // Nothing listens on port 1 of the loopback address.
            ("CONVERSE_LAUNCHER", "127.0.0.1:1"),
            ("CONVERSE_NODE", "0"),
            ("CONVERSE_NODES", "2"),
            ("CONVERSE_JOB_KEY", KEY),
            ("CONVERSE_SHM_ID", "00000000c0ffee01"),
            ("CONVERSE_NETMOD", "tcp"),
            ("CONVERSE_HOST", "127.0.0.1"),
            ("CONVERSE_TIMEOUT", "5"),
        ],
    );
}

/// The child's side: checks the case `CASE_VAR` names (nothing when run
/// as an ordinary test).
#[test]
fn child_entry() {
    let Ok(case) = std::env::var(CASE_VAR) else {
        return;
    };
    let e = start_error();
    match case.as_str() {
        "not_a_number" => {
            assert!(
                matches!(&e, StartError::Bootstrap(BootstrapError::Environment(_))),
                "{e:?}"
            );
            assert_eq!(e.to_string(), "CONVERSE_NODE is not a number");
            // StartError -> BootstrapError -> the launch protocol's error.
            let bootstrap = e.source().expect("the bootstrap's error");
            assert!(bootstrap.is::<BootstrapError>(), "{bootstrap:?}");
            let wire = bootstrap.source().expect("the launch protocol's error");
            assert_eq!(wire.to_string(), "CONVERSE_NODE is not a number");
            assert!(wire.source().is_none());
        }
        "unset" => {
            assert!(
                matches!(&e, StartError::Bootstrap(BootstrapError::Environment(_))),
                "{e:?}"
            );
            assert_eq!(
                e.to_string(),
                "CONVERSE_JOB_KEY is not set (the job was started by convrun?)"
            );
        }
        "pmi_fd" => {
            assert!(
                matches!(&e, StartError::Bootstrap(BootstrapError::Launcher(_))),
                "{e:?}"
            );
            assert_eq!(e.to_string(), "PMI_FD=abc is no descriptor");
        }
        "unreachable" => {
            let StartError::Join {
                process: 0,
                cause:
                    JoinError::Bootstrap(BootstrapError::Connection {
                        what,
                        source: Some(io),
                    }),
            } = &e
            else {
                panic!("not a connection failure of process 0: {e:?}")
            };
            assert_eq!(what, "cannot reach the launcher at 127.0.0.1:1");
            assert_eq!(io.get().kind(), std::io::ErrorKind::ConnectionRefused);
            let text = e.to_string();
            assert!(
                text.starts_with(
                    "process 0 could not join the job: cannot reach the launcher at 127.0.0.1:1: "
                ),
                "{text}"
            );
            // StartError -> BootstrapError -> io::Error.
            let bootstrap = e.source().expect("the bootstrap's error");
            assert!(bootstrap.is::<BootstrapError>(), "{bootstrap:?}");
            let io = bootstrap.source().expect("the I/O error");
            let io = io.downcast_ref::<std::io::Error>().expect("an io::Error");
            assert_eq!(io.kind(), std::io::ErrorKind::ConnectionRefused);
        }
        other => panic!("no case {other}"),
    }
    println!("case {case} checked");
}
