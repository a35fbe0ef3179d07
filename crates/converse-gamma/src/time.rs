//! `gamma_time` and `gamma_time_diff`: a cycle counter and its conversion
//! to microseconds, calibrated once per process at the first conversion
//! (the document's compile-time `CLOCK` constant is measured instead).
//!
//! On x86-64 the counter is the TSC (`rdtsc`); elsewhere nanoseconds of
//! the monotonic clock since the process's first call, so ticks per
//! microsecond are 1000 there.
//!
//! # Invariants
//!
//! The calibration is measured once (a `OnceLock`) against `Instant` over
//! at least 2 ms, so conversions agree within a process.
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A counter reading (`time_586`: the counter's high and low 32 bits).
#[doc(alias = "time_586")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct TimeStamp {
    /// High 32 bits.
    pub hi: u32,
    /// Low 32 bits.
    pub lo: u32,
}

impl TimeStamp {
    fn ticks(self) -> u64 {
        (u64::from(self.hi) << 32) | u64::from(self.lo)
    }
}

#[cfg(target_arch = "x86_64")]
fn counter() -> u64 {
    // SAFETY: `rdtsc` reads the time-stamp counter; every x86-64 CPU has
    // it, and it touches no memory.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
fn counter() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Counter ticks per microsecond, measured once.
fn ticks_per_us() -> f64 {
    static RATE: OnceLock<f64> = OnceLock::new();
    *RATE.get_or_init(|| {
        let (c0, t0) = (counter(), Instant::now());
        while t0.elapsed() < Duration::from_millis(2) {
            std::hint::spin_loop();
        }
        let (c1, t1) = (counter(), Instant::now());
        let us = (t1 - t0).as_secs_f64() * 1e6;
        (c1.wrapping_sub(c0) as f64 / us).max(f64::MIN_POSITIVE)
    })
}

/// The counter now (`gamma_time`).
#[doc(alias = "gamma_time")]
pub fn time() -> TimeStamp {
    let c = counter();
    TimeStamp {
        hi: (c >> 32) as u32,
        lo: c as u32,
    }
}

/// Microseconds from `a` to `b` (`gamma_time_diff(b, a)`); negative if
/// `b` is earlier.
#[doc(alias = "gamma_time_diff")]
pub fn time_diff(b: TimeStamp, a: TimeStamp) -> f64 {
    let (b, a) = (b.ticks(), a.ticks());
    let ticks = if b >= a {
        (b - a) as f64
    } else {
        -((a - b) as f64)
    };
    ticks / ticks_per_us()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sleep_measures_about_its_length() {
        let a = time();
        std::thread::sleep(Duration::from_millis(20));
        let b = time();
        let us = time_diff(b, a);
        assert!((19_000.0..200_000.0).contains(&us), "{us} µs");
        assert!(time_diff(a, b) < 0.0);
    }
}
