//! Reductions over array elements ([`reduce`], `CPathReduce`) and their
//! reducers ([`register_reducer`], `CPathRegisterReducer`).
//!
//! # Protocol
//!
//! A reduction round is named by the over-array, the over-pattern, the
//! tags and the round number (an element's k-th contribution under that
//! name is in round k). On each PE, the contributions of its participating
//! elements (how many: the pattern's layout, from the mapper) are combined
//! into one *partial*; a complete partial goes to the *root*, the PE of the
//! pattern's first element (row-major), which combines one partial from
//! each PE holding participants and delivers the result, as a message with
//! the reduction's tags, to the destination element(s). Every contribution
//! of a round must agree on the reducer, the vecsize and eltsize and the
//! destination; a disagreement aborts the job naming both contributors.
//! A reducer registered for values of a type ([`register_reducer_of`])
//! takes only that type's size as eltsize.
//!
//! The root checks a partial's descriptors against those it knows (before
//! computing any layout from them), that it is the root (one mapper call)
//! and that the destination maps to PEs of the job, so a malformed partial
//! aborts naming its sender, never later at the delivery of the result.
//!
//! A reduction that can never complete is reported where a PE can see it:
//! an element of this PE that returns while a round it did not contribute
//! to waits for it, or the first contribution to a round of this PE while
//! another participant of this PE has already returned.
use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;

use converse::Message;

use super::msg::{Kind, check_sent_tags, deliver};
use super::wire::{Cause, Reader, Writer};
use super::{
    ArrayId, CPath, Current, Origin, State, check_known, current_or_abort, known, layout,
    malformed, mapped_pe, show_pattern, state, try_layout, with_current,
};

/// A reducer (the manual's `ReduceFn`): combines `other` into `acc`
/// pairwise, both `vecsize` values of the reduction's `eltsize` bytes
/// (`acc.len() == other.len() == vecsize * eltsize`).
pub type ReduceFn = fn(vecsize: usize, acc: &mut [u8], other: &[u8]);

/// A registered reducer, as the PE keeps it (a [`ReduceFn`], or a typed
/// one wrapped by [`register_reducer_of`], with its type's size).
#[derive(Clone)]
pub(super) struct Reducer {
    combine: Combine,
    /// The only eltsize it takes (a typed reducer), if any.
    eltsize: Option<usize>,
}

/// A reducer's function, as kept.
type Combine = Rc<dyn Fn(usize, &mut [u8], &[u8])>;

/// Checks `reducer` is registered and takes values of `eltsize` bytes.
fn check_reducer(s: &State, reducer: usize, eltsize: usize) -> Result<(), String> {
    match s.reducers.borrow().get(reducer) {
        None => Err(format!("reducer {reducer} is not registered")),
        Some(Reducer {
            eltsize: Some(size),
            ..
        }) if *size != eltsize => Err(format!(
            "reducer {reducer} combines values of {size} bytes, not {eltsize}"
        )),
        Some(_) => Ok(()),
    }
}

/// Built-in reducer: wrapping sum of `i64`s.
pub const REDUCER_SUM_I64: usize = 0;
/// Built-in reducer: sum of `f64`s (exact only for exactly representable
/// sums: the order of combination is not fixed).
pub const REDUCER_SUM_F64: usize = 1;
/// Built-in reducer: minimum of `i64`s.
pub const REDUCER_MIN_I64: usize = 2;
/// Built-in reducer: maximum of `i64`s.
pub const REDUCER_MAX_I64: usize = 3;

/// A fixed-size value that reductions carry as little-endian bytes (for
/// [`register_reducer_of`], [`ReduceBuilder::data_of`] and
/// [`CPathMsg::decode_reduction_of`](super::CPathMsg::decode_reduction_of)).
pub trait ReduceElement: Copy + 'static {
    /// Its size in bytes (the reduction's eltsize).
    const SIZE: usize;
    /// The value in `bytes` (exactly [`SIZE`](ReduceElement::SIZE) of
    /// them).
    fn read(bytes: &[u8]) -> Self;
    /// Writes the value into `out` (exactly [`SIZE`](ReduceElement::SIZE)
    /// bytes).
    fn write(self, out: &mut [u8]);
}

macro_rules! reduce_element {
    ($($t:ty),*) => {$(
        impl ReduceElement for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn read(bytes: &[u8]) -> Self {
                let mut b = [0; std::mem::size_of::<$t>()];
                b.copy_from_slice(bytes);
                <$t>::from_le_bytes(b)
            }
            fn write(self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}
reduce_element!(i32, i64, u32, u64, f32, f64);

/// Registers the built-in reducers, in the order of their constants.
pub(super) fn register_builtin() {
    let builtin: [(usize, usize); 4] = [
        (
            REDUCER_SUM_I64,
            register_reducer_of::<i64>(|a, b| *a = a.wrapping_add(b)),
        ),
        (REDUCER_SUM_F64, register_reducer_of::<f64>(|a, b| *a += b)),
        (
            REDUCER_MIN_I64,
            register_reducer_of::<i64>(|a, b| *a = (*a).min(b)),
        ),
        (
            REDUCER_MAX_I64,
            register_reducer_of::<i64>(|a, b| *a = (*a).max(b)),
        ),
    ];
    for (want, got) in builtin {
        debug_assert_eq!(got, want);
    }
}

/// Registers a reducer (`CPathRegisterReducer`) and returns its number,
/// for [`ReduceBuilder::reducer`]. Register the same reducers in the same
/// order on every PE; the built-in ones come first.
#[doc(alias = "CPathRegisterReducer")]
pub fn register_reducer(reducer: ReduceFn) -> usize {
    push_reducer(Reducer {
        combine: Rc::new(reducer),
        eltsize: None,
    })
}

/// Registers a reducer of values of `T`, `combine(acc, other)` applied to
/// each pair (a typed [`register_reducer`]); returns its number. Use it
/// with reductions whose eltsize is `T`'s size
/// ([`ReduceBuilder::data_of`]); a contribution (or a partial) of another
/// eltsize aborts the job.
pub fn register_reducer_of<T: ReduceElement>(combine: fn(&mut T, T)) -> usize {
    push_reducer(Reducer {
        combine: Rc::new(move |_vecsize, acc: &mut [u8], other: &[u8]| {
            for (a, b) in acc
                .chunks_exact_mut(T::SIZE)
                .zip(other.chunks_exact(T::SIZE))
            {
                let mut x = T::read(a);
                combine(&mut x, T::read(b));
                x.write(a);
            }
        }),
        eltsize: Some(T::SIZE),
    })
}

fn push_reducer(f: Reducer) -> usize {
    let s = state();
    let mut r = s.reducers.borrow_mut();
    r.push(f);
    r.len() - 1
}

/// One round of one reduction.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct RoundKey {
    array: ArrayId,
    over: Vec<u32>,
    tags: Vec<i32>,
    round: u64,
}

/// A combination in progress (or one contribution, or a PE's partial).
struct Partial {
    reducer: usize,
    vecsize: usize,
    eltsize: usize,
    dest: (CPath, Vec<u32>),
    acc: Vec<u8>,
    /// Contributions combined in it (elements on a PE; PEs at the root).
    count: usize,
    /// The PEs whose partials it holds (at the root).
    pes: BTreeSet<usize>,
    /// Its first contributor, for messages.
    first: First,
}

/// A partial's first contributor (words made only for an abort).
#[derive(Clone, Copy)]
enum First {
    /// Element number `flat` of the over-array, on PE `pe`.
    Element { flat: usize, pe: usize },
    /// The partial of PE `pe`.
    Pe(usize),
}

impl First {
    fn show(self, over_path: &CPath) -> String {
        match self {
            First::Element { flat, pe } => format!(
                "element {:?} on PE {pe}",
                over_path.indices_of(flat).unwrap_or_default()
            ),
            First::Pe(pe) => format!("PE {pe}"),
        }
    }
}

/// A PE's reductions in progress.
#[derive(Default)]
pub(super) struct Reductions {
    /// Combining this PE's elements' contributions.
    local: RefCell<HashMap<RoundKey, Partial>>,
    /// Combining PEs' partials, on the root.
    root: RefCell<HashMap<RoundKey, Partial>>,
}

impl Reductions {
    /// Rounds in progress on this PE (locally or at the root).
    pub(super) fn len(&self) -> usize {
        self.local.borrow().len() + self.root.borrow().len()
    }
}

/// A contribution being put together for [`reduce`] (`CPathReduce`'s
/// clauses).
#[must_use = "a contribution is made by .contribute()"]
#[derive(Debug, Default)]
pub struct ReduceBuilder<'a> {
    over: Option<(&'a CPath, &'a [u32])>,
    tags: Vec<i32>,
    reducer: Option<usize>,
    data: Option<(usize, usize, Cow<'a, [u8]>)>,
    dest: Option<(&'a CPath, &'a [u32])>,
}

/// Starts the calling element's contribution to a reduction
/// (`CPathReduce`): `reduce().over(&path, &[row, CPATH_ALL]).tag(t)
/// .reducer(REDUCER_SUM_I64).data_of(&[v]).dest(&path, &[row, 0])
/// .contribute()`. Every element matching the over-pattern must
/// contribute, with the same tags, reducer, sizes and destination; the
/// result arrives as a message with those tags ([`super::recv`],
/// [`CPathMsg::decode_reduction`](super::CPathMsg::decode_reduction)).
/// Contributing does not block.
#[doc(alias = "CPathReduce")]
pub fn reduce<'a>() -> ReduceBuilder<'a> {
    ReduceBuilder::default()
}

impl<'a> ReduceBuilder<'a> {
    /// The participants (`CPATH_OVER, path, i, …`): the elements of
    /// `path` matching `indices`, which hold [`CPATH_ALL`](super::CPATH_ALL)s.
    #[doc(alias = "CPATH_OVER")]
    pub fn over(mut self, path: &'a CPath, indices: &'a [u32]) -> Self {
        self.over = Some((path, indices));
        self
    }

    /// Appends one tag (`CPATH_TAG, t`).
    #[doc(alias = "CPATH_TAG")]
    pub fn tag(mut self, tag: i32) -> Self {
        self.tags.push(tag);
        self
    }

    /// Appends tags (`CPATH_TAGS`, `CPATH_TAGVEC`).
    #[doc(alias = "CPATH_TAGS")]
    #[doc(alias = "CPATH_TAGVEC")]
    pub fn tags(mut self, tags: &[i32]) -> Self {
        self.tags.extend_from_slice(tags);
        self
    }

    /// The reducer's number (`CPATH_REDUCER, fn`).
    #[doc(alias = "CPATH_REDUCER")]
    pub fn reducer(mut self, reducer: usize) -> Self {
        self.reducer = Some(reducer);
        self
    }

    /// The contribution (`CPATH_BYTES, vecsize, eltsize, data`): `vecsize`
    /// values of `eltsize` bytes.
    #[doc(alias = "CPATH_BYTES")]
    pub fn bytes(mut self, vecsize: usize, eltsize: usize, data: &'a [u8]) -> Self {
        self.data = Some((vecsize, eltsize, Cow::Borrowed(data)));
        self
    }

    /// The contribution as values of `T` (vecsize `values.len()`, eltsize
    /// `T::SIZE`).
    pub fn data_of<T: ReduceElement>(mut self, values: &[T]) -> Self {
        let mut bytes = vec![0; values.len() * T::SIZE];
        for (v, out) in values.iter().zip(bytes.chunks_exact_mut(T::SIZE)) {
            v.write(out);
        }
        self.data = Some((values.len(), T::SIZE, Cow::Owned(bytes)));
        self
    }

    /// The recipient(s) of the result (`CPATH_DEST, path, i, …`; may hold
    /// [`CPATH_ALL`](super::CPATH_ALL)s: a multicast).
    #[doc(alias = "CPATH_DEST")]
    pub fn dest(mut self, path: &'a CPath, indices: &'a [u32]) -> Self {
        self.dest = Some((path, indices));
        self
    }

    /// Contributes (`CPATH_END`).
    ///
    /// # Panics
    /// Aborts the job if a clause is missing or wrong (indices that do not
    /// fit, an unregistered reducer, data of another length than vecsize ×
    /// eltsize, a [`CPATH_WILD`](super::CPATH_WILD) tag), outside the thread
    /// of an element of the over-pattern, or when another participant gave
    /// another reducer, sizes or destination.
    #[doc(alias = "CPATH_END")]
    pub fn contribute(self) {
        const WHAT: &str = "CPathReduce";
        let s = state();
        let me = converse::my_pe();
        let fail = |why: &str| -> ! { converse::abort(&format!("{WHAT} on PE {me}: {why}")) };
        let Some((over_path, over)) = self.over else {
            fail("no participants (.over)")
        };
        let Some((dest_path, dest)) = self.dest else {
            fail("no destination (.dest)")
        };
        let Some(reducer) = self.reducer else {
            fail("no reducer (.reducer)")
        };
        let Some((vecsize, eltsize, data)) = self.data else {
            fail("no data (.bytes)")
        };
        check_sent_tags(&self.tags, WHAT);
        if vecsize.checked_mul(eltsize) != Some(data.len()) {
            fail(&format!(
                "{} bytes of data for {vecsize} values of {eltsize} bytes",
                data.len()
            ));
        }
        if let Err(why) = check_reducer(&s, reducer, eltsize) {
            fail(&why);
        }
        if let Err(why) = over_path
            .check(&s)
            .and_then(|()| dest_path.check(&s))
            .and_then(|()| check_known(&s, over_path))
            .and_then(|()| check_known(&s, dest_path))
            .and_then(|()| over_path.check_pattern(over))
            .and_then(|()| dest_path.check_pattern(dest))
        {
            fail(&why);
        }
        let cur = current_or_abort(WHAT);
        if cur.path != *over_path || !CPath::pattern_matches(over, &cur.indices) {
            fail(&format!(
                "element {:?} of {} is not one of {} of {over_path}",
                cur.indices,
                cur.path,
                show_pattern(over)
            ));
        }
        let round = with_current(&s, &cur, |e| {
            let next = e
                .rounds
                .entry((over.to_vec(), self.tags.clone()))
                .or_insert(0);
            *next += 1;
            *next - 1
        });
        let key = RoundKey {
            array: over_path.id(),
            over: over.to_vec(),
            tags: self.tags,
            round,
        };
        let layout = layout(&s, over_path, over);
        let here = layout.by_pe.get(&me).map_or(1, Vec::len);
        let mine = Partial {
            reducer,
            vecsize,
            eltsize,
            dest: (dest_path.clone(), dest.to_vec()),
            acc: data.into_owned(),
            count: 1,
            pes: BTreeSet::new(),
            first: First::Element {
                flat: cur.flat,
                pe: me,
            },
        };
        if here > 1 && !s.reductions.local.borrow().contains_key(&key) {
            // The round's first contribution here: a participant of this
            // PE that has returned can never give its own.
            let mine = layout.by_pe.get(&me).map_or(&[][..], Vec::as_slice);
            check_gone(&s, over_path, &key, mine);
        }
        let Some(mut done) = merge(&s, &s.reductions.local, over_path, &key, mine, here) else {
            return;
        };
        // This PE's partial, for the root.
        done.count = 1;
        done.pes = BTreeSet::from([me]);
        done.first = First::Pe(me);
        if layout.root == me {
            at_root(&s, over_path, key, done);
            return;
        }
        let mut w = Writer::default();
        w.path(over_path)
            .u32s(&key.over)
            .i32s(&key.tags)
            .u64(key.round)
            .u32(done.reducer as u32)
            .u64(done.vecsize as u64)
            .u64(done.eltsize as u64)
            .path(&done.dest.0)
            .u32s(&done.dest.1)
            .bytes(&done.acc);
        converse::sync_send_and_free(layout.root, Message::from_payload(s.handlers.partial, &w.0));
    }
}

/// Combines `incoming` into the round `key` of `table`; returns the
/// combination once it holds `expected` contributions (and leaves the
/// table), else keeps it there. Aborts on a disagreement.
fn merge(
    s: &State,
    table: &RefCell<HashMap<RoundKey, Partial>>,
    over_path: &CPath,
    key: &RoundKey,
    incoming: Partial,
    expected: usize,
) -> Option<Partial> {
    let existing = table.borrow_mut().remove(key);
    let merged = match existing {
        None => incoming,
        Some(mut p) => {
            let name = || {
                format!(
                    "CPathReduce over {} of array {} of PE {} with tags {:?} (round {})",
                    show_pattern(&key.over),
                    key.array.1,
                    key.array.0,
                    key.tags,
                    key.round
                )
            };
            let (first, other) = (p.first.show(over_path), incoming.first.show(over_path));
            if (p.vecsize, p.eltsize) != (incoming.vecsize, incoming.eltsize) {
                converse::abort(&format!(
                    "{}: {} gave {} values of {} bytes, {} gave {} values of {} bytes",
                    name(),
                    first,
                    p.vecsize,
                    p.eltsize,
                    other,
                    incoming.vecsize,
                    incoming.eltsize
                ));
            }
            if p.reducer != incoming.reducer {
                converse::abort(&format!(
                    "{}: {} gave reducer {}, {} gave reducer {}",
                    name(),
                    first,
                    p.reducer,
                    other,
                    incoming.reducer
                ));
            }
            if p.dest != incoming.dest {
                converse::abort(&format!(
                    "{}: {} gave destination {} of {}, {} gave {} of {}",
                    name(),
                    first,
                    show_pattern(&p.dest.1),
                    p.dest.0,
                    other,
                    show_pattern(&incoming.dest.1),
                    incoming.dest.0
                ));
            }
            if let Some(pe) = p.pes.intersection(&incoming.pes).next() {
                converse::abort(&format!("{}: two partials from PE {pe}", name()));
            }
            let reducer = s.reducers.borrow()[p.reducer].combine.clone();
            reducer(p.vecsize, &mut p.acc, &incoming.acc);
            p.count += incoming.count;
            p.pes.extend(incoming.pes);
            p
        }
    };
    if merged.count >= expected {
        return Some(merged);
    }
    table.borrow_mut().insert(key.clone(), merged);
    None
}

/// A PE's partial reaches the root (this PE): combined, and once every
/// PE's is in, the result goes to the destination.
fn at_root(s: &State, over_path: &CPath, key: RoundKey, partial: Partial) {
    let expected = layout(s, over_path, &key.over).by_pe.len();
    let Some(done) = merge(s, &s.reductions.root, over_path, &key, partial, expected) else {
        return;
    };
    let kind = Kind::Reduction {
        vecsize: done.vecsize,
        eltsize: done.eltsize,
    };
    deliver(s, &done.dest.0, &done.dest.1, &key.tags, kind, &done.acc);
}

/// Aborts if a participant of round `key` among `flats` (this PE's
/// participants) has returned: it can never contribute to the round.
fn check_gone(s: &State, over_path: &CPath, key: &RoundKey, flats: &[usize]) {
    let arrays = s.arrays.borrow();
    let Some(a) = arrays.get(&key.array) else {
        return;
    };
    if let Some(&gone) = flats.iter().find(|&&f| a.is_finished(f)) {
        drop(arrays);
        never_completes(over_path, key, gone);
    }
}

/// Element `cur` returned, having made `rounds` contributions: aborts if
/// a round of this PE it did not contribute to waits for it.
pub(super) fn check_left(s: &State, cur: &Current, rounds: &HashMap<(Vec<u32>, Vec<i32>), u64>) {
    let stuck = s
        .reductions
        .local
        .borrow()
        .keys()
        .find(|k| {
            k.array == cur.path.id()
                && CPath::pattern_matches(&k.over, &cur.indices)
                && rounds
                    .get(&(k.over.clone(), k.tags.clone()))
                    .is_none_or(|&next| next <= k.round)
        })
        .cloned();
    if let Some(key) = stuck {
        never_completes(&cur.path, &key, cur.flat);
    }
}

/// Aborts: round `key` waits for element `flat`, whose thread returned.
fn never_completes(over_path: &CPath, key: &RoundKey, flat: usize) -> ! {
    converse::abort(&format!(
        "CPathReduce over {} of {over_path} with tags {:?} (round {}) on PE {}: element {:?} \
         returned without contributing to it, so it can never complete",
        show_pattern(&key.over),
        key.tags,
        key.round,
        converse::my_pe(),
        over_path.indices_of(flat).unwrap_or_default()
    ))
}

/// A PE's partial arrived at the root.
pub(super) fn on_partial(msg: Message) {
    let s = state();
    let src = msg.src_pe();
    let me = converse::my_pe();
    let decoded = (|| -> Result<(CPath, RoundKey, Partial), Cause> {
        let mut r = Reader::new(msg.payload());
        let over_path = r.path("over descriptor")?;
        let over = r.u32s("over pattern")?;
        let tags = r.i32s("tags")?;
        let round = r.u64("round")?;
        let reducer = r.u32("reducer")? as usize;
        let vecsize = r.u64("vecsize")?;
        let eltsize = r.u64("eltsize")?;
        let dest_path = r.path("destination descriptor")?;
        let dest = r.u32s("destination pattern")?;
        let data = r.bytes("data")?;
        r.end("partial")?;
        // The descriptors first: nothing is computed from one that
        // contradicts what this PE knows.
        over_path.check(&s)?;
        dest_path.check(&s)?;
        let origin = Origin::Message {
            kind: "partial reduction",
            src,
        };
        known(&s, &over_path, origin)?;
        check_known(&s, &dest_path)?;
        over_path.check_pattern(&over)?;
        dest_path.check_pattern(&dest)?;
        if tags.contains(&super::CPATH_WILD) {
            return Err(format!("tags {tags:?} hold CPATH_WILD"));
        }
        let (Ok(vecsize), Ok(eltsize)) = (usize::try_from(vecsize), usize::try_from(eltsize))
        else {
            return Err(format!("vecsize {vecsize} or eltsize {eltsize} too big"));
        };
        check_reducer(&s, reducer, eltsize)?;
        if vecsize.checked_mul(eltsize) != Some(data.len()) {
            return Err(format!(
                "{} bytes of data for {vecsize} values of {eltsize} bytes",
                data.len()
            ));
        }
        // Whether this PE is the root costs one mapper call; the layout,
        // one per participant, comes after.
        let root = mapped_pe(&s, &over_path, over_path.first_matching(&over))?;
        if root != me {
            return Err(format!(
                "a partial for {} of {over_path}, whose root is PE {root}",
                show_pattern(&over),
            ));
        }
        let l = try_layout(&s, &over_path, &over)?;
        if !l.by_pe.contains_key(&src) {
            return Err(format!(
                "a partial for {} of {over_path} from a PE holding none of its elements",
                show_pattern(&over)
            ));
        }
        let key = RoundKey {
            array: over_path.id(),
            over,
            tags,
            round,
        };
        let partial = Partial {
            reducer,
            vecsize,
            eltsize,
            dest: (dest_path, dest),
            acc: data.to_vec(),
            count: 1,
            pes: BTreeSet::from([src]),
            first: First::Pe(src),
        };
        // The destination must map to PEs of the job: checked here, so
        // that the result's delivery cannot fail.
        match partial.dest.0.flat_index(&partial.dest.1) {
            Some(flat) => mapped_pe(&s, &partial.dest.0, flat).map(drop)?,
            None => try_layout(&s, &partial.dest.0, &partial.dest.1).map(drop)?,
        }
        Ok((over_path, key, partial))
    })();
    match decoded {
        Ok((over_path, key, partial)) => at_root(&s, &over_path, key, partial),
        Err(why) => malformed("partial reduction", src, &why),
    }
}
