//! Every name the Converse manual documents has a Rust name, or is listed in
//! `NOT_YET`.
//!
//! The names are taken from the specification beside the workspace
//! (`../shared/spec`: `converse-manual.rst` and `converse-cmi-chapter.tex`):
//! every Converse identifier in a declaration (the manual's code blocks and
//! inline literals, the CMI chapter's `\function{…}` entries), and the named
//! constants (`CQS_QUEUEING_*`, the `Ccd` conditions) wherever they appear.
//! A name counts as present when a `#[doc(alias = "…")]` attribute in
//! this crate's sources (or in the CCS client's, `converse-ccs`, for the
//! client functions, or the message crate's, `converse-msg`, whose types
//! this crate re-exports) names it, or a public Rust item has that very name (as
//! `CommHandle`).
//!
//! The test fails when a name is neither present nor in `NOT_YET`, when a
//! name in `NOT_YET` is in fact present (remove it from the list, and from
//! the README's and `lib.rs`'s list of what is missing), and when `NOT_YET`
//! names something the specification does not.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Documented names with no Rust equivalent yet, by area (the same list is
/// in the README and the crate documentation).
const NOT_YET: &[(&str, &[&str])] = &[];

/// Prefixes of Converse names; the character after the prefix must be an
/// upper-case letter (so prose such as "Converse" alone is not a name).
const PREFIXES: &[&str] = &[
    "Cmi", "Csd", "Cth", "Ccd", "Ccs", "Cqs", "CQS_", "CQd", "Cpv", "Csv", "Ctv", "Crn", "Converse",
];

/// Converse type names without one of the prefixes.
const TYPES: &[&str] = &[
    "Pgrp",
    "GlobalPtr",
    "CommHandle",
    "PersistentHandle",
    "PersistentReq",
];

/// The manual's misspellings, and the name they stand for.
const SPELLINGS: &[(&str, &str)] = &[("Persistenthandle", "PersistentHandle")];

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Converse name `token` stands for, if it is one.
fn converse_name(token: &str) -> Option<&str> {
    if let Some(&(_, name)) = SPELLINGS.iter().find(|(typo, _)| *typo == token) {
        return Some(name);
    }
    if TYPES.contains(&token) {
        return Some(token);
    }
    PREFIXES
        .iter()
        .any(|p| {
            token
                .strip_prefix(p)
                .and_then(|rest| rest.chars().next())
                .is_some_and(|c| c.is_ascii_uppercase())
        })
        .then_some(token)
}

fn tokens(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|t| !t.is_empty())
}

/// Adds the Converse names in `text` to `names`, noting where they came from.
fn collect(text: &str, source: &str, names: &mut BTreeMap<String, String>) {
    for t in tokens(text) {
        if let Some(name) = converse_name(t) {
            names
                .entry(name.to_string())
                .or_insert_with(|| source.to_string());
        }
    }
}

/// The named constants (`CQS_QUEUEING_FIFO`, `CcdPROCESSOR_BEGIN_IDLE`, …),
/// which the manual lists in its prose.
fn collect_constants(text: &str, source: &str, names: &mut BTreeMap<String, String>) {
    for t in tokens(text) {
        let ccd = t.strip_prefix("Ccd").is_some_and(|rest| {
            rest.chars().take(2).all(|c| c.is_ascii_uppercase()) && rest.len() >= 2
        });
        if t.starts_with("CQS_") || ccd {
            names
                .entry(t.to_string())
                .or_insert_with(|| source.to_string());
        }
    }
}

/// Names declared in the reStructuredText manual: code blocks and inline
/// literals.
fn rst_names(text: &str, names: &mut BTreeMap<String, String>) {
    // The manual is indented with no-break spaces.
    let text = text.replace('\u{a0}', " ");
    let mut in_block = false;
    for line in text.lines() {
        if line.trim_start().starts_with(".. code-block") {
            in_block = true;
            continue;
        }
        if in_block {
            if line.trim().is_empty() || line.starts_with(' ') || line.starts_with('\t') {
                collect(line, "converse-manual.rst (code block)", names);
                continue;
            }
            in_block = false;
        }
    }
    for (i, literal) in text.split("``").enumerate() {
        if i % 2 == 1 {
            collect(literal, "converse-manual.rst (inline literal)", names);
        }
    }
    collect_constants(&text, "converse-manual.rst (prose)", names);
}

/// Names declared in the LaTeX CMI chapter: the `\function{…}` entries.
fn tex_names(text: &str, names: &mut BTreeMap<String, String>) {
    let text = text.replace("\\_", "_");
    let mut rest = text.as_str();
    while let Some(at) = rest.find("\\function") {
        rest = &rest[at + "\\function".len()..];
        let Some(open) = rest.find('{') else { break };
        if !rest[..open].trim().is_empty() {
            continue;
        }
        let mut depth = 0usize;
        let mut end = rest.len();
        for (i, c) in rest[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i;
                        break;
                    }
                }
                _ => {}
            }
        }
        collect(
            &rest[open + 1..end],
            "converse-cmi-chapter.tex (\\function)",
            names,
        );
        rest = &rest[end..];
    }
    collect_constants(&text, "converse-cmi-chapter.tex (prose)", names);
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The C names the sources give as doc aliases, and the names of their
/// public items.
fn rust_names() -> BTreeSet<String> {
    let mut files = Vec::new();
    rust_files(&manifest_dir().join("src"), &mut files);
    rust_files(&manifest_dir().join("../converse-ccs/src"), &mut files);
    rust_files(&manifest_dir().join("../converse-msg/src"), &mut files);
    let mut names = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for line in text.lines() {
            let line = line.trim_start();
            // `#[doc(alias = "X")]` and `#[doc(alias("X", "Y"))]`.
            if let Some(attr) = line
                .strip_prefix("#[doc(alias")
                .or_else(|| line.strip_prefix("#![doc(alias"))
            {
                for (i, part) in attr.split('"').enumerate() {
                    if i % 2 == 1 {
                        names.insert(part.to_string());
                    }
                }
                continue;
            }
            let Some(decl) = line.strip_prefix("pub ") else {
                continue;
            };
            let mut words = tokens(decl);
            if let (Some(kind), Some(name)) = (words.next(), words.next())
                && [
                    "struct", "enum", "type", "fn", "trait", "const", "static", "mod",
                ]
                .contains(&kind)
            {
                names.insert(name.to_string());
            }
        }
    }
    names
}

#[test]
fn every_documented_name_has_a_rust_name_or_is_listed_as_not_yet() {
    let spec = manifest_dir().join("../../../shared/spec");
    if !spec.is_dir() {
        println!(
            "manual_names: skipped, no specification at {}",
            spec.display()
        );
        return;
    }
    let mut documented = BTreeMap::new();
    let rst = std::fs::read_to_string(spec.join("converse-manual.rst")).unwrap();
    rst_names(&rst, &mut documented);
    let tex = std::fs::read_to_string(spec.join("converse-cmi-chapter.tex")).unwrap();
    tex_names(&tex, &mut documented);

    // The extraction itself still works.
    for known in [
        "ConverseInit",
        "CmiSyncSend",
        "CmiGrabBuffer",
        "CmiDMAAlloc",
        "CthThFn",
        "CcdPERIODIC_1second",
        "CQS_QUEUEING_BLIFO",
        "Pgrp",
        "PersistentHandle",
    ] {
        assert!(
            documented.contains_key(known),
            "{known} was not found in the specification: the extraction is broken"
        );
    }
    assert!(
        documented.len() > 200,
        "only {} names found",
        documented.len()
    );

    let present = rust_names();
    let not_yet: BTreeSet<&str> = NOT_YET
        .iter()
        .flat_map(|(_, names)| names.iter().copied())
        .collect();
    let mut missing = Vec::new();
    let mut landed = Vec::new();
    for (name, source) in &documented {
        match (present.contains(name), not_yet.contains(name.as_str())) {
            (false, false) => missing.push(format!("{name} (from {source})")),
            (true, true) => landed.push(name.as_str()),
            _ => {}
        }
    }
    let stale: Vec<&str> = not_yet
        .iter()
        .copied()
        .filter(|n| !documented.contains_key(*n))
        .collect();
    let mut report = String::new();
    if !missing.is_empty() {
        report += &format!(
            "documented names with no doc alias or Rust item, and not in NOT_YET:\n  {}\n",
            missing.join("\n  ")
        );
    }
    if !landed.is_empty() {
        report += &format!(
            "names in NOT_YET that have a Rust name now (remove them from NOT_YET, the README and lib.rs):\n  {}\n",
            landed.join("\n  ")
        );
    }
    if !stale.is_empty() {
        report += &format!(
            "names in NOT_YET that the specification does not document:\n  {}\n",
            stale.join("\n  ")
        );
    }
    assert!(report.is_empty(), "{report}");
    println!(
        "manual_names: {} documented names, {} with a Rust name, {} not yet",
        documented.len(),
        documented.len() - not_yet.len(),
        not_yet.len()
    );
}
