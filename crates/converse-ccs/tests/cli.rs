//! The `ccs` tool, run as a program against the fake server.
mod fake_server;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use fake_server::{Answer, Config, FakeServer, Received};

/// Answers `echo` with the data, and `where` with the destination and
/// PE list.
fn handler(r: &Received) -> Option<Answer> {
    match r.handler.as_str() {
        "echo" => Some(Answer::Reply(r.data.clone())),
        "where" => Some(Answer::Reply(
            format!("{} {:?}", r.dest, r.pes).into_bytes(),
        )),
        "silent" => Some(Answer::NoReply),
        _ => None,
    }
}

fn ccs(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ccs"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A file of this test's own under the target directory.
fn temp_file(name: &str, contents: &[u8]) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("cli-{name}"));
    std::fs::write(&path, contents).unwrap();
    path
}

#[test]
fn the_reply_goes_to_stdout_unchanged() {
    let server = FakeServer::start(Config::default(), handler);
    let addr = server.addr.to_string();
    let out = ccs(&[&addr, "echo", "--pe", "3", "--data", "hello"], b"");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(out.stdout, b"hello");
    let r = &server.requests()[0];
    assert_eq!((r.dest, r.data.as_slice()), (3, &b"hello"[..]));

    // Binary data from standard input, to the default PE 0.
    let bytes: Vec<u8> = (0..=255).collect();
    let out = ccs(&[&addr, "echo", "--data", "-"], &bytes);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(out.stdout, bytes);
    assert_eq!(server.requests()[1].dest, 0);

    let file = temp_file("data", b"from a file\0");
    let arg = format!("@{}", file.display());
    let out = ccs(&[&addr, "echo", "--data", &arg], b"");
    assert_eq!(out.stdout, b"from a file\0");
}

#[test]
fn pes_and_all_multicast_and_broadcast() {
    let server = FakeServer::start(Config::default(), handler);
    let addr = server.addr.to_string();
    let out = ccs(&[&addr, "where", "--pes", "1,3,4"], b"");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(out.stdout, b"-3 [1, 3, 4]");
    let out = ccs(&[&addr, "where", "--all"], b"");
    assert_eq!(out.stdout, b"-1 []");
}

#[test]
fn a_key_file_authenticates() {
    let key = *b"0123456789abcdef";
    let server = FakeServer::start(
        Config {
            key: Some((2, key)),
            ..Config::default()
        },
        handler,
    );
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    let key_file = temp_file("key", format!("{hex}\n").as_bytes());
    let key_arg = key_file.to_str().unwrap();
    let addr = server.addr.to_string();
    let out = ccs(
        &[
            &addr, "echo", "--auth", key_arg, "--level", "2", "--data", "x",
        ],
        b"",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(out.stdout, b"x");
    let auth = server.requests()[0].auth.clone().expect("authenticated");
    assert_eq!(auth.level, 2);

    // The same key at a level the server has no key for.
    let out = ccs(&[&addr, "echo", "--auth", key_arg], b"");
    assert_eq!(out.status.code(), Some(1));
    let text = stderr(&out);
    assert!(
        text.starts_with("ccs: ") && text.contains(&addr) && text.contains("level 0"),
        "{text}"
    );

    let bad_key = temp_file("bad-key", b"not a key");
    let out = ccs(&[&addr, "echo", "--auth", bad_key.to_str().unwrap()], b"");
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("32 hex digits"), "{}", stderr(&out));
}

#[test]
fn failures_name_the_server_and_set_the_exit_status() {
    let server = FakeServer::start(Config::default(), handler);
    let addr = server.addr.to_string();

    let out = ccs(&[&addr, "silent"], b"");
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
    let text = stderr(&out);
    assert!(
        text.contains(&addr) && text.contains("without replying"),
        "{text}"
    );

    let out = ccs(&[&addr, "echo", "--pe", "9"], b"");
    assert_eq!(out.status.code(), Some(1));
    let text = stderr(&out);
    assert!(
        text.contains("PE 9 is out of range") && text.contains(&addr),
        "{text}"
    );

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed = listener.local_addr().unwrap().to_string();
    drop(listener);
    let out = ccs(&[&closed, "echo"], b"");
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains(&closed), "{}", stderr(&out));

    let out = ccs(&["nowhere", "echo"], b"");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with("ccs: nowhere: "),
        "{}",
        stderr(&out)
    );
}

#[test]
fn help_and_bad_arguments() {
    let out = ccs(&["--help"], b"");
    assert!(out.status.success());
    let usage = String::from_utf8(out.stdout).unwrap();
    assert!(usage.starts_with("Usage: ccs HOST:PORT HANDLER"), "{usage}");
    for option in [
        "--pe",
        "--all",
        "--pes",
        "--data",
        "--auth",
        "--level",
        "--timeout",
    ] {
        assert!(usage.contains(option), "{option}");
    }

    let out = ccs(&["127.0.0.1:1"], b"");
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("HANDLER"), "{}", stderr(&out));
}
