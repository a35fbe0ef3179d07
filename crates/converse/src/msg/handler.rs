//! The per-PE handler table: handler index -> function.
//!
//! # Numbering
//!
//! Three registration methods share one table without ever colliding, because
//! each draws its indices from its own residue class modulo 3 (as Converse
//! does):
//!
//! | method | indices |
//! |---|---|
//! | [`register_handler`](crate::register_handler) (same order on every PE) | 1, 4, 7, … |
//! | [`register_handler_local`](crate::register_handler_local) | 2, 5, 8, … |
//! | [`register_handler_global`](crate::register_handler_global) (PE 0, then broadcast) | 3, 6, 9, … |
//!
//! [`number_handler`](crate::number_handler) installs a function at any index the
//! caller picks. Index 0 is reserved and never holds a handler, so a zeroed
//! header cannot name a valid handler.
//!
//! # Consistency check
//!
//! Each entry made by `register` keeps an identity: the `TypeId` of the
//! function or closure type (every closure expression has its own type, so the
//! same code registered on every PE yields the same identity) and its type
//! name for messages. `HandlerTable::registered_idents` lists them in
//! registration order; the job compares these lists between PEs (see
//! `rt::job`). A handler registered under a name
//! ([`register_handler_named`](crate::register_handler_named): one closure
//! type standing for many foreign functions, as the C ABI's) is identified
//! by that name as well.
//!
//! # Concurrency
//!
//! A table belongs to one PE and is only touched from that PE's thread; the
//! closures are `Rc`, so an entry is copied out of the table before its
//! handler runs and a handler may register further handlers (or replace
//! itself) while it runs.
//!
//! # Two kinds of entry
//!
//! An entry is a Rust closure ([`Handler`]) or a plain C function
//! ([`CHandler`]) that gets the message as the buffer C knows
//! (`MessageRaw::into_c_ptr`). The C kind is the C ABI's every handler:
//! stored as a function pointer, it runs without the closure's counted
//! reference, its dynamic call and the wrapper's own frame (25 instructions
//! of each self-send of a C program, callgrind, about a tenth of it).
use std::any::TypeId;
use std::ffi::c_void;
use std::rc::Rc;

use super::message::Message;
use super::message::MessageRaw as _;

/// A message handler as stored in the table. It receives, and owns, the
/// message (`CmiHandler`).
#[doc(alias = "CmiHandler")]
pub type Handler = Rc<dyn Fn(Message)>;

/// A C message handler, `void f(void *msg)`: it receives the message as
/// the buffer C knows (the header first, exclusive and writable, its size
/// `CmiSize`), and owns it (`CmiHandler` of the C ABI; see
/// [`register_c_handler`](crate::register_c_handler)).
pub type CHandler = extern "C-unwind" fn(*mut c_void);

/// One entry of the table.
#[derive(Clone)]
pub(crate) enum Entry {
    Closure(Handler),
    C(CHandler),
}

impl Entry {
    /// Runs the handler on `msg`, which it then owns.
    #[inline(always)]
    pub fn call(self, msg: Message) {
        match self {
            Entry::C(f) => f(msg.into_c_ptr().as_ptr().cast()),
            Entry::Closure(f) => f(msg),
        }
    }

    /// The handler as a closure (a C function wrapped in one).
    pub fn to_handler(&self) -> Handler {
        match self {
            Entry::Closure(f) => f.clone(),
            Entry::C(f) => {
                let f = *f;
                Rc::new(move |msg: Message| Entry::C(f).call(msg))
            }
        }
    }
}

/// Largest handler index a table accepts; the table's size is proportional to
/// its largest index, so the manual's "do not use big numbers" is enforced.
/// 2^16 - 1, Charm++'s limit too (its header's handler fields are 16-bit):
/// a handler set aside in a message's info slot (`CmiSetXHandler`, the
/// seed balancer's `CldSwitchHandler`) takes 16 bits of it, so the C ABI's
/// `xhdl` and `info` are separate fields, as in Charm++.
pub const MAX_HANDLER_INDEX: usize = (1 << 16) - 1;

/// The identity of a registered handler function, compared between PEs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HandlerIdent {
    pub type_id: TypeId,
    /// 0 for a function or closure known by its type; for one registered
    /// under a name (`register_handler_named`: a foreign function behind
    /// one closure type), a hash of that name, the same in every process.
    pub key: u64,
    pub name: &'static str,
    /// Where it was registered (`#[track_caller]`), if known: what tells
    /// two closures of one function apart in a report (their type names
    /// are both `f::{{closure}}`). Not part of the identity.
    pub at: Option<&'static std::panic::Location<'static>>,
}

impl HandlerIdent {
    pub fn of<F: 'static>() -> HandlerIdent {
        HandlerIdent {
            type_id: TypeId::of::<F>(),
            key: 0,
            name: std::any::type_name::<F>(),
            at: None,
        }
    }

    /// This identity, registered at `at`.
    pub fn at(self, at: &'static std::panic::Location<'static>) -> HandlerIdent {
        HandlerIdent {
            at: Some(at),
            ..self
        }
    }

    /// Its name, and where it was registered if known, for a report.
    pub fn described(&self) -> String {
        match self.at {
            Some(at) => format!("{} (registered at {at})", self.name),
            None => self.name.to_string(),
        }
    }

    /// The identity of a handler of closure type `F` standing for the
    /// function called `name`.
    pub fn named<F: 'static>(name: &str) -> HandlerIdent {
        use std::hash::{Hash, Hasher};
        // `DefaultHasher::new` has fixed keys: the same hash in every process.
        let mut h = std::collections::hash_map::DefaultHasher::new();
        name.hash(&mut h);
        HandlerIdent {
            type_id: TypeId::of::<F>(),
            // Never 0, the mark of an unnamed handler.
            key: h.finish() | 1,
            name: intern(name),
            at: None,
        }
    }

    /// True when the two identities name the same handler.
    pub fn same(&self, other: &HandlerIdent) -> bool {
        self.type_id == other.type_id && self.key == other.key
    }
}

/// `name` as a string that lives as long as the process: each distinct
/// name is kept once (a program registers a bounded set of functions).
fn intern(name: &str) -> &'static str {
    static NAMES: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let mut names = crate::sync::lock(&NAMES);
    if let Some(kept) = names.iter().find(|n| **n == name) {
        return kept;
    }
    let kept: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.push(kept);
    kept
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Registered = 1,
    Local = 2,
    Global = 3,
}

/// One PE's handler table.
pub(crate) struct HandlerTable {
    entries: Vec<Option<Entry>>,
    /// Next index of each class; see the module comment.
    next: [usize; 3],
    /// Identities of the `register` entries, in order (the k-th is at 3k+1).
    registered: Vec<HandlerIdent>,
}

impl HandlerTable {
    pub fn new() -> HandlerTable {
        HandlerTable {
            entries: Vec::new(),
            next: [
                Class::Registered as usize,
                Class::Local as usize,
                Class::Global as usize,
            ],
            registered: Vec::new(),
        }
    }

    fn take_index(&mut self, class: Class) -> usize {
        let slot = &mut self.next[class as usize - 1];
        let index = *slot;
        *slot += 3;
        index
    }

    pub fn register(&mut self, f: Entry, ident: HandlerIdent) -> usize {
        let index = self.take_index(Class::Registered);
        self.registered.push(ident);
        self.install(index, f);
        index
    }

    pub fn register_local(&mut self, f: Entry) -> usize {
        let index = self.take_index(Class::Local);
        self.install(index, f);
        index
    }

    pub fn register_global(&mut self, f: Entry) -> usize {
        let index = self.take_index(Class::Global);
        self.install(index, f);
        index
    }

    /// Installs `f` at `index`, replacing what was there.
    ///
    /// # Panics
    /// If `index` is 0 (reserved) or above [`MAX_HANDLER_INDEX`].
    pub fn number(&mut self, index: usize, f: Entry) {
        assert!(
            index != 0,
            "handler index 0 is reserved and cannot be numbered"
        );
        assert!(
            index <= MAX_HANDLER_INDEX,
            "handler index {index} exceeds the largest allowed index {MAX_HANDLER_INDEX}"
        );
        self.install(index, f);
    }

    fn install(&mut self, index: usize, f: Entry) {
        if self.entries.len() <= index {
            self.entries.resize(index + 1, None);
        }
        self.entries[index] = Some(f);
    }

    /// The function at `index`, if one is installed.
    #[inline]
    pub fn get(&self, index: usize) -> Option<&Entry> {
        self.entries.get(index)?.as_ref()
    }

    pub fn registered_idents(&self) -> &[HandlerIdent] {
        &self.registered
    }
}

/// The table index of the k-th `register` entry.
pub(crate) fn registered_index(k: usize) -> usize {
    3 * k + Class::Registered as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h() -> Entry {
        Entry::Closure(Rc::new(|_m: Message| {}))
    }

    #[test]
    fn classes_never_collide_and_zero_is_reserved() {
        let mut t = HandlerTable::new();
        let a = t.register(h(), HandlerIdent::of::<u8>());
        let b = t.register_local(h());
        let c = t.register_global(h());
        let d = t.register(h(), HandlerIdent::of::<u16>());
        assert_eq!((a, b, c, d), (1, 2, 3, 4));
        assert!(t.get(0).is_none());
        assert!(t.get(5).is_none());
        assert!(t.get(1000).is_none());
        assert_eq!(registered_index(1), 4);
        assert_eq!(t.registered_idents().len(), 2);
    }

    #[test]
    fn number_replaces() {
        let mut t = HandlerTable::new();
        let a = t.register(h(), HandlerIdent::of::<u8>());
        let first = t.get(a).unwrap().to_handler();
        t.number(a, h());
        assert!(!Rc::ptr_eq(&first, &t.get(a).unwrap().to_handler()));
        t.number(40, h());
        assert!(t.get(40).is_some());
    }

    thread_local! {
        static SEEN: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    /// A C handler: reads the word after the header and frees the buffer
    /// it owns.
    extern "C-unwind" fn c_handler(msg: *mut c_void) {
        let ptr = std::ptr::NonNull::new(msg.cast::<u8>()).expect("a buffer");
        // SAFETY: the buffer `into_c_ptr` gave this call, with its one
        // reference; a header and 8 bytes long.
        let m = unsafe { Message::from_c_ptr(ptr, super::super::MSG_HEADER_SIZE + 8) }
            .expect("within the buffer");
        let word = u64::from_le_bytes(m.payload()[..8].try_into().unwrap());
        SEEN.with(|s| s.set(word));
    }

    fn message(word: u64) -> Message {
        let mut m = Message::new(1, 8);
        m.payload_mut().copy_from_slice(&word.to_le_bytes());
        m
    }

    #[test]
    fn a_c_entry_gets_the_c_buffer_and_its_closure_form_too() {
        let mut t = HandlerTable::new();
        let a = t.register(
            Entry::C(c_handler),
            HandlerIdent::named::<CHandler>("c_handler"),
        );
        t.get(a).expect("registered").clone().call(message(7));
        assert_eq!(SEEN.with(|s| s.get()), 7);
        t.get(a).expect("registered").to_handler()(message(9));
        assert_eq!(SEEN.with(|s| s.get()), 9);
        // A closure may replace it, and the other way round.
        t.number(a, h());
        assert!(matches!(t.get(a), Some(Entry::Closure(_))));
        t.number(a, Entry::C(c_handler));
        assert!(matches!(t.get(a), Some(Entry::C(_))));
    }

    #[test]
    #[should_panic(expected = "index 0 is reserved")]
    fn number_zero_panics() {
        HandlerTable::new().number(0, h());
    }
}
