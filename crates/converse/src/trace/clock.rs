//! The trace's clock: a cheap tick count on the hot path, turned into
//! wall-clock nanoseconds when the trace is written.
//!
//! On x86-64 a tick is the time-stamp counter (`rdtsc`: about 12 ns on
//! this project's virtual machine, against 35 ns for `Instant::now`; the
//! counter is invariant on every CPU that reports `constant_tsc` and
//! `nonstop_tsc`, as this machine does). Elsewhere a tick is a nanosecond
//! of `Instant` since the process's anchor.
//!
//! [`Calibration`] maps ticks to nanoseconds since the Unix epoch from two
//! readings of both clocks: one taken when the process's first trace
//! starts (the anchor), one when it is written. Processes on one host then
//! share a time line to within the pair readings' jitter; across hosts,
//! to within their clocks' agreement (NTP).
//!
//! # Concurrency
//!
//! The anchor is set once per process (`OnceLock`); everything else is
//! pure.
use std::sync::OnceLock;
use std::time::{Instant, SystemTime};

/// Both clocks read at one moment.
#[derive(Clone, Copy, Debug)]
struct Reading {
    ticks: u64,
    instant: Instant,
    unix_ns: u64,
}

static ANCHOR: OnceLock<Reading> = OnceLock::new();

fn anchor() -> &'static Reading {
    ANCHOR.get_or_init(read_both)
}

fn read_both() -> Reading {
    let instant = Instant::now();
    let ticks = raw_ticks(instant);
    let unix_ns = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    Reading {
        ticks,
        instant,
        unix_ns,
    }
}

/// Sets the process's anchor if it is not set yet (the first trace).
pub(crate) fn start() {
    anchor();
}

/// The current tick count.
#[inline]
pub(crate) fn now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `rdtsc` has no preconditions on x86-64; it reads a counter.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        raw_ticks(Instant::now())
    }
}

#[cfg(target_arch = "x86_64")]
fn raw_ticks(_at: Instant) -> u64 {
    now()
}

#[cfg(not(target_arch = "x86_64"))]
fn raw_ticks(at: Instant) -> u64 {
    match ANCHOR.get() {
        Some(a) => at.saturating_duration_since(a.instant).as_nanos() as u64,
        None => 0,
    }
}

/// Ticks to Unix nanoseconds, from the anchor and a reading taken now.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Calibration {
    ticks0: u64,
    unix_ns0: u64,
    /// Nanoseconds per tick.
    scale: f64,
}

impl Calibration {
    /// From the anchor to now. A run too short to measure the tick rate
    /// (under 100 µs, or a clock that did not move) counts a tick as a
    /// nanosecond.
    pub fn now() -> Calibration {
        let a = *anchor();
        let b = read_both();
        let ns = b.instant.saturating_duration_since(a.instant).as_nanos() as f64;
        let ticks = b.ticks.wrapping_sub(a.ticks) as f64;
        let scale = if ns >= 100_000.0 && ticks > 0.0 {
            ns / ticks
        } else {
            1.0
        };
        Calibration {
            ticks0: a.ticks,
            unix_ns0: a.unix_ns,
            scale,
        }
    }

    /// Nanoseconds per tick.
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// `ticks` as nanoseconds since the Unix epoch.
    pub fn unix_ns(&self, ticks: u64) -> u64 {
        // The offset in floating point, the sum in integers: a Unix time in
        // nanoseconds (about 1.8e18) is a multiple of 256 as an `f64`.
        let since = (ticks.wrapping_sub(self.ticks0) as i64 as f64 * self.scale).round() as i64;
        self.unix_ns0.saturating_add_signed(since)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_map_onto_wall_clock_time() {
        start();
        let t0 = now();
        let wall0 = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        std::thread::sleep(std::time::Duration::from_millis(20));
        let t1 = now();
        let cal = Calibration::now();
        let (a, b) = (cal.unix_ns(t0), cal.unix_ns(t1));
        assert!(b > a, "time runs forward");
        let gap = (b - a) as f64 / 1e6;
        assert!(
            (15.0..5000.0).contains(&gap),
            "20 ms sleep measured as {gap} ms"
        );
        // Nanosecond resolution at today's epoch (not an `f64`'s 256 ns).
        // (Each time is rounded on its own: the difference may be one off.)
        let step = (cal.unix_ns(t0 + 3) - a) as f64;
        assert!(
            (step - 3.0 * cal.scale).abs() <= 1.0,
            "3 ticks measured as {step} ns, scale {}",
            cal.scale
        );
        let off = (a as i128 - wall0 as i128).abs() as f64 / 1e6;
        assert!(off < 5000.0, "tick time is {off} ms off the wall clock");
    }
}
