//! Where a PE's work comes from and how it runs: the order in which arrived
//! messages are taken (the scheduler's pass order, see `csd`), the idle wait
//! when there are none, and delivery (a handler call, a bundle unpacked, a
//! runtime message to its subsystem's handler).
//!
//! # Invariants
//!
//! - Only the PE's own thread pops its inbox (the queue's single consumer).
//! - Whatever looks for work first writes what this PE posted to other
//!   processes (`flush_posted`), so a PE that waits for an answer never
//!   holds back its own request.
//! - Collective routing happens as a message is taken from the inbox (not
//!   when it is delivered), so a PE waiting in `deliver_specific_msg` still
//!   passes broadcasts on.
//! - `handler_depth` counts deliveries running (nested ones included),
//!   unwinding included; no `RefCell` borrow is held while a handler runs.
//!
//! # Concurrency
//!
//! Runs on the PE's own thread; other threads only push to its inboxes and
//! wake it (see `rt::job`, `csd::idle`).
use crate::csd::idle::Patience;
use crate::csd::state::Task;
use crate::msg::message::MessageRaw as _;
use crate::msg::message::{
    ARRIVAL_FLAGS, FLAG_BUNDLE, FLAG_NO_QD, Message, SPECIAL_DELIVERY_FLAGS,
};
use crate::rt::pe::Pe;
use crate::trace::{Flow, SELF_SENT};

impl Pe {
    /// The next arrived message (stash, then the released ones, then the
    /// inbox, then self-sends, then the node inbox), without looking at the
    /// scheduler queues.
    ///
    /// This and the two below are the scheduler's hot path: each is
    /// inlined into its caller, with the common case of a busy PE (nothing
    /// set aside, nothing from other PEs, a message to itself) a few tests
    /// and one queue pop; every other case is a call out of line. (Left
    /// to the inliner, this one had become a call of its own: 11
    /// instructions of each self-send, callgrind.)
    #[inline(always)]
    pub fn next_arrived(&self) -> Option<Message> {
        if !self.sched.stash.borrow().is_empty() {
            return self.sched.stash.borrow_mut().pop_front();
        }
        self.next_fresh_arrival()
    }

    /// The next arrived message that is not set aside: inbox, then
    /// self-sends, then the node inbox.
    #[inline]
    pub fn next_fresh_arrival(&self) -> Option<Message> {
        if let Some(m) = self.next_arrival_for(true) {
            return Some(m);
        }
        self.next_node_arrival()
    }

    /// The next message sent to this PE's node, if any.
    #[inline]
    fn next_node_arrival(&self) -> Option<Message> {
        // `is_empty` reads two indices; `pop` on an empty queue does more.
        let inbox = &self.job.node(self.node).inbox;
        if inbox.is_empty() {
            return None;
        }
        self.pop_node_arrival()
    }

    #[inline(never)]
    fn pop_node_arrival(&self) -> Option<Message> {
        let mut m = self.job.node(self.node).inbox.pop()?;
        if m.take_net_mark() {
            self.job.remote().consumed(m.len());
        }
        Some(m)
    }

    /// The next message sent to this PE (not to its node): inbox, then
    /// self-sends.
    #[inline]
    pub fn next_pe_arrival(&self) -> Option<Message> {
        self.next_arrival_for(false)
    }

    /// [`Pe::next_pe_arrival`]; `with_node`: the caller takes node
    /// messages next if this finds none (which, with the order of arrivals
    /// randomized, makes the node's arrivals one more candidate).
    #[inline(always)]
    fn next_arrival_for(&self, with_node: bool) -> Option<Message> {
        // Whatever looks for work first writes what this PE posted to other
        // processes (every delivery path comes through here).
        self.flush_posted();
        // SAFETY: `Pe` lives on its PE's thread only (it is `!Send`), and only
        // a PE looks at its own inbox: this is the queue's single consumer.
        let inbox_empty = unsafe { self.shared().inbox.is_empty() };
        if (!inbox_empty || !self.sched.ready.borrow().is_empty())
            && let Some(m) = self.next_inbox_arrival(with_node)
        {
            return Some(m);
        }
        if self.sched.shuffle.is_some() {
            return self.next_shuffled(with_node);
        }
        self.sched.self_queue.pop()
    }

    /// The next message from the released ones or the inbox, routing
    /// collectives on the way; `None` if they hold none to deliver.
    #[inline(never)]
    fn next_inbox_arrival(&self, with_node: bool) -> Option<Message> {
        if self.sched.shuffle.is_some() {
            return self.next_shuffled(with_node);
        }
        if let Some(m) = self.sched.ready.borrow_mut().pop_front() {
            return Some(m);
        }
        // SAFETY: as in `next_pe_arrival`: the owning PE's thread is the
        // inbox's single consumer.
        while let Some(mut m) = unsafe { self.shared().inbox.pop() } {
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
            if let Some(m) = self.sched.ready.borrow_mut().pop_front() {
                return Some(m);
            }
        }
        None
    }

    /// The next arrival drawn at random (`+randomized_msgq`, see
    /// `csd::shuffle`): everything that arrived for this PE (released
    /// multicasts, the inbox, after collective routing, and self-sends) is
    /// held per sender first; `with_node` adds the node's arrivals as one
    /// more candidate.
    #[inline(never)]
    fn next_shuffled(&self, with_node: bool) -> Option<Message> {
        let shuffle = self.sched.shuffle.as_ref()?;
        loop {
            // Released multicasts, then the inbox, in their order. A plain
            // arrival is held with its network mark and unrecorded (the
            // mark `true`): the network counts its bytes until it is
            // taken, which keeps its receive budget meaningful, and the
            // trace's receipt goes with the handler that runs it.
            loop {
                let released = self.sched.ready.borrow_mut().pop_front();
                if let Some(m) = released {
                    shuffle.hold(m.src_pe(), m, false);
                    continue;
                }
                // SAFETY: as in `next_pe_arrival`: the owning PE's thread
                // is the inbox's single consumer.
                let Some(mut m) = (unsafe { self.shared().inbox.pop() }) else {
                    break;
                };
                if m.header().flags & ARRIVAL_FLAGS == 0 {
                    shuffle.hold(m.src_pe(), m, true);
                    continue;
                }
                // Collective routing as the message is taken, as on the
                // path without the draw.
                if m.take_net_mark() {
                    self.job.remote().consumed(m.len());
                }
                if let Some(m) = self.dispatch.arrived(self, m) {
                    shuffle.hold(m.src_pe(), m, false);
                }
            }
            while let Some(m) = self.sched.self_queue.pop() {
                shuffle.hold(self.pe, m, true);
            }
            let node_waits = with_node && !self.job.node(self.node).inbox.is_empty();
            match shuffle.pick(node_waits)? {
                super::shuffle::Pick::Held(mut m, marked) => {
                    if marked && m.take_net_mark() {
                        self.job.remote().consumed(m.len());
                    }
                    return Some(m);
                }
                super::shuffle::Pick::Extra => {
                    if let Some(m) = self.pop_node_arrival() {
                        return Some(m);
                    }
                    // Another PE of the node took it first: draw again.
                }
            }
        }
    }

    /// Takes the next queued task (see [`Pe::next_queued`]) and runs it:
    /// `None` if there was none, else whether it counts as a delivered
    /// message (a bundle does not). Ends the PE's idle period first, if
    /// it was idle.
    ///
    /// The task is matched where `next_queued` left it: moved into a
    /// variable of its own first, it was copied with one 16-byte load of
    /// what the queue had written as 8-byte words, a store-forwarding
    /// stall per task.
    #[inline]
    pub(crate) fn run_next_queued(&self) -> Option<bool> {
        match self.next_queued()? {
            Task::Message(msg) => {
                if self.is_idle() {
                    crate::ccd::end_idle(self);
                }
                Some(self.deliver(msg))
            }
            Task::Thread(t) => {
                if self.is_idle() {
                    crate::ccd::end_idle(self);
                }
                crate::cth::run_token(self, t);
                Some(true)
            }
        }
    }

    /// The more urgent front of the node queue and the PE queue (the PE
    /// queue on ties).
    #[inline]
    fn next_queued(&self) -> Option<Task> {
        let node = &self.job.node(self.node);
        if node.queue_len.load(std::sync::atomic::Ordering::Acquire) > 0 {
            return self.next_queued_or_node();
        }
        let mut queue = self.sched.queue.borrow_mut();
        if queue.is_empty() {
            return None;
        }
        queue.dequeue()
    }

    /// [`Pe::next_queued`] when the node queue holds work.
    #[inline(never)]
    fn next_queued_or_node(&self) -> Option<Task> {
        let node = &self.job.node(self.node);
        {
            let mut nq = crate::sync::lock(&node.queue);
            let take_node = match (
                nq.front_priority(),
                self.sched.queue.borrow().front_priority(),
            ) {
                // Equal priorities: the PE's queue, or a draw under
                // `+randomized_msgq`.
                (Some(n), Some(l)) => match &self.sched.shuffle {
                    Some(shuffle) if n == l => shuffle.coin(),
                    _ => n < l,
                },
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
        let mut queue = self.sched.queue.borrow_mut();
        if queue.is_empty() {
            return None;
        }
        queue.dequeue()
    }

    /// True if another thread has made work visible to this PE (what an idle
    /// PE polls for), or the job is ending.
    pub fn has_incoming(&self) -> bool {
        let node = &self.job.node(self.node);
        // SAFETY: as in `next_fresh_arrival`: the owning PE's thread is the
        // inbox's single consumer.
        !(unsafe { self.shared().inbox.is_empty() })
            || !self.sched.ready.borrow().is_empty()
            || !node.inbox.is_empty()
            || node.queue_len.load(std::sync::atomic::Ordering::Relaxed) > 0
            || self.job.is_exiting()
            || self.trace.watch().is_some_and(|w| w.is_asked())
    }

    /// Waits, spinning then parking, until a message is sent to this PE (not
    /// its node) or the job ends.
    pub fn idle_wait_for_pe_message(&self) {
        self.answer_watchdog_if_asked();
        let has = || {
            self.poll_network()
            // SAFETY: the owning PE's thread is the inbox's single consumer.
                || !unsafe { self.shared().inbox.is_empty() }
                || self.job.is_exiting()
                || self.trace.watch().is_some_and(|w| w.is_asked())
        };
        self.shared().idle.wait_then(
            has,
            || self.take_net_moved(),
            None,
            Patience::of(self.job.oversubscribed),
            crate::csd::idle::Sleep::OwnOnly,
            || self.parking(),
        );
    }

    /// Waits, spinning then parking, until another thread gives this PE
    /// work, or its next timer or periodic condition is due. May return
    /// early; the caller polls again.
    pub fn idle_wait(&self) {
        self.answer_watchdog_if_asked();
        if self.qd_due()
            && self.sched.handler_depth.get() == 0
            && crate::ccd::quiescence::on_idle(self, true)
        {
            return;
        }
        // With a reduction in progress, an idle PE wakes after a while to
        // check that the job is not stuck (see `cmi::reduce`); under
        // `++watchdog`, PE 0 does to check that the job is not left
        // quiescent with no exit pending (see `ccd::quiescence`).
        let reduce_stall = crate::cmi::reduce::stall_timeout(self);
        let quiet = crate::ccd::quiescence::quiet_timeout(self);
        let stall_timeout = match (reduce_stall, quiet) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let needs_clock = crate::ccd::needs_deadline(self);
        let patience = if self.sched.served_outside.replace(false) {
            Patience::Brief
        } else {
            Patience::of(self.job.oversubscribed)
        };
        if stall_timeout.is_none() && !needs_clock {
            self.shared().idle.wait_then(
                || self.poll_network() || self.has_incoming(),
                || self.take_net_moved(),
                None,
                patience,
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
        let idle_since = stall_timeout.map(|_| crate::ccd::idle_since(self, now));
        let stall_deadline = idle_since.zip(stall_timeout).map(|(since, t)| since + t);
        let deadline = match (ccd_deadline, stall_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let timed_out = self.shared().idle.wait_then(
            || self.poll_network() || self.has_incoming(),
            || self.take_net_moved(),
            deadline.map(|d| d.saturating_duration_since(now)),
            patience,
            crate::csd::idle::Sleep::Any,
            || self.parking(),
        );
        if timed_out
            && !self.has_incoming()
            && let Some(since) = idle_since
        {
            let due = |t: Option<std::time::Duration>| {
                t.is_some_and(|t| std::time::Instant::now() >= since + t)
            };
            if due(reduce_stall) {
                crate::cmi::reduce::check_for_stall(self);
            }
            if due(quiet) {
                crate::ccd::quiescence::check_quiet(self);
            }
        }
    }

    /// The work this PE just ran came from outside the job (a CCS
    /// request): its next idle wait parks soon (`idle::Patience::Brief`).
    pub(crate) fn served_outside(&self) {
        self.sched.served_outside.set(true);
    }

    /// Runs the handler of `msg`, which it then owns, and returns true.
    /// Bundles are unpacked into the stash instead (their sub-messages run
    /// next, in order, each counted when it runs) and return false. An
    /// unknown handler index aborts the job.
    ///
    /// Always inlined, and [`Pe::run_handler`] into it: the scheduler loop
    /// then calls the handler straight from its own frame (the two frames
    /// were 14 instructions of each self-send, callgrind).
    #[inline(always)]
    pub fn deliver(&self, msg: Message) -> bool {
        if self.trace.on() {
            return self.deliver_traced(msg);
        }
        let _running = self.sched.enter_handler();
        let flags = msg.header().flags;
        if flags & SPECIAL_DELIVERY_FLAGS != 0 {
            return self.deliver_special(msg, flags);
        }
        self.count_processed(1);
        self.run_handler(msg)
    }

    /// [`Pe::deliver`] on a PE that records a trace, keeps stats or has a
    /// watchdog: the same steps, with the hooks, in a frame of its own (out
    /// of line, so that the untraced path keeps its registers; on a PE
    /// that records a trace and nothing else, one frame from the message
    /// to its handler, the hooks inlined).
    #[cold]
    #[inline(never)]
    fn deliver_traced(&self, msg: Message) -> bool {
        let _running = self.sched.enter_handler();
        let flags = msg.header().flags;
        if flags & SPECIAL_DELIVERY_FLAGS != 0 {
            return self.deliver_special(msg, flags);
        }
        self.count_processed(1);
        self.run_handler_traced(msg)
    }

    /// Runs the user handler `msg` names with the hooks of a PE that
    /// records a trace, keeps stats or has a watchdog.
    #[inline(always)]
    fn run_handler_traced(&self, mut msg: Message) -> bool {
        let index = msg.handler();
        let Some(ring) = self.trace.plain() else {
            return self.run_handler_watched(index, msg);
        };
        // The start is written before the handler is looked up: fewer
        // values are live across its clock read (a call, now and then),
        // and the frame saves fewer of them (6 instructions a message,
        // callgrind). An unknown handler's start is the last event before
        // the abort.
        let flow = take_flow(&mut msg);
        if flow.seq & SELF_SENT == 0 {
            ring.begin(index, flow);
        } else if flow.src == self.pe as u32 {
            // A message this PE sent itself: its send goes with this start.
            ring.begin_self_sent(index, flow.seq, msg.len());
        } else {
            // Marked by no PE of this job (only a PE's own messages are).
            ring.begin(index, NO_FLOW);
        }
        let Some(f) = self.handler(index) else {
            self.unknown_handler(&msg)
        };
        f.call(msg);
        ring.end();
        true
    }

    /// [`Pe::deliver_traced`]'s handler run on a PE that keeps stats or
    /// has a watchdog (a frame of its own: the plain path's stays small).
    #[inline(never)]
    fn run_handler_watched(&self, index: usize, mut msg: Message) -> bool {
        let Some(f) = self.handler(index) else {
            self.unknown_handler(&msg)
        };
        self.answer_watchdog_if_asked();
        let flow = if self.trace.records() {
            // Only a PE that records a trace and nothing else marks its
            // self-sends (`ring_writer`'s "Self-sends"); a mark here came
            // from no PE of this job.
            Some(take_flow(&mut msg))
                .filter(|f| f.seq & SELF_SENT == 0)
                .unwrap_or(NO_FLOW)
        } else {
            NO_FLOW
        };
        self.trace.begin(index, flow);
        f.call(msg);
        self.trace.end();
        true
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
            // A reduction contribution is kind 0 in the trace.
            let kind = if flags & crate::msg::message::FLAG_REDUCE != 0 {
                0
            } else {
                msg.header().handler
            };
            self.trace.begin_runtime(kind);
            self.dispatch.deliver(self, msg);
            self.trace.end();
            return true;
        }
        // A user message with flags of its own (posted from outside the
        // job, a CCS request): its run is recorded like any other.
        if self.trace.on() {
            return self.run_handler_traced(msg);
        }
        self.run_handler(msg)
    }

    /// Runs the user handler `msg` names; aborts if there is none.
    #[inline(always)]
    fn run_handler(&self, msg: Message) -> bool {
        let index = msg.handler();
        match self.handler(index) {
            Some(f) => {
                f.call(msg);
                true
            }
            None => self.unknown_handler(&msg),
        }
    }

    /// Aborts the job: `msg` names no registered handler.
    #[cold]
    fn unknown_handler(&self, msg: &Message) -> ! {
        crate::proc::exit::abort(&format!(
            "message for unknown handler {} (sent by PE {}); register it on every PE before messages for it arrive",
            msg.handler(),
            msg.src_pe()
        ))
    }

    fn unpack_bundle(&self, msg: Message) {
        let subs = self.unbundle_or_abort(msg);
        let mut stash = self.sched.stash.borrow_mut();
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
}

/// No user message's flow (`trace`'s "Flows").
const NO_FLOW: Flow = Flow { src: 0, seq: 0 };

/// The flow number `msg` carries, taken out of its header as it is about
/// to run (`trace`'s "Flows": so that a message kept and enqueued, or sent
/// on in a bundle, carries no stale number); none for a runtime message
/// or a shared buffer (whose header is not written).
#[inline(always)]
fn take_flow(msg: &mut Message) -> Flow {
    let src = msg.src_pe() as u32;
    match msg.owned_header_mut() {
        Some(h) if h.flags == 0 => Flow {
            src,
            seq: std::mem::take(&mut h.coll),
        },
        _ => NO_FLOW,
    }
}
