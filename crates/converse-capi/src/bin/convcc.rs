//! `convcc`: the compiler wrapper for C and C++ Converse programs, with the
//! flags of Charm++'s `charmc` that existing Makefiles use.
//!
//! ```text
//! convcc [-c] [-o OUT] [-language converse|converse++] [-optimize]
//!        [-no-charmrun] [CC flags…] FILES…
//! ```
//!
//! - `.c` files go to the C compiler (`$CC`, else `cc`), `.C`, `.cc`,
//!   `.cpp`, `.cxx` and `.c++` to the C++ compiler (`$CXX`, else `c++`);
//!   any other file (`.o`, `.a`) is passed to the link.
//! - `-c` compiles only; without `-o`, `X.c` becomes `X.o` (in the current
//!   directory, as the compiler does). Without `-c` the files are compiled
//!   and linked with `libconverse_capi.a` and the system libraries it needs;
//!   `-language converse++` (or any C++ source) links with the C++
//!   compiler. Without `-o` the program is `a.out`.
//! - `-optimize` is `-O2`; `-no-charmrun` is accepted and does nothing
//!   (programs run directly, or under `convrun`). Other flags (`-I`, `-D`,
//!   `-L`, `-l`, `-g`, `-O…`, `-W…`) go to the compiler as they are.
//! - `-verbose` prints each command before running it.
//!
//! Where things are: the headers in the repository's `include/` (or
//! `$CONVERSE_INCLUDE`), the library beside this program (`$CONVERSE_LIB`,
//! a directory, overrides), as `cargo build` leaves them.
//!
//! C is compiled with unwind tables (`-funwind-tables`): a PE leaves its
//! code by unwinding through the C frames between its start function and
//! the runtime (see the crate's top comment).
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The system libraries a Rust static library needs on Linux (what
/// `rustc --print native-static-libs` lists for this target).
const SYSTEM_LIBS: &[&str] = &[
    "-lgcc_s",
    "-lutil",
    "-lrt",
    "-lpthread",
    "-lm",
    "-ldl",
    "-lc",
];

/// What the command line asks for.
#[derive(Debug, Default, PartialEq)]
struct Request {
    compile_only: bool,
    output: Option<String>,
    cplusplus: bool,
    verbose: bool,
    /// Flags for the compiler and the link, in order.
    flags: Vec<String>,
    sources: Vec<String>,
    /// Objects and libraries for the link.
    others: Vec<String>,
}

fn is_cxx(file: &str) -> bool {
    [".C", ".cc", ".cpp", ".cxx", ".c++"]
        .iter()
        .any(|e| file.ends_with(e))
}

fn is_source(file: &str) -> bool {
    file.ends_with(".c") || is_cxx(file)
}

/// Flags that take the next argument as their value.
const FLAGS_WITH_VALUE: &[&str] = &["-I", "-D", "-U", "-L", "-l", "-include", "-x", "-MF", "-MT"];

fn parse(args: &[String]) -> Result<Request, String> {
    let mut r = Request::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-c" => r.compile_only = true,
            "-o" => r.output = Some(it.next().ok_or("-o needs a file name")?.clone()),
            "-language" => match it.next().map(String::as_str) {
                Some("converse") | Some("c") => {}
                Some("converse++") | Some("c++") => r.cplusplus = true,
                Some(other) => {
                    return Err(format!(
                        "-language {other}: this wrapper builds Converse programs (converse, converse++)"
                    ));
                }
                None => return Err("-language needs a value (converse or converse++)".into()),
            },
            "-optimize" => r.flags.push("-O2".into()),
            "-no-charmrun" | "-production" => {}
            "-verbose" => r.verbose = true,
            "-gen-cpm" => {
                return Err(
                    "-gen-cpm: the CPM scanner is not built yet (issue 24 lands it in a later part)".into(),
                );
            }
            f if FLAGS_WITH_VALUE.contains(&f) => {
                r.flags.push(f.to_owned());
                r.flags
                    .push(it.next().ok_or(format!("{f} needs a value"))?.clone());
            }
            f if f.starts_with('-') => r.flags.push(f.to_owned()),
            file if is_source(file) => {
                r.cplusplus |= is_cxx(file);
                r.sources.push(file.to_owned());
            }
            file => r.others.push(file.to_owned()),
        }
    }
    if r.sources.is_empty() && r.others.is_empty() {
        return Err("no input files".into());
    }
    if r.compile_only && r.output.is_some() && r.sources.len() > 1 {
        return Err("-c with -o takes one source file".into());
    }
    Ok(r)
}

/// The headers' directory.
fn include_dir() -> PathBuf {
    std::env::var_os("CONVERSE_INCLUDE")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include"))
}

/// The directory holding `libconverse_capi.a`.
fn lib_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CONVERSE_LIB") {
        return PathBuf::from(dir);
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."))
}

fn compiler(cxx: bool) -> String {
    let (var, default) = if cxx { ("CXX", "c++") } else { ("CC", "cc") };
    std::env::var(var).unwrap_or_else(|_| default.into())
}

fn run(mut cmd: Command, verbose: bool) -> Result<(), String> {
    if verbose {
        eprintln!("convcc: {cmd:?}");
    }
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run `{}`: {e}", cmd.get_program().to_string_lossy()))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{}` failed ({status})",
            cmd.get_program().to_string_lossy()
        ))
    }
}

/// The object file `source` compiles to without `-o`: its base name with
/// `.o`, in the current directory.
fn object_of(source: &str) -> String {
    let stem = Path::new(source)
        .file_stem()
        .unwrap_or_default()
        .to_string_lossy();
    format!("{stem}.o")
}

fn compile(r: &Request, source: &str, object: &str) -> Result<(), String> {
    let mut cmd = Command::new(compiler(is_cxx(source)));
    cmd.arg("-c")
        .arg(source)
        .arg("-o")
        .arg(object)
        .arg("-I")
        .arg(include_dir())
        .args(["-pthread", "-funwind-tables"])
        .args(&r.flags);
    run(cmd, r.verbose)
}

fn build(r: &Request) -> Result<(), String> {
    if r.compile_only {
        for source in &r.sources {
            let object = r.output.clone().unwrap_or_else(|| object_of(source));
            compile(r, source, &object)?;
        }
        return Ok(());
    }
    // Compile each source to a temporary object, then link them all.
    let scratch = std::env::temp_dir().join(format!("convcc-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
    let result = (|| {
        let mut objects = Vec::new();
        for (i, source) in r.sources.iter().enumerate() {
            let object = scratch.join(format!("{i}-{}", object_of(source)));
            compile(r, source, &object.to_string_lossy())?;
            objects.push(object);
        }
        let lib = lib_dir().join("libconverse_capi.a");
        if !lib.exists() {
            return Err(format!(
                "{} not found (build it with `cargo build -p converse-capi`, or set CONVERSE_LIB)",
                lib.display()
            ));
        }
        let mut cmd = Command::new(compiler(r.cplusplus));
        cmd.args(&objects)
            .args(&r.others)
            .arg("-o")
            .arg(r.output.as_deref().unwrap_or("a.out"))
            .arg("-pthread")
            // The program's own functions in its dynamic symbol table:
            // the handler-table check names C handlers by symbol.
            .arg("-rdynamic")
            .args(&r.flags)
            .arg(&lib)
            .args(SYSTEM_LIBS);
        run(cmd, r.verbose)
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match parse(&args).and_then(|r| build(&r)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("convcc: {why}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn charmc_flags_parse() {
        let r = parse(&args(
            "-language converse++ -optimize -no-charmrun -o prog a.c b.C x.o -I inc -lm",
        ))
        .unwrap();
        assert!(r.cplusplus && !r.compile_only);
        assert_eq!(r.output.as_deref(), Some("prog"));
        assert_eq!(r.sources, ["a.c", "b.C"]);
        assert_eq!(r.others, ["x.o"]);
        assert_eq!(r.flags, ["-O2", "-I", "inc", "-lm"]);
        let r = parse(&args("-c dir/ring.c")).unwrap();
        assert!(r.compile_only && !r.cplusplus);
        assert_eq!(object_of(&r.sources[0]), "ring.o");
    }

    #[test]
    fn bad_command_lines_say_why() {
        assert_eq!(parse(&args("-o")).unwrap_err(), "-o needs a file name");
        assert_eq!(parse(&args("-c")).unwrap_err(), "no input files");
        assert!(
            parse(&args("-language charm++ a.C"))
                .unwrap_err()
                .contains("charm++")
        );
        assert!(parse(&args("-c -o x.o a.c b.c")).is_err());
    }
}
