//! Physical nodes: the hosts a job's PEs run on (Charm++'s CPU-topology
//! queries, `CmiNumPhysicalNodes` and friends).
//!
//! A node (`++ppn` PEs) is a unit of the machine model; a physical node is
//! a host, which may hold several nodes: the processes of a `convrun` job
//! on one host (or one `++virtual-hosts` pretend host), or every logical
//! node of a one-process job. The launcher tells hosts apart as it does
//! for the network modules (by host name, numbered by first appearance in
//! process order); the job keeps the host of every process
//! (the job's `hosts` field), `None` when all are on one.
//!
//! # Invariants
//!
//! - Physical nodes are numbered `0..num_physical_nodes()` by first
//!   appearance, so physical node 0 holds PE 0, and a physical node's PEs,
//!   in increasing order, are the PEs of its nodes in node order.
//! - Every query is the same on every PE of the job (the host list is the
//!   launcher's, the same in every process).
//!
//! # Cost
//!
//! The host list is what the launcher gave (one entry per process).
//! `physical_node_of` is O(1); the others scan it (O(processes), the
//! processes before the PE's for `physical_rank`), for a question asked at
//! start-up. Nothing is kept per PE.
//!
//! # Concurrency
//!
//! Read-only after start-up: the job's host list never changes.
use crate::rt::pe;

/// The host of node `node`: its process's (each process of a
/// multi-process job holds one node, of its own number), 0 when all are
/// on one.
fn host_of_node(hosts: Option<&[usize]>, node: usize) -> usize {
    hosts.and_then(|h| h.get(node).copied()).unwrap_or(0)
}

fn check_pe(pe: usize, what: &str) {
    let n = crate::num_pes();
    if pe >= n {
        crate::proc::exit::abort(&format!(
            "{what}: PE {pe} does not exist: the job has PEs 0..{n}"
        ));
    }
}

fn check_physical_node(node: usize, what: &str) {
    let n = num_physical_nodes();
    if node >= n {
        crate::proc::exit::abort(&format!(
            "{what}: physical node {node} does not exist: the job has physical nodes 0..{n}"
        ));
    }
}

/// The number of hosts the job runs on (`CmiNumPhysicalNodes`).
#[doc(alias = "CmiNumPhysicalNodes")]
pub fn num_physical_nodes() -> usize {
    pe::with(|pe| match &pe.job.hosts {
        Some(h) => h.iter().max().map_or(1, |m| m + 1),
        None => 1,
    })
}

/// The host PE `pe` runs on, `0..num_physical_nodes()`
/// (`CmiPhysicalNodeID`). Ends the job naming a PE that does not exist.
#[doc(alias = "CmiPhysicalNodeID")]
pub fn physical_node_of(pe: usize) -> usize {
    check_pe(pe, "physical_node_of");
    pe::with(|p| {
        let node = p.job.topo.node_of(pe);
        host_of_node(p.job.hosts.as_deref(), node)
    })
}

/// The nodes on host `host` below node `below`, in order, with their
/// first PE and size.
fn nodes_on(job: &crate::rt::job::Job, host: usize, below: usize) -> Vec<(usize, usize)> {
    let topo = job.topo;
    (0..below.min(topo.num_nodes()))
        .filter(|&n| host_of_node(job.hosts.as_deref(), n) == host)
        .map(|n| (topo.node_first(n), topo.node_size(n)))
        .collect()
}

/// The PEs on host `node`, in increasing order
/// (`CmiGetPesOnPhysicalNode`). Ends the job naming a host that does not
/// exist.
#[doc(alias = "CmiGetPesOnPhysicalNode")]
pub fn pes_on_physical_node(node: usize) -> Vec<usize> {
    check_physical_node(node, "pes_on_physical_node");
    pe::with(|p| nodes_on(&p.job, node, usize::MAX))
        .into_iter()
        .flat_map(|(first, size)| first..first + size)
        .collect()
}

/// How many PEs run on host `node` (`CmiNumPesOnPhysicalNode`).
#[doc(alias = "CmiNumPesOnPhysicalNode")]
pub fn num_pes_on_physical_node(node: usize) -> usize {
    check_physical_node(node, "num_pes_on_physical_node");
    pe::with(|p| nodes_on(&p.job, node, usize::MAX))
        .iter()
        .map(|&(_, size)| size)
        .sum()
}

/// The lowest-numbered PE on host `node`
/// (`CmiGetFirstPeOnPhysicalNode`).
#[doc(alias = "CmiGetFirstPeOnPhysicalNode")]
pub fn first_pe_on_physical_node(node: usize) -> usize {
    check_physical_node(node, "first_pe_on_physical_node");
    pe::with(|p| nodes_on(&p.job, node, usize::MAX))
        .first()
        .map(|&(first, _)| first)
        .expect("every physical node holds a node")
}

/// PE `pe`'s position among the PEs of its host (`CmiPhysicalRank`).
#[doc(alias = "CmiPhysicalRank")]
pub fn physical_rank(pe: usize) -> usize {
    check_pe(pe, "physical_rank");
    pe::with(|p| {
        if p.job.hosts.is_none() {
            // One host: its PEs are all the job's, in order.
            return pe;
        }
        let own = p.job.topo.node_of(pe);
        let host = host_of_node(p.job.hosts.as_deref(), own);
        let before: usize = nodes_on(&p.job, host, own)
            .iter()
            .map(|&(_, size)| size)
            .sum();
        before + p.job.topo.rank_of(pe)
    })
}

/// Whether PEs `a` and `b` run on one host (`CmiPeOnSamePhysicalNode`).
#[doc(alias = "CmiPeOnSamePhysicalNode")]
pub fn same_physical_node(a: usize, b: usize) -> bool {
    physical_node_of(a) == physical_node_of(b)
}

/// The cores of this host (`CmiNumCores`): the processors online, as the
/// OS counts them (hardware threads; `getconf _NPROCESSORS_ONLN`). Not
/// the cores this process may run on
/// ([`cores`](crate::proc::topology::cores) is that).
#[doc(alias = "CmiNumCores")]
pub fn num_cores() -> usize {
    // SAFETY: sysconf reads a system value; no pointers.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n)
        .ok()
        .filter(|&n| n > 0)
        .unwrap_or_else(crate::proc::topology::cores)
}
