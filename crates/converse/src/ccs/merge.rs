//! How the replies of a broadcast or multicast CCS request become the one
//! reply its client gets (`CcsSetMergeFn`), and the merges Converse
//! provides.
//!
//! A merge gets every PE's reply, in the order of the request's PE list
//! (PE order for a broadcast), and returns the combined bytes. The numeric
//! merges read the replies as arrays of big-endian numbers (the byte order
//! of the wire, which Charm++'s clients expect) and combine them element by
//! element; a reply shorter than the longest keeps its missing elements
//! out of the result's combination.
use std::sync::Arc;

/// A merge function: all replies in, one reply out. The manual's
/// `CcsSetMergeFn` takes a `CmiReduceMergeFn`; here it is this closure over
/// every reply's bytes at once.
#[doc(alias = "CmiReduceMergeFn")]
pub type MergeFn = Arc<dyn Fn(&[&[u8]]) -> Vec<u8> + Send + Sync>;

/// The replies one after another (`CcsMerge_concat`).
#[doc(alias = "CcsMerge_concat")]
pub fn concat() -> MergeFn {
    Arc::new(|replies: &[&[u8]]| replies.concat())
}

/// Element-wise over big-endian words of `N` bytes.
fn elementwise<const N: usize>(
    replies: &[&[u8]],
    combine: impl Fn([u8; N], [u8; N]) -> [u8; N],
) -> Vec<u8> {
    let longest = replies.iter().map(|r| r.len() / N).max().unwrap_or(0);
    let mut out: Vec<Option<[u8; N]>> = vec![None; longest];
    for reply in replies {
        for (slot, word) in out.iter_mut().zip(reply.chunks_exact(N)) {
            let word: [u8; N] = word.try_into().expect("N bytes");
            *slot = Some(match *slot {
                None => word,
                Some(acc) => combine(acc, word),
            });
        }
    }
    out.into_iter().flat_map(|w| w.unwrap_or([0; N])).collect()
}

macro_rules! numeric_merges {
    ($($name:ident, $alias:literal, $t:ty, $op:expr;)*) => {$(
        #[doc = concat!("Element-wise over big-endian `", stringify!($t), "` values (`", $alias, "`).")]
        #[doc(alias = $alias)]
        pub fn $name() -> MergeFn {
            const N: usize = std::mem::size_of::<$t>();
            Arc::new(|replies: &[&[u8]]| {
                elementwise::<N>(replies, |a, b| {
                    let op: fn($t, $t) -> $t = $op;
                    op(<$t>::from_be_bytes(a), <$t>::from_be_bytes(b)).to_be_bytes()
                })
            })
        }
    )*};
}

numeric_merges! {
    sum_int, "CcsMerge_int_sum", i32, |a, b| a.wrapping_add(b);
    product_int, "CcsMerge_int_product", i32, |a, b| a.wrapping_mul(b);
    max_int, "CcsMerge_int_max", i32, |a, b| a.max(b);
    min_int, "CcsMerge_int_min", i32, |a, b| a.min(b);
    sum_float, "CcsMerge_float_sum", f32, |a, b| a + b;
    product_float, "CcsMerge_float_product", f32, |a, b| a * b;
    max_float, "CcsMerge_float_max", f32, |a, b| a.max(b);
    min_float, "CcsMerge_float_min", f32, |a, b| a.min(b);
    sum_double, "CcsMerge_double_sum", f64, |a, b| a + b;
    product_double, "CcsMerge_double_product", f64, |a, b| a * b;
    max_double, "CcsMerge_double_max", f64, |a, b| a.max(b);
    min_double, "CcsMerge_double_min", f64, |a, b| a.min(b);
    logical_and, "CcsMerge_logical_and", i32, |a, b| (a != 0 && b != 0) as i32;
    logical_or, "CcsMerge_logical_or", i32, |a, b| (a != 0 || b != 0) as i32;
}

/// Byte-wise AND of bit vectors (`CcsMerge_bitvec_and`).
#[doc(alias = "CcsMerge_bitvec_and")]
pub fn bitvec_and() -> MergeFn {
    Arc::new(|replies: &[&[u8]]| elementwise::<1>(replies, |a, b| [a[0] & b[0]]))
}

/// Byte-wise OR of bit vectors (`CcsMerge_bitvec_or`).
#[doc(alias = "CcsMerge_bitvec_or")]
pub fn bitvec_or() -> MergeFn {
    Arc::new(|replies: &[&[u8]]| elementwise::<1>(replies, |a, b| [a[0] | b[0]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(v: &[i32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_be_bytes()).collect()
    }

    #[test]
    fn merges_combine_element_by_element_in_big_endian() {
        let (a, b) = (ints(&[1, -5, 7]), ints(&[10, 3]));
        let replies: [&[u8]; 2] = [&a, &b];
        assert_eq!(sum_int()(&replies), ints(&[11, -2, 7]));
        assert_eq!(max_int()(&replies), ints(&[10, 3, 7]));
        assert_eq!(min_int()(&replies), ints(&[1, -5, 7]));
        assert_eq!(product_int()(&replies), ints(&[10, -15, 7]));
        assert_eq!(logical_and()(&replies), ints(&[1, 1, 7]));
        assert_eq!(concat()(&replies), [a.clone(), b.clone()].concat());
        let d: Vec<u8> = [1.5f64, 2.0].iter().flat_map(|x| x.to_be_bytes()).collect();
        let e: Vec<u8> = [0.5f64, -4.0]
            .iter()
            .flat_map(|x| x.to_be_bytes())
            .collect();
        let sum: Vec<u8> = [2.0f64, -2.0]
            .iter()
            .flat_map(|x| x.to_be_bytes())
            .collect();
        assert_eq!(sum_double()(&[&d, &e]), sum);
        assert_eq!(bitvec_or()(&[&[0b0101, 1], &[0b0011]]), [0b0111, 1]);
        assert_eq!(bitvec_and()(&[&[0b0101], &[0b0011]]), [0b0001]);
        assert_eq!(sum_int()(&[]), Vec::<u8>::new());
    }
}
