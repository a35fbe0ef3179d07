//! Jobs started by Slurm's `srun` on a real (one-node) Slurm cluster: the
//! same test programs as under `convrun` and `mpiexec`, bootstrapped
//! through the PMI connection Slurm's `pmi2` plugin gives each task
//! (`converse::rt::launch::pmi`: that plugin answers PMI-1 requests too).
//!
//! Each case says `skipped` when no cluster answers (`sinfo`); `.ci/run`
//! starts one (`eval "$(bash .ci/slurm up)"`, which also sets `SLURM_CONF`)
//! and sets `CONVERSE_TEST_SLURM`, which makes a missing one a failure.
//!
//! Every task gets `CONVERSE_TEST_CHILD` (`--export`), so that this binary
//! runs as a job's process even where Slurm gives no PMI connection (the
//! refusal case), never as a second driver.
use std::time::Duration;

use crate::Case;
use crate::common::{Finished, launch_with, me};
use crate::launcher::{Running, expect_gone, expect_stderr, kill_and_wait};
use crate::mpiexec::removing_left_names;

/// The network modules the core programs run over: shm and tcp, and with
/// the `mpi` feature (MPI start-up instead of PMI-1) the MPI module too.
const NETMODS: &[&str] = if cfg!(feature = "mpi") {
    &["shm", "tcp", "mpi"]
} else {
    &["shm", "tcp"]
};

/// A job's hang guard.
const LIMIT: Duration = Duration::from_secs(60);

/// The environment every task gets: Slurm's default (all of the caller's)
/// and the child marker.
const EXPORT: &str = "--export=ALL,CONVERSE_TEST_CHILD=1";

/// Whether a Slurm cluster answers here.
fn slurm() -> bool {
    let answers = std::process::Command::new("sinfo")
        .args(["-h", "-o", "%t"])
        .output()
        .is_ok_and(|o| o.status.success() && !o.stdout.is_empty());
    if answers {
        true
    } else if std::env::var_os("CONVERSE_TEST_SLURM").is_some() {
        panic!("CONVERSE_TEST_SLURM is set but no Slurm cluster answers `sinfo` (SLURM_CONF?)");
    } else {
        println!(
            "    skipped: no Slurm cluster answers (eval \"$(bash .ci/slurm up)\" starts one)"
        );
        false
    }
}

/// `srun EXPORT SRUN_ARGS... this-binary NAME EXTRA...`.
fn srun_job(srun_args: &[&str], name: &str, extra: &[&str]) -> Finished {
    let me = me();
    let mut args = vec![EXPORT];
    args.extend_from_slice(srun_args);
    args.extend_from_slice(&[&me, name]);
    args.extend_from_slice(extra);
    launch_with("srun", &args, LIMIT, |_| {})
}

/// The core runtime's programs give the same answers under `srun` as
/// under `convrun`: 3 tasks of 1 PE and 2 tasks of 2 PEs (Slurm's
/// `--cpus-per-task`, with no `++ppn`), over shm and tcp (and MPI, with
/// the feature).
fn srun_core() {
    if !slurm() {
        return;
    }
    let mut failures = Vec::new();
    for &netmod in NETMODS {
        for (tasks, ppn) in [(3usize, 1usize), (2, 2)] {
            let (n, c) = (tasks.to_string(), ppn.to_string());
            let srun_args = ["-n", n.as_str(), "-c", c.as_str()];
            for name in ["core_sends", "core_bcast", "core_reduce", "core_large"] {
                let f = srun_job(&srun_args, name, &["++netmod", netmod]);
                let how = format!("under srun {srun_args:?} over {netmod}");
                failures.extend(f.core_run_fault(name, tasks, ppn, netmod, &how));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Under Slurm's PMIx plugin (`srun --mpi=pmix`), the processes join
/// through PMIx (`converse::rt::launch::pmix`) and the core programs give
/// the same answers: 3 tasks of 1 PE and 2 of 2, over shm and tcp; an abort
/// on a PE of task 1 ends every task naming it, and a task killed with
/// SIGKILL ends the job naming the lost process. Built with the `mpi`
/// feature, MPI's own start-up would take these jobs: skipped there.
fn srun_pmix() {
    if !slurm() {
        return;
    }
    if cfg!(feature = "mpi") {
        println!("    skipped: the PMIx bootstrap (built without the mpi feature)");
        return;
    }
    let mut failures = Vec::new();
    for netmod in ["shm", "tcp"] {
        for (tasks, ppn) in [(3usize, 1usize), (2, 2)] {
            let (n, c) = (tasks.to_string(), ppn.to_string());
            let srun_args = ["--mpi=pmix", "-n", n.as_str(), "-c", c.as_str()];
            for name in ["core_sends", "core_bcast", "core_reduce", "core_large"] {
                let f = srun_job(&srun_args, name, &["++netmod", netmod]);
                let how = format!("under srun {srun_args:?} over {netmod}");
                failures.extend(f.core_run_fault(name, tasks, ppn, netmod, &how));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    removing_left_names(|| {
        let f = srun_job(&["--mpi=pmix", "-n", "3"], "lx_abort", &[]);
        assert_ne!(f.code, Some(0), "{}", f.stderr);
        expect_stderr(&f, "converse: PE 1 aborting: lx_abort says boom");
        let me = me();
        let mut job = Running::start_program(
            "srun",
            &[
                EXPORT,
                "--mpi=pmix",
                "-n",
                "3",
                &me,
                "lx_idle",
                "++netmod",
                "tcp",
            ],
            false,
        );
        job.wait_pids(3, Some("converse: 3 PEs"), LIMIT);
        let f = kill_and_wait(job, 1, Duration::from_secs(2));
        assert_ne!(f.code, Some(0), "{}", f.stderr);
        expect_stderr(&f, "lost process 1 (PE 1)");
    });
}

/// `exit(7)` on the last PE ends every task, and `srun` with 7.
fn srun_exit() {
    if !slurm() {
        return;
    }
    let f = srun_job(&["-n", "3"], "core_exit", &["handler"]);
    f.expect_code(7).expect_line("exiting from PE 2 with 7");
}

/// An abort on a PE of task 1 ends every task with the PE and the cause
/// printed; `srun`'s code is not 0.
fn srun_abort() {
    if !slurm() {
        return;
    }
    removing_left_names(|| {
        for netmod in ["shm", "tcp"] {
            let f = srun_job(&["-n", "3"], "lx_abort", &["++netmod", netmod]);
            assert_ne!(f.code, Some(0), "over {netmod}: {}", f.stderr);
            expect_stderr(&f, "converse: PE 1 aborting: lx_abort says boom");
        }
    });
}

/// A task killed with SIGKILL ends the job within 5 s, naming the lost
/// process, although `srun` itself leaves the others running (no
/// `--kill-on-bad-exit`): over tcp its peers' sockets close, over shm and
/// (with the feature) MPI their progress threads find its pid gone
/// (`converse_net::shm` and `converse_net::mpi`, "Lost peers").
fn srun_sigkill() {
    if !slurm() {
        return;
    }
    let netmods: &[&str] = if cfg!(feature = "mpi") {
        &["shm", "tcp", "mpi"]
    } else {
        &["shm", "tcp"]
    };
    removing_left_names(|| {
        for &netmod in netmods {
            let me = me();
            let mut job = Running::start_program(
                "srun",
                &[EXPORT, "-n", "3", &me, "lx_idle", "++netmod", netmod],
                false,
            );
            job.wait_pids(3, Some("converse: 3 PEs"), LIMIT);
            let f = kill_and_wait(job, 1, Duration::from_secs(2));
            assert_ne!(f.code, Some(0), "over {netmod}: {}", f.stderr);
            expect_stderr(&f, "lost process 1 (PE 1)");
        }
    });
}

/// `scancel` of the job ends every task, and `srun` with a failure.
fn srun_scancel() {
    if !slurm() {
        return;
    }
    removing_left_names(srun_scancel_job);
}

fn srun_scancel_job() {
    let me = me();
    let name = format!("converse-scancel-{}", std::process::id());
    let job_name = format!("--job-name={name}");
    let mut job = Running::start_program(
        "srun",
        &[EXPORT, &job_name, "-n", "3", &me, "lx_idle"],
        false,
    );
    job.wait_pids(3, Some("converse: 3 PEs"), LIMIT);
    let cancelled = std::process::Command::new("scancel")
        .arg(format!("--name={name}"))
        .status()
        .expect("scancel runs");
    assert!(cancelled.success(), "scancel failed");
    let pids = job.pids.clone();
    let f = job.finish(Duration::from_secs(20));
    expect_gone(&pids, Duration::from_secs(5), &f);
    assert_ne!(f.code, Some(0), "{}", f.stderr);
}

/// Without a PMI connection (`--mpi=none`) a task is refused with one line
/// that says how to run it, and nothing runs as several one-process jobs.
fn srun_without_pmi_is_refused() {
    if !slurm() || cfg!(feature = "mpi") {
        // With the feature, MPI's own start-up takes the job.
        return;
    }
    let f = srun_job(&["--mpi=none", "-n", "2"], "core_sends", &[]);
    assert_ne!(f.code, Some(0), "{}", f.stderr);
    expect_stderr(
        &f,
        "started by Slurm's srun as one of 2 processes (SLURM_STEP_NUM_TASKS), which gives \
         neither a PMI-1 connection (PMI_FD) nor a PMIx server (PMIX_NAMESPACE): run \
         `srun --mpi=pmi2` or `srun --mpi=pmix`",
    );
    assert!(!f.stdout.contains("ok core_sends"), "{}", f.stdout);
}

/// A batch script as a user writes it (`#SBATCH` lines, then `srun
/// prog`), submitted with `sbatch --wait`: the job runs and its output
/// file has the answer.
fn srun_sbatch() {
    if !slurm() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("converse-sbatch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("job.out");
    let script = dir.join("job.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n#SBATCH --ntasks=2\n#SBATCH --cpus-per-task=2\n#SBATCH --output={}\nsrun {} core_reduce\n",
            out.display(),
            me()
        ),
    )
    .unwrap();
    let f = launch_with(
        "sbatch",
        &["--wait", "--quiet", &script.to_string_lossy()],
        LIMIT,
        |_| {},
    );
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        f.code,
        Some(0),
        "sbatch: {}\n--- job output\n{text}",
        f.stderr
    );
    for line in [
        "converse: 4 PEs in 2 processes of 2 PEs, netmod ",
        "ok core_reduce",
    ] {
        assert!(
            text.contains(line),
            "no `{line}` in the job's output:\n{text}"
        );
    }
}

/// The driver cases.
pub fn cases() -> Vec<Case> {
    vec![
        ("srun_core", srun_core),
        ("srun_pmix", srun_pmix),
        ("srun_exit", srun_exit),
        ("srun_abort", srun_abort),
        ("srun_sigkill", srun_sigkill),
        ("srun_scancel", srun_scancel),
        ("srun_without_pmi_is_refused", srun_without_pmi_is_refused),
        ("srun_sbatch", srun_sbatch),
    ]
}
