//! Starting the job's processes: directly on this host, else through the
//! remote shell, each with its place in the environment (the protocol's
//! variables, `launch_wire::Placement::to_env`).
//!
//! # Invariants
//!
//! - A local process inherits `convrun`'s whole environment; a remote one
//!   gets the protocol's variables and those of [`FORWARDED_PREFIX`] and
//!   [`FORWARDED_VARS`] (valid shell names only), on the command line the
//!   remote shell runs ([`remote_command`]), every value quoted for `sh`,
//!   except the job key: a command line is visible to every user of
//!   both hosts (`ps`), so the key goes as the first line of the remote
//!   shell's standard input ([`SECRET_VARS`]).
//! - A remote process dies when its remote shell's connection does (the
//!   launcher holds the shell's standard input open and writes nothing
//!   after the key).
//! - If one process cannot be started, those started before are killed
//!   and `convrun` exits with 1: none is left waiting for it.
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use crate::control::Control;
use crate::flags::Options;
use crate::hosts::{Plan, is_local_host};
use crate::job::{Job, Proc};
use crate::nodelist::Host;
use crate::output::{Source, forward_all};

/// The remote shell when neither `++remote-shell` nor the nodelist names one.
const DEFAULT_REMOTE_SHELL: &[&str] = &["ssh", "-o", "BatchMode=yes"];

/// Variables of `convrun`'s environment that a remote process gets too
/// (besides the protocol's), by name prefix or whole name.
const FORWARDED_PREFIX: &str = "CONVERSE_";
const FORWARDED_VARS: &[&str] = &["RUST_BACKTRACE"];

/// Protocol variables a remote process reads from its standard input (one
/// line) instead of its command line.
const SECRET_VARS: &[&str] = &[launch_wire::env::KEY];

/// The remote shell command that reaches `host` (see `convrun`'s top
/// comment).
fn remote_shell(opts: &Options, host: &Host) -> Vec<String> {
    match (&host.shell, &opts.remote_shell) {
        (Some(shell), _) => vec![shell.clone()],
        (None, Some(cmd)) => cmd.clone(),
        (None, None) => DEFAULT_REMOTE_SHELL.iter().map(|s| s.to_string()).collect(),
    }
}

/// True for a name the shell takes as a variable assignment's.
fn is_shell_name(name: &str) -> bool {
    let mut b = name.bytes();
    matches!(b.next(), Some(c) if c == b'_' || c.is_ascii_alphabetic())
        && b.all(|c| c == b'_' || c.is_ascii_alphanumeric())
}

/// The variables of our environment a remote process gets too: `CONVERSE_*`
/// and `FORWARDED_VARS`, except the protocol's own (set by `spawn`).
fn forwarded_env(protocol: &[(&str, String)]) -> Vec<(String, String)> {
    let mut vars: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| k.starts_with(FORWARDED_PREFIX) || FORWARDED_VARS.contains(&k.as_str()))
        .filter(|(k, _)| is_shell_name(k) && !protocol.iter().any(|(p, _)| p == k))
        .collect();
    vars.sort();
    vars
}

/// What a remote process's command line sets: the forwarded variables and
/// the protocol's, but not the [`SECRET_VARS`].
fn remote_env(protocol: &[(&str, String)]) -> Vec<(String, String)> {
    let mut env = forwarded_env(protocol);
    env.extend(
        protocol
            .iter()
            .filter(|(k, _)| !SECRET_VARS.contains(k))
            .map(|(k, v)| (k.to_string(), v.clone())),
    );
    env
}

/// The command line the remote shell runs on the host: a POSIX `sh`
/// script, itself quoted, so that the login shell there (whichever it is)
/// only has to run `exec /bin/sh -c '...'`.
///
/// The script first reads the [`SECRET_VARS`] from its standard input, one
/// line each, and exports them (so they never appear in a command line);
/// then it changes to `dir`, starts the program in the background with
/// `env` set and its standard input empty, and waits for it; its exit code
/// (128 + N for a program killed by signal N) is the script's, which ssh
/// returns as its own. Meanwhile a watcher reads the script's standard
/// input, which is the remote shell's connection: `convrun` writes nothing
/// to it after the secrets, so the read returns only when the connection
/// is gone (`convrun` killed the remote shell, or died), and the watcher
/// then kills the program. Without it a remote process that never joined the job would
/// outlive the job (sshd does not signal a command without a terminal).
fn remote_command(dir: &str, env: &[(String, String)], command: &[String]) -> String {
    let mut run = String::new();
    for (k, v) in env {
        run.push_str(&format!("{k}={} ", shell_quote(v)));
    }
    let words: Vec<String> = command.iter().map(|w| shell_quote(w)).collect();
    run.push_str(&words.join(" "));
    let mut secrets = String::new();
    for name in SECRET_VARS {
        secrets.push_str(&format!("IFS= read -r {name} || exit 1; export {name}; "));
    }
    let script = format!(
        "{secrets}cd {} || exit; exec 3<&0 </dev/null; \
         {run} 3<&- & p=$!; \
         (read -r line <&3; kill -9 $p) >/dev/null 2>&1 & w=$!; exec 3<&-; \
         wait $p; c=$?; kill $w 2>/dev/null; exit $c",
        shell_quote(dir)
    );
    format!("exec /bin/sh -c {}", shell_quote(&script))
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Starts process `node` on `host` with the protocol's variables `envs`:
/// directly on this host, else through the remote shell. Also returns the
/// remote shell's standard input, which must stay open while the process
/// runs (its end kills the remote process).
fn spawn(
    opts: &Options,
    node: usize,
    host: &Host,
    envs: &[(&str, String)],
) -> Result<(Child, Option<ChildStdin>), String> {
    let local = is_local_host(&host.name);
    let shell = remote_shell(opts, host);
    let mut cmd = if local {
        let mut c = Command::new(&opts.command[0]);
        c.args(&opts.command[1..]);
        c.envs(envs.iter().map(|(k, v)| (k, v)));
        c.stdin(Stdio::null());
        if opts.no_aslr {
            use std::os::unix::process::CommandExt;
            // SAFETY: `personality` is async-signal-safe and touches no
            // memory of the parent's; the child execs right after.
            unsafe {
                c.pre_exec(|| {
                    if libc::personality(libc::ADDR_NO_RANDOMIZE as libc::c_ulong) == -1 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        c
    } else {
        let dir = std::env::current_dir().map_or_else(|_| ".".into(), |d| d.display().to_string());
        // Remotely, through `setarch` (util-linux).
        let command: Vec<String> = if opts.no_aslr {
            ["setarch", std::env::consts::ARCH, "-R"]
                .iter()
                .map(|s| s.to_string())
                .chain(opts.command.iter().cloned())
                .collect()
        } else {
            opts.command.clone()
        };
        let remote = remote_command(&dir, &remote_env(envs), &command);
        if opts.verbose {
            eprintln!(
                "convrun: process {node} on {}: {} {} <command>",
                host.name,
                shell.join(" "),
                host.name
            );
        }
        let mut c = Command::new(&shell[0]);
        c.args(&shell[1..]).arg(&host.name).arg(remote);
        // The secrets, then nothing: the remote side watches it for its
        // end.
        c.stdin(Stdio::piped());
        c
    };
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| {
        if local {
            format!("cannot start process {node} (`{}`): {e}", opts.command[0])
        } else {
            format!(
                "cannot start process {node} on {}: remote shell `{}`: {e}",
                host.name, shell[0]
            )
        }
    })?;
    let mut stdin = child.stdin.take();
    if let Some(pipe) = &mut stdin {
        use std::io::Write;
        let mut lines = String::new();
        for name in SECRET_VARS {
            let value = envs.iter().find(|(k, _)| k == name).map_or("", |(_, v)| v);
            lines.push_str(value);
            lines.push('\n');
        }
        match pipe.write_all(lines.as_bytes()) {
            Ok(()) => {}
            // The remote shell has already exited (it could not reach the
            // host, say): its exit code, which the launcher reports with
            // the host named, says why better than the closed pipe.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => stdin = None,
            Err(e) => {
                return Err(format!(
                    "cannot start process {node} on {}: writing to the remote shell: {e}",
                    host.name
                ));
            }
        }
    }
    Ok((child, stdin))
}

/// Starts every process of the job as `plan` places them, forwarding their
/// output; they reach the launcher through `control`.
pub fn start_all(job: &mut Job, plan: &Plan, control: &Control) {
    let nodes = plan.nodes();
    // Forwarded from when they are all started (a pipe holds 64 KiB until
    // then): the stdouts by one thread, the stderrs by another.
    let mut outputs = Vec::with_capacity(2 * nodes);
    // `CONVERSE_HOSTS` names the host of every process: written once, not
    // once per process (`Placement::to_env` would encode it for each).
    let hosts_list = launch_wire::env::hosts_value(&plan.host_of);
    for node in 0..nodes {
        let host = plan.host(node);
        let place = launch_wire::Placement {
            launcher: control.address_for(node),
            node,
            nodes,
            key: job.key.clone(),
            shm_id: job.shm_id,
            netmod: plan.netmod.clone(),
            host: plan.advertised(node).to_string(),
            // Added below, from `hosts_list`.
            hosts: None,
            timeout: Duration::from_secs(job.opts.timeout),
            host_pes: Some(plan.host_pes(node, job.opts.ppn)),
        };
        let env = env_with_hosts(&place, &hosts_list);
        let (mut child, stdin) = match spawn(&job.opts, node, host, &env) {
            Ok(started) => started,
            Err(why) => {
                // The processes started so far must not wait for this one;
                // what they said still goes out.
                forward_outputs(job, std::mem::take(&mut outputs));
                eprintln!("convrun: {why}");
                job.signal_all(libc::SIGKILL);
                job.end_all(Duration::ZERO);
                job.code = Some(1);
                job.finish();
            }
        };
        if let Some(out) = child.stdout.take() {
            outputs.push(Source {
                fd: out.into(),
                to_stderr: false,
            });
        }
        if let Some(err) = child.stderr.take() {
            outputs.push(Source {
                fd: err.into(),
                to_stderr: true,
            });
        }
        job.add_proc(Proc {
            node,
            pidfd: crate::wake::pidfd_of(&child),
            child,
            status: None,
            link: None,
            card: None,
            said: Default::default(),
            remote: (!is_local_host(&host.name)).then(|| host.name.clone()),
            _stdin: stdin,
        });
    }
    forward_outputs(job, outputs);
}

/// The variables of `place` (which has no `hosts`) and `CONVERSE_HOSTS`
/// = `hosts_list`, as `Placement::to_env` would give them with the hosts
/// in `place`.
fn env_with_hosts(place: &launch_wire::Placement, hosts_list: &str) -> Vec<(&'static str, String)> {
    let mut env = place.to_env();
    // Where `to_env` puts it: after `CONVERSE_HOST_PES`, if that is set.
    let at = usize::from(place.host_pes.is_some());
    env.insert(at, (launch_wire::env::HOSTS, hosts_list.to_string()));
    env
}

/// Starts forwarding `outputs`: one thread for the stdouts, one for the
/// stderrs (see `output`).
fn forward_outputs(job: &mut Job, outputs: Vec<Source>) {
    let (errs, outs): (Vec<Source>, Vec<Source>) = outputs.into_iter().partition(|s| s.to_stderr);
    for streams in [outs, errs] {
        if !streams.is_empty() {
            job.forwarders.push(forward_all(streams));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The job key never appears on a remote command line (visible to every
    /// user of both hosts); the script reads it from its standard input
    /// before anything else and exports it.
    #[test]
    fn the_job_key_is_not_on_the_remote_command_line() {
        let place = launch_wire::Placement {
            launcher: "10.0.0.1:4000".into(),
            node: 1,
            nodes: 2,
            key: launch_wire::JobKey::from_bytes([0xcd; 32]),
            shm_id: 7,
            netmod: "tcp".into(),
            host: "h1".into(),
            hosts: None,
            timeout: Duration::from_secs(60),
            host_pes: None,
        };
        let env = remote_env(&place.to_env());
        assert!(env.iter().all(|(k, _)| k != launch_wire::env::KEY));
        assert!(env.iter().any(|(k, _)| k == launch_wire::env::NODE));
        let line = remote_command("/tmp", &env, &["prog".into()]);
        assert!(!line.contains(&"cd".repeat(32)), "{line}");
        assert!(
            line.starts_with(
                "exec /bin/sh -c 'IFS= read -r CONVERSE_JOB_KEY || exit 1; export CONVERSE_JOB_KEY; "
            ),
            "{line}"
        );
    }

    /// The hosts list written once gives each process the variables the
    /// protocol's own `to_env` would.
    #[test]
    fn the_hosts_list_written_once_is_the_protocols() {
        let host_of = vec![0, 1, 2, 0, 1];
        for host_pes in [Some(4), None] {
            let full = launch_wire::Placement {
                launcher: "10.0.0.1:4000".into(),
                node: 3,
                nodes: 5,
                key: launch_wire::JobKey::from_bytes([0xab; 32]),
                shm_id: 9,
                netmod: "auto".into(),
                host: "h0".into(),
                hosts: Some(host_of.clone()),
                timeout: Duration::from_secs(60),
                host_pes,
            };
            let place = launch_wire::Placement {
                hosts: None,
                ..full.clone()
            };
            assert_eq!(env_with_hosts(&place, "0,1,2,0,1"), full.to_env());
        }
    }
}
