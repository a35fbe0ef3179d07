//! The calling thread's PE: its identity, handler table, local queues and
//! PE-private variables, reachable through a thread-local.
//!
//! # Invariants
//!
//! - A thread is at most one PE at a time; `CURRENT` holds it from start-up
//!   until the PE finishes.
//! - Everything here is touched only by the PE's own thread (`Rc`, `RefCell`).
//!   What other threads may touch lives in `machine::job`.
//! - No `RefCell` borrow is ever held while a handler or user callback runs:
//!   handlers may send, enqueue, register handlers and run a nested scheduler.
use std::any::Any;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;

use super::job::{Job, SharedValue};
use crate::csd::cqs::Cqs;
use crate::cth::Task;
use crate::msg::handler::HandlerTable;
use crate::msg::message::MessageRaw as _;
use crate::msg::message::{
    ARRIVAL_FLAGS, FLAG_BUNDLE, FLAG_NO_QD, Message, SPECIAL_DELIVERY_FLAGS,
};
use crate::rt::network::BORROWED_SEND_MIN;

/// How the thread came to be a PE; decides what "leave now" means.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Role {
    /// A thread whose PE body runs inside the runtime's `catch_unwind`: it
    /// leaves by unwinding to it.
    Worker,
    /// The thread that called `init_returns`: its code is the caller's own, so
    /// it leaves only through `exit`.
    ReturnedMain,
}

pub(crate) struct Pe {
    pub job: Arc<Job>,
    pub pe: usize,
    pub node: usize,
    pub rank: usize,
    pub role: Role,
    pub handlers: RefCell<HandlerTable>,
    /// The handlers of runtime messages, filled by the subsystems at PE
    /// start (`msg::system::Dispatch`).
    pub dispatch: crate::msg::system::Dispatch<Pe>,
    /// Messages this PE sent to itself, in order.
    pub self_queue: RefCell<VecDeque<Message>>,
    /// Arrived messages set aside (by `deliver_specific_msg`, or unpacked from
    /// a bundle); they run before anything else.
    pub stash: RefCell<VecDeque<Message>>,
    /// Arrived messages that routing held back and has since released (a
    /// multicast that came before its group's definition); taken before the
    /// inbox, so they keep their place among arrivals.
    pub ready: RefCell<VecDeque<Message>>,
    /// Groups, pending multicasts and reductions (`cmi`).
    pub coll: crate::cmi::CollState,
    /// Messages this PE created (sent or enqueued), for quiescence detection.
    pub qd_created: Cell<u64>,
    /// Messages this PE processed (handed to a handler or consumed by the
    /// runtime), for quiescence detection.
    pub qd_processed: Cell<u64>,
    /// This PE's part in quiescence detection (`ccd::quiescence`).
    pub qd: RefCell<crate::ccd::quiescence::QdState>,
    /// Quiescence detection has something to do when this PE is next idle
    /// (outside every handler).
    pub qd_due: Cell<bool>,
    /// Handlers (and runtime deliveries) running on this PE, nested ones
    /// included.
    pub handler_depth: Cell<u32>,
    /// The PE's scheduler queue (`CsdEnqueue*`): messages and awakened
    /// threads.
    pub queue: RefCell<Cqs<Task>>,
    /// User-level threads (`cth`).
    pub cth: crate::cth::CthState,
    /// Conditions and timers (`ccd`).
    pub ccd: crate::ccd::CcdState,
    /// Bumped by `exit_scheduler` while a scheduler runs; every scheduler
    /// call running then (each compares with its value at entry) stops once
    /// control is back in it, as in Converse.
    pub stop_gen: Cell<u64>,
    /// Scheduler calls running on this PE (nested ones included).
    pub sched_depth: Cell<u32>,
    /// A send is waiting for room on the network (`throttle`).
    pub send_waiting: Cell<bool>,
    /// Messages to other processes were posted and not yet flushed: the
    /// next look for work writes them (`next_pe_arrival`).
    pub net_posted: Cell<bool>,
    /// `exit_scheduler` was called while no scheduler ran: the next one
    /// started returns at once.
    pub stop_pending: Cell<bool>,
    /// Whether this PE's handler table has been checked against the others.
    pub handlers_checked: Cell<bool>,
    /// PE-private variables (`Cpv`), by slot.
    pub globals: RefCell<Vec<Option<Rc<dyn Any>>>>,
    /// This PE's cache of node-shared variables (`Csv`), by slot.
    pub node_globals: RefCell<Vec<Option<SharedValue>>>,
}

thread_local! {
    static CURRENT: RefCell<Option<Rc<Pe>>> = const { RefCell::new(None) };
}

/// The payload the runtime unwinds with to take a PE out of user code when
/// the job ends (`exit`). Never seen by users: the runtime catches it.
pub(crate) struct ExitUnwind;

impl Pe {
    pub fn new(job: Arc<Job>, pe: usize, role: Role) -> Pe {
        let topo = job.topo;
        Pe {
            pe,
            node: topo.node_of(pe),
            rank: topo.rank_of(pe),
            role,
            handlers: RefCell::new(HandlerTable::new()),
            dispatch: crate::msg::system::Dispatch::new(),
            self_queue: RefCell::new(VecDeque::new()),
            stash: RefCell::new(VecDeque::new()),
            ready: RefCell::new(VecDeque::new()),
            coll: crate::cmi::CollState::default(),
            qd_created: Cell::new(0),
            qd_processed: Cell::new(0),
            qd: RefCell::new(Default::default()),
            qd_due: Cell::new(false),
            handler_depth: Cell::new(0),
            queue: RefCell::new(Cqs::new()),
            cth: crate::cth::CthState::new(pe),
            ccd: crate::ccd::CcdState::new(),
            stop_gen: Cell::new(0),
            sched_depth: Cell::new(0),
            send_waiting: Cell::new(false),
            net_posted: Cell::new(false),
            stop_pending: Cell::new(false),
            handlers_checked: Cell::new(false),
            globals: RefCell::new(Vec::new()),
            node_globals: RefCell::new(Vec::new()),
            job,
        }
    }

    /// Makes `pe` the calling thread's PE.
    ///
    /// # Panics
    /// If the thread already is a PE.
    pub fn install(pe: Rc<Pe>) {
        CURRENT.with(|c| {
            let mut c = c.borrow_mut();
            assert!(
                c.is_none(),
                "this thread is already a Converse PE; a thread can run one job at a time"
            );
            // What the floor below needs to know of the PE: its number (for
            // abort messages) and its job's start (for the timers).
            crate::proc::exit::set_thread_pe(Some(pe.pe));
            crate::proc::timer::set_thread_epoch(Some(pe.job.start));
            *c = Some(pe);
        });
    }

    /// Ends the calling thread's PE; returns it so the caller decides when it
    /// is dropped.
    pub fn uninstall() -> Option<Rc<Pe>> {
        crate::proc::exit::set_thread_pe(None);
        crate::proc::timer::set_thread_epoch(None);
        CURRENT.with(|c| c.borrow_mut().take())
    }

    /// Leaves the PE's code at once because the job is ending: unwinds to the
    /// runtime on worker threads; returns on the `init_returns` main thread,
    /// whose caller must then stop (scheduler calls return immediately).
    pub fn leave_if_exiting(&self) -> bool {
        if !self.job.is_exiting() {
            return false;
        }
        if self.role == Role::Worker {
            std::panic::resume_unwind(Box::new(ExitUnwind));
        }
        true
    }

    /// Sends `msg` (a user message, header to be stamped) to PE `dest`,
    /// counting it for quiescence detection.
    pub fn send_to_pe(&self, dest: usize, mut msg: Message) {
        self.check_pe(dest, "send to");
        self.stamp_user_message(&mut msg);
        self.count_created(1);
        self.push_to_pe(dest, msg);
        self.throttle(Congested::Pe(dest));
    }

    /// Sends a copy of `msg` (a user message) to PE `dest`, as
    /// `send_to_pe(dest, msg.to_owned_copy())` would, but a large one to
    /// another process goes from `msg`'s own bytes when the network can
    /// (`Network::send_borrowed`): no copy of its own.
    pub fn send_copy_to_pe(&self, dest: usize, msg: &Message) {
        // One length compare on the common path (small, or in-process).
        if msg.len() >= BORROWED_SEND_MIN && self.job.net.is_some() {
            self.check_pe(dest, "send to");
            if self.job.local_pe(dest).is_none()
                && self.send_borrowed(0, self.job.topo.node_of(dest), dest, msg)
            {
                self.throttle(Congested::Pe(dest));
                return;
            }
        }
        self.send_to_pe(dest, msg.to_owned_copy());
    }

    /// [`Pe::send_copy_to_pe`] for a node send.
    pub fn send_copy_to_node(&self, node: usize, msg: &Message) {
        if msg.len() >= BORROWED_SEND_MIN && self.job.net.is_some() {
            self.check_node(node, "node send to");
            if self.job.local_node(node).is_none()
                && self.send_borrowed(crate::rt::network::FLAG_NODE, node, node, msg)
            {
                self.throttle(Congested::Node(node));
                return;
            }
        }
        self.send_to_node(node, msg.to_owned_copy());
    }

    /// Sends a copy of `msg` to `tag` on another process's node `node`
    /// from `msg`'s own bytes, if that node's module gathers; false (nothing
    /// sent) if not.
    fn send_borrowed(&self, flags: u8, node: usize, tag: usize, msg: &Message) -> bool {
        let net = self.job.remote();
        if !net.gathers_to(node) {
            return false;
        }
        self.count_created(1);
        if net.send_borrowed(tag, flags, node, self.pe, msg) {
            self.net_posted.set(true);
        }
        true
    }

    /// Flow control of a user's send to another process, when too much is
    /// queued for `node`:
    /// - on a user-level thread, the thread yields until the queue has
    ///   drained (the scheduler runs everything else meanwhile);
    /// - in the main flow outside any handler (a start function sending a
    ///   stream), the send waits, taking this PE's arrived messages meanwhile
    ///   as `deliver_msgs` would, so that two PEs flooding each other both go
    ///   on; sends made by those handlers do not wait, so waits never nest;
    /// - inside a handler it does not wait (the handler may hold state the
    ///   others need), and the queue grows.
    fn throttle(&self, target: Congested) {
        // Is too much waiting for the target, and has enough of it gone?
        let (over, below): (&dyn Fn() -> bool, &dyn Fn() -> bool) = match target {
            Congested::Pe(dest) if dest == self.pe => return,
            Congested::Pe(dest) => match self.job.local_pe(dest) {
                Some(shared) => (
                    &move || shared.inbox.backlog() > INBOX_HIGH_WATER,
                    &move || shared.inbox.backlog() <= INBOX_LOW_WATER,
                ),
                None => {
                    let node = self.job.topo.node_of(dest);
                    let net = self.job.remote();
                    (&move || net.over_high_water(node), &move || {
                        net.below_low_water(node)
                    })
                }
            },
            // A node queue of this process: node work, any PE takes it.
            Congested::Node(node) if self.job.local_node(node).is_some() => return,
            Congested::Node(node) => {
                let net = self.job.remote();
                (&move || net.over_high_water(node), &move || {
                    net.below_low_water(node)
                })
            }
        };
        if !over() || self.send_waiting.get() {
            return;
        }
        if !self.cth.current().is_main_flow() {
            while !below() && !self.job.is_exiting() {
                crate::cth::yield_now();
            }
            return;
        }
        if self.handler_depth.get() > 0 {
            return;
        }
        self.send_waiting.set(true);
        let _reset = ResetOnDrop(&self.send_waiting);
        while !below() && !self.job.is_exiting() {
            self.poll_network();
            let mut delivered = false;
            while let Some(msg) = self.next_arrived() {
                self.deliver(msg);
                delivered = true;
                if below() {
                    break;
                }
            }
            if !delivered {
                std::thread::yield_now();
            }
        }
    }

    /// Makes `msg` ready to leave as a user message: records the sender,
    /// makes the size field true and clears the runtime's flags (a handler
    /// that passes on a broadcast copy sends a plain message, not another
    /// broadcast).
    pub fn stamp_user_message(&self, msg: &mut Message) {
        msg.set_src_pe(self.pe);
        msg.fix_total_size();
        if msg.header().flags != 0 {
            msg.header_mut().flags = 0;
        }
    }

    /// Counts `n` messages created by this PE, for quiescence detection.
    #[inline]
    pub fn count_created(&self, n: usize) {
        self.qd_created.set(self.qd_created.get() + n as u64);
    }

    /// Counts `n` messages this PE processed, for quiescence detection.
    #[inline]
    pub fn count_processed(&self, n: usize) {
        self.qd_processed.set(self.qd_processed.get() + n as u64);
    }

    /// Puts `msg` in PE `dest`'s inbox (its self-send queue if `dest` is this
    /// PE) as it is: no stamping, no counting, no range check. The runtime's
    /// own sends and forwards use it.
    pub fn push_to_pe(&self, dest: usize, msg: Message) {
        if dest == self.pe {
            self.self_queue.borrow_mut().push_back(msg);
        } else {
            match self.job.local_pe(dest) {
                Some(target) => {
                    target.inbox.push(msg);
                    target.idle.wake();
                }
                None => {
                    if self.job.remote().send_to_pe(dest, msg) {
                        self.net_posted.set(true);
                    }
                }
            }
        }
    }

    /// Sends `msg` (a user message) to node `node`: any PE of that node may
    /// handle it.
    pub fn send_to_node(&self, node: usize, mut msg: Message) {
        self.check_node(node, "node send to");
        self.stamp_user_message(&mut msg);
        self.count_created(1);
        self.push_to_node(node, msg);
        self.throttle(Congested::Node(node));
    }

    /// Puts `msg` in node `node`'s inbox as it is.
    pub fn push_to_node(&self, node: usize, msg: Message) {
        match self.job.local_node(node) {
            Some(shared) => {
                shared.inbox.push(msg);
                self.job.wake_node(node);
            }
            None => {
                if self.job.remote().send_to_node(node, msg) {
                    self.net_posted.set(true);
                }
            }
        }
    }

    /// Aborts with a clear message if `node` is no node of the job.
    pub fn check_node(&self, node: usize, what: &str) {
        let nodes = self.job.topo.num_nodes();
        if node >= nodes {
            crate::proc::exit::abort(&format!(
                "{what} node {node}, but the job has nodes 0..{nodes}"
            ));
        }
    }

    /// Aborts with a clear message if `pe` is no PE of the job.
    pub fn check_pe(&self, pe: usize, what: &str) {
        let n = self.job.topo.num_pes();
        if pe >= n {
            crate::proc::exit::abort(&format!("{what} PE {pe}, but the job has PEs 0..{n}"));
        }
    }

    /// The next arrived message (stash, then inbox, then self-sends, then the
    /// node inbox), without looking at the scheduler queues.
    pub fn next_arrived(&self) -> Option<Message> {
        if let Some(m) = self.stash.borrow_mut().pop_front() {
            return Some(m);
        }
        self.next_fresh_arrival()
    }

    /// The next arrived message that is not set aside: inbox, then
    /// self-sends, then the node inbox.
    pub fn next_fresh_arrival(&self) -> Option<Message> {
        self.next_pe_arrival().or_else(|| {
            // `is_empty` reads two indices; `pop` on an empty queue does more.
            let inbox = &self.job.node(self.node).inbox;
            let mut m = if inbox.is_empty() { None } else { inbox.pop() }?;
            if m.take_net_mark() {
                self.job.remote().consumed(m.len());
            }
            Some(m)
        })
    }

    /// The next message sent to this PE (not to its node): inbox, then
    /// self-sends.
    pub fn next_pe_arrival(&self) -> Option<Message> {
        // Whatever looks for work first writes what this PE posted to other
        // processes (every delivery path comes through here).
        if self.net_posted.get() {
            self.flush_network();
        }
        if let Some(m) = self.ready.borrow_mut().pop_front() {
            return Some(m);
        }
        // SAFETY: `Pe` lives on its PE's thread only (it is `!Send`), and only
        // a PE pops its own inbox: this is the queue's single consumer.
        while let Some(mut m) = unsafe { self.job.pe(self.pe).inbox.pop() } {
            if m.take_net_mark() {
                self.job.remote().consumed(m.len());
            }
            if m.header().flags & ARRIVAL_FLAGS == 0 {
                return Some(m);
            }
            // Collective routing happens as a message is taken from the
            // inbox, not when it is delivered, so that a PE waiting in
            // `deliver_specific_msg` still passes broadcasts on.
            if let Some(m) = self.dispatch.arrived(self, m) {
                return Some(m);
            }
            if let Some(m) = self.ready.borrow_mut().pop_front() {
                return Some(m);
            }
        }
        self.self_queue.borrow_mut().pop_front()
    }

    /// The next message by the scheduler's pass order: arrived messages first,
    /// then whichever of the node queue and the PE queue has the more urgent
    /// front (the PE queue on ties).
    pub fn next_task(&self) -> Option<Task> {
        if let Some(m) = self.next_arrived() {
            return Some(Task::Message(m));
        }
        let node = &self.job.node(self.node);
        if node.queue_len.load(std::sync::atomic::Ordering::Acquire) > 0 {
            let mut nq = crate::sync::lock(&node.queue);
            let take_node = match (nq.front_priority(), self.queue.borrow().front_priority()) {
                (Some(n), Some(l)) => n < l,
                (Some(_), None) => true,
                (None, _) => false,
            };
            if take_node {
                let m = nq.dequeue();
                node.queue_len
                    .store(nq.len(), std::sync::atomic::Ordering::Release);
                return m.map(Task::Message);
            }
        }
        let mut queue = self.queue.borrow_mut();
        if queue.is_empty() {
            return None;
        }
        queue.dequeue()
    }

    /// True if an arrived message waits (stash, released, inbox, self-sends,
    /// node inbox or node queue): what the scheduler takes before its own
    /// queue.
    pub fn has_arrivals(&self) -> bool {
        let node = &self.job.node(self.node);
        !self.stash.borrow().is_empty()
            || !self.ready.borrow().is_empty()
            || !self.self_queue.borrow().is_empty()
            // SAFETY: as in `next_fresh_arrival`: the owning PE's thread is
            // the inbox's single consumer.
            || !(unsafe { self.job.pe(self.pe).inbox.is_empty() })
            || !node.inbox.is_empty()
            || node.queue_len.load(std::sync::atomic::Ordering::Acquire) > 0
    }

    /// True if another thread has made work visible to this PE (what an idle
    /// PE polls for), or the job is ending.
    pub fn has_incoming(&self) -> bool {
        let node = &self.job.node(self.node);
        // SAFETY: as in `next_fresh_arrival`: the owning PE's thread is the
        // inbox's single consumer.
        !(unsafe { self.job.pe(self.pe).inbox.is_empty() })
            || !node.inbox.is_empty()
            || node.queue_len.load(std::sync::atomic::Ordering::Relaxed) > 0
            || self.job.is_exiting()
    }

    /// An idle PE of a multi-process job takes what arrived from the network
    /// itself (see `NetModule::try_progress`). Returns false: what it
    /// delivered shows in the queues the caller looks at next.
    #[inline]
    pub fn poll_network(&self) -> bool {
        if let Some(net) = &self.job.net {
            if self.net_posted.get() {
                self.flush_network();
            }
            net.try_progress();
        }
        false
    }

    /// Writes the messages this PE posted to other processes.
    #[cold]
    pub fn flush_network(&self) {
        self.net_posted.set(false);
        self.job.remote().flush();
    }

    /// This PE stops polling the network and parks: the network's progress
    /// thread takes over the watch.
    fn parking(&self) {
        if let Some(net) = &self.job.net {
            net.pe_parking();
        }
    }

    /// Waits, spinning then parking, until a message is sent to this PE (not
    /// its node) or the job ends.
    pub fn idle_wait_for_pe_message(&self) {
        let has = || {
            self.poll_network();
            // SAFETY: the owning PE's thread is the inbox's single consumer.
            !unsafe { self.job.pe(self.pe).inbox.is_empty() } || self.job.is_exiting()
        };
        self.job.pe(self.pe).idle.wait_then(
            has,
            None,
            self.job.oversubscribed,
            crate::csd::idle::Sleep::OwnOnly,
            || self.parking(),
        );
    }

    /// Waits, spinning then parking, until another thread gives this PE
    /// work, or its next timer or periodic condition is due. May return
    /// early; the caller polls again.
    pub fn idle_wait(&self) {
        if self.qd_due.get()
            && self.handler_depth.get() == 0
            && crate::ccd::quiescence::on_idle(self, true)
        {
            return;
        }
        // With a reduction in progress, an idle PE wakes after a while to
        // check that the job is not stuck (see `cmi::reduce`).
        let stall_timeout = crate::cmi::reduce::stall_timeout(self);
        let needs_clock = crate::ccd::needs_deadline(self);
        if stall_timeout.is_none() && !needs_clock {
            self.job.pe(self.pe).idle.wait_then(
                || self.poll_network() || self.has_incoming(),
                None,
                self.job.oversubscribed,
                crate::csd::idle::Sleep::Any,
                || self.parking(),
            );
            return;
        }
        let now = std::time::Instant::now();
        if needs_clock && crate::ccd::poll(self, now) {
            // Callbacks ran and may have made work: look again first.
            return;
        }
        let ccd_deadline = crate::ccd::next_deadline(self, now);
        let stall_deadline = stall_timeout.map(|t| {
            let since = self.ccd.idle_since.get().unwrap_or(now);
            self.ccd.idle_since.set(Some(since));
            since + t
        });
        let deadline = match (ccd_deadline, stall_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let timed_out = self.job.pe(self.pe).idle.wait_then(
            || self.poll_network() || self.has_incoming(),
            deadline.map(|d| d.saturating_duration_since(now)),
            self.job.oversubscribed,
            crate::csd::idle::Sleep::Any,
            || self.parking(),
        );
        if timed_out
            && !self.has_incoming()
            && stall_deadline.is_some_and(|d| std::time::Instant::now() >= d)
        {
            crate::cmi::reduce::check_for_stall(self);
        }
    }

    /// Counts a handler (or a callback run like one) as running on this PE
    /// while the returned guard lives.
    pub fn enter_handler(&self) -> HandlerRunning<'_> {
        HandlerRunning::enter(self)
    }

    /// Runs the handler of `msg`, which it then owns, and returns true.
    /// Bundles are unpacked into the stash instead (their sub-messages run
    /// next, in order, each counted when it runs) and return false. An
    /// unknown handler index aborts the job.
    pub fn deliver(&self, msg: Message) -> bool {
        let _running = HandlerRunning::enter(self);
        let flags = msg.header().flags;
        if flags & SPECIAL_DELIVERY_FLAGS != 0 {
            return self.deliver_special(msg, flags);
        }
        self.count_processed(1);
        self.run_handler(msg)
    }

    /// Delivery of bundles and runtime messages.
    #[cold]
    fn deliver_special(&self, msg: Message, flags: u32) -> bool {
        if flags & FLAG_BUNDLE != 0 {
            self.unpack_bundle(msg);
            return false;
        }
        if flags & FLAG_NO_QD == 0 {
            self.count_processed(1);
        }
        if flags & (crate::msg::message::FLAG_SYSTEM | crate::msg::message::FLAG_REDUCE) != 0 {
            self.dispatch.deliver(self, msg);
            return true;
        }
        self.run_handler(msg)
    }

    /// Runs the user handler `msg` names; aborts if there is none.
    fn run_handler(&self, msg: Message) -> bool {
        let index = msg.handler();
        let handler = self.handlers.borrow().get(index).cloned();
        match handler {
            Some(f) => {
                f(msg);
                true
            }
            None => crate::proc::exit::abort(&format!(
                "message for unknown handler {index} (sent by PE {}); register it on every PE before messages for it arrive",
                msg.src_pe()
            )),
        }
    }

    fn unpack_bundle(&self, msg: Message) {
        let subs = self.unbundle_or_abort(msg);
        let mut stash = self.stash.borrow_mut();
        for (i, sub) in subs.into_iter().enumerate() {
            stash.insert(i, sub);
        }
    }

    /// The sub-messages of a multiple-send bundle; aborts if its bytes do not
    /// parse.
    pub fn unbundle_or_abort(&self, bundle: Message) -> Vec<Message> {
        let src = bundle.src_pe();
        bundle.unbundle().unwrap_or_else(|e| {
            crate::proc::exit::abort(&format!(
                "malformed multiple-send bundle from PE {src}: {e}"
            ))
        })
    }

    /// Checks this PE's handler table against the other PEs' (once, then on
    /// every later `register`); aborts on a difference.
    pub fn check_handlers(&self) {
        let result = self
            .job
            .check_handlers(self.pe, self.handlers.borrow().registered_idents());
        if let Err(e) = result {
            crate::proc::exit::abort(&e);
        }
        self.handlers_checked.set(true);
    }
}

/// Counts a delivery in progress on a PE while it lives (unwinding
/// included).
pub(crate) struct HandlerRunning<'a>(&'a Pe);

impl<'a> HandlerRunning<'a> {
    fn enter(pe: &'a Pe) -> HandlerRunning<'a> {
        pe.handler_depth.set(pe.handler_depth.get() + 1);
        HandlerRunning(pe)
    }
}

impl Drop for HandlerRunning<'_> {
    fn drop(&mut self) {
        self.0.handler_depth.set(self.0.handler_depth.get() - 1);
    }
}

/// Runs `f` with the calling thread's PE.
///
/// # Panics
/// If the thread is no Converse PE.
pub(crate) fn with<R>(f: impl FnOnce(&Rc<Pe>) -> R) -> R {
    CURRENT.with(|c| match &*c.borrow() {
        Some(pe) => f(pe),
        None => not_a_pe(),
    })
}

/// The calling thread's PE (a counted reference: cheap, and safe to hold
/// across handler calls).
pub(crate) fn current() -> Rc<Pe> {
    with(Rc::clone)
}

/// The calling thread's PE, if it is one.
pub(crate) fn try_current() -> Option<Rc<Pe>> {
    CURRENT.with(|c| c.borrow().clone())
}

#[cold]
fn not_a_pe() -> ! {
    panic!(
        "this thread is not a Converse PE: call Converse functions from the start function, \
         a handler, or the thread that called init_returns"
    )
}

/// What a send may have to wait for (see `Pe::throttle`).
#[derive(Clone, Copy)]
enum Congested {
    /// PE `dest`: its inbox, or the network to its process.
    Pe(usize),
    /// The network to node `node`'s process.
    Node(usize),
}

/// Messages waiting in a PE's inbox above which a sender in the same
/// process waits, and below which it goes on. About 6 MiB of small
/// messages; a burst shorter than that never waits.
const INBOX_HIGH_WATER: u64 = 1 << 16;
const INBOX_LOW_WATER: u64 = 1 << 14;

/// Clears a flag when dropped (also when a handler unwinds through it).
struct ResetOnDrop<'a>(&'a Cell<bool>);

impl Drop for ResetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.set(false);
    }
}
