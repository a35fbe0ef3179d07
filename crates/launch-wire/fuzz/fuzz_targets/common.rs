//! What every launch-wire fuzz target checks of the parsers' answers.
#![allow(dead_code)] // each target uses a different subset

use launch_wire::Error;

/// Most characters of an error message: a few words around at most two
/// pieces of the input, each shown as 64 characters at most (a control
/// character escaped to at most 10).
const MAX_MESSAGE_CHARS: usize = 1024;

/// An error says something, on one short printable line, whatever the
/// input held (the launcher and the processes print it as it is).
pub fn check_error(e: &Error) {
    check_message(&e.to_string());
}

/// [`check_error`] on any error's message.
pub fn check_message(msg: &str) {
    assert!(!msg.is_empty(), "an empty message");
    assert!(
        msg.chars().count() <= MAX_MESSAGE_CHARS,
        "a message of {} characters: {msg:?}",
        msg.chars().count()
    );
    assert!(
        !msg.chars().any(char::is_control),
        "a control character in {msg:?}"
    );
}

/// `line` as `encode` would write it: its end (`\n`, or `\r\n`) made `\n`.
pub fn normalized(line: &str) -> String {
    let body = line.strip_suffix('\n').unwrap_or(line);
    let body = body.strip_suffix('\r').unwrap_or(body);
    format!("{body}\n")
}

/// `line` with each ending a reader may leave on it, for lines that have
/// none (so that adding one changes nothing) and stay within `max` bytes.
pub fn with_endings(line: &str, max: usize) -> Vec<String> {
    if line.ends_with(['\n', '\r']) || line.len() + 2 > max {
        return Vec::new();
    }
    vec![format!("{line}\n"), format!("{line}\r\n")]
}
