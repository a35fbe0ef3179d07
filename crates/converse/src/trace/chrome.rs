//! Writes gathered trace parts as one JSON trace-event file (the "JSON
//! Object Format" of Chrome's trace viewer, which Perfetto also opens).
//!
//! # Layout of the file
//!
//! - One process (`pid`) per Converse process, named `process K (host,
//!   pid P)`; one thread (`tid`) per PE, named `PE N`: one track per PE.
//! - Handler runs, spans and idle periods are complete events (`"ph":
//!   "X"`); marks and thread switches are instant events (`"ph": "i"`).
//! - A user message is a flow: `"ph": "s"` at its send (bound to the
//!   slice that sent it) and `"ph": "f"` at the start of the handler that
//!   runs it (`"bp": "e"`: bound to that slice). Only pairs whose both
//!   ends are in the file, once each, are drawn; the rest are counted in
//!   the summary (`ambiguous_flows`: numbers seen more than once).
//! - A PE whose ring wrapped has a mark at its first event saying how
//!   many earlier events were lost; the top-level `"converse"` object
//!   (which the viewers ignore) lists them, with the flows matched and
//!   the processes missing, for tools and tests.
//!
//! # Placing untimed events
//!
//! A clock reading times the handler start after it. The untimed handler
//! starts between two timed events at `ta` and `tb` (a group, see
//! `ring_writer`) share `ta..tb` evenly with the start that opened the
//! group; a group longer than [`STRETCHED_NS`] has its slices marked
//! ("timing" in their args: their times are a guess). The other untimed
//! events (ends, sends) are placed just before the next placed event, one
//! nanosecond apart (closer if the gap is smaller), in order: a handler's
//! slice runs until the next thing its PE did.
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

use super::event::{Event, Flow};
use super::part::{PePart, ProcessPart};

/// A message's number: sender PE and its number there (`trace`'s
/// "Flows").
type FlowKey = (u32, u32);

/// Writes `parts` (one per process present) as one trace file at `path`;
/// `note` says why the trace ends early, if it does. Returns a one-line
/// summary for the log.
pub(crate) fn write_trace(
    path: &Path,
    parts: Vec<ProcessPart>,
    note: &str,
) -> Result<String, String> {
    let (json, summary) = render(parts, note);
    super::write_whole(path, json.as_bytes())
        .map_err(|e| format!("cannot write the trace to {}: {e}", path.display()))?;
    Ok(summary)
}

/// An open slice: its start, name, category, and what its args say of
/// its timing (see [`Placed::shared`]).
struct Open<'a> {
    at: f64,
    name: Cow<'a, str>,
    cat: &'static str,
    shared: Option<(usize, f64)>,
}

/// Groups of handler starts spanning more than this (nanoseconds) are
/// marked in the file: the handlers' times within it are a guess.
const STRETCHED_NS: f64 = 5000.0;

/// One PE's events, decoded and placed in time (nanoseconds since the
/// earliest event of the trace).
struct Placed {
    pid: u32,
    /// The runtime message kinds' names of the PE's process.
    kinds: std::rc::Rc<HashMap<u32, String>>,
    part: PePart,
    events: Vec<(f64, Event)>,
    /// Per event: for a handler start of a group longer than
    /// [`STRETCHED_NS`], the group's size and span.
    shared: Vec<Option<(usize, f64)>>,
    /// Handler starts the PE timed (the others were spread).
    timed_starts: u64,
}

/// Places `part`'s events in time, in nanoseconds since `base` (the
/// earliest timed event of the trace: subtracted as integers, since a Unix
/// time in nanoseconds is a multiple of 256 as an `f64`).
fn place(pid: u32, kinds: std::rc::Rc<HashMap<u32, String>>, part: PePart, base: u64) -> Placed {
    let rel = |t: u64| t.saturating_sub(base) as f64;
    // 1. A clock reading times the handler start after it; a start's
    // folded end becomes an event of its own before it.
    let mut events: Vec<(Option<f64>, Event)> = Vec::with_capacity(part.events.len());
    let mut clock: Option<u64> = None;
    let mut timed_starts = 0;
    for e in part.events.iter().filter_map(|&w| Event::decode(w)) {
        match e {
            Event::Begin {
                index,
                runtime,
                closes,
                flow,
            } => {
                if closes {
                    events.push((None, Event::End));
                }
                let t = clock.take().map(rel);
                timed_starts += u64::from(t.is_some());
                events.push((
                    t,
                    Event::Begin {
                        index,
                        runtime,
                        closes: false,
                        flow,
                    },
                ));
            }
            other => {
                // A reading followed by something else: a moment alone.
                let new = match other {
                    Event::Clock { t } => Some(t),
                    _ => None,
                };
                if let Some(t) = std::mem::replace(&mut clock, new) {
                    events.push((Some(rel(t)), Event::Clock { t }));
                }
                if new.is_none() {
                    events.push((other.time().map(rel), other));
                }
            }
        }
    }
    if let Some(t) = clock {
        events.push((Some(rel(t)), Event::Clock { t }));
    }
    // 2. The untimed starts between two timed events (a group, see
    // `ring_writer`) share its span evenly with the start that opened it.
    let mut shared = vec![None; events.len()];
    let timed: Vec<usize> = (0..events.len())
        .filter(|&i| events[i].0.is_some())
        .collect();
    for pair in timed.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        let starts: Vec<usize> = (a + 1..b)
            .filter(|&i| matches!(events[i].1, Event::Begin { .. }))
            .collect();
        if starts.is_empty() {
            continue;
        }
        let (ta, tb) = (events[a].0.unwrap_or(0.0), events[b].0.unwrap_or(0.0));
        let size = starts.len() + 1;
        let share = (tb - ta).max(0.0) / size as f64;
        for (i, &k) in starts.iter().enumerate() {
            events[k].0 = Some(ta + (i + 1) as f64 * share);
        }
        if tb - ta > STRETCHED_NS {
            let group = Some((size, tb - ta));
            for &k in starts.iter().chain([a].iter()) {
                if matches!(events[k].1, Event::Begin { .. }) {
                    shared[k] = group;
                }
            }
        }
    }
    // 3. The other untimed events sit just before the next placed one.
    let mut out = Vec::with_capacity(events.len());
    let mut last_placed: Option<f64> = None;
    let mut pending: Vec<Event> = Vec::new();
    let flush =
        |pending: &mut Vec<Event>, ta: Option<f64>, tb: f64, out: &mut Vec<(f64, Event)>| {
            let k = pending.len();
            if k == 0 {
                return;
            }
            let room = ta.map_or(f64::INFINITY, |ta| (tb - ta) / (k as f64 + 1.0));
            let step = room.clamp(0.0, 1.0);
            for (i, e) in pending.drain(..).enumerate() {
                out.push((tb - (k - i) as f64 * step, e));
            }
        };
    let mut out_shared = Vec::with_capacity(events.len());
    for ((t, e), note) in events.into_iter().zip(shared) {
        match t {
            Some(t) => {
                let before = pending.len();
                flush(&mut pending, last_placed, t, &mut out);
                out_shared.extend(std::iter::repeat_n(None, before));
                out.push((t, e));
                out_shared.push(note);
                last_placed = Some(t);
            }
            None => pending.push(e),
        }
    }
    // A tail of untimed events (the PE ended inside a handler, say):
    // placed just after the last placed one.
    let k = pending.len();
    let tail = last_placed.unwrap_or(0.0) + k as f64 + 1.0;
    flush(&mut pending, last_placed, tail, &mut out);
    out_shared.extend(std::iter::repeat_n(None, k));
    Placed {
        pid,
        kinds,
        part,
        events: out,
        shared: out_shared,
        timed_starts,
    }
}

/// The file being written: its JSON text, events separated by commas, and
/// the time its event times count from (nanoseconds, as `Placed`'s).
struct Out {
    text: String,
    first: bool,
    t0: f64,
}

impl Out {
    /// Appends one event (a JSON object).
    fn emit(&mut self, event: String) {
        if !self.first {
            self.text.push_str(",\n");
        }
        self.first = false;
        self.text.push_str(&event);
    }

    /// Whole nanoseconds since `t0`.
    fn ns(&self, t: f64) -> u64 {
        (t - self.t0).max(0.0).round() as u64
    }

    /// A timestamp: microseconds since `t0`, three decimals.
    fn ts(&self, t: f64) -> String {
        micros(self.ns(t))
    }
}

/// Microseconds with three decimals, from whole nanoseconds (integer
/// formatting: a float's took a third of the writer's time).
fn micros(ns: u64) -> String {
    format!("{}.{:03}", ns / 1000, ns % 1000)
}

/// What the summary counts over every PE.
#[derive(Default)]
struct Tally {
    pes: Vec<u32>,
    handler_runs: u64,
    stretched_starts: u64,
    /// PEs whose ring wrapped, and the events each lost.
    wrapped: Vec<(u32, u64)>,
}

/// The messages drawn as arrows: the keys present at both ends, once at
/// each (a key seen twice, after 2³² sends of a PE or in a malformed part,
/// would give one arrow several heads: it gets none, and the summary
/// counts it).
struct Flows {
    ids: HashMap<FlowKey, u64, FastHash>,
    sends: usize,
    receipts: usize,
    ambiguous: u64,
}

fn flows(placed: &[Placed]) -> Flows {
    let mut sends: HashMap<FlowKey, u32, FastHash> = HashMap::default();
    let mut receipts: HashMap<FlowKey, u32, FastHash> = HashMap::default();
    for p in placed {
        for (_, e) in &p.events {
            match *e {
                Event::Send { seq, .. } if seq != 0 => {
                    *sends.entry((p.part.pe, seq)).or_default() += 1;
                }
                Event::Begin {
                    flow: Some(Flow { src, seq }),
                    ..
                } => {
                    *receipts.entry((src, seq)).or_default() += 1;
                }
                _ => {}
            }
        }
    }
    let mut ids: HashMap<FlowKey, u64, FastHash> = HashMap::default();
    let mut ambiguous = 0u64;
    for (key, sent) in &sends {
        match (sent, receipts.get(key)) {
            (1, Some(1)) => {
                let next = ids.len() as u64 + 1;
                ids.insert(*key, next);
            }
            (_, Some(_)) => ambiguous += 1,
            (_, None) => {}
        }
    }
    Flows {
        ids,
        sends: sends.len(),
        receipts: receipts.len(),
        ambiguous,
    }
}

fn render(parts: Vec<ProcessPart>, note: &str) -> (String, String) {
    let mut out = Out {
        text: String::with_capacity(1 << 16),
        first: true,
        t0: 0.0,
    };
    out.text
        .push_str("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
    let processes: Vec<u32> = parts.iter().map(|p| p.process).collect();
    let complete = parts.iter().all(|p| p.complete);
    let base = parts
        .iter()
        .flat_map(|p| &p.pes)
        .flat_map(|pe| &pe.events)
        .filter_map(|&w| Event::decode(w)?.time())
        .min()
        .unwrap_or(0);
    let mut placed: Vec<Placed> = Vec::new();
    for p in parts {
        write_process_names(&mut out, &p);
        let kinds = std::rc::Rc::new(p.runtime_kinds.into_iter().collect::<HashMap<_, _>>());
        for pe in p.pes {
            placed.push(place(p.process, kinds.clone(), pe, base));
        }
    }
    // Times relative to the earliest event.
    let t0 = placed
        .iter()
        .filter_map(|p| p.events.first().map(|e| e.0))
        .fold(f64::INFINITY, f64::min);
    out.t0 = if t0.is_finite() { t0 } else { 0.0 };
    let flows = flows(&placed);
    let timed_starts: u64 = placed.iter().map(|p| p.timed_starts).sum();
    let mut tally = Tally::default();
    for p in &placed {
        PeTrack::new(&mut out, p).write(&flows.ids, &mut tally);
    }
    let mut text = out.text;
    text.push_str("\n],\n\"converse\":{");
    let _ = write!(
        text,
        "\"complete\":{complete},\"note\":{},\"processes\":{processes:?},\"pes\":{:?},\"handler_runs\":{},\"timed_starts\":{timed_starts},\"stretched_starts\":{},\"user_messages_sent\":{},\"user_messages_received\":{},\"flows\":{},\"ambiguous_flows\":{},\"wrapped\":[",
        quote(note),
        tally.pes,
        tally.handler_runs,
        tally.stretched_starts,
        flows.sends,
        flows.receipts,
        flows.ids.len(),
        flows.ambiguous,
    );
    for (i, (pe, lost)) in tally.wrapped.iter().enumerate() {
        let _ = write!(
            text,
            "{}{{\"pe\":{pe},\"lost\":{lost}}}",
            if i == 0 { "" } else { "," }
        );
    }
    text.push_str("]}}\n");
    (text, summary(&tally, flows.ids.len()))
}

/// The one-line summary for the log.
fn summary(tally: &Tally, flows: usize) -> String {
    let mut summary = format!(
        "{} PEs, {} handler runs, {flows} messages with flows",
        tally.pes.len(),
        tally.handler_runs
    );
    if !tally.wrapped.is_empty() {
        let lost: u64 = tally.wrapped.iter().map(|w| w.1).sum();
        let _ = write!(
            summary,
            "; the buffers of {} PEs wrapped: {lost} earliest events lost (raise +trace-buffer)",
            tally.wrapped.len()
        );
    }
    summary
}

/// A process's name and place among the tracks.
fn write_process_names(out: &mut Out, p: &ProcessPart) {
    out.emit(format!(
        "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{},\"args\":{{\"name\":{}}}}}",
        p.process,
        quote(&format!(
            "process {} ({}, pid {})",
            p.process, p.host, p.pid
        ))
    ));
    out.emit(format!(
        "{{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":{0},\"args\":{{\"sort_index\":{0}}}}}",
        p.process
    ));
}

/// One PE's track being written: the slices open on each of its
/// user-level threads (0: the main flow; a thread that suspends inside a
/// handler ends it when it is resumed), and its idle period.
struct PeTrack<'o, 'p> {
    out: &'o mut Out,
    p: &'p Placed,
    pid: u32,
    tid: u32,
    /// The PE's handler names, sorted by index (a binary search per run).
    handlers: Vec<(u32, &'p str)>,
    stacks: HashMap<u32, Vec<Open<'p>>, FastHash>,
    current: u32,
    idle_since: Option<f64>,
}

impl<'o, 'p> PeTrack<'o, 'p> {
    fn new(out: &'o mut Out, p: &'p Placed) -> PeTrack<'o, 'p> {
        let mut handlers: Vec<(u32, &str)> = p
            .part
            .handlers
            .iter()
            .map(|(i, n)| (*i, n.as_str()))
            .collect();
        handlers.sort_unstable_by_key(|h| h.0);
        PeTrack {
            out,
            p,
            pid: p.pid,
            tid: p.part.pe,
            handlers,
            stacks: HashMap::default(),
            current: 0,
            idle_since: None,
        }
    }

    /// Writes the track: its names, its events, then the slices still
    /// open, ended at its last event.
    fn write(mut self, ids: &HashMap<FlowKey, u64, FastHash>, tally: &mut Tally) {
        let (pid, tid, p) = (self.pid, self.tid, self.p);
        tally.pes.push(tid);
        self.out.emit(format!(
            "{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{pid},\"tid\":{tid},\"args\":{{\"name\":\"PE {tid}\"}}}}"
        ));
        self.out.emit(format!(
            "{{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":{pid},\"tid\":{tid},\"args\":{{\"sort_index\":{tid}}}}}"
        ));
        if p.part.lost > 0 {
            let at = p.events.first().map_or(self.out.t0, |e| e.0);
            tally.wrapped.push((tid, p.part.lost));
            let line = format!(
                "{{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"converse\",\"name\":{},\"pid\":{pid},\"tid\":{tid},\"ts\":{}}}",
                quote(&format!(
                    "trace buffer wrapped: {} earlier events lost (+trace-buffer {})",
                    p.part.lost, p.part.capacity
                )),
                self.out.ts(at)
            );
            self.out.emit(line);
        }
        for (i, &(t, e)) in p.events.iter().enumerate() {
            self.event(i, t, e, ids, tally);
        }
        // What is still open ends at the PE's last event.
        let last = p.events.last().map_or(self.out.t0, |e| e.0);
        if let Some(a) = self.idle_since.take() {
            self.slice(&idle(a), last, false);
        }
        let mut stacks: Vec<(u32, Vec<Open<'_>>)> =
            std::mem::take(&mut self.stacks).into_iter().collect();
        stacks.sort_unstable_by_key(|s| s.0);
        for (_, stack) in &mut stacks {
            while let Some(o) = stack.pop() {
                self.slice(&o, last, true);
            }
        }
    }

    /// The open slices of the current user-level thread.
    fn stack(&mut self) -> &mut Vec<Open<'p>> {
        self.stacks.entry(self.current).or_default()
    }

    /// A name of the PE's name table.
    fn name_of(&self, i: u32) -> String {
        self.p
            .part
            .names
            .get(i as usize)
            .cloned()
            .unwrap_or_else(|| format!("name {i}"))
    }

    /// What a handler start at `index` is called.
    fn handler_name(&self, index: u32, runtime: bool) -> Cow<'p, str> {
        if runtime && index == 0 {
            Cow::Borrowed("converse: reduction contribution")
        } else if runtime {
            Cow::Owned(match self.p.kinds.get(&index) {
                Some(kind) => format!("converse: {kind}"),
                None => format!("converse: runtime message kind {index}"),
            })
        } else {
            match self.handlers.binary_search_by_key(&index, |h| h.0) {
                Ok(i) => Cow::Borrowed(self.handlers[i].1),
                Err(_) => Cow::Owned(format!("handler {index}")),
            }
        }
    }

    /// An instant event on this track.
    fn instant(&mut self, cat: &str, name: &str, t: f64) {
        let line = format!(
            "{{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"{cat}\",\"name\":{},\"pid\":{},\"tid\":{},\"ts\":{}}}",
            quote(name),
            self.pid,
            self.tid,
            self.out.ts(t)
        );
        self.out.emit(line);
    }

    /// Event `i` of the PE, at `t`.
    fn event(
        &mut self,
        i: usize,
        t: f64,
        e: Event,
        ids: &HashMap<FlowKey, u64, FastHash>,
        tally: &mut Tally,
    ) {
        let (pid, tid) = (self.pid, self.tid);
        match e {
            Event::Begin {
                index,
                runtime,
                flow,
                ..
            } => {
                // The arrow's end, bound to the slice that starts here
                // (`"bp":"e"`: the enclosing slice).
                if let Some(id) = flow.and_then(|f| ids.get(&(f.src, f.seq))) {
                    let line = format!(
                        "{{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"message\",\"name\":\"message\",\"id\":{id},\"pid\":{pid},\"tid\":{tid},\"ts\":{}}}",
                        self.out.ts(t)
                    );
                    self.out.emit(line);
                }
                let name = self.handler_name(index, runtime);
                let shared = self.p.shared[i];
                tally.stretched_starts += u64::from(shared.is_some());
                self.stack().push(Open {
                    at: t,
                    name,
                    cat: "handler",
                    shared,
                });
            }
            Event::End => {
                // Spans left open inside the handler end with it.
                while let Some(o) = self.stack().pop() {
                    self.slice(&o, t, false);
                    if o.cat == "handler" {
                        tally.handler_runs += 1;
                        break;
                    }
                }
            }
            Event::SpanBegin { name, .. } => {
                let name = Cow::Owned(self.name_of(name));
                self.stack().push(Open {
                    at: t,
                    name,
                    cat: "span",
                    shared: None,
                });
            }
            Event::SpanEnd { name, .. } => {
                let want = self.name_of(name);
                let stack = self.stack();
                if let Some(pos) = stack
                    .iter()
                    .rposition(|o| o.cat == "span" && o.name == want)
                {
                    // Spans opened after it and not closed end with it.
                    let ended: Vec<Open<'p>> = stack.drain(pos..).rev().collect();
                    for o in &ended {
                        self.slice(o, t, false);
                    }
                }
            }
            Event::IdleBegin { .. } => {
                self.idle_since.get_or_insert(t);
            }
            Event::IdleEnd { .. } => {
                if let Some(a) = self.idle_since.take() {
                    self.slice(&idle(a), t, false);
                }
            }
            Event::Switch { thread, .. } => {
                self.current = thread;
                let name = if thread == 0 {
                    "resume the main flow".to_string()
                } else {
                    format!("resume thread {thread}")
                };
                self.instant("thread", &name, t);
            }
            Event::Mark { name, cat, .. } => {
                let name = self.name_of(name);
                self.instant(cat.name(), &name, t);
            }
            Event::Send {
                dest,
                node,
                seq,
                len,
            } => {
                if let Some(id) = ids.get(&(tid, seq)) {
                    let line = format!(
                        "{{\"ph\":\"s\",\"cat\":\"message\",\"name\":\"message\",\"id\":{id},\"pid\":{pid},\"tid\":{tid},\"ts\":{},\"args\":{{\"to\":\"{} {dest}\",\"bytes\":{len}}}}}",
                        self.out.ts(t),
                        if node { "node" } else { "PE" }
                    );
                    self.out.emit(line);
                }
            }
            Event::SchedulerLeave { .. } | Event::Clock { .. } => {}
            // A PE's part holds these as the send and the start they
            // stand for (`event::expand_self_sends`): none comes here.
            Event::SelfSentBegin { .. } => {}
        }
    }

    /// A slice from `o`'s start to `b`; `unfinished`: it was still open
    /// when the PE's events end.
    fn slice(&mut self, o: &Open<'_>, b: f64, unfinished: bool) {
        let mut args = Vec::new();
        if unfinished {
            args.push("\"unfinished\":true".to_string());
        }
        if let Some((size, span)) = o.shared {
            args.push(format!(
                "\"timing\":\"not timed apart: one of {size} handler runs over {:.1} us, each drawn with an equal share\"",
                span / 1000.0
            ));
        }
        let args = if args.is_empty() {
            String::new()
        } else {
            format!(",\"args\":{{{}}}", args.join(","))
        };
        let line = format!(
            "{{\"ph\":\"X\",\"cat\":\"{}\",\"name\":{},\"pid\":{},\"tid\":{},\"ts\":{},\"dur\":{}{args}}}",
            o.cat,
            quote(&o.name),
            self.pid,
            self.tid,
            self.out.ts(o.at),
            // The end's whole nanosecond less the start's, rounded alike:
            // a slice never ends past its parent's end or its successor's
            // start by a rounding.
            micros(self.out.ns(b).saturating_sub(self.out.ns(o.at)))
        );
        self.out.emit(line);
    }
}

/// An idle period from `at`.
fn idle(at: f64) -> Open<'static> {
    Open {
        at,
        name: Cow::Borrowed("idle"),
        cat: "idle",
        shared: None,
    }
}

/// A hasher for the writer's tables: a multiply-rotate per word, as
/// rustc's FxHash, instead of SipHash, which took a quarter of the writer's
/// time. The keys come from the job's own processes (a peer that sends
/// colliding numbers only slows the writing of its own job's trace).
#[derive(Clone, Copy, Default)]
struct FastHash;

impl std::hash::BuildHasher for FastHash {
    type Hasher = FastHasher;
    fn build_hasher(&self) -> FastHasher {
        FastHasher(0)
    }
}

struct FastHasher(u64);

impl std::hash::Hasher for FastHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_u8(&mut self, n: u8) {
        self.write_u64(u64::from(n));
    }
}

/// `s` as a JSON string.
fn quote(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            '\n' => q.push_str("\\n"),
            '\r' => q.push_str("\\r"),
            '\t' => q.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(q, "\\u{:04x}", c as u32);
            }
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A timed handler start: a clock reading and the start.
    fn timed_start(index: u32, t: u64) -> [[u64; 2]; 2] {
        [Event::Clock { t }.encode(), start(index, false)]
    }

    fn start(index: u32, closes: bool) -> [u64; 2] {
        Event::Begin {
            index,
            runtime: false,
            closes,
            flow: None,
        }
        .encode()
    }

    fn times(p: &Placed) -> Vec<f64> {
        p.events.iter().map(|e| e.0).collect()
    }

    #[test]
    fn untimed_events_sit_just_before_the_next_timed_one() {
        let mut events = timed_start(1, 1000).to_vec();
        events.push(Event::End.encode());
        events.extend(timed_start(1, 5000));
        let part = PePart {
            pe: 0,
            events,
            ..PePart::default()
        };
        let p = place(0, Default::default(), part, 0);
        assert_eq!(times(&p), vec![1000.0, 4999.0, 5000.0]);
        assert_eq!(p.timed_starts, 2);
    }

    #[test]
    fn a_group_shares_its_span_and_a_long_one_is_marked() {
        // Four starts, the first timed, then idle 400 ns later: each
        // start a quarter; the folded end becomes an event just before
        // each start.
        let mut events = timed_start(1, 1000).to_vec();
        for _ in 0..3 {
            events.push(start(1, true));
        }
        events.push(Event::IdleBegin { t: 1400 }.encode());
        // The same after the idle period, over 40 us: marked.
        events.extend(timed_start(2, 10_000));
        for _ in 0..3 {
            events.push(start(2, true));
        }
        events.push(Event::Clock { t: 50_000 }.encode());
        let part = PePart {
            pe: 0,
            events,
            ..PePart::default()
        };
        let p = place(0, Default::default(), part, 0);
        let starts: Vec<(f64, bool)> = p
            .events
            .iter()
            .zip(&p.shared)
            .filter(|(e, _)| matches!(e.1, Event::Begin { .. }))
            .map(|(e, s)| (e.0, s.is_some()))
            .collect();
        assert_eq!(
            starts,
            vec![
                (1000.0, false),
                (1100.0, false),
                (1200.0, false),
                (1300.0, false),
                (10_000.0, true),
                (20_000.0, true),
                (30_000.0, true),
                (40_000.0, true),
            ]
        );
        let ends = p.events.iter().filter(|e| e.1 == Event::End).count();
        assert_eq!(ends, 6);
        assert_eq!(p.timed_starts, 2);
        // Every event in time order.
        assert!(
            times(&p).windows(2).all(|w| w[0] <= w[1]),
            "{:?}",
            times(&p)
        );
        let part = ProcessPart {
            process: 0,
            complete: true,
            pes: vec![p.part],
            ..ProcessPart::default()
        };
        let (json, _) = render(vec![part], "");
        assert!(
            json.contains("not timed apart: one of 4 handler runs over 40.0 us"),
            "{json}"
        );
        assert!(
            json.contains(r#""timed_starts":2,"stretched_starts":4"#),
            "{json}"
        );
    }

    #[test]
    fn a_send_and_its_receipt_become_one_flow_and_strings_are_escaped() {
        let mut a = timed_start(1, 10).to_vec();
        a.push(
            Event::Send {
                dest: 1,
                node: false,
                seq: 1,
                len: 40,
            }
            .encode(),
        );
        a.push(Event::End.encode());
        a.push(Event::IdleBegin { t: 20 }.encode());
        let a = PePart {
            pe: 0,
            handlers: vec![(1, "my \"quoted\" handler".into())],
            events: a,
            ..PePart::default()
        };
        // The flow number on the start of the handler that runs it.
        let b = PePart {
            pe: 1,
            lost: 3,
            capacity: 4,
            events: vec![
                Event::Clock { t: 30 }.encode(),
                Event::Begin {
                    index: 1,
                    runtime: false,
                    closes: false,
                    flow: Some(Flow { src: 0, seq: 1 }),
                }
                .encode(),
                Event::End.encode(),
            ],
            ..PePart::default()
        };
        let part = ProcessPart {
            process: 0,
            complete: true,
            pes: vec![a, b],
            ..ProcessPart::default()
        };
        let (json, summary) = render(vec![part], "");
        assert!(json.contains(r#""name":"my \"quoted\" handler""#), "{json}");
        assert!(
            json.contains(r#""ph":"s""#) && json.contains(r#""ph":"f""#),
            "{json}"
        );
        assert!(json.contains(r#""flows":1"#), "{json}");
        assert!(json.contains(r#""wrapped":[{"pe":1,"lost":3}]"#), "{json}");
        assert!(summary.contains("wrapped"), "{summary}");
    }

    #[test]
    fn a_flow_number_seen_twice_gets_no_arrow() {
        let send = Event::Send {
            dest: 1,
            node: false,
            seq: 7,
            len: 8,
        }
        .encode();
        let run = Event::Begin {
            index: 1,
            runtime: false,
            closes: false,
            flow: Some(Flow { src: 0, seq: 7 }),
        }
        .encode();
        let mut a = timed_start(1, 10).to_vec();
        a.extend([send, send, Event::End.encode()]);
        let b = vec![Event::Clock { t: 30 }.encode(), run, Event::End.encode()];
        let part = ProcessPart {
            process: 0,
            complete: true,
            pes: vec![
                PePart {
                    pe: 0,
                    events: a,
                    ..PePart::default()
                },
                PePart {
                    pe: 1,
                    events: b,
                    ..PePart::default()
                },
            ],
            ..ProcessPart::default()
        };
        let (json, _) = render(vec![part], "");
        assert!(!json.contains(r#""ph":"s""#) && !json.contains(r#""ph":"f""#));
        assert!(json.contains(r#""flows":0,"ambiguous_flows":1"#), "{json}");
    }
}
