//! Random numbers in a job (`converse::random`, the manual's Crn): every
//! PE's default stream differs from the others', repeats from run to run,
//! and `srand` restarts it; private streams made on a PE are those of
//! that PE.
use std::sync::Mutex;

use converse::random::{self, RandomStream};
use converse::{Converse, Message};

/// What one PE drew: its number, 16 numbers of its default stream, 16
/// after `srand(77)`, and the second of its private stream of seed 77.
type Drawn = (usize, Vec<i32>, Vec<i32>, u64);

/// What each PE drew.
static DRAWN: Mutex<Vec<Drawn>> = Mutex::new(Vec::new());

fn run_job() -> Vec<Drawn> {
    DRAWN.lock().unwrap().clear();
    let code = Converse::new()
        .args(["prog", "+p", "4"])
        .run(|_| {
            let done = converse::register_handler(|_m: Message| {
                if DRAWN.lock().unwrap().len() == converse::num_pes() {
                    converse::exit(0);
                }
            });
            let me = converse::my_pe();
            let default: Vec<i32> = (0..16).map(|_| random::rand()).collect();
            random::srand(77);
            let seeded: Vec<i32> = (0..16).map(|_| random::rand()).collect();
            // A private stream made here is this PE's.
            let mut mine = RandomStream::new(77, 0);
            let mut same = RandomStream::for_pe(me, 77, 0);
            assert_eq!(mine.next_u64(), same.next_u64());
            // srand(77) made the default stream RandomStream::new(77, 0).
            let mut again = RandomStream::for_pe(me, 77, 0);
            assert_eq!(seeded[0], again.next_int());
            DRAWN
                .lock()
                .unwrap()
                .push((me, default, seeded, mine.next_u64()));
            converse::sync_send_and_free(0, Message::new(done, 0));
        })
        .expect("the job starts");
    assert_eq!(code, 0);
    let mut drawn = DRAWN.lock().unwrap().clone();
    drawn.sort();
    drawn
}

#[test]
fn pes_draw_different_numbers_that_repeat_from_run_to_run() {
    let first = run_job();
    assert_eq!(first.len(), 4);
    for (i, a) in first.iter().enumerate() {
        for b in &first[i + 1..] {
            assert_ne!(a.1, b.1, "default streams of PEs {} and {}", a.0, b.0);
            assert_ne!(a.2, b.2, "seeded streams of PEs {} and {}", a.0, b.0);
        }
        assert_ne!(a.1, a.2, "srand changed PE {}'s stream", a.0);
    }
    // A second job on new PE threads draws the same numbers.
    assert_eq!(run_job(), first);
}

/// The first numbers of PE 0's default stream in a job of one PE on the
/// calling thread, after `before` ran on that PE.
fn first_draws_on_this_thread(before: fn()) -> Vec<i32> {
    // `init_returns`: this thread goes on as the job's PE 0.
    Converse::new()
        .args(["prog", "+p", "1"])
        .init_returns(|_| {})
        .expect("the job starts");
    before();
    let drawn = (0..8).map(|_| random::rand()).collect();
    assert_eq!(converse::finish(0), 0);
    drawn
}

#[test]
fn a_second_job_on_the_same_thread_starts_from_a_fresh_default_stream() {
    // PE 0 runs on this thread in both jobs: the first job's seeded stream
    // must end with its PE, whatever address the second job's PE gets.
    let seeded = first_draws_on_this_thread(|| random::srand(77));
    let fresh = first_draws_on_this_thread(|| {});
    let mut expected = RandomStream::for_pe(0, 0, 0);
    let expected: Vec<i32> = (0..8).map(|_| expected.next_int()).collect();
    assert_eq!(
        fresh, expected,
        "the second job's PE 0 got the first job's stream"
    );
    let mut after_srand = RandomStream::for_pe(0, 77, 0);
    assert_eq!(seeded[0], after_srand.next_int());
    // And a third, after one that drew from the default stream unseeded.
    assert_eq!(first_draws_on_this_thread(|| {}), expected);
}
