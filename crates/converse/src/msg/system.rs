//! Runtime-internal messages: their kinds (one central numbering, the wire
//! registry), how they are built, a reader for their payloads that never
//! trusts the bytes, and the dispatch table ([`Dispatch`]) through which
//! the delivery path reaches their handlers without naming the subsystems
//! above it (DESIGN.md §3, "open dispatch").
//!
//! A system message has [`FLAG_SYSTEM`] set and its header's `handler` field
//! holds a [`Kind`] instead of a handler-table index, so the runtime's own
//! traffic never takes a slot of the user's handler table (whose indices the
//! manual promises are the same on every PE). Payloads are little-endian
//! words. A payload that does not parse aborts the job naming the PE that
//! sent it: within one process that is a runtime bug, across processes a
//! corrupted or hostile peer, and neither may go on silently.
use std::cell::Cell;

use crate::msg::message::{FLAG_NO_QD, FLAG_REDUCE, FLAG_SYSTEM, Message};

/// What a system message is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Kind {
    /// A group's definition, broadcast by its creator (`cmi::group`).
    GroupDef = 1,
    /// A request to PE 0 for a dynamic reduction ID (`cmi::reduce`).
    DynamicIdRequest = 2,
    /// A request to PE 0 to detect quiescence (`ccd::quiescence`).
    QdStart = 3,
    /// A wave of quiescence detection going down the tree.
    QdRequest = 4,
    /// A subtree's counts coming back up.
    QdReply = 5,
    /// The answer to a request: run the callback.
    QdDone = 6,
    /// "Does this group exist?", to the group's creator (`cmi::group`).
    GroupQuery = 7,
    /// A CCS request for PE 0 to send on to its PEs (`ccs`).
    CcsDispatch = 8,
    /// A CCS request for the receiving PE's handler.
    CcsRequest = 9,
    /// A CCS reply, for the process of the CCS server.
    CcsReply = 10,
    /// `perf_monitor`: start sampling, or a PE's sample (`ccs::perf`).
    CcsPerf = 11,
    /// A one-sided put for the receiving PE's process (`cmi::rdma`).
    RdmaPut = 12,
    /// A one-sided get from the receiving PE's process.
    RdmaGet = 13,
    /// The answer to a one-sided operation, for the PE that started it.
    RdmaDone = 14,
    /// A sender asks the receiving PE for a persistent channel
    /// (`cmi::persistent`).
    PersistentOpen = 15,
    /// The channel's number, for the sender.
    PersistentOpened = 16,
    /// The sender ends a channel to the receiving PE.
    PersistentClose = 17,
    /// A migratable thread, packed, to go on on the receiving PE
    /// (`cth::migrate`).
    ThreadMigrate = 18,
    /// A request to node 0 for a dynamic node reduction ID
    /// (`cmi::node_reduce`).
    DynamicNodeIdRequest = 19,
    /// A typed reduction's result on its root, for the function the root
    /// gave (`typed::Reduction::then_run`; never leaves its PE).
    ReductionThen = 20,
}

/// Every kind's name by its number, from 1 (for the trace, which shows a
/// runtime message by its kind).
pub(crate) fn kind_names() -> Vec<(u32, String)> {
    (1..=KINDS as u32)
        .filter_map(|raw| Some((raw, format!("{:?}", Kind::from_raw(raw)?))))
        .collect()
}

/// Number of kinds (the highest `Kind` value).
const KINDS: usize = 20;

impl Kind {
    pub fn from_raw(raw: u32) -> Option<Kind> {
        Some(match raw {
            1 => Kind::GroupDef,
            2 => Kind::DynamicIdRequest,
            3 => Kind::QdStart,
            4 => Kind::QdRequest,
            5 => Kind::QdReply,
            6 => Kind::QdDone,
            7 => Kind::GroupQuery,
            8 => Kind::CcsDispatch,
            9 => Kind::CcsRequest,
            10 => Kind::CcsReply,
            11 => Kind::CcsPerf,
            12 => Kind::RdmaPut,
            13 => Kind::RdmaGet,
            14 => Kind::RdmaDone,
            15 => Kind::PersistentOpen,
            16 => Kind::PersistentOpened,
            17 => Kind::PersistentClose,
            18 => Kind::ThreadMigrate,
            19 => Kind::DynamicNodeIdRequest,
            20 => Kind::ReductionThen,
            _ => return None,
        })
    }

    /// Quiescence detection's own messages are not counted by it.
    fn counted(self) -> bool {
        // CCS traffic comes from outside the job: it never keeps it busy.
        !matches!(
            self,
            Kind::QdStart
                | Kind::QdRequest
                | Kind::QdReply
                | Kind::QdDone
                | Kind::CcsDispatch
                | Kind::CcsRequest
                | Kind::CcsReply
                | Kind::CcsPerf
        )
    }
}

/// A system message of `kind` carrying `words` then `bytes`.
pub(crate) fn message(kind: Kind, words: &[u64], bytes: &[u8]) -> Message {
    let mut payload = Vec::with_capacity(words.len() * 8 + bytes.len());
    for w in words {
        payload.extend_from_slice(&w.to_le_bytes());
    }
    payload.extend_from_slice(bytes);
    let mut msg = Message::from_payload(kind as usize, &payload);
    let header = msg.header_mut();
    header.flags = FLAG_SYSTEM | if kind.counted() { 0 } else { FLAG_NO_QD };
    msg
}

/// Runs a runtime message of some kind on the receiving PE (`C`).
pub(crate) type OnDelivery<C> = fn(&C, Kind, Message);
/// Routes a message flagged for routing (`ARRIVAL_FLAGS`) as its PE takes
/// it from its inbox; returns the copy to deliver now, if there is one.
pub(crate) type OnArrival<C> = fn(&C, Message) -> Option<Message>;
/// Takes a reduction contribution (`FLAG_REDUCE`) at the front of the
/// scheduler.
pub(crate) type OnContribution<C> = fn(&C, Message);

/// The handlers of runtime messages on one PE (`C`: the PE): filled by the
/// subsystems when the PE starts (each registers its own kinds), read by
/// the delivery path, which so names none of them. A kind's numbering
/// stays central ([`Kind`]: both ends of a connection must agree on it);
/// its handler does not.
///
/// Touched only by its PE's thread (`Cell`s). A message whose kind no
/// subsystem registered aborts the job naming the kind and the sender: from
/// another process that is a corrupted or hostile peer, within one a
/// runtime bug.
pub(crate) struct Dispatch<C> {
    kinds: [Cell<Option<OnDelivery<C>>>; KINDS],
    arrival: Cell<Option<OnArrival<C>>>,
    contribution: Cell<Option<OnContribution<C>>>,
}

impl<C> Dispatch<C> {
    pub fn new() -> Dispatch<C> {
        Dispatch {
            kinds: std::array::from_fn(|_| Cell::new(None)),
            arrival: Cell::new(None),
            contribution: Cell::new(None),
        }
    }

    /// Runs `f` for every runtime message of `kind`.
    pub fn on(&self, kind: Kind, f: OnDelivery<C>) {
        self.kinds[kind as usize - 1].set(Some(f));
    }

    /// Routes messages flagged for routing through `f`.
    pub fn on_arrival(&self, f: OnArrival<C>) {
        self.arrival.set(Some(f));
    }

    /// Gives reduction contributions to `f`.
    pub fn on_contribution(&self, f: OnContribution<C>) {
        self.contribution.set(Some(f));
    }

    /// Routes `msg`, just taken from `pe`'s inbox (see [`OnArrival`]).
    #[inline]
    pub fn arrived(&self, pe: &C, msg: Message) -> Option<Message> {
        match self.arrival.get() {
            Some(route) => route(pe, msg),
            None => Reader::new(&msg, "routed message")
                .malformed("no subsystem routes messages on this PE"),
        }
    }

    /// Runs the runtime message or reduction contribution `msg` on `pe`.
    pub fn deliver(&self, pe: &C, msg: Message) {
        if msg.header().flags & FLAG_REDUCE != 0 {
            match self.contribution.get() {
                Some(f) => return f(pe, msg),
                None => Reader::new(&msg, "reduction contribution")
                    .malformed("no subsystem takes reductions on this PE"),
            }
        }
        let raw = msg.header().handler;
        let handler =
            Kind::from_raw(raw).and_then(|k| Some((k, self.kinds[k as usize - 1].get()?)));
        match handler {
            Some((kind, f)) => f(pe, kind, msg),
            None => Reader::new(&msg, "runtime message")
                .malformed(&format!("unknown runtime message kind {raw}")),
        }
    }
}

/// Reads a system message's payload front to back.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    /// What is being read and from whom, for the error message.
    what: &'static str,
    src: usize,
}

impl<'a> Reader<'a> {
    pub fn new(msg: &'a Message, what: &'static str) -> Reader<'a> {
        Reader {
            bytes: msg.payload(),
            at: 0,
            what,
            src: msg.src_pe(),
        }
    }

    /// The next word; aborts if the payload ends first.
    pub fn word(&mut self) -> u64 {
        match self.bytes.get(self.at..self.at + 8) {
            Some(b) => {
                self.at += 8;
                u64::from_le_bytes(b.try_into().expect("8 bytes"))
            }
            None => self.malformed("it ends early"),
        }
    }

    /// The next word, which must be below `limit`.
    pub fn index(&mut self, limit: usize) -> usize {
        let w = self.word();
        if w >= limit as u64 {
            self.malformed(&format!("value {w} is out of range 0..{limit}"));
        }
        w as usize
    }

    /// The rest of the payload.
    pub fn rest(&mut self) -> &'a [u8] {
        let rest = &self.bytes[self.at.min(self.bytes.len())..];
        self.at = self.bytes.len();
        rest
    }

    /// Aborts: the payload does not hold what it should.
    pub fn malformed(&self, why: &str) -> ! {
        crate::proc::exit::abort(&format!(
            "malformed {} from PE {}: {why}",
            self.what, self.src
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_and_qd_and_ccs_are_not_counted() {
        for raw in 1..=11 {
            let kind = Kind::from_raw(raw).unwrap();
            assert_eq!(kind as u32, raw);
            let msg = message(kind, &[raw as u64], b"x");
            assert_eq!(msg.handler(), raw as usize);
            assert_ne!(msg.header().flags & FLAG_SYSTEM, 0);
            assert_eq!(msg.header().flags & FLAG_NO_QD == 0, kind.counted());
        }
        assert!(Kind::from_raw(0).is_none() && Kind::from_raw(KINDS as u32 + 1).is_none());
        assert!(
            !Kind::CcsRequest.counted() && !Kind::CcsPerf.counted(),
            "CCS traffic comes from outside the job"
        );
    }

    #[test]
    fn dispatch_runs_the_registered_handler_of_each_kind() {
        use std::cell::RefCell;
        // The "PE" records what ran.
        type Log = RefCell<Vec<String>>;
        let d: Dispatch<Log> = Dispatch::new();
        d.on(Kind::QdStart, |log, kind, msg| {
            log.borrow_mut()
                .push(format!("{kind:?} {}", msg.payload().len()))
        });
        d.on_contribution(|log, _| log.borrow_mut().push("contribution".into()));
        d.on_arrival(|log, msg| {
            log.borrow_mut().push("routed".into());
            Some(msg)
        });
        let log = Log::default();
        d.deliver(&log, message(Kind::QdStart, &[1, 2], b""));
        let mut contribution = message(Kind::GroupDef, &[], b"");
        contribution.header_mut().flags |= FLAG_REDUCE;
        d.deliver(&log, contribution);
        assert!(d.arrived(&log, message(Kind::GroupDef, &[], b"")).is_some());
        assert_eq!(*log.borrow(), ["QdStart 16", "contribution", "routed"]);
    }

    #[test]
    fn reader_reads_words_then_bytes() {
        let msg = message(Kind::GroupDef, &[7, 1 << 40], b"tail");
        let mut r = Reader::new(&msg, "test message");
        assert_eq!(r.word(), 7);
        assert_eq!(r.word(), 1 << 40);
        assert_eq!(r.rest(), b"tail");
        assert_eq!(r.rest(), b"");
    }
}
