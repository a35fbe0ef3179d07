//! Forwarding the processes' standard output and error to `convrun`'s,
//! line by line.
//!
//! # Invariants
//!
//! A line goes out in one write on the locked stream, so lines of
//! different processes never mix; a last line without its newline gets
//! one, so that the next process's output starts a line.
//!
//! # Concurrency
//!
//! One thread per forwarded stream; they meet only on the locks of our
//! stdout and stderr. The job joins them before it exits.
use std::io::{BufRead, BufReader, Read, Write};

/// Copies `from` to our stdout or stderr line by line (see the module
/// comment), on a thread of its own.
pub fn forward(from: impl Read + Send + 'static, to_stderr: bool) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut reader = BufReader::with_capacity(64 << 10, from);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    if line.last() != Some(&b'\n') {
                        line.push(b'\n');
                    }
                    if to_stderr {
                        let mut err = std::io::stderr().lock();
                        let _ = err.write_all(&line);
                        let _ = err.flush();
                    } else {
                        let mut out = std::io::stdout().lock();
                        let _ = out.write_all(&line);
                        let _ = out.flush();
                    }
                }
            }
        }
    })
}
