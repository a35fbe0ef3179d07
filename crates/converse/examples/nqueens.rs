//! N-Queens: counts the ways to place N queens on an N x N board so that no
//! two attack each other, spread over every PE.
//!
//! `cargo run --release --example nqueens -- [N] [+p PES]`
//! (N defaults to 12, which has 14200 solutions; PEs default to every core.)
//!
//! How it works: a *work* message is a partial board (queens placed in the
//! first `row` rows, as three bitmasks). A PE that handles one either expands
//! it, sending one child per legal column to the PEs round-robin, or, once
//! `PARALLEL_ROWS` rows are filled, counts the completions sequentially. A child arriving at a PE
//! is put in that PE's priority queue with integer priority `-row`, so deeper
//! (nearer to done) boards run first and the queues stay short.
//!
//! Termination uses credits, so it does not depend on the order in which
//! reports reach PE 0: the root board carries credit 2^120; a board with
//! credit `c` and `k` children gives each child `c / 2^m` (`2^m >= k`) and
//! keeps the rest. Every task reports (solutions found, credit kept) to PE 0,
//! which knows all work is done when the reported credit adds up to 2^120.
//! Credits stay exact: they are powers of two, and at most 4 levels of at
//! most 20 children use 20 of the 120 bits.
use std::cell::Cell;

use converse::{Converse, Cpv, Message, Queueing, cmi_printf};

/// Boards with queens in this many rows are solved sequentially; shallower
/// ones are expanded into messages. Four rows give thousands of tasks of tens
/// of microseconds each for N = 12..16: enough to balance every PE, coarse
/// enough that the runtime's per-message cost stays small.
const PARALLEL_ROWS: u32 = 4;

/// A partial board, as carried in a message payload.
#[derive(Clone, Copy)]
struct Board {
    n: u32,
    row: u32,
    cols: u32,
    diag_left: u32,
    diag_right: u32,
}

impl Board {
    fn encode(&self, credit: u128) -> [u8; 36] {
        let mut out = [0u8; 36];
        out[20..].copy_from_slice(&credit.to_le_bytes());
        for (i, v) in [self.n, self.row, self.cols, self.diag_left, self.diag_right]
            .into_iter()
            .enumerate()
        {
            out[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
        }
        out
    }

    fn decode(bytes: &[u8]) -> (Board, u128) {
        let f = |i: usize| u32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap());
        let credit = u128::from_le_bytes(bytes[20..36].try_into().unwrap());
        let board = Board {
            n: f(0),
            row: f(1),
            cols: f(2),
            diag_left: f(3),
            diag_right: f(4),
        };
        (board, credit)
    }

    /// Bitmask of the columns where a queen may go on the next row.
    fn free(&self) -> u32 {
        !(self.cols | self.diag_left | self.diag_right) & ((1 << self.n) - 1)
    }

    fn place(&self, bit: u32) -> Board {
        Board {
            n: self.n,
            row: self.row + 1,
            cols: self.cols | bit,
            diag_left: (self.diag_left | bit) << 1,
            diag_right: (self.diag_right | bit) >> 1,
        }
    }

    /// Completions of this board, counted sequentially.
    fn count(&self) -> u64 {
        if self.row == self.n {
            return 1;
        }
        let mut free = self.free();
        let mut total = 0;
        while free != 0 {
            let bit = free & free.wrapping_neg();
            free &= free - 1;
            total += self.place(bit).count();
        }
        total
    }
}

/// Handler indices, the same on every PE.
#[derive(Clone, Copy)]
struct Handlers {
    arrive: usize,
    work: usize,
    report: usize,
}
static HANDLERS: Cpv<Cell<Option<Handlers>>> = Cpv::new();
/// Where this PE sends its next child (round-robin).
static NEXT_PE: Cpv<Cell<usize>> = Cpv::new();
/// Credit of the root board: all the work.
const TOTAL_CREDIT: u128 = 1 << 120;
/// PE 0 only: credit reported so far, and solutions so far.
static CREDIT: Cpv<Cell<u128>> = Cpv::new();
static SOLUTIONS: Cpv<Cell<u64>> = Cpv::new();

fn handlers() -> Handlers {
    HANDLERS
        .with(|h| h.get())
        .expect("handlers registered in the start function")
}

fn send_board(board: &Board, credit: u128) {
    let pe = NEXT_PE.with(|c| {
        let pe = c.get();
        c.set((pe + 1) % converse::num_pes());
        pe
    });
    converse::sync_send_and_free(
        pe,
        Message::from_payload(handlers().arrive, &board.encode(credit)),
    );
}

/// A board arrived: queue it by depth (deeper first).
fn on_arrive(mut msg: Message) {
    let row = Board::decode(msg.payload()).0.row;
    msg.set_handler(handlers().work);
    converse::enqueue_general(msg, Queueing::IFifo(-(row as i32)));
}

/// Expand or solve a board, then report to PE 0.
fn on_work(msg: Message) {
    let (board, credit) = Board::decode(msg.payload());
    let (found, kept) = if board.row >= PARALLEL_ROWS.min(board.n) {
        (board.count(), credit)
    } else {
        let free = board.free();
        let children = free.count_ones();
        let share = credit >> children.next_power_of_two().trailing_zeros();
        let mut rest = free;
        while rest != 0 {
            let bit = rest & rest.wrapping_neg();
            rest &= rest - 1;
            send_board(&board.place(bit), share);
        }
        (0, credit - share * children as u128)
    };
    let mut report = Message::new(handlers().report, 24);
    report.payload_mut()[..8].copy_from_slice(&found.to_le_bytes());
    report.payload_mut()[8..].copy_from_slice(&kept.to_le_bytes());
    converse::sync_send_and_free(0, report);
}

/// PE 0: account for a finished task; end the job when all credit is back.
fn on_report(msg: Message) {
    let p = msg.payload();
    let found = u64::from_le_bytes(p[..8].try_into().unwrap());
    let kept = u128::from_le_bytes(p[8..24].try_into().unwrap());
    SOLUTIONS.with(|s| s.set(s.get() + found));
    let reported = CREDIT.with(|c| {
        c.set(c.get() + kept);
        c.get()
    });
    if reported == TOTAL_CREDIT {
        let n = N.with(|n| n.get());
        cmi_printf!(
            "nqueens N={} solutions={} pes={} time={:.3}s\n",
            n,
            SOLUTIONS.with(|s| s.get()),
            converse::num_pes(),
            converse::wall_timer()
        );
        converse::exit(0);
    }
}

static N: Cpv<Cell<u32>> = Cpv::new();

fn main() -> std::process::ExitCode {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    Converse::new().default_pes(cores).main(|args| {
        let n: u32 = match args.get(1).map(|a| a.parse()) {
            None => 12,
            Some(Ok(n)) if (1..=20).contains(&n) => n,
            Some(_) => {
                converse::cmi_error!("usage: nqueens [N] with N from 1 to 20\n");
                converse::exit(2);
            }
        };
        N.initialize(Cell::new(n));
        HANDLERS.initialize(Cell::new(Some(Handlers {
            arrive: converse::register_handler(on_arrive),
            work: converse::register_handler(on_work),
            report: converse::register_handler(on_report),
        })));
        NEXT_PE.initialize(Cell::new(converse::my_pe()));
        CREDIT.initialize(Cell::new(0));
        SOLUTIONS.initialize(Cell::new(0));
        if converse::my_pe() == 0 {
            send_board(
                &Board {
                    n,
                    row: 0,
                    cols: 0,
                    diag_left: 0,
                    diag_right: 0,
                },
                TOTAL_CREDIT,
            );
        }
    })
}
