//! The C programs of `tests/c/onesided/` (one-sided communication, global
//! pointers, `CmiDMAAlloc`, persistent channels), built as a Charm++ user
//! builds Converse programs (their Makefile with `CHARMC` pointed at
//! `convcc`), run in one process and under `convrun` over shm and tcp.
mod common;

use common::{expect_ok, text};

const DIR: &str = "onesided";

fn direct(name: &str, args: &[&str]) -> std::process::Output {
    common::direct(DIR, name, args)
}

fn convrun(args: &[&str], name: &str) -> std::process::Output {
    common::convrun(DIR, args, name)
}

#[test]
fn the_value_types_are_laid_out_as_the_rust_definitions() {
    use converse_capi::persistent::PersistentReq;
    use converse_capi::rdma::CGlobalPtr;
    use std::mem::{offset_of, size_of};
    let out = direct("layout", &[]);
    expect_ok(
        &out,
        &[
            &format!(
                "PersistentReq {} pe {} maxBytes {} opaque {}",
                size_of::<PersistentReq>(),
                offset_of!(PersistentReq, pe),
                offset_of!(PersistentReq, max_bytes),
                offset_of!(PersistentReq, opaque)
            ),
            &format!(
                "GlobalPtr {} pe {} size {} addr {}",
                size_of::<CGlobalPtr>(),
                offset_of!(CGlobalPtr, pe),
                offset_of!(CGlobalPtr, size),
                offset_of!(CGlobalPtr, addr)
            ),
        ],
    );
}

const NETMODS: [&str; 2] = ["shm", "tcp"];

#[test]
fn puts_and_gets_between_neighbours_land_and_their_callbacks_run() {
    let lines = |pes: &str| {
        [
            format!("onesided: {pes} PEs, put and get of 8192 bytes checked, callbacks ran"),
            "onesided: regions unregistered".to_owned(),
        ]
    };
    let two = lines("2");
    let two: Vec<&str> = two.iter().map(String::as_str).collect();
    let four = lines("4");
    let four: Vec<&str> = four.iter().map(String::as_str).collect();
    expect_ok(&direct("onesided", &["+p", "2"]), &two);
    expect_ok(&direct("onesided", &["+p", "4", "++ppn", "2"]), &four);
    for netmod in NETMODS {
        expect_ok(&convrun(&["+p", "2", "++netmod", netmod], "onesided"), &two);
        // Two processes of two PEs: neighbours in and out of the process.
        expect_ok(
            &convrun(&["+p", "4", "++ppn", "2", "++netmod", netmod], "onesided"),
            &four,
        );
    }
}

#[test]
fn an_operation_on_unregistered_memory_ends_the_job_naming_it() {
    let cases = [
        (
            "refused",
            "CmiPut: one-sided operation on PE 1: a put of 64 bytes at 0x",
        ),
        (
            "refused_cb",
            "CmiGetCb: one-sided operation on PE 1: a get of 64 bytes at 0x",
        ),
    ];
    for (name, says) in cases {
        let mut outs = vec![direct(name, &["+p", "2"])];
        for netmod in NETMODS {
            outs.push(convrun(&["+p", "2", "++netmod", netmod], name));
        }
        for out in outs {
            let (stdout, stderr) = text(&out);
            assert_eq!(
                out.status.code(),
                Some(converse::ABORT_EXIT_CODE),
                "{name}\nstdout:\n{stdout}\nstderr:\n{stderr}"
            );
            assert!(stderr.contains(says), "{name}: {stderr}");
            assert!(
                stderr.contains("refused: no range registered in PE 1's process holds it"),
                "{name}: {stderr}"
            );
            assert!(stderr.contains("PE 0"), "{name}: {stderr}");
        }
    }
}

#[test]
fn global_pointers_and_dma_memory_are_read_and_written_from_another_pe() {
    let checked =
        "gptr: CmiSyncGet of 3000 bytes and CmiPut of 5000 into CmiDMAAlloc memory checked";
    expect_ok(
        &direct("gptr", &["+p", "2"]),
        &["gptr: dref on PE 0 local", checked],
    );
    for netmod in NETMODS {
        expect_ok(
            &convrun(&["+p", "2", "++netmod", netmod], "gptr"),
            &["gptr: dref on PE 0 null", checked],
        );
    }
}

#[test]
fn persistent_channels_carry_a_checked_stream_and_are_destroyed() {
    let line =
        |pes: usize| format!("persistent: {pes} PEs, 100 messages each on 2 channels checked");
    for name in ["persistent", "persistentpp"] {
        expect_ok(&direct(name, &["+p", "2"]), &[&line(2)]);
    }
    expect_ok(
        &direct("persistent", &["+p", "4", "++ppn", "2"]),
        &[&line(4)],
    );
    for netmod in NETMODS {
        expect_ok(
            &convrun(&["+p", "2", "++netmod", netmod], "persistent"),
            &[&line(2)],
        );
        expect_ok(
            &convrun(&["+p", "4", "++ppn", "2", "++netmod", netmod], "persistent"),
            &[&line(4)],
        );
    }
    expect_ok(
        &convrun(&["+p", "2", "++netmod", "shm"], "persistentpp"),
        &[&line(2)],
    );
}

#[test]
fn misuses_of_handles_and_requests_end_the_job_naming_them() {
    let cases = [
        (
            "source",
            "PE 0 aborting: CmiPut: sourceId 1 is not the calling PE 0",
        ),
        ("foreign", "PE 1 aborting: CmiWaitTest: handle 0x"),
        (
            "destroyed",
            "PE 0 aborting: CmiUsePersistentHandle: persistent handle 0x",
        ),
        (
            "request",
            "PE 0 aborting: CmiRegisterReceivePersistent: the request (pe 0, maxBytes 1048576) is not one CmiCreateReceiverPersistent made, or it was changed",
        ),
    ];
    for (mode, says) in cases {
        let out = direct("misuse", &["+p", "2", mode]);
        let (stdout, stderr) = text(&out);
        assert_eq!(
            out.status.code(),
            Some(converse::ABORT_EXIT_CODE),
            "{mode}\nstdout:\n{stdout}\nstderr:\n{stderr}"
        );
        assert!(stderr.contains(says), "{mode}: {stderr}");
    }
    let (_, stderr) = text(&direct("misuse", &["+p", "2", "foreign"]));
    assert!(stderr.contains("is PE 0's, not PE 1's"), "{stderr}");
    let (_, stderr) = text(&direct("misuse", &["+p", "2", "destroyed"]));
    assert!(stderr.contains("was destroyed"), "{stderr}");
}
