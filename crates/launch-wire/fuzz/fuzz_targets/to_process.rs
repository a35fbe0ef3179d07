//! `ToProcess::parse` (what a process reads from `convrun`) on any line.
//!
//! Beyond "no panic": an error is one short printable line; a line that
//! parses encodes back to exactly the input (its end made `\n`; `abort`
//! may lack the space before its empty text), within
//! `ToProcess::max_len` of its card count, and that parses to the same
//! value; every card it holds is one `Card::new` takes; the line's end
//! (none, `\n`, `\r\n`) never changes the verdict.
#![no_main]

mod common;

use launch_wire::{Card, ToProcess};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    // A process hands the parser only UTF-8 (see the core's
    // rt/launch/convrun.rs).
    let Ok(line) = std::str::from_utf8(bytes) else {
        return;
    };
    let verdict = ToProcess::parse(line);
    for ended in common::with_endings(line, usize::MAX) {
        assert_eq!(ToProcess::parse(&ended), verdict, "{ended:?}");
    }
    let parsed = match verdict {
        Ok(parsed) => parsed,
        Err(e) => return common::check_error(&e),
    };
    let encoded = parsed.encode();
    assert_eq!(encoded.matches('\n').count(), 1, "{encoded:?}");
    assert_eq!(
        ToProcess::parse(&encoded).as_ref(),
        Ok(&parsed),
        "{encoded:?}"
    );
    let input = common::normalized(line);
    // `abort` alone is `abort` with no text (as the protocol's text fields
    // allow), which encodes with its space.
    if !(parsed == ToProcess::Abort(String::new()) && input == "abort\n") {
        assert_eq!(encoded, input, "the line re-encodes to itself");
    }
    if let ToProcess::Cards(cards) = &parsed {
        assert!(
            encoded.len() <= ToProcess::max_len(cards.len()),
            "{encoded:?}"
        );
        for card in cards {
            assert_eq!(Card::new(card.as_str()).as_ref(), Ok(card));
        }
    }
});
