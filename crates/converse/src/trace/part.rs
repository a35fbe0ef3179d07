//! A process's part of a trace: its PEs' events with wall-clock times, the
//! names they refer to and their stats (`+stats`), as it travels to process 0 (postcard bytes)
//! and as the writer reads it.
//!
//! Bytes from another process are not trusted: [`ProcessPart::decode`]
//! refuses what does not parse (postcard checks every length against the
//! bytes there, and serde caps what a claimed length preallocates), and
//! the writer checks the numbers inside (PE numbers, name indices) as it
//! uses them.
use serde::{Deserialize, Serialize};

/// One process's PEs.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct ProcessPart {
    pub process: u32,
    pub pid: u32,
    pub host: String,
    /// False when the part was taken at an abort: PEs may have been
    /// stopped in the middle of anything.
    pub complete: bool,
    /// Runtime message kinds by number (0: a reduction contribution).
    pub runtime_kinds: Vec<(u32, String)>,
    pub pes: Vec<PePart>,
}

/// One PE's events, oldest first, times as Unix nanoseconds.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct PePart {
    pub pe: u32,
    pub node: u32,
    pub events: Vec<[u64; 2]>,
    /// Events lost to the ring's wrapping before the first one here.
    pub lost: u64,
    /// The ring's size in events (`+trace-buffer`).
    pub capacity: u64,
    /// Handler index and name, for every handler the PE installed.
    pub handlers: Vec<(u32, String)>,
    /// Span and mark names, by their index in the events.
    pub names: Vec<String>,
    /// The PE's totals (`+stats`), if it kept them and had ended.
    pub stats: Option<super::stats::PeStats>,
}

impl ProcessPart {
    pub fn encode(&self) -> Vec<u8> {
        postcard::to_allocvec(self).expect("a trace part always serializes")
    }

    pub fn decode(bytes: &[u8]) -> Result<ProcessPart, String> {
        postcard::from_bytes(bytes)
            .map_err(|e| format!("malformed trace part of {} bytes: {e}", bytes.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_round_trip_and_cut_bytes_are_refused() {
        let part = ProcessPart {
            process: 1,
            pid: 42,
            host: "h".into(),
            complete: true,
            runtime_kinds: vec![(3, "QdStart".into())],
            pes: vec![PePart {
                pe: 2,
                node: 1,
                events: vec![[1, 2], [3, 4]],
                lost: 5,
                capacity: 8,
                handlers: vec![(1, "a::b".into())],
                names: vec!["phase".into()],
                stats: Some(super::super::stats::PeStats {
                    busy: vec![1, 2],
                    handlers: vec![super::super::stats::HandlerStats {
                        index: 1,
                        calls: 3,
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            }],
        };
        let bytes = part.encode();
        assert_eq!(ProcessPart::decode(&bytes), Ok(part));
        for cut in 0..bytes.len() {
            assert!(ProcessPart::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        // A claimed length far beyond the bytes is refused, not allocated.
        let huge = [1, 42, 1, b'h', 1, 0xff, 0xff, 0xff, 0xff, 0x0f];
        assert!(ProcessPart::decode(&huge).is_err());
    }
}
