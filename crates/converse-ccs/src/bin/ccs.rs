//! `ccs`: send one CCS request to a running Converse job and write the
//! reply's bytes to standard output (see `USAGE`).
use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use converse_ccs::{CcsClient, CcsError, ClientOptions, Credentials, parse_key};

const USAGE: &str = "\
Usage: ccs HOST:PORT HANDLER [options]

Sends one CCS request to a running Converse job (the address it printed as
\"ccs: Server IP = ..., Server port = ...\") and writes the reply's bytes,
unchanged, to standard output.

Destination (one of them; the default is PE 0):
  --pe N          run HANDLER on PE N
  --all           run it on every PE; the server merges the replies
  --pes LIST      run it on the listed PEs, e.g. 1,3,5; the replies are merged

Request data (the default is none):
  --data TEXT     the bytes of TEXT
  --data @FILE    the contents of FILE
  --data -        standard input

Authentication:
  --auth KEYFILE  authenticate with the key in KEYFILE (32 hex digits)
  --level L       the key's security level, 0-254 (default 0)

  --timeout S     give up after S seconds (each of: connecting, sending,
                  waiting for the reply); by default, wait
  -h, --help      print this help
      --version   print the version

Exit status: 0 the reply was written; 1 an error (told on standard error);
2 bad arguments; 3 the server closed the connection without a reply.
";

/// Exit status for bad arguments.
const EXIT_USAGE: u8 = 2;
/// Exit status when the server sent no reply: not always an error (some
/// handlers never reply), so scripts can tell it apart.
const EXIT_NO_REPLY: u8 = 3;

/// Where the request goes.
#[derive(Debug, PartialEq, Eq)]
enum Destination {
    Pe(u32),
    All,
    Pes(Vec<u32>),
}

/// Where the request data comes from.
#[derive(Debug, PartialEq, Eq)]
enum DataSource {
    Empty,
    Text(Vec<u8>),
    File(PathBuf),
    Stdin,
}

/// A command line, understood.
#[derive(Debug, PartialEq, Eq)]
struct Args {
    server: String,
    handler: String,
    destination: Destination,
    data: DataSource,
    key_file: Option<PathBuf>,
    level: Option<u8>,
    timeout: Option<Duration>,
}

#[derive(Debug, PartialEq, Eq)]
enum Command {
    Run(Args),
    Help,
    Version,
}

fn parse_args(args: impl IntoIterator<Item = OsString>) -> Result<Command, String> {
    let mut args = args.into_iter();
    let mut positional = Vec::new();
    let mut destination = None;
    let mut data = None;
    let mut key_file = None;
    let mut level = None;
    let mut timeout = None;
    while let Some(arg) = args.next() {
        let Some(text) = arg.to_str() else {
            positional.push(arg);
            continue;
        };
        if !text.starts_with("--") || text == "--" {
            if text == "-h" {
                return Ok(Command::Help);
            }
            positional.push(arg);
            continue;
        }
        // `--name value` or `--name=value`.
        let (name, inline_value) = match text.split_once('=') {
            Some((name, value)) => (name.to_owned(), Some(OsString::from(value))),
            None => (text.to_owned(), None),
        };
        let mut value = |what: &str| {
            inline_value
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{name} needs {what}"))
        };
        let mut set_destination = |d: Destination| {
            if destination.replace(d).is_some() {
                Err("give one destination: --pe, --all or --pes".to_owned())
            } else {
                Ok(())
            }
        };
        match name.as_str() {
            "--help" => return Ok(Command::Help),
            "--version" => return Ok(Command::Version),
            "--pe" => set_destination(Destination::Pe(parse_number(&value("a PE")?, "--pe")?))?,
            "--all" => {
                if inline_value.is_some() {
                    return Err("--all takes no value".into());
                }
                set_destination(Destination::All)?
            }
            "--pes" => {
                let list = value("a list of PEs")?;
                let list = list
                    .to_str()
                    .ok_or("--pes wants numbers separated by commas")?;
                let pes = list
                    .split(',')
                    .map(|pe| parse_number(pe.trim().as_ref(), "--pes"))
                    .collect::<Result<Vec<u32>, String>>()?;
                set_destination(Destination::Pes(pes))?
            }
            "--data" => {
                let v = value("TEXT, @FILE or -")?;
                let source = if v == "-" {
                    DataSource::Stdin
                } else if let Some(path) = v.to_str().and_then(|t| t.strip_prefix('@')) {
                    DataSource::File(path.into())
                } else {
                    DataSource::Text(v.into_encoded_bytes())
                };
                if data.replace(source).is_some() {
                    return Err("give --data once".into());
                }
            }
            "--auth" => key_file = Some(PathBuf::from(value("a key file")?)),
            "--level" => {
                let v = value("a security level")?;
                let l: u32 = parse_number(&v, "--level")?;
                level = Some(
                    u8::try_from(l)
                        .ok()
                        .filter(|&l| l <= 254)
                        .ok_or("--level is 0-254")?,
                );
            }
            "--timeout" => {
                let v = value("a number of seconds")?;
                let seconds = v
                    .to_str()
                    .and_then(|s| s.parse::<f64>().ok())
                    .and_then(|s| Duration::try_from_secs_f64(s).ok())
                    .ok_or_else(|| {
                        format!("--timeout wants seconds, not {}", v.to_string_lossy())
                    })?;
                timeout = Some(seconds);
            }
            _ => return Err(format!("unknown option {name}")),
        }
    }
    if level.is_some() && key_file.is_none() {
        return Err("--level needs --auth KEYFILE".into());
    }
    let mut positional = positional.into_iter().map(|a| {
        a.into_string()
            .map_err(|a| format!("not UTF-8: {}", a.to_string_lossy()))
    });
    let (Some(server), Some(handler), None) =
        (positional.next(), positional.next(), positional.next())
    else {
        return Err("give the server's HOST:PORT and a HANDLER name".into());
    };
    Ok(Command::Run(Args {
        server: server?,
        handler: handler?,
        destination: destination.unwrap_or(Destination::Pe(0)),
        data: data.unwrap_or(DataSource::Empty),
        key_file,
        level,
        timeout,
    }))
}

fn parse_number(text: &std::ffi::OsStr, option: &str) -> Result<u32, String> {
    text.to_str()
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| format!("{option} wants a number, not {:?}", text.to_string_lossy()))
}

/// Why a run failed, and the exit status that says so.
struct Failure {
    message: String,
    status: u8,
}

impl Failure {
    fn new(message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            status: 1,
        }
    }

    fn ccs(error: CcsError, server: &str) -> Failure {
        let status = if matches!(error, CcsError::NoReply { .. }) {
            EXIT_NO_REPLY
        } else {
            1
        };
        // Most errors name the server's address; these two cannot.
        let message = match error {
            CcsError::Resolve(_) | CcsError::NoAddress => format!("{server}: {error}"),
            _ => error.to_string(),
        };
        Failure { message, status }
    }
}

fn run(args: Args) -> Result<(), Failure> {
    let data = match &args.data {
        DataSource::Empty => Vec::new(),
        DataSource::Text(bytes) => bytes.clone(),
        DataSource::File(path) => std::fs::read(path)
            .map_err(|e| Failure::new(format!("cannot read {}: {e}", path.display())))?,
        DataSource::Stdin => {
            let mut bytes = Vec::new();
            io::stdin()
                .read_to_end(&mut bytes)
                .map_err(|e| Failure::new(format!("cannot read standard input: {e}")))?;
            bytes
        }
    };
    let credentials = match &args.key_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| Failure::new(format!("cannot read {}: {e}", path.display())))?;
            let key = parse_key(&text)
                .map_err(|e| Failure::new(format!("key file {}: {e}", path.display())))?;
            Some(Credentials {
                key,
                level: args.level.unwrap_or(0),
            })
        }
        None => None,
    };
    let options = ClientOptions {
        connect_timeout: args.timeout,
        io_timeout: args.timeout,
        ..ClientOptions::default()
    };
    let fail = |e| Failure::ccs(e, &args.server);
    let mut job =
        CcsClient::connect_with(args.server.as_str(), credentials, options).map_err(fail)?;
    match &args.destination {
        Destination::Pe(pe) => job.send_request(&args.handler, *pe, &data),
        Destination::All => job.send_broadcast(&args.handler, &data),
        Destination::Pes(pes) => job.send_multicast(&args.handler, pes, &data),
    }
    .map_err(fail)?;
    let reply = job.recv_response(args.timeout).map_err(fail)?;
    let mut stdout = io::stdout().lock();
    stdout
        .write_all(&reply)
        .and_then(|()| stdout.flush())
        .map_err(|e| Failure::new(format!("writing the reply: {e}")))
}

fn main() -> ExitCode {
    match parse_args(std::env::args_os().skip(1)) {
        Ok(Command::Help) => {
            print!("{USAGE}");
            ExitCode::SUCCESS
        }
        Ok(Command::Version) => {
            println!("ccs {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Ok(Command::Run(args)) => match run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(failure) => {
                eprintln!("ccs: {}", failure.message);
                ExitCode::from(failure.status)
            }
        },
        Err(message) => {
            eprintln!("ccs: {message}\n(ccs --help tells how to use it)");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Command, String> {
        parse_args(args.iter().map(OsString::from))
    }

    fn run_args(args: &[&str]) -> Args {
        match parse(args) {
            Ok(Command::Run(a)) => a,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn the_defaults_are_pe_0_and_no_data() {
        let a = run_args(&["h:1", "echo"]);
        assert_eq!(
            a,
            Args {
                server: "h:1".into(),
                handler: "echo".into(),
                destination: Destination::Pe(0),
                data: DataSource::Empty,
                key_file: None,
                level: None,
                timeout: None,
            }
        );
    }

    #[test]
    fn options_take_their_value_after_a_space_or_an_equals_sign_anywhere() {
        let a = run_args(&[
            "--pes=1, 3,5",
            "h:1",
            "--data",
            "@in.bin",
            "echo",
            "--auth",
            "k",
            "--level=7",
            "--timeout",
            "1.5",
        ]);
        assert_eq!(a.destination, Destination::Pes(vec![1, 3, 5]));
        assert_eq!(a.data, DataSource::File("in.bin".into()));
        assert_eq!(a.key_file, Some(PathBuf::from("k")));
        assert_eq!(a.level, Some(7));
        assert_eq!(a.timeout, Some(Duration::from_millis(1500)));
        assert_eq!(
            run_args(&["h:1", "x", "--all"]).destination,
            Destination::All
        );
        assert_eq!(
            run_args(&["h:1", "x", "--pe", "4"]).destination,
            Destination::Pe(4)
        );
        assert_eq!(run_args(&["h:1", "x", "--data=-"]).data, DataSource::Stdin);
        assert_eq!(
            run_args(&["h:1", "x", "--data", "a=b"]).data,
            DataSource::Text(b"a=b".to_vec())
        );
    }

    /// Every option the help lists is one the parser knows.
    #[test]
    fn the_help_lists_the_options_the_parser_takes() {
        let options: Vec<&str> = USAGE
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|w| w.starts_with("--") && w.len() > 2)
            .collect();
        assert!(options.len() >= 8, "{options:?}");
        for option in options {
            let err = parse(&["h:1", "x", option, "1"]).err().unwrap_or_default();
            assert!(!err.contains("unknown option"), "{option}: {err}");
        }
        assert_eq!(parse(&["--version"]), Ok(Command::Version));
    }

    #[test]
    fn help_and_mistakes_are_told() {
        assert_eq!(parse(&["--help"]), Ok(Command::Help));
        assert_eq!(parse(&["h:1", "-h"]), Ok(Command::Help));
        for (bad, says) in [
            (&["h:1"][..], "HOST:PORT and a HANDLER"),
            (&["h:1", "x", "y"], "HOST:PORT and a HANDLER"),
            (&["h:1", "x", "--pe"], "--pe needs a PE"),
            (&["h:1", "x", "--pe", "-3"], "--pe wants a number"),
            (&["h:1", "x", "--pe", "1", "--all"], "one destination"),
            (&["h:1", "x", "--pes", "1,,2"], "--pes wants a number"),
            (&["h:1", "x", "--level", "1"], "--level needs --auth"),
            (&["h:1", "x", "--auth", "k", "--level", "255"], "0-254"),
            (
                &["h:1", "x", "--timeout", "soon"],
                "--timeout wants seconds",
            ),
            (&["h:1", "x", "--timeout", "-1"], "--timeout wants seconds"),
            (&["h:1", "x", "--frobnicate"], "unknown option --frobnicate"),
            (&["h:1", "x", "--data", "a", "--data", "b"], "--data once"),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }
}
