//! Persistent communication from C (the manual's "Converse Persistent
//! Communication Interface"): `CmiCreatePersistent`,
//! `CmiCreateReceiverPersistent`, `CmiRegisterReceivePersistent`,
//! `CmiUsePersistentHandle`, `CmiDestroyPersistent`,
//! `CmiDestroyAllPersistent`. Over [`converse::cmi::persistent`], whose
//! module comment says what a channel saves where (between processes:
//! the receiver's allocation; in one process there is nothing to save and
//! the sends are ordinary ones).
//!
//! # What C sees
//!
//! - A `PersistentHandle` is an opaque, non-null token of the PE that made
//!   it. It lives until `CmiDestroyPersistent` of it or
//!   `CmiDestroyAllPersistent` on its PE; C frees nothing. Destroying it
//!   again does nothing; naming a destroyed handle in
//!   `CmiUsePersistentHandle`, or any handle on another PE, ends the job.
//! - A `PersistentReq` is a value ([`PersistentReq`]): C copies it into a
//!   message for the sender. Its `pe` and `maxBytes` fields are readable;
//!   the runtime's description of the channel is in `opaque`
//!   ([`converse::cmi::persistent::PersistentReq::to_bytes`]). A request
//!   whose fields disagree with it ends the job in
//!   `CmiRegisterReceivePersistent`.
//! - Once `CmiUsePersistentHandle` named handles, the PE's sends to their
//!   PEs (`CmiSyncSend`, `CmiSyncSendAndFree` and the calls built on them)
//!   of at most a handle's `maxBytes` (header included) take its channel;
//!   longer ones go the ordinary way. `CmiUsePersistentHandle(NULL, 0)`
//!   ends that.
//!
//! # Invariants
//!
//! - A handle token is its PE (plus one) above bit
//!   [`crate::rdma::ID_BITS`] and its number on that PE below. The PE's
//!   table (`HANDLES`, a `Cpv`) maps the numbers of live handles to the
//!   core's handles; destroying one removes it. Numbers are issued in
//!   order and never reused, so a number at most `issued` and not in the
//!   table is a destroyed handle.
//!
//! # Concurrency
//!
//! Per PE: the table is a `Cpv`, and the core's handles are the PE's own.
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_int, c_uchar, c_void};
use std::rc::Rc;

use converse::Cpv;
use converse::cmi::persistent::{self as core, PersistentHandle as Handle};

use crate::nonneg;
use crate::rdma::{Token, read_token, token};

/// C's `PersistentHandle` (a pointer-sized token; C never dereferences
/// it).
pub type PersistentHandle = *mut c_void;

/// Bytes of [`PersistentReq::opaque`].
pub const PERSISTENT_REQ_OPAQUE: usize = 24;

const _: () = assert!(core::PersistentReq::BYTES <= PERSISTENT_REQ_OPAQUE);

/// C's `PersistentReq`: what `CmiCreateReceiverPersistent` returns for the
/// sender's `CmiRegisterReceivePersistent`. Plain data, 32 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PersistentReq {
    /// The receiving PE.
    pub pe: c_int,
    /// The longest message the channel takes, header included
    /// (`maxBytes` in C).
    pub max_bytes: c_int,
    /// The runtime's description of the channel.
    pub opaque: [c_uchar; PERSISTENT_REQ_OPAQUE],
}

/// A PE's live handles.
#[derive(Default)]
struct Handles {
    /// Handles issued so far (the last one's number).
    issued: u64,
    live: HashMap<u64, Handle>,
}

static HANDLES: Cpv<RefCell<Handles>> = Cpv::new();

fn handles() -> Rc<RefCell<Handles>> {
    HANDLES.try_get().unwrap_or_else(|| {
        HANDLES.initialize(RefCell::default());
        HANDLES.get()
    })
}

/// A token for `h`, kept in the PE's table.
fn issue(h: Handle) -> PersistentHandle {
    let table = handles();
    let mut t = table.borrow_mut();
    t.issued += 1;
    let id = t.issued;
    t.live.insert(id, h);
    token(id)
}

/// The number of token `h`, which must be one the calling PE issued; else
/// the job ends naming `call`.
fn id_of(h: PersistentHandle, issued: u64, call: &str) -> u64 {
    let me = converse::my_pe();
    match read_token(h, issued) {
        Token::Mine(id) => id,
        Token::OtherPe(pe) => converse::abort(&format!(
            "{call}: persistent handle {h:p} is PE {pe}'s, not PE {me}'s (a handle is used on the PE that made it)"
        )),
        Token::Bad => converse::abort(&format!("{call}: {h:p} is no persistent handle of PE {me}")),
    }
}

/// `CmiCreatePersistent(destPE, maxBytes)`: a channel to `destPE` for
/// messages of up to `maxBytes` bytes, header included. The destination
/// sets up its end and answers; until then the handle's sends are
/// ordinary ones.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiCreatePersistent(dest_pe: c_int, max_bytes: c_int) -> PersistentHandle {
    let dest = nonneg(dest_pe, "CmiCreatePersistent");
    let max = nonneg(max_bytes, "CmiCreatePersistent");
    issue(core::create_persistent(dest, max))
}

/// `CmiCreateReceiverPersistent(maxBytes)`: opens a channel to the calling
/// PE for messages of up to `maxBytes` bytes, header included, and returns
/// the request to send to the sender. The channel stays open until the
/// job ends (several senders may register one request).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiCreateReceiverPersistent(max_bytes: c_int) -> PersistentReq {
    let max = nonneg(max_bytes, "CmiCreateReceiverPersistent");
    let req = core::create_receiver_persistent(max);
    let mut opaque = [0; PERSISTENT_REQ_OPAQUE];
    opaque[..core::PersistentReq::BYTES].copy_from_slice(&req.to_bytes());
    PersistentReq {
        pe: c_int::try_from(req.pe).expect("a PE number fits an int"),
        // At least `max_bytes` (a header at the least), which fits.
        max_bytes: c_int::try_from(req.max_bytes).unwrap_or(c_int::MAX),
        opaque,
    }
}

/// `CmiRegisterReceivePersistent(req)`: the sender's handle for a
/// receiver's request, ready at once.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiRegisterReceivePersistent(req: PersistentReq) -> PersistentHandle {
    let decoded = core::PersistentReq::from_bytes(&req.opaque[..core::PersistentReq::BYTES])
        .filter(|r| {
            r.channel != 0
                && req.opaque[core::PersistentReq::BYTES..]
                    .iter()
                    .all(|&b| b == 0)
                && usize::try_from(req.pe) == Ok(r.pe)
                && usize::try_from(req.max_bytes) == Ok(r.max_bytes)
        });
    let Some(r) = decoded else {
        converse::abort(&format!(
            "CmiRegisterReceivePersistent: the request (pe {}, maxBytes {}) is not one CmiCreateReceiverPersistent made, or it was changed",
            req.pe, req.max_bytes
        ));
    };
    issue(core::register_receive_persistent(r))
}

/// `CmiUsePersistentHandle(p, n)`: the PE's following sends use the `n`
/// handles at `p` (one per destination PE; null entries are skipped).
/// `p` null or `n` 0 ends that: sends go the ordinary way again.
///
/// # Safety
/// `p` is null or points at `n` handles.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiUsePersistentHandle(p: *mut PersistentHandle, n: c_int) {
    const CALL: &str = "CmiUsePersistentHandle";
    let n = nonneg(n, CALL);
    if p.is_null() || n == 0 {
        core::use_persistent(&[]);
        return;
    }
    // SAFETY: `n` handles at `p` (the caller's promise).
    let tokens = unsafe { std::slice::from_raw_parts(p, n) };
    let table = handles();
    let chosen: Vec<Handle> = {
        let t = table.borrow();
        tokens
            .iter()
            .filter(|h| !h.is_null())
            .map(|&h| {
                let id = id_of(h, t.issued, CALL);
                t.live.get(&id).cloned().unwrap_or_else(|| {
                    converse::abort(&format!("{CALL}: persistent handle {h:p} was destroyed"))
                })
            })
            .collect()
    };
    core::use_persistent(&chosen);
}

/// `CmiDestroyPersistent(h)`: ends the handle; later sends to its PE go
/// the ordinary way. A channel `CmiCreatePersistent` made closes (after
/// the messages sent on it); a receiver's stays open. Destroying a handle
/// again, or a null one, does nothing.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiDestroyPersistent(h: PersistentHandle) {
    if h.is_null() {
        return;
    }
    let table = handles();
    let gone = {
        let mut t = table.borrow_mut();
        let id = id_of(h, t.issued, "CmiDestroyPersistent");
        t.live.remove(&id)
    };
    // Destroyed with no borrow held.
    if let Some(handle) = gone {
        handle.destroy();
    }
}

/// `CmiDestroyAllPersistent()`: destroys every handle the calling PE made
/// and has not destroyed.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiDestroyAllPersistent() {
    // The core destroys the handles it can still reach (weakly): ours keep
    // them alive until then.
    core::destroy_all_persistent();
    let table = handles();
    let gone = std::mem::take(&mut table.borrow_mut().live);
    drop(gone);
}
