//! PUP from C (`pup_c.h`): a sizer, a packer into the caller's memory and
//! an unpacker from it, behind Charm++'s C names (`pup_er`,
//! `pup_new_sizer`, `pup_new_toMem`, `pup_new_fromMem`, `pup_destroy`, the
//! `pup_is…` queries, `pup_size`, `pup_int`/`pup_ints` and the other basic
//! types, `pup_bytes`).
//!
//! # Byte layout
//!
//! Charm++'s `toMem`/`fromMem`: each item's native bytes, in the order
//! the pup function names them, with no padding, tags or byte swapping.
//! A sizer counts exactly the bytes a packer of the same function writes.
//!
//! # Invariants
//!
//! - A `pup_er` is a [`Pup`] made by a `pup_new_…` call (boxed, freed by
//!   `pup_destroy`) or lent by this crate to a C function for the length of
//!   one call (the struct reductions' pup function); it is used on one
//!   thread at a time, as C uses it.
//! - A packer or unpacker given a size (`pup_new_toMemSized`,
//!   `pup_new_fromMemSized`, and every one this crate makes) never writes
//!   or reads a byte outside it: an item that would cross the end ends the
//!   job, naming the call, the item's size, the offset and the buffer's
//!   size. Charm++'s `pup_new_toMem`/`pup_new_fromMem` take no size: those
//!   trust the caller, as Charm++ does (size the buffer with a sizer).
//! - A null item pointer with a non-zero length, or a null buffer given
//!   an item, ends the job naming the call (a sizer reads no item, so it
//!   accepts a null one).
//!
//! # Concurrency
//!
//! None: a `pup_er` is plain memory its C caller owns.
use std::ffi::{
    c_char, c_double, c_float, c_int, c_long, c_short, c_uchar, c_uint, c_ulong, c_ushort, c_void,
};

use crate::nonneg;

/// What a [`Pup`] does with the items it is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Sizing,
    Packing,
    Unpacking,
}

/// A C `pup_er`: a sizer, a packer or an unpacker, and how far it got.
#[derive(Debug)]
pub struct Pup {
    mode: Mode,
    /// The buffer (null for a sizer).
    buf: *mut u8,
    /// The buffer's size, if it was given one.
    limit: Option<usize>,
    /// Bytes counted, written or read so far.
    at: usize,
}

/// A C `pup_er` (an opaque pointer to a [`Pup`]).
#[allow(non_camel_case_types)]
pub type pup_er = *mut c_void;

impl Pup {
    /// A sizer.
    pub(crate) fn sizer() -> Pup {
        Pup {
            mode: Mode::Sizing,
            buf: std::ptr::null_mut(),
            limit: None,
            at: 0,
        }
    }

    /// A packer into the `len` bytes at `buf`.
    pub(crate) fn packer(buf: *mut u8, len: usize) -> Pup {
        Pup {
            mode: Mode::Packing,
            buf,
            limit: Some(len),
            at: 0,
        }
    }

    /// An unpacker from the `len` bytes at `buf`.
    pub(crate) fn unpacker(buf: *const u8, len: usize) -> Pup {
        Pup {
            mode: Mode::Unpacking,
            buf: buf.cast_mut(),
            limit: Some(len),
            at: 0,
        }
    }

    /// Bytes counted, written or read so far.
    pub(crate) fn size(&self) -> usize {
        self.at
    }

    /// This `Pup` as a C `pup_er`, for the length of a call.
    pub(crate) fn as_pup_er(&mut self) -> pup_er {
        std::ptr::from_mut(self).cast()
    }

    /// Sizes, packs or unpacks the `n` bytes at `item`, for C call `call`.
    ///
    /// # Safety
    /// `item` points at `n` bytes, readable when packing and writable when
    /// unpacking; a packer's or unpacker's buffer holds its `limit` (or,
    /// without one, as many bytes as are moved).
    unsafe fn transfer(&mut self, item: *mut u8, n: usize, call: &str) {
        let end = match self.at.checked_add(n) {
            Some(end) => end,
            None => converse::abort(&format!("{call}: {n} bytes more overflow the size")),
        };
        if self.mode == Mode::Sizing {
            self.at = end;
            return;
        }
        if let Some(limit) = self.limit
            && end > limit
        {
            overrun(self.mode, call, n, self.at, limit);
        }
        if n == 0 {
            return;
        }
        if item.is_null() {
            converse::abort(&format!("{call}: the item pointer is null ({n} bytes)"));
        }
        if self.buf.is_null() {
            converse::abort(&format!("{call}: the pup_er's buffer is null"));
        }
        // SAFETY: `at + n` bytes fit the buffer (checked against the limit,
        // or the caller's promise without one); `item` holds `n` bytes (the
        // caller's promise); C never lends an item inside the buffer being
        // packed into or unpacked from, and if it did the bytes would only
        // be garbled, as in Charm++ (`copy` tolerates overlap).
        unsafe {
            let at = self.buf.add(self.at);
            match self.mode {
                Mode::Packing => std::ptr::copy(item, at, n),
                Mode::Unpacking => std::ptr::copy(at, item, n),
                Mode::Sizing => unreachable!("returned above"),
            }
        }
        self.at = end;
    }
}

#[cold]
#[inline(never)]
fn overrun(mode: Mode, call: &str, n: usize, at: usize, limit: usize) -> ! {
    let (verb, what) = match mode {
        Mode::Packing => ("packing", "written"),
        _ => ("unpacking", "read"),
    };
    converse::abort(&format!(
        "{call}: {verb} {n} bytes at offset {at} overruns the {limit}-byte buffer (only {} more can be {what})",
        limit - at.min(limit)
    ))
}

/// The bytes a sized packer or unpacker behind `p` has left (`None`: a
/// sizer, or one given no size), or the job ends naming `call` (a null
/// `p`).
///
/// # Safety
/// As [`pup`].
pub(crate) unsafe fn remaining(p: pup_er, call: &str) -> Option<usize> {
    // SAFETY: the caller's promise.
    let pup = unsafe { pup(p, call) };
    if pup.mode == Mode::Sizing {
        return None;
    }
    pup.limit.map(|l| l.saturating_sub(pup.at))
}

/// The [`Pup`] behind `p`, or the job ends naming `call`.
///
/// # Safety
/// `p` is null or a live `pup_er`, used by no one else meanwhile.
unsafe fn pup<'a>(p: pup_er, call: &str) -> &'a mut Pup {
    if p.is_null() {
        converse::abort(&format!("{call}: the pup_er is null"));
    }
    // SAFETY: a live `Pup` (the caller's promise).
    unsafe { &mut *p.cast::<Pup>() }
}

fn boxed(p: Pup) -> pup_er {
    Box::into_raw(Box::new(p)).cast()
}

/// `pup_new_sizer()`: a `pup_er` that counts the bytes its items take
/// (read them with `pup_size`).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pup_new_sizer() -> pup_er {
    boxed(Pup::sizer())
}

/// `pup_new_toMem(buf)`: packs into `buf`, which must hold every byte
/// packed (Charm++'s form: no size, nothing checked; size the buffer with
/// a sizer, or use `pup_new_toMemSized`).
///
/// # Safety
/// `buf` has room for every byte the `pup_er` is given.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn pup_new_toMem(buf: *mut c_void) -> pup_er {
    boxed(Pup {
        mode: Mode::Packing,
        buf: buf.cast(),
        limit: None,
        at: 0,
    })
}

/// `pup_new_fromMem(buf)`: unpacks from `buf` (Charm++'s form: no size,
/// nothing checked; see `pup_new_fromMemSized`).
///
/// # Safety
/// `buf` holds every byte the `pup_er` is asked for.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn pup_new_fromMem(buf: *const c_void) -> pup_er {
    boxed(Pup {
        mode: Mode::Unpacking,
        buf: buf.cast::<u8>().cast_mut(),
        limit: None,
        at: 0,
    })
}

/// `pup_new_toMemSized(buf, size)`: packs into the `size` bytes at `buf`;
/// an item that does not fit ends the job naming it.
///
/// # Safety
/// `buf` points at `size` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn pup_new_toMemSized(buf: *mut c_void, size: c_int) -> pup_er {
    boxed(Pup::packer(buf.cast(), nonneg(size, "pup_new_toMemSized")))
}

/// `pup_new_fromMemSized(buf, size)`: unpacks from the `size` bytes at
/// `buf`; an item past their end ends the job naming it.
///
/// # Safety
/// `buf` points at `size` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn pup_new_fromMemSized(buf: *const c_void, size: c_int) -> pup_er {
    boxed(Pup::unpacker(
        buf.cast(),
        nonneg(size, "pup_new_fromMemSized"),
    ))
}

/// `pup_destroy(p)`: frees a `pup_er` a `pup_new_…` call made (null: does
/// nothing).
///
/// # Safety
/// `p` is null or came from a `pup_new_…` call and is not used after.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn pup_destroy(p: pup_er) {
    if !p.is_null() {
        // SAFETY: boxed by `boxed` (the caller's promise), freed once.
        drop(unsafe { Box::from_raw(p.cast::<Pup>()) });
    }
}

/// `pup_isPacking(p)`: 1 for a packer.
///
/// # Safety
/// `p` is a live `pup_er`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn pup_isPacking(p: pup_er) -> c_int {
    // SAFETY: the caller's promise.
    c_int::from(unsafe { pup(p, "pup_isPacking") }.mode == Mode::Packing)
}

/// `pup_isUnpacking(p)`: 1 for an unpacker.
///
/// # Safety
/// `p` is a live `pup_er`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn pup_isUnpacking(p: pup_er) -> c_int {
    // SAFETY: the caller's promise.
    c_int::from(unsafe { pup(p, "pup_isUnpacking") }.mode == Mode::Unpacking)
}

/// `pup_isSizing(p)`: 1 for a sizer.
///
/// # Safety
/// `p` is a live `pup_er`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn pup_isSizing(p: pup_er) -> c_int {
    // SAFETY: the caller's promise.
    c_int::from(unsafe { pup(p, "pup_isSizing") }.mode == Mode::Sizing)
}

/// `pup_isDeleting(p)`: 0 (no `pup_er` here deletes what it packs).
///
/// # Safety
/// `p` is a live `pup_er`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn pup_isDeleting(p: pup_er) -> c_int {
    // SAFETY: the caller's promise.
    let _ = unsafe { pup(p, "pup_isDeleting") };
    0
}

/// `pup_isUserlevel(p)`: 0 (no `pup_er` here is a user-level checkpoint).
///
/// # Safety
/// `p` is a live `pup_er`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn pup_isUserlevel(p: pup_er) -> c_int {
    // SAFETY: the caller's promise.
    let _ = unsafe { pup(p, "pup_isUserlevel") };
    0
}

/// `pup_isRestarting(p)`: 0 (no `pup_er` here restarts from a checkpoint).
///
/// # Safety
/// `p` is a live `pup_er`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn pup_isRestarting(p: pup_er) -> c_int {
    // SAFETY: the caller's promise.
    let _ = unsafe { pup(p, "pup_isRestarting") };
    0
}

/// `pup_size(p)`: the bytes counted (a sizer), written (a packer) or read
/// (an unpacker) so far. More than `INT_MAX` ends the job.
///
/// # Safety
/// `p` is a live `pup_er`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn pup_size(p: pup_er) -> c_int {
    // SAFETY: the caller's promise.
    let n = unsafe { pup(p, "pup_size") }.at;
    c_int::try_from(n)
        .unwrap_or_else(|_| converse::abort(&format!("pup_size: {n} bytes do not fit a C int")))
}

/// `pup_bytes(p, ptr, nBytes)`: the `nBytes` bytes at `ptr`.
///
/// # Safety
/// `p` is a live `pup_er`; `ptr` points at `nBytes` bytes (readable when
/// packing, writable when unpacking).
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn pup_bytes(p: pup_er, ptr: *mut c_void, n_bytes: c_int) {
    let n = nonneg(n_bytes, "pup_bytes");
    // SAFETY: the caller's promise.
    unsafe { pup(p, "pup_bytes").transfer(ptr.cast(), n, "pup_bytes") }
}

/// The single-item and array functions of one C type.
macro_rules! basic_type {
    ($one:ident, $many:ident, $t:ty, $c:literal) => {
        #[doc = concat!("`", stringify!($one), "(p, v)`: one `", $c, "` at `v`.")]
        ///
        /// # Safety
        /// `p` is a live `pup_er`; `v` points at one item (readable when
        /// packing, writable when unpacking).
        #[unsafe(no_mangle)]
        pub unsafe extern "C-unwind" fn $one(p: pup_er, v: *mut $t) {
            let call = stringify!($one);
            // SAFETY: the caller's promise.
            unsafe { pup(p, call).transfer(v.cast(), size_of::<$t>(), call) }
        }

        #[doc = concat!("`", stringify!($many), "(p, arr, nItems)`: `nItems` `", $c, "`s at `arr`.")]
        ///
        /// # Safety
        /// `p` is a live `pup_er`; `arr` points at `nItems` items (readable
        /// when packing, writable when unpacking).
        #[unsafe(no_mangle)]
        pub unsafe extern "C-unwind" fn $many(p: pup_er, arr: *mut $t, n_items: c_int) {
            let call = stringify!($many);
            let items = nonneg(n_items, call);
            let Some(n) = items.checked_mul(size_of::<$t>()) else {
                converse::abort(&format!("{call}: {items} items overflow the size"))
            };
            // SAFETY: the caller's promise.
            unsafe { pup(p, call).transfer(arr.cast(), n, call) }
        }
    };
}

basic_type!(pup_char, pup_chars, c_char, "char");
basic_type!(pup_short, pup_shorts, c_short, "short");
basic_type!(pup_int, pup_ints, c_int, "int");
basic_type!(pup_long, pup_longs, c_long, "long");
basic_type!(pup_uchar, pup_uchars, c_uchar, "unsigned char");
basic_type!(pup_ushort, pup_ushorts, c_ushort, "unsigned short");
basic_type!(pup_uint, pup_uints, c_uint, "unsigned int");
basic_type!(pup_ulong, pup_ulongs, c_ulong, "unsigned long");
basic_type!(pup_float, pup_floats, c_float, "float");
basic_type!(pup_double, pup_doubles, c_double, "double");
basic_type!(pup_pointer, pup_pointers, *mut c_void, "void *");
basic_type!(pup_int8, pup_int8s, i64, "int64_t");

/// Packs `data` with the C pup function `f`: sizes it, then packs it into
/// a buffer of exactly that size. A function that packs fewer bytes than
/// it sized ends the job naming `call` (more overruns the buffer, which
/// ends it too).
pub(crate) fn pack_with(
    f: extern "C-unwind" fn(pup_er, *mut c_void),
    data: *mut c_void,
    call: &str,
) -> Vec<u8> {
    let mut sizer = Pup::sizer();
    f(sizer.as_pup_er(), data);
    let n = sizer.size();
    let mut buf = vec![0u8; n];
    let mut packer = Pup::packer(buf.as_mut_ptr(), n);
    f(packer.as_pup_er(), data);
    if packer.size() != n {
        converse::abort(&format!(
            "{call}: the pup function sized {n} bytes but packed {} (it must name the same items when sizing and packing)",
            packer.size()
        ));
    }
    buf
}
