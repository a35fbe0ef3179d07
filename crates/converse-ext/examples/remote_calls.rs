//! Threads calling functions on other PEs and waiting for the answers: an
//! `#[invokable]` that returns a value gives its caller a typed future.
//!
//! `cargo run --example remote_calls -- +p 4`
use converse_ext::cpm::{self, invokable};

/// How many Collatz steps take `n` to 1, and the PE that counted them.
#[invokable]
fn collatz_steps(mut n: u64) -> (usize, u32) {
    let mut steps = 0;
    while n != 1 {
        n = if n.is_multiple_of(2) {
            n / 2
        } else {
            3 * n + 1
        };
        steps += 1;
    }
    (converse::my_pe(), steps)
}

/// PE 0's thread asks every PE in turn, then waits for each answer.
pub fn start(_: &[String]) {
    let ask = || {
        let on = |k: u64| cpm::send(k as usize % converse::num_pes());
        let asked: Vec<_> = (1..=8)
            .map(|k| (27 * k, Cpm_collatz_steps(on(k), 27 * k)))
            .collect();
        for (n, answer) in asked {
            let (pe, steps) = answer.wait();
            converse::cmi_printf!("{n} takes {steps} steps (counted on PE {pe})\n");
        }
        converse::exit(0);
    };
    if converse::my_pe() == 0 {
        converse::Thread::create(ask, 0).awaken();
    }
}

fn main() -> std::process::ExitCode {
    converse::Converse::new().main(start)
}
