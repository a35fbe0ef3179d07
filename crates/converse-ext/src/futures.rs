//! Futures (the manual's chapter 8, `Cfuture`): a value one PE waits for
//! and any PE, in any process, fills.
//!
//! # The model
//!
//! A future resides on the PE that created it ([`create`]); its handle
//! ([`Cfuture`]) is plain data that may travel anywhere
//! ([`Cfuture::to_bytes`]). [`set`] on the resident PE stores the value at
//! once; anywhere else it sends the bytes in a message to that PE, whose
//! handler stores them. [`wait`] blocks the calling user-level thread on
//! the resident PE until the value is there (it refuses, with the core's
//! message, in a handler or the start function: only threads block), and
//! returns it. [`destroy`] frees the future and its value.
//!
//! # Set-up
//!
//! The module's handler must be registered on every PE, in the same place
//! of every PE's registration order: call [`module_init`]
//! (`CfutureModuleInit`) on every PE where handlers are registered, or
//! [`install`] once before the job starts (it registers `module_init` as a
//! module-init hook of the core, run on every PE before the start
//! function).
//!
//! # Typed futures
//!
//! [`TypedFuture<T>`] is the same future holding a `T` (postcard, the
//! crate's one codec): `set(&value)` from any PE, `wait()` on a thread or
//! `.await` in a task ([`crate::tasks::spawn`]) gives the `T` back and
//! frees the future. An `#[invokable]` that returns a value gives its
//! caller one.
//!
//! ```
//! use converse_ext::futures::{self, TypedFuture};
//!
//! futures::install();
//! let code = converse::Converse::new().default_pes(2).run(|_| {
//!     let answer = converse::handler(|f: TypedFuture<String>| f.set(&"forty-two".to_string()));
//!     if converse::my_pe() == 0 {
//!         let f = TypedFuture::<String>::new();
//!         answer.send(1, &f);
//!         converse_ext::tasks::spawn(async move {
//!             assert_eq!(f.await, "forty-two");
//!             converse::exit(0);
//!         });
//!     }
//! });
//! assert_eq!(code.unwrap(), 0);
//! ```
//!
//! # Invariants
//!
//! - A future is filled at most once: a second `set` aborts the job naming
//!   the future and both PEs.
//! - Values are bytes, kept behind an `Rc`: a waiter gets the value without
//!   a copy, and it lives until the future is destroyed and the waiters
//!   drop it.
//!
//! # Concurrency
//!
//! Each PE's futures are its own (a `Cpv`), touched by its own threads and
//! handlers only; other PEs reach them through messages.
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::{Future, IntoFuture};
use std::ops::Deref;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use std::marker::PhantomData;

use converse::{Cpv, Event, Message};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A handle to a future (`Cfuture`): the PE it resides on and its number
/// there. Plain data: copy it, send it ([`to_bytes`](Cfuture::to_bytes)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cfuture {
    /// The PE the future resides on.
    pub pe: usize,
    /// Its number on that PE.
    pub id: u64,
}

impl Cfuture {
    /// Length of [`Cfuture::to_bytes`].
    pub const BYTES: usize = 16;

    /// The handle as bytes, for a message payload.
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut b = [0; Self::BYTES];
        b[..8].copy_from_slice(&(self.pe as u64).to_le_bytes());
        b[8..].copy_from_slice(&self.id.to_le_bytes());
        b
    }

    /// The handle [`to_bytes`](Cfuture::to_bytes) gave, if `bytes` are one.
    pub fn from_bytes(bytes: &[u8]) -> Option<Cfuture> {
        let b: &[u8; Self::BYTES] = bytes.try_into().ok()?;
        Some(Cfuture {
            pe: usize::try_from(u64::from_le_bytes(b[..8].try_into().ok()?)).ok()?,
            id: u64::from_le_bytes(b[8..].try_into().ok()?),
        })
    }
}

/// A future's value: bytes, shared without copying between the future and
/// its waiters. Made empty-handed by [`create_value`], filled, then stored
/// with [`store_value`] (the manual's faster path).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FutureValue(Rc<Vec<u8>>);

impl FutureValue {
    /// The bytes, to fill before [`store_value`]; `None` once the value is
    /// shared (stored, or cloned).
    pub fn bytes_mut(&mut self) -> Option<&mut Vec<u8>> {
        Rc::get_mut(&mut self.0)
    }
}

impl Deref for FutureValue {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

/// A future on its resident PE.
#[derive(Default)]
struct Slot {
    value: Option<FutureValue>,
    filled: Rc<Event>,
    /// The `std::task` wakers of the async code awaiting it
    /// ([`ValueFuture`]).
    wakers: Vec<Waker>,
}

/// One PE's futures.
struct State {
    next: Cell<u64>,
    slots: RefCell<HashMap<u64, Slot>>,
    /// The handler of remote sets.
    handler: usize,
}

static STATE: Cpv<State> = Cpv::new();

/// Registers the futures' handler on the calling PE and makes its table
/// (`CfutureModuleInit`). Call it on every PE where handlers are
/// registered (see the module comment); a second call on a PE does
/// nothing.
#[doc(alias = "CfutureModuleInit")]
pub fn module_init() {
    if STATE.is_initialized() {
        return;
    }
    let handler = converse::register_handler(on_set);
    crate::tasks::module_init();
    STATE.initialize(State {
        next: Cell::new(1),
        slots: RefCell::new(HashMap::new()),
        handler,
    });
}

/// Registers [`module_init`] with the core, so that every PE of the jobs
/// started after this call runs it before the start function. Returns
/// false if it was registered already.
pub fn install() -> bool {
    converse::register_module_init("converse-ext futures", module_init)
}

fn state() -> Rc<State> {
    if !STATE.is_initialized() {
        converse::abort(&format!(
            "futures used on PE {} before futures::module_init (call it on every PE, or futures::install before the job)",
            converse::my_pe()
        ));
    }
    STATE.get()
}

/// An empty future residing on the calling PE (`CfutureCreate`).
#[doc(alias = "CfutureCreate")]
pub fn create() -> Cfuture {
    let s = state();
    let id = s.next.get();
    s.next.set(id + 1);
    s.slots.borrow_mut().insert(id, Slot::default());
    Cfuture {
        pe: converse::my_pe(),
        id,
    }
}

/// Stores a copy of `value` in `future` (`CfutureSet`), from any PE: on
/// another, the bytes travel to the future's PE in a message.
///
/// # Panics
/// Aborts the job if the future is set a second time, was destroyed, or
/// names no PE of the job.
#[doc(alias = "CfutureSet")]
pub fn set(future: Cfuture, value: &[u8]) {
    store(future, FutureValue(Rc::new(value.to_vec())));
}

/// A buffer of `nbytes` zero bytes to fill and store with [`store_value`]
/// (`CfutureCreateValue`).
#[doc(alias = "CfutureCreateValue")]
pub fn create_value(nbytes: usize) -> FutureValue {
    FutureValue(Rc::new(vec![0; nbytes]))
}

/// Stores `value` in `future` without copying it on the future's own PE
/// (`CfutureStoreValue`; the manual also calls it `CfutureStoreBuffer`);
/// elsewhere as [`set`].
#[doc(alias = "CfutureStoreValue")]
#[doc(alias = "CfutureStoreBuffer")]
pub fn store_value(future: Cfuture, value: FutureValue) {
    store(future, value);
}

fn store(future: Cfuture, value: FutureValue) {
    let s = state();
    let me = converse::my_pe();
    if future.pe == me {
        fill(&s, future, value, me);
        return;
    }
    if future.pe >= converse::num_pes() {
        converse::abort(&format!(
            "CfutureSet on PE {me} of future {} of PE {}, which is no PE of the job",
            future.id, future.pe
        ));
    }
    let mut payload = Vec::with_capacity(8 + value.len());
    payload.extend_from_slice(&future.id.to_le_bytes());
    payload.extend_from_slice(&value);
    converse::sync_send_and_free(future.pe, Message::from_payload(s.handler, &payload));
}

/// Fills `future` (of this PE) with `value`, set by PE `from`.
fn fill(s: &State, future: Cfuture, value: FutureValue, from: usize) {
    let filled: (Rc<Event>, Vec<Waker>) = {
        let mut slots = s.slots.borrow_mut();
        let Some(slot) = slots.get_mut(&future.id) else {
            drop(slots);
            converse::abort(&format!(
                "future {} of PE {} set by PE {from}, but it does not exist (destroyed, or never created)",
                future.id, future.pe
            ));
        };
        if slot.value.is_some() {
            drop(slots);
            converse::abort(&format!(
                "future {} of PE {} set a second time, by PE {from} (a future is filled once)",
                future.id, future.pe
            ));
        }
        slot.value = Some(value);
        (slot.filled.clone(), std::mem::take(&mut slot.wakers))
    };
    filled.0.set();
    for w in filled.1 {
        w.wake();
    }
}

/// A remote set arrived.
fn on_set(msg: Message) {
    let me = converse::my_pe();
    let Some((id, bytes)) = msg
        .payload()
        .split_first_chunk::<8>()
        .map(|(id, rest)| (u64::from_le_bytes(*id), rest))
    else {
        converse::abort(&format!(
            "a malformed future value from PE {} ({} bytes)",
            msg.src_pe(),
            msg.payload_len()
        ));
    };
    let value = FutureValue(Rc::new(bytes.to_vec()));
    fill(&state(), Cfuture { pe: me, id }, value, msg.src_pe());
}

/// Waits until `future` is filled and returns its value (`CfutureWait`):
/// at once if it is, else blocking the calling user-level thread (only
/// threads block: in a handler or the start function the job aborts
/// saying so). Only on the future's own PE.
///
/// # Panics
/// Aborts the job on another PE, or if the future was destroyed.
#[doc(alias = "CfutureWait")]
pub fn wait(future: Cfuture) -> FutureValue {
    use std::ops::ControlFlow;
    loop {
        let next = with_own_slot(future, "CfutureWait", |slot| match &slot.value {
            Some(v) => ControlFlow::Break(v.clone()),
            None => ControlFlow::Continue(slot.filled.clone()),
        });
        match next {
            ControlFlow::Break(value) => return value,
            ControlFlow::Continue(filled) => filled.wait(),
        }
    }
}

/// Runs `f` on the slot of `future`, which must reside on the calling PE
/// and exist; otherwise the job ends naming `what`, the PE and the future.
fn with_own_slot<R>(future: Cfuture, what: &str, f: impl FnOnce(&mut Slot) -> R) -> R {
    let s = state();
    let me = converse::my_pe();
    if future.pe != me {
        converse::abort(&format!(
            "{what} on PE {me} of future {} of PE {} (only its own PE may wait for it)",
            future.id, future.pe
        ));
    }
    let mut slots = s.slots.borrow_mut();
    match slots.get_mut(&future.id) {
        Some(slot) => f(slot),
        None => {
            drop(slots);
            converse::abort(&format!(
                "{what} on PE {me} of future {}, which does not exist (destroyed?)",
                future.id
            ))
        }
    }
}

/// Frees `future` and its value (`CfutureDestroy`); waiters that got the
/// value keep it. Only on the future's own PE.
///
/// # Panics
/// Aborts the job on another PE.
#[doc(alias = "CfutureDestroy")]
pub fn destroy(future: Cfuture) {
    let s = state();
    let me = converse::my_pe();
    if future.pe != me {
        converse::abort(&format!(
            "CfutureDestroy on PE {me} of future {} of PE {} (only its own PE may destroy it)",
            future.id, future.pe
        ));
    }
    let slot = s.slots.borrow_mut().remove(&future.id);
    // Async code still awaiting it is polled once more, and aborts the job
    // naming the destroyed future, rather than waiting forever.
    for w in slot.map(|s| s.wakers).unwrap_or_default() {
        w.wake();
    }
}

/// True if `future` (of the calling PE) holds a value (not in the
/// manual; what a poll without blocking needs).
pub fn is_filled(future: Cfuture) -> bool {
    future.pe == converse::my_pe()
        && state()
            .slots
            .borrow()
            .get(&future.id)
            .is_some_and(|s| s.value.is_some())
}

/// The value of a [`Cfuture`] as a `std::future::Future`, for async code on
/// the future's PE (see [`crate::tasks::spawn`]): `future.await` (through
/// [`IntoFuture`]) gives what [`wait`] gives, without a user-level thread.
/// Polled on another PE, or after the future was destroyed, it aborts the
/// job as `wait` does.
pub struct ValueFuture {
    future: Cfuture,
}

impl IntoFuture for Cfuture {
    type Output = FutureValue;
    type IntoFuture = ValueFuture;
    fn into_future(self) -> ValueFuture {
        ValueFuture { future: self }
    }
}

impl Future for ValueFuture {
    type Output = FutureValue;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<FutureValue> {
        with_own_slot(self.future, "a Cfuture awaited", |slot| {
            if let Some(v) = &slot.value {
                return Poll::Ready(v.clone());
            }
            if !slot.wakers.iter().any(|w| w.will_wake(cx.waker())) {
                slot.wakers.push(cx.waker().clone());
            }
            Poll::Pending
        })
    }
}

/// A future of a `T` value (see "Typed futures" in the module comment): a
/// [`Cfuture`] whose value is a `T` in postcard. Plain data: copy it, send
/// it in a typed message (it is `Serialize`), set it from any PE; the PE
/// that made it waits for it, and the wait frees it.
pub struct TypedFuture<T> {
    handle: Cfuture,
    holds: PhantomData<fn() -> T>,
}

impl<T> Clone for TypedFuture<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for TypedFuture<T> {}

impl<T> std::fmt::Debug for TypedFuture<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TypedFuture<{}>({} of PE {})",
            std::any::type_name::<T>(),
            self.handle.id,
            self.handle.pe
        )
    }
}

impl<T> PartialEq for TypedFuture<T> {
    fn eq(&self, other: &Self) -> bool {
        self.handle == other.handle
    }
}

impl<T> Eq for TypedFuture<T> {}

impl<T> Serialize for TypedFuture<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (self.handle.pe as u64, self.handle.id).serialize(s)
    }
}

impl<'de, T> Deserialize<'de> for TypedFuture<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let (pe, id) = <(u64, u64)>::deserialize(d)?;
        let pe = usize::try_from(pe).map_err(serde::de::Error::custom)?;
        Ok(TypedFuture {
            handle: Cfuture { pe, id },
            holds: PhantomData,
        })
    }
}

impl<T: Serialize + DeserializeOwned> Default for TypedFuture<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Serialize + DeserializeOwned> TypedFuture<T> {
    /// An empty future residing on the calling PE (`CfutureCreate`).
    #[doc(alias = "CfutureCreate")]
    pub fn new() -> Self {
        TypedFuture {
            handle: create(),
            holds: PhantomData,
        }
    }

    /// The byte future underneath.
    pub fn handle(self) -> Cfuture {
        self.handle
    }

    /// Stores `value` in the future, from any PE (`CfutureSet`); aborts as
    /// [`set`] does (a second set, a freed future).
    #[doc(alias = "CfutureSet")]
    pub fn set(self, value: &T) {
        let bytes = postcard::to_allocvec(value).unwrap_or_else(|e| {
            converse::abort(&format!(
                "a `{}` for future {} of PE {} cannot be encoded: {e}",
                std::any::type_name::<T>(),
                self.handle.id,
                self.handle.pe
            ))
        });
        store(self.handle, FutureValue(Rc::new(bytes)));
    }

    /// True if the future (of the calling PE) holds its value.
    pub fn is_filled(self) -> bool {
        is_filled(self.handle)
    }

    /// Waits for the value (`CfutureWait`: only a user-level thread of
    /// the future's PE blocks), then frees the future and returns it.
    #[doc(alias = "CfutureWait")]
    pub fn wait(self) -> T {
        let bytes = wait(self.handle);
        destroy(self.handle);
        self.decode(&bytes)
    }

    fn decode(self, bytes: &[u8]) -> T {
        postcard::from_bytes(bytes).unwrap_or_else(|e| {
            converse::abort(&format!(
                "future {} of PE {} holds {} bytes that are not a `{}`: {e}",
                self.handle.id,
                self.handle.pe,
                bytes.len(),
                std::any::type_name::<T>()
            ))
        })
    }
}

/// A [`TypedFuture`]'s value as a `std::future::Future`, for async code on
/// its PE: gives the `T` and frees the future.
pub struct TypedValueFuture<T> {
    future: TypedFuture<T>,
    value: ValueFuture,
}

impl<T: Serialize + DeserializeOwned> IntoFuture for TypedFuture<T> {
    type Output = T;
    type IntoFuture = TypedValueFuture<T>;
    fn into_future(self) -> TypedValueFuture<T> {
        TypedValueFuture {
            future: self,
            value: self.handle.into_future(),
        }
    }
}

impl<T: Serialize + DeserializeOwned> Future for TypedValueFuture<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        // Both fields are `Unpin` (plain data).
        match Pin::new(&mut self.value).poll(cx) {
            Poll::Ready(bytes) => {
                destroy(self.future.handle);
                Poll::Ready(self.future.decode(&bytes))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}
