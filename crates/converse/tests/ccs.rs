//! The CCS server of an in-process job, spoken to in raw bytes by a client
//! thread: built-in `ccs_getinfo`, requests to one PE, broadcast and
//! multicast replies merged, delayed replies sent from another PE, empty
//! and absent replies, the request context, and every malformed request
//! answered or closed without stopping the server.
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex, OnceLock};

use ccs_wire::{Dest, encode_request};
use converse::{Converse, Message, ccs, my_pe};

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

fn client(addr: SocketAddr, checks: Checks) {
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
        raw == [0, 0, 0, 12, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2],
    );

    check(
        "echo on PE 3",
        call(addr, "echo", Dest::Pe(3), b"hello") == b"pe3:hello",
    );
    check(
        "broadcast sum of PE numbers",
        call(addr, "sum", Dest::Broadcast, b"") == int(6),
    );
    check(
        "multicast sum over PEs 1 and 3",
        call(addr, "sum", Dest::Multicast(vec![1, 3]), b"") == int(4),
    );
    check(
        "delayed reply sent by PE 2",
        call(addr, "later", Dest::Pe(1), b"") == b"from pe2",
    );
    check(
        "a handler that returns without replying answers empty",
        call(addr, "quiet", Dest::Pe(2), b"").is_empty(),
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
        call(addr, "sum", Dest::Multicast(vec![0, 4]), b"").is_empty(),
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
    oversized[0..4].copy_from_slice(&100_000u32.to_be_bytes());
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

    // The server took all that and still serves.
    check(
        "still serving",
        call(addr, "echo", Dest::Pe(0), b"again") == b"pe0:again",
    );

    // Ends the job from a handler.
    let _ = exchange(addr, &encode_request("stop", &Dest::Pe(0), b"").unwrap());
}

#[test]
fn a_job_serves_ccs_requests_and_survives_bad_ones() {
    let checks: Checks = Arc::default();
    let pending_delayed: Arc<Mutex<Option<ccs::DelayedReply>>> = Arc::default();
    let client_thread: Arc<OnceLock<std::thread::JoinHandle<()>>> = Arc::default();
    let outside_handler = Arc::new(Mutex::new(None));
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
                "4",
                "++ppn",
                "2",
                "++server",
                "++server-max-request",
                "1000",
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
                ccs::register_handler("quiet", |_m: Message| {});
                ccs::register_handler("silent", |_m: Message| ccs::no_reply());
                ccs::register_handler("who", |_m: Message| {
                    let ((ip, port), remote) =
                        (ccs::caller_id().unwrap(), ccs::is_remote_request());
                    let ip = std::net::Ipv4Addr::from(ip);
                    let text = if remote { "remote" } else { "local" };
                    ccs::send_reply(format!("{text} {ip}:{port}").as_bytes());
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
                    let addr = ccs::server_address().expect("the server runs in this process");
                    let checks = checks.clone();
                    let _ = client_thread.set(std::thread::spawn(move || client(addr, checks)));
                }
            })
            .unwrap()
    };
    assert_eq!(code, 0);
    if let Some(t) = Arc::try_unwrap(client_thread)
        .ok()
        .and_then(OnceLock::into_inner)
    {
        t.join().unwrap();
    }
    let checks = checks.lock().unwrap();
    let failed: Vec<&String> = checks.iter().filter(|c| !c.1).map(|c| &c.0).collect();
    assert!(failed.is_empty(), "failed: {failed:?}");
    assert_eq!(checks.len(), 18, "every check ran: {checks:?}");
    assert_eq!(*outside_handler.lock().unwrap(), Some((false, None)));
}
