//! The errors of the start-up path below `start`: why a bootstrap could not
//! place this process or exchange business cards ([`BootstrapError`]), why
//! a placed process could not join its job ([`JoinError`]), and the shared
//! I/O cause they carry ([`IoCause`]).
//!
//! Each error's message is the one start-up printed when these were plain
//! strings: the launcher's tests and the multi-process suite read some of
//! them. Every error that wraps another returns it from `source()`.
use std::fmt;
use std::sync::Arc;

use launch_wire::pmi::Answer;

use crate::net::netmod::NetError;
use crate::rt::network::NetworkError;

/// An I/O error carried as the cause of a start-up error: shared, so that
/// the error holding it can be cloned, and compared by its kind and
/// message (`std::io::Error` is neither `Clone` nor `PartialEq`).
#[derive(Clone, Debug)]
pub struct IoCause(Arc<std::io::Error>);

impl IoCause {
    /// The I/O error itself.
    pub fn get(&self) -> &std::io::Error {
        &self.0
    }
}

impl From<std::io::Error> for IoCause {
    fn from(e: std::io::Error) -> IoCause {
        IoCause(Arc::new(e))
    }
}

impl PartialEq for IoCause {
    fn eq(&self, other: &IoCause) -> bool {
        self.0.kind() == other.0.kind() && self.0.to_string() == other.0.to_string()
    }
}

impl Eq for IoCause {}

impl fmt::Display for IoCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Why the launcher's bootstrap could not place this process in its job,
/// or could not carry its part of the business-card exchange: `convrun`'s
/// environment and control connection, a PMI-1 or PMIx launcher, MPI.
///
/// Its message is one line naming the cause (the variable, the request,
/// the peer); `source()` gives the error underneath where there is one
/// (the I/O error, the launcher protocol's parse error, the MPI fault).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BootstrapError {
    /// `convrun`'s variables (`CONVERSE_LAUNCHER`, `CONVERSE_NODE`, ...)
    /// are missing or malformed.
    Environment(launch_wire::Error),
    /// Another launcher's variables (`PMI_RANK`, `PMI_FD`, `PMIX_*`,
    /// Slurm's, Open MPI's) are malformed or place the process nowhere, or
    /// name a launcher this build cannot talk to: why, naming the variable
    /// and the way out.
    Launcher(String),
    /// The launcher's connection (`PMI_FD`) or library (PMIx) was taken by
    /// an earlier job of this process: which.
    Taken(&'static str),
    /// The operating system's random source failed while drawing `what`
    /// (the job key, the segment id, a nonce).
    Random {
        /// What was being drawn.
        what: &'static str,
        /// The random source's error.
        source: IoCause,
    },
    /// The connection to the launcher (`convrun`'s control socket, the PMI
    /// connection) could not be made, written or read, or ended during
    /// start-up.
    Connection {
        /// What failed, naming the launcher or the request where known.
        what: String,
        /// The I/O error, if one.
        source: Option<IoCause>,
    },
    /// The launcher (or rank 0 through it) said what the protocol does not
    /// allow then: a line not expected, one too long, a value that does not
    /// parse.
    Protocol {
        /// What was wrong.
        what: String,
        /// The launcher protocol's parse error, if the line did not parse.
        source: Option<launch_wire::Error>,
    },
    /// The launcher's handshake does not prove the job key: whatever
    /// answered at the launcher's address is not the job's launcher.
    Impostor {
        /// The launcher's address (`CONVERSE_LAUNCHER`).
        launcher: String,
    },
    /// The launcher ended the job during start-up (another process
    /// failed, or the launcher was stopped): its reason.
    Aborted(String),
    /// A PMI-1 line that does not parse, or a request that cannot be
    /// encoded.
    PmiLine(launch_wire::pmi::Error),
    /// The PMI-1 launcher refused a request (its answer's return code is
    /// not 0) or answered another one.
    PmiRefused {
        /// The request (`init`, `put converse-key`, ...).
        request: String,
        /// The launcher's answer.
        answer: Answer,
    },
    /// A value does not fit the PMI-1 launcher's key-value space.
    PmiTooLarge {
        /// The key.
        key: String,
        /// The value's length in bytes.
        len: usize,
        /// The longest key the launcher takes.
        max_key: usize,
        /// The longest value the launcher takes.
        max_value: usize,
    },
    /// A PMIx launcher started this process but its client library cannot
    /// be loaded.
    PmixLibrary {
        /// The job's namespace (`PMIX_NAMESPACE`).
        namespace: String,
        /// Why the library cannot be loaded (`dlerror`'s words).
        why: String,
    },
    /// A call of the PMIx library failed.
    Pmix {
        /// The call (`init`, `fence`, `get converse-key of rank 0`, ...).
        call: String,
        /// PMIx's status code.
        status: i32,
        /// PMIx's words for it (`PMIx_Error_string`), if it gave any.
        words: Option<String>,
    },
    /// MPI failed during start-up.
    Mpi(NetError),
    /// No answer came from the launcher by `++timeout` to the request for
    /// process `peer`'s business card.
    CardTimeout {
        /// The process whose card was asked for.
        peer: usize,
        /// The wait, in seconds (`++timeout`).
        secs: u64,
    },
    /// Process `peer`'s business card cannot be learnt: nothing reads the
    /// launcher's connection any more, because of `cause`.
    Card {
        /// The process whose card was asked for.
        peer: usize,
        /// Why the connection is no use.
        cause: Box<BootstrapError>,
    },
    /// Start-up cannot be declared over: the launcher's connection is no
    /// use any more, because of the cause.
    NotJoined(Box<BootstrapError>),
    /// A bootstrap step taken twice (a fault of the runtime): which.
    Twice(&'static str),
}

impl BootstrapError {
    /// A connection failure `what`, caused by `e`.
    pub(crate) fn io(what: impl Into<String>, e: std::io::Error) -> BootstrapError {
        BootstrapError::Connection {
            what: what.into(),
            source: Some(e.into()),
        }
    }

    /// A protocol error `what`, with no parse error underneath.
    pub(crate) fn protocol(what: impl Into<String>) -> BootstrapError {
        BootstrapError::Protocol {
            what: what.into(),
            source: None,
        }
    }

    /// The return code the launcher gave, for a PMI-1 request it refused
    /// or a PMIx call that failed.
    pub fn return_code(&self) -> Option<i64> {
        match self {
            BootstrapError::PmiRefused {
                answer:
                    Answer::Init { rc } | Answer::PutResult { rc, .. } | Answer::GetResult { rc, .. },
                ..
            } => Some(*rc),
            BootstrapError::Pmix { status, .. } => Some(i64::from(*status)),
            _ => None,
        }
    }
}

impl fmt::Display for BootstrapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BootstrapError::Environment(e) => e.fmt(f),
            BootstrapError::Launcher(why) => f.write_str(why),
            BootstrapError::Taken(what) => {
                write!(f, "{what} is taken by an earlier job of this process")
            }
            BootstrapError::Random { what, source } => write!(f, "cannot draw {what}: {source}"),
            BootstrapError::Connection { what, source } => match source {
                Some(e) => write!(f, "{what}: {e}"),
                None => f.write_str(what),
            },
            BootstrapError::Protocol { what, .. } => f.write_str(what),
            BootstrapError::Impostor { launcher } => write!(
                f,
                "the launcher at {launcher} does not prove the job key: not the job's launcher"
            ),
            BootstrapError::Aborted(why) => {
                write!(f, "the launcher ended the job during start-up: {why}")
            }
            BootstrapError::PmiLine(e) => e.fmt(f),
            BootstrapError::PmiRefused { request, answer } => {
                write!(f, "the launcher refused PMI `{request}`: {answer:?}")
            }
            BootstrapError::PmiTooLarge {
                key,
                len,
                max_key,
                max_value,
            } => write!(
                f,
                "{key} ({len} bytes) does not fit the launcher's key-value space \
                 (keys of {max_key} bytes, values of {max_value})"
            ),
            BootstrapError::PmixLibrary { namespace, why } => write!(
                f,
                "started by a PMIx launcher (PMIX_NAMESPACE={}), but {why}: install PMIx's \
                 client library (Debian's libpmix2), or name it in {}",
                launch_wire::shown(namespace),
                super::pmix::LIBRARY_VAR
            ),
            BootstrapError::Pmix {
                call,
                status,
                words,
            } => match words {
                Some(words) => write!(f, "PMIx {call} failed: {words} ({status})"),
                None => write!(f, "PMIx {call} failed: status {status}"),
            },
            BootstrapError::Mpi(e) => e.fmt(f),
            BootstrapError::CardTimeout { peer, secs } => write!(
                f,
                "no answer from the launcher within {secs} s (++timeout) to the request for \
                 process {peer}'s business card"
            ),
            BootstrapError::Card { peer, cause } => {
                write!(f, "cannot learn process {peer}'s business card: {cause}")
            }
            BootstrapError::NotJoined(cause) => write!(f, "cannot join: {cause}"),
            BootstrapError::Twice(what) => f.write_str(what),
        }
    }
}

impl std::error::Error for BootstrapError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BootstrapError::Environment(e) => Some(e),
            BootstrapError::Random { source, .. } => Some(source.get()),
            BootstrapError::Connection { source, .. } => source
                .as_ref()
                .map(|e| e.get() as &(dyn std::error::Error + 'static)),
            BootstrapError::Protocol { source, .. } => source
                .as_ref()
                .map(|e| e as &(dyn std::error::Error + 'static)),
            BootstrapError::PmiLine(e) => Some(e),
            BootstrapError::Mpi(e) => Some(e),
            BootstrapError::Card { cause, .. } | BootstrapError::NotJoined(cause) => {
                Some(cause.as_ref())
            }
            _ => None,
        }
    }
}

/// Why a process its launcher placed could not join the job: its
/// bootstrap (publishing its business card, the start barrier) or its
/// network (the modules its VCs need). Its message is the inner error's.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum JoinError {
    /// The bootstrap failed.
    Bootstrap(BootstrapError),
    /// The network could not be set up.
    Network(NetworkError),
}

impl JoinError {
    /// The inner error.
    pub(crate) fn inner(&self) -> &(dyn std::error::Error + 'static) {
        match self {
            JoinError::Bootstrap(e) => e,
            JoinError::Network(e) => e,
        }
    }
}

impl fmt::Display for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JoinError::Bootstrap(e) => e.fmt(f),
            JoinError::Network(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for JoinError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.inner())
    }
}

impl From<BootstrapError> for JoinError {
    fn from(e: BootstrapError) -> JoinError {
        JoinError::Bootstrap(e)
    }
}

impl From<NetworkError> for JoinError {
    fn from(e: NetworkError) -> JoinError {
        JoinError::Network(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;
    use std::io::ErrorKind;

    #[test]
    fn a_connection_error_says_what_failed_over_its_io_error() {
        let e = BootstrapError::io(
            "cannot reach the launcher at 10.0.0.1:7000",
            std::io::Error::new(ErrorKind::ConnectionRefused, "refused"),
        );
        assert_eq!(
            e.to_string(),
            "cannot reach the launcher at 10.0.0.1:7000: refused"
        );
        let io = e.source().unwrap().downcast_ref::<std::io::Error>();
        assert_eq!(
            io.map(std::io::Error::kind),
            Some(ErrorKind::ConnectionRefused)
        );
        // Cloned and compared by the I/O error's kind and words.
        assert_eq!(e.clone(), e);
        let other = BootstrapError::io(
            "cannot reach the launcher at 10.0.0.1:7000",
            std::io::Error::new(ErrorKind::TimedOut, "refused"),
        );
        assert_ne!(e, other);
    }

    #[test]
    fn an_environment_error_is_the_launch_protocols_own() {
        let e = BootstrapError::Environment(launch_wire::Error::NotANumber("CONVERSE_NODES"));
        assert_eq!(e.to_string(), "CONVERSE_NODES is not a number");
        let wire = e.source().unwrap().downcast_ref::<launch_wire::Error>();
        assert_eq!(
            wire,
            Some(&launch_wire::Error::NotANumber("CONVERSE_NODES"))
        );
    }

    #[test]
    fn an_unexpected_line_carries_why_it_does_not_parse() {
        let parse = launch_wire::ToProcess::parse("launch missiles").unwrap_err();
        let e = BootstrapError::Protocol {
            what: "unexpected line from the launcher: launch missiles".into(),
            source: Some(parse.clone()),
        };
        assert_eq!(
            e.to_string(),
            "unexpected line from the launcher: launch missiles"
        );
        let source = e.source().unwrap().downcast_ref::<launch_wire::Error>();
        assert_eq!(source, Some(&parse));
        assert!(BootstrapError::protocol("no").source().is_none());
        let e = BootstrapError::Impostor {
            launcher: "127.0.0.1:9".into(),
        };
        assert_eq!(
            e.to_string(),
            "the launcher at 127.0.0.1:9 does not prove the job key: not the job's launcher"
        );
        assert_eq!(
            BootstrapError::Aborted("process 2 failed".into()).to_string(),
            "the launcher ended the job during start-up: process 2 failed"
        );
    }

    #[test]
    fn a_card_that_cannot_be_learnt_chains_to_why() {
        let closed = BootstrapError::Connection {
            what: "the launcher closed the connection during start-up".into(),
            source: None,
        };
        let e = BootstrapError::Card {
            peer: 3,
            cause: Box::new(closed.clone()),
        };
        assert_eq!(
            e.to_string(),
            "cannot learn process 3's business card: the launcher closed the connection \
             during start-up"
        );
        let cause = e.source().unwrap().downcast_ref::<BootstrapError>();
        assert_eq!(cause, Some(&closed));
        assert!(cause.unwrap().source().is_none());
        assert_eq!(
            BootstrapError::NotJoined(Box::new(closed)).to_string(),
            "cannot join: the launcher closed the connection during start-up"
        );
        assert_eq!(
            BootstrapError::CardTimeout { peer: 5, secs: 2 }.to_string(),
            "no answer from the launcher within 2 s (++timeout) to the request for process \
             5's business card"
        );
    }

    #[test]
    fn pmi_and_pmix_failures_keep_their_return_codes() {
        let e = BootstrapError::PmiRefused {
            request: "put converse-key".into(),
            answer: Answer::PutResult {
                rc: -1,
                msg: "full".into(),
            },
        };
        assert_eq!(e.return_code(), Some(-1));
        assert_eq!(
            e.to_string(),
            "the launcher refused PMI `put converse-key`: PutResult { rc: -1, msg: \"full\" }"
        );
        let other = BootstrapError::PmiRefused {
            request: "barrier_in".into(),
            answer: Answer::FinalizeAck,
        };
        assert_eq!(other.return_code(), None);
        let e = BootstrapError::Pmix {
            call: "fence".into(),
            status: -24,
            words: Some("TIMEOUT".into()),
        };
        assert_eq!(e.to_string(), "PMIx fence failed: TIMEOUT (-24)");
        assert_eq!(e.return_code(), Some(-24));
        let e = BootstrapError::Pmix {
            call: "init".into(),
            status: -1,
            words: None,
        };
        assert_eq!(e.to_string(), "PMIx init failed: status -1");
        let line = launch_wire::pmi::Answer::parse("cmd=launch_missiles").unwrap_err();
        let e = BootstrapError::PmiLine(line.clone());
        assert_eq!(e.to_string(), line.to_string());
        assert!(e.source().unwrap().is::<launch_wire::pmi::Error>());
        assert_eq!(
            BootstrapError::PmixLibrary {
                namespace: "job\n1".into(),
                why: "cannot load the PMIx library x.so: no such file".into(),
            }
            .to_string(),
            "started by a PMIx launcher (PMIX_NAMESPACE=job\\n1), but cannot load the PMIx \
             library x.so: no such file: install PMIx's client library (Debian's libpmix2), \
             or name it in CONVERSE_PMIX_LIBRARY"
        );
    }

    #[test]
    fn a_join_error_reads_as_its_cause() {
        let random = BootstrapError::Random {
            what: "the job key",
            source: std::io::Error::other("no entropy").into(),
        };
        assert_eq!(random.to_string(), "cannot draw the job key: no entropy");
        let e = JoinError::from(random.clone());
        assert_eq!(e.to_string(), random.to_string());
        assert_eq!(
            e.source().unwrap().downcast_ref::<BootstrapError>(),
            Some(&random)
        );
        let net = NetworkError::UnknownLmt { name: "put".into() };
        let e = JoinError::from(net.clone());
        assert_eq!(e.to_string(), "++lmt put: no such large-message mode");
        assert_eq!(
            e.source().unwrap().downcast_ref::<NetworkError>(),
            Some(&net)
        );
    }
}
