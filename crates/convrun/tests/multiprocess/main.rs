//! Multi-process tests: real jobs of several processes started by `convrun`.
//!
//! This one test binary is both sides:
//!
//! - Started by `convrun` (`CONVERSE_LAUNCHER` is set), by `mpiexec` or
//!   `srun` (`PMI_RANK`), or by a case that makes a launcher's environment itself
//!   (`CONVERSE_TEST_CHILD`), it is a process of a job: it runs the child
//!   program named by its first argument (see [`child_main`]), and its exit
//!   code is the process's.
//! - Started by `cargo test`, it is the driver: it runs every case below
//!   (each starts jobs through `convrun` with this binary as the program)
//!   and reports like a test harness. `cargo test -p convrun --test
//!   multiprocess -- NAME` runs the cases whose name contains NAME.
//!
//! The harness is our own (`harness = false`) because the same binary must
//! also run as a plain program under `convrun`.
mod common;
mod flood;
mod gamma;
mod launcher;
mod mpiexec;
mod nshosts;
mod openmpi;
mod partition;
mod scenarios;
mod siege;
mod srun;
mod ssh;
mod trace;
mod watchdog;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Instant;

/// A driver case: a name and the function that runs (and asserts) it.
pub type Case = (&'static str, fn());

// What a migratable thread allocates inside `on_thread_heap` moves with it
// (`core_migrate`).
#[global_allocator]
static HEAP: converse::cth::ThreadHeap = converse::cth::ThreadHeap;

fn child_main() -> ! {
    let mut args = std::env::args();
    let _exe = args.next();
    let name = args.next().unwrap_or_default();
    let rest: Vec<String> = args.collect();
    let code = match scenarios::child(&name, &rest)
        .or_else(|| launcher::child(&name, &rest))
        .or_else(|| flood::child(&name, &rest))
        .or_else(|| gamma::child(&name, &rest))
        .or_else(|| ssh::child(&name, &rest))
        .or_else(|| trace::child(&name, &rest))
        .or_else(|| watchdog::child(&name, &rest))
        .or_else(|| partition::child(&name, &rest))
    {
        Some(code) => code,
        None => {
            eprintln!("multiprocess child: no program named `{name}`");
            2
        }
    };
    use std::io::Write;
    let _ = std::io::stdout().flush();
    std::process::exit(code)
}

/// The shared-memory names that appeared since `before` and are still
/// there after up to 3 s: a job's processes remove their own names as they
/// exit, which may trail the launcher's exit by a moment.
fn names_left_after(before: &std::collections::BTreeSet<String>) -> Vec<String> {
    let deadline = Instant::now() + std::time::Duration::from_secs(3);
    loop {
        let left: Vec<String> = mpiexec::shm_names().difference(before).cloned().collect();
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn main() {
    // Started by convrun, by mpiexec (a PMI rank), or as a child by a case
    // that makes the environment itself (`CONVERSE_TEST_CHILD`).
    if ["CONVERSE_LAUNCHER", "PMI_RANK", "CONVERSE_TEST_CHILD"]
        .iter()
        .any(|v| std::env::var_os(v).is_some())
    {
        child_main();
    }
    // Filter: the first argument that is not an option (as libtest does).
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let mut cases: Vec<Case> = Vec::new();
    cases.extend(scenarios::cases());
    cases.extend(launcher::cases());
    cases.extend(ssh::cases());
    cases.extend(flood::cases());
    cases.extend(gamma::cases());
    cases.extend(mpiexec::cases());
    cases.extend(siege::cases());
    cases.extend(partition::cases());
    cases.extend(srun::cases());
    cases.extend(openmpi::cases());
    cases.extend(trace::cases());
    cases.extend(watchdog::cases());
    let selected: Vec<&Case> = cases
        .iter()
        .filter(|(name, _)| filter.as_deref().is_none_or(|f| name.contains(f)))
        .collect();
    println!("\nrunning {} multi-process tests", selected.len());
    let start = Instant::now();
    let mut failed = Vec::new();
    for (name, run) in selected.iter().copied() {
        let t = Instant::now();
        let names_before = mpiexec::shm_names();
        let result = catch_unwind(AssertUnwindSafe(run));
        // A case owns what its jobs leave in /dev/shm: a name left after
        // it (and after its stragglers' grace) fails the case that left it,
        // rather than CI's final check, which cannot say which one did.
        let left = names_left_after(&names_before);
        let secs = t.elapsed().as_secs_f64();
        match result {
            Ok(()) if left.is_empty() => println!("test {name} ... ok ({secs:.2} s)"),
            Ok(()) => {
                println!("test {name} ... FAILED ({secs:.2} s): left /dev/shm/{left:?}");
                for n in &left {
                    let _ = std::fs::remove_file(format!("/dev/shm/{n}"));
                }
                failed.push(*name);
            }
            Err(_) => {
                println!("test {name} ... FAILED ({secs:.2} s)");
                failed.push(*name);
            }
        }
    }
    let passed = selected.len() - failed.len();
    if failed.is_empty() {
        println!(
            "\ntest result: ok. {passed} passed; 0 failed; finished in {:.2}s\n",
            start.elapsed().as_secs_f64()
        );
    } else {
        println!("\nfailures:");
        for name in &failed {
            println!("    {name}");
        }
        println!(
            "\ntest result: FAILED. {passed} passed; {} failed; finished in {:.2}s\n",
            failed.len(),
            start.elapsed().as_secs_f64()
        );
        std::process::exit(101);
    }
}
