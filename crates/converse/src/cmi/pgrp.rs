//! Processor groups with an explicit tree (`Pgrp`, from the CMI chapter):
//! the root PE builds the tree by adding children under members, and may
//! multicast to the members.
//!
//! Unlike a [`Group`](super::group::Group), a `ProcGroup` is a plain value on
//! the PE that built it: the tree is the caller's, queries are local, and a
//! multicast sends one shared buffer straight to every member but the caller
//! (the caller need not be a member). Invariants: every member appears once;
//! the root is a member with no parent; every other member has exactly one
//! parent, added before it.
use std::collections::HashMap;

use super::CommHandle;
use crate::msg::message::Message;
use crate::proc::exit::abort;

/// A processor group: a tree of PEs rooted at the PE that created it
/// (`Pgrp`).
#[doc(alias = "Pgrp")]
#[derive(Clone, Debug)]
pub struct ProcGroup {
    root: usize,
    /// Members in the order they were added, the root first.
    members: Vec<usize>,
    parent: HashMap<usize, usize>,
    children: HashMap<usize, Vec<usize>>,
}

impl ProcGroup {
    /// A group holding only the calling PE, its root (`CmiPgrpCreate`).
    #[doc(alias = "CmiPgrpCreate")]
    pub fn create() -> ProcGroup {
        let root = crate::my_pe();
        ProcGroup {
            root,
            members: vec![root],
            parent: HashMap::new(),
            children: HashMap::new(),
        }
    }

    /// Frees the group (`CmiPgrpDestroy`); the same as dropping it.
    #[doc(alias = "CmiPgrpDestroy")]
    pub fn destroy(self) {}

    /// Adds `procs` as children of member `pe` (`CmiAddChildren`). Only the
    /// group's root PE may call it. Aborts if `pe` is not a member, or if a
    /// PE of `procs` is out of range or already a member.
    #[doc(alias = "CmiAddChildren")]
    pub fn add_children(&mut self, pe: usize, procs: &[usize]) {
        let me = crate::my_pe();
        if me != self.root {
            abort(&format!(
                "add_children on a processor group rooted at PE {}: only its root may add children",
                self.root
            ));
        }
        if !self.is_member(pe) {
            abort(&format!(
                "add_children: PE {pe} is not a member of the processor group rooted at PE {}",
                self.root
            ));
        }
        let n = crate::num_pes();
        for &p in procs {
            if p >= n {
                abort(&format!(
                    "add_children: PE {p} does not exist (the job has PEs 0..{n})"
                ));
            }
            if self.is_member(p) {
                abort(&format!(
                    "add_children: PE {p} is already a member of the processor group rooted at PE {}",
                    self.root
                ));
            }
            self.parent.insert(p, pe);
            self.children.entry(pe).or_default().push(p);
            self.members.push(p);
        }
    }

    /// True if `pe` belongs to the group.
    pub fn is_member(&self, pe: usize) -> bool {
        pe == self.root || self.parent.contains_key(&pe)
    }

    /// The members, the root first, then in the order they were added.
    pub fn members(&self) -> &[usize] {
        &self.members
    }

    /// The group's root PE (`CmiPgrpRoot`).
    #[doc(alias = "CmiPgrpRoot")]
    pub fn root(&self) -> usize {
        self.root
    }

    /// Number of children of member `pe` (`CmiNumChildren`); 0 for a PE that
    /// is not a member.
    #[doc(alias = "CmiNumChildren")]
    pub fn num_children(&self, pe: usize) -> usize {
        self.children.get(&pe).map_or(0, Vec::len)
    }

    /// The parent of `pe` (`CmiParent`); `None` for the root and for PEs
    /// that are not members.
    #[doc(alias = "CmiParent")]
    pub fn parent(&self, pe: usize) -> Option<usize> {
        self.parent.get(&pe).copied()
    }

    /// The children of `pe`, in the order they were added (`CmiChildren`).
    #[doc(alias = "CmiChildren")]
    pub fn children(&self, pe: usize) -> &[usize] {
        self.children.get(&pe).map_or(&[], Vec::as_slice)
    }

    /// Starts sending `msg` to every member but the caller
    /// (`CmiAsyncMulticast` of the CMI chapter's processor groups); the
    /// handle says when `msg` may be reused.
    #[doc(alias = "CmiAsyncMulticast")]
    pub fn async_multicast(&self, msg: &Message) -> CommHandle {
        let me = crate::my_pe();
        let targets: Vec<usize> = self.members.iter().copied().filter(|&p| p != me).collect();
        super::group::sync_list_send(&targets, msg);
        CommHandle::completed()
    }
}
