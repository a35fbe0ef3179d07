//! A Jacobi-style stencil on a parallel array of threads (`cpath`): an
//! N×N array, one thread per grid point, each exchanging its value with
//! its four neighbours every iteration (`CPathSend`/`CPathRecv`, tags
//! `[iteration, direction]`), then row sums by reductions, and the whole
//! grid gathered to element `[0, 0]`, which checks it against a sequential
//! computation of the same stencil and prints the row sums and a checksum.
//!
//! `cargo run -p converse-ext --example cpath_stencil -- [N] [ITERATIONS] [MAPPER] +p 4`
//!
//! `MAPPER` is `block` (the default), `rr` (round-robin), `pe0` (all on
//! PE 0), `home` (all on the creating PE) or `columns` (a mapper of this
//! program's: column `j` on PE `(N - 1 - j) % P`, so element `[0, 0]` is
//! not on PE 0).
//!
//! The arithmetic is on integers modulo a prime, so the parallel result
//! must equal the sequential one exactly. A missing neighbour counts as 0;
//! the weights differ per direction, so a message taken from the wrong
//! neighbour changes the result.
//!
//! After the iterations each element takes part in three reductions: its
//! row's sum to `[row, 0]`, its row's sum to the whole row (`[row,
//! CPATH_ALL]`), and a gather of the grid (and of each element's PE and
//! the two row sums) to `[0, 0]`.
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use converse_ext::cpath::{self, CPATH_ALL, CPath, REDUCER_SUM_I64};

/// The stencil's modulus (a prime).
pub const MODULUS: i64 = 1_000_003;

/// What element `[0, 0]` found, for the tests that run this example.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// The grid's side.
    pub n: u32,
    /// Iterations run.
    pub iterations: u32,
    /// The mapper's name.
    pub mapper: String,
    /// The final grid, row-major, as the gather gave it.
    pub grid: Vec<i64>,
    /// The PE of each element, row-major.
    pub pes: Vec<usize>,
    /// Each row's sum as `[row, 0]` received it.
    pub row_sums: Vec<i64>,
    /// Each row's sum as every element of the row received it, summed
    /// over the row (N times the row's sum).
    pub row_sums_everywhere: Vec<i64>,
    /// The sum of the grid's values, each times its row-major number plus 1.
    pub checksum: i64,
}

/// The report of the last job this process ran.
pub static REPORT: Mutex<Option<Report>> = Mutex::new(None);

/// The iterations of the running job (set by [`start`] on every PE).
static ITERATIONS: AtomicU32 = AtomicU32::new(0);

/// Tag of the row sums to `[row, 0]`.
const TAG_ROW: i32 = 1 << 20;
/// Tag of the row sums to the whole row.
const TAG_ROW_ALL: i32 = TAG_ROW + 1;
/// Tag of the gather.
const TAG_GRID: i32 = TAG_ROW + 2;

/// Where a value comes from, from the receiver's point of view.
const FROM_NORTH: i32 = 0;
const FROM_SOUTH: i32 = 1;
const FROM_WEST: i32 = 2;
const FROM_EAST: i32 = 3;

/// The starting value of point `(i, j)`.
pub fn initial(i: u32, j: u32) -> i64 {
    ((i * 31 + j * 17 + 7) % 101) as i64
}

/// One point's next value from its own and its neighbours' (0 where there
/// is none).
pub fn step(v: i64, north: i64, south: i64, west: i64, east: i64) -> i64 {
    (2 * v + 3 * north + 5 * south + 7 * west + 11 * east) % MODULUS
}

/// The stencil computed sequentially: the final N×N grid, row-major.
pub fn sequential(n: u32, iterations: u32) -> Vec<i64> {
    let n = n as usize;
    let mut g: Vec<i64> = (0..n * n)
        .map(|k| initial((k / n) as u32, (k % n) as u32))
        .collect();
    for _ in 0..iterations {
        let at = |i: usize, j: usize| g[i * n + j];
        g = (0..n * n)
            .map(|k| {
                let (i, j) = (k / n, k % n);
                step(
                    at(i, j),
                    if i > 0 { at(i - 1, j) } else { 0 },
                    if i + 1 < n { at(i + 1, j) } else { 0 },
                    if j > 0 { at(i, j - 1) } else { 0 },
                    if j + 1 < n { at(i, j + 1) } else { 0 },
                )
            })
            .collect();
    }
    g
}

/// [`Report::checksum`] of `grid`.
pub fn checksum(grid: &[i64]) -> i64 {
    grid.iter()
        .zip(1..)
        .fold(0i64, |acc, (&v, k)| acc.wrapping_add(v.wrapping_mul(k)))
}

/// The program's own mapper (`columns`).
fn by_columns(path: &CPath, indices: &[u32]) -> usize {
    (path.dimension(1) - 1 - indices[1]) as usize % converse::num_pes()
}

/// One grid point.
fn point(path: &CPath, indices: &[u32]) {
    let (n, i, j) = (path.dimension(0), indices[0], indices[1]);
    let iterations = ITERATIONS.load(Ordering::Relaxed);
    let mut v = initial(i, j);
    // (neighbour, the direction it receives from, the direction we do).
    let mut neighbours = Vec::new();
    if i > 0 {
        neighbours.push(([i - 1, j], FROM_SOUTH, FROM_NORTH));
    }
    if i + 1 < n {
        neighbours.push(([i + 1, j], FROM_NORTH, FROM_SOUTH));
    }
    if j > 0 {
        neighbours.push(([i, j - 1], FROM_EAST, FROM_WEST));
    }
    if j + 1 < n {
        neighbours.push(([i, j + 1], FROM_WEST, FROM_EAST));
    }
    for t in 0..iterations as i32 {
        for (at, theirs, _) in &neighbours {
            cpath::send()
                .dest(path, at)
                .tags(&[t, *theirs])
                .bytes(&v.to_le_bytes())
                .send();
        }
        let mut from = [0i64; 4];
        for &(_, _, ours) in &neighbours {
            let m = cpath::recv().tag(t).tag(ours).wait();
            let bytes: [u8; 8] = m.decode_bytes().try_into().expect("an i64");
            from[ours as usize] = i64::from_le_bytes(bytes);
        }
        v = step(
            v,
            from[FROM_NORTH as usize],
            from[FROM_SOUTH as usize],
            from[FROM_WEST as usize],
            from[FROM_EAST as usize],
        );
    }

    let row = [i, CPATH_ALL];
    cpath::reduce()
        .over(path, &row)
        .tag(TAG_ROW)
        .reducer(REDUCER_SUM_I64)
        .data_of(&[v])
        .dest(path, &[i, 0])
        .contribute();
    cpath::reduce()
        .over(path, &row)
        .tag(TAG_ROW_ALL)
        .reducer(REDUCER_SUM_I64)
        .data_of(&[v])
        .dest(path, &row)
        .contribute();
    let everywhere = row_sum(cpath::recv().tag(TAG_ROW_ALL).wait());
    let at_first = if j == 0 {
        row_sum(cpath::recv().tag(TAG_ROW).wait())
    } else {
        0
    };

    // The gather: the grid, the PEs, the row sums at [row, 0], the row
    // sums everywhere.
    let nn = (n * n) as usize;
    let k = (i * n + j) as usize;
    let mut mine = vec![0i64; 2 * nn + 2 * n as usize];
    mine[k] = v;
    mine[nn + k] = converse::my_pe() as i64;
    mine[2 * nn + i as usize] = at_first;
    mine[2 * nn + n as usize + i as usize] = everywhere;
    cpath::reduce()
        .over(path, &[CPATH_ALL, CPATH_ALL])
        .tag(TAG_GRID)
        .reducer(REDUCER_SUM_I64)
        .data_of(&mine)
        .dest(path, &[0, 0])
        .contribute();
    if (i, j) == (0, 0) {
        let all: Vec<i64> = cpath::recv()
            .tag(TAG_GRID)
            .wait()
            .decode_reduction_of()
            .expect("the gather's i64s");
        finish(n, iterations, &all);
    }
}

/// A row sum's value.
fn row_sum(m: cpath::CPathMsg) -> i64 {
    match m.decode_reduction_of::<i64>().as_deref() {
        Some(&[s]) => s,
        other => panic!("a row sum holds {other:?}"),
    }
}

/// Element `[0, 0]` has the gather: compare, print, end the job.
fn finish(n: u32, iterations: u32, all: &[i64]) {
    let (nn, n_) = ((n * n) as usize, n as usize);
    let report = Report {
        n,
        iterations,
        mapper: MAPPER.lock().unwrap().clone(),
        grid: all[..nn].to_vec(),
        pes: all[nn..2 * nn].iter().map(|&p| p as usize).collect(),
        row_sums: all[2 * nn..2 * nn + n_].to_vec(),
        row_sums_everywhere: all[2 * nn + n_..].to_vec(),
        checksum: checksum(&all[..nn]),
    };
    let want = sequential(n, iterations);
    let want_rows: Vec<i64> = want.chunks(n_).map(|r| r.iter().sum()).collect();
    let equal = report.grid == want
        && report.row_sums == want_rows
        && report
            .row_sums_everywhere
            .iter()
            .zip(&want_rows)
            .all(|(&e, &r)| e == n as i64 * r);
    converse::cmi_printf!(
        "cpath_stencil: {n}×{n}, {iterations} iterations, mapper {} on {} PEs: row sums {:?}, checksum {}\n",
        report.mapper,
        converse::num_pes(),
        report.row_sums,
        report.checksum
    );
    if equal {
        converse::cmi_printf!("cpath_stencil: equal to the sequential computation\n");
    } else {
        converse::cmi_printf!(
            "cpath_stencil: DIFFERENT from the sequential computation (row sums {want_rows:?})\n"
        );
    }
    *REPORT.lock().unwrap() = Some(report);
    converse::exit(if equal { 0 } else { 1 });
}

/// The mapper's name of the running job.
static MAPPER: Mutex<String> = Mutex::new(String::new());

/// The example's start function, on every PE. `args`: the program's
/// arguments (`N`, `ITERATIONS`, `MAPPER`). The `cpath` module must be
/// installed ([`cpath::install`]).
pub fn start(args: &[String]) {
    let n: u32 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(16);
    let iterations: u32 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(4);
    let mapper_name = args.get(3).map_or("block", String::as_str);
    ITERATIONS.store(iterations, Ordering::Relaxed);
    // The same registrations, in the same order, on every PE.
    let point_fn = cpath::register_thread_fn(point);
    let columns = cpath::register_mapper(by_columns);
    let mapper = match mapper_name {
        "block" => cpath::MAPPER_BLOCK,
        "rr" => cpath::MAPPER_ROUND_ROBIN,
        "pe0" => cpath::MAPPER_PE0,
        "home" => cpath::MAPPER_HOME,
        "columns" => columns,
        other => {
            converse::cmi_error!(
                "cpath_stencil: unknown mapper `{other}` (block, rr, pe0, home, columns)\n"
            );
            converse::exit(2)
        }
    };
    *MAPPER.lock().unwrap() = mapper_name.to_string();
    if converse::my_pe() == 0 {
        cpath::make_array(point_fn, mapper, &[n, n]);
    }
}

#[allow(dead_code)] // the tests use `start` alone
fn main() -> std::process::ExitCode {
    cpath::install();
    converse::Converse::new().args(std::env::args()).main(start)
}
