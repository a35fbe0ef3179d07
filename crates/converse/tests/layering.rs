//! The floors of the core (DESIGN.md §3), checked from the source: a module
//! may use its own floor and the floors below it, never one above. A wrong
//! arrow fails here instead of waiting for a review.
//!
//! The check reads every `.rs` file under `src/` as text: each `crate::a::b`
//! path outside a comment, and each `super::x` of a file whose module has
//! submodules on different floors (`csd`). A path to an item the crate
//! root re-exports (`crate::my_pe`) counts as a path to the module that
//! defines it (read from `lib.rs`'s `pub use` lines).
//!
//! One kind of upward name is allowed, by DESIGN.md §3's first rule: the
//! PE (`rt/pe.rs`) holds each subsystem's state *type* (`STATE_TYPES`),
//! whose fields only their own module sees; it calls no subsystem function.
//!
//! `DEBTS` lists the arrows that still run up (none today). The test fails
//! on an up-arrow that is not listed, and on a listed one that is gone (so
//! the list only shrinks).
//!
//! `msg::message` and `net` are re-export shims of the crates below the
//! core, `converse-msg` and `converse-net`: a path into those crates
//! (`converse_msg::…`, `converse_net::…`) counts as a path to `msg` or
//! `net`, so naming the crate does not get around the floors. The crates
//! themselves cannot import the core (Cargo would refuse the cycle); the
//! last test checks it anyway, from their manifests and sources.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The floors, lowest first; a module names its floor by its path below
/// `crate` (`csd::cqs`), or by its top-level module.
const FLOORS: &[&[&str]] = &[
    &["sync"],
    &["proc"],
    &["mem", "trace"],
    &["msg"],
    &["net"],
    &["csd::cqs", "csd::idle"],
    &["rt"],
    // One co-designed machine: they may use each other.
    &["cmi", "csd", "cth", "ccd"],
    &["ccs"],
    // The public face: anything. (Programs are crates of their own, over
    // the public API: `convrun`, `converse-ccs`.)
    &["machine", "start", "lib"],
];

/// Up-arrows still to remove: (file below `src/`, the module it reaches up
/// to). Each entry goes when the step that removes it lands.
const DEBTS: &[(&str, &str)] = &[];

/// The state types the PE may name from the floor above its own: (file,
/// path below `crate`). A state type's fields are private to its module.
const STATE_TYPES: &[(&str, &str)] = &[
    ("rt/pe.rs", "ccd::CcdState"),
    ("rt/pe.rs", "ccd::quiescence::QdState"),
    ("rt/pe.rs", "cmi::CollState"),
    ("rt/pe.rs", "cmi::send::SendState"),
    ("rt/pe.rs", "csd::SchedState"),
    ("rt/pe.rs", "cth::CthState"),
];

fn floor_of(module: &str) -> usize {
    // The longest key that prefixes `module` (`csd::cqs` before `csd`).
    let mut best: Option<(usize, usize)> = None;
    for (floor, keys) in FLOORS.iter().enumerate() {
        for key in *keys {
            let hit = module == *key || module.starts_with(&format!("{key}::"));
            if hit && best.is_none_or(|(len, _)| key.len() > len) {
                best = Some((key.len(), floor));
            }
        }
    }
    match best {
        Some((_, floor)) => floor,
        None => panic!("module `{module}` is on no floor: add it to FLOORS"),
    }
}

/// The module path (below `crate`) of a source file.
fn module_of(rel: &Path) -> String {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && !(parts.is_empty() && stem == "lib") {
        parts.push(stem.to_string());
    }
    if parts.is_empty() {
        "lib".into()
    } else {
        parts.join("::")
    }
}

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            source_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `name -> module` for the items the crate root re-exports.
fn root_exports(lib: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    let text: String = lib
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut rest = text.as_str();
    while let Some(at) = rest.find("pub use ") {
        rest = &rest[at + "pub use ".len()..];
        let end = rest.find(';').expect("a `pub use` ends with `;`");
        let stmt: String = rest[..end].split_whitespace().collect();
        rest = &rest[end..];
        let (path, names) = match stmt.find("::{") {
            Some(brace) => (
                stmt[..brace].to_string(),
                stmt[brace + 3..stmt.len() - 1]
                    .split(',')
                    .map(str::to_string)
                    .collect::<Vec<_>>(),
            ),
            None => {
                let (path, name) = stmt.rsplit_once("::").expect("a path");
                (path.to_string(), vec![name.to_string()])
            }
        };
        for name in names.into_iter().filter(|n| !n.is_empty()) {
            map.insert(name, path.clone());
        }
    }
    map
}

/// The module a path (the segments after `crate::`) points into.
fn target_of(segments: &[&str], exports: &BTreeMap<String, String>) -> Option<String> {
    let first = *segments.first()?;
    let is_module = FLOORS.iter().any(|keys| {
        keys.iter()
            .any(|k| k.split("::").next() == Some(first) && *k != "lib")
    });
    if is_module {
        return Some(match segments.get(1) {
            Some(second) if first == "csd" && (*second == "cqs" || *second == "idle") => {
                format!("csd::{second}")
            }
            _ => first.to_string(),
        });
    }
    // A root re-export (or a macro, whose module is its definer's).
    exports.get(first).map(|path| {
        let mut it = path.split("::");
        let top = it.next().unwrap_or_default();
        match it.next() {
            Some(second) if top == "csd" && (second == "cqs" || second == "idle") => {
                format!("csd::{second}")
            }
            _ => top.to_string(),
        }
    })
}

/// The up-arrows of one file: (its module, the module it uses).
fn up_arrows(
    rel: &Path,
    text: &str,
    exports: &BTreeMap<String, String>,
) -> BTreeSet<(String, String)> {
    let module = module_of(rel);
    let own = floor_of(&module);
    let mut found = BTreeSet::new();
    for line in text.lines() {
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        let mut paths: Vec<Vec<&str>> = Vec::new();
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            // `$crate::` in a macro is the user's view of the crate: skip.
            let dollar = at > 0 && rest.as_bytes()[at - 1] == b'$';
            rest = &rest[at + "crate::".len()..];
            let path: Vec<&str> = rest
                .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .next()
                .unwrap_or_default()
                .split("::")
                .filter(|s| !s.is_empty())
                .collect();
            if !dollar {
                paths.push(path);
            }
        }
        // The crates below the core are on its `msg` and `net` floors.
        for (krate, floor) in [("converse_msg::", "msg"), ("converse_net::", "net")] {
            if line.contains(krate) && floor_of(floor) > own {
                found.insert((rel.display().to_string(), floor.to_string()));
            }
        }
        // `super::x` from a submodule of `csd` may reach the scheduler
        // above its leaves.
        if module.starts_with("csd::") {
            let mut rest = line;
            while let Some(at) = rest.find("super::") {
                rest = &rest[at + "super::".len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() && name != "super" {
                    let sibling = ["cqs", "idle"].contains(&name.as_str());
                    let target = if sibling {
                        format!("csd::{name}")
                    } else {
                        "csd".into()
                    };
                    if floor_of(&target) > own {
                        found.insert((rel.display().to_string(), target));
                    }
                }
            }
        }
        for path in paths {
            let state_type = STATE_TYPES
                .iter()
                .any(|(f, p)| Path::new(f) == rel && path.join("::") == *p);
            if state_type {
                continue;
            }
            if let Some(target) = target_of(&path, exports) {
                if floor_of(&target) > own {
                    found.insert((rel.display().to_string(), target));
                }
            }
        }
    }
    found
}

#[test]
fn no_module_uses_a_floor_above_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let exports = root_exports(&std::fs::read_to_string(src.join("lib.rs")).expect("lib.rs"));
    let mut files = Vec::new();
    source_files(&src, &mut files);
    files.sort();
    let mut arrows = BTreeSet::new();
    for file in &files {
        let rel = file.strip_prefix(&src).expect("below src");
        let text = std::fs::read_to_string(file).expect("readable source");
        arrows.extend(up_arrows(rel, &text, &exports));
    }
    let debts: BTreeSet<(String, String)> = DEBTS
        .iter()
        .map(|(f, m)| (f.to_string(), m.to_string()))
        .collect();
    let new: Vec<_> = arrows.difference(&debts).collect();
    let paid: Vec<_> = debts.difference(&arrows).collect();
    assert!(
        new.is_empty(),
        "modules that use a floor above their own (DESIGN.md §3; the floors are in FLOORS):\n{}",
        new.iter()
            .map(|(f, m)| format!("    (\"{f}\", \"{m}\"),"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        paid.is_empty(),
        "these up-arrows are gone: remove them from DEBTS:\n{}",
        paid.iter()
            .map(|(f, m)| format!("    (\"{f}\", \"{m}\"),"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn the_checker_sees_what_it_should() {
    let exports = root_exports("pub use rt::startup::{Converse, finish};\npub use csd::cqs::Cqs;");
    assert_eq!(
        exports.get("Converse").map(String::as_str),
        Some("rt::startup")
    );
    let arrows = up_arrows(
        Path::new("net/tcp.rs"),
        "use crate::rt::pe;\n// crate::ccs::x in a comment\nlet c = crate::Converse::new();\nuse crate::msg::Message;",
        &exports,
    );
    let want: BTreeSet<(String, String)> = [("net/tcp.rs", "rt")]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(arrows, want);
    // Naming a lower crate is using its floor.
    let up = up_arrows(
        Path::new("msg/handler.rs"),
        "use converse_net::shm::ShmModule;\nuse converse_msg::Message;",
        &exports,
    );
    assert_eq!(
        up,
        [("msg/handler.rs".to_string(), "net".to_string())].into()
    );
    // The scheduler's leaves may not reach the scheduler; it may use them.
    let up = up_arrows(
        Path::new("csd/cqs.rs"),
        "use super::Queueing;\nuse super::idle::X;",
        &exports,
    );
    assert_eq!(up.len(), 1, "{up:?}");
    assert!(
        up_arrows(
            Path::new("csd/mod.rs"),
            "use crate::csd::cqs::Cqs;",
            &exports
        )
        .is_empty()
    );
    // The PE may name a state type from above, and nothing else there.
    let pe = up_arrows(
        Path::new("rt/pe.rs"),
        "use crate::cth::CthState;\nuse crate::cth::yield_now;",
        &exports,
    );
    let want: BTreeSet<(String, String)> = [("rt/pe.rs".to_string(), "cth".to_string())].into();
    assert_eq!(pe, want);
    assert_eq!(module_of(Path::new("csd/mod.rs")), "csd");
    assert_eq!(module_of(Path::new("csd/cqs.rs")), "csd::cqs");
    assert_eq!(module_of(Path::new("lib.rs")), "lib");
    assert_eq!(
        module_of(Path::new("rt/launch/modules.rs")),
        "rt::launch::modules"
    );
    assert_eq!(floor_of("rt::launch::modules"), floor_of("rt"));
}

/// The core builds no program: programs are packages of their own over its
/// public API (`crates/convrun`, `crates/converse-ccs`), so that they
/// depend on the core as any user does, the tests that run them (which
/// need `CARGO_BIN_EXE_<name>`) live beside them, and the floors above
/// cover all of the core's source.
#[test]
fn the_core_has_no_programs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    assert!(
        !root.join("src/bin").exists() && !root.join("src/main.rs").exists(),
        "a program inside the core: move it to a crate of its own"
    );
}

/// `converse-msg`, `launch-wire` and `converse-net` sit below the core: none
/// depends on it, nor on anything above its floor (`converse-net` on
/// `converse-msg` and on the launcher protocol's data crate `launch-wire`,
/// whose job key proves its tcp handshakes; the two bottom crates on no crate
/// of the workspace). Cargo already forbids
/// the cycle a dependency on `converse` would make; this says so where the
/// floors are kept, and catches a path dependency that skips a floor.
#[test]
fn the_crates_below_the_core_do_not_reach_up() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (krate, allowed) in [
        ("converse-msg", &[][..]),
        ("launch-wire", &[][..]),
        ("converse-net", &["converse-msg", "launch-wire"][..]),
    ] {
        let manifest =
            std::fs::read_to_string(crates.join(krate).join("Cargo.toml")).expect("a manifest");
        for line in manifest.lines() {
            if let Some((name, _)) = line.split_once("path = \"../") {
                let name = name.split_whitespace().next().unwrap_or_default();
                assert!(
                    allowed.contains(&name),
                    "{krate} depends on {name}, a crate at or above its floor"
                );
            }
        }
        let mut files = Vec::new();
        source_files(&crates.join(krate).join("src"), &mut files);
        for file in files {
            let text = std::fs::read_to_string(&file).expect("readable source");
            for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
                // `converse::`, not the end of `converse_msg::` or `xconverse::`.
                let up = line.match_indices("converse::").any(|(at, _)| {
                    let before = at.checked_sub(1).map(|i| line.as_bytes()[i]);
                    !matches!(before, Some(b) if b.is_ascii_alphanumeric() || b == b'_')
                });
                assert!(!up, "{} names the core: {line}", file.display());
            }
        }
    }
}
