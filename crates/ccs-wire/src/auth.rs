//! CCS authentication: the hash, keys and the auth file.
//!
//! The hash is plain SHA-1 over exactly 52 bytes: key (16) ‖ salt (4,
//! big-endian) ‖ the first 16 bytes of a request header, or 16 zero bytes
//! ‖ 16 zero bytes. Keys are 16 bytes, one per security level 0–254.
use sha1::{Digest, Sha1};

use crate::HASH_LEN;

/// A security level's key.
pub type Key = [u8; 16];

/// How a line of the auth file that tells of an OTP key starts.
pub const OTP_LINE_PREFIX: &str = "CCS_OTP_KEY> Level ";

/// `SHA-1(key ‖ salt ‖ header16 or zeros ‖ zeros)`.
pub fn hash(key: &Key, salt: u32, header16: Option<&[u8; 16]>) -> [u8; HASH_LEN] {
    let mut input = [0u8; 52];
    input[..16].copy_from_slice(key);
    input[16..20].copy_from_slice(&salt.to_be_bytes());
    if let Some(h) = header16 {
        input[20..36].copy_from_slice(h);
    }
    Sha1::digest(input).into()
}

/// The server's last message of an identity handshake: `hash(key, s1)` ‖
/// the client's id ‖ the client's salt.
pub fn identity_reply(key: &Key, s1: u32, client_id: u32, client_salt: u32) -> [u8; 28] {
    let mut b = [0u8; 28];
    b[..HASH_LEN].copy_from_slice(&hash(key, s1, None));
    b[20..24].copy_from_slice(&client_id.to_be_bytes());
    b[24..].copy_from_slice(&client_salt.to_be_bytes());
    b
}

/// A key that does not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyError(pub String);

impl std::fmt::Display for KeyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for KeyError {}

/// A key written as 32 hex digits (either case).
///
/// Charm++'s own parser reads the 32 digits in pairs as *decimal* numbers
/// (`"12"` is byte 12, not 0x12). To give a Charm++ client the key this
/// parser reads from `k0 k1 … k15` (hex), every byte must be below 100 and
/// be written there as two decimal digits: hex `0c22…` here is `1234…`
/// there.
pub fn parse_key(text: &str) -> Result<Key, KeyError> {
    let t = text.trim();
    if t.len() != 32 || !t.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Err(KeyError(format!(
            "a key is 32 hex digits, not {:?}",
            if t.len() > 40 { &t[..40] } else { t }
        )));
    }
    let mut key = [0u8; 16];
    for (i, byte) in key.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&t[2 * i..2 * i + 2], 16).expect("checked hex digits");
    }
    Ok(key)
}

/// The keys of a server: one per security level, or none.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct AuthKeys {
    keys: Vec<Option<Key>>,
}

impl std::fmt::Debug for AuthKeys {
    // Keys never reach logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let levels: Vec<usize> = (0..self.keys.len())
            .filter(|&l| self.keys[l].is_some())
            .collect();
        write!(f, "AuthKeys {{ levels with keys: {levels:?} }}")
    }
}

impl AuthKeys {
    /// The key of `level`, if it has one.
    pub fn key(&self, level: u8) -> Option<&Key> {
        self.keys.get(level as usize).and_then(Option::as_ref)
    }

    /// Sets `level`'s key.
    pub fn set(&mut self, level: u8, key: Key) {
        let i = level as usize;
        if self.keys.len() <= i {
            self.keys.resize(i + 1, None);
        }
        self.keys[i] = Some(key);
    }

    /// The acceptance policy: plain requests only while level 0 has no
    /// key.
    pub fn accepts_plain(&self) -> bool {
        self.key(0).is_none()
    }
}

/// Parses an auth file: lines `<level> <key>`, the key 32 hex digits
/// ([`parse_key`]) or `OTP`, for which `random` draws a key. Blank lines
/// and lines starting with `#` are skipped. A file with no key (empty, or
/// only blank and comment lines) is an error: a server given it would
/// accept every request unauthenticated, which is surely not what asking
/// for an auth file meant, and so is a level given twice (which key was
/// meant?): the error names both lines. Returns the keys and, per OTP
/// key, the line the server prints so its user can pass the key on
/// (`CCS_OTP_KEY> Level <i> key: <32 uppercase hex digits>`).
pub fn parse_auth_file(
    text: &str,
    mut random: impl FnMut() -> Key,
) -> Result<(AuthKeys, Vec<String>), KeyError> {
    let mut keys = AuthKeys::default();
    let mut otp_lines = Vec::new();
    // The line each level was given on (1-based).
    let mut given_on = std::collections::HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |why: String| KeyError(format!("auth file line {}: {why}", n + 1));
        let mut words = line.split_whitespace();
        let (Some(level), Some(key), None) = (words.next(), words.next(), words.next()) else {
            return Err(bad("expected `<level> <key>`".into()));
        };
        let level: u8 = level
            .parse()
            .ok()
            .filter(|&l| l <= 254)
            .ok_or_else(|| bad(format!("the level {level:?} is not 0-254")))?;
        if let Some(first) = given_on.insert(level, n + 1) {
            return Err(bad(format!(
                "level {level} has a key already, on line {first}: give each level one key"
            )));
        }
        let key = if key.eq_ignore_ascii_case("OTP") {
            let k = random();
            let hex: String = k.iter().map(|b| format!("{b:02X}")).collect();
            otp_lines.push(format!("{OTP_LINE_PREFIX}{level} key: {hex}"));
            k
        } else {
            parse_key(key).map_err(|e| bad(e.0))?
        };
        keys.set(level, key);
    }
    if keys.keys.iter().all(Option::is_none) {
        return Err(KeyError(
            "the auth file holds no key (no `<level> <key>` line): with it the server would take every request unauthenticated".into(),
        ));
    }
    Ok((keys, otp_lines))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_sha1_of_the_52_bytes() {
        // SHA-1 of 52 zero bytes (computed independently with Python's
        // hashlib: hashlib.sha1(bytes(52)).hexdigest()).
        let h = hash(&[0; 16], 0, None);
        let hex: String = h.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "2f1050adf64f33298ff0ce423eb86d4728441b21");
        // The salt is big-endian at bytes 16..20, the header at 20..36.
        let mut input = [0u8; 52];
        input[..16].copy_from_slice(&[7; 16]);
        input[16..20].copy_from_slice(&[0, 0, 1, 2]);
        input[20..36].copy_from_slice(&[9; 16]);
        let want: [u8; 20] = Sha1::digest(input).into();
        assert_eq!(hash(&[7; 16], 0x0102, Some(&[9; 16])), want);
    }

    #[test]
    fn keys_are_32_hex_digits() {
        let k = parse_key("000102030405060708090a0b0c0d0E0F").unwrap();
        assert_eq!(k, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]);
        assert!(parse_key("0001").is_err());
        assert!(parse_key(&"g".repeat(32)).is_err());
    }

    #[test]
    fn the_auth_file_gives_keys_per_level_and_announces_otp_keys() {
        let text = "# keys\n0 00112233445566778899aabbccddeeff\n\n  7 OTP\n";
        let (keys, lines) = parse_auth_file(text, || [0xab; 16]).unwrap();
        assert_eq!(keys.key(0).unwrap()[1], 0x11);
        assert_eq!(keys.key(7), Some(&[0xab; 16]));
        assert_eq!(keys.key(1), None);
        assert!(!keys.accepts_plain());
        assert_eq!(
            lines,
            [format!("CCS_OTP_KEY> Level 7 key: {}", "AB".repeat(16))]
        );
        assert!(!format!("{keys:?}").contains("ab"), "keys stay out of logs");
        for bad in ["x 0011", "255 OTP", "1", "1 OTP extra", "1 0011"] {
            let e = parse_auth_file(bad, || [0; 16]).unwrap_err();
            assert!(e.0.starts_with("auth file line 1: "), "{bad}: {e}");
        }
    }

    #[test]
    fn a_level_given_twice_is_refused_naming_both_lines() {
        let twice = "0 OTP\n# a comment\n1 00112233445566778899aabbccddeeff\n0 ffeeddccbbaa99887766554433221100\n";
        let e = parse_auth_file(twice, || [0; 16]).unwrap_err();
        assert_eq!(
            e.0,
            "auth file line 4: level 0 has a key already, on line 1: give each level one key"
        );
        let e = parse_auth_file("7 OTP\n7 OTP\n", || [0; 16]).unwrap_err();
        assert!(
            e.0.contains("line 2: level 7") && e.0.contains("on line 1"),
            "{}",
            e.0
        );
    }

    #[test]
    fn an_auth_file_without_a_key_is_refused() {
        for empty in ["", "\n\n", "# no keys yet\n   \n# 0 OTP\n"] {
            let e = parse_auth_file(empty, || [0; 16]).unwrap_err();
            assert!(e.0.contains("holds no key"), "{empty:?}: {e}");
        }
    }

    #[test]
    fn an_identity_reply_is_hash_id_salt() {
        let r = identity_reply(&[1; 16], 5, 0x0a0b_0c0d, 42);
        assert_eq!(&r[..20], &hash(&[1; 16], 5, None));
        assert_eq!(&r[20..24], &[10, 11, 12, 13]);
        assert_eq!(&r[24..], &[0, 0, 0, 42]);
    }
}
