//! Timers: `timer`/`wall_timer` (seconds since the job started) and
//! `cpu_timer` (CPU seconds used by the calling thread).
//!
//! Off a PE, the wall timers count from the first time a timer or job was
//! started in the process. On a PE they count from its job's start, which
//! `rt` hands down as a thread-local when it installs the PE (several jobs
//! may run at once in one process, each with its own start).
use std::cell::Cell;
use std::sync::OnceLock;
use std::time::Instant;

static PROCESS_START: OnceLock<Instant> = OnceLock::new();

thread_local! {
    /// The start of the job whose PE the calling thread runs.
    static EPOCH: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Makes the calling thread's timers count from `start` (`None`: from the
/// process's first timer).
pub(crate) fn set_thread_epoch(start: Option<Instant>) {
    EPOCH.with(|e| e.set(start));
}

fn job_start() -> Instant {
    EPOCH
        .with(Cell::get)
        .unwrap_or_else(|| *PROCESS_START.get_or_init(Instant::now))
}

/// Seconds since the job started, with the best resolution the machine has
/// (nanoseconds here) (`CmiTimer`).
#[doc(alias = "CmiTimer")]
pub fn timer() -> f64 {
    job_start().elapsed().as_secs_f64()
}

/// Wall-clock seconds since the job started (`CmiWallTimer`).
#[doc(alias = "CmiWallTimer")]
pub fn wall_timer() -> f64 {
    timer()
}

/// CPU seconds the calling thread (PE) has used (`CmiCpuTimer`).
#[doc(alias = "CmiCpuTimer")]
pub fn cpu_timer() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timers_advance() {
        let (w0, c0) = (wall_timer(), cpu_timer());
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(wall_timer() > w0);
        assert!(cpu_timer() > c0);
    }
}
