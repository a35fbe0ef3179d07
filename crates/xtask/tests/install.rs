//! `cargo xtask install` into a temporary prefix, then a C program built
//! from there three ways (the installed `convcc`; plain `cc` with
//! `pkg-config`; a CMake project with `pkg_check_modules`), each run in one
//! process and under the installed `convrun`.
//!
//! `pkg-config` and `cmake` may be missing here: the ways that need them
//! say `skipped`, which `CONVERSE_TEST_INSTALL` (set by CI, which installs
//! both) turns into a failure.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Set by CI: a missing `pkg-config` or `cmake` fails instead of skipping.
const REQUIRE: &str = "CONVERSE_TEST_INSTALL";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn output(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(cmd: &mut Command) -> String {
    String::from_utf8(output(cmd).stdout).unwrap()
}

/// Whether `tool` runs here; if not, says `skipped` (or fails under CI).
fn have(tool: &str) -> bool {
    let found = Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var_os(REQUIRE).is_none(),
            "{tool} is missing and {REQUIRE} is set (apt-get install pkg-config cmake)"
        );
        println!("install: the {tool} build skipped (no {tool} here)");
    }
    found
}

/// Runs the program built at `program` in one process and under the
/// installed `convrun` (two processes over shared memory), checking it
/// heard from every PE.
fn runs(prefix: &Path, program: &Path) {
    let alone = stdout(Command::new(program).args(["+p", "3"]));
    assert!(alone.contains("PE 0 heard from all 3 PEs"), "{alone}");
    let job = stdout(Command::new(prefix.join("bin/convrun")).args([
        "+p".as_ref(),
        "4".as_ref(),
        "++ppn".as_ref(),
        "2".as_ref(),
        program.as_os_str(),
    ]));
    assert!(job.contains("PE 0 heard from all 4 PEs"), "{job}");
}

#[test]
fn an_install_builds_and_runs_c_programs_three_ways() {
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("install-test");
    let _ = std::fs::remove_dir_all(&scratch);
    let prefix = scratch.join("prefix");
    let out = stdout(
        Command::new(env!("CARGO_BIN_EXE_xtask"))
            .args(["install", "--debug", "--prefix"])
            .arg(&prefix),
    );
    assert!(out.contains("installed under"), "{out}");
    for file in [
        "bin/convcc",
        "bin/convrun",
        "bin/cpm",
        "bin/ccs",
        "lib/libconverse_capi.a",
        "lib/libconverse_capi.so",
        "lib/converse-rs/cld.o",
        "lib/pkgconfig/converse.pc",
        "include/converse/converse.h",
        "include/converse/converse-rs/threads.h",
        "share/doc/converse-rs/LICENSE-MIT",
    ] {
        assert!(prefix.join(file).is_file(), "{file} installed");
    }
    let convcc = prefix.join("bin/convcc");
    let prefix = std::fs::canonicalize(&prefix).unwrap();
    let printed = stdout(Command::new(&convcc).arg("--print-prefix"));
    assert_eq!(Path::new(printed.trim()), prefix);
    let cflags = stdout(Command::new(&convcc).arg("--cflags"));
    assert!(
        cflags.contains(&format!("-I{}", prefix.join("include/converse").display())),
        "{cflags}"
    );
    let hello = root().join("tests/c/core/hello.c");

    // 1. The installed convcc, which finds its headers and library from
    //    its own place.
    let with_convcc = scratch.join("hello-convcc");
    output(
        Command::new(&convcc)
            .arg("-o")
            .arg(&with_convcc)
            .arg(&hello)
            .env_remove("CONVERSE_INCLUDE")
            .env_remove("CONVERSE_LIB"),
    );
    runs(&prefix, &with_convcc);

    // 2. cc with pkg-config alone.
    let pkg_config_path = prefix.join("lib/pkgconfig");
    if have("pkg-config") {
        let flags = stdout(
            Command::new("pkg-config")
                .args(["--cflags", "--libs", "converse"])
                .env("PKG_CONFIG_PATH", &pkg_config_path),
        );
        let with_pkg_config = scratch.join("hello-pkg-config");
        output(
            Command::new("cc")
                .arg(&hello)
                .arg("-o")
                .arg(&with_pkg_config)
                .args(flags.split_whitespace()),
        );
        runs(&prefix, &with_pkg_config);
    }

    // 3. A minimal CMake project.
    if have("cmake") && have("pkg-config") {
        let project = scratch.join("cmake");
        std::fs::create_dir_all(&project).unwrap();
        std::fs::write(
            project.join("CMakeLists.txt"),
            format!(
                "cmake_minimum_required(VERSION 3.16)\n\
                 project(hello C)\n\
                 find_package(PkgConfig REQUIRED)\n\
                 pkg_check_modules(CONVERSE REQUIRED IMPORTED_TARGET converse)\n\
                 add_executable(hello {})\n\
                 target_link_libraries(hello PkgConfig::CONVERSE)\n",
                hello.display()
            ),
        )
        .unwrap();
        let build = project.join("build");
        output(
            Command::new("cmake")
                .arg("-S")
                .arg(&project)
                .arg("-B")
                .arg(&build)
                .env("PKG_CONFIG_PATH", &pkg_config_path),
        );
        output(Command::new("cmake").arg("--build").arg(&build));
        runs(&prefix, &build.join("hello"));
    }
}
