//! The manual's master-slave example (chapter 3.3), ported: PE 0 fires
//! three phases of five tasks (squaring `10 i + j`) and collects the
//! responses, then three more tasks whose responses a consumer takes as
//! they come.
//!
//! `cargo run -p converse-ext --example cms -- +p 4`
use std::sync::Mutex;

use converse::cmi_printf;
use converse_ext::cms;

/// The lines PE 0 printed (the test of this example reads them).
pub static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn say(line: String) {
    cmi_printf!("{line}\n");
    LINES.lock().unwrap().push(line);
}

/// The worker: a task is an `f32`; its response, the square.
fn worker(task: &[u8]) -> Vec<u8> {
    let a = f32::from_le_bytes(task.try_into().expect("a task is an f32"));
    (a * a).to_le_bytes().to_vec()
}

fn value(response: &[u8]) -> f32 {
    f32::from_le_bytes(response.try_into().expect("a response is an f32"))
}

/// The example's start function, on every PE.
pub fn start(_args: &[String]) {
    cms::init(worker, 20);
    if converse::my_pe() == 0 {
        say("manager inited".to_string());
        for i in 0..3 {
            for j in 0..5 {
                let t = (10 * i + j) as f32;
                cms::fire_task(j, &t.to_le_bytes());
            }
            cms::await_responses();
            for j in 0..5 {
                let r = cms::get_response(j).expect("every task answered");
                say(format!("Response {j} is: {:.6}", value(&r)));
            }
            say(format!("End of phase {i}"));
        }
        say("Now the consumerFunction mode".to_string());
        for i in 0..3 {
            let t = (5 + i) as f32;
            cms::fire_task(i, &t.to_le_bytes());
        }
        let mut taken = Vec::new();
        cms::process_responses(move |r, refnum| {
            taken.push(refnum);
            say(format!(
                "consumer: response with refnum = {refnum} is {:.6}",
                value(&r)
            ));
        });
    }
    cms::exit();
}

#[allow(dead_code)] // the test includes this file for `start` and `LINES`
fn main() -> std::process::ExitCode {
    converse::Converse::new().main(start)
}
