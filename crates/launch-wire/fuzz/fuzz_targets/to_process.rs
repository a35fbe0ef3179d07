//! `ToProcess::parse` (what a process reads from `convrun`) on any line.
//!
//! Beyond "no panic": an error is one short printable line; a line that
//! parses encodes back to exactly the input (its end made `\n`; `abort`
//! may lack the space before its empty text, a `card`'s number may have
//! had leading zeros), within
//! `ToProcess::MAX_LEN`, and that parses to the same value; the card a
//! `card` line holds is one `Card::new` takes; the line's end
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
    match &parsed {
        ToProcess::Abort(text) if text.is_empty() && input == "abort\n" => {}
        // Its number may have had leading zeros.
        ToProcess::Card { node, card } => {
            let (number, rest) = input
                .strip_prefix("card ")
                .and_then(|rest| rest.strip_suffix('\n'))
                .and_then(|rest| rest.split_once(' '))
                .expect("a card line");
            assert_eq!(
                (number.parse::<usize>().ok(), rest),
                (Some(*node), card.as_str()),
                "{input:?}"
            );
        }
        _ => assert_eq!(encoded, input, "the line re-encodes to itself"),
    }
    assert!(encoded.len() <= ToProcess::MAX_LEN, "{encoded:?}");
    if let ToProcess::Card { card, .. } = &parsed {
        assert_eq!(Card::new(card.as_str()).as_ref(), Ok(card));
    }
});
