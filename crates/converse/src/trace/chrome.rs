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
//!   slice that sent it) and `"ph": "f"` at its receipt (bound to the next
//!   slice to start on the receiving PE, the handler that takes it). Only
//!   pairs whose both ends are in the file are drawn; the rest are
//!   counted in the summary.
//! - A PE whose ring wrapped has a mark at its first event saying how
//!   many earlier events were lost; the top-level `"converse"` object
//!   (which the viewers ignore) lists them, with the flows matched and
//!   the processes missing, for tools and tests.
//!
//! # Placing untimed events
//!
//! A run of untimed events (ends, sends, receipts) between two timed ones
//! at `ta` and `tb` is placed just before `tb`, one nanosecond apart
//! (closer if the gap is smaller), in order: a handler's slice runs until
//! the next thing its PE did.
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::path::Path;

use super::event::Event;
use super::part::{PePart, ProcessPart};

/// A message's number: sender PE, destination (PE, or node if the flag
/// is set), and its number between the two.
type FlowKey = (u32, bool, u32, u32);

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

/// An open slice: its start, name and category.
type Open<'a> = (f64, Cow<'a, str>, &'static str);

/// One PE's events, decoded and placed in time (nanoseconds since the
/// earliest event of the trace).
struct Placed {
    pid: u32,
    /// The runtime message kinds' names of the PE's process.
    kinds: std::rc::Rc<HashMap<u32, String>>,
    part: PePart,
    events: Vec<(f64, Event)>,
}

/// Places `part`'s events in time, in nanoseconds since `base` (the
/// earliest timed event of the trace: subtracted as integers, since a Unix
/// time in nanoseconds is a multiple of 256 as an `f64`).
fn place(pid: u32, kinds: std::rc::Rc<HashMap<u32, String>>, part: PePart, base: u64) -> Placed {
    let decoded: Vec<Event> = part
        .events
        .iter()
        .filter_map(|&w| Event::decode(w))
        .collect();
    let mut events = Vec::with_capacity(decoded.len());
    let mut last_timed: Option<f64> = None;
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
    for e in decoded {
        match e.time() {
            Some(t) => {
                let t = t.saturating_sub(base) as f64;
                flush(&mut pending, last_timed, t, &mut events);
                events.push((t, e));
                last_timed = Some(t);
            }
            None => pending.push(e),
        }
    }
    // A tail of untimed events (the PE ended inside a handler, say):
    // placed just after the last timed one.
    let k = pending.len() as f64;
    let tail = last_timed.unwrap_or(0.0) + k + 1.0;
    flush(&mut pending, last_timed, tail, &mut events);
    Placed {
        pid,
        kinds,
        part,
        events,
    }
}

fn render(parts: Vec<ProcessPart>, note: &str) -> (String, String) {
    let mut out = String::with_capacity(1 << 16);
    out.push_str("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
    let mut first = true;
    let mut emit = |out: &mut String, line: String| {
        if !first {
            out.push_str(",\n");
        }
        first = false;
        out.push_str(&line);
    };
    let processes: Vec<u32> = parts.iter().map(|p| p.process).collect();
    let complete = parts.iter().all(|p| p.complete);
    let mut placed: Vec<Placed> = Vec::new();
    let base = parts
        .iter()
        .flat_map(|p| &p.pes)
        .flat_map(|pe| &pe.events)
        .filter_map(|&w| Event::decode(w)?.time())
        .min()
        .unwrap_or(0);
    for p in parts {
        emit(
            &mut out,
            format!(
                "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{},\"args\":{{\"name\":{}}}}}",
                p.process,
                quote(&format!(
                    "process {} ({}, pid {})",
                    p.process, p.host, p.pid
                ))
            ),
        );
        emit(
            &mut out,
            format!(
                "{{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":{0},\"args\":{{\"sort_index\":{0}}}}}",
                p.process
            ),
        );
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
    let t0 = if t0.is_finite() { t0 } else { 0.0 };
    // Flows: the keys present at both ends.
    let mut sends: HashSet<FlowKey, FastHash> = HashSet::default();
    let mut receipts: HashSet<FlowKey, FastHash> = HashSet::default();
    for p in &placed {
        for (_, e) in &p.events {
            match *e {
                Event::Send {
                    dest, node, seq, ..
                } if seq != 0 => {
                    sends.insert((p.part.pe, node, dest, seq));
                }
                Event::Receipt { src, node, seq } => {
                    let dest = if node { p.part.node } else { p.part.pe };
                    receipts.insert((src, node, dest, seq));
                }
                _ => {}
            }
        }
    }
    let mut ids: HashMap<FlowKey, u64, FastHash> = HashMap::default();
    for key in sends.intersection(&receipts) {
        let next = ids.len() as u64 + 1;
        ids.insert(*key, next);
    }
    let (mut handler_runs, mut wrapped) = (0u64, Vec::new());
    let mut pes = Vec::new();
    for p in &placed {
        let (pid, tid) = (p.pid, p.part.pe);
        pes.push(tid);
        // Microseconds with three decimals, from whole nanoseconds (integer
        // formatting: a float's took a third of the writer's time).
        let ts = |t: f64| {
            let ns = (t - t0).max(0.0).round() as u64;
            format!("{}.{:03}", ns / 1000, ns % 1000)
        };
        emit(
            &mut out,
            format!(
                "{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{pid},\"tid\":{tid},\"args\":{{\"name\":\"PE {tid}\"}}}}"
            ),
        );
        emit(
            &mut out,
            format!(
                "{{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":{pid},\"tid\":{tid},\"args\":{{\"sort_index\":{tid}}}}}"
            ),
        );
        // Sorted by index, for a binary search per handler run.
        let mut handlers: Vec<(u32, &str)> = p
            .part
            .handlers
            .iter()
            .map(|(i, n)| (*i, n.as_str()))
            .collect();
        handlers.sort_unstable_by_key(|h| h.0);
        let name_of = |i: u32| -> String {
            p.part
                .names
                .get(i as usize)
                .cloned()
                .unwrap_or_else(|| format!("name {i}"))
        };
        if p.part.lost > 0 {
            let at = p.events.first().map_or(t0, |e| e.0);
            wrapped.push((tid, p.part.lost));
            emit(
                &mut out,
                format!(
                    "{{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"converse\",\"name\":{},\"pid\":{pid},\"tid\":{tid},\"ts\":{}}}",
                    quote(&format!(
                        "trace buffer wrapped: {} earlier events lost (+trace-buffer {})",
                        p.part.lost, p.part.capacity
                    )),
                    ts(at)
                ),
            );
        }
        // Open slices per user-level thread (0: the main flow): a thread
        // that suspends inside a handler ends it when it is resumed.
        let mut stacks: HashMap<u32, Vec<Open<'_>>, FastHash> = HashMap::default();
        fn stack_of<T>(stacks: &mut HashMap<u32, Vec<T>, FastHash>, thread: u32) -> &mut Vec<T> {
            stacks.entry(thread).or_default()
        }
        let mut current = 0u32;
        let mut idle_since: Option<f64> = None;
        let last = p.events.last().map_or(t0, |e| e.0);
        let slice = |out: &mut String,
                     emit: &mut dyn FnMut(&mut String, String),
                     name: &str,
                     cat: &str,
                     a: f64,
                     b: f64,
                     open: bool| {
            let args = if open {
                ",\"args\":{\"unfinished\":true}"
            } else {
                ""
            };
            emit(
                out,
                format!(
                    "{{\"ph\":\"X\",\"cat\":\"{cat}\",\"name\":{},\"pid\":{pid},\"tid\":{tid},\"ts\":{},\"dur\":{:.3}{args}}}",
                    quote(name),
                    ts(a),
                    (b - a).max(0.0) / 1000.0
                ),
            );
        };
        for &(t, e) in &p.events {
            match e {
                Event::Begin { index, runtime, .. } => {
                    let name: Cow<'_, str> = if runtime && index == 0 {
                        Cow::Borrowed("converse: reduction contribution")
                    } else if runtime {
                        Cow::Owned(match p.kinds.get(&index) {
                            Some(kind) => format!("converse: {kind}"),
                            None => format!("converse: runtime message kind {index}"),
                        })
                    } else {
                        match handlers.binary_search_by_key(&index, |h| h.0) {
                            Ok(i) => Cow::Borrowed(handlers[i].1),
                            Err(_) => Cow::Owned(format!("handler {index}")),
                        }
                    };
                    stack_of(&mut stacks, current).push((t, name, "handler"));
                }
                Event::End => {
                    let stack = stack_of(&mut stacks, current);
                    // Spans left open inside the handler end with it.
                    while let Some((a, name, cat)) = stack.pop() {
                        slice(&mut out, &mut emit, &name, cat, a, t, false);
                        if cat == "handler" {
                            handler_runs += 1;
                            break;
                        }
                    }
                }
                Event::SpanBegin { name, .. } => {
                    stack_of(&mut stacks, current).push((t, Cow::Owned(name_of(name)), "span"));
                }
                Event::SpanEnd { name, .. } => {
                    let stack = stack_of(&mut stacks, current);
                    let want = name_of(name);
                    if let Some(pos) = stack
                        .iter()
                        .rposition(|(_, n, c)| *c == "span" && *n == want)
                    {
                        // Spans opened after it and not closed end with it.
                        while stack.len() > pos {
                            let (a, n, c) = stack.pop().expect("non-empty");
                            slice(&mut out, &mut emit, &n, c, a, t, false);
                        }
                    }
                }
                Event::IdleBegin { .. } => {
                    idle_since.get_or_insert(t);
                }
                Event::IdleEnd { .. } => {
                    if let Some(a) = idle_since.take() {
                        slice(&mut out, &mut emit, "idle", "idle", a, t, false);
                    }
                }
                Event::Switch { thread, .. } => {
                    current = thread;
                    let name = if thread == 0 {
                        "resume the main flow".to_string()
                    } else {
                        format!("resume thread {thread}")
                    };
                    emit(
                        &mut out,
                        format!(
                            "{{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"thread\",\"name\":{},\"pid\":{pid},\"tid\":{tid},\"ts\":{}}}",
                            quote(&name),
                            ts(t)
                        ),
                    );
                }
                Event::Mark { name, cat, .. } => emit(
                    &mut out,
                    format!(
                        "{{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"{}\",\"name\":{},\"pid\":{pid},\"tid\":{tid},\"ts\":{}}}",
                        cat.name(),
                        quote(&name_of(name)),
                        ts(t)
                    ),
                ),
                Event::Send {
                    dest,
                    node,
                    seq,
                    len,
                } => {
                    if let Some(id) = ids.get(&(tid, node, dest, seq)) {
                        emit(
                            &mut out,
                            format!(
                                "{{\"ph\":\"s\",\"cat\":\"message\",\"name\":\"message\",\"id\":{id},\"pid\":{pid},\"tid\":{tid},\"ts\":{},\"args\":{{\"to\":\"{} {dest}\",\"bytes\":{len}}}}}",
                                ts(t),
                                if node { "node" } else { "PE" }
                            ),
                        );
                    }
                }
                Event::Receipt { src, node, seq } => {
                    let dest = if node { p.part.node } else { tid };
                    if let Some(id) = ids.get(&(src, node, dest, seq)) {
                        emit(
                            &mut out,
                            format!(
                                "{{\"ph\":\"f\",\"cat\":\"message\",\"name\":\"message\",\"id\":{id},\"pid\":{pid},\"tid\":{tid},\"ts\":{}}}",
                                ts(t)
                            ),
                        );
                    }
                }
                Event::SchedulerLeave { .. } => {}
            }
        }
        // What is still open ends at the PE's last event.
        if let Some(a) = idle_since {
            slice(&mut out, &mut emit, "idle", "idle", a, last, false);
        }
        let mut stacks: Vec<(u32, Vec<Open<'_>>)> = stacks.into_iter().collect();
        stacks.sort_unstable_by_key(|s| s.0);
        for (_, stack) in &mut stacks {
            while let Some((a, name, cat)) = stack.pop() {
                slice(&mut out, &mut emit, &name, cat, a, last, true);
            }
        }
    }
    let sends_total = sends.len();
    let receipts_total = receipts.len();
    let matched = ids.len();
    out.push_str("\n],\n\"converse\":{");
    let _ = write!(
        out,
        "\"complete\":{complete},\"note\":{},\"processes\":{processes:?},\"pes\":{pes:?},\"handler_runs\":{handler_runs},\"user_messages_sent\":{sends_total},\"user_messages_received\":{receipts_total},\"flows\":{matched},\"wrapped\":[",
        quote(note)
    );
    for (i, (pe, lost)) in wrapped.iter().enumerate() {
        let _ = write!(
            out,
            "{}{{\"pe\":{pe},\"lost\":{lost}}}",
            if i == 0 { "" } else { "," }
        );
    }
    out.push_str("]}}\n");
    let mut summary = format!(
        "{} PEs, {handler_runs} handler runs, {matched} messages with flows",
        pes.len()
    );
    if !wrapped.is_empty() {
        let lost: u64 = wrapped.iter().map(|w| w.1).sum();
        let _ = write!(
            summary,
            "; the buffers of {} PEs wrapped: {lost} earliest events lost (raise +trace-buffer)",
            wrapped.len()
        );
    }
    (out, summary)
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

    fn timed(e: Event) -> [u64; 2] {
        e.encode()
    }

    #[test]
    fn untimed_events_sit_just_before_the_next_timed_one() {
        let part = PePart {
            pe: 0,
            events: vec![
                timed(Event::Begin {
                    index: 1,
                    runtime: false,
                    t: 1000,
                }),
                Event::End.encode(),
                timed(Event::Begin {
                    index: 1,
                    runtime: false,
                    t: 5000,
                }),
            ],
            ..PePart::default()
        };
        let p = place(0, Default::default(), part, 0);
        let times: Vec<f64> = p.events.iter().map(|e| e.0).collect();
        assert_eq!(times, vec![1000.0, 4999.0, 5000.0]);
    }

    #[test]
    fn a_send_and_its_receipt_become_one_flow_and_strings_are_escaped() {
        let a = PePart {
            pe: 0,
            handlers: vec![(1, "my \"quoted\" handler".into())],
            events: vec![
                timed(Event::Begin {
                    index: 1,
                    runtime: false,
                    t: 10,
                }),
                Event::Send {
                    dest: 1,
                    node: false,
                    seq: 1,
                    len: 40,
                }
                .encode(),
                Event::End.encode(),
                timed(Event::IdleBegin { t: 20 }),
            ],
            ..PePart::default()
        };
        let b = PePart {
            pe: 1,
            lost: 3,
            capacity: 4,
            events: vec![
                Event::Receipt {
                    src: 0,
                    node: false,
                    seq: 1,
                }
                .encode(),
                timed(Event::Begin {
                    index: 1,
                    runtime: false,
                    t: 30,
                }),
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
}
