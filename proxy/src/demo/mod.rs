//! `mvproxy demo`: a rolling control-plane upgrade rehearsed on one machine, with a report.
//!
//! The demo must run from a clone of this repository alone, so everything it needs is in the
//! binary, starting with [`catalog`]: the API surface of the two releases it upgrades between.

pub mod catalog;
pub mod plan;
pub mod workload;
