//! `workstealing`: seeds wait as tokens where they are made; a PE that
//! becomes idle asks the others, in turn from a random one, for some
//! (after `cldb.workstealing.c`).
//!
//! # The protocol
//!
//! - On becoming idle with no tokens, a PE starts a *round*: it asks one
//!   PE (a request message) and waits for the answer before asking the
//!   next; one request at a time.
//! - A PE asked gives half its tokens, if it has two or more
//!   ([`multiple_send`](super::multiple_send), spread over its
//!   priorities); otherwise it answers "none" and remembers the asker.
//! - Requests carry the asker's round number and refusals echo it; a
//!   refusal of an earlier round (seeds came meanwhile and a new round
//!   began) is ignored, so two rounds never interleave.
//! - The asker goes on to the next PE on "none"; after all the others said
//!   "none" the round ends and the PE is *starved*: it asks no more until
//!   seeds come to it. Instead, the PEs that refused it push it half their
//!   tokens as soon as they have two or more (checked when they put or
//!   receive a seed). So a job whose work is done falls silent (nothing is
//!   asked of PEs that have nothing), and quiescence can be detected,
//!   while work made later still spreads.
//!
//! # Concurrency
//!
//! The state is the PE's own; requests and answers are messages.
use std::cell::{Cell, RefCell};
use std::rc::Rc;

use converse::random::RandomStream;
use converse::{Condition, Message};

use super::{Balancer, SeedInfo, Strategy};

/// Fewest tokens a PE keeps before it gives: it gives half of them when it
/// has at least this many.
const GIVE_FROM: usize = 2;

struct State {
    me: usize,
    n: usize,
    ask_handler: Cell<usize>,
    none_handler: Cell<usize>,
    /// A request of this PE is out.
    stealing: Cell<bool>,
    /// A round ended with nothing: wait for seeds.
    starved: Cell<bool>,
    /// PEs asked in the current round.
    asked: Cell<usize>,
    /// The current round's number: requests carry it and refusals echo it,
    /// so a refusal from an earlier round (work came, a new round began)
    /// is ignored.
    round: Cell<u64>,
    /// PEs this PE told "none", oldest first: pushed seeds when it has some.
    waiting: RefCell<Vec<usize>>,
    rng: RefCell<RandomStream>,
}

pub(super) fn make() -> Box<dyn Strategy> {
    let me = converse::my_pe();
    let n = converse::num_pes();
    let state = Rc::new(State {
        me,
        n,
        ask_handler: Cell::new(0),
        none_handler: Cell::new(0),
        stealing: Cell::new(false),
        starved: Cell::new(false),
        asked: Cell::new(0),
        round: Cell::new(0),
        waiting: RefCell::new(Vec::new()),
        rng: RefCell::new(RandomStream::for_pe(me, 0x57ea1, 0)),
    });
    let s = Rc::clone(&state);
    state
        .ask_handler
        .set(converse::register_handler(move |msg: Message| {
            let (thief, round) = s.read(&msg, "work-stealing request");
            s.on_ask(thief, round);
        }));
    let s = Rc::clone(&state);
    state
        .none_handler
        .set(converse::register_handler(move |msg: Message| {
            let (victim, round) = s.read(&msg, "work-stealing refusal");
            if round == s.round.get() {
                s.on_none(victim);
            }
        }));
    if n > 1 {
        let s = Rc::clone(&state);
        converse::call_on_condition_keep(Condition::PROCESSOR_BEGIN_IDLE, move |_| s.on_idle());
    }
    Box::new(WorkStealing(state))
}

struct WorkStealing(Rc<State>);

impl Strategy for WorkStealing {
    fn name(&self) -> &'static str {
        "workstealing"
    }
    fn place(&self, cld: &Balancer, seed: Message, info: SeedInfo) {
        cld.keep(seed, info.queueing);
        self.0.push_to_waiting(cld);
    }
    fn received(&self, cld: &Balancer) {
        let s = &self.0;
        s.stealing.set(false);
        s.starved.set(false);
        s.push_to_waiting(cld);
    }
}

impl State {
    /// The PE and round a request or refusal carries, checked.
    fn read(&self, msg: &Message, what: &str) -> (usize, u64) {
        let p = msg.payload();
        let word = |at: usize| {
            p.get(at..at + 8)
                .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
        };
        match (p.len(), word(0), word(8)) {
            (16, Some(pe), Some(round)) if pe < self.n as u64 && pe != self.me as u64 => {
                (pe as usize, round)
            }
            _ => converse::abort(&format!(
                "a malformed {what} ({} bytes, naming PE {:?}) from PE {} on PE {}",
                p.len(),
                word(0),
                msg.src_pe(),
                self.me
            )),
        }
    }

    /// Sends this PE's number and `round` to `to`.
    fn send(&self, to: usize, handler: usize, round: u64) {
        let mut payload = [0u8; 16];
        payload[..8].copy_from_slice(&(self.me as u64).to_le_bytes());
        payload[8..].copy_from_slice(&round.to_le_bytes());
        let msg = Message::from_payload(handler, &payload);
        converse::sync_send_and_free(to, msg);
        super::count_balance_messages(1);
    }

    fn on_idle(&self) {
        if self.stealing.get() || self.starved.get() || super::count_tokens() > 0 {
            return;
        }
        self.asked.set(0);
        self.round.set(self.round.get() + 1);
        let first = loop {
            let v = (self.rng.borrow_mut().next_u64() % self.n as u64) as usize;
            if v != self.me {
                break v;
            }
        };
        self.ask(first);
    }

    fn ask(&self, victim: usize) {
        self.stealing.set(true);
        self.asked.set(self.asked.get() + 1);
        self.send(victim, self.ask_handler.get(), self.round.get());
    }

    fn on_ask(&self, thief: usize, round: u64) {
        let tokens = super::count_tokens();
        if tokens >= GIVE_FROM {
            self.waiting.borrow_mut().retain(|&p| p != thief);
            super::multiple_send(thief, tokens / 2);
        } else {
            let mut waiting = self.waiting.borrow_mut();
            if !waiting.contains(&thief) {
                waiting.push(thief);
            }
            drop(waiting);
            self.send(thief, self.none_handler.get(), round);
        }
    }

    fn on_none(&self, victim: usize) {
        self.stealing.set(false);
        if super::count_tokens() > 0 || super::load() > 0 {
            return; // work came meanwhile; the next idle edge starts anew
        }
        if self.asked.get() >= self.n - 1 {
            self.starved.set(true);
            return;
        }
        let mut next = (victim + 1) % self.n;
        if next == self.me {
            next = (next + 1) % self.n;
        }
        self.ask(next);
    }

    /// Gives half the tokens to the longest-waiting refused PE, if there
    /// are enough to give.
    fn push_to_waiting(&self, cld: &Balancer) {
        if self.waiting.borrow().is_empty() {
            return;
        }
        let tokens = cld.count_tokens();
        if tokens < GIVE_FROM {
            return;
        }
        let thief = self.waiting.borrow_mut().remove(0);
        super::multiple_send(thief, tokens / 2);
    }
}
