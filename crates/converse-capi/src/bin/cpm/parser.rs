//! The parser: the file-scope declarations the scanner recognises (the
//! types declared for CPM and the `CpmInvokable` functions), as a
//! [`Module`].
use std::collections::HashMap;

use crate::lexer::{Kind, Loc, ScanError, Token, lex};

/// How a type travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TypeKind {
    /// Copied by value (`CpmPack_T`, `CpmUnpack_T`).
    Simple,
    /// Its data copied (`CpmPtrSize_T`, `CpmPtrPack_T`, …).
    Pointer,
}

/// One argument of an invokable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Arg {
    pub(crate) ty: String,
    pub(crate) kind: TypeKind,
    /// `T *name`: an array of the previous argument's length.
    pub(crate) array: bool,
}

/// A `CpmInvokable` function.
#[derive(Clone, Debug)]
pub(crate) struct Invokable {
    pub(crate) name: String,
    pub(crate) is_static: bool,
    pub(crate) args: Vec<Arg>,
    pub(crate) loc: Loc,
}

/// What a file declares: its types and invokables, in source order.
pub(crate) struct Module {
    pub(crate) files: Vec<String>,
    /// The source file (see [`Lexed::main`](crate::lexer::Lexed::main)).
    pub(crate) main: usize,
    pub(crate) invokables: Vec<Invokable>,
}

pub(crate) const BUILT_IN: &[(&str, TypeKind)] = &[
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
pub(crate) const MULTI_WORD: &[&str] = &[
    "struct", "union", "enum", "const", "volatile", "unsigned", "signed", "restrict",
];

pub(crate) struct Parser<'a> {
    pub(crate) toks: &'a [Token],
    pub(crate) files: &'a [String],
    pub(crate) pos: usize,
    pub(crate) types: HashMap<String, (TypeKind, Option<Loc>)>,
    pub(crate) invokables: Vec<Invokable>,
}

impl<'a> Parser<'a> {
    pub(crate) fn loc(&self, t: &Token) -> Loc {
        Loc {
            file: t.file,
            line: t.line,
        }
    }

    pub(crate) fn error(&self, loc: Loc, msg: impl Into<String>) -> ScanError {
        ScanError {
            file: self.files[loc.file].clone(),
            line: loc.line,
            msg: msg.into(),
        }
    }

    pub(crate) fn at(&self, i: usize) -> Option<&'a Token> {
        self.toks.get(i)
    }

    pub(crate) fn place(&self, loc: Loc) -> String {
        format!("{}:{}", self.files[loc.file], loc.line)
    }

    pub(crate) fn declare(&mut self, name: &Token, kind: TypeKind) -> Result<(), ScanError> {
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
    pub(crate) fn skip_block(&mut self) -> Result<(), ScanError> {
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

    pub(crate) fn run(mut self) -> Result<Vec<Invokable>, ScanError> {
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
    pub(crate) fn invokable(&mut self, decl_start: usize) -> Result<bool, ScanError> {
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
    pub(crate) fn arguments(&mut self, fname: &str) -> Result<Vec<Arg>, ScanError> {
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
pub(crate) fn scan(src: &[u8], input: &str) -> Result<Module, ScanError> {
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
