//! The send path of a PE: user sends to a PE or a node (stamped and counted),
//! the runtime's own pushes (as they are), sends from a message's own bytes
//! to another process, flow control, and writing what was posted to the
//! network.
//!
//! # Invariants
//!
//! - A user message leaves stamped (`stamp_user_message`): sender set, size
//!   field true, runtime flags clear; and counted once as created for
//!   quiescence detection.
//! - Every push to a PE inbox of this process is followed by a wake-up of
//!   that PE; every push to a node inbox by a wake-up of the node.
//! - `net_posted` is set whenever a message to another process was posted
//!   and not yet written; whatever next looks for work (`csd::deliver`) or
//!   polls the network writes it.
//! - Flow control never nests: a send that waits delivers arrived messages,
//!   and the sends their handlers make do not wait (`send_waiting`).
//!
//! # Concurrency
//!
//! Runs on the sending PE's thread only; the state here (`SendState`) is
//! that PE's. Inboxes are multi-producer (see `rt::job`).
use std::cell::Cell;

use crate::msg::message::Message;
use crate::msg::message::MessageRaw as _;
use crate::rt::network::BORROWED_SEND_MIN;
use crate::rt::pe::Pe;
use crate::rt::persistent::FLAG_PERSISTENT;

impl Pe {
    /// Sends `msg` (a user message, header to be stamped) to PE `dest`,
    /// counting it for quiescence detection.
    ///
    /// Always inlined: a self-send is the runtime's cheapest message, and
    /// left to the inliner this small body became a call of its own when
    /// unrelated code grew (10 instructions a message, callgrind).
    #[inline(always)]
    pub fn send_to_pe(&self, dest: usize, msg: Message) {
        if dest == self.pe {
            self.send_to_self(msg);
            return;
        }
        self.send_to_other_pe(dest, msg);
    }

    /// [`Pe::send_to_pe`] to this PE itself: no range check (it is a PE),
    /// no persistent channel (those name PEs of other processes), no flow
    /// control (a send to itself never waits). Every `CsdEnqueue`-like
    /// pattern of a message-driven program comes through here.
    ///
    /// Runs no user code and never ends the PE (what
    /// `rt::pe::with_uncounted` asks of its callers).
    #[inline(always)]
    pub(crate) fn send_to_self(&self, mut msg: Message) {
        msg.stamp_user(self.pe);
        self.count_created(1);
        self.push_self_user(msg);
    }

    /// [`Pe::send_to_pe`] to another PE.
    pub(crate) fn send_to_other_pe(&self, dest: usize, mut msg: Message) {
        self.check_pe(dest, "send to");
        self.stamp_user_message(&mut msg);
        self.count_created(1);
        match self.send.persistent.channel_for(dest, msg.len()) {
            // A ready handle names a PE of another process.
            Some(channel) => {
                if self.trace.on() {
                    self.trace_send_numbered(dest, false, true, &mut msg);
                }
                if self.job.remote().send_on_channel(dest, channel, msg) {
                    self.send.net_posted.set(true);
                }
            }
            None => self.push_to_pe(dest, msg),
        }
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
            // On a persistent channel if one is in use for it.
            let (flags, tag) = match self.send.persistent.channel_for(dest, msg.len()) {
                Some(channel) => (FLAG_PERSISTENT, channel as usize),
                None => (0, dest),
            };
            if self.job.local_pe(dest).is_none()
                && self.send_borrowed(flags, self.job.topo.node_of(dest), tag, msg, (dest, false))
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
                && self.send_borrowed(crate::rt::network::FLAG_NODE, node, node, msg, (node, true))
            {
                self.throttle(Congested::Node(node));
                return;
            }
        }
        self.send_to_node(node, msg.to_owned_copy());
    }

    /// Sends a copy of `msg` to `tag` on another process's node `node`
    /// from `msg`'s own bytes, if that node's module gathers; false (nothing
    /// sent) if not. `to` names the copy's destination for the trace: a
    /// PE, or a node if its flag is set.
    fn send_borrowed(
        &self,
        flags: u8,
        node: usize,
        tag: usize,
        msg: &Message,
        to: (usize, bool),
    ) -> bool {
        let net = self.job.remote();
        if !net.gathers_to(node) {
            return false;
        }
        self.count_created(1);
        // A copy of a user message (`to`: its PE, or its node), numbered
        // in the header the network writes.
        let flow = if self.trace.on() {
            self.trace.sent(to.0, to.1, true, msg.len())
        } else {
            0
        };
        if net.send_borrowed(tag, flags, node, self.pe, msg, flow) {
            self.send.net_posted.set(true);
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
    #[inline]
    fn throttle(&self, target: Congested) {
        if self.congested(target) && !self.send.waiting.get() {
            self.wait_for_room(target);
        }
    }

    /// True if too much is queued for `target` (PE `dest`'s inbox in this
    /// process, or the network to another process): what flow control
    /// waits on, and what [`would_block`](crate::would_block) tells a
    /// handler that floods.
    #[inline]
    pub(crate) fn congested(&self, target: Congested) -> bool {
        match target {
            Congested::Pe(dest) if dest == self.pe => false,
            Congested::Pe(dest) => match self.job.local_pe(dest) {
                Some(shared) => shared.inbox.backlog() > INBOX_HIGH_WATER,
                None => self
                    .job
                    .remote()
                    .over_high_water(self.job.topo.node_of(dest)),
            },
            // A node queue of this process: node work, any PE takes it.
            Congested::Node(node) if self.job.local_node(node).is_some() => false,
            Congested::Node(node) => self.job.remote().over_high_water(node),
        }
    }

    /// The waiting part of [`throttle`](Pe::throttle), once `target` is
    /// congested.
    #[cold]
    fn wait_for_room(&self, target: Congested) {
        // Has enough of what waits for the target gone?
        let below: &dyn Fn() -> bool = match target {
            Congested::Pe(dest) => match self.job.local_pe(dest) {
                Some(shared) => &move || shared.inbox.backlog() <= INBOX_LOW_WATER,
                None => {
                    let node = self.job.topo.node_of(dest);
                    let net = self.job.remote();
                    &move || net.below_low_water(node)
                }
            },
            Congested::Node(node) => {
                let net = self.job.remote();
                &move || net.below_low_water(node)
            }
        };
        if !self.cth.current().is_main_flow() {
            while !below() && !self.job.is_exiting() {
                crate::cth::yield_now();
            }
            return;
        }
        if self.sched.handler_depth() > 0 {
            return;
        }
        self.send.waiting.set(true);
        let _reset = ResetOnDrop(&self.send.waiting);
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
    #[inline]
    pub fn stamp_user_message(&self, msg: &mut Message) {
        msg.stamp_user(self.pe);
    }

    /// Sends a runtime message (a system message, as built): stamped with
    /// this PE as its sender and counted for quiescence detection.
    pub(crate) fn send_runtime(&self, dest: usize, mut msg: Message) {
        msg.set_src_pe(self.pe);
        self.count_created(1);
        self.push_to_pe(dest, msg);
    }

    /// Puts `msg` in PE `dest`'s inbox (its self-send queue if `dest` is this
    /// PE) as it is: no stamping, no counting, no range check. The runtime's
    /// own sends and forwards use it.
    pub fn push_to_pe(&self, dest: usize, mut msg: Message) {
        if dest == self.pe {
            self.push_self(msg);
        } else {
            if self.trace.on() {
                self.trace_send(dest, false, &mut msg);
            }
            match self.job.local_pe(dest) {
                Some(target) => {
                    target.inbox.push(msg);
                    target.idle.wake();
                }
                None => {
                    if self.job.remote().send_to_pe(dest, msg) {
                        self.send.net_posted.set(true);
                    }
                }
            }
        }
    }

    /// Records `msg` leaving for PE (or node) `dest` in the trace; out of
    /// line, so the untraced send path keeps its registers.
    #[cold]
    #[inline(never)]
    fn trace_send(&self, dest: usize, node: bool, msg: &mut Message) {
        let user = is_user_message(msg) && msg.src_pe() == self.pe;
        self.trace_send_numbered(dest, node, user, msg);
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
    pub fn push_to_node(&self, node: usize, mut msg: Message) {
        if self.trace.on() {
            self.trace_send(node, true, &mut msg);
        }
        match self.job.local_node(node) {
            Some(shared) => {
                shared.inbox.push(msg);
                self.job.wake_node(node);
            }
            None => {
                if self.job.remote().send_to_node(node, msg) {
                    self.send.net_posted.set(true);
                }
            }
        }
    }

    /// An idle PE of a multi-process job takes what arrived from the network
    /// itself (see `NetModule::try_progress`). Returns true if a message
    /// for this PE went straight to its released arrivals (see
    /// `Pe::take_polled_arrival`); what else it delivered shows in the
    /// inboxes the caller looks at next.
    #[inline]
    pub fn poll_network(&self) -> bool {
        if let Some(net) = &self.job.net {
            self.flush_posted();
            if net.try_progress() {
                self.send.net_moved.set(true);
            }
            return self.take_polled();
        }
        false
    }

    /// Whether a poll of the network moved bytes since the last call.
    pub(crate) fn take_net_moved(&self) -> bool {
        self.send.net_moved.replace(false)
    }

    /// Writes what this PE posted to other processes, if anything: whatever
    /// looks for work calls it first.
    #[inline]
    pub(crate) fn flush_posted(&self) {
        if self.send.net_posted.get() {
            self.flush_network();
        }
    }

    /// Writes the messages this PE posted to other processes.
    #[cold]
    fn flush_network(&self) {
        self.send.net_posted.set(false);
        self.job.remote().flush();
    }

    /// This PE stops polling the network and parks: the network's progress
    /// thread takes over the watch.
    pub(crate) fn parking(&self) {
        if let Some(net) = &self.job.net {
            net.pe_parking();
        }
    }
}

/// What a send may have to wait for (see `Pe::throttle`).
#[derive(Clone, Copy)]
pub(crate) enum Congested {
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

/// True for a user message (one a program sent, runtime flags clear): the
/// messages the trace numbers and draws arrows for.
#[inline]
pub(crate) fn is_user_message(m: &Message) -> bool {
    m.header().flags == 0
}
