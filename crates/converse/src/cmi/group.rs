//! Multicast groups ([`Group`], `CmiGroup`) and list sends.
//!
//! # Groups
//!
//! [`establish_group`] gives the group an ID unique in the job (the creating
//! PE and its count of groups, packed in 32 bits), records its member list on
//! the creating PE and broadcasts the list to every other PE (the manual's
//! "one broadcast's worth"). Each PE records a definition as it takes it from
//! its inbox.
//!
//! A definition is immutable, so the PEs of a process share one copy
//! (`GroupDefs`, the job's subsystem state): the first PE of the process to
//! take the definition parses and checks it, the others take the shared
//! copy. Memory per process is the member list (16 bytes a member: the list
//! and its sorted index), per PE one pointer a group; a process of P PEs
//! that all learn a group of P/2 members no longer holds P copies of it.
//!
//! A multicast travels down the spanning tree over the group's members
//! (positions in the list as given), rooted at the sender's position if the
//! sender is a member and at the first member otherwise; each member passes
//! its copy on to its children as it takes it from its inbox, then delivers
//! it. All copies share one buffer. The header carries `FLAG_MCAST`, the
//! group in `coll` and the root position plus one in `root`.
//!
//! Definitions and multicasts travel different paths, so either may arrive
//! first:
//!
//! - A member that receives a multicast before the group's definition keeps
//!   it (in `Groups::pending`) and routes and delivers it when the definition
//!   comes: each member gets it once.
//! - A sender that holds a group's ID before its definition (it got the ID in
//!   a message that overtook the definition) sends the multicast to the
//!   group's creator (`root == 0`), which always knows the group and
//!   multicasts it on the sender's behalf.
//! - A group reduction on such a PE waits for the definition in the same way
//!   (`Groups::deferred`), and asks the creator whether the group exists, so
//!   that an ID nobody established ends the job instead of waiting forever.
//!
//! An ID that the creator never handed out is an error on the creator (the
//! only PE that can tell), naming the group and the PE that used it.
//!
//! # List sends
//!
//! [`sync_list_send`] and friends send one shared buffer straight to each
//! listed PE. A list naming a PE out of range or one PE twice aborts the job
//! naming the PE.
//!
//! # Concurrency
//!
//! `Groups` is per PE and touched only by its thread; no borrow of it is held
//! while messages are routed on or deferred work runs.
use std::collections::HashMap;
use std::sync::Arc;

use super::CommHandle;
use super::spantree::SpanningTree;
use crate::cmi::state::Deferred;
pub(crate) use crate::cmi::state::GroupInfo;
use crate::msg::message::MessageRaw as _;
use crate::msg::message::{FLAG_MCAST, Message};
use crate::msg::system::{self, Kind, Reader};
use crate::proc::exit::abort;
use crate::rt::pe::{self, Pe};

/// A set of PEs to multicast to or reduce over (`CmiGroup`). Made by
/// [`establish_group`]; the same value names the same group on every PE, so it
/// may be sent to other PEs in messages.
#[doc(alias = "CmiGroup")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Group(u32);

impl Group {
    /// The group's ID as a number (for putting it in a message).
    pub fn id(self) -> u32 {
        self.0
    }

    /// The group with ID `id` (as [`Group::id`] gave it).
    pub fn from_id(id: u32) -> Group {
        Group(id)
    }
}

impl GroupInfo {
    /// The group of `pes`, or the first PE it names twice.
    fn new(pes: Vec<usize>) -> Result<GroupInfo, usize> {
        let mut by_pe: Box<[(u32, u32)]> = pes
            .iter()
            .enumerate()
            // PE numbers and positions were checked against the job's size,
            // which fits 32 bits (`+p`'s limit).
            .map(|(i, &p)| (p as u32, i as u32))
            .collect();
        by_pe.sort_unstable();
        if let Some(w) = by_pe.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(w[0].0 as usize);
        }
        Ok(GroupInfo { pes, by_pe })
    }

    pub fn position(&self, pe: usize) -> Option<usize> {
        let pe = u32::try_from(pe).ok()?;
        self.by_pe
            .binary_search_by_key(&pe, |&(p, _)| p)
            .ok()
            .map(|i| self.by_pe[i].1 as usize)
    }
}

/// The definitions this process's PEs have taken, shared by them (see the
/// module comment). Groups live as long as the job.
#[derive(Default)]
struct GroupDefs {
    by_id: std::sync::Mutex<HashMap<u32, Arc<GroupInfo>>>,
}

impl GroupDefs {
    /// The process's copy of group `gid`, made by `make` if no PE of the
    /// process has it yet.
    fn get_or_make(pe: &Pe, gid: u32, make: impl FnOnce() -> GroupInfo) -> Arc<GroupInfo> {
        let defs = pe.job.subsystem::<GroupDefs>();
        let mut by_id = crate::sync::lock(&defs.by_id);
        Arc::clone(by_id.entry(gid).or_insert_with(|| Arc::new(make())))
    }
}

/// Aborts unless `pes` names distinct PEs of the job.
pub(crate) fn check_list(pe: &Pe, pes: &[usize], what: &str) {
    let n = pe.job.topo.num_pes();
    let mut seen = vec![false; n];
    for &p in pes {
        if p >= n {
            abort(&format!(
                "{what}: the PE list names PE {p}, but the job has PEs 0..{n}"
            ));
        }
        if std::mem::replace(&mut seen[p], true) {
            abort(&format!("{what}: the PE list names PE {p} more than once"));
        }
    }
}

fn creator_of(pe: &Pe, gid: u32) -> usize {
    gid as usize % pe.job.topo.num_pes()
}

fn lookup(pe: &Pe, gid: u32) -> Option<Arc<GroupInfo>> {
    pe.coll.groups.borrow().known.get(&gid).cloned()
}

/// Aborts: `gid` names no group its creator established.
fn unknown_group(gid: u32, user: usize) -> ! {
    abort(&format!(
        "group {gid} was used by PE {user} but was never established (a group must be made with establish_group before it is used)"
    ))
}

/// Converts `pes` into a group ID usable on every PE (`CmiEstablishGroup`).
/// Costs one broadcast. Aborts if the list names a PE out of range or one PE
/// twice.
#[doc(alias = "CmiEstablishGroup")]
pub fn establish_group(pes: &[usize]) -> Group {
    pe::with(|pe| {
        check_list(pe, pes, "establish_group");
        let n = pe.job.topo.num_pes() as u64;
        let seq = pe.coll.groups.borrow().established as u64;
        let gid = seq * n + pe.pe as u64;
        let Ok(gid) = u32::try_from(gid) else {
            abort(&format!(
                "establish_group: PE {} has established {seq} groups, the most a job of {n} PEs can name",
                pe.pe
            ))
        };
        let info = GroupDefs::get_or_make(pe, gid, || {
            GroupInfo::new(pes.to_vec()).expect("check_list refused repeated PEs")
        });
        {
            let mut groups = pe.coll.groups.borrow_mut();
            groups.established += 1;
            groups.known.insert(gid, info);
        }
        let mut words = vec![gid as u64, pes.len() as u64];
        words.extend(pes.iter().map(|&p| p as u64));
        super::bcast::broadcast_to_others(pe, system::message(Kind::GroupDef, &words, &[]));
        Group(gid)
    })
}

/// Records a group definition taken from the inbox, then routes the
/// multicasts and runs the reductions that were waiting for it.
pub(crate) fn on_definition(pe: &Pe, msg: &Message) {
    let mut r = Reader::new(msg, "group definition");
    let gid = r.word();
    let Ok(gid) = u32::try_from(gid) else {
        r.malformed(&format!("group ID {gid} does not fit 32 bits"))
    };
    // The first PE of the process to take it reads and checks the list;
    // the others share that copy (every copy of one broadcast is the same).
    let info = GroupDefs::get_or_make(pe, gid, || {
        let n = pe.job.topo.num_pes();
        let count = r.index(n + 1);
        let pes: Vec<usize> = (0..count).map(|_| r.index(n)).collect();
        GroupInfo::new(pes)
            .unwrap_or_else(|twice| r.malformed(&format!("the member list names PE {twice} twice")))
    });
    let (pending, deferred) = {
        let mut groups = pe.coll.groups.borrow_mut();
        groups.known.insert(gid, Arc::clone(&info));
        (
            groups.pending.remove(&gid).unwrap_or_default(),
            groups.deferred.remove(&gid).unwrap_or_default(),
        )
    };
    for msg in pending {
        if let Some(local) = on_multicast_arrival(pe, msg) {
            pe.release_arrival(local);
        }
    }
    for work in deferred {
        work(&info.pes);
    }
}

/// Runs `work` with group `gid`'s members now, or when its definition
/// arrives. Aborts if `pe` created `gid` and never established it.
pub(crate) fn with_members(pe: &Pe, gid: u32, work: impl FnOnce(&Pe, &[usize]) + 'static) {
    if let Some(info) = lookup(pe, gid) {
        return work(pe, &info.pes);
    }
    // Deferred, it runs on this PE's thread, which is this PE then.
    let work: Deferred = Box::new(move |members| pe::with(|pe| work(pe, members)));
    let creator = creator_of(pe, gid);
    if creator == pe.pe {
        unknown_group(gid, pe.pe);
    }
    let first_wait = {
        let mut groups = pe.coll.groups.borrow_mut();
        let waiting = groups.deferred.entry(gid).or_default();
        waiting.push(work);
        waiting.len() == 1
    };
    if first_wait {
        // The definition is on its way if the group exists; if it does not,
        // only its creator can tell, and nothing else would ever end the
        // wait: ask it.
        let query = system::message(Kind::GroupQuery, &[gid as u64], &[]);
        pe.send_runtime(creator, query);
    }
}

/// `group`'s members in the order its creator listed them, if this PE has
/// its definition (`CmiLookupGroup`): always on the creator; elsewhere once
/// the definition, broadcast when the group was established, has arrived
/// (use [`when_group_known`] to wait for it).
#[doc(alias = "CmiLookupGroup")]
pub fn group_members(group: Group) -> Option<Vec<usize>> {
    pe::with(|pe| lookup(pe, group.id()).map(|info| info.pes.clone()))
}

/// Runs `work` with `group`'s members on this PE: at once if the PE has the
/// group's definition, otherwise (in the scheduler) when the definition
/// arrives. A group nobody established ends the job, naming it. Libraries
/// build group operations on it (the C API's `CmiGroupReduceStruct`).
pub fn when_group_known(group: Group, work: impl FnOnce(&[usize]) + 'static) {
    pe::with(|pe| with_members(pe, group.id(), move |_, pes| work(pes)))
}

/// The creator of a group is asked whether it exists (see [`with_members`]).
pub(crate) fn on_query(pe: &Pe, msg: &Message) {
    let mut r = Reader::new(msg, "group query");
    let gid = r.word();
    let Ok(gid) = u32::try_from(gid) else {
        r.malformed(&format!("group ID {gid} does not fit 32 bits"))
    };
    if creator_of(pe, gid) != pe.pe {
        r.malformed(&format!(
            "a query about group {gid} reached PE {}, which did not create it",
            pe.pe
        ));
    }
    if lookup(pe, gid).is_none() {
        unknown_group(gid, msg.src_pe());
    }
}

/// Multicasts `msg` (a stamped user message) from `pe` to group `gid`.
fn multicast(pe: &Pe, gid: u32, mut msg: Message) {
    match lookup(pe, gid) {
        Some(info) => start_multicast(pe, &info, gid, msg),
        None => {
            let creator = creator_of(pe, gid);
            if creator == pe.pe {
                unknown_group(gid, pe.pe);
            }
            // The definition has not reached us yet: the creator has it.
            let header = msg.header_mut();
            header.flags = FLAG_MCAST;
            header.coll = gid;
            header.root = 0;
            pe.count_created(1);
            pe.push_to_pe(creator, msg);
        }
    }
}

/// Starts a multicast of `msg` to the members of `info` down their tree,
/// rooted at `pe`'s position if it is a member, else at the first member.
fn start_multicast(pe: &Pe, info: &GroupInfo, gid: u32, mut msg: Message) {
    pe.trace.collective("multicast");
    let m = info.pes.len();
    if m == 0 {
        return;
    }
    pe.count_created(m);
    let root_pos = info.position(pe.pe).unwrap_or(0);
    let header = msg.header_mut();
    header.flags = FLAG_MCAST;
    header.coll = gid;
    header.root = root_pos as u32 + 1;
    let msg = msg.into_shared();
    if info.pes[root_pos] != pe.pe {
        return pe.push_to_pe(info.pes[root_pos], msg);
    }
    let tree = SpanningTree::new(m, pe.branch(), root_pos);
    for child in tree.children(root_pos) {
        pe.push_to_pe(info.pes[child], msg.clone());
    }
    pe.push_to_pe(pe.pe, msg);
}

/// Routes a multicast copy taken from `pe`'s inbox; returns the copy to
/// deliver on `pe`, if any now.
pub(crate) fn on_multicast_arrival(pe: &Pe, msg: Message) -> Option<Message> {
    let gid = msg.header().coll;
    let Some(info) = lookup(pe, gid) else {
        if creator_of(pe, gid) == pe.pe {
            unknown_group(gid, msg.src_pe());
        }
        pe.coll
            .groups
            .borrow_mut()
            .pending
            .entry(gid)
            .or_default()
            .push(msg);
        return None;
    };
    let root = msg.header().root as usize;
    if root == 0 {
        // A sender that did not know the group asks us, its creator.
        if creator_of(pe, gid) != pe.pe {
            Reader::new(&msg, "multicast").malformed(&format!(
                "a request to multicast to group {gid} reached PE {}, which did not create it",
                pe.pe
            ));
        }
        pe.count_processed(1);
        start_multicast(pe, &info, gid, msg);
        return None;
    }
    let m = info.pes.len();
    let (Some(me), true) = (info.position(pe.pe), root <= m) else {
        Reader::new(&msg, "multicast").malformed(&format!(
            "PE {} got a copy for group {gid} with root position {} but is not on that tree",
            pe.pe,
            root - 1
        ))
    };
    let tree = SpanningTree::new(m, pe.branch(), root - 1);
    for child in tree.children(me) {
        pe.push_to_pe(info.pes[child], msg.clone());
    }
    Some(msg)
}

fn check_group(gid: u32) {
    pe::with(|pe| {
        if creator_of(pe, gid) == pe.pe && lookup(pe, gid).is_none() {
            unknown_group(gid, pe.pe);
        }
    })
}

/// Sends a copy of `msg` to every member of `group`, the caller too if it is
/// one (`CmiSyncMulticast`); `msg` may be reused at once.
#[doc(alias = "CmiSyncMulticast")]
pub fn sync_multicast(group: Group, msg: &Message) {
    sync_multicast_and_free(group, msg.to_owned_copy())
}

/// Sends `msg` to every member of `group`, giving it up
/// (`CmiSyncMulticastAndFree`).
#[doc(alias = "CmiSyncMulticastAndFree")]
pub fn sync_multicast_and_free(group: Group, mut msg: Message) {
    check_group(group.0);
    pe::with(|pe| {
        pe.stamp_user_message(&mut msg);
        multicast(pe, group.0, msg);
    })
}

/// Starts sending `msg` to every member of `group` (`CmiAsyncMulticast`);
/// the handle says when `msg` may be reused.
#[doc(alias = "CmiAsyncMulticast")]
pub fn async_multicast(group: Group, msg: &Message) -> CommHandle {
    sync_multicast(group, msg);
    CommHandle::completed()
}

/// Sends `msg` to each PE of `pes`, sharing one buffer among them; the
/// message is stamped by the caller.
fn list_send(pes: &[usize], msg: &Message, what: &str) {
    pe::with(|pe| {
        check_list(pe, pes, what);
        if pes.is_empty() {
            return;
        }
        let mut header = *msg.header();
        header.flags = 0;
        // Shared: no trace number; none stale either (a group's key).
        header.coll = 0;
        header.total_size = msg.len() as u32;
        let mut shared = msg.to_shared_with_header(&header);
        shared.set_src_pe(pe.pe);
        pe.count_created(pes.len());
        for &p in pes {
            pe.push_to_pe(p, shared.clone());
        }
    })
}

/// Sends a copy of `msg` to each PE in `pes` (`CmiSyncListSend`); `msg` may
/// be reused at once. Aborts if `pes` names a PE out of range or twice.
#[doc(alias = "CmiSyncListSend")]
pub fn sync_list_send(pes: &[usize], msg: &Message) {
    list_send(pes, msg, "sync_list_send")
}

/// Sends `msg` to each PE in `pes`, giving it up (`CmiSyncListSendAndFree`).
#[doc(alias = "CmiSyncListSendAndFree")]
pub fn sync_list_send_and_free(pes: &[usize], msg: Message) {
    list_send(pes, &msg, "sync_list_send_and_free")
}

/// Starts sending `msg` to each PE in `pes` (`CmiAsyncListSend`); the handle
/// says when `msg` may be reused.
#[doc(alias = "CmiAsyncListSend")]
pub fn async_list_send(pes: &[usize], msg: &Message) -> CommHandle {
    list_send(pes, msg, "async_list_send");
    CommHandle::completed()
}

#[cfg(test)]
mod tests {
    use super::GroupInfo;

    #[test]
    fn positions_are_found_in_the_sorted_index_and_a_repeat_is_named() {
        let info = GroupInfo::new(vec![7, 3, 10, 0]).unwrap();
        for (pos, pe) in [7, 3, 10, 0].into_iter().enumerate() {
            assert_eq!(info.position(pe), Some(pos));
        }
        assert_eq!(info.position(4), None);
        assert_eq!(info.position(usize::MAX), None);
        assert_eq!(GroupInfo::new(vec![]).unwrap().position(0), None);
        assert_eq!(GroupInfo::new(vec![5, 2, 5]).err(), Some(5));
    }
}
