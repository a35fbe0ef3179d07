//! Isomalloc's address space: one range of virtual addresses, the same in
//! every process of a job, cut into one slice per PE; each PE allocates
//! page-granular blocks from its own slice only, so a block's address is
//! unique in the whole job and a block can move to another process and
//! live there at the same address (the manual's "globally unique virtual
//! addresses").
//!
//! # Layout
//!
//! The range is [`REGION_BASE`, `REGION_BASE + REGION_LEN`) (16 TiB from 32
//! TiB up: far below where Linux puts executables, the heap, mappings and
//! stacks). PE `p` of `n` owns the slice `REGION_BASE + p·s` of `s =
//! min(REGION_LEN / n, 64 GiB)` bytes (page-aligned). A process reserves the
//! whole range at its first use (`PROT_NONE`, no memory behind it, and
//! `MAP_FIXED_NOREPLACE`: if anything of the process is there already, it
//! fails saying so instead of taking it over), so `malloc` never returns an
//! address inside it. A block is the pages of that range made readable and
//! writable; freeing one makes them inaccessible again and gives the pages
//! back to the system (`MADV_DONTNEED`).
//!
//! # Moving a block
//!
//! [`Space::release`] packs a block (its address and bytes) and takes it
//! out of this process while keeping its range reserved for it ("away"):
//! its PE will not give that range to another block. [`Space::adopt`] maps
//! a packed block at its address in the process that receives it: as the
//! block it was, if this is its home (it comes back), or as a guest. A
//! guest freed where it lives leaves its range "away" at home for good:
//! address space, not memory, is what is lost.
//!
//! # Invariants
//!
//! - Live blocks of one process never overlap, and a PE's blocks lie in its
//!   slice (a guest lies in its home PE's slice).
//! - Within one slice the free ranges, the blocks and the ranges away cover
//!   it exactly, without overlap (checked by the property test below).
//!
//! # Concurrency
//!
//! One mutex over the process's state: allocation is page-granular and
//! rare enough that one lock costs nothing that matters.
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Where the range starts.
pub const REGION_BASE: usize = 0x2000_0000_0000;
/// Its length.
pub const REGION_LEN: usize = 1 << 44;
/// The largest slice a PE gets.
const MAX_SLICE: usize = 1 << 36;

/// The system's page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf with an integer argument only.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as usize } else { 4096 }
}

/// The slice of PE `pe` of `pes`: (start, length).
pub fn slice_of(pe: usize, pes: usize) -> (usize, usize) {
    let page = page_size();
    let len = (REGION_LEN / pes.max(1)).min(MAX_SLICE) / page * page;
    (REGION_BASE + pe * len, len)
}

/// The PE whose slice holds `addr` (in the range), in a job of `pes` PEs.
pub fn home_pe(addr: usize, pes: usize) -> usize {
    (addr - REGION_BASE) / slice_of(0, pes).1
}

/// True if `addr` lies in the range.
pub fn in_region(addr: usize) -> bool {
    (REGION_BASE..REGION_BASE + REGION_LEN).contains(&addr)
}

/// A block packed to move: its address and its bytes.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PackedBlock {
    /// Where it lives, in every process.
    pub addr: u64,
    /// Its bytes (its whole length: a multiple of the page size).
    pub bytes: Vec<u8>,
}

impl PackedBlock {
    /// Its address (8 bytes, little-endian), then its bytes: to carry in a
    /// message.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(8 + self.bytes.len());
        v.extend_from_slice(&self.addr.to_le_bytes());
        v.extend_from_slice(&self.bytes);
        v
    }

    /// The block `to_bytes` gave, if `bytes` can be one (at least its
    /// address; unpacking checks the rest).
    pub fn from_bytes(bytes: &[u8]) -> Option<PackedBlock> {
        let addr = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
        Some(PackedBlock {
            addr,
            bytes: bytes[8..].to_vec(),
        })
    }
}

/// Why an isomalloc call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IsoError(pub String);

impl std::fmt::Display for IsoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "isomalloc: {}", self.0)
    }
}

impl std::error::Error for IsoError {}

/// One PE's slice: what is free in it, what is allocated, what is away.
/// Pure bookkeeping (no mapping), so the property test can drive it.
#[derive(Debug, Clone)]
pub struct Slice {
    start: usize,
    len: usize,
    /// Free ranges: start -> length, coalesced.
    free: BTreeMap<usize, usize>,
    /// Blocks allocated here and living in this process.
    blocks: BTreeMap<usize, usize>,
    /// Blocks allocated here and living elsewhere.
    away: BTreeMap<usize, usize>,
}

impl Slice {
    /// True if no block of it lives here or elsewhere.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty() && self.away.is_empty()
    }

    /// A slice of `len` bytes at `start`, all free.
    pub fn new(start: usize, len: usize) -> Slice {
        let mut free = BTreeMap::new();
        if len > 0 {
            free.insert(start, len);
        }
        Slice {
            start,
            len,
            free,
            blocks: BTreeMap::new(),
            away: BTreeMap::new(),
        }
    }

    /// Takes `len` bytes (a page multiple) from the lowest free range that
    /// holds them.
    pub fn alloc(&mut self, len: usize) -> Option<usize> {
        let (&at, &flen) = self.free.iter().find(|&(_, &l)| l >= len)?;
        self.free.remove(&at);
        if flen > len {
            self.free.insert(at + len, flen - len);
        }
        self.blocks.insert(at, len);
        Some(at)
    }

    /// Gives the block at `at` back; its length, if it was one.
    pub fn free(&mut self, at: usize) -> Option<usize> {
        let len = self.blocks.remove(&at)?;
        self.give_back(at, len);
        Some(len)
    }

    fn give_back(&mut self, mut at: usize, mut len: usize) {
        // Coalesce with the neighbours.
        if let Some((&prev, &plen)) = self.free.range(..at).next_back()
            && prev + plen == at
        {
            self.free.remove(&prev);
            at = prev;
            len += plen;
        }
        if let Some(&nlen) = self.free.get(&(at + len)) {
            self.free.remove(&(at + len));
            len += nlen;
        }
        self.free.insert(at, len);
    }

    /// The block at `at` leaves this process; its range stays its own.
    pub fn send_away(&mut self, at: usize) -> Option<usize> {
        let len = self.blocks.remove(&at)?;
        self.away.insert(at, len);
        Some(len)
    }

    /// The block at `at`, away, comes back.
    pub fn come_back(&mut self, at: usize, len: usize) -> bool {
        if self.away.get(&at) != Some(&len) {
            return false;
        }
        self.away.remove(&at);
        self.blocks.insert(at, len);
        true
    }

    /// The length of the block at `at`, if one lives here.
    pub fn block(&self, at: usize) -> Option<usize> {
        self.blocks.get(&at).copied()
    }

    /// True if `addr` is in this slice.
    pub fn holds(&self, addr: usize) -> bool {
        (self.start..self.start + self.len).contains(&addr)
    }

    /// Every range of the slice, tagged 0 free, 1 block, 2 away, sorted.
    #[cfg(test)]
    fn ranges(&self) -> Vec<(usize, usize, u8)> {
        let mut all: Vec<(usize, usize, u8)> = self
            .free
            .iter()
            .map(|(&a, &l)| (a, l, 0))
            .chain(self.blocks.iter().map(|(&a, &l)| (a, l, 1)))
            .chain(self.away.iter().map(|(&a, &l)| (a, l, 2)))
            .collect();
        all.sort();
        all
    }
}

/// The process's isomalloc state: its PEs' slices and its guests.
struct Space {
    /// The range is reserved in this process.
    reserved: bool,
    /// Slices by PE.
    slices: BTreeMap<usize, Slice>,
    /// The length every slice in `slices` was cut to (0 while there is
    /// none): a job whose slices have another length cuts them again.
    slice_len: usize,
    /// Blocks of other processes' PEs living here: address -> length.
    guests: BTreeMap<usize, usize>,
}

static SPACE: Mutex<Space> = Mutex::new(Space {
    reserved: false,
    slices: BTreeMap::new(),
    slice_len: 0,
    guests: BTreeMap::new(),
});

thread_local! {
    /// Nonzero while this OS thread holds the space's lock (or works on a
    /// thread heap): its allocations must then go to the system allocator,
    /// never to a migratable thread's heap (`cth::heap`), which is itself
    /// isomalloc memory (a map node of this process's bookkeeping there
    /// would leave with the thread; a heap growing there would take this
    /// lock again).
    static PAUSE_ROUTING: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// True while this OS thread's allocations must not go to a thread heap
/// (see `PAUSE_ROUTING`).
#[inline]
pub fn routing_paused() -> bool {
    PAUSE_ROUTING.with(|p| p.get() != 0)
}

/// Keeps this OS thread's allocations off thread heaps while it lives.
pub struct PauseRouting(());

impl PauseRouting {
    /// Pauses routing until dropped (nests).
    pub fn new() -> PauseRouting {
        PAUSE_ROUTING.with(|p| p.set(p.get() + 1));
        PauseRouting(())
    }
}

impl Default for PauseRouting {
    fn default() -> PauseRouting {
        PauseRouting::new()
    }
}

impl Drop for PauseRouting {
    fn drop(&mut self) {
        PAUSE_ROUTING.with(|p| p.set(p.get() - 1));
    }
}

/// The space, locked, with routing to thread heaps paused meanwhile.
struct Locked {
    // Declared first: unlocked before routing resumes.
    guard: std::sync::MutexGuard<'static, Space>,
    _pause: PauseRouting,
}

impl std::ops::Deref for Locked {
    type Target = Space;
    fn deref(&self) -> &Space {
        &self.guard
    }
}

impl std::ops::DerefMut for Locked {
    fn deref_mut(&mut self) -> &mut Space {
        &mut self.guard
    }
}

fn space() -> Locked {
    let pause = PauseRouting::new();
    Locked {
        guard: SPACE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
        _pause: pause,
    }
}

impl Space {
    /// Reserves the range in this process, once.
    fn reserve(&mut self) -> Result<(), IsoError> {
        if self.reserved {
            return Ok(());
        }
        // SAFETY: a fresh mapping at an address nothing of this process
        // uses (NOREPLACE makes the kernel refuse otherwise); PROT_NONE.
        let got = unsafe {
            libc::mmap(
                REGION_BASE as *mut libc::c_void,
                REGION_LEN,
                libc::PROT_NONE,
                libc::MAP_PRIVATE
                    | libc::MAP_ANONYMOUS
                    | libc::MAP_NORESERVE
                    | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if got != REGION_BASE as *mut libc::c_void {
            let e = std::io::Error::last_os_error();
            if got != libc::MAP_FAILED {
                // An old kernel without NOREPLACE put it elsewhere.
                // SAFETY: the mapping just made, used by nothing.
                unsafe { libc::munmap(got, REGION_LEN) };
            }
            return Err(IsoError(format!(
                "cannot reserve its address range {REGION_BASE:#x}..{:#x} in process {}: {e} (something of this process is mapped there)",
                REGION_BASE + REGION_LEN,
                std::process::id()
            )));
        }
        self.reserved = true;
        Ok(())
    }

    /// PE `pe`'s slice in a job of `pes` PEs. The slices kept are those of
    /// the jobs this process ran so far; they are cut again for a job
    /// whose slices have another length (more than 256 PEs: `slice_of`)
    /// only while none holds a block, since the old cut and the new one
    /// overlap.
    fn slice(&mut self, pe: usize, pes: usize) -> Result<&mut Slice, IsoError> {
        let (start, len) = slice_of(pe, pes);
        if self.slice_len != len {
            // Rare (a job of another size): only then are the slices
            // looked at, not at every allocation.
            if let Some(live) = self.slices.values().find(|s| !s.is_empty()) {
                return Err(IsoError(format!(
                    "a job of {pes} PEs cuts the range into slices of {len} bytes, but blocks of an earlier job's slices of {} bytes (one at {:#x}) still live in process {}",
                    self.slice_len,
                    live.start,
                    std::process::id()
                )));
            }
            self.slices.clear();
            self.slice_len = len;
        }
        Ok(self
            .slices
            .entry(pe)
            .or_insert_with(|| Slice::new(start, len)))
    }
}

/// Makes `len` bytes at `at` (inside the reserved range) readable and
/// writable, or inaccessible and empty again.
fn set_access(at: usize, len: usize, usable: bool) -> Result<(), IsoError> {
    if !usable {
        // SAFETY: pages of the reserved range that this module owns; no
        // reference to them survives a free or a release (the callers'
        // contract).
        unsafe { libc::madvise(at as *mut libc::c_void, len, libc::MADV_DONTNEED) };
    }
    // SAFETY: as above: pages of the reserved range.
    unsafe { protect(at, len, usable) }
}

/// Allocates `size` bytes (rounded up to pages, at least one) in PE `pe`'s
/// slice (`pes` PEs in the job): zeroed, readable and writable.
pub fn alloc(pe: usize, pes: usize, size: usize) -> Result<usize, IsoError> {
    let page = page_size();
    let len = size.max(1).div_ceil(page) * page;
    let mut s = space();
    s.reserve()?;
    let slice = s.slice(pe, pes)?;
    let at = slice.alloc(len).ok_or_else(|| {
        IsoError(format!(
            "PE {pe}'s slice of {} bytes has no {len} bytes free",
            slice.len
        ))
    })?;
    if let Err(e) = set_access(at, len, true) {
        slice.free(at);
        return Err(e);
    }
    Ok(at)
}

/// Frees the block at `at`, wherever it was allocated.
pub fn free(at: usize) -> Result<(), IsoError> {
    let mut s = space();
    if let Some(len) = s.guests.remove(&at) {
        return set_access(at, len, false);
    }
    for slice in s.slices.values_mut() {
        if slice.holds(at)
            && let Some(len) = slice.block(at)
        {
            set_access(at, len, false)?;
            slice.free(at);
            return Ok(());
        }
    }
    Err(IsoError(format!(
        "{at:#x} is no block isomalloc gave out in process {} (freed already?)",
        std::process::id()
    )))
}

/// True if `addr` lies inside a block living in this process (readable
/// and writable now).
pub fn is_live(addr: usize) -> bool {
    let within = |map: &BTreeMap<usize, usize>| {
        map.range(..=addr)
            .next_back()
            .is_some_and(|(&a, &l)| addr < a + l)
    };
    let s = space();
    within(&s.guests)
        || s.slices
            .values()
            .any(|sl| sl.holds(addr) && within(&sl.blocks))
}

/// The length of the block at `at`, if it is one living in this process.
pub fn length(at: usize) -> Option<usize> {
    let s = space();
    s.guests
        .get(&at)
        .copied()
        .or_else(|| s.slices.values().find_map(|sl| sl.block(at)))
}

/// Packs the block at `at` and takes it out of this process (see "Moving
/// a block").
///
/// # Safety
/// No reference into the block may be used after: its pages go.
pub unsafe fn release(at: usize) -> Result<PackedBlock, IsoError> {
    let len = length(at)
        .ok_or_else(|| IsoError(format!("{at:#x} is no block living in this process")))?;
    let mut bytes = vec![0u8; len];
    // SAFETY: a live block of `len` bytes (mapped readable and writable);
    // the caller keeps everyone else off it.
    unsafe { std::ptr::copy_nonoverlapping(at as *const u8, bytes.as_mut_ptr(), len) };
    // SAFETY: the caller's promise.
    unsafe { release_unread(at) }?;
    Ok(PackedBlock {
        addr: at as u64,
        bytes,
    })
}

/// Takes the block at `at` out of this process as [`release`] does,
/// without reading it (its owner packs what it needs of it itself);
/// returns its length.
///
/// # Safety
/// No reference into the block may be used after: its pages go.
pub unsafe fn release_unread(at: usize) -> Result<usize, IsoError> {
    let mut s = space();
    let len = match s.guests.get(&at) {
        Some(&len) => len,
        None => s
            .slices
            .values()
            .find_map(|sl| sl.block(at))
            .ok_or_else(|| IsoError(format!("{at:#x} is no block living in this process")))?,
    };
    set_access(at, len, false)?;
    if s.guests.remove(&at).is_none() {
        for slice in s.slices.values_mut() {
            if slice.send_away(at).is_some() {
                break;
            }
        }
    }
    Ok(len)
}

/// Maps `block` at its address in this process and fills it: the block
/// again (the caller takes it as its own). `pes`: the job's PE count;
/// `home_is_here`: its home PE ([`home_pe`]) runs in this process (then it
/// must come back to its slice, from which it was sent away).
pub fn adopt(block: &PackedBlock, pes: usize, home_is_here: bool) -> Result<usize, IsoError> {
    let at = usize::try_from(block.addr).map_err(|_| IsoError("address out of range".into()))?;
    let len = block.bytes.len();
    adopt_unfilled(at, len, pes, home_is_here)?;
    // SAFETY: just mapped readable and writable, `len` bytes.
    unsafe { std::ptr::copy_nonoverlapping(block.bytes.as_ptr(), at as *mut u8, len) };
    Ok(at)
}

/// Maps the `len`-byte block at `at` that [`release_unread`] (or
/// [`release`]) took out of its process, zeroed, for the caller to fill (see
/// [`adopt`]).
pub fn adopt_unfilled(
    at: usize,
    len: usize,
    pes: usize,
    home_is_here: bool,
) -> Result<(), IsoError> {
    let page = page_size();
    let end = at.checked_add(len);
    if len == 0
        || !at.is_multiple_of(page)
        || !len.is_multiple_of(page)
        || !in_region(at)
        || end.is_none_or(|e| !in_region(e - 1))
    {
        return Err(IsoError(format!(
            "a packed block of {len} bytes at {at:#x} is no isomalloc block"
        )));
    }
    let mut s = space();
    s.reserve()?;
    let home = home_pe(at, pes);
    let overlaps = |map: &BTreeMap<usize, usize>| {
        map.range(..at + len)
            .next_back()
            .is_some_and(|(&a, &l)| a + l > at)
    };
    if home_is_here {
        let slice = s.slice(home, pes)?;
        if !slice.holds(at + len - 1) || !slice.come_back(at, len) {
            return Err(IsoError(format!(
                "block at {at:#x} ({len} bytes) of PE {home}, which runs in this process, was not sent away from it"
            )));
        }
    } else {
        if overlaps(&s.guests) {
            return Err(IsoError(format!(
                "block at {at:#x} ({len} bytes) overlaps a block living here"
            )));
        }
        s.guests.insert(at, len);
    }
    set_access(at, len, true)
}

/// Sets the access of `len` bytes at `at`, pages of the reserved range:
/// usable, or none at all (a freed block, a guard page).
///
/// # Safety
/// The pages must belong to a block the caller owns, and nothing may touch
/// pages made inaccessible.
pub unsafe fn protect(at: usize, len: usize, usable: bool) -> Result<(), IsoError> {
    let prot = if usable {
        libc::PROT_READ | libc::PROT_WRITE
    } else {
        libc::PROT_NONE
    };
    // SAFETY: the caller's promise: pages of one of its blocks.
    let rc = unsafe { libc::mprotect(at as *mut libc::c_void, len, prot) };
    if rc != 0 {
        return Err(IsoError(format!(
            "cannot protect {len} bytes at {at:#x}: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const PAGE: usize = 4096;

    /// Checks a slice's invariant: free, blocks and away tile it exactly.
    fn check_tiling(s: &Slice) {
        let mut at = s.start;
        for (a, l, _) in s.ranges() {
            assert_eq!(a, at, "a gap or an overlap at {a:#x}");
            assert!(l > 0);
            at = a + l;
        }
        if s.len > 0 {
            assert_eq!(at, s.start + s.len, "the ranges end at the slice's end");
        }
    }

    #[test]
    fn slices_are_disjoint_and_inside_the_region() {
        for pes in [1, 2, 3, 4, 1000, 70_000] {
            let mut end = REGION_BASE;
            for pe in 0..pes.min(50) {
                let (start, len) = slice_of(pe, pes);
                assert!(start >= end && len > 0 && len <= MAX_SLICE);
                assert!(start + len <= REGION_BASE + REGION_LEN);
                end = start + len;
            }
            let (start, len) = slice_of(pes - 1, pes);
            assert!(start + len <= REGION_BASE + REGION_LEN);
        }
    }

    proptest! {
        /// Whatever PEs allocate, free, send away and take back, each
        /// slice stays tiled, blocks stay in their PE's slice, and the
        /// live blocks of every PE are pairwise disjoint.
        #[test]
        fn blocks_of_all_pes_never_overlap(
            ops in proptest::collection::vec((0usize..4, 0u8..4, 1usize..20, any::<usize>()), 1..200)
        ) {
            let pes = 4;
            let mut slices: Vec<Slice> = (0..pes)
                .map(|pe| Slice::new(REGION_BASE + pe * 64 * PAGE, 64 * PAGE))
                .collect();
            let mut live: Vec<(usize, usize, usize)> = Vec::new(); // (pe, at, len)
            let mut gone: Vec<(usize, usize, usize)> = Vec::new();
            for (pe, op, pages, pick) in ops {
                match op {
                    0 | 1 => {
                        if let Some(at) = slices[pe].alloc(pages * PAGE) {
                            live.push((pe, at, pages * PAGE));
                        }
                    }
                    2 if !live.is_empty() => {
                        let (pe, at, len) = live.swap_remove(pick % live.len());
                        prop_assert_eq!(slices[pe].free(at), Some(len));
                    }
                    3 if !live.is_empty() => {
                        let (pe, at, len) = live.swap_remove(pick % live.len());
                        prop_assert_eq!(slices[pe].send_away(at), Some(len));
                        gone.push((pe, at, len));
                    }
                    _ if !gone.is_empty() => {
                        let (pe, at, len) = gone.swap_remove(pick % gone.len());
                        prop_assert!(slices[pe].come_back(at, len));
                        live.push((pe, at, len));
                    }
                    _ => {}
                }
                for s in &slices {
                    check_tiling(s);
                }
            }
            let mut all: Vec<(usize, usize)> = live.iter().chain(&gone).map(|&(_, a, l)| (a, l)).collect();
            all.sort();
            for w in all.windows(2) {
                prop_assert!(w[0].0 + w[0].1 <= w[1].0, "overlap: {:?}", w);
            }
            for &(pe, at, len) in live.iter().chain(&gone) {
                prop_assert!(slices[pe].holds(at) && slices[pe].holds(at + len - 1));
            }
        }
    }

    #[test]
    fn a_packed_block_that_is_no_block_is_refused() {
        let page = page_size();
        for (addr, len) in [
            (REGION_BASE, 0),
            (REGION_BASE + 1, page),
            (REGION_BASE, page + 1),
            (0x1000, page),
            (REGION_BASE + REGION_LEN - page, 2 * page),
            (u64::MAX as usize - page + 1, page),
        ] {
            let block = PackedBlock {
                addr: addr as u64,
                bytes: vec![0; len],
            };
            let e = adopt(&block, 4, false).unwrap_err();
            assert!(e.0.contains("is no isomalloc block"), "{e}");
        }
        assert_eq!(PackedBlock::from_bytes(&[1, 2, 3]), None, "no address");
        let b = PackedBlock {
            addr: 0x1234,
            bytes: vec![9; 5],
        };
        assert_eq!(PackedBlock::from_bytes(&b.to_bytes()), Some(b));
    }

    #[test]
    fn freeing_coalesces_and_a_stranger_cannot_come_back() {
        let mut s = Slice::new(REGION_BASE, 8 * PAGE);
        let a = s.alloc(2 * PAGE).unwrap();
        let b = s.alloc(2 * PAGE).unwrap();
        let c = s.alloc(4 * PAGE).unwrap();
        assert_eq!(s.alloc(PAGE), None, "full");
        assert_eq!(s.free(b), Some(2 * PAGE));
        assert_eq!(s.free(b), None, "not twice");
        assert_eq!(s.free(a), Some(2 * PAGE));
        assert_eq!(s.alloc(4 * PAGE), Some(a), "a and b coalesced");
        assert_eq!(s.send_away(c), Some(4 * PAGE));
        assert!(!s.come_back(c, PAGE), "not with another length");
        assert!(!s.come_back(a, 4 * PAGE), "not a block that never left");
        assert!(s.come_back(c, 4 * PAGE));
        check_tiling(&s);
    }

    #[test]
    fn a_job_of_another_slice_length_cuts_the_range_again_only_when_empty() {
        let mut space = Space {
            reserved: false,
            slices: BTreeMap::new(),
            slice_len: 0,
            guests: BTreeMap::new(),
        };
        let page = page_size();
        // Jobs of up to 256 PEs have slices of one length: PE 1's slice is
        // the same in a job of 2 and of 4, blocks or not.
        let small = space.slice(1, 2).unwrap().alloc(page).unwrap();
        assert_eq!(space.slice(1, 4).unwrap().start, slice_of(1, 4).0);
        // A job of 1024 PEs (shorter slices) while a block of the old cut
        // lives: refused, naming both lengths.
        let err = space.slice(1, 1024).unwrap_err().0;
        assert!(err.contains(&slice_of(0, 1024).1.to_string()), "{err}");
        assert!(err.contains(&slice_of(0, 2).1.to_string()), "{err}");
        // Once it is freed, the range is cut again: PE 1's slice is the
        // new one, which overlaps PE 0's old one.
        assert_eq!(space.slice(1, 2).unwrap().free(small), Some(page));
        let s = space.slice(1, 1024).unwrap();
        assert_eq!((s.start, s.len), slice_of(1, 1024));
        assert_eq!(space.slices.len(), 1, "the old slices are gone");
        // And back to a small job, the same way.
        assert_eq!(space.slice(0, 2).unwrap().len, slice_of(0, 2).1);
    }
}
