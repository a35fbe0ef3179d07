mod common;
use common::*;
use converse::Message;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

#[test]
fn bcast_and_reduce_smoke() {
    for (p, ppn) in [(1, 1), (2, 1), (4, 2), (9, 3), (8, 1), (7, 7)] {
        let hits = Arc::new(Mutex::new(vec![0u32; p]));
        let h2 = hits.clone();
        let code = within(20, move || run(p, ppn, move |_| {
            let hits = h2.clone();
            let result = converse::register_handler(move |m: Message| {
                let sum = read_u64(&m, 0);
                let n = converse::num_pes() as u64;
                assert_eq!(sum, n * (n - 1) / 2);
                converse::exit(0);
            });
            let bc = converse::register_handler(move |m: Message| {
                hits.lock().unwrap()[converse::my_pe()] += 1;
                assert_eq!(read_u64(&m, 0), 77);
                let mine = msg_u64(result, &[converse::my_pe() as u64]);
                converse::reduce(mine, |mut local, rest| {
                    let mut s = read_u64(&local, 0);
                    for r in &rest { s += read_u64(r, 0); }
                    local.payload_mut()[..8].copy_from_slice(&s.to_le_bytes());
                    local
                });
            });
            if converse::my_pe() == 0 {
                converse::sync_broadcast_all(&msg_u64(bc, &[77]));
            }
        }));
        assert_eq!(code, 0);
        assert!(hits.lock().unwrap().iter().all(|&h| h == 1), "p={p} ppn={ppn} {:?}", hits.lock().unwrap());
    }
}

#[test]
fn qd_smoke() {
    for (p, ppn) in [(1, 1), (3, 1), (6, 2)] {
        let count = Arc::new(AtomicUsize::new(0));
        let c2 = count.clone();
        let code = within(20, move || run(p, ppn, move |_| {
            let c = c2.clone();
            let h = converse::register_handler(move |m: Message| {
                c.fetch_add(1, Ordering::SeqCst);
                let left = read_u64(&m, 0);
                if left > 0 {
                    let next = (converse::my_pe() + 1) % converse::num_pes();
                    converse::sync_send_and_free(next, msg_u64(m.handler(), &[left - 1]));
                }
            });
            if converse::my_pe() == 0 {
                converse::sync_broadcast_all(&msg_u64(h, &[50]));
                let c = c2.clone();
                converse::start_quiescence_detection(move || {
                    let n = converse::num_pes();
                    assert_eq!(c.load(Ordering::SeqCst), n * 51);
                    converse::exit(0);
                });
            }
        }));
        assert_eq!(code, 0);
    }
}
