//! Migratable threads in an in-process job (`converse::cth::migrate`): a
//! thread that moves itself from PE to PE a thousand times keeps its stack
//! (an array, pointers into it) and the isomalloc blocks it points to; a
//! suspended thread packed by hand, carried in a message and unpacked on
//! another PE goes on there; what cannot be packed is refused with the
//! reason. Across processes: `core_migrate` in `convrun`'s multi-process
//! tests.
mod common;

use std::sync::Mutex;

use converse::cth::migrate::{self, PackedThread};
use converse::cth::{ThreadHeap, on_thread_heap};
use converse::{Converse, Message, Thread, isomalloc};

// What a migratable thread allocates inside `on_thread_heap` comes from its
// own heap, which moves with it.
#[global_allocator]
static HEAP: ThreadHeap = ThreadHeap;

/// What the test threads saw: (hops, PEs visited in order).
static SEEN: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// A list node in isomalloc memory.
#[repr(C)]
struct Node {
    value: u64,
    next: *mut Node,
}

/// A list of `n` nodes, each its own isomalloc block.
fn make_list(n: u64) -> *mut Node {
    let mut head: *mut Node = std::ptr::null_mut();
    for value in (0..n).rev() {
        let block = isomalloc::isomalloc(size_of::<Node>())
            .expect("isomalloc")
            .cast::<Node>();
        // SAFETY: a fresh block of a page, aligned, ours.
        unsafe { block.as_ptr().write(Node { value, next: head }) };
        head = block.as_ptr();
    }
    head
}

/// The list's values, in order.
fn read_list(mut at: *const Node) -> Vec<u64> {
    let mut out = Vec::new();
    while !at.is_null() {
        // SAFETY: nodes made by `make_list`, alive.
        unsafe {
            out.push((*at).value);
            at = (*at).next;
        }
    }
    out
}

/// Runs a job of `pes` PEs in which PE 0 starts a migratable thread
/// running `body` (with `stack_size`); the job's exit code.
fn run_migratable(pes: &str, stack_size: usize, body: fn()) -> i32 {
    let pes = pes.to_string();
    common::within(120, move || {
        Converse::new()
            .args(["prog", "+p", &pes])
            .run(move |_| {
                if converse::my_pe() == 0 {
                    let t = Thread::create_migratable(body, stack_size);
                    assert!(t.is_migratable());
                    t.awaken();
                }
            })
            .expect("the job starts")
    })
}

const HOPS: usize = 1000;

#[test]
fn a_thread_moves_between_pes_a_thousand_times_keeping_its_stack_and_list() {
    SEEN.lock().unwrap().clear();
    let code = run_migratable("3", 64 << 10, || {
        let n = converse::num_pes();
        // On the stack: an array, and a pointer into it.
        let mut array = [0u64; 512];
        for (i, x) in array.iter_mut().enumerate() {
            *x = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
        let middle: *const u64 = &array[256];
        let list = make_list(20);
        let mut visited = Vec::new();
        for hop in 0..HOPS {
            let dest = (converse::my_pe() + 1 + hop % 2) % n;
            migrate::migrate_self(dest);
            assert_eq!(converse::my_pe(), dest, "hop {hop} arrived");
            visited.push(dest);
            // SAFETY: points into `array`, which moved with
            // the stack to the same address.
            assert_eq!(unsafe { *middle }, array[256]);
            assert!(
                array
                    .iter()
                    .enumerate()
                    .all(|(i, &x)| x == (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
                "hop {hop}: the stack array changed"
            );
            assert_eq!(read_list(list), (0..20).collect::<Vec<_>>(), "hop {hop}");
        }
        *SEEN.lock().unwrap() = visited;
        converse::exit(0);
    });
    assert_eq!(code, 0);
    let seen = SEEN.lock().unwrap().clone();
    assert_eq!(seen.len(), HOPS);
    let mut pe = 0;
    for (hop, &at) in seen.iter().enumerate() {
        pe = (pe + 1 + hop % 2) % 3;
        assert_eq!(at, pe, "hop {hop}");
    }
}

/// A list of boxes, as a Rust program builds one.
struct Link {
    value: u64,
    next: Option<Box<Link>>,
}

static HEAP_SEEN: Mutex<Vec<u64>> = Mutex::new(Vec::new());

#[test]
fn what_a_thread_allocates_on_its_heap_moves_with_it() {
    HEAP_SEEN.lock().unwrap().clear();
    let code = run_migratable("2", 0, || {
        on_thread_heap(|| {
            let mut list: Option<Box<Link>> = None;
            for value in 0..200 {
                list = Some(Box::new(Link { value, next: list }));
            }
            let words: Vec<u64> = (0..1000).collect();
            let head = list.as_deref().map(|l| l as *const Link as *const u8);
            assert!(isomalloc::isomalloc_in_range(head.unwrap()));
            assert!(isomalloc::isomalloc_in_range(words.as_ptr().cast()));
            for hop in 0..100 {
                migrate::migrate_self(1 - converse::my_pe());
                let mut at = list.as_deref();
                let mut expect = 200;
                while let Some(l) = at {
                    expect -= 1;
                    assert_eq!(l.value, expect, "hop {hop}");
                    at = l.next.as_deref();
                }
                assert_eq!(expect, 0);
                assert!(words.iter().enumerate().all(|(i, &w)| w == i as u64));
            }
            // Freed where it is now, on the thread's heap.
            drop(list);
            HEAP_SEEN.lock().unwrap().push(words.iter().sum());
        });
        // Outside the scope: the system's memory.
        let plain = Box::new(5u64);
        assert!(!isomalloc::isomalloc_in_range(
            (&*plain as *const u64).cast()
        ));
        converse::exit(0);
    });
    assert_eq!(code, 0);
    assert_eq!(*HEAP_SEEN.lock().unwrap(), vec![(0..1000u64).sum::<u64>()]);
}

/// Small messages made and dropped inside the scope go back to the
/// thread's heap, not to the OS thread's cache of freed message buffers:
/// the messages made outside it afterwards are the system's memory.
#[test]
fn messages_freed_on_the_thread_heap_are_not_reused_outside_it() {
    let code = run_migratable("1", 0, || {
        on_thread_heap(|| {
            for payload in [0, 8, 40, 96] {
                for _ in 0..64 {
                    let m = Message::new(0, payload);
                    assert!(isomalloc::isomalloc_in_range(m.as_bytes().as_ptr()));
                }
            }
        });
        for payload in [0, 8, 40, 96] {
            let kept: Vec<Message> = (0..64).map(|_| Message::new(0, payload)).collect();
            for m in &kept {
                assert!(
                    !isomalloc::isomalloc_in_range(m.as_bytes().as_ptr()),
                    "a {payload}-byte message outside the scope reused the thread heap's memory"
                );
            }
        }
        converse::exit(0);
    });
    assert_eq!(code, 0);
}

fn on_heap(p: *const u8) -> bool {
    isomalloc::isomalloc_in_range(p)
}

#[test]
fn heap_scopes_nest_and_keep_to_their_own_thread() {
    let code = common::within(60, || {
        Converse::new()
            .args(["prog", "+p", "1"])
            .run(|_| {
                // A thread that suspends inside its scope, for good.
                let sleeper = Thread::create_migratable(
                    || {
                        on_thread_heap(|| {
                            let _kept = Box::new(1u8);
                            converse::suspend();
                        })
                    },
                    0,
                );
                sleeper.awaken();
                let t = Thread::create_migratable(
                    move || {
                        on_thread_heap(|| {
                            let a = Box::new(1u64);
                            on_thread_heap(|| {
                                let b = Box::new(2u64);
                                assert!(on_heap((&*b as *const u64).cast()));
                            });
                            // The inner scope's end leaves the outer one on.
                            let c = Box::new(3u64);
                            assert!(on_heap((&*c as *const u64).cast()));
                            assert!(on_heap((&*a as *const u64).cast()));
                            // isomalloc itself inside a scope: its
                            // bookkeeping stays off the thread's heap.
                            let block = isomalloc::isomalloc(100).expect("isomalloc");
                            // SAFETY: just allocated, not used after.
                            unsafe { isomalloc::isomalloc_free(block) }.expect("free");
                            // The sleeper's last handle dropped here: the
                            // PE keeps it (it has run) and unwinds it as
                            // itself when the PE ends, its scope's end
                            // among it; this thread's scope is untouched.
                            drop(sleeper);
                            let d = Box::new(4u64);
                            assert!(on_heap((&*d as *const u64).cast()));
                        });
                        let e = Box::new(5u64);
                        assert!(!on_heap((&*e as *const u64).cast()));
                        converse::exit(0);
                    },
                    0,
                );
                t.awaken();
            })
            .expect("the job starts")
    });
    assert_eq!(code, 0);
}

#[test]
fn a_packed_thread_travels_in_a_message_and_goes_on_where_it_is_unpacked() {
    SEEN.lock().unwrap().clear();
    let code = common::within(60, || {
        Converse::new()
            .args(["prog", "+p", "2"])
            .run(|_| {
                let arrive = converse::register_handler(|m: Message| {
                    let packed = PackedThread::from_bytes(m.payload()).expect("a packed thread");
                    let t = packed.unpack().expect("unpacks here");
                    assert!(t.is_migratable() && !t.is_finished());
                    t.awaken();
                });
                if converse::my_pe() != 0 {
                    return;
                }
                let t = Thread::create_migratable(
                    || {
                        let words: Vec<usize> = vec![converse::my_pe()];
                        let on = words[0];
                        converse::suspend();
                        SEEN.lock().unwrap().extend([on, converse::my_pe()]);
                        converse::exit(0);
                    },
                    0,
                );
                // Not suspended yet: refused.
                let err = t.pack().unwrap_err();
                assert!(err.0.contains("not suspended"), "{err}");
                // Let it run up to its suspend, then move it.
                t.awaken();
                let main = Thread::current();
                let packer = Thread::create(
                    move || {
                        let sized = t.packed_len().expect("sizing leaves the thread");
                        assert_eq!(t.packed_len().unwrap(), sized, "and sizing again agrees");
                        let packed = t.pack().expect("a suspended migratable thread packs");
                        assert_eq!(packed.len(), sized);
                        assert!(t.pack().unwrap_err().0.contains("packed already"));
                        converse::sync_send_and_free(
                            1,
                            Message::from_payload(arrive, packed.as_bytes()),
                        );
                        drop(main);
                    },
                    0,
                );
                packer.awaken();
            })
            .expect("the job starts")
    });
    assert_eq!(code, 0);
    assert_eq!(*SEEN.lock().unwrap(), vec![0, 1]);
}

#[test]
fn what_cannot_move_is_refused_with_the_reason() {
    let code = common::within(60, || {
        Converse::new()
            .args(["prog", "+p", "1"])
            .run(|_| {
                // Not migratable.
                let plain = Thread::create(converse::suspend, 0);
                plain.awaken();
                // Waiting inside the runtime.
                let event = std::rc::Rc::new(converse::Event::new());
                let waiting = {
                    let event = event.clone();
                    Thread::create_migratable(move || event.wait(), 0)
                };
                waiting.awaken();
                // With a thread-private variable.
                let ctv = std::rc::Rc::new(converse::Ctv::new(|| 0u32));
                let with_ctv = {
                    let ctv = ctv.clone();
                    Thread::create_migratable(
                        move || {
                            ctv.set(7);
                            converse::suspend();
                        },
                        0,
                    )
                };
                with_ctv.awaken();
                let checker = Thread::create(
                    move || {
                        let why = |t: &Thread| t.pack().unwrap_err().0;
                        assert!(
                            why(&plain).contains("not a migratable thread"),
                            "{}",
                            why(&plain)
                        );
                        assert!(
                            why(&waiting).contains("inside the runtime"),
                            "{}",
                            why(&waiting)
                        );
                        assert!(
                            why(&with_ctv).contains("thread-private"),
                            "{}",
                            why(&with_ctv)
                        );
                        assert!(why(&Thread::current()).contains("not a migratable"));
                        // Garbage is no packed thread.
                        assert!(PackedThread::from_bytes(b"not a thread").is_err());
                        event.set();
                        converse::exit(0);
                    },
                    0,
                );
                checker.awaken();
            })
            .expect("the job starts")
    });
    assert_eq!(code, 0);
}
