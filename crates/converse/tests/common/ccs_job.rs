//! An in-process job with a CCS server, driven from a thread of its own:
//! shared by the CCS tests that talk to the real server (`ccs_load`,
//! `ccs_clients`). Include it with `#[path = "common/ccs_job.rs"] mod
//! ccs_job;`.
#![allow(dead_code)] // each test file uses a different subset

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use ccs_wire::{Dest, encode_request};
use converse::{Converse, Message, ccs, my_pe};

/// No raw exchange waits longer than this for anything: a hang is a
/// failure, not a stuck test.
pub const IO_TIMEOUT: Duration = Duration::from_secs(60);

/// What one connection got back: every byte the server wrote before it
/// closed (it closes once it has answered).
pub fn exchange(addr: SocketAddr, request: &[u8]) -> io::Result<Vec<u8>> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(IO_TIMEOUT))?;
    s.set_write_timeout(Some(IO_TIMEOUT))?;
    s.write_all(request)?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    Ok(out)
}

/// The exact bytes of a reply carrying `data`: its 4-byte big-endian
/// length, then the data.
pub fn reply_bytes(data: &[u8]) -> Vec<u8> {
    let mut out = ccs_wire::reply_header(data.len()).to_vec();
    out.extend_from_slice(data);
    out
}

/// Runs a job with `args` (which must ask for `++server`); every PE calls
/// `register` to register its CCS handlers, and a `stop` handler is
/// registered beside them. PE 0 runs `driver` on a thread of its own with
/// the server's address; when the driver returns (or panics), a `stop`
/// request ends the job. Returns the driver's result, or re-raises its
/// panic. A job that has not ended after `limit_secs` fails the test.
pub fn with_server<T: Send + 'static>(
    args: &[&str],
    limit_secs: u64,
    register: fn(),
    driver: impl FnOnce(SocketAddr) -> T + Send + 'static,
) -> T {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let result: Arc<Mutex<Option<T>>> = Arc::default();
    let driver_thread: Arc<OnceLock<std::thread::JoinHandle<()>>> = Arc::default();
    let driver = Arc::new(Mutex::new(Some(driver)));
    let code = {
        let (result, driver_thread) = (result.clone(), driver_thread.clone());
        crate::common::within(limit_secs, move || {
            Converse::new()
                .args(args)
                .run(move |_| {
                    register();
                    ccs::register_handler("stop", |_m: Message| {
                        ccs::send_reply(b"bye");
                        converse::exit(0);
                    });
                    if my_pe() != 0 {
                        return;
                    }
                    let addr = ccs::server_address().expect("the server runs in this process");
                    let driver = driver.lock().unwrap().take().expect("one PE 0");
                    let result = result.clone();
                    let _ = driver_thread.set(std::thread::spawn(move || {
                        let outcome =
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| driver(addr)));
                        // The job ends whatever the driver found.
                        let bye =
                            exchange(addr, &encode_request("stop", &Dest::Pe(0), b"").unwrap());
                        match outcome {
                            Ok(v) => *result.lock().unwrap() = Some(v),
                            Err(panic) => std::panic::resume_unwind(panic),
                        }
                        assert_eq!(bye.unwrap(), reply_bytes(b"bye"), "the stop request");
                    }));
                })
                .unwrap()
        })
    };
    let thread = Arc::try_unwrap(driver_thread)
        .ok()
        .and_then(OnceLock::into_inner)
        .expect("PE 0 started the driver");
    if let Err(panic) = thread.join() {
        std::panic::resume_unwind(panic);
    }
    assert_eq!(code, 0, "the job's exit code");
    let value = result.lock().unwrap().take();
    value.expect("the driver returned")
}
