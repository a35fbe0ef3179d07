//! The C and C++ programs of `tests/c/cpm/`: CPM (Converse parameter
//! marshalling), built as a Charm++ user builds them (their Makefile runs
//! `$(CHARMC) -gen-cpm F.c`, then compiles `F.c`, with `CHARMC` pointed at
//! `convcc`), run in one process (`+p 1`, `+p 3`) and under `convrun` with
//! two processes. Each program prints what arrived, and in which order;
//! nothing depends on timings.
mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{expect_ok, text};

const DIR: &str = "cpm";

fn direct(name: &str, args: &[&str]) -> Output {
    common::direct(DIR, name, args)
}

fn convrun(args: &[&str], name: &str) -> Output {
    common::convrun(DIR, args, name)
}

fn expect_lines(out: &Output, lines: &[String]) {
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    expect_ok(out, &lines);
}

/// `prog` in one process with 1 and 3 PEs, and under convrun with 2
/// processes of one PE: each run's expected lines from its PE count.
fn on_every_layout(prog: &str, want: impl Fn(usize) -> Vec<String>) {
    for pes in ["1", "3"] {
        expect_lines(&direct(prog, &["+p", pes]), &want(pes.parse().unwrap()));
    }
    expect_lines(&convrun(&["+p", "2"], prog), &want(2));
}

#[test]
fn the_manuals_print_integer_goes_to_every_other_pe() {
    on_every_layout("myprog", |pes| {
        let mut lines: Vec<String> = (1..pes)
            .flat_map(|pe| {
                [
                    format!("PE {pe}: {}", 1000 + pe),
                    format!("PE 0: PE {pe} printed"),
                ]
            })
            .collect();
        lines.push(format!("PE 0: all {} other PEs printed", pes - 1));
        lines
    });
}

#[test]
fn the_manuals_program_arguments_travel_as_cpmdim_and_cpmstr() {
    for (pes, to) in [("1", 0), ("3", 1)] {
        expect_ok(
            &direct("example2", &["+p", pes, "alpha", "beta gamma", ""]),
            &[
                &format!("PE {to}: The program's arguments are: example2 [alpha] [beta gamma] []"),
                &format!("PE {to}: measurements: 4 values, sum 7.75, 0 strings"),
            ],
        );
    }
    // Under convrun the arguments cross to the other process.
    expect_ok(
        &convrun(&["+p", "2"], "example2"),
        &[
            "PE 1: The program's arguments are: example2",
            "PE 1: measurements: 4 values, sum 7.75, 0 strings",
        ],
    );
}

#[test]
fn the_manuals_user_types_are_packed_and_unpacked() {
    // Each coordinate went through CpmPack (x and y swapped) and CpmUnpack
    // (swapped back); the arguments were copied when Cpm_show returned.
    on_every_layout("example3", |pes| {
        vec![format!(
            "PE {}: c (1.5, -2.5), *p 42, 3 coordinates summing to (6.0, 60.0), 4 ints summing to 10",
            pes - 1
        )]
    });
}

/// What `dest` prints with `pes` PEs.
fn dest_lines(pes: usize) -> Vec<String> {
    let mut lines = vec![
        format!(
            "PE 0: CpmSend: {} answers to CpmALL, CpmOTHERS and one PE",
            2 * pes
        ),
        format!("PE {}: hello via one PE", pes - 1),
        "PE 0: right_now(7) called".into(),
        "PE 0: the direct launcher returned its send function's result".into(),
        format!("PE {}: tagged_call(5) arrived with tag 42", pes - 1),
        "PE 0: the tagged launcher returned its send function's result".into(),
        "PE 0: all destinations done".into(),
    ];
    for pe in 0..pes {
        lines.push(format!("PE {pe}: hello via CpmALL"));
        if pe != 0 {
            lines.push(format!("PE {pe}: hello via CpmOTHERS"));
        }
        for (batch, n) in [
            ("FIFO", 3),
            ("LIFO", 3),
            ("IFIFO", 8),
            ("ILIFO", 4),
            ("B", 4),
            ("general", 4),
        ] {
            let order: Vec<String> = (0..n).map(|i: usize| i.to_string()).collect();
            lines.push(format!("PE {pe}: {batch} ran {}", order.join(" ")));
        }
        lines.push(format!("PE {pe}: CpmEnqueue: 0 out of order"));
        lines.push(format!(
            "PE {pe}: thread order 11 21 12 22, reply {}, in threads",
            100 * ((pe + 1) % pes)
        ));
        lines.push(format!("PE {pe}: enqueued everywhere"));
        lines.push(format!("PE {pe}: in a thread everywhere (thread)"));
    }
    lines
}

#[test]
fn every_destination_sends_enqueues_in_order_makes_threads_and_the_programs_own() {
    on_every_layout("dest", dest_lines);
    // Nobody else heard CpmOTHERS with one PE.
    let (stdout, _) = text(&direct("dest", &["+p", "1"]));
    assert!(!stdout.contains("via CpmOTHERS"), "{stdout}");
}

#[test]
fn two_files_with_their_own_cpm_headers_and_one_without_invokables() {
    on_every_layout("multi", |pes| {
        let last = pes - 1;
        vec![
            "PE 0: CpmIndex_report names a handler: yes; multi_none.c has none {}".into(),
            format!("PE {last}: main's report(1)"),
            format!("PE {last}: other_hello(2)"),
            format!("PE {last}: other's report(20)"),
            "PE 0: report from multi_main.c".into(),
            "PE 0: report from multi_other.c".into(),
            "PE 0: both files reported".into(),
        ]
    });
    // The file without an invokable got its header all the same.
    let header = std::fs::read_to_string(common::programs(DIR).join("multi_none.cpm.h")).unwrap();
    assert!(
        header.contains("static CPM_UNUSED_ void CpmInitializeThisModule(void) {"),
        "{header}"
    );
    assert!(!header.contains("CmiRegisterHandler"), "{header}");
}

#[test]
fn a_cpp_source_is_scanned_and_its_launcher_works() {
    on_every_layout("cxx", |pes| {
        vec![format!("PE {}: hello C++, 1 2 3", pes - 1)]
    });
}

#[test]
fn misuse_ends_the_job_naming_the_call() {
    for (mode, message) in [
        (
            "noinit",
            "PE 0 aborting: CpmEnqueueFIFO: CpmModuleInit() was not called on PE 0",
        ),
        (
            "nomodule",
            "PE 0 aborting: Cpm_take: CpmInitializeThisModule() of its file was not called on PE 0",
        ),
        (
            "badpe",
            "PE 0 aborting: CpmSend(2): no such PE (the job has 2; CpmALL and CpmOTHERS are -1 and -2)",
        ),
        (
            "negdim",
            "PE 0 aborting: Cpm_take: argument 1 (the CpmDim of argument 2) is -1",
        ),
    ] {
        let out = direct("misuse", &["+p", "2", mode]);
        let (_, stderr) = text(&out);
        assert_eq!(
            out.status.code(),
            Some(converse::ABORT_EXIT_CODE),
            "{mode}: {stderr}"
        );
        assert!(stderr.contains(message), "{mode}: {stderr}");
    }
}

fn convcc(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_convcc"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("convcc runs")
}

#[test]
fn an_unknown_type_is_an_error_naming_file_and_line() {
    let dir = common::programs(DIR);
    let out = convcc(&dir, &["-gen-cpm", "badtype.c"]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "badtype.c:10: error: CpmInvokable draw: argument 2 has unknown type `widget`"
        ),
        "{stderr}"
    );
    assert!(!dir.join("badtype.cpm.h").exists());
}

#[test]
fn the_header_is_written_beside_its_source_as_charmc_does() {
    let dir = common::programs(DIR);
    let sub = dir.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::copy(dir.join("myprog.c"), sub.join("myprog.c")).unwrap();
    let _ = std::fs::remove_file(sub.join("myprog.cpm.h"));
    let out = convcc(&dir, &["-gen-cpm", "sub/myprog.c", "-DUNUSED=1"]);
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let header = std::fs::read_to_string(sub.join("myprog.cpm.h")).unwrap();
    assert!(
        header.contains("from sub/myprog.c: do not edit"),
        "{header}"
    );
    for f in ["finish", "ack", "print_integer"] {
        assert!(header.contains(&format!("void *Cpm_{f}(CpmDestination CpmD")));
    }
}
