//! Broadcast a question, reduce the answers: a tour of the collectives.
//!
//! `cargo run --release --example bcast_reduce -- [N] [+p P] [++ppn M]`
//!
//! 1. PE 0 broadcasts N to every PE (`sync_broadcast_all`).
//! 2. Each PE sums the squares of its share of `1..=N` and contributes a
//!    typed value — (sum, largest term, which PEs took part) — to a
//!    struct-form reduction (`reduce_struct`); PE 0 checks the sum against
//!    the closed form.
//! 3. PE 0 then multicasts to the group of even PEs (`establish_group`,
//!    `sync_multicast`), whose members count themselves with a message-form
//!    group reduction (`group_reduce`) by a global reduction ID.
//! 4. Finally PE 0 waits for quiescence (`start_quiescence_detection`) and
//!    ends the job.
use converse::{Converse, Message};
use serde::{Deserialize, Serialize};

/// What every PE contributes to the first reduction.
#[derive(Serialize, Deserialize)]
struct Answer {
    sum_of_squares: u128,
    largest_term: u128,
    pes: Vec<usize>,
}

fn merge(mut local: Answer, children: Vec<Answer>) -> Answer {
    for c in children {
        local.sum_of_squares += c.sum_of_squares;
        local.largest_term = local.largest_term.max(c.largest_term);
        local.pes.extend(c.pes);
    }
    local
}

fn u64_at(msg: &Message, at: usize) -> u64 {
    u64::from_le_bytes(msg.payload()[at..at + 8].try_into().unwrap())
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    Converse::new().args(args).main(|args| {
        let n: u64 = args
            .get(1)
            .and_then(|a| a.parse().ok())
            .unwrap_or(1_000_000);
        let (me, pes) = (converse::my_pe(), converse::num_pes());
        // Every PE sets the ID aside in the same order: the same ID
        // everywhere.
        let evens_id = converse::global_reduction_id();

        let evens_counted = converse::register_handler(move |msg: Message| {
            let count = u64_at(&msg, 0);
            converse::cmi_printf!("group of even PEs: {count} members answered the multicast\n");
            assert_eq!(count as usize, pes.div_ceil(2));
            converse::start_quiescence_detection(|| converse::exit(0));
        });
        let to_evens = converse::register_handler(move |_msg: Message| {
            let one = Message::from_payload(evens_counted, &1u64.to_le_bytes());
            let group = converse::Group::from_id(u64_at(&_msg, 0) as u32);
            converse::group_reduce(
                group,
                one,
                |mut local, rest| {
                    let total = u64_at(&local, 0) + rest.iter().map(|m| u64_at(m, 0)).sum::<u64>();
                    local.payload_mut().copy_from_slice(&total.to_le_bytes());
                    local
                },
                evens_id,
            );
        });
        let answered = converse::register_handler(move |msg: Message| {
            let a: Answer = converse::decode_struct_result(&msg).unwrap();
            let n = n as u128;
            let expected = n * (n + 1) * (2 * n + 1) / 6;
            let mut who = a.pes.clone();
            who.sort_unstable();
            converse::cmi_printf!(
                "sum of squares 1..={n} = {} (expected {expected}), largest term {}, from {} PEs\n",
                a.sum_of_squares,
                a.largest_term,
                who.len()
            );
            assert_eq!(a.sum_of_squares, expected);
            assert_eq!(who, (0..pes).collect::<Vec<_>>());
            // Made where it is used (PE 0), not on every PE: a list of
            // P/2 PEs on each of P PEs would grow as P².
            let evens: Vec<usize> = (0..pes).step_by(2).collect();
            let group = converse::establish_group(&evens);
            let msg = Message::from_payload(to_evens, &(group.id() as u64).to_le_bytes());
            converse::sync_multicast_and_free(group, msg);
        });
        let question = converse::register_handler(move |msg: Message| {
            let n = u64_at(&msg, 0);
            let (lo, hi) = (
                me as u64 * n / pes as u64 + 1,
                (me as u64 + 1) * n / pes as u64,
            );
            let sum: u128 = (lo..=hi).map(|i| (i as u128) * (i as u128)).sum();
            let largest = if hi >= lo {
                (hi as u128) * (hi as u128)
            } else {
                0
            };
            let answer = Answer {
                sum_of_squares: sum,
                largest_term: largest,
                pes: vec![me],
            };
            converse::reduce_struct(answer, merge, answered);
        });
        if me == 0 {
            converse::sync_broadcast_all_and_free(Message::from_payload(
                question,
                &n.to_le_bytes(),
            ));
        }
    })
}
