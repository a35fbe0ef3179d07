//! The one way out of a process: every normal end ([`end_process`]) and
//! every abnormal one ([`die`], [`abort`]) of the runtime goes
//! through here, and the subsystems that must act when the process ends
//! abnormally register a hook ([`at_exit`]) instead of being called by name.
//!
//! Today's hooks: the CCS server sends its `ccs_killport` notices; the
//! process layer of a multi-process job tells the other processes why this
//! one ends (`Abort`); the launcher connection says `lost` when this
//! process only goes down with another, and `failed` with the reason when
//! it is the culprit. So the code that notices a fault
//! (a broken connection, a malformed packet, a bad PE number) names the
//! cause and who is to blame ([`Ending`]) and needs to know none of them.
//!
//! Ending a *job* normally from a PE (`exit(code)`, ConverseExit) is the
//! runtime's protocol, not a process's: see `rt::exit`. It ends the process
//! here once the PEs are done.
//!
//! # Invariants
//!
//! - The first thread to die goes on; any other thread that dies meanwhile
//!   (often a consequence of the first fault) waits for the process to end,
//!   so exactly one cause is reported and the hooks run once. It waits a
//!   bounded time ([`SECOND_DEATH_GRACE`]), then ends the process itself:
//!   it may hold a lock that the first one's hooks wait for.
//! - A hook that itself dies (a hook's bug) ends the process at once with
//!   the first code: it never waits for itself.
//! - Hooks run in registration order, on the dying thread, best effort:
//!   they must not block for long (the kill-port notices end within 2 s, the
//!   `Abort` frames are written without waiting for the peers).
//!
//! # Concurrency
//!
//! Any thread may die. The hook list is a mutex-guarded vector; the dying
//! thread copies it out (hooks are `Arc`s) before running them, so a hook
//! may register another without deadlock.
use std::cell::Cell;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Exit code of a job ended by [`abort`] (and of every abnormal end).
pub const ABORT_EXIT_CODE: i32 = 1;

/// Who is to blame for an abnormal end, as the hooks need to know it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Culprit {
    /// This process failed (an abort, a fault of its own): the other
    /// processes are told, all but `skip` (a peer that finds the fault
    /// itself).
    ThisProcess { skip: Option<usize> },
    /// Process `peer` failed (its connection broke, its bytes were
    /// malformed): the others are told, that one not, and the launcher
    /// learns that this process is only lost with it.
    Peer(usize),
    /// The job was ending elsewhere already (another process's `Abort`
    /// arrived, or the launcher said so or is gone): this process is lost
    /// with it. The others are told all the same (one that sees this
    /// process's connection close before the news reaches it would
    /// otherwise blame this one).
    Elsewhere,
}

impl Culprit {
    /// True if this process ends only because another one failed.
    pub fn lost(self) -> bool {
        !matches!(self, Culprit::ThisProcess { .. })
    }
}

/// An abnormal end, as the at-exit hooks see it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ending<'a> {
    /// Why, in a phrase the other processes print after theirs
    /// (`PE 3 aborted: …`).
    pub reason: &'a str,
    pub culprit: Culprit,
}

/// How long a thread that dies while another is dying waits for that one
/// to end the process before it ends it itself. Longer than the hooks take
/// when nothing blocks them (the kill-port notices all end within 2 s),
/// shorter than the launcher's 5 s grace for a process to end.
const SECOND_DEATH_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

type Hook = Arc<dyn Fn(&Ending) + Send + Sync>;

static HOOKS: Mutex<Vec<Hook>> = Mutex::new(Vec::new());

/// The thread that is ending the process abnormally (a `ThreadId`'s
/// number), 0 while none is.
static DYING: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The PE the calling thread runs, for the `PE n aborting` line; set
    /// by `rt` while a PE is installed.
    static THREAD_PE: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Runs `hook` when the process ends abnormally (see the module comment),
/// on the dying thread. For the life of the process.
pub(crate) fn at_exit(hook: impl Fn(&Ending) + Send + Sync + 'static) {
    crate::sync::lock(&HOOKS).push(Arc::new(hook));
}

/// Records which PE the calling thread runs (`None`: none now), so that an
/// abort on it names the PE.
pub(crate) fn set_thread_pe(pe: Option<usize>) {
    THREAD_PE.with(|t| t.set(pe));
}

/// The PE the calling thread runs, if any.
#[inline]
pub(crate) fn thread_pe() -> Option<usize> {
    THREAD_PE.with(Cell::get)
}

/// True once some thread is ending the process abnormally: faults noticed
/// now are consequences, not causes.
pub(crate) fn is_dying() -> bool {
    DYING.load(Ordering::Acquire) != 0
}

/// Prints `line` to standard error (nothing if it is empty: the cause was
/// printed already), runs the at-exit hooks with `ending`, and ends the
/// process with `code`. Only the first thread to call it gets
/// this far (see the invariants).
pub(crate) fn die(code: i32, line: &str, ending: Ending) -> ! {
    let me = thread_number();
    if let Err(first) = DYING.compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire) {
        if first == me {
            // A hook died: the first death's hooks have done what they
            // could.
            std::process::exit(code)
        }
        // Wait for the first to end the process, but not forever: this
        // thread may hold a lock the first one's hooks need (a receiver
        // delivering a frame holds its connection's), and a hang is worse
        // than hooks cut short.
        std::thread::sleep(SECOND_DEATH_GRACE);
        std::process::exit(code)
    }
    if !line.is_empty() {
        say(line);
    }
    let hooks: Vec<Hook> = crate::sync::lock(&HOOKS).clone();
    for hook in hooks {
        hook(&ending);
    }
    std::process::exit(code)
}

/// Set when the runtime ends the process normally ([`end_process`]).
static ENDING: AtomicBool = AtomicBool::new(false);

/// Ends the process normally with `code`, standard output flushed.
pub(crate) fn end_process(code: i32) -> ! {
    ENDING.store(true, Ordering::Release);
    let _ = std::io::stdout().flush();
    std::process::exit(code)
}

/// Reports an end of the process the runtime did not make: the program
/// called the C library's `exit(code)` itself (the C ABI calls this from
/// an exit handler, `on_exit`). Unless the runtime is ending the process
/// already, it names the calling PE (if the thread is one) and the code on
/// standard error and, for a non-zero code, runs the exit hooks as an
/// abort does, so that the other processes of the job and the launcher
/// learn which PE ended it and why. Returns: the caller's `exit` goes on.
pub fn foreign_exit(code: i32) {
    if ENDING.load(Ordering::Acquire) || DYING.load(Ordering::Acquire) != 0 {
        return;
    }
    let who = match THREAD_PE.with(Cell::get) {
        Some(pe) => format!("PE {pe}"),
        None => "a thread that is no PE".to_owned(),
    };
    let reason = format!("{who} called exit({code}) while the job was running");
    say(&format!("converse: {reason}"));
    if code != 0
        && DYING
            .compare_exchange(0, thread_number(), Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    {
        let hooks: Vec<Hook> = crate::sync::lock(&HOOKS).clone();
        for hook in hooks {
            hook(&Ending {
                reason: &reason,
                culprit: Culprit::ThisProcess { skip: None },
            });
        }
    }
}

/// Writes `line` to standard error after flushing standard output, and
/// emits it as an error event (`proc::log::report!`: printed here whatever
/// the subscriber); a closed stderr (the launcher is gone) must not stop
/// the process from ending.
fn say(line: &str) {
    let _ = std::io::stdout().flush();
    crate::proc::log::report!(ERROR, line);
}

/// A number for the calling thread, never 0.
fn thread_number() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static NUMBER: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    NUMBER.with(|n| *n)
}

/// Prints `msg` with the calling PE's number to standard error and ends the
/// job (the whole process, and the other processes of a multi-process job)
/// at once with exit code [`ABORT_EXIT_CODE`].
#[doc(alias = "CmiAbort")]
pub fn abort(msg: &str) -> ! {
    let (line, reason) = match THREAD_PE.with(Cell::get) {
        Some(pe) => (
            format!("converse: PE {pe} aborting: {msg}"),
            format!("PE {pe} aborted: {msg}"),
        ),
        None => (
            format!("converse: aborting: {msg}"),
            format!("aborted: {msg}"),
        ),
    };
    die(
        ABORT_EXIT_CODE,
        &line,
        Ending {
            reason: &reason,
            culprit: Culprit::ThisProcess { skip: None },
        },
    )
}

/// Aborts the job (see [`abort`]) with the expression, file and line if
/// `expr` is false. Compiled out when the crate feature `cmk-optimize` is on
/// (the manual's `CMK_OPTIMIZE`).
#[doc(alias = "CmiAssert")]
#[macro_export]
macro_rules! cmi_assert {
    ($expr:expr $(,)?) => {
        if !$crate::machine::exit::ASSERTS_OFF && !($expr) {
            $crate::abort(&::std::format!(
                "assertion `{}` failed at {}:{}",
                ::std::stringify!($expr),
                ::std::file!(),
                ::std::line!()
            ));
        }
    };
}

/// True when `cmi_assert!` is compiled out.
#[doc(hidden)]
pub const ASSERTS_OFF: bool = cfg!(feature = "cmk-optimize");
