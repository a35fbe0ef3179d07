//! The network modules and their frames live in the `converse-net` crate,
//! the floor below this core (DESIGN.md §3; its top comment is the map).
//! This module re-exports them so that the core's `crate::net::frame::…`,
//! `crate::net::netmod::…`, `crate::net::shm::…` and `crate::net::tcp::…`
//! paths stay as they were; as before, none of it is public.
#[cfg(feature = "mpi")]
pub(crate) use converse_net::mpi;
pub(crate) use converse_net::{frame, liveness, lmt, netmod, shm, tcp};
