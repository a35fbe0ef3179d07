//! Logging: the runtime's diagnostics as [`tracing`] events, and the small
//! stderr subscriber that prints them when the program has none of its own.
//!
//! # Two kinds of output
//!
//! - **Report lines**: the one-line `converse: …` messages the runtime has
//!   always printed on standard error (an abort or another fatal end, a
//!   launcher that misbehaves, a CCS client the server complains about).
//!   [`report!`] writes such a line itself, whole, and then emits it as a
//!   `tracing` event at the level the caller gives, marked with the field
//!   [`PRINTED`]` = true` (its message is the line without the
//!   `converse: ` prefix). So a report line is on stderr exactly once,
//!   whatever `CONVERSE_LOG` says and whichever subscriber is installed:
//!   an error is never lost, nor printed twice by our own subscriber, which
//!   skips marked events.
//! - **Events**: `tracing::debug!`, `info!`, … at start-up and shutdown
//!   points (how a process joined its job, the business cards, the
//!   connections, the CCS server and its connections). Nothing per message:
//!   a disabled event costs a load of `tracing`'s global level.
//!
//! # The stderr subscriber and `CONVERSE_LOG`
//!
//! [`init`] runs at the start of every job (`Converse::job`): the first call
//! of the process reads `CONVERSE_LOG` (`off`, `error`, `warn`, `info`,
//! `debug`, `trace`, in any case; unset or empty: `error`, so a default run
//! prints what it always did) and, when it asks for more than errors,
//! installs [`Stderr`] as the process's global default subscriber, unless
//! one is set already (at the default none is installed: error lines print
//! themselves, and a program may still install its own later). Another value
//! prints one warning line naming the variable and the accepted values, and
//! the default is used. [`Stderr`] prints each event at or above the level
//! as one line, `converse: LEVEL: target: message key=value …` (the level
//! left out for errors; the target without its `converse::` prefix), and
//! takes only the events of the converse crates (targets `converse`,
//! `converse::…`, `converse_…`): a program's own events are not its
//! business.
//!
//! A Rust program that installs its own global default subscriber (say,
//! `tracing_subscriber::fmt().init()`) *before its first job starts* gets
//! every converse event there instead, report lines included (filter out
//! the `printed` field to skip those: they are on stderr already);
//! `CONVERSE_LOG` then plays no part, and the report lines are still
//! printed on stderr by the runtime. A subscriber set only for one thread
//! (`tracing::subscriber::set_default`) is not seen by the PEs' threads,
//! and does not stop [`init`] from installing ours.
//!
//! # Invariants
//!
//! - Every line (report line, event, the warning about `CONVERSE_LOG`) is
//!   formatted first and written with one `write_all` under stderr's lock
//!   (as `proc::io::error`): it never interleaves with another thread's
//!   line or a `cmi_error!`.
//! - A report line is printed before its event is emitted: a subscriber
//!   that blocks or panics cannot keep it from stderr.
//! - `CONVERSE_LOG` is read once per process; a job started later in the
//!   same process logs at the same level.
//!
//! # Concurrency
//!
//! [`init`] may run on several threads at once (jobs started in parallel
//! by tests): the level is a `OnceLock`, and `tracing` sets the global
//! default at most once (a later attempt fails, harmlessly). [`Stderr`]
//! holds only its level: it records no span and formats each event on the
//! thread that emits it.
use std::fmt::{self, Write as _};
use std::io::Write;
use std::sync::OnceLock;

use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber, span};

/// The environment variable that sets the level of [`Stderr`].
pub(crate) const LOG_VAR: &str = "CONVERSE_LOG";

/// The field that marks a report line's event: its line is on stderr
/// already (see the module comment).
pub(crate) const PRINTED: &str = "printed";

/// The level when `CONVERSE_LOG` is unset, empty or not a level: only the
/// report lines (which are printed anyway) and error events, as before
/// logging went through `tracing`.
const DEFAULT: LevelFilter = LevelFilter::ERROR;

/// What `CONVERSE_LOG` takes, for the warning.
const ACCEPTED: &str = "off, error, warn, info, debug or trace";

/// The level of this process's [`Stderr`], once read.
static FILTER: OnceLock<LevelFilter> = OnceLock::new();

/// Prints `line` on stderr (whole, under its lock) and emits it as an event
/// at `level` (`ERROR`, `WARN`, …) marked [`PRINTED`], for a program's own
/// subscriber; our [`Stderr`] skips it. The event's message is the line
/// without its `converse: ` prefix; its target is the caller's module.
macro_rules! report {
    ($level:ident, $line:expr) => {{
        let line: &str = $line;
        $crate::proc::log::write_line(line);
        ::tracing::event!(
            ::tracing::Level::$level,
            printed = true,
            "{}",
            $crate::proc::log::message_of(line)
        );
    }};
}
pub(crate) use report;

/// Reads `CONVERSE_LOG` (the first call of the process) and, if it asks
/// for more than errors, installs [`Stderr`] as the global default
/// subscriber unless the program set one (see the module comment). Called
/// at the start of every job.
pub(crate) fn init() {
    let max = *FILTER.get_or_init(|| {
        let value = std::env::var(LOG_VAR).ok();
        match filter_from(value.as_deref()) {
            Ok(level) => level,
            Err(warning) => {
                write_line(&warning);
                DEFAULT
            }
        }
    });
    // Errors print themselves (`report!`): a subscriber is installed only
    // when `CONVERSE_LOG` asks for more, so a program that installs its
    // own after a job has started (`tracing_subscriber::fmt().init()`
    // panics if one is set) is not stopped by ours.
    if max > DEFAULT && !tracing::dispatcher::has_been_set() {
        // Another thread may have set one meanwhile: then that one stays.
        let _ = tracing::subscriber::set_global_default(Stderr { max });
    }
}

/// The level `CONVERSE_LOG`'s `value` asks for (`None`: unset), or the
/// warning line to print for a value that is no level.
fn filter_from(value: Option<&str>) -> Result<LevelFilter, String> {
    let Some(text) = value.map(str::trim).filter(|t| !t.is_empty()) else {
        return Ok(DEFAULT);
    };
    parse_level(text).ok_or_else(|| {
        format!(
            "converse: {LOG_VAR}={text:?} is not a log level: use {ACCEPTED} (in any case); \
             logging errors only"
        )
    })
}

/// The level `text` names (`off`, `error`, `warn`, `info`, `debug`,
/// `trace`, in any case), if it names one.
fn parse_level(text: &str) -> Option<LevelFilter> {
    Some(match text.to_ascii_lowercase().as_str() {
        "off" => LevelFilter::OFF,
        "error" => LevelFilter::ERROR,
        "warn" => LevelFilter::WARN,
        "info" => LevelFilter::INFO,
        "debug" => LevelFilter::DEBUG,
        "trace" => LevelFilter::TRACE,
        _ => return None,
    })
}

/// Writes `line` and a newline to stderr with one `write_all` under its
/// lock; a closed stderr is ignored (the process must go on, or end).
pub(crate) fn write_line(line: &str) {
    let mut text = String::with_capacity(line.len() + 1);
    text.push_str(line);
    text.push('\n');
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    let _ = err.flush();
}

/// A report line's message for its event: the line without `converse: `.
pub(crate) fn message_of(line: &str) -> &str {
    line.strip_prefix("converse: ").unwrap_or(line)
}

/// True if `target` is one of the converse crates' (`converse`,
/// `converse::…`, `converse_…`).
fn ours(target: &str) -> bool {
    match target.strip_prefix("converse") {
        Some(rest) => rest.is_empty() || rest.starts_with("::") || rest.starts_with('_'),
        None => false,
    }
}

/// The subscriber [`init`] installs: prints the converse crates' events at
/// or above `max` on stderr, one line each, except report lines (printed
/// already). Records no span.
struct Stderr {
    max: LevelFilter,
}

impl Stderr {
    fn wants(&self, meta: &Metadata<'_>) -> bool {
        meta.is_event()
            && *meta.level() <= self.max
            && ours(meta.target())
            && meta.fields().field(PRINTED).is_none()
    }
}

impl Subscriber for Stderr {
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
        // The level never changes: each callsite is decided once.
        if self.wants(meta) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, meta: &Metadata<'_>) -> bool {
        self.wants(meta)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(self.max)
    }

    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        // Never called for a span this subscriber wants (none): any id.
        span::Id::from_u64(1)
    }

    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}

    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}

    fn event(&self, event: &Event<'_>) {
        write_line(&format_event(event.metadata(), |v| event.record(v)));
    }

    fn enter(&self, _: &span::Id) {}

    fn exit(&self, _: &span::Id) {}
}

/// The line of an event: `converse: LEVEL: target: message key=value …`,
/// the level left out for an error, the target without `converse::`,
/// control characters escaped. `record` visits the event's fields.
fn format_event(meta: &Metadata<'_>, record: impl FnOnce(&mut dyn Visit)) -> String {
    let mut fields = Fields::default();
    record(&mut fields);
    let mut line = String::from("converse: ");
    if *meta.level() != Level::ERROR {
        let _ = write!(line, "{}: ", meta.level());
    }
    let target = meta.target();
    let target = target.strip_prefix("converse::").unwrap_or(target);
    let _ = write!(line, "{target}: {}{}", fields.message, fields.rest);
    if line.contains(char::is_control) {
        // One line, whatever a field held (a peer's text, say).
        let mut one = String::with_capacity(line.len() + 8);
        for c in line.chars() {
            if c.is_control() {
                one.extend(c.escape_default());
            } else {
                one.push(c);
            }
        }
        line = one;
    }
    line
}

/// An event's message and its other fields, as [`format_event`] shows
/// them (` key=value` each).
#[derive(Default)]
struct Fields {
    message: String,
    rest: String,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else if value.is_empty() || value.contains(char::is_whitespace) {
            let _ = write!(self.rest, " {}={value:?}", field.name());
        } else {
            let _ = write!(self.rest, " {}={value}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            // The format arguments of the macro: their `Debug` is their
            // text.
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.rest, " {}={value:?}", field.name());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_in_any_case() {
        assert_eq!(parse_level("off"), Some(LevelFilter::OFF));
        assert_eq!(parse_level("ERROR"), Some(LevelFilter::ERROR));
        assert_eq!(parse_level("Warn"), Some(LevelFilter::WARN));
        assert_eq!(parse_level("info"), Some(LevelFilter::INFO));
        assert_eq!(parse_level("dEbUg"), Some(LevelFilter::DEBUG));
        assert_eq!(parse_level("trace"), Some(LevelFilter::TRACE));
        assert_eq!(parse_level("verbose"), None);
        assert_eq!(parse_level("debug,ccs=trace"), None);
        assert_eq!(parse_level("4"), None);
    }

    #[test]
    fn unset_or_empty_is_the_default_and_blanks_are_trimmed() {
        assert_eq!(filter_from(None), Ok(LevelFilter::ERROR));
        assert_eq!(filter_from(Some("")), Ok(LevelFilter::ERROR));
        assert_eq!(filter_from(Some("  ")), Ok(LevelFilter::ERROR));
        assert_eq!(filter_from(Some(" debug\n")), Ok(LevelFilter::DEBUG));
    }

    #[test]
    fn a_bad_value_gives_one_line_naming_the_variable_and_the_levels() {
        let warning = filter_from(Some("bogus")).unwrap_err();
        assert!(
            warning.starts_with("converse: CONVERSE_LOG=\"bogus\""),
            "{warning}"
        );
        for level in ["off", "error", "warn", "info", "debug", "trace"] {
            assert!(warning.contains(level), "{warning}");
        }
        assert!(!warning.contains('\n'), "{warning}");
        // A control character is shown escaped, not written raw.
        assert!(!filter_from(Some("a\nb")).unwrap_err().contains('\n'));
    }

    #[test]
    fn only_the_converse_crates_targets_are_ours() {
        for t in ["converse", "converse::ccs::server", "converse_ext::cld"] {
            assert!(ours(t), "{t}");
        }
        for t in ["conversely", "myapp", "mio::poll", ""] {
            assert!(!ours(t), "{t}");
        }
    }

    #[test]
    fn report_lines_keep_their_text_and_lose_only_the_prefix_in_events() {
        assert_eq!(message_of("converse: PE 1 aborting: x"), "PE 1 aborting: x");
        assert_eq!(message_of("no prefix"), "no prefix");
    }

    /// Collects the lines [`Stderr`] would print, through the real
    /// `tracing` machinery (a thread-local default, for this test only).
    struct Capture {
        max: LevelFilter,
        lines: std::sync::Mutex<Vec<String>>,
    }

    impl Subscriber for Capture {
        fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
            // Decided per event: other tests' subscribers see the same
            // callsites.
            Interest::sometimes()
        }
        fn enabled(&self, meta: &Metadata<'_>) -> bool {
            Stderr { max: self.max }.wants(meta)
        }
        fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
            span::Id::from_u64(1)
        }
        fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
        fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
        fn event(&self, event: &Event<'_>) {
            let line = format_event(event.metadata(), |v| event.record(v));
            self.lines.lock().unwrap().push(line);
        }
        fn enter(&self, _: &span::Id) {}
        fn exit(&self, _: &span::Id) {}
    }

    fn capture(max: LevelFilter, f: impl FnOnce()) -> Vec<String> {
        let sub = std::sync::Arc::new(Capture {
            max,
            lines: Default::default(),
        });
        tracing::subscriber::with_default(sub.clone(), f);
        sub.lines.lock().unwrap().clone()
    }

    #[test]
    fn events_print_as_one_line_with_level_target_and_fields() {
        let lines = capture(LevelFilter::DEBUG, || {
            tracing::debug!(process = 3, host = "a b", "joined");
            tracing::info!(peer = %"127.0.0.1:9", "accepted");
            tracing::error!("broke");
            tracing::trace!("too fine");
            tracing::warn!(name = %"two\nlines", "a field with a newline");
        });
        assert_eq!(
            lines,
            [
                "converse: DEBUG: proc::log::tests: joined process=3 host=\"a b\"",
                "converse: INFO: proc::log::tests: accepted peer=127.0.0.1:9",
                "converse: proc::log::tests: broke",
                "converse: WARN: proc::log::tests: a field with a newline name=two\\nlines",
            ]
        );
    }

    #[test]
    fn report_events_and_other_crates_events_are_skipped() {
        let lines = capture(LevelFilter::TRACE, || {
            tracing::event!(Level::ERROR, printed = true, "already on stderr");
            tracing::info!(target: "myapp", "not ours");
        });
        assert!(lines.is_empty(), "{lines:?}");
    }

    #[test]
    fn off_prints_nothing() {
        let lines = capture(LevelFilter::OFF, || tracing::error!("even this"));
        assert!(lines.is_empty(), "{lines:?}");
    }
}
