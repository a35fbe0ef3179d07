//! `gamma_mlock`, `gamma_munlock`, `gamma_munlockall`: the OS's `mlock`
//! family. `mlock` also faults the pages in (the document's pre-fetch).
//! The Converse machine layer does not need locked buffers; a program may
//! still want them for its timing, and the calls report the OS's refusal
//! (`RLIMIT_MEMLOCK`, usually) as [`Error::Lock`].
use crate::error::{Error, Result};
use crate::port::Buffer;

fn os(what: &str, len: usize, e: rustix::io::Errno) -> Error {
    Error::Lock(format!(
        "{what} of {len} bytes refused: {e} (the locked-memory limit is `ulimit -l`)"
    ))
}

/// Locks `bytes` into RAM, faulting them in (`gamma_mlock`).
#[doc(alias = "gamma_mlock")]
pub fn mlock(bytes: &[u8]) -> Result<()> {
    if bytes.is_empty() {
        return Ok(());
    }
    // SAFETY: the range is a live slice of this process; `mlock` changes
    // only how its pages are kept, not their contents.
    unsafe { rustix::mm::mlock(bytes.as_ptr() as *mut _, bytes.len()) }
        .map_err(|e| os("mlock", bytes.len(), e))
}

/// Unlocks `bytes` (`gamma_munlock`).
#[doc(alias = "gamma_munlock")]
pub fn munlock(bytes: &[u8]) -> Result<()> {
    if bytes.is_empty() {
        return Ok(());
    }
    // SAFETY: as in `mlock`; unlocking never touches the contents.
    unsafe { rustix::mm::munlock(bytes.as_ptr() as *mut _, bytes.len()) }
        .map_err(|e| os("munlock", bytes.len(), e))
}

/// Unlocks every page of the process (`gamma_munlockall`).
#[doc(alias = "gamma_munlockall")]
pub fn munlockall() -> Result<()> {
    rustix::mm::munlockall().map_err(|e| os("munlockall", 0, e))
}

impl Buffer {
    /// Locks the buffer's present bytes into RAM ([`mlock`]). Resizing the
    /// buffer may move them.
    pub fn mlock(&self) -> Result<()> {
        mlock(&self.borrow())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_region_locks_and_unlocks() {
        let b = Buffer::new(4096);
        match b.mlock() {
            Ok(()) => munlock(&b.borrow()).unwrap(),
            // A limit of 0 refuses it, with the reason.
            Err(Error::Lock(why)) => assert!(why.contains("ulimit -l"), "{why}"),
            Err(e) => panic!("{e}"),
        }
        munlockall().unwrap();
        assert!(mlock(&[]).is_ok());
    }
}
