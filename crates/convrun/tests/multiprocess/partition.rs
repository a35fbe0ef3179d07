//! Jobs across hosts for real (network namespaces, `nshosts`), and hosts
//! that are lost without a word (issue 51): a link cut for good ends the
//! job within the peer timeout and some, naming the host and process, and
//! leaves nothing running; a link cut for less than the timeout loses
//! nothing; a host whose processes are all killed is named at once.
//!
//! Child programs are named `ns_*`; cases `hosts_*`.
use std::time::{Duration, Instant};

use crate::Case;
use crate::common::{convrun, me};
use crate::launcher::Running;
use crate::nshosts::{NsHosts, with_hosts};

const LIMIT: Duration = Duration::from_secs(90);

pub fn cases() -> Vec<Case> {
    vec![
        ("hosts_answers", hosts_answers),
        ("hosts_cut_for_good", hosts_cut_for_good),
        ("hosts_short_partition_heals", hosts_short_partition_heals),
        ("hosts_split_from_each_other", hosts_split_from_each_other),
        ("hosts_all_killed", hosts_all_killed),
        ("hosts_ccs_while_partitioned", hosts_ccs_while_partitioned),
        (
            "liveness_a_stopped_process_is_not_lost",
            liveness_a_stopped_process_is_not_lost,
        ),
    ]
}

// ---------------------------------------------------------------------------
// Child programs
// ---------------------------------------------------------------------------

/// Runs child program `name` if it is one of these; returns its exit code.
pub fn child(name: &str, _args: &[String]) -> Option<i32> {
    let own = crate::launcher::own_args();
    let name = crate::launcher::program_name(name, &own);
    let a: Vec<String> = own.iter().skip(1).cloned().collect();
    match name {
        // A token goes around the ring of PEs, counting its hops, for SECS
        // seconds; PE 0 says `ring running` at the start, then checks the
        // count at every lap and prints `ring ok: H hops` at the end.
        "ns_ring" => {
            let secs: f64 = a.first().and_then(|s| s.parse().ok()).unwrap_or(1.0);
            Some(crate::launcher::run(move |_| ring(secs)))
        }
        _ => None,
    }
}

fn ring(secs: f64) {
    use std::cell::Cell;
    thread_local! {
        static LAPS: Cell<u64> = const { Cell::new(0) };
    }
    let start = Instant::now();
    // A CCS request says which PE answered.
    converse::ccs::register_handler("ns_where", |_m: converse::Message| {
        converse::ccs::send_reply(format!("PE {}", converse::my_pe()).as_bytes());
    });
    let token = converse::register_handler(move |mut msg: converse::Message| {
        let (me, n) = (converse::my_pe(), converse::num_pes());
        let hops = u64::from_le_bytes(msg.payload()[..8].try_into().unwrap()) + 1;
        msg.payload_mut()[..8].copy_from_slice(&hops.to_le_bytes());
        if me == 0 {
            let laps = LAPS.with(|l| {
                l.set(l.get() + 1);
                l.get()
            });
            if hops != laps * n as u64 {
                println!("ring wrong: {hops} hops after {laps} laps of {n}");
                converse::exit(1);
            }
            if start.elapsed().as_secs_f64() >= secs {
                println!("ring ok: {hops} hops");
                converse::exit(0);
            }
        }
        converse::sync_send_and_free((me + 1) % n, msg);
    });
    if converse::my_pe() == 0 {
        println!("ring running");
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let msg = converse::Message::from_payload(token, &0u64.to_le_bytes());
        converse::sync_send_and_free(1 % converse::num_pes(), msg);
    }
}

// ---------------------------------------------------------------------------
// Cases
// ---------------------------------------------------------------------------

/// The job's arguments on `hosts`, then `rest`.
fn args<'a>(nodelist: &'a str, me: &'a str, rest: &[&'a str], ring: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["++nodelist", nodelist];
    v.extend_from_slice(rest);
    v.push(me);
    v.push("ns_ring");
    v.extend_from_slice(ring);
    v
}

/// Starts `ns_ring SECS` on `hosts` with `rest` (`++nodelist` comes
/// first), and returns once the ring has run for half a second.
fn ring_running(hosts: &NsHosts, rest: &[&str], secs: &str) -> Running {
    let (list, me) = (hosts.nodelist(), me());
    let job = Running::start(&args(&list, &me, rest, &[secs]), false);
    wait_running(&job);
    std::thread::sleep(Duration::from_millis(500));
    job
}

/// Prints the job's stderr, indented, for the log.
fn show(f: &crate::common::Finished) {
    for line in f.stderr.lines() {
        println!("    | {line}");
    }
}

/// Waits until PE 0 says the ring runs.
fn wait_running(job: &Running) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !job.texts().0.contains("ring running") {
        assert!(Instant::now() < deadline, "no ring: {:?}", job.texts());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits up to `limit` for every process in the hosts to be gone.
fn expect_hosts_empty(hosts: &NsHosts, n: usize, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let left: Vec<(usize, Vec<i32>)> = (0..n)
            .map(|i| (i, hosts.pids(i)))
            .filter(|(_, p)| !p.is_empty())
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "processes left on the hosts: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The usual answers across two hosts: over tcp alone, and shm within a
/// host with tcp between.
fn hosts_answers() {
    with_hosts(2, |hosts| {
        let (list, me) = (hosts.nodelist(), me());
        for rest in [
            &["+p", "4", "++ppn", "1", "++netmod", "tcp"][..],
            &["+p", "8", "++ppn", "2"][..],
            &["+p", "4", "++ppn", "1", "++netmod", "auto"][..],
        ] {
            let f = convrun(&args(&list, &me, rest, &["0.5"]), LIMIT);
            f.expect_code(0);
            assert!(f.stdout.contains("ring ok: "), "{rest:?}: {}", f.stdout);
        }
        expect_hosts_empty(hosts, 2, Duration::from_secs(5));
    });
}

/// Host 1's link cut for good while the ring runs across both hosts: with
/// `++peer-timeout 10` the job ends soon after (it hung forever), exit
/// code not 0, naming process 1 and its host; nothing is left running on
/// either host.
fn hosts_cut_for_good() {
    with_hosts(2, |hosts| {
        let job = ring_running(
            hosts,
            &["++peer-timeout", "10", "+p", "2", "++ppn", "1"],
            "1000",
        );
        let cut = Instant::now();
        hosts.cut(1);
        let f = job.finish(LIMIT);
        let took = cut.elapsed();
        assert_ne!(f.code, Some(0), "{}", f.stderr);
        // Named by `convrun` (`no word from process 1 (PE 1) on ADDR`) or
        // by process 0, whose own link to it finds the silence as soon
        // (`lost process 1 (PE 1): tcp: no word from process 1 at ADDR`).
        // (Here the cut-off host's remote shell runs on this machine, so
        // `convrun` also sees process 1 end itself; over ssh it would not.)
        let named = [
            format!("no word from process 1 (PE 1) on {}", hosts.addrs[1]),
            format!("no word from process 1 at {}", hosts.addrs[1]),
        ];
        assert!(
            named.iter().any(|n| f.stderr.contains(n)),
            "{named:?}:\n{}",
            f.stderr
        );
        assert!(f.stderr.contains("for 10 s"), "{}", f.stderr);
        // Within the timeout and some (the aim: 15 s); it was forever.
        assert!(took < Duration::from_secs(30), "{took:?}\n{}", f.stderr);
        println!("    link cut for good: the job ended {took:.1?} later");
        show(&f);
        hosts.mend(1);
        expect_hosts_empty(hosts, 2, Duration::from_secs(20));
    });
}

/// The two hosts cut off from each other while each still reaches
/// `convrun`: the processes' own links (their VCs) find the silence, and
/// the job ends naming the other side.
fn hosts_split_from_each_other() {
    with_hosts(2, |hosts| {
        let job = ring_running(
            hosts,
            &[
                "++peer-timeout",
                "6",
                "+p",
                "2",
                "++ppn",
                "1",
                "++netmod",
                "tcp",
            ],
            "1000",
        );
        let cut = Instant::now();
        hosts.split();
        let f = job.finish(LIMIT);
        let took = cut.elapsed();
        assert_ne!(f.code, Some(0), "{}", f.stderr);
        assert!(
            f.stderr.contains("no word from process 0")
                || f.stderr.contains("no word from process 1"),
            "{}",
            f.stderr
        );
        assert!(
            !f.stderr.contains("no word from the launcher"),
            "{}",
            f.stderr
        );
        assert!(took < Duration::from_secs(30), "{took:?}\n{}", f.stderr);
        println!("    hosts split: the job ended {took:.1?} later");
        show(&f);
        expect_hosts_empty(hosts, 2, Duration::from_secs(10));
    });
}

/// Host 1's link cut for 7 s, less than `++peer-timeout 10`: the ring
/// goes on once it is back, and its count is right. (With the kernel's
/// own `TCP_USER_TIMEOUT` on the idle control links, the job ended 7.5 s
/// into the cut: `liveness`.)
fn hosts_short_partition_heals() {
    with_hosts(2, |hosts| {
        let job = ring_running(
            hosts,
            &["++peer-timeout", "10", "+p", "2", "++ppn", "1"],
            "12",
        );
        hosts.cut(1);
        std::thread::sleep(Duration::from_secs(7));
        hosts.mend(1);
        let f = job.finish(LIMIT);
        f.expect_code(0);
        assert!(f.stdout.contains("ring ok: "), "{}\n{}", f.stdout, f.stderr);
        expect_hosts_empty(hosts, 2, Duration::from_secs(5));
    });
}

/// Every process of host 1 killed: named at once, as a dead process is.
fn hosts_all_killed() {
    with_hosts(2, |hosts| {
        let (list, me) = (hosts.nodelist(), me());
        let rest = ["+p", "4", "++ppn", "2"];
        let job = Running::start(&args(&list, &me, &rest, &["1000"]), false);
        wait_running(&job);
        let t = Instant::now();
        for pid in hosts.pids(1) {
            // SAFETY: kill(2) on a process of the job's host 1.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        let f = job.finish(LIMIT);
        let took = t.elapsed();
        assert_ne!(f.code, Some(0), "{}", f.stderr);
        let named = format!("process 1 (PEs 2..3) on {}", hosts.addrs[1]);
        assert!(f.stderr.contains(&named), "{named}:\n{}", f.stderr);
        assert!(took < Duration::from_secs(10), "{took:?}\n{}", f.stderr);
        expect_hosts_empty(hosts, 2, Duration::from_secs(5));
    });
}

/// While host 1 is cut off, a CCS client on host 0 is still answered by
/// process 0 (whose server does not wait for the lost host).
fn hosts_ccs_while_partitioned() {
    with_hosts(2, |hosts| {
        let (list, me) = (hosts.nodelist(), me());
        let rest = ["++server", "++server-port", "0", "+p", "2", "++ppn", "1"];
        let job = Running::start(&args(&list, &me, &rest, &["1000"]), false);
        wait_running(&job);
        let port: u16 = {
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                let out = job.texts().0;
                if let Some(p) = out
                    .lines()
                    .find_map(|l| l.split("Server port = ").nth(1))
                    .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
                {
                    break p;
                }
                assert!(Instant::now() < deadline, "no CCS banner: {out}");
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        hosts.cut(1);
        std::thread::sleep(Duration::from_secs(1));
        let answer = std::thread::scope(|s| {
            s.spawn(|| {
                hosts.enter(0);
                let mut client = converse_ccs::CcsClient::connect(("127.0.0.1", port))
                    .expect("process 0's CCS server answers");
                client.send_request("ns_where", 0, b"").unwrap();
                client.recv_response(Some(Duration::from_secs(10))).unwrap()
            })
            .join()
            .unwrap()
        });
        assert_eq!(answer, b"PE 0");
        hosts.mend(1);
        drop(job);
        expect_hosts_empty(hosts, 2, Duration::from_secs(10));
    });
}

/// A process stopped (SIGSTOP) for twice the peer timeout is not taken
/// for a lost one: its host's kernel still answers for it. The ring then
/// goes on and its count is right.
fn liveness_a_stopped_process_is_not_lost() {
    let me = me();
    let job = Running::start(
        &[
            "++peer-timeout",
            "2",
            "+p",
            "2",
            "++ppn",
            "1",
            "++netmod",
            "tcp",
            &me,
            "ns_ring",
            "7",
        ],
        false,
    );
    wait_running(&job);
    let launcher = job.pid();
    let victim = crate::siege::process_of(launcher, 1).expect("process 1");
    // SAFETY: kill(2) on a process of the job.
    unsafe {
        libc::kill(victim, libc::SIGSTOP);
    }
    std::thread::sleep(Duration::from_secs(4));
    // SAFETY: as above.
    unsafe {
        libc::kill(victim, libc::SIGCONT);
    }
    let f = job.finish(LIMIT);
    f.expect_code(0);
    assert!(f.stdout.contains("ring ok: "), "{}\n{}", f.stdout, f.stderr);
}
