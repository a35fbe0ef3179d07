//! The programs of `tests/c/charmlike/`, written the way Charm++'s own
//! Converse tests and benchmarks are, and built the way their Makefiles
//! build them (`$(CHARMC) file.c` compiles only, as charmc does; a library
//! made with `$(CHARMC) -o libX.a`; `-language converse++` links), run in
//! one process and under `convrun` over shm, tcp and two pretend hosts.
//!
//! The suite's parts: a ring of stack messages readied by
//! `CmiInitMsgHeader`, the CPU-topology calls checked against each other
//! and against the hosts `convrun` made, the `CmiGetArg*` options read by
//! every PE in its module init, and Cpv/Ctv/Csv with their `Initialized`
//! checks. The C++ ping-pong starts from `CmiStartFn mymain(...)`.
mod common;

use std::process::Output;

use common::expect_ok;

const DIR: &str = "charmlike";

/// The suite's own options, and one argument left for the program.
const SUITE_ARGS: &[&str] = &[
    "-iters",
    "3",
    "-scale=2.5",
    "-name",
    "bob",
    "-verbose",
    "-big",
    "0x10000000000",
    "rest",
];

fn suite_lines(pes: usize) -> Vec<String> {
    vec![
        "suite: ring passed".into(),
        "suite: topo passed".into(),
        "args: every PE read -iters 3 -scale 2.5 -big 2^40 -name bob -verbose".into(),
        "suite: args passed".into(),
        "suite: vars passed".into(),
        format!("suite: all 4 parts passed on {pes} PEs"),
        "converse-rs> cpu affinity not enabled (+setcpuaffinity or +pemap pins PEs)".into(),
    ]
}

fn expect(out: &Output, lines: &[String]) {
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    expect_ok(out, &lines);
}

/// The lines of the suite's topology part on `hosts` hosts of `per_host`
/// PEs each, the first PE of host `h` being PE `h` (convrun places
/// processes on the pretend hosts in turn).
fn topo_lines(hosts: usize, per_host: usize) -> Vec<String> {
    (0..hosts)
        .map(|h| format!("topo: host {h} holds {per_host} PEs from PE {h}"))
        .collect()
}

#[test]
fn a_charm_style_suite_runs_in_one_process_and_across_processes() {
    for layout in [&["+p", "1"][..], &["+p", "3"], &["+p", "4", "++ppn", "2"]] {
        let mut args: Vec<&str> = SUITE_ARGS.to_vec();
        args.extend_from_slice(layout);
        let out = common::direct(DIR, "suite", &args);
        let pes: usize = layout[1].parse().unwrap();
        expect(&out, &suite_lines(pes));
        // One process: one host, whatever the nodes.
        expect(&out, &topo_lines(1, pes));
        let (stdout, _) = common::text(&out);
        assert_eq!(
            stdout.matches("cpu affinity not enabled").count(),
            1,
            "{stdout}"
        );
    }
    for netmod in ["shm", "tcp"] {
        let out = common::convrun_with(
            DIR,
            &["+p", "4", "++ppn", "2", "++netmod", netmod],
            "suite",
            SUITE_ARGS,
        );
        expect(&out, &suite_lines(4));
        expect(&out, &topo_lines(1, 4));
    }
    // Two pretend hosts, processes placed on them in turn: the topology
    // calls name them apart.
    let out = common::convrun_with(
        DIR,
        &["++virtual-hosts", "2", "+p", "6", "++ppn", "1"],
        "suite",
        SUITE_ARGS,
    );
    expect(&out, &suite_lines(6));
    expect(&out, &topo_lines(2, 3));
}

/// `+pemap`: every PE pinned to its processor, taken round the list by its
/// rank on its host (here processors this test may run on).
#[test]
fn pemap_pins_each_pe_to_its_processor() {
    let cpus = converse::machine::affinity::current_thread_cpus().unwrap();
    let list: Vec<usize> = cpus.iter().copied().take(2).collect();
    let pemap = list
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let mut args: Vec<&str> = SUITE_ARGS.to_vec();
    args.extend_from_slice(&["-print-affinity", "+p", "3", "+pemap", &pemap]);
    let out = common::direct(DIR, "suite", &args);
    let mut want: Vec<String> = (0..3)
        .map(|pe| format!("PE {pe}: may run on processors {}", list[pe % list.len()]))
        .collect();
    want.push("converse-rs> cpu affinity enabled: each PE pinned to a processor (+pemap)".into());
    want.push("suite: all 4 parts passed on 3 PEs".into());
    expect(&out, &want);
    // Across processes: a PE's rank is on its host, not in its process.
    let out = common::convrun_with(
        DIR,
        &["+p", "2", "++ppn", "1"],
        "suite",
        &[SUITE_ARGS, &["-print-affinity", "+pemap", &pemap]].concat(),
    );
    want.truncate(2);
    expect(&out, &want);
    // A list that is no list is refused, naming the flag.
    let out = common::direct(DIR, "suite", &["+pemap", "3-1"]);
    assert!(!out.status.success());
    let (_, stderr) = common::text(&out);
    assert!(
        stderr.contains("+pemap") && stderr.contains("3-1"),
        "{stderr}"
    );
}

#[test]
fn a_bad_option_value_ends_the_job_naming_the_flag() {
    let mut args: Vec<&str> = SUITE_ARGS.to_vec();
    args[1] = "three";
    let out = common::direct(DIR, "suite", &args);
    assert!(!out.status.success());
    let (_, stderr) = common::text(&out);
    assert!(
        stderr.contains("CmiGetArgInt: cannot read the value of -iters (\"three\") as an int"),
        "{stderr}"
    );
}

#[test]
fn a_cpp_pingpong_started_by_cmistartfn_mymain() {
    let want = "pingpong: 12 sizes from 40 to 81920 bytes, 10 round trips each";
    expect_ok(&common::direct(DIR, "pingpong", &["+p", "2"]), &[want]);
    for netmod in ["shm", "tcp"] {
        let out = common::convrun(DIR, &["+p", "2", "++netmod", netmod], "pingpong");
        expect_ok(&out, &[want]);
    }
}

/// `$(CHARMC) file.c` made `file.o` and nothing else, and `-o libX.a` an
/// archive (the Makefile's rules rely on both).
#[test]
fn compile_only_lines_make_objects_and_archives() {
    let dir = common::programs(DIR);
    for object in [
        "suite.o",
        "ring.o",
        "topo.o",
        "args.o",
        "vars.o",
        "pingpong.o",
    ] {
        assert!(dir.join(object).exists(), "{object} missing");
    }
    assert!(
        !dir.join("a.out").exists(),
        "a compile-only line linked a.out"
    );
    let archive = std::fs::read(dir.join("libvars.a")).unwrap();
    assert!(archive.starts_with(b"!<arch>\n"), "libvars.a is no archive");
}
