//! Discovery documents and their negotiation by `Accept`, as kube-apiserver does it.
//!
//! `/api` and `/apis` answer aggregated discovery (v2, or v2beta1 for 1.26–1.29 clients)
//! when the first acceptable media range asks for it, and the legacy `APIVersions` /
//! `APIGroupList` otherwise; `/apis/{g}` and `/apis/{g}/{v}` are always legacy. The `/apis`
//! v2 body is the caller's bytes, untouched, so byte-level passthrough can be tested.

use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode, header::ACCEPT};
use serde::Serialize;

use super::catalog::Catalog;
use super::discovery::{
    ApiGroupDiscovery, ApiGroupDiscoveryList, CONTENT_TYPE_V2, CONTENT_TYPE_V2BETA1, Format,
    api_group, api_versions, group_list, negotiate, resource_list,
};
use super::respond::{self, Body, Status};

const JSON: &str = "application/json";

/// `/api` and `/apis` in every form, rendered once at start.
#[derive(Debug)]
pub(super) struct Documents {
    legacy_only: bool,
    api_v2: Bytes,
    api_v2beta1: Bytes,
    api_legacy: Bytes,
    apis_v2: Bytes,
    apis_v2beta1: Bytes,
    apis_legacy: Bytes,
}

// === impl Documents ===

impl Documents {
    /// `apis_v2` is served as is; `addr` is what `APIVersions` reports as the server address.
    pub(super) fn new(
        apis_v2: Vec<u8>,
        catalog: &Catalog,
        legacy_only: bool,
        addr: std::net::SocketAddr,
    ) -> Self {
        let core = std::slice::from_ref(catalog.core());
        let versions = api_versions(catalog.core(), addr);
        Self {
            legacy_only,
            api_v2: encode(&aggregated(core, "v2")),
            api_v2beta1: encode(&aggregated(core, "v2beta1")),
            api_legacy: encode(&versions),
            apis_v2: apis_v2.into(),
            apis_v2beta1: encode(&aggregated(catalog.groups(), "v2beta1")),
            apis_legacy: encode(&group_list(catalog.groups())),
        }
    }

    /// `GET /api`.
    pub(super) fn api(&self, headers: &HeaderMap) -> Response<Body> {
        match self.format(headers) {
            Format::V2 => respond::bytes(StatusCode::OK, CONTENT_TYPE_V2, self.api_v2.clone()),
            Format::V2Beta1 => respond::bytes(
                StatusCode::OK,
                CONTENT_TYPE_V2BETA1,
                self.api_v2beta1.clone(),
            ),
            Format::Legacy => respond::bytes(StatusCode::OK, JSON, self.api_legacy.clone()),
            Format::NotAcceptable => not_acceptable(),
        }
    }

    /// `GET /apis`.
    pub(super) fn apis(&self, headers: &HeaderMap) -> Response<Body> {
        match self.format(headers) {
            Format::V2 => respond::bytes(StatusCode::OK, CONTENT_TYPE_V2, self.apis_v2.clone()),
            Format::V2Beta1 => respond::bytes(
                StatusCode::OK,
                CONTENT_TYPE_V2BETA1,
                self.apis_v2beta1.clone(),
            ),
            Format::Legacy => respond::bytes(StatusCode::OK, JSON, self.apis_legacy.clone()),
            Format::NotAcceptable => not_acceptable(),
        }
    }

    fn format(&self, headers: &HeaderMap) -> Format {
        if self.legacy_only {
            return Format::Legacy;
        }
        negotiate(headers.get(ACCEPT))
    }
}

/// `GET /apis/{group}`: the legacy `APIGroup`, or `None` if the group is not served.
pub(super) fn group(catalog: &Catalog, name: &str) -> Option<Response<Body>> {
    let group = catalog.groups().iter().find(|g| g.name() == name)?;
    Some(respond::json(StatusCode::OK, &api_group(group)))
}

/// `GET /api/v1` or `/apis/{group}/{version}`: the legacy `APIResourceList`.
pub(super) fn resources(catalog: &Catalog, group: &str, version: &str) -> Option<Response<Body>> {
    let served = catalog.version(group, version)?;
    Some(respond::json(StatusCode::OK, &resource_list(group, served)))
}

fn aggregated(groups: &[ApiGroupDiscovery], version: &str) -> ApiGroupDiscoveryList {
    ApiGroupDiscoveryList::new(version, groups.to_vec())
}

/// Discovery types always encode; an empty body would show up in any test that looked.
fn encode<T: Serialize>(value: &T) -> Bytes {
    serde_json::to_vec(value).unwrap_or_default().into()
}

fn not_acceptable() -> Response<Body> {
    Status::failure(
        StatusCode::NOT_ACCEPTABLE,
        "NotAcceptable",
        format!("only the following media types are accepted: {JSON}, {CONTENT_TYPE_V2}, {CONTENT_TYPE_V2BETA1}"),
    )
    .into_response()
}
