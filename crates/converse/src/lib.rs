//! # converse
//!
//! Converse, the message-driven parallel runtime of Charm++, in Rust.
//!
//! A job is a set of *PEs* (processing elements, one OS thread each) grouped
//! into *nodes* (PEs sharing memory). PEs talk by sending [`Message`]s: a
//! message names a *handler*, registered on every PE, that runs when the
//! message reaches the front of the receiving PE's scheduler.
//!
//! ```
//! use converse::{Converse, Message};
//!
//! let code = Converse::new().args(["ring", "+p", "4"]).run(|_args| {
//!     // Register handlers in the same order on every PE.
//!     let token = converse::register_handler(|msg: Message| {
//!         let hops = u32::from_le_bytes(msg.payload()[..4].try_into().unwrap());
//!         if hops == 8 {
//!             converse::exit(0); // ends the whole job
//!         }
//!         let mut msg = msg;
//!         msg.payload_mut()[..4].copy_from_slice(&(hops + 1).to_le_bytes());
//!         let next = (converse::my_pe() + 1) % converse::num_pes();
//!         converse::sync_send_and_free(next, msg);
//!     });
//!     if converse::my_pe() == 0 {
//!         converse::sync_send_and_free(1, Message::from_payload(token, &0u32.to_le_bytes()));
//!     }
//! }).unwrap();
//! assert_eq!(code, 0);
//! ```
//!
//! Every function of the Converse manual has a Rust equivalent here; search
//! the documentation for the C name (`CmiSyncSend`, `CsdEnqueueGeneral`, …):
//! it is a `doc(alias)` of its Rust counterpart.
//!
//! Module map (DESIGN.md §3): [`machine`] (start-up, exit, topology,
//! pseudo-globals, locks, timers, I/O), [`msg`] (messages and handlers),
//! [`cmi`] (sends), [`csd`] (scheduler and priority queues).
#![warn(missing_docs)]
#![allow(clippy::new_without_default)]

/// The README's code, compiled and run as a doctest so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

pub mod cmi;
pub mod csd;
pub mod machine;
pub mod msg;
mod net;
mod sync;

pub use cmi::{
    CommHandle, async_node_send, async_send, async_vector_send, init_multiple_send_routine,
    multiple_send, sync_node_send, sync_node_send_and_free, sync_send, sync_send_and_free,
    sync_vector_send, sync_vector_send_and_free,
};
pub use csd::{
    BitPrio, Cqs, Queueing, deliver_msgs, deliver_specific_msg, enqueue, enqueue_fifo,
    enqueue_general, enqueue_lifo, exit_scheduler, node_enqueue, node_enqueue_fifo,
    node_enqueue_general, node_enqueue_lifo, schedule_count, schedule_forever, schedule_poll,
    scheduler,
};
pub use machine::args::ArgError;
pub use machine::exit::{ABORT_EXIT_CODE, abort, exit, job_exiting};
pub use machine::globals::{Cpv, Csv};
pub use machine::io::{error, printf, scan, scan_line};
pub use machine::lock::{NodeLock, NodeLockGuard, node_barrier, unlock};
pub use machine::startup::{Converse, converse_init, finish};
pub use machine::timer::{cpu_timer, timer, wall_timer};
pub use machine::{
    my_node, my_node_size, my_pe, my_rank, node_first, node_of, node_size, num_nodes, num_pes,
    rank_of,
};
pub use msg::{
    Handler, MSG_HEADER_SIZE, Message, MsgError, MsgHeader, handler_function, handler_of,
    number_handler, register_handler, register_handler_global, register_handler_local,
};
