//! Hello from every PE, then PE 0 ends the job once all have reported.
//!
//! `cargo run --example hello -- +p 4`
use std::cell::Cell;

use converse::{Converse, Cpv, Message, cmi_printf};

/// Reports counted on PE 0.
static REPORTS: Cpv<Cell<usize>> = Cpv::new();

fn main() -> std::process::ExitCode {
    Converse::new().main(|_args| {
        REPORTS.initialize(Cell::new(0));
        let report = converse::register_handler(|_msg: Message| {
            let n = REPORTS.with(|r| {
                r.set(r.get() + 1);
                r.get()
            });
            if n == converse::num_pes() {
                cmi_printf!("all {n} PEs said hello\n");
                converse::exit(0);
            }
        });
        cmi_printf!(
            "hello from PE {} of {} (node {}, rank {})\n",
            converse::my_pe(),
            converse::num_pes(),
            converse::my_node(),
            converse::my_rank()
        );
        converse::sync_send_and_free(0, Message::new(report, 0));
    })
}
