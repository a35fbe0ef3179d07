//! Broadcasts: one message to every PE, or to every node.
//!
//! # Route
//!
//! A broadcast travels down the spanning tree over *nodes* rooted at the
//! sender's node, one copy per node, to each node's first PE (its
//! representative); the representative passes it on to its child nodes and,
//! for a broadcast to PEs, to the other PEs of its node. On the sender's own
//! node the sender does both itself. Every copy shares one reference-counted
//! buffer: the message is copied once per broadcast (for the copying forms),
//! never once per PE.
//!
//! The header says what to do with a copy: `FLAG_BCAST` or
//! `FLAG_NODE_BCAST` and `root` = sender + 1. A PE that takes such a copy
//! from its inbox forwards it if it is the representative of a node other
//! than the root's (see `cmi::route`), so no per-copy state is needed and the
//! shared bytes are never written.
//!
//! # Guarantees
//!
//! - Each PE (node) the manual names receives the message exactly once: the
//!   tree reaches every node once, and a node's representative fans out to
//!   each other PE of its node once.
//! - Two broadcasts from one PE reach every PE in the order they were sent:
//!   each hop is a FIFO channel between two fixed PEs.
//! - The copies are handed to handlers as shared messages: reading costs
//!   nothing, the first write copies (see `msg::message`).
//! - A handler that sends its copy on sends a plain message: user sends
//!   clear the routing flags.
use super::CommHandle;
use super::spantree::SpanningTree;
use crate::msg::message::MessageRaw as _;
use crate::msg::message::{FLAG_BCAST, FLAG_NODE_BCAST, Message, MsgHeader};
use crate::rt::pe::{self, Pe};

/// Who a broadcast goes to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// Every PE (`include_self`: the sender too).
    Pes { include_self: bool },
    /// Every node (`include_self`: the sender's node too).
    Nodes { include_self: bool },
}

/// Broadcasts a copy of `msg` (stamped as a user message).
fn broadcast_copy(msg: &Message, scope: Scope) {
    pe::with(|pe| {
        let mut header = *msg.header();
        header.flags = 0;
        // Shared: no trace number; none stale either (a group's key).
        header.coll = 0;
        header.total_size = msg.len() as u32;
        let mut copy = msg.to_shared_with_header(&routed(pe, header, scope));
        copy.set_src_pe(pe.pe);
        send_shared(pe, copy, scope);
    })
}

/// Broadcasts `msg` itself (stamped as a user message).
fn broadcast_owned(mut msg: Message, scope: Scope) {
    pe::with(|pe| {
        pe.stamp_user_message(&mut msg);
        broadcast_from(pe, msg, scope);
    })
}

/// The header of a broadcast copy rooted at `pe`.
fn routed(pe: &Pe, mut header: MsgHeader, scope: Scope) -> MsgHeader {
    header.flags |= match scope {
        Scope::Pes { .. } => FLAG_BCAST,
        Scope::Nodes { .. } => FLAG_NODE_BCAST,
    };
    header.root = pe.pe as u32 + 1;
    header
}

/// Broadcasts `msg` from `pe` as it is apart from the routing fields; the
/// runtime's own broadcasts (system messages) come in here.
fn broadcast_from(pe: &Pe, mut msg: Message, scope: Scope) {
    msg.set_src_pe(pe.pe);
    let header = routed(pe, *msg.header(), scope);
    *msg.header_mut() = header;
    send_shared(pe, msg.into_shared(), scope);
}

/// Broadcasts `msg` from `pe` to every other PE, as a runtime message.
pub(crate) fn broadcast_to_others(pe: &Pe, msg: Message) {
    broadcast_from(
        pe,
        msg,
        Scope::Pes {
            include_self: false,
        },
    );
}

/// Sends the copies of an already routed, shared broadcast message from its
/// root `pe`, and counts them for quiescence detection.
fn send_shared(pe: &Pe, msg: Message, scope: Scope) {
    pe.trace.collective(match scope {
        Scope::Pes { .. } => "broadcast",
        Scope::Nodes { .. } => "node broadcast",
    });
    let topo = pe.job.topo;
    let tree = SpanningTree::new(topo.num_nodes(), pe.branch(), pe.node);
    // Down the tree first, so the far nodes start early.
    for child in tree.children(pe.node) {
        pe.push_to_pe(topo.node_first(child), msg.clone());
    }
    match scope {
        Scope::Pes { include_self } => {
            let first = topo.node_first(pe.node);
            for p in first..first + topo.node_size(pe.node) {
                if p != pe.pe {
                    pe.push_to_pe(p, msg.clone());
                }
            }
            pe.count_created(topo.num_pes() - 1 + usize::from(include_self));
            if include_self {
                pe.push_to_pe(pe.pe, msg);
            }
        }
        Scope::Nodes { include_self } => {
            pe.count_created(topo.num_nodes() - 1 + usize::from(include_self));
            if include_self {
                pe.push_to_node(pe.node, msg);
            }
        }
    }
}

/// The root PE of a broadcast copy; aborts if the header does not name one.
fn root_of(pe: &Pe, msg: &Message) -> usize {
    let root = msg.header().root as usize;
    let n = pe.job.topo.num_pes();
    if root == 0 || root > n {
        crate::proc::exit::abort(&format!(
            "malformed broadcast copy from PE {}: root field {root} names no PE of 0..{n}",
            msg.src_pe()
        ));
    }
    root - 1
}

/// Passes a broadcast-to-PEs copy on, if `pe` is the representative of a
/// node other than the root's: to the child nodes, then to the node's other
/// PEs. Called as the copy leaves `pe`'s inbox.
pub(crate) fn forward_pe_copy(pe: &Pe, msg: &Message) {
    let topo = pe.job.topo;
    let root_node = topo.node_of(root_of(pe, msg));
    if pe.rank != 0 || pe.node == root_node {
        return;
    }
    forward_to_child_nodes(pe, msg, root_node);
    let first = topo.node_first(pe.node);
    for p in first + 1..first + topo.node_size(pe.node) {
        pe.push_to_pe(p, msg.clone());
    }
}

/// Passes a broadcast-to-nodes copy on to the child nodes (the copy itself
/// is then delivered on `pe`, the node's representative).
pub(crate) fn forward_node_copy(pe: &Pe, msg: &Message) {
    let root_node = pe.job.topo.node_of(root_of(pe, msg));
    if pe.rank == 0 && pe.node != root_node {
        forward_to_child_nodes(pe, msg, root_node);
    }
}

fn forward_to_child_nodes(pe: &Pe, msg: &Message, root_node: usize) {
    let topo = pe.job.topo;
    let tree = SpanningTree::new(topo.num_nodes(), pe.branch(), root_node);
    for child in tree.children(pe.node) {
        pe.push_to_pe(topo.node_first(child), msg.clone());
    }
}

/// Sends a copy of `msg` to every PE but the caller (`CmiSyncBroadcast`);
/// `msg` may be reused at once.
#[doc(alias = "CmiSyncBroadcast")]
pub fn sync_broadcast(msg: &Message) {
    broadcast_copy(
        msg,
        Scope::Pes {
            include_self: false,
        },
    )
}

/// Sends `msg` to every PE but the caller, giving it up
/// (`CmiSyncBroadcastAndFree`).
#[doc(alias = "CmiSyncBroadcastAndFree")]
pub fn sync_broadcast_and_free(msg: Message) {
    broadcast_owned(
        msg,
        Scope::Pes {
            include_self: false,
        },
    )
}

/// Sends a copy of `msg` to every PE, the caller included
/// (`CmiSyncBroadcastAll`).
#[doc(alias = "CmiSyncBroadcastAll")]
pub fn sync_broadcast_all(msg: &Message) {
    broadcast_copy(msg, Scope::Pes { include_self: true })
}

/// Sends `msg` to every PE, the caller included, giving it up
/// (`CmiSyncBroadcastAllAndFree`).
#[doc(alias = "CmiSyncBroadcastAllAndFree")]
pub fn sync_broadcast_all_and_free(msg: Message) {
    broadcast_owned(msg, Scope::Pes { include_self: true })
}

/// Starts sending `msg` to every PE but the caller (`CmiAsyncBroadcast`);
/// the handle says when `msg` may be reused.
#[doc(alias = "CmiAsyncBroadcast")]
pub fn async_broadcast(msg: &Message) -> CommHandle {
    sync_broadcast(msg);
    CommHandle::completed()
}

/// Starts sending `msg` to every PE, the caller included
/// (`CmiAsyncBroadcastAll`).
#[doc(alias = "CmiAsyncBroadcastAll")]
pub fn async_broadcast_all(msg: &Message) -> CommHandle {
    sync_broadcast_all(msg);
    CommHandle::completed()
}

/// Sends a copy of `msg` to every node but the caller's, where one PE of
/// each node handles it (`CmiSyncNodeBroadcast`).
#[doc(alias = "CmiSyncNodeBroadcast")]
pub fn sync_node_broadcast(msg: &Message) {
    broadcast_copy(
        msg,
        Scope::Nodes {
            include_self: false,
        },
    )
}

/// Sends `msg` to every node but the caller's, giving it up
/// (`CmiSyncNodeBroadcastAndFree`).
#[doc(alias = "CmiSyncNodeBroadcastAndFree")]
pub fn sync_node_broadcast_and_free(msg: Message) {
    broadcast_owned(
        msg,
        Scope::Nodes {
            include_self: false,
        },
    )
}

/// Sends a copy of `msg` to every node, the caller's included
/// (`CmiSyncNodeBroadcastAll`).
#[doc(alias = "CmiSyncNodeBroadcastAll")]
pub fn sync_node_broadcast_all(msg: &Message) {
    broadcast_copy(msg, Scope::Nodes { include_self: true })
}

/// Sends `msg` to every node, the caller's included, giving it up
/// (`CmiSyncNodeBroadcastAllAndFree`).
#[doc(alias = "CmiSyncNodeBroadcastAllAndFree")]
pub fn sync_node_broadcast_all_and_free(msg: Message) {
    broadcast_owned(msg, Scope::Nodes { include_self: true })
}

/// Starts sending `msg` to every node but the caller's
/// (`CmiAsyncNodeBroadcast`).
#[doc(alias = "CmiAsyncNodeBroadcast")]
pub fn async_node_broadcast(msg: &Message) -> CommHandle {
    sync_node_broadcast(msg);
    CommHandle::completed()
}

/// Starts sending `msg` to every node, the caller's included
/// (`CmiAsyncNodeBroadcastAll`).
#[doc(alias = "CmiAsyncNodeBroadcastAll")]
pub fn async_node_broadcast_all(msg: &Message) -> CommHandle {
    sync_node_broadcast_all(msg);
    CommHandle::completed()
}
