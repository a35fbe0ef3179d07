//! Every function, variable, constant and error code of the GAMMA
//! document (`../shared/spec/gamma-api.txt`) has a Rust name here: a
//! `#[doc(alias = "…")]` with its C name in this crate's sources (or, for
//! `BROADCAST`, `GO_AHEAD` and `GO_BACK`, a public item of that name).
use std::collections::BTreeSet;
use std::path::PathBuf;

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The C names the document defines.
fn wanted(doc: &str) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = doc
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("gamma_") || w.starts_with("GAMMA_ERR_"))
        .map(str::to_string)
        .collect();
    for name in ["BROADCAST", "GO_AHEAD", "GO_BACK", "time_586"] {
        assert!(doc.contains(name), "the document names {name}");
        out.insert(name.to_string());
    }
    out
}

/// Doc aliases and public item names of the sources.
fn present() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for entry in std::fs::read_dir(manifest_dir().join("src")).expect("src") {
        let text = std::fs::read_to_string(entry.expect("entry").path()).expect("source");
        for line in text.lines().map(str::trim) {
            if let Some(rest) = line.strip_prefix("#[doc(alias = \"") {
                out.insert(rest.trim_end_matches("\")]").to_string());
            }
            if let Some(rest) = line.strip_prefix("pub const ") {
                out.insert(rest.chars().take_while(|c| *c != ':').collect());
            }
        }
    }
    out
}

#[test]
fn every_name_of_the_document_has_a_rust_name() {
    let path = manifest_dir().join("../../../shared/spec/gamma-api.txt");
    let Ok(doc) = std::fs::read_to_string(&path) else {
        eprintln!("spec_names: skipped, no document at {}", path.display());
        return;
    };
    let wanted = wanted(&doc);
    assert!(wanted.len() > 30, "{wanted:?}");
    let present = present();
    let missing: Vec<&String> = wanted.iter().filter(|n| !present.contains(*n)).collect();
    assert!(
        missing.is_empty(),
        "names of the document with no Rust name: {missing:?}"
    );
}
