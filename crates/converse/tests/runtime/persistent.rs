//! Persistent channels in an in-process job (`converse::cmi::persistent`):
//! the handles behave as the manual says, and sends through them give the
//! same results as ordinary sends (within a process a channel saves
//! nothing, so the sends are ordinary ones). The multi-process case, where
//! messages land in the receivers' buffers, is `core_persistent` in
//! `convrun`'s multi-process tests.
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use converse::cmi::persistent::{self, PersistentReq};
use converse::{Converse, Message};

/// Messages PE 1 received: (sequence number, payload length).
static GOT: Mutex<Vec<(u64, usize)>> = Mutex::new(Vec::new());
static DONE: AtomicUsize = AtomicUsize::new(0);

#[test]
fn sends_through_handles_arrive_in_order_as_ordinary_sends_do() {
    GOT.lock().unwrap().clear();
    let code = Converse::new()
        .args(["prog", "+p", "2"])
        .run(|_| {
            let data = converse::register_handler(|m: Message| {
                let seq = u64::from_le_bytes(m.payload()[..8].try_into().unwrap());
                assert!(m.payload()[8..].iter().all(|&b| b == seq as u8));
                GOT.lock().unwrap().push((seq, m.payload_len()));
                if seq == 29 {
                    converse::exit(0);
                }
            });
            if converse::my_pe() != 0 {
                return;
            }
            // In-process: never ready (nothing to save), but usable.
            let made = persistent::create_persistent(1, 128);
            assert_eq!((made.dest_pe(), made.max_bytes()), (1, 128));
            assert!(!made.is_ready() && !made.is_destroyed());
            let req = persistent::create_receiver_persistent(64);
            assert_eq!(req.pe, 0);
            assert_ne!(req.channel, 0);
            assert_eq!(PersistentReq::from_bytes(&req.to_bytes()), Some(req));
            assert_eq!(PersistentReq::from_bytes(&req.to_bytes()[1..]), None);
            let registered = persistent::register_receive_persistent(req);
            assert_eq!(registered.dest_pe(), 0);
            assert!(!registered.is_ready());
            persistent::use_persistent(std::slice::from_ref(&made));
            for seq in 0..30u64 {
                // Some over the limit, some under.
                let len = if seq % 3 == 0 { 300 } else { 20 };
                let mut payload = seq.to_le_bytes().to_vec();
                payload.resize(8 + len, seq as u8);
                let msg = Message::from_payload(data, &payload);
                if seq % 2 == 0 {
                    converse::sync_send(1, &msg);
                } else {
                    converse::sync_send_and_free(1, msg);
                }
                if seq == 15 {
                    persistent::use_persistent(&[]);
                }
            }
            made.destroy();
            made.destroy();
            assert!(made.is_destroyed() && !made.is_ready());
            persistent::destroy_all_persistent();
            assert!(registered.is_destroyed());
            DONE.fetch_add(1, Ordering::SeqCst);
        })
        .expect("the job starts");
    assert_eq!(code, 0);
    let got = GOT.lock().unwrap().clone();
    let want: Vec<(u64, usize)> = (0..30u64)
        .map(|s| (s, 8 + if s % 3 == 0 { 300 } else { 20 }))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn a_destroyed_handle_cannot_be_used() {
    let code = Converse::new()
        .args(["prog", "+p", "1"])
        .run(|_| {
            let h = persistent::create_persistent(0, 100);
            h.destroy();
            let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                persistent::use_persistent(std::slice::from_ref(&h));
            }));
            let why = refused.expect_err("refused");
            let why = why.downcast_ref::<String>().cloned().unwrap_or_default();
            assert!(why.contains("was destroyed"), "{why}");
            converse::exit(0);
        })
        .expect("the job starts");
    assert_eq!(code, 0);
}
