//! What goes wrong with an environment or a line that claims to be the
//! launcher protocol's.
//!
//! Every error names what was wrong: the variable, or the line's kind and
//! field. Text taken from the input is shown shortened and escaped
//! ([`shown`]), so that an error message is one short printable line
//! whatever the input held.
use std::fmt;

/// A malformed environment or line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// A variable the protocol needs is not set (or not UTF-8).
    Unset(&'static str),
    /// A variable that holds a count or an index is not a whole number.
    NotANumber(&'static str),
    /// `CONVERSE_NODE` is not below `CONVERSE_NODES`.
    NodeNotBelowNodes {
        /// The process's number.
        node: usize,
        /// The job's process count.
        nodes: usize,
    },
    /// `CONVERSE_JOB_KEY` is not 64 hexadecimal digits.
    KeyNotHex,
    /// `CONVERSE_SHM_ID` is not hexadecimal.
    ShmIdNotHex,
    /// `CONVERSE_TIMEOUT` is not a whole number of seconds.
    TimeoutNotSeconds,
    /// `CONVERSE_HOSTS` is not a comma-separated list of numbers (the
    /// value, shortened and escaped).
    HostsNotNumbers(String),
    /// `CONVERSE_HOSTS` is a mapping (`(vector,...)`) that places no
    /// host for each process (why, naming the value shortened and
    /// escaped).
    HostsNotMapping(String),
    /// `CONVERSE_HOSTS` does not name one host per process.
    HostsCount {
        /// Hosts in the list.
        hosts: usize,
        /// The job's process count.
        nodes: usize,
    },
    /// A line with no word.
    Empty,
    /// A line whose first word names no line of this direction (the word,
    /// shortened and escaped).
    Unknown(String),
    /// A line of a known kind whose fields are wrong.
    Malformed {
        /// The line's kind (its first word).
        line: &'static str,
        /// What is wrong, naming the field.
        why: String,
    },
    /// A field (or a value to encode) longer than the protocol allows.
    TooLong {
        /// The field.
        what: &'static str,
        /// Its length in bytes.
        len: usize,
        /// The most the protocol allows.
        max: usize,
    },
}

impl Error {
    pub(crate) fn malformed(line: &'static str, why: impl Into<String>) -> Error {
        Error::Malformed {
            line,
            why: why.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Unset(name) => {
                write!(f, "{name} is not set (the job was started by convrun?)")
            }
            Error::NotANumber(name) => write!(f, "{name} is not a number"),
            Error::NodeNotBelowNodes { node, nodes } => write!(
                f,
                "CONVERSE_NODE {node} is not below CONVERSE_NODES {nodes}"
            ),
            Error::KeyNotHex => f.write_str("CONVERSE_JOB_KEY is not 64 hexadecimal digits"),
            Error::ShmIdNotHex => f.write_str("CONVERSE_SHM_ID is not hexadecimal"),
            Error::TimeoutNotSeconds => f.write_str("CONVERSE_TIMEOUT is not a number of seconds"),
            Error::HostsNotNumbers(list) => {
                write!(f, "CONVERSE_HOSTS `{list}` is not a list of numbers")
            }
            Error::HostsNotMapping(why) => write!(f, "CONVERSE_HOSTS: {why}"),
            Error::HostsCount { hosts, nodes } => write!(
                f,
                "CONVERSE_HOSTS names {hosts} hosts for {nodes} processes"
            ),
            Error::Empty => f.write_str("an empty line"),
            Error::Unknown(word) => write!(f, "unknown line `{word}`"),
            Error::Malformed { line, why } => write!(f, "malformed `{line}` line: {why}"),
            Error::TooLong { what, len, max } => {
                write!(f, "{what} of {len} bytes: the most is {max}")
            }
        }
    }
}

impl std::error::Error for Error {}

/// Most characters of input an error message shows.
const SHOWN_CHARS: usize = 64;

/// `s` (untrusted text) as an error message shows it: its first
/// 64 characters (`SHOWN_CHARS`), control characters escaped, `…` if cut, so
/// a message stays one short line whatever came in. The launcher uses it
/// for its own files' lines too.
pub fn shown(s: &str) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i == SHOWN_CHARS {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_text_is_short_and_printable() {
        assert_eq!(shown("0,1,x"), "0,1,x");
        assert_eq!(shown("a\nb\u{7}"), "a\\nb\\u{7}");
        let long = "y".repeat(1000);
        let s = shown(&long);
        assert_eq!(s.chars().count(), SHOWN_CHARS + 1);
        assert!(s.ends_with('…'));
    }
}
