//! `Card::new` (what a process's network module hands the launcher
//! protocol) on any text.
//!
//! Beyond "no panic": it takes exactly the texts of 1 to `MAX_CARD` bytes
//! without whitespace or control characters, keeping them as they are; an
//! error is one short printable line; a card it takes travels: a `hello`
//! line and a `card` line parse back to it.
#![no_main]

mod common;

use launch_wire::{Card, MAX_CARD, Nonce, Proof, ToLauncher, ToProcess};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let text = String::from_utf8_lossy(bytes);
    let carriable = !text.is_empty()
        && text.len() <= MAX_CARD
        && !text.chars().any(|c| c.is_whitespace() || c.is_control());
    let card = match Card::new(text.as_ref()) {
        Ok(card) => card,
        Err(e) => {
            assert!(!carriable, "{text:?} refused: {e}");
            return common::check_error(&e);
        }
    };
    assert!(carriable, "{text:?} taken");
    assert_eq!(card.as_str(), text);
    assert_eq!(card.to_string(), text);
    let hello = ToLauncher::Hello {
        node: 0,
        pid: 1,
        card: card.clone(),
        nonce: Nonce::from_bytes([7; 16]),
        proof: Proof::from_bytes([9; 32]),
    };
    assert_eq!(ToLauncher::parse(&hello.encode()), Ok(hello));
    let answer = ToProcess::Card {
        node: 3,
        card: card.clone(),
    };
    let line = answer.encode();
    assert!(line.len() <= ToProcess::MAX_LEN, "{line:?}");
    assert_eq!(ToProcess::parse(&line), Ok(answer));
    assert_eq!(card.into_string(), text);
});
