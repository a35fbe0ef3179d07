//! The state one job shares between its PEs: per-PE inboxes and idle state,
//! per-node inboxes, queues, node-shared variables and barriers, and the
//! job-wide exit and abort protocol.
//!
//! # Invariants
//!
//! - `pes` holds the PEs of this process, `nodes` its nodes: all of them in an
//!   in-process job, one node (its PEs `first_pe..first_pe + pes.len()`) in
//!   each process of a multi-process job. Both are fixed for the job's life;
//!   [`Job::pe`] and [`Job::node`] index them by job-wide number.
//! - A message for a PE or node of another process goes to `net`, which is
//!   set before any PE starts and only in a multi-process job.
//! - Once `exiting` is set it stays set; the first exit code recorded wins.
//! - Every message pushed to a PE inbox is followed by a wake-up call on the
//!   receiver's [`IdleState`]; every push to a node inbox or node queue by a
//!   call waking one PE of the node that takes node work (see `csd::idle` and
//!   [`Job::wake_node`] for why that is enough).
//!
//! # Concurrency protocol
//!
//! PE inboxes are lock-free multi-producer, single-consumer FIFO queues
//! (`net::inbox`; only the owning PE pops), so messages from one PE to another
//! arrive in the order sent. Node inboxes are crossbeam `SegQueue`s (any PE of
//! the node pops). Node queues and node-shared variables sit behind mutexes:
//! any PE of the node may touch them.
//!
//! Exit: the PE that calls `exit` stores the code, sets `exiting`, and wakes
//! every PE and every node barrier; each PE notices at its next scheduler step
//! (or idle wait, or barrier) and leaves. `done_pes` counts PEs whose start
//! function returned; an `init_returns` main thread waits on it to finish.
use crate::sync::lock;
use std::any::{Any, TypeId};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crossbeam_queue::SegQueue;
use crossbeam_utils::CachePadded;

use crate::csd::cqs::Cqs;
use crate::csd::idle::IdleState;
use crate::msg::handler::{HandlerIdent, registered_index};
use crate::msg::message::Message;
use crate::proc::args::Config;
use crate::proc::topology::Topology;
use crate::rt::node_barrier::NodeBarrier;
use crate::sync::inbox::Inbox;

/// The process layer delivers what other processes send through this.
impl crate::rt::network::Receiver for Job {
    fn to_pe(&self, pe: usize, msg: Message) -> Result<(), Message> {
        match self.local_pe(pe) {
            Some(target) => {
                target.inbox.push(msg);
                target.idle.wake();
                Ok(())
            }
            None => Err(msg),
        }
    }

    fn to_node(&self, node: usize, msg: Message) -> Result<(), Message> {
        match self.local_node(node) {
            Some(shared) => {
                shared.inbox.push(msg);
                self.wake_node(node);
                Ok(())
            }
            None => Err(msg),
        }
    }

    fn request_exit(&self, code: i32) {
        Job::request_exit(self, code);
    }
}

/// What every other thread may touch of one PE.
pub(crate) struct PeShared {
    /// Messages sent to this PE by other PEs, in arrival order. Only the PE's
    /// own thread pops it (the queue's single consumer).
    pub inbox: Inbox<Message>,
    pub idle: IdleState,
}

/// A node-shared variable's value (see `machine::globals`).
pub(crate) type SharedValue = Arc<dyn Any + Send + Sync>;
/// A node-shared variable slot: set once, by the first PE of the node that
/// initializes it. Its own `OnceLock`, so an initializer runs without the
/// node's slot table locked (it may use other node-shared variables).
pub(crate) type SharedSlot = Arc<std::sync::OnceLock<SharedValue>>;

/// What the PEs of one node share.
pub(crate) struct NodeShared {
    /// Messages sent to the node; any PE of the node takes them.
    pub inbox: SegQueue<Message>,
    /// The node-level scheduler queue (`CsdNodeEnqueue*`).
    pub queue: Mutex<Cqs<Message>>,
    /// `queue`'s length, readable without the lock (the scheduler checks it
    /// on every pass).
    pub queue_len: AtomicUsize,
    /// Node-shared variables (`Csv`), by slot number.
    pub globals: Mutex<Vec<Option<SharedSlot>>>,
    pub barrier: NodeBarrier,
}

/// The job as every PE sees it.
pub(crate) struct Job {
    pub topo: Topology,
    /// This process's PEs, from `first_pe` on.
    pes: Box<[CachePadded<PeShared>]>,
    /// This process's nodes, from `first_node` on.
    nodes: Box<[CachePadded<NodeShared>]>,
    /// The lowest-numbered PE of this process.
    pub first_pe: usize,
    /// The lowest-numbered node of this process.
    pub first_node: usize,
    /// The other processes of a multi-process job; `None` in-process.
    pub net: Option<Arc<crate::rt::network::Network>>,
    /// The host of every process, numbered by first appearance, as the
    /// launcher told them apart; `None` when all run on one (see
    /// `rt::hosts`).
    pub hosts: Option<Arc<[usize]>>,
    /// The program's arguments, runtime flags removed, program name first.
    pub args: Vec<String>,
    /// When the job started; `timer()` counts from here.
    pub start: Instant,
    /// More PEs than cores: idle PEs should not spin.
    pub oversubscribed: bool,
    /// The runtime flags; each subsystem reads its own and owns its
    /// defaults.
    pub config: Config,
    /// The timeline trace of this process's PEs (`+trace`), if the job
    /// records one.
    pub trace: Option<Arc<crate::trace::JobTrace>>,
    /// The seed of `+randomized_msgq`, if the job randomizes the order of
    /// arrivals (`csd::shuffle`).
    pub msgq_seed: Option<u64>,
    /// The watchdog of this process's PEs (`++watchdog S`), if the job
    /// has one.
    pub watchdog: Option<Arc<crate::rt::watchdog::Watchdog>>,
    /// The subsystems' job-wide state, one value per type (see
    /// [`Job::subsystem`]).
    subsystems: Mutex<Vec<(TypeId, Arc<dyn Any + Send + Sync>)>>,
    exiting: AtomicBool,
    exit_code: Mutex<Option<i32>>,
    /// PEs whose start function (and, in normal mode, scheduler) has
    /// returned; `init_returns` shutdown waits for all but PE 0.
    done_pes: AtomicUsize,
    /// The first panic of a PE's code, re-raised by the thread that started
    /// the job.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    /// The handler-table consistency check (see [`Job::check_handlers`]).
    handler_canon: Mutex<Vec<(HandlerIdent, usize)>>,
}

impl Job {
    /// An in-process job: every PE and node of `topo` lives here.
    #[cfg(test)]
    pub fn new(topo: Topology, args: Vec<String>) -> Job {
        Job::with_nodes(topo, 0..topo.num_nodes(), args)
    }

    /// A job whose nodes `local` live in this process (all of them unless the
    /// job spans processes).
    pub fn with_nodes(topo: Topology, local: std::ops::Range<usize>, args: Vec<String>) -> Job {
        let cores = crate::proc::topology::cores();
        let first_pe = topo.node_first(local.start);
        let local_pes = local.clone().map(|n| topo.node_size(n)).sum::<usize>();
        Job {
            topo,
            first_pe,
            first_node: local.start,
            net: None,
            hosts: None,
            pes: (0..local_pes)
                .map(|_| {
                    CachePadded::new(PeShared {
                        inbox: Inbox::new(),
                        idle: IdleState::new(),
                    })
                })
                .collect(),
            nodes: local
                .map(|n| {
                    CachePadded::new(NodeShared {
                        inbox: SegQueue::new(),
                        queue: Mutex::new(Cqs::new()),
                        queue_len: AtomicUsize::new(0),
                        globals: Mutex::new(Vec::new()),
                        barrier: NodeBarrier::new(topo.node_size(n)),
                    })
                })
                .collect(),
            args,
            start: Instant::now(),
            oversubscribed: local_pes > cores,
            config: Config::default(),
            trace: None,
            msgq_seed: None,
            watchdog: None,
            subsystems: Mutex::new(Vec::new()),
            exiting: AtomicBool::new(false),
            exit_code: Mutex::new(None),
            done_pes: AtomicUsize::new(0),
            panic: Mutex::new(None),
            handler_canon: Mutex::new(Vec::new()),
        }
    }

    /// The job-wide state of a subsystem above this floor (CCS's handler
    /// names and server, say), made with `T::default()` on first use. The
    /// job holds it without naming its type, so the subsystem owns it; a
    /// few types per job, so a list is the fastest map.
    pub fn subsystem<T: Default + Send + Sync + 'static>(&self) -> Arc<T> {
        let mut slots = lock(&self.subsystems);
        let id = TypeId::of::<T>();
        let slot = match slots.iter().find(|(t, _)| *t == id) {
            Some((_, value)) => value.clone(),
            None => {
                let value: Arc<dyn Any + Send + Sync> = Arc::new(T::default());
                slots.push((id, value.clone()));
                value
            }
        };
        drop(slots);
        slot.downcast::<T>()
            .unwrap_or_else(|_| unreachable!("the slot of a type holds that type"))
    }

    /// What other threads may touch of PE `pe`, which must be in this
    /// process.
    #[inline]
    pub fn pe(&self, pe: usize) -> &PeShared {
        &self.pes[pe - self.first_pe]
    }

    /// PE `pe`'s shared part if it lives in this process.
    #[inline]
    pub fn local_pe(&self, pe: usize) -> Option<&PeShared> {
        pe.checked_sub(self.first_pe)
            .and_then(|i| self.pes.get(i))
            .map(|p| &**p)
    }

    /// What the PEs of node `node`, which must be in this process, share.
    #[inline]
    pub fn node(&self, node: usize) -> &NodeShared {
        &self.nodes[node - self.first_node]
    }

    /// Node `node`'s shared part if it lives in this process.
    #[inline]
    pub fn local_node(&self, node: usize) -> Option<&NodeShared> {
        node.checked_sub(self.first_node)
            .and_then(|i| self.nodes.get(i))
            .map(|n| &**n)
    }

    /// The other processes, for a message to a PE or node not in this one.
    pub fn remote(&self) -> &crate::rt::network::Network {
        self.net
            .as_deref()
            .expect("a PE outside this process exists only in a multi-process job")
    }

    /// Number of PEs in this process.
    pub fn local_pes(&self) -> usize {
        self.pes.len()
    }

    /// True once some PE asked the job to end.
    pub fn is_exiting(&self) -> bool {
        self.exiting.load(Ordering::Relaxed)
    }

    /// Records `code` as the job's exit code unless one was recorded first.
    pub fn record_exit_code(&self, code: i32) {
        lock(&self.exit_code).get_or_insert(code);
    }

    /// Records `code` (the first one wins), marks the job exiting and wakes
    /// every PE and barrier so that they notice.
    pub fn request_exit(&self, code: i32) {
        self.record_exit_code(code);
        self.exiting.store(true, Ordering::SeqCst);
        for pe in self.pes.iter() {
            pe.idle.wake();
        }
        for node in self.nodes.iter() {
            node.barrier.release_all();
        }
    }

    /// Counts a PE of this process whose start function has returned, and
    /// wakes the process's first PE (an `init_returns` main thread may be
    /// waiting for it).
    pub fn pe_done(&self) {
        self.done_pes.fetch_add(1, Ordering::SeqCst);
        self.pes[0].idle.wake();
    }

    /// PEs of this process whose start function has returned.
    pub fn done_pes(&self) -> usize {
        self.done_pes.load(Ordering::SeqCst)
    }

    /// The exit code to report: the first recorded, else 0.
    pub fn exit_code(&self) -> i32 {
        lock(&self.exit_code).unwrap_or(0)
    }

    /// `exit(code)`: ends the job here and in every other process.
    pub fn exit_everywhere(&self, code: i32) {
        if !self.is_exiting()
            && let Some(net) = &self.net
        {
            net.broadcast_exit(code);
        }
        self.request_exit(code);
    }

    /// Keeps the first panic payload and ends the job with code 101 (Rust's
    /// panic exit code), in every process.
    pub fn record_panic(&self, payload: Box<dyn Any + Send>) {
        lock(&self.panic).get_or_insert(payload);
        self.exit_everywhere(101);
    }

    pub fn take_panic(&self) -> Option<Box<dyn Any + Send>> {
        lock(&self.panic).take()
    }

    /// Wakes one sleeping PE of `node` that takes node work (any of them may
    /// run it). If none sleeps that way, every PE of the node that takes node
    /// work is awake and will poll again by itself (the Dekker argument of
    /// `csd::idle`, per PE); PEs waiting in `deliver_specific_msg` are passed
    /// over, since they would not run it.
    pub fn wake_node(&self, node: usize) {
        let first = self.topo.node_first(node);
        for pe in first..first + self.topo.node_size(node) {
            if self.pe(pe).idle.wake_for_node_work() {
                return;
            }
        }
    }

    /// Compares `pe`'s `register`ed handlers with those other PEs registered
    /// at the same positions. Returns a description of the first difference.
    ///
    /// Keeps one canonical list (each entry with the PE that first put it
    /// there), so each check costs O(handlers), not O(PEs x handlers).
    pub fn check_handlers(&self, pe: usize, idents: &[HandlerIdent]) -> Result<(), String> {
        let mut canon = lock(&self.handler_canon);
        let before = canon.len();
        for (k, ident) in idents.iter().enumerate() {
            match canon.get(k) {
                Some((c, other)) if !c.same(ident) => {
                    return Err(format!(
                        "handler tables differ at index {}: PE {other} registered `{}` there but PE {pe} registered `{}` \
                         (every PE must register the same handlers in the same order; a handler is identified by its \
                         function or closure, so register through one shared function rather than writing the same \
                         closure twice)",
                        registered_index(k),
                        c.described(),
                        ident.described()
                    ));
                }
                Some(_) => {}
                None => canon.push((*ident, pe)),
            }
        }
        // The other processes compare their tables with this one's.
        if canon.len() > before
            && let Some(net) = &self.net
        {
            let table: Vec<HandlerIdent> = canon.iter().map(|(ident, _)| *ident).collect();
            drop(canon);
            net.handlers_registered(&table);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_exit_code_wins() {
        let job = Job::new(Topology::new(2, 1), vec![]);
        assert!(!job.is_exiting());
        assert_eq!(job.exit_code(), 0);
        job.request_exit(3);
        job.request_exit(4);
        assert!(job.is_exiting());
        assert_eq!(job.exit_code(), 3);
    }

    #[test]
    fn handler_check_names_index_and_pes() {
        let job = Job::new(Topology::new(3, 3), vec![]);
        let a = HandlerIdent::of::<u8>();
        let b = HandlerIdent::of::<u16>();
        assert!(job.check_handlers(0, &[a]).is_ok());
        assert!(job.check_handlers(1, &[a, b]).is_ok());
        let err = job.check_handlers(2, &[a, a]).unwrap_err();
        assert!(err.contains("index 4"), "{err}");
        assert!(err.contains("PE 1") && err.contains("PE 2"), "{err}");
    }
}
