//! The launcher protocol: what `convrun` (the launcher) and the processes
//! of a Converse job it starts tell each other, as data.
//!
//! Both ends use this crate: `convrun` and the core's process side
//! (`converse::machine::launch`), so the two cannot drift apart. Nothing
//! here does I/O but reading random bytes for keys and nonces: the callers
//! read and write; this crate names, encodes, and checks.
//!
//! # The protocol
//!
//! `convrun` starts each process with the environment variables of
//! [`mod@env`] (the [`Placement`] of that process). The process then:
//!
//! 1. initializes its network modules and gets its business card (with
//!    `auto`, the cards of both modules, comma-separated: a peer takes the
//!    one of the module it reaches this process with);
//! 2. connects to the launcher's control socket, reads its
//!    `challenge NONCE` ([`ToProcess::Challenge`]) and writes
//!    `hello NODE PID CARD NONCE PROOF` ([`ToLauncher::Hello`]): its own
//!    fresh nonce and its proof of holding the job key over both nonces
//!    and the other fields ([`JobKey::hello_proof`]). The launcher refuses
//!    a hello whose proof does not hold (and logs it; the job goes on),
//!    else answers `welcome PROOF` ([`ToProcess::Welcome`],
//!    [`JobKey::welcome_proof`]), which the process checks in turn: each
//!    end knows the other holds the key, and the key never travels (see
//!    [`auth`]);
//! 3. reads `go` ([`ToProcess::Go`]) once every process has said hello:
//!    the start barrier. No line carries every card;
//! 4. learns a peer's card when it needs it (to connect to the peer):
//!    `whois NODE` ([`ToLauncher::WhoIs`]) asks, any time after `go` and
//!    from any of its threads, and the launcher answers
//!    `card NODE CARD` ([`ToProcess::Card`]) on the same connection (a
//!    process may have several requests out at once: it matches an answer
//!    to its request by NODE). A
//!    NODE naming no process of the job is the asking process's fault: the
//!    launcher tells it `abort` naming the number and ends the job;
//! 5. keeps the launcher connection open: besides the `card` answers, a
//!    line `abort TEXT` ([`ToProcess::Abort`]) ends the process (another
//!    one failed), and the end of the stream means the launcher is gone,
//!    which ends the process too;
//! 6. before it exits, says how: `end` ([`ToLauncher::End`]: its part of
//!    the job is done; its exit code is the one chosen), `lost`
//!    ([`ToLauncher::Lost`]: it ends because another process failed) or
//!    `failed TEXT` ([`ToLauncher::Failed`]: it ends the job because of
//!    what `TEXT` says). A process that says neither `end` nor `lost`
//!    failed on its own (it died, aborted, or left outside the runtime):
//!    the launcher reports it, its exit code becomes the job's, and the
//!    others are told its `TEXT` if it gave one.
//!
//! Every step has a deadline (`++timeout`, [`env::TIMEOUT`]), each `whois`
//! its own. Nothing per process grows with the job's size: the launcher
//! keeps one card per process and answers each request with one line.
//!
//! A job started by an MPI launcher instead (MPICH's `mpiexec`) joins
//! through that launcher's key-value space: [`pmi`] holds its PMI-1 lines.
//!
//! # Invariants
//!
//! - A line is words separated by single spaces, ended by `\n`; the first
//!   word names it (an `abort` or `failed` text may hold any printable
//!   UTF-8). [`ToLauncher::encode`] and [`ToProcess::encode`] produce
//!   exactly that, and `parse` gives back what was encoded. It also takes a
//!   few harmless near forms, each meaning the same line: a `\r` before the
//!   `\n`, numbers with leading zeros, and `abort` or `failed` alone for an
//!   empty text.
//! - Nothing from the other end is trusted: `parse` and
//!   [`Placement::from_env`] never panic, check every length against the
//!   limits below before keeping anything, and say in their error what was
//!   wrong (the variable, or the line's kind and field).
//! - A reader bounds its reads with [`ToLauncher::MAX_LEN`] and
//!   [`ToProcess::MAX_LEN`] (neither depends on the job's size), so that an
//!   endless line costs no more memory than a long valid one.
pub mod auth;
pub mod env;
mod error;
mod line;
pub mod pmi;

pub use auth::{JobKey, Nonce, Proof, Role};
pub use env::{DEFAULT_TIMEOUT_SECS, Placement};
pub use error::{Error, shown};
pub use line::{Card, MAX_CARD, MAX_TEXT, ToLauncher, ToProcess};
