//! Stacks of user-level threads: a per-PE pool, and the stack-overflow
//! report.
//!
//! # The pool
//!
//! A stack is an `mmap`ed region with a guard page below it (corosensei's
//! `DefaultStack`). Mapping and unmapping cost system calls and page faults,
//! so a finished thread's stack goes back to its PE's pool (by size) and the
//! next thread of that size takes it: a warm pool creates threads without
//! touching the kernel. At most [`MAX_POOLED`] stacks per PE are kept.
//!
//! # Overflow
//!
//! A thread that runs off its stack touches the guard page and gets SIGSEGV.
//! Before resuming a thread the trampoline records, in a thread-local, the
//! guard page's range, the stack size and the PE ([`set_running`]); a
//! SIGSEGV/SIGBUS handler (installed once, on the alternate signal stack
//! that every PE thread has) checks the fault address against it. If it is in
//! the guard page the handler writes
//! `stack overflow in a user-level thread on PE n (stack S bytes; raise
//! +stacksize)` and ends the process with the abort exit code; otherwise it
//! hands the signal to the handler that was there before (Rust's own, which
//! reports overflows of OS thread stacks), or restores the default action so
//! the fault kills the process as usual.
//!
//! The handler does only async-signal-safe work: it reads a `Cell` of plain
//! integers from a thread-local with a constant initializer (no lazy
//! initialization, no destructor), formats into a stack buffer, and calls
//! `write` and `_exit`.
use std::cell::Cell;
use std::sync::Once;

use corosensei::stack::{DefaultStack, Stack};

/// Stacks kept per PE for reuse; beyond this a finished thread's stack is
/// unmapped. A burst of thousands of live threads should not pin its
/// stacks' touched pages forever.
pub(crate) const MAX_POOLED: usize = 1024;

/// A PE's unused stacks, by requested size. Programs use one or a few
/// sizes, so a short list searched linearly beats hashing.
pub(crate) struct StackPool {
    free: Vec<(usize, Vec<DefaultStack>)>,
    pooled: usize,
}

impl StackPool {
    pub fn new() -> StackPool {
        StackPool {
            free: Vec::new(),
            pooled: 0,
        }
    }

    /// A stack of at least `size` bytes: a pooled one if there is one.
    pub fn take(&mut self, size: usize, pe: usize) -> DefaultStack {
        let list = self.free.iter_mut().find(|(s, _)| *s == size);
        if let Some(stack) = list.and_then(|(_, l)| l.pop()) {
            self.pooled -= 1;
            return stack;
        }
        prepare_overflow_report();
        DefaultStack::new(size).unwrap_or_else(|e| {
            crate::proc::exit::abort(&format!(
                "cannot map a {size}-byte stack for a user-level thread on PE {pe}: {e} (every live thread holds a stack mapping, and the kernel limits a process's mappings: vm.max_map_count; keep fewer threads alive at once)"
            ))
        })
    }

    /// Takes back a stack of a finished thread created with `size`.
    pub fn put(&mut self, stack: DefaultStack, size: usize) {
        if self.pooled >= MAX_POOLED {
            return;
        }
        match self.free.iter_mut().find(|(s, _)| *s == size) {
            Some((_, list)) => list.push(stack),
            None => self.free.push((size, vec![stack])),
        }
        self.pooled += 1;
    }

    /// Stacks in the pool.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.pooled
    }
}

/// The guard page and identity of the stack the OS thread runs on now, or
/// all zeros for its own stack.
#[derive(Clone, Copy, Default)]
pub(crate) struct RunningStack {
    guard_start: usize,
    guard_end: usize,
    size: usize,
    pe: usize,
}

impl RunningStack {
    /// A stack whose guard page is `guard`, created with `size` bytes, of a
    /// thread on `pe`.
    pub fn new(guard: (usize, usize), size: usize, pe: usize) -> RunningStack {
        RunningStack {
            guard_start: guard.0,
            guard_end: guard.1,
            size,
            pe,
        }
    }
}

thread_local! {
    /// What the overflow handler compares fault addresses with.
    static RUNNING: Cell<RunningStack> = const {
        Cell::new(RunningStack { guard_start: 0, guard_end: 0, size: 0, pe: 0 })
    };
}

/// Records `now` as the stack being run.
pub(crate) fn set_running(now: RunningStack) {
    RUNNING.with(|r| r.set(now));
}

/// The stack recorded as being run.
pub(crate) fn running() -> RunningStack {
    RUNNING.with(Cell::get)
}

pub(crate) fn page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf with a valid name has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(page).unwrap_or(4096)
    })
}

/// The guard range of `stack`: the page below its usable part.
pub(crate) fn guard_of(stack: &DefaultStack) -> (usize, usize) {
    let start = stack.limit().get();
    (start, start + page_size())
}

/// What a thread's coroutine knows of its stack: the bounds, as plain
/// words. The memory is owned beside the coroutine (by the thread's
/// `StackOwner`), so a suspended coroutine is plain data: one whose stack
/// is an isomalloc block can move to another PE, or process, as bytes
/// (`cth::migrate`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(C)]
pub(crate) struct StackView {
    /// The highest address (stacks grow down).
    pub base: usize,
    /// The lowest, guard page included.
    pub limit: usize,
}

impl StackView {
    /// The bounds of a stack mapped with its guard page.
    pub fn of(stack: &DefaultStack) -> StackView {
        StackView {
            base: stack.base().get(),
            limit: stack.limit().get(),
        }
    }
}

// SAFETY: the bounds are those of a mapped stack (a `DefaultStack`'s, or an
// isomalloc block with its lowest page made a guard page), aligned as the
// trait requires (page-aligned), and the thread that owns the coroutine
// keeps that memory mapped until the coroutine is dropped or has finished
// (`StackOwner` is dropped after the coroutine).
unsafe impl Stack for StackView {
    fn base(&self) -> corosensei::stack::StackPointer {
        corosensei::stack::StackPointer::new(self.base).expect("a mapped stack")
    }

    fn limit(&self) -> corosensei::stack::StackPointer {
        corosensei::stack::StackPointer::new(self.limit).expect("a mapped stack")
    }
}

/// Makes sure an overflow of a thread stack made now is reported: the
/// handler is installed and this OS thread has an alternate signal stack.
pub(crate) fn prepare_overflow_report() {
    install_overflow_handler();
    ensure_alt_stack();
}

/// The actions SIGSEGV and SIGBUS had before ours, to hand other faults to.
static mut PREVIOUS: [Option<libc::sigaction>; 2] = [None, None];
static INSTALL: Once = Once::new();

/// Installs the overflow handler for SIGSEGV and SIGBUS, once per process.
fn install_overflow_handler() {
    INSTALL.call_once(|| {
        for (i, sig) in [libc::SIGSEGV, libc::SIGBUS].into_iter().enumerate() {
            // SAFETY: plain sigaction calls with valid pointers to zeroed
            // structs filled in here. `PREVIOUS` is written only here, inside
            // `call_once`, before the handler that reads it is installed
            // (the `sigaction` call is the release point).
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_fault as *const () as usize;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                libc::sigemptyset(&mut action.sa_mask);
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut old) == 0 {
                    (*std::ptr::addr_of_mut!(PREVIOUS))[i] = Some(old);
                }
                libc::sigaction(sig, &action, std::ptr::null_mut());
            }
        }
    });
}

/// Size of the alternate signal stack we add to a thread that has none.
const ALT_STACK_SIZE: usize = 64 << 10;

/// An alternate signal stack this module mapped; unmapped when its thread
/// ends.
struct AltStack {
    base: *mut libc::c_void,
}

impl Drop for AltStack {
    fn drop(&mut self) {
        // SAFETY: disables the alternate stack of this (exiting) thread before
        // unmapping the mapping made in `ensure_alt_stack`, so no signal can be
        // delivered on it afterwards.
        unsafe {
            let off = libc::stack_t {
                ss_sp: std::ptr::null_mut(),
                ss_flags: libc::SS_DISABLE,
                ss_size: 0,
            };
            libc::sigaltstack(&off, std::ptr::null_mut());
            libc::munmap(self.base, ALT_STACK_SIZE);
        }
    }
}

thread_local! {
    static ALT_STACK: std::cell::RefCell<Option<AltStack>> =
        const { std::cell::RefCell::new(None) };
}

/// Makes sure the calling thread has an alternate signal stack, so the
/// overflow handler can run when the thread's stack is the one exhausted.
/// Rust gives the threads it spawns one; a thread from elsewhere may not
/// have one.
fn ensure_alt_stack() {
    // SAFETY: queries and sets this thread's alternate signal stack with
    // valid pointers; the new stack is a fresh private mapping owned by the
    // thread-local `ALT_STACK`, which disables it before unmapping.
    unsafe {
        let mut current: libc::stack_t = std::mem::zeroed();
        if libc::sigaltstack(std::ptr::null(), &mut current) != 0
            || current.ss_flags & libc::SS_DISABLE == 0
        {
            return;
        }
        let base = libc::mmap(
            std::ptr::null_mut(),
            ALT_STACK_SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if base == libc::MAP_FAILED {
            return;
        }
        let stack = libc::stack_t {
            ss_sp: base,
            ss_flags: 0,
            ss_size: ALT_STACK_SIZE,
        };
        if libc::sigaltstack(&stack, std::ptr::null_mut()) != 0 {
            libc::munmap(base, ALT_STACK_SIZE);
            return;
        }
        ALT_STACK.with(|a| *a.borrow_mut() = Some(AltStack { base }));
    }
}

/// The SIGSEGV/SIGBUS handler (see the module comment).
extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    let running = RUNNING.with(Cell::get);
    if running.guard_start <= addr && addr < running.guard_end {
        let mut line = LineBuf::new();
        line.push(b"converse: stack overflow in a user-level thread on PE ");
        line.push_num(running.pe);
        line.push(b" (stack ");
        line.push_num(running.size);
        line.push(b" bytes; raise +stacksize)\n");
        // SAFETY: write(2) and _exit(2) are async-signal-safe; the buffer is
        // valid for its length.
        unsafe {
            libc::write(2, line.buf.as_ptr().cast(), line.len);
            libc::_exit(crate::proc::exit::ABORT_EXIT_CODE);
        }
    }
    let i = usize::from(sig != libc::SIGSEGV);
    // SAFETY: `PREVIOUS` was written before this handler was installed and
    // is never written again. Calling the previous handler with the
    // arguments we got is what chaining means; resetting to the default
    // action and returning re-raises the fault with default handling.
    unsafe {
        match (*std::ptr::addr_of!(PREVIOUS))[i] {
            Some(old)
                if old.sa_sigaction != libc::SIG_DFL
                    && old.sa_sigaction != libc::SIG_IGN
                    && old.sa_flags & libc::SA_SIGINFO != 0 =>
            {
                let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    std::mem::transmute(old.sa_sigaction);
                handler(sig, info, ctx);
            }
            Some(old) if old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN => {
                let handler: extern "C" fn(libc::c_int) = std::mem::transmute(old.sa_sigaction);
                handler(sig);
            }
            _ => {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &action, std::ptr::null_mut());
            }
        }
    }
}

/// A fixed buffer for the overflow line (no allocation in a signal handler).
struct LineBuf {
    buf: [u8; 160],
    len: usize,
}

impl LineBuf {
    fn new() -> LineBuf {
        LineBuf {
            buf: [0; 160],
            len: 0,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if self.len < self.buf.len() {
                self.buf[self.len] = b;
                self.len += 1;
            }
        }
    }

    fn push_num(&mut self, mut n: usize) {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        self.push(&digits[i..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_formats_numbers() {
        let mut l = LineBuf::new();
        l.push(b"PE ");
        l.push_num(0);
        l.push(b" ");
        l.push_num(262144);
        assert_eq!(&l.buf[..l.len], b"PE 0 262144");
    }

    #[test]
    fn pool_reuses_stacks_of_a_size() {
        let mut pool = StackPool::new();
        let a = pool.take(64 << 10, 0);
        let guard = guard_of(&a);
        pool.put(a, 64 << 10);
        assert_eq!(pool.len(), 1);
        let b = pool.take(64 << 10, 0);
        assert_eq!(guard_of(&b), guard, "the pooled stack is reused");
        assert_eq!(pool.len(), 0);
        let c = pool.take(128 << 10, 0);
        assert_ne!(guard_of(&c), guard);
    }
}
