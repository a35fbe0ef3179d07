//! The bootstrap of a process started by a launcher that serves PMIx:
//! Open MPI's `mpirun` (4.x and later), Slurm's `srun --mpi=pmix`, PRRTE's
//! `prterun`. The launcher's PMIx server says the process's rank and the
//! job's size, and carries the key-value exchange through which the
//! processes share what `convrun` would have told them (the job key, the
//! segment id, the hosts, the business cards), as the PMI-1 bootstrap
//! does through Hydra.
//!
//! PMIx's wire protocol is the library's own (it changes between
//! versions, and the server may speak any of several), so this bootstrap
//! talks through the launcher's client library, `libpmix.so.2`, loaded
//! when a PMIx launcher started the process (its `PMIX_NAMESPACE` and
//! `PMIX_RANK` are set) and never otherwise: nothing is linked, a build
//! needs no PMIx, and one binary runs under every launcher.
//! `CONVERSE_PMIX_LIBRARY` names another file for the library (a
//! cluster's PMIx outside the loader's path). A library that cannot be
//! loaded is an error that names it and the way out, so that a job never
//! runs as N unrelated one-process jobs.
//!
//! What a process asks does not grow with the job: the key and the
//! segment id (rank 0's), every rank's node number (the launcher's job
//! data, which the library keeps in this host's shared store: no message
//! each), then a card when it first talks to a peer (`card_of`, fetched
//! from the peer's server on demand: the fences collect nothing).
//!
//! # Invariants
//!
//! - The job key is drawn by rank 0 and put in the job's key-value space,
//!   which only the job's processes reach; it never appears on a command
//!   line or in a file name.
//! - Every fence and every `get` of another rank's data carries the
//!   start-up deadline (`PMIX_TIMEOUT`, `++timeout`); a failure names the
//!   call, the key and PMIx's own words for the status.
//! - The structures passed to the library have the layout of PMIx's
//!   headers (checked at compile time against the sizes of version 4.2's
//!   `pmix_common.h`, the PMIx that Open MPI 4.1 and Slurm 22.05 use here;
//!   other versions are untested); values the library
//!   hands back are read by their type tag and released with its own
//!   `PMIx_Value_destruct`.
//! - The process tells the launcher how it ends: `PMIx_Finalize` (its part
//!   is done), or `PMIx_Abort` when it is the culprit of an abnormal end
//!   (the launcher ends the others).
//!
//! # Concurrency
//!
//! Start-up runs on the thread that starts the process. The PMIx client
//! library is thread-safe (it has its own progress thread); a mutex still
//! keeps this process's calls in turn, so that a `card_of` never meets a
//! finalize.
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use launch_wire::JobKey;

use super::{Bootstrap, BootstrapError, Placement};
use crate::proc::args::Config;

/// The library's file name, as the loader finds it.
const LIBRARY: &str = "libpmix.so.2";
/// The variable that names another file for it.
pub(super) const LIBRARY_VAR: &str = "CONVERSE_PMIX_LIBRARY";

/// Keys of the job's key-value space (one space per job).
const KEY_KEY: &CStr = c"converse-key";
const SHM_KEY: &CStr = c"converse-shm";
const HOST_KEY: &CStr = c"converse-host";
const CARD_KEY: &CStr = c"converse-card";

/// The launcher's job data (PMIx's reserved keys).
const JOB_SIZE: &CStr = c"pmix.job.size";
const NODE_ID: &CStr = c"pmix.nodeid";
const TIMEOUT: &CStr = c"pmix.timeout";

/// How long a failing process waits before it asks the launcher to end
/// the job (as the PMI-1 bootstrap does).
const ABORT_PAUSE: Duration = Duration::from_millis(100);

/// True once a process initialized PMIx: a second job in the same
/// process (tests start several) is refused, as under PMI-1.
static TAKEN: AtomicBool = AtomicBool::new(false);
/// The launcher started this process alone (a job of one, which needs no
/// launcher): every job of the process runs as a plain one-process job.
static ALONE: AtomicBool = AtomicBool::new(false);

// PMIx's types, as its headers lay them out (pmix_common.h).
const NSPACE_LEN: usize = 256;
const KEY_LEN: usize = 512;
/// `PMIX_RANK_WILDCARD`: the job as a whole.
const RANK_WILDCARD: u32 = 0xFFFF_FFFE;
/// `pmix_data_type_t` tags.
const TYPE_STRING: u16 = 3;
const TYPE_INT: u16 = 6;
const TYPE_UINT32: u16 = 14;
/// `PMIX_GLOBAL`: a put every rank may get.
const SCOPE_GLOBAL: u8 = 3;
const SUCCESS: c_int = 0;

/// `pmix_proc_t`: a namespace (the job) and a rank in it.
#[repr(C)]
#[derive(Clone, Copy)]
struct Proc {
    nspace: [c_char; NSPACE_LEN],
    rank: u32,
}

/// `pmix_value_t`'s data: the members this bootstrap reads or writes of
/// the union (24 bytes in the headers, for its largest members).
#[repr(C)]
#[derive(Clone, Copy)]
union Data {
    string: *mut c_char,
    int: c_int,
    uint32: u32,
    size: [u64; 3],
}

/// `pmix_value_t`: a type tag and the data.
#[repr(C)]
#[derive(Clone, Copy)]
struct Value {
    kind: u16,
    data: Data,
}

/// `pmix_info_t`: a key, directives and a value.
#[repr(C)]
struct Info {
    key: [c_char; KEY_LEN],
    flags: u32,
    value: Value,
}

// The sizes and offsets of PMIx 4.2's headers (sizeof, offsetof).
const _: () = {
    assert!(std::mem::size_of::<Proc>() == 260);
    assert!(std::mem::offset_of!(Proc, rank) == 256);
    assert!(std::mem::size_of::<Value>() == 32);
    assert!(std::mem::offset_of!(Value, data) == 8);
    assert!(std::mem::size_of::<Info>() == 552);
    assert!(std::mem::offset_of!(Info, flags) == 512);
    assert!(std::mem::offset_of!(Info, value) == 520);
};

impl Proc {
    /// Rank `rank` of the namespace `of` names.
    fn peer(of: &Proc, rank: u32) -> Proc {
        Proc { rank, ..*of }
    }

    /// The namespace, for messages.
    fn namespace(&self) -> String {
        if self.nspace[NSPACE_LEN - 1] != 0 {
            return "(unterminated)".into();
        }
        // SAFETY: `nspace` is `NSPACE_LEN` bytes and its last is NUL
        // (checked above), so the read stops inside the array.
        unsafe { CStr::from_ptr(self.nspace.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }
}

impl Info {
    /// `key` = `value` (an int), required.
    fn int(key: &CStr, value: c_int) -> Info {
        let mut info = Info {
            key: [0; KEY_LEN],
            flags: 0,
            value: Value {
                kind: TYPE_INT,
                data: Data { size: [0; 3] },
            },
        };
        for (to, &from) in info.key.iter_mut().zip(key.to_bytes()) {
            *to = from as c_char;
        }
        info.value.data.int = value;
        info
    }
}

type InitFn = unsafe extern "C" fn(*mut Proc, *mut Info, usize) -> c_int;
type FinalizeFn = unsafe extern "C" fn(*const Info, usize) -> c_int;
type AbortFn = unsafe extern "C" fn(c_int, *const c_char, *mut Proc, usize) -> c_int;
type PutFn = unsafe extern "C" fn(u8, *const c_char, *mut Value) -> c_int;
type CommitFn = unsafe extern "C" fn() -> c_int;
type FenceFn = unsafe extern "C" fn(*const Proc, usize, *const Info, usize) -> c_int;
type GetFn =
    unsafe extern "C" fn(*const Proc, *const c_char, *const Info, usize, *mut *mut Value) -> c_int;
type ValueDestructFn = unsafe extern "C" fn(*mut Value);
type ErrorStringFn = unsafe extern "C" fn(c_int) -> *const c_char;

/// The library's calls this bootstrap makes.
struct Api {
    init: InitFn,
    finalize: FinalizeFn,
    abort: AbortFn,
    put: PutFn,
    commit: CommitFn,
    fence: FenceFn,
    get: GetFn,
    value_destruct: ValueDestructFn,
    error_string: ErrorStringFn,
}

/// The library, loaded once per process (it stays loaded: PMIx's own
/// threads run in it until the process exits).
static API: OnceLock<Result<Api, LoadError>> = OnceLock::new();

/// Why the library cannot be loaded: the file and `dlerror`'s words.
#[derive(Clone)]
struct LoadError(String);

/// The library's calls, loading it on first use.
fn api() -> Result<&'static Api, LoadError> {
    API.get_or_init(load).as_ref().map_err(Clone::clone)
}

/// The last `dlerror`, in words.
fn dl_error() -> String {
    // SAFETY: `dlerror` returns NULL or a NUL-terminated message that
    // stays valid until the next dl call on this thread; it is copied at
    // once.
    unsafe {
        let e = libc::dlerror();
        if e.is_null() {
            "unknown error".into()
        } else {
            CStr::from_ptr(e).to_string_lossy().into_owned()
        }
    }
}

fn load() -> Result<Api, LoadError> {
    let file = std::env::var(LIBRARY_VAR).unwrap_or_else(|_| LIBRARY.into());
    let c_file =
        CString::new(file.clone()).map_err(|_| LoadError(format!("{LIBRARY_VAR} holds a NUL")))?;
    // SAFETY: `c_file` is a NUL-terminated path. RTLD_GLOBAL: the
    // library loads plugins of its own that resolve its symbols.
    let handle = unsafe { libc::dlopen(c_file.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if handle.is_null() {
        return Err(LoadError(format!(
            "cannot load the PMIx library {file}: {}",
            dl_error()
        )));
    }
    let symbol = |name: &CStr| -> Result<*mut c_void, LoadError> {
        // SAFETY: `handle` is the open library; `name` is NUL-terminated.
        let address = unsafe { libc::dlsym(handle, name.as_ptr()) };
        if address.is_null() {
            Err(LoadError(format!(
                "the PMIx library {file} has no {}: {}",
                name.to_string_lossy(),
                dl_error()
            )))
        } else {
            Ok(address)
        }
    };
    // SAFETY: each transmute: the symbol is PMIx's function of that name,
    // whose C signature (PMIx 4.2's pmix.h, the version tested) the function
    // pointer type spells; a data pointer to a function is its address
    // on this platform.
    unsafe {
        Ok(Api {
            init: std::mem::transmute::<*mut c_void, InitFn>(symbol(c"PMIx_Init")?),
            finalize: std::mem::transmute::<*mut c_void, FinalizeFn>(symbol(c"PMIx_Finalize")?),
            abort: std::mem::transmute::<*mut c_void, AbortFn>(symbol(c"PMIx_Abort")?),
            put: std::mem::transmute::<*mut c_void, PutFn>(symbol(c"PMIx_Put")?),
            commit: std::mem::transmute::<*mut c_void, CommitFn>(symbol(c"PMIx_Commit")?),
            fence: std::mem::transmute::<*mut c_void, FenceFn>(symbol(c"PMIx_Fence")?),
            get: std::mem::transmute::<*mut c_void, GetFn>(symbol(c"PMIx_Get")?),
            value_destruct: std::mem::transmute::<*mut c_void, ValueDestructFn>(symbol(
                c"PMIx_Value_destruct",
            )?),
            error_string: std::mem::transmute::<*mut c_void, ErrorStringFn>(symbol(
                c"PMIx_Error_string",
            )?),
        })
    }
}

impl Api {
    /// PMIx's words for `status`, if it has any.
    fn words(&self, status: c_int) -> Option<String> {
        // SAFETY: `PMIx_Error_string` returns a static NUL-terminated
        // string for any status (an "unknown" one for codes it lacks).
        let text = unsafe { (self.error_string)(status) };
        if text.is_null() {
            return None;
        }
        // SAFETY: non-null, NUL-terminated and static (above).
        let words = unsafe { CStr::from_ptr(text) }.to_string_lossy();
        Some(words.into_owned())
    }

    /// `Ok` if `status` is success, else an error naming `call`.
    fn check(&self, status: c_int, call: impl FnOnce() -> String) -> Result<(), BootstrapError> {
        if status == SUCCESS {
            Ok(())
        } else {
            Err(BootstrapError::Pmix {
                call: call(),
                status,
                words: self.words(status),
            })
        }
    }

    /// Puts `value` under `key` for every rank to get.
    fn put(&self, key: &CStr, value: &str) -> Result<(), BootstrapError> {
        let text = CString::new(value)
            .map_err(|_| BootstrapError::protocol(format!("{key:?}'s value holds a NUL")))?;
        let mut value = Value {
            kind: TYPE_STRING,
            data: Data {
                string: text.as_ptr().cast_mut(),
            },
        };
        // SAFETY: `key` is NUL-terminated and shorter than PMIx's keys;
        // `value` is a string value whose pointer lives (in `text`) across
        // the call; PMIx copies what it keeps.
        let status = unsafe { (self.put)(SCOPE_GLOBAL, key.as_ptr(), &mut value) };
        self.check(status, || format!("put {}", key.to_string_lossy()))
    }

    /// Pushes the puts so far to the server.
    fn commit(&self) -> Result<(), BootstrapError> {
        // SAFETY: no arguments; PMIx is initialized.
        let status = unsafe { (self.commit)() };
        self.check(status, || "commit".into())
    }

    /// Waits until every rank of the job reached its fence, by `deadline`.
    /// Nothing is collected: a rank's data is fetched when asked for.
    fn fence(&self, deadline: Instant) -> Result<(), BootstrapError> {
        let info = [Info::int(TIMEOUT, seconds_to(deadline))];
        // SAFETY: no procs means the whole of the caller's namespace;
        // `info` is one valid `pmix_info_t` that lives across the call.
        let status = unsafe { (self.fence)(std::ptr::null(), 0, info.as_ptr(), info.len()) };
        self.check(status, || "fence".into())
    }

    /// The value of `key` for `proc`, by `deadline`, given to `read`
    /// (which sees its type tag and data) before PMIx's copy is released.
    fn get<T>(
        &self,
        proc: &Proc,
        key: &CStr,
        deadline: Option<Instant>,
        read: impl FnOnce(u16, &Data) -> Option<T>,
    ) -> Result<T, BootstrapError> {
        let info = deadline.map(|d| [Info::int(TIMEOUT, seconds_to(d))]);
        let (info_ptr, n) = info
            .as_ref()
            .map_or((std::ptr::null(), 0), |i| (i.as_ptr(), i.len()));
        let mut value: *mut Value = std::ptr::null_mut();
        // SAFETY: `proc` and `key` are valid for the call, `info` is NULL
        // or one valid `pmix_info_t`; on success PMIx stores a value it
        // allocated in `value`, which this function owns and releases.
        let status = unsafe { (self.get)(proc, key.as_ptr(), info_ptr, n, &mut value) };
        let what = || format!("get {} of rank {}", key.to_string_lossy(), proc.rank);
        self.check(status, what)?;
        if value.is_null() {
            return Err(BootstrapError::protocol(format!(
                "PMIx {} gave nothing",
                what()
            )));
        }
        // SAFETY: PMIx allocated `value` and gave it to this caller (above).
        let read = unsafe { read((*value).kind, &(*value).data) };
        // SAFETY: `value` came from PMIx's `malloc`; `PMIX_VALUE_RELEASE`
        // is exactly this destruct then `free`.
        unsafe {
            (self.value_destruct)(value);
            libc::free(value.cast());
        }
        read.ok_or_else(|| {
            BootstrapError::protocol(format!("PMIx {} is not of the expected type", what()))
        })
    }

    /// A string value of `key` for `proc`.
    fn get_string(
        &self,
        proc: &Proc,
        key: &CStr,
        deadline: Option<Instant>,
    ) -> Result<String, BootstrapError> {
        self.get(proc, key, deadline, |kind, data| {
            // SAFETY: a STRING value's data is a NUL-terminated string (or
            // NULL), valid until the value is released after `read`.
            (kind == TYPE_STRING && unsafe { !data.string.is_null() })
                .then(|| unsafe { CStr::from_ptr(data.string).to_string_lossy().into_owned() })
        })
    }

    /// A 32-bit value of `key` for `proc` (the launcher's job data: no
    /// deadline, the library has it).
    fn get_u32(&self, proc: &Proc, key: &CStr) -> Result<u32, BootstrapError> {
        self.get(proc, key, None, |kind, data| {
            if kind == TYPE_UINT32 {
                // SAFETY: a UINT32 value's data is its `uint32` member.
                Some(unsafe { data.uint32 })
            } else {
                None
            }
        })
    }
}

/// Whole seconds to `deadline`, at least 1, as PMIx's timeouts take them.
fn seconds_to(deadline: Instant) -> c_int {
    let left = deadline.saturating_duration_since(Instant::now());
    c_int::try_from(left.as_secs().max(1)).unwrap_or(c_int::MAX)
}

/// The PMIx bootstrap of one process.
pub(super) struct Pmix {
    api: &'static Api,
    me: Proc,
    /// Keeps this process's calls in turn (see the module's concurrency).
    calls: Mutex<()>,
    /// How long one fetch from a peer may take (`++timeout`).
    timeout: Duration,
}

/// The placement a PMIx launcher gave this process, if one started it.
pub(super) fn placement(config: &Config) -> Result<Option<Placement>, BootstrapError> {
    let var = |name: &str| std::env::var(name).ok();
    let (Some(namespace), Some(_)) = (var("PMIX_NAMESPACE"), var("PMIX_RANK")) else {
        return Ok(None);
    };
    let api = api().map_err(|LoadError(why)| BootstrapError::PmixLibrary { namespace, why })?;
    if ALONE.load(Ordering::Acquire) {
        return Ok(None);
    }
    if TAKEN.swap(true, Ordering::AcqRel) {
        return Err(BootstrapError::Taken("PMIx"));
    }
    let mut me = Proc {
        nspace: [0; NSPACE_LEN],
        rank: 0,
    };
    // SAFETY: `me` is a `pmix_proc_t` PMIx fills in; no info.
    let status = unsafe { (api.init)(&mut me, std::ptr::null_mut(), 0) };
    api.check(status, || "init".into())?;
    let job = Proc::peer(&me, RANK_WILDCARD);
    let size = api.get_u32(&job, JOB_SIZE)? as usize;
    let rank = me.rank as usize;
    if size == 0 || rank >= size || size > crate::proc::args::MAX_PES {
        return Err(BootstrapError::Launcher(format!(
            "PMIx rank {rank} of a job of {size} (namespace {}) is no place in a job",
            me.namespace()
        )));
    }
    let boot = Pmix {
        api,
        me,
        calls: Mutex::new(()),
        timeout: Duration::from_secs(config.timeout.unwrap_or(super::DEFAULT_TIMEOUT_SECS)),
    };
    if size == 1 {
        // A job of one process needs no launcher.
        boot.tell_ended();
        ALONE.store(true, Ordering::Release);
        return Ok(None);
    }
    tracing::debug!(rank, size, namespace = %me.namespace(), "joined the PMIx launcher's job");
    let deadline = Instant::now() + boot.timeout;
    let host = super::host_name();
    if rank == 0 {
        let (key, shm_id) = super::draw_job_secrets()?;
        api.put(KEY_KEY, &key.to_hex())?;
        api.put(SHM_KEY, &format!("{shm_id:016x}"))?;
    }
    // For a launcher that gives no node numbers (read only then).
    api.put(HOST_KEY, &host)?;
    api.commit()?;
    api.fence(deadline)?;
    let first = Proc::peer(&me, 0);
    let key =
        JobKey::from_hex(&api.get_string(&first, KEY_KEY, Some(deadline))?).ok_or_else(|| {
            BootstrapError::protocol("the job key in the PMIx key-value space is not 64 hex digits")
        })?;
    let shm_id = u64::from_str_radix(&api.get_string(&first, SHM_KEY, Some(deadline))?, 16)
        .map_err(|_| {
            BootstrapError::protocol(
                "the segment id in the PMIx key-value space is not hexadecimal",
            )
        })?;
    let ppn = super::pmi::launcher_ppn(config, size, var);
    let (hosts, host_count, host_pes) = match launcher_nodes(api, &me, size) {
        Ok(nodes) => super::host_layout(&nodes, rank, config, ppn),
        Err(e) => {
            tracing::debug!("{e}: the ranks' host names instead");
            let names = (0..size)
                .map(|r| {
                    if r == rank {
                        Ok(host.clone())
                    } else {
                        api.get_string(&Proc::peer(&me, r as u32), HOST_KEY, Some(deadline))
                    }
                })
                .collect::<Result<Vec<String>, BootstrapError>>()?;
            super::host_layout(&names, rank, config, ppn)
        }
    };
    let netmod = super::launcher_netmod(config, host_count);
    Ok(Some(Placement {
        node: rank,
        nodes: size,
        key,
        shm_id,
        netmod,
        host,
        hosts: Some(hosts),
        timeout: boot.timeout,
        host_pes: Some(host_pes),
        peer_timeout: crate::net::liveness::DEFAULT_PEER_TIMEOUT,
        ppn,
        boot: Arc::new(boot),
    }))
}

/// The launcher's node number of every rank (its job data, which the
/// library holds on this host).
fn launcher_nodes(api: &Api, me: &Proc, size: usize) -> Result<Vec<u32>, BootstrapError> {
    (0..size)
        .map(|r| api.get_u32(&Proc::peer(me, r as u32), NODE_ID))
        .collect()
}

impl Bootstrap for Pmix {
    fn publish(
        &self,
        _place: &Placement,
        card: &str,
        deadline: Instant,
    ) -> Result<(), BootstrapError> {
        let _turn = crate::sync::lock(&self.calls);
        self.api.put(CARD_KEY, card)?;
        self.api.commit()?;
        self.api.fence(deadline)
    }

    fn card_of(&self, peer: usize) -> Result<String, BootstrapError> {
        // One fetch from the peer's server, when a module first needs the
        // peer: no process reads every card.
        let deadline = Instant::now() + self.timeout;
        let rank = u32::try_from(peer).map_err(|_| BootstrapError::protocol("no such rank"))?;
        let proc = Proc::peer(&self.me, rank);
        let _turn = crate::sync::lock(&self.calls);
        self.api.get_string(&proc, CARD_KEY, Some(deadline))
    }

    fn joined(&self, _place: &Placement) -> Result<(), BootstrapError> {
        let api = self.api;
        crate::proc::exit::at_exit(move |ending| {
            if ending.culprit.lost() {
                return;
            }
            // The launcher tears the job down at once: first a moment for
            // it to forward this process's last lines, and for the peers
            // to take the `Abort` the process layer sent them and say why
            // they end.
            std::thread::sleep(ABORT_PAUSE);
            let code = crate::proc::exit::ABORT_EXIT_CODE;
            // SAFETY: a static message; no procs means the whole job. Not
            // under `calls`: the thread that failed may hold it.
            unsafe {
                (api.abort)(
                    code,
                    c"converse: the job is aborting".as_ptr(),
                    std::ptr::null_mut(),
                    0,
                )
            };
        });
        Ok(())
    }

    fn ending(&self) {}

    fn tell_ended(&self) {
        let _turn = crate::sync::lock(&self.calls);
        // SAFETY: no info; PMIx is initialized (by `placement`).
        let status = unsafe { (self.api.finalize)(std::ptr::null(), 0) };
        if let Err(e) = self.api.check(status, || "finalize".into()) {
            crate::proc::log::report!(ERROR, &format!("converse: process {}: {e}", self.me.rank));
        }
    }
}
