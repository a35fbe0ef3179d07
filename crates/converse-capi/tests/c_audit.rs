//! The audit of Charm++'s Converse names (`docs/c-abi-names.tsv`): every
//! name listed `there` is declared by the headers in `include/` (and, for a
//! function, exported by `libconverse_capi.a` or defined in a header), and
//! every program-callable name listed `absent` that
//! `include/converse-rs/absent.h` declares is a compile error naming it.
//!
//! A few compiler runs in all: one C file referencing every `there` name,
//! compiled and linked with `convcc`; one C++ file doing the same by
//! using-declarations; one C and one C++ file calling every name of
//! `absent.h`, expected to fail.
mod common;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Once;

/// The headers the list must cover (Charm++'s paths).
const CHARM_HEADERS: &[&str] = &[
    "conv-core/converse.h",
    "conv-core/conv-config.h",
    "conv-core/queueing.h",
    "conv-core/conv-cpath.h",
    "conv-core/conv-cpm.h",
    "conv-core/conv-random.h",
    "conv-core/cpthreads.h",
    "conv-ccs/conv-ccs.h",
    "conv-ccs/ccs-client.h",
    "conv-ccs/ccs-auth.h",
    "conv-ldb/cldb.h",
    "util/pup_c.h",
];

const KINDS: &[&str] = &["function", "macro", "type", "constant", "variable"];

/// The marker of a program-callable absent name deliberately left out of
/// `absent.h` (its note says why).
const NOT_IN_ABSENT_H: &str = "not in absent.h";

#[derive(Debug)]
struct Row {
    line: usize,
    name: String,
    header: String,
    kind: String,
    status: String,
    note: String,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("include")
}

/// The list, checked for its shape: five columns, known kinds and statuses.
fn rows() -> Vec<Row> {
    let path = repo().join("docs/c-abi-names.tsv");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let mut rows = Vec::new();
    let mut bad = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if i == 0 || line.trim().is_empty() {
            continue; // the column names
        }
        let cols: Vec<&str> = line.split('\t').collect();
        if cols.len() != 5 {
            bad.push(format!("line {}: {} columns: {line}", i + 1, cols.len()));
            continue;
        }
        let row = Row {
            line: i + 1,
            name: cols[0].to_owned(),
            header: cols[1].to_owned(),
            kind: cols[2].to_owned(),
            status: cols[3].to_owned(),
            note: cols[4].to_owned(),
        };
        if !KINDS.contains(&row.kind.as_str()) {
            bad.push(format!(
                "line {}: {}: kind `{}`",
                row.line, row.name, row.kind
            ));
        }
        if row.status != "there" && row.status != "absent" {
            bad.push(format!(
                "line {}: {}: status `{}`",
                row.line, row.name, row.status
            ));
        }
        if row.status == "absent" && row.note.is_empty() {
            bad.push(format!(
                "line {}: {}: absent without a reason",
                row.line, row.name
            ));
        }
        let ident = row.name.strip_prefix("struct ").unwrap_or(&row.name);
        if ident.is_empty() || !ident.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            bad.push(format!("line {}: `{}` is not a name", row.line, row.name));
        }
        rows.push(row);
    }
    assert!(bad.is_empty(), "docs/c-abi-names.tsv:\n{}", bad.join("\n"));
    rows
}

/// The bare identifier of a name (`struct X` is `X`).
fn ident(name: &str) -> &str {
    name.strip_prefix("struct ").unwrap_or(name)
}

/// Every public header, the pthread renaming ones last (they rename the
/// system's pthread names for what follows).
fn our_headers() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(include_dir())
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.ends_with(".h").then_some(name)
        })
        .collect();
    names.sort_by_key(|n| (n == "cpthreads.h" || n == "cthreads.h", n.clone()));
    names
}

fn includes(extra: &[&str]) -> String {
    let mut s = String::new();
    for h in our_headers()
        .iter()
        .map(String::as_str)
        .chain(extra.iter().copied())
    {
        writeln!(s, "#include \"{h}\"").unwrap();
    }
    s
}

/// `libconverse_capi.a` and `convcc`, built once (`cargo test` builds the
/// library as an rlib only).
fn build_library() {
    static BUILT: Once = Once::new();
    BUILT.call_once(|| {
        let profile = common::profile_dir();
        let target = profile.parent().unwrap();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(cargo);
        build
            .args(["build", "-p", "converse-capi", "--target-dir"])
            .arg(target);
        if profile.file_name().is_some_and(|n| n == "release") {
            build.arg("--release");
        }
        let st = build.status().expect("cargo runs");
        assert!(st.success(), "building libconverse_capi.a failed");
        assert!(profile.join("libconverse_capi.a").exists());
    });
}

fn scratch(name: &str) -> PathBuf {
    let dir = common::profile_dir()
        .join("c-tests")
        .join("audit")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn compiler(var: &str, default: &str) -> Command {
    Command::new(std::env::var(var).unwrap_or_else(|_| default.to_owned()))
}

fn run(mut cmd: Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A generated source whose lines are tied to names: the compiler's errors
/// are read back as the names they are about.
#[derive(Default)]
struct Source {
    text: String,
    lines: usize,
    owner: HashMap<usize, String>,
}

impl Source {
    fn raw(&mut self, s: &str) {
        for l in s.lines() {
            self.text.push_str(l);
            self.text.push('\n');
            self.lines += 1;
        }
    }
    /// Lines about `name`.
    fn about(&mut self, name: &str, s: &str) {
        for l in s.lines() {
            self.text.push_str(l);
            self.text.push('\n');
            self.lines += 1;
            self.owner.insert(self.lines, name.to_owned());
        }
    }
    /// The names whose lines the compiler reported errors on, with the
    /// error lines; errors elsewhere are returned under "".
    fn errors(&self, file: &str, output: &str) -> Vec<(String, String)> {
        let mut found = Vec::new();
        for l in output.lines() {
            if !l.contains("error:") {
                continue; // notes, and the compiler's echo of the source
            }
            let owner = l
                .find(&format!("{file}:"))
                .and_then(|i| {
                    l[i + file.len() + 1..]
                        .split(':')
                        .next()?
                        .parse::<usize>()
                        .ok()
                })
                .and_then(|n| self.owner.get(&n).cloned())
                .unwrap_or_default();
            found.push((owner, l.to_owned()));
        }
        found
    }
}

/// The reference a C file makes to a `there` name of each kind, proving it
/// declared (and, for functions and variables, linked).
fn c_reference(src: &mut Source, row: &Row, i: usize) {
    let n = &row.name;
    let id = ident(n);
    match row.kind.as_str() {
        "function" => src.about(
            n,
            &format!(
                "#ifndef {id}\nvoid (*const audit_fn_{i})(void) = (void (*)(void))&{id};\n#endif"
            ),
        ),
        "variable" => {
            let access = if row.note.starts_with("Cpv") {
                format!("&CpvAccess({id})")
            } else if row.note.starts_with("Csv") {
                format!("&CsvAccess({id})")
            } else if row.note.starts_with("Ctv") {
                format!("&CtvAccess({id})")
            } else {
                format!("&{id}")
            };
            src.about(
                n,
                &format!("const void *audit_var_{i}(void) {{ return (const void *){access}; }}"),
            );
        }
        "type" => src.about(n, &format!("{n} *audit_type_{i};")),
        "constant" => src.about(
            n,
            &format!("long audit_const_{i}(void) {{ return (long)({id}); }}"),
        ),
        _ => src.about(
            n,
            &format!("#ifndef {id}\n#error \"{id}: listed there, not a macro\"\n#endif"),
        ),
    }
}

fn cxx_reference(src: &mut Source, row: &Row, i: usize) {
    let n = &row.name;
    let id = ident(n);
    match row.kind.as_str() {
        "macro" => src.about(
            n,
            &format!("#ifndef {id}\n#error \"{id}: listed there, not a macro\"\n#endif"),
        ),
        "variable" if row.note.starts_with("Cpv") || row.note.starts_with("Csv") => {
            let m = &row.note[..3];
            src.about(
                n,
                &format!("void *audit_var_{i}() {{ return (void *)&{m}Access({id}); }}"),
            );
        }
        "variable" if row.note.starts_with("Ctv") => {
            src.about(
                n,
                &format!("void *audit_var_{i}() {{ return (void *)&CtvAccess({id}); }}"),
            );
        }
        // A using-declaration names functions (overloaded too), variables,
        // types and enumerators alike; a macro stands for itself.
        _ => src.about(
            n,
            &format!("#ifndef {id}\nnamespace audit_ {{ using ::{id}; }}\n#endif"),
        ),
    }
}

/// Names of `undefined reference to `X'` lines.
fn undefined_references(output: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for l in output.lines() {
        if let Some(i) = l.find("undefined reference to `") {
            let rest = &l[i + "undefined reference to `".len()..];
            if let Some(end) = rest.find('\'') {
                names.insert(rest[..end].to_owned());
            }
        }
    }
    names
}

fn report(errors: &[(String, String)]) -> String {
    let mut by_name: Vec<String> = errors
        .iter()
        .filter(|(n, _)| !n.is_empty())
        .map(|(n, _)| n.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if errors.iter().any(|(n, _)| n.is_empty()) {
        by_name.push("(errors outside the names' lines, below)".into());
    }
    let lines: Vec<&str> = errors.iter().map(|(_, l)| l.as_str()).take(200).collect();
    format!("{}\n\n{}", by_name.join("\n"), lines.join("\n"))
}

#[test]
fn the_list_has_every_header_and_no_name_twice() {
    let rows = rows();
    assert!(
        rows.len() > 100,
        "docs/c-abi-names.tsv has {} names",
        rows.len()
    );
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut twice = Vec::new();
    for r in &rows {
        if let Some(first) = seen.insert(&r.name, r.line) {
            twice.push(format!("{} (lines {first} and {})", r.name, r.line));
        }
    }
    assert!(twice.is_empty(), "listed twice:\n{}", twice.join("\n"));
    let headers: HashSet<&str> = rows.iter().map(|r| r.header.as_str()).collect();
    let missing: Vec<&&str> = CHARM_HEADERS
        .iter()
        .filter(|h| !headers.contains(**h))
        .collect();
    assert!(missing.is_empty(), "no names of {missing:?}");
}

#[test]
fn every_name_listed_there_is_declared_and_linked() {
    let rows = rows();
    let there: Vec<&Row> = rows.iter().filter(|r| r.status == "there").collect();
    assert!(!there.is_empty());

    // C: references, compiled, then linked against libconverse_capi.a.
    let mut c = Source::default();
    c.raw(&includes(&[]));
    for (i, r) in there.iter().enumerate() {
        c_reference(&mut c, r, i);
    }
    c.raw("int main(void) { return 0; }");
    let dir = scratch("there");
    std::fs::write(dir.join("there.c"), &c.text).unwrap();
    let mut cc = compiler("CC", "cc");
    cc.args([
        "-std=gnu11",
        "-fmax-errors=0",
        "-c",
        "there.c",
        "-o",
        "there.o",
        "-I",
    ])
    .arg(include_dir())
    .current_dir(&dir);
    let out = run(cc);
    let mut failures = Vec::new();
    if !out.status.success() {
        let errors = c.errors("there.c", &text(&out));
        failures.push(format!("C: not declared as listed:\n{}", report(&errors)));
    } else {
        build_library();
        let mut link = Command::new(env!("CARGO_BIN_EXE_convcc"));
        link.args(["there.o", "-o", "there"])
            .env("CONVERSE_LIB", common::profile_dir())
            .current_dir(&dir);
        let out = run(link);
        if !out.status.success() {
            let all = text(&out);
            let names = undefined_references(&all);
            failures.push(format!(
                "C: declared but not exported by libconverse_capi.a:\n{}\n\n{all}",
                names.into_iter().collect::<Vec<_>>().join("\n")
            ));
        }
    }

    // C++: the same names by using-declarations (and #ifndef for macros).
    let mut cxx = Source::default();
    cxx.raw(&includes(&[]));
    for (i, r) in there.iter().enumerate() {
        cxx_reference(&mut cxx, r, i);
    }
    cxx.raw("int main() { return 0; }");
    std::fs::write(dir.join("there.cc"), &cxx.text).unwrap();
    let mut cxxc = compiler("CXX", "c++");
    cxxc.args([
        "-std=c++17",
        "-fmax-errors=0",
        "-fsyntax-only",
        "there.cc",
        "-I",
    ])
    .arg(include_dir())
    .current_dir(&dir);
    let out = run(cxxc);
    if !out.status.success() {
        let errors = cxx.errors("there.cc", &text(&out));
        failures.push(format!("C++: not declared as listed:\n{}", report(&errors)));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The names `absent.h` declares absent.
fn absent_h_names() -> Vec<String> {
    let path = include_dir().join("converse-rs/absent.h");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("CONVERSE_RS_ABSENT_("))
        .filter_map(|rest| rest.split(',').next())
        .map(|n| n.trim().to_owned())
        .filter(|n| n != "name") // the macro's own definition
        .collect()
}

#[test]
fn absent_h_declares_the_absent_functions_and_each_call_is_an_error_naming_it() {
    let rows = rows();
    let declared = absent_h_names();
    assert!(!declared.is_empty(), "absent.h declares nothing");
    let by_name: HashMap<&str, &Row> = rows.iter().map(|r| (r.name.as_str(), r)).collect();
    let mut problems = Vec::new();
    // What absent.h declares is listed absent and callable.
    for n in &declared {
        match by_name.get(n.as_str()) {
            None => problems.push(format!("{n}: in absent.h, not in docs/c-abi-names.tsv")),
            Some(r) if r.status != "absent" || r.kind != "function" => problems.push(format!(
                "{n}: in absent.h, listed {} {} (line {})",
                r.status, r.kind, r.line
            )),
            Some(_) => {}
        }
    }
    // Every absent callable name is in absent.h, or says why not.
    let declared_set: HashSet<&str> = declared.iter().map(String::as_str).collect();
    for r in &rows {
        if r.status == "absent"
            && r.kind == "function"
            && !declared_set.contains(r.name.as_str())
            && !r.note.contains(NOT_IN_ABSENT_H)
        {
            problems.push(format!(
                "{}: absent function (line {}) neither in absent.h nor marked `{NOT_IN_ABSENT_H}`",
                r.name, r.line
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));

    // Each call fails to compile, with an error naming the call's name and
    // saying it is not in converse-rs: in C and in C++.
    let dir = scratch("absent");
    for (file, compiler_var, default, std) in [
        ("calls.c", "CC", "cc", "-std=gnu11"),
        ("calls.cc", "CXX", "c++", "-std=c++17"),
    ] {
        let mut src = Source::default();
        src.raw(&includes(&[]));
        src.raw("void audit_calls_(void) {");
        for n in &declared {
            src.about(n, &format!("  {n}();"));
        }
        src.raw("}");
        src.raw("int main(void) { audit_calls_(); return 0; }");
        std::fs::write(dir.join(file), &src.text).unwrap();
        let mut cmd = compiler(compiler_var, default);
        cmd.args([std, "-fmax-errors=0", "-c", file, "-o", "/dev/null", "-I"])
            .arg(include_dir())
            .current_dir(&dir);
        let out = run(cmd);
        let all = text(&out);
        assert!(
            !out.status.success(),
            "{file}: calling absent names compiled"
        );
        let named: HashSet<&str> = all
            .lines()
            .filter(|l| l.contains("error:") && l.contains("not in converse-rs"))
            .flat_map(|l| {
                declared
                    .iter()
                    .filter(move |n| l.contains(&format!("{n} is not in converse-rs")))
                    .map(String::as_str)
            })
            .collect();
        let unnamed: Vec<&String> = declared
            .iter()
            .filter(|n| !named.contains(n.as_str()))
            .collect();
        // Errors that are not absent.h's (a header that does not compile).
        let stray: Vec<&str> = all
            .lines()
            .filter(|l| l.contains("error:") && !l.contains("not in converse-rs"))
            .take(50)
            .collect();
        assert!(
            unnamed.is_empty() && stray.is_empty(),
            "{file}: calls without an error naming them:\n{}\n\nother errors:\n{}",
            unnamed
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            stray.join("\n")
        );
    }
}
