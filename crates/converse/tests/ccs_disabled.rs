//! A build without the `ccs` feature (`cargo test -p converse
//! --no-default-features --test ccs_disabled`): `++server` is refused at
//! start-up with an error that says why, `ccs::enabled()` is false, and the
//! rest of CCS (handler registration) still works in a job. With the
//! feature on (the default) this file is empty.
#![cfg(not(feature = "ccs"))]

use converse::{Converse, StartError, ccs};

#[test]
fn a_server_flag_is_refused_with_the_reason() {
    let result = Converse::new()
        .args(["prog", "+p", "2", "++server"])
        .run(|_| converse::exit(0));
    match result {
        Err(e @ StartError::Server(ccs::ServerError::NotBuilt)) => {
            let why = e.to_string();
            assert!(why.contains("no CCS server"), "{why}");
            assert!(why.contains("`ccs` feature"), "{why}");
        }
        other => panic!("++server started a job in a build without CCS: {other:?}"),
    }
    assert!(!ccs::enabled());
}

#[test]
fn handlers_register_and_no_server_is_reported() {
    let code = Converse::new()
        .args(["prog", "+p", "2"])
        .run(|_| {
            ccs::register_handler("ping", |_msg| {});
            // Aborts the job (non-zero code) if "ping" were not registered.
            ccs::set_merge_fn("ping", ccs::merge::concat());
            assert_eq!(ccs::server_address(), None);
            converse::exit(0);
        })
        .expect("a job without ++server starts");
    assert_eq!(code, 0);
}
