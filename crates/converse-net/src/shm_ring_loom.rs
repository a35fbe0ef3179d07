//! The loom model of the shm ring (`--cfg loom` only): the protocol's own
//! methods ([`RingMemory`], [`Bell`]) over a heap-allocated ring of loom
//! atomics, with loom cells for the cells' bytes (so a byte read while the
//! producer may write it is a reported race) and a loom mutex and
//! condition variable for the futex. Two threads, a ring of 2 cells, a few
//! messages, every interleaving with a bounded number of preemptions:
//!
//! - `loom_shm_ring_wraps_around`: more messages than cells, through the
//!   slots twice and across the sequence words' wrap at 2^32; every message
//!   arrives once, in order and intact.
//! - `loom_shm_ring_full_waits_for_room`: the producer finds the ring full,
//!   announces `waiting` and its process sleeps; the consumer frees cells
//!   and wakes it; the reader sleeps too when the ring is empty. No lost
//!   wake-up on either side (loom reports a deadlock if one can happen).
//! - `loom_shm_reader_sleeps_and_is_woken`: the reader finds the ring
//!   empty, sets `sleeping` and sleeps; the writer publishes and rings;
//!   the reader always gets every message.
//!
//! `RUSTFLAGS="--cfg loom" cargo test --release -p converse-net --lib --
//! loom`.
use super::{Bell, RingMemory, seq_of};
use crate::sync::LoomAtomics;
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicU32, AtomicU64};
use loom::sync::{Arc, Condvar, Mutex};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Cells of the model ring.
const N: usize = 2;
/// Data bytes of a model cell.
const DATA: usize = 3;

/// A ring in heap memory, for the model.
struct ModelRing {
    head: AtomicU64,
    waiting: AtomicU32,
    seq: [AtomicU32; N],
    len: [AtomicU32; N],
    data: [UnsafeCell<[u8; DATA]>; N],
}

impl ModelRing {
    /// A ring whose next cell is number `start`, as if `start` cells had
    /// gone through it: `head` is `start`, and each slot holds the
    /// sequence word of the cell before it in that slot (0, the new ring's
    /// zeroed memory, if none was).
    fn starting_at(start: u64) -> ModelRing {
        ModelRing {
            head: AtomicU64::new(start),
            waiting: AtomicU32::new(0),
            seq: std::array::from_fn(|slot| {
                let next = start + ((slot + N - Self::slot(start)) % N) as u64;
                AtomicU32::new(next.checked_sub(N as u64).map_or(0, seq_of))
            }),
            len: std::array::from_fn(|_| AtomicU32::new(0)),
            data: std::array::from_fn(|_| UnsafeCell::new([0; DATA])),
        }
    }
}

impl RingMemory for ModelRing {
    type A = LoomAtomics;
    const CELLS: usize = N;
    fn head(&self) -> &AtomicU64 {
        &self.head
    }
    fn waiting(&self) -> &AtomicU32 {
        &self.waiting
    }
    fn seq(&self, slot: usize) -> &AtomicU32 {
        &self.seq[slot]
    }
    fn len(&self, slot: usize) -> &AtomicU32 {
        &self.len[slot]
    }
    fn with_data_mut<R>(&self, slot: usize, f: impl FnOnce(*mut u8) -> R) -> R {
        self.data[slot].with_mut(|p| f(p.cast()))
    }
    fn with_data<R>(&self, slot: usize, f: impl FnOnce(*const u8) -> R) -> R {
        self.data[slot].with(|p| f(p.cast()))
    }
}

/// A process's wake-up words, with a futex made of a loom mutex and
/// condition variable: `wait` compares the word under the mutex and
/// `wake_one` notifies under it, so, as with a futex, a wake-up after the
/// word changed is never missed by a waiter that compared before.
struct ModelBell {
    word: AtomicU32,
    sleeping: AtomicU32,
    futex: Mutex<()>,
    queue: Condvar,
}

impl ModelBell {
    fn new() -> ModelBell {
        ModelBell {
            word: AtomicU32::new(0),
            sleeping: AtomicU32::new(0),
            futex: Mutex::new(()),
            queue: Condvar::new(),
        }
    }
}

impl Bell for ModelBell {
    type A = LoomAtomics;
    fn word(&self) -> &AtomicU32 {
        &self.word
    }
    fn sleeping(&self) -> &AtomicU32 {
        &self.sleeping
    }
    fn wait(&self, seen: u32, _timeout: Option<Duration>) {
        let queued = self.futex.lock().unwrap();
        if self.word.load(Ordering::SeqCst) == seen {
            drop(self.queue.wait(queued).unwrap());
        }
    }
    fn wake_one(&self) {
        let _queue = self.futex.lock().unwrap();
        self.queue.notify_one();
    }
}

/// Message `k`'s bytes: 1 to `DATA` of them, each its own.
fn message(k: usize) -> Vec<u8> {
    (0..k % DATA + 1).map(|j| (k * 16 + j + 1) as u8).collect()
}

/// The producer's side of one ring: its index and cached `head`.
struct Producer {
    tail: u64,
    head_seen: u64,
}

impl Producer {
    fn new(start: u64) -> Producer {
        Producer {
            tail: start,
            head_seen: start,
        }
    }

    /// Tries to send message `k`: false if the ring is full (then the
    /// ring's `waiting` is set).
    fn try_send(&mut self, ring: &ModelRing, k: usize) -> bool {
        match ring.has_room(&mut self.head_seen, self.tail) {
            Some(true) => {}
            Some(false) => return false,
            None => panic!("the consumer's head is past the producer's tail"),
        }
        let bytes = message(k);
        ring.fill(self.tail, |cell| {
            // SAFETY: the cell is the producer's (`has_room`) and holds
            // `DATA >= bytes.len()` bytes.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), cell, bytes.len()) }
        });
        ring.publish(self.tail, bytes.len());
        self.tail += 1;
        true
    }
}

/// The consumer: takes the next cell if it is ready (its bytes), moving
/// `head` past it.
fn try_receive(ring: &ModelRing) -> Option<Vec<u8>> {
    let head = ring.consumer_head();
    if !ring.is_ready(head) {
        return None;
    }
    let len = ring.cell_len(head) as usize;
    assert!(len <= DATA, "a cell of {len} bytes");
    let mut bytes = vec![0; len];
    ring.read(head, |cell| {
        // SAFETY: the cell is the consumer's until `consumed` (`is_ready`)
        // and holds `len <= DATA` bytes.
        unsafe { std::ptr::copy_nonoverlapping(cell, bytes.as_mut_ptr(), len) }
    });
    ring.consumed(head);
    Some(bytes)
}

/// Runs a loom model exploring every interleaving with up to `preemptions`
/// preemptions (the bugs looked for need few context switches, and the
/// unbounded space does not finish in minutes: the core's models take 3).
fn model(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(preemptions);
    builder.check(f);
}

/// More messages than cells, both sides spinning: the producer goes
/// through the 2 slots twice, and the cells' sequence words wrap from
/// 2^32 - 1 to 0 on the way. Every message arrives, in order, intact.
#[test]
fn loom_shm_ring_wraps_around() {
    const MESSAGES: usize = 4;
    let start = (1u64 << 32) - 2;
    assert_eq!(seq_of(start + 1), 0, "the model crosses the sequence wrap");
    model(3, move || {
        let ring = Arc::new(ModelRing::starting_at(start));
        let producer = {
            let ring = ring.clone();
            loom::thread::spawn(move || {
                let mut p = Producer::new(start);
                for k in 0..MESSAGES {
                    while !p.try_send(&ring, k) {
                        loom::thread::yield_now();
                    }
                }
            })
        };
        for k in 0..MESSAGES {
            let bytes = loop {
                match try_receive(&ring) {
                    Some(bytes) => break bytes,
                    None => loom::thread::yield_now(),
                }
            };
            assert_eq!(bytes, message(k), "message {k}");
            // The end of a batch (nobody to wake here: the producer spins).
            ring.freed();
        }
        producer.join().unwrap();
        assert_eq!(ring.consumer_head(), start + MESSAGES as u64);
    });
}

/// Some execution of the full-ring model found the ring full.
static FOUND_FULL: AtomicBool = AtomicBool::new(false);

/// The ring starts full (2 cells published); the producer sends one more.
/// Where it finds no room, it sets `waiting` and its process sleeps (the
/// real module's progress thread: its last look is `room_now`, as
/// `can_send_more`'s), until the consumer, having freed a cell, sees the
/// flag and rings the producer's bell. The consumer sleeps when the ring
/// is empty and the producer rings its bell after publishing. Loom
/// reports a deadlock if either wake-up can be lost.
#[test]
fn loom_shm_ring_full_waits_for_room() {
    const MESSAGES: usize = 3;
    FOUND_FULL.store(false, Ordering::Relaxed);
    model(5, || {
        let ring = Arc::new(ModelRing::starting_at(0));
        let (writer_bell, reader_bell) = (Arc::new(ModelBell::new()), Arc::new(ModelBell::new()));
        let mut p = Producer::new(0);
        for k in 0..N {
            assert!(p.try_send(&ring, k));
        }
        let producer = {
            let (ring, writer_bell, reader_bell) =
                (ring.clone(), writer_bell.clone(), reader_bell.clone());
            loom::thread::spawn(move || {
                for k in N..MESSAGES {
                    while !p.try_send(&ring, k) {
                        FOUND_FULL.store(true, Ordering::Relaxed);
                        writer_bell.sleep_unless(|| ring.room_now(p.tail), None);
                    }
                    reader_bell.ring();
                }
            })
        };
        let mut k = 0;
        while k < MESSAGES {
            let mut moved = false;
            while let Some(bytes) = try_receive(&ring) {
                assert_eq!(bytes, message(k), "message {k}");
                k += 1;
                moved = true;
            }
            if moved && ring.freed() {
                writer_bell.ring();
            }
            if k < MESSAGES && !moved {
                reader_bell.sleep_unless(|| ring.is_ready(ring.consumer_head()), None);
            }
        }
        producer.join().unwrap();
        assert_eq!(ring.waiting.load(Ordering::SeqCst), 0, "a wait left behind");
    });
    assert!(
        FOUND_FULL.load(Ordering::Relaxed),
        "no execution found the ring full"
    );
}

/// Some execution of the sleeping-reader model slept.
static READER_SLEPT: AtomicBool = AtomicBool::new(false);

/// The reader finds the ring empty, sets `sleeping`, looks once more
/// (`is_ready`, as `has_incoming`) and sleeps; the writer publishes two
/// messages, ringing the reader's bell after each. The reader always gets
/// both (loom reports a deadlock if it can sleep through one).
#[test]
fn loom_shm_reader_sleeps_and_is_woken() {
    const MESSAGES: usize = 2;
    READER_SLEPT.store(false, Ordering::Relaxed);
    model(5, || {
        let ring = Arc::new(ModelRing::starting_at(0));
        let bell = Arc::new(ModelBell::new());
        let writer = {
            let (ring, bell) = (ring.clone(), bell.clone());
            loom::thread::spawn(move || {
                let mut p = Producer::new(0);
                for k in 0..MESSAGES {
                    assert!(p.try_send(&ring, k), "a ring of {N} cells has room");
                    bell.ring();
                }
            })
        };
        let mut k = 0;
        while k < MESSAGES {
            match try_receive(&ring) {
                Some(bytes) => {
                    assert_eq!(bytes, message(k), "message {k}");
                    k += 1;
                }
                None => {
                    if bell.sleep_unless(|| ring.is_ready(ring.consumer_head()), None) {
                        READER_SLEPT.store(true, Ordering::Relaxed);
                    }
                }
            }
        }
        writer.join().unwrap();
    });
    assert!(READER_SLEPT.load(Ordering::Relaxed), "no execution slept");
}
