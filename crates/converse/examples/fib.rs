//! Fibonacci with user-level threads: every call fib(n) is a thread. It asks
//! two other PEs for fib(n-1) and fib(n-2) (each answered by a new thread
//! there), blocks until both answers are back, and sends the sum to its
//! parent. Blocking is allowed because it happens in a thread, never in the
//! handler: the handler only creates the thread.
//!
//! `cargo run --release --example fib -- +p 4 [n]` prints
//! `fib(20) = 6765` and how many threads each PE ran (21891 in all for
//! n = 20: one per call).
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use converse::{Converse, Cpv, Event, Message, Thread, cmi_printf};

/// A thread waiting for its two children's answers.
struct Pending {
    sum: Cell<u64>,
    answers: Cell<u32>,
    done: Event,
}

/// Per PE: the handlers, the waiting threads by key, threads run so far.
struct State {
    request: usize,
    answer: usize,
    done: usize,
    waiting: RefCell<HashMap<u64, Rc<Pending>>>,
    next_key: Cell<u64>,
    threads: Cell<u64>,
    /// Where this PE sends its next child request (round robin).
    next_pe: Cell<usize>,
}

static STATE: Cpv<State> = Cpv::new();

/// No parent: the answer goes to the user.
const ROOT: u32 = u32::MAX;

fn request(n: u32, parent_pe: u32, key: u64) -> Message {
    let mut payload = [0u8; 16];
    payload[..4].copy_from_slice(&n.to_le_bytes());
    payload[4..8].copy_from_slice(&parent_pe.to_le_bytes());
    payload[8..].copy_from_slice(&key.to_le_bytes());
    Message::from_payload(STATE.with(|s| s.request), &payload)
}

fn word(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// The body of the thread for fib(n).
fn fib_thread(n: u32, parent_pe: u32, parent_key: u64) {
    STATE.with(|s| s.threads.set(s.threads.get() + 1));
    let value = if n < 2 {
        u64::from(n)
    } else {
        let pending = Rc::new(Pending {
            sum: Cell::new(0),
            answers: Cell::new(0),
            done: Event::new(),
        });
        let key = STATE.with(|s| {
            let key = s.next_key.get();
            s.next_key.set(key + 1);
            s.waiting.borrow_mut().insert(key, pending.clone());
            key
        });
        let me = converse::my_pe() as u32;
        for child in [n - 1, n - 2] {
            let dest = STATE.with(|s| {
                let d = s.next_pe.get();
                s.next_pe.set((d + 1) % converse::num_pes());
                d
            });
            converse::sync_send_and_free(dest, request(child, me, key));
        }
        // Blocks this thread only; the scheduler runs other threads and
        // handlers meanwhile.
        pending.done.wait();
        pending.sum.get()
    };
    if parent_pe == ROOT {
        cmi_printf!("fib({n}) = {value}\n");
        converse::sync_broadcast_all(&Message::new(STATE.with(|s| s.done), 0));
        return;
    }
    let mut payload = [0u8; 16];
    payload[..8].copy_from_slice(&parent_key.to_le_bytes());
    payload[8..].copy_from_slice(&value.to_le_bytes());
    let answer = Message::from_payload(STATE.with(|s| s.answer), &payload);
    converse::sync_send_and_free(parent_pe as usize, answer);
}

fn main() -> std::process::ExitCode {
    Converse::new().default_pes(4).main(|args| {
        let n: u32 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(20);
        let me = converse::my_pe();
        // A request: the handler only creates the thread (it must not
        // block itself).
        let request = converse::register_handler(|msg: Message| {
            let p = msg.payload();
            let n = u32::from_le_bytes(p[..4].try_into().expect("4 bytes"));
            let parent = u32::from_le_bytes(p[4..8].try_into().expect("4 bytes"));
            let key = word(p, 8);
            Thread::create(move || fib_thread(n, parent, key), 0).awaken();
        });
        // An answer to a waiting thread.
        let answer = converse::register_handler(|msg: Message| {
            let p = msg.payload();
            let (key, value) = (word(p, 0), word(p, 8));
            let pending = STATE
                .with(|s| s.waiting.borrow().get(&key).cloned())
                .expect("an answer comes for a waiting thread");
            pending.sum.set(pending.sum.get() + value);
            pending.answers.set(pending.answers.get() + 1);
            if pending.answers.get() == 2 {
                STATE.with(|s| s.waiting.borrow_mut().remove(&key));
                pending.done.set();
            }
        });
        // The end: every PE reports and stops.
        let done = converse::register_handler(|_msg: Message| {
            let threads = STATE.with(|s| s.threads.get());
            cmi_printf!("PE {}: {threads} threads\n", converse::my_pe());
            converse::exit_scheduler();
        });
        STATE.initialize(State {
            request,
            answer,
            done,
            waiting: RefCell::new(HashMap::new()),
            next_key: Cell::new(1),
            threads: Cell::new(0),
            next_pe: Cell::new((me + 1) % converse::num_pes()),
        });
        if me == 0 {
            converse::sync_send_and_free(0, request_for_root(n));
        }
    })
}

fn request_for_root(n: u32) -> Message {
    request(n, ROOT, 0)
}
