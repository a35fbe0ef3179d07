//! CCS echo through the real server of an in-process job (`+p 1
//! ++server`), beside a raw TCP echo of the same bytes.
//!
//! `cargo bench -p converse --bench ccs`
//!
//! The protocol makes every request a TCP connection of its own: connect,
//! send the 40-byte header and the data, read the reply, and the server
//! closes. Both figures count that whole exchange:
//!
//! - `ccs_echo_rps`: requests per second, from `CLIENTS` client threads
//!   each making requests one after another;
//! - `ccs_echo_rtt`: one client, one request after another: the mean time
//!   of one exchange.
//!
//! The baseline (`tcp_connect_echo_*`) is a bare `std::net` server thread,
//! started in the same run while the job idles: it accepts a connection,
//! reads the same 44 request bytes, writes the same 8 reply bytes and
//! closes, one connection after another, as the CCS server thread also
//! serves them. The clients are the same code for both. The CCS figure
//! adds what the runtime does per request: the server thread's parse and
//! hand-off to PE 0, the handler run as a message on PE 0, and the reply's
//! way back to the server thread.
mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Instant;

use ccs_wire::{Dest, encode_request};
use converse::{Converse, Message, ccs};

/// Client threads of the requests-per-second figure.
const CLIENTS: usize = 4;
/// The request data: 4 bytes, so a request is 44 bytes and its reply 8.
const DATA: &[u8] = b"ping";

/// One exchange: connect, send, read the reply until the server closes.
fn exchange(addr: SocketAddr, request: &[u8], reply: &mut Vec<u8>) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.write_all(request).expect("send");
    reply.clear();
    s.read_to_end(reply).expect("receive");
}

/// Requests per second from `CLIENTS` threads making `per_client` each.
/// The client threads are named `<name>-client` (for profiles).
fn rps(name: &str, addr: SocketAddr, request: &[u8], expected: &[u8], per_client: u64) -> f64 {
    let start = Arc::new(Barrier::new(CLIENTS + 1));
    let threads: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (start, request, expected) = (start.clone(), request.to_vec(), expected.to_vec());
            let builder = std::thread::Builder::new().name(format!("{name}-client"));
            builder
                .spawn(move || {
                    let mut reply = Vec::new();
                    start.wait();
                    for _ in 0..per_client {
                        exchange(addr, &request, &mut reply);
                        assert_eq!(reply, expected, "the echo's reply");
                    }
                })
                .unwrap()
        })
        .collect();
    start.wait();
    let t0 = Instant::now();
    for t in threads {
        t.join().unwrap();
    }
    (CLIENTS as u64 * per_client) as f64 / t0.elapsed().as_secs_f64()
}

/// Mean seconds of one exchange, one client, `n` in a row.
fn rtt(addr: SocketAddr, request: &[u8], expected: &[u8], n: u64) -> f64 {
    let mut reply = Vec::new();
    let t0 = Instant::now();
    for _ in 0..n {
        exchange(addr, request, &mut reply);
        assert_eq!(reply, expected, "the echo's reply");
    }
    t0.elapsed().as_secs_f64() / n as f64
}

/// The baseline server: one connection at a time, read `request_len`
/// bytes, answer `reply`, close.
struct RawEcho {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RawEcho {
    fn start(request_len: usize, reply: Vec<u8>) -> RawEcho {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the baseline server");
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let builder = std::thread::Builder::new().name("raw-echo".into());
        let thread = builder.spawn(move || {
            let mut request = vec![0u8; request_len];
            for conn in listener.incoming() {
                if stopping.load(Ordering::Acquire) {
                    return;
                }
                let Ok(mut conn) = conn else { continue };
                if conn.read_exact(&mut request).is_ok() {
                    let _ = conn.write_all(&reply);
                }
            }
        });
        let thread = thread.expect("start the baseline server");
        RawEcho {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for RawEcho {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wakes its accept.
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The four figures, each the best of three runs, the CCS and baseline
/// runs interleaved so that drift in the machine hits both alike.
struct Figures {
    ccs_rps: f64,
    raw_rps: f64,
    ccs_rtt: f64,
    raw_rtt: f64,
}

fn measure(ccs_addr: SocketAddr) -> Figures {
    let request = encode_request("echo", &Dest::Pe(0), DATA).unwrap();
    let mut expected = ccs_wire::reply_header(DATA.len()).to_vec();
    expected.extend_from_slice(DATA);
    let raw = RawEcho::start(request.len(), expected.clone());
    let per_client = common::iterations(5_000);
    let sequential = common::iterations(10_000);
    // Warm-up of both paths.
    rtt(ccs_addr, &request, &expected, common::iterations(1_000));
    rtt(raw.addr, &request, &expected, common::iterations(1_000));
    let mut f = Figures {
        ccs_rps: 0.0,
        raw_rps: 0.0,
        ccs_rtt: f64::INFINITY,
        raw_rtt: f64::INFINITY,
    };
    for _ in 0..3 {
        f.raw_rps = f
            .raw_rps
            .max(rps("raw", raw.addr, &request, &expected, per_client));
        f.ccs_rps = f
            .ccs_rps
            .max(rps("ccs", ccs_addr, &request, &expected, per_client));
        f.raw_rtt = f
            .raw_rtt
            .min(rtt(raw.addr, &request, &expected, sequential));
        f.ccs_rtt = f
            .ccs_rtt
            .min(rtt(ccs_addr, &request, &expected, sequential));
    }
    f
}

fn main() {
    let figures: Arc<Mutex<Option<Figures>>> = Arc::default();
    let out = figures.clone();
    let code = Converse::new()
        .args(["ccs_bench", "+p", "1", "++server"])
        .run(move |_| {
            ccs::register_handler("echo", |m: Message| ccs::send_reply(m.payload()));
            ccs::register_handler("stop", |_m: Message| {
                ccs::send_reply(b"");
                converse::exit(0);
            });
            let addr = ccs::server_address().expect("the server runs in this process");
            let out = out.clone();
            std::thread::spawn(move || {
                let f = std::panic::catch_unwind(|| measure(addr))
                    // The panic was told on stderr; the job cannot end the
                    // usual way.
                    .unwrap_or_else(|_| std::process::exit(101));
                *out.lock().unwrap() = Some(f);
                let mut reply = Vec::new();
                exchange(
                    addr,
                    &encode_request("stop", &Dest::Pe(0), b"").unwrap(),
                    &mut reply,
                );
            });
        })
        .expect("runtime flags");
    assert_eq!(code, 0);
    let f = figures.lock().unwrap().take().expect("the figures");
    common::line(
        "ccs_echo_rps",
        f.ccs_rps,
        "req/s",
        "tcp_connect_echo_rps",
        f.raw_rps,
        "req/s",
    );
    common::line(
        "ccs_echo_rtt",
        f.ccs_rtt * 1e6,
        "us",
        "tcp_connect_echo_rtt",
        f.raw_rtt * 1e6,
        "us",
    );
}
