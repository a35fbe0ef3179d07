//! The Rust blocks of the README and of the user guide (`docs/guide/`),
//! compiled and run as this crate's doctests (`cargo test -p
//! converse-guide --doc`, part of `cargo test --workspace`), so that what
//! the documents show keeps building and doing what they say. The shell
//! blocks are run by `.ci/doc-blocks`.
//!
//! Nothing else is here, and nothing is published: the documents live
//! outside every published crate, so the published crates do not include
//! them.

/// `README.md`.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct Readme;

/// `docs/guide/running.md`.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/running.md")]
pub struct Running;

/// `docs/guide/observing.md`.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/observing.md")]
pub struct Observing;

/// `docs/guide/extensions.md`.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/extensions.md")]
pub struct Extensions;

/// `docs/guide/gamma.md`.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/gamma.md")]
pub struct Gamma;

/// `docs/guide/names.md`.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/names.md")]
pub struct Names;

/// `docs/guide/performance.md`.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/performance.md")]
pub struct Performance;

/// `docs/guide/processes.md`.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/processes.md")]
pub struct Processes;

/// `docs/guide/ccs.md`.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/ccs.md")]
pub struct Ccs;

/// `docs/guide/c-abi.md`.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/c-abi.md")]
pub struct CAbi;

/// `docs/guide/install.md`.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/install.md")]
pub struct Install;

/// `docs/guide/typed.md`.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/typed.md")]
pub struct Typed;

/// `docs/guide/README.md`.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/README.md")]
pub struct Index;
