//! Memory the runtime manages itself, below the PEs: isomalloc's address
//! space ([`isomalloc`]). A leaf floor: it uses nothing of the crate.
pub mod isomalloc;
