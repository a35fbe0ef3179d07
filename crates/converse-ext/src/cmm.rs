//! Tag matching (the manual's "message manager", `Cmm`): a table that
//! stores values under arrays of integer tags and gives them back by
//! pattern, [`WILDCARD`] matching any tag on either side.
//!
//! # Matching
//!
//! A stored entry matches a pattern when both have the same number of tags
//! and every pair of tags is equal or one of the two is [`WILDCARD`]. Among
//! the entries that match, the oldest comes first (FIFO): a runtime built
//! on tags gets its messages in the order they were stored.
//!
//! # Layout and invariants
//!
//! - `entries` holds every entry by its arrival number, so the first match
//!   in it is the oldest.
//! - An entry stored without a wildcard is also listed in `exact` under its
//!   tags (arrival numbers ascending); one stored with a wildcard, in
//!   `wild`. A pattern without a wildcard so finds its oldest match by
//!   looking at one list of `exact` and at the wildcard entries only; a
//!   pattern with one scans `entries` in order.
//! - Every arrival number is in exactly one of `exact` and `wild`.
//!
//! # Concurrency
//!
//! None: a table is a plain value (`Send` when its values are). Converse
//! keeps one per PE; share one across PEs behind a lock if need be.
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

/// The tag that matches any tag (`CmmWildcard`), in a pattern or in
/// stored tags.
#[doc(alias = "CmmWildcard")]
pub const WILDCARD: i32 = -1;

/// One stored value and its tags.
struct Entry<T> {
    tags: Box<[i32]>,
    value: T,
}

/// A tag-matching table (`CmmTable`, `CmmTableStruct`). The manual's table
/// holds `void *` messages; this one holds any `T` (a `converse::Message`
/// for a message runtime). Dropping the table drops what it still holds
/// (`CmmFree`).
#[doc(alias = "CmmTableStruct")]
#[doc(alias = "CmmFree")]
pub struct CmmTable<T> {
    next: u64,
    entries: BTreeMap<u64, Entry<T>>,
    exact: HashMap<Box<[i32]>, VecDeque<u64>>,
    wild: BTreeSet<u64>,
}

impl<T> Default for CmmTable<T> {
    fn default() -> CmmTable<T> {
        CmmTable::new()
    }
}

impl<T> std::fmt::Debug for CmmTable<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CmmTable({} entries)", self.entries.len())
    }
}

/// True if stored tags `stored` match pattern `pattern`.
fn matches(stored: &[i32], pattern: &[i32]) -> bool {
    stored.len() == pattern.len()
        && stored
            .iter()
            .zip(pattern)
            .all(|(&s, &p)| s == p || s == WILDCARD || p == WILDCARD)
}

impl<T> CmmTable<T> {
    /// An empty table (`CmmNew`).
    #[doc(alias = "CmmNew")]
    pub fn new() -> CmmTable<T> {
        CmmTable {
            next: 0,
            entries: BTreeMap::new(),
            exact: HashMap::new(),
            wild: BTreeSet::new(),
        }
    }

    /// Stores `value` under `tags` (`CmmPut`; the C call's `ntags` is the
    /// slice's length). Tags may be [`WILDCARD`]: such a value matches any
    /// tag there.
    #[doc(alias = "CmmPut")]
    pub fn put(&mut self, tags: &[i32], value: T) {
        let seq = self.next;
        self.next += 1;
        let tags: Box<[i32]> = tags.into();
        if tags.contains(&WILDCARD) {
            self.wild.insert(seq);
        } else {
            self.exact.entry(tags.clone()).or_default().push_back(seq);
        }
        self.entries.insert(seq, Entry { tags, value });
    }

    /// The arrival number of the oldest entry matching `pattern`.
    fn oldest_match(&self, pattern: &[i32]) -> Option<u64> {
        if pattern.contains(&WILDCARD) {
            return self
                .entries
                .iter()
                .find(|(_, e)| matches(&e.tags, pattern))
                .map(|(&seq, _)| seq);
        }
        let exact = self.exact.get(pattern).and_then(|q| q.front().copied());
        let wild = self
            .wild
            .iter()
            .copied()
            .find(|seq| matches(&self.entries[seq].tags, pattern));
        match (exact, wild) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Takes the oldest value matching `pattern` out of the table, with
    /// the tags it was stored under (`CmmGet`: the C call copies them into
    /// `ret_tags`), or `None` if nothing matches.
    #[doc(alias = "CmmGet")]
    pub fn get(&mut self, pattern: &[i32]) -> Option<(Vec<i32>, T)> {
        let seq = self.oldest_match(pattern)?;
        let entry = self.entries.remove(&seq).expect("listed");
        if !self.wild.remove(&seq) {
            let list = self.exact.get_mut(&entry.tags).expect("listed");
            let at = list.iter().position(|&s| s == seq).expect("listed");
            list.remove(at);
            if list.is_empty() {
                self.exact.remove(&entry.tags);
            }
        }
        Some((entry.tags.into_vec(), entry.value))
    }

    /// The oldest value matching `pattern`, left in the table, with the
    /// tags it was stored under (`CmmProbe`).
    #[doc(alias = "CmmProbe")]
    pub fn probe(&self, pattern: &[i32]) -> Option<(&[i32], &T)> {
        let seq = self.oldest_match(pattern)?;
        let entry = &self.entries[&seq];
        Some((&entry.tags, &entry.value))
    }

    /// [`get`](CmmTable::get) if `remove`, else the value's tags (the
    /// general form Charm++ calls `CmmFind`).
    #[doc(alias = "CmmFind")]
    pub fn find(&mut self, pattern: &[i32], remove: bool) -> Option<(Vec<i32>, Option<T>)> {
        if remove {
            self.get(pattern).map(|(tags, v)| (tags, Some(v)))
        } else {
            self.probe(pattern).map(|(tags, _)| (tags.to_vec(), None))
        }
    }

    /// How many entries match `pattern` (`CmmEntries`; all of them for a
    /// pattern of wildcards of every length: see [`len`](CmmTable::len)).
    #[doc(alias = "CmmEntries")]
    pub fn entries(&self, pattern: &[i32]) -> usize {
        self.entries
            .values()
            .filter(|e| matches(&e.tags, pattern))
            .count()
    }

    /// Every entry of the table.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if the table holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn wildcards_match_on_either_side_and_the_oldest_match_comes_first() {
        let mut t = CmmTable::new();
        t.put(&[1, 2], "a");
        t.put(&[1, WILDCARD], "b");
        t.put(&[1, 2], "c");
        t.put(&[3], "d");
        assert_eq!(t.len(), 4);
        assert_eq!(t.entries(&[1, WILDCARD]), 3);
        assert_eq!(t.entries(&[1, 5]), 1, "only the stored wildcard");
        assert_eq!(t.probe(&[1, 5]), Some((&[1, WILDCARD][..], &"b")));
        assert_eq!(t.get(&[1, 2]), Some((vec![1, 2], "a")));
        assert_eq!(t.get(&[1, 2]), Some((vec![1, WILDCARD], "b")));
        assert_eq!(t.get(&[WILDCARD, WILDCARD]), Some((vec![1, 2], "c")));
        assert_eq!(t.get(&[1, 2]), None);
        // A different number of tags never matches.
        assert_eq!(t.get(&[3, WILDCARD]), None);
        assert_eq!(t.find(&[WILDCARD], false), Some((vec![3], None)));
        assert_eq!(t.find(&[3], true), Some((vec![3], Some("d"))));
        assert!(t.is_empty());
    }

    /// An operation on a table.
    #[derive(Clone, Debug)]
    enum Op {
        Put(Vec<i32>, u32),
        Get(Vec<i32>),
        Probe(Vec<i32>),
        Entries(Vec<i32>),
    }

    /// Tags from a small alphabet (so that matches happen), wildcards
    /// included, one to three of them.
    fn tags() -> impl Strategy<Value = Vec<i32>> {
        prop::collection::vec(prop_oneof![Just(WILDCARD), 0..3i32], 1..4)
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (tags(), any::<u32>()).prop_map(|(t, v)| Op::Put(t, v)),
            2 => tags().prop_map(Op::Get),
            1 => tags().prop_map(Op::Probe),
            1 => tags().prop_map(Op::Entries),
        ]
    }

    proptest! {
        /// The table against a model: a list in arrival order, searched
        /// front to back.
        #[test]
        fn behaves_as_a_list_searched_in_arrival_order(ops in prop::collection::vec(op(), 0..200)) {
            let mut table = CmmTable::new();
            let mut model: Vec<(Vec<i32>, u32)> = Vec::new();
            for op in ops {
                match op {
                    Op::Put(t, v) => {
                        table.put(&t, v);
                        model.push((t, v));
                    }
                    Op::Get(p) => {
                        let want = model
                            .iter()
                            .position(|(t, _)| matches(t, &p))
                            .map(|at| model.remove(at));
                        prop_assert_eq!(table.get(&p), want);
                    }
                    Op::Probe(p) => {
                        let want = model.iter().find(|(t, _)| matches(t, &p));
                        let got = table.probe(&p).map(|(t, v)| (t.to_vec(), *v));
                        prop_assert_eq!(got.as_ref(), want);
                    }
                    Op::Entries(p) => {
                        let want = model.iter().filter(|(t, _)| matches(t, &p)).count();
                        prop_assert_eq!(table.entries(&p), want);
                    }
                }
                prop_assert_eq!(table.len(), model.len());
            }
        }
    }
}
