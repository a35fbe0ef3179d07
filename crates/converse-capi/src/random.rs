//! Random numbers from C (Crn, `conv-random.h`): the calling PE's default
//! stream (`CrnSrand`, `CrnRand`, `CrnDrand`) and streams the program
//! keeps in a `CrnStream` of its own (`CrnInitStream`, `CrnInt`,
//! `CrnDouble`, `CrnFloat`), over the core's [`converse::random`].
//!
//! # Invariants
//!
//! - A `CrnStream` is a complete C type ([`CrnStream`], 56 bytes and
//!   8-aligned, as Charm++'s): the program declares one anywhere (on the
//!   stack, in a struct, in a message) and `CrnInitStream` writes the
//!   core's [`RandomStream`] in its `state` bytes, with a mark saying it
//!   did. Compile-time assertions below check that the state fits, is
//!   aligned, and owns nothing (no drop glue), so that C may copy a
//!   `CrnStream` with `memcpy` or `=` and both copies go on alike.
//! - A stream without the mark (zeroed memory, never initialised) given
//!   to `CrnInt`/`CrnDouble`/`CrnFloat` ends the job naming the call, as
//!   do a null pointer and a stream type other than 0, 1 or 2.
//! - The same seed and type on the same PE give the same numbers, on any
//!   machine; different seeds (or PEs) give streams that do not overlap.
//!
//! # Concurrency
//!
//! The default stream is the calling PE's own (its user-level threads
//! share it). A `CrnStream` is the program's memory: one thread at a time.
use std::ffi::{c_double, c_float, c_int, c_uint};
use std::mem::{MaybeUninit, align_of, needs_drop, offset_of, size_of};

use converse::random::{self, RandomStream};

/// What `CrnInitStream` writes in [`CrnStream::initialised`]: the stream's
/// state is there ("Crn!" in ASCII).
const INITIALISED: u32 = 0x4372_6e21;

/// A C `CrnStream` (`struct rngen_`): a stream's state, where the program
/// put it. Same size and alignment as Charm++'s (56, 8), so structs that
/// embed one keep their layout.
#[repr(C)]
pub struct CrnStream {
    /// [`INITIALISED`] once `CrnInitStream` has written `state`.
    initialised: c_uint,
    /// Unused (padding made explicit).
    reserved: c_uint,
    /// The core's [`RandomStream`], in its first bytes.
    state: MaybeUninit<[u64; 6]>,
}

const _: () = {
    // The state fits its room in the C type, aligned.
    assert!(size_of::<RandomStream>() <= size_of::<[u64; 6]>());
    assert!(align_of::<RandomStream>() <= align_of::<u64>());
    assert!(offset_of!(CrnStream, state) % align_of::<RandomStream>() == 0);
    // C copies streams bitwise and drops them by forgetting them.
    assert!(!needs_drop::<RandomStream>());
    // What `conv-random.h` declares.
    assert!(size_of::<CrnStream>() == 56);
    assert!(align_of::<CrnStream>() == 8);
};

/// `CrnSrand(seed)`: seeds the calling PE's default stream (`seed` as the
/// bits of an `int`, the manual's type).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CrnSrand(seed: c_uint) {
    random::srand(seed as i32);
}

/// `CrnRand()`: the next number of the calling PE's default stream, in
/// `0 ..= INT_MAX`.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CrnRand() -> c_int {
    random::rand()
}

/// `CrnDrand()`: the next number of the calling PE's default stream as a
/// double in `[0, 1)` (the manual's prototype says `int`, its text and
/// Charm++ a double).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CrnDrand() -> c_double {
    random::drand()
}

/// `CrnInitStream(dest, seed, type)`: makes `*dest` the stream of `seed`
/// and `type` (0, 1 or 2) on the calling PE.
///
/// # Safety
/// `dest` points at a writable `CrnStream`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CrnInitStream(dest: *mut CrnStream, seed: c_uint, kind: c_int) {
    if dest.is_null() {
        converse::abort("CrnInitStream: the stream pointer is null");
    }
    if !(0..=2).contains(&kind) {
        converse::abort(&format!(
            "CrnInitStream: stream type {kind}: the types are 0, 1 and 2"
        ));
    }
    let stream = RandomStream::new(seed as i32, kind);
    // SAFETY: `dest` is writable (the caller's promise); the state's room
    // holds a `RandomStream`, aligned (asserted above).
    unsafe {
        (&raw mut (*dest).state)
            .cast::<RandomStream>()
            .write(stream);
        (&raw mut (*dest).initialised).write(INITIALISED);
        (&raw mut (*dest).reserved).write(0);
    }
}

/// The stream in `*s`, or the job ends naming `call` (null, or never
/// initialised).
///
/// # Safety
/// `s` is null or points at a `CrnStream` (initialised or zeroed) that no
/// other thread uses during the call.
unsafe fn stream<'a>(s: *mut CrnStream, call: &str) -> &'a mut RandomStream {
    if s.is_null() {
        converse::abort(&format!("{call}: the stream pointer is null"));
    }
    // SAFETY: a `CrnStream` (the caller's promise).
    if unsafe { (&raw const (*s).initialised).read() } != INITIALISED {
        converse::abort(&format!(
            "{call}: the stream was not initialised by CrnInitStream"
        ));
    }
    // SAFETY: marked, so `CrnInitStream` wrote a `RandomStream` there (or
    // C copied one, which is one: it owns nothing); not shared during the
    // call (the caller's promise).
    unsafe { &mut *(&raw mut (*s).state).cast::<RandomStream>() }
}

/// `CrnInt(s)`: the stream's next number in `0 ..= INT_MAX` (the manual's
/// prototype says `double`, Charm++ `int`).
///
/// # Safety
/// `s` points at a `CrnStream` that `CrnInitStream` initialised (or a
/// copy of one).
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CrnInt(s: *mut CrnStream) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { stream(s, "CrnInt") }.next_int()
}

/// `CrnDouble(s)`: the stream's next number as a double in `[0, 1)`.
///
/// # Safety
/// As [`CrnInt`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CrnDouble(s: *mut CrnStream) -> c_double {
    // SAFETY: the caller's promise.
    unsafe { stream(s, "CrnDouble") }.next_f64()
}

/// `CrnFloat(s)`: exactly `(float) CrnDouble(s)`, as the manual says (so
/// it may round up to 1.0, once in about 2^25 numbers).
///
/// # Safety
/// As [`CrnInt`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CrnFloat(s: *mut CrnStream) -> c_float {
    // SAFETY: the caller's promise.
    unsafe { stream(s, "CrnFloat") }.next_f32()
}
