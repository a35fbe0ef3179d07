//! The `+stats` summary: a table of every PE's time and messages, a job
//! total, and the handlers that took the most time across the job, as
//! process 0 prints it to stderr at the end of the job.
//!
//! Pure formatting of gathered parts (`part`); the numbers are the PEs'
//! own (`stats`). Handlers are summed across PEs by name, so a handler
//! registered at different indices on different PEs is still one line.
//!
//! Parts come from other processes: a PE without stats (it had not ended,
//! or its process's part is missing) gets a line saying so, never a guess.
use std::collections::HashMap;
use std::fmt::Write as _;

use super::part::{PePart, ProcessPart};
use super::stats::PeStats;

/// Handlers listed under "top handlers by time".
pub(crate) const TOP_HANDLERS: usize = 10;

/// The summary of `parts`, one line per `\n`; `missing` lists the
/// processes whose part did not arrive.
pub(crate) fn stats_table(parts: &[ProcessPart], missing: &[usize]) -> String {
    let mut pes: Vec<(&ProcessPart, &PePart)> = parts
        .iter()
        .flat_map(|p| p.pes.iter().map(move |pe| (p, pe)))
        .collect();
    pes.sort_by_key(|(_, pe)| pe.pe);
    let with: Vec<&PeStats> = pes.iter().filter_map(|(_, pe)| pe.stats.as_ref()).collect();
    let start = with.iter().map(|s| s.start_ns).min().unwrap_or(0);
    let end = with.iter().map(|s| s.end_ns).max().unwrap_or(0);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "converse: stats of {} PEs over {} (busy: in handlers; overhead: in the runtime; sent: user messages, bytes theirs; handled: user handler runs; runtime: runtime messages handled)",
        pes.len(),
        human(end.saturating_sub(start))
    );
    let _ = writeln!(
        out,
        "{:>6} {:>7} {:>7} {:>7} {:>10} {:>12} {:>10} {:>8}",
        "PE", "busy %", "idle %", "ovhd %", "sent", "bytes", "handled", "runtime"
    );
    let mut total = PeStats::default();
    let mut wall = 0u64;
    for (_, pe) in &pes {
        match &pe.stats {
            Some(s) => {
                let _ = writeln!(out, "{}", row(&pe.pe.to_string(), s, s.wall_ns()));
                wall += s.wall_ns();
                total.busy_ns += s.busy_ns;
                total.idle_ns += s.idle_ns;
                total.sent += s.sent;
                total.sent_bytes += s.sent_bytes;
                total.handled += s.handled;
                total.runtime_handled += s.runtime_handled;
            }
            None => {
                let _ = writeln!(out, "{:>6} no stats: the PE had not ended", pe.pe);
            }
        }
    }
    let _ = writeln!(out, "{}", row("all", &total, wall));
    if !missing.is_empty() {
        let _ = writeln!(
            out,
            "converse: stats: the parts of processes {missing:?} are missing: their PEs are not counted"
        );
    }
    // Handlers by name across the job.
    let mut handlers: HashMap<String, (u64, u64)> = HashMap::new();
    for (process, pe) in &pes {
        let Some(s) = &pe.stats else { continue };
        for h in &s.handlers {
            let e = handlers
                .entry(handler_name(process, pe, h.index, h.runtime))
                .or_default();
            e.0 += h.calls;
            e.1 += h.self_ns;
        }
    }
    let mut handlers: Vec<(String, u64, u64)> =
        handlers.into_iter().map(|(n, (c, t))| (n, c, t)).collect();
    handlers.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
    let shown = handlers.len().min(TOP_HANDLERS);
    let width = handlers[..shown]
        .iter()
        .map(|h| h.0.chars().count())
        .max()
        .unwrap_or(0)
        .max(7);
    let _ = writeln!(
        out,
        "converse: top handlers by time (self time: nested handlers not counted twice), {shown} of {}:",
        handlers.len()
    );
    let _ = writeln!(
        out,
        "  {:<width$} {:>10} {:>10} {:>7} {:>10}",
        "handler", "calls", "time", "% busy", "mean"
    );
    for (name, calls, ns) in &handlers[..shown] {
        let _ = writeln!(
            out,
            "  {:<width$} {:>10} {:>10} {:>7.1} {:>10}",
            name,
            calls,
            human(*ns),
            percent(*ns, total.busy_ns),
            human(ns.checked_div(*calls).unwrap_or(0)),
        );
    }
    out
}

/// One line of the table.
fn row(label: &str, s: &PeStats, wall: u64) -> String {
    let overhead = wall.saturating_sub(s.busy_ns.saturating_add(s.idle_ns));
    format!(
        "{:>6} {:>7.1} {:>7.1} {:>7.1} {:>10} {:>12} {:>10} {:>8}",
        label,
        percent(s.busy_ns, wall),
        percent(s.idle_ns, wall),
        percent(overhead, wall),
        s.sent,
        s.sent_bytes,
        s.handled,
        s.runtime_handled
    )
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// The name the timeline gives the handler (see `chrome`).
pub(crate) fn handler_name(
    process: &ProcessPart,
    pe: &PePart,
    index: u32,
    runtime: bool,
) -> String {
    if runtime && index == 0 {
        "converse: reduction contribution".to_string()
    } else if runtime {
        match process.runtime_kinds.iter().find(|k| k.0 == index) {
            Some((_, kind)) => format!("converse: {kind}"),
            None => format!("converse: runtime message kind {index}"),
        }
    } else {
        match pe.handlers.iter().find(|h| h.0 == index) {
            Some((_, name)) => name.clone(),
            None => format!("handler {index}"),
        }
    }
}

/// A duration for people: three significant digits and a unit.
pub(crate) fn human(ns: u64) -> String {
    let ns = ns as f64;
    let (v, unit) = if ns < 1e3 {
        return format!("{ns} ns");
    } else if ns < 1e6 {
        (ns / 1e3, "us")
    } else if ns < 1e9 {
        (ns / 1e6, "ms")
    } else {
        (ns / 1e9, "s")
    };
    let digits = if v < 10.0 {
        2
    } else if v < 100.0 {
        1
    } else {
        0
    };
    format!("{v:.digits$} {unit}")
}

#[cfg(test)]
mod tests {
    use super::super::stats::HandlerStats;
    use super::*;

    #[test]
    fn rows_totals_and_handlers_by_name() {
        let stats = |busy, idle, handled| PeStats {
            start_ns: 1000,
            end_ns: 1000 + 1_000_000,
            busy_ns: busy,
            idle_ns: idle,
            sent: handled,
            sent_bytes: 8 * handled,
            handled,
            handlers: vec![HandlerStats {
                index: 3,
                runtime: false,
                calls: handled,
                self_ns: busy,
            }],
            ..PeStats::default()
        };
        let pe = |pe, s| PePart {
            pe,
            handlers: vec![(3, "app::work".into())],
            stats: s,
            ..PePart::default()
        };
        let part = ProcessPart {
            pes: vec![
                pe(1, Some(stats(250_000, 500_000, 4))),
                pe(0, Some(stats(500_000, 250_000, 6))),
                pe(2, None),
            ],
            ..ProcessPart::default()
        };
        let t = stats_table(&[part], &[1]);
        let lines: Vec<&str> = t.lines().collect();
        let cells = |l: &str| l.split_whitespace().map(String::from).collect::<Vec<_>>();
        assert_eq!(
            cells(lines[2]),
            ["0", "50.0", "25.0", "25.0", "6", "48", "6", "0"]
        );
        assert_eq!(cells(lines[3])[..4], ["1", "25.0", "50.0", "25.0"]);
        assert!(lines[4].contains("no stats"), "{t}");
        assert_eq!(
            cells(lines[5]),
            ["all", "37.5", "37.5", "25.0", "10", "80", "10", "0"]
        );
        assert!(lines[6].contains("processes [1] are missing"), "{t}");
        assert_eq!(
            cells(lines[9]),
            ["app::work", "10", "750", "us", "100.0", "75.0", "us"]
        );
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(human(999), "999 ns");
        assert_eq!(human(1500), "1.50 us");
        assert_eq!(human(12_345_678), "12.3 ms");
        assert_eq!(human(123_456_789_000), "123 s");
    }
}
