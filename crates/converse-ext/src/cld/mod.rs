//! Seed load balancing (the manual's chapter 7, `Cld`): [`enqueue`] a
//! message — a *seed* of work — to no PE in particular, and a balancer
//! places it where there is little to do, moving it again while it waits.
//!
//! # Using it
//!
//! A seed is an ordinary message with its handler set. The balancer learns
//! about it from an *info function* the program registers
//! ([`register_info_fn`], `CldRegisterInfoFn`): its length, its priority and
//! queueing ([`SeedInfo`]), and an optional *pack function* that turns a
//! seed's "short form" (say, with pointers into this process) into a "long
//! form" fit to leave the process. The balancer packs a seed only when it
//! leaves the process; seeds that stay, even on another PE of the same
//! process, go as they are.
//!
//! [`enqueue`] (`CldEnqueue`) takes a [`Dest`]: `Anywhere` gives the seed to
//! the balancer; `Pe(n)`, `Broadcast` and `BroadcastAll` send it there and
//! enqueue it with its priority, a prioritized send. [`node_enqueue`]
//! (`CldNodeEnqueue`) does the same with node queues.
//!
//! # Strategies
//!
//! The job's strategy is chosen at run time with `+balancer NAME` (an
//! unknown name ends the job with the list of names):
//! - `none`: seeds stay on the PE that made them;
//! - `rand`: each seed goes to a PE drawn at random, once;
//! - `neighbor`: seeds wait as tokens; PEs tell their neighbours in a
//!   virtual topology their load and move half the difference to a
//!   lighter one;
//! - `workstealing` (the default): seeds wait as tokens; an idle PE asks
//!   the others in turn for some;
//! - `ring` (the manual's `test`): every 100 ms each PE sends half its
//!   load to the next PE in a ring; the manual's worked example of writing
//!   a balancer, kept as such (see [`ring`]).
//!
//! The strategies that move waiting seeds (`neighbor`, `workstealing`,
//! `ring`) keep urgent work on every PE: a PE that gives seeds away gives
//! every other one of its most urgent ([`TokenQueue::take_spread`]); `rand`
//! places each seed once, whatever its priority, and `none` never moves
//! one.
//! A program adds its own with [`register_strategy`] and the
//! [`Strategy`] trait, using the facilities below as the manual's
//! `cldb.c` offers them: the token queue ([`put_token`], [`get_token`],
//! [`count_tokens`], [`load`]), [`multiple_send`], [`send_seed`],
//! [`switch_handler`] / [`restore_handler`].
//!
//! # Set-up
//!
//! The module's handlers must be registered on every PE in the same place:
//! call [`install`] once before the job starts (it registers
//! [`module_init`], `CldModuleInit`, as a module-init hook of the core).
//! Info and pack functions are registered on every PE in the same order,
//! like handlers.
//!
//! # The header's info slot
//!
//! A seed's info slot ([`Message::info`]) belongs to the balancer while it
//! holds the seed: the low [`XHANDLER_BITS`] bits keep the handler
//! [`switch_handler`] set aside (`CmiGetXHandler` in Converse), the 16
//! bits above the index of its info function (`CmiGetInfo`). The C ABI's
//! header names the two halves `xhdl` and `info`, Charm++'s fields.
//!
//! # Invariants
//!
//! - A seed given to [`enqueue`] runs exactly once, on one PE (or once per
//!   PE for the broadcasts), whatever the strategy moves.
//! - A seed put in the token queue has its own handler in its header and
//!   its info function in its info slot; a seed travelling between PEs has
//!   a Cld handler in its header and its own in the info slot.
//! - A pack function runs only on a seed about to leave the process.
//!
//! # Concurrency
//!
//! Each PE's balancer state is its own (a `Cpv`); seeds and the
//! strategies' requests travel as messages.
mod neighbor;
pub mod ring;
mod strategies;
pub mod tokens;
mod workstealing;

use std::cell::{Cell, OnceCell, RefCell};
use std::rc::Rc;

use converse::{Cpv, Message, Queueing};

pub use strategies::{DEFAULT_STRATEGY, MakeStrategy, Strategy, register_strategy, strategy_names};
pub use tokens::{TokenId, TokenQueue};

/// Where [`enqueue`] sends a seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dest {
    /// Any PE: the balancer places it (`CLD_ANYWHERE`).
    #[doc(alias = "CLD_ANYWHERE")]
    Anywhere,
    /// Every PE but the caller (`CLD_BROADCAST`).
    #[doc(alias = "CLD_BROADCAST")]
    Broadcast,
    /// Every PE, the caller included (`CLD_BROADCAST_ALL`).
    #[doc(alias = "CLD_BROADCAST_ALL")]
    BroadcastAll,
    /// PE `n`.
    Pe(usize),
}

/// Where [`node_enqueue`] sends a seed: as [`Dest`], with nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeDest {
    /// Any node (`CLD_ANYWHERE`).
    Anywhere,
    /// Every node but the caller's (`CLD_BROADCAST`).
    Broadcast,
    /// Every node (`CLD_BROADCAST_ALL`).
    BroadcastAll,
    /// Node `n`.
    Node(usize),
}

/// What an info function tells the balancer about a seed.
#[derive(Clone, Debug)]
pub struct SeedInfo {
    /// The seed's length in bytes (the C functions' `len`). The balancer
    /// moves whole messages; it sizes its parcels by this.
    pub len: usize,
    /// Its priority and queueing: where it goes in a scheduler queue
    /// (`queueing`, `priobits`, `prioptr` in C).
    pub queueing: Queueing,
    /// What turns it into a form that may leave the process; `None` when it
    /// has one form only.
    pub pack: Option<PackFn>,
}

impl SeedInfo {
    /// The info of `msg` at `queueing`, with no pack function.
    pub fn new(msg: &Message, queueing: Queueing) -> SeedInfo {
        SeedInfo {
            len: msg.len(),
            queueing,
            pack: None,
        }
    }

    /// The same, packed by `pack` when it leaves the process.
    pub fn with_pack(self, pack: PackFn) -> SeedInfo {
        SeedInfo {
            pack: Some(pack),
            ..self
        }
    }
}

/// An info function (`CldInfoFn`): what the balancer needs to know about a
/// seed.
#[doc(alias = "CldInfoFn")]
pub type InfoFn = fn(&Message) -> SeedInfo;

/// A pack function (`CldPackFn`): a seed's short form in, its long form
/// out (the same message changed, or another one). The C form gets a
/// pointer to the message pointer; here the message goes in and out.
#[doc(alias = "CldPackFn")]
pub type PackFn = fn(Message) -> Message;

/// Bits of the info slot that keep the switched-away handler: enough for
/// every handler index (`converse::msg::MAX_HANDLER_INDEX` is 2^16 - 1).
/// The low half of the slot, as the C ABI's header sees it: its `xhdl`
/// field (`CmiGetXHandler`), and the high half its `info`
/// (`CmiGetInfo`), 16 bits each as in Charm++.
pub const XHANDLER_BITS: u32 = 16;
const XHANDLER_MASK: u32 = (1 << XHANDLER_BITS) - 1;
/// Info functions a PE may register: what the info slot's top bits hold.
pub const MAX_INFO_FNS: usize = 1 << (32 - XHANDLER_BITS);

const _: () = assert!(converse::msg::MAX_HANDLER_INDEX < 1 << XHANDLER_BITS);

/// Most movable seeds (tokens) a PE holds when its strategy places seeds
/// ([`Balancer::keep`]); seeds beyond wait in the scheduler queue for good.
pub const MOVABLE_MAX: usize = 1024;

/// Seeds per parcel of [`multiple_send`], and bytes: a parcel is closed
/// when either is reached ("reasonably sized parcels").
const PARCEL_SEEDS: usize = 64;
const PARCEL_BYTES: usize = 64 << 10;

/// The registered info and pack functions of a PE.
#[derive(Default)]
struct Functions {
    info: RefCell<Vec<InfoFn>>,
    pack: RefCell<Vec<PackFn>>,
}

/// The calling PE's balancer state, made on first use (registering an
/// info function may come before [`module_init`]).
fn functions() -> Rc<Balancer> {
    module_general_init();
    Rc::clone(&CLD.get())
}

/// Registers an info function on the calling PE (`CldRegisterInfoFn`) and
/// returns its index, which [`enqueue`] takes. Register them on every PE
/// in the same order: the index travels with the seed.
///
/// # Panics
/// Aborts the job past [`MAX_INFO_FNS`] functions.
#[doc(alias = "CldRegisterInfoFn")]
pub fn register_info_fn(f: InfoFn) -> usize {
    let fns = functions();
    let mut info = fns.functions.info.borrow_mut();
    if info.len() == MAX_INFO_FNS {
        converse::abort(&format!(
            "CldRegisterInfoFn on PE {}: at most {MAX_INFO_FNS} info functions",
            converse::my_pe()
        ));
    }
    info.push(f);
    info.len() - 1
}

/// Registers a pack function on the calling PE (`CldRegisterPackFn`) and
/// returns its index: a seed may carry the index, and its info function
/// turn it back into the function with [`pack_fn`] (as the manual's example
/// does with `CmiHandlerToFunction`). Register them on every PE in the same
/// order.
#[doc(alias = "CldRegisterPackFn")]
pub fn register_pack_fn(f: PackFn) -> usize {
    let fns = functions();
    let mut pack = fns.functions.pack.borrow_mut();
    pack.push(f);
    pack.len() - 1
}

/// The pack function registered as `index` on the calling PE, if any.
pub fn pack_fn(index: usize) -> Option<PackFn> {
    functions().functions.pack.borrow().get(index).copied()
}

/// The info function registered as `index` on the calling PE, if any.
pub fn info_fn(index: usize) -> Option<InfoFn> {
    functions().functions.info.borrow().get(index).copied()
}

/// The info function of index `index`, or the job ends naming `what` and
/// where the index came from.
fn info_fn_or_abort(index: usize, what: &dyn Fn() -> String) -> InfoFn {
    functions().info_fn(index, what)
}

/// Swaps the seed's handler for `handler`, keeping its own in the info slot
/// (`CldSwitchHandler`): the balancer's handler then receives it where it
/// arrives, and [`restore_handler`] puts the seed's own back.
#[doc(alias = "CldSwitchHandler")]
pub fn switch_handler(msg: &mut Message, handler: usize) {
    let own = u32::try_from(msg.handler()).expect("a header's handler field is 32 bits");
    // Registered handlers are at most MAX_HANDLER_INDEX, which the mask
    // holds: a larger one is no handler, and would come back as another.
    if own > XHANDLER_MASK {
        converse::abort(&format!(
            "CldSwitchHandler: the seed's handler {own} is no handler index (at most {XHANDLER_MASK})"
        ));
    }
    msg.set_info((msg.info() & !XHANDLER_MASK) | (own & XHANDLER_MASK));
    msg.set_handler(handler);
}

/// Puts back the handler [`switch_handler`] set aside (`CldRestoreHandler`).
#[doc(alias = "CldRestoreHandler")]
pub fn restore_handler(msg: &mut Message) {
    msg.set_handler((msg.info() & XHANDLER_MASK) as usize);
}

/// Records `index` as the seed's info function, in the info slot's top
/// bits (the manual's `CmiSetInfo(msg, infofn)`).
pub fn set_info_fn(msg: &mut Message, index: usize) {
    debug_assert!(index < MAX_INFO_FNS);
    msg.set_info(((index as u32) << XHANDLER_BITS) | (msg.info() & XHANDLER_MASK));
}

/// The index of the seed's info function (`CmiGetInfo` of a seed).
pub fn info_fn_index(msg: &Message) -> usize {
    (msg.info() >> XHANDLER_BITS) as usize
}

/// What a seed's balancer counts on its PE (the manual's three status
/// variables).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Seeds this PE sent away with [`multiple_send`]
    /// (`CldRelocatedMessages`).
    #[doc(alias = "CldRelocatedMessages")]
    pub relocated_messages: u64,
    /// The strategy's own messages (load reports, requests) this PE sent
    /// (`CldLoadBalanceMessages`).
    #[doc(alias = "CldLoadBalanceMessages")]
    pub load_balance_messages: u64,
    /// Parcels [`multiple_send`] sent (`CldMessageChunks`); inside a
    /// process each seed is its own.
    #[doc(alias = "CldMessageChunks")]
    pub message_chunks: u64,
    /// Seeds that arrived here to be balanced further (tokens put by the
    /// balance handler).
    pub seeds_received: u64,
    /// Pack functions called on this PE.
    pub packs: u64,
}

/// One PE's balancer: the token queue and the balancer's handlers, the
/// registered info and pack functions, the strategy. A [`Strategy`] gets
/// it in its calls; everything else reaches it through the module's
/// functions.
pub struct Balancer {
    /// This PE and the job's PE count.
    me: usize,
    pes: usize,
    functions: Functions,
    /// Receives seeds sent to one PE, or broadcast: enqueues them for good
    /// (`CldHandler`).
    handler: Cell<usize>,
    /// Receives movable seeds ([`multiple_send`]): puts them in the token
    /// queue, room permitting ([`Balancer::keep`]; `CldBalanceHandler`).
    balance_handler: Cell<usize>,
    /// Receives seeds sent to a node: enqueues them in its node queue.
    node_handler: Cell<usize>,
    /// Runs a token: the seed it names, if still there.
    token_handler: Cell<usize>,
    tokens: RefCell<TokenQueue<Message>>,
    /// Token messages that ran, for the next tokens (no allocation per
    /// seed).
    token_pool: RefCell<Vec<Message>>,
    /// Token messages in the scheduler queue (put and not yet run): with
    /// the live tokens, tells how many are stale (see [`load`]).
    queued_tokens: Cell<usize>,
    strategy: OnceCell<Box<dyn Strategy>>,
    stats: Cell<Stats>,
}

static CLD: Cpv<Rc<Balancer>> = Cpv::new();

fn cld(what: &str) -> Rc<Balancer> {
    if !CLD.is_initialized() {
        converse::abort(&format!(
            "{what} on PE {} before cld::module_init (call cld::install before the job starts)",
            converse::my_pe()
        ));
    }
    Rc::clone(&CLD.get())
}

impl Balancer {
    /// The info function of index `index`, or the job ends naming `what`.
    fn info_fn(&self, index: usize, what: &dyn Fn() -> String) -> InfoFn {
        let info = self.functions.info.borrow();
        match info.get(index) {
            Some(f) => *f,
            None => converse::abort(&format!(
                "{} on PE {}: no info function {index} is registered here ({} are; register them on every PE in the same order)",
                what(),
                self.me,
                info.len()
            )),
        }
    }

    /// The number of seeds in this PE's token queue ([`count_tokens`]).
    pub fn count_tokens(&self) -> usize {
        self.tokens.borrow().count()
    }

    fn count(&self, f: impl FnOnce(&mut Stats)) {
        let mut s = self.stats.get();
        f(&mut s);
        self.stats.set(s);
    }

    fn strategy(&self) -> &dyn Strategy {
        match self.strategy.get() {
            Some(s) => s.as_ref(),
            None => converse::abort(&format!(
                "seed balancing on PE {} before cld::module_init chose a strategy (call cld::install before the job starts, or cld::module_init on every PE)",
                self.me
            )),
        }
    }

    /// Puts back the seed's own handler after it arrived from another PE;
    /// the handler came over the wire, so one that is reserved or the
    /// balancer's own (which would pass the seed around for ever) ends the
    /// job naming the sender.
    fn restore_arrived(&self, msg: &mut Message, what: &str) {
        restore_handler(msg);
        let h = msg.handler();
        let ours = [
            self.handler.get(),
            self.balance_handler.get(),
            self.node_handler.get(),
            self.token_handler.get(),
        ];
        if h == 0 || ours.contains(&h) {
            converse::abort(&format!(
                "{what} from PE {} on PE {} names handler {h} as its own, which is {}",
                msg.src_pe(),
                self.me,
                if h == 0 { "reserved" } else { "the balancer's" }
            ));
        }
    }

    /// Keeps a seed the strategy placed here: movable (a token, as
    /// [`put_token`](Balancer::put_token)) while this PE holds fewer than
    /// [`MOVABLE_MAX`] tokens, else enqueued for good at its priority. A
    /// PE running a breadth-first search may otherwise hold most of the
    /// tree as tokens, and choosing which to move grows with their number;
    /// a bounded pool is plenty to balance from, and it refills as its
    /// seeds run or move.
    pub fn keep(&self, seed: Message, queueing: Queueing) {
        if self.tokens.borrow().count() < MOVABLE_MAX {
            self.put_token(seed, queueing);
        } else {
            converse::enqueue_general(seed, queueing);
        }
    }

    /// Keeps `seed` (its handler its own, its info function in the info
    /// slot) as a token at priority `queueing` (what its info function
    /// says): [`put_token`] for a strategy that has just asked.
    pub fn put_token(&self, seed: Message, queueing: Queueing) {
        let id = self.tokens.borrow_mut().put(seed, queueing.clone());
        let mut token = self
            .token_pool
            .borrow_mut()
            .pop()
            .unwrap_or_else(|| Message::new(self.token_handler.get(), 8));
        token.payload_mut()[..8].copy_from_slice(&id.to_bytes());
        self.queued_tokens.set(self.queued_tokens.get() + 1);
        converse::enqueue_general(token, queueing);
    }

    /// A token's turn: run its seed if a balancer has not taken it.
    fn run_token(&self, token: Message) {
        let Some(id) = TokenId::from_bytes(token.payload()) else {
            converse::abort(&format!(
                "a malformed Cld token ({} bytes of payload, from PE {}) on PE {}",
                token.payload_len(),
                token.src_pe(),
                converse::my_pe()
            ));
        };
        let seed = self.tokens.borrow_mut().take(id);
        self.queued_tokens
            .set(self.queued_tokens.get().saturating_sub(1));
        {
            // Only the balancer's own tokens are reused: one that came from
            // elsewhere may carry flags a fresh local message must not.
            let mut pool = self.token_pool.borrow_mut();
            if pool.len() < 1024
                && token.payload_len() == 8
                && !token.is_shared()
                && token.header().flags == 0
            {
                pool.push(token);
            }
        }
        if let Some(seed) = seed {
            run_now(seed);
        }
    }
}

/// Runs `seed`'s handler now, on this PE.
fn run_now(seed: Message) {
    match converse::handler_of(&seed) {
        Some(h) => h(seed),
        None => converse::abort(&format!(
            "a Cld seed for handler {}, which is not registered on PE {}",
            seed.handler(),
            converse::my_pe()
        )),
    }
}

/// Sets up the token queue and the balancer's handlers on the calling PE
/// (`CldModuleGeneralInit`); [`module_init`] calls it before it starts the
/// strategy. Idempotent.
#[doc(alias = "CldModuleGeneralInit")]
pub fn module_general_init() {
    if CLD.is_initialized() {
        return;
    }
    let state = Rc::new(Balancer {
        me: converse::my_pe(),
        pes: converse::num_pes(),
        functions: Functions::default(),
        handler: Cell::new(0),
        balance_handler: Cell::new(0),
        node_handler: Cell::new(0),
        token_handler: Cell::new(0),
        tokens: RefCell::new(TokenQueue::new()),
        token_pool: RefCell::new(Vec::new()),
        queued_tokens: Cell::new(0),
        strategy: OnceCell::new(),
        stats: Cell::new(Stats::default()),
    });
    let s = Rc::clone(&state);
    state
        .handler
        .set(converse::register_handler(move |mut msg: Message| {
            s.restore_arrived(&mut msg, "a seed");
            let info = arrived_info(&msg, "a seed");
            converse::enqueue_general(msg, info.queueing);
        }));
    let s = Rc::clone(&state);
    state
        .balance_handler
        .set(converse::register_handler(move |mut msg: Message| {
            s.restore_arrived(&mut msg, "a movable seed");
            let info = arrived_info(&msg, "a movable seed");
            s.count(|c| c.seeds_received += 1);
            s.keep(msg, info.queueing);
            // Without a strategy (a balancer of the program's own, set up
            // by `module_general_init` alone) the seed just waits in the
            // token queue, as the manual's `CldBalanceHandler` leaves it.
            if let Some(strategy) = s.strategy.get() {
                strategy.received(&s);
            }
        }));
    let s = Rc::clone(&state);
    state
        .node_handler
        .set(converse::register_handler(move |mut msg: Message| {
            s.restore_arrived(&mut msg, "a node seed");
            let info = arrived_info(&msg, "a node seed");
            converse::node_enqueue_general(msg, info.queueing);
        }));
    let s = Rc::clone(&state);
    state
        .token_handler
        .set(converse::register_handler(move |token: Message| {
            s.run_token(token)
        }));
    CLD.initialize(state);
}

/// The info of a seed that arrived from another PE: its info function's
/// index came over the wire, so it is checked.
fn arrived_info(msg: &Message, what: &str) -> SeedInfo {
    let index = info_fn_index(msg);
    let f = info_fn_or_abort(index, &|| format!("{what} from PE {}", msg.src_pe()));
    f(msg)
}

/// Sets up seed balancing on the calling PE (`CldModuleInit`): the token
/// queue and handlers ([`module_general_init`]), then the strategy named by
/// `+balancer` ([`DEFAULT_STRATEGY`] without it), which registers its own
/// handlers and timers. Runs on every PE before the start function once
/// [`install`] registered it; idempotent.
#[doc(alias = "CldModuleInit")]
pub fn module_init() {
    module_general_init();
    let state = cld("CldModuleInit");
    if state.strategy.get().is_some() {
        return;
    }
    let name = converse::machine::runtime_flags()
        .balancer
        .unwrap_or_else(|| DEFAULT_STRATEGY.to_string());
    let strategy = strategies::make(&name);
    let _ = state.strategy.set(strategy);
}

/// Registers [`module_init`] with the core, so that every PE of the jobs
/// started afterwards runs it before the start function. Returns false if
/// it was registered already.
pub fn install() -> bool {
    converse::register_module_init("converse-ext cld", module_init)
}

/// The index of the handler that receives seeds sent to one PE or
/// broadcast, and enqueues them there for good (the manual's `CldHandler`,
/// registered as `CldHandlerIndex`). [`send_seed`] switches seeds to it.
#[doc(alias = "CldHandler")]
#[doc(alias = "CldHandlerIndex")]
pub fn handler_index() -> usize {
    cld("CldHandlerIndex").handler.get()
}

/// The index of the handler that receives movable seeds and puts them in
/// the token queue (the manual's `CldBalanceHandler`, registered as
/// `CldBalanceHandlerIndex`). [`multiple_send`] switches seeds to it.
#[doc(alias = "CldBalanceHandler")]
#[doc(alias = "CldBalanceHandlerIndex")]
pub fn balance_handler_index() -> usize {
    cld("CldBalanceHandlerIndex").balance_handler.get()
}

/// The name of the job's strategy (`CldGetStrategy`).
#[doc(alias = "CldGetStrategy")]
pub fn get_strategy() -> &'static str {
    cld("CldGetStrategy").strategy().name()
}

/// The calling PE's counters (see [`Stats`]).
pub fn stats() -> Stats {
    cld("cld::stats").stats.get()
}

/// Counts `n` messages a strategy sent for its own work (load reports,
/// requests) in [`Stats::load_balance_messages`].
pub fn count_balance_messages(n: u64) {
    cld("cld::count_balance_messages").count(|c| c.load_balance_messages += n);
}

/// Gives `msg`, a seed whose handler is set, to the balancer (`CldEnqueue`)
/// with the index of its info function (see [`register_info_fn`]): to be
/// placed anywhere ([`Dest::Anywhere`]) or sent to a PE or all PEs and
/// enqueued there with its priority. The message is consumed (the C
/// function frees it).
///
/// A broadcast of a seed that has a pack function, in a job of several
/// processes, sends the short form to this process's PEs and the packed
/// form to the others (two list sends, not the runtime's spanning-tree
/// broadcast), so only the copies that leave are packed.
///
/// # Panics
/// Aborts the job if `info_fn` is not registered or the PE does not exist.
#[doc(alias = "CldEnqueue")]
pub fn enqueue(dest: Dest, mut msg: Message, info_fn: usize) {
    let state = cld("CldEnqueue");
    let info = state.info_fn(info_fn, &|| "CldEnqueue".to_string())(&msg);
    set_info_fn(&mut msg, info_fn);
    let me = state.me;
    match dest {
        Dest::Anywhere if state.pes > 1 => state.strategy().place(&state, msg, info),
        Dest::Anywhere => converse::enqueue_general(msg, info.queueing),
        Dest::Pe(pe) if pe == me => converse::enqueue_general(msg, info.queueing),
        Dest::Pe(pe) => {
            check_pe(pe, "CldEnqueue");
            send_with(&state, pe, msg, info, state.handler.get());
        }
        Dest::Broadcast | Dest::BroadcastAll => {
            let n = state.pes;
            let local = converse::machine::process_pes();
            if local == (0..n) || info.pack.is_none() {
                // One form for everyone: the runtime's broadcast.
                let mut msg = msg;
                switch_handler(&mut msg, state.handler.get());
                if dest == Dest::Broadcast {
                    converse::sync_broadcast_and_free(msg);
                } else {
                    converse::sync_broadcast_all_and_free(msg);
                }
                return;
            }
            // The PEs of this process get the short form, the others the
            // packed one: a pack only for the copies that leave.
            let skip_me = dest == Dest::Broadcast;
            let (here, away): (Vec<usize>, Vec<usize>) = (0..n)
                .filter(|&pe| !(skip_me && pe == me))
                .partition(|pe| local.contains(pe));
            if !here.is_empty() {
                let mut copy = msg.to_owned_copy();
                switch_handler(&mut copy, state.handler.get());
                converse::sync_list_send_and_free(&here, copy);
            }
            let (mut packed, _) = pack_if(&state, msg, info, true);
            switch_handler(&mut packed, state.handler.get());
            converse::sync_list_send_and_free(&away, packed);
        }
    }
}

/// Sends the seed `seed` (its info function in its info slot, as
/// [`enqueue`] and the token queue leave it) to PE `pe`, to be enqueued
/// there for good with its priority: the manual's "specific PE" branch of
/// `CldEnqueue`, for strategies that place a seed once. Packs it if `pe` is
/// in another process.
pub fn send_seed(pe: usize, seed: Message) {
    let state = cld("cld::send_seed");
    check_pe(pe, "cld::send_seed");
    let index = info_fn_index(&seed);
    let info = info_fn_or_abort(index, &|| "cld::send_seed".to_string())(&seed);
    if pe == converse::my_pe() {
        converse::enqueue_general(seed, info.queueing);
    } else {
        send_with(&state, pe, seed, info, state.handler.get());
    }
}

/// Sends the node seed `seed` (its info function in its info slot) to node
/// `node`'s queue for good: [`send_seed`] for nodes. Packs it if the node is
/// in another process.
pub fn send_node_seed(node: usize, seed: Message) {
    let index = info_fn_index(&seed);
    node_enqueue(NodeDest::Node(node), seed, index);
}

fn check_pe(pe: usize, what: &str) {
    let n = converse::num_pes();
    if pe >= n {
        converse::abort(&format!(
            "{what} on PE {} to PE {pe}, which does not exist (the job has PEs 0..{n})",
            converse::my_pe()
        ));
    }
}

/// Packs (if the seed leaves the process), switches to `handler` and sends.
fn send_with(state: &Balancer, pe: usize, seed: Message, info: SeedInfo, handler: usize) {
    let leaving = !converse::machine::process_pes().contains(&pe);
    let (mut seed, _) = pack_if(state, seed, info, leaving);
    switch_handler(&mut seed, handler);
    converse::sync_send_and_free(pe, seed);
}

/// The seed ready to travel: packed if it is `leaving` the process and has
/// a pack function, its info asked again after packing (the pack may have
/// changed it), its info function kept in the info slot.
fn pack_if(state: &Balancer, seed: Message, info: SeedInfo, leaving: bool) -> (Message, SeedInfo) {
    match info.pack {
        Some(pack) if leaving => {
            let index = info_fn_index(&seed);
            let mut packed = pack(seed);
            set_info_fn(&mut packed, index);
            state.count(|c| c.packs += 1);
            let info = info_fn_or_abort(index, &|| "a pack function's result".to_string())(&packed);
            (packed, info)
        }
        _ => (seed, info),
    }
}

/// Gives `msg` to a node's queue through the balancer (`CldNodeEnqueue`):
/// as [`enqueue`], with nodes. Node seeds do not wait as tokens: a node
/// queue is already shared by the node's PEs.
///
/// # Panics
/// Aborts the job if `info_fn` is not registered or the node does not
/// exist.
#[doc(alias = "CldNodeEnqueue")]
pub fn node_enqueue(dest: NodeDest, mut msg: Message, info_fn: usize) {
    let state = cld("CldNodeEnqueue");
    let info = info_fn_or_abort(info_fn, &|| "CldNodeEnqueue".to_string())(&msg);
    set_info_fn(&mut msg, info_fn);
    let me = converse::my_node();
    let nodes = converse::num_nodes();
    let local = converse::machine::process_pes();
    match dest {
        NodeDest::Anywhere if nodes > 1 => state.strategy().place_node(&state, msg, info),
        NodeDest::Anywhere => converse::node_enqueue_general(msg, info.queueing),
        NodeDest::Node(n) if n == me => converse::node_enqueue_general(msg, info.queueing),
        NodeDest::Node(n) => {
            if n >= nodes {
                converse::abort(&format!(
                    "CldNodeEnqueue on PE {} to node {n}, which does not exist (the job has nodes 0..{nodes})",
                    converse::my_pe()
                ));
            }
            let leaving = !local.contains(&converse::node_first(n));
            let (mut msg, _) = pack_if(&state, msg, info, leaving);
            switch_handler(&mut msg, state.node_handler.get());
            converse::sync_node_send_and_free(n, msg);
        }
        NodeDest::Broadcast | NodeDest::BroadcastAll => {
            if local == (0..state.pes) || info.pack.is_none() {
                let mut msg = msg;
                switch_handler(&mut msg, state.node_handler.get());
                if dest == NodeDest::Broadcast {
                    converse::sync_node_broadcast_and_free(msg);
                } else {
                    converse::sync_node_broadcast_all_and_free(msg);
                }
                return;
            }
            // As for PEs: the short form inside the process, packed outside.
            let skip_me = dest == NodeDest::Broadcast;
            let mut short = msg.to_owned_copy();
            switch_handler(&mut short, state.node_handler.get());
            let (mut packed, _) = pack_if(&state, msg, info, true);
            switch_handler(&mut packed, state.node_handler.get());
            for node in (0..nodes).filter(|&n| !(skip_me && n == me)) {
                if local.contains(&converse::node_first(node)) {
                    converse::sync_node_send(node, &short);
                } else {
                    converse::sync_node_send(node, &packed);
                }
            }
        }
    }
}

/// Puts `seed` in the calling PE's token queue (`CldPutToken`): in its
/// scheduler queue at its priority, from where [`get_token`] can still take
/// it until it runs. Its handler must be its own and its info slot name its
/// info function ([`set_info_fn`]; [`enqueue`] does both).
#[doc(alias = "CldPutToken")]
pub fn put_token(seed: Message) {
    let state = cld("CldPutToken");
    let index = info_fn_index(&seed);
    let info = info_fn_or_abort(index, &|| "CldPutToken".to_string())(&seed);
    state.put_token(seed, info.queueing);
}

/// Takes the most urgent seed out of the calling PE's token queue, to move
/// it (`CldGetToken`); `None` when there is none.
#[doc(alias = "CldGetToken")]
pub fn get_token() -> Option<Message> {
    cld("CldGetToken").tokens.borrow_mut().get()
}

/// The number of seeds in the calling PE's token queue (`CldCountTokens`).
#[doc(alias = "CldCountTokens")]
pub fn count_tokens() -> usize {
    cld("CldCountTokens").tokens.borrow().count()
}

/// The calling PE's load (`CldLoad`): the length of its scheduler queue
/// (`CsdLength`), tokens included, less the tokens whose seeds were moved
/// away (their token messages wait in the queue to do nothing).
#[doc(alias = "CldLoad")]
pub fn load() -> usize {
    let state = cld("CldLoad");
    let stale = state
        .queued_tokens
        .get()
        .saturating_sub(state.tokens.borrow().count());
    converse::csd::length().saturating_sub(stale)
}

/// Moves up to `n` seeds from the calling PE's token queue to PE `pe`
/// (`CldMultipleSend`), where they wait as tokens again, still movable.
/// Takes them spread over the priorities (see
/// [`TokenQueue::take_spread`]). To another process it packs them and
/// sends them in parcels of at most 64 seeds or 64 KiB (`CmiMultipleSend`);
/// inside the process it hands each over as it is (a send there moves the
/// buffer, where a parcel would copy every seed twice). Returns how many it
/// moved.
#[doc(alias = "CldMultipleSend")]
pub fn multiple_send(pe: usize, n: usize) -> usize {
    let state = cld("CldMultipleSend");
    check_pe(pe, "CldMultipleSend");
    if pe == converse::my_pe() || n == 0 {
        return 0;
    }
    let seeds = state.tokens.borrow_mut().take_spread(n);
    let moved = seeds.len();
    let leaving = !converse::machine::process_pes().contains(&pe);
    let mut parcel: Vec<Message> = Vec::with_capacity(moved.min(PARCEL_SEEDS));
    let mut bytes = 0;
    let mut chunks = 0;
    for seed in seeds {
        let index = info_fn_index(&seed);
        let info = info_fn_or_abort(index, &|| "CldMultipleSend".to_string())(&seed);
        let (mut seed, info) = pack_if(&state, seed, info, leaving);
        switch_handler(&mut seed, state.balance_handler.get());
        if !leaving {
            // Inside the process a send hands the buffer over; a parcel
            // would copy every seed in, and each out again when its header
            // is written on arrival.
            converse::sync_send_and_free(pe, seed);
            chunks += 1;
            continue;
        }
        if !parcel.is_empty()
            && (parcel.len() == PARCEL_SEEDS || bytes + info.len.max(seed.len()) > PARCEL_BYTES)
        {
            send_parcel(pe, &mut parcel);
            chunks += 1;
            bytes = 0;
        }
        bytes += info.len.max(seed.len());
        parcel.push(seed);
    }
    if !parcel.is_empty() {
        send_parcel(pe, &mut parcel);
        chunks += 1;
    }
    state.count(|c| {
        c.relocated_messages += moved as u64;
        c.message_chunks += chunks;
    });
    moved
}

fn send_parcel(pe: usize, parcel: &mut Vec<Message>) {
    if parcel.len() == 1 {
        converse::sync_send_and_free(pe, parcel.pop().expect("one seed"));
    } else {
        let refs: Vec<&Message> = parcel.iter().collect();
        converse::multiple_send(pe, &refs);
        parcel.clear();
    }
}
