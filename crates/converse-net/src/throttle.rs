//! A log line that strangers can cause over and over (a connection refused
//! or evicted at a listener's cap, one closed for stalling, a hello that
//! does not prove the job key), said at a bounded rate: the first few in full
//! ([`Throttle::with_burst`]), then the ones that follow within a period
//! counted and said as one summary line at the period's end. The CCS server, the tcp module's
//! listener and `convrun`'s control socket log through it.
//!
//! # Invariants
//!
//! - At most `burst` full lines in a period that starts with a full line,
//!   and at most one summary line per period, so a client opening
//!   connections in a loop cannot flood stderr. A period that ends with a
//!   summary leaves no room for full lines in the next one (the flood is
//!   still on).
//! - No event is lost from the count: every event held back is in exactly
//!   one summary, given by [`Throttle::hit`] or [`Throttle::due`] once the
//!   period has passed (the owner asks `due` when it wakes anyway, so a
//!   summary comes even when the events stop; what is held when the owner
//!   stops is said then, [`Throttle::rest`]).
//! - After a period with no event, the next one is said in full again (it
//!   names its client).
//!
//! # Concurrency
//!
//! A plain value, owned by one thread or kept behind its owner's lock;
//! time is passed in, so the rules are tested without waiting.
use std::time::{Duration, Instant};

/// The period of the throttled lines.
pub const LOG_PERIOD: Duration = Duration::from_secs(10);

/// The full lines a period of the listeners' refusals holds: enough to see
/// a handful of strangers each named, few enough that a flood is a few
/// lines.
pub const LOG_BURST: u32 = 5;

/// What to say for an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Say {
    /// The full line, about this event.
    Line,
    /// One summary line: this many events (this one among them) since
    /// the last line.
    Count(u64),
    /// Nothing now: counted for a later summary.
    Quiet,
}

/// One throttled kind of line (see the module comment).
pub struct Throttle {
    every: Duration,
    /// Full lines a period may hold.
    burst: u32,
    /// When the period began: the last summary, or the first full line
    /// after a quiet period.
    last: Option<Instant>,
    /// Full lines said in this period.
    said: u32,
    /// Events held back since then.
    held: u64,
}

impl Throttle {
    /// A throttle of at most one line per `every`.
    pub fn new(every: Duration) -> Throttle {
        Throttle::with_burst(every, 1)
    }

    /// A throttle of at most `burst` full lines (at least 1), then one
    /// summary line, per `every`.
    pub fn with_burst(every: Duration, burst: u32) -> Throttle {
        Throttle {
            every,
            burst: burst.max(1),
            last: None,
            said: 0,
            held: 0,
        }
    }

    /// An event at `now`.
    pub fn hit(&mut self, now: Instant) -> Say {
        match self.last {
            Some(t) if now.saturating_duration_since(t) < self.every => {
                if self.said < self.burst && self.held == 0 {
                    self.said += 1;
                    Say::Line
                } else {
                    self.held += 1;
                    Say::Quiet
                }
            }
            _ if self.held > 0 => {
                let n = std::mem::take(&mut self.held) + 1;
                self.last = Some(now);
                self.said = self.burst;
                Say::Count(n)
            }
            _ => {
                self.last = Some(now);
                self.said = 1;
                Say::Line
            }
        }
    }

    /// The events held back, to be said as one summary line, once the
    /// period since the last line has passed; `None` while there are none
    /// or it has not.
    pub fn due(&mut self, now: Instant) -> Option<u64> {
        let last = self.last?;
        if self.held == 0 || now.saturating_duration_since(last) < self.every {
            return None;
        }
        self.last = Some(now);
        self.said = self.burst;
        Some(std::mem::take(&mut self.held))
    }

    /// The events held back, whatever the time: for the last summary when
    /// the server stops (none is lost with it); `None` if there are none.
    pub fn rest(&mut self) -> Option<u64> {
        (self.held > 0).then(|| std::mem::take(&mut self.held))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_is_said_then_one_summary_per_period() {
        let t0 = Instant::now();
        let s = |ms: u64| t0 + Duration::from_millis(ms);
        let mut t = Throttle::new(Duration::from_secs(10));
        assert_eq!(t.due(s(0)), None, "nothing happened");
        assert_eq!(t.hit(s(0)), Say::Line);
        // A flood within the period: counted, not said.
        for ms in 1..=1000 {
            assert_eq!(t.hit(s(ms)), Say::Quiet);
        }
        assert_eq!(t.due(s(9_999)), None, "the period has not passed");
        assert_eq!(t.due(s(10_000)), Some(1000));
        assert_eq!(t.due(s(10_001)), None, "said once");
        assert_eq!(t.rest(), None, "nothing held");
        // Held again, then the summary comes with the next event after
        // the period (before the tick asked).
        assert_eq!(t.hit(s(10_500)), Say::Quiet);
        assert_eq!(t.hit(s(20_000)), Say::Count(2));
        // At the end, what is held is said at once.
        assert_eq!(t.hit(s(20_001)), Say::Quiet);
        assert_eq!(t.rest(), Some(1));
        assert_eq!(t.rest(), None);
        // A quiet period: the next event is said in full again.
        assert_eq!(t.due(s(40_000)), None);
        assert_eq!(t.hit(s(40_000)), Say::Line);
    }

    #[test]
    fn a_burst_of_full_lines_then_counts() {
        let t0 = Instant::now();
        let s = |ms: u64| t0 + Duration::from_millis(ms);
        let mut t = Throttle::with_burst(Duration::from_secs(10), 3);
        for ms in 0..3 {
            assert_eq!(t.hit(s(ms)), Say::Line);
        }
        for ms in 3..100 {
            assert_eq!(t.hit(s(ms)), Say::Quiet);
        }
        assert_eq!(t.due(s(10_000)), Some(97));
        // The flood goes on: counted only.
        assert_eq!(t.hit(s(10_001)), Say::Quiet);
        assert_eq!(t.hit(s(20_001)), Say::Count(2));
        // After a quiet period, full lines again.
        assert_eq!(t.hit(s(40_000)), Say::Line);
        assert_eq!(t.hit(s(40_001)), Say::Line);
    }

    #[test]
    fn lines_are_at_most_one_per_period_and_no_event_is_lost() {
        let t0 = Instant::now();
        let mut t = Throttle::new(Duration::from_secs(1));
        let (mut lines, mut counted, mut last_line) = (0u64, 0u64, None::<u64>);
        // An event every 7 ms for 20 s, the tick every 100 ms.
        for ms in 0..20_000u64 {
            let now = t0 + Duration::from_millis(ms);
            let mut said = None;
            if ms % 7 == 0 {
                match t.hit(now) {
                    Say::Line => said = Some(1),
                    Say::Count(n) => said = Some(n),
                    Say::Quiet => {}
                }
            }
            if ms % 100 == 0
                && let Some(n) = t.due(now)
            {
                assert!(said.is_none());
                said = Some(n);
            }
            if let Some(n) = said {
                if let Some(prev) = last_line {
                    assert!(ms - prev >= 1000, "lines at {prev} and {ms} ms");
                }
                last_line = Some(ms);
                lines += 1;
                counted += n;
            }
        }
        let events = (0..20_000u64).filter(|ms| ms % 7 == 0).count() as u64;
        assert!(lines <= 21, "{lines} lines");
        assert_eq!(counted + t.held, events);
    }
}
