//! Quiescence detection: tells a PE when no message is in flight or queued
//! anywhere in the job and no handler is running (the state in which nothing
//! can happen any more without outside input). The manual's `CcdQUIESCENCE`
//! condition is raised from here.
//!
//! # Counting
//!
//! Every PE counts the messages it *creates* (each send, each PE a broadcast
//! or multicast reaches, each enqueue, each reduction contribution) and the
//! messages it *processes* (each delivery to a handler, each message the
//! runtime consumes itself) in two plain per-PE counters (`Pe::qd_created`,
//! `Pe::qd_processed`). A message is counted processed when its handler
//! starts, so a handler that is running and still sends shows up as new
//! creations. Detection's own messages carry [`FLAG_NO_QD`] and are not
//! counted.
//!
//! # Waves (the four-counter method)
//!
//! PE 0 runs the detection in *waves* down the spanning tree over PEs: each
//! PE passes the wave's request to its children, adds up their replies and
//! its own two counters (read when it replies), and replies to its parent. A
//! PE answers only between handlers, so a wave never reads a PE mid-handler.
//! PE 0 declares quiescence after two consecutive waves whose sums are all
//! equal: created₁ = processed₁ = created₂ = processed₂. The counters only
//! grow, so equal sums mean no PE's counters changed between its two reads;
//! at the moment wave 1 ended every PE's counters therefore held those values,
//! and created = processed then means nothing was in flight or queued. A wave
//! that does not balance is retried from wave 1; the retry is queued at the
//! lowest priority on PE 0, so detection never competes with PE 0's own work.
//!
//! # Requests
//!
//! [`start_quiescence_detection`] may be called on any PE, any number of
//! times: each call's callback runs exactly once, on the calling PE, as a
//! handler, once the job has been quiescent after the call. Requests that
//! come in while a detection runs join it.
//!
//! The runtime also asks *once-only* questions ([`check_once`]): "is the job
//! quiescent right now?". They are answered after the next wave pair, yes or
//! no, and never keep detection running by themselves. The reduction stall
//! check (`cmi::reduce`) uses them.
//!
//! # Concurrency
//!
//! The per-PE state is touched only by the PE's thread; detection is driven
//! by system messages (`cmi::system`).
use std::collections::HashMap;

use crate::cmi::spantree::SpanningTree;
use crate::cmi::system::{self, Kind, Reader};
use crate::csd::Queueing;
use crate::machine::pe::{self, Pe};
use crate::msg::message::{FLAG_NO_QD, Message};

/// A wave being collected on this PE.
struct Wave {
    id: u64,
    /// Children that have not replied yet.
    waiting: usize,
    created: u64,
    processed: u64,
}

/// PE 0's view of the detection.
#[derive(Default)]
struct Root {
    /// Callbacks to answer: (PE, token, once-only).
    requesters: Vec<(usize, u64, bool)>,
    running: bool,
    next_wave: u64,
    /// The sums of the last balanced wave, while the second wave runs.
    first_wave: Option<(u64, u64)>,
}

/// One PE's part in quiescence detection.
#[derive(Default)]
pub(crate) struct QdState {
    /// Callbacks waiting on this PE, by token; called with whether the job
    /// was found quiescent.
    callbacks: HashMap<u64, Box<dyn FnOnce(bool)>>,
    next_token: u64,
    wave: Option<Wave>,
    root: Root,
}

/// Calls `callback` on this PE, as a handler, once the job is quiescent: no
/// message in flight or queued on any PE and no handler running
/// (`CmiStartQD`; what raises `CcdQUIESCENCE`). Each call is answered once.
#[doc(alias = "CmiStartQD")]
#[doc(alias = "CQdRegisterCallback")]
pub fn start_quiescence_detection(callback: impl FnOnce() + 'static) {
    pe::with(|pe| request(pe, Box::new(|_quiescent| callback()), false))
}

/// Asks whether the job is quiescent now: `callback(answer)` runs on `pe`
/// after the next pair of waves. Does not keep detection going.
pub(crate) fn check_once(pe: &Pe, callback: Box<dyn FnOnce(bool)>) {
    request(pe, callback, true)
}

fn request(pe: &Pe, callback: Box<dyn FnOnce(bool)>, once: bool) {
    let token = {
        let mut qd = pe.qd.borrow_mut();
        let token = qd.next_token;
        qd.next_token += 1;
        qd.callbacks.insert(token, callback);
        token
    };
    let mut msg = system::message(Kind::QdStart, &[token, u64::from(once)], &[]);
    msg.set_src_pe(pe.pe);
    pe.push_to_pe(0, msg);
}

/// Counts `n` messages as created on this PE (`CQdCreate`). For layers that
/// hold work outside the runtime's queues: quiescence is not declared until
/// as many are counted processed.
#[doc(alias = "CQdCreate")]
pub fn qd_create(n: usize) {
    pe::with(|pe| pe.count_created(n))
}

/// Counts `n` messages as processed on this PE (`CQdProcess`).
#[doc(alias = "CQdProcess")]
pub fn qd_process(n: usize) {
    pe::with(|pe| pe.count_processed(n))
}

/// Messages created on this PE so far (`CQdGetCreated`).
#[doc(alias = "CQdGetCreated")]
pub fn qd_created() -> u64 {
    pe::with(|pe| pe.qd_created.get())
}

/// Messages processed on this PE so far (`CQdGetProcessed`).
#[doc(alias = "CQdGetProcessed")]
pub fn qd_processed() -> u64 {
    pe::with(|pe| pe.qd_processed.get())
}

fn tree(pe: &Pe) -> SpanningTree {
    SpanningTree::new(pe.job.topo.num_pes(), pe.job.branch, 0)
}

/// Handles one of detection's messages on `pe`.
pub(crate) fn on_message(pe: &Pe, kind: Kind, msg: Message) {
    let mut r = Reader::new(&msg, "quiescence detection message");
    match kind {
        Kind::QdStart => {
            if pe.pe != 0 {
                r.malformed(&format!("a detection request reached PE {}", pe.pe));
            }
            let (token, once) = (r.word(), r.word() != 0);
            let start = {
                let mut qd = pe.qd.borrow_mut();
                qd.root.requesters.push((msg.src_pe(), token, once));
                !std::mem::replace(&mut qd.root.running, true)
            };
            if start {
                start_wave(pe);
            }
        }
        Kind::QdNextWave => {
            if pe.pe != 0 || msg.src_pe() != 0 {
                r.malformed("a wave may only be started by PE 0");
            }
            start_wave(pe);
        }
        Kind::QdRequest => {
            let id = r.word();
            let children: Vec<usize> = tree(pe).children(pe.pe).collect();
            pe.qd.borrow_mut().wave = Some(Wave {
                id,
                waiting: children.len(),
                created: 0,
                processed: 0,
            });
            for child in children {
                send(pe, child, Kind::QdRequest, &[id]);
            }
            maybe_reply(pe);
        }
        Kind::QdReply => {
            let (id, created, processed) = (r.word(), r.word(), r.word());
            {
                let mut qd = pe.qd.borrow_mut();
                match &mut qd.wave {
                    Some(w) if w.id == id && w.waiting > 0 => {
                        w.waiting -= 1;
                        w.created += created;
                        w.processed += processed;
                    }
                    _ => {
                        drop(qd);
                        r.malformed(&format!(
                            "a reply to wave {id}, which PE {} is not collecting",
                            pe.pe
                        ));
                    }
                }
            }
            maybe_reply(pe);
        }
        Kind::QdDone => {
            let (token, quiescent) = (r.word(), r.word() != 0);
            let callback = pe.qd.borrow_mut().callbacks.remove(&token);
            match callback {
                Some(f) => f(quiescent),
                None => r.malformed(&format!("PE {} has no detection request {token}", pe.pe)),
            }
        }
        _ => unreachable!("route only passes detection kinds"),
    }
}

fn send(pe: &Pe, dest: usize, kind: Kind, words: &[u64]) {
    let mut msg = system::message(kind, words, &[]);
    msg.set_src_pe(pe.pe);
    pe.push_to_pe(dest, msg);
}

/// PE 0 starts a wave.
fn start_wave(pe: &Pe) {
    let id = {
        let mut qd = pe.qd.borrow_mut();
        qd.root.next_wave += 1;
        qd.root.next_wave
    };
    send(pe, 0, Kind::QdRequest, &[id]);
}

/// Replies to the parent (or concludes, on PE 0) once every child has.
fn maybe_reply(pe: &Pe) {
    let (id, created, processed) = {
        let mut qd = pe.qd.borrow_mut();
        match &qd.wave {
            Some(w) if w.waiting == 0 => {}
            _ => return,
        }
        let w = qd.wave.take().expect("checked above");
        (
            w.id,
            w.created + pe.qd_created.get(),
            w.processed + pe.qd_processed.get(),
        )
    };
    match tree(pe).parent(pe.pe) {
        Some(parent) => send(pe, parent, Kind::QdReply, &[id, created, processed]),
        None => conclude(pe, created, processed),
    }
}

/// PE 0 has a wave's sums.
fn conclude(pe: &Pe, created: u64, processed: u64) {
    /// What PE 0 does next.
    enum Next {
        /// Quiescent: answer everyone yes.
        Quiescent(Vec<(usize, u64, bool)>),
        /// The first wave balanced: run the second.
        SecondWave,
        /// Not quiescent: answer the once-only requests no, and retry if
        /// anyone else is waiting.
        Retry {
            answer_no: Vec<(usize, u64, bool)>,
            again: bool,
        },
    }
    let next = {
        let mut qd = pe.qd.borrow_mut();
        let root = &mut qd.root;
        match root.first_wave.take() {
            Some(first) if first == (created, processed) && created == processed => {
                root.running = false;
                Next::Quiescent(std::mem::take(&mut root.requesters))
            }
            Some(_) => fail(root),
            None if created == processed => {
                root.first_wave = Some((created, processed));
                Next::SecondWave
            }
            None => fail(root),
        }
    };
    fn fail(root: &mut Root) -> Next {
        let (once, persistent): (Vec<_>, Vec<_>) = std::mem::take(&mut root.requesters)
            .into_iter()
            .partition(|r| r.2);
        root.requesters = persistent;
        root.running = !root.requesters.is_empty();
        Next::Retry {
            answer_no: once,
            again: root.running,
        }
    }
    match next {
        Next::Quiescent(requesters) => {
            for (requester, token, _) in requesters {
                send(pe, requester, Kind::QdDone, &[token, 1]);
            }
        }
        Next::SecondWave => start_wave(pe),
        Next::Retry { answer_no, again } => {
            for (requester, token, _) in answer_no {
                send(pe, requester, Kind::QdDone, &[token, 0]);
            }
            if again {
                // Try again once PE 0 has nothing better to do.
                let mut retry = system::message(Kind::QdNextWave, &[], &[]);
                retry.set_src_pe(pe.pe);
                debug_assert_ne!(retry.header().flags & FLAG_NO_QD, 0);
                pe.queue
                    .borrow_mut()
                    .enqueue(retry, Queueing::IFifo(i32::MAX));
            }
        }
    }
}
