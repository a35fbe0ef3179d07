//! The runtime floor: the PE (its state and the thread-local that reaches
//! it), the job every PE shares, pseudo-globals, node locks, the process
//! layer of a multi-process job (`network`), the launcher's side of
//! start-up (`launch`) and start-up itself.
//!
//! A module here may use `proc`, `msg`, `net`, `sync`, the leaves of the
//! scheduler and of threads (`csd::cqs`, `csd::idle`, `cth::stack`…) and
//! the subsystems' state types (`cmi::state`…); never `cmi`, `csd`, `cth`,
//! `ccd` or `ccs` themselves (the layering test in `tests/layering.rs`
//! checks it). What must run the scheduler from below it does so through
//! `reentry`.
pub mod globals;
pub mod handle;
pub(crate) mod handlers;
pub mod hosts;
pub mod isomalloc;
pub(crate) mod job;
#[doc(hidden)]
pub mod launch;
pub mod lock;
pub(crate) mod network;
pub(crate) mod node_barrier;
pub(crate) mod pe;
pub(crate) mod persistent;
pub(crate) mod process_tree;
pub mod random;
pub(crate) mod reentry;
#[cfg(test)]
mod scale_model;
pub(crate) mod watchdog;

/// The calling PE's number, `0..num_pes()` (`CmiMyPe`).
///
/// # Panics
/// If the calling thread is no PE (true of every query here).
#[doc(alias = "CmiMyPe")]
// Never inlined: after a migratable thread moves (`cth::migrate`), a
// caller must read the PE of the OS thread it runs on now.
#[inline(never)]
pub fn my_pe() -> usize {
    pe::number()
}

/// Total number of PEs in the job (`CmiNumPes`, `CmiNumPe`).
#[doc(alias = "CmiNumPes")]
#[doc(alias = "CmiNumPe")]
pub fn num_pes() -> usize {
    pe::with(|pe| pe.job.topo.num_pes())
}

/// The node the calling PE belongs to (`CmiMyNode`).
#[doc(alias = "CmiMyNode")]
// Never inlined: after a migratable thread moves (`cth::migrate`), a
// caller must read the PE of the OS thread it runs on now.
#[inline(never)]
pub fn my_node() -> usize {
    pe::with(|pe| pe.node)
}

/// Number of nodes in the job (`CmiNumNodes`).
#[doc(alias = "CmiNumNodes")]
pub fn num_nodes() -> usize {
    pe::with(|pe| pe.job.topo.num_nodes())
}

/// The calling PE's rank inside its node (`CmiMyRank`).
#[doc(alias = "CmiMyRank")]
// Never inlined: after a migratable thread moves (`cth::migrate`), a
// caller must read the PE of the OS thread it runs on now.
#[inline(never)]
pub fn my_rank() -> usize {
    pe::with(|pe| pe.rank)
}

/// Number of PEs on the calling PE's node (`CmiMyNodeSize`).
#[doc(alias = "CmiMyNodeSize")]
pub fn my_node_size() -> usize {
    pe::with(|pe| pe.job.topo.node_size(pe.node))
}

/// The PEs of the calling PE's process: all of them in a one-process job,
/// the PEs of the process's node when the job spans processes. A message
/// to a PE outside this range leaves the address space (where a library
/// packs what only makes sense inside it, as the seed balancer's pack
/// functions do).
pub fn process_pes() -> std::ops::Range<usize> {
    pe::with(|pe| pe.job.first_pe..pe.job.first_pe + pe.job.local_pes())
}

/// The runtime flags of the calling PE's job, as its command line gave them
/// (`+p`, `++ppn`, `+balancer`, …): a library reads its own from here in its
/// module init (see
/// [`register_module_init`](crate::register_module_init)).
pub fn runtime_flags() -> crate::proc::args::Config {
    pe::with(|pe| pe.job.config.clone())
}

fn check_node(node: usize) -> crate::proc::topology::Topology {
    let topo = pe::with(|pe| pe.job.topo);
    if node >= topo.num_nodes() {
        crate::proc::exit::abort(&format!(
            "node {node} does not exist: the job has nodes 0..{}",
            topo.num_nodes()
        ));
    }
    topo
}

fn check_pe(pe: usize) -> crate::proc::topology::Topology {
    let topo = pe::with(|p| p.job.topo);
    if pe >= topo.num_pes() {
        crate::proc::exit::abort(&format!(
            "PE {pe} does not exist: the job has PEs 0..{}",
            topo.num_pes()
        ));
    }
    topo
}

/// The lowest-numbered PE of `node` (`CmiNodeFirst`). Aborts if `node` is
/// out of range.
#[doc(alias = "CmiNodeFirst")]
pub fn node_first(node: usize) -> usize {
    check_node(node).node_first(node)
}

/// Number of PEs on `node` (`CmiNodeSize`). Aborts if `node` is out of range.
#[doc(alias = "CmiNodeSize")]
pub fn node_size(node: usize) -> usize {
    check_node(node).node_size(node)
}

/// The node PE `pe` belongs to (`CmiNodeOf`). Aborts if `pe` is out of range.
#[doc(alias = "CmiNodeOf")]
pub fn node_of(pe: usize) -> usize {
    check_pe(pe).node_of(pe)
}

/// The rank of PE `pe` inside its node (`CmiRankOf`). Aborts if `pe` is out
/// of range.
#[doc(alias = "CmiRankOf")]
pub fn rank_of(pe: usize) -> usize {
    check_pe(pe).rank_of(pe)
}
