//! Fault paths of a Converse job: aborts, runtime errors, exits while PEs
//! wait, panics in PEs, bad runtime flags and malformed message bytes.
//!
//! `abort` (and every runtime error) ends the whole process, so each such
//! scenario runs in a child process: the parent test re-executes this test
//! binary with `--exact child_entry` and `CONVERSE_FAULT_SCENARIO=<name>`;
//! [`child_entry`] runs the named scenario (a Converse job) and exits the
//! process with the job's exit code. The parent checks the exit code and
//! standard error, and kills the child if it runs longer than [`TIMEOUT`], so
//! a hang fails the test instead of hanging CI.
//!
//! Scenarios that cannot end the process (flag parsing, `Message::from_bytes`)
//! run in-process.
mod common;

use std::io::{Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use converse::{
    ABORT_EXIT_CODE, ArgError, Converse, MSG_HEADER_SIZE, Message, MsgError, Queueing, StartError,
};

// For the migratable threads' heap scenarios (`on_thread_heap`).
#[global_allocator]
static HEAP: converse::cth::ThreadHeap = converse::cth::ThreadHeap;

/// A box of a migratable thread's heap, kept where the thread leaves it.
static STASH: std::sync::Mutex<Option<Box<u64>>> = std::sync::Mutex::new(None);

/// Environment variable naming the scenario the child process runs.
const SCENARIO_VAR: &str = "CONVERSE_FAULT_SCENARIO";
/// The port the `ccs_killport` scenario registers.
const KILL_PORT_VAR: &str = "CONVERSE_FAULT_KILL_PORT";
/// More ports (comma-separated) the `ccs_killport` scenario registers
/// after that one, if set.
const MORE_KILL_PORTS_VAR: &str = "CONVERSE_FAULT_MORE_KILL_PORTS";
/// Name of the test that runs scenarios in the child process.
const CHILD_TEST: &str = "child_entry";
/// Longest a scenario may run before it counts as a hang.
const TIMEOUT: Duration = Duration::from_secs(60);
/// Printed to stderr by the child before it starts a scenario.
const STARTED: &str = "fault scenario starting:";
/// Printed to stderr by the child if a scenario that should never return did.
const RETURNED: &str = "fault scenario returned:";
/// Exit code of a child whose scenario returned although it should not have
/// (for example, a job that was expected to abort ended normally).
const UNEXPECTED_RETURN: i32 = 90;
/// Printed by PEs that get past a node barrier they must not get past.
const PASSED_BARRIER: &str = "passed the node barrier";
/// Every runtime flag bit (bundle, system, broadcast, multicast, reduction,
/// …; see `msg::message`), which user messages must not be able to claim.
const FORGED_FLAGS: u32 = u32::MAX;

// ---------------------------------------------------------------------------
// Parent side: running a scenario in a child process.
// ---------------------------------------------------------------------------

/// What a child process did.
struct Outcome {
    scenario: String,
    status: ExitStatus,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

impl Outcome {
    fn describe(&self) -> String {
        format!(
            "scenario `{}`: {} after {:.2?}\n--- child stderr ---\n{}\n--- child stdout ---\n{}",
            self.scenario, self.status, self.elapsed, self.stderr, self.stdout
        )
    }

    /// Asserts the child exited with `code` and its stderr holds every one of
    /// `needles`.
    fn expect(&self, code: i32, needles: &[&str]) {
        assert!(
            self.stderr.contains(STARTED),
            "the child never started the scenario (did the test filter match?)\n{}",
            self.describe()
        );
        assert_eq!(
            self.status.code(),
            Some(code),
            "wrong exit status\n{}",
            self.describe()
        );
        for needle in needles {
            assert!(
                self.stderr.contains(needle),
                "stderr lacks {needle:?}\n{}",
                self.describe()
            );
        }
    }

    /// Asserts stderr does not hold `needle`.
    fn expect_absent(&self, needle: &str) {
        assert!(
            !self.stderr.contains(needle),
            "stderr unexpectedly holds {needle:?}\n{}",
            self.describe()
        );
    }
}

fn drain<R: Read + Send + 'static>(mut r: R) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = r.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// Runs scenario `name` in a child process and waits (at most [`TIMEOUT`])
/// for it to end. Panics, after killing the child, if it does not.
fn run_scenario(name: &str) -> Outcome {
    run_scenario_with(name, &[])
}

/// [`run_scenario`] with extra environment variables for the child.
fn run_scenario_with(name: &str, env: &[(&str, String)]) -> Outcome {
    let exe = std::env::current_exe().expect("path of the test binary");
    let mut child: Child = Command::new(exe)
        .args(["--exact", CHILD_TEST, "--nocapture", "--test-threads=1"])
        .env(SCENARIO_VAR, name)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the child test process");
    let out = drain(child.stdout.take().expect("piped stdout"));
    let err = drain(child.stderr.take().expect("piped stderr"));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("poll the child") {
            break status;
        }
        if start.elapsed() >= TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = err.join().unwrap_or_default();
            let stdout = out.join().unwrap_or_default();
            panic!(
                "scenario `{name}` hung: killed after {TIMEOUT:?}\n--- child stderr ---\n{stderr}\n--- child stdout ---\n{stdout}"
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let elapsed = start.elapsed();
    Outcome {
        scenario: name.to_string(),
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
        elapsed,
    }
}

// ---------------------------------------------------------------------------
// Child side: the scenarios.
// ---------------------------------------------------------------------------

fn args(words: &[&str]) -> Vec<String> {
    std::iter::once("faults")
        .chain(words.iter().copied())
        .map(String::from)
        .collect()
}

/// Runs a normal-mode job with runtime flags `flags` and returns its exit
/// code (re-raising a PE's panic, as `run` does).
fn job<F>(flags: &[&str], start: F) -> i32
where
    F: Fn(&[String]) + Send + Sync + 'static,
{
    Converse::new()
        .args(args(flags))
        .run(start)
        .expect("the runtime flags are valid")
}

fn handler_a(_msg: Message) {}
fn handler_b(_msg: Message) {}

/// Lets the other PEs reach their schedulers (and park) before acting.
fn settle() {
    std::thread::sleep(Duration::from_millis(100));
}

/// Runs scenario `name`; returns the code the child process exits with (for
/// scenarios that end the process themselves, only if they failed to).
fn scenario(name: &str) -> i32 {
    match SCENARIOS.iter().find(|(n, _)| *n == name) {
        Some((_, run)) => run(),
        None => panic!("unknown fault scenario `{name}`"),
    }
}

/// A scenario: runs in the child process, returns its exit code.
type Scenario = fn() -> i32;

#[test]
fn every_scenario_has_a_name_of_its_own() {
    let mut names: Vec<&str> = SCENARIOS.iter().map(|(n, _)| *n).collect();
    names.sort_unstable();
    let before = names.len();
    names.dedup();
    assert_eq!(names.len(), before, "two scenarios share a name");
}

/// The scenarios a child process runs, by name (`CONVERSE_FAULT_SCENARIO`);
/// each is a function of its own below.
const SCENARIOS: &[(&str, Scenario)] = &[
    ("ccs_killport_abort", scenario_ccs_killport_abort),
    ("abort_pe1", scenario_abort_pe1),
    ("assert_pe0", scenario_assert_pe0),
    ("unknown_handler", scenario_unknown_handler),
    ("no_such_host", scenario_no_such_host),
    (
        "unknown_handler_in_table",
        scenario_unknown_handler_in_table,
    ),
    ("handler_mismatch", scenario_handler_mismatch),
    ("handler_mismatch_named", scenario_handler_mismatch_named),
    ("handler_mismatch_late", scenario_handler_mismatch_late),
    ("closure_mismatch", scenario_closure_mismatch),
    ("typed_handler_bad_bytes", scenario_typed_handler_bad_bytes),
    ("typed_slot_unfilled", scenario_typed_slot_unfilled),
    ("typed_pod_wrong_length", scenario_typed_pod_wrong_length),
    ("typed_slot_filled_twice", scenario_typed_slot_filled_twice),
    ("send_pe_out_of_range", scenario_send_pe_out_of_range),
    (
        "sync_send_pe_out_of_range",
        scenario_sync_send_pe_out_of_range,
    ),
    ("node_send_out_of_range", scenario_node_send_out_of_range),
    ("node_query_out_of_range", scenario_node_query_out_of_range),
    ("exit_p4", scenario_exit_p4),
    ("exit_p8", scenario_exit_p8),
    ("exit_from_handler_p8", scenario_exit_from_handler_p8),
    ("panic_in_handler", scenario_panic_in_handler),
    ("panic_in_start_pe0", scenario_panic_in_start_pe0),
    ("panic_during_barrier", scenario_panic_during_barrier),
    ("barrier_exit", scenario_barrier_exit),
    ("barrier_exit_early", scenario_barrier_exit_early),
    ("barrier_exit_two_nodes", scenario_barrier_exit_two_nodes),
    ("converse_init_exit", scenario_converse_init_exit),
    ("converse_init_bad_flag", scenario_converse_init_bad_flag),
    ("forged_runtime_flags", scenario_forged_runtime_flags),
    ("abort_outside_job", scenario_abort_outside_job),
    (
        "exit_during_deliver_specific",
        scenario_exit_during_deliver_specific,
    ),
    ("panic_in_cpv_drop", scenario_panic_in_cpv_drop),
    ("group_pe_out_of_range", scenario_group_pe_out_of_range),
    ("group_repeated_pe", scenario_group_repeated_pe),
    (
        "list_send_pe_out_of_range",
        scenario_list_send_pe_out_of_range,
    ),
    ("list_send_repeated_pe", scenario_list_send_repeated_pe),
    (
        "list_reduce_pe_out_of_range",
        scenario_list_reduce_pe_out_of_range,
    ),
    ("list_reduce_repeated_pe", scenario_list_reduce_repeated_pe),
    (
        "list_reduce_without_caller",
        scenario_list_reduce_without_caller,
    ),
    (
        "multicast_unknown_group_on_creator",
        scenario_multicast_unknown_group_on_creator,
    ),
    (
        "multicast_unknown_group_from_other_pe",
        scenario_multicast_unknown_group_from_other_pe,
    ),
    (
        "group_reduce_unknown_group_on_creator",
        scenario_group_reduce_unknown_group_on_creator,
    ),
    (
        "reduce_form_disagreement",
        scenario_reduce_form_disagreement,
    ),
    (
        "reduce_form_disagreement_between_children",
        scenario_reduce_form_disagreement_between_children,
    ),
    ("reduce_id_disagreement", scenario_reduce_id_disagreement),
    (
        "list_reduce_list_disagreement",
        scenario_list_reduce_list_disagreement,
    ),
    ("list_reduce_both_roots", scenario_list_reduce_both_roots),
    (
        "group_reduce_unknown_group_elsewhere",
        scenario_group_reduce_unknown_group_elsewhere,
    ),
    (
        "dynamic_reduction_id_remote_bad_handler",
        scenario_dynamic_reduction_id_remote_bad_handler,
    ),
    (
        "dynamic_reduction_id_on_pe1",
        scenario_dynamic_reduction_id_on_pe1,
    ),
    ("reduce_id_joined_twice", scenario_reduce_id_joined_twice),
    (
        "reduce_id_contributed_twice",
        scenario_reduce_id_contributed_twice,
    ),
    (
        "reduce_after_polling_handler",
        scenario_reduce_after_polling_handler,
    ),
    (
        "reduce_after_long_handler",
        scenario_reduce_after_long_handler,
    ),
    (
        "reduce_after_polling_main_code",
        scenario_reduce_after_polling_main_code,
    ),
    (
        "thread_stack_overflow_pe1",
        scenario_thread_stack_overflow_pe1,
    ),
    (
        "thread_stack_overflow_stacksize_flag",
        scenario_thread_stack_overflow_stacksize_flag,
    ),
    ("thread_wild_read", scenario_thread_wild_read),
    ("event_wait_in_handler", scenario_event_wait_in_handler),
    ("sleep_in_handler", scenario_sleep_in_handler),
    (
        "event_wait_in_handler_polled_by_thread",
        scenario_event_wait_in_handler_polled_by_thread,
    ),
    ("event_wait_in_start", scenario_event_wait_in_start),
    ("sleep_in_start", scenario_sleep_in_start),
    ("awaken_twice", scenario_awaken_twice),
    ("migrate_plain_thread", scenario_migrate_plain_thread),
    (
        "free_after_the_heap_left",
        scenario_free_after_the_heap_left,
    ),
    ("awaken_moved", scenario_awaken_moved),
    ("finish_from_a_thread", scenario_finish_from_a_thread),
    ("awaken_finished", scenario_awaken_finished),
    ("free_other_thread", scenario_free_other_thread),
    ("free_main_flow", scenario_free_main_flow),
    ("resume_running_thread", scenario_resume_running_thread),
    ("awaken_self_then_poll", scenario_awaken_self_then_poll),
    ("resume_finished", scenario_resume_finished),
];

// A CCS client asked to be told when the job ends
// (`ccs_killport`), maybe others too; then PE 0 aborts.
fn scenario_ccs_killport_abort() -> i32 {
    job(&["+p", "2", "++server"], |_| {
        if converse::my_pe() == 0 {
            let port: u32 = std::env::var(KILL_PORT_VAR).unwrap().parse().unwrap();
            let more = std::env::var(MORE_KILL_PORTS_VAR).unwrap_or_default();
            let more = more.split(',').filter(|p| !p.is_empty());
            let addr = converse::ccs::server_address().unwrap();
            for port in std::iter::once(port).chain(more.map(|p| p.parse().unwrap())) {
                let request = ccs_wire::encode_request(
                    "ccs_killport",
                    &ccs_wire::Dest::Pe(0),
                    &port.to_be_bytes(),
                )
                .unwrap();
                // The server thread answers this built-in by itself.
                let mut s = std::net::TcpStream::connect(addr).unwrap();
                s.write_all(&request).unwrap();
                let mut reply = Vec::new();
                s.read_to_end(&mut reply).unwrap();
                assert_eq!(reply, [0, 0, 0, 0], "an empty reply");
            }
            converse::abort("the test aborts after ccs_killport");
        }
    })
}

// 1. `abort` on PE 1 while PE 0 sits in its scheduler.
fn scenario_abort_pe1() -> i32 {
    job(&["+p", "2"], |_| {
        if converse::my_pe() == 1 {
            settle();
            converse::abort("the test asked PE 1 to abort");
        }
    })
}

// 2. A failed `cmi_assert!` on PE 0.
fn scenario_assert_pe0() -> i32 {
    job(&["+p", "2"], |_| {
        if converse::my_pe() == 0 {
            converse::cmi_assert!(1 + 1 == 3);
        }
    })
}

// 3. A message for a handler index no PE registered.
fn scenario_unknown_handler() -> i32 {
    job(&["+p", "2"], |_| {
        if converse::my_pe() == 0 {
            converse::sync_send_and_free(1, Message::new(99, 0));
        }
    })
}

// 3a'. A host (physical node) that does not exist.
fn scenario_no_such_host() -> i32 {
    job(&["+p", "2"], |_| {
        if converse::my_pe() == 1 {
            converse::machine::hosts::pes_on_physical_node(3);
        }
    })
}

// 3b. The same when the receiver has registered handlers (index 99 is
// past the end of its table, index 2 inside it but empty).
fn scenario_unknown_handler_in_table() -> i32 {
    job(&["+p", "2"], |_| {
        converse::register_handler(handler_a);
        if converse::my_pe() == 0 {
            converse::sync_send_and_free(1, Message::new(2, 0));
        }
    })
}

// 4. Handler tables that differ between PEs.
fn scenario_handler_mismatch() -> i32 {
    job(&["+p", "2"], |_| {
        if converse::my_pe() == 0 {
            converse::register_handler(handler_a);
            converse::register_handler(handler_b);
        } else {
            converse::register_handler(handler_b);
            converse::register_handler(handler_a);
        }
    })
}

// 4a. Handlers of one closure type registered under different
// names (as the C ABI registers C functions) at one index.
fn scenario_handler_mismatch_named() -> i32 {
    job(&["+p", "2"], |_| {
        let name = if converse::my_pe() == 0 {
            "c_handler_x"
        } else {
            "c_handler_y"
        };
        let same_type = |m: Message| drop(m);
        converse::register_handler_named(same_type, "c_handler_same");
        converse::register_handler_named(same_type, name);
    })
}

// 4c. Two closures of one function, registered in a different order on
// the two PEs: their type names are alike, the report tells them apart
// by where each was registered.
fn scenario_closure_mismatch() -> i32 {
    job(&["+p", "2"], |_| {
        let first = |m: Message| drop(m);
        let second = |m: Message| assert!(m.payload().len() < usize::MAX);
        if converse::my_pe() == 0 {
            converse::register_handler(first);
            converse::register_handler(second);
        } else {
            converse::register_handler(second);
            converse::register_handler(first);
        }
    })
}

// 4d. Bytes that are not a `(u64, String)` sent to a typed handler's
// index with the byte API.
fn scenario_typed_handler_bad_bytes() -> i32 {
    job(&["+p", "1"], |_| {
        let h = converse::handler(|v: (u64, String)| println!("{v:?}"));
        converse::sync_send_and_free(0, Message::from_payload(h.index(), &[0xff; 3]));
    })
}

// 4e. A message to a handler slot never filled.
fn scenario_typed_slot_unfilled() -> i32 {
    job(&["+p", "1"], |_| {
        let slot = converse::handler_slot::<u32>();
        slot.handler().send(0, &7);
    })
}

// 4f. Bytes of the wrong length for a `Pod` handler.
fn scenario_typed_pod_wrong_length() -> i32 {
    job(&["+p", "1"], |_| {
        let h = converse::pod_handler(|v: [u32; 2]| println!("{v:?}"));
        converse::sync_send_and_free(0, Message::from_payload(h.index(), &[1; 5]));
    })
}

// 4g. A handler slot filled a second time.
fn scenario_typed_slot_filled_twice() -> i32 {
    job(&["+p", "1"], |_| {
        let slot = converse::handler_slot::<u32>();
        slot.fill(|_| {});
        slot.fill(|_| {});
    })
}

// 4b. Tables that agree at start-up and differ after a registration
// made from a handler, once both PEs are scheduling.
fn scenario_handler_mismatch_late() -> i32 {
    job(&["+p", "2"], |_| {
        let go = converse::register_handler(|_msg: Message| {
            if converse::my_pe() == 0 {
                converse::register_handler(handler_a);
            } else {
                converse::register_handler(handler_b);
            }
        });
        converse::sync_send_and_free(converse::my_pe(), Message::new(go, 0));
    })
}

// 5. A send to a PE out of range.
fn scenario_send_pe_out_of_range() -> i32 {
    job(&["+p", "2"], |_| {
        if converse::my_pe() == 0 {
            converse::sync_send_and_free(7, Message::new(1, 0));
        }
    })
}

// 5b. The copying send, to the first PE number out of range.
fn scenario_sync_send_pe_out_of_range() -> i32 {
    job(&["+p", "2"], |_| {
        if converse::my_pe() == 1 {
            converse::sync_send(2, &Message::new(1, 0));
        }
    })
}

// 6. A node send to a node out of range.
fn scenario_node_send_out_of_range() -> i32 {
    job(&["+p", "4", "++ppn", "2"], |_| {
        if converse::my_pe() == 1 {
            converse::sync_node_send_and_free(2, Message::new(1, 0));
        }
    })
}

// 6b. A topology query about a node out of range.
fn scenario_node_query_out_of_range() -> i32 {
    job(&["+p", "2"], |_| {
        if converse::my_pe() == 1 {
            let first = converse::node_first(5);
            eprintln!("node_first(5) returned {first}");
        }
    })
}

// 7. `exit(3)` from PE 1 while the other PEs sit in their schedulers.
fn scenario_exit_p4() -> i32 {
    job(&["+p", "4"], exit_3_from_pe1)
}

fn scenario_exit_p8() -> i32 {
    job(&["+p", "8"], exit_3_from_pe1)
}

// 7b. `exit(3)` from a handler on the last PE, oversubscribed.
fn scenario_exit_from_handler_p8() -> i32 {
    job(&["+p", "8"], |_| {
        let stop = converse::register_handler(|_msg: Message| converse::exit(3));
        if converse::my_pe() == 0 {
            let last = converse::num_pes() - 1;
            converse::sync_send_and_free(last, Message::new(stop, 0));
        }
    })
}

// 9. A panic in a handler on PE 1: `run` re-raises it here.
fn scenario_panic_in_handler() -> i32 {
    job(&["+p", "2"], |_| {
        let boom = converse::register_handler(|_msg: Message| {
            panic!("deliberate handler panic on PE {}", converse::my_pe())
        });
        if converse::my_pe() == 0 {
            converse::sync_send_and_free(1, Message::new(boom, 0));
        }
    })
}

// 9b. A panic in PE 0's start function while PE 1 sits in its scheduler.
fn scenario_panic_in_start_pe0() -> i32 {
    job(&["+p", "2"], |_| {
        if converse::my_pe() == 0 {
            settle();
            panic!("deliberate start panic on PE 0");
        }
    })
}

// 9c. A panic on PE 1 while PE 0 waits in a node barrier PE 1 never
// reaches.
fn scenario_panic_during_barrier() -> i32 {
    job(&["+p", "2"], |_| {
        if converse::my_pe() == 1 {
            settle();
            panic!("deliberate panic instead of the barrier");
        }
        converse::node_barrier();
        eprintln!("PE {} {PASSED_BARRIER}", converse::my_pe());
    })
}

// 10. PEs blocked in a node barrier while a PE of their node exits
// instead of reaching it.
fn scenario_barrier_exit() -> i32 {
    job(&["+p", "3"], |_| {
        if converse::my_pe() == 2 {
            settle();
            converse::exit(4);
        }
        converse::node_barrier();
        eprintln!("PE {} {PASSED_BARRIER}", converse::my_pe());
    })
}

// 10b. The same when the exit may come before the others arrive.
fn scenario_barrier_exit_early() -> i32 {
    job(&["+p", "3"], |_| {
        if converse::my_pe() == 2 {
            converse::exit(4);
        }
        converse::node_barrier();
        eprintln!("PE {} {PASSED_BARRIER}", converse::my_pe());
    })
}

// 10c. Two nodes: node 1's barrier completes, node 0's never does
// because its PE 1 exits.
fn scenario_barrier_exit_two_nodes() -> i32 {
    job(&["+p", "4", "++ppn", "2"], |_| {
        let me = converse::my_pe();
        if me == 1 {
            settle();
            converse::exit(4);
        }
        converse::node_barrier();
        if me == 0 {
            eprintln!("PE 0 {PASSED_BARRIER}");
        }
    })
}

// 11. The C-like entry point ends the process with the job's code.
fn scenario_converse_init_exit() -> i32 {
    converse::converse_init(
        args(&["+p", "2"]),
        |_| {
            if converse::my_pe() == 0 {
                converse::exit(5);
            }
        },
        false,
        false,
    );
    UNEXPECTED_RETURN
}

// 11b. The C-like entry point with a bad flag: prints it, exits 1.
fn scenario_converse_init_bad_flag() -> i32 {
    converse::converse_init(args(&["+bogus"]), |_| {}, false, false);
    UNEXPECTED_RETURN
}

// A user message whose header claims runtime flags (bundle, system,
// broadcast, reduction...): user sends clear them, so it is
// delivered as the plain message it is.
fn scenario_forged_runtime_flags() -> i32 {
    job(&["+p", "2"], |_| {
        let h = converse::register_handler(|msg: Message| {
            eprintln!("delivered with flags {:#x}", msg.header().flags);
            converse::exit(0);
        });
        if converse::my_pe() == 0 {
            let mut msg = Message::new(h, 16);
            msg.header_mut().flags = FORGED_FLAGS;
            converse::sync_send_and_free(1, msg);
        }
    })
}

// `abort` on a thread that is no PE.
fn scenario_abort_outside_job() -> i32 {
    converse::abort("no job is running")
}

// 7c. `exit(3)` from PE 1 while PE 0 waits for a specific message that
// never comes.
fn scenario_exit_during_deliver_specific() -> i32 {
    job(&["+p", "2"], |_| {
        let never = converse::register_handler(handler_a);
        if converse::my_pe() == 0 {
            converse::deliver_specific_msg(never);
            eprintln!("deliver_specific_msg returned on PE 0");
        } else {
            settle();
            converse::exit(3);
        }
    })
}

// 9d. A panic in the destructor of a PE-private variable of PE 1 (it
// runs when PE 1 finishes, after PE 0 ended the job).
fn scenario_panic_in_cpv_drop() -> i32 {
    job(&["+p", "2"], |_| {
        PANICS_ON_DROP.initialize(PanicOnDrop(converse::my_pe()));
        if converse::my_pe() == 0 {
            settle();
            converse::exit(0);
        }
    })
}

// -------------------------------------------------------------------
// Collectives given bad input: each aborts naming the PE and the
// fault.
// -------------------------------------------------------------------
// 12. A group naming a PE out of range.
fn scenario_group_pe_out_of_range() -> i32 {
    job(&["+p", "2"], |_| {
        if converse::my_pe() == 1 {
            converse::establish_group(&[0, 2]);
        }
    })
}

// 12b. A group naming a PE twice.
fn scenario_group_repeated_pe() -> i32 {
    job(&["+p", "2"], |_| {
        if converse::my_pe() == 0 {
            converse::establish_group(&[1, 0, 1]);
        }
    })
}

// 13. A list send naming a PE out of range (after a valid one).
fn scenario_list_send_pe_out_of_range() -> i32 {
    job(&["+p", "2"], |_| {
        let h = converse::register_handler(handler_a);
        if converse::my_pe() == 1 {
            converse::sync_list_send(&[0, 5], &Message::new(h, 0));
        }
    })
}

// 13b. A list send naming a PE twice.
fn scenario_list_send_repeated_pe() -> i32 {
    job(&["+p", "3"], |_| {
        let h = converse::register_handler(handler_a);
        if converse::my_pe() == 0 {
            converse::sync_list_send(&[2, 1, 2], &Message::new(h, 0));
        }
    })
}

// 14. A list reduction naming a PE out of range.
fn scenario_list_reduce_pe_out_of_range() -> i32 {
    job(&["+p", "2"], |_| {
        let h = converse::register_handler(handler_a);
        let id = converse::global_reduction_id();
        if converse::my_pe() == 1 {
            converse::list_reduce(&[0, 1, 2], Message::new(h, 0), keep_local, id);
        }
    })
}

// 14b. A list reduction naming a PE twice.
fn scenario_list_reduce_repeated_pe() -> i32 {
    job(&["+p", "2"], |_| {
        let h = converse::register_handler(handler_a);
        let id = converse::global_reduction_id();
        if converse::my_pe() == 0 {
            converse::list_reduce(&[0, 1, 0], Message::new(h, 0), keep_local, id);
        }
    })
}

// 14c. A list reduction whose list leaves out the caller.
fn scenario_list_reduce_without_caller() -> i32 {
    job(&["+p", "2"], |_| {
        let h = converse::register_handler(handler_a);
        let id = converse::global_reduction_id();
        if converse::my_pe() == 1 {
            converse::list_reduce(&[0], Message::new(h, 0), keep_local, id);
        }
    })
}

// 15. A multicast, on its would-be creator, to a group that PE never
// established (ID 2 = its second group on 2 PEs; it has none).
fn scenario_multicast_unknown_group_on_creator() -> i32 {
    job(&["+p", "2"], |_| {
        let h = converse::register_handler(handler_a);
        if converse::my_pe() == 0 {
            converse::sync_multicast(converse::Group::from_id(2), &Message::new(h, 0));
        }
    })
}

// 15b. The same group ID multicast to from another PE: the creator
// finds out when the request reaches it.
fn scenario_multicast_unknown_group_from_other_pe() -> i32 {
    job(&["+p", "2"], |_| {
        let h = converse::register_handler(handler_a);
        if converse::my_pe() == 1 {
            converse::sync_multicast(converse::Group::from_id(2), &Message::new(h, 0));
        }
    })
}

// 15c. A group reduction, on the creator, over a group it made only
// after (ID 2 is its second group; it has made one, ID 0).
fn scenario_group_reduce_unknown_group_on_creator() -> i32 {
    job(&["+p", "2"], |_| {
        let h = converse::register_handler(handler_a);
        let id = converse::global_reduction_id();
        if converse::my_pe() == 0 {
            let made = converse::establish_group(&[0, 1]);
            assert_eq!(made.id(), 0);
            let next = converse::Group::from_id(2);
            converse::group_reduce(next, Message::new(h, 0), keep_local, id);
        }
    })
}

// 16. The root uses the message form, its child the struct form, of
// the same call-order reduction.
fn scenario_reduce_form_disagreement() -> i32 {
    job(&["+p", "2"], |_| {
        let h = converse::register_handler(handler_a);
        if converse::my_pe() == 0 {
            converse::reduce(Message::new(h, 8), keep_local);
        } else {
            converse::reduce_struct(7u64, |a, b: Vec<u64>| a + b.iter().sum::<u64>(), h);
        }
    })
}

// 16b. Two children disagree before their parent (which never joins)
// has a form of its own.
fn scenario_reduce_form_disagreement_between_children() -> i32 {
    job(&["+p", "3"], |_| {
        let h = converse::register_handler(handler_a);
        match converse::my_pe() {
            1 => converse::reduce(Message::new(h, 8), keep_local),
            2 => converse::reduce_struct(7u64, |a, b: Vec<u64>| a + b.iter().sum::<u64>(), h),
            _ => {}
        }
    })
}

// 17. PE 1 joins with the second global reduction ID where PE 0
// joins with the first: nothing is in flight, so the stall check
// (after about a second of idleness) must end the job.
fn scenario_reduce_id_disagreement() -> i32 {
    job(&["+p", "2"], |_| {
        let h = converse::register_handler(handler_a);
        let first = converse::global_reduction_id();
        let second = converse::global_reduction_id();
        eprintln!("reduction IDs {} and {}", first.raw(), second.raw());
        let id = if converse::my_pe() == 0 {
            first
        } else {
            second
        };
        converse::reduce_id(Message::new(h, 8), keep_local, id);
    })
}

// 18. One ID, two PE lists: PE 2 lists the PEs in another order, so
// its contribution carries another list digest.
fn scenario_list_reduce_list_disagreement() -> i32 {
    job(&["+p", "3"], |_| {
        let h = converse::register_handler(handler_a);
        let id = converse::global_reduction_id();
        let pes: &[usize] = if converse::my_pe() == 2 {
            &[0, 2, 1]
        } else {
            &[0, 1, 2]
        };
        converse::list_reduce(pes, Message::new(h, 8), keep_local, id);
    })
}

// 18b. One ID, two lists that each make the caller the root: both
// wait for the other, nothing is in flight, the stall check ends
// the job.
fn scenario_list_reduce_both_roots() -> i32 {
    job(&["+p", "2"], |_| {
        let h = converse::register_handler(handler_a);
        let id = converse::global_reduction_id();
        let pes: &[usize] = if converse::my_pe() == 0 {
            &[0, 1]
        } else {
            &[1, 0]
        };
        converse::list_reduce(pes, Message::new(h, 8), keep_local, id);
    })
}

// A group reduction with a group ID nobody established, on a PE that
// is not the ID's creator: the creator is asked and ends the job.
fn scenario_group_reduce_unknown_group_elsewhere() -> i32 {
    job(&["+p", "2"], |_| {
        let h = converse::register_handler(handler_a);
        if converse::my_pe() == 0 {
            let id = converse::dynamic_reduction_id();
            // Group IDs are `seq * num_pes + creator`: 1 is PE 1's first.
            let bogus = converse::Group::from_id(1);
            converse::group_reduce(bogus, Message::new(h, 8), keep_local, id);
        }
    })
}

// `dynamic_reduction_id_remote` with a handler that cannot exist.
fn scenario_dynamic_reduction_id_remote_bad_handler() -> i32 {
    job(&["+p", "2"], |_| {
        if converse::my_pe() == 1 {
            converse::dynamic_reduction_id_remote(usize::MAX, None, b"");
        }
    })
}

// 19. `dynamic_reduction_id` is PE 0's alone.
fn scenario_dynamic_reduction_id_on_pe1() -> i32 {
    job(&["+p", "2"], |_| {
        if converse::my_pe() == 1 {
            let id = converse::dynamic_reduction_id();
            eprintln!("PE 1 got dynamic reduction ID {}", id.raw());
        }
    })
}

// 20. The root joins one ID'd reduction twice while it waits for its
// child.
fn scenario_reduce_id_joined_twice() -> i32 {
    job(&["+p", "2"], |_| {
        let h = converse::register_handler(handler_a);
        let id = converse::global_reduction_id();
        if converse::my_pe() == 0 {
            converse::reduce_id(Message::new(h, 8), keep_local, id);
            converse::reduce_id(Message::new(h, 8), keep_local, id);
        }
    })
}

// 20b. A leaf joins one ID'd reduction twice: its parent (which has
// not joined) gets two contributions from it.
fn scenario_reduce_id_contributed_twice() -> i32 {
    job(&["+p", "2"], |_| {
        let h = converse::register_handler(handler_a);
        let id = converse::global_reduction_id();
        if converse::my_pe() == 1 {
            converse::reduce_id(Message::new(h, 8), keep_local, id);
            converse::reduce_id(Message::new(h, 8), keep_local, id);
        }
    })
}

// 21. A healthy reduction whose last contribution comes from a
// handler that computes for a while, polling the scheduler to
// stay responsive (nothing is in flight meanwhile). It must
// complete: PE 0, idle with the reduction in progress, must not
// take the job for stalled.
fn scenario_reduce_after_polling_handler() -> i32 {
    job(&["+p", "2"], |_| {
        let result = converse::register_handler(print_result_and_exit);
        let compute = converse::register_handler(move |_msg: Message| {
            poll_for(POLLING_COMPUTE);
            converse::reduce(msg_word(result, 1), add_words);
        });
        if converse::my_pe() == 0 {
            converse::reduce(msg_word(result, 2), add_words);
        } else {
            converse::sync_send_and_free(1, Message::new(compute, 0));
        }
    })
}

// 21c. The control case: the handler computes as long without
// polling. The stall check must wait for it (detection waves
// are answered between handlers only) and the reduction must
// complete.
fn scenario_reduce_after_long_handler() -> i32 {
    job(&["+p", "2"], |_| {
        let result = converse::register_handler(print_result_and_exit);
        let compute = converse::register_handler(move |_msg: Message| {
            std::thread::sleep(POLLING_COMPUTE);
            converse::reduce(msg_word(result, 1), add_words);
        });
        if converse::my_pe() == 0 {
            converse::reduce(msg_word(result, 2), add_words);
        } else {
            converse::sync_send_and_free(1, Message::new(compute, 0));
        }
    })
}

// 21b. The same in user-calls-scheduler mode: PE 1's main code polls
// while it computes, then contributes; PE 0 waits in
// `schedule_forever`.
fn scenario_reduce_after_polling_main_code() -> i32 {
    job_user(&["+p", "2"], |_| {
        let result = converse::register_handler(print_result_and_exit);
        if converse::my_pe() == 0 {
            converse::reduce(msg_word(result, 2), add_words);
        } else {
            poll_for(POLLING_COMPUTE);
            converse::reduce(msg_word(result, 1), add_words);
        }
        converse::schedule_forever();
    })
}

// 22. User-level threads.
// 22a. A thread on PE 1 runs off its 64 KiB stack.
fn scenario_thread_stack_overflow_pe1() -> i32 {
    job(&["+p", "2"], |_| {
        if converse::my_pe() == 1 {
            converse::Thread::create(
                || {
                    recurse_forever(0);
                },
                64 << 10,
            )
            .awaken();
        }
    })
}

// 22b. The same on PE 0 (the process's first thread), with the
// stack size from `+stacksize`.
fn scenario_thread_stack_overflow_stacksize_flag() -> i32 {
    job(&["+p", "2", "+stacksize", "32K"], |_| {
        if converse::my_pe() == 0 {
            converse::Thread::create(
                || {
                    recurse_forever(0);
                },
                0,
            )
            .awaken();
        }
    })
}

// 22c. A fault in a thread that is not a stack overflow (a wild
// read) is not reported as one: the process dies of SIGSEGV.
fn scenario_thread_wild_read() -> i32 {
    job(&["+p", "1"], |_| {
        converse::Thread::create(
            || {
                let wild = std::hint::black_box(16usize) as *const u8;
                // SAFETY: deliberately not: the read faults.
                let byte = unsafe { std::ptr::read_volatile(wild) };
                eprintln!("read {byte}");
            },
            0,
        )
        .awaken();
    })
}

// 22d. Blocking in a handler: Event::wait.
fn scenario_event_wait_in_handler() -> i32 {
    job(&["+p", "2"], |_| {
        let h = converse::register_handler(|_msg: Message| {
            converse::Event::new().wait();
        });
        if converse::my_pe() == 0 {
            converse::sync_send_and_free(1, Message::new(h, 0));
        }
    })
}

// 22e. Blocking in a handler: sleep.
fn scenario_sleep_in_handler() -> i32 {
    job(&["+p", "2"], |_| {
        let h = converse::register_handler(|_msg: Message| converse::sleep(1.0));
        if converse::my_pe() == 0 {
            converse::sync_send_and_free(0, Message::new(h, 0));
        }
    })
}

// 22f. Blocking in a handler that runs on a scheduler a thread
// polls: the handler still must not block.
fn scenario_event_wait_in_handler_polled_by_thread() -> i32 {
    job(&["+p", "2"], |_| {
        let h = converse::register_handler(|_msg: Message| {
            converse::Event::new().wait();
        });
        if converse::my_pe() == 1 {
            converse::Thread::create(
                move || {
                    converse::sync_send_and_free(1, Message::new(h, 0));
                    converse::schedule_poll();
                },
                0,
            )
            .awaken();
        }
    })
}

// 22g. Blocking in the start function of a normal-mode job.
fn scenario_event_wait_in_start() -> i32 {
    job(&["+p", "2"], |_| {
        if converse::my_pe() == 1 {
            converse::Event::new().wait();
        }
    })
}

fn scenario_sleep_in_start() -> i32 {
    job(&["+p", "2"], |_| {
        if converse::my_pe() == 0 {
            converse::sleep(1.0);
        }
    })
}

// 22h. A thread awakened twice before it runs.
fn scenario_awaken_twice() -> i32 {
    job(&["+p", "2"], |_| {
        if converse::my_pe() == 1 {
            let t = converse::Thread::create(|| {}, 0);
            t.awaken();
            t.awaken_prio(Queueing::IFifo(3));
        }
    })
}

// 22h1. Moving a thread that is not migratable; awakening a
// thread handle that was packed to move.
fn scenario_migrate_plain_thread() -> i32 {
    job(&["+p", "2"], |_| {
        if converse::my_pe() == 0 {
            converse::Thread::create(|| converse::cth::migrate::migrate_self(1), 0).awaken();
        }
    })
}

// Memory of a thread's heap freed after the heap left with it.
fn scenario_free_after_the_heap_left() -> i32 {
    job(&["+p", "1"], |_| {
        let t = converse::Thread::create_migratable(
            || {
                converse::cth::on_thread_heap(|| {
                    *STASH.lock().unwrap() = Some(Box::new(5));
                });
                converse::suspend();
            },
            0,
        );
        t.awaken();
        converse::Thread::create(
            move || {
                let _packed = t.pack().expect("packs");
                drop(STASH.lock().unwrap().take());
            },
            0,
        )
        .awaken();
    })
}

fn scenario_awaken_moved() -> i32 {
    job(&["+p", "1"], |_| {
        let t = converse::Thread::create_migratable(converse::suspend, 0);
        t.awaken();
        converse::Thread::create(
            move || {
                let _packed = t.pack().expect("packs");
                t.awaken();
            },
            0,
        )
        .awaken();
    })
}

// 22h2. `finish` called from a user-level thread of an
// `init_returns` job (it must come from the main flow).
fn scenario_finish_from_a_thread() -> i32 {
    Converse::new()
        .args(args(&["+p", "1"]))
        .init_returns(|_| {})
        .expect("valid flags");
    converse::Thread::create(
        || {
            converse::finish(0);
        },
        0,
    )
    .awaken();
    converse::schedule_poll();
    UNEXPECTED_RETURN
}

// 22i. A thread awakened after it finished.
fn scenario_awaken_finished() -> i32 {
    job_user(&["+p", "1"], |_| {
        let t = converse::Thread::create(|| {}, 0);
        t.awaken();
        converse::schedule_poll();
        t.awaken();
    })
}

// 22j. free of a thread other than the running one.
fn scenario_free_other_thread() -> i32 {
    job(&["+p", "2"], |_| {
        if converse::my_pe() == 0 {
            let t = converse::Thread::create(|| {}, 0);
            t.free();
        }
    })
}

// 22k. free of the main flow.
fn scenario_free_main_flow() -> i32 {
    job_user(&["+p", "2"], |_| {
        if converse::my_pe() == 1 {
            converse::Thread::current().free();
        }
    })
}

// 22l. Resume of a running thread: thread 1 polls the scheduler,
// which runs thread 2 on top of it; thread 2 resumes thread 1.
fn scenario_resume_running_thread() -> i32 {
    job_user(&["+p", "1"], |_| {
        let first = converse::Thread::create(
            || {
                let me = converse::Thread::current();
                converse::Thread::create(move || me.resume(), 0).awaken();
                converse::schedule_poll();
            },
            0,
        );
        first.awaken();
        converse::schedule_poll();
    })
}

// 22m. A thread awakens itself and polls the scheduler, which finds
// its token while it runs.
fn scenario_awaken_self_then_poll() -> i32 {
    job_user(&["+p", "2"], |_| {
        if converse::my_pe() == 1 {
            converse::Thread::create(
                || {
                    converse::Thread::current().awaken();
                    converse::schedule_poll();
                },
                0,
            )
            .awaken();
            converse::schedule_poll();
        }
    })
}

// 22n. Resume of a finished thread.
fn scenario_resume_finished() -> i32 {
    job_user(&["+p", "1"], |_| {
        let t = converse::Thread::create(|| {}, 0);
        t.resume();
        assert!(t.is_finished());
        t.resume();
    })
}

/// Runs a user-calls-scheduler job with runtime flags `flags` and returns
/// its exit code.
fn job_user<F>(flags: &[&str], start: F) -> i32
where
    F: Fn(&[String]) + Send + Sync + 'static,
{
    Converse::new()
        .args(args(flags))
        .run_user_scheduler(start)
        .expect("the runtime flags are valid")
}

/// A message-form merge that keeps the local message.
fn keep_local(local: Message, _children: Vec<Message>) -> Message {
    local
}

/// A message for `handler` carrying one little-endian `u64`.
fn msg_word(handler: usize, word: u64) -> Message {
    Message::from_payload(handler, &word.to_le_bytes())
}

fn word(msg: &Message) -> u64 {
    u64::from_le_bytes(msg.payload()[..8].try_into().expect("an 8-byte payload"))
}

/// A message-form merge that adds the words.
fn add_words(local: Message, children: Vec<Message>) -> Message {
    let sum = word(&local) + children.iter().map(word).sum::<u64>();
    msg_word(local.handler(), sum)
}

/// Printed with the result of a reduction that completed.
const REDUCTION_RESULT: &str = "reduction result";

fn print_result_and_exit(msg: Message) {
    eprintln!("{REDUCTION_RESULT} {}", word(&msg));
    converse::exit(0);
}

/// How long the computations of scenarios 21 run: well past the
/// runtime's one-second stall check.
const POLLING_COMPUTE: Duration = Duration::from_millis(2500);

/// Computes (sleeps) for `how_long`, polling the scheduler every few
/// milliseconds.
fn poll_for(how_long: Duration) {
    let start = Instant::now();
    while start.elapsed() < how_long {
        converse::schedule_poll();
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Recurses until the stack runs out (each frame holds a buffer).
fn recurse_forever(depth: u64) -> u64 {
    let buf = std::hint::black_box([depth; 64]);
    if depth == u64::MAX {
        return 0;
    }
    recurse_forever(depth + 1) + buf[3]
}

/// A PE-private value whose destructor panics on PE 1.
struct PanicOnDrop(usize);

impl Drop for PanicOnDrop {
    fn drop(&mut self) {
        if self.0 == 1 {
            panic!("deliberate panic dropping PE 1's private variable");
        }
    }
}

static PANICS_ON_DROP: converse::Cpv<PanicOnDrop> = converse::Cpv::new();

fn exit_3_from_pe1(_args: &[String]) {
    if converse::my_pe() == 1 {
        settle();
        converse::exit(3);
    }
}

/// Runs the scenario named by `CONVERSE_FAULT_SCENARIO`, if set, and exits
/// the process with its code. Does nothing in a normal test run.
#[test]
fn child_entry() {
    let Ok(name) = std::env::var(SCENARIO_VAR) else {
        return;
    };
    eprintln!("{STARTED} {name}");
    let code = scenario(&name);
    eprintln!("{RETURNED} {name} returned {code}");
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    std::process::exit(code)
}

// ---------------------------------------------------------------------------
// Parent tests.
// ---------------------------------------------------------------------------

#[test]
#[cfg(feature = "ccs")]
fn an_abort_tells_ccs_killport_callers() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let out = run_scenario_with("ccs_killport_abort", &[(KILL_PORT_VAR, port.to_string())]);
    out.expect(
        ABORT_EXIT_CODE,
        &["converse: PE 0 aborting: the test aborts after ccs_killport"],
    );
    // The notice was written before the process ended.
    assert_eq!(common::kill_notice(&listener), b"die\n\0");
}

#[test]
#[cfg(feature = "ccs")]
fn an_abort_ends_promptly_however_many_kill_ports_never_answer() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // 100 listeners whose accept queue is full (backlog 0, one connection
    // in it) and never drained: a connect to one stalls.
    let stalled: Vec<_> = (0..100)
        .map(|_| {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            rustix::net::listen(&l, 0).unwrap();
            let filler = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
            (l, filler)
        })
        .collect();
    let more: Vec<String> = stalled
        .iter()
        .map(|(l, _)| l.local_addr().unwrap().port().to_string())
        .collect();
    let out = run_scenario_with(
        "ccs_killport_abort",
        &[
            (KILL_PORT_VAR, port.to_string()),
            (MORE_KILL_PORTS_VAR, more.join(",")),
        ],
    );
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 0 aborting: the test aborts after ccs_killport",
            "cannot tell 63 of 64 ccs_killport callers that the job ends",
        ],
    );
    // The notices go out at once under one deadline (2 s); one after
    // another, the 63 stalled ones kept would take a minute.
    assert!(
        out.elapsed < Duration::from_secs(10),
        "the abort took {:?}\n{}",
        out.elapsed,
        out.describe()
    );
    assert_eq!(common::kill_notice(&listener), b"die\n\0");
    drop(stalled);
}

#[test]
fn abort_on_pe1_names_pe_and_message() {
    let out = run_scenario("abort_pe1");
    assert_eq!(ABORT_EXIT_CODE, 1);
    out.expect(
        ABORT_EXIT_CODE,
        &["converse: PE 1 aborting: the test asked PE 1 to abort"],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn failed_cmi_assert_aborts_with_expression() {
    let out = run_scenario("assert_pe0");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 0 aborting:",
            "assertion",
            "1 + 1 == 3",
            "faults.rs",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn unknown_handler_aborts_on_receiver() {
    let out = run_scenario("unknown_handler");
    out.expect(
        ABORT_EXIT_CODE,
        &["converse: PE 1 aborting:", "unknown handler 99", "PE 0"],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn a_host_that_does_not_exist_is_named() {
    let out = run_scenario("no_such_host");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 1 aborting:",
            "pes_on_physical_node: physical node 3 does not exist: the job has physical nodes 0..1",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn unknown_handler_inside_table_aborts_on_receiver() {
    let out = run_scenario("unknown_handler_in_table");
    out.expect(
        ABORT_EXIT_CODE,
        &["converse: PE 1 aborting:", "unknown handler 2"],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn differing_handler_tables_abort_naming_both_pes() {
    let out = run_scenario("handler_mismatch");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "aborting: handler tables differ at index 1",
            "PE 0",
            "PE 1",
            "handler_a",
            "handler_b",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn closures_of_one_function_are_told_apart_by_where_they_were_registered() {
    let out = run_scenario("closure_mismatch");
    let here = format!("(registered at {}:", file!());
    out.expect(
        ABORT_EXIT_CODE,
        &["aborting: handler tables differ at index 1", &here],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn a_typed_handler_names_itself_and_its_type_for_bytes_it_cannot_read() {
    let out = run_scenario("typed_handler_bad_bytes");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 0 aborting: the typed handler registered at",
            file!(),
            "got a message of 3 bytes that is not a `(u64, alloc::string::String)`",
        ],
    );
}

#[test]
fn an_unfilled_handler_slot_names_where_it_was_made() {
    let out = run_scenario("typed_slot_unfilled");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "the handler slot made at",
            file!(),
            "got a message before it was filled",
        ],
    );
}

#[test]
fn a_pod_handler_names_the_size_it_expected() {
    let out = run_scenario("typed_pod_wrong_length");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "the typed handler registered at",
            file!(),
            "got a message of 5 bytes that is not a `[u32; 2]`: a `[u32; 2]` is 8 bytes",
        ],
    );
}

#[test]
fn a_handler_slot_filled_twice_says_where() {
    let out = run_scenario("typed_slot_filled_twice");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "the handler slot made at",
            file!(),
            "was filled twice (again at",
        ],
    );
}

#[test]
fn handlers_of_one_type_under_different_names_differ() {
    let out = run_scenario("handler_mismatch_named");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "aborting: handler tables differ at index 4",
            "c_handler_x",
            "c_handler_y",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn handler_tables_differing_after_late_registration_abort() {
    let out = run_scenario("handler_mismatch_late");
    out.expect(
        ABORT_EXIT_CODE,
        &["aborting: handler tables differ at index 4", "PE 0", "PE 1"],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn send_to_pe_out_of_range_aborts() {
    let out = run_scenario("send_pe_out_of_range");
    out.expect(
        ABORT_EXIT_CODE,
        &["converse: PE 0 aborting:", "PE 7", "0..2"],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn copying_send_to_pe_out_of_range_aborts() {
    let out = run_scenario("sync_send_pe_out_of_range");
    out.expect(
        ABORT_EXIT_CODE,
        &["converse: PE 1 aborting:", "PE 2", "0..2"],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn node_send_out_of_range_aborts() {
    let out = run_scenario("node_send_out_of_range");
    out.expect(
        ABORT_EXIT_CODE,
        &["converse: PE 1 aborting:", "node 2", "0..2"],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn node_query_out_of_range_aborts() {
    let out = run_scenario("node_query_out_of_range");
    out.expect(
        ABORT_EXIT_CODE,
        &["converse: PE 1 aborting:", "node 5", "0..1"],
    );
    out.expect_absent("node_first(5) returned");
}

#[test]
fn exit_from_pe1_with_4_pes_ends_job_with_its_code() {
    let out = run_scenario("exit_p4");
    out.expect(3, &["returned 3"]);
}

#[test]
fn exit_from_pe1_with_8_pes_oversubscribed_ends_job_with_its_code() {
    let out = run_scenario("exit_p8");
    out.expect(3, &["returned 3"]);
}

#[test]
fn exit_from_handler_with_8_pes_ends_job_with_its_code() {
    let out = run_scenario("exit_from_handler_p8");
    out.expect(3, &["returned 3"]);
}

/// The panic is named as an abort is (the PE, the message and where), then
/// re-raised by `run` once every PE stopped.
#[test]
fn panic_in_handler_is_reraised_by_run() {
    let out = run_scenario("panic_in_handler");
    out.expect(
        101,
        &["converse: PE 1 panicked: deliberate handler panic on PE 1 at crates/converse/tests/faults.rs:"],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn exit_while_a_pe_waits_in_deliver_specific_msg_ends_job() {
    let out = run_scenario("exit_during_deliver_specific");
    out.expect(3, &["returned 3"]);
    out.expect_absent("deliver_specific_msg returned");
}

/// A panic in PE-private state's destructor is a panic of that PE's code: the
/// job must report it (`run` re-raises it, so the child exits 101), not end
/// with code 0 as if nothing happened. (Fails at the time of writing: the
/// runtime drops PE-private variables in `teardown`, outside the
/// `catch_unwind` of `pe_body`, and ignores the result of joining PE threads.)
#[test]
fn panic_in_pe_private_destructor_is_reraised_by_run() {
    let out = run_scenario("panic_in_cpv_drop");
    out.expect(
        101,
        &["converse: PE 1 panicked: deliberate panic dropping PE 1's private variable at "],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn panic_in_start_on_pe0_is_reraised_by_run() {
    let out = run_scenario("panic_in_start_pe0");
    out.expect(
        101,
        &["converse: PE 0 panicked: deliberate start panic on PE 0 at "],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn panic_while_a_pe_waits_in_node_barrier_does_not_hang() {
    let out = run_scenario("panic_during_barrier");
    out.expect(101, &["deliberate panic instead of the barrier"]);
    out.expect_absent(PASSED_BARRIER);
    out.expect_absent(RETURNED);
}

#[test]
fn exit_while_pes_wait_in_node_barrier_ends_job() {
    let out = run_scenario("barrier_exit");
    out.expect(4, &["returned 4"]);
    out.expect_absent(PASSED_BARRIER);
}

#[test]
fn exit_before_pes_reach_node_barrier_ends_job() {
    let out = run_scenario("barrier_exit_early");
    out.expect(4, &["returned 4"]);
    out.expect_absent(PASSED_BARRIER);
}

#[test]
fn exit_while_one_node_waits_in_its_barrier_ends_job() {
    let out = run_scenario("barrier_exit_two_nodes");
    out.expect(4, &["returned 4"]);
    out.expect_absent(PASSED_BARRIER);
}

#[test]
fn converse_init_exits_process_with_job_code() {
    let out = run_scenario("converse_init_exit");
    out.expect(5, &[]);
    out.expect_absent(RETURNED);
}

#[test]
fn converse_init_with_bad_flag_prints_it_and_exits_1() {
    let out = run_scenario("converse_init_bad_flag");
    out.expect(1, &["converse: ", "`+bogus`"]);
    out.expect_absent(RETURNED);
}

#[test]
fn user_sends_cannot_claim_runtime_flags() {
    let out = run_scenario("forged_runtime_flags");
    out.expect(0, &["delivered with flags 0x0"]);
}

#[test]
fn abort_outside_a_job_has_no_pe_number() {
    let out = run_scenario("abort_outside_job");
    out.expect(ABORT_EXIT_CODE, &["converse: aborting: no job is running"]);
    out.expect_absent(RETURNED);
}

// ---------------------------------------------------------------------------
// Parent tests: collectives given bad input.
// ---------------------------------------------------------------------------

#[test]
fn group_with_pe_out_of_range_aborts() {
    let out = run_scenario("group_pe_out_of_range");
    out.expect(
        ABORT_EXIT_CODE,
        &["converse: PE 1 aborting: establish_group:", "PE 2", "0..2"],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn group_with_repeated_pe_aborts() {
    let out = run_scenario("group_repeated_pe");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 0 aborting: establish_group:",
            "PE 1 more than once",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn list_send_with_pe_out_of_range_aborts() {
    let out = run_scenario("list_send_pe_out_of_range");
    out.expect(
        ABORT_EXIT_CODE,
        &["converse: PE 1 aborting: sync_list_send:", "PE 5", "0..2"],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn list_send_with_repeated_pe_aborts() {
    let out = run_scenario("list_send_repeated_pe");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 0 aborting: sync_list_send:",
            "PE 2 more than once",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn list_reduce_with_pe_out_of_range_aborts() {
    let out = run_scenario("list_reduce_pe_out_of_range");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 1 aborting:",
            "reduction with global ID 1",
            "PE 2",
            "0..2",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn list_reduce_with_repeated_pe_aborts() {
    let out = run_scenario("list_reduce_repeated_pe");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 0 aborting:",
            "reduction with global ID 1",
            "PE 0 more than once",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn list_reduce_without_the_caller_aborts() {
    let out = run_scenario("list_reduce_without_caller");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 1 aborting:",
            "reduction with global ID 1",
            "does not contain PE 1",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn multicast_to_unestablished_group_on_its_creator_aborts() {
    let out = run_scenario("multicast_unknown_group_on_creator");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 0 aborting:",
            "group 2 was used by PE 0 but was never established",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn multicast_to_unestablished_group_from_another_pe_aborts_on_creator() {
    let out = run_scenario("multicast_unknown_group_from_other_pe");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 0 aborting:",
            "group 2 was used by PE 1 but was never established",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn group_reduce_over_unestablished_group_on_its_creator_aborts() {
    let out = run_scenario("group_reduce_unknown_group_on_creator");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 0 aborting:",
            "group 2 was used by PE 0 but was never established",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn reduction_form_disagreement_aborts_naming_both_forms() {
    let out = run_scenario("reduce_form_disagreement");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 0 aborting:",
            "disagree",
            "reduction #0",
            "PE 1 used the struct form",
            "PE 0 used the message form",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn reduction_form_disagreement_between_children_aborts() {
    let out = run_scenario("reduce_form_disagreement_between_children");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 0 aborting:",
            "disagree",
            "reduction #0",
            "the message form",
            "the struct form",
            "PE 1",
            "PE 2",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn reduction_id_disagreement_is_caught_by_the_stall_check() {
    let out = run_scenario("reduce_id_disagreement");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "reduction IDs 1 and 5",
            "converse: PE 0 aborting: reductions on PE 0 can never complete",
            "reduction with global ID 1 waits for PEs [1]",
            "reduction with global ID 5 from PEs [1]",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn list_reduction_with_differing_lists_aborts() {
    let out = run_scenario("list_reduce_list_disagreement");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 0 aborting:",
            "disagree on the PEs taking part in reduction with global ID 1",
            "PE 2",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn list_reduction_with_two_roots_is_caught_by_the_stall_check() {
    let out = run_scenario("list_reduce_both_roots");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "aborting: reductions on PE",
            "can never complete",
            "reduction with global ID 1 waits for PEs",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn group_reduce_with_an_unknown_group_aborts_on_its_creator() {
    let out = run_scenario("group_reduce_unknown_group_elsewhere");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 1 aborting:",
            "group 1 was used by PE 0 but was never established",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn dynamic_reduction_id_remote_with_a_bad_handler_aborts() {
    let out = run_scenario("dynamic_reduction_id_remote_bad_handler");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 1 aborting:",
            "dynamic_reduction_id_remote: handler 18446744073709551615 is no handler index",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn dynamic_reduction_id_on_pe1_aborts() {
    let out = run_scenario("dynamic_reduction_id_on_pe1");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 1 aborting:",
            "dynamic_reduction_id may only be called on PE 0",
            "called on PE 1",
        ],
    );
    out.expect_absent("got dynamic reduction ID");
    out.expect_absent(RETURNED);
}

#[test]
fn joining_an_id_reduction_twice_aborts() {
    let out = run_scenario("reduce_id_joined_twice");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 0 aborting:",
            "PE 0 joined reduction with global ID 1 twice",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn contributing_to_an_id_reduction_twice_aborts() {
    let out = run_scenario("reduce_id_contributed_twice");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 0 aborting:",
            "PE 1 contributed twice to reduction with global ID 1",
        ],
    );
    out.expect_absent(RETURNED);
}

/// A healthy reduction is not taken for a stalled one. PE 1 contributes
/// from a handler that first computes for 2.5 s while polling the
/// scheduler; PE 0, idle with its deposit, runs the stall check after 1 s.
/// (Regression: detection waves used to be answered inside PE 1's nested
/// `schedule_poll`, mid-handler, so the job looked quiescent and PE 0
/// aborted.)
#[test]
fn reduction_completes_when_a_contributor_polls_while_computing() {
    let out = run_scenario("reduce_after_polling_handler");
    out.expect(0, &[&format!("{REDUCTION_RESULT} 3")]);
    out.expect_absent("can never complete");
}

/// A contributor that computes longer than the stall-check delay, without
/// polling, does not make the reduction look stalled.
#[test]
fn reduction_completes_when_a_contributor_computes_long() {
    let out = run_scenario("reduce_after_long_handler");
    out.expect(0, &[&format!("{REDUCTION_RESULT} 3")]);
    out.expect_absent("can never complete");
}

/// The same in user-calls-scheduler mode, where PE 1's main code (no
/// handler at all) polls while it computes: an empty poll answers
/// detection, but not strictly, and the stall check trusts only waves that
/// found every PE waiting in its scheduler.
#[test]
fn reduction_completes_when_a_contributor_polls_from_main_code() {
    let out = run_scenario("reduce_after_polling_main_code");
    out.expect(0, &[&format!("{REDUCTION_RESULT} 3")]);
    out.expect_absent("can never complete");
}

// ---------------------------------------------------------------------------
// User-level threads.
// ---------------------------------------------------------------------------

#[test]
fn thread_stack_overflow_is_reported_with_pe_and_size() {
    let out = run_scenario("thread_stack_overflow_pe1");
    out.expect(
        ABORT_EXIT_CODE,
        &["stack overflow in a user-level thread on PE 1 (stack 65536 bytes; raise +stacksize)"],
    );
    out.expect_absent("on PE 0");
    out.expect_absent(RETURNED);
}

#[test]
fn thread_stack_overflow_reports_the_stacksize_default() {
    let out = run_scenario("thread_stack_overflow_stacksize_flag");
    out.expect(
        ABORT_EXIT_CODE,
        &["stack overflow in a user-level thread on PE 0 (stack 32768 bytes; raise +stacksize)"],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn a_wild_read_in_a_thread_is_not_taken_for_an_overflow() {
    use std::os::unix::process::ExitStatusExt;
    let out = run_scenario("thread_wild_read");
    assert!(
        out.stderr.contains(STARTED),
        "the child never started the scenario\n{}",
        out.describe()
    );
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGSEGV),
        "killed by SIGSEGV\n{}",
        out.describe()
    );
    out.expect_absent("stack overflow");
    out.expect_absent(RETURNED);
}

#[test]
fn event_wait_in_a_handler_aborts() {
    let out = run_scenario("event_wait_in_handler");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 1 aborting:",
            "Event::wait would block in a handler",
            "Thread::create",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn sleep_in_a_handler_aborts() {
    let out = run_scenario("sleep_in_handler");
    out.expect(
        ABORT_EXIT_CODE,
        &["converse: PE 0 aborting:", "sleep would block in a handler"],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn event_wait_in_a_handler_polled_by_a_thread_aborts() {
    let out = run_scenario("event_wait_in_handler_polled_by_thread");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 1 aborting:",
            "Event::wait would block in a handler",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn event_wait_in_the_start_function_aborts() {
    let out = run_scenario("event_wait_in_start");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 1 aborting:",
            "Event::wait would block in the start function",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn sleep_in_the_start_function_aborts() {
    let out = run_scenario("sleep_in_start");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 0 aborting:",
            "sleep would block in the start function",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn finish_from_a_thread_aborts() {
    let out = run_scenario("finish_from_a_thread");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 0 aborting:",
            "finish called from a user-level thread",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn awakening_a_thread_twice_aborts() {
    let out = run_scenario("awaken_twice");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 1 aborting:",
            "thread 1 of PE 1 awakened twice",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn moving_a_thread_that_is_not_migratable_aborts_saying_so() {
    let out = run_scenario("migrate_plain_thread");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 0 aborting:",
            "migrate_self from thread 1 of PE 0, which is not a migratable thread",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn freeing_memory_of_a_heap_that_left_with_its_thread_aborts_saying_so() {
    let out = run_scenario("free_after_the_heap_left");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 0 aborting:",
            "from a migratable thread's heap, was freed in process",
            "after the heap left it with its thread",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn awakening_a_thread_packed_to_move_aborts() {
    let out = run_scenario("awaken_moved");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 0 aborting:",
            "awaken of thread 1 of PE 0, which was packed to move to another PE",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn awakening_a_finished_thread_aborts() {
    let out = run_scenario("awaken_finished");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 0 aborting:",
            "awaken of thread 1 of PE 0, which has finished",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn freeing_a_thread_that_is_not_running_aborts() {
    let out = run_scenario("free_other_thread");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 0 aborting:",
            "free of thread 1 of PE 0, which is not the running thread",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn freeing_the_main_flow_aborts() {
    let out = run_scenario("free_main_flow");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 1 aborting:",
            "the main flow of PE 1",
            "cannot be freed",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn resuming_a_running_thread_aborts() {
    let out = run_scenario("resume_running_thread");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 0 aborting:",
            "resume of thread 1 of PE 0, which is running",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn a_thread_polling_its_own_token_aborts() {
    let out = run_scenario("awaken_self_then_poll");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 1 aborting:",
            "thread 1 of PE 1, which is running",
        ],
    );
    out.expect_absent(RETURNED);
}

#[test]
fn resuming_a_finished_thread_aborts() {
    let out = run_scenario("resume_finished");
    out.expect(
        ABORT_EXIT_CODE,
        &[
            "converse: PE 0 aborting:",
            "resume of thread 1 of PE 0, which has finished",
        ],
    );
    out.expect_absent(RETURNED);
}

// ---------------------------------------------------------------------------
// In-process: bad runtime flags.
// ---------------------------------------------------------------------------

/// Runs a job with `words` as its command line; returns the flag error and
/// asserts the start function never ran.
fn flag_error(words: &[&str]) -> ArgError {
    let ran = Arc::new(AtomicBool::new(false));
    let ran2 = ran.clone();
    let result = Converse::new().args(args(words)).run(move |_| {
        ran2.store(true, Ordering::SeqCst);
        converse::exit_scheduler();
    });
    assert!(
        !ran.load(Ordering::SeqCst),
        "{words:?}: the start function ran"
    );
    match result {
        Err(StartError::Flags(e)) => e,
        Err(other) => panic!("{words:?}: not a flag error: {other}"),
        Ok(code) => panic!("{words:?}: the job ran (exit code {code}) instead of failing"),
    }
}

#[test]
fn unknown_flag_is_rejected_and_named() {
    let err = flag_error(&["+bogus"]);
    assert_eq!(err, ArgError::UnknownFlag("+bogus".into()));
    assert!(err.to_string().contains("+bogus"), "{err}");
    // A flag among program arguments is still caught.
    let err = flag_error(&["input.txt", "+p", "2", "+verbose"]);
    assert!(err.to_string().contains("+verbose"), "{err}");
}

#[test]
fn zero_pes_is_rejected() {
    let err = flag_error(&["+p", "0"]);
    assert!(
        matches!(&err, ArgError::BadValue { flag, value, .. } if flag == "+p" && value == "0"),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains("+p") && text.contains("`0`"), "{text}");
}

#[test]
fn non_numeric_pes_is_rejected() {
    let err = flag_error(&["+p", "x"]);
    assert!(
        matches!(&err, ArgError::BadValue { flag, value, .. } if flag == "+p" && value == "x"),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains("+p") && text.contains("`x`"), "{text}");
}

#[test]
fn missing_flag_value_is_rejected() {
    let err = flag_error(&["+p"]);
    assert_eq!(err, ArgError::MissingValue("+p".into()));
    assert!(err.to_string().contains("+p"), "{err}");
}

#[test]
fn pes_not_a_multiple_of_ppn_is_rejected() {
    let err = flag_error(&["+p", "6", "++ppn", "4"]);
    assert_eq!(err, ArgError::Layout { pes: 6, ppn: 4 });
    let text = err.to_string();
    assert!(text.contains("+p 6") && text.contains("++ppn 4"), "{text}");
    // The same layout error when the PEs per node come from the builder.
    let result = Converse::new()
        .args(args(&["+p", "6"]))
        .default_ppn(4)
        .run(|_| converse::exit_scheduler());
    assert_eq!(
        result,
        Err(StartError::Flags(ArgError::Layout { pes: 6, ppn: 4 }))
    );
}

// ---------------------------------------------------------------------------
// In-process: malformed message bytes.
// ---------------------------------------------------------------------------

#[test]
fn from_bytes_rejects_input_shorter_than_a_header() {
    for len in [0, 1, 5, MSG_HEADER_SIZE - 1] {
        let err = Message::from_bytes(&vec![0u8; len]).unwrap_err();
        assert_eq!(err, MsgError::TooShort { len });
        assert!(err.to_string().contains(&format!("{len} bytes")), "{err}");
    }
}

/// Sets the header's `total_size` field (bytes 8..12, in native byte order as
/// the `#[repr(C)]` header stores it) in raw message bytes.
fn set_size_field(bytes: &mut [u8], size: u32) {
    bytes[8..12].copy_from_slice(&size.to_ne_bytes());
}

#[test]
fn from_bytes_rejects_size_field_mismatch() {
    let msg = Message::from_payload(7, b"abc");
    let good = msg.as_bytes().to_vec();
    // The intact bytes are accepted (the control case).
    assert_eq!(Message::from_bytes(&good).unwrap().as_bytes(), &good[..]);

    // One byte too many.
    let mut longer = good.clone();
    longer.push(0);
    let err = Message::from_bytes(&longer).unwrap_err();
    assert_eq!(
        err,
        MsgError::SizeMismatch {
            header: 35,
            actual: 36
        }
    );
    assert!(err.to_string().contains("35") && err.to_string().contains("36"));

    // Truncated payload.
    let err = Message::from_bytes(&good[..MSG_HEADER_SIZE + 1]).unwrap_err();
    assert_eq!(
        err,
        MsgError::SizeMismatch {
            header: 35,
            actual: 33
        }
    );

    // Size field claims more than given, and less than a header.
    let mut bytes = good.clone();
    set_size_field(&mut bytes, 1000);
    assert_eq!(
        Message::from_bytes(&bytes).unwrap_err(),
        MsgError::SizeMismatch {
            header: 1000,
            actual: 35
        }
    );
    let mut header_only = vec![0u8; MSG_HEADER_SIZE];
    set_size_field(&mut header_only, 0);
    assert_eq!(
        Message::from_bytes(&header_only).unwrap_err(),
        MsgError::SizeMismatch {
            header: 0,
            actual: MSG_HEADER_SIZE
        }
    );
    set_size_field(&mut header_only, MSG_HEADER_SIZE as u32);
    assert!(Message::from_bytes(&header_only).is_ok());
}
