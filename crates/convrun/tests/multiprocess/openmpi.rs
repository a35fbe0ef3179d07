//! Jobs started by Open MPI's `mpirun` (`mpirun.openmpi`, beside MPICH's
//! `mpiexec`: Debian installs both and the `mpirun` alternative stays
//! MPICH's in CI).
//!
//! - Built without the `mpi` feature, the processes join through PMIx
//!   (`converse::rt::launch::pmix`: `mpirun`'s server, through the
//!   `libpmix.so.2` it was built with) and run over shm and tcp.
//! - Built with it against Open MPI (`MPICC=mpicc.openmpi`, which `.ci/run`
//!   builds into its own target directory and runs with
//!   `CONVERSE_TEST_OPENMPI` set), they join through MPI and run over the
//!   MPI module too.
//!
//! Either way the core programs give the same answers as under `convrun`,
//! and the ending works as under `mpiexec`. A build with the feature
//! against MPICH is not for `mpirun`: its cases say skipped.
//!
//! Every rank gets `CONVERSE_TEST_CHILD` (`-x`), so that this binary runs
//! as a job's process under any launcher, never as a second driver.
use std::time::Duration;

use crate::Case;
use crate::common::{Finished, launch_with, me};
use crate::launcher::{Running, expect_stderr, kill_and_wait};
use crate::mpiexec::removing_left_names;

/// A job's hang guard.
const LIMIT: Duration = Duration::from_secs(60);

/// Open MPI's launcher under its Debian name.
const MPIRUN: &str = "mpirun.openmpi";

/// What every `mpirun` gets: root allowed (CI runs as root), more ranks
/// than cores, and the child marker for every rank.
const FLAGS: &[&str] = &[
    "--allow-run-as-root",
    "--oversubscribe",
    "-x",
    "CONVERSE_TEST_CHILD=1",
];

/// Whether Open MPI's `mpirun` is installed here.
fn installed() -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(MPIRUN).is_file()));
    if !found {
        if std::env::var_os("CONVERSE_TEST_OPENMPI").is_some()
            || std::env::var_os("CONVERSE_TEST_OPENMPI_INSTALLED").is_some()
        {
            panic!("CONVERSE_TEST_OPENMPI(_INSTALLED) is set but there is no {MPIRUN} on PATH");
        }
        println!("    skipped: no {MPIRUN} on PATH (install openmpi-bin)");
    }
    found
}

/// The network modules this build runs under `mpirun` (see the module's
/// top), or `None` (skipped) for a build with the feature against MPICH.
fn netmods() -> Option<&'static [&'static str]> {
    if !cfg!(feature = "mpi") {
        Some(&["shm", "tcp"])
    } else if std::env::var_os("CONVERSE_TEST_OPENMPI").is_some() {
        Some(&["shm", "tcp", "mpi"])
    } else {
        println!(
            "    skipped: built with the mpi feature, but not against Open MPI \
             (CONVERSE_TEST_OPENMPI)"
        );
        None
    }
}

/// `mpirun FLAGS -n RANKS this-binary NAME EXTRA...`.
fn mpirun_job(ranks: usize, name: &str, extra: &[&str]) -> Finished {
    let me = me();
    let n = ranks.to_string();
    let mut args = FLAGS.to_vec();
    args.extend_from_slice(&["-n", &n, &me, name]);
    args.extend_from_slice(extra);
    launch_with(MPIRUN, &args, LIMIT, |_| {})
}

/// The core programs over the build's modules: 3 ranks of 1 PE and 2 of
/// 2; and a job of one rank.
fn openmpi_core() {
    let Some(netmods) = netmods().filter(|_| installed()) else {
        return;
    };
    let mut failures = Vec::new();
    for &netmod in netmods {
        for (ranks, ppn) in [(3usize, 1usize), (2, 2)] {
            let n = ppn.to_string();
            for name in ["core_sends", "core_bcast", "core_reduce", "core_large"] {
                let f = mpirun_job(ranks, name, &["++ppn", &n, "++netmod", netmod]);
                let how = format!("under mpirun -n {ranks} ++ppn {ppn} over {netmod}");
                failures.extend(f.core_run_fault(name, ranks, ppn, netmod, &how));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // One rank: a plain one-process job (its launcher is told it ended).
    let f = mpirun_job(1, "core_sends", &[]);
    f.expect_code(0).expect_line("ok core_sends");
}

/// `exit(7)` on the last PE ends every rank, and `mpirun` with 7.
fn openmpi_exit() {
    if !installed() || netmods().is_none() {
        return;
    }
    let f = mpirun_job(3, "core_exit", &["handler"]);
    f.expect_code(7).expect_line("exiting from PE 2 with 7");
}

/// An abort on a PE of rank 1 ends every rank with the PE and the cause
/// printed; a rank killed with SIGKILL ends the job within 5 s (`mpirun`
/// ends the others). Over shm and the build's last module (tcp, or mpi).
/// The names killed ranks leave are removed.
fn openmpi_faults() {
    let Some(netmods) = netmods().filter(|_| installed()) else {
        return;
    };
    removing_left_names(|| {
        for netmod in ["shm", netmods[netmods.len() - 1]] {
            let f = mpirun_job(3, "lx_abort", &["++netmod", netmod]);
            assert_ne!(f.code, Some(0), "over {netmod}: {}", f.stderr);
            expect_stderr(&f, "converse: PE 1 aborting: lx_abort says boom");
            let me = me();
            let mut args = FLAGS.to_vec();
            args.extend_from_slice(&["-n", "3", &me, "lx_idle", "++netmod", netmod]);
            let mut job = Running::start_program(MPIRUN, &args, false);
            job.wait_pids(3, Some("converse: 3 PEs"), LIMIT);
            let f = kill_and_wait(job, 1, Duration::from_secs(2));
            assert_ne!(f.code, Some(0), "over {netmod}: {}", f.stderr);
        }
    });
}

/// The driver cases.
pub fn cases() -> Vec<Case> {
    vec![
        ("openmpi_core", openmpi_core),
        ("openmpi_exit", openmpi_exit),
        ("openmpi_faults", openmpi_faults),
    ]
}
