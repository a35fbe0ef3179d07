//! What a trace event's two words mean.
//!
//! Word 0: the kind (low 8 bits), a small field (bits 8..32) and a 32-bit
//! argument (high half). Word 1: the time in ticks for a *timed* kind;
//! for an untimed one, more argument.
//!
//! Most events are untimed and cost no clock read: a handler's end, a
//! send, and most handler starts. A timed handler start is a
//! [`Event::Clock`] followed by its [`Event::Begin`]; the PE times starts
//! in groups (`ring_writer`), and the file's writer spreads the untimed
//! starts of a group evenly between its timed neighbours (`chrome`).
//! Other untimed events are placed just before the next placed event of
//! their PE, so the time between two handler starts goes to the first,
//! scheduler overhead included.
//!
//! A handler start carries the end of the previous handler if that came
//! just before it (`closes`), and the flow number of the user message it
//! runs (`flow`, see `trace`'s "Flows"): a message costs two events, its
//! send and its handler's start.
//!
//! Decoding never trusts the words: events travel between processes, and
//! an unknown kind is `None`, which the writer skips.

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// A handler starts: `index` in the PE's handler table, or, if
    /// `runtime`, a runtime message of system kind `index`. Timed when
    /// the event before it is a [`Event::Clock`]. `closes`: the innermost
    /// running handler returned just before (an [`Event::End`] folded in);
    /// `flow`: the user message it runs, by its sender's number.
    Begin {
        index: u32,
        runtime: bool,
        closes: bool,
        flow: Option<Flow>,
    },
    /// A clock reading: the time of the handler start that follows, or,
    /// alone, just a moment of the PE (its last, say).
    Clock {
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
    /// the user messages this PE sends, from 1 (0: a runtime message, or a
    /// user message that has no flow).
    Send {
        dest: u32,
        node: bool,
        seq: u32,
        len: u32,
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
    /// A user handler (table index `index`) starts, running a message of
    /// `len` bytes this PE sent itself, whose send is not an event of its
    /// own: it happened `back` events before this one (after the event
    /// `back + 1` places before it, before the one `back` places before;
    /// `back` 0: just before this start, inside the handler this start
    /// `closes`), the `order`-th of the PE's self-sends made there. Only the ring holds these: the process's part of the
    /// trace has each as the [`Event::Send`] and [`Event::Begin`] it
    /// stands for ([`expand_self_sends`]).
    SelfSentBegin {
        index: u32,
        closes: bool,
        back: u32,
        /// The send's order among those made at its place (0, 1, …; 63
        /// for the 64th and later).
        order: u32,
        len: u32,
    },
}

/// A user message by its sender's numbering: the `seq`-th user message
/// PE `src` sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Flow {
    pub src: u32,
    pub seq: u32,
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
const SWITCH: u64 = 7;
const SPAN_BEGIN: u64 = 8;
const SPAN_END: u64 = 9;
const MARK: u64 = 10;
const LEAVE: u64 = 11;
const CLOCK: u64 = 12;
const SELF_BEGIN: u64 = 13;

/// The flag of a header's `coll` that marks a message a PE sent itself
/// whose send the ring does not hold (`ring_writer`'s "Self-sends"): the
/// rest of the field is the ring's count of events at the send, modulo
/// 2²⁵ ([`SELF_SENT_PLACE`]), then the send's order among the PE's
/// self-sends at that count (low [`SELF_SENT_ORDER_BITS`] bits, 63 for the
/// 64th and later). Flow numbers stay below the flag.
pub(crate) const SELF_SENT: u32 = 1 << 31;
/// Bits of a self-send mark that order the sends made at one place.
pub(crate) const SELF_SENT_ORDER_BITS: u32 = 6;
/// The mask of a self-send mark's place, once shifted down.
pub(crate) const SELF_SENT_PLACE: u32 = (1 << (31 - SELF_SENT_ORDER_BITS)) - 1;
/// The largest order a mark holds.
pub(crate) const SELF_SENT_ORDER_MAX: u32 = (1 << SELF_SENT_ORDER_BITS) - 1;

/// The small field of a [`Event::Begin`]: its flags.
const BEGIN_RUNTIME: u64 = 1 << 8;
const BEGIN_CLOSES: u64 = 1 << 9;

/// A handler start's two words: `flow`'s number 0 is none (senders number
/// from 1). Built here field by field for `ring_writer`'s hot path.
#[inline(always)]
pub(crate) fn begin_words(index: u32, runtime: bool, closes: bool, flow: Flow) -> [u64; 2] {
    [
        BEGIN
            | if runtime { BEGIN_RUNTIME } else { 0 }
            | if closes { BEGIN_CLOSES } else { 0 }
            | (u64::from(flow.src) << 32),
        u64::from(index) | (u64::from(flow.seq) << 32),
    ]
}

/// An [`Event::SelfSentBegin`]'s two words, field by field for
/// `ring_writer`'s hot path.
#[inline(always)]
pub(crate) fn self_sent_begin_words(
    index: u32,
    closes: bool,
    back: u32,
    order: u32,
    len: u32,
) -> [u64; 2] {
    [
        SELF_BEGIN
            | if closes { BEGIN_CLOSES } else { 0 }
            | (u64::from(order & SELF_SENT_ORDER_MAX) << 10)
            | (u64::from(back) << 32),
        u64::from(index) | (u64::from(len) << 32),
    ]
}

#[inline]
fn w0(kind: u64, small: u32, arg: u32) -> u64 {
    kind | (u64::from(small & 0xff_ffff) << 8) | (u64::from(arg) << 32)
}

impl Event {
    /// The event as its two words. Always inlined: every hot caller names
    /// its event's kind, so the match folds away (left to the inliner, a
    /// cold caller's encoding became a call).
    #[inline(always)]
    pub fn encode(self) -> [u64; 2] {
        match self {
            Event::Begin {
                index,
                runtime,
                closes,
                flow,
            } => begin_words(
                index,
                runtime,
                closes,
                flow.unwrap_or(Flow { src: 0, seq: 0 }),
            ),
            Event::Clock { t } => [CLOCK, t],
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
            Event::Switch { thread, t } => [w0(SWITCH, 0, thread), t],
            Event::SpanBegin { name, t } => [w0(SPAN_BEGIN, 0, name), t],
            Event::SpanEnd { name, t } => [w0(SPAN_END, 0, name), t],
            Event::Mark { name, cat, t } => [w0(MARK, cat as u32, name), t],
            Event::SchedulerLeave { t } => [LEAVE, t],
            Event::SelfSentBegin {
                index,
                closes,
                back,
                order,
                len,
            } => self_sent_begin_words(index, closes, back, order, len),
        }
    }

    /// The event two words hold; `None` for words that are no event.
    pub fn decode([a, b]: [u64; 2]) -> Option<Event> {
        let small = ((a >> 8) & 0xff_ffff) as u32;
        let arg = (a >> 32) as u32;
        Some(match a & 0xff {
            BEGIN => Event::Begin {
                index: b as u32,
                runtime: a & BEGIN_RUNTIME != 0,
                closes: a & BEGIN_CLOSES != 0,
                flow: Some(Flow {
                    src: arg,
                    seq: (b >> 32) as u32,
                })
                .filter(|f| f.seq != 0),
            },
            CLOCK => Event::Clock { t: b },
            END => Event::End,
            IDLE_BEGIN => Event::IdleBegin { t: b },
            IDLE_END => Event::IdleEnd { t: b },
            SEND => Event::Send {
                dest: arg,
                node: small & 1 != 0,
                seq: b as u32,
                len: (b >> 32) as u32,
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
            SELF_BEGIN => Event::SelfSentBegin {
                index: b as u32,
                closes: a & BEGIN_CLOSES != 0,
                back: arg,
                order: (small >> 2) & SELF_SENT_ORDER_MAX,
                len: (b >> 32) as u32,
            },
            _ => return None,
        })
    }

    /// The event's time in ticks, if it is timed.
    pub fn time(&self) -> Option<u64> {
        match *self {
            Event::Clock { t }
            | Event::IdleBegin { t }
            | Event::IdleEnd { t }
            | Event::Switch { t, .. }
            | Event::SpanBegin { t, .. }
            | Event::SpanEnd { t, .. }
            | Event::Mark { t, .. }
            | Event::SchedulerLeave { t } => Some(t),
            Event::Begin { .. } | Event::End | Event::Send { .. } | Event::SelfSentBegin { .. } => {
                None
            }
        }
    }

    /// The same event with its time replaced (timed kinds only).
    pub fn with_time(self, new: u64) -> Event {
        match self {
            Event::Clock { .. } => Event::Clock { t: new },
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

/// The events of PE `pe`'s ring, oldest first, with every
/// [`Event::SelfSentBegin`] replaced by the [`Event::Send`] it stands for,
/// at the place of the send, and an [`Event::Begin`] running it. The two
/// get a flow number of their own, from 2³¹ up ([`SELF_SENT`]: the PE's
/// own numbers stay below it). A send older than the ring's oldest event
/// is left out, as a send the ring lost would be. Words that are no event
/// are left out (they still count as places).
pub(crate) fn expand_self_sends(pe: u32, words: &[[u64; 2]]) -> Vec<Event> {
    // The sends to put back: the place of the event each comes just
    // before (an index into `words`), and the send.
    let mut sends: Vec<(usize, u32, Event)> = Vec::new();
    let mut events: Vec<(usize, Event)> = Vec::with_capacity(words.len());
    let mut next_seq = SELF_SENT;
    for (at, &w) in words.iter().enumerate() {
        let e = match Event::decode(w) {
            None => continue,
            Some(Event::SelfSentBegin {
                index,
                closes,
                back,
                order,
                len,
            }) => {
                let seq = next_seq;
                next_seq = next_seq.wrapping_add(1).max(SELF_SENT);
                if let Some(place) = at.checked_sub(back as usize) {
                    let send = Event::Send {
                        dest: pe,
                        node: false,
                        seq,
                        len,
                    };
                    sends.push((place, order, send));
                }
                Event::Begin {
                    index,
                    runtime: false,
                    closes,
                    flow: Some(Flow { src: pe, seq }),
                }
            }
            Some(other) => other,
        };
        events.push((at, e));
    }
    // In the order sent; stable: sends past the 64th at one place keep
    // the order of their starts.
    sends.sort_by_key(|&(place, order, _)| (place, order));
    let mut sends = sends.into_iter().peekable();
    let mut out = Vec::with_capacity(events.len() + sends.len());
    for (at, e) in events {
        while let Some((_, _, send)) = sends.next_if(|&(place, _, _)| place <= at) {
            out.push(send);
        }
        out.push(e);
    }
    out
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
                closes: false,
                flow: None,
            },
            Event::Begin {
                index: u32::MAX,
                runtime: true,
                closes: true,
                flow: Some(Flow {
                    src: u32::MAX,
                    seq: u32::MAX,
                }),
            },
            Event::Begin {
                index: 0,
                runtime: false,
                closes: false,
                flow: Some(Flow { src: 0, seq: 1 }),
            },
            Event::Clock { t: u64::MAX },
            Event::End,
            Event::IdleBegin { t: 3 },
            Event::IdleEnd { t: 4 },
            Event::Send {
                dest: 3,
                node: true,
                seq: u32::MAX,
                len: 1 << 31,
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
            Event::SelfSentBegin {
                index: u32::MAX,
                closes: true,
                back: u32::MAX,
                order: SELF_SENT_ORDER_MAX,
                len: u32::MAX,
            },
            Event::SelfSentBegin {
                index: 1,
                closes: false,
                back: 0,
                order: 0,
                len: 0,
            },
        ];
        for e in all {
            assert_eq!(Event::decode(e.encode()), Some(e));
        }
        assert_eq!(Event::decode([0, 0]), None);
        assert_eq!(Event::decode([0xff, 0]), None);
        assert_eq!(Event::decode([MARK | (9 << 8), 0]), None);
    }
}
