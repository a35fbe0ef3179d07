//! `convrun`, the launcher of multi-process Converse jobs.
//!
//! ```text
//! convrun +p N [++ppn M] [++local] [++nodelist FILE] [++netmod shm|tcp|auto]
//!         [++remote-shell CMD] [++timeout S] [++virtual-hosts N] [++verbose]
//!         program [args...]
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
//! Network modules: `++netmod shm` (every process on one host), `tcp`
//! (anywhere), or `auto` (shm between the processes of one host, tcp
//! between hosts). The default is shm when the whole job is on one host,
//! else auto. Hosts are told apart by their nodelist names (`localhost`,
//! `127.0.0.1` and `::1` are one, this host); each process learns the host
//! of every other (`CONVERSE_HOSTS`). `++virtual-hosts N` splits each host
//! into N pretend ones (process `n` on the `n % N`-th), so that one machine
//! runs a job laid out as on a cluster: shm within a pretend host, tcp
//! between them.
//!
//! Runtime flags (`+p`, `++ppn`, and the program's other `+` flags) are
//! passed on to the program; `convrun`'s own (`++local`, `++nodelist`,
//! `++netmod`, `++remote-shell`, `++timeout`, `++virtual-hosts`,
//! `++verbose`) are not.
//!
//! # Remote hosts
//!
//! The nodelist is charmrun's: `host NAME` lines (processes go to the hosts
//! in turn), `group NAME` lines, and `++shell CMD` options on a `host` line
//! (that host), a `group` line (its hosts) or a line of its own (every host
//! after it); other options are accepted and ignored. `localhost`,
//! `127.0.0.1` and `::1` are this host: their processes are started
//! directly. Every other host's process is started with the remote shell:
//! the host's `++shell` if the nodelist gives one (one word: a program, or
//! a script that calls ssh with options), else `++remote-shell CMD` (split
//! on whitespace, no quoting: `++remote-shell "ssh -F my_config"`), else
//! `ssh -o BatchMode=yes` (never a password prompt). It is run as
//! `CMD... HOST COMMAND`, COMMAND being one argument: a POSIX `sh` command
//! line, which ssh hands to the login shell there. COMMAND changes to
//! `convrun`'s working directory, sets the protocol's variables and those of
//! `convrun`'s environment named `CONVERSE_*` or `RUST_BACKTRACE` (a local
//! process inherits the whole environment), runs the program with its
//! arguments quoted for the shell, and kills the program if the remote
//! shell's connection is gone (the remote shell was killed, or `convrun`
//! died), so a process that never joined the job is not left behind.
//! Standard input of every process is empty.
//!
//! A remote process reaches the launcher at the address this host uses
//! towards its host (asked of the routing table; no packet is sent), or at
//! this host's name if that fails. A remote shell's own failures are
//! reported with the host's name (ssh exits with 255 when it cannot connect
//! or log in; 127 means the program was not found there, and 128 + N is how
//! the remote shell reports a process killed by signal N).
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{
    IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs, UdpSocket,
};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

const USAGE: &str = "usage: convrun +p N [++ppn M] [++local] [++nodelist FILE] [++netmod shm|tcp|auto] [++remote-shell CMD] [++timeout S] [++virtual-hosts N] [++verbose] program [args...]";

/// The remote shell when neither `++remote-shell` nor the nodelist names one.
const DEFAULT_REMOTE_SHELL: &[&str] = &["ssh", "-o", "BatchMode=yes"];

/// Variables of `convrun`'s environment that a remote process gets too
/// (besides the protocol's), by name prefix or whole name.
const FORWARDED_PREFIX: &str = "CONVERSE_";
const FORWARDED_VARS: &[&str] = &["RUST_BACKTRACE"];

/// How long the other processes get to end by themselves after one died.
const GRACE: Duration = Duration::from_secs(5);

struct Options {
    pes: usize,
    ppn: usize,
    local: bool,
    nodelist: Option<String>,
    /// `++netmod`; by default shm when every process is on one host, else
    /// auto (shm between the processes of a host, tcp between hosts).
    netmod: Option<String>,
    /// `++remote-shell`, split on whitespace.
    remote_shell: Option<Vec<String>>,
    timeout: u64,
    verbose: bool,
    /// `++virtual-hosts N`: process `n` counts as being on host `n % N` of
    /// its real one (tries the shm+tcp layout of a cluster on one machine).
    virtual_hosts: Option<usize>,
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
        remote_shell: None,
        timeout: 60,
        verbose: false,
        virtual_hosts: None,
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
            "++virtual-hosts" => o.virtual_hosts = Some(parse_count(w.as_str(), words.next())),
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
                if !["shm", "tcp", "auto"].contains(&m.as_str()) {
                    fail(&format!(
                        "unknown ++netmod `{m}` (this build has: shm, tcp, auto)"
                    ));
                }
                o.netmod = Some(m);
            }
            "++remote-shell" => {
                let cmd = words
                    .next()
                    .unwrap_or_else(|| fail("++remote-shell needs a command"));
                let cmd: Vec<String> = cmd.split_whitespace().map(String::from).collect();
                if cmd.is_empty() {
                    fail("++remote-shell needs a command, got an empty one");
                }
                o.remote_shell = Some(cmd);
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
                // The library's own list, so the two cannot drift apart.
                let takes_value = converse::machine::args::takes_value(&w);
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

/// A host of the nodelist.
#[derive(Clone, Debug)]
struct Host {
    name: String,
    /// Its `++shell` (on its line, its group's, or a line of its own before).
    shell: Option<String>,
}

/// The value of option `++shell` among `words`, if given.
fn shell_option<'a>(path: &str, words: impl Iterator<Item = &'a str>) -> Option<String> {
    let mut words = words;
    while let Some(w) = words.next() {
        if w == "++shell" {
            let v = words
                .next()
                .unwrap_or_else(|| fail(&format!("nodelist {path}: ++shell needs a command")));
            return Some(v.to_string());
        }
    }
    None
}

/// The hosts of a charmrun-style nodelist: `host NAME` lines, with the
/// `++shell` option of the host line, else of its group line, else of a
/// `++shell` line of its own before them (other options are accepted and
/// ignored).
fn read_nodelist(path: &str) -> Vec<Host> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| fail(&format!("cannot read nodelist {path}: {e}")));
    let mut hosts = Vec::new();
    let mut global_shell: Option<String> = None;
    let mut group_shell: Option<String> = None;
    for line in text.lines() {
        let mut w = line.split_whitespace();
        match w.next() {
            Some("host") => {
                let Some(name) = w.next() else { continue };
                if name.starts_with('-') {
                    fail(&format!(
                        "nodelist {path}: host name `{name}` starts with `-`"
                    ));
                }
                let shell = shell_option(path, w)
                    .or_else(|| group_shell.clone())
                    .or_else(|| global_shell.clone());
                hosts.push(Host {
                    name: name.to_string(),
                    shell,
                });
            }
            Some("group") => {
                let _name = w.next();
                group_shell = shell_option(path, w);
            }
            Some("++shell") => {
                global_shell = shell_option(path, line.split_whitespace());
            }
            _ => {}
        }
    }
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

/// What tells hosts apart: the nodelist name, this host's names being one.
fn host_key(h: &str) -> &str {
    if is_local_host(h) { "" } else { h }
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
    /// The host, for a process started through the remote shell.
    remote: Option<String>,
    /// The remote shell's standard input, held open while the job runs.
    _stdin: Option<ChildStdin>,
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

/// What an exit code of the remote shell means when it is not the
/// program's own choice (see the module comment), in parentheses.
fn remote_hint(status: ExitStatus) -> String {
    match status.code() {
        Some(255) => " (255: ssh could not connect or log in)".into(),
        Some(127) => " (127: the program was not found there)".into(),
        Some(126) => " (126: the program could not be run there)".into(),
        Some(c @ 129..=192) => format!(
            " ({c} = 128 + {}: killed by signal {} ({}) there)",
            c - 128,
            c - 128,
            signal_name(c - 128)
        ),
        _ => String::new(),
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
    /// `process N (PEs ...)`, and `on HOST` for a remote one.
    fn who(&self, node: usize) -> String {
        let p = &self.procs[node];
        match &p.remote {
            Some(host) => format!("process {node} ({}) on {host}", pes_of(node, self.opts.ppn)),
            None => format!("process {node} ({})", pes_of(node, self.opts.ppn)),
        }
    }

    /// What process `node`'s exit code means, for a remote one.
    fn hint(&self, node: usize) -> String {
        let p = &self.procs[node];
        match &p.remote {
            Some(_) => remote_hint(p.status.expect("reaped")),
            None => String::new(),
        }
    }

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
                let (who, how, hint) = (self.who(node), describe(status), self.hint(node));
                if self.running() > 0 {
                    if first {
                        eprintln!(
                            "convrun: {who} {how} before its part of the job ended; ending the job{hint}"
                        );
                    }
                    self.tell_all(&format!("abort lost {who}: it {how}{hint}\n"));
                    self.end_all(GRACE);
                } else if first {
                    eprintln!("convrun: {who} {how} before its part of the job ended{hint}");
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

/// Where and how one process of the job is started.
struct Launch<'a> {
    node: usize,
    nodes: usize,
    /// The host as the nodelist names it.
    host: &'a Host,
    /// The name the other processes reach this one by (`CONVERSE_HOST`).
    advertised: &'a str,
    /// PEs of the job on this host.
    host_pes: usize,
    /// The host of every process, by number (`CONVERSE_HOSTS`).
    hosts: &'a str,
    /// The launcher's control address as this process reaches it.
    launcher: &'a str,
    netmod: &'a str,
    token: u64,
}

/// The remote shell command that reaches `host` (see the module comment).
fn remote_shell(opts: &Options, host: &Host) -> Vec<String> {
    match (&host.shell, &opts.remote_shell) {
        (Some(shell), _) => vec![shell.clone()],
        (None, Some(cmd)) => cmd.clone(),
        (None, None) => DEFAULT_REMOTE_SHELL.iter().map(|s| s.to_string()).collect(),
    }
}

/// True for a name the shell takes as a variable assignment's.
fn is_shell_name(name: &str) -> bool {
    let mut b = name.bytes();
    matches!(b.next(), Some(c) if c == b'_' || c.is_ascii_alphabetic())
        && b.all(|c| c == b'_' || c.is_ascii_alphanumeric())
}

/// The variables of our environment a remote process gets too: `CONVERSE_*`
/// and `FORWARDED_VARS`, except the protocol's own (set by `spawn`).
fn forwarded_env(protocol: &[(&str, String)]) -> Vec<(String, String)> {
    let mut vars: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| k.starts_with(FORWARDED_PREFIX) || FORWARDED_VARS.contains(&k.as_str()))
        .filter(|(k, _)| is_shell_name(k) && !protocol.iter().any(|(p, _)| p == k))
        .collect();
    vars.sort();
    vars
}

/// The command line the remote shell runs on the host: a POSIX `sh`
/// script, itself quoted, so that the login shell there (whichever it is)
/// only has to run `exec /bin/sh -c '...'`.
///
/// The script changes to `dir`, starts the program in the background with
/// `env` set and its standard input empty, and waits for it; its exit code
/// (128 + N for a program killed by signal N) is the script's, which ssh
/// returns as its own. Meanwhile a watcher reads the script's standard
/// input, which is the remote shell's connection: `convrun` never writes
/// to it, so the read returns only when the connection is gone (`convrun`
/// killed the remote shell, or died), and the watcher then kills the
/// program. Without it a remote process that never joined the job would
/// outlive the job (sshd does not signal a command without a terminal).
fn remote_command(dir: &str, env: &[(String, String)], command: &[String]) -> String {
    let mut run = String::new();
    for (k, v) in env {
        run.push_str(&format!("{k}={} ", shell_quote(v)));
    }
    let words: Vec<String> = command.iter().map(|w| shell_quote(w)).collect();
    run.push_str(&words.join(" "));
    let script = format!(
        "cd {} || exit; exec 3<&0 </dev/null; \
         {run} 3<&- & p=$!; \
         (read -r line <&3; kill -9 $p) >/dev/null 2>&1 & w=$!; exec 3<&-; \
         wait $p; c=$?; kill $w 2>/dev/null; exit $c",
        shell_quote(dir)
    );
    format!("exec /bin/sh -c {}", shell_quote(&script))
}

/// Starts one process: directly on this host, else through the remote
/// shell. Also returns the remote shell's standard input, which must stay
/// open while the process runs (its end kills the remote process).
fn spawn(opts: &Options, l: &Launch) -> Result<(Child, Option<ChildStdin>), String> {
    let envs = [
        ("CONVERSE_HOST_PES", l.host_pes.to_string()),
        ("CONVERSE_HOSTS", l.hosts.to_string()),
        ("CONVERSE_LAUNCHER", l.launcher.to_string()),
        ("CONVERSE_NODE", l.node.to_string()),
        ("CONVERSE_NODES", l.nodes.to_string()),
        ("CONVERSE_TOKEN", format!("{:016x}", l.token)),
        ("CONVERSE_NETMOD", l.netmod.to_string()),
        ("CONVERSE_HOST", l.advertised.to_string()),
        ("CONVERSE_TIMEOUT", opts.timeout.to_string()),
    ];
    let local = is_local_host(&l.host.name);
    let shell = remote_shell(opts, l.host);
    let mut cmd = if local {
        let mut c = Command::new(&opts.command[0]);
        c.args(&opts.command[1..]);
        c.envs(envs.iter().map(|(k, v)| (k, v)));
        c.stdin(Stdio::null());
        c
    } else {
        let dir = std::env::current_dir().map_or_else(|_| ".".into(), |d| d.display().to_string());
        let mut env = forwarded_env(&envs);
        env.extend(envs.iter().map(|(k, v)| (k.to_string(), v.clone())));
        let remote = remote_command(&dir, &env, &opts.command);
        if opts.verbose {
            eprintln!(
                "convrun: process {} on {}: {} {} <command>",
                l.node,
                l.host.name,
                shell.join(" "),
                l.host.name
            );
        }
        let mut c = Command::new(&shell[0]);
        c.args(&shell[1..]).arg(&l.host.name).arg(remote);
        // Never written to: the remote side watches it for its end.
        c.stdin(Stdio::piped());
        c
    };
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| {
        if local {
            format!(
                "cannot start process {} (`{}`): {e}",
                l.node, opts.command[0]
            )
        } else {
            format!(
                "cannot start process {} on {}: remote shell `{}`: {e}",
                l.node, l.host.name, shell[0]
            )
        }
    })?;
    let stdin = child.stdin.take();
    Ok((child, stdin))
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The address this host uses towards `host`, asked of the routing table
/// (connecting a UDP socket sends nothing). `None` if the name does not
/// resolve here.
fn route_to(host: &str) -> Option<IpAddr> {
    let target = (host, 9).to_socket_addrs().ok()?.next()?;
    let any: SocketAddr = if target.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let sock = UdpSocket::bind(any).ok()?;
    sock.connect(target).ok()?;
    let ip = sock.local_addr().ok()?.ip();
    (!ip.is_unspecified()).then_some(ip)
}

fn main() {
    let opts = parse_args(std::env::args().skip(1).collect());
    install_signal_handlers();
    let nodes = opts.pes / opts.ppn;
    let hosts: Vec<Host> = match (&opts.nodelist, opts.local) {
        (Some(path), false) => read_nodelist(path),
        _ => vec![Host {
            name: "127.0.0.1".into(),
            shell: None,
        }],
    };
    // The host of each process.
    let placed: Vec<&Host> = (0..nodes).map(|n| &hosts[n % hosts.len()]).collect();
    let all_local = placed.iter().all(|h| is_local_host(&h.name));
    // The host of each process as a number: one per distinct nodelist name,
    // this host's names counting as one.
    let mut host_keys: Vec<(&str, usize)> = Vec::new();
    let host_of: Vec<usize> = placed
        .iter()
        .enumerate()
        .map(|(node, h)| {
            let key = (
                host_key(&h.name),
                opts.virtual_hosts.map_or(0, |v| node % v),
            );
            host_keys.iter().position(|&k| k == key).unwrap_or_else(|| {
                host_keys.push(key);
                host_keys.len() - 1
            })
        })
        .collect();
    let hosts_var = host_of
        .iter()
        .map(|h| h.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let one_host = host_keys.len() <= 1;
    let netmod = opts
        .netmod
        .clone()
        .unwrap_or_else(|| if one_host { "shm" } else { "auto" }.to_string());
    if netmod == "shm" && !one_host {
        fail(
            "++netmod shm needs every process on one host (use ++netmod auto for shm within each host and tcp between them, ++netmod tcp, or ++local)",
        );
    }
    // The address each process reaches the launcher at: loopback on this
    // host, else the one this host uses towards the process's host (not
    // this host's name: that may stand for a loopback address here, as
    // Debian's 127.0.1.1 does).
    let control_ip: Vec<Option<IpAddr>> = placed
        .iter()
        .map(|h| {
            if is_local_host(&h.name) {
                Some(Ipv4Addr::LOCALHOST.into())
            } else {
                route_to(&h.name)
            }
        })
        .collect();
    // Listen on that address if it is the same for all, else on all.
    let bind: SocketAddr = match control_ip.first() {
        Some(&Some(ip)) if control_ip.iter().all(|c| *c == Some(ip)) => (ip, 0).into(),
        _ if control_ip.iter().flatten().any(|ip| ip.is_ipv6()) => {
            (Ipv6Addr::UNSPECIFIED, 0).into()
        }
        _ => (Ipv4Addr::UNSPECIFIED, 0).into(),
    };
    let listener = TcpListener::bind(bind)
        .unwrap_or_else(|e| fail(&format!("cannot open the control socket: {e}")));
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    let my_name = hostname();
    let launcher_addr: Vec<String> = control_ip
        .iter()
        .map(|ip| match ip {
            Some(ip) => SocketAddr::from((*ip, port)).to_string(),
            None => format!("{my_name}:{port}"),
        })
        .collect();
    // The name a process on this host goes by: its nodelist name when the
    // whole job is here; in a job with remote hosts, the address those
    // reach this host at (a loopback name would send them to themselves).
    let remote_ips: Vec<Option<IpAddr>> = placed
        .iter()
        .zip(&control_ip)
        .filter(|(h, _)| !is_local_host(&h.name))
        .map(|(_, ip)| *ip)
        .collect();
    let this_host = match remote_ips.first() {
        Some(&Some(ip)) if remote_ips.iter().all(|c| *c == Some(ip)) => ip.to_string(),
        _ => my_name.clone(),
    };
    let token = RandomState::new().build_hasher().finish() ^ std::process::id() as u64;
    if opts.verbose {
        eprintln!(
            "convrun: {} PEs in {nodes} processes of {} on {} host(s), netmod {}, control {}",
            opts.pes,
            opts.ppn,
            hosts.len(),
            netmod,
            listener
                .local_addr()
                .map_or_else(|_| "?".into(), |a| a.to_string())
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
    for (node, host) in placed.iter().enumerate() {
        // PEs of this job on the same host: more than its cores and idle
        // PEs must not spin.
        let host_pes = host_of.iter().filter(|&&h| h == host_of[node]).count() * job.opts.ppn;
        let local = is_local_host(&host.name);
        let advertised = if local && !all_local {
            this_host.as_str()
        } else {
            host.name.as_str()
        };
        let launch = Launch {
            node,
            nodes,
            host,
            advertised,
            host_pes,
            hosts: &hosts_var,
            launcher: &launcher_addr[node],
            netmod: &netmod,
            token,
        };
        let (mut child, stdin) = match spawn(&job.opts, &launch) {
            Ok(started) => started,
            Err(why) => {
                // The processes started so far must not wait for this one.
                eprintln!("convrun: {why}");
                job.signal_all(libc::SIGKILL);
                job.end_all(Duration::ZERO);
                job.code = Some(1);
                job.finish();
            }
        };
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
            remote: (!local).then(|| host.name.clone()),
            _stdin: stdin,
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
                "convrun: {} {} before the job started{}",
                job.who(node),
                describe(status),
                job.hint(node)
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
                        .map(|p| match &p.remote {
                            Some(host) => {
                                format!("{} (on {host}, remote shell pid {})", p.node, p.child.id())
                            }
                            None => format!("{} (pid {})", p.node, p.child.id()),
                        })
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
