//! What the PEs of one node share, from C: the node barrier and the slot
//! of a node-wide variable (`Csv`). Node locks (`CmiNodeLock`) are
//! `pthread` mutexes in `converse.h` itself, as in Charm++: every PE is a
//! thread of its process, so they need nothing from the runtime.
//!
//! # Invariants
//!
//! - A `Csv` variable is an array in the program with one element per
//!   logical node of a process (`CMK_CSV_MAX_LOCAL_NODES`); a PE uses the
//!   element of its node's position among its process's nodes
//!   ([`CmiCsvIndex_`]). Two logical nodes of one process (`++ppn`) thus
//!   never share a value. A process with more logical nodes than that
//!   ends the job with a message that says so.
use std::ffi::c_int;

/// Logical nodes a process may hold for `Csv` variables; `converse.h`
/// sizes them with the same number.
pub const CSV_MAX_LOCAL_NODES: usize = 64;

/// `CmiNodeBarrier()`: waits until every PE of the calling PE's node has
/// called it.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiNodeBarrier() {
    converse::node_barrier();
}

/// The calling PE's node's position among the logical nodes of its
/// process: the index of its element of every `Csv` array.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiCsvIndex_() -> c_int {
    let first = converse::node_of(converse::machine::process_pes().start);
    let index = converse::my_node() - first;
    if index >= CSV_MAX_LOCAL_NODES {
        converse::abort(&format!(
            "Csv variables hold {CSV_MAX_LOCAL_NODES} logical nodes per process; node {} is the {}th of its process \
             (use fewer PEs per process or larger ++ppn)",
            converse::my_node(),
            index + 1
        ));
    }
    c_int::try_from(index).expect("below CSV_MAX_LOCAL_NODES")
}
