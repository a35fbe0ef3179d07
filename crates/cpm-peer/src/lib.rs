//! A second crate with invokables, for converse-ext's Cpm tests (in
//! process) and convrun's `ext_cpm` scenario (across processes): its
//! invokables and the test crate's are registered on every PE in the order
//! of their full paths, whichever crate the linker saw first.
use std::sync::Mutex;

use converse_ext::cpm::{self, invokable};

/// What this crate's invokables recorded: (PE, what, value).
pub static SEEN: Mutex<Vec<(usize, &'static str, u64)>> = Mutex::new(Vec::new());

fn record(what: &'static str, value: u64) {
    SEEN.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((converse::my_pe(), what, value));
}

/// Records `value` under "peer_store".
#[invokable]
pub fn peer_store(value: u64) {
    record("peer_store", value);
}

/// Records the length of `text` under "peer_text".
#[invokable]
pub fn peer_text(text: &str) {
    record("peer_text", text.len() as u64);
}

/// This crate's invokables' handler numbers on the calling PE.
pub fn handler_numbers() -> [usize; 2] {
    [
        cpm::handler_index(&CPM_PEER_STORE),
        cpm::handler_index(&CPM_PEER_TEXT),
    ]
}
