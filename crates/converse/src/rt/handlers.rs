//! Registering handlers on the calling PE and looking them up
//! (`CmiRegisterHandler` and friends): the PE's handler table
//! (`msg::handler::HandlerTable`) is PE state, so its API lives with the PE.
use std::rc::Rc;

use super::pe;
use crate::msg::handler::{self, Handler};
use crate::msg::message::Message;

/// Registers `f` as a handler on the calling PE and returns its index
/// (`CmiRegisterHandler`). Register the same handlers in the same order on
/// every PE: they then get the same indices everywhere. The runtime checks
/// this (when a PE first schedules, and at every later registration) and
/// aborts naming the first index where two PEs differ.
#[doc(alias = "CmiRegisterHandler")]
pub fn register_handler<F: Fn(Message) + 'static>(f: F) -> usize {
    let ident = handler::HandlerIdent::of::<F>();
    pe::with(|pe| {
        let index = pe.handlers.borrow_mut().register(Rc::new(f), ident);
        pe.trace.name_handler(index, || ident.name.to_string());
        if pe.handlers_checked() {
            pe.check_handlers();
        }
        index
    })
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
    let ident = handler::HandlerIdent::named::<F>(name);
    pe::with(|pe| {
        let index = pe.handlers.borrow_mut().register(Rc::new(f), ident);
        pe.trace.name_handler(index, || ident.name.to_string());
        if pe.handlers_checked() {
            pe.check_handlers();
        }
        index
    })
}

/// Registers `f` on PE 0 under a number meant to be sent to the other PEs,
/// which install it with [`number_handler`] (`CmiRegisterHandlerGlobal`).
/// Call it on PE 0 only; elsewhere it prints an error (as Converse does) and
/// still registers locally.
#[doc(alias = "CmiRegisterHandlerGlobal")]
pub fn register_handler_global<F: Fn(Message) + 'static>(f: F) -> usize {
    pe::with(|pe| {
        if pe.pe != 0 {
            crate::cmi_error!(
                "converse: PE {}: register_handler_global must only be called on PE 0\n",
                pe.pe
            );
        }
        let index = pe.handlers.borrow_mut().register_global(Rc::new(f));
        pe.trace
            .name_handler(index, || std::any::type_name::<F>().to_string());
        index
    })
}

/// Registers `f` under a number meaningful on the calling PE only
/// (`CmiRegisterHandlerLocal`); no consistency across PEs is attempted.
#[doc(alias = "CmiRegisterHandlerLocal")]
pub fn register_handler_local<F: Fn(Message) + 'static>(f: F) -> usize {
    pe::with(|pe| {
        let index = pe.handlers.borrow_mut().register_local(Rc::new(f));
        pe.trace
            .name_handler(index, || std::any::type_name::<F>().to_string());
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
    pe::with(|pe| {
        pe.handlers.borrow_mut().number(index, Rc::new(f));
        pe.trace
            .name_handler(index, || std::any::type_name::<F>().to_string());
    })
}

/// The function installed at handler index `index` on the calling PE, if any.
#[doc(alias = "CmiHandlerToFunction")]
pub fn handler_function(index: usize) -> Option<Handler> {
    pe::with(|pe| pe.handlers.borrow().get(index).cloned())
}

/// The function that handles `msg` on the calling PE (`CmiGetHandlerFunction`).
#[doc(alias = "CmiGetHandlerFunction")]
pub fn handler_of(msg: &Message) -> Option<Handler> {
    handler_function(msg.handler())
}
