//! The project's CCS clients against the real server of an in-process job
//! (`+p 4 ++ppn 2 ++server`): the Rust library (`converse-ccs`), its `ccs`
//! command-line tool, and the Python client (`python/converse_ccs.py`) as
//! a library and as a command. Each connects (learning the layout from
//! `ccs_getinfo`), asks one PE, broadcasts and multicasts with merged
//! replies, waits for a delayed reply with a timeout and probes for it,
//! and meets a handler that sends no reply; every reply is compared byte
//! for byte.
//!
//! # The `ccs` tool
//!
//! `CARGO_BIN_EXE_ccs` is set only for the tests of the package that has
//! the binary (`converse-ccs`), not for this one, and a dev-dependency
//! brings in a package's library, not its binaries. So the test builds it
//! itself: `cargo build -p converse-ccs --bin ccs` into the target
//! directory and profile this test was built in (a no-op when it is up to
//! date, as after `cargo test --workspace`), then runs
//! `<target>/<profile>/ccs`. Building it each time, rather than taking a
//! binary found there, means the test never runs a stale tool.
//!
//! # Python
//!
//! The Python tests run `python3` (3.11 or later, as the client needs);
//! without it they say so on stderr and pass without checking anything.
//!
//! The tests run one after the other (a lock): the `slow`/`release`
//! handlers park a delayed reply in one process-wide slot.
use crate::ccs_job;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use converse::{Message, ccs, my_pe};
use converse_ccs::{CcsClient, CcsError, ClientOptions};

const JOB: [&str; 6] = ["ccs_clients", "+p", "4", "++ppn", "2", "++server"];

/// `ccs_getinfo`'s reply for two nodes of two PEs: the node count, then
/// each node's PE count, as big-endian 32-bit words.
const GETINFO: [u8; 12] = [0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2];

/// The reply `slow` keeps for `release` to send.
static PARKED: Mutex<Option<ccs::DelayedReply>> = Mutex::new(None);

/// One test at a time (see the top comment).
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The handlers, on every PE:
/// - `echo`: `pe<k>:` and the request data;
/// - `sum`: this PE's number as a big-endian `i32`, merged by `sum_int`;
/// - `half`: this PE's number plus 0.5 as a big-endian `f64`, merged by
///   `max_double`;
/// - `slow`: no reply yet: it is parked for `release`;
/// - `release`: sends the parked reply, `released:` and this request's
///   data, and answers `ok` (or `empty` if nothing is parked yet);
/// - `silent`: no reply at all;
/// - `who`: this PE's number in decimal, merged by `concat`.
fn register() {
    ccs::register_handler("echo", |m: Message| {
        let mut r = format!("pe{}:", my_pe()).into_bytes();
        r.extend_from_slice(m.payload());
        ccs::send_reply(&r);
    });
    ccs::register_handler("sum", |_m: Message| {
        ccs::send_reply(&(my_pe() as i32).to_be_bytes())
    });
    ccs::set_merge_fn("sum", ccs::merge::sum_int());
    ccs::register_handler("half", |_m: Message| {
        ccs::send_reply(&(my_pe() as f64 + 0.5).to_be_bytes())
    });
    ccs::set_merge_fn("half", ccs::merge::max_double());
    ccs::register_handler("slow", |_m: Message| {
        *PARKED.lock().unwrap() = Some(ccs::delay_reply());
    });
    ccs::register_handler("release", |m: Message| {
        let parked = PARKED.lock().unwrap().take();
        match parked {
            Some(d) => {
                d.send(&[b"released:", m.payload()].concat());
                ccs::send_reply(b"ok");
            }
            None => ccs::send_reply(b"empty"),
        }
    });
    ccs::register_handler("silent", |_m: Message| ccs::no_reply());
    ccs::register_handler("who", |_m: Message| {
        ccs::send_reply(my_pe().to_string().as_bytes())
    });
    ccs::set_merge_fn("who", ccs::merge::concat());
}

fn int(v: i32) -> Vec<u8> {
    v.to_be_bytes().to_vec()
}

fn double(v: f64) -> Vec<u8> {
    v.to_be_bytes().to_vec()
}

/// How long any client waits for anything.
const WAIT: Duration = Duration::from_secs(30);

fn options() -> ClientOptions {
    ClientOptions {
        connect_timeout: Some(WAIT),
        io_timeout: Some(WAIT),
        ..ClientOptions::default()
    }
}

/// Sends `release` (from a client of its own) until a parked reply was
/// there to release.
fn release(addr: SocketAddr, data: &[u8]) {
    let mut other = CcsClient::connect_with(addr, None, options()).unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        other.send_request("release", 1, data).unwrap();
        match other.recv_response(Some(WAIT)).unwrap().as_slice() {
            b"ok" => return,
            b"empty" if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            other => panic!("release answered {other:?}"),
        }
    }
}

#[test]
fn the_rust_client_against_the_real_server() {
    let _serial = serial();
    ccs_job::with_server(&JOB, 120, register, |addr| {
        let mut job = CcsClient::connect_with(addr, None, options()).unwrap();
        assert_eq!((job.num_nodes(), job.num_pes()), (2, 4));
        assert_eq!(job.node_sizes(), [2, 2]);
        assert_eq!(
            (0..3).map(|n| job.node_first(n)).collect::<Vec<_>>(),
            [Some(0), Some(2), None]
        );
        assert_eq!(job.node_size(1), Some(2));

        let mut call = |handler: &str, pe: u32, data: &[u8]| {
            job.send_request(handler, pe, data).unwrap();
            job.recv_response(Some(WAIT)).unwrap()
        };
        assert_eq!(call("echo", 3, b"hello"), b"pe3:hello");
        assert_eq!(call("echo", 0, b""), b"pe0:");
        let binary: Vec<u8> = (0..=255).collect();
        assert_eq!(call("echo", 2, &binary), [&b"pe2:"[..], &binary].concat());
        // An unknown handler is answered empty.
        assert_eq!(call("nosuch", 1, b"x"), b"");

        // Broadcast and multicast, merged.
        job.send_broadcast("sum", b"").unwrap();
        assert_eq!(job.recv_response(Some(WAIT)).unwrap(), int(6));
        job.send_broadcast("half", b"").unwrap();
        assert_eq!(job.recv_response(Some(WAIT)).unwrap(), double(3.5));
        job.send_multicast("sum", &[1, 3], b"").unwrap();
        assert_eq!(job.recv_response(Some(WAIT)).unwrap(), int(4));
        job.send_multicast("half", &[2, 0], b"").unwrap();
        assert_eq!(job.recv_response(Some(WAIT)).unwrap(), double(2.5));
        // A multicast of one PE goes as a request to that PE.
        job.send_multicast("sum", &[3], b"").unwrap();
        assert_eq!(job.recv_response(Some(WAIT)).unwrap(), int(3));

        // A reply that takes its time: the receive times out and the
        // request stays pending; probing says nothing has come; once it is
        // released, probing sees it and a receive that does not wait
        // takes it.
        job.send_request("slow", 2, b"").unwrap();
        let early = job.recv_response(Some(Duration::from_millis(200)));
        assert!(matches!(early, Err(CcsError::Timeout { .. })), "{early:?}");
        assert!(job.reply_pending());
        assert!(!job.probe().unwrap());
        release(addr, b"rust");
        let deadline = Instant::now() + WAIT;
        while !job.probe().unwrap() {
            assert!(Instant::now() < deadline, "the released reply never came");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(
            job.recv_response(Some(Duration::ZERO)).unwrap(),
            b"released:rust"
        );
        assert!(!job.reply_pending());

        // A reply too long for the buffer stays pending, and is taken whole.
        job.send_request("echo", 1, b"0123456789").unwrap();
        let mut small = [0u8; 4];
        let r = job.recv_response_into(&mut small, Some(WAIT));
        assert!(
            matches!(
                r,
                Err(CcsError::BufferTooSmall {
                    len: 14,
                    capacity: 4,
                    ..
                })
            ),
            "{r:?}"
        );
        let mut big = [0u8; 64];
        let n = job.recv_response_into(&mut big, Some(WAIT)).unwrap();
        assert_eq!(&big[..n], b"pe1:0123456789");

        // No reply at all.
        job.send_request("silent", 0, b"").unwrap();
        let r = job.recv_response(Some(WAIT));
        assert!(matches!(r, Err(CcsError::NoReply { .. })), "{r:?}");

        // A PE the job does not have is caught before anything is sent.
        let r = job.send_request("echo", 4, b"");
        assert!(
            matches!(
                r,
                Err(CcsError::BadPe {
                    pe: 4,
                    num_pes: 4,
                    ..
                })
            ),
            "{r:?}"
        );
        job.close();
    });
}

/// `cargo build -p converse-ccs --bin ccs` into this test's target
/// directory and profile (see the top comment); returns the binary.
fn build_ccs_tool() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // <target>/<profile>/deps/ccs_clients-<hash>
    let profile_dir = exe.parent().and_then(Path::parent).unwrap();
    let target_dir = profile_dir.parent().unwrap();
    let cargo = std::env::var_os("CARGO")
        .or_else(|| option_env!("CARGO").map(Into::into))
        .unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .args(["build", "--quiet", "-p", "converse-ccs", "--bin", "ccs"])
        .arg("--target-dir")
        .arg(target_dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => {}
        Some("release") => {
            build.arg("--release");
        }
        Some(other) => {
            build.args(["--profile", other]);
        }
        None => panic!("no profile directory above {}", exe.display()),
    }
    let status = build
        .status()
        .expect("run cargo to build the ccs tool (set CARGO to cargo's path)");
    assert!(status.success(), "building the ccs tool failed: {status}");
    let tool = profile_dir.join(format!("ccs{}", std::env::consts::EXE_SUFFIX));
    assert!(tool.is_file(), "no {} after building it", tool.display());
    tool
}

/// Runs `program` with `args`, `stdin` on its standard input.
fn run(program: &mut Command, stdin: &[u8]) -> Output {
    use std::io::Write;
    let mut child = program
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {program:?}: {e}"));
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

/// One command-line request and what it must give: exit status and the
/// exact bytes on standard output.
struct CliCase {
    args: Vec<String>,
    stdin: &'static [u8],
    status: i32,
    stdout: Vec<u8>,
}

/// The same requests for both tools (they take the same options);
/// `no_reply` is the tool's exit status when the server closes without a
/// reply.
fn cli_cases(addr: SocketAddr, no_reply: i32) -> Vec<CliCase> {
    let case = |args: &[&str], stdin: &'static [u8], status: i32, stdout: &[u8]| {
        let mut all = vec![addr.to_string()];
        all.extend(args.iter().map(|a| a.to_string()));
        CliCase {
            args: all,
            stdin,
            status,
            stdout: stdout.to_vec(),
        }
    };
    vec![
        case(&["ccs_getinfo"], b"", 0, &GETINFO),
        case(&["echo"], b"", 0, b"pe0:"),
        case(
            &["echo", "--pe", "3", "--data", "hello"],
            b"",
            0,
            b"pe3:hello",
        ),
        case(
            &["echo", "--pe", "1", "--data", "-"],
            b"\0\xffbin\n",
            0,
            b"pe1:\0\xffbin\n",
        ),
        case(&["sum", "--all"], b"", 0, &int(6)),
        case(&["half", "--all"], b"", 0, &double(3.5)),
        case(&["sum", "--pes", "1,3"], b"", 0, &int(4)),
        case(
            &["half", "--pes", "2,0", "--timeout", "30"],
            b"",
            0,
            &double(2.5),
        ),
        case(&["silent", "--pe", "2"], b"", no_reply, b""),
    ]
}

fn check_cli(tool: &str, mut command: impl FnMut() -> Command, cases: &[CliCase]) {
    for c in cases {
        let out = run(command().args(&c.args), c.stdin);
        assert_eq!(
            (out.status.code(), out.stdout.as_slice()),
            (Some(c.status), c.stdout.as_slice()),
            "{tool} {:?}; stderr: {}",
            c.args,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn the_ccs_tool_against_the_real_server() {
    let _serial = serial();
    let tool = build_ccs_tool();
    ccs_job::with_server(&JOB, 120, register, move |addr| {
        check_cli("ccs", || Command::new(&tool), &cli_cases(addr, 3));
        // A PE the job does not have: an error, told.
        let out = run(
            Command::new(&tool).args([&addr.to_string(), "echo", "--pe", "4"]),
            b"",
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("PE 4 is out of range"), "{stderr}");
    });
}

/// Whether `python3` is there and new enough for the client (3.11); if
/// not, says so on stderr.
fn python_available() -> bool {
    let probe = Command::new("python3")
        .args([
            "-c",
            "import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)",
        ])
        .output();
    match probe {
        Ok(out) if out.status.success() => true,
        Ok(_) => {
            eprintln!("SKIPPED: python3 is older than 3.11, which python/converse_ccs.py needs");
            false
        }
        Err(e) => {
            eprintln!("SKIPPED: no python3 to run python/converse_ccs.py with ({e})");
            false
        }
    }
}

/// The repository's `python/` directory.
fn python_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python")
}

/// Drives the Python library; prints one `name value` line per result,
/// replies in hex.
const PYTHON_LIBRARY_SCRIPT: &str = r#"
import sys, time
sys.path.insert(0, sys.argv[1])
from converse_ccs import CcsClient, CcsNoReply

host, port = sys.argv[2], int(sys.argv[3])
def out(name, value):
    print(name, value.hex() if isinstance(value, bytes) else value)

with CcsClient(host, port, timeout=30) as c:
    out("layout", " ".join(str(v) for v in
        (c.num_nodes(), c.num_pes(), c.node_first(0), c.node_first(1), c.node_size(0), c.node_size(1))))
    out("echo", c.call("echo", 3, b"hello"))
    out("empty", c.call("echo", 0))
    out("nosuch", c.call("nosuch", 1, b"x"))
    c.send_broadcast("sum"); out("bcast_sum", c.recv_response())
    c.send_broadcast("half"); out("bcast_half", c.recv_response())
    c.send_multicast("sum", [1, 3]); out("mcast_sum", c.recv_response())
    c.send_multicast("half", [2, 0]); out("mcast_half", c.recv_response())
    c.send_request("slow", 2)
    try:
        c.recv_response(timeout=0.2)
        out("timeout", "no")
    except TimeoutError:
        out("timeout", "yes")
    out("pending", c.pending)
    out("probe_before", c.probe())
    with CcsClient(host, port, timeout=30) as other:
        deadline = time.monotonic() + 30
        while (r := other.call("release", 1, b"python")) == b"empty" and time.monotonic() < deadline:
            time.sleep(0.01)
        out("release", r)
    deadline = time.monotonic() + 30
    while not c.probe() and time.monotonic() < deadline:
        time.sleep(0.005)
    out("delayed", c.recv_response(timeout=0))
    try:
        c.call("silent", 2)
        out("silent", "replied")
    except CcsNoReply:
        out("silent", "noreply")
"#;

#[test]
fn the_python_client_against_the_real_server() {
    let _serial = serial();
    if !python_available() {
        return;
    }
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let expected = [
        "layout 2 4 0 2 2 2".to_string(),
        format!("echo {}", hex(b"pe3:hello")),
        format!("empty {}", hex(b"pe0:")),
        "nosuch ".to_string(),
        format!("bcast_sum {}", hex(&int(6))),
        format!("bcast_half {}", hex(&double(3.5))),
        format!("mcast_sum {}", hex(&int(4))),
        format!("mcast_half {}", hex(&double(2.5))),
        "timeout yes".to_string(),
        "pending True".to_string(),
        "probe_before False".to_string(),
        format!("release {}", hex(b"ok")),
        format!("delayed {}", hex(b"released:python")),
        "silent noreply".to_string(),
    ];
    let out = ccs_job::with_server(&JOB, 120, register, |addr| {
        run(
            Command::new("python3")
                .args(["-c", PYTHON_LIBRARY_SCRIPT])
                .arg(python_dir())
                .arg(addr.ip().to_string())
                .arg(addr.port().to_string()),
            b"",
        )
    });
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the Python client failed: {}\nstdout:\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Vec<&str> = stdout.lines().collect();
    assert_eq!(got, expected);
}

#[test]
fn the_python_tool_against_the_real_server() {
    let _serial = serial();
    if !python_available() {
        return;
    }
    let script = python_dir().join("converse_ccs.py");
    ccs_job::with_server(&JOB, 120, register, move |addr| {
        let mut cases = cli_cases(addr, 4);
        // Its own PE-list syntax: ranges.
        let mut range = cli_cases(addr, 4).remove(6);
        range.args[3] = "0-3".into();
        range.stdout = int(6);
        cases.push(range);
        check_cli(
            "converse_ccs.py",
            || {
                let mut c = Command::new("python3");
                c.arg(&script);
                c
            },
            &cases,
        );
    });
}

/// `ccs::merge` says a merge gets the replies "in the order of the
/// request's PE list (PE order for a broadcast)", whatever order they
/// arrive in: each reply carries its PE's list position.
#[test]
fn concat_merges_keep_the_order_of_the_pe_list() {
    let _serial = serial();
    let seen = ccs_job::with_server(&JOB, 120, register, |addr| {
        let mut job = CcsClient::connect_with(addr, None, options()).unwrap();
        let mut seen = Vec::new();
        for _ in 0..100 {
            job.send_broadcast("who", b"").unwrap();
            seen.push(job.recv_response(Some(WAIT)).unwrap());
            job.send_multicast("who", &[3, 1, 2], b"").unwrap();
            seen.push(job.recv_response(Some(WAIT)).unwrap());
        }
        seen
    });
    let wrong: Vec<String> = seen
        .chunks(2)
        .filter(|pair| pair[0] != b"0123" || pair[1] != b"312")
        .map(|pair| {
            format!(
                "{}/{}",
                String::from_utf8_lossy(&pair[0]),
                String::from_utf8_lossy(&pair[1])
            )
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "{} of 100 broadcast/multicast pairs out of PE-list order (want 0123/312): {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(10)]
    );
}
