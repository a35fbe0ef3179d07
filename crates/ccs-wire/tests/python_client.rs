//! The Python CCS client's own tests (`python/test_converse_ccs.py`, against
//! a fake server written from the protocol page), run as part of
//! `cargo test --workspace`.
use std::process::Command;

#[test]
fn the_python_client_passes_its_tests() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../python");
    let out = match Command::new("python3")
        .args(["-m", "unittest", "-q"])
        .current_dir(dir)
        .output()
    {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("skipped: no python3 here");
            return;
        }
        Err(e) => panic!("cannot run python3: {e}"),
    };
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "python3 -m unittest failed:\n{text}");
    assert!(text.contains("OK"), "unittest said:\n{text}");
}
