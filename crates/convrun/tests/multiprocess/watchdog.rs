//! `++watchdog S` and `+randomized_msgq` in jobs of several processes:
//! a reduction a PE of another process never joins is reported by the
//! process that waits for it, naming that PE, and the job aborts; a
//! randomized job gives the same answer and says its seed once.
use converse::Message;

use super::Case;
use super::common::job;
use super::scenarios::output;

/// `watchdog_reduction`: every PE but the last joins reduction #0.
fn watchdog_reduction() -> i32 {
    converse::Converse::new()
        .args(std::env::args())
        .run(|_| {
            let done = converse::register_handler(|_| converse::exit(0));
            if converse::my_pe() != converse::num_pes() - 1 {
                converse::reduce(Message::from_payload(done, &[1]), |mine, _| mine);
            }
        })
        .expect("flags")
}

/// `order_sum`: every PE sends PE 0 ten numbered messages; PE 0 checks
/// each sender's come in order and exits with the count.
fn order_sum() -> i32 {
    converse::Converse::new()
        .args(std::env::args())
        .run(|_| {
            let next: std::rc::Rc<std::cell::RefCell<Vec<u64>>> =
                std::rc::Rc::new(std::cell::RefCell::new(vec![0; converse::num_pes()]));
            let seen = std::rc::Rc::new(std::cell::Cell::new(0usize));
            let h = converse::register_handler(move |msg: Message| {
                let p = msg.payload();
                let src = u64::from_le_bytes(p[..8].try_into().unwrap()) as usize;
                let k = u64::from_le_bytes(p[8..16].try_into().unwrap());
                let mut next = next.borrow_mut();
                if next[src] != k {
                    converse::abort(&format!("PE {src}'s message {k} came before {}", next[src]));
                }
                next[src] += 1;
                seen.set(seen.get() + 1);
                if seen.get() == 10 * converse::num_pes() {
                    println!("order_sum: {} in order", seen.get());
                    converse::exit(0);
                }
            });
            let me = converse::my_pe() as u64;
            for k in 0..10u64 {
                let mut payload = me.to_le_bytes().to_vec();
                payload.extend_from_slice(&k.to_le_bytes());
                converse::sync_send_and_free(0, Message::from_payload(h, &payload));
            }
        })
        .expect("flags")
}

pub fn child(name: &str, _args: &[String]) -> Option<i32> {
    Some(match name {
        "watchdog_reduction" => watchdog_reduction(),
        "order_sum" => order_sum(),
        _ => return None,
    })
}

fn a_pe_of_another_process_that_never_contributed_is_named() {
    let f = job("shm", 4, 2, "watchdog_reduction", &["++watchdog", "3"]);
    assert_eq!(f.code, Some(1), "{}", output(&f));
    // Process 0 holds the root, which waits for PE 3 (in process 1).
    assert!(
        f.stderr.contains(
            "converse: watchdog: PE 3 (another process) has not contributed to reduction #0"
        ),
        "{}",
        output(&f)
    );
    for pe in [0, 1] {
        assert!(
            f.stderr.contains(&format!("converse: watchdog: PE {pe}: ")),
            "{}",
            output(&f)
        );
    }
    assert!(f.stderr.contains("aborting: watchdog: "), "{}", output(&f));
}

fn randomized_jobs_keep_each_senders_order() {
    for (netmod, pes, ppn) in [("shm", 4, 2), ("tcp", 3, 1)] {
        let f = job(netmod, pes, ppn, "order_sum", &["+randomized_msgq", "99"]);
        f.expect_code(0);
        f.expect_line(&format!("order_sum: {} in order", 10 * pes));
        assert_eq!(
            f.stderr.matches("+randomized_msgq: seed 99:").count(),
            1,
            "{}",
            output(&f)
        );
    }
}

pub fn cases() -> Vec<Case> {
    vec![
        (
            "watchdog_names_a_pe_of_another_process",
            a_pe_of_another_process_that_never_contributed_is_named,
        ),
        (
            "randomized_msgq_across_processes",
            randomized_jobs_keep_each_senders_order,
        ),
    ]
}
