//! Conditions: numbered events that call the functions registered for them
//! (`CcdCallOnCondition` and friends).
//!
//! # Invariants
//!
//! - A PE's callback lists are its own (`RefCell` in `Pe`); callbacks run on
//!   the PE that registered them, with no borrow of the lists held, as
//!   handlers (so blocking helpers refuse to run in them).
//! - Raising a condition runs the callbacks registered *before* the raise:
//!   first every one-shot callback, in registration order, then every kept
//!   one, in registration order (see "Order"). The list is taken out first,
//!   and callbacks registered while it runs wait for the next raise.
//!   One-shot callbacks are dropped after their call; kept ones go back to
//!   the front of the list.
//! - Callback indices are unique on the PE (never reused), so cancelling an
//!   index that already ran, or ran once and was dropped, does nothing.
//!   Cancelling from inside a callback (which the manual forbids) works: a
//!   callback cancelled while its condition is being raised is skipped.
//!
//! # Order
//!
//! The manual does not say in which order a raise runs its callbacks.
//! Charm++ (`CcdRaiseCondition` in `src/conv-core/conv-conds.C`) keeps
//! one-shot and kept callbacks in two lists, appends each registration at
//! the tail, and walks the one-shot list (`call_cblist_remove`) and then
//! the kept list (`call_cblist_keep`), each from the head: one-shots
//! oldest first, then kept ones oldest first. We run them in the same
//! order, so that programs ported from C that depend on it (a one-shot
//! callback that prepares state a kept one reads, say) behave the same.
//! Registration order between the two kinds does not matter.
//!
//! Where we differ from Charm++: a callback registered during a raise never
//! runs in that raise. (In Charm++ a kept callback registered by a one-shot
//! callback, or by a kept one, of the same condition runs in the same
//! raise, since the kept list is walked after, or while, it grows.) And a
//! raise of the same condition from inside one of its callbacks runs only
//! what was registered since the outer raise began (Charm++ walks the whole
//! kept list again).
//!
//! # Concurrency
//!
//! No sharing, so no locking: the lists are per PE and touched only by its
//! thread (see the invariants).

pub(crate) use crate::ccd::state::Conditions;
pub(crate) use crate::ccd::state::PERIODIC_COUNT;
use crate::ccd::state::{Callback, CondList, Entry};
use crate::proc::exit::abort;
use crate::rt::pe::{self, Pe};

/// A condition number (`CcdPROCESSOR_BEGIN_IDLE`, …, `CcdUSER`…`CcdUSERMAX`).
///
/// The runtime raises the system conditions; [`Condition::user`] names the
/// ones left to the program, which it raises with
/// [`raise_condition`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct Condition(u16);

/// Intervals of the periodic conditions, `Condition::PERIODIC` first.
pub(crate) const PERIODIC_INTERVALS_MS: [u64; PERIODIC_COUNT] = [
    1,
    10,
    100,
    1_000,
    10_000,
    60_000,
    600_000,
    3_600_000,
    12 * 3_600_000,
    24 * 3_600_000,
];

impl Condition {
    /// Raised when the scheduler first finds nothing to do: the falling edge
    /// of the PE's utilisation.
    #[doc(alias = "CcdPROCESSOR_BEGIN_IDLE")]
    pub const PROCESSOR_BEGIN_IDLE: Condition = Condition(0);
    /// Raised each time an idle scheduler looks again and still finds
    /// nothing (at least every timer resolution, 5 ms by default, while
    /// callbacks for it are registered).
    #[doc(alias = "CcdPROCESSOR_STILL_IDLE")]
    pub const PROCESSOR_STILL_IDLE: Condition = Condition(1);
    /// Raised when work first arrives on an idle PE (before it runs): the
    /// rising edge.
    #[doc(alias = "CcdPROCESSOR_BEGIN_BUSY")]
    pub const PROCESSOR_BEGIN_BUSY: Condition = Condition(2);
    /// Raised every millisecond, as closely as the scheduler can (it does
    /// not interrupt a running handler).
    #[doc(alias = "CcdPERIODIC")]
    pub const PERIODIC: Condition = Condition(3);
    /// Raised every 10 ms.
    #[doc(alias = "CcdPERIODIC_10ms")]
    pub const PERIODIC_10MS: Condition = Condition(4);
    /// Raised every 100 ms.
    #[doc(alias = "CcdPERIODIC_100ms")]
    pub const PERIODIC_100MS: Condition = Condition(5);
    /// Raised every second.
    #[doc(alias = "CcdPERIODIC_1second")]
    pub const PERIODIC_1S: Condition = Condition(6);
    /// Raised every 10 seconds.
    #[doc(alias = "CcdPERIODIC_10second")]
    pub const PERIODIC_10S: Condition = Condition(7);
    /// Raised every minute.
    #[doc(alias = "CcdPERIODIC_1minute")]
    pub const PERIODIC_1MIN: Condition = Condition(8);
    /// Raised every 10 minutes.
    #[doc(alias = "CcdPERIODIC_10minute")]
    pub const PERIODIC_10MIN: Condition = Condition(9);
    /// Raised every hour.
    #[doc(alias = "CcdPERIODIC_1hour")]
    pub const PERIODIC_1HOUR: Condition = Condition(10);
    /// Raised every 12 hours.
    #[doc(alias = "CcdPERIODIC_12hour")]
    pub const PERIODIC_12HOUR: Condition = Condition(11);
    /// Raised every day.
    #[doc(alias = "CcdPERIODIC_1day")]
    pub const PERIODIC_1DAY: Condition = Condition(12);
    /// Raised when quiescence detection finds the job quiescent.
    /// Registering a callback for it starts a detection (one at a time per
    /// PE); the condition is raised on that PE when it completes.
    #[doc(alias = "CcdQUIESCENCE")]
    pub const QUIESCENCE: Condition = Condition(13);
    /// Raised, from the scheduler of every PE with callbacks for it, after the
    /// process receives SIGUSR1. The signal handler only counts the signal.
    #[doc(alias = "CcdSIGUSR1")]
    pub const SIGUSR1: Condition = Condition(14);
    /// As [`SIGUSR1`](Condition::SIGUSR1), for SIGUSR2.
    #[doc(alias = "CcdSIGUSR2")]
    pub const SIGUSR2: Condition = Condition(15);
    /// The first condition the runtime never raises.
    #[doc(alias = "CcdUSER")]
    pub const USER: Condition = Condition(16);
    /// The last user condition (inclusive).
    #[doc(alias = "CcdUSERMAX")]
    pub const USER_MAX: Condition = Condition(511);

    /// User condition number `k` (`CcdUSER + k`).
    ///
    /// # Panics
    /// If it would be past [`USER_MAX`](Condition::USER_MAX).
    pub fn user(k: usize) -> Condition {
        let n = Condition::USER.number() + k;
        Condition::from_number(n).unwrap_or_else(|| {
            panic!(
                "user condition {k} is past CcdUSERMAX (user conditions are 0..={})",
                Condition::USER_MAX.number() - Condition::USER.number()
            )
        })
    }

    /// The condition with this number, if there is one.
    pub fn from_number(n: usize) -> Option<Condition> {
        (n <= Condition::USER_MAX.number()).then_some(Condition(n as u16))
    }

    /// This condition's number.
    pub fn number(self) -> usize {
        usize::from(self.0)
    }

    /// Which periodic condition this is (0 for `PERIODIC`), if one.
    pub(crate) fn periodic_index(self) -> Option<usize> {
        let first = Condition::PERIODIC.number();
        (first..first + PERIODIC_COUNT)
            .contains(&self.number())
            .then(|| self.number() - first)
    }
}

impl Conditions {
    /// True if callbacks are registered for `cond`.
    pub fn has_callbacks(&self, cond: Condition) -> bool {
        self.lists
            .borrow()
            .get(cond.number())
            .is_some_and(|l| !l.entries.is_empty())
    }

    /// How many callbacks are registered for `cond`.
    pub fn count(&self, cond: Condition) -> usize {
        self.lists
            .borrow()
            .get(cond.number())
            .map_or(0, |l| l.entries.len())
    }

    fn add(&self, cond: Condition, callback: Callback) -> usize {
        let index = self.next_index.get();
        self.next_index.set(index + 1);
        let mut lists = self.lists.borrow_mut();
        if lists.len() <= cond.number() {
            lists.resize_with(cond.number() + 1, CondList::default);
        }
        lists[cond.number()].entries.push(Entry { index, callback });
        index
    }

    fn cancel(&self, cond: Condition, index: usize) {
        let removed = {
            let mut lists = self.lists.borrow_mut();
            lists.get_mut(cond.number()).and_then(|l| {
                let at = l.entries.iter().position(|e| e.index == index)?;
                Some(l.entries.remove(at))
            })
        };
        match removed {
            // Dropped with no borrow held: the closure's captures may do
            // anything in their destructors.
            Some(entry) => drop(entry),
            None if self.raising.get() > 0 => self.cancelled.borrow_mut().push(index),
            None => {}
        }
    }

    fn is_cancelled(&self, index: usize) -> bool {
        self.cancelled.borrow().contains(&index)
    }
}

fn check(cond: Condition) {
    // A `Condition` is always in range; this guards the C ABI later.
    if cond.number() > Condition::USER_MAX.number() {
        abort(&format!(
            "condition {} is past CcdUSERMAX ({})",
            cond.number(),
            Condition::USER_MAX.number()
        ));
    }
}

/// Calls `callback(wall_time)` on this PE the next time `cond` is raised,
/// once (`CcdCallOnCondition`). Returns an index for
/// [`cancel_call_on_condition`]. Registering for
/// [`Condition::QUIESCENCE`] starts quiescence detection.
///
/// Order: a raise runs the one-shot callbacks registered before it, oldest
/// first, and then the kept ones ([`call_on_condition_keep`]), oldest
/// first, as Charm++ does. A callback registered during a raise waits for
/// the next one (in Charm++ too, for one-shot callbacks).
///
/// One-shot callbacks do not hold quiescence detection, even on a periodic
/// condition: only [`call_fn_after`](crate::call_fn_after) timers do.
#[doc(alias = "CcdCallOnCondition")]
pub fn call_on_condition(cond: Condition, callback: impl FnOnce(f64) + 'static) -> usize {
    check(cond);
    pe::with(|pe| {
        let index = pe
            .ccd
            .conditions
            .add(cond, Callback::Once(Box::new(callback)));
        super::on_registered(pe, cond);
        index
    })
}

/// Calls `callback(wall_time)` on this PE every time `cond` is raised, until
/// cancelled (`CcdCallOnConditionKeep`). Returns an index for
/// [`cancel_call_on_condition`].
///
/// Order: in each raise, kept callbacks run after every one-shot callback
/// ([`call_on_condition`]), among themselves oldest first, as in Charm++.
/// A kept callback registered during a raise of `cond` first runs in the
/// next raise; Charm++ would run it in the same raise.
///
/// A kept callback, even on a periodic condition and registered forever,
/// does not hold quiescence detection.
#[doc(alias = "CcdCallOnConditionKeep")]
pub fn call_on_condition_keep(cond: Condition, callback: impl FnMut(f64) + 'static) -> usize {
    check(cond);
    pe::with(|pe| {
        let index = pe
            .ccd
            .conditions
            .add(cond, Callback::Keep(Box::new(callback)));
        super::on_registered(pe, cond);
        index
    })
}

/// Removes the callback with `index` from `cond`'s list
/// (`CcdCancelCallOnCondition`, `CcdCancelCallOnConditionKeep`); it will not
/// be called again. An index that is not (or no longer) registered is
/// ignored.
#[doc(alias = "CcdCancelCallOnCondition")]
#[doc(alias = "CcdCancelCallOnConditionKeep")]
pub fn cancel_call_on_condition(cond: Condition, index: usize) {
    check(cond);
    pe::with(|pe| {
        pe.ccd.conditions.cancel(cond, index);
        super::update_armed(pe);
    })
}

/// Calls, on this PE, every function registered for `cond` before this call
/// (`CcdRaiseCondition`): the one-shot ones, oldest first, then the kept
/// ones, oldest first (the module comment has the details). The runtime
/// raises the system conditions itself; user conditions are raised only by
/// this.
#[doc(alias = "CcdRaiseCondition")]
pub fn raise_condition(cond: Condition) {
    check(cond);
    raise(&pe::current(), cond);
}

/// Raises `cond` on `pe` (see the module comment for the order rules);
/// returns whether any callback was registered for it.
pub(crate) fn raise(pe: &Pe, cond: Condition) -> bool {
    let conds = &pe.ccd.conditions;
    let taken = {
        let mut lists = conds.lists.borrow_mut();
        match lists.get_mut(cond.number()) {
            Some(l) if !l.entries.is_empty() => std::mem::take(&mut l.entries),
            _ => return false,
        }
    };
    // Counted down when the raise ends, even if a callback unwinds.
    struct Raising<'a>(&'a Conditions);
    impl Drop for Raising<'_> {
        fn drop(&mut self) {
            let conds = self.0;
            conds.raising.set(conds.raising.get() - 1);
            if conds.raising.get() == 0 {
                conds.cancelled.borrow_mut().clear();
            }
        }
    }
    conds.raising.set(conds.raising.get() + 1);
    let raising = Raising(conds);
    let now = crate::proc::timer::wall_timer();
    // One-shots first, then kept ones, each kind in registration order
    // (Charm++'s order: see "Order").
    let (once, keep): (Vec<Entry>, Vec<Entry>) = taken
        .into_iter()
        .partition(|e| matches!(e.callback, Callback::Once(_)));
    let mut kept = Vec::new();
    for entry in once.into_iter().chain(keep) {
        if conds.is_cancelled(entry.index) {
            continue;
        }
        let _handler = pe.sched.enter_handler();
        match entry.callback {
            Callback::Once(f) => f(now),
            Callback::Keep(mut f) => {
                f(now);
                kept.push(Entry {
                    index: entry.index,
                    callback: Callback::Keep(f),
                });
            }
        }
    }
    kept.retain(|e| !conds.is_cancelled(e.index));
    {
        let mut lists = conds.lists.borrow_mut();
        let list = &mut lists[cond.number()];
        // Kept callbacks first (in registration order): they were
        // registered before any added during the raise.
        let added = std::mem::replace(&mut list.entries, kept);
        list.entries.extend(added);
    }
    drop(raising);
    super::update_armed(pe);
    true
}
