//! Timeline tracing (`+trace FILE`): every PE records what it does in a
//! ring of its own, and at the end of the job the rings of every PE of
//! every process become one file that Perfetto (<https://ui.perfetto.dev>)
//! and Chrome's `about:tracing` open: one track per PE, grouped by
//! process, with an arrow from each user message's send to the handler
//! that takes it.
//!
//! The same hooks feed the job summary (`+stats`): per PE, the time busy
//! in handlers, idle and in the runtime, the messages sent and handled,
//! each handler's calls and time, and utilisation over time, printed to
//! stderr by process 0 at the end of the job (and plotted as SVG with
//! `+stats-plot FILE`). A PE records when either flag is given: a ring
//! with `+trace`, totals with `+stats`, each only when asked for.
//!
//! # What is recorded
//!
//! - every handler run (its registered function's name; runtime messages
//!   as `converse: <kind>`), idle periods, switches between user-level
//!   threads, scheduler calls returning;
//! - every message a PE sends (destination, length), and which user
//!   message each handler runs: the flow arrows (user messages only; the
//!   parts of a `multiple_send` bundle have none, their bundle being a
//!   runtime message);
//! - collective operations (broadcasts, multicasts, reductions) and CCS
//!   requests as marks;
//! - the program's own spans and marks ([`span`], [`mark`]).
//!
//! # Flows
//!
//! A PE numbers the user messages it sends, 1, 2, 3, … (all destinations
//! together), and the number travels in the message's header, in the
//! `coll` field, which the runtime uses only for collective messages. The
//! handler start that runs a user message records its sender and number
//! and clears the field (so a message kept and enqueued carries no stale
//! number); where the runtime clears a message's flags to pass it on as a
//! user message (a part of a bundle, a list-send's or broadcast's shared
//! copy, a runtime message restamped as a user one), it clears the field
//! with them. The writer draws an arrow for every number found at both
//! ends: exactly the handler run of the message sent, whatever the order
//! of arrival. A message whose buffer is shared (a copy of a broadcast
//! sent on as it is) is not numbered: its header is not written. Runtime
//! messages (flagged: collective routing, system messages) are recorded
//! as sends without arrows; one the runtime hands to a user handler as a
//! user message (a reduction's result at its root) is numbered like one.
//! The numbers wrap after 2³¹ sends of one PE; a trace that long (over a
//! minute of a PE's sends at full speed) may draw an arrow between two
//! messages of the same number. A message a PE sends itself from a handler
//! carries a mark instead (the high bit set, `ring_writer`'s
//! "Self-sends"), and its send is written with its start.
//!
//! # Cost
//!
//! A message costs two events, its send and its handler's start (a
//! handler's end is folded into the next start, `ring_writer`); one a PE
//! sends itself from a handler costs one (its send is folded into its
//! start). Handler
//! starts are timed in groups of about a microsecond (`ring_writer`;
//! `+trace-exact` times each); ends and sends are untimed (see `event`).
//! With `+stats`, every handler's start and end reads the clock (the
//! totals want exact intervals, `stats`). With neither flag (no recorder)
//! every hook is one test of a flag; without the crate feature `trace`
//! the hooks are empty.
//!
//! # Invariants
//!
//! - A PE's `Recorder` is touched only by the PE's thread (`!Send`, held
//!   by `rt::Pe` and this module's thread-local); its ring is written only
//!   there and read by any thread (`ring`).
//! - A process writes its part once (`JobTrace::take_part` hands it out
//!   once): at the end of the job, or at an abort (the at-exit hook), not
//!   both. An abort writes the timeline only; the summary needs every PE
//!   ended (`stats`).
//! - A PE's stats accumulator is the PE thread's until the recorder is
//!   dropped, then the job's (behind the log's mutex).
//!
//! # Concurrency
//!
//! Rings: one writer, any readers (`ring`). Names (handlers, spans) live
//! behind a mutex per PE, taken only when a name is first used and when
//! the trace is written. The count that numbers a PE's user messages is
//! its ring writer's, the PE thread's alone.
mod chrome;
pub(crate) mod clock;
pub(crate) mod event;
pub(crate) mod part;
mod plot;
mod report;
pub(crate) mod ring;
mod ring_writer;
pub(crate) mod stats;
pub(crate) mod watch;

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

pub(crate) use chrome::write_trace;
use event::{Category, Event};
pub(crate) use event::{Flow, SELF_SENT};
use part::{PePart, ProcessPart};
pub(crate) use plot::write_plot;
pub(crate) use report::stats_table;
use ring::Ring;
use ring_writer::RingWriter;

/// Events a PE's ring holds unless `+trace-buffer` says otherwise (16 bytes
/// each: 4 MiB per PE).
pub const DEFAULT_BUFFER_EVENTS: usize = 1 << 18;

/// Whether the calling PE records a trace (`+trace` given and the crate
/// feature `trace` on). False on a thread that is no PE.
pub fn enabled() -> bool {
    CURRENT.with(|c| c.borrow().is_some())
}

/// Begins a span named `name` on the calling PE's track; it ends when the
/// returned guard is dropped. Spans nest. Does nothing when the PE does
/// not trace (see [`enabled`]).
///
/// The guard belongs to the PE that made it (it is not `Send`): end it
/// before a migratable thread moves to another PE (`Thread::migrate_self`).
///
/// ```
/// # converse::Converse::new().args(["t", "+p", "1"]).run(|_| {
/// {
///     let _phase = converse::trace::span("setup");
///     // ... work shown as one slice named "setup"
/// }
/// # converse::exit(0);
/// # }).unwrap();
/// ```
pub fn span(name: impl Into<Cow<'static, str>>) -> Span {
    let recorder = CURRENT.with(|c| c.borrow().clone());
    match recorder {
        Some(r) => {
            let name = r.intern(name.into());
            r.push_timed(Event::SpanBegin {
                name,
                t: clock::now(),
            });
            Span(Some((r, name)))
        }
        None => Span(None),
    }
}

/// A point event named `name` on the calling PE's track (nothing when the
/// PE does not trace).
pub fn mark(name: impl Into<Cow<'static, str>>) {
    with_current(|r| r.mark(Category::User, name.into()));
}

/// A span begun by [`span`]; it ends when dropped.
#[must_use = "a span ends when its guard is dropped"]
pub struct Span(Option<(Rc<Recorder>, u32)>);

impl Drop for Span {
    fn drop(&mut self) {
        if let Some((r, name)) = self.0.take() {
            r.push_timed(Event::SpanEnd {
                name,
                t: clock::now(),
            });
        }
    }
}

thread_local! {
    /// The calling thread's PE's recorder, while it is a PE that traces.
    static CURRENT: RefCell<Option<Rc<Recorder>>> = const { RefCell::new(None) };
}

fn with_current(f: impl FnOnce(&Recorder)) {
    let r = CURRENT.with(|c| c.borrow().clone());
    if let Some(r) = r {
        f(&r);
    }
}

/// What a traced job shares: the file and the rings of this process's
/// PEs.
pub(crate) struct JobTrace {
    /// Where process 0 writes the trace (`+trace`; `None`: no rings).
    pub path: Option<PathBuf>,
    /// Events per ring, with `+trace`.
    capacity: Option<usize>,
    /// Handler starts timed by one clock read at most (`ring_writer`; 1
    /// with `+trace-exact`).
    max_group: u32,
    /// Whether PEs keep stats (`+stats`).
    stats: bool,
    /// The stats buckets' origin in ticks (`stats`): the trace's creation,
    /// before any PE starts.
    origin: u64,
    /// This process's number (its node, one per process).
    process: u32,
    /// Runtime message kinds by number (`msg::system`).
    runtime_kinds: Vec<(u32, String)>,
    logs: Mutex<Vec<Arc<PeLog>>>,
    /// This process's PEs and their nodes: each has a track, even one
    /// that had not started when an abort took the part.
    local_pes: Vec<(u32, u32)>,
    /// Set once the part is taken (written, or sent to process 0).
    taken: AtomicBool,
    /// Process 0's part between its taking and the writing (after the
    /// network's end): an abort meanwhile writes it.
    kept: Mutex<Option<ProcessPart>>,
}

/// One PE's ring and names, shared with the job so that the dump reaches
/// them from any thread.
struct PeLog {
    pe: u32,
    node: u32,
    ring: Option<Arc<Ring>>,
    names: Mutex<Names>,
    /// The PE's stats, once it has ended (see `stats`).
    stats: Mutex<Option<stats::Accum>>,
    /// The PE has ended: its ring is complete.
    done: AtomicBool,
}

#[derive(Default)]
struct Names {
    handlers: Vec<(u32, String)>,
    interned: Vec<String>,
}

/// Every traced job of the process, for the abort hook.
static LIVE: Mutex<Vec<Weak<JobTrace>>> = Mutex::new(Vec::new());

impl JobTrace {
    /// A trace of process `process`'s part of a job (its PEs and their
    /// nodes, `local_pes`): a timeline to be written to `path`, `capacity`
    /// events per PE (`+trace`), every handler start timed if `exact`
    /// (`+trace-exact`), and stats if `stats` (`+stats`).
    pub fn new(
        path: Option<PathBuf>,
        capacity: usize,
        exact: bool,
        stats: bool,
        process: usize,
        local_pes: Vec<(usize, usize)>,
        runtime_kinds: Vec<(u32, String)>,
    ) -> Arc<JobTrace> {
        clock::start();
        let trace = Arc::new(JobTrace {
            capacity: path.as_ref().map(|_| capacity),
            max_group: if exact { 1 } else { ring_writer::MAX_GROUP },
            path,
            stats,
            origin: clock::now(),
            process: process as u32,
            runtime_kinds,
            logs: Mutex::new(Vec::new()),
            local_pes: local_pes
                .into_iter()
                .map(|(pe, node)| (pe as u32, node as u32))
                .collect(),
            taken: AtomicBool::new(false),
            kept: Mutex::new(None),
        });
        // Only a timeline is written at an abort.
        if trace.path.is_some() {
            register_abort_hook();
            let mut live = crate::sync::lock(&LIVE);
            live.retain(|w| w.strong_count() > 0);
            live.push(Arc::downgrade(&trace));
        }
        trace
    }

    /// Whether the job's PEs keep stats (`+stats`).
    pub fn stats(&self) -> bool {
        self.stats
    }

    /// This process's part, once: `None` if it was taken already.
    /// `complete`: the PEs have all ended (else this is an abort).
    pub fn take_part(&self, complete: bool) -> Option<ProcessPart> {
        if self.taken.swap(true, Ordering::AcqRel) {
            return None;
        }
        let cal = clock::Calibration::now();
        let logs = crate::sync::lock(&self.logs).clone();
        let mut pes: Vec<PePart> = logs.iter().map(|log| log.part(&cal)).collect();
        for &(pe, node) in &self.local_pes {
            if !pes.iter().any(|p| p.pe == pe) {
                pes.push(PePart {
                    pe,
                    node,
                    capacity: self.capacity.unwrap_or(0) as u64,
                    ..PePart::default()
                });
            }
        }
        pes.sort_by_key(|p| p.pe);
        Some(ProcessPart {
            process: self.process,
            pid: std::process::id(),
            host: host_name(),
            complete,
            runtime_kinds: self.runtime_kinds.clone(),
            pes,
        })
    }

    /// Keeps process 0's part until it is written ([`JobTrace::take_kept`]),
    /// so that an abort in between still writes it.
    pub fn keep(&self, part: ProcessPart) {
        *crate::sync::lock(&self.kept) = Some(part);
    }

    /// The part [`JobTrace::keep`] kept, once.
    pub fn take_kept(&self) -> Option<ProcessPart> {
        crate::sync::lock(&self.kept).take()
    }

    /// The file this process writes at an abort: the trace's own path in
    /// process 0, `PATH.K` in process `K` (see [`write_trace`]).
    fn abort_path(&self) -> Option<PathBuf> {
        let path = self.path.clone()?;
        Some(if self.process == 0 {
            path
        } else {
            let mut p = path.into_os_string();
            p.push(format!(".{}", self.process));
            PathBuf::from(p)
        })
    }
}

/// At an abort, every traced job of the process writes what it has (once
/// per process: the hook serves every job).
fn register_abort_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| crate::proc::exit::at_exit(write_at_abort));
}

/// The abort hook: this process's part of every traced job, taken now or
/// kept since the job's end, written where [`JobTrace::abort_path`] says.
fn write_at_abort(ending: &crate::proc::exit::Ending) {
    let live: Vec<Arc<JobTrace>> = crate::sync::lock(&LIVE)
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    for trace in live {
        let Some(path) = trace.abort_path() else {
            continue;
        };
        let part = trace.take_part(false).or_else(|| {
            trace.take_kept().map(|mut p| {
                p.complete = false;
                p
            })
        });
        if let Some(part) = part {
            let note = format!("the job aborted: {}", ending.reason);
            match write_trace(&path, vec![part], &note) {
                Ok(summary) => crate::proc::io::error(format_args!(
                    "converse: trace of this process's PEs written to {} ({summary})\n",
                    path.display()
                )),
                Err(e) => crate::proc::io::error(format_args!("converse: {e}\n")),
            }
        }
    }
}

/// Writes `bytes` to `path` whole: beside it first, then renamed, so a
/// process ended while writing (an abort's grace period runs out) leaves
/// no half file at `path`.
fn write_whole(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    std::fs::write(&partial, bytes).and_then(|()| std::fs::rename(&partial, path))
}

fn host_name() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

impl PeLog {
    fn part(&self, cal: &clock::Calibration) -> PePart {
        let (events, lost, capacity) = match &self.ring {
            Some(ring) => {
                let snap = ring.snapshot(self.done.load(Ordering::Acquire));
                // The ring's folded self-sends back as a send and a start
                // (`ring_writer`'s "Self-sends").
                let events = event::expand_self_sends(self.pe, &snap.events)
                    .into_iter()
                    .map(|e| match e.time() {
                        Some(t) => e.with_time(cal.unix_ns(t)).encode(),
                        None => e.encode(),
                    })
                    .collect();
                (events, snap.lost, ring.capacity())
            }
            None => (Vec::new(), 0, 0),
        };
        let stats = crate::sync::lock(&self.stats)
            .as_ref()
            .map(|s| s.report(|t| cal.unix_ns(t), cal.scale()));
        let names = crate::sync::lock(&self.names);
        PePart {
            pe: self.pe,
            node: self.node,
            events,
            lost,
            capacity,
            handlers: names.handlers.clone(),
            names: names.interned.clone(),
            stats,
        }
    }
}

/// A PE's recorder: its ring's writer (which numbers its messages) and its
/// stats accumulator.
pub(crate) struct Recorder {
    /// The PE's ring and what it holds back, with `+trace` (the ring is
    /// also in `log`, for the readers; the writer in `Tracer::plain`).
    ring: Option<Rc<RingWriter>>,
    /// The PE's stats, with `+stats`.
    stats: Option<RefCell<stats::Accum>>,
    log: Arc<PeLog>,
    /// Names already interned, to their index.
    interned: RefCell<HashMap<Cow<'static, str>, u32>>,
}

impl Recorder {
    /// Writes `e`, a timed event other than a handler's start.
    fn push_timed(&self, e: Event) {
        if let (Some(ring), Some(t)) = (&self.ring, e.time()) {
            ring.push_timed(e, t);
        }
    }

    fn intern(&self, name: Cow<'static, str>) -> u32 {
        if let Some(&i) = self.interned.borrow().get(&name) {
            return i;
        }
        let mut names = crate::sync::lock(&self.log.names);
        let i = names.interned.len() as u32;
        names.interned.push(name.to_string());
        drop(names);
        self.interned.borrow_mut().insert(name, i);
        i
    }

    fn mark(&self, cat: Category, name: Cow<'static, str>) {
        if self.ring.is_none() {
            return;
        }
        let name = self.intern(name);
        self.push_timed(Event::Mark {
            name,
            cat,
            t: clock::now(),
        });
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if let Some(ring) = &self.ring {
            ring.finish();
        }
        if let Some(stats) = self.stats.take() {
            let mut stats = stats.into_inner();
            stats.finish(clock::now());
            *crate::sync::lock(&self.log.stats) = Some(stats);
        }
        self.log.done.store(true, Ordering::Release);
    }
}

/// A timed hook other than a handler's start (see [`Recorder::timed`]).
#[derive(Clone, Copy)]
enum Timed {
    IdleBegin,
    IdleEnd,
    Leave,
    Switch(u32),
}

/// What `rt::Pe` holds: the PE's recorder when it traces or keeps stats,
/// and its face towards the watchdog (`++watchdog`, `watch`) when the job
/// has one. Every hook is inlined, and a test of one flag when the PE does
/// none of these.
#[derive(Default)]
pub(crate) struct Tracer {
    rec: Option<Rc<Recorder>>,
    watch: Option<Arc<watch::PeWatch>>,
    /// The recorder's ring writer, when the PE records a trace and nothing
    /// else (no stats, no watchdog): a message's send, start and end then
    /// write it directly, without the tests of what else there is.
    plain: Option<Rc<RingWriter>>,
    /// Either of the two is there.
    on: bool,
}

/// A handler's start and end on a PE that records only a trace (see
/// [`Tracer::plain`]).
pub(crate) struct PlainRing<'a>(&'a RingWriter);

impl PlainRing<'_> {
    /// User handler `index` starts, running the user message `flow` (`seq`
    /// 0: none); timed or not (`ring_writer`).
    #[inline(always)]
    pub fn begin(&self, index: usize, flow: Flow) {
        self.0.begin(index as u32, false, flow);
    }

    /// The innermost handler returned.
    #[inline(always)]
    pub fn end(&self) {
        self.0.end();
    }

    /// Whether a handler's end waits to be written (`ring_writer`'s
    /// "Folding").
    #[inline(always)]
    pub fn holds_an_end(&self) -> bool {
        self.0.holds_an_end()
    }

    /// Message `seq` (0: no number) of `len` bytes leaves for PE `dest`;
    /// only when no end waits ([`PlainRing::holds_an_end`]).
    #[inline(always)]
    pub fn sent_now(&self, dest: usize, seq: u32, len: usize) {
        self.0.push_send_now(dest, false, seq, len);
    }

    /// What the header of a message this PE sends itself carries instead
    /// of a number, its send not written (`ring_writer`'s "Self-sends");
    /// only when no end waits.
    #[inline(always)]
    pub fn self_send_mark(&self) -> u32 {
        self.0.self_send_mark()
    }

    /// User handler `index` starts, running the message of `len` bytes
    /// this PE sent itself with `mark` ([`PlainRing::self_send_mark`]).
    #[inline(always)]
    pub fn begin_self_sent(&self, index: usize, mark: u32, len: usize) {
        self.0.begin_self_sent(index as u32, mark, len);
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        if let Some(w) = &self.watch {
            w.finished();
        }
    }
}

impl Tracer {
    /// PE `pe` of node `node`'s tracer, recording if the job traces, and
    /// telling `watch` what it does if the job has a watchdog.
    pub fn new(
        job: Option<&Arc<JobTrace>>,
        watch: Option<Arc<watch::PeWatch>>,
        pe: usize,
        node: usize,
    ) -> Tracer {
        let rec = Tracer::recorder(job, pe, node);
        let plain = match (&rec, &watch) {
            (Some(r), None) if r.stats.is_none() => r.ring.clone(),
            _ => None,
        };
        Tracer {
            on: rec.is_some() || watch.is_some(),
            rec,
            watch,
            plain,
        }
    }

    /// The ring alone, if the PE records a trace and nothing else.
    #[inline(always)]
    pub fn plain(&self) -> Option<PlainRing<'_>> {
        if cfg!(feature = "trace") {
            self.plain.as_deref().map(PlainRing)
        } else {
            None
        }
    }

    fn recorder(job: Option<&Arc<JobTrace>>, pe: usize, node: usize) -> Option<Rc<Recorder>> {
        if !cfg!(feature = "trace") {
            return None;
        }
        let job = job?;
        let log = Arc::new(PeLog {
            pe: pe as u32,
            node: node as u32,
            ring: job.capacity.map(|c| Arc::new(Ring::new(c))),
            names: Mutex::new(Names::default()),
            stats: Mutex::new(None),
            done: AtomicBool::new(false),
        });
        crate::sync::lock(&job.logs).push(log.clone());
        let stats = job
            .stats
            .then(|| RefCell::new(stats::Accum::new(job.origin, clock::now())));
        Some(Rc::new(Recorder {
            ring: log
                .ring
                .clone()
                .map(|ring| Rc::new(RingWriter::new(ring, job.max_group))),
            stats,
            log,
            interned: RefCell::new(HashMap::new()),
        }))
    }

    /// The PE's face towards the watchdog, if the job has one.
    pub fn watch(&self) -> Option<&watch::PeWatch> {
        self.watch.as_deref()
    }

    /// Makes this the calling thread's tracer for [`span`] and [`mark`]
    /// (`None`: the thread stops being a PE). Only a recorder with a ring
    /// is installed: with `+stats` alone, spans and marks stay free.
    pub fn install(this: Option<&Tracer>) {
        let r = this
            .and_then(|t| t.rec.clone())
            .filter(|r| r.ring.is_some());
        CURRENT.with(|c| *c.borrow_mut() = r);
    }

    #[inline]
    fn rec(&self) -> Option<&Recorder> {
        if cfg!(feature = "trace") {
            self.rec.as_deref()
        } else {
            None
        }
    }

    /// Whether the PE records a timeline (`+trace`: a ring).
    pub fn records(&self) -> bool {
        self.rec().is_some_and(|r| r.ring.is_some())
    }

    /// Whether the PE records or is watched: hot paths test this once and
    /// take a path of their own when it is.
    #[inline(always)]
    pub fn on(&self) -> bool {
        self.on
    }

    /// The handler at `index` is `name` (its registration).
    pub fn name_handler(&self, index: usize, name: impl FnOnce() -> String) {
        if self.on {
            let name = name();
            if let Some(w) = &self.watch {
                w.name_handler(index as u32, &name);
            }
            if let Some(r) = self.rec() {
                r.name_handler(index as u32, name);
            }
        }
    }

    // The hooks. Those of the message path (`begin`, `end`, `sent`) inline
    // the recording: their callers test [`Tracer::on`]
    // first and call them from a path of their own, out of line, so that
    // the untraced path keeps its registers (with the hooks inlined into
    // it, the self-send loop took 25 more instructions per message with
    // tracing off, measured with callgrind). The others (idle, threads,
    // scheduler calls) are a test of `None` and a call.

    /// A user handler (table index `index`) starts, running the user
    /// message `flow` (`seq` 0: none; "Flows").
    #[inline]
    pub fn begin(&self, index: usize, flow: Flow) {
        if let Some(r) = self.rec() {
            r.begin(index as u32, false, flow);
        }
        if let Some(w) = &self.watch {
            w.begin(index as u32);
        }
    }

    /// A runtime message of system kind `kind` is handled.
    #[inline]
    pub fn begin_runtime(&self, kind: u32) {
        if let Some(r) = self.rec() {
            r.begin(kind, true, event::Flow { src: 0, seq: 0 });
        }
        if let Some(w) = &self.watch {
            w.begin(kind | watch::RUNTIME_KEY);
        }
    }

    /// The innermost handler returned.
    #[inline]
    pub fn end(&self) {
        if let Some(r) = self.rec() {
            r.end();
        }
        if let Some(w) = &self.watch {
            w.end();
        }
    }

    /// The PE found nothing to do.
    #[inline]
    pub fn idle_begin(&self) {
        if let Some(r) = self.rec() {
            r.timed(Timed::IdleBegin);
        }
        if let Some(w) = &self.watch {
            w.idle_begin();
        }
    }

    /// The PE found work again.
    #[inline]
    pub fn idle_end(&self) {
        if let Some(r) = self.rec() {
            r.timed(Timed::IdleEnd);
        }
        if let Some(w) = &self.watch {
            w.idle_end();
        }
    }

    /// A scheduler call returns to its caller.
    #[inline]
    pub fn scheduler_leave(&self) {
        if let Some(r) = self.rec() {
            r.timed(Timed::Leave);
        }
    }

    /// The PE switches to user-level thread `thread` (0: the main flow).
    #[inline]
    pub fn switch(&self, thread: u32) {
        if let Some(r) = self.rec() {
            r.timed(Timed::Switch(thread));
        }
        // Threads that compute and yield make progress without a handler.
        if let Some(w) = &self.watch {
            w.beat();
        }
    }

    /// A message of `len` bytes leaves for PE `dest` (node `dest` if
    /// `node`); `user`: a user message sent by this PE, which gets the
    /// next number, returned (0: none) for the caller to write in the
    /// header it sends ("Flows"). Called only when the PE traces.
    #[inline]
    pub fn sent(&self, dest: usize, node: bool, user: bool, len: usize) -> u32 {
        match self.rec() {
            Some(r) => r.sent(dest, node, user, len),
            None => 0,
        }
    }

    /// The PE's code was left by an unwind (`exit`, a panic): the
    /// handlers open in the stats end now (the timeline shows them
    /// unfinished, as it always did).
    pub fn unwound(&self) {
        if let Some(stats) = self.rec().and_then(|r| r.stats.as_ref()) {
            stats.borrow_mut().unwound(clock::now());
        }
    }

    /// A collective operation happened here: a mark.
    pub fn collective(&self, what: &'static str) {
        if let Some(r) = self.rec() {
            r.mark(Category::Collective, Cow::Borrowed(what));
        }
    }

    /// A CCS request for handler `name` is handled here.
    pub fn ccs_request(&self, name: &str) {
        if let Some(r) = self.rec() {
            r.mark(Category::Ccs, Cow::Owned(format!("CCS {name}")));
        }
    }
}

/// The recording, out of line (see the hooks above).
impl Recorder {
    fn name_handler(&self, index: u32, name: String) {
        let mut names = crate::sync::lock(&self.log.names);
        match names.handlers.iter_mut().find(|(i, _)| *i == index) {
            Some(entry) => entry.1 = name,
            None => names.handlers.push((index, name)),
        }
    }

    #[inline]
    fn begin(&self, index: u32, runtime: bool, flow: event::Flow) {
        match &self.stats {
            // The stats read the clock at every start: the ring's start is
            // timed with it.
            Some(stats) => {
                let t = clock::now();
                if let Some(ring) = &self.ring {
                    ring.begin_at(index, runtime, flow, t);
                }
                stats_begin(stats, index, runtime, t);
            }
            None => {
                if let Some(ring) = &self.ring {
                    ring.begin(index, runtime, flow);
                }
            }
        }
    }

    #[inline]
    fn end(&self) {
        if let Some(ring) = &self.ring {
            ring.end();
        }
        if let Some(stats) = &self.stats {
            stats_end(stats);
        }
    }

    #[inline(never)]
    fn timed(&self, what: Timed) {
        if self.ring.is_none() && matches!(what, Timed::Leave) {
            return;
        }
        let t = clock::now();
        self.push_timed(match what {
            Timed::IdleBegin => Event::IdleBegin { t },
            Timed::IdleEnd => Event::IdleEnd { t },
            Timed::Leave => Event::SchedulerLeave { t },
            Timed::Switch(thread) => Event::Switch { thread, t },
        });
        if let Some(stats) = &self.stats {
            let mut s = stats.borrow_mut();
            match what {
                Timed::IdleBegin => s.idle_begin(t),
                Timed::IdleEnd => s.idle_end(t),
                Timed::Leave => {}
                Timed::Switch(thread) => s.switch(thread, t),
            }
        }
    }

    #[inline]
    fn sent(&self, dest: usize, node: bool, user: bool, len: usize) -> u32 {
        if let Some(stats) = &self.stats {
            stats.borrow_mut().sent(user, len);
        }
        match &self.ring {
            Some(ring) => ring.sent(dest, node, user, len),
            None => 0,
        }
    }
}

// The stats' share of the message-path hooks, out of line: a traced job
// without `+stats` keeps its hooks as short as before.

#[inline(never)]
fn stats_begin(stats: &RefCell<stats::Accum>, index: u32, runtime: bool, t: u64) {
    stats.borrow_mut().begin(index, runtime, t);
}

#[inline(never)]
fn stats_end(stats: &RefCell<stats::Accum>) {
    stats.borrow_mut().end(clock::now());
}
