//! OpenAPI across the skew: `/openapi/v3` and `/openapi/v2` as one server would serve them.
//!
//! kubectl and client-go read a kind's schema from OpenAPI, not from discovery: `kubectl
//! explain` from the v3 document of the kind's group-version, client-side `kubectl apply` its
//! strategic-merge patch metadata (v3 first in recent releases, else v2, which kubectl 1.27
//! reads as protobuf only). During an upgrade a group-version served by one release only
//! would be in the merged `/apis` but in no schema, and kubectl falls back to a JSON merge
//! patch that replaces lists instead of merging them. So mvproxy treats the OpenAPI
//! documents like discovery:
//!
//! - `GET /openapi/v3` (the index, kube-openapi `pkg/handler3/handler.go` `HandleDiscovery`,
//!   <https://github.com/kubernetes/kube-openapi/blob/master/pkg/handler3/handler.go>): the
//!   local server's index plus, for each group-version only peers serve, the entry of the
//!   first such peer ([`index`]). Entries keep the serving server's `serverRelativeURL`, hash
//!   included: the document path routes to a server that serves it, which answers a hashed
//!   request with `Cache-Control: public, immutable` itself, and a stale hash with upstream's
//!   own `301` to the current one.
//! - `GET /openapi/v3/apis/{group}/{version}`, `/openapi/v3/apis/{group}` and
//!   `/openapi/v3/api/{version}` (`crate::route::openapi`): forwarded like a resource request of that
//!   group-version: local when the local server serves it, else a capable peer that is up
//!   (same identity headers, TLS, `X-Kubernetes-Peer-Proxied`), `503` when every capable
//!   peer is down or a peer was never seen, the local server's own `404` when nobody serves it.
//! - `GET /openapi/v2` (kube-openapi `pkg/handler/handler.go`): the local document plus the
//!   peers' paths of the group-versions only they serve, with the definitions and shared
//!   parameters those paths reference that the local document lacks ([`v2`]); JSON, or
//!   protobuf (gnostic's `openapi.v2.Document`) as negotiated.
//!
//! Without a group-version that only peers serve, every request goes to the local server
//! untouched. Merged documents are fetched and built once per discovery snapshot
//! ([`cache`]), from servers that are up; a peer that is down contributes its last good
//! document, as discovery keeps its last view, and nothing if it never had one.

pub mod cache;
pub mod fetch;
pub mod index;
pub mod v2;

pub use crate::classify::openapi::{DocPath, OpenApiPath};
pub use crate::route::openapi::Merged;
pub use cache::OpenApi;
