//! The C and C++ programs of `tests/c/ext/`: the Converse extensions
//! library from C (tag matching, futures, master-slave, seed balancing,
//! Cpthreads, CPath), among them the manual's example programs for
//! master-slave (`cms.c`) and the load balancers (`cldhello.c`), built with
//! their Makefile and `convcc`, run in one process (`+p 1`, `+p 4 ++ppn
//! 2`) and under `convrun` with two processes. The programs check what
//! they can themselves and print results; the tests compare the results,
//! never timings, and every job must end with exit code 0.
mod common;

use std::process::Output;

use converse_capi::ext_cpath::CPathC;
use converse_capi::ext_cpthreads::{AttrC, CondAttrC, MutexAttrC, ObjectC};
use converse_capi::ext_futures::CfutureC;

use common::{expect_ok, text};

const DIR: &str = "ext";

fn direct(name: &str, args: &[&str]) -> Output {
    common::direct(DIR, name, args)
}

fn convrun(args: &[&str], name: &str) -> Output {
    common::convrun(DIR, args, name)
}

/// The three ways every program runs: one PE; four PEs, two logical nodes,
/// in one process; four PEs in two processes under `convrun`.
fn runs(name: &str) -> Vec<(String, Output)> {
    vec![
        ("+p 1".into(), direct(name, &["+p", "1"])),
        (
            "+p 4 ++ppn 2".into(),
            direct(name, &["+p", "4", "++ppn", "2"]),
        ),
        (
            "convrun +p 4 ++ppn 2".into(),
            convrun(&["+p", "4", "++ppn", "2"], name),
        ),
    ]
}

fn pes_of(how: &str) -> usize {
    if how.contains("+p 4") { 4 } else { 1 }
}

fn stdout(out: &Output) -> String {
    text(out).0
}

/// How many lines of `out` are `line`.
fn count(out: &Output, line: &str) -> usize {
    stdout(out).lines().filter(|l| *l == line).count()
}

#[test]
fn the_headers_structs_are_laid_out_as_the_rust_definitions() {
    let out = direct("layout", &[]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let size = std::mem::size_of::<usize>();
    let want = [
        format!(
            "Cfuture {} {} {}",
            size_of::<CfutureC>(),
            std::mem::offset_of!(CfutureC, pe),
            std::mem::offset_of!(CfutureC, id)
        ),
        format!(
            "CPath {} {} {} {} {}",
            size_of::<CPathC>(),
            std::mem::offset_of!(CPathC, nsizes),
            std::mem::offset_of!(CPathC, sizes),
            std::mem::offset_of!(CPathC, seqno),
            std::mem::offset_of!(CPathC, desc)
        ),
        format!("Cpthread_attr_t {}", size_of::<AttrC>()),
        format!("Cpthread_mutexattr_t {}", size_of::<MutexAttrC>()),
        format!("Cpthread_condattr_t {}", size_of::<CondAttrC>()),
        format!("Cpthread_mutex_t {} {size}", size_of::<ObjectC>()),
        format!("Cpthread_cond_t {} {size}", size_of::<ObjectC>()),
        format!("Cpthread_t {}", size_of::<std::ffi::c_ulong>()),
        format!("Cpthread_key_t {}", size_of::<u32>()),
    ];
    assert_eq!(stdout.lines().collect::<Vec<_>>(), want);
}

#[test]
fn tag_matching_with_wildcards_on_both_sides_oldest_first() {
    for (how, out) in runs("cmm") {
        assert_eq!(count(&out, "cmm: 0 failures"), 1, "{how}");
        expect_ok(&out, &["cmm: 0 failures"]);
    }
}

#[test]
fn a_future_set_on_another_pe_wakes_the_thread_waiting_for_it() {
    for (how, out) in runs("futures") {
        let last = pes_of(&how) - 1;
        expect_ok(
            &out,
            &[
                &format!("future set by PE {last}: {}", 1000 + last),
                &format!("future stored by PE {last}: {} 77", 1000 + last),
                "local future: hello",
                &format!("stored values: 10 {}, shared 1", 1000 + last),
                &format!("futures: done on {} PEs", pes_of(&how)),
            ],
        );
    }
}

/// The manual's master-slave example: three phases of five tasks, then
/// three tasks for the consumer, every response right; every PE works.
#[test]
fn the_manuals_master_slave_example_runs_to_its_end() {
    let mut runs = runs("cms");
    runs.push((
        "convrun +p 2 (tcp)".into(),
        convrun(&["+p", "2", "++netmod", "tcp"], "cms"),
    ));
    for (how, out) in runs {
        let mut lines = vec!["manager inited".to_string()];
        for i in 0..3 {
            for j in 0..5 {
                let a = (10 * i + j) as f32;
                lines.push(format!("Response {j} is: {:.6} ", a * a));
            }
            lines.push(format!("End of phase {i}"));
        }
        for i in 0..3 {
            let a = (5 + i) as f32;
            lines.push(format!(
                "consumer: response with refnum = {i} is {:.6}",
                a * a
            ));
        }
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        expect_ok(&out, &lines);
        // Only the manager, PE 0, returns from CmsInit.
        assert_eq!(count(&out, "Now the consumerFunction mode"), 1, "{how}");
        // Every task ran once, on some PE of the job.
        let worked: Vec<String> = stdout(&out)
            .lines()
            .filter(|l| l.contains(": in worker "))
            .map(str::to_owned)
            .collect();
        assert_eq!(worked.len(), 18, "{how}: {worked:?}");
        for l in &worked {
            let pe: usize = l.split(':').next().unwrap().parse().unwrap();
            assert!(pe < pes_of(&how).max(2), "{how}: {l}");
        }
    }
}

/// The manual's load-balancing example: each PE's ten seeds are handled
/// once each, somewhere.
#[test]
fn the_manuals_load_balancing_example_handles_every_seed_once() {
    for (how, out) in runs("cldhello") {
        let pes = pes_of(&how);
        expect_ok(
            &out,
            &[&format!(
                "all {} messages handled (strategy workstealing)",
                10 * pes
            )],
        );
        let text = stdout(&out);
        for pe in 0..pes {
            for id in 0..10 {
                assert_eq!(
                    count(&out, &format!("[{pe}] sending message {id}")),
                    1,
                    "{how}"
                );
                let prefix = format!("Message {id} created on {pe} handled by ");
                let handled: Vec<&str> = text.lines().filter(|l| l.starts_with(&prefix)).collect();
                assert_eq!(handled.len(), 1, "{how}: {prefix}…: {handled:?}");
            }
        }
    }
}

fn cld_lines(pes: usize, nodes: usize, packed: usize, strategy: &str) -> Vec<String> {
    vec![
        format!("cld: local {} of {}", 3 * pes, 3 * pes),
        format!("cld: bcast {pes} of {pes}"),
        format!("cld: anywhere {} of {}", 20 * pes, 20 * pes),
        format!("cld: multi {pes} of {pes}"),
        format!("cld: node {nodes} of {nodes}"),
        format!("cld: token {pes} of {pes}"),
        format!("cld: packed when leaving the process: {packed}"),
        format!("cld: strategy {strategy}"),
    ]
}

fn expect_lines(out: &Output, lines: &[String]) {
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    expect_ok(out, &lines);
}

/// Priorities, every destination, the token queue, and a pack function
/// called exactly for the seeds that leave their process, with every
/// strategy.
#[test]
fn seeds_run_once_by_priority_packed_only_when_leaving_the_process() {
    expect_lines(
        &direct("cld", &["+p", "1"]),
        &cld_lines(1, 1, 0, "workstealing"),
    );
    for strategy in ["none", "rand", "neighbor", "workstealing", "ring"] {
        let args = ["+p", "4", "++ppn", "2", "+balancer", strategy];
        expect_lines(&direct("cld", &args), &cld_lines(4, 2, 0, strategy));
    }
    // Two processes of two PEs: the broadcast to all PEs and the multi-PE
    // enqueue from PE 0 reach two PEs of the other process, the node
    // broadcast one node: five packed seeds.
    for strategy in ["workstealing", "rand"] {
        let out = convrun(&["+p", "4", "++ppn", "2", "+balancer", strategy], "cld");
        expect_lines(&out, &cld_lines(4, 2, 5, strategy));
    }
    let out = convrun(&["+p", "2", "++netmod", "tcp"], "cld");
    expect_lines(&out, &cld_lines(2, 2, 3, "workstealing"));
}

/// The manual's sample balancer (section 7.3), written in the program:
/// its CldEnqueue, CldModuleInit and CldGetStrategy replace the library's
/// (linked statically and with the shared library), its CldModuleInit runs
/// on every PE before the start function, and its distribution moves half
/// of PE 0's tokens to PE 1 at once; every seed runs once wherever the
/// ring balancing takes it.
#[test]
fn a_balancer_written_in_the_program_replaces_the_librarys() {
    let lines = |tokens: usize| {
        vec![
            "cldtest: strategy test".to_string(),
            "cldtest: CldModuleInit ran: handler 1".to_string(),
            format!("cldtest: PE 0 held {tokens} tokens, then {}", tokens / 2),
            "cldtest: all 48 seeds ran once, 8 of them on the PE named".to_string(),
        ]
    };
    // From an archive, under a driver that names only the Cld functions.
    expect_lines(
        &direct("cldtest-archive", &["+p", "2"]),
        &[
            "cldtest: strategy test".to_string(),
            "cldtest: PE 0 held 40 tokens, then 40".to_string(),
            "cldtest: all 48 seeds ran once, 8 of them on the PE named".to_string(),
        ],
    );
    expect_lines(&direct("cldtest", &["+p", "1"]), &lines(0));
    for args in [
        &["+p", "2"][..],
        &["+p", "4", "++ppn", "2"],
        &["+p", "3", "++ppn", "1"],
    ] {
        expect_lines(&direct("cldtest", args), &lines(40));
    }
    for netmod in ["shm", "tcp"] {
        let out = convrun(&["+p", "4", "++ppn", "2", "++netmod", netmod], "cldtest");
        expect_lines(&out, &lines(40));
    }
    // With the shared library, the program's names still win; and the
    // library's balancer still answers to Charm++'s names in a program
    // without one (cld.c).
    let dir = common::programs(DIR);
    let out_dir = common::profile_dir().join("c-tests").join("ext-shared");
    std::fs::create_dir_all(&out_dir).unwrap();
    for (name, flags) in [("cldtest", &["-Wno-error"][..]), ("cld", &[][..])] {
        let program = out_dir.join(name);
        let st = std::process::Command::new(env!("CARGO_BIN_EXE_convcc"))
            .args(["-shared-converse", "-o"])
            .arg(&program)
            .arg(dir.join(format!("{name}.c")))
            .args(flags)
            .env("CONVERSE_LIB", common::profile_dir())
            .status()
            .unwrap();
        assert!(st.success(), "building {name} with the shared library");
        let out = common::run_with_deadline({
            let mut c = std::process::Command::new(&program);
            c.args(["+p", "2"]);
            c
        });
        if name == "cldtest" {
            expect_lines(&out, &lines(40));
        } else {
            expect_lines(&out, &cld_lines(2, 1, 0, "workstealing"));
        }
    }
}

/// The manual's start-up (mymain in the first pthread of every PE) around
/// producers and consumers with a mutex and condition variables, joins,
/// exits with cleanup handlers, detached threads, keys and once.
#[test]
fn posix_threads_with_mutexes_and_condition_variables_on_every_pe() {
    for (how, out) in runs("pthreads") {
        let pes = pes_of(&how);
        let mut lines: Vec<String> = (0..pes)
            .map(|pe| format!("PE {pe}: 120 items consumed, sum 2460"))
            .collect();
        lines.push(format!("pthreads: all {pes} PEs done"));
        expect_lines(&out, &lines);
    }
    let out = convrun(&["+p", "2"], "pthreads");
    expect_ok(
        &out,
        &[
            "PE 1: 120 items consumed, sum 2460",
            "pthreads: all 2 PEs done",
        ],
    );
}

/// Arrays of threads: multicasts, tag matching with wildcards, reductions
/// per row and over the whole array, a descriptor sent in a message.
#[test]
fn arrays_of_threads_send_multicast_and_reduce() {
    let mut runs = runs("cpath");
    runs.push(("convrun +p 2".into(), convrun(&["+p", "2"], "cpath")));
    for (how, out) in runs {
        let pes = if how.contains("+p 2") {
            2
        } else {
            pes_of(&how)
        };
        expect_ok(
            &out,
            &[
                &format!("single thread on PE {} sent to 12 elements", pes - 1),
                "row 0: sum 6 count 4",
                "row 1: sum 6 count 4",
                "row 2: sum 6 count 4",
                &format!("cpath: total 66 of 12 elements on {pes} PEs"),
            ],
        );
    }
}

/// Every header in one C++ translation unit, with the pthread names.
#[test]
fn the_headers_compile_and_work_in_cpp() {
    for (_, out) in runs("headers") {
        expect_ok(&out, &["C++: 3 threads, table 3, future 3"]);
    }
}
