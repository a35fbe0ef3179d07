//! Parameter marshalling (`cpm`) in one process: every destination from
//! every PE, queue priorities, the manual's programs (`examples/
//! cpm_manual.rs`), arguments of many types round-tripping (a property
//! test), and the handler numbers of two crates' invokables. Across
//! processes: `ext_cpm` in `convrun`'s multi-process tests.
#[path = "../examples/cpm_manual.rs"]
mod example;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use converse::{BitPrio, Queueing, Thread};
use converse_ext::cpm::{self, CPM_ALL, CPM_OTHERS, invokable};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;
use serde::{Deserialize, Serialize};

/// Jobs of this file run one at a time (they share the records).
static SERIAL: Mutex<()> = Mutex::new(());

fn job(args: &[&str], start: impl Fn(&[String]) + Send + Sync + 'static) {
    let code = converse::Converse::new()
        .args(args.iter().copied())
        .run(start)
        .expect("the job starts");
    assert_eq!(code, 0, "{args:?}");
}

/// One invocation as seen where it ran.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Seen {
    on: usize,
    how: String,
    from: usize,
    in_thread: bool,
}

static SEEN: Mutex<Vec<Seen>> = Mutex::new(Vec::new());

fn seen() -> std::sync::MutexGuard<'static, Vec<Seen>> {
    SEEN.lock().unwrap_or_else(|e| e.into_inner())
}

#[invokable]
fn note(how: &str, from: usize, min_stack: usize) {
    let me = Thread::current();
    assert!(me.stack_size() >= min_stack || me.is_main_flow());
    seen().push(Seen {
        on: converse::my_pe(),
        how: how.to_string(),
        from,
        in_thread: !me.is_main_flow(),
    });
}

/// Each PE launches `note` to every PE through every destination.
fn launch_everything(_: &[String]) {
    example::my_enqueue_fifo_init();
    let me = converse::my_pe();
    let pes = converse::num_pes();
    for pe in 0..pes {
        Cpm_note(cpm::send(pe), "send", me, 0);
        Cpm_note(cpm::enqueue_fifo(pe), "fifo", me, 0);
        Cpm_note(cpm::enqueue_lifo(pe), "lifo", me, 0);
        Cpm_note(cpm::enqueue_ififo(pe, -4), "ififo", me, 0);
        Cpm_note(cpm::enqueue_ilifo(pe, 7), "ilifo", me, 0);
        let prio = BitPrio::new(36, &[0x8000_0001, 0xf000_0000]).unwrap();
        Cpm_note(cpm::enqueue_bfifo(pe, prio.clone()), "bfifo", me, 0);
        Cpm_note(cpm::enqueue_blifo(pe, prio), "blifo", me, 0);
        Cpm_note(cpm::enqueue(pe, Queueing::LFifo(-1 << 40)), "lfifo", me, 0);
        Cpm_note(cpm::make_thread(pe), "thread", me, 0);
        Cpm_note(
            cpm::make_thread_size(pe, 1 << 20),
            "thread_size",
            me,
            1 << 20,
        );
        Cpm_note(example::MyEnqueueFIFO(pe), "mine", me, 0);
        cpm_peer::Cpm_peer_store(cpm::enqueue_fifo(pe), (me * 100 + pe) as u64);
    }
    Cpm_note(cpm::send(CPM_ALL), "send_all", me, 0);
    Cpm_note(cpm::send(CPM_OTHERS), "send_others", me, 0);
    Cpm_note(cpm::make_thread(CPM_ALL), "thread_all", me, 0);
    Cpm_note(cpm::enqueue_ilifo(CPM_OTHERS, 3), "ilifo_others", me, 0);
    cpm_peer::Cpm_peer_text(cpm::send(CPM_ALL), "from a peer");
    if me == 0 {
        converse::start_quiescence_detection(|| converse::exit(0));
    }
}

#[test]
fn every_destination_from_every_pe_runs_the_function_once_where_it_says() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for layout in [&["+p", "1"][..], &["+p", "3"], &["+p", "4", "++ppn", "2"]] {
        seen().clear();
        cpm_peer::SEEN.lock().unwrap().clear();
        let mut args = vec!["cpm"];
        args.extend_from_slice(layout);
        job(&args, launch_everything);
        let pes: usize = layout[1].parse().unwrap();
        let mut expected = Vec::new();
        for from in 0..pes {
            for on in 0..pes {
                for how in [
                    "send",
                    "fifo",
                    "lifo",
                    "ififo",
                    "ilifo",
                    "bfifo",
                    "blifo",
                    "lfifo",
                    "thread",
                    "thread_size",
                    "mine",
                    "send_all",
                    "thread_all",
                ] {
                    let in_thread = how.starts_with("thread");
                    expected.push(Seen {
                        on,
                        how: how.into(),
                        from,
                        in_thread,
                    });
                }
                if on != from {
                    for how in ["send_others", "ilifo_others"] {
                        expected.push(Seen {
                            on,
                            how: how.into(),
                            from,
                            in_thread: false,
                        });
                    }
                }
            }
        }
        expected.sort();
        let mut got = seen().clone();
        got.sort();
        assert_eq!(got, expected, "{layout:?}");
        let mut peer = cpm_peer::SEEN.lock().unwrap().clone();
        peer.sort();
        let mut want: Vec<(usize, &str, u64)> = (0..pes)
            .flat_map(|on| {
                (0..pes).flat_map(move |from| {
                    [
                        (on, "peer_store", (from * 100 + on) as u64),
                        (on, "peer_text", 11),
                    ]
                })
            })
            .collect();
        want.sort();
        assert_eq!(peer, want, "{layout:?}");
    }
}

static ORDER: Mutex<Vec<i64>> = Mutex::new(Vec::new());

#[invokable]
fn in_order(tag: i64) {
    ORDER.lock().unwrap().push(tag);
}

#[test]
fn enqueued_invocations_run_in_priority_order() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    ORDER.lock().unwrap().clear();
    job(&["cpm", "+p", "2"], |_| {
        if converse::my_pe() != 0 {
            return;
        }
        // PE 1 enqueues to itself from one handler: every message is
        // queued before any runs.
        Cpm_fill(cpm::send(1));
        converse::start_quiescence_detection(|| converse::exit(0));
    });
    assert_eq!(
        *ORDER.lock().unwrap(),
        [-9, -5, 2, 1, 0, 3, 4, 6, 8, 10, 11],
        "integer priorities first-to-last, LIFO before FIFO at the middle"
    );
}

#[invokable]
fn fill() {
    let me = converse::my_pe();
    Cpm_in_order(cpm::enqueue_ififo(me, 5), 8);
    Cpm_in_order(cpm::enqueue_ififo(me, 5), 10);
    Cpm_in_order(cpm::enqueue_ilifo(me, 5), 6);
    Cpm_in_order(cpm::enqueue_ififo(me, -3), -5);
    Cpm_in_order(cpm::enqueue_ififo(me, -30), -9);
    Cpm_in_order(cpm::enqueue_fifo(me), 3);
    Cpm_in_order(cpm::enqueue_fifo(me), 4);
    Cpm_in_order(cpm::enqueue_lifo(me), 0);
    Cpm_in_order(cpm::enqueue_lifo(me), 1);
    Cpm_in_order(cpm::enqueue_bfifo(me, BitPrio::from_int(-1)), 2);
    Cpm_in_order(cpm::enqueue_blifo(me, BitPrio::from_int(40)), 11);
}

fn output(args: &[&str]) -> Vec<(usize, String)> {
    example::OUTPUT.lock().unwrap().clear();
    job(args, example::start);
    let mut out = std::mem::take(&mut *example::OUTPUT.lock().unwrap());
    out.sort();
    out
}

#[test]
fn the_manuals_programs_print_what_the_manual_says() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // myprog: one integer from each PE but 0.
    let out = output(&["myprog", "myprog", "+p", "4"]);
    assert_eq!(out.iter().map(|(pe, _)| *pe).collect::<Vec<_>>(), [1, 2, 3]);
    assert!(out.iter().all(|(_, l)| l.parse::<i32>().is_ok()), "{out:?}");
    // example2: PE 1 prints PE 0's arguments.
    let out = output(&["example2", "example2", "x", "yz", "+p", "2"]);
    assert_eq!(
        out,
        [(
            1,
            "The program's arguments are: example2 example2 x yz ".into()
        )]
    );
    // example3: a simple type and a pointer type.
    let out = output(&["example3", "example3", "+p", "3"]);
    assert_eq!(out, [(2, "(1.5, -2.25) and 42".into())]);
    // §6.3: the program's own CpmEnqueueFIFO.
    let out = output(&["destination", "destination", "+p", "4"]);
    assert_eq!(out, [(3, "12".into())]);
    // CpmMakeThread(CPM_ALL).
    let out = output(&["broadcast", "broadcast", "+p", "3"]);
    assert_eq!(out, [(0, "5".into()), (1, "5".into()), (2, "5".into())]);
}

/// A user type of several shapes.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
enum Shape {
    Empty,
    Point(i16, i16),
    Named { name: String, tags: Vec<u8> },
}

/// One argument list, as sent.
type Args = (
    i8,
    u64,
    i128,
    u64, // an f64's bits: NaNs compare by bits
    bool,
    char,
    String,
    Vec<u32>,
    Option<Vec<String>>,
    BTreeMap<u8, String>,
    Shape,
    example::Coordinate,
);

static ECHOED: Mutex<Vec<(usize, Args)>> = Mutex::new(Vec::new());
static SENT: Mutex<Vec<Args>> = Mutex::new(Vec::new());

#[allow(clippy::too_many_arguments)]
#[invokable]
fn echo(
    n: usize,
    a: i8,
    b: u64,
    c: i128,
    d: f64,
    e: bool,
    f: char,
    g: &str,
    h: &[u32],
    i: Option<Vec<String>>,
    j: &BTreeMap<u8, String>,
    k: Shape,
    l: example::Coordinate,
) {
    let args = (
        a,
        b,
        c,
        d.to_bits(),
        e,
        f,
        g.to_string(),
        h.to_vec(),
        i,
        j.clone(),
        k,
        l,
    );
    ECHOED.lock().unwrap().push((n, args));
}

fn shape() -> impl Strategy<Value = Shape> {
    proptest::prop_oneof![
        proptest::strategy::Just(Shape::Empty),
        (proptest::num::i16::ANY, proptest::num::i16::ANY).prop_map(|(x, y)| Shape::Point(x, y)),
        (
            ".*",
            proptest::collection::vec(proptest::num::u8::ANY, 0..40)
        )
            .prop_map(|(name, tags)| Shape::Named { name, tags }),
    ]
}

#[test]
fn arguments_of_every_kind_arrive_as_they_were_sent() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    use proptest::prelude::any;
    let strategy = (
        (
            any::<i8>(),
            any::<u64>(),
            any::<i128>(),
            any::<u64>(),
            any::<bool>(),
            any::<char>(),
        ),
        (
            ".{0,300}",
            proptest::collection::vec(any::<u32>(), 0..200),
            proptest::option::of(proptest::collection::vec(".{0,8}", 0..5)),
            proptest::collection::btree_map(any::<u8>(), ".{0,4}", 0..6),
            shape(),
            (any::<f64>(), any::<f64>()).prop_map(|(x, y)| example::Coordinate { x, y }),
        ),
    );
    let mut runner = TestRunner::deterministic();
    let cases: Vec<Args> = (0..200)
        .map(|_| {
            let ((a, b, c, d, e, f), (g, h, i, j, k, l)) =
                strategy.new_tree(&mut runner).unwrap().current();
            (a, b, c, d, e, f, g, h, i, j, k, l)
        })
        .collect();
    *SENT.lock().unwrap() = cases.clone();
    ECHOED.lock().unwrap().clear();
    job(&["cpm", "+p", "2"], |_| {
        if converse::my_pe() != 0 {
            return;
        }
        for (n, (a, b, c, d, e, f, g, h, i, j, k, l)) in SENT.lock().unwrap().iter().enumerate() {
            Cpm_echo(
                cpm::send(1),
                n,
                *a,
                *b,
                *c,
                f64::from_bits(*d),
                *e,
                *f,
                g,
                h,
                i.clone(),
                j,
                k.clone(),
                *l,
            );
        }
        converse::start_quiescence_detection(|| converse::exit(0));
    });
    let mut echoed = std::mem::take(&mut *ECHOED.lock().unwrap());
    echoed.sort_by_key(|(n, _)| *n);
    assert_eq!(echoed.len(), cases.len());
    for ((n, got), sent) in echoed.iter().zip(&cases) {
        // Coordinates hold f64s: compare their bits.
        let bits = |c: &example::Coordinate| (c.x.to_bits(), c.y.to_bits());
        assert_eq!(bits(&got.11), bits(&sent.11), "case {n}");
        let strip = |a: &Args| {
            let mut a = a.clone();
            a.11 = example::Coordinate { x: 0.0, y: 0.0 };
            a
        };
        assert_eq!(strip(got), strip(sent), "case {n}");
    }
}

/// Handler numbers each PE saw: (PE, [this crate's, then the peer's]).
static NUMBERS: Mutex<Vec<(usize, Vec<usize>)>> = Mutex::new(Vec::new());

#[invokable(explicit)]
fn registered_by_hand(n: u32) {
    seen().push(Seen {
        on: converse::my_pe(),
        how: format!("by hand {n}"),
        from: 0,
        in_thread: false,
    });
}

#[test]
fn two_crates_invokables_take_the_same_numbers_on_every_pe_in_path_order() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    NUMBERS.lock().unwrap().clear();
    seen().clear();
    job(&["cpm", "+p", "4", "++ppn", "2"], |_| {
        cpm::register(&CPM_REGISTERED_BY_HAND);
        let mut numbers: Vec<usize> = vec![
            cpm::handler_index(&CPM_ECHO),
            cpm::handler_index(&CPM_FILL),
            cpm::handler_index(&CPM_IN_ORDER),
            cpm::handler_index(&CPM_NOTE),
        ];
        numbers.extend(cpm_peer::handler_numbers());
        numbers.push(cpm::handler_index(&CPM_REGISTERED_BY_HAND));
        NUMBERS.lock().unwrap().push((converse::my_pe(), numbers));
        Cpm_registered_by_hand(cpm::send(CPM_OTHERS), converse::my_pe() as u32);
        if converse::my_pe() == 0 {
            converse::start_quiescence_detection(|| converse::exit(0));
        }
    });
    let numbers = NUMBERS.lock().unwrap().clone();
    assert_eq!(numbers.len(), 4);
    let first = &numbers[0].1;
    assert!(numbers.iter().all(|(_, n)| n == first), "{numbers:?}");
    // Sorted by full path: `cpm::…` (this file), then `cpm_peer::…`; the
    // one registered by hand after all of them.
    assert!(first.windows(2).all(|w| w[0] < w[1]), "{first:?}");
    assert_eq!(CPM_NOTE.name(), "cpm::note");
    assert_eq!(cpm_peer::CPM_PEER_STORE.name(), "cpm_peer::peer_store");
    assert_eq!(seen().len(), 12);

    // A PE's numbers end with it: not on this thread (PE 0's) after the
    // job, nor in a later job whose PEs did not register the function.
    let by_hand = *first.last().expect("numbers");
    assert!(!cpm::is_invoker(by_hand));
    let checked = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&checked);
    job(&["cpm", "+p", "2"], move |_| {
        assert!(!cpm::is_invoker(by_hand));
        assert!(cpm::is_invoker(cpm::handler_index(&CPM_NOTE)));
        c.fetch_add(1, Ordering::Relaxed);
        converse::exit_scheduler();
    });
    assert_eq!(checked.load(Ordering::Relaxed), 2);
}

// Invokables whose names and arguments collide with what `#[invokable]`
// writes: an argument named like the function, `msg` and `destination`
// arguments, a function named `drop`, a raw identifier, a lifetime, and
// two functions of one path (declared in function bodies).
static ODD: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn odd(s: String) {
    ODD.lock().unwrap().push(s);
}

#[invokable]
fn same(same: u32) {
    odd(format!("same {same}"));
}

#[invokable]
fn with_msg(msg: String, destination: Vec<u8>) {
    odd(format!("msg {msg} {destination:?}"));
}

#[invokable]
fn drop(x: String) {
    odd(format!("drop {x}"));
}

#[invokable]
fn r#type(r#in: u8) {
    odd(format!("type {in}", in = r#in));
}

#[invokable]
fn borrowed<'a>(s: &'a str, v: &'a [u16]) {
    odd(format!("borrowed {s} {v:?}"));
}

fn first_body() {
    #[invokable]
    fn helper(n: u8) {
        odd(format!("first {n}"));
    }
    Cpm_helper(cpm::send(0), 1);
}

fn second_body() {
    #[invokable]
    fn helper(n: u8) {
        odd(format!("second {n}"));
    }
    Cpm_helper(cpm::send(0), 2);
}

#[test]
fn invokables_named_like_the_generated_code_work() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    ODD.lock().unwrap().clear();
    job(&["cpm", "+p", "2"], |_| {
        if converse::my_pe() != 1 {
            return;
        }
        Cpm_same(cpm::send(0), 7);
        Cpm_with_msg(cpm::send(0), "hello".into(), vec![1, 2]);
        Cpm_drop(cpm::send(0), "it".into());
        Cpm_type(cpm::send(0), 9);
        Cpm_borrowed(cpm::send(0), "s", &[3, 4]);
        first_body();
        second_body();
        converse::start_quiescence_detection(|| converse::exit(0));
    });
    let mut got = ODD.lock().unwrap().clone();
    got.sort();
    assert_eq!(
        got,
        [
            "borrowed s [3, 4]",
            "drop it",
            "first 1",
            "msg hello [1, 2]",
            "same 7",
            "second 2",
            "type 9"
        ]
    );
}

/// A function that returns a value: each PE asks PE `(me + 1) % n`, from a
/// user-level thread (`wait`) and from a task (`.await`).
#[invokable]
fn describe(who: &str, times: u32) -> String {
    format!("{} x{times} on PE {}", who, converse::my_pe())
}

static ANSWERS: Mutex<Vec<(usize, String)>> = Mutex::new(Vec::new());

#[test]
fn an_invokable_answers_its_caller_through_a_typed_future() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    ANSWERS.lock().unwrap().clear();
    job(&["cpm", "+p", "4", "++ppn", "2"], |_| {
        let me = converse::my_pe();
        let next = (me + 1) % converse::num_pes();
        let record = move |s: String| {
            let n = {
                let mut answers = ANSWERS.lock().unwrap();
                answers.push((me, s));
                answers.len()
            };
            if n == 2 * converse::num_pes() {
                converse::exit(0);
            }
        };
        Thread::create(
            move || {
                let answer = Cpm_describe(cpm::send(next), "thread", 1);
                record(answer.wait());
            },
            0,
        )
        .awaken();
        let answer = Cpm_describe(cpm::enqueue_fifo(next), "task", 2);
        converse_ext::tasks::spawn(async move { record(answer.await) });
    });
    let mut answers = ANSWERS.lock().unwrap().clone();
    answers.sort();
    let mut want = vec![];
    for me in 0..4 {
        let next = (me + 1) % 4;
        want.push((me, format!("task x2 on PE {next}")));
        want.push((me, format!("thread x1 on PE {next}")));
    }
    assert_eq!(answers, want);
}

static TOTALS: Mutex<Vec<(usize, u64, String)>> = Mutex::new(Vec::new());

/// A reduction's result, and typed sends, call it on the root.
#[invokable]
fn total(sum: u64, names: Vec<String>) {
    TOTALS
        .lock()
        .unwrap()
        .push((converse::my_pe(), sum, names.join(",")));
    if TOTALS.lock().unwrap().len() == 2 {
        converse::exit(0);
    }
}

#[test]
fn a_reduction_ends_in_an_invokable() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TOTALS.lock().unwrap().clear();
    job(&["cpm", "+p", "6", "++ppn", "3"], |_| {
        let me = converse::my_pe();
        converse::reduction((me as u64, vec![format!("p{me}")]), |(s, mut n), rest| {
            let mut sum = s;
            for (s2, n2) in rest {
                sum += s2;
                n.extend(n2);
            }
            n.sort();
            (sum, n)
        })
        .then(&CPM_TOTAL);
        if me == 5 {
            CPM_TOTAL.handler().send(2, &(7, vec!["direct".into()]));
        }
    });
    let mut totals = TOTALS.lock().unwrap().clone();
    totals.sort();
    assert_eq!(
        totals,
        vec![
            (0, 15, "p0,p1,p2,p3,p4,p5".to_string()),
            (2, 7, "direct".to_string())
        ]
    );
}
