//! A job that serves its progress over CCS: every PE counts the primes in
//! its share of 2..N, one slice per scheduler message (so requests are
//! answered between slices), and answers `progress` with how many numbers
//! it has checked and how many primes it found (two big-endian i32; a
//! broadcast request gets them summed over the PEs). `stop` ends the job.
//!
//! ```sh
//! cargo run --release --example ccs_progress -- +p 4 ++server ++server-port 12345 &
//! cargo run --release -p converse-ccs --bin ccs -- 127.0.0.1:12345 progress --all | od -An -tx1
//! python3 python/converse_ccs.py 127.0.0.1:12345 progress --all | od -An -tx1
//! python3 python/converse_ccs.py 127.0.0.1:12345 stop
//! ```
//!
//! An optional first argument sets N (default 20 000 000). With no server
//! flag the job counts, prints `primes=<count>` and exits.
use std::cell::Cell;

use converse::{Converse, Cpv, Message, ccs, cmi_printf, my_pe, num_pes};

/// Numbers checked per scheduler message.
const SLICE: u64 = 20_000;

struct Progress {
    first: Cell<u64>,
    next: Cell<u64>,
    end: Cell<u64>,
    primes: Cell<u64>,
    step: Cell<usize>,
    /// Handler of a PE's final count, on PE 0 (jobs without a server).
    report: Cell<usize>,
    /// On PE 0: the counts reported so far, and how many PEs reported.
    total: Cell<(u64, usize)>,
}

static PROGRESS: Cpv<Progress> = Cpv::new();

fn is_prime(n: u64) -> bool {
    n >= 2
        && (2..)
            .take_while(|d| d * d <= n)
            .all(|d| !n.is_multiple_of(d))
}

/// Checks one slice, then sends itself the next (so CCS requests, which
/// arrive as messages, get their turn).
fn step(_m: Message) {
    PROGRESS.with(|p| {
        let (from, end) = (p.next.get(), p.end.get());
        let to = (from + SLICE).min(end);
        let found = (from..to).filter(|&n| is_prime(n)).count() as u64;
        p.primes.set(p.primes.get() + found);
        p.next.set(to);
        if to < end {
            converse::sync_send_and_free(my_pe(), Message::new(p.step.get(), 0));
        } else if !serving() {
            // Without a server nobody asks: report to PE 0, which ends the job.
            let m = Message::from_payload(p.report.get(), &p.primes.get().to_le_bytes());
            converse::sync_send_and_free(0, m);
        }
    });
}

/// On PE 0, without a server: adds a PE's count; the last one ends the job.
fn report(m: Message) {
    PROGRESS.with(|p| {
        let primes = u64::from_le_bytes(m.payload()[..8].try_into().expect("8 bytes"));
        let (sum, count) = p.total.get();
        p.total.set((sum + primes, count + 1));
        if count + 1 == num_pes() {
            cmi_printf!("primes={}\n", sum + primes);
            converse::exit(0);
        }
    });
}

fn serving() -> bool {
    std::env::args().any(|a| a.starts_with("++server"))
}

fn main() -> std::process::ExitCode {
    Converse::new().main(|args| {
        let n: u64 = args
            .get(1)
            .and_then(|a| a.parse().ok())
            .unwrap_or(20_000_000);
        let (pes, me) = (num_pes() as u64, my_pe() as u64);
        let share = n.div_ceil(pes);
        let step_handler = converse::register_handler(step);
        let report_handler = converse::register_handler(report);
        let first = (me * share).max(2);
        PROGRESS.initialize(Progress {
            first: Cell::new(first),
            next: Cell::new(first),
            end: Cell::new(((me + 1) * share).min(n).max(first)),
            primes: Cell::new(0),
            step: Cell::new(step_handler),
            report: Cell::new(report_handler),
            total: Cell::new((0, 0)),
        });
        ccs::register_handler("progress", |_m: Message| {
            PROGRESS.with(|p| {
                let checked = (p.next.get() - p.first.get()) as i32;
                let mut reply = checked.to_be_bytes().to_vec();
                reply.extend_from_slice(&(p.primes.get() as i32).to_be_bytes());
                ccs::send_reply(&reply);
            })
        });
        ccs::set_merge_fn("progress", ccs::merge::sum_int());
        ccs::register_handler("stop", |_m: Message| {
            ccs::send_reply(b"stopping");
            converse::exit(0);
        });
        converse::sync_send_and_free(my_pe(), Message::new(step_handler, 0));
        if !serving() && my_pe() == 0 {
            cmi_printf!("ccs_progress: no ++server: counting only\n");
        }
    })
}
