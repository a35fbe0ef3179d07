//! The C programs of `tests/c/ccs/`: a Converse job whose CCS handlers are
//! written in C (`conv-ccs.h`) and a plain C client (`ccs-client.h`, no
//! `ConverseInit`), built with their Makefile and `convcc`. The server runs
//! in the background (one process, and under `convrun` in two), the
//! client talks to it, and the test compares the client's whole output;
//! then the client's "stop" request ends the server. A last program gives
//! CCS a null callback, which ends the job naming the call. Nothing
//! depends on timings: every wait has a deadline that only a hang reaches.
mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use converse_capi::ccs_client::CcsServer;

use common::{expect_ok, text};

const DIR: &str = "ccs";

/// How long the server may take to start, or to end once asked to.
const PATIENCE: Duration = Duration::from_secs(60);

/// A server job running in the background; killed if dropped while it
/// runs (a failed test leaves nothing behind).
struct Server {
    child: Child,
    lines: Receiver<String>,
    /// Standard output as read so far.
    stdout: Vec<String>,
    stdout_reader: Option<JoinHandle<()>>,
    stderr_reader: Option<JoinHandle<String>>,
}

impl Server {
    /// Starts `cmd` and waits for its CCS port and for "server ready".
    fn start(mut cmd: Command) -> (Server, u16) {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the server starts");
        let out = child.stdout.take().unwrap();
        let mut err = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        let stdout_reader = std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr_reader = std::thread::spawn(move || {
            let mut s = String::new();
            err.read_to_string(&mut s).ok();
            s
        });
        let mut server = Server {
            child,
            lines,
            stdout: Vec::new(),
            stdout_reader: Some(stdout_reader),
            stderr_reader: Some(stderr_reader),
        };
        let announced = server.wait_for_line(|l| l.starts_with("ccs: Server IP = "));
        let port = announced
            .split("Server port = ")
            .nth(1)
            .and_then(|rest| rest.strip_suffix(" $"))
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in {announced:?}"));
        server.wait_for_line(|l| l.starts_with("server ready on "));
        (server, port)
    }

    /// The next line of standard output that `want` accepts.
    fn wait_for_line(&mut self, want: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.stdout.push(line.clone());
                    if want(&line) {
                        return line;
                    }
                }
                Err(_) => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    let stderr = self.stderr_reader.take().unwrap().join().unwrap();
                    panic!(
                        "the server did not print the expected line within {PATIENCE:?} \
                         (or ended):\nstdout:\n{}\nstderr:\n{stderr}",
                        self.stdout.join("\n")
                    );
                }
            }
        }
    }

    /// Waits for the job to end by itself; its status and output.
    fn finish(mut self) -> Output {
        let deadline = Instant::now() + PATIENCE;
        let status: ExitStatus = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("the server did not end within {PATIENCE:?} of its stop");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        self.stdout_reader.take().unwrap().join().unwrap();
        self.stdout.extend(self.lines.try_iter());
        let stderr = self.stderr_reader.take().unwrap().join().unwrap();
        let mut stdout = self.stdout.join("\n").into_bytes();
        stdout.push(b'\n');
        Output {
            status,
            stdout,
            stderr: stderr.into_bytes(),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The server program run directly with `args` (one process).
fn direct_server(args: &[&str]) -> (Server, u16) {
    let programs = common::programs(DIR);
    let mut cmd = Command::new(programs.join("server"));
    cmd.args(args).current_dir(&programs);
    Server::start(cmd)
}

/// The server program under `convrun` with `launcher` flags before it and
/// `args` after it.
fn convrun_server(launcher: &[&str], args: &[&str]) -> (Server, u16) {
    let programs = common::programs(DIR);
    let mut cmd = Command::new(common::profile_dir().join("convrun"));
    cmd.args(launcher)
        .arg("./server")
        .args(args)
        .current_dir(&programs);
    Server::start(cmd)
}

/// The client program, asking the server at `port`, with `extra` args.
fn client(port: u16, extra: &[&str]) -> Output {
    let programs = common::programs(DIR);
    let mut cmd = Command::new(programs.join("client"));
    cmd.arg("127.0.0.1")
        .arg(port.to_string())
        .args(extra)
        .current_dir(&programs);
    common::run_with_deadline(cmd)
}

/// What the client prints against a job of `ppn`-PE nodes, `pes` PEs.
fn expected_client(pes: usize, ppn: usize, auth: bool) -> Vec<String> {
    let nodes = pes / ppn;
    let last = pes - 1;
    let mut want = Vec::new();
    if auth {
        want.push("no key: -1".to_owned());
        want.push("other key: -1".to_owned());
    }
    want.push(format!(
        "layout: {nodes} nodes, {pes} PEs, authenticated {}, fields {nodes} {pes}",
        u8::from(auth)
    ));
    for node in 0..nodes {
        want.push(format!(
            "node {node}: first {}, size {ppn} (numProcs {ppn})",
            node * ppn
        ));
    }
    want.push(format!("node {nodes}: first -1, size -1"));
    want.push("server 127.0.0.1, port matches 1".to_owned());
    for pe in 0..pes {
        want.push(format!(
            "echo {pe}: PE {pe} got 'hello' from 127.0.0.1, port known"
        ));
    }
    let whoami: String = (0..pes).map(|pe| format!("[{pe}]")).collect();
    want.push(format!("whoami: {whoami}"));
    want.push(format!("sum: {} (4 bytes)", pes * (pes + 1) / 2));
    let multicast = if pes > 1 { 1 + pes } else { 1 };
    want.push(format!(
        "multicast sum: {multicast} (4 bytes), list kept {last} 0"
    ));
    want.push("empty multicast: -1".to_owned());
    want.push(format!("maxd: {:.1} (8 bytes)", 1.5 * last as f64));
    let join: Vec<String> = (0..pes).map(|pe| pe.to_string()).collect();
    want.push(format!("join: {}", join.join("+")));
    for pe in 0..pes {
        // The next PE of the same node answers.
        let first = pe / ppn * ppn;
        let next = first + (pe - first + 1) % ppn;
        want.push(format!(
            "delay {pe}: asked PE {pe}, answered by PE {next} (remote request: 0)"
        ));
    }
    want.extend([
        "silent: -1".to_owned(),
        "noerror: once (4 bytes)".to_owned(),
        format!("fn: fn on PE {last}: user data, 5 bytes: 12345"),
        "used: used on PE 0 (remote request: 1)".to_owned(),
        "nosuch: 0 bytes".to_owned(),
        "bad pe: -1".to_owned(),
        "negative pe: -1".to_owned(),
        "small buffer: -1".to_owned(),
        "msg: 41 41 PE 0 got 'abc' from 127.0.0.1, port known".to_owned(),
        "probe: 1".to_owned(),
        "after probe: [0]".to_owned(),
        "probe with nothing asked: -1".to_owned(),
        "probe timeout with nothing asked: -1".to_owned(),
        "probe timeout: 1".to_owned(),
        format!("after probe timeout: [{last}]"),
        "no response: 0".to_owned(),
        "receive after no response: -1".to_owned(),
        "receive with nothing asked: -1".to_owned(),
        "stop: stopping".to_owned(),
        "after finalize: -1 -1".to_owned(),
    ]);
    want
}

/// Checks the client's output and the server's end after "stop".
/// Runs the client's session against `server` and checks it; returns the
/// server's output.
fn check_session(server: Server, port: u16, pes: usize, ppn: usize, key: Option<&str>) -> Output {
    let out = client(port, key.as_slice());
    let (stdout, stderr) = text(&out);
    let server_out = server.finish();
    let (server_stdout, server_stderr) = text(&server_out);
    assert!(
        out.status.success(),
        "client: {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}\nserver stdout:\n{server_stdout}\nserver stderr:\n{server_stderr}",
        out.status
    );
    let got: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        got,
        expected_client(pes, ppn, key.is_some()),
        "client stderr:\n{stderr}\nserver stderr:\n{server_stderr}"
    );
    // Charm++'s client says why a multicast to no PE was refused.
    assert!(
        stderr.contains("CCS multicast: No processor specified"),
        "{stderr}"
    );
    expect_ok(
        &server_out,
        &[
            "CcsEnabled 1, CcsIsRemoteRequest 0",
            "echo on PE 0: not a CCS request, 5 bytes",
            &format!("server ready on {pes} PEs"),
            "stop requested on PE 0",
        ],
    );
    assert!(
        server_stderr.contains("\"nosuch\"") && server_stderr.contains("no such handler"),
        "{server_stderr}"
    );
    server_out
}

#[test]
fn the_structs_c_shares_are_laid_out_as_the_rust_definitions() {
    let out = common::direct(DIR, "headers", &[]);
    let (stdout, _) = text(&out);
    macro_rules! field {
        ($c:literal, $f:ident) => {
            format!("{} {}", $c, std::mem::offset_of!(CcsServer, $f))
        };
    }
    let want = vec![
        format!("CcsServer {}", std::mem::size_of::<CcsServer>()),
        field!("hostAddr", host_addr),
        field!("hostIP", host_ip),
        field!("hostPort", host_port),
        field!("isAuth", is_auth),
        field!("level", level),
        field!("numNodes", num_nodes),
        field!("numPes", num_pes),
        field!("numProcs", num_procs),
        field!("client_", client),
        format!(
            "CcsSec_secretKey {}",
            std::mem::size_of::<converse_capi::ccs_client::CcsSecSecretKey>()
        ),
        format!(
            "skt_ip_t {}",
            std::mem::size_of::<converse_capi::ccs::SktIp>()
        ),
        format!(
            "CcsDelayedReply {}",
            std::mem::size_of::<converse_capi::ccs::CcsDelayedReply>()
        ),
        format!(
            "CcsImplHeader {} len {}",
            converse_capi::ccs::IMPL_HEADER_SIZE,
            converse_capi::ccs::IMPL_HEADER_SIZE - 4
        ),
        "ChMessageInt 1 4 1020304".to_owned(),
    ];
    assert!(out.status.success(), "{out:?}");
    assert_eq!(stdout.lines().collect::<Vec<_>>(), want);
}

#[test]
fn a_c_client_talks_to_c_handlers_of_a_one_process_job() {
    let (server, port) = direct_server(&["+p", "3", "++server", "++server-port", "0"]);
    // Without an auth file the server listens on the loopback only, and
    // says so.
    assert!(
        server
            .stdout
            .iter()
            .any(|l| l == &format!("ccs: Server IP = 127.0.0.1, Server port = {port} $")),
        "{:?}",
        server.stdout
    );
    let _ = check_session(server, port, 3, 3, None);
    // One PE: no merge runs, a multicast of one PE is a plain request.
    let (server, port) = direct_server(&["+p", "1", "++server"]);
    let _ = check_session(server, port, 1, 1, None);
}

#[test]
fn a_c_client_talks_to_c_handlers_of_a_two_process_job() {
    let (server, port) = convrun_server(&["+p", "4", "++ppn", "2"], &["++server"]);
    let _ = check_session(server, port, 4, 2, None);
}

#[test]
fn an_authenticated_c_client_needs_the_servers_key() {
    let key = "00112233445566778899aabbccddeeff";
    let keys = common::programs(DIR).join("auth-keys");
    std::fs::write(&keys, format!("0 {key}\n")).unwrap();
    let keys = keys.to_str().unwrap();
    let (server, port) = direct_server(&["+p", "2", "++server", "++server-auth", keys]);
    // With an auth file the server listens on every address, and says so.
    assert!(
        server
            .stdout
            .iter()
            .any(|l| l == &format!("ccs: Server IP = 0.0.0.0, Server port = {port} $")),
        "{:?}",
        server.stdout
    );
    let _ = check_session(server, port, 2, 2, Some(key));
}

/// Clients that stall mid-request are closed at the stall timeout, and
/// the server names the first and counts the others in one line (issue 50:
/// a flood of them printed a line each).
#[test]
fn stalled_clients_are_named_once_then_counted() {
    use std::io::Write;
    let (server, port) = direct_server(&["+p", "2", "++server", "++server-stall-timeout", "0.2"]);
    let stalled: Vec<std::net::TcpStream> = (0..40)
        .map(|_| {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            // Part of a header, then nothing.
            s.write_all(&[0, 0, 0]).unwrap();
            s
        })
        .collect();
    for mut s in stalled {
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        let mut byte = [0u8; 1];
        // Closed by the server, unanswered.
        assert_eq!(s.read(&mut byte).unwrap_or(0), 0);
    }
    let out = check_session(server, port, 2, 2, None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let named = stderr
        .lines()
        .filter(|l| l.contains("completed no part of its request for 0.2 s; connection closed"))
        .count();
    let counted: u64 = stderr
        .lines()
        .filter_map(|l| {
            l.split_once(" connections closed since the last such line: each completed no part")
                .and_then(|(n, _)| n.rsplit(' ').next()?.parse::<u64>().ok())
        })
        .sum();
    assert_eq!((named, named as u64 + counted), (1, 40), "{stderr}");
}

/// Runs `handler` on PE 0 of a fresh server (`convrun` launcher flags, or
/// direct with none) and returns the client's line and the server's
/// output.
fn misuse(launcher: Option<&[&str]>, handler: &str) -> (String, Output) {
    let (server, port) = match launcher {
        Some(flags) => convrun_server(flags, &["++server"]),
        None => direct_server(&["+p", "2", "++server"]),
    };
    let out = client(port, &["ask", handler]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    (stdout, server.finish())
}

#[test]
fn a_delayed_reply_answered_twice_or_from_another_process_ends_the_job() {
    let (said, server) = misuse(None, "delay_twice");
    assert_eq!(said, "delay_twice: 5 first\n");
    let (_, stderr) = text(&server);
    assert_eq!(
        server.status.code(),
        Some(converse::ABORT_EXIT_CODE),
        "{stderr}"
    );
    assert!(
        stderr.contains("PE 0 aborting: CcsSendDelayedReply: delayed reply")
            && stderr.contains("was already answered"),
        "{stderr}"
    );

    let (said, server) = misuse(Some(&["+p", "2", "++ppn", "1"]), "delay_far");
    // The job ended: the client's connection closed without a reply.
    assert_eq!(said, "delay_far: -1 \n");
    let (_, stderr) = text(&server);
    assert!(!server.status.success(), "{stderr}");
    assert!(
        stderr.contains("PE 1 aborting: CcsSendDelayedReply: delayed reply")
            && stderr.contains("was delayed on node 0, and only that node's PEs"),
        "{stderr}"
    );
}

#[test]
fn a_null_ccs_callback_ends_the_job_naming_the_call() {
    let cases = [
        ("handler", "CcsRegisterHandler: the function is null"),
        ("handlerfn", "CcsRegisterHandlerFn: the function is null"),
        ("merge", "CcsSetMergeFn: the function is null"),
        ("name", "CcsRegisterHandler: the handler name is null"),
    ];
    for (case, why) in cases {
        // The last PE registers it: PE 1 of one process, PE 3 of two.
        for (out, pe) in [
            (common::direct(DIR, "nullfn", &["+p", "2", case]), 1),
            (
                common::convrun_with(DIR, &["+p", "4", "++ppn", "2"], "nullfn", &[case]),
                3,
            ),
        ] {
            let (stdout, stderr) = text(&out);
            assert_eq!(
                out.status.code(),
                Some(converse::ABORT_EXIT_CODE),
                "{case}: {stdout}{stderr}"
            );
            assert!(
                !stdout.contains("accepted"),
                "{case}: {stdout}\nstderr:\n{stderr}"
            );
            assert!(
                stderr.contains(&format!("PE {pe} aborting: {why}")),
                "{case}: {stderr}"
            );
        }
    }
}
