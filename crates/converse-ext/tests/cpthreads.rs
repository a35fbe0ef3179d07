//! Converse-POSIX threads: a bounded producer/consumer with a mutex and
//! two condition variables on every PE of a 4-PE job, thread-specific
//! data with destructors, joins (a detached thread's refused), exit values,
//! deferred cancellation, timed waits, once, and the mutex kinds.
use std::any::Any;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Mutex;
use std::time::Duration;

use converse::{Converse, Message};
use converse_ext::cpthreads::{
    self, CancelState, CancelType, DetachState, Exit, MutexKind, PthreadAttr, PthreadCond,
    PthreadError, PthreadMutex, PthreadMutexAttr, PthreadOnce, cpthreads_start_main,
    pthread_cancel, pthread_create, pthread_detach, pthread_equal, pthread_exit,
    pthread_getspecific, pthread_join, pthread_key_create, pthread_key_delete, pthread_once,
    pthread_self, pthread_setcancelstate, pthread_setcanceltype, pthread_setspecific,
    pthread_testcancel, pthread_yield,
};

/// The jobs of this file run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Runs `main` in the first pthread of every PE of a job of `pes` PEs;
/// each PE's `main` returns a number, and the job checks every PE gave
/// `want`.
fn on_every_pe(pes: usize, want: u64, main: fn() -> u64) {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    cpthreads::install();
    let p = pes.to_string();
    let code = Converse::new()
        .args(["prog", "+p", p.as_str()])
        .run(move |args| {
            let reported = Rc::new(Cell::new(0usize));
            let r = Rc::clone(&reported);
            let done = converse::register_handler(move |m: Message| {
                let got = u64::from_le_bytes(m.payload().try_into().unwrap());
                assert_eq!(got, want, "a PE's answer");
                r.set(r.get() + 1);
                if r.get() == converse::num_pes() {
                    converse::exit(0);
                }
            });
            cpthreads_start_main(
                move |_args| {
                    let answer = main();
                    converse::sync_send_and_free(
                        0,
                        Message::from_payload(done, &answer.to_le_bytes()),
                    );
                },
                args,
            );
        })
        .expect("the job starts");
    assert_eq!(code, 0);
}

fn value<T: 'static + Copy>(b: Box<dyn Any>) -> T {
    *b.downcast::<T>().expect("the thread's result type")
}

/// The bounded buffer the producers and consumers share.
struct Buffer {
    items: RefCell<VecDeque<u64>>,
    lock: PthreadMutex,
    not_full: PthreadCond,
    not_empty: PthreadCond,
}

const CAPACITY: usize = 4;
const PER_PRODUCER: u64 = 200;

#[test]
fn a_bounded_producer_consumer_on_every_pe() {
    fn main() -> u64 {
        let buf = Rc::new(Buffer {
            items: RefCell::new(VecDeque::new()),
            lock: PthreadMutex::default(),
            not_full: PthreadCond::new(),
            not_empty: PthreadCond::new(),
        });
        let attr = PthreadAttr::new();
        let mut threads = Vec::new();
        for p in 0..3u64 {
            let b = Rc::clone(&buf);
            threads.push(
                pthread_create(&attr, move || {
                    for i in 0..PER_PRODUCER {
                        b.lock.lock().unwrap();
                        while b.items.borrow().len() == CAPACITY {
                            b.not_full.wait(&b.lock).unwrap();
                        }
                        assert!(b.items.borrow().len() < CAPACITY);
                        b.items.borrow_mut().push_back(p * 1000 + i);
                        b.not_empty.signal();
                        b.lock.unlock().unwrap();
                    }
                    Box::new(0u64)
                })
                .unwrap(),
            );
        }
        for _ in 0..2 {
            let b = Rc::clone(&buf);
            threads.push(
                pthread_create(&attr, move || {
                    let mut sum = 0u64;
                    loop {
                        b.lock.lock().unwrap();
                        while b.items.borrow().is_empty() {
                            b.not_empty.wait(&b.lock).unwrap();
                        }
                        let item = b.items.borrow_mut().pop_front().unwrap();
                        b.not_full.signal();
                        b.lock.unlock().unwrap();
                        if item == u64::MAX {
                            return Box::new(sum);
                        }
                        sum += item;
                    }
                })
                .unwrap(),
            );
        }
        // Wait for the producers, then stop the consumers.
        let mut total = 0;
        for t in threads.drain(..3) {
            total += value::<u64>(match pthread_join(t).unwrap() {
                Exit::Returned(v) => v,
                Exit::Canceled => panic!("a producer was cancelled"),
            });
        }
        assert_eq!(total, 0);
        for _ in 0..2 {
            buf.lock.lock().unwrap();
            while buf.items.borrow().len() == CAPACITY {
                buf.not_full.wait(&buf.lock).unwrap();
            }
            buf.items.borrow_mut().push_back(u64::MAX);
            buf.not_empty.signal();
            buf.lock.unlock().unwrap();
        }
        let mut sum = 0;
        for t in threads {
            match pthread_join(t).unwrap() {
                Exit::Returned(v) => sum += value::<u64>(v),
                Exit::Canceled => panic!("a consumer was cancelled"),
            }
        }
        sum
    }
    let per: u64 = (0..PER_PRODUCER).sum();
    let want = 3 * per + (1000 + 2000) * PER_PRODUCER;
    on_every_pe(4, want, main);
}

thread_local! {
    /// Values the key's destructor saw, on this PE's OS thread.
    static DESTROYED: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

#[test]
fn keys_joins_exits_and_detached_threads() {
    fn record(v: Rc<dyn Any>) {
        let n = *v.downcast_ref::<u64>().expect("a u64");
        DESTROYED.with(|d| d.borrow_mut().push(n));
    }
    fn main() -> u64 {
        let key = pthread_key_create(Some(record)).unwrap();
        let plain = pthread_key_create(None).unwrap();
        let attr = PthreadAttr::new();
        let t = pthread_create(&attr, move || {
            assert!(pthread_getspecific(key).is_none());
            pthread_setspecific(key, Some(Rc::new(7u64))).unwrap();
            pthread_setspecific(plain, Some(Rc::new(8u64))).unwrap();
            let v = pthread_getspecific(key).unwrap();
            assert_eq!(*v.downcast_ref::<u64>().unwrap(), 7);
            // Exit from deep inside: the stack unwinds to the start.
            fn deep(n: u32) -> u64 {
                if n == 0 {
                    pthread_exit(Box::new(41u64));
                }
                deep(n - 1) + 1
            }
            Box::new(deep(10))
        })
        .unwrap();
        assert!(!pthread_equal(t, pthread_self()));
        assert_eq!(
            pthread_join(pthread_self()).unwrap_err(),
            PthreadError::Deadlock
        );
        let got = match pthread_join(t).unwrap() {
            Exit::Returned(v) => value::<u64>(v),
            Exit::Canceled => panic!("cancelled"),
        };
        assert_eq!(got, 41);
        assert_eq!(DESTROYED.with(|d| d.borrow().clone()), [7]);
        // Joined: gone.
        assert_eq!(pthread_join(t).unwrap_err(), PthreadError::NoSuchThread);
        // The main pthread's own value for the key.
        pthread_setspecific(key, Some(Rc::new(9u64))).unwrap();
        assert!(pthread_getspecific(plain).is_none());
        pthread_key_delete(plain).unwrap();
        assert_eq!(
            pthread_key_delete(plain).unwrap_err(),
            PthreadError::Invalid
        );
        assert_eq!(
            pthread_setspecific(plain, None).unwrap_err(),
            PthreadError::Invalid
        );

        // Detached threads cannot be joined, by attribute or by call.
        let mut detached = PthreadAttr::new();
        detached.set_detach_state(DetachState::Detached);
        assert_eq!(detached.detach_state(), DetachState::Detached);
        let d = pthread_create(&detached, || Box::new(())).unwrap();
        assert_eq!(pthread_join(d).unwrap_err(), PthreadError::Invalid);
        let mut small = PthreadAttr::new();
        small.set_stack_size(64 << 10).unwrap();
        assert_eq!(
            small.set_stack_size(100).unwrap_err(),
            PthreadError::Invalid
        );
        let e = pthread_create(&small, || Box::new(())).unwrap();
        pthread_detach(e).unwrap();
        assert_eq!(pthread_detach(e).unwrap_err(), PthreadError::Invalid);
        assert_eq!(pthread_join(e).unwrap_err(), PthreadError::Invalid);
        pthread_yield();
        pthread_yield();
        // Both finished while detached: their records are gone.
        assert_eq!(pthread_join(d).unwrap_err(), PthreadError::NoSuchThread);
        assert_eq!(pthread_join(e).unwrap_err(), PthreadError::NoSuchThread);

        // A second joiner is refused.
        let slow = pthread_create(&attr, || {
            for _ in 0..3 {
                pthread_yield();
            }
            Box::new(5u64)
        })
        .unwrap();
        let j = pthread_create(&attr, move || match pthread_join(slow).unwrap() {
            Exit::Returned(v) => v,
            Exit::Canceled => Box::new(0u64),
        })
        .unwrap();
        pthread_yield(); // `j` starts waiting for `slow`
        assert_eq!(pthread_join(slow).unwrap_err(), PthreadError::Invalid);
        let via = match pthread_join(j).unwrap() {
            Exit::Returned(v) => value::<u64>(v),
            Exit::Canceled => 0,
        };
        via + 1
    }
    on_every_pe(2, 6, main);
}

#[test]
fn deferred_cancellation_timed_waits_and_once() {
    fn main() -> u64 {
        let attr = PthreadAttr::new();
        // A thread that polls for cancellation.
        let spinner = pthread_create(&attr, || {
            assert_eq!(
                pthread_setcanceltype(CancelType::Asynchronous).unwrap_err(),
                PthreadError::Invalid
            );
            loop {
                pthread_testcancel();
                pthread_yield();
            }
        })
        .unwrap();
        pthread_yield();
        pthread_cancel(spinner).unwrap();
        assert!(matches!(pthread_join(spinner).unwrap(), Exit::Canceled));

        // A thread waiting on a condition variable is cancelled: it retakes
        // the mutex (and, here, keeps it: it had no clean-up).
        let shared = Rc::new((PthreadMutex::default(), PthreadCond::new()));
        let s = Rc::clone(&shared);
        let waiter = pthread_create(&attr, move || {
            s.0.lock().unwrap();
            loop {
                s.1.wait(&s.0).unwrap();
            }
        })
        .unwrap();
        pthread_yield();
        pthread_cancel(waiter).unwrap();
        assert!(matches!(pthread_join(waiter).unwrap(), Exit::Canceled));
        assert!(shared.0.is_locked());

        // Cancellation disabled: it stays pending until enabled.
        let guarded = pthread_create(&attr, || {
            assert_eq!(
                pthread_setcancelstate(CancelState::Disable),
                CancelState::Enable
            );
            pthread_yield();
            pthread_testcancel(); // pending, not acted on
            assert_eq!(
                pthread_setcancelstate(CancelState::Enable),
                CancelState::Disable
            );
            pthread_testcancel();
            unreachable!("cancelled at the test above");
        })
        .unwrap();
        pthread_yield();
        pthread_cancel(guarded).unwrap();
        assert!(matches!(pthread_join(guarded).unwrap(), Exit::Canceled));

        // A timed wait runs out and returns with the mutex held.
        let m = PthreadMutex::default();
        let c = PthreadCond::new();
        m.lock().unwrap();
        let t0 = converse::wall_timer();
        assert_eq!(
            c.timedwait(&m, Duration::from_millis(20)).unwrap_err(),
            PthreadError::TimedOut
        );
        assert!(converse::wall_timer() - t0 >= 0.019);
        assert!(m.is_locked());
        m.unlock().unwrap();
        assert_eq!(m.unlock().unwrap_err(), PthreadError::NotOwner);
        c.destroy().unwrap();

        // Once, with a thread arriving while the first runs it.
        let once = Rc::new(PthreadOnce::new());
        let runs = Rc::new(Cell::new(0));
        let mut ts = Vec::new();
        for _ in 0..3 {
            let (o, r) = (Rc::clone(&once), Rc::clone(&runs));
            ts.push(
                pthread_create(&attr, move || {
                    pthread_once(&o, || {
                        pthread_yield(); // the others arrive meanwhile
                        r.set(r.get() + 1);
                    });
                    assert_eq!(r.get(), 1);
                    Box::new(())
                })
                .unwrap(),
            );
        }
        for t in ts {
            pthread_join(t).unwrap();
        }
        assert_eq!(runs.get(), 1);

        // Mutex kinds.
        let normal = PthreadMutex::default();
        normal.lock().unwrap();
        assert_eq!(normal.lock().unwrap_err(), PthreadError::Deadlock);
        let other = Rc::new(normal);
        let o = Rc::clone(&other);
        let t = pthread_create(&attr, move || {
            assert_eq!(o.trylock().unwrap_err(), PthreadError::Busy);
            assert_eq!(o.unlock().unwrap_err(), PthreadError::NotOwner);
            o.lock().unwrap(); // waits for the main thread's unlock
            o.unlock().unwrap();
            Box::new(())
        })
        .unwrap();
        pthread_yield();
        other.unlock().unwrap(); // handed to `t`
        assert!(other.is_locked());
        pthread_join(t).unwrap();
        assert!(!other.is_locked());
        let rec = PthreadMutex::new(&PthreadMutexAttr {
            kind: MutexKind::Recursive,
        });
        rec.lock().unwrap();
        rec.lock().unwrap();
        rec.trylock().unwrap();
        rec.unlock().unwrap();
        rec.unlock().unwrap();
        assert!(rec.is_locked());
        rec.unlock().unwrap();
        rec.destroy().unwrap();
        1
    }
    on_every_pe(2, 1, main);
}

/// Corner cases a review found: a cancelled timed wait's timer, an init of
/// `pthread_once` that exits, detaching a thread being joined, a
/// destructor at a cancellation point during a cancel, a value whose drop
/// calls back in, a recursive mutex through a condition wait.
#[test]
fn exits_and_cancels_leave_nothing_behind() {
    fn main() -> u64 {
        let attr = PthreadAttr::new();

        // Cancelled in a timed wait: its timer, firing later, wakes nobody.
        let shared = Rc::new((PthreadMutex::default(), PthreadCond::new()));
        let s = Rc::clone(&shared);
        let t = pthread_create(&attr, move || {
            s.0.lock().unwrap();
            let _ = s.1.timedwait(&s.0, Duration::from_millis(10));
            Box::new(())
        })
        .unwrap();
        pthread_yield();
        pthread_cancel(t).unwrap();
        assert!(matches!(pthread_join(t).unwrap(), Exit::Canceled));
        let until = converse::wall_timer() + 0.03;
        while converse::wall_timer() < until {
            pthread_yield(); // the timer fires meanwhile
        }

        // An init that exits leaves the once not run: the next caller runs it.
        let once = Rc::new(PthreadOnce::new());
        let o = Rc::clone(&once);
        let quitter = pthread_create(&attr, move || {
            pthread_once(&o, || pthread_exit(Box::new(1u64)));
            Box::new(0u64)
        })
        .unwrap();
        match pthread_join(quitter).unwrap() {
            Exit::Returned(v) => assert_eq!(value::<u64>(v), 1),
            Exit::Canceled => panic!("cancelled"),
        }
        let ran = Cell::new(false);
        pthread_once(&once, || ran.set(true));
        assert!(ran.get());

        // Detached while joined: the joiner still wakes, with the result.
        let slow = pthread_create(&attr, || {
            pthread_yield();
            pthread_yield();
            Box::new(3u64)
        })
        .unwrap();
        let joiner = pthread_create(&attr, move || match pthread_join(slow).unwrap() {
            Exit::Returned(v) => v,
            Exit::Canceled => Box::new(0u64),
        })
        .unwrap();
        pthread_yield(); // the joiner waits
        pthread_detach(slow).unwrap();
        match pthread_join(joiner).unwrap() {
            Exit::Returned(v) => assert_eq!(value::<u64>(v), 3),
            Exit::Canceled => panic!("cancelled"),
        }

        // A destructor that tests for cancellation during the cancel's
        // unwind: cancellation is off by then.
        struct Tests;
        impl Drop for Tests {
            fn drop(&mut self) {
                pthread_testcancel();
            }
        }
        let t = pthread_create(&attr, || {
            let _guard = Tests;
            loop {
                pthread_testcancel();
                pthread_yield();
            }
        })
        .unwrap();
        pthread_yield();
        pthread_cancel(t).unwrap();
        assert!(matches!(pthread_join(t).unwrap(), Exit::Canceled));

        // A value whose drop calls back into the module.
        struct CallsBack(cpthreads::PthreadKey);
        impl Drop for CallsBack {
            fn drop(&mut self) {
                let _ = pthread_getspecific(self.0);
            }
        }
        let other = pthread_key_create(None).unwrap();
        let key = pthread_key_create(None).unwrap();
        pthread_setspecific(key, Some(Rc::new(CallsBack(other)))).unwrap();
        pthread_key_delete(key).unwrap();
        pthread_setspecific(other, Some(Rc::new(CallsBack(other)))).unwrap();
        pthread_setspecific(other, None).unwrap();

        // A recursive mutex held twice through a condition wait.
        let rec = Rc::new((
            PthreadMutex::new(&PthreadMutexAttr {
                kind: MutexKind::Recursive,
            }),
            PthreadCond::new(),
        ));
        let r = Rc::clone(&rec);
        let signaller = pthread_create(&attr, move || {
            r.0.lock().unwrap(); // free while the main thread waits
            r.1.signal();
            r.0.unlock().unwrap();
            Box::new(())
        })
        .unwrap();
        rec.0.lock().unwrap();
        rec.0.lock().unwrap();
        rec.1.wait(&rec.0).unwrap();
        rec.0.unlock().unwrap();
        assert!(rec.0.is_locked(), "held at depth 2 again after the wait");
        rec.0.unlock().unwrap();
        assert!(!rec.0.is_locked());
        pthread_join(signaller).unwrap();
        assert_eq!(rec.1.destroy(), Ok(()));
        7
    }
    on_every_pe(2, 7, main);
}
