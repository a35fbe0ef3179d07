//! Starting and ending a job from C (`ConverseInit`, `ConverseExit`), and
//! the text the header's variadic functions format (`CmiPrintf`,
//! `CmiError`, `CmiAbort` are `static inline` in `converse.h`: they format
//! with `vsnprintf` and hand the text here, since a Rust function cannot
//! take C's `...`).
//!
//! # Invariants
//!
//! - `ConverseInit` runs the core's `converse_init` with the C start
//!   function: each PE calls it with its own `argc`/`argv` (the arguments
//!   left after the runtime's flags, program name first), built once per
//!   PE and kept for the process's life (C code may keep `argv`).
//! - Unless `initret` is nonzero, `ConverseInit` never returns: the process
//!   exits with the job's code when every PE has left its scheduler.
//! - A C `exit(code)` called while the job runs (from any thread) is
//!   reported naming the PE and the code, and a non-zero code fails the
//!   whole job as an abort does (`watch_exit`).
use std::ffi::{CString, c_char, c_int};

use crate::c_str;

/// A C start function: `void f(int argc, char **argv)` (`CmiStartFn`).
pub type CmiStartFn = extern "C-unwind" fn(c_int, *mut *mut c_char);

/// The arguments as a C `argv` (NULL-terminated), kept for the process's
/// life.
fn leak_argv(args: &[String]) -> (c_int, *mut *mut c_char) {
    let mut ptrs: Vec<*mut c_char> = args
        .iter()
        .map(|a| {
            // An argument with a NUL byte inside cannot reach C whole: cut
            // at it, as C would read it anyway.
            let bytes: Vec<u8> = a.bytes().take_while(|b| *b != 0).collect();
            CString::new(bytes).expect("no NUL inside").into_raw()
        })
        .collect();
    ptrs.push(std::ptr::null_mut());
    let argc = c_int::try_from(args.len()).expect("argument count fits a C int");
    let argv = Box::leak(ptrs.into_boxed_slice()).as_mut_ptr();
    // Kept where a leak checker (LeakSanitizer, valgrind) sees it: the
    // arrays live as long as the process on purpose.
    static KEPT: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());
    KEPT.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(argv as usize);
    (argc, argv)
}

/// `ConverseInit(argc, argv, fn, usched, initret)`: starts the job that
/// the command line describes (`+p N`, `++ppn`, …); each PE runs `fn`,
/// then (unless `usched`) its scheduler until `CsdExitScheduler`.
///
/// # Safety
/// `argv` holds `argc` NUL-terminated strings.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn ConverseInit(
    argc: c_int,
    argv: *const *const c_char,
    start: Option<CmiStartFn>,
    usched: c_int,
    initret: c_int,
) {
    let Some(start) = start else {
        converse::error(format_args!(
            "converse: ConverseInit: the start function is null\n"
        ));
        std::process::exit(1);
    };
    watch_exit();
    crate::reduce_struct::register_module();
    let n = usize::try_from(argc).unwrap_or(0);
    let args: Vec<String> = (0..n)
        // SAFETY: `argc` strings at `argv` (the caller's promise).
        .map(|i| unsafe { c_str(*argv.add(i)) }.into_owned())
        .collect();
    converse::converse_init(
        args,
        move |args: &[String]| {
            crate::cld_weak::user_module_init();
            let (argc, argv) = leak_argv(args);
            start(argc, argv);
        },
        usched != 0,
        initret != 0,
    );
}

unsafe extern "C" {
    /// glibc's exit handler that is given the exit code (`atexit`'s are
    /// not).
    fn on_exit(
        handler: extern "C" fn(c_int, *mut std::ffi::c_void),
        arg: *mut std::ffi::c_void,
    ) -> c_int;
}

/// Registers (once per process) the report of a C `exit(code)` called
/// while the job runs: the core names the PE and the code and, for a
/// non-zero code, tells the job's other processes and the launcher
/// (`converse::machine::exit::foreign_exit`). The runtime's own ends of
/// the process are not reported.
fn watch_exit() {
    extern "C" fn report(code: c_int, _: *mut std::ffi::c_void) {
        // Never unwind out of an exit handler: a panic here would abort
        // the process with a worse message than the exit's.
        let _ = std::panic::catch_unwind(|| converse::machine::exit::foreign_exit(code));
    }
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a function that lives as long as the program;
        // its argument is unused.
        if unsafe { on_exit(report, std::ptr::null_mut()) } != 0 {
            converse::error(format_args!(
                "converse: cannot watch exit() (on_exit failed)\n"
            ));
        }
    });
}

/// `ConverseExit(code)` (the header's macro makes the code optional, 0 by
/// default): ends the whole job with `code`, from any PE; from the thread
/// that called `ConverseInit` with `initret`, finishes the job there.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiConverseExit_(code: c_int) -> ! {
    converse::exit(code)
}

/// Writes `text` to standard output (`to_stderr == 0`) or standard error,
/// in one write (the header's `CmiPrintf` and `CmiError`).
///
/// # Safety
/// `text` is null or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiPrintString_(to_stderr: c_int, text: *const c_char) {
    // SAFETY: the caller's promise.
    let text = unsafe { c_str(text) };
    if to_stderr != 0 {
        converse::error(format_args!("{text}"));
    } else {
        converse::printf(format_args!("{text}"));
    }
}

/// Ends the job with `text` as the reason (the header's `CmiAbort`).
///
/// # Safety
/// `text` is null or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiAbortString_(text: *const c_char) -> ! {
    // SAFETY: the caller's promise.
    let text = unsafe { c_str(text) };
    converse::abort(text.trim_end_matches('\n'))
}
