//! Naming a panic: a panic on a PE's thread is reported as an abort is,
//! with the PE (and, in a multi-process job, the process) that panicked:
//! `converse: PE 2 (process 1) panicked: boom at src/main.rs:10:5`.
//!
//! The process-wide panic hook ([`install_hook`]) prints that line for a
//! panic on a PE's thread and remembers its reason (`PE 2 panicked: boom
//! at …`) for the runtime, which decides what the panic does once it has
//! caught it (see `start`): re-raised after the job in a single process,
//! the job ended through [`die`](super::exit::die) with the reason in a
//! multi-process one. Panics on other threads, and the backtrace when
//! `RUST_BACKTRACE` asks for one, go to the hook that was there before.
//!
//! # Invariants
//!
//! - The hook is installed once per process, wrapping the previous one.
//! - The remembered reason is the calling thread's own last panic: a panic
//!   caught inside the PE's code and another one later each replace it, so
//!   the runtime reads the one that escaped.
//!
//! # Concurrency
//!
//! The hook runs on the panicking thread; the reason lives in a
//! thread-local, the process number in an atomic set once at start-up.
use std::cell::RefCell;
use std::io::Write;
use std::panic::PanicHookInfo;
use std::sync::Once;
use std::sync::atomic::{AtomicUsize, Ordering};

/// This process's number in a multi-process job; `usize::MAX` when the
/// job is in one process.
static PROCESS: AtomicUsize = AtomicUsize::new(usize::MAX);

thread_local! {
    /// The reason of this thread's last panic on a PE.
    static REASON: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs the panic hook (once per process; later calls do nothing).
pub(crate) fn install_hook() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let Some(pe) = super::exit::thread_pe() else {
                return previous(info);
            };
            let what = what(info);
            let process = match PROCESS.load(Ordering::Relaxed) {
                usize::MAX => String::new(),
                p => format!(" (process {p})"),
            };
            let line = format!("converse: PE {pe}{process} panicked: {what}");
            let reason = format!("PE {pe} panicked: {what}");
            let _ = std::io::stdout().flush();
            let _ = writeln!(std::io::stderr().lock(), "{line}");
            REASON.with(|r| *r.borrow_mut() = Some(reason));
            if backtrace_wanted() {
                previous(info);
            }
        }));
    });
}

/// Records that this process is process `node` of a multi-process job.
pub(crate) fn set_process(node: usize) {
    PROCESS.store(node, Ordering::Relaxed);
}

/// The reason of the calling thread's last panic on a PE (`PE n panicked:
/// MESSAGE at FILE:LINE:COLUMN`), taken.
pub(crate) fn take_reason() -> Option<String> {
    REASON.with(|r| r.borrow_mut().take())
}

/// `MESSAGE at FILE:LINE:COLUMN` of a panic.
fn what(info: &PanicHookInfo<'_>) -> String {
    let payload = info.payload();
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(a panic whose payload is not text)");
    match info.location() {
        Some(at) => format!("{message} at {}:{}:{}", at.file(), at.line(), at.column()),
        None => message.to_string(),
    }
}

/// Whether the user asked for backtraces (`RUST_BACKTRACE` set and not
/// `0`): then the previous hook prints the panic again with one.
fn backtrace_wanted() -> bool {
    std::env::var_os("RUST_BACKTRACE").is_some_and(|v| v != "0")
}
