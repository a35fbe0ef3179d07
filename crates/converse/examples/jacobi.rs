//! Jacobi iteration for the 1-D Laplace equation, with a reduction as the
//! convergence test of every sweep.
//!
//! `cargo run --release --example jacobi -- [N] [+p P] [++ppn M]`
//!
//! The interior points `1..=N` of a rod held at 0 on the left and 1 on the
//! right are split into contiguous blocks, one per PE. Each sweep:
//!
//! 1. PE 0 broadcasts `SWEEP(k)` to every PE (itself included);
//! 2. each PE sends its edge values to its neighbours (`GHOST`), and once
//!    it has both neighbours' values for sweep `k` it updates its block and
//!    contributes its largest change to a max-reduction;
//! 3. the reduction's result reaches PE 0 (`CHANGE`), which starts sweep
//!    `k + 1` or, once the largest change is below the tolerance, broadcasts
//!    `FINISH`; then a second reduction (struct form) collects the largest
//!    error against the exact solution `x / (N + 1)` and PE 0 prints it.
//!
//! Ghost values for sweep `k + 1` may arrive before `SWEEP(k + 1)` does
//! (they travel different paths), so each PE keeps them by sweep number.
//! Jacobi is deterministic, so the sweep count does not depend on the number
//! of PEs.
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use converse::{Converse, Message};

/// Stop when no point changes by more than this in a sweep.
const TOLERANCE: f64 = 1e-7;
/// Give up after this many sweeps.
const MAX_SWEEPS: u64 = 1_000_000;

/// One PE's block of the rod.
struct Block {
    /// Global index of the first interior point this PE owns (1-based).
    first: usize,
    /// Values, with one ghost cell at each end.
    u: Vec<f64>,
    /// The sweep in progress (0 before the first).
    sweep: u64,
    /// Whether this PE has done sweep `sweep`.
    done: bool,
    /// Neighbours' edge values by sweep: [left, right].
    ghosts: HashMap<u64, [Option<f64>; 2]>,
}

fn words(msg: &Message) -> impl Iterator<Item = u64> + '_ {
    msg.payload()
        .chunks_exact(8)
        .map(|w| u64::from_le_bytes(w.try_into().unwrap()))
}

fn message(handler: usize, ws: &[u64]) -> Message {
    let bytes: Vec<u8> = ws.iter().flat_map(|w| w.to_le_bytes()).collect();
    Message::from_payload(handler, &bytes)
}

/// The handler indices, the same on every PE.
#[derive(Clone, Copy)]
struct Handlers {
    ghost: usize,
    change: usize,
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    Converse::new().args(args).main(|args| {
        let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(64);
        let pes = converse::num_pes();
        let me = converse::my_pe();
        if n < pes {
            if me == 0 {
                converse::cmi_error!("jacobi: N={n} must be at least the number of PEs ({pes})\n");
            }
            converse::exit(2);
        }
        let first = me * n / pes + 1;
        let len = (me + 1) * n / pes + 1 - first;
        let block = Rc::new(RefCell::new(Block {
            first,
            u: vec![0.0; len + 2],
            sweep: 0,
            done: false,
            ghosts: HashMap::new(),
        }));
        let start_time = converse::wall_timer();

        // Handlers, registered in the same order on every PE. Later
        // handlers' indices are needed by earlier ones, so they are
        // shared through cells filled once all are registered.
        let ids: Rc<RefCell<Option<Handlers>>> = Rc::default();
        let ids_of = {
            let ids = ids.clone();
            move || ids.borrow().expect("handlers registered")
        };

        let b = block.clone();
        let ids_g = ids_of.clone();
        let ghost = converse::register_handler(move |msg: Message| {
            let w: Vec<u64> = words(&msg).collect();
            let (sweep, side, value) = (w[0], w[1] as usize, f64::from_bits(w[2]));
            b.borrow_mut().ghosts.entry(sweep).or_default()[side] = Some(value);
            try_sweep(&b, ids_g());
        });

        let b = block.clone();
        let ids_s = ids_of.clone();
        let sweep = converse::register_handler(move |msg: Message| {
            let k = words(&msg).next().unwrap();
            let h = ids_s();
            {
                let mut blk = b.borrow_mut();
                blk.sweep = k;
                blk.done = false;
                let last = blk.u.len() - 2;
                let (left, right) = (blk.u[1], blk.u[last]);
                // My left edge is the right ghost of PE me-1, and so on.
                if me > 0 {
                    let m = message(h.ghost, &[k, 1, left.to_bits()]);
                    converse::sync_send_and_free(me - 1, m);
                }
                if me + 1 < pes {
                    let m = message(h.ghost, &[k, 0, right.to_bits()]);
                    converse::sync_send_and_free(me + 1, m);
                }
            }
            try_sweep(&b, h);
        });

        let final_error = converse::register_handler(move |msg: Message| {
            let (sweeps, error): (u64, f64) = converse::decode_struct_result(&msg).unwrap();
            converse::cmi_printf!(
                "jacobi N={n} pes={pes} sweeps={sweeps} max_error={error:.1e} time={:.3}s\n",
                converse::wall_timer() - start_time
            );
            converse::exit(if error < 1e-4 { 0 } else { 1 });
        });

        let b = block.clone();
        let finish = converse::register_handler(move |msg: Message| {
            let sweeps = words(&msg).next().unwrap();
            let blk = b.borrow();
            let exact = |i: usize| i as f64 / (n + 1) as f64;
            let error = (1..blk.u.len() - 1)
                .map(|j| (blk.u[j] - exact(blk.first + j - 1)).abs())
                .fold(0.0, f64::max);
            converse::reduce_struct(
                (sweeps, error),
                |(s, e): (u64, f64), rest: Vec<(u64, f64)>| {
                    (s, rest.iter().map(|r| r.1).fold(e, f64::max))
                },
                final_error,
            );
        });

        let change = converse::register_handler(move |msg: Message| {
            let w: Vec<u64> = words(&msg).collect();
            let (k, delta) = (w[0], f64::from_bits(w[1]));
            if delta < TOLERANCE || k >= MAX_SWEEPS {
                converse::sync_broadcast_all_and_free(message(finish, &[k]));
            } else {
                converse::sync_broadcast_all_and_free(message(sweep, &[k + 1]));
            }
        });

        *ids.borrow_mut() = Some(Handlers { ghost, change });
        if me == 0 {
            converse::sync_broadcast_all_and_free(message(sweep, &[1]));
        }
    })
}

/// Does this PE's part of the current sweep once both ghost values are in,
/// and contributes its largest change to the sweep's max-reduction.
fn try_sweep(block: &Rc<RefCell<Block>>, h: Handlers) {
    let (me, pes) = (converse::my_pe(), converse::num_pes());
    let mut blk = block.borrow_mut();
    let k = blk.sweep;
    if k == 0 || blk.done {
        return;
    }
    let have = blk.ghosts.get(&k).copied().unwrap_or_default();
    let left = if me == 0 { Some(0.0) } else { have[0] };
    let right = if me + 1 == pes { Some(1.0) } else { have[1] };
    let (Some(left), Some(right)) = (left, right) else {
        return;
    };
    blk.ghosts.remove(&k);
    blk.done = true;
    let last = blk.u.len() - 1;
    blk.u[0] = left;
    blk.u[last] = right;
    let old = blk.u.clone();
    let mut delta: f64 = 0.0;
    for j in 1..last {
        let new = 0.5 * (old[j - 1] + old[j + 1]);
        delta = delta.max((new - old[j]).abs());
        blk.u[j] = new;
    }
    drop(blk);
    converse::reduce(
        message(h.change, &[k, delta.to_bits()]),
        |mut local, rest| {
            let mut max = f64::from_bits(words(&local).nth(1).unwrap());
            for r in &rest {
                max = max.max(f64::from_bits(words(r).nth(1).unwrap()));
            }
            local.payload_mut()[8..16].copy_from_slice(&max.to_bits().to_le_bytes());
            local
        },
    );
}
