//! Atomic I/O (`CmiPrintf`, `CmiError`, `CmiScanf`), checked on a child
//! process whose standard streams the test controls.
use std::io::Write;
use std::process::{Command, Stdio};

use crate::common;
use converse::Converse;

const SCENARIO: &str = "CONVERSE_IO_SCENARIO";

/// Runs this test binary again as a child executing `scenario`, feeding it
/// `stdin`; returns (exit code, stdout, stderr).
fn child(scenario: &str, stdin: &str) -> (i32, String, String) {
    let mut c = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            common::test_path(module_path!(), "child_entry"),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(SCENARIO, scenario)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let out = c.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn child_entry() {
    let Ok(scenario) = std::env::var(SCENARIO) else {
        return;
    };
    let code = match scenario.as_str() {
        "scan" => Converse::new()
            .args(["io", "+p", "2"])
            .run(|_| {
                if converse::my_pe() == 0 {
                    let nums: Vec<i32> = converse::scan(3).unwrap();
                    let word = converse::scan_line().unwrap();
                    let bad = converse::scan::<i32>(1);
                    let eof = converse::scan_line().unwrap();
                    converse::cmi_printf!(
                        "nums={nums:?} word={word:?} bad={} eof={eof:?}\n",
                        bad.is_err()
                    );
                    converse::exit(0);
                }
            })
            .unwrap(),
        "print" => Converse::new()
            .args(["io", "+p", "4"])
            .run(|_| {
                let me = converse::my_pe();
                let body = char::from(b'a' + me as u8).to_string().repeat(300);
                for i in 0..200 {
                    converse::cmi_printf!("PE{me} {i} {body}\n");
                    converse::cmi_error!("PE{me} {i} {body}\n");
                }
                converse::node_barrier();
                if me == 0 {
                    converse::exit(0);
                }
                converse::exit_scheduler();
            })
            .unwrap(),
        other => panic!("unknown scenario {other}"),
    };
    std::process::exit(code);
}

#[test]
fn scan_reads_whole_lines_and_fields() {
    let (code, out, err) = child("scan", "1 2 3\nhello world\nnot-a-number\n");
    assert_eq!(code, 0, "stderr: {err}");
    assert!(
        out.contains(r#"nums=[1, 2, 3] word=Some("hello world") bad=true eof=None"#),
        "stdout: {out}"
    );
}

#[test]
fn printf_and_error_lines_never_interleave() {
    let (code, out, err) = child("print", "");
    assert_eq!(code, 0, "stderr: {err}");
    for stream in [&out, &err] {
        // The test harness may print "test child_entry ... " before the
        // first line of the child's own output: skip to "PE".
        let lines: Vec<&str> = stream
            .lines()
            .filter_map(|l| l.find("PE").map(|at| &l[at..]))
            .collect();
        assert_eq!(lines.len(), 4 * 200);
        for line in lines {
            let mut parts = line.split(' ');
            let pe: usize = parts.next().unwrap()[2..].parse().unwrap();
            let _i: usize = parts.next().unwrap().parse().unwrap();
            let body = parts.next().unwrap();
            let c = char::from(b'a' + pe as u8);
            assert!(
                body.len() == 300 && body.chars().all(|x| x == c),
                "torn line: {line}"
            );
            assert!(parts.next().is_none(), "torn line: {line}");
        }
    }
}
