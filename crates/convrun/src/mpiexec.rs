//! `convrun ++mpiexec`: the job is started by the system's MPI launcher
//! (as charmrun's `++mpiexec` does) rather than by `convrun` itself. The
//! command is `mpiexec -n NODES program args… +p N ++ppn M` (the
//! `++remote-shell` command in place of `mpiexec` when given, with
//! `++netmod` and `++timeout` passed on); `convrun` prints it, runs it
//! with this terminal, and exits with its code. The processes then join
//! through the launcher's PMI-1 key-value space (the core's `pmi`
//! bootstrap), not through `convrun`'s control socket.
use std::process::Command;

use crate::fail;
use crate::flags::Options;

/// The launcher's command line for `opts`.
pub fn command(opts: &Options) -> Vec<String> {
    let mut cmd: Vec<String> = match &opts.remote_shell {
        Some(shell) => shell.clone(),
        None => vec!["mpiexec".into()],
    };
    cmd.extend(["-n".into(), (opts.pes / opts.ppn).to_string()]);
    cmd.extend(opts.command.iter().cloned());
    if let Some(netmod) = &opts.netmod {
        cmd.extend(["++netmod".into(), netmod.clone()]);
    }
    if opts.timeout != launch_wire::DEFAULT_TIMEOUT_SECS {
        cmd.extend(["++timeout".into(), opts.timeout.to_string()]);
    }
    cmd
}

/// Runs the job through the MPI launcher and exits with its code.
pub fn run(opts: &Options) -> ! {
    if opts.nodelist.is_some() || opts.virtual_hosts.is_some() {
        fail(
            "++mpiexec places the processes by the MPI launcher's own means: drop ++nodelist and ++virtual-hosts",
        );
    }
    let cmd = command(opts);
    eprintln!("convrun: running {}", cmd.join(" "));
    let status = Command::new(&cmd[0])
        .args(&cmd[1..])
        .status()
        .unwrap_or_else(|e| fail(&format!("cannot run {}: {e}", cmd[0])));
    use std::os::unix::process::ExitStatusExt;
    let code = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    std::process::exit(code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags::parse_args;

    fn words(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    #[test]
    fn the_command_runs_a_rank_per_process_with_the_layout_flags() {
        let o = parse_args(words("+p 4 ++ppn 2 ++mpiexec ++netmod tcp prog a b"));
        assert!(o.mpiexec);
        assert_eq!(
            command(&o),
            words("mpiexec -n 2 prog a b +p 4 ++ppn 2 ++netmod tcp")
        );
        let o = parse_args(words("++mpiexec ++remote-shell srun ++timeout 9 +p 3 prog"));
        assert_eq!(command(&o), words("srun -n 3 prog +p 3 ++timeout 9"));
    }
}
