//! The balancing strategies: the [`Strategy`] trait a balancer implements,
//! the registry `+balancer NAME` chooses from, and the two simplest
//! strategies, `none` and `rand`.
//!
//! # Invariants
//!
//! - The registry is the process's: the built-in strategies, then those a
//!   program registered ([`register_strategy`]) before its job started;
//!   names are unique.
//! - Every PE of a job makes the same strategy (one flag for all), at the
//!   same place of its handler registrations ([`super::module_init`]), so
//!   a strategy's own handlers agree on every PE.
//!
//! # Concurrency
//!
//! The registry is behind a mutex, read once per PE at start-up; a
//! strategy object is its PE's own.
use std::cell::RefCell;
use std::sync::Mutex;

use converse::Message;
use converse::random::RandomStream;

use super::{Balancer, SeedInfo};

/// A seed-balancing strategy: what `CldEnqueue` does with seeds that may go
/// anywhere. One object per PE, made by the function given to
/// [`register_strategy`] in the PE's [`module_init`](super::module_init),
/// where it registers its handlers and its periodic or idle callbacks.
pub trait Strategy {
    /// Its name (`CldGetStrategy`).
    fn name(&self) -> &'static str;

    /// Places `seed`, given to [`Dest::Anywhere`](super::Dest::Anywhere) on
    /// a job of more than one PE: keep it movable while the pool has room
    /// ([`Balancer::keep`]) or always ([`Balancer::put_token`]), keep it for good
    /// ([`converse::enqueue_general`]) or send it for good
    /// ([`send_seed`](super::send_seed)). Its info slot already names its
    /// info function; `info` is what that function said.
    fn place(&self, cld: &Balancer, seed: Message, info: SeedInfo);

    /// Places a seed given to
    /// [`NodeDest::Anywhere`](super::NodeDest::Anywhere) on a job of more
    /// than one node. By default: this node's queue, which the node's PEs
    /// share.
    fn place_node(&self, _cld: &Balancer, seed: Message, info: SeedInfo) {
        converse::node_enqueue_general(seed, info.queueing);
    }

    /// Called after movable seeds from another PE were put in this PE's
    /// token queue (one call per seed).
    fn received(&self, _cld: &Balancer) {}
}

/// Makes a PE's strategy object: the strategy's part of the manual's
/// `CldModuleInit` (its handlers, its periodic work: the `CldBalance()` the
/// manual's skeleton calls there).
#[doc(alias = "CldBalance")]
pub type MakeStrategy = fn() -> Box<dyn Strategy>;

/// The strategy of a job without `+balancer`.
pub const DEFAULT_STRATEGY: &str = "workstealing";

const BUILT_IN: [(&str, MakeStrategy); 6] = [
    ("none", || Box::new(Local)),
    ("rand", make_random),
    ("neighbor", super::neighbor::make),
    ("workstealing", super::workstealing::make),
    ("ring", super::ring::make),
    // The manual's name for its sample balancer.
    ("test", super::ring::make),
];

static REGISTERED: Mutex<Vec<(&'static str, MakeStrategy)>> = Mutex::new(Vec::new());

/// Adds a strategy that `+balancer name` chooses (in the jobs this process
/// starts afterwards). Returns false, and changes nothing, if the name is
/// taken.
pub fn register_strategy(name: &'static str, make: MakeStrategy) -> bool {
    let mut reg = REGISTERED.lock().unwrap_or_else(|e| e.into_inner());
    if BUILT_IN.iter().any(|(n, _)| *n == name) || reg.iter().any(|(n, _)| *n == name) {
        return false;
    }
    reg.push((name, make));
    true
}

/// The names `+balancer` takes: the built-in strategies, then the
/// registered ones.
pub fn strategy_names() -> Vec<&'static str> {
    let reg = REGISTERED.lock().unwrap_or_else(|e| e.into_inner());
    BUILT_IN
        .iter()
        .map(|(n, _)| *n)
        .chain(reg.iter().map(|(n, _)| *n))
        .collect()
}

/// The calling PE's object of strategy `name`; an unknown name ends the
/// job with the list of names.
pub(super) fn make(name: &str) -> Box<dyn Strategy> {
    let found = BUILT_IN
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, m)| *m)
        .or_else(|| {
            let reg = REGISTERED.lock().unwrap_or_else(|e| e.into_inner());
            reg.iter().find(|(n, _)| *n == name).map(|(_, m)| *m)
        });
    match found {
        Some(make) => make(),
        None => converse::abort(&format!(
            "unknown +balancer `{name}`: the seed balancing strategies are {}",
            strategy_names().join(", ")
        )),
    }
}

/// `none`: a seed stays where it was made (`cldb.none.c`).
struct Local;

impl Strategy for Local {
    fn name(&self) -> &'static str {
        "none"
    }
    fn place(&self, _cld: &Balancer, seed: Message, info: SeedInfo) {
        converse::enqueue_general(seed, info.queueing);
    }
}

/// `rand`: a seed goes once to a PE drawn at random, this one included
/// (`cldb.rand.c`); a node seed to a random node.
struct Random {
    rng: RefCell<RandomStream>,
}

fn make_random() -> Box<dyn Strategy> {
    Box::new(Random {
        rng: RefCell::new(RandomStream::for_pe(converse::my_pe(), 0x5eed, 0)),
    })
}

impl Random {
    fn below(&self, n: usize) -> usize {
        (self.rng.borrow_mut().next_u64() % n as u64) as usize
    }
}

impl Strategy for Random {
    fn name(&self) -> &'static str {
        "rand"
    }
    fn place(&self, _cld: &Balancer, seed: Message, info: SeedInfo) {
        let pe = self.below(converse::num_pes());
        if pe == converse::my_pe() {
            converse::enqueue_general(seed, info.queueing);
        } else {
            super::send_seed(pe, seed);
        }
    }
    fn place_node(&self, _cld: &Balancer, seed: Message, info: SeedInfo) {
        let node = self.below(converse::num_nodes());
        if node == converse::my_node() {
            converse::node_enqueue_general(seed, info.queueing);
        } else {
            super::send_node_seed(node, seed);
        }
    }
}
