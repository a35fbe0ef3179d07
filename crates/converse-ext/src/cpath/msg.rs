//! Messages to elements: [`send`] (`CPathSend`), [`recv`] (`CPathRecv`),
//! the opaque message [`CPathMsg`], and the delivery to mailboxes that
//! both sends and reduction results go through.
//!
//! A message for elements of another PE travels as one Converse message
//! per PE: the descriptor, the kind (bytes, or a reduction result with its
//! vecsize and eltsize), the tags, the data and last the element numbers
//! there (so a multicast encodes the rest once and copies it into each
//! PE's message). The receiving PE checks all of it, then puts a copy in
//! each element's mailbox (the copies share the data) and wakes the
//! element's thread if it waits for those tags.
use std::rc::Rc;

use converse::Message;

use super::wire::{Cause, Reader, Writer};
use super::{
    CPATH_ALL, CPATH_WILD, CPath, Origin, ReduceElement, State, check_known, check_local_elements,
    current_or_abort, known, layout, malformed, mapped_pe, show_pattern, state, with_current,
    with_live,
};

/// What a message holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// Bytes given to [`SendBuilder::bytes`].
    Bytes,
    /// A reduction's result: `vecsize` values of `eltsize` bytes.
    Reduction { vecsize: usize, eltsize: usize },
}

/// An opaque CPath message, as [`RecvBuilder::wait`] returns it: its tags
/// and its data ([`decode_bytes`](CPathMsg::decode_bytes),
/// [`decode_reduction`](CPathMsg::decode_reduction)). Dropping it frees it
/// ([`free`](CPathMsg::free), `CPathMsgFree`). The copies a multicast puts
/// in the mailboxes of one PE share their data.
#[derive(Clone, Debug)]
pub struct CPathMsg {
    tags: Rc<[i32]>,
    kind: Kind,
    data: Rc<[u8]>,
}

impl CPathMsg {
    pub(super) fn new(tags: &[i32], kind: Kind, data: &[u8]) -> CPathMsg {
        CPathMsg {
            tags: tags.into(),
            kind,
            data: data.into(),
        }
    }

    /// The tags it was sent with (what a [`CPATH_WILD`] in the receive
    /// pattern matched).
    pub fn tags(&self) -> &[i32] {
        &self.tags
    }

    /// Its data (`CPathMsgDecodeBytes`: the C call's `len` is the slice's
    /// length). For a reduction's result, the result's bytes.
    #[doc(alias = "CPathMsgDecodeBytes")]
    pub fn decode_bytes(&self) -> &[u8] {
        &self.data
    }

    /// For a reduction's result, `(vecsize, eltsize, bytes)`
    /// (`CPathMsgDecodeReduction`); `None` for a message of
    /// [`send`].
    #[doc(alias = "CPathMsgDecodeReduction")]
    pub fn decode_reduction(&self) -> Option<(usize, usize, &[u8])> {
        match self.kind {
            Kind::Reduction { vecsize, eltsize } => Some((vecsize, eltsize, &self.data)),
            Kind::Bytes => None,
        }
    }

    /// A reduction's result as values of `T` (see
    /// [`ReduceBuilder::data_of`](super::ReduceBuilder::data_of)); `None`
    /// for a message of [`send`] or a result whose `eltsize` is not
    /// `T`'s.
    pub fn decode_reduction_of<T: ReduceElement>(&self) -> Option<Vec<T>> {
        let (_, eltsize, bytes) = self.decode_reduction()?;
        (eltsize == T::SIZE).then(|| bytes.chunks_exact(T::SIZE).map(T::read).collect())
    }

    /// True for a reduction's result.
    pub fn is_reduction(&self) -> bool {
        matches!(self.kind, Kind::Reduction { .. })
    }

    /// Frees the message (`CPathMsgFree`); dropping it does the same.
    #[doc(alias = "CPathMsgFree")]
    pub fn free(self) {}
}

/// True if stored tags `tags` match receive pattern `pattern`.
fn tags_match(tags: &[i32], pattern: &[i32]) -> bool {
    tags.len() == pattern.len()
        && tags
            .iter()
            .zip(pattern)
            .all(|(&t, &p)| p == CPATH_WILD || t == p)
}

/// A message being put together for [`send`] (`CPathSend`'s clauses).
#[must_use = "a message is sent by .send()"]
#[derive(Debug, Default)]
pub struct SendBuilder<'a> {
    dest: Option<(&'a CPath, &'a [u32])>,
    tags: Vec<i32>,
    bytes: &'a [u8],
}

/// Starts a message to elements (`CPathSend`); see the module comment for
/// the clauses: `send().dest(&path, &[i, j]).tag(t).bytes(b).send()`.
/// Any code on any PE may send.
#[doc(alias = "CPathSend")]
pub fn send<'a>() -> SendBuilder<'a> {
    SendBuilder::default()
}

impl<'a> SendBuilder<'a> {
    /// The destination (`CPATH_DEST, path, i, j, …`): one index per
    /// dimension, each may be [`CPATH_ALL`] (a multicast to every match).
    #[doc(alias = "CPATH_DEST")]
    pub fn dest(mut self, path: &'a CPath, indices: &'a [u32]) -> Self {
        self.dest = Some((path, indices));
        self
    }

    /// Appends one tag (`CPATH_TAG, t`).
    #[doc(alias = "CPATH_TAG")]
    pub fn tag(mut self, tag: i32) -> Self {
        self.tags.push(tag);
        self
    }

    /// Appends tags (`CPATH_TAGS, t1, t2, …, 0` and `CPATH_TAGVEC, n, v`).
    #[doc(alias = "CPATH_TAGS")]
    #[doc(alias = "CPATH_TAGVEC")]
    pub fn tags(mut self, tags: &[i32]) -> Self {
        self.tags.extend_from_slice(tags);
        self
    }

    /// The data (`CPATH_BYTES, n, buf`); none if not given.
    #[doc(alias = "CPATH_BYTES")]
    pub fn bytes(mut self, bytes: &'a [u8]) -> Self {
        self.bytes = bytes;
        self
    }

    /// Sends it (`CPATH_END`).
    ///
    /// # Panics
    /// Aborts the job without a destination, with indices that do not fit
    /// the array, or with a [`CPATH_WILD`] tag.
    #[doc(alias = "CPATH_END")]
    pub fn send(self) {
        let s = state();
        let Some((path, pattern)) = self.dest else {
            converse::abort(&format!(
                "CPathSend on PE {} without a destination (.dest)",
                converse::my_pe()
            ));
        };
        check_sent_tags(&self.tags, "CPathSend");
        if let Err(why) = path
            .check(&s)
            .and_then(|()| check_known(&s, path))
            .and_then(|()| path.check_pattern(pattern))
        {
            converse::abort(&format!("CPathSend on PE {}: {why}", converse::my_pe()));
        }
        deliver(&s, path, pattern, &self.tags, Kind::Bytes, self.bytes);
    }
}

/// Aborts if sent tags hold the wildcard.
pub(super) fn check_sent_tags(tags: &[i32], what: &str) {
    if tags.contains(&CPATH_WILD) {
        converse::abort(&format!(
            "{what} on PE {} with tags {tags:?}: CPATH_WILD ({CPATH_WILD}) is for receive patterns only",
            converse::my_pe()
        ));
    }
}

/// Delivers a message (`tags`, `kind`, `data`) to the elements of `path`
/// matching `pattern` (checked): at once on this PE, in one message per
/// other PE. The data is copied once per PE (into the `Rc` the mailboxes
/// here share, or into another PE's message); the rest of the message is
/// encoded once.
pub(super) fn deliver(
    s: &State,
    path: &CPath,
    pattern: &[u32],
    tags: &[i32],
    kind: Kind,
    data: &[u8],
) {
    let me = converse::my_pe();
    let single;
    let multi;
    let targets: Vec<(usize, &[usize])> = if pattern.contains(&CPATH_ALL) {
        multi = layout(s, path, pattern);
        multi
            .by_pe
            .iter()
            .map(|(&pe, flats)| (pe, &flats[..]))
            .collect()
    } else {
        single = [path.flat_index(pattern).unwrap_or_else(|| {
            converse::abort(&format!(
                "a message for {} of {path}: no such element",
                show_pattern(pattern)
            ))
        })];
        let pe = mapped_pe(s, path, single[0]).unwrap_or_else(|why| converse::abort(&why));
        vec![(pe, &single[..])]
    };
    let mut head: Option<Writer> = None;
    for (pe, flats) in targets {
        if pe == me {
            deliver_here(s, path, flats, &CPathMsg::new(tags, kind, data));
            continue;
        }
        let head = head.get_or_insert_with(|| {
            let mut w = Writer::default();
            w.path(path);
            match kind {
                Kind::Bytes => w.u8(0),
                Kind::Reduction { vecsize, eltsize } => {
                    w.u8(1).u64(vecsize as u64).u64(eltsize as u64)
                }
            };
            w.i32s(tags).bytes(data);
            w
        });
        let mut tail = Writer::default();
        tail.flats(flats);
        let (head, tail) = (&head.0[..], &tail.0[..]);
        let mut m = Message::new(s.handlers.deliver, head.len() + tail.len());
        let payload = m.payload_mut();
        payload[..head.len()].copy_from_slice(head);
        payload[head.len()..].copy_from_slice(tail);
        converse::sync_send_and_free(pe, m);
    }
}

/// Puts `msg` in the mailboxes of elements `flats` (of this PE) of
/// `path`, waking those waiting for its tags; a message for an element
/// whose thread returned is reported and dropped.
fn deliver_here(s: &State, path: &CPath, flats: &[usize], msg: &CPathMsg) {
    for &flat in flats {
        let wake = with_live(s, path, flat, |e| {
            e.mailbox.put(&msg.tags, msg.clone());
            let wanted = e
                .waiting
                .as_deref()
                .is_some_and(|p| tags_match(&msg.tags, p));
            if wanted {
                e.waiting = None;
                Some(e.arrived.clone())
            } else {
                None
            }
        });
        match wake {
            None => super::discarded(path, flat, 1, &format!(" (tags {:?})", &msg.tags[..])),
            Some(Some(event)) => event.set(),
            Some(None) => {}
        }
    }
}

/// A message for elements of this PE arrived.
pub(super) fn on_deliver(msg: Message) {
    let s = state();
    let src = msg.src_pe();
    let decoded = (|| -> Result<(CPath, Vec<usize>, CPathMsg), Cause> {
        let mut r = Reader::new(msg.payload());
        let path = r.path("descriptor")?;
        let kind = match r.u8("kind")? {
            0 => Kind::Bytes,
            1 => {
                let vecsize = r.u64("vecsize")?;
                let eltsize = r.u64("eltsize")?;
                let (Ok(vecsize), Ok(eltsize)) =
                    (usize::try_from(vecsize), usize::try_from(eltsize))
                else {
                    return Err(format!("vecsize {vecsize} or eltsize {eltsize} too big"));
                };
                Kind::Reduction { vecsize, eltsize }
            }
            k => return Err(format!("unknown message kind {k}")),
        };
        let tags = r.i32s("tags")?;
        let data = r.bytes("data")?;
        let flats = r.u64s("elements")?;
        r.end("message")?;
        if let Kind::Reduction { vecsize, eltsize } = kind
            && vecsize.checked_mul(eltsize) != Some(data.len())
        {
            return Err(format!(
                "a reduction result of {vecsize} × {eltsize} bytes with {} bytes of data",
                data.len()
            ));
        }
        if tags.contains(&CPATH_WILD) {
            return Err(format!("tags {tags:?} hold CPATH_WILD"));
        }
        path.check(&s)?;
        known(
            &s,
            &path,
            Origin::Message {
                kind: "element",
                src,
            },
        )?;
        let flats = check_local_elements(&s, &path, &flats, false)?;
        Ok((path, flats, CPathMsg::new(&tags, kind, data)))
    })();
    match decoded {
        Ok((path, flats, m)) => deliver_here(&s, &path, &flats, &m),
        Err(why) => malformed("element", src, &why),
    }
}

/// A receive being put together ([`recv`], `CPathRecv`'s clauses).
#[must_use = "a receive happens at .wait()"]
#[derive(Debug, Default)]
pub struct RecvBuilder {
    tags: Vec<i32>,
}

/// Starts a receive of the calling element (`CPathRecv`):
/// `recv().tags(&[t, CPATH_WILD]).wait()`. Only an element's own thread
/// receives its messages.
#[doc(alias = "CPathRecv")]
pub fn recv() -> RecvBuilder {
    RecvBuilder::default()
}

impl RecvBuilder {
    /// Appends one tag to the pattern (`CPATH_TAG, t`); [`CPATH_WILD`]
    /// matches any tag.
    #[doc(alias = "CPATH_TAG")]
    pub fn tag(mut self, tag: i32) -> Self {
        self.tags.push(tag);
        self
    }

    /// Appends tags to the pattern (`CPATH_TAGS`, `CPATH_TAGVEC`).
    #[doc(alias = "CPATH_TAGS")]
    #[doc(alias = "CPATH_TAGVEC")]
    pub fn tags(mut self, tags: &[i32]) -> Self {
        self.tags.extend_from_slice(tags);
        self
    }

    /// Waits for the oldest message to the calling element whose tags
    /// match the pattern, and takes it (`CPATH_END`). Blocks the element's
    /// thread (the PE runs other work meanwhile).
    ///
    /// # Panics
    /// Aborts the job in a handler or the start function (nothing may
    /// block there), or outside an element's thread.
    #[doc(alias = "CPATH_END")]
    pub fn wait(self) -> CPathMsg {
        converse::check_can_block("CPathRecv");
        let me = current_or_abort("CPathRecv");
        let s = state();
        loop {
            let step = with_current(&s, &me, |e| match e.mailbox.get(&self.tags) {
                Some((_, m)) => Ok(m),
                None => {
                    e.waiting = Some(self.tags.clone().into());
                    e.arrived.reset();
                    Err(e.arrived.clone())
                }
            });
            match step {
                Ok(m) => return m,
                Err(arrived) => arrived.wait(),
            }
        }
    }

    /// The oldest message to the calling element whose tags match, if one
    /// is there; never blocks (not in the manual).
    ///
    /// # Panics
    /// Aborts the job outside an element's thread.
    pub fn try_wait(self) -> Option<CPathMsg> {
        let me = current_or_abort("CPathRecv (try_wait)");
        let s = state();
        with_current(&s, &me, |e| e.mailbox.get(&self.tags)).map(|(_, m)| m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_any_tag_in_receive_patterns_only() {
        assert!(tags_match(&[1, 2], &[1, CPATH_WILD]));
        assert!(tags_match(&[], &[]));
        assert!(!tags_match(&[1, 2], &[1]));
        assert!(!tags_match(&[1, 2], &[2, CPATH_WILD]));
        let m = CPathMsg::new(
            &[3],
            Kind::Reduction {
                vecsize: 2,
                eltsize: 8,
            },
            &[0; 16],
        );
        assert_eq!(m.decode_reduction_of::<i64>(), Some(vec![0, 0]));
        assert_eq!(m.decode_reduction_of::<i32>(), None);
        assert!(
            CPathMsg::new(&[], Kind::Bytes, b"x")
                .decode_reduction()
                .is_none()
        );
    }
}
