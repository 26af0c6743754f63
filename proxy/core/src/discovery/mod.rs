//! What each API server serves, kept fresh, and the merged view clients see.
//!
//! - [`fetch`] reads one server's `/api` and `/apis` (aggregated, or legacy for old releases);
//! - [`refresh`] owns one task per server that fetches on an interval, on a lookup miss and with
//!   backoff after a failure, and publishes a new [`Snapshot`] after every change;
//! - [`snapshot`] is that immutable routing view; [`merge`] is upstream's peer-aggregated
//!   discovery merge; [`group_docs`] the legacy documents of single groups and
//!   group-versions merged the same way; [`negotiate`] reads a discovery request's `Accept`; [`types`] and
//!   [`legacy`] are the documents themselves.

pub mod failure;
pub mod fetch;
pub mod group_docs;
pub mod legacy;
pub mod merge;
pub mod negotiate;
pub mod refresh;
pub mod side;
pub mod snapshot;
pub mod types;
pub mod view;

pub use failure::RefreshError;
pub use refresh::Cache;
pub use snapshot::{ServerState, ServerView, Snapshot};
