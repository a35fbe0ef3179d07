//! `cargo xtask`: the workspace's tasks (the alias is in
//! `.cargo/config.toml`).
//!
//! - `cargo xtask install --prefix DIR`: builds the C and C++ users' tools
//!   and libraries and puts them under `DIR` (see [`install`]).
//!
//! A task is a plain program: it runs `cargo` and the C compiler as
//! commands, and says what failed and how to fix it.
use std::process::ExitCode;

mod install;

const USAGE: &str = "\
usage: cargo xtask TASK [OPTIONS]

tasks:
  install --prefix DIR [--debug] [--no-build]
      build convcc, convrun, cpm, ccs and libconverse_capi (release; --debug
      for the debug build) and install them with the headers and converse.pc
      under DIR (--no-build: install what is built already)

  --help      print this text
  --version   print the workspace's version
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let done = match args.first().map(String::as_str) {
        Some("install") => install::Options::parse(&args[1..]).and_then(|o| install::run(&o)),
        Some("--help" | "-h" | "help") => {
            print!("{USAGE}");
            Ok(())
        }
        Some("--version") => {
            println!("xtask {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
        Some(other) => Err(format!("no task `{other}`\n\n{USAGE}")),
        None => Err(format!("no task given\n\n{USAGE}")),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("xtask: {why}");
            ExitCode::FAILURE
        }
    }
}
