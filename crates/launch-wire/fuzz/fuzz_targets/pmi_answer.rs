//! `pmi::Answer::parse` (what a process reads from its MPI launcher's PMI
//! connection) on any line.
//!
//! Beyond "no panic": an error is one short printable line; the line's
//! end (none, `\n`, `\r\n`) never changes the verdict; a value taken from
//! a `get_result` holds no space (the line's separator).
//!
//! The same bytes as a `PMI_process_mapping` value: `nodes_of_ranks`
//! places every rank of a job or names what is wrong.
#![no_main]

mod common;

use launch_wire::pmi::{Answer, MAX_LINE, nodes_of_ranks};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let Ok(line) = std::str::from_utf8(bytes) else {
        return;
    };
    let verdict = Answer::parse(line);
    for ended in common::with_endings(line, MAX_LINE) {
        assert_eq!(Answer::parse(&ended), verdict, "{ended:?}");
    }
    match verdict {
        Ok(Answer::GetResult { value: Some(v), .. }) => {
            assert!(!v.contains(' '), "{v:?}");
        }
        Ok(_) => {}
        Err(e) => common::check_message(&e.to_string()),
    }
    let size = bytes.len() % 97;
    match nodes_of_ranks(line, size) {
        Ok(nodes) => assert_eq!(nodes.len(), size),
        Err(e) => common::check_message(&e.to_string()),
    }
});
