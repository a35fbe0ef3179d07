//! The manual's sample balancer (§7.3, its `test` balancer, here `ring`;
//! `+balancer test` names it too): every 100 ms each PE sends about half
//! its load to the next PE in a ring, whatever that PE's load. "Hopefully,
//! you won't actually use this for anything important!" — it is here as
//! the worked example of writing a balancer, and uses only what any
//! program can: the [`Strategy`] trait and the facilities of
//! [`crate::cld`].
//!
//! # Writing a balancer, step by step
//!
//! The manual's C balancer provides `CldEnqueue`, `CldHandler`,
//! `CldBalanceHandler` and `CldModuleInit`. Here the module keeps the
//! parts every balancer shares, and a strategy supplies only what differs:
//!
//! 1. **`CldGetStrategy`** is [`Strategy::name`].
//! 2. **`CldEnqueue`'s first branch** (`pe == CLD_ANYWHERE` on more than one
//!    PE) is [`Strategy::place`]: here, like the manual's, it puts the seed
//!    in the token queue ([`Balancer::keep`], which bounds the movable
//!    pool), where it stays movable. The other branches (a given PE, the
//!    broadcasts, one PE) and the info and pack calls are
//!    [`enqueue`](crate::cld::enqueue)'s, the same for every strategy.
//! 3. **`CldHandler` and `CldBalanceHandler`** are the module's: seeds sent
//!    with [`send_seed`](crate::cld::send_seed) are enqueued for good where
//!    they arrive; seeds sent with
//!    [`multiple_send`](crate::cld::multiple_send) become tokens again.
//! 4. **`CldModuleInit`** is the function registered with
//!    [`register_strategy`](crate::cld::register_strategy) (here
//!    [`make`]): it runs on every PE at start-up, after the module's own
//!    set-up, and registers the strategy's handlers and callbacks. The
//!    manual's `CldDistributeTokens` re-arms itself with `CcdCallFnAfter`;
//!    here it is a kept callback of the periodic condition
//!    `PERIODIC_100MS`, because a pending timer counts as work for
//!    quiescence detection in converse-rs and would keep a finished job
//!    from ever being quiescent.
//!
//! Its distribution step is the manual's: send `CldLoad() / 2` seeds, or
//! half the tokens when there are fewer tokens than that.
use std::rc::Rc;

use converse::{Condition, Message};

use crate::cld::{self, Balancer, SeedInfo, Strategy};

/// The ring balancer of one PE.
pub struct Ring {
    next: usize,
}

/// Makes the calling PE's ring balancer and starts its periodic
/// distribution (the manual's `CldModuleInit` of the `test` balancer).
pub fn make() -> Box<dyn Strategy> {
    let me = converse::my_pe();
    let n = converse::num_pes();
    let ring = Rc::new(Ring { next: (me + 1) % n });
    if n > 1 {
        let r = Rc::clone(&ring);
        converse::call_on_condition_keep(Condition::PERIODIC_100MS, move |_| r.distribute());
    }
    Box::new(Ring { next: ring.next })
}

impl Ring {
    /// The manual's `CldDistributeTokens`.
    #[doc(alias = "CldDistributeTokens")]
    pub fn distribute(&self) {
        let mut to_send = cld::load() / 2;
        if to_send > cld::count_tokens() {
            to_send = cld::count_tokens() / 2;
        }
        if to_send > 0 {
            cld::multiple_send(self.next, to_send);
        }
    }
}

impl Strategy for Ring {
    fn name(&self) -> &'static str {
        "ring"
    }
    fn place(&self, cld: &Balancer, seed: Message, info: SeedInfo) {
        cld.keep(seed, info.queueing);
    }
}
