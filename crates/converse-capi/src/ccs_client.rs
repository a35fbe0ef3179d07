//! The C client library of CCS (`ccs-client.h`): `CcsServer`,
//! `CcsConnect`, `CcsSendRequest`, `CcsRecvResponse` … over
//! [`converse_ccs::CcsClient`], for any C program (a Converse job or not:
//! nothing here needs a PE or `ConverseInit`).
//!
//! # Invariants
//!
//! - A `CcsServer` is C's struct ([`CcsServer`]); its `client_` field is
//!   null or a `Box<CcsClient>` made by a successful connect, and its
//!   `numProcs` null or a `malloc`'d array of `numNodes` ints, both
//!   released by `CcsFinalize` (and nothing else). A connect writes every
//!   field before reading any, so the struct may start as garbage; it does
//!   not release what an earlier connect of the same struct held (call
//!   `CcsFinalize` first, as with Charm++'s client).
//! - The layout fields (`numNodes`, `numPes`, `numProcs`) are copies of
//!   the client's, written once by the connect; the functions answer from
//!   the client.
//! - Errors come back as -1, as Charm++'s client has it; only a failed
//!   connect and a multicast to no PE print a line on stderr (Charm++'s do
//!   too), with the cause.
//!
//! # Concurrency
//!
//! None: a `CcsServer` is used by one thread at a time (the caller's
//! promise, as in Charm++); different ones are independent.
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

use converse_ccs::{CcsClient, ClientOptions, Credentials};

use crate::c_str;
use crate::ccs::SktIp;

/// The timeout of Charm++'s calls without one, in seconds.
const DEFAULT_TIMEOUT: c_int = 120;

/// `CcsSec_secretKey`: a security level's 16-byte key.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CcsSecSecretKey {
    /// The key's bytes.
    pub data: [u8; 16],
}

/// `CCS_AUTH_makeSecretKey(text, &key)` (`ccs-auth.h`): the key written
/// in `text`, as the server's `++server-auth` file and its one-time-key
/// line write one: hex digits, two a byte, up to 16 bytes; reading stops
/// at the first other character, a last lone digit is the high half of
/// its byte, and the bytes not given are 0. 1 if at least one byte was
/// read, else 0 (`key` is zeroed either way).
///
/// Charm++'s reads each pair of digits as a *decimal* number (so
/// `"1234"` is bytes 12 and 34 there, 0x12 and 0x34 here): a key written
/// for converse-rs's server, whose key file is hex, is read as that
/// server reads it (see `ccs_wire::parse_key`).
///
/// # Safety
/// `text` is null or a C string; `key` points at a writable key.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CCS_AUTH_makeSecretKey(
    text: *const c_char,
    key: *mut CcsSecSecretKey,
) -> c_int {
    if key.is_null() {
        return 0;
    }
    let mut out = CcsSecSecretKey { data: [0; 16] };
    let digits: Vec<u8> = if text.is_null() {
        Vec::new()
    } else {
        // SAFETY: a C string (the caller's promise).
        unsafe { std::ffi::CStr::from_ptr(text) }
            .to_bytes()
            .iter()
            .take_while(|c| c.is_ascii_hexdigit())
            .take(2 * out.data.len())
            .map(|&c| (c as char).to_digit(16).expect("a hex digit") as u8)
            .collect()
    };
    for (byte, pair) in out.data.iter_mut().zip(digits.chunks(2)) {
        *byte = (pair[0] << 4) | pair.get(1).copied().unwrap_or(0);
    }
    // SAFETY: writable (the caller's promise).
    unsafe { key.write(out) };
    c_int::from(!digits.is_empty())
}

/// `CcsServer`: C's connection record (`ccs-client.h` declares the same
/// fields, in order).
#[repr(C)]
#[derive(Debug)]
pub struct CcsServer {
    /// `hostAddr`: the host as given, NUL-terminated (cut to fit).
    pub host_addr: [c_char; 128],
    /// `hostIP`: the IPv4 address connected to (zero for IPv6).
    pub host_ip: SktIp,
    /// `hostPort`.
    pub host_port: c_uint,
    /// `isAuth`: 1 if requests are authenticated.
    pub is_auth: c_int,
    /// `level`: the security level.
    pub level: c_int,
    /// `numNodes`.
    pub num_nodes: c_int,
    /// `numPes`.
    pub num_pes: c_int,
    /// `numProcs`: each node's PE count, `malloc`'d.
    pub num_procs: *mut c_int,
    /// `client_`: the `Box<CcsClient>`, or null.
    pub client: *mut c_void,
}

/// `timeout` seconds as a limit: none for 0 or less.
fn seconds(timeout: c_int) -> Option<Duration> {
    u64::try_from(timeout)
        .ok()
        .filter(|&s| s > 0)
        .map(Duration::from_secs)
}

/// The options of a connect or a send with `timeout` seconds.
fn options(timeout: c_int) -> ClientOptions {
    ClientOptions {
        connect_timeout: seconds(timeout),
        io_timeout: seconds(timeout),
        ..ClientOptions::default()
    }
}

fn count(n: usize) -> c_int {
    c_int::try_from(n).unwrap_or(c_int::MAX)
}

/// The connected client of `svr`, if any.
///
/// # Safety
/// `svr` is null or a `CcsServer` that a connect has written, used by no
/// other thread now.
unsafe fn client<'a>(svr: *mut CcsServer) -> Option<&'a mut CcsClient> {
    // SAFETY: the caller's promise; `client` is null or our box.
    unsafe { svr.as_mut()?.client.cast::<CcsClient>().as_mut() }
}

/// Connects `svr` to `addr` (shown as `host`); see `CcsConnect`.
///
/// # Safety
/// `svr` is writable; `key` is null or readable.
unsafe fn connect(
    svr: *mut CcsServer,
    host: &str,
    addr: impl ToSocketAddrs,
    port: c_int,
    key: *const CcsSecSecretKey,
    timeout: c_int,
) -> c_int {
    if svr.is_null() {
        return -1;
    }
    let mut host_addr = [0 as c_char; 128];
    for (d, s) in host_addr.iter_mut().zip(host.bytes().take(127)) {
        *d = s as c_char;
    }
    // SAFETY: null or a readable key (the caller's promise).
    let key = unsafe { key.as_ref() }.copied();
    // Every field, before anything can fail (and without reading what
    // was there: it may be garbage).
    // SAFETY: writable (the caller's promise); `write` reads nothing.
    unsafe {
        svr.write(CcsServer {
            host_addr,
            host_ip: SktIp::default(),
            host_port: c_uint::try_from(port).unwrap_or(0),
            is_auth: c_int::from(key.is_some()),
            level: 0,
            num_nodes: 0,
            num_pes: 0,
            num_procs: std::ptr::null_mut(),
            client: std::ptr::null_mut(),
        })
    };
    // SAFETY: written whole just above; the caller's thread alone uses it.
    let svr = unsafe { &mut *svr };
    let credentials = key.map(|k| Credentials {
        key: k.data,
        // Charm++'s client always asks for level 0.
        level: 0,
    });
    let connected = if u16::try_from(port).is_err() {
        Err(format!("port {port} is out of range"))
    } else {
        CcsClient::connect_with(addr, credentials, options(timeout)).map_err(|e| e.to_string())
    };
    let mut client = match connected {
        Ok(c) => c,
        Err(e) => {
            eprintln!("CCS Client error> {e}");
            return -1;
        }
    };
    // Requests connect within Charm++'s default from now on.
    client.set_options(options(DEFAULT_TIMEOUT));
    if let IpAddr::V4(v4) = client.server_addr().ip() {
        svr.host_ip = SktIp { data: v4.octets() };
    }
    let sizes = client.node_sizes();
    // SAFETY: plain allocation; at least one int so it is never null.
    let procs = unsafe { libc::malloc(std::mem::size_of::<c_int>() * sizes.len().max(1)) };
    if procs.is_null() {
        eprintln!("CCS Client error> out of memory");
        return -1;
    }
    let procs = procs.cast::<c_int>();
    for (i, &s) in sizes.iter().enumerate() {
        // SAFETY: `i` is below the `sizes.len()` ints allocated.
        unsafe { procs.add(i).write(c_int::try_from(s).unwrap_or(c_int::MAX)) };
    }
    svr.num_nodes = count(client.num_nodes());
    svr.num_pes = c_int::try_from(client.num_pes()).unwrap_or(c_int::MAX);
    svr.num_procs = procs;
    svr.client = Box::into_raw(Box::new(client)).cast();
    0
}

/// `CcsConnect(svr, host, port, key)`: connects to the CCS server at
/// `host`:`port` and learns the job's layout, authenticated with `key` at
/// level 0 if it is not null; 0, or -1 after a line on stderr.
///
/// # Safety
/// `svr` is writable; `host` is a NUL-terminated string; `key` is null or
/// readable.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CcsConnect(
    svr: *mut CcsServer,
    host: *const c_char,
    port: c_int,
    key: *const CcsSecSecretKey,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { CcsConnectWithTimeout(svr, host, port, key, DEFAULT_TIMEOUT) }
}

/// `CcsConnectWithTimeout(svr, host, port, key, timeout)`: as
/// [`CcsConnect`], waiting up to `timeout` seconds (0 or less: the
/// system's limit) to connect and for the layout.
///
/// # Safety
/// As [`CcsConnect`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CcsConnectWithTimeout(
    svr: *mut CcsServer,
    host: *const c_char,
    port: c_int,
    key: *const CcsSecSecretKey,
    timeout: c_int,
) -> c_int {
    if host.is_null() {
        eprintln!("CCS Client error> no host given");
        return -1;
    }
    // SAFETY: NUL-terminated (the caller's promise).
    let host = unsafe { c_str(host) }.into_owned();
    let port16 = u16::try_from(port).unwrap_or(0);
    // SAFETY: the caller's promise.
    unsafe { connect(svr, &host, (host.as_str(), port16), port, key, timeout) }
}

/// `CcsConnectIp(svr, ip, port, key)`: as [`CcsConnect`], to an IPv4
/// address.
///
/// # Safety
/// `svr` is writable; `key` is null or readable.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CcsConnectIp(
    svr: *mut CcsServer,
    ip: SktIp,
    port: c_int,
    key: *const CcsSecSecretKey,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { CcsConnectIpWithTimeout(svr, ip, port, key, DEFAULT_TIMEOUT) }
}

/// `CcsConnectIpWithTimeout(svr, ip, port, key, timeout)`.
///
/// # Safety
/// As [`CcsConnectIp`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CcsConnectIpWithTimeout(
    svr: *mut CcsServer,
    ip: SktIp,
    port: c_int,
    key: *const CcsSecSecretKey,
    timeout: c_int,
) -> c_int {
    let v4 = Ipv4Addr::from(ip.data);
    let addr = SocketAddr::from((v4, u16::try_from(port).unwrap_or(0)));
    // SAFETY: the caller's promise.
    unsafe { connect(svr, &v4.to_string(), addr, port, key, timeout) }
}

/// `CcsNumNodes(svr)`: the job's nodes, or -1 if not connected.
///
/// # Safety
/// `svr` is null or a `CcsServer` a connect has written.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CcsNumNodes(svr: *mut CcsServer) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { client(svr) }.map_or(-1, |c| count(c.num_nodes()))
}

/// `CcsNumPes(svr)`: the job's PEs, or -1 if not connected.
///
/// # Safety
/// As [`CcsNumNodes`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CcsNumPes(svr: *mut CcsServer) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { client(svr) }.map_or(-1, |c| c_int::try_from(c.num_pes()).unwrap_or(c_int::MAX))
}

/// `CcsNodeFirst(svr, node)`: the first PE of `node`, or -1.
///
/// # Safety
/// As [`CcsNumNodes`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CcsNodeFirst(svr: *mut CcsServer, node: c_int) -> c_int {
    // SAFETY: the caller's promise.
    let c = unsafe { client(svr) };
    let first = c
        .zip(usize::try_from(node).ok())
        .and_then(|(c, n)| c.node_first(n));
    first.map_or(-1, |f| c_int::try_from(f).unwrap_or(c_int::MAX))
}

/// `CcsNodeSize(svr, node)`: the PEs of `node`, or -1.
///
/// # Safety
/// As [`CcsNumNodes`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CcsNodeSize(svr: *mut CcsServer, node: c_int) -> c_int {
    // SAFETY: the caller's promise.
    let c = unsafe { client(svr) };
    let size = c
        .zip(usize::try_from(node).ok())
        .and_then(|(c, n)| c.node_size(n));
    size.map_or(-1, |s| c_int::try_from(s).unwrap_or(c_int::MAX))
}

/// Where a request goes.
enum To<'a> {
    Pe(c_int),
    All,
    Pes(&'a [c_int]),
}

/// Where a request goes, checked.
enum Dest {
    Pe(u32),
    All,
    Pes(Vec<u32>),
}

/// Sends a request; 0 or -1.
///
/// # Safety
/// `svr` as in [`CcsNumNodes`]; `hdlr` is null or NUL-terminated; `msg`
/// points at `size` readable bytes.
unsafe fn send(
    svr: *mut CcsServer,
    hdlr: *const c_char,
    to: To<'_>,
    size: c_int,
    msg: *const c_void,
    timeout: c_int,
) -> c_int {
    // SAFETY: the caller's promise.
    let Some(c) = (unsafe { client(svr) }) else {
        return -1;
    };
    if hdlr.is_null() {
        return -1;
    }
    // SAFETY: NUL-terminated (the caller's promise).
    let name = unsafe { c_str(hdlr) };
    let data: &[u8] = match usize::try_from(size) {
        Ok(0) => &[],
        Ok(_) if msg.is_null() => return -1,
        // SAFETY: `size` readable bytes (the caller's promise).
        Ok(n) => unsafe { std::slice::from_raw_parts(msg.cast::<u8>(), n) },
        Err(_) => return -1,
    };
    let to = match to {
        To::Pe(pe) => match u32::try_from(pe) {
            Ok(pe) => Dest::Pe(pe),
            Err(_) => return -1,
        },
        To::All => Dest::All,
        To::Pes(pes) => match pes.iter().map(|&p| u32::try_from(p).ok()).collect() {
            Some(list) => Dest::Pes(list),
            None => return -1,
        },
    };
    let saved = c.options().clone();
    c.set_options(options(timeout));
    let sent = match &to {
        Dest::Pe(pe) => c.send_request(&name, *pe, data),
        Dest::All => c.send_broadcast(&name, data),
        Dest::Pes(list) => c.send_multicast(&name, list, data),
    };
    c.set_options(saved);
    if sent.is_ok() { 0 } else { -1 }
}

/// `CcsSendRequest(svr, hdlrID, pe, size, msg)`: asks PE `pe` to run
/// handler `hdlrID` on the `size` bytes at `msg`; 0 or -1.
///
/// # Safety
/// `svr` is null or a `CcsServer` a connect has written; `hdlrID` is a
/// NUL-terminated string; `msg` points at `size` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CcsSendRequest(
    svr: *mut CcsServer,
    hdlr: *const c_char,
    pe: c_int,
    size: c_int,
    msg: *const c_void,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { send(svr, hdlr, To::Pe(pe), size, msg, DEFAULT_TIMEOUT) }
}

/// `CcsSendRequestWithTimeout(svr, hdlrID, pe, size, msg, timeout)`: as
/// [`CcsSendRequest`], connecting within `timeout` seconds.
///
/// # Safety
/// As [`CcsSendRequest`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CcsSendRequestWithTimeout(
    svr: *mut CcsServer,
    hdlr: *const c_char,
    pe: c_int,
    size: c_int,
    msg: *const c_void,
    timeout: c_int,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { send(svr, hdlr, To::Pe(pe), size, msg, timeout) }
}

/// `CcsSendBroadcastRequest(svr, hdlrID, size, msg)`: asks every PE; the
/// replies come back merged.
///
/// # Safety
/// As [`CcsSendRequest`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CcsSendBroadcastRequest(
    svr: *mut CcsServer,
    hdlr: *const c_char,
    size: c_int,
    msg: *const c_void,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { send(svr, hdlr, To::All, size, msg, DEFAULT_TIMEOUT) }
}

/// `CcsSendBroadcastRequestWithTimeout(svr, hdlrID, size, msg, timeout)`.
///
/// # Safety
/// As [`CcsSendRequest`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CcsSendBroadcastRequestWithTimeout(
    svr: *mut CcsServer,
    hdlr: *const c_char,
    size: c_int,
    msg: *const c_void,
    timeout: c_int,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { send(svr, hdlr, To::All, size, msg, timeout) }
}

/// The `npes` PEs at `pes`, or `None` (after Charm++'s line on stderr) for
/// none.
///
/// # Safety
/// `pes` points at `npes` ints.
unsafe fn pe_list<'a>(npes: c_int, pes: *const c_int) -> Option<&'a [c_int]> {
    match usize::try_from(npes) {
        Ok(n) if n >= 1 && !pes.is_null() => {
            // SAFETY: `npes` ints (the caller's promise).
            Some(unsafe { std::slice::from_raw_parts(pes, n) })
        }
        _ => {
            eprintln!("CCS multicast: No processor specified");
            None
        }
    }
}

/// `CcsSendMulticastRequest(svr, hdlrID, npes, pes, size, msg)`: asks the
/// `npes` PEs at `pes`; the replies come back merged. The list is only
/// read.
///
/// # Safety
/// As [`CcsSendRequest`]; `pes` points at `npes` ints.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CcsSendMulticastRequest(
    svr: *mut CcsServer,
    hdlr: *const c_char,
    npes: c_int,
    pes: *mut c_int,
    size: c_int,
    msg: *const c_void,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { CcsSendMulticastRequestWithTimeout(svr, hdlr, npes, pes, size, msg, DEFAULT_TIMEOUT) }
}

/// `CcsSendMulticastRequestWithTimeout(svr, hdlrID, npes, pes, size, msg,
/// timeout)`.
///
/// # Safety
/// As [`CcsSendMulticastRequest`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CcsSendMulticastRequestWithTimeout(
    svr: *mut CcsServer,
    hdlr: *const c_char,
    npes: c_int,
    pes: *mut c_int,
    size: c_int,
    msg: *const c_void,
    timeout: c_int,
) -> c_int {
    // SAFETY: the caller's promise.
    let Some(list) = (unsafe { pe_list(npes, pes) }) else {
        return -1;
    };
    // SAFETY: the caller's promise.
    unsafe { send(svr, hdlr, To::Pes(list), size, msg, timeout) }
}

/// A receive's wait: none for a negative `timeout`.
fn wait(timeout: c_int) -> Option<Duration> {
    u64::try_from(timeout).ok().map(Duration::from_secs)
}

/// `CcsRecvResponse(svr, maxsize, recvBuffer, timeout)`: the reply to the
/// latest request, into the `maxsize` bytes at `recvBuffer`, waiting up to
/// `timeout` seconds (negative: no limit); its length, or -1.
///
/// # Safety
/// `svr` as in [`CcsSendRequest`]; `recvBuffer` points at `maxsize`
/// writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CcsRecvResponse(
    svr: *mut CcsServer,
    maxsize: c_int,
    buf: *mut c_void,
    timeout: c_int,
) -> c_int {
    // SAFETY: the caller's promise.
    let Some(c) = (unsafe { client(svr) }) else {
        return -1;
    };
    let space: &mut [u8] = match usize::try_from(maxsize) {
        Ok(0) => &mut [],
        Ok(_) if buf.is_null() => return -1,
        // SAFETY: `maxsize` writable bytes (the caller's promise).
        Ok(n) => unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), n) },
        Err(_) => return -1,
    };
    match c.recv_response_into(space, wait(timeout)) {
        Ok(n) => count(n),
        Err(_) => -1,
    }
}

/// `CcsRecvResponseMsg(svr, retSize, newBuf, timeout)`: the reply to the
/// latest request in a `malloc`'d buffer at `*newBuf` (the caller frees it
/// with `free`), its length at `*retSize` and returned; -1 on failure
/// (nothing allocated).
///
/// # Safety
/// `svr` as in [`CcsSendRequest`]; `retSize` and `newBuf` are writable.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CcsRecvResponseMsg(
    svr: *mut CcsServer,
    ret_size: *mut c_int,
    new_buf: *mut *mut c_void,
    timeout: c_int,
) -> c_int {
    // SAFETY: the caller's promise.
    let Some(c) = (unsafe { client(svr) }) else {
        return -1;
    };
    if ret_size.is_null() || new_buf.is_null() {
        return -1;
    }
    let Ok(reply) = c.recv_response(wait(timeout)) else {
        return -1;
    };
    // SAFETY: plain allocation; at least a byte so it is never null for
    // an empty reply.
    let out = unsafe { libc::malloc(reply.len().max(1)) };
    if out.is_null() {
        return -1;
    }
    let len = count(reply.len());
    // SAFETY: `out` holds `reply.len()` bytes; the outputs are writable
    // (the caller's promise).
    unsafe {
        std::ptr::copy_nonoverlapping(reply.as_ptr(), out.cast::<u8>(), reply.len());
        *new_buf = out;
        *ret_size = len;
    }
    len
}

/// `CcsProbe(svr)`: 1 if the reply to the latest request has begun to
/// arrive (or the server closed without one), 0 if not, -1 with no request
/// waiting.
///
/// # Safety
/// As [`CcsNumNodes`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CcsProbe(svr: *mut CcsServer) -> c_int {
    // SAFETY: the caller's promise.
    match unsafe { client(svr) }.map(|c| c.probe()) {
        Some(Ok(true)) => 1,
        Some(Ok(false)) => 0,
        _ => -1,
    }
}

/// `CcsProbeTimeout(svr, timeoutMs)`: as [`CcsProbe`], waiting up to
/// `timeoutMs` milliseconds (a negative one: as long as it takes, as
/// `poll` does in Charm++'s).
///
/// # Safety
/// As [`CcsNumNodes`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CcsProbeTimeout(svr: *mut CcsServer, timeout_ms: c_int) -> c_int {
    let timeout = u64::try_from(timeout_ms)
        .ok()
        .map(std::time::Duration::from_millis);
    // SAFETY: the caller's promise.
    match unsafe { client(svr) }.map(|c| c.probe_timeout(timeout)) {
        Some(Ok(true)) => 1,
        Some(Ok(false)) => 0,
        _ => -1,
    }
}

/// `CcsNoResponse(svr)`: the latest request's reply is not wanted; its
/// connection is closed. Returns 0 (-1 for a server never connected).
///
/// # Safety
/// As [`CcsNumNodes`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CcsNoResponse(svr: *mut CcsServer) -> c_int {
    // SAFETY: the caller's promise.
    match unsafe { client(svr) } {
        Some(c) => {
            c.no_response();
            0
        }
        None => -1,
    }
}

/// `CcsFinalize(svr)`: closes any connection and releases what the
/// connect allocated.
///
/// # Safety
/// As [`CcsNumNodes`]; `numProcs` was not freed by the caller.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CcsFinalize(svr: *mut CcsServer) {
    // SAFETY: the caller's promise.
    let Some(svr) = (unsafe { svr.as_mut() }) else {
        return;
    };
    if !svr.client.is_null() {
        // SAFETY: made by `Box::into_raw` in `connect`, released once
        // (the pointer is cleared).
        drop(unsafe { Box::from_raw(svr.client.cast::<CcsClient>()) });
        svr.client = std::ptr::null_mut();
    }
    if !svr.num_procs.is_null() {
        // SAFETY: `malloc`'d in `connect`, freed once (cleared).
        unsafe { libc::free(svr.num_procs.cast()) };
        svr.num_procs = std::ptr::null_mut();
    }
    svr.num_nodes = 0;
    svr.num_pes = 0;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_of(text: &str) -> (c_int, [u8; 16]) {
        let text = std::ffi::CString::new(text).unwrap();
        let mut key = CcsSecSecretKey { data: [0xee; 16] };
        // SAFETY: a C string and a writable key.
        let made = unsafe { CCS_AUTH_makeSecretKey(text.as_ptr(), &mut key) };
        (made, key.data)
    }

    #[test]
    fn a_key_is_read_as_the_servers_key_file_writes_it() {
        let (made, key) = key_of("00112233445566778899aabbccddEEFF");
        assert_eq!(made, 1);
        assert_eq!(
            key,
            converse_ccs::parse_key("00112233445566778899aabbccddeeff").unwrap()
        );
        // Short keys: the rest is 0; a last lone digit is a byte's high half.
        assert_eq!(
            key_of("1234\n"),
            (1, [0x12, 0x34, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])
        );
        assert_eq!(
            key_of("abc"),
            (1, [0xab, 0xc0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])
        );
        // Nothing readable: 0, and a zero key.
        assert_eq!(key_of("xyz"), (0, [0; 16]));
        assert_eq!(key_of(""), (0, [0; 16]));
        // More than 32 digits: the first 32.
        assert_eq!(key_of(&"f".repeat(40)).1, [0xff; 16]);
    }
}
