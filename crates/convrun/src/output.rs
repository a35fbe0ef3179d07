//! Forwarding the processes' standard output and error to `convrun`'s,
//! line by line, in pieces of bounded size.
//!
//! # Invariants
//!
//! - The bytes a process writes come out in order, none lost or added but
//!   one: a last line without its newline gets one, so that the next
//!   process's output starts a line.
//! - A line of at most [`MAX_PIECE`] bytes (its newline included) goes out
//!   in one write on the locked stream, so it never mixes with another
//!   process's output.
//! - A longer line goes out in pieces of [`MAX_PIECE`] bytes as they
//!   arrive (the last one shorter), each one write: another process's
//!   lines may come between two pieces. That is the price of holding at
//!   most [`MAX_PIECE`] bytes of a line per stream, whatever a process
//!   writes (a 300 MB line took `convrun` to 295 MB when it held whole
//!   lines).
//!
//! # Concurrency
//!
//! Two threads forward the job's streams ([`forward_all`]): one every
//! process's stdout, one every stderr, so that a stuck stdout (a pipe into
//! a pager that stopped reading) never holds back the diagnostics on
//! stderr. Each registers its streams once in its own epoll
//! ([`crate::wake::Epoll`], level-triggered: every wake-up reads each
//! stream it reports once, and a stream with more left is reported
//! again), sleeps in it and reads only the streams that are readable, so
//! one read never blocks the others and a wake-up costs the streams that
//! had something, not all of them (with a `poll(2)` list of every stream,
//! a job's output cost `O(P)` per line). (A thread per stream cost a
//! 4-process job 8 thread starts and ends, on the start-up's critical
//! path; it remains the fallback for streams the kernel will not watch.)
//! Each stream has its own [`Lines`]; the job joins the threads before it
//! exits, once every stream has ended.
use std::fs::File;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};

use crate::wake::{Epoll, READ, Token};

/// Most bytes of a line held before they are written out.
pub const MAX_PIECE: usize = 64 << 10;

/// A process's output stream, and where it goes.
pub struct Source {
    pub fd: OwnedFd,
    /// To our stderr (else our stdout).
    pub to_stderr: bool,
}

/// One stream being forwarded.
struct Stream<R> {
    reader: BufReader<R>,
    lines: Lines,
    to_stderr: bool,
}

impl<R: Read> Stream<R> {
    fn new(from: R, max: usize, to_stderr: bool) -> Self {
        Stream {
            reader: BufReader::with_capacity(max, from),
            lines: Lines::new(max),
            to_stderr,
        }
    }

    /// Reads once (the stream is readable) and hands `emit` what is
    /// complete; true at the stream's end (or its first error other than
    /// an interruption), after what it held went out.
    fn pump(&mut self, emit: &mut impl FnMut(&[u8])) -> bool {
        loop {
            match self.reader.fill_buf() {
                Ok([]) => break,
                Ok(bytes) => {
                    let used = self.lines.feed(bytes, emit);
                    self.reader.consume(used);
                    // What the one read brought is all taken: back to
                    // waiting, never a read that would block.
                    if self.reader.buffer().is_empty() {
                        return false;
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        self.lines.finish(emit);
        true
    }
}

impl Stream<File> {
    /// Forwards the stream to its end, reading blocking (a thread of its
    /// own: see the module comment).
    fn pump_to_end(mut self) {
        let to_stderr = self.to_stderr;
        while !self.pump(&mut |piece| emit_to(to_stderr, piece)) {}
    }
}

/// Writes `piece` whole to our stderr or stdout.
fn emit_to(to_stderr: bool, piece: &[u8]) {
    if to_stderr {
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(piece);
        let _ = err.flush();
    } else {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(piece);
        let _ = out.flush();
    }
}

/// Copies every stream of `sources` to our stdout or stderr line by line
/// (see the module comment), on one thread, until they have all ended.
/// Streams ready at once are read in the order of `sources`.
pub fn forward_all(sources: Vec<Source>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut streams: Vec<Option<Stream<File>>> = sources
            .into_iter()
            .map(|s| Some(Stream::new(File::from(s.fd), MAX_PIECE, s.to_stderr)))
            .collect();
        // Streams the kernel will not watch (no epoll, or out of watches)
        // get a thread each, reading blocking.
        let mut alone = Vec::new();
        let epoll = Epoll::new().ok();
        let mut live = 0;
        for (i, slot) in streams.iter_mut().enumerate() {
            let Some(s) = slot else { continue };
            let fd = s.reader.get_ref().as_raw_fd();
            if epoll
                .as_ref()
                .is_some_and(|ep| ep.add(fd, Token::Stream(i), READ).is_ok())
            {
                live += 1;
            } else if let Some(s) = slot.take() {
                alone.push(std::thread::spawn(move || s.pump_to_end()));
            }
        }
        if let Some(mut epoll) = epoll {
            let mut ready = Vec::new();
            while live > 0 {
                ready.clear();
                match epoll.wait(None) {
                    Ok(events) => ready.extend(events.iter().filter_map(|e| match e.token {
                        Token::Stream(i) => Some(i),
                        _ => None,
                    })),
                    // Not expected with a valid epoll; reading every
                    // stream blocking still forwards everything, in turn.
                    Err(_) => ready.extend((0..streams.len()).filter(|&i| streams[i].is_some())),
                }
                ready.sort_unstable();
                ready.dedup();
                for &i in &ready {
                    let Some(s) = &mut streams[i] else { continue };
                    let to_stderr = s.to_stderr;
                    if s.pump(&mut |piece| emit_to(to_stderr, piece)) {
                        let _ = epoll.remove(s.reader.get_ref().as_raw_fd());
                        streams[i] = None;
                        live -= 1;
                    }
                }
            }
        }
        for t in alone {
            let _ = t.join();
        }
    })
}

/// Reads `from` to its end (or its first error other than an
/// interruption) and hands `emit` its lines, each whole if at most `max`
/// bytes, else in pieces of `max` bytes (see the module comment): the
/// blocking form of [`forward_all`]'s loop, for the tests.
#[cfg(test)]
fn copy_lines(from: impl Read, max: usize, mut emit: impl FnMut(&[u8])) {
    let mut stream = Stream::new(from, max, false);
    while !stream.pump(&mut emit) {}
}

/// The line being gathered from one stream: at most `max` bytes of it.
struct Lines {
    /// The line so far (no newline yet), at most `max` bytes; its capacity
    /// is reserved once, so it never grows past that.
    line: Vec<u8>,
    max: usize,
    /// True if a piece of an unfinished line went out already, so that its
    /// end still owes a newline even when nothing of it is held.
    cut: bool,
}

impl Lines {
    fn new(max: usize) -> Lines {
        assert!(max > 0, "a piece holds at least one byte");
        Lines {
            line: Vec::with_capacity(max),
            max,
            cut: false,
        }
    }

    /// Takes what it can of `bytes`, handing `emit` a line that ends or a
    /// piece that fills up; returns how many bytes it took (at least one
    /// if `bytes` has any).
    fn feed(&mut self, bytes: &[u8], emit: &mut impl FnMut(&[u8])) -> usize {
        let room = self.max - self.line.len();
        let take = &bytes[..bytes.len().min(room)];
        let used = match take.iter().position(|&b| b == b'\n') {
            Some(end) => end + 1,
            None => take.len(),
        };
        self.line.extend_from_slice(&take[..used]);
        if self.line.last() == Some(&b'\n') {
            emit(&self.line);
            self.line.clear();
            self.cut = false;
        } else if self.line.len() == self.max {
            emit(&self.line);
            self.line.clear();
            self.cut = true;
        }
        used
    }

    /// The stream's end: what is held goes out, with the newline the last
    /// line lacked.
    fn finish(&mut self, emit: &mut impl FnMut(&[u8])) {
        if !self.line.is_empty() || self.cut {
            // Within the reserved capacity unless the line is full, and a
            // full line went out in `feed`.
            self.line.push(b'\n');
            emit(&self.line);
            self.line.clear();
            self.cut = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands out `data` at most `step` bytes at a time (as a
    /// pipe does), interrupted once before every other read.
    struct Trickle<'a> {
        data: &'a [u8],
        step: usize,
        interrupt: bool,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.interrupt = !self.interrupt;
            if self.interrupt {
                return Err(ErrorKind::Interrupted.into());
            }
            let n = self.data.len().min(buf.len()).min(self.step);
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    /// The writes `copy_lines` makes of `data` with pieces of `max`, read
    /// `step` bytes at a time.
    fn writes(data: &[u8], max: usize, step: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let from = Trickle {
            data,
            step,
            interrupt: false,
        };
        copy_lines(from, max, |piece| out.push(piece.to_vec()));
        out
    }

    #[test]
    fn short_lines_go_out_whole_and_in_order() {
        let data = b"one\n\ntwo three\nfour\n";
        for step in [1, 3, 100] {
            let w = writes(data, 16, step);
            assert_eq!(w, [&b"one\n"[..], b"\n", b"two three\n", b"four\n"]);
        }
        // A line of exactly `max` bytes, newline included, is one write.
        let exact = b"0123456789abcde\n";
        assert_eq!(writes(exact, 16, 5), [exact.to_vec()]);
    }

    #[test]
    fn the_last_line_gets_its_newline() {
        assert_eq!(writes(b"a\nend", 16, 2), [&b"a\n"[..], b"end\n"]);
        assert!(writes(b"", 16, 2).is_empty());
        // A long last line, cut at the bound: the newline comes alone.
        assert_eq!(
            writes(b"0123456789", 5, 3),
            [&b"01234"[..], b"56789", b"\n"]
        );
    }

    #[test]
    fn a_long_line_goes_out_in_bounded_pieces() {
        let mut data = b"before\n".to_vec();
        data.extend((0..1000u32).map(|i| b'a' + (i % 26) as u8));
        data.extend_from_slice(b"\nafter\n");
        for step in [1, 7, 64, 5000] {
            let w = writes(&data, 64, step);
            assert!(w.iter().all(|p| !p.is_empty() && p.len() <= 64), "{w:?}");
            assert_eq!(w.concat(), data, "every byte, in order");
            assert_eq!(w[0], b"before\n");
            assert_eq!(w.last().unwrap(), b"after\n");
            // The long line: 15 full pieces, then the rest with its newline.
            assert_eq!(w.len(), 1 + 16 + 1, "{step}");
            assert!(w[1..16].iter().all(|p| p.len() == 64));
            assert_eq!(w[16].len(), 1000 - 15 * 64 + 1);
        }
    }

    /// `len` bytes of a pattern with no newline, made as they are read.
    struct Endless {
        at: u64,
        len: u64,
    }

    fn pattern(at: u64) -> u8 {
        b'a' + (at.wrapping_mul(2654435761) >> 7) as u8 % 26
    }

    impl Read for Endless {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = buf.len().min((self.len - self.at) as usize);
            for (i, b) in buf[..n].iter_mut().enumerate() {
                *b = pattern(self.at + i as u64);
            }
            self.at += n as u64;
            Ok(n)
        }
    }

    #[test]
    fn a_huge_line_takes_bounded_memory() {
        // 16 MiB without a newline: it goes out as it comes, in pieces of
        // MAX_PIECE, the bytes in order, the line never held whole.
        let len = 16u64 << 20;
        let mut seen = 0u64;
        let mut pieces = 0;
        copy_lines(Endless { at: 0, len }, MAX_PIECE, |piece| {
            assert!(piece.len() <= MAX_PIECE);
            for &b in piece {
                let want = if seen == len { b'\n' } else { pattern(seen) };
                assert_eq!(b, want, "byte {seen}");
                seen += 1;
            }
            pieces += 1;
        });
        assert_eq!(seen, len + 1, "every byte and the last newline");
        assert_eq!(pieces, (len / MAX_PIECE as u64) + 1);

        // The held line never grows past its reserved bound.
        let mut lines = Lines::new(MAX_PIECE);
        let chunk = vec![b'x'; 10_000];
        let mut emitted = 0;
        for _ in 0..1000 {
            let mut rest = &chunk[..];
            while !rest.is_empty() {
                let used = lines.feed(rest, &mut |p: &[u8]| emitted += p.len());
                assert!(used > 0);
                rest = &rest[used..];
                assert!(lines.line.capacity() <= MAX_PIECE, "the line grew");
            }
        }
        lines.finish(&mut |p: &[u8]| emitted += p.len());
        assert_eq!(emitted, 10_000 * 1000 + 1);
        assert!(lines.line.capacity() <= MAX_PIECE);
    }
}
