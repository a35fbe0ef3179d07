//! The C headers' prototypes against the library's exported functions
//! (issue 44), in the way of rust-lang/libc's `ctest`: the declarations
//! are derived from the C side and checked against the Rust definitions.
//! Nothing else compares them: a mismatch compiles on both sides and is
//! undefined behaviour at run time.
//!
//! # What is compared
//!
//! - The C side: bindgen (loading libclang at run time) over one wrapper
//!   that includes every header under `include/`, but with what
//!   `converse-rs/absent.h` declares left out (blocklisted: Charm++'s
//!   names that are deliberately *not* implemented, each marked so that a
//!   use is a compile error), plus the declarations of `convcc`'s seed
//!   balancer object (`src/cld_shim.c`), which calls
//!   the library's `CmiCldDefault…_` names and defines Charm++'s `Cld…`
//!   names over them. The headers are read as C and again as C++ (they
//!   have `#ifdef __cplusplus` parts): both views must declare the same
//!   functions with the same signatures, all with C linkage. `static
//!   inline` functions and macros are not declarations: bindgen leaves
//!   them out, and they are not checked.
//! - The Rust side: `syn` over `src/**/*.rs` (`src/bin/` aside: binaries
//!   export nothing to C programs), every `fn` or `static` with
//!   `#[unsafe(no_mangle)]`, `#[no_mangle]` or `export_name`, including
//!   those that the crate's own `macro_rules!` macros generate (expanded
//!   here), with the crate's `type` aliases resolved (the same file's
//!   first).
//! - Every function declared is exported (or defined by `convcc`'s object,
//!   or allowed in `NOT_EXPORTED`), and every export is declared (or
//!   allowed in `UNDECLARED`); each pair must match.
//!
//! # The rules (after canonicalisation)
//!
//! - Scalars are compared by representation on this target: `c_int` and
//!   `int` are `i32`, `c_long` and `size_t` are `i64`/`u64` on LP64, and so
//!   on. Signedness counts (some ABIs extend signed and unsigned values
//!   differently); `bool` is C's `_Bool`.
//! - `extern "C"` and `extern "C-unwind"` are the same ABI; an export
//!   without an extern ABI is a mismatch; `unsafe fn` or not does not
//!   matter. `-> !` is `void` (C's `noreturn`).
//! - Arity, variadics and the return type must match exactly.
//! - Function pointers: bindgen gives every C function pointer as
//!   `Option<fn>` (C may pass NULL). Where a value flows from C into Rust
//!   (a parameter; what a callback returns) a bare Rust `fn` type is
//!   reported: a null one is undefined behaviour the moment it exists.
//!   Where Rust hands it to C (a return value; a callback's arguments) a
//!   bare `fn` is fine, it is never null.
//! - `*const T` against `*mut T`: reported only where it can break a
//!   promise. A parameter the C header takes as `const T *` must not be
//!   `*mut T` in Rust (callers pass string literals and read-only data); a
//!   return value C declares writable (`T *`) must not be `*const T` in
//!   Rust. Behind a pointer (`T **`, where either side may write) the
//!   qualifiers must be equal. The harmless directions (Rust takes
//!   `*const` where C says `T *`; returns `*mut` where C says `const T *`)
//!   pass.
//!   Where a side cannot write through a pointer (Rust's `*const`
//!   parameter, C's `const T *` return), what it points at flows one way
//!   only and is judged as the pointer is (`char **argv` may be
//!   `*const *const c_char` in Rust).
//! - Pointees must match: `c_void` matches only `void`; structs and
//!   unions (opaque or not) by name: the C struct's tag or one of its
//!   typedef names, or an entry of `ALIASES` for the few Rust names that
//!   differ on purpose. A struct passed or returned by value: by name and
//!   size (bindgen's layout on the C side, the `#[repr(C)]` layout
//!   computed from the Rust fields on the other). A struct behind a
//!   pointer that C defines (the program allocates it: a
//!   `Cpthread_mutex_t` on its stack) must not be larger in Rust; smaller
//!   is fine (Rust reads a `prio_struct`'s head only).
//! - Exported variables (`gamma_errno`) by type; an atomic is its value
//!   type (same size and representation).
//!
//! Without libclang the test says `prototypes: skipped` and passes,
//! unless `CONVERSE_TEST_PROTOTYPES` is set (CI sets it where it installs
//! libclang-dev).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use proc_macro2::{Delimiter, Group, TokenStream, TokenTree};
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::parse::discouraged::Speculative;
use syn::parse::{ParseStream, Parser};
use syn::visit::Visit;

/// Set: a missing libclang fails the test instead of skipping it.
const REQUIRE: &str = "CONVERSE_TEST_PROTOTYPES";

/// Struct names that differ between the headers (first) and the Rust side
/// (second) on purpose: Rust's names follow Rust's naming (CamelCase, a
/// `C` suffix where the Rust core has a type of the C name). A Rust name
/// equal to a C typedef of the struct (`CrnStream` for `struct rngen_`)
/// needs no entry.
const ALIASES: &[(&str, &str)] = &[
    // Opaque to C: the Rust queue a `Queue` points at.
    ("Queue_struct", "CqsQueue"),
    // Rust reads a priority's head (bits, ints); its words follow it.
    ("prio_struct", "PrioHead"),
    // `CPath`, `Cfuture` and `GlobalPtr` are the Rust core's own types.
    ("CPath", "CPathC"),
    ("Cfuture_s", "CfutureC"),
    ("GlobalPtr", "CGlobalPtr"),
    // A CtvDeclare'd variable's descriptor.
    ("CmiCtvDesc_", "CtvDesc"),
    // CamelCase spellings of the C typedefs.
    ("skt_ip_t", "SktIp"),
    ("time_586", "Time586"),
    ("CcsSec_secretKey", "CcsSecSecretKey"),
    // The Cpthreads types, as ext_cpthreads names them; a mutex and a
    // condition variable have the same storage in Rust (the magic word,
    // the owning PE, the boxed Rust object).
    ("Cpthread_attr_s", "AttrC"),
    ("Cpthread_mutexattr_s", "MutexAttrC"),
    ("Cpthread_condattr_s", "CondAttrC"),
    ("Cpthread_once_s", "OnceC"),
    ("Cpthread_mutex_s", "ObjectC"),
    ("Cpthread_cond_s", "ObjectC"),
];

/// Functions whose mismatch is known and left as it is, with the reason.
/// An entry whose function matches fails the test (remove it).
const ALLOWED: &[(&str, &str)] = &[];

/// Exports that no header declares, on purpose.
const UNDECLARED: &[(&str, &str)] = &[];

/// Declared functions that the library does not export, on purpose.
const NOT_EXPORTED: &[(&str, &str)] = &[];

#[test]
fn header_prototypes_match_the_exported_functions() {
    let start = Instant::now();
    if !libclang_loads() {
        assert!(
            std::env::var_os(REQUIRE).is_none(),
            "prototypes: no libclang, and {REQUIRE} is set (apt-get install libclang-dev)"
        );
        println!("prototypes: skipped (no libclang; apt-get install libclang-dev)");
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let include = std::fs::canonicalize(root.join("include")).unwrap();
    let shim = cld_shim(&root.join("src/cld_shim.c"));
    let headers = headers(&include);

    let c = CSide::generate(&include, &headers, Some(&shim.text));
    let cxx = CSide::generate(&include, &headers, None);
    let rust = RustSide::read(&root.join("src"));

    let mut report = Report::default();
    report.problems.extend(rust.problems.iter().cloned());
    compare_views(&c, &cxx, &shim, &mut report);
    check(&c, &rust, &shim, &include, &headers, true, &mut report);

    let checked = c.fns.len() + c.statics.len();
    println!(
        "prototypes: {checked} declarations checked (C and C++), {} exports, in {:.1} s",
        rust.fns.len() + rust.statics.len(),
        start.elapsed().as_secs_f64()
    );
    for line in &report.allowed {
        println!("allowed: {line}");
    }
    assert!(
        report.problems.is_empty(),
        "{} prototype problem(s):\n\n{}",
        report.problems.len(),
        report.problems.join("\n\n")
    );
}

#[derive(Default)]
struct Report {
    problems: Vec<String>,
    allowed: Vec<String>,
}

/// True if bindgen can load libclang (it panics where it cannot; the
/// panic's message, printed, says where it looked; the panic hook is left
/// alone, the other test may be panicking at the same time).
fn libclang_loads() -> bool {
    std::panic::catch_unwind(bindgen::clang_version).is_ok()
}

/// Every header under `include/`, relative to it: `converse.h` first (the
/// `converse-rs/` parts expect it first), `absent.h` left out.
fn headers(include: &Path) -> Vec<String> {
    fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, base, out);
            } else if path.extension().is_some_and(|e| e == "h") {
                let rel = path.strip_prefix(base).unwrap().to_string_lossy();
                out.push(rel.replace('\\', "/"));
            }
        }
    }
    let mut out = Vec::new();
    walk(include, include, &mut out);
    out.retain(|h| !is_absent_h(h));
    out.sort_by_key(|h| (h != "converse.h", h.clone()));
    out
}

fn is_absent_h(path: &str) -> bool {
    path.ends_with("absent.h")
}

// ---- convcc's seed-balancer object ------------------------------------

/// `src/cld_shim.c` (convcc's `CLD_SHIM_C`): its text, the library functions it declares (and calls),
/// and the functions it defines (weak, for programs without their own).
struct Shim {
    text: String,
    declares: BTreeSet<String>,
    defines: BTreeSet<String>,
}

fn cld_shim(source: &Path) -> Shim {
    let text = std::fs::read_to_string(source).unwrap();
    let (mut declares, mut defines) = (BTreeSet::new(), BTreeSet::new());
    for line in text.lines() {
        let Some(name) = declared_name(line) else {
            continue;
        };
        if line.contains("__attribute__((weak") {
            defines.insert(name);
        } else if line.starts_with("extern ") {
            declares.insert(name);
        }
    }
    Shim {
        text,
        declares,
        defines,
    }
}

/// The function a one-line C declaration or definition names: the
/// identifier before its first `(` that is not `__attribute__`.
fn declared_name(line: &str) -> Option<String> {
    let line = line.replace("__attribute__((weak))", "");
    let line = line.split("__attribute__").next()?;
    let open = line.find('(')?;
    let name: String = line[..open]
        .chars()
        .rev()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    (!name.is_empty() && !line.trim_start().starts_with(['/', '*', '#'])).then_some(name)
}

// ---- canonical types ----------------------------------------------------

/// A type as the ABI sees it.
#[derive(Clone, Debug, PartialEq)]
enum Ty {
    /// C's `void`, Rust's `()`, `!` and (as a pointee) `c_void`.
    Void,
    /// A scalar by representation: `i32`, `u64`, `f64`, `bool`.
    Prim(String),
    Ptr {
        mutable: bool,
        to: Box<Ty>,
    },
    /// A function pointer; `nullable`: Rust's `Option<fn>` (bindgen gives
    /// every C one so).
    Fn {
        nullable: bool,
        args: Vec<Ty>,
        ret: Box<Ty>,
        variadic: bool,
    },
    /// A struct or union, by name.
    Named(String),
    Array(Box<Ty>, usize),
    /// Not a type this check understands; the reason.
    Bad(String),
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ty::Void => f.write_str("void"),
            Ty::Prim(p) => f.write_str(p),
            Ty::Ptr { mutable, to } => {
                write!(f, "*{} {to}", if *mutable { "mut" } else { "const" })
            }
            Ty::Fn {
                nullable,
                args,
                ret,
                variadic,
            } => {
                let args: Vec<String> = args.iter().map(Ty::to_string).collect();
                let dots = if *variadic { ", ..." } else { "" };
                let fun = format!("fn({}{dots}) -> {ret}", args.join(", "));
                if *nullable {
                    write!(f, "Option<{fun}>")
                } else {
                    f.write_str(&fun)
                }
            }
            Ty::Named(n) => f.write_str(n),
            Ty::Array(t, n) => write!(f, "[{t}; {n}]"),
            Ty::Bad(why) => write!(f, "?({why})"),
        }
    }
}

/// A scalar's canonical name, from a C or Rust spelling.
fn prim(name: &str) -> Option<String> {
    use std::ffi::{c_char, c_long};
    let int = |signed: bool, bytes: usize| {
        Some(format!("{}{}", if signed { 'i' } else { 'u' }, bytes * 8))
    };
    let long = size_of::<c_long>();
    let word = size_of::<usize>();
    match name {
        "i8" | "i16" | "i32" | "i64" | "i128" | "u8" | "u16" | "u32" | "u64" | "u128" | "f32"
        | "f64" | "bool" => Some(name.to_string()),
        // Signed on x86-64, unsigned on AArch64 Linux: as the target has it.
        "c_char" => int(c_char::MIN != 0, 1),
        "c_schar" => int(true, 1),
        "c_uchar" => int(false, 1),
        "c_short" => int(true, 2),
        "c_ushort" => int(false, 2),
        "c_int" => int(true, 4),
        "c_uint" => int(false, 4),
        "c_long" => int(true, long),
        "c_ulong" => int(false, long),
        "c_longlong" => int(true, 8),
        "c_ulonglong" => int(false, 8),
        "c_float" => Some("f32".into()),
        "c_double" => Some("f64".into()),
        "usize" | "size_t" | "uintptr_t" => int(false, word),
        "isize" | "ssize_t" | "intptr_t" | "ptrdiff_t" => int(true, word),
        _ => None,
    }
}

/// The value type of a `std::sync::atomic` type (same size and
/// representation).
fn atomic(name: &str) -> Option<&'static str> {
    Some(match name {
        "AtomicBool" => "bool",
        "AtomicI8" => "i8",
        "AtomicU8" => "u8",
        "AtomicI16" => "i16",
        "AtomicU16" => "u16",
        "AtomicI32" => "i32",
        "AtomicU32" => "u32",
        "AtomicI64" => "i64",
        "AtomicU64" => "u64",
        "AtomicIsize" => "isize",
        "AtomicUsize" => "usize",
        _ => return None,
    })
}

/// A struct or union definition (either side).
struct Record {
    file: usize,
    fields: Vec<syn::Type>,
    union: bool,
    /// `#[repr(C)]` or `#[repr(transparent)]` (bindgen's always are).
    repr_c: bool,
}

/// Type aliases and records of one side; `file` tells apart the Rust
/// side's files (one alias name may mean different things in two
/// modules), the C side has one.
#[derive(Default)]
struct Types {
    aliases: HashMap<String, Vec<(usize, syn::Type)>>,
    records: HashMap<String, Vec<Record>>,
    /// Integer constants (array lengths), by name.
    consts: HashMap<String, Vec<(usize, usize)>>,
    /// The C side's typedef names of each struct (`typedef struct rngen_
    /// {…} CrnStream`): a Rust struct may be named after either.
    typedefs: HashMap<String, Vec<String>>,
}

impl Types {
    fn add_alias(&mut self, file: usize, name: String, ty: syn::Type) {
        self.aliases.entry(name).or_default().push((file, ty));
    }

    fn add_record(
        &mut self,
        file: usize,
        name: String,
        fields: &syn::Fields,
        union: bool,
        attrs: &[syn::Attribute],
    ) {
        let fields = fields.iter().map(|f| f.ty.clone()).collect();
        // `packed` and `align(N)` layouts are not computed here: such a
        // struct counts as not `repr(C)` (its size is then unknown).
        let repr_c = attrs.iter().any(|a| {
            a.path().is_ident("repr") && {
                let t = a.meta.to_token_stream().to_string();
                (t.contains('C') || t.contains("transparent"))
                    && !t.contains("packed")
                    && !t.contains("align")
            }
        });
        self.records.entry(name).or_default().push(Record {
            file,
            fields,
            union,
            repr_c,
        });
    }

    /// The alias `name` as seen from `file`: that file's own, else the
    /// only one.
    fn alias(&self, name: &str, file: usize) -> Option<(usize, &syn::Type)> {
        let all = self.aliases.get(name)?;
        let own = all.iter().find(|(f, _)| *f == file);
        let (f, ty) = own.or_else(|| (all.len() == 1).then(|| &all[0]))?;
        Some((*f, ty))
    }

    fn canon(&self, ty: &syn::Type, file: usize) -> Ty {
        self.canon_at(ty, file, 0)
    }

    fn canon_at(&self, ty: &syn::Type, file: usize, depth: u32) -> Ty {
        use syn::Type as T;
        if depth > 32 {
            return Ty::Bad("aliases nest too deep".into());
        }
        let again = |t: &syn::Type| self.canon_at(t, file, depth + 1);
        match ty {
            T::Group(g) => again(&g.elem),
            T::Paren(p) => again(&p.elem),
            T::Tuple(t) if t.elems.is_empty() => Ty::Void,
            T::Never(_) => Ty::Void,
            T::Ptr(p) => Ty::Ptr {
                mutable: p.mutability.is_some(),
                to: Box::new(again(&p.elem)),
            },
            T::Array(a) => match &a.len {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Int(n),
                    ..
                }) => Ty::Array(Box::new(again(&a.elem)), n.base10_parse().unwrap()),
                syn::Expr::Path(p) => {
                    let name = p.path.segments.last().unwrap().ident.to_string();
                    let all = self
                        .consts
                        .get(&name)
                        .map(Vec::as_slice)
                        .unwrap_or_default();
                    let own = all.iter().find(|(f, _)| *f == file);
                    match own.or_else(|| (all.len() == 1).then(|| &all[0])) {
                        Some((_, n)) => Ty::Array(Box::new(again(&a.elem)), *n),
                        None => Ty::Bad(format!("an array of length `{name}`")),
                    }
                }
                _ => Ty::Bad(format!("an array of length `{}`", show(&a.len))),
            },
            T::BareFn(f) => {
                let abi = f
                    .abi
                    .as_ref()
                    .map(|a| a.name.as_ref().map_or("C".into(), |n| n.value()));
                match abi.as_deref() {
                    Some("C" | "C-unwind") => {}
                    Some(other) => return Ty::Bad(format!("an extern \"{other}\" fn pointer")),
                    None => return Ty::Bad("a fn pointer with the Rust ABI".into()),
                }
                Ty::Fn {
                    nullable: false,
                    args: f.inputs.iter().map(|a| again(&a.ty)).collect(),
                    ret: Box::new(match &f.output {
                        syn::ReturnType::Default => Ty::Void,
                        syn::ReturnType::Type(_, t) => again(t),
                    }),
                    variadic: f.variadic.is_some(),
                }
            }
            T::Reference(_) => Ty::Bad(format!(
                "a reference `{}` (C may pass NULL: a raw pointer or Option<&T>)",
                show(ty)
            )),
            T::Path(p) if p.qself.is_none() => {
                let seg = p.path.segments.last().unwrap();
                let name = seg.ident.to_string();
                let generic = match &seg.arguments {
                    syn::PathArguments::AngleBracketed(a) => a.args.iter().find_map(|g| match g {
                        syn::GenericArgument::Type(t) => Some(t),
                        _ => None,
                    }),
                    _ => None,
                };
                if name == "Option" {
                    let Some(inner) = generic else {
                        return Ty::Bad("Option without a type".into());
                    };
                    if let T::Reference(r) = inner {
                        return Ty::Ptr {
                            mutable: r.mutability.is_some(),
                            to: Box::new(again(&r.elem)),
                        };
                    }
                    return match again(inner) {
                        Ty::Fn {
                            args,
                            ret,
                            variadic,
                            ..
                        } => Ty::Fn {
                            nullable: true,
                            args,
                            ret,
                            variadic,
                        },
                        other => Ty::Bad(format!("Option<{other}>")),
                    };
                }
                if name == "c_void" {
                    return Ty::Void;
                }
                if let Some(p) = prim(&name) {
                    return Ty::Prim(p);
                }
                if let Some(value) = atomic(&name) {
                    return Ty::Prim(prim(value).unwrap());
                }
                if name == "AtomicPtr"
                    && let Some(t) = generic
                {
                    return Ty::Ptr {
                        mutable: true,
                        to: Box::new(again(t)),
                    };
                }
                if let Some((f, target)) = self.alias(&name, file) {
                    return self.canon_at(target, f, depth + 1);
                }
                Ty::Named(name)
            }
            _ => Ty::Bad(format!("the type `{}`", show(ty))),
        }
    }

    /// Size and alignment of a type of this side, for structs passed by
    /// value or allocated by C (`Err`: not computable, and why).
    fn layout(&self, ty: &Ty, depth: u32) -> Result<(usize, usize), String> {
        let word = size_of::<usize>();
        match ty {
            Ty::Prim(p) if p == "bool" => Ok((1, 1)),
            Ty::Prim(p) => {
                let n: usize = p[1..].parse::<usize>().unwrap() / 8;
                Ok((n, n.min(16)))
            }
            Ty::Ptr { .. } | Ty::Fn { .. } => Ok((word, word)),
            Ty::Array(t, n) => self.layout(t, depth).map(|(s, a)| (s * n, a)),
            Ty::Named(name) if depth < 16 => {
                let records = self
                    .records
                    .get(name)
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                let [record] = records else {
                    return Err(format!("{} definitions of `{name}`", records.len()));
                };
                if !record.repr_c {
                    return Err(format!("`{name}` is not #[repr(C)]"));
                }
                let (mut size, mut align) = (0, 1);
                for field in &record.fields {
                    let (s, a) = self.layout(&self.canon(field, record.file), depth + 1)?;
                    align = align.max(a);
                    size = if record.union {
                        size.max(s)
                    } else {
                        size.next_multiple_of(a) + s
                    };
                }
                Ok((size.next_multiple_of(align), align))
            }
            other => Err(format!("no layout for `{other}`")),
        }
    }
}

/// Tokens as text, tidied.
fn show(t: &impl ToTokens) -> String {
    let s = t.to_token_stream().to_string();
    let mut s = s
        .replace(" :: ", "::")
        .replace(":: ", "::")
        .replace("* mut ", "*mut ")
        .replace("* const ", "*const ")
        .replace(" < ", "<")
        .replace("< ", "<")
        .replace(" >", ">")
        .replace("( ", "(")
        .replace(" )", ")")
        .replace(" ,", ",")
        .replace(" : ", ": ")
        .replace(" (", "(");
    if s.starts_with("::") {
        s.drain(..2);
    }
    s
}

// ---- the C side -----------------------------------------------------------

struct CFn {
    item: syn::ForeignItemFn,
    /// bindgen's `link_name` (a C++ name with C++ linkage).
    link_name: Option<String>,
}

struct CSide {
    types: Types,
    fns: BTreeMap<String, CFn>,
    statics: BTreeMap<String, syn::ForeignItemStatic>,
    /// Sizes from bindgen's layout checks.
    sizes: HashMap<String, usize>,
}

impl CSide {
    /// bindgen over all of `headers` (and the shim's text, for the C view;
    /// `None`: the C++ view).
    fn generate(include: &Path, headers: &[String], shim: Option<&str>) -> CSide {
        let mut wrapper: String = headers
            .iter()
            .map(|h| format!("#include \"{h}\"\n"))
            .collect();
        if let Some(shim) = shim {
            wrapper.push_str(shim);
        }
        let name = "converse_rs_prototypes.h";
        let dir = regex_escape(&include.to_string_lossy());
        let lang: &[&str] = if shim.is_some() {
            &["-xc", "-std=gnu11"]
        } else {
            &["-xc++", "-std=c++17"]
        };
        let bindings = bindgen::Builder::default()
            .header_contents(name, &wrapper)
            .clang_arg(format!("-I{}", include.display()))
            .clang_args(lang)
            .allowlist_file(format!("{dir}/.*"))
            .allowlist_file(format!(".*{}", regex_escape(name)))
            .blocklist_file(".*absent\\.h")
            .generate_comments(false)
            .layout_tests(true)
            .derive_debug(false)
            .derive_default(false)
            .formatter(bindgen::Formatter::None)
            .generate()
            .unwrap_or_else(|e| panic!("bindgen over the headers ({}): {e}", lang[0]));
        CSide::parse(&bindings.to_string())
    }

    /// bindgen's output: its declarations, type aliases, records and their
    /// sizes.
    fn parse(bindings: &str) -> CSide {
        let file = syn::parse_file(bindings).expect("bindgen's output parses");
        let mut side = CSide {
            types: Types::default(),
            fns: BTreeMap::new(),
            statics: BTreeMap::new(),
            sizes: HashMap::new(),
        };
        struct Sizes<'a>(&'a mut HashMap<String, usize>);
        impl<'ast> Visit<'ast> for Sizes<'_> {
            // `["Size of X"][size_of::<X>() - 8usize];`
            fn visit_expr_index(&mut self, e: &'ast syn::ExprIndex) {
                if let (syn::Expr::Array(a), syn::Expr::Binary(b)) = (&*e.expr, &*e.index)
                    && let (
                        Some(syn::Expr::Lit(syn::ExprLit {
                            lit: syn::Lit::Str(s),
                            ..
                        })),
                        syn::Expr::Lit(syn::ExprLit {
                            lit: syn::Lit::Int(n),
                            ..
                        }),
                    ) = (a.elems.first(), &*b.right)
                    && let Some(name) = s.value().strip_prefix("Size of ")
                {
                    self.0.insert(name.to_string(), n.base10_parse().unwrap());
                }
                syn::visit::visit_expr_index(self, e);
            }
        }
        Sizes(&mut side.sizes).visit_file(&file);
        for item in file.items {
            match item {
                syn::Item::Type(t) => side.types.add_alias(0, t.ident.to_string(), *t.ty),
                syn::Item::Struct(s) => {
                    side.types
                        .add_record(0, s.ident.to_string(), &s.fields, false, &s.attrs)
                }
                syn::Item::Union(u) => side.types.add_record(
                    0,
                    u.ident.to_string(),
                    &syn::Fields::Named(u.fields.clone()),
                    true,
                    &u.attrs,
                ),
                syn::Item::ForeignMod(m) => {
                    for item in m.items {
                        match item {
                            syn::ForeignItem::Fn(f) => {
                                let link_name = f.attrs.iter().find_map(|a| match &a.meta {
                                    syn::Meta::NameValue(nv) if nv.path.is_ident("link_name") => {
                                        Some(show(&nv.value))
                                    }
                                    _ => None,
                                });
                                side.fns
                                    .insert(f.sig.ident.to_string(), CFn { item: f, link_name });
                            }
                            syn::ForeignItem::Static(s) => {
                                side.statics.insert(s.ident.to_string(), s);
                            }
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        let mut typedefs: HashMap<String, Vec<String>> = HashMap::new();
        for (name, targets) in &side.types.aliases {
            if let [(_, syn::Type::Path(p))] = targets.as_slice() {
                let target = p.path.segments.last().unwrap().ident.to_string();
                if side.types.records.contains_key(&target) {
                    typedefs.entry(target).or_default().push(name.clone());
                }
            }
        }
        side.types.typedefs = typedefs;
        side
    }

    fn signature(&self, name: &str) -> (Vec<Ty>, Ty, bool) {
        let sig = &self.fns[name].item.sig;
        let args = sig
            .inputs
            .iter()
            .map(|a| match a {
                syn::FnArg::Typed(t) => self.types.canon(&t.ty, 0),
                syn::FnArg::Receiver(_) => Ty::Bad("a receiver".into()),
            })
            .collect();
        let ret = match &sig.output {
            syn::ReturnType::Default => Ty::Void,
            syn::ReturnType::Type(_, t) => self.types.canon(t, 0),
        };
        (args, ret, sig.variadic.is_some())
    }

    /// The prototype in C's syntax (bindgen keeps the typedef names).
    fn prototype(&self, name: &str) -> String {
        let sig = &self.fns[name].item.sig;
        let mut args: Vec<String> = sig
            .inputs
            .iter()
            .map(|a| match a {
                syn::FnArg::Typed(t) => {
                    let n = show(&t.pat);
                    c_decl(&t.ty, if n.starts_with("arg") { "" } else { &n })
                }
                syn::FnArg::Receiver(_) => "this".into(),
            })
            .collect();
        if sig.variadic.is_some() {
            args.push("...".into());
        }
        if args.is_empty() {
            args.push("void".into());
        }
        let ret = match &sig.output {
            syn::ReturnType::Default => "void".into(),
            syn::ReturnType::Type(_, t) => c_type(t),
        };
        let ret = if ret == "!" {
            "void /* noreturn */".into()
        } else {
            ret
        };
        let sep = if ret.ends_with('*') { "" } else { " " };
        format!("{ret}{sep}{name}({})", args.join(", "))
    }
}

/// A bindgen type as C spells it (function pointers as `ret (*)(args)`).
fn c_type(ty: &syn::Type) -> String {
    c_decl(ty, "")
}

fn c_decl(ty: &syn::Type, name: &str) -> String {
    let join = |t: String| {
        if name.is_empty() {
            t
        } else if t.ends_with('*') {
            format!("{t}{name}")
        } else {
            format!("{t} {name}")
        }
    };
    match ty {
        syn::Type::Ptr(p) => {
            let inner = c_type(&p.elem);
            let sep = if inner.ends_with('*') { "" } else { " " };
            if p.mutability.is_some() {
                join(format!("{inner}{sep}*"))
            } else {
                join(format!("const {inner}{sep}*"))
            }
        }
        syn::Type::Never(_) => "!".into(),
        syn::Type::Tuple(_) => join("void".into()),
        syn::Type::Path(p) => {
            let seg = p.path.segments.last().unwrap();
            let n = seg.ident.to_string();
            if n == "Option"
                && let syn::PathArguments::AngleBracketed(a) = &seg.arguments
                && let Some(syn::GenericArgument::Type(syn::Type::BareFn(f))) = a.args.first()
            {
                let mut args: Vec<String> = f.inputs.iter().map(|a| c_type(&a.ty)).collect();
                if args.is_empty() {
                    args.push("void".into());
                }
                let ret = match &f.output {
                    syn::ReturnType::Default => "void".into(),
                    syn::ReturnType::Type(_, t) => c_type(t),
                };
                return format!("{ret} (*{name})({})", args.join(", "));
            }
            let c = match n.as_str() {
                "c_char" => "char",
                "c_schar" => "signed char",
                "c_uchar" => "unsigned char",
                "c_short" => "short",
                "c_ushort" => "unsigned short",
                "c_int" => "int",
                "c_uint" => "unsigned int",
                "c_long" => "long",
                "c_ulong" => "unsigned long",
                "c_longlong" => "long long",
                "c_ulonglong" => "unsigned long long",
                "c_float" => "float",
                "c_double" => "double",
                "c_void" => "void",
                "usize" => "size_t",
                other => other,
            };
            join(c.to_string())
        }
        other => join(show(other)),
    }
}

fn regex_escape(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            let special = "\\.+*?()|[]{}^$#&-~".contains(c);
            special.then_some('\\').into_iter().chain([c])
        })
        .collect()
}

// ---- the Rust side --------------------------------------------------------

struct RustFn {
    name: String,
    file: usize,
    line: usize,
    sig: syn::Signature,
}

struct RustStatic {
    name: String,
    file: usize,
    line: usize,
    ty: syn::Type,
}

#[derive(Default)]
struct RustSide {
    files: Vec<String>,
    types: Types,
    macros: HashMap<String, Vec<(Vec<Pat>, TokenStream)>>,
    fns: Vec<RustFn>,
    statics: Vec<RustStatic>,
    problems: Vec<String>,
}

impl RustSide {
    fn read(src: &Path) -> RustSide {
        let mut paths = Vec::new();
        rust_files(src, &mut paths);
        paths.sort();
        let workspace = src.ancestors().nth(3).unwrap();
        let sources: Vec<(String, String)> = paths
            .iter()
            .map(|path| {
                let rel = path.strip_prefix(workspace).unwrap_or(path);
                let text = std::fs::read_to_string(path).unwrap();
                (rel.to_string_lossy().into_owned(), text)
            })
            .collect();
        RustSide::parse(&sources)
    }

    /// The exports, aliases, records and constants of `(path, text)`s.
    fn parse(sources: &[(String, String)]) -> RustSide {
        let mut side = RustSide::default();
        let mut parsed = Vec::new();
        for (path, text) in sources {
            let file = syn::parse_file(text).unwrap_or_else(|e| panic!("{path}: {e}"));
            side.files.push(path.clone());
            parsed.push(file);
        }
        // The macros first: an invocation may precede its definition's
        // file in this order.
        for file in &parsed {
            side.collect_macros(&file.items);
        }
        for (i, file) in parsed.iter().enumerate() {
            side.walk(&file.items, i, 0);
        }
        side
    }

    fn collect_macros(&mut self, items: &[syn::Item]) {
        for item in items {
            match item {
                syn::Item::Macro(m) if m.mac.path.is_ident("macro_rules") => {
                    if let Some(name) = &m.ident {
                        let arms = macro_arms(m.mac.tokens.clone());
                        self.macros.insert(name.to_string(), arms);
                    }
                }
                syn::Item::Mod(syn::ItemMod {
                    content: Some((_, items)),
                    ..
                }) => self.collect_macros(items),
                _ => {}
            }
        }
    }

    fn walk(&mut self, items: &[syn::Item], file: usize, depth: u32) {
        for item in items {
            match item {
                syn::Item::Fn(f) if !cfg_test(&f.attrs) => {
                    let Some(name) = export_name(&f.attrs, &f.sig.ident) else {
                        continue;
                    };
                    let line = f.sig.ident.span().start().line;
                    let abi = f
                        .sig
                        .abi
                        .as_ref()
                        .map(|a| a.name.as_ref().map_or("C".into(), |n| n.value()));
                    match abi.as_deref() {
                        Some("C" | "C-unwind") => {}
                        other => self.problems.push(format!(
                            "{name} ({}:{line}): exported with the {} ABI, not extern \"C\"",
                            self.files[file],
                            other.map_or("Rust".to_string(), |o| format!("\"{o}\""))
                        )),
                    }
                    self.fns.push(RustFn {
                        name,
                        file,
                        line,
                        sig: f.sig.clone(),
                    });
                }
                syn::Item::Static(s) if !cfg_test(&s.attrs) => {
                    if let Some(name) = export_name(&s.attrs, &s.ident) {
                        self.statics.push(RustStatic {
                            name,
                            file,
                            line: s.ident.span().start().line,
                            ty: (*s.ty).clone(),
                        });
                    }
                }
                syn::Item::Type(t) => {
                    self.types
                        .add_alias(file, t.ident.to_string(), (*t.ty).clone())
                }
                syn::Item::Const(c) => {
                    if let syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Int(n),
                        ..
                    }) = &*c.expr
                        && let Ok(n) = n.base10_parse()
                    {
                        let name = c.ident.to_string();
                        self.types.consts.entry(name).or_default().push((file, n));
                    }
                }
                syn::Item::Struct(s) => {
                    self.types
                        .add_record(file, s.ident.to_string(), &s.fields, false, &s.attrs)
                }
                syn::Item::Union(u) => self.types.add_record(
                    file,
                    u.ident.to_string(),
                    &syn::Fields::Named(u.fields.clone()),
                    true,
                    &u.attrs,
                ),
                syn::Item::Mod(m) if !cfg_test(&m.attrs) => {
                    if let Some((_, items)) = &m.content {
                        self.walk(items, file, depth);
                    }
                }
                syn::Item::Macro(m) if m.ident.is_none() && depth < 8 => {
                    let Some(name) = m.mac.path.get_ident().map(ToString::to_string) else {
                        continue;
                    };
                    let Some(arms) = self.macros.get(&name) else {
                        continue;
                    };
                    let line = m.mac.path.get_ident().unwrap().span().start().line;
                    match expand(arms, m.mac.tokens.clone()) {
                        Ok(expanded) => self.walk(&expanded.items, file, depth + 1),
                        Err(e) => self.problems.push(format!(
                            "{}:{line}: cannot expand `{name}!` to look for exports: {e}",
                            self.files[file]
                        )),
                    }
                }
                _ => {}
            }
        }
    }

    fn signature(&self, f: &RustFn) -> (Vec<Ty>, Ty, bool) {
        let args = f
            .sig
            .inputs
            .iter()
            .map(|a| match a {
                syn::FnArg::Typed(t) => self.types.canon(&t.ty, f.file),
                syn::FnArg::Receiver(_) => Ty::Bad("a receiver".into()),
            })
            .collect();
        let ret = match &f.sig.output {
            syn::ReturnType::Default => Ty::Void,
            syn::ReturnType::Type(_, t) => self.types.canon(t, f.file),
        };
        (args, ret, f.sig.variadic.is_some())
    }

    fn where_(&self, file: usize, line: usize) -> String {
        format!("{}:{line}", self.files[file])
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "bin") {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs
        .iter()
        .any(|a| a.path().is_ident("cfg") && a.meta.to_token_stream().to_string().contains("test"))
}

/// The symbol an item is exported as: `#[no_mangle]`,
/// `#[unsafe(no_mangle)]`, `#[export_name = "…"]` (or in `unsafe(…)`).
fn export_name(attrs: &[syn::Attribute], ident: &syn::Ident) -> Option<String> {
    fn of(meta: &syn::Meta, ident: &syn::Ident) -> Option<String> {
        match meta {
            syn::Meta::Path(p) if p.is_ident("no_mangle") => Some(ident.to_string()),
            syn::Meta::NameValue(nv) if nv.path.is_ident("export_name") => match &nv.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) => Some(s.value()),
                _ => None,
            },
            syn::Meta::List(l) if l.path.is_ident("unsafe") => of(&l.parse_args().ok()?, ident),
            _ => None,
        }
    }
    attrs.iter().find_map(|a| of(&a.meta, ident))
}

// ---- a small macro_rules! expander ----------------------------------------
//
// The crate generates some exports with its own `macro_rules!` (the CCS
// merge functions, pup's basic types, GAMMA's sends); syn does not expand
// macros, so this does, for the matchers those use: literal tokens,
// `$name:fragment`, `$(…) sep? op` repetitions (greedy, as rustc without
// its ambiguity errors).

#[derive(Debug)]
enum Pat {
    Tok(String),
    Frag(String, String),
    Rep(Vec<Pat>, Option<String>, char),
    Group(Delimiter, Vec<Pat>),
}

#[derive(Clone)]
enum Frag {
    One(TokenStream),
    Many(Vec<Frag>),
}

type Bindings = HashMap<String, Frag>;

/// `(matcher) => {transcriber};` …
fn macro_arms(body: TokenStream) -> Vec<(Vec<Pat>, TokenStream)> {
    let toks: Vec<TokenTree> = body.into_iter().collect();
    let mut arms = Vec::new();
    let mut i = 0;
    while i + 3 < toks.len() {
        if let (TokenTree::Group(m), TokenTree::Group(t)) = (&toks[i], &toks[i + 3]) {
            arms.push((matcher(m.stream()), t.stream()));
        }
        i += 4;
        if matches!(toks.get(i), Some(TokenTree::Punct(p)) if p.as_char() == ';') {
            i += 1;
        }
    }
    arms
}

fn matcher(ts: TokenStream) -> Vec<Pat> {
    let toks: Vec<TokenTree> = ts.into_iter().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        match (&toks[i], toks.get(i + 1)) {
            (TokenTree::Punct(p), Some(TokenTree::Ident(name))) if p.as_char() == '$' => {
                let kind = toks.get(i + 3).map(ToString::to_string).unwrap_or_default();
                out.push(Pat::Frag(name.to_string(), kind));
                i += 4;
            }
            (TokenTree::Punct(p), Some(TokenTree::Group(g)))
                if p.as_char() == '$' && g.delimiter() == Delimiter::Parenthesis =>
            {
                let (sep, op, used) = rep_tail(&toks[i + 2..]);
                out.push(Pat::Rep(matcher(g.stream()), sep, op));
                i += 2 + used;
            }
            (TokenTree::Group(g), _) => {
                out.push(Pat::Group(g.delimiter(), matcher(g.stream())));
                i += 1;
            }
            (t, _) => {
                out.push(Pat::Tok(t.to_string()));
                i += 1;
            }
        }
    }
    out
}

/// After `$( … )`: the separator (if any), the operator and how many
/// tokens they took.
fn rep_tail(rest: &[TokenTree]) -> (Option<String>, char, usize) {
    let op = |t: Option<&TokenTree>| match t {
        Some(TokenTree::Punct(p)) if matches!(p.as_char(), '*' | '+' | '?') => Some(p.as_char()),
        _ => None,
    };
    match op(rest.first()) {
        Some(o) => (None, o, 1),
        None => (
            rest.first().map(ToString::to_string),
            op(rest.get(1)).unwrap_or('*'),
            2,
        ),
    }
}

fn pat_vars(pats: &[Pat], out: &mut Vec<String>) {
    for p in pats {
        match p {
            Pat::Frag(n, _) => out.push(n.clone()),
            Pat::Rep(inner, ..) | Pat::Group(_, inner) => pat_vars(inner, out),
            Pat::Tok(_) => {}
        }
    }
}

fn match_seq(pats: &[Pat], input: ParseStream, b: &mut Bindings) -> syn::Result<()> {
    for p in pats {
        match p {
            Pat::Tok(s) => {
                let t: TokenTree = input.parse()?;
                if t.to_string() != *s {
                    return Err(syn::Error::new(t.span(), format!("expected `{s}`")));
                }
            }
            Pat::Frag(name, kind) => {
                let ts = fragment(kind, input)?;
                b.insert(name.clone(), Frag::One(ts));
            }
            Pat::Group(d, inner) => {
                let t: TokenTree = input.parse()?;
                let TokenTree::Group(g) = t else {
                    return Err(syn::Error::new(t.span(), "expected a group"));
                };
                if g.delimiter() != *d {
                    return Err(syn::Error::new(g.span(), "another delimiter"));
                }
                let parser = |s: ParseStream| {
                    match_seq(inner, s, b)?;
                    if s.is_empty() {
                        Ok(())
                    } else {
                        Err(s.error("unexpected tokens"))
                    }
                };
                parser.parse2(g.stream())?;
            }
            Pat::Rep(inner, sep, op) => {
                let mut iterations = Vec::new();
                while !input.is_empty() {
                    let fork = input.fork();
                    let mut nb = Bindings::new();
                    if match_seq(inner, &fork, &mut nb).is_err() {
                        break;
                    }
                    input.advance_to(&fork);
                    iterations.push(nb);
                    if *op == '?' {
                        break;
                    }
                    if let Some(sep) = sep {
                        let fork = input.fork();
                        match fork.parse::<TokenTree>() {
                            Ok(t) if t.to_string() == *sep => input.advance_to(&fork),
                            _ => break,
                        }
                    }
                }
                let mut vars = Vec::new();
                pat_vars(inner, &mut vars);
                for v in vars {
                    let each = iterations
                        .iter()
                        .map(|it| it.get(&v).cloned().unwrap_or(Frag::Many(Vec::new())))
                        .collect();
                    b.insert(v, Frag::Many(each));
                }
            }
        }
    }
    Ok(())
}

fn fragment(kind: &str, input: ParseStream) -> syn::Result<TokenStream> {
    // Types and expressions stay one piece where they are pasted, as in
    // rustc (an invisible group).
    let grouped = |t: TokenStream| TokenTree::Group(Group::new(Delimiter::None, t)).into();
    Ok(match kind {
        "ident" => syn::Ident::parse_any(input)?.into_token_stream(),
        "ty" => grouped(input.parse::<syn::Type>()?.into_token_stream()),
        "expr" => grouped(input.parse::<syn::Expr>()?.into_token_stream()),
        "path" => input.parse::<syn::Path>()?.into_token_stream(),
        "meta" => input.parse::<syn::Meta>()?.into_token_stream(),
        "literal" => input.parse::<syn::Lit>()?.into_token_stream(),
        "tt" => input.parse::<TokenTree>()?.into_token_stream(),
        "item" => input.parse::<syn::Item>()?.into_token_stream(),
        "block" => input.parse::<syn::Block>()?.into_token_stream(),
        "pat" => syn::Pat::parse_single(input)?.into_token_stream(),
        "vis" => input.parse::<syn::Visibility>()?.into_token_stream(),
        "lifetime" => input.parse::<syn::Lifetime>()?.into_token_stream(),
        other => return Err(input.error(format!("fragment `{other}` is not supported here"))),
    })
}

fn transcribe(ts: TokenStream, b: &Bindings) -> TokenStream {
    let toks: Vec<TokenTree> = ts.into_iter().collect();
    let mut out = TokenStream::new();
    let mut i = 0;
    while i < toks.len() {
        match (&toks[i], toks.get(i + 1)) {
            (TokenTree::Punct(p), Some(TokenTree::Ident(id))) if p.as_char() == '$' => {
                match b.get(&id.to_string()) {
                    Some(Frag::One(ts)) => out.extend(ts.clone()),
                    _ => out.extend([toks[i + 1].clone()]), // `$crate`
                }
                i += 2;
            }
            (TokenTree::Punct(p), Some(TokenTree::Group(g)))
                if p.as_char() == '$' && g.delimiter() == Delimiter::Parenthesis =>
            {
                let (sep, _, used) = rep_tail(&toks[i + 2..]);
                let mut used_vars = Vec::new();
                dollar_idents(g.stream(), &mut used_vars);
                let many: Vec<(&String, &Vec<Frag>)> = used_vars
                    .iter()
                    .filter_map(|v| match b.get(v) {
                        Some(Frag::Many(each)) => Some((v, each)),
                        _ => None,
                    })
                    .collect();
                let n = many.iter().map(|(_, e)| e.len()).max().unwrap_or(0);
                for k in 0..n {
                    if k > 0
                        && let Some(sep) = &sep
                    {
                        out.extend(sep.parse::<TokenStream>().unwrap());
                    }
                    let mut nb = b.clone();
                    for (v, each) in &many {
                        if let Some(f) = each.get(k) {
                            nb.insert((*v).clone(), f.clone());
                        }
                    }
                    out.extend(transcribe(g.stream(), &nb));
                }
                i += 2 + used;
            }
            (TokenTree::Group(g), _) => {
                let mut ng = Group::new(g.delimiter(), transcribe(g.stream(), b));
                ng.set_span(g.span());
                out.extend([TokenTree::Group(ng)]);
                i += 1;
            }
            (t, _) => {
                out.extend([t.clone()]);
                i += 1;
            }
        }
    }
    out
}

fn dollar_idents(ts: TokenStream, out: &mut Vec<String>) {
    let toks: Vec<TokenTree> = ts.into_iter().collect();
    for (i, t) in toks.iter().enumerate() {
        match (t, toks.get(i + 1)) {
            (TokenTree::Punct(p), Some(TokenTree::Ident(id))) if p.as_char() == '$' => {
                out.push(id.to_string())
            }
            (TokenTree::Group(g), _) => dollar_idents(g.stream(), out),
            _ => {}
        }
    }
}

fn expand(arms: &[(Vec<Pat>, TokenStream)], input: TokenStream) -> Result<syn::File, String> {
    let mut last = String::from("no arm");
    for (pats, body) in arms {
        let mut b = Bindings::new();
        let parser = |s: ParseStream| {
            match_seq(pats, s, &mut b)?;
            if s.is_empty() {
                Ok(())
            } else {
                Err(s.error("unexpected tokens"))
            }
        };
        match parser.parse2(input.clone()) {
            Ok(()) => {
                return syn::parse2::<syn::File>(transcribe(body.clone(), &b))
                    .map_err(|e| format!("the expansion does not parse: {e}"));
            }
            Err(e) => last = e.to_string(),
        }
    }
    Err(last)
}

// ---- the comparison --------------------------------------------------------

/// Which way a value goes, for what a side may assume about it.
#[derive(Clone, Copy, PartialEq)]
enum Flow {
    /// From C into Rust: parameters, what a C callback returns.
    In,
    /// From Rust out to C: return values, a callback's arguments.
    Out,
    /// Behind a pointer: either side may read or write it.
    Both,
}

impl Flow {
    fn flip(self) -> Flow {
        match self {
            Flow::In => Flow::Out,
            Flow::Out => Flow::In,
            Flow::Both => Flow::Both,
        }
    }
}

struct Ctx<'a> {
    c: &'a CSide,
    rust: &'a RustSide,
}

/// The C struct `c` and the Rust one `r` are the same: one name, a
/// typedef's name of the C struct, or an entry of `ALIASES`.
fn same_record(side: &CSide, c: &str, r: &str) -> bool {
    c == r
        || side
            .types
            .typedefs
            .get(c)
            .is_some_and(|t| t.iter().any(|t| t == r))
        || ALIASES.iter().any(|(ac, ar)| *ac == c && *ar == r)
}

fn compare(cx: &Ctx, c: &Ty, r: &Ty, flow: Flow, by_value: bool, at: &str, out: &mut Vec<String>) {
    match (c, r) {
        (Ty::Bad(why), _) => out.push(format!("{at}: the C side is {why}")),
        (_, Ty::Bad(why)) => out.push(format!("{at}: the Rust side is {why}")),
        (Ty::Void, Ty::Void) => {}
        (Ty::Prim(a), Ty::Prim(b)) if a == b => {}
        (
            Ty::Ptr {
                mutable: cm,
                to: ct,
            },
            Ty::Ptr {
                mutable: rm,
                to: rt,
            },
        ) => {
            match (flow, cm, rm) {
                (Flow::In, false, true) => out.push(format!(
                    "{at}: C passes `const` data, Rust takes `*mut` (make it `*const`)"
                )),
                (Flow::Out, true, false) => out.push(format!(
                    "{at}: C's callers may write through it, Rust returns `*const`"
                )),
                (Flow::Both, _, _) if cm != rm => out.push(format!(
                    "{at}: `const` differs behind a pointer (C {c}, Rust {r})"
                )),
                _ => {}
            }
            // What a side cannot write through flows one way only.
            let inner = match flow {
                Flow::In if !rm => Flow::In,
                Flow::Out if !cm => Flow::Out,
                _ => Flow::Both,
            };
            compare(cx, ct, rt, inner, false, &format!("{at}, pointee"), out);
        }
        (
            Ty::Fn {
                nullable: cn,
                args: ca,
                ret: cr,
                variadic: cv,
            },
            Ty::Fn {
                nullable: rn,
                args: ra,
                ret: rr,
                variadic: rv,
            },
        ) => {
            if *cn && !rn && flow != Flow::Out {
                out.push(format!(
                    "{at}: C may pass NULL, a bare Rust fn pointer must not be null (Option<fn>)"
                ));
            }
            if ca.len() != ra.len() || cv != rv {
                out.push(format!("{at}: C {c}, Rust {r} (arity)"));
                return;
            }
            for (k, (a, b)) in ca.iter().zip(ra).enumerate() {
                let at = format!("{at}, fn parameter {}", k + 1);
                compare(cx, a, b, flow.flip(), true, &at, out);
            }
            compare(cx, cr, rr, flow, true, &format!("{at}, fn return"), out);
        }
        (Ty::Named(a), Ty::Named(b)) if same_record(cx.c, a, b) => {
            let c_size = cx.c.sizes.get(a);
            let r_size = cx.rust.types.layout(r, 0);
            if by_value {
                match (c_size, r_size) {
                    (Some(cs), Ok((rs, _))) if *cs == rs => {}
                    (cs, rs) => out.push(format!(
                        "{at}: `{a}` by value: C size {}, Rust size {}",
                        cs.map_or("unknown".into(), ToString::to_string),
                        rs.map_or_else(|e| format!("unknown ({e})"), |(s, _)| s.to_string())
                    )),
                }
            } else if let (Some(cs), Ok((rs, _))) = (c_size, r_size) {
                // Memory the C program allocates (a `Cpthread_mutex_t` on
                // its stack): Rust may use less of it (a header it reads),
                // never more.
                if rs > *cs {
                    out.push(format!("{at}: `{a}` is {cs} bytes in C, Rust's `{b}` {rs}"));
                }
            }
        }
        (Ty::Array(ct, cn), Ty::Array(rt, rn)) if cn == rn => {
            compare(cx, ct, rt, flow, by_value, at, out)
        }
        _ => out.push(format!("{at}: C {c}, Rust {r}")),
    }
}

/// The C and C++ views declare the same functions and variables, with the
/// same signatures, all with C linkage.
fn compare_views(c: &CSide, cxx: &CSide, shim: &Shim, report: &mut Report) {
    for (name, f) in &cxx.fns {
        if let Some(link) = &f.link_name {
            report.problems.push(format!(
                "{name}: declared with C++ linkage in C++ (`{link}`): outside extern \"C\""
            ));
        }
        if !c.fns.contains_key(name) {
            report
                .problems
                .push(format!("{name}: declared in C++ only"));
        } else if c.signature(name) != cxx.signature(name) {
            report.problems.push(format!(
                "{name}: C and C++ disagree\n  C:   {}\n  C++: {}",
                c.prototype(name),
                cxx.prototype(name)
            ));
        }
    }
    for name in c.fns.keys() {
        // The shim's own declarations are in the C view only.
        if !cxx.fns.contains_key(name) && !shim.declares.contains(name) {
            report.problems.push(format!("{name}: declared in C only"));
        }
    }
    for name in c.statics.keys() {
        if !cxx.statics.contains_key(name) {
            report
                .problems
                .push(format!("{name}: variable declared in C only"));
        }
    }
}

/// Where a name is declared in the headers (a best guess for the report).
fn header_line(include: &Path, headers: &[String], name: &str) -> String {
    let needle = format!("{name}(");
    for h in headers {
        let text = std::fs::read_to_string(include.join(h)).unwrap_or_default();
        for (i, line) in text.lines().enumerate() {
            let t = line.trim_start();
            if t.starts_with(['#', '*', '/']) {
                continue;
            }
            if let Some(at) = line.find(&needle) {
                let before = line[..at].chars().last();
                if before.is_none_or(|c| c == ' ' || c == '*') {
                    return format!("include/{h}:{}", i + 1);
                }
            }
        }
    }
    "not found in a header".into()
}

/// Compares `c` with `rust`; `lists`: also check that the entries of this
/// file's lists are still needed.
fn check(
    c: &CSide,
    rust: &RustSide,
    shim: &Shim,
    include: &Path,
    headers: &[String],
    lists: bool,
    report: &mut Report,
) {
    let cx = Ctx { c, rust };
    let mut exports: BTreeMap<&str, &RustFn> = BTreeMap::new();
    for f in &rust.fns {
        if let Some(other) = exports.insert(&f.name, f) {
            report.problems.push(format!(
                "{}: exported twice ({} and {})",
                f.name,
                rust.where_(other.file, other.line),
                rust.where_(f.file, f.line)
            ));
        }
    }
    let mut allowed_used = BTreeSet::new();
    for (name, cfn) in &c.fns {
        let Some(f) = exports.get(name.as_str()) else {
            if shim.defines.contains(name) {
                continue;
            }
            if let Some((_, why)) = NOT_EXPORTED.iter().find(|(n, _)| n == name) {
                report.allowed.push(format!("{name}: not exported: {why}"));
                allowed_used.insert(name.as_str());
                continue;
            }
            report.problems.push(format!(
                "{name} ({}): declared but not exported by the library\n  C: {}",
                header_line(include, headers, name),
                c.prototype(name)
            ));
            continue;
        };
        let _ = cfn;
        let (c_args, c_ret, c_var) = c.signature(name);
        let (r_args, r_ret, r_var) = rust.signature(f);
        let mut out = Vec::new();
        if c_var != r_var {
            out.push("C is variadic, Rust is not".to_string());
        }
        if c_args.len() != r_args.len() {
            out.push(format!(
                "C takes {} parameters, Rust {}",
                c_args.len(),
                r_args.len()
            ));
        } else {
            for (k, (a, b)) in c_args.iter().zip(&r_args).enumerate() {
                let pname = match &f.sig.inputs[k] {
                    syn::FnArg::Typed(t) => show(&t.pat),
                    syn::FnArg::Receiver(_) => "self".into(),
                };
                compare(
                    &cx,
                    a,
                    b,
                    Flow::In,
                    true,
                    &format!("parameter {} `{pname}`", k + 1),
                    &mut out,
                );
            }
        }
        compare(&cx, &c_ret, &r_ret, Flow::Out, true, "return", &mut out);
        if out.is_empty() {
            continue;
        }
        let text = format!(
            "{name}\n  C:    {}  ({})\n  Rust: {}  ({})\n  - {}",
            c.prototype(name),
            header_line(include, headers, name),
            show_sig(&f.sig),
            rust.where_(f.file, f.line),
            out.join("\n  - ")
        );
        if let Some((_, why)) = ALLOWED.iter().find(|(n, _)| n == name) {
            report.allowed.push(format!("{name}: {why}"));
            allowed_used.insert(name.as_str());
        } else {
            report.problems.push(text);
        }
    }
    for f in &rust.fns {
        let declared = c.fns.contains_key(&f.name) || shim.declares.contains(&f.name);
        if declared {
            continue;
        }
        if let Some((_, why)) = UNDECLARED.iter().find(|(n, _)| *n == f.name) {
            report
                .allowed
                .push(format!("{}: undeclared: {why}", f.name));
            allowed_used.insert(f.name.as_str());
            continue;
        }
        report.problems.push(format!(
            "{} ({}): exported but declared in no header\n  Rust: {}",
            f.name,
            rust.where_(f.file, f.line),
            show_sig(&f.sig)
        ));
    }
    // Variables.
    let statics: BTreeMap<&str, &RustStatic> =
        rust.statics.iter().map(|s| (s.name.as_str(), s)).collect();
    for (name, cs) in &c.statics {
        let Some(rs) = statics.get(name.as_str()) else {
            report
                .problems
                .push(format!("{name}: variable declared but not exported"));
            continue;
        };
        let mut out = Vec::new();
        let ct = c.types.canon(&cs.ty, 0);
        let rt = rust.types.canon(&rs.ty, rs.file);
        compare(&cx, &ct, &rt, Flow::Both, true, "type", &mut out);
        if !out.is_empty() {
            report.problems.push(format!(
                "{name} (variable, {})\n  C:    {}\n  Rust: {}\n  - {}",
                rust.where_(rs.file, rs.line),
                c_decl(&cs.ty, name),
                show(&rs.ty),
                out.join("\n  - ")
            ));
        }
    }
    for s in &rust.statics {
        if !c.statics.contains_key(&s.name) {
            report.problems.push(format!(
                "{} ({}): variable exported but declared in no header",
                s.name,
                rust.where_(s.file, s.line)
            ));
        }
    }
    if !lists {
        return;
    }
    for (name, _) in ALLOWED.iter().chain(UNDECLARED).chain(NOT_EXPORTED) {
        if !allowed_used.contains(name) {
            report.problems.push(format!(
                "{name}: allowed in this test, but nothing to allow any more (remove the entry)"
            ));
        }
    }
    for (c_name, r_name) in ALIASES {
        if !c.types.records.contains_key(*c_name) || !rust.types.records.contains_key(*r_name) {
            report.problems.push(format!(
                "ALIASES: `{c_name}` or `{r_name}` is gone (remove the entry)"
            ));
        }
    }
}

fn show_sig(sig: &syn::Signature) -> String {
    let args: Vec<String> = sig
        .inputs
        .iter()
        .map(|a| match a {
            syn::FnArg::Typed(t) => format!("{}: {}", show(&t.pat), show(&t.ty)),
            syn::FnArg::Receiver(_) => "self".into(),
        })
        .collect();
    let abi = sig
        .abi
        .as_ref()
        .map_or(String::new(), |a| format!("{} ", show(a)));
    let ret = match &sig.output {
        syn::ReturnType::Default => String::new(),
        syn::ReturnType::Type(_, t) => format!(" -> {}", show(t)),
    };
    let unsafety = if sig.unsafety.is_some() {
        "unsafe "
    } else {
        ""
    };
    format!("{unsafety}{abi}fn {}({}){ret}", sig.ident, args.join(", "))
}

/// The checker itself finds each kind of mismatch (bindgen-style
/// declarations written out, so this needs no libclang).
#[test]
fn the_checker_reports_each_kind_of_mismatch() {
    let c = CSide::parse(
        r#"
        pub type CmiHandler = ::std::option::Option<unsafe extern "C" fn(msg: *mut ::std::os::raw::c_void)>;
        #[repr(C)] pub struct Opaque { _unused: [u8; 0] }
        #[repr(C)] pub struct Pair { pub a: ::std::os::raw::c_int, pub b: ::std::os::raw::c_int }
        pub type PairT = Pair;
        const _: () = { ["Size of Pair"][::std::mem::size_of::<Pair>() - 8usize]; };
        unsafe extern "C" {
            pub fn ok_fn(n: ::std::os::raw::c_int, s: *const ::std::os::raw::c_char, h: CmiHandler) -> *mut ::std::os::raw::c_void;
            pub fn ok_typedef(p: *mut PairT, q: PairT) -> CmiHandler;
            pub fn signedness(n: ::std::os::raw::c_uint);
            pub fn const_param(s: *const ::std::os::raw::c_char);
            pub fn bare_fn(h: CmiHandler);
            pub fn void_vs_struct(p: *mut Opaque);
            pub fn arity(a: ::std::os::raw::c_int, b: ::std::os::raw::c_int);
            pub fn by_value(p: Pair);
            pub fn pointee_size(p: *mut Pair);
            pub fn missing();
            pub fn from_macro(x: ::std::os::raw::c_int) -> ::std::os::raw::c_int;
            pub fn ret_const() -> *mut ::std::os::raw::c_char;
            pub static mut var: ::std::os::raw::c_uchar;
        }
        "#,
    );
    // Source text the checker parses, never compiled: only the signatures
    // matter, so the bodies are empty.
    let rust = RustSide::parse(&[(
        "lib.rs".into(),
        r#"
        type Handler = extern "C-unwind" fn(*mut c_void);
        #[repr(C)] pub struct Pair { a: c_int, b: c_long }
        #[repr(C)] pub struct PairT { a: c_int, b: c_int }
        #[unsafe(no_mangle)] pub extern "C" fn ok_fn(n: c_int, s: *const c_char, h: Option<Handler>) -> *mut c_void {}
        #[unsafe(no_mangle)] pub extern "C" fn ok_typedef(p: *mut PairT, q: PairT) -> Handler {}
        #[unsafe(no_mangle)] pub extern "C-unwind" fn signedness(n: c_int) {}
        #[unsafe(no_mangle)] pub unsafe extern "C" fn const_param(s: *mut c_char) {}
        #[no_mangle] pub extern "C" fn bare_fn(h: Handler) {}
        #[unsafe(no_mangle)] pub extern "C" fn void_vs_struct(p: *mut c_void) {}
        #[unsafe(no_mangle)] pub extern "C" fn arity(a: c_int) {}
        #[unsafe(no_mangle)] pub extern "C" fn by_value(p: Pair) {}
        #[unsafe(no_mangle)] pub extern "C" fn pointee_size(p: *mut Pair) {}
        macro_rules! make {
            ($($(#[$m:meta])* $name:ident: $t:ty;)*) => {$(
                $(#[$m])* #[unsafe(no_mangle)] pub extern "C" fn $name(x: $t) -> $t { x }
            )*};
        }
        make! { /// Doc.
            from_macro: c_uint; }
        #[unsafe(no_mangle)] pub extern "C" fn ret_const() -> *const c_char {}
        #[unsafe(no_mangle)] pub extern "C" fn undeclared() {}
        #[unsafe(no_mangle)] pub fn rust_abi() {}
        #[unsafe(no_mangle)] pub static var: AtomicI8 = AtomicI8::new(0);
        "#
        .into(),
    )]);
    let shim = Shim {
        text: String::new(),
        declares: BTreeSet::new(),
        defines: BTreeSet::new(),
    };
    let mut report = Report::default();
    report.problems.extend(rust.problems.iter().cloned());
    check(&c, &rust, &shim, Path::new("."), &[], false, &mut report);
    let expect = [
        ("signedness", "C u32, Rust i32"),
        ("const_param", "make it `*const`"),
        ("bare_fn", "C may pass NULL"),
        ("void_vs_struct", "C Opaque, Rust void"),
        ("arity", "C takes 2 parameters, Rust 1"),
        ("by_value", "C size 8, Rust size 16"),
        ("pointee_size", "is 8 bytes in C, Rust's `Pair` 16"),
        ("missing", "declared but not exported"),
        ("from_macro", "C i32, Rust u32"),
        ("ret_const", "Rust returns `*const`"),
        ("undeclared", "declared in no header"),
        ("rust_abi", "the Rust ABI"),
        ("var", "C u8, Rust i8"),
    ];
    let all = report.problems.join("\n\n");
    for (name, what) in expect {
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.starts_with(name) && p.contains(what)),
            "no `{what}` for {name} in:\n{all}"
        );
    }
    assert!(!all.contains("ok_"), "a false report:\n{all}");
    assert_eq!(report.problems.len(), expect.len() + 1, "{all}"); // rust_abi: also undeclared
}
