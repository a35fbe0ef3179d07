//! # converse-net
//!
//! How bytes move between the processes of a job: network modules
//! following the Nemesis netmod contract (`netmod`: the trait, its upcalls
//! and the spec-to-Rust table; `shm` and `tcp`), the frames they carry
//! (`frame`, with the one reassembly path every module's receive side uses),
//! and the large-message transfers (`lmt`: the packets; `lmt_transfers`:
//! the spec's hooks and the transfers in flight). Two small rules that
//! every listener of the job shares (the tcp module's, the CCS server's
//! and `convrun`'s control socket) live here too: who keeps a handshake
//! slot in a flood (`admission`) and how often a line strangers can cause
//! is said (`throttle`).
//!
//! This floor knows messages (`converse-msg`) and nothing above: what a
//! frame *means* to the job (delivery into PEs' inboxes, the exit protocol,
//! faults) is the process layer's business, the core's `rt::network`, which
//! implements the upcalls. The core (`converse`) re-exports these modules
//! as its `net` module for its own use; programs never see them.
#![warn(missing_docs)]

pub mod admission;
pub mod counts;
pub mod frame;
mod limits;
pub mod liveness;
pub mod lmt;
pub mod lmt_transfers;
#[cfg(feature = "mpi")]
pub mod mpi;
pub mod netmod;
mod process;
pub mod shm;
mod sync;
pub mod tcp;
pub mod tcp_handshake;
pub mod throttle;
