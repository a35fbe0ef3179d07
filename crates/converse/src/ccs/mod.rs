//! The Converse Client-Server interface (CCS), server side: programs
//! register handlers by name; clients outside the job call them over TCP
//! (`ccs-protocol.md`) and get their replies.
//!
//! # How a request travels
//!
//! 1. The server thread (`server`, in the process of PE 0) reads a request
//!    and checks it: the handler name is known, the destination PEs exist,
//!    a broadcast or multicast has a merge function. A request that fails
//!    is answered at once with an empty reply and a diagnostic on stderr.
//! 2. It gives the first destination PE a `CcsRequest` carrying the
//!    destination list, straight into its inbox (which takes messages from
//!    any thread) when that PE lives in the server's process; else it
//!    gives PE 0 a `CcsDispatch`, which sends the `CcsRequest` on.
//! 3. A PE that gets a `CcsRequest` for a list passes the rest of the list
//!    on down a 4-ary tree over list positions (the rest split in up to
//!    four contiguous parts, each sent to its first PE with the part), so
//!    no PE sends more than four copies and each copy carries only its
//!    subtree's PEs. Then the request becomes an ordinary message of the
//!    registered handler, with the request data as payload, run at once
//!    with this PE's request context set ([`is_remote_request`],
//!    [`caller_id`], [`send_reply`], [`delay_reply`], [`no_reply`]).
//! 4. The reply, tagged with the PE's position in the list, goes back as
//!    a `CcsReply` to PE 0's process (directly to the server when the PE
//!    lives there), which writes it to the client: at once for one PE,
//!    merged in list order once every PE answered for broadcast and
//!    multicast. A request for one PE of the server's own process came
//!    with its connection, and that PE writes its reply to the client
//!    itself (see `server`'s concurrency protocol). A handler that returns without replying (or delaying)
//!    yields an empty reply.
//!
//! # Concurrency protocol
//!
//! The handler-name table (`CcsState`) is per job, shared by the
//! process's PEs and the server thread behind a mutex. A request context
//! lives on its PE's thread only (a thread-local set for the duration of
//! the handler). Replies reach the server through its queue and waker
//! (`server::ServerHandle`), from any thread, unless they write themselves
//! to a connection handed over with their request.
#[cfg(feature = "ccs")]
mod auth;
#[cfg(feature = "ccs")]
mod kill_list;
pub mod merge;
pub(crate) mod perf;
#[cfg(feature = "ccs")]
// The server: real with the `ccs` feature (on by default), else a module
// whose handle cannot exist and whose `start` says why.
#[cfg(feature = "ccs")]
pub(crate) mod server;
#[cfg(not(feature = "ccs"))]
#[path = "no_server.rs"]
pub(crate) mod server;
mod server_error;

use crate::sync::lock;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::msg::message::{FLAG_NO_QD, Message};
use crate::msg::system::{self, Kind, Reader};
use crate::rt::pe::{self, Pe};

pub use merge::MergeFn;
pub use server_error::ServerError;

/// What a handler answers to a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// These bytes (maybe none).
    Data(Vec<u8>),
    /// Close the connection without a reply (`CcsNoReply`).
    Nothing,
}

/// A registered CCS handler.
#[derive(Clone)]
pub(crate) struct Entry {
    /// Its Converse handler index.
    pub index: usize,
    /// How broadcast and multicast replies are combined.
    pub merge: Option<MergeFn>,
}

/// The CCS state of one job (in each process).
#[derive(Default)]
pub(crate) struct CcsState {
    /// Handler names, as registered by this process's PEs.
    pub names: Mutex<HashMap<String, Entry>>,
    /// The server, in the process of PE 0 when the job runs one.
    pub server: OnceLock<Arc<server::ServerHandle>>,
    /// This process's PEs whose start function has returned (their
    /// handlers are registered): the server holds a request for a name
    /// not yet registered until all have (see `server`'s "Start-up").
    pub pes_started: AtomicUsize,
}

/// The job's CCS state (made on first use; see `Job::subsystem`).
pub(crate) fn state(job: &crate::rt::job::Job) -> Arc<CcsState> {
    job.subsystem::<CcsState>()
}

impl CcsState {
    /// The handler registered as `name`.
    pub fn entry(&self, name: &str) -> Option<Entry> {
        lock(&self.names).get(name).cloned()
    }
}

/// A PE of this process has run its start function: the handlers it
/// registers there are known (called by start-up on each PE).
pub(crate) fn pe_started(job: &crate::rt::job::Job) {
    state(job).pes_started.fetch_add(1, Ordering::Release);
}

/// Which answer a PE owes: request `token`'s, for the PE at `position` of
/// its destination list (the server merges replies in list order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ticket {
    pub token: u64,
    pub position: u64,
}

/// The request a PE's running handler was called for.
#[derive(Clone, Copy)]
struct Context {
    ticket: Ticket,
    caller: ([u8; 4], u16),
    /// A reply was sent, delayed or refused: nothing more is owed.
    answered: bool,
}

thread_local! {
    static CONTEXT: RefCell<Option<Context>> = const { RefCell::new(None) };
}

/// Names are shorter than 32 bytes (they travel in a 32-byte field with
/// their terminating NUL).
fn check_name(name: &str) {
    if name.len() >= ccs_wire::NAME_LEN || name.contains('\0') {
        crate::proc::exit::abort(&format!(
            "CCS handler name {name:?} is too long or holds a NUL: names are shorter than {} bytes",
            ccs_wire::NAME_LEN
        ));
    }
}

/// Registers `f` as a Converse handler (as [`register_handler`] does) and
/// under `name` for CCS clients (`CcsRegisterHandler`). Call it on every
/// PE, like any handler registration. Returns the handler index.
///
/// [`register_handler`]: crate::register_handler
#[doc(alias = "CcsRegisterHandler")]
pub fn register_handler<F: Fn(Message) + 'static>(name: &str, f: F) -> usize {
    check_name(name);
    let index = crate::register_handler(f);
    use_handler(name, index);
    index
}

/// Makes the existing Converse handler `index` callable by CCS clients as
/// `name` (`CcsUseHandler`).
#[doc(alias = "CcsUseHandler")]
pub fn use_handler(name: &str, index: usize) {
    check_name(name);
    pe::with(|pe| {
        let state = state(&pe.job);
        let mut names = lock(&state.names);
        let merge = names.get(name).and_then(|e| e.merge.clone());
        names.insert(name.to_string(), Entry { index, merge });
    });
}

/// Sets how the replies of a broadcast or multicast request to `name` are
/// combined into the one the client gets (`CcsSetMergeFn`); see
/// [`merge`](mod@merge) for the provided ones. The handler must be
/// registered first.
#[doc(alias = "CcsSetMergeFn")]
pub fn set_merge_fn(name: &str, merge: MergeFn) {
    let state = pe::with(|pe| state(&pe.job));
    match lock(&state.names).get_mut(name) {
        Some(entry) => entry.merge = Some(merge),
        None => crate::proc::exit::abort(&format!(
            "set_merge_fn for CCS handler {name:?}, which is not registered"
        )),
    }
}

/// The address the job's CCS server listens on (`++server`), on PEs of
/// the process that runs it; `None` elsewhere or without a server.
pub fn server_address() -> Option<std::net::SocketAddr> {
    pe::with(|pe| crate::ccs::state(&pe.job).server.get().map(|s| s.addr()))
}

/// True if this build has CCS's server (the `ccs` feature, on by default;
/// `CcsEnabled`). It does not say whether the job runs a server
/// (`++server`).
#[doc(alias = "CcsEnabled")]
pub fn enabled() -> bool {
    cfg!(feature = "ccs")
}

/// True while a handler runs for a CCS request (`CcsIsRemoteRequest`),
/// false for an ordinary message.
#[doc(alias = "CcsIsRemoteRequest")]
pub fn is_remote_request() -> bool {
    CONTEXT.with(|c| c.borrow().is_some())
}

/// True in a CCS handler whose request has not been answered yet (by
/// [`send_reply`], [`no_reply`] or [`delay_reply`]): a reply may be sent.
/// Charm++'s `CcsSendReplyNoError` is `if reply_pending() { send_reply(..) }`.
#[doc(alias = "CcsSendReplyNoError")]
pub fn reply_pending() -> bool {
    CONTEXT.with(|c| c.borrow().is_some_and(|ctx| !ctx.answered))
}

/// The IPv4 address and TCP port of the client whose request is being
/// handled (`CcsCallerId`); `None` outside a CCS handler.
#[doc(alias = "CcsCallerId")]
pub fn caller_id() -> Option<([u8; 4], u16)> {
    CONTEXT.with(|c| c.borrow().map(|ctx| ctx.caller))
}

/// Sends `reply` to the client of the request being handled
/// (`CcsSendReply`). For a broadcast or multicast request every PE's
/// handler replies and the replies are merged.
///
/// # Panics
/// Outside a CCS handler, or if this request was already answered.
#[doc(alias = "CcsSendReply")]
pub fn send_reply(reply: &[u8]) {
    let ticket = take_context("send_reply");
    answer(ticket, Reply::Data(reply.to_vec()));
}

/// Answers the request being handled with no reply at all: the client's
/// connection is closed (`CcsNoReply`).
#[doc(alias = "CcsNoReply")]
pub fn no_reply() {
    let ticket = take_context("no_reply");
    answer(ticket, Reply::Nothing);
}

/// A reply owed to a client, to be sent later from any PE
/// ([`delay_reply`]; the manual's `CcsDelayedReply`).
#[doc(alias = "CcsDelayedReply")]
#[derive(Debug)]
#[must_use = "a delayed reply that is never sent leaves its client waiting until the server's reply timeout"]
pub struct DelayedReply {
    ticket: Ticket,
}

impl DelayedReply {
    /// Sends the reply (`CcsSendDelayedReply`); from any PE, any time.
    #[doc(alias = "CcsSendDelayedReply")]
    pub fn send(self, reply: &[u8]) {
        answer(self.ticket, Reply::Data(reply.to_vec()));
    }

    /// Closes the client's connection without a reply.
    pub fn no_reply(self) {
        answer(self.ticket, Reply::Nothing);
    }
}

/// Keeps the request being handled open after its handler returns
/// (`CcsDelayReply`): the reply is sent later with [`DelayedReply::send`].
///
/// # Panics
/// Outside a CCS handler, or if this request was already answered.
#[doc(alias = "CcsDelayReply")]
pub fn delay_reply() -> DelayedReply {
    DelayedReply {
        ticket: take_context("delay_reply"),
    }
}

/// Marks the running request answered and returns its ticket.
fn take_context(what: &str) -> Ticket {
    CONTEXT.with(|c| match c.borrow_mut().as_mut() {
        Some(ctx) if !ctx.answered => {
            ctx.answered = true;
            ctx.ticket
        }
        Some(_) => panic!("{what}: this CCS request was already answered"),
        None => panic!("{what} called outside a CCS handler"),
    })
}

/// Gets `reply` to the server, from the calling PE.
fn answer(ticket: Ticket, reply: Reply) {
    pe::with(|pe| answer_from(pe, ticket, reply))
}

fn answer_from(pe: &Pe, ticket: Ticket, reply: Reply) {
    if let Some(server) = crate::ccs::state(&pe.job).server.get() {
        server.push_reply(ticket, reply);
        return;
    }
    let (kind, bytes) = match reply {
        Reply::Data(d) => (0, d),
        Reply::Nothing => (1, Vec::new()),
    };
    pe.push_to_pe(
        0,
        system::message(
            Kind::CcsReply,
            &[ticket.token, ticket.position, kind],
            &bytes,
        ),
    );
}

/// A runtime message of CCS reached the front of `pe`'s scheduler.
/// Registers CCS's messages in `pe`'s dispatch table.
pub(crate) fn init_pe(pe: &Pe) {
    for kind in [
        Kind::CcsDispatch,
        Kind::CcsRequest,
        Kind::CcsReply,
        Kind::CcsPerf,
    ] {
        pe.dispatch.on(kind, on_message);
    }
}

pub(crate) fn on_message(pe: &Pe, kind: Kind, msg: Message) {
    match kind {
        Kind::CcsDispatch => on_dispatch(pe, &msg),
        Kind::CcsRequest => on_request(pe, &msg),
        Kind::CcsPerf => perf::on_message(pe, &msg),
        Kind::CcsReply => {
            let mut r = Reader::new(&msg, "CCS reply");
            let ticket = Ticket {
                token: r.word(),
                position: r.word(),
            };
            let reply = match r.word() {
                0 => Reply::Data(r.rest().to_vec()),
                1 => Reply::Nothing,
                k => r.malformed(&format!("reply kind {k}")),
            };
            match crate::ccs::state(&pe.job).server.get() {
                Some(server) => server.push_reply(ticket, reply),
                None => r.malformed("a reply reached a process without the CCS server"),
            }
        }
        _ => unreachable!("not a CCS kind: {kind:?}"),
    }
}

/// The words of a request: token, caller address, caller port, name
/// length; then the list position of its first destination PE, the
/// destination count and PEs; then the name and the data.
#[cfg(feature = "ccs")]
fn request_words(token: u64, caller: ([u8; 4], u16), name: &str) -> [u64; 4] {
    [
        token,
        u32::from_be_bytes(caller.0) as u64,
        caller.1 as u64,
        name.len() as u64,
    ]
}

/// A request (`kind`: dispatch or request) for `targets`, the first at
/// `position` of the request's list.
fn request_message(
    kind: Kind,
    words: &[u64],
    position: u64,
    targets: &[usize],
    rest: &[u8],
) -> Message {
    let mut all = words.to_vec();
    all.push(position);
    all.push(targets.len() as u64);
    all.extend(targets.iter().map(|&t| t as u64));
    system::message(kind, &all, rest)
}

/// The message the server gives a PE of its process for a request to
/// `targets`: the request itself to the first target when `direct` (it
/// lives in the server's process), else a dispatch to PE 0, which sends
/// the request on.
#[cfg(feature = "ccs")]
pub(crate) fn server_message(
    direct: bool,
    token: u64,
    caller: ([u8; 4], u16),
    targets: &[u32],
    name: &str,
    data: &[u8],
) -> Message {
    let targets: Vec<usize> = targets.iter().map(|&t| t as usize).collect();
    let mut bytes = Vec::with_capacity(name.len() + data.len());
    bytes.extend_from_slice(name.as_bytes());
    bytes.extend_from_slice(data);
    let kind = if direct {
        Kind::CcsRequest
    } else {
        Kind::CcsDispatch
    };
    request_message(
        kind,
        &request_words(token, caller, name),
        0,
        &targets,
        &bytes,
    )
}

/// A request's fields as a message carries them.
struct Carried<'a> {
    words: [u64; 4],
    /// Where `targets[0]` is in the request's whole list.
    position: u64,
    targets: Vec<usize>,
    /// Name, then data.
    rest: &'a [u8],
}

fn read_request<'a>(pe: &Pe, msg: &'a Message, what: &'static str) -> (Carried<'a>, Reader<'a>) {
    let mut r = Reader::new(msg, what);
    let words = [r.word(), r.word(), r.word(), r.word()];
    let position = r.word();
    let pes = pe.job.topo.num_pes();
    let count = r.index(pes + 1);
    let targets: Vec<usize> = (0..count).map(|_| r.index(pes)).collect();
    if targets.is_empty() {
        r.malformed("it names no destination PE");
    }
    let rest = r.rest();
    (
        Carried {
            words,
            position,
            targets,
            rest,
        },
        r,
    )
}

/// On PE 0: sends the request to the first of its PEs, which passes it on.
fn on_dispatch(pe: &Pe, msg: &Message) {
    let (c, _) = read_request(pe, msg, "CCS dispatch");
    let request = request_message(Kind::CcsRequest, &c.words, c.position, &c.targets, c.rest);
    if c.targets[0] == pe.pe {
        on_request(pe, &request);
    } else {
        pe.push_to_pe(c.targets[0], request);
    }
}

/// Children of the tree over a destination list whose first PE is the
/// receiver: the rest split in up to four contiguous parts.
fn subtrees(targets: &[usize]) -> impl Iterator<Item = &[usize]> {
    let rest = &targets[1..];
    rest.chunks(rest.len().div_ceil(4).max(1))
}

/// On a destination PE: passes the request down its subtree, then runs the
/// handler.
fn on_request(pe: &Pe, msg: &Message) {
    let (c, r) = read_request(pe, msg, "CCS request");
    let mut position = c.position + 1;
    for part in subtrees(&c.targets) {
        pe.push_to_pe(
            part[0],
            request_message(Kind::CcsRequest, &c.words, position, part, c.rest),
        );
        position += part.len() as u64;
    }
    let [token, ip, port, name_len] = c.words;
    let ticket = Ticket {
        token,
        position: c.position,
    };
    let ip = (ip as u32).to_be_bytes();
    let port = port as u16;
    if name_len >= ccs_wire::NAME_LEN as u64 || c.rest.len() < name_len as usize {
        r.malformed("its handler name is too long or cut short");
    }
    let rest = c.rest;
    let name_len = name_len as usize;
    let (name, data) = rest.split_at(name_len);
    let name = String::from_utf8_lossy(name);
    let Some(entry) = crate::ccs::state(&pe.job).entry(&name) else {
        crate::proc::io::error(format_args!(
            "converse: ccs: PE {}: no handler {name:?} here (register it on every PE); answered empty\n",
            pe.pe
        ));
        answer_from(pe, ticket, Reply::Data(Vec::new()));
        return;
    };
    pe.trace.ccs_request(&name);
    let mut user = Message::from_payload(entry.index, data);
    // From outside the job: quiescence detection never counted it created.
    user.header_mut().flags = FLAG_NO_QD;
    let outer = CONTEXT.with(|c| {
        c.borrow_mut().replace(Context {
            ticket,
            caller: (ip, port),
            answered: false,
        })
    });
    // The context is restored even if the handler unwinds (an exit).
    struct Restore(Option<Context>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let ctx = CONTEXT.with(|c| std::mem::replace(&mut *c.borrow_mut(), self.0.take()));
            if let Some(ctx) = ctx
                && !ctx.answered
                && !std::thread::panicking()
            {
                // Returned without replying: an empty reply.
                answer(ctx.ticket, Reply::Data(Vec::new()));
            }
        }
    }
    let _restore = Restore(outer);
    pe.deliver(user);
    // The next request comes at a client's pace: park soon after.
    pe.served_outside();
}

#[cfg(test)]
mod tests {
    use super::subtrees;

    /// Walks the tree from the list's first PE; returns (PE, depth) in
    /// visiting order.
    fn walk(list: &[usize], depth: usize, out: &mut Vec<(usize, usize)>) {
        out.push((list[0], depth));
        let parts: Vec<&[usize]> = subtrees(list).collect();
        assert!(parts.len() <= 4, "at most four children");
        for part in parts {
            walk(part, depth + 1, out);
        }
    }

    #[test]
    fn the_tree_reaches_every_listed_pe_once_in_log4_depth() {
        for n in 1..200 {
            let list: Vec<usize> = (0..n).rev().collect();
            let mut seen = Vec::new();
            walk(&list, 0, &mut seen);
            let mut pes: Vec<usize> = seen.iter().map(|s| s.0).collect();
            pes.sort();
            assert_eq!(pes, (0..n).collect::<Vec<_>>(), "n = {n}");
            let depth = seen.iter().map(|s| s.1).max().unwrap();
            // Each level divides the rest by four: ceil(log4(n)) + 1 at most.
            let mut bound = 0;
            while 4usize.pow(bound) < n {
                bound += 1;
            }
            assert!(depth <= bound as usize + 1, "n = {n}: depth {depth}");
        }
    }
}
