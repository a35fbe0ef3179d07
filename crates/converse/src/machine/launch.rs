//! A process's side of the launcher protocol: how a program started by
//! `convrun` learns its place in the job and reaches the other processes.
//!
//! # The protocol (`convrun` is the other side, `launcher`)
//!
//! `convrun` starts each process with these environment variables:
//!
//! | variable | meaning |
//! |---|---|
//! | `CONVERSE_LAUNCHER` | `HOST:PORT` of the launcher's control socket |
//! | `CONVERSE_NODE` / `CONVERSE_NODES` | this process's number and the job's process count |
//! | `CONVERSE_TOKEN` | the job's random token (hex), checked on every connection |
//! | `CONVERSE_NETMOD` | the network module (`tcp`, `shm`) |
//! | `CONVERSE_HOST` | the host name peers should use to reach this process |
//! | `CONVERSE_TIMEOUT` | seconds start-up may take (`++timeout`) |
//! | `CONVERSE_HOST_PES` | PEs of the job on this host (all processes): more than its cores means idle PEs must not spin |
//!
//! The process then:
//! 1. initializes its network module and gets its business card;
//! 2. connects to the launcher and writes `hello NODE PID CARD\n`;
//! 3. reads `cards CARD0 CARD1 ...\n` (every process's card, in order) once
//!    every process has said hello;
//! 4. connects its VCs to the others (`vc_init`) and waits for theirs;
//! 5. keeps the launcher connection open: a line `abort TEXT` ends the
//!    process (another one failed), and the end of the stream means the
//!    launcher is gone, which ends the process too;
//! 6. before it exits, says how: `end` (its part of the job is done; its
//!    exit code is the one chosen) or `lost` (it ends because another
//!    process failed). A process that says neither failed on its own (it
//!    died, aborted, or left outside the runtime): the launcher reports it
//!    and its exit code becomes the job's.
//!
//! Every step has a deadline (`++timeout`); a failure names the process and
//! what it waited for.
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::topology::Topology;
use crate::net::netmod::NetModule;
use crate::net::network::Network;
use crate::net::shm::ShmModule;
use crate::net::tcp::TcpModule;

/// The module a process runs, for the calls beyond the contract that
/// start-up needs.
enum Module {
    Tcp(Arc<TcpModule>),
    Shm(Arc<ShmModule>),
}

/// Removes an shm segment's name when start-up fails before the peers
/// have all mapped it (after that it is gone already).
struct UnlinkOnError<'a>(&'a Module);

impl Drop for UnlinkOnError<'_> {
    fn drop(&mut self) {
        if let Module::Shm(m) = self.0 {
            m.unlink();
        }
    }
}

/// Removes the shared-memory segments a job with `token` and `nodes`
/// processes may have left (a process killed before its peers had mapped
/// its segment). For the launcher, after the job.
pub fn remove_segments(token: u64, nodes: usize) {
    for node in 0..nodes {
        let _ = rustix::shm::unlink(crate::net::shm::segment_name(token, node).as_str());
    }
}

/// Default start-up deadline (`++timeout`), seconds.
pub const DEFAULT_TIMEOUT_SECS: u64 = 60;

/// The job as the launcher described it to this process.
#[derive(Clone, Debug)]
pub(crate) struct Placement {
    pub launcher: String,
    pub node: usize,
    pub nodes: usize,
    pub token: u64,
    pub netmod: String,
    pub host: String,
    pub timeout: Duration,
    /// PEs of the job on this host, if the launcher said.
    pub host_pes: Option<usize>,
}

/// True once the process is ending on purpose: the launcher's end of stream
/// is then no fault.
static ENDING: AtomicBool = AtomicBool::new(false);

/// The launcher connection, for the lines this process writes after
/// start-up.
static LINK: OnceLock<Mutex<TcpStream>> = OnceLock::new();

fn var(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("{name} is not set (the job was started by convrun?)"))
}

/// The placement `convrun` gave this process, if it started it.
pub(crate) fn placement() -> Result<Option<Placement>, String> {
    let Ok(launcher) = std::env::var("CONVERSE_LAUNCHER") else {
        return Ok(None);
    };
    let num = |name: &str| -> Result<usize, String> {
        var(name)?
            .parse::<usize>()
            .map_err(|_| format!("{name} is not a number"))
    };
    let node = num("CONVERSE_NODE")?;
    let nodes = num("CONVERSE_NODES")?;
    if node >= nodes {
        return Err(format!(
            "CONVERSE_NODE {node} is not below CONVERSE_NODES {nodes}"
        ));
    }
    let token = u64::from_str_radix(&var("CONVERSE_TOKEN")?, 16)
        .map_err(|_| "CONVERSE_TOKEN is not hexadecimal".to_string())?;
    let timeout = match std::env::var("CONVERSE_TIMEOUT") {
        Ok(t) => t
            .parse::<u64>()
            .map_err(|_| "CONVERSE_TIMEOUT is not a number of seconds".to_string())?,
        Err(_) => DEFAULT_TIMEOUT_SECS,
    };
    Ok(Some(Placement {
        launcher,
        node,
        nodes,
        token,
        netmod: std::env::var("CONVERSE_NETMOD").unwrap_or_else(|_| "tcp".into()),
        host: std::env::var("CONVERSE_HOST").unwrap_or_else(|_| "127.0.0.1".into()),
        timeout: Duration::from_secs(timeout),
        host_pes: std::env::var("CONVERSE_HOST_PES")
            .ok()
            .and_then(|v| v.parse().ok()),
    }))
}

/// Joins the job: network module, card exchange through the launcher, VCs.
/// Returns the network, connected to every other process.
pub(crate) fn join(place: &Placement, topo: Topology) -> Result<Network, String> {
    let deadline = Instant::now() + place.timeout;
    let me = place.node;
    let max = crate::net::frame::DEFAULT_MAX_PAYLOAD;
    let (module, kind) = match place.netmod.as_str() {
        "tcp" => {
            // A loopback address is listened on as itself (so a process
            // given 127.0.0.2 is reached there and nowhere else); any other
            // name may stand for several interfaces, so all are.
            let bind: SocketAddr = match place.host.parse::<std::net::IpAddr>() {
                Ok(ip) if ip.is_loopback() => (ip, 0).into(),
                _ if place.host == "localhost" => "127.0.0.1:0".parse().expect("literal address"),
                _ => "0.0.0.0:0".parse().expect("literal address"),
            };
            let tcp = Arc::new(
                TcpModule::init(me, place.nodes, place.token, bind, &place.host, max)
                    .map_err(|e| e.to_string())?,
            );
            (tcp.clone() as Arc<dyn NetModule>, Module::Tcp(tcp))
        }
        "shm" => {
            let shm = Arc::new(
                ShmModule::init(me, place.nodes, place.token, max).map_err(|e| e.to_string())?,
            );
            (shm.clone() as Arc<dyn NetModule>, Module::Shm(shm))
        }
        other => {
            return Err(format!(
                "unknown network module `{other}` (this build has: shm, tcp)"
            ));
        }
    };
    // The segment of a process that fails here must not outlive it.
    let _unlink = UnlinkOnError(&kind);
    let network = Network::new(me, topo, module.clone(), |u| match &kind {
        Module::Tcp(m) => m.set_upcalls(u),
        Module::Shm(m) => m.set_upcalls(u),
    });

    // Hello to the launcher, then every process's card.
    let mut link = connect(&place.launcher, deadline)
        .map_err(|e| format!("cannot reach the launcher at {}: {e}", place.launcher))?;
    writeln!(
        link,
        "hello {me} {} {}",
        std::process::id(),
        module.business_card()
    )
    .map_err(|e| format!("cannot write to the launcher: {e}"))?;
    let mut reader = BufReader::new(
        link.try_clone()
            .map_err(|e| format!("launcher socket: {e}"))?,
    );
    link.set_read_timeout(Some(
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(10)),
    ))
    .map_err(|e| e.to_string())?;
    let mut line = String::new();
    match reader.read_line(&mut line) {
        Ok(0) => return Err("the launcher closed the connection during start-up".into()),
        Ok(_) => {}
        Err(e) => {
            return Err(format!(
                "no business cards from the launcher within {} s: {e}",
                place.timeout.as_secs()
            ));
        }
    }
    let mut words = line.split_whitespace();
    if words.next() != Some("cards") {
        return Err(format!(
            "unexpected line from the launcher: {}",
            line.trim_end()
        ));
    }
    let cards: Vec<&str> = words.collect();
    if cards.len() != place.nodes {
        return Err(format!(
            "the launcher sent {} business cards for {} processes",
            cards.len(),
            place.nodes
        ));
    }
    for (peer, card) in cards.iter().enumerate() {
        if peer != me {
            module.vc_init(peer, card).map_err(|e| e.to_string())?;
        }
    }
    match &kind {
        Module::Tcp(m) => m.accept_peers(deadline),
        Module::Shm(m) => m.accept_peers(deadline),
    }
    .map_err(|e| e.to_string())?;
    link.set_read_timeout(None).map_err(|e| e.to_string())?;
    let _ = LINK.set(Mutex::new(link));
    watch_launcher(reader, me);
    Ok(network)
}

fn connect(addr: &str, deadline: Instant) -> std::io::Result<TcpStream> {
    let mut last = std::io::Error::other("no address");
    for a in addr.to_socket_addrs()? {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(100));
        match TcpStream::connect_timeout(&a, left) {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Watches the launcher connection for the rest of the process's life.
fn watch_launcher(mut reader: BufReader<TcpStream>, me: usize) {
    let spawned = std::thread::Builder::new()
        .name("launcher".into())
        .spawn(move || {
            let mut line = String::new();
            loop {
                line.clear();
                match reader.read_line(&mut line) {
                    Ok(0) | Err(_) => {
                        if ENDING.load(Ordering::Acquire) {
                            return;
                        }
                        crate::net::network::say(&format!(
                            "converse: process {me} ending the job: the launcher (convrun) is gone"
                        ));
                        std::process::exit(crate::machine::exit::ABORT_EXIT_CODE);
                    }
                    Ok(_) => {
                        if let Some(text) = line.trim_end().strip_prefix("abort ") {
                            tell_lost();
                            crate::net::network::say(&format!(
                                "converse: process {me} ending the job: {text}"
                            ));
                            std::process::exit(crate::machine::exit::ABORT_EXIT_CODE);
                        }
                    }
                }
            }
        });
    if let Err(e) = spawned {
        eprintln!("converse: process {me}: cannot watch the launcher: {e}");
    }
}

/// The process is ending on purpose from now on.
pub(crate) fn ending() {
    ENDING.store(true, Ordering::Release);
}

/// Tells the launcher how this process is ending (see the protocol).
fn tell(line: &str) {
    if let Some(link) = LINK.get() {
        let mut link = link.lock().unwrap_or_else(|e| e.into_inner());
        let _ = link.write_all(line.as_bytes());
        let _ = link.flush();
    }
}

/// This process's part of the job is done; it exits next, on purpose.
pub(crate) fn tell_ended() {
    tell("end\n");
}

/// This process is ending because another one failed: the launcher reports
/// that one, not this one.
pub(crate) fn tell_lost() {
    tell("lost\n");
}
