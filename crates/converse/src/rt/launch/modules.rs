//! The network modules start-up can run, by name, and which one carries
//! the VC to each peer.
//!
//! Adding a module is an addition here: an entry of [`MODULES`] (its
//! name, a constructor returning it as a [`Joining`] module, what a dead
//! job may leave of it), and, if `++netmod` should
//! pick it by host, an entry of [`BY_HOST`]. Nothing else in start-up
//! names a module.
//!
//! # Invariants
//!
//! - Every process of a job computes the same [`Routes`] for a pair of
//!   processes (from the same `CONVERSE_NETMOD` and `CONVERSE_HOSTS`), so
//!   the two ends of a VC run the same module.
//! - A module's card begins with its name and `:` (a module finds its part
//!   of a peer's card by it: `Upcalls::peer_card`); a process's card is
//!   its modules' cards joined with `,` in [`MODULES`] order.
//!
//! # Concurrency
//!
//! Everything here runs on the thread that starts the process, before any
//! PE exists; the modules it makes are then shared as `net::netmod` says.
use std::net::SocketAddr;
use std::sync::Arc;

use crate::net::netmod::{NetError, NetModule, Upcalls};
use crate::net::shm::ShmModule;
use crate::net::tcp::TcpModule;
use crate::rt::network::NetworkError;

/// What a module's constructor gets to know about the job.
pub(super) struct Init<'a> {
    /// This process's number and the job's process count.
    pub me: usize,
    pub nodes: usize,
    /// The job key (every connection proves it holds it).
    pub key: &'a launch_wire::JobKey,
    /// The id naming the job's shared-memory segments.
    pub shm_id: u64,
    /// The host name peers reach this process by.
    pub host: &'a str,
    /// Most payload bytes of a frame.
    pub max_payload: usize,
    /// How shm moves large messages (`++lmt`).
    pub lmt: crate::net::lmt::Mode,
    /// How long start-up may take (`++timeout`): also how long a
    /// connection may take to be set up.
    pub timeout: std::time::Duration,
    /// How long a peer may stay silent (`++peer-timeout`).
    pub peer_timeout: std::time::Duration,
}

/// A network module as start-up drives it: the contract, and the calls
/// beyond it that joining a job needs.
pub(super) trait Joining {
    /// The module, for the process layer.
    fn module(&self) -> Arc<dyn NetModule>;
    /// Who hears about its frames and connection events; before any VC is
    /// connected.
    fn set_upcalls(&self, upcalls: Arc<dyn Upcalls>);
}

/// One network module this build can run.
pub(super) struct Kind {
    /// Its name, as `++netmod` spells it.
    pub name: &'static str,
    /// Starts it (`net_module_init`).
    pub init: fn(&Init) -> Result<Box<dyn Joining>, NetError>,
    /// Removes what a job with this segment id and process count may have left
    /// behind if its processes were killed (for the launcher, after the
    /// job).
    pub remove_leftovers: fn(shm_id: u64, nodes: usize),
}

/// The modules of this build, in the order their cards appear in a
/// process's card.
pub(super) const MODULES: &[Kind] = &[
    Kind {
        name: "shm",
        init: shm,
        remove_leftovers: shm_leftovers,
    },
    Kind {
        name: "tcp",
        init: tcp,
        remove_leftovers: |_, _| {},
    },
    #[cfg(feature = "mpi")]
    Kind {
        name: "mpi",
        init: mpi,
        remove_leftovers: |_, _| {},
    },
];

/// `++netmod` names that pick a module per pair of processes: (name, the
/// module between processes of one host, the one between hosts).
const BY_HOST: &[(&str, &str, &str)] = &[("auto", "shm", "tcp")];

fn shm(init: &Init) -> Result<Box<dyn Joining>, NetError> {
    ShmModule::init(
        init.me,
        init.nodes,
        // A tag derived from the key, not the key: the header is readable
        // by whoever can map the segment.
        init.key.tag(launch_wire::Role::ShmTag),
        init.shm_id,
        init.max_payload,
    )
    .map(|m| {
        let m = Arc::new(m.with_lmt_mode(init.lmt));
        // An abnormal end (an abort, a lost peer) skips the module's drop:
        // its segment's name goes then too, first thing (a launcher may
        // end the process as soon as it hears of the end: the next hooks
        // tell it), once the peers have mapped the rings announced to them
        // (`finalize`; see "Ending" in the shm module). (A process killed
        // outright leaves it for its launcher: `remove_leftovers`.)
        let dying = Arc::downgrade(&m);
        crate::proc::exit::at_exit(move |_| {
            if let Some(m) = dying.upgrade() {
                m.finalize();
            }
        });
        Box::new(m) as Box<dyn Joining>
    })
}

/// A job's shm names are one segment per process (its rings live in it),
/// named by process number: each is removed by its owner's module when it
/// ends, so only those of killed processes are left.
fn shm_leftovers(shm_id: u64, nodes: usize) {
    for node in 0..nodes {
        let _ = rustix::shm::unlink(crate::net::shm::segment_name(shm_id, node).as_str());
    }
}

impl Joining for Arc<ShmModule> {
    fn module(&self) -> Arc<dyn NetModule> {
        self.clone()
    }
    fn set_upcalls(&self, upcalls: Arc<dyn Upcalls>) {
        ShmModule::set_upcalls(self, upcalls);
    }
}

fn tcp(init: &Init) -> Result<Box<dyn Joining>, NetError> {
    // A loopback address is listened on as itself (so a process given
    // 127.0.0.2 is reached there and nowhere else); any other name may
    // stand for several interfaces, so all are.
    let bind: SocketAddr = match init.host.parse::<std::net::IpAddr>() {
        Ok(ip) if ip.is_loopback() => (ip, 0).into(),
        _ if init.host == "localhost" => "127.0.0.1:0".parse().expect("literal address"),
        _ => "0.0.0.0:0".parse().expect("literal address"),
    };
    TcpModule::init(
        init.me,
        init.nodes,
        init.key.clone(),
        bind,
        init.host,
        init.max_payload,
    )
    .map(|m| {
        let m = m
            .with_connect_wait(init.timeout)
            .with_peer_timeout(init.peer_timeout);
        Box::new(Arc::new(m)) as Box<dyn Joining>
    })
}

impl Joining for Arc<TcpModule> {
    fn module(&self) -> Arc<dyn NetModule> {
        self.clone()
    }
    fn set_upcalls(&self, upcalls: Arc<dyn Upcalls>) {
        TcpModule::set_upcalls(self, upcalls);
    }
}

/// The MPI module: MPI is initialized by then (the `mpi` bootstrap, the
/// only one that starts jobs where it can run).
#[cfg(feature = "mpi")]
fn mpi(init: &Init) -> Result<Box<dyn Joining>, NetError> {
    if !super::mpi::initialized() {
        return Err(NetError::local(
            "++netmod mpi needs a job started by an MPI launcher (mpiexec, srun)",
        ));
    }
    let module = crate::net::mpi::MpiModule::new(init.me, init.nodes, init.max_payload);
    module.watch_local_peers(super::mpi::local_peers());
    Ok(Box::new(Arc::new(module)))
}

#[cfg(feature = "mpi")]
impl Joining for Arc<crate::net::mpi::MpiModule> {
    fn module(&self) -> Arc<dyn NetModule> {
        self.clone()
    }
    fn set_upcalls(&self, upcalls: Arc<dyn Upcalls>) {
        crate::net::mpi::MpiModule::set_upcalls(self, upcalls);
    }
}

/// Every name `++netmod` takes: the modules, then the by-host choices.
pub(super) fn names() -> Vec<&'static str> {
    MODULES
        .iter()
        .map(|k| k.name)
        .chain(BY_HOST.iter().map(|(name, ..)| *name))
        .collect()
}

/// Removes what a job with segment id `shm_id` and `nodes` processes may have left
/// behind, of every module.
pub(super) fn remove_leftovers(shm_id: u64, nodes: usize) {
    for kind in MODULES {
        (kind.remove_leftovers)(shm_id, nodes);
    }
}

/// Which module carries the VC to each process, and the startup line's name
/// for the job's modules.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Routes {
    /// Per process, the index in [`MODULES`] of its VC's module (this
    /// process's own entry names the module it runs when alone).
    pub via: Vec<usize>,
    /// `shm`, `tcp`, `shm+tcp`: the modules the job's pairs use.
    pub label: String,
}

fn index_of(name: &str) -> usize {
    MODULES
        .iter()
        .position(|k| k.name == name)
        .expect("BY_HOST names modules of MODULES")
}

/// The routes of process `me` of `nodes` under `++netmod` `netmod`, with
/// `hosts` the host of every process (`None`: all on one).
pub(super) fn routes(
    netmod: &str,
    me: usize,
    nodes: usize,
    hosts: Option<&[usize]>,
) -> Result<Routes, NetworkError> {
    if let Some(at) = MODULES.iter().position(|k| k.name == netmod) {
        return Ok(Routes {
            via: vec![at; nodes],
            label: netmod.into(),
        });
    }
    let Some(&(_, within, between)) = BY_HOST.iter().find(|(name, ..)| *name == netmod) else {
        return Err(NetworkError::UnknownModule {
            name: netmod.into(),
            available: names(),
        });
    };
    let same_host = |a: usize, b: usize| hosts.is_none_or(|h| h[a] == h[b]);
    let (within_at, between_at) = (index_of(within), index_of(between));
    let via = (0..nodes)
        .map(|p| {
            if same_host(me, p) {
                within_at
            } else {
                between_at
            }
        })
        .collect();
    // The job's pairs, not only this process's: the line is one for the
    // job.
    let pairs = || (0..nodes).flat_map(|a| (0..a).map(move |b| (a, b)));
    let label = match (
        pairs().any(|(a, b)| same_host(a, b)),
        pairs().any(|(a, b)| !same_host(a, b)),
    ) {
        (true, true) => format!("{within}+{between}"),
        (false, true) => between.into(),
        _ => within.into(),
    };
    Ok(Routes { via, label })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHM: usize = 0;
    const TCP: usize = 1;

    /// The names `++lmt` takes are the modes' names, and the other way.
    #[test]
    fn lmt_flag_names_are_the_modes() {
        let modes: Vec<&str> = crate::net::lmt::Mode::NAMES
            .iter()
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(crate::proc::args::LMT_MODES.to_vec(), modes);
    }

    #[test]
    fn the_table_is_consistent() {
        assert_eq!((MODULES[SHM].name, MODULES[TCP].name), ("shm", "tcp"));
        for (i, k) in MODULES.iter().enumerate() {
            assert_eq!(MODULES.iter().position(|o| o.name == k.name), Some(i));
        }
        for (name, within, between) in BY_HOST {
            assert!(MODULES.iter().all(|k| k.name != *name));
            let _ = (index_of(within), index_of(between));
        }
        let mut want = vec!["shm", "tcp"];
        if cfg!(feature = "mpi") {
            want.push("mpi");
        }
        want.push("auto");
        assert_eq!(names(), want);
    }

    #[test]
    fn auto_routes_a_host_over_shm_and_the_others_over_tcp() {
        let hosts = [0, 1, 0, 1];
        let r = routes("auto", 1, 4, Some(&hosts)).unwrap();
        assert_eq!(r.via, [TCP, SHM, TCP, SHM]);
        assert_eq!(r.label, "shm+tcp");
        // Every process routes a pair the same way as its peer does.
        let all: Vec<Vec<usize>> = (0..4)
            .map(|n| routes("auto", n, 4, Some(&hosts)).unwrap().via)
            .collect();
        for (a, row) in all.iter().enumerate() {
            for (b, via) in row.iter().enumerate() {
                assert_eq!(*via, all[b][a], "pair {a}-{b}");
            }
        }
        // One process per host: tcp only; one host: shm only.
        let r = routes("auto", 0, 3, Some(&[0, 1, 2])).unwrap();
        assert_eq!((r.via, r.label.as_str()), (vec![SHM, TCP, TCP], "tcp"));
        let r = routes("auto", 2, 4, None).unwrap();
        assert_eq!((r.via, r.label.as_str()), (vec![SHM; 4], "shm"));
        // An explicit module takes every VC, whatever the hosts.
        assert_eq!(routes("tcp", 0, 4, Some(&hosts)).unwrap().via, [TCP; 4]);
        let r = routes("shm", 0, 4, Some(&hosts)).unwrap();
        assert_eq!((r.via, r.label.as_str()), (vec![SHM; 4], "shm"));
        if !cfg!(feature = "mpi") {
            let e = routes("mpi", 0, 4, None).unwrap_err().to_string();
            assert!(
                e.ends_with("; the mpi module needs a build with the mpi feature)"),
                "{e}"
            );
        }
        let e = routes("carrier-pigeon", 0, 4, None).unwrap_err();
        assert_eq!(
            e,
            NetworkError::UnknownModule {
                name: "carrier-pigeon".into(),
                available: names()
            }
        );
        assert_eq!(
            e.to_string(),
            format!(
                "unknown network module `carrier-pigeon` (this build has: {})",
                names().join(", ")
            )
        );
    }
}
