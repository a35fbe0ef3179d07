//! `convrun` itself, and faults: exit codes, argument pass-through, output
//! forwarding, signals, start-up timeouts, processes that die.
//!
//! Child programs (run under `convrun`) are named `lx_*`; driver cases are
//! named `launcher_*` (the launcher's behaviour) and `fault_*` (processes
//! that die, abort or cannot join). Programs that the driver must be able to
//! clean up after print `pid NODE PID` first; the driver remembers those pids
//! and checks none of them is left running when the job is over.
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::Case;
use crate::common::{CONVRUN, Finished, convrun, me};

// ---------------------------------------------------------------------------
// Child programs
// ---------------------------------------------------------------------------

/// Runtime flags of the program that take a separate value.
const FLAGS_WITH_VALUE: &[&str] = &["+p", "++ppn", "+stacksize", "++spantree-branch"];

/// The program's own words (its name first), runtime flags removed, from the
/// process's command line. `convrun` puts the runtime flags given before the
/// program right after the program's path, so the first argument is not
/// always the child program's name.
pub(crate) fn own_args() -> Vec<String> {
    let mut out = Vec::new();
    let mut words = std::env::args().skip(1);
    while let Some(w) = words.next() {
        if w.starts_with('+') {
            if FLAGS_WITH_VALUE.contains(&w.as_str()) {
                words.next();
            }
            continue;
        }
        out.push(w);
    }
    out
}

/// This process's number in the job (0 when not started by a launcher).
pub(crate) fn node_env() -> usize {
    std::env::var("CONVERSE_NODE")
        .or_else(|_| std::env::var("PMI_RANK"))
        .or_else(|_| std::env::var("PMIX_RANK"))
        .or_else(|_| std::env::var("OMPI_COMM_WORLD_RANK"))
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

pub(crate) fn say_pid() {
    println!("pid {} {}", node_env(), std::process::id());
    let _ = std::io::stdout().flush();
}

/// Runs a normal-mode job; a bad command line or a failed join is reported
/// as `converse_init` does and gives 1.
pub(crate) fn run(start: impl Fn(&[String]) + Send + Sync + 'static) -> i32 {
    match converse::Converse::new().run(start) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("converse: {e}");
            1
        }
    }
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize, default: T) -> T {
    args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default)
}

/// The child program's name: `name`, or, when `convrun` put runtime flags
/// before it, the first of the program's own arguments.
pub fn program_name<'a>(name: &'a str, own: &'a [String]) -> &'a str {
    if name.starts_with('+') {
        own.first().map(String::as_str).unwrap_or(name)
    } else {
        name
    }
}

/// Runs child program `name` if it is one of these; returns its exit code.
pub fn child(name: &str, _args: &[String]) -> Option<i32> {
    let own = own_args();
    let name = program_name(name, &own);
    // The program's arguments after its name.
    let a: Vec<String> = own.iter().skip(1).cloned().collect();
    let code = match name {
        // Processes other than 0 start MS ms late (a second by default:
        // a squatter's window, `launcher_shm_names_cannot_be_squatted`, an
        // attacker's in `siege`), or, with `send`, send MS ms late (all
        // start at once; process 0 is running meanwhile); then every PE
        // sends its number to PE 0, which prints the sum and ends the job.
        "lx_late_sum" => {
            use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
            static SUM: AtomicU64 = AtomicU64::new(0);
            static HEARD: AtomicUsize = AtomicUsize::new(0);
            let late = Duration::from_millis(arg(&a, 0, 1000));
            let at_send = a.get(1).is_some_and(|w| w == "send");
            if node_env() != 0 && !at_send {
                std::thread::sleep(late);
            }
            run(move |_| {
                if at_send && node_env() != 0 {
                    std::thread::sleep(late);
                }
                let h = converse::register_handler(|m: converse::Message| {
                    let v = u64::from_le_bytes(m.payload()[..8].try_into().unwrap());
                    SUM.fetch_add(v, SeqCst);
                    if HEARD.fetch_add(1, SeqCst) + 1 == converse::num_pes() {
                        println!("sum={}", SUM.load(SeqCst));
                        converse::exit(0);
                    }
                });
                let mine = (converse::my_pe() as u64).to_le_bytes();
                converse::sync_send_and_free(0, converse::Message::from_payload(h, &mine));
            })
        }
        // Every PE says it is done and leaves its scheduler.
        "lx_exit_zero" => run(|_| {
            println!("done PE {}", converse::my_pe());
            converse::exit_scheduler();
        }),
        // `converse::exit(CODE)` on the first PE of process 1; the others
        // idle.
        "lx_exit_code" => {
            let code: i32 = arg(&a, 0, 3);
            let linger: u64 = arg(&a, 1, 0);
            let rc = run(move |_| {
                if converse::my_pe() == converse::node_first(1) {
                    converse::exit(code);
                }
            });
            // Process 0 then finishes some work of its own (say, writing
            // its results) before it returns the job's code.
            if linger > 0 && node_env() == 0 {
                std::thread::sleep(Duration::from_millis(linger));
                println!("node 0 finished with {rc}");
            }
            rc
        }
        // A clean job; then process 0 returns C0 after D0 ms, process 1 C1
        // after D1 ms.
        "lx_exit_after" => {
            let node = node_env();
            let code: i32 = arg(&a, node * 2, 0);
            let delay: u64 = arg(&a, node * 2 + 1, 0);
            let rc = run(|_| converse::exit_scheduler());
            if rc != 0 {
                return Some(rc);
            }
            std::thread::sleep(Duration::from_millis(delay));
            code
        }
        // Process 1 calls `std::process::exit(5)` behind the runtime's back.
        "lx_exit_outside" => {
            say_pid();
            run(|_| {
                if converse::my_pe() == converse::node_first(1) {
                    std::thread::sleep(Duration::from_millis(300));
                    let _ = std::io::stdout().flush();
                    std::process::exit(5);
                }
            })
        }
        // Prints the arguments the program got, once per process.
        "lx_args" => {
            converse::converse_init(
                std::env::args().collect(),
                |args| {
                    if converse::my_rank() == 0 {
                        println!(
                            "args node={} pes={} nodes={} {:?}",
                            converse::my_node(),
                            converse::num_pes(),
                            converse::num_nodes(),
                            &args[2.min(args.len())..]
                        );
                    }
                    converse::exit_scheduler();
                },
                false,
                false,
            );
            unreachable!("converse_init returned in normal mode")
        }
        // Every PE prints N checksummed lines to stdout and N to stderr.
        "lx_output" => {
            let n: usize = arg(&a, 0, 2000);
            run(move |_| {
                let pe = converse::my_pe();
                for seq in 0..n {
                    emit_line(false, pe, seq);
                    emit_line(true, pe, seq);
                }
                converse::exit_scheduler();
            })
        }
        // A few lines, then a last line without a newline, per process.
        "lx_tail" => {
            let rc = run(|_| {
                if converse::my_rank() == 0 {
                    println!("hello from node {}", converse::my_node());
                }
                converse::exit_scheduler();
            });
            print!("tail-{}", node_env());
            eprint!("errtail-{}", node_env());
            let _ = std::io::stdout().flush();
            rc
        }
        // PEs idle in their schedulers forever.
        "lx_idle" => {
            say_pid();
            run(|_| {})
        }
        // Process NODE (or every process, `all`) never joins the job; the
        // others try to.
        "lx_nojoin" => {
            say_pid();
            let which = a.first().cloned().unwrap_or_else(|| "all".into());
            if which == "all" || which == node_env().to_string() {
                std::thread::sleep(Duration::from_secs(30));
                0
            } else {
                run(|_| {})
            }
        }
        // Process NODE exits with CODE before joining; the others try to.
        "lx_exit_early" => {
            say_pid();
            let node: usize = arg(&a, 0, 1);
            let code: i32 = arg(&a, 1, 4);
            if node_env() == node {
                std::thread::sleep(Duration::from_millis(200));
                code
            } else {
                run(|_| {})
            }
        }
        // The first PE of process 1 aborts.
        "lx_abort" => {
            say_pid();
            run(|_| {
                if converse::my_pe() == converse::node_first(1) {
                    std::thread::sleep(Duration::from_millis(200));
                    converse::abort("lx_abort says boom");
                }
            })
        }
        // Process 1 first holds silent connections to the launcher's
        // control socket (a stranger would), then joins; PE 0 ends the job.
        "lx_strangers" => {
            if node_env() == 1 {
                let launcher = std::env::var("CONVERSE_LAUNCHER").unwrap_or_default();
                let held: Vec<std::net::TcpStream> = (0..6)
                    .filter_map(|_| std::net::TcpStream::connect(&launcher).ok())
                    .collect();
                assert_eq!(held.len(), 6, "the strangers connect");
                std::mem::forget(held);
                std::thread::sleep(Duration::from_millis(300));
            }
            run(|_| {
                if converse::my_pe() == 0 {
                    converse::exit(0);
                }
            })
        }
        // Process 1 forges hellos to the launcher (see `forge_hellos`)
        // while process 0 is slow to start; then both run, sending
        // messages to each other.
        "lx_forgers" => {
            if node_env() == 1 {
                forge_hellos();
            } else {
                std::thread::sleep(Duration::from_millis(600));
            }
            run(|_| exit_race(0, 50))
        }
        // The first PE of process 1 panics in its start function.
        "lx_panic" => {
            say_pid();
            run(|_| {
                if converse::my_pe() == converse::node_first(1) {
                    std::thread::sleep(Duration::from_millis(200));
                    panic!("lx_panic says boom");
                }
            })
        }
        // Every PE sends MSGS messages to PEs of the other processes; the
        // first PE of process 1 then calls `exit(CODE)` at once.
        "lx_exit_race" => {
            let code: i32 = arg(&a, 0, 0);
            let msgs: usize = arg(&a, 1, 3000);
            run(move |_| exit_race(code, msgs))
        }
        // Hand-made processes (see `hand_made_join`): process 1 asks for
        // process 0's card, then for process ASK's (none of the job); every
        // process prints what the launcher tells it after `go`.
        "lx_whois_stranger" => {
            let ask: usize = arg(&a, 0, 7);
            whois_stranger(ask)
        }
        // Hand-made processes: process 0's card is CARD_LEN bytes; process
        // 1 asks for it N times without reading, then reads every answer
        // and checks each is whole.
        "lx_whois_flood" => {
            let n: usize = arg(&a, 0, 20_000);
            let card_len: usize = arg(&a, 1, launch_wire::MAX_CARD);
            whois_flood(n, card_len)
        }
        // For the fake launcher: joins and leaves at once.
        "lx_join" => {
            converse::converse_init(
                std::env::args().collect(),
                |_| converse::exit_scheduler(),
                false,
                false,
            );
            unreachable!("converse_init returned in normal mode")
        }
        _ => return None,
    };
    Some(code)
}

/// Joins the job of `convrun` by hand, as the runtime would but without
/// it: connects to the launcher, proves the job key in its hello (with
/// `card` as its card), checks the welcome and waits for `go`. Returns the
/// link and its reading side.
fn hand_made_join(card: &str) -> (std::net::TcpStream, BufReader<std::net::TcpStream>) {
    use launch_wire::{Card, JobKey, Nonce, ToLauncher, ToProcess};
    let launcher = std::env::var("CONVERSE_LAUNCHER").expect("started by convrun");
    let key =
        JobKey::from_hex(&std::env::var("CONVERSE_JOB_KEY").expect("the key")).expect("a key");
    let node = node_env();
    let mut link = std::net::TcpStream::connect(&launcher).expect("the launcher");
    link.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut reader = BufReader::new(link.try_clone().unwrap());
    let mut next = || {
        let mut line = String::new();
        reader
            .read_line(&mut line)
            .expect("a line from the launcher");
        ToProcess::parse(&line).unwrap_or_else(|e| panic!("`{line}`: {e}"))
    };
    let ToProcess::Challenge(challenge) = next() else {
        panic!("no challenge first")
    };
    let nonce = Nonce::generate().unwrap();
    let pid = std::process::id();
    let hello = ToLauncher::Hello {
        node,
        pid,
        card: Card::new(card).unwrap(),
        nonce,
        proof: key.hello_proof(&challenge, &nonce, node, pid, card),
    };
    link.write_all(hello.encode().as_bytes()).unwrap();
    match next() {
        ToProcess::Welcome(proof) if key.verify_welcome(&challenge, &nonce, node, &proof) => {}
        other => panic!("not a welcome that holds: {other:?}"),
    }
    assert_eq!(next(), ToProcess::Go, "`go` after the welcome");
    (link, reader)
}

/// The card of hand-made process `node`.
fn hand_made_card(node: usize) -> String {
    format!("hand-made:{node}")
}

/// See `lx_whois_stranger`.
fn whois_stranger(ask: usize) -> i32 {
    let node = node_env();
    let (mut link, mut reader) = hand_made_join(&hand_made_card(node));
    if node == 1 {
        // One write: the launcher reads both before it answers.
        write!(link, "whois 0\nwhois {ask}\n").unwrap();
    }
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return 0,
            Ok(_) => {
                println!("told {node}: {}", line.trim_end());
                if line.starts_with("abort") {
                    return 0;
                }
            }
        }
    }
}

/// See `lx_whois_flood`.
fn whois_flood(n: usize, card_len: usize) -> i32 {
    let node = node_env();
    let card = format!("{:x<card_len$}", hand_made_card(node));
    let (mut link, mut reader) = hand_made_join(&card);
    if node == 1 {
        // Asked from another thread: the launcher stops reading requests
        // while this one's answers wait, and the answers are read here.
        let mut asker = link.try_clone().unwrap();
        let asking = std::thread::spawn(move || {
            asker.write_all("whois 0\n".repeat(n).as_bytes()).unwrap();
        });
        // Not reading for a moment: the launcher's socket fills and takes
        // the answers a piece at a time.
        std::thread::sleep(Duration::from_millis(300));
        let want = format!("card 0 {:x<card_len$}\n", hand_made_card(0));
        let mut whole = 0;
        let mut line = String::new();
        for _ in 0..n {
            line.clear();
            reader.read_line(&mut line).expect("an answer");
            if line == want {
                whole += 1;
            } else {
                println!("not the answer: {line:?}");
            }
        }
        asking.join().unwrap();
        println!("answers {whole} of {n} whole");
    }
    link.write_all(b"end\n").unwrap();
    0
}

/// Plays an attacker who found the launcher's port while process 0 is
/// still starting: hellos claiming to be process 0, each on its own
/// connection — one in the old form (no proof), one with a made-up proof,
/// one with a proof made for another connection's challenge (a replay),
/// and one made with another job's key. Each must be refused; the real
/// process 0's hello must then be taken.
fn forge_hellos() {
    use launch_wire::{Card, JobKey, Nonce, ToLauncher, ToProcess};
    let launcher = std::env::var("CONVERSE_LAUNCHER").expect("started by convrun");
    let key =
        JobKey::from_hex(&std::env::var("CONVERSE_JOB_KEY").expect("the key")).expect("a key");
    // Connects and reads the challenge.
    let challenged = || {
        let s = std::net::TcpStream::connect(&launcher).expect("the launcher");
        let mut line = String::new();
        BufReader::new(s.try_clone().unwrap())
            .read_line(&mut line)
            .unwrap();
        match ToProcess::parse(&line) {
            Ok(ToProcess::Challenge(n)) => (s, n),
            other => panic!("no challenge first: {other:?}"),
        }
    };
    let card = Card::new("tcp:127.0.0.1:9").unwrap();
    let nonce = Nonce::generate().unwrap();
    let hello = |proof| {
        ToLauncher::Hello {
            node: 0,
            pid: 4242,
            card: card.clone(),
            nonce,
            proof,
        }
        .encode()
    };
    let mut held = Vec::new();
    let (mut old, _) = challenged();
    writeln!(old, "hello 0 4242 {card}").unwrap();
    held.push(old);
    let (mut made_up, _) = challenged();
    made_up
        .write_all(hello(launch_wire::Proof::from_bytes([0x55; 32])).as_bytes())
        .unwrap();
    held.push(made_up);
    let (_, seen) = challenged();
    let (mut replayed, _) = challenged();
    let stale = key.hello_proof(&seen, &nonce, 0, 4242, card.as_str());
    replayed.write_all(hello(stale).as_bytes()).unwrap();
    held.push(replayed);
    let (mut other_job, challenge) = challenged();
    let wrong =
        JobKey::from_bytes([0x77; 32]).hello_proof(&challenge, &nonce, 0, 4242, card.as_str());
    other_job.write_all(hello(wrong).as_bytes()).unwrap();
    held.push(other_job);
    // None of them is welcomed: the launcher closes each.
    for s in &mut held {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut rest = String::new();
        let _ = s.read_to_string(&mut rest);
        assert!(
            !rest.contains("welcome"),
            "a forged hello was welcomed: {rest}"
        );
    }
}

fn exit_race(code: i32, msgs: usize) {
    let h = converse::register_handler(|msg: converse::Message| {
        assert_eq!(msg.payload().len(), 512);
    });
    let me = converse::my_pe();
    let pes = converse::num_pes();
    let my_node = converse::my_node();
    let others: Vec<usize> = (0..pes)
        .filter(|&p| converse::node_of(p) != my_node)
        .collect();
    let body = [me as u8; 512];
    for i in 0..msgs {
        let dest = others[i % others.len()];
        converse::sync_send_and_free(dest, converse::Message::from_payload(h, &body));
    }
    if me == converse::node_first(1) {
        converse::exit(code);
    }
}

/// FNV-1a of `bytes`.
fn fnv(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for &b in bytes {
        h ^= b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// The line `emit_line` writes, without its checksum and newline: about 200
/// bytes, every 97th one 20 000.
fn line_body(stderr: bool, pe: usize, seq: usize) -> String {
    let len = if seq % 97 == 13 { 20_000 } else { 160 };
    let seed = fnv(format!("{pe}/{seq}").as_bytes());
    let pad: String = (0..len)
        .map(|i| {
            let x = seed.wrapping_add(i as u32).wrapping_mul(2_654_435_761) >> 27;
            (b'a' + (x as u8 % 26)) as char
        })
        .collect();
    format!(
        "{} pe={pe} seq={seq} pad={pad}",
        if stderr { "err" } else { "out" }
    )
}

/// Writes one checksummed line in two writes (so it reaches the pipe in
/// pieces), holding the stream's lock so the process's own PEs do not cut
/// it.
fn emit_line(stderr: bool, pe: usize, seq: usize) {
    let body = line_body(stderr, pe, seq);
    let line = format!("{body} sum={:08x}\n", fnv(body.as_bytes()));
    let (a, b) = line.as_bytes().split_at(line.len() / 2);
    if stderr {
        let mut e = std::io::stderr().lock();
        let _ = e.write_all(a);
        let _ = e.flush();
        let _ = e.write_all(b);
    } else {
        let mut o = std::io::stdout().lock();
        let _ = o.write_all(a);
        let _ = o.flush();
        let _ = o.write_all(b);
        let _ = o.flush();
    }
}

/// Checks that `text` holds every line of `prefix` (`out`/`err`) for PEs
/// `0..pes` × `0..n` exactly once and intact; other lines must start with
/// one of `allowed`.
pub(crate) fn check_lines(text: &str, prefix: &str, pes: usize, n: usize, allowed: &[&str]) {
    let mut seen = vec![0u32; pes * n];
    let mut bad = Vec::new();
    for line in text.split('\n') {
        if line.is_empty() {
            continue;
        }
        if allowed.iter().any(|a| line.starts_with(a)) {
            continue;
        }
        let ok = (|| {
            let (body, sum) = line.rsplit_once(" sum=")?;
            if format!("{:08x}", fnv(body.as_bytes())) != sum {
                return None;
            }
            let mut w = body.split(' ');
            if w.next()? != prefix {
                return None;
            }
            let pe: usize = w.next()?.strip_prefix("pe=")?.parse().ok()?;
            let seq: usize = w.next()?.strip_prefix("seq=")?.parse().ok()?;
            if pe >= pes || seq >= n || line_body(prefix == "err", pe, seq) != body {
                return None;
            }
            Some(pe * n + seq)
        })();
        match ok {
            Some(i) => seen[i] += 1,
            None => bad.push(line.chars().take(300).collect::<String>()),
        }
    }
    let missing = seen.iter().filter(|&&c| c == 0).count();
    let doubled = seen.iter().filter(|&&c| c > 1).count();
    assert!(
        bad.is_empty() && missing == 0 && doubled == 0,
        "{prefix}: {} damaged/foreign lines, {missing} missing, {doubled} repeated; first damaged: {:?}",
        bad.len(),
        bad.iter().take(3).collect::<Vec<_>>()
    );
}

// ---------------------------------------------------------------------------
// Driver helpers
// ---------------------------------------------------------------------------

/// A stream being collected while the job runs.
#[derive(Default)]
struct Collected {
    text: Mutex<String>,
    grew: Condvar,
}

fn collect(
    mut from: impl Read + Send + 'static,
    into: Arc<Collected>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => {
                    into.grew.notify_all();
                    return;
                }
                Ok(n) => {
                    into.text
                        .lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&buf[..n]));
                    into.grew.notify_all();
                }
            }
        }
    })
}

/// A job started by `convrun` that the driver watches and acts on while it
/// runs. Dropping it kills what is left (so a failed case leaves nothing).
pub(crate) struct Running {
    child: Option<Child>,
    args: Vec<String>,
    out: Arc<Collected>,
    err: Arc<Collected>,
    readers: Vec<std::thread::JoinHandle<()>>,
    start: Instant,
    /// `(node, pid)` the processes printed.
    pub(crate) pids: Vec<(usize, i32)>,
}

impl Running {
    pub(crate) fn start(args: &[&str], own_group: bool) -> Running {
        Running::start_program(CONVRUN, args, own_group)
    }

    /// [`Running::start`] with another launcher than `convrun`.
    pub(crate) fn start_program(program: &str, args: &[&str], own_group: bool) -> Running {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if own_group {
            use std::os::unix::process::CommandExt;
            cmd.process_group(0);
        }
        let mut child = cmd.spawn().expect("convrun starts");
        let (out, err) = (
            Arc::new(Collected::default()),
            Arc::new(Collected::default()),
        );
        let readers = vec![
            collect(child.stdout.take().unwrap(), out.clone()),
            collect(child.stderr.take().unwrap(), err.clone()),
        ];
        Running {
            child: Some(child),
            args: args.iter().map(|s| s.to_string()).collect(),
            out,
            err,
            readers,
            start: Instant::now(),
            pids: Vec::new(),
        }
    }

    pub(crate) fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    pub(crate) fn texts(&self) -> (String, String) {
        (
            self.out.text.lock().unwrap().clone(),
            self.err.text.lock().unwrap().clone(),
        )
    }

    /// Waits until stdout has a `pid NODE PID` line from each of `nodes`
    /// processes (and stderr has `also` if given).
    pub(crate) fn wait_pids(&mut self, nodes: usize, also: Option<&str>, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let text = self.out.text.lock().unwrap().clone();
            let pids = parse_pids(&text);
            let nodes_seen: std::collections::BTreeSet<usize> = pids.iter().map(|p| p.0).collect();
            let also_ok = also.is_none_or(|s| text.contains(s));
            if nodes_seen.len() >= nodes && also_ok {
                self.pids = pids;
                return;
            }
            if Instant::now() >= deadline {
                self.pids = pids;
                let (o, e) = self.texts();
                panic!(
                    "{:?}: the processes did not all start within {limit:?}\n--- stdout\n{o}\n--- stderr\n{e}",
                    self.args
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub(crate) fn pid_of(&self, node: usize) -> i32 {
        self.pids
            .iter()
            .find(|p| p.0 == node)
            .unwrap_or_else(|| panic!("no pid of process {node}: {:?}", self.pids))
            .1
    }

    /// Waits for `convrun` to end (killing it and failing past `limit`).
    pub(crate) fn finish(mut self, limit: Duration) -> Finished {
        let deadline = Instant::now() + limit;
        let mut child = self.child.take().unwrap();
        let status = loop {
            if let Some(s) = child.try_wait().expect("wait for convrun") {
                break s;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                self.kill_leftovers();
                let (o, e) = self.texts();
                panic!(
                    "convrun {:?} did not end within {limit:?}\n--- stdout\n{o}\n--- stderr\n{e}",
                    self.args
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let elapsed = self.start.elapsed();
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let (stdout, stderr) = self.texts();
        // Whether the processes are gone is the case's to check, not for
        // `drop` to hide.
        self.pids.clear();
        Finished {
            code: status.code(),
            stdout,
            stderr,
            elapsed,
        }
    }

    fn kill_leftovers(&self) {
        for &(_, pid) in &self.pids {
            if alive(pid) {
                // SAFETY: kill(2) on a pid the job printed.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.kill_leftovers();
    }
}

pub(crate) fn parse_pids(text: &str) -> Vec<(usize, i32)> {
    text.lines()
        .filter_map(|l| {
            let mut w = l.split(' ');
            if w.next()? != "pid" {
                return None;
            }
            Some((w.next()?.parse().ok()?, w.next()?.parse().ok()?))
        })
        .collect()
}

/// True while `pid` is a live (not zombie) process.
pub(crate) fn alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, r)| r.trim_start().chars().next());
    !matches!(state, Some('Z') | Some('X') | None)
}

/// Fails unless every pid of `pids` is gone within `grace`.
pub(crate) fn expect_gone(pids: &[(usize, i32)], grace: Duration, what: &Finished) {
    let deadline = Instant::now() + grace;
    loop {
        let left: Vec<_> = pids.iter().filter(|p| alive(p.1)).collect();
        if left.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            for p in &left {
                // SAFETY: kill(2) on a pid the job printed; cleaning up.
                unsafe {
                    libc::kill(p.1, libc::SIGKILL);
                }
            }
            panic!(
                "processes (node, pid) {left:?} still running after convrun ended\n--- stdout\n{}\n--- stderr\n{}",
                what.stdout, what.stderr
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Fails unless process `node` printed the line saying why it ended the job
/// (`converse: process NODE ... ending the job: ...`, from the network layer
/// or from the launcher's abort) and that line contains every one of
/// `needles`.
pub(crate) fn expect_ended_saying(f: &Finished, node: usize, needles: &[&str]) {
    let head = format!("converse: process {node} ");
    let lines: Vec<&str> = f
        .stderr
        .lines()
        .filter(|l| l.starts_with(&head) && l.contains("ending the job"))
        .collect();
    assert!(
        lines.iter().any(|l| needles.iter().all(|n| l.contains(n))),
        "process {node} has no `ending the job` line with {needles:?} (its lines: {lines:?})\n--- stdout\n{}\n--- stderr\n{}",
        f.stdout,
        f.stderr
    );
}

pub(crate) fn expect_stderr(f: &Finished, needle: &str) {
    assert!(
        f.stderr.contains(needle),
        "stderr has no `{needle}`\n--- stdout\n{}\n--- stderr\n{}",
        f.stdout,
        f.stderr
    );
}

pub(crate) fn expect_no_stderr(f: &Finished, needle: &str) {
    assert!(
        !f.stderr.contains(needle),
        "stderr has `{needle}`, which it should not\n--- stdout\n{}\n--- stderr\n{}",
        f.stdout,
        f.stderr
    );
}

pub(crate) fn expect_nonzero(f: &Finished) {
    assert!(
        matches!(f.code, Some(c) if c != 0),
        "expected a non-zero exit code, got {:?}\n--- stdout\n{}\n--- stderr\n{}",
        f.code,
        f.stdout,
        f.stderr
    );
}

fn expect_within(f: &Finished, limit: Duration, what: &str) {
    assert!(
        f.elapsed <= limit,
        "{what}: took {:?}, more than {limit:?}\n--- stdout\n{}\n--- stderr\n{}",
        f.elapsed,
        f.stdout,
        f.stderr
    );
}

const LIMIT: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------
// Exit codes
// ---------------------------------------------------------------------------

fn launcher_exit_zero() {
    let me = me();
    let f = convrun(&["+p", "4", "++ppn", "2", &me, "lx_exit_zero"], LIMIT);
    f.expect_code(0);
    for pe in 0..4 {
        f.expect_line(&format!("done PE {pe}"));
    }
    assert!(f.stderr.is_empty(), "stderr of a clean job:\n{}", f.stderr);
}

fn launcher_exit_code() {
    let me = me();
    for (p, ppn) in [("2", "1"), ("4", "2")] {
        let f = convrun(&["+p", p, "++ppn", ppn, &me, "lx_exit_code", "3"], LIMIT);
        f.expect_code(3);
        expect_no_stderr(&f, "lost process");
    }
}

/// `exit(3)` ends the job normally; process 0 takes 300 ms more to finish
/// after `run` returned. That is no fault: nothing may say "ending the job",
/// and process 0 must get to finish.
fn launcher_exit_code_linger() {
    let me = me();
    let f = convrun(&["+p", "2", &me, "lx_exit_code", "3", "300"], LIMIT);
    expect_no_stderr(&f, "ending the job");
    f.expect_line("node 0 finished with 3");
    f.expect_code(3);
}

fn launcher_exit_first_nonzero() {
    let me = me();
    // Process 1 ends first with 3, process 0 later with 7: 3 (not the
    // lowest-numbered process's code, not the largest).
    let f = convrun(
        &["+p", "2", &me, "lx_exit_after", "7", "800", "3", "0"],
        LIMIT,
    );
    f.expect_code(3);
    // Process 0 ends first with 9, process 1 later with 4: 9 (not the
    // smallest).
    let f = convrun(
        &["+p", "2", &me, "lx_exit_after", "9", "0", "4", "800"],
        LIMIT,
    );
    f.expect_code(9);
}

/// A process that asks for the card of a process the job does not have
/// ends the job: `convrun` names it and the bad number, tells every
/// process why (the asker too, after the answer to its valid request
/// before), and exits with 1.
fn launcher_whois_stranger() {
    let me = me();
    let f = convrun(&["+p", "2", &me, "lx_whois_stranger", "7"], LIMIT);
    f.expect_code(1);
    let why = "process 1 (PE 1) asked for the business card of process 7, but the job's processes are 0 to 1";
    f.expect_err_line(&format!("convrun: {why}; ending the job"));
    f.expect_line("told 1: card 0 hand-made:0");
    f.expect_line(&format!("told 1: abort {why}"));
    f.expect_line(&format!("told 0: abort {why}"));
    // The asker is the culprit, reported once; nobody else is blamed.
    assert_eq!(f.stderr.matches("convrun: ").count(), 1, "{}", f.stderr);
}

/// A process that asks faster than it reads gets every answer, whole and in
/// order: what its socket does not take waits in the launcher's queue for
/// that link (and the launcher reads no more requests of it meanwhile).
fn launcher_whois_answers_are_whole() {
    let me = me();
    let f = convrun(&["+p", "2", &me, "lx_whois_flood", "20000"], LIMIT);
    f.expect_code(0);
    f.expect_line("answers 20000 of 20000 whole");
}

/// Connections that say nothing to the launcher delay no process's hello:
/// six of them, each of which the launcher gives 5 s, do not keep a job
/// with `++timeout 15` from starting (read one after the other, they did).
fn launcher_silent_connections_do_not_block_start_up() {
    let me = me();
    let f = convrun(&["+p", "3", "++timeout", "15", &me, "lx_strangers"], LIMIT);
    f.expect_code(0);
    expect_no_stderr(&f, "start-up timed out");
}

/// Forged hellos (no proof, a made-up one, a replayed one, another job's)
/// claiming the slot of a process that is slow to start are refused and
/// logged; the real process then joins and the job runs normally.
fn launcher_forged_hellos_are_refused() {
    let me = me();
    let f = convrun(&["+p", "2", "++timeout", "20", &me, "lx_forgers"], LIMIT);
    f.expect_code(0);
    let refused = f
        .stderr
        .lines()
        .filter(|l| l.starts_with("convrun: refused a control connection from 127.0.0.1:"))
        .collect::<Vec<_>>();
    assert_eq!(
        refused
            .iter()
            .filter(|l| l.contains("its hello for process 0 does not prove the job key"))
            .count(),
        3,
        "{}",
        f.stderr
    );
    assert!(
        refused
            .iter()
            .any(|l| l.contains("bad hello `hello 0 4242 tcp:127.0.0.1:9`")),
        "{}",
        f.stderr
    );
    expect_no_stderr(&f, "second hello");
    expect_no_stderr(&f, "lost process");
}

/// Another user who watches `/dev/shm` cannot make a process's segment
/// before it does (issue 50): a name is derived one way from the job's
/// secret segment id and the process's number, so the first name seen
/// says nothing of the others. The squatter here makes, for every
/// `converse-` name it sees, the names the other processes would have had
/// if names were `converse-<id>-<n>` (as they were: it then won every
/// race against a process that started late); processes 1..3 start a
/// second late.
fn launcher_shm_names_cannot_be_squatted() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = Arc::new(AtomicBool::new(false));
    let squatter = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut seen = std::collections::BTreeSet::new();
            let mut made = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                for name in crate::mpiexec::shm_names() {
                    if !seen.insert(name.clone()) {
                        continue;
                    }
                    let Some((stem, _)) = name.rsplit_once('-') else {
                        continue;
                    };
                    for n in 0..8 {
                        let guess = format!("{stem}-{n}");
                        let made_it = std::fs::OpenOptions::new()
                            .write(true)
                            .create_new(true)
                            .open(format!("/dev/shm/{guess}"))
                            .is_ok();
                        if made_it {
                            seen.insert(guess.clone());
                            made.push(guess);
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            made
        })
    };
    let me = me();
    let f = convrun(
        &[
            "+p",
            "4",
            "++ppn",
            "1",
            "++netmod",
            "shm",
            &me,
            "lx_late_sum",
        ],
        LIMIT,
    );
    stop.store(true, Ordering::Relaxed);
    for name in squatter.join().unwrap() {
        let _ = std::fs::remove_file(format!("/dev/shm/{name}"));
    }
    f.expect_code(0);
    assert!(f.stdout.contains("sum=6"), "{}", f.stdout);
}

fn launcher_exit_outside_runtime() {
    let me = me();
    let mut job = Running::start(&["+p", "3", &me, "lx_exit_outside"], false);
    job.wait_pids(3, None, LIMIT);
    let pids = job.pids.clone();
    let f = job.finish(LIMIT);
    expect_gone(&pids, Duration::from_secs(1), &f);
    expect_within(&f, Duration::from_secs(10), "job whose process 1 exited");
    for node in [0, 2] {
        expect_ended_saying(&f, node, &["lost process 1 (PE 1)"]);
    }
    // convrun reports the process that died, and its code is the job's.
    expect_stderr(&f, "convrun: process 1 (PE 1) exited with code 5");
    f.expect_code(5);
}

// ---------------------------------------------------------------------------
// Arguments
// ---------------------------------------------------------------------------

/// Checks every one of `nodes` processes printed `args` (program arguments
/// after its name), and the job had `pes` PEs.
pub(crate) fn expect_args(f: &Finished, pes: usize, nodes: usize, args: &[&str]) {
    f.expect_code(0);
    for node in 0..nodes {
        f.expect_line(&format!(
            "args node={node} pes={pes} nodes={nodes} {args:?}"
        ));
    }
}

fn launcher_args_passthrough() {
    let me = me();
    let prog: &[&str] = &["a b", "-x", "--flag", "", "z", "c  d "];
    // Runtime flags before the program.
    let mut a = vec!["+p", "2", "++ppn", "1", &me, "lx_args"];
    a.extend_from_slice(prog);
    expect_args(&convrun(&a, LIMIT), 2, 2, prog);
    // Runtime flags after the program's name, among its arguments.
    let a = [
        &me, "lx_args", "a b", "+p", "4", "-x", "++ppn", "2", "--flag", "", "z", "c  d ",
    ];
    expect_args(&convrun(&a, LIMIT), 4, 2, prog);
    // Glued values.
    let a = [
        &me, "lx_args", "+p4", "a b", "-x", "++ppn2", "--flag", "", "z", "c  d ",
    ];
    expect_args(&convrun(&a, LIMIT), 4, 2, prog);
    let a = [
        "+p3", &me, "lx_args", "a b", "-x", "--flag", "", "z", "c  d ",
    ];
    expect_args(&convrun(&a, LIMIT), 3, 3, prog);
}

fn launcher_args_own_flags() {
    let me = me();
    let f = convrun(
        &[
            "++verbose",
            "++local",
            "+p",
            "2",
            &me,
            "lx_args",
            "x",
            "++timeout",
            "30",
            "y",
            "++local",
            "++verbose",
        ],
        LIMIT,
    );
    expect_args(&f, 2, 2, &["x", "y"]);
    expect_stderr(&f, "convrun: 2 PEs in 2 processes");
}

fn launcher_args_unknown_flag() {
    let me = me();
    for a in [
        vec!["+p", "2", &me, "lx_args", "x", "+bogus"],
        vec!["+bogus", "+p", "2", &me, "lx_args", "x"],
    ] {
        let f = convrun(&a, LIMIT);
        expect_nonzero(&f);
        expect_stderr(&f, "unknown runtime flag `+bogus`");
        expect_within(&f, Duration::from_secs(10), "unknown flag");
    }
}

/// A layout the core refuses (`+p` beyond its `MAX_PES`, a count of 0, `+p`
/// not a multiple of `++ppn`) is refused by `convrun` before it starts
/// anything, in the core's words, with exit code 1. The program is a
/// script that records being run, so a process started and failed would
/// show.
fn launcher_layout_refused() {
    let dir = std::env::temp_dir().join(format!("convrun-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let marker = dir.join("ran");
    let script = dir.join("record");
    std::fs::write(
        &script,
        format!("#!/bin/sh\necho $$ >> '{}'\n", marker.display()),
    )
    .expect("the script");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("the script is executable");
    let prog = script.to_str().unwrap();
    let max = converse::machine::args::MAX_PES;
    let too_many = (max + 904).to_string();
    let glued = format!("+p{too_many}");
    let cases: Vec<(Vec<&str>, String)> = vec![
        (
            vec!["+p", "70000", "++ppn", "50"],
            "runtime flag `+p` needs a whole number from 1 to 65536, got `70000`".into(),
        ),
        (
            vec!["++ppn", "50", &glued],
            format!("runtime flag `+p` needs a whole number from 1 to 65536, got `{too_many}`"),
        ),
        (
            vec!["+p", "0"],
            "runtime flag `+p` needs a whole number from 1 to 65536, got `0`".into(),
        ),
        (
            vec!["+p", "4", "++ppn", "x"],
            "runtime flag `++ppn` needs a whole number from 1 to 65536, got `x`".into(),
        ),
        (
            vec!["+p", "6", "++ppn", "4"],
            "+p 6 is not a multiple of ++ppn 4: every node has ++ppn PEs".into(),
        ),
    ];
    for (layout, want) in &cases {
        let mut args = layout.clone();
        args.extend(["++timeout", "5", prog]);
        let f = convrun(&args, LIMIT);
        f.expect_code(1);
        f.expect_err_line(&format!("convrun: {want}"));
        expect_within(&f, Duration::from_secs(5), "a refused layout");
        assert!(
            !marker.exists(),
            "{layout:?} started a process:\n{}",
            f.stderr
        );
    }
    // The bounds themselves are taken, and the script does record a start
    // (it never joins the job, so the job fails).
    let top = max.to_string();
    for layout in [vec!["+p", "1"], vec!["+p", &top, "++ppn", &top]] {
        let mut args = layout.clone();
        args.extend(["++timeout", "5", prog]);
        let f = convrun(&args, LIMIT);
        expect_nonzero(&f);
        expect_no_stderr(&f, "runtime flag");
        assert!(
            marker.exists(),
            "{layout:?} started no process:\n{}",
            f.stderr
        );
        std::fs::remove_file(&marker).expect("the marker goes");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------
// Output
// ---------------------------------------------------------------------------

fn launcher_output_lines() {
    let me = me();
    let n = 2000;
    let f = convrun(
        &["+p", "4", "++ppn", "2", &me, "lx_output", &n.to_string()],
        LIMIT,
    );
    f.expect_code(0);
    check_lines(&f.stdout, "out", 4, n, &["converse: "]);
    check_lines(&f.stderr, "err", 4, n, &[]);
}

fn launcher_output_tail() {
    let me = me();
    let f = convrun(&["+p", "2", &me, "lx_tail"], LIMIT);
    f.expect_code(0);
    // Both last lines arrive, neither glued to the other process's output.
    f.expect_line("tail-0").expect_line("tail-1");
    f.expect_err_line("errtail-0").expect_err_line("errtail-1");
}

// ---------------------------------------------------------------------------
// Signals
// ---------------------------------------------------------------------------

fn signal_case(sig: i32, whole_group: bool) {
    let me = me();
    let mut job = Running::start(&["+p", "4", "++ppn", "2", &me, "lx_idle"], whole_group);
    // Started once the job's banner is out (every process joined).
    job.wait_pids(2, Some("converse: 4 PEs"), LIMIT);
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    // SAFETY: kill(2) on convrun, or on the process group it leads.
    unsafe {
        if whole_group {
            libc::kill(-job.pid(), sig);
        } else {
            libc::kill(job.pid(), sig);
        }
    }
    let pids = job.pids.clone();
    let f = job.finish(Duration::from_secs(20));
    let took = t.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "convrun took {took:?} to end after signal {sig}\n--- stderr\n{}",
        f.stderr
    );
    expect_gone(&pids, Duration::from_secs(1), &f);
    f.expect_code(128 + sig);
}

fn launcher_sigint() {
    signal_case(libc::SIGINT, false);
}

fn launcher_sigterm() {
    signal_case(libc::SIGTERM, false);
}

fn launcher_sigint_group() {
    signal_case(libc::SIGINT, true);
}

// ---------------------------------------------------------------------------
// Start-up
// ---------------------------------------------------------------------------

fn launcher_startup_timeout() {
    let me = me();
    // No process joins.
    let mut job = Running::start(
        &["++timeout", "2", "+p", "2", &me, "lx_nojoin", "all"],
        false,
    );
    job.wait_pids(2, None, LIMIT);
    let pids = job.pids.clone();
    let f = job.finish(LIMIT);
    expect_gone(&pids, Duration::from_secs(1), &f);
    expect_nonzero(&f);
    expect_within(&f, Duration::from_secs(6), "start-up timeout of 2 s");
    for (node, pid) in &pids {
        expect_stderr(&f, &format!("{node} (pid {pid})"));
    }
    expect_stderr(&f, "never joined");

    // Process 1 of 3 never joins: it alone is named; the others end too.
    let mut job = Running::start(&["++timeout", "2", "+p", "3", &me, "lx_nojoin", "1"], false);
    job.wait_pids(3, None, LIMIT);
    let pids = job.pids.clone();
    let f = job.finish(LIMIT);
    expect_gone(&pids, Duration::from_secs(1), &f);
    expect_nonzero(&f);
    expect_within(&f, Duration::from_secs(6), "start-up timeout of 2 s");
    expect_stderr(
        &f,
        &format!("process(es) 1 (pid {}) never joined", pids_of(&pids, 1)),
    );
}

fn pids_of(pids: &[(usize, i32)], node: usize) -> i32 {
    pids.iter().find(|p| p.0 == node).expect("pid printed").1
}

fn launcher_exit_before_join() {
    let f = convrun(&["++timeout", "20", "+p", "2", "/bin/false"], LIMIT);
    expect_nonzero(&f);
    expect_within(&f, Duration::from_secs(5), "/bin/false");
    expect_stderr(&f, "exited with code 1 before the job started");
    assert!(
        f.stderr.contains("convrun: process 0") || f.stderr.contains("convrun: process 1"),
        "no process named:\n{}",
        f.stderr
    );

    // Process 1 of 3 exits with 4 before joining; the others are waiting.
    let me = me();
    let mut job = Running::start(
        &["++timeout", "20", "+p", "3", &me, "lx_exit_early", "1", "4"],
        false,
    );
    job.wait_pids(3, None, LIMIT);
    let pids = job.pids.clone();
    let f = job.finish(LIMIT);
    expect_gone(&pids, Duration::from_secs(1), &f);
    f.expect_code(4);
    expect_within(
        &f,
        Duration::from_secs(8),
        "a process exiting before joining",
    );
    expect_stderr(
        &f,
        "convrun: process 1 (PE 1) exited with code 4 before the job started",
    );
}

// ---------------------------------------------------------------------------
// Faults
// ---------------------------------------------------------------------------

/// Kills process `victim` of the started `job` with SIGKILL (after a
/// moment for the job to settle) and waits for the job to end: within 5 s,
/// every process gone within `grace` after the launcher.
pub(crate) fn kill_and_wait(job: Running, victim: usize, grace: Duration) -> Finished {
    std::thread::sleep(Duration::from_millis(200));
    let pid = job.pid_of(victim);
    let t = Instant::now();
    // SAFETY: kill(2) on a process of the job.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    let pids = job.pids.clone();
    let f = job.finish(Duration::from_secs(20));
    let took = t.elapsed();
    expect_gone(&pids, grace, &f);
    assert!(
        took < Duration::from_secs(5),
        "the job took {took:?} to end after process {victim} was killed\n--- stderr\n{}",
        f.stderr
    );
    f
}

fn sigkill_case(p: &str, ppn: &str, flags: &[&str], nodes: usize, victim: usize, victim_pes: &str) {
    let me = me();
    let mut args = vec!["+p", p, "++ppn", ppn];
    args.extend_from_slice(flags);
    args.extend_from_slice(&[&me, "lx_idle"]);
    let mut job = Running::start(&args, false);
    job.wait_pids(nodes, Some("converse: "), LIMIT);
    let f = kill_and_wait(job, victim, Duration::from_secs(1));
    // Every other process ended by itself, saying which process was lost.
    let lost = format!("process {victim} ({victim_pes})");
    for node in (0..nodes).filter(|&n| n != victim) {
        expect_ended_saying(&f, node, &[&lost]);
    }
    // convrun reports how the process died, and the first non-zero code
    // (the killed process's) is the job's.
    expect_stderr(
        &f,
        &format!("convrun: process {victim} ({victim_pes}) was killed by signal 9 (SIGKILL)"),
    );
    f.expect_code(128 + libc::SIGKILL);
}

fn fault_sigkill_3x1() {
    sigkill_case("3", "1", &[], 3, 1, "PE 1");
}

/// A job over shm and tcp (two pretend hosts: processes 0 and 2 on one, 1
/// and 3 on the other): the killed process's shm peer and its tcp peers
/// all end naming it.
fn fault_sigkill_mixed() {
    sigkill_case("4", "1", &["++virtual-hosts", "2"], 4, 1, "PE 1");
}

fn fault_sigkill_2x2() {
    sigkill_case("4", "2", &[], 2, 1, "PEs 2..3");
}

fn fault_abort() {
    let me = me();
    for (p, ppn, nodes, pe) in [("3", "1", 3, 1), ("4", "2", 2, 2)] {
        let mut job = Running::start(&["+p", p, "++ppn", ppn, &me, "lx_abort"], false);
        job.wait_pids(nodes, None, LIMIT);
        let pids = job.pids.clone();
        let f = job.finish(LIMIT);
        expect_gone(&pids, Duration::from_secs(1), &f);
        f.expect_code(1);
        expect_within(&f, Duration::from_secs(10), "abort");
        expect_stderr(
            &f,
            &format!("converse: PE {pe} aborting: lx_abort says boom"),
        );
        let said = format!("PE {pe} aborted: lx_abort says boom");
        for node in (0..nodes).filter(|&n| n != 1) {
            expect_ended_saying(&f, node, &["process 1 (", &said]);
        }
    }
}

/// A panic on a PE of a multi-process job is reported as an abort is: the
/// line names the PE, its process, the message and where; the others end
/// naming the same cause; the job's code is the panic's (101).
fn fault_panic() {
    let me = me();
    for (p, ppn, nodes, pe) in [("3", "1", 3, 1), ("4", "2", 2, 2)] {
        let mut job = Running::start(&["+p", p, "++ppn", ppn, &me, "lx_panic"], false);
        job.wait_pids(nodes, None, LIMIT);
        let pids = job.pids.clone();
        let f = job.finish(LIMIT);
        expect_gone(&pids, Duration::from_secs(1), &f);
        f.expect_code(101);
        expect_stderr(
            &f,
            &format!("converse: PE {pe} (process 1) panicked: lx_panic says boom at "),
        );
        expect_stderr(&f, "convrun: process 1 (");
        let said = format!("PE {pe} panicked: lx_panic says boom at ");
        for node in (0..nodes).filter(|&n| n != 1) {
            expect_ended_saying(&f, node, &["process 1 (", &said]);
        }
    }
}

fn fault_exit_race() {
    let me = me();
    for code in ["0", "6"] {
        for _ in 0..3 {
            let f = convrun(
                &["+p", "4", "++ppn", "2", &me, "lx_exit_race", code, "3000"],
                LIMIT,
            );
            f.expect_code(code.parse().unwrap());
            expect_within(&f, Duration::from_secs(15), "exit with messages in flight");
            expect_no_stderr(&f, "lost process");
            expect_no_stderr(&f, "malformed");
        }
    }
}

// ---------------------------------------------------------------------------
// A fake launcher: the driver plays convrun's side of the protocol
// ---------------------------------------------------------------------------

/// The fake launcher's job key: this byte, 32 times.
const FAKE_KEY: &str = "c0";

/// Starts this binary as process `node` of `nodes` under a fake launcher
/// listening on `listener`; returns the process.
fn start_fake(listener: &TcpListener, node: usize, nodes: usize, timeout: u64) -> Child {
    let addr = listener.local_addr().unwrap();
    Command::new(me())
        .args(["lx_join", "+p", &nodes.to_string()])
        .env("CONVERSE_LAUNCHER", addr.to_string())
        .env("CONVERSE_NODE", node.to_string())
        .env("CONVERSE_NODES", nodes.to_string())
        .env("CONVERSE_JOB_KEY", FAKE_KEY.repeat(32))
        .env("CONVERSE_SHM_ID", "5eed")
        .env("CONVERSE_NETMOD", "tcp")
        .env("CONVERSE_HOST", "127.0.0.1")
        .env("CONVERSE_TIMEOUT", timeout.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the test binary starts")
}

/// Accepts the process's hello (after the challenge) and welcomes it;
/// returns the connection and its card.
fn fake_hello(listener: &TcpListener, node: usize, child: &Child) -> (std::net::TcpStream, String) {
    fake_hello_welcoming(listener, node, child, true)
}

/// As [`fake_hello`]; with `honest` false, the welcome's proof is made
/// with another key (the launcher is an impostor).
fn fake_hello_welcoming(
    listener: &TcpListener,
    node: usize,
    child: &Child,
    honest: bool,
) -> (std::net::TcpStream, String) {
    use launch_wire::{JobKey, Nonce, ToLauncher, ToProcess};
    listener.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut stream = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(Instant::now() < deadline, "no hello within 10 s");
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("accept: {e}"),
        }
    };
    stream.set_nonblocking(false).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let challenge = Nonce::generate().unwrap();
    stream
        .write_all(ToProcess::Challenge(challenge).encode().as_bytes())
        .unwrap();
    let mut line = String::new();
    BufReader::new(stream.try_clone().unwrap())
        .read_line(&mut line)
        .expect("hello line");
    let key = JobKey::from_hex(&FAKE_KEY.repeat(32)).unwrap();
    let Ok(ToLauncher::Hello {
        node: said,
        pid,
        card,
        nonce,
        proof,
    }) = ToLauncher::parse(&line)
    else {
        panic!("not a hello: `{line}`");
    };
    assert_eq!((said, pid), (node, child.id()), "hello `{line}`");
    assert!(
        key.verify_hello(&challenge, &nonce, node, pid, card.as_str(), &proof),
        "the hello proves the key: `{line}`"
    );
    assert!(
        card.as_str().starts_with("tcp:127.0.0.1:"),
        "hello `{line}`"
    );
    let signer = if honest {
        key
    } else {
        JobKey::from_bytes([0x99; 32])
    };
    let welcome = ToProcess::Welcome(signer.welcome_proof(&challenge, &nonce, node));
    stream.write_all(welcome.encode().as_bytes()).unwrap();
    (stream, card.into_string())
}

/// Waits for `child` to end within `limit`; returns its code and stderr.
fn fake_finish(mut child: Child, limit: Duration) -> (Option<i32>, String, Duration) {
    let start = Instant::now();
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the process did not end within {limit:?}\n--- stderr\n{}",
                reader.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    (status.code(), reader.join().unwrap(), start.elapsed())
}

/// After the welcome, plays the launcher's side of a started job on `link`:
/// says `go`, then answers each `whois N` with `cards[N]` (a number beyond
/// them gets no answer). Returns the numbers asked for, once the process
/// closed the link.
fn fake_serve(
    mut link: std::net::TcpStream,
    cards: Vec<String>,
) -> std::thread::JoinHandle<Vec<usize>> {
    use launch_wire::{Card, ToLauncher, ToProcess};
    std::thread::spawn(move || {
        link.set_read_timeout(None).unwrap();
        link.write_all(ToProcess::Go.encode().as_bytes()).unwrap();
        let mut asked = Vec::new();
        let mut lines = BufReader::new(link.try_clone().unwrap()).lines();
        while let Some(Ok(line)) = lines.next() {
            if let Ok(ToLauncher::WhoIs(node)) = ToLauncher::parse(&line) {
                asked.push(node);
                if let Some(card) = cards.get(node) {
                    let answer = ToProcess::Card {
                        node,
                        card: Card::new(card.as_str()).unwrap(),
                    };
                    let _ = link.write_all(answer.encode().as_bytes());
                }
            }
        }
        asked
    })
}

fn dead_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn fault_refuse_connection() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let child = start_fake(&listener, 1, 2, 10);
    let (link, card) = fake_hello(&listener, 1, &child);
    let t = Instant::now();
    let served = fake_serve(link, vec![format!("tcp:127.0.0.1:{}", dead_port()), card]);
    let (code, stderr, _) = fake_finish(child, Duration::from_secs(10));
    let took = t.elapsed();
    assert_eq!(served.join().unwrap(), [0], "it asks for its peer's card");
    assert!(matches!(code, Some(c) if c != 0), "exit {code:?}\n{stderr}");
    assert!(took < Duration::from_secs(5), "took {took:?}\n{stderr}");
    assert!(
        stderr.contains("process 0") && stderr.contains("cannot connect"),
        "stderr does not name process 0 and `cannot connect`:\n{stderr}"
    );
}

/// A peer whose address takes the connection but never answers the
/// handshake (a process frozen, or something else on its port) is named
/// once the connection's time (`++timeout`) is up.
fn fault_peer_never_connects() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    // Where process 0 could be listening; it never answers.
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    let t = Instant::now();
    let child = start_fake(&listener, 1, 2, 2);
    let (link, card) = fake_hello(&listener, 1, &child);
    let served = fake_serve(
        link,
        vec![format!("tcp:{}", other.local_addr().unwrap()), card],
    );
    let (code, stderr, _) = fake_finish(child, Duration::from_secs(10));
    let took = t.elapsed();
    assert_eq!(served.join().unwrap(), [0], "it asks for its parent's card");
    assert!(matches!(code, Some(c) if c != 0), "exit {code:?}\n{stderr}");
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(6),
        "ended after {took:?}, not about 2 s (CONVERSE_TIMEOUT)\n{stderr}"
    );
    assert!(
        stderr.contains("lost process 0") && stderr.contains("no answer"),
        "stderr does not name process 0 and the silence:\n{stderr}"
    );
}

/// A process refuses a launcher that cannot prove the job key (an
/// impostor on the launcher's address): it ends at once, saying so, and
/// never sends it anything more.
fn fault_impostor_launcher() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let child = start_fake(&listener, 0, 2, 10);
    let (link, _card) = fake_hello_welcoming(&listener, 0, &child, false);
    let (code, stderr, _) = fake_finish(child, Duration::from_secs(10));
    assert!(matches!(code, Some(c) if c != 0), "exit {code:?}\n{stderr}");
    assert!(
        stderr.contains("does not prove the job key: not the job's launcher"),
        "{stderr}"
    );
    drop(link);
}

/// The driver cases.
pub fn cases() -> Vec<Case> {
    vec![
        ("launcher_exit_zero", launcher_exit_zero),
        ("launcher_exit_code", launcher_exit_code),
        ("launcher_exit_code_linger", launcher_exit_code_linger),
        ("launcher_exit_first_nonzero", launcher_exit_first_nonzero),
        (
            "launcher_exit_outside_runtime",
            launcher_exit_outside_runtime,
        ),
        ("launcher_args_passthrough", launcher_args_passthrough),
        ("launcher_args_own_flags", launcher_args_own_flags),
        ("launcher_args_unknown_flag", launcher_args_unknown_flag),
        ("launcher_layout_refused", launcher_layout_refused),
        ("launcher_output_lines", launcher_output_lines),
        ("launcher_output_tail", launcher_output_tail),
        ("launcher_sigint", launcher_sigint),
        ("launcher_sigterm", launcher_sigterm),
        ("launcher_sigint_group", launcher_sigint_group),
        ("launcher_startup_timeout", launcher_startup_timeout),
        ("launcher_exit_before_join", launcher_exit_before_join),
        ("fault_sigkill_3x1", fault_sigkill_3x1),
        ("fault_sigkill_2x2", fault_sigkill_2x2),
        ("fault_sigkill_mixed", fault_sigkill_mixed),
        ("fault_abort", fault_abort),
        (
            "launcher_silent_connections_do_not_block_start_up",
            launcher_silent_connections_do_not_block_start_up,
        ),
        (
            "launcher_forged_hellos_are_refused",
            launcher_forged_hellos_are_refused,
        ),
        ("launcher_whois_stranger", launcher_whois_stranger),
        (
            "launcher_whois_answers_are_whole",
            launcher_whois_answers_are_whole,
        ),
        ("fault_panic", fault_panic),
        ("fault_exit_race", fault_exit_race),
        ("fault_refuse_connection", fault_refuse_connection),
        ("fault_peer_never_connects", fault_peer_never_connects),
        ("fault_impostor_launcher", fault_impostor_launcher),
        (
            "launcher_shm_names_cannot_be_squatted",
            launcher_shm_names_cannot_be_squatted,
        ),
    ]
}
