//! Automatic parameter marshalling (the manual's chapter 6, `Cpm`): call a
//! function on another PE in one line.
//!
//! ```ignore
//! use converse_ext::cpm::{self, invokable};
//!
//! #[invokable]
//! fn print_integer(n: i32) {
//!     converse::printf(format_args!("{n}\n"));
//! }
//!
//! // On any PE of a running job: PE 3 calls print_integer(8).
//! Cpm_print_integer(cpm::send(3), 8);
//! ```
//!
//! # The model (the manual's §6.3, step by step)
//!
//! 1. A *destination* is built: [`send`], [`enqueue`] and its kinds,
//!    [`make_thread`], or one of the program's own ([`Destination`],
//!    [`DestinationSend`]).
//! 2. The *launcher* `Cpm_f` (written by [`invokable`]) allocates one
//!    message: an envelope of the destination's [`env_size`] bytes, then
//!    the arguments packed with postcard. Its handler is `f`'s *invoker*.
//! 3. It calls the destination's send function, which may put what it
//!    needs in the envelope ([`env()`]), switch the handler, and sends.
//! 4. On arrival the built-in destinations' handlers restore the invoker
//!    and detour the message (through the scheduler's queue, or into a new
//!    thread); the invoker unpacks the arguments and calls `f`.
//!
//! The payload is `[envelope length: u32 LE][envelope][arguments]`.
//!
//! [`env_size`]: Destination::env_size
//!
//! # Registration: the same handler numbers on every PE
//!
//! An invoker is a handler, so every PE registers every invokable, in the
//! same order. `#[invokable]` adds the function to a list before `main`
//! (a constructor, as C++ static initializers do) and installs this
//! module's init as a core module-init hook; on each PE the hook registers
//! the module's own handlers, then the listed invokables sorted by full
//! path (`crate::module::function`). The order is thus the same in every
//! process of a job, whatever order the linker ran the constructors in,
//! and whichever crates declared them. The manual's
//! `CpmInitializeThisModule` is implicit. The explicit form,
//! `#[invokable(explicit)]` and [`register`] on every PE at the same place
//! of its registrations, is for platforms without constructors and for
//! programs that want to choose the order.
//!
//! A library's invokables are listed if the program links the code that
//! holds them, which calling their launcher does.
//!
//! # Answers, and invokables as typed handlers
//!
//! A function that returns a value answers its caller: its launcher
//! returns a [`TypedFuture`](crate::futures::TypedFuture) of the value,
//! which a thread of the calling PE waits for (`wait()`) or async code
//! awaits (`.await` in [`tasks::spawn`](crate::tasks::spawn)), as
//! Lamellar's active messages do:
//!
//! ```
//! use converse_ext::cpm::{self, invokable};
//!
//! #[invokable]
//! fn square(x: u64) -> u64 {
//!     x * x
//! }
//!
//! let code = converse::Converse::new().default_pes(2).run(|_| {
//!     if converse::my_pe() == 0 {
//!         let answer = Cpm_square(cpm::send(1), 12);
//!         converse_ext::tasks::spawn(async move {
//!             assert_eq!(answer.await, 144);
//!             converse::exit(0);
//!         });
//!     }
//! });
//! assert_eq!(code.unwrap(), 0);
//! ```
//!
//! The future is filled once: a returning invokable sent to every PE
//! ([`CPM_ALL`]) answers more than once, and the second answer aborts the
//! job naming the future.
//!
//! Every invokable is also a typed handler of its arguments taken as one
//! value (see [`Invokable`]): a typed reduction may end in it, and
//! `CPM_F.handler()` sends to it as a [`converse::typed::Handler`] does:
//!
//! ```
//! #[converse_ext::invokable]
//! fn report(total: u64) {
//!     assert_eq!(total, 0 + 1 + 2);
//!     converse::exit(0);
//! }
//!
//! let code = converse::Converse::new().default_pes(3).run(|_| {
//!     let mine = converse::my_pe() as u64;
//!     converse::reduction(mine, |a, rest| a + rest.iter().sum::<u64>()).then(&CPM_REPORT);
//! });
//! assert_eq!(code.unwrap(), 0);
//! ```
//!
//! A reduction of another type than the invokable takes, or an answer
//! taken as another type than the function returns, does not compile:
//!
//! ```compile_fail,E0277
//! #[converse_ext::invokable]
//! fn report(total: u64) {}
//!
//! converse::Converse::new().run(|_| {
//!     converse::reduction(1.5f64, |a, _| a).then(&CPM_REPORT);
//! });
//! ```
//!
//! ```compile_fail,E0308
//! use converse_ext::futures::TypedFuture;
//!
//! #[converse_ext::invokable]
//! fn name() -> String { "x".into() }
//!
//! converse::Converse::new().run(|_| {
//!     let answer: TypedFuture<u64> = Cpm_name(converse_ext::cpm::send(0));
//! });
//! ```
//!
//! # What cannot be invokable: compile errors
//!
//! An argument whose type cannot travel is refused where it is declared,
//! with this module's message ("`NotSerde` cannot be an argument of an
//! #[invokable] function: it cannot travel to another PE", and a note
//! saying to derive serde's traits):
//!
//! ```compile_fail,E0277
//! struct NotSerde(std::rc::Rc<u8>);
//!
//! #[converse_ext::invokable]
//! fn takes(x: NotSerde) {}
//! ```
//!
//! The manual's simple types derive serde's traits; its pointer types are
//! owned values:
//!
//! ```
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Coordinate { x: f64, y: f64 }
//!
//! #[converse_ext::invokable]
//! fn takes(c: Coordinate, p: Box<i32>, name: &str, values: &[u32]) {}
//! ```
//!
//! A function that returns a value that cannot travel back, is generic,
//! or takes `&mut` is refused with a message saying why:
//!
//! ```compile_fail,E0277
//! #[converse_ext::invokable]
//! fn answers(x: i32) -> std::rc::Rc<i32> { std::rc::Rc::new(x) }
//! ```
//!
//! ```compile_fail
//! #[converse_ext::invokable]
//! fn generic<T: serde::Serialize>(x: T) {}
//! ```
//!
//! ```compile_fail
//! #[converse_ext::invokable]
//! fn mutates(x: &mut Vec<u8>) {}
//! ```

//! ```compile_fail
//! #[converse_ext::invokable]
//! fn hidden_generic(x: impl serde::Serialize) {}
//! ```
//!
//! ```compile_fail
//! #[converse_ext::invokable]
//! fn conditional(#[cfg(unix)] x: u8) {}
//! ```
//!
//! # Invariants
//!
//! - A message's envelope length is within its payload, and an invoker
//!   unpacks exactly the rest; otherwise the job aborts naming the sending
//!   PE and the function (bytes from the wire are not trusted).
//! - An envelope restored by a built-in handler never names a built-in
//!   handler again (a forged message cannot loop).
//!
//! # Concurrency
//!
//! The lists of invokables are process-wide (`Mutex`), written before
//! `main` and by [`register`]; each PE's handler numbers are its own.
//! They live in a thread-local table beside the PE's `Cpv` state, so
//! that a launch finds its invoker with one thread-local look-up (the
//! `Cpv` look-up cost a launch about 10 ns, measured): a thread is one PE
//! at a time, the table is emptied when the PE's state is made (its
//! first [`module_init`]) and when that state drops (at the PE's
//! teardown, on its own thread), so it never outlives its PE nor shows
//! one PE's numbers to another. Messages are the only way between PEs.
use std::cell::RefCell;
use std::sync::{Mutex, OnceLock};

use converse::cth::MAX_STACK_SIZE;
use converse::{BitPrio, Cpv, Message, Queueing, Thread};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use converse_macros::invokable;

/// A function made invokable by [`invokable`]: its full path, where it
/// is declared, and how to register its handlers. `#[invokable] fn f`
/// declares one as `CPM_F`.
///
/// `A` is what the function takes as one value: `()` for no argument, the
/// argument's type for one (its owned form: `String` for `&str`, `Vec<T>`
/// for `&[T]`, `T` for `&T`), the tuple of them for more. The invokable is
/// then a typed handler of `A` too ([`Invokable::handler`]): a typed
/// reduction of `A` values may end in it
/// (`converse::reduction(v, merge).then(&CPM_F)`).
#[derive(Debug)]
pub struct Invokable<A = ()> {
    info: Info,
    takes: std::marker::PhantomData<fn(A)>,
}

/// An invokable's untyped part (what the lists hold).
#[derive(Debug)]
struct Info {
    name: &'static str,
    /// `file:line:column` of the declaration: orders two invokables of one
    /// path (declared in function bodies, or in a package's library and
    /// binary).
    site: &'static str,
    /// Registers the invoker and the direct invoker on the calling PE, as
    /// their own function types (so the core's comparison of handler
    /// tables tells invokers apart), and returns their numbers.
    register: fn() -> Registered,
    /// Its number in the process-wide list, taken when it is first
    /// registered on some PE.
    slot: OnceLock<usize>,
}

/// An invokable's two handlers on one PE: its invoker, which reads the
/// arguments behind a destination's envelope (the launcher's messages),
/// and its direct invoker, which reads them alone (a typed handler's
/// messages: a reduction's result, a [`Invokable::handler`] send).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Registered {
    invoker: usize,
    direct: usize,
}

impl Registered {
    /// The numbers `register_handler` gave the invoker and the direct
    /// invoker (what `#[invokable]`'s registration returns).
    pub fn new(invoker: usize, direct: usize) -> Registered {
        Registered { invoker, direct }
    }
}

const NOT_REGISTERED: Registered = Registered {
    invoker: usize::MAX,
    direct: usize::MAX,
};

impl<A> Invokable<A> {
    /// An invokable of name `name` (its full path), declared at `site`,
    /// whose handlers `register` registers; `#[invokable]` writes the call.
    pub const fn new(
        name: &'static str,
        site: &'static str,
        register: fn() -> Registered,
    ) -> Invokable<A> {
        Invokable {
            info: Info {
                name,
                site,
                register,
                slot: OnceLock::new(),
            },
            takes: std::marker::PhantomData,
        }
    }

    /// The function's full path.
    pub fn name(&self) -> &'static str {
        self.info.name
    }
}

impl<A: DeserializeOwned> Invokable<A> {
    /// The invokable as a typed handler of its arguments, on the calling
    /// PE (where it must be registered): `handler().send(pe, &args)` calls
    /// the function on `pe`, as the launcher with [`send`] does, without
    /// an envelope.
    pub fn handler(&'static self) -> converse::typed::Handler<A> {
        converse::typed::Handler::from_index(registered(&self.info).direct)
    }
}

/// A typed reduction of `A` values may end in the invokable: its result
/// calls the function on the reduction's root.
impl<A: DeserializeOwned> converse::typed::ReductionTarget<A> for &'static Invokable<A> {
    fn result_handler(&self) -> usize {
        registered(&self.info).direct
    }
}

impl Info {
    fn slot(&'static self) -> usize {
        *self.slot.get_or_init(|| {
            let mut all = lock(&SLOTS);
            all.push(self);
            all.len() - 1
        })
    }
}

/// Every invokable registered on some PE of this process, by slot.
static SLOTS: Mutex<Vec<&'static Info>> = Mutex::new(Vec::new());
/// The invokables the constructors listed, registered by every PE's init.
static AUTOMATIC: Mutex<Vec<&'static Info>> = Mutex::new(Vec::new());

fn lock<T>(m: &'static Mutex<T>) -> std::sync::MutexGuard<'static, T> {
    // A panic while the list was held leaves it whole (pushes only).
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One PE's state; its handler numbers for invokables are in
/// [`PE_INVOKERS`].
struct State {
    /// The handler of [`enqueue`] destinations on arrival.
    enqueue_handler: usize,
    /// The handler of [`make_thread`] destinations on arrival.
    thread_handler: usize,
}

static STATE: Cpv<State> = Cpv::new();

thread_local! {
    /// The calling thread's PE's invokers: slot → handler numbers
    /// (`NOT_REGISTERED` if not), filled while its [`State`] lives (see
    /// "Concurrency").
    static PE_INVOKERS: RefCell<Vec<Registered>> = const { RefCell::new(Vec::new()) };
}

impl Drop for State {
    fn drop(&mut self) {
        // At thread exit the table may be gone already, and with it the
        // numbers.
        let _ = PE_INVOKERS.try_with(|t| t.borrow_mut().clear());
    }
}

/// Sets the module up on the calling PE (`CpmModuleInit`): registers its
/// handlers, then every invokable a constructor listed, sorted by full
/// path. Call it on every PE at the same place of its registrations, or
/// let [`install`] do it (an `#[invokable]` installs it). A second call on
/// a PE does nothing.
#[doc(alias = "CpmModuleInit")]
#[doc(alias = "CpmInitializeThisModule")]
pub fn module_init() {
    if STATE.is_initialized() {
        return;
    }
    let enqueue_handler = converse::register_handler(on_enqueue);
    let thread_handler = converse::register_handler(on_make_thread);
    PE_INVOKERS.with_borrow_mut(Vec::clear);
    STATE.initialize(State {
        enqueue_handler,
        thread_handler,
    });
    for invokable in automatic_order(lock(&AUTOMATIC).clone()) {
        register_info(invokable);
    }
}

/// The listed invokables in registration order: sorted by full path, then
/// by where they are declared (two functions of one path), once each.
fn automatic_order(mut listed: Vec<&'static Info>) -> Vec<&'static Info> {
    listed.sort_by_key(|i| (i.name, i.site));
    listed.dedup_by(|a, b| std::ptr::eq(*a, *b));
    listed
}

/// Registers [`module_init`] as a core module-init hook, run on every PE
/// before the start function. `#[invokable]` calls it before `main`.
pub fn install() {
    converse::register_module_init("converse-ext cpm", module_init);
}

/// Registers `invokable`'s invoker on the calling PE (the explicit form
/// of `CpmInitializeThisModule`, for `#[invokable(explicit)]`): call it on
/// every PE at the same place of its registrations. Sets the module up
/// first if needed; registering one twice on a PE does nothing.
#[doc(alias = "CpmInitializeThisModule")]
pub fn register<A>(invokable: &'static Invokable<A>) {
    module_init();
    register_info(&invokable.info);
}

fn register_info(invokable: &'static Info) {
    let slot = invokable.slot();
    let known = PE_INVOKERS.with_borrow(|t| t.get(slot).copied());
    if known.is_some_and(|h| h != NOT_REGISTERED) {
        return;
    }
    // No borrow held: registering checks the handler table, which may
    // abort the job.
    let handlers = (invokable.register)();
    PE_INVOKERS.with_borrow_mut(|t| {
        if t.len() <= slot {
            t.resize(slot + 1, NOT_REGISTERED);
        }
        t[slot] = handlers;
    });
}

/// The handler number of `invokable`'s invoker on the calling PE.
///
/// # Panics
/// Aborts the job if it is not registered on this PE.
pub fn handler_index<A>(invokable: &'static Invokable<A>) -> usize {
    registered(&invokable.info).invoker
}

/// `invokable`'s handlers on the calling PE, or the job aborts.
fn registered(invokable: &Info) -> Registered {
    let registered = invokable
        .slot
        .get()
        .and_then(|&slot| PE_INVOKERS.with_borrow(|t| t.get(slot).copied()));
    match registered {
        Some(h) if h != NOT_REGISTERED => h,
        _ => converse::abort(&format!(
            "Cpm: {} is not registered on PE {} (an #[invokable(explicit)] needs \
             converse_ext::cpm::register on every PE)",
            invokable.name,
            converse::my_pe()
        )),
    }
}

/// Whether `handler` is an invoker registered on the calling PE: what a
/// destination's arrival handler checks before it restores a handler read
/// from an envelope (bytes from the wire).
pub fn is_invoker(handler: usize) -> bool {
    handler != NOT_REGISTERED.invoker
        && PE_INVOKERS.with_borrow(|t| t.iter().any(|r| r.invoker == handler))
}

/// The invoker a destination's arrival handler stored in the first four
/// bytes of `msg`'s envelope (as the built-in destinations and the
/// manual's `CpmEnqueueFIFO1` do), checked: an envelope too short, or a
/// number that is not an invoker of this PE, aborts the job naming the
/// sending PE and `what` (the destination).
pub fn envelope_invoker(msg: &Message, what: &str) -> usize {
    let Some(word) = env_ref(msg).first_chunk::<4>() else {
        malformed(msg, what, "no handler in its envelope")
    };
    let h = u32::from_le_bytes(*word) as usize;
    if !is_invoker(h) {
        malformed(
            msg,
            what,
            &format!("its envelope names handler {h}, which is not an invoker"),
        );
    }
    h
}

/// Where a destination sends: one PE, or a broadcast (`CPM_ALL`,
/// `CPM_OTHERS`). A `usize` converts to one PE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// One PE.
    Pe(usize),
    /// Every PE, this one included.
    #[doc(alias = "CPM_ALL")]
    All,
    /// Every PE but this one.
    #[doc(alias = "CPM_OTHERS")]
    Others,
}

/// Every PE, this one included (`CPM_ALL`).
pub const CPM_ALL: Target = Target::All;
/// Every PE but this one (`CPM_OTHERS`).
pub const CPM_OTHERS: Target = Target::Others;

impl From<usize> for Target {
    fn from(pe: usize) -> Target {
        Target::Pe(pe)
    }
}

/// Sends `msg` to `target` and frees it (`CmiSyncSendAndFree`, or the
/// broadcasts): what a send function ends with.
///
/// # Panics
/// Aborts the job if `target` is a PE that does not exist.
pub fn send_to(target: Target, msg: Message) {
    match target {
        Target::Pe(pe) => {
            let pes = converse::num_pes();
            if pe >= pes {
                converse::abort(&format!(
                    "Cpm on PE {}: a destination names PE {pe}, but the job has PEs 0..{pes}",
                    converse::my_pe()
                ));
            }
            converse::sync_send_and_free(pe, msg)
        }
        Target::All => converse::sync_broadcast_all_and_free(msg),
        Target::Others => converse::sync_broadcast_and_free(msg),
    }
}

/// A destination (`CpmDestination`): how much envelope it needs and its
/// send function. Implement it for the manual's "new types of
/// destinations" (§6.3), or use [`DestinationSend`], its C shape.
#[doc(alias = "CpmDestination")]
pub trait Destination {
    /// Bytes of envelope the send function needs (the C `envsize`).
    fn env_size(&self) -> usize;
    /// The send function (the C `sendfn`): `msg`'s handler is the
    /// invoker, its envelope [`env_size`](Destination::env_size) zero
    /// bytes ([`env()`]); it must see that the message reaches a PE and
    /// that the invoker runs there, with the message as it was launched.
    fn send(&self, msg: Message);
}

impl<D: Destination + ?Sized> Destination for &D {
    fn env_size(&self) -> usize {
        (**self).env_size()
    }
    fn send(&self, msg: Message) {
        (**self).send(msg)
    }
}

impl<D: Destination + ?Sized> Destination for Box<D> {
    fn env_size(&self) -> usize {
        (**self).env_size()
    }
    fn send(&self, msg: Message) {
        (**self).send(msg)
    }
}

/// The manual's destination structure (`CpmDestinationSend`, a pointer to
/// `struct CpmDestinationSend_s`): a send
/// function, an envelope size and a target, for destinations written as
/// in C.
#[doc(alias = "CpmDestinationSend")]
#[doc(alias = "CpmDestinationSend_s")]
#[derive(Clone, Copy, Debug)]
pub struct DestinationSend {
    /// The send function (`sendfn`), given this structure.
    pub send_fn: fn(&DestinationSend, Message),
    /// The envelope's size in bytes (`envsize`).
    pub env_size: usize,
    /// Where it goes (`pe`).
    pub pe: Target,
}

impl Destination for DestinationSend {
    fn env_size(&self) -> usize {
        self.env_size
    }
    fn send(&self, msg: Message) {
        (self.send_fn)(self, msg)
    }
}

/// The envelope of a Cpm message (`CpmEnv`): the bytes a send function
/// may write and its handlers read.
///
/// # Panics
/// Aborts the job if `msg` is not a well-formed Cpm message.
#[doc(alias = "CpmEnv")]
pub fn env(msg: &mut Message) -> &mut [u8] {
    let range = env_range(msg);
    &mut msg.payload_mut()[range]
}

/// The envelope of `msg` for a built-in send function that needs `size`
/// bytes of it: a program's destination that hands its messages on to
/// ours must have made room for theirs.
fn env_for<'m>(msg: &'m mut Message, size: usize, what: &str) -> &'m mut [u8] {
    let e = env(msg);
    if e.len() < size {
        let have = e.len();
        converse::abort(&format!(
            "{what} on PE {}: the message has {have} bytes of envelope, and {what} needs \
             {size} (a destination that hands messages to it must ask for its env_size)",
            converse::my_pe()
        ));
    }
    &mut e[..size]
}

/// The envelope of a Cpm message, to read ([`env()`]).
pub fn env_ref(msg: &Message) -> &[u8] {
    &msg.payload()[env_range(msg)]
}

/// Where a message's envelope lies in its payload.
fn env_range(msg: &Message) -> std::ops::Range<usize> {
    let payload = msg.payload();
    let len = payload
        .first_chunk::<4>()
        .map(|b| u32::from_le_bytes(*b) as usize);
    match len {
        Some(len) if len <= payload.len() - 4 => 4..4 + len,
        _ => malformed(msg, "Cpm", "its envelope overruns it"),
    }
}

fn malformed(msg: &Message, what: &str, why: &str) -> ! {
    converse::abort(&format!(
        "a malformed {what} message from PE {} on PE {} ({} payload bytes): {why}",
        msg.src_pe(),
        converse::my_pe(),
        msg.payload_len()
    ))
}

/// A type an invokable's argument may have: any that serde packs and
/// unpacks into an owned value (`Serialize + DeserializeOwned`; implemented
/// for all of them).
///
/// This replaces the manual's type declarations and pack functions
/// (§6.2): a "simple" type (`CpmDeclareSimple`, with `CpmPack_T` and
/// `CpmUnpack_T`) derives serde's `Serialize` and `Deserialize`; a
/// "pointer" type (`CpmDeclarePointer`, with `CpmPtrSize_T`, `CpmPtrPack_T`,
/// `CpmPtrUnpack_T` and `CpmPtrFree_T`) is an owned value (`Box<T>`,
/// `Vec<T>`, `String`), freed when the function returns. The built-in
/// `CpmDim` and array argument pair is one `&[T]` (or `Vec<T>`), `CpmStr`
/// a `&str` (or `String`); `int` and `double` (`CpmPack_int`,
/// `CpmPack_double`) are `i32` and `f64`. postcard's format is the
/// network interchange format: little-endian varints, the same on every
/// host.
#[doc(alias = "CpmDeclareSimple")]
#[doc(alias = "CpmDeclarePointer")]
#[doc(alias = "CpmPack_typeof")]
#[doc(alias = "CpmUnpack_typeof")]
#[doc(alias = "CpmPtrSize_typeof")]
#[doc(alias = "CpmPtrPack_typeof")]
#[doc(alias = "CpmPtrUnpack_typeof")]
#[doc(alias = "CpmPtrFree_typeof")]
#[doc(alias = "CpmPack_int")]
#[doc(alias = "CpmUnpack_int")]
#[doc(alias = "CpmPack_double")]
#[doc(alias = "CpmUnpack_double")]
#[doc(alias = "CpmDim")]
#[doc(alias = "CpmStr")]
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be an argument of an #[invokable] function: it cannot travel to another PE",
    label = "not `Serialize + DeserializeOwned`",
    note = "arguments are packed with serde: derive `Serialize` and `Deserialize` for the type, and pass owned values (the manual's pointer types become `Box`, `Vec` or `String`)"
)]
pub trait InvokableArg {}
impl<T: Serialize + DeserializeOwned> InvokableArg for T {}

/// A type an `#[invokable]` function may return: one that can travel back
/// to its caller in a [`TypedFuture`](crate::futures::TypedFuture)
/// (serde's `Serialize` and `DeserializeOwned`).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be returned by an #[invokable] function: it cannot travel back to the caller's PE",
    label = "not `Serialize + DeserializeOwned`",
    note = "the answer travels in a typed future: derive `Serialize` and `Deserialize` for the type, and return an owned value"
)]
pub trait InvokableReturn {}
impl<T: Serialize + DeserializeOwned> InvokableReturn for T {}

/// What the launchers and invokers call; not for programs.
#[doc(hidden)]
pub mod __private {
    pub use converse::Message;

    use super::*;

    /// Fails to compile, with `InvokableArg`'s message, for a `T` that
    /// cannot travel.
    #[inline(always)]
    pub fn assert_invokable_arg<T: InvokableArg>() {}

    /// Fails to compile, with `InvokableReturn`'s message, for a return
    /// type that cannot travel.
    #[inline(always)]
    pub fn assert_invokable_return<T: InvokableReturn>() {}

    pub use converse::register_handler;

    /// The constructor's call: lists `invokable` for every PE's init.
    pub fn add_automatic<A>(invokable: &'static Invokable<A>) {
        lock(&AUTOMATIC).push(&invokable.info);
        install();
    }

    /// The launcher's body: packs `args` behind `destination`'s envelope
    /// and calls its send function.
    pub fn launch<I, A: Serialize + ?Sized>(
        invokable: &'static Invokable<I>,
        destination: &impl Destination,
        args: &A,
    ) {
        let handler = handler_index(invokable);
        let env = destination.env_size();
        let env_len = u32::try_from(env).unwrap_or_else(|_| {
            converse::abort(&format!(
                "Cpm_{}: an envelope of {env} bytes",
                short_name(invokable)
            ))
        });
        // Sized first, then packed straight into the message: no buffer
        // between (measured: a 256-byte stack buffer and a copy cost more
        // than the sizing pass for the small argument lists Cpm sends).
        let size = postcard::experimental::serialized_size(args)
            .unwrap_or_else(|e| cannot_pack(invokable, e));
        let mut msg = Message::new(handler, 4 + env + size);
        let payload = msg.payload_mut();
        payload[..4].copy_from_slice(&env_len.to_le_bytes());
        let into = Into {
            buf: &mut payload[4 + env..],
            at: 0,
        };
        if let Err(e) = postcard::serialize_with_flavor(args, into) {
            cannot_pack(invokable, e)
        }
        destination.send(msg);
    }

    /// Postcard's output into a message's payload. Its own flavor rather
    /// than `to_slice`'s: that one copies every varint with a `memcpy`
    /// call; a loop is quicker for the few bytes of one.
    struct Into<'a> {
        buf: &'a mut [u8],
        at: usize,
    }

    impl postcard::ser_flavors::Flavor for Into<'_> {
        type Output = ();

        #[inline]
        fn try_push(&mut self, byte: u8) -> postcard::Result<()> {
            let slot = self
                .buf
                .get_mut(self.at)
                .ok_or(postcard::Error::SerializeBufferFull)?;
            *slot = byte;
            self.at += 1;
            Ok(())
        }

        #[inline]
        fn try_extend(&mut self, bytes: &[u8]) -> postcard::Result<()> {
            let end = self.at + bytes.len();
            let out = self
                .buf
                .get_mut(self.at..end)
                .ok_or(postcard::Error::SerializeBufferFull)?;
            if bytes.len() <= 16 {
                for (o, b) in out.iter_mut().zip(bytes) {
                    *o = *b;
                }
            } else {
                out.copy_from_slice(bytes);
            }
            self.at = end;
            Ok(())
        }

        fn finalize(self) -> postcard::Result<()> {
            Ok(())
        }
    }

    fn cannot_pack<I>(invokable: &Invokable<I>, e: postcard::Error) -> ! {
        converse::abort(&format!(
            "Cpm_{} on PE {}: the arguments cannot be packed: {e}",
            short_name(invokable),
            converse::my_pe()
        ))
    }

    /// The invoker's first step: the arguments, unpacked from `msg`.
    pub fn unpack<T: DeserializeOwned, I>(msg: &Message, invokable: &Invokable<I>) -> T {
        let start = env_range(msg).end;
        unpack_from(msg, start, invokable)
    }

    /// The direct invoker's first step: the arguments are the whole
    /// payload (a typed handler's message, a reduction's result).
    pub fn unpack_direct<T: DeserializeOwned, I>(msg: &Message, invokable: &Invokable<I>) -> T {
        unpack_from(msg, 0, invokable)
    }

    /// Registers the futures module on the calling PE (an invokable that
    /// returns a value answers through a typed future).
    pub fn needs_futures() {
        crate::futures::module_init();
    }

    pub use crate::futures::TypedFuture;

    fn unpack_from<T: DeserializeOwned, I>(
        msg: &Message,
        start: usize,
        invokable: &Invokable<I>,
    ) -> T {
        let invokable = &invokable.info;
        match postcard::take_from_bytes::<T>(&msg.payload()[start..]) {
            Ok((args, [])) => args,
            Ok((_, rest)) => malformed(
                msg,
                "Cpm",
                &format!(
                    "{} bytes after the arguments of {}",
                    rest.len(),
                    invokable.name
                ),
            ),
            Err(e) => malformed(
                msg,
                "Cpm",
                &format!("the arguments of {} do not unpack: {e}", invokable.name),
            ),
        }
    }
}

fn short_name<I>(invokable: &Invokable<I>) -> &'static str {
    let invokable = &invokable.info;
    invokable.name.rsplit("::").next().unwrap_or(invokable.name)
}

/// Straight to `pe`'s handler, with maximum priority (`CpmSend`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Direct {
    /// Where it goes.
    pub target: Target,
}

/// The message goes to `pe` and is handled on arrival (`CpmSend`); `pe`
/// may be [`CPM_ALL`] or [`CPM_OTHERS`].
#[doc(alias = "CpmSend")]
pub fn send(pe: impl Into<Target>) -> Direct {
    Direct { target: pe.into() }
}

impl Destination for Direct {
    fn env_size(&self) -> usize {
        0
    }
    fn send(&self, msg: Message) {
        send_to(self.target, msg)
    }
}

/// Through the target PE's scheduler queue, with a queueing strategy and
/// priority (`CpmEnqueue` and its kinds). Its send function is the
/// manual's `CpmEnqueueFIFO1` for every queueing (the queueing and
/// priority travel in the envelope, after the invoker), its handler on
/// arrival `CpmEnqueueFIFO2` (registered by [`module_init`]: the manual's
/// `CpmEnqueueFIFO2_Index`).
#[doc(alias = "CpmEnqueueFIFO1")]
#[doc(alias = "CpmEnqueueFIFO2")]
#[doc(alias = "CpmEnqueueFIFO2_Index")]
#[derive(Clone, Debug)]
pub struct Enqueue {
    /// Where it goes.
    pub target: Target,
    /// How it is queued there.
    pub queueing: Queueing,
}

/// The message goes to `pe` and is enqueued there per `queueing`
/// (`CpmEnqueue`: the C queueing, priobits and prioptr are one
/// [`Queueing`]).
#[doc(alias = "CpmEnqueue")]
pub fn enqueue(pe: impl Into<Target>, queueing: Queueing) -> Enqueue {
    Enqueue {
        target: pe.into(),
        queueing,
    }
}

/// Enqueued on `pe` at the middle priority, FIFO (`CpmEnqueueFIFO`).
#[doc(alias = "CpmEnqueueFIFO")]
pub fn enqueue_fifo(pe: impl Into<Target>) -> Enqueue {
    enqueue(pe, Queueing::Fifo)
}

/// Enqueued on `pe` at the middle priority, LIFO (`CpmEnqueueLIFO`).
#[doc(alias = "CpmEnqueueLIFO")]
pub fn enqueue_lifo(pe: impl Into<Target>) -> Enqueue {
    enqueue(pe, Queueing::Lifo)
}

/// Enqueued on `pe` at integer priority `prio`, FIFO (`CpmEnqueueIFIFO`).
#[doc(alias = "CpmEnqueueIFIFO")]
pub fn enqueue_ififo(pe: impl Into<Target>, prio: i32) -> Enqueue {
    enqueue(pe, Queueing::IFifo(prio))
}

/// Enqueued on `pe` at integer priority `prio`, LIFO (`CpmEnqueueILIFO`).
#[doc(alias = "CpmEnqueueILIFO")]
pub fn enqueue_ilifo(pe: impl Into<Target>, prio: i32) -> Enqueue {
    enqueue(pe, Queueing::ILifo(prio))
}

/// Enqueued on `pe` at bit-vector priority `prio`, FIFO
/// (`CpmEnqueueBFIFO`; the C priobits and prioptr are one [`BitPrio`]).
#[doc(alias = "CpmEnqueueBFIFO")]
pub fn enqueue_bfifo(pe: impl Into<Target>, prio: BitPrio) -> Enqueue {
    enqueue(pe, Queueing::BFifo(prio))
}

/// Enqueued on `pe` at bit-vector priority `prio`, LIFO
/// (`CpmEnqueueBLIFO`).
#[doc(alias = "CpmEnqueueBLIFO")]
pub fn enqueue_blifo(pe: impl Into<Target>, prio: BitPrio) -> Enqueue {
    enqueue(pe, Queueing::BLifo(prio))
}

impl Destination for Enqueue {
    fn env_size(&self) -> usize {
        4 + queueing_len(&self.queueing)
    }
    fn send(&self, mut msg: Message) {
        let invoker = msg.handler() as u32;
        let e = env_for(&mut msg, self.env_size(), "CpmEnqueue");
        e[..4].copy_from_slice(&invoker.to_le_bytes());
        write_queueing(&self.queueing, &mut e[4..]);
        msg.set_handler(state("CpmEnqueue").enqueue_handler);
        send_to(self.target, msg)
    }
}

fn state(what: &str) -> std::rc::Rc<State> {
    if !STATE.is_initialized() {
        converse::abort(&format!(
            "{what} on PE {} before cpm::module_init",
            converse::my_pe()
        ));
    }
    STATE.get()
}

/// [`Enqueue`] on arrival: restores the invoker, enqueues.
fn on_enqueue(mut msg: Message) {
    let invoker = envelope_invoker(&msg, "CpmEnqueue");
    let queueing =
        read_queueing(&env_ref(&msg)[4..]).unwrap_or_else(|why| malformed(&msg, "CpmEnqueue", why));
    msg.set_handler(invoker);
    converse::enqueue_general(msg, queueing);
}

/// Bytes of a queueing in an envelope: a kind byte, then the priority.
fn queueing_len(q: &Queueing) -> usize {
    1 + match q {
        Queueing::Fifo | Queueing::Lifo => 0,
        Queueing::IFifo(_) | Queueing::ILifo(_) => 4,
        Queueing::LFifo(_) | Queueing::LLifo(_) => 8,
        Queueing::BFifo(p) | Queueing::BLifo(p) => 4 + 4 * p.words().len(),
    }
}

fn write_queueing(q: &Queueing, out: &mut [u8]) {
    let (kind, rest) = out.split_at_mut(1);
    kind[0] = match q {
        Queueing::Fifo => 0,
        Queueing::Lifo => 1,
        Queueing::IFifo(p) | Queueing::ILifo(p) => {
            rest[..4].copy_from_slice(&p.to_le_bytes());
            if matches!(q, Queueing::IFifo(_)) {
                2
            } else {
                3
            }
        }
        Queueing::LFifo(p) | Queueing::LLifo(p) => {
            rest[..8].copy_from_slice(&p.to_le_bytes());
            if matches!(q, Queueing::LFifo(_)) {
                4
            } else {
                5
            }
        }
        Queueing::BFifo(p) | Queueing::BLifo(p) => {
            rest[..4].copy_from_slice(&p.bits().to_le_bytes());
            for (w, chunk) in p.words().iter().zip(rest[4..].chunks_exact_mut(4)) {
                chunk.copy_from_slice(&w.to_le_bytes());
            }
            if matches!(q, Queueing::BFifo(_)) {
                6
            } else {
                7
            }
        }
    };
}

/// The queueing [`write_queueing`] wrote, checked.
fn read_queueing(bytes: &[u8]) -> Result<Queueing, &'static str> {
    let (&kind, rest) = bytes.split_first().ok_or("no queueing in its envelope")?;
    let int = || {
        rest.try_into()
            .map(i32::from_le_bytes)
            .map_err(|_| "a bad integer priority")
    };
    let long = || {
        rest.try_into()
            .map(i64::from_le_bytes)
            .map_err(|_| "a bad long priority")
    };
    let bits = || {
        let (bits, words) = rest
            .split_first_chunk::<4>()
            .ok_or("a bad bit-vector priority")?;
        if words.len() % 4 != 0 {
            return Err("a bad bit-vector priority");
        }
        let words: Vec<u32> = words
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        BitPrio::new(u32::from_le_bytes(*bits), &words).map_err(|_| "a bad bit-vector priority")
    };
    Ok(match kind {
        0 if rest.is_empty() => Queueing::Fifo,
        1 if rest.is_empty() => Queueing::Lifo,
        2 => Queueing::IFifo(int()?),
        3 => Queueing::ILifo(int()?),
        4 => Queueing::LFifo(long()?),
        5 => Queueing::LLifo(long()?),
        6 => Queueing::BFifo(bits()?),
        7 => Queueing::BLifo(bits()?),
        _ => return Err("an unknown queueing in its envelope"),
    })
}

/// Into a new user-level thread on the target PE (`CpmMakeThread`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MakeThread {
    /// Where it goes.
    pub target: Target,
    /// The thread's stack size in bytes; 0 for the job's default.
    pub stack_size: usize,
}

/// The message goes to `pe`, where a new thread calls the function
/// (`CpmMakeThread`), with the job's default stack size.
#[doc(alias = "CpmMakeThread")]
pub fn make_thread(pe: impl Into<Target>) -> MakeThread {
    make_thread_size(pe, 0)
}

/// As [`make_thread`], with a stack of `stack_size` bytes
/// (`CpmMakeThreadSize`).
#[doc(alias = "CpmMakeThreadSize")]
///
/// # Panics
/// Aborts the job if `stack_size` is over [`MAX_STACK_SIZE`] (1 GiB).
pub fn make_thread_size(pe: impl Into<Target>, stack_size: usize) -> MakeThread {
    if stack_size > MAX_STACK_SIZE {
        converse::abort(&format!(
            "CpmMakeThreadSize on PE {}: a stack of {stack_size} bytes (at most {MAX_STACK_SIZE})",
            converse::my_pe()
        ));
    }
    MakeThread {
        target: pe.into(),
        stack_size,
    }
}

impl Destination for MakeThread {
    fn env_size(&self) -> usize {
        12
    }
    fn send(&self, mut msg: Message) {
        let invoker = msg.handler() as u32;
        let e = env_for(&mut msg, self.env_size(), "CpmMakeThread");
        e[..4].copy_from_slice(&invoker.to_le_bytes());
        e[4..12].copy_from_slice(&(self.stack_size as u64).to_le_bytes());
        msg.set_handler(state("CpmMakeThread").thread_handler);
        send_to(self.target, msg)
    }
}

/// [`MakeThread`] on arrival: a new thread runs the invoker.
fn on_make_thread(mut msg: Message) {
    let invoker = envelope_invoker(&msg, "CpmMakeThread");
    let size = env_ref(&msg)
        .get(4..12)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes)
        .unwrap_or_else(|| malformed(&msg, "CpmMakeThread", "no stack size in its envelope"));
    let size = match usize::try_from(size) {
        Ok(size) if size <= MAX_STACK_SIZE => size,
        _ => malformed(
            &msg,
            "CpmMakeThread",
            &format!("a stack of {size} bytes (at most {MAX_STACK_SIZE})"),
        ),
    };
    let Some(run) = converse::handler_function(invoker) else {
        malformed(
            &msg,
            "CpmMakeThread",
            &format!("its envelope names handler {invoker}, which is not registered"),
        )
    };
    msg.set_handler(invoker);
    Thread::create(move || run(msg), size).awaken();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ordered(names: &[&'static str]) -> Vec<&'static str> {
        let none = || Registered::new(0, 0);
        let listed: Vec<&'static Info> = names
            .iter()
            .map(|n| &Box::leak(Box::new(Invokable::<()>::new(n, "here", none))).info)
            .collect();
        automatic_order(listed).iter().map(|i| i.name).collect()
    }

    #[test]
    fn the_registration_order_is_the_paths_whatever_the_listing_order() {
        let a = ordered(&["b::f", "a::g", "a::f", "c::x::y"]);
        let b = ordered(&["c::x::y", "a::f", "b::f", "a::g"]);
        assert_eq!(a, ["a::f", "a::g", "b::f", "c::x::y"]);
        assert_eq!(a, b);
    }

    #[test]
    fn two_invokables_of_one_path_sort_by_where_they_are_declared() {
        let none = || Registered::new(0, 0);
        let at = |site| &Box::leak(Box::new(Invokable::<()>::new("m::helper", site, none))).info;
        let (a, b) = (at("src/main.rs:9:5"), at("src/lib.rs:3:1"));
        let one = automatic_order(vec![a, b]);
        let other = automatic_order(vec![b, a, b]);
        assert_eq!(one.len(), 2);
        assert!(one.iter().zip(&other).all(|(x, y)| std::ptr::eq(*x, *y)));
        assert_eq!(one[0].site, "src/lib.rs:3:1");
    }

    #[test]
    fn queueings_round_trip_through_an_envelope() {
        let prio = BitPrio::new(40, &[0xdead_beef, 0xff00_0000]).unwrap();
        for q in [
            Queueing::Fifo,
            Queueing::Lifo,
            Queueing::IFifo(-7),
            Queueing::ILifo(i32::MAX),
            Queueing::LFifo(i64::MIN),
            Queueing::LLifo(3),
            Queueing::BFifo(prio.clone()),
            Queueing::BLifo(BitPrio::new(0, &[]).unwrap()),
        ] {
            let mut bytes = vec![0; queueing_len(&q)];
            write_queueing(&q, &mut bytes);
            assert_eq!(read_queueing(&bytes), Ok(q));
        }
    }

    #[test]
    fn forged_queueings_are_refused() {
        for bad in [
            &[][..],
            &[9],
            &[0, 1],
            &[2, 1, 2],
            &[6, 40, 0, 0, 0, 1, 2, 3, 4],
            &[6, 1, 0, 0],
        ] {
            assert!(read_queueing(bad).is_err(), "{bad:?}");
        }
    }
}
