//! Charm++'s CPU-topology API (`converse.h`, also through
//! `cputopology.h`): physical nodes (hosts), cores, and CPU affinity, over
//! [`converse::machine::hosts`].
//!
//! - Hosts are told apart as the launcher tells them apart for the network
//!   modules (by host name, or `++virtual-hosts`); a one-process job runs
//!   on one host. The topology is known from start-up, so
//!   `CmiInitCPUTopology` has nothing to do and `CmiCpuTopologyEnabled` is
//!   1 at any time.
//! - `CmiNumCores` is the host's online processors, as the OS counts them.
//! - Affinity: the runtime pins PEs at start-up when the job is given
//!   `+setcpuaffinity` or `+pemap LIST` (Charm++'s flags, read by the core:
//!   [`converse::machine::affinity`]), before any start function runs, so
//!   `CmiInitCPUAffinity` has only to say, once on PE 0, whether it did
//!   (as Charm++ says "cpu affinity enabled" or "NOT enabled").
//!   `CmiSetCPUAffinity(core)` pins the calling thread, and
//!   `CmiPrintCPUAffinity` prints where the calling PE may run.
//!
//! # Invariants
//!
//! - A list `CmiGetPesOnPhysicalNode` returns is the runtime's, made once
//!   per host and process on first request and kept for the process's
//!   life (the program must not free it); nothing is made for a host no
//!   one asks about.
//!
//! # Concurrency
//!
//! The lists are behind one mutex, taken only by `CmiGetPesOnPhysicalNode`.
use std::collections::HashMap;
use std::ffi::{c_char, c_int};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use converse::machine::{affinity, hosts};

use crate::nonneg;

fn int(v: usize) -> c_int {
    c_int::try_from(v).expect("PE and host numbers fit a C int")
}

/// `CmiNumCores()`: the processors online on this host.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiNumCores() -> c_int {
    int(hosts::num_cores())
}

/// `CmiCpuTopologyEnabled()`: 1, the topology is known from start-up.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiCpuTopologyEnabled() -> c_int {
    1
}

/// `CmiInitCPUTopology(argv)`: nothing to do (see the module comment);
/// `argv` is not read.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiInitCPUTopology(_argv: *mut *mut c_char) {}

/// `CmiInitCPUAffinity(argv)`: the runtime pinned the PEs at start-up if
/// the job asked (`+setcpuaffinity`, `+pemap`); PE 0 says whether, once
/// per process. `argv` is not read (the runtime took its flags out).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiInitCPUAffinity(_argv: *mut *mut c_char) {
    static SAID: AtomicBool = AtomicBool::new(false);
    if converse::my_pe() == 0 && !SAID.swap(true, Ordering::Relaxed) {
        let flags = converse::machine::runtime_flags();
        if flags.set_cpu_affinity {
            converse::printf(format_args!(
                "converse-rs> cpu affinity enabled: each PE pinned to a processor ({})\n",
                if flags.pemap.is_some() {
                    "+pemap"
                } else {
                    "+setcpuaffinity"
                }
            ));
        } else {
            converse::printf(format_args!(
                "converse-rs> cpu affinity not enabled (+setcpuaffinity or +pemap pins PEs)\n"
            ));
        }
    }
}

/// `CmiNumPhysicalNodes()`: the hosts of the job.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiNumPhysicalNodes() -> c_int {
    int(hosts::num_physical_nodes())
}

/// `CmiPhysicalNodeID(pe)`: the host of PE `pe`.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiPhysicalNodeID(pe: c_int) -> c_int {
    int(hosts::physical_node_of(nonneg(pe, "CmiPhysicalNodeID")))
}

/// `CmiNumPesOnPhysicalNode(node)`.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiNumPesOnPhysicalNode(node: c_int) -> c_int {
    int(hosts::num_pes_on_physical_node(nonneg(
        node,
        "CmiNumPesOnPhysicalNode",
    )))
}

/// `CmiGetPesOnPhysicalNode(node, &pelist, &num)`: the PEs of host `node`,
/// in increasing order, in a list that stays the runtime's.
///
/// # Safety
/// `pelist` and `num` point at writable variables.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiGetPesOnPhysicalNode(
    node: c_int,
    pelist: *mut *mut c_int,
    num: *mut c_int,
) {
    const CALL: &str = "CmiGetPesOnPhysicalNode";
    if pelist.is_null() || num.is_null() {
        converse::abort(&format!("{CALL}: an out-pointer is null"));
    }
    let node = nonneg(node, CALL);
    // Lists are kept by their contents, not by host: a later job of this
    // process may place other PEs on host `node`.
    static LISTS: Mutex<Option<HashMap<Vec<c_int>, &'static [c_int]>>> = Mutex::new(None);
    let pes: Vec<c_int> = hosts::pes_on_physical_node(node)
        .into_iter()
        .map(int)
        .collect();
    let list = {
        let mut lists = LISTS.lock().unwrap_or_else(|e| e.into_inner());
        *lists
            .get_or_insert_with(HashMap::new)
            .entry(pes)
            // Kept for the process's life: C holds the pointer.
            .or_insert_with_key(|pes| Box::leak(pes.clone().into_boxed_slice()))
    };
    // SAFETY: writable variables (the caller's promise). C reads the list
    // only (Charm++'s is the runtime's too).
    unsafe {
        pelist.write(list.as_ptr().cast_mut());
        num.write(int(list.len()));
    }
}

/// `CmiGetFirstPeOnPhysicalNode(node)`.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiGetFirstPeOnPhysicalNode(node: c_int) -> c_int {
    int(hosts::first_pe_on_physical_node(nonneg(
        node,
        "CmiGetFirstPeOnPhysicalNode",
    )))
}

/// `CmiPhysicalRank(pe)`: PE `pe`'s position among its host's PEs.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiPhysicalRank(pe: c_int) -> c_int {
    int(hosts::physical_rank(nonneg(pe, "CmiPhysicalRank")))
}

/// `CmiPeOnSamePhysicalNode(pe1, pe2)`: 1 if both run on one host.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiPeOnSamePhysicalNode(pe1: c_int, pe2: c_int) -> c_int {
    c_int::from(hosts::same_physical_node(
        nonneg(pe1, "CmiPeOnSamePhysicalNode"),
        nonneg(pe2, "CmiPeOnSamePhysicalNode"),
    ))
}

/// `CmiSetCPUAffinity(core)`: pins the calling thread to processor `core`
/// (a negative `core` counts from the last, as in Charm++). 0 on success,
/// -1 if the OS refuses (no such processor, or not allowed).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiSetCPUAffinity(core: c_int) -> c_int {
    let cores = hosts::num_cores() as i64;
    let core = i64::from(core);
    let core = if core < 0 { cores + core } else { core };
    match usize::try_from(core).map(affinity::pin_current_thread) {
        Ok(Ok(())) => 0,
        _ => -1,
    }
}

/// `CmiPrintCPUAffinity()`: prints the processors the calling PE may run
/// on (`PE 3: may run on processors 0-1`); 0, or -1 if the OS does not
/// say.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiPrintCPUAffinity() -> c_int {
    let Ok(allowed) = affinity::current_thread_cpus() else {
        return -1;
    };
    converse::printf(format_args!(
        "PE {}: may run on processors {}\n",
        converse::my_pe(),
        ranges(&allowed)
    ));
    0
}

/// `0-3,6`: increasing numbers as ranges.
fn ranges(v: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            v[i].to_string()
        } else {
            format!("{}-{}", v[i], v[j])
        });
        i = j + 1;
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    #[test]
    fn processors_print_as_ranges() {
        assert_eq!(super::ranges(&[0, 1, 2, 3, 6, 8, 9]), "0-3,6,8-9");
        assert_eq!(super::ranges(&[5]), "5");
        assert_eq!(super::ranges(&[]), "");
    }
}
