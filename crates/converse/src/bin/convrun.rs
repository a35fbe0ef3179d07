//! `convrun`, the launcher of multi-process Converse jobs.
//!
//! ```text
//! convrun +p N [++ppn M] [++local] [++nodelist FILE] [++netmod tcp]
//!         [++timeout S] [++verbose] program [args...]
//! ```
//!
//! Starts `N / M` processes of `M` PEs each (locally, or on the hosts of a
//! charmrun-style nodelist over ssh), gives them each other's business cards
//! (the protocol is described in the library's `machine::launch`), forwards
//! their standard output and error line by line (a line is never cut by
//! another process's output), and exits with the job's exit code: the first
//! non-zero one a process returned (128 + the signal for a process killed by
//! one), else 0.
//!
//! Faults: a process that dies while the others run is reported with its PEs
//! and how it died; the others are told, and killed if they have not ended 5
//! seconds later. A process that has not joined the job after `++timeout`
//! seconds (default 60) fails the start-up, naming it. Ctrl-C, SIGTERM or
//! SIGHUP to `convrun` end the whole job.
//!
//! Runtime flags (`+p`, `++ppn`, and the program's other `+` flags) are
//! passed on to the program; `convrun`'s own (`++local`, `++nodelist`,
//! `++netmod`, `++timeout`, `++verbose`) are not.
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

const USAGE: &str = "usage: convrun +p N [++ppn M] [++local] [++nodelist FILE] [++netmod tcp] [++timeout S] [++verbose] program [args...]";

/// Runtime flags of the program that take a separate value, so that the
/// value is not taken for the program's name.
const RUNTIME_FLAGS_WITH_VALUE: &[&str] = &[
    "+stacksize",
    "++spantree-branch",
    "++server-port",
    "++server-auth",
    "++server-bind",
];

/// How long the other processes get to end by themselves after one died.
const GRACE: Duration = Duration::from_secs(5);

struct Options {
    pes: usize,
    ppn: usize,
    local: bool,
    nodelist: Option<String>,
    /// `++netmod`; by default shm when every process is on this host, tcp
    /// otherwise.
    netmod: Option<String>,
    timeout: u64,
    verbose: bool,
    /// Program and its arguments (runtime flags included).
    command: Vec<String>,
}

fn fail(msg: &str) -> ! {
    eprintln!("convrun: {msg}");
    std::process::exit(1)
}

fn parse_count(flag: &str, value: Option<String>) -> usize {
    let value = value.unwrap_or_else(|| fail(&format!("{flag} needs a value\n{USAGE}")));
    match value.parse::<usize>() {
        Ok(n) if n >= 1 => n,
        _ => fail(&format!(
            "{flag} needs a whole number of at least 1, got `{value}`"
        )),
    }
}

fn parse_args(args: Vec<String>) -> Options {
    let mut o = Options {
        pes: 1,
        ppn: 1,
        local: false,
        nodelist: None,
        netmod: None,
        timeout: 60,
        verbose: false,
        command: Vec::new(),
    };
    let mut words = args.into_iter();
    // Runtime flags before the program, kept for it.
    let mut flags: Vec<String> = Vec::new();
    let mut program: Option<String> = None;
    while let Some(w) = words.next() {
        // `+p4` and `+p 4`; `++ppn2` and `++ppn 2`.
        let glued = |prefix: &str| {
            w.strip_prefix(prefix)
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .map(String::from)
        };
        match w.as_str() {
            "++local" => o.local = true,
            "++verbose" => o.verbose = true,
            "++help" | "--help" | "-h" if o.command.is_empty() => {
                println!("{USAGE}");
                std::process::exit(0)
            }
            "++nodelist" => {
                o.nodelist = Some(
                    words
                        .next()
                        .unwrap_or_else(|| fail("++nodelist needs a file")),
                )
            }
            "++netmod" => {
                let m = words
                    .next()
                    .unwrap_or_else(|| fail("++netmod needs a module name"));
                if m != "tcp" && m != "shm" {
                    fail(&format!(
                        "unknown ++netmod `{m}` (this build has: shm, tcp)"
                    ));
                }
                o.netmod = Some(m);
            }
            "++timeout" => o.timeout = parse_count("++timeout", words.next()) as u64,
            "+p" => {
                o.pes = parse_count("+p", words.next());
                flags.extend(["+p".to_string(), o.pes.to_string()]);
            }
            "++ppn" => {
                o.ppn = parse_count("++ppn", words.next());
                flags.extend(["++ppn".to_string(), o.ppn.to_string()]);
            }
            _ => {
                if let Some(v) = glued("+p") {
                    o.pes = parse_count("+p", Some(v));
                } else if let Some(v) = glued("++ppn") {
                    o.ppn = parse_count("++ppn", Some(v));
                }
                if program.is_none() && !w.starts_with('+') {
                    program = Some(w);
                    continue;
                }
                let takes_value = RUNTIME_FLAGS_WITH_VALUE.contains(&w.as_str());
                let target = if program.is_none() {
                    &mut flags
                } else {
                    &mut o.command
                };
                target.push(w);
                if takes_value {
                    if let Some(v) = words.next() {
                        target.push(v);
                    }
                }
            }
        }
    }
    // The program first, then its own arguments as given, then the runtime
    // flags given before the program (the runtime reads them anywhere; at
    // the end they do not shift the program's positional arguments).
    let Some(program) = program else {
        fail(&format!("no program given\n{USAGE}"))
    };
    o.command.insert(0, program);
    o.command.extend(flags);
    if o.pes % o.ppn != 0 {
        fail(&format!(
            "+p {} is not a multiple of ++ppn {}: every process has ++ppn PEs",
            o.pes, o.ppn
        ));
    }
    o
}

/// The hosts of a charmrun-style nodelist (`host NAME` lines; `group`
/// lines and options after the name are accepted and ignored).
fn read_nodelist(path: &str) -> Vec<String> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| fail(&format!("cannot read nodelist {path}: {e}")));
    let hosts: Vec<String> = text
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            match w.next() {
                Some("host") => w.next().map(String::from),
                _ => None,
            }
        })
        .collect();
    if hosts.is_empty() {
        fail(&format!(
            "nodelist {path} names no host (`host NAME` lines)"
        ));
    }
    hosts
}

fn is_local_host(h: &str) -> bool {
    matches!(h, "localhost" | "127.0.0.1" | "::1")
}

/// Signal number that asked `convrun` to end the job (0: none yet).
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    STOP_SIGNAL.store(sig, Ordering::SeqCst);
}

fn install_signal_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is
        // async-signal-safe; `sigaction` is given a zeroed, valid struct.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as usize;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
}

/// One process of the job.
struct Proc {
    node: usize,
    child: Child,
    status: Option<ExitStatus>,
    /// The control connection, once it said hello.
    link: Option<TcpStream>,
    card: Option<String>,
    /// What the process said on its control connection since the cards.
    said: String,
}

/// How a process ended, from what it said before it exited.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ending {
    /// It said `end`: its part of the job finished (exit code as chosen).
    OnPurpose,
    /// It said `lost`: it ended because another process failed.
    Secondary,
    /// It said nothing: it died, aborted or exited outside the runtime.
    Primary,
}

/// The exit code a status stands for (128 + signal when killed).
fn code_of(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        _ => 1,
    }
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited with code {c}"),
        (None, Some(sig)) => format!("was killed by signal {sig} ({})", signal_name(sig)),
        _ => "ended".into(),
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGHUP => "SIGHUP",
        _ => "signal",
    }
}

/// Copies `from` to our stdout or stderr line by line; each line goes out
/// in one write on the locked stream, so lines of different processes never
/// mix.
fn forward(from: impl Read + Send + 'static, to_stderr: bool) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut reader = BufReader::with_capacity(64 << 10, from);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    // A last line without its newline still ends here, so
                    // that the next process's output starts a line.
                    if line.last() != Some(&b'\n') {
                        line.push(b'\n');
                    }
                    if to_stderr {
                        let mut err = std::io::stderr().lock();
                        let _ = err.write_all(&line);
                        let _ = err.flush();
                    } else {
                        let mut out = std::io::stdout().lock();
                        let _ = out.write_all(&line);
                        let _ = out.flush();
                    }
                }
            }
        }
    })
}

fn pes_of(node: usize, ppn: usize) -> String {
    if ppn == 1 {
        format!("PE {node}")
    } else {
        format!("PEs {}..{}", node * ppn, node * ppn + ppn - 1)
    }
}

struct Job {
    opts: Options,
    procs: Vec<Proc>,
    forwarders: Vec<std::thread::JoinHandle<()>>,
    /// The exit code of the first process that failed on its own (died,
    /// aborted), if one did.
    failure: Option<i32>,
    /// The first non-zero exit code of a process that ended on purpose.
    chosen: Option<i32>,
    /// The first non-zero exit code of a process that ended because another
    /// failed.
    secondary: Option<i32>,
    /// A code that overrides all (a signal to convrun, a failed start-up).
    code: Option<i32>,
    /// The job's token (names its shared-memory segments).
    token: u64,
}

impl Job {
    fn running(&self) -> usize {
        self.procs.iter().filter(|p| p.status.is_none()).count()
    }

    /// Collects exited processes; returns those that just ended.
    fn reap(&mut self) -> Vec<usize> {
        let mut ended = Vec::new();
        for p in &mut self.procs {
            if p.status.is_none() {
                if let Ok(Some(status)) = p.child.try_wait() {
                    p.status = Some(status);
                    ended.push(p.node);
                }
            }
        }
        ended
    }

    fn signal_all(&mut self, sig: i32) {
        for p in &self.procs {
            if p.status.is_none() {
                // SAFETY: plain kill(2) on our own child's pid.
                unsafe {
                    libc::kill(p.child.id() as libc::pid_t, sig);
                }
            }
        }
    }

    fn tell_all(&mut self, line: &str) {
        for p in &mut self.procs {
            if p.status.is_none() {
                if let Some(link) = &mut p.link {
                    let _ = link.write_all(line.as_bytes());
                }
            }
        }
    }

    /// Ends every process still running: at once with SIGKILL, or after
    /// `grace` for them to end by themselves.
    fn end_all(&mut self, grace: Duration) {
        let deadline = Instant::now() + grace;
        while self.running() > 0 && Instant::now() < deadline {
            self.reap();
            std::thread::sleep(Duration::from_millis(10));
        }
        if self.running() > 0 {
            self.signal_all(libc::SIGKILL);
            while self.running() > 0 {
                self.reap();
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    /// Reads what the processes said on their control connections.
    fn listen(&mut self) {
        for p in &mut self.procs {
            let Some(link) = &mut p.link else { continue };
            let mut buf = [0u8; 512];
            loop {
                match link.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => p.said.push_str(&String::from_utf8_lossy(&buf[..n])),
                    Err(_) => break,
                }
            }
        }
    }

    fn ending(&self, node: usize) -> Ending {
        let said = &self.procs[node].said;
        if said.lines().any(|l| l == "end") {
            Ending::OnPurpose
        } else if said.lines().any(|l| l == "lost") {
            Ending::Secondary
        } else {
            Ending::Primary
        }
    }

    /// Records how `node` ended; reports it (and ends the rest of the job)
    /// if it failed on its own.
    fn note_exit(&mut self, node: usize) {
        let status = self.procs[node].status.expect("reaped");
        let code = code_of(status);
        match self.ending(node) {
            Ending::OnPurpose => {
                if code != 0 && self.chosen.is_none() {
                    self.chosen = Some(code);
                }
            }
            Ending::Secondary => {
                if code != 0 && self.secondary.is_none() {
                    self.secondary = Some(code);
                }
            }
            Ending::Primary => {
                let first = self.failure.is_none();
                if first {
                    // A process that failed on its own decides the code,
                    // even if it exited with 0 (before its part was done).
                    self.failure = Some(if code == 0 { 1 } else { code });
                }
                let what = format!(
                    "process {node} ({}) {}",
                    pes_of(node, self.opts.ppn),
                    describe(status)
                );
                if self.running() > 0 {
                    if first {
                        eprintln!(
                            "convrun: {what} before its part of the job ended; ending the job"
                        );
                    }
                    self.tell_all(&format!(
                        "abort lost process {node} ({}): it {}\n",
                        pes_of(node, self.opts.ppn),
                        describe(status)
                    ));
                    self.end_all(GRACE);
                } else if first {
                    eprintln!("convrun: {what} before its part of the job ended");
                }
            }
        }
    }

    fn final_code(&self) -> i32 {
        self.code
            .or(self.failure)
            .or(self.chosen)
            .or(self.secondary)
            .unwrap_or(0)
    }

    fn finish(mut self) -> ! {
        for f in self.forwarders.drain(..) {
            let _ = f.join();
        }
        // Segments of processes that died before their peers mapped them
        // (the others remove their own names at start-up).
        converse::machine::launch::remove_segments(self.token, self.procs.len());
        let _ = std::io::stdout().flush();
        std::process::exit(self.final_code())
    }
}

#[allow(clippy::too_many_arguments)] // one call site; each is one variable of the protocol
fn spawn(
    opts: &Options,
    netmod: &str,
    node: usize,
    nodes: usize,
    host: &str,
    host_pes: usize,
    addr: &str,
    token: u64,
) -> Child {
    let envs = [
        ("CONVERSE_HOST_PES", host_pes.to_string()),
        ("CONVERSE_LAUNCHER", addr.to_string()),
        ("CONVERSE_NODE", node.to_string()),
        ("CONVERSE_NODES", nodes.to_string()),
        ("CONVERSE_TOKEN", format!("{token:016x}")),
        ("CONVERSE_NETMOD", netmod.to_string()),
        ("CONVERSE_HOST", host.to_string()),
        ("CONVERSE_TIMEOUT", opts.timeout.to_string()),
    ];
    let mut cmd = if is_local_host(host) {
        let mut c = Command::new(&opts.command[0]);
        c.args(&opts.command[1..]);
        c.envs(envs.iter().map(|(k, v)| (k, v)));
        c
    } else {
        // ssh HOST cd DIR && env K=V ... program args
        let dir = std::env::current_dir().map_or_else(|_| ".".into(), |d| d.display().to_string());
        let mut remote = format!("cd {} && env", shell_quote(&dir));
        for (k, v) in &envs {
            remote.push_str(&format!(" {k}={}", shell_quote(v)));
        }
        for w in &opts.command {
            remote.push(' ');
            remote.push_str(&shell_quote(w));
        }
        let mut c = Command::new("ssh");
        c.arg("-o").arg("BatchMode=yes").arg(host).arg(remote);
        c
    };
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.spawn().unwrap_or_else(|e| {
        fail(&format!(
            "cannot start process {node} (`{}`{}): {e}",
            opts.command[0],
            if is_local_host(host) {
                String::new()
            } else {
                format!(" on {host}")
            }
        ))
    })
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn main() {
    let opts = parse_args(std::env::args().skip(1).collect());
    install_signal_handlers();
    let nodes = opts.pes / opts.ppn;
    let hosts: Vec<String> = match (&opts.nodelist, opts.local) {
        (Some(path), false) => read_nodelist(path),
        _ => vec!["127.0.0.1".into()],
    };
    let all_local = hosts.iter().all(|h| is_local_host(h));
    let netmod = opts
        .netmod
        .clone()
        .unwrap_or_else(|| if all_local { "shm" } else { "tcp" }.to_string());
    if netmod == "shm" && !all_local {
        fail("++netmod shm needs every process on this host (use ++netmod tcp, or ++local)");
    }
    let listener = TcpListener::bind(if all_local {
        "127.0.0.1:0"
    } else {
        "0.0.0.0:0"
    })
    .unwrap_or_else(|e| fail(&format!("cannot open the control socket: {e}")));
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    let my_host = if all_local {
        "127.0.0.1".to_string()
    } else {
        hostname()
    };
    let addr = format!("{my_host}:{port}");
    let token = RandomState::new().build_hasher().finish() ^ std::process::id() as u64;
    if opts.verbose {
        eprintln!(
            "convrun: {} PEs in {nodes} processes of {} on {} host(s), netmod {}, control {addr}",
            opts.pes,
            opts.ppn,
            hosts.len(),
            netmod
        );
    }
    let mut job = Job {
        procs: Vec::with_capacity(nodes),
        forwarders: Vec::new(),
        failure: None,
        chosen: None,
        secondary: None,
        code: None,
        token,
        opts,
    };
    for node in 0..nodes {
        let host = &hosts[node % hosts.len()];
        // PEs of this job on the same host: more than its cores and idle
        // PEs must not spin.
        let host_pes = (0..nodes)
            .filter(|n| hosts[n % hosts.len()] == *host)
            .count()
            * job.opts.ppn;
        let mut child = spawn(
            &job.opts, &netmod, node, nodes, host, host_pes, &addr, token,
        );
        if let Some(out) = child.stdout.take() {
            job.forwarders.push(forward(out, false));
        }
        if let Some(err) = child.stderr.take() {
            job.forwarders.push(forward(err, true));
        }
        job.procs.push(Proc {
            node,
            child,
            status: None,
            link: None,
            card: None,
            said: String::new(),
        });
    }

    // Start-up: every process says hello with its card.
    listener
        .set_nonblocking(true)
        .unwrap_or_else(|e| fail(&format!("control socket: {e}")));
    let deadline = Instant::now() + Duration::from_secs(job.opts.timeout);
    let mut joined = 0;
    while joined < nodes {
        if let Some(sig) = stop_requested() {
            job.signal_all(libc::SIGTERM);
            job.end_all(Duration::from_secs(2));
            eprintln!("convrun: job ended by signal {sig} during start-up");
            job.code = Some(128 + sig);
            job.finish();
        }
        if let Some(&node) = job.reap().first() {
            let status = job.procs[node].status.expect("reaped");
            eprintln!(
                "convrun: process {node} ({}) {} before the job started",
                pes_of(node, job.opts.ppn),
                describe(status)
            );
            job.code = Some(match code_of(status) {
                0 => 1,
                c => c,
            });
            job.tell_all(&format!("abort process {node} failed during start-up\n"));
            job.end_all(GRACE);
            job.finish();
        }
        match listener.accept() {
            Ok((stream, _)) => match read_hello(&stream, nodes) {
                Ok((node, card)) if job.procs[node].link.is_none() => {
                    job.procs[node].link = Some(stream);
                    job.procs[node].card = Some(card);
                    joined += 1;
                }
                Ok((node, _)) => eprintln!("convrun: a second hello from process {node}, ignored"),
                Err(why) => eprintln!("convrun: refused a control connection: {why}"),
            },
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    let missing: Vec<String> = job
                        .procs
                        .iter()
                        .filter(|p| p.link.is_none())
                        .map(|p| format!("{} (pid {})", p.node, p.child.id()))
                        .collect();
                    eprintln!(
                        "convrun: start-up timed out after {} s (++timeout): process(es) {} never joined the job",
                        job.opts.timeout,
                        missing.join(", ")
                    );
                    job.code = Some(1);
                    job.tell_all("abort start-up timed out\n");
                    job.signal_all(libc::SIGKILL);
                    job.end_all(Duration::ZERO);
                    job.finish();
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => fail(&format!("control socket: {e}")),
        }
    }
    let cards: Vec<String> = job
        .procs
        .iter()
        .map(|p| p.card.clone().expect("joined"))
        .collect();
    job.tell_all(&format!("cards {}\n", cards.join(" ")));
    for p in &job.procs {
        if let Some(link) = &p.link {
            let _ = link.set_nonblocking(true);
        }
    }

    // Run: watch for exits and signals.
    while job.running() > 0 {
        if let Some(sig) = stop_requested() {
            eprintln!("convrun: ending the job (signal {sig})");
            job.signal_all(libc::SIGTERM);
            job.end_all(Duration::from_secs(3));
            job.code = Some(128 + sig);
            job.finish();
        }
        let mut ended = job.reap();
        // What a process said before it exited is in our socket buffer
        // by now.
        job.listen();
        // Failures first: a process that died decides the report, not the
        // ones that noticed and ended in the same moment.
        ended.sort_by_key(|&n| job.ending(n) != Ending::Primary);
        for node in ended {
            if job.procs[node].status.is_some() {
                job.note_exit(node);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    job.finish();
}

fn stop_requested() -> Option<i32> {
    match STOP_SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

fn read_hello(stream: &TcpStream, nodes: usize) -> Result<(usize, String), String> {
    stream.set_nonblocking(false).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(stream.take(4096))
        .read_line(&mut line)
        .map_err(|e| format!("no hello: {e}"))?;
    let w: Vec<&str> = line.split_whitespace().collect();
    match w.as_slice() {
        ["hello", node, _pid, card] => {
            let node: usize = node
                .parse()
                .map_err(|_| format!("bad hello `{}`", line.trim()))?;
            if node >= nodes {
                return Err(format!(
                    "hello from process {node} of a {nodes}-process job"
                ));
            }
            Ok((node, card.to_string()))
        }
        _ => Err(format!("bad hello `{}`", line.trim())),
    }
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into `buf`.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "127.0.0.1".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}
