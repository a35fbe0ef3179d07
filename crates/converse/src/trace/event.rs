//! What a trace event's two words mean.
//!
//! Word 0: the kind (low 8 bits), a small field (bits 8..32) and a 32-bit
//! argument (high half). Word 1: the time in ticks for a *timed* kind;
//! for an untimed one, more argument. Untimed events (a handler's end, a
//! send, a receipt) cost no clock read: the writer places them just
//! before the next timed event of their PE (see `chrome`), which on a busy
//! PE is the next handler's start, so the time between two handler starts
//! goes to the first, scheduler overhead included.
//!
//! Decoding never trusts the words: events travel between processes, and
//! an unknown kind is `None`, which the writer skips.

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// A handler starts: `index` in the PE's handler table, or, if
    /// `runtime`, a runtime message of system kind `index`.
    Begin {
        index: u32,
        runtime: bool,
        t: u64,
    },
    /// The innermost running handler returns.
    End,
    /// The PE found nothing to do.
    IdleBegin {
        t: u64,
    },
    /// The PE found work again.
    IdleEnd {
        t: u64,
    },
    /// A message left for PE (or, if `node`, node) `dest`; `seq` numbers
    /// the user messages from this PE to that destination from 1 (0: a
    /// runtime message, which has no flow).
    Send {
        dest: u32,
        node: bool,
        seq: u32,
        len: u32,
    },
    /// A user message from PE `src` was taken from this PE's (or, if
    /// `node`, its node's) arrivals: the `seq`-th from `src` there.
    Receipt {
        src: u32,
        node: bool,
        seq: u32,
    },
    /// The PE switches to user-level thread `thread` (0: the main flow).
    Switch {
        thread: u32,
        t: u64,
    },
    /// A span named `name` (an interned name) begins or ends.
    SpanBegin {
        name: u32,
        t: u64,
    },
    SpanEnd {
        name: u32,
        t: u64,
    },
    /// A point event named `name`, of category `cat`.
    Mark {
        name: u32,
        cat: Category,
        t: u64,
    },
    /// A scheduler call returns to its caller (ends the handler slices'
    /// untimed tails).
    SchedulerLeave {
        t: u64,
    },
}

/// What a point event is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Category {
    User = 0,
    Collective = 1,
    Ccs = 2,
}

impl Category {
    pub fn name(self) -> &'static str {
        match self {
            Category::User => "user",
            Category::Collective => "collective",
            Category::Ccs => "ccs",
        }
    }
}

const BEGIN: u64 = 1;
const END: u64 = 2;
const IDLE_BEGIN: u64 = 3;
const IDLE_END: u64 = 4;
const SEND: u64 = 5;
const RECEIPT: u64 = 6;
const SWITCH: u64 = 7;
const SPAN_BEGIN: u64 = 8;
const SPAN_END: u64 = 9;
const MARK: u64 = 10;
const LEAVE: u64 = 11;

#[inline]
fn w0(kind: u64, small: u32, arg: u32) -> u64 {
    kind | (u64::from(small & 0xff_ffff) << 8) | (u64::from(arg) << 32)
}

impl Event {
    /// The event as its two words.
    #[inline]
    pub fn encode(self) -> [u64; 2] {
        match self {
            Event::Begin { index, runtime, t } => [w0(BEGIN, runtime as u32, index), t],
            Event::End => [END, 0],
            Event::IdleBegin { t } => [IDLE_BEGIN, t],
            Event::IdleEnd { t } => [IDLE_END, t],
            Event::Send {
                dest,
                node,
                seq,
                len,
            } => [
                w0(SEND, node as u32, dest),
                u64::from(seq) | (u64::from(len) << 32),
            ],
            Event::Receipt { src, node, seq } => [w0(RECEIPT, node as u32, src), u64::from(seq)],
            Event::Switch { thread, t } => [w0(SWITCH, 0, thread), t],
            Event::SpanBegin { name, t } => [w0(SPAN_BEGIN, 0, name), t],
            Event::SpanEnd { name, t } => [w0(SPAN_END, 0, name), t],
            Event::Mark { name, cat, t } => [w0(MARK, cat as u32, name), t],
            Event::SchedulerLeave { t } => [LEAVE, t],
        }
    }

    /// The event two words hold; `None` for words that are no event.
    pub fn decode([a, b]: [u64; 2]) -> Option<Event> {
        let small = ((a >> 8) & 0xff_ffff) as u32;
        let arg = (a >> 32) as u32;
        Some(match a & 0xff {
            BEGIN => Event::Begin {
                index: arg,
                runtime: small & 1 != 0,
                t: b,
            },
            END => Event::End,
            IDLE_BEGIN => Event::IdleBegin { t: b },
            IDLE_END => Event::IdleEnd { t: b },
            SEND => Event::Send {
                dest: arg,
                node: small & 1 != 0,
                seq: b as u32,
                len: (b >> 32) as u32,
            },
            RECEIPT => Event::Receipt {
                src: arg,
                node: small & 1 != 0,
                seq: b as u32,
            },
            SWITCH => Event::Switch { thread: arg, t: b },
            SPAN_BEGIN => Event::SpanBegin { name: arg, t: b },
            SPAN_END => Event::SpanEnd { name: arg, t: b },
            MARK => Event::Mark {
                name: arg,
                cat: match small {
                    0 => Category::User,
                    1 => Category::Collective,
                    2 => Category::Ccs,
                    _ => return None,
                },
                t: b,
            },
            LEAVE => Event::SchedulerLeave { t: b },
            _ => return None,
        })
    }

    /// The event's time in ticks, if it is timed.
    pub fn time(&self) -> Option<u64> {
        match *self {
            Event::Begin { t, .. }
            | Event::IdleBegin { t }
            | Event::IdleEnd { t }
            | Event::Switch { t, .. }
            | Event::SpanBegin { t, .. }
            | Event::SpanEnd { t, .. }
            | Event::Mark { t, .. }
            | Event::SchedulerLeave { t } => Some(t),
            Event::End | Event::Send { .. } | Event::Receipt { .. } => None,
        }
    }

    /// The same event with its time replaced (timed kinds only).
    pub fn with_time(self, new: u64) -> Event {
        match self {
            Event::Begin { index, runtime, .. } => Event::Begin {
                index,
                runtime,
                t: new,
            },
            Event::IdleBegin { .. } => Event::IdleBegin { t: new },
            Event::IdleEnd { .. } => Event::IdleEnd { t: new },
            Event::Switch { thread, .. } => Event::Switch { thread, t: new },
            Event::SpanBegin { name, .. } => Event::SpanBegin { name, t: new },
            Event::SpanEnd { name, .. } => Event::SpanEnd { name, t: new },
            Event::Mark { name, cat, .. } => Event::Mark { name, cat, t: new },
            Event::SchedulerLeave { .. } => Event::SchedulerLeave { t: new },
            untimed => untimed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips_and_garbage_is_refused() {
        let all = [
            Event::Begin {
                index: 7,
                runtime: false,
                t: 1,
            },
            Event::Begin {
                index: u32::MAX,
                runtime: true,
                t: u64::MAX,
            },
            Event::End,
            Event::IdleBegin { t: 3 },
            Event::IdleEnd { t: 4 },
            Event::Send {
                dest: 3,
                node: true,
                seq: u32::MAX,
                len: 1 << 31,
            },
            Event::Receipt {
                src: 9,
                node: false,
                seq: 12,
            },
            Event::Switch { thread: 2, t: 5 },
            Event::SpanBegin { name: 1, t: 6 },
            Event::SpanEnd { name: 1, t: 7 },
            Event::Mark {
                name: 4,
                cat: Category::Ccs,
                t: 8,
            },
            Event::SchedulerLeave { t: 9 },
        ];
        for e in all {
            assert_eq!(Event::decode(e.encode()), Some(e));
        }
        assert_eq!(Event::decode([0, 0]), None);
        assert_eq!(Event::decode([0xff, 0]), None);
        assert_eq!(Event::decode([MARK | (9 << 8), 0]), None);
    }
}
