//! Cqs enqueue + dequeue cost at a steady queue depth.
//!
//! Each figure is the mean time of one enqueue followed by one dequeue, with
//! the queue held at `DEPTH` items (prefilled with random priorities, then
//! every pair adds one random-priority item and removes the most urgent one),
//! best of `RUNS` runs. The baseline is the same loop on a plain
//! `BinaryHeap<Reverse<(u32, u64)>>` (priority word, sequence number): the
//! cost of the heap alone, without strategies, bit-vectors or the middle deque.
//!
//! In that steady state nearly every new item is the most urgent one: the
//! items that stay are the least urgent of all seen, and a random newcomer
//! is below them. `cqs_bitvec_hold_pair` measures the other case, the
//! "hold" model of event queues: each new item's priority is the one just
//! dequeued plus a random increment, so it lands somewhere inside the
//! queue. Its priorities are 2–3-word bit-vectors whose first 64 bits are
//! the item's time; its baseline, `binaryheap_hold_pair`, is the same loop
//! on a `BinaryHeap<Reverse<(u64, u64)>>` (time, sequence number).
//!
//! Output (DESIGN.md §11), one line per figure:
//!
//! ```text
//! bench cqs_int_pair <ns> ns baseline binaryheap_pair <ns> ns ratio <r>
//! bench cqs_bitvec_pair <ns> ns baseline binaryheap_pair <ns> ns ratio <r>
//! bench cqs_bitvec_hold_pair <ns> ns baseline binaryheap_hold_pair <ns> ns ratio <r>
//! ```
//!
//! Set `CONVERSE_BENCH_QUICK` to run 100 times fewer pairs (CI smoke check),
//! `CONVERSE_BENCH_ONLY=NAME` to run the figures whose names contain `NAME`.
mod common;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::hint::black_box;
use std::time::Instant;

use converse::csd::cqs::{BitPrio, Cqs, Queueing};

/// Number of items kept in the queue while measuring.
const DEPTH: usize = 1_000;
/// Enqueue + dequeue pairs per run (divided by 100 in quick mode).
const PAIRS: u64 = 4_000_000;
/// Runs per figure; the best one is reported.
const RUNS: usize = 3;

/// Marsaglia's xorshift64: cheap, deterministic, good enough for priorities.
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> Self {
        XorShift(seed | 1)
    }

    #[inline]
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// Integer priority in -500..500.
#[inline]
fn int_prio(rng: &mut XorShift) -> i32 {
    (rng.next() % 1000) as i32 - 500
}

/// A random 33..=96-bit (2–3 word) bit-vector. The first word takes one of
/// 16 values around the middle, so equal first words are common and the
/// comparison has to look at the following words.
#[inline]
fn bitvec_prio(rng: &mut XorShift) -> BitPrio {
    let r = rng.next();
    let bits = 33 + (r % 64) as u32;
    let first = 0x7FFF_FFF8u32.wrapping_add(((r >> 8) % 16) as u32);
    let words = [first, rng.next() as u32, (rng.next() >> 32) as u32];
    BitPrio::new(bits, &words[..bits.div_ceil(32) as usize]).expect("word count matches bits")
}

/// Mean ns per pair of a run that took `elapsed_ns` for `pairs` pairs.
fn per_pair(elapsed_ns: u128, pairs: u64) -> f64 {
    elapsed_ns as f64 / pairs as f64
}

fn cqs_pairs(pairs: u64, mut prio: impl FnMut(&mut XorShift) -> Queueing) -> u128 {
    let mut rng = XorShift::new(0x9E37_79B9_7F4A_7C15);
    let mut q = Cqs::new();
    for i in 0..DEPTH as u64 {
        q.enqueue(i, prio(&mut rng));
    }
    let start = Instant::now();
    for i in 0..pairs {
        q.enqueue(black_box(i), prio(&mut rng));
        black_box(q.dequeue());
    }
    let elapsed = start.elapsed().as_nanos();
    assert_eq!(q.len(), DEPTH);
    elapsed
}

fn binaryheap_pairs(pairs: u64) -> u128 {
    let mut rng = XorShift::new(0x9E37_79B9_7F4A_7C15);
    let mut heap = BinaryHeap::with_capacity(DEPTH + 1);
    let word = |rng: &mut XorShift| (int_prio(rng) as u32).wrapping_add(0x8000_0000);
    for seq in 0..DEPTH as u64 {
        heap.push(Reverse((word(&mut rng), seq)));
    }
    let start = Instant::now();
    for i in 0..pairs {
        let seq = DEPTH as u64 + i;
        heap.push(Reverse((word(&mut rng), black_box(seq))));
        black_box(heap.pop());
    }
    let elapsed = start.elapsed().as_nanos();
    assert_eq!(heap.len(), DEPTH);
    elapsed
}

/// A hold-model time: up to 2^40, so that increments never overflow.
#[inline]
fn start_time(rng: &mut XorShift) -> u64 {
    rng.next() >> 24
}

/// A hold-model increment: up to 2^20.
#[inline]
fn increment(rng: &mut XorShift) -> u64 {
    rng.next() >> 44
}

/// The 64..=96-bit (2–3 word) bit-vector whose first 64 bits are `time`.
#[inline]
fn hold_prio(time: u64, rng: &mut XorShift) -> BitPrio {
    let r = rng.next();
    let bits = 64 + (r % 33) as u32;
    let words = [(time >> 32) as u32, time as u32, (r >> 32) as u32];
    BitPrio::new(bits, &words[..bits.div_ceil(32) as usize]).expect("word count matches bits")
}

fn cqs_hold_pairs(pairs: u64) -> u128 {
    let mut rng = XorShift::new(0x2545_F491_4F6C_DD1D);
    let mut q = Cqs::new();
    for _ in 0..DEPTH {
        let t = start_time(&mut rng);
        q.enqueue(t, Queueing::BFifo(hold_prio(t, &mut rng)));
    }
    let start = Instant::now();
    for _ in 0..pairs {
        let now = q.dequeue().expect("the queue holds DEPTH items");
        let t = black_box(now) + increment(&mut rng);
        q.enqueue(t, Queueing::BFifo(hold_prio(t, &mut rng)));
    }
    let elapsed = start.elapsed().as_nanos();
    assert_eq!(q.len(), DEPTH);
    elapsed
}

fn binaryheap_hold_pairs(pairs: u64) -> u128 {
    let mut rng = XorShift::new(0x2545_F491_4F6C_DD1D);
    let mut heap = BinaryHeap::with_capacity(DEPTH + 1);
    for seq in 0..DEPTH as u64 {
        heap.push(Reverse((start_time(&mut rng), seq)));
    }
    let start = Instant::now();
    for i in 0..pairs {
        let Reverse((now, _)) = heap.pop().expect("the heap holds DEPTH items");
        let t = black_box(now) + increment(&mut rng);
        heap.push(Reverse((t, DEPTH as u64 + i)));
    }
    let elapsed = start.elapsed().as_nanos();
    assert_eq!(heap.len(), DEPTH);
    elapsed
}

fn report(name: &str, value: f64, baseline_name: &str, baseline: f64) {
    println!(
        "bench {name} {value:.2} ns baseline {baseline_name} {baseline:.2} ns ratio {:.2}",
        value / baseline
    );
}

fn main() {
    let quick = std::env::var_os("CONVERSE_BENCH_QUICK").is_some();
    let pairs = if quick { PAIRS / 100 } else { PAIRS };

    // The runs of the three loops are interleaved, so that a disturbance of
    // the machine (other jobs) hits them alike; each keeps its best run.
    let (mut baseline, mut int, mut bitvec) = (f64::INFINITY, f64::INFINITY, f64::INFINITY);
    let (mut hold_baseline, mut hold) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..RUNS {
        baseline = baseline.min(per_pair(binaryheap_pairs(pairs), pairs));
        if common::wanted("cqs_int_pair") {
            let ns = cqs_pairs(pairs, |rng| Queueing::IFifo(int_prio(rng)));
            int = int.min(per_pair(ns, pairs));
        }
        if common::wanted("cqs_bitvec_pair") {
            let ns = cqs_pairs(pairs, |rng| Queueing::BFifo(bitvec_prio(rng)));
            bitvec = bitvec.min(per_pair(ns, pairs));
        }
        if common::wanted("cqs_bitvec_hold_pair") {
            hold_baseline = hold_baseline.min(per_pair(binaryheap_hold_pairs(pairs), pairs));
            hold = hold.min(per_pair(cqs_hold_pairs(pairs), pairs));
        }
    }

    if common::wanted("cqs_int_pair") {
        report("cqs_int_pair", int, "binaryheap_pair", baseline);
    }
    if common::wanted("cqs_bitvec_pair") {
        report("cqs_bitvec_pair", bitvec, "binaryheap_pair", baseline);
    }
    if common::wanted("cqs_bitvec_hold_pair") {
        report(
            "cqs_bitvec_hold_pair",
            hold,
            "binaryheap_hold_pair",
            hold_baseline,
        );
    }
}
