//! The CCS server of an in-process job, spoken to in raw bytes by a client
//! thread: built-ins `ccs_getinfo`, `perf_monitor` and `ccs_killport`,
//! requests to one PE, broadcast and multicast replies merged (down the
//! 4-ary tree), delayed replies sent from another PE, empty and absent
//! replies, the request context, every malformed request answered or
//! closed without stopping the server, a stalled client, the bound on
//! buffered requests; and authentication (handshake, authenticated
//! requests, wrong key, replayed salt, wrong level, the acceptance policy,
//! an auth file without keys refused); `ccs_killport` registrations kept
//! once each, bounded in number, and told within a bounded time however
//! many never answer.
use crate::ccs_job;
use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use ccs_wire::{Dest, encode_request};
use converse::{Converse, Message, StartError, ccs, my_pe};

/// What one connection got back: the bytes the server wrote before
/// closing.
fn exchange(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).expect("connect to the CCS server");
    s.write_all(request).expect("send the request");
    // Half-closed: a request cut short ends here, as if the client died.
    s.shutdown(std::net::Shutdown::Write).expect("half-close");
    let mut out = Vec::new();
    // The server closes once it has answered (or refused).
    let _ = s.read_to_end(&mut out);
    out
}

/// The reply data of a well-formed reply: a 4-byte big-endian length, then
/// that many bytes.
fn reply_data(raw: &[u8]) -> Vec<u8> {
    assert!(
        raw.len() >= 4,
        "a reply starts with its length: got {raw:?}"
    );
    let len = u32::from_be_bytes(raw[..4].try_into().unwrap()) as usize;
    assert_eq!(raw.len(), 4 + len, "the length says {len}: {raw:?}");
    raw[4..].to_vec()
}

fn call(addr: SocketAddr, handler: &str, dest: Dest, data: &[u8]) -> Vec<u8> {
    reply_data(&exchange(
        addr,
        &encode_request(handler, &dest, data).unwrap(),
    ))
}

fn int(v: i32) -> Vec<u8> {
    v.to_be_bytes().to_vec()
}

/// Results the client thread found, checked after the job ended.
type Checks = Arc<Mutex<Vec<(String, bool)>>>;

/// A `perf_monitor` reply for `pes` PEs: `perf`, then busy percentage and
/// queue length per PE, then a NUL.
fn perf_reply_ok(reply: &[u8], pes: usize) -> bool {
    let Some(text) = reply
        .strip_suffix(&[0])
        .and_then(|t| t.strip_prefix(b"perf"))
    else {
        return false;
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return false;
    };
    let numbers: Vec<u64> = text
        .split(' ')
        .skip(1)
        .filter_map(|w| w.parse().ok())
        .collect();
    text.starts_with(' ')
        && numbers.len() == 2 * pes
        && text.split(' ').count() == 2 * pes + 1
        && numbers.chunks(2).all(|c| c[0] <= 100)
}

/// Opens a connection that sends `bytes` and then holds, saying nothing.
fn hold(addr: SocketAddr, bytes: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.write_all(bytes).expect("send");
    s
}

/// True if the server closes `s` (within 20 s) without writing a byte.
fn closed_silently(s: TcpStream) -> bool {
    closed_within(s, Duration::from_secs(20))
}

/// True if the server closes `s` within `limit` without writing a byte.
fn closed_within(mut s: TcpStream, limit: Duration) -> bool {
    s.set_read_timeout(Some(limit)).unwrap();
    let mut b = [0u8; 1];
    match s.read(&mut b) {
        Ok(0) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        Ok(_) => false,
    }
}

fn client(addr: SocketAddr, checks: Checks, kill_port: u16) {
    let check = |what: &str, ok: bool| checks.lock().unwrap().push((what.to_string(), ok));

    // The layout, in the exact bytes: 2 nodes of 2 PEs. The request is
    // written byte by byte here, not by any encoder.
    let mut getinfo = vec![0, 0, 0, 0, 0, 0, 0, 0];
    let mut name = [0u8; 32];
    name[..11].copy_from_slice(b"ccs_getinfo");
    getinfo.extend_from_slice(&name);
    let raw = exchange(addr, &getinfo);
    check(
        "getinfo bytes",
        raw == [0, 0, 0, 16, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2],
    );

    check(
        "echo on PE 3",
        call(addr, "echo", Dest::Pe(3), b"hello") == b"pe3:hello",
    );
    check(
        "broadcast sum of PE numbers (the tree is two levels deep)",
        call(addr, "sum", Dest::Broadcast, b"") == int(15),
    );
    check(
        "multicast sum over PEs 1 and 3",
        call(addr, "sum", Dest::Multicast(vec![1, 3]), b"") == int(4),
    );
    check(
        "multicast to all six in another order",
        call(addr, "sum", Dest::Multicast(vec![5, 3, 1, 0, 2, 4]), b"") == int(15),
    );
    // Concatenated in list order, whatever order the replies came in.
    check(
        "each PE of a multicast runs the handler once, merged in list order",
        call(addr, "count", Dest::Multicast(vec![4, 0, 5, 2, 1]), b"") == b"<4><0><5><2><1>",
    );
    // The first perf_monitor starts the samplers; each reply follows a
    // full sample.
    for round in 0..2 {
        let perf = call(addr, "perf_monitor", Dest::Pe(0), b"");
        check(
            &format!(
                "perf_monitor reply {round}: {:?}",
                String::from_utf8_lossy(&perf)
            ),
            perf_reply_ok(&perf, 6),
        );
    }
    // PE 5 is busy in a handler for 2.5 s: the sample that ends that time
    // (the next full one) shows it mostly busy.
    let spinner = std::thread::spawn(move || call(addr, "spin", Dest::Pe(5), b""));
    std::thread::sleep(Duration::from_millis(300));
    let perf = call(addr, "perf_monitor", Dest::Pe(0), b"");
    let busy5 = String::from_utf8_lossy(&perf)
        .trim_end_matches('\0')
        .split(' ')
        .nth(11)
        .and_then(|w| w.parse::<u64>().ok());
    check(
        &format!(
            "perf_monitor shows PE 5 busy: {:?}",
            String::from_utf8_lossy(&perf)
        ),
        perf_reply_ok(&perf, 6) && busy5.is_some_and(|b| b >= 50),
    );
    check(
        "the busy handler replied",
        spinner.join().unwrap() == b"done",
    );
    check(
        "ccs_killport answered empty",
        call(
            addr,
            "ccs_killport",
            Dest::Pe(0),
            &u32::from(kill_port).to_be_bytes(),
        )
        .is_empty(),
    );
    check(
        "delayed reply sent by PE 2",
        call(addr, "later", Dest::Pe(1), b"") == b"from pe2",
    );
    check(
        "a handler that returns without replying answers empty",
        call(addr, "quiet", Dest::Pe(2), b"").is_empty(),
    );
    // 4 MiB: more than the socket takes at once, so the PE's own write
    // stops and the server thread writes the rest, while this client
    // waits before reading.
    let mut slow = TcpStream::connect(addr).expect("connect");
    slow.write_all(&encode_request("big", &Dest::Pe(3), b"").unwrap())
        .expect("send");
    std::thread::sleep(Duration::from_millis(300));
    let mut raw = Vec::new();
    slow.read_to_end(&mut raw).expect("read the big reply");
    check(
        "a reply larger than the socket takes at once arrives whole",
        reply_data(&raw) == big_reply(),
    );
    check(
        "no_reply closes without a byte",
        exchange(addr, &encode_request("silent", &Dest::Pe(0), b"").unwrap()).is_empty(),
    );
    let who = call(addr, "who", Dest::Pe(1), b"");
    check(
        "the request context inside the handler",
        who.starts_with(b"remote 127.0.0.1:"),
    );

    // Wrong requests: answered empty (known to the protocol) or closed.
    check(
        "unknown handler answered empty",
        call(addr, "nosuch", Dest::Pe(0), b"").is_empty(),
    );
    check(
        "a PE that does not exist answered empty",
        call(addr, "echo", Dest::Pe(99), b"x").is_empty(),
    );
    check(
        "a multicast naming a PE that does not exist answered empty",
        call(addr, "sum", Dest::Multicast(vec![0, 6]), b"").is_empty(),
    );
    check(
        "a broadcast without a merge function answered empty",
        call(addr, "echo", Dest::Broadcast, b"").is_empty(),
    );
    check(
        "a first byte that is no header closes",
        exchange(addr, b"GET / HTTP/1.0\r\n\r\n").is_empty(),
    );
    let mut unterminated = encode_request("echo", &Dest::Pe(0), b"").unwrap();
    unterminated[8..40].fill(b'e');
    check(
        "an unterminated name closes",
        exchange(addr, &unterminated).is_empty(),
    );
    let mut oversized = encode_request("echo", &Dest::Pe(0), b"").unwrap();
    oversized[0..4].copy_from_slice(&400_000u32.to_be_bytes());
    check(
        "a length above ++server-max-request closes",
        exchange(addr, &oversized).is_empty(),
    );
    let mut multicast_too_big = encode_request("sum", &Dest::Pe(0), b"").unwrap();
    multicast_too_big[4..8].copy_from_slice(&(-1000i32).to_be_bytes());
    check(
        "a multicast to more PEs than the job has closes",
        exchange(addr, &multicast_too_big).is_empty(),
    );
    let request = encode_request("echo", &Dest::Pe(0), b"cut").unwrap();
    check(
        "a request cut short by its client is dropped",
        exchange(addr, &request[..request.len() - 1]).is_empty(),
    );

    // A client that stops in the middle of a header is closed after the
    // stall timeout (0.3 s here).
    let half = encode_request("echo", &Dest::Pe(0), b"").unwrap();
    check(
        "a stalled client is closed",
        closed_silently(hold(addr, &half[..20])),
    );
    // The server took all that and still serves.
    check(
        "still serving",
        call(addr, "echo", Dest::Pe(0), b"again") == b"pe0:again",
    );

    // Ends the job from a handler.
    let _ = exchange(addr, &encode_request("stop", &Dest::Pe(0), b"").unwrap());
}

/// The `big` handler's reply: 4 MiB of a pattern.
fn big_reply() -> Vec<u8> {
    (0..4u32 << 20).map(|i| (i % 251) as u8).collect()
}

#[test]
fn a_job_serves_ccs_requests_and_survives_bad_ones() {
    let checks: Checks = Arc::default();
    let pending_delayed: Arc<Mutex<Option<ccs::DelayedReply>>> = Arc::default();
    let client_thread: Arc<OnceLock<std::thread::JoinHandle<()>>> = Arc::default();
    let outside_handler = Arc::new(Mutex::new(None));
    // Where ccs_killport asks for the job's end to be told.
    let kill_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let kill_port = kill_listener.local_addr().unwrap().port();
    let code = {
        let (checks, pending_delayed, client_thread, outside_handler) = (
            checks.clone(),
            pending_delayed.clone(),
            client_thread.clone(),
            outside_handler.clone(),
        );
        Converse::new()
            .args([
                "prog",
                "+p",
                "6",
                "++ppn",
                "2",
                "++server",
                "++server-max-request",
                "300000",
                "++server-stall-timeout",
                "0.3",
            ])
            .run(move |_| {
                ccs::register_handler("echo", |m: Message| {
                    let mut r = format!("pe{}:", my_pe()).into_bytes();
                    r.extend_from_slice(m.payload());
                    ccs::send_reply(&r);
                });
                ccs::register_handler("sum", |_m: Message| {
                    ccs::send_reply(&(my_pe() as i32).to_be_bytes())
                });
                ccs::set_merge_fn("sum", ccs::merge::sum_int());
                ccs::register_handler("spin", |_m: Message| {
                    let start = std::time::Instant::now();
                    while start.elapsed() < Duration::from_millis(2500) {
                        std::hint::spin_loop();
                    }
                    ccs::send_reply(b"done");
                });
                ccs::register_handler("count", |_m: Message| {
                    ccs::send_reply(format!("<{}>", my_pe()).as_bytes())
                });
                ccs::set_merge_fn("count", ccs::merge::concat());
                ccs::register_handler("quiet", |_m: Message| {});
                ccs::register_handler("big", |_m: Message| ccs::send_reply(&big_reply()));
                ccs::register_handler("silent", |_m: Message| ccs::no_reply());
                ccs::register_handler("who", |_m: Message| {
                    let ((ip, port), remote) =
                        (ccs::caller_id().unwrap(), ccs::is_remote_request());
                    let ip = std::net::Ipv4Addr::from(ip);
                    let text = if remote { "remote" } else { "local" };
                    assert!(ccs::reply_pending(), "a reply is owed");
                    ccs::send_reply(format!("{text} {ip}:{port}").as_bytes());
                    assert!(!ccs::reply_pending(), "answered");
                });
                // The reply leaves from PE 2, after this handler returned.
                let replier = {
                    let pending = pending_delayed.clone();
                    converse::register_handler(move |_m: Message| {
                        let d = pending.lock().unwrap().take().expect("a delayed reply");
                        d.send(format!("from pe{}", my_pe()).as_bytes());
                    })
                };
                {
                    let pending = pending_delayed.clone();
                    ccs::register_handler("later", move |_m: Message| {
                        *pending.lock().unwrap() = Some(ccs::delay_reply());
                        converse::sync_send_and_free(2, Message::new(replier, 0));
                    });
                }
                ccs::register_handler("stop", |_m: Message| {
                    ccs::send_reply(b"bye");
                    converse::exit(0);
                });
                if my_pe() == 0 {
                    // An ordinary message is no remote request.
                    *outside_handler.lock().unwrap() =
                        Some((ccs::is_remote_request(), ccs::caller_id()));
                    assert!(!ccs::reply_pending(), "no reply is owed outside a handler");
                    let addr = ccs::server_address().expect("the server runs in this process");
                    let checks = checks.clone();
                    let _ = client_thread
                        .set(std::thread::spawn(move || client(addr, checks, kill_port)));
                }
            })
            .unwrap()
    };
    assert_eq!(code, 0);
    join_client(client_thread);
    assert_all(&checks.lock().unwrap(), 27);
    assert_eq!(*outside_handler.lock().unwrap(), Some((false, None)));
    // The job told the ccs_killport caller that it ended, before it
    // returned.
    assert_eq!(common::kill_notice(&kill_listener), b"die\n\0");
}

/// Key of level 1 in the auth job's file.
const KEY1: [u8; 16] = *b"0123456789abcdef";

/// The identity handshake in raw bytes: the client id and salt, or how
/// many bytes the server wrote before it closed.
fn handshake(addr: SocketAddr, level: u8, key: &[u8; 16]) -> Result<(u32, u32), usize> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let s1: u32 = 0x5eed_0001;
    let mut first = vec![0x80, 0x00, 0x01, level];
    first.extend_from_slice(&s1.to_be_bytes());
    s.write_all(&first).unwrap();
    let mut s2 = [0u8; 4];
    if s.read_exact(&mut s2).is_err() {
        return Err(0);
    }
    // A refused client may find the connection reset as it writes.
    let _ = s.write_all(&ccs_wire::hash(key, u32::from_be_bytes(s2), None));
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    if rest.len() != 28 {
        return Err(4 + rest.len());
    }
    assert_eq!(
        rest[..20],
        ccs_wire::hash(key, s1, None),
        "the server proved the key"
    );
    let word = |b: &[u8]| u32::from_be_bytes(b.try_into().unwrap());
    Ok((word(&rest[20..24]), word(&rest[24..28])))
}

/// An authenticated request in raw bytes.
fn auth_request(
    level: u8,
    id: u32,
    salt: u32,
    key: &[u8; 16],
    handler: &str,
    data: &[u8],
) -> Vec<u8> {
    let mut header = (data.len() as u32).to_be_bytes().to_vec();
    header.extend_from_slice(&1i32.to_be_bytes()); // PE 1
    let mut name = [0u8; 32];
    name[..handler.len()].copy_from_slice(handler.as_bytes());
    header.extend_from_slice(&name);
    let mut out = vec![0x80, 0x00, 0x00, level];
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&REPLY_SALT.to_be_bytes());
    out.extend_from_slice(&ccs_wire::hash(
        key,
        salt,
        Some(header[..16].try_into().unwrap()),
    ));
    out.extend_from_slice(&header);
    out.extend_from_slice(data);
    out
}

const REPLY_SALT: u32 = 0x0bad_cafe;

/// The data of an authenticated reply, if it starts with the right hash.
fn auth_reply(raw: &[u8], key: &[u8; 16]) -> Option<Vec<u8>> {
    if raw.len() < 20 || raw[..20] != ccs_wire::hash(key, REPLY_SALT, None) {
        return None;
    }
    Some(reply_data(&raw[20..]))
}

fn auth_client(addr: SocketAddr, checks: Checks) {
    let check = |what: &str, ok: bool| checks.lock().unwrap().push((what.to_string(), ok));

    check(
        "plain requests pass while level 0 has no key",
        call(addr, "echo", Dest::Pe(0), b"p") == b"pe0:p",
    );
    let Ok((id, salt)) = handshake(addr, 1, &KEY1) else {
        check("handshake at level 1", false);
        return;
    };
    let first = auth_request(1, id, salt, &KEY1, "echo", b"a1");
    check(
        "an authenticated request is answered after the reply hash",
        auth_reply(&exchange(addr, &first), &KEY1) == Some(b"pe1:a1".to_vec()),
    );
    let second = auth_request(1, id, salt.wrapping_add(1), &KEY1, "echo", b"a2");
    check(
        "the next request uses the next salt",
        auth_reply(&exchange(addr, &second), &KEY1) == Some(b"pe1:a2".to_vec()),
    );
    check(
        "a replayed request is refused without a byte",
        exchange(addr, &first).is_empty(),
    );
    check(
        "a request with a salt from the future is refused",
        exchange(
            addr,
            &auth_request(1, id, salt.wrapping_add(5), &KEY1, "echo", b""),
        )
        .is_empty(),
    );
    check(
        "the replays did not move the salt",
        auth_reply(
            &exchange(
                addr,
                &auth_request(1, id, salt.wrapping_add(2), &KEY1, "nosuch", b""),
            ),
            &KEY1,
        ) == Some(Vec::new()),
    );
    check(
        "a wrong key gets the server's salt and no identity",
        handshake(addr, 1, b"not the real key") == Err(4),
    );
    check(
        "a handshake at a level without a key is refused at once",
        handshake(addr, 3, &KEY1) == Err(0),
    );
    check(
        "a request claiming another level is refused",
        exchange(
            addr,
            &auth_request(2, id, salt.wrapping_add(3), &KEY1, "echo", b""),
        )
        .is_empty(),
    );
    check(
        "a client id never handed out is refused",
        exchange(addr, &auth_request(1, id + 100, salt, &KEY1, "echo", b"")).is_empty(),
    );

    // Four requests of the largest size may be read at once; a fifth is
    // refused at once (the stall timeout, 10 s, would take longer) until
    // they are gone.
    let mut big = encode_request("echo", &Dest::Pe(0), b"").unwrap();
    big[0..4].copy_from_slice(&300_000u32.to_be_bytes());
    let holders: Vec<TcpStream> = (0..4).map(|_| hold(addr, &big)).collect();
    // Let the server read the four headers before the fifth arrives.
    std::thread::sleep(Duration::from_millis(300));
    check(
        "a fifth large request is refused while four are read",
        closed_within(hold(addr, &big), Duration::from_secs(5)),
    );
    drop(holders);
    std::thread::sleep(Duration::from_millis(300));
    let mut full = big.clone();
    full.resize(40 + 300_000, b'z');
    let reply = reply_data(&exchange(addr, &full));
    check(
        "a large request fits once the others are gone",
        reply.len() == 4 + 300_000 && reply.starts_with(b"pe0:zz"),
    );

    let _ = exchange(addr, &encode_request("stop", &Dest::Pe(0), b"").unwrap());
}

/// Level 0 with a key: every request must be authenticated.
fn strict_client(addr: SocketAddr, checks: Checks) {
    let check = |what: &str, ok: bool| checks.lock().unwrap().push((what.to_string(), ok));
    check(
        "a plain request is refused when level 0 has a key",
        exchange(addr, &encode_request("echo", &Dest::Pe(0), b"x").unwrap()).is_empty(),
    );
    let key0 = [0x42; 16];
    match handshake(addr, 0, &key0) {
        Ok((id, salt)) => {
            check(
                "an authenticated request at level 0 passes",
                auth_reply(
                    &exchange(addr, &auth_request(0, id, salt, &key0, "echo", b"s")),
                    &key0,
                ) == Some(b"pe1:s".to_vec()),
            );
            let _ = exchange(
                addr,
                &auth_request(0, id, salt.wrapping_add(1), &key0, "stop", b""),
            );
        }
        Err(n) => check(&format!("handshake at level 0 (got {n} bytes)"), false),
    }
}

/// Runs a 2-PE job with the auth file `keys` whose PE 0 starts `client`;
/// returns the checks.
fn auth_job(keys: &str, extra: &[&str], client: fn(SocketAddr, Checks)) -> Vec<(String, bool)> {
    let dir = std::env::temp_dir().join(format!(
        "converse-ccs-auth-{}-{}",
        std::process::id(),
        keys.len()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("keys");
    std::fs::write(&file, keys).unwrap();
    let checks: Checks = Arc::default();
    let client_thread: Arc<OnceLock<std::thread::JoinHandle<()>>> = Arc::default();
    let mut args = vec![
        "prog".to_string(),
        "+p".into(),
        "2".into(),
        "++server-auth".into(),
        file.display().to_string(),
        // Loopback, even where level 0 has a key (which would listen on
        // every address).
        "++server-bind".into(),
        "127.0.0.1".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let code = {
        let (checks, client_thread) = (checks.clone(), client_thread.clone());
        Converse::new()
            .args(args)
            .run(move |_| {
                ccs::register_handler("echo", |m: Message| {
                    let mut r = format!("pe{}:", my_pe()).into_bytes();
                    r.extend_from_slice(m.payload());
                    ccs::send_reply(&r);
                });
                serve_client(&client_thread, &checks, client);
            })
            .unwrap()
    };
    assert_eq!(code, 0);
    join_client(client_thread);
    let _ = std::fs::remove_dir_all(&dir);
    Arc::try_unwrap(checks).unwrap().into_inner().unwrap()
}

/// Registers the `stop` handler that ends the job, and on PE 0 starts
/// `client` on a thread of its own (kept in `client_thread`).
fn serve_client(
    client_thread: &Arc<OnceLock<std::thread::JoinHandle<()>>>,
    checks: &Checks,
    client: fn(SocketAddr, Checks),
) {
    ccs::register_handler("stop", |_m: Message| {
        ccs::send_reply(b"bye");
        converse::exit(0);
    });
    if my_pe() == 0 {
        let addr = ccs::server_address().expect("the server runs in this process");
        let checks = checks.clone();
        let _ = client_thread.set(std::thread::spawn(move || client(addr, checks)));
    }
}

/// Waits for the client thread PE 0 started (re-raising its panic).
fn join_client(client_thread: Arc<OnceLock<std::thread::JoinHandle<()>>>) {
    if let Some(t) = Arc::try_unwrap(client_thread)
        .ok()
        .and_then(OnceLock::into_inner)
    {
        t.join().unwrap();
    }
}

fn assert_all(checks: &[(String, bool)], count: usize) {
    let failed: Vec<&String> = checks.iter().filter(|c| !c.1).map(|c| &c.0).collect();
    assert!(failed.is_empty(), "failed: {failed:?}");
    assert_eq!(checks.len(), count, "every check ran: {checks:?}");
}

#[test]
fn authentication_admits_the_right_key_only_once_per_salt() {
    let hex: String = KEY1.iter().map(|b| format!("{b:02x}")).collect();
    // Level 2's key is drawn at start-up (OTP) and never told to the client.
    let checks = auth_job(
        &format!("# levels\n1 {hex}\n2 OTP\n"),
        &["++server-max-request", "300000"],
        auth_client,
    );
    assert_all(&checks, 12);
}

#[test]
fn a_key_for_level_0_refuses_plain_requests() {
    let checks = auth_job(&format!("0 {}\n", "42".repeat(16)), &[], strict_client);
    assert_all(&checks, 2);
}

#[test]
fn an_auth_file_without_keys_or_with_a_level_twice_is_refused_at_start_up() {
    for (name, text, says) in [
        ("no-keys", "# keys to come\n\n", "holds no key"),
        (
            "twice",
            "0 OTP\n0 00112233445566778899aabbccddeeff\n",
            "line 2: level 0 has a key already, on line 1",
        ),
    ] {
        let dir = std::env::temp_dir().join(format!("converse-ccs-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("keys");
        std::fs::write(&file, text).unwrap();
        let path = file.display().to_string();
        let err = Converse::new()
            .args(["prog", "+p", "1", "++server-auth", &path])
            .run(|_| panic!("the job must not start"))
            .expect_err("the auth file must be refused");
        let _ = std::fs::remove_dir_all(&dir);
        let text = err.to_string();
        assert!(
            text.contains(&format!("++server-auth {path}")) && text.contains(says),
            "the error names the file and says why: {text}"
        );
        assert!(
            matches!(&err, StartError::Server(ccs::ServerError::AuthFile { path: p, .. }) if *p == path),
            "{err:?}"
        );
    }
}

/// The server's other start-up failures, typed: an unreadable auth file
/// (its I/O error as the source), an address that is none, a port taken.
#[test]
fn server_start_up_failures_are_typed() {
    use std::error::Error as _;
    let start = |flags: &[&str]| {
        let mut args = vec!["prog", "+p", "1"];
        args.extend_from_slice(flags);
        Converse::new()
            .args(args)
            .run(|_| panic!("the job must not start"))
            .expect_err("start-up must fail")
    };
    let missing = std::env::temp_dir().join(format!("converse-ccs-none-{}", std::process::id()));
    let missing = missing.display().to_string();
    let err = start(&["++server-auth", &missing]);
    assert!(
        matches!(
            &err,
            StartError::Server(ccs::ServerError::AuthFileUnreadable { .. })
        ),
        "{err:?}"
    );
    let io = err.source().and_then(|s| s.source());
    let io = io.and_then(|e| e.downcast_ref::<std::io::Error>());
    assert_eq!(
        io.map(|e| e.kind()),
        Some(std::io::ErrorKind::NotFound),
        "{err}"
    );
    assert!(
        err.to_string().contains("cannot read the auth file"),
        "{err}"
    );

    let err = start(&["++server", "++server-bind", "not-an-ip"]);
    assert_eq!(
        err,
        StartError::Server(ccs::ServerError::NotAnAddress("not-an-ip".into()))
    );
    assert_eq!(
        err.to_string(),
        "++server-bind not-an-ip: not an IP address"
    );

    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let err = start(&["++server", "++server-port", &port]);
    match &err {
        StartError::Server(ccs::ServerError::Listen {
            port: p, source, ..
        }) => {
            assert_eq!(p.to_string(), port);
            assert_eq!(source.get().kind(), std::io::ErrorKind::AddrInUse, "{err}");
        }
        other => panic!("a taken port: {other:?}"),
    }
}

/// A loopback listener whose accept queue is full and never drained (its
/// backlog is 0 and one connection fills it): a connect to it stalls, its
/// SYNs dropped, until the client gives up. The filling connection is
/// returned to keep it full.
fn stalled_listener() -> (TcpListener, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    // Listening again only changes the backlog.
    rustix::net::listen(&l, 0).unwrap();
    let filler = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    (l, filler)
}

/// Registers `port` (of this host) with `ccs_killport`: answered empty.
fn register_kill_port(addr: SocketAddr, port: u16) {
    let request =
        encode_request("ccs_killport", &Dest::Pe(0), &u32::from(port).to_be_bytes()).unwrap();
    let reply = ccs_job::exchange(addr, &request).expect("the ccs_killport request");
    assert_eq!(reply, ccs_job::reply_bytes(b""), "answered empty");
}

/// True if a notice is waiting on `listener` (every notice the job sends
/// has connected before the job returns).
fn has_notice(listener: &TcpListener) -> bool {
    listener.set_nonblocking(true).unwrap();
    match listener.accept() {
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => false,
        Err(e) => panic!("accept: {e}"),
    }
}

#[test]
fn kill_ports_are_told_once_each_bounded_in_number_and_in_time() {
    // Registered first, three times, and once more at the end: one notice.
    let first = TcpListener::bind("127.0.0.1:0").unwrap();
    // Registered after the list is full: none.
    let late = TcpListener::bind("127.0.0.1:0").unwrap();
    // 100 addresses that never take a connection, each registered twice:
    // the first 63 fill the list (64 with `first`), the others are beyond
    // the bound.
    let stalled: Vec<(TcpListener, TcpStream)> = (0..100).map(|_| stalled_listener()).collect();
    let stalled_ports: Vec<u16> = stalled
        .iter()
        .map(|(l, _)| l.local_addr().unwrap().port())
        .collect();
    let (first_port, late_port) = (
        first.local_addr().unwrap().port(),
        late.local_addr().unwrap().port(),
    );
    let asked_to_stop = ccs_job::with_server(&["prog", "+p", "2", "++server"], 120, || {}, {
        move |addr| {
            for _ in 0..3 {
                register_kill_port(addr, first_port);
            }
            for &port in &stalled_ports {
                register_kill_port(addr, port);
                register_kill_port(addr, port);
            }
            register_kill_port(addr, late_port);
            register_kill_port(addr, first_port);
            Instant::now()
        }
    });
    // One deadline for every notice (2 s): told one after another, 63
    // stalled ones would hold the end for a minute.
    let took = asked_to_stop.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "the job took {took:?} to end after the stop request"
    );
    assert_eq!(common::kill_notice(&first), b"die\n\0");
    assert!(!has_notice(&first), "one notice per address");
    assert!(
        !has_notice(&late),
        "a registration beyond the bound is ignored"
    );
    drop(stalled);
}

/// A request to one PE whose reply does not come within
/// `++server-reply-timeout` is closed without a byte, the reply that comes
/// later goes nowhere, and the server goes on serving.
#[test]
fn an_unanswered_request_is_closed_at_the_reply_timeout() {
    let checks: Checks = Arc::default();
    let client_thread: Arc<OnceLock<std::thread::JoinHandle<()>>> = Arc::default();
    let held: Arc<Mutex<Option<ccs::DelayedReply>>> = Arc::default();
    let code = {
        let (checks, client_thread) = (checks.clone(), client_thread.clone());
        Converse::new()
            .args(["prog", "+p", "2", "++server", "++server-reply-timeout", "1"])
            .run(move |_| {
                {
                    let held = held.clone();
                    ccs::register_handler("hold", move |_m: Message| {
                        *held.lock().unwrap() = Some(ccs::delay_reply());
                    });
                }
                {
                    let held = held.clone();
                    ccs::register_handler("release", move |_m: Message| {
                        if let Some(late) = held.lock().unwrap().take() {
                            late.send(b"too late");
                        }
                        ccs::send_reply(b"released");
                    });
                }
                serve_client(&client_thread, &checks, late_reply_client);
            })
            .unwrap()
    };
    assert_eq!(code, 0);
    join_client(client_thread);
    assert_all(&checks.lock().unwrap(), 3);
}

/// The client of `an_unanswered_request_is_closed_at_the_reply_timeout`.
fn late_reply_client(addr: SocketAddr, checks: Checks) {
    let check = |what: &str, ok: bool| checks.lock().unwrap().push((what.into(), ok));
    let waiting = hold(addr, &encode_request("hold", &Dest::Pe(1), b"").unwrap());
    let t = Instant::now();
    check(
        "the unanswered request is closed without a byte",
        closed_within(waiting, Duration::from_secs(20)),
    );
    check(
        "not before the reply timeout",
        t.elapsed() >= Duration::from_millis(900),
    );
    check(
        "the late reply goes nowhere, and the server still serves",
        call(addr, "release", Dest::Pe(1), b"") == b"released",
    );
    let _ = exchange(addr, &encode_request("stop", &Dest::Pe(0), b"").unwrap());
}

/// A request that arrives before the PEs have registered its handler (the
/// port is printed before their start functions run) is held until they
/// have, not answered "no such handler": every PE registers `late` only
/// after a pause, while a client sends to it as soon as the server listens.
#[test]
fn a_request_sent_before_its_handler_is_registered_waits_for_it() {
    type Replies = (Vec<u8>, Vec<u8>);
    let client: Arc<OnceLock<std::thread::JoinHandle<Replies>>> = Arc::default();
    let code = {
        let client = client.clone();
        Converse::new()
            .args(["prog", "+p", "2", "++server"])
            .run(move |_| {
                if my_pe() == 0 {
                    let addr = ccs::server_address().expect("the server listens");
                    let _ = client.set(std::thread::spawn(move || {
                        let early = call(addr, "late", Dest::Pe(1), b"x");
                        let done = call(addr, "done", Dest::Pe(0), b"");
                        (early, done)
                    }));
                }
                std::thread::sleep(Duration::from_millis(300));
                ccs::register_handler("late", |m: Message| {
                    let mut reply = b"registered late: ".to_vec();
                    reply.extend_from_slice(m.payload());
                    ccs::send_reply(&reply);
                });
                ccs::register_handler("done", |_m: Message| {
                    ccs::send_reply(b"bye");
                    converse::exit(0);
                });
                // Should `done` come too early as well, the job still ends.
                if my_pe() == 0 {
                    converse::call_fn_after(|_| converse::exit(3), 20_000.0);
                }
            })
            .unwrap()
    };
    let client = Arc::into_inner(client).unwrap().into_inner().unwrap();
    let (early, done) = client.join().unwrap();
    assert_eq!(early, b"registered late: x");
    assert_eq!(done, b"bye");
    assert_eq!(code, 0);
}
