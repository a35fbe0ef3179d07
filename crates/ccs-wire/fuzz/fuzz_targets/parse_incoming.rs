//! The server's request parser on whatever bytes a client may send.
//!
//! Beyond "no panic", each input is checked against what the server
//! relies on, under three sets of limits (none, small, large):
//!
//! - `Need(n)` asks for more than it has and no more than the limits
//!   allow (72 + 4·max_pes + max_data), and fewer than `n` bytes change
//!   nothing (it is a true lower bound);
//! - `Done(_, used)` took at most what it was given, exactly the bytes
//!   its parts account for, within the limits;
//! - fed one byte at a time, or as a server reads (up to each `Need`),
//!   the parser reaches the verdict it gives on all the bytes at once;
//! - a whole request encodes back (`encode_request`,
//!   `encode_auth_request`, `encode_identity_request`) to the bytes it
//!   took, but for what a parse cannot recover: the name's padding
//!   after its NUL and an authenticated request's hash (which is checked
//!   against the bytes instead).
#![no_main]

use ccs_wire::{
    ClientIdentity, Dest, HASH_LEN, HEADER_LEN, Incoming, Limits, NAME_LEN, Parsed, Request,
    WireError, encode_auth_request, encode_identity_request, encode_request, parse_incoming,
};
use libfuzzer_sys::fuzz_target;

const LIMITS: [Limits; 3] = [
    Limits {
        max_data: 0,
        max_pes: 0,
    },
    Limits {
        max_data: 64,
        max_pes: 4,
    },
    Limits {
        max_data: 1 << 20,
        max_pes: 1 << 16,
    },
];

/// Bytes of an authenticated request before its header.
const AUTH_PREFIX: usize = 32;

fuzz_target!(|bytes: &[u8]| {
    for limits in &LIMITS {
        check(bytes, limits);
    }
});

fn check(bytes: &[u8], limits: &Limits) {
    let all = parse_incoming(bytes, limits);
    check_verdict(bytes, limits, &all);
    match &all {
        Ok(Parsed::Done(incoming, used)) => check_encoding(&bytes[..*used], incoming),
        // Every error has something to say.
        Err(e) => assert!(!e.to_string().is_empty()),
        Ok(Parsed::Need(_)) => {}
    }
    assert_eq!(one_byte_at_a_time(bytes, limits), all, "byte by byte");
    assert_eq!(as_a_server_reads(bytes, limits), all, "up to each Need");
}

/// The invariants of one verdict on `buf`.
fn check_verdict(buf: &[u8], limits: &Limits, verdict: &Result<Parsed, WireError>) {
    match verdict {
        Ok(Parsed::Need(n)) => {
            assert!(*n > buf.len(), "Need({n}) with {} bytes", buf.len());
            let most = 72 + 4 * limits.max_pes + limits.max_data;
            assert!(*n <= most, "Need({n}) beyond the limits' {most}");
        }
        Ok(Parsed::Done(incoming, used)) => {
            assert!(*used <= buf.len(), "Done used {used} of {}", buf.len());
            match incoming {
                Incoming::Identity { .. } => assert_eq!(*used, 8),
                Incoming::Request(r) => check_request(r, *used, limits),
            }
        }
        Err(_) => {}
    }
}

/// A request's parts agree with its header, the limits and `used`.
fn check_request(r: &Request, used: usize, limits: &Limits) {
    assert!(r.header.handler().is_ok());
    assert_eq!(r.header.len as usize, r.data.len());
    assert_eq!(r.header.list_len(), r.pes.len() as u64);
    assert!(r.data.len() <= limits.max_data);
    assert!(r.pes.len() <= limits.max_pes);
    assert!(r.pes.iter().all(|&pe| pe <= i32::MAX as u32));
    let prefix = if r.auth.is_some() { AUTH_PREFIX } else { 0 };
    assert_eq!(used, prefix + HEADER_LEN + 4 * r.pes.len() + r.data.len());
}

/// Feeds every prefix in turn, as a client sending one byte at a time;
/// returns the first verdict that is not `Need`, else the last `Need`.
fn one_byte_at_a_time(bytes: &[u8], limits: &Limits) -> Result<Parsed, WireError> {
    let mut asked = 0;
    for have in 0..=bytes.len() {
        let verdict = parse_incoming(&bytes[..have], limits);
        check_verdict(&bytes[..have], limits, &verdict);
        match verdict {
            Ok(Parsed::Need(n)) => {
                // It asked for `asked` bytes: fewer change nothing, and
                // what it asks for never shrinks.
                if have < asked {
                    assert_eq!(n, asked, "Need({n}) at {have} bytes after Need({asked})");
                }
                assert!(n >= asked, "Need({n}) after Need({asked})");
                asked = n;
            }
            settled => {
                assert!(
                    have >= asked,
                    "settled with {have} bytes after asking for {asked}"
                );
                if let Ok(Parsed::Done(_, used)) = &settled {
                    // One byte fewer was not enough.
                    assert_eq!(*used, have, "Done at {have} bytes used {used}");
                }
                return settled;
            }
        }
    }
    Ok(Parsed::Need(asked))
}

/// Reads as the server does: exactly up to each `Need`, or all there is.
fn as_a_server_reads(bytes: &[u8], limits: &Limits) -> Result<Parsed, WireError> {
    let mut have = 0;
    loop {
        match parse_incoming(&bytes[..have], limits)? {
            Parsed::Need(n) if n <= bytes.len() => {
                assert!(n > have);
                have = n;
            }
            verdict => return Ok(verdict),
        }
    }
}

/// `incoming`, encoded again, is `took`, but for the name's padding after
/// its NUL and an authenticated request's hash.
fn check_encoding(took: &[u8], incoming: &Incoming) {
    let r = match incoming {
        Incoming::Identity { level, client_salt } => {
            assert_eq!(&encode_identity_request(*level, *client_salt)[..], took);
            return;
        }
        Incoming::Request(r) => r,
    };
    let handler = r.header.handler().expect("checked by the parser");
    let dest = match r.header.dest {
        pe @ 0.. => Dest::Pe(pe as u32),
        -1 => Dest::Broadcast,
        _ => Dest::Multicast(r.pes.clone()),
    };
    assert_eq!(dest.try_field(), Ok(r.header.dest));
    let again = match &r.auth {
        None => encode_request(handler, &dest, &r.data),
        Some(auth) => {
            assert_eq!(&auth.hash[..], &took[12..AUTH_PREFIX]);
            let who = ClientIdentity {
                key: [0; 16],
                level: auth.level,
                client_id: auth.client_id,
                salt: 0,
            };
            encode_auth_request(&who, auth.reply_salt, handler, &dest, &r.data)
        }
    };
    // Every request the parser takes can be sent: valid destination,
    // name and length.
    let again = again.expect("a parsed request encodes");
    assert_eq!(again.len(), took.len());
    let mut want = took.to_vec();
    let header_at = if r.auth.is_some() {
        // The hash is the key's business; the rest must match.
        want[12..12 + HASH_LEN].copy_from_slice(&again[12..12 + HASH_LEN]);
        AUTH_PREFIX
    } else {
        0
    };
    // The encoder pads the name with NULs; the sender may have padded it
    // with anything after the first NUL.
    let padding = header_at + 8 + handler.len()..header_at + 8 + NAME_LEN;
    let zero_padded = took[padding.clone()].iter().all(|&c| c == 0);
    want[padding].fill(0);
    assert_eq!(again, want, "a request re-encodes to the bytes it took");
    if r.auth.is_none() && zero_padded {
        assert_eq!(again, took, "a plain request re-encodes to its bytes");
    }
}
