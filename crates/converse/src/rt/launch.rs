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
//! | `CONVERSE_NETMOD` | the network module: `tcp`, `shm`, or `auto` (shm with the processes of the same host, tcp with the others) |
//! | `CONVERSE_HOST` | the host name peers should use to reach this process |
//! | `CONVERSE_HOSTS` | the host of every process, as numbers (`0,1,0,1`): processes with the same number share memory |
//! | `CONVERSE_TIMEOUT` | seconds start-up may take (`++timeout`) |
//! | `CONVERSE_HOST_PES` | PEs of the job on this host (all processes): more than its cores means idle PEs must not spin |
//!
//! The process then:
//! 1. initializes its network modules and gets its business card (with
//!    `auto`, the cards of both modules, comma-separated: a peer takes the
//!    one of the module it reaches this process with);
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

use crate::net::netmod::NetModule;
use crate::net::shm::ShmModule;
use crate::net::tcp::TcpModule;
use crate::proc::topology::Topology;
use crate::rt::network::{Links, Network};

/// The modules a process runs, for the calls beyond the contract that
/// start-up needs.
#[derive(Default)]
struct Modules {
    shm: Option<Arc<ShmModule>>,
    tcp: Option<Arc<TcpModule>>,
}

/// Removes an shm segment's name when start-up fails before the peers
/// have all mapped it (after that it is gone already).
struct UnlinkOnError<'a>(&'a Modules);

impl Drop for UnlinkOnError<'_> {
    fn drop(&mut self) {
        if let Some(m) = &self.0.shm {
            m.unlink();
        }
    }
}

/// Which module carries the VC to a peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    Shm,
    Tcp,
}

impl Via {
    fn prefix(self) -> &'static str {
        match self {
            Via::Shm => "shm:",
            Via::Tcp => "tcp:",
        }
    }
}

/// The module of the VC to every process (this one's own entry too, unused),
/// and the name of the job's modules for the startup line.
fn routes(place: &Placement) -> Result<(Vec<Via>, String), String> {
    let same_host = |a: usize, b: usize| match &place.hosts {
        Some(hosts) => hosts[a] == hosts[b],
        None => true,
    };
    match place.netmod.as_str() {
        "tcp" => Ok((vec![Via::Tcp; place.nodes], "tcp".into())),
        "shm" => Ok((vec![Via::Shm; place.nodes], "shm".into())),
        "auto" => {
            let via = (0..place.nodes)
                .map(|p| {
                    if same_host(place.node, p) {
                        Via::Shm
                    } else {
                        Via::Tcp
                    }
                })
                .collect();
            // The job's pairs, not only this process's: the line is one
            // for the job.
            let pairs = || (0..place.nodes).flat_map(|a| (0..a).map(move |b| (a, b)));
            let shm = pairs().any(|(a, b)| same_host(a, b));
            let tcp = pairs().any(|(a, b)| !same_host(a, b));
            let label = match (shm, tcp) {
                (true, true) => "shm+tcp",
                (false, true) => "tcp",
                _ => "shm",
            };
            Ok((via, label.into()))
        }
        other => Err(format!(
            "unknown network module `{other}` (this build has: shm, tcp, auto)"
        )),
    }
}

/// The part of `card` (a process's business card, one module's card or
/// several comma-separated) for the module `via`.
fn card_for(card: &str, via: Via) -> Option<&str> {
    card.split(',').find(|c| c.starts_with(via.prefix()))
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
    /// The host of every process, by number, if the launcher said (else
    /// all on one).
    pub hosts: Option<Vec<usize>>,
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
    let hosts = match std::env::var("CONVERSE_HOSTS") {
        Ok(list) => {
            let hosts: Vec<usize> = list
                .split(',')
                .map(|h| h.parse::<usize>())
                .collect::<Result<_, _>>()
                .map_err(|_| format!("CONVERSE_HOSTS `{list}` is not a list of numbers"))?;
            if hosts.len() != nodes {
                return Err(format!(
                    "CONVERSE_HOSTS names {} hosts for {nodes} processes",
                    hosts.len()
                ));
            }
            Some(hosts)
        }
        Err(_) => None,
    };
    Ok(Some(Placement {
        launcher,
        node,
        nodes,
        token,
        netmod: std::env::var("CONVERSE_NETMOD").unwrap_or_else(|_| "tcp".into()),
        host: std::env::var("CONVERSE_HOST").unwrap_or_else(|_| "127.0.0.1".into()),
        hosts,
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
    let (via, label) = routes(place)?;
    let peers_via = |v: Via| -> Vec<usize> {
        (0..place.nodes)
            .filter(|&p| p != me && via[p] == v)
            .collect()
    };
    let (shm_peers, tcp_peers) = (peers_via(Via::Shm), peers_via(Via::Tcp));
    // A module only if some VC needs it; a process alone in its job still
    // runs one (its card is part of the protocol).
    let mut kind = Modules::default();
    if !tcp_peers.is_empty() || (shm_peers.is_empty() && via[me] == Via::Tcp) {
        // A loopback address is listened on as itself (so a process given
        // 127.0.0.2 is reached there and nowhere else); any other name may
        // stand for several interfaces, so all are.
        let bind: SocketAddr = match place.host.parse::<std::net::IpAddr>() {
            Ok(ip) if ip.is_loopback() => (ip, 0).into(),
            _ if place.host == "localhost" => "127.0.0.1:0".parse().expect("literal address"),
            _ => "0.0.0.0:0".parse().expect("literal address"),
        };
        kind.tcp = Some(Arc::new(
            TcpModule::init(me, place.nodes, place.token, bind, &place.host, max)
                .map_err(|e| e.to_string())?,
        ));
    }
    if !shm_peers.is_empty() || kind.tcp.is_none() {
        kind.shm = Some(Arc::new(
            ShmModule::init(me, place.nodes, place.token, max).map_err(|e| e.to_string())?,
        ));
    }
    // The segment of a process that fails here must not outlive it.
    let _unlink = UnlinkOnError(&kind);
    let mut parts: Vec<Arc<dyn NetModule>> = Vec::new();
    let mut index = [0usize; 2];
    if let Some(m) = &kind.shm {
        index[0] = parts.len();
        parts.push(m.clone());
    }
    if let Some(m) = &kind.tcp {
        index[1] = parts.len();
        parts.push(m.clone());
    }
    let card = parts
        .iter()
        .map(|m| m.business_card())
        .collect::<Vec<_>>()
        .join(",");
    let route = via
        .iter()
        .map(|v| match v {
            Via::Shm => index[0],
            Via::Tcp => index[1],
        })
        .collect();
    let network = Network::new(me, topo, Links::new(parts.clone(), route), label, |u| {
        if let Some(m) = &kind.shm {
            m.set_upcalls(u.clone());
        }
        if let Some(m) = &kind.tcp {
            m.set_upcalls(u);
        }
    });

    // Hello to the launcher, then every process's card.
    let mut link = connect(&place.launcher, deadline)
        .map_err(|e| format!("cannot reach the launcher at {}: {e}", place.launcher))?;
    writeln!(link, "hello {me} {} {card}", std::process::id(),)
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
    for (peer, card) in cards.iter().enumerate().filter(|&(p, _)| p != me) {
        let v = via[peer];
        let part = card_for(card, v).ok_or_else(|| {
            format!(
                "process {peer}'s business card `{card}` has no {} part",
                v.prefix().trim_end_matches(':')
            )
        })?;
        let module: &dyn NetModule = match v {
            Via::Shm => &**kind.shm.as_ref().expect("made for its peers"),
            Via::Tcp => &**kind.tcp.as_ref().expect("made for its peers"),
        };
        module.vc_init(peer, part).map_err(|e| e.to_string())?;
    }
    if let Some(m) = &kind.tcp {
        m.accept_peers(&tcp_peers, deadline)
            .map_err(|e| e.to_string())?;
    }
    if let Some(m) = &kind.shm {
        m.accept_peers(&shm_peers, deadline)
            .map_err(|e| e.to_string())?;
    }
    link.set_read_timeout(None).map_err(|e| e.to_string())?;
    if LINK.set(Mutex::new(link)).is_ok() {
        // A process that goes down only because another failed says so,
        // so that the launcher blames that one.
        crate::proc::exit::at_exit(|ending| {
            if ending.culprit.lost() {
                tell_lost();
            }
        });
    }
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
                        die_lost(me, "the launcher (convrun) is gone");
                    }
                    Ok(_) => {
                        if let Some(text) = line.trim_end().strip_prefix("abort ") {
                            die_lost(me, text);
                        }
                    }
                }
            }
        });
    if let Err(e) = spawned {
        eprintln!("converse: process {me}: cannot watch the launcher: {e}");
    }
}

/// Ends process `me` because the job ended elsewhere (the launcher said
/// so, or is gone), saying `why` (see `proc::exit::Culprit::Elsewhere`).
fn die_lost(me: usize, why: &str) -> ! {
    crate::proc::exit::die(
        crate::proc::exit::ABORT_EXIT_CODE,
        &format!("converse: process {me} ending the job: {why}"),
        crate::proc::exit::Ending {
            reason: why,
            culprit: crate::proc::exit::Culprit::Elsewhere,
        },
    )
}

/// The process is ending on purpose from now on.
pub(crate) fn ending() {
    ENDING.store(true, Ordering::Release);
}

/// Tells the launcher how this process is ending (see the protocol).
fn tell(line: &str) {
    if let Some(link) = LINK.get() {
        let mut link = crate::sync::lock(link);
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
fn tell_lost() {
    tell("lost\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(node: usize, netmod: &str, hosts: Option<Vec<usize>>) -> Placement {
        Placement {
            launcher: String::new(),
            node,
            nodes: hosts.as_ref().map_or(4, Vec::len),
            token: 1,
            netmod: netmod.into(),
            host: "127.0.0.1".into(),
            hosts,
            timeout: Duration::from_secs(1),
            host_pes: None,
        }
    }

    #[test]
    fn auto_routes_a_host_over_shm_and_the_others_over_tcp() {
        use Via::{Shm, Tcp};
        let hosts = Some(vec![0, 1, 0, 1]);
        let (via, label) = routes(&place(1, "auto", hosts.clone())).unwrap();
        assert_eq!(via, [Tcp, Shm, Tcp, Shm]);
        assert_eq!(label, "shm+tcp");
        // Every process routes a pair the same way as its peer does.
        let all: Vec<Vec<Via>> = (0..4)
            .map(|n| routes(&place(n, "auto", hosts.clone())).unwrap().0)
            .collect();
        for (a, row) in all.iter().enumerate() {
            for (b, via) in row.iter().enumerate() {
                assert_eq!(*via, all[b][a], "pair {a}-{b}");
            }
        }
        // One process per host: tcp only; one host: shm only.
        let (via, label) = routes(&place(0, "auto", Some(vec![0, 1, 2]))).unwrap();
        assert_eq!((via, label.as_str()), (vec![Shm, Tcp, Tcp], "tcp"));
        let (via, label) = routes(&place(2, "auto", None)).unwrap();
        assert_eq!((via, label.as_str()), (vec![Shm; 4], "shm"));
        // An explicit module takes every VC, whatever the hosts.
        assert_eq!(routes(&place(0, "tcp", hosts.clone())).unwrap().0, [Tcp; 4]);
        assert_eq!(routes(&place(0, "shm", hosts)).unwrap().0, [Shm; 4]);
        let e = routes(&place(0, "carrier-pigeon", None)).unwrap_err();
        assert!(e.contains("unknown network module `carrier-pigeon`"), "{e}");
    }

    #[test]
    fn a_card_part_is_found_by_its_module() {
        let card = "shm:/converse-00ab-1:123:456,tcp:127.0.0.1:9000";
        assert_eq!(
            card_for(card, Via::Shm),
            Some("shm:/converse-00ab-1:123:456")
        );
        assert_eq!(card_for(card, Via::Tcp), Some("tcp:127.0.0.1:9000"));
        assert_eq!(card_for("tcp:h:1", Via::Shm), None);
        assert_eq!(card_for("tcp:h:1", Via::Tcp), Some("tcp:h:1"));
    }
}
