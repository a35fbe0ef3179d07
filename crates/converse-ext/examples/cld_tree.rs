//! An unbalanced tree search through the seed balancer (`Cld`): the
//! Fibonacci call tree. Every node of the tree above a cut-off is a seed
//! given to `cld::enqueue(Dest::Anywhere, …)`, made where its parent ran,
//! the root on PE 0; below the cut-off a seed computes its subtree's value
//! by plain recursion. The answer is `fib(N)`.
//!
//! `cargo run --release -p converse-ext --example cld_tree -- [N] [CUTOFF] [int] +p 2 [+balancer NAME]`
//!
//! Seeds carry bit-vector priorities, their path in the tree (left before
//! right, so the search runs depth-first and a PE's queue stays short);
//! with `int`, integer priorities instead (bigger subtrees first, which
//! runs breadth-first and keeps most of the tree waiting at once).
//!
//! Besides the answer, the job checks that every seed ran exactly once (a
//! count and a hash of the seeds' tree positions against the tree's), and
//! that the pack function ran only for seeds leaving their process: each
//! packing appends its process to the seed's trail, and where the seed runs
//! the trail must start in the process that made it, change process at
//! every step and end in another process than this one. At the end PE 0
//! prints the figures and any failed check ends the job with an error.
use std::sync::Mutex;

use converse::{BitPrio, Message, Queueing};
use converse_ext::cld::{self, Dest, SeedInfo};

/// What PE 0 found, for the test and the benchmark that run this example.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// fib(N), as the seeds summed it.
    pub answer: u64,
    /// Seeds run, on all PEs.
    pub seeds: u64,
    /// Seeds run on another PE than the one that made them.
    pub moved: u64,
    /// Seeds that ran in another process than the one that made them.
    pub left_process: u64,
    /// Pack-function calls, on all PEs (`cld::stats().packs`).
    pub packs: u64,
    /// Seeds run per PE.
    pub per_pe: Vec<u64>,
    /// The strategy (`CldGetStrategy`).
    pub strategy: String,
    /// Seconds from the root's enqueue to quiescence.
    pub seconds: f64,
}

/// The report of the last job this process ran (PE 0 writes it).
pub static REPORT: Mutex<Option<Report>> = Mutex::new(None);

/// A seed's payload: `n`, its tree position (root 1, children 2p and
/// 2p+1), the PE that made it, the pack function's index, whether it
/// carries a bit-vector priority, the trail length, then the trail (one
/// u32 process id per packing).
const FIXED: usize = 4 + 8 + 4 + 4 + 4 + 4;

struct Seed {
    n: u32,
    pos: u64,
    made_on: u32,
    pack_index: u32,
    bits: bool,
    trail: Vec<u32>,
}

impl Seed {
    fn encode(&self, handler: usize) -> Message {
        let mut msg = Message::new(handler, FIXED + 4 * self.trail.len());
        let p = msg.payload_mut();
        p[..4].copy_from_slice(&self.n.to_le_bytes());
        p[4..12].copy_from_slice(&self.pos.to_le_bytes());
        p[12..16].copy_from_slice(&self.made_on.to_le_bytes());
        p[16..20].copy_from_slice(&self.pack_index.to_le_bytes());
        p[20..24].copy_from_slice(&u32::from(self.bits).to_le_bytes());
        p[24..28].copy_from_slice(&(self.trail.len() as u32).to_le_bytes());
        for (i, t) in self.trail.iter().enumerate() {
            p[FIXED + 4 * i..FIXED + 4 * i + 4].copy_from_slice(&t.to_le_bytes());
        }
        msg
    }

    /// The seed in `msg`; a message that is not one (it came from
    /// elsewhere, so it is checked) ends the job naming its sender.
    fn decode(msg: &Message) -> Seed {
        let p = msg.payload();
        let u32_at = |at: usize| {
            p.get(at..at + 4)
                .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
        };
        let len = u32_at(24).unwrap_or(u32::MAX) as usize;
        if p.len() < FIXED || p.len() != FIXED.saturating_add(len.saturating_mul(4)) {
            converse::abort(&format!(
                "a malformed tree seed ({} bytes) from PE {} on PE {}",
                p.len(),
                msg.src_pe(),
                converse::my_pe()
            ));
        }
        let word = |at: usize| u32_at(at).expect("within the checked length");
        Seed {
            n: word(0),
            pos: u64::from_le_bytes(p[4..12].try_into().expect("8 bytes")),
            made_on: word(12),
            pack_index: word(16),
            bits: word(20) != 0,
            trail: (0..len).map(|i| word(FIXED + 4 * i)).collect(),
        }
    }
}

/// The process a PE is in, named by its first PE.
fn process_of_me() -> u32 {
    converse::machine::process_pes().start as u32
}

/// The process PE `pe` is in: in a job across processes each process is a
/// node (`convrun` starts one per node).
fn process_of(pe: usize) -> u32 {
    let mine = converse::machine::process_pes();
    if mine.contains(&pe) {
        mine.start as u32
    } else {
        converse::node_first(converse::node_of(pe)) as u32
    }
}

/// Bit-vector priority of tree position `pos`: its path from the root,
/// one bit per level (left 0, right 1), so a subtree's seeds run together.
fn path_prio(pos: u64) -> BitPrio {
    let depth = 63 - pos.leading_zeros();
    let path = if depth == 0 {
        0
    } else {
        (pos & ((1 << depth) - 1)) << (64 - depth)
    };
    BitPrio::new(
        depth,
        &[(path >> 32) as u32, path as u32][..depth.div_ceil(32) as usize],
    )
    .expect("the words of `depth` bits")
}

/// The info function: integer priority -n (bigger subtrees first), or
/// the path as a bit vector.
fn info(msg: &Message) -> SeedInfo {
    let s = Seed::decode(msg);
    let queueing = if s.bits {
        Queueing::BFifo(path_prio(s.pos))
    } else {
        Queueing::IFifo(-(s.n as i32))
    };
    let Some(pack) = cld::pack_fn(s.pack_index as usize) else {
        converse::abort(&format!(
            "a tree seed names pack function {}, which is not registered on PE {}",
            s.pack_index,
            converse::my_pe()
        ));
    };
    SeedInfo::new(msg, queueing).with_pack(pack)
}

/// The pack function: the long form is the short one with this process
/// added to the trail.
fn pack(msg: Message) -> Message {
    let mut s = Seed::decode(&msg);
    s.trail.push(process_of_me());
    s.encode(msg.handler())
}

fn fib(n: u32) -> u64 {
    if n < 2 {
        n as u64
    } else {
        fib(n - 1) + fib(n - 2)
    }
}

/// Count and position hash of the seeds of the tree of `n` at `pos`.
fn tree(n: u32, cutoff: u32, pos: u64) -> (u64, u64) {
    if n <= cutoff {
        (1, mix(pos))
    } else {
        let (a, ha) = tree(n - 1, cutoff, 2 * pos);
        let (b, hb) = tree(n - 2, cutoff, 2 * pos + 1);
        (1 + a + b, mix(pos).wrapping_add(ha).wrapping_add(hb))
    }
}

/// A 64-bit mix (splitmix64's finalizer): sums of mixed positions tell a
/// missing or doubled seed.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One PE's tally.
#[derive(Default, Clone, Copy)]
struct Tally {
    sum: u64,
    seeds: u64,
    hash: u64,
    moved: u64,
    left: u64,
    bad_trails: u64,
    /// Trail entries of the seeds run: packings they went through.
    hops: u64,
}

static TALLY: converse::Cpv<std::cell::Cell<Tally>> = converse::Cpv::new();

fn tally(f: impl FnOnce(&mut Tally)) {
    let t = TALLY.get();
    let mut v = t.get();
    f(&mut v);
    t.set(v);
}

/// The example's start function, on every PE. `args`: the program's
/// arguments (`N`, `CUTOFF`, `int`).
pub fn start(args: &[String]) {
    let n: u32 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(30);
    let cutoff: u32 = args
        .get(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(12u32)
        .max(1);
    let bits = args.get(3).is_none_or(|a| a != "int");
    TALLY.initialize(std::cell::Cell::new(Tally::default()));
    let info_index = cld::register_info_fn(info);
    let pack_index = cld::register_pack_fn(pack) as u32;
    let me = converse::my_pe();

    // The tree's seeds.
    let seed_handler = std::rc::Rc::new(std::cell::Cell::new(0));
    let h = std::rc::Rc::clone(&seed_handler);
    seed_handler.set(converse::register_handler(move |msg: Message| {
        let s = Seed::decode(&msg);
        let here = converse::my_pe();
        let ran_in = process_of_me();
        let made_in = process_of(s.made_on as usize);
        let trail_ok = match (s.trail.first(), s.trail.last()) {
            (None, _) => made_in == ran_in,
            (Some(&first), Some(&last)) => {
                first == made_in && last != ran_in && s.trail.windows(2).all(|w| w[0] != w[1])
            }
            _ => unreachable!(),
        };
        tally(|t| {
            t.seeds += 1;
            t.hash = t.hash.wrapping_add(mix(s.pos));
            t.moved += u64::from(s.made_on as usize != here);
            t.left += u64::from(made_in != ran_in);
            t.bad_trails += u64::from(!trail_ok);
            t.hops += s.trail.len() as u64;
        });
        if s.n <= cutoff {
            let v = fib(std::hint::black_box(s.n));
            tally(|t| t.sum += v);
            return;
        }
        for (k, child_n) in [(0, s.n - 1), (1, s.n - 2)] {
            let child = Seed {
                n: child_n,
                pos: 2 * s.pos + k,
                made_on: here as u32,
                pack_index: s.pack_index,
                bits: s.bits,
                trail: Vec::new(),
            };
            cld::enqueue(Dest::Anywhere, child.encode(h.get()), info_index);
        }
    }));

    // The tallies, gathered on PE 0 at quiescence.
    let gathered: std::rc::Rc<std::cell::RefCell<Vec<(usize, Tally, u64)>>> = Default::default();
    let g = std::rc::Rc::clone(&gathered);
    let t0 = std::rc::Rc::new(std::cell::Cell::new(0.0));
    let t0c = std::rc::Rc::clone(&t0);
    let collect = converse::register_handler(move |msg: Message| {
        let w: Vec<u64> = msg
            .payload()
            .chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let t = Tally {
            sum: w[1],
            seeds: w[2],
            hash: w[3],
            moved: w[4],
            left: w[5],
            bad_trails: w[6],
            hops: w[8],
        };
        g.borrow_mut().push((w[0] as usize, t, w[7]));
        if g.borrow().len() == converse::num_pes() {
            finish(n, cutoff, &g.borrow(), converse::wall_timer() - t0c.get());
        }
    });
    let report = converse::register_handler(move |_msg: Message| {
        let t = TALLY.get().get();
        let words = [
            converse::my_pe() as u64,
            t.sum,
            t.seeds,
            t.hash,
            t.moved,
            t.left,
            t.bad_trails,
            cld::stats().packs,
            t.hops,
        ];
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        converse::sync_send_and_free(0, Message::from_payload(collect, &bytes));
    });

    if me == 0 {
        t0.set(converse::wall_timer());
        let root = Seed {
            n,
            pos: 1,
            made_on: 0,
            pack_index,
            bits,
            trail: Vec::new(),
        };
        cld::enqueue(Dest::Anywhere, root.encode(seed_handler.get()), info_index);
        converse::start_quiescence_detection(move || {
            converse::sync_broadcast_all_and_free(Message::new(report, 0));
        });
    }
}

/// PE 0, every tally in: check and report.
fn finish(n: u32, cutoff: u32, tallies: &[(usize, Tally, u64)], seconds: f64) {
    let mut per_pe = vec![0; tallies.len()];
    let mut total = Tally::default();
    let mut packs = 0;
    for (pe, t, p) in tallies {
        per_pe[*pe] = t.seeds;
        total.sum += t.sum;
        total.seeds += t.seeds;
        total.hash = total.hash.wrapping_add(t.hash);
        total.moved += t.moved;
        total.left += t.left;
        total.bad_trails += t.bad_trails;
        total.hops += t.hops;
        packs += p;
    }
    let report = Report {
        answer: total.sum,
        seeds: total.seeds,
        moved: total.moved,
        left_process: total.left,
        packs,
        per_pe,
        strategy: cld::get_strategy().to_string(),
        seconds,
    };
    converse::cmi_printf!(
        "fib({n}) = {} from {} seeds on {} PEs, balancer {}: per PE {:?}; {} moved, {} left their process, {} packed; {:.3} s\n",
        report.answer,
        report.seeds,
        report.per_pe.len(),
        report.strategy,
        report.per_pe,
        report.moved,
        report.left_process,
        report.packs,
        seconds
    );
    let (want_seeds, want_hash) = tree(n, cutoff, 1);
    let mut wrong = Vec::new();
    if report.answer != fib_fast(n) {
        wrong.push(format!(
            "the answer is {}, not fib({n}) = {}",
            report.answer,
            fib_fast(n)
        ));
    }
    if report.seeds != want_seeds || total.hash != want_hash {
        wrong.push(format!(
            "{} seeds ran (hash {:#x}); the tree has {want_seeds} (hash {want_hash:#x})",
            report.seeds, total.hash
        ));
    }
    if total.bad_trails != 0 {
        wrong.push(format!(
            "{} seeds were packed without leaving their process, or left without being packed",
            total.bad_trails
        ));
    }
    if report.packs != total.hops {
        wrong.push(format!(
            "the pack function ran {} times, but the seeds went through {} packings",
            report.packs, total.hops
        ));
    }
    *REPORT.lock().unwrap() = Some(report);
    if wrong.is_empty() {
        converse::exit(0);
    }
    converse::abort(&wrong.join("; "));
}

fn fib_fast(n: u32) -> u64 {
    let (mut a, mut b) = (0u64, 1u64);
    for _ in 0..n {
        (a, b) = (b, a + b);
    }
    a
}

#[allow(dead_code)] // the test and the benchmark use `start` alone
fn main() -> std::process::ExitCode {
    cld::install();
    converse::Converse::new().args(std::env::args()).main(start)
}
