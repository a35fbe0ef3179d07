//! The process layer's own protocol over the spanning tree of processes
//! (`rt::network` sends and receives it): what every process of a job must
//! agree on travels along the tree's edges, never from every process to
//! every other, so that a process talks to O(branching) others for it and
//! a job of P processes opens O(P) connections, not P².
//!
//! - **The end barrier** ([`EndBarrier`]): a process whose PEs have all
//!   finished, and that has nothing left queued for any peer, says `Done`
//!   to its parent once each of its children has said it; the root then
//!   says `AllDone` down the tree. After `AllDone` no process sends an
//!   application message again, and every connection a message used is
//!   known to both its ends (see `net::tcp`'s "Connections"), so each
//!   process ends over exactly the VCs it has (its `Bye` exchange).
//! - **Floods** ([`Flood`]): `exit(code)` started anywhere reaches every
//!   process: a process that hears of it first passes it to each tree
//!   neighbour but the one it came from, and ignores it afterwards.
//! - **The handler check** ([`HandlerRef`]): each process keeps a
//!   reference table, every registered handler position with the process
//!   it came from; a table that extends it is merged and passed to the
//!   tree neighbours (but the sender). Two processes that registered
//!   different handlers at a position meet somewhere on the tree path
//!   between them, where the difference is found.
//!
//! Pure state machines: no I/O, no clocks. Each call says what to send;
//! the scale model (`rt::scale_model`, in tests) drives them for 10⁵
//! simulated processes.
//!
//! # Invariants
//!
//! - A process sends `Done` at most once, after its own end and all its
//!   children's; the root releases (and sends `AllDone`) at most once, and
//!   only after every process sent `Done`.
//! - A flood is forwarded at most once per process, so it costs
//!   2·(P − 1) messages in all, at most.
//! - A reference table only grows, at its end, and every entry keeps the
//!   process it came from (to name both sides of a difference).
use crate::proc::spantree::SpanningTree;

/// The spanning tree over a job's processes, seen from one of them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ProcessTree {
    tree: SpanningTree,
    me: usize,
}

impl ProcessTree {
    /// The tree over `nodes` processes rooted at process 0 with branching
    /// factor `branch`, seen from process `me`.
    pub fn new(nodes: usize, branch: usize, me: usize) -> ProcessTree {
        ProcessTree {
            tree: SpanningTree::new(nodes, branch.max(1), 0),
            me,
        }
    }

    /// This process's parent; `None` for the root.
    pub fn parent(&self) -> Option<usize> {
        self.tree.parent(self.me)
    }

    /// This process's children.
    pub fn children(&self) -> impl Iterator<Item = usize> + use<> {
        self.tree.children(self.me)
    }

    /// The parent, then the children.
    pub fn neighbours(&self) -> impl Iterator<Item = usize> + use<> {
        self.parent().into_iter().chain(self.children())
    }
}

/// A message of the end barrier to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EndSend {
    /// `Done` to the parent.
    Done(usize),
    /// `AllDone` to a child.
    AllDone(usize),
}

/// One process's part of the end barrier (see the module comment).
#[derive(Debug)]
pub(crate) struct EndBarrier {
    tree: ProcessTree,
    /// Children that said `Done`.
    children_done: usize,
    children: usize,
    own_done: bool,
    reported: bool,
    released: bool,
}

impl EndBarrier {
    pub fn new(tree: ProcessTree) -> EndBarrier {
        EndBarrier {
            tree,
            children_done: 0,
            children: tree.children().count(),
            own_done: false,
            reported: false,
            released: false,
        }
    }

    /// True once every process of the job is done (`AllDone` came, or this
    /// is the root and all said `Done`).
    pub fn released(&self) -> bool {
        self.released
    }

    /// This process is done.
    pub fn own_done(&mut self) -> Vec<EndSend> {
        self.own_done = true;
        self.report()
    }

    /// A child said `Done`. A count beyond the children is a peer's fault:
    /// `Err` with why.
    pub fn child_done(&mut self) -> Result<Vec<EndSend>, String> {
        if self.children_done == self.children {
            return Err(format!(
                "a `Done` beyond the {} this process's children send",
                self.children
            ));
        }
        self.children_done += 1;
        Ok(self.report())
    }

    /// The parent said `AllDone`: pass it on. Twice is a fault.
    pub fn all_done(&mut self) -> Result<Vec<EndSend>, String> {
        if self.released || !self.reported {
            return Err("an `AllDone` before this process said `Done`, or twice".into());
        }
        Ok(self.release())
    }

    fn report(&mut self) -> Vec<EndSend> {
        if self.reported || !self.own_done || self.children_done < self.children {
            return Vec::new();
        }
        self.reported = true;
        match self.tree.parent() {
            Some(parent) => vec![EndSend::Done(parent)],
            None => self.release(),
        }
    }

    fn release(&mut self) -> Vec<EndSend> {
        self.released = true;
        self.tree.children().map(EndSend::AllDone).collect()
    }
}

/// A flood over the tree (see the module comment).
#[derive(Debug, Default)]
pub(crate) struct Flood {
    seen: bool,
}

impl Flood {
    /// The flood reached this process, from neighbour `from` (`None`: it
    /// starts here): the processes to pass it to, none if it came before.
    pub fn reach(&mut self, tree: &ProcessTree, from: Option<usize>) -> Vec<usize> {
        if std::mem::replace(&mut self.seen, true) {
            return Vec::new();
        }
        tree.neighbours().filter(|&n| Some(n) != from).collect()
    }

    /// True once the flood reached this process.
    #[cfg(test)]
    pub fn seen(&self) -> bool {
        self.seen
    }
}

/// One registered handler position as the processes compare them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HandlerEntry {
    /// A hash of the handler's type (equal in every process of the job).
    pub hash: u64,
    /// Its name, for the error message.
    pub name: String,
    /// The process that registered it first as far as this one knows.
    pub origin: usize,
}

/// Two processes registered different handlers at one position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Mismatch {
    /// The position (among registered handlers).
    pub at: usize,
    /// This process's reference entry there, and the other one.
    pub ours: HandlerEntry,
    pub theirs: HandlerEntry,
}

/// A process's reference handler table (see the module comment).
#[derive(Debug, Default)]
pub(crate) struct HandlerRef {
    entries: Vec<HandlerEntry>,
}

impl HandlerRef {
    /// The table as it stands.
    pub fn entries(&self) -> &[HandlerEntry] {
        &self.entries
    }

    /// Merges `table`: its entries must equal the reference's where both
    /// have one; what it has beyond is appended. `Ok(true)` if the
    /// reference grew (it must then go to the neighbours).
    pub fn merge(&mut self, table: &[HandlerEntry]) -> Result<bool, Mismatch> {
        if let Some(at) = self
            .entries
            .iter()
            .zip(table)
            .position(|(a, b)| a.hash != b.hash)
        {
            return Err(Mismatch {
                at,
                ours: self.entries[at].clone(),
                theirs: table[at].clone(),
            });
        }
        if table.len() <= self.entries.len() {
            return Ok(false);
        }
        self.entries.extend_from_slice(&table[self.entries.len()..]);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(hash: u64, origin: usize) -> HandlerEntry {
        HandlerEntry {
            hash,
            name: format!("h{hash}"),
            origin,
        }
    }

    #[test]
    fn the_end_barrier_releases_once_after_every_process() {
        // Seven processes, branching 2: 0 -> 1, 2; 1 -> 3, 4; 2 -> 5, 6.
        let mut procs: Vec<EndBarrier> = (0..7)
            .map(|me| EndBarrier::new(ProcessTree::new(7, 2, me)))
            .collect();
        assert!(procs[3].own_done() == [EndSend::Done(1)]);
        assert!(procs[1].child_done().unwrap().is_empty(), "1 is not done");
        assert!(procs[1].own_done().is_empty(), "4 is not done");
        assert_eq!(procs[4].own_done(), [EndSend::Done(1)]);
        assert_eq!(procs[1].child_done().unwrap(), [EndSend::Done(0)]);
        assert!(procs[1].child_done().is_err(), "a third child of two");
        assert!(procs[0].child_done().unwrap().is_empty());
        assert!(procs[0].own_done().is_empty(), "2's subtree is not done");
        for leaf in [5, 6] {
            assert_eq!(procs[leaf].own_done(), [EndSend::Done(2)]);
        }
        assert!(procs[2].all_done().is_err(), "not reported yet");
        assert!(procs[2].child_done().unwrap().is_empty());
        assert_eq!(procs[2].child_done().unwrap(), Vec::new());
        assert_eq!(procs[2].own_done(), [EndSend::Done(0)]);
        assert!(!procs[0].released());
        assert_eq!(
            procs[0].child_done().unwrap(),
            [EndSend::AllDone(1), EndSend::AllDone(2)]
        );
        assert!(procs[0].released());
        assert_eq!(
            procs[1].all_done().unwrap(),
            [EndSend::AllDone(3), EndSend::AllDone(4)]
        );
        assert!(procs[1].released() && procs[1].all_done().is_err());
        // A job of one process releases at once.
        let mut alone = EndBarrier::new(ProcessTree::new(1, 4, 0));
        assert!(alone.own_done().is_empty() && alone.released());
    }

    #[test]
    fn a_flood_reaches_every_process_once_from_anywhere() {
        for start in [0, 5, 12] {
            let trees: Vec<ProcessTree> = (0..13).map(|me| ProcessTree::new(13, 3, me)).collect();
            let mut floods: Vec<Flood> = (0..13).map(|_| Flood::default()).collect();
            let mut queue: Vec<(usize, Option<usize>)> = vec![(start, None)];
            let mut sent = 0;
            while let Some((at, from)) = queue.pop() {
                for to in floods[at].reach(&trees[at], from) {
                    sent += 1;
                    queue.push((to, Some(at)));
                }
            }
            assert!(floods.iter().all(Flood::seen));
            assert_eq!(sent, 12, "once along each edge");
        }
    }

    #[test]
    fn reference_tables_grow_and_find_a_difference() {
        let mut r = HandlerRef::default();
        assert_eq!(r.merge(&[entry(1, 0), entry(2, 0)]), Ok(true));
        assert_eq!(r.merge(&[entry(1, 3)]), Ok(false), "a shorter table agrees");
        assert_eq!(r.merge(&[entry(1, 3), entry(2, 3), entry(9, 3)]), Ok(true));
        assert_eq!(r.entries()[2].origin, 3);
        let m = r.merge(&[entry(1, 5), entry(7, 5)]).unwrap_err();
        assert_eq!((m.at, m.ours.origin, m.theirs.origin), (1, 0, 5));
        assert_eq!(r.entries().len(), 3, "a refused table changes nothing");
    }
}
