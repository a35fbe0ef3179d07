//! Messages and handlers: the buffer format ([`Message`]) and the handler
//! table's type. Registering a handler on the calling PE, and looking one
//! up, are the runtime's (`rt::handlers`; re-exported at the crate root:
//! [`register_handler`](crate::register_handler), …).
pub mod handler;
pub mod message;
pub(crate) mod system;

pub use handler::{CHandler, Handler, MAX_HANDLER_INDEX};
pub use message::{MAX_MESSAGE_SIZE, MSG_HEADER_SIZE, Message, MsgError, MsgHeader};
