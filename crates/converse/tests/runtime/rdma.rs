//! One-sided communication within one process (`converse::cmi::rdma`): the
//! copies happen at once, handles turn complete (`wait_test`), callbacks
//! run once as messages on the initiating PE, memory registered with
//! `register_memory` works as a `DmaBuffer` does, and whatever is not
//! registered is refused. (Between processes: the `core_rdma` case of
//! `convrun`'s multi-process tests.)
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Mutex;

use converse::cmi::rdma::{self, DmaBuffer, GlobalPtr};
use converse::{Converse, Message};

/// Where PEs 1 and 2 keep their memory: (PE, address, length).
static WHERE: Mutex<Vec<(usize, u64, usize)>> = Mutex::new(Vec::new());

thread_local! {
    static BUF: RefCell<Option<DmaBuffer>> = const { RefCell::new(None) };
}

#[test]
fn puts_and_gets_within_one_process() {
    WHERE.lock().unwrap().clear();
    let code = Converse::new()
        .args(["prog", "+p", "3"])
        .run(|_| {
            let ready = converse::register_handler(|_m: Message| {});
            let me = converse::my_pe();
            if me == 1 {
                let buf = rdma::dma_alloc(1 << 20);
                WHERE.lock().unwrap().push((1, buf.addr(), buf.len()));
                BUF.with(|b| *b.borrow_mut() = Some(buf));
                converse::sync_send_and_free(0, Message::new(ready, 0));
            } else if me == 2 {
                // Memory of the program's own, registered by hand (the
                // C-style way); never freed: the job may touch it to the end.
                let mem: &'static mut [u8] = Box::leak(vec![0u8; 4096].into_boxed_slice());
                // SAFETY: leaked, so valid for ever; no reference to it is
                // used again.
                unsafe { rdma::register_memory(mem.as_mut_ptr(), mem.len()) }.unwrap();
                WHERE.lock().unwrap().push((2, mem.as_ptr() as u64, 4096));
                converse::sync_send_and_free(0, Message::new(ready, 0));
            } else {
                for _ in 0..2 {
                    converse::deliver_specific_msg(ready);
                }
                let targets = WHERE.lock().unwrap().clone();
                for (pe, addr, len) in targets {
                    let data: Vec<u8> = (0..len).map(|i| (i * 13 + pe) as u8).collect();
                    let h = rdma::put(pe, &data, addr);
                    assert!(h.wait_test(), "in-process puts copy at once");
                    h.wait().unwrap();
                    let h = rdma::get(pe, addr + 1, len - 1);
                    assert!(h.wait_test());
                    assert_eq!(h.wait().unwrap(), data[1..]);
                    // Callbacks run later, once each, as messages here.
                    let ran = Rc::new(Cell::new(0));
                    let r = ran.clone();
                    rdma::put_cb(pe, b"xyz", addr, move |res| {
                        res.unwrap();
                        assert_eq!(converse::my_pe(), 0);
                        r.set(r.get() + 1);
                    });
                    let r = ran.clone();
                    rdma::get_cb(pe, addr, 3, move |res| {
                        assert_eq!(res.unwrap(), b"xyz");
                        r.set(r.get() + 10);
                    });
                    assert_eq!(ran.get(), 0, "not before they run as messages");
                    while ran.get() < 11 {
                        converse::schedule_count(1);
                    }
                    assert_eq!(ran.get(), 11);
                    // From and into this PE's registered memory.
                    let mine = std::sync::Arc::new(rdma::dma_alloc(len));
                    mine.write(0, &data);
                    rdma::put_from(pe, &mine, 1, len - 1, addr).wait().unwrap();
                    let back = std::sync::Arc::new(rdma::dma_alloc(len + 5));
                    rdma::get_into(pe, addr, &back, 5, len - 1).wait().unwrap();
                    let mut got = vec![0; len - 1];
                    back.read(5, &mut got);
                    assert_eq!(got, data[1..]);
                    // A global pointer to the same memory: same process,
                    // so it dereferences here too.
                    let g = GlobalPtr { pe, addr, len };
                    let g = GlobalPtr::from_bytes(&g.to_bytes()).unwrap();
                    assert_eq!(g.dref(), Some(addr as usize as *mut u8));
                    g.put(b"global").wait().unwrap();
                    assert_eq!(g.sync_get(6).unwrap(), b"global");
                    // Past the end; never registered.
                    let e = rdma::get(pe, addr + len as u64, 1).wait().unwrap_err();
                    assert_eq!(e.target_pe, pe);
                    assert!(e.why.contains("a get of 1 bytes at"), "{e}");
                    assert!(e.to_string().contains("no range registered in PE"), "{e}");
                    let e = rdma::put(pe, &[0; 2], addr + len as u64 - 1)
                        .wait()
                        .unwrap_err();
                    assert!(e.why.contains("a put of 2 bytes"), "{e}");
                    let ran = Rc::new(Cell::new(false));
                    let r = ran.clone();
                    rdma::get_cb(pe, 16, 4, move |res| {
                        assert!(res.is_err());
                        r.set(true);
                    });
                    while !ran.get() {
                        converse::schedule_count(1);
                    }
                }
                converse::exit(0);
            }
        })
        .expect("the job starts");
    assert_eq!(code, 0);
}

/// Where PE 1's exposed bytes are: (address, length).
static EXPOSED: Mutex<Option<(u64, usize)>> = Mutex::new(None);

#[test]
fn exposed_bytes_are_read_by_gets_refused_to_puts_and_gone_with_the_guard() {
    let code = Converse::new()
        .args(["prog", "+p", "2"])
        .run(|_| {
            let step = converse::register_handler(|_m: Message| {});
            let me = converse::my_pe();
            if me == 1 {
                let data: Vec<u8> = (0..10_000).map(|i| (i * 7) as u8).collect();
                {
                    let exposed = rdma::expose(&data).unwrap();
                    assert_eq!(
                        (exposed.addr(), exposed.len()),
                        (data.as_ptr() as u64, 10_000)
                    );
                    // The same bytes again overlap: refused.
                    assert!(rdma::expose(&data[5..]).is_err());
                    *EXPOSED.lock().unwrap() = Some((exposed.addr(), exposed.len()));
                    converse::sync_send_and_free(0, Message::new(step, 0));
                    // PE 0 reads, tries to write, then says so.
                    converse::deliver_specific_msg(step);
                }
                // Unregistered with the guard.
                converse::sync_send_and_free(0, Message::new(step, 0));
                assert_eq!(data[9_999], (9_999 * 7) as u8, "never written");
            } else {
                converse::deliver_specific_msg(step);
                let (addr, len) = EXPOSED.lock().unwrap().unwrap();
                let got = rdma::get(1, addr, len).wait().unwrap();
                assert_eq!(got.len(), len);
                assert!(got.iter().enumerate().all(|(i, &b)| b == (i * 7) as u8));
                let e = rdma::put(1, b"no", addr).wait().unwrap_err();
                assert_eq!(e.target_pe, 1);
                assert!(e.why.contains("for gets only"), "{e}");
                converse::sync_send_and_free(1, Message::new(step, 0));
                converse::deliver_specific_msg(step);
                let e = rdma::get(1, addr, 1).wait().unwrap_err();
                assert!(e.why.contains("no range registered"), "{e}");
                converse::exit(0);
            }
        })
        .expect("the job starts");
    assert_eq!(code, 0);
}

/// Counts its drops.
struct Dropped(Rc<Cell<u32>>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.set(self.0.get() + 1);
    }
}

#[test]
fn one_sided_operations_of_two_jobs_on_one_thread() {
    // PE 0 of both jobs runs on this thread (`init_returns`): each job's
    // operations are its PE's (a PE-private table, gone with the PE), and
    // a callback started in the first runs once, by the time its job ends,
    // and is dropped then.
    let ran = Rc::new(Cell::new(0u32));
    let dropped = Rc::new(Cell::new(0u32));
    Converse::new()
        .args(["prog", "+p", "1"])
        .init_returns(|_| {})
        .expect("the job starts");
    let buf = rdma::dma_alloc(64);
    let (r, guard) = (ran.clone(), Dropped(dropped.clone()));
    rdma::get_cb(0, buf.addr(), 64, move |got| {
        let _guard = &guard;
        assert_eq!(got.unwrap(), vec![0; 64]);
        r.set(r.get() + 1);
    });
    assert_eq!(converse::finish(0), 0);
    drop(buf);
    assert_eq!((ran.get(), dropped.get()), (1, 1), "(callback runs, drops)");
    Converse::new()
        .args(["prog", "+p", "1"])
        .init_returns(|_| {})
        .expect("the second job starts");
    let buf = rdma::dma_alloc(64);
    rdma::put(0, &[7; 64], buf.addr()).wait().unwrap();
    assert_eq!(rdma::get(0, buf.addr(), 64).wait().unwrap(), vec![7; 64]);
    drop(buf);
    assert_eq!(converse::finish(0), 0);
    assert_eq!((ran.get(), dropped.get()), (1, 1));
}
