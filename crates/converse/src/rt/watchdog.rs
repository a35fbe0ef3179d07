//! The hang watchdog (`++watchdog S`): a thread per process that watches
//! the process's PEs and, when none of them has begun a handler for `S`
//! seconds while work is pending (or when the reduction stall check finds
//! the job quiescent with a reduction that cannot complete), prints for
//! every PE what it waits for, its queues and the last handlers it ran,
//! then aborts the job. On SIGQUIT it prints the same and lets the job go
//! on.
//!
//! # What counts as pending
//!
//! After `S` seconds without a handler beginning or a user-level thread
//! switching on any PE of the process, the watchdog asks every PE
//! (`csd::answer`): a PE answers before user handlers, when it idles and
//! at the end of a scheduler poll. Work is pending if a PE does not answer
//! within a second (it is inside a handler that does not return, blocked
//! in a node barrier, or busy outside the scheduler), holds messages in a
//! queue, waits in a reduction, holds contributions, or waits for a
//! quiescence answer. Otherwise the process is idle by design (a server
//! waiting for CCS requests) and the watchdog looks again after another
//! `S`. So `S` must be longer than any handler runs, than any stretch a
//! PE computes outside its scheduler, and than any wait for another
//! process (each process watches its own PEs only). A job that is ending
//! is never reported.
//!
//! # A job left quiescent
//!
//! A job with nothing pending anywhere and no exit coming (a forgotten
//! `converse::exit`) is idle by design as far as this thread can tell.
//! PE 0 looks for it instead (`ccd::quiescence::quiet_timeout`): once
//! idle for `S` it asks the quiescence detection, and if the whole job is
//! quiescent it says so, once a job, in one line; the job goes on (it may
//! be a server waiting for CCS requests).
//!
//! # Naming who never came
//!
//! A reduction that cannot complete is one some PE waits in for a child
//! that never contributed. The answers list, per PE, the reductions it
//! joined and the children it waits for; a child of this process whose
//! answer does not list the reduction never contributed, and the dump
//! names it.
//!
//! # Concurrency
//!
//! The thread reads each PE's `PeWatch` (atomics and small mutexes, see
//! `trace::watch`) and wakes idle PEs so they answer; it never touches PE
//! state. `fire` and `stop` reach it through a mutex and a condition
//! variable. It holds the job weakly: a job that has ended ends it.
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::proc::signals;
use crate::rt::job::Job;
use crate::trace::watch::{Answer, PeWatch, Seen};

/// How long the watchdog waits for the PEs' answers.
const ANSWER_WAIT: Duration = Duration::from_secs(1);

/// A process's watchdog.
pub(crate) struct Watchdog {
    period: Duration,
    first_pe: usize,
    process: usize,
    pes: Vec<Arc<PeWatch>>,
    state: Mutex<State>,
    cv: Condvar,
    thread: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Default)]
struct State {
    stop: bool,
    /// Why to dump and abort now (the first reason given).
    fired: Option<String>,
}

impl Watchdog {
    /// How long PEs may sit without beginning a handler (`++watchdog S`).
    pub fn period(&self) -> Duration {
        self.period
    }

    /// A watchdog of `count` PEs from `first_pe`, in process `process`,
    /// that fires after `period` without a handler beginning.
    pub fn new(period: Duration, process: usize, first_pe: usize, count: usize) -> Watchdog {
        let epoch = Instant::now();
        Watchdog {
            period,
            first_pe,
            process,
            pes: (first_pe..first_pe + count)
                .map(|pe| Arc::new(PeWatch::new(pe, epoch)))
                .collect(),
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
            thread: Mutex::new(None),
        }
    }

    /// PE `pe`'s face towards the watchdog (a PE of this process).
    pub fn pe(&self, pe: usize) -> Arc<PeWatch> {
        self.pes[pe - self.first_pe].clone()
    }

    /// Starts the watching thread (and the SIGQUIT handler).
    pub fn start(self: &Arc<Self>, job: &Arc<Job>) {
        signals::install(signals::QUIT);
        // Counted from here, not from when the thread first runs: a
        // SIGQUIT in between is this job's.
        let sigquits = signals::count(signals::QUIT);
        let me = self.clone();
        let job = Arc::downgrade(job);
        let handle = std::thread::Builder::new()
            .name("converse-watchdog".into())
            .spawn(move || me.run(job, sigquits))
            .unwrap_or_else(|e| {
                crate::proc::exit::abort(&format!("++watchdog: cannot start its thread: {e}"))
            });
        *crate::sync::lock(&self.thread) = Some(handle);
    }

    /// Ends the watching thread (the job has ended).
    pub fn stop(&self) {
        crate::sync::lock(&self.state).stop = true;
        self.cv.notify_all();
        let handle = crate::sync::lock(&self.thread).take();
        if let Some(h) = handle {
            let _ = h.join();
        }
    }

    /// Dumps what every PE does and aborts the job with `reason` (called
    /// by a PE: the reduction stall check).
    pub fn fire(&self, reason: String) {
        let mut state = crate::sync::lock(&self.state);
        if state.fired.is_none() {
            state.fired = Some(reason);
        }
        drop(state);
        self.cv.notify_all();
    }

    fn run(&self, job: Weak<Job>, mut sigquits: u64) {
        let tick = (self.period / 4).clamp(Duration::from_millis(10), Duration::from_millis(250));
        let mut beats = self.beats();
        let mut quiet_since = Instant::now();
        loop {
            let fired = {
                let state = crate::sync::lock(&self.state);
                let (mut state, _) = self
                    .cv
                    .wait_timeout_while(state, tick, |s| !s.stop && s.fired.is_none())
                    .unwrap_or_else(|e| e.into_inner());
                if state.stop {
                    return;
                }
                state.fired.take()
            };
            let Some(job) = job.upgrade() else { return };
            if job.is_exiting() {
                continue;
            }
            if let Some(reason) = fired {
                let answers = self.ask_all(&job);
                if job.is_exiting() {
                    // It ended meanwhile (PEs unwinding answer no more).
                    continue;
                }
                self.dump(
                    &format!(
                        "what each PE of process {} does (the job aborts: the last line says why):",
                        self.process
                    ),
                    &answers,
                );
                crate::proc::exit::abort(&format!("watchdog: {reason}"));
            }
            let now_quits = signals::count(signals::QUIT);
            if now_quits != sigquits {
                sigquits = now_quits;
                let answers = self.ask_all(&job);
                self.dump(
                    &format!(
                        "SIGQUIT: what each PE of process {} does (the job goes on):",
                        self.process
                    ),
                    &answers,
                );
            }
            let now = self.beats();
            if now != beats {
                beats = now;
                quiet_since = Instant::now();
                continue;
            }
            if quiet_since.elapsed() < self.period {
                continue;
            }
            let answers = self.ask_all(&job);
            // Answering begins no handler; a handler begun meanwhile means
            // the PEs are moving after all.
            if self.beats() != beats || !pending(&answers) || job.is_exiting() {
                beats = self.beats();
                quiet_since = Instant::now();
                continue;
            }
            let secs = self.period.as_secs_f64();
            let reason = format!(
                "no PE of process {} began a handler for {secs} s while work is pending (++watchdog {secs})",
                self.process
            );
            self.dump(&format!("{reason}; what each PE does:"), &answers);
            crate::proc::exit::abort(&format!("watchdog: {reason}; see the report above"));
        }
    }

    fn beats(&self) -> u64 {
        self.pes.iter().map(|w| w.beats()).sum()
    }

    /// Asks every PE for its answer and waits for them a while: what
    /// each PE showed, with its answer if it gave one.
    fn ask_all(&self, job: &Job) -> Vec<(Seen, Option<Answer>)> {
        for w in &self.pes {
            w.ask();
            if let Some(shared) = job.local_pe(w.pe) {
                shared.idle.wake();
            }
        }
        let deadline = Instant::now() + ANSWER_WAIT.min(self.period);
        let mut answers: Vec<Option<Answer>> = vec![None; self.pes.len()];
        loop {
            for (w, a) in self.pes.iter().zip(&mut answers) {
                if a.is_none() {
                    *a = w.take_answer();
                }
            }
            let waiting = self
                .pes
                .iter()
                .zip(&answers)
                .any(|(w, a)| a.is_none() && !w.seen().done);
            if !waiting || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.pes.iter().map(|w| w.seen()).zip(answers).collect()
    }

    /// Prints `headline`, then a line per PE, then who never contributed
    /// to the reductions PEs wait in.
    fn dump(&self, headline: &str, answers: &[(Seen, Option<Answer>)]) {
        let kinds = crate::msg::system::kind_names();
        let mut out = format!("converse: watchdog: {headline}\n");
        for ((seen, answer), w) in answers.iter().zip(&self.pes) {
            let name = |key: u32| w.name_of(key, &kinds);
            let mut parts = vec![describe_state(seen, &name)];
            match answer {
                Some(a) => parts.extend(a.lines.iter().cloned()),
                None if !seen.done => parts.push("did not answer".to_string()),
                None => {}
            }
            if !seen.last.is_empty() {
                let last: Vec<String> = seen.last.iter().map(|&k| name(k)).collect();
                parts.push(format!("last handlers (oldest first): {}", last.join(", ")));
            }
            out += &format!("converse: watchdog: PE {}: {}\n", seen.pe, parts.join("; "));
        }
        for line in culprits(answers, self.first_pe) {
            out += &format!("converse: watchdog: {line}\n");
        }
        crate::proc::io::error(format_args!("{out}"));
    }
}

/// What the PE was doing, as the watchdog saw it.
fn describe_state(seen: &Seen, name: &dyn Fn(u32) -> String) -> String {
    if seen.done {
        return "has finished".to_string();
    }
    if let Some(what) = seen.blocked_in {
        return format!("blocked in {what}");
    }
    if let Some(&(key, for_how_long)) = seen.running.last() {
        let mut s = format!(
            "in handler {} for {:.1} s",
            name(key),
            for_how_long.as_secs_f64()
        );
        if seen.running.len() > 1 {
            let outer: Vec<String> = seen.running[..seen.running.len() - 1]
                .iter()
                .map(|&(k, _)| name(k))
                .collect();
            s += &format!(" (inside {})", outer.join(" < "));
        }
        return s;
    }
    match seen.idle_for {
        Some(d) => format!("idle for {:.1} s", d.as_secs_f64()),
        None => "outside any handler (its start function, or between handlers)".to_string(),
    }
}

/// True if the answers show work that should have moved: a PE that did
/// not answer, or one that holds or waits for something.
fn pending(answers: &[(Seen, Option<Answer>)]) -> bool {
    answers.iter().any(|(seen, answer)| match answer {
        None => !seen.done,
        Some(a) => a.pending || !a.reductions.is_empty() || !a.held.is_empty(),
    })
}

/// For every reduction a PE waits in: the PEs it waits for that never
/// contributed (of this process: their answers do not list it).
fn culprits(answers: &[(Seen, Option<Answer>)], first_pe: usize) -> Vec<String> {
    let mut lines = Vec::new();
    for (seen, answer) in answers {
        let Some(a) = answer else { continue };
        for (what, missing) in &a.reductions {
            for &m in missing {
                let line = match m.checked_sub(first_pe).and_then(|i| answers.get(i)) {
                    None => format!(
                        "PE {m} (another process) has not contributed to {what}, which PE {} waits for",
                        seen.pe
                    ),
                    Some((_, None)) => format!(
                        "PE {m} has not contributed to {what}, which PE {} waits for, and did not answer",
                        seen.pe
                    ),
                    Some((_, Some(ma))) if ma.reductions.iter().any(|(w, _)| w == what) => {
                        continue; // it joined, and waits for its own children
                    }
                    Some(_) => format!(
                        "PE {m} never contributed to {what}, which PE {} waits for",
                        seen.pe
                    ),
                };
                lines.push(line);
            }
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(pe: usize) -> Seen {
        Seen {
            pe,
            done: false,
            running: Vec::new(),
            idle_for: Some(Duration::from_secs(3)),
            blocked_in: None,
            last: Vec::new(),
        }
    }

    fn waits(what: &str, missing: &[usize]) -> Answer {
        Answer {
            reductions: vec![(what.to_string(), missing.to_vec())],
            ..Answer::default()
        }
    }

    #[test]
    fn the_pe_that_never_contributed_is_named() {
        // PE 0 waits for 1 and 2; 1 joined and waits for 3; 2 contributed
        // to nothing; 3 (another process) is not here.
        let answers = vec![
            (seen(0), Some(waits("reduction #0", &[1, 2]))),
            (seen(1), Some(waits("reduction #0", &[3]))),
            (seen(2), Some(Answer::default())),
        ];
        assert!(pending(&answers));
        assert_eq!(
            culprits(&answers, 0),
            [
                "PE 2 never contributed to reduction #0, which PE 0 waits for",
                "PE 3 (another process) has not contributed to reduction #0, which PE 1 waits for",
            ]
        );
    }

    #[test]
    fn idle_pes_with_nothing_held_are_not_pending() {
        let answers = vec![
            (seen(0), Some(Answer::default())),
            (seen(1), Some(Answer::default())),
        ];
        assert!(!pending(&answers));
        let mut quiet = seen(2);
        quiet.idle_for = None;
        // No answer from a PE that has not finished: pending.
        assert!(pending(&[(quiet, None)]));
    }

    #[test]
    fn states_read_plainly() {
        let name = |k: u32| format!("h{k}");
        let mut s = seen(0);
        assert_eq!(describe_state(&s, &name), "idle for 3.0 s");
        s.running = vec![
            (1, Duration::from_secs(9)),
            (2, Duration::from_millis(2500)),
        ];
        assert_eq!(
            describe_state(&s, &name),
            "in handler h2 for 2.5 s (inside h1)"
        );
        s.blocked_in = Some("a node barrier");
        assert_eq!(describe_state(&s, &name), "blocked in a node barrier");
    }
}
