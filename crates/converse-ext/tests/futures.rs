//! Futures in an in-process job: a thread on PE 0 waits for futures that
//! other PEs fill (by copy, or with a value made by `create_value`), one
//! filled before the wait returns at once, and the value outlives
//! `destroy` in the waiter's hands.
use std::sync::Mutex;

use converse::{Converse, Message, Thread};
use converse_ext::futures::{self, Cfuture};

/// What PE 0's thread got.
static GOT: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());
/// The jobs of this file run one at a time (they share `GOT`).
static SERIAL: Mutex<()> = Mutex::new(());

/// Runs `start` on a job of `pes` PEs (the futures module installed), one
/// job of this file at a time; returns what the job left in `GOT`.
fn job(pes: &str, start: impl Fn(&[String]) + Send + Sync + 'static) -> Vec<Vec<u8>> {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    GOT.lock().unwrap().clear();
    futures::install();
    let code = Converse::new()
        .args(["prog", "+p", pes])
        .run(start)
        .expect("the job starts");
    assert_eq!(code, 0);
    std::mem::take(&mut *GOT.lock().unwrap())
}

#[test]
fn futures_filled_from_other_pes_wake_the_waiting_thread() {
    let got = job("3", |_| {
        // Every other PE fills the future whose handle it gets.
        let fill = converse::register_handler(|m: Message| {
            let f = Cfuture::from_bytes(m.payload()).expect("a future");
            if converse::my_pe() == 1 {
                futures::set(f, b"from PE 1");
            } else {
                let mut v = futures::create_value(9);
                v.bytes_mut().expect("ours").copy_from_slice(b"from PE 2");
                futures::store_value(f, v);
            }
        });
        if converse::my_pe() != 0 {
            return;
        }
        Thread::create(
            move || {
                // Filled here first: no wait.
                let local = futures::create();
                futures::set(local, b"local");
                assert!(futures::is_filled(local));
                let mut got = vec![futures::wait(local).to_vec()];
                let remote: Vec<Cfuture> = (1..3).map(|_| futures::create()).collect();
                for (pe, f) in (1..3).zip(&remote) {
                    assert!(!futures::is_filled(*f));
                    converse::sync_send_and_free(pe, Message::from_payload(fill, &f.to_bytes()));
                }
                for f in &remote {
                    let value = futures::wait(*f);
                    futures::destroy(*f);
                    // The waiter's copy of the value outlives the future.
                    got.push(value.to_vec());
                }
                futures::destroy(local);
                *GOT.lock().unwrap() = got;
                converse::exit(0);
            },
            0,
        )
        .awaken();
    });
    assert_eq!(
        got,
        vec![
            b"local".to_vec(),
            b"from PE 1".to_vec(),
            b"from PE 2".to_vec()
        ]
    );
}

#[test]
fn a_handle_survives_its_bytes() {
    let f = Cfuture { pe: 7, id: 1 << 40 };
    assert_eq!(Cfuture::from_bytes(&f.to_bytes()), Some(f));
    assert_eq!(Cfuture::from_bytes(&[0; 3]), None);
}

/// Async code on PE 0 awaits futures that PEs 1 and 2 fill, and a future
/// of its own that a plain OS thread (no PE) wakes: the waker works from
/// any thread.
#[test]
fn async_tasks_await_converse_futures_and_foreign_wakes() {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::task::{Context, Poll};
    use std::time::Duration;

    use converse_ext::tasks;

    /// Ready once a helper thread, started at the first poll, has slept.
    struct Slept {
        done: Arc<AtomicBool>,
        started: bool,
    }
    impl Future for Slept {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if self.done.load(Ordering::Acquire) {
                return Poll::Ready(());
            }
            if !self.started {
                self.started = true;
                let (done, waker) = (Arc::clone(&self.done), cx.waker().clone());
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(20));
                    done.store(true, Ordering::Release);
                    waker.wake();
                });
            }
            Poll::Pending
        }
    }

    let got = job("3", |_| {
        let fill = converse::register_handler(|m: Message| {
            let f = Cfuture::from_bytes(m.payload()).expect("a future");
            futures::set(f, format!("from PE {}", converse::my_pe()).as_bytes());
        });
        if converse::my_pe() != 0 {
            return;
        }
        tasks::spawn(async move {
            let remote: Vec<Cfuture> = (1..3).map(|_| futures::create()).collect();
            for (pe, f) in (1..3).zip(&remote) {
                converse::sync_send_and_free(pe, Message::from_payload(fill, &f.to_bytes()));
            }
            let mut got = Vec::new();
            for f in remote.iter().rev() {
                got.push((*f).await.to_vec());
                futures::destroy(*f);
            }
            Slept {
                done: Arc::new(AtomicBool::new(false)),
                started: false,
            }
            .await;
            got.push(b"slept".to_vec());
            *GOT.lock().unwrap() = got;
            converse::exit(0);
        });
        assert_eq!(tasks::pending(), 1);
    });
    assert_eq!(
        got,
        [
            b"from PE 2".to_vec(),
            b"from PE 1".to_vec(),
            b"slept".to_vec()
        ]
    );
}

/// A task whose poll wakes it and then runs the scheduler (a nested
/// scheduler spends the poll message it asked for): it is polled again
/// after the poll returns, not lost.
#[test]
fn a_task_woken_during_its_own_poll_is_polled_again() {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use converse_ext::tasks;

    struct WakeAndSchedule {
        polls: u32,
    }
    impl Future for WakeAndSchedule {
        type Output = u32;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u32> {
            self.polls += 1;
            if self.polls == 3 {
                return Poll::Ready(self.polls);
            }
            cx.waker().wake_by_ref();
            // The poll message just sent runs in here.
            converse::deliver_msgs(16);
            Poll::Pending
        }
    }

    let got = job("1", |_| {
        tasks::spawn(async {
            let polls = WakeAndSchedule { polls: 0 }.await;
            *GOT.lock().unwrap() = vec![vec![polls as u8]];
            converse::exit(0);
        });
    });
    assert_eq!(got, [vec![3u8]]);
}
