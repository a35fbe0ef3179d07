//! The group: starting it (`gamma_init`, or [`run`] for nodes as threads),
//! leaving it (`gamma_exit`), who is in it (`gamma_my_node`,
//! `gamma_how_many_nodes`, `gamma_my_par_pid`) and its barrier
//! (`gamma_sync`).
//!
//! A group is a Converse job whose PEs are its nodes. Its parallel pid,
//! 1..=254, is taken by node 0 from a registry of the host (a file per
//! pid in a directory of the user's temporary directory, claimed by an
//! exclusive `flock` held while the group lives, which the kernel drops
//! if the process dies) and sent to the other nodes before the program's
//! code runs, so two live groups on one host never share one.
//!
//! # Invariants
//!
//! - A node is a member from its join (it knows the parallel pid) to its
//!   `exit`; GAMMA calls outside that span are `Error::NotInitialized`.
//! - Node 0 leaves last (the document: "the process who created the
//!   group ... will destroy the group as soon as every other process
//!   instance has left"), then frees the parallel pid.
//! - Barrier `k` releases every node only after all have arrived at it;
//!   a node that left before arriving makes node 0 abandon it and tell
//!   the others (an error everywhere, not a hang). Messages from different nodes are not
//!   ordered: a node may hear that another left (after being released)
//!   before it hears its own release.
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use converse::Converse;

use crate::error::{Error, Result};
use crate::intergroup::{self, registry};
use crate::node;
use crate::wire::{self, Wire};

/// The most nodes a group has: `dest_node` is an `unsigned char`, 255 is
/// [`BROADCAST`](crate::BROADCAST)'s.
pub const MAX_NODES: u16 = 255;

/// Registers GAMMA's module init (its handler and each PE's node) for the
/// jobs started after; [`run`] and [`init`] call it.
pub fn install() {
    converse::register_module_init("converse-gamma", node::module_init);
}

/// Takes a free parallel pid of this host for a group of `nodes`: the
/// first registry file of `1..=254` this process can lock (`flock`,
/// exclusive, not waiting). The lock is the claim: it lasts while the
/// returned file is open, and ends with the process if it dies, so a
/// dead group's file is simply locked again. The file then says who
/// holds it and the group's size (`<os pid> <nodes>`).
fn take_par_pid(nodes: u16) -> Result<(u8, File)> {
    use std::os::unix::fs::MetadataExt;
    let dir = registry();
    let err = |what: &Path, e: std::io::Error| {
        Error::Start(format!("the parallel-pid registry {}: {e}", what.display()))
    };
    std::fs::create_dir_all(&dir).map_err(|e| err(&dir, e))?;
    for pid in 1..=254u8 {
        let path = dir.join(format!("par-pid-{pid}"));
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| err(&path, e))?;
        if rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            continue; // held by a live group
        }
        // Its last holder may have removed the path (and another made it
        // again) since we opened it: the claim is on the file the path
        // names now, or on none.
        let mine = file.metadata().map_err(|e| err(&path, e))?;
        let named = std::fs::metadata(&path);
        if !named.is_ok_and(|m| m.ino() == mine.ino() && m.dev() == mine.dev()) {
            continue;
        }
        file.set_len(0).map_err(|e| err(&path, e))?;
        file.write_all(format!("{} {nodes}", std::process::id()).as_bytes())
            .map_err(|e| err(&path, e))?;
        return Ok((pid, file));
    }
    Err(Error::Start(format!(
        "every parallel pid of this host is taken (registry {})",
        dir.display()
    )))
}

/// Frees parallel pid `pid`, held by `lock`: the file goes first, then
/// the lock (so no one claims a file that is about to vanish).
fn free_par_pid(pid: u8, lock: File) {
    let _ = std::fs::remove_file(registry().join(format!("par-pid-{pid}")));
    drop(lock);
}

/// Makes the calling PE a member: node 0 takes the parallel pid and tells
/// the others, who wait for it.
fn join() -> Result<()> {
    let n = node::raw().ok_or(Error::NotInitialized)?;
    if n.nodes > MAX_NODES {
        return Err(Error::Start(format!(
            "a group of {} nodes: at most {MAX_NODES}",
            n.nodes
        )));
    }
    if n.me == 0 {
        let (pid, lock) = take_par_pid(n.nodes)?;
        *n.par_pid_lock.borrow_mut() = Some(lock);
        n.par_pid.set(pid);
        if n.nodes > 1 {
            n.broadcast_payload(&wire::encode(&Wire::ParPid(pid)));
        }
    }
    while n.par_pid.get() == 0 {
        if converse::job_exiting() {
            return Err(Error::JobEnding);
        }
        converse::scheduler(1);
    }
    // Other groups may send to this node from now on.
    let endpoint = intergroup::listen(n.par_pid.get(), n.me, n.handler)?;
    *n.endpoint.borrow_mut() = Some(endpoint);
    Ok(())
}

/// Runs a group of `num_nodes` nodes as threads of this process (or, under
/// `convrun`/`mpiexec`, the launcher's processes: the group is the job),
/// each running `body` as its program, between an implicit `gamma_init`
/// and `gamma_exit`. `num_nodes <= 0` means one node per CPU. `args` are
/// Converse's (`+p` there overrides `num_nodes`). Returns the job's exit
/// code.
pub fn run<I, S, F>(num_nodes: i32, args: I, body: F) -> Result<i32>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
    F: Fn() + Send + Sync + 'static,
{
    install();
    let n = if num_nodes <= 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        num_nodes as usize
    };
    let args: Vec<String> = args.into_iter().map(Into::into).collect();
    Converse::new()
        .args(args)
        .default_pes(n)
        .run_user_scheduler(move |_| {
            if let Err(e) = join() {
                converse::abort(&format!("gamma: node {}: {e}", converse::my_pe()));
            }
            body();
            if node::current().is_ok()
                && let Err(e) = exit()
            {
                converse::abort(&format!("gamma: node {}: {e}", converse::my_pe()));
            }
        })
        .map_err(|e| Error::Start(e.to_string()))
}

/// Starts the parallel section (`gamma_init`): the calling thread becomes
/// a node and returns to the program.
///
/// - Under `convrun` or `mpiexec` each process calls it and joins the
///   group the launcher started (one node per process: `++ppn 1`).
/// - In a process started by hand, with `num_nodes` of 2 or more (or 0 or
///   less: one node per host of the configuration file, or per CPU
///   without one), the process replicates itself through the launcher: it
///   becomes `convrun +p N ++ppn 1 [++nodelist FILE] PROGRAM ARGS` (an
///   `exec`), whose N processes run the program from its start, and
///   whose `gamma_init` joins them. `args` are the program's `argv`, its
///   name first. So node 0 is a new process, not the caller, and code
///   before `gamma_init` runs once more than under GAMMA's own launcher.
///   The hosts come from the nodelist named by `CONVERSE_GAMMA_CONF`, else
///   `/etc/gamma.conf` if it exists (the document's file), else every node
///   runs on this host; `num_nodes` beyond the file's hosts is cut to
///   their number (the document's rule). `convrun` is the one named by
///   `CONVERSE_CONVRUN`, else the one beside the program or in one of
///   its parent directories, else the one on the `PATH`.
/// - In a process started by hand with `num_nodes` of 1, a group of this
///   process alone.
#[doc(alias = "gamma_init")]
pub fn init<I, S>(num_nodes: i32, args: I) -> Result<()>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let args: Vec<String> = args.into_iter().map(Into::into).collect();
    let launched = ["CONVERSE_LAUNCHER", "PMI_RANK"]
        .iter()
        .any(|v| std::env::var_os(v).is_some());
    if !launched && num_nodes != 1 {
        let conf = gamma_conf();
        let hosts = conf.as_deref().map(count_hosts).transpose()?;
        let n = match (num_nodes, hosts) {
            (n, Some(h)) if n <= 0 || n as usize > h => h,
            (n, None) if n <= 0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            (n, _) => n as usize,
        };
        if n > 1 {
            return Err(replicate(n, conf.as_deref(), &args));
        }
    }
    install();
    Converse::new()
        .args(args)
        .default_pes(1)
        .init_returns(|_| {
            converse::abort(
                "gamma::init: one node per process (start the job with ++ppn 1, or use \
                 gamma::run for nodes as threads)",
            )
        })
        .map_err(|e| Error::Start(e.to_string()))?;
    join()?;
    if let Some(n) = node::raw() {
        n.by_init.set(true);
    }
    Ok(())
}

/// The nodelist of the group's hosts, if there is one.
fn gamma_conf() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CONVERSE_GAMMA_CONF") {
        return Some(PathBuf::from(p));
    }
    let etc = PathBuf::from("/etc/gamma.conf");
    etc.exists().then_some(etc)
}

/// The `host` lines of a nodelist.
fn count_hosts(path: &Path) -> Result<usize> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::Start(format!("the host file {}: {e}", path.display())))?;
    let hosts = text
        .lines()
        .filter(|l| l.split_whitespace().next() == Some("host"))
        .count();
    if hosts == 0 {
        return Err(Error::Start(format!(
            "no `host` line in {}",
            path.display()
        )));
    }
    Ok(hosts)
}

/// The launcher to replicate through.
fn find_convrun() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CONVERSE_CONVRUN") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let beside = exe
        .ancestors()
        .skip(1)
        .map(|d| d.join("convrun"))
        .find(|c| c.is_file());
    beside.or_else(|| {
        std::env::split_paths(&std::env::var_os("PATH")?)
            .map(|d| d.join("convrun"))
            .find(|c| c.is_file())
    })
}

/// Becomes `convrun` starting `n` copies of this program; returns only if
/// that fails.
fn replicate(n: usize, conf: Option<&Path>, args: &[String]) -> Error {
    use std::os::unix::process::CommandExt;
    let Some(convrun) = find_convrun() else {
        return Error::Start(format!(
            "gamma::init({n}): no convrun to start the replicas with (set CONVERSE_CONVRUN, \
             or put convrun on the PATH)"
        ));
    };
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return Error::Start(format!("gamma::init: this program's path: {e}")),
    };
    let mut cmd = std::process::Command::new(&convrun);
    cmd.args(["+p", &n.to_string(), "++ppn", "1"]);
    if let Some(conf) = conf {
        cmd.arg("++nodelist").arg(conf);
    }
    cmd.arg(exe).args(args.iter().skip(1));
    let e = cmd.exec();
    Error::Start(format!("gamma::init: starting {}: {e}", convrun.display()))
}

/// Leaves the group (`gamma_exit`). Node 0 first waits for every other
/// node to leave, then frees the parallel pid. Messages that were never
/// stored (a port never set up for input) are reported on stderr. For a
/// node started by [`init`] it also ends the job here (collectively) and
/// returns its exit code; under [`run`], 0.
#[doc(alias = "gamma_exit")]
pub fn exit() -> Result<i32> {
    let n = node::current()?;
    if n.me == 0 {
        let others = n.nodes - 1;
        n.wait_until(
            &|| "node 0 waits for the others to leave".into(),
            &mut |n| n.left_count.get() >= others,
        )?;
    }
    n.leave();
    if let Some(lock) = n.par_pid_lock.borrow_mut().take() {
        free_par_pid(n.par_pid.get(), lock);
    }
    if n.by_init.get() {
        return Ok(converse::finish(0));
    }
    Ok(0)
}

/// Waits until every node of the group has called it (`gamma_sync`),
/// delivering messages meanwhile.
#[doc(alias = "gamma_sync")]
pub fn sync() -> Result<()> {
    let n = node::current()?;
    let epoch = n.sync_epoch.get() + 1;
    n.sync_epoch.set(epoch);
    if n.nodes == 1 {
        return Ok(());
    }
    let what = || format!("gamma_sync (barrier {epoch})");
    let mut someone_left = false;
    if n.me == 0 {
        let others = n.nodes - 1;
        n.wait_until(&what, &mut |n| {
            // A node cannot leave between arriving and being released.
            let all_in = n.arrivals.borrow().get(&epoch).copied().unwrap_or(0) >= others;
            someone_left = !all_in && n.left_count.get() > 0;
            all_in || someone_left
        })?;
        n.arrivals.borrow_mut().remove(&epoch);
        if someone_left {
            // The others waiting at this barrier hear that it failed.
            n.abandoned.set(epoch);
            n.broadcast_payload(&wire::encode(&Wire::Abandon { epoch }));
        } else {
            n.released.set(epoch);
            n.broadcast_payload(&wire::encode(&Wire::Release { epoch }));
        }
    } else {
        n.send_payload(0, &wire::encode(&Wire::Arrive { epoch }));
        n.wait_until(&what, &mut |n| {
            // Only node 0 releases; the others may leave (released before
            // this node heard of it) without harm.
            let released = n.released.get() >= epoch;
            someone_left = !released && (n.abandoned.get() >= epoch || n.has_left(0));
            released || someone_left
        })?;
    }
    if someone_left {
        return Err(Error::Deadlock(format!(
            "node {}: gamma_sync (barrier {epoch}): a node it waits for has left the group",
            n.me
        )));
    }
    Ok(())
}

/// The group's parallel pid (`gamma_my_par_pid`).
#[doc(alias = "gamma_my_par_pid")]
pub fn my_par_pid() -> Result<u8> {
    Ok(node::current()?.par_pid.get())
}

/// This node's instance number, 0..how_many_nodes (`gamma_my_node`).
#[doc(alias = "gamma_my_node")]
pub fn my_node() -> Result<u16> {
    Ok(node::current()?.me)
}

/// The number of nodes in the group (`gamma_how_many_nodes`).
#[doc(alias = "gamma_how_many_nodes")]
pub fn how_many_nodes() -> Result<u16> {
    Ok(node::current()?.nodes)
}
