//! `Placement::from_env` (what a process makes of the environment
//! `convrun` gave it) on any set of variables.
//!
//! The input is split at its NUL bytes into the values of the protocol's
//! variables, in the order of `env::ALL`; a value that is not UTF-8 or
//! that the input does not reach is unset (as `std::env::var` sees a
//! variable that is not UTF-8 or not there).
//!
//! Beyond "no panic": no placement without `CONVERSE_LAUNCHER`; a
//! placement has `node < nodes` and, if it has hosts, one per process, and
//! `to_env` gives variables that read back as the same placement; an error
//! is one short printable line.
#![no_main]

mod common;

use launch_wire::Placement;
use launch_wire::env::{ALL, LAUNCHER};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let mut values = bytes.split(|&b| b == 0);
    let vars: Vec<(&str, Option<String>)> = ALL
        .iter()
        .map(|&name| {
            let value = values
                .next()
                .and_then(|v| std::str::from_utf8(v).ok())
                .map(String::from);
            (name, value)
        })
        .collect();
    let get = |name: &str| {
        vars.iter()
            .find(|(n, _)| *n == name)
            .and_then(|(_, v)| v.clone())
    };
    let placement = match Placement::from_env(get) {
        Ok(Some(p)) => p,
        Ok(None) => return assert!(get(LAUNCHER).is_none()),
        Err(e) => return common::check_error(&e),
    };
    assert_eq!(Some(&placement.launcher), get(LAUNCHER).as_ref());
    assert!(placement.node < placement.nodes, "{placement:?}");
    if let Some(hosts) = &placement.hosts {
        assert_eq!(hosts.len(), placement.nodes, "{placement:?}");
    }
    let again = placement.to_env();
    let get_again = |name: &str| {
        again
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(Placement::from_env(get_again), Ok(Some(placement)));
});
