//! The network-module contract (the Nemesis netmod API of
//! `spec/nemesis-netmod-api.md`), in Rust.
//!
//! A network module moves frames (`frame`) between the processes of a
//! job. The layer above it (the core's `rt::network`, Nemesis's CH3) decides what the
//! frames mean. The calls map onto the spec one to one:
//!
//! | spec | here |
//! |---|---|
//! | `net_module_init` (returns a business card) | the module's constructor, then [`NetModule::business_card`] |
//! | `get_business_card` | [`NetModule::business_card`] |
//! | `connect_to_root` | [`NetModule::connect_to_root`] |
//! | `vc_init` / `vc_destroy` | [`NetModule::vc_init`] / [`NetModule::vc_destroy`] |
//! | `vc_terminate` | [`NetModule::vc_terminate`]: never blocks; [`Upcalls::vc_terminated`] once pending sends drained; `vc_init` on a terminated VC connects it again |
//! | LMT packets (RTS, CTS, COOKIE, DONE) | `lmt::Packet`, sent through `lmt_transfers::LmtVc` (`send_rts`, `send_cts`, `send_cookie`, `send_done`: the `MPID_nem_lmt_send_*` macros) |
//! | `lmt_initiate_lmt`, `lmt_start_recv`, `lmt_start_send`, `lmt_handle_cookie`, `lmt_done_send`, `lmt_done_recv` | `lmt_transfers::LmtHooks`, a module's per VC (shm: Get, Put; its Cooperative mode runs the Null mode's exchange through its cells); the transfers in flight and which packet goes to which hook: `lmt_transfers::Transfers` |
//! | the Null mode (no LMT hooks: RTS/CTS through the layer above, then the data) | `lmt_transfers::NullHooks`: the data as an `LmtData` frame |
//! | `get_ordering` | [`NetModule::ordering`] |
//! | `iSendContig` (request made by the caller) | [`NetModule::isend_contig`] |
//! | `iStartContigMsg` (request only if not sent at once) | [`NetModule::istart_contig`] |
//! | `SendNoncontig` (iovecs) | [`NetModule::send_noncontig`] |
//! | request completion, `OnDataAvail` | [`SendRequest`], [`OnDataAvail`] |
//! | `MPID_nem_handle_pkt` | `frame::Reassembler` per VC, its frames passed to [`Upcalls::frame`] |
//! | `net_module_poll(in_or_out)` | [`NetModule::poll`] with [`PollDir`] |
//! | `MPIDI_CH3U_Handle_connection` | [`Upcalls`] |
//! | `finalize` | [`NetModule::finalize`] |
//! | `ckpt_shutdown` | [`NetModule::ckpt_shutdown`]: `finalize`, as MPICH's tcp module has it; a module made anew afterwards connects again (tested for shm and tcp) |
//!
//! Where the spec hands the module a pointer and a length that stay valid
//! until the request completes, the Rust calls hand it an owned buffer
//! ([`SendData`]): the module keeps it as long as it needs it and drops it
//! when the bytes are gone, which is when the request completes.
//!
//! # Concurrency protocol
//!
//! A module is shared by every thread of its process: PEs send from their
//! own threads, one progress thread polls. Sends to one VC are ordered by
//! the module (a per-VC lock): the bytes of two sends never interleave, and
//! frames from one thread arrive in the order sent ([`NetModule::ordering`]).
//! Upcalls run on whichever thread made the progress that caused them, with
//! the VC's receive state locked: they must not send on the same VC's
//! receive path nor block.
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::frame::{FRAME_HEADER_SIZE, FrameBody, FrameHeader, FrameKind, MessageBuffers};
use converse_msg::Message;

/// A fault of a network module, naming the process it concerns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetError {
    /// The peer process (node) the fault concerns, if one.
    pub peer: Option<usize>,
    /// What went wrong.
    pub what: String,
}

impl NetError {
    /// A fault on the VC to `peer`.
    pub fn peer(peer: usize, what: impl Into<String>) -> NetError {
        NetError {
            peer: Some(peer),
            what: what.into(),
        }
    }

    /// A fault of the module itself.
    pub fn local(what: impl Into<String>) -> NetError {
        NetError {
            peer: None,
            what: what.into(),
        }
    }
}

impl fmt::Display for NetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.peer {
            Some(p) => write!(f, "process {p}: {}", self.what),
            None => f.write_str(&self.what),
        }
    }
}

impl std::error::Error for NetError {}

/// The bytes a send hands to the module. The module owns them until they
/// are sent (then the request completes and they are dropped).
pub enum SendData {
    /// A Converse message: its bytes as [`Message::as_bytes`] gives them.
    Message(Message),
    /// Any bytes.
    Bytes(Vec<u8>),
}

impl SendData {
    /// The bytes to send.
    pub fn as_slice(&self) -> &[u8] {
        match self {
            SendData::Message(m) => m.as_bytes(),
            SendData::Bytes(b) => b,
        }
    }
}

/// Bytes on their way out of a module: a frame (header, then data) or the
/// further data of a request, and how much of it is written. Both modules
/// keep their per-VC send queues of these.
pub(crate) struct OutFrame {
    pub header: Option<[u8; FRAME_HEADER_SIZE]>,
    pub data: SendData,
    /// Bytes of header-then-data already written.
    pub written: usize,
    pub req: Option<SendRequest>,
}

impl OutFrame {
    /// A frame: `header`, then `data`.
    pub fn frame(header: FrameHeader, data: SendData, req: Option<SendRequest>) -> OutFrame {
        OutFrame {
            header: Some(header.encode()),
            data,
            written: 0,
            req,
        }
    }

    /// Header plus data, in bytes.
    pub fn total(&self) -> usize {
        self.header.map_or(0, |h| h.len()) + self.data.as_slice().len()
    }

    /// The unwritten part of the header (maybe empty), then of the data.
    pub fn rest(&self) -> (&[u8], &[u8]) {
        let hdr: &[u8] = self.header.as_ref().map_or(&[], |h| &h[..]);
        let data = self.data.as_slice();
        if self.written < hdr.len() {
            (&hdr[self.written..], data)
        } else {
            (&[], &data[self.written - hdr.len()..])
        }
    }

    /// Once all of it is written: completes its request, or returns the
    /// request's further data, which must follow at once (see
    /// [`SendRequest::data_sent`]).
    pub fn complete(self) -> Option<OutFrame> {
        let req = self.req?;
        let more = req.data_sent()?;
        Some(OutFrame {
            header: None,
            data: more,
            written: 0,
            req: Some(req),
        })
    }
}

/// Checks that `iov` holds the `header.len` bytes a non-contiguous send
/// says it does.
pub(crate) fn check_iov_len(
    module: &str,
    peer: usize,
    header: &FrameHeader,
    iov: &[&[u8]],
) -> Result<(), NetError> {
    let total: usize = iov.iter().map(|p| p.len()).sum();
    if total == header.len as usize {
        Ok(())
    } else {
        Err(NetError::peer(
            peer,
            format!(
                "{module}: frame header says {} bytes but the iovecs hold {total}",
                header.len
            ),
        ))
    }
}

/// What a request's [`OnDataAvail`] continuation says once the data handed
/// to the module so far is sent.
pub enum DataAvail {
    /// The request is complete.
    Complete,
    /// More data to send on the same VC, right after (the spec's
    /// "otherwise, check for more data to send").
    More(SendData),
}

/// The `OnDataAvail` continuation of a send request: called by the module,
/// on its progress thread or the sender's, each time the request's data has
/// been sent.
#[doc(alias = "reqFn")]
pub type OnDataAvail = Box<dyn FnMut() -> DataAvail + Send>;

/// A send request (`MPID_Request` of a send): complete once all its data has
/// left the process (or the module has copied it).
#[derive(Clone)]
#[doc(alias = "MPID_Request")]
#[doc(alias = "MPIDI_CH3U_Request_complete")]
pub struct SendRequest {
    inner: Arc<RequestInner>,
}

struct RequestInner {
    done: Arc<AtomicBool>,
    on_data_avail: std::sync::Mutex<Option<OnDataAvail>>,
}

impl SendRequest {
    /// A request with no continuation: it completes when its data is sent.
    pub fn new() -> SendRequest {
        SendRequest::with_continuation(None)
    }

    /// A request whose data, once sent, is followed by what `on_data_avail`
    /// returns, until it says [`DataAvail::Complete`].
    pub fn with_continuation(on_data_avail: Option<OnDataAvail>) -> SendRequest {
        SendRequest {
            inner: Arc::new(RequestInner {
                done: Arc::new(AtomicBool::new(false)),
                on_data_avail: std::sync::Mutex::new(on_data_avail),
            }),
        }
    }

    /// True once the request is complete.
    pub fn is_complete(&self) -> bool {
        self.inner.done.load(Ordering::Acquire)
    }

    /// True if the request has an `OnDataAvail` continuation (which may add
    /// data right after the request's).
    pub fn has_continuation(&self) -> bool {
        self.inner
            .on_data_avail
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// The flag that turns true on completion (for `CommHandle`).
    pub fn completion_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.inner.done)
    }

    /// Called by a module when the data handed to it for this request has
    /// been sent (the spec's "Completing Send Requests"): runs the
    /// continuation, and either marks the request complete or returns the
    /// next data to send.
    pub fn data_sent(&self) -> Option<SendData> {
        let next = {
            let mut slot = self
                .inner
                .on_data_avail
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            match slot.as_mut() {
                None => DataAvail::Complete,
                Some(cb) => cb(),
            }
        };
        match next {
            DataAvail::Complete => {
                self.inner.done.store(true, Ordering::Release);
                None
            }
            DataAvail::More(data) => Some(data),
        }
    }
}

impl Default for SendRequest {
    fn default() -> Self {
        SendRequest::new()
    }
}

/// Which way [`NetModule::poll`] looks first (`MPID_nem_poll_dir_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[doc(alias = "MPID_nem_poll_dir_t")]
#[doc(alias = "MPID_NEM_POLL_IN")]
#[doc(alias = "MPID_NEM_POLL_OUT")]
pub enum PollDir {
    /// Receive before sending what is pending (`MPID_NEM_POLL_IN`).
    InFirst,
    /// Send what is pending before receiving (`MPID_NEM_POLL_OUT`).
    OutFirst,
}

/// What a module tells the layer above (CH3's side of the contract).
pub trait Upcalls: Send + Sync {
    /// A whole frame arrived on the VC from `peer` (after `handle_pkt`
    /// reassembly).
    fn frame(&self, peer: usize, header: FrameHeader, body: Vec<u8>);
    /// The VC to `peer` finished terminating: pending sends drained and the
    /// connection closed (`MPIDI_VC_EVENT_TERMINATED`).
    #[doc(alias = "MPIDI_CH3U_Handle_connection")]
    #[doc(alias = "MPIDI_VC_EVENT_TERMINATED")]
    fn vc_terminated(&self, peer: usize);
    /// The VC to `peer` broke: the peer closed it, reset it, or sent bytes
    /// that are not a frame stream.
    fn vc_failed(&self, peer: usize, why: String);
    /// A `Message` frame whose body the module received straight into a
    /// message buffer (every module does, through the reassembler or a
    /// large-message transfer): no copy to make.
    fn message(&self, peer: usize, header: FrameHeader, msg: Message) {
        self.frame(peer, header, msg.as_bytes().to_vec());
    }
    /// A whole frame from the reassembler: [`Upcalls::message`] for a
    /// message, [`Upcalls::frame`] for anything else.
    fn arrived(&self, peer: usize, header: FrameHeader, body: FrameBody) {
        match body {
            FrameBody::Message(msg) if header.kind == FrameKind::Message => {
                self.message(peer, header, msg)
            }
            // Another kind received into a message buffer (an `LmtData`
            // frame on a VC with no transfer engine) is no message: the
            // layer above sees its kind and refuses it.
            body => self.frame(peer, header, body.into_vec()),
        }
    }
    /// Buffers the layer above keeps for messages (persistent channels'),
    /// which the module's reassembly receives into where they fit; `None`
    /// (the default): every message gets a new buffer.
    fn message_buffers(&self) -> Option<Arc<dyn MessageBuffers>> {
        None
    }
    /// Process `peer`'s business card for the module whose cards begin
    /// with `prefix` (`"tcp:"`, `"shm:"`): what a module connects by when it
    /// first sends to `peer` (VCs are set up on first use; the layer above
    /// learns cards on demand from the job's bootstrap, as MPICH's
    /// `MPIDI_PG_GetConnString` does). May block for a round trip to the
    /// launcher; call it holding no lock of the VC. The default knows no
    /// card.
    fn peer_card(&self, peer: usize, prefix: &str) -> Result<String, NetError> {
        Err(NetError::peer(
            peer,
            format!("no `{prefix}` business card is known for this process"),
        ))
    }
    /// Whether the layer above takes more frames now (flow control). While
    /// it says no, the module leaves received bytes in the network; it
    /// reads them after [`NetModule::resume_receiving`].
    fn room(&self) -> bool {
        true
    }
}

/// [`NetModule::send_window`] of a module that says nothing else: 8 MiB,
/// two messages of 4 MiB in flight, so that a stream of them never waits
/// for the sender's next copy.
pub const DEFAULT_SEND_WINDOW: usize = 8 << 20;

/// A network module (Nemesis netmod). See the module comment for the map to
/// the spec.
#[doc(alias = "MPID_nem_net_module_init")]
#[doc(alias = "net_module_init")]
pub trait NetModule: Send + Sync {
    /// The module's name as `++netmod` spells it.
    fn name(&self) -> &'static str;

    /// This process's business card: what a peer needs to reach it
    /// (`get_business_card`).
    #[doc(alias = "MPID_nem_net_module_get_business_card")]
    #[doc(alias = "get_business_card")]
    fn business_card(&self) -> String;

    /// Connects the VC to `peer`, known only by its card, now (the spec's
    /// `connect_to_root`, for a process outside the initial set, and our
    /// eager connection at start-up).
    #[doc(alias = "MPID_nem_net_module_connect_to_root")]
    fn connect_to_root(&self, peer: usize, card: &str) -> Result<(), NetError>;

    /// Prepares the VC to `peer` from its business card (`vc_init`). A
    /// module may connect here or at first use. On a VC that terminated,
    /// both sides' `vc_init` make it usable again (the spec: "the VC may
    /// be used for communication again later"); on a live one it fails.
    #[doc(alias = "MPID_nem_net_module_vc_init")]
    fn vc_init(&self, peer: usize, card: &str) -> Result<(), NetError>;

    /// The peers this process has a VC with, either way: those it sent to
    /// and those whose frames it received or whose connection it accepted
    /// (a VC is set up on first use, by either end). The layer above ends
    /// the job over exactly these (its `Bye` exchange).
    fn connected_peers(&self) -> Vec<usize>;

    /// Forgets the VC to `peer` (`vc_destroy`); it must be terminated.
    #[doc(alias = "MPID_nem_net_module_vc_destroy")]
    fn vc_destroy(&self, peer: usize);

    /// Closes the VC to `peer` once its pending sends have drained, without
    /// blocking (`vc_terminate`); [`Upcalls::vc_terminated`] follows.
    #[doc(alias = "MPID_nem_net_module_vc_terminate")]
    fn vc_terminate(&self, peer: usize);

    /// True if frames sent on one VC arrive in the order sent
    /// (`get_ordering`).
    #[doc(alias = "MPID_nem_net_module_get_ordering")]
    #[doc(alias = "get_ordering")]
    fn ordering(&self) -> bool;

    /// Sends a contiguous frame: `header` then `data` (`iSendContig`). `req`
    /// completes (see [`SendRequest::data_sent`]) once the data is sent, at
    /// once if it all went now.
    #[doc(alias = "iSendContig")]
    fn isend_contig(
        &self,
        peer: usize,
        req: SendRequest,
        header: FrameHeader,
        data: SendData,
    ) -> Result<(), NetError>;

    /// Sends a contiguous frame and makes a request only if it could not go
    /// at once (`iStartContigMsg`): `None` means sent.
    #[doc(alias = "iStartContigMsg")]
    fn istart_contig(
        &self,
        peer: usize,
        header: FrameHeader,
        data: SendData,
    ) -> Result<Option<SendRequest>, NetError>;

    /// Sends a frame whose body is the concatenation of `iov`
    /// (`SendNoncontig`); `header.len` must be their total length. The
    /// caller's memory is free again when this returns: a module keeps a
    /// copy of whatever it has not sent.
    #[doc(alias = "SendNoncontig")]
    #[doc(alias = "MPIDI_CH3U_Request_load_send_iov")]
    #[doc(alias = "MPID_Segment_pack")]
    fn send_noncontig(
        &self,
        peer: usize,
        req: SendRequest,
        header: FrameHeader,
        iov: &[&[u8]],
    ) -> Result<(), NetError> {
        check_iov_len(self.name(), peer, &header, iov)?;
        // Packed once: the module then sends one contiguous body. A module
        // that can gather does better ([`NetModule::gathers`]).
        self.isend_contig(peer, req, header, SendData::Bytes(iov.concat()))
    }

    /// True if [`NetModule::send_noncontig`] writes straight from the
    /// caller's memory and copies only what the network does not take at
    /// once (tcp's `writev`): a copying send (`sync_send`) of a large
    /// message then costs no copy of its own.
    fn gathers(&self) -> bool {
        false
    }

    /// True if this module can copy straight between this process's memory
    /// and process `peer`'s ([`NetModule::write_peer_memory`],
    /// [`NetModule::read_peer_memory`]): shm where the system lets a
    /// process read and write another's (`process_vm_readv`/`writev`).
    fn copies_peer_memory(&self, _peer: usize) -> bool {
        false
    }

    /// Copies `len` bytes at `src` to address `addr` of process `peer`, in
    /// one copy. Fails naming the peer and the cause (a module that cannot:
    /// see [`NetModule::copies_peer_memory`]).
    ///
    /// # Safety
    /// `src` must be valid for reads of `len` bytes while the copy runs.
    unsafe fn write_peer_memory(
        &self,
        peer: usize,
        _addr: u64,
        _src: *const u8,
        _len: usize,
    ) -> Result<(), NetError> {
        Err(NetError::peer(
            peer,
            format!("{}: no copies into another process's memory", self.name()),
        ))
    }

    /// Copies `len` bytes at address `addr` of process `peer` to `dst`, in
    /// one copy; all of them, or an error naming the peer and the cause.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len` bytes, and nothing may read
    /// them while the copy runs.
    unsafe fn read_peer_memory(
        &self,
        peer: usize,
        _addr: u64,
        _dst: *mut u8,
        _len: usize,
    ) -> Result<(), NetError> {
        Err(NetError::peer(
            peer,
            format!("{}: no copies from another process's memory", self.name()),
        ))
    }

    /// Makes progress on sends and receives (`net_module_poll`), waiting up
    /// to `timeout` for something to happen (`None`: wait until something
    /// does or [`NetModule::wake`] is called). Returns true if anything
    /// moved.
    #[doc(alias = "MPID_nem_net_module_poll")]
    #[doc(alias = "net_module_poll")]
    fn poll(&self, dir: PollDir, timeout: Option<Duration>) -> Result<bool, NetError>;

    /// Receives what has arrived, without waiting and from any thread (an
    /// idle PE polls this while it spins, so that a message is taken off
    /// the wire by the thread that wants it, with no hand-off). A VC another
    /// thread is reading is skipped. Returns true if anything arrived.
    fn try_progress(&self) -> bool;

    /// How long the progress thread leaves this module to the PEs that poll
    /// it ([`NetModule::try_progress`]) before it looks again whether they
    /// still do: the longest an arrival waits while every PE stopped
    /// polling to run handlers. 1 ms unless a module says otherwise.
    fn watch_check(&self) -> Duration {
        Duration::from_millis(1)
    }

    /// How often the progress thread must call [`NetModule::check_peers`]
    /// (it then waits in [`NetModule::poll`] at most this long); `None`
    /// (the default) if the module learns of a lost peer by itself, as a
    /// socket does from its peer's kernel. Beyond the spec.
    fn peer_check_period(&self) -> Option<Duration> {
        None
    }

    /// Looks whether the peers this module has VCs with still run, and
    /// fails the VC (`Upcalls::vc_failed`) of one that is gone without
    /// having ended (killed, crashed): a module whose medium does not tell
    /// (shared memory) would otherwise wait for it forever under a
    /// launcher that does not end the job when one process dies (Slurm's
    /// `srun` without `--kill-on-bad-exit`). Called by the progress
    /// thread, about every [`NetModule::peer_check_period`]; a cost of the
    /// peers the process talks to, never of the job's size. Beyond the
    /// spec.
    fn check_peers(&self) {}

    /// Bytes this module has read from the network so far (any count that
    /// grows with them will do: the progress thread compares two readings
    /// to tell a stream from a trickle). 0 if the module does not count.
    fn bytes_received(&self) -> u64 {
        0
    }

    /// Queues a frame for `peer` to be written by a later
    /// [`NetModule::flush_all`] (or at once if the queue already holds a
    /// batch), so that a burst of small messages costs a few system calls,
    /// not one each. Beyond the spec, which writes at once: the layer above
    /// flushes whenever its PE next looks for work. A module whose writes
    /// cost no system call (shm) may write at once. Returns true if bytes
    /// wait for a flush.
    fn post_contig(
        &self,
        peer: usize,
        header: FrameHeader,
        data: SendData,
    ) -> Result<bool, NetError>;

    /// Writes what is queued on every VC, as far as the network takes it.
    /// Returns true if anything was written.
    fn flush_all(&self) -> bool;

    /// True if some VC has bytes queued (posted or left over).
    fn has_queued(&self) -> bool;

    /// True if no VC is being connected: every VC this process made is
    /// known to the peer at its other end (a module that connects on first
    /// use says false while a connection is in its handshake, frames
    /// waiting for it). The layer above waits for this, and for nothing
    /// queued, before it counts itself done at the end of a job.
    fn settled(&self) -> bool {
        true
    }

    /// Bytes accepted for `peer` and not yet sent: what a sender throttles
    /// on (flow control).
    fn backlog(&self, peer: usize) -> usize;

    /// The [`NetModule::backlog`] to one peer above which a sending PE
    /// waits, and about half of which it waits for (the layer above's
    /// flow control). [`DEFAULT_SEND_WINDOW`] unless the module's sends
    /// keep their copies longer (the MPI module's, until the peer has
    /// taken them): a window of copies larger than the caches makes every
    /// copy a copy to memory.
    fn send_window(&self) -> usize {
        DEFAULT_SEND_WINDOW
    }

    /// The layer above has room again ([`Upcalls::room`] said no before):
    /// receive what waits.
    fn resume_receiving(&self);

    /// Makes a [`NetModule::poll`] waiting on another thread return.
    fn wake(&self);

    /// Closes everything (`finalize`).
    #[doc(alias = "MPID_nem_net_module_finalize")]
    fn finalize(&self);

    /// Closes everything before the process is checkpointed
    /// (`ckpt_shutdown`): as in MPICH's tcp module, this is `finalize`,
    /// and a restarted process makes its modules anew (`net_module_init`)
    /// and connects its VCs again.
    #[doc(alias = "MPID_nem_net_module_ckpt_shutdown")]
    fn ckpt_shutdown(&self) {
        self.finalize();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// What reached which upcall.
    #[derive(Default)]
    struct Seen(Mutex<Vec<String>>);

    impl Upcalls for Seen {
        fn frame(&self, _: usize, header: FrameHeader, body: Vec<u8>) {
            self.0
                .lock()
                .unwrap()
                .push(format!("frame {:?} {}", header.kind, body.len()));
        }
        fn message(&self, _: usize, header: FrameHeader, msg: Message) {
            self.0
                .lock()
                .unwrap()
                .push(format!("message {:?} {}", header.kind, msg.len()));
        }
        fn vc_terminated(&self, _: usize) {}
        fn vc_failed(&self, _: usize, _: String) {}
    }

    /// Only a `Message` frame goes up as a message: an `LmtData` frame
    /// that reached the layer above (a peer sent one where no transfer
    /// engine takes it) goes up as a frame of its kind, which it refuses.
    #[test]
    fn only_a_message_frame_arrives_as_a_message() {
        let seen = Seen::default();
        let header = |kind| FrameHeader {
            kind,
            flags: 0,
            len: 32,
            src: 0,
            tag: 0,
        };
        for kind in [FrameKind::Message, FrameKind::LmtData] {
            seen.arrived(0, header(kind), FrameBody::Message(Message::alloc(32)));
        }
        assert_eq!(
            *seen.0.lock().unwrap(),
            ["message Message 32", "frame LmtData 32"]
        );
    }
}
