//! The GAMMA programs of `tests/c/gamma/` (`gamma.h` over
//! `converse-gamma`), built with their Makefile and `convcc`. A GAMMA
//! program is one node per process: each runs under `convrun` (`+p N`,
//! one process per node) and started by hand, where `gamma_init(N, ...)`
//! restarts it as N processes through `convrun` (or, for one node, runs
//! in the process itself).
mod common;

use std::process::Output;

use common::{expect_ok, text};
use converse_gamma::Error;

const DIR: &str = "gamma";

fn direct(name: &str) -> Output {
    common::direct(DIR, name, &[])
}

fn convrun(args: &[&str], name: &str) -> Output {
    common::convrun(DIR, args, name)
}

#[test]
fn one_node_in_one_process() {
    let deadlock = Error::Deadlock(String::new()).code();
    let want = [
        format!(
            "single: before gamma_init, gamma_my_node() = {}",
            Error::NotInitialized.code()
        ),
        format!("single: a wait that can never end returned {deadlock}"),
        "single: gamma_time goes forward".to_string(),
        "single: done, parallel pid positive".to_string(),
    ];
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    let out = direct("single");
    expect_ok(&out, &want);
    let (stdout, _) = text(&out);
    // Allowed, or refused by the locked-memory limit.
    let refused = format!(
        "single: gamma_mlock returned {}",
        Error::Lock(String::new()).code()
    );
    assert!(
        stdout
            .lines()
            .any(|l| l == "single: gamma_mlock returned 0" || l == refused),
        "{stdout}"
    );
    expect_ok(&convrun(&["+p", "1"], "single"), &want);
}

#[test]
fn a_cxx_program_includes_gamma_h() {
    expect_ok(
        &direct("cxx"),
        &["cxx: gamma_exit returned 0, 0 handler calls"],
    );
}

#[test]
fn ping_pong_through_active_ports() {
    let want = [
        "pingpong: node 0 of 2: 200 messages, last value 400, gamma_exit 0",
        "pingpong: node 1 of 2: 200 messages, last value 399, gamma_exit 0",
    ];
    expect_ok(&convrun(&["+p", "2"], "pingpong"), &want);
    // Started by hand: gamma_init(2, ...) restarts it through convrun.
    expect_ok(&direct("pingpong"), &want);
}

#[test]
fn go_ahead_buffers_gather_and_are_posted_again() {
    let want = [
        "gather: 6 messages filled 3 posts: AAAABBBB CCCCDDDD EEEEFFFF",
        "gather: \"abcd\" -> \"abcd........ZZZZ\"",
        "gather: \"efgh\" -> \"abcdefghXXXXZZZZ\"",
        "gather: \"ijklmn\" -> \"abcdefghijklZZZZ\"",
        "gather: \"op\" -> \"opcdefghijklZZZZ\"",
        "gather: done",
    ];
    expect_ok(&convrun(&["+p", "2"], "gather"), &want);
    expect_ok(&direct("gather"), &want);
}

#[test]
fn non_blocking_and_flow_controlled_sends() {
    let refusals = format!(
        "isend: refusals: first piece of 21 bytes {}, unknown handle {} {}",
        Error::FirstPieceTooLong(21).code(),
        Error::UnknownHandle(0).code(),
        Error::UnknownHandle(0).code()
    );
    let want = [
        "isend: 5 queued flow-controlled sends completed in turn",
        refusals.as_str(),
        "isend: done",
    ];
    expect_ok(&convrun(&["+p", "2"], "isend"), &want);
    expect_ok(&direct("isend"), &want);
}

#[test]
fn a_broadcast_reaches_every_node_and_barriers_hold() {
    for (out, n) in [
        (convrun(&["+p", "3"], "bcast"), 3),
        (convrun(&["+p", "2"], "bcast"), 2),
        (direct("bcast"), 3),
    ] {
        let want: Vec<String> = (0..n)
            .flat_map(|k| {
                [
                    format!("bcast: node {k} of {n} got the {} others' numbers", n - 1),
                    format!("bcast: node {k} passed 5 barriers"),
                ]
            })
            .collect();
        let want: Vec<&str> = want.iter().map(String::as_str).collect();
        expect_ok(&out, &want);
    }
}

#[test]
fn errors_carry_the_documents_values() {
    let codes = [
        Error::SelfConnection(5).code(),
        Error::BadNode(7).code(),
        Error::BadParPid(255).code(),
        Error::BadBuffer(String::new()).code(),
        Error::BadBuffer(String::new()).code(),
        Error::NotOutput(6).code(),
        Error::BadBuffer(String::new()).code(),
        Error::BadBuffer(String::new()).code(),
        Error::UnknownHandle(12345).code(),
    ];
    let refusals = format!(
        "errors: refusals {}",
        codes.map(|c| c.to_string()).join(" ")
    );
    let before = format!("errors: before gamma_init {}", Error::NotInitialized.code());
    // In the program's order: a length above isize::MAX given to
    // set_passive_port, set_active_port, then (port 10 set) a null buffer
    // with a length to post_recv, a length above isize::MAX to post_recv
    // twice, a null buffer to attach_buffer (with the port's 4 bytes), to
    // send, as a send_2p's second piece and to isend: refused as a bad
    // buffer before any mirror is made; mlock and munlock of a null
    // address: a lock error.
    let bad = Error::BadBuffer(String::new()).code();
    let lock = Error::Lock(String::new()).code();
    let buffers = format!(
        "errors: buffers {}",
        [bad, bad, bad, bad, bad, bad, bad, bad, bad, lock, lock]
            .map(|c| c.to_string())
            .join(" ")
    );
    let want = [
        before.as_str(),
        refusals.as_str(),
        buffers.as_str(),
        // The refused calls left port 10 bound to its first buffer.
        "errors: port 10 kept its buffer: KEEP",
        // GAMMA_ERR_MSGTOOLONG is 3; one error on each semaphore.
        "errors: active port: gamma_wait -1, gamma_errno 3 on port 1; passive port: gamma_wait -1",
    ];
    expect_ok(&convrun(&["+p", "2"], "errors"), &want);
    expect_ok(&direct("errors"), &want);
}
