//! Atomic output and input: one call's text never interleaves with another
//! PE's (`CmiPrintf`, `CmiError`, `CmiScanf`).
//!
//! Each call formats its whole text first and then writes it with one
//! `write_all` under the stream's lock; input is read a line at a time under
//! a process-wide lock. On the in-process layer every PE shares the process's
//! streams; later layers forward output to the launcher the same way.
use std::fmt;
use std::io::{BufRead, Write};
use std::str::FromStr;
use std::sync::Mutex;

/// Writes the formatted text to standard output atomically (`CmiPrintf`).
/// Usually called through [`cmi_printf!`](crate::cmi_printf).
#[doc(alias = "CmiPrintf")]
pub fn printf(args: fmt::Arguments<'_>) {
    let text = fmt::format(args);
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// Writes the formatted text to standard error atomically (`CmiError`).
/// Usually called through [`cmi_error!`](crate::cmi_error).
#[doc(alias = "CmiError")]
pub fn error(args: fmt::Arguments<'_>) {
    let text = fmt::format(args);
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    let _ = err.flush();
}

/// `printf`-like atomic print to standard output (`CmiPrintf`).
#[doc(alias = "CmiPrintf")]
#[macro_export]
macro_rules! cmi_printf {
    ($($arg:tt)*) => { $crate::printf(::std::format_args!($($arg)*)) };
}

/// `printf`-like atomic print to standard error (`CmiError`).
#[doc(alias = "CmiError")]
#[macro_export]
macro_rules! cmi_error {
    ($($arg:tt)*) => { $crate::error(::std::format_args!($($arg)*)) };
}

static INPUT: Mutex<()> = Mutex::new(());

/// Reads one line from standard input, atomically with respect to other
/// PEs' reads; the calling PE blocks until it arrives. `None` at end of input.
/// The line is returned without its line terminator.
#[doc(alias = "CmiScanf")]
pub fn scan_line() -> std::io::Result<Option<String>> {
    let _one_reader = crate::sync::lock(&INPUT);
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let trimmed = line.trim_end_matches(['\n', '\r']).len();
    line.truncate(trimmed);
    Ok(Some(line))
}

/// Why [`scan`] failed.
#[derive(Debug)]
pub enum ScanError {
    /// Reading failed.
    Io(std::io::Error),
    /// Input ended before a line arrived.
    Eof,
    /// The line held the wrong number of fields.
    Count {
        /// Fields asked for.
        expected: usize,
        /// Fields on the line.
        found: usize,
    },
    /// Field `index` (from 0) did not parse.
    Parse {
        /// Position of the field, from 0.
        index: usize,
        /// Its text.
        field: String,
    },
}

impl fmt::Display for ScanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScanError::Io(e) => write!(f, "reading standard input: {e}"),
            ScanError::Eof => write!(f, "standard input ended"),
            ScanError::Count { expected, found } => {
                write!(f, "expected {expected} fields on the line, found {found}")
            }
            ScanError::Parse { index, field } => {
                write!(f, "field {index} `{field}` does not parse")
            }
        }
    }
}

impl std::error::Error for ScanError {}

/// Reads one line atomically (as [`scan_line`]) and parses its
/// whitespace-separated fields as `T`s, `count` of them (`CmiScanf` with
/// `count` conversions of one type).
#[doc(alias = "CmiScanf")]
pub fn scan<T: FromStr>(count: usize) -> Result<Vec<T>, ScanError> {
    let line = scan_line().map_err(ScanError::Io)?.ok_or(ScanError::Eof)?;
    parse_fields(&line, count)
}

fn parse_fields<T: FromStr>(line: &str, count: usize) -> Result<Vec<T>, ScanError> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.len() != count {
        return Err(ScanError::Count {
            expected: count,
            found: fields.len(),
        });
    }
    fields
        .iter()
        .enumerate()
        .map(|(index, f)| {
            f.parse().map_err(|_| ScanError::Parse {
                index,
                field: f.to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_parse_and_errors_name_the_field() {
        assert_eq!(parse_fields::<i32>("1 2  3", 3).unwrap(), vec![1, 2, 3]);
        assert!(matches!(
            parse_fields::<i32>("1 2", 3),
            Err(ScanError::Count {
                expected: 3,
                found: 2
            })
        ));
        match parse_fields::<i32>("1 x", 2) {
            Err(ScanError::Parse { index: 1, field }) => assert_eq!(field, "x"),
            other => panic!("{other:?}"),
        }
    }
}
