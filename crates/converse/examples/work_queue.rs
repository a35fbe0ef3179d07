//! A prioritized work queue: PE 0 deals out jobs of mixed urgency; each PE
//! queues what it gets by urgency (smallest first) and reports to PE 0.
//!
//! `cargo run --example work_queue -- +p 4 [jobs]`
use std::cell::Cell;

/// Every PE's part (PE 0 ends the job once every job has reported).
pub fn start(args: &[String]) {
    let jobs: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(20);
    let (left, total) = (Cell::new(jobs), Cell::new(0));
    let report = converse::handler(move |(id, pe, squares): (u64, usize, u64)| {
        converse::cmi_printf!("job {id} ran on PE {pe}: {squares}\n");
        left.set(left.get() - 1);
        total.set(total.get() + squares);
        if left.get() == 0 {
            converse::cmi_printf!("all {jobs} jobs done, total {}\n", total.get());
            converse::exit(0);
        }
    });
    let run = converse::handler(move |id: u64| {
        report.send(0, &(id, converse::my_pe(), (0..=id).map(|k| k * k).sum()));
    });
    let take = converse::handler(move |(id, urgency): (u64, i32)| {
        run.enqueue_with(&id, converse::Queueing::IFifo(urgency));
    });
    if converse::my_pe() == 0 {
        for id in 0..jobs {
            take.send(
                id as usize % converse::num_pes(),
                &(id, (id * 7 % 5) as i32 - 2),
            );
        }
    }
}

fn main() -> std::process::ExitCode {
    converse::Converse::new().main(start)
}
