//! Jobs started by MPICH's `mpiexec` instead of `convrun`: the same test
//! programs, bootstrapped through the launcher's PMI-1 key-value space
//! (`converse::rt::launch::pmi`), over shm and tcp. Each case says
//! `skipped` when `mpiexec` is not installed (`.ci/run` installs MPICH
//! and sets `CONVERSE_TEST_MPI`, which makes a missing one a failure).
use std::time::Duration;

use crate::Case;
use crate::common::{Finished, launch_with, me};
use crate::launcher::{Running, expect_gone, expect_stderr, kill_and_wait};

/// The network modules the cases run over: shm and tcp, and with the `mpi`
/// feature (MPI start-up instead of PMI-1) the MPI module too.
const NETMODS: &[&str] = if cfg!(feature = "mpi") {
    &["shm", "tcp", "mpi"]
} else {
    &["shm", "tcp"]
};

/// A job's hang guard.
const LIMIT: Duration = Duration::from_secs(60);

/// The launcher, if this machine has one.
fn mpiexec() -> Option<&'static str> {
    let found = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join("mpiexec").is_file()));
    if found {
        Some("mpiexec")
    } else if std::env::var_os("CONVERSE_TEST_MPI").is_some() {
        panic!("CONVERSE_TEST_MPI is set but there is no mpiexec on PATH");
    } else {
        println!("    skipped: no mpiexec on PATH (install mpich)");
        None
    }
}

/// `mpiexec -n RANKS this-binary NAME EXTRA... FLAGS...`.
fn mpi_job(launcher: &str, ranks: usize, name: &str, extra: &[&str], flags: &[&str]) -> Finished {
    let me = me();
    let n = ranks.to_string();
    let mut args = vec!["-n", &n, &me, name];
    args.extend_from_slice(extra);
    args.extend_from_slice(flags);
    launch_with(launcher, &args, LIMIT, |_| {})
}

/// The core runtime's programs give the same answers under `mpiexec` as
/// under `convrun`: 3 ranks of 1 PE and 2 ranks of 2 PEs, over shm and
/// tcp, `+p` given or left to the launcher.
fn mpiexec_core() {
    let Some(launcher) = mpiexec() else { return };
    let mut failures = Vec::new();
    for &netmod in NETMODS {
        for (ranks, ppn, give_p) in [(3usize, 1usize, false), (2, 2, true)] {
            let pes = ranks * ppn;
            let (p, n) = (pes.to_string(), ppn.to_string());
            let mut flags = vec!["++ppn", &n, "++netmod", netmod];
            if give_p {
                flags.extend_from_slice(&["+p", &p]);
            }
            for (name, extra) in [
                ("core_topology", vec![p.as_str(), n.as_str()]),
                ("core_sends", vec![]),
                ("core_large", vec![]),
                ("core_huge", vec![]),
                ("core_node_sends", vec![]),
                ("core_bcast", vec![]),
                ("core_reduce", vec![]),
                ("core_groups", vec![]),
                ("core_qd", vec![]),
                ("core_threads", vec![]),
                ("core_rdma", vec![]),
                ("core_persistent", vec![]),
                ("core_bcast", vec!["src"]),
                ("core_groups", vec!["src"]),
            ] {
                let f = mpi_job(launcher, ranks, name, &extra, &flags);
                let how = format!("under mpiexec -n {ranks} {flags:?}");
                failures.extend(f.core_run_fault(name, ranks, ppn, netmod, &how));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every rank's host comes from the launcher's map of ranks to its
/// nodes (`PMI_process_mapping`, one `get`), not from a `get` per rank:
/// Hydra started on two pretend hosts (`-launcher fork -hosts a,b`: both
/// on this machine, ranks dealt round-robin) places ranks 0 and 2 on one,
/// 1 and 3 on the other, which the job's host queries and its choice of
/// modules (shm within a pretend host, tcp between) follow. Under the
/// `mpi` feature the hosts come from the host names the ranks gather
/// instead: one host, this machine.
fn mpiexec_hosts_from_the_launchers_map() {
    let Some(launcher) = mpiexec() else { return };
    let me = me();
    let f = launch_with(
        launcher,
        &[
            "-launcher",
            "fork",
            "-hosts",
            "hostA,hostB",
            "-n",
            "4",
            &me,
            "core_hosts",
            "++ppn",
            "2",
        ],
        LIMIT,
        |_| {},
    );
    let (hosts, netmod) = if cfg!(feature = "mpi") {
        ("hosts 1: 0 0 0 0 0 0 0 0", "mpi")
    } else {
        ("hosts 2: 0 0 1 1 0 0 1 1", "shm+tcp")
    };
    f.expect_code(0)
        .expect_line(hosts)
        .expect_line(&format!(
            "converse: 8 PEs in 4 processes of 2 PEs, netmod {netmod}"
        ))
        .expect_line("ok core_hosts");
}

/// `exit(7)` on the last PE ends every rank, and `mpiexec` with 7.
fn mpiexec_exit() {
    let Some(launcher) = mpiexec() else { return };
    for netmod in ["shm", "tcp"] {
        let f = mpi_job(
            launcher,
            3,
            "core_exit",
            &["handler"],
            &["++netmod", netmod],
        );
        f.expect_code(7).expect_line("exiting from PE 2 with 7");
    }
}

/// `+p` that is not the ranks times `++ppn` is refused, naming both.
fn mpiexec_layout_mismatch() {
    let Some(launcher) = mpiexec() else { return };
    let f = mpi_job(launcher, 2, "core_sends", &[], &["+p", "3"]);
    assert_ne!(f.code, Some(0), "{}", f.stderr);
    expect_stderr(
        &f,
        "the launcher started 2 processes but +p 3 is not a multiple of them",
    );
    let f = mpi_job(launcher, 2, "core_sends", &[], &["+p", "6", "++ppn", "2"]);
    assert_ne!(f.code, Some(0), "{}", f.stderr);
    expect_stderr(
        &f,
        "the launcher started 2 processes but +p 6 ++ppn 2 makes 3",
    );
}

/// An abort and a panic on a PE of rank 1 end every rank with the PE and
/// the cause printed; the job's code is not 0.
///
/// Hydra may end the other ranks with SIGKILL before they end themselves,
/// leaving their segments' names, as in [`mpiexec_sigkill`]: the test
/// removes the names its jobs left.
fn mpiexec_faults() {
    let Some(launcher) = mpiexec() else { return };
    let before = shm_names();
    for &netmod in NETMODS {
        for (program, says) in [
            ("lx_abort", "converse: PE 1 aborting: lx_abort says boom"),
            (
                "lx_panic",
                "converse: PE 1 (process 1) panicked: lx_panic says boom at ",
            ),
        ] {
            let me = me();
            let mut job = Running::start_program(
                launcher,
                &["-n", "3", &me, program, "++netmod", netmod],
                false,
            );
            job.wait_pids(3, None, LIMIT);
            let pids = job.pids.clone();
            let f = job.finish(LIMIT);
            expect_gone(&pids, Duration::from_secs(2), &f);
            assert_ne!(f.code, Some(0), "{program} over {netmod}: {}", f.stderr);
            expect_stderr(&f, says);
        }
    }
    for name in shm_names().difference(&before) {
        let _ = std::fs::remove_file(format!("/dev/shm/{name}"));
    }
}

/// Runs `case`, then removes the shared-memory names that jobs it started
/// left: a process killed by a signal (`kill -9`, `scancel`) removes none of
/// its own, and `srun` or `mpirun` knows nothing of them (`convrun` removes a killed
/// job's names; private segments without names, issue 50, will leave
/// nothing).
pub(crate) fn removing_left_names(case: impl FnOnce()) {
    let before = shm_names();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(case));
    for name in shm_names().difference(&before) {
        let _ = std::fs::remove_file(format!("/dev/shm/{name}"));
    }
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// The job's shared-memory names in `/dev/shm`.
pub(crate) fn shm_names() -> std::collections::BTreeSet<String> {
    std::fs::read_dir("/dev/shm")
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("converse-"))
                .collect()
        })
        .unwrap_or_default()
}

/// A rank killed with SIGKILL ends the job within 5 s.
///
/// A segment's name stays while its process lives (a peer may first send
/// to it at any time), and Hydra ends the other ranks with SIGKILL too, so
/// no rank removes its name and Hydra knows nothing of them (`convrun`
/// removes a killed job's names; private segments without names, issue 50,
/// will leave nothing). The test removes the names its job left.
fn mpiexec_sigkill() {
    let Some(launcher) = mpiexec() else { return };
    let before = shm_names();
    for &netmod in NETMODS {
        let me = me();
        let mut job = Running::start_program(
            launcher,
            &["-n", "3", &me, "lx_idle", "++netmod", netmod],
            false,
        );
        job.wait_pids(3, Some("converse: 3 PEs"), LIMIT);
        let f = kill_and_wait(job, 1, Duration::from_secs(2));
        assert_ne!(f.code, Some(0), "over {netmod}: {}", f.stderr);
    }
    for name in shm_names().difference(&before) {
        let _ = std::fs::remove_file(format!("/dev/shm/{name}"));
    }
}

/// `convrun ++mpiexec` starts the job through `mpiexec`, saying the
/// command it ran.
fn mpiexec_convrun() {
    if mpiexec().is_none() {
        return;
    }
    let me = me();
    let f = crate::common::convrun(
        &["+p", "4", "++ppn", "2", "++mpiexec", &me, "core_sends"],
        LIMIT,
    );
    // The default module on one host: shm, or mpi where the build has it.
    let netmod = if cfg!(feature = "mpi") { "mpi" } else { "shm" };
    f.expect_code(0)
        .expect_line(&format!(
            "converse: 4 PEs in 2 processes of 2 PEs, netmod {netmod}"
        ))
        .expect_line("ok core_sends");
    expect_stderr(
        &f,
        &format!("convrun: running mpiexec -n 2 {me} core_sends +p 4 ++ppn 2"),
    );
}

/// Where Debian puts PMIx's client library.
const PMIX_LIBRARY: &str = "/usr/lib/x86_64-linux-gnu/libpmix.so.2";

/// A process that looks started by a PMI launcher but whose environment or
/// launcher is wrong fails at once with one line naming the cause (no
/// `mpiexec` needed: the environment is made here).
fn pmi_bad_launcher() {
    use std::os::fd::AsRawFd;
    if cfg!(feature = "mpi") {
        // MPI's own start-up takes these environments there.
        println!("    skipped: the PMI-1 bootstrap (built without the mpi feature)");
        return;
    }
    let me = me();
    let run = |vars: &[(&str, String)], extra: &[&str], what: &str, says: &str| {
        let f = launch_with(&me, &[&["core_sends"][..], extra].concat(), LIMIT, |cmd| {
            cmd.env("CONVERSE_TEST_CHILD", "1");
            for (k, v) in vars {
                cmd.env(k, v);
            }
        });
        assert_ne!(f.code, Some(0), "{what}: {}", f.stderr);
        assert!(
            f.elapsed < Duration::from_secs(10),
            "{what}: took {:?}",
            f.elapsed
        );
        expect_stderr(&f, says);
    };
    let env = |fd: String, rank: &str| {
        vec![
            ("PMI_FD", fd),
            ("PMI_RANK", rank.to_string()),
            ("PMI_SIZE", "2".to_string()),
        ]
    };
    run(
        &env("abc".into(), "0"),
        &[],
        "a descriptor that is no number",
        "PMI_FD=abc is no descriptor",
    );
    run(
        &env("977".into(), "0"),
        &[],
        "a closed descriptor",
        "PMI_FD=977 is not open",
    );
    run(
        &env("977".into(), "3"),
        &[],
        "a rank outside the job",
        "PMI_RANK=3 of PMI_SIZE=2 is no place in a job",
    );
    run(
        &[("OMPI_COMM_WORLD_SIZE", "4".to_string())],
        &[],
        "Open MPI without the mpi feature and without PMIx",
        "started by Open MPI's mpirun as one of 4 processes (OMPI_COMM_WORLD_SIZE), which \
         gives neither a PMI-1 connection (PMI_FD) nor a PMIx server (PMIX_NAMESPACE)",
    );
    // A PMIx launcher's environment: without the library, then with the
    // library but no server to reach.
    let pmix = |library: &str| {
        vec![
            ("PMIX_NAMESPACE", "converse-test".to_string()),
            ("PMIX_RANK", "0".to_string()),
            ("OMPI_COMM_WORLD_SIZE", "4".to_string()),
            ("CONVERSE_PMIX_LIBRARY", library.to_string()),
        ]
    };
    run(
        &pmix("/nonexistent/libpmix.so.2"),
        &[],
        "a PMIx launcher without the PMIx library",
        "started by a PMIx launcher (PMIX_NAMESPACE=converse-test), but cannot load the \
         PMIx library /nonexistent/libpmix.so.2",
    );
    if std::path::Path::new(PMIX_LIBRARY).exists() {
        run(
            &pmix(PMIX_LIBRARY),
            &[],
            "a PMIx launcher's environment with no server",
            "PMIx init failed: ",
        );
    } else {
        println!("    part skipped: no {PMIX_LIBRARY} (Debian's libpmix2)");
    }
    // A launcher that never answers, then one that answers garbage: the
    // child inherits one end of a socket pair.
    for (answer, says) in [
        (&b""[..], "no PMI answer to Init from the launcher in time"),
        (
            &b"cmd=launch_missiles\n"[..],
            "an unknown PMI answer `cmd=launch_missiles`",
        ),
    ] {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        std::io::Write::write_all(&mut &ours, answer).unwrap();
        let fd = theirs.as_raw_fd();
        // SAFETY: fcntl(2) on a descriptor this process owns: clears its
        // close-on-exec flag so that the child inherits it.
        unsafe {
            libc::fcntl(fd, libc::F_SETFD, 0);
        }
        run(
            &env(fd.to_string(), "0"),
            &["++timeout", "1"],
            "a launcher",
            says,
        );
        drop((ours, theirs));
    }
}

/// The driver cases.
pub fn cases() -> Vec<Case> {
    vec![
        ("mpiexec_core", mpiexec_core),
        ("mpiexec_exit", mpiexec_exit),
        (
            "mpiexec_hosts_from_the_launchers_map",
            mpiexec_hosts_from_the_launchers_map,
        ),
        ("mpiexec_layout_mismatch", mpiexec_layout_mismatch),
        ("mpiexec_faults", mpiexec_faults),
        ("mpiexec_sigkill", mpiexec_sigkill),
        ("mpiexec_convrun", mpiexec_convrun),
        ("pmi_bad_launcher", pmi_bad_launcher),
    ]
}
