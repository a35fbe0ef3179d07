//! How bytes and messages move between PEs.
//!
//! Inside a process PEs are threads and a message moves by handing its
//! buffer to the receiver's inbox (`inbox`: a ring of one-line slots with an
//! unbounded overflow, `mpsc`), no copy. Between the processes of a job
//! started by `convrun`, a network module following the Nemesis netmod
//! contract (`netmod`; `tcp`) carries frames (`frame`, with the one
//! reassembly path), and `network` is the layer above it: what frames mean,
//! the exit protocol and faults.
pub(crate) mod frame;
pub(crate) mod inbox;
pub(crate) mod mpsc;
pub(crate) mod netmod;
pub(crate) mod network;
pub(crate) mod shm;
pub(crate) mod tcp;
#[cfg(test)]
mod testing;
