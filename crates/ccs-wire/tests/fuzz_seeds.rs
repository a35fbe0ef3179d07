//! The fuzz target's seed corpus (`fuzz/seeds/parse_incoming/`): a few
//! whole messages of each kind, as this crate encodes them. This test
//! checks the committed files still are what the encoders give, and that
//! each parses whole; `CCS_WIRE_WRITE_SEEDS=1 cargo test -p ccs-wire --test
//! fuzz_seeds` writes them anew.
use std::path::PathBuf;

use ccs_wire::{
    ClientIdentity, Dest, Limits, Parsed, encode_auth_request, encode_identity_request,
    encode_request, parse_incoming,
};

/// The seeds, by file name.
fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let who = ClientIdentity {
        key: [0x5a; 16],
        level: 1,
        client_id: 7,
        salt: 1000,
    };
    vec![
        (
            "plain-pe",
            encode_request("echo", &Dest::Pe(1), b"hi").unwrap(),
        ),
        (
            "plain-getinfo",
            encode_request("ccs_getinfo", &Dest::Pe(0), b"").unwrap(),
        ),
        (
            "broadcast",
            encode_request("sum", &Dest::Broadcast, b"\0\0\0\x05").unwrap(),
        ),
        (
            "multicast",
            encode_request("echo", &Dest::Multicast(vec![0, 2, 3]), b"xyz").unwrap(),
        ),
        (
            "auth-pe",
            encode_auth_request(&who, 0xfeed, "echo", &Dest::Pe(0), b"a").unwrap(),
        ),
        (
            "auth-multicast",
            encode_auth_request(&who, 3, "echo", &Dest::Multicast(vec![1, 0]), b"").unwrap(),
        ),
        ("identity", encode_identity_request(1, 0x1234_5678).to_vec()),
    ]
}

#[test]
fn the_fuzz_seeds_are_whole_messages_as_encoded_now() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/parse_incoming");
    let write = std::env::var_os("CCS_WIRE_WRITE_SEEDS").is_some();
    if write {
        std::fs::create_dir_all(&dir).unwrap();
    }
    let limits = Limits {
        max_data: 64,
        max_pes: 4,
    };
    for (name, bytes) in seeds() {
        let path = dir.join(name);
        if write {
            std::fs::write(&path, &bytes).unwrap();
        }
        let on_disk = std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (write with CCS_WIRE_WRITE_SEEDS=1)",
                path.display()
            )
        });
        assert_eq!(
            on_disk, bytes,
            "{name} is stale: write with CCS_WIRE_WRITE_SEEDS=1"
        );
        match parse_incoming(&bytes, &limits) {
            Ok(Parsed::Done(_, used)) => {
                assert_eq!(used, bytes.len(), "{name}")
            }
            other => panic!("{name}: {other:?}"),
        }
    }
    let files = std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(files, seeds().len(), "only the seeds in {}", dir.display());
}
