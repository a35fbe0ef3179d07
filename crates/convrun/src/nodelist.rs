//! The nodelist (`++nodelist FILE`): charmrun's file of the hosts a job
//! runs on.
//!
//! Its lines: `host NAME [OPTIONS]` (processes go to the hosts in turn),
//! `group NAME [OPTIONS]`, and options on a line of their own (`++shell
//! CMD`, before the hosts it applies to); blank lines and lines that start
//! with `#` say nothing. Of the options only `++shell` has an effect: on a
//! `host` line (that host), a `group` line (its hosts, until the next
//! group) or a line of its own (every host after it, unless overridden);
//! the others are accepted and ignored, as they are documented to be.
//!
//! # Invariants
//!
//! - [`parse`] is a pure function of the file's name and text.
//! - Every line is understood or named: a line it cannot make sense of
//!   (an unknown first word, a `host` or `group` without a name) is a
//!   warning that names the file, the line's number (from 1) and the line
//!   (shortened, escaped), and is otherwise skipped, so that a typo does
//!   not go unseen and one bad line does not stop the job.
//! - A line that cannot be skipped without guessing (a `++shell` without
//!   its command, a host name that would read as an option of the remote
//!   shell) and a list without any host are errors: nothing starts.
//!
//! # Concurrency
//!
//! None: read once by the main thread, before any process starts.
use crate::fail;

/// A host of the nodelist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    pub name: String,
    /// Its `++shell` (on its line, its group's, or a line of its own before).
    pub shell: Option<String>,
}

/// What a nodelist says: its hosts, in order, and a warning for each line
/// it does not understand.
#[derive(Debug, PartialEq, Eq)]
pub struct Nodelist {
    pub hosts: Vec<Host>,
    pub warnings: Vec<String>,
}

/// The hosts of the nodelist at `path`; its warnings go to stderr, and an
/// error (or an unreadable file) ends `convrun`.
pub fn read(path: &str) -> Vec<Host> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| fail(&format!("cannot read nodelist {path}: {e}")));
    let list = parse(path, &text).unwrap_or_else(|e| fail(&e));
    for warning in &list.warnings {
        eprintln!("convrun: {warning}");
    }
    list.hosts
}

/// The nodelist `text` (from the file `path`, for the messages).
pub fn parse(path: &str, text: &str) -> Result<Nodelist, String> {
    let mut hosts = Vec::new();
    let mut warnings = Vec::new();
    let mut global_shell: Option<String> = None;
    let mut group_shell: Option<String> = None;
    for (i, line) in text.lines().enumerate() {
        let number = i + 1;
        let mut ignored = |why: &str| {
            warnings.push(format!(
                "nodelist {path} line {number}: `{}` {why}, ignored",
                launch_wire::shown(line.trim())
            ))
        };
        let mut w = line.split_whitespace();
        match w.next() {
            None => {}
            Some(comment) if comment.starts_with('#') => {}
            Some("host") => {
                let Some(name) = w.next() else {
                    ignored("names no host (`host NAME`)");
                    continue;
                };
                if name.starts_with('-') {
                    return Err(format!(
                        "nodelist {path}: host name `{name}` starts with `-`"
                    ));
                }
                let shell = shell_option(path, w)?
                    .or_else(|| group_shell.clone())
                    .or_else(|| global_shell.clone());
                hosts.push(Host {
                    name: name.to_string(),
                    shell,
                });
            }
            Some("group") => {
                if w.next().is_none() {
                    ignored("names no group (`group NAME`)");
                }
                group_shell = shell_option(path, w)?;
            }
            Some("++shell") => {
                global_shell = shell_option(path, line.split_whitespace())?;
            }
            // Another option on a line of its own: accepted, no effect.
            Some(option) if option.starts_with("++") => {}
            Some(_) => ignored(
                "is not understood (nodelist lines are `host NAME`, `group NAME` and `++OPTION VALUE`)",
            ),
        }
    }
    if hosts.is_empty() {
        return Err(format!("nodelist {path} names no host (`host NAME` lines)"));
    }
    Ok(Nodelist { hosts, warnings })
}

/// The value of option `++shell` among `words`, if given.
fn shell_option<'a>(
    path: &str,
    mut words: impl Iterator<Item = &'a str>,
) -> Result<Option<String>, String> {
    while let Some(w) = words.next() {
        if w == "++shell" {
            let v = words
                .next()
                .ok_or_else(|| format!("nodelist {path}: ++shell needs a command"))?;
            return Ok(Some(v.to_string()));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(name: &str, shell: Option<&str>) -> Host {
        Host {
            name: name.into(),
            shell: shell.map(String::from),
        }
    }

    #[test]
    fn hosts_and_their_shells() {
        let text = "\
# a comment
++shell /bin/global

group main ++shell /bin/group ++cpus 2
host a
host b ++shell /bin/own ++speed 1
group other
host c
++cpus 4
";
        let list = parse("nl", text).unwrap();
        assert_eq!(
            list.hosts,
            [
                host("a", Some("/bin/group")),
                host("b", Some("/bin/own")),
                host("c", Some("/bin/global")),
            ]
        );
        assert!(list.warnings.is_empty(), "{:?}", list.warnings);
    }

    #[test]
    fn a_line_not_understood_is_named_and_skipped() {
        let text = "group main\nhots a\nhost b\nhost\n  \t\nlocalhost\ngroup\nhost c\n";
        let list = parse("/tmp/nodes", text).unwrap();
        assert_eq!(list.hosts, [host("b", None), host("c", None)]);
        assert_eq!(
            list.warnings,
            [
                "nodelist /tmp/nodes line 2: `hots a` is not understood (nodelist lines are `host NAME`, `group NAME` and `++OPTION VALUE`), ignored",
                "nodelist /tmp/nodes line 4: `host` names no host (`host NAME`), ignored",
                "nodelist /tmp/nodes line 6: `localhost` is not understood (nodelist lines are `host NAME`, `group NAME` and `++OPTION VALUE`), ignored",
                "nodelist /tmp/nodes line 7: `group` names no group (`group NAME`), ignored",
            ]
        );
    }

    #[test]
    fn a_warning_is_one_short_line() {
        let long = format!("x\u{7}{}\r\n", "y".repeat(500));
        let list = parse("nl", &format!("host a\n{long}")).unwrap();
        let [warning] = &list.warnings[..] else {
            panic!("{:?}", list.warnings)
        };
        assert!(
            warning.starts_with("nodelist nl line 2: `x\\u{7}yyy"),
            "{warning}"
        );
        assert!(warning.contains("…` is not understood"), "{warning}");
        assert!(warning.chars().count() < 250, "{warning}");
        assert!(!warning.chars().any(char::is_control), "{warning}");
    }

    #[test]
    fn what_cannot_be_skipped_is_an_error() {
        for (text, want) in [
            ("host a\n++shell\n", "nodelist nl: ++shell needs a command"),
            ("host a ++shell\n", "nodelist nl: ++shell needs a command"),
            (
                "host -oProxyCommand=x\n",
                "nodelist nl: host name `-oProxyCommand=x` starts with `-`",
            ),
            (
                "# no host\nhots a\n",
                "nodelist nl names no host (`host NAME` lines)",
            ),
            ("", "nodelist nl names no host (`host NAME` lines)"),
        ] {
            assert_eq!(parse("nl", text), Err(want.to_string()), "{text:?}");
        }
    }
}
