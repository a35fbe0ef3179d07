//! A seed balancer written in C (the extensions manual's section 7.3):
//! a program may define the balancer's entry points (`CldEnqueue`,
//! `CldEnqueueMulti`, `CldNodeEnqueue`, `CldModuleInit`,
//! `CldGetStrategy`) and so link its own balancer instead of the
//! library's, as a Charm++ program links the `-balance` strategy it names.
//!
//! # How
//!
//! The library exports its balancer under other names
//! (`CmiCldDefault…_`, in `ext_cld`). `convcc` links every program with a
//! small C object of its own (`src/cld_shim.c`) that defines Charm++'s names as
//! *weak* functions calling those: a program's own definitions are strong
//! and win at link time (with the static library and with the shared one
//! alike). The object's constructor compares the address `CldModuleInit`
//! resolved to with its own weak one: if the program brought its own, it
//! hands it to [`CmiCldProgramBalancer_`], and [`user_module_init`] calls
//! it on every PE before the start function, as Charm++'s `ConverseInit`
//! does. The library's own balancer keeps setting itself up at the
//! program's first Cld call, as before.
//!
//! # Invariants
//!
//! - `PROGRAM_INIT` is set before `main` (by a constructor), or never; it
//!   is read when PEs start.
//!
//! # Concurrency
//!
//! `PROGRAM_INIT` is an atomic written once before any PE exists.
use std::sync::atomic::{AtomicUsize, Ordering};

/// The program's own `CldModuleInit` (0: none).
static PROGRAM_INIT: AtomicUsize = AtomicUsize::new(0);

/// `CmiCldProgramBalancer_(init)`: the program defines its own seed
/// balancer; `init` is its `CldModuleInit` (called by `convcc`'s object,
/// before `main`).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiCldProgramBalancer_(init: Option<extern "C-unwind" fn()>) {
    if let Some(init) = init {
        PROGRAM_INIT.store(init as usize, Ordering::Release);
    }
}

/// True if the program links a seed balancer of its own: then the
/// library's strategy is never set up (`ext_cld`).
pub(crate) fn program_has_balancer() -> bool {
    PROGRAM_INIT.load(Ordering::Acquire) != 0
}

/// Runs the program's own `CldModuleInit` on the calling PE, if it has a
/// balancer of its own; called on every PE before the start function.
pub(crate) fn user_module_init() {
    let init = PROGRAM_INIT.load(Ordering::Acquire);
    if init != 0 {
        // SAFETY: the address of the program's `void CldModuleInit(void)`,
        // as `CmiCldProgramBalancer_` stored it.
        let init: extern "C-unwind" fn() = unsafe { std::mem::transmute(init) };
        init();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn without_a_balancer_of_its_own_the_library_balances() {
        use std::sync::atomic::Ordering;
        assert_eq!(super::PROGRAM_INIT.load(Ordering::Acquire), 0);
        super::user_module_init(); // nothing to call
    }
}
