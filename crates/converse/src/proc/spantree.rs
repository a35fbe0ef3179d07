//! Spanning trees: the k-ary trees over PEs, nodes, or the members of a PE
//! list that broadcasts, multicasts, reductions and quiescence detection
//! travel along.
//!
//! # Shape
//!
//! A tree over `n` members `0..n` with branching factor `k` and root `r`
//! numbers the members by their distance from the root, `j = (i - r) mod n`,
//! and lays them out as a k-ary heap: the parent of `j > 0` is `(j - 1) / k`,
//! the children of `j` are `k·j + 1 ..= k·j + k` (those below `n`). So every
//! member is reached exactly once, every level but the last is full, and the
//! depth (edges from the root to the deepest member) is at most
//! `⌈log_k n⌉` for `k >= 2`.
//!
//! The manual's calls (`cmi::spantree`) use the tree over all PEs (or all
//! nodes) rooted at 0 with the job's branching factor; the process layer
//! uses the tree over processes for its own protocol (`rt::network`).
//!
//! Pure functions of `(n, k, root)`; no state.
//!
//! # Cost
//!
//! Every reduction step and broadcast hop asks the tree a few questions,
//! so they avoid the divide instruction (tens of cycles each, ten of them
//! a broadcast-and-reduce round): the `mod n` of a sum of two members is a
//! compare and subtract, and a division by `k` a shift when `k` is a power
//! of two (the default 4).

/// Branching factor of the runtime's spanning trees when the command line
/// does not set one.
pub const DEFAULT_BRANCH: usize = 4;

/// A k-ary spanning tree over the members `0..n`, rooted at `root`.
///
/// The queries panic if given a number that is not a member (`>= n`; every
/// number, for an empty tree).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpanningTree {
    n: usize,
    k: usize,
    root: usize,
}

impl SpanningTree {
    /// The tree over `n` members with branching factor `k`, rooted at `root`.
    ///
    /// # Panics
    /// If `k == 0`, or `root >= n` while `n > 0`.
    #[inline]
    pub fn new(n: usize, k: usize, root: usize) -> SpanningTree {
        assert!(
            k > 0,
            "a spanning tree needs a branching factor of at least 1"
        );
        assert!(
            n == 0 || root < n,
            "spanning tree root {root} is not a member of 0..{n}"
        );
        SpanningTree { n, k, root }
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.n
    }

    /// True when the tree has no member.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The root member.
    pub fn root(&self) -> usize {
        self.root
    }

    /// Branching factor.
    pub fn branch(&self) -> usize {
        self.k
    }

    #[inline]
    fn relative(&self, member: usize) -> usize {
        assert!(
            member < self.n,
            "{member} is not a member of this spanning tree over 0..{}",
            self.n
        );
        // `member - root` mod n, both below n.
        if member >= self.root {
            member - self.root
        } else {
            member + self.n - self.root
        }
    }

    /// The member numbered `j` (`j < n`) from the root.
    #[inline]
    fn absolute(&self, j: usize) -> usize {
        // `j + root` mod n, both below n.
        let i = j + self.root;
        if i >= self.n { i - self.n } else { i }
    }

    /// `j / k`.
    #[inline]
    fn div_k(&self, j: usize) -> usize {
        if self.k.is_power_of_two() {
            j >> self.k.trailing_zeros()
        } else {
            j / self.k
        }
    }

    /// The parent of `member`; `None` for the root.
    #[inline]
    pub fn parent(&self, member: usize) -> Option<usize> {
        match self.relative(member) {
            0 => None,
            j => Some(self.absolute(self.div_k(j - 1))),
        }
    }

    /// The children of `member`, in order.
    #[inline]
    pub fn children(&self, member: usize) -> impl ExactSizeIterator<Item = usize> + use<> {
        let tree = *self;
        let first = self
            .relative(member)
            .saturating_mul(self.k)
            .saturating_add(1);
        let end = first.saturating_add(self.k).min(self.n);
        (first.min(end)..end).map(move |j| tree.absolute(j))
    }

    /// Number of children of `member`.
    #[inline]
    pub fn num_children(&self, member: usize) -> usize {
        self.children(member).len()
    }

    /// Edges from the root to `member`.
    pub fn depth_of(&self, member: usize) -> usize {
        let mut j = self.relative(member);
        let mut depth = 0;
        while j > 0 {
            j = self.div_k(j - 1);
            depth += 1;
        }
        depth
    }

    /// Edges from the root to the deepest member (0 for 0 or 1 members): the
    /// hops a message needs to travel down the tree, or up it.
    pub fn depth(&self) -> usize {
        if self.n == 0 {
            0
        } else {
            self.depth_of(self.absolute(self.n - 1))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ceil_log(n: usize, k: usize) -> usize {
        let (mut depth, mut reach) = (0, 1usize);
        while reach < n {
            reach = reach.saturating_mul(k);
            depth += 1;
        }
        depth
    }

    #[test]
    fn every_member_reached_once_and_depth_bounded() {
        for n in 1..=300 {
            for k in 1..=6 {
                for root in [0, n / 2, n - 1] {
                    let t = SpanningTree::new(n, k, root);
                    let mut seen = vec![0u32; n];
                    let mut frontier = vec![root];
                    let mut levels = 0;
                    seen[root] += 1;
                    while !frontier.is_empty() {
                        let mut next = Vec::new();
                        for &m in &frontier {
                            for c in t.children(m) {
                                assert_eq!(t.parent(c), Some(m));
                                seen[c] += 1;
                                next.push(c);
                            }
                            assert_eq!(t.num_children(m), t.children(m).len());
                            assert!(t.num_children(m) <= k);
                        }
                        if !next.is_empty() {
                            levels += 1;
                        }
                        frontier = next;
                    }
                    assert!(seen.iter().all(|&s| s == 1), "n={n} k={k} root={root}");
                    assert_eq!(t.parent(root), None);
                    assert_eq!(t.depth(), levels, "n={n} k={k}");
                    if k >= 2 {
                        assert!(t.depth() <= ceil_log(n, k), "n={n} k={k}");
                    } else {
                        assert_eq!(t.depth(), n - 1);
                    }
                }
            }
        }
    }

    /// The shift and compare-and-subtract forms give the shape's formulas
    /// (the module comment) for every member, root and branching factor.
    #[test]
    fn matches_the_modular_formulas() {
        for n in 1..=40 {
            for k in 1..=9 {
                for root in 0..n {
                    let t = SpanningTree::new(n, k, root);
                    for i in 0..n {
                        let j = (i + n - root) % n;
                        let parent = (j > 0).then(|| ((j - 1) / k + root) % n);
                        assert_eq!(t.parent(i), parent, "n={n} k={k} root={root} i={i}");
                        let children: Vec<usize> = (k * j + 1..=k * j + k)
                            .filter(|&c| c < n)
                            .map(|c| (c + root) % n)
                            .collect();
                        assert_eq!(t.children(i).collect::<Vec<_>>(), children);
                    }
                }
            }
        }
    }

    #[test]
    fn heap_numbering_from_root_zero() {
        let t = SpanningTree::new(10, 4, 0);
        assert_eq!(t.children(0).collect::<Vec<_>>(), [1, 2, 3, 4]);
        assert_eq!(t.children(1).collect::<Vec<_>>(), [5, 6, 7, 8]);
        assert_eq!(t.children(2).collect::<Vec<_>>(), [9]);
        assert_eq!(t.children(3).len(), 0);
        assert_eq!(t.parent(9), Some(2));
        assert_eq!(t.depth(), 2);
    }

    #[test]
    fn rotated_root() {
        let t = SpanningTree::new(6, 2, 4);
        assert_eq!(t.children(4).collect::<Vec<_>>(), [5, 0]);
        assert_eq!(t.children(5).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(t.parent(3), Some(0));
        assert_eq!(t.depth_of(3), 2);
    }

    #[test]
    #[should_panic(expected = "10 is not a member of this spanning tree over 0..4")]
    fn non_members_are_refused() {
        let _ = SpanningTree::new(4, 2, 0).parent(10);
    }

    #[test]
    #[should_panic(expected = "is not a member")]
    fn an_empty_tree_has_no_members() {
        let _ = SpanningTree::new(0, 2, 0).children(0).count();
    }

    #[test]
    fn an_empty_tree_has_depth_zero() {
        assert_eq!(SpanningTree::new(0, 3, 0).depth(), 0);
    }

    #[test]
    fn deep_trees_do_not_overflow() {
        let t = SpanningTree::new(usize::MAX / 2, usize::MAX / 4, 0);
        assert_eq!(t.children(3).len(), 0);
        assert!(t.depth() <= 2);
    }
}
