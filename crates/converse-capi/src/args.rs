//! Charm++'s command-line helpers (`converse.h`): `CmiGetArgc`,
//! `CmiCopyArgs`, `CmiDeleteArgs`, and the `CmiGetArg*` family that finds
//! a program's own flag in a NULL-terminated `argv`, takes its value and
//! removes both from `argv`.
//!
//! The rules, Charm++'s:
//!
//! - A flag or string option matches a whole argument (`-foo` is not
//!   `-foobar`); a string option's value is the next argument.
//! - A numeric option (`Int`, `Long`, `Double`) also takes its value
//!   joined: `-n 27`, `-n=27`, or `-n27` (a sign or digit right after the
//!   flag). Integers read as C's `%i` does (`0x1f` hex, `017` octal).
//! - Found: the value is stored, the arguments are removed (the ones after
//!   move down, NULL included) and the call returns 1. Not found: 0, and
//!   the destination is unchanged.
//! - A numeric flag without a value, or with one that is no number, ends
//!   the job naming the flag and the text (Charm++ aborts too).
//! - The `Desc` forms take a description for a usage listing; converse-rs
//!   gives none (`CmiArgGivingUsage` is 0, `CmiArgGroup` records nothing),
//!   so descriptions are not kept.
//!
//! `argv` is the program's (what `ConverseInit` gave the start function,
//! runtime flags already removed), or any NULL-terminated array of C
//! strings the caller owns; the strings themselves are never written.
use std::ffi::{CStr, c_char, c_double, c_int};

/// The arguments of a NULL-terminated `argv`, as pointers, NULL excluded.
///
/// # Safety
/// `argv` is null or a NULL-terminated array of pointers.
unsafe fn count(argv: *mut *mut c_char) -> usize {
    if argv.is_null() {
        return 0;
    }
    let mut n = 0;
    // SAFETY: NULL-terminated (the caller's promise): every read is at or
    // before the terminator.
    while !unsafe { *argv.add(n) }.is_null() {
        n += 1;
    }
    n
}

/// Removes the `k` arguments from `at` on, moving the rest (and the NULL)
/// down.
///
/// # Safety
/// `at` points into a NULL-terminated array with at least `k` arguments
/// from `at` on.
unsafe fn delete(at: *mut *mut c_char, k: usize) {
    let mut i = 0;
    loop {
        // SAFETY: `i + k` runs up to the terminator (the caller's promise
        // that `k` arguments precede it), `i` stays below it.
        let next = unsafe { *at.add(i + k) };
        // SAFETY: as above.
        unsafe { *at.add(i) = next };
        if next.is_null() {
            break;
        }
        i += 1;
    }
}

/// `CmiGetArgc(argv)`: the arguments before the NULL (0 for a null
/// `argv`).
///
/// # Safety
/// `argv` is null or a NULL-terminated array.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiGetArgc(argv: *mut *mut c_char) -> c_int {
    // SAFETY: the caller's promise.
    c_int::try_from(unsafe { count(argv) }).unwrap_or(c_int::MAX)
}

/// `CmiCopyArgs(argv)`: a new array (from `malloc`, the caller's to
/// `free`) of the same pointers, NULL-terminated.
///
/// # Safety
/// `argv` is null or a NULL-terminated array.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiCopyArgs(argv: *mut *mut c_char) -> *mut *mut c_char {
    // SAFETY: the caller's promise.
    let n = unsafe { count(argv) };
    // SAFETY: malloc of a positive size; null checked below.
    let copy =
        unsafe { libc::malloc((n + 1) * std::mem::size_of::<*mut c_char>()) }.cast::<*mut c_char>();
    if copy.is_null() {
        converse::abort(&format!("CmiCopyArgs: cannot allocate {} pointers", n + 1));
    }
    // SAFETY: `n` pointers readable at `argv` (counted), `n + 1` writable
    // at `copy` (just allocated); the two do not overlap.
    unsafe {
        if n > 0 {
            std::ptr::copy_nonoverlapping(argv, copy, n);
        }
        copy.add(n).write(std::ptr::null_mut());
    }
    copy
}

/// `CmiDeleteArgs(argv, k)`: removes the first `k` arguments, moving the
/// rest down. Ends the job if `argv` holds fewer than `k`.
///
/// # Safety
/// `argv` is a NULL-terminated array.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiDeleteArgs(argv: *mut *mut c_char, k: c_int) {
    let k = crate::nonneg(k, "CmiDeleteArgs");
    // SAFETY: the caller's promise.
    let n = unsafe { count(argv) };
    if k > n {
        converse::abort(&format!(
            "CmiDeleteArgs: {k} arguments to delete, but argv holds {n}"
        ));
    }
    if k > 0 {
        // SAFETY: `k <= n` arguments before the terminator.
        unsafe { delete(argv, k) };
    }
}

/// The argument at `argv[i]` as bytes.
///
/// # Safety
/// `argv[i]` is a live C string.
unsafe fn arg<'a>(argv: *mut *mut c_char, i: usize) -> &'a [u8] {
    // SAFETY: the caller's promise.
    unsafe { CStr::from_ptr(*argv.add(i)) }.to_bytes()
}

/// The flag's name, or the job ends.
///
/// # Safety
/// `flag` is null or a C string.
unsafe fn flag_name<'a>(flag: *const c_char, call: &str) -> &'a [u8] {
    if flag.is_null() {
        converse::abort(&format!("{call}: the flag is null"));
    }
    // SAFETY: a C string (the caller's promise).
    unsafe { CStr::from_ptr(flag) }.to_bytes()
}

/// Finds `flag` as a whole argument: its index.
///
/// # Safety
/// `argv` is a NULL-terminated array of C strings.
unsafe fn find_whole(argv: *mut *mut c_char, flag: &[u8]) -> Option<usize> {
    // SAFETY: the caller's promise.
    let n = unsafe { count(argv) };
    // SAFETY: each index below `n` is a live C string.
    (0..n).find(|&i| unsafe { arg(argv, i) } == flag)
}

/// Finds numeric option `flag` (see the module comment): its index, the
/// value's text and how many arguments it takes, or the job ends for a
/// flag without a value.
///
/// # Safety
/// `argv` is a NULL-terminated array of C strings.
unsafe fn find_numeric<'a>(
    argv: *mut *mut c_char,
    flag: &[u8],
    call: &str,
) -> Option<(usize, &'a [u8], usize)> {
    // SAFETY: the caller's promise.
    let n = unsafe { count(argv) };
    for i in 0..n {
        // SAFETY: a live C string below `n`.
        let a: &[u8] = unsafe { arg(argv, i) };
        let Some(rest) = a.strip_prefix(flag) else {
            continue;
        };
        match rest.first() {
            None => {
                if i + 1 >= n {
                    converse::abort(&format!(
                        "{call}: the flag {} expects a number, and none follows it",
                        String::from_utf8_lossy(flag)
                    ));
                }
                // SAFETY: `i + 1 < n`.
                return Some((i, unsafe { arg(argv, i + 1) }, 2));
            }
            Some(b'=') => return Some((i, &rest[1..], 1)),
            Some(c) if c.is_ascii_digit() || *c == b'-' || *c == b'+' => {
                return Some((i, rest, 1));
            }
            // `-nodes` is not `-n`: look further.
            Some(_) => {}
        }
    }
    None
}

/// An integer as C's `%i` reads one (sign, then `0x` hex, `0` octal or
/// decimal), the whole text.
fn parse_c_integer(text: &str) -> Option<i64> {
    let t = text.trim_start();
    let (negative, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let (radix, digits) = if let Some(h) = t.strip_prefix("0x").or(t.strip_prefix("0X")) {
        (16, h)
    } else if t.len() > 1 && t.starts_with('0') {
        (8, &t[1..])
    } else {
        (10, t)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let v = i64::from_str_radix(digits, radix).ok()?;
    Some(if negative { v.checked_neg()? } else { v })
}

/// Takes numeric option `flag` out of `argv` and parses its value with
/// `parse`; `Some(value)` if found, or the job ends naming a bad value.
///
/// # Safety
/// `argv` is a NULL-terminated array of C strings; `flag` a C string.
unsafe fn take_numeric<T>(
    argv: *mut *mut c_char,
    flag: *const c_char,
    call: &str,
    what: &str,
    parse: impl Fn(&str) -> Option<T>,
) -> Option<T> {
    if argv.is_null() {
        return None;
    }
    // SAFETY: the caller's promise.
    let name = unsafe { flag_name(flag, call) };
    // SAFETY: the caller's promise.
    let (i, text, k) = unsafe { find_numeric(argv, name, call) }?;
    let text = String::from_utf8_lossy(text);
    let Some(v) = parse(&text) else {
        converse::abort(&format!(
            "{call}: cannot read the value of {} ({text:?}) as {what}",
            String::from_utf8_lossy(name)
        ));
    };
    // SAFETY: `k` arguments from `i` on, before the terminator.
    unsafe { delete(argv.add(i), k) };
    Some(v)
}

/// `CmiGetArgIntDesc(argv, flag, &dest, desc)`: see the module comment.
///
/// # Safety
/// `argv` is null or a NULL-terminated array of C strings; `flag` a C
/// string; `dest` a writable int.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiGetArgIntDesc(
    argv: *mut *mut c_char,
    flag: *const c_char,
    dest: *mut c_int,
    _desc: *const c_char,
) -> c_int {
    const CALL: &str = "CmiGetArgInt";
    // SAFETY: the caller's promise.
    let found = unsafe {
        take_numeric(argv, flag, CALL, "an int", |t| {
            parse_c_integer(t).and_then(|v| c_int::try_from(v).ok())
        })
    };
    // SAFETY: the caller's promise.
    unsafe { store(found, dest, CALL) }
}

/// `CmiGetArgInt(argv, flag, &dest)`.
///
/// # Safety
/// As [`CmiGetArgIntDesc`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiGetArgInt(
    argv: *mut *mut c_char,
    flag: *const c_char,
    dest: *mut c_int,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { CmiGetArgIntDesc(argv, flag, dest, std::ptr::null()) }
}

/// `CmiGetArgLongDesc(argv, flag, &dest, desc)`: a 64-bit integer
/// (`CmiInt8`).
///
/// # Safety
/// As [`CmiGetArgIntDesc`], `dest` a writable `CmiInt8`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiGetArgLongDesc(
    argv: *mut *mut c_char,
    flag: *const c_char,
    dest: *mut i64,
    _desc: *const c_char,
) -> c_int {
    const CALL: &str = "CmiGetArgLong";
    // SAFETY: the caller's promise.
    let found = unsafe { take_numeric(argv, flag, CALL, "a 64-bit integer", parse_c_integer) };
    // SAFETY: the caller's promise.
    unsafe { store(found, dest, CALL) }
}

/// `CmiGetArgLong(argv, flag, &dest)`.
///
/// # Safety
/// As [`CmiGetArgLongDesc`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiGetArgLong(
    argv: *mut *mut c_char,
    flag: *const c_char,
    dest: *mut i64,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { CmiGetArgLongDesc(argv, flag, dest, std::ptr::null()) }
}

/// `CmiGetArgDoubleDesc(argv, flag, &dest, desc)`.
///
/// # Safety
/// As [`CmiGetArgIntDesc`], `dest` a writable double.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiGetArgDoubleDesc(
    argv: *mut *mut c_char,
    flag: *const c_char,
    dest: *mut c_double,
    _desc: *const c_char,
) -> c_int {
    const CALL: &str = "CmiGetArgDouble";
    // SAFETY: the caller's promise.
    let found = unsafe {
        take_numeric(argv, flag, CALL, "a number", |t| {
            t.trim().parse::<f64>().ok()
        })
    };
    // SAFETY: the caller's promise.
    unsafe { store(found, dest, CALL) }
}

/// `CmiGetArgDouble(argv, flag, &dest)`.
///
/// # Safety
/// As [`CmiGetArgDoubleDesc`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiGetArgDouble(
    argv: *mut *mut c_char,
    flag: *const c_char,
    dest: *mut c_double,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { CmiGetArgDoubleDesc(argv, flag, dest, std::ptr::null()) }
}

/// Writes a found value to `dest`: 1 if found, else 0 (`dest` unchanged).
///
/// # Safety
/// `dest` is writable (or null, which ends the job when a value is found).
unsafe fn store<T>(found: Option<T>, dest: *mut T, call: &str) -> c_int {
    match found {
        Some(v) => {
            if dest.is_null() {
                converse::abort(&format!("{call}: the destination is null"));
            }
            // SAFETY: writable (the caller's promise).
            unsafe { dest.write(v) };
            1
        }
        None => 0,
    }
}

/// `CmiGetArgStringDesc(argv, flag, &dest, desc)`: the argument after
/// `flag` (a pointer into `argv`'s strings, not a copy).
///
/// # Safety
/// As [`CmiGetArgIntDesc`], `dest` a writable `char *`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiGetArgStringDesc(
    argv: *mut *mut c_char,
    flag: *const c_char,
    dest: *mut *mut c_char,
    _desc: *const c_char,
) -> c_int {
    const CALL: &str = "CmiGetArgString";
    if argv.is_null() {
        return 0;
    }
    // SAFETY: the caller's promise.
    let name = unsafe { flag_name(flag, CALL) };
    // SAFETY: the caller's promise.
    let Some(i) = (unsafe { find_whole(argv, name) }) else {
        return 0;
    };
    // SAFETY: `i` is below the terminator, so `i + 1` is readable.
    let value = unsafe { *argv.add(i + 1) };
    if value.is_null() {
        converse::abort(&format!(
            "{CALL}: the flag {} expects a value, and none follows it",
            String::from_utf8_lossy(name)
        ));
    }
    // SAFETY: two arguments from `i` on.
    unsafe { delete(argv.add(i), 2) };
    // SAFETY: the caller's promise.
    unsafe { store(Some(value), dest, CALL) }
}

/// `CmiGetArgString(argv, flag, &dest)`.
///
/// # Safety
/// As [`CmiGetArgStringDesc`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiGetArgString(
    argv: *mut *mut c_char,
    flag: *const c_char,
    dest: *mut *mut c_char,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { CmiGetArgStringDesc(argv, flag, dest, std::ptr::null()) }
}

/// `CmiGetArgFlagDesc(argv, flag, desc)`: 1 if `flag` is an argument
/// (removed), else 0.
///
/// # Safety
/// `argv` is null or a NULL-terminated array of C strings; `flag` a C
/// string.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiGetArgFlagDesc(
    argv: *mut *mut c_char,
    flag: *const c_char,
    _desc: *const c_char,
) -> c_int {
    if argv.is_null() {
        return 0;
    }
    // SAFETY: the caller's promise.
    let name = unsafe { flag_name(flag, "CmiGetArgFlag") };
    // SAFETY: the caller's promise.
    match unsafe { find_whole(argv, name) } {
        Some(i) => {
            // SAFETY: one argument at `i`, before the terminator.
            unsafe { delete(argv.add(i), 1) };
            1
        }
        None => 0,
    }
}

/// `CmiGetArgFlag(argv, flag)`.
///
/// # Safety
/// As [`CmiGetArgFlagDesc`].
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiGetArgFlag(
    argv: *mut *mut c_char,
    flag: *const c_char,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { CmiGetArgFlagDesc(argv, flag, std::ptr::null()) }
}

/// `CmiDeprecateArgInt(argv, flag, desc, warning)`: takes integer option
/// `flag` out as `CmiGetArgInt` does and, if it was there, prints
/// `warning`.
///
/// # Safety
/// As [`CmiGetArgIntDesc`]; `warning` a C string.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn CmiDeprecateArgInt(
    argv: *mut *mut c_char,
    flag: *const c_char,
    desc: *const c_char,
    warning: *const c_char,
) {
    let mut ignored: c_int = 0;
    // SAFETY: the caller's promise.
    if unsafe { CmiGetArgIntDesc(argv, flag, &mut ignored, desc) } == 1 {
        // SAFETY: a C string (the caller's promise).
        let w = unsafe { crate::c_str(warning) };
        converse::printf(format_args!("{w}\n"));
    }
}

/// `CmiArgGivingUsage()`: 0, converse-rs lists no usage (see the module
/// comment).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiArgGivingUsage() -> c_int {
    0
}

/// `CmiArgGroup(parent, group)`: names a group of flags in a usage
/// listing; converse-rs gives none, so nothing is recorded.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn CmiArgGroup(_parent: *const c_char, _group: *const c_char) {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    /// A C argv over owned strings (kept alive by the returned vector).
    fn argv(words: &[&str]) -> (Vec<CString>, Vec<*mut c_char>) {
        let owned: Vec<CString> = words.iter().map(|w| CString::new(*w).unwrap()).collect();
        let mut ptrs: Vec<*mut c_char> = owned.iter().map(|s| s.as_ptr().cast_mut()).collect();
        ptrs.push(std::ptr::null_mut());
        (owned, ptrs)
    }

    fn left(ptrs: &[*mut c_char]) -> Vec<String> {
        ptrs.iter()
            .take_while(|p| !p.is_null())
            // SAFETY: the test's live C strings.
            .map(|&p| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn integers_read_as_c_reads_them() {
        assert_eq!(parse_c_integer("27"), Some(27));
        assert_eq!(parse_c_integer("-27"), Some(-27));
        assert_eq!(parse_c_integer("+0x1f"), Some(31));
        assert_eq!(parse_c_integer("017"), Some(15));
        assert_eq!(parse_c_integer("0"), Some(0));
        assert_eq!(parse_c_integer("12abc"), None);
        assert_eq!(parse_c_integer("09"), None);
        assert_eq!(parse_c_integer(""), None);
    }

    #[test]
    fn a_numeric_option_is_taken_in_any_of_its_three_forms() {
        for (words, want) in [
            (&["prog", "-n", "27", "rest"][..], 27),
            (&["prog", "-n=27", "rest"], 27),
            (&["prog", "-n27", "rest"], 27),
            (&["prog", "-nodes", "5", "-n-3", "rest"], -3),
        ] {
            let (_keep, mut ptrs) = argv(words);
            let mut v: c_int = 0;
            let flag = CString::new("-n").unwrap();
            // SAFETY: a NULL-terminated argv of live strings.
            let found = unsafe { CmiGetArgInt(ptrs.as_mut_ptr(), flag.as_ptr(), &mut v) };
            assert_eq!((found, v), (1, want), "{words:?}");
            let rest = left(&ptrs);
            assert_eq!(rest.last().map(String::as_str), Some("rest"));
            assert!(!rest.iter().any(|a| a.starts_with("-n") && a != "-nodes"));
        }
    }

    #[test]
    fn strings_and_flags_match_whole_arguments_and_leave_the_rest_in_order() {
        let (_keep, mut ptrs) = argv(&["prog", "-foobar", "-foo", "-name", "bob", "x"]);
        let foo = CString::new("-foo").unwrap();
        let name = CString::new("-name").unwrap();
        let absent = CString::new("-absent").unwrap();
        let mut value: *mut c_char = std::ptr::null_mut();
        // SAFETY: a NULL-terminated argv of live strings.
        unsafe {
            assert_eq!(CmiGetArgFlag(ptrs.as_mut_ptr(), foo.as_ptr()), 1);
            assert_eq!(CmiGetArgFlag(ptrs.as_mut_ptr(), foo.as_ptr()), 0);
            assert_eq!(
                CmiGetArgString(ptrs.as_mut_ptr(), name.as_ptr(), &mut value),
                1
            );
            assert_eq!(CStr::from_ptr(value).to_str().unwrap(), "bob");
            let mut d = 1.5;
            assert_eq!(
                CmiGetArgDouble(ptrs.as_mut_ptr(), absent.as_ptr(), &mut d),
                0
            );
            assert_eq!(d, 1.5);
            assert_eq!(CmiGetArgc(ptrs.as_mut_ptr()), 3);
        }
        assert_eq!(left(&ptrs), ["prog", "-foobar", "x"]);
    }

    #[test]
    fn copies_and_deletions_keep_the_terminator() {
        let (_keep, mut ptrs) = argv(&["a", "b", "c", "d"]);
        // SAFETY: a NULL-terminated argv; the copy is freed below.
        unsafe {
            let copy = CmiCopyArgs(ptrs.as_mut_ptr());
            CmiDeleteArgs(ptrs.as_mut_ptr(), 3);
            assert_eq!(left(&ptrs), ["d"]);
            assert_eq!(CmiGetArgc(copy), 4);
            libc::free(copy.cast());
            assert_eq!(CmiGetArgc(std::ptr::null_mut()), 0);
        }
    }
}
