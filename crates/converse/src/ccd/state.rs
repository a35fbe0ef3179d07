//! The per-PE state of conditions, timers and quiescence detection: the
//! types only, on the floor below `rt`, so that `rt::Pe` holds them
//! without naming `ccd` (DESIGN.md §3, first rule; the floors are in
//! `tests/layering.rs`).
//!
//! # Invariants
//!
//! The fields are visible to `ccd` alone; what they mean, and the code
//! that keeps them, is in `ccd`'s other modules (`impl` blocks there).
//! Everything here is touched only by its PE's thread.
use std::cell::{Cell, RefCell};
use std::collections::{BinaryHeap, HashMap};
use std::time::{Duration, Instant};

/// A PE's Ccd state (a field of `Pe`).
pub(crate) struct CcdState {
    pub(in crate::ccd) conditions: Conditions,
    pub(in crate::ccd) timers: RefCell<BinaryHeap<Timer>>,
    pub(in crate::ccd) next_timer_seq: Cell<u64>,
    pub(in crate::ccd) resolution: Cell<Duration>,
    /// When a busy PE polls next.
    pub(in crate::ccd) next_poll: Cell<Instant>,
    /// When each periodic condition is raised next.
    pub(in crate::ccd) periodic_next: RefCell<[Instant; PERIODIC_COUNT]>,
    /// See the module invariants.
    pub(in crate::ccd) armed: Cell<bool>,
    /// Deliveries since the clock was last read (while armed).
    pub(in crate::ccd) ticks: Cell<u32>,
    /// The busy path found a poll due and has not run it yet.
    pub(in crate::ccd) poll_pending: Cell<bool>,
    /// Deliveries between clock reads (see `tick`).
    pub(in crate::ccd) clock_every: Cell<u32>,
    /// When the busy path last read the clock.
    pub(in crate::ccd) last_clock: Cell<Instant>,
    /// The scheduler found nothing to do and has not found work since.
    pub(in crate::ccd) idle: Cell<bool>,
    /// `PROCESSOR_STILL_IDLE` was raised since the PE last waited.
    pub(in crate::ccd) still_idle_raised: Cell<bool>,
    /// When the current idle period began, once something needed to know.
    pub(in crate::ccd) idle_since: Cell<Option<Instant>>,
    /// Signal counts this PE has raised its conditions for.
    pub(in crate::ccd) signals_seen: [Cell<u64>; 2],
    /// A quiescence detection started for `Condition::QUIESCENCE` is running.
    pub(in crate::ccd) quiescence_armed: Cell<bool>,
    /// Timers set on this PE so far (see the module invariants).
    pub(in crate::ccd) timers_set: Cell<u64>,
    /// Timers taken out of the heap to fire so far.
    pub(in crate::ccd) timers_fired: Cell<u64>,
}

/// A pending [`call_fn_after`]; ordered so the heap's top is the earliest
/// (ties by registration order).
pub(in crate::ccd) struct Timer {
    pub(in crate::ccd) due: Instant,
    pub(in crate::ccd) seq: u64,
    pub(in crate::ccd) callback: Box<dyn FnOnce(f64)>,
}

pub(crate) const PERIODIC_COUNT: usize = 10;

pub(in crate::ccd) enum Callback {
    Once(Box<dyn FnOnce(f64)>),
    Keep(Box<dyn FnMut(f64)>),
}

pub(in crate::ccd) struct Entry {
    pub(in crate::ccd) index: usize,
    pub(in crate::ccd) callback: Callback,
}

#[derive(Default)]
pub(in crate::ccd) struct CondList {
    pub(in crate::ccd) entries: Vec<Entry>,
}

/// A PE's condition callbacks.
#[derive(Default)]
pub(crate) struct Conditions {
    pub(in crate::ccd) lists: RefCell<Vec<CondList>>,
    pub(in crate::ccd) next_index: Cell<usize>,
    /// Raises in progress on this PE (nested ones included).
    pub(in crate::ccd) raising: Cell<u32>,
    /// Indices cancelled while a raise was in progress.
    pub(in crate::ccd) cancelled: RefCell<Vec<usize>>,
}

/// A wave being collected on this PE.
pub(in crate::ccd) struct Wave {
    pub(in crate::ccd) id: u64,
    /// Children that have not replied yet.
    pub(in crate::ccd) waiting: usize,
    pub(in crate::ccd) created: u64,
    pub(in crate::ccd) processed: u64,
    /// Every PE of the subtree replied from an idle wait (not from an
    /// empty poll).
    pub(in crate::ccd) strict: bool,
}

/// A detection request, as PE 0 keeps it.
pub(in crate::ccd) struct Requester {
    pub(in crate::ccd) pe: usize,
    pub(in crate::ccd) token: u64,
    /// A once-only question (see `check_once`).
    pub(in crate::ccd) once: bool,
    /// The last wave started when the request reached PE 0. A pair of waves
    /// answers only requests that came in before its first wave started:
    /// what a later requester did just before asking may have escaped the
    /// pair's counts.
    pub(in crate::ccd) joined_after: u64,
}

/// A balanced first wave.
pub(in crate::ccd) struct FirstWave {
    pub(in crate::ccd) id: u64,
    pub(in crate::ccd) created: u64,
    pub(in crate::ccd) processed: u64,
    pub(in crate::ccd) strict: bool,
}

/// PE 0's view of the detection.
#[derive(Default)]
pub(in crate::ccd) struct Root {
    /// Callbacks to answer.
    pub(in crate::ccd) requesters: Vec<Requester>,
    pub(in crate::ccd) running: bool,
    /// The number of the last wave started (waves run one at a time).
    pub(in crate::ccd) next_wave: u64,
    /// The last balanced wave, while the second wave of its pair runs.
    pub(in crate::ccd) first_wave: Option<FirstWave>,
    /// A failed wave is to be retried when PE 0 is next idle.
    pub(in crate::ccd) retry: bool,
}

/// One PE's part in quiescence detection (`Pe::qd`); touched only by
/// `ccd::quiescence`, on the PE's own thread.
#[derive(Default)]
pub(crate) struct QdState {
    /// Messages this PE created (sent or enqueued).
    pub(in crate::ccd) created: Cell<u64>,
    /// Messages this PE processed (handed to a handler or consumed by the
    /// runtime).
    pub(in crate::ccd) processed: Cell<u64>,
    /// Quiescence detection has something to do when this PE is next idle
    /// (outside every handler).
    pub(in crate::ccd) due: Cell<bool>,
    pub(in crate::ccd) protocol: RefCell<Protocol>,
    /// PE 0 under `++watchdog`: where its look for a quiescent job with
    /// no exit pending stands (`quiescence::quiet_timeout`).
    pub(in crate::ccd) quiet: Cell<QuietWatch>,
}

/// PE 0's look for a job left quiescent with no exit pending.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub(in crate::ccd) enum QuietWatch {
    /// It asks once it has sat idle for the watchdog's period.
    #[default]
    Watching,
    /// A question is out.
    Asking,
    /// The job was found quiescent and the notice was given (once a job).
    Told,
}

/// Where this PE is in the protocol: its requests and the wave it is in.
#[derive(Default)]
pub(in crate::ccd) struct Protocol {
    /// Callbacks waiting on this PE, by token; called with whether the job
    /// was found quiescent.
    pub(in crate::ccd) callbacks: HashMap<u64, Box<dyn FnOnce(bool)>>,
    pub(in crate::ccd) next_token: u64,
    pub(in crate::ccd) wave: Option<Wave>,
    pub(in crate::ccd) root: Root,
}
