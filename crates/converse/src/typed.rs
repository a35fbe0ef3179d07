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
//! # Codecs
//!
//! A handler's second type parameter says how its values travel:
//!
//! - [`Serde`] ([`handler`], [`handler_slot`]): any serde type, in the
//!   crate's one codec (postcard, as the reductions' and the extensions'
//!   values are);
//! - [`Pod`] ([`pod_handler`], [`pod_handler_slot`]): a `bytemuck::Pod`
//!   value travels as its bytes, read back with one unaligned load, no
//!   encoding either way: the fast path for numbers and plain structs;
//! - [`Bytes`] ([`bytes_handler`]): a `[u8]` travels as is and the handler
//!   borrows it from the message, no copy on arrival.
//!
//! # Typed reductions
//!
//! [`reduction`]`(value, merge).then(handler)` contributes to a reduction
//! whose result goes to a [`Handler<T>`] (or anything that is a
//! [`ReductionTarget<T>`], such as an invokable of the extensions): a
//! value whose type is not the handler's does not compile.
//! [`then_run`](Reduction::then_run)`(f)` runs a function of `T` on the
//! root instead.
//!
//! ```compile_fail
//! converse::Converse::new().run(|_| {
//!     let total = converse::handler(|(a, b): (u64, u64)| println!("{a} {b}"));
//!     converse::reduction(1u64, |a, rest| a + rest.iter().sum::<u64>()).then(total);
//! });
//! ```
//!
//! # Invariants
//!
//! - A typed handler is a registered handler like any other: it takes the
//!   next index of the table every PE builds in the same order (checked
//!   across PEs and processes as every handler is, and reported with the
//!   place it was registered at).
//! - A message a typed handler cannot read as its `T` (sent with the byte
//!   API to its index, or from a program whose `T` differs; a [`Pod`]
//!   value of the wrong length) aborts naming where the handler was
//!   registered, and the type.
//! - A slot called before it is filled aborts naming where it was made; a
//!   slot is filled once.
//!
//! # Concurrency
//!
//! Per PE, as handlers are: a [`HandlerSlot`] belongs to the PE that made
//! it; a [`Handler<T>`] is a number, and may go anywhere.
use std::cell::Cell;
use std::marker::PhantomData;
use std::panic::Location;
use std::rc::Rc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::msg::Message;
use crate::msg::handler::{Entry, HandlerIdent};

/// How a handler's values travel (see "Codecs" in the module comment):
/// makes the message that carries a `T`.
pub trait Codec<T: ?Sized> {
    /// A message carrying `value` to handler `index`.
    fn message(index: usize, value: &T) -> Message;
}

/// Values travel in postcard (any serde type): [`handler`].
#[derive(Debug)]
pub enum Serde {}

/// Values travel as their bytes (`bytemuck::Pod` types): [`pod_handler`].
#[derive(Debug)]
pub enum Pod {}

/// Bytes travel as they are: [`bytes_handler`].
#[derive(Debug)]
pub enum Bytes {}

impl<T: Serialize + ?Sized> Codec<T> for Serde {
    fn message(index: usize, value: &T) -> Message {
        // Sized first, then encoded straight into the message's payload:
        // no buffer between.
        let encoded = postcard::experimental::serialized_size(value).and_then(|len| {
            let mut msg = Message::new(index, len);
            postcard::to_slice(value, msg.payload_mut())?;
            Ok(msg)
        });
        encoded.unwrap_or_else(|e| {
            crate::abort(&format!(
                "cannot encode a `{}` for handler {index}: {e}",
                std::any::type_name::<T>()
            ))
        })
    }
}

impl<T: bytemuck::Pod> Codec<T> for Pod {
    #[inline]
    fn message(index: usize, value: &T) -> Message {
        Message::from_payload(index, bytemuck::bytes_of(value))
    }
}

impl Codec<[u8]> for Bytes {
    #[inline]
    fn message(index: usize, value: &[u8]) -> Message {
        Message::from_payload(index, value)
    }
}

/// What a [`Handler`] marks: it takes `T`s (sent by reference) in codec
/// `C`, and is `Send`, `Sync` and `Copy` whatever they are.
type Takes<T, C> = (fn(&T), fn() -> C);

/// A registered handler that takes values of type `T`, which travel as
/// codec `C` says ([`handler`], [`pod_handler`], [`bytes_handler`]). Copy
/// it anywhere: it is the handler's index.
pub struct Handler<T: ?Sized, C = Serde> {
    index: usize,
    takes: PhantomData<Takes<T, C>>,
}

impl<T: ?Sized, C> Clone for Handler<T, C> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: ?Sized, C> Copy for Handler<T, C> {}

impl<T: ?Sized, C> std::fmt::Debug for Handler<T, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Handler<{}>({})", std::any::type_name::<T>(), self.index)
    }
}

impl<T: ?Sized, C> Handler<T, C> {
    /// The handler's index in every PE's table (what the byte API's
    /// messages carry).
    pub fn index(self) -> usize {
        self.index
    }

    /// The handler registered at `index`, typed: for a library whose own
    /// handler reads `T`s in codec `C` (the extensions' invokables). A
    /// message it cannot read still aborts there, naming it; nothing
    /// unsafe follows from a wrong `T`.
    pub fn from_index(index: usize) -> Self {
        Handler::at(index)
    }

    fn at(index: usize) -> Self {
        Handler {
            index,
            takes: PhantomData,
        }
    }
}

impl<T: ?Sized, C: Codec<T>> Handler<T, C> {
    /// A message carrying `value` to this handler.
    #[inline]
    pub fn message(self, value: &T) -> Message {
        C::message(self.index, value)
    }

    /// Sends `value` to this handler on PE `pe` (`CmiSyncSendAndFree` of
    /// the value's message).
    #[inline]
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

    /// Sends `value` to this handler on every member of `group`
    /// (`CmiSyncMulticastAndFree`).
    pub fn multicast(self, group: crate::Group, value: &T) {
        crate::sync_multicast_and_free(group, self.message(value));
    }

    /// Puts `value` for this handler in the calling PE's scheduler queue,
    /// at the back, with the middle priority.
    #[inline]
    pub fn enqueue(self, value: &T) {
        crate::enqueue(self.message(value));
    }

    /// Puts `value` for this handler in the calling PE's scheduler queue
    /// with `queueing`'s priority (`CsdEnqueueGeneral`): smaller integer
    /// priorities run first.
    pub fn enqueue_with(self, value: &T, queueing: crate::Queueing) {
        crate::enqueue_general(self.message(value), queueing);
    }
}

/// How a slot's handler reads its `T` from a message.
pub trait Decode<T> {
    /// `msg`'s value, for the handler registered at `at` (aborts if it is
    /// not a `T`).
    fn read(msg: &Message, at: &Location<'_>) -> T;
}

impl<T: DeserializeOwned> Decode<T> for Serde {
    fn read(msg: &Message, at: &Location<'_>) -> T {
        decode(msg, at)
    }
}

impl<T: bytemuck::Pod> Decode<T> for Pod {
    #[inline]
    fn read(msg: &Message, at: &Location<'_>) -> T {
        read_pod(msg, at)
    }
}

/// Reads `msg` as a `T` for the handler registered at `at`, or aborts
/// saying why.
fn decode<T: DeserializeOwned>(msg: &Message, at: &Location<'_>) -> T {
    postcard::from_bytes(msg.payload()).unwrap_or_else(|e| not_a::<T>(msg, at, &e))
}

/// Reads `msg`'s payload as a `T` of its exact size, or aborts saying why.
#[inline]
fn read_pod<T: bytemuck::Pod>(msg: &Message, at: &Location<'_>) -> T {
    match bytemuck::try_pod_read_unaligned(msg.payload()) {
        Ok(value) => value,
        Err(_) => not_a::<T>(
            msg,
            at,
            &format!(
                "a `{}` is {} bytes",
                std::any::type_name::<T>(),
                size_of::<T>()
            ),
        ),
    }
}

#[cold]
fn not_a<T>(msg: &Message, at: &Location<'_>, why: &dyn std::fmt::Display) -> ! {
    crate::abort(&format!(
        "the typed handler registered at {at} got a message of {} bytes that is not a `{}`: {why}",
        msg.payload().len(),
        std::any::type_name::<T>()
    ))
}

fn register<F: 'static>(at: &'static Location<'static>, f: impl Fn(Message) + 'static) -> usize {
    crate::rt::handlers::register_entry(Entry::Closure(Rc::new(f)), HandlerIdent::of::<F>().at(at))
}

/// Registers `f` as a handler of `T` values on the calling PE and returns
/// it (every PE must register the same handlers in the same order, as
/// with [`register_handler`](crate::register_handler)). Values travel in
/// postcard ([`Serde`]).
#[track_caller]
pub fn handler<T, F>(f: F) -> Handler<T>
where
    T: DeserializeOwned + 'static,
    F: Fn(T) + 'static,
{
    let at = Location::caller();
    Handler::at(register::<F>(at, move |msg: Message| f(decode(&msg, at))))
}

/// As [`handler`], for a `bytemuck::Pod` type whose values travel as their
/// bytes ([`Pod`]): no encoding on the way out, one unaligned load on the
/// way in.
///
/// ```
/// let code = converse::Converse::new().default_pes(2).run(|_| {
///     let add = converse::pod_handler(|[x, y]: [f64; 2]| {
///         assert_eq!(x + y, 3.5);
///         converse::exit(0);
///     });
///     if converse::my_pe() == 1 {
///         add.send(0, &[1.5, 2.0]);
///     }
/// });
/// assert_eq!(code.unwrap(), 0);
/// ```
#[track_caller]
pub fn pod_handler<T, F>(f: F) -> Handler<T, Pod>
where
    T: bytemuck::Pod,
    F: Fn(T) + 'static,
{
    let at = Location::caller();
    Handler::at(register::<F>(at, move |msg: Message| f(read_pod(&msg, at))))
}

/// A handler of bytes ([`Bytes`]): `f` borrows the payload of the message
/// that arrived, without a copy.
#[track_caller]
pub fn bytes_handler<F>(f: F) -> Handler<[u8], Bytes>
where
    F: Fn(&[u8]) + 'static,
{
    let at = Location::caller();
    Handler::at(register::<F>(at, move |msg: Message| f(msg.payload())))
}

/// A handler of `T` values registered now and defined later
/// ([`handler_slot`], [`pod_handler_slot`], [`HandlerSlot::fill`]). It
/// belongs to the PE that made it (it is not `Send`).
pub struct HandlerSlot<T, C = Serde> {
    handler: Handler<T, C>,
    at: &'static Location<'static>,
    filled: Cell<bool>,
    /// Not `Send`: `fill` defines the handler of the PE that made it.
    mine: PhantomData<Rc<()>>,
}

impl<T: 'static, C: Decode<T>> HandlerSlot<T, C> {
    /// The handler, to send to (before or after the slot is filled).
    pub fn handler(&self) -> Handler<T, C> {
        self.handler
    }

    /// Defines the handler as `f`, once: a second definition aborts. The
    /// handler's entry is replaced by `f` itself, so a filled slot costs
    /// what a handler registered with `f` would.
    #[track_caller]
    pub fn fill<F: Fn(T) + 'static>(&self, f: F) {
        if self.filled.replace(true) {
            crate::abort(&format!(
                "the handler slot made at {} was filled twice (again at {})",
                self.at,
                Location::caller()
            ));
        }
        let at = self.at;
        crate::rt::handlers::replace_entry(
            self.handler.index,
            Entry::Closure(Rc::new(move |msg: Message| f(C::read(&msg, at)))),
        );
    }
}

/// A slot's registration, with a handler that aborts until it is filled.
fn slot<T: 'static, C: 'static>(at: &'static Location<'static>) -> HandlerSlot<T, C> {
    let index = crate::rt::handlers::register_entry(
        Entry::Closure(Rc::new(move |_: Message| {
            crate::abort(&format!(
                "the handler slot made at {at} got a message before it was filled"
            ))
        })),
        // Slots of one type told apart by where they were made (the same
        // in every process of one program).
        HandlerIdent::named::<HandlerSlot<T, C>>(&at.to_string()).at(at),
    );
    HandlerSlot {
        handler: Handler::at(index),
        at,
        filled: Cell::new(false),
        mine: PhantomData,
    }
}

/// Registers a handler of `T` values on the calling PE now, to be defined
/// later with [`HandlerSlot::fill`]: so that handlers that send to each
/// other (or to themselves through a value) need no registration order
/// between them. It takes its index now, as [`handler`] would.
#[track_caller]
pub fn handler_slot<T: DeserializeOwned + 'static>() -> HandlerSlot<T> {
    slot(Location::caller())
}

/// As [`handler_slot`], for a `bytemuck::Pod` type ([`pod_handler`]).
#[track_caller]
pub fn pod_handler_slot<T: bytemuck::Pod>() -> HandlerSlot<T, Pod> {
    slot(Location::caller())
}

/// Where a typed reduction's result goes: a handler of its type, on the
/// reduction's root ([`Reduction::then`]).
pub trait ReductionTarget<T> {
    /// The handler that receives the result's message (postcard of the
    /// value, as the struct-form reductions deliver it).
    fn result_handler(&self) -> usize;
}

impl<T: DeserializeOwned> ReductionTarget<T> for Handler<T> {
    fn result_handler(&self) -> usize {
        self.index
    }
}

/// Which PEs a typed reduction spans, and how it is matched.
enum Scope {
    /// Every PE, by call order ([`reduce_struct`](crate::reduce_struct)).
    Order,
    /// Every PE, by ID.
    Id(crate::ReductionId),
    /// The listed PEs, by ID (the result on the first).
    List(Vec<usize>, crate::ReductionId),
    /// A group's members, by ID (the result on its first member).
    Group(crate::Group, crate::ReductionId),
}

/// A contribution to a typed reduction, sent on its way by
/// [`then`](Reduction::then) ([`reduction`]).
#[must_use = "a reduction is joined by `.then(target)`"]
pub struct Reduction<T, M> {
    value: T,
    merge: M,
    scope: Scope,
}

/// This PE's `value` for a reduction that `merge(local, children)`
/// combines up the spanning tree; `.then(target)` joins it (every PE of
/// the reduction must, in the same order for the default matching by call
/// order, as [`reduce_struct`](crate::reduce_struct) says).
///
/// ```
/// let code = converse::Converse::new().default_pes(4).run(|_| {
///     let total = converse::handler(|sum: u64| {
///         assert_eq!(sum, 1 + 2 + 3 + 4);
///         converse::exit(0);
///     });
///     let mine = converse::my_pe() as u64 + 1;
///     converse::reduction(mine, |a, rest| a + rest.iter().sum::<u64>()).then(total);
/// });
/// assert_eq!(code.unwrap(), 0);
/// ```
#[doc(alias = "CmiReduceStruct")]
pub fn reduction<T, M>(value: T, merge: M) -> Reduction<T, M>
where
    T: Serialize + DeserializeOwned + 'static,
    M: FnOnce(T, Vec<T>) -> T + 'static,
{
    Reduction {
        value,
        merge,
        scope: Scope::Order,
    }
}

impl<T, M> Reduction<T, M>
where
    T: Serialize + DeserializeOwned + 'static,
    M: FnOnce(T, Vec<T>) -> T + 'static,
{
    /// Matched by `id` instead of call order (`CmiReduceStructID`).
    pub fn by_id(mut self, id: crate::ReductionId) -> Self {
        self.scope = Scope::Id(id);
        self
    }

    /// Over the PEs of `pes`, matched by `id`; the result goes to `pes[0]`
    /// (`CmiListReduceStruct`).
    pub fn over(mut self, pes: &[usize], id: crate::ReductionId) -> Self {
        self.scope = Scope::List(pes.to_vec(), id);
        self
    }

    /// Over the members of `group`, matched by `id`; the result goes to
    /// its first member (`CmiGroupReduceStruct`).
    pub fn over_group(mut self, group: crate::Group, id: crate::ReductionId) -> Self {
        self.scope = Scope::Group(group, id);
        self
    }

    /// Joins the reduction; its result runs `f` on the root (PE 0, the
    /// list's first PE, the group's first member) as a handler would:
    /// after the call that completed it, from the scheduler. Every PE
    /// gives its own `f`; only the root's runs, and the others' are
    /// dropped once their contribution has left.
    ///
    /// ```
    /// let code = converse::Converse::new().default_pes(3).run(|_| {
    ///     let mine = converse::my_pe() as u64;
    ///     converse::reduction(mine, |a, rest| a.max(rest.into_iter().max().unwrap_or(0)))
    ///         .then_run(|highest| {
    ///             assert_eq!(highest, 2);
    ///             converse::exit(0);
    ///         });
    /// });
    /// assert_eq!(code.unwrap(), 0);
    /// ```
    pub fn then_run(self, f: impl FnOnce(T) + 'static) {
        let over = self.scope.over();
        crate::cmi::reduce::reduce_struct_then(over, self.value, self.merge, f);
    }

    /// Joins the reduction; its result runs `target` on the root.
    pub fn then(self, target: impl ReductionTarget<T>) {
        let over = self.scope.over();
        let dest = target.result_handler();
        crate::cmi::reduce::reduce_struct_over(over, self.value, self.merge, dest);
    }
}

impl Scope {
    /// The same scope, as the reductions take it.
    fn over(&self) -> crate::cmi::reduce::Over<'_> {
        use crate::cmi::reduce::Over;
        match self {
            Scope::Order => Over::All,
            Scope::Id(id) => Over::AllById(*id),
            Scope::List(pes, id) => Over::List(pes, *id),
            Scope::Group(group, id) => Over::Group(*group, *id),
        }
    }
}
