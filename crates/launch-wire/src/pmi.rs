//! The PMI-1 wire protocol ("simple PMI", version 1.1), as data: what a
//! process started by an MPI launcher (MPICH's Hydra `mpiexec`, Flux, and
//! any other launcher that hands its processes a `PMI_FD`) says to it and
//! what it answers. Converse uses it to learn its rank and to exchange
//! business cards through the launcher's key-value space, without MPI.
//!
//! A line is `cmd=NAME` followed by `key=value` fields, separated by
//! spaces, ended by `\n`. The requests Converse sends and the answers it
//! reads:
//!
//! | request | answer |
//! |---|---|
//! | `cmd=init pmi_version=1 pmi_subversion=1` | `cmd=response_to_init … rc=0` |
//! | `cmd=get_maxes` | `cmd=maxes kvsname_max=K keylen_max=L vallen_max=V` |
//! | `cmd=get_my_kvsname` | `cmd=my_kvsname kvsname=NAME` |
//! | `cmd=put kvsname=NAME key=KEY value=VALUE` | `cmd=put_result rc=0 …` |
//! | `cmd=barrier_in` | `cmd=barrier_out` (once every process sent it) |
//! | `cmd=get kvsname=NAME key=KEY` | `cmd=get_result rc=0 … value=VALUE` |
//! | `cmd=finalize` | `cmd=finalize_ack` |
//! | `cmd=abort exitcode=N` | none: the launcher ends the job with `N` |
//!
//! Hydra (and Slurm's PMI-1) also put `PMI_process_mapping` in every
//! job's key-value space, MPICH's description of which of the launcher's
//! nodes runs each rank ([`nodes_of_ranks`] reads it), so that a process
//! learns every rank's host with one `get`, not one per rank.
//!
//! # Invariants
//!
//! - [`Request::encode`] refuses a field that would change the line's
//!   meaning (empty, or holding a space, `=`, or a control character),
//!   and one longer than [`MAX_FIELD`]; what it returns parses back into
//!   the same request's fields.
//! - [`Answer::parse`] never panics, keeps nothing longer than
//!   [`MAX_LINE`], and names what was wrong. A reader bounds its reads
//!   with [`MAX_LINE`].
use std::fmt;

/// The longest answer line a reader takes (Hydra's values are at most
/// 1024 bytes; its whole lines are below this).
pub const MAX_LINE: usize = 4096;

/// The longest key or value Converse puts (Hydra's `vallen_max` is 1024;
/// [`Maxes`] says the launcher's own limits, which the caller also checks).
pub const MAX_FIELD: usize = 1024;

/// A request line to the launcher.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    /// `cmd=init pmi_version=1 pmi_subversion=1`.
    Init,
    /// `cmd=get_maxes`.
    GetMaxes,
    /// `cmd=get_my_kvsname`.
    GetMyKvsname,
    /// `cmd=put kvsname=… key=… value=…`.
    Put {
        /// The key-value space (from [`Answer::MyKvsname`]).
        kvs: &'a str,
        /// The key.
        key: &'a str,
        /// The value.
        value: &'a str,
    },
    /// `cmd=barrier_in`.
    BarrierIn,
    /// `cmd=get kvsname=… key=…`.
    Get {
        /// The key-value space.
        kvs: &'a str,
        /// The key.
        key: &'a str,
    },
    /// `cmd=finalize`.
    Finalize,
    /// `cmd=abort exitcode=N`.
    Abort {
        /// The job's exit code.
        code: i32,
    },
}

/// A field of a request that would not survive the trip.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error(String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

/// Checks a request's field (`what` names it in the error).
fn field<'a>(what: &str, value: &'a str) -> Result<&'a str, Error> {
    if value.is_empty() {
        return Err(Error(format!("PMI {what} is empty")));
    }
    if value.len() > MAX_FIELD {
        return Err(Error(format!(
            "PMI {what} is {} bytes, more than {MAX_FIELD}",
            value.len()
        )));
    }
    if value
        .chars()
        .any(|c| c == ' ' || c == '=' || c.is_control())
    {
        return Err(Error(format!(
            "PMI {what} {} holds a space, `=` or a control character",
            crate::shown(value)
        )));
    }
    Ok(value)
}

impl Request<'_> {
    /// The request as a line, `\n` included.
    pub fn encode(&self) -> Result<String, Error> {
        Ok(match self {
            Request::Init => "cmd=init pmi_version=1 pmi_subversion=1\n".into(),
            Request::GetMaxes => "cmd=get_maxes\n".into(),
            Request::GetMyKvsname => "cmd=get_my_kvsname\n".into(),
            Request::Put { kvs, key, value } => format!(
                "cmd=put kvsname={} key={} value={}\n",
                field("key-value space", kvs)?,
                field("key", key)?,
                field("value", value)?
            ),
            Request::BarrierIn => "cmd=barrier_in\n".into(),
            Request::Get { kvs, key } => format!(
                "cmd=get kvsname={} key={}\n",
                field("key-value space", kvs)?,
                field("key", key)?
            ),
            Request::Finalize => "cmd=finalize\n".into(),
            Request::Abort { code } => format!("cmd=abort exitcode={code}\n"),
        })
    }
}

/// The launcher's limits (`cmd=maxes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Maxes {
    /// Longest key-value space name.
    pub kvsname: usize,
    /// Longest key.
    pub key: usize,
    /// Longest value.
    pub value: usize,
}

/// An answer line from the launcher.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// `cmd=response_to_init`, with its `rc`.
    Init {
        /// 0: accepted.
        rc: i64,
    },
    /// `cmd=maxes`.
    Maxes(Maxes),
    /// `cmd=my_kvsname kvsname=NAME`.
    MyKvsname(String),
    /// `cmd=put_result`, with its `rc` and `msg`.
    PutResult {
        /// 0: stored.
        rc: i64,
        /// The launcher's words.
        msg: String,
    },
    /// `cmd=barrier_out`.
    BarrierOut,
    /// `cmd=get_result`: `value` is `Some` when `rc` is 0.
    GetResult {
        /// 0: found.
        rc: i64,
        /// The launcher's words.
        msg: String,
        /// The value.
        value: Option<String>,
    },
    /// `cmd=finalize_ack`.
    FinalizeAck,
}

impl Answer {
    /// Parses one line (its `\n` or `\r\n` may be there or not).
    pub fn parse(line: &str) -> Result<Answer, Error> {
        if line.len() > MAX_LINE {
            return Err(Error(format!(
                "a PMI answer of {} bytes, more than {MAX_LINE}",
                line.len()
            )));
        }
        let line = line.trim_end_matches('\n').trim_end_matches('\r');
        let mut fields = Vec::new();
        for word in line.split(' ').filter(|w| !w.is_empty()) {
            let Some((k, v)) = word.split_once('=') else {
                return Err(Error(format!(
                    "a PMI answer with a word that is no `key=value`: {}",
                    crate::shown(line)
                )));
            };
            fields.push((k, v));
        }
        let get = |name: &str| fields.iter().find(|(k, _)| *k == name).map(|(_, v)| *v);
        let need = |name: &str| {
            get(name).ok_or_else(|| {
                Error(format!(
                    "a PMI answer without `{name}`: {}",
                    crate::shown(line)
                ))
            })
        };
        let number = |name: &str| -> Result<i64, Error> {
            need(name)?.parse().map_err(|_| {
                Error(format!(
                    "a PMI answer whose `{name}` is not a number: {}",
                    crate::shown(line)
                ))
            })
        };
        let count = |name: &str| -> Result<usize, Error> {
            usize::try_from(number(name)?).map_err(|_| {
                Error(format!(
                    "a PMI answer whose `{name}` is negative: {}",
                    crate::shown(line)
                ))
            })
        };
        let msg = || get("msg").unwrap_or("").to_string();
        Ok(match need("cmd")? {
            "response_to_init" => Answer::Init { rc: number("rc")? },
            "maxes" => Answer::Maxes(Maxes {
                kvsname: count("kvsname_max")?,
                key: count("keylen_max")?,
                value: count("vallen_max")?,
            }),
            "my_kvsname" => Answer::MyKvsname(need("kvsname")?.to_string()),
            "put_result" => Answer::PutResult {
                rc: number("rc")?,
                msg: msg(),
            },
            "barrier_out" => Answer::BarrierOut,
            "get_result" => {
                let rc = number("rc")?;
                let value = if rc == 0 {
                    Some(need("value")?.to_string())
                } else {
                    None
                };
                Answer::GetResult {
                    rc,
                    msg: msg(),
                    value,
                }
            }
            "finalize_ack" => Answer::FinalizeAck,
            other => {
                return Err(Error(format!(
                    "an unknown PMI answer `cmd={}`",
                    crate::shown(other)
                )));
            }
        })
    }
}

/// The key under which the launcher describes its placement of ranks on
/// nodes (see [`nodes_of_ranks`]).
pub const PROCESS_MAPPING_KEY: &str = "PMI_process_mapping";

/// The launcher node of each of a job's `size` ranks, from the value of
/// [`PROCESS_MAPPING_KEY`]: `(vector,(START,NODES,RANKS),...)`, MPICH's
/// description, in which each block gives `NODES` nodes numbered from
/// `START` `RANKS` consecutive ranks each, and the blocks repeat from the
/// first until every rank has a node. So Hydra says `(vector,(0,2,1))`
/// for 4 ranks round-robin on two hosts (ranks 0 and 2 on node 0), and
/// `(vector,(0,1,3))` for 3 ranks on one.
///
/// Never panics; costs O(`size` + the value's length) whatever the value
/// says (a block covering no rank is an error, so the repetition ends).
/// Node numbers are labels: equal numbers, one node.
pub fn nodes_of_ranks(value: &str, size: usize) -> Result<Vec<usize>, Error> {
    let bad = |why: &str| {
        Error(format!(
            "PMI process mapping {}: {why}",
            crate::shown(value)
        ))
    };
    if value.len() > MAX_LINE {
        return Err(bad("too long"));
    }
    let blocks = value
        .strip_prefix("(vector,")
        .and_then(|v| v.strip_suffix(')'))
        .ok_or_else(|| bad("not `(vector,...)`"))?;
    let mut parsed: Vec<(usize, usize, usize)> = Vec::new();
    let mut rest = blocks;
    loop {
        let inner = rest
            .strip_prefix('(')
            .and_then(|r| r.split_once(')'))
            .ok_or_else(|| bad("a block is not `(START,NODES,RANKS)`"))?;
        let mut numbers = inner.0.split(',').map(|n| {
            // Digits only: `parse` would take a sign.
            (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                .then(|| n.parse::<usize>().ok())
                .flatten()
        });
        let (Some(Some(start)), Some(Some(nodes)), Some(Some(ranks)), None) = (
            numbers.next(),
            numbers.next(),
            numbers.next(),
            numbers.next(),
        ) else {
            return Err(bad("a block is not three whole numbers"));
        };
        if start.checked_add(nodes).is_none() {
            return Err(bad("a node number out of range"));
        }
        parsed.push((start, nodes, ranks));
        rest = match inner.1 {
            "" => break,
            more => more
                .strip_prefix(',')
                .ok_or_else(|| bad("blocks are not separated by `,`"))?,
        };
    }
    if parsed
        .iter()
        .all(|&(_, nodes, ranks)| nodes == 0 || ranks == 0)
    {
        return Err(bad("no block places a rank"));
    }
    let mut out = Vec::with_capacity(size);
    'fill: loop {
        // A block of no ranks is skipped whole (its node range may be
        // huge); every node of another places a rank, so the loops end
        // after `size` ranks.
        for &(start, nodes, ranks) in parsed.iter().filter(|b| b.2 > 0) {
            for node in start..start + nodes {
                for _ in 0..ranks {
                    if out.len() == size {
                        break 'fill;
                    }
                    out.push(node);
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn requests_are_the_lines_hydra_takes() {
        assert_eq!(
            Request::Init.encode().unwrap(),
            "cmd=init pmi_version=1 pmi_subversion=1\n"
        );
        assert_eq!(
            Request::Put {
                kvs: "kvs_1_0",
                key: "card-3",
                value: "shm:converse-00ff-3,tcp:vm:4000"
            }
            .encode()
            .unwrap(),
            "cmd=put kvsname=kvs_1_0 key=card-3 value=shm:converse-00ff-3,tcp:vm:4000\n"
        );
        assert_eq!(
            Request::Get {
                kvs: "k",
                key: "card-0"
            }
            .encode()
            .unwrap(),
            "cmd=get kvsname=k key=card-0\n"
        );
        assert_eq!(
            Request::Abort { code: 7 }.encode().unwrap(),
            "cmd=abort exitcode=7\n"
        );
    }

    #[test]
    fn fields_that_would_change_the_line_are_refused() {
        for bad in ["", "a b", "a=b", "a\nb", &"x".repeat(MAX_FIELD + 1)] {
            let put = Request::Put {
                kvs: "k",
                key: "key",
                value: bad,
            };
            assert!(put.encode().is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn hydras_answers_parse() {
        // As MPICH 4.0's Hydra answered them, read off a real run.
        assert_eq!(
            Answer::parse("cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n"),
            Ok(Answer::Init { rc: 0 })
        );
        assert_eq!(
            Answer::parse("cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024"),
            Ok(Answer::Maxes(Maxes {
                kvsname: 256,
                key: 64,
                value: 1024
            }))
        );
        assert_eq!(
            Answer::parse("cmd=my_kvsname kvsname=kvs_2253_0_1474461804_vm\n"),
            Ok(Answer::MyKvsname("kvs_2253_0_1474461804_vm".into()))
        );
        assert_eq!(
            Answer::parse("cmd=get_result rc=0 msg=success value=shm:abc,tcp:1.2.3.4:5\r\n"),
            Ok(Answer::GetResult {
                rc: 0,
                msg: "success".into(),
                value: Some("shm:abc,tcp:1.2.3.4:5".into())
            })
        );
        assert_eq!(
            Answer::parse("cmd=get_result rc=-1 msg=key_nokey_not_found value=unknown"),
            Ok(Answer::GetResult {
                rc: -1,
                msg: "key_nokey_not_found".into(),
                value: None
            })
        );
        assert_eq!(Answer::parse("cmd=barrier_out\n"), Ok(Answer::BarrierOut));
        assert_eq!(Answer::parse("cmd=finalize_ack\n"), Ok(Answer::FinalizeAck));
    }

    #[test]
    fn malformed_answers_are_named() {
        for (line, says) in [
            ("", "without `cmd`"),
            ("cmd=maxes kvsname_max=1 keylen_max=2", "vallen_max"),
            (
                "cmd=maxes kvsname_max=-1 keylen_max=2 vallen_max=3",
                "negative",
            ),
            ("cmd=put_result rc=zero", "not a number"),
            ("cmd=barrier_out junk", "no `key=value`"),
            ("cmd=launch_missiles", "unknown PMI answer"),
            ("cmd=get_result rc=0 msg=success", "without `value`"),
        ] {
            let err = Answer::parse(line).unwrap_err().to_string();
            assert!(err.contains(says), "{line:?}: {err}");
        }
        assert!(Answer::parse(&"x".repeat(MAX_LINE + 1)).is_err());
    }

    #[test]
    fn hydras_process_mappings_place_every_rank() {
        // As MPICH 4.0's Hydra put them, read off real runs: 3 ranks on
        // one host; 4 ranks round-robin on two (`-hosts a,b`); 4 ranks
        // two to a host (`-hosts a,b -ppn 2`).
        assert_eq!(nodes_of_ranks("(vector,(0,1,1))", 3), Ok(vec![0, 0, 0]));
        assert_eq!(nodes_of_ranks("(vector,(0,2,1))", 4), Ok(vec![0, 1, 0, 1]));
        assert_eq!(
            nodes_of_ranks("(vector,(0,2,2))", 5),
            Ok(vec![0, 0, 1, 1, 0])
        );
        // Several blocks: 2 ranks on node 0, then one on each of 1 and 2.
        assert_eq!(
            nodes_of_ranks("(vector,(0,1,2),(1,2,1))", 4),
            Ok(vec![0, 0, 1, 2])
        );
        // More than the job: the rest is not used.
        assert_eq!(nodes_of_ranks("(vector,(0,4,4))", 2), Ok(vec![0, 0]));
        assert_eq!(
            nodes_of_ranks("(vector,(0,0,1),(3,1,1))", 2),
            Ok(vec![3, 3])
        );
        // A block of no ranks costs nothing, however many nodes it names.
        assert_eq!(
            nodes_of_ranks("(vector,(0,18446744073709551614,0),(5,1,1))", 2),
            Ok(vec![5, 5])
        );
    }

    #[test]
    fn malformed_process_mappings_are_named() {
        for (value, says) in [
            ("", "not `(vector"),
            ("(vector,(0,1,1)", "not `(START"),
            ("(vector,(0,1,1)))", "separated"),
            ("(vector,)", "not `(START"),
            ("(vector,(0,1))", "three whole numbers"),
            ("(vector,(0,1,1,1))", "three whole numbers"),
            ("(vector,(0,-1,1))", "three whole numbers"),
            ("(vector,(0,+1,1))", "three whole numbers"),
            ("(vector,(0,1,1)(0,1,1))", "separated"),
            ("(vector,(0,0,1),(0,1,0))", "no block places a rank"),
            ("(vector,(18446744073709551615,1,1))", "out of range"),
        ] {
            let err = nodes_of_ranks(value, 4).unwrap_err().to_string();
            assert!(err.contains(says), "{value:?}: {err}");
        }
    }

    proptest! {
        #[test]
        fn parse_never_panics(line in ".{0,200}") {
            let _ = Answer::parse(&line);
        }

        #[test]
        fn a_process_mapping_places_each_rank_once(
            blocks in proptest::collection::vec((0usize..8, 0usize..4, 0usize..4), 1..5),
            size in 0usize..64,
        ) {
            let text: Vec<String> = blocks
                .iter()
                .map(|(s, n, r)| format!("({s},{n},{r})"))
                .collect();
            let value = format!("(vector,{})", text.join(","));
            match nodes_of_ranks(&value, size) {
                Ok(nodes) => {
                    prop_assert_eq!(nodes.len(), size);
                    for node in nodes {
                        prop_assert!(blocks.iter().any(|&(s, n, r)| r > 0 && (s..s + n).contains(&node)));
                    }
                }
                Err(_) => prop_assert!(blocks.iter().all(|&(_, n, r)| n == 0 || r == 0)),
            }
        }

        #[test]
        fn a_put_value_comes_back_from_a_get_result(value in "[!-<>-~]{1,200}") {
            let put = Request::Put { kvs: "k", key: "card-0", value: &value }
                .encode()
                .unwrap();
            let stored = put.trim_end().rsplit_once("value=").unwrap().1;
            let answer = format!("cmd=get_result rc=0 msg=success value={stored}\n");
            prop_assert_eq!(
                Answer::parse(&answer).unwrap(),
                Answer::GetResult { rc: 0, msg: "success".into(), value: Some(value.clone()) }
            );
        }
    }
}
