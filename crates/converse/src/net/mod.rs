//! How bytes and messages move between PEs. For now the in-process layer
//! only: PEs are threads of one process and a message moves by handing its
//! buffer to the receiver's inbox (`inbox`: a ring of one-line slots with an
//! unbounded overflow, `mpsc`), no copy. Network modules (shm, tcp, mpi)
//! following the Nemesis netmod contract come later; `frame` is the framing
//! and the one reassembly path they will all feed received bytes into.
// The network modules that use it land next; its tests exercise it now.
#[allow(dead_code)]
pub(crate) mod frame;
pub(crate) mod inbox;
pub(crate) mod mpsc;
#[cfg(test)]
mod testing;
