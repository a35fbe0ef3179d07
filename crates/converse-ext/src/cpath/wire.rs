//! The bytes of CPath's messages: a writer, a reader that never trusts
//! what it reads (every read says what was missing), and the descriptor's
//! encoding.
//!
//! Integers are little-endian; a descriptor is `creator: u32, seq: u64,
//! home: u32, thread_fn: u32, mapper: u32, ndims: u32, dims: u32 × ndims`.
//! A reader's failures are causes in words, which the handlers turn into
//! an abort naming the sending PE.
use super::CPath;

/// Bytes being written for a message payload.
#[derive(Default)]
pub(super) struct Writer(pub(super) Vec<u8>);

impl Writer {
    pub(super) fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }

    pub(super) fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub(super) fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// A count, then the `u32`s.
    pub(super) fn u32s(&mut self, v: &[u32]) -> &mut Self {
        self.len(v.len());
        for &x in v {
            self.u32(x);
        }
        self
    }

    /// A count, then the `i32`s.
    pub(super) fn i32s(&mut self, v: &[i32]) -> &mut Self {
        self.len(v.len());
        for &x in v {
            self.0.extend_from_slice(&x.to_le_bytes());
        }
        self
    }

    /// A count, then element numbers as `u64`s.
    pub(super) fn flats(&mut self, flats: &[usize]) -> &mut Self {
        self.len(flats.len());
        for &f in flats {
            self.u64(f as u64);
        }
        self
    }

    /// A length as a `u64`, then the bytes.
    pub(super) fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u64(v.len() as u64);
        self.0.extend_from_slice(v);
        self
    }

    /// A descriptor (see the module comment).
    pub(super) fn path(&mut self, p: &CPath) -> &mut Self {
        self.u32(p.creator as u32)
            .u64(p.seq)
            .u32(p.home as u32)
            .u32(p.thread_fn as u32)
            .u32(p.mapper as u32)
            .u32s(&p.dims)
    }

    /// A count. Element lists are below 2^32 (arrays have fewer
    /// elements); a longer pattern or tag list is refused.
    pub(super) fn len(&mut self, n: usize) {
        match u32::try_from(n) {
            Ok(n) => self.u32(n),
            Err(_) => converse::abort(&format!(
                "CPath on PE {}: a list of {n} items is too long for a message (at most 2^32 - 1)",
                converse::my_pe()
            )),
        };
    }
}

/// What went wrong reading a message, in words.
pub(super) type Cause = String;

/// Bytes being read from a message payload.
pub(super) struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { rest: bytes }
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], Cause> {
        if self.rest.len() < n {
            return Err(format!(
                "{what}: {n} bytes wanted, {} left (message too short)",
                self.rest.len()
            ));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], Cause> {
        let b = self.take(N, what)?;
        b.try_into().map_err(|_| format!("{what}: bad length"))
    }

    pub(super) fn u8(&mut self, what: &str) -> Result<u8, Cause> {
        Ok(self.array::<1>(what)?[0])
    }

    pub(super) fn u32(&mut self, what: &str) -> Result<u32, Cause> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub(super) fn u64(&mut self, what: &str) -> Result<u64, Cause> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A count of `width`-byte items, checked against what is left before
    /// anything is allocated.
    fn count(&mut self, width: usize, what: &str) -> Result<usize, Cause> {
        let n = self.u32(what)? as usize;
        if n.checked_mul(width).is_none_or(|b| b > self.rest.len()) {
            return Err(format!(
                "{what}: a count of {n} but {} bytes left",
                self.rest.len()
            ));
        }
        Ok(n)
    }

    pub(super) fn u32s(&mut self, what: &str) -> Result<Vec<u32>, Cause> {
        let n = self.count(4, what)?;
        (0..n).map(|_| self.u32(what)).collect()
    }

    pub(super) fn i32s(&mut self, what: &str) -> Result<Vec<i32>, Cause> {
        let n = self.count(4, what)?;
        (0..n)
            .map(|_| Ok(i32::from_le_bytes(self.array(what)?)))
            .collect()
    }

    pub(super) fn u64s(&mut self, what: &str) -> Result<Vec<u64>, Cause> {
        let n = self.count(8, what)?;
        (0..n).map(|_| self.u64(what)).collect()
    }

    pub(super) fn bytes(&mut self, what: &str) -> Result<&'a [u8], Cause> {
        let n = self.u64(what)?;
        let n = usize::try_from(n).map_err(|_| format!("{what}: a length of {n}"))?;
        self.take(n, what)
    }

    /// A descriptor, its shape checked (every dimension at least 1, fewer
    /// than 2^32 elements); the caller checks its numbers against the PE's
    /// registrations and the job ([`CPath::check`]).
    pub(super) fn path(&mut self, what: &str) -> Result<CPath, Cause> {
        let creator = self.u32(what)? as usize;
        let seq = self.u64(what)?;
        let home = self.u32(what)? as usize;
        let thread_fn = self.u32(what)? as usize;
        let mapper = self.u32(what)? as usize;
        let dims = self.u32s(what)?;
        super::path::check_dims(&dims).map_err(|why| format!("{what}: {why}"))?;
        Ok(CPath {
            creator,
            seq,
            home,
            thread_fn,
            mapper,
            dims,
        })
    }

    /// Fails unless every byte was read.
    pub(super) fn end(&self, what: &str) -> Result<(), Cause> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(format!("{what}: {} bytes too many", self.rest.len()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_written_reads_back_and_short_or_long_input_is_refused() {
        let p = CPath {
            creator: 3,
            seq: 1 << 40,
            home: 2,
            thread_fn: 5,
            mapper: 1,
            dims: vec![4, 7],
        };
        let mut w = Writer::default();
        w.path(&p).i32s(&[-1, 9]).flats(&[8]).bytes(b"xyz").u8(1);
        let mut r = Reader::new(&w.0);
        assert_eq!(r.path("p").unwrap(), p);
        assert_eq!(r.i32s("t").unwrap(), vec![-1, 9]);
        assert_eq!(r.u64s("f").unwrap(), vec![8]);
        assert_eq!(r.bytes("b").unwrap(), b"xyz");
        assert_eq!(r.u8("k").unwrap(), 1);
        r.end("e").unwrap();
        for cut in 0..w.0.len() {
            let mut r = Reader::new(&w.0[..cut]);
            let all = (|| -> Result<(), Cause> {
                r.path("p")?;
                r.i32s("t")?;
                r.u64s("f")?;
                r.bytes("b")?;
                r.u8("k")?;
                Ok(())
            })();
            assert!(all.is_err(), "{cut} bytes read as a whole message");
        }
        // A descriptor of a 0 dimension, or of 2^32 elements, is refused.
        for dims in [vec![4, 0], vec![1 << 16, 1 << 16]] {
            let mut w = Writer::default();
            w.path(&CPath { dims, ..p.clone() });
            assert!(Reader::new(&w.0).path("p").is_err());
        }
        // A huge count is refused before any allocation.
        let mut w = Writer::default();
        w.u32(u32::MAX);
        assert!(Reader::new(&w.0).u64s("f").is_err());
        let mut long = Writer::default();
        long.u8(1).u8(2);
        let mut r = Reader::new(&long.0);
        r.u8("a").unwrap();
        assert!(r.end("e").is_err());
    }
}
