//! What each API server serves, kept fresh, and the merged view clients see.
//!
//! - [`fetch`] reads one server's `/api` and `/apis` (aggregated, or legacy for old releases);
//! - [`refresh`] owns one task per server that fetches on an interval, on a lookup miss and with
//!   backoff after a failure, and publishes a new [`Snapshot`] after every change;
//! - [`snapshot`] is that immutable routing view; [`merge`] is upstream's peer-aggregated
//!   discovery merge; [`negotiate`] reads a discovery request's `Accept`; [`types`] and
//!   [`legacy`] are the documents themselves.

use std::fmt;
use std::sync::Arc;

pub mod fetch;
pub mod legacy;
pub mod merge;
pub mod negotiate;
pub mod refresh;
pub mod snapshot;
pub mod types;

pub use refresh::{Cache, RefreshError};
pub use snapshot::{ServerState, ServerView, Snapshot};

/// The name of a server (the local one or a peer), as given by `--server-id` and `--peer`.
/// Cheap to clone; ordered, because the merge processes servers in name order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServerName(Arc<str>);

impl ServerName {
    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for ServerName {
    fn from(s: &str) -> Self {
        Self(Arc::from(s))
    }
}

impl fmt::Display for ServerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
