//! `cargo xtask install --prefix DIR`: the install for C and C++ users.
//!
//! What goes where under the prefix (`convcc` finds its headers and
//! libraries from its own place, `PREFIX/bin`; `converse.pc` from its own,
//! `PREFIX/lib/pkgconfig`, so the tree can be moved whole):
//!
//! ```text
//! bin/convcc, bin/cpm, bin/convrun, bin/ccs
//! lib/libconverse_capi.a, lib/libconverse_capi.so
//! lib/converse-rs/cld.o          the seed balancer's weak names (convcc
//!                                compiles its own; pkg-config links this)
//! lib/pkgconfig/converse.pc
//! include/converse/converse.h …  include/converse/converse-rs/*.h
//! share/doc/converse-rs/         README.md, LICENSE-MIT, LICENSE-APACHE
//! ```
//!
//! Installing again over an install replaces its files (removed first, so
//! a program of the old install that is running keeps its file).
use std::path::{Path, PathBuf};
use std::process::Command;

/// The programs installed in `bin/`.
const PROGRAMS: [&str; 4] = ["convcc", "cpm", "convrun", "ccs"];
/// The libraries installed in `lib/`.
const LIBRARIES: [&str; 2] = ["libconverse_capi.a", "libconverse_capi.so"];
/// The packages that build them.
const PACKAGES: [&str; 3] = ["converse-capi", "convrun", "converse-ccs"];

/// What `install` was asked.
#[derive(Debug, PartialEq, Eq)]
pub struct Options {
    pub prefix: PathBuf,
    /// The debug build instead of the release one.
    pub debug: bool,
    /// Build first (`cargo build`), unless `--no-build`.
    pub build: bool,
}

impl Options {
    /// `--prefix DIR [--debug] [--no-build]`.
    pub fn parse(args: &[String]) -> Result<Options, String> {
        let mut prefix = None;
        let (mut debug, mut build) = (false, true);
        let mut words = args.iter();
        while let Some(word) = words.next() {
            match word.as_str() {
                "--prefix" => {
                    let dir = words.next().ok_or("--prefix needs a directory")?;
                    prefix = Some(PathBuf::from(dir));
                }
                w if w.starts_with("--prefix=") => {
                    prefix = Some(PathBuf::from(&w["--prefix=".len()..]));
                }
                "--debug" => debug = true,
                "--no-build" => build = false,
                other => return Err(format!("install: unknown option `{other}`")),
            }
        }
        let prefix = prefix.ok_or("install needs --prefix DIR (e.g. --prefix ~/.local)")?;
        if prefix.as_os_str().is_empty() {
            return Err("--prefix needs a directory".into());
        }
        Ok(Options {
            prefix,
            debug,
            build,
        })
    }
}

/// The workspace's root (this crate is `crates/xtask`).
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `cargo`: the one running this task, if any.
fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// Runs `cmd`, or says which command failed.
fn run_command(mut cmd: Command) -> Result<(), String> {
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run {:?}: {e}", cmd.get_program()))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed ({status})"))
    }
}

/// The workspace's target directory, as cargo sees it (`CARGO_TARGET_DIR`,
/// configuration, or `target`).
fn target_dir(root: &Path) -> Result<PathBuf, String> {
    let out = cargo()
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(root)
        .output()
        .map_err(|e| format!("cannot run cargo metadata: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let json = String::from_utf8_lossy(&out.stdout);
    json_string(&json, "target_directory")
        .map(PathBuf::from)
        .ok_or_else(|| "cargo metadata gave no target_directory".into())
}

/// The string value of `"key":"…"` in `json` (cargo's metadata: a path,
/// escaped as JSON escapes it).
fn json_string(json: &str, key: &str) -> Option<String> {
    let start = json.find(&format!("\"{key}\":\""))? + key.len() + 4;
    let mut value = String::new();
    let mut chars = json[start..].chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(value),
            '\\' => match chars.next()? {
                'n' => value.push('\n'),
                't' => value.push('\t'),
                other => value.push(other),
            },
            c => value.push(c),
        }
    }
    None
}

/// The `converse.pc` text: everything relative to the file's own
/// directory (`${pcfiledir}`), so the prefix can move. Programs link the
/// shared library (found at run time through the rpath) and the seed
/// balancer's object; `-rdynamic` lets the handler-table check name C
/// handlers by symbol, as `convcc`'s programs do.
pub fn pkg_config_file(version: &str) -> String {
    format!(
        "# converse-rs: Converse's C ABI (converse.h and friends), installed by\n\
         # `cargo xtask install`. `convcc --cflags` and `--libs` give the same\n\
         # for the static library.\n\
         prefix=${{pcfiledir}}/../..\n\
         libdir=${{prefix}}/lib\n\
         includedir=${{prefix}}/include/converse\n\
         \n\
         Name: converse\n\
         Description: Converse, the message-driven parallel runtime (converse-rs)\n\
         Version: {version}\n\
         URL: {url}\n\
         Cflags: -I${{includedir}} -pthread -funwind-tables\n\
         Libs: -L${{libdir}} -Wl,-rpath,${{libdir}} -pthread -rdynamic ${{libdir}}/converse-rs/cld.o -lconverse_capi\n",
        url = env!("CARGO_PKG_REPOSITORY"),
    )
}

/// Replaces `to` with a copy of `from` (removing it first: a running
/// program keeps the old file).
fn copy(from: &Path, to: &Path) -> Result<(), String> {
    match std::fs::remove_file(to) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("{}: {e}", to.display())),
    }
    std::fs::copy(from, to)
        .map(drop)
        .map_err(|e| format!("copying {} to {}: {e}", from.display(), to.display()))
}

/// Copies the directory tree `from` into `to` (files and directories).
fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| format!("{}: {e}", to.display()))?;
    let entries = std::fs::read_dir(from).map_err(|e| format!("{}: {e}", from.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", from.display()))?;
        let path = entry.path();
        let target = to.join(entry.file_name());
        if path.is_dir() {
            copy_tree(&path, &target)?;
        } else {
            copy(&path, &target)?;
        }
    }
    Ok(())
}

/// Compiles the seed balancer's weak names (`cld_shim.c`, which `convcc`
/// compiles into each program it links) to `object`.
fn compile_cld_object(source: &Path, object: &Path) -> Result<(), String> {
    let line = std::env::var("CC").unwrap_or_default();
    let mut words = line.split_whitespace();
    let mut cc = Command::new(words.next().unwrap_or("cc"));
    cc.args(words)
        .args(["-fPIC", "-O2", "-c"])
        .arg(source)
        .arg("-o")
        .arg(object);
    run_command(cc)
}

/// The install: builds (unless `--no-build`), then copies (see the top
/// comment for the layout).
pub fn run(o: &Options) -> Result<(), String> {
    let root = workspace_root();
    if o.build {
        let mut build = cargo();
        build.arg("build").current_dir(&root);
        if !o.debug {
            build.arg("--release");
        }
        for package in PACKAGES {
            build.args(["-p", package]);
        }
        run_command(build)?;
    }
    let built = target_dir(&root)?.join(if o.debug { "debug" } else { "release" });
    let missing: Vec<&str> = PROGRAMS
        .iter()
        .chain(LIBRARIES.iter())
        .copied()
        .filter(|f| !built.join(f).is_file())
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "{} not built in {} (drop --no-build, or run cargo build{} -p converse-capi -p convrun -p converse-ccs)",
            missing.join(", "),
            built.display(),
            if o.debug { "" } else { " --release" }
        ));
    }
    let prefix = std::path::absolute(&o.prefix).map_err(|e| format!("--prefix: {e}"))?;
    let dir = |rel: &str| -> Result<PathBuf, String> {
        let d = prefix.join(rel);
        std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
        Ok(d)
    };
    let bin = dir("bin")?;
    for program in PROGRAMS {
        copy(&built.join(program), &bin.join(program))?;
    }
    let lib = dir("lib")?;
    for library in LIBRARIES {
        copy(&built.join(library), &lib.join(library))?;
    }
    let capi = root.join("crates/converse-capi");
    compile_cld_object(
        &capi.join("src/cld_shim.c"),
        &dir("lib/converse-rs")?.join("cld.o"),
    )?;
    copy_tree(&capi.join("include"), &dir("include/converse")?)?;
    let pc = dir("lib/pkgconfig")?.join("converse.pc");
    std::fs::write(&pc, pkg_config_file(env!("CARGO_PKG_VERSION")))
        .map_err(|e| format!("{}: {e}", pc.display()))?;
    let doc = dir("share/doc/converse-rs")?;
    for file in ["README.md", "LICENSE-MIT", "LICENSE-APACHE"] {
        copy(&root.join(file), &doc.join(file))?;
    }
    let p = prefix.display();
    println!(
        "installed under {p}: bin/{{{programs}}}, lib/{{{libraries}}}, include/converse, lib/pkgconfig/converse.pc\n\
         build a C program with `{p}/bin/convcc -o hello hello.c`, or with\n\
         `cc hello.c -o hello $(PKG_CONFIG_PATH={p}/lib/pkgconfig pkg-config --cflags --libs converse)`;\n\
         run it with `{p}/bin/convrun +p 4 ./hello` (or `./hello +p 4` in one process)",
        programs = PROGRAMS.join(","),
        libraries = LIBRARIES.join(","),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn options_parse_and_say_what_is_wrong() {
        assert_eq!(
            Options::parse(&words("--prefix /opt/c --debug")),
            Ok(Options {
                prefix: "/opt/c".into(),
                debug: true,
                build: true
            })
        );
        assert_eq!(
            Options::parse(&words("--no-build --prefix=p")),
            Ok(Options {
                prefix: "p".into(),
                debug: false,
                build: false
            })
        );
        assert!(Options::parse(&[]).unwrap_err().contains("--prefix DIR"));
        assert!(
            Options::parse(&words("--prefix"))
                .unwrap_err()
                .contains("needs")
        );
        assert!(
            Options::parse(&words("--prefix p --fast"))
                .unwrap_err()
                .contains("`--fast`")
        );
    }

    #[test]
    fn the_pkg_config_file_is_relative_to_itself() {
        let pc = pkg_config_file("1.2.3");
        assert!(pc.contains("prefix=${pcfiledir}/../..\n"));
        assert!(pc.contains("Version: 1.2.3\n"));
        assert!(pc.contains("Cflags: -I${includedir} "));
        assert!(pc.contains("-lconverse_capi\n"));
        assert!(!pc.contains("/work"), "no absolute path: {pc}");
    }

    #[test]
    fn cargo_metadatas_target_directory_is_read() {
        let json = r#"{"packages":[],"target_directory":"/a/b \"c\"/t","version":1}"#;
        assert_eq!(
            json_string(json, "target_directory").as_deref(),
            Some("/a/b \"c\"/t")
        );
        assert_eq!(json_string(json, "nothing"), None);
    }
}
