//! GAMMA, the Genoa Active Message MAchine's programming interface, over
//! Converse (`../shared/spec/gamma-api.txt`).
//!
//! A GAMMA program is SPMD: a group of nodes, each with 1,025 ports
//! (0..=1024) and 1,025 semaphores; a port bound for output sends to an
//! input port of another node (or of every node: [`BROADCAST`]); an input
//! port writes arriving messages into a destination buffer the program
//! owns ([`Buffer`]), counts them on a semaphore, and may run a receiver
//! handler after each and an error handler when one did not fit.
//!
//! ```
//! use std::rc::Rc;
//! use converse_gamma::{self as gamma, Buffer, Dest, DestNode, GO_BACK};
//!
//! gamma::run(2, ["pingpong"], || {
//!     let me = gamma::my_node().unwrap();
//!     let other = 1 - me;
//!     let pid = gamma::my_par_pid().unwrap();
//!     let inbox = Buffer::new(8);
//!     let to = Dest { node: DestNode::Node(other), par_pid: pid, port: 1 };
//!     gamma::set_passive_port(1, Some(to), 1, GO_BACK, Some(inbox.clone()), 8).unwrap();
//!     gamma::sync().unwrap();
//!     if me == 0 {
//!         gamma::send(1, &7u64.to_le_bytes()).unwrap();
//!         gamma::wait(1, 1).unwrap();
//!         assert_eq!(inbox.borrow()[..], 8u64.to_le_bytes());
//!     } else {
//!         gamma::wait(1, 1).unwrap();
//!         let x = u64::from_le_bytes(inbox.borrow()[..].try_into().unwrap());
//!         gamma::send(1, &(x + 1).to_le_bytes()).unwrap();
//!     }
//! })
//! .unwrap();
//! ```
//!
//! # The document's functions here
//!
//! | C | Rust |
//! |---|---|
//! | `gamma_init(num_nodes, argc, argv)` | [`init`] (the program's thread is the node; started by hand, it replicates the program through `convrun`), or [`run`] (nodes as threads, or the processes of a launcher) |
//! | `gamma_exit()` | [`exit`] |
//! | `gamma_set_active_port(port, dest_node, dest_par_pid, dest_port, receiver, error, sem, kind, buf, len)` | [`set_active_port`]`(port, Some(Dest{..}) or None, receiver, error, sem, kind, buf, len)` |
//! | `gamma_set_passive_port(...)` | [`set_passive_port`] |
//! | `gamma_post_recv(port, buf, len)`, `gamma_attach_buffer(port, buf)` | [`post_recv`], [`attach_buffer`] |
//! | `gamma_send`, `_flowctl`, `_2p`, `_2p_flowctl` | [`send`], [`send_flowctl`], [`send_2p`], [`send_2p_flowctl`] |
//! | `gamma_isend`, `_flowctl`, `_2p`, `_2p_flowctl` | [`isend`], ... returning a [`SendHandle`] |
//! | `gamma_wsend(h)`, `gamma_tsend(h)` | [`wsend`], [`tsend`] (`true` for 1) |
//! | `gamma_signal`, `gamma_sigerr`, `gamma_wait`, `gamma_test` | [`signal`], [`sigerr`], [`wait`] (the error count, which C returns negated), [`test`](fn@test) |
//! | `gamma_atomic(f)` | [`atomic`] |
//! | `gamma_sync()` | [`sync`] |
//! | `gamma_my_par_pid`, `gamma_my_node`, `gamma_how_many_nodes` | [`my_par_pid`], [`my_node`], [`how_many_nodes`] |
//! | `gamma_mlock`, `gamma_munlock`, `gamma_munlockall` | [`mlock`], [`munlock`], [`munlockall`], [`Buffer::mlock`] |
//! | `gamma_time(t)`, `gamma_time_diff(b, a)`, `time_586` | [`time`], [`time_diff`], [`TimeStamp`] |
//! | `gamma_active_port`, `gamma_errno` | [`active_port`], [`errno`] |
//! | `GAMMA_ERR_FRAMELOST`, `_MSGTOOLONG`, `_SENDFAILURE` | [`ERR_FRAMELOST`], [`ERR_MSGTOOLONG`], [`ERR_SENDFAILURE`] |
//! | `BROADCAST`, `GO_AHEAD`, `GO_BACK` | [`BROADCAST`], [`GO_AHEAD`], [`GO_BACK`] |
//! | a negative return | `Err(`[`Error`]`)`, whose [`code`](Error::code) is that value |
//!
//! # Where this differs from the kernel driver
//!
//! - Handlers run when the node delivers messages: inside a GAMMA call
//!   that polls ([`wait`], [`test`](fn@test), [`sync`], a flow-controlled send,
//!   [`wsend`], [`tsend`]) or the node's own Converse scheduler calls;
//!   not at interrupt time in the middle of other code. So [`atomic`]
//!   only needs to keep them out of `f`'s own polling, and a program
//!   must reach a GAMMA call for its messages to be stored.
//! - A handler is an `Rc<dyn Fn()>`, and may call any GAMMA function
//!   (system calls too: it runs in user space).
//! - [`Buffer`] is shared between the program and the port (`Rc`): a
//!   borrow held across a GAMMA call while a message arrives for it aborts
//!   the job naming the port.
//! - Messages arriving for a port not set up for input wait until it is;
//!   those never stored are reported on stderr when the node leaves.
//! - A blocking [`send`] of [`OFFER_MIN`] bytes or more to one node of the
//!   group in another process returns once the receiver has the bytes: it
//!   offers them, the receiver's process reads them with a one-sided get
//!   (one copy, where a message takes four) when it next polls, and the
//!   sender polls meanwhile. A non-blocking or two-piece send, a
//!   broadcast, a flow-controlled send and a send within a process copy
//!   the bytes into a message before returning, as before.
//! - `GAMMA_ERR_FRAMELOST` never happens: Converse delivers whole
//!   messages. `SENDFAILURE` is a send whose destination left the group.
//! - Locking memory is not needed (nothing writes buffers behind the
//!   program's back), but [`mlock`] does lock, and reports a refusal.
//! - Groups exchange messages between processes of one host (a port
//!   bound to another group's parallel pid; Unix sockets in the user's
//!   registry directory), not across hosts.
//! - [`init`] in a process started by hand replicates it through
//!   `convrun` (an `exec`): node 0 is a new copy of the program rather
//!   than the calling process.
//!
//! # Flow control
//!
//! A `_flowctl` send needs a credit: each output port has one message in
//! flight to each destination node, and the receiver gives the credit back
//! when the program re-posts that port's buffer ([`post_recv`],
//! [`attach_buffer`], or setting the port up again). Until then a further
//! flow-controlled message waits at the sender (a blocking send waits,
//! a non-blocking one queues, in order) and one from another sender that
//! would overwrite the unreleased message waits at the receiver. No
//! message is lost or overwritten.
mod comm;
mod error;
mod group;
mod intergroup;
mod mlock;
mod node;
mod port;
mod sem;
mod time;
mod wire;

pub use comm::{
    SendHandle, attach_buffer, isend, isend_2p, isend_2p_flowctl, isend_flowctl, post_recv, send,
    send_2p, send_2p_flowctl, send_flowctl, set_active_port, set_passive_port, tsend, wsend,
};
pub use error::{ERR_FRAMELOST, ERR_MSGTOOLONG, ERR_SENDFAILURE, Error, Result};
pub use group::{MAX_NODES, exit, how_many_nodes, init, install, my_node, my_par_pid, run, sync};
pub use mlock::{mlock, munlock, munlockall};
pub use node::{BROADCAST, Dest, DestNode, OFFER_MIN, PortHandler, RESERVED};
pub use port::{Buffer, BufferKind, GO_AHEAD, GO_BACK};
pub use sem::{active_port, atomic, errno, sigerr, signal, test, wait};
pub use time::{TimeStamp, time, time_diff};
