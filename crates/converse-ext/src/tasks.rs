//! Async tasks on a PE: [`spawn`] runs a `std::future::Future` on the
//! calling PE, polled by handler runs of the PE's scheduler, so async code
//! can await Converse futures ([`Cfuture`](crate::futures::Cfuture) is
//! `IntoFuture`) and anything else that wakes its `Waker`.
//!
//! # The model
//!
//! A task is its future, boxed, in the PE's task table, and its waker. A
//! wake gives the PE a *poll message* naming the task (at most one waits
//! at a time); its handler takes the task out of the table, polls it, and
//! puts it back unless it is done. The waker is `Send` and `Sync` and
//! sound from any thread:
//! - on a PE of the job it sends the poll message to the task's PE (an
//!   ordinary send, counted by quiescence detection);
//! - on any other thread of the process (a helper thread, an I/O
//!   callback) it posts the message through a
//!   [`PeHandle`], as outside input (see there): quiescence detection
//!   does not see a task that waits for such a thread.
//!
//! # Set-up
//!
//! The poll handler is registered by [`futures::module_init`]
//! (`CfutureModuleInit`; [`futures::install`] registers it before the job),
//! which calls [`module_init`] here.
//!
//! [`futures::module_init`]: crate::futures::module_init
//! [`futures::install`]: crate::futures::install
//!
//! # Invariants
//!
//! - A task is polled only on its PE, by the poll handler, never while
//!   another poll of it runs: its future is out of its table entry while
//!   polled, and a poll message that comes then (a nested scheduler in the
//!   task's own code ran it) only marks the entry to be polled again once
//!   the current poll returns.
//! - `queued` is true from a wake until the poll it asked for begins: a
//!   task has at most one poll message in flight, however often it is
//!   woken. The poll clears it with a read-modify-write, so a wake on
//!   another thread is never lost between the clear and the poll.
//! - A finished task is dropped on its PE.
//!
//! # Concurrency
//!
//! The table is the PE's own (a `Cpv`); the waker's only shared state is
//! the `queued` flag (an atomic) and the PE handle.
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Wake, Waker};

use converse::{Cpv, Message, PeHandle};

type Task = Pin<Box<dyn Future<Output = ()>>>;

/// A task in the table.
struct Entry {
    /// `None` while it is being polled (it is out of the table then).
    task: Option<Task>,
    waker: Arc<TaskWaker>,
    /// A poll message came while it was being polled (a nested scheduler
    /// ran it): poll again once this poll returns.
    repoll: bool,
}

/// One PE's tasks.
struct Tasks {
    next: Cell<u64>,
    live: RefCell<HashMap<u64, Entry>>,
    handler: usize,
    pe: PeHandle,
}

static TASKS: Cpv<Tasks> = Cpv::new();

/// What wakes a task: asks its PE for one poll.
struct TaskWaker {
    pe: PeHandle,
    handler: usize,
    id: u64,
    queued: AtomicBool,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.queued.swap(true, Ordering::AcqRel) {
            return; // a poll is already asked for
        }
        let msg = Message::from_payload(self.handler, &self.id.to_le_bytes());
        if self.pe.is_in_job() {
            // On a PE of the job: an ordinary send, counted by quiescence
            // detection.
            converse::sync_send_and_free(self.pe.pe(), msg);
        } else {
            // A job that ended polls nothing more.
            let _ = self.pe.post(msg);
        }
    }
}

/// Registers the poll handler on the calling PE and makes its task table;
/// a second call does nothing. [`futures::module_init`](crate::futures::module_init)
/// calls it.
pub fn module_init() {
    if TASKS.is_initialized() {
        return;
    }
    let handler = converse::register_handler(on_poll);
    TASKS.initialize(Tasks {
        next: Cell::new(0),
        live: RefCell::new(HashMap::new()),
        handler,
        pe: PeHandle::current(),
    });
}

fn tasks() -> Rc<Tasks> {
    if !TASKS.is_initialized() {
        converse::abort(&format!(
            "tasks::spawn on PE {} before futures::module_init (call it on every PE, or futures::install before the job)",
            converse::my_pe()
        ));
    }
    TASKS.get()
}

/// Runs `task` on the calling PE: its first poll is a message to this PE,
/// so it starts once the current handler (or start function) returns to
/// the scheduler; it is polled again whenever its waker is woken.
pub fn spawn(task: impl Future<Output = ()> + 'static) {
    let t = tasks();
    let id = t.next.get();
    t.next.set(id + 1);
    let waker = Arc::new(TaskWaker {
        pe: t.pe.clone(),
        handler: t.handler,
        id,
        queued: AtomicBool::new(false),
    });
    t.live.borrow_mut().insert(
        id,
        Entry {
            task: Some(Box::pin(task)),
            waker: Arc::clone(&waker),
            repoll: false,
        },
    );
    waker.wake_by_ref();
}

/// The number of the calling PE's tasks not yet finished.
pub fn pending() -> usize {
    tasks().live.borrow().len()
}

/// A poll message: poll the task it names.
fn on_poll(msg: Message) {
    let Some(id) = msg
        .payload()
        .first_chunk::<8>()
        .map(|b| u64::from_le_bytes(*b))
    else {
        converse::abort(&format!(
            "a malformed task poll ({} bytes) on PE {}",
            msg.payload_len(),
            converse::my_pe()
        ));
    };
    let t = tasks();
    let (mut task, waker) = {
        let mut live = t.live.borrow_mut();
        let Some(entry) = live.get_mut(&id) else {
            return; // finished meanwhile (a wake raced its last poll)
        };
        match entry.task.take() {
            Some(task) => (task, Arc::clone(&entry.waker)),
            None => {
                // Being polled further up this PE's stack: again after.
                entry.repoll = true;
                return;
            }
        }
    };
    // A read-modify-write, not a store: a waker's swap on another thread
    // either comes after it (and sends) or before it (and this poll sees
    // what the waker published).
    waker.queued.swap(false, Ordering::AcqRel);
    let std_waker = Waker::from(Arc::clone(&waker));
    let mut cx = Context::from_waker(&std_waker);
    let done = task.as_mut().poll(&mut cx).is_ready();
    let mut live = t.live.borrow_mut();
    if done {
        live.remove(&id);
        return;
    }
    let entry = live
        .get_mut(&id)
        .expect("a task stays in the table while polled");
    entry.task = Some(task);
    if std::mem::take(&mut entry.repoll) {
        drop(live);
        // The poll message it asked for was spent while it was out:
        // ask again.
        waker.queued.store(false, Ordering::Release);
        waker.wake_by_ref();
    }
}
