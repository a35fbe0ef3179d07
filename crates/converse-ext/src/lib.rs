//! # converse-ext
//!
//! The Converse extensions library (`../shared/spec/converse-extensions-manual.md`),
//! built on the public API of `converse` only (DESIGN.md §3). Every function,
//! type and constant of the manual gets a Rust name here, with the C name as
//! a `#[doc(alias)]`.
//!
//! In so far:
//! - [`cmm`]: tag matching (the manual's chapter 2), a table of values
//!   stored and retrieved by integer tags with wildcards;
//! - [`cds`]: the queues of chapter 4 (`CdsFifo`, `CkQ`), thin and
//!   C-shaped, for porting;
//! - [`cms`]: master-slave (chapter 3): PE 0 fires tasks, workers answer;
//! - [`futures`]: futures (chapter 8), set from any PE of any process and
//!   waited for by a thread of the PE that made them;
//! - [`cld`]: seed load balancing (chapter 7): seeds placed by a strategy
//!   chosen with `+balancer NAME`, moved while they wait;
//! - [`tasks`]: async code on a PE ([`tasks::spawn`]), which can await a
//!   [`futures::Cfuture`] (`future.await`);
//! - [`cpthreads`]: Converse-POSIX threads (chapter 9), the pthreads API
//!   over Converse threads;
//! - [`cpath`]: parallel arrays of threads (chapter 10): arrays of threads
//!   spread over the PEs, with tagged sends, multicasts and reductions;
//! - [`cpm`]: parameter marshalling (chapter 6): `#[invokable]` functions
//!   called on any PE through a launcher, their arguments packed with
//!   serde.
#![warn(missing_docs)]

pub mod cds;
pub mod cld;
pub mod cmm;
pub mod cms;
pub mod cpath;
pub mod cpm;
pub mod cpthreads;
pub mod futures;
pub mod tasks;

pub use cds::{CdsFifo, CkQ};
pub use cmm::{CmmTable, WILDCARD};
pub use cpm::invokable;
