//! CPU affinity: `+setcpuaffinity` and `+pemap LIST` (Charm++'s flags),
//! which pin every PE's thread to one processor of its host.
//!
//! Which processor: the PE's rank among the PEs of its host
//! (`rt::hosts::physical_rank`), taken round the `+pemap` list, or round
//! the host's processors in order when no list is given. So the PEs of a
//! host spread over its processors whatever the processes and nodes,
//! and two processes on one host never pick the same processor while
//! there are enough. `+pemap` implies `+setcpuaffinity`.
//!
//! A list is Charm++'s short form: comma-separated items, each `N`, a
//! range `A-B`, or a range with a stride `A-B:S` (`0-7:2` is 0,2,4,6).
//! Charm++'s block forms (`A-B:S.R`) and `+commap` are not taken (there
//! are no communication threads to place).
//!
//! Without those flags a PE is not pinned, but in a job of one process
//! whose PEs fit the processors it may use, each PE's thread starts on
//! the processor of its rank among them (`start_current_thread_apart`:
//! moved there, its mask given back at once), so that PEs do not begin
//! on their parent's processor and share it until the kernel spreads
//! them.
//!
//! # Invariants
//!
//! - A PE is pinned once, on its own thread, before its start function:
//!   a processor the OS refuses ends the job naming the PE and the
//!   processor.
//! - A PE that is not pinned ends its placement with the mask it began
//!   with.
//!
//! # Concurrency
//!
//! None: each thread sets its own mask.

/// The largest processor number a list may name (the kernel's
/// `cpu_set_t` holds `CPU_SETSIZE` of them).
pub const MAX_CPU: usize = libc::CPU_SETSIZE as usize - 1;

/// Longest list `+pemap` expands to: a list longer than the processors
/// any host has is a typo.
const MAX_PEMAP_LEN: usize = libc::CPU_SETSIZE as usize;

/// Why a `+pemap` list is none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PemapError {
    /// An item that is no processor number from 0 to `MAX_CPU`.
    NotAProcessor(String),
    /// `A-B:0`.
    ZeroStride(String),
    /// `B-A` with `B` above `A`.
    Backwards(String),
    /// More processors than a CPU set holds.
    TooMany,
}

impl std::fmt::Display for PemapError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PemapError::NotAProcessor(s) => {
                write!(f, "`{s}` is no processor number from 0 to {MAX_CPU}")
            }
            PemapError::ZeroStride(item) => write!(f, "`{item}`: a stride of 0"),
            PemapError::Backwards(item) => write!(f, "`{item}`: the range runs backwards"),
            PemapError::TooMany => write!(f, "more than {MAX_PEMAP_LEN} processors"),
        }
    }
}

impl std::error::Error for PemapError {}

/// The processors a `+pemap` list names, in order, or why it is no list.
pub fn parse_pemap(text: &str) -> Result<Vec<usize>, PemapError> {
    let number = |s: &str| -> Result<usize, PemapError> {
        s.parse::<usize>()
            .ok()
            .filter(|&n| n <= MAX_CPU)
            .ok_or_else(|| PemapError::NotAProcessor(s.to_string()))
    };
    let mut cpus = Vec::new();
    for item in text.split(',') {
        let (range, stride) = match item.split_once(':') {
            Some((r, s)) => {
                let s = number(s)?;
                if s == 0 {
                    return Err(PemapError::ZeroStride(item.to_string()));
                }
                (r, s)
            }
            None => (item, 1),
        };
        let (first, last) = match range.split_once('-') {
            Some((a, b)) => (number(a)?, number(b)?),
            None => {
                let n = number(range)?;
                (n, n)
            }
        };
        if last < first {
            return Err(PemapError::Backwards(item.to_string()));
        }
        cpus.extend((first..=last).step_by(stride));
        if cpus.len() > MAX_PEMAP_LEN {
            return Err(PemapError::TooMany);
        }
    }
    Ok(cpus)
}

/// The processor the PE of host rank `rank` runs on: the list's entry
/// round the list, else round the host's `cores`.
pub fn cpu_for(rank: usize, pemap: Option<&[usize]>, cores: usize) -> usize {
    match pemap {
        Some(list) if !list.is_empty() => list[rank % list.len()],
        _ => rank % cores.max(1),
    }
}

/// Pins the calling thread to processor `cpu`.
pub fn pin_current_thread(cpu: usize) -> std::io::Result<()> {
    set_current_thread_cpus(&[cpu])
}

/// Lets the calling thread run on the processors `cpus` (each at most
/// [`MAX_CPU`]).
fn set_current_thread_cpus(cpus: &[usize]) -> std::io::Result<()> {
    if cpus.iter().any(|&cpu| cpu > MAX_CPU) {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes bits
    // below CPU_SETSIZE (checked); the kernel reads the set for the
    // calling thread (pid 0).
    let done = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &cpu in cpus {
            libc::CPU_SET(cpu, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if done == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Starts the calling thread on the `rank`-th processor it may run on
/// (round them), without pinning it: the thread is moved there, and its
/// mask is given back at once (a running thread stays where it is until
/// the scheduler has a reason to move it). For PEs that fit their host
/// without `+setcpuaffinity`: a new thread starts on its parent's
/// processor, and two PEs that start on one processor and wait for each
/// other's messages (each spinning, then yielding to the other) stayed
/// there for up to 20 ms before the kernel spread them (a run of
/// Charm++'s kNeighbors, 22 ms alone, took 33-46 ms when it happened).
/// `threads`: how many threads are placed so (the PEs of the process);
/// none is moved if there are more than processors. Returns the
/// processor, or `None` if the thread stays where it is (one processor,
/// too many threads, or the system refused).
pub fn start_current_thread_apart(rank: usize, threads: usize) -> Option<usize> {
    let cpus = current_thread_cpus().ok()?;
    if cpus.len() < 2 || threads > cpus.len() {
        return None;
    }
    let cpu = cpus[rank % cpus.len()];
    let moved = move_current_thread(cpu, &cpus);
    HOME.with(|home| *home.borrow_mut() = Some((cpu, cpus)));
    moved.then_some(cpu)
}

/// After a wait the thread slept through (a parked PE, woken): back to the
/// processor [`start_current_thread_apart`] started it on, if the kernel
/// woke it elsewhere. A thread woken by another is often put on its
/// waker's processor, and two PEs that then poll for each other's
/// messages on one processor, each spinning while the other cannot run,
/// stayed together for up to 20 ms (the kNeighbors run above). A thread
/// that was not started apart is left alone, and so is one whose mask
/// someone else changed since (a program that pins its PEs itself): it
/// forgets its processor then. Returns whether it moved.
pub fn return_home() -> bool {
    HOME.with(|home| {
        let mut home = home.borrow_mut();
        let Some((cpu, cpus)) = home.as_ref() else {
            return false;
        };
        // SAFETY: no arguments; reads the calling thread's processor.
        let now = unsafe { libc::sched_getcpu() };
        if usize::try_from(now).ok() == Some(*cpu) {
            return false;
        }
        if current_thread_cpus().ok().as_ref() != Some(cpus) {
            *home = None;
            return false;
        }
        move_current_thread(*cpu, cpus)
    })
}

/// Pins the calling thread, a PE's, to `cpu` (`+setcpuaffinity`),
/// remembering the processors it could run on before, which
/// [`end_pe_placement`] gives back.
pub(crate) fn pin_pe_thread(cpu: usize) -> std::io::Result<()> {
    let before = current_thread_cpus()?;
    pin_current_thread(cpu)?;
    UNPINNED.with(|u| {
        u.borrow_mut().get_or_insert(before);
    });
    Ok(())
}

/// Undoes what this module did to the calling thread for its PE, which
/// ended: the processors it could run on before [`pin_pe_thread`] are
/// given back, and the processor [`start_current_thread_apart`] gave it
/// is forgotten. A later PE on the thread (a second job's PE 0 on the
/// caller's thread), and the caller's own code, are placed by their own.
pub(crate) fn end_pe_placement() {
    if let Ok(Some(cpus)) = UNPINNED.try_with(|u| u.borrow_mut().take()) {
        // Best effort: a mask the system refuses now leaves the pin.
        let _ = set_current_thread_cpus(&cpus);
    }
    let _ = HOME.try_with(|home| home.borrow_mut().take());
}

/// Moves the calling thread to `cpu`, then lets it run on `cpus` again;
/// whether it moved.
fn move_current_thread(cpu: usize, cpus: &[usize]) -> bool {
    let moved = pin_current_thread(cpu).is_ok();
    // Given back whatever happened: a thread left pinned would be a
    // policy this module does not make.
    moved && set_current_thread_cpus(cpus).is_ok()
}

std::thread_local! {
    /// The processor this thread was started on by
    /// [`start_current_thread_apart`], and the mask it may run on.
    static HOME: std::cell::RefCell<Option<(usize, Vec<usize>)>> =
        const { std::cell::RefCell::new(None) };
    /// The processors this thread could run on before [`pin_pe_thread`].
    static UNPINNED: std::cell::RefCell<Option<Vec<usize>>> =
        const { std::cell::RefCell::new(None) };
}

/// The processors the calling thread may run on, in increasing order.
pub fn current_thread_cpus() -> std::io::Result<Vec<usize>> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; the kernel fills it
    // for the calling thread (pid 0); CPU_ISSET reads bits below
    // CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok((0..=MAX_CPU)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_expand_as_charm_writes_them() {
        assert_eq!(parse_pemap("0-3").unwrap(), [0, 1, 2, 3]);
        assert_eq!(parse_pemap("0-7:2,1").unwrap(), [0, 2, 4, 6, 1]);
        assert_eq!(parse_pemap("5").unwrap(), [5]);
        for bad in ["", "a", "3-1", "0-4:0", "1,,2", "0-3:2.1", "99999"] {
            assert!(parse_pemap(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_pemap("3-1"), Err(PemapError::Backwards("3-1".into())));
        assert_eq!(
            parse_pemap("0-4:0").unwrap_err().to_string(),
            "`0-4:0`: a stride of 0"
        );
        assert_eq!(
            parse_pemap(&format!("0-{MAX_CPU},0")),
            Err(PemapError::TooMany)
        );
    }

    #[test]
    fn ranks_go_round_the_list_or_the_cores() {
        assert_eq!(cpu_for(5, Some(&[3, 1]), 8), 1);
        assert_eq!(cpu_for(5, None, 2), 1);
        assert_eq!(cpu_for(5, Some(&[]), 4), 1);
    }

    #[test]
    fn a_thread_started_apart_keeps_its_mask() {
        std::thread::spawn(|| {
            let cpus = current_thread_cpus().unwrap();
            let placed = start_current_thread_apart(1, 2);
            assert_eq!(current_thread_cpus().unwrap(), cpus);
            match cpus.len() {
                0 | 1 => assert_eq!(placed, None),
                n => assert_eq!(placed, Some(cpus[1 % n])),
            }
            // More threads than processors: none is moved.
            assert_eq!(start_current_thread_apart(0, cpus.len() + 1), None);
            // Back home after a move elsewhere, the mask given back.
            if let Some(home) = placed {
                let other = *cpus.iter().find(|&&c| c != home).unwrap();
                pin_current_thread(other).unwrap();
                set_current_thread_cpus(&cpus).unwrap();
                return_home();
                assert_eq!(current_thread_cpus().unwrap(), cpus);
                // Pinned by someone else: stays pinned, and home is
                // forgotten.
                pin_current_thread(other).unwrap();
                assert!(!return_home());
                assert_eq!(current_thread_cpus().unwrap(), [other]);
                set_current_thread_cpus(&cpus).unwrap();
                assert!(!return_home());
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_thread_pins_itself_and_reads_its_mask_back() {
        std::thread::spawn(|| {
            let cpus = current_thread_cpus().unwrap();
            let cpu = *cpus.last().expect("a thread runs somewhere");
            pin_current_thread(cpu).unwrap();
            assert_eq!(current_thread_cpus().unwrap(), [cpu]);
            assert!(pin_current_thread(MAX_CPU + 1).is_err());
        })
        .join()
        .unwrap();
    }
}
