//! The built-in `perf_monitor` handler: how busy each PE is and how long its
//! scheduler queue is, sampled once a second (`ccs-protocol.md`,
//! "Built-in handlers").
//!
//! # How it works
//!
//! The first `perf_monitor` request starts a sampler on every PE (the
//! server gives PE 0 a `CcsPerf` start, which PE 0 passes on). A PE's
//! sampler keeps the time it spends idle, from its begin-idle and
//! begin-busy conditions, and once a second (the 1 s periodic condition)
//! sends the server a sample: its round number, the percentage of the last
//! period it was busy, and its queue length. The server's [`Collector`]
//! gathers samples by round; once every PE has sent round *r*, the
//! requests that were waiting before round *r* was complete are answered
//! with `perf` followed by ` <busy %> <queue length>` per PE, then a NUL.
//!
//! # Concurrency
//!
//! A sampler lives on its PE (a `Cpv`), touched only from that PE's
//! thread. The collector is owned by the server thread; samples reach it
//! through the server's event queue.
use std::cell::Cell;
#[cfg(feature = "ccs")]
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::ccd::{Condition, call_on_condition_keep};
use crate::msg::system::{self, Kind};
use crate::rt::globals::Cpv;
use crate::rt::pe::Pe;

/// One PE's sample of one period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sample {
    pub round: u64,
    pub pe: usize,
    /// Percentage of the period spent busy, 0–100.
    pub busy: u64,
    /// Messages and thread tokens in the PE's scheduler queues.
    pub queue: u64,
}

/// A PE's sampler state.
struct Sampler {
    /// When the current idle period began, while idle.
    idle_since: Cell<Option<Instant>>,
    /// Idle time in the current period, up to `idle_since`.
    idle: Cell<Duration>,
    /// When the current period began.
    period_start: Cell<Instant>,
    /// Rounds sampled so far.
    round: Cell<u64>,
}

static SAMPLER: Cpv<Sampler> = Cpv::new();

/// Operations of a `CcsPerf` message.
const OP_START: u64 = 0;
const OP_SAMPLE: u64 = 1;

/// The message that starts sampling (to PE 0, which passes it on).
pub(crate) fn start_message() -> crate::msg::Message {
    system::message(Kind::CcsPerf, &[OP_START], &[])
}

/// A `CcsPerf` message reached `pe`.
pub(crate) fn on_message(pe: &Pe, msg: &crate::msg::Message) {
    let mut r = system::Reader::new(msg, "CCS perf_monitor");
    match r.word() {
        OP_START => {
            if pe.pe == 0 {
                for other in 1..pe.job.topo.num_pes() {
                    pe.push_to_pe(other, start_message());
                }
            }
            start(pe);
        }
        OP_SAMPLE => {
            let round = r.word();
            let from = r.index(pe.job.topo.num_pes());
            let busy = r.word().min(100);
            let queue = r.word();
            let sample = Sample {
                round,
                pe: from,
                busy,
                queue,
            };
            match crate::ccs::state(&pe.job).server.get() {
                Some(server) => server.push_sample(sample),
                None => r.malformed("a perf_monitor sample reached a process without the server"),
            }
        }
        op => r.malformed(&format!("operation {op}")),
    }
}

/// Starts sampling on `pe` (once; later starts do nothing).
fn start(pe: &Pe) {
    if SAMPLER.is_initialized() {
        return;
    }
    let now = Instant::now();
    SAMPLER.initialize(Sampler {
        idle_since: Cell::new(pe.is_idle().then_some(now)),
        idle: Cell::new(Duration::ZERO),
        period_start: Cell::new(now),
        round: Cell::new(0),
    });
    call_on_condition_keep(Condition::PROCESSOR_BEGIN_IDLE, |_| {
        SAMPLER.with(|s| s.idle_since.set(Some(Instant::now())))
    });
    call_on_condition_keep(Condition::PROCESSOR_BEGIN_BUSY, |_| {
        SAMPLER.with(|s| {
            if let Some(since) = s.idle_since.take() {
                s.idle.set(s.idle.get() + since.elapsed());
            }
        })
    });
    call_on_condition_keep(Condition::PERIODIC_1S, |_| {
        crate::rt::pe::with(|pe| sample(pe));
    });
}

/// Ends a period on `pe` and sends its sample to the server.
fn sample(pe: &Pe) {
    let now = Instant::now();
    let (round, busy) = SAMPLER.with(|s| {
        let mut idle = s.idle.replace(Duration::ZERO);
        if let Some(since) = s.idle_since.get() {
            idle += now - since;
            s.idle_since.set(Some(now));
        }
        let period = now - s.period_start.replace(now);
        let idle_share = idle.as_secs_f64() / period.as_secs_f64().max(1e-9);
        let busy = (100.0 * (1.0 - idle_share)).round().clamp(0.0, 100.0) as u64;
        s.round.set(s.round.get() + 1);
        (s.round.get(), busy)
    });
    let queue = pe.sched_backlog() as u64;
    let sample = Sample {
        round,
        pe: pe.pe,
        busy,
        queue,
    };
    match crate::ccs::state(&pe.job).server.get() {
        Some(server) => server.push_sample(sample),
        None => pe.push_to_pe(
            0,
            system::message(
                Kind::CcsPerf,
                &[OP_SAMPLE, round, pe.pe as u64, busy, queue],
                &[],
            ),
        ),
    }
}

/// Rounds kept while incomplete (a PE that stopped sampling, say because
/// the job is ending, leaves its rounds incomplete).
#[cfg(feature = "ccs")]
const MAX_OPEN_ROUNDS: usize = 8;

/// The server's side: samples by round, and the requests waiting for the
/// next full one. `W` names a waiting request.
#[cfg(feature = "ccs")]
pub(crate) struct Collector<W> {
    pes: usize,
    started: bool,
    /// The last round every PE has sent.
    complete: u64,
    open: BTreeMap<u64, Vec<Option<(u64, u64)>>>,
    /// Requests and the round that answers them.
    waiters: Vec<(W, u64)>,
}

#[cfg(feature = "ccs")]
impl<W> Collector<W> {
    pub fn new(pes: usize) -> Collector<W> {
        Collector {
            pes,
            started: false,
            complete: 0,
            open: BTreeMap::new(),
            waiters: Vec::new(),
        }
    }

    /// Adds a request; true the first time (the sampler must be started).
    pub fn wait(&mut self, who: W) -> bool {
        self.waiters.push((who, self.complete + 1));
        !std::mem::replace(&mut self.started, true)
    }

    /// Forgets the requests `gone` says are gone (closed connections).
    pub fn forget(&mut self, gone: impl Fn(&W) -> bool) {
        self.waiters.retain(|(w, _)| !gone(w));
    }

    /// Takes a sample; returns the requests answered by it, with their
    /// reply.
    pub fn add(&mut self, s: Sample) -> Vec<(W, Vec<u8>)> {
        if s.round <= self.complete || s.pe >= self.pes {
            return Vec::new();
        }
        let row = self
            .open
            .entry(s.round)
            .or_insert_with(|| vec![None; self.pes]);
        row[s.pe] = Some((s.busy, s.queue));
        if row.iter().any(Option::is_none) {
            while self.open.len() > MAX_OPEN_ROUNDS {
                self.open.pop_first();
            }
            return Vec::new();
        }
        let row = self.open.remove(&s.round).expect("present");
        self.complete = s.round;
        self.open.retain(|&r, _| r > s.round);
        let mut text = b"perf".to_vec();
        for (busy, queue) in row.into_iter().flatten() {
            text.extend_from_slice(format!(" {busy} {queue}").as_bytes());
        }
        text.push(0);
        let (ready, waiting) = std::mem::take(&mut self.waiters)
            .into_iter()
            .partition(|(_, want)| *want <= s.round);
        self.waiters = waiting;
        ready.into_iter().map(|(w, _)| (w, text.clone())).collect()
    }
}

#[cfg(all(test, feature = "ccs"))]
mod tests {
    use super::*;

    fn s(round: u64, pe: usize, busy: u64, queue: u64) -> Sample {
        Sample {
            round,
            pe,
            busy,
            queue,
        }
    }

    #[test]
    fn requests_are_answered_by_the_next_full_round() {
        let mut c = Collector::new(2);
        assert!(c.wait("a"), "the first request starts the sampler");
        assert!(c.add(s(1, 0, 50, 3)).is_empty(), "round 1 is not full yet");
        assert!(!c.wait("b"));
        let answered = c.add(s(1, 1, 100, 0));
        assert_eq!(
            answered,
            [
                ("a", b"perf 50 3 100 0\0".to_vec()),
                ("b", b"perf 50 3 100 0\0".to_vec())
            ]
        );
        // A request after round 1 waits for round 2, whatever order the
        // PEs send in; a late sample of round 1 changes nothing.
        c.wait("c");
        assert!(c.add(s(2, 1, 7, 1)).is_empty());
        assert!(c.add(s(1, 0, 1, 1)).is_empty());
        assert_eq!(c.add(s(2, 0, 8, 2)), [("c", b"perf 8 2 7 1\0".to_vec())]);
        // Closed requests are dropped; bad PEs ignored; rounds bounded.
        c.wait("d");
        c.forget(|w| *w == "d");
        assert!(c.add(s(3, 5, 0, 0)).is_empty());
        for r in 3..40 {
            c.add(s(r, 0, 0, 0));
        }
        assert!(c.open.len() <= MAX_OPEN_ROUNDS);
        assert_eq!(c.add(s(39, 1, 0, 0)).len(), 0, "nobody waits");
    }
}
