//! Registering C handlers: `CmiRegisterHandler` and its local, global and
//! numbered forms, and `CmiHandlerToFunction`.
//!
//! # Invariants
//!
//! - Every C handler goes into the core's table as the C function itself
//!   ([`converse::register_c_handler`]: the scheduler hands it the message
//!   as the buffer C knows, exclusive and writable). The core's
//!   handler-table check tells them apart by name: the function's image
//!   and its offset there, with its symbol where the image exports one
//!   ([`identity`]). Addresses are never compared: they differ between
//!   processes of one program under address randomisation; offsets do not.
//! - `CmiHandlerToFunction` answers from the core's table of the calling
//!   PE ([`converse::c_handler_function`]): a C function where one is
//!   installed, null for a Rust handler or none. Nothing of it is kept
//!   here, so nothing outlives the PE.
//!
//! # Concurrency
//!
//! Per PE: a PE is one OS thread, and only it registers its handlers.
use std::ffi::{CStr, c_int, c_void};

use crate::nonneg;

/// A C handler: `void f(void *msg)` (`CmiHandler`; the same type as
/// [`converse::CHandler`], spelled out for the header check).
pub type CmiHandler = extern "C-unwind" fn(*mut c_void);

/// `f`'s identity, the same in every process of one program: its symbol
/// (where the image exports one) and its image's file name with its offset
/// there.
pub fn identity(f: CmiHandler) -> String {
    let addr = f as usize;
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: `dladdr` only reads the loader's tables and writes `info`.
    if unsafe { libc::dladdr(addr as *const c_void, &mut info) } == 0 || info.dli_fbase.is_null() {
        // Not in any image the loader knows (never for a compiled
        // function): the address is all there is.
        return format!("C function at {addr:#x}");
    }
    let offset = addr - info.dli_fbase as usize;
    let image = if info.dli_fname.is_null() {
        String::from("?")
    } else {
        // SAFETY: the loader's NUL-terminated file name.
        let path = unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy();
        path.rsplit('/').next().unwrap_or_default().to_owned()
    };
    let symbol = (!info.dli_sname.is_null() && info.dli_saddr as usize == addr).then(|| {
        // SAFETY: the loader's NUL-terminated symbol name.
        let name = unsafe { CStr::from_ptr(info.dli_sname) };
        name.to_string_lossy().into_owned()
    });
    match symbol {
        Some(name) => format!("C function {name} ({image}+{offset:#x})"),
        None => format!("C function at {image}+{offset:#x}"),
    }
}

/// `f`, or the job ends naming `call` (a null function pointer).
fn function(f: Option<CmiHandler>, call: &str) -> CmiHandler {
    f.unwrap_or_else(|| converse::abort(&format!("{call}: the handler function is null")))
}

fn index_int(index: usize) -> c_int {
    c_int::try_from(index).expect("handler indices are below MAX_HANDLER_INDEX")
}

/// `CmiRegisterHandler(f)`: the next index of the table every PE builds in
/// the same order.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiRegisterHandler(f: Option<CmiHandler>) -> c_int {
    let f = function(f, "CmiRegisterHandler");
    let index = converse::register_c_handler(f, &identity(f));
    index_int(index)
}

/// `CmiRegisterHandlerLocal(f)`: an index valid on the calling PE only.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiRegisterHandlerLocal(f: Option<CmiHandler>) -> c_int {
    let f = function(f, "CmiRegisterHandlerLocal");
    let index = converse::register_c_handler_local(f);
    index_int(index)
}

/// `CmiRegisterHandlerGlobal(f)`: on PE 0, an index to send to the other
/// PEs, which install their function there with `CmiNumberHandler`.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiRegisterHandlerGlobal(f: Option<CmiHandler>) -> c_int {
    let f = function(f, "CmiRegisterHandlerGlobal");
    let index = converse::register_c_handler_global(f);
    index_int(index)
}

/// `CmiNumberHandler(n, f)`: installs `f` at index `n` on the calling PE.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiNumberHandler(n: c_int, f: Option<CmiHandler>) {
    let f = function(f, "CmiNumberHandler");
    let index = nonneg(n, "CmiNumberHandler");
    converse::number_c_handler(index, f);
}

/// `CmiHandlerToFunction(n)`: the C function registered at index `n` on
/// the calling PE, or null if none (or a Rust handler) is there.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiHandlerToFunction(n: c_int) -> Option<CmiHandler> {
    converse::c_handler_function(usize::try_from(n).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    extern "C-unwind" fn c_handler(_msg: *mut c_void) {}

    /// Starts a job of one PE on this thread, runs `on_pe_0` there, ends it.
    fn job<R>(on_pe_0: impl FnOnce() -> R) -> R {
        converse::Converse::new()
            .args(["handlers-test", "+p", "1"])
            .init_returns(|_| {})
            .expect("the job starts");
        let r = on_pe_0();
        assert_eq!(converse::finish(0), 0);
        r
    }

    #[test]
    fn handler_to_function_answers_from_the_pes_own_table() {
        let first = job(|| {
            let i = CmiRegisterHandler(Some(c_handler));
            let f = CmiHandlerToFunction(i).map(|f| f as usize);
            assert_eq!(f, Some(c_handler as CmiHandler as usize));
            assert!(CmiHandlerToFunction(i + 1).is_none());
            i
        });
        // The next job on this thread puts a Rust handler where the C one
        // was: no C function there now.
        let second = job(|| {
            let i = converse::register_handler(|_m: converse::Message| {});
            (i, CmiHandlerToFunction(index_int(i)).is_none())
        });
        assert_eq!(second, (first as usize, true));
    }
}
