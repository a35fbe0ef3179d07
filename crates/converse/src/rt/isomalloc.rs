//! Isomalloc (the manual's `CmiIsomalloc…`): blocks at virtual addresses
//! unique in the whole job, which can move to another process and live
//! there at the same address, internal pointers and all. The address space
//! and its bookkeeping are `mem::isomalloc`'s; this module names the
//! calling PE and its job.
//!
//! Across processes the address range must be free in every process of
//! the job (it is, on Linux, unless a program maps something there on
//! purpose; if not, the first call says so).
use std::ptr::NonNull;

use super::pe;
use crate::mem::isomalloc as space;
pub use crate::mem::isomalloc::{IsoError, PackedBlock};

fn non_null(at: usize) -> NonNull<u8> {
    NonNull::new(at as *mut u8).expect("isomalloc's range does not hold address 0")
}

/// Allocates `size` bytes (rounded up to whole pages) at an address no
/// other PE of the job will ever use (`CmiIsomalloc`): zeroed, readable
/// and writable, from the calling PE's slice.
#[doc(alias = "CmiIsomalloc")]
pub fn isomalloc(size: usize) -> Result<NonNull<u8>, IsoError> {
    let (me, pes) = pe::with(|pe| (pe.pe, pe.job.topo.num_pes()));
    space::alloc(me, pes, size).map(non_null)
}

/// Frees a block `isomalloc` (or [`isomalloc_unpack`]) gave
/// (`CmiIsomallocFree`). Freeing anything else, or twice, is an error.
///
/// # Safety
/// Nothing may use the block after: its pages go.
#[doc(alias = "CmiIsomallocFree")]
pub unsafe fn isomalloc_free(block: NonNull<u8>) -> Result<(), IsoError> {
    space::free(block.as_ptr() as usize)
}

/// The length in bytes of the block at `block`, if it is one living in
/// this process (`CmiIsomallocLength`).
#[doc(alias = "CmiIsomallocLength")]
pub fn isomalloc_length(block: *const u8) -> Option<usize> {
    space::length(block as usize)
}

/// True if `addr` may have been given by isomalloc: it lies in the job's
/// isomalloc range (`CmiIsomallocInRange`; `malloc` never returns such an
/// address, since the range is reserved in every process that uses it).
#[doc(alias = "CmiIsomallocInRange")]
pub fn isomalloc_in_range(addr: *const u8) -> bool {
    space::in_region(addr as usize)
}

/// Packs the block at `block` to move it (the packing half of
/// `CmiIsomallocPup`): its bytes and address. The block leaves this
/// process (its pages go), and its address stays reserved for it until it
/// is unpacked somewhere and freed there.
///
/// # Safety
/// Nothing may use the block after, until it is unpacked.
#[doc(alias = "CmiIsomallocPup")]
pub unsafe fn isomalloc_pack(block: NonNull<u8>) -> Result<PackedBlock, IsoError> {
    // SAFETY: the caller's promise.
    unsafe { space::release(block.as_ptr() as usize) }
}

/// Unpacks a block [`isomalloc_pack`] packed, on any PE of the job, at the
/// address it had (the unpacking half of `CmiIsomallocPup`): pointers into
/// it stay valid. The calling PE then owns it (free it with
/// [`isomalloc_free`]).
#[doc(alias = "CmiIsomallocPup")]
pub fn isomalloc_unpack(packed: &PackedBlock) -> Result<NonNull<u8>, IsoError> {
    let (pes, home_is_here) = pe::with(|pe| {
        let pes = pe.job.topo.num_pes();
        let home = usize::try_from(packed.addr)
            .ok()
            .filter(|&a| space::in_region(a))
            .map(|a| space::home_pe(a, pes));
        let here = home.is_some_and(|h| h < pes && (h == pe.pe || pe.job.local_pe(h).is_some()));
        (pes, here)
    });
    space::adopt(packed, pes, home_is_here).map(non_null)
}
