//! Pseudo-globals: PE-private ([`Cpv`]) and node-shared ([`Csv`]) variables.
//!
//! Declare one as a `static` (the `CpvDeclare`/`CsvDeclare` of the manual),
//! install it with `initialize` on each PE (`CpvInitialize`) and reach it with
//! `with` or `get` (`CpvAccess`). Nothing is a mutable static: a `Cpv<T>`
//! holds one `T` per PE, a `Csv<T>` one `T` per node, and mutation goes
//! through interior mutability of `T` (`Cell`, `RefCell` for `Cpv`; atomics,
//! `Mutex`, [`NodeLock`](crate::NodeLock) for `Csv`).
//!
//! ```
//! use std::cell::Cell;
//! use converse::{Converse, Cpv};
//! static COUNT: Cpv<Cell<u32>> = Cpv::new();
//! Converse::new().args(["prog", "+p", "2"]).run(|_| {
//!     COUNT.initialize(Cell::new(converse::my_pe() as u32));
//!     COUNT.with(|c| c.set(c.get() + 10));
//!     assert_eq!(COUNT.with(|c| c.get()), converse::my_pe() as u32 + 10);
//!     converse::exit_scheduler();
//! }).unwrap();
//! ```
//!
//! # Invariants and protocol
//!
//! Each static owns a slot number, drawn once from a process-wide counter the
//! first time it is used. A PE keeps its `Cpv` values in a vector indexed by
//! slot (touched only by its own thread). A node keeps its `Csv` slots in a
//! vector behind a mutex, each slot a `OnceLock` (so an initializer runs with
//! no lock of ours held and may use other `Csv`s); each PE caches the values
//! it has looked up, so after the first access per PE no lock is taken. Values live as long as the PE
//! (`Cpv`) or the job (`Csv`).
use std::any::Any;
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::job::SharedSlot;
use super::pe;

static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

/// A lazily drawn, process-wide slot number (`usize::MAX` = not drawn yet).
pub(crate) struct Slot(AtomicUsize);

impl Slot {
    pub(crate) const fn new() -> Slot {
        Slot(AtomicUsize::new(usize::MAX))
    }

    fn get(&self) -> usize {
        self.get_from(&NEXT_SLOT)
    }

    /// The slot number, drawn from `counter` on first use.
    pub(crate) fn get_from(&self, counter: &AtomicUsize) -> usize {
        let s = self.0.load(Ordering::Acquire);
        if s != usize::MAX {
            return s;
        }
        let fresh = counter.fetch_add(1, Ordering::Relaxed);
        match self
            .0
            .compare_exchange(usize::MAX, fresh, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => fresh,
            Err(won) => won, // another thread drew first; `fresh` stays unused
        }
    }
}

/// A PE-private variable: one value of `T` per PE (`CpvDeclare`).
#[doc(alias = "CpvDeclare")]
#[doc(alias = "CpvStaticDeclare")]
#[doc(alias = "CpvExtern")]
pub struct Cpv<T: 'static> {
    slot: Slot,
    _t: PhantomData<fn() -> T>,
}

impl<T: 'static> Default for Cpv<T> {
    fn default() -> Self {
        Cpv::new()
    }
}

impl<T: 'static> Cpv<T> {
    /// A declaration; usable in a `static`.
    pub const fn new() -> Cpv<T> {
        Cpv {
            slot: Slot::new(),
            _t: PhantomData,
        }
    }

    /// Installs `value` as this variable's value on the calling PE, replacing
    /// any earlier one (`CpvInitialize` followed by an assignment).
    #[doc(alias = "CpvInitialize")]
    pub fn initialize(&self, value: T) {
        let slot = self.slot.get();
        let old = pe::with(|pe| {
            let mut globals = pe.globals.borrow_mut();
            if globals.len() <= slot {
                globals.resize(slot + 1, None);
            }
            globals[slot].replace(Rc::new(value))
        });
        // Dropped with no borrow held: its destructor may use other `Cpv`s.
        drop(old);
    }

    /// True if the variable has been initialized on the calling PE.
    pub fn is_initialized(&self) -> bool {
        let slot = self.slot.get();
        pe::with(|pe| matches!(pe.globals.borrow().get(slot), Some(Some(_))))
    }

    /// The calling PE's value (`CpvAccess`), as a counted reference.
    ///
    /// # Panics
    /// If the variable was not initialized on this PE.
    #[doc(alias = "CpvAccess")]
    pub fn get(&self) -> Rc<T> {
        self.try_get().unwrap_or_else(|| {
            panic!(
                "Cpv<{}> used on PE {} before initialize()",
                std::any::type_name::<T>(),
                crate::my_pe()
            )
        })
    }

    /// The calling PE's value if it was initialized there: one look-up
    /// where [`is_initialized`](Cpv::is_initialized) then
    /// [`get`](Cpv::get) take two, for a library's hot path that names
    /// its own error.
    pub fn try_get(&self) -> Option<Rc<T>> {
        let slot = self.slot.get();
        let value: Option<Rc<dyn Any>> =
            pe::with(|pe| pe.globals.borrow().get(slot).cloned().flatten());
        value.map(|v| {
            v.downcast::<T>()
                .unwrap_or_else(|_| unreachable!("a slot holds values of one type"))
        })
    }

    /// Runs `f` with the calling PE's value (`CpvAccess`).
    ///
    /// # Panics
    /// If the variable was not initialized on this PE.
    pub fn with<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        f(&self.get())
    }
}

/// A node-shared variable: one value of `T` per node, shared by the node's
/// PEs (`CsvDeclare`).
#[doc(alias = "CsvDeclare")]
#[doc(alias = "CsvStaticDeclare")]
#[doc(alias = "CsvExtern")]
pub struct Csv<T: Send + Sync + 'static> {
    slot: Slot,
    _t: PhantomData<fn() -> T>,
}

impl<T: Send + Sync + 'static> Default for Csv<T> {
    fn default() -> Self {
        Csv::new()
    }
}

impl<T: Send + Sync + 'static> Csv<T> {
    /// A declaration; usable in a `static`.
    pub const fn new() -> Csv<T> {
        Csv {
            slot: Slot::new(),
            _t: PhantomData,
        }
    }

    /// Installs the node's value unless a PE of the node already did
    /// (`CsvInitialize`): every PE may call it, `init` runs once per node.
    /// `init` may use other node-shared variables; PEs that call this while
    /// another PE of the node runs `init` wait for it.
    #[doc(alias = "CsvInitialize")]
    pub fn initialize(&self, init: impl FnOnce() -> T) {
        let slot = self.node_slot();
        slot.get_or_init(|| Arc::new(init()));
    }

    /// The calling PE's node's slot for this variable, created if needed.
    fn node_slot(&self) -> SharedSlot {
        let slot = self.slot.get();
        pe::with(|pe| {
            let node = &pe.job.node(pe.node);
            let mut globals = crate::sync::lock(&node.globals);
            if globals.len() <= slot {
                globals.resize(slot + 1, None);
            }
            globals[slot].get_or_insert_with(Default::default).clone()
        })
    }

    /// True if the variable has been initialized on the calling PE's node.
    pub fn is_initialized(&self) -> bool {
        self.lookup().is_some()
    }

    fn lookup(&self) -> Option<Arc<T>> {
        let slot = self.slot.get();
        let cached = pe::with(|pe| pe.node_globals.borrow().get(slot).cloned().flatten());
        let value = match cached {
            Some(v) => v,
            None => {
                let value = self.node_slot().get()?.clone();
                pe::with(|pe| {
                    let mut cache = pe.node_globals.borrow_mut();
                    if cache.len() <= slot {
                        cache.resize(slot + 1, None);
                    }
                    cache[slot] = Some(value.clone());
                });
                value
            }
        };
        Some(
            value
                .downcast::<T>()
                .unwrap_or_else(|_| unreachable!("a slot holds values of one type")),
        )
    }

    /// The node's value (`CsvAccess`).
    ///
    /// # Panics
    /// If no PE of the node initialized the variable.
    #[doc(alias = "CsvAccess")]
    pub fn get(&self) -> Arc<T> {
        self.lookup().unwrap_or_else(|| {
            panic!(
                "Csv<{}> used on node {} before initialize()",
                std::any::type_name::<T>(),
                crate::my_node()
            )
        })
    }

    /// Runs `f` with the node's value (`CsvAccess`).
    pub fn with<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        f(&self.get())
    }
}
