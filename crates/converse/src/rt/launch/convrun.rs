//! The bootstrap of a process started by `convrun`: its place comes from
//! the environment, its business card goes to the launcher's control
//! socket, a peer's card comes back when asked for (`whois`, `card`), and
//! that connection stays open for the rest of the process's life (the
//! protocol is `launch_wire`'s; this is its process side).
//!
//! # Invariants
//!
//! - A bootstrap has at most one launcher connection. Its writing side is
//!   one mutex (`Convrun::writer`, which [`LINK`] shares once start-up is
//!   over): every line is written whole under it, so lines from several
//!   threads never mix.
//! - One thread at a time reads the connection: until start-up is over,
//!   the [`Convrun::card_of`] caller that holds the reader (the start-up
//!   thread, or any other), which hands every answer it reads to whoever
//!   waits for it; then the `launcher` thread alone, which does the same.
//!   A line is handed over whole; a line a read's timeout cut is finished
//!   by the next read, whoever makes it.
//! - At most one `whois` per peer is out at a time: callers asking for the
//!   same peer meanwhile wait for the same answer. A request's entry lives
//!   while callers wait on it and no card is kept after: what this process
//!   holds does not grow with the job (a network module asks once per
//!   peer, when it first connects to it).
//! - Every read from the launcher is bounded (`ToProcess::MAX_LEN`): an
//!   endless line is malformed, not a growing buffer. Every wait for a card
//!   ends by `++timeout`, with an error naming the peer and the wait; when
//!   nothing reads the connection any more (it ended, or start-up failed
//!   on it), every wait ends at once with the reason.
//! - The launcher's end of stream is a fault unless [`ENDING`] says the
//!   process is ending on purpose, with one exception: a connection the
//!   launcher closes or resets before its welcome (a flood of strangers
//!   took its slot) is made again, after a pause that doubles up to
//!   [`MAX_HELLO_PAUSE`], until start-up's deadline. An `abort` in place
//!   of the welcome is the job's end, with the launcher's cause.
//! - The connection is watched (`converse_net::liveness`: the `launcher`
//!   thread's reads time out every sixth of `++peer-timeout` to look): a
//!   launcher silent that long (its host down, or this one cut off) ends
//!   the process saying so, so that nothing of a job outlives a partition
//!   for long.
//!
//! # Concurrency
//!
//! Start-up ([`Convrun::publish`], then [`Convrun::joined`]) runs on the
//! thread that starts the process; [`Convrun::card_of`] may be called from
//! any thread once `publish` returned. The requests and their answers are
//! a table under one mutex with a condition variable (`Lookups`): a caller
//! enters its request, writes `whois` if it is the first for that peer,
//! and waits until the card is in the table, the deadline passes, or
//! reading ended. Until `joined`, the reader sits in the table when free: a
//! waiting caller takes it, reads one line without the lock (a read
//! timeout at its deadline), puts it back and wakes the others. `joined`
//! waits for the reader to be back, then gives it to the `launcher`
//! thread for good, which reads without a timeout, hands `card` answers
//! over the same way and ends the process on `abort` or the launcher's end
//! of stream. Any thread may write a line (a request, the PEs' `end`, the
//! at-exit hook's `lost` or `failed`).
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use launch_wire::{Card, Nonce, ToLauncher, ToProcess};

use super::{Bootstrap, BootstrapError, Placement};

/// True once the process is ending on purpose: the launcher's end of stream
/// is then no fault.
static ENDING: AtomicBool = AtomicBool::new(false);

/// The launcher connection's writing side once start-up is over, for the
/// lines the process writes as it ends (the bootstrap's `writer`).
static LINK: OnceLock<Arc<Mutex<TcpStream>>> = OnceLock::new();

/// The convrun bootstrap of one process.
pub(super) struct Convrun {
    /// `HOST:PORT` of the launcher's control socket.
    launcher: String,
    /// How long an answer of the launcher may take (`++timeout`).
    timeout: Duration,
    /// The connection's writing side, from the hello on.
    writer: OnceLock<Arc<Mutex<TcpStream>>>,
    /// The requests for cards and their answers, and who reads.
    lookups: Arc<Lookups>,
}

/// The cards asked for (see the module comment's protocol).
struct Lookups {
    table: Mutex<Table>,
    /// Signalled when an answer comes, the reader is put back, or reading
    /// ends.
    changed: Condvar,
}

struct Table {
    /// The requests out, by peer.
    asked: HashMap<usize, Asked>,
    reading: Reading,
}

/// One peer's request.
struct Asked {
    /// Callers waiting for the answer (the entry goes when the last
    /// leaves).
    waiters: usize,
    /// The answer, once it came.
    card: Option<String>,
}

/// Who reads the connection.
enum Reading {
    /// Start-up: a `card_of` caller, the one that took the reader (`None`
    /// while one holds it).
    Callers(Option<LineReader>),
    /// The `launcher` thread, from `joined` on.
    Watcher,
    /// Nobody, and nobody will: why (no connection yet, or it ended).
    Over(BootstrapError),
}

impl Lookups {
    fn table(&self) -> MutexGuard<'_, Table> {
        crate::sync::lock(&self.table)
    }

    /// Hands the answer `card` for `peer` to its waiters (an answer nobody
    /// waits for any more, its callers having given up, is dropped).
    fn answered(&self, peer: usize, card: Card) {
        if let Some(asked) = self.table().asked.get_mut(&peer) {
            asked.card.get_or_insert_with(|| card.into_string());
        }
        self.changed.notify_all();
    }

    /// Nothing reads the connection any more, because of `why`: every
    /// wait ends.
    fn over(&self, why: BootstrapError) {
        self.table().reading = Reading::Over(why);
        self.changed.notify_all();
    }
}

/// The launcher connection's reading side: lines of at most
/// `ToProcess::MAX_LEN` bytes; a line that a read's timeout cut is kept
/// and finished by the next read.
struct LineReader {
    reader: BufReader<TcpStream>,
    /// The line being read, or the last one read.
    line: Vec<u8>,
    /// `line` is the last one read: the next read starts a new one.
    read: bool,
}

impl LineReader {
    fn new(stream: TcpStream) -> LineReader {
        LineReader {
            reader: BufReader::new(stream),
            line: Vec::new(),
            read: false,
        }
    }

    /// Reads the next line into `self.line` (a timeout or another error
    /// leaves what came of it there for the next call).
    fn next(&mut self) -> std::io::Result<Got> {
        if self.read {
            self.line.clear();
            self.read = false;
        }
        let max = ToProcess::MAX_LEN;
        let room = max.saturating_sub(self.line.len()).max(1);
        let n = self
            .reader
            .by_ref()
            .take(room.try_into().unwrap_or(u64::MAX))
            .read_until(b'\n', &mut self.line)?;
        self.read = true;
        Ok(if n == 0 && self.line.is_empty() {
            Got::End
        } else if self.line.len() >= max && self.line.last() != Some(&b'\n') {
            Got::Overlong
        } else {
            // A whole line, or the last one, cut by the end of the stream.
            Got::Line
        })
    }

    /// The line read, if it is one the protocol knows.
    fn parsed(&self) -> Option<ToProcess> {
        self.parse().ok()
    }

    /// The line read as the protocol's, or the error for a line that is
    /// not one (with the protocol's parse error underneath, if it is
    /// text).
    fn parse(&self) -> Result<ToProcess, BootstrapError> {
        match std::str::from_utf8(&self.line) {
            Ok(l) => ToProcess::parse(l).map_err(|e| unexpected(&self.line, Some(e))),
            Err(_) => Err(unexpected(&self.line, None)),
        }
    }

    /// Sets how long the next reads may wait (`None`: for ever).
    fn set_timeout(&self, timeout: Option<Duration>) -> std::io::Result<()> {
        self.reader
            .get_ref()
            .set_read_timeout(timeout.map(|t| t.max(Duration::from_millis(1))))
    }
}

/// The placement `convrun` gave this process, if it started it (`var`
/// reads the environment).
pub(super) fn placement(
    var: impl Fn(&str) -> Option<String>,
) -> Result<Option<Placement>, BootstrapError> {
    let Some(wire) = launch_wire::Placement::from_env(var).map_err(BootstrapError::Environment)?
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
        peer_timeout: crate::net::liveness::DEFAULT_PEER_TIMEOUT,
        host_pes,
        ppn: None,
        boot: Arc::new(Convrun::new(launcher, timeout)),
    }))
}

impl Convrun {
    fn new(launcher: String, timeout: Duration) -> Convrun {
        Convrun {
            launcher,
            timeout,
            writer: OnceLock::new(),
            lookups: Arc::new(Lookups {
                table: Mutex::new(Table {
                    asked: HashMap::new(),
                    reading: Reading::Over(BootstrapError::Connection {
                        what: "the business card was not published yet".into(),
                        source: None,
                    }),
                }),
                changed: Condvar::new(),
            }),
        }
    }

    /// Writes `line` to the launcher, whole.
    fn say(&self, line: &ToLauncher) -> std::io::Result<()> {
        let Some(writer) = self.writer.get() else {
            return Err(std::io::Error::other("not connected to the launcher"));
        };
        let mut link = crate::sync::lock(writer);
        link.write_all(line.encode().as_bytes())?;
        link.flush()
    }

    /// Waits in `table` for the answer about `peer` (this caller's entry
    /// is in it), reading for everyone while start-up lends the reader,
    /// until `deadline`.
    fn wait_for<'a>(
        &'a self,
        mut table: MutexGuard<'a, Table>,
        peer: usize,
        deadline: Instant,
    ) -> (MutexGuard<'a, Table>, Result<String, BootstrapError>) {
        let lookups = &*self.lookups;
        let waited = || BootstrapError::CardTimeout {
            peer,
            secs: self.timeout.as_secs(),
        };
        loop {
            if let Some(card) = table.asked.get(&peer).and_then(|a| a.card.clone()) {
                return (table, Ok(card));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match &mut table.reading {
                Reading::Over(why) => {
                    let why = BootstrapError::Card {
                        peer,
                        cause: Box::new(why.clone()),
                    };
                    return (table, Err(why));
                }
                _ if left.is_zero() => return (table, Err(waited())),
                Reading::Callers(slot @ Some(_)) => {
                    let mut reader = slot.take().expect("matched Some");
                    drop(table);
                    let outcome = read_answer(&mut reader, left, lookups);
                    table = lookups.table();
                    if let Reading::Callers(slot) = &mut table.reading {
                        *slot = Some(reader);
                    }
                    match outcome {
                        Ok(()) => {}
                        Err(Failed::TimedOut) => {
                            lookups.changed.notify_all();
                            return (table, Err(waited()));
                        }
                        Err(Failed::Over(why)) => table.reading = Reading::Over(why),
                    }
                    lookups.changed.notify_all();
                }
                Reading::Callers(None) | Reading::Watcher => {
                    table = lookups
                        .changed
                        .wait_timeout(table, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
        }
    }
}

/// Why reading an answer during start-up failed.
enum Failed {
    /// The caller's deadline passed (the reader stays usable).
    TimedOut,
    /// The connection is no use any more: why.
    Over(BootstrapError),
}

/// Reads one line during start-up, for at most `left`, and hands a `card`
/// answer over to `lookups` (which the caller does not lock meanwhile).
fn read_answer(reader: &mut LineReader, left: Duration, lookups: &Lookups) -> Result<(), Failed> {
    reader
        .set_timeout(Some(left))
        .map_err(|e| Failed::Over(BootstrapError::io("launcher socket", e)))?;
    match reader.next() {
        Ok(Got::Line) => match reader.parse() {
            Ok(ToProcess::Card { node, card }) => {
                lookups.answered(node, card);
                Ok(())
            }
            Ok(ToProcess::Abort(text)) => Err(Failed::Over(ended_the_job(&text))),
            Ok(_) => Err(Failed::Over(unexpected(&reader.line, None))),
            Err(e) => Err(Failed::Over(e)),
        },
        Ok(Got::End) => Err(Failed::Over(closed())),
        Ok(Got::Overlong) => Err(Failed::Over(overlong())),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock
                    | std::io::ErrorKind::TimedOut
                    | std::io::ErrorKind::Interrupted
            ) =>
        {
            Err(Failed::TimedOut)
        }
        Err(e) => Err(Failed::Over(BootstrapError::io(
            "cannot read from the launcher",
            e,
        ))),
    }
}

/// The longest pause between two hellos of a process whose connection was
/// closed before its welcome.
const MAX_HELLO_PAUSE: Duration = Duration::from_millis(200);

impl Convrun {
    /// One connection to the launcher, up to its welcome: the challenge,
    /// this process's hello with `card`, the launcher's proof. The link
    /// and its reader are returned once the launcher proved the job key.
    fn say_hello(
        &self,
        place: &Placement,
        card: &Card,
        deadline: Instant,
    ) -> Result<(TcpStream, LineReader), BootstrapError> {
        let me = place.node;
        let mut link = connect(&self.launcher, deadline).map_err(|e| {
            BootstrapError::io(format!("cannot reach the launcher at {}", self.launcher), e)
        })?;
        tracing::debug!(process = me, launcher = %self.launcher, "connected to the launcher");
        let socket = |e| BootstrapError::io("launcher socket", e);
        // Short lines each way, some back to back: no Nagle delay.
        link.set_nodelay(true).map_err(socket)?;
        // A launcher whose host goes down or is cut off ends this process
        // once silent that long (and the launcher watches this end too).
        crate::net::liveness::watch(&link, place.peer_timeout).map_err(socket)?;
        let mut reader = LineReader::new(link.try_clone().map_err(socket)?);
        reader
            .set_timeout(Some(deadline.saturating_duration_since(Instant::now())))
            .map_err(socket)?;
        let challenge = match read_from_launcher(&mut reader, place)? {
            ToProcess::Challenge(nonce) => nonce,
            _ => return Err(unexpected(&reader.line, None)),
        };
        let nonce = Nonce::generate().map_err(|e| BootstrapError::Random {
            what: "a nonce",
            source: e.into(),
        })?;
        let pid = std::process::id();
        let hello = ToLauncher::Hello {
            node: me,
            pid,
            proof: place
                .key
                .hello_proof(&challenge, &nonce, me, pid, card.as_str()),
            card: card.clone(),
            nonce,
        };
        link.write_all(hello.encode().as_bytes())
            .map_err(|e| BootstrapError::io("cannot write to the launcher", e))?;
        match read_from_launcher(&mut reader, place)? {
            ToProcess::Welcome(proof)
                if place.key.verify_welcome(&challenge, &nonce, me, &proof) => {}
            ToProcess::Welcome(_) => {
                return Err(BootstrapError::Impostor {
                    launcher: self.launcher.clone(),
                });
            }
            // Start-up failed while this hello was on its way: the cause
            // comes in place of the welcome.
            ToProcess::Abort(text) => return Err(ended_the_job(&text)),
            _ => return Err(unexpected(&reader.line, None)),
        }
        Ok((link, reader))
    }
}

/// True if `e` is the launcher closing (or resetting) a connection before
/// its welcome: worth connecting again.
fn closed_early(e: &BootstrapError) -> bool {
    match e {
        BootstrapError::Connection { source: None, .. } => true,
        BootstrapError::Connection {
            source: Some(cause),
            ..
        } => matches!(
            cause.get().kind(),
            std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::ConnectionAborted
                | std::io::ErrorKind::BrokenPipe
                | std::io::ErrorKind::UnexpectedEof
        ),
        _ => false,
    }
}

impl Bootstrap for Convrun {
    fn publish(
        &self,
        place: &Placement,
        card: &str,
        deadline: Instant,
    ) -> Result<(), BootstrapError> {
        let me = place.node;
        let card = Card::new(card).map_err(|e| BootstrapError::Protocol {
            what: format!("cannot send the business card `{card}`: {e}"),
            source: Some(e),
        })?;
        // A connection closed before the welcome gave its slot to a newer
        // one (the launcher's slots were flooded) or was cut by a full
        // queue: connected again after a pause that doubles, until the
        // deadline.
        let mut pause = Duration::from_millis(1);
        let (link, mut reader) = loop {
            match self.say_hello(place, &card, deadline) {
                Ok(joined) => break joined,
                Err(e) if closed_early(&e) && Instant::now() + pause < deadline => {
                    tracing::debug!(process = me, error = %e, "hello again");
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(MAX_HELLO_PAUSE);
                }
                Err(e) => return Err(e),
            }
        };
        tracing::debug!(process = me, "the launcher proved the job key");
        // The start barrier: every process said hello.
        match read_from_launcher(&mut reader, place)? {
            ToProcess::Go => {}
            ToProcess::Abort(text) => return Err(ended_the_job(&text)),
            _ => return Err(unexpected(&reader.line, None)),
        }
        if self.writer.set(Arc::new(Mutex::new(link))).is_err() {
            return Err(BootstrapError::Twice(
                "the business card was published twice",
            ));
        }
        self.lookups.table().reading = Reading::Callers(Some(reader));
        Ok(())
    }

    fn card_of(&self, peer: usize) -> Result<String, BootstrapError> {
        // A deadline beyond what `Instant` holds is no deadline.
        let deadline = Instant::now()
            .checked_add(self.timeout)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(100 * 365 * 86_400));
        let mut table = self.lookups.table();
        if let Reading::Over(why) = &table.reading {
            return Err(BootstrapError::Card {
                peer,
                cause: Box::new(why.clone()),
            });
        }
        let first = match table.asked.entry(peer) {
            Entry::Occupied(mut e) => {
                e.get_mut().waiters += 1;
                false
            }
            Entry::Vacant(e) => {
                e.insert(Asked {
                    waiters: 1,
                    card: None,
                });
                true
            }
        };
        if first {
            // Written without the table's lock: a line may wait for the
            // socket, and the reader must be able to hand answers over.
            drop(table);
            let sent = self.say(&ToLauncher::WhoIs(peer));
            table = self.lookups.table();
            if let Err(e) = sent {
                table.reading =
                    Reading::Over(BootstrapError::io("cannot write to the launcher", e));
                self.lookups.changed.notify_all();
            }
        }
        let (mut table, card) = self.wait_for(table, peer, deadline);
        if let Entry::Occupied(mut e) = table.asked.entry(peer) {
            e.get_mut().waiters -= 1;
            if e.get().waiters == 0 {
                e.remove();
            }
        }
        card
    }

    fn joined(&self, place: &Placement) -> Result<(), BootstrapError> {
        let reader = {
            let mut table = self.lookups.table();
            loop {
                match &mut table.reading {
                    Reading::Callers(slot @ Some(_)) => {
                        let reader = slot.take().expect("matched Some");
                        table.reading = Reading::Watcher;
                        break reader;
                    }
                    // A `card_of` caller reads: it puts the reader back by
                    // its deadline.
                    Reading::Callers(None) => {
                        table = self
                            .lookups
                            .changed
                            .wait(table)
                            .unwrap_or_else(|e| e.into_inner());
                    }
                    Reading::Watcher => return Err(BootstrapError::Twice("joined twice")),
                    Reading::Over(why) => {
                        return Err(BootstrapError::NotJoined(Box::new(why.clone())));
                    }
                }
            }
        };
        // The watcher wakes to look at the launcher's liveness.
        reader
            .set_timeout(Some(crate::net::liveness::check_period(place.peer_timeout)))
            .map_err(|e| BootstrapError::io("launcher socket", e))?;
        let writer = self.writer.get().expect("published").clone();
        if LINK.set(writer).is_ok() {
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
        watch_launcher(reader, self.lookups.clone(), place.node, place.peer_timeout);
        Ok(())
    }

    fn ending(&self) {
        ENDING.store(true, Ordering::Release);
    }

    fn tell_ended(&self) {
        tell(&ToLauncher::End);
    }
}

/// Reads the launcher's next start-up line.
fn read_from_launcher(
    reader: &mut LineReader,
    place: &Placement,
) -> Result<ToProcess, BootstrapError> {
    match reader.next() {
        Ok(Got::End) => Err(closed()),
        Ok(Got::Overlong) => Err(overlong()),
        Ok(Got::Line) => reader.parse(),
        Err(e) => Err(BootstrapError::io(
            format!(
                "no answer from the launcher within {} s",
                place.timeout.as_secs()
            ),
            e,
        )),
    }
}

/// The error for a line the launcher should not have sent then (`parsed`:
/// why it does not parse, if it does not).
fn unexpected(line: &[u8], parsed: Option<launch_wire::Error>) -> BootstrapError {
    BootstrapError::Protocol {
        what: format!(
            "unexpected line from the launcher: {}",
            launch_wire::shown(String::from_utf8_lossy(line).trim_end())
        ),
        source: parsed,
    }
}

/// The error for a line longer than the protocol allows.
fn overlong() -> BootstrapError {
    BootstrapError::protocol(format!(
        "unexpected line from the launcher: longer than {} bytes",
        ToProcess::MAX_LEN
    ))
}

/// The error for the launcher's end of stream during start-up.
fn closed() -> BootstrapError {
    BootstrapError::Connection {
        what: "the launcher closed the connection during start-up".into(),
        source: None,
    }
}

/// The error for the launcher's `abort` during start-up (`text`, its
/// reason).
fn ended_the_job(text: &str) -> BootstrapError {
    BootstrapError::Aborted(text.trim_end().to_string())
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

/// Watches the launcher connection for the rest of the process's life,
/// handing the `card` answers over to `lookups`; a launcher silent for
/// `peer_timeout` (its host down or cut off) ends the process saying so.
fn watch_launcher(
    mut reader: LineReader,
    lookups: Arc<Lookups>,
    me: usize,
    peer_timeout: Duration,
) {
    let watcher = lookups.clone();
    let spawned = std::thread::Builder::new()
        .name("launcher".into())
        .spawn(move || {
            let lookups = watcher;
            // Inside a line longer than the protocol allows: skipped to its
            // end.
            let mut skipping = false;
            // Looks in a row that found the launcher silent: three, one
            // more than the launcher needs to find this process silent, so
            // that where both can still tell, the launcher names the lost
            // host (this process's exit would tell it nothing).
            let mut silent_looks = 0;
            loop {
                match reader.next() {
                    // Nothing came for a while: is the launcher still there?
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) =>
                    {
                        let silent = crate::net::liveness::looks_silent(
                            reader.reader.get_ref(),
                            peer_timeout,
                        )
                        .unwrap_or(false);
                        silent_looks = if silent { silent_looks + 1 } else { 0 };
                        if silent_looks >= 3 && !ENDING.load(Ordering::Acquire) {
                            die_lost(
                                me,
                                &crate::net::liveness::silence(
                                    "the launcher (convrun)",
                                    peer_timeout,
                                ),
                            );
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e)
                        if crate::net::liveness::is_silence(&e)
                            && !ENDING.load(Ordering::Acquire) =>
                    {
                        die_lost(
                            me,
                            &crate::net::liveness::silence("the launcher (convrun)", peer_timeout),
                        );
                    }
                    Ok(Got::End) | Err(_) => {
                        if ENDING.load(Ordering::Acquire) {
                            tracing::debug!(process = me, "the launcher closed the connection");
                            lookups.over(BootstrapError::Connection {
                                what: "the launcher closed the connection".into(),
                                source: None,
                            });
                            return;
                        }
                        die_lost(me, "the launcher (convrun) is gone");
                    }
                    Ok(Got::Overlong) => skipping = true,
                    Ok(Got::Line) if skipping => skipping = false,
                    // Lines that mean nothing here are ignored.
                    Ok(Got::Line) => match reader.parsed() {
                        Some(ToProcess::Card { node, card }) => lookups.answered(node, card),
                        Some(ToProcess::Abort(text)) => die_lost(me, text.trim_end()),
                        _ => {}
                    },
                }
            }
        });
    match spawned {
        Ok(_) => tracing::debug!(process = me, "watching the launcher connection"),
        Err(e) => {
            let why = BootstrapError::io("cannot watch the launcher", e);
            crate::proc::log::report!(ERROR, &format!("converse: process {me}: {why}"));
            lookups.over(why);
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

#[cfg(test)]
mod tests {
    use super::*;
    use launch_wire::JobKey;
    use std::collections::BTreeSet;
    use std::net::{Shutdown, TcpListener};
    use std::sync::mpsc;

    const KEY: [u8; 32] = [0x5c; 32];

    /// The card the fake launcher gives for `node`.
    fn card(node: usize) -> String {
        format!("tcp:10.0.0.{node}:{}", 9000 + node)
    }

    /// How the fake launcher answers.
    #[derive(Default)]
    struct Rules {
        /// Requests are held back until every one of these peers was asked
        /// for; then the held ones are answered, the last asked first.
        hold: BTreeSet<usize>,
        held: Vec<usize>,
        /// Numbers never answered.
        silent: BTreeSet<usize>,
        /// Every request, in order.
        asked: Vec<usize>,
    }

    /// A fake `convrun` for process `node` of a job: takes its hello,
    /// welcomes it, says `go`, then answers `whois` as `rules` say until
    /// the connection ends. Returns its address and, once the process
    /// connected, the connection (for the test to end it).
    fn fake_launcher(node: usize, rules: Arc<Mutex<Rules>>) -> (String, mpsc::Receiver<TcpStream>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (conn_tx, conn_rx) = mpsc::channel();
        std::thread::spawn(move || {
            let key = JobKey::from_bytes(KEY);
            // (The process says nothing more before the welcome: no byte
            // is left in the hello's reader.)
            let (mut link, challenge, nonce) = take_hello(&listener, node);
            conn_tx.send(link.try_clone().unwrap()).unwrap();
            let mut lines = BufReader::new(link.try_clone().unwrap()).lines();
            let welcome = ToProcess::Welcome(key.welcome_proof(&challenge, &nonce, node));
            link.write_all(welcome.encode().as_bytes()).unwrap();
            link.write_all(ToProcess::Go.encode().as_bytes()).unwrap();
            while let Some(Ok(line)) = lines.next() {
                let Ok(ToLauncher::WhoIs(peer)) = ToLauncher::parse(&line) else {
                    continue;
                };
                let answer: Vec<usize> = {
                    let mut r = crate::sync::lock(&rules);
                    r.asked.push(peer);
                    if r.silent.contains(&peer) {
                        continue;
                    }
                    if r.hold.is_empty() {
                        vec![peer]
                    } else {
                        r.held.push(peer);
                        let held: BTreeSet<usize> = r.held.iter().copied().collect();
                        if r.hold.is_subset(&held) {
                            r.hold.clear();
                            std::mem::take(&mut r.held).into_iter().rev().collect()
                        } else {
                            Vec::new()
                        }
                    }
                };
                for peer in answer {
                    let line = ToProcess::Card {
                        node: peer,
                        card: Card::new(card(peer)).unwrap(),
                    };
                    let _ = link.write_all(line.encode().as_bytes());
                }
            }
        });
        (addr, conn_rx)
    }

    /// Takes one connection of process `node` up to its hello: writes a
    /// challenge, reads the hello and checks its proof; returns the
    /// connection, the challenge and the process's nonce.
    fn take_hello(listener: &TcpListener, node: usize) -> (TcpStream, Nonce, Nonce) {
        let key = JobKey::from_bytes(KEY);
        let (mut link, _) = listener.accept().unwrap();
        let challenge = Nonce::generate().unwrap();
        link.write_all(ToProcess::Challenge(challenge).encode().as_bytes())
            .unwrap();
        let mut hello = String::new();
        BufReader::new(link.try_clone().unwrap())
            .read_line(&mut hello)
            .unwrap();
        let Ok(ToLauncher::Hello {
            node: said,
            pid,
            card: sent,
            nonce,
            proof,
        }) = ToLauncher::parse(&hello)
        else {
            panic!("not a hello: {hello}")
        };
        assert_eq!(said, node);
        assert!(key.verify_hello(&challenge, &nonce, node, pid, sent.as_str(), &proof));
        (link, challenge, nonce)
    }

    /// A launcher whose slots a flood filled closes a process's connection
    /// before its welcome (at once, or once its hello came): the process
    /// connects again and joins. One whose start-up failed meanwhile
    /// answers the hello with `abort`: the process ends with that cause.
    #[test]
    fn a_hello_closed_before_its_welcome_is_said_again() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let launcher = std::thread::spawn(move || {
            drop(listener.accept().unwrap());
            drop(take_hello(&listener, 2));
            let (mut link, challenge, nonce) = take_hello(&listener, 2);
            let key = JobKey::from_bytes(KEY);
            let welcome = ToProcess::Welcome(key.welcome_proof(&challenge, &nonce, 2));
            link.write_all(welcome.encode().as_bytes()).unwrap();
            link.write_all(ToProcess::Go.encode().as_bytes()).unwrap();
            // The one that failed start-up.
            let (mut link, _, _) = take_hello(&listener, 2);
            let why = "process 0 (PE 0) was killed by signal 9 (SIGKILL) before the job started";
            link.write_all(ToProcess::Abort(why.into()).encode().as_bytes())
                .unwrap();
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        let boot = Arc::new(Convrun::new(addr.clone(), Duration::from_secs(60)));
        boot.publish(&place(boot.clone(), 2, 4), &card(2), deadline)
            .unwrap();
        let boot = Arc::new(Convrun::new(addr, Duration::from_secs(60)));
        let err = boot
            .publish(&place(boot.clone(), 2, 4), &card(2), deadline)
            .unwrap_err();
        assert_eq!(
            err,
            BootstrapError::Aborted(
                "process 0 (PE 0) was killed by signal 9 (SIGKILL) before the job started".into()
            )
        );
        launcher.join().unwrap();
    }

    /// Process `node` of `nodes`, placed by `boot`.
    fn place(boot: Arc<Convrun>, node: usize, nodes: usize) -> Placement {
        Placement {
            node,
            nodes,
            key: JobKey::from_bytes(KEY),
            shm_id: 1,
            netmod: "tcp".into(),
            host: "127.0.0.1".into(),
            hosts: None,
            timeout: boot.timeout,
            peer_timeout: crate::net::liveness::DEFAULT_PEER_TIMEOUT,
            host_pes: None,
            ppn: None,
            boot,
        }
    }

    /// `card_of` of every one of `peers` at once, each from its own thread.
    fn ask_at_once(
        boot: &Convrun,
        peers: &[usize],
    ) -> Vec<(usize, Result<String, BootstrapError>)> {
        std::thread::scope(|s| {
            let asking: Vec<_> = peers
                .iter()
                .map(|&p| s.spawn(move || (p, boot.card_of(p))))
                .collect();
            asking.into_iter().map(|a| a.join().unwrap()).collect()
        })
    }

    fn expect_cards(got: &[(usize, Result<String, BootstrapError>)]) {
        for (peer, card_of) in got {
            assert_eq!(
                card_of.as_deref(),
                Ok(card(*peer).as_str()),
                "process {peer}"
            );
        }
    }

    /// A malformed `convrun` environment is an environment error naming
    /// the variable, with the launch protocol's error underneath; no
    /// `CONVERSE_LAUNCHER` is no placement.
    #[test]
    fn a_malformed_environment_is_an_environment_error() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert!(matches!(placement(env(&[])), Ok(None)));
        let err = placement(env(&[
            ("CONVERSE_LAUNCHER", "127.0.0.1:9"),
            ("CONVERSE_NODE", "3"),
            ("CONVERSE_NODES", "2"),
        ]))
        .err()
        .expect("refused");
        assert_eq!(
            err,
            BootstrapError::Environment(launch_wire::Error::NodeNotBelowNodes {
                node: 3,
                nodes: 2
            })
        );
        assert_eq!(
            err.to_string(),
            "CONVERSE_NODE 3 is not below CONVERSE_NODES 2"
        );
        let source = std::error::Error::source(&err).unwrap();
        assert!(source.is::<launch_wire::Error>());
    }

    /// Cards are asked for one at a time, and every caller gets its own
    /// whatever the order of the answers: before start-up is over (the
    /// callers take turns reading) and after (the `launcher` thread reads),
    /// several callers at once, some for the same peer. Nothing is kept
    /// once answered.
    #[test]
    fn card_of_asks_the_launcher_before_and_after_start_up() {
        let rules = Arc::new(Mutex::new(Rules::default()));
        let (addr, conn) = fake_launcher(0, rules.clone());
        let boot = Arc::new(Convrun::new(addr, Duration::from_secs(60)));
        let place = place(boot.clone(), 0, 8);
        assert!(boot.card_of(1).is_err(), "no card before publish");
        let deadline = Instant::now() + Duration::from_secs(60);
        boot.publish(&place, &card(0), deadline).unwrap();
        // Start-up's own thread, as `join` asks.
        assert_eq!(boot.card_of(1), Ok(card(1)));
        // Several threads before start-up is over: the answers to 2 and 3
        // come only once both were asked, 3's first.
        crate::sync::lock(&rules).hold = [2, 3].into();
        expect_cards(&ask_at_once(&boot, &[2, 3, 2, 4, 3]));
        boot.joined(&place).unwrap();
        // The same after it, with the watcher reading.
        crate::sync::lock(&rules).hold = [1, 5, 6].into();
        expect_cards(&ask_at_once(&boot, &[5, 1, 6, 6, 5, 7, 1]));
        assert_eq!(boot.card_of(2), Ok(card(2)));
        // One request per caller at most (callers of one peer share one
        // while it is out), and no card kept.
        let asked = crate::sync::lock(&rules).asked.clone();
        assert!(asked.len() <= 1 + 5 + 7 + 1, "{asked:?}");
        let wanted: BTreeSet<usize> = (1..8).collect();
        assert_eq!(asked.iter().copied().collect::<BTreeSet<_>>(), wanted);
        assert!(boot.lookups.table().asked.is_empty());
        // The launcher's end, the process ending on purpose: no card more,
        // and no wait for it.
        boot.ending();
        // (Its writing side only: what the process still writes is read.)
        conn.recv().unwrap().shutdown(Shutdown::Write).unwrap();
        let err = boot.card_of(3).unwrap_err();
        assert!(
            matches!(&err, BootstrapError::Card { peer: 3, cause }
                if matches!(**cause, BootstrapError::Connection { source: None, .. })),
            "{err:?}"
        );
        let err = err.to_string();
        assert!(err.contains("process 3") && err.contains("closed"), "{err}");
    }

    /// A card that never comes is an error by `++timeout`, naming the peer
    /// and the wait, for every caller waiting for it; a launcher that
    /// closes the connection during start-up ends every wait with that.
    #[test]
    fn an_answer_that_never_comes_is_an_error_naming_the_peer() {
        let rules = Arc::new(Mutex::new(Rules::default()));
        crate::sync::lock(&rules).silent = [5].into();
        let (addr, conn) = fake_launcher(1, rules.clone());
        let boot = Arc::new(Convrun::new(addr, Duration::from_secs(1)));
        let place = place(boot.clone(), 1, 8);
        let deadline = Instant::now() + Duration::from_secs(60);
        boot.publish(&place, &card(1), deadline).unwrap();
        for (peer, card_of) in ask_at_once(&boot, &[5, 5, 2]) {
            match peer {
                5 => {
                    let err = card_of.unwrap_err();
                    assert_eq!(err, BootstrapError::CardTimeout { peer: 5, secs: 1 });
                    let err = err.to_string();
                    assert!(
                        err.contains("process 5's business card") && err.contains("within 1 s"),
                        "{err}"
                    );
                }
                _ => assert_eq!(card_of, Ok(card(peer))),
            }
        }
        assert!(boot.lookups.table().asked.is_empty());
        conn.recv().unwrap().shutdown(Shutdown::Write).unwrap();
        let err = boot.card_of(0).unwrap_err().to_string();
        assert!(
            err.contains("process 0") && err.contains("closed the connection during start-up"),
            "{err}"
        );
        assert!(
            boot.joined(&place).is_err(),
            "no joining a job whose launcher is gone"
        );
    }
}
