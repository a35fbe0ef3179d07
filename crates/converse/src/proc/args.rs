//! Runtime flags: parsing `+p N`, `++ppn M` and the others out of the command
//! line into the job's one [`Config`].
//!
//! Converse flags start with `+` (`+x`, `++x`). The runtime removes every flag
//! it knows before the program sees its arguments; a `+`-word it does not know
//! is an error that names it, never silently ignored. A flag's value may be
//! glued to it (`+p4`, `+p=4`) or be the next word (`+p 4`).
//!
//! # One table
//!
//! Every flag is one entry of [`FLAGS`]: its name, what value it takes,
//! a line of help, and how it sets the [`Config`]. The parser, the
//! launcher's [`takes_value`], the unknown-flag error's list and the help
//! text ([`help`], which `convrun --help` prints) are all read from it, so
//! a new flag is one entry and none of them can miss it.
//!
//! Pure functions and a constant table; no shared state.
use std::fmt;

/// The names `++lmt` takes: the shm module's large-message modes
/// (`converse_net::lmt::Mode`; start-up turns the name into the mode, and
/// a test there keeps the two lists equal).
pub const LMT_MODES: [&str; 3] = ["get", "put", "coop"];

/// The job's configuration as the runtime flags give it: one value read by
/// every subsystem (`Job::config`), each field `None` where the command line
/// is silent (the subsystem that reads it owns the default).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// `+p N`: total number of PEs, if given.
    pub pes: Option<usize>,
    /// `++ppn M`: PEs per (logical) node, if given.
    pub ppn: Option<usize>,
    /// `++spantree-branch K`: branching factor of the spanning trees, if
    /// given.
    pub branch: Option<usize>,
    /// `+stacksize S`: default stack size of user-level threads, in bytes
    /// (a `K` or `M` suffix multiplies by 1024 or 1024²).
    pub stack_size: Option<usize>,
    /// `++server` and its options: the job runs a CCS server.
    pub server: Option<ServerFlags>,
    /// `++netmod NAME`: the network module of a job started by an MPI or
    /// PMI launcher (`mpiexec`, `srun`); `convrun` takes its own
    /// `++netmod` and says it through its environment instead. Unused in
    /// one process.
    pub netmod: Option<String>,
    /// `++timeout S`: start-up deadline of a job started by an MPI or PMI
    /// launcher, in seconds (as `convrun`'s own `++timeout`).
    pub timeout: Option<u64>,
    /// `++lmt get|put|coop`: how the shm module moves large messages
    /// between processes (one of [`LMT_MODES`]; `get` unless given).
    pub lmt: Option<String>,
    /// `+balancer NAME`: the seed load-balancing strategy (the extensions'
    /// `Cld`), which checks the name against the strategies it has. The
    /// runtime only carries it.
    pub balancer: Option<String>,
    /// `+trace FILE`: record a timeline of every PE and write it to `FILE`
    /// at the end of the job (`converse::trace`).
    pub trace: Option<String>,
    /// `+trace-buffer N`: events each PE's trace ring holds (the oldest
    /// are overwritten beyond; the trace says how many).
    pub trace_buffer: Option<usize>,
    /// `+trace-exact`: time every handler start the trace records (by
    /// default a PE whose handlers are short times them in groups of about
    /// a microsecond, `trace::ring_writer`).
    pub trace_exact: bool,
    /// `+stats`: at the end of the job, process 0 prints a summary per PE
    /// (busy, idle and overhead time, messages, top handlers) to stderr
    /// (`converse::trace`).
    pub stats: bool,
    /// `+stats-plot FILE`: `+stats`, and an SVG plot of every PE's
    /// utilisation over time written to `FILE`.
    pub stats_plot: Option<String>,
    /// `+randomized_msgq [SEED]`: arrivals that Converse does not order
    /// among themselves run in a seeded random order (`csd`).
    pub randomized_msgq: Option<MsgqSeed>,
    /// `++watchdog S` (decimal seconds): when no PE of a process begins a
    /// handler for this long while work is pending, print what every PE
    /// waits for and abort (`rt::watchdog`); SIGQUIT prints the same.
    pub watchdog: Option<std::time::Duration>,
    /// `++peer-timeout S` (whole seconds): how long a peer process, or the
    /// launcher, may stay silent before the job ends naming it
    /// (`converse_net::liveness`; 30 s unless given).
    pub peer_timeout: Option<std::time::Duration>,
    /// `+setcpuaffinity`: pin every PE's thread to one processor of its
    /// host (`proc::affinity`); `+pemap` implies it.
    pub set_cpu_affinity: bool,
    /// `+pemap LIST`: the processors PEs are pinned to, taken round by
    /// each PE's rank on its host (`proc::affinity::parse_pemap`).
    pub pemap: Option<Vec<usize>>,
    /// `++help` or `--help`, `++version` or `--version`: print and exit,
    /// starting no PE ([`info_text`]).
    pub info: Option<Info>,
}

/// What `++help` and `++version` ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Info {
    /// The usage and the runtime flags ([`help`]).
    Help,
    /// The runtime's version.
    Version,
}

/// The words without `+` that the runtime also takes as its flags, as
/// programs' users expect them: `--help` is `++help`, `--version` is
/// `++version`.
const DASHED_ALIASES: [(&str, &str); 2] = [("--help", "++help"), ("--version", "++version")];

/// The environment variable that turns `+randomized_msgq` on for every
/// job started without the flag: a seed, or `draw` (how CI runs test
/// suites under it).
pub const RANDOMIZED_MSGQ_ENV: &str = "CONVERSE_RANDOMIZED_MSGQ";

/// The seed of `+randomized_msgq`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MsgqSeed {
    /// Given on the command line (`+randomized_msgq 42`).
    Given(u64),
    /// Not given: the job draws one and prints it.
    Draw,
}

/// The former name of [`Config`].
pub type Flags = Config;

/// The CCS server's flags. Any of them asks for a server.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerFlags {
    /// `++server-port N`: the port to listen on (0: any free one).
    pub port: u16,
    /// `++server-auth FILE`: the auth file (authenticated requests).
    pub auth: Option<String>,
    /// `++server-bind ADDR`: the address to listen on (default: loopback
    /// only without an auth file, every address with one).
    pub bind: Option<String>,
    /// `++server-max-request BYTES`: the largest request data accepted.
    pub max_request: Option<usize>,
    /// `++server-reply-timeout S`: how long a request may wait for its
    /// reply before its connection is closed.
    pub reply_timeout: Option<u64>,
    /// `++server-stall-timeout S` (decimal seconds): how long a client may
    /// take, in the middle of a request, to complete the next step of it
    /// (its header, then the rest) before it is closed; bytes that do not
    /// complete a step do not restart the clock.
    pub stall_timeout: Option<std::time::Duration>,
    /// `++server-max-connections N`: how many connections may be open at
    /// once. At the cap a newcomer closes the connection whose request has
    /// been incomplete the longest (never one with a whole request), and is
    /// refused only if there is none.
    pub max_connections: Option<usize>,
}

/// A command line the runtime cannot accept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgError {
    /// A `+`-word that is no runtime flag.
    UnknownFlag(String),
    /// A flag with no value after it.
    MissingValue(String),
    /// A flag whose value is not what it takes.
    BadValue {
        /// The flag.
        flag: String,
        /// What followed it.
        value: String,
        /// What it takes.
        expected: &'static str,
    },
    /// `+p` is not a multiple of `++ppn`.
    Layout {
        /// The `+p` value.
        pes: usize,
        /// The `++ppn` value.
        ppn: usize,
    },
}

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgError::UnknownFlag(flag) => write!(
                f,
                "unknown runtime flag `{flag}` (runtime flags are {})",
                usage_list()
            ),
            ArgError::MissingValue(flag) => write!(f, "runtime flag `{flag}` needs a value"),
            ArgError::BadValue {
                flag,
                value,
                expected,
            } => {
                write!(f, "runtime flag `{flag}` needs {expected}, got `{value}`")
            }
            ArgError::Layout { pes, ppn } => write!(
                f,
                "+p {pes} is not a multiple of ++ppn {ppn}: every node has ++ppn PEs"
            ),
        }
    }
}

impl std::error::Error for ArgError {}

/// Largest `++server-max-connections` (far above any descriptor limit:
/// the bound only keeps typos out).
pub const MAX_SERVER_CONNECTIONS: usize = 1 << 20;

/// Largest PE count of a job (and process count of a launcher's job): a
/// bound on PE numbers, not on memory (a PE costs about 35 KB; one
/// process of 8,192 PEs runs `bcast_reduce` in 290 MB here). Each PE is a
/// thread of its process, so the OS's limits on threads come first for a
/// one-process job: about 16,000 threads on a default Linux
/// (`vm.max_map_count` 65530 maps, four a thread; `kernel.threads-max`,
/// `ulimit -u`). Past them the job ends naming the PE it could not start
/// and those limits.
pub const MAX_PES: usize = 65536;

fn positive(flag: &str, value: &str) -> Result<usize, ArgError> {
    match value.parse::<usize>() {
        Ok(n) if (1..=MAX_PES).contains(&n) => Ok(n),
        _ => Err(ArgError::BadValue {
            flag: flag.to_string(),
            value: value.to_string(),
            expected: "a whole number from 1 to 65536",
        }),
    }
}

/// What a runtime flag takes after its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlagValue {
    /// Nothing (`+stats`).
    Nothing,
    /// A value: the next word, or glued on (`+p 4`, `+p4`, `+p=4`); what
    /// it names (`N`, `FILE`), for the usage.
    Required(&'static str),
    /// A value only if the next word is a number, or glued on with `=`
    /// (`+randomized_msgq [SEED]`); what it names.
    OptionalNumber(&'static str),
}

/// One runtime flag of [`FLAGS`].
pub struct Flag {
    /// Its name, with its `+` or `++`.
    pub name: &'static str,
    /// What it takes after it.
    pub value: FlagValue,
    /// What it does, one line.
    pub help: &'static str,
    /// Records it (and its value, if it takes one) in the configuration.
    apply: fn(&mut Config, &'static str, Option<String>) -> Result<(), ArgError>,
}

impl Flag {
    /// How the usage writes it: `+p N`, `+stats`, `+randomized_msgq [SEED]`.
    pub fn usage(&self) -> String {
        match self.value {
            FlagValue::Nothing => self.name.to_string(),
            FlagValue::Required(what) => format!("{} {what}", self.name),
            FlagValue::OptionalNumber(what) => format!("{} [{what}]", self.name),
        }
    }
}

impl fmt::Debug for Flag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Flag")
            .field("name", &self.name)
            .field("value", &self.value)
            .finish_non_exhaustive()
    }
}

/// Stores `value` in `slot`: what most flags' `apply` does.
fn set<T>(slot: &mut T, value: T) -> Result<(), ArgError> {
    *slot = value;
    Ok(())
}

/// The value of a flag that takes one (the parser gives it one).
fn given(value: Option<String>) -> String {
    value.expect("the parser gives a value to a flag that takes one")
}

/// A `BadValue` of `flag`.
fn bad(flag: &str, value: &str, expected: &'static str) -> ArgError {
    ArgError::BadValue {
        flag: flag.to_string(),
        value: value.to_string(),
        expected,
    }
}

/// `value` parsed as a `T` that `ok` accepts, else `expected`.
fn checked<T: std::str::FromStr>(
    flag: &str,
    value: &str,
    ok: impl Fn(&T) -> bool,
    expected: &'static str,
) -> Result<T, ArgError> {
    value
        .parse()
        .ok()
        .filter(|v| ok(v))
        .ok_or_else(|| bad(flag, value, expected))
}

/// Decimal seconds above 0 (`++watchdog`, `++server-stall-timeout`).
fn seconds(flag: &str, value: &str) -> Result<std::time::Duration, ArgError> {
    checked(
        flag,
        value,
        |&s: &f64| s > 0.0 && s <= 1e6,
        "seconds above 0 (decimals allowed)",
    )
    .map(std::time::Duration::from_secs_f64)
}

/// Whole seconds, at least 1 (`++timeout`, `++server-reply-timeout`).
fn whole_seconds(flag: &str, value: &str) -> Result<u64, ArgError> {
    checked(
        flag,
        value,
        |&s: &u64| s > 0,
        "a whole number of seconds, at least 1",
    )
}

/// A name of letters and digits (and `extra` bytes), not empty.
fn name_of(
    flag: &str,
    value: String,
    extra: &[u8],
    expected: &'static str,
) -> Result<String, ArgError> {
    if value.is_empty()
        || !value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || extra.contains(&b))
    {
        return Err(bad(flag, &value, expected));
    }
    Ok(value)
}

/// A path to write to: not empty, not a flag.
fn path_of(flag: &str, value: String, expected: &'static str) -> Result<String, ArgError> {
    if value.is_empty() || value.starts_with('+') {
        return Err(bad(flag, &value, expected));
    }
    Ok(value)
}

/// The CCS server's part of the configuration, made by any server flag.
fn server(c: &mut Config) -> &mut ServerFlags {
    c.server.get_or_insert_with(ServerFlags::default)
}

/// Every runtime flag: the parser, [`takes_value`], the unknown-flag
/// error and [`help`] all read this one table.
pub static FLAGS: &[Flag] = &[
    Flag {
        name: "+p",
        value: FlagValue::Required("N"),
        help: "the job's number of PEs",
        apply: |c, f, v| set(&mut c.pes, Some(positive(f, &given(v))?)),
    },
    Flag {
        name: "++ppn",
        value: FlagValue::Required("M"),
        help: "PEs per process (a divisor of +p)",
        apply: |c, f, v| set(&mut c.ppn, Some(positive(f, &given(v))?)),
    },
    Flag {
        name: "++spantree-branch",
        value: FlagValue::Required("K"),
        help: "branching factor of the spanning trees",
        apply: |c, f, v| set(&mut c.branch, Some(positive(f, &given(v))?)),
    },
    Flag {
        name: "+stacksize",
        value: FlagValue::Required("S"),
        help: "default stack size of user-level threads (bytes, or with K or M)",
        apply: |c, _, v| set(&mut c.stack_size, Some(stack_bytes(&given(v))?)),
    },
    Flag {
        name: "++netmod",
        value: FlagValue::Required("NAME"),
        help: "network module of a job started by mpiexec or srun",
        apply: |c, f, v| {
            let value = name_of(f, given(v), &[], "a network module's name")?;
            set(&mut c.netmod, Some(value))
        },
    },
    Flag {
        name: "++timeout",
        value: FlagValue::Required("S"),
        help: "start-up deadline of a job started by mpiexec or srun, in seconds",
        apply: |c, f, v| {
            let s = whole_seconds(f, &given(v))?;
            set(&mut c.timeout, Some(s))
        },
    },
    Flag {
        name: "++lmt",
        value: FlagValue::Required("get|put|coop"),
        help: "how the shm module moves large messages",
        apply: |c, f, v| {
            let value = given(v);
            if !LMT_MODES.contains(&value.as_str()) {
                return Err(bad(f, &value, "get, put or coop"));
            }
            set(&mut c.lmt, Some(value))
        },
    },
    Flag {
        name: "+balancer",
        value: FlagValue::Required("NAME"),
        help: "seed load-balancing strategy (the extensions' Cld)",
        apply: |c, f, v| {
            let value = name_of(f, given(v), b"-_", "a load-balancing strategy's name")?;
            set(&mut c.balancer, Some(value))
        },
    },
    Flag {
        name: "+trace",
        value: FlagValue::Required("FILE"),
        help: "record every PE's timeline and write it to FILE",
        apply: |c, f, v| {
            let value = path_of(f, given(v), "the path of the file to write the trace to")?;
            set(&mut c.trace, Some(value))
        },
    },
    Flag {
        name: "+trace-buffer",
        value: FlagValue::Required("N"),
        help: "events each PE's trace ring holds",
        apply: |c, f, v| {
            let value = given(v);
            let n = checked(
                f,
                &value,
                |n: &usize| (MIN_TRACE_BUFFER..=MAX_TRACE_BUFFER).contains(n),
                "a number of events from 16 to 268435456",
            )?;
            set(&mut c.trace_buffer, Some(n))
        },
    },
    Flag {
        name: "+trace-exact",
        value: FlagValue::Nothing,
        help: "time every handler start the trace records",
        apply: |c, _, _| set(&mut c.trace_exact, true),
    },
    Flag {
        name: "+stats",
        value: FlagValue::Nothing,
        help: "print a summary per PE at the end of the job",
        apply: |c, _, _| set(&mut c.stats, true),
    },
    Flag {
        name: "+stats-plot",
        value: FlagValue::Required("FILE"),
        help: "+stats, and an SVG plot of every PE's utilisation in FILE",
        apply: |c, f, v| {
            let value = path_of(f, given(v), "the path of the SVG file to write the plot to")?;
            c.stats = true;
            set(&mut c.stats_plot, Some(value))
        },
    },
    Flag {
        name: "+randomized_msgq",
        value: FlagValue::OptionalNumber("SEED"),
        help: "run arrivals Converse does not order in a seeded random order",
        apply: |c, f, v| {
            c.randomized_msgq = Some(match v {
                None => MsgqSeed::Draw,
                Some(v) => MsgqSeed::Given(v.parse().map_err(|_| {
                    bad(
                        f,
                        &v,
                        "a seed: a whole number from 0 to 18446744073709551615",
                    )
                })?),
            });
            Ok(())
        },
    },
    Flag {
        name: "++peer-timeout",
        value: FlagValue::Required("S"),
        help: "end the job, naming it, when a peer process or the launcher is silent for S seconds (30)",
        apply: |c, f, v| {
            let s = whole_seconds(f, &given(v))?;
            set(&mut c.peer_timeout, Some(std::time::Duration::from_secs(s)))
        },
    },
    Flag {
        name: "++watchdog",
        value: FlagValue::Required("S"),
        help: "abort, saying what every PE waits for, when no handler starts for S seconds",
        apply: |c, f, v| set(&mut c.watchdog, Some(seconds(f, &given(v))?)),
    },
    Flag {
        name: "+setcpuaffinity",
        value: FlagValue::Nothing,
        help: "pin every PE's thread to one processor of its host",
        apply: |c, _, _| set(&mut c.set_cpu_affinity, true),
    },
    Flag {
        name: "+pemap",
        value: FlagValue::Required("LIST"),
        help: "the processors PEs are pinned to (N, A-B or A-B:STRIDE, by commas)",
        apply: |c, f, v| {
            let value = given(v);
            let cpus = crate::proc::affinity::parse_pemap(&value).map_err(|_| {
                bad(
                    f,
                    &value,
                    "processors as N, A-B or A-B:STRIDE, separated by commas",
                )
            })?;
            c.set_cpu_affinity = true;
            set(&mut c.pemap, Some(cpus))
        },
    },
    Flag {
        name: "++server",
        value: FlagValue::Nothing,
        help: "run a CCS server (any ++server- flag asks for one too)",
        apply: |c, _, _| {
            server(c);
            Ok(())
        },
    },
    Flag {
        name: "++server-port",
        value: FlagValue::Required("N"),
        help: "the CCS server's port (0: any free one)",
        apply: |c, f, v| {
            let value = given(v);
            server(c).port = checked(f, &value, |_: &u16| true, "a port number from 0 to 65535")?;
            Ok(())
        },
    },
    Flag {
        name: "++server-auth",
        value: FlagValue::Required("FILE"),
        help: "the CCS auth file (authenticated requests)",
        apply: |c, _, v| set(&mut server(c).auth, Some(given(v))),
    },
    Flag {
        name: "++server-bind",
        value: FlagValue::Required("ADDR"),
        help: "the address the CCS server listens on",
        apply: |c, _, v| set(&mut server(c).bind, Some(given(v))),
    },
    Flag {
        name: "++server-max-request",
        value: FlagValue::Required("BYTES"),
        help: "the largest CCS request data accepted",
        apply: |c, f, v| {
            let value = given(v);
            let n = checked(
                f,
                &value,
                |&n: &usize| n < 1 << 29,
                "a byte count below 2^29",
            )?;
            set(&mut server(c).max_request, Some(n))
        },
    },
    Flag {
        name: "++server-reply-timeout",
        value: FlagValue::Required("S"),
        help: "how long a CCS request may wait for its reply",
        apply: |c, f, v| {
            let s = whole_seconds(f, &given(v))?;
            set(&mut server(c).reply_timeout, Some(s))
        },
    },
    Flag {
        name: "++server-stall-timeout",
        value: FlagValue::Required("S"),
        help: "how long a CCS client may take for the next step of a request",
        apply: |c, f, v| set(&mut server(c).stall_timeout, Some(seconds(f, &given(v))?)),
    },
    Flag {
        name: "++server-max-connections",
        value: FlagValue::Required("N"),
        help: "how many CCS connections may be open at once",
        apply: |c, f, v| {
            let value = given(v);
            let n = checked(
                f,
                &value,
                |n: &usize| (1..=MAX_SERVER_CONNECTIONS).contains(n),
                "a whole number from 1 to 1048576",
            )?;
            set(&mut server(c).max_connections, Some(n))
        },
    },
    Flag {
        name: "++help",
        value: FlagValue::Nothing,
        help: "print this help and exit (also --help)",
        apply: |c, _, _| set(&mut c.info, Some(Info::Help)),
    },
    Flag {
        name: "++version",
        value: FlagValue::Nothing,
        help: "print the runtime's version and exit (also --version)",
        apply: |c, _, _| set(&mut c.info, Some(Info::Version)),
    },
];

/// Splits `args` (program name first, as `std::env::args()` gives them) into
/// the runtime flags and the program's own arguments (program name kept
/// first).
pub fn parse(args: &[String]) -> Result<(Config, Vec<String>), ArgError> {
    let mut config = Config::default();
    let mut rest = Vec::with_capacity(args.len());
    let mut words = args.iter().peekable();
    if let Some(program) = words.next() {
        rest.push(program.clone());
    }
    while let Some(word) = words.next() {
        let word = DASHED_ALIASES
            .iter()
            .find(|(dashed, _)| dashed == word)
            .map_or(word.as_str(), |(_, flag)| flag);
        if !word.starts_with('+') {
            rest.push(word.to_string());
            continue;
        }
        let (flag, glued) =
            find_flag(word).ok_or_else(|| ArgError::UnknownFlag(word.to_string()))?;
        let value = match flag.value {
            FlagValue::Nothing => None,
            FlagValue::Required(_) => Some(match glued {
                Some(v) => v.to_string(),
                None => words
                    .next()
                    .cloned()
                    .ok_or_else(|| ArgError::MissingValue(flag.name.to_string()))?,
            }),
            FlagValue::OptionalNumber(_) => match glued {
                Some(v) => Some(v.to_string()),
                None => words.next_if(|next| is_seed_word(next)).cloned(),
            },
        };
        (flag.apply)(&mut config, flag.name, value)?;
    }
    if let (Some(pes), Some(ppn)) = (config.pes, config.ppn)
        && pes % ppn != 0
    {
        return Err(ArgError::Layout { pes, ppn });
    }
    Ok((config, rest))
}

/// The flag `word` is, and its value if glued on: `+p4` and `+p=4` →
/// (`+p`, `4`); `++server-port=80` → (`++server-port`, `80`);
/// `+randomized_msgq=7` → (`+randomized_msgq`, `7`). A value is glued
/// with `=`, or, for a flag that requires one, by a digit (`+pemap0-3`),
/// so `+pemap` is never `+p` with a value.
fn find_flag(word: &str) -> Option<(&'static Flag, Option<&str>)> {
    if let Some(flag) = FLAGS.iter().find(|f| f.name == word) {
        return Some((flag, None));
    }
    FLAGS.iter().find_map(|flag| {
        let tail = word.strip_prefix(flag.name)?;
        match flag.value {
            FlagValue::Nothing => None,
            _ if tail.starts_with('=') => Some((flag, Some(&tail[1..]))),
            FlagValue::Required(_) if tail.starts_with(|c: char| c.is_ascii_digit()) => {
                Some((flag, Some(tail)))
            }
            _ => None,
        }
    })
}

/// True if the runtime flag `word` takes its value as the next word: the
/// launcher (`convrun`) must not take that value for the program's name.
#[doc(hidden)]
pub fn takes_value(word: &str) -> bool {
    FLAGS
        .iter()
        .any(|f| f.name == word && matches!(f.value, FlagValue::Required(_)))
}

/// True if the runtime flag `word` takes the next word as its value when
/// that word is a number (`+randomized_msgq [SEED]`), as the launcher must
/// know too.
#[doc(hidden)]
pub fn takes_optional_value(word: &str, next: &str) -> bool {
    is_seed_word(next)
        && FLAGS
            .iter()
            .any(|f| f.name == word && matches!(f.value, FlagValue::OptionalNumber(_)))
}

/// A word that reads as a seed (digits only).
fn is_seed_word(word: &str) -> bool {
    !word.is_empty() && word.bytes().all(|b| b.is_ascii_digit())
}

/// The runtime flags as a usage list: `+p N, ++ppn M, … and ++server-max-connections N`.
pub fn usage_list() -> String {
    let forms: Vec<String> = FLAGS.iter().map(Flag::usage).collect();
    match forms.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// What a program prints for `++help`/`--help` or `++version`/`--version`
/// on its command line (`args`, program name first), or None when it asks
/// for neither (or its command line is wrong: starting says why).
pub fn info_text(args: &[String]) -> Option<String> {
    let (config, _) = parse(args).ok()?;
    let program = args
        .first()
        .map(|p| p.rsplit('/').next().unwrap_or(p))
        .unwrap_or("program");
    let version = env!("CARGO_PKG_VERSION");
    Some(match config.info? {
        Info::Help => format!(
            "usage: {program} [ARGUMENTS...] [RUNTIME FLAGS...]\n\
             {program} runs on converse-rs {version}; its arguments are its own, and the\n\
             runtime takes the flags below (convrun takes them too, and its own: convrun --help).\n\n{}",
            help()
        ),
        Info::Version => format!("{program}: converse-rs {version}\n"),
    })
}

/// The runtime flags, one a line with what it does: the help text of
/// programs and of `convrun`.
pub fn help() -> String {
    let width = FLAGS.iter().map(|f| f.usage().len()).max().unwrap_or(0);
    let mut text = String::from(
        "runtime flags (anywhere on the command line; a value may be glued on: +p4, +p=4):\n",
    );
    for flag in FLAGS {
        text.push_str(&format!("  {:width$}  {}\n", flag.usage(), flag.help));
    }
    text
}

/// Smallest and largest `+trace-buffer` (events per PE; 16 bytes each).
pub const MIN_TRACE_BUFFER: usize = 16;
/// See [`MIN_TRACE_BUFFER`].
pub const MAX_TRACE_BUFFER: usize = 1 << 28;

/// Smallest and largest `+stacksize`: 16 KiB (a few frames) to 1 GiB.
pub const MIN_STACK: usize = 16 << 10;
/// See [`MIN_STACK`].
pub const MAX_STACK: usize = 1 << 30;

/// Parses a `+stacksize` value: bytes, or with a `K`/`M` suffix.
fn stack_bytes(value: &str) -> Result<usize, ArgError> {
    let (digits, unit) = match value.as_bytes().last() {
        Some(b'k' | b'K') => (&value[..value.len() - 1], 1 << 10),
        Some(b'm' | b'M') => (&value[..value.len() - 1], 1 << 20),
        _ => (value, 1),
    };
    match digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
    {
        Some(n) if (MIN_STACK..=MAX_STACK).contains(&n) => Ok(n),
        _ => Err(ArgError::BadValue {
            flag: "+stacksize".to_string(),
            value: value.to_string(),
            expected: "a size in bytes from 16K to 1024M (suffix K or M allowed)",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn the_launcher_knows_which_flags_take_the_next_word() {
        for flag in [
            "+p",
            "++ppn",
            "+stacksize",
            "++spantree-branch",
            "+stats-plot",
        ] {
            assert!(takes_value(flag), "{flag}");
        }
        for flag in FLAGS.iter().filter(|f| f.name.starts_with("++server-")) {
            assert!(takes_value(flag.name), "{}", flag.name);
        }
        for word in [
            "+p4",
            "++server",
            "++server-port=1",
            "+foo",
            "prog",
            "+stats",
        ] {
            assert!(!takes_value(word), "{word}");
        }
    }

    #[test]
    fn help_and_version_are_answered_before_anything_starts() {
        let words = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        let help = info_text(&words("/bin/prog 12 --help +p 4")).unwrap();
        assert!(help.starts_with("usage: prog [ARGUMENTS...]"), "{help}");
        assert!(help.contains(&super::help()));
        assert_eq!(
            info_text(&words("prog ++help")),
            Some(help.replace("/bin/", ""))
        );
        let version = info_text(&words("prog --version")).unwrap();
        assert_eq!(
            version,
            format!("prog: converse-rs {}\n", env!("CARGO_PKG_VERSION"))
        );
        assert_eq!(info_text(&words("prog ++version")), Some(version));
        assert_eq!(info_text(&words("prog 12 +p 4")), None);
        // A wrong command line is starting's to report.
        assert_eq!(info_text(&words("prog --help +p x")), None);
        // The dashed words are the runtime's: the program does not see them.
        let (_, rest) = parse(&words("prog a --help b")).unwrap();
        assert_eq!(rest, words("prog a b"));
    }

    #[test]
    fn one_table_makes_the_parser_the_usage_and_the_help() {
        let help = help();
        let unknown = ArgError::UnknownFlag("+bogus".into()).to_string();
        for (i, flag) in FLAGS.iter().enumerate() {
            // Each name is its own flag, never another's with a value.
            let (found, glued) = find_flag(flag.name).expect(flag.name);
            assert!(
                std::ptr::eq(found, flag) && glued.is_none(),
                "{}",
                flag.name
            );
            assert!(
                FLAGS[i + 1..].iter().all(|f| f.name != flag.name),
                "{} twice",
                flag.name
            );
            assert!(help.contains(&flag.usage()), "{} in the help", flag.name);
            assert!(
                unknown.contains(&flag.usage()),
                "{} in the error",
                flag.name
            );
            assert_eq!(
                takes_value(flag.name),
                matches!(flag.value, FlagValue::Required(_)),
                "{}",
                flag.name
            );
            // A flag that takes a value and gets none says so.
            if let FlagValue::Required(_) = flag.value {
                assert_eq!(
                    parse(&words(&format!("prog {}", flag.name))),
                    Err(ArgError::MissingValue(flag.name.to_string()))
                );
            } else {
                let (_, rest) = parse(&words(&format!("prog {} x", flag.name))).unwrap();
                assert_eq!(rest, words("prog x"), "{}", flag.name);
            }
        }
        assert!(
            unknown.contains("+p N, ++ppn M,")
                && unknown.contains(", ++server-max-connections N, ++help and ++version)")
        );
        // A value glued with a digit or `=`, to any flag that requires one.
        let (f, _) = parse(&words("prog ++server-port=80 ++server-max-request4096")).unwrap();
        let server = f.server.unwrap();
        assert_eq!((server.port, server.max_request), (80, Some(4096)));
        // An optional value: a number that follows, or glued with `=`.
        for (line, seed) in [
            ("prog +randomized_msgq 5 x", MsgqSeed::Given(5)),
            ("prog +randomized_msgq=6 x", MsgqSeed::Given(6)),
            ("prog +randomized_msgq x", MsgqSeed::Draw),
        ] {
            let (f, rest) = parse(&words(line)).unwrap();
            assert_eq!(
                (f.randomized_msgq, rest),
                (Some(seed), words("prog x")),
                "{line}"
            );
        }
        assert!(takes_optional_value("+randomized_msgq", "5"));
        assert!(!takes_optional_value("+randomized_msgq", "x"));
        assert!(!takes_optional_value("+p", "5"));
    }

    #[test]
    fn affinity_flags_pin_and_a_pemap_implies_pinning() {
        let (f, rest) = parse(&words("prog +setcpuaffinity x")).unwrap();
        assert!(f.set_cpu_affinity && f.pemap.is_none());
        assert_eq!(rest, words("prog x"));
        for line in [
            "prog +pemap 0-3:2,1 x",
            "prog +pemap=0-3:2,1 x",
            "prog +pemap0-3:2,1 x",
        ] {
            let (f, rest) = parse(&words(line)).unwrap();
            assert!(f.set_cpu_affinity, "{line}");
            assert_eq!(f.pemap.as_deref(), Some(&[0, 2, 1][..]), "{line}");
            assert_eq!(rest, words("prog x"));
        }
        assert!(takes_value("+pemap"));
        assert!(!takes_value("+setcpuaffinity"));
        let err = parse(&words("prog +pemap 3-1")).unwrap_err().to_string();
        assert!(err.contains("+pemap") && err.contains("3-1"), "{err}");
        // `+p` still reads its own value beside `+pemap`.
        let (f, _) = parse(&words("prog +p4 +pemap 0")).unwrap();
        assert_eq!((f.pes, f.pemap.as_deref()), (Some(4), Some(&[0][..])));
    }

    #[test]
    fn trace_exact_is_a_flag_of_its_own() {
        let (f, rest) = parse(&words("prog +trace t.json +trace-exact x")).unwrap();
        assert!(f.trace_exact);
        assert_eq!(f.trace.as_deref(), Some("t.json"));
        assert_eq!(rest, words("prog x"));
        assert!(!takes_value("+trace-exact"));
        let (f, _) = parse(&words("prog +trace t.json")).unwrap();
        assert!(!f.trace_exact);
    }

    #[test]
    fn separate_and_glued_values() {
        let (f, rest) = parse(&words("prog +p 4 a ++ppn 2 b")).unwrap();
        assert_eq!(
            f,
            Config {
                pes: Some(4),
                ppn: Some(2),
                branch: None,
                stack_size: None,
                server: None,
                netmod: None,
                timeout: None,
                lmt: None,
                ..Config::default()
            }
        );
        assert_eq!(rest, words("prog a b"));
        let (f, rest) = parse(&words("prog +p8 ++ppn4 x")).unwrap();
        assert_eq!(
            f,
            Config {
                pes: Some(8),
                ppn: Some(4),
                branch: None,
                stack_size: None,
                server: None,
                netmod: None,
                timeout: None,
                lmt: None,
                ..Config::default()
            }
        );
        assert_eq!(rest, words("prog x"));
        let (f, _) = parse(&words("prog +p=3")).unwrap();
        assert_eq!(f.pes, Some(3));
        let (f, rest) = parse(&words("prog ++spantree-branch 2 y +p2")).unwrap();
        assert_eq!((f.branch, f.pes), (Some(2), Some(2)));
        assert_eq!(rest, words("prog y"));
        let (f, rest) = parse(&words("prog ++netmod shm z ++timeout=30")).unwrap();
        assert_eq!((f.netmod.as_deref(), f.timeout), (Some("shm"), Some(30)));
        assert_eq!(rest, words("prog z"));
        let (f, rest) = parse(&words("prog ++lmt put z ++lmt=coop")).unwrap();
        assert_eq!(f.lmt.as_deref(), Some("coop"));
        assert_eq!(rest, words("prog z"));
        for bad in [
            "prog ++netmod a,b",
            "prog ++timeout 0",
            "prog ++timeout x",
            "prog ++lmt rdma",
        ] {
            assert!(
                matches!(parse(&words(bad)), Err(ArgError::BadValue { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn server_flags_ask_for_a_server() {
        let (f, rest) = parse(&words("prog ++server a")).unwrap();
        assert_eq!(f.server, Some(ServerFlags::default()));
        assert_eq!(rest, words("prog a"));
        let (f, rest) = parse(&words(
            "prog ++server-port 1234 ++server-auth=keys b ++server-bind 0.0.0.0 ++server-max-request 100 ++server-reply-timeout 5 ++server-stall-timeout=0.25 ++server-max-connections=8",
        ))
        .unwrap();
        assert_eq!(
            f.server,
            Some(ServerFlags {
                port: 1234,
                auth: Some("keys".into()),
                bind: Some("0.0.0.0".into()),
                max_request: Some(100),
                reply_timeout: Some(5),
                stall_timeout: Some(std::time::Duration::from_millis(250)),
                max_connections: Some(8),
            })
        );
        assert_eq!(rest, words("prog b"));
        for bad in [
            "++server-port 70000",
            "++server-max-request x",
            "++server-reply-timeout 0",
            "++server-stall-timeout 0",
            "++server-stall-timeout -1",
            "++server-max-connections 0",
            "++server-max-connections 1048577",
        ] {
            let err = parse(&words(&format!("prog {bad}"))).unwrap_err();
            assert!(matches!(err, ArgError::BadValue { .. }), "{bad}: {err}");
        }
        assert!(matches!(
            parse(&words("prog ++server-colour red")),
            Err(ArgError::UnknownFlag(_))
        ));
        assert_eq!(
            parse(&words("prog ++server-port")).unwrap_err(),
            ArgError::MissingValue("++server-port".into())
        );
    }

    #[test]
    fn stack_sizes() {
        let (f, rest) = parse(&words("prog +stacksize 65536 a +stacksize=1M")).unwrap();
        assert_eq!(f.stack_size, Some(1 << 20));
        assert_eq!(rest, words("prog a"));
        assert_eq!(
            parse(&words("prog +stacksize64K")).unwrap().0.stack_size,
            Some(64 << 10)
        );
        for bad in ["1K", "x", "2048M", "16KK"] {
            let err = parse(&words(&format!("prog +stacksize {bad}"))).unwrap_err();
            assert!(matches!(err, ArgError::BadValue { .. }), "{bad}: {err}");
        }
        assert_eq!(
            parse(&words("prog +stacksize")).unwrap_err(),
            ArgError::MissingValue("+stacksize".into())
        );
    }

    #[test]
    fn no_flags() {
        let (f, rest) = parse(&words("prog 12 -v")).unwrap();
        assert_eq!(
            f,
            Config {
                pes: None,
                ppn: None,
                branch: None,
                stack_size: None,
                server: None,
                netmod: None,
                timeout: None,
                lmt: None,
                ..Config::default()
            }
        );
        assert_eq!(rest, words("prog 12 -v"));
        assert_eq!(parse(&[]).unwrap().1, Vec::<String>::new());
    }

    #[test]
    fn stats_flags() {
        let (f, rest) = parse(&words("prog +stats 5")).unwrap();
        assert!(f.stats && f.stats_plot.is_none());
        assert_eq!(rest, words("prog 5"));
        for line in ["prog +stats-plot u.svg 5", "prog 5 +stats-plot=u.svg"] {
            let (f, rest) = parse(&words(line)).unwrap();
            assert!(f.stats, "{line}: the plot implies the summary");
            assert_eq!(f.stats_plot.as_deref(), Some("u.svg"), "{line}");
            assert_eq!(rest, words("prog 5"));
        }
        assert_eq!(
            parse(&words("prog +stats-plot")).unwrap_err(),
            ArgError::MissingValue("+stats-plot".into())
        );
        assert!(matches!(
            parse(&words("prog +stats-plot +p")).unwrap_err(),
            ArgError::BadValue { .. }
        ));
    }

    #[test]
    fn balancer_names_are_carried() {
        for line in ["prog +balancer rand 5", "prog 5 +balancer=rand"] {
            let (f, rest) = parse(&words(line)).unwrap();
            assert_eq!(f.balancer.as_deref(), Some("rand"), "{line}");
            assert_eq!(rest, words("prog 5"));
        }
        assert!(takes_value("+balancer"));
        assert_eq!(
            parse(&words("prog +balancer")).unwrap_err(),
            ArgError::MissingValue("+balancer".into())
        );
        assert!(matches!(
            parse(&words("prog +balancer a/b")).unwrap_err(),
            ArgError::BadValue { .. }
        ));
    }

    #[test]
    fn unknown_flag_is_named() {
        let err = parse(&words("prog +bogus 3")).unwrap_err();
        assert_eq!(err, ArgError::UnknownFlag("+bogus".into()));
        assert!(err.to_string().contains("`+bogus`"));
        assert_eq!(
            parse(&words("prog +pe 3")).unwrap_err(),
            ArgError::UnknownFlag("+pe".into())
        );
    }

    #[test]
    fn bad_values() {
        for bad in [
            "prog +p 0",
            "prog +p x",
            "prog +p -2",
            "prog ++ppn 0",
            "prog +p 99999",
            "prog ++peer-timeout 0",
            "prog ++peer-timeout 1.5",
            "prog ++peer-timeout soon",
        ] {
            let err = parse(&words(bad)).unwrap_err();
            assert!(matches!(err, ArgError::BadValue { .. }), "{bad}: {err}");
        }
        assert_eq!(
            parse(&words("prog +p")).unwrap_err(),
            ArgError::MissingValue("+p".into())
        );
        assert_eq!(
            parse(&words("prog ++peer-timeout")).unwrap_err(),
            ArgError::MissingValue("++peer-timeout".into())
        );
        let (config, _) = parse(&words("prog ++peer-timeout 12")).unwrap();
        assert_eq!(
            config.peer_timeout,
            Some(std::time::Duration::from_secs(12))
        );
        assert_eq!(
            parse(&words("prog +p 6 ++ppn 4")).unwrap_err(),
            ArgError::Layout { pes: 6, ppn: 4 }
        );
    }
}
