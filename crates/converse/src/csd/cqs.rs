//! Cqs, the Converse scheduler's priority queue.
//!
//! Every message a program enqueues with `CsdEnqueue*` waits here until the
//! scheduler runs it. Each item carries a *priority* and a *queueing strategy*
//! ([`Queueing`]); [`Cqs::dequeue`] always returns the most urgent item.
//!
//! # Priorities
//!
//! A Converse priority is an arbitrary-precision binary fraction in `[0, 1)`:
//! the bit-string `0011000101` is the number `.0011000101`. Smaller numbers are
//! more urgent. A bit-vector priority ([`BitPrio`]) holds `bits` significant
//! bits in `u32` words, the most significant bit of word 0 first, padding bits
//! of the last word zero. Integer priorities are shorthands for bit-vectors:
//! `p: i32` is the 32-bit vector `p + 2^31`, `p: i64` the 64-bit vector
//! `p + 2^63` (high word first), so integer 0 is the *middle* priority `.1`.
//! Plain FIFO/LIFO use the middle priority too.
//!
//! # Invariants
//!
//! - **Normalisation.** Priorities are compared as numbers, not as strings of
//!   a given length: padding bits are masked off and trailing zero words are
//!   dropped, so `.1`, `.10` and `.1000…0` (any length) are one priority. After
//!   normalisation, two priorities compare word by word, and a proper prefix is
//!   smaller. Integer, long and bit-vector priorities therefore share one
//!   ordering: `IFifo(0)`, `LFifo(0)`, `BFifo(".1")` and `Fifo` are all the
//!   middle priority, and `IFifo(1)` equals `LFifo(1 << 32)`.
//! - **Ordering.** `dequeue` returns an item of the smallest priority present.
//! - **Ties.** Among items of equal priority, a FIFO-strategy item is placed
//!   behind all of them and a LIFO-strategy item in front of all of them. So
//!   one priority's items come out as: the LIFO items, newest first, then the
//!   FIFO items, oldest first — exactly as a deque fed with `push_front` (LIFO)
//!   and `push_back` (FIFO).
//!
//! # Representation and cost
//!
//! The queue has four parts, split by normalised priority, so that no
//! priority is in two parts and each part can be fast for what it holds:
//!
//! - **middle**, a [`VecDeque`] of the items of exactly the middle priority,
//!   however they were enqueued (`Fifo`, `IFifo(0)`, `BFifo(".1")`, …): most
//!   messages, O(1) to enqueue and dequeue, and the tie rule is the deque's
//!   `push_front`/`push_back`.
//! - **window**, one bucket (a `VecDeque`) per one-word priority near the
//!   middle — the integer priorities `-2048..2048` — found through a
//!   two-level bitmap (64 words and a summary word): O(1) enqueue and
//!   dequeue, no comparisons. Allocated on first use.
//! - **short**, a min-heap of the items of the other one-word priorities
//!   (integer priorities outside the window, one-word bit-vectors). Its node is one `u128`, `(first word, sequence,
//!   slot)`, so one integer comparison orders two items.
//! - **long**, a min-heap of the items of priorities of two words or more.
//!   Its node holds the first two words inline; only priorities of three
//!   words or more keep their words (in the slot) and look at them when the
//!   first two words tie.
//!
//! In both heaps, FIFO items get increasing sequence numbers and LIFO items
//! decreasing ones, which yields the tie rule. Items live in a slab beside
//! each heap, so heap moves copy small `Copy` nodes. The heaps are 4-ary:
//! O(log n) per operation, half as deep as binary heaps. In front of each
//! heap, a sorted run of up to eight of its most urgent nodes takes the
//! pushes that would go to the heap's root (see `PrioHeap`): a queue
//! whose new items are more urgent than what waits — a search going
//! deeper, or random priorities in the steady state — pushes and pops
//! them in a few comparisons. That took the 2–3-word bit-vector pair at
//! depth 1,000 from 1.5–2.0× a `BinaryHeap` push+pop to 0.6–0.9×. `dequeue` and
//! `front_priority` compare the four fronts by first word only, since equal
//! priorities never sit in different parts. Integer and long priorities never
//! allocate (beyond the queue's own buffers). With the window, the common
//! integer-priority case costs about 20 ns per enqueue + dequeue pair at depth
//! 1,000 here, against 45-55 ns through the heap.
//!
//! # Concurrency
//!
//! A `Cqs` is single-threaded: each PE owns its queue and is the only thread
//! that touches it. The node-level queue, shared by the PEs of a node, is a
//! `Cqs` wrapped in a lock elsewhere; the scheduler compares the two fronts
//! with [`Cqs::front_priority`] to decide which to run next.
//!
//! Unlike Converse, the queue copies bit-vector priorities (a [`BitPrio`] is
//! owned), so the caller need not keep a priority alive while its message waits.
//!
//! Also unlike Charm++'s implementation (which follows the manual less
//! closely here), priorities compare purely as numbers: `Fifo`, `IFifo(0)`,
//! `LFifo(0)` and `BFifo(".1")` are one priority and keep FIFO/LIFO order
//! among themselves, and a bit-vector with extra zero words equals the shorter
//! one. Charm++ runs `IFifo(0)` after plain FIFO items, and ranks a longer
//! priority whose extra words are zero after the shorter one.

use std::cmp::Ordering;
use std::collections::VecDeque;
use std::error::Error;
use std::fmt;

/// The first (and only) word of the middle priority `.1`.
const MIDDLE_WORD: u32 = 0x8000_0000;

/// Maps an integer priority to its one-word bit-vector: `p + 2^31`.
#[inline]
fn int_word(p: i32) -> u32 {
    (p as u32).wrapping_add(MIDDLE_WORD)
}

/// Maps a long-integer priority to its two-word bit-vector `p + 2^63`,
/// returned as `(high word, low word)`.
#[inline]
fn long_words(p: i64) -> (u32, u32) {
    let v = (p as u64).wrapping_add(1 << 63);
    ((v >> 32) as u32, v as u32)
}

/// The length of `words` without its trailing zero words.
#[inline]
fn significant_len(words: &[u32]) -> usize {
    words.iter().rposition(|&w| w != 0).map_or(0, |i| i + 1)
}

/// Words of a priority kept inline up to this many: a bit-vector priority
/// of up to 96 bits (the common case) never allocates, neither when made
/// nor while queued.
const INLINE_WORDS: usize = 3;

/// A list of priority words: inline up to [`INLINE_WORDS`], else boxed.
#[derive(Clone, Default)]
struct PrioWords {
    /// How many words (`inline[..len]`, or `heap[..len]` beyond
    /// `INLINE_WORDS`).
    len: u32,
    /// The words when there are at most `INLINE_WORDS`; zeros beyond `len`.
    inline: [u32; INLINE_WORDS],
    /// The words when there are more (empty, not allocated, otherwise).
    heap: Box<[u32]>,
}

impl PrioWords {
    #[inline]
    fn from_slice(words: &[u32]) -> PrioWords {
        PrioWords::from_slice_masked(words, u32::MAX)
    }

    /// The words of `words` with the last one ANDed with `last_mask`.
    #[inline]
    fn from_slice_masked(words: &[u32], last_mask: u32) -> PrioWords {
        let mut w = PrioWords {
            len: u32::try_from(words.len()).expect("a priority has at most 2^32 words"),
            ..PrioWords::default()
        };
        // One case per inline length, masking in registers: a
        // `copy_from_slice` of a variable length is a call to `memcpy` (for
        // at most 12 bytes), and masking the copy afterwards would read back
        // what was just stored.
        match *words {
            [] => {}
            [a] => w.inline[0] = a & last_mask,
            [a, b] => [w.inline[0], w.inline[1]] = [a, b & last_mask],
            [a, b, c] => w.inline = [a, b, c & last_mask],
            _ => {
                let mut heap: Box<[u32]> = words.into();
                if let Some(last) = heap.last_mut() {
                    *last &= last_mask;
                }
                w.heap = heap;
            }
        }
        w
    }

    #[inline]
    fn as_slice(&self) -> &[u32] {
        let len = self.len as usize;
        if len <= INLINE_WORDS {
            &self.inline[..len]
        } else {
            &self.heap[..len]
        }
    }

    #[inline]
    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Keeps the first `n` words (`n` at most the length).
    fn truncate(&mut self, n: usize) {
        debug_assert!(n <= self.len as usize);
        if n <= INLINE_WORDS && self.len as usize > INLINE_WORDS {
            let heap = std::mem::take(&mut self.heap);
            self.inline[..n].copy_from_slice(&heap[..n]);
        } else if n <= INLINE_WORDS {
            self.inline[n..].fill(0);
        }
        self.len = n as u32;
    }
}

impl PartialEq for PrioWords {
    fn eq(&self, other: &PrioWords) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for PrioWords {}

impl fmt::Debug for PrioWords {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

/// A bit-vector priority: an arbitrary-precision binary fraction in `[0, 1)`.
///
/// `bits` significant bits are stored in `u32` words: the most significant
/// bit of word 0 is the first bit of the fraction, and the last word is padded
/// with zero bits. For example the priority `.0011000101` is
/// `BitPrio::new(10, &[0x3140_0000])`.
///
/// Converse does not copy priorities and makes the caller keep them alive
/// until the message leaves the queue; this type is an owned copy instead.
///
/// Equality (`==`) on `BitPrio` is structural: `.1` with 1 bit and `.10` with
/// 2 bits are different values that denote the same priority. To compare
/// priorities as numbers, compare their [`prio`](BitPrio::prio) views.
#[doc(alias = "prio")]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BitPrio {
    /// Number of significant bits.
    bits: u32,
    /// `ceil(bits / 32)` words, padding bits zero.
    words: PrioWords,
}

impl BitPrio {
    /// Makes a bit-vector priority of `bits` bits from `words`.
    ///
    /// Padding bits beyond `bits` in the last word are masked off. Zero bits
    /// (and no words) is allowed: it is the priority 0, the most urgent one.
    ///
    /// # Errors
    ///
    /// [`PrioError`] if `words.len()` is not exactly `ceil(bits / 32)`: too
    /// few or too many words.
    pub fn new(bits: u32, words: &[u32]) -> Result<BitPrio, PrioError> {
        let needed = bits.div_ceil(32) as usize;
        if words.len() != needed {
            return Err(PrioError {
                bits,
                given: words.len(),
            });
        }
        let padding = bits.wrapping_neg() % 32;
        // `padding` is in 0..32, so the shift cannot overflow.
        let words = PrioWords::from_slice_masked(words, u32::MAX << padding);
        Ok(BitPrio { bits, words })
    }

    /// The 32-bit vector of the integer priority `p`, i.e. `p + 2^31`, as
    /// `CQS_QUEUEING_IFIFO` and `CQS_QUEUEING_ILIFO` convert it. Integer 0
    /// becomes the middle priority `.1`.
    pub fn from_int(p: i32) -> BitPrio {
        BitPrio {
            bits: 32,
            words: PrioWords::from_slice(&[int_word(p)]),
        }
    }

    /// The 64-bit vector of the long-integer priority `p`, i.e. `p + 2^63`,
    /// high word first, as `CQS_QUEUEING_LFIFO` and `CQS_QUEUEING_LLIFO`
    /// convert it. Long 0 becomes the middle priority `.1`.
    pub fn from_long(p: i64) -> BitPrio {
        let (hi, lo) = long_words(p);
        BitPrio {
            bits: 64,
            words: PrioWords::from_slice(&[hi, lo]),
        }
    }

    /// The number of significant bits.
    pub fn bits(&self) -> u32 {
        self.bits
    }

    /// The words, `ceil(bits / 32)` of them, most significant first, padding
    /// bits zero.
    pub fn words(&self) -> &[u32] {
        self.words.as_slice()
    }

    /// This priority as a normalised, comparable view (trailing zero words
    /// dropped), in the same ordering space as [`Cqs::front_priority`].
    pub fn prio(&self) -> PrioRef<'_> {
        let words = self.words();
        let words = &words[..significant_len(words)];
        PrioRef {
            first: words.first().copied().unwrap_or(0),
            second: words.get(1).copied().unwrap_or(0),
            more: words.get(2..).unwrap_or(&[]),
        }
    }
}

/// The error of [`BitPrio::new`]: the number of words does not match the
/// number of bits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrioError {
    /// The requested number of bits.
    bits: u32,
    /// The number of words given.
    given: usize,
}

impl fmt::Display for PrioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a bit-vector priority of {} bits needs exactly {} words of 32 bits, but {} were given",
            self.bits,
            self.bits.div_ceil(32),
            self.given
        )
    }
}

impl Error for PrioError {}

/// How [`Cqs::enqueue`] places an item: its priority and what it does among
/// items of equal priority.
///
/// A FIFO strategy puts the item behind all items of its priority; a LIFO
/// strategy puts it in front of all of them. Integer, long and bit-vector
/// priorities are compared in one space (see [`BitPrio`]): integer `p` is the
/// fraction `(p + 2^31) / 2^32`, long `p` is `(p + 2^63) / 2^64`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Queueing {
    /// The middle priority, behind all other items of that priority.
    #[doc(alias = "CQS_QUEUEING_FIFO")]
    Fifo,
    /// The middle priority, in front of all other items of that priority.
    #[doc(alias = "CQS_QUEUEING_LIFO")]
    Lifo,
    /// Integer priority (smaller runs first; 0 is the middle priority),
    /// behind all other items of that priority.
    #[doc(alias = "CQS_QUEUEING_IFIFO")]
    IFifo(i32),
    /// Integer priority (smaller runs first; 0 is the middle priority),
    /// in front of all other items of that priority.
    #[doc(alias = "CQS_QUEUEING_ILIFO")]
    ILifo(i32),
    /// Long-integer priority (smaller runs first; 0 is the middle priority),
    /// behind all other items of that priority.
    #[doc(alias = "CQS_QUEUEING_LFIFO")]
    LFifo(i64),
    /// Long-integer priority (smaller runs first; 0 is the middle priority),
    /// in front of all other items of that priority.
    #[doc(alias = "CQS_QUEUEING_LLIFO")]
    LLifo(i64),
    /// Bit-vector priority, behind all other items of that priority.
    #[doc(alias = "CQS_QUEUEING_BFIFO")]
    BFifo(BitPrio),
    /// Bit-vector priority, in front of all other items of that priority.
    #[doc(alias = "CQS_QUEUEING_BLIFO")]
    BLifo(BitPrio),
}

impl Queueing {
    /// This placement's priority as a comparable view, in the one space the
    /// queue orders by (FIFO and LIFO: the middle priority). Nothing is
    /// allocated: a library that keeps its own order of queued items (the
    /// extensions' seed balancer) compares these.
    pub fn prio(&self) -> PrioRef<'_> {
        match self {
            Queueing::Fifo | Queueing::Lifo => PrioRef::MIDDLE,
            Queueing::IFifo(p) | Queueing::ILifo(p) => PrioRef {
                first: int_word(*p),
                second: 0,
                more: &[],
            },
            Queueing::LFifo(p) | Queueing::LLifo(p) => {
                let (first, second) = long_words(*p);
                PrioRef {
                    first,
                    second,
                    more: &[],
                }
            }
            Queueing::BFifo(b) | Queueing::BLifo(b) => b.prio(),
        }
    }
}

/// A borrowed view of a normalised priority, totally ordered as binary
/// fractions: `a < b` means `a` is more urgent.
///
/// Views come from [`Cqs::front_priority`] and [`BitPrio::prio`]; the
/// scheduler compares the fronts of the PE queue and the node queue with them.
/// Since trailing zero words are dropped, equal numbers give equal views
/// whatever their original length.
#[doc(alias = "CqsPrioGT")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PrioRef<'a> {
    // The normalised words are `first, second, more…`, missing words being
    // zero. Field order matters: the derived order compares `first`, then
    // `second`, then `more` lexicographically (a proper prefix is smaller).
    // Because `more` never ends in a zero word, that is exactly the
    // binary-fraction order, and equal numbers have equal fields.
    /// The first word (0 if there is none).
    first: u32,
    /// The second word (0 if there is none).
    second: u32,
    /// The words after the second, without trailing zero words.
    more: &'a [u32],
}

impl PrioRef<'_> {
    /// The middle priority `.1`: that of `Fifo`, `Lifo`, integer 0 and long 0.
    pub const MIDDLE: PrioRef<'static> = PrioRef {
        first: MIDDLE_WORD,
        second: 0,
        more: &[],
    };
}

impl<'a> PrioRef<'a> {
    /// The normalised words, most significant first, without trailing zero
    /// words (so the priority 0 has none).
    pub fn words(&self) -> impl Iterator<Item = u32> + 'a {
        let len = if !self.more.is_empty() {
            2 + self.more.len()
        } else if self.second != 0 {
            2
        } else {
            usize::from(self.first != 0)
        };
        [self.first, self.second]
            .into_iter()
            .chain(self.more.iter().copied())
            .take(len)
    }
}

/// A normalised priority, as the queue stores it.
struct Key {
    /// The first word (0 if there is none).
    first: u32,
    /// The second word (0 if there is none).
    second: u32,
    /// The whole normalised word list when it has three words or more, else
    /// empty (allocated only beyond `INLINE_WORDS`).
    words: PrioWords,
}

impl Key {
    /// A one-word priority.
    #[inline]
    fn one(first: u32) -> Key {
        Key {
            first,
            second: 0,
            words: PrioWords::default(),
        }
    }

    /// The priority of a long integer (at most two words, never allocated).
    #[inline]
    fn long(p: i64) -> Key {
        let (first, second) = long_words(p);
        Key {
            first,
            second,
            words: PrioWords::default(),
        }
    }

    /// The normalised priority of `b`, reusing its allocation when it has
    /// three words or more.
    #[inline]
    fn bits(b: BitPrio) -> Key {
        let mut words = b.words;
        if words.len as usize <= INLINE_WORDS {
            // The inline words are zero beyond `len`, so the trailing zero
            // words of all three are those of the priority: normalising is
            // shortening `len`, and only three words need the list.
            let [first, second, third] = words.inline;
            return if third != 0 {
                words.len = 3;
                Key {
                    first,
                    second,
                    words,
                }
            } else {
                Key {
                    first,
                    second,
                    words: PrioWords::default(),
                }
            };
        }
        Key::bits_boxed(words)
    }

    /// [`Key::bits`] of a priority of more than [`INLINE_WORDS`] words.
    #[cold]
    fn bits_boxed(mut words: PrioWords) -> Key {
        let n = significant_len(words.as_slice());
        let word = |i: usize| if i < n { words.as_slice()[i] } else { 0 };
        let (first, second) = (word(0), word(1));
        let words = match n {
            0..=2 => PrioWords::default(),
            _ => {
                words.truncate(n);
                words
            }
        };
        Key {
            first,
            second,
            words,
        }
    }

    /// Whether the priority has (at most) one word after normalisation.
    #[inline]
    fn is_one_word(&self) -> bool {
        self.second == 0 && self.words.is_empty()
    }
}

/// Children per heap node. A 4-ary heap is half as deep as a binary one, and
/// with small `Copy` nodes the choice of the smallest child compiles to
/// conditional moves, so the cost of a pop is mostly its chain of dependent
/// loads, one per level. ([`min_child`] is written for 4.)
const ARITY: usize = 4;

/// Sequence numbers are `N::SEQ_MID + n` for the n-th FIFO push and
/// `N::SEQ_MID - n` for the n-th LIFO push since the heap was last empty
/// (or renumbered), so FIFO pushes sort after and LIFO pushes before
/// everything of their priority. The short heap's fit in 63 bits: leaving
/// that range would take 2^62 pushes (over a century at one per
/// nanosecond) without the heap ever emptying. The long heap's have 31 bits
/// (its node is one `u128` too): after 2^30 pushes without emptying, the
/// heap renumbers its items in queue order (`PrioHeap::renumber`), which
/// keeps every order.
const SHORT_SEQ_MID: u64 = 1 << 62;

/// A heap node: a small `Copy` sort key and the slot of its item.
trait Node: Copy {
    /// Whether this heap keeps the words of priorities of three words or
    /// more, by slot.
    const KEEPS_WORDS: bool;
    /// The middle of the sequence numbers (see [`SHORT_SEQ_MID`]): pushes
    /// since the heap was last empty stay below it.
    const SEQ_MID: u64;
    /// The same node with sequence number `seq`.
    fn with_seq(self, seq: u64) -> Self;
    /// The node of `key`, with sequence number `seq`, for the item in `slot`.
    fn new(key: &Key, seq: u64, slot: u32) -> Self;
    /// The slot of the item.
    fn slot(self) -> usize;
    /// The priority's first word.
    fn first(self) -> u32;
    /// The priority's second word (0 if it has none).
    fn second(self) -> u32;
    /// Whether the priority has more than two words (kept by slot).
    fn has_more(self) -> bool;
    /// Whether `self` comes out before `other`; `words` holds the heap's
    /// priority words by slot (see `KEEPS_WORDS`).
    fn less(self, other: Self, words: &[PrioWords]) -> bool;
}

/// Node of the short heap (one-word priorities): one `u128` whose integer
/// order is the queue order,
///
/// ```text
/// bits 127..96  priority word
/// bits  95..32  sequence number
/// bits  31..0   slot
/// ```
///
/// The slot never decides: sequence numbers are unique.
#[derive(Clone, Copy)]
struct ShortNode(u128);

impl Node for ShortNode {
    const KEEPS_WORDS: bool = false;
    const SEQ_MID: u64 = SHORT_SEQ_MID;

    #[inline]
    fn with_seq(self, seq: u64) -> Self {
        let mask = (u128::from(u64::MAX) << 32) & !(u128::from(u32::MAX) << 96);
        ShortNode((self.0 & !mask) | (u128::from(seq) << 32))
    }

    #[inline]
    fn new(key: &Key, seq: u64, slot: u32) -> Self {
        ShortNode((u128::from(key.first) << 96) | (u128::from(seq) << 32) | u128::from(slot))
    }

    #[inline]
    fn slot(self) -> usize {
        self.0 as u32 as usize
    }

    #[inline]
    fn first(self) -> u32 {
        (self.0 >> 96) as u32
    }

    #[inline]
    fn second(self) -> u32 {
        0
    }

    #[inline]
    fn has_more(self) -> bool {
        false
    }

    #[inline]
    fn less(self, other: Self, _: &[PrioWords]) -> bool {
        self.0 < other.0
    }
}

/// Node of the long heap (priorities of two words or more): one `u128`,
///
/// ```text
/// bits 127..96  first word
/// bits  95..64  second word
/// bit   63      more than two words
/// bits  62..32  sequence number (31 bits)
/// bits  31..0   slot
/// ```
///
/// whose integer order is the queue order, except between two nodes with
/// equal first two words that both have more: for those the words after the
/// second decide first. 16 bytes, as the short heap's node: four siblings
/// are one cache line, and a comparison is one of two integers.
#[derive(Clone, Copy)]
struct LongNode(u128);

impl LongNode {
    /// The "more than two words" bit.
    const MORE: u128 = 1 << 63;
}

// The largest sequence number, `2 * LONG_SEQ_MID - 1` (a FIFO push just
// before renumbering), fits the node's 31 bits below the more-bit.
const _: () = assert!(2 * LONG_SEQ_MID - 1 < 1 << 31);

/// The long heap's [`Node::SEQ_MID`]: sequence numbers have 31 bits.
const LONG_SEQ_MID: u64 = if cfg!(test) {
    // Small in tests, so that they renumber often.
    1 << 7
} else {
    1 << 30
};

impl Node for LongNode {
    const KEEPS_WORDS: bool = true;
    const SEQ_MID: u64 = LONG_SEQ_MID;

    #[inline]
    fn new(key: &Key, seq: u64, slot: u32) -> Self {
        debug_assert!(seq < 1 << 31);
        let more = if key.words.is_empty() { 0 } else { Self::MORE };
        LongNode(
            (u128::from(key.first) << 96)
                | (u128::from(key.second) << 64)
                | more
                | (u128::from(seq) << 32)
                | u128::from(slot),
        )
    }

    #[inline]
    fn with_seq(self, seq: u64) -> Self {
        debug_assert!(seq < 1 << 31);
        let mask = u128::from(u32::MAX >> 1) << 32;
        LongNode((self.0 & !mask) | (u128::from(seq) << 32))
    }

    #[inline]
    fn slot(self) -> usize {
        self.0 as u32 as usize
    }

    #[inline]
    fn first(self) -> u32 {
        (self.0 >> 96) as u32
    }

    #[inline]
    fn second(self) -> u32 {
        (self.0 >> 64) as u32
    }

    #[inline]
    fn has_more(self) -> bool {
        self.0 & Self::MORE != 0
    }

    #[inline]
    fn less(self, other: Self, words: &[PrioWords]) -> bool {
        if self.0 >> 64 == other.0 >> 64 && self.0 & other.0 & Self::MORE != 0 {
            more_less(self, other, words)
        } else {
            self.0 < other.0
        }
    }
}

/// [`LongNode::less`] for two nodes whose first two words are equal and
/// which both have more: the further words decide, then the sequence number.
/// Out of line, to keep the common comparison compact.
#[inline(never)]
fn more_less(a: LongNode, b: LongNode, words: &[PrioWords]) -> bool {
    match words[a.slot()].as_slice()[2..].cmp(&words[b.slot()].as_slice()[2..]) {
        // The low half: the sequence number decides (the slot never does:
        // sequence numbers are unique).
        Ordering::Equal => (a.0 as u64) < (b.0 as u64),
        ord => ord == Ordering::Less,
    }
}

/// The index of the smallest of four sibling nodes, and that node.
#[inline]
fn min_child<N: Node>(nodes: &[N; ARITY], words: &[PrioWords]) -> (usize, N) {
    // A tournament of selects rather than branches (which child is smallest
    // is unpredictable); the two first rounds are independent.
    let pick = |i: usize, a: N, j: usize, b: N| {
        if b.less(a, words) { (j, b) } else { (i, a) }
    };
    let (i, a) = pick(0, nodes[0], 1, nodes[1]);
    let (j, b) = pick(2, nodes[2], 3, nodes[3]);
    pick(i, a, j, b)
}

/// The index of the smallest node of `nodes` (not empty).
fn min_index<N: Node>(nodes: &[N], words: &[PrioWords]) -> usize {
    let mut best = 0;
    for (i, &node) in nodes.iter().enumerate().skip(1) {
        if node.less(nodes[best], words) {
            best = i;
        }
    }
    best
}

/// Moves `node` up from the hole at `pos` to its place.
#[inline]
fn sift_up<N: Node>(nodes: &mut [N], words: &[PrioWords], mut pos: usize, node: N) {
    while pos > 0 {
        let parent = (pos - 1) / ARITY;
        let above = nodes[parent];
        if !node.less(above, words) {
            break;
        }
        nodes[pos] = above;
        pos = parent;
    }
    nodes[pos] = node;
}

/// Refills the hole at the root with `node`: the hole first goes all the way
/// down along the smallest children, then `node` moves up from the bottom
/// (where it usually belongs, having been the last leaf). This saves the
/// comparison with `node` on the way down.
fn sift_down_to_bottom<N: Node>(nodes: &mut [N], words: &[PrioWords], node: N) {
    let len = nodes.len();
    let mut pos = 0;
    loop {
        let child = ARITY * pos + 1;
        let (best, moved) = if let Some(children) = nodes.get(child..child + ARITY) {
            let (i, smallest) = min_child(children.try_into().expect("ARITY nodes"), words);
            (child + i, smallest)
        } else if child < len {
            let best = child + min_index(&nodes[child..], words);
            (best, nodes[best])
        } else {
            break;
        };
        nodes[pos] = moved;
        pos = best;
    }
    sift_up(nodes, words, pos, node);
}

/// Nodes kept in a heap's front run (see [`PrioHeap`]).
const FRONT_RUN: usize = 8;

/// An `ARITY`-ary min-heap of small nodes, behind a short sorted *front
/// run* of its most urgent ones; the items live in a slab of slots beside
/// it, so that heap moves never move a `T`.
///
/// The front run holds up to [`FRONT_RUN`] nodes, most urgent last, each
/// of which comes out before every node in the heap. A push that comes out
/// before the heap's top (and before the run's least urgent node, if the
/// run is full) goes into the run: a few comparisons and moves within one
/// cache line, where the heap would sift the node up to its root and the
/// next pop would sift the last leaf all the way down again. That is the
/// case of a handler that enqueues work more urgent than everything
/// waiting (a search going deeper), and the steady state of a queue fed
/// with random priorities, whose waiting items drift towards the least
/// urgent ones. Any other push costs one comparison more than the plain
/// heap; a push into a full run also moves the run's least urgent node
/// into the heap. Pops take from the run; the pop that empties it moves
/// the heap's top into it, so that the run is empty only when the heap is
/// (and the top is always the run's last node: one look).
struct PrioHeap<T, N> {
    /// The front run: nodes that come out before every node of `nodes`,
    /// least urgent first (so the most urgent pops off the end). Empty only
    /// if `nodes` is.
    front: Vec<N>,
    /// The heap, root first.
    nodes: Vec<N>,
    /// Items by slot; `None` for a free slot.
    items: Vec<Option<T>>,
    /// If `N::KEEPS_WORDS`, each slot's [`Key::words`]; else unused.
    words: Vec<PrioWords>,
    /// Free slots, reused before `items` grows.
    free: Vec<u32>,
    /// Pushes since the heap was last empty or renumbered (see
    /// [`SHORT_SEQ_MID`]).
    pushes: u64,
}

impl<T, N: Node> PrioHeap<T, N> {
    fn new() -> Self {
        PrioHeap {
            front: Vec::new(),
            nodes: Vec::new(),
            items: Vec::new(),
            words: Vec::new(),
            free: Vec::new(),
            pushes: 0,
        }
    }

    #[inline]
    fn len(&self) -> usize {
        self.front.len() + self.nodes.len()
    }

    /// The top node.
    #[inline]
    fn top(&self) -> Option<N> {
        self.front.last().copied()
    }

    /// The priority of the top item.
    fn top_prio(&self) -> Option<PrioRef<'_>> {
        self.top().map(|n| PrioRef {
            first: n.first(),
            second: n.second(),
            more: if N::KEEPS_WORDS {
                self.words[n.slot()].as_slice().get(2..).unwrap_or(&[])
            } else {
                &[]
            },
        })
    }

    /// Adds `item` with priority `key`, behind (FIFO) or in front of (LIFO)
    /// its equals.
    fn push(&mut self, item: T, key: Key, lifo: bool) {
        if self.pushes + 1 >= N::SEQ_MID {
            self.renumber();
        }
        self.pushes += 1;
        let seq = if lifo {
            N::SEQ_MID - self.pushes
        } else {
            N::SEQ_MID + self.pushes
        };
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                let slot =
                    u32::try_from(self.items.len()).expect("a Cqs heap holds at most 2^32 items");
                self.items.push(None);
                if N::KEEPS_WORDS {
                    self.words.push(PrioWords::default());
                }
                slot
            }
        };
        let node = N::new(&key, seq, slot);
        self.items[slot as usize] = Some(item);
        // A slot's words are empty but while its item has three words or
        // more: only those write them (and their pop empties them).
        if N::KEEPS_WORDS && !key.words.is_empty() {
            self.words[slot as usize] = key.words;
        }
        let words = &self.words;
        if self.front.len() < FRONT_RUN {
            // (An empty run means an empty heap.)
            if self.nodes.first().is_none_or(|&top| node.less(top, words)) {
                return self.insert_front(node);
            }
        } else if node.less(self.front[0], words) {
            // The run is full: its least urgent node makes room, and still
            // comes out before the heap's.
            let evicted = self.front.remove(0);
            self.insert_front(node);
            return self.push_heap(evicted);
        }
        self.push_heap(node);
    }

    /// Puts `node`, which comes out before every node of the heap, into the
    /// front run (not full) at its place.
    #[inline]
    fn insert_front(&mut self, node: N) {
        debug_assert!(self.front.len() < FRONT_RUN);
        self.front.push(node);
        let mut i = self.front.len() - 1;
        // Shift the nodes that come out before `node` towards the end.
        while i > 0 && self.front[i - 1].less(node, &self.words) {
            self.front[i] = self.front[i - 1];
            i -= 1;
        }
        self.front[i] = node;
    }

    /// Adds `node` to the heap (the front run is not empty).
    #[inline]
    fn push_heap(&mut self, node: N) {
        debug_assert!(!self.front.is_empty());
        let pos = self.nodes.len();
        self.nodes.push(node);
        sift_up(&mut self.nodes, &self.words, pos, node);
    }

    /// Gives the items sequence numbers `SEQ_MID - n .. SEQ_MID` in queue
    /// order (`n` items), so that pushes can go on: every order between
    /// them stays, later FIFO pushes still sort after them and later LIFO
    /// pushes before. A sorted array is a heap; the front run's nodes, which
    /// come out first, are the first of it.
    ///
    /// # Panics
    /// If the heap holds `SEQ_MID - 1` items or more (2^30 - 1 in the long
    /// heap, some 50 GB of queued items): there would be no sequence number
    /// left for the push.
    #[cold]
    #[inline(never)]
    fn renumber(&mut self) {
        let n = self.len() as u64;
        assert!(
            n + 1 < N::SEQ_MID,
            "a Cqs priority heap holds fewer than {} items",
            N::SEQ_MID - 1
        );
        let words = &self.words;
        let in_front = self.front.len();
        self.nodes.append(&mut self.front);
        self.nodes.sort_unstable_by(|a, b| {
            if a.less(*b, words) {
                Ordering::Less
            } else if b.less(*a, words) {
                Ordering::Greater
            } else {
                Ordering::Equal
            }
        });
        for (rank, node) in self.nodes.iter_mut().enumerate() {
            *node = node.with_seq(N::SEQ_MID - n + rank as u64);
        }
        self.front.extend(self.nodes.drain(..in_front).rev());
        self.pushes = n;
    }

    /// Removes and returns the top item.
    fn pop(&mut self) -> Option<T> {
        let top = self.front.pop()?;
        if self.front.is_empty()
            && let Some(next) = self.pop_heap()
        {
            self.front.push(next);
        }
        let slot = top.slot();
        let item = self.items[slot].take();
        if self.front.is_empty() {
            // Nothing is live: start afresh, which also keeps the sequence
            // numbers small.
            self.clear();
        } else {
            // Only the node says whether the slot has words: no look at
            // them otherwise.
            if N::KEEPS_WORDS && top.has_more() {
                self.words[slot] = PrioWords::default();
            }
            self.free.push(slot as u32);
        }
        item
    }

    /// Removes the heap's top node.
    #[inline]
    fn pop_heap(&mut self) -> Option<N> {
        let last = self.nodes.pop()?;
        Some(match self.nodes.first().copied() {
            Some(top) => {
                sift_down_to_bottom(&mut self.nodes, &self.words, last);
                top
            }
            None => last,
        })
    }

    /// Drops every item.
    fn clear(&mut self) {
        self.front.clear();
        self.nodes.clear();
        self.items.clear();
        self.words.clear();
        self.free.clear();
        self.pushes = 0;
    }
}

/// Buckets in the window of one-word priorities kept in buckets: integer
/// priorities `-WINDOW/2 .. WINDOW/2` (the small integers programs use).
/// 64 words of 64 bits, so one summary word indexes them.
const WINDOW: usize = 4096;
/// The first word of the window's lowest priority.
const WINDOW_BASE: u32 = MIDDLE_WORD - (WINDOW as u32 / 2);

/// One FIFO/LIFO bucket per one-word priority near the middle, found through
/// a two-level bitmap: O(1) enqueue and dequeue, no comparisons.
struct Window<T> {
    /// `buckets[i]` holds the items of priority word `WINDOW_BASE + i`, in
    /// dequeue order.
    buckets: Box<[VecDeque<T>]>,
    /// Bit `i % 64` of `words[i / 64]` is set when bucket `i` is non-empty.
    words: [u64; WINDOW / 64],
    /// Bit `j` is set when `words[j]` is non-zero.
    summary: u64,
    len: usize,
}

impl<T> Window<T> {
    fn new() -> Box<Window<T>> {
        Box::new(Window {
            buckets: (0..WINDOW).map(|_| VecDeque::new()).collect(),
            words: [0; WINDOW / 64],
            summary: 0,
            len: 0,
        })
    }

    /// The bucket of priority word `first`, if the window covers it.
    #[inline]
    fn index(first: u32) -> Option<usize> {
        let i = first.wrapping_sub(WINDOW_BASE) as usize;
        (i < WINDOW).then_some(i)
    }

    #[inline]
    fn push(&mut self, i: usize, item: T, lifo: bool) {
        if lifo {
            self.buckets[i].push_front(item);
        } else {
            self.buckets[i].push_back(item);
        }
        self.words[i / 64] |= 1 << (i % 64);
        self.summary |= 1 << (i / 64);
        self.len += 1;
    }

    /// The index of the most urgent non-empty bucket.
    #[inline]
    fn min_index(&self) -> Option<usize> {
        if self.summary == 0 {
            return None;
        }
        let w = self.summary.trailing_zeros() as usize;
        Some(w * 64 + self.words[w].trailing_zeros() as usize)
    }

    #[inline]
    fn pop_min(&mut self) -> Option<T> {
        let i = self.min_index()?;
        let item = self.buckets[i].pop_front();
        if self.buckets[i].is_empty() {
            self.words[i / 64] &= !(1 << (i % 64));
            if self.words[i / 64] == 0 {
                self.summary &= !(1 << (i / 64));
            }
        }
        self.len -= 1;
        item
    }

    fn clear(&mut self) {
        for w in 0..WINDOW / 64 {
            let mut bits = self.words[w];
            while bits != 0 {
                self.buckets[w * 64 + bits.trailing_zeros() as usize].clear();
                bits &= bits - 1;
            }
        }
        self.words = [0; WINDOW / 64];
        self.summary = 0;
        self.len = 0;
    }
}

/// The middle priority's deque: a ring of `Option<T>` slots, a power of two
/// of them.
///
/// Why not `VecDeque`: its `push_back` holds the value across the check
/// for room (a call to grow), so the compiler keeps it on the stack and
/// copies it into the slot with one 16-byte load of what it just stored
/// as two 8-byte words: a store-forwarding stall on every `CsdEnqueue`
/// (two thirds of the enqueue's time). The value was on the stack because
/// the push could unwind (a bounds check, the growing call), and unwinding
/// drops it through its address. Here nothing between taking the value
/// and writing it can unwind: the slot index is in range by construction,
/// and growing is an `extern "C"` call (which aborts rather than unwinds,
/// on an allocation size overflow only), so the value stays in registers
/// and goes from them into the slot.
///
/// Invariant: slots `head .. head + len` (modulo the capacity) hold `Some`,
/// all others `None`.
struct MiddleDeque<T> {
    slots: Box<[Option<T>]>,
    head: usize,
    len: usize,
}

impl<T> MiddleDeque<T> {
    fn new() -> Self {
        MiddleDeque {
            slots: Box::new([]),
            head: 0,
            len: 0,
        }
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len().wrapping_sub(1)
    }

    #[inline]
    fn push_back(&mut self, item: T) {
        if self.len == self.slots.len() {
            grow_or_abort(self);
        }
        let at = (self.head + self.len) & self.mask();
        self.put(at, item);
        self.len += 1;
    }

    /// Writes `item` into the free slot at index `at` modulo the
    /// capacity, which must be non-zero (the callers grow a full ring
    /// first; an empty ring is full).
    #[inline]
    fn put(&mut self, at: usize, item: T) {
        debug_assert!(self.slots.len().is_power_of_two());
        let at = at & self.mask();
        debug_assert!(self.slots[at].is_none());
        // SAFETY: the capacity is a power of two (it only ever doubles from
        // 16) and not zero (the caller's promise, `debug_assert`ed above:
        // zero would make the mask all ones), so `at`, masked by it, is in
        // range.
        let slot = unsafe { self.slots.get_unchecked_mut(at) };
        // The slot is `None` (outside the items): forgotten, not dropped,
        // so no drop code sits on this path.
        std::mem::forget(slot.replace(item));
    }

    #[inline]
    fn push_front(&mut self, item: T) {
        if self.len == self.slots.len() {
            grow_or_abort(self);
        }
        let at = self.head.wrapping_sub(1) & self.mask();
        self.put(at, item);
        self.head = at;
        self.len += 1;
    }

    /// Doubles the ring (at least 16 slots).
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let old = std::mem::take(&mut self.slots);
        let mask = old.len().wrapping_sub(1);
        let mut bigger: Box<[Option<T>]> = (0..(old.len() * 2).max(16)).map(|_| None).collect();
        let mut old = old.into_vec();
        for (k, slot) in bigger.iter_mut().take(self.len).enumerate() {
            *slot = old[(self.head + k) & mask].take();
        }
        self.slots = bigger;
        self.head = 0;
    }

    #[inline]
    fn pop_front(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let item = self.slots[self.head].take();
        self.head = (self.head + 1) & self.mask();
        self.len -= 1;
        item
    }

    #[inline]
    fn front(&self) -> Option<&T> {
        if self.len == 0 {
            return None;
        }
        self.slots[self.head].as_ref()
    }

    #[inline]
    fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn clear(&mut self) {
        while self.pop_front().is_some() {}
    }
}

/// [`MiddleDeque::grow`], as a call that cannot unwind (a panic in an
/// `extern "C"` function aborts the process): see `MiddleDeque` for why.
/// Growing panics only if the ring's size overflows `usize`.
#[cold]
#[inline(never)]
extern "C" fn grow_or_abort<T>(deque: &mut MiddleDeque<T>) {
    deque.grow();
}

/// Where the next item to dequeue is.
#[derive(Clone, Copy)]
enum Front {
    Middle,
    Window,
    Short,
    Long,
}

/// The scheduler's priority queue: items come out smallest priority first,
/// FIFO or LIFO among equal priorities (see the [module docs](self)).
///
/// Owned by one PE; not shared between threads without a lock.
#[doc(alias = "Queue")]
pub struct Cqs<T> {
    /// Items of exactly the middle priority, in dequeue order.
    middle: MiddleDeque<T>,
    /// Items of the other one-word priorities in the window around the
    /// middle; allocated on first use (128 KiB of bucket headers), so queues
    /// that only see FIFO/LIFO traffic never pay for it.
    window: Option<Box<Window<T>>>,
    /// Items of the other one-word priorities (after normalisation).
    short: PrioHeap<T, ShortNode>,
    /// Items of priorities of two words or more (after normalisation).
    long: PrioHeap<T, LongNode>,
}

impl<T> Cqs<T> {
    /// Creates an empty queue.
    #[doc(alias = "CqsCreate")]
    pub fn new() -> Self {
        Cqs {
            middle: MiddleDeque::new(),
            window: None,
            short: PrioHeap::new(),
            long: PrioHeap::new(),
        }
    }

    /// Enqueues `item` with the priority and strategy of `q`.
    ///
    /// The item is placed behind (FIFO strategies) or in front of (LIFO
    /// strategies) all items of equal priority already queued. O(1) for the
    /// middle priority, O(log n) otherwise.
    #[doc(alias = "CqsEnqueueGeneral")]
    #[inline]
    pub fn enqueue(&mut self, item: T, q: Queueing) {
        let (key, lifo) = match q {
            Queueing::Fifo => return self.enqueue_fifo(item),
            Queueing::Lifo => return self.enqueue_lifo(item),
            // Integer priorities go straight to their part: no `Key` built
            // unless it is the short heap's.
            Queueing::IFifo(p) => return self.enqueue_one_word(item, int_word(p), false),
            Queueing::ILifo(p) => return self.enqueue_one_word(item, int_word(p), true),
            Queueing::LFifo(p) => (Key::long(p), false),
            Queueing::LLifo(p) => (Key::long(p), true),
            Queueing::BFifo(b) => (Key::bits(b), false),
            Queueing::BLifo(b) => (Key::bits(b), true),
        };
        if !key.is_one_word() {
            self.long.push(item, key, lifo);
        } else {
            self.enqueue_one_word(item, key.first, lifo);
        }
    }

    /// Enqueues `item` with the one-word priority `first`: in the middle
    /// deque, a window bucket or the short heap.
    #[inline]
    fn enqueue_one_word(&mut self, item: T, first: u32, lifo: bool) {
        if first == MIDDLE_WORD {
            if lifo {
                self.middle.push_front(item);
            } else {
                self.middle.push_back(item);
            }
            return;
        }
        match Window::<T>::index(first) {
            Some(i) => self
                .window
                .get_or_insert_with(Window::new)
                .push(i, item, lifo),
            None => self.short.push(item, Key::one(first), lifo),
        }
    }

    /// Enqueues `item` with the middle priority, behind all items of that
    /// priority. Same as `enqueue(item, Queueing::Fifo)`; O(1).
    #[doc(alias = "CqsEnqueueFifo", alias = "CqsEnqueue")]
    #[inline]
    pub fn enqueue_fifo(&mut self, item: T) {
        self.middle.push_back(item);
    }

    /// Enqueues `item` with the middle priority, in front of all items of
    /// that priority. Same as `enqueue(item, Queueing::Lifo)`; O(1).
    #[doc(alias = "CqsEnqueueLifo")]
    #[inline]
    pub fn enqueue_lifo(&mut self, item: T) {
        self.middle.push_front(item);
    }

    /// Removes and returns the most urgent item, or `None` if the queue is
    /// empty. O(1) when that item has the middle priority, O(log n)
    /// otherwise.
    #[doc(alias = "CqsDequeue")]
    pub fn dequeue(&mut self) -> Option<T> {
        match self.front()? {
            Front::Middle => self.middle.pop_front(),
            Front::Window => self.window.as_mut()?.pop_min(),
            Front::Short => self.short.pop(),
            Front::Long => self.long.pop(),
        }
    }

    /// The priority of the item [`dequeue`](Cqs::dequeue) would return, or
    /// `None` if the queue is empty.
    ///
    /// The scheduler compares this between the PE's queue and the node queue
    /// to run the more urgent of the two.
    #[doc(alias = "CqsGetPriority")]
    pub fn front_priority(&self) -> Option<PrioRef<'_>> {
        match self.front()? {
            Front::Middle => Some(PrioRef::MIDDLE),
            Front::Window => {
                let i = self.window.as_ref()?.min_index()?;
                Some(PrioRef {
                    first: WINDOW_BASE + i as u32,
                    second: 0,
                    more: &[],
                })
            }
            Front::Short => self.short.top_prio(),
            Front::Long => self.long.top_prio(),
        }
    }

    /// The front item, if it has the middle priority (nothing queued is
    /// more urgent): what [`dequeue`](Cqs::dequeue) would return next. `None`
    /// if the queue is empty or its front has another priority.
    #[inline]
    pub fn middle_front(&self) -> Option<&T> {
        match self.front()? {
            Front::Middle => self.middle.front(),
            _ => None,
        }
    }

    /// If the front item has the middle priority and `take(front)` says
    /// so, enqueues `item` FIFO at the middle priority and returns the front
    /// item (dequeued); otherwise changes nothing and hands `item` back.
    /// Equivalent to checking [`middle_front`](Cqs::middle_front), then
    /// [`enqueue_fifo`](Cqs::enqueue_fifo) and [`dequeue`](Cqs::dequeue),
    /// with one look at the parts instead of three (a thread switch does
    /// this on every yield).
    #[inline]
    pub fn swap_middle_front(&mut self, item: T, take: impl FnOnce(&T) -> bool) -> Result<T, T> {
        if !matches!(self.front(), Some(Front::Middle)) {
            return Err(item);
        }
        match self.middle.front() {
            Some(front) if take(front) => {}
            _ => return Err(item),
        }
        self.middle.push_back(item);
        Ok(self.middle.pop_front().expect("the front was there"))
    }

    /// The number of queued items.
    #[doc(alias = "CqsLength")]
    pub fn len(&self) -> usize {
        self.middle.len()
            + self.window.as_ref().map_or(0, |w| w.len)
            + self.short.len()
            + self.long.len()
    }

    /// Whether the queue holds no item.
    #[doc(alias = "CqsEmpty")]
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.middle.is_empty()
            && self.window.as_ref().is_none_or(|w| w.len == 0)
            && self.short.len() == 0
            && self.long.len() == 0
    }

    /// Removes all items, yielding them in dequeue order. The queue is empty
    /// afterwards, even if the iterator is dropped before its end (the
    /// remaining items are then dropped).
    ///
    /// Unlike `CqsEnumerateQueue`, which copies the queue's contents, this
    /// takes the items out.
    #[doc(alias = "CqsEnumerateQueue")]
    pub fn drain(&mut self) -> impl Iterator<Item = T> + '_ {
        Drain { queue: self }
    }

    /// Where the most urgent item is. The parts never hold equal
    /// priorities, and the one-word parts (middle, window, short) hold
    /// disjoint sets of first words, so comparing first words settles it: a
    /// one-word priority `w` is below every longer priority starting with `w`.
    #[inline]
    fn front(&self) -> Option<Front> {
        let mut best: Option<(Front, u32)> = None;
        let mut consider = |front: Front, first: u32| {
            if best.is_none_or(|(_, b)| first < b) {
                best = Some((front, first));
            }
        };
        if !self.middle.is_empty() {
            consider(Front::Middle, MIDDLE_WORD);
        }
        if let Some(i) = self.window.as_ref().and_then(|w| w.min_index()) {
            consider(Front::Window, WINDOW_BASE + i as u32);
        }
        if let Some(top) = self.short.top() {
            consider(Front::Short, top.first());
        }
        // Strictly below only: on equal first words the one-word part wins.
        if let Some(top) = self.long.top() {
            consider(Front::Long, top.first());
        }
        best.map(|(front, _)| front)
    }
}

impl<T> Default for Cqs<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> fmt::Debug for Cqs<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cqs")
            .field("len", &self.len())
            .field("front_priority", &self.front_priority())
            .finish_non_exhaustive()
    }
}

/// The iterator of [`Cqs::drain`]; empties the queue when dropped.
struct Drain<'a, T> {
    queue: &'a mut Cqs<T>,
}

impl<T> Iterator for Drain<'_, T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        self.queue.dequeue()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.queue.len();
        (n, Some(n))
    }
}

impl<T> Drop for Drain<'_, T> {
    fn drop(&mut self) {
        self.queue.middle.clear();
        if let Some(w) = self.queue.window.as_mut() {
            w.clear();
        }
        self.queue.short.clear();
        self.queue.long.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bp(bits: u32, words: &[u32]) -> BitPrio {
        BitPrio::new(bits, words).unwrap()
    }

    fn drain_all<T>(q: &mut Cqs<T>) -> Vec<T> {
        q.drain().collect()
    }

    #[test]
    fn empty_queue() {
        let mut q: Cqs<u32> = Cqs::new();
        assert!(q.is_empty());
        assert_eq!(q.len(), 0);
        assert_eq!(q.front_priority(), None);
        assert_eq!(q.dequeue(), None);
        let d: Cqs<u32> = Cqs::default();
        assert!(d.is_empty());
    }

    #[test]
    fn long_node_keeps_its_fields_at_the_largest_sequence_number() {
        let key = Key {
            first: 7,
            second: 9,
            words: PrioWords::from_slice(&[7, 9, 1, 1]),
        };
        let big = (1 << 31) - 1;
        let node = LongNode::new(&key, 5, 42).with_seq(big);
        assert_eq!((node.first(), node.second(), node.slot()), (7, 9, 42));
        assert_ne!(node.0 & LongNode::MORE, 0);
        assert_eq!((node.0 as u64 >> 32) & 0x7FFF_FFFF, big);
        assert_eq!(node.with_seq(3).with_seq(big).0, node.0);
    }

    #[test]
    fn middle_deque_grows_and_wraps_in_order() {
        // A model deque beside it; pushes at both ends and pops, so the
        // ring wraps around and grows (16, 32, 64 slots) with items on both
        // sides of its end.
        let mut d = MiddleDeque::new();
        let mut model = std::collections::VecDeque::new();
        for i in 0..200u32 {
            if i % 3 == 0 {
                d.push_front(Box::new(i));
                model.push_front(i);
            } else {
                d.push_back(Box::new(i));
                model.push_back(i);
            }
            if i % 5 == 4 {
                assert_eq!(d.pop_front().map(|b| *b), model.pop_front());
            }
            assert_eq!(d.front().map(|b| **b), model.front().copied());
            assert_eq!(d.len(), model.len());
        }
        d.clear();
        assert!(d.is_empty() && d.pop_front().is_none());
    }

    #[test]
    fn fifo_keeps_order() {
        let mut q = Cqs::new();
        for i in 0..5 {
            q.enqueue_fifo(i);
        }
        q.enqueue(5, Queueing::Fifo);
        assert_eq!(q.len(), 6);
        assert_eq!(q.front_priority(), Some(PrioRef::MIDDLE));
        assert_eq!(drain_all(&mut q), [0, 1, 2, 3, 4, 5]);
        assert!(q.is_empty());
    }

    #[test]
    fn lifo_reverses_order() {
        let mut q = Cqs::new();
        for i in 0..5 {
            q.enqueue_lifo(i);
        }
        q.enqueue(5, Queueing::Lifo);
        assert_eq!(drain_all(&mut q), [5, 4, 3, 2, 1, 0]);
    }

    #[test]
    fn int_priorities_smaller_first_negative_before_positive() {
        let mut q = Cqs::new();
        for p in [3, -1, 0, 7, -100, i32::MAX, i32::MIN, 1] {
            q.enqueue(p, Queueing::IFifo(p));
        }
        assert_eq!(
            drain_all(&mut q),
            [i32::MIN, -100, -1, 0, 1, 3, 7, i32::MAX]
        );
    }

    #[test]
    fn each_int_strategy_ties() {
        let mut q = Cqs::new();
        q.enqueue("f1", Queueing::IFifo(5));
        q.enqueue("f2", Queueing::IFifo(5));
        q.enqueue("l1", Queueing::ILifo(5));
        q.enqueue("l2", Queueing::ILifo(5));
        q.enqueue("f3", Queueing::IFifo(5));
        q.enqueue("urgent", Queueing::ILifo(4));
        assert_eq!(drain_all(&mut q), ["urgent", "l2", "l1", "f1", "f2", "f3"]);
    }

    #[test]
    fn long_priorities() {
        let mut q = Cqs::new();
        q.enqueue("big", Queueing::LFifo(i64::MAX));
        q.enqueue("one", Queueing::LFifo(1));
        q.enqueue("zero", Queueing::LFifo(0));
        q.enqueue("min", Queueing::LFifo(i64::MIN));
        q.enqueue("neg", Queueing::LLifo(-1));
        assert_eq!(drain_all(&mut q), ["min", "neg", "zero", "one", "big"]);
    }

    #[test]
    fn long_and_int_share_ordering_space() {
        // IFifo(1) is .1000…01 (32 bits); LFifo(1 << 32) is the same number
        // with 32 more zero bits, LFifo(1) lies just above the middle.
        let mut q = Cqs::new();
        q.enqueue("i1", Queueing::IFifo(1));
        q.enqueue("l1<<32", Queueing::LFifo(1 << 32));
        q.enqueue("l1", Queueing::LFifo(1));
        q.enqueue("mid", Queueing::Fifo);
        q.enqueue("lifo i1", Queueing::LLifo(1 << 32));
        assert_eq!(drain_all(&mut q), ["mid", "l1", "lifo i1", "i1", "l1<<32"]);
    }

    #[test]
    fn bitvec_priorities_compare_as_fractions() {
        let mut q = Cqs::new();
        q.enqueue(".11", Queueing::BFifo(bp(2, &[0xC000_0000])));
        q.enqueue(".01", Queueing::BFifo(bp(2, &[0x4000_0000])));
        q.enqueue(".1", Queueing::BFifo(bp(1, &[0x8000_0000])));
        q.enqueue(".0", Queueing::BFifo(bp(1, &[0])));
        q.enqueue(
            ".1 0^63 1",
            Queueing::BFifo(bp(65, &[MIDDLE_WORD, 0, MIDDLE_WORD])),
        );
        q.enqueue(
            ".1 0^31 1",
            Queueing::BLifo(bp(33, &[MIDDLE_WORD, MIDDLE_WORD])),
        );
        assert_eq!(
            drain_all(&mut q),
            [".0", ".01", ".1", ".1 0^63 1", ".1 0^31 1", ".11"]
        );
    }

    #[test]
    fn middle_equivalences_fifo() {
        // Fifo, IFifo(0), LFifo(0), BFifo(".1") and BFifo(".1000…") are all
        // the middle priority and queue FIFO together.
        let mut q = Cqs::new();
        q.enqueue(0, Queueing::Fifo);
        q.enqueue(1, Queueing::IFifo(0));
        q.enqueue(2, Queueing::BFifo(bp(1, &[MIDDLE_WORD])));
        q.enqueue(3, Queueing::LFifo(0));
        q.enqueue(4, Queueing::BFifo(bp(96, &[MIDDLE_WORD, 0, 0])));
        q.enqueue_fifo(5);
        q.enqueue(-1, Queueing::IFifo(-1));
        q.enqueue(9, Queueing::IFifo(1));
        assert_eq!(drain_all(&mut q), [-1, 0, 1, 2, 3, 4, 5, 9]);
    }

    #[test]
    fn middle_equivalences_lifo() {
        let mut q = Cqs::new();
        q.enqueue(0, Queueing::Fifo);
        q.enqueue(1, Queueing::ILifo(0));
        q.enqueue(2, Queueing::BLifo(bp(1, &[MIDDLE_WORD])));
        q.enqueue(3, Queueing::LLifo(0));
        q.enqueue_lifo(4);
        q.enqueue(5, Queueing::IFifo(0));
        assert_eq!(drain_all(&mut q), [4, 3, 2, 1, 0, 5]);
    }

    #[test]
    fn lifo_before_fifo_among_equals() {
        let mut q = Cqs::new();
        let p = || bp(40, &[0x1234_5678, 0xAB00_0000]);
        q.enqueue("f1", Queueing::BFifo(p()));
        q.enqueue("l1", Queueing::BLifo(p()));
        q.enqueue("f2", Queueing::BFifo(p()));
        q.enqueue("l2", Queueing::BLifo(p()));
        assert_eq!(drain_all(&mut q), ["l2", "l1", "f1", "f2"]);
    }

    #[test]
    fn normalisation_trailing_zero_words_and_padding() {
        // Padding bits are masked.
        let b = bp(1, &[0xFFFF_FFFF]);
        assert_eq!(b.words(), [MIDDLE_WORD]);
        assert_eq!(b.bits(), 1);
        let b = bp(36, &[1, 0xFFFF_FFFF]);
        assert_eq!(b.words(), [1, 0xF000_0000]);
        // Trailing zero words do not change the priority.
        assert_eq!(bp(64, &[7, 0]).prio(), bp(32, &[7]).prio());
        assert_eq!(bp(96, &[7, 9, 0]).prio(), bp(64, &[7, 9]).prio());
        assert_eq!(bp(3, &[0]).prio(), bp(0, &[]).prio());
        assert_eq!(bp(0, &[]).prio().words().count(), 0);
        // ... and two such priorities tie, FIFO.
        let mut q = Cqs::new();
        q.enqueue(0, Queueing::BFifo(bp(96, &[7, 9, 0])));
        q.enqueue(1, Queueing::BFifo(bp(64, &[7, 9])));
        q.enqueue(2, Queueing::BFifo(bp(33, &[7, 0])));
        q.enqueue(3, Queueing::IFifo(int_word_inverse(7)));
        assert_eq!(drain_all(&mut q), [2, 3, 0, 1]);
        // The same with three words or more.
        q.enqueue(0, Queueing::BFifo(bp(128, &[7, 9, 5, 0])));
        q.enqueue(1, Queueing::BLifo(bp(96, &[7, 9, 5])));
        q.enqueue(2, Queueing::BFifo(bp(96, &[7, 9, 5])));
        q.enqueue(3, Queueing::BFifo(bp(100, &[7, 9, 5, 1 << 28])));
        assert_eq!(q.front_priority(), Some(bp(96, &[7, 9, 5]).prio()));
        assert_eq!(
            q.front_priority().unwrap().words().collect::<Vec<_>>(),
            [7, 9, 5]
        );
        assert_eq!(drain_all(&mut q), [1, 0, 2, 3]);
    }

    /// The integer whose priority word is `w`.
    fn int_word_inverse(w: u32) -> i32 {
        w.wrapping_sub(MIDDLE_WORD) as i32
    }

    #[test]
    fn zero_priority_is_most_urgent() {
        let mut q = Cqs::new();
        q.enqueue("min int", Queueing::IFifo(i32::MIN + 1));
        q.enqueue("empty", Queueing::BFifo(bp(0, &[])));
        q.enqueue("zeros", Queueing::BFifo(bp(64, &[0, 0])));
        q.enqueue("int min", Queueing::ILifo(i32::MIN));
        assert_eq!(q.front_priority().unwrap().words().count(), 0);
        assert_eq!(drain_all(&mut q), ["int min", "empty", "zeros", "min int"]);
    }

    #[test]
    fn prio_ref_ordering() {
        let mid = PrioRef::MIDDLE;
        assert_eq!(BitPrio::from_int(0).prio(), mid);
        assert_eq!(BitPrio::from_long(0).prio(), mid);
        assert_eq!(bp(1, &[MIDDLE_WORD]).prio(), mid);
        assert!(BitPrio::from_int(-1).prio() < mid);
        assert!(BitPrio::from_long(1).prio() > mid);
        assert!(BitPrio::from_long(1).prio() < BitPrio::from_int(1).prio());
        assert_eq!(
            BitPrio::from_long(5 << 32).prio(),
            BitPrio::from_int(5).prio()
        );
        assert!(BitPrio::from_long(i64::MIN).prio() < BitPrio::from_int(i32::MIN + 1).prio());
        assert_eq!(
            BitPrio::from_long(i64::MIN).prio(),
            BitPrio::from_int(i32::MIN).prio()
        );
        assert_eq!(mid.words().collect::<Vec<_>>(), [MIDDLE_WORD]);
        assert_eq!(BitPrio::from_int(3).words(), [0x8000_0003]);
        assert_eq!(BitPrio::from_long(-1).words(), [0x7FFF_FFFF, 0xFFFF_FFFF]);
        assert_eq!(BitPrio::from_long(-1).bits(), 64);
    }

    #[test]
    fn front_priority_follows_dequeue() {
        let mut q = Cqs::new();
        q.enqueue_fifo("mid");
        assert_eq!(q.front_priority(), Some(PrioRef::MIDDLE));
        q.enqueue("late", Queueing::IFifo(10));
        assert_eq!(q.front_priority(), Some(PrioRef::MIDDLE));
        let early = bp(64, &[0x7000_0000, 0x1]);
        q.enqueue("early", Queueing::BLifo(early.clone()));
        assert_eq!(q.front_priority(), Some(early.prio()));
        assert_eq!(q.dequeue(), Some("early"));
        assert_eq!(q.front_priority(), Some(PrioRef::MIDDLE));
        assert_eq!(q.dequeue(), Some("mid"));
        assert_eq!(q.front_priority(), Some(BitPrio::from_int(10).prio()));
        assert_eq!(q.dequeue(), Some("late"));
        assert_eq!(q.front_priority(), None);
        assert_eq!(q.dequeue(), None);
    }

    #[test]
    fn bitprio_new_errors() {
        let e = BitPrio::new(33, &[1]).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("33 bits"), "{msg}");
        assert!(msg.contains("exactly 2 words"), "{msg}");
        assert!(msg.contains("1 were given"), "{msg}");
        // Extra words are an error too.
        assert!(BitPrio::new(32, &[1, 0]).is_err());
        assert!(BitPrio::new(0, &[0]).is_err());
        assert!(BitPrio::new(1, &[]).is_err());
        assert!(BitPrio::new(64, &[1, 2]).is_ok());
        assert!(BitPrio::new(u32::MAX, &[1]).is_err());
        let e: Box<dyn Error> = Box::new(e);
        assert!(!e.to_string().is_empty());
    }

    #[test]
    fn drain_dropped_early_empties_queue() {
        let mut q = Cqs::new();
        for i in 0..10 {
            q.enqueue(i.to_string(), Queueing::IFifo(i - 10));
            q.enqueue_fifo(format!("m{i}"));
        }
        let mut d = q.drain();
        assert_eq!(d.size_hint(), (20, Some(20)));
        assert_eq!(d.next().as_deref(), Some("0"));
        drop(d);
        assert!(q.is_empty());
        assert_eq!(q.len(), 0);
        assert_eq!(q.dequeue(), None);
        // Usable afterwards.
        q.enqueue("x".into(), Queueing::ILifo(-3));
        assert_eq!(q.dequeue().as_deref(), Some("x"));
    }

    #[test]
    fn debug_output() {
        let mut q = Cqs::new();
        q.enqueue_fifo(1);
        let s = format!("{q:?}");
        assert!(s.contains("len: 1"), "{s}");
    }

    mod model {
        use super::super::*;
        use proptest::prelude::*;

        /// An operation on the queue.
        #[derive(Clone, Debug)]
        enum Op {
            Enqueue(Queueing),
            Dequeue,
        }

        /// Small ranges so that ties (also across kinds) are frequent.
        fn queueing() -> impl Strategy<Value = Queueing> {
            // Mostly small (the bucket window), plus the window's edges and
            // values beyond it (the heap).
            let int = prop_oneof![
                6 => -3i32..=3,
                1 => prop::sample::select(vec![-2049, -2048, 2047, 2048, i32::MIN, i32::MAX]),
            ];
            let long = prop_oneof![
                (-3i64..=3).prop_map(|k| k << 32),
                -3i64..=3,
                Just(i64::MIN),
                Just(i64::MAX),
            ];
            // Few distinct words, zero the most frequent, and lengths often
            // whole words, so that bit-vectors tie often, also with
            // trailing zero words and across lengths.
            let word = prop_oneof![
                3 => Just(0u32),
                2 => Just(0x8000_0000),
                1 => Just(1),
                1 => Just(0x7FFF_FFFF),
                1 => Just(0x8000_0001),
                1 => Just(0xFFFF_FFFF),
            ];
            let bits = prop_oneof![0u32..=128, prop::sample::select(vec![32, 64, 96, 128])];
            let bitprio = (bits, prop::collection::vec(word, 4)).prop_map(|(bits, w)| {
                BitPrio::new(bits, &w[..bits.div_ceil(32) as usize]).unwrap()
            });
            prop_oneof![
                Just(Queueing::Fifo),
                Just(Queueing::Lifo),
                int.clone().prop_map(Queueing::IFifo),
                int.prop_map(Queueing::ILifo),
                long.clone().prop_map(Queueing::LFifo),
                long.prop_map(Queueing::LLifo),
                bitprio.clone().prop_map(Queueing::BFifo),
                bitprio.prop_map(Queueing::BLifo),
            ]
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                3 => queueing().prop_map(Op::Enqueue),
                2 => Just(Op::Dequeue),
            ]
        }

        /// Priorities of two words or more only (the long heap), few of
        /// them, so that ties are frequent.
        fn long_queueing() -> impl Strategy<Value = Queueing> {
            let long = prop::sample::select(vec![1i64 << 32, (1 << 32) + 1, -(1 << 32), 5]);
            let word = prop::sample::select(vec![0u32, 1, 0x8000_0000]);
            let bitprio =
                (33u32..=128, prop::collection::vec(word, 4)).prop_map(|(bits, mut w)| {
                    w[1] |= 1; // two significant words at least
                    BitPrio::new(bits, &w[..bits.div_ceil(32) as usize]).unwrap()
                });
            prop_oneof![
                long.clone().prop_map(Queueing::LFifo),
                long.prop_map(Queueing::LLifo),
                bitprio.clone().prop_map(Queueing::BFifo),
                bitprio.prop_map(Queueing::BLifo),
            ]
        }

        /// Mostly enqueues: the long heap holds many items and goes through
        /// far more pushes than `LONG_SEQ_MID` (128 in tests) without
        /// emptying, so it renumbers, several times.
        fn long_op() -> impl Strategy<Value = Op> {
            prop_oneof![
                4 => long_queueing().prop_map(Op::Enqueue),
                1 => Just(Op::Dequeue),
            ]
        }

        /// The priority as a bit string with trailing zero bits dropped;
        /// computed bit by bit, independently of the queue's word logic.
        /// Such strings compare as binary fractions under `Vec`'s order.
        fn model_bits(bits: u32, words: &[u32]) -> Vec<bool> {
            let mut v: Vec<bool> = (0..bits)
                .map(|i| words[(i / 32) as usize] >> (31 - i % 32) & 1 == 1)
                .collect();
            while v.last() == Some(&false) {
                v.pop();
            }
            v
        }

        /// (priority bits, is LIFO) of a strategy, from the manual's rules.
        fn model_prio(q: &Queueing) -> (Vec<bool>, bool) {
            let int = |p: i32| model_bits(32, &[(p as i64 + (1i64 << 31)) as u32]);
            let long = |p: i64| {
                let v = (p as i128 + (1i128 << 63)) as u64;
                model_bits(64, &[(v >> 32) as u32, v as u32])
            };
            match q {
                Queueing::Fifo => (vec![true], false),
                Queueing::Lifo => (vec![true], true),
                Queueing::IFifo(p) => (int(*p), false),
                Queueing::ILifo(p) => (int(*p), true),
                Queueing::LFifo(p) => (long(*p), false),
                Queueing::LLifo(p) => (long(*p), true),
                Queueing::BFifo(b) => (model_bits(b.bits(), b.words()), false),
                Queueing::BLifo(b) => (model_bits(b.bits(), b.words()), true),
            }
        }

        fn prio_ref_bits(p: PrioRef<'_>) -> Vec<bool> {
            let words: Vec<u32> = p.words().collect();
            model_bits(32 * words.len() as u32, &words)
        }

        /// The model: a plain list of (priority, tie sequence, id); the next
        /// item is the minimum. FIFO items get increasing, LIFO items
        /// decreasing sequence numbers.
        #[derive(Default)]
        struct Model {
            items: Vec<(Vec<bool>, i64, usize)>,
            counter: i64,
        }

        impl Model {
            fn enqueue(&mut self, id: usize, q: &Queueing) {
                let (prio, lifo) = model_prio(q);
                self.counter += 1;
                let seq = if lifo { -self.counter } else { self.counter };
                self.items.push((prio, seq, id));
            }

            fn front(&self) -> Option<usize> {
                (0..self.items.len()).min_by(|&a, &b| {
                    let (pa, sa, _) = &self.items[a];
                    let (pb, sb, _) = &self.items[b];
                    (pa, sa).cmp(&(pb, sb))
                })
            }

            fn dequeue(&mut self) -> Option<usize> {
                let i = self.front()?;
                Some(self.items.remove(i).2)
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            #[test]
            fn matches_model(ops in prop::collection::vec(op(), 0..200)) {
                let mut q = Cqs::new();
                let mut m = Model::default();
                for (id, op) in ops.into_iter().enumerate() {
                    match op {
                        Op::Enqueue(s) => {
                            m.enqueue(id, &s);
                            q.enqueue(id, s);
                        }
                        Op::Dequeue => prop_assert_eq!(q.dequeue(), m.dequeue()),
                    }
                    prop_assert_eq!(q.len(), m.items.len());
                    prop_assert_eq!(q.is_empty(), m.items.is_empty());
                    let front = m.front().map(|i| m.items[i].0.clone());
                    prop_assert_eq!(q.front_priority().map(prio_ref_bits), front);
                }
                let rest: Vec<usize> = q.drain().collect();
                let mut expected = Vec::new();
                while let Some(id) = m.dequeue() {
                    expected.push(id);
                }
                prop_assert_eq!(rest, expected);
                prop_assert!(q.is_empty());
            }

            #[test]
            fn long_heap_renumbering_keeps_the_order(ops in prop::collection::vec(long_op(), 0..600)) {
                let mut q = Cqs::new();
                let mut m = Model::default();
                for (id, op) in ops.into_iter().enumerate() {
                    // At most 40 items (the test's heap renumbers into 64
                    // sequence numbers below the middle).
                    if q.len() >= 40 {
                        prop_assert_eq!(q.dequeue(), m.dequeue());
                    }
                    match op {
                        Op::Enqueue(s) => {
                            m.enqueue(id, &s);
                            q.enqueue(id, s);
                        }
                        Op::Dequeue => prop_assert_eq!(q.dequeue(), m.dequeue()),
                    }
                }
                let rest: Vec<usize> = q.drain().collect();
                let mut expected = Vec::new();
                while let Some(id) = m.dequeue() {
                    expected.push(id);
                }
                prop_assert_eq!(rest, expected);
            }

            /// `PrioRef`'s order is the binary-fraction order.
            #[test]
            fn prio_ref_order_matches_bits(a in queueing(), b in queueing()) {
                let mut qa = Cqs::new();
                qa.enqueue((), a.clone());
                let mut qb = Cqs::new();
                qb.enqueue((), b.clone());
                let (pa, pb) = (qa.front_priority().unwrap(), qb.front_priority().unwrap());
                prop_assert_eq!(pa.cmp(&pb), model_prio(&a).0.cmp(&model_prio(&b).0));
                prop_assert_eq!(prio_ref_bits(pa), model_prio(&a).0);
            }
        }
    }
}
