//! Futures from C (`converse-rs/ext.h`, the extensions manual's chapter
//! 8): `CfutureModuleInit`, `CfutureCreate`, `CfutureSet`, `CfutureWait`,
//! `CfutureDestroy`, `CfutureCreateValue`, `CfutureStoreValue` (and
//! Charm++'s `CfutureDestroyBuffer`), over [`converse_ext::futures`].
//!
//! # Invariants
//!
//! - A C `Cfuture` ([`CfutureC`]) is the Rust handle's two numbers, the PE
//!   it resides on and its number there: plain data, copied anywhere.
//! - The pointer `CfutureWait` returns is the future's value itself (not a
//!   copy), valid until the future is destroyed; C reads it (it is shared
//!   with every waiter and with the futures `CfutureStoreValue` stored it
//!   in).
//! - A buffer from `CfutureCreateValue` is a Rust value kept in the PE's
//!   table (`created`, by address) until `CfutureStoreValue` moves it into
//!   a future or `CfutureDestroyBuffer` frees it; C writes into it until
//!   then. A value `CfutureWait` returned is listed too (`waited`, by
//!   address, with its future) until that future is destroyed, so that
//!   `CfutureStoreValue` may store it in another future without a copy.
//!   Any other pointer given to `CfutureStoreValue` ends the job naming it.
//!
//! # Concurrency
//!
//! Per PE: the tables are a `Cpv`, touched by the PE's own threads; no
//! borrow of them is held while the runtime may switch threads
//! (`CfutureWait` blocks).
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::rc::Rc;

use converse::Cpv;
use converse_ext::futures::{self, Cfuture, FutureValue};

/// A C `Cfuture`: `struct Cfuture_s { int pe; unsigned long long id; }`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CfutureC {
    /// The PE the future resides on.
    pub pe: c_int,
    /// Its number there.
    pub id: u64,
}

impl CfutureC {
    fn of(f: Cfuture) -> CfutureC {
        CfutureC {
            pe: c_int::try_from(f.pe).expect("PE numbers fit a C int"),
            id: f.id,
        }
    }

    /// The Rust handle; a negative PE ends the job naming `call`.
    fn rust(self, call: &str) -> Cfuture {
        Cfuture {
            pe: crate::nonneg(self.pe, call),
            id: self.id,
        }
    }
}

/// The PE's buffers and waited values (see the module comment).
#[derive(Default)]
struct Values {
    created: HashMap<usize, FutureValue>,
    waited: HashMap<usize, Cfuture>,
}

static VALUES: Cpv<RefCell<Values>> = Cpv::new();

fn values() -> Rc<RefCell<Values>> {
    VALUES.try_get().unwrap_or_else(|| {
        VALUES.initialize(RefCell::default());
        VALUES.get()
    })
}

/// `CfutureModuleInit()`: registers the futures' handler on the calling PE.
/// Call it on every PE, at the same place of the handler registrations
/// (the start function); a second call on a PE does nothing.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CfutureModuleInit() {
    futures::module_init();
    values();
}

/// `CfutureCreate()`: an empty future residing on the calling PE.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CfutureCreate() -> CfutureC {
    CfutureC::of(futures::create())
}

/// `CfutureSet(f, value, nbytes)`: stores a copy of the `nbytes` bytes at
/// `value` in `f`, from any PE (on another, the copy travels to the
/// future's PE). A future is filled once.
///
/// # Safety
/// `value` points at `nbytes` readable bytes (it may be null for 0).
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CfutureSet(f: CfutureC, value: *const c_void, nbytes: c_int) {
    let n = crate::nonneg(nbytes, "CfutureSet");
    let bytes: &[u8] = if n == 0 {
        &[]
    } else {
        if value.is_null() {
            converse::abort(&format!("CfutureSet: {n} bytes at a null pointer"));
        }
        // SAFETY: `n` readable bytes at `value` (the caller's promise).
        unsafe { std::slice::from_raw_parts(value.cast::<u8>(), n) }
    };
    futures::set(f.rust("CfutureSet"), bytes);
}

/// `CfutureWait(f)`: waits until `f` is filled (blocking the calling
/// thread; only threads may block) and returns its value, valid until `f`
/// is destroyed. Only on the future's own PE.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CfutureWait(f: CfutureC) -> *mut c_void {
    let future = f.rust("CfutureWait");
    let value = futures::wait(future);
    let ptr = value.as_ptr() as usize;
    values().borrow_mut().waited.insert(ptr, future);
    ptr as *mut c_void
}

/// `CfutureDestroy(f)`: frees `f` and its value. Only on its own PE.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CfutureDestroy(f: CfutureC) {
    let future = f.rust("CfutureDestroy");
    futures::destroy(future);
    values().borrow_mut().waited.retain(|_, w| *w != future);
}

/// `CfutureCreateValue(nbytes)`: a zeroed buffer of `nbytes` to fill and
/// store with `CfutureStoreValue` (or free with `CfutureDestroyBuffer`).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CfutureCreateValue(nbytes: c_int) -> *mut c_void {
    let n = crate::nonneg(nbytes, "CfutureCreateValue");
    let mut value = futures::create_value(n);
    let bytes = value.bytes_mut().expect("a new value is not shared");
    // Room for one byte at least: every buffer has an address of its own.
    bytes.reserve(1);
    let ptr = bytes.as_mut_ptr() as usize;
    values().borrow_mut().created.insert(ptr, value);
    ptr as *mut c_void
}

/// `CfutureStoreValue(f, value)`: stores `value` in `f`, a buffer from
/// `CfutureCreateValue` (moved in: the pointer is the future's now) or a
/// value `CfutureWait` returned on this PE (shared, not copied). On
/// another PE than the future's, the bytes travel as with `CfutureSet`.
///
/// # Safety
/// `value` is such a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CfutureStoreValue(f: CfutureC, value: *mut c_void) {
    let future = f.rust("CfutureStoreValue");
    let key = value as usize;
    let created = values().borrow_mut().created.remove(&key);
    let v = match created {
        Some(v) => v,
        None => {
            let from = values().borrow().waited.get(&key).copied();
            match from {
                // Filled: returns at once with the shared value.
                Some(source) => futures::wait(source),
                None => converse::abort(&format!(
                    "CfutureStoreValue on PE {}: {value:p} is neither a buffer of CfutureCreateValue nor a value CfutureWait returned here",
                    converse::my_pe()
                )),
            }
        }
    };
    futures::store_value(future, v);
}

/// `CfutureDestroyBuffer(value)` (Charm++'s): frees a buffer of
/// `CfutureCreateValue` that was not stored.
///
/// # Safety
/// `value` came from `CfutureCreateValue` and was not stored.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CfutureDestroyBuffer(value: *mut c_void) {
    let gone = values().borrow_mut().created.remove(&(value as usize));
    if gone.is_none() {
        converse::abort(&format!(
            "CfutureDestroyBuffer on PE {}: {value:p} is not a buffer of CfutureCreateValue (or was stored)",
            converse::my_pe()
        ));
    }
}
