//! Tests shared by the two queues of this layer (`inbox`, `mpsc`): both are
//! MPSC FIFO queues with the same consumer contract, so one set of checks
//! serves both.
use crate::sync::Arc;

/// What the shared checks need of a queue.
pub(crate) trait TestQueue<T>: Send + Sync + 'static {
    fn push(&self, value: T);
    /// # Safety
    /// Single consumer, as the queues' own `pop`.
    unsafe fn pop(&self) -> Option<T>;
    /// # Safety
    /// Single consumer, as the queues' own `is_empty`.
    unsafe fn is_empty(&self) -> bool;
}

/// Both queues have the same three calls; forward them.
macro_rules! test_queue {
    ($queue:ty) => {
        impl<T: Send + 'static> TestQueue<T> for $queue {
            fn push(&self, value: T) {
                self.push(value)
            }
            unsafe fn pop(&self) -> Option<T> {
                // SAFETY: forwarded contract.
                unsafe { self.pop() }
            }
            unsafe fn is_empty(&self) -> bool {
                // SAFETY: forwarded contract.
                unsafe { self.is_empty() }
            }
        }
    };
}
test_queue!(super::mpsc::MpscQueue<T>);
test_queue!(super::inbox::Inbox<T>);

/// `producers` threads push `each` numbered values while this thread pops:
/// every value arrives exactly once and each producer's in order. Under loom
/// the consumer pops a few times concurrently, then drains after the joins.
pub(crate) fn producers_keep_their_order<Q: TestQueue<(usize, usize)>>(
    queue: Q,
    producers: usize,
    each: usize,
) {
    let q = Arc::new(queue);
    let threads: Vec<_> = (0..producers)
        .map(|p| {
            let q = q.clone();
            crate::sync::spawn(move || {
                for i in 0..each {
                    q.push((p, i));
                }
            })
        })
        .collect();
    let total = producers * each;
    let mut next = vec![0; producers];
    let record = |(p, i): (usize, usize), next: &mut Vec<usize>| {
        assert_eq!(i, next[p], "producer {p} out of order");
        next[p] += 1;
    };
    // Under loom, pop a few times while the producers run (the state space
    // must stay small), then drain after joining them.
    let concurrent_pops = if cfg!(loom) { 3 } else { usize::MAX };
    let mut tries = 0;
    while next.iter().sum::<usize>() < total && tries < concurrent_pops {
        tries += 1;
        // SAFETY: this thread is the only consumer.
        if let Some(v) = unsafe { q.pop() } {
            record(v, &mut next);
        }
    }
    for t in threads {
        t.join().unwrap();
    }
    // SAFETY: as above.
    while let Some(v) = unsafe { q.pop() } {
        record(v, &mut next);
    }
    assert_eq!(next.iter().sum::<usize>(), total);
    // SAFETY: as above.
    assert!(unsafe { q.is_empty() });
}

/// Values still queued when the queue is dropped are dropped with it.
#[cfg(not(loom))]
pub(crate) fn drop_frees_remaining_values<Q: TestQueue<Arc<()>>>(queue: Q) {
    let counter = Arc::new(());
    for _ in 0..10 {
        queue.push(counter.clone());
    }
    drop(queue);
    assert_eq!(Arc::strong_count(&counter), 1);
}
