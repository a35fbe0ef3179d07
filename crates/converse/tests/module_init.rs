//! Module-init hooks (`register_module_init`): a library's per-PE
//! initialization runs on every PE, in registration order, before the start
//! function, in every start mode. The registry is process-wide, so these
//! tests have a test binary of their own.
use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};

use converse::{Converse, Cpv, Message};

/// What ran on this PE, in order.
static LOG: Cpv<RefCell<Vec<&'static str>>> = Cpv::new();
/// The handler library A registered in its init.
static A_HANDLER: Cpv<usize> = Cpv::new();
/// Messages A's handler got, job-wide.
static A_GOT: AtomicUsize = AtomicUsize::new(0);

fn log(what: &'static str) {
    if !LOG.is_initialized() {
        LOG.initialize(RefCell::new(Vec::new()));
    }
    LOG.with(|l| l.borrow_mut().push(what));
}

fn library_a() {
    log("a");
    let h = converse::register_handler(|msg: Message| {
        assert_eq!(msg.payload(), b"for a");
        A_GOT.fetch_add(1, Ordering::SeqCst);
    });
    A_HANDLER.initialize(h);
}

fn library_b() {
    log("b");
}

fn register_both() {
    converse::register_module_init("library-a", library_a);
    converse::register_module_init("library-b", library_b);
}

#[test]
fn module_inits_run_on_every_pe_in_order_before_the_start_function() {
    register_both();
    assert!(
        !converse::register_module_init("library-a", library_b),
        "a name registers once"
    );
    A_GOT.store(0, Ordering::SeqCst);
    let code = Converse::new()
        .args(["prog", "+p", "4", "++ppn", "2"])
        .run(|_| {
            log("start");
            assert_eq!(LOG.with(|l| l.borrow().clone()), ["a", "b", "start"]);
            // A's handler took the first index on every PE, so a message
            // to another PE reaches A's handler there; the program's own
            // handlers come after it.
            let mine = converse::register_handler(|_: Message| {});
            assert!(mine > *A_HANDLER.get());
            let next = (converse::my_pe() + 1) % converse::num_pes();
            converse::sync_send_and_free(next, Message::from_payload(*A_HANDLER.get(), b"for a"));
            converse::start_quiescence_detection(|| converse::exit(0));
        })
        .unwrap();
    assert_eq!(code, 0);
    assert_eq!(A_GOT.load(Ordering::SeqCst), 4);
}

#[test]
fn module_inits_run_on_the_main_thread_of_init_returns() {
    register_both();
    Converse::new()
        .args(["prog", "+p", "2"])
        .init_returns(|_| {
            assert_eq!(LOG.with(|l| l.borrow().clone()), ["a", "b"]);
        })
        .unwrap();
    // The calling thread is PE 0 now: its inits ran too.
    assert_eq!(LOG.with(|l| l.borrow().clone()), ["a", "b"]);
    assert_eq!(converse::finish(0), 0);
}
