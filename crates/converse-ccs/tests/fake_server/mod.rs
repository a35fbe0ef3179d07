//! A fake CCS server for the tests, written from `ccs-protocol.md` alone
//! (not through `ccs-wire`, so that the client's bytes are checked by a
//! second reading of the protocol): it checks the bytes each connection
//! sends, logs what it saw, and answers as the test's handler says.
#![allow(dead_code)] // each test file uses a part of it

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use sha1::{Digest, Sha1};

/// How the fake job looks and whom it trusts.
#[derive(Clone)]
pub struct Config {
    /// Each node's PE count, as `ccs_getinfo` tells it.
    pub node_sizes: Vec<u32>,
    /// A security level and its key, if the server has one.
    pub key: Option<(u8, [u8; 16])>,
    /// The salt the server sends in the identity handshake.
    pub server_salt: u32,
    /// The id and the first salt it gives a client.
    pub client_id: u32,
    pub client_salt: u32,
    /// Answers the handshake with a hash that is not of the client's salt
    /// (a server without the client's key).
    pub wrong_identity_hash: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            node_sizes: vec![2, 3],
            key: None,
            server_salt: 0x5152_5354,
            client_id: 0x0a0b_0c0d,
            client_salt: 1000,
            wrong_identity_hash: false,
        }
    }
}

/// The authentication fields of a request that passed the server's check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthSeen {
    pub level: u8,
    pub client_id: u32,
    /// The client salt its hash was checked against.
    pub checked_salt: u32,
    pub reply_salt: u32,
}

/// A whole request, as received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    pub handler: String,
    pub dest: i32,
    pub pes: Vec<u32>,
    pub data: Vec<u8>,
    pub auth: Option<AuthSeen>,
    /// Every byte the connection sent.
    pub raw: Vec<u8>,
}

/// What happened on one connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Request(Received),
    /// A finished identity handshake.
    Identity {
        level: u8,
        client_salt: u32,
    },
    /// The server closed the connection for this reason.
    Refused(String),
}

/// How the server answers a request.
pub enum Answer {
    /// A reply: `[hash of the reply salt, if authenticated][length][bytes]`.
    Reply(Vec<u8>),
    /// Close without sending anything.
    NoReply,
    /// Exactly these bytes, then close.
    Raw(Vec<u8>),
}

/// The test's handler: `None` leaves the request to the built-in
/// behaviour (`ccs_getinfo` answers the layout, any other name an empty
/// reply, as the protocol does for unknown handlers).
pub type Handler = dyn Fn(&Received) -> Option<Answer> + Send + Sync;

pub struct FakeServer {
    pub addr: SocketAddr,
    log: Arc<Mutex<Vec<Event>>>,
    stop: Arc<AtomicBool>,
    accepter: Option<JoinHandle<()>>,
}

impl FakeServer {
    pub fn start(
        config: Config,
        handler: impl Fn(&Received) -> Option<Answer> + Send + Sync + 'static,
    ) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let state = Arc::new(State {
            config,
            handler: Box::new(handler),
            salts: Mutex::new(HashMap::new()),
            log: log.clone(),
        });
        let accept_stop = stop.clone();
        let accepter = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if accept_stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let state = state.clone();
                std::thread::spawn(move || state.serve(stream));
            }
        });
        FakeServer {
            addr,
            log,
            stop,
            accepter: Some(accepter),
        }
    }

    /// A server that only answers `ccs_getinfo` and replies empty to the
    /// rest.
    pub fn plain() -> FakeServer {
        FakeServer::start(Config::default(), |_| None)
    }

    /// Everything logged so far.
    pub fn events(&self) -> Vec<Event> {
        self.log.lock().unwrap().clone()
    }

    /// The requests logged so far, other than `ccs_getinfo`.
    pub fn requests(&self) -> Vec<Received> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Request(r) if r.handler != "ccs_getinfo" => Some(r),
                _ => None,
            })
            .collect()
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accepting thread so it sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(accepter) = self.accepter.take() {
            let _ = accepter.join();
        }
    }
}

struct State {
    config: Config,
    handler: Box<Handler>,
    /// Each client id's current salt.
    salts: Mutex<HashMap<u32, u32>>,
    log: Arc<Mutex<Vec<Event>>>,
}

/// `SHA-1(key ‖ salt ‖ header16 or 16 zeros ‖ 16 zeros)`, from the page.
pub fn protocol_hash(key: &[u8; 16], salt: u32, header16: Option<&[u8]>) -> [u8; 20] {
    let mut input = Vec::with_capacity(52);
    input.extend_from_slice(key);
    input.extend_from_slice(&salt.to_be_bytes());
    input.extend_from_slice(header16.unwrap_or(&[0; 16]));
    input.extend_from_slice(&[0; 16]);
    assert_eq!(input.len(), 52);
    Sha1::digest(&input).into()
}

fn be(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// A connection whose every received byte is kept.
struct Conn {
    stream: TcpStream,
    raw: Vec<u8>,
}

impl Conn {
    /// The next `n` bytes, or `None` if the client closed first.
    fn take(&mut self, n: usize) -> Option<Vec<u8>> {
        let mut b = vec![0; n];
        self.stream.read_exact(&mut b).ok()?;
        self.raw.extend_from_slice(&b);
        Some(b)
    }
}

impl State {
    fn record(&self, e: Event) {
        self.log.lock().unwrap().push(e);
    }

    fn refuse(&self, why: impl Into<String>) {
        self.record(Event::Refused(why.into()));
    }

    fn key_of(&self, level: u8) -> Option<[u8; 16]> {
        self.config
            .key
            .filter(|&(l, _)| l == level)
            .map(|(_, key)| key)
    }

    fn serve(&self, stream: TcpStream) {
        // A client that stops sending must not hold the test up for ever.
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut conn = Conn {
            stream,
            raw: Vec::new(),
        };
        let Some(first) = conn.take(4) else {
            return; // The drop's wake-up connection, or a client gone.
        };
        match first[0] {
            b if b < 0x20 => {
                if self.key_of(0).is_some() {
                    return self.refuse("a plain request while level 0 has a key");
                }
                if let Some(request) = self.read_request(&mut conn, first, None) {
                    self.answer(&mut conn, request, None);
                }
            }
            0x80 => {
                let level = first[3];
                let Some(key) = self.key_of(level) else {
                    return self.refuse(format!("no key for level {level}"));
                };
                match [first[1], first[2]] {
                    [0, 1] => self.identity(&mut conn, level, &key),
                    [0, 0] => self.auth_request(&mut conn, level, &key),
                    op => self.refuse(format!("bad operation {op:?}")),
                }
            }
            b => self.refuse(format!("bad first byte {b:#x}")),
        }
    }

    /// The rest of a request whose first header bytes are `head`.
    fn read_request(
        &self,
        conn: &mut Conn,
        mut header: Vec<u8>,
        auth: Option<AuthSeen>,
    ) -> Option<Received> {
        header.extend(conn.take(40 - header.len())?);
        let len = be(&header[0..4]);
        assert!(len < 1 << 29, "a plain header's first byte is below 0x20");
        let dest = be(&header[4..8]) as i32;
        let name = &header[8..40];
        let nul = name
            .iter()
            .position(|&c| c == 0)
            .expect("a NUL ends the name");
        assert!(
            name[nul..].iter().all(|&c| c == 0),
            "the name is NUL-padded"
        );
        let handler = String::from_utf8(name[..nul].to_vec()).unwrap();
        let count = if dest <= -2 { -dest as usize } else { 0 };
        let pes = conn.take(4 * count)?.chunks(4).map(be).collect();
        let data = conn.take(len as usize)?;
        let received = Received {
            handler,
            dest,
            pes,
            data,
            auth,
            raw: conn.raw.clone(),
        };
        self.record(Event::Request(received.clone()));
        Some(received)
    }

    fn answer(&self, conn: &mut Conn, request: Received, reply_key: Option<[u8; 16]>) {
        let answer = (self.handler)(&request).unwrap_or_else(|| {
            if request.handler == "ccs_getinfo" {
                let sizes = &self.config.node_sizes;
                let mut layout = (sizes.len() as u32).to_be_bytes().to_vec();
                for s in sizes {
                    layout.extend_from_slice(&s.to_be_bytes());
                }
                Answer::Reply(layout)
            } else {
                Answer::Reply(Vec::new())
            }
        });
        let bytes = match answer {
            Answer::NoReply => return,
            Answer::Raw(bytes) => bytes,
            Answer::Reply(data) => {
                let mut bytes = Vec::new();
                if let (Some(key), Some(auth)) = (reply_key, &request.auth) {
                    bytes.extend_from_slice(&protocol_hash(&key, auth.reply_salt, None));
                }
                bytes.extend_from_slice(&(data.len() as u32).to_be_bytes());
                bytes.extend_from_slice(&data);
                bytes
            }
        };
        // The client may have gone (it dropped this request for a new one).
        let _ = conn.stream.write_all(&bytes);
    }

    /// Steps 2-4 of the identity handshake, after `80 00 01 LL`.
    fn identity(&self, conn: &mut Conn, level: u8, key: &[u8; 16]) {
        let Some(s1) = conn.take(4) else { return };
        let s1 = be(&s1);
        let s2 = self.config.server_salt;
        conn.stream.write_all(&s2.to_be_bytes()).unwrap();
        let Some(client_hash) = conn.take(20) else {
            return;
        };
        if client_hash != protocol_hash(key, s2, None) {
            return self.refuse("the client's hash of the server salt is wrong");
        }
        let (id, salt) = (self.config.client_id, self.config.client_salt);
        self.salts.lock().unwrap().insert(id, salt);
        let proof_salt = if self.config.wrong_identity_hash {
            s1 ^ 1
        } else {
            s1
        };
        let mut answer = protocol_hash(key, proof_salt, None).to_vec();
        answer.extend_from_slice(&id.to_be_bytes());
        answer.extend_from_slice(&salt.to_be_bytes());
        // Logged first: the client's next request may follow at once.
        self.record(Event::Identity {
            level,
            client_salt: s1,
        });
        conn.stream.write_all(&answer).unwrap();
    }

    /// An authenticated request, after `80 00 00 LL`.
    fn auth_request(&self, conn: &mut Conn, level: u8, key: &[u8; 16]) {
        let Some(fields) = conn.take(28) else { return };
        let client_id = be(&fields[0..4]);
        let reply_salt = be(&fields[4..8]);
        let client_hash = &fields[8..28];
        let Some(header) = conn.take(40) else { return };
        let Some(salt) = self.salts.lock().unwrap().get(&client_id).copied() else {
            return self.refuse(format!("unknown client id {client_id}"));
        };
        if client_hash != protocol_hash(key, salt, Some(&header[..16])) {
            return self.refuse(format!("request hash does not match salt {salt}"));
        }
        self.salts
            .lock()
            .unwrap()
            .insert(client_id, salt.wrapping_add(1));
        let auth = AuthSeen {
            level,
            client_id,
            checked_salt: salt,
            reply_salt,
        };
        if let Some(request) = self.read_request(conn, header, Some(auth)) {
            self.answer(conn, request, Some(*key));
        }
    }
}
