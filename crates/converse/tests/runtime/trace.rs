//! `+trace FILE` on one process: the file is JSON a trace viewer opens,
//! with a track per PE, handlers by name, arrows for user messages,
//! spans, idle periods, thread switches and runtime messages by kind.
use std::collections::HashSet;

use converse::{Converse, Message};
use serde_json::Value;

fn temp(tag: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("converse-trace-{tag}-{}.json", std::process::id()))
}

/// The trace at `path`, parsed as a viewer would; the file is removed.
fn take_trace(path: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap();
    let _ = std::fs::remove_file(path);
    serde_json::from_str(&text).expect("the trace is JSON")
}

fn on_token(msg: Message) {
    let hops = u32::from_le_bytes(msg.payload()[..4].try_into().unwrap());
    if hops == 30 {
        // Quiescence detection: runtime messages, shown by kind.
        converse::start_quiescence_detection(|| converse::exit(0));
        return;
    }
    let mut msg = msg;
    msg.payload_mut()[..4].copy_from_slice(&(hops + 1).to_le_bytes());
    let next = (converse::my_pe() + 1) % converse::num_pes();
    converse::sync_send_and_free(next, msg);
}

#[test]
fn a_ring_of_three_pes_is_traced_whole() {
    let path = temp("ring");
    let file = path.display().to_string();
    let code = Converse::new()
        .args(["ring", "+p", "3", "+trace", &file])
        .run(|_| {
            assert!(converse::trace::enabled());
            let token = converse::register_handler(on_token);
            if converse::my_pe() == 0 {
                let _s = converse::trace::span("start");
                // A user-level thread: its switches are marked.
                let t = converse::Thread::create(|| converse::trace::mark("in a thread"), 64 << 10);
                t.awaken();
                converse::sync_send_and_free(0, Message::from_payload(token, &0u32.to_le_bytes()));
            }
        })
        .unwrap();
    assert_eq!(code, 0);
    let trace = take_trace(&path);
    let evs = trace["traceEvents"].as_array().unwrap();
    let tracks: HashSet<u64> = evs
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .map(|e| e["tid"].as_u64().unwrap())
        .collect();
    assert_eq!(tracks, HashSet::from([0, 1, 2]));
    let named = |n: &str| evs.iter().filter(|e| e["name"] == n).count();
    // 31 token hops (0..=30), each a run of `on_token` named by its path.
    assert_eq!(
        named("runtime::trace::on_token"),
        31,
        "{}",
        trace["converse"]
    );
    assert_eq!(named("start"), 1);
    assert_eq!(named("in a thread"), 1);
    assert!(named("resume thread 1") >= 1 && named("resume the main flow") >= 1);
    assert!(
        evs.iter().any(|e| e["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("converse: Qd"))),
        "quiescence detection's messages named by kind"
    );
    assert!(evs.iter().any(|e| e["name"] == "idle" && e["ph"] == "X"));
    // 31 sends (PE 0's first, then every hop but the last), each matched.
    let flows = |ph: &str| evs.iter().filter(|e| e["ph"] == ph).count();
    assert_eq!(flows("s"), 31);
    assert_eq!(flows("f"), 31);
    assert_eq!(trace["converse"]["complete"], true);
    // Slices are well formed: no negative durations.
    assert!(
        evs.iter()
            .filter(|e| e["ph"] == "X")
            .all(|e| e["dur"].as_f64().unwrap() >= 0.0)
    );
}

#[test]
fn without_the_flag_nothing_is_recorded() {
    let code = Converse::new()
        .args(["t", "+p", "1"])
        .run(|_| {
            assert!(!converse::trace::enabled());
            // Spans and marks are free no-ops.
            let _s = converse::trace::span("nothing");
            converse::trace::mark("nothing");
            converse::exit(0);
        })
        .unwrap();
    assert_eq!(code, 0);
}

#[test]
fn bad_trace_flags_are_refused_by_name() {
    for (args, says) in [
        (vec!["t", "+trace"], "`+trace` needs a value"),
        (
            vec!["t", "+trace", "f", "+trace-buffer", "3"],
            "+trace-buffer",
        ),
        (vec!["t", "+trace-buffer", "lots"], "a number of events"),
    ] {
        let e = Converse::new().args(args.clone()).run(|_| {}).unwrap_err();
        assert!(e.to_string().contains(says), "{args:?}: {e}");
    }
}

#[test]
fn a_trace_file_that_cannot_be_written_stops_the_start() {
    let e = Converse::new()
        .args(["t", "+p", "2", "+trace", "/nonexistent-dir/trace.json"])
        .run(|_| panic!("the job must not start"))
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("+trace: cannot create /nonexistent-dir/trace.json"),
        "{e}"
    );
}

/// A handler that suspends the main flow (the scheduler runs on a stand-in
/// meanwhile) still ends its slice when it is resumed, and the handlers
/// run meanwhile are all there, each ended.
#[test]
fn a_suspended_main_flow_keeps_its_slices_whole() {
    let path = temp("suspend");
    let file = path.display().to_string();
    let code = Converse::new()
        .args(["t", "+p", "1", "+trace", &file])
        .run(|_| {
            let wake = converse::register_handler(|_m: Message| {});
            let outer = converse::register_handler(move |_m: Message| {
                let me = converse::Thread::current();
                let waker = converse::Thread::create(
                    move || {
                        converse::sync_send_and_free(0, Message::new(wake, 8));
                        me.awaken();
                    },
                    64 << 10,
                );
                waker.awaken();
                converse::suspend();
                converse::exit_scheduler();
            });
            converse::sync_send_and_free(0, Message::new(outer, 8));
        })
        .unwrap();
    assert_eq!(code, 0);
    let trace = take_trace(&path);
    let evs = trace["traceEvents"].as_array().unwrap();
    let slices: Vec<&Value> = evs
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "handler")
        .collect();
    assert_eq!(slices.len(), 2, "{slices:?}");
    assert!(
        slices.iter().all(|e| e["args"]["unfinished"].is_null()),
        "every handler ended: {slices:?}"
    );
    // The outer handler encloses the one that ran while it was suspended.
    let span = |e: &Value| {
        let a = e["ts"]
            .as_str()
            .map_or_else(|| e["ts"].as_f64().unwrap(), |s| s.parse().unwrap());
        (a, a + e["dur"].as_f64().unwrap())
    };
    let (outer, inner) = (span(slices[1]), span(slices[0]));
    assert!(
        outer.0 <= inner.0 && inner.1 <= outer.1,
        "{outer:?} encloses {inner:?}"
    );
    assert_eq!(trace["converse"]["handler_runs"], 2);
}

/// The time of a trace event, in microseconds.
fn ts(e: &Value) -> f64 {
    e["ts"]
        .as_str()
        .map_or_else(|| e["ts"].as_f64().unwrap(), |s| s.parse().unwrap())
}

/// A self-send loop of `n` messages on one PE, traced with `flags`; the
/// trace's summary object.
fn traced_self_sends(tag: &str, n: u32, flags: &[&str]) -> Value {
    let path = temp(tag);
    let file = path.display().to_string();
    let mut args = vec!["t", "+p", "1", "+trace", &file, "+trace-buffer", "1048576"];
    args.extend_from_slice(flags);
    let code = Converse::new()
        .args(args)
        .run(move |_| {
            let left = std::rc::Rc::new(std::cell::Cell::new(n));
            let again = converse::register_handler(move |msg: Message| {
                if left.get() == 0 {
                    converse::exit(0);
                }
                left.set(left.get() - 1);
                converse::sync_send_and_free(0, msg);
            });
            converse::sync_send_and_free(0, Message::new(again, 8));
        })
        .unwrap();
    assert_eq!(code, 0);
    let trace = take_trace(&path);
    let evs = trace["traceEvents"].as_array().unwrap();
    // Every handler slice is well formed, and the slices of one PE never
    // overlap (one level: the handlers do not nest here).
    let mut slices: Vec<(f64, f64)> = evs
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "handler")
        .map(|e| (ts(e), ts(e) + e["dur"].as_f64().unwrap()))
        .collect();
    slices.sort_by(|a, b| a.partial_cmp(b).unwrap());
    assert!(slices.iter().all(|s| s.1 >= s.0));
    assert!(
        slices.windows(2).all(|w| w[0].1 <= w[1].0 + 0.002),
        "overlapping slices"
    );
    trace["converse"].clone()
}

/// Handler starts timed in groups (the default) or each (`+trace-exact`):
/// either way every handler run is there, its slices do not overlap, and
/// every message's arrow is drawn. (How many starts a group holds depends
/// on how fast the handlers run: `ring_writer`'s unit tests check the
/// grouping with a clock of their own.)
#[test]
fn grouped_or_exact_every_run_and_every_arrow_is_there() {
    let n = 20_000;
    let grouped = traced_self_sends("grouped", n, &[]);
    let exact = traced_self_sends("exact", n, &["+trace-exact"]);
    for summary in [&grouped, &exact] {
        assert_eq!(summary["wrapped"].as_array().unwrap().len(), 0);
        // The first message, then `n` forwards of it; the last run ends
        // the job from inside its handler (an unfinished slice).
        assert_eq!(summary["handler_runs"], u64::from(n), "{summary}");
        assert_eq!(summary["user_messages_sent"], u64::from(n) + 1);
        assert_eq!(summary["flows"], u64::from(n) + 1, "{summary}");
    }
    assert_eq!(exact["timed_starts"], u64::from(n) + 1, "{exact}");
    let timed = grouped["timed_starts"].as_u64().unwrap();
    assert!((1..=u64::from(n) + 1).contains(&timed), "{grouped}");
}

static SECOND: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static FIRST: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn on_start(_m: Message) {
    use std::sync::atomic::Ordering::Relaxed;
    converse::sync_send_and_free(0, Message::new(FIRST.load(Relaxed), 8));
    converse::sync_send_and_free(0, Message::new(SECOND.load(Relaxed), 8));
    converse::deliver_specific_msg(SECOND.load(Relaxed));
}

fn on_second(_m: Message) {}

fn on_first(_m: Message) {
    converse::exit_scheduler();
}

/// An arrow ends at the handler that runs its message, whatever the order
/// they run in: here `deliver_specific_msg` runs the second message sent
/// before the first.
#[test]
fn an_arrow_ends_at_the_run_of_its_own_message() {
    use std::sync::atomic::Ordering::Relaxed;
    let path = temp("order");
    let file = path.display().to_string();
    let code = Converse::new()
        .args(["t", "+p", "1", "+trace", &file])
        .run(|_| {
            FIRST.store(converse::register_handler(on_first), Relaxed);
            SECOND.store(converse::register_handler(on_second), Relaxed);
            let start = converse::register_handler(on_start);
            converse::sync_send_and_free(0, Message::new(start, 8));
            converse::schedule_forever();
            converse::exit(0);
        })
        .unwrap();
    assert_eq!(code, 0);
    let trace = take_trace(&path);
    let evs = trace["traceEvents"].as_array().unwrap();
    assert_eq!(trace["converse"]["flows"], 3, "{}", trace["converse"]);
    // The arrows' starts in the order sent: `start`, `first`, `second`.
    let mut starts: Vec<&Value> = evs.iter().filter(|e| e["ph"] == "s").collect();
    starts.sort_by(|a, b| ts(a).partial_cmp(&ts(b)).unwrap());
    // Where each arrow ends: the start of the slice of the handler that
    // ran its message.
    let ran: Vec<String> = starts
        .iter()
        .map(|s| {
            let end = evs
                .iter()
                .find(|f| f["ph"] == "f" && f["id"] == s["id"])
                .expect("the arrow's end");
            assert_eq!(end["bp"], "e");
            evs.iter()
                .filter(|e| e["ph"] == "X" && e["cat"] == "handler")
                .find(|e| (ts(e) - ts(end)).abs() < 1e-9)
                .and_then(|e| e["name"].as_str())
                .unwrap_or("no slice")
                .to_string()
        })
        .collect();
    assert_eq!(
        ran,
        [
            "runtime::trace::on_start",
            "runtime::trace::on_first",
            "runtime::trace::on_second"
        ],
        "each arrow at the run of its own message"
    );
    // And they ran in the other order.
    let mut runs: Vec<&Value> = evs
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "handler")
        .collect();
    runs.sort_by(|a, b| ts(a).partial_cmp(&ts(b)).unwrap());
    let names: Vec<&str> = runs.iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "runtime::trace::on_start",
            "runtime::trace::on_second",
            "runtime::trace::on_first"
        ]
    );
}

fn on_posted(_m: Message) {
    converse::exit(0);
}

/// A message given to a PE from outside the job (`PeHandle::post`, which
/// flags it as uncounted) runs with a slice like any other.
#[test]
fn a_message_posted_from_outside_the_job_is_traced() {
    let path = temp("posted");
    let file = path.display().to_string();
    let code = Converse::new()
        .args(["t", "+p", "1", "+trace", &file])
        .run(|_| {
            let h = converse::register_handler(on_posted);
            let handle = converse::PeHandle::current();
            std::thread::spawn(move || assert!(handle.post(Message::new(h, 8))));
        })
        .unwrap();
    assert_eq!(code, 0);
    let trace = take_trace(&path);
    let evs = trace["traceEvents"].as_array().unwrap();
    let runs = evs
        .iter()
        .filter(|e| e["ph"] == "X" && e["name"] == "runtime::trace::on_posted")
        .count();
    assert_eq!(runs, 1, "{}", trace["converse"]);
}
