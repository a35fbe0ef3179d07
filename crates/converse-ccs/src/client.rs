//! [`CcsClient`]: a connection to one CCS server (one Converse job).
use std::fmt;
use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use ccs_wire::{
    ClientIdentity, Dest, HASH_LEN, Key, be_u32, decode_getinfo, encode_auth_request,
    encode_identity_request, encode_request, hash,
};

use crate::error::{CcsError, io_error};
use crate::reply::{PendingReply, read_full};

/// The default of [`ClientOptions::max_reply_len`]: 64 MiB.
pub const DEFAULT_MAX_REPLY_LEN: usize = 64 << 20;

/// The handler every Converse job answers with its layout.
const GETINFO: &str = "ccs_getinfo";

/// How patient and how trusting a client is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientOptions {
    /// The longest wait for a TCP connection to be accepted (each request
    /// opens one); `None` leaves it to the system.
    pub connect_timeout: Option<Duration>,
    /// The longest wait for a request to be sent, for each step of the
    /// identity handshake, and for the `ccs_getinfo` reply while
    /// connecting; `None` waits as long as it takes. Replies to your own
    /// requests wait as long as the timeout given to
    /// [`CcsClient::recv_response`].
    pub io_timeout: Option<Duration>,
    /// The longest reply accepted. A reply's length field is checked
    /// against this before anything is allocated for it, so a server (or
    /// anything answering in its place) cannot make the client allocate
    /// more.
    pub max_reply_len: usize,
}

impl Default for ClientOptions {
    fn default() -> ClientOptions {
        ClientOptions {
            connect_timeout: None,
            io_timeout: None,
            max_reply_len: DEFAULT_MAX_REPLY_LEN,
        }
    }
}

/// A security level and its key, for [`CcsClient::connect_with`].
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The level's 16-byte key ([`ccs_wire::parse_key`] reads one from 32
    /// hex digits).
    pub key: Key,
    /// The security level, 0–254.
    pub level: u8,
}

impl fmt::Debug for Credentials {
    // Keys never reach logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Credentials {{ level: {}, key: <hidden> }}", self.level)
    }
}

/// A client of one CCS server: it knows the job's layout and sends
/// requests, one TCP connection each, as the protocol has it.
///
/// # One reply at a time
///
/// After a request, the connection is kept until its reply is taken with
/// [`recv_response`](Self::recv_response) or
/// [`recv_response_into`](Self::recv_response_into). A new request while
/// a reply is still unread *drops* the old connection and its reply, as
/// Charm++'s C client does: requests whose reply does not matter (such as
/// `ccs_killport`) need no receive, and the reply a receive returns is
/// always the one to the latest request. The server sees the dropped
/// connection closed and its reply goes nowhere.
///
/// # Authentication
///
/// A client made with [`connect_with_auth`](Self::connect_with_auth) holds
/// an identity from the server: every request carries the hash of its
/// salt, which both sides increment after each request, and a fresh random
/// reply salt; every reply must start with the hash of that reply salt,
/// or [`CcsError::ReplyHashMismatch`] is returned instead of the reply.
///
/// This is the manual's `CcsServer`, the C client's connection record.
#[doc(alias = "CcsServer")]
pub struct CcsClient {
    /// The address that accepted the first connection; every request goes
    /// there.
    server: SocketAddr,
    options: ClientOptions,
    /// Set by the identity handshake; its salt moves on with each request.
    identity: Option<ClientIdentity>,
    /// Each node's PE count, from `ccs_getinfo`.
    node_sizes: Vec<u32>,
    /// Each node's first PE: the running sum of `node_sizes`.
    node_firsts: Vec<u32>,
    /// Every node's PEs; below 2³¹, so any PE below it fits the header's
    /// signed destination field.
    num_pes: u32,
    /// The latest request, while its reply is unread.
    pending: Option<PendingReply>,
}

impl fmt::Debug for CcsClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CcsClient")
            .field("server", &self.server)
            .field("node_sizes", &self.node_sizes)
            .field("level", &self.identity.as_ref().map(|who| who.level))
            .field("reply_pending", &self.pending.is_some())
            .finish()
    }
}

impl CcsClient {
    /// Connects to the CCS server at `addr` and learns the job's layout
    /// (it sends `ccs_getinfo` to PE 0), with the default
    /// [`ClientOptions`]. Of the addresses `addr` resolves to, the first
    /// that accepts a connection is used from then on.
    #[doc(alias("CcsConnect", "CcsConnectIp"))]
    pub fn connect(addr: impl ToSocketAddrs) -> Result<CcsClient, CcsError> {
        CcsClient::connect_with(addr, None, ClientOptions::default())
    }

    /// As [`connect`](Self::connect), first obtaining an identity from the
    /// server with `key`, the key of security level `level`; every request
    /// and reply is then authenticated. A server without that key refuses
    /// ([`CcsError::AuthRefused`]); one whose answer does not prove it
    /// holds the key is not trusted ([`CcsError::ServerHashMismatch`]).
    #[doc(alias("CcsConnectWithAuth", "CcsConnectIpWithAuth"))]
    pub fn connect_with_auth(
        addr: impl ToSocketAddrs,
        key: Key,
        level: u8,
    ) -> Result<CcsClient, CcsError> {
        CcsClient::connect_with(
            addr,
            Some(Credentials { key, level }),
            ClientOptions::default(),
        )
    }

    /// Connects with the given options, authenticated when `credentials`
    /// are given (see [`connect`](Self::connect) and
    /// [`connect_with_auth`](Self::connect_with_auth)).
    pub fn connect_with(
        addr: impl ToSocketAddrs,
        credentials: Option<Credentials>,
        options: ClientOptions,
    ) -> Result<CcsClient, CcsError> {
        let mut last_error = CcsError::NoAddress;
        let mut first = None;
        for server in addr.to_socket_addrs().map_err(CcsError::Resolve)? {
            match open(server, &options) {
                Ok(stream) => {
                    first = Some((server, stream));
                    break;
                }
                Err(e) => last_error = e,
            }
        }
        let Some((server, stream)) = first else {
            return Err(last_error);
        };
        let mut client = CcsClient {
            server,
            options,
            identity: None,
            node_sizes: Vec::new(),
            node_firsts: Vec::new(),
            num_pes: 0,
            pending: None,
        };
        // The first connection carries the handshake, or else the layout
        // request.
        let getinfo_stream = match credentials {
            Some(credentials) => {
                client.identity = Some(client.handshake(stream, credentials)?);
                None
            }
            None => Some(stream),
        };
        client.send_unchecked(GETINFO, &Dest::Pe(0), &[], getinfo_stream)?;
        let reply = client.recv_before(deadline(client.options.io_timeout))?;
        client.set_layout(&reply)?;
        Ok(client)
    }

    /// The identity handshake on `stream` (`ccs-protocol.md`,
    /// "Authentication").
    fn handshake(
        &self,
        mut stream: TcpStream,
        credentials: Credentials,
    ) -> Result<ClientIdentity, CcsError> {
        let server = self.server;
        let Credentials { key, level } = credentials;
        let deadline = deadline(self.options.io_timeout);
        let refused = CcsError::AuthRefused { server, level };
        // A server that drops the handshake may reset rather than close.
        let read_error = |e: io::Error| match e.kind() {
            io::ErrorKind::ConnectionReset => CcsError::AuthRefused { server, level },
            _ => io_error(server, format!("authenticating at level {level}"), e),
        };
        let write_error = |e| io_error(server, format!("authenticating at level {level}"), e);

        let client_salt = random_salt();
        stream
            .write_all(&encode_identity_request(level, client_salt))
            .map_err(write_error)?;
        let mut server_salt = [0u8; 4];
        if read_full(&mut stream, &mut server_salt, deadline).map_err(read_error)? < 4 {
            return Err(refused);
        }
        stream
            .write_all(&hash(&key, be_u32(&server_salt), None))
            .map_err(write_error)?;
        // hash(key, client salt) ‖ client id ‖ client salt
        let mut answer = [0u8; HASH_LEN + 8];
        match read_full(&mut stream, &mut answer, deadline).map_err(read_error)? {
            0 => return Err(refused),
            n if n < answer.len() => {
                return Err(CcsError::ShortReply {
                    server,
                    handler: "identity handshake".into(),
                    got: n as u64,
                    expected: answer.len() as u64,
                });
            }
            _ => {}
        }
        if answer[..HASH_LEN] != hash(&key, client_salt, None) {
            return Err(CcsError::ServerHashMismatch { server, level });
        }
        Ok(ClientIdentity {
            key,
            level,
            client_id: be_u32(&answer[HASH_LEN..HASH_LEN + 4]),
            salt: be_u32(&answer[HASH_LEN + 4..]),
        })
    }

    /// Keeps the layout in `ccs_getinfo`'s reply.
    fn set_layout(&mut self, reply: &[u8]) -> Result<(), CcsError> {
        let bad = CcsError::BadLayout {
            server: self.server,
            len: reply.len(),
        };
        let Some(sizes) = decode_getinfo(reply) else {
            return Err(bad);
        };
        let mut firsts = Vec::with_capacity(sizes.len());
        let mut total: u64 = 0;
        for &size in &sizes {
            firsts.push(total as u32);
            total += u64::from(size);
            // PEs are sent as signed 32-bit destinations.
            if total > i32::MAX as u64 {
                return Err(bad);
            }
        }
        if sizes.is_empty() {
            return Err(bad);
        }
        self.node_sizes = sizes;
        self.node_firsts = firsts;
        self.num_pes = total as u32;
        Ok(())
    }

    /// The server's address, as connected.
    pub fn server_addr(&self) -> SocketAddr {
        self.server
    }

    /// The options in force.
    pub fn options(&self) -> &ClientOptions {
        &self.options
    }

    /// Replaces the options; they apply from the next operation on.
    pub fn set_options(&mut self, options: ClientOptions) {
        self.options = options;
    }

    /// The security level, if the client is authenticated.
    pub fn auth_level(&self) -> Option<u8> {
        self.identity.as_ref().map(|who| who.level)
    }

    /// The job's number of nodes (Converse's `CmiNumNodes`).
    #[doc(alias = "CcsNumNodes")]
    pub fn num_nodes(&self) -> usize {
        self.node_sizes.len()
    }

    /// The job's number of PEs (Converse's `CmiNumPes`).
    #[doc(alias = "CcsNumPes")]
    pub fn num_pes(&self) -> u32 {
        self.num_pes
    }

    /// The first PE of `node` (Converse's `CmiNodeFirst`), or `None` past
    /// the last node.
    #[doc(alias = "CcsNodeFirst")]
    pub fn node_first(&self, node: usize) -> Option<u32> {
        self.node_firsts.get(node).copied()
    }

    /// The number of PEs of `node` (Converse's `CmiNodeSize`), or `None`
    /// past the last node.
    #[doc(alias = "CcsNodeSize")]
    pub fn node_size(&self, node: usize) -> Option<u32> {
        self.node_sizes.get(node).copied()
    }

    /// Every node's PE count, in node order.
    pub fn node_sizes(&self) -> &[u32] {
        &self.node_sizes
    }

    /// Asks PE `pe` to run the handler registered as `handler` on `data`.
    /// The reply is taken with [`recv_response`](Self::recv_response); an
    /// unread reply to an earlier request is dropped (see the type's
    /// documentation).
    #[doc(alias = "CcsSendRequest")]
    pub fn send_request(&mut self, handler: &str, pe: u32, data: &[u8]) -> Result<(), CcsError> {
        self.check_pe(pe)?;
        self.send_unchecked(handler, &Dest::Pe(pe), data, None)
    }

    /// Asks every PE to run `handler` on `data`; the server merges their
    /// replies with the handler's merge function into one.
    #[doc(alias = "CcsSendBroadcastRequest")]
    pub fn send_broadcast(&mut self, handler: &str, data: &[u8]) -> Result<(), CcsError> {
        self.send_unchecked(handler, &Dest::Broadcast, data, None)
    }

    /// Asks the listed PEs to run `handler` on `data`; the server merges
    /// their replies into one. A list of one PE is sent as a request to
    /// that PE (the protocol has no multicast to one PE), which replies
    /// the same.
    #[doc(alias = "CcsSendMulticastRequest")]
    pub fn send_multicast(
        &mut self,
        handler: &str,
        pes: &[u32],
        data: &[u8],
    ) -> Result<(), CcsError> {
        for &pe in pes {
            self.check_pe(pe)?;
        }
        let dest = match pes {
            [] => {
                return Err(CcsError::EmptyMulticast {
                    server: self.server,
                });
            }
            [pe] => Dest::Pe(*pe),
            _ => Dest::Multicast(pes.to_vec()),
        };
        self.send_unchecked(handler, &dest, data, None)
    }

    fn check_pe(&self, pe: u32) -> Result<(), CcsError> {
        if pe < self.num_pes {
            Ok(())
        } else {
            Err(CcsError::BadPe {
                server: self.server,
                pe,
                num_pes: self.num_pes,
            })
        }
    }

    /// Sends a request on `stream`, or on a new connection, and keeps the
    /// connection for the reply.
    fn send_unchecked(
        &mut self,
        handler: &str,
        dest: &Dest,
        data: &[u8],
        stream: Option<TcpStream>,
    ) -> Result<(), CcsError> {
        let server = self.server;
        let (bytes, expected_hash) = match &self.identity {
            Some(who) => {
                let reply_salt = random_salt();
                let bytes = encode_auth_request(who, reply_salt, handler, dest, data);
                (bytes, Some(hash(&who.key, reply_salt, None)))
            }
            None => (encode_request(handler, dest, data), None),
        };
        let bytes = bytes.map_err(|source| CcsError::Request { server, source })?;
        // An unread reply is dropped here, before the new connection.
        self.pending = None;
        let mut stream = match stream {
            Some(stream) => stream,
            None => open(server, &self.options)?,
        };
        stream
            .write_all(&bytes)
            .map_err(|e| io_error(server, format!("sending the request to `{handler}`"), e))?;
        // The server has the whole request, so it moves its copy of the
        // salt on once the hash checks; so does the client. (Had the write
        // failed partway, the server would have no whole request, and
        // neither side moves.)
        if let Some(who) = &mut self.identity {
            who.salt = who.salt.wrapping_add(1);
        }
        self.pending = Some(PendingReply::new(stream, handler, expected_hash));
        Ok(())
    }

    /// Waits up to `timeout` (`None`: as long as it takes) for the reply
    /// to the latest request and returns it. On
    /// [`CcsError::Timeout`] the reply stays pending and a later call goes
    /// on reading it; any other outcome ends the request. A zero timeout
    /// takes the reply only if all of it has arrived.
    #[doc(alias = "CcsRecvResponseMsg")]
    pub fn recv_response(&mut self, timeout: Option<Duration>) -> Result<Vec<u8>, CcsError> {
        self.recv_before(deadline(timeout))
    }

    /// As [`recv_response`](Self::recv_response), into `buf`; returns the
    /// reply's length. A reply longer than `buf` is not read:
    /// [`CcsError::BufferTooSmall`] tells its length and it stays pending.
    #[doc(alias = "CcsRecvResponse")]
    pub fn recv_response_into(
        &mut self,
        buf: &mut [u8],
        timeout: Option<Duration>,
    ) -> Result<usize, CcsError> {
        let server = self.server;
        let max = self.options.max_reply_len;
        let deadline = deadline(timeout);
        let pending = self
            .pending
            .as_mut()
            .ok_or(CcsError::NoRequest { server })?;
        let result = pending.read_head(server, max, deadline).and_then(|len| {
            if len > buf.len() {
                return Err(CcsError::BufferTooSmall {
                    server,
                    len,
                    capacity: buf.len(),
                });
            }
            let body = pending.read_body(server, deadline)?;
            buf[..len].copy_from_slice(&body);
            Ok(len)
        });
        self.settle(&result);
        result
    }

    fn recv_before(&mut self, deadline: Option<Instant>) -> Result<Vec<u8>, CcsError> {
        let server = self.server;
        let max = self.options.max_reply_len;
        let pending = self
            .pending
            .as_mut()
            .ok_or(CcsError::NoRequest { server })?;
        let result = pending
            .read_head(server, max, deadline)
            .and_then(|_| pending.read_body(server, deadline));
        self.settle(&result);
        result
    }

    /// Ends the request after a receive, unless the reply can still be
    /// taken.
    fn settle<T>(&mut self, result: &Result<T, CcsError>) {
        if !matches!(
            result,
            Err(CcsError::Timeout { .. } | CcsError::BufferTooSmall { .. })
        ) {
            self.pending = None;
        }
    }

    /// Whether the reply to the latest request has begun to arrive (or the
    /// server has closed without one), so that a receive finds something
    /// now. A long reply may still take time to arrive whole.
    #[doc(alias = "CcsProbe")]
    pub fn probe(&self) -> Result<bool, CcsError> {
        let server = self.server;
        self.pending
            .as_ref()
            .ok_or(CcsError::NoRequest { server })?
            .readable(server)
    }

    /// As [`probe`](Self::probe), waiting up to `timeout` for the reply to
    /// begin to arrive (`None`: as long as it takes).
    #[doc(alias = "CcsProbeTimeout")]
    pub fn probe_timeout(&self, timeout: Option<Duration>) -> Result<bool, CcsError> {
        let server = self.server;
        self.pending
            .as_ref()
            .ok_or(CcsError::NoRequest { server })?
            .readable_within(server, timeout)
    }

    /// Gives up the reply to the latest request, closing its connection:
    /// the server's reply, if it sends one, is dropped (`CcsNoResponse`).
    /// Does nothing with no request waiting.
    #[doc(alias = "CcsNoResponse")]
    pub fn no_response(&mut self) {
        self.pending = None;
    }

    /// Whether a request is waiting for its reply to be taken.
    pub fn reply_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// Closes the connection of an unread reply, if any, and the client.
    /// Dropping the client does the same.
    #[doc(alias = "CcsFinalize")]
    pub fn close(self) {}
}

/// A TCP connection to `server`, set up for a request.
fn open(server: SocketAddr, options: &ClientOptions) -> Result<TcpStream, CcsError> {
    let stream = match options.connect_timeout {
        Some(t) => TcpStream::connect_timeout(&server, at_least_a_microsecond(t)),
        None => TcpStream::connect(server),
    }
    .map_err(|e| io_error(server, "connecting", e))?;
    // A request ending in a small segment must not wait for the server's
    // delayed acknowledgement of the ones before.
    stream
        .set_nodelay(true)
        .and_then(|()| stream.set_write_timeout(options.io_timeout.map(at_least_a_microsecond)))
        .map_err(|e| io_error(server, "setting up the connection", e))?;
    Ok(stream)
}

/// The sockets refuse a zero timeout; a zero in the options means "hardly
/// any wait", not "no limit".
fn at_least_a_microsecond(t: Duration) -> Duration {
    t.max(Duration::from_micros(1))
}

/// When a wait of `timeout` from now ends; `None` for no limit (or one
/// too far off to represent).
fn deadline(timeout: Option<Duration>) -> Option<Instant> {
    timeout.and_then(|t| Instant::now().checked_add(t))
}

/// A fresh salt. Salts need to be unpredictable and not to repeat, not to
/// be secret: std's `RandomState` keys come from the operating system's
/// random source (once per thread, then changed on every call), which is
/// enough, and needs no dependency.
fn random_salt() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    hasher.write_u128(now);
    hasher.finish() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn salts_differ_from_call_to_call() {
        let salts: std::collections::HashSet<u32> = (0..64).map(|_| random_salt()).collect();
        // 64 draws of 32 bits: a repeat is a 1-in-10^6 event.
        assert!(salts.len() >= 63, "{salts:?}");
    }

    #[test]
    fn credentials_keep_their_key_out_of_debug_output() {
        let c = Credentials {
            key: [0xab; 16],
            level: 3,
        };
        let text = format!("{c:?}");
        assert!(text.contains("level: 3") && !text.contains("171"), "{text}");
        assert!(!text.to_lowercase().contains("ab, "), "{text}");
    }

    #[test]
    fn deadlines_too_far_off_mean_no_limit() {
        assert_eq!(deadline(Some(Duration::MAX)), None);
        assert_eq!(deadline(None), None);
        assert!(deadline(Some(Duration::from_secs(1))).is_some());
    }
}
