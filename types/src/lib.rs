//! The bottom of the dependency graph: what every crate shares and nothing
//! here depends on. Today the clock seam; the domain newtypes (offsets,
//! epochs, ids) move here crate by crate.

// Every dependency a crate declares is one it uses (dev-dependencies are
// checked by the test builds that use them).
#![cfg_attr(not(test), deny(unused_crate_dependencies))]
// Outside tests an unwrap names its invariant: `expect("...")`.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod clock;

pub use clock::{Clock, ManualClock, SystemClock};
