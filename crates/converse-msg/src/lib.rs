//! # converse-msg
//!
//! Converse messages: one contiguous, reference-counted buffer holding a
//! fixed 32-byte header ([`MsgHeader`]) followed by the payload. The lowest
//! floor of the runtime (DESIGN.md §3): the network modules
//! (`converse-net`) and the core (`converse`) sit on it, and it depends on
//! neither. Programs reach these types through `converse`
//! (`converse::Message`, …), which re-exports them.
//!
//! - [`message`](crate::Message): the buffer, its layout and ownership
//!   rules, and what a program does with a message;
//! - `cache` (private): the per-thread cache of freed small buffers that
//!   makes a small message's allocation and free a few loads and stores;
//! - [`copy`]: byte copies that avoid `memcpy`'s slow case on this
//!   hardware (a destination just past its source modulo 4 KiB);
//! - [`raw`]: what only the runtime does to one (the header flags it owns,
//!   sender stamping, sharing, bundles, receiving into an unzeroed buffer),
//!   behind the [`raw::MessageRaw`] trait; its comment says why a trait.
#![warn(missing_docs)]

mod buffer;
mod cache;
pub mod copy;
mod message;
pub mod raw;

pub use message::{MAX_MESSAGE_SIZE, MSG_HEADER_SIZE, Message, MsgError, MsgHeader};
