//! Ping-pong between PE 0 and PE 1 with a message of a chosen size; prints
//! the round-trip time. (The benchmark `benches/pingpong.rs` measures all
//! sizes against a raw baseline.)
//!
//! `cargo run --release --example pingpong -- [bytes] [round-trips]`
use std::cell::Cell;

use converse::{Converse, Cpv, Message, cmi_printf};

/// Round trips left, on PE 0.
static LEFT: Cpv<Cell<u64>> = Cpv::new();

fn main() -> std::process::ExitCode {
    Converse::new().default_pes(2).main(|args| {
        if converse::num_pes() < 2 {
            converse::abort("pingpong needs at least 2 PEs (+p 2)");
        }
        let bytes: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(8);
        let trips: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(100_000);
        LEFT.initialize(Cell::new(trips));
        let ball = converse::register_handler(move |msg: Message| {
            if converse::my_pe() == 1 {
                return converse::sync_send_and_free(0, msg);
            }
            let left = LEFT.with(|l| {
                l.set(l.get() - 1);
                l.get()
            });
            if left == 0 {
                let t = converse::wall_timer();
                cmi_printf!(
                    "pingpong: {trips} round trips of {bytes} bytes: {:.3} us each\n",
                    t / trips as f64 * 1e6
                );
                converse::exit(0);
            }
            converse::sync_send_and_free(1, msg);
        });
        if converse::my_pe() == 0 {
            converse::sync_send_and_free(1, Message::new(ball, bytes));
        }
    })
}
