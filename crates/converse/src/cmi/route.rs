//! Where the runtime's collective traffic leaves the ordinary message path.
//!
//! Two hooks, both run on the receiving PE's thread:
//!
//! - [`on_arrival`]: when a PE takes a message flagged for routing from its
//!   inbox (`csd::deliver`, `Pe::next_pe_arrival`). Broadcast and multicast
//!   copies are passed on down their tree here, before the local copy is
//!   delivered, so a subtree is never held up by a handler that runs long
//!   or by a PE waiting in `deliver_specific_msg`; group definitions are
//!   recorded here too, releasing multicasts that were waiting for them.
//! - the handlers [`init_pe`] registers in the PE's dispatch table, run
//!   when a system message or a reduction contribution reaches the front
//!   of the scheduler (`Pe::deliver`): reductions merge, groups are
//!   defined and queried, dynamic reduction IDs are handed out. (Quiescence
//!   detection and CCS register their own kinds.)
use super::{bcast, group, reduce};
use crate::msg::message::{FLAG_BCAST, FLAG_MCAST, FLAG_NODE_BCAST, FLAG_SYSTEM, Message};
use crate::msg::system::Kind;
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

/// Registers collective traffic's handlers in `pe`'s dispatch table
/// (`msg::system::Dispatch`): the routing of arrivals, reduction
/// contributions, group definitions and queries, dynamic reduction IDs.
pub(crate) fn init_pe(pe: &Pe) {
    let d = &pe.dispatch;
    d.on_arrival(on_arrival);
    d.on_contribution(reduce::on_contribution);
    d.on(Kind::GroupDef, |pe, _, msg| group::on_definition(pe, &msg));
    d.on(Kind::GroupQuery, |pe, _, msg| group::on_query(pe, &msg));
    d.on(Kind::DynamicIdRequest, |pe, _, msg| {
        reduce::on_dynamic_id_request(pe, &msg)
    });
    d.on(Kind::DynamicNodeIdRequest, |pe, _, msg| {
        super::node_reduce::on_dynamic_id_request(pe, &msg)
    });
    d.on(Kind::ReductionThen, |pe, _, msg| reduce::on_then(pe, &msg));
}
