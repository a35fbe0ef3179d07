//! Tag matching from C (`converse-rs/ext.h`, the extensions manual's
//! chapter 2): `CmmNew`, `CmmPut`, `CmmFind`, `CmmGet`, `CmmProbe`,
//! `CmmEntries`, `CmmFree`, over [`converse_ext::cmm::CmmTable`].
//!
//! # Invariants
//!
//! - A C `CmmTable` is the address of a [`CmmTableStruct`] that `CmmNew`
//!   boxed and `CmmFree` frees; a null table given to any call ends the job
//!   naming the call.
//! - The table stores C pointers as they are (never read). Matching is the
//!   Rust table's: same number of tags, each pair equal or one of them
//!   `CmmWildcard` (-1), on either side; among the matches the oldest
//!   comes first.
//! - `CmmFree` gives every pointer still in the table to `CmiFree`, as the
//!   manual says (so what is left there must be a Converse buffer); null
//!   pointers are skipped.
//!
//! # Concurrency
//!
//! None of its own: a table is plain data, used by one thread at a time
//! (the program locks it if PEs share it).
use std::collections::BTreeSet;
use std::ffi::{c_int, c_void};

use converse_ext::cmm::CmmTable;

/// One stored C pointer.
struct Stored(*mut c_void);

/// What a C `CmmTable` points at.
pub struct CmmTableStruct {
    table: CmmTable<Stored>,
    /// Every length of tag list ever stored (what `CmmFree` drains).
    lengths: BTreeSet<usize>,
}

/// A C `CmmTable`.
pub type CmmTableC = *mut CmmTableStruct;

/// The table at `t`, or the job ends naming `call`.
///
/// # Safety
/// `t` is null or a live table from `CmmNew`.
unsafe fn table<'a>(t: CmmTableC, call: &str) -> &'a mut CmmTableStruct {
    if t.is_null() {
        converse::abort(&format!("{call}: the table is null"));
    }
    // SAFETY: a live table from `CmmNew` (the caller's promise), used by
    // one thread at a time (the module comment).
    unsafe { &mut *t }
}

/// The `ntags` tags at `tags` (none for `ntags == 0`).
///
/// # Safety
/// `tags` points at `ntags` ints when `ntags > 0`.
unsafe fn tags_of<'a>(ntags: c_int, tags: *const c_int, call: &str) -> &'a [i32] {
    let n = crate::nonneg(ntags, call);
    if n == 0 {
        return &[];
    }
    if tags.is_null() {
        converse::abort(&format!("{call}: {n} tags at a null pointer"));
    }
    // SAFETY: `n` ints at `tags` (the caller's promise).
    unsafe { std::slice::from_raw_parts(tags, n) }
}

/// `CmmNew()`: an empty table.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmmNew() -> CmmTableC {
    Box::into_raw(Box::new(CmmTableStruct {
        table: CmmTable::new(),
        lengths: BTreeSet::new(),
    }))
}

/// `CmmPut(t, ntags, tags, msg)`: stores `msg` under the `ntags` tags at
/// `tags` (which may hold `CmmWildcard`).
///
/// # Safety
/// `t` is a live table; `tags` points at `ntags` ints.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmmPut(
    t: CmmTableC,
    ntags: c_int,
    tags: *const c_int,
    msg: *mut c_void,
) {
    // SAFETY: the caller's promises.
    let (t, tags) = unsafe { (table(t, "CmmPut"), tags_of(ntags, tags, "CmmPut")) };
    t.lengths.insert(tags.len());
    t.table.put(tags, Stored(msg));
}

/// `CmmFind(t, ntags, tags, ret_tags, del)`: the oldest pointer stored
/// under tags matching the pattern, its tags copied to `ret_tags` (if not
/// null); taken out of the table if `del` is nonzero. Null if none matches.
///
/// # Safety
/// `t` is a live table; `tags` points at `ntags` ints; `ret_tags` is null
/// or has room for `ntags` ints.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmmFind(
    t: CmmTableC,
    ntags: c_int,
    tags: *const c_int,
    ret_tags: *mut c_int,
    del: c_int,
) -> *mut c_void {
    // SAFETY: the caller's promises.
    unsafe { find(t, ntags, tags, ret_tags, del != 0, "CmmFind") }
}

/// `CmmGet(t, ntags, tags, ret_tags)`: `CmmFind` that takes the pointer out.
///
/// # Safety
/// As [`CmmFind`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmmGet(
    t: CmmTableC,
    ntags: c_int,
    tags: *const c_int,
    ret_tags: *mut c_int,
) -> *mut c_void {
    // SAFETY: the caller's promises.
    unsafe { find(t, ntags, tags, ret_tags, true, "CmmGet") }
}

/// `CmmProbe(t, ntags, tags, ret_tags)`: `CmmFind` that leaves the pointer
/// in the table.
///
/// # Safety
/// As [`CmmFind`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmmProbe(
    t: CmmTableC,
    ntags: c_int,
    tags: *const c_int,
    ret_tags: *mut c_int,
) -> *mut c_void {
    // SAFETY: the caller's promises.
    unsafe { find(t, ntags, tags, ret_tags, false, "CmmProbe") }
}

/// # Safety
/// As [`CmmFind`].
unsafe fn find(
    t: CmmTableC,
    ntags: c_int,
    tags: *const c_int,
    ret_tags: *mut c_int,
    remove: bool,
    call: &str,
) -> *mut c_void {
    // SAFETY: the caller's promises.
    let (t, pattern) = unsafe { (table(t, call), tags_of(ntags, tags, call)) };
    let (stored_tags, msg): (Vec<i32>, *mut c_void) = if remove {
        match t.table.get(pattern) {
            Some((tags, Stored(msg))) => (tags, msg),
            None => return std::ptr::null_mut(),
        }
    } else {
        match t.table.probe(pattern) {
            Some((tags, Stored(msg))) => (tags.to_vec(), *msg),
            None => return std::ptr::null_mut(),
        }
    };
    if !ret_tags.is_null() {
        // SAFETY: room for `ntags` ints at `ret_tags` (the caller's
        // promise); a match has as many tags as the pattern.
        unsafe { std::ptr::copy_nonoverlapping(stored_tags.as_ptr(), ret_tags, stored_tags.len()) };
    }
    msg
}

/// `CmmEntries(t)`: how many pointers the table holds.
///
/// # Safety
/// `t` is a live table.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmmEntries(t: CmmTableC) -> c_int {
    // SAFETY: the caller's promise.
    let t = unsafe { table(t, "CmmEntries") };
    c_int::try_from(t.table.len()).unwrap_or(c_int::MAX)
}

/// `CmmFree(t)`: frees the table, and with `CmiFree` every pointer still in
/// it (the manual's warning: they must be Converse buffers).
///
/// # Safety
/// `t` is a live table, not used afterwards; what it holds are buffers
/// `CmiFree` takes (or null).
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmmFree(t: CmmTableC) {
    if t.is_null() {
        converse::abort("CmmFree: the table is null");
    }
    // SAFETY: made by `Box::into_raw` in `CmmNew` (the caller's promise),
    // freed once.
    let mut t = unsafe { Box::from_raw(t) };
    // Wildcards of every length stored drain the table.
    let lengths = std::mem::take(&mut t.lengths);
    for n in lengths {
        let pattern = vec![converse_ext::cmm::WILDCARD; n];
        while let Some((_, Stored(msg))) = t.table.get(&pattern) {
            if !msg.is_null() {
                // SAFETY: a Converse buffer (the caller's promise), given up
                // by the table.
                unsafe { crate::msgs::CmiFree(msg) };
            }
        }
    }
}
