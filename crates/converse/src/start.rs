//! Starting a job (`ConverseInit` and its three modes) and ending it
//! (`ConverseExit`): the composition root of the runtime, on the top floor
//! (DESIGN.md §3), since a job's life runs every subsystem — the scheduler
//! after the start function, the CCS server, thread teardown — and each
//! PE's subsystems are initialized here, in a fixed order, before the
//! libraries' module-init hooks and the start function.
//!
//! Every PE is an OS thread. The thread that starts the job is PE 0; PEs
//! `1..N` are threads named `PE n`. Each runs the start function; then, in
//! normal mode, its scheduler until `exit_scheduler` or `exit`.
//!
//! # Invariants
//!
//! - The job ends only when every PE thread has finished; `run` joins them all
//!   before it returns, so no PE outlives the call.
//! - A panic in any PE's code ends the job (every PE leaves at its next
//!   scheduler step) and is re-raised on the thread that started the job.
//! - In `init_returns` mode the state needed to finish the job later lives in
//!   a thread-local of the calling thread (`RETURNED`); only that thread can
//!   finish it ([`finish`] or [`exit`](crate::exit)).
use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::proc::args::{self, ArgError, Config};
use crate::proc::topology::Topology;
use crate::rt::job::Job;
use crate::rt::launch::{BootstrapError, IoCause, JoinError};
use crate::rt::pe::{self, ExitUnwind, Pe, Role};
use std::fmt;

/// Why a job could not start: what [`Converse::run`] and the other ways
/// in return instead of the job's exit code. Its message names the cause
/// (and the process, where one could not join); `source()` gives the
/// typed error underneath.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StartError {
    /// The command line: an unknown flag, a bad value, `+p` not a
    /// multiple of `++ppn`.
    Flags(ArgError),
    /// The launcher's job does not fit the layout asked for (its processes
    /// times `++ppn` is not `+p`).
    Launch(LaunchError),
    /// The launcher that started this process: what it says of the job
    /// cannot be read (its environment is malformed, it refused a
    /// request, it cannot be reached), so the process has no place in a
    /// job.
    Bootstrap(BootstrapError),
    /// This process could not join the job started by its launcher: the
    /// bootstrap exchange or its network failed.
    Join {
        /// This process's number in the job.
        process: usize,
        /// Why.
        cause: JoinError,
    },
    /// A file the job must write (`+trace FILE`, `+stats-plot FILE`)
    /// cannot be created: checked before the job runs, not after.
    File {
        /// The flag that names the file.
        flag: &'static str,
        /// The file.
        path: String,
        /// Why it cannot be created.
        source: IoCause,
    },
    /// The CCS server (`++server`) could not start.
    Server(crate::ccs::ServerError),
    /// Something else the job needs before it runs: a feature this build
    /// lacks (`+trace` without the `trace` feature), a setting from the
    /// environment (`CONVERSE_RANDOMIZED_MSGQ`).
    Setup(String),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Flags(e) => e.fmt(f),
            StartError::Launch(e) => e.fmt(f),
            StartError::Bootstrap(e) => e.fmt(f),
            StartError::Server(e) => e.fmt(f),
            StartError::Setup(why) => f.write_str(why),
            StartError::File { flag, path, source } => {
                write!(f, "{flag}: cannot create {path}: {source}")
            }
            StartError::Join { process, cause } => {
                write!(f, "process {process} could not join the job: {cause}")
            }
        }
    }
}

impl std::error::Error for StartError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StartError::Flags(e) => Some(e),
            StartError::Launch(e) => Some(e),
            StartError::Bootstrap(e) => Some(e),
            // The bootstrap's or the network's error itself.
            StartError::Join { cause, .. } => Some(cause.inner()),
            StartError::File { source, .. } => Some(source.get()),
            StartError::Server(e) => Some(e),
            StartError::Setup(_) => None,
        }
    }
}

impl From<ArgError> for StartError {
    fn from(e: ArgError) -> StartError {
        StartError::Flags(e)
    }
}

impl From<BootstrapError> for StartError {
    fn from(e: BootstrapError) -> StartError {
        StartError::Bootstrap(e)
    }
}

impl From<LaunchError> for StartError {
    fn from(e: LaunchError) -> StartError {
        StartError::Launch(e)
    }
}

/// How the processes a launcher started do not fit the layout asked for:
/// a process runs `++ppn` PEs, so `+p` must be the processes times
/// `++ppn`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LaunchError {
    /// Without `++ppn`, `+p` is not a multiple of the processes.
    NotAMultiple {
        /// The processes the launcher started.
        processes: usize,
        /// `+p`.
        pes: usize,
    },
    /// `+p` and `++ppn` make another number of processes than the
    /// launcher started.
    ProcessCount {
        /// The processes the launcher started.
        processes: usize,
        /// `+p`.
        pes: usize,
        /// `++ppn`.
        ppn: usize,
        /// The processes `+p` and `++ppn` make.
        makes: usize,
    },
}

impl fmt::Display for LaunchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LaunchError::NotAMultiple { processes, pes } => write!(
                f,
                "the launcher started {processes} processes but +p {pes} is not a multiple \
                 of them (a process runs ++ppn PEs: +p must be the processes times \
                 ++ppn)"
            ),
            LaunchError::ProcessCount {
                processes,
                pes,
                ppn,
                makes,
            } => write!(
                f,
                "the launcher started {processes} processes but +p {pes} ++ppn {ppn} makes \
                 {makes} (a process runs ++ppn PEs: +p must be the processes times ++ppn)"
            ),
        }
    }
}

impl std::error::Error for LaunchError {}

type StartFn = Arc<dyn Fn(&[String]) + Send + Sync>;

/// The libraries' per-PE initializations, in registration order (see
/// [`register_module_init`]).
static MODULE_INITS: std::sync::Mutex<Vec<ModuleInit>> = std::sync::Mutex::new(Vec::new());

/// A library's name and its per-PE initialization.
type ModuleInit = (&'static str, fn());

/// Registers `init`, a library's per-PE initialization, to run on every PE
/// of every job this process starts afterwards: after the runtime's own
/// subsystems are set up and before the start function, on each PE in the
/// order the inits were registered. That is where a library built on the
/// core (the extensions, GAMMA, the C ABI) registers its handlers, so that
/// they take the same indices on every PE whatever the program does, and
/// where it initializes its `Cpv`s.
///
/// `name` identifies the library: registering a name again does nothing and
/// returns false, so a library may call its own `register` from every
/// entry point. A job that is already running is not affected.
///
/// ```
/// static PINGS: converse::Cpv<usize> = converse::Cpv::new();
/// fn my_library_init() {
///     PINGS.initialize(0);
/// }
/// assert!(converse::register_module_init("my-library", my_library_init));
/// assert!(!converse::register_module_init("my-library", my_library_init));
/// let code = converse::Converse::new()
///     .args(["prog", "+p", "2"])
///     .run(|_| {
///         assert_eq!(*PINGS.get(), 0); // initialized before the start function
///         converse::exit(0);
///     })
///     .unwrap();
/// assert_eq!(code, 0);
/// ```
pub fn register_module_init(name: &'static str, init: fn()) -> bool {
    let mut inits = crate::sync::lock(&MODULE_INITS);
    if inits.iter().any(|(n, _)| *n == name) {
        return false;
    }
    inits.push((name, init));
    true
}

/// Sets up the calling thread's new PE: the runtime's subsystems register
/// their runtime messages (the dispatch table the delivery path reads),
/// then the libraries' module inits run, in order.
fn init_pe(me: &Pe, modules: &[ModuleInit]) {
    crate::csd::init_pe(me);
    crate::cmi::route::init_pe(me);
    crate::cmi::rdma::init_pe(me);
    crate::cmi::persistent::init_pe(me);
    crate::cth::migrate::init_pe(me);
    crate::ccd::quiescence::init_pe(me);
    crate::ccs::init_pe(me);
    for (_, init) in modules {
        init();
    }
}

/// The module inits registered now: a job runs these, whatever is
/// registered while it runs.
fn module_inits() -> Arc<[ModuleInit]> {
    crate::sync::lock(&MODULE_INITS).as_slice().into()
}

/// `start`, preceded on each PE by [`init_pe`] with `modules`.
fn with_inits(start: StartFn, modules: Arc<[ModuleInit]>) -> StartFn {
    Arc::new(move |args: &[String]| {
        // A counted reference, not `pe::with`: no borrow of the PE is held
        // while the libraries' code runs.
        init_pe(&pe::current(), &modules);
        start(args)
    })
}

/// Stack size of PE threads: room for deep handler recursion and nested
/// schedulers.
const PE_STACK: usize = 8 << 20;

#[derive(Clone, Copy, PartialEq, Eq)]
enum SchedMode {
    /// Start function, then the scheduler until it is stopped.
    Normal,
    /// The start function is the whole computation.
    UserCallsScheduler,
}

/// Configures and starts a Converse job (`ConverseInit`).
///
/// ```
/// use converse::Converse;
/// let code = Converse::new()
///     .args(["prog", "+p", "2"])
///     .run(|_args| {
///         converse::printf(format_args!("hello from PE {}\n", converse::my_pe()));
///         converse::exit_scheduler();
///     })
///     .unwrap();
/// assert_eq!(code, 0);
/// ```
#[doc(alias = "ConverseInit")]
#[derive(Clone, Debug)]
pub struct Converse {
    args: Vec<String>,
    default_pes: usize,
    default_ppn: Option<usize>,
    branch: Option<usize>,
    exit_on_quiescence: bool,
}

impl Default for Converse {
    fn default() -> Self {
        Converse::new()
    }
}

impl Converse {
    /// A job configured from the process's command line (`std::env::args`),
    /// one PE unless `+p` says otherwise.
    pub fn new() -> Converse {
        Converse {
            args: std::env::args().collect(),
            default_pes: 1,
            default_ppn: None,
            branch: None,
            exit_on_quiescence: false,
        }
    }

    /// Uses `args` (program name first) instead of the process's command line.
    pub fn args<I, S>(mut self, args: I) -> Converse
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }

    /// Number of PEs when the command line has no `+p`.
    pub fn default_pes(mut self, pes: usize) -> Converse {
        self.default_pes = pes.max(1);
        self
    }

    /// PEs per node when the command line has no `++ppn` (default: all PEs on
    /// one node).
    pub fn default_ppn(mut self, ppn: usize) -> Converse {
        self.default_ppn = Some(ppn.max(1));
        self
    }

    /// Branching factor of the job's spanning trees when the command line
    /// has no `++spantree-branch` (default 4; at least 1).
    pub fn spanning_tree_branch(mut self, k: usize) -> Converse {
        self.branch = Some(k.max(1));
        self
    }

    /// Ends the job with code 0 once it is quiescent (no message in
    /// flight or queued, no handler running, no timer pending: see
    /// [`start_quiescence_detection`](crate::start_quiescence_detection)),
    /// for programs whose work has no natural last step: a handler that
    /// calls [`exit`](crate::exit) first still decides the code. Only in
    /// normal mode ([`run`](Converse::run), [`main`](Converse::main)).
    ///
    /// ```
    /// let code = converse::Converse::new().default_pes(3).exit_on_quiescence().run(|_| {
    ///     // A token hops from PE to PE until its count runs out, and no
    ///     // one says "done".
    ///     let hop = converse::handler_slot::<u32>();
    ///     let next = hop.handler();
    ///     hop.fill(move |left| {
    ///         if left > 0 {
    ///             next.send((converse::my_pe() + 1) % converse::num_pes(), &(left - 1));
    ///         }
    ///     });
    ///     if converse::my_pe() == 0 {
    ///         next.send(1, &10);
    ///     }
    /// });
    /// assert_eq!(code.unwrap(), 0);
    /// ```
    pub fn exit_on_quiescence(mut self) -> Converse {
        self.exit_on_quiescence = true;
        self
    }

    /// Parses the runtime flags and builds the job's shared state.
    fn job(&self) -> Result<Arc<Job>, StartError> {
        crate::proc::log::init();
        keep_large_buffers_in_heap();
        crate::proc::panic::install_hook();
        let (flags, program_args) = args::parse(&self.args)?;
        let placement = crate::rt::launch::placement(&flags)?;
        let topo = self.layout(&flags, placement.as_ref())?;
        let mut job = match &placement {
            None => Job::with_nodes(topo, 0..topo.num_nodes(), program_args),
            Some(place) => joined_job(place, topo, &flags, program_args)?,
        };
        job.config = Config {
            pes: Some(topo.num_pes()),
            ppn: Some(topo.node_size(0)),
            branch: flags.branch.or(self.branch),
            ..flags
        };
        let (seed, say) = msgq_seed(
            &job.config,
            std::env::var(crate::proc::args::RANDOMIZED_MSGQ_ENV).ok(),
            placement.as_ref().map(|p| p.shm_id),
        )?;
        job.msgq_seed = seed;
        if let (Some(seed), 0, true) = (seed, job.first_node, say) {
            crate::proc::io::error(format_args!(
                "converse: +randomized_msgq: seed {seed}: arrivals run in a random order \
                 (rerun with +randomized_msgq {seed})\n"
            ));
        }
        if let Some(period) = job.config.watchdog {
            job.watchdog = Some(Arc::new(crate::rt::watchdog::Watchdog::new(
                period,
                job.first_node,
                job.first_pe,
                job.local_pes(),
            )));
        }
        set_up_tracing(&mut job)?;
        let job = Arc::new(job);
        start_services(&job)?;
        Ok(job)
    }

    /// The job's PEs and nodes: `+p` and `++ppn` as given, else the
    /// program's defaults, else what the launcher started.
    fn layout(
        &self,
        flags: &Config,
        placement: Option<&crate::rt::launch::Placement>,
    ) -> Result<Topology, StartError> {
        // A launcher shapes the job: without `+p`, its processes of
        // `++ppn` PEs (the program's default, else the launcher's, else 1)
        // make it.
        let ppn_asked = flags
            .ppn
            .or(self.default_ppn)
            .or(placement.and_then(|p| p.ppn));
        let pes = match placement {
            Some(place) if flags.pes.is_none() => place.nodes * ppn_asked.unwrap_or(1),
            _ => flags.pes.unwrap_or(self.default_pes),
        };
        // Started by convrun, a process is one node: `+p` PEs over its
        // processes unless `++ppn` says otherwise.
        let ppn_default = match placement {
            Some(place) if pes % place.nodes == 0 => pes / place.nodes,
            _ => pes,
        };
        let ppn = ppn_asked.unwrap_or(ppn_default);
        if pes % ppn != 0 {
            return Err(ArgError::Layout { pes, ppn }.into());
        }
        let topo = Topology::new(pes, ppn);
        if let Some(place) = placement {
            if ppn_asked.is_none() && pes % place.nodes != 0 {
                return Err(LaunchError::NotAMultiple {
                    processes: place.nodes,
                    pes,
                }
                .into());
            }
            if place.nodes != topo.num_nodes() {
                return Err(LaunchError::ProcessCount {
                    processes: place.nodes,
                    pes,
                    ppn,
                    makes: topo.num_nodes(),
                }
                .into());
            }
        }
        Ok(topo)
    }

    /// Normal mode: runs `start(args)` on every PE, then each PE's scheduler
    /// until [`exit_scheduler`](crate::exit_scheduler) stops it or
    /// [`exit`](crate::exit) ends the job. Returns the job's exit code once
    /// every PE has stopped. `args` are the program's arguments with the
    /// runtime flags removed, program name first.
    ///
    /// The start function is any closure `Fn(&[String]) + Send + Sync`, where
    /// the manual's `CmiStartFn` is a C function pointer taking `(argc,
    /// argv)`: one closure is shared by every PE, so what it captures must be
    /// shareable; PE-private state belongs in a [`Cpv`](crate::Cpv).
    ///
    /// # Panics
    /// Re-raises the first panic of any PE's code, after all PEs stopped.
    #[doc(alias = "CmiStartFn")]
    pub fn run<F>(self, start: F) -> Result<i32, StartError>
    where
        F: Fn(&[String]) + Send + Sync + 'static,
    {
        let start: StartFn = if self.exit_on_quiescence {
            Arc::new(move |args: &[String]| {
                start(args);
                if crate::my_pe() == 0 {
                    crate::start_quiescence_detection(|| {
                        if !crate::job_exiting() {
                            crate::exit(0)
                        }
                    });
                }
            })
        } else {
            Arc::new(start)
        };
        self.run_mode(start, SchedMode::Normal)
    }

    /// The front door of a program: runs the job as [`run`](Converse::run)
    /// does and returns the process's exit status, so that `main` needs no
    /// exit ceremony:
    ///
    /// ```no_run
    /// fn main() -> std::process::ExitCode {
    ///     converse::Converse::new().main(|_args| {
    ///         converse::cmi_printf!("hello from PE {}\n", converse::my_pe());
    ///         converse::exit(0);
    ///     })
    /// }
    /// ```
    ///
    /// A job that cannot start (a bad flag, a launcher that cannot be
    /// reached) prints `PROGRAM: WHY` on stderr and returns status 1, as
    /// the examples did by hand; the code given to [`exit`](crate::exit)
    /// becomes the status (its low 8 bits, as the process's exit status
    /// keeps). A PE's panic is re-raised, as in `run`.
    pub fn main<F>(self, start: F) -> std::process::ExitCode
    where
        F: Fn(&[String]) + Send + Sync + 'static,
    {
        let program = self
            .args
            .first()
            .map(|p| {
                std::path::Path::new(p)
                    .file_name()
                    .map_or_else(|| p.clone(), |n| n.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| "converse".to_owned());
        match self.run(start) {
            Ok(code) => std::process::ExitCode::from(code as u8),
            Err(e) => {
                eprintln!("{program}: {e}");
                std::process::ExitCode::FAILURE
            }
        }
    }

    /// User-calls-scheduler mode: runs `start(args)` on every PE as the whole
    /// computation (it polls with the scheduler functions itself); the job
    /// ends when every PE's `start` has returned, or at `exit`. The start
    /// function (`CmiStartFn`) is a closure, as in [`run`](Converse::run).
    #[doc(alias = "CmiStartFn")]
    pub fn run_user_scheduler<F>(self, start: F) -> Result<i32, StartError>
    where
        F: Fn(&[String]) + Send + Sync + 'static,
    {
        self.run_mode(Arc::new(start), SchedMode::UserCallsScheduler)
    }

    fn run_mode(self, start: StartFn, mode: SchedMode) -> Result<i32, StartError> {
        check_not_a_pe();
        // `--help`, `--version`: answered before any PE (or launcher
        // connection) exists.
        if let Some(text) = args::info_text(&self.args) {
            print!("{text}");
            return Ok(0);
        }
        let job = self.job()?;
        let start = with_inits(start, module_inits());
        let others = spawn_pes(&job, &start, mode);
        pe_body(&job, job.first_pe, Role::Worker, &start, mode);
        join_all(&job, others);
        stop_watchdog(&job);
        stop_ccs(&job);
        gather_trace(&job);
        end_network(&job);
        write_trace(&job);
        if let Some(payload) = job.take_panic() {
            std::panic::resume_unwind(payload);
        }
        Ok(job.exit_code())
    }

    /// ConverseInit-returns mode: starts PEs `1..N`, each running `start(args)`
    /// as in user-calls-scheduler mode, and returns with the calling thread
    /// made PE 0. The caller then does PE 0's work, polling with the
    /// scheduler functions, and ends the job with [`exit`](crate::exit)
    /// (ends the process) or [`finish`] (returns the exit code). The start
    /// function (`CmiStartFn`) is a closure, as in [`run`](Converse::run).
    #[doc(alias = "CmiStartFn")]
    pub fn init_returns<F>(self, start: F) -> Result<(), StartError>
    where
        F: Fn(&[String]) + Send + Sync + 'static,
    {
        check_not_a_pe();
        let job = self.job()?;
        let modules = module_inits();
        let start = with_inits(Arc::new(start), modules.clone());
        let others = spawn_pes(&job, &start, SchedMode::UserCallsScheduler);
        Pe::install(Rc::new(Pe::new(
            job.clone(),
            job.first_pe,
            Role::ReturnedMain,
        )));
        pin_if_asked(&job, job.first_pe);
        // A counted reference, not `pe::with`: no borrow of the PE is held
        // while the libraries' code runs.
        init_pe(&pe::current(), &modules);
        RETURNED.with(|r| *r.borrow_mut() = Some(Returned { job, others }));
        Ok(())
    }
}

fn spawn_pes(job: &Arc<Job>, start: &StartFn, mode: SchedMode) -> Vec<JoinHandle<()>> {
    (job.first_pe + 1..job.first_pe + job.local_pes())
        .map(|pe| {
            let (job, start) = (job.clone(), start.clone());
            std::thread::Builder::new()
                .name(format!("PE {pe}"))
                .stack_size(PE_STACK)
                .spawn(move || pe_body(&job, pe, Role::Worker, &start, mode))
                .unwrap_or_else(|e| {
                    crate::proc::exit::abort(&format!(
                        "cannot start PE {pe}: {e} (each PE is a thread: the OS's limits on \
                         threads and memory maps, `ulimit -u`, kernel.threads-max and \
                         vm.max_map_count, bound the PEs of one process)"
                    ))
                })
        })
        .collect()
}

/// One PE's life: install it, run `start` (and the scheduler), tear it down.
/// Nothing escapes: a panic anywhere, the teardown included, is recorded for
/// the thread that started the job.
fn pe_body(job: &Arc<Job>, pe: usize, role: Role, start: &StartFn, mode: SchedMode) {
    Pe::install(Rc::new(Pe::new(job.clone(), pe, role)));
    let result = catch_unwind(AssertUnwindSafe(|| {
        pin_if_asked(job, pe);
        let me = pe::current();
        // In normal mode the start function must not block (the manual's
        // rule): the scheduler that runs after it is what polls.
        me.set_in_start(mode == SchedMode::Normal);
        start(&job.args);
        me.set_in_start(false);
        me.check_handlers_once();
        crate::ccs::pe_started(job);
        if mode == SchedMode::Normal {
            crate::csd::schedule_forever();
        }
    }));
    if result.is_err() {
        // The handlers the unwind left (an `exit` inside one, a panic) end
        // here, not when the PE does.
        pe::current().trace.unwound();
    }
    record_unwind(job, result);
    job.pe_done();
    teardown(job);
}

/// `+setcpuaffinity`, `+pemap`: pins the calling thread, PE `pe`'s, to
/// its processor (`proc::affinity`), or ends the job naming both. Without
/// them, in a job of one process, starts the thread on a processor of its
/// own when the PEs fit the processors
/// (`affinity::start_current_thread_apart`), unpinned. (A job of several
/// processes is left to the kernel, which starts each process on an idle
/// processor: a PE's rank on its host is a walk over the job's nodes.)
fn pin_if_asked(job: &Job, pe: usize) {
    if !job.config.set_cpu_affinity {
        if job.net.is_none() && job.local_pes() > 1 {
            crate::proc::affinity::start_current_thread_apart(pe - job.first_pe, job.local_pes());
        }
        return;
    }
    let rank = crate::rt::hosts::physical_rank(pe);
    let cores = crate::rt::hosts::num_cores();
    let cpu = crate::proc::affinity::cpu_for(rank, job.config.pemap.as_deref(), cores);
    if let Err(e) = crate::proc::affinity::pin_pe_thread(cpu) {
        crate::proc::exit::abort(&format!(
            "+setcpuaffinity: PE {pe} cannot be pinned to processor {cpu}: {e}"
        ));
    }
}

/// Keeps a PE's panic (not the runtime's own exit unwinding) for `run`.
/// In a multi-process job a panic ends the job as an abort does: the other
/// processes and the launcher learn which PE panicked, and where, and the
/// process exits with Rust's panic code (101).
fn record_unwind(job: &Job, result: std::thread::Result<()>) {
    if let Err(payload) = result {
        if payload.is::<ExitUnwind>() {
            return;
        }
        if job.net.is_some() {
            let reason = crate::proc::panic::take_reason()
                .unwrap_or_else(|| "a PE's code panicked".to_string());
            // The panic hook printed the line naming the PE already.
            crate::proc::exit::die(
                PANIC_EXIT_CODE,
                "",
                crate::proc::exit::Ending {
                    reason: &reason,
                    culprit: crate::proc::exit::Culprit::ThisProcess { skip: None },
                },
            );
        }
        job.record_panic(payload);
    }
}

/// The exit code of a process whose PE panicked (Rust's own).
const PANIC_EXIT_CODE: i32 = 101;

/// Uninstalls the calling thread's PE, dropping its PE-private state. A
/// panic in a destructor is recorded like any PE panic.
fn teardown(job: &Job) {
    // Drop PE-private variables one at a time while the thread is still a
    // PE and with no borrow held, so their destructors may ask which PE they
    // are on and use the other variables.
    let result = catch_unwind(AssertUnwindSafe(|| {
        if let Some(me) = pe::try_current() {
            // Threads still suspended first: their stacks may hold
            // anything, PE-private values included.
            crate::cth::unwind_suspended(&me);
            me.drop_globals();
        }
    }));
    record_unwind(job, result);
    // The PE's persistent channels close even if a destructor above
    // panicked.
    let result = catch_unwind(AssertUnwindSafe(|| {
        if let Some(me) = pe::try_current() {
            crate::cmi::persistent::end_pe(&me);
        }
    }));
    record_unwind(job, result);
    // The PE itself: handler closures, queued messages, cached node values.
    let result = catch_unwind(AssertUnwindSafe(|| drop(Pe::uninstall())));
    record_unwind(job, result);
}

/// Stops the job's CCS server, if this process runs it.
fn stop_ccs(job: &Job) {
    if let Some(server) = crate::ccs::state(job).server.get() {
        crate::ccs::server::stop(server);
    }
}

/// The part of the job this process runs, in a job its launcher started:
/// it joins the others (bootstrap, network module) as process
/// `place.node`.
fn joined_job(
    place: &crate::rt::launch::Placement,
    topo: Topology,
    flags: &Config,
    program_args: Vec<String>,
) -> Result<Job, StartError> {
    crate::proc::panic::set_process(place.node);
    let net = crate::rt::launch::join(
        place,
        topo,
        flags.lmt.as_deref(),
        flags
            .branch
            .unwrap_or(crate::proc::spantree::DEFAULT_BRANCH),
    )
    .map_err(|e| StartError::Join {
        process: place.node,
        cause: e,
    })?;
    let mut job = Job::with_nodes(topo, place.node..place.node + 1, program_args);
    job.net = Some(Arc::new(net));
    job.hosts = place.hosts.as_deref().map(Arc::from);
    if let Some(host_pes) = place.host_pes {
        let cores = crate::proc::topology::cores();
        job.oversubscribed = host_pes > cores;
    }
    Ok(job)
}

/// `+trace`, `+stats`, `+stats-plot`: the job's trace, and the files
/// process 0 will write checked now (a path it cannot write ends the job
/// before it runs, not after).
fn set_up_tracing(job: &mut Job) -> Result<(), StartError> {
    let topo = job.topo;
    let stats = job.config.stats || job.config.stats_plot.is_some();
    if job.config.trace.is_none() && !stats {
        return Ok(());
    }
    if !cfg!(feature = "trace") {
        let flag = if job.config.trace.is_some() {
            "+trace"
        } else if job.config.stats_plot.is_some() {
            "+stats-plot"
        } else {
            "+stats"
        };
        return Err(StartError::Setup(format!(
            "{flag}: this build of converse has no tracing (its crate feature `trace` is off)"
        )));
    }
    // Process 0 writes the files: a path it cannot write ends the
    // job now, not after the run.
    if job.first_node == 0 {
        let files = [
            ("+trace", &job.config.trace),
            ("+stats-plot", &job.config.stats_plot),
        ];
        for (flag, path) in files {
            if let Some(path) = path {
                std::fs::File::create(path).map_err(|e| StartError::File {
                    flag,
                    path: path.clone(),
                    source: e.into(),
                })?;
            }
        }
    }
    job.trace = Some(crate::trace::JobTrace::new(
        job.config.trace.as_ref().map(Into::into),
        job.config
            .trace_buffer
            .unwrap_or(crate::trace::DEFAULT_BUFFER_EVENTS),
        job.config.trace_exact,
        stats,
        job.first_node,
        (job.first_pe..job.first_pe + job.local_pes())
            .map(|pe| (pe, topo.node_of(pe)))
            .collect(),
        crate::msg::system::kind_names(),
    ));
    if let (Some(net), 0) = (&job.net, job.first_node) {
        // What another process's part can hold at most: its PEs'
        // rings (up to 20 bytes an event, postcard's varints) and
        // a generous allowance for names and stats; more is a
        // peer not to trust.
        let ring_events = match job.config.trace {
            Some(_) => job
                .config
                .trace_buffer
                .unwrap_or(crate::trace::DEFAULT_BUFFER_EVENTS)
                .next_power_of_two(),
            None => 0,
        };
        let per_pe = ring_events.saturating_mul(20).saturating_add(64 << 20);
        net.expect_trace_parts(per_pe.saturating_mul(job.local_pes()));
    }
    Ok(())
}

/// Starts what runs beside the PEs: the watchdog, the CCS server (process
/// 0), the network module (which process 0 announces).
fn start_services(job: &Arc<Job>) -> Result<(), StartError> {
    if let Some(watchdog) = &job.watchdog {
        watchdog.start(job);
    }
    if let Some(server) = &job.config.server
        && job.first_node == 0
    {
        let handle = crate::ccs::server::start(job, server).map_err(StartError::Server)?;
        let _ = crate::ccs::state(job).server.set(handle);
    }
    if let Some(net) = &job.net {
        net.start(job);
        if job.first_node == 0 {
            // A large-message mode other than the default is said.
            let lmt = match job.config.lmt.as_deref() {
                Some(mode) if mode != "get" => format!(" (large messages: {mode})"),
                _ => String::new(),
            };
            println!(
                "converse: {} PEs in {} processes of {} PE{}, netmod {}{lmt}",
                job.topo.num_pes(),
                job.topo.num_nodes(),
                job.topo.node_size(0),
                if job.topo.node_size(0) == 1 { "" } else { "s" },
                net.module_name()
            );
        }
    }
    Ok(())
}

/// The seed of `+randomized_msgq` (or of `RANDOMIZED_MSGQ_ENV`, whose
/// value is `env`), if the
/// job randomizes its arrivals, and whether to say it (not when the
/// environment gave it: it is there to read, and a test suite run under it
/// keeps its output). A drawn seed is the same in every process of a job:
/// one a launcher placed derives it from the job's segment id (`shared`),
/// which every process has.
fn msgq_seed(
    config: &Config,
    env: Option<String>,
    shared: Option<u64>,
) -> Result<(Option<u64>, bool), StartError> {
    use crate::proc::args::{MsgqSeed, RANDOMIZED_MSGQ_ENV};
    let asked = match config.randomized_msgq {
        Some(seed) => Some(seed),
        None => match env {
            None => None,
            Some(v) if v == "draw" => Some(MsgqSeed::Draw),
            Some(v) => Some(MsgqSeed::Given(v.parse().map_err(|_| {
                StartError::Setup(format!(
                    "{RANDOMIZED_MSGQ_ENV}={v}: expected a seed (a whole number) or `draw`"
                ))
            })?)),
        },
    };
    let say = config.randomized_msgq.is_some() || asked == Some(MsgqSeed::Draw);
    let seed = asked.map(|seed| match (seed, shared) {
        (MsgqSeed::Given(seed), _) => seed,
        (MsgqSeed::Draw, Some(shared)) => crate::csd::seed_from(shared),
        (MsgqSeed::Draw, None) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            crate::csd::seed_from(now ^ u64::from(std::process::id()) << 32)
        }
    });
    Ok((seed, say))
}

/// The PEs have all finished: the watchdog (if any) stops watching.
fn stop_watchdog(job: &Job) {
    if let Some(watchdog) = &job.watchdog {
        watchdog.stop();
    }
}

/// Once this process's PEs have all finished, its part of the trace (if
/// the job records one, or keeps stats): kept by process 0 until it writes
/// the file and prints the stats, sent
/// to it by the others (ahead of their `Bye`, so process 0 has every part
/// once the network has ended).
fn gather_trace(job: &Job) {
    let Some(trace) = &job.trace else { return };
    let Some(part) = trace.take_part(true) else {
        return;
    };
    match &job.net {
        Some(net) if job.first_node != 0 => net.send_trace_part(&part.encode()),
        _ => trace.keep(part),
    }
}

/// Process 0 writes the trace, prints the stats and writes their plot
/// (each if asked for): its own part and those the others sent.
fn write_trace(job: &Job) {
    let Some(trace) = &job.trace else { return };
    let Some(own) = trace.take_kept() else { return };
    let mut parts = vec![own];
    let mut missing = Vec::new();
    if let Some(net) = &job.net {
        for (process, bytes) in net.take_trace_parts() {
            let why = if bytes.is_empty() {
                Err("it sent none".to_string())
            } else {
                crate::trace::part::ProcessPart::decode(&bytes)
            };
            match why {
                Ok(part) => parts.push(part),
                Err(e) => {
                    // With `+stats` alone the part carries only stats.
                    let what = if trace.path.is_some() {
                        "trace"
                    } else {
                        "stats"
                    };
                    crate::proc::io::error(format_args!(
                        "converse: the {what} part of process {process} is left out: {e}\n"
                    ));
                    missing.push(process);
                }
            }
        }
    }
    let note = if missing.is_empty() {
        String::new()
    } else {
        format!("the parts of processes {missing:?} are missing")
    };
    if trace.stats() {
        let table = crate::trace::stats_table(&parts, &missing);
        crate::proc::io::error(format_args!("{table}"));
        if let Some(plot) = &job.config.stats_plot {
            match crate::trace::write_plot(std::path::Path::new(plot), &parts) {
                Ok(summary) => crate::proc::io::error(format_args!(
                    "converse: stats plot written to {plot} ({summary})\n"
                )),
                Err(e) => crate::proc::io::error(format_args!("converse: {e}\n")),
            }
        }
    }
    if let Some(path) = &trace.path {
        match crate::trace::write_trace(path, parts, &note) {
            Ok(summary) => crate::proc::io::error(format_args!(
                "converse: trace written to {} ({summary})\n",
                path.display()
            )),
            Err(e) => crate::proc::io::error(format_args!("converse: {e}\n")),
        }
    }
}

/// In a multi-process job, once this process's PEs have all finished: the
/// exit protocol with the other processes (see `net::network`).
fn end_network(job: &Job) {
    if let Some(net) = &job.net {
        net.shutdown();
        // The launcher may close once it knows; not before (until then its
        // end means it died, and so must this process).
        crate::rt::launch::ending();
        crate::rt::launch::tell_ended();
    }
}

/// Message buffers of a few MiB come and go at a high rate (every large
/// message sent or received allocates one). glibc's malloc serves blocks
/// above its mmap threshold with a fresh mapping each time, so every such
/// message pays a page fault per 4 KiB (about 0.6 ms per MiB on this kind
/// of virtual machine). Raising the threshold to 64 MiB keeps them in the
/// heap, where freed blocks are reused. Process-wide and harmless to other
/// code; skipped where the allocator is not glibc's.
fn keep_large_buffers_in_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            // SAFETY: mallopt with integer arguments; no memory is touched.
            unsafe {
                libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 20);
                libc::mallopt(libc::M_TRIM_THRESHOLD, 128 << 20);
            }
        });
    }
}

/// Refuses to start a job on a thread that already is a PE, before any
/// thread is spawned (so no PE of the refused job is left running).
fn check_not_a_pe() {
    assert!(
        pe::try_current().is_none(),
        "this thread is already a Converse PE; a thread can run one job at a time"
    );
}

/// Joins PE threads; a thread that died outside the runtime's guard counts as
/// a PE panic.
fn join_all(job: &Job, threads: Vec<JoinHandle<()>>) {
    for t in threads {
        if let Err(payload) = t.join() {
            job.record_panic(payload);
        }
    }
}

struct Returned {
    job: Arc<Job>,
    others: Vec<JoinHandle<()>>,
}

thread_local! {
    static RETURNED: RefCell<Option<Returned>> = const { RefCell::new(None) };
}

/// Ends an `init_returns` job from its PE 0 (the calling thread) and returns
/// the exit code; unlike [`exit`](crate::exit) it does not end the process.
///
/// As the manual says, shutdown happens once PE 0 has called this *and* the
/// other PEs have returned from their start functions: until they have, PE 0
/// keeps delivering the messages sent to it (so a PE waiting for PE 0's
/// answer can finish). If another PE has called `exit`, the job is already
/// ending and this returns at once with that PE's code.
///
/// # Panics
/// If the calling thread did not start a job with `init_returns`; re-raises
/// the first panic of any PE's code.
pub fn finish(code: i32) -> i32 {
    if pe::try_current().is_some_and(|me| !me.cth.current().is_main_flow()) {
        crate::proc::exit::abort(
            "finish called from a user-level thread: call it from the main flow of PE 0 (the thread that called init_returns)",
        );
    }
    finish_returned_main(code)
}

/// See [`finish`]; also the path of [`exit`](crate::exit) on that thread.
pub(crate) fn finish_returned_main(code: i32) -> i32 {
    let returned = RETURNED.with(|r| r.borrow_mut().take());
    let Returned { job, others } =
        returned.expect("finish/exit: this thread did not start a job with Converse::init_returns");
    job.record_exit_code(code);
    serve_until_others_done(&job);
    job.request_exit(code);
    join_all(&job, others);
    stop_watchdog(&job);
    teardown(&job);
    stop_ccs(&job);
    gather_trace(&job);
    end_network(&job);
    write_trace(&job);
    if let Some(payload) = job.take_panic() {
        std::panic::resume_unwind(payload);
    }
    job.exit_code()
}

/// PE 0 of an `init_returns` job, finishing: delivers its messages until
/// every other PE's start function has returned (and then the last ones they
/// sent) or the job is exiting.
fn serve_until_others_done(job: &Job) {
    let others = job.local_pes() - 1;
    let me = pe::current();
    while job.done_pes() < others && !job.is_exiting() {
        crate::csd::schedule_poll();
        // The watchdog's question wakes this wait too: answer it here.
        me.answer_watchdog_if_asked();
        // Timers of PE 0 still fire on time while it waits.
        let now = std::time::Instant::now();
        let deadline = crate::ccd::next_deadline(&me, now);
        job.pe(job.first_pe).idle.wait(
            || me.has_incoming() || job.done_pes() >= others,
            deadline.map(|d| d.saturating_duration_since(now)),
            crate::csd::idle::Patience::of(job.oversubscribed),
            crate::csd::idle::Sleep::Any,
        );
    }
    // What they sent before returning is visible now (their count is
    // published after their sends): deliver it too.
    crate::csd::schedule_poll();
}

/// `ConverseInit` with the manual's arguments: starts the job described by
/// `args` in the mode given by `user_calls_scheduler` (`usched`) and
/// `init_returns` (`initret`).
///
/// Unless `init_returns`, this never returns: when the job ends the process
/// exits with the job's exit code. A bad command line prints the error and
/// exits with code 1.
///
/// `start` stands for the manual's `CmiStartFn fn`: a closure
/// `Fn(&[String]) + Send + Sync` (shared by every PE) called with the
/// arguments left after the runtime flags, program name first, where C
/// passes `(argc, argv)`.
#[doc(alias = "ConverseInit")]
#[doc(alias = "CmiStartFn")]
pub fn converse_init<F>(args: Vec<String>, start: F, user_calls_scheduler: bool, init_returns: bool)
where
    F: Fn(&[String]) + Send + Sync + 'static,
{
    let conv = Converse::new().args(args);
    let result = if init_returns {
        conv.init_returns(start).map(|()| None)
    } else if user_calls_scheduler {
        conv.run_user_scheduler(start).map(Some)
    } else {
        conv.run(start).map(Some)
    };
    match result {
        Ok(None) => {}
        Ok(Some(code)) => crate::proc::exit::end_process(code),
        Err(e) => {
            // One write: a launcher ending the job may cut a line written in
            // pieces.
            crate::proc::io::error(format_args!("converse: {e}\n"));
            crate::proc::exit::end_process(1)
        }
    }
}

/// Ends the whole job with exit code `code`, from any PE. Does not return.
///
/// On a PE the runtime started (normal and user-calls-scheduler modes, and
/// the other PEs of `init_returns`), the calling PE unwinds out of its code and
/// [`Converse::run`](crate::Converse::run) returns `code` once all PEs have
/// stopped. On the thread that called
/// [`init_returns`](crate::Converse::init_returns), finishes the job as
/// [`finish`](crate::finish) does (it waits for the other PEs' start functions
/// to return), then exits the process with `code`. Called on no PE at all,
/// exits the process with `code`.
#[doc(alias = "ConverseExit")]
pub fn exit(code: i32) -> ! {
    let Some(pe) = pe::try_current() else {
        crate::proc::exit::end_process(code)
    };
    match pe.role {
        Role::Worker => {
            pe.job.exit_everywhere(code);
            drop(pe);
            std::panic::resume_unwind(Box::new(ExitUnwind))
        }
        Role::ReturnedMain => {
            // The other processes end too (this process finishes as
            // `finish` does).
            if let Some(net) = &pe.job.net {
                net.broadcast_exit(code);
            }
            drop(pe);
            let code = finish_returned_main(code);
            crate::proc::exit::end_process(code)
        }
    }
}

/// True once some PE has called [`exit`] (or panicked): the job is ending.
/// PEs the runtime started leave by themselves at their next scheduler step;
/// the code of an `init_returns` main thread, which the runtime does not
/// unwind, can use this to stop polling.
pub fn job_exiting() -> bool {
    pe::with(|pe| pe.job.is_exiting())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proc::args::MsgqSeed;

    #[test]
    fn start_errors_name_the_process_and_chain_to_the_typed_cause() {
        use crate::rt::launch::BootstrapError;
        use crate::rt::network::NetworkError;
        use std::error::Error as _;
        let refused = BootstrapError::Twice("joined twice");
        let e = StartError::Join {
            process: 3,
            cause: refused.clone().into(),
        };
        assert_eq!(
            e.to_string(),
            "process 3 could not join the job: joined twice"
        );
        assert_eq!(
            e.source().unwrap().downcast_ref::<BootstrapError>(),
            Some(&refused)
        );
        let net = NetworkError::UnknownLmt { name: "x".into() };
        let e = StartError::Join {
            process: 0,
            cause: net.clone().into(),
        };
        assert_eq!(
            e.source().unwrap().downcast_ref::<NetworkError>(),
            Some(&net)
        );
        let e = StartError::from(refused.clone());
        assert_eq!(e, StartError::Bootstrap(refused.clone()));
        assert_eq!(e.to_string(), "joined twice");
        assert_eq!(
            e.source().unwrap().downcast_ref::<BootstrapError>(),
            Some(&refused)
        );
        assert!(StartError::Setup("x".into()).source().is_none());
        let e = StartError::Server(crate::ccs::ServerError::NotBuilt);
        assert!(e.to_string().contains("no CCS server"), "{e}");
        assert_eq!(
            e.source()
                .unwrap()
                .downcast_ref::<crate::ccs::ServerError>(),
            Some(&crate::ccs::ServerError::NotBuilt)
        );
        let e = StartError::File {
            flag: "+trace",
            path: "/no/t.json".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound).into(),
        };
        assert_eq!(
            e.to_string(),
            "+trace: cannot create /no/t.json: entity not found"
        );
        let io = e.source().unwrap().downcast_ref::<std::io::Error>();
        assert_eq!(
            io.map(std::io::Error::kind),
            Some(std::io::ErrorKind::NotFound)
        );
    }

    #[test]
    fn a_layout_the_launcher_did_not_start_names_both() {
        let e = StartError::from(LaunchError::NotAMultiple {
            processes: 2,
            pes: 3,
        });
        assert_eq!(
            e.to_string(),
            "the launcher started 2 processes but +p 3 is not a multiple of them (a process \
             runs ++ppn PEs: +p must be the processes times ++ppn)"
        );
        let e = StartError::from(LaunchError::ProcessCount {
            processes: 2,
            pes: 6,
            ppn: 2,
            makes: 3,
        });
        assert_eq!(
            e.to_string(),
            "the launcher started 2 processes but +p 6 ++ppn 2 makes 3 (a process runs \
             ++ppn PEs: +p must be the processes times ++ppn)"
        );
        assert!(std::error::Error::source(&e).unwrap().is::<LaunchError>());
    }

    #[test]
    fn the_randomized_order_seed_from_the_flag_or_the_environment() {
        let flag = |seed| Config {
            randomized_msgq: Some(seed),
            ..Config::default()
        };
        let none = Config::default();
        // The flag wins and is said; the environment's seed is not said.
        assert_eq!(
            msgq_seed(&flag(MsgqSeed::Given(5)), Some("9".into()), None).unwrap(),
            (Some(5), true)
        );
        assert_eq!(
            msgq_seed(&none, Some("9".into()), None).unwrap(),
            (Some(9), false)
        );
        assert_eq!(msgq_seed(&none, None, None).unwrap(), (None, false));
        // Drawn: from the job's shared id when a launcher placed it, so
        // every process draws alike.
        let drawn = msgq_seed(&none, Some("draw".into()), Some(77)).unwrap();
        assert_eq!(drawn, (Some(crate::csd::seed_from(77)), true));
        assert_eq!(
            msgq_seed(&flag(MsgqSeed::Draw), None, Some(77)).unwrap(),
            drawn
        );
        // A bad value names the variable.
        let err = msgq_seed(&none, Some("soon".into()), None).unwrap_err();
        assert!(
            err.to_string()
                .contains("CONVERSE_RANDOMIZED_MSGQ=soon: expected a seed"),
            "{err}"
        );
    }
}
