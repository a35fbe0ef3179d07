//! Which process a pid names, and whether it still runs: how a module
//! watches peers on its own host that could die without a word to it
//! (shm's, whose rings stay mapped; MPI's, whose library may not say).
//!
//! # Invariants
//!
//! - A pid names a peer only together with its start time: the pair is
//!   the same from any pid namespace of the host, and a pid the system
//!   gave to another process since does not match.
//! - Nothing here blocks: a look is one `kill(pid, 0)`, and a start time
//!   one read of `/proc/PID/stat`.
//!
//! # Concurrency
//!
//! None: plain functions.

/// True unless process `pid` is known to be gone (a pid read from a peer:
/// only a positive one names a single process).
pub(crate) fn process_alive(pid: i32) -> bool {
    // Checked first: `Pid::from_raw` asserts a non-negative number, and
    // a pid read from a peer may be anything.
    if pid <= 0 {
        return false;
    }
    match rustix::process::Pid::from_raw(pid) {
        Some(p) => rustix::process::test_kill_process(p) != Err(rustix::io::Errno::SRCH),
        None => false,
    }
}

/// When process `pid` (this one if `None`) started, in clock ticks since
/// the host booted (the 22nd field of its `/proc/PID/stat`), if it can be
/// read here: the same number for the same process seen from any pid
/// namespace of the host, so a pid read from a peer's header names that
/// peer here only if its start time is the one the peer wrote.
pub(crate) fn process_start_time(pid: Option<i32>) -> Option<u64> {
    let path = match pid {
        Some(pid) if pid > 0 => format!("/proc/{pid}/stat"),
        Some(_) => return None,
        None => "/proc/self/stat".into(),
    };
    let stat = std::fs::read_to_string(path).ok()?;
    // The command name (field 2) is in parentheses and may hold anything:
    // fields are counted from the last `)`, which ends it (field 3 is
    // the first after it).
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_ascii_whitespace().nth(22 - 3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_start_time_names_the_process_from_its_pid() {
        let own = process_start_time(None).expect("this process's stat reads");
        assert!(own > 0);
        assert_eq!(
            process_start_time(Some(std::process::id() as i32)),
            Some(own)
        );
        // A process that started later has a later (or equal) time; a pid
        // that runs nothing has none.
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let theirs = process_start_time(Some(child.id() as i32)).unwrap();
        assert!(theirs >= own);
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(process_start_time(Some(child.id() as i32)), None);
        assert_eq!(process_start_time(Some(0)), None);
        assert_eq!(process_start_time(Some(-5)), None);
    }

    #[test]
    fn a_process_is_alive_until_it_is_reaped() {
        assert!(process_alive(std::process::id() as i32));
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        assert!(process_alive(child.id() as i32));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!process_alive(child.id() as i32));
        assert!(!process_alive(0));
        assert!(!process_alive(-1));
    }
}
