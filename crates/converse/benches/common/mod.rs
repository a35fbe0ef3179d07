//! What the benchmark programs share: the `bench` line format of DESIGN.md
//! §11 and the quick mode CI uses to check that they still run.
#![allow(dead_code)] // each bench uses part of it

/// Prints one figure beside its in-run baseline and their ratio.
pub fn line(name: &str, value: f64, unit: &str, baseline: &str, base_value: f64, base_unit: &str) {
    println!(
        "bench {name} {} {unit} baseline {baseline} {} {base_unit} ratio {:.2}",
        fmt(value),
        fmt(base_value),
        value / base_value
    );
}

fn fmt(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// `n`, or `n / 100` (at least 1) when `CONVERSE_BENCH_QUICK` is set.
pub fn iterations(n: u64) -> u64 {
    if std::env::var_os("CONVERSE_BENCH_QUICK").is_some() {
        (n / 100).max(1)
    } else {
        n
    }
}

/// Whether figure `name` is wanted: all are, unless `CONVERSE_BENCH_ONLY`
/// is set, when only those whose names contain it are (for profiling one
/// figure under callgrind or perf).
pub fn wanted(name: &str) -> bool {
    std::env::var("CONVERSE_BENCH_ONLY").map_or(true, |only| name.contains(&only))
}

/// Seconds for `n` push + pop pairs of one circulating 32-byte item on a
/// `VecDeque`: the baseline of the self-send figures (`self_send`,
/// `commbench`), a queue with nothing of the runtime's.
pub fn vecdeque_push_pop_secs(n: u64) -> f64 {
    use std::hint::black_box;
    let mut q: std::collections::VecDeque<[u64; 4]> = std::collections::VecDeque::with_capacity(16);
    q.push_back([1, 2, 3, 4]);
    let t0 = std::time::Instant::now();
    for i in 0..n {
        let mut item = q.pop_front().expect("one item circulates");
        item[0] = black_box(item[0].wrapping_add(i));
        q.push_back(black_box(item));
    }
    black_box(&q);
    t0.elapsed().as_secs_f64()
}

/// Best (smallest) of `runs` measurements.
pub fn best_of(runs: usize, mut f: impl FnMut() -> f64) -> f64 {
    (0..runs).map(|_| f()).fold(f64::INFINITY, f64::min)
}

/// `8B`, `4KiB`, `1MiB`: a message size as the figure names spell it.
pub fn size_name(size: usize) -> String {
    match size {
        s if s >= 1 << 20 => format!("{}MiB", s >> 20),
        s if s >= 1 << 10 => format!("{}KiB", s >> 10),
        s => format!("{s}B"),
    }
}

/// Pins the calling thread to CPU `cpu` (modulo the CPUs there are); a
/// failure only makes the figures noisier, so it is ignored.
///
/// The CPUs are counted once, at the first call: the count follows the
/// calling thread's affinity, and a bench that runs several jobs in one
/// process runs PE 0 of each on its main thread, pinned by the first job
/// to CPU 0, whose PE threads inherit that. Counted anew, the second job
/// saw one CPU and pinned both its PEs to CPU 0 (a node barrier of 54 µs
/// instead of 56 ns).
pub fn pin_to_cpu(cpu: usize) {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let cpus = *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu % cpus);
    let _ = rustix::thread::sched_setaffinity(None, &set);
}
