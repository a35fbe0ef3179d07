//! Spanning trees: the k-ary trees over PEs, nodes, or the members of a PE
//! list that broadcasts, multicasts, reductions and quiescence detection
//! travel along. Their shape is `proc::spantree`'s [`SpanningTree`]; this
//! module answers the manual's calls (`CmiSpanTreeParent` and friends),
//! which use the tree over all PEs (or all nodes) rooted at 0 with the
//! job's branching factor (`++spantree-branch K`, default 4).

pub use crate::proc::spantree::{DEFAULT_BRANCH, SpanningTree};
use crate::rt::pe;

/// The job's branching factor (`++spantree-branch`, default 4).
pub fn spanning_tree_branch() -> usize {
    pe::with(|pe| pe.branch())
}

fn pe_tree() -> SpanningTree {
    pe::with(|pe| SpanningTree::new(pe.job.topo.num_pes(), pe.branch(), 0))
}

fn node_tree() -> SpanningTree {
    pe::with(|pe| SpanningTree::new(pe.job.topo.num_nodes(), pe.branch(), 0))
}

fn checked_pe(pe: usize) -> usize {
    crate::rt::node_of(pe); // aborts naming the PE if out of range
    pe
}

fn checked_node(node: usize) -> usize {
    crate::rt::node_size(node); // aborts naming the node if out of range
    node
}

/// The root of the spanning trees over PEs and over nodes: always 0
/// (`CmiSpanTreeRoot`, which the manual has since dropped).
#[doc(alias = "CmiSpanTreeRoot")]
pub fn span_tree_root() -> usize {
    0
}

/// The parent of PE `pe` in the spanning tree over PEs; `None` for PE 0, the
/// root (`CmiSpanTreeParent`, which returns -1 there). Aborts if `pe` is out
/// of range.
#[doc(alias = "CmiSpanTreeParent")]
pub fn span_tree_parent(pe: usize) -> Option<usize> {
    pe_tree().parent(checked_pe(pe))
}

/// Number of children of PE `pe` in the spanning tree over PEs
/// (`CmiNumSpanTreeChildren`).
#[doc(alias = "CmiNumSpanTreeChildren")]
pub fn num_span_tree_children(pe: usize) -> usize {
    pe_tree().num_children(checked_pe(pe))
}

/// The children of PE `pe` in the spanning tree over PEs
/// (`CmiSpanTreeChildren`).
#[doc(alias = "CmiSpanTreeChildren")]
pub fn span_tree_children(pe: usize) -> Vec<usize> {
    pe_tree().children(checked_pe(pe)).collect()
}

/// The parent of node `node` in the spanning tree over nodes; `None` for
/// node 0 (`CmiNodeSpanTreeParent`).
#[doc(alias = "CmiNodeSpanTreeParent")]
pub fn node_span_tree_parent(node: usize) -> Option<usize> {
    node_tree().parent(checked_node(node))
}

/// Number of children of node `node` in the spanning tree over nodes
/// (`CmiNumNodeSpanTreeChildren`).
#[doc(alias = "CmiNumNodeSpanTreeChildren")]
pub fn num_node_span_tree_children(node: usize) -> usize {
    node_tree().num_children(checked_node(node))
}

/// The children of node `node` in the spanning tree over nodes
/// (`CmiNodeSpanTreeChildren`).
#[doc(alias = "CmiNodeSpanTreeChildren")]
pub fn node_span_tree_children(node: usize) -> Vec<usize> {
    node_tree().children(checked_node(node)).collect()
}
