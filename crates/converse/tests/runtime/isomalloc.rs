//! Isomalloc in one process (`converse::isomalloc`): blocks in the range,
//! of whole pages, zeroed; a linked structure packed on one PE and unpacked
//! on another keeps its internal pointers; misuse is refused. (Across
//! processes: the `core_isomalloc` case of `convrun`'s multi-process tests.)
use std::ptr::NonNull;

use converse::isomalloc::{self, PackedBlock};
use converse::{Converse, Message};

/// A node of a list that lives inside one isomalloc block.
#[repr(C)]
struct Node {
    value: u64,
    next: *mut Node,
}

/// Builds a list of `n` nodes (values `0..n`, times `k`) in `block`;
/// returns its head.
///
/// # Safety
/// `block` is a live isomalloc block with room for `n` nodes.
unsafe fn build(block: NonNull<u8>, n: usize, k: u64) -> *mut Node {
    let nodes = block.as_ptr() as *mut Node;
    for i in 0..n {
        // SAFETY: inside the block (the caller's promise).
        unsafe {
            nodes.add(i).write(Node {
                value: i as u64 * k,
                next: if i + 1 < n {
                    nodes.add(i + 1)
                } else {
                    std::ptr::null_mut()
                },
            })
        };
    }
    nodes
}

/// The values of the list at `head`.
///
/// # Safety
/// `head` starts a list built by [`build`] in a live block.
unsafe fn values(mut head: *const Node) -> Vec<u64> {
    let mut v = Vec::new();
    while !head.is_null() {
        // SAFETY: the caller's promise.
        unsafe {
            v.push((*head).value);
            head = (*head).next;
        }
    }
    v
}

#[test]
fn a_block_moves_between_pes_with_its_pointers() {
    let code = Converse::new()
        .args(["prog", "+p", "2"])
        .run(|_| {
            let take = converse::register_handler(|m: Message| {
                let packed = PackedBlock::from_bytes(m.payload()).expect("a packed block");
                let block = isomalloc::isomalloc_unpack(&packed).expect("it unpacks");
                assert_eq!(block.as_ptr() as u64, packed.addr, "at the same address");
                // SAFETY: the block came back with the list PE 0 built.
                let got = unsafe { values(block.as_ptr() as *const Node) };
                assert_eq!(got, (0..100).map(|i| i * 3).collect::<Vec<_>>());
                // Unpacked twice: refused.
                assert!(isomalloc::isomalloc_unpack(&packed).is_err());
                // SAFETY: not used after.
                unsafe { isomalloc::isomalloc_free(block) }.unwrap();
                // SAFETY: a second free touches nothing: it is refused.
                let twice = unsafe { isomalloc::isomalloc_free(block) };
                assert!(twice.is_err(), "not twice");
                converse::exit(0);
            });
            if converse::my_pe() != 0 {
                return;
            }
            let heap = Box::new(5u64);
            assert!(!isomalloc::isomalloc_in_range(
                &*heap as *const u64 as *const u8
            ));
            let block = isomalloc::isomalloc(100 * std::mem::size_of::<Node>()).unwrap();
            assert!(isomalloc::isomalloc_in_range(block.as_ptr()));
            let len = isomalloc::isomalloc_length(block.as_ptr()).unwrap();
            assert!(
                len >= 1600 && len.is_multiple_of(4096),
                "whole pages: {len}"
            );
            assert_eq!(
                isomalloc::isomalloc_length(heap.as_ref() as *const u64 as *const u8),
                None
            );
            // Zeroed.
            // SAFETY: a live block of `len` bytes, nothing else uses it.
            let bytes = unsafe { std::slice::from_raw_parts(block.as_ptr(), len) };
            assert!(bytes.iter().all(|&b| b == 0));
            // Two blocks never overlap.
            let other = isomalloc::isomalloc(1).unwrap();
            let (a, b) = (block.as_ptr() as usize, other.as_ptr() as usize);
            assert!(a + len <= b || b + 4096 <= a);
            // SAFETY: fresh blocks of this PE.
            unsafe {
                build(block, 100, 3);
                isomalloc::isomalloc_free(other).unwrap();
            }
            // SAFETY: not used again here.
            let packed = unsafe { isomalloc::isomalloc_pack(block) }.unwrap();
            assert_eq!(packed.bytes.len(), len);
            converse::sync_send_and_free(1, Message::from_payload(take, &packed.to_bytes()));
        })
        .expect("the job starts");
    assert_eq!(code, 0);
}
