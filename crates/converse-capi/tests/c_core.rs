//! The C and C++ programs of `tests/c/core/` (start-up, messages,
//! handlers, sends, the scheduler, Cpv and Csv), built as a Charm++ user
//! builds Converse programs (their Makefile with `CHARMC` pointed at
//! `convcc`), run in one process and under `convrun` over shm and tcp.
mod common;

use std::process::Command;

use converse::MsgHeader;

use common::{expect_ok, text};

const DIR: &str = "core";

fn direct(name: &str, args: &[&str]) -> std::process::Output {
    common::direct(DIR, name, args)
}

fn convrun(args: &[&str], name: &str) -> std::process::Output {
    common::convrun(DIR, args, name)
}

#[test]
fn the_header_is_laid_out_as_the_rust_definition() {
    let out = direct("layout", &[]);
    let (stdout, _) = text(&out);
    let size = std::mem::size_of::<MsgHeader>();
    let mut want = vec![format!("size {size} {}", converse::MSG_HEADER_SIZE)];
    macro_rules! field {
        ($($f:ident),*) => { $(want.push(format!("{} {}", stringify!($f), std::mem::offset_of!(MsgHeader, $f)));)* };
    }
    field!(handler);
    // C's `xhdl` and `info` are the low and high halves of the core's
    // 32-bit `info` slot (little-endian), as the seed balancer splits it.
    let info = std::mem::offset_of!(MsgHeader, info);
    assert_eq!(converse_ext::cld::XHANDLER_BITS, 16);
    want.push(format!("xhdl {info} 2"));
    want.push(format!("info {} 2", info + 2));
    field!(total_size, src_pe, dest, root, flags, coll);
    assert_eq!(stdout.lines().collect::<Vec<_>>(), want);
}

#[test]
fn hello_in_one_process_and_in_two() {
    let out = direct("hello", &["+p", "3"]);
    expect_ok(
        &out,
        &[
            "hello from PE 0 of 3 (node 0 of 1, rank 0), hello, 1 args",
            "hello from PE 2 of 3 (node 0 of 1, rank 2), hello, 1 args",
            "PE 0 heard from all 3 PEs",
        ],
    );
    let out = convrun(&["+p", "4", "++ppn", "2"], "hello");
    expect_ok(
        &out,
        &[
            "hello from PE 3 of 4 (node 1 of 2, rank 1), hello, 1 args",
            "PE 0 heard from all 4 PEs",
        ],
    );
}

/// What `hello` prints on every PE of a `pes`-PE job of `ppn`-PE
/// processes started by `convrun` (`args` counts the program's name), and
/// the launcher's line saying so.
fn hello_lines(pes: usize, ppn: usize, args: usize) -> Vec<String> {
    let nodes = pes / ppn;
    let mut want = vec![format!(
        "converse: {pes} PEs in {nodes} processes of {ppn} PE{}, netmod shm",
        if ppn == 1 { "" } else { "s" }
    )];
    want.extend((0..pes).map(|pe| {
        format!(
            "hello from PE {pe} of {pes} (node {} of {nodes}, rank {}), hello, {args} args",
            pe / ppn,
            pe % ppn
        )
    }));
    want.push(format!("PE 0 heard from all {pes} PEs"));
    want
}

#[test]
fn convrun_takes_runtime_flags_after_the_program_as_charmrun_does() {
    // (flags before the program, words after it, PEs per process, the
    // program's argc).
    let cases: [(&[&str], &[&str], usize, usize); 9] = [
        (&["+p4"], &[], 1, 1),
        (&[], &["+p4"], 1, 1),
        (&["+p", "4"], &[], 1, 1),
        (&[], &["+p", "4"], 1, 1),
        (&["+p", "4", "++ppn", "2"], &[], 2, 1),
        (&[], &["+p", "4", "++ppn", "2"], 2, 1),
        (&[], &["+p4", "++ppn2"], 2, 1),
        (&["+p", "4"], &["++ppn", "2"], 2, 1),
        // The program's own arguments stay, the runtime's go.
        (&[], &["extra", "+p", "4", "++ppn", "2", "more"], 2, 3),
    ];
    for (before, after, ppn, args) in cases {
        let out = common::convrun_with(DIR, before, "hello", after);
        let want = hello_lines(4, ppn, args);
        let want: Vec<&str> = want.iter().map(String::as_str).collect();
        let (stdout, _) = text(&out);
        assert_eq!(
            stdout
                .lines()
                .filter(|l| l.starts_with("hello from PE"))
                .count(),
            4,
            "{before:?} hello {after:?}:\n{stdout}"
        );
        expect_ok(&out, &want);
    }
}

#[test]
fn a_stack_message_goes_round_the_ring_and_every_pe_leaves_its_scheduler() {
    expect_ok(
        &direct("ring", &["+p", "4"]),
        &["ring: 50 laps of 4 PEs, 200 hops, size 40"],
    );
    expect_ok(
        &direct("ring", &["+p", "1"]),
        &["ring: 50 laps of 1 PEs, 50 hops, size 40"],
    );
    for netmod in ["shm", "tcp"] {
        let out = convrun(&["+p", "4", "++ppn", "2", "++netmod", netmod], "ring");
        expect_ok(&out, &["ring: 50 laps of 4 PEs, 200 hops, size 40"]);
    }
}

#[test]
fn broadcast_receivers_write_their_own_copy_and_forward_it() {
    // Sum of 100 + pe over the PEs: each wrote into its copy.
    let lines = ["PE 0: enqueued message ran", "bcast: sum 406 from 4 PEs"];
    expect_ok(&direct("bcast", &["+p", "4"]), &lines);
    expect_ok(&direct("bcast", &["+p", "4", "++ppn", "2"]), &lines);
    expect_ok(
        &convrun(&["+p", "3"], "bcast"),
        &["bcast: sum 303 from 3 PEs"],
    );
}

#[test]
fn node_sends_groups_multiple_sends_vector_sends_and_reductions() {
    let all = [
        "phase 1 done",
        "phase 2 done",
        "phase 3 done",
        "phase 4 done",
        "reduce: sum 10 on PE 0",
        "list reduce: sum 20 on PE 0",
        "specific message 9 delivered first",
        "other message 2 delivered after",
        "spanning tree: root 0, 3 edges",
    ];
    expect_ok(&direct("collectives", &["+p", "4", "++ppn", "2"]), &all);
    for netmod in ["shm", "tcp"] {
        let out = convrun(
            &["+p", "4", "++ppn", "2", "++netmod", netmod],
            "collectives",
        );
        expect_ok(&out, &all);
    }
    expect_ok(
        &direct("collectives", &["+p", "2"]),
        &["reduce: sum 3 on PE 0", "spanning tree: root 0, 1 edges"],
    );
}

#[test]
fn cmi_abort_names_the_pe_and_fails_the_job() {
    for out in [
        direct("abort", &["+p", "2"]),
        convrun(&["+p", "2"], "abort"),
    ] {
        let (_, stderr) = text(&out);
        assert_eq!(
            out.status.code(),
            Some(converse::ABORT_EXIT_CODE),
            "{stderr}"
        );
        assert!(
            stderr.contains("PE 1 aborting: the C program gave up (42)"),
            "{stderr}"
        );
    }
}

#[test]
fn a_c_exit_in_the_middle_of_the_job_names_the_pe_and_fails_the_job() {
    let out = direct("exit", &["+p", "2"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("converse: PE 1 called exit(3) while the job was running"),
        "{stderr}"
    );
    let out = convrun(&["+p", "2"], "exit");
    let (_, stderr) = text(&out);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("PE 1 called exit(3) while the job was running"),
        "{stderr}"
    );
}

/// What `cpv` prints in a job of `pes` PEs, `ppn` per logical node, whose
/// main threads (those ConverseInit returned on: the first PE of each
/// process) are `mains`: each PE its own Cpv and the PEs that marked its
/// node's Csv (its node's, all of them), each main thread its log.
fn cpv_lines(pes: usize, ppn: usize, mains: &[usize]) -> Vec<String> {
    let mut want: Vec<String> = (0..pes)
        .map(|pe| {
            let node = pe / ppn;
            let marked: Vec<String> = (node * ppn..(node + 1) * ppn)
                .map(|p| p.to_string())
                .collect();
            format!(
                "cpv: PE {pe} of {pes} (node {node}, rank {}): Cpv {}, its node's Csv marked by PEs {}",
                pe % ppn,
                1000 + pe,
                marked.join(" ")
            )
        })
        .collect();
    want.extend(
        mains
            .iter()
            .map(|pe| format!("cpv: PE {pe} of {pes} log has 1 line(s): note from PE {pe}")),
    );
    want
}

/// Checks `cpv`'s output: exactly [`cpv_lines`].
fn expect_cpv(out: &std::process::Output, pes: usize, ppn: usize, mains: &[usize]) {
    let want = cpv_lines(pes, ppn, mains);
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    expect_ok(out, &want);
    // Nothing else from the program: no other PE got main.
    let (stdout, _) = text(out);
    let printed = stdout.lines().filter(|l| l.starts_with("cpv: ")).count();
    assert_eq!(printed, want.len(), "{stdout}");
}

#[test]
fn cpp_cpv_and_csv_per_pe_and_per_node_in_initret_mode() {
    expect_cpv(&direct("cpv", &["+p", "1"]), 1, 1, &[0]);
    expect_cpv(&direct("cpv", &["+p", "2"]), 2, 2, &[0]);
    // Two logical nodes in one process: two Csv values.
    expect_cpv(&direct("cpv", &["+p", "4", "++ppn", "2"]), 4, 2, &[0]);
    // Under convrun each process's main thread is a PE that got main.
    expect_cpv(&convrun(&["+p", "2"], "cpv"), 2, 1, &[0, 1]);
    expect_cpv(&convrun(&["+p", "4", "++ppn", "2"], "cpv"), 4, 2, &[0, 2]);
    let flags_after = common::convrun_with(DIR, &[], "cpv", &["+p", "4", "++ppn", "2"]);
    expect_cpv(&flags_after, 4, 2, &[0, 2]);
}

#[test]
fn c_handler_tables_that_differ_are_named_by_function() {
    for out in [
        direct("mismatch", &["+p", "4", "++ppn", "2"]),
        convrun(&["+p", "2"], "mismatch"),
    ] {
        let (_, stderr) = text(&out);
        assert!(!out.status.success(), "{stderr}");
        assert!(stderr.contains("handler tables differ"), "{stderr}");
        // Index 4: the second registered handler (3k + 1); the first is
        // the C API's own, the struct reductions' result handler.
        assert!(stderr.contains("at index 4"), "{stderr}");
        assert!(
            stderr.contains("C function first_handler (mismatch+0x"),
            "{stderr}"
        );
        assert!(
            stderr.contains("C function second_handler (mismatch+0x"),
            "{stderr}"
        );
    }
}

#[test]
fn a_program_linked_with_the_shared_library_runs() {
    let dir = common::programs(DIR); // builds the libraries too
    let out_dir = common::profile_dir().join("c-tests").join("shared");
    std::fs::create_dir_all(&out_dir).unwrap();
    let program = out_dir.join("hello-shared");
    let st = Command::new(env!("CARGO_BIN_EXE_convcc"))
        .args(["-shared-converse", "-o"])
        .arg(&program)
        .arg(dir.join("hello.c"))
        .env("CONVERSE_LIB", common::profile_dir())
        .status()
        .unwrap();
    assert!(st.success());
    let ldd = Command::new("ldd").arg(&program).output().unwrap();
    let ldd = String::from_utf8_lossy(&ldd.stdout);
    assert!(ldd.contains("libconverse_capi.so"), "{ldd}");
    let out = common::run_with_deadline({
        let mut c = Command::new(&program);
        c.args(["+p", "3"]);
        c
    });
    expect_ok(&out, &["PE 0 heard from all 3 PEs"]);
}

/// A build system's link (`cc … $(convcc --libs)`) from a build
/// directory gets the seed balancer's Charm++ names too, as an install's
/// `--libs` gives them (`convcc` compiles them beside the library).
#[test]
fn convcc_libs_in_a_build_directory_link_the_seed_balancer() {
    common::programs(DIR); // builds the libraries too
    let out_dir = common::profile_dir().join("c-tests").join("libs-flags");
    std::fs::create_dir_all(&out_dir).unwrap();
    let source = out_dir.join("uses_cld.c");
    std::fs::write(
        &source,
        "#include <stdio.h>\n#include \"converse.h\"\n#include \"cldb.h\"\n\
         int main(void) {\n  void (*volatile enqueue)(int, void *, int) = CldEnqueue;\n  \
         printf(\"linked %d\\n\", enqueue != 0);\n  return 0;\n}\n",
    )
    .unwrap();
    let flags = |which: &str| -> Vec<String> {
        let out = Command::new(env!("CARGO_BIN_EXE_convcc"))
            .arg(which)
            .env("CONVERSE_LIB", common::profile_dir())
            .output()
            .unwrap();
        assert!(out.status.success(), "convcc {which}: {out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        text.split_whitespace().map(String::from).collect()
    };
    let libs = flags("--libs");
    assert!(
        libs.iter().any(|f| f.ends_with("converse-rs/cld.o")),
        "{libs:?}"
    );
    let program = out_dir.join("uses_cld");
    let st = Command::new("cc")
        .args(flags("--cflags"))
        .arg(&source)
        .arg("-o")
        .arg(&program)
        .args(&libs)
        .status()
        .unwrap();
    assert!(st.success(), "the link with convcc --libs failed");
    let out = common::run_with_deadline(Command::new(&program));
    expect_ok(&out, &["linked 1"]);
}

#[test]
fn convcc_says_what_is_wrong_with_a_command_line() {
    let out = Command::new(env!("CARGO_BIN_EXE_convcc"))
        .args(["-language", "charm++", "x.C"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("convcc: -language charm++"), "{stderr}");
    // A compile error is the compiler's, and convcc fails with it.
    let dir = std::env::temp_dir().join(format!("convcc-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("bad.c"),
        "int main(void) { return undefined_thing; }\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_convcc"))
        .arg("-c")
        .arg("bad.c")
        .current_dir(&dir)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("undefined_thing"), "{stderr}");
    // The compiler's name is `cc` or whatever `CC` says.
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("convcc: `") && l.ends_with(")") && l.contains("failed")),
        "{stderr}"
    );
}
