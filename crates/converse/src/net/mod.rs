//! How bytes move between the processes of a job: network modules
//! following the Nemesis netmod contract (`netmod`: the trait, its upcalls
//! and the spec-to-Rust table; `shm` and `tcp`), and the frames they carry
//! (`frame`, with the one reassembly path every module's receive side uses).
//!
//! This floor knows messages (`msg`) and nothing above: what a frame
//! *means* to the job (delivery into PEs' inboxes, the exit protocol,
//! faults) is the process layer's business, `rt::network`, which
//! implements the upcalls.
pub(crate) mod frame;
pub(crate) mod netmod;
pub(crate) mod shm;
pub(crate) mod tcp;
