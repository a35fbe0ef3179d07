//! Sends (Cmi): point to point (to a PE, to a node, of vectors of pieces, of
//! several messages in one go, in this file, over the PE's send path and
//! flow control in `send`), and the collectives in the submodules:
//! broadcasts ([`bcast`]), multicast groups and list sends ([`group`]),
//! reductions ([`reduce`], over nodes [`node_reduce`]) and the spanning
//! trees they travel along
//! ([`spantree`]).
//!
//! # Ownership
//!
//! - `sync_*` calls take `&Message` and act as if they copied it: when they
//!   return the caller may reuse or change its message.
//! - `*_and_free` calls take the message by value: it moves into the network
//!   and the caller no longer has it (`CmiFree` happens on the far side).
//! - `async_*` calls take `&Message` and return a [`CommHandle`] that tells
//!   when the buffer may be reused. The in-process layer copies at once, so
//!   its handles are always complete; netmods that send in the background
//!   complete them later. Because a `Message` is copy-on-write, reusing it
//!   early is never unsafe, only a copy.
//!
//! Point-to-point messages from one PE to another arrive in the order they
//! were sent. Collectives take other paths (a broadcast reaches a PE of
//! another node through that node's first PE; a multicast may be relayed
//! through its group's creator), so a collective and a point-to-point
//! message, or two multicasts one of which was relayed, are not ordered with
//! each other; two broadcasts from one PE are (see [`bcast`]). A PE
//! number or node number out of range aborts the job with a message naming
//! the sender and the bad number.
//!
//! # Concurrency
//!
//! Sends run on the sending PE's thread; they push to the receiver's
//! lock-free inbox and wake it (see `rt::job`).
pub mod bcast;
pub mod group;
pub mod node_reduce;
pub mod persistent;
pub mod pgrp;
pub mod rdma;
pub mod reduce;
pub(crate) mod route;
pub(crate) mod send;
pub mod spantree;
pub(crate) mod state;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::msg::message::MessageRaw as _;
use crate::msg::message::{MSG_HEADER_SIZE, Message};
use crate::rt::pe;

/// Tells whether an asynchronous send has finished with its buffer
/// (`CmiCommHandle`).
#[doc(alias = "CmiCommHandle")]
#[derive(Debug, Clone)]
pub struct CommHandle {
    /// `None`: complete when made (the common case, no allocation).
    done: Option<Arc<AtomicBool>>,
}

impl CommHandle {
    /// A handle for a send that finished with the caller's buffer before
    /// returning (every send copies or takes ownership at once).
    pub(crate) fn completed() -> CommHandle {
        CommHandle { done: None }
    }

    /// True once the send no longer needs the buffer: it may be reused
    /// (`CmiAsyncMsgSent`).
    #[doc(alias = "CmiAsyncMsgSent")]
    pub fn is_sent(&self) -> bool {
        self.done.as_ref().is_none_or(|d| d.load(Ordering::Acquire))
    }

    /// Releases the handle and what it holds; the message buffer is not
    /// touched (`CmiReleaseCommHandle`). The same as dropping it.
    #[doc(alias = "CmiReleaseCommHandle")]
    pub fn release(self) {}
}

/// True if a send to PE `pe` would now find too much queued for it: its
/// inbox (in this process) or the network to its process holds more than
/// the flow-control high-water mark. Sends never fail and a send from a
/// handler never waits, so a handler that floods a busy PE grows memory
/// without bound; checking this lets it stop and go on later (from a
/// user-level thread, whose sends wait for room, or a message to itself)
/// with Converse's semantics unchanged. A send to itself never blocks.
///
/// # Panics
/// Aborts the job if `pe` is no PE of the job.
pub fn would_block(pe: usize) -> bool {
    pe::with(|me| {
        me.check_pe(pe, "would_block for");
        me.congested(send::Congested::Pe(pe))
    })
}

/// [`would_block`] for a node send: true if the network to node `node`'s
/// process holds too much (a node of this process never blocks).
///
/// # Panics
/// Aborts the job if `node` is no node of the job.
pub fn node_would_block(node: usize) -> bool {
    pe::with(|me| {
        me.check_node(node, "node_would_block for");
        me.congested(send::Congested::Node(node))
    })
}

/// Sends a copy of `msg` to PE `dest_pe`; `msg` may be reused at once
/// (`CmiSyncSend`).
#[doc(alias = "CmiSyncSend")]
pub fn sync_send(dest_pe: usize, msg: &Message) {
    pe::with(|pe| pe.send_copy_to_pe(dest_pe, msg))
}

/// Sends `msg` to PE `dest_pe`, giving it up (`CmiSyncSendAndFree`).
#[doc(alias = "CmiSyncSendAndFree")]
// The send to another PE out of line: a send to itself, the runtime's
// cheapest message, then needs a smaller frame. Not inlined into callers:
// it reads the calling thread's PE, which a migrating thread changes (see
// `my_pe`).
pub fn sync_send_and_free(dest_pe: usize, msg: Message) {
    if dest_pe == pe::number() {
        // SAFETY: a send to this PE runs no user code and cannot end it
        // (`Pe::send_to_self`).
        unsafe { pe::with_uncounted(|pe| pe.send_to_self(msg)) }
    } else {
        send_and_free_to_other_pe(dest_pe, msg)
    }
}

/// [`sync_send_and_free`] to another PE.
#[inline(never)]
fn send_and_free_to_other_pe(dest_pe: usize, msg: Message) {
    pe::with(|pe| pe.send_to_other_pe(dest_pe, msg))
}

/// Starts sending a copy of `msg` to PE `dest_pe` (`CmiAsyncSend`); the handle
/// says when `msg` may be reused.
#[doc(alias = "CmiAsyncSend")]
pub fn async_send(dest_pe: usize, msg: &Message) -> CommHandle {
    // The send copies `msg` (to another process too: the network owns the
    // copy), so the caller may reuse it at once. Completion never waits
    // for the receiver, which could be waiting for the same (flow control
    // holds bytes back until a receiver takes its messages).
    sync_send(dest_pe, msg);
    CommHandle::completed()
}

/// Sends a copy of `msg` to node `dest_node`, where any PE of the node may
/// handle it (`CmiSyncNodeSend`).
#[doc(alias = "CmiSyncNodeSend")]
pub fn sync_node_send(dest_node: usize, msg: &Message) {
    pe::with(|pe| pe.send_copy_to_node(dest_node, msg))
}

/// Sends `msg` to node `dest_node`, giving it up (`CmiSyncNodeSendAndFree`).
#[doc(alias = "CmiSyncNodeSendAndFree")]
pub fn sync_node_send_and_free(dest_node: usize, msg: Message) {
    pe::with(|pe| pe.send_to_node(dest_node, msg))
}

/// Starts sending a copy of `msg` to node `dest_node` (`CmiAsyncNodeSend`).
#[doc(alias = "CmiAsyncNodeSend")]
pub fn async_node_send(dest_node: usize, msg: &Message) -> CommHandle {
    sync_node_send(dest_node, msg);
    CommHandle::completed()
}

/// Sends to PE `dest_pe` the message formed by concatenating `parts`; the
/// first part starts with the message header (`CmiSyncVectorSend`). The
/// runtime sets the header's size field. Aborts if the parts together are
/// shorter than a header.
#[doc(alias = "CmiSyncVectorSend")]
pub fn sync_vector_send<P: AsRef<[u8]>>(dest_pe: usize, parts: &[P]) {
    let msg = concat(parts);
    sync_send_and_free(dest_pe, msg)
}

/// As [`sync_vector_send`], consuming (freeing) the parts
/// (`CmiSyncVectorSendAndFree`).
#[doc(alias = "CmiSyncVectorSendAndFree")]
pub fn sync_vector_send_and_free<P: AsRef<[u8]>>(dest_pe: usize, parts: Vec<P>) {
    sync_vector_send(dest_pe, &parts)
}

/// As [`sync_vector_send`], returning a handle that says when the parts may
/// be reused (`CmiAsyncVectorSend`).
#[doc(alias = "CmiAsyncVectorSend")]
pub fn async_vector_send<P: AsRef<[u8]>>(dest_pe: usize, parts: &[P]) -> CommHandle {
    sync_vector_send(dest_pe, parts);
    CommHandle::completed()
}

/// Sends several messages, each with its own handler set, to PE `dest_pe` in
/// one transfer (`CmiMultipleSend`). They are delivered in order, as if sent
/// one by one; on the receiver each is copied out of the bundle into a
/// buffer of its own (a handler may write it, or forward it, at once).
#[doc(alias = "CmiMultipleSend")]
pub fn multiple_send(dest_pe: usize, msgs: &[&Message]) {
    let parts: Vec<&[u8]> = msgs.iter().map(|m| m.as_bytes()).collect();
    let mut bundle = Message::bundle(0, &parts);
    pe::with(|pe| {
        pe.check_pe(dest_pe, "multiple send to");
        bundle.set_src_pe(pe.pe);
        // Each part is a message of its own for quiescence detection.
        pe.count_created(msgs.len());
        pe.push_to_pe(dest_pe, bundle);
    })
}

/// Prepares the runtime for [`multiple_send`] (`CmiInitMultipleSendRoutine`).
/// Nothing to do here: the service is always ready. Kept so that ported code
/// reads the same.
#[doc(alias = "CmiInitMultipleSendRoutine")]
pub fn init_multiple_send_routine() {}

fn concat<P: AsRef<[u8]>>(parts: &[P]) -> Message {
    let total: usize = parts.iter().map(|p| p.as_ref().len()).sum();
    if total < MSG_HEADER_SIZE {
        crate::proc::exit::abort(&format!(
            "vector send of {total} bytes: a message needs at least its {MSG_HEADER_SIZE}-byte header"
        ));
    }
    let mut msg = Message::alloc(total);
    let out = msg.as_bytes_mut();
    let mut at = 0;
    for p in parts {
        let p = p.as_ref();
        out[at..at + p.len()].copy_from_slice(p);
        at += p.len();
    }
    msg.header_mut().total_size = total as u32;
    msg
}
