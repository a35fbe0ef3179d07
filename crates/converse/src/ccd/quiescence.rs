//! Quiescence detection: tells a PE when no message is in flight or queued
//! anywhere in the job, no `call_fn_after` timer is pending and no handler
//! is running (the state in which nothing can happen any more without
//! outside input, periodic callbacks included). The manual's
//! `CcdQUIESCENCE` condition is raised from here.
//!
//! # Counting
//!
//! Every PE counts the messages it *creates* (each send, each PE a broadcast
//! or multicast reaches, each enqueue, each reduction contribution) and the
//! messages it *processes* (each delivery to a handler, each message the
//! runtime consumes itself) in two plain per-PE counters (`QdState::created`,
//! `QdState::processed`). A message is counted processed when its handler
//! starts, so a handler that is running and still sends shows up as new
//! creations. Detection's own messages carry `FLAG_NO_QD` and are not
//! counted. Pending timers count too (see "Timers").
//!
//! # Waves (the four-counter method)
//!
//! PE 0 runs the detection in *waves* down the spanning tree over PEs: each
//! PE passes the wave's request to its children, adds up their replies and
//! its own two counters (read when it replies), and replies to its parent —
//! but only when it is *idle*: its scheduler has nothing ready and is about
//! to wait, and no handler is running on it (not even one running a nested
//! scheduler). So a wave never reads a PE that is mid-handler, a PE that is
//! busy holds the wave up instead of answering it, and code that polls the
//! scheduler from inside a handler (or from a user-called scheduler with
//! `schedule_poll`) is never mistaken for an idle PE. A `schedule_poll` that
//! finds nothing to do, called outside any handler (a user-called scheduler
//! polling from its main code), answers too, since such a program may never
//! wait; but its answer is marked not *strict*: the runtime's own stall
//! check (`cmi::reduce`) trusts only waves that found every PE waiting in
//! its scheduler, because the code that polls may go on to compute and
//! send.
//!
//! PE 0 declares quiescence after two consecutive waves whose sums are all
//! equal: created₁ = processed₁ = created₂ = processed₂. The counters only
//! grow, so equal sums mean no PE's counters changed between its two reads;
//! at the moment wave 1 ended every PE's counters therefore held those values,
//! and created = processed then means nothing was in flight or queued (and
//! no timer was pending: see "Timers"). A wave that does not balance is
//! retried from wave 1 the next time PE 0 is idle, so detection never
//! competes with PE 0's own work.
//!
//! # Timers
//!
//! A pending `call_fn_after` timer is work the job will do with no message
//! in flight (its callback may send), so it counts as a message the PE sent
//! itself: created when it is set, processed when it fires (the Ccd
//! counters `timers_set`/`timers_fired`, which only grow, added to the PE's
//! two counters when a wave reads them; `qd_created()`/`qd_processed()` go
//! on counting messages only). With that, the argument above covers timers
//! as it stands: created = processed at the end of wave 1 means no timer
//! was pending either, and a timer set or fired between a PE's two reads
//! changes its counts.
//!
//! A PE with a pending timer also *holds* the wave, as a busy PE does: it
//! does not reply until its timers have fired (checked again at each idle
//! moment, since it keeps `qd_due` set). Soundness does not rest on this
//! (when a PE replies does not matter, only that it replies outside
//! handlers); it spares the waves that could not balance, which PE 0 would
//! otherwise retry back to back, on every PE, for as long as the timer
//! waits. Liveness: an idle PE with a timer waits no later than the timer's
//! due time (`ccd::next_deadline`), the timer then fires, and at the PE's
//! next idle moment with no timer pending it replies.
//!
//! Only timers count. Condition callbacks (periodic, idle-edge, signal and
//! user conditions, once or kept) do not hold detection: a kept periodic
//! callback would otherwise hold it forever, and a once callback on a
//! condition that is never raised, too. Quiescence means, as in Converse,
//! that no message (and, here, no timer) is outstanding; what a periodic
//! callback sends later is new work, like outside input. The runtime's
//! stall check is stricter (see `strict` above): it also distrusts PEs with
//! periodic, signal or still-idle callbacks.
//!
//! # Requests
//!
//! [`start_quiescence_detection`] may be called on any PE, any number of
//! times: each call's callback runs exactly once, on the calling PE, as a
//! handler, once the job has been quiescent after the call. A request that
//! comes in while a pair of waves runs is answered by the next pair (what
//! its PE did just before asking may have escaped the running pair).
//!
//! While a handler runs a nested scheduler, its PE never answers a wave, so
//! a callback is not called from inside such a scheduler: a handler that
//! waits for quiescence in a nested `schedule_forever` waits forever. Wait
//! in the outermost scheduler instead.
//!
//! The runtime also asks *once-only* questions (`check_once`): "is the job
//! quiescent right now?". They are answered after the next wave pair, yes or
//! no (the pair waits for pending timers like any other), and never keep
//! detection running by themselves. The reduction stall check
//! (`cmi::reduce`) uses them.
//!
//! # Concurrency
//!
//! The per-PE state is touched only by the PE's thread; detection is driven
//! by system messages (`cmi::system`).

use crate::ccd::state::{FirstWave, QuietWatch, Requester, Root, Wave};
use crate::msg::message::Message;
use crate::msg::message::MessageRaw as _;
use crate::msg::system::{self, Kind, Reader};
use crate::proc::spantree::SpanningTree;
use crate::rt::pe::{self, Pe};

/// Quiescence detection callbacks waiting on `pe` (for the watchdog),
/// but PE 0's own look for a quiescent job ([`check_quiet`]): that one is
/// the watchdog's, not work (pending timers hold its answer).
pub(crate) fn waiting_callbacks(pe: &Pe) -> usize {
    let own = usize::from(pe.qd.quiet.get() == QuietWatch::Asking);
    pe.qd.protocol.borrow().callbacks.len().saturating_sub(own)
}

/// Calls `callback` on this PE, as a handler, once the job is quiescent: no
/// message in flight or queued on any PE, no [`call_fn_after`] timer pending
/// and no handler running (`CmiStartQD`; what raises `CcdQUIESCENCE`). Each
/// call is answered once.
///
/// Unlike Charm++, pending timers hold the answer (a timer that will send
/// work is outstanding work; see [`call_fn_after`] for watchdogs and
/// heartbeats). Condition callbacks do not: a kept periodic callback that
/// stays registered forever does not keep the answer from coming.
///
/// [`call_fn_after`]: crate::call_fn_after
#[doc(alias = "CmiStartQD")]
#[doc(alias = "CQdRegisterCallback")]
pub fn start_quiescence_detection(callback: impl FnOnce() + 'static) {
    pe::with(|pe| request(pe, Box::new(|_quiescent| callback()), false))
}

/// Asks whether the job is quiescent now: `callback(answer)` runs on `pe`
/// after the next pair of waves. Does not keep detection going.
pub(crate) fn check_once(pe: &Pe, callback: Box<dyn FnOnce(bool)>) {
    request(pe, callback, true)
}

/// How long PE 0 may sit idle before it asks whether the job is
/// quiescent with no exit pending: the watchdog's period, under
/// `++watchdog` only, until it has said so once (see the watchdog's
/// "A job left quiescent").
pub(crate) fn quiet_timeout(pe: &Pe) -> Option<std::time::Duration> {
    if pe.pe != 0 || pe.qd.quiet.get() != QuietWatch::Watching {
        return None;
    }
    pe.job.watchdog.as_ref().map(|w| w.period())
}

/// PE 0 sat idle for the watchdog's period: asks whether the job is
/// quiescent, and if it is, with no exit pending, says so in one line.
pub(crate) fn check_quiet(pe: &Pe) {
    pe.qd.quiet.set(QuietWatch::Asking);
    check_once(
        pe,
        Box::new(|quiescent| {
            let pe = pe::current();
            if !quiescent || pe.job.is_exiting() {
                pe.qd.quiet.set(QuietWatch::Watching);
                return;
            }
            pe.qd.quiet.set(QuietWatch::Told);
            let secs = pe
                .job
                .watchdog
                .as_ref()
                .map_or(0.0, |w| w.period().as_secs_f64());
            crate::proc::io::error(format_args!(
                "converse: the job has been quiescent for {secs} s (++watchdog {secs}): no message \
                 or timer is pending and no PE has called exit; it waits for work from outside \
                 (CCS), or an exit is missing (the job goes on)\n"
            ));
        }),
    );
}

fn request(pe: &Pe, callback: Box<dyn FnOnce(bool)>, once: bool) {
    let token = {
        let mut qd = pe.qd.protocol.borrow_mut();
        let token = qd.next_token;
        qd.next_token += 1;
        qd.callbacks.insert(token, callback);
        token
    };
    let mut msg = system::message(Kind::QdStart, &[token, u64::from(once)], &[]);
    msg.set_src_pe(pe.pe);
    pe.push_to_pe(0, msg);
}

/// Counts `n` messages as created on this PE (`CQdCreate`). For layers that
/// hold work outside the runtime's queues: quiescence is not declared until
/// as many are counted processed.
#[doc(alias = "CQdCreate")]
pub fn qd_create(n: usize) {
    pe::with(|pe| pe.count_created(n))
}

/// Counts `n` messages as processed on this PE (`CQdProcess`).
#[doc(alias = "CQdProcess")]
pub fn qd_process(n: usize) {
    pe::with(|pe| pe.count_processed(n))
}

/// Messages created on this PE so far (`CQdGetCreated`).
#[doc(alias = "CQdGetCreated")]
pub fn qd_created() -> u64 {
    pe::with(|pe| pe.qd.created.get())
}

/// Messages processed on this PE so far (`CQdGetProcessed`).
#[doc(alias = "CQdGetProcessed")]
pub fn qd_processed() -> u64 {
    pe::with(|pe| pe.qd.processed.get())
}

fn tree(pe: &Pe) -> SpanningTree {
    SpanningTree::new(pe.job.topo.num_pes(), pe.branch(), 0)
}

/// Handles one of detection's messages on `pe`.
/// Registers quiescence detection's messages in `pe`'s dispatch table.
pub(crate) fn init_pe(pe: &Pe) {
    for kind in [Kind::QdStart, Kind::QdRequest, Kind::QdReply, Kind::QdDone] {
        pe.dispatch.on(kind, on_message);
    }
}

pub(crate) fn on_message(pe: &Pe, kind: Kind, msg: Message) {
    let mut r = Reader::new(&msg, "quiescence detection message");
    match kind {
        Kind::QdStart => {
            if pe.pe != 0 {
                r.malformed(&format!("a detection request reached PE {}", pe.pe));
            }
            let (token, once) = (r.word(), r.word() != 0);
            let start = {
                let mut qd = pe.qd.protocol.borrow_mut();
                let joined_after = qd.root.next_wave;
                qd.root.requesters.push(Requester {
                    pe: msg.src_pe(),
                    token,
                    once,
                    joined_after,
                });
                !std::mem::replace(&mut qd.root.running, true)
            };
            if start {
                start_wave(pe);
            }
        }
        Kind::QdRequest => {
            let id = r.word();
            let children: Vec<usize> = tree(pe).children(pe.pe).collect();
            pe.qd.protocol.borrow_mut().wave = Some(Wave {
                id,
                waiting: children.len(),
                created: 0,
                processed: 0,
                strict: true,
            });
            for child in children {
                send(pe, child, Kind::QdRequest, &[id]);
            }
            pe.qd.due.set(true);
        }
        Kind::QdReply => {
            let (id, created, processed) = (r.word(), r.word(), r.word());
            let strict = r.word() != 0;
            {
                let mut qd = pe.qd.protocol.borrow_mut();
                match &mut qd.wave {
                    Some(w) if w.id == id && w.waiting > 0 => {
                        w.waiting -= 1;
                        w.created += created;
                        w.processed += processed;
                        w.strict &= strict;
                    }
                    _ => {
                        drop(qd);
                        r.malformed(&format!(
                            "a reply to wave {id}, which PE {} is not collecting",
                            pe.pe
                        ));
                    }
                }
            }
            pe.qd.due.set(true);
        }
        Kind::QdDone => {
            let (token, quiescent) = (r.word(), r.word() != 0);
            let callback = pe.qd.protocol.borrow_mut().callbacks.remove(&token);
            match callback {
                Some(f) => f(quiescent),
                None => r.malformed(&format!("PE {} has no detection request {token}", pe.pe)),
            }
        }
        _ => unreachable!("route only passes detection kinds"),
    }
}

fn send(pe: &Pe, dest: usize, kind: Kind, words: &[u64]) {
    let mut msg = system::message(kind, words, &[]);
    msg.set_src_pe(pe.pe);
    pe.push_to_pe(dest, msg);
}

/// PE 0 starts a wave.
fn start_wave(pe: &Pe) {
    let id = {
        let mut qd = pe.qd.protocol.borrow_mut();
        qd.root.next_wave += 1;
        qd.root.next_wave
    };
    send(pe, 0, Kind::QdRequest, &[id]);
}

/// Called when `pe` is idle with no handler running and detection has asked
/// to be told (`QdState::due`): replies to the wave if every child has and no
/// timer is pending here (concluding it, on PE 0), or starts the retry of a
/// failed wave. Returns
/// true if it sent anything (then the caller polls again instead of
/// waiting: the message may be to itself).
///
/// `strict`: the PE is about to wait in its scheduler (truly idle), rather
/// than returning from an empty `schedule_poll` to code that may go on
/// computing. User requests accept either; the runtime's stall check needs
/// every PE strictly idle.
pub(crate) fn on_idle(pe: &Pe, strict: bool) -> bool {
    pe.qd.due.set(false);
    // A PE with periodic, signal or still-idle callbacks may make work
    // without any message: not idle for the stall check. (One with a
    // pending timer does not reply at all.)
    let strict = strict && !crate::ccd::expects_work(pe);
    if maybe_reply(pe, strict) {
        return true;
    }
    let retry = std::mem::take(&mut pe.qd.protocol.borrow_mut().root.retry);
    if retry {
        start_wave(pe);
    }
    retry
}

/// Replies to the parent (or concludes, on PE 0) if every child has.
/// A PE with a pending timer holds the wave instead (see "Timers" in the
/// module comment) and asks to be called again at its next idle moment.
fn maybe_reply(pe: &Pe, strict_here: bool) -> bool {
    let (id, created, processed, strict) = {
        let mut qd = pe.qd.protocol.borrow_mut();
        match &qd.wave {
            Some(w) if w.waiting == 0 => {}
            _ => return false,
        }
        if crate::ccd::timers_pending(pe) {
            pe.qd.due.set(true);
            return false;
        }
        let w = qd.wave.take().expect("checked above");
        let (timers_set, timers_fired) = crate::ccd::timer_counts(pe);
        (
            w.id,
            w.created + pe.qd.created.get() + timers_set,
            w.processed + pe.qd.processed.get() + timers_fired,
            w.strict && strict_here,
        )
    };
    match tree(pe).parent(pe.pe) {
        Some(parent) => send(
            pe,
            parent,
            Kind::QdReply,
            &[id, created, processed, u64::from(strict)],
        ),
        None => conclude(pe, created, processed, strict),
    }
    true
}

/// PE 0 has a wave's sums.
fn conclude(pe: &Pe, created: u64, processed: u64, strict: bool) {
    /// What PE 0 does next.
    enum Next {
        /// Quiescent: answer these yes (the once-only ones only if every
        /// PE was strictly idle in both waves); start a new pair for the
        /// requests that came in during this one, if any.
        Quiescent {
            answer: Vec<Requester>,
            strict: bool,
            again: bool,
        },
        /// The first wave balanced: run the second.
        SecondWave,
        /// Not quiescent: answer the once-only requests no, and retry if
        /// anyone else is waiting.
        Retry {
            answer_no: Vec<Requester>,
            again: bool,
        },
    }
    let next = {
        let mut qd = pe.qd.protocol.borrow_mut();
        let root = &mut qd.root;
        let id = root.next_wave;
        match root.first_wave.take() {
            Some(first)
                if (first.created, first.processed) == (created, processed)
                    && created == processed =>
            {
                let (answer, later): (Vec<_>, Vec<_>) = std::mem::take(&mut root.requesters)
                    .into_iter()
                    .partition(|r| r.joined_after < first.id);
                root.requesters = later;
                root.running = !root.requesters.is_empty();
                Next::Quiescent {
                    answer,
                    strict: first.strict && strict,
                    again: root.running,
                }
            }
            Some(_) => fail(root),
            None if created == processed => {
                root.first_wave = Some(FirstWave {
                    id,
                    created,
                    processed,
                    strict,
                });
                Next::SecondWave
            }
            None => fail(root),
        }
    };
    fn fail(root: &mut Root) -> Next {
        let (once, persistent): (Vec<_>, Vec<_>) = std::mem::take(&mut root.requesters)
            .into_iter()
            .partition(|r| r.once);
        root.requesters = persistent;
        root.running = !root.requesters.is_empty();
        Next::Retry {
            answer_no: once,
            again: root.running,
        }
    }
    match next {
        Next::Quiescent {
            answer,
            strict,
            again,
        } => {
            for r in answer {
                let yes = !r.once || strict;
                send(pe, r.pe, Kind::QdDone, &[r.token, u64::from(yes)]);
            }
            if again {
                start_wave(pe);
            }
        }
        Next::SecondWave => start_wave(pe),
        Next::Retry { answer_no, again } => {
            for r in answer_no {
                send(pe, r.pe, Kind::QdDone, &[r.token, 0]);
            }
            if again {
                // Try again once PE 0 has nothing better to do.
                pe.qd.protocol.borrow_mut().root.retry = true;
                pe.qd.due.set(true);
            }
        }
    }
}

impl Pe {
    /// Counts `n` messages created by this PE, for quiescence detection.
    #[inline]
    pub fn count_created(&self, n: usize) {
        self.qd.created.set(self.qd.created.get() + n as u64);
    }

    /// Counts `n` messages this PE processed, for quiescence detection.
    #[inline]
    pub fn count_processed(&self, n: usize) {
        self.qd.processed.set(self.qd.processed.get() + n as u64);
    }

    /// Quiescence detection waits for this PE's next idle moment outside
    /// every handler ([`on_idle`]).
    #[inline]
    pub(crate) fn qd_due(&self) -> bool {
        self.qd.due.get()
    }
}
