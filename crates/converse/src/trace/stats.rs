//! A PE's running totals for `+stats`: where its time went (busy in
//! handlers, idle, the rest runtime overhead), the messages it sent and
//! handled, each handler's calls and exclusive time, and its utilisation
//! over time in a bounded number of buckets.
//!
//! # How time is classified
//!
//! Every hook that feeds the accumulator reads the clock (a handler's end
//! too, unlike the ring's untimed `End`: with `+stats` on, this is the
//! price of exact intervals). The time since the previous hook goes, as a
//! whole, to one of three classes, decided by the state *before* the hook:
//!
//! - idle, if the PE is between `idle_begin` and `idle_end` (even inside a
//!   handler that called the scheduler: the PE is waiting);
//! - busy, if the running user-level thread has a handler open; the time
//!   is the innermost open handler's *self* time, so nested handlers are
//!   counted once, and a handler suspended in a thread that is not running
//!   gets nothing until that thread is switched back to (the handler
//!   stacks are per thread, as in `chrome`);
//! - otherwise runtime overhead (scheduling, queues, polling), which is not
//!   stored: it is the wall time less busy and idle.
//!
//! # Buckets
//!
//! Utilisation over time is kept in [`BUCKETS`] buckets of busy and idle
//! time from the process's stats origin (`JobTrace` creation). The first
//! width is `2^FIRST_SHIFT` ticks (about 5 µs at 3 GHz, 16 µs off x86-64,
//! where a tick is a nanosecond: fine enough for a job of a few
//! milliseconds); when time passes the last bucket, adjacent pairs merge
//! and the width doubles (a merge is 256 additions; an hour-long job
//! makes about twenty), so memory is fixed for any job length. Times are ticks
//! until the part is taken, when one calibration turns them into Unix
//! nanoseconds: processes then share one time line, and the plot resamples
//! every PE onto a common grid (`plot`).
//!
//! # Invariants
//!
//! - `last` only grows; every interval from the PE's start to `last` is
//!   classified exactly once, so busy + idle <= wall.
//! - A bucket's busy + idle never exceeds its width.
//!
//! # Concurrency
//!
//! [`Accum`] belongs to its PE's thread (inside the PE's `Recorder`); when
//! the recorder is dropped (the PE ends) it is finished and moved behind
//! the PE log's mutex, where the part's taking reads it. A PE that has not
//! ended when its part is taken (an abort) has no stats.
use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// Buckets of utilisation over time per PE.
pub(crate) const BUCKETS: usize = 256;

/// The first bucket width: `2^FIRST_SHIFT` ticks.
const FIRST_SHIFT: u32 = 14;

const BUSY: usize = 0;
const IDLE: usize = 1;

/// A handler's count and exclusive time, in ticks.
#[derive(Clone, Copy, Default, Debug)]
struct Count {
    calls: u64,
    ticks: u64,
}

/// An open handler: its index, and whether it is a runtime message kind.
type Frame = (u32, bool);

/// A PE's accumulator, in ticks.
#[derive(Debug)]
pub(crate) struct Accum {
    /// The buckets' origin (common to the process's PEs).
    origin: u64,
    start: u64,
    /// End of the last classified interval.
    last: u64,
    /// Set by `finish`.
    end: Option<u64>,
    idle: bool,
    /// The running user-level thread (0: the main flow).
    thread: u32,
    /// Its open handlers, innermost last.
    stack: Vec<Frame>,
    /// The open handlers of the threads not running.
    parked: HashMap<u32, Vec<Frame>>,
    busy: u64,
    idle_ticks: u64,
    sent: u64,
    sent_bytes: u64,
    /// By handler index, and by runtime message kind.
    user: Vec<Count>,
    runtime: Vec<Count>,
    /// Bucket `i` covers `origin + [i << shift, (i + 1) << shift)`.
    shift: u32,
    buckets: Box<[[u64; 2]; BUCKETS]>,
}

impl Accum {
    /// A PE that starts at `start`, its process's origin `origin`
    /// (`origin <= start`).
    pub fn new(origin: u64, start: u64) -> Accum {
        Accum {
            origin,
            start,
            last: start,
            end: None,
            idle: false,
            thread: 0,
            stack: Vec::new(),
            parked: HashMap::new(),
            busy: 0,
            idle_ticks: 0,
            sent: 0,
            sent_bytes: 0,
            user: Vec::new(),
            runtime: Vec::new(),
            shift: FIRST_SHIFT,
            buckets: Box::new([[0; 2]; BUCKETS]),
        }
    }

    /// Classifies the time from `last` to `t` (see the module's comment).
    #[inline]
    fn advance(&mut self, t: u64) {
        let a = self.last;
        if t <= a {
            return;
        }
        self.last = t;
        let d = t - a;
        if self.idle {
            self.idle_ticks += d;
            self.add(IDLE, a, t);
        } else if let Some(&(index, runtime)) = self.stack.last() {
            self.busy += d;
            self.count(index, runtime).ticks += d;
            self.add(BUSY, a, t);
        }
    }

    fn count(&mut self, index: u32, runtime: bool) -> &mut Count {
        let table = if runtime {
            &mut self.runtime
        } else {
            &mut self.user
        };
        let i = index as usize;
        if i >= table.len() {
            table.resize(i + 1, Count::default());
        }
        &mut table[i]
    }

    /// Adds `[a, b)` to class `k` of the buckets it covers.
    fn add(&mut self, k: usize, a: u64, b: u64) {
        let (mut x, end) = (a.saturating_sub(self.origin), b.saturating_sub(self.origin));
        if end == 0 {
            return;
        }
        while ((end - 1) >> self.shift) as usize >= BUCKETS {
            self.merge();
        }
        while x < end {
            let i = (x >> self.shift) as usize;
            let edge = ((i as u64) + 1) << self.shift;
            let upto = edge.min(end);
            self.buckets[i][k] += upto - x;
            x = upto;
        }
    }

    /// Merges adjacent pairs of buckets: the width doubles.
    fn merge(&mut self) {
        for i in 0..BUCKETS / 2 {
            let (p, q) = (self.buckets[2 * i], self.buckets[2 * i + 1]);
            self.buckets[i] = [p[0] + q[0], p[1] + q[1]];
        }
        for b in &mut self.buckets[BUCKETS / 2..] {
            *b = [0; 2];
        }
        self.shift += 1;
    }

    /// A handler starts at `t`.
    #[inline]
    pub fn begin(&mut self, index: u32, runtime: bool, t: u64) {
        self.advance(t);
        self.count(index, runtime).calls += 1;
        self.stack.push((index, runtime));
    }

    /// The innermost handler of the running thread returns at `t`.
    #[inline]
    pub fn end(&mut self, t: u64) {
        self.advance(t);
        self.stack.pop();
    }

    pub fn idle_begin(&mut self, t: u64) {
        self.advance(t);
        self.idle = true;
    }

    pub fn idle_end(&mut self, t: u64) {
        self.advance(t);
        self.idle = false;
    }

    /// The PE switches to user-level thread `thread` at `t`.
    pub fn switch(&mut self, thread: u32, t: u64) {
        self.advance(t);
        if thread != self.thread {
            let resumed = self.parked.remove(&thread).unwrap_or_default();
            let left = std::mem::replace(&mut self.stack, resumed);
            if !left.is_empty() {
                self.parked.insert(self.thread, left);
            }
            self.thread = thread;
        }
    }

    /// A message of `len` bytes left; `user`: a user message this PE sent
    /// (not a runtime message, nor one it forwards).
    #[inline]
    pub fn sent(&mut self, user: bool, len: usize) {
        if user {
            self.sent += 1;
            self.sent_bytes += len as u64;
        }
    }

    /// The PE's code was left by an unwind at `t`: no handler is open any
    /// more, on any thread.
    pub fn unwound(&mut self, t: u64) {
        self.advance(t);
        self.stack.clear();
        self.parked.clear();
    }

    /// The PE ends at `t`.
    pub fn finish(&mut self, t: u64) {
        self.advance(t);
        self.end = Some(self.last);
    }

    /// The totals in nanoseconds: `to_ns` maps ticks to Unix nanoseconds,
    /// `scale` is nanoseconds per tick.
    pub fn report(&self, to_ns: impl Fn(u64) -> u64, scale: f64) -> PeStats {
        let ns = |ticks: u64| (ticks as f64 * scale).round() as u64;
        let end = self.end.unwrap_or(self.last);
        let mut handlers = Vec::new();
        for (runtime, table) in [(false, &self.user), (true, &self.runtime)] {
            for (index, c) in table.iter().enumerate() {
                if c.calls > 0 || c.ticks > 0 {
                    handlers.push(HandlerStats {
                        index: index as u32,
                        runtime,
                        calls: c.calls,
                        self_ns: ns(c.ticks),
                    });
                }
            }
        }
        let used = self
            .buckets
            .iter()
            .rposition(|b| b[0] + b[1] > 0)
            .map_or(0, |i| i + 1);
        PeStats {
            start_ns: to_ns(self.start),
            end_ns: to_ns(end),
            busy_ns: ns(self.busy),
            idle_ns: ns(self.idle_ticks),
            sent: self.sent,
            sent_bytes: self.sent_bytes,
            handled: self.user.iter().map(|c| c.calls).sum(),
            runtime_handled: self.runtime.iter().map(|c| c.calls).sum(),
            handlers,
            origin_ns: to_ns(self.origin),
            bucket_ns: ns(1u64 << self.shift).max(1),
            busy: self.buckets[..used].iter().map(|b| ns(b[BUSY])).collect(),
            idle: self.buckets[..used].iter().map(|b| ns(b[IDLE])).collect(),
        }
    }
}

/// One handler's totals on a PE.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct HandlerStats {
    /// Handler table index, or runtime message kind if `runtime`.
    pub index: u32,
    pub runtime: bool,
    pub calls: u64,
    /// Time inside it, less the time in handlers it ran nested.
    pub self_ns: u64,
}

/// A PE's stats as they travel in its part: times in nanoseconds, instants
/// as Unix nanoseconds.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct PeStats {
    pub start_ns: u64,
    pub end_ns: u64,
    pub busy_ns: u64,
    pub idle_ns: u64,
    /// User messages the PE sent, and their bytes.
    pub sent: u64,
    pub sent_bytes: u64,
    /// User handler runs, and runtime messages handled.
    pub handled: u64,
    pub runtime_handled: u64,
    pub handlers: Vec<HandlerStats>,
    /// Where bucket 0 begins, and every bucket's width.
    pub origin_ns: u64,
    pub bucket_ns: u64,
    /// Per bucket, busy and idle nanoseconds (trailing empty ones left
    /// out).
    pub busy: Vec<u64>,
    pub idle: Vec<u64>,
}

impl PeStats {
    pub fn wall_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }

    /// What is neither busy nor idle.
    pub fn overhead_ns(&self) -> u64 {
        self.wall_ns()
            .saturating_sub(self.busy_ns.saturating_add(self.idle_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(ticks: u64) -> u64 {
        ticks << FIRST_SHIFT
    }

    #[test]
    fn busy_idle_and_overhead_add_up_and_nested_handlers_count_once() {
        // Ticks as nanoseconds (scale 1), origin 0.
        let mut a = Accum::new(0, 100);
        a.begin(1, false, 200); // 100..200 overhead
        a.begin(2, false, 250); // handler 1: 50 self
        a.end(400); // handler 2: 150
        a.end(500); // handler 1: +100
        a.idle_begin(600); // overhead 100
        a.idle_end(900); // idle 300
        a.begin(0, true, 950);
        a.sent(true, 64);
        a.sent(false, 8); // a runtime message: not counted
        a.end(1000); // runtime kind 0: 50
        a.finish(1100);
        let s = a.report(|t| t, 1.0);
        assert_eq!(s.wall_ns(), 1000);
        assert_eq!(s.busy_ns, 50 + 150 + 100 + 50);
        assert_eq!(s.idle_ns, 300);
        assert_eq!(s.overhead_ns(), 1000 - 350 - 300);
        assert_eq!((s.handled, s.runtime_handled), (2, 1));
        assert_eq!((s.sent, s.sent_bytes), (1, 64));
        let h = |i, r| {
            s.handlers
                .iter()
                .find(|h| h.index == i && h.runtime == r)
                .map(|h| (h.calls, h.self_ns))
        };
        assert_eq!(h(1, false), Some((1, 150)));
        assert_eq!(h(2, false), Some((1, 150)));
        assert_eq!(h(0, true), Some((1, 50)));
        assert_eq!(s.busy.iter().sum::<u64>(), s.busy_ns);
        assert_eq!(s.idle.iter().sum::<u64>(), s.idle_ns);
    }

    #[test]
    fn a_suspended_handler_gets_no_time_while_another_thread_runs() {
        let mut a = Accum::new(0, 0);
        a.begin(1, false, 0);
        a.switch(7, 100); // handler 1 suspends (100 self)
        a.idle_begin(150); // 50 overhead in thread 7
        a.idle_end(250); // 100 idle
        a.begin(2, false, 250);
        a.end(300); // handler 2: 50
        a.switch(0, 300); // back to the main flow
        a.end(320); // handler 1: +20
        a.finish(400);
        let s = a.report(|t| t, 1.0);
        assert_eq!(s.busy_ns, 100 + 50 + 20);
        assert_eq!(s.idle_ns, 100);
        assert_eq!(s.overhead_ns(), 400 - 170 - 100);
        let self_of = |i| s.handlers.iter().find(|h| h.index == i).unwrap().self_ns;
        assert_eq!((self_of(1), self_of(2)), (120, 50));
    }

    #[test]
    fn an_unwind_ends_the_open_handlers() {
        let mut a = Accum::new(0, 0);
        a.begin(1, false, 0);
        a.switch(3, 10);
        a.begin(2, false, 10);
        a.unwound(30); // `exit` in handler 2, with handler 1 suspended
        a.switch(0, 40);
        a.finish(100); // the runtime's shutdown: overhead
        let s = a.report(|t| t, 1.0);
        assert_eq!(s.busy_ns, 30);
        assert_eq!(s.overhead_ns(), 70);
    }

    #[test]
    fn buckets_split_intervals_and_merge_in_pairs() {
        let mut a = Accum::new(0, 0);
        // Busy across the first bucket's edge: split.
        a.begin(1, false, ms(1) - 10);
        a.end(ms(1) + 30);
        assert_eq!(a.buckets[0][BUSY], 10);
        assert_eq!(a.buckets[1][BUSY], 30);
        // Idle in bucket 3.
        a.idle_begin(ms(3));
        a.idle_end(ms(3) + 5);
        assert_eq!(a.shift, FIRST_SHIFT);
        // Busy past the last bucket: one merge, pairs summed.
        a.begin(1, false, ms(BUCKETS as u64) + 1);
        a.end(ms(BUCKETS as u64) + 3);
        assert_eq!(a.shift, FIRST_SHIFT + 1);
        assert_eq!(a.buckets[0][BUSY], 40, "buckets 0 and 1");
        assert_eq!(a.buckets[1][IDLE], 5, "buckets 2 and 3");
        assert_eq!(a.buckets[BUCKETS / 2][BUSY], 2);
        assert!(a.buckets[BUCKETS / 2 + 1..].iter().all(|b| *b == [0, 0]));
        // Far beyond: several merges at once; totals kept.
        a.idle_begin(ms(100 * BUCKETS as u64));
        a.idle_end(ms(100 * BUCKETS as u64) + 1);
        assert_eq!(a.shift, FIRST_SHIFT + 7, "256 x 128 buckets cover 100 x");
        let sums = a
            .buckets
            .iter()
            .fold([0, 0], |s, b| [s[0] + b[0], s[1] + b[1]]);
        assert_eq!(sums, [42, 6]);
        // A long interval spreads over every bucket it covers, each filled
        // no more than its width.
        let mut b = Accum::new(0, 0);
        b.idle_begin(0);
        b.idle_end(ms(10) + 7);
        assert!((0..10).all(|i| b.buckets[i][IDLE] == ms(1)));
        assert_eq!(b.buckets[10][IDLE], 7);
        let s = b.report(|t| t, 1.0);
        assert_eq!(s.idle.len(), 11, "trailing empty buckets left out");
        assert_eq!(s.bucket_ns, ms(1));
    }
}
