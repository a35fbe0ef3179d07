//! The large-message transfers of one VC: the Nemesis spec's LMT hooks
//! (`lmt_initiate_lmt`, `lmt_start_recv`, `lmt_start_send`,
//! `lmt_handle_cookie`, `lmt_done_send`, `lmt_done_recv`) as a trait a
//! module implements per VC ([`LmtHooks`]), the spec's packet macros
//! (`MPID_nem_lmt_send_RTS`, `_CTS`, `_COOKIE`, `_DONE`) as the VC's side
//! the hooks call ([`LmtVc`]), and the part the spec leaves to CH3 here
//! ([`Transfers`]): the transfers in flight each way, which packet goes to
//! which hook, and what is malformed.
//!
//! A module that sets no hooks for a VC gets the spec's *Null* mode
//! ([`NullHooks`]): the RTS and CTS go as packets with no cookie, then
//! the message itself as an `LmtData` frame of the stream, which the
//! reassembler receives straight into a message buffer; no DONE.
//!
//! # The packets, and whose transfer they name
//!
//! Every packet names its transfer by the id its sender chose
//! ([`Transfers::send`]: below 2³², so that the Null mode's data frame
//! carries it in its tag). An RTS and the data come from the transfer's
//! sender, a CTS from its receiver; a COOKIE or a DONE says in its frame
//! header's flags whether it comes from the sender ([`FROM_SENDER`]) or
//! the receiver. So the process that gets it looks the id up among the
//! transfers it receives or among those it sends: both processes of a VC
//! choose ids for their own sends, and the same number may name one
//! transfer each way. An RTS's flags are the message's own (a node
//! message, a persistent channel's), which its receiver hands up with
//! it.
//!
//! # Invariants
//!
//! - A transfer is in its table from before its first packet leaves until
//!   a hook says it is done: a packet about it always finds it, and a
//!   packet about no transfer in flight is malformed (the error names the
//!   peer, the packet and the id).
//! - A sent message stays lent (in its [`SendTransfer`]) until its
//!   transfer is done: the peer may read it (Get) until then.
//! - A received message is handed up once, when its transfer is done, and
//!   only if the hooks gave it a buffer of the length the RTS said.
//! - Nothing from the peer is trusted: lengths are checked against the
//!   receiver's limit ([`Packet::parse`]) and against the transfer's.
//!
//! # Concurrency
//!
//! Each table has its own lock, never held while another of this
//! module's locks is taken but the module's send side (a hook that sends
//! a packet): the order is table, then send side. [`Transfers::send`]
//! holds the sending table while the hook sends the RTS, so that the
//! peer's answer, handled on another thread, finds the transfer. The
//! packet handlers take a transfer out of its table while its hook runs
//! (a copy of megabytes, maybe) and put it back if it is not done: packets
//! of one VC are handled one at a time, so none about it comes meanwhile.
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use converse_msg::Message;

use crate::frame::{FrameBody, FrameHeader, FrameKind};
use crate::lmt::{Cookie, Packet};
use crate::netmod::NetError;
use crate::sync::lock;

/// The frame-header flag of a COOKIE or DONE sent by its transfer's
/// sender (see "The packets, and whose transfer they name").
pub const FROM_SENDER: u8 = 1;

/// A large message being sent (the spec's send request of an LMT).
pub struct SendTransfer {
    /// Its id, chosen by this process: unique among its transfers to the
    /// peer in flight.
    pub id: u64,
    /// The message's frame header (kind `Message`); its RTS carries the
    /// rest of it.
    pub header: FrameHeader,
    /// The message's length.
    pub len: usize,
    /// The message, lent until the transfer is done (or until a hook hands
    /// it to the stream: the Null mode's data).
    pub msg: Option<Message>,
}

impl SendTransfer {
    /// The cookie of this transfer naming `addr` (0: none) in the
    /// sender's memory.
    pub fn cookie(&self, addr: u64) -> Cookie {
        Cookie {
            addr,
            len: self.len as u64,
            id: self.id,
        }
    }
}

/// A large message being received (the spec's receive request).
pub struct RecvTransfer {
    /// Its id, as its sender chose it.
    pub id: u64,
    /// The message's frame header (kind `Message`, `len` its length), from
    /// the RTS.
    pub header: FrameHeader,
    /// The buffer its bytes go into, once the hooks have made one (of
    /// `header.len` bytes).
    pub msg: Option<Message>,
}

/// A transfer a COOKIE names: one this process sends, or one it receives.
pub enum Side<'a> {
    /// A transfer this process sends (the cookie is its receiver's).
    Sending(&'a mut SendTransfer),
    /// A transfer this process receives (the cookie is its sender's).
    Receiving(&'a mut RecvTransfer),
}

/// Where a transfer is after a hook ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Waiting for a packet from the peer.
    Pending,
    /// Done: a sent message's buffer goes back, a received one is handed
    /// up.
    Done,
}

/// The spec's packet macros for one VC (`MPID_nem_lmt_send_RTS`, `_CTS`,
/// `_COOKIE`, `_DONE`), and the Null mode's data: what [`LmtHooks`] call
/// to talk to the peer. Implemented by the module; a packet goes on the
/// VC's stream in order with its frames (an LMT packet never waits behind
/// a transfer's data: see each module).
pub trait LmtVc {
    /// The peer process.
    fn peer(&self) -> usize;
    /// Sends a packet (its frame header's `src`, `tag` and `flags` are
    /// the module's to fill from `base`: for an RTS, the message's header).
    fn send_packet(&self, base: FrameHeader, packet: Packet) -> Result<(), NetError>;
    /// The Null mode's data: `t`'s message (taken from it) as an `LmtData`
    /// frame (tag: the transfer's id), on the stream.
    fn send_data(&self, t: &mut SendTransfer) -> Result<(), NetError>;
}

/// The LMT hooks of a VC: the spec's function pointers, set by the module
/// when it makes the VC (`vc_init`); a VC with none runs the Null mode
/// ([`NullHooks`]). `V` is the module's view of its VC.
pub trait LmtHooks<V: LmtVc + ?Sized>: Send + Sync {
    /// `lmt_initiate_lmt`: the sender starts `t`: sends its RTS with the
    /// cookie the receiver needs ([`send_rts`]).
    #[doc(alias = "lmt_initiate_lmt")]
    fn initiate_lmt(&self, vc: &V, t: &SendTransfer) -> Result<(), String>;
    /// `lmt_start_recv`: the receiver got `t`'s RTS with the sender's
    /// cookie. Get: moves the bytes into a buffer of its own (`t.msg`)
    /// now; Put and Cooperative: answers CTS ([`send_cts`]).
    #[doc(alias = "lmt_start_recv")]
    fn start_recv(
        &self,
        vc: &V,
        t: &mut RecvTransfer,
        s_cookie: Cookie,
    ) -> Result<Progress, String>;
    /// `lmt_start_send`: the sender got the CTS of `t` with the receiver's
    /// cookie (Put, Cooperative).
    #[doc(alias = "lmt_start_send")]
    fn start_send(
        &self,
        vc: &V,
        t: &mut SendTransfer,
        r_cookie: Cookie,
    ) -> Result<Progress, String>;
    /// `lmt_handle_cookie`: a COOKIE came for `t` during the transfer (a
    /// buffer changed).
    #[doc(alias = "lmt_handle_cookie")]
    fn handle_cookie(&self, vc: &V, t: Side<'_>, cookie: Cookie) -> Result<Progress, String>;
    /// `lmt_done_send`: the receiver said DONE for `t` (Get: it has read).
    #[doc(alias = "lmt_done_send")]
    fn done_send(&self, vc: &V, t: &mut SendTransfer) -> Result<Progress, String>;
    /// `lmt_done_recv`: the sender said DONE for `t` (Put: it has written).
    #[doc(alias = "lmt_done_recv")]
    fn done_recv(&self, vc: &V, t: &mut RecvTransfer) -> Result<Progress, String>;
}

/// `MPID_nem_lmt_send_RTS`: `t`'s RTS with `cookie`.
#[doc(alias = "MPID_nem_lmt_send_RTS")]
pub fn send_rts<V: LmtVc + ?Sized>(vc: &V, t: &SendTransfer, cookie: Cookie) -> Result<(), String> {
    vc.send_packet(t.header, Packet::Rts(cookie))
        .map_err(|e| e.to_string())
}

/// `MPID_nem_lmt_send_CTS`: `t`'s CTS with `cookie`.
#[doc(alias = "MPID_nem_lmt_send_CTS")]
pub fn send_cts<V: LmtVc + ?Sized>(vc: &V, t: &RecvTransfer, cookie: Cookie) -> Result<(), String> {
    vc.send_packet(from_receiver(t.header), Packet::Cts(cookie))
        .map_err(|e| e.to_string())
}

/// `MPID_nem_lmt_send_COOKIE`: a changed `cookie` for the transfer `side`
/// names.
#[doc(alias = "MPID_nem_lmt_send_COOKIE")]
pub fn send_cookie<V: LmtVc + ?Sized>(
    vc: &V,
    side: &Side<'_>,
    cookie: Cookie,
) -> Result<(), String> {
    let base = match side {
        Side::Sending(t) => FrameHeader {
            flags: FROM_SENDER,
            ..t.header
        },
        Side::Receiving(t) => from_receiver(t.header),
    };
    vc.send_packet(base, Packet::Cookie(cookie))
        .map_err(|e| e.to_string())
}

/// `MPID_nem_lmt_send_DONE`: the end of transfer `id`, from its sender
/// (`from_sender`) or its receiver.
#[doc(alias = "MPID_nem_lmt_send_DONE")]
pub fn send_done<V: LmtVc + ?Sized>(
    vc: &V,
    base: FrameHeader,
    id: u64,
    from_sender: bool,
) -> Result<(), String> {
    let base = FrameHeader {
        flags: if from_sender { FROM_SENDER } else { 0 },
        ..base
    };
    vc.send_packet(base, Packet::Done { id })
        .map_err(|e| e.to_string())
}

fn from_receiver(h: FrameHeader) -> FrameHeader {
    FrameHeader { flags: 0, ..h }
}

/// The spec's Null mode (no hooks): RTS and CTS with no cookie, then the
/// message as an `LmtData` frame of the stream; no DONE, no COOKIE.
pub struct NullHooks;

impl<V: LmtVc + ?Sized> LmtHooks<V> for NullHooks {
    fn initiate_lmt(&self, vc: &V, t: &SendTransfer) -> Result<(), String> {
        send_rts(vc, t, t.cookie(0))
    }

    fn start_recv(&self, vc: &V, t: &mut RecvTransfer, _: Cookie) -> Result<Progress, String> {
        send_cts(
            vc,
            t,
            Cookie {
                addr: 0,
                len: u64::from(t.header.len),
                id: t.id,
            },
        )?;
        Ok(Progress::Pending)
    }

    fn start_send(&self, vc: &V, t: &mut SendTransfer, _: Cookie) -> Result<Progress, String> {
        vc.send_data(t).map_err(|e| e.to_string())?;
        Ok(Progress::Done)
    }

    fn handle_cookie(&self, vc: &V, _: Side<'_>, _: Cookie) -> Result<Progress, String> {
        Err(format!(
            "malformed data from process {}: a cookie change in a transfer of the null mode",
            vc.peer()
        ))
    }

    fn done_send(&self, vc: &V, t: &mut SendTransfer) -> Result<Progress, String> {
        Err(format!(
            "malformed data from process {}: done with transfer {} of the null mode, which ends with its data",
            vc.peer(),
            t.id
        ))
    }

    fn done_recv(&self, vc: &V, t: &mut RecvTransfer) -> Result<Progress, String> {
        Err(format!(
            "malformed data from process {}: done with transfer {} of the null mode, which ends with its data",
            vc.peer(),
            t.id
        ))
    }
}

/// The transfers of one VC in flight, each way (see the module comment).
pub struct Transfers {
    peer: usize,
    /// The largest message this process takes.
    max_len: usize,
    next: AtomicU64,
    sending: Mutex<HashMap<u64, SendTransfer>>,
    receiving: Mutex<HashMap<u64, RecvTransfer>>,
    /// Bytes of the messages lent in `sending`.
    lent: AtomicUsize,
}

impl Transfers {
    /// No transfers yet, with `peer`; messages of at most `max_len` bytes
    /// are taken.
    pub fn new(peer: usize, max_len: usize) -> Transfers {
        Transfers {
            peer,
            max_len,
            next: AtomicU64::new(1),
            sending: Mutex::new(HashMap::new()),
            receiving: Mutex::new(HashMap::new()),
            lent: AtomicUsize::new(0),
        }
    }

    /// Bytes of the messages lent to the peer (sent, not done).
    pub fn lent_bytes(&self) -> usize {
        self.lent.load(Ordering::Acquire)
    }

    /// True while a transfer from the peer is in flight.
    pub fn receiving(&self) -> bool {
        !lock(&self.receiving).is_empty()
    }

    /// Starts sending `msg` (frame header `header`, kind `Message`): lent
    /// until its transfer is done; the hooks send the RTS. Returns the id.
    pub fn send<V: LmtVc + ?Sized>(
        &self,
        vc: &V,
        hooks: &dyn LmtHooks<V>,
        header: FrameHeader,
        msg: Message,
    ) -> Result<u64, NetError> {
        let len = msg.len();
        let mut sending = lock(&self.sending);
        // Below 2^32 (see "The packets, and whose transfer they name"), and
        // none in flight: after four billion transfers the numbers wrap.
        let id = loop {
            let id = u64::from(self.next.fetch_add(1, Ordering::Relaxed) as u32);
            if !sending.contains_key(&id) {
                break id;
            }
        };
        sending.insert(
            id,
            SendTransfer {
                id,
                header,
                len,
                msg: Some(msg),
            },
        );
        self.lent.fetch_add(len, Ordering::AcqRel);
        let t = sending.get(&id).expect("just inserted");
        if let Err(why) = hooks.initiate_lmt(vc, t) {
            sending.remove(&id);
            self.lent.fetch_sub(len, Ordering::AcqRel);
            return Err(NetError::peer(self.peer, why));
        }
        Ok(id)
    }

    /// An LMT frame of the VC's stream (`LmtRts` to `LmtDone`, or
    /// `LmtData`): the packet goes to its hook; returns the message of a
    /// transfer it completed, with its frame header, to hand up. The error
    /// names the peer and what was wrong.
    pub fn on_frame<V: LmtVc + ?Sized>(
        &self,
        vc: &V,
        hooks: &dyn LmtHooks<V>,
        h: FrameHeader,
        body: FrameBody,
    ) -> Result<Option<(FrameHeader, Message)>, String> {
        let peer = self.peer;
        if h.kind == FrameKind::LmtData {
            let FrameBody::Message(msg) = body else {
                return Err(format!(
                    "process {peer}: an LmtData frame not received as a message"
                ));
            };
            return self.on_data(h, msg);
        }
        let packet = Packet::parse(h.kind, body.as_slice(), peer, self.max_len)?;
        let from_sender = h.flags & FROM_SENDER != 0;
        let id = match packet {
            Packet::Rts(c) | Packet::Cts(c) | Packet::Cookie(c) => c.id,
            Packet::Done { id } => id,
        };
        match (packet, from_sender) {
            (Packet::Rts(cookie), _) => self.on_rts(vc, hooks, h, cookie),
            (Packet::Cts(cookie), _) => {
                self.with_sending(id, "clear to send", |t| hooks.start_send(vc, t, cookie))
            }
            (Packet::Done { .. }, false) => {
                self.with_sending(id, "done with", |t| hooks.done_send(vc, t))
            }
            (Packet::Cookie(cookie), false) => self.with_sending(id, "a cookie for", |t| {
                hooks.handle_cookie(vc, Side::Sending(t), cookie)
            }),
            (Packet::Done { .. }, true) => {
                self.with_receiving(id, "done with", |t| hooks.done_recv(vc, t))
            }
            (Packet::Cookie(cookie), true) => self.with_receiving(id, "a cookie for", |t| {
                hooks.handle_cookie(vc, Side::Receiving(t), cookie)
            }),
        }
    }

    /// The RTS of a new transfer from the peer.
    fn on_rts<V: LmtVc + ?Sized>(
        &self,
        vc: &V,
        hooks: &dyn LmtHooks<V>,
        h: FrameHeader,
        cookie: Cookie,
    ) -> Result<Option<(FrameHeader, Message)>, String> {
        let peer = self.peer;
        let len = cookie.len as usize;
        if len < converse_msg::MSG_HEADER_SIZE {
            return Err(format!(
                "malformed data from process {peer}: a large message of {len} bytes"
            ));
        }
        if lock(&self.receiving).contains_key(&cookie.id) {
            return Err(format!(
                "malformed data from process {peer}: a second transfer {} while the first is in flight",
                cookie.id
            ));
        }
        let mut t = RecvTransfer {
            id: cookie.id,
            header: FrameHeader {
                kind: FrameKind::Message,
                len: len as u32,
                ..h
            },
            msg: None,
        };
        match hooks.start_recv(vc, &mut t, cookie)? {
            Progress::Done => self.received(t).map(Some),
            Progress::Pending => {
                lock(&self.receiving).insert(t.id, t);
                Ok(None)
            }
        }
    }

    /// The Null mode's data of transfer `h.tag`.
    fn on_data(
        &self,
        h: FrameHeader,
        msg: Message,
    ) -> Result<Option<(FrameHeader, Message)>, String> {
        let id = u64::from(h.tag);
        let peer = self.peer;
        let mut t = lock(&self.receiving).remove(&id).ok_or_else(|| {
            format!(
                "malformed data from process {peer}: data of transfer {id}, which is not in flight"
            )
        })?;
        if t.msg.is_some() || msg.len() != t.header.len as usize {
            return Err(format!(
                "malformed data from process {peer}: {} bytes of data for transfer {id} of {} bytes",
                msg.len(),
                t.header.len
            ));
        }
        t.msg = Some(msg);
        self.received(t).map(Some)
    }

    /// A received transfer is done: its message, checked, to hand up.
    fn received(&self, t: RecvTransfer) -> Result<(FrameHeader, Message), String> {
        let peer = self.peer;
        match t.msg {
            Some(msg) if msg.len() == t.header.len as usize => Ok((t.header, msg)),
            _ => Err(format!(
                "process {peer}: transfer {} ended without its {} bytes",
                t.id, t.header.len
            )),
        }
    }

    /// Runs `hook` on sent transfer `id`, taken out of its table meanwhile;
    /// drops it (its message goes back) if done.
    fn with_sending(
        &self,
        id: u64,
        what: &str,
        hook: impl FnOnce(&mut SendTransfer) -> Result<Progress, String>,
    ) -> Result<Option<(FrameHeader, Message)>, String> {
        let peer = self.peer;
        let mut t = lock(&self.sending).remove(&id).ok_or_else(|| {
            format!("malformed data from process {peer}: {what} transfer {id}, which this process is not sending")
        })?;
        let result = hook(&mut t);
        match result {
            Ok(Progress::Done) => {
                self.lent.fetch_sub(t.len, Ordering::AcqRel);
                Ok(None)
            }
            Ok(Progress::Pending) => {
                lock(&self.sending).insert(id, t);
                Ok(None)
            }
            Err(why) => {
                // Kept: the peer may still read it until the VC is gone.
                lock(&self.sending).insert(id, t);
                Err(why)
            }
        }
    }

    /// Runs `hook` on received transfer `id`, taken out of its table
    /// meanwhile; hands its message up if done.
    fn with_receiving(
        &self,
        id: u64,
        what: &str,
        hook: impl FnOnce(&mut RecvTransfer) -> Result<Progress, String>,
    ) -> Result<Option<(FrameHeader, Message)>, String> {
        let peer = self.peer;
        let mut t = lock(&self.receiving).remove(&id).ok_or_else(|| {
            format!("malformed data from process {peer}: {what} transfer {id}, which this process is not receiving")
        })?;
        match hook(&mut t)? {
            Progress::Done => self.received(t).map(Some),
            Progress::Pending => {
                lock(&self.receiving).insert(id, t);
                Ok(None)
            }
        }
    }

    /// Makes the next id `next` (a test of the numbers' wrapping).
    #[cfg(test)]
    fn set_next(&self, next: u64) {
        self.next.store(next, Ordering::Relaxed);
    }

    /// Forgets every transfer (`vc_destroy`, a failed VC): lent messages
    /// go back, half-received ones are dropped. Returns the bytes that
    /// were lent.
    pub fn abandon(&self) -> usize {
        lock(&self.sending).clear();
        lock(&self.receiving).clear();
        self.lent.swap(0, Ordering::AcqRel)
    }
}

#[cfg(test)]
#[path = "lmt_transfers_tests.rs"]
mod tests;
