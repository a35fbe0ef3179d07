//! A tiny harness shared by the integration tests.
#![allow(dead_code)] // each test file uses a different subset

use converse::Converse;

/// The command line of a job of `pes` PEs in nodes of `ppn`.
pub fn args(pes: usize, ppn: usize) -> Vec<String> {
    ["test", "+p", &pes.to_string(), "++ppn", &ppn.to_string()]
        .map(String::from)
        .to_vec()
}

/// Runs `start` in normal mode on `pes` PEs (nodes of `ppn`) and returns the
/// job's exit code. Re-raises any PE panic.
pub fn run(pes: usize, ppn: usize, start: impl Fn(&[String]) + Send + Sync + 'static) -> i32 {
    Converse::new()
        .args(args(pes, ppn))
        .run(start)
        .unwrap_or_else(|e| panic!("bad command line: {e}"))
}

/// Runs `start` in user-calls-scheduler mode: the job ends when every PE's
/// `start` has returned (or at `exit`).
pub fn run_user(pes: usize, ppn: usize, start: impl Fn(&[String]) + Send + Sync + 'static) -> i32 {
    Converse::new()
        .args(args(pes, ppn))
        .run_user_scheduler(start)
        .unwrap_or_else(|e| panic!("bad command line: {e}"))
}

/// The little-endian `u64` at byte `at` of `msg`'s payload.
pub fn read_u64(msg: &converse::Message, at: usize) -> u64 {
    u64::from_le_bytes(msg.payload()[at..at + 8].try_into().unwrap())
}

/// A message for `handler` whose payload is `words` as little-endian `u64`s.
pub fn msg_u64(handler: usize, words: &[u64]) -> converse::Message {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    converse::Message::from_payload(handler, &bytes)
}

/// Runs `f` on a fresh thread and returns its result, failing the test if it
/// has not finished after `secs` seconds (a hang detector for jobs that
/// would otherwise block the test run; the stuck threads are left behind).
pub fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    });
    match rx.recv_timeout(std::time::Duration::from_secs(secs)) {
        Ok(Ok(value)) => value,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => panic!("the job did not finish within {secs} s: it hangs"),
    }
}

/// The bytes of the `ccs_killport` notice that reached `listener`: it must
/// already be waiting (the job sends it before it ends).
pub fn kill_notice(listener: &std::net::TcpListener) -> Vec<u8> {
    use std::io::Read;
    listener.set_nonblocking(true).unwrap();
    let (mut notice, _) = listener.accept().expect("the kill notice connected");
    notice.set_nonblocking(false).unwrap();
    notice
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut bytes = Vec::new();
    notice.read_to_end(&mut bytes).unwrap();
    bytes
}

/// The harness's name of test `name` in the module whose `module_path!()`
/// is `module` (`runtime::io` and `child_entry` give `io::child_entry`): what
/// a test that re-executes its binary for one child test passes to
/// `--exact`. Leaked: a test asks a few times.
pub fn test_path(module: &str, name: &str) -> &'static str {
    let below_crate = module.split_once("::").map_or("", |(_, m)| m);
    let path = if below_crate.is_empty() {
        name.to_string()
    } else {
        format!("{below_crate}::{name}")
    };
    Box::leak(path.into_boxed_str())
}
