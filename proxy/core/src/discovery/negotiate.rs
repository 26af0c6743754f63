//! Which discovery document a request for `/apis` asks for.
//!
//! kube-apiserver decides between aggregated and legacy discovery from the `Accept` header
//! (k8s.io/apiserver kubernetes-1.36.0, `pkg/endpoints/discovery/aggregated/wrapper.go`
//! `ServeHTTP` and `pkg/endpoints/handlers/negotiation/negotiate.go`): the first acceptable media range wins; an aggregated `v2` range without
//! `profile=nopeer` gets the peer-merged document. mvproxy renders JSON only, so ranges it
//! cannot render (protobuf, YAML, CBOR) are skipped and the next one is tried, as a client
//! that listed several formats expects.

use http::HeaderValue;

use super::types::{AGGREGATED_GROUP, AGGREGATED_KIND};

/// The discovery format a request negotiated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiscoveryFormat {
    /// `apidiscovery.k8s.io/v2`; `nopeer` if the range carried `profile=nopeer`.
    AggregatedV2 {
        /// Only the server's own groups (`profile=nopeer`).
        nopeer: bool,
    },
    /// `apidiscovery.k8s.io/v2beta1`, which upstream never merges.
    AggregatedV2Beta1,
    /// Plain JSON: `APIGroupList`.
    Legacy,
    /// Nothing mvproxy can render: the local server decides.
    Unsupported,
}

/// Reads the `Accept` header (absent or empty means plain JSON, as in Go's negotiation).
pub fn negotiate(accept: Option<&HeaderValue>) -> DiscoveryFormat {
    let Some(accept) = accept else {
        return DiscoveryFormat::Legacy;
    };
    let Ok(accept) = accept.to_str() else {
        return DiscoveryFormat::Unsupported;
    };
    if accept.trim().is_empty() {
        return DiscoveryFormat::Legacy;
    }
    accept
        .split(',')
        .filter_map(media_range)
        .next()
        .unwrap_or(DiscoveryFormat::Unsupported)
}

/// Whether a legacy request for one group or group-version (`/apis/{g}`, `/apis/{g}/{v}`,
/// `/api/{v}`) gets mvproxy's merged document: it negotiated plain JSON and none of its
/// ranges carries `profile=nopeer`. Upstream has no peer-merged form of these documents and
/// so no legacy spelling of `nopeer`; mvproxy reads the aggregated one's parameter on any
/// range as the ask for the local server's own view (docs/discovery.md).
pub fn merged_legacy(accept: Option<&HeaderValue>) -> bool {
    if negotiate(accept) != DiscoveryFormat::Legacy {
        return false;
    }
    !accept.and_then(|a| a.to_str().ok()).is_some_and(|a| {
        a.split(',').any(|range| {
            range.split(';').skip(1).any(|param| {
                param.split_once('=').is_some_and(|(k, v)| {
                    k.trim() == "profile" && v.trim().trim_matches('"') == "nopeer"
                })
            })
        })
    })
}

fn media_range(range: &str) -> Option<DiscoveryFormat> {
    let mut parts = range.split(';').map(str::trim);
    let media_type = parts.next()?.to_ascii_lowercase();
    if !matches!(
        media_type.as_str(),
        "application/json" | "application/*" | "*/*"
    ) {
        return None;
    }
    let (mut group, mut version, mut kind, mut profile) = (None, None, None, None);
    for param in parts {
        let Some((key, value)) = param.split_once('=') else {
            continue;
        };
        let value = value.trim().trim_matches('"');
        match key.trim() {
            "g" => group = Some(value),
            "v" => version = Some(value),
            "as" => kind = Some(value),
            "profile" => profile = Some(value),
            "q" if value.parse::<f32>().is_ok_and(|q| q <= 0.0) => return None,
            _ => {}
        }
    }
    match (group, version, kind) {
        (None, None, None) => Some(DiscoveryFormat::Legacy),
        (Some(AGGREGATED_GROUP), Some("v2"), Some(AGGREGATED_KIND)) => {
            Some(DiscoveryFormat::AggregatedV2 {
                nopeer: profile == Some("nopeer"),
            })
        }
        (Some(AGGREGATED_GROUP), Some("v2beta1"), Some(AGGREGATED_KIND)) => {
            Some(DiscoveryFormat::AggregatedV2Beta1)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::DiscoveryFormat::*;
    use super::*;

    #[test]
    fn negotiation_table() {
        let cases: &[(Option<&str>, DiscoveryFormat)] = &[
            (None, Legacy),
            (Some("application/json"), Legacy),
            (Some("*/*"), Legacy),
            // client-go 1.30–1.36 (kubectl)
            (
                Some(
                    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json",
                ),
                AggregatedV2 { nopeer: false },
            ),
            // client-go 1.26–1.29
            (
                Some(
                    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json",
                ),
                AggregatedV2Beta1,
            ),
            // NoPeerDiscovery=true, and parameters in another order
            (
                Some(super::super::types::ACCEPT_NOPEER),
                AggregatedV2 { nopeer: true },
            ),
            (
                Some(
                    "application/json;as=APIGroupDiscoveryList;profile=nopeer;v=v2;g=apidiscovery.k8s.io",
                ),
                AggregatedV2 { nopeer: true },
            ),
            // protobuf first: skipped, the JSON range after it is used
            (
                Some(
                    "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
                ),
                AggregatedV2 { nopeer: false },
            ),
            (Some("application/yaml"), Unsupported),
            (
                Some("application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList"),
                Unsupported,
            ),
            (
                Some(
                    "application/json;q=0,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
                ),
                AggregatedV2 { nopeer: false },
            ),
            (Some(""), Legacy),
        ];
        for (accept, want) in cases {
            let header = accept.map(|a| HeaderValue::from_str(a).unwrap());
            assert_eq!(negotiate(header.as_ref()), *want, "Accept: {accept:?}");
        }
    }
}
