//! The control socket's lines, each direction an enum: what a process
//! tells the launcher ([`ToLauncher`]) and what the launcher tells a
//! process ([`ToProcess`]).
//!
//! # Invariants
//!
//! - `encode` writes one line: the kind's word, its fields separated by
//!   single spaces, `\n`. `parse` reads exactly that (without or with its
//!   `\n`, a `\r` before it tolerated) and nothing else: a field missing,
//!   extra, empty or malformed is an [`Error`] naming the line's kind and
//!   the field.
//! - A [`Card`] is 1 to [`MAX_CARD`] bytes with no whitespace or control
//!   character, checked when it is made, so that it is one field of a
//!   `hello` or `card` line. An `abort` or `failed` text is at most
//!   [`MAX_TEXT`] bytes without control characters: `encode` makes it so
//!   (a line break becomes a space), `parse` refuses anything else.
//! - Every line of either direction is at most [`ToLauncher::MAX_LEN`] or
//!   [`ToProcess::MAX_LEN`] bytes, whatever the job's size: no line carries
//!   more than one card (a process learns the others' one at a time, with
//!   `whois` and `card`).
//! - `parse` never panics and allocates no more than its input's length.
use crate::auth::{NONCE_LEN, Nonce, PROOF_LEN, Proof};
use crate::error::{Error, shown};

/// Most bytes of a business card.
pub const MAX_CARD: usize = 1024;
/// Most bytes of an `abort` or `failed` line's text.
pub const MAX_TEXT: usize = 4096;

/// Bytes a line's end may take (`\r\n`).
const END_LEN: usize = 2;
/// Most digits of a `usize` (64-bit) and a `u32` in decimal.
const USIZE_DIGITS: usize = 20;
const U32_DIGITS: usize = 10;

/// A process's business card, as the protocol carries it: what its peers
/// need to reach it (one network module's card, or several
/// comma-separated). See the module comment for what it may hold.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Card(String);

impl Card {
    /// `card`, if the protocol can carry it.
    pub fn new(card: impl Into<String>) -> Result<Card, Error> {
        let card = card.into();
        check_card(&card).map_err(|why| Error::Malformed { line: "card", why })?;
        Ok(Card(card))
    }

    /// The card's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The card's text, owned.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl std::fmt::Display for Card {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why `card` is not a card, if it is not.
fn check_card(card: &str) -> Result<(), String> {
    if card.is_empty() {
        return Err("an empty card".into());
    }
    if card.len() > MAX_CARD {
        return Err(format!(
            "a card of {} bytes: the most is {MAX_CARD}",
            card.len()
        ));
    }
    if let Some(c) = card.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "card `{}` holds {:?}, a space or control character",
            shown(card),
            c
        ));
    }
    Ok(())
}

/// What a process tells the launcher.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToLauncher {
    /// `hello NODE PID CARD NONCE PROOF`: process `node` (operating-system
    /// process `pid`) joins the job; `card` is its business card. It
    /// answers the launcher's [`ToProcess::Challenge`]: `proof` is
    /// [`JobKey::hello_proof`](crate::auth::JobKey::hello_proof) of the
    /// launcher's nonce, `nonce` (its own, fresh) and the other fields.
    Hello {
        /// The process's number in the job.
        node: usize,
        /// Its operating-system process id.
        pid: u32,
        /// Its business card.
        card: Card,
        /// The process's nonce, which the launcher's `welcome` must cover.
        nonce: Nonce,
        /// Its proof of holding the job key.
        proof: Proof,
    },
    /// `whois NODE`: the process asks for process `NODE`'s business card
    /// (after `go`); the launcher answers [`ToProcess::Card`].
    WhoIs(usize),
    /// `end`: its part of the job is done; it exits next, on purpose.
    End,
    /// `lost`: it ends because another process failed.
    Lost,
    /// `failed TEXT`: it ends the job because of what `TEXT` says (its own
    /// failure: an abort, a fault it found). The launcher passes the text
    /// on to the others, so they tell the same cause whether the launcher
    /// or the process's own network message reaches them first.
    Failed(String),
}

impl ToLauncher {
    /// Most bytes of a line to the launcher, its end included: what a
    /// reader should read at most before it gives up on a line.
    pub const MAX_LEN: usize = {
        let hello = "hello ".len()
            + USIZE_DIGITS
            + 1
            + U32_DIGITS
            + 1
            + MAX_CARD
            + 1
            + 2 * NONCE_LEN
            + 1
            + 2 * PROOF_LEN;
        let failed = "failed ".len() + MAX_TEXT;
        (if hello > failed { hello } else { failed }) + END_LEN
    };

    /// The line, `\n` included.
    pub fn encode(&self) -> String {
        match self {
            ToLauncher::Hello {
                node,
                pid,
                card,
                nonce,
                proof,
            } => format!(
                "hello {node} {pid} {card} {} {}\n",
                nonce.to_hex(),
                proof.to_hex()
            ),
            ToLauncher::WhoIs(node) => format!("whois {node}\n"),
            ToLauncher::End => "end\n".into(),
            ToLauncher::Lost => "lost\n".into(),
            ToLauncher::Failed(text) => format!("failed {}\n", carriable(text)),
        }
    }

    /// The line `line` is, or what is wrong with it.
    pub fn parse(line: &str) -> Result<ToLauncher, Error> {
        let line = unterminated(line, "a line to the launcher", Self::MAX_LEN)?;
        let (kind, rest) = split_kind(line)?;
        match kind {
            "hello" => {
                let [node, pid, card, nonce, proof] =
                    fields::<5>("hello", rest, "NODE PID CARD NONCE PROOF")?;
                Ok(ToLauncher::Hello {
                    node: number("hello", "NODE", node)?,
                    pid: number("hello", "PID", pid)?,
                    card: card_field("hello", card)?,
                    nonce: hex_field("hello", "NONCE", nonce, Nonce::from_hex)?,
                    proof: hex_field("hello", "PROOF", proof, Proof::from_hex)?,
                })
            }
            "whois" => {
                let [node] = fields::<1>("whois", rest, "NODE")?;
                number("whois", "NODE", node).map(ToLauncher::WhoIs)
            }
            "end" => no_fields("end", rest).map(|()| ToLauncher::End),
            "lost" => no_fields("lost", rest).map(|()| ToLauncher::Lost),
            "failed" => text("failed", rest).map(ToLauncher::Failed),
            other => Err(Error::Unknown(shown(other))),
        }
    }
}

/// What the launcher tells a process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToProcess {
    /// `go`: every process of the job has said hello; start (the start
    /// barrier). Sent once, after `welcome`.
    Go,
    /// `card NODE CARD`: process `node`'s business card, the answer to the
    /// process's [`ToLauncher::WhoIs`] for it.
    Card {
        /// The process the card is of.
        node: usize,
        /// Its business card.
        card: Card,
    },
    /// `abort TEXT`: the job is ending because of what `TEXT` says (another
    /// process failed); the process ends.
    Abort(String),
    /// `challenge NONCE`: the launcher's first line on every control
    /// connection, a fresh nonce the process's hello must prove over.
    Challenge(Nonce),
    /// `welcome PROOF`: the launcher's answer to a hello whose proof held,
    /// [`JobKey::welcome_proof`](crate::auth::JobKey::welcome_proof) of
    /// both nonces and the process's number: the launcher holds the key
    /// too.
    Welcome(Proof),
}

impl ToProcess {
    /// Most bytes of a line to a process, its end included (whatever the
    /// job's size): what a reader should read at most before it gives up
    /// on a line.
    pub const MAX_LEN: usize = {
        let card = "card ".len() + USIZE_DIGITS + 1 + MAX_CARD;
        let abort = "abort ".len() + MAX_TEXT;
        let challenge = "challenge ".len() + 2 * NONCE_LEN;
        let welcome = "welcome ".len() + 2 * PROOF_LEN;
        let mut most = card;
        if abort > most {
            most = abort;
        }
        if challenge > most {
            most = challenge;
        }
        if welcome > most {
            most = welcome;
        }
        most + END_LEN
    };

    /// The line, `\n` included. An abort text is made carriable first:
    /// control characters become spaces and it is cut to [`MAX_TEXT`]
    /// bytes (at a character boundary).
    pub fn encode(&self) -> String {
        match self {
            ToProcess::Go => "go\n".into(),
            ToProcess::Card { node, card } => format!("card {node} {card}\n"),
            ToProcess::Abort(text) => format!("abort {}\n", carriable(text)),
            ToProcess::Challenge(nonce) => format!("challenge {}\n", nonce.to_hex()),
            ToProcess::Welcome(proof) => format!("welcome {}\n", proof.to_hex()),
        }
    }

    /// The line `line` is, or what is wrong with it. Whether a `card`'s
    /// number is one the process asked for is not checked here (the caller
    /// knows).
    pub fn parse(line: &str) -> Result<ToProcess, Error> {
        let line = unterminated(line, "a line to a process", Self::MAX_LEN)?;
        let (kind, rest) = split_kind(line)?;
        match kind {
            "go" => no_fields("go", rest).map(|()| ToProcess::Go),
            "card" => {
                let [node, card] = fields::<2>("card", rest, "NODE CARD")?;
                Ok(ToProcess::Card {
                    node: number("card", "NODE", node)?,
                    card: card_field("card", card)?,
                })
            }
            "abort" => text("abort", rest).map(ToProcess::Abort),
            "challenge" => {
                let [nonce] = fields::<1>("challenge", rest, "NONCE")?;
                hex_field("challenge", "NONCE", nonce, Nonce::from_hex).map(ToProcess::Challenge)
            }
            "welcome" => {
                let [proof] = fields::<1>("welcome", rest, "PROOF")?;
                hex_field("welcome", "PROOF", proof, Proof::from_hex).map(ToProcess::Welcome)
            }
            other => Err(Error::Unknown(shown(other))),
        }
    }
}

/// `text` made carriable as a line's TEXT: control characters become
/// spaces and it is cut to [`MAX_TEXT`] bytes (at a character boundary).
fn carriable(text: &str) -> String {
    let mut clean = String::with_capacity(text.len().min(MAX_TEXT));
    for c in text.chars() {
        let c = if c.is_control() { ' ' } else { c };
        if clean.len() + c.len_utf8() > MAX_TEXT {
            break;
        }
        clean.push(c);
    }
    clean
}

/// The TEXT of a `kind` line (`abort`, `failed`): at most [`MAX_TEXT`]
/// bytes, no control character; the kind alone means no text.
fn text(kind: &'static str, rest: Option<&str>) -> Result<String, Error> {
    let rest = rest.unwrap_or_default();
    if rest.len() > MAX_TEXT {
        return Err(Error::TooLong {
            what: "a line's text",
            len: rest.len(),
            max: MAX_TEXT,
        });
    }
    if let Some(c) = rest.chars().find(|c| c.is_control()) {
        return Err(Error::malformed(
            kind,
            format!("TEXT holds the control character {c:?}"),
        ));
    }
    Ok(rest.to_string())
}

/// `line` without its end (`\n`, or `\r\n`), if it is at most `max` bytes.
fn unterminated<'a>(line: &'a str, what: &'static str, max: usize) -> Result<&'a str, Error> {
    if line.len() > max {
        return Err(Error::TooLong {
            what,
            len: line.len(),
            max,
        });
    }
    let line = line.strip_suffix('\n').unwrap_or(line);
    Ok(line.strip_suffix('\r').unwrap_or(line))
}

/// The line's kind (its first word) and the rest after one space (`None`
/// if there is no space: a line without fields).
fn split_kind(line: &str) -> Result<(&str, Option<&str>), Error> {
    if line.is_empty() {
        return Err(Error::Empty);
    }
    Ok(match line.split_once(' ') {
        Some((kind, rest)) => (kind, Some(rest)),
        None => (line, None),
    })
}

/// Exactly `N` non-empty fields of `rest`, separated by single spaces
/// (`names` says which, for the error).
fn fields<'a, const N: usize>(
    kind: &'static str,
    rest: Option<&'a str>,
    names: &str,
) -> Result<[&'a str; N], Error> {
    let mut out = [""; N];
    let mut count = 0;
    for field in rest.into_iter().flat_map(|r| r.split(' ')) {
        if field.is_empty() {
            return Err(Error::malformed(
                kind,
                format!("an empty field (fields are {names}, one space apart)"),
            ));
        }
        if count == N {
            return Err(Error::malformed(
                kind,
                format!("more than {N} fields ({names})"),
            ));
        }
        out[count] = field;
        count += 1;
    }
    if count < N {
        return Err(Error::malformed(
            kind,
            format!("{count} fields, not {N} ({names})"),
        ));
    }
    Ok(out)
}

/// Nothing after the kind's word, not even a space.
fn no_fields(kind: &'static str, rest: Option<&str>) -> Result<(), Error> {
    match rest {
        None => Ok(()),
        Some(rest) => Err(Error::malformed(
            kind,
            format!("unexpected text after `{kind}`: ` {}`", shown(rest)),
        )),
    }
}

/// Field `name` as the hexadecimal value `from_hex` reads.
fn hex_field<T>(
    kind: &'static str,
    name: &str,
    field: &str,
    from_hex: fn(&str) -> Option<T>,
) -> Result<T, Error> {
    from_hex(field).ok_or_else(|| {
        Error::malformed(
            kind,
            format!(
                "{name} `{}` is not the right number of hexadecimal digits",
                shown(field)
            ),
        )
    })
}

/// Field `CARD` of a `kind` line.
fn card_field(kind: &'static str, field: &str) -> Result<Card, Error> {
    check_card(field)
        .map(|()| Card(field.to_string()))
        .map_err(|why| Error::malformed(kind, format!("CARD: {why}")))
}

/// Field `name` as a number.
fn number<T: std::str::FromStr>(kind: &'static str, name: &str, field: &str) -> Result<T, Error> {
    // Digits only: `FromStr` would take a `+`.
    if !field.is_empty()
        && field.bytes().all(|b| b.is_ascii_digit())
        && let Ok(n) = field.parse()
    {
        return Ok(n);
    }
    Err(Error::malformed(
        kind,
        format!("{name} `{}` is not a number", shown(field)),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn card(s: &str) -> Card {
        Card::new(s).unwrap()
    }

    #[test]
    fn lines_to_the_launcher_round_trip() {
        let lines = [
            ToLauncher::Hello {
                node: 3,
                pid: 4242,
                card: card("shm:/converse-00ab-1:123:456,tcp:127.0.0.1:9000"),
                nonce: Nonce::from_bytes([0xa5; NONCE_LEN]),
                proof: Proof::from_bytes([0x3c; PROOF_LEN]),
            },
            ToLauncher::WhoIs(0),
            ToLauncher::WhoIs(usize::MAX),
            ToLauncher::End,
            ToLauncher::Lost,
            ToLauncher::Failed("PE 1 aborted: lx_abort says boom".into()),
            ToLauncher::Failed(String::new()),
        ];
        for l in lines {
            let text = l.encode();
            assert!(text.ends_with('\n') && text.len() <= ToLauncher::MAX_LEN);
            assert_eq!(ToLauncher::parse(&text), Ok(l.clone()), "{text:?}");
            assert_eq!(ToLauncher::parse(text.trim_end()), Ok(l.clone()));
            assert_eq!(ToLauncher::parse(&text.replace('\n', "\r\n")), Ok(l));
        }
        assert_eq!(
            ToLauncher::Hello {
                node: 0,
                pid: 7,
                card: card("tcp:h:1"),
                nonce: Nonce::from_bytes([0x01; NONCE_LEN]),
                proof: Proof::from_bytes([0xff; PROOF_LEN]),
            }
            .encode(),
            format!(
                "hello 0 7 tcp:h:1 {} {}\n",
                "01".repeat(16),
                "ff".repeat(32)
            )
        );
        let longest = ToLauncher::Hello {
            node: usize::MAX,
            pid: u32::MAX,
            card: card(&"c".repeat(MAX_CARD)),
            nonce: Nonce::from_bytes([0; NONCE_LEN]),
            proof: Proof::from_bytes([0; PROOF_LEN]),
        };
        assert!(longest.encode().len() < ToLauncher::MAX_LEN);
        assert_eq!(ToLauncher::WhoIs(17).encode(), "whois 17\n");
        let longest = ToLauncher::Failed("f".repeat(MAX_TEXT + 10));
        assert_eq!(longest.encode().len() + 1, ToLauncher::MAX_LEN);
        assert_eq!(
            ToLauncher::Failed("two\nlines".into()).encode(),
            "failed two lines\n"
        );
    }

    #[test]
    fn lines_to_a_process_round_trip() {
        let lines = [
            ToProcess::Go,
            ToProcess::Card {
                node: 0,
                card: card("shm:x,tcp:b:2"),
            },
            ToProcess::Card {
                node: usize::MAX,
                card: card(&"c".repeat(MAX_CARD)),
            },
            ToProcess::Abort("lost process 1 (PE 1): it was killed by signal 9 (SIGKILL)".into()),
            ToProcess::Abort(String::new()),
            ToProcess::Challenge(Nonce::from_bytes([0x5a; NONCE_LEN])),
            ToProcess::Welcome(Proof::from_bytes([0x0f; PROOF_LEN])),
        ];
        for l in lines {
            let text = l.encode();
            assert!(
                text.ends_with('\n') && text.len() < ToProcess::MAX_LEN,
                "{text:?}"
            );
            assert_eq!(ToProcess::parse(&text), Ok(l.clone()), "{text:?}");
            assert_eq!(ToProcess::parse(text.trim_end()), Ok(l.clone()));
            assert_eq!(ToProcess::parse(&text.replace('\n', "\r\n")), Ok(l));
        }
        assert_eq!(ToProcess::Go.encode(), "go\n");
        assert_eq!(
            ToProcess::Card {
                node: 12,
                card: card("tcp:h:1")
            }
            .encode(),
            "card 12 tcp:h:1\n"
        );
        assert_eq!(
            ToProcess::Challenge(Nonce::from_bytes([0xab; NONCE_LEN])).encode(),
            format!("challenge {}\n", "ab".repeat(16))
        );
        // The longest line is an abort's, whatever the job's size.
        let longest = ToProcess::Abort("f".repeat(MAX_TEXT + 10)).encode();
        assert_eq!(longest.len() + 1, ToProcess::MAX_LEN);
        assert!(matches!(
            ToProcess::parse(&longest.replace('\n', "\r\n")),
            Ok(ToProcess::Abort(_))
        ));
    }

    /// A nonce or proof with a digit too many or too few, or a non-hex
    /// one, is malformed and names its field.
    #[test]
    fn nonces_and_proofs_are_exactly_their_hex_digits() {
        let hello = |nonce: &str, proof: &str| {
            ToLauncher::parse(&format!("hello 1 2 tcp:h:1 {nonce} {proof}\n"))
        };
        let (n, p) = ("0".repeat(32), "f".repeat(64));
        assert!(hello(&n, &p).is_ok());
        for (nonce, proof, field) in [
            (&n[1..], &p[..], "NONCE"),
            (&format!("{n}0")[..], &p[..], "NONCE"),
            (&n[..], &p[1..], "PROOF"),
            (&n[..], &format!("{}g", &p[1..])[..], "PROOF"),
        ] {
            let err = hello(nonce, proof).unwrap_err().to_string();
            assert!(err.contains(field), "{err}");
        }
        assert!(
            ToLauncher::parse("hello 1 2 tcp:h:1\n").is_err(),
            "proof required"
        );
        assert!(ToProcess::parse("challenge\n").is_err());
        assert!(ToProcess::parse(&format!("welcome {p} {p}\n")).is_err());
        assert!(ToProcess::parse(&format!("challenge 0x{}\n", &n[2..])).is_err());
    }

    #[test]
    fn an_abort_text_is_made_carriable() {
        let text = ToProcess::Abort("two\nlines\u{0}".into()).encode();
        assert_eq!(text, "abort two lines \n");
        let long = ToProcess::Abort("é".repeat(MAX_TEXT)).encode();
        assert!(long.len() <= "abort \n".len() + MAX_TEXT);
        match ToProcess::parse(&long) {
            Ok(ToProcess::Abort(t)) => assert_eq!(t.len(), MAX_TEXT),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_card_is_checked() {
        for bad in ["", "a b", "a\tb", "a\nb", &"c".repeat(MAX_CARD + 1)] {
            assert!(Card::new(bad).is_err(), "{bad:?}");
        }
        assert_eq!(card("tcp:[::1]:9").as_str(), "tcp:[::1]:9");
    }

    #[test]
    fn malformed_lines_say_what_is_wrong() {
        // A valid nonce and proof, for the lines wrong elsewhere.
        let np = format!("{} {}", "0".repeat(32), "0".repeat(64));
        let owned: Vec<(String, &str)> = vec![
            ("".into(), "an empty line"),
            ("\n".into(), "an empty line"),
            ("hi 0 1 c".into(), "unknown line `hi`"),
            (
                "hello 0 1".into(),
                "malformed `hello` line: 2 fields, not 5 (NODE PID CARD NONCE PROOF)",
            ),
            ("hello".into(), "malformed `hello` line: 0 fields, not 5"),
            (
                format!("hello 0 1 c {np} d"),
                "malformed `hello` line: more than 5 fields",
            ),
            (
                format!("hello x 1 c {np}"),
                "malformed `hello` line: NODE `x` is not a number",
            ),
            (
                format!("hello +1 1 c {np}"),
                "malformed `hello` line: NODE `+1` is not a number",
            ),
            (
                format!("hello 1 99999999999 c {np}"),
                "malformed `hello` line: PID `99999999999` is not a number",
            ),
            (
                format!("hello 0  1 c {np}"),
                "malformed `hello` line: an empty field",
            ),
            (
                format!("hello 0 1 c\u{1} {np}"),
                "malformed `hello` line: CARD: card",
            ),
            (
                "end now".into(),
                "malformed `end` line: unexpected text after `end`: ` now`",
            ),
            ("lost\nend".into(), "unknown line `lost\\nend`"),
            ("end \n".into(), "malformed `end` line: unexpected"),
            (
                "whois".into(),
                "malformed `whois` line: 0 fields, not 1 (NODE)",
            ),
            (
                "whois 1 2".into(),
                "malformed `whois` line: more than 1 fields (NODE)",
            ),
            (
                "whois -1".into(),
                "malformed `whois` line: NODE `-1` is not a number",
            ),
            (
                "whois 99999999999999999999".into(),
                "malformed `whois` line: NODE `99999999999999999999` is not a number",
            ),
            ("whois  1".into(), "malformed `whois` line: an empty field"),
            ("whois 1 ".into(), "malformed `whois` line: an empty field"),
        ];
        let to_launcher: Vec<(&str, &str)> = owned.iter().map(|(l, w)| (l.as_str(), *w)).collect();
        for &(line, want) in &to_launcher {
            let e = ToLauncher::parse(line).unwrap_err().to_string();
            assert!(e.starts_with(want), "{line:?}: {e}");
        }
        let long = format!("hello 0 1 {}", "c".repeat(ToLauncher::MAX_LEN));
        assert!(matches!(
            ToLauncher::parse(&long),
            Err(Error::TooLong { .. })
        ));
        let to_process: &[(&str, &str)] = &[
            (
                "go now",
                "malformed `go` line: unexpected text after `go`: ` now`",
            ),
            ("go \n", "malformed `go` line: unexpected"),
            (
                "card 1",
                "malformed `card` line: 1 fields, not 2 (NODE CARD)",
            ),
            ("card", "malformed `card` line: 0 fields, not 2"),
            ("card 1 a b", "malformed `card` line: more than 2 fields"),
            ("card 1  a", "malformed `card` line: an empty field"),
            (
                "card x a",
                "malformed `card` line: NODE `x` is not a number",
            ),
            (
                "card +1 a",
                "malformed `card` line: NODE `+1` is not a number",
            ),
            ("card 1 a\u{7}", "malformed `card` line: CARD: card"),
            // The all-cards line of old is no line any more.
            ("cards a b", "unknown line `cards`"),
            (
                "abort x\ny",
                "malformed `abort` line: TEXT holds the control character",
            ),
            ("stop", "unknown line `stop`"),
            (" cards a", "unknown line ``"),
        ];
        for (line, want) in to_process {
            let e = ToProcess::parse(line).unwrap_err().to_string();
            assert!(e.starts_with(want), "{line:?}: {e}");
        }
        for long in [
            format!("abort {}", "x".repeat(MAX_TEXT + 1)),
            format!("card 1 {}", "c".repeat(ToProcess::MAX_LEN)),
        ] {
            assert!(
                matches!(ToProcess::parse(&long), Err(Error::TooLong { .. })),
                "{}",
                &long[..10]
            );
        }
    }

    /// A card the protocol can carry.
    fn any_card() -> impl Strategy<Value = Card> {
        "[!-~]{1,64}".prop_map(Card)
    }

    proptest! {
        #[test]
        fn parse_never_panics(line in any::<String>()) {
            let _ = ToLauncher::parse(&line);
            let _ = ToProcess::parse(&line);
        }

        #[test]
        fn parse_never_panics_on_near_misses(
            kind in prop::sample::select(vec![
                "hello", "whois", "end", "lost", "failed", "go", "card", "abort", "challenge",
                "welcome",
            ]),
            rest in "[ 0-9a-z:,\\r\\n\\t]{0,40}",
        ) {
            let line = format!("{kind} {rest}");
            let _ = ToLauncher::parse(&line);
            let _ = ToProcess::parse(&line);
        }

        #[test]
        fn every_line_round_trips(
            node in any::<usize>(),
            pid in any::<u32>(),
            card in any_card(),
            asked in any::<usize>(),
            text in "[^\\p{Cc}]{0,100}",
            nonce in any::<[u8; NONCE_LEN]>(),
            proof in any::<[u8; PROOF_LEN]>(),
        ) {
            let (nonce, proof) = (Nonce::from_bytes(nonce), Proof::from_bytes(proof));
            let answer = ToProcess::Card { node: asked, card: card.clone() };
            prop_assert!(answer.encode().len() <= ToProcess::MAX_LEN);
            prop_assert_eq!(ToProcess::parse(&answer.encode()), Ok(answer));
            let whois = ToLauncher::WhoIs(asked);
            prop_assert_eq!(ToLauncher::parse(&whois.encode()), Ok(whois));
            prop_assert_eq!(ToProcess::parse(&ToProcess::Go.encode()), Ok(ToProcess::Go));
            let hello = ToLauncher::Hello { node, pid, card, nonce, proof };
            let challenge = ToProcess::Challenge(nonce);
            prop_assert_eq!(ToProcess::parse(&challenge.encode()), Ok(challenge));
            let welcome = ToProcess::Welcome(proof);
            prop_assert_eq!(ToProcess::parse(&welcome.encode()), Ok(welcome));
            prop_assert_eq!(ToLauncher::parse(&hello.encode()), Ok(hello));
            let failed = ToLauncher::Failed(text.clone());
            prop_assert_eq!(ToLauncher::parse(&failed.encode()), Ok(failed));
            let abort = ToProcess::Abort(text);
            prop_assert_eq!(ToProcess::parse(&abort.encode()), Ok(abort));
        }
    }
}
