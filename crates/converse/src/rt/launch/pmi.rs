//! The bootstrap of a process started by an MPI launcher that speaks PMI-1
//! (`mpiexec` of MPICH's Hydra, Flux): the launcher says the process's
//! rank and the job's size (`PMI_RANK`, `PMI_SIZE`) and hands it a
//! connection (`PMI_FD`) to its key-value space, through which the
//! processes exchange what `convrun` would have told them — the job key,
//! the shared-memory segment id, the hosts and the business cards. The
//! protocol's lines are `launch_wire::pmi`'s.
//!
//! What a process asks the launcher does not grow with the job: the key,
//! the segment id and the launcher's map of ranks to its nodes
//! (`PMI_process_mapping`, one `get` for every rank's host), then a card
//! when it first talks to a peer (`card_of`). Only a launcher that gives
//! no map costs a `get` of every rank's host name.
//!
//! A rank is a node (a process of `++ppn` PEs); `+p` must be the ranks
//! times `++ppn` (`start` checks it). Launchers that hand out a rank but
//! neither a PMI-1 connection nor a PMIx server (`pmix.rs`: Open MPI's
//! `mpirun`, `srun --mpi=pmix`), such as a Slurm step with `--mpi=none`,
//! are recognised and refused with the reason (`refuse_foreign`, the last
//! bootstrap tried), so that a job never runs as N unrelated one-process
//! jobs.
//!
//! # Invariants
//!
//! - The job key is drawn by rank 0 and published in the job's key-value
//!   space, which only the job's processes reach (each through the
//!   connection its launcher gave it); it never appears on a command line
//!   or in a file name. Every link between processes proves it as under
//!   `convrun`.
//! - Every read from the launcher is bounded (`pmi::MAX_LINE`) and has a
//!   deadline (`++timeout`); a malformed or failed answer is an error
//!   naming the request.
//! - The process tells the launcher how it ends: `finalize` (its part is
//!   done; Hydra kills a job whose process exits without it), or `abort`
//!   when it is the culprit of an abnormal end (the launcher ends the
//!   others; their own network notices may be cut short by that).
//!
//! # Concurrency
//!
//! Start-up runs on the thread that starts the process; afterwards the
//! connection sits behind a mutex for the ending calls (any thread).
use std::io::{BufReader, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use launch_wire::JobKey;
use launch_wire::pmi::{self, Answer, MAX_LINE, Maxes, Request};

use super::convrun::{Got, read_line};
use super::{Bootstrap, BootstrapError, Placement};
use crate::proc::args::Config;

/// Keys of the job's key-value space (one space per job, so no other
/// job's keys meet these).
const KEY_KEY: &str = "converse-key";
const SHM_KEY: &str = "converse-shm";
fn host_key(rank: usize) -> String {
    format!("converse-host-{rank}")
}
fn card_key(rank: usize) -> String {
    format!("converse-card-{rank}")
}

/// How long a failing process waits before it asks the launcher to end
/// the job (see `Pmi::joined`).
const ABORT_PAUSE: Duration = Duration::from_millis(100);

/// True once a process took `PMI_FD`: a second job in the same process
/// (tests start several) cannot take the connection again.
static TAKEN: AtomicBool = AtomicBool::new(false);

/// The connection to the launcher.
struct Link {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    kvs: String,
    maxes: Maxes,
}

/// The PMI-1 bootstrap of one process.
pub(super) struct Pmi {
    link: Mutex<Link>,
    rank: usize,
    /// How long one answer of the launcher may take (`++timeout`).
    timeout: Duration,
    /// Start-up went through (`joined`) or the process said it ended.
    settled: AtomicBool,
}

impl Drop for Pmi {
    fn drop(&mut self) {
        if self.settled.load(Ordering::Acquire) {
            return;
        }
        // The job was refused after placing this process (a layout that
        // does not fit, a failed join): the program reports why and exits.
        // Closing the connection now would tell the launcher this process
        // died: Hydra kills the job at once, before the report is
        // forwarded (seen, 1 run in 13). So the connection stays open
        // until the process exits, and the exit is what Hydra sees.
        if let Ok(writer) = crate::sync::lock(&self.link).writer.try_clone() {
            std::mem::forget(writer);
        }
    }
}

/// Launchers that may give a rank with neither a PMI-1 connection nor a
/// PMIx server: (variable holding the job's size, launcher's name, what
/// to do instead). Slurm's `srun` gives a PMI-1 connection with its
/// `pmi2` plugin (`--mpi=pmi2`), which answers PMI-1 requests as well as
/// PMI-2 ones, and a PMIx server with `--mpi=pmix` (`pmix.rs`); Open MPI's
/// `mpirun` gives PMIx since 2.0.
const NO_PMI1: &[(&str, &str, &str)] = &[
    (
        "OMPI_COMM_WORLD_SIZE",
        "Open MPI's mpirun",
        "build the program with the mpi feature against Open MPI \
         (`MPICC=mpicc.openmpi cargo build --features converse/mpi`), or start the job \
         with MPICH's mpiexec or with convrun",
    ),
    (
        "SLURM_STEP_NUM_TASKS",
        "Slurm's srun",
        "run `srun --mpi=pmi2` or `srun --mpi=pmix` (or set MpiDefault in \
         slurm.conf), or start the job with convrun",
    ),
    (
        "FLUX_JOB_SIZE",
        "Flux",
        "start the job with MPICH's mpiexec, or with convrun",
    ),
];

/// Slurm's step ids above this are its special steps (the batch script's
/// own, `extern`, interactive): not a parallel step started by `srun`.
const SLURM_MAX_STEP_ID: u32 = 0xFFFF_FFF0;

/// True if the environment (`var`) is that of a parallel step of Slurm
/// (`srun`), not a batch script's or an allocation's own.
fn in_slurm_step(var: &impl Fn(&str) -> Option<String>) -> bool {
    var("SLURM_STEP_ID")
        .and_then(|s| s.parse::<u32>().ok())
        .is_some_and(|s| s < SLURM_MAX_STEP_ID)
}

/// The PEs per process the cluster's launcher asked for, when the command
/// line says neither `+p` nor `++ppn`: Slurm's `--cpus-per-task`
/// (`SLURM_CPUS_PER_TASK`) in a parallel step of `ranks` tasks, so that
/// `srun -n 4 -c 8 prog` runs 4 processes of 8 PEs, one per CPU Slurm gave
/// each.
pub(super) fn launcher_ppn(
    config: &Config,
    ranks: usize,
    var: impl Fn(&str) -> Option<String>,
) -> Option<usize> {
    if config.ppn.is_some() || config.pes.is_some() || !in_slurm_step(&var) {
        return None;
    }
    let tasks = var("SLURM_STEP_NUM_TASKS").and_then(|n| n.parse::<usize>().ok());
    if tasks != Some(ranks) {
        return None;
    }
    var("SLURM_CPUS_PER_TASK")
        .and_then(|n| n.parse::<usize>().ok())
        .filter(|&n| n >= 1 && n.saturating_mul(ranks) <= crate::proc::args::MAX_PES)
}

/// If a launcher that gives no PMI-1 connection started this process as
/// one of several, why the job cannot run (`var` reads the environment).
/// A batch script's environment is no step: Slurm's variables count only
/// with a parallel step's id (`SLURM_STEP_ID`).
fn foreign_launcher(var: impl Fn(&str) -> Option<String>) -> Option<String> {
    for (size_var, launcher, instead) in NO_PMI1 {
        if size_var.starts_with("SLURM_") && !in_slurm_step(&var) {
            continue;
        }
        if let Some(n) = var(size_var).and_then(|n| n.parse::<usize>().ok())
            && n > 1
        {
            return Some(format!(
                "started by {launcher} as one of {n} processes ({size_var}), which \
                     gives neither a PMI-1 connection (PMI_FD) nor a PMIx server \
                     (PMIX_NAMESPACE): {instead}"
            ));
        }
    }
    None
}

/// The last bootstrap: a process that no other placed but that a launcher
/// this build cannot talk to started as one of several is refused, with
/// the way out; running as one of several unrelated one-process jobs
/// would be wrong.
pub(super) fn refuse_foreign(_: &Config) -> Result<Option<Placement>, BootstrapError> {
    match foreign_launcher(|name| std::env::var(name).ok()) {
        Some(why) => Err(BootstrapError::Launcher(why)),
        None => Ok(None),
    }
}

/// The placement a PMI-1 launcher gave this process, if one started it.
pub(super) fn placement(config: &Config) -> Result<Option<Placement>, BootstrapError> {
    let var = |name: &str| std::env::var(name).ok();
    let (Some(fd), Some(rank), Some(size)) = (var("PMI_FD"), var("PMI_RANK"), var("PMI_SIZE"))
    else {
        return Ok(None);
    };
    let number = |name: &str, value: &str| {
        value.parse::<usize>().map_err(|_| {
            BootstrapError::Launcher(format!(
                "{name}={} is not a whole number",
                launch_wire::shown(value)
            ))
        })
    };
    let (rank, size) = (number("PMI_RANK", &rank)?, number("PMI_SIZE", &size)?);
    if size == 0 || rank >= size || size > crate::proc::args::MAX_PES {
        return Err(BootstrapError::Launcher(format!(
            "PMI_RANK={rank} of PMI_SIZE={size} is no place in a job"
        )));
    }
    if size == 1 {
        // A job of one process needs no launcher.
        return Ok(None);
    }
    let fd = fd.parse::<i32>().ok().filter(|&fd| fd > 2).ok_or_else(|| {
        BootstrapError::Launcher(format!(
            "PMI_FD={} is no descriptor",
            launch_wire::shown(&fd)
        ))
    })?;
    if TAKEN.swap(true, Ordering::AcqRel) {
        return Err(BootstrapError::Taken("the launcher's PMI connection"));
    }
    // SAFETY: `fcntl_getfd` only asks whether `fd` is open; the borrow
    // lasts for that call.
    let open = rustix::io::fcntl_getfd(unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }).is_ok();
    if !open {
        return Err(BootstrapError::Launcher(format!("PMI_FD={fd} is not open")));
    }
    // SAFETY: the launcher left `fd` open for this process to talk PMI on
    // (checked open just above); nothing else in the process uses it, and
    // `TAKEN` makes this the one owner.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let stream = UnixStream::from(owned);
    let timeout = Duration::from_secs(config.timeout.unwrap_or(super::DEFAULT_TIMEOUT_SECS));
    let deadline = Instant::now() + timeout;
    let reader = BufReader::new(
        stream
            .try_clone()
            .map_err(|e| BootstrapError::io(format!("PMI_FD={fd}"), e))?,
    );
    let mut link = Link {
        writer: stream,
        reader,
        kvs: String::new(),
        maxes: Maxes {
            kvsname: 0,
            key: 0,
            value: 0,
        },
    };
    match link.ask(&Request::Init, deadline)? {
        Answer::Init { rc: 0 } => {}
        other => return Err(refused("init", &other)),
    }
    link.maxes = match link.ask(&Request::GetMaxes, deadline)? {
        Answer::Maxes(m) => m,
        other => return Err(refused("get_maxes", &other)),
    };
    link.kvs = match link.ask(&Request::GetMyKvsname, deadline)? {
        Answer::MyKvsname(k) => k,
        other => return Err(refused("get_my_kvsname", &other)),
    };
    tracing::debug!(rank, size, kvs = ?link.kvs, "connected to the PMI-1 launcher");
    let host = super::host_name();
    // Every rank's host in one answer, if the launcher gives its map.
    let mapped = launcher_nodes(&mut link, size, deadline);
    if rank == 0 {
        let (key, shm_id) = super::draw_job_secrets()?;
        link.put(KEY_KEY, &key.to_hex(), deadline)?;
        link.put(SHM_KEY, &format!("{shm_id:016x}"), deadline)?;
    }
    if mapped.is_none() {
        link.put(&host_key(rank), &host, deadline)?;
    }
    link.barrier(deadline)?;
    let key = JobKey::from_hex(&link.get(KEY_KEY, deadline)?).ok_or_else(|| {
        BootstrapError::protocol(
            "the job key in the launcher's key-value space is not 64 hex digits",
        )
    })?;
    let shm_id = u64::from_str_radix(&link.get(SHM_KEY, deadline)?, 16).map_err(|_| {
        BootstrapError::protocol(
            "the segment id in the launcher's key-value space is not hexadecimal",
        )
    })?;
    // Hosts are numbered in order of first appearance: the launcher's
    // nodes, else (a launcher without the map) the names every rank put,
    // one `get` each.
    let ppn = launcher_ppn(config, size, |v| std::env::var(v).ok());
    let (hosts, host_count, host_pes) = match mapped {
        Some(nodes) => super::host_layout(&nodes, rank, config, ppn),
        None => {
            let names = (0..size)
                .map(|r| {
                    if r == rank {
                        Ok(host.clone())
                    } else {
                        link.get(&host_key(r), deadline)
                    }
                })
                .collect::<Result<Vec<String>, BootstrapError>>()?;
            super::host_layout(&names, rank, config, ppn)
        }
    };
    let netmod = super::launcher_netmod(config, host_count);
    Ok(Some(Placement {
        node: rank,
        nodes: size,
        key,
        shm_id,
        netmod,
        host,
        hosts: Some(hosts),
        timeout,
        host_pes: Some(host_pes),
        peer_timeout: crate::net::liveness::DEFAULT_PEER_TIMEOUT,
        ppn,
        boot: Arc::new(Pmi {
            link: Mutex::new(link),
            rank,
            timeout,
            settled: AtomicBool::new(false),
        }),
    }))
}

/// The launcher node of every rank, from its `PMI_process_mapping`
/// (Hydra's and Slurm's PMI-1 give it), or `None` if it gives none or one
/// that does not parse (then the ranks exchange host names).
fn launcher_nodes(link: &mut Link, size: usize, deadline: Instant) -> Option<Vec<usize>> {
    let value = link.get(pmi::PROCESS_MAPPING_KEY, deadline).ok()?;
    pmi::nodes_of_ranks(&value, size)
        .inspect_err(|e| tracing::debug!("{e}: the ranks exchange host names instead"))
        .ok()
}

/// The error for an answer that says no (or is not the one asked for).
fn refused(request: &str, answer: &Answer) -> BootstrapError {
    BootstrapError::PmiRefused {
        request: request.to_string(),
        answer: answer.clone(),
    }
}

impl Link {
    /// Sends `request` and reads the answer, by `deadline`.
    fn ask(&mut self, request: &Request, deadline: Instant) -> Result<Answer, BootstrapError> {
        let line = request.encode().map_err(BootstrapError::PmiLine)?;
        self.writer
            .write_all(line.as_bytes())
            .map_err(|e| BootstrapError::io("cannot write to the launcher's PMI connection", e))?;
        self.answer(request, deadline)
    }

    /// Reads the answer to `request`, by `deadline`.
    fn answer(&mut self, request: &Request, deadline: Instant) -> Result<Answer, BootstrapError> {
        let left = deadline.saturating_duration_since(Instant::now());
        self.reader
            .get_ref()
            .set_read_timeout(Some(left.max(Duration::from_millis(10))))
            .map_err(|e| BootstrapError::io("the launcher's PMI connection", e))?;
        let mut line = Vec::new();
        let what = || format!("{request:?}");
        match read_line(&mut self.reader, &mut line, MAX_LINE) {
            Ok(Got::Line) => {}
            Ok(Got::End) => {
                return Err(BootstrapError::Connection {
                    what: format!(
                        "the launcher closed its PMI connection (waiting for the answer to {})",
                        what()
                    ),
                    source: None,
                });
            }
            Ok(Got::Overlong) => {
                return Err(BootstrapError::protocol(format!(
                    "a PMI answer to {} is too long",
                    what()
                )));
            }
            Err(e) => {
                return Err(BootstrapError::io(
                    format!("no PMI answer to {} from the launcher in time", what()),
                    e,
                ));
            }
        }
        let text = std::str::from_utf8(&line)
            .map_err(|_| BootstrapError::protocol("a PMI answer is not UTF-8"))?;
        Answer::parse(text).map_err(BootstrapError::PmiLine)
    }

    fn put(&mut self, key: &str, value: &str, deadline: Instant) -> Result<(), BootstrapError> {
        if key.len() > self.maxes.key || value.len() > self.maxes.value {
            return Err(BootstrapError::PmiTooLarge {
                key: key.to_string(),
                len: value.len(),
                max_key: self.maxes.key,
                max_value: self.maxes.value,
            });
        }
        let kvs = self.kvs.clone();
        match self.ask(
            &Request::Put {
                kvs: &kvs,
                key,
                value,
            },
            deadline,
        )? {
            Answer::PutResult { rc: 0, .. } => Ok(()),
            other => Err(refused(&format!("put {key}"), &other)),
        }
    }

    fn get(&mut self, key: &str, deadline: Instant) -> Result<String, BootstrapError> {
        let kvs = self.kvs.clone();
        match self.ask(&Request::Get { kvs: &kvs, key }, deadline)? {
            Answer::GetResult {
                rc: 0,
                value: Some(v),
                ..
            } => Ok(v),
            other => Err(refused(&format!("get {key}"), &other)),
        }
    }

    fn barrier(&mut self, deadline: Instant) -> Result<(), BootstrapError> {
        match self.ask(&Request::BarrierIn, deadline)? {
            Answer::BarrierOut => Ok(()),
            other => Err(refused("barrier_in", &other)),
        }
    }
}

impl Bootstrap for Pmi {
    fn publish(
        &self,
        _place: &Placement,
        card: &str,
        deadline: Instant,
    ) -> Result<(), BootstrapError> {
        let mut link = crate::sync::lock(&self.link);
        link.put(&card_key(self.rank), card, deadline)?;
        link.barrier(deadline)
    }

    fn card_of(&self, peer: usize) -> Result<String, BootstrapError> {
        // One `get` of the launcher's key-value space, when a module first
        // needs the peer: no process reads every card.
        let deadline = Instant::now() + self.timeout;
        crate::sync::lock(&self.link).get(&card_key(peer), deadline)
    }

    fn joined(&self, _place: &Placement) -> Result<(), BootstrapError> {
        self.settled.store(true, Ordering::Release);
        // A writer of its own for the hook, which may run while another
        // thread holds the link (it may be the thread that failed).
        let writer = crate::sync::lock(&self.link)
            .writer
            .try_clone()
            .map_err(|e| BootstrapError::io("the launcher's PMI connection", e))?;
        let writer = Mutex::new(writer);
        crate::proc::exit::at_exit(move |ending| {
            if ending.culprit.lost() {
                return;
            }
            // The launcher tears the job down at once: first a moment for
            // it to forward this process's last lines, and for the peers
            // to take the `Abort` the process layer sent them and say why
            // they end.
            std::thread::sleep(ABORT_PAUSE);
            let code = crate::proc::exit::ABORT_EXIT_CODE;
            if let Ok(line) = (Request::Abort { code }).encode() {
                let _ = crate::sync::lock(&writer).write_all(line.as_bytes());
            }
        });
        Ok(())
    }

    fn ending(&self) {}

    fn tell_ended(&self) {
        self.settled.store(true, Ordering::Release);
        let mut link = crate::sync::lock(&self.link);
        let deadline = Instant::now() + Duration::from_secs(5);
        match link.ask(&Request::Finalize, deadline) {
            Ok(Answer::FinalizeAck) => {
                tracing::debug!(process = self.rank, "the launcher acknowledged finalize")
            }
            Ok(other) => crate::proc::log::report!(
                ERROR,
                &format!(
                    "converse: process {}: {}",
                    self.rank,
                    refused("finalize", &other)
                )
            ),
            Err(e) => {
                crate::proc::log::report!(ERROR, &format!("converse: process {}: {e}", self.rank))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    #[test]
    fn launchers_without_pmi1_are_named_when_they_start_several_processes() {
        let why = foreign_launcher(env(&[("OMPI_COMM_WORLD_SIZE", "4")])).unwrap();
        assert!(
            why.contains("Open MPI") && why.contains("one of 4"),
            "{why}"
        );
        let step = [("SLURM_STEP_ID", "0"), ("SLURM_STEP_NUM_TASKS", "8")];
        let why = foreign_launcher(env(&step)).unwrap();
        assert!(
            why.contains("Slurm's srun") && why.contains("srun --mpi=pmi2"),
            "{why}"
        );
        // One process is a plain one-process job.
        assert_eq!(
            foreign_launcher(env(&[("OMPI_COMM_WORLD_SIZE", "1")])),
            None
        );
        assert_eq!(foreign_launcher(env(&[])), None);
    }

    #[test]
    fn slurms_cpus_per_task_is_the_ppn_of_a_step_whose_command_line_says_none() {
        let step = [
            ("SLURM_STEP_ID", "3"),
            ("SLURM_STEP_NUM_TASKS", "4"),
            ("SLURM_CPUS_PER_TASK", "8"),
        ];
        let none = Config::default();
        assert_eq!(launcher_ppn(&none, 4, env(&step)), Some(8));
        // The command line decides when it says anything.
        let ppn = Config {
            ppn: Some(2),
            ..Config::default()
        };
        assert_eq!(launcher_ppn(&ppn, 4, env(&step)), None);
        let pes = Config {
            pes: Some(4),
            ..Config::default()
        };
        assert_eq!(launcher_ppn(&pes, 4, env(&step)), None);
        // Another step's tasks, a batch script, nonsense: no hint.
        assert_eq!(launcher_ppn(&none, 2, env(&step)), None);
        let batch = [
            ("SLURM_STEP_ID", "4294967291"),
            ("SLURM_STEP_NUM_TASKS", "4"),
            ("SLURM_CPUS_PER_TASK", "8"),
        ];
        assert_eq!(launcher_ppn(&none, 4, env(&batch)), None);
        for junk in ["0", "-1", "eight", "99999999999"] {
            let bad = [
                ("SLURM_STEP_ID", "3"),
                ("SLURM_STEP_NUM_TASKS", "4"),
                ("SLURM_CPUS_PER_TASK", junk),
            ];
            assert_eq!(launcher_ppn(&none, 4, env(&bad)), None, "{junk}");
        }
    }

    #[test]
    fn a_batch_scripts_environment_is_no_step() {
        // The batch script itself: no step id, or Slurm's batch step id.
        assert_eq!(
            foreign_launcher(env(&[("SLURM_STEP_NUM_TASKS", "8")])),
            None
        );
        let batch = [
            ("SLURM_STEP_ID", "4294967291"),
            ("SLURM_STEP_NUM_TASKS", "8"),
        ];
        assert_eq!(foreign_launcher(env(&batch)), None);
        let junk = [("SLURM_STEP_ID", "batch"), ("SLURM_STEP_NUM_TASKS", "8")];
        assert_eq!(foreign_launcher(env(&junk)), None);
    }
}
