//! Between processes: ping-pong latency and streaming bandwidth over the
//! tcp and shm network modules, 8 B to 4 MiB, each beside the same operation
//! done raw between two processes (a busy-polling TCP socket; a shared
//! buffer with spinning flags); and the start-up time of `convrun +p 4`.
//!
//! `cargo bench -p convrun --bench netmod` (it lives beside `convrun`:
//! only that package's benchmarks get `CARGO_BIN_EXE_convrun`)
//!
//! Figures:
//! - `tcp_rtt_<size>`: PE 0 (process 0) and PE 1 (process 1) bounce one
//!   message (`sync_send_and_free`). Baseline `raw_tcp_rtt_<size>`: two
//!   processes bounce the same bytes over one non-blocking loopback socket,
//!   each spinning on `read` (a blocking reader pays this virtual machine's
//!   thread wake-up, ~25 µs per round trip, and would flatter the runtime).
//! - `tcp_bw_<size>`: PE 0 sends a stream of messages to PE 1, which
//!   answers once it has them all. Baseline `raw_tcp_stream_<size>`: the
//!   same bytes written to one socket in writes of `<size>`.
//! - `shm_oneway_<size>` (half the round trip, as MPICH's ping-pong
//!   reports it) and `shm_bw_<size>`: the same over shm. Baselines
//!   `raw_shm_oneway_<size>`: the bytes copied into a shared buffer, a flag
//!   raised, the peer spinning on it copies them out and answers the same
//!   way; `raw_shm_stream_<size>`: the peer fills two shared slots in turn,
//!   the driver empties them.
//! - `mpi_oneway_<size>` and `mpi_bw_<size>` (feature `mpi`: `cargo bench
//!   -p convrun --features mpi --bench netmod -- mpi`): the same job under
//!   `mpiexec -n 2` over `++netmod mpi`. Baselines `raw_mpi_oneway_<size>`
//!   and `raw_mpi_stream_<size>`: two ranks bounce and stream the same
//!   bytes with blocking `MPI_Send`/`MPI_Recv` (the `mpi` crate, in the
//!   same run). Against Open MPI: build with `MPICC=mpicc.openmpi` (its
//!   own `--target-dir`) and set `CONVERSE_BENCH_MPIEXEC="mpirun.openmpi
//!   --oversubscribe"` (plus `--allow-run-as-root` as root).
//! - `rdma_get_<size>` (`-- rdma`): PE 0 gets `<size>` bytes of PE 1's
//!   registered memory into its own (`cmi::rdma::get_into` a `DmaBuffer`,
//!   then `wait`), PE 1 in another process over shm (single copy from 4
//!   KiB on). Baseline `raw_process_vm_readv_<size>`: PE 0 reads the same
//!   bytes into the same buffer with `process_vm_readv` itself, in the
//!   same run.
//! - `persistent_oneway_<size>` (`-- persistent`): half the round trip of
//!   a message bounced between PE 0 and PE 1 (two processes over shm) on
//!   persistent channels (`cmi::persistent`: each side's
//!   `use_persistent` names its handle to the other). Baseline
//!   `ordinary_oneway_<size>`: the same bounce with plain
//!   `sync_send_and_free`, in the same job, in turns with it (the best of
//!   5 turns each). At 8 B and 4 KiB the handle sends the ordinary way
//!   (`MIN_CHANNEL_MESSAGE`), so the two are the same path and their ratio
//!   shows the noise; at 16 and 64 KiB the messages go on the channel.
//! - `cth_migrate` (`-- migrate`): a migratable thread with a 64 KiB stack
//!   moves itself between PE 0 and PE 1, two processes over shm
//!   (`++no-aslr`): pack, send, unpack and resume, per move (its used
//!   stack and its heap travel). Baseline `oneway_64KiB`: half the round
//!   trip of a 64 KiB message bounced between the same PEs, in the same
//!   job.
//! - `gamma_oneway_<size>` and `gamma_bw_<size>` (`-- gamma`): a GAMMA
//!   port ping-pong between nodes 0 and 1 (`gamma::run`, two processes
//!   over shm): `gamma::send` through a port bound to the peer's, whose
//!   `GO_BACK` buffer takes the message, and `gamma::wait` on its
//!   semaphore. Baselines `converse_oneway_<size>`/`converse_bw_<size>`:
//!   the same program written with Converse messages (a message built from
//!   the same bytes, taken by a handler), in the same job, in turns with
//!   it (the best of 5 turns each). The bandwidth figure is the message
//!   size over the one-way time.
//! - `convrun_startup_p4`: `convrun +p 4` of a program that ends at once.
//!   Baseline `spawn_4`: starting the same binary as 4 plain processes
//!   (without the runtime) and waiting for them.
//!
//! Every ping-pong above, raw ones included, is timed after an untimed
//! warm-up of a tenth of its round trips (`warm_up_for`), as MPICH's
//! reference ping-pong warms up with a whole repetition.
//!
//! `cargo bench -p convrun --bench netmod -- shm` (or `tcp`, `startup`,
//! `mpi`) prints only those figures.
//!
//! This one binary is also the program of the jobs and the raw peer it
//! starts (by its first argument). To profile one size of a job:
//! `CONVERSE_BENCH_SIZE=8 CONVERSE_BENCH_REPEAT=20 convrun +p 2 ++netmod
//! shm <this binary> job-pingpong` (or `job-gamma`) runs only that size,
//! twenty times as long.
// The `bench` line format, shared with the core's benchmarks.
#[path = "../../converse/benches/common/mod.rs"]
mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use converse::{Converse, Message};

const CONVRUN: &str = env!("CARGO_BIN_EXE_convrun");
const RTT_SIZES: [usize; 6] = [8, 512, 4 << 10, 64 << 10, 1 << 20, 4 << 20];
const BW_SIZES: [usize; 3] = [64 << 10, 1 << 20, 4 << 20];

/// Untimed round trips before the timed ones: a tenth of them (at least
/// ten, or all of them if fewer). The first thousands of trips of a fresh
/// pair of processes are slower (an 8-byte one-way measured 0.44–0.59 µs
/// over the first 20,000 trips against 0.40–0.42 µs over the next), and
/// MPICH's reference ping-pong (`../shared/bench/mpi_pingpong.c`) also
/// warms up with a whole untimed repetition. Every ping-pong here, the raw
/// baselines' included, warms up this way.
fn warm_up_for(rounds: u64) -> u64 {
    (rounds / 10).max(rounds.min(10))
}

/// For profiling one size of a job under perf or callgrind: only the
/// figures of `CONVERSE_BENCH_SIZE` bytes, if set (several sizes
/// separated by commas: `8,1048576`).
fn profiled(size: usize) -> bool {
    std::env::var("CONVERSE_BENCH_SIZE").map_or(true, |s| {
        s.split(',')
            .any(|one| one.trim().parse::<usize>().ok() == Some(size))
    })
}

/// For profiling: `CONVERSE_BENCH_REPEAT` times the round trips (1).
fn profile_repeat() -> u64 {
    std::env::var("CONVERSE_BENCH_REPEAT")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1)
}

fn rounds_for(size: usize) -> u64 {
    common::iterations(match size {
        s if s <= 4096 => 20_000,
        s if s <= 64 << 10 => 5_000,
        _ => 300,
    })
}

/// Bytes streamed per bandwidth figure.
fn stream_bytes() -> usize {
    if std::env::var_os("CONVERSE_BENCH_QUICK").is_some() {
        16 << 20
    } else {
        512 << 20
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("job-pingpong") => job_pingpong(),
        Some("job-noop") => job_noop(),
        Some("job-rdma") => job_rdma(),
        Some("job-persistent") => job_persistent(),
        Some("job-migrate") => job_migrate(),
        Some("job-gamma") => job_gamma(),
        Some("raw-peer") => raw_peer(&args[2]),
        Some("raw-shm-peer") => raw_shm_peer(&args[2]),
        #[cfg(feature = "mpi")]
        Some("raw-mpi") => raw_mpi(),
        Some("noop") => {}
        _ => driver(),
    }
}

// ---- the driver ------------------------------------------------------------

fn me() -> String {
    std::env::current_exe().unwrap().display().to_string()
}

fn driver() {
    // Words after the options choose which figures (`cargo bench` passes
    // `--bench`).
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted = |what: &str| only.is_empty() || only.iter().any(|o| o == what);
    if wanted("tcp") {
        let raw = raw_tcp_figures();
        job_figures("tcp", &raw);
    }
    if wanted("shm") {
        let raw = raw_shm_figures();
        job_figures("shm", &raw);
    }
    #[cfg(feature = "mpi")]
    if wanted("mpi") {
        let raw = raw_mpi_figures();
        job_figures("mpi", &raw);
    }
    if wanted("rdma") {
        rdma_figures();
    }
    if wanted("persistent") {
        persistent_figures();
    }
    if wanted("migrate") {
        migrate_figures();
    }
    if wanted("gamma") {
        gamma_figures();
    }
    if wanted("startup") {
        startup_figure();
    }
}

/// Runs the ping-pong job over `netmod` and prints its figures beside
/// `raw`'s. Over shm the latency figure is one-way (half the round trip),
/// as MPICH's reports it.
fn job_figures(netmod: &str, raw: &Raw) {
    let me = me();
    // The MPI module runs under the MPI launcher; the others under convrun.
    let mpi_launcher = mpi_launcher();
    let (launcher, args) = if netmod == "mpi" {
        let mut args: Vec<&str> = mpi_launcher[1..].iter().map(String::as_str).collect();
        args.extend(["-n", "2", &me, "job-pingpong", "++netmod", "mpi"]);
        (mpi_launcher[0].as_str(), args)
    } else {
        (
            CONVRUN,
            vec!["+p", "2", "++netmod", netmod, &me, "job-pingpong"],
        )
    };
    let out = Command::new(launcher)
        .args(&args)
        .stderr(Stdio::inherit())
        .output()
        .expect("the launcher starts");
    assert!(out.status.success(), "the {netmod} ping-pong job failed");
    let text = String::from_utf8_lossy(&out.stdout);
    let oneway = netmod == "shm" || netmod == "mpi";
    for l in text.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        match w.as_slice() {
            ["rtt", size, us] => {
                let size: usize = size.parse().unwrap();
                let name = common::size_name(size);
                let base = raw.rtt.iter().find(|(s, _)| *s == size).unwrap().1;
                let us: f64 = us.parse().unwrap();
                let (figure, scale) = if oneway {
                    ("oneway", 0.5)
                } else {
                    ("rtt", 1.0)
                };
                common::line(
                    &format!("{netmod}_{figure}_{name}"),
                    us * scale,
                    "us",
                    &format!("raw_{netmod}_{figure}_{name}"),
                    base * scale,
                    "us",
                );
            }
            ["bw", size, gbps] => {
                let size: usize = size.parse().unwrap();
                let name = common::size_name(size);
                let base = raw.bw.iter().find(|(s, _)| *s == size).unwrap().1;
                common::line(
                    &format!("{netmod}_bw_{name}"),
                    gbps.parse().unwrap(),
                    "GB/s",
                    &format!("raw_{netmod}_stream_{name}"),
                    base,
                    "GB/s",
                );
            }
            _ => {}
        }
    }
}

fn startup_figure() {
    let runs = if std::env::var_os("CONVERSE_BENCH_QUICK").is_some() {
        2
    } else {
        10
    };
    let me = me();
    let convrun = common::best_of(runs, || {
        let t = Instant::now();
        let st = Command::new(CONVRUN)
            .args(["+p", "4", &me, "job-noop"])
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success());
        t.elapsed().as_secs_f64() * 1e3
    });
    let spawn = common::best_of(runs, || {
        let t = Instant::now();
        let children: Vec<_> = (0..4)
            .map(|_| Command::new(&me).arg("noop").spawn().unwrap())
            .collect();
        for mut c in children {
            assert!(c.wait().unwrap().success());
        }
        t.elapsed().as_secs_f64() * 1e3
    });
    common::line("convrun_startup_p4", convrun, "ms", "spawn_4", spawn, "ms");
}

/// Sizes of the one-sided gets.
const RDMA_SIZES: [usize; 5] = [8, 4 << 10, 64 << 10, 1 << 20, 4 << 20];

/// Runs the one-sided job over shm and prints its figures.
fn rdma_figures() {
    let out = Command::new(CONVRUN)
        .args(["+p", "2", "++netmod", "shm", &me(), "job-rdma"])
        .stderr(Stdio::inherit())
        .output()
        .expect("convrun starts");
    assert!(out.status.success(), "the one-sided job failed");
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        if let ["rdma", size, us, raw] = l.split_whitespace().collect::<Vec<_>>().as_slice() {
            let name = common::size_name(size.parse().unwrap());
            common::line(
                &format!("rdma_get_{name}"),
                us.parse().unwrap(),
                "us",
                &format!("raw_process_vm_readv_{name}"),
                raw.parse().unwrap(),
                "us",
            );
        }
    }
}

/// PE 1 registers a buffer and tells PE 0 where it is (and its process's
/// pid); PE 0 times gets of it, and `process_vm_readv`s of the same bytes.
fn job_rdma() {
    use converse::cmi::rdma;
    thread_local! {
        static BUF: std::cell::RefCell<Option<rdma::DmaBuffer>> = const { std::cell::RefCell::new(None) };
    }
    let code = Converse::new()
        .run(|_| {
            let at = converse::register_handler(|m: Message| {
                TAKEN.with(|t| *t.borrow_mut() = Some(m));
            });
            if converse::my_pe() == 1 {
                let buf = rdma::dma_alloc(4 << 20);
                let mut m = Message::new(at, 16);
                m.payload_mut()[..8].copy_from_slice(&buf.addr().to_le_bytes());
                m.payload_mut()[8..].copy_from_slice(&u64::from(std::process::id()).to_le_bytes());
                BUF.with(|b| *b.borrow_mut() = Some(buf));
                converse::sync_send_and_free(0, m);
                return;
            }
            converse::deliver_specific_msg(at);
            let m = TAKEN
                .with(|t| t.borrow_mut().take())
                .expect("the address came");
            let word =
                |i: usize| u64::from_le_bytes(m.payload()[i * 8..i * 8 + 8].try_into().unwrap());
            let (addr, pid) = (word(0), word(1) as i32);
            let local = std::sync::Arc::new(rdma::dma_alloc(4 << 20));
            for size in RDMA_SIZES {
                let rounds = rounds_for(size);
                let warm = warm_up_for(rounds);
                let mut t0 = Instant::now();
                for i in 0..warm + rounds {
                    if i == warm {
                        t0 = Instant::now();
                    }
                    rdma::get_into(1, addr, &local, 0, size)
                        .wait()
                        .expect("the get works");
                }
                let us = t0.elapsed().as_secs_f64() / rounds as f64 * 1e6;
                let t0 = Instant::now();
                for _ in 0..rounds {
                    let l = libc::iovec {
                        iov_base: local.addr() as usize as *mut libc::c_void,
                        iov_len: size,
                    };
                    let r = libc::iovec {
                        iov_base: addr as usize as *mut libc::c_void,
                        iov_len: size,
                    };
                    // SAFETY: `l` is our registered buffer (4 MiB, at least
                    // `size`; nothing here reads it meanwhile); the kernel
                    // checks `r` against the other process.
                    let n = unsafe { libc::process_vm_readv(pid, &l, 1, &r, 1, 0) };
                    assert_eq!(n, size as isize, "process_vm_readv");
                }
                let raw = t0.elapsed().as_secs_f64() / rounds as f64 * 1e6;
                println!("rdma {size} {us:.3} {raw:.3}");
            }
            converse::exit(0);
        })
        .unwrap();
    std::process::exit(code)
}

/// Sizes of the persistent bounces (payload bytes; the channel's limit is
/// the message, header included). Up to `MIN_CHANNEL_MESSAGE` (8 B, 4 KiB)
/// a handle sends the ordinary way; above it (16 KiB, 64 KiB) on its
/// channel.
const PERSISTENT_SIZES: [usize; 4] = [8, 4 << 10, 16 << 10, 64 << 10];

/// Runs the persistent-channel job over shm and prints its figures.
fn persistent_figures() {
    let out = Command::new(CONVRUN)
        .args(["+p", "2", "++netmod", "shm", &me(), "job-persistent"])
        .stderr(Stdio::inherit())
        .output()
        .expect("convrun starts");
    assert!(out.status.success(), "the persistent job failed");
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        if let ["persistent", size, us, plain] = l.split_whitespace().collect::<Vec<_>>().as_slice()
        {
            let name = common::size_name(size.parse().unwrap());
            common::line(
                &format!("persistent_oneway_{name}"),
                us.parse().unwrap(),
                "us",
                &format!("ordinary_oneway_{name}"),
                plain.parse().unwrap(),
                "us",
            );
        }
    }
}

/// PE 0 and PE 1 each make a persistent channel to the other, then bounce
/// a message in turns with and without them; PE 0 prints the best one-way
/// time of each.
fn job_persistent() {
    use converse::cmi::persistent;
    let code = Converse::new()
        .run_user_scheduler(|_| {
            let me = converse::my_pe();
            let peer = 1 - me;
            let ball = converse::register_handler(|m: Message| {
                TAKEN.with(|t| *t.borrow_mut() = Some(m));
            });
            let take = || loop {
                if let Some(m) = TAKEN.with(|t| t.borrow_mut().take()) {
                    return m;
                }
                converse::deliver_specific_msg(ball);
            };
            let channel = persistent::create_persistent(peer, (64 << 10) + 64);
            while !channel.is_ready() {
                converse::schedule_count(1);
            }
            for size in PERSISTENT_SIZES {
                let rounds = rounds_for(size);
                let mut best = [f64::MAX; 2];
                for turn in 0..10 {
                    let on = turn % 2 == 0;
                    persistent::use_persistent(if on {
                        std::slice::from_ref(&channel)
                    } else {
                        &[]
                    });
                    let t0 = Instant::now();
                    let mut held = (me == 0).then(|| Message::new(ball, size));
                    for _ in 0..rounds {
                        if let Some(m) = held.take() {
                            converse::sync_send_and_free(peer, m);
                        }
                        let m = take();
                        if me == 0 {
                            held = Some(m);
                        } else {
                            converse::sync_send_and_free(peer, m);
                        }
                    }
                    let us = t0.elapsed().as_secs_f64() / rounds as f64 * 1e6 / 2.0;
                    let slot = &mut best[usize::from(!on)];
                    *slot = slot.min(us);
                }
                if me == 0 {
                    println!("persistent {size} {:.3} {:.3}", best[0], best[1]);
                }
            }
            persistent::use_persistent(&[]);
            channel.destroy();
        })
        .unwrap();
    std::process::exit(code)
}

const GAMMA_SIZES: [usize; 2] = [8, 4 << 20];

/// Runs the GAMMA job over shm and prints its figures.
fn gamma_figures() {
    let out = Command::new(CONVRUN)
        .args(["+p", "2", "++netmod", "shm", &me(), "job-gamma"])
        .stderr(Stdio::inherit())
        .output()
        .expect("convrun starts");
    assert!(out.status.success(), "the GAMMA job failed");
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let ["gamma", size, us, plain] = l.split_whitespace().collect::<Vec<_>>()[..] else {
            continue;
        };
        let size: usize = size.parse().unwrap();
        let (us, plain): (f64, f64) = (us.parse().unwrap(), plain.parse().unwrap());
        let name = common::size_name(size);
        if size <= 4096 {
            common::line(
                &format!("gamma_oneway_{name}"),
                us,
                "us",
                &format!("converse_oneway_{name}"),
                plain,
                "us",
            );
        } else {
            let gbps = |us: f64| size as f64 / (us * 1e3);
            common::line(
                &format!("gamma_bw_{name}"),
                gbps(us),
                "GB/s",
                &format!("converse_bw_{name}"),
                gbps(plain),
                "GB/s",
            );
        }
    }
}

/// Nodes 0 and 1 bounce a message through GAMMA ports and, in turns, as
/// Converse messages; node 0 prints the best one-way time of each.
fn job_gamma() {
    use converse_gamma::{self as gamma, Buffer, Dest, DestNode, GO_BACK};
    let code = gamma::run(2, std::env::args().skip(1), || {
        let me = gamma::my_node().unwrap();
        let peer = 1 - me;
        let ball = converse::register_handler(|m: Message| {
            TAKEN.with(|t| *t.borrow_mut() = Some(m));
        });
        let take = || loop {
            if let Some(m) = TAKEN.with(|t| t.borrow_mut().take()) {
                return m;
            }
            converse::deliver_specific_msg(ball);
        };
        let max = *GAMMA_SIZES.iter().max().unwrap();
        let data = vec![7u8; max];
        let inbox = Buffer::new(max);
        let dest = Dest {
            node: DestNode::Node(peer),
            par_pid: gamma::my_par_pid().unwrap(),
            port: 1,
        };
        gamma::set_passive_port(1, Some(dest), 1, GO_BACK, Some(inbox.clone()), max).unwrap();
        gamma::sync().unwrap();
        for size in GAMMA_SIZES {
            if !profiled(size) {
                continue;
            }
            let rounds = rounds_for(size) * profile_repeat();
            let mut best = [f64::MAX; 2];
            for turn in 0..10 {
                let ports = turn % 2 == 0;
                gamma::sync().unwrap();
                let t0 = Instant::now();
                for _ in 0..rounds {
                    if ports {
                        if me == 0 {
                            gamma::send(1, &data[..size]).unwrap();
                            gamma::wait(1, 1).unwrap();
                        } else {
                            gamma::wait(1, 1).unwrap();
                            gamma::send(1, &data[..size]).unwrap();
                        }
                    } else {
                        let send = || {
                            let mut m = Message::new(ball, size);
                            m.payload_mut().copy_from_slice(&data[..size]);
                            converse::sync_send_and_free(peer as usize, m);
                        };
                        if me == 0 {
                            send();
                            drop(take());
                        } else {
                            drop(take());
                            send();
                        }
                    }
                }
                let us = t0.elapsed().as_secs_f64() / rounds as f64 * 1e6 / 2.0;
                let slot = &mut best[usize::from(!ports)];
                *slot = slot.min(us);
            }
            assert_eq!(inbox.borrow()[..size], data[..size]);
            if me == 0 {
                println!("gamma {size} {:.3} {:.3}", best[0], best[1]);
            }
        }
    })
    .unwrap();
    std::process::exit(code)
}

/// Runs the migration job over shm and prints its figure.
fn migrate_figures() {
    let out = Command::new(CONVRUN)
        .args([
            "++no-aslr",
            "+p",
            "2",
            "++netmod",
            "shm",
            &me(),
            "job-migrate",
        ])
        .stderr(Stdio::inherit())
        .output()
        .expect("convrun starts");
    assert!(out.status.success(), "the migration job failed");
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        if let ["migrate", us, msg_us] = l.split_whitespace().collect::<Vec<_>>().as_slice() {
            common::line(
                "cth_migrate",
                us.parse().unwrap(),
                "us",
                "oneway_64KiB",
                msg_us.parse().unwrap(),
                "us",
            );
        }
    }
}

/// PE 0 bounces a 64 KiB message with PE 1, then a migratable thread
/// moves itself between them; PE 0 prints the time per move and per
/// one-way message.
fn job_migrate() {
    use converse::cth::migrate::migrate_self;
    thread_local! {
        static DONE: std::cell::Cell<f64> = const { std::cell::Cell::new(0.0) };
    }
    let code = Converse::new()
        .run_user_scheduler(|_| {
            let me = converse::my_pe();
            let ball = converse::register_handler(|m: Message| {
                TAKEN.with(|t| *t.borrow_mut() = Some(m));
            });
            let rounds = rounds_for(64 << 10);
            let take = || loop {
                if let Some(m) = TAKEN.with(|t| t.borrow_mut().take()) {
                    return m;
                }
                converse::deliver_specific_msg(ball);
            };
            let t0 = Instant::now();
            let mut held = (me == 0).then(|| Message::new(ball, 64 << 10));
            for _ in 0..rounds {
                if let Some(m) = held.take() {
                    converse::sync_send_and_free(1, m);
                }
                let m = take();
                if me == 0 {
                    held = Some(m);
                } else {
                    converse::sync_send_and_free(0, m);
                }
            }
            let msg_us = t0.elapsed().as_secs_f64() / rounds as f64 * 1e6 / 2.0;
            if me == 0 {
                let moves = rounds as usize;
                converse::Thread::create_migratable(
                    move || {
                        let t0 = Instant::now();
                        for i in 0..moves {
                            migrate_self(if i % 2 == 0 { 1 } else { 0 });
                        }
                        let us = t0.elapsed().as_secs_f64() / moves as f64 * 1e6;
                        // Back on PE 0 (an even number of moves).
                        DONE.with(|d| d.set(us));
                    },
                    64 << 10,
                )
                .awaken();
                while DONE.with(std::cell::Cell::get) == 0.0 {
                    converse::schedule_count(1);
                }
                println!("migrate {:.3} {msg_us:.3}", DONE.with(std::cell::Cell::get));
                converse::exit(0);
            }
            converse::schedule_forever();
        })
        .unwrap();
    std::process::exit(code)
}

// ---- the job -----------------------------------------------------------------

fn job_noop() {
    let code = Converse::new().run(|_| converse::exit_scheduler()).unwrap();
    std::process::exit(code)
}

thread_local! {
    /// The message `deliver_specific_msg` just delivered.
    static TAKEN: std::cell::RefCell<Option<Message>> = const { std::cell::RefCell::new(None) };
}

fn job_pingpong() {
    let code = Converse::new()
        .run_user_scheduler(|_args| {
            let me = converse::my_pe();
            let ball = converse::register_handler(|m: Message| {
                TAKEN.with(|t| *t.borrow_mut() = Some(m));
            });
            let peer = 1 - me;
            // The ball may have been delivered already: a stream's sends
            // wait while too much is lent to the peer, and meanwhile run
            // this PE's arrived messages (`sync_send`'s flow control), the
            // peer's final answer among them.
            let take = || loop {
                if let Some(m) = TAKEN.with(|t| t.borrow_mut().take()) {
                    return m;
                }
                converse::deliver_specific_msg(ball);
            };
            for size in RTT_SIZES {
                if !profiled(size) {
                    continue;
                }
                let rounds = rounds_for(size) * profile_repeat();
                // A few warm-up trips, then the timed ones.
                let warm = warm_up_for(rounds);
                let mut t0 = Instant::now();
                // One message bounces, as the raw baseline bounces one
                // buffer (a new one per trip would time its zeroing too).
                let mut ball_msg = (me == 0).then(|| Message::new(ball, size));
                for i in 0..warm + rounds {
                    if i == warm {
                        t0 = Instant::now();
                    }
                    if me == 0 {
                        let m = ball_msg.take().expect("PE 0 holds the ball");
                        converse::sync_send_and_free(peer, m);
                        ball_msg = Some(take());
                    } else {
                        let m = take();
                        converse::sync_send_and_free(peer, m);
                    }
                }
                if me == 0 {
                    let us = t0.elapsed().as_secs_f64() / rounds as f64 * 1e6;
                    println!("rtt {size} {us:.3}");
                }
            }
            for size in BW_SIZES {
                if !profiled(size) {
                    continue;
                }
                let count = (stream_bytes() / size).max(4);
                if me == 0 {
                    let t0 = Instant::now();
                    let msg = Message::new(ball, size);
                    for _ in 0..count {
                        converse::sync_send(peer, &msg);
                    }
                    take();
                    let secs = t0.elapsed().as_secs_f64();
                    println!("bw {size} {:.3}", (count * size) as f64 / secs / 1e9);
                } else {
                    for _ in 0..count {
                        take();
                    }
                    converse::sync_send_and_free(peer, Message::new(ball, 0));
                }
            }
        })
        .unwrap();
    std::process::exit(code)
}

// ---- the raw baseline ----------------------------------------------------------

struct Raw {
    rtt: Vec<(usize, f64)>,
    bw: Vec<(usize, f64)>,
}

/// Reads exactly `buf.len()` bytes from a non-blocking socket, spinning.
fn read_spin(s: &mut TcpStream, buf: &mut [u8]) {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => panic!("raw peer closed"),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => panic!("raw read: {e}"),
        }
    }
}

/// Writes all of `buf` to a non-blocking socket, spinning.
fn write_spin(s: &mut TcpStream, buf: &[u8]) {
    let mut put = 0;
    while put < buf.len() {
        match s.write(&buf[put..]) {
            Ok(n) => put += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => panic!("raw write: {e}"),
        }
    }
}

fn raw_socket(s: &TcpStream) {
    s.set_nodelay(true).unwrap();
    s.set_nonblocking(true).unwrap();
}

/// The driver's side of the raw figures: it bounces and receives; a child
/// process (`raw-peer`) echoes and streams.
fn raw_tcp_figures() -> Raw {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let mut child = Command::new(me())
        .args(["raw-peer", &addr])
        .spawn()
        .unwrap();
    let (mut s, _) = listener.accept().unwrap();
    raw_socket(&s);
    let mut rtt = Vec::new();
    for size in RTT_SIZES {
        let rounds = rounds_for(size);
        let mut buf = vec![1u8; size];
        for _ in 0..warm_up_for(rounds) {
            write_spin(&mut s, &buf);
            read_spin(&mut s, &mut buf);
        }
        let t0 = Instant::now();
        for _ in 0..rounds {
            write_spin(&mut s, &buf);
            read_spin(&mut s, &mut buf);
        }
        rtt.push((size, t0.elapsed().as_secs_f64() / rounds as f64 * 1e6));
    }
    let mut bw = Vec::new();
    for size in BW_SIZES {
        let count = (stream_bytes() / size).max(4);
        let mut buf = vec![0u8; size];
        let t0 = Instant::now();
        for _ in 0..count {
            read_spin(&mut s, &mut buf);
        }
        write_spin(&mut s, &[1]);
        bw.push((
            size,
            (count * size) as f64 / t0.elapsed().as_secs_f64() / 1e9,
        ));
    }
    child.wait().unwrap();
    Raw { rtt, bw }
}

fn raw_peer(addr: &str) {
    let mut s = TcpStream::connect(addr).unwrap();
    raw_socket(&s);
    for size in RTT_SIZES {
        let mut buf = vec![0u8; size];
        let rounds = rounds_for(size);
        for _ in 0..warm_up_for(rounds) + rounds {
            read_spin(&mut s, &mut buf);
            write_spin(&mut s, &buf);
        }
    }
    for size in BW_SIZES {
        let count = (stream_bytes() / size).max(4);
        let buf = vec![2u8; size];
        for _ in 0..count {
            write_spin(&mut s, &buf);
        }
        let mut ack = [0u8; 1];
        read_spin(&mut s, &mut ack);
    }
    // Give the driver a moment before the socket closes.
    std::thread::sleep(Duration::from_millis(10));
}

// ---- the raw MPI baseline --------------------------------------------------------

/// The MPI launcher and its leading arguments: `CONVERSE_BENCH_MPIEXEC`
/// split at spaces (`mpirun.openmpi --oversubscribe` for a build against
/// Open MPI), `mpiexec` without it.
fn mpi_launcher() -> Vec<String> {
    let words: Vec<String> = std::env::var("CONVERSE_BENCH_MPIEXEC")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect();
    if words.is_empty() {
        vec!["mpiexec".to_string()]
    } else {
        words
    }
}

/// Runs the raw MPI ping-pong and stream (`raw-mpi`) under `mpiexec -n 2`
/// and reads rank 0's figures.
#[cfg(feature = "mpi")]
fn raw_mpi_figures() -> Raw {
    let launcher = mpi_launcher();
    let out = Command::new(&launcher[0])
        .args(&launcher[1..])
        .args(["-n", "2", &me(), "raw-mpi"])
        .stderr(Stdio::inherit())
        .output()
        .expect("mpiexec starts");
    assert!(out.status.success(), "the raw MPI ping-pong failed");
    let text = String::from_utf8_lossy(&out.stdout);
    let (mut rtt, mut bw) = (Vec::new(), Vec::new());
    for l in text.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        match w.as_slice() {
            ["rtt", size, us] => rtt.push((size.parse().unwrap(), us.parse().unwrap())),
            ["bw", size, gbps] => bw.push((size.parse().unwrap(), gbps.parse().unwrap())),
            _ => {}
        }
    }
    Raw { rtt, bw }
}

/// One rank of the raw MPI baseline: rank 0 bounces each size with rank 1
/// and takes rank 1's stream, printing what the job prints.
#[cfg(feature = "mpi")]
fn raw_mpi() {
    use mpi::traits::*;
    let universe = mpi::initialize().expect("MPI initializes");
    let world = universe.world();
    let me = world.rank();
    let peer = world.process_at_rank(1 - me);
    for size in RTT_SIZES {
        let rounds = rounds_for(size);
        let warm = warm_up_for(rounds);
        let mut buf = vec![1u8; size];
        let mut t0 = Instant::now();
        for i in 0..warm + rounds {
            if i == warm {
                t0 = Instant::now();
            }
            if me == 0 {
                peer.send(&buf[..]);
                peer.receive_into(&mut buf[..]);
            } else {
                peer.receive_into(&mut buf[..]);
                peer.send(&buf[..]);
            }
        }
        if me == 0 {
            let us = t0.elapsed().as_secs_f64() / rounds as f64 * 1e6;
            println!("rtt {size} {us:.3}");
        }
    }
    for size in BW_SIZES {
        let count = (stream_bytes() / size).max(4);
        let mut buf = vec![2u8; size];
        if me == 0 {
            let t0 = Instant::now();
            for _ in 0..count {
                peer.send(&buf[..]);
            }
            let mut ack = [0u8; 1];
            peer.receive_into(&mut ack[..]);
            let secs = t0.elapsed().as_secs_f64();
            println!("bw {size} {:.3}", (count * size) as f64 / secs / 1e9);
        } else {
            for _ in 0..count {
                peer.receive_into(&mut buf[..]);
            }
            peer.send(&[1u8][..]);
        }
    }
}

// ---- the raw shared-memory baseline --------------------------------------------

/// A shared buffer between the driver and its child: a flag word each way
/// and two slots of data. The raw figures copy the bytes in and out once
/// each, as a message through shared memory must, and spin on the flags.
struct Shared {
    base: *mut u8,
}

const SLOT: usize = 4 << 20;
const SHARED_LEN: usize = 4096 + 2 * SLOT;

impl Shared {
    fn map(path: &str, create: bool) -> Shared {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(path)
            .unwrap();
        if create {
            file.set_len(SHARED_LEN as u64).unwrap();
        }
        // SAFETY: a fresh shared mapping of a file of SHARED_LEN bytes.
        let base = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                SHARED_LEN,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::SHARED,
                &file,
                0,
            )
            .unwrap()
        };
        Shared { base: base.cast() }
    }

    /// Flag `i` (0: driver to child, 1: child to driver).
    fn flag(&self, i: usize) -> &std::sync::atomic::AtomicU64 {
        // SAFETY: 8-aligned offsets in the first page of the mapping, which
        // lives as long as the process.
        unsafe { &*(self.base.add(i * 64) as *const std::sync::atomic::AtomicU64) }
    }

    fn slot(&self, i: usize) -> *mut u8 {
        // SAFETY: slot `i` of 2 is inside the mapping.
        unsafe { self.base.add(4096 + (i % 2) * SLOT) }
    }

    fn wait(&self, i: usize, value: u64) {
        while self.flag(i).load(std::sync::atomic::Ordering::Acquire) < value {
            std::hint::spin_loop();
        }
    }

    fn put(&self, slot: usize, from: &[u8]) {
        // SAFETY: the slot holds SLOT bytes, more than any message here, and
        // the flag protocol gives it to one side at a time.
        unsafe { std::ptr::copy_nonoverlapping(from.as_ptr(), self.slot(slot), from.len()) };
    }

    fn take(&self, slot: usize, into: &mut [u8]) {
        // SAFETY: as in `put`.
        unsafe { std::ptr::copy_nonoverlapping(self.slot(slot), into.as_mut_ptr(), into.len()) };
    }
}

fn raw_shm_figures() -> Raw {
    let path = format!("/dev/shm/converse-bench-{}", std::process::id());
    let sh = Shared::map(&path, true);
    let mut child = Command::new(me())
        .args(["raw-shm-peer", &path])
        .spawn()
        .unwrap();
    let mut seq = 0u64;
    let mut rtt = Vec::new();
    for size in RTT_SIZES {
        let rounds = rounds_for(size);
        let mut buf = vec![1u8; size];
        let mut trip = |buf: &mut Vec<u8>| {
            seq += 1;
            sh.put(0, buf);
            sh.flag(0).store(seq, std::sync::atomic::Ordering::Release);
            sh.wait(1, seq);
            sh.take(1, buf);
        };
        for _ in 0..warm_up_for(rounds) {
            trip(&mut buf);
        }
        let t0 = Instant::now();
        for _ in 0..rounds {
            trip(&mut buf);
        }
        rtt.push((size, t0.elapsed().as_secs_f64() / rounds as f64 * 1e6));
    }
    // Streams: the child fills the two slots in turn; the driver empties
    // them and hands each back.
    let mut bw = Vec::new();
    for size in BW_SIZES {
        let count = (stream_bytes() / size).max(4) as u64;
        let mut buf = vec![0u8; size];
        let t0 = Instant::now();
        for i in 0..count {
            seq += 1;
            sh.wait(1, seq);
            sh.take(i as usize, &mut buf);
            sh.flag(0).store(seq, std::sync::atomic::Ordering::Release);
        }
        bw.push((
            size,
            (count as usize * size) as f64 / t0.elapsed().as_secs_f64() / 1e9,
        ));
    }
    child.wait().unwrap();
    let _ = std::fs::remove_file(&path);
    Raw { rtt, bw }
}

fn raw_shm_peer(path: &str) {
    let sh = Shared::map(path, false);
    let mut seq = 0u64;
    for size in RTT_SIZES {
        let mut buf = vec![0u8; size];
        let rounds = rounds_for(size);
        for _ in 0..warm_up_for(rounds) + rounds {
            seq += 1;
            sh.wait(0, seq);
            sh.take(0, &mut buf);
            sh.put(1, &buf);
            sh.flag(1).store(seq, std::sync::atomic::Ordering::Release);
        }
    }
    for size in BW_SIZES {
        let count = (stream_bytes() / size).max(4) as u64;
        let buf = vec![2u8; size];
        for i in 0..count {
            seq += 1;
            // Slot i % 2 is free once the driver took message i - 2.
            if i >= 2 {
                sh.wait(0, seq - 2);
            }
            sh.put(i as usize, &buf);
            sh.flag(1).store(seq, std::sync::atomic::Ordering::Release);
        }
        sh.wait(0, seq);
    }
}
