//! The message buffer lives in the `converse-msg` crate, the floor below the
//! network modules and this core (DESIGN.md §3). This module re-exports it
//! so that the core's `crate::msg::message::…` paths, and the public
//! `converse::msg::message::…` ones, stay as they were.
//!
//! The runtime-only operations (flags, sender stamping, sharing, bundles)
//! come from `converse_msg::raw`: a file that calls one of [`MessageRaw`]'s
//! methods imports the trait from here. They are `pub(crate)`, so they are
//! not part of this crate's API.
pub use converse_msg::{MAX_MESSAGE_SIZE, MSG_HEADER_SIZE, Message, MsgError, MsgHeader};

pub(crate) use converse_msg::raw::{
    ARRIVAL_FLAGS, FLAG_BCAST, FLAG_BUNDLE, FLAG_MCAST, FLAG_NO_QD, FLAG_NODE_BCAST, FLAG_REDUCE,
    FLAG_REDUCE_STRUCT, FLAG_SYSTEM, MessageRaw, SPECIAL_DELIVERY_FLAGS,
};
