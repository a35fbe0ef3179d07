//! What a PE shows its process's watchdog (`++watchdog S`, `rt::watchdog`):
//! how far it has got, which handler it is in and since when, whether it
//! is idle, the last handlers it ran, and, when asked, a report of what
//! it waits for and what it holds.
//!
//! # Invariants
//!
//! - Only the PE's own thread writes a `PeWatch` (through the trace hooks,
//!   `trace::Tracer`, and `answer`); the watchdog thread only reads it,
//!   sets `asked`, and takes the answer.
//! - `beats` only grows: one per handler begun or user-level thread
//!   switch. A watchdog that sees it unchanged for S seconds knows the PE
//!   began no handler and switched no thread meanwhile.
//!
//! # Concurrency
//!
//! Atomics with relaxed order for the figures (each is read on its own;
//! a dump is a snapshot of a moving PE, not a consistent cut), a mutex
//! for the handler stack, the names and the answer. The PE takes the
//! stack's mutex per handler, uncontended but for the watchdog's reads
//! every quarter period.
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// How many of the last handlers a PE remembers for its dump.
pub(crate) const LAST_HANDLERS: usize = 8;

/// A handler as the watchdog names it: a user handler's table index, or
/// a runtime message kind with this bit set.
pub(crate) const RUNTIME_KEY: u32 = 1 << 31;

/// A PE's face towards the watchdog.
pub(crate) struct PeWatch {
    pub pe: usize,
    epoch: Instant,
    /// Handlers begun so far.
    beats: AtomicU64,
    /// The handlers running, innermost last, with when each began (ns
    /// since `epoch`). User-level threads interleave their handlers: after
    /// a switch this is the order they began in, which is what the dump
    /// says.
    running: Mutex<Vec<(u32, u64)>>,
    /// When the current idle period began (ns since `epoch`, plus one);
    /// 0: not idle.
    idle_since: AtomicU64,
    /// The last handlers begun (keys), a ring; `last_next` counts them.
    last: [AtomicU32; LAST_HANDLERS],
    last_next: AtomicU64,
    /// User handlers' names by table index.
    names: Mutex<Vec<(u32, String)>>,
    /// Where the PE blocks without a scheduler (a node barrier), while it
    /// does: it cannot answer there.
    blocked_in: Mutex<Option<&'static str>>,
    /// The watchdog asked for an answer.
    asked: AtomicBool,
    answer: Mutex<Option<Answer>>,
    /// The PE has ended.
    done: AtomicBool,
}

/// What a PE says when the watchdog asks: lines of text, and the
/// reductions it waits in (for the watchdog to name who never came).
#[derive(Clone, Debug, Default)]
pub(crate) struct Answer {
    /// What it waits for and what it holds, one item each.
    pub lines: Vec<String>,
    /// The reductions it has joined and waits in: (a description the same
    /// on every PE, the PEs it waits for).
    pub reductions: Vec<(String, Vec<usize>)>,
    /// Contributions it holds for reductions it has not joined: (the
    /// description, from which PEs).
    pub held: Vec<(String, Vec<usize>)>,
    /// Work it holds: messages waiting in its queues, quiescence callbacks.
    pub pending: bool,
}

/// A snapshot of a PE for the dump.
pub(crate) struct Seen {
    pub pe: usize,
    pub done: bool,
    /// Handlers running (key, for how long), innermost last.
    pub running: Vec<(u32, Duration)>,
    pub idle_for: Option<Duration>,
    pub blocked_in: Option<&'static str>,
    /// The last handlers begun, oldest first.
    pub last: Vec<u32>,
}

impl PeWatch {
    pub fn new(pe: usize, epoch: Instant) -> PeWatch {
        PeWatch {
            pe,
            epoch,
            beats: AtomicU64::new(0),
            running: Mutex::new(Vec::new()),
            idle_since: AtomicU64::new(0),
            last: std::array::from_fn(|_| AtomicU32::new(0)),
            last_next: AtomicU64::new(0),
            names: Mutex::new(Vec::new()),
            blocked_in: Mutex::new(None),
            asked: AtomicBool::new(false),
            answer: Mutex::new(None),
            done: AtomicBool::new(false),
        }
    }

    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    // The PE's side.

    /// A handler (`key`) begins.
    pub fn begin(&self, key: u32) {
        self.beats.fetch_add(1, Relaxed);
        let n = self.last_next.fetch_add(1, Relaxed);
        self.last[n as usize % LAST_HANDLERS].store(key, Relaxed);
        let now = self.now_ns();
        crate::sync::lock(&self.running).push((key, now));
    }

    /// Progress without a handler (a user-level thread switch).
    pub fn beat(&self) {
        self.beats.fetch_add(1, Relaxed);
    }

    /// The innermost handler returned.
    pub fn end(&self) {
        crate::sync::lock(&self.running).pop();
    }

    pub fn idle_begin(&self) {
        self.idle_since.store(self.now_ns() + 1, Relaxed);
    }

    pub fn idle_end(&self) {
        self.idle_since.store(0, Relaxed);
    }

    /// The handler at table index `index` is `name`.
    pub fn name_handler(&self, index: u32, name: &str) {
        let mut names = crate::sync::lock(&self.names);
        match names.iter_mut().find(|(i, _)| *i == index) {
            Some(entry) => entry.1 = name.to_string(),
            None => names.push((index, name.to_string())),
        }
    }

    /// The PE blocks in `what` (a node barrier) until [`PeWatch::unblocked`].
    pub fn blocked(&self, what: &'static str) {
        *crate::sync::lock(&self.blocked_in) = Some(what);
    }

    pub fn unblocked(&self) {
        *crate::sync::lock(&self.blocked_in) = None;
    }

    /// True if the watchdog waits for this PE's answer.
    #[inline]
    pub fn is_asked(&self) -> bool {
        self.asked.load(Relaxed)
    }

    /// The PE's answer to the watchdog's question.
    pub fn answer(&self, answer: Answer) {
        // Cleared first: a question asked while the answer is stored is
        // answered again later, not lost.
        self.asked.store(false, Relaxed);
        *crate::sync::lock(&self.answer) = Some(answer);
    }

    pub fn finished(&self) {
        self.done.store(true, Relaxed);
    }

    // The watchdog's side.

    /// Handlers begun so far.
    pub fn beats(&self) -> u64 {
        self.beats.load(Relaxed)
    }

    /// Asks the PE for an answer (the caller wakes it), dropping any
    /// earlier one.
    pub fn ask(&self) {
        *crate::sync::lock(&self.answer) = None;
        self.asked.store(true, Relaxed);
    }

    /// The PE's answer, once it gave one.
    pub fn take_answer(&self) -> Option<Answer> {
        crate::sync::lock(&self.answer).take()
    }

    pub fn seen(&self) -> Seen {
        let now = self.now_ns();
        let since = |t: u64| Duration::from_nanos(now.saturating_sub(t));
        let running = crate::sync::lock(&self.running)
            .iter()
            .map(|&(key, t)| (key, since(t)))
            .collect();
        let idle = self.idle_since.load(Relaxed);
        let n = self.last_next.load(Relaxed);
        let kept = n.min(LAST_HANDLERS as u64);
        let last = (n - kept..n)
            .map(|i| self.last[i as usize % LAST_HANDLERS].load(Relaxed))
            .collect();
        Seen {
            pe: self.pe,
            done: self.done.load(Relaxed),
            running,
            idle_for: (idle != 0).then(|| since(idle - 1)),
            blocked_in: *crate::sync::lock(&self.blocked_in),
            last,
        }
    }

    /// The name of the handler `key`: a user handler's registered name,
    /// or a runtime message's kind (`kinds`: `msg::system`'s names).
    pub fn name_of(&self, key: u32, kinds: &[(u32, String)]) -> String {
        if key & RUNTIME_KEY != 0 {
            let kind = key & !RUNTIME_KEY;
            return match kinds.iter().find(|(k, _)| *k == kind) {
                Some((_, name)) => format!("converse: {name}"),
                None => format!("converse: message kind {kind}"),
            };
        }
        match crate::sync::lock(&self.names)
            .iter()
            .find(|(i, _)| *i == key)
        {
            Some((_, name)) => name.clone(),
            None => format!("handler {key}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_handlers_and_the_running_stack() {
        let w = PeWatch::new(3, Instant::now());
        w.name_handler(5, "prog::on_work");
        for k in 0..10u32 {
            w.begin(k);
            w.end();
        }
        w.begin(5);
        w.begin(RUNTIME_KEY | 2);
        let seen = w.seen();
        assert_eq!(seen.pe, 3);
        assert_eq!(w.beats(), 12);
        assert_eq!(seen.last, vec![4, 5, 6, 7, 8, 9, 5, RUNTIME_KEY | 2]);
        let running: Vec<u32> = seen.running.iter().map(|r| r.0).collect();
        assert_eq!(running, vec![5, RUNTIME_KEY | 2]);
        let kinds = vec![(2, "QdRequest".to_string())];
        assert_eq!(w.name_of(5, &kinds), "prog::on_work");
        assert_eq!(w.name_of(RUNTIME_KEY | 2, &kinds), "converse: QdRequest");
        assert_eq!(w.name_of(7, &kinds), "handler 7");
        w.end();
        w.end();
        w.end();
        assert!(w.seen().running.is_empty());
        assert!(w.seen().idle_for.is_none());
        w.idle_begin();
        assert!(w.seen().idle_for.is_some());
    }

    #[test]
    fn an_answer_is_taken_once() {
        let w = PeWatch::new(0, Instant::now());
        w.ask();
        assert!(w.is_asked());
        w.answer(Answer {
            lines: vec!["x".into()],
            ..Answer::default()
        });
        assert!(!w.is_asked());
        assert_eq!(w.take_answer().unwrap().lines, ["x"]);
        assert!(w.take_answer().is_none());
    }
}
