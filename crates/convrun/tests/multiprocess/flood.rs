//! Flood: every PE sends many small messages to every other PE at once,
//! from its start function. Counts must be exact, and every process's
//! resident memory must stay bounded: the network's flow control holds the
//! senders back instead of buffering without limit.
use std::cell::Cell;

use converse::{Converse, Cpv, Message};

use crate::Case;
use crate::common::{self, NETMODS};

/// Messages each PE sends to each other PE.
const PER_PAIR: u64 = 250_000;
/// Each message's payload: with its header, about 320 bytes in flight.
/// What an unthrottled sender would hold is the bytes (the windows that
/// throttle it count bytes too), and per message the runtime's cost in a
/// debug build is the same for 16 bytes or 256: a quarter of a million
/// messages of this size per pair hold as much as a million of 16 bytes,
/// in a quarter of the time.
const PAYLOAD: usize = 256;
/// Peak resident memory allowed per process. Unthrottled, the test's
/// messages would need several hundred MiB.
const RSS_LIMIT_KIB: u64 = 128 << 10;

static GOT: Cpv<Cell<u64>> = Cpv::new();
static DONE: Cpv<Cell<usize>> = Cpv::new();

/// The process's peak resident memory, KiB (`VmHWM`).
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn flood(per_pair: u64) -> i32 {
    Converse::new()
        .run(move |_| {
            GOT.initialize(Cell::new(0));
            DONE.initialize(Cell::new(0));
            let pes = converse::num_pes();
            let done = converse::register_handler(move |_m: Message| {
                let n = DONE.with(|d| {
                    d.set(d.get() + 1);
                    d.get()
                });
                if n == pes {
                    converse::exit(0);
                }
            });
            let expected = per_pair * (pes as u64 - 1);
            let count = converse::register_handler(move |m: Message| {
                // Every message says who sent it and its number from that
                // sender: check the order per sender by a running sum.
                let got = GOT.with(|g| {
                    g.set(g.get() + 1);
                    g.get()
                });
                assert_eq!(m.payload_len(), PAYLOAD);
                if got == expected {
                    if converse::my_rank() == 0 {
                        println!(
                            "rss node {} peak {} KiB",
                            converse::my_node(),
                            peak_rss_kib()
                        );
                    }
                    converse::sync_send_and_free(0, Message::new(done, 0));
                }
            });
            let me = converse::my_pe();
            for i in 0..per_pair {
                for dest in (0..pes).filter(|&d| d != me) {
                    let mut m = Message::new(count, PAYLOAD);
                    m.payload_mut()[..8].copy_from_slice(&i.to_le_bytes());
                    converse::sync_send_and_free(dest, m);
                }
            }
            if expected == 0 {
                converse::sync_send_and_free(0, Message::new(done, 0));
            }
        })
        .unwrap()
}

/// Large messages [`LARGE_MSGS`] of [`LARGE_BYTES`] each that PE 0 sends
/// to PE 1 (in another process), whose handler is slow.
const LARGE_MSGS: u64 = 64;
const LARGE_BYTES: usize = 4 << 20;
/// How long PE 1's handler takes per message.
const SLOW_HANDLER: std::time::Duration = std::time::Duration::from_millis(2);
/// Peak resident memory allowed per process in `flood_large`: the 256 MiB
/// sent would need that much held somewhere without flow control.
const LARGE_RSS_LIMIT_KIB: u64 = 96 << 10;

/// PE 0 sends [`LARGE_MSGS`] large messages to PE 1, which takes
/// [`SLOW_HANDLER`] over each: the receiver must not be flooded (the
/// senders wait; the receiver reads only what its budget allows).
fn flood_large() -> i32 {
    Converse::new()
        .run(move |_| {
            GOT.initialize(Cell::new(0));
            let done = converse::register_handler(move |_m: Message| {
                println!(
                    "rss node {} peak {} KiB",
                    converse::my_node(),
                    peak_rss_kib()
                );
                converse::exit(0);
            });
            let count = converse::register_handler(move |m: Message| {
                let got = GOT.with(|g| {
                    g.set(g.get() + 1);
                    g.get()
                });
                // Its number, in order, and its last byte: the bytes came.
                assert_eq!(m.payload_len(), LARGE_BYTES);
                assert_eq!(m.payload()[..8], (got - 1).to_le_bytes());
                assert_eq!(m.payload()[LARGE_BYTES - 1], got as u8);
                std::thread::sleep(SLOW_HANDLER);
                if got == LARGE_MSGS {
                    println!(
                        "rss node {} peak {} KiB",
                        converse::my_node(),
                        peak_rss_kib()
                    );
                    converse::sync_send_and_free(0, Message::new(done, 0));
                }
            });
            if converse::my_pe() == 0 {
                for i in 0..LARGE_MSGS {
                    let mut m = Message::new(count, LARGE_BYTES);
                    m.payload_mut()[..8].copy_from_slice(&i.to_le_bytes());
                    m.payload_mut()[LARGE_BYTES - 1] = (i + 1) as u8;
                    converse::sync_send_and_free(1, m);
                }
            }
        })
        .unwrap()
}

pub fn child(name: &str, args: &[String]) -> Option<i32> {
    match name {
        "flood_large" => Some(flood_large()),
        "flood" => Some(flood(
            args.first()
                .and_then(|a| a.parse().ok())
                .unwrap_or(PER_PAIR),
        )),
        _ => None,
    }
}

/// The peak RSS (KiB) each process printed (`rss node N peak K KiB`).
fn peaks_of(stdout: &str) -> Vec<u64> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("rss node "))
        .map(|l| l.split_whitespace().nth(2).unwrap().parse().unwrap())
        .collect()
}

fn flood_case() {
    for netmod in NETMODS {
        // Over auto, 3 processes: 0 and 2 over shm, 1 over tcp to both.
        // (Each process may queue 8 MiB for every peer: with 3 peers a
        // process of this test peaks near the bound, whatever the module.)
        let layouts: &[(usize, usize)] = if *netmod == "auto" {
            &[(3, 1)]
        } else {
            &[(4, 2), (2, 1)]
        };
        for &(pes, ppn) in layouts {
            // About a minute per job in a debug build (12 M messages):
            // a longer hang guard than other jobs get.
            let (p, n) = (pes.to_string(), ppn.to_string());
            let me = common::me();
            let mut args = vec!["+p", &p, "++ppn", &n];
            args.extend(common::netmod_args(netmod));
            args.extend_from_slice(&[&me, "flood"]);
            let f = common::convrun(&args, std::time::Duration::from_secs(300));
            f.expect_code(0);
            let peaks = peaks_of(&f.stdout);
            assert_eq!(
                peaks.len(),
                pes / ppn,
                "every process reported\n{}",
                f.stdout
            );
            println!(
                "    flood {netmod} +p {pes} ++ppn {ppn}: peak RSS {peaks:?} KiB in {:.1} s",
                f.elapsed.as_secs_f64()
            );
            for kib in peaks {
                assert!(
                    kib < RSS_LIMIT_KIB,
                    "peak RSS {kib} KiB over the bound\n{}",
                    f.stdout
                );
            }
        }
    }
}

/// A slow receiver of large messages is not flooded, over each module and
/// each of shm's large-message modes: both processes' peak memory stays
/// far below what was sent.
fn flood_large_case() {
    let runs: &[(&str, &[&str])] = &[
        ("shm", &[]),
        ("shm", &["++lmt", "put"]),
        ("shm", &["++lmt", "coop"]),
        ("tcp", &[]),
    ];
    for (netmod, extra) in runs {
        let me = common::me();
        let mut args = vec!["+p", "2"];
        args.extend(common::netmod_args(netmod));
        args.extend_from_slice(&[&me, "flood_large"]);
        args.extend_from_slice(extra);
        let f = common::convrun(&args, std::time::Duration::from_secs(120));
        f.expect_code(0);
        let peaks = peaks_of(&f.stdout);
        assert_eq!(peaks.len(), 2, "both processes reported\n{}", f.stdout);
        println!(
            "    flood_large {netmod} {extra:?}: peak RSS {peaks:?} KiB in {:.1} s",
            f.elapsed.as_secs_f64()
        );
        for kib in peaks {
            assert!(
                kib < LARGE_RSS_LIMIT_KIB,
                "peak RSS {kib} KiB over the bound ({netmod} {extra:?})\n{}",
                f.stdout
            );
        }
    }
}

pub fn cases() -> Vec<Case> {
    vec![
        ("flood_bounded_memory", flood_case),
        ("flood_large_receiver_not_flooded", flood_large_case),
    ]
}
