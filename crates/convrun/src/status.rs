//! How each process ended, what the launcher reports about it, and the
//! job's exit code.
//!
//! A process's end is judged by what it said on its control connection
//! before it exited ([`Said`]): `end` (its part of the job was done),
//! `lost` (it ended because another process failed), `failed TEXT` (it
//! failed on its own and said why) or nothing (it failed on its own: it
//! died, aborted, or left outside the runtime). The first process that
//! failed on its own is reported, the others are told (with its reason when
//! it gave one, in the words its own network message to them uses, so they
//! tell one cause whichever news comes first) and given [`GRACE`] to end, and its exit code becomes the job's; else
//! the first non-zero code a process chose; else that of a process that
//! ended because of another; else 0 ([`Job::final_code`]).
//!
//! # Invariants
//!
//! [`Said`] keeps at most one line of [`ToLauncher::MAX_LEN`] bytes of what
//! a process said, whatever it sends, and the `whois` requests of the
//! bytes it was last fed (which [`Job::listen`] takes and answers after
//! each read).
use std::process::ExitStatus;

use launch_wire::{ToLauncher, ToProcess};

use crate::job::{GRACE, Job};

/// How long the processes that can still be reached get to end by
/// themselves once one went silent (they end at once when told; the
/// silent one never will).
const SILENT_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// How a process ended, from what it said before it exited.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Ending {
    /// It said `end`: its part of the job finished (exit code as chosen).
    OnPurpose,
    /// It said `lost`: it ended because another process failed.
    Secondary,
    /// It said nothing: it died, aborted or exited outside the runtime.
    Primary,
}

/// What a process said on its control connection after `go`.
#[derive(Default)]
pub struct Said {
    /// The processes whose cards it asked for (`whois`), not yet taken.
    asked: Vec<usize>,
    /// The start of a line whose end has not come yet.
    partial: Vec<u8>,
    /// Inside a line longer than the protocol allows: dropped up to its
    /// end.
    skipping: bool,
    end: bool,
    lost: bool,
    /// What it said it failed of (`failed TEXT`), if it did.
    reason: Option<String>,
}

impl Said {
    /// Takes `bytes`, the next ones the process sent.
    pub fn feed(&mut self, bytes: &[u8]) {
        for chunk in bytes.split_inclusive(|&b| b == b'\n') {
            let complete = chunk.last() == Some(&b'\n');
            if self.skipping {
                self.skipping = !complete;
                continue;
            }
            self.partial.extend_from_slice(chunk);
            if self.partial.len() > ToLauncher::MAX_LEN {
                self.partial.clear();
                self.skipping = !complete;
            } else if complete {
                let line = std::mem::take(&mut self.partial);
                self.heard(&line);
            }
        }
    }

    /// Notes what `line` says; lines that mean nothing here are ignored.
    /// What it said, a last line without its newline included.
    fn settled(&self) -> Said {
        let mut all = Said {
            asked: Vec::new(),
            partial: Vec::new(),
            skipping: false,
            end: self.end,
            lost: self.lost,
            reason: self.reason.clone(),
        };
        if !self.skipping {
            all.heard(&self.partial);
        }
        all
    }

    /// Moves the processes it asked for the cards of since the last call
    /// into `into` (emptied first), in the order asked.
    pub fn take_asked(&mut self, into: &mut Vec<usize>) {
        into.clear();
        into.append(&mut self.asked);
    }

    /// Why the process failed, if it said (`failed TEXT`).
    pub fn reason(&self) -> Option<String> {
        self.settled().reason
    }

    fn heard(&mut self, line: &[u8]) {
        match std::str::from_utf8(line).map(ToLauncher::parse) {
            Ok(Ok(ToLauncher::WhoIs(node))) => self.asked.push(node),
            Ok(Ok(ToLauncher::End)) => self.end = true,
            Ok(Ok(ToLauncher::Lost)) => self.lost = true,
            Ok(Ok(ToLauncher::Failed(text))) => self.reason = Some(text),
            _ => {}
        }
    }

    /// How the process ended, by what it said (a last line without its
    /// newline counts).
    pub fn ending(&self) -> Ending {
        let all = self.settled();
        if all.end {
            Ending::OnPurpose
        } else if all.lost {
            Ending::Secondary
        } else {
            Ending::Primary
        }
    }
}

/// The exit code a status stands for (128 + signal when killed).
pub fn code_of(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        _ => 1,
    }
}

pub fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited with code {c}"),
        (None, Some(sig)) => format!("was killed by signal {sig} ({})", signal_name(sig)),
        _ => "ended".into(),
    }
}

/// What an exit code of the remote shell means when it is not the
/// program's own choice (see `convrun`'s top comment), in parentheses.
fn remote_hint(status: ExitStatus) -> String {
    match status.code() {
        Some(255) => " (255: ssh could not connect or log in)".into(),
        Some(127) => " (127: the program was not found there)".into(),
        Some(126) => " (126: the program could not be run there)".into(),
        Some(c @ 129..=192) => format!(
            " ({c} = 128 + {}: killed by signal {} ({}) there)",
            c - 128,
            c - 128,
            signal_name(c - 128)
        ),
        _ => String::new(),
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGHUP => "SIGHUP",
        _ => "signal",
    }
}

fn pes_of(node: usize, ppn: usize) -> String {
    if ppn == 1 {
        format!("PE {node}")
    } else {
        format!("PEs {}..{}", node * ppn, node * ppn + ppn - 1)
    }
}

impl Job {
    /// `process N (PEs ...)`, and `on HOST` for a remote one.
    pub fn who(&self, node: usize) -> String {
        let p = &self.procs[node];
        match &p.remote {
            Some(host) => format!("process {node} ({}) on {host}", pes_of(node, self.opts.ppn)),
            None => format!("process {node} ({})", pes_of(node, self.opts.ppn)),
        }
    }

    /// What process `node`'s exit code means, for a remote one.
    pub fn hint(&self, node: usize) -> String {
        let p = &self.procs[node];
        match &p.remote {
            Some(_) => remote_hint(p.status.expect("reaped")),
            None => String::new(),
        }
    }

    pub fn ending(&self, node: usize) -> Ending {
        self.procs[node].said.ending()
    }

    /// Process `node`, still running, went silent past the peer timeout
    /// (its link ended so: its host is down or cut off). Reported (the
    /// first failure of the job only), every process told, and the job
    /// ended: the processes that can still be reached end themselves, what
    /// is left after [`SILENT_GRACE`] is killed (a process on a host cut
    /// off ends itself once the launcher is silent to it as long).
    pub fn silent(&mut self, node: usize) {
        if self.procs[node].status.is_some() && !self.link_silent(node) {
            return;
        }
        let first = self.failure.is_none();
        if first {
            self.failure = Some(1);
        }
        let why = converse_net::liveness::silence(&self.who(node), self.opts.peer_timeout);
        if first {
            eprintln!("convrun: {why}; ending the job");
        }
        self.tell_all(&ToProcess::Abort(why));
        self.end_all(SILENT_GRACE);
    }

    /// Records how `node` ended; reports it (and ends the rest of the job)
    /// if it failed on its own.
    pub fn note_exit(&mut self, node: usize) {
        let status = self.procs[node].status.expect("reaped");
        let code = code_of(status);
        match self.ending(node) {
            Ending::OnPurpose => {
                if code != 0 && self.chosen.is_none() {
                    self.chosen = Some(code);
                }
            }
            Ending::Secondary => {
                if code != 0 && self.secondary.is_none() {
                    self.secondary = Some(code);
                }
            }
            // It said nothing, and nothing has come from it for the peer
            // timeout: it ended cut off (a remote shell that still reaches
            // this host reports the exit; what it said did not come).
            Ending::Primary
                if self.procs[node].said.reason().is_none() && self.link_silent(node) =>
            {
                self.silent(node);
            }
            Ending::Primary => {
                let first = self.failure.is_none();
                if first {
                    // A process that failed on its own decides the code,
                    // even if it exited with 0 (before its part was done).
                    self.failure = Some(if code == 0 { 1 } else { code });
                }
                let (who, how, hint) = (self.who(node), describe(status), self.hint(node));
                if self.running() > 0 {
                    if first {
                        eprintln!(
                            "convrun: {who} {how} before its part of the job ended; ending the job{hint}"
                        );
                    }
                    // In the words of the process's own `Abort` to its
                    // peers (`rt::network`), when it said why.
                    let text = match self.procs[node].said.reason() {
                        Some(why) => format!("{who} ended it: {why}"),
                        None => format!("lost {who}: it {how}{hint}"),
                    };
                    self.tell_all(&ToProcess::Abort(text));
                    self.end_all(GRACE);
                } else if first {
                    eprintln!("convrun: {who} {how} before its part of the job ended{hint}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(chunks: &[&[u8]]) -> Ending {
        let mut s = Said::default();
        for c in chunks {
            s.feed(c);
        }
        s.ending()
    }

    #[test]
    fn an_ending_is_read_from_whole_lines_in_any_chunks() {
        assert_eq!(said(&[]), Ending::Primary);
        assert_eq!(said(&[b"end\n"]), Ending::OnPurpose);
        assert_eq!(said(&[b"e", b"n", b"d\n"]), Ending::OnPurpose);
        assert_eq!(said(&[b"lost\n"]), Ending::Secondary);
        assert_eq!(said(&[b"lost\nend\n"]), Ending::OnPurpose);
        // A last line without its newline counts, as before.
        assert_eq!(said(&[b"lost\nend"]), Ending::OnPurpose);
        assert_eq!(said(&[b"ending\nlost now\n\xff\n"]), Ending::Primary);
    }

    #[test]
    fn a_failed_process_says_why() {
        let mut s = Said::default();
        s.feed(b"failed PE 1 aborted: b");
        // A last line without its newline counts.
        assert_eq!(s.reason().as_deref(), Some("PE 1 aborted: b"));
        s.feed(b"oom\n");
        assert_eq!(s.reason().as_deref(), Some("PE 1 aborted: boom"));
        // It failed on its own: the launcher reports it.
        assert_eq!(s.ending(), Ending::Primary);
        let mut quiet = Said::default();
        quiet.feed(b"failed\x01bad\n");
        assert_eq!(quiet.reason(), None, "a malformed line says nothing");
    }

    #[test]
    fn requests_are_taken_in_order_from_whole_lines() {
        let mut s = Said::default();
        let mut asked = vec![99];
        s.feed(b"whois 3\nwhois 0\nwhois 1");
        s.take_asked(&mut asked);
        assert_eq!(asked, [3, 0]);
        s.feed(b"2\nwhois x\nwhois\n");
        s.take_asked(&mut asked);
        assert_eq!(asked, [12], "malformed requests are no requests");
        s.take_asked(&mut asked);
        assert!(asked.is_empty());
        // A last request without its newline asks nothing, and says
        // nothing of how the process ended.
        s.feed(b"whois 4");
        assert_eq!(s.ending(), Ending::Primary);
        s.take_asked(&mut asked);
        assert!(asked.is_empty());
    }

    #[test]
    fn an_endless_line_is_dropped_not_kept() {
        let mut s = Said::default();
        let junk = vec![b'x'; 1 << 16];
        for _ in 0..64 {
            s.feed(&junk);
            assert!(s.partial.len() <= ToLauncher::MAX_LEN);
        }
        // Its end is skipped too; the next line counts.
        s.feed(b"end\nlost\n");
        assert_eq!(s.ending(), Ending::Secondary);
    }
}
