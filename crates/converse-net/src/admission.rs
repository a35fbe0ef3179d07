//! Who keeps a slot when connections still in their handshake fill a
//! listener's slots: the tcp module's listener and `convrun`'s control
//! socket both hold a bounded number of connections that have not proved
//! the job key yet, and a flood of strangers must not keep a real process
//! out of them.
//!
//! # The rule
//!
//! A new connection is always admitted. When that would pass a bound, the
//! connection admitted longest ago gives up its slot (its owner closes it):
//!
//! - at most [`Admission::per_source`] from one source address, so that
//!   strangers on one host cannot take the slots of processes on others
//!   (the oldest of that source goes);
//! - at most [`Admission::cap`] in all (the oldest of all goes).
//!
//! A real process proves the key within a round trip of its connect, so it
//! is among the newest while its handshake lasts: a stranger can push it
//! out only by opening a whole cap's worth of connections in that moment,
//! and a process whose connection was closed this way connects again (its
//! side retries a reset with backoff). Oldest-admitted, rather than the one
//! silent longest, is deliberate: a stranger that trickles a byte now and
//! then keeps no slot by it.
//!
//! # Invariants
//!
//! - Every admitted key is live until [`Admission::leave`] or its eviction
//!   (returned once, by [`Admission::admit`]); the counts per source and in
//!   all are those of the live keys.
//! - The admission order holds each live key once, oldest first, plus keys
//!   that left and are skipped when met; it is compacted when it grows past
//!   twice the live keys, so its size stays within a constant of the cap.
//!
//! # Concurrency
//!
//! A plain value, owned by one thread or kept behind its owner's lock.
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::net::IpAddr;

/// The connections a listener holds in their handshake (see the module
/// comment), each named by its owner's key `K`.
pub struct Admission<K> {
    cap: usize,
    per_source: usize,
    /// Every admitted key with its source, oldest first (some left).
    order: VecDeque<(K, IpAddr)>,
    /// The live keys and their sources.
    live: HashMap<K, IpAddr>,
    /// Live keys per source (sources with none are removed).
    by_source: HashMap<IpAddr, usize>,
}

impl<K: Copy + Eq + Hash> Admission<K> {
    /// At most `cap` connections in all and `per_source` from one address
    /// (both at least 1; `per_source` at most `cap`).
    pub fn new(cap: usize, per_source: usize) -> Admission<K> {
        let cap = cap.max(1);
        Admission {
            cap,
            per_source: per_source.clamp(1, cap),
            order: VecDeque::new(),
            live: HashMap::new(),
            by_source: HashMap::new(),
        }
    }

    /// The bounds for a listener of a job of `nodes` processes that holds
    /// at least `floor`: every process may connect at once, with room to
    /// spare, and one source may hold half.
    pub fn for_job(nodes: usize, floor: usize) -> Admission<K> {
        let cap = floor.max(nodes + 64);
        Admission::new(cap, (cap / 2).max(nodes.min(cap)))
    }

    /// The bound in all.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// The bound per source address.
    pub fn per_source(&self) -> usize {
        self.per_source
    }

    /// Connections held.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    /// True if none is held.
    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// Admits connection `key` from `from` (a key already held is a
    /// caller's bug, and panics); returns the connection that must give up
    /// its slot for it, if one must, which is no longer held.
    pub fn admit(&mut self, key: K, from: IpAddr) -> Option<K> {
        let from_source = self.by_source.get(&from).copied().unwrap_or(0);
        let evicted = if from_source >= self.per_source {
            self.oldest(Some(from))
        } else if self.live.len() >= self.cap {
            self.oldest(None)
        } else {
            None
        };
        if let Some(old) = evicted {
            self.leave(old);
        }
        assert!(
            self.live.insert(key, from).is_none(),
            "a connection admitted twice"
        );
        *self.by_source.entry(from).or_insert(0) += 1;
        self.order.push_back((key, from));
        evicted
    }

    /// Connection `key` is no longer held (its handshake ended, or it was
    /// closed); a key not held is ignored.
    pub fn leave(&mut self, key: K) {
        let Some(from) = self.live.remove(&key) else {
            return;
        };
        if let Some(n) = self.by_source.get_mut(&from) {
            *n -= 1;
            if *n == 0 {
                self.by_source.remove(&from);
            }
        }
        if self.order.len() > 2 * self.live.len() + 64 {
            let live = &self.live;
            self.order.retain(|(k, _)| live.contains_key(k));
        }
    }

    /// The live connection admitted longest ago (from `source`, if given).
    fn oldest(&mut self, source: Option<IpAddr>) -> Option<K> {
        // Left keys at the front are dropped for good on the way.
        while let Some(&(k, _)) = self.order.front() {
            if self.live.contains_key(&k) {
                break;
            }
            self.order.pop_front();
        }
        self.order
            .iter()
            .find(|(k, from)| source.is_none_or(|s| s == *from) && self.live.contains_key(k))
            .map(|&(k, _)| k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn the_oldest_gives_way_when_the_cap_is_reached() {
        let mut a = Admission::new(3, 3);
        assert_eq!(a.admit(1, ip(1)), None);
        assert_eq!(a.admit(2, ip(2)), None);
        assert_eq!(a.admit(3, ip(3)), None);
        assert_eq!(a.admit(4, ip(4)), Some(1));
        // One that left is not evicted again.
        a.leave(2);
        assert_eq!(a.admit(5, ip(5)), None);
        assert_eq!(a.admit(6, ip(6)), Some(3));
        assert_eq!(a.len(), 3);
    }

    #[test]
    fn a_flooding_source_evicts_its_own() {
        let mut a = Admission::new(8, 4);
        // A real process on another host is admitted first.
        assert_eq!(a.admit(5000, ip(9)), None);
        // A stranger opens many from one address: past its share, its own
        // oldest go, and the other host's connection stays.
        let mut evicted = Vec::new();
        for k in 0..1000 {
            evicted.extend(a.admit(k, ip(1)));
        }
        assert!(!evicted.contains(&5000));
        assert_eq!(evicted.len(), 1000 - 4);
        assert_eq!(a.len(), 5);
        // A real process on the flooding host gets a slot, and keeps it
        // until four more from there come.
        assert_eq!(a.admit(2000, ip(1)), Some(996));
        for k in 1001..1004 {
            assert_ne!(a.admit(k, ip(1)), Some(2000));
        }
        assert_eq!(a.admit(1004, ip(1)), Some(2000));
    }

    #[test]
    fn counts_and_order_stay_bounded_under_churn() {
        let mut a = Admission::new(16, 16);
        for k in 0..100_000u64 {
            a.admit(k, ip((k % 7) as u8));
            if k % 3 == 0 {
                a.leave(k);
            }
        }
        assert!(a.len() <= 16);
        assert!(a.order.len() <= 2 * 16 + 65, "{}", a.order.len());
        let per: usize = a.by_source.values().sum();
        assert_eq!(per, a.len());
    }

    #[test]
    fn the_job_bounds_leave_room_for_every_process() {
        let a = Admission::<u64>::for_job(4, 256);
        assert_eq!((a.cap(), a.per_source()), (256, 128));
        let a = Admission::<u64>::for_job(1024, 256);
        assert_eq!((a.cap(), a.per_source()), (1088, 1024));
    }
}
