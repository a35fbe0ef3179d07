//! The process floor: what a process knows before any PE exists — the
//! node/PE topology, the runtime flags (`args` into one configuration),
//! timers, atomic I/O, logging (`log`: `tracing` events and the
//! `CONVERSE_LOG` stderr subscriber), the one way out (`exit`: `die` and the at-exit
//! hooks) the report of a PE's panic (`panic`) and the signals the runtime counts
//! (`signals`). Nothing here knows a PE's state; a thread's PE number and its
//! job's start instant are handed down as thread-locals by `rt`.
pub mod affinity;
pub mod args;
pub mod exit;
pub mod io;
pub(crate) mod log;
pub(crate) mod panic;
pub(crate) mod signals;
pub mod spantree;
pub mod timer;
pub mod topology;
