//! Registering handlers on the calling PE and looking them up
//! (`CmiRegisterHandler` and friends): the PE's handler table
//! (`msg::handler::HandlerTable`) is PE state, so its API lives with the PE.
use std::rc::Rc;

use super::pe;
use crate::msg::handler::{self, CHandler, Entry, Handler};
use crate::msg::message::Message;

/// Registers `f` as a handler on the calling PE and returns its index
/// (`CmiRegisterHandler`). Register the same handlers in the same order on
/// every PE: they then get the same indices everywhere. The runtime checks
/// this (when a PE first schedules, and at every later registration) and
/// aborts naming the first index where two PEs differ.
#[doc(alias = "CmiRegisterHandler")]
#[track_caller]
pub fn register_handler<F: Fn(Message) + 'static>(f: F) -> usize {
    register_entry(
        Entry::Closure(Rc::new(f)),
        handler::HandlerIdent::of::<F>().at(std::panic::Location::caller()),
    )
}

/// Registers `f` as [`register_handler`] does, identified by `name` as
/// well as by its type: for a closure type that stands for many functions
/// (the C ABI wraps every C handler in one closure type, and names each by
/// its symbol), so that the check of the handler tables between PEs and
/// processes still tells them apart. `name` must be the same in every
/// process for the same function (a symbol name, or an offset in the
/// program's image; never an address, which varies from process to
/// process).
pub fn register_handler_named<F: Fn(Message) + 'static>(f: F, name: &str) -> usize {
    register_entry(
        Entry::Closure(Rc::new(f)),
        handler::HandlerIdent::named::<F>(name),
    )
}

/// Registers C function `f` as [`register_handler_named`] registers a
/// closure, under `name` (the same rules), and returns its index
/// (`CmiRegisterHandler` of the C ABI). `f` gets each message as the
/// buffer C knows, header first, and owns it; it runs as directly as
/// the scheduler can call it (no closure around it).
#[doc(alias = "CmiRegisterHandler")]
pub fn register_c_handler(f: CHandler, name: &str) -> usize {
    register_entry(Entry::C(f), handler::HandlerIdent::named::<CHandler>(name))
}

/// The registration of every `register_handler` form: the next index of
/// the table every PE builds in the same order.
pub(crate) fn register_entry(entry: Entry, ident: handler::HandlerIdent) -> usize {
    pe::with(|pe| {
        let index = pe.handlers.borrow_mut().register(entry, ident);
        pe.trace.name_handler(index, || ident.name.to_string());
        if pe.handlers_checked() {
            pe.check_handlers();
        }
        index
    })
}

/// Replaces the function of registered handler `index` on the calling PE,
/// keeping its identity (what a filled handler slot does: the table's
/// check between PEs saw the slot). Delivery clones an entry before it
/// runs it, so a handler may be replaced while it runs.
pub(crate) fn replace_entry(index: usize, entry: Entry) {
    pe::with(|pe| pe.handlers.borrow_mut().number(index, entry))
}

/// Registers `f` on PE 0 under a number meant to be sent to the other PEs,
/// which install it with [`number_handler`] (`CmiRegisterHandlerGlobal`).
/// Call it on PE 0 only; elsewhere it prints an error (as Converse does) and
/// still registers locally.
#[doc(alias = "CmiRegisterHandlerGlobal")]
pub fn register_handler_global<F: Fn(Message) + 'static>(f: F) -> usize {
    register_global_entry(Entry::Closure(Rc::new(f)), std::any::type_name::<F>())
}

/// [`register_handler_global`] of C function `f` (`CmiRegisterHandlerGlobal`
/// of the C ABI; see [`register_c_handler`]).
pub fn register_c_handler_global(f: CHandler) -> usize {
    register_global_entry(Entry::C(f), std::any::type_name::<CHandler>())
}

fn register_global_entry(entry: Entry, name: &str) -> usize {
    pe::with(|pe| {
        if pe.pe != 0 {
            crate::cmi_error!(
                "converse: PE {}: register_handler_global must only be called on PE 0\n",
                pe.pe
            );
        }
        let index = pe.handlers.borrow_mut().register_global(entry);
        pe.trace.name_handler(index, || name.to_string());
        index
    })
}

/// Registers `f` under a number meaningful on the calling PE only
/// (`CmiRegisterHandlerLocal`); no consistency across PEs is attempted.
#[doc(alias = "CmiRegisterHandlerLocal")]
pub fn register_handler_local<F: Fn(Message) + 'static>(f: F) -> usize {
    register_local_entry(Entry::Closure(Rc::new(f)), std::any::type_name::<F>())
}

/// [`register_handler_local`] of C function `f` (`CmiRegisterHandlerLocal`
/// of the C ABI; see [`register_c_handler`]).
pub fn register_c_handler_local(f: CHandler) -> usize {
    register_local_entry(Entry::C(f), std::any::type_name::<CHandler>())
}

fn register_local_entry(entry: Entry, name: &str) -> usize {
    pe::with(|pe| {
        let index = pe.handlers.borrow_mut().register_local(entry);
        pe.trace.name_handler(index, || name.to_string());
        index
    })
}

/// Installs `f` as handler number `index` on the calling PE, replacing any
/// earlier mapping (`CmiNumberHandler`). The table grows to the largest index,
/// so keep indices small.
///
/// # Panics
/// If `index` is 0 (reserved) or above [`MAX_HANDLER_INDEX`](crate::msg::MAX_HANDLER_INDEX).
#[doc(alias = "CmiNumberHandler")]
pub fn number_handler<F: Fn(Message) + 'static>(index: usize, f: F) {
    number_entry(
        index,
        Entry::Closure(Rc::new(f)),
        std::any::type_name::<F>(),
    )
}

/// [`number_handler`] of C function `f` (`CmiNumberHandler` of the C ABI;
/// see [`register_c_handler`]).
///
/// # Panics
/// As [`number_handler`].
pub fn number_c_handler(index: usize, f: CHandler) {
    number_entry(index, Entry::C(f), std::any::type_name::<CHandler>())
}

fn number_entry(index: usize, entry: Entry, name: &str) {
    pe::with(|pe| {
        pe.handlers.borrow_mut().number(index, entry);
        pe.trace.name_handler(index, || name.to_string());
    })
}

/// The function installed at handler index `index` on the calling PE, if
/// any (a C function comes wrapped in a closure).
#[doc(alias = "CmiHandlerToFunction")]
pub fn handler_function(index: usize) -> Option<Handler> {
    pe::with(|pe| pe.handlers.borrow().get(index).map(Entry::to_handler))
}

/// The C function installed at handler index `index` on the calling PE,
/// if a C function is there (`CmiHandlerToFunction` of the C ABI: `None`
/// for an empty index or a Rust handler).
pub fn c_handler_function(index: usize) -> Option<CHandler> {
    pe::with(|pe| match pe.handlers.borrow().get(index) {
        Some(Entry::C(f)) => Some(*f),
        _ => None,
    })
}

/// The function that handles `msg` on the calling PE (`CmiGetHandlerFunction`).
#[doc(alias = "CmiGetHandlerFunction")]
pub fn handler_of(msg: &Message) -> Option<Handler> {
    handler_function(msg.handler())
}
