//! GAMMA's C API (`gamma.h`, the document `../shared/spec/gamma-api.txt`)
//! over [`converse_gamma`]: the same functions, argument orders, return
//! values (a negative value on error: [`converse_gamma::Error::code`]),
//! constants, the `time_586` type and the `gamma_active_port` and
//! `gamma_errno` variables.
//!
//! A C GAMMA program is one node per process: `gamma_init` is
//! [`converse_gamma::init`] (under `convrun` each process joins the group;
//! started by hand with `num_nodes` of 2 or more it replicates itself
//! through `convrun`; with 1 it is a group of itself), and `gamma_exit`
//! ends the job there.
//!
//! # The program's buffers: where the copies are
//!
//! A C program binds its own memory (a pointer and a length) to an input
//! port; the crate stores messages into a [`Buffer`] it shares with the
//! program. Here each bound C region has a *mirror*, a [`Buffer`] of the
//! posted length bound to the port in its place, and:
//!
//! 1. **Snapshot** (C → mirror, the whole posted length of every bound
//!    region): on entry to every call that may deliver messages
//!    (`gamma_set_*_port`, `gamma_post_recv`, `gamma_attach_buffer`,
//!    `gamma_wait`, `gamma_test`, `gamma_sync`, the `_flowctl` sends,
//!    `gamma_wsend`, `gamma_tsend`, `gamma_atomic` and after its function,
//!    `gamma_exit`), after every C handler returns, and when a region is
//!    bound. Plain sends deliver nothing (they only hand a Converse
//!    message to the network) and take no snapshot.
//! 2. The crate writes the message into the mirror where GAMMA puts it
//!    (`GO_AHEAD`, `GO_BACK`, truncated to the room left): its copy.
//! 3. **Copy back** (mirror → C, the whole posted length) before the
//!    receiver or error handler runs, for passive ports too; then the
//!    regions of other ports that overlap it are snapshot again.
//!
//! Since the mirror equalled the C region when the message was stored
//! (1), copying all of it back changes exactly the message's bytes: the
//! C semantics hold, bytes the program wrote elsewhere in its buffer are
//! kept, and the data is in the program's buffer when its handler runs
//! (or when `gamma_wait` returns, for a passive port). The price is a copy
//! of every bound region per delivering call, and a rule stricter than the
//! kernel driver's: **a bound region must stay readable and writable
//! until it is replaced** (`gamma_post_recv`, `gamma_attach_buffer`,
//! setting the port again) or `gamma_exit`, even if no message is due.
//! (The crate would need only to tell a handler where the message went
//! and how long it was to make this one copy of the message's bytes.)
//!
//! # Handlers
//!
//! Every port set from C gets Rust receiver and error closures (so a
//! passive port is an active one whose closures only copy back):
//!
//! - receiver: copy back, then the C receiver handler, if any, with
//!   `gamma_active_port` set (and restored after: handlers nest);
//! - error: for `GAMMA_ERR_MSGTOOLONG` copy back; then the C error handler
//!   with `gamma_active_port` and `gamma_errno` set, or, without one (a
//!   passive port, or a null pointer), `gamma_sigerr(semaphore)`: what the
//!   crate does for a port without an error handler.
//!
//! # Conventions of this implementation (the document leaves them open)
//!
//! - `dest_par_pid` 0 names no group (parallel pids are positive): the
//!   port is set for input only. Any other triple binds it for output, and
//!   must name a node other than the caller's (`BROADCAST` for all).
//! - `BROADCAST` is 255, `GO_BACK` 0, `GO_AHEAD` 1; another `buffer_kind`
//!   is refused as a bad buffer.
//! - Ports and semaphores are `unsigned char` in the document's
//!   prototypes, so a C program reaches 0..=255 of the 1,025.
//! - `gamma_time(t)` is a macro (as in GAMMA's sources) over
//!   `gamma_time_read_(&t)`; `time_586`'s fields hold the counter's 32-bit
//!   halves.
//!
//! # Invariants
//!
//! - `BOUND` has an entry for every port set from C, with the C region
//!   (null and 0 for none) and the mirror the crate's port holds; entries
//!   change only together with the crate's port (restored if the crate
//!   refuses), before the crate's call, since setting a port may store
//!   messages that waited for it at once.
//! - A mirror is exactly the posted length long.
//! - No `RefCell` borrow is held while C code runs or the node polls.
//!
//! # Concurrency
//!
//! One node per process, on the thread that called `gamma_init`: `BOUND`
//! is that thread's; handlers run on it, inside the calls above (a
//! program that also ran Converse's scheduler itself, through
//! `converse.h`, would store messages without the snapshot first).
//! `gamma_active_port` and `gamma_errno` are process globals (atomics,
//! plain `unsigned char` to C) written only by that thread.
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::{c_char, c_double, c_int, c_uchar, c_ulong, c_void};
use std::rc::Rc;
use std::sync::atomic::{AtomicU8, Ordering};

use converse_gamma::{
    self as gamma, Buffer, BufferKind, Dest, DestNode, Error, PortHandler, SendHandle,
};

use crate::c_str;

/// A receiver or error handler: `void f(void)`.
pub type GammaHandler = extern "C-unwind" fn();

/// `BROADCAST`: a `dest_node` meaning every other node of the group.
pub const BROADCAST: c_uchar = 255;
/// `GO_BACK`: the message after a shorter one goes to the buffer's start.
pub const GO_BACK: c_uchar = 0;
/// `GO_AHEAD`: the message after a shorter one goes right after it.
pub const GO_AHEAD: c_uchar = 1;

/// `unsigned char gamma_active_port`: inside a receiver or error handler,
/// the port that triggered it.
#[allow(non_upper_case_globals)]
#[unsafe(no_mangle)]
pub static gamma_active_port: AtomicU8 = AtomicU8::new(0);

/// `unsigned char gamma_errno`: inside an error handler, the condition
/// (`GAMMA_ERR_MSGTOOLONG`, `GAMMA_ERR_SENDFAILURE`).
#[allow(non_upper_case_globals)]
#[unsafe(no_mangle)]
pub static gamma_errno: AtomicU8 = AtomicU8::new(0);

/// A C region bound to an input port, and its mirror.
struct Bound {
    /// The program's memory (null when `len` is 0 or no buffer).
    ptr: *mut u8,
    len: usize,
    /// What the crate's port holds: `len` bytes.
    mirror: Buffer,
}

impl Bound {
    fn new(ptr: *mut c_void, len: usize) -> Bound {
        let b = Bound {
            ptr: ptr.cast(),
            len,
            mirror: Buffer::new(len),
        };
        b.snapshot();
        b
    }

    fn live(&self) -> bool {
        self.len > 0 && !self.ptr.is_null()
    }

    /// C region → mirror.
    fn snapshot(&self) {
        if !self.live() {
            return;
        }
        let mut m = self.mirror.borrow_mut();
        // SAFETY: the program bound `len` readable bytes at `ptr` and keeps
        // them while bound (the module's rule); the mirror is `len` bytes
        // of our own. The bytes are only copied, never inspected.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr, m.as_mut_ptr(), self.len) }
    }

    /// Mirror → C region.
    fn copy_back(&self) {
        if !self.live() {
            return;
        }
        let m = self.mirror.borrow();
        // SAFETY: as in `snapshot`, the region is writable while bound;
        // the mirror is a separate allocation of `len` bytes.
        unsafe { std::ptr::copy_nonoverlapping(m.as_ptr(), self.ptr, self.len) }
    }

    fn overlaps(&self, other: &Bound) -> bool {
        let (a, b) = (self.ptr as usize, other.ptr as usize);
        self.live() && other.live() && a < b + other.len && b < a + self.len
    }
}

thread_local! {
    /// The C regions of this node's ports, by port.
    static BOUND: RefCell<BTreeMap<u8, Bound>> = const { RefCell::new(BTreeMap::new()) };
}

/// Snapshots every bound region (the program may have written to it).
fn snapshot_all() {
    BOUND.with_borrow(|t| t.values().for_each(Bound::snapshot));
}

/// Copies port `port`'s mirror (a message was just stored there) to its
/// C region, and snapshots the regions that overlap it again.
fn copy_back(port: u8) {
    BOUND.with_borrow(|t| {
        let Some(b) = t.get(&port) else { return };
        b.copy_back();
        t.iter()
            .filter(|(p, o)| **p != port && o.overlaps(b))
            .for_each(|(_, o)| o.snapshot());
    });
}

/// Installs `bound` for `port`; the previous entry.
fn bind(port: u8, bound: Bound) -> Option<Bound> {
    BOUND.with_borrow_mut(|t| t.insert(port, bound))
}

/// Puts `old` back as `port`'s entry (the crate refused the new one).
fn unbind(port: u8, old: Option<Bound>) {
    BOUND.with_borrow_mut(|t| match old {
        Some(b) => t.insert(port, b),
        None => t.remove(&port),
    });
}

/// Runs C handler `f` for `port` with the handler variables set.
fn call_c(f: GammaHandler, port: u8, errno: u8) {
    let saved = (
        gamma_active_port.swap(port, Ordering::Relaxed),
        gamma_errno.swap(errno, Ordering::Relaxed),
    );
    f();
    gamma_active_port.store(saved.0, Ordering::Relaxed);
    gamma_errno.store(saved.1, Ordering::Relaxed);
    // The handler may have written to any bound region.
    snapshot_all();
}

fn receiver(port: u8, c: Option<GammaHandler>) -> PortHandler {
    Rc::new(move || {
        copy_back(port);
        if let Some(f) = c {
            call_c(f, port, 0);
        }
    })
}

fn error_handler(port: u8, sem: u8, c: Option<GammaHandler>) -> PortHandler {
    Rc::new(move || {
        let errno = gamma::errno();
        if errno == gamma::ERR_MSGTOOLONG {
            copy_back(port);
        }
        match c {
            Some(f) => call_c(f, port, errno),
            // As the crate counts an error at a port without a handler.
            None => drop(gamma::sigerr(sem.into())),
        }
    })
}

/// `unsigned long` as a length.
fn ulen(n: c_ulong) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// `unsigned long` as a count or handle (`u64` on LP64, `u32` elsewhere).
#[allow(clippy::useless_conversion)]
fn ulong(n: c_ulong) -> u64 {
    n.into()
}

/// 0, or the error's code.
fn status(r: gamma::Result<()>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => e.code(),
    }
}

fn bad_buffer(why: String) -> c_int {
    Error::BadBuffer(why).code()
}

/// The `len` bytes at `data` (none for a null pointer and 0).
///
/// # Safety
/// `data` is null with `len` 0, or `len` readable bytes.
unsafe fn bytes<'a>(data: *const c_void, len: c_ulong) -> Option<&'a [u8]> {
    let len = ulen(len);
    if len == 0 {
        return Some(&[]);
    }
    if data.is_null() {
        return None;
    }
    // SAFETY: `len` readable bytes at `data` (the caller's promise).
    Some(unsafe { std::slice::from_raw_parts(data.cast(), len) })
}

// ---- the group ----

/// `int gamma_init(int num_nodes, int argc, char **argv)`: starts the
/// parallel section; 0, or a negative value. Started by hand with
/// `num_nodes` other than 1, the process becomes `convrun` running
/// `num_nodes` copies of the program (this call does not return then;
/// C's output buffers are flushed first); under `convrun`, each process
/// joins the job's group.
///
/// # Safety
/// `argv` holds `argc` NUL-terminated strings (or `argc` is 0).
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn gamma_init(
    num_nodes: c_int,
    argc: c_int,
    argv: *const *const c_char,
) -> c_int {
    // What the program printed before: a process that replicates itself
    // becomes `convrun` (an `exec`), which would drop C's buffers.
    // SAFETY: `fflush(NULL)` flushes every open C output stream.
    unsafe { libc::fflush(std::ptr::null_mut()) };
    let n = usize::try_from(argc).unwrap_or(0);
    let args: Vec<String> = (0..n)
        // SAFETY: `argc` strings at `argv` (the caller's promise).
        .map(|i| unsafe { c_str(*argv.add(i)) }.into_owned())
        .collect();
    // A group starts with no bound region (an earlier group's in this
    // process, which a panic may have left, is the program's no more).
    BOUND.with_borrow_mut(BTreeMap::clear);
    status(gamma::init(num_nodes, args))
}

/// `int gamma_exit(void)`: leaves the group (node 0 after every other
/// node) and ends the job in this process; the job's exit code (0 unless
/// another process failed), or a negative value.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn gamma_exit() -> c_int {
    snapshot_all();
    // A panic re-raised by `gamma::exit` leaves the regions in the table;
    // the next `gamma_init` clears it.
    match gamma::exit() {
        Ok(code) => {
            BOUND.with_borrow_mut(BTreeMap::clear);
            code
        }
        Err(e) => e.code(),
    }
}

/// `int gamma_sync(void)`: the group's barrier.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn gamma_sync() -> c_int {
    snapshot_all();
    status(gamma::sync())
}

/// `int gamma_my_par_pid(void)`: the group's parallel pid.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn gamma_my_par_pid() -> c_int {
    gamma::my_par_pid().map_or_else(|e| e.code(), c_int::from)
}

/// `int gamma_my_node(void)`: this node's instance number.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn gamma_my_node() -> c_int {
    gamma::my_node().map_or_else(|e| e.code(), c_int::from)
}

/// `int gamma_how_many_nodes(void)`: the number of nodes in the group.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn gamma_how_many_nodes() -> c_int {
    gamma::how_many_nodes().map_or_else(|e| e.code(), c_int::from)
}

// ---- ports ----

#[allow(clippy::too_many_arguments)]
fn set_port(
    port: c_uchar,
    dest_node: c_uchar,
    dest_par_pid: c_uchar,
    dest_port: c_uchar,
    on_receive: Option<GammaHandler>,
    on_error: Option<GammaHandler>,
    semaphore: c_uchar,
    buffer_kind: c_uchar,
    buffer: *mut c_void,
    buffer_len: c_ulong,
) -> c_int {
    let kind = match buffer_kind {
        GO_BACK => BufferKind::GoBack,
        GO_AHEAD => BufferKind::GoAhead,
        k => {
            return bad_buffer(format!(
                "port {port}: buffer_kind {k} is neither GO_BACK ({GO_BACK}) nor GO_AHEAD \
                 ({GO_AHEAD})"
            ));
        }
    };
    let dest = (dest_par_pid != 0).then(|| Dest {
        node: if dest_node == BROADCAST {
            DestNode::Broadcast
        } else {
            DestNode::Node(dest_node.into())
        },
        par_pid: dest_par_pid,
        port: dest_port.into(),
    });
    snapshot_all();
    let len = ulen(buffer_len);
    if len > isize::MAX as usize {
        return bad_buffer(format!("port {port}: a buffer of {len} bytes cannot exist"));
    }
    // No buffer: no mirror either (the crate refuses a length without one,
    // below).
    let bound = Bound::new(buffer, if buffer.is_null() { 0 } else { len });
    let mirror = (!buffer.is_null()).then(|| bound.mirror.clone());
    let old = bind(port, bound);
    let r = gamma::set_active_port(
        port.into(),
        dest,
        Some(receiver(port, on_receive)),
        Some(error_handler(port, semaphore, on_error)),
        semaphore.into(),
        kind,
        mirror,
        len,
    );
    if r.is_err() {
        unbind(port, old);
    }
    status(r)
}

/// `gamma_set_active_port(port, dest_node, dest_par_pid, dest_port,
/// receiver_handler, error_handler, semaphore, buffer_kind,
/// destination_buffer, buffer_len)`: binds `port` for output to
/// (`dest_node`, `dest_par_pid`, `dest_port`) (`dest_par_pid` 0: input
/// only) and for input into `buffer_len` bytes at `destination_buffer`,
/// counting arrivals on `semaphore`; `receiver_handler` runs after each
/// message (the data is in the buffer), `error_handler` when one was
/// truncated. Null handlers are allowed.
///
/// # Safety
/// `destination_buffer` is null, or `buffer_len` bytes readable and
/// writable until the port is bound to another buffer or the node leaves.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C-unwind" fn gamma_set_active_port(
    port: c_uchar,
    dest_node: c_uchar,
    dest_par_pid: c_uchar,
    dest_port: c_uchar,
    receiver_handler: Option<GammaHandler>,
    error_handler: Option<GammaHandler>,
    semaphore: c_uchar,
    buffer_kind: c_uchar,
    destination_buffer: *mut c_void,
    buffer_len: c_ulong,
) -> c_int {
    set_port(
        port,
        dest_node,
        dest_par_pid,
        dest_port,
        receiver_handler,
        error_handler,
        semaphore,
        buffer_kind,
        destination_buffer,
        buffer_len,
    )
}

/// `gamma_set_passive_port(port, dest_node, dest_par_pid, dest_port,
/// semaphore, buffer_kind, destination_buffer, buffer_len)`: as
/// [`gamma_set_active_port`] without handlers; a truncated message counts
/// as an error on `semaphore` (`gamma_wait` returns it).
///
/// # Safety
/// As [`gamma_set_active_port`].
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C-unwind" fn gamma_set_passive_port(
    port: c_uchar,
    dest_node: c_uchar,
    dest_par_pid: c_uchar,
    dest_port: c_uchar,
    semaphore: c_uchar,
    buffer_kind: c_uchar,
    destination_buffer: *mut c_void,
    buffer_len: c_ulong,
) -> c_int {
    set_port(
        port,
        dest_node,
        dest_par_pid,
        dest_port,
        None,
        None,
        semaphore,
        buffer_kind,
        destination_buffer,
        buffer_len,
    )
}

/// Re-binds `port` to `len` bytes at `buffer` through `repost` (the
/// crate's `post_recv` or `attach_buffer`).
fn rebind(
    port: c_uchar,
    buffer: *mut c_void,
    len: usize,
    repost: impl FnOnce(&Buffer) -> gamma::Result<()>,
) -> c_int {
    snapshot_all();
    if buffer.is_null() && len > 0 {
        return bad_buffer(format!(
            "port {port}: a null buffer posted with length {len}"
        ));
    }
    if len > isize::MAX as usize {
        return bad_buffer(format!("port {port}: a buffer of {len} bytes cannot exist"));
    }
    let bound = Bound::new(buffer, len);
    let mirror = bound.mirror.clone();
    let old = bind(port, bound);
    let r = repost(&mirror);
    if r.is_err() {
        unbind(port, old);
    }
    status(r)
}

/// `gamma_post_recv(input_port, destination_buffer, buffer_len)`: the next
/// message goes to the start of this buffer.
///
/// # Safety
/// As [`gamma_set_active_port`]'s buffer.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn gamma_post_recv(
    input_port: c_uchar,
    destination_buffer: *mut c_void,
    buffer_len: c_ulong,
) -> c_int {
    let len = ulen(buffer_len);
    rebind(input_port, destination_buffer, len, |m| {
        gamma::post_recv(input_port.into(), m, len)
    })
}

/// `gamma_attach_buffer(input_port, destination_buffer)`: as
/// [`gamma_post_recv`] with the length last set for the port.
///
/// # Safety
/// As [`gamma_set_active_port`]'s buffer, with the port's length.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn gamma_attach_buffer(
    input_port: c_uchar,
    destination_buffer: *mut c_void,
) -> c_int {
    let Some(len) = BOUND.with_borrow(|t| t.get(&input_port).map(|b| b.len)) else {
        // Not set from C: the crate says why (not an input port).
        return status(gamma::attach_buffer(input_port.into(), &Buffer::new(0)));
    };
    rebind(input_port, destination_buffer, len, |m| {
        gamma::attach_buffer(input_port.into(), m)
    })
}

// ---- sends ----

/// A send's handle as the C `int` the document's prototypes return.
fn handle(r: gamma::Result<SendHandle>) -> c_int {
    match r {
        Ok(SendHandle(h)) => c_int::try_from(h).unwrap_or_else(|_| {
            converse::abort(&format!(
                "gamma: send handle {h} does not fit the int the GAMMA API returns"
            ))
        }),
        Err(e) => e.code(),
    }
}

/// The message's bytes, or the code for a null pointer with a length.
///
/// # Safety
/// As [`bytes`].
unsafe fn piece<'a>(port: c_uchar, data: *const c_void, len: c_ulong) -> Result<&'a [u8], c_int> {
    // SAFETY: the caller's promise.
    unsafe { bytes(data, len) }.ok_or_else(|| {
        bad_buffer(format!(
            "a send of {len} bytes from a null pointer through port {port}"
        ))
    })
}

macro_rules! one_piece {
    ($(#[$doc:meta])* $name:ident, $rust:path, $out:ident, $snap:expr) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// `data` is null with `len` 0, or `len` readable bytes.
        #[unsafe(no_mangle)]
        pub unsafe extern "C-unwind" fn $name(
            output_port: c_uchar,
            data: *const c_void,
            len: c_ulong,
        ) -> c_int {
            // SAFETY: the caller's promise.
            let data = match unsafe { piece(output_port, data, len) } {
                Ok(d) => d,
                Err(code) => return code,
            };
            if $snap {
                snapshot_all();
            }
            $out($rust(output_port.into(), data))
        }
    };
}

macro_rules! two_pieces {
    ($(#[$doc:meta])* $name:ident, $rust:path, $out:ident, $snap:expr) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// Each of `data1`, `data2` is null with its length 0, or that many
        /// readable bytes.
        #[unsafe(no_mangle)]
        pub unsafe extern "C-unwind" fn $name(
            output_port: c_uchar,
            data1: *const c_void,
            len1: c_ulong,
            data2: *const c_void,
            len2: c_ulong,
        ) -> c_int {
            // SAFETY: the caller's promise.
            let first = match unsafe { piece(output_port, data1, len1) } {
                Ok(d) => d,
                Err(code) => return code,
            };
            // SAFETY: the caller's promise.
            let second = match unsafe { piece(output_port, data2, len2) } {
                Ok(d) => d,
                Err(code) => return code,
            };
            if $snap {
                snapshot_all();
            }
            $out($rust(output_port.into(), first, second))
        }
    };
}

one_piece!(
    /// `gamma_send(output_port, data, len)`: sends `len` bytes at `data`
    /// through `output_port` (blocking: `data` may be reused on return).
    gamma_send, gamma::send, status, false
);
one_piece!(
    /// `gamma_send_flowctl(output_port, data, len)`: [`gamma_send`] that
    /// waits until the receiver re-posted its buffer since this port's
    /// previous flow-controlled message.
    gamma_send_flowctl, gamma::send_flowctl, status, true
);
one_piece!(
    /// `gamma_isend(output_port, data, len)`: non-blocking [`gamma_send`];
    /// a handle for [`gamma_wsend`] and [`gamma_tsend`].
    gamma_isend, gamma::isend, handle, false
);
one_piece!(
    /// `gamma_isend_flowctl(output_port, data, len)`: non-blocking
    /// [`gamma_send_flowctl`] (the message waits for its turn, in order);
    /// a handle.
    gamma_isend_flowctl, gamma::isend_flowctl, handle, false
);
two_pieces!(
    /// `gamma_send_2p(output_port, data1, len1, data2, len2)`: one message
    /// of two pieces, the first at most 20 bytes.
    gamma_send_2p, gamma::send_2p, status, false
);
two_pieces!(
    /// `gamma_send_2p_flowctl(...)`: [`gamma_send_2p`] with flow control.
    gamma_send_2p_flowctl, gamma::send_2p_flowctl, status, true
);
two_pieces!(
    /// `gamma_isend_2p(...)`: non-blocking [`gamma_send_2p`]; a handle.
    gamma_isend_2p, gamma::isend_2p, handle, false
);
two_pieces!(
    /// `gamma_isend_2p_flowctl(...)`: non-blocking
    /// [`gamma_send_2p_flowctl`]; a handle.
    gamma_isend_2p_flowctl, gamma::isend_2p_flowctl, handle, false
);

/// `gamma_wsend(handle)`: waits for a non-blocking send to complete; 0,
/// or a negative value (an unknown handle, a failed send).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn gamma_wsend(handle: c_ulong) -> c_int {
    snapshot_all();
    status(gamma::wsend(SendHandle(ulong(handle))))
}

/// `gamma_tsend(handle)`: 1 if the send completed, 0 if not yet, or a
/// negative value.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn gamma_tsend(handle: c_ulong) -> c_int {
    snapshot_all();
    match gamma::tsend(SendHandle(ulong(handle))) {
        Ok(done) => c_int::from(done),
        Err(e) => e.code(),
    }
}

// ---- semaphores ----

/// `gamma_signal(sem)`: adds one to semaphore `sem`.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn gamma_signal(sem: c_uchar) -> c_int {
    status(gamma::signal(sem.into()))
}

/// `gamma_sigerr(sem)`: adds one to semaphore `sem`'s error count.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn gamma_sigerr(sem: c_uchar) -> c_int {
    status(gamma::sigerr(sem.into()))
}

/// `gamma_wait(sem, n)`: waits (running handlers) until semaphore `sem`
/// reaches `n`, takes `n` from it; 0, or minus the errors signalled on it
/// since the previous wait (at most `INT_MAX` of them); a negative code
/// if the wait is refused or can never end.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn gamma_wait(sem: c_uchar, n: c_ulong) -> c_int {
    snapshot_all();
    match gamma::wait(sem.into(), ulong(n)) {
        Ok(errors) => -c_int::try_from(errors).unwrap_or(c_int::MAX),
        Err(e) => e.code(),
    }
}

/// `gamma_test(sem)`: semaphore `sem`'s value (at most `INT_MAX`),
/// unchanged, after delivering what has arrived.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn gamma_test(sem: c_uchar) -> c_int {
    snapshot_all();
    match gamma::test(sem.into()) {
        Ok(v) => c_int::try_from(v).unwrap_or(c_int::MAX),
        Err(e) => e.code(),
    }
}

/// `gamma_atomic(funct)`: runs `funct` with no handler interleaved; the
/// messages that arrived meanwhile are stored after it.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn gamma_atomic(funct: Option<GammaHandler>) -> c_int {
    let Some(f) = funct else {
        converse::abort("gamma_atomic: a null function")
    };
    snapshot_all();
    status(gamma::atomic(|| {
        f();
        // Messages held back are stored when this returns.
        snapshot_all();
    }))
}

// ---- memory and time ----

/// `gamma_mlock(buffer, len)`: locks (and faults in) `len` bytes at
/// `buffer`; 0, or a negative value if the system refuses.
///
/// # Safety
/// `buffer` is null with `len` 0, or `len` bytes of the process.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn gamma_mlock(buffer: *mut c_void, len: c_ulong) -> c_int {
    // SAFETY: the caller's promise; `mlock` only changes how the pages
    // are kept.
    match unsafe { bytes(buffer, len) } {
        Some(b) => status(gamma::mlock(b)),
        None => Error::Lock(format!("mlock of {len} bytes at a null address refused")).code(),
    }
}

/// `gamma_munlock(buffer, len)`: unlocks `len` bytes at `buffer`.
///
/// # Safety
/// As [`gamma_mlock`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn gamma_munlock(buffer: *mut c_void, len: c_ulong) -> c_int {
    // SAFETY: the caller's promise; unlocking never touches the bytes.
    match unsafe { bytes(buffer, len) } {
        Some(b) => status(gamma::munlock(b)),
        None => Error::Lock(format!("munlock of {len} bytes at a null address refused")).code(),
    }
}

/// `gamma_munlockall()`: unlocks every page of the process.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn gamma_munlockall() -> c_int {
    status(gamma::munlockall())
}

/// `time_586`: a cycle-counter reading, its high and low 32 bits.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Time586 {
    /// High 32 bits.
    pub hi: c_ulong,
    /// Low 32 bits.
    pub lo: c_ulong,
}

impl Time586 {
    fn stamp(self) -> gamma::TimeStamp {
        // The halves gamma_time wrote; other bits are not the counter's.
        gamma::TimeStamp {
            hi: self.hi as u32,
            lo: self.lo as u32,
        }
    }
}

/// What the header's `gamma_time(t)` macro calls with `&t`: copies the
/// cycle counter into `*t`.
///
/// # Safety
/// `t` points to a writable `time_586`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn gamma_time_read_(t: *mut Time586) {
    let now = gamma::time();
    // SAFETY: a writable `time_586` (the caller's promise).
    unsafe {
        t.write(Time586 {
            hi: now.hi.into(),
            lo: now.lo.into(),
        })
    }
}

/// `double gamma_time_diff(time_586 b, time_586 a)`: microseconds from
/// `a` to `b` (negative if `b` is earlier).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn gamma_time_diff(b: Time586, a: Time586) -> c_double {
    gamma::time_diff(b.stamp(), a.stamp())
}
