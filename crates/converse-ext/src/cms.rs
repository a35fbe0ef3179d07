//! Master-slave (the manual's chapter 3, `Cms`): PE 0, the manager, fires
//! numbered tasks; a worker function runs each on some PE and its response
//! comes back to PE 0, which collects them ([`await_responses`],
//! [`get_response`]) or hands each to a consumer as it arrives
//! ([`process_responses`]).
//!
//! # The model
//!
//! - [`init`] (`CmsInit`) on every PE, at the same place of every PE's
//!   handler registrations: it registers the module's two handlers and
//!   the worker function.
//! - Tasks and responses are bytes. A task is a seed given to the seed
//!   balancer ([`cld::enqueue`](crate::cld::enqueue) anywhere, as Converse's
//!   `CmsFireTask` does with `CldEnqueue`): the job's strategy
//!   (`+balancer`) places it; its worker runs in a handler there and the
//!   response travels to PE 0. `init` sets the balancer up on the PE if
//!   [`cld::install`](crate::cld::install) did not.
//! - While PE 0 waits ([`await_responses`], [`process_responses`]) it runs
//!   its scheduler, so it works on its own tasks too, as the manual says.
//! - [`exit`] (`CmsExit`), called on every PE, ends the job from PE 0; on
//!   the others it returns, and their schedulers go on serving tasks until
//!   then.
//!
//! # Invariants
//!
//! - A task number is below `max` and not in flight when it is fired;
//!   otherwise the job aborts naming it.
//! - `outstanding` counts tasks fired and not yet answered; every response
//!   is for a task in flight, and is kept (or consumed) once.
//!
//! # Concurrency
//!
//! Each PE's state is its own (a `Cpv`); tasks and responses are messages.
use std::cell::{Cell, RefCell};
use std::rc::Rc;

use converse::{Cpv, Message};

/// The worker function (`CmsWorkerFn`): the task's bytes in, the
/// response's bytes out (the C function allocates the response and
/// returns its size; here the vector is both).
#[doc(alias = "CmsWorkerFn")]
pub type WorkerFn = fn(&[u8]) -> Vec<u8>;

/// What takes the responses in [`process_responses`] (`CmsConsumerFn`):
/// the response and its task number.
#[doc(alias = "CmsConsumerFn")]
pub type ConsumerFn = Box<dyn FnMut(Vec<u8>, usize)>;

/// One PE's state.
struct State {
    worker: WorkerFn,
    max: usize,
    task_handler: usize,
    response_handler: usize,
    /// The tasks' info function for the seed balancer.
    task_info: usize,
    /// Manager: tasks fired and not answered.
    outstanding: Cell<usize>,
    /// Manager: per task number, in flight?
    in_flight: RefCell<Vec<bool>>,
    /// Manager: responses not yet taken.
    responses: RefCell<Vec<Option<Vec<u8>>>>,
    /// Manager: the consumer of `process_responses`, while it runs.
    consumer: RefCell<Option<ConsumerFn>>,
}

static STATE: Cpv<State> = Cpv::new();

fn state(what: &str) -> Rc<State> {
    if !STATE.is_initialized() {
        converse::abort(&format!(
            "{what} on PE {} before cms::init (call it on every PE)",
            converse::my_pe()
        ));
    }
    STATE.get()
}

/// Sets up master-slave on the calling PE (`CmsInit`): `worker` runs the
/// tasks; `max` bounds the task numbers fired before the next
/// [`await_responses`] or [`process_responses`]. Call it on every PE, at
/// the same place of each PE's handler registrations.
#[doc(alias = "CmsInit")]
pub fn init(worker: WorkerFn, max: usize) {
    let task_handler = converse::register_handler(on_task);
    let response_handler = converse::register_handler(on_response);
    crate::cld::module_init();
    let task_info = crate::cld::register_info_fn(task_info);
    STATE.initialize(State {
        worker,
        max,
        task_handler,
        response_handler,
        task_info,
        outstanding: Cell::new(0),
        in_flight: RefCell::new(vec![false; max]),
        responses: RefCell::new(vec![None; max]),
        consumer: RefCell::new(None),
    });
}

/// Fires task number `reference` with the bytes `task` (`CmsFireTask`),
/// on PE 0. The number names its response.
///
/// # Panics
/// Aborts the job on another PE, if `reference` is not below `max`, or if
/// a task of that number is still in flight.
#[doc(alias = "CmsFireTask")]
pub fn fire_task(reference: usize, task: &[u8]) {
    let s = state("CmsFireTask");
    let me = converse::my_pe();
    if me != 0 {
        converse::abort(&format!(
            "CmsFireTask on PE {me}: only the manager, PE 0, fires tasks"
        ));
    }
    if reference >= s.max {
        converse::abort(&format!(
            "CmsFireTask of task {reference}: numbers go up to {} (CmsInit's max)",
            s.max
        ));
    }
    if std::mem::replace(&mut s.in_flight.borrow_mut()[reference], true) {
        converse::abort(&format!(
            "CmsFireTask of task {reference}, which is still in flight"
        ));
    }
    s.responses.borrow_mut()[reference] = None;
    s.outstanding.set(s.outstanding.get() + 1);
    let mut payload = Vec::with_capacity(8 + task.len());
    payload.extend_from_slice(&(reference as u64).to_le_bytes());
    payload.extend_from_slice(task);
    let seed = Message::from_payload(s.task_handler, &payload);
    crate::cld::enqueue(crate::cld::Dest::Anywhere, seed, s.task_info);
}

/// A task seed's info for the balancer: FIFO at the middle priority, one
/// form only.
fn task_info(msg: &Message) -> crate::cld::SeedInfo {
    crate::cld::SeedInfo::new(msg, converse::Queueing::Fifo)
}

/// Splits a task or response message into its number and bytes.
fn split(msg: &Message, what: &str) -> (usize, Vec<u8>) {
    match msg.payload().split_first_chunk::<8>() {
        Some((n, rest)) => (u64::from_le_bytes(*n) as usize, rest.to_vec()),
        None => converse::abort(&format!(
            "a malformed {what} from PE {} ({} bytes)",
            msg.src_pe(),
            msg.payload_len()
        )),
    }
}

/// A task for this PE: run the worker, answer PE 0.
fn on_task(msg: Message) {
    let s = state("a Cms task");
    let (reference, task) = split(&msg, "Cms task");
    let response = (s.worker)(&task);
    let mut payload = Vec::with_capacity(8 + response.len());
    payload.extend_from_slice(&(reference as u64).to_le_bytes());
    payload.extend_from_slice(&response);
    converse::sync_send_and_free(0, Message::from_payload(s.response_handler, &payload));
}

/// A response, on PE 0.
fn on_response(msg: Message) {
    let s = state("a Cms response");
    let (reference, response) = split(&msg, "Cms response");
    let known = s
        .in_flight
        .borrow_mut()
        .get_mut(reference)
        .map(|f| std::mem::replace(f, false));
    if known != Some(true) {
        converse::abort(&format!(
            "a Cms response for task {reference} from PE {}, which is not in flight",
            msg.src_pe()
        ));
    }
    s.outstanding.set(s.outstanding.get() - 1);
    let consumer = s.consumer.borrow_mut().take();
    match consumer {
        Some(mut consume) => {
            consume(response, reference);
            *s.consumer.borrow_mut() = Some(consume);
        }
        None => s.responses.borrow_mut()[reference] = Some(response),
    }
}

/// Runs PE 0's scheduler (so it works too) until every fired task has
/// answered (`CmsAwaitResponses`); then take the responses with
/// [`get_response`].
#[doc(alias = "CmsAwaitResponses")]
pub fn await_responses() {
    let s = state("CmsAwaitResponses");
    while s.outstanding.get() > 0 {
        converse::schedule_count(1);
    }
}

/// Takes the response of task `reference` (`CmsGetResponse`); `None` if
/// it has not come (or was taken).
#[doc(alias = "CmsGetResponse")]
pub fn get_response(reference: usize) -> Option<Vec<u8>> {
    let s = state("CmsGetResponse");
    let mut responses = s.responses.borrow_mut();
    responses.get_mut(reference).and_then(Option::take)
}

/// As [`await_responses`], handing each response to `consumer` with its
/// task number as soon as it arrives (`CmsProcessResponses`).
#[doc(alias = "CmsProcessResponses")]
pub fn process_responses(consumer: impl FnMut(Vec<u8>, usize) + 'static) {
    let s = state("CmsProcessResponses");
    *s.consumer.borrow_mut() = Some(Box::new(consumer));
    await_responses();
    s.consumer.borrow_mut().take();
}

/// Ends master-slave (`CmsExit`), called on every PE: PE 0 ends the job
/// (exit code 0); the other PEs return, their schedulers serving tasks
/// until then.
#[doc(alias = "CmsExit")]
pub fn exit() {
    if converse::my_pe() == 0 {
        converse::exit(0);
    }
}
