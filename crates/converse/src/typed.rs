//! Typed handlers: a handler that takes a value of type `T` instead of a
//! message of bytes, and a [`Handler<T>`] to send values to it with, so
//! that no byte offset is counted by hand and a value of the wrong type
//! does not compile:
//!
//! ```
//! use std::cell::Cell;
//! use std::rc::Rc;
//!
//! let code = converse::Converse::new().default_pes(2).run(|_| {
//!     // Every PE registers the same handlers in the same order.
//!     let seen = Rc::new(Cell::new(0u64));
//!     let add = converse::handler(move |(x, y): (u64, u64)| {
//!         seen.set(seen.get() + x * y);
//!         if seen.get() == 12 {
//!             converse::exit(0);
//!         }
//!     });
//!     if converse::my_pe() == 1 {
//!         add.send(0, &(3, 4));
//!     }
//! });
//! assert_eq!(code.unwrap(), 0);
//! ```
//!
//! ```compile_fail
//! // A handler of `u64` takes nothing else.
//! converse::Converse::new().run(|_| {
//!     let h = converse::handler(|x: u64| println!("{x}"));
//!     h.send(0, &(1u64, 2u64));
//! });
//! ```
//!
//! A handler can be declared before it is defined ([`handler_slot`]), so
//! that two handlers that send to each other need no order between them.
//!
//! # Invariants
//!
//! - A typed handler is a registered handler like any other: it takes the
//!   next index of the table every PE builds in the same order (checked
//!   across PEs and processes as every handler is, and reported with the
//!   place it was registered at).
//! - Values travel in the crate's one codec (postcard, as the typed
//!   reductions' and the extensions' values do). A message a typed handler
//!   cannot read as its `T` (sent with the byte API to its index, or from
//!   a program whose `T` differs) aborts naming the handler, where it was
//!   registered, and the type.
//! - A slot called before it is filled aborts naming where it was made; a
//!   slot is filled once.
//!
//! # Concurrency
//!
//! Per PE, as handlers are: a [`HandlerSlot`] belongs to the PE that made
//! it; a [`Handler<T>`] is a number, and may go anywhere.
use std::cell::OnceCell;
use std::marker::PhantomData;
use std::panic::Location;
use std::rc::Rc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::msg::Message;
use crate::msg::handler::{Entry, HandlerIdent};

/// A registered handler that takes values of type `T` ([`handler`]).
/// Copy it anywhere: it is the handler's index.
pub struct Handler<T> {
    index: usize,
    takes: PhantomData<fn(T)>,
}

impl<T> Clone for Handler<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Handler<T> {}

impl<T> std::fmt::Debug for Handler<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Handler<{}>({})", std::any::type_name::<T>(), self.index)
    }
}

impl<T> Handler<T> {
    /// The handler's index in every PE's table (what the byte API's
    /// messages carry).
    pub fn index(self) -> usize {
        self.index
    }
}

impl<T: Serialize> Handler<T> {
    /// A message carrying `value` to this handler.
    pub fn message(self, value: &T) -> Message {
        // Sized first, then encoded straight into the message's payload:
        // no buffer between.
        let encoded = postcard::experimental::serialized_size(value).and_then(|len| {
            let mut msg = Message::new(self.index, len);
            postcard::to_slice(value, msg.payload_mut())?;
            Ok(msg)
        });
        encoded.unwrap_or_else(|e| {
            crate::abort(&format!(
                "cannot encode a `{}` for handler {}: {e}",
                std::any::type_name::<T>(),
                self.index
            ))
        })
    }

    /// Sends `value` to this handler on PE `pe` (`CmiSyncSendAndFree` of
    /// the value's message).
    pub fn send(self, pe: usize, value: &T) {
        crate::sync_send_and_free(pe, self.message(value));
    }

    /// Sends `value` to this handler on every PE but the calling one.
    pub fn broadcast(self, value: &T) {
        crate::sync_broadcast_and_free(self.message(value));
    }

    /// Sends `value` to this handler on every PE, the calling one too.
    pub fn broadcast_all(self, value: &T) {
        crate::sync_broadcast_all_and_free(self.message(value));
    }

    /// Puts `value` for this handler in the calling PE's scheduler queue,
    /// at the back.
    pub fn enqueue(self, value: &T) {
        crate::enqueue(self.message(value));
    }
}

/// Reads `msg` as a `T` for the handler registered at `at`, or aborts
/// saying why.
fn decode<T: DeserializeOwned>(msg: &Message, at: &Location<'_>) -> T {
    postcard::from_bytes(msg.payload()).unwrap_or_else(|e| {
        crate::abort(&format!(
            "the typed handler registered at {at} got a message of {} bytes that is not a `{}`: {e}",
            msg.payload().len(),
            std::any::type_name::<T>()
        ))
    })
}

/// Registers `f` as a handler of `T` values on the calling PE and returns
/// it (every PE must register the same handlers in the same order, as
/// with [`register_handler`](crate::register_handler)).
#[track_caller]
pub fn handler<T, F>(f: F) -> Handler<T>
where
    T: DeserializeOwned + 'static,
    F: Fn(T) + 'static,
{
    let at = Location::caller();
    let index = crate::rt::handlers::register_entry(
        Entry::Closure(Rc::new(move |msg: Message| f(decode(&msg, at)))),
        HandlerIdent::of::<F>().at(at),
    );
    Handler {
        index,
        takes: PhantomData,
    }
}

/// What a slot runs, once filled: shared by the slot and its registered
/// handler.
type SlotBody<T> = Rc<OnceCell<Box<dyn Fn(T)>>>;

/// A handler of `T` values registered now and defined later
/// ([`handler_slot`], [`HandlerSlot::fill`]).
pub struct HandlerSlot<T> {
    handler: Handler<T>,
    body: SlotBody<T>,
}

impl<T> HandlerSlot<T> {
    /// The handler, to send to (before or after the slot is filled).
    pub fn handler(&self) -> Handler<T> {
        self.handler
    }

    /// Defines the handler as `f`, once: a second definition aborts.
    #[track_caller]
    pub fn fill(&self, f: impl Fn(T) + 'static) {
        if self.body.set(Box::new(f)).is_err() {
            crate::abort(&format!(
                "the handler slot of handler {} was filled twice (again at {})",
                self.handler.index,
                Location::caller()
            ));
        }
    }
}

/// Registers a handler of `T` values on the calling PE now, to be defined
/// later with [`HandlerSlot::fill`]: so that handlers that send to each
/// other (or to themselves through a value) need no registration order
/// between them. It takes its index now, as [`handler`] would.
#[track_caller]
pub fn handler_slot<T: DeserializeOwned + 'static>() -> HandlerSlot<T> {
    let at = Location::caller();
    let body: SlotBody<T> = Rc::new(OnceCell::new());
    let inner = body.clone();
    let index = crate::rt::handlers::register_entry(
        Entry::Closure(Rc::new(move |msg: Message| {
            let value = decode::<T>(&msg, at);
            match inner.get() {
                Some(f) => f(value),
                None => crate::abort(&format!(
                    "the handler slot made at {at} got a message before it was filled"
                )),
            }
        })),
        // Slots of one type told apart by where they were made (the same
        // in every process of one program).
        HandlerIdent::named::<HandlerSlot<T>>(&at.to_string()).at(at),
    );
    HandlerSlot {
        handler: Handler {
            index,
            takes: PhantomData,
        },
        body,
    }
}
