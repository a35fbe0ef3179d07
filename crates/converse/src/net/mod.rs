//! How bytes and messages move between PEs. For now the in-process layer
//! only: PEs are threads of one process and a message moves by handing its
//! buffer to the receiver's inbox ([`mpsc`]), no copy. Network modules
//! (shm, tcp, mpi) following the Nemesis netmod contract come later.
pub(crate) mod mpsc;
