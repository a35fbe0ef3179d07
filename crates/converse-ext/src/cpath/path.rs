//! The array descriptor, [`CPath`]: its identity, its shape, row-major
//! element numbers and patterns with [`CPATH_ALL`], and the checks of a
//! descriptor that came from elsewhere.
use std::fmt;

use super::wire::{Cause, Reader, Writer};
use super::{CPATH_ALL, State, mapped_pe, state};

/// An array descriptor (`CPath`): which array, its shape, its thread
/// function and its mapper. Plain data: compare it, copy it, send it
/// ([`to_bytes`](CPath::to_bytes)).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CPath {
    pub(super) creator: usize,
    pub(super) seq: u64,
    pub(super) home: usize,
    pub(super) thread_fn: usize,
    pub(super) mapper: usize,
    pub(super) dims: Vec<u32>,
}

impl CPath {
    /// The array's identity, unique in the job: the PE that made it and
    /// its number there.
    pub fn id(&self) -> (usize, u64) {
        (self.creator, self.seq)
    }

    /// The PE that made the array, or the PE given to [`make_thread`](super::make_thread)
    /// (what [`MAPPER_HOME`](super::MAPPER_HOME) maps to).
    pub fn home(&self) -> usize {
        self.home
    }

    /// The number of the array's thread function.
    pub fn thread_fn(&self) -> usize {
        self.thread_fn
    }

    /// The number of the array's mapper.
    pub fn mapper(&self) -> usize {
        self.mapper
    }

    /// The number of dimensions (`CPathArrayDimensions`); 0 for a single
    /// thread ([`make_thread`](super::make_thread)).
    #[doc(alias = "CPathArrayDimensions")]
    pub fn dimensions(&self) -> usize {
        self.dims.len()
    }

    /// The size of dimension `n`, from 0 (`CPathArrayDimension`).
    ///
    /// # Panics
    /// If the array has no dimension `n`.
    #[doc(alias = "CPathArrayDimension")]
    pub fn dimension(&self, n: usize) -> u32 {
        match self.dims.get(n) {
            Some(&d) => d,
            None => panic!(
                "CPathArrayDimension: {self} has {} dimensions, no dimension {n}",
                self.dims.len()
            ),
        }
    }

    /// Every dimension's size.
    pub fn dims(&self) -> &[u32] {
        &self.dims
    }

    /// The number of elements (the product of the dimensions; 1 for no
    /// dimension). Below 2^32: every descriptor is checked when made or
    /// read ([`from_bytes`](CPath::from_bytes)).
    pub fn num_elements(&self) -> usize {
        // Checked products: a descriptor's dimensions were checked, so
        // the fallback is never taken.
        self.dims
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d as usize))
            .unwrap_or(usize::MAX)
    }

    /// The row-major number of the element at `indices`, if they name one.
    pub fn flat_index(&self, indices: &[u32]) -> Option<usize> {
        if indices.len() != self.dims.len() {
            return None;
        }
        let mut flat = 0usize;
        for (&i, &d) in indices.iter().zip(&self.dims) {
            if i >= d {
                return None;
            }
            flat = flat.checked_mul(d as usize)?.checked_add(i as usize)?;
        }
        Some(flat)
    }

    /// The indices of element number `flat` (row-major), if there is one.
    pub fn indices_of(&self, flat: usize) -> Option<Vec<u32>> {
        if flat >= self.num_elements() {
            return None;
        }
        let mut rest = flat;
        let mut out = vec![0; self.dims.len()];
        for (slot, &d) in out.iter_mut().zip(&self.dims).rev() {
            *slot = (rest % d as usize) as u32;
            rest /= d as usize;
        }
        Some(out)
    }

    /// The PE of the element at `indices`, by the array's mapper (on this
    /// PE's registrations).
    ///
    /// # Panics
    /// Aborts the job if `indices` name no element, or the mapper gives no
    /// PE of the job.
    pub fn pe_of(&self, indices: &[u32]) -> usize {
        let Some(flat) = self.flat_index(indices) else {
            converse::abort(&format!(
                "element {indices:?} of {self}: out of range (dimensions {:?})",
                self.dims
            ));
        };
        mapped_pe(&state(), self, flat).unwrap_or_else(|why| converse::abort(&why))
    }

    /// The descriptor as bytes, for a message.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.path(self);
        w.0
    }

    /// The descriptor [`to_bytes`](CPath::to_bytes) gave, if `bytes` are
    /// one: its shape is checked (every dimension at least 1, fewer than
    /// 2^32 elements); whether its function numbers are registered and its
    /// PEs are PEs of the job is checked where it is used ([`send`](super::send),
    /// [`reduce`](super::reduce), a handler).
    pub fn from_bytes(bytes: &[u8]) -> Option<CPath> {
        let mut r = Reader::new(bytes);
        let p = r.path("descriptor").ok()?;
        r.end("descriptor").ok()?;
        Some(p)
    }

    /// Checks what a descriptor from elsewhere claims against this PE's
    /// registrations and the job.
    pub(super) fn check(&self, s: &State) -> Result<(), Cause> {
        let pes = converse::num_pes();
        if self.creator >= pes || self.home >= pes {
            return Err(format!(
                "{self}: creator PE {} or home PE {} is no PE of the job ({pes} PEs)",
                self.creator, self.home
            ));
        }
        if self.creator == converse::my_pe() && self.seq >= s.next_seq.get() {
            return Err(format!(
                "{self}: this PE has made only {} arrays",
                s.next_seq.get() - 1
            ));
        }
        if self.thread_fn >= s.thread_fns.borrow().len() {
            return Err(format!(
                "{self}: thread function {} is not registered",
                self.thread_fn
            ));
        }
        if self.mapper >= s.mappers.borrow().len() {
            return Err(format!("{self}: mapper {} is not registered", self.mapper));
        }
        check_dims(&self.dims).map_err(|why| format!("{self}: {why}"))
    }

    /// True if `pattern` (with [`CPATH_ALL`]s) matches `indices`.
    pub(super) fn pattern_matches(pattern: &[u32], indices: &[u32]) -> bool {
        pattern.len() == indices.len()
            && pattern
                .iter()
                .zip(indices)
                .all(|(&p, &i)| p == CPATH_ALL || p == i)
    }

    /// Checks `pattern` has one index per dimension, each in range or
    /// [`CPATH_ALL`].
    pub(super) fn check_pattern(&self, pattern: &[u32]) -> Result<(), Cause> {
        if pattern.len() != self.dims.len() {
            return Err(format!(
                "indices {} given for {self}, which has {} dimensions",
                show_pattern(pattern),
                self.dims.len()
            ));
        }
        match pattern
            .iter()
            .zip(&self.dims)
            .position(|(&i, &d)| i != CPATH_ALL && i >= d)
        {
            Some(at) => Err(format!(
                "index {} of {} out of range for {self} (dimensions {:?})",
                at,
                show_pattern(pattern),
                self.dims
            )),
            None => Ok(()),
        }
    }

    /// The first element matching `pattern` (checked), row-major: every
    /// [`CPATH_ALL`] at 0.
    pub(super) fn first_matching(&self, pattern: &[u32]) -> usize {
        pattern.iter().zip(&self.dims).fold(0, |flat, (&i, &d)| {
            flat * d as usize + if i == CPATH_ALL { 0 } else { i as usize }
        })
    }

    /// The elements matching `pattern` (checked), row-major: only the
    /// [`CPATH_ALL`] positions are stepped through (an odometer), so the
    /// cost is the number of matches, not the array's size.
    pub(super) fn matching(&self, pattern: &[u32]) -> Vec<usize> {
        // The stride of each dimension (row-major), and the free ones.
        let mut strides = vec![0usize; self.dims.len()];
        let mut stride = 1usize;
        for (slot, &d) in strides.iter_mut().zip(&self.dims).rev() {
            *slot = stride;
            stride *= d as usize;
        }
        let free: Vec<(usize, usize)> = pattern
            .iter()
            .zip(&self.dims)
            .zip(&strides)
            .filter(|((i, _), _)| **i == CPATH_ALL)
            .map(|((_, &d), &st)| (d as usize, st))
            .collect();
        let count: usize = free.iter().map(|&(d, _)| d).product();
        let mut out = Vec::with_capacity(count);
        let mut at = vec![0usize; free.len()];
        let mut flat = self.first_matching(pattern);
        loop {
            out.push(flat);
            // Advance the last free dimension first (row-major order).
            let mut k = free.len();
            loop {
                if k == 0 {
                    return out;
                }
                k -= 1;
                let (d, st) = free[k];
                at[k] += 1;
                flat += st;
                if at[k] < d {
                    break;
                }
                flat -= d * st;
                at[k] = 0;
            }
        }
    }
}

impl fmt::Display for CPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CPath array {} of PE {} ({})",
            self.seq,
            self.creator,
            if self.dims.is_empty() {
                "a single thread".to_string()
            } else {
                self.dims
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join("×")
            }
        )
    }
}

/// A pattern for messages: `[1, *]` for `[1, CPATH_ALL]`.
pub(super) fn show_pattern(pattern: &[u32]) -> String {
    let parts: Vec<String> = pattern
        .iter()
        .map(|&i| {
            if i == CPATH_ALL {
                "*".to_string()
            } else {
                i.to_string()
            }
        })
        .collect();
    format!("[{}]", parts.join(", "))
}

/// Every dimension at least 1, fewer than 2^32 elements in all (element
/// numbers and counts travel as 32-bit values).
pub(super) fn check_dims(dims: &[u32]) -> Result<(), Cause> {
    if let Some(at) = dims.iter().position(|&d| d == 0) {
        return Err(format!("dimension {at} is 0 (dimensions {dims:?})"));
    }
    let total = dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64));
    match total {
        Some(n) if n < 1 << 32 && usize::try_from(n).is_ok() => Ok(()),
        _ => Err(format!(
            "too many elements (dimensions {dims:?}; fewer than 2^32 allowed)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(dims: &[u32]) -> CPath {
        CPath {
            creator: 0,
            seq: 1,
            home: 0,
            thread_fn: 0,
            mapper: 0,
            dims: dims.to_vec(),
        }
    }

    #[test]
    fn indices_and_element_numbers_are_row_major_and_checked() {
        let p = path(&[3, 4]);
        assert_eq!(p.dimensions(), 2);
        assert_eq!(p.dimension(1), 4);
        assert_eq!(p.num_elements(), 12);
        assert_eq!(p.flat_index(&[1, 2]), Some(6));
        assert_eq!(p.indices_of(6), Some(vec![1, 2]));
        for f in 0..12 {
            assert_eq!(p.flat_index(&p.indices_of(f).unwrap()), Some(f));
        }
        assert_eq!(p.flat_index(&[3, 0]), None);
        assert_eq!(p.flat_index(&[1]), None);
        assert_eq!(p.indices_of(12), None);
        assert_eq!(p.matching(&[1, CPATH_ALL]), vec![4, 5, 6, 7]);
        assert_eq!(p.matching(&[CPATH_ALL, 3]), vec![3, 7, 11]);
        assert_eq!(
            p.matching(&[CPATH_ALL, CPATH_ALL]),
            (0..12).collect::<Vec<_>>()
        );
        assert_eq!(p.matching(&[2, 1]), vec![9]);
        assert_eq!(p.first_matching(&[CPATH_ALL, 3]), 3);
        // The odometer agrees with a filter over every element.
        let q = path(&[3, 2, 4]);
        for pattern in [
            [CPATH_ALL, 1, CPATH_ALL],
            [2, CPATH_ALL, CPATH_ALL],
            [CPATH_ALL, CPATH_ALL, 3],
            [1, 0, 2],
        ] {
            let slow: Vec<usize> = (0..q.num_elements())
                .filter(|&f| CPath::pattern_matches(&pattern, &q.indices_of(f).unwrap()))
                .collect();
            assert_eq!(q.matching(&pattern), slow, "{pattern:?}");
        }
        assert_eq!(path(&[]).matching(&[]), vec![0]);
        assert!(p.check_pattern(&[1, 4]).is_err());
        assert!(p.check_pattern(&[1]).is_err());
        assert!(p.check_pattern(&[CPATH_ALL, 3]).is_ok());
        let single = path(&[]);
        assert_eq!(single.num_elements(), 1);
        assert_eq!(single.flat_index(&[]), Some(0));
        assert_eq!(single.indices_of(0), Some(vec![]));
        assert_eq!(
            single.to_string(),
            "CPath array 1 of PE 0 (a single thread)"
        );
        assert_eq!(p.to_string(), "CPath array 1 of PE 0 (3×4)");
    }

    #[test]
    fn descriptors_survive_their_bytes_and_bad_dimensions_are_refused() {
        let p = path(&[2, 5, 7]);
        assert_eq!(CPath::from_bytes(&p.to_bytes()), Some(p.clone()));
        let b = p.to_bytes();
        assert_eq!(CPath::from_bytes(&b[..b.len() - 1]), None);
        assert!(check_dims(&[3, 0]).is_err());
        assert!(check_dims(&[1 << 16, 1 << 16, 2]).is_err());
        assert!(check_dims(&[1 << 16, 1 << 16]).is_err());
        assert!(check_dims(&[1 << 16, (1 << 16) - 1]).is_ok());
        assert!(check_dims(&[u32::MAX]).is_ok());
        assert!(check_dims(&[]).is_ok());
        // Bytes claiming a 0 or a too big array are no descriptor.
        for bad in [
            &[3, 0][..],
            &[1 << 16, 1 << 16],
            &[u32::MAX, u32::MAX, u32::MAX],
        ] {
            assert_eq!(CPath::from_bytes(&path(bad).to_bytes()), None, "{bad:?}");
        }
        assert_eq!(path(&[u32::MAX]).num_elements(), u32::MAX as usize);
    }
}
