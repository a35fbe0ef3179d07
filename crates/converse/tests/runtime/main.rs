//! The core's integration tests, one module a subject, in one test binary:
//! each binary links the whole runtime, and one link for all of them is
//! most of a cold build's saving.
//!
//! Apart, in binaries of their own, stay the tests that need the process to
//! themselves or a build of their own: `faults` and `migrate` (their own
//! global allocator), `module_init` (module-init hooks are process-wide:
//! they would run in every other test's jobs), `ccs_load` (it bounds the
//! process's memory growth), `conditions` (it signals the whole process),
//! `ccs_disabled` (the build without the `ccs` feature) and `layering`
//! (it reads the source, not the runtime).
//!
//! A test that re-executes this binary for one child test names it with
//! its module (`common::test_path`).
#[cfg(feature = "ccs")]
#[path = "../common/ccs_job.rs"]
mod ccs_job;
#[path = "../common/mod.rs"]
mod common;

mod bcast;
#[cfg(feature = "ccs")]
mod ccs;
#[cfg(feature = "ccs")]
mod ccs_clients;
mod io;
mod isomalloc;
mod log;
mod machine;
mod manual_names;
mod node_reduce;
mod pe_handle;
mod persistent;
mod quiescence;
mod random;
mod randomized_msgq;
mod rdma;
mod reduce;
mod scheduler;
mod sends;
mod start_errors;
mod stats;
mod thread_regressions;
mod threads;
mod trace;
mod typed;
mod watchdog;
