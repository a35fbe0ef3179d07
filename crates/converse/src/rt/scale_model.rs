//! The scale model: a deterministic, in-process simulation of a whole job
//! of P processes (10⁵ in the tests) that drives the process layer's real
//! pure code and counts what each process sends, receives, looks up and
//! keeps, so that the growth laws of the issue "Scale" (nothing grows as
//! P²) are checked by `cargo test`, not argued.
//!
//! # What runs for real
//!
//! - `rt::process_tree`: [`ProcessTree`], [`EndBarrier`], [`Flood`] (the
//!   exit flood) and [`HandlerRef`] (the handler check), one of each per
//!   simulated process, called as `rt::network` calls them.
//! - `proc::spantree`'s [`SpanningTree`]: the tree over nodes that
//!   broadcasts travel down and the tree over PEs that reductions and
//!   quiescence waves travel (`cmi::bcast`, `cmi::reduce`,
//!   `ccd::quiescence` build exactly these).
//! - `tcp_handshake`'s [`Verdict::decide`]: the acceptor's rule for a
//!   connection, with the acceptor's VC state as the tcp module keeps it.
//! - `launch_wire`'s line encodings and `rt::network`'s `encode_handlers`,
//!   for the bytes.
//!
//! # What is modelled
//!
//! Time is counted in *rounds*: every message, launcher line and handshake
//! step takes one hop, so a phase's rounds are its longest causal chain.
//! Messages between PEs of one process cost no hop and no network message.
//! Events are kept in one queue per round, handled in the order they were
//! sent: the model is deterministic.
//!
//! - Start-up (`rt::launch::convrun`, `convrun`'s `control`): the launcher
//!   writes `challenge`, the process `hello`, the launcher `welcome`, and
//!   `go` to all once every process said hello.
//! - VCs on first use (`net::tcp`'s "Connections"): a process's first send
//!   to a peer makes its VC entry (`Connecting`), asks the launcher for the
//!   card (`whois N` → `card N CARD`) and then runs the handshake (hello,
//!   answer, confirm, verdict: four hops); frames wait on the VC until it
//!   is up, and the connector sends nothing before it reads `accept`. The
//!   look-up blocks the sending thread in the real code (`peer_card`), so
//!   a process's sends go in order through one sender that waits for each
//!   card in turn: a process that opens d connections at once waits d
//!   round trips to the launcher. The acceptor decides with
//!   [`Verdict::decide`]: accepting while its own attempt runs bumps that
//!   attempt (whose handshake still runs and is then lost or refused, and
//!   ignored); *lose* leaves the connector waiting for the acceptor's
//!   connection.
//! - The handler check (`rt::network`'s "Handler tables"): every process
//!   registers its table at once (the runtime checks it at the first
//!   scheduler call, before the program's messages are answered), so both
//!   ends of a tree edge send first, often within the same rounds: the
//!   head-to-head connects the verdict settles.
//! - A program that talks along the trees: PE 0 broadcasts to every PE
//!   (down the node tree, a node's first PE fanning out to its others), and
//!   every PE contributes to a reduction to PE 0 up the PE tree.
//! - Quiescence detection as `ccd::quiescence` runs it: the request
//!   (`QdStart`) goes straight to PE 0, which runs waves down the PE tree
//!   (`QdRequest`) and up (`QdReply`), two balanced ones in a row, then
//!   answers the requester (`QdDone`).
//! - An exit flood started at any process, then the end: the end barrier
//!   (`Done` up, `AllDone` down), `Bye` on each VC the process holds, and
//!   `end` to the launcher.
//!
//! # What is not modelled
//!
//! - Timing beyond hops: CPU, bandwidth, the launcher answering its lines
//!   one at a time (so that its 10⁵ `whois` take real time, though one hop
//!   here), several threads of one process waiting for cards at once.
//! - The OS: TCP's own connect, listen queues, refused and retried
//!   connects, the tcp module's caps on connects in flight (64) and on
//!   hellos under way (256), which it would enforce; the counts show how
//!   close a program comes (the tree programs: a handful; `examples/hello`
//!   as written: every process at once, at process 0).
//! - Failures and aborts; message contents (a quiescence wave always
//!   balances: the model asks once the job is quiescent, so two waves, the
//!   fewest there can be).
//! - Overlap of phases: each runs until nothing is in flight, then the
//!   next starts (in a job, a process starts its end as the exit reaches
//!   it: the counts are the same, the rounds no more).
//! - Memory the real code keeps per process *of the job* rather than per
//!   peer it talks to: tables indexed by process number, made at start
//!   (tcp's `vcs` and `made`, shm's `vcs`, the process layer's `bye`,
//!   `terminated`, `trace_parts` and its route table). They are O(P) per
//!   process, so O(P²) bytes over a job; the model's VC table holds only
//!   the VCs made, which is what its counts of state are.
//!
//! # Invariants the tests check
//!
//! - Every pair of processes that talked has exactly one connection, and a
//!   process holds a VC to another iff the other holds one back; every VC
//!   is up and nothing is queued when the end barrier starts; each process
//!   gets a `Bye` on each of its VCs.
//! - Start-up costs each process 4 lines and the launcher 4·P; the handler
//!   check 2·(P − 1) tables; the exit flood P − 1 messages; the end barrier
//!   2·(P − 1); the broadcast and reduction P − 1 each (one PE a process).
//! - Per process, messages, look-ups and VCs are bounded by the tree's
//!   branching, whatever P; rounds grow as ⌈log_k P⌉; connections in all
//!   are P − 1 plus one for the quiescence request.
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::rc::Rc;

use converse_net::tcp_handshake::{
    ANSWER_SIZE, AcceptorSide, CONFIRM_SIZE, HELLO_SIZE, VERDICT_SIZE, Verdict,
};
use launch_wire::{Card, Nonce, Proof, ToLauncher, ToProcess};

use crate::msg::MSG_HEADER_SIZE;
use crate::net::frame::FRAME_HEADER_SIZE;
use crate::proc::spantree::SpanningTree;
use crate::rt::network::encode_handlers;
use crate::rt::process_tree::{
    EndBarrier, EndSend, Flood, HandlerEntry, HandlerRef, Mismatch, ProcessTree,
};

/// Which comes first after `go`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Order {
    /// The handler check, then the program: what the runtime does (the
    /// check runs at the first scheduler call).
    HandlersFirst,
    /// The program's broadcast connects the tree first (parents send
    /// first: no head-to-head), the check finds every VC up.
    ProgramFirst,
}

/// The program the job runs between its handler check and its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Program {
    /// PE 0 broadcasts, every PE contributes to a reduction to PE 0, then
    /// a PE asks for quiescence detection: talk along the trees only.
    TreeCollectives,
    /// `examples/hello` as written: every PE sends to PE 0.
    GatherAtPe0,
}

/// A handler table as a process registers it: per position, the hash of
/// the handler's type and its name.
type Table = Vec<(u64, &'static str)>;

/// The job to simulate.
#[derive(Clone, Copy, Debug)]
struct Job {
    procs: usize,
    pes_per_proc: usize,
    branch: usize,
    order: Order,
    program: Program,
    /// The process whose PE calls `exit`.
    exit_from: usize,
    /// The PE that asks for quiescence detection.
    qd_requester: usize,
    /// The table process `p` registers.
    tables: fn(usize) -> Table,
}

/// The handlers every process of a typical job registers.
fn same_tables(_: usize) -> Table {
    vec![
        (0x11, "converse::report"),
        (0x22, "app::work"),
        (0x33, "app::done"),
    ]
}

impl Job {
    /// A job of `procs` processes of one PE each, branching 4, as the
    /// runtime orders its start; the exit starts two thirds of the way
    /// along the processes and the last PE asks for quiescence (both far
    /// from process 0 in the tree).
    fn new(procs: usize) -> Job {
        Job {
            procs,
            pes_per_proc: 1,
            branch: 4,
            order: Order::HandlersFirst,
            program: Program::TreeCollectives,
            exit_from: procs * 2 / 3,
            qd_requester: procs - 1,
            tables: same_tables,
        }
    }

    fn pes(&self) -> usize {
        self.procs * self.pes_per_proc
    }

    fn process_tree(&self, me: usize) -> ProcessTree {
        ProcessTree::new(self.procs, self.branch, me)
    }

    /// The tree broadcasts from PE 0 travel (`cmi::bcast`: over nodes,
    /// rooted at the root's node).
    fn node_tree(&self) -> SpanningTree {
        SpanningTree::new(self.procs, self.branch, 0)
    }

    /// The tree reductions and quiescence waves travel (`cmi::reduce`,
    /// `ccd::quiescence`: over PEs, rooted at PE 0).
    fn pe_tree(&self) -> SpanningTree {
        SpanningTree::new(self.pes(), self.branch, 0)
    }
}

/// A Converse message between PEs, as the program and the runtime's
/// collectives send them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PeMsg {
    /// A copy of PE 0's broadcast.
    Bcast,
    /// A reduction contribution (merged, from a child in the PE tree).
    Contribution,
    QdStart,
    QdRequest,
    QdReply,
    QdDone,
    /// A program message of the tests' own (it does nothing on arrival).
    Probe,
}

impl PeMsg {
    /// Payload bytes: the program's 8, or the system message's words
    /// (`msg::system::message`).
    fn payload(self) -> usize {
        8 * match self {
            PeMsg::Bcast | PeMsg::Contribution | PeMsg::Probe => 1,
            PeMsg::QdStart | PeMsg::QdDone => 2,
            PeMsg::QdRequest => 1,
            PeMsg::QdReply => 4,
        }
    }
}

/// What a frame between two processes carries.
#[derive(Clone, Debug)]
enum Body {
    Handlers(Rc<[HandlerEntry]>),
    Exit,
    Done,
    AllDone,
    Bye,
    Pe {
        from_pe: u32,
        to_pe: u32,
        what: PeMsg,
    },
}

/// What a frame is, for the totals.
#[derive(Clone, Copy)]
enum Kind {
    Handlers,
    Exit,
    Done,
    AllDone,
    Bye,
    Bcast,
    Contribution,
    QdStart,
    QdRequest,
    QdReply,
    QdDone,
    Probe,
}

/// Frame kinds.
const KINDS: usize = Kind::Probe as usize + 1;

impl Body {
    fn kind(&self) -> Kind {
        match self {
            Body::Handlers(_) => Kind::Handlers,
            Body::Exit => Kind::Exit,
            Body::Done => Kind::Done,
            Body::AllDone => Kind::AllDone,
            Body::Bye => Kind::Bye,
            Body::Pe { what, .. } => match what {
                PeMsg::Bcast => Kind::Bcast,
                PeMsg::Contribution => Kind::Contribution,
                PeMsg::QdStart => Kind::QdStart,
                PeMsg::QdRequest => Kind::QdRequest,
                PeMsg::QdReply => Kind::QdReply,
                PeMsg::QdDone => Kind::QdDone,
                PeMsg::Probe => Kind::Probe,
            },
        }
    }

    /// The frame's bytes on the wire, header included.
    fn bytes(&self) -> usize {
        FRAME_HEADER_SIZE
            + match self {
                Body::Handlers(table) => encode_handlers(table).len(),
                Body::Exit => 5,
                Body::Done | Body::AllDone | Body::Bye => 1,
                Body::Pe { what, .. } => MSG_HEADER_SIZE + what.payload(),
            }
    }
}

/// A line to the launcher.
#[derive(Clone, Copy, Debug)]
enum UpLine {
    Hello,
    WhoIs(u32),
    End,
}

/// A line from the launcher.
#[derive(Clone, Copy, Debug)]
enum DownLine {
    Challenge,
    Welcome,
    Go,
    Card(u32),
}

/// A step of the tcp handshake (`tcp_handshake`'s "The exchange").
#[derive(Clone, Copy, Debug)]
enum Step {
    Hello,
    Answer,
    Confirm,
    Verdict(Verdict),
}

impl Step {
    fn bytes(self) -> usize {
        match self {
            Step::Hello => HELLO_SIZE,
            Step::Answer => ANSWER_SIZE,
            Step::Confirm => CONFIRM_SIZE,
            Step::Verdict(_) => VERDICT_SIZE,
        }
    }
}

/// Something that arrives in a round.
#[derive(Debug)]
enum Event {
    /// A frame on the VC from `from` to `to`.
    Frame {
        from: u32,
        to: u32,
        body: Body,
    },
    /// A message between two PEs of one process (no hop).
    Local {
        from_pe: u32,
        to_pe: u32,
        what: PeMsg,
    },
    ToLauncher {
        from: u32,
        line: UpLine,
    },
    ToProcess {
        to: u32,
        line: DownLine,
    },
    /// A handshake step of `connector`'s attempt `attempt` to reach
    /// `acceptor` (hello and confirm go to the acceptor, the others back).
    Handshake {
        connector: u32,
        acceptor: u32,
        attempt: u32,
        step: Step,
    },
    /// Tests: `from` sends a probe to `to` after `rounds` more rounds.
    SendLater {
        from: u32,
        to: u32,
        rounds: u32,
    },
}

/// A VC's connection, as its own end sees it (`net::tcp`'s `Link`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Link {
    /// This end's attempt runs (card asked, or handshake under way).
    Connecting,
    /// This end lost a head-to-head and waits for the peer's connection.
    AwaitingPeer,
    Up,
}

/// One VC of a process.
#[derive(Debug)]
struct Vc {
    peer: u32,
    link: Link,
    /// The number of this end's current attempt (bumped when the peer's
    /// connection is accepted while it runs).
    attempt: u32,
    /// The process whose connection carries the VC, once up.
    carried_by: Option<u32>,
    /// Frames waiting for the connection.
    queued: Vec<Body>,
}

/// What one process (or the launcher) sent and received.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    sent: u32,
    received: u32,
    bytes: u64,
    /// Cards looked up at the launcher.
    cards: u32,
}

impl Counts {
    fn messages(&self) -> u32 {
        self.sent + self.received
    }
}

/// One simulated process.
#[derive(Debug, Default)]
struct Proc {
    counts: Counts,
    /// Its VCs, by peer (a handful: the peers it talks to).
    vcs: Vec<Vc>,
    /// The card being looked up (peer, and the attempt it is for): the
    /// sender waits for it.
    looking_up: Option<(u32, u32)>,
    /// Sends waiting for the sender (behind a look-up).
    outbox: VecDeque<(u32, Body)>,
    /// Sends waiting, in the outbox or on a VC not yet up, and the most
    /// at once.
    waiting: u32,
    waiting_peak: u32,
    /// Hellos taken and not yet decided (acceptor side), and the most.
    hellos: u32,
    hellos_peak: u32,
    /// Handshakes under way as connector, and the most.
    connects: u32,
    connects_peak: u32,
    byes: u32,
    said_bye: bool,
    got_go: bool,
    /// Found a handler difference: ends (forwards nothing more).
    dead: bool,
}

impl Proc {
    fn vc(&self, peer: usize) -> Result<usize, usize> {
        self.vcs.binary_search_by_key(&(peer as u32), |v| v.peer)
    }

    fn wait_more(&mut self) {
        self.waiting += 1;
        self.waiting_peak = self.waiting_peak.max(self.waiting);
    }
}

/// Job-wide totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Totals {
    frames: [u64; KINDS],
    handshake_steps: u64,
    /// Connections accepted (each becomes a VC at both ends).
    connections: u64,
    /// Verdicts: the acceptor's own connection stands.
    lost: u64,
    /// Handshakes of attempts bumped meanwhile (they end lost or refused).
    stale: u64,
    /// Messages between PEs of one process.
    local: u64,
    launcher: Counts,
}

impl Totals {
    fn frames_of(&self, kind: Kind) -> u64 {
        self.frames[kind as usize]
    }

    fn since(&self, before: &Totals) -> Totals {
        let mut frames = self.frames;
        for (f, b) in frames.iter_mut().zip(before.frames) {
            *f -= b;
        }
        Totals {
            frames,
            handshake_steps: self.handshake_steps - before.handshake_steps,
            connections: self.connections - before.connections,
            lost: self.lost - before.lost,
            stale: self.stale - before.stale,
            local: self.local - before.local,
            launcher: Counts {
                sent: self.launcher.sent - before.launcher.sent,
                received: self.launcher.received - before.launcher.received,
                bytes: self.launcher.bytes - before.launcher.bytes,
                cards: 0,
            },
        }
    }
}

/// What one phase cost.
#[derive(Clone, Debug, PartialEq)]
struct PhaseStats {
    name: &'static str,
    rounds: u32,
    /// Per process: messages sent and received, most and mean.
    messages_max: u32,
    messages_mean: f64,
    bytes_max: u64,
    cards_max: u32,
    totals: Totals,
}

/// What a whole job cost.
#[derive(Clone, Debug, PartialEq)]
struct JobStats {
    procs: usize,
    pes_per_proc: usize,
    branch: usize,
    phases: Vec<PhaseStats>,
    messages_max: u32,
    messages_mean: f64,
    bytes_max: u64,
    rounds: u32,
    connections: u64,
    cards_max: u32,
    cards_total: u64,
    launcher_messages: u64,
    vcs_max: usize,
    waiting_max: u32,
    hellos_max: u32,
    connects_max: u32,
    handler_entries_max: usize,
}

impl JobStats {
    fn phase(&self, name: &str) -> &PhaseStats {
        self.phases
            .iter()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("no phase {name}"))
    }
}

/// Who a message is from or to: a process, or the launcher.
const LAUNCHER: u32 = u32::MAX;

/// Process `n`'s business card (an address per process).
fn card_of(n: usize) -> Card {
    Card::new(format!(
        "tcp:10.{}.{}.{}:41000",
        (n >> 16) & 255,
        (n >> 8) & 255,
        n & 255
    ))
    .expect("a card the protocol carries")
}

fn up_bytes(from: usize, line: UpLine) -> usize {
    match line {
        UpLine::Hello => ToLauncher::Hello {
            node: from,
            pid: 100_000 + from as u32,
            card: card_of(from),
            nonce: Nonce::from_bytes([0; 16]),
            proof: Proof::from_bytes([0; 32]),
        },
        UpLine::WhoIs(peer) => ToLauncher::WhoIs(peer as usize),
        UpLine::End => ToLauncher::End,
    }
    .encode()
    .len()
}

fn down_bytes(line: DownLine) -> usize {
    match line {
        DownLine::Challenge => ToProcess::Challenge(Nonce::from_bytes([0; 16])),
        DownLine::Welcome => ToProcess::Welcome(Proof::from_bytes([0; 32])),
        DownLine::Go => ToProcess::Go,
        DownLine::Card(peer) => ToProcess::Card {
            node: peer as usize,
            card: card_of(peer as usize),
        },
    }
    .encode()
    .len()
}

/// Per-PE flags of the program and of quiescence detection.
const DEPOSITED: u8 = 1;
const REPORTED: u8 = 2;
const IN_WAVE: u8 = 4;

/// The simulation.
struct Sim {
    job: Job,
    /// The round being handled.
    now: u32,
    /// The round of the last event handled.
    last_event: u32,
    current: VecDeque<Event>,
    next: Vec<Event>,
    procs: Vec<Proc>,
    totals: Totals,
    /// Processes whose hello the launcher has.
    joined: usize,
    handler_refs: Vec<HandlerRef>,
    exit: Vec<Flood>,
    end: Vec<EndBarrier>,
    /// Differences found: the process that found it, and what.
    mismatches: Vec<(usize, Mismatch)>,
    /// Anything the real code would end the job for.
    faults: Vec<String>,
    /// Per PE: flags, reduction contributions arrived, wave replies
    /// awaited.
    pe_flags: Vec<u8>,
    arrived: Vec<u8>,
    wave_waiting: Vec<u8>,
    bcast_copies: usize,
    reduced: bool,
    /// Quiescence detection at PE 0: the wave running (1 or 2) and who
    /// asked; whether the answer came.
    wave: u8,
    qd_requester: Option<usize>,
    qd_answered: bool,
}

impl Sim {
    fn new(job: Job) -> Sim {
        assert!(job.procs >= 2 && job.branch >= 1 && job.branch <= 255);
        assert!(job.exit_from < job.procs && job.qd_requester < job.pes());
        Sim {
            job,
            now: 0,
            last_event: 0,
            current: VecDeque::new(),
            next: Vec::new(),
            procs: (0..job.procs).map(|_| Proc::default()).collect(),
            totals: Totals::default(),
            joined: 0,
            handler_refs: (0..job.procs).map(|_| HandlerRef::default()).collect(),
            exit: (0..job.procs).map(|_| Flood::default()).collect(),
            end: (0..job.procs)
                .map(|me| EndBarrier::new(job.process_tree(me)))
                .collect(),
            mismatches: Vec::new(),
            faults: Vec::new(),
            pe_flags: vec![0; job.pes()],
            arrived: vec![0; job.pes()],
            wave_waiting: vec![0; job.pes()],
            bcast_copies: 0,
            reduced: false,
            wave: 0,
            qd_requester: None,
            qd_answered: false,
        }
    }

    // ----- counting and posting -----

    /// Counts a message of `bytes` from `from` to `to` (either may be the
    /// launcher) and puts `event` in the next round.
    fn post(&mut self, from: u32, to: u32, bytes: usize, event: Event) {
        for (party, sent) in [(from, true), (to, false)] {
            let counts = if party == LAUNCHER {
                &mut self.totals.launcher
            } else {
                &mut self.procs[party as usize].counts
            };
            if sent {
                counts.sent += 1;
            } else {
                counts.received += 1;
            }
            counts.bytes += bytes as u64;
        }
        self.next.push(event);
    }

    fn tell_launcher(&mut self, from: usize, line: UpLine) {
        let bytes = up_bytes(from, line);
        let from = from as u32;
        self.post(from, LAUNCHER, bytes, Event::ToLauncher { from, line });
    }

    fn tell_process(&mut self, to: usize, line: DownLine) {
        let to = to as u32;
        self.post(
            LAUNCHER,
            to,
            down_bytes(line),
            Event::ToProcess { to, line },
        );
    }

    fn handshake(&mut self, connector: u32, acceptor: u32, attempt: u32, step: Step) {
        let (from, to) = match step {
            Step::Hello | Step::Confirm => (connector, acceptor),
            Step::Answer | Step::Verdict(_) => (acceptor, connector),
        };
        self.totals.handshake_steps += 1;
        let event = Event::Handshake {
            connector,
            acceptor,
            attempt,
            step,
        };
        self.post(from, to, step.bytes(), event);
    }

    /// Writes a frame on an up VC.
    fn write_frame(&mut self, from: usize, to: usize, body: Body) {
        self.totals.frames[body.kind() as usize] += 1;
        let bytes = body.bytes();
        let (from, to) = (from as u32, to as u32);
        self.post(from, to, bytes, Event::Frame { from, to, body });
    }

    // ----- the process layer's send: VCs on first use -----

    /// Process `from` sends `body` to process `to` (`Shared::send_control`,
    /// `Network::send_message`): in order behind a look-up the sender
    /// waits for.
    fn send(&mut self, from: usize, to: usize, body: Body) {
        assert_ne!(from, to, "a process sends to itself without the network");
        let p = &mut self.procs[from];
        if p.looking_up.is_some() {
            p.outbox.push_back((to as u32, body));
            p.wait_more();
            return;
        }
        self.send_unblocked(from, to, body);
    }

    fn send_unblocked(&mut self, from: usize, to: usize, body: Body) {
        let p = &mut self.procs[from];
        match p.vc(to) {
            Ok(i) if p.vcs[i].link == Link::Up => self.write_frame(from, to, body),
            Ok(i) => {
                p.vcs[i].queued.push(body);
                p.wait_more();
            }
            Err(at) => {
                // `vc_or_make`, then `connect_on_first_use`: the VC is
                // `Connecting` from now, the frame waits on it, and the
                // sender waits for the card.
                p.vcs.insert(
                    at,
                    Vc {
                        peer: to as u32,
                        link: Link::Connecting,
                        attempt: 0,
                        carried_by: None,
                        queued: vec![body],
                    },
                );
                p.wait_more();
                p.looking_up = Some((to as u32, 0));
                p.counts.cards += 1;
                self.tell_launcher(from, UpLine::WhoIs(to as u32));
            }
        }
    }

    /// The card of `peer` came to `me`: its connect starts (the hello goes
    /// out) and the sender goes on with what waited behind it.
    fn card_came(&mut self, me: usize, peer: u32) {
        let p = &mut self.procs[me];
        let Some((asked, attempt)) = p.looking_up.take() else {
            self.faults
                .push(format!("process {me}: a card nobody asked for"));
            return;
        };
        assert_eq!(asked, peer, "one look-up at a time");
        p.connects += 1;
        p.connects_peak = p.connects_peak.max(p.connects);
        self.handshake(me as u32, peer, attempt, Step::Hello);
        while self.procs[me].looking_up.is_none() {
            let Some((to, body)) = self.procs[me].outbox.pop_front() else {
                break;
            };
            self.procs[me].waiting -= 1;
            self.send_unblocked(me, to as usize, body);
        }
    }

    /// The VC of `me` to `peer` is up: what waited on it goes.
    fn vc_up(&mut self, me: usize, at: usize, carried_by: u32) {
        let vc = &mut self.procs[me].vcs[at];
        vc.link = Link::Up;
        vc.carried_by = Some(carried_by);
        let peer = vc.peer as usize;
        let queued = std::mem::take(&mut vc.queued);
        self.procs[me].waiting -= queued.len() as u32;
        for body in queued {
            self.write_frame(me, peer, body);
        }
    }

    fn on_handshake(&mut self, connector: u32, acceptor: u32, attempt: u32, step: Step) {
        match step {
            Step::Hello => {
                let a = &mut self.procs[acceptor as usize];
                a.hellos += 1;
                a.hellos_peak = a.hellos_peak.max(a.hellos);
                self.handshake(connector, acceptor, attempt, Step::Answer);
            }
            Step::Answer => self.handshake(connector, acceptor, attempt, Step::Confirm),
            Step::Confirm => self.decide(connector, acceptor, attempt),
            Step::Verdict(verdict) => self.verdict_came(connector, acceptor, attempt, verdict),
        }
    }

    /// The acceptor's verdict once the connector proved the key, from its
    /// VC's state (`net::tcp`'s "Connections").
    fn decide(&mut self, connector: u32, acceptor: u32, attempt: u32) {
        let (c, a) = (connector as usize, acceptor as usize);
        self.procs[a].hellos -= 1;
        let found = self.procs[a].vc(c);
        let side = match found {
            Err(_) => AcceptorSide::Free,
            Ok(i) => match self.procs[a].vcs[i].link {
                Link::Connecting => AcceptorSide::Connecting,
                Link::AwaitingPeer => AcceptorSide::Free,
                Link::Up => AcceptorSide::Up,
            },
        };
        let verdict = Verdict::decide(a, c, side);
        // The verdict byte goes before any frame on the connection.
        self.handshake(connector, acceptor, attempt, Step::Verdict(verdict));
        match verdict {
            Verdict::Accept => {
                self.totals.connections += 1;
                let at = match found {
                    Ok(i) => {
                        let vc = &mut self.procs[a].vcs[i];
                        if vc.link == Link::Connecting {
                            // This end's own attempt no longer matters.
                            vc.attempt += 1;
                        }
                        i
                    }
                    Err(at) => {
                        self.procs[a].vcs.insert(
                            at,
                            Vc {
                                peer: connector,
                                link: Link::Connecting,
                                attempt: 0,
                                carried_by: None,
                                queued: Vec::new(),
                            },
                        );
                        at
                    }
                };
                self.vc_up(a, at, connector);
            }
            Verdict::Lose => self.totals.lost += 1,
            Verdict::Refuse => {}
        }
    }

    fn verdict_came(&mut self, connector: u32, acceptor: u32, attempt: u32, verdict: Verdict) {
        let (c, a) = (connector as usize, acceptor as usize);
        self.procs[c].connects -= 1;
        let Ok(at) = self.procs[c].vc(a) else {
            self.faults.push(format!(
                "process {c}: a verdict from {a}, to which it has no VC"
            ));
            return;
        };
        let vc = &mut self.procs[c].vcs[at];
        if vc.attempt != attempt {
            // A bumped attempt: the peer's connection carries the VC.
            self.totals.stale += 1;
            if verdict == Verdict::Accept {
                self.faults.push(format!(
                    "process {a} accepted process {c}'s second connection"
                ));
            }
            return;
        }
        match verdict {
            Verdict::Accept => self.vc_up(c, at, connector),
            Verdict::Lose => vc.link = Link::AwaitingPeer,
            Verdict::Refuse => self.faults.push(format!(
                "process {a} refused process {c}'s live attempt: it has a live VC already"
            )),
        }
    }

    // ----- the process layer's protocol (`rt::network`) -----

    fn on_frame(&mut self, from: usize, to: usize, body: Body) {
        match self.procs[to].vc(from) {
            Ok(i) if self.procs[to].vcs[i].link == Link::Up => {}
            _ => self.faults.push(format!(
                "process {to}: a frame from {from} on a VC that is not up"
            )),
        }
        match body {
            Body::Handlers(table) => self.merge_handlers(to, &table, Some(from)),
            Body::Exit => self.flood_exit(to, Some(from)),
            Body::Done => {
                let sends = self.end[to].child_done();
                self.end_sends(to, sends);
            }
            Body::AllDone => {
                let sends = self.end[to].all_done();
                self.end_sends(to, sends);
            }
            Body::Bye => self.procs[to].byes += 1,
            Body::Pe {
                from_pe,
                to_pe,
                what,
            } => self.on_pe_message(from_pe as usize, to_pe as usize, what),
        }
    }

    /// `Shared::merge_handlers`.
    fn merge_handlers(&mut self, me: usize, table: &[HandlerEntry], from: Option<usize>) {
        if self.procs[me].dead {
            return;
        }
        match self.handler_refs[me].merge(table) {
            Ok(false) => {}
            Ok(true) => {
                let body: Rc<[HandlerEntry]> = Rc::from(self.handler_refs[me].entries());
                for peer in self.job.process_tree(me).neighbours() {
                    if Some(peer) != from {
                        self.send(me, peer, Body::Handlers(body.clone()));
                    }
                }
            }
            Err(m) => {
                self.mismatches.push((me, m));
                self.procs[me].dead = true;
            }
        }
    }

    /// `Shared::flood_exit`.
    fn flood_exit(&mut self, me: usize, from: Option<usize>) {
        let tree = self.job.process_tree(me);
        for peer in self.exit[me].reach(&tree, from) {
            self.send(me, peer, Body::Exit);
        }
    }

    /// `Shared::send_end`, then the `Bye`s once released.
    fn end_sends(&mut self, me: usize, sends: Result<Vec<EndSend>, String>) {
        let sends = match sends {
            Ok(sends) => sends,
            Err(why) => {
                self.faults.push(format!("process {me}: {why}"));
                return;
            }
        };
        for send in sends {
            match send {
                EndSend::Done(to) => self.send(me, to, Body::Done),
                EndSend::AllDone(to) => self.send(me, to, Body::AllDone),
            }
        }
        if self.end[me].released() && !self.procs[me].said_bye {
            self.procs[me].said_bye = true;
            // `Network::shutdown`: a `Bye` on each VC it has
            // (`connected_peers`), then `end` to the launcher.
            let peers: Vec<usize> = self.procs[me].vcs.iter().map(|v| v.peer as usize).collect();
            for peer in peers {
                self.send(me, peer, Body::Bye);
            }
            self.tell_launcher(me, UpLine::End);
        }
    }

    // ----- Converse messages between PEs -----

    fn pe_send(&mut self, from_pe: usize, to_pe: usize, what: PeMsg) {
        let s = self.job.pes_per_proc;
        let (a, b) = (from_pe / s, to_pe / s);
        let (from_pe, to_pe) = (from_pe as u32, to_pe as u32);
        if a == b {
            self.totals.local += 1;
            self.current.push_back(Event::Local {
                from_pe,
                to_pe,
                what,
            });
        } else {
            let body = Body::Pe {
                from_pe,
                to_pe,
                what,
            };
            self.send(a, b, body);
        }
    }

    fn on_pe_message(&mut self, from_pe: usize, pe: usize, what: PeMsg) {
        let s = self.job.pes_per_proc;
        match what {
            PeMsg::Bcast => {
                self.bcast_copies += 1;
                // `forward_pe_copy`: a node's first PE (not the root's)
                // passes it to the child nodes, then to its node's others.
                let node = pe / s;
                if pe.is_multiple_of(s) && node != 0 {
                    for child in self.job.node_tree().children(node) {
                        self.pe_send(pe, child * s, PeMsg::Bcast);
                    }
                    for other in pe + 1..pe + s {
                        self.pe_send(pe, other, PeMsg::Bcast);
                    }
                }
                self.deposit(pe);
            }
            PeMsg::Contribution => {
                self.arrived[pe] += 1;
                self.try_reduce(pe);
            }
            PeMsg::QdStart => {
                assert_eq!(pe, 0, "detection requests go to PE 0");
                self.qd_requester = Some(from_pe);
                self.start_wave();
            }
            PeMsg::QdRequest => {
                let children: Vec<usize> = self.job.pe_tree().children(pe).collect();
                self.wave_waiting[pe] = children.len() as u8;
                self.pe_flags[pe] |= IN_WAVE;
                for child in children {
                    self.pe_send(pe, child, PeMsg::QdRequest);
                }
                self.maybe_reply(pe);
            }
            PeMsg::QdReply => {
                self.wave_waiting[pe] -= 1;
                self.maybe_reply(pe);
            }
            PeMsg::QdDone => self.qd_answered = true,
            PeMsg::Probe => {}
        }
    }

    /// PE 0 broadcasts (`send_shared`: down the node tree first, then its
    /// node's other PEs) and contributes.
    fn broadcast_from_pe0(&mut self) {
        let s = self.job.pes_per_proc;
        for child in self.job.node_tree().children(0) {
            self.pe_send(0, child * s, PeMsg::Bcast);
        }
        for other in 1..s {
            self.pe_send(0, other, PeMsg::Bcast);
        }
        self.deposit(0);
    }

    fn deposit(&mut self, pe: usize) {
        self.pe_flags[pe] |= DEPOSITED;
        self.try_reduce(pe);
    }

    /// `cmi::reduce`: a PE sends its merged contribution up once it has
    /// its own and all its children's.
    fn try_reduce(&mut self, pe: usize) {
        let tree = self.job.pe_tree();
        let flags = self.pe_flags[pe];
        if flags & DEPOSITED == 0
            || flags & REPORTED != 0
            || (self.arrived[pe] as usize) < tree.num_children(pe)
        {
            return;
        }
        self.pe_flags[pe] |= REPORTED;
        match tree.parent(pe) {
            Some(parent) => self.pe_send(pe, parent, PeMsg::Contribution),
            None => self.reduced = true,
        }
    }

    /// `start_wave`: PE 0 sends the wave's request to itself.
    fn start_wave(&mut self) {
        self.wave += 1;
        self.pe_send(0, 0, PeMsg::QdRequest);
    }

    /// `maybe_reply`: every PE is idle here, so it replies as soon as its
    /// children have.
    fn maybe_reply(&mut self, pe: usize) {
        if self.pe_flags[pe] & IN_WAVE == 0 || self.wave_waiting[pe] > 0 {
            return;
        }
        self.pe_flags[pe] &= !IN_WAVE;
        match self.job.pe_tree().parent(pe) {
            Some(parent) => self.pe_send(pe, parent, PeMsg::QdReply),
            // `conclude`: the first balanced wave is followed by a second;
            // after it the requester is answered.
            None if self.wave == 1 => self.start_wave(),
            None => {
                let requester = self.qd_requester.expect("a request started the waves");
                self.pe_send(0, requester, PeMsg::QdDone);
            }
        }
    }

    // ----- the launcher -----

    fn on_launcher_line(&mut self, from: usize, line: UpLine) {
        match line {
            UpLine::Hello => {
                self.tell_process(from, DownLine::Welcome);
                self.joined += 1;
                if self.joined == self.job.procs {
                    for p in 0..self.job.procs {
                        self.tell_process(p, DownLine::Go);
                    }
                }
            }
            UpLine::WhoIs(peer) => self.tell_process(from, DownLine::Card(peer)),
            UpLine::End => {}
        }
    }

    fn on_process_line(&mut self, to: usize, line: DownLine) {
        match line {
            DownLine::Challenge => self.tell_launcher(to, UpLine::Hello),
            DownLine::Welcome => {}
            DownLine::Go => self.procs[to].got_go = true,
            DownLine::Card(peer) => self.card_came(to, peer),
        }
    }

    // ----- rounds and phases -----

    fn handle(&mut self, event: Event) {
        self.last_event = self.now;
        match event {
            Event::Frame { from, to, body } => self.on_frame(from as usize, to as usize, body),
            Event::Local {
                from_pe,
                to_pe,
                what,
            } => self.on_pe_message(from_pe as usize, to_pe as usize, what),
            Event::ToLauncher { from, line } => self.on_launcher_line(from as usize, line),
            Event::ToProcess { to, line } => self.on_process_line(to as usize, line),
            Event::Handshake {
                connector,
                acceptor,
                attempt,
                step,
            } => self.on_handshake(connector, acceptor, attempt, step),
            Event::SendLater { from, to, rounds } => {
                if rounds == 0 {
                    let body = Body::Pe {
                        from_pe: from * self.job.pes_per_proc as u32,
                        to_pe: to * self.job.pes_per_proc as u32,
                        what: PeMsg::Probe,
                    };
                    self.send(from as usize, to as usize, body);
                } else {
                    let rounds = rounds - 1;
                    self.next.push(Event::SendLater { from, to, rounds });
                }
            }
        }
    }

    /// Runs `start` in the current round, then every round until nothing
    /// is left to deliver; returns what the phase cost.
    fn phase(&mut self, name: &'static str, start: impl FnOnce(&mut Sim)) -> PhaseStats {
        let before: Vec<Counts> = self.procs.iter().map(|p| p.counts).collect();
        let totals_before = self.totals;
        let start_round = self.now;
        self.last_event = self.now;
        start(self);
        loop {
            while let Some(event) = self.current.pop_front() {
                self.handle(event);
            }
            if self.next.is_empty() {
                break;
            }
            self.now += 1;
            self.current.extend(self.next.drain(..));
        }
        let rounds = self.last_event - start_round;
        // The next phase starts in the round after this one's last event.
        self.now += 1;
        let (mut messages_max, mut messages_sum, mut bytes_max, mut cards_max) = (0, 0u64, 0, 0);
        for (p, b) in self.procs.iter().zip(&before) {
            let messages = p.counts.messages() - b.messages();
            messages_max = messages_max.max(messages);
            messages_sum += u64::from(messages);
            bytes_max = bytes_max.max(p.counts.bytes - b.bytes);
            cards_max = cards_max.max(p.counts.cards - b.cards);
        }
        PhaseStats {
            name,
            rounds,
            messages_max,
            messages_mean: messages_sum as f64 / self.job.procs as f64,
            bytes_max,
            cards_max,
            totals: self.totals.since(&totals_before),
        }
    }

    fn start_up(&mut self) -> PhaseStats {
        self.phase("start-up", |sim| {
            for p in 0..sim.job.procs {
                sim.tell_process(p, DownLine::Challenge);
            }
        })
    }

    fn handler_check(&mut self) -> PhaseStats {
        self.phase("handler check", |sim| {
            for me in 0..sim.job.procs {
                let own: Vec<HandlerEntry> = (sim.job.tables)(me)
                    .into_iter()
                    .map(|(hash, name)| HandlerEntry {
                        hash,
                        name: name.to_string(),
                        origin: me,
                    })
                    .collect();
                sim.merge_handlers(me, &own, None);
            }
        })
    }

    fn tree_program(&mut self) -> PhaseStats {
        self.phase("broadcast + reduction", Sim::broadcast_from_pe0)
    }

    fn quiescence(&mut self) -> PhaseStats {
        let requester = self.job.qd_requester;
        self.phase("quiescence detection", |sim| {
            sim.pe_send(requester, 0, PeMsg::QdStart)
        })
    }

    fn exit_flood(&mut self) -> PhaseStats {
        let from = self.job.exit_from;
        self.phase("exit flood", |sim| sim.flood_exit(from, None))
    }

    fn end_of_job(&mut self) -> PhaseStats {
        // `Network::shutdown` waits until nothing it sent is queued, which
        // the model reaches at the end of every phase: checked here.
        for (me, p) in self.procs.iter().enumerate() {
            let quiet = p.waiting == 0
                && p.looking_up.is_none()
                && p.connects == 0
                && p.vcs.iter().all(|v| v.link == Link::Up);
            if !quiet {
                self.faults
                    .push(format!("process {me} ends with sends or connects pending"));
            }
        }
        self.phase("end barrier + Bye", |sim| {
            for me in 0..sim.job.procs {
                let sends = Ok(sim.end[me].own_done());
                sim.end_sends(me, sends);
            }
        })
    }

    /// The invariants of a job's end (see the module comment).
    fn check_end(&self) {
        assert_eq!(self.faults, Vec::<String>::new());
        let mut held = 0u64;
        for (me, p) in self.procs.iter().enumerate() {
            assert!(p.got_go, "process {me} never got `go`");
            assert!(self.end[me].released(), "process {me} never released");
            assert!(self.exit[me].seen(), "the exit never reached process {me}");
            assert_eq!(
                p.byes as usize,
                p.vcs.len(),
                "process {me}: a Bye on each VC"
            );
            for vc in &p.vcs {
                let back = &self.procs[vc.peer as usize];
                let other = back
                    .vc(me)
                    .map(|i| &back.vcs[i])
                    .unwrap_or_else(|_| panic!("{me} holds a VC to {} but not back", vc.peer));
                assert_eq!((vc.link, other.link), (Link::Up, Link::Up));
                assert_eq!(
                    vc.carried_by, other.carried_by,
                    "{me} and {}: one connection, known to both",
                    vc.peer
                );
                held += 1;
            }
        }
        assert_eq!(
            self.totals.connections * 2,
            held,
            "exactly one connection per pair of processes that talked"
        );
        assert_eq!(
            self.totals.frames_of(Kind::Bye),
            held,
            "a Bye each way on each connection"
        );
    }

    fn stats(&self, phases: Vec<PhaseStats>) -> JobStats {
        let procs = &self.procs;
        let messages: u64 = procs.iter().map(|p| u64::from(p.counts.messages())).sum();
        JobStats {
            procs: self.job.procs,
            pes_per_proc: self.job.pes_per_proc,
            branch: self.job.branch,
            rounds: phases.iter().map(|p| p.rounds).sum(),
            phases,
            messages_max: procs.iter().map(|p| p.counts.messages()).max().unwrap_or(0),
            messages_mean: messages as f64 / procs.len() as f64,
            bytes_max: procs.iter().map(|p| p.counts.bytes).max().unwrap_or(0),
            connections: self.totals.connections,
            cards_max: procs.iter().map(|p| p.counts.cards).max().unwrap_or(0),
            cards_total: procs.iter().map(|p| u64::from(p.counts.cards)).sum(),
            launcher_messages: u64::from(self.totals.launcher.messages()),
            vcs_max: procs.iter().map(|p| p.vcs.len()).max().unwrap_or(0),
            waiting_max: procs.iter().map(|p| p.waiting_peak).max().unwrap_or(0),
            hellos_max: procs.iter().map(|p| p.hellos_peak).max().unwrap_or(0),
            connects_max: procs.iter().map(|p| p.connects_peak).max().unwrap_or(0),
            handler_entries_max: self
                .handler_refs
                .iter()
                .map(|r| r.entries().len())
                .max()
                .unwrap_or(0),
        }
    }
}

/// Runs a whole job, phase by phase, checks its end and returns its
/// counts.
fn simulate(job: Job) -> JobStats {
    let mut sim = Sim::new(job);
    let mut phases = vec![sim.start_up()];
    match (job.program, job.order) {
        (Program::TreeCollectives, Order::HandlersFirst) => {
            phases.push(sim.handler_check());
            phases.push(sim.tree_program());
        }
        (Program::TreeCollectives, Order::ProgramFirst) => {
            phases.push(sim.tree_program());
            phases.push(sim.handler_check());
        }
        (Program::GatherAtPe0, _) => {
            phases.push(sim.handler_check());
            phases.push(sim.phase("every PE to PE 0", |sim| {
                for pe in 1..sim.job.pes() {
                    sim.pe_send(pe, 0, PeMsg::Probe);
                }
            }));
        }
    }
    assert!(
        sim.mismatches.is_empty(),
        "equal tables: {:?}",
        sim.mismatches
    );
    if job.program == Program::TreeCollectives {
        assert!(sim.reduced, "the reduction reached PE 0");
        assert_eq!(
            sim.bcast_copies,
            job.pes() - 1,
            "every other PE got the broadcast once"
        );
        phases.push(sim.quiescence());
        assert!(
            sim.qd_answered && sim.wave == 2,
            "two waves, then the answer"
        );
    }
    phases.push(sim.exit_flood());
    phases.push(sim.end_of_job());
    sim.check_end();
    if job.program == Program::TreeCollectives && job.pes_per_proc == 1 {
        // A process looks up only peers it sends to first: its tree
        // neighbours, and process 0 for the quiescence request.
        for (me, p) in sim.procs.iter().enumerate() {
            let degree = job.process_tree(me).neighbours().count();
            let extra = usize::from(me == job.qd_requester);
            assert!(p.counts.cards as usize <= degree + extra, "process {me}");
        }
    }
    sim.stats(phases)
}

/// The counts as a table (README material): one row per job.
fn counts_table(runs: &[JobStats]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| processes | messages/process max | mean | bytes/process max | rounds | connections | cards looked up max | VCs/process max | sends waiting max | launcher lines |"
    );
    let _ = writeln!(out, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in runs {
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} | {} | {} | {} | {} | {} | {} | {} |",
            r.procs,
            r.messages_max,
            r.messages_mean,
            r.bytes_max,
            r.rounds,
            r.connections,
            r.cards_max,
            r.vcs_max,
            r.waiting_max,
            r.launcher_messages
        );
    }
    out
}

/// One job's phases as a table.
fn phase_table(run: &JobStats) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| phase ({} processes) | rounds | messages/process max | mean | frames | connections | cards max | launcher lines |",
        run.procs
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|");
    for p in &run.phases {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.2} | {} | {} | {} | {} |",
            p.name,
            p.rounds,
            p.messages_max,
            p.messages_mean,
            p.totals.frames.iter().sum::<u64>(),
            p.totals.connections,
            p.cards_max,
            p.totals.launcher.messages()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::OnceLock;

    /// ⌈log_k n⌉: the depth bound of a k-ary tree over n members.
    fn ceil_log(n: usize, k: usize) -> u32 {
        let (mut depth, mut reach) = (0, 1usize);
        while reach < n {
            reach = reach.saturating_mul(k);
            depth += 1;
        }
        depth
    }

    const SIZES: [usize; 3] = [1_000, 10_000, 100_000];

    /// The three jobs of the growth laws, run once for every test.
    fn runs() -> &'static [JobStats] {
        static RUNS: OnceLock<Vec<JobStats>> = OnceLock::new();
        RUNS.get_or_init(|| SIZES.iter().map(|&p| simulate(Job::new(p))).collect())
    }

    #[test]
    fn start_up_costs_four_lines_a_process() {
        for run in runs() {
            let p = run.procs as u64;
            let s = run.phase("start-up");
            // challenge, hello, welcome, go.
            assert_eq!((s.messages_max, s.messages_mean), (4, 4.0));
            assert_eq!(s.totals.launcher.sent as u64, 3 * p);
            assert_eq!(s.totals.launcher.received as u64, p);
            assert_eq!(s.rounds, 3);
            assert_eq!(s.totals.frames.iter().sum::<u64>(), 0);
        }
    }

    #[test]
    fn the_protocol_floods_cost_what_the_tree_says() {
        for run in runs() {
            let p = run.procs as u64;
            let depth = SpanningTree::new(run.procs, run.branch, 0).depth() as u32;
            let k = run.branch as u32;

            let check = run.phase("handler check");
            assert_eq!(check.totals.frames_of(Kind::Handlers), 2 * (p - 1));
            assert_eq!(check.totals.frames.iter().sum::<u64>(), 2 * (p - 1));
            // Every tree edge connects, once, in a head-to-head or not.
            assert_eq!(check.totals.connections, p - 1);
            // A process looks its tree neighbours up one after another,
            // then a handshake (4 hops) and the frame: rounds do not grow
            // with P.
            assert!(check.rounds <= 2 * (k + 1) + 5, "{}", check.rounds);
            assert!(check.cards_max <= k + 1);

            let exit = run.phase("exit flood");
            assert_eq!(
                exit.totals.frames_of(Kind::Exit),
                p - 1,
                "once along each edge"
            );
            assert_eq!(exit.totals.frames.iter().sum::<u64>(), p - 1);
            assert!(exit.rounds >= depth.div_ceil(2) && exit.rounds <= 2 * depth);
            assert_eq!(
                exit.totals.connections + exit.totals.launcher.messages() as u64,
                0
            );

            let end = run.phase("end barrier + Bye");
            assert_eq!(end.totals.frames_of(Kind::Done), p - 1);
            assert_eq!(end.totals.frames_of(Kind::AllDone), p - 1);
            assert_eq!(end.totals.frames_of(Kind::Bye), 2 * run.connections);
            assert_eq!(end.totals.launcher.received as u64, p, "`end` from each");
            // Up, down, then the Byes.
            assert_eq!(end.rounds, 2 * depth + 1);
        }
    }

    #[test]
    fn the_tree_program_costs_each_process_its_degree() {
        for run in runs() {
            let p = run.procs as u64;
            let depth = SpanningTree::new(run.procs, run.branch, 0).depth() as u32;
            let k = run.branch as u32;
            let prog = run.phase("broadcast + reduction");
            assert_eq!(prog.totals.frames_of(Kind::Bcast), p - 1);
            assert_eq!(prog.totals.frames_of(Kind::Contribution), p - 1);
            // The handler check connected the tree: down, then up.
            assert_eq!(prog.totals.connections, 0);
            assert_eq!(prog.rounds, 2 * depth);
            // One copy from the parent and one to each child; one
            // contribution from each child and one to the parent.
            assert_eq!(prog.messages_max, 2 * (k + 1));
            assert!(prog.messages_mean < 4.0);

            let qd = run.phase("quiescence detection");
            assert_eq!(qd.totals.frames_of(Kind::QdRequest), 2 * (p - 1));
            assert_eq!(qd.totals.frames_of(Kind::QdReply), 2 * (p - 1));
            assert_eq!(qd.totals.frames_of(Kind::QdStart), 1);
            assert_eq!(qd.totals.frames_of(Kind::QdDone), 1);
            // The request is the only message off the tree: one more
            // connection, to process 0 (card, handshake, frame: 7 hops),
            // two waves down and up, the answer back.
            assert_eq!(qd.totals.connections, 1);
            assert_eq!(qd.rounds, 7 + 4 * depth + 1);
        }
    }

    #[test]
    fn growth_laws_from_a_thousand_to_a_hundred_thousand_processes() {
        let runs = runs();
        for run in runs {
            let p = run.procs as u64;
            let k = run.branch;
            let depth = ceil_log(run.procs, k);
            // Connections: the tree's edges, and the quiescence request.
            assert_eq!(run.connections, p);
            // State: the VCs a process holds are its tree neighbours (and
            // the requester, at process 0), whatever P.
            assert!(run.vcs_max <= k + 1, "{}", run.vcs_max);
            assert!(run.cards_max as usize <= k + 1);
            assert!(run.waiting_max as usize <= k + 1);
            assert!(run.hellos_max as usize <= k + 1 && run.connects_max as usize <= k + 1);
            assert_eq!(run.handler_entries_max, same_tables(0).len());
            // Messages: per peer (its k + 1 tree neighbours, and the
            // requester at process 0) two handshakes of 4 steps, a card
            // (2 lines) and 14 frames at most; 4 lines to start, 1 to end.
            let per_peer = 2 * 4 + 2 + 14;
            assert!(run.messages_max <= (k as u32 + 2) * per_peer + 5);
            // The launcher: four lines a process to start, one to end,
            // two a card; a card per side of a connection at most.
            assert_eq!(run.launcher_messages, 5 * p + 2 * run.cards_total);
            assert!(run.cards_total <= 2 * run.connections);
            // Rounds: the tree's depth ⌈log_k P⌉ a few times over, plus
            // start-up and the handler check, which do not grow with P.
            // Start-up 3, the check 2·(k + 1) + 5, the program 2·depth,
            // quiescence 8 + 4·depth, the exit 2·depth at most, the end
            // 2·depth + 1.
            let fixed = 3 + (2 * (k as u32 + 1) + 5) + 8 + 1;
            assert!(run.rounds <= fixed + 10 * depth, "{}", run.rounds);
        }
        // Per process, nothing grows with P: the busiest process of 10⁵
        // is as busy as the busiest of 10³, and the mean does not move.
        let (small, large) = (&runs[0], &runs[2]);
        assert_eq!(small.messages_max, large.messages_max);
        assert_eq!(small.cards_max, large.cards_max);
        assert_eq!(small.vcs_max, large.vcs_max);
        assert!((small.messages_mean - large.messages_mean).abs() < 0.5);
        // Rounds grow with the depth: 5, 7 and 9 levels of a 4-ary tree.
        assert!(small.rounds < runs[1].rounds && runs[1].rounds < large.rounds);
    }

    #[test]
    fn program_first_connects_the_tree_from_the_parents() {
        let mut job = Job::new(10_000);
        job.order = Order::ProgramFirst;
        let run = simulate(job);
        let p = 10_000;
        let prog = run.phase("broadcast + reduction");
        assert_eq!(prog.totals.connections, p - 1);
        assert_eq!(prog.totals.lost + prog.totals.stale, 0, "no head-to-head");
        // One card per edge, asked by the parent.
        assert_eq!(prog.totals.launcher.messages() as u64, 2 * (p - 1));
        let depth = SpanningTree::new(10_000, 4, 0).depth() as u32;
        // Per level: the parent's look-ups in turn, handshake, frame; then
        // up over the VCs made.
        assert!(prog.rounds <= depth * (2 * 4 + 5) + depth);
        let check = run.phase("handler check");
        assert_eq!(check.totals.connections, 0);
        assert_eq!(check.cards_max, 0);
        assert_eq!(check.totals.frames_of(Kind::Handlers), 2 * (p - 1));
        assert_eq!(run.connections, p);
    }

    #[test]
    fn the_handler_check_connects_head_to_head_once_a_pair() {
        let run = &runs()[0];
        let check = run.phase("handler check");
        // Both ends of most edges send first: the acceptor of the higher
        // process's connection says *lose*, the other's attempt is bumped.
        assert!(check.totals.lost > 0 && check.totals.stale > 0);
        assert_eq!(check.totals.connections, run.procs as u64 - 1);
    }

    /// Two processes, the second sending `skew` rounds after the first:
    /// one connection whatever the skew; at once, process 0's.
    #[test]
    fn head_to_head_leaves_one_connection() {
        for (first, second) in [(0u32, 1u32), (1, 0)] {
            for skew in 0..10 {
                let mut sim = Sim::new(Job::new(2));
                sim.start_up();
                let h2h = sim.phase("probes", |sim| {
                    sim.next.push(Event::SendLater {
                        from: first,
                        to: second,
                        rounds: 0,
                    });
                    sim.next.push(Event::SendLater {
                        from: second,
                        to: first,
                        rounds: skew,
                    });
                });
                assert_eq!(sim.faults, Vec::<String>::new());
                assert_eq!(
                    h2h.totals.connections, 1,
                    "{first} then {second}, skew {skew}"
                );
                assert_eq!(h2h.totals.frames_of(Kind::Probe), 2);
                let (a, b) = (&sim.procs[0].vcs[0], &sim.procs[1].vcs[0]);
                assert_eq!((a.link, b.link), (Link::Up, Link::Up));
                assert_eq!(a.carried_by, b.carried_by);
                if skew == 0 {
                    assert_eq!(a.carried_by, Some(0), "the lower process's stands");
                    assert_eq!(h2h.totals.lost, 1);
                }
                if skew >= 6 {
                    // The first's connection was up before the second sent.
                    assert_eq!(a.carried_by, Some(first));
                    assert_eq!(h2h.totals.lost + h2h.totals.stale, 0);
                }
            }
        }
    }

    /// Processes 1234 and 9876 registered different handlers at position
    /// 1; the others registered only position 0. Each table spreads until
    /// they meet, where the difference names both.
    #[test]
    fn a_handler_difference_is_found_and_names_both_origins() {
        fn tables(p: usize) -> Table {
            match p {
                1234 => vec![(0x11, "common"), (0xAA, "first::kind")],
                9876 => vec![(0x11, "common"), (0xBB, "second::kind")],
                _ => vec![(0x11, "common")],
            }
        }
        let mut job = Job::new(10_000);
        job.tables = tables;
        let mut sim = Sim::new(job);
        sim.start_up();
        sim.handler_check();
        assert!(!sim.mismatches.is_empty(), "the difference is found");
        for (finder, m) in &sim.mismatches {
            assert_eq!(m.at, 1);
            let mut origins = [m.ours.origin, m.theirs.origin];
            origins.sort_unstable();
            assert_eq!(origins, [1234, 9876], "found at {finder}: {m:?}");
            let mut names = [m.ours.name.as_str(), m.theirs.name.as_str()];
            names.sort_unstable();
            assert_eq!(names, ["first::kind", "second::kind"]);
        }
    }

    /// With several PEs a process, the reduction and the waves travel the
    /// tree over PEs, whose edges between processes are not all the tree
    /// over processes': with k PEs a process, process q's PEs' children
    /// live on processes k·q ..= k·q + k, one more than its children in
    /// the process tree.
    #[test]
    fn several_pes_a_process_add_the_pe_trees_edges() {
        let (p, k, s) = (10_000u64, 4u64, 4usize);
        let mut job = Job::new(p as usize);
        job.pes_per_proc = s;
        job.qd_requester = job.pes() - 1;
        let run = simulate(job);
        let pe_tree = job.pe_tree();
        let crossing = (1..job.pes())
            .filter(|&x| pe_tree.parent(x).is_some_and(|y| y / s != x / s))
            .count() as u64;
        let prog = run.phase("broadcast + reduction");
        assert_eq!(prog.totals.frames_of(Kind::Bcast), p - 1, "a copy per node");
        assert_eq!(prog.totals.frames_of(Kind::Contribution), crossing);
        let qd = run.phase("quiescence detection");
        assert_eq!(qd.totals.frames_of(Kind::QdRequest), 2 * crossing);
        assert_eq!(qd.totals.frames_of(Kind::QdReply), 2 * crossing);
        // Per wave, each PE of a process talks to its parent and children.
        assert!(qd.messages_max as usize <= 2 * 2 * s * (k as usize + 1));
        // The edges (q, k·q) for 0 < k·q < P, and the request to PE 0.
        let extra = (1..p).filter(|&q| k * q < p).count() as u64;
        assert_eq!(run.connections, p - 1 + extra + 1);
        assert_eq!(prog.totals.connections, extra);
        assert!(run.vcs_max as u64 <= k + 3);
    }

    /// `examples/hello` as written: every PE sends its report straight to
    /// PE 0, which then exits. Not a tree program: process 0 ends up with
    /// a VC to every process, and takes every connection at once.
    #[test]
    fn hello_as_written_gathers_at_process_0() {
        let (p, k) = (10_000u64, 4u64);
        let mut job = Job::new(p as usize);
        job.program = Program::GatherAtPe0;
        job.exit_from = 0;
        let run = simulate(job);
        let gather = run.phase("every PE to PE 0");
        assert_eq!(gather.totals.frames_of(Kind::Probe), p - 1);
        // Its children were connected by the handler check.
        assert_eq!(gather.totals.connections, p - 1 - k);
        assert_eq!(run.connections, 2 * (p - 1) - k);
        assert_eq!(run.vcs_max as u64, p - 1);
        // All the others' hellos wait at once: far above the tcp module's
        // cap on handshakes under way (256).
        assert_eq!(run.hellos_max as u64, p - 1 - k);
        // Hello and confirm in, answer and verdict out, then the report.
        assert_eq!(gather.messages_max as u64, 5 * (p - 1 - k) + k);
        assert_eq!(gather.totals.launcher.messages() as u64, 2 * (p - 1 - k));
    }

    #[test]
    fn the_model_is_deterministic() {
        assert_eq!(simulate(Job::new(1_000)), runs()[0]);
    }

    /// The table the README quotes (`--nocapture` shows it).
    #[test]
    fn counts_table_for_the_readme() {
        let table = counts_table(runs());
        let phases = phase_table(&runs()[2]);
        println!("{table}\n{phases}");
        assert_eq!(table.lines().count(), 2 + SIZES.len());
        assert!(table.contains("| 100000 |"));
        assert_eq!(phases.lines().count(), 2 + 6);
    }
}
