//! The floors of the core (DESIGN.md §3), checked from the source: a module
//! may use its own floor and the floors below it, never one above. A wrong
//! arrow fails here instead of waiting for a review.
//!
//! The check reads every `.rs` file under `src/` as text: each `crate::a::b`
//! path outside a comment, and each `super::x` (read as the path of the
//! parent module's `x`). A path to an item the crate root re-exports
//! (`crate::my_pe`) counts as a path to the module that defines it (read
//! from `lib.rs`'s `pub use` lines).
//!
//! The machine's four subsystems stand one above the other (`ccd`, `cth`,
//! `cmi`, `csd`), with their per-PE state types (`ccd::state`…) on a floor
//! below `rt`, so that the PE (`rt/pe.rs`) holds them without naming a
//! floor above its own (DESIGN.md §3's first rule; docs/design-notes.md).
//! A second test builds the graph of which part of the core uses which
//! (a part is a key of `FLOORS`: a subsystem, or one of its modules on a
//! floor of its own) and fails on any circle between parts; files of one
//! part may use each other freely.
//!
//! `DEBTS` lists the arrows that still run up (none today). The test fails
//! on an up-arrow that is not listed, and on a listed one that is gone (so
//! the list only shrinks).
//!
//! A path is not the only way up: a subsystem adds its behaviour to the PE
//! as `impl Pe` methods, and a call `pe.deliver(…)` names no module. A
//! third test reads which part defines each `Pe` method (the `fn`s of its
//! `impl Pe {` blocks) and which part calls it (`pe.`, `me.` or, inside
//! `impl Pe`, `self.`); `CALL_DEBTS` lists the calls that still run up,
//! on the same terms as `DEBTS`, and the circle test counts every other
//! call as a use.
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
    // The leaves of the scheduler and of threads: queues, the idle
    // protocol, stacks.
    &[
        "csd::cqs",
        "csd::idle",
        "csd::fifo",
        "csd::shuffle",
        "cth::stack",
    ],
    // Each subsystem's per-PE state types, which the PE holds.
    &["ccd::state", "cmi::state", "cth::state", "csd::state"],
    &["rt"],
    // The machine, one subsystem a floor: conditions, timers and
    // quiescence detection; user-level threads; messaging (sends,
    // broadcasts, groups, reductions, one-sided, persistent); the
    // scheduler, which runs them all (those below reach it through
    // `rt::reentry`).
    &["ccd"],
    &["cth"],
    &["cmi"],
    &["csd"],
    &["ccs"],
    // The public face: anything. (Programs are crates of their own, over
    // the public API: `convrun`, `converse-ccs`.)
    &["machine", "start", "typed", "lib"],
];

/// Up-arrows still to remove: (file below `src/`, the module it reaches up
/// to). Each entry goes when the step that removes it lands.
const DEBTS: &[(&str, &str)] = &[];

/// `Pe` methods still called from below the part that defines them: (the
/// calling file, the defining part). What is left of the machine's old
/// circle (docs/design-notes.md): the send path pushes self-sends into the
/// scheduler's queue and delivers while it waits for room (`cmi` on
/// `csd`); quiescence detection and a moving thread send (`ccd` and `cth`
/// on `cmi`).
const CALL_DEBTS: &[(&str, &str)] = &[
    ("ccd/quiescence.rs", "cmi"),
    ("cmi/group.rs", "csd"),
    ("cmi/reduce.rs", "csd"),
    ("cmi/send.rs", "csd"),
    ("cth/migrate.rs", "cmi"),
];

/// The part of the core `module` belongs to: the longest key of `FLOORS`
/// that is `module` or a prefix of it (`csd::cqs` before `csd`).
fn part_of(module: &str) -> &'static str {
    let mut best: Option<&'static str> = None;
    for keys in FLOORS {
        for key in *keys {
            let hit = module == *key || module.starts_with(&format!("{key}::"));
            if hit && best.is_none_or(|b| key.len() > b.len()) {
                best = Some(key);
            }
        }
    }
    best.unwrap_or_else(|| panic!("module `{module}` is on no floor: add it to FLOORS"))
}

fn floor_of(module: &str) -> usize {
    let part = part_of(module);
    FLOORS
        .iter()
        .position(|keys| keys.contains(&part))
        .expect("a part is a key of FLOORS")
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

/// The part a path (the segments after `crate::`) points into.
fn target_of(segments: &[&str], exports: &BTreeMap<String, String>) -> Option<&'static str> {
    let first = *segments.first()?;
    let is_module = FLOORS.iter().any(|keys| {
        keys.iter()
            .any(|k| k.split("::").next() == Some(first) && *k != "lib")
    });
    if is_module {
        return Some(part_of(&segments.join("::")));
    }
    // A root re-export (or a macro, whose module is its definer's).
    exports.get(first).map(|path| part_of(path))
}

/// The parts one file uses (its own included), by the paths it writes.
fn uses(rel: &Path, text: &str, exports: &BTreeMap<String, String>) -> BTreeSet<&'static str> {
    let module = module_of(rel);
    // What `super::` names: the parent module (the crate root for a
    // top-level one).
    let parent: Vec<&str> = match module.rsplit_once("::") {
        Some((parent, _)) => parent.split("::").collect(),
        None => Vec::new(),
    };
    let mut found = BTreeSet::new();
    for line in text.lines() {
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        let mut paths: Vec<Vec<&str>> = Vec::new();
        for (prefix, base) in [("crate::", &[][..]), ("super::", &parent[..])] {
            let mut rest = line;
            while let Some(at) = rest.find(prefix) {
                // `$crate::` in a macro is the user's view of the crate, a
                // visibility (`pub(in crate::cmi)`) names no use, and
                // `super::super::` is not read: skip them.
                let before = rest[..at].chars().next_back();
                let skip = matches!(before, Some('$'))
                    || rest[..at].ends_with("(in ")
                    || rest[..at].ends_with("super::")
                    || rest[at + prefix.len()..].starts_with("super::");
                let word_inside = matches!(before, Some(c) if c.is_alphanumeric() || c == '_');
                rest = &rest[at + prefix.len()..];
                let path: Vec<&str> = rest
                    .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .next()
                    .unwrap_or_default()
                    .split("::")
                    .filter(|s| !s.is_empty())
                    .collect();
                if !skip && !word_inside && !path.is_empty() {
                    paths.push(base.iter().copied().chain(path).collect());
                }
            }
        }
        // The crates below the core are on its `msg` and `net` floors.
        for (krate, part) in [("converse_msg::", "msg"), ("converse_net::", "net")] {
            if line.contains(krate) {
                found.insert(part);
            }
        }
        for path in paths {
            if let Some(target) = target_of(&path, exports) {
                found.insert(target);
            }
        }
    }
    found
}

/// The up-arrows of one file: (the file, the part above its floor it uses).
fn up_arrows(
    rel: &Path,
    text: &str,
    exports: &BTreeMap<String, String>,
) -> BTreeSet<(String, String)> {
    let own = floor_of(&module_of(rel));
    uses(rel, text, exports)
        .into_iter()
        .filter(|target| floor_of(target) > own)
        .map(|target| (rel.display().to_string(), target.to_string()))
        .collect()
}

/// The circles of a graph of parts: its strongly connected components of
/// more than one part (Tarjan's algorithm), each sorted.
fn circles(edges: &BTreeMap<&'static str, BTreeSet<&'static str>>) -> Vec<Vec<&'static str>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<&'static str, BTreeSet<&'static str>>,
        index: BTreeMap<&'static str, usize>,
        low: BTreeMap<&'static str, usize>,
        stack: Vec<&'static str>,
        on_stack: BTreeSet<&'static str>,
        found: Vec<Vec<&'static str>>,
    }
    impl Walk<'_> {
        fn visit(&mut self, v: &'static str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on_stack.insert(v);
            for &w in self.edges.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                loop {
                    let w = self.stack.pop().expect("v is on the stack");
                    self.on_stack.remove(w);
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for &v in edges.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.found
}

/// Which part defines each `Pe` method: the `fn`s of the `impl Pe {`
/// blocks of every file (a name defined in two parts names both).
fn pe_methods(sources: &[(PathBuf, String)]) -> BTreeMap<String, BTreeSet<&'static str>> {
    let mut methods: BTreeMap<String, BTreeSet<&'static str>> = BTreeMap::new();
    for (rel, text) in sources {
        let part = part_of(&module_of(rel));
        let mut in_pe = false;
        for line in text.lines() {
            if line.starts_with("impl") {
                in_pe = line.starts_with("impl Pe {");
            } else if line.starts_with('}') {
                in_pe = false;
            } else if in_pe {
                // `    fn name`, `    pub fn name`, `    pub(crate) fn name`…
                let Some(code) = line.strip_prefix("    ").filter(|c| !c.starts_with(' ')) else {
                    continue;
                };
                let code = match code.strip_prefix("pub") {
                    Some(rest) if rest.starts_with('(') => {
                        rest.split_once(") ").map_or(rest, |(_, after)| after)
                    }
                    Some(rest) => rest.trim_start(),
                    None => code,
                };
                {
                    if let Some(rest) = code.strip_prefix("fn ") {
                        let name: String = rest
                            .chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect();
                        methods.entry(name).or_default().insert(part);
                    }
                }
            }
        }
    }
    methods
}

/// The parts (other than its own) whose `Pe` methods one file calls: a
/// call on `pe`, `me` or `pe()`, or on `self` inside an `impl Pe` block.
fn method_uses(
    rel: &Path,
    text: &str,
    methods: &BTreeMap<String, BTreeSet<&'static str>>,
) -> BTreeSet<&'static str> {
    let own = part_of(&module_of(rel));
    let mut found = BTreeSet::new();
    let mut in_pe = false;
    for line in text.lines() {
        if line.starts_with("impl") {
            in_pe = line.starts_with("impl Pe {");
        } else if line.starts_with('}') {
            in_pe = false;
        }
        if line.trim_start().starts_with("//") {
            continue;
        }
        let receivers: &[&str] = if in_pe {
            &["pe.", "me.", "pe().", "self."]
        } else {
            &["pe.", "me.", "pe()."]
        };
        for receiver in receivers {
            for (at, _) in line.match_indices(receiver) {
                let before = line[..at].chars().next_back();
                if matches!(before, Some(c) if c.is_alphanumeric() || c == '_' || c == '.') {
                    continue;
                }
                let rest = &line[at + receiver.len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !rest[name.len()..].starts_with('(') {
                    continue;
                }
                for &part in methods.get(&name).into_iter().flatten() {
                    if part != own {
                        found.insert(part);
                    }
                }
            }
        }
    }
    found
}

/// Every source file of the core: (its path below `src/`, its text).
fn core_sources() -> Vec<(PathBuf, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(&file).expect("readable source");
            (
                file.strip_prefix(&src).expect("below src").to_path_buf(),
                text,
            )
        })
        .collect()
}

/// (file, part) pairs of `list` as a set.
fn pairs(list: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    list.iter()
        .map(|(f, m)| (f.to_string(), m.to_string()))
        .collect()
}

/// Which part uses which, over the core's source: (user, used) -> one file
/// of the user that does, for the message.
fn part_graph() -> BTreeMap<(&'static str, &'static str), String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let exports = root_exports(&std::fs::read_to_string(src.join("lib.rs")).expect("lib.rs"));
    let mut graph = BTreeMap::new();
    let sources = core_sources();
    let methods = pe_methods(&sources);
    let call_debts = pairs(CALL_DEBTS);
    for (rel, text) in &sources {
        let user = part_of(&module_of(rel));
        let file = rel.display().to_string();
        let calls = method_uses(rel, text, &methods)
            .into_iter()
            .filter(|used| !call_debts.contains(&(file.clone(), used.to_string())));
        for used in uses(rel, text, &exports).into_iter().chain(calls) {
            if used != user {
                graph.entry((user, used)).or_insert_with(|| file.clone());
            }
        }
    }
    graph
}

#[test]
fn no_circle_between_parts_of_the_core() {
    let graph = part_graph();
    let mut edges: BTreeMap<&'static str, BTreeSet<&'static str>> = BTreeMap::new();
    for &(user, used) in graph.keys() {
        edges.entry(user).or_default().insert(used);
    }
    let found = circles(&edges);
    let explain = |circle: &Vec<&'static str>| {
        let mut lines = vec![format!("    circle: {}", circle.join(", "))];
        for (&(user, used), file) in &graph {
            if circle.contains(&user) && circle.contains(&used) {
                lines.push(format!("        {user} -> {used} (in {file})"));
            }
        }
        lines.join("\n")
    };
    assert!(
        found.is_empty(),
        "parts of the core that use each other (DESIGN.md §3):\n{}",
        found.iter().map(explain).collect::<Vec<_>>().join("\n")
    );
}

/// Fails on an arrow of `found` that `listed` (a shrink-only list named
/// `list_name`) lacks, and on a listed one that is gone.
fn check_against(
    found: &BTreeSet<(String, String)>,
    listed: &[(&str, &str)],
    list_name: &str,
    what: &str,
) {
    let listed = pairs(listed);
    let show = |v: Vec<&(String, String)>| {
        v.iter()
            .map(|(f, m)| format!("    (\"{f}\", \"{m}\"),"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let new: Vec<_> = found.difference(&listed).collect();
    let paid: Vec<_> = listed.difference(found).collect();
    assert!(
        new.is_empty(),
        "{what} (DESIGN.md §3; the floors are in FLOORS):\n{}",
        show(new)
    );
    assert!(
        paid.is_empty(),
        "these no longer run up: remove them from {list_name}:\n{}",
        show(paid)
    );
}

#[test]
fn no_module_uses_a_floor_above_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let exports = root_exports(&std::fs::read_to_string(src.join("lib.rs")).expect("lib.rs"));
    let mut arrows = BTreeSet::new();
    for (rel, text) in core_sources() {
        arrows.extend(up_arrows(&rel, &text, &exports));
    }
    check_against(
        &arrows,
        DEBTS,
        "DEBTS",
        "modules that use a floor above their own",
    );
}

#[test]
fn no_module_calls_a_pe_method_of_a_floor_above_its_own() {
    let sources = core_sources();
    let methods = pe_methods(&sources);
    let mut calls = BTreeSet::new();
    for (rel, text) in &sources {
        let own = floor_of(&module_of(rel));
        for part in method_uses(rel, text, &methods) {
            if floor_of(part) > own {
                calls.insert((rel.display().to_string(), part.to_string()));
            }
        }
    }
    check_against(
        &calls,
        CALL_DEBTS,
        "CALL_DEBTS",
        "modules that call a `Pe` method of a floor above their own",
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
    // The PE names the state types below it; a subsystem above it is
    // an up-arrow, however it is spelt.
    let pe = up_arrows(
        Path::new("rt/pe.rs"),
        "use crate::cth::state::CthState;\nuse crate::cth::yield_now;",
        &exports,
    );
    let want: BTreeSet<(String, String)> = [("rt/pe.rs".to_string(), "cth".to_string())].into();
    assert_eq!(pe, want);
    // `super::` is the parent module; a visibility is no use.
    let state = up_arrows(
        Path::new("cth/state.rs"),
        "pub(in crate::cth) struct X;\nuse super::stack::StackPool;\nuse super::Thread;",
        &exports,
    );
    let want: BTreeSet<(String, String)> = [("cth/state.rs".to_string(), "cth".to_string())].into();
    assert_eq!(state, want);
    assert_eq!(part_of("cth::stack"), "cth::stack");
    // A `Pe` method belongs to the part whose `impl Pe` defines it; a call
    // on `pe.`, or on `self.` inside `impl Pe`, uses that part; `self.` in
    // another type's impl does not.
    let sources = vec![
        (
            PathBuf::from("csd/deliver.rs"),
            "impl Pe {\n    pub fn deliver(&self) {}\n    pub(crate) fn other(&self) {}\n}\n"
                .to_string(),
        ),
        (
            PathBuf::from("cth/mod.rs"),
            "fn f(pe: &Pe) {\n    pe.deliver();\n}\n".to_string(),
        ),
    ];
    let methods = pe_methods(&sources);
    assert_eq!(methods["deliver"], BTreeSet::from(["csd"]));
    assert_eq!(methods["other"], BTreeSet::from(["csd"]));
    assert_eq!(
        method_uses(&sources[1].0, &sources[1].1, &methods),
        BTreeSet::from(["csd"])
    );
    let in_other_impl = "impl Thread {\n    fn g(&self) {\n        self.other();\n    }\n}\n";
    assert!(method_uses(Path::new("cth/mod.rs"), in_other_impl, &methods).is_empty());
    let in_pe_impl = "impl Pe {\n    fn g(&self) {\n        self.other();\n    }\n}\n";
    assert_eq!(
        method_uses(Path::new("cth/mod.rs"), in_pe_impl, &methods),
        BTreeSet::from(["csd"])
    );
    assert_eq!(part_of("cth::migrate"), "cth");
    // A circle is found, with every part in it, and only then.
    let graph = |pairs: &[(&'static str, &'static str)]| {
        let mut edges: BTreeMap<&'static str, BTreeSet<&'static str>> = BTreeMap::new();
        for &(a, b) in pairs {
            edges.entry(a).or_default().insert(b);
        }
        edges
    };
    assert_eq!(
        circles(&graph(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")])),
        vec![vec!["a", "b", "c"]]
    );
    assert!(circles(&graph(&[("a", "b"), ("b", "c"), ("a", "c")])).is_empty());
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
