//! What the C-against-Rust benchmarks share: building a C program with
//! `convcc` against this profile's `libconverse_capi.a`, and running it for
//! the `<name> <value>` lines its PE 0 prints.
#![allow(dead_code)] // each bench uses part of it

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `benches/<source>` built with `convcc -O2` into this profile's
/// directory as `name` (the library is built first, in the same profile).
pub fn build(source: &str, name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .args(["build", "-p", "converse-capi", "--target-dir"])
        .arg(profile.parent().unwrap());
    if profile.file_name().is_some_and(|n| n == "release") {
        build.arg("--release");
    }
    assert!(
        build.status().expect("cargo runs").success(),
        "building libconverse_capi.a failed"
    );
    let out = profile.join(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("benches")
        .join(source);
    let st = Command::new(env!("CARGO_BIN_EXE_convcc"))
        .args(["-language", "converse", "-O2", "-o"])
        .arg(&out)
        .arg(&src)
        .env("CONVERSE_LIB", &profile)
        .status()
        .expect("convcc runs");
    assert!(st.success(), "building {source} failed");
    out
}

/// What a run of a C program printed: its `<name> <value>` lines.
pub struct Figures {
    text: String,
}

impl Figures {
    /// The value printed after `name`; panics (naming the output) if none.
    pub fn get(&self, name: &str) -> f64 {
        self.text
            .lines()
            .find_map(|l| {
                let (key, value) = l.split_once(' ')?;
                (key == name).then(|| value.trim().parse().unwrap())
            })
            .unwrap_or_else(|| panic!("no `{name}` in:\n{}", self.text))
    }
}

/// Runs `program` with `args` to its end (at most 300 s: CI runs the
/// benchmarks, and a hung program must not hang the run); it must succeed.
pub fn run(program: &Path, args: &[String]) -> Figures {
    let mut child = Command::new(program)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the C benchmark starts");
    let deadline = Instant::now() + Duration::from_secs(300);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{} did not end within 300 s", program.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("the C benchmark's output");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Figures {
        text: String::from_utf8_lossy(&out.stdout).into_owned(),
    }
}
