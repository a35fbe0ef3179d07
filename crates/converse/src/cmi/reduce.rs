//! Reductions: every participating PE contributes a message (or a typed
//! value); the contributions are merged up a spanning tree and the result is
//! delivered to a handler on the tree's root.
//!
//! # The eight calls
//!
//! |             | all PEs, call order | all PEs, by ID      | PE list               | group                  |
//! |-------------|---------------------|---------------------|-----------------------|------------------------|
//! | message     | [`reduce`]          | [`reduce_id`]       | [`list_reduce`]       | [`group_reduce`]       |
//! | typed value | [`reduce_struct`]   | [`reduce_struct_id`]| [`list_reduce_struct`]| [`group_reduce_struct`]|
//!
//! Global reductions use the spanning tree over PEs rooted at PE 0, where the
//! result is delivered; list and group reductions use the tree over the list
//! (in the order given) rooted at its first PE, where the result is
//! delivered. The result runs its handler like any arrived message, never
//! inside the call that completed it: completed by the root's own call
//! (its contribution came last), the result goes to the root's queue;
//! completed by a child's contribution, which the runtime is delivering,
//! the result's handler runs at once, as the next message would (Charm++'s
//! `CmiSendReduce` calls it directly too), saving a trip through the
//! queue on the common path (on a traced PE it is queued, so that the
//! trace shows it as a message of its own).
//!
//! # Matching
//!
//! A reduction is identified on every PE by a 32-bit *key*: for [`reduce`]
//! and [`reduce_struct`], the PE's count of such calls (so every PE must make
//! them in the same order, and the two forms share the count, as the manual
//! says); otherwise the [`ReductionId`]. The two low bits of a key say which
//! kind it is, so call-order keys, global IDs and dynamic IDs never collide.
//! Several reductions may be in flight at once.
//!
//! # Ownership (the manual's rules, in Rust)
//!
//! - Message form: the contribution is moved in. The merge function gets the
//!   local message by value and the children's messages as a `Vec` it owns;
//!   it returns the merged message (it may return `local`, changed in place).
//!   It runs only on PEs that have children.
//! - Struct form: the value is moved in (`deleteFn` is its `Drop`; clone it
//!   first to keep using it). It is serialized with serde/postcard where the
//!   manual's `pupFn` would pack it; the merge function gets the local value
//!   and the children's decoded values. The root's handler `dest` receives a
//!   message whose payload is the serialized result: read it with
//!   [`decode_struct_result`].
//!
//! # Errors
//!
//! PEs that disagree about a reduction abort the job with a message naming
//! the PEs and the reduction: one PE using the message form and another the
//! struct form, different PE lists for one ID, a contribution from a PE that
//! is not a child in the receiving PE's tree, one PE joining a reduction
//! twice, a list that does not contain the calling PE.
//!
//! # Wire format and state
//!
//! A contribution is a message with `FLAG_REDUCE` (plus
//! `FLAG_REDUCE_STRUCT` for the struct form), the key in `coll` and a
//! digest of the PE list in `root` (0 for global reductions); its `handler`
//! is the result's handler. Each PE keeps, per key in progress, its own
//! deposit (once it has called) and the children's contributions that have
//! arrived (possibly before it called). The state is touched only by the
//! PE's thread, and no borrow of it is held while a merge function runs.
use std::collections::hash_map::Entry;
use std::fmt;
use std::hash::Hasher;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::group::{self, Group, check_list};
use super::spantree::SpanningTree;
pub(super) use crate::cmi::state::Form;
pub(crate) use crate::cmi::state::KeyHasher;
use crate::cmi::state::{Children, Deposit, InProgress};
use crate::msg::message::MessageRaw as _;
use crate::msg::message::{FLAG_REDUCE, FLAG_REDUCE_STRUCT, Message};
use crate::msg::system::{self, Kind, Reader};
use crate::proc::exit::abort;
use crate::rt::pe::{self, Pe};

/// Names a reduction that cannot be matched by call order
/// (`CmiReductionID`). Get one from [`global_reduction_id`],
/// [`dynamic_reduction_id`] or [`dynamic_reduction_id_remote`]. No two
/// reductions may be in flight with the same ID at once.
#[doc(alias = "CmiReductionID")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReductionId(u32);

pub(super) const CLASS_BITS: u32 = 2;
pub(super) const CLASS_ORDER: u32 = 0;
pub(super) const CLASS_GLOBAL: u32 = 1;
pub(super) const CLASS_DYNAMIC: u32 = 2;
/// Set in the keys of node reductions (`super::node_reduce`), whose state
/// is the node's, not the PE's.
pub(super) const NODE_KEY: u32 = 1 << 31;

impl ReductionId {
    /// The ID as a 32-bit number (as [`dynamic_reduction_id_remote`] delivers
    /// it).
    pub fn raw(self) -> u32 {
        self.0
    }

    /// The ID whose number is `raw`, if `raw` is one that
    /// [`ReductionId::raw`] can return.
    pub fn from_raw(raw: u32) -> Option<ReductionId> {
        if raw & NODE_KEY != 0 {
            return None;
        }
        match raw & ((1 << CLASS_BITS) - 1) {
            CLASS_GLOBAL | CLASS_DYNAMIC => Some(ReductionId(raw)),
            _ => None,
        }
    }
}

/// The key of the `count`th reduction of `class` (below [`NODE_KEY`]).
pub(super) fn make_key(class: u32, count: u32) -> u32 {
    if count >= 1 << (31 - CLASS_BITS) {
        abort("more than 2^29 reductions of one kind: the reduction counter is exhausted");
    }
    (count << CLASS_BITS) | class
}

/// A reduction's name in error messages.
pub(super) fn describe(key: u32) -> String {
    let (node, calls) = if key & NODE_KEY != 0 {
        ("node ", "node_reduce/node_reduce_struct")
    } else {
        ("", "reduce/reduce_struct")
    };
    let count = (key & !NODE_KEY) >> CLASS_BITS;
    match key & ((1 << CLASS_BITS) - 1) {
        CLASS_ORDER => format!("{node}reduction #{count} ({calls} call number {count})"),
        CLASS_GLOBAL => format!("{node}reduction with global ID {key}"),
        _ => format!("{node}reduction with dynamic ID {key}"),
    }
}

impl Form {
    pub(super) fn of_flags(flags: u32) -> Form {
        if flags & FLAG_REDUCE_STRUCT != 0 {
            Form::Struct
        } else {
            Form::Message
        }
    }

    fn flags(self) -> u32 {
        match self {
            Form::Message => FLAG_REDUCE,
            Form::Struct => FLAG_REDUCE | FLAG_REDUCE_STRUCT,
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Form::Message => "the message form",
            Form::Struct => "the struct form",
        }
    }
}

impl Children {
    fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        let (tree, list) = match self {
            Children::Tree { tree, me } => (Some(tree.children(*me)), &[][..]),
            Children::List(pes) => (None, &pes[..]),
        };
        tree.into_iter().flatten().chain(list.iter().copied())
    }

    #[inline]
    fn len(&self) -> usize {
        match self {
            Children::Tree { tree, me } => tree.num_children(*me),
            Children::List(pes) => pes.len(),
        }
    }

    #[inline]
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    fn contains(&self, pe: usize) -> bool {
        match self {
            Children::Tree { tree, me } => pe < tree.len() && tree.parent(pe) == Some(*me),
            Children::List(pes) => pes.contains(&pe),
        }
    }

    /// `pe`'s place among the children (`None` if it is not one).
    fn position(&self, pe: usize) -> Option<usize> {
        self.iter().position(|c| c == pe)
    }
}

impl InProgress {
    /// This PE has deposited and every child has contributed.
    fn is_complete(&self) -> bool {
        self.deposit
            .as_ref()
            .is_some_and(|d| d.children.len() == self.arrived.len())
    }
}

/// How long a PE with a reduction in progress sits idle before it checks
/// for a stall. Long enough that a healthy job pays at most a wave pair now
/// and then, short enough that a stuck job ends promptly.
pub(crate) const STALL_IDLE: std::time::Duration = std::time::Duration::from_secs(1);

/// The timeout for the idle wait of `pe`: `Some` if a stall check is due
/// after it.
pub(crate) fn stall_timeout(pe: &Pe) -> Option<std::time::Duration> {
    let reds = pe.coll.reductions.borrow();
    let idle = reds.active.is_empty() && !super::node_reduce::in_progress(pe);
    if idle || reds.stall_check_pending {
        None
    } else {
        Some(STALL_IDLE)
    }
}

/// `pe` sat idle with reductions in progress: ask whether the job is
/// quiescent, and abort with a report if it is (through the watchdog,
/// which says what every PE waits for, if the job has one).
pub(crate) fn check_for_stall(pe: &Pe) {
    pe.coll.reductions.borrow_mut().stall_check_pending = true;
    crate::ccd::quiescence::check_once(
        pe,
        Box::new(|quiescent| {
            let pe = pe::current();
            pe.coll.reductions.borrow_mut().stall_check_pending = false;
            if quiescent && let Some(report) = stall_report(&pe) {
                match &pe.job.watchdog {
                    Some(watchdog) => watchdog.fire(report),
                    None => abort(&report),
                }
            }
        }),
    );
}

/// Reductions (by description) with a list of PEs each.
pub(crate) type PesPerReduction = Vec<(String, Vec<usize>)>;

/// `pe`'s reductions in progress, for the watchdog (`++watchdog`): those
/// it joined, with the PEs it waits for, and the contributions it holds
/// for reductions it has not joined, with the PEs they came from. Each
/// reduction is named by a description every PE gives alike.
pub(crate) fn watchdog_view(pe: &Pe) -> (PesPerReduction, PesPerReduction) {
    let reds = pe.coll.reductions.borrow();
    let mut keys: Vec<&u32> = reds.active.keys().collect();
    keys.sort();
    let mut joined = Vec::new();
    let mut held = Vec::new();
    for key in keys {
        let entry = &reds.active[key];
        let from: Vec<usize> = entry.arrived.iter().map(|m| m.src_pe()).collect();
        match &entry.deposit {
            Some(d) => joined.push((
                describe(*key),
                d.children.iter().filter(|c| !from.contains(c)).collect(),
            )),
            None => held.push((describe(*key), from)),
        }
    }
    (joined, held)
}

/// What keeps `pe`'s reductions from completing, if any are in progress.
fn stall_report(pe: &Pe) -> Option<String> {
    let (joined, held) = watchdog_view(pe);
    let waiting: Vec<String> = joined
        .iter()
        .map(|(what, missing)| format!("{what} waits for PEs {missing:?}"))
        .collect();
    let orphans: Vec<String> = held
        .iter()
        .map(|(what, from)| format!("{what} from PEs {from:?}"))
        .collect();
    let node = super::node_reduce::stall_report(pe);
    if waiting.is_empty() && orphans.is_empty() && node.is_none() {
        return None;
    }
    let mut report = format!(
        "reductions on PE {} can never complete: the job is quiescent (no message in flight anywhere)",
        pe.pe
    );
    if let Some(node) = node {
        report += &format!("; {node}");
    }
    if !waiting.is_empty() {
        report += &format!("; joined but incomplete: {}", waiting.join(", "));
    }
    if !orphans.is_empty() {
        report += &format!(
            "; contributions held for reductions PE {} never joined: {}",
            pe.pe,
            orphans.join(", ")
        );
    }
    report += ". The PEs disagree on the reduction IDs (or call order), or some PE never joined";
    Some(report)
}

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u32(&mut self, key: u32) {
        self.0 = (key as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// Which PEs take part.
enum Members<'a> {
    All,
    List(&'a [usize]),
}

/// FNV-1a over the list: contributions carry it so that PEs that disagree
/// about a reduction's PE list are caught.
fn digest(pes: &[usize]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for &p in pes {
        for b in (p as u32).to_le_bytes() {
            h = (h ^ b as u32).wrapping_mul(0x0100_0193);
        }
    }
    h
}

/// Records `pe`'s deposit for reduction `key` and completes the reduction
/// step if every child's contribution is in.
fn deposit<F>(
    pe: &Pe,
    key: u32,
    form: Form,
    members: Members<'_>,
    local: Option<Message>,
    finish: F,
) where
    F: FnOnce(Option<Message>, Vec<Message>) -> Message + 'static,
{
    pe.trace.collective("reduction contribution");
    let k = pe.branch();
    let (digest, parent, children): (u32, Option<usize>, Children) = match members {
        Members::All => {
            let tree = SpanningTree::new(pe.job.topo.num_pes(), k, 0);
            let children = Children::Tree { tree, me: pe.pe };
            (0, tree.parent(pe.pe), children)
        }
        Members::List(pes) => {
            let Some(me) = pes.iter().position(|&p| p == pe.pe) else {
                abort(&format!(
                    "{}: PE {} called it with a PE list that does not contain PE {}",
                    describe(key),
                    pe.pe,
                    pe.pe
                ))
            };
            let tree = SpanningTree::new(pes.len(), k, 0);
            (
                digest(pes),
                tree.parent(me).map(|p| pes[p]),
                Children::List(tree.children(me).map(|c| pes[c]).collect()),
            )
        }
    };
    // A leaf with nothing recorded under the key (the common case) sends its
    // contribution on at once, without touching the table, nor boxing its
    // finishing function.
    if children.is_empty() && !pe.coll.reductions.borrow().active.contains_key(&key) {
        let result = finish(local, Vec::new());
        return send_result(pe, key, form, digest, parent, result, AtRoot::Queue);
    }
    let deposit = Deposit {
        form,
        digest,
        parent,
        children,
        local,
        finish: Box::new(finish),
    };
    let done = {
        let mut reds = pe.coll.reductions.borrow_mut();
        let mut slot = match reds.active.entry(key) {
            Entry::Occupied(slot) => slot,
            Entry::Vacant(slot) => {
                // A PE without children and nothing under the key took the
                // leaf's path above; this one waits for its children.
                debug_assert!(!deposit.children.is_empty());
                // Nothing arrived yet (the usual order on the root): room
                // for every child's contribution, so none grows the list.
                let arrived = Vec::with_capacity(deposit.children.len());
                slot.insert(InProgress {
                    deposit: Some(deposit),
                    arrived,
                });
                return;
            }
        };
        let entry = slot.get_mut();
        if entry.deposit.is_some() {
            drop(reds);
            abort(&format!(
                "PE {} joined {} twice (no two reductions may be in flight with the same ID)",
                pe.pe,
                describe(key)
            ));
        }
        for msg in &entry.arrived {
            check_contribution(pe, key, &deposit, msg);
        }
        entry.deposit = Some(deposit);
        entry.is_complete().then(|| slot.remove())
    };
    if let Some(done) = done {
        complete(pe, key, done, AtRoot::Queue);
    }
}

/// Aborts unless `msg` fits `pe`'s own view of reduction `key`.
#[inline]
fn check_contribution(pe: &Pe, key: u32, deposit: &Deposit, msg: &Message) {
    let src = msg.src_pe();
    let form = Form::of_flags(msg.header().flags);
    if form != deposit.form {
        abort(&format!(
            "PEs disagree on {}: PE {src} used {} but PE {} used {}",
            describe(key),
            form.name(),
            pe.pe,
            deposit.form.name()
        ));
    }
    if msg.header().root != deposit.digest {
        abort(&format!(
            "PEs disagree on the PEs taking part in {}: PE {src} and PE {} were called with different PE lists",
            describe(key),
            pe.pe
        ));
    }
    if !deposit.children.contains(src) {
        abort(&format!(
            "PEs disagree on the PEs taking part in {}: PE {src} sent its contribution to PE {}, which does not count PE {src} among its children (PE lists or reduction IDs differ between PEs)",
            describe(key),
            pe.pe
        ));
    }
}

/// A child's contribution reached the front of `pe`'s scheduler.
pub(crate) fn on_contribution(pe: &Pe, msg: Message) {
    let key = msg.header().coll;
    if key & NODE_KEY != 0 {
        return super::node_reduce::on_contribution(pe, msg);
    }
    let src = msg.src_pe();
    // One look-up of the table: the entry is found, checked, added to and,
    // if this was the last contribution, taken out through the same slot.
    let done = {
        let mut reds = pe.coll.reductions.borrow_mut();
        let mut slot = match reds.active.entry(key) {
            Entry::Occupied(slot) => slot,
            Entry::Vacant(slot) => {
                // Before this PE's own call: held until it deposits.
                slot.insert(InProgress {
                    deposit: None,
                    arrived: vec![msg],
                });
                return;
            }
        };
        let entry = slot.get_mut();
        if entry.arrived.iter().any(|m| m.src_pe() == src) {
            drop(reds);
            abort(&format!(
                "PE {src} contributed twice to {} (no two reductions may be in flight with the same ID)",
                describe(key)
            ));
        }
        if let Some(deposit) = &entry.deposit {
            check_contribution(pe, key, deposit, &msg);
        } else if let Some(first) = entry.arrived.first() {
            let (a, b) = (
                Form::of_flags(first.header().flags),
                Form::of_flags(msg.header().flags),
            );
            if a != b {
                abort(&format!(
                    "PEs disagree on {}: PE {} used {} but PE {src} used {}",
                    describe(key),
                    first.src_pe(),
                    a.name(),
                    b.name()
                ));
            }
        }
        entry.arrived.push(msg);
        entry.is_complete().then(|| slot.remove())
    };
    if let Some(done) = done {
        complete(pe, key, done, AtRoot::RunNow);
    }
}

/// Where the root's result goes ([`send_result`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum AtRoot {
    /// To the root's queue: the reduction completed inside a call of the
    /// program's.
    Queue,
    /// To its handler at once: it completed while the runtime delivered a
    /// contribution (see the module comment).
    RunNow,
}

/// Merges the children's contributions of `done` (all of them) into `pe`'s
/// deposit and sends the result up, or delivers it on the root.
fn complete(pe: &Pe, key: u32, done: InProgress, at_root: AtRoot) {
    pe.trace.collective("reduction step");
    let InProgress {
        deposit,
        mut arrived,
    } = done;
    let deposit = deposit.expect("complete only with a deposit");
    // Tree order, so that order-sensitive merges (concatenation) give the
    // same result whatever order the contributions arrived in.
    arrived.sort_by_key(|m| deposit.children.position(m.src_pe()));
    let result = (deposit.finish)(deposit.local, arrived);
    send_result(
        pe,
        key,
        deposit.form,
        deposit.digest,
        deposit.parent,
        result,
        at_root,
    );
}

/// The result handler of a struct-form reduction that ends in a function
/// ([`reduce_struct_then`]): handler 0, which no handler can have.
const THEN_HANDLER: usize = 0;

/// Which PEs a reduction ending in a function spans ([`reduce_struct_then`]).
pub(crate) enum Over<'a> {
    /// Every PE, matched by call order.
    All,
    /// Every PE, matched by ID.
    AllById(ReductionId),
    /// The listed PEs, by ID.
    List(&'a [usize], ReductionId),
    /// A group's members, by ID.
    Group(Group, ReductionId),
}

impl Over<'_> {
    /// The reduction's key on `pe`: its call-order count (taking the next
    /// one) or its ID.
    fn key(&self, pe: &Pe) -> u32 {
        match self {
            Over::All => next_order_key(pe),
            Over::AllById(id) | Over::List(_, id) | Over::Group(_, id) => id.0,
        }
    }
}

/// As the struct-form reductions, but the result runs `then` on the root
/// (PE 0, the list's first PE, the group's first member), as a handler
/// would: the root keeps its own `then` until the result comes; the other
/// PEs drop theirs once their contribution has left.
pub(crate) fn reduce_struct_then<T, M, F>(over: Over<'_>, data: T, merge: M, then: F)
where
    T: Serialize + DeserializeOwned + 'static,
    M: FnOnce(T, Vec<T>) -> T + 'static,
    F: FnOnce(T) + 'static,
{
    pe::with(|pe| {
        let key = over.key(pe);
        let then: crate::cmi::state::Then = Box::new(move |bytes: &[u8]| {
            let value = postcard::from_bytes(bytes).unwrap_or_else(|e| {
                abort(&format!(
                    "the result of {} does not decode as {}: {e}",
                    describe(key),
                    std::any::type_name::<T>()
                ))
            });
            then(value)
        });
        let earlier = pe.coll.reductions.borrow_mut().then.insert(key, then);
        if earlier.is_some() {
            abort(&format!(
                "PE {} joined {} twice (no two reductions may be in flight with the same ID)",
                pe.pe,
                describe(key)
            ));
        }
        deposit_over(pe, key, over, data, merge, THEN_HANDLER);
    })
}

/// The struct-form reduction of `over`, its result for handler `dest`:
/// what [`reduce_struct`] and its three kin call, and typed reductions
/// ending in a handler.
pub(crate) fn reduce_struct_over<T, M>(over: Over<'_>, data: T, merge: M, dest: usize)
where
    T: Serialize + DeserializeOwned + 'static,
    M: FnOnce(T, Vec<T>) -> T + 'static,
{
    pe::with(|pe| {
        let key = over.key(pe);
        deposit_over(pe, key, over, data, merge, dest);
    })
}

/// [`deposit_struct`] over the PEs `over` names, under `key`.
fn deposit_over<T, M>(pe: &Pe, key: u32, over: Over<'_>, data: T, merge: M, dest: usize)
where
    T: Serialize + DeserializeOwned + 'static,
    M: FnOnce(T, Vec<T>) -> T + 'static,
{
    match over {
        Over::All | Over::AllById(_) => deposit_struct(pe, key, Members::All, data, merge, dest),
        Over::List(pes, _) => {
            check_list(pe, pes, &describe(key));
            deposit_struct(pe, key, Members::List(pes), data, merge, dest)
        }
        Over::Group(group, _) => group::with_members(pe, group.id(), move |pe, pes| {
            deposit_struct(pe, key, Members::List(pes), data, merge, dest)
        }),
    }
}

/// A typed reduction's result reached the front of its root's scheduler:
/// runs the function the root gave.
pub(crate) fn on_then(pe: &Pe, msg: &Message) {
    let mut r = Reader::new(msg, "typed reduction result");
    let key = r.word();
    let Ok(key) = u32::try_from(key) else {
        r.malformed(&format!("reduction key {key} is out of range"))
    };
    let Some(then) = pe.coll.reductions.borrow_mut().then.remove(&key) else {
        r.malformed(&format!(
            "PE {} holds no function for {}",
            pe.pe,
            describe(key)
        ))
    };
    then(r.rest());
}

/// Sends `pe`'s merged `result` of reduction `key` up to `parent`, or, on
/// the root, to its handler as `at_root` says.
pub(super) fn send_result(
    pe: &Pe,
    key: u32,
    form: Form,
    digest: u32,
    parent: Option<usize>,
    mut result: Message,
    at_root: AtRoot,
) {
    result.set_src_pe(pe.pe);
    result.fix_total_size();
    pe.count_created(1);
    // A reduction that ends in a function (`reduce_struct_then`): the root
    // runs its own on the result, the others drop theirs here.
    let then = result.handler() == THEN_HANDLER
        && form == Form::Struct
        && pe.coll.reductions.borrow().then.contains_key(&key);
    match parent {
        None if then => {
            let mut msg = system::message(Kind::ReductionThen, &[u64::from(key)], result.payload());
            msg.set_src_pe(pe.pe);
            if at_root == AtRoot::RunNow && !pe.trace.on() {
                pe.deliver(msg);
            } else {
                pe.push_to_pe(pe.pe, msg);
            }
        }
        None => {
            let header = result.header_mut();
            header.flags = 0;
            header.coll = 0;
            header.root = 0;
            if at_root == AtRoot::RunNow && !pe.trace.on() {
                pe.deliver(result);
            } else {
                pe.push_to_pe(pe.pe, result);
            }
        }
        Some(parent) => {
            let header = result.header_mut();
            header.flags = form.flags();
            header.coll = key;
            header.root = digest;
            pe.push_to_pe(parent, result);
            if then {
                // Dropped with no borrow held: it is the program's closure.
                let mine = pe.coll.reductions.borrow_mut().then.remove(&key);
                drop(mine);
            }
        }
    }
}

/// The user's children messages, with the runtime's header fields cleared.
#[inline]
fn as_user_messages(mut remote: Vec<Message>) -> Vec<Message> {
    for m in &mut remote {
        let h = m.header_mut();
        h.flags = 0;
        h.coll = 0;
        h.root = 0;
    }
    remote
}

/// [`deposit`] of `msg` in the message form, merged by `merge`.
fn deposit_message<M>(pe: &Pe, key: u32, members: Members<'_>, msg: Message, merge: M)
where
    M: FnOnce(Message, Vec<Message>) -> Message + 'static,
{
    deposit(
        pe,
        key,
        Form::Message,
        members,
        Some(msg),
        message_finish(merge),
    );
}

/// [`deposit`] of `data` in the struct form, merged by `merge`, the
/// result for handler `dest`.
fn deposit_struct<T, M>(pe: &Pe, key: u32, members: Members<'_>, data: T, merge: M, dest: usize)
where
    T: Serialize + DeserializeOwned + 'static,
    M: FnOnce(T, Vec<T>) -> T + 'static,
{
    let finish = struct_finish(key, data, merge, dest);
    deposit(pe, key, Form::Struct, members, None, finish);
}

pub(super) fn message_finish<M>(
    merge: M,
) -> impl FnOnce(Option<Message>, Vec<Message>) -> Message + 'static
where
    M: FnOnce(Message, Vec<Message>) -> Message + 'static,
{
    move |local: Option<Message>, remote: Vec<Message>| {
        let local = local.expect("the message form keeps the PE's own message");
        if remote.is_empty() {
            local
        } else {
            merge(local, as_user_messages(remote))
        }
    }
}

pub(super) fn struct_finish<T, M>(
    key: u32,
    data: T,
    merge: M,
    dest: usize,
) -> impl FnOnce(Option<Message>, Vec<Message>) -> Message + 'static
where
    T: Serialize + DeserializeOwned + 'static,
    M: FnOnce(T, Vec<T>) -> T + 'static,
{
    move |_: Option<Message>, remote: Vec<Message>| {
        let value = if remote.is_empty() {
            data
        } else {
            let values = remote
                .iter()
                .map(|m| {
                    postcard::from_bytes(m.payload()).unwrap_or_else(|e| {
                        abort(&format!(
                            "the contribution of PE {} to {} does not decode as {}: {e} (the PEs must reduce values of one type)",
                            m.src_pe(),
                            describe(key),
                            std::any::type_name::<T>()
                        ))
                    })
                })
                .collect();
            merge(data, values)
        };
        let bytes = postcard::to_allocvec(&value).unwrap_or_else(|e| {
            abort(&format!(
                "{}: cannot serialize the {}: {e}",
                describe(key),
                std::any::type_name::<T>()
            ))
        });
        Message::from_payload(dest, &bytes)
    }
}

fn next_order_key(pe: &Pe) -> u32 {
    let mut reds = pe.coll.reductions.borrow_mut();
    let key = make_key(CLASS_ORDER, reds.next_order);
    reds.next_order += 1;
    key
}

pub(super) fn stamped(pe: &Pe, mut msg: Message) -> Message {
    pe.stamp_user_message(&mut msg);
    msg
}

/// Contributes `msg` to the next reduction over all PEs, matched by call
/// order (`CmiReduce`). Every PE must call it (or [`reduce_struct`]) once
/// per reduction, in the same order. `merge(local, children)` combines this
/// PE's message with its children's; the result runs the handler set in the
/// merged message on PE 0.
///
/// `merge` is the manual's `CmiReduceMergeFn`, as a closure: where C gets
/// `(size, local, remote[], count)` and returns a buffer, it gets `local` and
/// the children's messages by value and returns the merged message (the
/// other message-form reductions take the same closure).
#[doc(alias = "CmiReduce")]
#[doc(alias = "CmiReduceMergeFn")]
pub fn reduce<M>(msg: Message, merge: M)
where
    M: FnOnce(Message, Vec<Message>) -> Message + 'static,
{
    pe::with(|pe| {
        let key = next_order_key(pe);
        let msg = stamped(pe, msg);
        deposit_message(pe, key, Members::All, msg, merge);
    })
}

/// Contributes `data` to the next reduction over all PEs, matched by call
/// order (`CmiReduceStruct`); the result is delivered to handler `dest` on
/// PE 0, serialized (read it with [`decode_struct_result`]).
///
/// The manual's three function arguments become Rust traits (the other
/// struct-form reductions take the same): `CmiReduceMergeFn` is `merge`, a
/// closure `FnOnce(T, Vec<T>) -> T` given the local value and the
/// children's; `CmiReducePupFn` is `T`'s serde `Serialize` and
/// `DeserializeOwned` (values are packed with postcard to travel up the
/// tree); `CmiReduceDeleteFn` is `T`'s `Drop`: the values are moved into
/// `merge`, and the value it returns is dropped once it is serialized.
#[doc(alias = "CmiReduceStruct")]
#[doc(alias = "CmiReduceMergeFn")]
#[doc(alias = "CmiReducePupFn")]
#[doc(alias = "CmiReduceDeleteFn")]
pub fn reduce_struct<T, M>(data: T, merge: M, dest: usize)
where
    T: Serialize + DeserializeOwned + 'static,
    M: FnOnce(T, Vec<T>) -> T + 'static,
{
    reduce_struct_over(Over::All, data, merge, dest)
}

/// As [`reduce`], matched by `id` instead of call order (`CmiReduceID`).
#[doc(alias = "CmiReduceID")]
pub fn reduce_id<M>(msg: Message, merge: M, id: ReductionId)
where
    M: FnOnce(Message, Vec<Message>) -> Message + 'static,
{
    pe::with(|pe| {
        let msg = stamped(pe, msg);
        deposit_message(pe, id.0, Members::All, msg, merge);
    })
}

/// As [`reduce_struct`], matched by `id` instead of call order
/// (`CmiReduceStructID`).
#[doc(alias = "CmiReduceStructID")]
pub fn reduce_struct_id<T, M>(data: T, merge: M, dest: usize, id: ReductionId)
where
    T: Serialize + DeserializeOwned + 'static,
    M: FnOnce(T, Vec<T>) -> T + 'static,
{
    reduce_struct_over(Over::AllById(id), data, merge, dest)
}

/// Contributes `msg` to reduction `id` over the PEs of `pes`
/// (`CmiListReduce`). Every listed PE calls it with the same list; the
/// result runs on `pes[0]`. Aborts if the list names a PE out of range or
/// twice, or does not name the caller.
#[doc(alias = "CmiListReduce")]
pub fn list_reduce<M>(pes: &[usize], msg: Message, merge: M, id: ReductionId)
where
    M: FnOnce(Message, Vec<Message>) -> Message + 'static,
{
    pe::with(|pe| {
        check_list(pe, pes, &describe(id.0));
        let msg = stamped(pe, msg);
        deposit_message(pe, id.0, Members::List(pes), msg, merge);
    })
}

/// As [`list_reduce`] for a typed value (`CmiListReduceStruct`); the result
/// goes to handler `dest` on `pes[0]`.
#[doc(alias = "CmiListReduceStruct")]
pub fn list_reduce_struct<T, M>(pes: &[usize], data: T, merge: M, dest: usize, id: ReductionId)
where
    T: Serialize + DeserializeOwned + 'static,
    M: FnOnce(T, Vec<T>) -> T + 'static,
{
    reduce_struct_over(Over::List(pes, id), data, merge, dest)
}

/// Contributes `msg` to reduction `id` over the members of `group`
/// (`CmiGroupReduce`); the result runs on the group's first member. On a PE
/// that has not yet received the group's definition the contribution waits
/// for it.
#[doc(alias = "CmiGroupReduce")]
pub fn group_reduce<M>(group: Group, msg: Message, merge: M, id: ReductionId)
where
    M: FnOnce(Message, Vec<Message>) -> Message + 'static,
{
    pe::with(|pe| {
        let msg = stamped(pe, msg);
        group::with_members(pe, group.id(), move |pe, pes| {
            deposit_message(pe, id.0, Members::List(pes), msg, merge)
        });
    })
}

/// As [`group_reduce`] for a typed value (`CmiGroupReduceStruct`); the
/// result goes to handler `dest` on the group's first member.
#[doc(alias = "CmiGroupReduceStruct")]
pub fn group_reduce_struct<T, M>(group: Group, data: T, merge: M, dest: usize, id: ReductionId)
where
    T: Serialize + DeserializeOwned + 'static,
    M: FnOnce(T, Vec<T>) -> T + 'static,
{
    reduce_struct_over(Over::Group(group, id), data, merge, dest)
}

/// A new reduction ID, the same on every PE provided every PE calls this in
/// the same order (`CmiGetGlobalReduction`); typically done at start-up to
/// set IDs aside.
#[doc(alias = "CmiGetGlobalReduction")]
pub fn global_reduction_id() -> ReductionId {
    pe::with(|pe| {
        let mut reds = pe.coll.reductions.borrow_mut();
        let key = make_key(CLASS_GLOBAL, reds.next_global);
        reds.next_global += 1;
        ReductionId(key)
    })
}

fn take_dynamic(pe: &Pe) -> ReductionId {
    let mut reds = pe.coll.reductions.borrow_mut();
    let key = make_key(CLASS_DYNAMIC, reds.next_dynamic);
    reds.next_dynamic += 1;
    ReductionId(key)
}

/// A new reduction ID unique in the job (`CmiGetDynamicReduction`). Only PE 0
/// may call it (elsewhere it aborts); pass the ID on to the PEs that need
/// it.
#[doc(alias = "CmiGetDynamicReduction")]
pub fn dynamic_reduction_id() -> ReductionId {
    pe::with(|pe| {
        if pe.pe != 0 {
            abort(&format!(
                "dynamic_reduction_id may only be called on PE 0 (called on PE {}); use dynamic_reduction_id_remote",
                pe.pe
            ));
        }
        take_dynamic(pe)
    })
}

/// Asks PE 0 for a new dynamic reduction ID, delivered to handler `handler`
/// on PE `dest` (every PE if `dest` is `None`)
/// (`CmiGetDynamicReductionRemote`). The delivered message's payload is the
/// ID (4 bytes), the length of `data` (4 bytes), both little-endian, then
/// `data`; [`dynamic_reduction_reply`] reads it. May be called on any PE.
#[doc(alias = "CmiGetDynamicReductionRemote")]
pub fn dynamic_reduction_id_remote(handler: usize, dest: Option<usize>, data: &[u8]) {
    pe::with(|pe| {
        if let Some(d) = dest {
            pe.check_pe(d, "dynamic_reduction_id_remote for");
        }
        check_id_request(handler, data, "dynamic_reduction_id_remote");
        if pe.pe == 0 {
            return send_dynamic_id(pe, handler, dest, data);
        }
        let dest_word = dest.map_or(u64::MAX, |d| d as u64);
        let msg = system::message(Kind::DynamicIdRequest, &[handler as u64, dest_word], data);
        pe.send_runtime(0, msg);
    })
}

/// Aborts unless a dynamic-ID request (of `call`) names a handler index
/// and carries less than 4 GiB.
pub(super) fn check_id_request(handler: usize, data: &[u8], call: &str) {
    if handler == 0 || handler > crate::msg::MAX_HANDLER_INDEX {
        abort(&format!(
            "{call}: handler {handler} is no handler index (1..={})",
            crate::msg::MAX_HANDLER_INDEX
        ));
    }
    if u32::try_from(data.len()).is_err() {
        abort(&format!("{call}: the data is larger than 4 GiB"));
    }
}

/// The message delivering dynamic ID `id` with the asker's `data` to
/// `handler`: the ID (4 bytes), the length of `data` (4 bytes), both
/// little-endian, then `data`.
pub(super) fn id_reply(handler: usize, id: u32, data: &[u8]) -> Message {
    let mut payload = Vec::with_capacity(8 + data.len());
    payload.extend_from_slice(&id.to_le_bytes());
    payload.extend_from_slice(&(data.len() as u32).to_le_bytes());
    payload.extend_from_slice(data);
    Message::from_payload(handler, &payload)
}

/// The ID and data of a message [`id_reply`] made, if it is one.
pub(super) fn parse_id_reply(msg: &Message) -> Option<(u32, &[u8])> {
    let p = msg.payload();
    let id = u32::from_le_bytes(p.get(0..4)?.try_into().ok()?);
    let len = u32::from_le_bytes(p.get(4..8)?.try_into().ok()?) as usize;
    let data = p.get(8..8usize.checked_add(len)?)?;
    Some((id, data))
}

fn send_dynamic_id(pe: &Pe, handler: usize, dest: Option<usize>, data: &[u8]) {
    let msg = id_reply(handler, take_dynamic(pe).0, data);
    match dest {
        Some(d) => pe.send_to_pe(d, msg),
        None => super::bcast::sync_broadcast_all_and_free(msg),
    }
}

/// PE 0 answers a [`dynamic_reduction_id_remote`] request.
pub(crate) fn on_dynamic_id_request(pe: &Pe, msg: &Message) {
    let mut r = Reader::new(msg, "dynamic reduction ID request");
    if pe.pe != 0 {
        r.malformed(&format!("it reached PE {} instead of PE 0", pe.pe));
    }
    let handler = r.index(crate::msg::MAX_HANDLER_INDEX + 1);
    let dest = match r.word() {
        u64::MAX => None,
        d if d < pe.job.topo.num_pes() as u64 => Some(d as usize),
        d => r.malformed(&format!("destination PE {d} is out of range")),
    };
    let data = r.rest();
    send_dynamic_id(pe, handler, dest, data);
}

/// Reads a message delivered by [`dynamic_reduction_id_remote`]: the ID and
/// the caller's data. `None` if the payload is not in that format.
pub fn dynamic_reduction_reply(msg: &Message) -> Option<(ReductionId, &[u8])> {
    let (id, data) = parse_id_reply(msg)?;
    Some((ReductionId::from_raw(id)?, data))
}

/// A struct-form result that does not decode as the type asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError(String);

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "reduction result does not decode: {}", self.0)
    }
}

impl std::error::Error for DecodeError {}

/// The value carried by a struct-form reduction's result message.
pub fn decode_struct_result<T: DeserializeOwned>(msg: &Message) -> Result<T, DecodeError> {
    postcard::from_bytes(msg.payload()).map_err(|e| DecodeError(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_classes_never_collide() {
        let order = make_key(CLASS_ORDER, 5);
        let global = make_key(CLASS_GLOBAL, 5);
        let dynamic = make_key(CLASS_DYNAMIC, 5);
        assert!(order != global && global != dynamic && order != dynamic);
        assert!(ReductionId::from_raw(order).is_none());
        assert_eq!(ReductionId::from_raw(global), Some(ReductionId(global)));
        assert_eq!(ReductionId::from_raw(dynamic), Some(ReductionId(dynamic)));
        assert!(ReductionId::from_raw(3).is_none());
        assert!(describe(order).contains("#5"));
        assert!(describe(global).contains("global ID"));
    }

    #[test]
    fn digest_depends_on_order_and_members() {
        assert_ne!(digest(&[1, 2, 3]), digest(&[1, 3, 2]));
        assert_ne!(digest(&[1, 2, 3]), digest(&[1, 2]));
        assert_eq!(digest(&[4, 5]), digest(&[4, 5]));
    }

    #[test]
    fn reply_parsing_checks_lengths() {
        let mut payload = make_key(CLASS_DYNAMIC, 1).to_le_bytes().to_vec();
        payload.extend_from_slice(&3u32.to_le_bytes());
        payload.extend_from_slice(b"abc");
        let msg = Message::from_payload(1, &payload);
        let (id, data) = dynamic_reduction_reply(&msg).unwrap();
        assert_eq!((id.raw(), data), (make_key(CLASS_DYNAMIC, 1), &b"abc"[..]));
        payload[4] = 9; // claims more data than there is
        assert!(dynamic_reduction_reply(&Message::from_payload(1, &payload)).is_none());
        assert!(dynamic_reduction_reply(&Message::from_payload(1, b"ab")).is_none());
    }
}
