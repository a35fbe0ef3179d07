//! The server's reading of a connection's first bytes: a plain request, an
//! authenticated one, or the start of an identity handshake.
//!
//! [`parse_incoming`] looks at the bytes received so far and says how many
//! it needs at least, or what they hold. It is a pure function of its
//! input (the fuzz target calls it on anything): the caller keeps the
//! bytes, reads until it has what was asked for, and calls it again.
use crate::{AUTH_MARK, HASH_LEN, HEADER_LEN, RequestHeader, WireError, be_u32};

/// What a server accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most bytes of request data.
    pub max_data: usize,
    /// Most PEs in a multicast list (the job's PE count).
    pub max_pes: usize,
}

/// The authentication fields of an authenticated request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthPart {
    /// Its security level.
    pub level: u8,
    /// The client's id, from its identity handshake.
    pub client_id: u32,
    /// The salt the reply's hash is made with.
    pub reply_salt: u32,
    /// `hash(key, client salt, first 16 header bytes)`.
    pub hash: [u8; HASH_LEN],
}

/// A whole request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Present for an authenticated request.
    pub auth: Option<AuthPart>,
    pub header: RequestHeader,
    /// A multicast's destination PEs, in order (empty otherwise).
    pub pes: Vec<u32>,
    /// The request data.
    pub data: Vec<u8>,
}

/// What a connection's first bytes hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Incoming {
    Request(Request),
    /// `80 00 01 LL` and the client's salt: the server answers with its
    /// own salt and waits for the client's 20-byte hash of it.
    Identity {
        level: u8,
        client_salt: u32,
    },
}

/// The verdict on the bytes so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// At least this many bytes in all are needed.
    Need(usize),
    /// A whole message, and how many bytes it took.
    Done(Incoming, usize),
}

/// Bytes of an authenticated request before its header: mark and
/// operation (4), client id (4), reply salt (4), hash (20).
const AUTH_PREFIX: usize = 32;

/// Reads the bytes a client sent so far (see the module comment).
pub fn parse_incoming(buf: &[u8], limits: &Limits) -> Result<Parsed, WireError> {
    let Some(&first) = buf.first() else {
        return Ok(Parsed::Need(1));
    };
    if first < 0x20 {
        return parse_request(buf, 0, None, limits);
    }
    if first != AUTH_MARK {
        return Err(WireError::BadFirstByte(first));
    }
    if buf.len() < 4 {
        return Ok(Parsed::Need(4));
    }
    let level = buf[3];
    match [buf[1], buf[2]] {
        [0, 1] => {
            if buf.len() < 8 {
                return Ok(Parsed::Need(8));
            }
            let client_salt = be_u32(&buf[4..8]);
            Ok(Parsed::Done(Incoming::Identity { level, client_salt }, 8))
        }
        [0, 0] => {
            if buf.len() < AUTH_PREFIX {
                return Ok(Parsed::Need(AUTH_PREFIX));
            }
            let auth = AuthPart {
                level,
                client_id: be_u32(&buf[4..8]),
                reply_salt: be_u32(&buf[8..12]),
                hash: buf[12..AUTH_PREFIX].try_into().expect("20 bytes"),
            };
            parse_request(buf, AUTH_PREFIX, Some(auth), limits)
        }
        op => Err(WireError::BadAuthOp(op)),
    }
}

/// The request whose header starts at `at`.
fn parse_request(
    buf: &[u8],
    at: usize,
    auth: Option<AuthPart>,
    limits: &Limits,
) -> Result<Parsed, WireError> {
    let header_end = at + HEADER_LEN;
    let Some(head) = buf.get(at..header_end) else {
        return Ok(Parsed::Need(header_end));
    };
    let header = RequestHeader::decode(head.try_into().expect("40 bytes"));
    // Everything the header claims is checked before waiting for it.
    header.handler()?;
    if header.len as usize > limits.max_data {
        return Err(WireError::TooLong {
            len: header.len as u64,
            max: limits.max_data,
        });
    }
    let count = header.list_len();
    if count > limits.max_pes as u64 {
        return Err(WireError::TooManyPes {
            count,
            max: limits.max_pes,
        });
    }
    let list_end = header_end + 4 * count as usize;
    let end = list_end + header.len as usize;
    if buf.len() < end {
        return Ok(Parsed::Need(end));
    }
    let pes = buf[header_end..list_end]
        .chunks(4)
        .map(|c| {
            let pe = be_u32(c) as i32;
            u32::try_from(pe).map_err(|_| WireError::NegativePe(pe))
        })
        .collect::<Result<Vec<u32>, WireError>>()?;
    let data = buf[list_end..end].to_vec();
    Ok(Parsed::Done(
        Incoming::Request(Request {
            auth,
            header,
            pes,
            data,
        }),
        end,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        ClientIdentity, Dest, encode_auth_request, encode_identity_request, encode_request, hash,
    };
    use proptest::prelude::*;

    const LIMITS: Limits = Limits {
        max_data: 1 << 20,
        max_pes: 8,
    };

    /// Feeds `bytes` one at a time, as a slow client would, checking that
    /// every `Need` asks for more than is there.
    fn parse_slowly(bytes: &[u8]) -> Result<Parsed, WireError> {
        let mut have = 0;
        loop {
            match parse_incoming(&bytes[..have], &LIMITS)? {
                Parsed::Need(n) => {
                    assert!(n > have, "asks for more than it has");
                    if n > bytes.len() {
                        return Ok(Parsed::Need(n));
                    }
                    have += 1;
                }
                done => return Ok(done),
            }
        }
    }

    #[test]
    fn a_plain_request_parses_from_any_prefix() {
        let r = encode_request("echo", &Dest::Multicast(vec![4, 2, 7]), b"hello").unwrap();
        let Parsed::Done(Incoming::Request(req), used) = parse_slowly(&r).unwrap() else {
            panic!("a whole request");
        };
        assert_eq!(used, r.len());
        assert_eq!(req.header.handler(), Ok("echo"));
        assert_eq!(
            (req.pes, req.data, req.auth),
            (vec![4, 2, 7], b"hello".to_vec(), None)
        );
    }

    #[test]
    fn an_authenticated_request_and_an_identity_parse() {
        let who = ClientIdentity {
            key: [3; 16],
            level: 2,
            client_id: 9,
            salt: 100,
        };
        let r = encode_auth_request(&who, 77, "x", &Dest::Pe(1), b"d").unwrap();
        let Parsed::Done(Incoming::Request(req), used) = parse_slowly(&r).unwrap() else {
            panic!("a whole request");
        };
        assert_eq!(used, r.len());
        let auth = req.auth.unwrap();
        assert_eq!((auth.level, auth.client_id, auth.reply_salt), (2, 9, 77));
        let head16: [u8; 16] = req.header.encode()[..16].try_into().unwrap();
        assert_eq!(auth.hash, hash(&[3; 16], 100, Some(&head16)));
        assert_eq!(
            parse_slowly(&encode_identity_request(5, 0xdead_beef)).unwrap(),
            Parsed::Done(
                Incoming::Identity {
                    level: 5,
                    client_salt: 0xdead_beef
                },
                8
            )
        );
    }

    #[test]
    fn bad_bytes_are_refused_before_their_claims_are_waited_for() {
        let mut r = encode_request("h", &Dest::Pe(0), b"").unwrap();
        assert_eq!(
            parse_incoming(&[0x41], &LIMITS),
            Err(WireError::BadFirstByte(0x41))
        );
        assert_eq!(
            parse_incoming(&[0x80, 0, 2, 0], &LIMITS),
            Err(WireError::BadAuthOp([0, 2]))
        );
        // A length beyond the limit, with no data sent.
        r[0..4].copy_from_slice(&(2u32 << 20).to_be_bytes());
        assert!(matches!(
            parse_incoming(&r, &LIMITS),
            Err(WireError::TooLong { .. })
        ));
        // A multicast to more PEs than the job has.
        let mut m = encode_request("h", &Dest::Pe(0), b"").unwrap();
        m[4..8].copy_from_slice(&(-9i32).to_be_bytes());
        assert_eq!(
            parse_incoming(&m, &LIMITS),
            Err(WireError::TooManyPes { count: 9, max: 8 })
        );
        let mut neg = encode_request("h", &Dest::Multicast(vec![1, 2]), b"").unwrap();
        neg[44..48].copy_from_slice(&(-5i32).to_be_bytes());
        assert_eq!(
            parse_incoming(&neg, &LIMITS),
            Err(WireError::NegativePe(-5))
        );
        let mut unterminated = encode_request("h", &Dest::Pe(0), b"").unwrap();
        unterminated[8..40].fill(b'z');
        assert_eq!(
            parse_incoming(&unterminated, &LIMITS),
            Err(WireError::UnterminatedName)
        );
    }

    proptest! {
        #[test]
        fn any_bytes_parse_or_fail_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(Parsed::Done(_, used)) = parse_incoming(&bytes, &LIMITS) {
                prop_assert!(used <= bytes.len());
            }
            if let Ok(Parsed::Need(n)) = parse_incoming(&bytes, &LIMITS) {
                prop_assert!(n > bytes.len());
                prop_assert!(n <= 72 + 4 * LIMITS.max_pes + LIMITS.max_data);
            }
        }
    }
}
