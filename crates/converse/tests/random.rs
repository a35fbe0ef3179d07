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
