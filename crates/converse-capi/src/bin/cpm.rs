//! `cpm`: the CPM scanner (Converse parameter marshalling, the Converse
//! Extensions manual's chapter 6), Charm++'s `conv-cpm` for converse-rs.
//!
//! ```text
//! cpm INPUT [OUTPUT]
//! ```
//!
//! INPUT is a C file *after the preprocessor* (`cc -E`: `convcc -gen-cpm
//! F.c` makes it and runs this), so `CpmInvokable` is still the word the
//! program wrote (a `typedef void`) and `CpmDeclareSimple(T)` has become
//! `typedef CpmDeclareSimple1 CpmType_T` (`conv-cpm.h`). The scanner writes
//! OUTPUT (`F.cpm.h`; standard output without it, or for `-`) with, for
//! each function `f` declared `CpmInvokable` at file scope, in source order:
//!
//! - the prototype of `f` and `CpmIndex_f`, a per-PE `int` (`Cpv`) holding
//!   the handler index of its receive stub, which the program may read;
//! - `struct CpmSt_f`, the message: `struct CpmHeader`, then the simple
//!   arguments by value and the offsets of the others;
//! - `CpmRecv_f`, the receive stub: it unpacks the arguments, calls `f`,
//!   calls `CpmPtrFree_T` on each pointer argument and frees the message;
//! - the launcher `void *Cpm_f(CpmDestination, args…)`: it sizes and fills
//!   the message (an envelope of the destination's size, 16-aligned, after
//!   the arguments' struct; arrays and pointer data after that), sets the
//!   handler to the stub, and returns what the destination's send function
//!   returns.
//!
//! and then `static void CpmInitializeThisModule(void)`, which registers the
//! stubs in source order (once per PE), written even when the file has no
//! invokable.
//!
//! # What it reads
//!
//! Tokens, with the file and line of each from the preprocessor's line
//! markers (`# 12 "file.c" 1`, `#line 12 "file.c"`); other directives are
//! skipped, and so are comments (gone after `cc -E`, but `-C` keeps them).
//! At file scope (outside braces, which are skipped by counting, except an
//! `extern "C" { … }` block; outside parentheses) it recognises:
//!
//! - `CpmDeclareSimple1 CpmType_T` and `CpmDeclarePointer1 CpmType_T` (the
//!   expanded declarations), and the unexpanded `CpmDeclareSimple(T)`,
//!   `CpmDeclarePointer(T)` (a file whose only include of `conv-cpm.h` is
//!   its own, still empty, `.cpm.h`);
//! - `CpmInvokable [static|extern|inline|__attribute__((…))…] NAME ( ARGS )`,
//!   `static` or `extern` also allowed before `CpmInvokable`. A `static` invokable gets
//!   a `static` prototype and launcher. `CpmInvokable` followed by anything
//!   else (`;`, `(*fp)(int)`, or after `typedef`) is the plain type `void`.
//!   The same function declared twice (a prototype, then the definition)
//!   is generated once; declared twice differently, it is an error.
//!
//! An argument is `T name` or `T *name` (the name may be left out in a
//! prototype), `T` one word: `char short int long float double CpmDim`
//! (simple) and `CpmStr` (pointer) are built in, any other must be declared
//! before the function. `T *` is an array whose length is the argument
//! before it, which must be a `CpmDim`. `()` and `(void)` take nothing.
//!
//! Anything it cannot marshal faithfully is an error naming the file and
//! line (from the line markers): an unknown type, an array without its
//! `CpmDim`, a multi-word type, `**`, `[]`, `...`. Errors go to standard
//! error as `FILE:LINE: error: …`, the exit code is 1 and OUTPUT is not
//! written.
//!
//! # The hooks (Charm++'s conventions)
//!
//! `CpmPack_T(v)` / `CpmUnpack_T(v)` get an lvalue of type `T` (by value:
//! macros may convert it in place; the manual's `&v` is not what existing
//! code defines), `CpmPtrSize_T(v)`, `CpmPtrPack_T(p, v)` with `p` the
//! space in the message cast to `T`, `CpmPtrUnpack_T(p)` as a statement
//! (the function receives `p`, the data in the message) and
//! `CpmPtrFree_T(v)` after the call. Hooks defined as `(0)` (as Charm++'s
//! own examples do) are accepted: the generated code ignores
//! `-Wunused-value`.
use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::process::ExitCode;

/// A token's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Ident,
    Number,
    Str,
    Char,
    Punct,
}

/// A token and where it is (after the line markers).
#[derive(Clone, Debug)]
struct Token {
    kind: Kind,
    text: String,
    file: usize,
    line: u32,
}

impl Token {
    fn is(&self, kind: Kind, text: &str) -> bool {
        self.kind == kind && self.text == text
    }

    fn is_punct(&self, text: &str) -> bool {
        self.is(Kind::Punct, text)
    }

    fn is_ident(&self, text: &str) -> bool {
        self.is(Kind::Ident, text)
    }
}

/// A place in the source, for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Loc {
    file: usize,
    line: u32,
}

/// An error with its place.
#[derive(Debug)]
struct ScanError {
    file: String,
    line: u32,
    msg: String,
}

impl fmt::Display for ScanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: error: {}", self.file, self.line, self.msg)
    }
}

/// The tokens of a preprocessed file and the files its line markers name
/// (index 0: the input's own name, until a marker names a file).
struct Lexed {
    files: Vec<String>,
    /// The file the first line marker names (the main file, in `cc -E`
    /// output), else 0.
    main: usize,
    tokens: Vec<Token>,
}

struct Lexer<'a> {
    src: &'a [u8],
    pos: usize,
    line: u32,
    file: usize,
    files: Vec<String>,
    main: Option<usize>,
    at_line_start: bool,
    tokens: Vec<Token>,
}

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b == b'$' || b >= 0x80
}

fn is_ident_char(b: u8) -> bool {
    is_ident_start(b) || b.is_ascii_digit()
}

impl<'a> Lexer<'a> {
    fn peek(&self, ahead: usize) -> Option<u8> {
        self.src.get(self.pos + ahead).copied()
    }

    fn error(&self, line: u32, msg: impl Into<String>) -> ScanError {
        ScanError {
            file: self.files[self.file].clone(),
            line,
            msg: msg.into(),
        }
    }

    fn push(&mut self, kind: Kind, start: usize, line: u32) {
        let text = String::from_utf8_lossy(&self.src[start..self.pos]).into_owned();
        self.tokens.push(Token {
            kind,
            text,
            file: self.file,
            line,
        });
    }

    fn intern(&mut self, name: String) -> usize {
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
    fn skip_line(&mut self) {
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

    fn skip_blanks(&mut self) {
        while matches!(self.peek(0), Some(b' ' | b'\t' | b'\r' | 0x0b | 0x0c)) {
            self.pos += 1;
        }
    }

    /// A directive (the `#` at the start of a line is next): a line marker
    /// sets the place of the next line; any other is skipped.
    fn directive(&mut self) -> Result<(), ScanError> {
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
    fn marker_name(&mut self) -> Result<String, ScanError> {
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
    fn quoted(&mut self, quote: u8) -> Result<(), ScanError> {
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
    fn raw_string(&mut self) -> Result<(), ScanError> {
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

    fn number(&mut self) {
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

    fn run(mut self) -> Result<Lexed, ScanError> {
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
fn lex(src: &[u8], input: &str) -> Result<Lexed, ScanError> {
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

// ---- the parser -----------------------------------------------------------

/// How a type travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TypeKind {
    /// Copied by value (`CpmPack_T`, `CpmUnpack_T`).
    Simple,
    /// Its data copied (`CpmPtrSize_T`, `CpmPtrPack_T`, …).
    Pointer,
}

/// One argument of an invokable.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Arg {
    ty: String,
    kind: TypeKind,
    /// `T *name`: an array of the previous argument's length.
    array: bool,
}

/// A `CpmInvokable` function.
#[derive(Clone, Debug)]
struct Invokable {
    name: String,
    is_static: bool,
    args: Vec<Arg>,
    loc: Loc,
}

/// What a file declares: its types and invokables, in source order.
struct Module {
    files: Vec<String>,
    /// The source file (see [`Lexed::main`]).
    main: usize,
    invokables: Vec<Invokable>,
}

const BUILT_IN: &[(&str, TypeKind)] = &[
    ("char", TypeKind::Simple),
    ("short", TypeKind::Simple),
    ("int", TypeKind::Simple),
    ("long", TypeKind::Simple),
    ("float", TypeKind::Simple),
    ("double", TypeKind::Simple),
    ("CpmDim", TypeKind::Simple),
    ("CpmStr", TypeKind::Pointer),
];

/// Words that make a declaration's type several words long.
const MULTI_WORD: &[&str] = &[
    "struct", "union", "enum", "const", "volatile", "unsigned", "signed", "restrict",
];

struct Parser<'a> {
    toks: &'a [Token],
    files: &'a [String],
    pos: usize,
    types: HashMap<String, (TypeKind, Option<Loc>)>,
    invokables: Vec<Invokable>,
}

impl<'a> Parser<'a> {
    fn loc(&self, t: &Token) -> Loc {
        Loc {
            file: t.file,
            line: t.line,
        }
    }

    fn error(&self, loc: Loc, msg: impl Into<String>) -> ScanError {
        ScanError {
            file: self.files[loc.file].clone(),
            line: loc.line,
            msg: msg.into(),
        }
    }

    fn at(&self, i: usize) -> Option<&'a Token> {
        self.toks.get(i)
    }

    fn place(&self, loc: Loc) -> String {
        format!("{}:{}", self.files[loc.file], loc.line)
    }

    fn declare(&mut self, name: &Token, kind: TypeKind) -> Result<(), ScanError> {
        let loc = self.loc(name);
        let ty = name.text.clone();
        match self.types.get(&ty) {
            Some((k, _)) if *k == kind => Ok(()),
            Some((_, first)) => {
                let (was, now) = match kind {
                    TypeKind::Simple => ("CpmDeclarePointer", "CpmDeclareSimple"),
                    TypeKind::Pointer => ("CpmDeclareSimple", "CpmDeclarePointer"),
                };
                let before = match first {
                    Some(l) => format!(" at {}", self.place(*l)),
                    None => " (built in)".into(),
                };
                Err(self.error(
                    loc,
                    format!("{now}({ty}): `{ty}` was declared with {was}{before}"),
                ))
            }
            None => {
                self.types.insert(ty, (kind, Some(loc)));
                Ok(())
            }
        }
    }

    /// Skips the braces opening at `self.pos`, to just after the matching
    /// closing one.
    fn skip_block(&mut self) -> Result<(), ScanError> {
        let open = &self.toks[self.pos];
        let mut depth = 0usize;
        while let Some(t) = self.at(self.pos) {
            self.pos += 1;
            if t.is_punct("{") {
                depth += 1;
            } else if t.is_punct("}") {
                depth -= 1;
                if depth == 0 {
                    return Ok(());
                }
            }
        }
        Err(self.error(self.loc(open), "this `{` is never closed"))
    }

    fn run(mut self) -> Result<Vec<Invokable>, ScanError> {
        let mut parens = 0usize;
        let mut decl_start = 0usize;
        let mut transparent = 0usize;
        while let Some(t) = self.at(self.pos) {
            match (t.kind, t.text.as_str()) {
                (Kind::Punct, "{") => {
                    let linkage = parens == 0
                        && self.pos >= 2
                        && self.toks[self.pos - 1].kind == Kind::Str
                        && self.toks[self.pos - 2].is_ident("extern");
                    if linkage {
                        transparent += 1;
                        self.pos += 1;
                    } else {
                        self.skip_block()?;
                    }
                    decl_start = self.pos;
                    continue;
                }
                (Kind::Punct, "}") => {
                    transparent = transparent.saturating_sub(1);
                    decl_start = self.pos + 1;
                }
                (Kind::Punct, "(") => parens += 1,
                (Kind::Punct, ")") => parens = parens.saturating_sub(1),
                (Kind::Punct, ";") if parens == 0 => decl_start = self.pos + 1,
                (Kind::Ident, word) if parens == 0 => match word {
                    "CpmDeclareSimple1" | "CpmDeclarePointer1" => {
                        let kind = if word == "CpmDeclareSimple1" {
                            TypeKind::Simple
                        } else {
                            TypeKind::Pointer
                        };
                        if let Some(next) = self.at(self.pos + 1)
                            && next.kind == Kind::Ident
                            && let Some(ty) = next.text.strip_prefix("CpmType_")
                        {
                            let name = Token {
                                text: ty.to_owned(),
                                ..next.clone()
                            };
                            self.declare(&name, kind)?;
                            self.pos += 2;
                            continue;
                        }
                    }
                    "CpmDeclareSimple" | "CpmDeclarePointer" => {
                        let kind = if word == "CpmDeclareSimple" {
                            TypeKind::Simple
                        } else {
                            TypeKind::Pointer
                        };
                        let call = (
                            self.at(self.pos + 1),
                            self.at(self.pos + 2),
                            self.at(self.pos + 3),
                        );
                        if let (Some(open), Some(name), Some(close)) = call
                            && open.is_punct("(")
                            && name.kind == Kind::Ident
                            && close.is_punct(")")
                        {
                            self.declare(name, kind)?;
                            self.pos += 4;
                            continue;
                        }
                    }
                    "CpmInvokable" if self.invokable(decl_start)? => continue,
                    _ => {}
                },
                _ => {}
            }
            self.pos += 1;
        }
        Ok(self.invokables)
    }

    /// At `CpmInvokable` (its declaration began at `decl_start`): parses an
    /// invokable's declaration up to its `)` and returns true, or returns
    /// false if this `CpmInvokable` is the plain type.
    fn invokable(&mut self, decl_start: usize) -> Result<bool, ScanError> {
        let at = &self.toks[self.pos];
        let loc = self.loc(at);
        let prefix = &self.toks[decl_start..self.pos];
        if prefix.iter().any(|t| t.is_ident("typedef")) {
            return Ok(false);
        }
        let mut is_static = prefix.iter().any(|t| t.is_ident("static"));
        let mut i = self.pos + 1;
        while let Some(t) = self.at(i) {
            match t.text.as_str() {
                "static" if t.kind == Kind::Ident => is_static = true,
                "extern" | "inline" | "__inline" | "__inline__" | "__extension__"
                    if t.kind == Kind::Ident => {}
                "__attribute__" | "__attribute" | "__declspec"
                    if t.kind == Kind::Ident && self.at(i + 1).is_some_and(|p| p.is_punct("(")) =>
                {
                    // Past its parenthesised arguments.
                    let mut depth = 0usize;
                    i += 1;
                    while let Some(p) = self.at(i) {
                        if p.is_punct("(") {
                            depth += 1;
                        } else if p.is_punct(")") {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        i += 1;
                    }
                }
                _ => break,
            }
            i += 1;
        }
        let (Some(name), Some(open)) = (self.at(i), self.at(i + 1)) else {
            return Ok(false);
        };
        if name.kind != Kind::Ident || !open.is_punct("(") {
            return Ok(false);
        }
        let fname = name.text.clone();
        self.pos = i + 2;
        let args = self.arguments(&fname)?;
        let inv = Invokable {
            name: fname,
            is_static,
            args,
            loc,
        };
        match self.invokables.iter().find(|f| f.name == inv.name) {
            Some(first) if first.args == inv.args && first.is_static == inv.is_static => {}
            Some(first) => {
                return Err(self.error(
                    loc,
                    format!(
                        "CpmInvokable {} is declared differently at {}",
                        inv.name,
                        self.place(first.loc)
                    ),
                ));
            }
            None => self.invokables.push(inv),
        }
        Ok(true)
    }

    /// The arguments after `(`, through the `)`.
    fn arguments(&mut self, fname: &str) -> Result<Vec<Arg>, ScanError> {
        let mut args: Vec<Arg> = Vec::new();
        let next = |p: &Self, i: usize| -> Result<&'a Token, ScanError> {
            p.at(i).ok_or_else(|| {
                let last = p.toks.last().expect("a token was read");
                p.error(
                    p.loc(last),
                    format!("CpmInvokable {fname}: the argument list is not closed"),
                )
            })
        };
        let first = next(self, self.pos)?;
        if first.is_punct(")") {
            self.pos += 1;
            return Ok(args);
        }
        if first.is_ident("void") && next(self, self.pos + 1)?.is_punct(")") {
            self.pos += 2;
            return Ok(args);
        }
        loop {
            let n = args.len() + 1;
            let ty = next(self, self.pos)?;
            let ty_loc = self.loc(ty);
            if ty.is_punct("...") {
                return Err(self.error(
                    ty_loc,
                    format!("CpmInvokable {fname}: a variable argument list cannot be marshalled"),
                ));
            }
            if ty.kind != Kind::Ident {
                return Err(self.error(
                    ty_loc,
                    format!(
                        "CpmInvokable {fname}: argument {n}: a type expected, found `{}`",
                        ty.text
                    ),
                ));
            }
            if MULTI_WORD.contains(&ty.text.as_str()) && !self.types.contains_key(&ty.text) {
                return Err(self.error(
                    ty_loc,
                    format!(
                        "CpmInvokable {fname}: argument {n}: `{}`: CPM takes one-word types (typedef the type and declare it with CpmDeclareSimple or CpmDeclarePointer)",
                        ty.text
                    ),
                ));
            }
            self.pos += 1;
            let mut array = false;
            if next(self, self.pos)?.is_punct("*") {
                array = true;
                self.pos += 1;
                if next(self, self.pos)?.is_punct("*") {
                    return Err(self.error(
                        ty_loc,
                        format!(
                            "CpmInvokable {fname}: argument {n}: `{} **`: CPM takes `T` and `T *` (typedef the pointer type and declare it with CpmDeclarePointer)",
                            ty.text
                        ),
                    ));
                }
            }
            if next(self, self.pos)?.kind == Kind::Ident {
                self.pos += 1;
            }
            let after = next(self, self.pos)?;
            if after.is_punct("[") {
                return Err(self.error(
                    self.loc(after),
                    format!(
                        "CpmInvokable {fname}: argument {n}: an array is written `CpmDim n, T *a`"
                    ),
                ));
            }
            if !after.is_punct(",") && !after.is_punct(")") {
                return Err(self.error(
                    self.loc(after),
                    format!(
                        "CpmInvokable {fname}: argument {n}: `,` or `)` expected, found `{}` (CPM takes `T name` and `T *name`, T one word)",
                        after.text
                    ),
                ));
            }
            let kind = match self.types.get(&ty.text) {
                Some((k, _)) => *k,
                None => {
                    return Err(self.error(
                        ty_loc,
                        format!(
                            "CpmInvokable {fname}: argument {n} has unknown type `{t}` (declare it with CpmDeclareSimple({t}) or CpmDeclarePointer({t}) before the function)",
                            t = ty.text
                        ),
                    ));
                }
            };
            if array
                && !args
                    .last()
                    .is_some_and(|prev| prev.ty == "CpmDim" && !prev.array)
            {
                return Err(self.error(
                    ty_loc,
                    format!(
                        "CpmInvokable {fname}: argument {n} (`{} *`) is an array: the argument before it must be its length, a CpmDim",
                        ty.text
                    ),
                ));
            }
            args.push(Arg {
                ty: ty.text.clone(),
                kind,
                array,
            });
            self.pos += 1;
            if after.is_punct(")") {
                return Ok(args);
            }
        }
    }
}

/// Scans the preprocessed text `src` read from `input`.
fn scan(src: &[u8], input: &str) -> Result<Module, ScanError> {
    let lexed = lex(src, input)?;
    let mut types = HashMap::new();
    for (name, kind) in BUILT_IN {
        types.insert((*name).to_owned(), (*kind, None));
    }
    let invokables = Parser {
        toks: &lexed.tokens,
        files: &lexed.files,
        pos: 0,
        types,
        invokables: Vec::new(),
    }
    .run()?;
    Ok(Module {
        files: lexed.files,
        main: lexed.main,
        invokables,
    })
}

// ---- the generator --------------------------------------------------------

fn generate(m: &Module) -> String {
    let mut out = String::new();
    let source = &m.files[m.main];
    let _ = write!(
        out,
        "/* Generated by cpm, the CPM scanner of converse-rs, from {source}: do not edit.\n\
         \x20* Include it once, in that file, after the types its invokables take and\n\
         \x20* their pack hooks; call CpmInitializeThisModule() on every PE. */\n\
         #include \"conv-cpm.h\"\n\
         \n\
         /* Pack hooks defined as `(0)` are fine here. */\n\
         #if defined(__GNUC__) || defined(__clang__)\n\
         #pragma GCC diagnostic push\n\
         #pragma GCC diagnostic ignored \"-Wunused-value\"\n\
         #endif\n"
    );
    for f in &m.invokables {
        let place = format!("{}:{}", m.files[f.loc.file], f.loc.line);
        invokable(&mut out, f, &place);
    }
    out.push_str(
        "\n/* Registers this file's receive stubs, in source order (once per PE). */\n\
         CpvStaticDeclare(int, CpmThisModuleDone_);\n\
         static CPM_UNUSED_ void CpmInitializeThisModule(void) {\n\
         \x20 CpvInitialize(int, CpmThisModuleDone_);\n\
         \x20 if (CpvAccess(CpmThisModuleDone_)) return;\n\
         \x20 CpvAccess(CpmThisModuleDone_) = 1;\n",
    );
    for f in &m.invokables {
        let n = &f.name;
        let _ = writeln!(out, "  CpvInitialize(int, CpmIndex_{n});");
        let _ = writeln!(
            out,
            "  CpvAccess(CpmIndex_{n}) = CmiRegisterHandler(CpmRecv_{n});"
        );
    }
    out.push_str(
        "}\n\n\
         #if defined(__GNUC__) || defined(__clang__)\n\
         #pragma GCC diagnostic pop\n\
         #endif\n",
    );
    out
}

/// The C type of argument `a` as the function takes it.
fn c_type(a: &Arg) -> String {
    if a.array {
        format!("{} *", a.ty)
    } else {
        format!("{} ", a.ty)
    }
}

fn invokable(out: &mut String, f: &Invokable, place: &str) {
    let n = &f.name;
    let storage = if f.is_static { "static " } else { "" };
    let any_array = f.args.iter().any(|a| a.array);
    let ptr_array = f
        .args
        .iter()
        .any(|a| a.array && a.kind == TypeKind::Pointer);
    let any_offset = f
        .args
        .iter()
        .any(|a| a.array || a.kind == TypeKind::Pointer);
    let protos: Vec<String> = f
        .args
        .iter()
        .map(|a| c_type(a).trim_end().to_owned())
        .collect();
    let params: Vec<String> = f
        .args
        .iter()
        .enumerate()
        .map(|(i, a)| format!("{}CpmA{i}", c_type(a)))
        .collect();
    let call: Vec<String> = (0..f.args.len()).map(|i| format!("CpmA{i}")).collect();

    // The prototype, the index, the message.
    let _ = writeln!(out, "\n/* ---- {n} ({place}) ---- */");
    let proto = if protos.is_empty() {
        "void".to_owned()
    } else {
        protos.join(", ")
    };
    let _ = writeln!(out, "{storage}void {n}({proto});");
    let _ = writeln!(out, "CpvStaticDeclare(int, CpmIndex_{n});");
    let _ = writeln!(out, "struct CpmSt_{n} {{\n  struct CpmHeader CpmH;");
    for (i, a) in f.args.iter().enumerate() {
        match (a.kind, a.array) {
            (TypeKind::Simple, false) => {
                let _ = writeln!(out, "  {} CpmA{i};", a.ty);
            }
            (TypeKind::Pointer, true) => {
                let _ = writeln!(out, "  int CpmA{i}; /* the offsets' table */");
                let _ = writeln!(out, "  int CpmT{i}; /* the pointers */");
            }
            _ => {
                let _ = writeln!(out, "  int CpmA{i}; /* where the data is */");
            }
        }
    }
    out.push_str("};\n");

    // The receive stub.
    let _ = writeln!(out, "static void CpmRecv_{n}(void *CpmM) {{");
    if any_offset {
        out.push_str("  char *CpmX = (char *)CpmM;\n");
    }
    if !f.args.is_empty() {
        let _ = writeln!(out, "  struct CpmSt_{n} *CpmS = (struct CpmSt_{n} *)CpmM;");
    }
    for (i, a) in f.args.iter().enumerate() {
        let _ = writeln!(out, "  {}CpmA{i};", c_type(a));
    }
    if any_array {
        out.push_str("  size_t CpmI;\n");
    }
    if ptr_array {
        out.push_str("  size_t *CpmTab;\n");
    }
    for (i, a) in f.args.iter().enumerate() {
        let t = &a.ty;
        match (a.kind, a.array) {
            (TypeKind::Simple, false) => {
                let _ = writeln!(out, "  CpmA{i} = CpmS->CpmA{i};");
                let _ = writeln!(out, "  CpmUnpack_{t}(CpmA{i});");
            }
            (TypeKind::Simple, true) => {
                let _ = writeln!(out, "  CpmA{i} = ({t} *)(void *)(CpmX + CpmS->CpmA{i});");
                let _ = writeln!(
                    out,
                    "  for (CpmI = 0; CpmI < (size_t)CpmA{}; CpmI++) CpmUnpack_{t}(CpmA{i}[CpmI]);",
                    i - 1
                );
            }
            (TypeKind::Pointer, false) => {
                let _ = writeln!(out, "  CpmA{i} = ({t})(void *)(CpmX + CpmS->CpmA{i});");
                let _ = writeln!(out, "  CpmPtrUnpack_{t}(CpmA{i});");
            }
            (TypeKind::Pointer, true) => {
                let _ = writeln!(out, "  CpmA{i} = ({t} *)(void *)(CpmX + CpmS->CpmT{i});");
                let _ = writeln!(out, "  CpmTab = (size_t *)(void *)(CpmX + CpmS->CpmA{i});");
                let _ = writeln!(
                    out,
                    "  for (CpmI = 0; CpmI < (size_t)CpmA{}; CpmI++) {{",
                    i - 1
                );
                let _ = writeln!(
                    out,
                    "    CpmA{i}[CpmI] = ({t})(void *)(CpmX + CpmTab[CpmI]);"
                );
                let _ = writeln!(out, "    CpmPtrUnpack_{t}(CpmA{i}[CpmI]);\n  }}");
            }
        }
    }
    let _ = writeln!(out, "  {n}({});", call.join(", "));
    for (i, a) in f.args.iter().enumerate() {
        let t = &a.ty;
        match (a.kind, a.array) {
            (TypeKind::Pointer, false) => {
                let _ = writeln!(out, "  CpmPtrFree_{t}(CpmA{i});");
            }
            (TypeKind::Pointer, true) => {
                let _ = writeln!(
                    out,
                    "  for (CpmI = 0; CpmI < (size_t)CpmA{}; CpmI++) CpmPtrFree_{t}(CpmA{i}[CpmI]);",
                    i - 1
                );
            }
            _ => {}
        }
    }
    out.push_str("  CmiFree(CpmM);\n}\n");

    // The launcher.
    let head = format!(
        "void *Cpm_{n}(CpmDestination CpmD{}{})",
        if params.is_empty() { "" } else { ", " },
        params.join(", ")
    );
    let _ = writeln!(out, "{storage}{head};");
    let unused = if f.is_static { "CPM_UNUSED_ " } else { "" };
    let _ = writeln!(out, "{storage}{unused}{head} {{");
    let _ = writeln!(out, "  const char *CpmF = \"Cpm_{n}\";");
    let _ = writeln!(
        out,
        "  size_t CpmZ = CpmRound_(sizeof(struct CpmSt_{n}));\n  size_t CpmE = CpmZ;"
    );
    for (i, a) in f.args.iter().enumerate() {
        if a.array {
            let _ = writeln!(out, "  size_t CpmN{i};");
        }
        if a.array || a.kind == TypeKind::Pointer {
            let _ = writeln!(out, "  size_t CpmO{i};");
        }
        if a.array && a.kind == TypeKind::Pointer {
            let _ = writeln!(out, "  size_t CpmP{i};");
        }
    }
    let _ = writeln!(out, "  char *CpmX;\n  struct CpmSt_{n} *CpmS;");
    if any_array {
        out.push_str("  size_t CpmI;\n");
    }
    if ptr_array {
        out.push_str("  size_t *CpmTab;\n");
    }
    let _ = writeln!(
        out,
        "  if (!CpvInitialized(CpmIndex_{n})) CpmNotInitialized_(CpmF);"
    );
    out.push_str("  CpmZ = CpmRound_(CpmZ + CpmEnvSize_(CpmD, CpmF));\n");
    // Sizes.
    for (i, a) in f.args.iter().enumerate() {
        let t = &a.ty;
        if a.array {
            let _ = writeln!(
                out,
                "  CpmN{i} = CpmCount_(CpmA{}, CpmF, {});",
                i - 1,
                i + 1
            );
        }
        match (a.kind, a.array) {
            (TypeKind::Simple, false) => {}
            (TypeKind::Simple, true) => {
                let _ = writeln!(
                    out,
                    "  CpmO{i} = CpmZ;\n  CpmZ = CpmRound_(CpmZ + CpmN{i} * sizeof({t}));"
                );
            }
            (TypeKind::Pointer, false) => {
                let _ = writeln!(
                    out,
                    "  CpmO{i} = CpmZ;\n  CpmZ = CpmRound_(CpmZ + (size_t)(CpmPtrSize_{t}(CpmA{i})));"
                );
            }
            (TypeKind::Pointer, true) => {
                let _ = writeln!(
                    out,
                    "  CpmO{i} = CpmZ;\n  CpmZ = CpmRound_(CpmZ + CpmN{i} * sizeof(size_t));\n  \
                     CpmP{i} = CpmZ;\n  CpmZ = CpmRound_(CpmZ + CpmN{i} * sizeof({t}));"
                );
                let _ = writeln!(
                    out,
                    "  for (CpmI = 0; CpmI < CpmN{i}; CpmI++) CpmZ = CpmRound_(CpmZ + (size_t)(CpmPtrSize_{t}(CpmA{i}[CpmI])));"
                );
            }
        }
    }
    let _ = writeln!(
        out,
        "  CpmX = CpmNewMsg_(CpmZ, CpmF);\n  CpmS = (struct CpmSt_{n} *)(void *)CpmX;\n  \
         CpmS->CpmH.envpos = (int)CpmE;"
    );
    // Contents.
    for (i, a) in f.args.iter().enumerate() {
        let t = &a.ty;
        match (a.kind, a.array) {
            (TypeKind::Simple, false) => {
                let _ = writeln!(
                    out,
                    "  CpmS->CpmA{i} = CpmA{i};\n  CpmPack_{t}(CpmS->CpmA{i});"
                );
            }
            (TypeKind::Simple, true) => {
                let _ = writeln!(out, "  CpmS->CpmA{i} = (int)CpmO{i};");
                let _ = writeln!(
                    out,
                    "  if (CpmN{i} > 0) memcpy(CpmX + CpmO{i}, CpmA{i}, CpmN{i} * sizeof({t}));"
                );
                let _ = writeln!(
                    out,
                    "  for (CpmI = 0; CpmI < CpmN{i}; CpmI++) CpmPack_{t}((({t} *)(void *)(CpmX + CpmO{i}))[CpmI]);"
                );
            }
            (TypeKind::Pointer, false) => {
                let _ = writeln!(out, "  CpmS->CpmA{i} = (int)CpmO{i};");
                let _ = writeln!(
                    out,
                    "  CpmPtrPack_{t}((({t})(void *)(CpmX + CpmO{i})), CpmA{i});"
                );
            }
            (TypeKind::Pointer, true) => {
                let _ = writeln!(
                    out,
                    "  CpmS->CpmA{i} = (int)CpmO{i};\n  CpmS->CpmT{i} = (int)CpmP{i};"
                );
                let _ = writeln!(
                    out,
                    "  CpmTab = (size_t *)(void *)(CpmX + CpmO{i});\n  \
                     CpmO{i} = CpmRound_(CpmP{i} + CpmN{i} * sizeof({t}));"
                );
                let _ = writeln!(out, "  for (CpmI = 0; CpmI < CpmN{i}; CpmI++) {{");
                let _ = writeln!(out, "    CpmTab[CpmI] = CpmO{i};");
                let _ = writeln!(
                    out,
                    "    CpmPtrPack_{t}((({t})(void *)(CpmX + CpmO{i})), CpmA{i}[CpmI]);"
                );
                let _ = writeln!(
                    out,
                    "    CpmO{i} = CpmRound_(CpmO{i} + (size_t)(CpmPtrSize_{t}(CpmA{i}[CpmI])));\n  }}"
                );
            }
        }
    }
    let _ = writeln!(
        out,
        "  CmiSetHandler(CpmX, CpvAccess(CpmIndex_{n}));\n  \
         return CpmD->sendfn(CpmD, (int)CpmZ, CpmX);\n}}"
    );
}

// ---- the command ----------------------------------------------------------

fn usage() -> ExitCode {
    eprintln!(
        "usage: cpm INPUT [OUTPUT]   (INPUT: a C file after the preprocessor; OUTPUT: F.cpm.h, `-` or none for standard output)"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (input, output) = match args.as_slice() {
        [i] => (i, None),
        [i, o] => (i, Some(o).filter(|o| *o != "-")),
        _ => return usage(),
    };
    if input.starts_with('-') && input != "-" {
        return usage();
    }
    let src = if input == "-" {
        let mut buf = Vec::new();
        if let Err(e) = std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf) {
            eprintln!("cpm: standard input: {e}");
            return ExitCode::FAILURE;
        }
        buf
    } else {
        match std::fs::read(input) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("cpm: {input}: {e}");
                return ExitCode::FAILURE;
            }
        }
    };
    let name = if input == "-" {
        "<stdin>"
    } else {
        input.as_str()
    };
    let module = match scan(&src, name) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let text = generate(&module);
    match output {
        Some(path) => {
            if let Err(e) = std::fs::write(path, text) {
                eprintln!("cpm: {path}: {e}");
                return ExitCode::FAILURE;
            }
        }
        None => print!("{text}"),
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(src: &str) -> Module {
        scan(src.as_bytes(), "t.i").unwrap_or_else(|e| panic!("{e}"))
    }

    fn error(src: &str) -> String {
        match scan(src.as_bytes(), "t.i") {
            Ok(m) => panic!("no error; found {:?}", m.invokables),
            Err(e) => e.to_string(),
        }
    }

    fn names(m: &Module) -> Vec<&str> {
        m.invokables.iter().map(|f| f.name.as_str()).collect()
    }

    #[test]
    fn line_markers_place_the_errors() {
        let src = "# 1 \"prog.c\"\n# 1 \"/usr/include/stdio.h\" 1 3 4\nint x;\n\
                   # 7 \"prog.c\" 2\n\nCpmInvokable f(int a,\n  widget w) { }\n";
        assert_eq!(
            error(src),
            "prog.c:9: error: CpmInvokable f: argument 2 has unknown type `widget` \
             (declare it with CpmDeclareSimple(widget) or CpmDeclarePointer(widget) before the function)"
        );
        // `#line`, a name with escapes, and no marker at all.
        let src = "#line 40 \"dir\\\\odd \\\"name\\\".c\"\nCpmInvokable f(T x);\n";
        assert!(error(src).starts_with("dir\\odd \"name\".c:40: error:"));
        assert!(error("\n\nCpmInvokable f(T x);").starts_with("t.i:3: error:"));
        // A marker without a file name keeps the file.
        let src = "# 5 \"a.c\"\n# 20\nCpmInvokable f(T x);\n";
        assert!(error(src).starts_with("a.c:20: error:"));
    }

    /// The line counter wraps (modulo 2^32) rather than overflowing: the
    /// markers `cc -E` writes go from `# 0` (GCC's `# 0 "<built-in>"`) to
    /// whatever `#line` a program sets, and every way the scanner counts
    /// lines (newlines, comments, literals, backslash-newlines) goes past
    /// the top.
    #[test]
    fn line_markers_at_the_ends_of_the_counter_neither_panic_nor_misplace() {
        const UNKNOWN: &str = "CpmInvokable f: argument 1 has unknown type `T`";
        // The largest number a marker takes names its line exactly.
        let err = error("# 4294967295 \"x.c\"\nCpmInvokable f(T x);\n");
        assert!(err.starts_with("x.c:4294967295: error: "), "{err}");
        assert!(err.contains(UNKNOWN), "{err}");
        // Past it, by each way the scanner counts a line (a newline, in a
        // comment, in a string, in a raw string, a backslash-newline
        // between tokens and in a directive): the next line is 0, as
        // 4294967295 + 1 modulo 2^32, and the one after 1.
        let marker = "# 4294967295 \"x.c\"\n";
        for (body, line) in [
            ("int a;\nCpmInvokable f(T x);", 0),
            ("int a;\n\nCpmInvokable f(T x);", 1),
            ("/* a\n */ CpmInvokable f(T x);", 0),
            ("const char *s = \"a\\\nb\"; CpmInvokable f(T x);", 0),
            ("const char *s = R\"d(\n)d\"; CpmInvokable f(T x);", 0),
            ("int a; \\\nCpmInvokable f(T x);", 0),
            ("#pragma x \\\n y\nCpmInvokable f(T x);", 1),
        ] {
            let err = error(&format!("{marker}{body}\n"));
            assert!(
                err.starts_with(&format!("x.c:{line}: error: ")),
                "{body:?}: {err}"
            );
            assert!(err.contains(UNKNOWN), "{err}");
        }
        // `# 0` names line 0 (the counter goes below 0 and back).
        let err = error("# 0 \"<built-in>\"\n# 0 \"y.c\"\nCpmInvokable f(T x);\n");
        assert!(err.starts_with("y.c:0: error: "), "{err}");
        // The places the generated code names, either side of the wrap.
        let out = generate(&module(
            "# 4294967295 \"big.c\"\nCpmInvokable f(void);\n\nCpmInvokable g(void);\n",
        ));
        assert!(
            out.contains("/* ---- f (big.c:4294967295) ---- */"),
            "{out}"
        );
        assert!(out.contains("/* ---- g (big.c:1) ---- */"), "{out}");
        // A number no line can have is refused in the scanner's words,
        // naming the place of the marker (file and line before it).
        for number in [
            "4294967296",
            "18446744073709551615",
            "99999999999999999999999",
        ] {
            let err = error(&format!(
                "int a;\n# {number} \"z.c\"\nCpmInvokable f(T x);\n"
            ));
            assert_eq!(err, "t.i:2: error: a line marker's number is too large");
            let err = error(&format!(
                "# 7 \"w.c\"\n#line {number}\nCpmInvokable f(T x);\n"
            ));
            assert_eq!(err, "w.c:7: error: a line marker's number is too large");
        }
    }

    #[test]
    fn braces_in_strings_chars_and_comments_do_not_count() {
        let src = r#"
void g(void) { const char *s = "}}{"; char c = '}'; char d = '\''; /* } */ // }
  if (1) { puts("{"); }
}
CpmInvokable f(int n) { char k = '{'; }
char *t = "a \" } still a string";
CpmInvokable h(double d);
static const char *r = R"x(})" ")x";
CpmInvokable k(void);
"#;
        assert_eq!(names(&module(src)), ["f", "h", "k"]);
    }

    #[test]
    fn invokables_inside_bodies_and_parentheses_are_not_seen() {
        let src = "void outer(void) { CpmInvokable inner(int x); }\n\
                   void reg(CpmInvokable g(int));\n\
                   CpmInvokable top(int x) { }\n";
        assert_eq!(names(&module(src)), ["top"]);
    }

    #[test]
    fn function_pointers_and_typedefs_are_plain_declarations() {
        let src = "typedef void CpmInvokable;\n\
                   typedef CpmInvokable handler_t(int);\n\
                   CpmInvokable (*fp)(int, char *);\n\
                   void (*table[4])(void *msg);\n\
                   int install(void (*cb)(int, char *), int (*cmp)(const void *, const void *));\n\
                   struct ops { void (*run)(int); CpmInvokable (*stop)(void); };\n\
                   CpmInvokable real(int x, double y) { }\n";
        let m = module(src);
        assert_eq!(names(&m), ["real"]);
        assert_eq!(m.invokables[0].args.len(), 2);
    }

    #[test]
    fn static_and_extern_qualifiers() {
        let src = "static CpmInvokable a(int x) { }\n\
                   CpmInvokable static b(int x) { }\n\
                   extern CpmInvokable c(int x);\n\
                   CpmInvokable extern d(int x);\n\
                   static inline CpmInvokable e(void) { }\n\
                   int counter; CpmInvokable f(int x) { }\n\
                   CpmInvokable __attribute__((noinline, section(\"x\"))) static g(int x) { }\n";
        let m = module(src);
        let got: Vec<(&str, bool)> = m
            .invokables
            .iter()
            .map(|f| (f.name.as_str(), f.is_static))
            .collect();
        assert_eq!(
            got,
            [
                ("a", true),
                ("b", true),
                ("c", false),
                ("d", false),
                ("e", true),
                ("f", false),
                ("g", true)
            ]
        );
        let out = generate(&m);
        assert!(out.contains("static void a(int);"), "{out}");
        assert!(out.contains("static CPM_UNUSED_ void *Cpm_a(CpmDestination CpmD, int CpmA0) {"));
        assert!(out.contains("\nvoid c(int);"));
        assert!(out.contains("\nvoid *Cpm_c(CpmDestination CpmD, int CpmA0) {"));
        assert!(out.contains("static void e(void);"));
    }

    #[test]
    fn declared_types_expanded_or_not() {
        let src = "typedef int CpmDeclareSimple1;\ntypedef int CpmDeclarePointer1;\n\
                   typedef struct { double x, y; } coordinate;\n\
                   typedef CpmDeclareSimple1 CpmType_coordinate;\n\
                   typedef int *intptr;\n\
                   typedef CpmDeclarePointer1 CpmType_intptr;\n\
                   CpmDeclareSimple(later_t);\n\
                   CpmInvokable f(coordinate c, intptr p, CpmDim n, coordinate *cs, CpmDim m, intptr *ps, later_t l, CpmStr s) { }\n";
        let m = module(src);
        let kinds: Vec<(TypeKind, bool)> = m.invokables[0]
            .args
            .iter()
            .map(|a| (a.kind, a.array))
            .collect();
        use TypeKind::*;
        assert_eq!(
            kinds,
            [
                (Simple, false),
                (Pointer, false),
                (Simple, false),
                (Simple, true),
                (Simple, false),
                (Pointer, true),
                (Simple, false),
                (Pointer, false)
            ]
        );
        // A type used before its declaration is unknown there.
        let err = error("CpmInvokable f(late x);\ntypedef CpmDeclareSimple1 CpmType_late;\n");
        assert!(err.contains("unknown type `late`"), "{err}");
        // Declared both ways.
        let err = error("CpmDeclareSimple(t);\nCpmDeclarePointer(t);\n");
        assert!(
            err.starts_with("t.i:2: error: CpmDeclarePointer(t)"),
            "{err}"
        );
        assert!(err.contains("CpmDeclareSimple at t.i:1"), "{err}");
        assert!(error("CpmDeclarePointer(int);").contains("(built in)"));
    }

    #[test]
    fn arrays_need_their_cpmdim() {
        assert!(error("CpmInvokable f(int *a);").contains("argument 1 (`int *`) is an array"));
        assert!(error("CpmInvokable f(int n, int *a);").contains("must be its length, a CpmDim"));
        assert!(error("CpmInvokable f(CpmDim n, int *a, int *b);").contains("argument 3"));
        assert!(error("CpmInvokable f(CpmDim n, int a[]);").contains("`CpmDim n, T *a`"));
        assert!(error("CpmInvokable f(char **a);").contains("`char **`"));
        let m = module("CpmInvokable f(CpmDim, double *);");
        assert!(m.invokables[0].args[1].array);
    }

    #[test]
    fn what_cannot_be_marshalled_is_refused() {
        assert!(error("CpmInvokable f(int n, ...);").contains("variable argument list"));
        assert!(error("CpmInvokable f(struct s x);").contains("one-word types"));
        assert!(error("CpmInvokable f(unsigned int x);").contains("one-word types"));
        assert!(error("CpmInvokable f(const CpmStr s);").contains("one-word types"));
        assert!(error("CpmInvokable f(int x, 3);").contains("a type expected, found `3`"));
        assert!(error("CpmInvokable f(int x y);").contains("`,` or `)` expected, found `y`"));
        assert!(error("CpmInvokable f(int x").contains("not closed"));
    }

    #[test]
    fn a_prototype_then_the_definition_is_one_invokable() {
        let m = module("CpmInvokable f(int x);\nCpmInvokable f(int y) { }\n");
        assert_eq!(names(&m), ["f"]);
        let err = error("CpmInvokable f(int x);\n\nCpmInvokable f(double y) { }\n");
        assert_eq!(
            err,
            "t.i:3: error: CpmInvokable f is declared differently at t.i:1"
        );
    }

    #[test]
    fn extern_c_blocks_are_looked_into_other_blocks_skipped() {
        let src = "extern \"C\" {\nCpmInvokable a(int x);\nstruct s { int y; };\n}\n\
                   namespace n { CpmInvokable b(int x); }\nCpmInvokable c(int x);\n";
        assert_eq!(names(&module(src)), ["a", "c"]);
    }

    #[test]
    fn tokens_of_every_kind() {
        let lexed = lex(
            b"x1 = 0x1Fu + 1.5e-3 + .5 + 1'000 + L'a' + u8\"s\" - a...b->c;",
            "t",
        )
        .unwrap();
        let got: Vec<(Kind, &str)> = lexed
            .tokens
            .iter()
            .map(|t| (t.kind, t.text.as_str()))
            .collect();
        use Kind::*;
        assert_eq!(
            got,
            [
                (Ident, "x1"),
                (Punct, "="),
                (Number, "0x1Fu"),
                (Punct, "+"),
                (Number, "1.5e-3"),
                (Punct, "+"),
                (Number, ".5"),
                (Punct, "+"),
                (Number, "1'000"),
                (Punct, "+"),
                (Char, "L'a'"),
                (Punct, "+"),
                (Str, "u8\"s\""),
                (Punct, "-"),
                (Ident, "a"),
                (Punct, "..."),
                (Ident, "b"),
                (Punct, "-"),
                (Punct, ">"),
                (Ident, "c"),
                (Punct, ";")
            ]
        );
        assert!(
            lex(b"char *s = \"open;\n", "t")
                .err()
                .unwrap()
                .to_string()
                .contains("t:1: error: a string literal is not terminated")
        );
        assert!(lex(b"/* open", "t").is_err());
    }

    #[test]
    fn directives_other_than_line_markers_are_skipped() {
        let src = "#pragma once\n#pragma weak CpmInvokable \\\n  f(int)\n#ident \"x\"\nCpmInvokable g(int x);\n";
        let m = module(src);
        assert_eq!(names(&m), ["g"]);
        assert_eq!(m.invokables[0].loc.line, 5);
    }

    #[test]
    fn a_file_without_invokables_still_has_its_module_init() {
        let out = generate(&module("# 1 \"plain.c\"\nint main(void) { return 0; }\n"));
        assert!(out.contains("from plain.c: do not edit"), "{out}");
        assert!(out.contains("static CPM_UNUSED_ void CpmInitializeThisModule(void) {"));
        assert!(!out.contains("CmiRegisterHandler"));
    }

    #[test]
    fn the_generated_code_has_every_part_in_source_order() {
        let out = generate(&module(
            "# 3 \"m.c\"\nCpmInvokable second(CpmDim n, CpmStr *v, double d);\nCpmInvokable first(void);\n",
        ));
        let order = [
            "/* ---- second (m.c:3) ---- */",
            "void second(CpmDim, CpmStr *, double);",
            "CpvStaticDeclare(int, CpmIndex_second);",
            "static void CpmRecv_second(void *CpmM) {",
            "  second(CpmA0, CpmA1, CpmA2);",
            "  for (CpmI = 0; CpmI < (size_t)CpmA0; CpmI++) CpmPtrFree_CpmStr(CpmA1[CpmI]);",
            "  CmiFree(CpmM);",
            "void *Cpm_second(CpmDestination CpmD, CpmDim CpmA0, CpmStr *CpmA1, double CpmA2) {",
            "  return CpmD->sendfn(CpmD, (int)CpmZ, CpmX);",
            "void first(void);",
            "void *Cpm_first(CpmDestination CpmD) {",
            "CpvAccess(CpmIndex_second) = CmiRegisterHandler(CpmRecv_second);",
            "CpvAccess(CpmIndex_first) = CmiRegisterHandler(CpmRecv_first);",
        ];
        let mut from = 0;
        for piece in order {
            let at = out[from..]
                .find(piece)
                .unwrap_or_else(|| panic!("`{piece}` missing after byte {from} of:\n{out}"));
            from += at + piece.len();
        }
    }

    /// The generated code compiles without a warning as C and as C++, for
    /// every kind of argument (the integration tests run it).
    #[test]
    fn the_generated_code_compiles_cleanly_as_c_and_cpp() {
        let prelude = "#include \"conv-cpm.h\"\n\
                       typedef struct { double x, y; } coordinate;\n\
                       CpmDeclareSimple(coordinate);\n\
                       #define CpmPack_coordinate(v) (0)\n\
                       #define CpmUnpack_coordinate(v) (0)\n\
                       typedef int *intptr;\n\
                       CpmDeclarePointer(intptr);\n\
                       #define CpmPtrSize_intptr(p) sizeof(int)\n\
                       #define CpmPtrPack_intptr(p, v) (*(p) = *(v))\n\
                       #define CpmPtrUnpack_intptr(p) (0)\n\
                       #define CpmPtrFree_intptr(p) (0)\n";
        let body = "static CpmInvokable all(char c, short s, int i, long l, float f, double d,\n\
                    CpmDim n, double *ds, CpmStr str, CpmDim m, CpmStr *strs, coordinate co,\n\
                    intptr ip, CpmDim k, intptr *ips, CpmDim j, coordinate *cos) {\n\
                    (void)c; (void)s; (void)i; (void)l; (void)f; (void)d; (void)n; (void)ds;\n\
                    (void)str; (void)m; (void)strs; (void)co; (void)ip; (void)k; (void)ips;\n\
                    (void)j; (void)cos; }\n\
                    CpmInvokable none(void) { }\n\
                    void use(void) { CpmInitializeThisModule(); }\n";
        let dir = std::env::temp_dir().join(format!("cpm-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let include = concat!(env!("CARGO_MANIFEST_DIR"), "/../../include");
        let gen_src = format!("{prelude}{body}");
        // The scanner reads it preprocessed, as convcc runs it.
        let pre = std::process::Command::new("cc")
            .args(["-E", "-I", include, "-x", "c", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().unwrap().write_all(gen_src.as_bytes())?;
                c.wait_with_output()
            })
            .expect("cc runs");
        assert!(pre.status.success());
        let m = scan(&pre.stdout, "<stdin>").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(names(&m), ["all", "none"]);
        std::fs::write(dir.join("t.cpm.h"), generate(&m)).unwrap();
        let file = format!("{prelude}#include \"t.cpm.h\"\n{body}");
        for (name, compiler, std) in [("t.c", "cc", "-std=c99"), ("t.cpp", "c++", "-std=c++11")] {
            std::fs::write(dir.join(name), &file).unwrap();
            let out = std::process::Command::new(compiler)
                .args([
                    "-fsyntax-only",
                    "-Wall",
                    "-Wextra",
                    "-Werror",
                    std,
                    "-I",
                    include,
                ])
                .arg(dir.join(name))
                .output()
                .expect("the compiler runs");
            assert!(
                out.status.success(),
                "{compiler} {std}:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
