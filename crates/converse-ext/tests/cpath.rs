//! Parallel arrays of threads (`cpath`) in in-process jobs: the stencil of
//! `examples/cpath_stencil.rs` (16×16 threads, sends, receives, row
//! reductions to one element and to a whole row, a gather) equal to the
//! sequential computation under every mapper, on `+p 4 ++ppn 2` and on
//! `+p 1`; a multicast to a row; `CPATH_WILD`; messages that arrive before
//! their receive; `make_thread`; reductions over rounds, with typed and
//! byte-wise reducers of the program's. Across processes: `ext_cpath` in
//! `convrun`'s multi-process tests.
#[path = "../examples/cpath_stencil.rs"]
mod example;

use std::sync::Mutex;

use converse::Converse;
use converse_ext::cpath::{self, CPATH_ALL, CPATH_WILD, CPath};

/// Jobs of this file run one at a time (they share `LOG` and the example's
/// report).
static SERIAL: Mutex<()> = Mutex::new(());

/// What the elements of the running job recorded.
static LOG: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The layouts every job runs on.
const LAYOUTS: [&[&str]; 2] = [&["+p", "4", "++ppn", "2"], &["+p", "1"]];

/// Runs a job of `args` (the cpath module installed) and returns its exit
/// code and what its elements recorded, sorted.
fn job(args: &[&str], start: impl Fn(&[String]) + Send + Sync + 'static) -> (i32, Vec<String>) {
    LOG.lock().unwrap().clear();
    cpath::install();
    let code = Converse::new()
        .args(args.iter().copied())
        .run(start)
        .expect("the job starts");
    let mut log = std::mem::take(&mut *LOG.lock().unwrap());
    log.sort();
    (code, log)
}

/// Records `line`; the `total`-th record ends the job.
fn record(line: String, total: usize) {
    let mut log = LOG.lock().unwrap();
    log.push(line);
    if log.len() == total {
        drop(log);
        converse::exit(0);
    }
}

#[test]
fn the_stencil_equals_the_sequential_computation_under_every_mapper() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (n, iterations) = (16u32, 4u32);
    let want = example::sequential(n, iterations);
    let want_rows: Vec<i64> = want
        .chunks(n as usize)
        .map(|r| r.iter().sum::<i64>())
        .collect();
    let runs: [(&[&str], &str); 7] = [
        (LAYOUTS[0], "block"),
        (LAYOUTS[0], "rr"),
        (LAYOUTS[0], "pe0"),
        (LAYOUTS[0], "home"),
        (LAYOUTS[0], "columns"),
        (LAYOUTS[1], "block"),
        (&["+p", "3"], "rr"),
    ];
    for (layout, mapper) in runs {
        let mut args = vec!["cpath_stencil", "16", "4", mapper];
        args.extend_from_slice(layout);
        *example::REPORT.lock().unwrap() = None;
        let (code, _) = job(&args, example::start);
        let r = example::REPORT
            .lock()
            .unwrap()
            .take()
            .expect("element [0, 0] reported");
        assert_eq!(code, 0, "{args:?}");
        assert_eq!(r.grid, want, "{args:?}");
        assert_eq!(r.row_sums, want_rows, "{args:?}");
        let everywhere: Vec<i64> = want_rows.iter().map(|s| s * n as i64).collect();
        assert_eq!(r.row_sums_everywhere, everywhere, "{args:?}");
        assert_eq!(r.checksum, example::checksum(&want));
        // The elements ran where the mapper put them.
        let pes: usize = layout[1].parse().unwrap();
        let total = (n * n) as usize;
        let placed: Vec<usize> = (0..total)
            .map(|k| match mapper {
                "block" => k * pes / total,
                "rr" => k % pes,
                "pe0" | "home" => 0,
                "columns" => (n as usize - 1 - k % n as usize) % pes,
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(r.pes, placed, "{args:?}");
    }
}

/// The elements of a 3×4 array: `[0, 0]` multicasts to row 1 and sends
/// `[2, 3]` four messages `[5, k]` then one `[9]`; row 1 records what it
/// got; `[2, 3]` takes `[9]` first (so the others arrived before their
/// receive), then `[5, 1]` without waiting, then `[5, CPATH_WILD]` twice.
fn mail(path: &CPath, ix: &[u32]) {
    let me = converse::my_pe();
    let total = 5;
    match (ix[0], ix[1]) {
        (0, 0) => {
            cpath::send()
                .dest(path, &[1, CPATH_ALL])
                .tag(7)
                .bytes(b"row 1")
                .send();
            for k in 0..4 {
                cpath::send()
                    .dest(path, &[2, 3])
                    .tags(&[5, k])
                    .bytes(&[k as u8])
                    .send();
            }
            cpath::send().dest(path, &[2, 3]).tag(9).send();
        }
        (1, j) => {
            let m = cpath::recv().tag(7).wait();
            assert_eq!(m.tags(), [7]);
            let (p, got) = cpath::current_element().expect("an element");
            assert_eq!((p, got), (path.clone(), ix.to_vec()));
            assert_eq!(path.pe_of(ix), me, "the element runs where it is mapped");
            record(
                format!(
                    "row 1: [1, {j}] got {:?}",
                    String::from_utf8_lossy(m.decode_bytes())
                ),
                total,
            );
            m.free();
        }
        (2, 3) => {
            let last = cpath::recv().tag(9).wait();
            assert!(last.decode_bytes().is_empty());
            assert!(last.decode_reduction().is_none());
            let early = cpath::recv()
                .tags(&[5, 1])
                .try_wait()
                .expect("[5, 1] arrived before [9]");
            assert!(cpath::recv().tags(&[5, 1]).try_wait().is_none());
            let a = cpath::recv().tags(&[5, CPATH_WILD]).wait();
            let b = cpath::recv().tags(&[5, CPATH_WILD]).wait();
            let c = cpath::recv().tags(&[CPATH_WILD, CPATH_WILD]).wait();
            record(
                format!(
                    "[2, 3] got {:?} then {:?} {:?} {:?}",
                    early.decode_bytes(),
                    a.tags(),
                    b.tags(),
                    c.tags()
                ),
                total,
            );
        }
        _ => {}
    }
}

#[test]
fn multicasts_wildcards_and_messages_that_arrive_before_their_receive() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for layout in LAYOUTS {
        for mapper in [cpath::MAPPER_ROUND_ROBIN, cpath::MAPPER_BLOCK] {
            let mut args = vec!["cpath"];
            args.extend_from_slice(layout);
            let (code, log) = job(&args, move |_| {
                let f = cpath::register_thread_fn(mail);
                if converse::my_pe() == converse::num_pes() - 1 {
                    // Made from the last PE, not PE 0.
                    cpath::make_array(f, mapper, &[3, 4]);
                }
            });
            assert_eq!(code, 0, "{args:?}");
            assert_eq!(
                log,
                [
                    "[2, 3] got [1] then [5, 0] [5, 2] [5, 3]",
                    "row 1: [1, 0] got \"row 1\"",
                    "row 1: [1, 1] got \"row 1\"",
                    "row 1: [1, 2] got \"row 1\"",
                    "row 1: [1, 3] got \"row 1\"",
                ],
                "{args:?} mapper {mapper}"
            );
        }
    }
}

/// A single thread: a message from the start function of PE 0, and a
/// reduction over itself alone.
fn single(path: &CPath, ix: &[u32]) {
    assert!(ix.is_empty());
    assert_eq!(path.dimensions(), 0);
    let m = cpath::recv().tag(1).wait();
    cpath::reduce()
        .over(path, &[])
        .tag(2)
        .reducer(cpath::REDUCER_SUM_I64)
        .data_of(&[41i64])
        .dest(path, &[])
        .contribute();
    let r = cpath::recv().tag(2).wait();
    assert_eq!(r.decode_reduction(), Some((1, 8, &41i64.to_le_bytes()[..])));
    record(
        format!(
            "a thread on PE {} (home {}) got {:?} and {:?}",
            converse::my_pe(),
            path.home(),
            String::from_utf8_lossy(m.decode_bytes()),
            r.decode_reduction_of::<i64>()
        ),
        1,
    );
}

#[test]
fn make_thread_makes_one_thread_on_the_given_pe() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for layout in LAYOUTS {
        let mut args = vec!["cpath"];
        args.extend_from_slice(layout);
        let (code, log) = job(&args, |_| {
            let f = cpath::register_thread_fn(single);
            if converse::my_pe() == 0 {
                let last = converse::num_pes() - 1;
                let t = cpath::make_thread(f, last);
                assert_eq!(t.home(), last);
                assert_eq!(t.id().0, 0);
                assert_eq!(CPath::from_bytes(&t.to_bytes()).as_ref(), Some(&t));
                cpath::send().dest(&t, &[]).tag(1).bytes(b"hello").send();
            }
        });
        assert_eq!(code, 0, "{args:?}");
        let pe = if layout[1] == "4" { 3 } else { 0 };
        assert_eq!(
            log,
            [format!(
                "a thread on PE {pe} (home {pe}) got \"hello\" and Some([41])"
            )]
        );
    }
}

/// The reducers of the round test, registered on every PE.
static REDUCERS: Mutex<(usize, usize)> = Mutex::new((0, 0));

/// Byte-wise xor (a reducer on raw bytes).
fn xor(_vecsize: usize, acc: &mut [u8], other: &[u8]) {
    for (a, b) in acc.iter_mut().zip(other) {
        *a ^= b;
    }
}

/// Each of 8 elements contributes to three rounds of one reduction (same
/// tags) before receiving any result, to a product of its own reducer,
/// to an f64 sum and to a xor of bytes, all to every element.
fn rounds(path: &CPath, ix: &[u32]) {
    let (product, xor_index) = *REDUCERS.lock().unwrap();
    let k = ix[0] as i64;
    let all = [CPATH_ALL];
    for round in 0..3i64 {
        cpath::reduce()
            .over(path, &all)
            .tag(50)
            .reducer(cpath::REDUCER_SUM_I64)
            .data_of(&[k * round, 1])
            .dest(path, &all)
            .contribute();
    }
    cpath::reduce()
        .over(path, &all)
        .tags(&[60, 1])
        .reducer(product)
        .data_of(&[ix[0] as u64 + 1])
        .dest(path, &all)
        .contribute();
    cpath::reduce()
        .over(path, &all)
        .tags(&[60, 2])
        .reducer(cpath::REDUCER_SUM_F64)
        .data_of(&[0.5f64, k as f64])
        .dest(path, &all)
        .contribute();
    let byte = [1u8 << ix[0]];
    cpath::reduce()
        .over(path, &all)
        .tags(&[60, 3])
        .reducer(xor_index)
        .bytes(1, 1, &byte)
        .dest(path, &all)
        .contribute();
    let mut got = Vec::new();
    for _ in 0..3 {
        let m = cpath::recv().tag(50).wait();
        got.push(format!("{:?}", m.decode_reduction_of::<i64>().unwrap()));
    }
    let p = cpath::recv().tags(&[60, 1]).wait();
    got.push(format!("{:?}", p.decode_reduction_of::<u64>().unwrap()));
    let f = cpath::recv().tags(&[60, 2]).wait();
    got.push(format!("{:?}", f.decode_reduction_of::<f64>().unwrap()));
    let x = cpath::recv().tags(&[60, CPATH_WILD]).wait();
    got.push(format!("{:?}", x.decode_reduction()));
    record(got.join(" "), 8);
}

#[test]
fn reductions_keep_their_rounds_apart_and_take_the_programs_reducers() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for layout in LAYOUTS {
        let mut args = vec!["cpath"];
        args.extend_from_slice(layout);
        let (code, log) = job(&args, |_| {
            let f = cpath::register_thread_fn(rounds);
            let product = cpath::register_reducer_of::<u64>(|a, b| *a *= b);
            let xor_index = cpath::register_reducer(xor);
            *REDUCERS.lock().unwrap() = (product, xor_index);
            if converse::my_pe() == 0 {
                cpath::make_array(f, cpath::MAPPER_ROUND_ROBIN, &[8]);
            }
        });
        assert_eq!(code, 0, "{args:?}");
        // 0+…+7 = 28; 8! = 40320; 8 × 0.5 = 4, 28.0; 0b1111_1111.
        let line = "[0, 8] [28, 8] [56, 8] [40320] [4.0, 28.0] Some((1, 1, [255]))";
        assert_eq!(log, vec![line; 8], "{args:?}");
    }
}

/// A single thread: a message, a reduction over itself, then it returns.
fn brief(path: &CPath, _: &[u32]) {
    let _ = cpath::recv().tag(1).wait();
    cpath::reduce()
        .over(path, &[])
        .tag(2)
        .reducer(cpath::REDUCER_SUM_I64)
        .data_of(&[1i64])
        .dest(path, &[])
        .contribute();
    let _ = cpath::recv().tag(2).wait();
}

/// An element of a 4×4 array: `[i, 0]` multicasts to its row, every
/// element sums over its row to the whole row, then returns.
fn row(path: &CPath, ix: &[u32]) {
    let whole = [ix[0], CPATH_ALL];
    if ix[1] == 0 {
        cpath::send().dest(path, &whole).tag(5).send();
    }
    let _ = cpath::recv().tag(5).wait();
    cpath::reduce()
        .over(path, &whole)
        .tag(6)
        .reducer(cpath::REDUCER_SUM_I64)
        .data_of(&[ix[1] as i64])
        .dest(path, &whole)
        .contribute();
    let r = cpath::recv().tag(6).wait();
    assert_eq!(r.decode_reduction_of::<i64>(), Some(vec![6]));
}

/// On each PE, what CPath keeps once every element has returned.
fn report_footprint(_: converse::Message) {
    let f = cpath::footprint();
    record(
        format!(
            "PE {}: {} arrays, {} done, {} elements, {} tombstones, {} layouts, {} reductions",
            converse::my_pe(),
            f.arrays,
            f.done,
            f.elements,
            f.finished,
            f.layouts,
            f.reductions
        ),
        converse::num_pes(),
    );
}

#[test]
fn finished_arrays_shrink_to_their_descriptor() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const THREADS: usize = 30;
    for layout in LAYOUTS {
        let mut args = vec!["cpath"];
        args.extend_from_slice(layout);
        let (code, log) = job(&args, |_| {
            let f = cpath::register_thread_fn(brief);
            let g = cpath::register_thread_fn(row);
            let report = converse::register_handler(report_footprint);
            if converse::my_pe() != 0 {
                return;
            }
            for k in 0..THREADS {
                let t = cpath::make_thread(f, k % converse::num_pes());
                cpath::send().dest(&t, &[]).tag(1).send();
            }
            cpath::make_array(g, cpath::MAPPER_ROUND_ROBIN, &[4, 4]);
            converse::start_quiescence_detection(move || {
                converse::sync_broadcast_all_and_free(converse::Message::new(report, 0));
            });
        });
        assert_eq!(code, 0, "{args:?}");
        let pes: usize = layout[1].parse().unwrap();
        let want: Vec<String> = (0..pes)
            .map(|pe| {
                // Its single threads and the 4×4 array: one small record
                // each, nothing else.
                let n = (0..THREADS).filter(|k| k % pes == pe).count() + 1;
                format!("PE {pe}: {n} arrays, {n} done, 0 elements, 0 tombstones, 0 layouts, 0 reductions")
            })
            .collect();
        assert_eq!(log, want, "{args:?}");
    }
}
