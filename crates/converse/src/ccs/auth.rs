//! The CCS server's side of authentication (`ccs-protocol.md`,
//! "Authentication"): its keys, the clients it gave an identity, and the
//! checks a connection passes before its request runs.
//!
//! # Invariants
//!
//! - A plain request is accepted only while level 0 has no key; an
//!   authenticated request or identity handshake only at a level that has
//!   one (Charm++'s policy).
//! - Each client id holds the salt its next request must be hashed with;
//!   a request that checks out advances it by one, so a request replayed
//!   byte for byte no longer matches (it is refused).
//! - Keys never reach a log line.
//!
//! # Concurrency
//!
//! Owned by the server thread; nothing here is shared.
use ccs_wire::{AuthKeys, AuthPart, HASH_LEN, Key, RequestHeader};

/// Identities handed out at most (a client that needs more handshakes than
/// this is misbehaving; each costs 4 bytes until the job ends).
const MAX_CLIENTS: usize = 1 << 20;

/// What the server knows about authentication.
pub(crate) struct Guard {
    keys: AuthKeys,
    /// Per client id: the salt of its next request.
    salts: Vec<u32>,
}

impl Guard {
    pub fn new(keys: AuthKeys) -> Guard {
        Guard {
            keys,
            salts: Vec::new(),
        }
    }

    /// Plain (unauthenticated) requests are accepted.
    pub fn accepts_plain(&self) -> bool {
        self.keys.accepts_plain()
    }

    /// The key of `level`, for a handshake at that level.
    pub fn key(&self, level: u8) -> Result<Key, String> {
        self.keys
            .key(level)
            .copied()
            .ok_or_else(|| format!("security level {level} has no key on this server"))
    }

    /// Step 3 of a handshake: `got` must be `hash(key, server_salt)`. On
    /// success returns the 28 bytes of step 4 (a new client id and its
    /// first salt).
    pub fn admit(
        &mut self,
        level: u8,
        server_salt: u32,
        client_salt: u32,
        got: &[u8; HASH_LEN],
    ) -> Result<[u8; 28], String> {
        let key = self.key(level)?;
        if !ccs_wire::hashes_equal(&ccs_wire::hash(&key, server_salt, None), got) {
            return Err(format!(
                "the client's hash of our salt does not match level {level}'s key (a wrong key)"
            ));
        }
        if self.salts.len() >= MAX_CLIENTS {
            return Err(format!(
                "{MAX_CLIENTS} client identities were handed out already"
            ));
        }
        let id = self.salts.len() as u32;
        let salt = random_u32();
        self.salts.push(salt);
        Ok(ccs_wire::identity_reply(&key, client_salt, id, salt))
    }

    /// Checks an authenticated request's fields against its header; on
    /// success advances the client's salt and returns the hash its reply
    /// starts with.
    pub fn check(
        &mut self,
        auth: &AuthPart,
        header: &RequestHeader,
    ) -> Result<[u8; HASH_LEN], String> {
        let key = self.key(auth.level)?;
        let Some(salt) = self.salts.get_mut(auth.client_id as usize) else {
            return Err(format!(
                "client id {} was never handed out (no identity handshake)",
                auth.client_id
            ));
        };
        let head: [u8; 16] = header.encode()[..16].try_into().expect("16 bytes");
        if !ccs_wire::hashes_equal(&ccs_wire::hash(&key, *salt, Some(&head)), &auth.hash) {
            return Err(format!(
                "its hash does not match client {}'s key and salt (a wrong key, or a replayed request)",
                auth.client_id
            ));
        }
        *salt = salt.wrapping_add(1);
        Ok(ccs_wire::hash(&key, auth.reply_salt, None))
    }
}

/// Fills `buf` from the kernel's random source.
pub(crate) fn random_bytes(buf: &mut [u8]) {
    let mut filled = 0;
    while filled < buf.len() {
        match rustix::rand::getrandom(&mut buf[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            // getrandom(2) cannot fail on Linux ≥ 3.17 once the pool is
            // ready; a salt must never be predictable, so stop rather
            // than go on with a weak one.
            Err(e) => crate::proc::exit::abort(&format!(
                "CCS server: no random numbers from the kernel (getrandom: {e})"
            )),
        }
    }
}

/// A random salt.
pub(crate) fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    random_bytes(&mut b);
    u32::from_be_bytes(b)
}

/// A random key (an `OTP` line of the auth file).
pub(crate) fn random_key() -> Key {
    let mut k = [0u8; 16];
    random_bytes(&mut k);
    k
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccs_wire::{ClientIdentity, Dest, Incoming, Limits, Parsed};

    fn guard() -> Guard {
        let mut keys = AuthKeys::default();
        keys.set(3, [7; 16]);
        Guard::new(keys)
    }

    fn parse(bytes: &[u8]) -> ccs_wire::Request {
        let limits = Limits {
            max_data: 100,
            max_pes: 4,
        };
        match ccs_wire::parse_incoming(bytes, &limits) {
            Ok(Parsed::Done(Incoming::Request(r), _)) => r,
            other => panic!("not a request: {other:?}"),
        }
    }

    #[test]
    fn a_handshake_then_requests_in_salt_order_and_no_replay() {
        let mut g = guard();
        assert!(g.accepts_plain(), "level 0 has no key");
        let (server_salt, client_salt) = (11, 22);
        let wrong = ccs_wire::hash(&[8; 16], server_salt, None);
        assert!(g.admit(3, server_salt, client_salt, &wrong).is_err());
        assert!(g.key(4).is_err(), "no key at level 4");
        let right = ccs_wire::hash(&[7; 16], server_salt, None);
        let reply = g.admit(3, server_salt, client_salt, &right).unwrap();
        assert_eq!(&reply[..20], &ccs_wire::hash(&[7; 16], client_salt, None));
        let mut who = ClientIdentity {
            key: [7; 16],
            level: 3,
            client_id: ccs_wire::be_u32(&reply[20..24]),
            salt: ccs_wire::be_u32(&reply[24..28]),
        };
        assert_eq!(who.client_id, 0);
        for n in 0..3u32 {
            let bytes =
                ccs_wire::encode_auth_request(&who, 100 + n, "h", &Dest::Pe(1), b"x").unwrap();
            let req = parse(&bytes);
            let reply_hash = g.check(req.auth.as_ref().unwrap(), &req.header).unwrap();
            assert_eq!(reply_hash, ccs_wire::hash(&[7; 16], 100 + n, None));
            // The same bytes again: the salt moved on.
            let again = parse(&bytes);
            assert!(
                g.check(again.auth.as_ref().unwrap(), &again.header)
                    .unwrap_err()
                    .contains("replayed")
            );
            who.salt = who.salt.wrapping_add(1);
        }
        // An id never handed out, and a level without a key.
        let mut stranger = who.clone();
        stranger.client_id = 5;
        let req =
            parse(&ccs_wire::encode_auth_request(&stranger, 0, "h", &Dest::Pe(0), b"").unwrap());
        assert!(g.check(req.auth.as_ref().unwrap(), &req.header).is_err());
        let mut other_level = who.clone();
        other_level.level = 2;
        let req =
            parse(&ccs_wire::encode_auth_request(&other_level, 0, "h", &Dest::Pe(0), b"").unwrap());
        assert!(
            g.check(req.auth.as_ref().unwrap(), &req.header)
                .unwrap_err()
                .contains("level 2 has no key")
        );
    }

    #[test]
    fn random_salts_differ() {
        let draws: std::collections::HashSet<u32> = (0..64).map(|_| random_u32()).collect();
        assert!(draws.len() > 60);
        assert_ne!(random_key(), random_key());
    }
}
