//! Where each process of the job runs, and how the processes and the
//! launcher reach each other: the hosts (the nodelist's, read by
//! [`nodelist`]), the host of every process (as the numbers of
//! `CONVERSE_HOSTS`), the network module by default, the launcher's
//! control address as each host sees it, and the name this host goes by.
//!
//! # Invariants
//!
//! - Hosts are told apart by their nodelist names; `localhost`,
//!   `127.0.0.1` and `::1` are one, this host ([`is_local_host`]).
//! - [`Plan::host_of`] numbers the (pretend, with `++virtual-hosts`)
//!   hosts in order of first appearance, so process 0 is on host 0.
//! - `++netmod shm` with processes on several hosts is refused here,
//!   before anything starts.
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs, UdpSocket};

use crate::fail;
use crate::flags::Options;
use crate::nodelist::{self, Host};

pub fn is_local_host(h: &str) -> bool {
    matches!(h, "localhost" | "127.0.0.1" | "::1")
}

/// What tells hosts apart: the nodelist name, this host's names being one.
fn host_key(h: &str) -> &str {
    if is_local_host(h) { "" } else { h }
}

/// The address this host uses towards `host`, asked of the routing table
/// (connecting a UDP socket sends nothing). `None` if the name does not
/// resolve here.
fn route_to(host: &str) -> Option<IpAddr> {
    let target = (host, 9).to_socket_addrs().ok()?.next()?;
    let any: SocketAddr = if target.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let sock = UdpSocket::bind(any).ok()?;
    sock.connect(target).ok()?;
    let ip = sock.local_addr().ok()?.ip();
    (!ip.is_unspecified()).then_some(ip)
}

/// This host's name (`127.0.0.1` if it has none).
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into `buf`.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "127.0.0.1".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Where the job's processes run.
pub struct Plan {
    /// The nodelist's hosts (this host alone without one, or with
    /// `++local`).
    pub hosts: Vec<Host>,
    /// The index in `hosts` of each process's host (processes go to the
    /// hosts in turn).
    pub placed: Vec<usize>,
    /// Each process's host as a number (`CONVERSE_HOSTS`): one per
    /// distinct nodelist name, this host's names counting as one, and per
    /// pretend host with `++virtual-hosts`.
    pub host_of: Vec<usize>,
    /// The processes on each host of `host_of`, by its number (so that a
    /// process's `CONVERSE_HOST_PES` is one look-up, not a count over the
    /// job).
    processes_on: Vec<usize>,
    /// True if every process runs on this host.
    pub all_local: bool,
    /// The network module (`++netmod`, else by the hosts).
    pub netmod: String,
    /// The address each process reaches the launcher at: loopback on this
    /// host, else the one this host uses towards the process's host (not
    /// this host's name: that may stand for a loopback address here, as
    /// Debian's 127.0.1.1 does); `None` if its host does not resolve here.
    pub control_ip: Vec<Option<IpAddr>>,
    /// The name a process on this host goes by in a job with remote hosts:
    /// the address those reach this host at (a loopback name would send
    /// them to themselves), else this host's name.
    pub this_host: String,
}

impl Plan {
    /// The job's process count.
    pub fn nodes(&self) -> usize {
        self.placed.len()
    }

    /// Process `node`'s host.
    pub fn host(&self, node: usize) -> &Host {
        &self.hosts[self.placed[node]]
    }

    /// The name the other processes reach process `node` by
    /// (`CONVERSE_HOST`).
    pub fn advertised(&self, node: usize) -> &str {
        let host = self.host(node);
        if is_local_host(&host.name) && !self.all_local {
            &self.this_host
        } else {
            &host.name
        }
    }

    /// PEs of the job on process `node`'s host (more than its cores, and
    /// idle PEs must not spin).
    pub fn host_pes(&self, node: usize, ppn: usize) -> usize {
        self.processes_on[self.host_of[node]] * ppn
    }
}

/// Places the processes of the job `opts` describes.
pub fn plan(opts: &Options) -> Plan {
    let nodes = opts.pes / opts.ppn;
    let hosts: Vec<Host> = match (&opts.nodelist, opts.local) {
        (Some(path), false) => nodelist::read(path),
        _ => vec![Host {
            name: "127.0.0.1".into(),
            shell: None,
        }],
    };
    let placed: Vec<usize> = (0..nodes).map(|n| n % hosts.len()).collect();
    let all_local = placed.iter().all(|&h| is_local_host(&hosts[h].name));
    let mut host_keys: Vec<(&str, usize)> = Vec::new();
    let host_of: Vec<usize> = placed
        .iter()
        .enumerate()
        .map(|(node, &h)| {
            let key = (
                host_key(&hosts[h].name),
                opts.virtual_hosts.map_or(0, |v| node % v),
            );
            host_keys.iter().position(|&k| k == key).unwrap_or_else(|| {
                host_keys.push(key);
                host_keys.len() - 1
            })
        })
        .collect();
    let mut processes_on = vec![0; host_keys.len()];
    for &h in &host_of {
        processes_on[h] += 1;
    }
    let one_host = host_keys.len() <= 1;
    let netmod = opts
        .netmod
        .clone()
        .unwrap_or_else(|| if one_host { "shm" } else { "auto" }.to_string());
    if netmod == "shm" && !one_host {
        fail(
            "++netmod shm needs every process on one host (use ++netmod auto for shm within each host and tcp between them, ++netmod tcp, or ++local)",
        );
    }
    let control_ip: Vec<Option<IpAddr>> = placed
        .iter()
        .map(|&h| {
            if is_local_host(&hosts[h].name) {
                Some(Ipv4Addr::LOCALHOST.into())
            } else {
                route_to(&hosts[h].name)
            }
        })
        .collect();
    let remote_ips: Vec<Option<IpAddr>> = placed
        .iter()
        .zip(&control_ip)
        .filter(|(h, _)| !is_local_host(&hosts[**h].name))
        .map(|(_, ip)| *ip)
        .collect();
    let this_host = match remote_ips.first() {
        Some(&Some(ip)) if remote_ips.iter().all(|c| *c == Some(ip)) => ip.to_string(),
        _ => hostname(),
    };
    Plan {
        hosts,
        placed,
        host_of,
        processes_on,
        all_local,
        netmod,
        control_ip,
        this_host,
    }
}
