//! A token travels around a ring of PEs; PE 0 reports the time per hop.
//!
//! `cargo run --release --example ring -- +p 4 [laps]`
use std::cell::Cell;

use converse::{Converse, Cpv, Message, cmi_printf};

/// Laps left, on PE 0.
static LAPS_LEFT: Cpv<Cell<u64>> = Cpv::new();

fn main() -> std::process::ExitCode {
    Converse::new().default_pes(4).main(|args| {
        let laps: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(10_000);
        LAPS_LEFT.initialize(Cell::new(laps));
        let token = converse::register_handler(move |msg: Message| {
            let (me, n) = (converse::my_pe(), converse::num_pes());
            if me == 0 {
                let left = LAPS_LEFT.with(|l| {
                    l.set(l.get() - 1);
                    l.get()
                });
                if left == 0 {
                    let t = converse::wall_timer();
                    let hops = laps * n as u64;
                    cmi_printf!(
                        "ring: {hops} hops over {n} PEs in {t:.3}s ({:.3} us per hop)\n",
                        t / hops as f64 * 1e6
                    );
                    converse::exit(0);
                }
            }
            converse::sync_send_and_free((me + 1) % n, msg);
        });
        if converse::my_pe() == 0 {
            let next = 1 % converse::num_pes();
            converse::sync_send_and_free(next, Message::new(token, 8));
        }
    })
}
