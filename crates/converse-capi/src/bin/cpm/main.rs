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
mod generate;
mod lexer;
mod parser;
#[cfg(test)]
mod tests;

use std::process::ExitCode;

use generate::generate;
use parser::scan;

/// The usage line, and `--help`'s text after it.
const USAGE: &str = "usage: cpm INPUT [OUTPUT]   (INPUT: a C file after the preprocessor; OUTPUT: F.cpm.h, `-` or none for standard output)";
const HELP: &str = "\
The CPM scanner (the Converse extensions manual's parameter marshalling):
reads a preprocessed C or C++ source and writes the header of its CpmInvokable
functions' launchers and receivers. `convcc -gen-cpm F.c` runs it for you.

  --help      print this text
  --version   print the version
";

fn usage() -> ExitCode {
    eprintln!("{USAGE}");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [flag] if flag == "--help" => {
            print!("{USAGE}\n\n{HELP}");
            return ExitCode::SUCCESS;
        }
        [flag] if flag == "--version" => {
            println!("cpm {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        _ => {}
    }
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
