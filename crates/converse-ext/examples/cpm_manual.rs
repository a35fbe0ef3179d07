//! The extensions manual's parameter-marshalling programs (chapter 6),
//! ported: `cpm_manual PROGRAM [ARGS…] +p N`.
//!
//! - `myprog`: PE 0 orders every other PE to print a random integer
//!   (`Cpm_print_integer(CpmSend(i), rand())`).
//! - `example2`: PE 0 sends its program arguments to PE 1, which prints
//!   "The program's arguments are: …".
//! - `example3`: the user types of §6.2: a `coordinate` (a "simple" type:
//!   derived serde) and an `intptr` (a "pointer" type: an owned `Box`).
//! - `destination`: §6.3's destination written by the program, the
//!   manual's `CpmEnqueueFIFO` (its send function and its handler), used
//!   as `Cpm_print_integer(MyEnqueueFIFO(3), 12)`.
//! - `broadcast`: `Cpm_print_integer(CpmMakeThread(CPM_ALL), 5)`: every PE
//!   makes a thread that prints 5.
//!
//! The manual's programs never end; these end when the job is quiescent.
//! Each printed line is also kept in [`OUTPUT`] (PE, line) for the tests.
use std::sync::Mutex;

use converse::{Cpv, Message};
use converse_ext::cpm::{self, CPM_ALL, DestinationSend, invokable};
use serde::{Deserialize, Serialize};

/// What the programs printed: (PE, line).
pub static OUTPUT: Mutex<Vec<(usize, String)>> = Mutex::new(Vec::new());

fn print(line: String) {
    converse::printf(format_args!("{line}\n"));
    OUTPUT
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((converse::my_pe(), line));
}

// myprog.c, lines 3-6.
#[invokable]
pub fn print_integer(n: i32) {
    print(format!("{n}"));
}

// example2.c, lines 3-9: `CpmDim argc, CpmStr *argv` is one vector of
// strings.
#[invokable]
pub fn print_program_arguments(argv: &[String]) {
    let mut line = String::from("The program's arguments are: ");
    for a in argv {
        line.push_str(a);
        line.push(' ');
    }
    print(line);
}

/// §6.2's simple type: no pointers, packed field by field.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct Coordinate {
    /// x.
    pub x: f64,
    /// y.
    pub y: f64,
}

/// §6.2's pointer type `intptr`, a pointer to one integer: owned here.
pub type IntPtr = Box<i32>;

#[invokable]
pub fn print_coordinate(c: Coordinate, p: IntPtr) {
    print(format!("({}, {}) and {}", c.x, c.y, p));
}

// §6.3: the manual's CpmEnqueueFIFO, written by the program.
static MY_ENQUEUE_FIFO2_INDEX: Cpv<usize> = Cpv::new();

/// The destination function: a `CpmDestinationSend` with room for one
/// integer of envelope.
#[allow(non_snake_case)]
pub fn MyEnqueueFIFO(pe: usize) -> DestinationSend {
    DestinationSend {
        send_fn: my_enqueue_fifo1,
        env_size: 4,
        pe: pe.into(),
    }
}

/// The send function: the invoker goes into the envelope, the handler
/// becomes `MyEnqueueFIFO2`.
fn my_enqueue_fifo1(dest: &DestinationSend, mut msg: Message) {
    let invoker = msg.handler() as u32;
    cpm::env(&mut msg)[..4].copy_from_slice(&invoker.to_le_bytes());
    msg.set_handler(*MY_ENQUEUE_FIFO2_INDEX.get());
    cpm::send_to(dest.pe, msg);
}

/// The handler on arrival: the invoker back, then into the queue. The
/// envelope came over the wire: `envelope_invoker` checks that it holds
/// an invoker of this PE (else the job ends naming the sender).
fn my_enqueue_fifo2(mut msg: Message) {
    let invoker = cpm::envelope_invoker(&msg, "MyEnqueueFIFO");
    msg.set_handler(invoker);
    converse::enqueue_fifo(msg);
}

/// Registers `MyEnqueueFIFO`'s handler on the calling PE: on every PE, at
/// the same place of its registrations.
pub fn my_enqueue_fifo_init() {
    MY_ENQUEUE_FIFO2_INDEX.initialize(converse::register_handler(my_enqueue_fifo2));
}

/// The program, on every PE (`user_main`).
pub fn start(args: &[String]) {
    my_enqueue_fifo_init();
    let program = args.get(1).map(String::as_str).unwrap_or("myprog");
    if converse::my_pe() == 0 {
        let pes = converse::num_pes();
        match program {
            "myprog" => {
                for i in 1..pes {
                    Cpm_print_integer(cpm::send(i), converse::random::rand());
                }
            }
            "example2" => {
                Cpm_print_program_arguments(cpm::send(1.min(pes - 1)), args);
            }
            "example3" => {
                let c = Coordinate { x: 1.5, y: -2.25 };
                Cpm_print_coordinate(cpm::send(pes - 1), c, Box::new(42));
            }
            "destination" => Cpm_print_integer(MyEnqueueFIFO(3.min(pes - 1)), 12),
            "broadcast" => Cpm_print_integer(cpm::make_thread(CPM_ALL), 5),
            other => converse::abort(&format!(
                "cpm_manual: no program {other} (myprog, example2, example3, destination, broadcast)"
            )),
        }
        converse::start_quiescence_detection(|| converse::exit(0));
    }
}

#[allow(dead_code)] // the test uses `start` alone
fn main() -> std::process::ExitCode {
    converse::Converse::new().args(std::env::args()).main(start)
}
