//! How bytes and messages move between PEs. For now the in-process layer
//! only: PEs are threads of one process and a message moves by handing its
//! buffer to the receiver's inbox (`inbox`: a ring of one-line slots with an
//! unbounded overflow, `mpsc`), no copy. Network modules (shm, tcp, mpi)
//! following the Nemesis netmod contract come later.
pub(crate) mod inbox;
pub(crate) mod mpsc;
#[cfg(test)]
mod testing;
