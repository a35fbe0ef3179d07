//! Thread-private variables (Ctv): one value per user-level thread.
//!
//! Declare one as a `static` with the function that makes a thread's first
//! value (`CtvDeclare` plus `CtvInitialize`); reach the running thread's value
//! with [`Ctv::with`] or [`Ctv::get`] (`CtvAccess`). The main flow of a PE is
//! a thread too and has its own values.
//!
//! ```
//! use std::cell::Cell;
//! use converse::{Converse, Ctv, Thread};
//! static DEPTH: Ctv<Cell<u32>> = Ctv::new(|| Cell::new(0));
//! Converse::new().args(["prog", "+p", "1"]).run(|_| {
//!     DEPTH.with(|d| d.set(7));
//!     let t = Thread::create(|| {
//!         assert_eq!(DEPTH.with(|d| d.get()), 0, "a new thread starts from the initial value");
//!         DEPTH.with(|d| d.set(1));
//!         converse::exit_scheduler();
//!     }, 0);
//!     t.awaken();
//!     converse::schedule_forever();
//!     assert_eq!(DEPTH.with(|d| d.get()), 7, "the main flow kept its own value");
//!     converse::exit_scheduler(); // the scheduler after the start function returns at once
//! }).unwrap();
//! ```
//!
//! # Invariants
//!
//! Each static owns a slot number drawn once from a process-wide counter (its
//! own, so slots stay dense). A thread keeps its values in a vector indexed by
//! slot, created on first access with the declaration's initializer. Values
//! are switched with the thread because they *are* the thread's: access goes
//! through the PE's current thread. A value lives as long as its thread.
use std::any::Any;
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::atomic::AtomicUsize;

use super::Thread;
use crate::rt::globals::Slot;
use crate::rt::pe;

static NEXT_CTV_SLOT: AtomicUsize = AtomicUsize::new(0);

/// A thread-private variable: one value of `T` per user-level thread
/// (`CtvDeclare`).
#[doc(alias = "CtvDeclare")]
#[doc(alias = "CtvStaticDeclare")]
#[doc(alias = "CtvExtern")]
#[doc(alias = "CtvInitialize")]
pub struct Ctv<T: 'static> {
    slot: Slot,
    init: fn() -> T,
    _t: PhantomData<fn() -> T>,
}

impl<T: 'static> Ctv<T> {
    /// A declaration; each thread's value starts as `init()`. Usable in a
    /// `static`.
    pub const fn new(init: fn() -> T) -> Ctv<T> {
        Ctv {
            slot: Slot::new(),
            init,
            _t: PhantomData,
        }
    }

    /// The running thread's value (`CtvAccess`), as a counted reference;
    /// made with the initializer on the thread's first access.
    #[doc(alias = "CtvAccess")]
    pub fn get(&self) -> Rc<T> {
        self.get_of(&pe::with(|pe| pe.cth.current()))
    }

    /// Thread `thread`'s value (`CtvAccessOther`), made with the
    /// initializer if that thread has none yet. `thread` is of the calling
    /// PE (a [`Thread`] never leaves its PE); it need not be running.
    #[doc(alias = "CtvAccessOther")]
    pub fn get_of(&self, thread: &Thread) -> Rc<T> {
        let slot = self.slot.get_from(&NEXT_CTV_SLOT);
        let existing: Option<Rc<dyn Any>> = thread.0.locals.borrow().get(slot).cloned().flatten();
        let value = match existing {
            Some(v) => v,
            None => {
                // The initializer runs with no borrow held: it may use other
                // thread-private variables.
                let fresh: Rc<dyn Any> = Rc::new((self.init)());
                let mut locals = thread.0.locals.borrow_mut();
                if locals.len() <= slot {
                    locals.resize(slot + 1, None);
                }
                locals[slot].get_or_insert(fresh).clone()
            }
        };
        value
            .downcast::<T>()
            .unwrap_or_else(|_| unreachable!("a slot holds values of one type"))
    }

    /// Runs `f` with the running thread's value (`CtvAccess`).
    pub fn with<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        f(&self.get())
    }

    /// Replaces the running thread's value.
    pub fn set(&self, value: T) {
        let slot = self.slot.get_from(&NEXT_CTV_SLOT);
        let thread = pe::with(|pe| pe.cth.current());
        let old = {
            let mut locals = thread.0.locals.borrow_mut();
            if locals.len() <= slot {
                locals.resize(slot + 1, None);
            }
            locals[slot].replace(Rc::new(value) as Rc<dyn Any>)
        };
        // Dropped with no borrow held: its destructor may use other `Ctv`s.
        drop(old);
    }
}
