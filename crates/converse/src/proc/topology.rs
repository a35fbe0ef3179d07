//! The machine model: PEs grouped into nodes of `ppn` PEs each.
//!
//! PE `p` lives on node `p / ppn` with rank `p % ppn`; node `n` holds PEs
//! `n * ppn .. (n + 1) * ppn`. Immutable after start-up, so it is shared freely.

/// The cores this process may run on (its affinity mask's count, at least
/// 1), read once. Not `available_parallelism`: that also reads the
/// cgroup's CPU quota, through half a dozen files, which cost a process
/// of a `convrun` job about 0.1 ms of its start-up on this machine; the
/// runtime asks this to choose between spinning and parking, where the
/// cores a PE may be placed on are what counts.
pub fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| {
        // SAFETY: a zeroed cpu_set_t is a valid empty set; the kernel
        // fills it for this thread (pid 0), and CPU_COUNT only reads it.
        let counted = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            (libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0)
                .then(|| libc::CPU_COUNT(&set) as usize)
        };
        match counted {
            Some(n) if n > 0 => n,
            // More than 1024 CPUs, or no such call: the standard library's
            // answer.
            _ => std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    })
}

/// How a job's PEs are laid out in nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Topology {
    pes: usize,
    ppn: usize,
}

impl Topology {
    /// `pes` PEs in nodes of `ppn`.
    ///
    /// # Panics
    /// If either is zero or `pes` is not a multiple of `ppn`.
    pub fn new(pes: usize, ppn: usize) -> Topology {
        assert!(
            pes > 0 && ppn > 0 && pes.is_multiple_of(ppn),
            "bad layout: {pes} PEs, {ppn} per node"
        );
        Topology { pes, ppn }
    }

    /// Total number of PEs.
    pub fn num_pes(&self) -> usize {
        self.pes
    }

    /// Number of nodes.
    pub fn num_nodes(&self) -> usize {
        self.pes / self.ppn
    }

    /// The node PE `pe` belongs to.
    pub fn node_of(&self, pe: usize) -> usize {
        pe / self.ppn
    }

    /// The rank of PE `pe` inside its node.
    pub fn rank_of(&self, pe: usize) -> usize {
        pe % self.ppn
    }

    /// The lowest-numbered PE of `node`.
    pub fn node_first(&self, node: usize) -> usize {
        node * self.ppn
    }

    /// Number of PEs on `node`.
    pub fn node_size(&self, _node: usize) -> usize {
        self.ppn
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        let t = Topology::new(8, 4);
        assert_eq!(t.num_nodes(), 2);
        assert_eq!((t.node_of(5), t.rank_of(5)), (1, 1));
        assert_eq!(t.node_first(1), 4);
        assert_eq!(t.node_size(1), 4);
        for pe in 0..8 {
            assert_eq!(t.node_first(t.node_of(pe)) + t.rank_of(pe), pe);
        }
    }
}
