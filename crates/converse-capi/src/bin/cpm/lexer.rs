//! The lexer: a preprocessed C file as tokens, with the file and line
//! of each from the line markers (see "What it reads" in `main.rs`).
use std::fmt;

/// A token's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Ident,
    Number,
    Str,
    Char,
    Punct,
}

/// A token and where it is (after the line markers).
#[derive(Clone, Debug)]
pub(crate) struct Token {
    pub(crate) kind: Kind,
    pub(crate) text: String,
    pub(crate) file: usize,
    pub(crate) line: u32,
}

impl Token {
    pub(crate) fn is(&self, kind: Kind, text: &str) -> bool {
        self.kind == kind && self.text == text
    }

    pub(crate) fn is_punct(&self, text: &str) -> bool {
        self.is(Kind::Punct, text)
    }

    pub(crate) fn is_ident(&self, text: &str) -> bool {
        self.is(Kind::Ident, text)
    }
}

/// A place in the source, for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Loc {
    pub(crate) file: usize,
    pub(crate) line: u32,
}

/// An error with its place.
#[derive(Debug)]
pub(crate) struct ScanError {
    pub(crate) file: String,
    pub(crate) line: u32,
    pub(crate) msg: String,
}

impl fmt::Display for ScanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: error: {}", self.file, self.line, self.msg)
    }
}

/// The tokens of a preprocessed file and the files its line markers name
/// (index 0: the input's own name, until a marker names a file).
pub(crate) struct Lexed {
    pub(crate) files: Vec<String>,
    /// The file the first line marker names (the main file, in `cc -E`
    /// output), else 0.
    pub(crate) main: usize,
    pub(crate) tokens: Vec<Token>,
}

pub(crate) struct Lexer<'a> {
    pub(crate) src: &'a [u8],
    pub(crate) pos: usize,
    pub(crate) line: u32,
    pub(crate) file: usize,
    pub(crate) files: Vec<String>,
    pub(crate) main: Option<usize>,
    pub(crate) at_line_start: bool,
    pub(crate) tokens: Vec<Token>,
}

pub(crate) fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b == b'$' || b >= 0x80
}

pub(crate) fn is_ident_char(b: u8) -> bool {
    is_ident_start(b) || b.is_ascii_digit()
}

impl<'a> Lexer<'a> {
    pub(crate) fn peek(&self, ahead: usize) -> Option<u8> {
        self.src.get(self.pos + ahead).copied()
    }

    pub(crate) fn error(&self, line: u32, msg: impl Into<String>) -> ScanError {
        ScanError {
            file: self.files[self.file].clone(),
            line,
            msg: msg.into(),
        }
    }

    pub(crate) fn push(&mut self, kind: Kind, start: usize, line: u32) {
        let text = String::from_utf8_lossy(&self.src[start..self.pos]).into_owned();
        self.tokens.push(Token {
            kind,
            text,
            file: self.file,
            line,
        });
    }

    pub(crate) fn intern(&mut self, name: String) -> usize {
        match self.files.iter().position(|f| *f == name) {
            Some(i) => i,
            None => {
                self.files.push(name);
                self.files.len() - 1
            }
        }
    }

    /// Skips to the end of the line (not past its newline), through
    /// backslash-newlines.
    pub(crate) fn skip_line(&mut self) {
        while let Some(b) = self.peek(0) {
            match b {
                b'\n' => return,
                b'\\' if self.peek(1) == Some(b'\n') => {
                    self.pos += 2;
                    self.line = self.line.wrapping_add(1);
                }
                _ => self.pos += 1,
            }
        }
    }

    pub(crate) fn skip_blanks(&mut self) {
        while matches!(self.peek(0), Some(b' ' | b'\t' | b'\r' | 0x0b | 0x0c)) {
            self.pos += 1;
        }
    }

    /// A directive (the `#` at the start of a line is next): a line marker
    /// sets the place of the next line; any other is skipped.
    pub(crate) fn directive(&mut self) -> Result<(), ScanError> {
        self.pos += 1;
        self.skip_blanks();
        if self.src[self.pos..].starts_with(b"line") && !self.peek(4).is_some_and(is_ident_char) {
            self.pos += 4;
            self.skip_blanks();
        }
        let digits = self.src[self.pos..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        if digits == 0 {
            self.skip_line();
            return Ok(());
        }
        let number = std::str::from_utf8(&self.src[self.pos..self.pos + digits])
            .ok()
            .and_then(|s| s.parse::<u32>().ok())
            .ok_or_else(|| self.error(self.line, "a line marker's number is too large"))?;
        self.pos += digits;
        self.skip_blanks();
        if self.peek(0) == Some(b'"') {
            let name = self.marker_name()?;
            self.file = self.intern(name);
            self.main.get_or_insert(self.file);
        }
        self.skip_line();
        // The newline ending the marker moves to the line it names.
        self.line = number.wrapping_sub(1);
        Ok(())
    }

    /// The file name of a line marker (escaped as the preprocessor writes
    /// it: `\\` and `\"`).
    pub(crate) fn marker_name(&mut self) -> Result<String, ScanError> {
        let line = self.line;
        self.pos += 1;
        let mut name = Vec::new();
        loop {
            match self.peek(0) {
                None | Some(b'\n') => {
                    return Err(self.error(line, "a line marker's file name is not terminated"));
                }
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(String::from_utf8_lossy(&name).into_owned());
                }
                Some(b'\\') if self.peek(1).is_some_and(|b| b != b'\n') => {
                    name.push(self.src[self.pos + 1]);
                    self.pos += 2;
                }
                Some(b) => {
                    name.push(b);
                    self.pos += 1;
                }
            }
        }
    }

    /// A quoted literal (the quote is next) ending at the same quote.
    pub(crate) fn quoted(&mut self, quote: u8) -> Result<(), ScanError> {
        let line = self.line;
        self.pos += 1;
        loop {
            match self.peek(0) {
                None | Some(b'\n') => {
                    let what = if quote == b'"' { "string" } else { "character" };
                    return Err(self.error(line, format!("a {what} literal is not terminated")));
                }
                Some(b'\\') => {
                    if self.peek(1) == Some(b'\n') {
                        self.line = self.line.wrapping_add(1);
                    }
                    self.pos += 2;
                }
                Some(b) => {
                    self.pos += 1;
                    if b == quote {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// A C++ raw string (`R"delim(…)delim"`; the `"` is next).
    pub(crate) fn raw_string(&mut self) -> Result<(), ScanError> {
        let line = self.line;
        let open = self.pos + 1;
        let paren = self.src[open..]
            .iter()
            .position(|b| *b == b'(')
            .map(|p| open + p)
            .ok_or_else(|| self.error(line, "a raw string literal is not terminated"))?;
        let mut end = Vec::with_capacity(paren - open + 2);
        end.push(b')');
        end.extend_from_slice(&self.src[open..paren]);
        end.push(b'"');
        let body = &self.src[paren + 1..];
        let close = body
            .windows(end.len())
            .position(|w| w == end.as_slice())
            .ok_or_else(|| self.error(line, "a raw string literal is not terminated"))?;
        let stop = paren + 1 + close + end.len();
        self.line = self.line.wrapping_add(
            self.src[self.pos..stop]
                .iter()
                .filter(|b| **b == b'\n')
                .count() as u32,
        );
        self.pos = stop;
        Ok(())
    }

    pub(crate) fn number(&mut self) {
        while let Some(b) = self.peek(0) {
            if matches!(b, b'e' | b'E' | b'p' | b'P') && matches!(self.peek(1), Some(b'+' | b'-')) {
                self.pos += 2;
            } else if b == b'\'' && self.peek(1).is_some_and(|c| c.is_ascii_alphanumeric()) {
                // A digit separator (C23, C++14).
                self.pos += 2;
            } else if is_ident_char(b) || b == b'.' {
                self.pos += 1;
            } else {
                break;
            }
        }
    }

    pub(crate) fn run(mut self) -> Result<Lexed, ScanError> {
        while let Some(b) = self.peek(0) {
            let start = self.pos;
            let line = self.line;
            match b {
                b'\n' => {
                    self.pos += 1;
                    self.line = self.line.wrapping_add(1);
                    self.at_line_start = true;
                    continue;
                }
                b' ' | b'\t' | b'\r' | 0x0b | 0x0c => {
                    self.pos += 1;
                    continue;
                }
                b'\\' if self.peek(1) == Some(b'\n') => {
                    self.pos += 2;
                    self.line = self.line.wrapping_add(1);
                    continue;
                }
                b'#' if self.at_line_start => {
                    self.directive()?;
                    continue;
                }
                _ => {}
            }
            self.at_line_start = false;
            match b {
                b'/' if self.peek(1) == Some(b'/') => self.skip_line(),
                b'/' if self.peek(1) == Some(b'*') => {
                    let body = &self.src[self.pos + 2..];
                    let close = body
                        .windows(2)
                        .position(|w| w == b"*/")
                        .ok_or_else(|| self.error(line, "a comment is not terminated"))?;
                    self.line = self
                        .line
                        .wrapping_add(body[..close].iter().filter(|b| **b == b'\n').count() as u32);
                    self.pos += 2 + close + 2;
                }
                b'"' => {
                    self.quoted(b'"')?;
                    self.push(Kind::Str, start, line);
                }
                b'\'' => {
                    self.quoted(b'\'')?;
                    self.push(Kind::Char, start, line);
                }
                b'.' if self.peek(1).is_some_and(|c| c.is_ascii_digit()) => {
                    self.number();
                    self.push(Kind::Number, start, line);
                }
                b'.' if self.peek(1) == Some(b'.') && self.peek(2) == Some(b'.') => {
                    self.pos += 3;
                    self.push(Kind::Punct, start, line);
                }
                b if b.is_ascii_digit() => {
                    self.number();
                    self.push(Kind::Number, start, line);
                }
                b if is_ident_start(b) => {
                    while self.peek(0).is_some_and(is_ident_char) {
                        self.pos += 1;
                    }
                    let word = &self.src[start..self.pos];
                    match (word, self.peek(0)) {
                        (b"L" | b"u" | b"U" | b"u8", Some(q @ (b'"' | b'\''))) => {
                            self.quoted(q)?;
                            let kind = if q == b'"' { Kind::Str } else { Kind::Char };
                            self.push(kind, start, line);
                        }
                        (b"R" | b"LR" | b"uR" | b"UR" | b"u8R", Some(b'"')) => {
                            self.raw_string()?;
                            self.push(Kind::Str, start, line);
                        }
                        _ => self.push(Kind::Ident, start, line),
                    }
                }
                _ => {
                    // One byte (a UTF-8 sequence's bytes are identifier
                    // bytes above).
                    self.pos += 1;
                    self.push(Kind::Punct, start, line);
                }
            }
        }
        Ok(Lexed {
            files: self.files,
            main: self.main.unwrap_or(0),
            tokens: self.tokens,
        })
    }
}

/// The tokens of `src`, a preprocessed file read from `input` (its name
/// until a line marker names another).
pub(crate) fn lex(src: &[u8], input: &str) -> Result<Lexed, ScanError> {
    Lexer {
        src,
        pos: 0,
        line: 1,
        file: 0,
        files: vec![input.to_owned()],
        main: None,
        at_line_start: true,
        tokens: Vec::new(),
    }
    .run()
}
