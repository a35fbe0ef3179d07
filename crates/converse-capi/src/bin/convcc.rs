//! `convcc`: the compiler wrapper for C and C++ Converse programs, with the
//! flags of Charm++'s `charmc` that existing Makefiles use.
//!
//! ```text
//! convcc [-c] [-o OUT] [-default-to-aout] [-language converse|converse++]
//!        [-optimize] [-no-charmrun] [CC flags…] FILES…
//! ```
//!
//! - `.c` files go to the C compiler (`$CC`, else `cc`), `.C`, `.cc`,
//!   `.cpp`, `.cxx` and `.c++` to the C++ compiler (`$CXX`, else `c++`);
//!   any other file (`.o`, `.a`) is passed to the link.
//! - What is made follows `charmc` (`src/scripts/charmc`: its `OBJECT`):
//!   - `-o OUT` without `-c` links the files into the program `OUT` with
//!     `libconverse_capi.a` and the system libraries it needs
//!     (`-language converse++`, or any C++ source, links with the C++
//!     compiler); an `OUT` ending in `.a` is an archive of the objects
//!     instead (`ar`, or `$AR`), as charmc makes one.
//!   - Neither `-o` nor `-c`: **compile only**, `X.c` to `X.o` in the
//!     current directory, as charmc does (Makefiles write `$(CHARMC)
//!     file.c` for `file.o`). `-default-to-aout` asks for charmc's other
//!     default: link `a.out`.
//!   - `-c` compiles only, each source to `X.o` in the current directory,
//!     or the one source to `OUT` with `-o OUT`.
//!   - A compile-only command given objects or libraries says that it
//!     does not link them.
//! - `-optimize` is `-O2`; `-no-charmrun` is accepted and does nothing
//!   (programs run directly, or under `convrun`). Other flags (`-I`, `-D`,
//!   `-L`, `-l`, `-g`, `-O…`, `-W…`) go to the compiler as they are.
//! - `-verbose` prints each command before running it.
//! - `-gen-cpm F.c` (CPM, the Converse Extensions manual's chapter 6), as
//!   charmc does it: `F.c` is preprocessed (`$CC -E`, or `$CXX -E` for a
//!   C++ source, with the headers' directory and the command line's `-I`,
//!   `-D`, `-U`, `-include`, `-isystem`, `-iquote` and `-std=` flags; an
//!   empty `F.cpm.h` stands in meanwhile, since `F.c` includes it), and the
//!   CPM scanner (`cpm`, beside this program, or `$CONVERSE_CPM`) writes
//!   `F.cpm.h` beside `F.c` (charmc's path: the source's path without its
//!   extension). If it fails, no `F.cpm.h` is left. May be given more than
//!   once, and with files to build (after the headers are written).
//!
//! Where things are: installed (`cargo xtask install --prefix PREFIX`:
//! this program in `PREFIX/bin`, with `PREFIX/include/converse/converse.h`),
//! the headers in `PREFIX/include/converse` and the libraries in
//! `PREFIX/lib`; otherwise, as `cargo build` leaves them, the headers in
//! this crate's `include/` and the libraries beside this program.
//! `$CONVERSE_INCLUDE` and `$CONVERSE_LIB` (directories) override both.
//! `convcc --cflags` and `--libs` print the flags a build system needs to
//! do what `convcc` does (`--help` lists every flag).
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
    /// `-default-to-aout`: with neither `-o` nor `-c`, link `a.out`
    /// instead of compiling only.
    default_to_aout: bool,
    cplusplus: bool,
    verbose: bool,
    /// Flags for the compiler and the link, in order.
    flags: Vec<String>,
    sources: Vec<String>,
    /// Objects and libraries for the link.
    others: Vec<String>,
    /// `-gen-cpm` sources, in order.
    gen_cpm: Vec<String>,
    /// `-shared-converse`: link `libconverse_capi.so` instead of the
    /// static library.
    shared: bool,
}

/// What a command line makes (charmc's rules; see the top comment).
#[derive(Debug, PartialEq)]
enum Product {
    /// Each source to its object: `X.o` in the current directory, or the
    /// one source to the given file (`-c -o OUT`).
    Objects(Option<String>),
    /// A program linked from the files.
    Program(String),
    /// An archive (`-o OUT.a`) of the files' objects.
    Archive(String),
}

impl Request {
    fn product(&self) -> Product {
        match &self.output {
            _ if self.compile_only => Product::Objects(self.output.clone()),
            Some(out) if out.ends_with(".a") => Product::Archive(out.clone()),
            Some(out) => Product::Program(out.clone()),
            None if self.default_to_aout => Product::Program("a.out".into()),
            None => Product::Objects(None),
        }
    }
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
            "-default-to-aout" => r.default_to_aout = true,
            "-o" => r.output = Some(it.next().ok_or("-o needs a file name")?.clone()),
            f if INFO_FLAGS.iter().any(|(info, _)| *info == f) => {
                return Err(format!("{f} goes alone on the command line"));
            }
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
            "-shared-converse" => r.shared = true,
            "-gen-cpm" => r
                .gen_cpm
                .push(it.next().ok_or("-gen-cpm needs a source file")?.clone()),
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
    if r.sources.is_empty() && r.others.is_empty() && r.gen_cpm.is_empty() {
        return Err("no input files".into());
    }
    if r.compile_only && r.output.is_some() && r.sources.len() > 1 {
        return Err("-c with -o takes one source file".into());
    }
    Ok(r)
}

/// The directory this program is in.
fn exe_dir() -> Option<PathBuf> {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
}

/// The prefix this program was installed under (`cargo xtask install`):
/// `PREFIX/bin/convcc` with `PREFIX/include/converse/converse.h` beside
/// it. None when it runs from a build directory (`target/release`).
fn installed_prefix() -> Option<PathBuf> {
    let prefix = exe_dir()?.parent()?.to_path_buf();
    prefix
        .join("include/converse/converse.h")
        .is_file()
        .then_some(prefix)
}

/// The headers' directory: `$CONVERSE_INCLUDE`, else the install's
/// `PREFIX/include/converse`, else this crate's `include/`.
fn include_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CONVERSE_INCLUDE") {
        return PathBuf::from(dir);
    }
    match installed_prefix() {
        Some(prefix) => prefix.join("include/converse"),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("include"),
    }
}

/// The directory holding `libconverse_capi.a`: `$CONVERSE_LIB`, else the
/// install's `PREFIX/lib`, else this program's own directory (where
/// `cargo build` leaves both).
fn lib_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CONVERSE_LIB") {
        return PathBuf::from(dir);
    }
    match installed_prefix() {
        Some(prefix) => prefix.join("lib"),
        None => exe_dir().unwrap_or_else(|| PathBuf::from(".")),
    }
}

/// The flags a C or C++ compile of a Converse program needs (`--cflags`;
/// what `compile` passes).
fn cflags() -> Vec<String> {
    vec![
        format!("-I{}", include_dir().display()),
        "-pthread".into(),
        "-funwind-tables".into(),
    ]
}

/// The flags that link a Converse program with the static library
/// (`--libs`; what `build` passes). The seed balancer's object comes
/// first: an install keeps it in `lib/converse-rs/cld.o`; in a build
/// directory `convcc` compiles it beside the library when asked
/// ([`in_tree_cld_object`]).
fn libs() -> Result<Vec<String>, String> {
    let dir = lib_dir();
    let mut flags = vec!["-pthread".into(), "-rdynamic".into()];
    let cld = match installed_prefix() {
        Some(prefix) => prefix.join("lib/converse-rs/cld.o"),
        None => in_tree_cld_object(&dir)?,
    };
    flags.push(cld.display().to_string());
    flags.push(dir.join("libconverse_capi.a").display().to_string());
    flags.extend(SYSTEM_LIBS.iter().map(|s| s.to_string()));
    Ok(flags)
}

/// The seed balancer's names (`CLD_SHIM_C`) compiled in `dir/converse-rs/`
/// of a build directory, for programs linked with `--libs` there: written
/// and compiled when missing or when this `convcc`'s copy differs, so a
/// build directory answers as an install does.
fn in_tree_cld_object(dir: &Path) -> Result<PathBuf, String> {
    let shim_dir = dir.join("converse-rs");
    let (source, object) = (shim_dir.join("cld.c"), shim_dir.join("cld.o"));
    let current = std::fs::read_to_string(&source).is_ok_and(|s| s == CLD_SHIM_C);
    if current && object.is_file() {
        return Ok(object);
    }
    let cannot = |e: &dyn std::fmt::Display| {
        format!(
            "cannot make the seed balancer's object {}: {e}",
            object.display()
        )
    };
    std::fs::create_dir_all(&shim_dir).map_err(|e| cannot(&e))?;
    // Under names of this process's own, renamed into place: builds that
    // ask at once (`make -j`) never read a half-written file.
    let pid = std::process::id();
    let (own_source, own_object) = (
        shim_dir.join(format!("cld.{pid}.c")),
        shim_dir.join(format!("cld.{pid}.o")),
    );
    std::fs::write(&own_source, CLD_SHIM_C).map_err(|e| cannot(&e))?;
    let made = compile_shim(false, &own_source, &own_object)
        .and_then(|()| std::fs::rename(&own_object, &object).map_err(|e| e.to_string()))
        .and_then(|()| std::fs::rename(&own_source, &source).map_err(|e| e.to_string()));
    if made.is_err() {
        let _ = std::fs::remove_file(&own_source);
        let _ = std::fs::remove_file(&own_object);
    }
    made.map_err(|e| cannot(&e))?;
    Ok(object)
}

/// `convcc`'s own flags, which answer and build nothing: (flag, what it
/// prints). `--help` lists them, `main` answers them.
const INFO_FLAGS: &[(&str, &str)] = &[
    ("--help", "this text"),
    (
        "--version",
        "the version of convcc (and of the library beside it)",
    ),
    (
        "--print-prefix",
        "the prefix convcc is installed under (an error when it runs from a build directory)",
    ),
    ("--cflags", "the compile flags of a Converse program"),
    (
        "--libs",
        "the link flags of a Converse program (the static library)",
    ),
];

/// The charmc flags `convcc` takes (flag, what it does), for `--help`; the
/// parser (`parse`) matches the same names.
const CHARMC_FLAGS: &[(&str, &str)] = &[
    (
        "-c",
        "compile only: each source to X.o (or the one source to -o OUT)",
    ),
    (
        "-o OUT",
        "link the program OUT, or the archive OUT when it ends in .a",
    ),
    (
        "-default-to-aout",
        "without -o or -c, link a.out (charmc's other default)",
    ),
    (
        "-language converse|converse++",
        "C or C++ (any C++ source also means C++)",
    ),
    ("-optimize", "-O2"),
    ("-no-charmrun, -production", "accepted, do nothing"),
    ("-verbose", "print each command before running it"),
    (
        "-shared-converse",
        "link libconverse_capi.so instead of the static library",
    ),
    (
        "-gen-cpm F.c",
        "write F.cpm.h beside F.c (the CPM scanner, as charmc does)",
    ),
];

/// `--help`: usage, then the tables above.
fn help_text() -> String {
    let mut text = String::from(
        "convcc: the compiler wrapper for C and C++ Converse programs (charmc's flags)\n\n\
         usage: convcc [FLAGS] [CC FLAGS] FILES...\n\n\
         Sources (.c; .C .cc .cpp .cxx .c++) are compiled with $CC or $CXX; other files\n\
         (.o, .a) go to the link. Other flags (-I -D -U -L -l -g -O -W...) pass through.\n\n",
    );
    let width = CHARMC_FLAGS
        .iter()
        .chain(INFO_FLAGS)
        .map(|(f, _)| f.len())
        .max()
        .unwrap_or(0);
    text.push_str("charmc's flags:\n");
    for (flag, what) in CHARMC_FLAGS {
        text.push_str(&format!("  {flag:width$}  {what}\n"));
    }
    text.push_str("\nconvcc's own (each alone on the command line):\n");
    for (flag, what) in INFO_FLAGS {
        text.push_str(&format!("  {flag:width$}  {what}\n"));
    }
    text.push_str(
        "\nEnvironment: CC, CXX, AR; CONVERSE_INCLUDE (headers), CONVERSE_LIB (library\n\
         directory), CONVERSE_CPM (the CPM scanner) override where convcc looks.\n",
    );
    text
}

/// Answers one of `INFO_FLAGS`.
fn info(flag: &str) -> Result<String, String> {
    Ok(match flag {
        "--help" => help_text(),
        "--version" => format!("convcc {}\n", env!("CARGO_PKG_VERSION")),
        "--print-prefix" => match installed_prefix() {
            Some(prefix) => format!("{}\n", prefix.display()),
            None => {
                return Err(format!(
                    "not installed: this convcc runs from {} (install with `cargo xtask install --prefix DIR`)",
                    exe_dir().unwrap_or_default().display()
                ));
            }
        },
        "--cflags" => format!("{}\n", cflags().join(" ")),
        "--libs" => format!("{}\n", libs()?.join(" ")),
        other => return Err(format!("{other}: not one of convcc's own flags")),
    })
}

/// The C or C++ compiler as a command: `$CC`/`$CXX` (which may carry
/// arguments of their own, `ccache gcc` say), else `cc`/`c++`.
fn compiler(cxx: bool) -> Command {
    let (var, default) = if cxx { ("CXX", "c++") } else { ("CC", "cc") };
    let line = std::env::var(var).unwrap_or_default();
    let mut words = line.split_whitespace();
    match words.next() {
        Some(program) => {
            let mut cmd = Command::new(program);
            cmd.args(words);
            cmd
        }
        None => Command::new(default),
    }
}

/// Flags that only the link takes (`-L`, `-l` with their values, `-Wl,…`,
/// `-shared`, `-static`, `-rdynamic`): kept out of the compile steps.
fn link_only(flags: &[String]) -> (Vec<String>, Vec<String>) {
    let (mut compile, mut link) = (Vec::new(), Vec::new());
    let mut it = flags.iter();
    while let Some(f) = it.next() {
        if f == "-L" || f == "-l" {
            link.push(f.clone());
            link.extend(it.next().cloned());
        } else if f.starts_with("-L")
            || f.starts_with("-l")
            || f.starts_with("-Wl,")
            || ["-shared", "-static", "-rdynamic"].contains(&f.as_str())
        {
            link.push(f.clone());
        } else {
            compile.push(f.clone());
        }
    }
    (compile, link)
}

/// Flags that only the compile steps take (`-I`, `-D`, `-U`, `-include`
/// with their values, `-x`): kept out of the link.
fn compile_only_flag(f: &str) -> bool {
    ["-I", "-D", "-U"].iter().any(|p| f.starts_with(p)) || f == "-include" || f == "-x"
}

/// The flags of `flags` for the link step.
fn link_flags(flags: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut it = flags.iter();
    while let Some(f) = it.next() {
        if compile_only_flag(f) {
            // A separate value goes with its flag.
            if ["-I", "-D", "-U", "-include", "-x"].contains(&f.as_str()) {
                it.next();
            }
            continue;
        }
        out.push(f.clone());
    }
    out
}

/// A new directory for the link's temporary objects, made for this run
/// alone (its name is random and it must not exist yet; only its owner may
/// enter it).
fn scratch_dir() -> Result<PathBuf, String> {
    use std::os::unix::fs::DirBuilderExt;
    let base = std::env::temp_dir();
    for _ in 0..16 {
        let mut bytes = [0u8; 8];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
            .map_err(|e| format!("/dev/urandom: {e}"))?;
        let name = format!(
            "convcc-{}-{:016x}",
            std::process::id(),
            u64::from_ne_bytes(bytes)
        );
        let dir = base.join(name);
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(format!("{}: {e}", dir.display())),
        }
    }
    Err(format!(
        "cannot make a temporary directory in {}",
        base.display()
    ))
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

/// The C object `convcc` links into every program (see `src/cld_weak.rs`):
/// Charm++'s seed-balancer names, weak, over the library's. An install
/// puts it, compiled, beside the libraries (`lib/converse-rs/cld.o`) for
/// programs linked without `convcc` (`pkg-config`).
const CLD_SHIM_C: &str = include_str!("../cld_shim.c");

fn compile(r: &Request, source: &str, object: &str) -> Result<(), String> {
    let (flags, _) = link_only(&r.flags);
    let mut cmd = compiler(is_cxx(source));
    // The user's flags first: `-x c++` and the like apply to the source.
    cmd.args(cflags())
        .args(&flags)
        .arg("-c")
        .arg(source)
        .arg("-o")
        .arg(object);
    run(cmd, r.verbose)
}

/// Compiles the seed balancer's names (`CLD_SHIM_C`) with the C compiler,
/// as position-independent code (the program may be a PIE).
fn compile_shim(verbose: bool, source: &Path, object: &Path) -> Result<(), String> {
    let mut cmd = compiler(false);
    cmd.args(["-fPIC", "-O2", "-c"])
        .arg(source)
        .arg("-o")
        .arg(object);
    run(cmd, verbose)
}

fn build(r: &Request) -> Result<(), String> {
    let output = match r.product() {
        Product::Objects(output) => {
            if !r.others.is_empty() {
                let why = if r.compile_only {
                    "-c compiles only"
                } else {
                    "without -o, convcc compiles only, as charmc does (-o OUT or -default-to-aout links)"
                };
                eprintln!("convcc: warning: {why}; not linking {}", r.others.join(" "));
            }
            for source in &r.sources {
                let object = output.clone().unwrap_or_else(|| object_of(source));
                compile(r, source, &object)?;
            }
            return Ok(());
        }
        Product::Archive(archive) => return build_archive(r, &archive),
        Product::Program(program) => program,
    };
    // Compile each source to a temporary object, then link them all.
    let scratch = scratch_dir()?;
    let result = (|| {
        let objects = compile_to(r, &scratch)?;
        // After the program's objects and libraries (below): its own
        // balancer's names, from an object or an archive, come first.
        let shim = scratch.join("converse-rs-cld.c");
        std::fs::write(&shim, CLD_SHIM_C).map_err(|e| format!("{}: {e}", shim.display()))?;
        let shim_object = scratch.join("converse-rs-cld.o");
        compile_shim(r.verbose, &shim, &shim_object)?;
        let dir = lib_dir();
        let lib = dir.join(if r.shared {
            "libconverse_capi.so"
        } else {
            "libconverse_capi.a"
        });
        if !lib.exists() {
            return Err(format!(
                "{} not found (build it with `cargo build -p converse-capi`, or set CONVERSE_LIB)",
                lib.display()
            ));
        }
        let mut cmd = compiler(r.cplusplus);
        cmd.args(&objects)
            .args(&r.others)
            .arg("-o")
            .arg(&output)
            .arg("-pthread")
            // The program's own functions in its dynamic symbol table:
            // the handler-table check names C handlers by symbol.
            .arg("-rdynamic")
            .args(link_flags(&r.flags))
            .arg(&shim_object);
        if r.shared {
            // Found at run time where it was at link time.
            cmd.arg(&lib).arg(format!("-Wl,-rpath,{}", dir.display()));
        } else {
            cmd.arg(&lib).args(SYSTEM_LIBS);
        }
        run(cmd, r.verbose)
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

/// Compiles every source of `r` to an object in `scratch` (numbered, so
/// two sources of one name in different directories do not collide).
fn compile_to(r: &Request, scratch: &Path) -> Result<Vec<PathBuf>, String> {
    let mut objects = Vec::new();
    for (i, source) in r.sources.iter().enumerate() {
        let object = scratch.join(format!("{i}-{}", object_of(source)));
        compile(r, source, &object.to_string_lossy())?;
        objects.push(object);
    }
    Ok(objects)
}

/// `-o OUT.a`: the sources' objects and the other files given (objects)
/// in a new archive `OUT.a` (an old one is replaced, as charmc removes
/// it first), with `$AR`, else `ar`.
fn build_archive(r: &Request, archive: &str) -> Result<(), String> {
    let scratch = scratch_dir()?;
    let result = (|| {
        let objects = compile_to(r, &scratch)?;
        match std::fs::remove_file(archive) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(format!("{archive}: {e}"));
            }
            _ => {}
        }
        let ar = std::env::var("AR").unwrap_or_default();
        let mut words = ar.split_whitespace();
        let mut cmd = Command::new(words.next().unwrap_or("ar"));
        cmd.args(words)
            .arg("rcs")
            .arg(archive)
            .args(&objects)
            .args(&r.others);
        run(cmd, r.verbose)
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

// ---- -gen-cpm ----------------------------------------------------------------

/// The header `-gen-cpm source` writes: the source's path without its
/// extension, plus `.cpm.h` (charmc's `stripExtention`, which keeps the
/// directory: beside the source, where its `#include "F.cpm.h"` finds it).
fn cpm_header_of(source: &str) -> PathBuf {
    Path::new(source).with_extension("cpm.h")
}

/// The flags of `flags` that change what the preprocessor makes of a file
/// (include paths, macros, forced includes, the language standard), with
/// their values.
fn preprocessor_flags(flags: &[String]) -> Vec<String> {
    const WITH_VALUE: &[&str] = &["-I", "-D", "-U", "-include", "-isystem", "-iquote"];
    let mut out = Vec::new();
    let mut it = flags.iter();
    while let Some(f) = it.next() {
        if WITH_VALUE.contains(&f.as_str()) {
            out.push(f.clone());
            if let Some(v) = it.next() {
                out.push(v.clone());
            }
        } else if FLAGS_WITH_VALUE.contains(&f.as_str()) {
            // Another flag's value (`-L dir`, `-x c`): not the
            // preprocessor's.
            it.next();
        } else if ["-I", "-D", "-U", "-std=", "-isystem", "-iquote"]
            .iter()
            .any(|p| f.starts_with(p))
        {
            out.push(f.clone());
        }
    }
    out
}

/// The CPM scanner: `$CONVERSE_CPM`, else `cpm` beside this program.
fn cpm_scanner() -> PathBuf {
    if let Some(path) = std::env::var_os("CONVERSE_CPM") {
        return PathBuf::from(path);
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("cpm")))
        .unwrap_or_else(|| PathBuf::from("cpm"))
}

/// `-gen-cpm source`: preprocesses it and runs the scanner on that (see the
/// top comment).
fn gen_cpm(r: &Request, source: &str) -> Result<(), String> {
    let header = cpm_header_of(source);
    // The source includes its header: an empty one stands in (not an old
    // one, whose code the scanner would read as the program's).
    std::fs::write(&header, "").map_err(|e| format!("{}: {e}", header.display()))?;
    let scratch = scratch_dir()?;
    let result = (|| {
        let preprocessed = scratch.join("source.i");
        let mut cmd = compiler(is_cxx(source));
        cmd.arg("-E")
            .arg(source)
            .arg("-o")
            .arg(&preprocessed)
            .arg("-I")
            .arg(include_dir())
            // As `compile` has it (it defines _REENTRANT).
            .arg("-pthread")
            .args(preprocessor_flags(&r.flags));
        run(cmd, r.verbose)?;
        let mut cmd = Command::new(cpm_scanner());
        cmd.arg(&preprocessed).arg(&header);
        run(cmd, r.verbose)
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    if result.is_err() {
        let _ = std::fs::remove_file(&header);
    }
    result
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag] = args.as_slice()
        && INFO_FLAGS.iter().any(|(f, _)| f == flag)
    {
        return match info(flag) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(why) => {
                eprintln!("convcc: {why}");
                ExitCode::FAILURE
            }
        };
    }
    let done = parse(&args).and_then(|r| {
        for source in &r.gen_cpm {
            gen_cpm(&r, source)?;
        }
        if r.sources.is_empty() && r.others.is_empty() {
            Ok(())
        } else {
            build(&r)
        }
    });
    match done {
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

    /// Every flag `--help` lists as charmc's is one the parser takes for
    /// itself, not one it passes through to the compiler.
    #[test]
    fn the_help_lists_the_flags_the_parser_takes() {
        for (flags, _) in CHARMC_FLAGS {
            for flag in flags.split(", ") {
                let mut words: Vec<String> = flag
                    .split(' ')
                    .map(|w| w.split('|').next().unwrap().to_owned())
                    .collect();
                words.push("x.c".into());
                let r = parse(&words).unwrap_or_else(|e| panic!("{flag}: {e}"));
                assert!(!r.flags.contains(&words[0]), "{flag} passed through");
            }
        }
        for (flag, _) in INFO_FLAGS {
            let err = parse(&args(&format!("{flag} x.c"))).unwrap_err();
            assert!(err.contains("alone"), "{flag}: {err}");
            assert!(help_text().contains(flag));
        }
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

    /// charmc's `OBJECT`: no `-o` and no `-c` compiles only (a Makefile's
    /// `$(CHARMC) file.c` makes `file.o`), `-default-to-aout` links
    /// `a.out` unless `-o` or `-c` says otherwise, `-o X.a` archives.
    #[test]
    fn what_a_command_line_makes_is_what_charmc_makes() {
        let made = |line: &str| parse(&args(line)).unwrap().product();
        assert_eq!(made("ring.c"), Product::Objects(None));
        assert_eq!(made("-O2 a.c b.C"), Product::Objects(None));
        assert_eq!(made("-c ring.c"), Product::Objects(None));
        assert_eq!(
            made("-c -o out/ring.o ring.c"),
            Product::Objects(Some("out/ring.o".into()))
        );
        // charmc: `-c` after `-o` keeps the explicit object.
        assert_eq!(
            made("-o x.o -c ring.c"),
            Product::Objects(Some("x.o".into()))
        );
        assert_eq!(
            made("-default-to-aout ring.c"),
            Product::Program("a.out".into())
        );
        assert_eq!(made("-default-to-aout -c ring.c"), Product::Objects(None));
        assert_eq!(
            made("-default-to-aout -o ring ring.c"),
            Product::Program("ring".into())
        );
        assert_eq!(
            made("-o megacon a.o b.o -language converse++"),
            Product::Program("megacon".into())
        );
        assert_eq!(made("-o libx.a a.c b.o"), Product::Archive("libx.a".into()));
        assert_eq!(
            made("-c -o libx.a a.c"),
            Product::Objects(Some("libx.a".into()))
        );
        let r = parse(&args("-default-to-aout x.c")).unwrap();
        assert!(r.default_to_aout && r.flags.is_empty());
    }

    #[test]
    fn link_and_compile_flags_go_where_they_belong() {
        let flags = args("-O2 -I inc -DX=1 -L /opt/lib -lm -Wl,--as-needed -x c -g");
        let (compile, link) = link_only(&flags);
        assert_eq!(compile, args("-O2 -I inc -DX=1 -x c -g"));
        assert_eq!(link, args("-L /opt/lib -lm -Wl,--as-needed"));
        assert_eq!(
            link_flags(&flags),
            args("-O2 -L /opt/lib -lm -Wl,--as-needed -g")
        );
        let r = parse(&args("-shared-converse -o p p.c")).unwrap();
        assert!(r.shared);
    }

    #[test]
    fn each_link_gets_a_directory_of_its_own() {
        let (a, b) = (scratch_dir().unwrap(), scratch_dir().unwrap());
        assert_ne!(a, b);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&a).unwrap().permissions().mode() & 0o777,
            0o700
        );
        std::fs::remove_dir(a).unwrap();
        std::fs::remove_dir(b).unwrap();
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
        assert_eq!(
            parse(&args("-gen-cpm")).unwrap_err(),
            "-gen-cpm needs a source file"
        );
    }

    #[test]
    fn gen_cpm_takes_its_source_and_may_come_alone() {
        let r = parse(&args("-gen-cpm dir/msg.c")).unwrap();
        assert_eq!(r.gen_cpm, ["dir/msg.c"]);
        assert!(r.sources.is_empty() && r.others.is_empty());
        let r = parse(&args(
            "-I inc -gen-cpm a.c -DX=1 -gen-cpm b.C -o prog a.c b.C",
        ))
        .unwrap();
        assert_eq!(r.gen_cpm, ["a.c", "b.C"]);
        assert_eq!(r.sources, ["a.c", "b.C"]);
        assert_eq!(r.flags, ["-I", "inc", "-DX=1"]);
    }

    #[test]
    fn gen_cpm_writes_beside_the_source_as_charmc_does() {
        assert_eq!(cpm_header_of("msg.c"), Path::new("msg.cpm.h"));
        assert_eq!(
            cpm_header_of("src/dir/msg.c"),
            Path::new("src/dir/msg.cpm.h")
        );
        assert_eq!(cpm_header_of("../a.b.c"), Path::new("../a.b.cpm.h"));
        assert_eq!(cpm_header_of("prog.C"), Path::new("prog.cpm.h"));
    }

    #[test]
    fn gen_cpm_preprocesses_with_the_include_and_macro_flags_only() {
        let flags = args(
            "-g -Wall -Werror -I inc -Iinc2 -D X=1 -DY -U Z -UW -include pre.h -isystem sys \
             -iquote q -std=c99 -O2 -L lib -lm -x c -MF deps.d",
        );
        assert_eq!(
            preprocessor_flags(&flags),
            args(
                "-I inc -Iinc2 -D X=1 -DY -U Z -UW -include pre.h -isystem sys -iquote q -std=c99"
            )
        );
    }

    /// A source the preprocessor refuses: the error, and no header (the
    /// integration tests, `tests/c_cpm.rs`, run the whole of `-gen-cpm` as
    /// a Makefile does, scanner included).
    #[test]
    fn gen_cpm_leaves_no_header_when_the_source_is_wrong() {
        let dir = std::env::temp_dir().join(format!("convcc-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let source = dir.join("broken.c");
        std::fs::write(&source, "#include \"nowhere.h\"\n").unwrap();
        let r = parse(&args("-gen-cpm x.c")).unwrap();
        let err = gen_cpm(&r, source.to_str().unwrap()).unwrap_err();
        assert!(err.contains("-E") || err.contains("failed"), "{err}");
        assert!(!dir.join("broken.cpm.h").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
