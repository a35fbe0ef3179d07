//! `PeHandle`: a thread that is no PE gives a PE messages, which its
//! handler runs in order; quiescence detection does not wait for them; a
//! handle outliving its job drops what it is given.
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use converse::{Converse, Message, PeHandle};

#[test]
fn any_thread_posts_to_a_pe() {
    let kept: Arc<Mutex<Option<PeHandle>>> = Arc::default();
    let keep = Arc::clone(&kept);
    let code = Converse::new()
        .args(["prog", "+p", "2"])
        .run(move |_| {
            let got = Rc::new(RefCell::new(Vec::new()));
            let g = Rc::clone(&got);
            let handler = converse::register_handler(move |m: Message| {
                assert_eq!(converse::my_pe(), 1);
                let n = u32::from_le_bytes(m.payload().try_into().unwrap());
                g.borrow_mut().push(n);
                if n == 99 {
                    assert_eq!(*g.borrow(), (0..100).collect::<Vec<u32>>());
                    converse::exit(0);
                }
            });
            if converse::my_pe() != 1 {
                return;
            }
            let me = PeHandle::current();
            assert_eq!(me.pe(), 1);
            assert!(me.is_current());
            *keep.lock().unwrap() = Some(me.clone());
            std::thread::spawn(move || {
                assert!(!me.is_current());
                for n in 0..100u32 {
                    assert!(me.post(Message::from_payload(handler, &n.to_le_bytes())));
                }
            });
        })
        .expect("the job starts");
    assert_eq!(code, 0);
    // The job is over: the handle takes nothing more.
    let handle = kept.lock().unwrap().take().expect("the handle");
    assert!(!handle.post(Message::new(0, 0)));
}
