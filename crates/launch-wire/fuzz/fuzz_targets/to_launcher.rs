//! `ToLauncher::parse` (what `convrun` reads from a process) on any line.
//!
//! Beyond "no panic": an error is one short printable line; a line that
//! parses encodes back within `ToLauncher::MAX_LEN` to a line that parses
//! to the same value, and that line is the input itself (its end made
//! `\n`) but for the numbers of a `hello` or a `whois`, which may have
//! had leading zeros, and a `failed` without its space (no text either way); the
//! line's end (none, `\n`, `\r\n`) never changes the verdict.
#![no_main]

mod common;

use launch_wire::{Card, ToLauncher};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    // The launcher hands the parser only UTF-8 (see convrun's control.rs).
    let Ok(line) = std::str::from_utf8(bytes) else {
        return;
    };
    let verdict = ToLauncher::parse(line);
    for ended in common::with_endings(line, ToLauncher::MAX_LEN) {
        assert_eq!(ToLauncher::parse(&ended), verdict, "{ended:?}");
    }
    let parsed = match verdict {
        Ok(parsed) => parsed,
        Err(e) => return common::check_error(&e),
    };
    let encoded = parsed.encode();
    assert!(encoded.len() <= ToLauncher::MAX_LEN, "{encoded:?}");
    assert_eq!(encoded.matches('\n').count(), 1, "{encoded:?}");
    assert_eq!(
        ToLauncher::parse(&encoded).as_ref(),
        Ok(&parsed),
        "{encoded:?}"
    );
    let input = common::normalized(line);
    match &parsed {
        ToLauncher::Hello {
            card, nonce, proof, ..
        } => {
            let tail = format!(" {card} {} {}\n", nonce.to_hex(), proof.to_hex());
            assert!(input.ends_with(&tail), "{input:?}");
            assert_eq!(Card::new(card.as_str()).as_ref(), Ok(card));
        }
        // `failed` alone is `failed` with no text (as the protocol's
        // text fields allow), which encodes with its space.
        ToLauncher::Failed(text) if text.is_empty() && input == "failed\n" => {}
        // Its number may have had leading zeros.
        ToLauncher::WhoIs(node) => {
            let field = input
                .strip_prefix("whois ")
                .and_then(|rest| rest.strip_suffix('\n'))
                .expect("a whois line");
            assert_eq!(field.parse::<usize>().ok(), Some(*node), "{input:?}");
        }
        _ => assert_eq!(encoded, input, "the line re-encodes to itself"),
    }
});
