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
//! Every function, macro and type of the Converse manual and its CMI
//! chapter has a Rust equivalent here; search the documentation for the C
//! name (`CmiSyncSend`, `CsdEnqueueGeneral`, …): it is a `doc(alias)` of
//! its Rust counterpart (the CCS client's functions are in the
//! `converse-ccs` crate).
//!
//! The test `tests/runtime/manual_names.rs` checks this against the specification.
//!
//! Module map (DESIGN.md §3): [`machine`] (start-up, exit, topology,
//! pseudo-globals, locks, timers, I/O), [`msg`] (messages and handlers),
//! [`cmi`] (sends, broadcasts, multicast groups, reductions, spanning trees),
//! [`csd`] (scheduler and priority queues), [`cth`] (user-level threads),
//! [`ccd`] (conditions, timers, quiescence detection), [`ccs`] (the CCS
//! server). Inside, the code sits on floors (`sync`, `proc`, `msg`, `net`,
//! the scheduler's leaves, `rt`, then the machine, then CCS, then start-up
//! at the top); `tests/layering.rs` keeps every import pointing down.
//!
//! A library built on the core registers its per-PE initialization (its
//! handlers, its `Cpv`s) with [`register_module_init`]: it runs on every
//! PE, in registration order, before the start function.
#![warn(missing_docs)]
#![allow(clippy::new_without_default)]

pub mod ccd;
pub mod ccs;
pub mod cmi;
pub mod csd;
pub mod cth;
pub mod machine;
mod mem;
pub mod msg;
mod net;
mod proc;
mod rt;
mod start;
mod sync;
pub mod trace;
pub mod typed;

pub use ccd::quiescence::{
    qd_create, qd_created, qd_process, qd_processed, start_quiescence_detection,
};
pub use ccd::{
    Condition, call_fn_after, call_on_condition, call_on_condition_keep, cancel_call_on_condition,
    increase_resolution, raise_condition, reset_resolution, set_resolution,
};
pub use cmi::bcast::{
    async_broadcast, async_broadcast_all, async_node_broadcast, async_node_broadcast_all,
    sync_broadcast, sync_broadcast_all, sync_broadcast_all_and_free, sync_broadcast_and_free,
    sync_node_broadcast, sync_node_broadcast_all, sync_node_broadcast_all_and_free,
    sync_node_broadcast_and_free,
};
pub use cmi::group::{
    Group, async_list_send, async_multicast, establish_group, group_members, sync_list_send,
    sync_list_send_and_free, sync_multicast, sync_multicast_and_free, when_group_known,
};
pub use cmi::node_reduce::{
    NodeReductionId, dynamic_node_reduction_id, dynamic_node_reduction_id_remote,
    dynamic_node_reduction_reply, global_node_reduction_id, node_reduce, node_reduce_id,
    node_reduce_struct, node_reduce_struct_id,
};
pub use cmi::pgrp::ProcGroup;
pub use cmi::reduce::{
    DecodeError, ReductionId, decode_struct_result, dynamic_reduction_id,
    dynamic_reduction_id_remote, dynamic_reduction_reply, global_reduction_id, group_reduce,
    group_reduce_struct, list_reduce, list_reduce_struct, reduce, reduce_id, reduce_struct,
    reduce_struct_id,
};
pub use cmi::spantree::{
    SpanningTree, node_span_tree_children, node_span_tree_parent, num_node_span_tree_children,
    num_span_tree_children, span_tree_children, span_tree_parent, span_tree_root,
    spanning_tree_branch,
};
pub use cmi::{
    CommHandle, async_node_send, async_send, async_vector_send, init_multiple_send_routine,
    multiple_send, node_would_block, sync_node_send, sync_node_send_and_free, sync_send,
    sync_send_and_free, sync_vector_send, sync_vector_send_and_free, would_block,
};
pub use csd::{
    BitPrio, Cqs, Queueing, deliver_msgs, deliver_specific_msg, enqueue, enqueue_fifo,
    enqueue_general, enqueue_lifo, exit_scheduler, node_enqueue, node_enqueue_fifo,
    node_enqueue_general, node_enqueue_lifo, schedule_count, schedule_forever, schedule_poll,
    scheduler,
};
pub use cth::{Ctv, Event, Thread, check_can_block, sleep, suspend, yield_now, yield_prio};
pub use msg::{CHandler, Handler, MAX_MESSAGE_SIZE, MSG_HEADER_SIZE, Message, MsgError, MsgHeader};
pub use proc::args::ArgError;
pub use proc::exit::{ABORT_EXIT_CODE, abort};
pub use proc::io::{error, printf, scan, scan_line};
pub use proc::timer::{cpu_timer, timer, wall_timer};
pub use rt::globals::{Cpv, Csv};
pub use rt::handle::PeHandle;
pub use rt::handlers::{
    c_handler_function, handler_function, handler_of, number_c_handler, number_handler,
    register_c_handler, register_c_handler_global, register_c_handler_local, register_handler,
    register_handler_global, register_handler_local, register_handler_named,
};
pub use rt::isomalloc;
pub use rt::lock::{NodeLock, NodeLockGuard, node_barrier, unlock};
pub use rt::random;
pub use rt::{
    my_node, my_node_size, my_pe, my_rank, node_first, node_of, node_size, num_nodes, num_pes,
    rank_of,
};
pub use typed::{
    HandlerSlot, bytes_handler, handler, handler_slot, pod_handler, pod_handler_slot, reduction,
};
// The errors of start-up, below `StartError`: the launcher's bootstrap,
// joining a job, its network (their docs are the types').
pub use rt::launch::{BootstrapError, IoCause, JoinError};
pub use rt::network::NetworkError;
pub use start::{
    Converse, LaunchError, StartError, converse_init, exit, finish, job_exiting,
    register_module_init,
};
