//! A PE's answer to its process's watchdog (`++watchdog`, `rt::watchdog`):
//! what it waits for (reductions, quiescence detection) and what it holds
//! (its queues), gathered on the PE's own thread, where that state lives.
//!
//! The scheduler answers between handlers and when it idles; a PE inside a
//! handler that never returns, or blocked in a node barrier, does not
//! answer, and the watchdog says so from what the PE last showed it
//! (`trace::watch`).
//!
//! # Concurrency
//!
//! Runs on the PE's thread; hands the answer over through the PE's
//! `PeWatch` (a mutex).
use crate::rt::pe::Pe;
use crate::trace::watch::Answer;

impl Pe {
    /// Answers the watchdog if it asked (a test of a flag otherwise).
    /// Called before user handlers, when the PE idles, at the end of a
    /// scheduler poll, and where an `init_returns` PE 0 waits for the
    /// others; threads switching count as progress instead (`Tracer::switch`).
    #[inline]
    pub(crate) fn answer_watchdog_if_asked(&self) {
        if let Some(w) = self.trace.watch()
            && w.is_asked()
        {
            w.answer(self.watchdog_answer());
        }
    }

    #[cold]
    #[inline(never)]
    fn watchdog_answer(&self) -> Answer {
        let mut a = Answer::default();
        let (joined, held) = crate::cmi::reduce::watchdog_view(self);
        for (what, missing) in &joined {
            a.lines.push(format!("{what}: waits for PEs {missing:?}"));
        }
        for (what, from) in &held {
            a.lines.push(format!(
                "holds contributions from PEs {from:?} to {what}, which it has not joined"
            ));
        }
        if let Some(node) = crate::cmi::node_reduce::stall_report(self) {
            a.lines.push(node);
        }
        let qd = crate::ccd::quiescence::waiting_callbacks(self);
        if qd > 0 {
            a.lines.push(format!(
                "{qd} quiescence detection request(s) made here wait for their answer"
            ));
        }
        let node = self.job.node(self.node);
        let queue = self.sched.queue.borrow().len();
        let self_sends = self.sched.self_queue.len();
        let stash = self.sched.stash.borrow().len() + self.sched.ready.borrow().len();
        let held_arrivals = self.sched.shuffle.as_ref().map_or(0, |s| s.len());
        let shared = self.shared();
        // SAFETY: this is the PE's own thread, the inbox's single consumer.
        let inbox = if unsafe { shared.inbox.is_empty() } {
            0
        } else {
            // About how many (the count is exact only at times).
            shared.inbox.backlog().max(1) as usize
        };
        let node_queue = node.queue_len.load(std::sync::atomic::Ordering::Relaxed);
        let node_inbox = usize::from(!node.inbox.is_empty());
        a.lines.push(format!(
            "queues: inbox {inbox}, self-sends {self_sends}, set aside {stash}{}, scheduler queue {queue}, node queue {node_queue}, node inbox {}",
            if held_arrivals > 0 {
                format!(", held for the random order {held_arrivals}")
            } else {
                String::new()
            },
            if node_inbox > 0 { "not empty" } else { "empty" },
        ));
        a.pending = qd > 0
            || queue + self_sends + stash + held_arrivals + inbox + node_queue + node_inbox > 0;
        a.reductions = joined;
        a.held = held;
        a
    }
}
