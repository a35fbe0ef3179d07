//! The bytes of the Converse Client-Server protocol (CCS), as Charm++'s
//! clients and servers exchange them (`ccs-protocol.md`): request headers,
//! replies, the authentication hashes and handshake, and the auth file.
//!
//! Both ends use this crate: the server inside a Converse job
//! (`converse::ccs`) and the clients (`converse-ccs`, the `ccs` tool), so
//! the two cannot drift apart. Nothing here does I/O.
//!
//! # Invariants
//!
//! - Every integer on the wire is 4 bytes, big-endian.
//! - [`parse_incoming`] never trusts a length: it refuses sizes above the
//!   limits it is given before anything is allocated, and a name without
//!   its terminating NUL.
//! - [`hash`] is SHA-1 over exactly 52 bytes, as Charm++ computes it.
mod auth;
mod parse;

pub use auth::{
    AuthKeys, Key, KeyError, OTP_LINE_PREFIX, hash, identity_reply, parse_auth_file, parse_key,
};
pub use parse::{AuthPart, Incoming, Limits, Parsed, Request, parse_incoming};

/// Bytes of a request header: data length, destination, handler name.
pub const HEADER_LEN: usize = 40;
/// Bytes of the NUL-padded handler name; names are shorter.
pub const NAME_LEN: usize = 32;
/// First byte of every authenticated connection.
pub const AUTH_MARK: u8 = 0x80;
/// Bytes of a hash ([`hash`]).
pub const HASH_LEN: usize = 20;
/// Destination of a broadcast request.
pub const BROADCAST: i32 = -1;

/// What goes wrong with bytes that claim to be CCS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireError {
    /// The first byte is neither a plain header's (below 0x20) nor
    /// [`AUTH_MARK`].
    BadFirstByte(u8),
    /// An authenticated connection's second and third bytes name no
    /// known operation.
    BadAuthOp([u8; 2]),
    /// The handler name fills all 32 bytes: no terminating NUL.
    UnterminatedName,
    /// The handler name is not UTF-8.
    NameNotUtf8,
    /// A handler name of 32 bytes or more (when encoding).
    NameTooLong(usize),
    /// A data length above the limit.
    TooLong { len: u64, max: usize },
    /// A multicast to more PEs than the limit.
    TooManyPes { count: u64, max: usize },
    /// A multicast PE list entry that is negative.
    NegativePe(i32),
    /// A multicast listing fewer than 2 PEs (when encoding): the header's
    /// destination field cannot say it (−1 is a broadcast, 0 is PE 0).
    MulticastTooShort(usize),
    /// A PE of 2^31 or more (when encoding): the wire's PE fields are
    /// signed 32-bit integers.
    PeOutOfRange(u32),
    /// A multicast listing more than 2^31 PEs (when encoding): its
    /// destination field, −count, would not fit a signed 32-bit integer.
    MulticastTooLong(usize),
    /// A reply of 2^32 bytes or more: its length field is 32 bits.
    ReplyTooLong(u64),
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::BadFirstByte(b) => write!(
                f,
                "first byte {b:#04x} starts neither a request header (below 0x20) nor an authenticated connection (0x80)"
            ),
            WireError::BadAuthOp([a, b]) => {
                write!(f, "unknown authenticated operation {a:#04x} {b:#04x}")
            }
            WireError::UnterminatedName => {
                write!(f, "the handler name has no terminating NUL in its 32 bytes")
            }
            WireError::NameNotUtf8 => write!(f, "the handler name is not UTF-8"),
            WireError::NameTooLong(n) => write!(
                f,
                "a handler name of {n} bytes: names are shorter than {NAME_LEN} bytes"
            ),
            WireError::TooLong { len, max } => {
                write!(
                    f,
                    "a request of {len} bytes: the most this server takes is {max}"
                )
            }
            WireError::TooManyPes { count, max } => {
                write!(f, "a multicast to {count} PEs: the job has {max}")
            }
            WireError::NegativePe(pe) => write!(f, "PE {pe} in a multicast list"),
            WireError::MulticastTooShort(n) => write!(
                f,
                "a multicast listing {n} PE{}: a multicast lists at least 2 PEs; use Dest::Pe for one",
                if *n == 1 { "" } else { "s" }
            ),
            WireError::PeOutOfRange(pe) => write!(
                f,
                "PE {pe}: PEs on the wire are signed 32-bit, at most {}",
                i32::MAX
            ),
            WireError::MulticastTooLong(n) => write!(
                f,
                "a multicast listing {n} PEs: the destination field holds at most {}",
                MAX_MULTICAST
            ),
            WireError::ReplyTooLong(n) => write!(
                f,
                "a reply of {n} bytes: its length field holds at most {}",
                u32::MAX
            ),
        }
    }
}

impl std::error::Error for WireError {}

/// Where a request goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dest {
    /// One PE.
    Pe(u32),
    /// Every PE; the replies are merged.
    Broadcast,
    /// The listed PEs; the replies are merged.
    Multicast(Vec<u32>),
}

/// Most PEs a multicast lists: its destination field, −count, is an
/// `i32`.
pub const MAX_MULTICAST: usize = 1 << 31;

impl Dest {
    /// The header's destination field, unchecked: a PE of 2^31 or more
    /// comes out negative, and a multicast of fewer than 2 or more than
    /// [`MAX_MULTICAST`] PEs comes out as some other destination. Use
    /// [`Dest::try_field`] (as the encoders do) unless `self` is known to
    /// be valid.
    pub fn field(&self) -> i32 {
        match self {
            Dest::Pe(pe) => *pe as i32,
            Dest::Broadcast => BROADCAST,
            Dest::Multicast(pes) => (pes.len() as i64).wrapping_neg() as i32,
        }
    }

    /// The header's destination field, if the wire can say `self`: a PE
    /// below 2^31 ([`WireError::PeOutOfRange`]); a multicast of 2 to
    /// [`MAX_MULTICAST`] PEs ([`WireError::MulticastTooShort`],
    /// [`WireError::MulticastTooLong`]), each below 2^31.
    pub fn try_field(&self) -> Result<i32, WireError> {
        match self {
            Dest::Pe(pe) => pe_field(*pe),
            Dest::Broadcast => Ok(BROADCAST),
            Dest::Multicast(pes) => {
                let field = multicast_field(pes.len())?;
                if let Some(&pe) = pes.iter().find(|&&pe| pe > i32::MAX as u32) {
                    return Err(WireError::PeOutOfRange(pe));
                }
                Ok(field)
            }
        }
    }
}

/// A PE as the wire's signed 32 bits.
fn pe_field(pe: u32) -> Result<i32, WireError> {
    i32::try_from(pe).map_err(|_| WireError::PeOutOfRange(pe))
}

/// The destination field of a multicast to `count` PEs: −`count`.
fn multicast_field(count: usize) -> Result<i32, WireError> {
    if count < 2 {
        // −1 means broadcast and 0 means PE 0: a list needs two PEs.
        return Err(WireError::MulticastTooShort(count));
    }
    i64::try_from(count)
        .ok()
        .and_then(|c| i32::try_from(-c).ok())
        .ok_or(WireError::MulticastTooLong(count))
}

/// A request header: `[data length][destination][name, NUL-padded]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestHeader {
    /// Bytes of request data (not counting a multicast PE list).
    pub len: u32,
    /// ≥ 0: one PE; −1: broadcast; ≤ −2: multicast to −`dest` PEs.
    pub dest: i32,
    /// The name field as sent.
    pub name: [u8; NAME_LEN],
}

impl RequestHeader {
    /// A header for `handler` (shorter than 32 bytes) to `dest` with `len`
    /// bytes of data.
    pub fn new(handler: &str, dest: i32, len: u32) -> Result<RequestHeader, WireError> {
        if handler.len() >= NAME_LEN {
            return Err(WireError::NameTooLong(handler.len()));
        }
        let mut name = [0u8; NAME_LEN];
        name[..handler.len()].copy_from_slice(handler.as_bytes());
        Ok(RequestHeader { len, dest, name })
    }

    /// The 40 bytes on the wire.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&self.len.to_be_bytes());
        b[4..8].copy_from_slice(&self.dest.to_be_bytes());
        b[8..].copy_from_slice(&self.name);
        b
    }

    /// The header in `b`, as sent (names are checked by
    /// [`RequestHeader::handler`]).
    pub fn decode(b: &[u8; HEADER_LEN]) -> RequestHeader {
        RequestHeader {
            len: be_u32(&b[0..4]),
            dest: be_u32(&b[4..8]) as i32,
            name: b[8..].try_into().expect("32 bytes"),
        }
    }

    /// The handler name: the bytes before the first NUL.
    pub fn handler(&self) -> Result<&str, WireError> {
        let end = self
            .name
            .iter()
            .position(|&c| c == 0)
            .ok_or(WireError::UnterminatedName)?;
        std::str::from_utf8(&self.name[..end]).map_err(|_| WireError::NameNotUtf8)
    }

    /// PEs listed after the header: −`dest` for a multicast, else 0.
    pub fn list_len(&self) -> u64 {
        if self.dest <= -2 {
            -(self.dest as i64) as u64
        } else {
            0
        }
    }
}

/// A whole unauthenticated request: header, PE list, data.
pub fn encode_request(handler: &str, dest: &Dest, data: &[u8]) -> Result<Vec<u8>, WireError> {
    let mut out = Vec::with_capacity(HEADER_LEN + data.len());
    append_request(&mut out, handler, dest, data)?;
    Ok(out)
}

/// Appends header, PE list and data to `out`; the header's 40 bytes start
/// where `out` ended.
fn append_request(
    out: &mut Vec<u8>,
    handler: &str,
    dest: &Dest,
    data: &[u8],
) -> Result<(), WireError> {
    let len = u32::try_from(data.len())
        .ok()
        .filter(|&l| l < 1 << 29)
        .ok_or(WireError::TooLong {
            len: data.len() as u64,
            max: (1 << 29) - 1,
        })?;
    let header = RequestHeader::new(handler, dest.try_field()?, len)?;
    out.extend_from_slice(&header.encode());
    if let Dest::Multicast(pes) = dest {
        for pe in pes {
            // Checked by `try_field`: every PE is below 2^31.
            out.extend_from_slice(&pe.to_be_bytes());
        }
    }
    out.extend_from_slice(data);
    Ok(())
}

/// What a client holds after the identity handshake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientIdentity {
    /// The key of its security level.
    pub key: Key,
    /// Its security level.
    pub level: u8,
    /// The id the server gave it.
    pub client_id: u32,
    /// Its salt: incremented after every request, by both sides.
    pub salt: u32,
}

/// A whole authenticated request (`80 00 00 LL` …) from `who` (whose salt
/// the caller increments afterwards); the reply will be prefixed with
/// `hash(key, reply_salt)`.
pub fn encode_auth_request(
    who: &ClientIdentity,
    reply_salt: u32,
    handler: &str,
    dest: &Dest,
    data: &[u8],
) -> Result<Vec<u8>, WireError> {
    let mut out = vec![AUTH_MARK, 0, 0, who.level];
    out.extend_from_slice(&who.client_id.to_be_bytes());
    out.extend_from_slice(&reply_salt.to_be_bytes());
    let hash_at = out.len();
    out.extend_from_slice(&[0; HASH_LEN]);
    let header_at = out.len();
    append_request(&mut out, handler, dest, data)?;
    let head16: [u8; 16] = out[header_at..header_at + 16].try_into().expect("16 bytes");
    let h = hash(&who.key, who.salt, Some(&head16));
    out[hash_at..hash_at + HASH_LEN].copy_from_slice(&h);
    Ok(out)
}

/// The first message of an identity handshake: `80 00 01 LL` then the
/// client's salt.
pub fn encode_identity_request(level: u8, client_salt: u32) -> [u8; 8] {
    let mut b = [AUTH_MARK, 0, 1, level, 0, 0, 0, 0];
    b[4..].copy_from_slice(&client_salt.to_be_bytes());
    b
}

/// The 4-byte length that starts a reply (after the hash of an
/// authenticated one).
///
/// `len` must be below 2^32: a longer reply cannot be sent, and its
/// length would be cut to its low 32 bits (debug builds panic). Where a
/// reply may be that long, use [`try_reply_header`].
pub fn reply_header(len: usize) -> [u8; 4] {
    debug_assert!(
        u32::try_from(len).is_ok(),
        "a reply of {len} bytes does not fit the 32-bit length field"
    );
    (len as u32).to_be_bytes()
}

/// The 4-byte length that starts a reply, or
/// [`WireError::ReplyTooLong`] for a reply of 2^32 bytes or more.
pub fn try_reply_header(len: usize) -> Result<[u8; 4], WireError> {
    u32::try_from(len)
        .map(u32::to_be_bytes)
        .map_err(|_| WireError::ReplyTooLong(len as u64))
}

/// The length of the reply data that follows the 4-byte `head` (read
/// after the 20-byte hash of an authenticated reply).
pub fn decode_reply_len(head: &[u8; 4]) -> u32 {
    u32::from_be_bytes(*head)
}

/// Whether `got`, the first 20 bytes of an authenticated reply, is
/// `hash(key, reply_salt)` as the server must send it.
///
/// The comparison looks at every byte whatever the first difference,
/// but it is not guaranteed constant-time (the compiler may shortcut it);
/// a client checks a hash the server sent, so no secret rides on its
/// timing.
pub fn check_reply_hash(key: &Key, reply_salt: u32, got: &[u8; HASH_LEN]) -> bool {
    hashes_equal(&hash(key, reply_salt, None), got)
}

/// Whether two hashes are equal, comparing every byte whatever the first
/// difference (not guaranteed constant-time: the compiler may shorten it).
pub fn hashes_equal(a: &[u8; HASH_LEN], b: &[u8; HASH_LEN]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The reply to `ccs_getinfo`: the number of nodes, then each node's PE
/// count.
pub fn encode_getinfo(node_sizes: &[u32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 * (node_sizes.len() + 1));
    out.extend_from_slice(&(node_sizes.len() as u32).to_be_bytes());
    for n in node_sizes {
        out.extend_from_slice(&n.to_be_bytes());
    }
    out
}

/// The node sizes in a `ccs_getinfo` reply, if it is one.
pub fn decode_getinfo(reply: &[u8]) -> Option<Vec<u32>> {
    let (count, rest) = (reply.len() >= 4).then(|| reply.split_at(4))?;
    let count = be_u32(count) as usize;
    (rest.len() == count.checked_mul(4)?).then(|| rest.chunks(4).map(be_u32).collect())
}

/// A big-endian u32 from the first 4 bytes of `b`.
pub fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes(b[..4].try_into().expect("4 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_is_length_destination_and_padded_name_big_endian() {
        let b = RequestHeader::new("ccs_getinfo", -3, 0x0102_0304)
            .unwrap()
            .encode();
        assert_eq!(&b[0..4], &[1, 2, 3, 4]);
        assert_eq!(&b[4..8], &[0xff, 0xff, 0xff, 0xfd]);
        assert_eq!(&b[8..19], b"ccs_getinfo");
        assert!(b[19..].iter().all(|&c| c == 0));
        let h = RequestHeader::decode(&b);
        assert_eq!(
            (h.len, h.dest, h.handler()),
            (0x0102_0304, -3, Ok("ccs_getinfo"))
        );
        assert_eq!(h.list_len(), 3);
        assert_eq!(
            RequestHeader::new(&"x".repeat(32), 0, 0),
            Err(WireError::NameTooLong(32))
        );
        assert!(RequestHeader::new(&"x".repeat(31), 0, 0).is_ok());
    }

    #[test]
    fn a_name_filling_its_field_is_unterminated() {
        let mut b = RequestHeader::new("a", 0, 0).unwrap().encode();
        b[8..].fill(b'a');
        assert_eq!(
            RequestHeader::decode(&b).handler(),
            Err(WireError::UnterminatedName)
        );
    }

    #[test]
    fn requests_carry_their_pe_list_between_header_and_data() {
        let r = encode_request("h", &Dest::Multicast(vec![3, 1]), b"xyz").unwrap();
        assert_eq!(r.len(), 40 + 8 + 3);
        assert_eq!(&r[4..8], &(-2i32).to_be_bytes());
        assert_eq!(&r[40..48], &[0, 0, 0, 3, 0, 0, 0, 1]);
        assert_eq!(&r[48..], b"xyz");
        assert_eq!(
            encode_request("h", &Dest::Broadcast, b"")
                .unwrap()
                .get(4..8),
            Some(&[0xff; 4][..])
        );
        assert!(encode_request("h", &Dest::Multicast(vec![1]), b"").is_err());
    }

    #[test]
    fn a_multicast_of_fewer_than_two_pes_has_its_own_error() {
        for pes in [vec![], vec![3]] {
            let n = pes.len();
            let e = encode_request("h", &Dest::Multicast(pes), b"").unwrap_err();
            assert_eq!(e, WireError::MulticastTooShort(n));
            assert!(
                e.to_string()
                    .contains("a multicast lists at least 2 PEs; use Dest::Pe for one"),
                "{e}"
            );
        }
        let who = ClientIdentity {
            key: [0; 16],
            level: 0,
            client_id: 0,
            salt: 0,
        };
        assert_eq!(
            encode_auth_request(&who, 0, "h", &Dest::Multicast(vec![1]), b""),
            Err(WireError::MulticastTooShort(1))
        );
    }

    #[test]
    fn pes_beyond_i32_are_refused_not_sent_negative() {
        let big = 1u32 << 31;
        for dest in [Dest::Pe(big), Dest::Multicast(vec![0, big, 1])] {
            assert_eq!(
                encode_request("h", &dest, b""),
                Err(WireError::PeOutOfRange(big))
            );
            assert_eq!(dest.try_field(), Err(WireError::PeOutOfRange(big)));
        }
        assert_eq!(
            encode_request("h", &Dest::Pe(u32::MAX), b""),
            Err(WireError::PeOutOfRange(u32::MAX))
        );
        // The largest PE the wire holds still goes out, positive.
        let max = i32::MAX as u32;
        let r = encode_request("h", &Dest::Pe(max), b"").unwrap();
        assert_eq!(&r[4..8], &i32::MAX.to_be_bytes());
        let m = encode_request("h", &Dest::Multicast(vec![max, 0]), b"").unwrap();
        assert_eq!(&m[40..44], &i32::MAX.to_be_bytes());
        assert_eq!(Dest::Broadcast.try_field(), Ok(BROADCAST));
        assert_eq!(Dest::Multicast(vec![5, 6, 7]).try_field(), Ok(-3));
        assert!(
            WireError::PeOutOfRange(big)
                .to_string()
                .contains("2147483648")
        );
    }

    #[test]
    fn a_multicast_list_is_as_long_as_an_i32_destination_allows() {
        // Lists this long are not built here (2^31 PEs are 8 GiB): the
        // count check is tested alone.
        assert_eq!(multicast_field(2), Ok(-2));
        assert_eq!(multicast_field(MAX_MULTICAST), Ok(i32::MIN));
        #[cfg(target_pointer_width = "64")]
        {
            assert_eq!(
                multicast_field(MAX_MULTICAST + 1),
                Err(WireError::MulticastTooLong(MAX_MULTICAST + 1))
            );
            assert_eq!(
                multicast_field(usize::MAX),
                Err(WireError::MulticastTooLong(usize::MAX))
            );
        }
    }

    #[test]
    fn reply_headers_refuse_lengths_beyond_32_bits() {
        assert_eq!(try_reply_header(0x0102_0304), Ok([1, 2, 3, 4]));
        assert_eq!(try_reply_header(u32::MAX as usize), Ok([0xff; 4]));
        assert_eq!(reply_header(5), [0, 0, 0, 5]);
        #[cfg(target_pointer_width = "64")]
        {
            let e = try_reply_header(1 << 32).unwrap_err();
            assert_eq!(e, WireError::ReplyTooLong(1 << 32));
            assert!(e.to_string().contains("4294967296"), "{e}");
        }
    }

    #[test]
    #[cfg(all(debug_assertions, target_pointer_width = "64"))]
    #[should_panic(expected = "does not fit the 32-bit length field")]
    fn reply_header_asserts_its_precondition_in_debug_builds() {
        reply_header(1 << 32);
    }

    #[test]
    fn reply_heads_decode_and_reply_hashes_check() {
        for len in [0usize, 7, 0x0102_0304, u32::MAX as usize] {
            let head = try_reply_header(len).unwrap();
            assert_eq!(decode_reply_len(&head) as usize, len);
        }
        let key = [9u8; 16];
        let good = hash(&key, 1234, None);
        assert!(check_reply_hash(&key, 1234, &good));
        assert!(!check_reply_hash(&key, 1235, &good));
        assert!(!check_reply_hash(&[8; 16], 1234, &good));
        for i in [0, 19] {
            let mut bad = good;
            bad[i] ^= 1;
            assert!(!check_reply_hash(&key, 1234, &bad));
        }
        // The reply's hash has no header: 16 zero bytes stand for it.
        assert_eq!(good, hash(&key, 1234, Some(&[0; 16])));
    }

    #[test]
    fn getinfo_round_trips_and_refuses_short_replies() {
        let r = encode_getinfo(&[2, 3]);
        assert_eq!(r, [0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 3]);
        assert_eq!(decode_getinfo(&r), Some(vec![2, 3]));
        assert_eq!(decode_getinfo(&r[..11]), None);
        assert_eq!(decode_getinfo(&[0xff; 4]), None);
    }
}
