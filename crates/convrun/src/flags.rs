//! `convrun`'s command line: its own flags (`++local`, `++nodelist`,
//! `++netmod`, `++remote-shell`, `++timeout`, `++virtual-hosts`,
//! `++verbose`), the layout (`+p`, `++ppn`), and the program's command
//! line with the runtime flags passed on.
//!
//! # Invariants
//!
//! [`parse_args`] returns only a usable [`Options`]: a program, counts of
//! at least 1, a layout the core takes (`+p` and `++ppn` from 1 to
//! `converse::machine::args::MAX_PES`, `pes` a multiple of `ppn`), a
//! `++netmod` the core knows. Anything else ends `convrun` with a message
//! and exit code 1 (`--help` with the usage and 0), before any process is
//! started. Which runtime flags take a value is the core's list
//! (`converse::machine::args::takes_value`), and the layout is checked by
//! the core's own flag parser (`converse::machine::args::parse`), so the
//! two cannot drift: a layout every process would refuse (`+p 5000`) is
//! refused here once, in the core's words, instead of by every process
//! `convrun` would have started.
use crate::fail;

/// `convrun`'s own flags, as its usage writes them, with what each does:
/// the usage line and `--help` are made from this list (the runtime
/// flags' part of `--help` from the core's table,
/// `converse::machine::args::FLAGS`).
const OWN_FLAGS: [(&str, &str); 14] = [
    ("+p N", "the job's number of PEs"),
    ("++ppn M", "PEs per process (a divisor of +p)"),
    ("++local", "start every process on this host"),
    ("++nodelist FILE", "the hosts to start processes on"),
    (
        "++netmod shm|tcp|auto",
        "how processes talk (default: shm on one host, else auto)",
    ),
    (
        "++remote-shell CMD",
        "how processes start on other hosts (default: ssh -o BatchMode=yes)",
    ),
    ("++timeout S", "start-up deadline, in seconds"),
    (
        "++peer-timeout S",
        "end the job, naming it, when a process or its host is silent for S seconds (30; the processes get it too)",
    ),
    (
        "++virtual-hosts N",
        "count process n as on host n % N (tries a cluster's layout on one machine)",
    ),
    (
        "++mpiexec",
        "start the job through mpiexec (or the ++remote-shell command)",
    ),
    (
        "++no-aslr",
        "start the processes without address-space randomisation",
    ),
    (
        "++verbose",
        "print the layout and how each remote process starts",
    ),
    ("--help", "print this and exit"),
    ("--version", "print convrun's version and exit"),
];

/// The one-line usage: `usage: convrun +p N [++ppn M] … program [args...]`.
pub fn usage() -> String {
    let mut line = String::from("usage: convrun");
    for (i, (flag, _)) in OWN_FLAGS.iter().enumerate() {
        if i == 0 {
            line.push_str(&format!(" {flag}"));
        } else {
            line.push_str(&format!(" [{flag}]"));
        }
    }
    line.push_str(" program [args...]");
    line
}

/// `--help`: the usage, `convrun`'s flags, then the runtime flags the
/// program takes (the core's table).
pub fn help() -> String {
    let width = OWN_FLAGS.iter().map(|(f, _)| f.len()).max().unwrap_or(0);
    let mut text = usage();
    text.push_str(
        "

convrun's flags (before the program):
",
    );
    for (flag, what) in OWN_FLAGS {
        text.push_str(&format!(
            "  {flag:width$}  {what}
"
        ));
    }
    text.push('\n');
    text.push_str(&converse::machine::args::help());
    text
}

pub struct Options {
    pub pes: usize,
    pub ppn: usize,
    pub local: bool,
    pub nodelist: Option<String>,
    /// `++netmod`; by default shm when every process is on one host, else
    /// auto (shm between the processes of a host, tcp between hosts).
    pub netmod: Option<String>,
    /// `++remote-shell`, split on whitespace.
    pub remote_shell: Option<Vec<String>>,
    pub timeout: u64,
    /// `++peer-timeout`: how long a process (and for the processes, a
    /// peer or the launcher) may stay silent; also passed to the program.
    pub peer_timeout: std::time::Duration,
    pub verbose: bool,
    /// `++virtual-hosts N`: process `n` counts as being on host `n % N` of
    /// its real one (tries the shm+tcp layout of a cluster on one machine).
    pub virtual_hosts: Option<usize>,
    /// `++mpiexec`: start the job through `mpiexec` (or the
    /// `++remote-shell` command) instead of starting the processes.
    pub mpiexec: bool,
    /// `++no-aslr`: start the processes with address-space randomisation
    /// off, so that the program's code is at the same address in all of
    /// them (what migrating threads between processes needs).
    pub no_aslr: bool,
    /// Program and its arguments (runtime flags included).
    pub command: Vec<String>,
}

/// The value of layout flag `flag` (`+p`, `++ppn`) as the core reads it:
/// its bounds and its error messages are the core's.
fn parse_layout(flag: &str, value: Option<String>) -> usize {
    let value = value.unwrap_or_else(|| fail(&format!("{flag} needs a value\n{}", usage())));
    let words = ["convrun".to_string(), flag.to_string(), value];
    let config = layout_config(&words);
    let n = if flag == "+p" { config.pes } else { config.ppn };
    n.expect("the core keeps the value of a layout flag it took")
}

/// `words` (a program name and layout flags) read by the core's flag
/// parser, or `convrun` ends with its message.
fn layout_config(words: &[String]) -> converse::machine::args::Config {
    match converse::machine::args::parse(words) {
        Ok((config, _)) => config,
        Err(e) => fail(&e.to_string()),
    }
}

fn parse_count(flag: &str, value: Option<String>) -> usize {
    let value = value.unwrap_or_else(|| fail(&format!("{flag} needs a value\n{}", usage())));
    match value.parse::<usize>() {
        Ok(n) if n >= 1 => n,
        _ => fail(&format!(
            "{flag} needs a whole number of at least 1, got `{value}`"
        )),
    }
}

pub fn parse_args(args: Vec<String>) -> Options {
    let mut o = Options {
        pes: 1,
        ppn: 1,
        local: false,
        nodelist: None,
        netmod: None,
        remote_shell: None,
        timeout: launch_wire::DEFAULT_TIMEOUT_SECS,
        peer_timeout: converse_net::liveness::DEFAULT_PEER_TIMEOUT,
        verbose: false,
        virtual_hosts: None,
        mpiexec: false,
        no_aslr: false,
        command: Vec::new(),
    };
    let mut words = args.into_iter().peekable();
    // Runtime flags before the program, kept for it.
    let mut flags: Vec<String> = Vec::new();
    let mut program: Option<String> = None;
    while let Some(w) = words.next() {
        // `+p4` and `+p 4`; `++ppn2` and `++ppn 2`.
        let glued = |prefix: &str| {
            w.strip_prefix(prefix)
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .map(String::from)
        };
        match w.as_str() {
            "++local" => o.local = true,
            "++verbose" => o.verbose = true,
            "++mpiexec" => o.mpiexec = true,
            "++no-aslr" => o.no_aslr = true,
            "++virtual-hosts" => o.virtual_hosts = Some(parse_count(w.as_str(), words.next())),
            "++help" | "--help" | "-h" if o.command.is_empty() => {
                print!("{}", help());
                std::process::exit(0)
            }
            "--version" if o.command.is_empty() => {
                println!("convrun {}", env!("CARGO_PKG_VERSION"));
                std::process::exit(0)
            }
            "++nodelist" => {
                o.nodelist = Some(
                    words
                        .next()
                        .unwrap_or_else(|| fail("++nodelist needs a file")),
                )
            }
            "++netmod" => {
                let m = words
                    .next()
                    .unwrap_or_else(|| fail("++netmod needs a module name"));
                // The core's own list, so the two cannot drift apart.
                let known = converse::machine::launch::netmod_names();
                if !known.contains(&m.as_str()) {
                    fail(&format!(
                        "unknown ++netmod `{m}` (this build has: {})",
                        known.join(", ")
                    ));
                }
                o.netmod = Some(m);
            }
            "++remote-shell" => {
                let cmd = words
                    .next()
                    .unwrap_or_else(|| fail("++remote-shell needs a command"));
                let cmd: Vec<String> = cmd.split_whitespace().map(String::from).collect();
                if cmd.is_empty() {
                    fail("++remote-shell needs a command, got an empty one");
                }
                o.remote_shell = Some(cmd);
            }
            "++timeout" => o.timeout = parse_count("++timeout", words.next()) as u64,
            "++peer-timeout" => {
                let s = parse_count("++peer-timeout", words.next());
                o.peer_timeout = std::time::Duration::from_secs(s as u64);
                flags.extend(["++peer-timeout".to_string(), s.to_string()]);
            }
            "+p" => {
                o.pes = parse_layout("+p", words.next());
                flags.extend(["+p".to_string(), o.pes.to_string()]);
            }
            "++ppn" => {
                o.ppn = parse_layout("++ppn", words.next());
                flags.extend(["++ppn".to_string(), o.ppn.to_string()]);
            }
            _ => {
                if let Some(v) = glued("+p") {
                    o.pes = parse_layout("+p", Some(v));
                } else if let Some(v) = glued("++ppn") {
                    o.ppn = parse_layout("++ppn", Some(v));
                }
                if program.is_none() && !w.starts_with('+') {
                    program = Some(w);
                    continue;
                }
                // The library's own list, so the two cannot drift apart.
                let takes_value = converse::machine::args::takes_value(&w);
                let target = if program.is_none() {
                    &mut flags
                } else {
                    &mut o.command
                };
                let takes_next = takes_value
                    || words.peek().is_some_and(|next| {
                        converse::machine::args::takes_optional_value(&w, next)
                    });
                target.push(w);
                if takes_next && let Some(v) = words.next() {
                    target.push(v);
                }
            }
        }
    }
    // The program first, then its own arguments as given, then the runtime
    // flags given before the program (the runtime reads them anywhere; at
    // the end they do not shift the program's positional arguments).
    let Some(program) = program else {
        fail(&format!("no program given\n{}", usage()))
    };
    o.command.insert(0, program);
    o.command.extend(flags);
    // Each value was checked alone as it came; together, by the core too
    // (`+p` a multiple of `++ppn`).
    layout_config(&[
        "convrun".to_string(),
        "+p".to_string(),
        o.pes.to_string(),
        "++ppn".to_string(),
        o.ppn.to_string(),
    ]);
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_lists_convruns_flags_then_every_runtime_flag() {
        let help = help();
        assert!(help.starts_with(&usage()));
        for (flag, _) in OWN_FLAGS {
            assert!(usage().contains(flag), "{flag} in the usage");
            assert!(help.contains(flag), "{flag} in the help");
        }
        let runtime = help.find("runtime flags").expect("the runtime's part");
        for flag in converse::machine::args::FLAGS {
            assert!(help[runtime..].contains(&flag.usage()), "{}", flag.name);
        }
    }
}
