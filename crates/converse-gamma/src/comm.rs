//! Ports and sends: `gamma_set_active_port`, `gamma_set_passive_port`,
//! `gamma_post_recv`, `gamma_attach_buffer`, and the send family.
//!
//! # Invariants
//!
//! A send copies its bytes into a Converse message before it returns, so a
//! blocking send completes at once unless flow control holds it, and a
//! non-blocking one's data may be reused as soon as the call returns (the
//! handle says when the message left, for flow control). One exception: a
//! blocking [`send`] of [`OFFER_MIN`](crate::OFFER_MIN) bytes or more
//! to one node of the group in another process offers the bytes to the
//! receiver, which reads them itself, and returns once it has stored them
//! (polling meanwhile, so handlers run): such a send waits for the
//! receiver to poll (any GAMMA call that waits, or its scheduler), as a
//! large MPI send waits for its receive.
use std::rc::Rc;

use converse::{MAX_MESSAGE_SIZE, MSG_HEADER_SIZE, Message};

use crate::error::{Error, Result};
use crate::intergroup;
use crate::node::{self, Dest, DestNode, Input, Node, Out, PortHandler};
use crate::port::{Buffer, BufferKind, Destination};
use crate::wire::{self, DATA_HEADER};

/// Identifies a non-blocking send (`unsigned long handle`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SendHandle(pub u64);

fn check_output(me: u16, nodes: u16, my_par_pid: u8, port: u16, dest: &Dest) -> Result<()> {
    let mine = dest.par_pid == my_par_pid;
    // Another group of this host: its registry entry gives its size.
    let nodes = if mine {
        nodes
    } else {
        intergroup::group_size(dest.par_pid).ok_or(Error::BadParPid(dest.par_pid))?
    };
    match dest.node {
        DestNode::Node(n) if n >= nodes => return Err(Error::BadNode(n.into())),
        DestNode::Node(n) if mine && n == me => return Err(Error::SelfConnection(port)),
        _ => {}
    }
    node::user_port(dest.port)?;
    Ok(())
}

fn input_buffer(buffer: Option<Buffer>, buffer_len: usize, port: u16) -> Result<Option<Buffer>> {
    match buffer {
        Some(b) if buffer_len > b.len() => Err(Error::BadBuffer(format!(
            "port {port}: buffer_len {buffer_len} is beyond the buffer's {} bytes",
            b.len()
        ))),
        None if buffer_len > 0 => Err(Error::BadBuffer(format!(
            "port {port}: buffer_len {buffer_len} without a buffer"
        ))),
        b => Ok(b),
    }
}

#[allow(clippy::too_many_arguments)]
fn set_port(
    port: u16,
    dest: Option<Dest>,
    receiver: Option<PortHandler>,
    error: Option<PortHandler>,
    semaphore: u16,
    kind: BufferKind,
    buffer: Option<Buffer>,
    buffer_len: usize,
) -> Result<()> {
    let n = node::current()?;
    node::user_port(port)?;
    node::user_port(semaphore)?;
    if let Some(d) = &dest {
        check_output(n.me, n.nodes, n.par_pid.get(), port, d)?;
        n.bind_foreign(*d);
    }
    let buffer = input_buffer(buffer, buffer_len, port)?;
    let input = Input {
        receiver,
        error,
        sem: semaphore,
        dest: Destination::new(buffer, buffer_len, kind),
    };
    n.set_input(port, Some(input), dest);
    Ok(())
}

/// Programs port `port` (0..=1022) with handlers (`gamma_set_active_port`):
/// for output to `dest` (`None`: input only; a port cannot be bound for
/// output to this node itself), and for input into `buffer`'s first
/// `buffer_len` bytes, counting arrivals on `semaphore`. `receiver` runs
/// after each message is stored (empty ones too); `error` when one was
/// truncated (`gamma_errno` = [`ERR_MSGTOOLONG`](crate::ERR_MSGTOOLONG))
/// or a send failed. Without an error handler an error counts on the
/// semaphore's error count, as `gamma_sigerr` would. Messages that
/// arrived before the port was set up are stored now, in order.
#[doc(alias = "gamma_set_active_port")]
#[allow(clippy::too_many_arguments)]
pub fn set_active_port(
    port: u16,
    dest: Option<Dest>,
    receiver: Option<PortHandler>,
    error: Option<PortHandler>,
    semaphore: u16,
    kind: BufferKind,
    buffer: Option<Buffer>,
    buffer_len: usize,
) -> Result<()> {
    set_port(
        port, dest, receiver, error, semaphore, kind, buffer, buffer_len,
    )
}

/// Programs port `port` without handlers (`gamma_set_passive_port`): as
/// [`set_active_port`], arrivals only counted on `semaphore`.
#[doc(alias = "gamma_set_passive_port")]
pub fn set_passive_port(
    port: u16,
    dest: Option<Dest>,
    semaphore: u16,
    kind: BufferKind,
    buffer: Option<Buffer>,
    buffer_len: usize,
) -> Result<()> {
    set_port(port, dest, None, None, semaphore, kind, buffer, buffer_len)
}

/// Binds a fresh buffer to input port `port` (`gamma_post_recv`): the next
/// message goes to its start. Releases flow-controlled senders waiting on
/// this port.
#[doc(alias = "gamma_post_recv")]
pub fn post_recv(port: u16, buffer: &Buffer, buffer_len: usize) -> Result<()> {
    let n = node::current()?;
    node::user_port(port)?;
    n.repost(port, buffer.clone(), Some(buffer_len))
}

/// As [`post_recv`], keeping the length last set (`gamma_attach_buffer`).
#[doc(alias = "gamma_attach_buffer")]
pub fn attach_buffer(port: u16, buffer: &Buffer) -> Result<()> {
    let n = node::current()?;
    node::user_port(port)?;
    n.repost(port, buffer.clone(), None)
}

/// The calling node and where its output port `port` sends.
fn output(port: u16) -> Result<(Rc<Node>, Dest)> {
    let n = node::current()?;
    node::user_port(port)?;
    let dest = n.ports.borrow()[port as usize]
        .output
        .ok_or(Error::NotOutput(port))?;
    Ok((n, dest))
}

/// Builds the payload and sends it; the handle.
fn start_send(port: u16, pieces: [&[u8]; 2], flowctl: bool) -> Result<u64> {
    let (n, dest) = output(port)?;
    let len = pieces[0].len() + pieces[1].len();
    if len > MAX_MESSAGE_SIZE - MSG_HEADER_SIZE {
        return Err(Error::BadBuffer(format!(
            "a message of {len} bytes through port {port}: at most {}",
            MAX_MESSAGE_SIZE - MSG_HEADER_SIZE
        )));
    }
    if dest.par_pid != n.par_pid.get() {
        // To another group: a frame with the whole header.
        if DATA_HEADER + len > intergroup::MAX_FRAME {
            return Err(Error::BadBuffer(format!(
                "a message of {len} bytes through port {port} to another group: at most {}",
                intergroup::MAX_FRAME - DATA_HEADER
            )));
        }
        let mut frame = vec![0; DATA_HEADER];
        let flags = if flowctl { wire::FLOWCTL } else { 0 };
        wire::data_header(&mut frame, flags, n.par_pid.get(), n.me, port, dest.port);
        frame.reserve(len);
        frame.extend_from_slice(pieces[0]);
        frame.extend_from_slice(pieces[1]);
        return n.send(port, dest, Out::Remote(frame), flowctl);
    }
    // Built in the Converse message itself (the only copy of the data on
    // the sending side, and its only pass: a one-piece message is copied
    // into a buffer not zeroed first); the ports ride in its header (see
    // `wire`).
    let mut msg = if pieces[1].is_empty() {
        Message::from_payload(n.handler, pieces[0])
    } else {
        let mut msg = Message::new(n.handler, len);
        let payload = msg.payload_mut();
        payload[..pieces[0].len()].copy_from_slice(pieces[0]);
        payload[pieces[0].len()..].copy_from_slice(pieces[1]);
        msg
    };
    msg.set_info(wire::data_info(flowctl, port, dest.port));
    n.send(port, dest, Out::Local(msg), flowctl)
}

fn two_pieces<'a>(first: &'a [u8], second: &'a [u8]) -> Result<[&'a [u8]; 2]> {
    if first.len() > 20 {
        return Err(Error::FirstPieceTooLong(first.len()));
    }
    Ok([first, second])
}

/// Waits for the send of `handle` to complete (`gamma_wsend`); an error if
/// it failed (its destination left the group).
#[doc(alias = "gamma_wsend")]
pub fn wsend(handle: SendHandle) -> Result<()> {
    let n = node::current()?;
    let h = handle.0;
    let mut result = Ok(());
    n.wait_until(
        &|| format!("waiting for send {h} (flow control)"),
        &mut |n| match n.send_done(h) {
            Ok(done) => done,
            Err(e) => {
                result = Err(e);
                true
            }
        },
    )?;
    result
}

/// True if the send of `handle` completed (`gamma_tsend`: 1), false if not
/// yet (0); an error if it failed.
#[doc(alias = "gamma_tsend")]
pub fn tsend(handle: SendHandle) -> Result<bool> {
    let n = node::current()?;
    converse::schedule_poll();
    n.send_done(handle.0)
}

/// Sends `data` through output port `port` (`gamma_send`). From
/// [`OFFER_MIN`](crate::OFFER_MIN) bytes on, to one node in another
/// process, the receiver reads `data` itself and the call returns once it
/// has them (see the module's invariants).
#[doc(alias = "gamma_send")]
pub fn send(port: u16, data: &[u8]) -> Result<()> {
    if data.len() >= node::OFFER_MIN && offer(port, data)? {
        return Ok(());
    }
    start_send(port, [data, &[]], false).map(drop)
}

/// Offers `data` to its receiver if `port` sends to one node of this group
/// in another process; `Ok(false)` if it must go as a message.
fn offer(port: u16, data: &[u8]) -> Result<bool> {
    let (n, dest) = output(port)?;
    let DestNode::Node(to) = dest.node else {
        return Ok(false);
    };
    let elsewhere = to != n.me
        && (to as usize) < converse::num_pes()
        && converse::node_of(to as usize) != converse::my_node();
    if dest.par_pid != n.par_pid.get()
        || !elsewhere
        || data.len() > MAX_MESSAGE_SIZE - MSG_HEADER_SIZE
    {
        return Ok(false);
    }
    n.send_offer(port, to, dest.port, data)
}

/// Sends `data` through `port` with flow control (`gamma_send_flowctl`):
/// waits until the receiver has re-posted its buffer since this port's
/// previous flow-controlled message (one message in flight per port).
#[doc(alias = "gamma_send_flowctl")]
pub fn send_flowctl(port: u16, data: &[u8]) -> Result<()> {
    let h = start_send(port, [data, &[]], true)?;
    wsend(SendHandle(h))
}

/// Sends `first` then `second` as one message (`gamma_send_2p`); `first`
/// at most 20 bytes.
#[doc(alias = "gamma_send_2p")]
pub fn send_2p(port: u16, first: &[u8], second: &[u8]) -> Result<()> {
    start_send(port, two_pieces(first, second)?, false).map(drop)
}

/// [`send_2p`] with flow control (`gamma_send_2p_flowctl`).
#[doc(alias = "gamma_send_2p_flowctl")]
pub fn send_2p_flowctl(port: u16, first: &[u8], second: &[u8]) -> Result<()> {
    let h = start_send(port, two_pieces(first, second)?, true)?;
    wsend(SendHandle(h))
}

/// Non-blocking [`send`] (`gamma_isend`).
#[doc(alias = "gamma_isend")]
pub fn isend(port: u16, data: &[u8]) -> Result<SendHandle> {
    start_send(port, [data, &[]], false).map(SendHandle)
}

/// Non-blocking [`send_flowctl`] (`gamma_isend_flowctl`): the message
/// waits, in order, for its credit.
#[doc(alias = "gamma_isend_flowctl")]
pub fn isend_flowctl(port: u16, data: &[u8]) -> Result<SendHandle> {
    start_send(port, [data, &[]], true).map(SendHandle)
}

/// Non-blocking [`send_2p`] (`gamma_isend_2p`).
#[doc(alias = "gamma_isend_2p")]
pub fn isend_2p(port: u16, first: &[u8], second: &[u8]) -> Result<SendHandle> {
    start_send(port, two_pieces(first, second)?, false).map(SendHandle)
}

/// Non-blocking [`send_2p_flowctl`] (`gamma_isend_2p_flowctl`).
#[doc(alias = "gamma_isend_2p_flowctl")]
pub fn isend_2p_flowctl(port: u16, first: &[u8], second: &[u8]) -> Result<SendHandle> {
    start_send(port, two_pieces(first, second)?, true).map(SendHandle)
}
