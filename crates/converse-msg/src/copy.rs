//! Copies of message bytes that avoid `memcpy`'s slow case on this
//! hardware.
//!
//! glibc's `memcpy` copies from about 2 KiB up to its non-temporal
//! threshold with `rep movsb`. On the AMD Zen 3 processors this runtime is
//! measured on, `rep movsb` runs 20 to 35 times slower when the
//! destination lies 1 to 31 bytes past the source modulo 4 KiB (its loads
//! alias its own earlier stores): 4 KiB in 2.5 µs instead of 0.1, 64 KiB
//! in 36 µs instead of 1.7, 256 KiB in 145 µs instead of 7.5 (C, every
//! offset pair, `docs/benchmarks.md`, "copies that alias"). Copies of at
//! most 2 KiB use vector loops, which do not care. Whether a copy of the
//! runtime lands on the slow case depends on where the allocator put the
//! two buffers, so the same program ran at one speed or another from run
//! to run (the bimodal shm and tcp rows).
//!
//! [`copy_nonoverlapping`] copies such a pair in pieces of
//! [`PIECE`] bytes (each a vector-loop copy: 4 KiB in 70 ns, 64 KiB in
//! 2.0 µs, 256 KiB in 9.2 µs) and every other copy in one call, as
//! before.
//!
//! # Invariants
//!
//! The bytes copied are exactly those of one `ptr::copy_nonoverlapping`;
//! only the number of calls differs. No state; any thread.

/// The piece a copy in the slow case is cut into: copies this short take
/// the vector loop.
pub const PIECE: usize = 2048;

/// Copies of this size or more stream past the caches in one call
/// (non-temporal stores), which the aliasing does not slow: cut only
/// below it.
const STREAMED: usize = 1 << 20;

/// True if a `len`-byte copy from `src` to `dst` would take the slow case.
#[inline]
fn aliases(src: usize, dst: usize, len: usize) -> bool {
    let ahead = dst.wrapping_sub(src) & 4095;
    len > PIECE && len < STREAMED && (1..64).contains(&ahead)
}

/// `std::ptr::copy_nonoverlapping(src, dst, len)`, cut into pieces when
/// the whole would take `memcpy`'s slow case (see the module comment).
///
/// # Safety
/// As for `std::ptr::copy_nonoverlapping`: `src` valid for reads and
/// `dst` for writes of `len` bytes, the two not overlapping.
#[inline]
pub unsafe fn copy_nonoverlapping(src: *const u8, dst: *mut u8, len: usize) {
    if !aliases(src as usize, dst as usize, len) {
        // SAFETY: the caller's promise.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
        return;
    }
    let mut at = 0;
    while at < len {
        let n = PIECE.min(len - at);
        // SAFETY: `at + n <= len`: inside both ranges (the caller's
        // promise).
        unsafe { std::ptr::copy_nonoverlapping(src.add(at), dst.add(at), n) };
        at += n;
    }
}

/// `dst.copy_from_slice(src)` through [`copy_nonoverlapping`].
///
/// # Panics
/// If the lengths differ.
#[inline]
pub fn copy_slice(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy_slice: lengths differ");
    // SAFETY: two slices of the same length; a `&mut` cannot overlap a
    // `&`.
    unsafe { copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr(), src.len()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slow_case_is_the_destination_just_past_the_source() {
        let base = 0x10_0000usize;
        assert!(aliases(base, base + 16, 8192));
        assert!(aliases(base, base + 4096 * 3 + 1, 8192));
        assert!(aliases(base + 4000, base + 4096 + 4010, 65536));
        assert!(!aliases(base, base, 8192), "same offset");
        assert!(!aliases(base, base + 64, 8192));
        assert!(!aliases(base + 16, base, 8192), "behind");
        assert!(!aliases(base, base + 16, PIECE), "short: a vector loop");
        assert!(!aliases(base, base + 16, STREAMED), "streamed");
    }

    #[test]
    fn copies_every_byte_at_every_length_and_offset() {
        // Under miri (slow), lengths that still take the pieces.
        let lens: &[usize] = if cfg!(miri) {
            &[1, PIECE + 1, 2 * PIECE + 5]
        } else {
            &[
                0,
                1,
                PIECE - 1,
                PIECE,
                PIECE + 1,
                3 * PIECE + 5,
                65_537,
                STREAMED + 3,
            ]
        };
        let room = lens.iter().max().unwrap() + 3 * 4096;
        let src: Vec<u8> = (0..room).map(|i| (i * 7 + i / 251) as u8).collect();
        let mut dst = vec![0u8; room];
        for &len in lens {
            let aheads: &[usize] = if cfg!(miri) {
                &[0, 16, 64]
            } else {
                &[0, 1, 16, 63, 64, 4095]
            };
            for &ahead in aheads {
                let (s, d) = (100, 100 + 4096 + ahead);
                dst.fill(0);
                copy_slice(&mut dst[d..d + len], &src[s..s + len]);
                assert!(
                    dst[d..d + len] == src[s..s + len],
                    "len {len}, ahead {ahead}"
                );
                assert!(dst[..d].iter().all(|&b| b == 0), "nothing before");
                assert!(dst[d + len..].iter().all(|&b| b == 0), "nothing after");
            }
        }
    }
}
