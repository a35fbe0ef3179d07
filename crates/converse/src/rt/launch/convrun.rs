//! The bootstrap of a process started by `convrun`: its place comes from
//! the environment, the cards go through the launcher's control socket,
//! and that connection stays open for the rest of the process's life (the
//! protocol is `launch_wire`'s; this is its process side).
//!
//! # Invariants
//!
//! - A process has at most one launcher connection ([`LINK`]); it is set
//!   once, when start-up is over, and lines written to it are whole
//!   (written under its lock).
//! - Every read from the launcher is bounded (`launch_wire`'s line limits):
//!   an endless line is malformed, not a growing buffer.
//! - The launcher's end of stream is a fault unless [`ENDING`] says the
//!   process is ending on purpose.
//!
//! # Concurrency
//!
//! Start-up ([`Convrun::exchange`], [`Convrun::joined`]) runs on the thread
//! that starts the process. After it, a thread named `launcher` reads the
//! connection; any thread may write a line through [`LINK`] (the PEs when
//! they end, an at-exit hook when the process goes down).
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use launch_wire::{Card, Nonce, ToLauncher, ToProcess};

use super::{Bootstrap, Placement};

/// True once the process is ending on purpose: the launcher's end of stream
/// is then no fault.
static ENDING: AtomicBool = AtomicBool::new(false);

/// The launcher connection, for the lines this process writes after
/// start-up.
static LINK: OnceLock<Mutex<TcpStream>> = OnceLock::new();

/// The convrun bootstrap of one process.
pub(super) struct Convrun {
    /// `HOST:PORT` of the launcher's control socket.
    launcher: String,
    /// The connection (and its reading side), from the card exchange
    /// until start-up is over: then [`LINK`] and the watcher thread take
    /// them.
    link: Mutex<Option<(TcpStream, BufReader<TcpStream>)>>,
}

/// The placement `convrun` gave this process, if it started it.
pub(super) fn placement() -> Result<Option<Placement>, String> {
    let Some(wire) = launch_wire::Placement::from_env(|name| std::env::var(name).ok())
        .map_err(|e| e.to_string())?
    else {
        return Ok(None);
    };
    let launch_wire::Placement {
        launcher,
        node,
        nodes,
        key,
        shm_id,
        netmod,
        host,
        hosts,
        timeout,
        host_pes,
    } = wire;
    Ok(Some(Placement {
        node,
        nodes,
        key,
        shm_id,
        netmod,
        host,
        hosts,
        timeout,
        host_pes,
        boot: std::sync::Arc::new(Convrun {
            launcher,
            link: Mutex::new(None),
        }),
    }))
}

impl Bootstrap for Convrun {
    fn exchange(
        &self,
        place: &Placement,
        card: &str,
        deadline: Instant,
    ) -> Result<Vec<String>, String> {
        let me = place.node;
        let card =
            Card::new(card).map_err(|e| format!("cannot send the business card `{card}`: {e}"))?;
        let mut link = connect(&self.launcher, deadline)
            .map_err(|e| format!("cannot reach the launcher at {}: {e}", self.launcher))?;
        tracing::debug!(process = me, launcher = %self.launcher, "connected to the launcher");
        // Short lines each way, some back to back: no Nagle delay.
        link.set_nodelay(true)
            .map_err(|e| format!("launcher socket: {e}"))?;
        let mut reader = BufReader::new(
            link.try_clone()
                .map_err(|e| format!("launcher socket: {e}"))?,
        );
        link.set_read_timeout(Some(
            deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(10)),
        ))
        .map_err(|e| e.to_string())?;
        let mut line = Vec::new();
        // The challenge and welcome lines are short: a longer line is
        // malformed.
        let short = ToProcess::max_len(0);
        let challenge = match read_from_launcher(&mut reader, &mut line, short, place)? {
            ToProcess::Challenge(nonce) => nonce,
            _ => return Err(unexpected(&line)),
        };
        let nonce = Nonce::generate().map_err(|e| format!("cannot draw a nonce: {e}"))?;
        let pid = std::process::id();
        let hello = ToLauncher::Hello {
            node: me,
            pid,
            proof: place
                .key
                .hello_proof(&challenge, &nonce, me, pid, card.as_str()),
            card,
            nonce,
        };
        link.write_all(hello.encode().as_bytes())
            .map_err(|e| format!("cannot write to the launcher: {e}"))?;
        match read_from_launcher(&mut reader, &mut line, short, place)? {
            ToProcess::Welcome(proof)
                if place.key.verify_welcome(&challenge, &nonce, me, &proof) => {}
            ToProcess::Welcome(_) => {
                return Err(format!(
                    "the launcher at {} does not prove the job key: not the job's launcher",
                    self.launcher
                ));
            }
            _ => return Err(unexpected(&line)),
        }
        tracing::debug!(process = me, "the launcher proved the job key");
        let max = ToProcess::max_len(place.nodes);
        let cards = match read_from_launcher(&mut reader, &mut line, max, place)? {
            ToProcess::Cards(cards) => cards,
            _ => return Err(unexpected(&line)),
        };
        if cards.len() != place.nodes {
            return Err(format!(
                "the launcher sent {} business cards for {} processes",
                cards.len(),
                place.nodes
            ));
        }
        *crate::sync::lock(&self.link) = Some((link, reader));
        Ok(cards.into_iter().map(Card::into_string).collect())
    }

    fn joined(&self, place: &Placement) -> Result<(), String> {
        let Some((link, reader)) = crate::sync::lock(&self.link).take() else {
            return Err("joined before the business cards were exchanged".into());
        };
        link.set_read_timeout(None).map_err(|e| e.to_string())?;
        if LINK.set(Mutex::new(link)).is_ok() {
            // A process that goes down only because another failed says so,
            // so that the launcher blames that one; one that fails on its
            // own says why, so that the launcher tells the others the same
            // cause as its own network message does (whichever comes
            // first, they print one reason).
            crate::proc::exit::at_exit(|ending| {
                if ending.culprit.lost() {
                    tell(&ToLauncher::Lost);
                } else {
                    tell(&ToLauncher::Failed(ending.reason.to_string()));
                }
            });
        }
        watch_launcher(reader, place.node);
        Ok(())
    }

    fn ending(&self) {
        ENDING.store(true, Ordering::Release);
    }

    fn tell_ended(&self) {
        tell(&ToLauncher::End);
    }
}

/// Reads the launcher's next start-up line (at most `max` bytes).
fn read_from_launcher(
    reader: &mut BufReader<TcpStream>,
    line: &mut Vec<u8>,
    max: usize,
    place: &Placement,
) -> Result<ToProcess, String> {
    match read_line(reader, line, max) {
        Ok(Got::End) => Err("the launcher closed the connection during start-up".into()),
        Ok(Got::Overlong) => Err(format!(
            "unexpected line from the launcher: longer than {max} bytes"
        )),
        Ok(Got::Line) => std::str::from_utf8(line)
            .ok()
            .and_then(|l| ToProcess::parse(l).ok())
            .ok_or_else(|| unexpected(line)),
        Err(e) => Err(format!(
            "no answer from the launcher within {} s: {e}",
            place.timeout.as_secs()
        )),
    }
}

/// The error for a line the launcher should not have sent then.
fn unexpected(line: &[u8]) -> String {
    format!(
        "unexpected line from the launcher: {}",
        launch_wire::shown(String::from_utf8_lossy(line).trim_end())
    )
}

fn connect(addr: &str, deadline: Instant) -> std::io::Result<TcpStream> {
    let mut last = std::io::Error::other("no address");
    for a in addr.to_socket_addrs()? {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(100));
        match TcpStream::connect_timeout(&a, left) {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// What [`read_line`] got.
pub(super) enum Got {
    /// The end of the stream.
    End,
    /// A line (its `\n` included, unless the stream ended first).
    Line,
    /// The first `max` bytes of a longer line; the rest is left unread.
    Overlong,
}

/// Reads one line of at most `max` bytes into `line` (cleared first).
pub(super) fn read_line(
    reader: &mut impl BufRead,
    line: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Got> {
    line.clear();
    let n = reader
        .by_ref()
        .take(max.try_into().unwrap_or(u64::MAX))
        .read_until(b'\n', line)?;
    Ok(if n == 0 {
        Got::End
    } else if n == max && line.last() != Some(&b'\n') {
        Got::Overlong
    } else {
        Got::Line
    })
}

/// Watches the launcher connection for the rest of the process's life.
fn watch_launcher(mut reader: BufReader<TcpStream>, me: usize) {
    let spawned = std::thread::Builder::new()
        .name("launcher".into())
        .spawn(move || {
            let mut line = Vec::new();
            // After start-up the launcher sends only `abort` lines: a
            // longer line than those can be is malformed, and skipped.
            let max = ToProcess::max_len(0);
            let mut skipping = false;
            loop {
                match read_line(&mut reader, &mut line, max) {
                    Ok(Got::End) | Err(_) => {
                        if ENDING.load(Ordering::Acquire) {
                            tracing::debug!(process = me, "the launcher closed the connection");
                            return;
                        }
                        die_lost(me, "the launcher (convrun) is gone");
                    }
                    Ok(Got::Overlong) => skipping = true,
                    Ok(Got::Line) if skipping => skipping = false,
                    Ok(Got::Line) => {
                        // Lines that mean nothing here are ignored.
                        let said = std::str::from_utf8(&line).map(ToProcess::parse);
                        if let Ok(Ok(ToProcess::Abort(text))) = said {
                            die_lost(me, text.trim_end());
                        }
                    }
                }
            }
        });
    match spawned {
        Ok(_) => tracing::debug!(process = me, "watching the launcher connection"),
        Err(e) => {
            crate::proc::log::report!(
                ERROR,
                &format!("converse: process {me}: cannot watch the launcher: {e}")
            );
        }
    }
}

/// Ends process `me` because the job ended elsewhere (the launcher said
/// so, or is gone), saying `why` (see `proc::exit::Culprit::Elsewhere`).
fn die_lost(me: usize, why: &str) -> ! {
    crate::proc::exit::die(
        crate::proc::exit::ABORT_EXIT_CODE,
        &format!("converse: process {me} ending the job: {why}"),
        crate::proc::exit::Ending {
            reason: why,
            culprit: crate::proc::exit::Culprit::Elsewhere,
        },
    )
}

/// Tells the launcher `line` (how this process is ending), if connected.
fn tell(line: &ToLauncher) {
    if let Some(link) = LINK.get() {
        let mut link = crate::sync::lock(link);
        let _ = link.write_all(line.encode().as_bytes());
        let _ = link.flush();
    }
}
