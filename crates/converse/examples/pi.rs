//! Monte Carlo π: every PE throws darts at the unit square; a typed
//! reduction adds up the hits, and its handler on PE 0 prints π.
//!
//! `cargo run --example pi -- +p 4 [darts per PE]`
use converse::random::RandomStream;

/// Every PE's part (PE 0 ends the job with code 1 if π came out wrong).
pub fn start(args: &[String]) {
    let darts: u64 = args
        .get(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let total = darts * converse::num_pes() as u64;
    let report = converse::handler(move |hits: u64| {
        let pi = 4.0 * hits as f64 / total as f64;
        converse::cmi_printf!("pi is about {pi:.3} from {total} darts\n");
        converse::exit(i32::from((pi - std::f64::consts::PI).abs() > 0.05));
    });
    let mut rng = RandomStream::new(7, 0);
    let mut dart = || (rng.next_f64(), rng.next_f64());
    let hits = (0..darts)
        .map(|_| dart())
        .filter(|(x, y)| x * x + y * y <= 1.0)
        .count();
    converse::reduction(hits as u64, |a, rest| a + rest.iter().sum::<u64>()).then(report);
}

fn main() -> std::process::ExitCode {
    converse::Converse::new().main(start)
}
