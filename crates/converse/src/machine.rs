//! The machine: start-up and exit, runtime flags, the node/PE topology and
//! its queries, pseudo-globals, node locks, timers and atomic I/O.
//!
//! This module is the public face of two floors of the core (DESIGN.md §3):
//! `proc` (what a process knows before any PE exists: topology, flags,
//! timers, I/O, exit) and `rt` (the PEs and the job). Its paths are the
//! ones users name; the code lives below.
pub use crate::proc::{affinity, args, io, timer, topology};

/// Ending a job: normally from any PE ([`exit`](crate::exit)), abnormally ([`abort`](crate::abort),
/// [`cmi_assert!`](crate::cmi_assert)).
pub mod exit {
    #[doc(hidden)]
    pub use crate::proc::exit::ASSERTS_OFF;
    pub use crate::proc::exit::{ABORT_EXIT_CODE, abort, foreign_exit};
    pub use crate::start::{exit, job_exiting};
}
#[doc(hidden)]
pub use crate::rt::launch;
pub use crate::rt::{globals, hosts, lock};

/// Starting a job (`ConverseInit`) and finishing it.
pub mod startup {
    pub use crate::start::{Converse, converse_init, finish};
}
pub use crate::rt::{
    my_node, my_node_size, my_pe, my_rank, node_first, node_of, node_size, num_nodes, num_pes,
    process_pes, rank_of, runtime_flags,
};
