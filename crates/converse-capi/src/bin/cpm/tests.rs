//! The scanner on sources and the C it writes.
use crate::generate::generate;
use crate::lexer::{Kind, lex};
use crate::parser::{Module, TypeKind, scan};

fn module(src: &str) -> Module {
    scan(src.as_bytes(), "t.i").unwrap_or_else(|e| panic!("{e}"))
}

fn error(src: &str) -> String {
    match scan(src.as_bytes(), "t.i") {
        Ok(m) => panic!("no error; found {:?}", m.invokables),
        Err(e) => e.to_string(),
    }
}

fn names(m: &Module) -> Vec<&str> {
    m.invokables.iter().map(|f| f.name.as_str()).collect()
}

#[test]
fn line_markers_place_the_errors() {
    let src = "# 1 \"prog.c\"\n# 1 \"/usr/include/stdio.h\" 1 3 4\nint x;\n\
               # 7 \"prog.c\" 2\n\nCpmInvokable f(int a,\n  widget w) { }\n";
    assert_eq!(
        error(src),
        "prog.c:9: error: CpmInvokable f: argument 2 has unknown type `widget` \
         (declare it with CpmDeclareSimple(widget) or CpmDeclarePointer(widget) before the function)"
    );
    // `#line`, a name with escapes, and no marker at all.
    let src = "#line 40 \"dir\\\\odd \\\"name\\\".c\"\nCpmInvokable f(T x);\n";
    assert!(error(src).starts_with("dir\\odd \"name\".c:40: error:"));
    assert!(error("\n\nCpmInvokable f(T x);").starts_with("t.i:3: error:"));
    // A marker without a file name keeps the file.
    let src = "# 5 \"a.c\"\n# 20\nCpmInvokable f(T x);\n";
    assert!(error(src).starts_with("a.c:20: error:"));
}

/// The line counter wraps (modulo 2^32) rather than overflowing: the
/// markers `cc -E` writes go from `# 0` (GCC's `# 0 "<built-in>"`) to
/// whatever `#line` a program sets, and every way the scanner counts
/// lines (newlines, comments, literals, backslash-newlines) goes past
/// the top.
#[test]
fn line_markers_at_the_ends_of_the_counter_neither_panic_nor_misplace() {
    const UNKNOWN: &str = "CpmInvokable f: argument 1 has unknown type `T`";
    // The largest number a marker takes names its line exactly.
    let err = error("# 4294967295 \"x.c\"\nCpmInvokable f(T x);\n");
    assert!(err.starts_with("x.c:4294967295: error: "), "{err}");
    assert!(err.contains(UNKNOWN), "{err}");
    // Past it, by each way the scanner counts a line (a newline, in a
    // comment, in a string, in a raw string, a backslash-newline
    // between tokens and in a directive): the next line is 0, as
    // 4294967295 + 1 modulo 2^32, and the one after 1.
    let marker = "# 4294967295 \"x.c\"\n";
    for (body, line) in [
        ("int a;\nCpmInvokable f(T x);", 0),
        ("int a;\n\nCpmInvokable f(T x);", 1),
        ("/* a\n */ CpmInvokable f(T x);", 0),
        ("const char *s = \"a\\\nb\"; CpmInvokable f(T x);", 0),
        ("const char *s = R\"d(\n)d\"; CpmInvokable f(T x);", 0),
        ("int a; \\\nCpmInvokable f(T x);", 0),
        ("#pragma x \\\n y\nCpmInvokable f(T x);", 1),
    ] {
        let err = error(&format!("{marker}{body}\n"));
        assert!(
            err.starts_with(&format!("x.c:{line}: error: ")),
            "{body:?}: {err}"
        );
        assert!(err.contains(UNKNOWN), "{err}");
    }
    // `# 0` names line 0 (the counter goes below 0 and back).
    let err = error("# 0 \"<built-in>\"\n# 0 \"y.c\"\nCpmInvokable f(T x);\n");
    assert!(err.starts_with("y.c:0: error: "), "{err}");
    // The places the generated code names, either side of the wrap.
    let out = generate(&module(
        "# 4294967295 \"big.c\"\nCpmInvokable f(void);\n\nCpmInvokable g(void);\n",
    ));
    assert!(
        out.contains("/* ---- f (big.c:4294967295) ---- */"),
        "{out}"
    );
    assert!(out.contains("/* ---- g (big.c:1) ---- */"), "{out}");
    // A number no line can have is refused in the scanner's words,
    // naming the place of the marker (file and line before it).
    for number in [
        "4294967296",
        "18446744073709551615",
        "99999999999999999999999",
    ] {
        let err = error(&format!(
            "int a;\n# {number} \"z.c\"\nCpmInvokable f(T x);\n"
        ));
        assert_eq!(err, "t.i:2: error: a line marker's number is too large");
        let err = error(&format!(
            "# 7 \"w.c\"\n#line {number}\nCpmInvokable f(T x);\n"
        ));
        assert_eq!(err, "w.c:7: error: a line marker's number is too large");
    }
}

#[test]
fn braces_in_strings_chars_and_comments_do_not_count() {
    let src = r#"
void g(void) { const char *s = "}}{"; char c = '}'; char d = '\''; /* } */ // }
  if (1) { puts("{"); }
}
CpmInvokable f(int n) { char k = '{'; }
char *t = "a \" } still a string";
CpmInvokable h(double d);
static const char *r = R"x(})" ")x";
CpmInvokable k(void);
"#;
    assert_eq!(names(&module(src)), ["f", "h", "k"]);
}

#[test]
fn invokables_inside_bodies_and_parentheses_are_not_seen() {
    let src = "void outer(void) { CpmInvokable inner(int x); }\n\
               void reg(CpmInvokable g(int));\n\
               CpmInvokable top(int x) { }\n";
    assert_eq!(names(&module(src)), ["top"]);
}

#[test]
fn function_pointers_and_typedefs_are_plain_declarations() {
    let src = "typedef void CpmInvokable;\n\
               typedef CpmInvokable handler_t(int);\n\
               CpmInvokable (*fp)(int, char *);\n\
               void (*table[4])(void *msg);\n\
               int install(void (*cb)(int, char *), int (*cmp)(const void *, const void *));\n\
               struct ops { void (*run)(int); CpmInvokable (*stop)(void); };\n\
               CpmInvokable real(int x, double y) { }\n";
    let m = module(src);
    assert_eq!(names(&m), ["real"]);
    assert_eq!(m.invokables[0].args.len(), 2);
}

#[test]
fn static_and_extern_qualifiers() {
    let src = "static CpmInvokable a(int x) { }\n\
               CpmInvokable static b(int x) { }\n\
               extern CpmInvokable c(int x);\n\
               CpmInvokable extern d(int x);\n\
               static inline CpmInvokable e(void) { }\n\
               int counter; CpmInvokable f(int x) { }\n\
               CpmInvokable __attribute__((noinline, section(\"x\"))) static g(int x) { }\n";
    let m = module(src);
    let got: Vec<(&str, bool)> = m
        .invokables
        .iter()
        .map(|f| (f.name.as_str(), f.is_static))
        .collect();
    assert_eq!(
        got,
        [
            ("a", true),
            ("b", true),
            ("c", false),
            ("d", false),
            ("e", true),
            ("f", false),
            ("g", true)
        ]
    );
    let out = generate(&m);
    assert!(out.contains("static void a(int);"), "{out}");
    assert!(out.contains("static CPM_UNUSED_ void *Cpm_a(CpmDestination CpmD, int CpmA0) {"));
    assert!(out.contains("\nvoid c(int);"));
    assert!(out.contains("\nvoid *Cpm_c(CpmDestination CpmD, int CpmA0) {"));
    assert!(out.contains("static void e(void);"));
}

#[test]
fn declared_types_expanded_or_not() {
    let src = "typedef int CpmDeclareSimple1;\ntypedef int CpmDeclarePointer1;\n\
               typedef struct { double x, y; } coordinate;\n\
               typedef CpmDeclareSimple1 CpmType_coordinate;\n\
               typedef int *intptr;\n\
               typedef CpmDeclarePointer1 CpmType_intptr;\n\
               CpmDeclareSimple(later_t);\n\
               CpmInvokable f(coordinate c, intptr p, CpmDim n, coordinate *cs, CpmDim m, intptr *ps, later_t l, CpmStr s) { }\n";
    let m = module(src);
    let kinds: Vec<(TypeKind, bool)> = m.invokables[0]
        .args
        .iter()
        .map(|a| (a.kind, a.array))
        .collect();
    use TypeKind::*;
    assert_eq!(
        kinds,
        [
            (Simple, false),
            (Pointer, false),
            (Simple, false),
            (Simple, true),
            (Simple, false),
            (Pointer, true),
            (Simple, false),
            (Pointer, false)
        ]
    );
    // A type used before its declaration is unknown there.
    let err = error("CpmInvokable f(late x);\ntypedef CpmDeclareSimple1 CpmType_late;\n");
    assert!(err.contains("unknown type `late`"), "{err}");
    // Declared both ways.
    let err = error("CpmDeclareSimple(t);\nCpmDeclarePointer(t);\n");
    assert!(
        err.starts_with("t.i:2: error: CpmDeclarePointer(t)"),
        "{err}"
    );
    assert!(err.contains("CpmDeclareSimple at t.i:1"), "{err}");
    assert!(error("CpmDeclarePointer(int);").contains("(built in)"));
}

#[test]
fn arrays_need_their_cpmdim() {
    assert!(error("CpmInvokable f(int *a);").contains("argument 1 (`int *`) is an array"));
    assert!(error("CpmInvokable f(int n, int *a);").contains("must be its length, a CpmDim"));
    assert!(error("CpmInvokable f(CpmDim n, int *a, int *b);").contains("argument 3"));
    assert!(error("CpmInvokable f(CpmDim n, int a[]);").contains("`CpmDim n, T *a`"));
    assert!(error("CpmInvokable f(char **a);").contains("`char **`"));
    let m = module("CpmInvokable f(CpmDim, double *);");
    assert!(m.invokables[0].args[1].array);
}

#[test]
fn what_cannot_be_marshalled_is_refused() {
    assert!(error("CpmInvokable f(int n, ...);").contains("variable argument list"));
    assert!(error("CpmInvokable f(struct s x);").contains("one-word types"));
    assert!(error("CpmInvokable f(unsigned int x);").contains("one-word types"));
    assert!(error("CpmInvokable f(const CpmStr s);").contains("one-word types"));
    assert!(error("CpmInvokable f(int x, 3);").contains("a type expected, found `3`"));
    assert!(error("CpmInvokable f(int x y);").contains("`,` or `)` expected, found `y`"));
    assert!(error("CpmInvokable f(int x").contains("not closed"));
}

#[test]
fn a_prototype_then_the_definition_is_one_invokable() {
    let m = module("CpmInvokable f(int x);\nCpmInvokable f(int y) { }\n");
    assert_eq!(names(&m), ["f"]);
    let err = error("CpmInvokable f(int x);\n\nCpmInvokable f(double y) { }\n");
    assert_eq!(
        err,
        "t.i:3: error: CpmInvokable f is declared differently at t.i:1"
    );
}

#[test]
fn extern_c_blocks_are_looked_into_other_blocks_skipped() {
    let src = "extern \"C\" {\nCpmInvokable a(int x);\nstruct s { int y; };\n}\n\
               namespace n { CpmInvokable b(int x); }\nCpmInvokable c(int x);\n";
    assert_eq!(names(&module(src)), ["a", "c"]);
}

#[test]
fn tokens_of_every_kind() {
    let lexed = lex(
        b"x1 = 0x1Fu + 1.5e-3 + .5 + 1'000 + L'a' + u8\"s\" - a...b->c;",
        "t",
    )
    .unwrap();
    let got: Vec<(Kind, &str)> = lexed
        .tokens
        .iter()
        .map(|t| (t.kind, t.text.as_str()))
        .collect();
    use Kind::*;
    assert_eq!(
        got,
        [
            (Ident, "x1"),
            (Punct, "="),
            (Number, "0x1Fu"),
            (Punct, "+"),
            (Number, "1.5e-3"),
            (Punct, "+"),
            (Number, ".5"),
            (Punct, "+"),
            (Number, "1'000"),
            (Punct, "+"),
            (Char, "L'a'"),
            (Punct, "+"),
            (Str, "u8\"s\""),
            (Punct, "-"),
            (Ident, "a"),
            (Punct, "..."),
            (Ident, "b"),
            (Punct, "-"),
            (Punct, ">"),
            (Ident, "c"),
            (Punct, ";")
        ]
    );
    assert!(
        lex(b"char *s = \"open;\n", "t")
            .err()
            .unwrap()
            .to_string()
            .contains("t:1: error: a string literal is not terminated")
    );
    assert!(lex(b"/* open", "t").is_err());
}

#[test]
fn directives_other_than_line_markers_are_skipped() {
    let src = "#pragma once\n#pragma weak CpmInvokable \\\n  f(int)\n#ident \"x\"\nCpmInvokable g(int x);\n";
    let m = module(src);
    assert_eq!(names(&m), ["g"]);
    assert_eq!(m.invokables[0].loc.line, 5);
}

#[test]
fn a_file_without_invokables_still_has_its_module_init() {
    let out = generate(&module("# 1 \"plain.c\"\nint main(void) { return 0; }\n"));
    assert!(out.contains("from plain.c: do not edit"), "{out}");
    assert!(out.contains("static CPM_UNUSED_ void CpmInitializeThisModule(void) {"));
    assert!(!out.contains("CmiRegisterHandler"));
}

#[test]
fn the_generated_code_has_every_part_in_source_order() {
    let out = generate(&module(
        "# 3 \"m.c\"\nCpmInvokable second(CpmDim n, CpmStr *v, double d);\nCpmInvokable first(void);\n",
    ));
    let order = [
        "/* ---- second (m.c:3) ---- */",
        "void second(CpmDim, CpmStr *, double);",
        "CpvStaticDeclare(int, CpmIndex_second);",
        "static void CpmRecv_second(void *CpmM) {",
        "  second(CpmA0, CpmA1, CpmA2);",
        "  for (CpmI = 0; CpmI < (size_t)CpmA0; CpmI++) CpmPtrFree_CpmStr(CpmA1[CpmI]);",
        "  CmiFree(CpmM);",
        "void *Cpm_second(CpmDestination CpmD, CpmDim CpmA0, CpmStr *CpmA1, double CpmA2) {",
        "  return CpmD->sendfn(CpmD, (int)CpmZ, CpmX);",
        "void first(void);",
        "void *Cpm_first(CpmDestination CpmD) {",
        "CpvAccess(CpmIndex_second) = CmiRegisterHandler(CpmRecv_second);",
        "CpvAccess(CpmIndex_first) = CmiRegisterHandler(CpmRecv_first);",
    ];
    let mut from = 0;
    for piece in order {
        let at = out[from..]
            .find(piece)
            .unwrap_or_else(|| panic!("`{piece}` missing after byte {from} of:\n{out}"));
        from += at + piece.len();
    }
}

/// The generated code compiles without a warning as C and as C++, for
/// every kind of argument (the integration tests run it).
#[test]
fn the_generated_code_compiles_cleanly_as_c_and_cpp() {
    let prelude = "#include \"conv-cpm.h\"\n\
                   typedef struct { double x, y; } coordinate;\n\
                   CpmDeclareSimple(coordinate);\n\
                   #define CpmPack_coordinate(v) (0)\n\
                   #define CpmUnpack_coordinate(v) (0)\n\
                   typedef int *intptr;\n\
                   CpmDeclarePointer(intptr);\n\
                   #define CpmPtrSize_intptr(p) sizeof(int)\n\
                   #define CpmPtrPack_intptr(p, v) (*(p) = *(v))\n\
                   #define CpmPtrUnpack_intptr(p) (0)\n\
                   #define CpmPtrFree_intptr(p) (0)\n";
    let body = "static CpmInvokable all(char c, short s, int i, long l, float f, double d,\n\
                CpmDim n, double *ds, CpmStr str, CpmDim m, CpmStr *strs, coordinate co,\n\
                intptr ip, CpmDim k, intptr *ips, CpmDim j, coordinate *cos) {\n\
                (void)c; (void)s; (void)i; (void)l; (void)f; (void)d; (void)n; (void)ds;\n\
                (void)str; (void)m; (void)strs; (void)co; (void)ip; (void)k; (void)ips;\n\
                (void)j; (void)cos; }\n\
                CpmInvokable none(void) { }\n\
                void use(void) { CpmInitializeThisModule(); }\n";
    let dir = std::env::temp_dir().join(format!("cpm-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let include = concat!(env!("CARGO_MANIFEST_DIR"), "/include");
    let gen_src = format!("{prelude}{body}");
    // The scanner reads it preprocessed, as convcc runs it.
    let pre = std::process::Command::new("cc")
        .args(["-E", "-I", include, "-x", "c", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(gen_src.as_bytes())?;
            c.wait_with_output()
        })
        .expect("cc runs");
    assert!(pre.status.success());
    let m = scan(&pre.stdout, "<stdin>").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(names(&m), ["all", "none"]);
    std::fs::write(dir.join("t.cpm.h"), generate(&m)).unwrap();
    let file = format!("{prelude}#include \"t.cpm.h\"\n{body}");
    for (name, compiler, std) in [("t.c", "cc", "-std=c99"), ("t.cpp", "c++", "-std=c++11")] {
        std::fs::write(dir.join(name), &file).unwrap();
        let out = std::process::Command::new(compiler)
            .args([
                "-fsyntax-only",
                "-Wall",
                "-Wextra",
                "-Werror",
                std,
                "-I",
                include,
            ])
            .arg(dir.join(name))
            .output()
            .expect("the compiler runs");
        assert!(
            out.status.success(),
            "{compiler} {std}:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
