//! Timeline traces of jobs that span processes (`+trace FILE`): the file
//! process 0 writes holds every PE of every process, one track each, the
//! handlers by name, and an arrow for every user message; a ring that
//! wraps is reported; an abort still leaves each process's part.
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use converse::Message;
use serde_json::Value;

use super::Case;
use super::common::{Finished, job};
use super::scenarios::output;

/// Pings each PE gets from PE 0 (and pongs it sends back).
pub const PINGS: usize = 50;

fn on_ping(msg: Message) {
    let _phase = converse::trace::span("answer");
    converse::sync_send_and_free(0, msg);
}

fn on_hello(_msg: Message) {}

/// The program's PE-0 state: pongs still to come.
static LEFT: converse::Cpv<std::cell::Cell<usize>> = converse::Cpv::new();

fn on_pong(_msg: Message) {
    let left = LEFT.with(|l| {
        l.set(l.get() - 1);
        l.get()
    });
    if left == 0 {
        converse::trace::mark("all pongs back");
        // Not `exit` at once: the broadcast goes by the spanning tree, not
        // in order with the pings, and may still wait on some PE.
        converse::start_quiescence_detection(|| converse::exit(0));
    }
}

/// `trace_ping [abort]`: PE 0 pings every other PE `PINGS` times and
/// broadcasts once; each ping is answered. With `abort`, PE 1 aborts after
/// its first ping.
fn trace_ping(args: &[String]) -> i32 {
    let abort = args.iter().any(|a| a == "abort");
    converse::Converse::new()
        .args(std::env::args())
        .run(move |_| {
            LEFT.initialize(std::cell::Cell::new(0));
            let pong = converse::register_handler(on_pong);
            let ping = converse::register_handler(move |mut msg: Message| {
                if abort && converse::my_pe() == 1 {
                    converse::abort("trace_ping: PE 1 stops here");
                }
                msg.set_handler(pong);
                on_ping(msg)
            });
            let hello = converse::register_handler(on_hello);
            if converse::my_pe() == 0 {
                let n = converse::num_pes();
                LEFT.with(|l| l.set(PINGS * (n - 1)));
                let _start = converse::trace::span("send the pings");
                converse::sync_broadcast(&Message::new(hello, 8));
                for _ in 0..PINGS {
                    for pe in 1..n {
                        converse::sync_send_and_free(pe, Message::new(ping, 16));
                    }
                }
            }
        })
        .expect("flags")
}

pub fn child(name: &str, args: &[String]) -> Option<i32> {
    Some(match name {
        "trace_ping" => trace_ping(args),
        _ => return None,
    })
}

fn temp_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("converse-trace-{tag}-{}.json", std::process::id()))
}

fn read(path: &PathBuf, f: &Finished) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("no trace at {}: {e}\n{}", path.display(), output(f)));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("the trace is no JSON: {e}"))
}

/// The trace's events.
fn events(trace: &Value) -> &Vec<Value> {
    trace["traceEvents"]
        .as_array()
        .expect("traceEvents is a list")
}

/// Checks a whole trace of a `trace_ping` job of `pes` PEs in processes of
/// `ppn`: a named track per PE in its process, the handlers by name, and
/// every send matched by one receipt on the PE it was sent to.
fn check_ping_trace(trace: &Value, pes: usize, ppn: usize) {
    let evs = events(trace);
    // One track per PE, named, in its process.
    let tracks: HashMap<u64, u64> = evs
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| {
            let tid = e["tid"].as_u64().unwrap();
            assert_eq!(e["args"]["name"], format!("PE {tid}"));
            (tid, e["pid"].as_u64().unwrap())
        })
        .collect();
    assert_eq!(tracks.len(), pes, "one track per PE: {tracks:?}");
    for (pe, process) in &tracks {
        assert_eq!(*process, pe / ppn as u64, "PE {pe} in process {process}");
    }
    let processes: HashSet<u64> = evs
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "process_name")
        .map(|e| e["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(processes.len(), pes / ppn);
    // Handlers by name, each where it ran.
    let runs = |name: &str| -> Vec<u64> {
        evs.iter()
            .filter(|e| e["ph"] == "X" && e["name"].as_str().is_some_and(|n| n.ends_with(name)))
            .map(|e| e["tid"].as_u64().unwrap())
            .collect()
    };
    let pings = runs("trace_ping::{{closure}}::{{closure}}");
    assert_eq!(pings.len(), PINGS * (pes - 1), "ping handler runs");
    assert!(pings.iter().all(|&pe| pe != 0));
    let pongs = runs("::on_pong");
    assert_eq!(pongs.len(), PINGS * (pes - 1), "pong handler runs");
    assert!(pongs.iter().all(|&pe| pe == 0));
    assert_eq!(runs("answer").len(), PINGS * (pes - 1), "user spans");
    assert_eq!(runs("send the pings"), vec![0]);
    // Every send has exactly one receipt, on its destination's track.
    let mut starts: HashMap<u64, (u64, String)> = HashMap::new();
    let mut ends: HashMap<u64, u64> = HashMap::new();
    for e in evs {
        match e["ph"].as_str() {
            Some("s") => {
                let to = e["args"]["to"].as_str().unwrap().to_string();
                let old =
                    starts.insert(e["id"].as_u64().unwrap(), (e["tid"].as_u64().unwrap(), to));
                assert!(old.is_none(), "flow id used twice: {e}");
            }
            Some("f") => {
                let old = ends.insert(e["id"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
                assert!(old.is_none(), "flow id ended twice: {e}");
            }
            _ => {}
        }
    }
    assert_eq!(
        starts.len(),
        2 * PINGS * (pes - 1),
        "one arrow per ping and pong"
    );
    assert_eq!(
        starts.keys().collect::<HashSet<_>>(),
        ends.keys().collect::<HashSet<_>>(),
        "every send matched by its receipt"
    );
    for (id, (from, to)) in &starts {
        let at = ends[id];
        assert_eq!(
            to,
            &format!("PE {at}"),
            "arrow {id} from PE {from} ends on PE {at}"
        );
        assert!(
            (*from == 0) != (at == 0),
            "pings go out of PE 0, pongs into it"
        );
    }
    let summary = &trace["converse"];
    assert_eq!(summary["complete"], true);
    assert_eq!(summary["flows"].as_u64().unwrap() as usize, starts.len());
    assert_eq!(
        summary["user_messages_sent"],
        summary["user_messages_received"]
    );
    assert_eq!(summary["wrapped"].as_array().unwrap().len(), 0);
    // The broadcast and the final mark are there.
    assert!(
        evs.iter()
            .any(|e| e["name"] == "broadcast" && e["cat"] == "collective")
    );
    assert_eq!(runs("::on_hello").len(), pes - 1, "the broadcast's handler");
    assert!(
        evs.iter()
            .any(|e| e["name"] == "all pongs back" && e["tid"] == 0)
    );
}

fn trace_of_two_process_jobs() {
    for (netmod, pes, ppn) in [("shm", 4, 2), ("tcp", 2, 1)] {
        let path = temp_path(netmod);
        let _ = std::fs::remove_file(&path);
        let file = path.display().to_string();
        let f = job(netmod, pes, ppn, "trace_ping", &["+trace", &file]);
        f.expect_code(0);
        assert!(
            f.stderr
                .contains(&format!("converse: trace written to {file}")),
            "{}",
            output(&f)
        );
        check_ping_trace(&read(&path, &f), pes, ppn);
        let _ = std::fs::remove_file(&path);
    }
}

fn a_wrapped_trace_says_so() {
    let path = temp_path("wrap");
    let file = path.display().to_string();
    let f = job(
        "shm",
        4,
        2,
        "trace_ping",
        &["+trace", &file, "+trace-buffer", "64"],
    );
    f.expect_code(0);
    assert!(f.stderr.contains("wrapped"), "{}", output(&f));
    let trace = read(&path, &f);
    let wrapped = trace["converse"]["wrapped"].as_array().unwrap();
    assert!(!wrapped.is_empty(), "{}", trace["converse"]);
    for w in wrapped {
        assert!(w["lost"].as_u64().unwrap() > 0);
        let pe = w["pe"].as_u64().unwrap();
        assert!(
            events(&trace).iter().any(|e| e["tid"] == pe
                && e["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("trace buffer wrapped"))),
            "PE {pe}'s track says it wrapped"
        );
    }
    // Only pairs with both ends left are drawn: each arrow's id starts
    // once and ends once.
    let evs = events(&trace);
    let ids = |ph: &str| -> Vec<u64> {
        let mut v: Vec<u64> = evs
            .iter()
            .filter(|e| e["ph"] == ph)
            .map(|e| e["id"].as_u64().unwrap())
            .collect();
        v.sort_unstable();
        v
    };
    let starts = ids("s");
    assert_eq!(starts, ids("f"));
    assert!(starts.windows(2).all(|w| w[0] < w[1]), "an id drawn twice");
    // The rings kept the last events: fewer arrows than messages.
    let sent = trace["converse"]["user_messages_sent"].as_u64().unwrap() as usize;
    assert!(
        starts.len() < 2 * super::trace::PINGS * 3,
        "{} of {sent}",
        starts.len()
    );
    let _ = std::fs::remove_file(&path);
}

fn an_aborted_job_leaves_each_process_part() {
    let path = temp_path("abort");
    let file = path.display().to_string();
    let part1 = PathBuf::from(format!("{file}.1"));
    let _ = std::fs::remove_file(&part1);
    let f = job("shm", 4, 2, "trace_ping", &["abort", "+trace", &file]);
    assert_eq!(f.code, Some(1), "{}", output(&f));
    for (p, pes) in [(&path, [0u64, 1]), (&part1, [2, 3])] {
        let trace = read(p, &f);
        assert_eq!(trace["converse"]["complete"], false);
        assert!(
            trace["converse"]["note"]
                .as_str()
                .unwrap()
                .contains("PE 1 aborted: trace_ping: PE 1 stops here"),
            "{}",
            trace["converse"]
        );
        let tids: HashSet<u64> = events(&trace)
            .iter()
            .filter(|e| e["name"] == "thread_name")
            .map(|e| e["tid"].as_u64().unwrap())
            .collect();
        assert_eq!(tids, pes.into_iter().collect());
        let _ = std::fs::remove_file(p);
    }
}

/// `+stats` alone over two processes: process 0 prints a row for every
/// PE of both, with the messages the job handled.
fn stats_of_two_process_jobs() {
    for (netmod, pes, ppn) in [("shm", 4, 2), ("tcp", 2, 1)] {
        let f = job(netmod, pes, ppn, "trace_ping", &["+stats"]);
        f.expect_code(0);
        let mut lines = f.stderr.lines().skip_while(|l| !l.contains("busy %"));
        assert!(lines.next().is_some(), "a table\n{}", output(&f));
        let rows: Vec<Vec<&str>> = lines
            .take_while(|l| !l.starts_with("converse:"))
            .map(|l| l.split_whitespace().collect())
            .collect();
        let labels: Vec<&str> = rows.iter().map(|r| r[0]).collect();
        let mut want: Vec<String> = (0..pes).map(|p| p.to_string()).collect();
        want.push("all".into());
        assert_eq!(labels, want, "{}", output(&f));
        // PE, busy %, idle %, overhead %, sent, bytes, handled, runtime.
        let num = |r: &[&str], i: usize| -> u64 { r[i].parse().unwrap() };
        let others = pes as u64 - 1;
        let pings = PINGS as u64;
        // PE 0 takes every pong; each other PE a ping each time and the
        // broadcast once, and sends its pongs.
        assert_eq!(num(&rows[0], 6), pings * others, "{}", output(&f));
        for r in &rows[1..pes] {
            assert_eq!(num(r, 6), pings + 1, "{}", output(&f));
            assert_eq!(num(r, 4), pings, "{}", output(&f));
        }
        assert!(num(&rows[0], 4) >= pings * others, "{}", output(&f));
        assert_eq!(num(&rows[pes], 6), 2 * pings * others + others);
        for r in &rows {
            let sum: f64 = r[1..4].iter().map(|c| c.parse::<f64>().unwrap()).sum();
            assert!((sum - 100.0).abs() <= 0.25, "{r:?}");
        }
        let pong = f
            .stderr
            .lines()
            .skip_while(|l| !l.contains("top handlers by time"))
            .find(|l| {
                l.trim_start()
                    .split(' ')
                    .next()
                    .unwrap()
                    .ends_with("::on_pong")
            })
            .unwrap_or_else(|| panic!("on_pong among the top handlers\n{}", output(&f)));
        assert_eq!(
            pong.split_whitespace().nth(1),
            Some((pings * others).to_string().as_str())
        );
        assert!(!f.stderr.contains("missing"), "{}", output(&f));
        assert!(!f.stderr.contains("trace written"), "{}", output(&f));
    }
}

pub fn cases() -> Vec<Case> {
    vec![
        ("trace_of_two_process_jobs", trace_of_two_process_jobs),
        ("stats_of_two_process_jobs", stats_of_two_process_jobs),
        ("trace_wrapped", a_wrapped_trace_says_so),
        ("trace_abort", an_aborted_job_leaves_each_process_part),
    ]
}
