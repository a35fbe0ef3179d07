//! Who the calling PE is, and the clocks: `CmiMyPe` and friends,
//! `CmiWallTimer`, `CmiCpuTimer`, `CmiTimer`. Each is the core's function
//! of the same meaning, its result as a C `int` or `double`.
//!
//! Called on a thread that is no PE, the core aborts naming the call.
use std::ffi::c_int;

use crate::nonneg;

fn int(v: usize) -> c_int {
    // PE and node counts come from `c_int`-sized flags.
    c_int::try_from(v).expect("PE numbers fit a C int")
}

/// `CmiMyPe()`.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiMyPe() -> c_int {
    int(converse::my_pe())
}

/// `CmiNumPes()`.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiNumPes() -> c_int {
    int(converse::num_pes())
}

/// `CmiMyNode()`.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiMyNode() -> c_int {
    int(converse::my_node())
}

/// `CmiNumNodes()`.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiNumNodes() -> c_int {
    int(converse::num_nodes())
}

/// `CmiMyRank()`.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiMyRank() -> c_int {
    int(converse::my_rank())
}

/// `CmiMyNodeSize()`.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiMyNodeSize() -> c_int {
    int(converse::my_node_size())
}

/// `CmiNodeFirst(node)`.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiNodeFirst(node: c_int) -> c_int {
    int(converse::node_first(nonneg(node, "CmiNodeFirst")))
}

/// `CmiNodeSize(node)`.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiNodeSize(node: c_int) -> c_int {
    int(converse::node_size(nonneg(node, "CmiNodeSize")))
}

/// `CmiNodeOf(pe)`.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiNodeOf(pe: c_int) -> c_int {
    int(converse::node_of(nonneg(pe, "CmiNodeOf")))
}

/// `CmiRankOf(pe)`.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiRankOf(pe: c_int) -> c_int {
    int(converse::rank_of(nonneg(pe, "CmiRankOf")))
}

/// `CmiWallTimer()`: seconds since the job started.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiWallTimer() -> f64 {
    converse::wall_timer()
}

/// `CmiCpuTimer()`: CPU seconds of the calling thread.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiCpuTimer() -> f64 {
    converse::cpu_timer()
}

/// `CmiTimer()`.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiTimer() -> f64 {
    converse::timer()
}
