//! A PE's writing side of its trace ring: what it folds into a handler's
//! start, which handler starts it times, and the numbers of the user
//! messages it sends.
//!
//! # Folding
//!
//! In a busy PE, a message is a send, a handler start and a handler end.
//! The end is untimed and written in the order it happens, so the writer
//! holds it back until the PE writes its next event: if that is a handler
//! start, the end becomes a flag of it (`event::Event::Begin`'s
//! `closes`); otherwise it is written as an event of its own just before.
//! The ring's order of events is the order they happened either way. The
//! start also carries the flow number of the message it runs (`trace`'s
//! "Flows"), so a message costs two events: its send and its start.
//!
//! # Self-sends
//!
//! A message a PE sends itself while no end is held (a handler sending
//! work to its own PE) costs one event, not two: its send is not written;
//! the message's header (`coll`) takes the ring's count of events at the
//! send instead, flagged (`event::SELF_SENT`), and the handler start that
//! runs it is an `Event::SelfSentBegin` saying how many events back the
//! send was and how long the message is. The process's part of the trace
//! has the send and the start back (`event::expand_self_sends`). A
//! self-sent message that never runs (the PE ended first) leaves no send
//! in the trace.
//!
//! # Grouped timing
//!
//! A clock read costs more than a short handler (about 20 ns on this
//! project's virtual machine, where a self-send takes 16), so a PE times
//! its handler starts in groups: a timed start is followed by up to
//! `allowance` untimed ones, and the next clock read, whatever event it
//! is for, closes the group. The file's writer spreads a group's untimed
//! starts evenly between its two clock reads. The allowance comes from the
//! group before: as many starts as, at that group's mean, take about
//! [`GROUP_TICKS`] (about a microsecond), at most `max_group - 1`. A PE
//! whose handlers take a microsecond or more times every start; one whose
//! handlers take nanoseconds reads the clock about once a microsecond; a
//! start is then off by less than its group's span, unless a group held a
//! handler much longer than its predecessors, which the file's writer marks
//! (`chrome`). After any clock read that is not a handler's start (idle,
//! a thread switch, a span, a mark) the next start is timed.
//!
//! # Invariants
//!
//! - Only the PE's thread uses a `RingWriter` (it is `!Sync`: `Cell`s);
//!   the ring it writes is read by any thread (`ring`).
//! - Every write of an event other than a handler start (and the clock
//!   reading just before a timed one) writes a pending end first, so the
//!   ring never holds an event out of order.
use std::cell::Cell;
use std::sync::Arc;

use super::clock;
use super::event::{self, Event, Flow};
use super::ring::Ring;

/// About a microsecond of clock ticks: the span a group of handler starts
/// is sized to (on x86-64 a tick is the time-stamp counter's, 2–4 GHz on
/// the machines this runs on; elsewhere a nanosecond).
pub(crate) const GROUP_TICKS: u64 = if cfg!(target_arch = "x86_64") {
    3000
} else {
    1000
};

/// Handler starts a group holds at most, unless told otherwise.
pub(crate) const MAX_GROUP: u32 = 64;

pub(crate) struct RingWriter {
    ring: Arc<Ring>,
    /// The innermost handler returned, and nothing was written since.
    end_pending: Cell<bool>,
    /// Handler starts that may still go untimed in the current group.
    untimed_left: Cell<u32>,
    /// The current group's clock reading, and the allowance it began with
    /// (its starts so far are one more than that less `untimed_left`).
    group_t: Cell<u64>,
    group_allowance: Cell<u32>,
    /// A group is open (the last clock read was for a handler start).
    group_open: Cell<bool>,
    /// How many untimed starts the next group may have.
    allowance: Cell<u32>,
    /// A group's largest size (1: every start timed).
    max_group: u32,
    /// The number of the last user message this PE sent (0: none yet).
    last_sent: Cell<u32>,
    /// The place (ring count, masked) of the last self-send mark, and that
    /// mark's order among the self-sends made there ("Self-sends").
    self_sends_at: Cell<u32>,
    self_sends_order: Cell<u32>,
}

impl RingWriter {
    /// Writes `ring`, grouping at most `max_group` handler starts per clock
    /// read (1: every start is timed).
    pub fn new(ring: Arc<Ring>, max_group: u32) -> RingWriter {
        RingWriter {
            ring,
            end_pending: Cell::new(false),
            untimed_left: Cell::new(0),
            group_t: Cell::new(0),
            group_allowance: Cell::new(0),
            group_open: Cell::new(false),
            allowance: Cell::new(0),
            max_group: max_group.max(1),
            last_sent: Cell::new(0),
            // No place: the first mark starts its order at 0.
            self_sends_at: Cell::new(u32::MAX),
            self_sends_order: Cell::new(0),
        }
    }

    /// The ring written.
    #[cfg(all(test, not(loom)))]
    pub fn ring(&self) -> &Arc<Ring> {
        &self.ring
    }

    /// A message of `len` bytes leaves for PE (or, if `node`, node)
    /// `dest`; `user`: a user message sent by this PE, which gets the next
    /// number. Returns its number (0: none), for its header.
    #[inline(always)]
    pub fn sent(&self, dest: usize, node: bool, user: bool, len: usize) -> u32 {
        let seq = self.number(user);
        self.push_send(dest, node, seq, len);
        seq
    }

    /// The number of the next user message this PE sends if `user`, else
    /// 0 (none); [`RingWriter::push_send`] writes its send.
    #[inline(always)]
    pub fn number(&self, user: bool) -> u32 {
        if !user {
            return 0;
        }
        // 0 is no number: skipped when the count wraps, below the
        // self-send flag (`event::SELF_SENT`).
        let seq = (self.last_sent.get().wrapping_add(1) & !event::SELF_SENT).max(1);
        self.last_sent.set(seq);
        seq
    }

    /// Writes the send of message `seq` (see [`RingWriter::number`]).
    #[inline(always)]
    pub fn push_send(&self, dest: usize, node: bool, seq: u32, len: usize) {
        self.push(send(dest, node, seq, len));
    }

    /// [`RingWriter::push_send`] when no end waits to be written
    /// ([`RingWriter::holds_an_end`]): no test, no call.
    #[inline(always)]
    pub fn push_send_now(&self, dest: usize, node: bool, seq: u32, len: usize) {
        debug_assert!(!self.holds_an_end());
        let [a, b] = send(dest, node, seq, len).encode();
        self.ring.push(a, b);
    }

    /// The mark a message this PE sends itself carries in its header's
    /// `coll` instead of a number when its send is not written ("Self-sends";
    /// only while no end is held).
    #[inline(always)]
    pub fn self_send_mark(&self) -> u32 {
        debug_assert!(!self.holds_an_end());
        let place = self.ring.written_by_writer() as u32 & event::SELF_SENT_PLACE;
        let order = if self.self_sends_at.get() == place {
            (self.self_sends_order.get() + 1).min(event::SELF_SENT_ORDER_MAX)
        } else {
            self.self_sends_at.set(place);
            0
        };
        self.self_sends_order.set(order);
        event::SELF_SENT | (place << event::SELF_SENT_ORDER_BITS) | order
    }

    /// Whether a handler's end waits to be written ("Folding").
    #[inline(always)]
    pub fn holds_an_end(&self) -> bool {
        self.end_pending.get()
    }

    /// Writes `e`, an event other than a handler's start or end (a send;
    /// a timed event through [`RingWriter::push_timed`]). Inlined whole: the caller's event is then encoded at
    /// compile time, not matched at run time; a pending end is written by
    /// a tail call, so the caller's frame stays small.
    #[inline(always)]
    pub fn push(&self, e: Event) {
        let [a, b] = e.encode();
        if self.end_pending.get() {
            return self.flush_then_push(a, b);
        }
        self.ring.push(a, b);
    }

    /// Writes the pending end, then the event `a, b`.
    #[cold]
    #[inline(never)]
    fn flush_then_push(&self, a: u64, b: u64) {
        self.flush();
        self.ring.push(a, b);
    }

    /// Writes `e`, a timed event other than a handler's start, read at
    /// `t`: it closes the current group, and the next start is timed.
    pub fn push_timed(&self, e: Event, t: u64) {
        self.close_group(t);
        self.untimed_left.set(0);
        self.push(e);
    }

    /// Writes a pending end as an event of its own.
    #[cold]
    #[inline(never)]
    pub fn flush(&self) {
        if self.end_pending.replace(false) {
            let [a, b] = Event::End.encode();
            self.ring.push(a, b);
        }
    }

    /// The innermost handler returned.
    #[inline(always)]
    pub fn end(&self) {
        // A second end in a row (a nested handler, then its caller): the
        // first is written.
        if self.end_pending.replace(true) {
            let [a, b] = Event::End.encode();
            self.ring.push(a, b);
        }
    }

    /// A handler starts, running the user message `flow` (`seq` 0: none);
    /// timed if its group allows no more untimed starts (the clock read
    /// only then).
    #[inline(always)]
    pub fn begin(&self, index: u32, runtime: bool, flow: Flow) {
        self.begin_with(index, runtime, flow, clock::now);
    }

    /// [`RingWriter::begin`] with the clock `now`.
    #[inline(always)]
    pub fn begin_with(&self, index: u32, runtime: bool, flow: Flow, now: impl FnOnce() -> u64) {
        let left = self.untimed_left.get();
        if left == 0 {
            begin_timed(self, index, runtime, flow.src, flow.seq, now());
        } else {
            self.untimed_left.set(left - 1);
            self.write_begin(index, runtime, flow);
        }
    }

    /// User handler `index` starts, running the message of `len` bytes
    /// this PE sent itself with `mark` ([`RingWriter::self_send_mark`]);
    /// timed as [`RingWriter::begin`].
    #[inline(always)]
    pub fn begin_self_sent(&self, index: u32, mark: u32, len: usize) {
        let len = len.min(u32::MAX as usize) as u32;
        let left = self.untimed_left.get();
        if left == 0 {
            begin_self_sent_timed(self, index, mark, len, clock::now());
        } else {
            self.untimed_left.set(left - 1);
            self.write_self_sent_begin(index, mark, len);
        }
    }

    /// A handler starts at `t` (read by the caller): a timed start, which
    /// begins a group.
    pub fn begin_at(&self, index: u32, runtime: bool, flow: Flow, t: u64) {
        self.open_group(t);
        self.write_begin(index, runtime, flow);
    }

    /// A clock reading at `t` for the handler start written next: closes
    /// the group before, opens one.
    fn open_group(&self, t: u64) {
        self.close_group(t);
        self.group_t.set(t);
        self.group_open.set(true);
        let allowance = self.allowance.get();
        self.group_allowance.set(allowance);
        self.untimed_left.set(allowance);
        let [a, b] = Event::Clock { t }.encode();
        self.ring.push(a, b);
    }

    /// A handler start with a pending end folded in.
    #[inline(always)]
    fn write_begin(&self, index: u32, runtime: bool, flow: Flow) {
        let closes = self.end_pending.replace(false);
        let [a, b] = event::begin_words(index, runtime, closes, flow);
        self.ring.push(a, b);
    }

    /// [`RingWriter::write_begin`] of a self-sent message ("Self-sends"):
    /// the send was `mark`'s count of events back.
    #[inline(always)]
    fn write_self_sent_begin(&self, index: u32, mark: u32, len: u32) {
        let closes = self.end_pending.replace(false);
        self.ring.push_numbered(|k| {
            let place = (mark & !event::SELF_SENT) >> event::SELF_SENT_ORDER_BITS;
            let back = (k as u32).wrapping_sub(place) & event::SELF_SENT_PLACE;
            let order = mark & event::SELF_SENT_ORDER_MAX;
            event::self_sent_begin_words(index, closes, back, order, len)
        });
    }

    /// A clock read at `t` ends the current group: the next group's
    /// allowance comes from its mean start-to-start time.
    #[inline]
    fn close_group(&self, t: u64) {
        if self.group_open.replace(false) {
            let len = 1 + self.group_allowance.get() - self.untimed_left.get();
            let span = t.saturating_sub(self.group_t.get());
            self.allowance.set(allowance(span, len, self.max_group));
        }
    }

    /// The PE ends: a pending end is written, and a last clock reading
    /// closes the last group.
    pub fn finish(&self) {
        let t = clock::now();
        self.push_timed(Event::Clock { t }, t);
    }
}

/// [`RingWriter::begin_at`] out of line for the hot path, as a function
/// that cannot unwind (`extern "C"`: a panic aborts): its callers then
/// keep no landing pad around the call for the message they hold.
#[inline(never)]
extern "C" fn begin_timed(w: &RingWriter, index: u32, runtime: bool, src: u32, seq: u32, t: u64) {
    w.begin_at(index, runtime, Flow { src, seq }, t);
}

/// [`RingWriter::begin_self_sent`]'s timed start, out of line as
/// [`begin_timed`] is.
#[inline(never)]
extern "C" fn begin_self_sent_timed(w: &RingWriter, index: u32, mark: u32, len: u32, t: u64) {
    w.open_group(t);
    w.write_self_sent_begin(index, mark, len);
}

/// The send event of message `seq`.
#[inline(always)]
fn send(dest: usize, node: bool, seq: u32, len: usize) -> Event {
    Event::Send {
        dest: dest as u32,
        node,
        seq,
        len: len.min(u32::MAX as usize) as u32,
    }
}

/// Untimed starts the group after one of `len` starts over `span` ticks
/// may have: as many as fit [`GROUP_TICKS`] at that mean, less the timed
/// one, at most `max_group - 1`.
fn allowance(span: u64, len: u32, max_group: u32) -> u32 {
    let fit = GROUP_TICKS.saturating_mul(u64::from(len)) / span.max(1);
    fit.clamp(1, u64::from(max_group)) as u32 - 1
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn events(w: &RingWriter) -> Vec<Event> {
        w.ring()
            .snapshot(true)
            .events
            .into_iter()
            .map(|e| Event::decode(e).expect("an event"))
            .collect()
    }

    const NONE: Flow = Flow { src: 0, seq: 0 };
    const F: Flow = Flow { src: 3, seq: 7 };

    fn begin(index: u32, closes: bool, flow: Option<Flow>) -> Event {
        Event::Begin {
            index,
            runtime: false,
            closes,
            flow,
        }
    }

    #[test]
    fn an_end_folds_into_the_next_start_and_sends_are_numbered() {
        let w = RingWriter::new(Arc::new(Ring::new(64)), 1);
        w.begin_at(1, false, NONE, 10);
        assert_eq!(w.sent(0, false, true, 8), 1);
        assert_eq!(w.sent(2, true, false, 8), 0);
        assert_eq!(w.sent(2, true, true, 8), 2);
        w.end();
        w.begin_at(2, false, F, 20);
        let send = |dest, node, seq| Event::Send {
            dest,
            node,
            seq,
            len: 8,
        };
        assert_eq!(
            events(&w),
            vec![
                Event::Clock { t: 10 },
                begin(1, false, None),
                send(0, false, 1),
                send(2, true, 0),
                send(2, true, 2),
                Event::Clock { t: 20 },
                begin(2, true, Some(F)),
            ]
        );
    }

    #[test]
    fn a_pending_end_is_written_before_anything_else() {
        let w = RingWriter::new(Arc::new(Ring::new(64)), 1);
        w.end();
        w.push_timed(Event::IdleBegin { t: 5 }, 5);
        // Two ends in a row (a nested handler, then its caller).
        w.end();
        w.end();
        w.sent(1, false, true, 8);
        w.end();
        w.finish();
        let got = events(&w);
        assert_eq!(
            got[..6],
            [
                Event::End,
                Event::IdleBegin { t: 5 },
                Event::End,
                Event::End,
                Event::Send {
                    dest: 1,
                    node: false,
                    seq: 1,
                    len: 8
                },
                Event::End,
            ]
        );
        assert!(matches!(got[6], Event::Clock { .. }), "{got:?}");
        assert_eq!(got.len(), 7);
    }

    #[test]
    fn short_handlers_are_timed_in_groups_and_long_ones_each() {
        let w = RingWriter::new(Arc::new(Ring::new(1 << 12)), MAX_GROUP);
        // Handlers 10 ticks apart: after the first two timed starts the
        // groups fill to the largest size.
        let mut t = 0;
        let mut clock_reads = 0;
        for i in 0..1000 {
            w.begin_with(i, false, NONE, || {
                clock_reads += 1;
                t
            });
            w.end();
            t += 10;
        }
        assert!(
            (1000 / MAX_GROUP as usize..1000 / MAX_GROUP as usize + 3).contains(&clock_reads),
            "{clock_reads} clock reads"
        );
        // Handlers of a microsecond or more: the group that was open when
        // they began runs out, then every start is timed.
        let mut long_reads = [0, 0];
        for i in 0..200 {
            w.begin_with(i, false, NONE, || {
                long_reads[i as usize / 100] += 1;
                t
            });
            w.end();
            t += 2 * GROUP_TICKS;
        }
        assert_eq!(long_reads[1], 100, "the later long handlers, each timed");
        // A writer with groups of one times every start.
        let exact = RingWriter::new(Arc::new(Ring::new(64)), 1);
        let mut reads = 0;
        for i in 0..10 {
            exact.begin_with(i, false, NONE, || {
                reads += 1;
                u64::from(i)
            });
        }
        assert_eq!(reads, 10);
    }

    #[test]
    fn a_start_after_idle_is_timed() {
        let w = RingWriter::new(Arc::new(Ring::new(64)), MAX_GROUP);
        for t in 0..3 {
            w.begin_at(0, false, NONE, t);
        }
        let mut read = false;
        w.begin_with(0, false, NONE, || unreachable!("in the group"));
        w.push_timed(Event::IdleBegin { t: 9 }, 9);
        w.begin_with(0, false, NONE, || {
            read = true;
            10
        });
        assert!(read);
    }

    #[test]
    fn numbers_skip_zero_when_they_wrap() {
        let w = RingWriter::new(Arc::new(Ring::new(4)), 1);
        w.last_sent.set(u32::MAX);
        assert_eq!(w.sent(0, false, true, 0), 1);
        // They stay below the self-send flag.
        w.last_sent.set(event::SELF_SENT - 1);
        assert_eq!(w.sent(0, false, true, 0), 1);
    }

    #[test]
    fn a_self_send_is_one_event_and_comes_back_as_two() {
        let w = RingWriter::new(Arc::new(Ring::new(64)), 1);
        // PE 3: handler 1 sends a message to another PE, then two to
        // itself, then returns; handler 2 runs the first of them, sends
        // nothing; handler 2 runs the second.
        w.begin_at(1, false, NONE, 10);
        // The next starts in this start's group: untimed.
        w.group_allowance.set(8);
        w.untimed_left.set(8);
        assert_eq!(w.sent(5, false, true, 8), 1);
        let first = w.self_send_mark();
        let second = w.self_send_mark();
        w.end();
        // They run in the other order (`deliver_specific_msg`, say): the
        // sends come back in the order sent.
        w.begin_self_sent(2, second, 48);
        w.end();
        w.begin_self_sent(2, first, 40);
        w.end();
        w.finish();
        let words = w.ring().snapshot(true).events;
        // Clock, start, send, start, start, end, clock: the two self-sends
        // wrote nothing of their own.
        assert_eq!(words.len(), 7);
        let got = event::expand_self_sends(3, &words);
        let own = |seq, len| Event::Send {
            dest: 3,
            node: false,
            seq,
            len,
        };
        let start = |seq| Event::Begin {
            index: 2,
            runtime: false,
            closes: true,
            flow: Some(Flow { src: 3, seq }),
        };
        assert!(matches!(got[0], Event::Clock { t: 10 }), "{got:?}");
        assert_eq!(
            got[1..8],
            [
                begin(1, false, None),
                Event::Send {
                    dest: 5,
                    node: false,
                    seq: 1,
                    len: 8
                },
                own(event::SELF_SENT + 1, 40),
                own(event::SELF_SENT, 48),
                start(event::SELF_SENT),
                start(event::SELF_SENT + 1),
                Event::End,
            ]
        );
        assert!(matches!(got[8], Event::Clock { .. }), "{got:?}");
        assert_eq!(got.len(), 9);
    }

    #[test]
    fn a_self_send_older_than_the_ring_is_left_out() {
        let w = RingWriter::new(Arc::new(Ring::new(4)), 1);
        w.begin_at(1, false, NONE, 10);
        let mark = w.self_send_mark();
        w.end();
        for t in 0..4 {
            w.push_timed(Event::IdleBegin { t }, t);
        }
        w.begin_self_sent(2, mark, 8);
        let got = event::expand_self_sends(0, &w.ring().snapshot(true).events);
        assert!(
            !got.iter().any(|e| matches!(e, Event::Send { .. })),
            "{got:?}"
        );
        assert!(
            matches!(got.last(), Some(Event::Begin { index: 2, .. })),
            "{got:?}"
        );
    }

    #[test]
    fn allowances() {
        assert_eq!(allowance(0, 1, MAX_GROUP), MAX_GROUP - 1);
        assert_eq!(allowance(GROUP_TICKS, 1, MAX_GROUP), 0);
        assert_eq!(allowance(GROUP_TICKS, 4, MAX_GROUP), 3);
        assert_eq!(allowance(GROUP_TICKS * 10, 1, MAX_GROUP), 0);
        assert_eq!(allowance(1, 1, 1), 0);
    }
}
