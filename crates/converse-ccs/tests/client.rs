//! The client against a fake server that checks every byte it receives.
mod fake_server;

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use converse_ccs::{CcsClient, CcsError, ClientOptions, Credentials, DEFAULT_MAX_REPLY_LEN};
use fake_server::{Answer, AuthSeen, Config, Event, FakeServer, Received, protocol_hash};

/// A handler that answers `echo` with the request's data.
fn echo(r: &Received) -> Option<Answer> {
    (r.handler == "echo").then(|| Answer::Reply(r.data.clone()))
}

/// The 40 header bytes as the protocol page lays them out.
fn header(len: u32, dest: i32, name: &str) -> Vec<u8> {
    let mut h = len.to_be_bytes().to_vec();
    h.extend_from_slice(&dest.to_be_bytes());
    h.extend_from_slice(name.as_bytes());
    h.resize(40, 0);
    h
}

/// A gate a handler waits at until the test opens it (or drops it).
fn gate() -> (mpsc::Sender<()>, Arc<Mutex<mpsc::Receiver<()>>>) {
    let (open, wait) = mpsc::channel();
    (open, Arc::new(Mutex::new(wait)))
}

#[test]
fn connecting_learns_the_layout_from_ccs_getinfo_on_pe_0() {
    let server = FakeServer::start(
        Config {
            node_sizes: vec![2, 3, 1],
            ..Config::default()
        },
        |_| None,
    );
    let client = CcsClient::connect(server.addr).unwrap();
    assert_eq!(client.server_addr(), server.addr);
    assert_eq!((client.num_nodes(), client.num_pes()), (3, 6));
    assert_eq!(client.node_sizes(), &[2, 3, 1]);
    let firsts: Vec<_> = (0..4).map(|n| client.node_first(n)).collect();
    assert_eq!(firsts, [Some(0), Some(2), Some(5), None]);
    assert_eq!(client.node_size(1), Some(3));
    assert_eq!(client.node_size(3), None);
    assert_eq!(client.auth_level(), None);
    assert!(!client.reply_pending());
    let Event::Request(getinfo) = &server.events()[0] else {
        panic!("{:?}", server.events());
    };
    assert_eq!(getinfo.raw, header(0, 0, "ccs_getinfo"));
    client.close();
}

#[test]
fn a_request_to_one_pe_is_header_then_data_and_gets_its_reply() {
    let server = FakeServer::start(Config::default(), echo);
    let mut client = CcsClient::connect(server.addr).unwrap();
    client.send_request("echo", 4, b"hello").unwrap();
    assert!(client.reply_pending());
    assert_eq!(client.recv_response(None).unwrap(), b"hello");
    assert!(!client.reply_pending());
    let mut want = header(5, 4, "echo");
    want.extend_from_slice(b"hello");
    assert_eq!(server.requests()[0].raw, want);
}

#[test]
fn broadcast_and_multicast_carry_their_destination_and_pe_list() {
    let server = FakeServer::start(Config::default(), |r| {
        (r.handler == "count")
            .then(|| Answer::Reply(format!("{} {:?}", r.dest, r.pes).into_bytes()))
    });
    let mut client = CcsClient::connect(server.addr).unwrap();

    client.send_broadcast("count", b"xy").unwrap();
    assert_eq!(client.recv_response(None).unwrap(), b"-1 []");
    client.send_multicast("count", &[1, 3, 4], b"z").unwrap();
    assert_eq!(client.recv_response(None).unwrap(), b"-3 [1, 3, 4]");
    // The protocol has no multicast to one PE: it is a request to it.
    client.send_multicast("count", &[2], b"").unwrap();
    assert_eq!(client.recv_response(None).unwrap(), b"2 []");

    let requests = server.requests();
    let mut broadcast = header(2, -1, "count");
    broadcast.extend_from_slice(b"xy");
    assert_eq!(requests[0].raw, broadcast);
    let mut multicast = header(1, -3, "count");
    multicast.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 4]);
    multicast.push(b'z');
    assert_eq!(requests[1].raw, multicast);
    assert_eq!(requests[2].raw, header(0, 2, "count"));
}

#[test]
fn requests_the_job_cannot_take_are_refused_before_sending() {
    let server = FakeServer::plain();
    let mut client = CcsClient::connect(server.addr).unwrap();
    let e = client.send_request("echo", 5, b"").unwrap_err();
    assert!(
        matches!(
            e,
            CcsError::BadPe {
                pe: 5,
                num_pes: 5,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains(&server.addr.to_string()), "{e}");
    let e = client.send_multicast("echo", &[0, 7], b"").unwrap_err();
    assert!(matches!(e, CcsError::BadPe { pe: 7, .. }), "{e:?}");
    let e = client.send_multicast("echo", &[], b"").unwrap_err();
    assert!(matches!(e, CcsError::EmptyMulticast { .. }), "{e:?}");
    let e = client.send_request(&"h".repeat(32), 0, b"").unwrap_err();
    assert!(
        matches!(
            e,
            CcsError::Request {
                source: ccs_wire::WireError::NameTooLong(32),
                ..
            }
        ),
        "{e:?}"
    );
    assert!(client.send_request(&"h".repeat(31), 0, b"").is_ok());
    assert_eq!(client.recv_response(None).unwrap(), b"");
    assert_eq!(
        server.requests().len(),
        1,
        "only the valid request went out"
    );
}

#[test]
fn an_empty_reply_is_empty_and_no_reply_is_an_error() {
    let server = FakeServer::start(Config::default(), |r| {
        (r.handler == "silent").then_some(Answer::NoReply)
    });
    let mut client = CcsClient::connect(server.addr).unwrap();
    // An unknown handler gets an empty reply.
    client.send_request("unknown", 1, b"").unwrap();
    assert_eq!(client.recv_response(None).unwrap(), Vec::<u8>::new());

    client.send_request("silent", 1, b"").unwrap();
    let e = client.recv_response(None).unwrap_err();
    assert!(
        matches!(&e, CcsError::NoReply { handler, .. } if handler == "silent"),
        "{e:?}"
    );
    let text = e.to_string();
    assert!(text.contains(&server.addr.to_string()) && text.contains("silent"));
    // The request is over.
    assert!(matches!(
        client.recv_response(None),
        Err(CcsError::NoRequest { .. })
    ));
    assert!(matches!(client.probe(), Err(CcsError::NoRequest { .. })));
}

#[test]
fn a_timeout_leaves_the_reply_pending_for_a_later_receive() {
    let (open, wait) = gate();
    let server = FakeServer::start(Config::default(), move |r| {
        if r.handler == "slow" {
            let _ = wait.lock().unwrap().recv();
            return Some(Answer::Reply(b"at last".to_vec()));
        }
        None
    });
    let mut client = CcsClient::connect(server.addr).unwrap();
    client.send_request("slow", 0, b"").unwrap();
    let e = client
        .recv_response(Some(Duration::from_millis(20)))
        .unwrap_err();
    assert!(matches!(e, CcsError::Timeout { .. }), "{e:?}");
    assert!(
        e.to_string()
            .contains("timed out waiting for the reply to `slow`")
    );
    assert!(client.reply_pending());
    assert!(!client.probe().unwrap(), "nothing has been sent yet");
    let e = client.recv_response(Some(Duration::ZERO)).unwrap_err();
    assert!(matches!(e, CcsError::Timeout { .. }), "{e:?}");

    open.send(()).unwrap();
    // Probe until the reply is there (bounded: the server replies at once).
    let mut readable = false;
    for _ in 0..2000 {
        readable = client.probe().unwrap();
        if readable {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(readable, "the reply never became readable");
    assert_eq!(client.recv_response(None).unwrap(), b"at last");
}

/// `probe_timeout` waits for the reply (and gives up at its timeout with
/// the reply still pending); `no_response` gives the reply up, ending the
/// request; the next request works as usual.
#[test]
fn probe_timeout_waits_and_no_response_gives_the_reply_up() {
    let (open, wait) = gate();
    let server = FakeServer::start(Config::default(), move |r| match r.handler.as_str() {
        "slow" => {
            let _ = wait.lock().unwrap().recv();
            Some(Answer::Reply(b"late".to_vec()))
        }
        "quick" => Some(Answer::Reply(b"now".to_vec())),
        _ => None,
    });
    let mut client = CcsClient::connect(server.addr).unwrap();
    assert!(matches!(
        client.probe_timeout(Some(Duration::from_millis(1))),
        Err(CcsError::NoRequest { .. })
    ));
    client.send_request("slow", 0, b"").unwrap();
    assert!(
        !client
            .probe_timeout(Some(Duration::from_millis(50)))
            .unwrap()
    );
    assert!(client.reply_pending());
    open.send(()).unwrap();
    assert!(
        client.probe_timeout(None).unwrap(),
        "the reply arrives within the wait"
    );
    assert_eq!(client.recv_response(None).unwrap(), b"late");

    client.send_request("quick", 0, b"").unwrap();
    client.no_response();
    assert!(!client.reply_pending());
    assert!(matches!(
        client.recv_response(None),
        Err(CcsError::NoRequest { .. })
    ));
    client.send_request("quick", 0, b"").unwrap();
    assert_eq!(client.recv_response(None).unwrap(), b"now");
}

#[test]
fn a_reply_that_stops_partway_is_short() {
    let server = FakeServer::start(Config::default(), |r| match r.handler.as_str() {
        "cut-body" => Some(Answer::Raw(vec![0, 0, 0, 10, b'a', b'b', b'c'])),
        "cut-length" => Some(Answer::Raw(vec![0, 0])),
        _ => None,
    });
    let mut client = CcsClient::connect(server.addr).unwrap();
    client.send_request("cut-body", 0, b"").unwrap();
    let e = client.recv_response(None).unwrap_err();
    assert!(
        matches!(
            e,
            CcsError::ShortReply {
                got: 7,
                expected: 14,
                ..
            }
        ),
        "{e:?}"
    );
    client.send_request("cut-length", 0, b"").unwrap();
    let e = client.recv_response(None).unwrap_err();
    assert!(
        matches!(
            e,
            CcsError::ShortReply {
                got: 2,
                expected: 4,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn a_reply_longer_than_the_limit_is_refused_before_it_is_read() {
    let server = FakeServer::start(Config::default(), |r| match r.handler.as_str() {
        // A length field claiming 1 GiB, and nothing behind it.
        "huge" => Some(Answer::Raw((1u32 << 30).to_be_bytes().to_vec())),
        "ten" => Some(Answer::Reply(vec![7; 10])),
        "eleven" => Some(Answer::Reply(vec![7; 11])),
        _ => None,
    });
    let mut client = CcsClient::connect(server.addr).unwrap();
    client.send_request("huge", 0, b"").unwrap();
    let e = client.recv_response(None).unwrap_err();
    assert!(
        matches!(e, CcsError::ReplyTooLong { len, max, .. } if len == 1 << 30 && max == DEFAULT_MAX_REPLY_LEN),
        "{e:?}"
    );

    client.set_options(ClientOptions {
        max_reply_len: 10,
        ..client.options().clone()
    });
    client.send_request("ten", 0, b"").unwrap();
    assert_eq!(client.recv_response(None).unwrap(), [7; 10]);
    client.send_request("eleven", 0, b"").unwrap();
    let e = client.recv_response(None).unwrap_err();
    assert!(
        matches!(
            e,
            CcsError::ReplyTooLong {
                len: 11,
                max: 10,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn a_large_reply_arrives_whole() {
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let expected = big.clone();
    let server = FakeServer::start(Config::default(), move |r| {
        (r.handler == "big").then(|| Answer::Reply(big.clone()))
    });
    let mut client = CcsClient::connect(server.addr).unwrap();
    client.send_request("big", 0, &[1; 100_000]).unwrap();
    assert_eq!(client.recv_response(None).unwrap(), expected);
    assert_eq!(server.requests()[0].data.len(), 100_000);
}

#[test]
fn recv_response_into_fills_the_buffer_or_leaves_a_longer_reply_pending() {
    let server = FakeServer::start(Config::default(), echo);
    let mut client = CcsClient::connect(server.addr).unwrap();
    let mut buf = [0u8; 8];
    client.send_request("echo", 0, b"abc").unwrap();
    assert_eq!(client.recv_response_into(&mut buf, None).unwrap(), 3);
    assert_eq!(&buf[..3], b"abc");

    client.send_request("echo", 0, b"0123456789").unwrap();
    let e = client.recv_response_into(&mut buf, None).unwrap_err();
    assert!(
        matches!(
            e,
            CcsError::BufferTooSmall {
                len: 10,
                capacity: 8,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(client.recv_response(None).unwrap(), b"0123456789");
}

#[test]
fn a_new_request_drops_the_unread_reply_of_the_last() {
    let server = FakeServer::start(Config::default(), |r| {
        (r.handler != "ccs_getinfo").then(|| Answer::Reply(r.handler.clone().into_bytes()))
    });
    let mut client = CcsClient::connect(server.addr).unwrap();
    client.send_request("first", 0, b"").unwrap();
    client.send_request("second", 1, b"").unwrap();
    assert_eq!(client.recv_response(None).unwrap(), b"second");
    // (Whether the server has logged "first" yet is up to its threads.)
    assert!(server.requests().iter().any(|r| r.handler == "second"));
    assert!(!client.reply_pending());
}

#[test]
fn an_unanswered_layout_request_times_out_the_connect() {
    let (_open, wait) = gate();
    let server = FakeServer::start(Config::default(), move |_| {
        // Held until the test ends and drops the gate.
        let _ = wait.lock().unwrap().recv();
        Some(Answer::NoReply)
    });
    let options = ClientOptions {
        connect_timeout: Some(Duration::from_secs(10)),
        io_timeout: Some(Duration::from_millis(20)),
        ..ClientOptions::default()
    };
    let e = CcsClient::connect_with(server.addr, None, options).unwrap_err();
    assert!(matches!(e, CcsError::Timeout { .. }), "{e:?}");
    assert!(e.to_string().contains("ccs_getinfo"), "{e}");
}

#[test]
fn a_garbled_layout_is_refused() {
    for layout in [vec![0, 0, 0, 5], vec![0, 0, 0, 0], vec![1, 2, 3]] {
        let reply = layout.clone();
        let server = FakeServer::start(Config::default(), move |_| {
            Some(Answer::Reply(reply.clone()))
        });
        let e = CcsClient::connect(server.addr).unwrap_err();
        assert!(
            matches!(e, CcsError::BadLayout { len, .. } if len == layout.len()),
            "{layout:?}: {e:?}"
        );
    }
    // PE numbers must fit the header's signed field.
    let server = FakeServer::start(
        Config {
            node_sizes: vec![u32::MAX / 2, 2],
            ..Config::default()
        },
        |_| None,
    );
    let e = CcsClient::connect(server.addr).unwrap_err();
    assert!(matches!(e, CcsError::BadLayout { .. }), "{e:?}");
}

#[test]
fn a_closed_port_is_an_io_error_naming_the_address() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let e = CcsClient::connect(addr).unwrap_err();
    assert!(matches!(e, CcsError::Io { .. }), "{e:?}");
    let text = e.to_string();
    assert!(
        text.contains(&addr.to_string()) && text.contains("connecting"),
        "{text}"
    );
    assert!(matches!(
        CcsClient::connect("no port here"),
        Err(CcsError::Resolve(_))
    ));
}

// Authentication.

const KEY: [u8; 16] = *b"0123456789abcdef";

fn auth_config() -> Config {
    Config {
        key: Some((1, KEY)),
        // Close to the top, so the increments wrap.
        client_salt: u32::MAX - 1,
        ..Config::default()
    }
}

#[test]
fn an_authenticated_client_signs_every_request_with_the_next_salt() {
    let server = FakeServer::start(auth_config(), echo);
    let mut client = CcsClient::connect_with_auth(server.addr, KEY, 1).unwrap();
    assert_eq!(client.auth_level(), Some(1));
    assert_eq!(client.num_pes(), 5);
    client.send_request("echo", 3, b"one").unwrap();
    assert_eq!(client.recv_response(None).unwrap(), b"one");
    client.send_broadcast("echo", b"two").unwrap();
    assert_eq!(client.recv_response(None).unwrap(), b"two");

    let events = server.events();
    assert!(
        matches!(events[0], Event::Identity { level: 1, .. }),
        "{events:?}"
    );
    let seen: Vec<(String, AuthSeen)> = events[1..]
        .iter()
        .map(|e| match e {
            Event::Request(r) => (r.handler.clone(), r.auth.clone().expect("authenticated")),
            other => panic!("{other:?}"),
        })
        .collect();
    let salts: Vec<u32> = seen.iter().map(|(_, a)| a.checked_salt).collect();
    assert_eq!(salts, [u32::MAX - 1, u32::MAX, 0]);
    assert!(seen.iter().all(|(_, a)| a.client_id == 0x0a0b_0c0d));
    assert_eq!(seen[0].0, "ccs_getinfo");

    // The bytes of the first "echo": mark, level, id, reply salt, hash of
    // the header's first 16 bytes with the salt, header, data.
    let r = &server.requests()[0];
    let a = r.auth.as_ref().unwrap();
    let head = header(3, 3, "echo");
    let mut want = vec![0x80, 0, 0, 1, 0x0a, 0x0b, 0x0c, 0x0d];
    want.extend_from_slice(&a.reply_salt.to_be_bytes());
    want.extend_from_slice(&protocol_hash(&KEY, u32::MAX, Some(&head[..16])));
    want.extend_from_slice(&head);
    want.extend_from_slice(b"one");
    assert_eq!(r.raw, want);
    // Fresh reply salts.
    let reply_salts: std::collections::HashSet<u32> =
        seen.iter().map(|(_, a)| a.reply_salt).collect();
    assert_eq!(reply_salts.len(), 3);
}

#[test]
fn a_wrong_key_or_a_level_without_one_is_refused() {
    let server = FakeServer::start(auth_config(), |_| None);
    let mut wrong = KEY;
    wrong[0] ^= 1;
    let e = CcsClient::connect_with_auth(server.addr, wrong, 1).unwrap_err();
    assert!(matches!(e, CcsError::AuthRefused { level: 1, .. }), "{e:?}");
    assert!(e.to_string().contains(&server.addr.to_string()), "{e}");
    assert_eq!(
        server.events(),
        [Event::Refused(
            "the client's hash of the server salt is wrong".into()
        )]
    );

    let e = CcsClient::connect_with_auth(server.addr, KEY, 2).unwrap_err();
    assert!(matches!(e, CcsError::AuthRefused { level: 2, .. }), "{e:?}");
}

#[test]
fn a_server_that_cannot_prove_the_key_is_not_trusted() {
    let server = FakeServer::start(
        Config {
            wrong_identity_hash: true,
            ..auth_config()
        },
        |_| None,
    );
    let e = CcsClient::connect_with_auth(server.addr, KEY, 1).unwrap_err();
    assert!(
        matches!(e, CcsError::ServerHashMismatch { level: 1, .. }),
        "{e:?}"
    );
}

#[test]
fn a_reply_without_the_hash_of_the_reply_salt_is_refused() {
    let server = FakeServer::start(auth_config(), |r| {
        (r.handler == "forged").then(|| {
            let mut bytes = vec![0; 20];
            bytes.extend_from_slice(&[0, 0, 0, 2, b'o', b'k']);
            Answer::Raw(bytes)
        })
    });
    let mut client = CcsClient::connect_with(
        server.addr,
        Some(Credentials { key: KEY, level: 1 }),
        ClientOptions::default(),
    )
    .unwrap();
    client.send_request("forged", 0, b"").unwrap();
    let e = client.recv_response(None).unwrap_err();
    assert!(
        matches!(&e, CcsError::ReplyHashMismatch { handler, .. } if handler == "forged"),
        "{e:?}"
    );
}

#[test]
fn a_server_with_a_level_0_key_closes_plain_requests() {
    let server = FakeServer::start(
        Config {
            key: Some((0, KEY)),
            ..Config::default()
        },
        |_| None,
    );
    let e = CcsClient::connect(server.addr).unwrap_err();
    assert!(
        matches!(&e, CcsError::NoReply { handler, .. } if handler == "ccs_getinfo"),
        "{e:?}"
    );
    // The same server takes the authenticated client.
    let client = CcsClient::connect_with_auth(server.addr, KEY, 0).unwrap();
    assert_eq!(client.num_nodes(), 2);
}
