//! How a process of a multi-process job joins it: it learns its place from
//! a *bootstrap*, starts the network modules its VCs need, and publishes
//! its business card through the bootstrap; the others' cards are looked
//! up when first needed.
//!
//! Two tables make the choices, so that a new way in is an addition:
//!
//! - Bootstraps (`Bootstrap`): how a process learns its place, publishes
//!   its card and looks up the others'.
//!   `convrun`'s (`convrun.rs`: its environment and control socket, the
//!   protocol of the `launch-wire` crate), PMI-1's (`pmi.rs`: a job
//!   started by MPICH's `mpiexec` or `srun --mpi=pmi2`, its cards
//!   exchanged through the launcher's key-value space), PMIx's (`pmix.rs`:
//!   Open MPI's `mpirun`, `srun --mpi=pmix`, through the launcher's own
//!   client library) and, with the `mpi` feature, MPI's (`mpi.rs`).
//! - Network modules, by name (`modules.rs`): what `++netmod` names, the
//!   module that carries each VC, their card prefixes.
//!
//! Joining, step by step:
//! 1. the modules the VCs need are started, each giving a card; the
//!    process's card is theirs joined with `,` (a peer takes the part of
//!    the module it reaches this process with);
//! 2. the bootstrap publishes it and returns once every process has
//!    published its own (the start barrier);
//! 3. nothing more: every module connects a VC when this process first
//!    sends to the peer, asking for the peer's card
//!    (`Bootstrap::card_of`, through the process layer), and takes the
//!    peers' connections (or rings) whenever they come;
//! 4. the bootstrap is told start-up is over: from then on it watches for
//!    the job ending elsewhere, and is told how this process ends
//!    (`ending`, `tell_ended`).
//!
//! Every step has a deadline (`++timeout`); a failure names the process and
//! what it waited for.
//!
//! # Concurrency
//!
//! `placement` and `join` run on the thread that starts the process,
//! before any PE exists. The bootstrap that joined is then reachable from
//! any thread (`JOINED`) for the ending calls.
mod convrun;
mod error;
mod modules;
#[cfg(feature = "mpi")]
mod mpi;
mod pmi;
mod pmix;

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::net::netmod::NetModule;
use crate::proc::args::Config;
use crate::proc::topology::Topology;
use crate::rt::network::{Links, Network, NetworkError};
use modules::{Init, Joining, MODULES};

pub use error::{BootstrapError, IoCause, JoinError};

/// Default start-up deadline (`++timeout`), seconds.
pub const DEFAULT_TIMEOUT_SECS: u64 = launch_wire::DEFAULT_TIMEOUT_SECS;

/// How a process learns its place in the job and exchanges business cards
/// with the others. [`BOOTSTRAPS`] lists them.
pub(crate) trait Bootstrap: Send + Sync {
    /// Publishes `card` (this process's) and returns once every process
    /// of the job has published its own (the start barrier), by
    /// `deadline`.
    fn publish(
        &self,
        place: &Placement,
        card: &str,
        deadline: Instant,
    ) -> Result<(), BootstrapError>;
    /// Process `peer`'s card, from any thread once [`Bootstrap::publish`]
    /// returned: what a network module connects by on its first send to
    /// `peer` (cards are learnt on demand, not all at start-up).
    fn card_of(&self, peer: usize) -> Result<String, BootstrapError>;
    /// Start-up is over (every VC up): from now on the bootstrap watches
    /// for the job ending elsewhere, which ends this process.
    fn joined(&self, place: &Placement) -> Result<(), BootstrapError>;
    /// The process is ending on purpose from now on (an end of the
    /// bootstrap's connections is no fault).
    fn ending(&self);
    /// This process's part of the job is done; it exits next, on purpose.
    fn tell_ended(&self);
}

/// A bootstrap's look at the process's environment: its placement if it
/// started the process, `None` if not, an error if it did but the
/// environment is malformed.
type Detect = fn(&Config) -> Result<Option<Placement>, BootstrapError>;

/// The bootstraps of this build, tried in turn: the first that finds its
/// environment places the process.
/// With the `mpi` feature, MPI's comes before PMI-1's: the MPI library
/// talks to the launcher itself.
const BOOTSTRAPS: &[Detect] = &[
    |_| convrun::placement(|name| std::env::var(name).ok()),
    #[cfg(feature = "mpi")]
    mpi::placement,
    pmi::placement,
    pmix::placement,
    pmi::refuse_foreign,
];

/// The bootstrap of the job this process joined.
static JOINED: OnceLock<Arc<dyn Bootstrap>> = OnceLock::new();

/// The job as this process's bootstrap described it.
pub(crate) struct Placement {
    /// This process's number.
    pub node: usize,
    /// The job's process count.
    pub nodes: usize,
    /// The job key: every connection of the job proves it holds it
    /// (`launch_wire::auth`).
    pub key: launch_wire::JobKey,
    /// The id naming the job's shared-memory segments.
    pub shm_id: u64,
    /// The network module's name, as `++netmod` spells it.
    pub netmod: String,
    /// The host name peers reach this process by.
    pub host: String,
    /// The host of every process, by number, if the bootstrap said (else
    /// all on one).
    pub hosts: Option<Vec<usize>>,
    /// How long start-up may take.
    pub timeout: Duration,
    /// How long a peer, or the launcher, may stay silent (`++peer-timeout`;
    /// set from the command line once a bootstrap placed the process).
    pub peer_timeout: Duration,
    /// PEs of the job on this host, if the bootstrap said.
    pub host_pes: Option<usize>,
    /// PEs per process the launcher asked for (Slurm's `--cpus-per-task`),
    /// if the command line said neither `+p` nor `++ppn`.
    pub ppn: Option<usize>,
    /// Who placed the process, for the card exchange and after.
    boot: Arc<dyn Bootstrap>,
}

/// The placement a bootstrap gave this process, if one started it.
pub(crate) fn placement(config: &Config) -> Result<Option<Placement>, BootstrapError> {
    for detect in BOOTSTRAPS {
        if let Some(mut place) = detect(config)? {
            place.peer_timeout = config
                .peer_timeout
                .unwrap_or(crate::net::liveness::DEFAULT_PEER_TIMEOUT);
            tracing::debug!(
                process = place.node,
                processes = place.nodes,
                netmod = %place.netmod,
                host = %place.host,
                timeout_s = place.timeout.as_secs(),
                "placed by a launcher"
            );
            return Ok(Some(place));
        }
    }
    tracing::debug!("no launcher placed this process: a job of one process");
    Ok(None)
}

/// What the first process of a job started by an MPI or PMI launcher
/// draws for all: the job key and the segment id (drawn apart: segment
/// names are listable by anyone).
pub(super) fn draw_job_secrets() -> Result<(launch_wire::JobKey, u64), BootstrapError> {
    let key = launch_wire::JobKey::generate().map_err(|e| BootstrapError::Random {
        what: "the job key",
        source: e.into(),
    })?;
    let nonce = launch_wire::Nonce::generate().map_err(|e| BootstrapError::Random {
        what: "the segment id",
        source: e.into(),
    })?;
    let shm_id = u64::from_le_bytes(nonce.as_bytes()[..8].try_into().expect("8 of 16 bytes"));
    Ok((key, shm_id))
}

/// The network module of a launcher's job: what `++netmod` says, else
/// shm when every process is on one host, else `auto`.
pub(super) fn launcher_netmod(config: &Config, host_count: usize) -> String {
    match &config.netmod {
        Some(m) => m.clone(),
        None if host_count == 1 => "shm".into(),
        None => "auto".into(),
    }
}

/// This host's name, as the processes of a launcher's job tell hosts
/// apart.
pub(super) fn host_name() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// The hosts of a launcher's job from a label of each process's host (its
/// name, or the launcher's node number), in order: every process's host
/// numbered by first appearance, how many hosts, and the PEs on the host
/// of process `rank` (`++ppn` of them per process, from `config`, else
/// the launcher's `hint`). O(P):
/// labels are looked up by hash, not compared with every host before.
pub(super) fn host_layout<L: Eq + std::hash::Hash>(
    labels: &[L],
    rank: usize,
    config: &Config,
    hint: Option<usize>,
) -> (Vec<usize>, usize, usize) {
    let mut seen: std::collections::HashMap<&L, usize> = std::collections::HashMap::new();
    let hosts: Vec<usize> = labels
        .iter()
        .map(|l| {
            let next = seen.len();
            *seen.entry(l).or_insert(next)
        })
        .collect();
    let ppn = config
        .ppn
        .or(hint)
        .or(config.pes.map(|p| p / labels.len().max(1)))
        .unwrap_or(1)
        .max(1);
    let on_my_host = hosts.iter().filter(|&&h| h == hosts[rank]).count();
    (hosts, seen.len(), on_my_host * ppn)
}

/// Every network module name `++netmod` takes in this build (for the
/// launcher, which checks its command line with it).
pub fn netmod_names() -> Vec<&'static str> {
    modules::names()
}

/// Removes the shared-memory segments a job with segment id `shm_id` and
/// `nodes` processes may have left (a process killed before it could
/// remove its own segment's name), and whatever else a module may leave.
/// For the launcher, after the job.
pub fn remove_segments(shm_id: u64, nodes: usize) {
    modules::remove_leftovers(shm_id, nodes);
}

/// Joins the job: network modules, and this process's card published
/// through the bootstrap (the start barrier). Returns the network, whose
/// VCs connect on first use; `branch` is the branching factor of its
/// spanning tree of processes.
pub(crate) fn join(
    place: &Placement,
    topo: Topology,
    lmt: Option<&str>,
    branch: usize,
) -> Result<Network, JoinError> {
    // `++lmt` was checked against the same names (`args::LMT_MODES`).
    let lmt = match lmt {
        Some(name) => {
            crate::net::lmt::Mode::parse(name).ok_or_else(|| NetworkError::UnknownLmt {
                name: name.to_string(),
            })?
        }
        None => Default::default(),
    };
    // A deadline beyond what `Instant` holds is no deadline.
    let deadline = Instant::now()
        .checked_add(place.timeout)
        .unwrap_or_else(|| Instant::now() + Duration::from_secs(100 * 365 * 86_400));
    let me = place.node;
    let routes = modules::routes(&place.netmod, me, place.nodes, place.hosts.as_deref())?;
    // A module only if some VC needs it; a process alone in its job still
    // runs one (its card is part of the protocol).
    let mut needed = vec![false; MODULES.len()];
    for (peer, &kind) in routes.via.iter().enumerate() {
        needed[kind] |= peer != me;
    }
    if !needed.contains(&true) {
        needed[routes.via[me]] = true;
    }
    let init = Init {
        me,
        nodes: place.nodes,
        key: &place.key,
        shm_id: place.shm_id,
        host: &place.host,
        max_payload: crate::net::frame::DEFAULT_MAX_PAYLOAD,
        lmt,
        timeout: place.timeout,
        peer_timeout: place.peer_timeout,
    };
    // (index in MODULES, the module), in MODULES order.
    let mut started: Vec<(usize, Box<dyn Joining>)> = Vec::new();
    for (kind, _) in needed.iter().enumerate().filter(|(_, n)| **n) {
        match (MODULES[kind].init)(&init) {
            Ok(m) => started.push((kind, m)),
            // What the modules started so far goes with them (an shm
            // segment's name is removed when its module is dropped).
            Err(e) => {
                return Err(NetworkError::ModuleInit {
                    module: MODULES[kind].name,
                    source: e,
                }
                .into());
            }
        }
    }
    let part_of = |kind: usize| {
        started
            .iter()
            .position(|(k, _)| *k == kind)
            .expect("started for its peers")
    };
    let card = started
        .iter()
        .map(|(_, m)| m.module().business_card())
        .collect::<Vec<_>>()
        .join(",");
    tracing::debug!(
        process = me,
        modules = ?started.iter().map(|(k, _)| MODULES[*k].name).collect::<Vec<_>>(),
        card = %card,
        "network modules started"
    );
    let parts: Vec<Arc<dyn NetModule>> = started.iter().map(|(_, m)| m.module()).collect();
    // This process's own entry is unused; its module may not run (one that
    // reaches every peer over tcp, under `auto`).
    let route = (0..place.nodes)
        .map(|p| if p == me { 0 } else { part_of(routes.via[p]) })
        .collect();
    let boot = place.boot.clone();
    let cards: crate::rt::network::CardSource = Box::new(move |peer| boot.card_of(peer));
    let network = Network::new(
        me,
        topo,
        Links::new(parts, route),
        routes.label,
        branch,
        cards,
        |u| {
            for (_, m) in &started {
                m.set_upcalls(u.clone());
            }
        },
    );

    // The start barrier; from here on a module connects a VC when this
    // process first sends to its peer, asking the bootstrap for the card.
    place.boot.publish(place, &card, deadline)?;
    tracing::debug!(process = me, "business card published");
    place.boot.joined(place)?;
    let _ = JOINED.set(place.boot.clone());
    tracing::info!(
        process = me,
        processes = place.nodes,
        netmod = network.module_name(),
        "joined the job"
    );
    Ok(network)
}

/// The process is ending on purpose from now on.
pub(crate) fn ending() {
    if let Some(boot) = JOINED.get() {
        tracing::debug!("the process is ending on purpose");
        boot.ending();
    }
}

/// This process's part of the job is done; it exits next, on purpose.
pub(crate) fn tell_ended() {
    if let Some(boot) = JOINED.get() {
        tracing::debug!("this process's part of the job is done: telling the launcher");
        boot.tell_ended();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_numbered_by_first_appearance_and_count_their_pes() {
        let names = ["b", "a", "b", "c", "a"];
        let config = Config {
            ppn: Some(2),
            ..Config::default()
        };
        assert_eq!(
            host_layout(&names, 0, &config, None),
            (vec![0, 1, 0, 2, 1], 3, 4)
        );
        assert_eq!(host_layout(&names, 3, &config, None).2, 2);
        // ++ppn over the launcher's hint, the hint over one PE each.
        assert_eq!(host_layout(&names, 3, &config, Some(8)).2, 2);
        assert_eq!(host_layout(&names, 3, &Config::default(), Some(8)).2, 8);
        // Without ++ppn: +p over the processes, else one PE each.
        let config = Config {
            pes: Some(15),
            ..Config::default()
        };
        assert_eq!(host_layout(&names, 1, &config, None).2, 6);
        assert_eq!(host_layout(&names, 1, &Config::default(), None).2, 2);
    }
}
