//! The environment `convrun` starts each process with: the variables'
//! names, and [`Placement`], what they say together.
//!
//! | variable | meaning |
//! |---|---|
//! | [`LAUNCHER`] | `HOST:PORT` of the launcher's control socket; its presence means "started by convrun" |
//! | [`NODE`] / [`NODES`] | this process's number and the job's process count |
//! | [`KEY`] | the job key ([`JobKey`], 64 hex digits), which every connection of the job proves it holds without sending it; the one secret here: the launcher gives it to a local child in its environment and to a remote one on its remote shell's standard input, never on a command line |
//! | [`SHM_ID`] | the job's shared-memory segment id (hex), random and apart from the key, so a segment's name (listable by anyone in `/dev/shm`) says nothing of it |
//! | [`NETMOD`] | the network module: `tcp` (the default), `shm`, or `auto` (shm with the processes of the same host, tcp with the others) |
//! | [`HOST`] | the host name peers should use to reach this process (default `127.0.0.1`) |
//! | [`HOSTS`] | the host of every process, as numbers: processes with the same number share memory. A list (`0,1,0,1`), or, where shorter, MPICH's mapping (`(vector,(0,2,1))`, see [`crate::pmi::nodes_of_ranks`]), whose length does not grow with the job for the usual layouts (hosts filled in turn or dealt round-robin): each process's environment is then O(1), not O(P), and a job of tens of thousands of processes stays below the system's limit on one variable (128 KiB) |
//! | [`TIMEOUT`] | seconds start-up may take (`++timeout`; default [`DEFAULT_TIMEOUT_SECS`]) |
//! | [`HOST_PES`] | PEs of the job on this host (all processes): more than its cores means idle PEs must not spin |
//!
//! # Invariants
//!
//! [`Placement::from_env`] of [`Placement::to_env`] is the placement
//! itself; a placement `from_env` returns has `node < nodes` and, if it
//! has `hosts`, one per process. `from_env` reads only through the lookup
//! it is given (no process state), so it is a pure function of it.
use std::time::Duration;

use crate::auth::JobKey;
use crate::error::{Error, shown};

/// `HOST:PORT` of the launcher's control socket.
pub const LAUNCHER: &str = "CONVERSE_LAUNCHER";
/// This process's number in the job, from 0.
pub const NODE: &str = "CONVERSE_NODE";
/// The job's process count.
pub const NODES: &str = "CONVERSE_NODES";
/// The job key, 64 hexadecimal digits (secret).
pub const KEY: &str = "CONVERSE_JOB_KEY";
/// The id that names the job's shared-memory segments, hexadecimal.
pub const SHM_ID: &str = "CONVERSE_SHM_ID";
/// The network module's name (`++netmod`).
pub const NETMOD: &str = "CONVERSE_NETMOD";
/// The host name peers reach this process by.
pub const HOST: &str = "CONVERSE_HOST";
/// The host of every process, as comma-separated numbers or as a
/// mapping (see [`hosts_value`]).
pub const HOSTS: &str = "CONVERSE_HOSTS";
/// The most processes a [`HOSTS`] mapping may place: what a reader
/// allocates for it is bounded, whatever [`NODES`] says (a list is bounded
/// by its own length). Converse's own limit on PEs is lower.
pub const MAX_MAPPED_NODES: usize = 1 << 17;
/// Seconds start-up may take.
pub const TIMEOUT: &str = "CONVERSE_TIMEOUT";
/// PEs of the job on this process's host.
pub const HOST_PES: &str = "CONVERSE_HOST_PES";

/// Every variable of the protocol, in the order [`Placement::to_env`]
/// lists them.
pub const ALL: [&str; 10] = [
    HOST_PES, HOSTS, SHM_ID, LAUNCHER, NODE, NODES, KEY, NETMOD, HOST, TIMEOUT,
];

/// Default start-up deadline (`++timeout`), seconds.
pub const DEFAULT_TIMEOUT_SECS: u64 = 60;
/// The network module when [`NETMOD`] is not set.
pub const DEFAULT_NETMOD: &str = "tcp";
/// The host name when [`HOST`] is not set.
pub const DEFAULT_HOST: &str = "127.0.0.1";

/// One process's place in the job, as the launcher describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// `HOST:PORT` of the launcher's control socket.
    pub launcher: String,
    /// This process's number.
    pub node: usize,
    /// The job's process count.
    pub nodes: usize,
    /// The job key.
    pub key: JobKey,
    /// The id naming the job's shared-memory segments.
    pub shm_id: u64,
    /// The network module's name, as `++netmod` spells it.
    pub netmod: String,
    /// The host name peers reach this process by.
    pub host: String,
    /// The host of every process, by number, if the launcher said (else
    /// all on one).
    pub hosts: Option<Vec<usize>>,
    /// How long start-up may take.
    pub timeout: Duration,
    /// PEs of the job on this host, if the launcher said.
    pub host_pes: Option<usize>,
}

impl Placement {
    /// The variables that describe `self`, in the order of [`ALL`] (those
    /// of `None` fields left out).
    pub fn to_env(&self) -> Vec<(&'static str, String)> {
        let mut vars = Vec::with_capacity(ALL.len());
        if let Some(pes) = self.host_pes {
            vars.push((HOST_PES, pes.to_string()));
        }
        if let Some(hosts) = &self.hosts {
            vars.push((HOSTS, hosts_value(hosts)));
        }
        vars.push((SHM_ID, format!("{:016x}", self.shm_id)));
        vars.extend([
            (LAUNCHER, self.launcher.clone()),
            (NODE, self.node.to_string()),
            (NODES, self.nodes.to_string()),
            (KEY, self.key.to_hex()),
            (NETMOD, self.netmod.clone()),
            (HOST, self.host.clone()),
            (TIMEOUT, self.timeout.as_secs().to_string()),
        ]);
        vars
    }

    /// The placement the variables `get` returns describe: `None` if
    /// [`LAUNCHER`] is not set (the process was not started by a
    /// launcher), an error naming the variable if one is missing or
    /// malformed.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Option<Placement>, Error> {
        let Some(launcher) = get(LAUNCHER) else {
            return Ok(None);
        };
        let num = |name: &'static str| -> Result<usize, Error> {
            get(name)
                .ok_or(Error::Unset(name))?
                .parse::<usize>()
                .map_err(|_| Error::NotANumber(name))
        };
        let node = num(NODE)?;
        let nodes = num(NODES)?;
        if node >= nodes {
            return Err(Error::NodeNotBelowNodes { node, nodes });
        }
        let key = JobKey::from_hex(&get(KEY).ok_or(Error::Unset(KEY))?).ok_or(Error::KeyNotHex)?;
        let shm_id = u64::from_str_radix(&get(SHM_ID).ok_or(Error::Unset(SHM_ID))?, 16)
            .map_err(|_| Error::ShmIdNotHex)?;
        let timeout = match get(TIMEOUT) {
            Some(t) => t.parse::<u64>().map_err(|_| Error::TimeoutNotSeconds)?,
            None => DEFAULT_TIMEOUT_SECS,
        };
        let hosts = match get(HOSTS) {
            Some(map) if map.starts_with('(') => {
                if nodes > MAX_MAPPED_NODES {
                    return Err(Error::HostsNotMapping(format!(
                        "a mapping places at most {MAX_MAPPED_NODES} processes, not {nodes}"
                    )));
                }
                let hosts = crate::pmi::nodes_of_ranks(&map, nodes)
                    .map_err(|e| Error::HostsNotMapping(e.to_string()))?;
                Some(hosts)
            }
            Some(list) => {
                let hosts: Vec<usize> = list
                    .split(',')
                    .map(|h| h.parse::<usize>())
                    .collect::<Result<_, _>>()
                    .map_err(|_| Error::HostsNotNumbers(shown(&list)))?;
                if hosts.len() != nodes {
                    return Err(Error::HostsCount {
                        hosts: hosts.len(),
                        nodes,
                    });
                }
                Some(hosts)
            }
            None => None,
        };
        let host_pes = match get(HOST_PES) {
            Some(_) => Some(num(HOST_PES)?),
            None => None,
        };
        Ok(Some(Placement {
            launcher,
            node,
            nodes,
            key,
            shm_id,
            netmod: get(NETMOD).unwrap_or_else(|| DEFAULT_NETMOD.into()),
            host: get(HOST).unwrap_or_else(|| DEFAULT_HOST.into()),
            hosts,
            timeout: Duration::from_secs(timeout),
            host_pes,
        }))
    }
}

/// The value of [`HOSTS`] for `hosts` (the host of each process): MPICH's
/// mapping where it is shorter than the list, else the list. The mapping
/// describes the shortest period of `hosts` (the reader repeats it, and
/// cuts the last repetition short), as runs of processes on one host (one
/// block each, consecutive hosts with runs of one length merged). O(P).
pub fn hosts_value(hosts: &[usize]) -> String {
    let numbers: Vec<String> = hosts.iter().map(usize::to_string).collect();
    let list = numbers.join(",");
    if hosts.len() > MAX_MAPPED_NODES {
        return list;
    }
    // The shortest period: the length less the longest border (the
    // prefix function's last value).
    let mut border = vec![0usize; hosts.len()];
    for j in 1..hosts.len() {
        let mut k = border[j - 1];
        while k > 0 && hosts[j] != hosts[k] {
            k = border[k - 1];
        }
        if hosts[j] == hosts[k] {
            k += 1;
        }
        border[j] = k;
    }
    let period = hosts.len() - border.last().copied().unwrap_or(0);
    // (first host, hosts, processes on each)
    let mut blocks: Vec<(usize, usize, usize)> = Vec::new();
    let cycle = &hosts[..period];
    let mut i = 0;
    while i < cycle.len() {
        let run = cycle[i..].iter().take_while(|&&h| h == cycle[i]).count();
        match blocks.last_mut() {
            Some((start, n, each)) if *each == run && start.checked_add(*n) == Some(cycle[i]) => {
                *n += 1
            }
            _ => blocks.push((cycle[i], 1, run)),
        }
        i += run;
    }
    let text: Vec<String> = blocks
        .iter()
        .map(|(s, n, r)| format!("({s},{n},{r})"))
        .collect();
    let map = format!("(vector,{})", text.join(","));
    // Read back as a check: a mapping that said anything else would
    // place processes on the wrong hosts.
    if map.len() < list.len()
        && crate::pmi::nodes_of_ranks(&map, hosts.len()).is_ok_and(|h| h == hosts)
    {
        map
    } else {
        list
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn the_usual_layouts_take_a_value_that_does_not_grow_with_the_job() {
        for p in [64usize, 4096, 65_536] {
            // Round-robin on two hosts (`++virtual-hosts 2`).
            let dealt: Vec<usize> = (0..p).map(|n| n % 2).collect();
            assert_eq!(hosts_value(&dealt), "(vector,(0,2,1))", "{p}");
            // Hosts filled in turn, four processes each.
            let filled: Vec<usize> = (0..p).map(|n| n / 4).collect();
            assert_eq!(hosts_value(&filled), format!("(vector,(0,{},4))", p / 4));
            // One host (as Hydra says it: one process, repeated).
            assert_eq!(hosts_value(&vec![0; p]), "(vector,(0,1,1))");
        }
        // A job that stops mid-cycle: the last cycle is cut, not encoded.
        let cut: Vec<usize> = (0..11).map(|n| (n / 2) % 3).collect();
        assert_eq!(hosts_value(&cut), "(vector,(0,3,2))");
        // Short or irregular: the list.
        assert_eq!(hosts_value(&[0, 1, 0, 1]), "0,1,0,1");
        assert_eq!(hosts_value(&[2, 0, 1, 1, 0, 2, 2]), "2,0,1,1,0,2,2");
        assert_eq!(hosts_value(&[]), "");
    }

    #[test]
    fn every_hosts_value_reads_back_as_its_hosts() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |below: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % below as u64) as usize
        };
        for _ in 0..2000 {
            let p = 1 + next(200);
            let (hosts_n, run, mode) = (1 + next(6), 1 + next(5), next(3));
            let hosts: Vec<usize> = (0..p)
                .map(|n| match mode {
                    0 => (n / run) % hosts_n,
                    1 => n / run,
                    _ => next(hosts_n),
                })
                .collect();
            let value = hosts_value(&hosts);
            let back = if value.starts_with('(') {
                crate::pmi::nodes_of_ranks(&value, p).unwrap()
            } else {
                value.split(',').map(|h| h.parse().unwrap()).collect()
            };
            assert_eq!(back, hosts, "{value}");
        }
    }

    fn lookup(vars: &[(&str, String)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        move |name| map.get(name).cloned()
    }

    fn sample() -> Placement {
        Placement {
            launcher: "127.0.0.1:4000".into(),
            node: 2,
            nodes: 4,
            key: JobKey::from_bytes([0xc0; 32]),
            shm_id: 0x5eed,
            netmod: "auto".into(),
            host: "node7".into(),
            hosts: Some(vec![0, 1, 0, 1]),
            timeout: Duration::from_secs(9),
            host_pes: Some(4),
        }
    }

    /// `vars` with `name` set to `value` (or removed, for `None`).
    fn with(
        vars: &[(&'static str, String)],
        name: &str,
        value: Option<&str>,
    ) -> Vec<(&'static str, String)> {
        let mut out: Vec<_> = vars.iter().filter(|(k, _)| *k != name).cloned().collect();
        if let Some(v) = value {
            let k = ALL
                .iter()
                .find(|k| **k == name)
                .expect("a protocol variable");
            out.push((k, v.to_string()));
        }
        out
    }

    #[test]
    fn a_placement_round_trips() {
        let p = sample();
        let vars = p.to_env();
        assert_eq!(
            vars.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
            ALL,
            "every variable, in order"
        );
        assert!(vars.contains(&(KEY, "c0".repeat(32))));
        assert!(vars.contains(&(HOSTS, "0,1,0,1".into())));
        assert!(vars.contains(&(SHM_ID, "0000000000005eed".into())));
        assert_eq!(Placement::from_env(lookup(&vars)), Ok(Some(p.clone())));
        let bare = Placement {
            hosts: None,
            host_pes: None,
            ..p
        };
        assert_eq!(Placement::from_env(lookup(&bare.to_env())), Ok(Some(bare)));
    }

    #[test]
    fn without_a_launcher_there_is_no_placement() {
        assert_eq!(Placement::from_env(|_| None), Ok(None));
        let vars = with(&sample().to_env(), LAUNCHER, None);
        assert_eq!(Placement::from_env(lookup(&vars)), Ok(None));
    }

    #[test]
    fn defaults_fill_the_optional_variables() {
        let key = "ff".repeat(32);
        let vars: Vec<(&str, String)> = [LAUNCHER, NODE, NODES, KEY, SHM_ID]
            .iter()
            .zip(["h:1", "0", "1", &key, "5"])
            .map(|(k, v)| (*k, v.to_string()))
            .collect();
        let p = Placement::from_env(lookup(&vars)).unwrap().unwrap();
        assert_eq!(p.netmod, DEFAULT_NETMOD);
        assert_eq!(p.host, DEFAULT_HOST);
        assert_eq!(p.timeout, Duration::from_secs(DEFAULT_TIMEOUT_SECS));
        assert_eq!((p.hosts, p.host_pes, p.shm_id), (None, None, 5));
        assert_eq!(p.key, JobKey::from_bytes([0xff; 32]));
    }

    #[test]
    fn a_bad_variable_is_named() {
        let good = sample().to_env();
        let cases: &[(&str, Option<&str>, &str)] = &[
            (
                NODE,
                None,
                "CONVERSE_NODE is not set (the job was started by convrun?)",
            ),
            (NODES, Some("many"), "CONVERSE_NODES is not a number"),
            (NODE, Some("-1"), "CONVERSE_NODE is not a number"),
            (
                NODE,
                Some("4"),
                "CONVERSE_NODE 4 is not below CONVERSE_NODES 4",
            ),
            (
                KEY,
                None,
                "CONVERSE_JOB_KEY is not set (the job was started by convrun?)",
            ),
            (
                KEY,
                Some("xyz"),
                "CONVERSE_JOB_KEY is not 64 hexadecimal digits",
            ),
            (
                KEY,
                Some("1ffffffffffffffff"),
                "CONVERSE_JOB_KEY is not 64 hexadecimal digits",
            ),
            (
                SHM_ID,
                None,
                "CONVERSE_SHM_ID is not set (the job was started by convrun?)",
            ),
            (SHM_ID, Some("-1"), "CONVERSE_SHM_ID is not hexadecimal"),
            (
                TIMEOUT,
                Some("soon"),
                "CONVERSE_TIMEOUT is not a number of seconds",
            ),
            (
                HOSTS,
                Some("0,a,0,1"),
                "CONVERSE_HOSTS `0,a,0,1` is not a list of numbers",
            ),
            (
                HOSTS,
                Some(""),
                "CONVERSE_HOSTS `` is not a list of numbers",
            ),
            (
                HOSTS,
                Some("0,1"),
                "CONVERSE_HOSTS names 2 hosts for 4 processes",
            ),
            (HOST_PES, Some("lots"), "CONVERSE_HOST_PES is not a number"),
        ];
        for (name, value, want) in cases {
            let e = Placement::from_env(lookup(&with(&good, name, *value))).unwrap_err();
            assert_eq!(e.to_string(), *want, "{name}={value:?}");
        }
        let mapped = Placement::from_env(lookup(&with(&good, HOSTS, Some("(vector,(0,2,1))"))))
            .unwrap()
            .unwrap();
        assert_eq!(mapped.hosts, Some(vec![0, 1, 0, 1]));
        let e =
            Placement::from_env(lookup(&with(&good, HOSTS, Some("(vector,(0,2))")))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "CONVERSE_HOSTS: PMI process mapping (vector,(0,2)): a block is not three whole numbers"
        );
        let huge = with(&good, NODES, Some(&(MAX_MAPPED_NODES + 1).to_string()));
        let e =
            Placement::from_env(lookup(&with(&huge, HOSTS, Some("(vector,(0,1,1))")))).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "CONVERSE_HOSTS: a mapping places at most {MAX_MAPPED_NODES} processes, not {}",
                MAX_MAPPED_NODES + 1
            )
        );
        let e = Placement::from_env(lookup(&with(&good, HOSTS, Some(&"9\n".repeat(500)))))
            .unwrap_err()
            .to_string();
        assert!(e.len() < 300 && !e.contains('\n'), "{e}");
    }
}
