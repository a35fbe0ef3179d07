//! The receiving side of persistent channels: this process's channels, each
//! with its pre-agreed buffers, which the network modules' reassembly
//! receives a channel's messages into (`net::frame::MessageBuffers`).
//!
//! # What a channel is
//!
//! A channel belongs to one PE of this process (its destination) and
//! carries messages of up to `max_bytes` bytes (header included) from
//! another process. A message sent on it travels as an ordinary `Message`
//! frame with [`FLAG_PERSISTENT`] set and the channel's number as its tag
//! (instead of the destination PE, which the channel names). On arrival the
//! reassembly asks [`Receivers::take`] for one of the channel's buffers and
//! receives the message straight into it: no allocation. The delivered
//! message shares that buffer (`converse_msg::raw::ReusableBuffer`) until
//! its handler drops it; a channel keeps several buffers
//! ([`buffers_per_channel`]) so that a burst of messages may be in flight
//! or held at once, and a message that finds all of them busy (or is longer
//! than `max_bytes`) gets a buffer of its own, as any message does.
//!
//! # Invariants
//!
//! - Channel numbers are unique in the process (never 0, never reused),
//!   whichever job opened them: in-process tests run several jobs at once.
//! - A channel made by its sender (`create_persistent`) is closed only by
//!   a message that follows its last use on the same connection (that
//!   sender's `destroy`); one made by its receiver
//!   (`create_receiver_persistent`), which any number of senders may
//!   register, stays open until the job ends (the manual gives the
//!   receiver no call to end it); and an in-process job's close at its
//!   end (it sends no frames). So a frame never names a channel that
//!   closed before it arrived, and an unknown channel is a malformed frame.
//!
//! # Concurrency
//!
//! The map of channels is read by the network's receiving threads and
//! changed by PEs opening and closing channels. A receiving thread keeps
//! the channels it used last at hand (a thread-local cache, checked
//! against the channel's `closed` flag: numbers are never reused), so a
//! frame costs no lock on the shared map. Each channel's buffers sit under
//! their own mutex, held for a push or a pop.
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, LazyLock, Mutex, RwLock};

use crate::msg::message::MSG_HEADER_SIZE;
use crate::net::frame::{FrameHeader, FrameKind, MessageBuffers};
use crate::sync::lock;
use converse_msg::raw::{MessageBuf, ReusableBuffer};

/// Frame flag of a `Message` frame: `tag` is a persistent channel of the
/// receiving process, not a PE.
pub(crate) const FLAG_PERSISTENT: u8 = 2;

/// Bytes of buffers a channel keeps at most (beyond the first two).
const CHANNEL_BYTES: usize = 1 << 20;

/// Buffers a channel for messages of up to `max_bytes` keeps at most: 1 MiB
/// of them, at least 1 and at most 64. A message of the channel that
/// arrives while all of them are held (a burst the receiver has not
/// handled yet) gets a buffer of its own.
pub fn buffers_per_channel(max_bytes: usize) -> usize {
    (CHANNEL_BYTES / max_bytes.max(1)).clamp(1, 64)
}

/// The longest message a channel may carry: the longest that crosses
/// processes.
pub const MAX_CHANNEL_BYTES: usize = crate::net::frame::DEFAULT_MAX_PAYLOAD;

/// Channels a thread keeps at hand (see `Receivers::channel`).
const RECENT_CHANNELS: usize = 16;

/// One channel's receiving side.
struct Channel {
    /// The PE its messages are for.
    pe: usize,
    /// Its longest message, header included.
    max_bytes: usize,
    /// The job that opened it (its address), for the end of an in-process
    /// job.
    job: usize,
    /// Set when it closes (for the threads' caches of channels).
    closed: AtomicBool,
    /// Buffers not handed to a reassembly now (the longest given back
    /// first: the likeliest to be free again), and how many were made.
    buffers: Mutex<(VecDeque<ReusableBuffer>, usize)>,
}

/// This process's persistent channels.
pub(crate) struct Receivers {
    next: AtomicU32,
    channels: RwLock<HashMap<u32, Arc<Channel>>>,
}

static RECEIVERS: LazyLock<Arc<Receivers>> = LazyLock::new(|| {
    Arc::new(Receivers {
        next: AtomicU32::new(1),
        channels: RwLock::new(HashMap::new()),
    })
});

/// This process's channels.
pub(crate) fn receivers() -> &'static Arc<Receivers> {
    &RECEIVERS
}

impl Receivers {
    /// Opens a channel to PE `pe` (of job `job`, its address) for messages
    /// of up to `max_bytes` bytes; returns its number. No buffer is made
    /// before the first message.
    pub fn open(&self, pe: usize, max_bytes: usize, job: usize) -> u32 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        assert_ne!(id, 0, "persistent channel numbers ran out in this process");
        let channel = Channel {
            pe,
            max_bytes: max_bytes.max(MSG_HEADER_SIZE),
            job,
            closed: AtomicBool::new(false),
            buffers: Mutex::new((VecDeque::new(), 0)),
        };
        let mut map = self.channels.write().unwrap_or_else(|e| e.into_inner());
        map.insert(id, Arc::new(channel));
        id
    }

    /// Closes channel `id` if it is PE `pe`'s; true if it was.
    pub fn close(&self, id: u32, pe: usize) -> bool {
        let mut map = self.channels.write().unwrap_or_else(|e| e.into_inner());
        match map.get(&id) {
            Some(c) if c.pe == pe => {
                c.closed.store(true, Ordering::Release);
                map.remove(&id).is_some()
            }
            _ => false,
        }
    }

    /// Closes every channel job `job` opened for PE `pe`.
    pub fn close_all_of(&self, job: usize, pe: usize) {
        let mut map = self.channels.write().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, c| {
            let mine = c.job == job && c.pe == pe;
            if mine {
                c.closed.store(true, Ordering::Release);
            }
            !mine
        });
    }

    /// The PE channel `id` carries messages to, if it is open.
    pub fn destination(&self, id: u32) -> Option<usize> {
        self.with_channel(id, |c| c.pe)
    }

    /// Buffers made for channel `id` so far (tests).
    #[cfg(test)]
    pub fn buffers_made(&self, id: u32) -> usize {
        self.with_channel(id, |c| lock(&c.buffers).1).unwrap_or(0)
    }

    /// `f` of channel `id`, if open: from the calling thread's cache of
    /// the channels it used last (a receiving thread looks one up three
    /// times a message, and the map's lock is shared by every receiving
    /// thread), else from the map.
    fn with_channel<R>(&self, id: u32, f: impl FnOnce(&Channel) -> R) -> Option<R> {
        thread_local! {
            static RECENT: RefCell<Vec<(u32, Arc<Channel>)>> = const { RefCell::new(Vec::new()) };
        }
        RECENT.with(|recent| {
            let mut recent = recent.borrow_mut();
            if let Some(at) = recent.iter().position(|(k, _)| *k == id) {
                if !recent[at].1.closed.load(Ordering::Acquire) {
                    return Some(f(&recent[at].1));
                }
                // Numbers are never reused: a closed one stays closed.
                recent.swap_remove(at);
                return None;
            }
            // A miss: closed channels leave the cache too (their numbers
            // never come again, so a hit would not evict them).
            recent.retain(|(_, c)| !c.closed.load(Ordering::Acquire));
            let map = self.channels.read().unwrap_or_else(|e| e.into_inner());
            let channel = map.get(&id).cloned()?;
            drop(map);
            if recent.len() == RECENT_CHANNELS {
                recent.remove(0);
            }
            let result = f(&channel);
            recent.push((id, channel));
            Some(result)
        })
    }
}

impl MessageBuffers for Receivers {
    fn take(&self, header: &FrameHeader) -> Option<MessageBuf> {
        if header.kind != FrameKind::Message || header.flags & FLAG_PERSISTENT == 0 {
            return None;
        }
        let len = header.len as usize;
        self.with_channel(header.tag, |channel| {
            if len > channel.max_bytes {
                return None;
            }
            let mut buffers = lock(&channel.buffers);
            let (free, made) = &mut *buffers;
            // Held ones go to the back, in the order they came back.
            for _ in 0..free.len() {
                match free.pop_front().expect("counted").receive(len) {
                    Ok(space) => return Some(space),
                    Err(held) => free.push_back(held),
                }
            }
            if *made < buffers_per_channel(channel.max_bytes) {
                *made += 1;
                return ReusableBuffer::new(channel.max_bytes).receive(len).ok();
            }
            None
        })
        .flatten()
    }

    fn give_back(&self, header: &FrameHeader, buffer: ReusableBuffer) {
        // A channel closed meanwhile lets its buffer go with the message.
        self.with_channel(header.tag, |channel| {
            lock(&channel.buffers).0.push_back(buffer);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use converse_msg::Message;

    fn header(tag: u32, flags: u8, len: usize) -> FrameHeader {
        FrameHeader {
            kind: FrameKind::Message,
            flags,
            len: len as u32,
            src: 0,
            tag,
        }
    }

    #[test]
    fn a_channel_hands_out_at_most_its_buffers_and_reuses_them() {
        let r = receivers();
        let id = r.open(3, 100, 1);
        assert_eq!(r.destination(id), Some(3));
        // Not persistent, too long, or another channel: no buffer.
        assert!(r.take(&header(id, 0, 64)).is_none());
        assert!(r.take(&header(id, FLAG_PERSISTENT, 101)).is_none());
        assert!(r.take(&header(u32::MAX, FLAG_PERSISTENT, 64)).is_none());
        // Messages held: one buffer each, up to the limit.
        let mut held = Vec::new();
        let count = buffers_per_channel(100);
        assert_eq!(count, 64);
        assert_eq!(buffers_per_channel(1 << 30), 1);
        assert_eq!(buffers_per_channel(64 << 10), 16);
        for _ in 0..count {
            let h = header(id, FLAG_PERSISTENT, 64);
            let mut space = r.take(&h).expect("a buffer");
            let bytes = Message::new(0, 32).as_bytes().to_vec();
            // SAFETY: a vector is valid for reads of its length.
            unsafe { space.write_raw_at(0, bytes.as_ptr(), bytes.len()) };
            let (msg, again) = space.finish_reusable();
            r.give_back(&h, again.expect("reusable"));
            held.push(msg);
        }
        assert!(r.take(&header(id, FLAG_PERSISTENT, 64)).is_none());
        held.pop();
        assert!(r.take(&header(id, FLAG_PERSISTENT, 64)).is_some());
        assert_eq!(r.buffers_made(id), count);
        // Only its own PE closes it.
        assert!(!r.close(id, 4));
        assert!(r.close(id, 3));
        assert_eq!(r.destination(id), None);
    }

    #[test]
    fn closing_a_jobs_channels_leaves_the_others() {
        let r = receivers();
        let (a, b, c) = (r.open(0, 64, 7), r.open(1, 64, 7), r.open(0, 64, 8));
        r.close_all_of(7, 0);
        assert_eq!(
            (r.destination(a), r.destination(b), r.destination(c)),
            (None, Some(1), Some(0))
        );
        r.close(b, 1);
        r.close(c, 0);
    }
}
