//! The job key, and the proofs that a connection's other end holds it.
//!
//! `convrun` draws one [`JobKey`] per job (256 random bits) and gives it
//! to each process in its environment (a local child) or on its remote
//! shell's standard input (a remote one): never on a command line, in a
//! file name, in a business card or on the wire. Every connection of the
//! job — a process to the launcher, a process to another over tcp — is a
//! mutual challenge-response: each end sends a fresh random [`Nonce`], and
//! each proves it holds the key with a [`Proof`], an HMAC-SHA-256 under
//! the key of both nonces, the connection's identities and the [`Role`]
//! of the end that proves. The key itself never travels.
//!
//! # Invariants
//!
//! - A proof is bound to its role: one made as the launcher's answer is
//!   never a valid process hello, nor one end of a tcp connection's proof
//!   the other's (the role's label is the first thing hashed, and the
//!   parts after it are length-prefixed, so no two different inputs hash
//!   the same bytes).
//! - A proof is bound to both nonces, so a proof seen once (recorded from
//!   an earlier connection) proves nothing on another: each side's nonce is
//!   fresh per connection.
//! - Every `verify` compares in constant time, so its timing says nothing
//!   about where a wrong proof differs.
//! - A key's `Debug` shows no byte of it; only [`JobKey::to_hex`], meant for
//!   the environment of a child, spells it out.
//!
//! The one OS access of this crate is here: keys and nonces are read from
//! `/dev/urandom` ([`JobKey::generate`], [`Nonce::generate`]).
use std::fmt;
use std::io::Read;

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Bytes of a job key.
pub const KEY_LEN: usize = 32;
/// Bytes of a nonce.
pub const NONCE_LEN: usize = 16;
/// Bytes of a proof (an HMAC-SHA-256).
pub const PROOF_LEN: usize = 32;

/// Who makes a proof, and of what: each role hashes its own label first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A process's `hello` to the launcher.
    ProcessHello,
    /// The launcher's `welcome` answer to a process.
    LauncherWelcome,
    /// The accepting end of a tcp connection between two processes.
    TcpAcceptor,
    /// The connecting end of a tcp connection between two processes.
    TcpConnector,
    /// Not a proof: the job's tag in a shared-memory segment's header
    /// ([`JobKey::tag`]).
    ShmTag,
    /// Not a proof: a shared-memory segment's name
    /// ([`shm_segment_name`]).
    ShmName,
}

impl Role {
    fn label(self) -> &'static [u8] {
        match self {
            Role::ProcessHello => b"converse launch: process hello",
            Role::LauncherWelcome => b"converse launch: launcher welcome",
            Role::TcpAcceptor => b"converse tcp: acceptor",
            Role::TcpConnector => b"converse tcp: connector",
            Role::ShmTag => b"converse shm: job tag",
            Role::ShmName => b"converse shm: segment name",
        }
    }
}

/// Reads `N` bytes from the operating system's random source.
fn random<const N: usize>() -> std::io::Result<[u8; N]> {
    let mut bytes = [0u8; N];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes)
}

/// `bytes` as lowercase hexadecimal.
fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// Exactly `N` bytes spelled in `hex` (lowercase, as [`to_hex`] writes
/// it: one spelling per value), or `None`.
fn from_hex<const N: usize>(hex: &str) -> Option<[u8; N]> {
    let hex = hex.as_bytes();
    if hex.len() != 2 * N {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(u32::from(c - b'0')),
        b'a'..=b'f' => Some(u32::from(c - b'a' + 10)),
        _ => None,
    };
    let mut bytes = [0u8; N];
    for (b, pair) in bytes.iter_mut().zip(hex.chunks_exact(2)) {
        *b = u8::try_from(digit(pair[0])? << 4 | digit(pair[1])?).ok()?;
    }
    Some(bytes)
}

/// The job's secret: 256 random bits every process and the launcher hold.
#[derive(Clone, PartialEq, Eq)]
pub struct JobKey([u8; KEY_LEN]);

impl fmt::Debug for JobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JobKey(..)")
    }
}

impl JobKey {
    /// A new key from the operating system's random source.
    pub fn generate() -> std::io::Result<JobKey> {
        random().map(JobKey)
    }

    /// The key `hex` spells (64 lowercase hexadecimal digits), if it is one.
    pub fn from_hex(hex: &str) -> Option<JobKey> {
        from_hex(hex).map(JobKey)
    }

    /// The key as 64 hexadecimal digits: for a child's environment or a
    /// remote shell's standard input, nowhere else.
    pub fn to_hex(&self) -> String {
        to_hex(&self.0)
    }

    /// The key made of `bytes` (tests, and keys from elsewhere).
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> JobKey {
        JobKey(bytes)
    }

    fn mac(&self, role: Role, parts: &[&[u8]]) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("any key length");
        let mut put = |bytes: &[u8]| {
            // A part longer than 4 GiB cannot be a nonce or a card; the
            // length saturates rather than wraps.
            let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
            mac.update(&len.to_le_bytes());
            mac.update(bytes);
        };
        put(role.label());
        for part in parts {
            put(part);
        }
        mac
    }

    /// The proof `role` gives of holding this key, over `parts` (the
    /// connection's nonces and identities, in the order the protocol
    /// fixes).
    pub fn proof(&self, role: Role, parts: &[&[u8]]) -> Proof {
        Proof(self.mac(role, parts).finalize().into_bytes().into())
    }

    /// True if `proof` is the proof `role` gives over `parts` with this
    /// key; compared in constant time.
    pub fn verify(&self, role: Role, parts: &[&[u8]], proof: &Proof) -> bool {
        self.mac(role, parts).verify_slice(&proof.0).is_ok()
    }

    /// A 64-bit value derived from the key for `role` (a tag that tells
    /// this job's objects from another's, such as a shared-memory
    /// segment's header): it says nothing of the key.
    pub fn tag(&self, role: Role) -> u64 {
        let bytes = self.mac(role, &[]).finalize().into_bytes();
        u64::from_le_bytes(bytes[..8].try_into().expect("8 of 32 bytes"))
    }
}

/// The name of process `node`'s shared-memory segment in the job whose
/// segment secret is `secret` (drawn at random per job and handed to its
/// processes as the key is): `/converse-` and 128 bits of an HMAC-SHA-256
/// under the secret, in hex. Names are listable by every user of the host;
/// one says nothing of the secret, so nobody outside the job can tell the
/// name of a process that has not made its segment yet (and make it first,
/// to stop the job from starting).
pub fn shm_segment_name(secret: u64, node: u64) -> String {
    let mut key = [0u8; KEY_LEN];
    key[..8].copy_from_slice(&secret.to_le_bytes());
    let mac = JobKey(key)
        .mac(Role::ShmName, &[&node.to_le_bytes()])
        .finalize()
        .into_bytes();
    format!("/converse-{}", to_hex(&mac[..16]))
}

/// A fresh random number, sent in the clear, that a proof must cover.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Nonce([u8; NONCE_LEN]);

impl Nonce {
    /// A new nonce from the operating system's random source.
    pub fn generate() -> std::io::Result<Nonce> {
        random().map(Nonce)
    }

    /// The nonce `hex` spells (32 lowercase hexadecimal digits), if it is one.
    pub fn from_hex(hex: &str) -> Option<Nonce> {
        from_hex(hex).map(Nonce)
    }

    /// The nonce as 32 hexadecimal digits.
    pub fn to_hex(&self) -> String {
        to_hex(&self.0)
    }

    /// The nonce made of `bytes` (as read from a binary protocol).
    pub fn from_bytes(bytes: [u8; NONCE_LEN]) -> Nonce {
        Nonce(bytes)
    }

    /// The nonce's bytes.
    pub fn as_bytes(&self) -> &[u8; NONCE_LEN] {
        &self.0
    }
}

/// An HMAC-SHA-256 proof of holding the job key ([`JobKey::proof`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Proof([u8; PROOF_LEN]);

impl Proof {
    /// The proof `hex` spells (64 lowercase hexadecimal digits), if it is one.
    pub fn from_hex(hex: &str) -> Option<Proof> {
        from_hex(hex).map(Proof)
    }

    /// The proof as 64 hexadecimal digits.
    pub fn to_hex(&self) -> String {
        to_hex(&self.0)
    }

    /// The proof made of `bytes` (as read from a binary protocol).
    pub fn from_bytes(bytes: [u8; PROOF_LEN]) -> Proof {
        Proof(bytes)
    }

    /// The proof's bytes.
    pub fn as_bytes(&self) -> &[u8; PROOF_LEN] {
        &self.0
    }
}

/// The launcher protocol's two proofs, so that both ends hash the same
/// parts in the same order.
impl JobKey {
    /// What process `node` (operating-system process `pid`, with business
    /// card `card`) proves in its hello, answering the launcher's
    /// challenge `launcher` with its own nonce `process`.
    pub fn hello_proof(
        &self,
        launcher: &Nonce,
        process: &Nonce,
        node: usize,
        pid: u32,
        card: &str,
    ) -> Proof {
        let (node, pid) = ((node as u64).to_le_bytes(), u64::from(pid).to_le_bytes());
        let parts: [&[u8]; 5] = [
            launcher.as_bytes(),
            process.as_bytes(),
            &node,
            &pid,
            card.as_bytes(),
        ];
        self.proof(Role::ProcessHello, &parts)
    }

    /// True if `proof` is [`JobKey::hello_proof`] of these parts.
    pub fn verify_hello(
        &self,
        launcher: &Nonce,
        process: &Nonce,
        node: usize,
        pid: u32,
        card: &str,
        proof: &Proof,
    ) -> bool {
        // Recomputed and compared in constant time, as `verify` does.
        let expected = self.hello_proof(launcher, process, node, pid, card);
        constant_time_eq(expected.as_bytes(), proof.as_bytes())
    }

    /// What the launcher proves in its `welcome` to process `node`.
    pub fn welcome_proof(&self, launcher: &Nonce, process: &Nonce, node: usize) -> Proof {
        let node = (node as u64).to_le_bytes();
        self.proof(
            Role::LauncherWelcome,
            &[launcher.as_bytes(), process.as_bytes(), &node],
        )
    }

    /// True if `proof` is [`JobKey::welcome_proof`] of these parts.
    pub fn verify_welcome(
        &self,
        launcher: &Nonce,
        process: &Nonce,
        node: usize,
        proof: &Proof,
    ) -> bool {
        let expected = self.welcome_proof(launcher, process, node);
        constant_time_eq(expected.as_bytes(), proof.as_bytes())
    }
}

/// True if `a` and `b` hold the same bytes, in a time that depends only on
/// their length.
fn constant_time_eq(a: &[u8; PROOF_LEN], b: &[u8; PROOF_LEN]) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    // `black_box` keeps the compiler from ending the fold early.
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_are_unrelated_to_each_other_and_to_the_secret() {
        let (a0, a1) = (shm_segment_name(0x5eed, 0), shm_segment_name(0x5eed, 1));
        assert_eq!(
            a0,
            shm_segment_name(0x5eed, 0),
            "the same for every process"
        );
        assert!(a0.starts_with("/converse-") && a0.len() == "/converse-".len() + 32);
        assert!(
            a0["/converse-".len()..]
                .bytes()
                .all(|b| b.is_ascii_hexdigit())
        );
        assert_ne!(a0, a1);
        assert_ne!(a0, shm_segment_name(0x5eee, 0));
        assert!(!a0.contains("5eed") && !a1.contains(&a0[10..20]));
    }

    fn key(b: u8) -> JobKey {
        JobKey::from_bytes([b; KEY_LEN])
    }

    #[test]
    fn hex_round_trips_and_refuses_the_wrong_length_or_digits() {
        let k = JobKey::generate().unwrap();
        assert_eq!(JobKey::from_hex(&k.to_hex()), Some(k.clone()));
        assert_eq!(k.to_hex().len(), 64);
        assert_eq!(JobKey::from_hex(&"AB".repeat(32)), None, "lowercase only");
        assert_eq!(JobKey::from_hex(&k.to_hex()[1..]), None);
        assert_eq!(JobKey::from_hex(&format!("{}0", k.to_hex())), None);
        assert_eq!(JobKey::from_hex(&"g".repeat(64)), None);
        assert_eq!(JobKey::from_hex(&"+f".repeat(32)), None);
        let n = Nonce::generate().unwrap();
        assert_eq!(Nonce::from_hex(&n.to_hex()), Some(n));
        assert_eq!(Nonce::from_hex("é"), None);
        assert_ne!(n, Nonce::generate().unwrap(), "fresh nonces differ");
    }

    #[test]
    fn a_key_debugs_without_its_bytes() {
        assert_eq!(format!("{:?}", key(0xab)), "JobKey(..)");
    }

    /// HMAC-SHA-256 itself, against RFC 4231's test case 2, so that the
    /// proofs are the standard construction.
    #[test]
    fn the_mac_is_rfc_4231_hmac_sha256() {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            to_hex(&mac.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn a_proof_holds_only_for_its_key_role_and_parts() {
        let (a, b) = (Nonce::from_bytes([1; 16]), Nonce::from_bytes([2; 16]));
        let k = key(7);
        let p = k.hello_proof(&a, &b, 3, 42, "tcp:h:1");
        assert!(k.verify_hello(&a, &b, 3, 42, "tcp:h:1", &p));
        // Another key, nonce, identity or card: refused.
        assert!(!key(8).verify_hello(&a, &b, 3, 42, "tcp:h:1", &p));
        assert!(!k.verify_hello(&b, &a, 3, 42, "tcp:h:1", &p));
        assert!(!k.verify_hello(&a, &a, 3, 42, "tcp:h:1", &p));
        assert!(!k.verify_hello(&a, &b, 4, 42, "tcp:h:1", &p));
        assert!(!k.verify_hello(&a, &b, 3, 43, "tcp:h:1", &p));
        assert!(!k.verify_hello(&a, &b, 3, 42, "tcp:h:2", &p));
        // The same parts under another role: refused.
        let w = k.welcome_proof(&a, &b, 3);
        assert!(k.verify_welcome(&a, &b, 3, &w));
        assert_ne!(w, p);
        let parts: [&[u8]; 2] = [a.as_bytes(), b.as_bytes()];
        let acc = k.proof(Role::TcpAcceptor, &parts);
        assert!(!k.verify(Role::TcpConnector, &parts, &acc));
        assert!(k.verify(Role::TcpAcceptor, &parts, &acc));
        // Parts are length-prefixed: moving a byte between parts changes
        // the proof.
        assert_ne!(
            k.proof(Role::TcpAcceptor, &[b"ab", b"c"]),
            k.proof(Role::TcpAcceptor, &[b"a", b"bc"])
        );
    }

    #[test]
    fn a_tag_depends_on_the_key_and_role() {
        assert_eq!(key(1).tag(Role::ShmTag), key(1).tag(Role::ShmTag));
        assert_ne!(key(1).tag(Role::ShmTag), key(2).tag(Role::ShmTag));
        assert_ne!(key(1).tag(Role::ShmTag), key(1).tag(Role::TcpAcceptor));
    }
}
