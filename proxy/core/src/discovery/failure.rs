//! Why a server is not up: the typed failure kept in its state and the snapshot.
//!
//! Its own module so that the snapshot, which shows it, and the refresher, which records it,
//! both depend on it without depending on each other.

use super::fetch::FetchError;
use crate::error::ProxyError;

/// Why a server's last refresh failed. Kept typed, with its origin, in [`super::ServerState`] and the
/// snapshot; it is put in words only where it is shown: `/debug/discovery` and the cause of a
/// `503` that names the peer.
#[derive(Debug, thiserror::Error)]
pub enum RefreshError {
    /// Its discovery could not be read.
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// A request forwarded to it could not reach it, or had no answer in time: it is
    /// suspect until a probe of its discovery succeeds.
    #[error("a request to it failed ({0}); suspect until its discovery can be read again")]
    Request(ProxyError),
}
