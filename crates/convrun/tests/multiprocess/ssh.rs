//! `convrun`'s remote launch path, through a real `sshd`.
//!
//! Each case starts its own `sshd` on 127.0.0.2 (loopback, but not a name
//! `convrun` takes for this host, so its processes really go through the
//! remote shell) at a free port, with a host key and a client key made by
//! `ssh-keygen` in a temporary directory, and points `ssh` at it with a
//! config file (`ssh -F`): `ssh` reads `~/.ssh/config` from the passwd home
//! directory, not `$HOME`, so a file given with `-F` is the reliable way.
//! Nothing listens at 127.0.0.3, the unreachable host.
//!
//! Without `sshd`, `ssh` or `ssh-keygen`, or when not run as root (`sshd`
//! must be, to log in), a case says `skipped: ...` and passes, unless
//! `CONVERSE_TEST_SSH` is set (CI sets it where it installed openssh).
//!
//! Child programs: `ssh_probe`; the cases also run `lx_*` programs of
//! `launcher.rs`.
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::Case;
use crate::common::{Finished, convrun_with, me};
use crate::launcher::{
    Running, check_lines, expect_ended_saying, expect_gone, expect_no_stderr, expect_nonzero,
    expect_stderr, own_args, parse_pids, program_name, run,
};

/// The host the processes are started on through ssh.
const SSH_HOST: &str = "127.0.0.2";
/// A host nothing listens on.
const DEAD_HOST: &str = "127.0.0.3";

const LIMIT: Duration = Duration::from_secs(60);

/// How long processes may take to be gone once `convrun` ended (a remote
/// one ends when sshd notices its connection is gone).
const GONE: Duration = Duration::from_secs(10);

/// A value with everything a shell would expand, split or unquote.
const VALUE: &str = "it's \"q\" $HOME `id` a  b\\c *\nline2 ;|&";

/// Program arguments of the same kind.
const ARGS: &[&str] = &[
    "a b",
    "it's",
    "\"dq\"",
    "$HOME",
    "`id`",
    "",
    "*",
    "x;y|z&",
    "back\\slash",
    "new\nline",
    "-x",
    "  lead",
];

// ---------------------------------------------------------------------------
// Child program
// ---------------------------------------------------------------------------

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| "<unset>".into())
}

/// The `probe` line process `node` prints: what it got from `convrun` and
/// its remote shell.
fn probe_line(
    node: usize,
    host: &str,
    ssh: &str,
    cwd: &str,
    value: &str,
    backtrace: &str,
    args: &[String],
) -> String {
    format!(
        "probe node={node} host={host:?} ssh={ssh:?} cwd={cwd:?} value={value:?} backtrace={backtrace:?} args={args:?}"
    )
}

/// Runs child program `name` if it is one of these; returns its exit code.
pub fn child(name: &str, _args: &[String]) -> Option<i32> {
    let own = own_args();
    let name = program_name(name, &own);
    match name {
        // Prints its `probe` line, then joins the job and leaves.
        "ssh_probe" => {
            let node: usize = var("CONVERSE_NODE").parse().unwrap_or(usize::MAX);
            // sshd sets SSH_CONNECTION to `CLIENT PORT SERVER PORT`.
            let ssh = match std::env::var("SSH_CONNECTION") {
                Ok(c) => c.split(' ').skip(2).collect::<Vec<_>>().join(":"),
                Err(_) => "none".into(),
            };
            let cwd =
                std::env::current_dir().map_or_else(|e| e.to_string(), |d| d.display().to_string());
            let launcher = var("CONVERSE_LAUNCHER");
            let launcher_ip = launcher.rsplit_once(':').map_or("", |(ip, _)| ip);
            let args: Vec<String> = own.iter().skip(1).cloned().collect();
            println!(
                "{}",
                probe_line(
                    node,
                    &var("CONVERSE_HOST"),
                    &ssh,
                    &cwd,
                    &var("CONVERSE_SSH_TEST_VALUE"),
                    &var("RUST_BACKTRACE"),
                    &args
                )
            );
            println!(
                "launcher node={node} ip={launcher_ip} netmod={}",
                var("CONVERSE_NETMOD")
            );
            println!(
                "hosts node={node} netmod={} hosts={}",
                var("CONVERSE_NETMOD"),
                var("CONVERSE_HOSTS")
            );
            let _ = std::io::stdout().flush();
            Some(run(|_| converse::exit_scheduler()))
        }
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// The sshd
// ---------------------------------------------------------------------------

fn in_path(prog: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(prog))
        .find(|p| p.is_file())
}

/// sshd's path (it must be started by its absolute path).
fn find_sshd() -> Option<PathBuf> {
    ["/usr/sbin/sshd", "/usr/local/sbin/sshd"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .or_else(|| in_path("sshd"))
}

/// A directory of its own under the system's temporary one.
fn temp_dir() -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "converse-ssh-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    dir
}

fn keygen(path: &Path) {
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "converse-test", "-f"])
        .arg(path)
        .stdin(Stdio::null())
        .output()
        .expect("ssh-keygen runs");
    assert!(
        out.status.success(),
        "ssh-keygen -f {}: {}\n{}",
        path.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A free port on `SSH_HOST` (free when asked; sshd may still lose it to
/// another program, which `Sshd::start` retries).
fn free_port() -> u16 {
    let l = TcpListener::bind((SSH_HOST, 0)).expect("bind a port on 127.0.0.2");
    l.local_addr().unwrap().port()
}

/// An sshd for one case, and the files ssh needs to reach it. Dropping it
/// stops the sshd and removes the files.
pub(crate) struct Sshd {
    child: Child,
    dir: PathBuf,
    port: u16,
    /// `ssh -F CONFIG`, for `++remote-shell`.
    remote_shell: String,
    /// A script that runs ssh with that config, for a nodelist's `++shell`.
    wrapper: String,
}

impl Sshd {
    /// Starts one, or says why this machine cannot (the case is skipped).
    fn start() -> Result<Sshd, String> {
        let Some(sshd) = find_sshd() else {
            return Err("no sshd (install openssh-server)".into());
        };
        for prog in ["ssh", "ssh-keygen"] {
            if in_path(prog).is_none() {
                return Err(format!("no {prog} in PATH (install openssh-server)"));
            }
        }
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err(
                "not root (the test's sshd must run as root to log in; run as root with openssh-server installed)".into(),
            );
        }
        let dir = temp_dir();
        let p = |name: &str| dir.join(name).display().to_string();
        assert!(
            !p("x").contains(char::is_whitespace),
            "the temporary directory {} has white space, which ++remote-shell cannot take",
            dir.display()
        );
        keygen(&dir.join("host_key"));
        keygen(&dir.join("user_key"));
        std::fs::copy(p("user_key.pub"), p("authorized_keys")).unwrap();
        // Debian's sshd wants its privilege separation directory (made by
        // its service, which may not have run).
        std::fs::create_dir_all("/run/sshd").expect("/run/sshd");

        let mut last_log = String::new();
        for _attempt in 0..3 {
            let port = free_port();
            std::fs::write(
                p("sshd_config"),
                format!(
                    "ListenAddress {SSH_HOST}:{port}\n\
                     HostKey \"{}\"\n\
                     AuthorizedKeysFile \"{}\"\n\
                     PidFile none\n\
                     UsePAM no\n\
                     StrictModes no\n\
                     PermitRootLogin prohibit-password\n\
                     PubkeyAuthentication yes\n\
                     PasswordAuthentication no\n\
                     KbdInteractiveAuthentication no\n\
                     AllowAgentForwarding no\n\
                     AllowTcpForwarding no\n\
                     X11Forwarding no\n\
                     PrintMotd no\n\
                     UseDNS no\n\
                     MaxStartups 64\n",
                    p("host_key"),
                    p("authorized_keys")
                ),
            )
            .unwrap();
            let log = std::fs::File::create(p("sshd.log")).unwrap();
            let mut cmd = Command::new(&sshd);
            cmd.args(["-D", "-e", "-f"])
                .arg(p("sshd_config"))
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log);
            // SAFETY: prctl is async-signal-safe; the sshd ends with this
            // thread (the case's) even if the test binary is killed.
            unsafe {
                cmd.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                    Ok(())
                });
            }
            let mut child = cmd.spawn().expect("sshd starts");
            if wait_ready(&mut child, port) {
                let host_key = std::fs::read_to_string(p("host_key.pub")).unwrap();
                let key: Vec<&str> = host_key.split_whitespace().take(2).collect();
                std::fs::write(
                    p("known_hosts"),
                    format!("[{SSH_HOST}]:{port} {}\n", key.join(" ")),
                )
                .unwrap();
                std::fs::write(
                    p("ssh_config"),
                    format!(
                        "Host *\n\
                         \x20 Port {port}\n\
                         \x20 IdentityFile \"{}\"\n\
                         \x20 IdentitiesOnly yes\n\
                         \x20 IdentityAgent none\n\
                         \x20 UserKnownHostsFile \"{}\"\n\
                         \x20 GlobalKnownHostsFile /dev/null\n\
                         \x20 StrictHostKeyChecking yes\n\
                         \x20 CheckHostIP no\n\
                         \x20 BatchMode yes\n\
                         \x20 PasswordAuthentication no\n\
                         \x20 KbdInteractiveAuthentication no\n\
                         \x20 ConnectTimeout 10\n\
                         \x20 ControlMaster no\n\
                         \x20 ControlPath none\n\
                         \x20 LogLevel ERROR\n",
                        p("user_key"),
                        p("known_hosts")
                    ),
                )
                .unwrap();
                let wrapper = p("remote-shell");
                std::fs::write(
                    &wrapper,
                    format!("#!/bin/sh\nexec ssh -F '{}' \"$@\"\n", p("ssh_config")),
                )
                .unwrap();
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
                return Ok(Sshd {
                    child,
                    port,
                    remote_shell: format!("ssh -F {}", p("ssh_config")),
                    wrapper,
                    dir,
                });
            }
            let _ = child.kill();
            let _ = child.wait();
            last_log = std::fs::read_to_string(p("sshd.log")).unwrap_or_default();
            if !last_log.contains("Address already in use") {
                break;
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        panic!("sshd did not start; its log:\n{last_log}");
    }

    /// Writes a nodelist; returns its path.
    fn nodelist(&self, name: &str, text: &str) -> String {
        let path = self.dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("sshd.log")).unwrap_or_default()
    }
}

/// Waits until the sshd answers with its banner (false: it exited, or
/// never answered).
fn wait_ready(child: &mut Child, port: u16) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        if let Ok(mut s) = TcpStream::connect((SSH_HOST, port)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let mut banner = [0u8; 8];
            if s.read_exact(&mut banner).is_ok() && &banner == b"SSH-2.0-" {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- sshd log\n{}", self.log());
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `case` with an sshd, or says why it is skipped (a failure instead
/// when `CONVERSE_TEST_SSH` is set, as CI does where it installed sshd).
fn with_sshd(case: impl FnOnce(&Sshd)) {
    match Sshd::start() {
        Ok(sshd) => case(&sshd),
        Err(why) if std::env::var_os("CONVERSE_TEST_SSH").is_some() => {
            panic!("CONVERSE_TEST_SSH is set, but: {why}")
        }
        Err(why) => println!("skipped: {why}"),
    }
}

/// `convrun ARGS`, from the case's directory.
fn job(args: &[&str]) -> Finished {
    convrun_with(args, LIMIT, |c| {
        c.env_remove("SSH_CONNECTION");
    })
}

// ---------------------------------------------------------------------------
// Cases
// ---------------------------------------------------------------------------

/// Jobs of 2 processes × 2 PEs over tcp, both started through ssh: exit
/// codes and output.
fn launcher_ssh_jobs() {
    with_sshd(|s| {
        let me = me();
        let nl = s.nodelist("nodes", &format!("group main\nhost {SSH_HOST}\n"));
        let base = [
            "++nodelist",
            &nl,
            "++remote-shell",
            &s.remote_shell,
            "++netmod",
            "tcp",
        ];
        let with = |rest: &[&str]| -> Finished {
            let mut a: Vec<&str> = base.to_vec();
            a.extend_from_slice(rest);
            job(&a)
        };

        let f = with(&["+p", "4", "++ppn", "2", &me, "lx_exit_zero"]);
        f.expect_code(0);
        for pe in 0..4 {
            f.expect_line(&format!("done PE {pe}"));
        }
        assert!(
            f.stdout.contains("in 2 processes of 2 PEs, netmod tcp"),
            "no banner of 2 processes over tcp:\n{}",
            f.stdout
        );
        assert!(f.stderr.is_empty(), "stderr of a clean job:\n{}", f.stderr);

        for code in ["3", "0"] {
            let f = with(&["+p", "4", "++ppn", "2", &me, "lx_exit_code", code]);
            f.expect_code(code.parse().unwrap());
            expect_no_stderr(&f, "lost process");
        }

        let n = 300;
        let f = with(&["+p", "4", "++ppn", "2", &me, "lx_output", &n.to_string()]);
        f.expect_code(0);
        check_lines(&f.stdout, "out", 4, n, &["converse: "]);
        check_lines(&f.stderr, "err", 4, n, &[]);

        let f = with(&["+p", "2", &me, "lx_tail"]);
        f.expect_code(0);
        f.expect_line("tail-0").expect_line("tail-1");
        f.expect_err_line("errtail-0").expect_err_line("errtail-1");
    });
}

/// A job on this host and on the ssh host, by default (`auto`): shm between
/// the processes of a host, tcp between the hosts. The core runtime's
/// programs pass on it.
fn launcher_ssh_mixed_hosts() {
    with_sshd(|s| {
        let me = me();
        let nl = s.nodelist(
            "mixed",
            &format!(
                "group main ++shell {}\nhost localhost\nhost {SSH_HOST}\n",
                s.wrapper
            ),
        );
        // Processes 0 and 2 here, 1 and 3 there.
        for (pes, ppn) in [("4", "1"), ("8", "2")] {
            for program in ["core_sends", "core_bcast", "core_reduce", "core_node_sends"] {
                let f = job(&["++nodelist", &nl, "+p", pes, "++ppn", ppn, &me, program]);
                f.expect_code(0);
                f.expect_line(&format!("ok {program}"));
                assert!(
                    f.stdout.contains(", netmod shm+tcp"),
                    "no banner of a job over shm and tcp:\n{}",
                    f.stdout
                );
            }
        }
        // Each process got the same map of hosts.
        let f = job(&["++nodelist", &nl, "+p", "4", &me, "ssh_probe"]);
        f.expect_code(0);
        for node in 0..4 {
            f.expect_line(&format!("hosts node={node} netmod=auto hosts=0,1,0,1"));
        }
    });
}

/// Working directory, environment and arguments reach the remote processes
/// intact through ssh's shell; `++remote-shell`, a group's `++shell`, and a
/// job with a process here and one through ssh.
fn launcher_ssh_env_args_cwd() {
    with_sshd(|s| {
        let me = me();
        let work = s.dir.join("work dir 'q' $HOME");
        std::fs::create_dir_all(&work).unwrap();
        let cwd = std::fs::canonicalize(&work).unwrap().display().to_string();
        let args: Vec<String> = ARGS.iter().map(|a| a.to_string()).collect();
        let ssh_at = format!("{SSH_HOST}:{}", s.port);
        let run_in = |a: &[&str]| -> Finished {
            convrun_with(a, LIMIT, |c| {
                c.current_dir(&work)
                    .env("CONVERSE_SSH_TEST_VALUE", VALUE)
                    .env("RUST_BACKTRACE", "1")
                    .env_remove("SSH_CONNECTION");
            })
        };

        // Both processes through `++remote-shell`.
        let nl = s.nodelist("nodes", &format!("host {SSH_HOST}\n"));
        let mut a = vec![
            "++nodelist",
            &nl,
            "++remote-shell",
            &s.remote_shell,
            "+p",
            "2",
            &me,
            "ssh_probe",
        ];
        a.extend_from_slice(ARGS);
        let f = run_in(&a);
        f.expect_code(0);
        for node in 0..2 {
            f.expect_line(&probe_line(
                node, SSH_HOST, &ssh_at, &cwd, VALUE, "1", &args,
            ));
            // Both on one host: shm by default.
            expect_loopback_launcher(&f, node, "shm");
        }

        // Process 0 here, process 1 through the group's `++shell` (a
        // script); a `++shell` line before the group is overridden by it,
        // and no `++remote-shell` is given.
        let nl = s.nodelist(
            "mixed",
            &format!(
                "++shell /nonexistent/global-shell\ngroup main ++shell {}\nhost localhost\nhost {SSH_HOST}\n",
                s.wrapper
            ),
        );
        let mut a = vec!["++nodelist", &nl, "+p", "2", &me, "ssh_probe"];
        a.extend_from_slice(ARGS);
        let f = run_in(&a);
        f.expect_code(0);
        f.expect_line(&probe_line(1, SSH_HOST, &ssh_at, &cwd, VALUE, "1", &args));
        expect_loopback_launcher(&f, 1, "auto");
        // The local process was started directly, and goes by an address
        // the remote one can reach (here, a loopback one).
        let local = f
            .stdout
            .lines()
            .find(|l| l.starts_with("probe node=0 "))
            .unwrap_or_else(|| panic!("no probe line of process 0:\n{}", f.stdout));
        assert!(
            local.contains(" ssh=\"none\" ") && local.contains(" host=\"127."),
            "process 0: {local}"
        );
    });
}

/// Fails unless process `node` was given a loopback launcher address and
/// the module `netmod`.
fn expect_loopback_launcher(f: &Finished, node: usize, netmod: &str) {
    let head = format!("launcher node={node} ip=127.");
    let tail = format!(" netmod={netmod}");
    assert!(
        f.stdout
            .lines()
            .any(|l| l.starts_with(&head) && l.ends_with(&tail)),
        "process {node} has no loopback launcher address over {netmod}:\n{}",
        f.stdout
    );
}

/// A program missing there, an unreachable host and a missing remote shell
/// fail the job at once with the host named, and leave nothing running.
fn launcher_ssh_failures() {
    with_sshd(|s| {
        let me = me();
        let nl = s.nodelist("nodes", &format!("host {SSH_HOST}\n"));

        let f = job(&[
            "++nodelist",
            &nl,
            "++remote-shell",
            &s.remote_shell,
            "+p",
            "2",
            "/nonexistent/converse-program",
        ]);
        f.expect_code(127);
        expect_stderr(
            &f,
            &format!(
                "on {SSH_HOST} exited with code 127 before the job started (127: the program was not found there)"
            ),
        );

        // Process 0 starts; process 1's host does not answer.
        let nl = s.nodelist("dead", &format!("host {SSH_HOST}\nhost {DEAD_HOST}\n"));
        let f = job(&[
            "++nodelist",
            &nl,
            "++remote-shell",
            &s.remote_shell,
            "+p",
            "2",
            &me,
            "lx_idle",
        ]);
        f.expect_code(255);
        expect_stderr(
            &f,
            &format!(
                "convrun: process 1 (PE 1) on {DEAD_HOST} exited with code 255 before the job started (255: ssh could not connect or log in)"
            ),
        );
        expect_gone(&parse_pids(&f.stdout), GONE, &f);

        // Process 0 here; process 1's own `++shell` (over `++remote-shell`)
        // does not exist.
        let nl = s.nodelist(
            "noshell",
            &format!("host localhost\nhost {SSH_HOST} ++shell /nonexistent/rsh\n"),
        );
        let f = job(&[
            "++nodelist",
            &nl,
            "++remote-shell",
            &s.remote_shell,
            "+p",
            "2",
            &me,
            "lx_idle",
        ]);
        expect_nonzero(&f);
        expect_stderr(
            &f,
            &format!(
                "convrun: cannot start process 1 on {SSH_HOST}: remote shell `/nonexistent/rsh`"
            ),
        );
        expect_gone(&parse_pids(&f.stdout), GONE, &f);
    });
}

/// Remote processes are gone after the job whatever ended it: a start-up
/// timeout (they never joined), a signal to `convrun`, one of them killed,
/// `convrun` killed.
fn launcher_ssh_cleanup() {
    with_sshd(|s| {
        let me = me();
        let nl = s.nodelist("nodes", &format!("host {SSH_HOST}\n"));
        let base = ["++nodelist", nl.as_str(), "++remote-shell", &s.remote_shell];
        let start = |rest: &[&str]| -> Running {
            let mut a: Vec<&str> = base.to_vec();
            a.extend_from_slice(rest);
            Running::start(&a, false)
        };

        // Nobody joins: the start-up times out, naming both processes and
        // their host.
        let mut r = start(&["++timeout", "3", "+p", "2", &me, "lx_nojoin", "all"]);
        r.wait_pids(2, None, LIMIT);
        let pids = r.pids.clone();
        let f = r.finish(LIMIT);
        expect_nonzero(&f);
        expect_stderr(&f, "never joined the job");
        expect_stderr(&f, &format!("0 (on {SSH_HOST}, remote shell pid "));
        expect_stderr(&f, &format!("1 (on {SSH_HOST}, remote shell pid "));
        expect_gone(&pids, GONE, &f);

        // SIGTERM to convrun while the job runs.
        let mut r = start(&["+p", "4", "++ppn", "2", &me, "lx_idle"]);
        r.wait_pids(2, Some("converse: 4 PEs"), LIMIT);
        let pids = r.pids.clone();
        // SAFETY: kill(2) on convrun.
        unsafe {
            libc::kill(r.pid(), libc::SIGTERM);
        }
        let f = r.finish(LIMIT);
        f.expect_code(128 + libc::SIGTERM);
        expect_gone(&pids, GONE, &f);

        // A remote process is killed: it is named with its host, the other
        // one ends saying so, and the code is 128 + 9 as the remote shell
        // reports it.
        let mut r = start(&["+p", "4", "++ppn", "2", &me, "lx_idle"]);
        r.wait_pids(2, Some("converse: 4 PEs"), LIMIT);
        let pids = r.pids.clone();
        // SAFETY: kill(2) on a process of the job (on this machine).
        unsafe {
            libc::kill(r.pid_of(1), libc::SIGKILL);
        }
        let f = r.finish(LIMIT);
        f.expect_code(128 + libc::SIGKILL);
        expect_stderr(
            &f,
            &format!(
                "convrun: process 1 (PEs 2..3) on {SSH_HOST} exited with code 137 before its part of the job ended"
            ),
        );
        expect_stderr(&f, "(137 = 128 + 9: killed by signal 9 (SIGKILL) there)");
        expect_ended_saying(&f, 0, &["lost process 1 (PEs 2..3)"]);
        expect_gone(&pids, GONE, &f);

        // convrun itself is killed while the processes are starting (they
        // never join, so only their remote shells' end can stop them).
        let mut r = start(&["+p", "2", &me, "lx_nojoin", "all"]);
        r.wait_pids(2, None, LIMIT);
        let pids = r.pids.clone();
        // SAFETY: kill(2) on convrun.
        unsafe {
            libc::kill(r.pid(), libc::SIGKILL);
        }
        let f = r.finish(LIMIT);
        assert_eq!(f.code, None, "convrun was killed");
        expect_gone(&pids, GONE, &f);
    });
}

/// The driver cases.
pub fn cases() -> Vec<Case> {
    vec![
        ("launcher_ssh_jobs", launcher_ssh_jobs),
        ("launcher_ssh_env_args_cwd", launcher_ssh_env_args_cwd),
        ("launcher_ssh_mixed_hosts", launcher_ssh_mixed_hosts),
        ("launcher_ssh_failures", launcher_ssh_failures),
        ("launcher_ssh_cleanup", launcher_ssh_cleanup),
    ]
}
