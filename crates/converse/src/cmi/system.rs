//! Runtime-internal messages: their kinds, how they are built, and a reader
//! for their payloads that never trusts the bytes.
//!
//! A system message has [`FLAG_SYSTEM`] set and its header's `handler` field
//! holds a [`Kind`] instead of a handler-table index, so the runtime's own
//! traffic never takes a slot of the user's handler table (whose indices the
//! manual promises are the same on every PE). Payloads are little-endian
//! words. A payload that does not parse aborts the job naming the PE that
//! sent it: within one process that is a runtime bug, across processes a
//! corrupted or hostile peer, and neither may go on silently.
use crate::msg::message::{FLAG_NO_QD, FLAG_SYSTEM, Message};

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
}

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
        assert!(Kind::from_raw(0).is_none() && Kind::from_raw(12).is_none());
        assert!(
            !Kind::CcsRequest.counted() && !Kind::CcsPerf.counted(),
            "CCS traffic comes from outside the job"
        );
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
