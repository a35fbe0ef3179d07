//! Several hosts for real on one machine: each a Linux network namespace
//! with an address of its own, joined to this one by a veth pair and routed
//! through it, so that cutting a host's link makes its packets vanish (no
//! reset, no end of stream), as a partition or a dead switch would. A
//! nodelist names the hosts by address, and each host's `++shell` runs
//! the remote command inside its namespace (`ip netns exec`).
//!
//! Making namespaces takes root and `ip` (iproute2). Where they cannot be
//! made, a case says `skipped: …` and passes, unless `CONVERSE_TEST_NETNS`
//! is set (CI sets it: it runs as root), which makes it a failure.
//!
//! Everything made is removed when the [`NsHosts`] is dropped: the
//! processes left in the namespaces are killed, the namespaces and links
//! deleted, and IPv4 forwarding put back as it was.
use std::path::PathBuf;
use std::process::Command;

/// Hosts made of network namespaces (see the module comment).
pub(crate) struct NsHosts {
    /// The namespaces' names.
    names: Vec<String>,
    /// This machine's end of each host's link.
    links: Vec<String>,
    /// Each host's address.
    pub(crate) addrs: Vec<String>,
    /// Where the nodelist and the remote shells are.
    dir: PathBuf,
    /// `net.ipv4.ip_forward` before.
    forward_was: String,
}

/// Runs `cmd` (a program and its arguments); its stderr if it fails.
fn run(cmd: &[&str]) -> Result<(), String> {
    let out = Command::new(cmd[0])
        .args(&cmd[1..])
        .output()
        .map_err(|e| format!("{}: {e}", cmd.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}: {}",
            cmd.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl NsHosts {
    /// Makes `n` hosts, or says why it cannot.
    pub(crate) fn make(n: usize) -> Result<NsHosts, String> {
        // SAFETY: geteuid(2) has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("network namespaces need root".into());
        }
        run(&["ip", "-V"]).map_err(|e| format!("no iproute2: {e}"))?;
        let tag = std::process::id() % 10_000;
        let dir = std::env::temp_dir().join(format!("converse-nshosts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let forward_was = std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward")
            .map_err(|e| e.to_string())?
            .trim()
            .to_string();
        let mut hosts = NsHosts {
            names: Vec::new(),
            links: Vec::new(),
            addrs: Vec::new(),
            dir,
            forward_was,
        };
        std::fs::write("/proc/sys/net/ipv4/ip_forward", "1").map_err(|e| e.to_string())?;
        // A subnet per host, apart from other runs' (by the pid).
        let base = 16 + (std::process::id() % 48) * 4;
        for i in 0..n {
            let ns = format!("cvh{tag}-{i}");
            let outer = format!("cvo{tag}-{i}");
            let inner = format!("cvi{tag}-{i}");
            let net = format!("10.231.{}", base as usize + i);
            let (near, far) = (format!("{net}.1"), format!("{net}.2"));
            run(&["ip", "netns", "add", &ns])?;
            hosts.names.push(ns.clone());
            run(&[
                "ip", "link", "add", &outer, "type", "veth", "peer", "name", &inner,
            ])?;
            hosts.links.push(outer.clone());
            run(&["ip", "link", "set", &inner, "netns", &ns])?;
            run(&["ip", "addr", "add", &format!("{near}/24"), "dev", &outer])?;
            run(&["ip", "link", "set", &outer, "up"])?;
            let inside = |args: &[&str]| {
                let mut cmd = vec!["ip", "netns", "exec", &ns];
                cmd.extend_from_slice(args);
                run(&cmd)
            };
            inside(&["ip", "addr", "add", &format!("{far}/24"), "dev", &inner])?;
            inside(&["ip", "link", "set", &inner, "up"])?;
            inside(&["ip", "link", "set", "lo", "up"])?;
            inside(&["ip", "route", "add", "default", "via", &near])?;
            // The remote shell: `SHELL HOST COMMAND`, the command run by
            // `sh` inside the namespace, as sshd's login shell would.
            let shell = hosts.dir.join(format!("shell-{i}"));
            std::fs::write(
                &shell,
                format!("#!/bin/sh\nexec ip netns exec {ns} /bin/sh -c \"$2\"\n"),
            )
            .map_err(|e| e.to_string())?;
            run(&["chmod", "+x", shell.to_str().unwrap()])?;
            hosts.addrs.push(far);
        }
        Ok(hosts)
    }

    /// A nodelist of the hosts, in order, each with its shell.
    pub(crate) fn nodelist(&self) -> String {
        let mut text = String::from("group main\n");
        for (i, addr) in self.addrs.iter().enumerate() {
            let shell = self.dir.join(format!("shell-{i}"));
            text.push_str(&format!("host {addr} ++shell {}\n", shell.display()));
        }
        let path = self.dir.join("nodelist");
        std::fs::write(&path, text).expect("the nodelist");
        path.display().to_string()
    }

    /// Cuts host `i`'s link: its packets vanish from now on.
    pub(crate) fn cut(&self, i: usize) {
        run(&["ip", "link", "set", &self.links[i], "down"]).expect("the link goes down");
    }

    /// Mends host `i`'s link.
    pub(crate) fn mend(&self, i: usize) {
        run(&["ip", "link", "set", &self.links[i], "up"]).expect("the link comes up");
    }

    /// Cuts the hosts off from each other (this machine stops forwarding
    /// between them; each still reaches this one, where `convrun` runs).
    pub(crate) fn split(&self) {
        std::fs::write("/proc/sys/net/ipv4/ip_forward", "0").expect("forwarding off");
    }

    /// Moves the calling thread (only it) into host `i`'s network: what it
    /// connects to from then on is as seen from that host.
    pub(crate) fn enter(&self, i: usize) {
        let ns = std::fs::File::open(format!("/var/run/netns/{}", self.names[i]))
            .expect("the namespace's file");
        use std::os::fd::AsRawFd;
        // SAFETY: setns(2) on an open namespace file; it changes the
        // calling thread's network namespace only.
        let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
    }

    /// The processes running in host `i`.
    pub(crate) fn pids(&self, i: usize) -> Vec<i32> {
        Command::new("ip")
            .args(["netns", "pids", &self.names[i]])
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for NsHosts {
    fn drop(&mut self) {
        for i in 0..self.names.len() {
            for pid in self.pids(i) {
                // SAFETY: kill(2) on a process left in a namespace we made.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
        for link in &self.links {
            let _ = run(&["ip", "link", "del", link]);
        }
        for ns in &self.names {
            let _ = run(&["ip", "netns", "del", ns]);
        }
        let _ = std::fs::write("/proc/sys/net/ipv4/ip_forward", &self.forward_was);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `case` with `n` namespace hosts, or says why it is skipped (a
/// failure instead when `CONVERSE_TEST_NETNS` is set, as in CI).
pub(crate) fn with_hosts(n: usize, case: impl FnOnce(&NsHosts)) {
    match NsHosts::make(n) {
        Ok(hosts) => case(&hosts),
        Err(why) if std::env::var_os("CONVERSE_TEST_NETNS").is_some() => {
            panic!("CONVERSE_TEST_NETNS is set, but: {why}")
        }
        Err(why) => println!("skipped: {why}"),
    }
}
