//! `convrun`, the launcher of multi-process Converse jobs.
//!
//! ```text
//! convrun +p N [++ppn M] [++local] [++nodelist FILE] [++netmod shm|tcp|auto]
//!         [++remote-shell CMD] [++timeout S] [++virtual-hosts N] [++no-aslr] [++verbose]
//!         program [args...]
//! ```
//!
//! Starts `N / M` processes of `M` PEs each (locally, or on the hosts of a
//! charmrun-style nodelist over ssh), starts them together once all have
//! joined and tells each the business card of any other it asks for, one at
//! a time (the protocol is the `launch-wire` crate's), forwards their standard
//! output and error line by line (a line of up to 64 KiB is never cut by
//! another process's output; a longer one goes out in 64 KiB pieces, so
//! that it costs no more memory), and exits with the job's exit code: the
//! first non-zero one a process returned (128 + the signal for a process
//! killed by one), else 0.
//!
//! Faults: a process that dies while the others run is reported with its PEs
//! and how it died; the others are told, and killed if they have not ended 5
//! seconds later. A process that has not joined the job after `++timeout`
//! seconds (default 60) fails the start-up, naming it. Ctrl-C, SIGTERM or
//! SIGHUP to `convrun` end the whole job.
//!
//! Network modules: `++netmod shm` (every process on one host), `tcp`
//! (anywhere), or `auto` (shm between the processes of one host, tcp
//! between hosts). The default is shm when the whole job is on one host,
//! else auto. Hosts are told apart by their nodelist names (`localhost`,
//! `127.0.0.1` and `::1` are one, this host); each process learns the host
//! of every other (`CONVERSE_HOSTS`). `++virtual-hosts N` splits each host
//! into N pretend ones (process `n` on the `n % N`-th), so that one machine
//! runs a job laid out as on a cluster: shm within a pretend host, tcp
//! between them.
//!
//! Runtime flags (`+p`, `++ppn`, and the program's other `+` flags) are
//! passed on to the program; `convrun`'s own (`++local`, `++nodelist`,
//! `++netmod`, `++remote-shell`, `++timeout`, `++virtual-hosts`,
//! `++verbose`) are not.
//!
//! # Remote hosts
//!
//! The nodelist is charmrun's: `host NAME` lines (processes go to the hosts
//! in turn), `group NAME` lines, and `++shell CMD` options on a `host` line
//! (that host), a `group` line (its hosts) or a line of its own (every host
//! after it); other options are accepted and ignored, `#` lines and blank
//! ones too; any other line is skipped with a warning naming the file and
//! the line's number. `localhost`, `127.0.0.1` and `::1` are this host:
//! their processes are started directly. Every other host's process is
//! started with the remote shell: the host's `++shell` if the nodelist
//! gives one (one word: a program, or a script that calls ssh with
//! options), else `++remote-shell CMD` (split on whitespace, no quoting:
//! `++remote-shell "ssh -F my_config"`), else `ssh -o BatchMode=yes`
//! (never a password prompt). It is run as
//! `CMD... HOST COMMAND`, COMMAND being one argument: a POSIX `sh` command
//! line, which ssh hands to the login shell there. COMMAND changes to
//! `convrun`'s working directory, sets the protocol's variables and those of
//! `convrun`'s environment named `CONVERSE_*` or `RUST_BACKTRACE` (a local
//! process inherits the whole environment), runs the program with its
//! arguments quoted for the shell, and kills the program if the remote
//! shell's connection is gone (the remote shell was killed, or `convrun`
//! died), so a process that never joined the job is not left behind.
//! Standard input of every process is empty.
//!
//! A remote process reaches the launcher at the address this host uses
//! towards its host (asked of the routing table; no packet is sent), or at
//! this host's name if that fails. A remote shell's own failures are
//! reported with the host's name (ssh exits with 255 when it cannot connect
//! or log in; 127 means the program was not found there, and 128 + N is how
//! the remote shell reports a process killed by signal N).
//!
//! # The code
//!
//! `main` runs the job in order, one module per step: [`flags`] (the
//! command line), [`signals`] (Ctrl-C and friends), [`hosts`] (where each
//! process runs and how the processes and the launcher reach each other;
//! the nodelist file is [`nodelist`]'s),
//! [`spawn`] (starting the processes, locally or through the remote shell,
//! and [`output`] forwarding), [`control`] (the control socket: hellos and
//! `go`, then watching the job), [`job`] (the processes, their links and
//! the cards they ask for, and ending them)
//! and [`status`] (how each process ended, what is reported, the exit
//! code). The protocol's words are `launch_wire`'s; everything of the core
//! it needs is its public API.
//!
//! # Concurrency
//!
//! One thread runs the job, sleeping in `epoll_wait(2)` between its steps
//! and handling only the events that came ([`wake`]); two threads forward
//! the processes' output streams, one the stdouts, one the stderrs
//! ([`output`]); the signal handler only stores a number and wakes the
//! job's thread ([`signals`]).
mod control;
mod flags;
mod hosts;
mod job;
mod mpiexec;
mod nodelist;
mod output;
mod signals;
mod spawn;
mod status;
mod wake;

/// Says `msg` and exits with 1: a mistake on the command line or in the
/// nodelist, or a launcher that cannot work (nothing was started yet, or
/// what was is left to the processes' own deadlines).
fn fail(msg: &str) -> ! {
    eprintln!("convrun: {msg}");
    std::process::exit(1)
}

/// A random number from the operating system's random source (a nonce's
/// first bytes).
fn random_u64() -> u64 {
    let nonce = launch_wire::Nonce::generate()
        .unwrap_or_else(|e| fail(&format!("cannot read random bytes for the job: {e}")));
    u64::from_le_bytes(nonce.as_bytes()[..8].try_into().expect("8 of 16 bytes"))
}

/// Raises the soft limit on open descriptors to the hard one: the launcher
/// holds four or five per process (two output pipes, the control link, a
/// pidfd, a remote shell's standard input), so a job of a few hundred
/// processes would pass the usual soft limit of 1024.
fn raise_descriptor_limit() {
    // SAFETY: getrlimit/setrlimit on a live local struct.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

fn main() {
    let opts = flags::parse_args(std::env::args().skip(1).collect());
    if opts.mpiexec {
        if opts.no_aslr {
            // Inherited by `mpiexec` and the processes it starts here.
            // SAFETY: a plain system call on this process's own flags.
            if unsafe { libc::personality(libc::ADDR_NO_RANDOMIZE as libc::c_ulong) } == -1 {
                fail(&format!(
                    "++no-aslr: cannot turn address-space randomisation off: {}",
                    std::io::Error::last_os_error()
                ));
            }
        }
        mpiexec::run(&opts);
    }
    signals::install();
    raise_descriptor_limit();
    let plan = hosts::plan(&opts);
    let control = control::Control::open(&plan);
    let key = launch_wire::JobKey::generate()
        .unwrap_or_else(|e| fail(&format!("cannot draw the job key: {e}")));
    // Drawn apart from the key: segment names are listable by anyone.
    let shm_id = random_u64();
    if opts.verbose {
        eprintln!(
            "convrun: {} PEs in {} processes of {} on {} host(s), netmod {}, control {}",
            opts.pes,
            plan.nodes(),
            opts.ppn,
            plan.hosts.len(),
            plan.netmod,
            control.local_addr()
        );
    }
    let mut job = job::Job::new(opts, key, shm_id)
        .unwrap_or_else(|e| fail(&format!("cannot watch the job's events (epoll): {e}")));
    spawn::start_all(&mut job, &plan, &control);
    control.start_up(&mut job);
    control::watch(&mut job);
    job.finish();
}
