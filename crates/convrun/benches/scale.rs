//! How jobs grow with their size: many processes under `convrun`, and
//! many PEs in one process. On a 2-core machine every process shares the
//! two cores, so what grows faster than the work is the signal.
//!
//! `cargo bench -p convrun --bench scale` (quick mode, `CONVERSE_BENCH_QUICK`:
//! the smallest size of each series only; `-- tcp`, `-- shm`, `-- mpiexec`,
//! `-- pes` for one series)
//!
//! Figures, for P = 16, 64, 256, 1,024 processes of one PE (`++ppn 1`),
//! over shm and over tcp (`<nm>`):
//! - `scale_startup_<nm>_p<P>`: `convrun` of a job whose PEs each greet
//!   PE 0, then report what their process opened and its peak memory, from
//!   start to exit. Baseline `spawn_p<P>`: starting P plain processes of
//!   the same binary (no runtime) and waiting for them.
//! - `scale_cpu_<nm>_p<P>`: the CPU time (user and system) of that run,
//!   launcher included. Baseline `spawn_cpu_p<P>`: the same of the plain
//!   processes.
//! - `scale_rss_<nm>_p<P>`: the largest peak resident memory of a process
//!   of the job. Baseline `plain_rss`: a plain process of this binary.
//! - `scale_connections_<nm>_p<P>`: what the job's processes opened: TCP
//!   connections started (each counted once, by the end that started it)
//!   over tcp, peers' segments mapped over shm
//!   (`converse_net::counts`). Baseline `processes_p<P>`: P, so the ratio
//!   reads as connections a process.
//! - `scale_<figure>_<nm>_growth`: the fitted exponent of each series
//!   (`value ∝ P^e`, least squares over the sizes that ran), `baseline
//!   none`.
//!
//! The same figures for the series `mpiexec` (`-- mpiexec`): the job
//! started by MPICH's `mpiexec -n P` instead of `convrun` (PMI-1 start-up,
//! shm), where `mpiexec` is on `PATH` (a `#` line says it is skipped
//! otherwise).
//!
//! A size that fails prints a `#` line naming it and its first error line
//! instead, and is left out of the fit.
//!
//! And for one process of P = 256 … 4,096 PEs:
//! - `scale_collectives_rss_p<P>`: peak resident memory of a job that
//!   broadcasts, reduces over all PEs, multicasts to the even PEs and
//!   reduces over them, then waits for quiescence. Baseline
//!   `hello_rss_p<P>`: a job of as many PEs that only greets PE 0.
//!   `scale_collectives_rss_growth` and `scale_hello_rss_growth`: the
//!   fitted exponents.
//!
//! This one binary is also the program of the jobs it starts (by its
//! first argument).
#[path = "../../converse/benches/common/mod.rs"]
mod common;

use std::process::{Command, Stdio};
use std::time::Instant;

use converse::{Converse, Message};

const CONVRUN: &str = env!("CARGO_BIN_EXE_convrun");

fn quick() -> bool {
    std::env::var_os("CONVERSE_BENCH_QUICK").is_some()
}

fn me() -> String {
    std::env::current_exe()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("job-scale") => return job_scale(),
        Some("job-collectives") => return job_collectives(false),
        Some("job-hello") => return job_collectives(true),
        Some("noop") => return,
        Some("noop-rss") => return println!("{}", peak_rss_kib()),
        _ => {}
    }
    // `cargo bench` passes `--bench`; a filter word picks series.
    let filter: Vec<&str> = args[1..]
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let wanted = |series: &str| filter.is_empty() || filter.contains(&series);
    let sizes: &[usize] = if quick() { &[16] } else { &[16, 64, 256, 1024] };
    for series in ["shm", "tcp", "mpiexec"] {
        if !wanted(series) {
            continue;
        }
        if series == "mpiexec" && !on_path("mpiexec") {
            println!("# scale: the mpiexec series is skipped: no mpiexec on PATH");
            continue;
        }
        process_series(series, sizes);
    }
    if wanted("pes") {
        let pes: &[usize] = if quick() {
            &[256]
        } else {
            &[256, 512, 1024, 2048, 4096]
        };
        pe_series(pes);
    }
}

/// The CPU time (user and system, seconds) of this process's waited-for
/// descendants so far.
fn children_cpu() -> f64 {
    // SAFETY: a zeroed rusage is a valid out-parameter; getrusage fills it.
    let usage = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut u);
        u
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// This process's peak resident memory (`VmHWM`), in KiB.
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// `value ∝ P^e`: the least-squares slope of log(value) over log(P).
fn exponent(points: &[(usize, f64)]) -> Option<f64> {
    let pts: Vec<(f64, f64)> = points
        .iter()
        .filter(|(_, v)| *v > 0.0)
        .map(|&(p, v)| ((p as f64).ln(), v.ln()))
        .collect();
    if pts.len() < 2 {
        return None;
    }
    let n = pts.len() as f64;
    let (mx, my) = (
        pts.iter().map(|p| p.0).sum::<f64>() / n,
        pts.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let sxy: f64 = pts.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let sxx: f64 = pts.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
    Some(sxy / sxx)
}

fn print_growth(name: &str, points: &[(usize, f64)]) {
    if let Some(e) = exponent(points) {
        println!("bench {name} {e:.2} exponent baseline none");
    }
}

/// What one run of the job reported.
struct Run {
    secs: f64,
    cpu: f64,
    max_rss_kib: u64,
    opened: u64,
}

/// True if `program` is a file in a directory of `PATH`.
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// Runs the `job-scale` job of `p` processes of one PE: through `convrun`
/// over module `series` (`shm`, `tcp`), or through `mpiexec` (`mpiexec`:
/// PMI-1 start-up, shm).
fn run_job(series: &str, p: usize) -> Result<Run, String> {
    let cpu0 = children_cpu();
    let t = Instant::now();
    let n = p.to_string();
    let mut cmd = if series == "mpiexec" {
        let mut c = Command::new("mpiexec");
        c.args(["-n", &n, &me(), "job-scale", "++netmod", "shm"])
            .args(["++timeout", "120"]);
        c
    } else {
        let mut c = Command::new(CONVRUN);
        c.args(["+p", &n, "++ppn", "1", "++netmod", series]).args([
            "++timeout",
            "120",
            &me(),
            "job-scale",
        ]);
        c
    };
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{series}: {e}"))?;
    let secs = t.elapsed().as_secs_f64();
    let cpu = children_cpu() - cpu0;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let first = stderr.lines().next().unwrap_or("").to_owned();
        return Err(format!("{} after {secs:.1} s: {first}", out.status));
    }
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("scale "))
        .ok_or("no `scale` line")?;
    let w: Vec<u64> = line
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let [tcp, shm, max_rss_kib] = w[..] else {
        return Err(format!("a `scale` line of {} words", w.len()));
    };
    Ok(Run {
        secs,
        cpu,
        max_rss_kib,
        opened: if series == "tcp" { tcp } else { shm },
    })
}

/// P plain processes of this binary, started and waited for: (seconds,
/// CPU seconds).
fn spawn_plain(p: usize) -> (f64, f64) {
    let cpu0 = children_cpu();
    let t = Instant::now();
    let children: Vec<_> = (0..p)
        .map(|_| Command::new(me()).arg("noop").spawn().unwrap())
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    (t.elapsed().as_secs_f64(), children_cpu() - cpu0)
}

fn process_series(netmod: &str, sizes: &[usize]) {
    let plain_rss = plain_rss_kib() as f64 / 1024.0;
    let (mut startup, mut cpu, mut rss, mut opened) = (vec![], vec![], vec![], vec![]);
    for &p in sizes {
        let run = match run_job(netmod, p) {
            Ok(r) => r,
            Err(why) => {
                println!("# scale: {p} processes over {netmod} failed: {why}");
                continue;
            }
        };
        let (spawn_secs, spawn_cpu) = spawn_plain(p);
        let rss_mib = run.max_rss_kib as f64 / 1024.0;
        common::line(
            &format!("scale_startup_{netmod}_p{p}"),
            run.secs,
            "s",
            &format!("spawn_p{p}"),
            spawn_secs,
            "s",
        );
        common::line(
            &format!("scale_cpu_{netmod}_p{p}"),
            run.cpu,
            "s",
            &format!("spawn_cpu_p{p}"),
            spawn_cpu,
            "s",
        );
        common::line(
            &format!("scale_rss_{netmod}_p{p}"),
            rss_mib,
            "MiB",
            "plain_rss",
            plain_rss,
            "MiB",
        );
        common::line(
            &format!("scale_connections_{netmod}_p{p}"),
            run.opened as f64,
            "count",
            &format!("processes_p{p}"),
            p as f64,
            "count",
        );
        startup.push((p, run.secs));
        cpu.push((p, run.cpu));
        rss.push((p, rss_mib));
        opened.push((p, run.opened as f64));
    }
    print_growth(&format!("scale_startup_{netmod}_growth"), &startup);
    print_growth(&format!("scale_cpu_{netmod}_growth"), &cpu);
    print_growth(&format!("scale_rss_{netmod}_growth"), &rss);
    print_growth(&format!("scale_connections_{netmod}_growth"), &opened);
}

/// The peak memory of a plain process of this binary (its `noop`), KiB.
fn plain_rss_kib() -> u64 {
    // A child reads its own: the driver's would count the driver's work.
    let out = Command::new(me())
        .arg("noop-rss")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .parse()
                .unwrap_or(0)
        })
        .unwrap_or(0);
    if out > 0 { out } else { peak_rss_kib() }
}

/// One process of P PEs: the collectives job's and the hello job's peak
/// memory.
fn pe_series(sizes: &[usize]) {
    let (mut coll, mut hello) = (vec![], vec![]);
    for &p in sizes {
        let run = |mode: &str| -> Option<f64> {
            let out = Command::new(me())
                .args([mode, "+p", &p.to_string()])
                .output()
                .ok()?;
            if !out.status.success() {
                let stderr = String::from_utf8_lossy(&out.stderr);
                println!(
                    "# scale: {mode} of {p} PEs failed: {}",
                    stderr.lines().next().unwrap_or("")
                );
                return None;
            }
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .find_map(|l| l.strip_prefix("rss "))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .map(|kib| kib / 1024.0)
        };
        let (Some(c), Some(h)) = (run("job-collectives"), run("job-hello")) else {
            continue;
        };
        common::line(
            &format!("scale_collectives_rss_p{p}"),
            c,
            "MiB",
            &format!("hello_rss_p{p}"),
            h,
            "MiB",
        );
        coll.push((p, c));
        hello.push((p, h));
    }
    print_growth("scale_collectives_rss_growth", &coll);
    print_growth("scale_hello_rss_growth", &hello);
}

// ---- the jobs ---------------------------------------------------------------

fn u64s(msg: &Message) -> Vec<u64> {
    msg.payload()
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn words(w: &[u64]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Every PE greets PE 0; once all have, PE 0 asks every PE (a broadcast)
/// what its process opened and its peak memory; once all have answered,
/// PE 0 prints `scale TCP SHM MAX_RSS_KIB` and ends the job.
fn job_scale() {
    use std::cell::Cell;
    thread_local! {
        static COUNT: Cell<usize> = const { Cell::new(0) };
        static SUMS: Cell<(u64, u64, u64)> = const { Cell::new((0, 0, 0)) };
    }
    let code = Converse::new()
        .run(|_| {
            let n = converse::num_pes();
            let reported = converse::register_handler(move |msg: Message| {
                let w = u64s(&msg);
                let (t, s, r) = SUMS.get();
                SUMS.set((t + w[0], s + w[1], r.max(w[2])));
                COUNT.set(COUNT.get() + 1);
                if COUNT.get() == 2 * n {
                    let (t, s, r) = SUMS.get();
                    converse::cmi_printf!("scale {t} {s} {r}\n");
                    converse::exit(0);
                }
            });
            let report = converse::register_handler(move |_msg: Message| {
                // A process's counts once, from its first PE.
                let first = converse::machine::process_pes().start == converse::my_pe();
                let (t, s) = if first {
                    (
                        converse_net::counts::tcp_connections_started() as u64,
                        converse_net::counts::shm_segments_mapped() as u64,
                    )
                } else {
                    (0, 0)
                };
                let reply = Message::from_payload(reported, &words(&[t, s, peak_rss_kib()]));
                converse::sync_send_and_free(0, reply);
            });
            let hello = converse::register_handler(move |_msg: Message| {
                COUNT.set(COUNT.get() + 1);
                if COUNT.get() == n {
                    let ask = Message::from_payload(report, &[]);
                    converse::sync_broadcast_all_and_free(ask);
                }
            });
            converse::sync_send_and_free(0, Message::from_payload(hello, &[]));
        })
        .unwrap_or_else(|e| {
            eprintln!("scale: {e}");
            std::process::exit(2)
        });
    std::process::exit(code);
}

/// One process: every PE greets PE 0 (`hello_only`), or a broadcast, a
/// reduction over all PEs, a multicast to the even PEs and a reduction
/// over them, then quiescence. PE 0 prints `rss KIB` (the process's peak)
/// and ends the job.
fn job_collectives(hello_only: bool) {
    use std::cell::Cell;
    thread_local! {
        static COUNT: Cell<usize> = const { Cell::new(0) };
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = Converse::new()
        .args(args)
        .run(move |_| {
            let (me, n) = (converse::my_pe(), converse::num_pes());
            let evens_id = converse::global_reduction_id();
            let finish = move || {
                converse::cmi_printf!("rss {}\n", peak_rss_kib());
                converse::exit(0);
            };
            let sum = |mut local: Message, rest: Vec<Message>| {
                let total = u64s(&local)[0] + rest.iter().map(|m| u64s(m)[0]).sum::<u64>();
                local.payload_mut().copy_from_slice(&total.to_le_bytes());
                local
            };
            let evens_done = converse::register_handler(move |msg: Message| {
                assert_eq!(u64s(&msg)[0] as usize, n.div_ceil(2));
                converse::start_quiescence_detection(finish);
            });
            let to_evens = converse::register_handler(move |msg: Message| {
                let group = converse::Group::from_id(u64s(&msg)[0] as u32);
                let one = Message::from_payload(evens_done, &1u64.to_le_bytes());
                converse::group_reduce(group, one, sum, evens_id);
            });
            let all_done = converse::register_handler(move |msg: Message| {
                assert_eq!(u64s(&msg)[0] as usize, n);
                // Made on PE 0 only: the program's own list is O(P) once.
                let evens: Vec<usize> = (0..n).step_by(2).collect();
                let group = converse::establish_group(&evens);
                let msg = Message::from_payload(to_evens, &words(&[group.id() as u64]));
                converse::sync_multicast_and_free(group, msg);
            });
            let question = converse::register_handler(move |_msg: Message| {
                let one = Message::from_payload(all_done, &1u64.to_le_bytes());
                converse::reduce(one, sum);
            });
            let greeted = converse::register_handler(move |_msg: Message| {
                COUNT.set(COUNT.get() + 1);
                if COUNT.get() == n {
                    finish();
                }
            });
            if hello_only {
                converse::sync_send_and_free(0, Message::from_payload(greeted, &[]));
            } else if me == 0 {
                converse::sync_broadcast_all_and_free(Message::from_payload(question, &[]));
            }
        })
        .unwrap_or_else(|e| {
            eprintln!("scale: {e}");
            std::process::exit(2)
        });
    std::process::exit(code);
}
