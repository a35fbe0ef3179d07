//! Where the runtime's collective traffic leaves the ordinary message path.
//!
//! Two hooks, both run on the receiving PE's thread:
//!
//! - [`on_arrival`]: when a PE takes a message flagged for routing from its
//!   inbox (`machine::pe::Pe::next_pe_arrival`). Broadcast and multicast
//!   copies are passed on down their tree here, before the local copy is
//!   delivered, so a subtree is never held up by a handler that runs long
//!   or by a PE waiting in `deliver_specific_msg`; group definitions are
//!   recorded here too, releasing multicasts that were waiting for them.
//! - [`on_delivery`]: when a system message or a reduction contribution
//!   reaches the front of the scheduler (`Pe::deliver`): reductions merge,
//!   quiescence detection answers, dynamic reduction IDs are handed out.
use super::system::{Kind, Reader};
use super::{bcast, group, reduce};
use crate::msg::message::{
    FLAG_BCAST, FLAG_MCAST, FLAG_NODE_BCAST, FLAG_REDUCE, FLAG_SYSTEM, Message,
};
use crate::rt::pe::Pe;

/// Routes `msg`, just taken from `pe`'s inbox. Returns the copy to deliver
/// on `pe`, if there is one now.
pub(crate) fn on_arrival(pe: &Pe, msg: Message) -> Option<Message> {
    let flags = msg.header().flags;
    if flags & FLAG_BCAST != 0 {
        bcast::forward_pe_copy(pe, &msg);
    } else if flags & FLAG_NODE_BCAST != 0 {
        bcast::forward_node_copy(pe, &msg);
    }
    if flags & FLAG_MCAST != 0 {
        return group::on_multicast_arrival(pe, msg);
    }
    if flags & FLAG_SYSTEM != 0 && msg.handler() == Kind::GroupDef as usize {
        pe.count_processed(1);
        group::on_definition(pe, &msg);
        return None;
    }
    Some(msg)
}

/// Handles a system message or reduction contribution that reached the front
/// of `pe`'s scheduler (already counted as processed).
pub(crate) fn on_delivery(pe: &Pe, msg: Message) {
    if msg.header().flags & FLAG_REDUCE != 0 {
        reduce::on_contribution(pe, msg);
        return;
    }
    match Kind::from_raw(msg.header().handler) {
        Some(Kind::GroupDef) => group::on_definition(pe, &msg),
        Some(Kind::GroupQuery) => group::on_query(pe, &msg),
        Some(Kind::DynamicIdRequest) => reduce::on_dynamic_id_request(pe, &msg),
        Some(kind @ (Kind::QdStart | Kind::QdRequest | Kind::QdReply | Kind::QdDone)) => {
            crate::ccd::quiescence::on_message(pe, kind, msg)
        }
        Some(kind @ (Kind::CcsDispatch | Kind::CcsRequest | Kind::CcsReply | Kind::CcsPerf)) => {
            crate::ccs::on_message(pe, kind, msg)
        }
        None => Reader::new(&msg, "runtime message").malformed(&format!(
            "unknown runtime message kind {}",
            msg.header().handler
        )),
    }
}
