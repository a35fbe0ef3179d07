//! What the C programs' tests share: building `libconverse_capi.a`,
//! `convrun` and one directory of `tests/c/` with its Makefile, and running
//! the programs with a deadline.
//!
//! `cargo test` builds this package's library as an rlib only, so the
//! first build of a test binary runs cargo to build `libconverse_capi.a`
//! and `convrun` (same profile, same target directory), then `make` in a
//! copy of `tests/c/<dir>/` (in the target directory: nothing is left
//! outside it).
#![allow(dead_code)] // each test file uses a part

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, Once};
use std::time::Duration;

/// The target directory's profile directory (`target/debug`): a test's
/// executable is in its `deps/`.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().to_path_buf()
}

fn build_libraries() {
    static BUILT: Once = Once::new();
    BUILT.call_once(|| {
        let profile = profile_dir();
        let target = profile.parent().unwrap();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(cargo);
        build
            .args([
                "build",
                "-p",
                "converse-capi",
                "-p",
                "convrun",
                "--target-dir",
            ])
            .arg(target);
        if profile.file_name().is_some_and(|n| n == "release") {
            build.arg("--release");
        }
        let st = build.status().expect("cargo runs");
        assert!(
            st.success(),
            "building libconverse_capi.a and convrun failed"
        );
        assert!(profile.join("libconverse_capi.a").exists());
    });
}

/// The built programs of `tests/c/<dir>/` (built once per test binary).
pub fn programs(dir: &str) -> PathBuf {
    static BUILT: Mutex<Option<HashMap<String, PathBuf>>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(path) = built.get_or_insert_with(HashMap::new).get(dir) {
        return path.clone();
    }
    build_libraries();
    let profile = profile_dir();
    let out_dir = profile.join("c-tests").join(dir);
    let _ = std::fs::remove_dir_all(&out_dir);
    std::fs::create_dir_all(&out_dir).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/c")
        .join(dir);
    for entry in std::fs::read_dir(&src).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), out_dir.join(entry.file_name())).unwrap();
    }
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    let out = Command::new("make")
        .arg(format!("-j{jobs}"))
        .arg("-C")
        .arg(&out_dir)
        .arg(format!("CHARMC={}", env!("CARGO_BIN_EXE_convcc")))
        .env("CONVERSE_LIB", &profile)
        .output()
        .expect("make runs");
    assert!(
        out.status.success(),
        "make in tests/c/{dir} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    built
        .as_mut()
        .unwrap()
        .insert(dir.to_owned(), out_dir.clone());
    out_dir
}

/// Runs `cmd` with a deadline: a hung job fails the test instead of
/// hanging it.
pub fn run_with_deadline(mut cmd: Command) -> Output {
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the program starts");
    // Drain the pipes while waiting: a chatty program must not block.
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut b).ok();
        b
    });
    let err_reader = std::thread::spawn(move || {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut stderr, &mut b).ok();
        b
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let (o, e) = (out_reader.join().unwrap(), err_reader.join().unwrap());
            panic!(
                "{cmd:?} did not end within 60 s:\n{}{}",
                String::from_utf8_lossy(&o),
                String::from_utf8_lossy(&e)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: out_reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
    }
}

/// Runs program `name` of `tests/c/<dir>/` directly (one process) with
/// `args`.
pub fn direct(dir: &str, name: &str, args: &[&str]) -> Output {
    let programs = programs(dir);
    let mut cmd = Command::new(programs.join(name));
    cmd.args(args).current_dir(&programs);
    run_with_deadline(cmd)
}

/// Runs program `name` of `tests/c/<dir>/` under `convrun` with `args`
/// before it.
pub fn convrun(dir: &str, args: &[&str], name: &str) -> Output {
    let programs = programs(dir);
    let mut cmd = Command::new(profile_dir().join("convrun"));
    cmd.args(args)
        .arg(format!("./{name}"))
        .current_dir(&programs);
    run_with_deadline(cmd)
}

/// The job's standard output and standard error as text.
pub fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Asserts that the job succeeded and its standard output holds `lines`
/// (each a whole line).
pub fn expect_ok(out: &Output, lines: &[&str]) {
    let (stdout, stderr) = text(out);
    assert!(
        out.status.success(),
        "{:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    for l in lines {
        assert!(
            stdout.lines().any(|x| x == *l),
            "missing `{l}` in:\n{stdout}\nstderr:\n{stderr}"
        );
    }
}

/// Runs program `name` of `tests/c/<dir>/` under `convrun` with `before`
/// before it and `after` after it (its arguments, and runtime flags
/// `convrun` takes after the program as charmrun does).
pub fn convrun_with(dir: &str, before: &[&str], name: &str, after: &[&str]) -> Output {
    let programs = programs(dir);
    let mut cmd = Command::new(profile_dir().join("convrun"));
    cmd.args(before)
        .arg(format!("./{name}"))
        .args(after)
        .current_dir(&programs);
    run_with_deadline(cmd)
}
