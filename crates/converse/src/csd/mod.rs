//! The scheduler (Csd): the loop that takes messages and runs their handlers,
//! and the scheduler queues that hold locally enqueued work.
//!
//! # Pass order
//!
//! Each step takes one message from the first non-empty of:
//! 1. messages that arrived from other PEs (after any set aside by
//!    [`deliver_specific_msg`] or unpacked from a bundle),
//! 2. messages the PE sent to itself,
//! 3. the node inbox (messages sent to the PE's node),
//! 4. the node queue or the PE's queue, whichever front has the more urgent
//!    priority (the PE's queue on ties).
//!
//! So arrived messages run before anything enqueued with `enqueue*`, as the
//! manual promises. The PE's queue holds messages and the tokens of awakened
//! user-level threads (`cth::Task`); taking a token resumes its thread.
//!
//! The waiting loops (forever, count, and the loop that runs while the main
//! flow is suspended) raise the idle-edge conditions (see `ccd`): the first
//! empty look raises begin-idle, the next one still-idle, and each looks
//! again before waiting, since callbacks may have made work or stopped the
//! scheduler; the first work found afterwards raises begin-busy. A busy PE
//! with timers or periodic callbacks counts its steps for `ccd::tick`.
//! When nothing is ready the PE idles: it spins briefly, then yields, then
//! parks until another PE gives it work or the job ends (see `csd::idle`).
//!
//! This file is the loop and the queues' public face; `deliver` takes work
//! in the pass order, waits when idle and runs handlers. The PE's scheduler
//! state (`SchedState`) is this module's: other subsystems reach it
//! through the `impl Pe` methods below.
//!
//! # Stopping
//!
//! [`exit_scheduler`] stops every scheduler call running on the PE (nested
//! ones included) once control is back in it, as Converse's `CsdStopFlag`
//! does: each call remembers the PE's stop count at entry and returns when it
//! has changed, so a scheduler started later (say, a nested poll in the same
//! handler) is not stopped by it. Called while no scheduler runs (typically
//! in a start function), it makes the next scheduler call return at once. When the job is
//! exiting, every scheduler call ends at its next step (PEs the runtime
//! started unwind out of their code).
//!
//! # Concurrency
//!
//! The scheduler runs on its PE's thread only; it may be re-entered from a
//! handler (a nested scheduler). It holds no borrow of PE state while a
//! handler runs.
mod answer;
pub mod cqs;
mod deliver;
use crate::cmi::send::is_user_message;
pub(crate) mod fifo;
pub(crate) mod idle;
pub(crate) mod shuffle;
pub(crate) mod state;
use shuffle::Shuffle;

/// A seed for `+randomized_msgq` made from `word` (scrambled, and kept
/// below 2^53 so that it prints and reads back in any tool).
pub(crate) fn seed_from(word: u64) -> u64 {
    shuffle::mix(word) >> 11
}

use std::sync::Arc;

use crate::csd::state::Task;
use crate::msg::Message;
use crate::msg::message::{FLAG_BUNDLE, FLAG_REDUCE, FLAG_SYSTEM};
use crate::rt::pe::{self, Pe};

/// Messages the network may put in a PE's released arrivals while that
/// PE polls it (see [`Pe::take_polled_arrival`]), and the largest it puts
/// there: others go the inbox's way, which counts them against the
/// receive budget. At most 1 MiB held outside the budget: a stream of
/// large messages taken that way unchecked (64 of 4 MiB) ran at a fifth
/// of its speed, in fresh pages.
const POLLED_ARRIVALS_MAX: usize = 64;
const POLLED_MESSAGE_MAX: usize = 16 << 10;

/// Flags of messages that are the runtime's, not a user handler's.
const RUNTIME_FLAGS: u32 = FLAG_SYSTEM | FLAG_REDUCE;
pub(crate) use crate::csd::state::SchedState;
pub use cqs::{BitPrio, Cqs, PrioError, PrioRef, Queueing};

impl SchedState {
    /// PE `pe`'s scheduler state (of `num_pes`); `msgq_seed`: the order
    /// of its arrivals is randomized (`+randomized_msgq`).
    pub(crate) fn new(msgq_seed: Option<u64>, pe: usize, num_pes: usize) -> SchedState {
        let shuffle = msgq_seed.map(|seed| Shuffle::new(seed, pe, num_pes));
        SchedState {
            self_queue: Default::default(),
            stash: Default::default(),
            ready: Default::default(),
            polled: Default::default(),
            queue: Default::default(),
            handler_depth: Default::default(),
            stop_gen: Default::default(),
            sched_depth: Default::default(),
            stop_pending: Default::default(),
            shuffle,
            served_outside: Default::default(),
        }
    }
}

impl Pe {
    /// Appends `msg` to this PE's self-send queue.
    #[inline(always)]
    pub(crate) fn push_self(&self, mut msg: Message) {
        if self.trace.on() {
            msg = self.trace_self_send(msg);
        }
        self.sched.self_queue.push(msg);
    }

    /// [`Pe::push_self`] for a user message this PE has just stamped as
    /// its own (`Message::stamp_user`: runtime flags clear, this PE its
    /// sender), which the trace then numbers without looking.
    #[inline(always)]
    pub(crate) fn push_self_user(&self, mut msg: Message) {
        if self.trace.on() {
            // Inlined (no call, no moves of the message in and out), out of
            // the untraced path's way.
            cold_path();
            msg = self.trace_user_self_send(msg);
        }
        self.sched.self_queue.push(msg);
    }

    /// Records a self-send in the trace (out of line: see `push_self`);
    /// the message goes in and out by value (in registers).
    #[cold]
    #[inline(never)]
    fn trace_self_send(&self, msg: Message) -> Message {
        let user = is_user_message(&msg) && msg.src_pe() == self.pe;
        self.trace_self_send_as(user, msg)
    }

    /// [`Pe::trace_self_send`] of a user message of this PE's
    /// ([`Pe::push_self_user`]).
    #[inline(always)]
    fn trace_user_self_send(&self, msg: Message) -> Message {
        debug_assert!(is_user_message(&msg) && msg.src_pe() == self.pe);
        self.trace_self_send_as(true, msg)
    }

    /// A self-send's record; `user`: a user message of this PE's, which
    /// gets a number.
    #[inline(always)]
    fn trace_self_send_as(&self, user: bool, mut msg: Message) -> Message {
        match self.trace.plain() {
            // A send inside a handler: no end waits to be written, and
            // this path calls nothing (no frame to save registers in).
            Some(ring) if !ring.holds_an_end() => {
                match msg.owned_header_mut().filter(|_| user) {
                    // Its send goes with its start (`ring_writer`'s
                    // "Self-sends"): one event, not two.
                    Some(header) => header.coll = ring.self_send_mark(),
                    None => ring.sent_now(self.pe, 0, msg.len()),
                }
                msg
            }
            _ => self.trace_self_send_other(user, msg),
        }
    }

    /// [`Pe::trace_self_send`] when an end waits, or the PE keeps stats or
    /// has a watchdog (a tail call: the plain path keeps no frame).
    #[inline(never)]
    fn trace_self_send_other(&self, user: bool, mut msg: Message) -> Message {
        self.trace_send_numbered(self.pe, false, user, &mut msg);
        msg
    }

    /// Records `msg` leaving for PE (or, if `node`, node) `dest` in the
    /// trace; `user`: a user message sent by this PE, whose number is
    /// written in its header (`trace`'s "Flows"; a shared buffer's header
    /// is not written: the send is recorded without a number).
    #[inline(never)]
    pub(crate) fn trace_send_numbered(
        &self,
        dest: usize,
        node: bool,
        user: bool,
        msg: &mut Message,
    ) {
        let len = msg.len();
        match msg.owned_header_mut().filter(|_| user) {
            Some(header) => header.coll = self.trace.sent(dest, node, true, len),
            None => {
                self.trace.sent(dest, node, false, len);
            }
        }
    }

    /// Hands back an arrived message that routing held back: it is taken
    /// before the inbox.
    #[inline]
    pub(crate) fn release_arrival(&self, msg: Message) {
        self.sched.ready.borrow_mut().push_back(msg);
    }

    /// A plain message the network received for PE `dest` of the job at
    /// `job` while this PE's thread polled it: kept in the released
    /// arrivals if it is for this PE, small, and the inbox is quiet (no
    /// value waits and no push is under way: it would pass them, and an
    /// earlier message from the same sender may be among them); given
    /// back otherwise. See `rt::network`, "Delivery to the polling PE".
    #[inline]
    pub(crate) fn take_polled_arrival(
        &self,
        job: *const (),
        dest: usize,
        msg: Message,
    ) -> Result<(), Message> {
        if dest != self.pe
            || msg.len() > POLLED_MESSAGE_MAX
            || !std::ptr::eq(Arc::as_ptr(&self.job) as *const (), job)
        {
            return Err(msg);
        }
        // Not `is_empty`: a push stalled between its ticket and its value
        // (another PE's send, say) hides the later tickets behind it, and
        // those may hold this sender's earlier messages (seen once in CI:
        // "message 390 arrived when 383 was next").
        // SAFETY: this is the PE's own thread, the inbox's single consumer.
        if !unsafe { self.shared().inbox.is_quiet() } {
            return Err(msg);
        }
        let Ok(mut ready) = self.sched.ready.try_borrow_mut() else {
            return Err(msg);
        };
        if ready.len() >= POLLED_ARRIVALS_MAX {
            return Err(msg);
        }
        ready.push_back(msg);
        self.sched.polled.set(true);
        Ok(())
    }

    /// True if the network put a message in this PE's released arrivals
    /// since the last call (while this PE polled it).
    #[inline]
    pub(crate) fn take_polled(&self) -> bool {
        self.sched.polled.replace(false)
    }

    /// Messages waiting in the PE's queue and its self-send queue (and
    /// those held for a random draw).
    pub(crate) fn sched_backlog(&self) -> usize {
        self.sched.queue.borrow().len()
            + self.sched.self_queue.len()
            + self.sched.shuffle.as_ref().map_or(0, Shuffle::len)
    }
}

/// Marks the path that calls it as rarely taken, for the layout of the
/// code around it (`std::hint::cold_path` once the minimum Rust version
/// has it).
#[cold]
#[inline(always)]
fn cold_path() {}

/// How many messages a scheduler call may deliver, and whether it waits.
#[derive(Clone, Copy)]
enum Budget<'a> {
    /// Until stopped; waits when idle.
    Forever,
    /// Until this many are delivered or stopped; waits when idle.
    Count(usize),
    /// Until nothing is ready; never waits.
    Poll,
    /// Until the predicate holds (checked before each step); waits when
    /// idle; not stopped by `exit_scheduler`. The loop that runs while the
    /// main flow is suspended (`cth`).
    Until(&'a dyn Fn() -> bool),
}

/// Runs the calling PE's scheduler loop per `budget`; returns how many
/// messages it delivered.
fn run(pe: &Pe, budget: Budget<'_>) -> usize {
    let delivered = run_steps(pe, budget);
    pe.trace.scheduler_leave();
    delivered
}

/// [`run`]'s loop.
fn run_steps(pe: &Pe, budget: Budget<'_>) -> usize {
    pe.check_handlers_once();
    let until = match budget {
        Budget::Until(done) => Some(done),
        _ => None,
    };
    if until.is_none() && pe.sched.stop_pending.replace(false) {
        return 0;
    }
    let _running = until.is_none().then(|| Running::enter(pe));
    // Threads resumed by this loop may switch among themselves directly,
    // unless deliveries are being counted.
    let direct = !matches!(budget, Budget::Count(_));
    let _direct = AllowDirect(pe, pe.replace_direct_yields(direct));
    let entry_gen = pe.sched.stop_gen.get();
    let mut delivered = 0;
    loop {
        match until {
            Some(done) => {
                if done() || pe.leave_if_exiting() {
                    return delivered;
                }
            }
            None => {
                if pe.sched.stop_gen.get() != entry_gen || pe.leave_if_exiting() {
                    return delivered;
                }
            }
        }
        if let Budget::Count(n) = budget
            && delivered >= n
        {
            return delivered;
        }
        // Arrived messages are taken apart from the queued tasks, not as
        // a `Task` too: wrapping the message in a `Task` on the stack
        // and reading it back out cost a store-forwarding stall per message
        // (two 8-byte stores read as one 16-byte load), a third of the
        // self-send loop's time.
        let ran = match pe.next_arrived() {
            Some(msg) => {
                if pe.is_idle() {
                    crate::ccd::end_idle(pe);
                }
                Some(pe.deliver(msg))
            }
            None => pe.run_next_queued(),
        };
        match ran {
            Some(counted) => {
                delivered += usize::from(counted);
                if pe.ccd_armed() {
                    crate::ccd::tick(pe);
                }
            }
            None => match budget {
                Budget::Poll => {
                    if pe.ccd_armed() && crate::ccd::poll(pe, std::time::Instant::now()) {
                        // Timers or periodic callbacks ran: they may have
                        // made work.
                        continue;
                    }
                    // Nothing to do: outside any handler this counts as an
                    // idle moment for quiescence detection.
                    if pe.qd_due() && pe.sched.handler_depth.get() == 0 {
                        crate::ccd::quiescence::on_idle(pe, false);
                    }
                    // A program that polls (user-calls-scheduler mode)
                    // answers the watchdog here.
                    pe.answer_watchdog_if_asked();
                    return delivered;
                }
                Budget::Forever | Budget::Count(_) | Budget::Until(_) => {
                    if !pe.is_idle() {
                        // Idle edge callbacks may make work: look again
                        // before waiting.
                        crate::ccd::begin_idle(pe);
                        continue;
                    }
                    // Once per wait: still-idle callbacks may make work or
                    // stop the scheduler, so look again after they ran.
                    if crate::ccd::still_idle(pe) {
                        continue;
                    }
                    pe.idle_wait();
                }
            },
        }
    }
}

/// Runs the PE's scheduler until `done()` holds, waiting when idle; the
/// loop that stands in for a suspended main flow.
pub(crate) fn run_until(pe: &Pe, done: &dyn Fn() -> bool) {
    run(pe, Budget::Until(done));
}

/// Sets up the scheduler's part of a new PE: the floors below it (a
/// suspending main flow, a one-sided wait) reach it through
/// `rt::reentry`.
pub(crate) fn init_pe(_me: &Pe) {
    crate::rt::reentry::install(crate::rt::reentry::Scheduler {
        run_until,
        run_count: schedule_count,
    });
}

/// Puts back the PE's `sched_allows_direct` when a scheduler call ends.
struct AllowDirect<'a>(&'a Pe, bool);

impl Drop for AllowDirect<'_> {
    fn drop(&mut self) {
        self.0.replace_direct_yields(self.1);
    }
}

/// Counts a running scheduler call for the PE while it lives (unwinding
/// included).
struct Running<'a>(&'a Pe);

impl<'a> Running<'a> {
    fn enter(pe: &'a Pe) -> Running<'a> {
        pe.sched.sched_depth.set(pe.sched.sched_depth.get() + 1);
        Running(pe)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0
            .sched
            .sched_depth
            .set(self.0.sched.sched_depth.get() - 1);
    }
}

/// Delivers messages until the scheduler is stopped with [`exit_scheduler`]
/// (or the job ends), waiting for more when there are none
/// (`CsdScheduleForever`). The scheduler most Converse programs use.
#[doc(alias = "CsdScheduleForever")]
pub fn schedule_forever() {
    run(&pe::current(), Budget::Forever);
}

/// Delivers messages until `n` have been delivered, waiting for more when
/// there are none (`CsdScheduleCount`). Returns 0 when all `n` were delivered,
/// or `n` minus the number delivered if the scheduler was stopped first.
#[doc(alias = "CsdScheduleCount")]
pub fn schedule_count(n: usize) -> usize {
    n - run(&pe::current(), Budget::Count(n))
}

/// Delivers messages until none is ready, then returns (`CsdSchedulePoll`).
#[doc(alias = "CsdSchedulePoll")]
pub fn schedule_poll() {
    run(&pe::current(), Budget::Poll);
}

/// `CsdScheduler(n)`: polls when `n == 0`, runs forever when `n < 0`, and
/// delivers `n` messages when `n > 0`. Returns what [`schedule_count`]
/// returns for `n > 0`, else 0.
#[doc(alias = "CsdScheduler")]
pub fn scheduler(n: i32) -> usize {
    match n {
        0 => {
            schedule_poll();
            0
        }
        n if n < 0 => {
            schedule_forever();
            0
        }
        n => schedule_count(n as usize),
    }
}

/// Makes every scheduler call running on this PE return once control is
/// back in it (`CsdExitScheduler`); if none runs, the next one started
/// returns at once. Scheduler calls started afterwards are not affected.
#[doc(alias = "CsdExitScheduler")]
pub fn exit_scheduler() {
    pe::with(|pe| {
        if pe.sched.sched_depth.get() > 0 {
            pe.sched.stop_gen.set(pe.sched.stop_gen.get() + 1);
        } else {
            pe.sched.stop_pending.set(true);
        }
    });
}

/// Delivers arrived messages only, ignoring the scheduler queues, until none
/// is left or `max` were delivered (`CmiDeliverMsgs`). Returns `max` minus the
/// number delivered.
#[doc(alias = "CmiDeliverMsgs")]
pub fn deliver_msgs(max: usize) -> usize {
    let pe = pe::current();
    pe.check_handlers_once();
    let mut delivered = 0;
    while delivered < max && !pe.leave_if_exiting() {
        match pe.next_arrived() {
            Some(msg) => delivered += usize::from(pe.deliver(msg)),
            None => break,
        }
    }
    max - delivered
}

/// Waits for the first arrived message whose handler is `handler`, runs it,
/// and returns once its handler returns (`CmiDeliverSpecificMsg`). Only
/// messages sent to this PE are searched; every other message stays queued, in
/// order, for the scheduler, and messages sent to the node stay available to
/// every PE of the node. Returns early only if the job is ending.
#[doc(alias = "CmiDeliverSpecificMsg")]
pub fn deliver_specific_msg(handler: usize) {
    let pe = pe::current();
    pe.check_handlers_once();
    // Arrived messages are pulled into the stash in arrival order and scanned
    // there; everything that is not the match stays for the scheduler.
    let mut scanned = 0;
    loop {
        if let Some(msg) = take_from_stash(&pe, handler, &mut scanned) {
            pe.deliver(msg);
            return;
        }
        if pe.leave_if_exiting() {
            return;
        }
        // Messages sent to this PE only: node messages are left to whichever
        // PE of the node schedules next.
        match pe.next_pe_arrival() {
            Some(msg) => pe.sched.stash.borrow_mut().push_back(msg),
            None => pe.idle_wait_for_pe_message(),
        }
    }
}

/// Removes and returns the first stashed message for `handler` at or after
/// position `scanned`, expanding bundles in place; advances `scanned` past
/// what did not match.
fn take_from_stash(pe: &Pe, handler: usize, scanned: &mut usize) -> Option<Message> {
    let mut stash = pe.sched.stash.borrow_mut();
    while *scanned < stash.len() {
        let i = *scanned;
        if stash[i].header().flags & FLAG_BUNDLE != 0 {
            let bundle = stash.remove(i).expect("index is in range");
            for (k, sub) in pe.unbundle_or_abort(bundle).into_iter().enumerate() {
                stash.insert(i + k, sub);
            }
            continue;
        }
        // Runtime messages (system kinds, reduction contributions) reuse the
        // handler field for their own numbers: never a match.
        if stash[i].handler() == handler && stash[i].header().flags & RUNTIME_FLAGS == 0 {
            return stash.remove(i);
        }
        *scanned += 1;
    }
    None
}

/// Puts `msg` in the calling PE's scheduler queue per `queueing`
/// (`CsdEnqueueGeneral`). It runs, like an arrived message, when it reaches
/// the front, after every arrived message.
#[doc(alias = "CsdEnqueueGeneral")]
pub fn enqueue_general(msg: Message, queueing: Queueing) {
    pe::with(|pe| {
        pe.count_created(1);
        // As in `enqueue_fifo`.
        let mut queue = pe.sched.queue.borrow_mut();
        queue.enqueue(Task::Message(msg), queueing)
    });
}

/// Enqueues `msg` FIFO at the middle priority (`CsdEnqueue`).
#[doc(alias = "CsdEnqueue")]
pub fn enqueue(msg: Message) {
    enqueue_fifo(msg)
}

/// Enqueues `msg` FIFO at the middle priority (`CsdEnqueueFifo`).
#[doc(alias = "CsdEnqueueFifo")]
pub fn enqueue_fifo(msg: Message) {
    pe::with(|pe| {
        pe.count_created(1);
        // The borrow first, then the `Task`: built after the last call that
        // may unwind, it goes from registers into the queue's slot (built
        // before, it waited on the stack and was copied out with a 16-byte
        // load of two 8-byte stores, a store-forwarding stall).
        let mut queue = pe.sched.queue.borrow_mut();
        queue.enqueue_fifo(Task::Message(msg))
    });
}

/// Enqueues `msg` LIFO at the middle priority (`CsdEnqueueLifo`).
#[doc(alias = "CsdEnqueueLifo")]
pub fn enqueue_lifo(msg: Message) {
    pe::with(|pe| {
        pe.count_created(1);
        // As in `enqueue_fifo`.
        let mut queue = pe.sched.queue.borrow_mut();
        queue.enqueue_lifo(Task::Message(msg))
    });
}

/// Puts `msg` in the node-level scheduler queue of the calling PE's node per
/// `queueing` (`CsdNodeEnqueueGeneral`); whichever PE of the node reaches it
/// first runs it.
#[doc(alias = "CsdNodeEnqueueGeneral")]
pub fn node_enqueue_general(msg: Message, queueing: Queueing) {
    pe::with(|pe| {
        pe.count_created(1);
        let node = &pe.job.node(pe.node);
        {
            let mut q = crate::sync::lock(&node.queue);
            q.enqueue(msg, queueing);
            node.queue_len
                .store(q.len(), std::sync::atomic::Ordering::Release);
        }
        pe.job.wake_node(pe.node);
    });
}

/// Enqueues `msg` FIFO in the node queue (`CsdNodeEnqueue`).
#[doc(alias = "CsdNodeEnqueue")]
pub fn node_enqueue(msg: Message) {
    node_enqueue_general(msg, Queueing::Fifo)
}

/// Enqueues `msg` FIFO in the node queue (`CsdNodeEnqueueFifo`).
#[doc(alias = "CsdNodeEnqueueFifo")]
pub fn node_enqueue_fifo(msg: Message) {
    node_enqueue_general(msg, Queueing::Fifo)
}

/// Enqueues `msg` LIFO in the node queue (`CsdNodeEnqueueLifo`).
#[doc(alias = "CsdNodeEnqueueLifo")]
pub fn node_enqueue_lifo(msg: Message) {
    node_enqueue_general(msg, Queueing::Lifo)
}

/// True when the calling PE's scheduler queue is empty (`CsdEmpty`).
#[doc(alias = "CsdEmpty")]
pub fn is_empty() -> bool {
    pe::with(|pe| pe.sched.queue.borrow().is_empty())
}

/// The number of entries in the calling PE's scheduler queue (`CsdLength`):
/// the messages put there with [`enqueue_general`] and its shorthands, and
/// the user-level threads awakened and waiting for their turn
/// ([`Thread::awaken`](crate::Thread::awaken)). As in Charm++, where
/// `CsdLength()` is the length of the PE's `CsdSchedQueue`, this is the queue
/// [`is_empty`] looks at: it leaves out messages that arrived from other PEs
/// or that the PE sent itself and the scheduler has not run yet, and the
/// node queue ([`node_enqueue_general`]). A load balancer reads it as the
/// PE's backlog of local work.
#[doc(alias = "CsdLength")]
pub fn length() -> usize {
    pe::with(|pe| pe.sched.queue.borrow().len())
}

/// The number of entries in the calling PE's node queue (`CsdNodeLength`):
/// what [`node_enqueue_general`] put there and no PE of the node has taken
/// yet. Other PEs of the node change it at any time.
#[doc(alias = "CsdNodeLength")]
pub fn node_length() -> usize {
    pe::with(|pe| {
        pe.job
            .node(pe.node)
            .queue_len
            .load(std::sync::atomic::Ordering::Acquire)
    })
}

/// True when the calling PE's node queue is empty (`CsdNodeEmpty`).
#[doc(alias = "CsdNodeEmpty")]
pub fn node_is_empty() -> bool {
    pe::with(|pe| {
        pe.job
            .node(pe.node)
            .queue_len
            .load(std::sync::atomic::Ordering::Acquire)
            == 0
    })
}
