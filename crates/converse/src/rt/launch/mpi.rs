//! The bootstrap of a process started by an MPI launcher, in a build with
//! the `mpi` feature: MPI itself says the rank and the size
//! (`MPI_Init_thread`), and the processes learn the rest through MPI's
//! collectives — whatever launcher started them (MPICH's `mpiexec`, Open
//! MPI's `mpirun`, Slurm's `srun`, Flux), as long as it is the MPI
//! library's. The default network module is then `mpi`.
//!
//! What each process sends and keeps at start-up does not grow with the
//! job but for a few words per rank:
//!
//! - the job key and the segment id: `MPI_Bcast` from rank 0;
//! - every rank's host: a 64-bit hash of its name, gathered with its pid
//!   and start time (`mpi::allgather_words`: three words per rank, no
//!   names; two names with one hash, a chance of 2⁻⁶⁴ a pair, would count
//!   as one host; the ranks on this host are watched by the MPI module,
//!   `mpi::LocalPeer`). Not
//!   `MPI_Comm_split_type`: splitting makes a communicator, which costs
//!   several collectives more, and every collective is slow when the
//!   processes outnumber the cores (measured: 64 ranks on 2 cores started
//!   in 10-11 s with the split, 5-6 s gathering host names);
//! - business cards: under `++netmod mpi` a rank's card is its rank
//!   (`mpi::card_of_rank`), so none is exchanged; a job that runs another
//!   module (`++netmod shm`, `tcp`, `auto`) gathers every card once
//!   (`MPI_Allgather`: MPI keeps no key-value space to ask later). Whether
//!   any process needs cards is agreed first (`mpi::any`), so every
//!   process makes the same collective calls.
//!
//! # Invariants
//!
//! - MPI is initialized only when a launcher's variables say this process
//!   is one of several ranks (a plain run never touches MPI), before the
//!   `pmi` bootstrap could take the launcher's connection.
//! - The job key is drawn by rank 0 and travels over MPI only.
//! - The process ends MPI as it ends: `MPI_Finalize` at its normal end,
//!   `MPI_Abort` when it is the culprit of an abnormal one (after a
//!   moment for its last lines and its peers' notices).
//!
//! # Concurrency
//!
//! Start-up runs on the thread that starts the process; the ending calls
//! come from any thread (`converse_net::mpi` serializes MPI calls).
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use launch_wire::JobKey;

use super::{Bootstrap, BootstrapError, Placement};
use crate::net::mpi;
use crate::proc::args::Config;

/// True once this bootstrap initialized MPI.
static INITIALIZED: AtomicBool = AtomicBool::new(false);

/// The other ranks on this process's host, as start-up gathered them: the
/// MPI module watches their processes (`converse_net::mpi`, "Lost
/// peers").
static LOCAL_PEERS: std::sync::OnceLock<Vec<mpi::LocalPeer>> = std::sync::OnceLock::new();

/// The other ranks on this process's host (empty before start-up).
pub(super) fn local_peers() -> &'static [mpi::LocalPeer] {
    LOCAL_PEERS.get().map_or(&[], Vec::as_slice)
}

/// How long a failing process waits before `MPI_Abort` ends the job.
const ABORT_PAUSE: Duration = Duration::from_millis(100);

/// Variables by which MPI launchers give the job's size.
const SIZE_VARS: &[&str] = &[
    "PMI_SIZE",
    "OMPI_COMM_WORLD_SIZE",
    "PMIX_SIZE",
    "SLURM_STEP_NUM_TASKS",
    "FLUX_JOB_SIZE",
];

/// True once MPI is initialized by this bootstrap.
pub(super) fn initialized() -> bool {
    INITIALIZED.load(Ordering::Acquire)
}

/// The MPI bootstrap of one process.
struct Mpi {
    /// Every rank's card, gathered at start-up if any process's card has
    /// more than an MPI part (else a card is its rank's `mpi:` part).
    cards: std::sync::OnceLock<Vec<String>>,
}

/// The placement MPI gave this process, if an MPI launcher started it as
/// one of several.
pub(super) fn placement(config: &Config) -> Result<Option<Placement>, BootstrapError> {
    let several = SIZE_VARS.iter().any(|v| {
        std::env::var(v)
            .ok()
            .and_then(|n| n.parse::<usize>().ok())
            .is_some_and(|n| n > 1)
    });
    if !several || INITIALIZED.load(Ordering::Acquire) {
        return Ok(None);
    }
    let (rank, size) = mpi::init().map_err(BootstrapError::Mpi)?;
    INITIALIZED.store(true, Ordering::Release);
    if size <= 1 {
        return Ok(None);
    }
    if size > crate::proc::args::MAX_PES {
        return Err(BootstrapError::Launcher(format!(
            "{size} MPI ranks: a job has at most {} processes",
            crate::proc::args::MAX_PES
        )));
    }
    let host = super::host_name();
    // Rank 0's job key (64 hex digits) and segment id (16).
    let mut secrets = [0u8; 80];
    if rank == 0 {
        let (key, shm_id) = super::draw_job_secrets()?;
        let text = format!("{}{shm_id:016x}", key.to_hex());
        secrets.copy_from_slice(text.as_bytes());
    }
    mpi::broadcast(&mut secrets, 0).map_err(BootstrapError::Mpi)?;
    let (key, shm_id) = secrets.split_at(64);
    let key = std::str::from_utf8(key)
        .ok()
        .and_then(JobKey::from_hex)
        .ok_or_else(|| BootstrapError::protocol("rank 0 sent no job key"))?;
    let shm_id = std::str::from_utf8(shm_id)
        .ok()
        .and_then(|s| u64::from_str_radix(s, 16).ok())
        .ok_or_else(|| BootstrapError::protocol("rank 0 sent no segment id"))?;
    // Each rank's host, pid and start time: three words a rank, in one
    // collective.
    let (pid, start) = mpi::own_process();
    let words = mpi::allgather_words(&[host_hash(&host), u64::from(pid), start])
        .map_err(BootstrapError::Mpi)?;
    let labels: Vec<u64> = words.chunks_exact(3).map(|w| w[0]).collect();
    let mine = labels[rank];
    let local = words
        .chunks_exact(3)
        .enumerate()
        .filter(|&(r, w)| r != rank && w[0] == mine)
        .map(|(r, w)| mpi::LocalPeer {
            rank: r,
            pid: w[1] as u32,
            start: w[2],
        })
        .collect();
    let _ = LOCAL_PEERS.set(local);
    let ppn = super::pmi::launcher_ppn(config, size, |v| std::env::var(v).ok());
    let (hosts, _, host_pes) = super::host_layout(&labels, rank, config, ppn);
    Ok(Some(Placement {
        node: rank,
        nodes: size,
        key,
        shm_id,
        netmod: config.netmod.clone().unwrap_or_else(|| "mpi".into()),
        host,
        hosts: Some(hosts),
        timeout: Duration::from_secs(config.timeout.unwrap_or(super::DEFAULT_TIMEOUT_SECS)),
        host_pes: Some(host_pes),
        peer_timeout: crate::net::liveness::DEFAULT_PEER_TIMEOUT,
        ppn,
        boot: Arc::new(Mpi {
            cards: std::sync::OnceLock::new(),
        }),
    }))
}

/// A hash of a host name that every process computes alike (FNV-1a, 64
/// bits): what the processes gather to tell hosts apart.
fn host_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl Bootstrap for Mpi {
    fn publish(
        &self,
        place: &Placement,
        card: &str,
        _deadline: Instant,
    ) -> Result<(), BootstrapError> {
        // A card of the MPI module alone is its rank: nothing to gather
        // unless some process runs another module. MPI has no key-value
        // space to ask later, so then every card is gathered here. The
        // agreement is the start barrier.
        let mpi_only = card == mpi::card_of_rank(place.node);
        if !mpi::any(!mpi_only).map_err(BootstrapError::Mpi)? {
            return Ok(());
        }
        let cards = mpi::allgather(card.as_bytes()).map_err(BootstrapError::Mpi)?;
        let cards = cards
            .into_iter()
            .enumerate()
            .map(|(r, c)| {
                String::from_utf8(c).map_err(|_| {
                    BootstrapError::protocol(format!("rank {r}'s business card is not UTF-8"))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let _ = self.cards.set(cards);
        Ok(())
    }

    fn card_of(&self, peer: usize) -> Result<String, BootstrapError> {
        match self.cards.get() {
            Some(cards) => cards.get(peer).cloned().ok_or_else(|| {
                BootstrapError::protocol(format!("no business card of rank {peer}"))
            }),
            // Every process runs the MPI module alone.
            None => Ok(mpi::card_of_rank(peer)),
        }
    }

    fn joined(&self, _place: &Placement) -> Result<(), BootstrapError> {
        crate::proc::exit::at_exit(|ending| {
            if ending.culprit.lost() {
                return;
            }
            std::thread::sleep(ABORT_PAUSE);
            mpi::abort(crate::proc::exit::ABORT_EXIT_CODE);
        });
        Ok(())
    }

    fn ending(&self) {}

    fn tell_ended(&self) {
        mpi::finalize();
    }
}

#[cfg(test)]
mod tests {
    use super::host_hash;

    #[test]
    fn host_names_hash_alike_everywhere_and_apart_from_each_other() {
        // FNV-1a's published value for "a"; names differing in one byte
        // hash apart.
        assert_eq!(host_hash("a"), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(host_hash("node01"), host_hash("node10"));
        assert_eq!(host_hash("node01"), host_hash("node01"));
    }
}
