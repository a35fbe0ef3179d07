//! Every name of the extensions manual's chapters done so far has a Rust
//! name here: a `#[doc(alias = "…")]` in this crate's sources, or a public
//! item of that very name.
//!
//! The names are taken from the specification beside the workspace
//! (`../shared/spec/converse-extensions-manual.md`): every identifier with
//! one of the chapter's prefixes in the chapter's text. `CHAPTERS` lists
//! the chapters this crate covers; the next issues add theirs.
use std::collections::BTreeSet;
use std::path::PathBuf;

/// (chapter heading, name prefixes) of the chapters done.
const CHAPTERS: &[(&str, &[&str])] = &[
    ("Tag Matching", &["Cmm"]),
    ("Converse Master-Slave Library", &["Cms"]),
    ("Data Structures", &["CdsFifo", "CkQ"]),
    ("Futures", &["Cfuture"]),
    ("Load Balancing", &["Cld", "CLD_"]),
    ("Converse-POSIX threads", &["Cpthread", "pthread_"]),
    ("Automatic Parameter Marshalling", &["Cpm", "CPM_"]),
    ("Parallel Arrays of Threads", &["CPath", "CPATH_"]),
];

/// Words of the manual that name nothing of the library: the module's
/// name and plurals in its prose, the launchers its scanner writes for the
/// examples' functions (ported in `examples/cpm_manual.rs`, where
/// `#[invokable]` writes them) and the pack functions the examples write
/// for their own types (serde's derives here).
const NOT_LIBRARY_NAMES: &[&str] = &[
    "Cpm",
    "Cpm_",
    "CpmDestinations",
    "Cpm_myfunc",
    "Cpm_print_integer",
    "Cpm_print_program_arguments",
    "CpmPack_coordinate",
    "CpmUnpack_coordinate",
    "CpmPtrSize_intptr",
    "CpmPtrPack_intptr",
    "CpmPtrUnpack_intptr",
    "CpmPtrFree_intptr",
];

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The text of the chapter headed `heading` (from its "Chapter N" line to
/// the next one).
fn chapter<'a>(manual: &'a str, heading: &str) -> &'a str {
    let lines: Vec<&str> = manual.lines().collect();
    let at = lines
        .windows(3)
        .position(|w| w[0].starts_with("Chapter ") && w[2].trim() == heading)
        .unwrap_or_else(|| panic!("no chapter `{heading}` in the manual"));
    let start = lines[..at].iter().map(|l| l.len() + 1).sum::<usize>();
    let rest = &manual[start + lines[at].len()..];
    let end = rest.find("\nChapter ").unwrap_or(rest.len());
    &rest[..end]
}

/// Identifiers of `text` that start with one of `prefixes`.
fn names(text: &str, prefixes: &[&str]) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| prefixes.iter().any(|p| w.starts_with(p)))
        .map(str::to_string)
        .collect()
}

/// The Rust sources under `dir`, at any depth.
fn sources(dir: &std::path::Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source directory") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The doc aliases and public item names of this crate's sources.
fn present() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut files = Vec::new();
    sources(&manifest_dir().join("src"), &mut files);
    // `#[invokable]` (the manual's `CpmInvokable`) lives in the macro crate.
    sources(&manifest_dir().join("../converse-macros/src"), &mut files);
    for file in files {
        let text = std::fs::read_to_string(file).expect("source");
        for line in text.lines() {
            let line = line.trim();
            if let Some(rest) = line.strip_prefix("#[doc(alias = \"") {
                out.insert(rest.trim_end_matches("\")]").to_string());
            }
            for kw in ["pub struct ", "pub fn ", "pub const ", "pub enum "] {
                if let Some(rest) = line.strip_prefix(kw) {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    out.insert(name);
                }
            }
        }
    }
    out
}

#[test]
fn every_name_of_the_chapters_done_has_a_rust_name() {
    let path = manifest_dir().join("../../../shared/spec/converse-extensions-manual.md");
    let Ok(manual) = std::fs::read_to_string(&path) else {
        eprintln!(
            "manual_names: skipped, no specification at {}",
            path.display()
        );
        return;
    };
    let present = present();
    let mut missing = Vec::new();
    for (heading, prefixes) in CHAPTERS {
        let wanted = names(chapter(&manual, heading), prefixes);
        assert!(!wanted.is_empty(), "no names found in `{heading}`");
        for name in wanted {
            if !present.contains(&name) && !NOT_LIBRARY_NAMES.contains(&name.as_str()) {
                missing.push(format!("{name} ({heading})"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "names of the manual with no doc alias or item: {missing:?}"
    );
}
