//! What this process's network modules opened, counted for the scaling
//! benchmark (`cargo bench -p convrun --bench scale`): the TCP connections
//! this process started (every connection is started by exactly one of
//! its ends, so a job's total is the sum over its processes), and the
//! mappings of peers' shared-memory segments the shm module made (a
//! peer's header page when the VC is made, and the ring the peer writes
//! for this process once it announced it: at most two per peer talked to,
//! either way).
//!
//! # Concurrency
//!
//! Relaxed atomic counters, read after the fact: they order nothing.
use std::sync::atomic::{AtomicUsize, Ordering};

static TCP_CONNECTIONS_STARTED: AtomicUsize = AtomicUsize::new(0);
static TCP_CONNECT_RETRIES: AtomicUsize = AtomicUsize::new(0);
static SHM_SEGMENTS_MAPPED: AtomicUsize = AtomicUsize::new(0);

/// TCP connections this process has started (at start-up and since,
/// connecting again included); accepted ones are their starters'.
pub fn tcp_connections_started() -> usize {
    TCP_CONNECTIONS_STARTED.load(Ordering::Relaxed)
}

/// Connects this process tried again because the peer's listener was
/// busy (refused or reset during a burst of connects).
pub fn tcp_connect_retries() -> usize {
    TCP_CONNECT_RETRIES.load(Ordering::Relaxed)
}

/// Mappings of other processes' shared-memory segments this process has
/// made (header pages and rings).
pub fn shm_segments_mapped() -> usize {
    SHM_SEGMENTS_MAPPED.load(Ordering::Relaxed)
}

pub(crate) fn tcp_connection_started() {
    TCP_CONNECTIONS_STARTED.fetch_add(1, Ordering::Relaxed);
}

pub(crate) fn tcp_connect_retried() {
    TCP_CONNECT_RETRIES.fetch_add(1, Ordering::Relaxed);
}

pub(crate) fn shm_segment_mapped() {
    SHM_SEGMENTS_MAPPED.fetch_add(1, Ordering::Relaxed);
}
