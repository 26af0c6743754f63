//! Where peers come from, besides a static list: the cluster itself.
//!
//! - `leases`: the API server identity Leases in `kube-system` (label
//!   `apiserver.kubernetes.io/identity=kube-apiserver`), one per API server, each naming its
//!   server (`metadata.name`) and, with the Mixed Version Proxy gate on, its address in the
//!   annotation `kubernetes.io/peer-advertise-address`. A lease whose `renewTime +
//!   leaseDurationSeconds` has passed belongs to a server that is gone (upstream does not check
//!   this; its garbage collection takes an hour). This server's own lease is skipped. A new
//!   `holderIdentity` means the server restarted, and its discovery is fetched again.
//! - `endpointslices`: the addresses behind the `default/kubernetes` Service, one peer per
//!   ready address, named by its address (EndpointSlices carry no server identity).
//!
//! Both are read from the local API server with the proxy's own token, by list then watch,
//! relisting on any watch error and every [`RESYNC`] anyway. The set is handed whole to the
//! discovery cache, which starts and stops fetching peers as they come and go.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::{Buf, BytesMut};
use http::header::{self, HeaderMap, HeaderValue};
use http::{StatusCode, Uri};
use http_body_util::BodyExt;
use mvproxy_telemetry::metrics::{Metrics, TypeLabels, values};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::discovery::Cache;
use crate::discovery::refresh::PeerSpec;
use crate::plumbing::ServerName;
use crate::upstream::Upstream;

/// Full relist interval, whatever the watch says.
pub const RESYNC: Duration = Duration::from_secs(300);
/// How often lease expiry is re-evaluated between events.
const EXPIRY_CHECK: Duration = Duration::from_secs(2);
/// Largest list accepted.
const MAX_LIST_BYTES: usize = 16 * 1024 * 1024;
/// Label and annotation names (upstream's).
const IDENTITY_LABEL: &str = "apiserver.kubernetes.io/identity";
const ADVERTISE_ANNOTATION: &str = "kubernetes.io/peer-advertise-address";

/// Which objects describe the peers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The identity Leases in `kube-system`.
    Leases,
    /// The `default/kubernetes` EndpointSlices.
    EndpointSlices,
}

impl Kind {
    fn collection(self) -> &'static str {
        match self {
            Self::Leases => {
                "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases?labelSelector=apiserver.kubernetes.io%2Fidentity%3Dkube-apiserver"
            }
            Self::EndpointSlices => {
                "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Dkubernetes"
            }
        }
    }

    /// The `type` of `mvproxy_peer_discovery_sync_errors_total` when reading these fails.
    fn sync_error_type(self) -> &'static str {
        match self {
            Self::Leases => values::LEASE_LIST,
            Self::EndpointSlices => values::ENDPOINTSLICE_LIST,
        }
    }
}

/// A cluster peer source.
pub struct KubeSource {
    /// Which objects describe the peers.
    pub kind: Kind,
    /// The API server the objects are read from (the local one).
    pub api: Upstream,
    /// Bearer token file (a ServiceAccount token rotates, so it is read at every list).
    pub token_file: Option<PathBuf>,
    /// A fixed bearer token (from a kubeconfig).
    pub token: Option<String>,
    /// This server's lease name, skipped.
    pub self_name: ServerName,
    /// This server's `host:port`, skipped among EndpointSlice addresses.
    pub self_addr: String,
    /// `https` for API servers; `http` only for test stand-ins.
    pub scheme: &'static str,
    /// Where list and watch failures are counted.
    pub metrics: Arc<Metrics>,
}

/// Why a list or watch failed.
#[derive(Debug, thiserror::Error)]
enum WatchError {
    #[error("{0}")]
    Upstream(#[from] crate::error::ProxyError),
    #[error("{path}: HTTP {status}")]
    Status { path: String, status: StatusCode },
    #[error("{0}")]
    Decode(String),
    #[error("token file {0}")]
    Token(String),
}

impl KubeSource {
    /// Lists and watches until `shutdown`, keeping `cache`'s peer set equal to the cluster's.
    pub async fn run(self, cache: Arc<Cache>, shutdown: CancellationToken) {
        let mut failures = 0u32;
        loop {
            let result = tokio::select! {
                r = self.list_and_watch(&cache) => r,
                () = shutdown.cancelled() => return,
            };
            if let Err(e) = result {
                failures = failures.saturating_add(1);
                tracing::warn!(source = ?self.kind, error = %e, "reading peers failed; retrying");
                self.metrics
                    .peer_discovery_sync_errors
                    .get_or_create(&TypeLabels {
                        r#type: self.kind.sync_error_type(),
                    })
                    .inc();
                let delay = Duration::from_millis(500) * 2u32.saturating_pow(failures.min(6));
                tokio::select! {
                    () = tokio::time::sleep(delay.min(Duration::from_secs(30))) => {}
                    () = shutdown.cancelled() => return,
                }
            } else {
                failures = 0;
            }
        }
    }

    /// One list, then watch from its resourceVersion until the watch ends or [`RESYNC`].
    async fn list_and_watch(&self, cache: &Arc<Cache>) -> Result<(), WatchError> {
        let path = self.kind.collection();
        let resp = self.api.open(path, self.headers()?).await?;
        if resp.status() != StatusCode::OK {
            return Err(WatchError::Status {
                path: path.to_owned(),
                status: resp.status(),
            });
        }
        let body = self
            .api
            .collect(path, resp.into_body(), MAX_LIST_BYTES)
            .await?;
        let list: Value =
            serde_json::from_slice(&body).map_err(|e| WatchError::Decode(e.to_string()))?;
        let mut rv = list["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let mut objects: BTreeMap<String, Value> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|o| Some((key(o)?, o.clone())))
            .collect();
        self.publish(cache, &objects);

        let watch_path = format!(
            "{path}&watch=1&allowWatchBookmarks=true&timeoutSeconds={}&resourceVersion={rv}",
            RESYNC.as_secs()
        );
        let resp = self.api.open(&watch_path, self.headers()?).await?;
        if resp.status() != StatusCode::OK {
            return Err(WatchError::Status {
                path: watch_path,
                status: resp.status(),
            });
        }
        let mut body = resp.into_body();
        let mut buf = BytesMut::new();
        let resync = tokio::time::sleep(RESYNC);
        tokio::pin!(resync);
        loop {
            tokio::select! {
                frame = body.frame() => {
                    let Some(frame) = frame else { return Ok(()) };
                    let frame = frame.map_err(|e| WatchError::Decode(e.to_string()))?;
                    let Ok(data) = frame.into_data() else { continue };
                    buf.extend_from_slice(&data);
                    if buf.len() > MAX_LIST_BYTES {
                        return Err(WatchError::Decode("watch event too large".to_owned()));
                    }
                    while let Some(end) = buf.iter().position(|b| *b == b'\n') {
                        let line = buf.split_to(end + 1);
                        let line = line.chunk();
                        if line.iter().all(u8::is_ascii_whitespace) {
                            continue;
                        }
                        let event: Value = serde_json::from_slice(line).map_err(|e| WatchError::Decode(e.to_string()))?;
                        if !apply(&mut objects, &mut rv, &event)? {
                            continue;
                        }
                        self.publish(cache, &objects);
                    }
                }
                () = tokio::time::sleep(EXPIRY_CHECK) => self.publish(cache, &objects),
                () = &mut resync => return Ok(()),
            }
        }
    }

    fn headers(&self) -> Result<HeaderMap, WatchError> {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
        let token = match (&self.token, &self.token_file) {
            (Some(t), _) => Some(t.clone()),
            (None, Some(file)) => Some(
                std::fs::read_to_string(file)
                    .map_err(|e| WatchError::Token(format!("{}: {e}", file.display())))?,
            ),
            (None, None) => None,
        };
        if let Some(token) = token {
            let value = HeaderValue::from_str(&format!("Bearer {}", token.trim()))
                .map_err(|_| WatchError::Token("not a valid token".to_owned()))?;
            h.insert(header::AUTHORIZATION, value);
        }
        Ok(h)
    }

    fn publish(&self, cache: &Arc<Cache>, objects: &BTreeMap<String, Value>) {
        let peers = match self.kind {
            Kind::Leases => peers_from_leases(
                objects.values(),
                &self.self_name,
                self.scheme,
                SystemTime::now(),
            ),
            Kind::EndpointSlices => {
                peers_from_slices(objects.values(), &self.self_addr, self.scheme)
            }
        };
        cache.set_peers(peers);
    }
}

/// Applies a watch event; returns whether the object set changed. An `ERROR` event (the
/// resourceVersion is too old) ends the watch so that the source relists.
fn apply(
    objects: &mut BTreeMap<String, Value>,
    rv: &mut String,
    event: &Value,
) -> Result<bool, WatchError> {
    let object = &event["object"];
    if let Some(v) = object["metadata"]["resourceVersion"].as_str() {
        v.clone_into(rv);
    }
    match event["type"].as_str() {
        Some("ADDED" | "MODIFIED") => Ok(key(object)
            .map(|k| objects.insert(k, object.clone()))
            .is_some()),
        Some("DELETED") => Ok(key(object).and_then(|k| objects.remove(&k)).is_some()),
        Some("BOOKMARK") => Ok(false),
        _ => Err(WatchError::Decode(format!(
            "watch ended: {}",
            object["message"].as_str().unwrap_or("error event")
        ))),
    }
}

fn key(object: &Value) -> Option<String> {
    let m = &object["metadata"];
    Some(format!(
        "{}/{}",
        m["namespace"].as_str().unwrap_or_default(),
        m["name"].as_str()?
    ))
}

/// The peers named by identity leases at time `now`.
pub fn peers_from_leases<'a>(
    leases: impl Iterator<Item = &'a Value>,
    self_name: &ServerName,
    scheme: &str,
    now: SystemTime,
) -> Vec<PeerSpec> {
    leases
        .filter_map(|lease| {
            let meta = &lease["metadata"];
            let name = meta["name"].as_str()?;
            if name == self_name.as_str()
                || meta["labels"][IDENTITY_LABEL].as_str() != Some("kube-apiserver")
            {
                return None;
            }
            let spec = &lease["spec"];
            let holder = spec["holderIdentity"].as_str().filter(|h| !h.is_empty())?;
            if expired(spec, now) {
                return None;
            }
            let address = meta["annotations"][ADVERTISE_ANNOTATION].as_str()?;
            let url: Uri = format!("{scheme}://{address}").parse().ok()?;
            Some(PeerSpec {
                name: ServerName::from(name),
                url,
                generation: holder.to_owned(),
            })
        })
        .collect()
}

/// Whether `renewTime + leaseDurationSeconds` is before `now` (a lease without them never
/// expires, as upstream treats it).
fn expired(spec: &Value, now: SystemTime) -> bool {
    let (Some(renew), Some(duration)) = (
        spec["renewTime"].as_str(),
        spec["leaseDurationSeconds"].as_u64(),
    ) else {
        return false;
    };
    // checked: a Lease's duration is the cluster's data, and `SystemTime + Duration` panics
    // on overflow (a duration past the end of time never expires)
    match humantime::parse_rfc3339_weak(renew) {
        Ok(renewed) => renewed
            .checked_add(Duration::from_secs(duration))
            .is_some_and(|end| end < now),
        Err(_) => false,
    }
}

/// The peers behind the `default/kubernetes` Service: every ready address, except `self_addr`.
pub fn peers_from_slices<'a>(
    slices: impl Iterator<Item = &'a Value>,
    self_addr: &str,
    scheme: &str,
) -> Vec<PeerSpec> {
    let mut out = Vec::new();
    for slice in slices {
        let ports = slice["ports"].as_array().cloned().unwrap_or_default();
        let Some(port) = ports
            .iter()
            .find(|p| p["name"].as_str() == Some("https"))
            .or_else(|| ports.first())
            .and_then(|p| p["port"].as_u64())
        else {
            continue;
        };
        for endpoint in slice["endpoints"].as_array().into_iter().flatten() {
            if endpoint["conditions"]["ready"].as_bool() == Some(false) {
                continue;
            }
            for ip in endpoint["addresses"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                let host = if ip.contains(':') {
                    format!("[{ip}]")
                } else {
                    ip.to_owned()
                };
                let address = format!("{host}:{port}");
                if address == self_addr {
                    continue;
                }
                if let Ok(url) = format!("{scheme}://{address}").parse::<Uri>() {
                    out.push(PeerSpec {
                        name: ServerName::from(address.as_str()),
                        url,
                        generation: String::new(),
                    });
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_peer_source_counts_its_failures_under_its_own_type() {
        assert_eq!(Kind::Leases.sync_error_type(), "lease_list");
        assert_eq!(Kind::EndpointSlices.sync_error_type(), "endpointslice_list");
    }

    fn lease(
        name: &str,
        holder: &str,
        renewed_ago: u64,
        duration: u64,
        address: Option<&str>,
    ) -> Value {
        let renew =
            humantime::format_rfc3339_micros(SystemTime::now() - Duration::from_secs(renewed_ago))
                .to_string();
        let mut annotations = serde_json::Map::new();
        if let Some(a) = address {
            annotations.insert(ADVERTISE_ANNOTATION.to_owned(), a.into());
        }
        json!({
            "metadata": {"name": name, "namespace": "kube-system", "labels": {IDENTITY_LABEL: "kube-apiserver"}, "annotations": annotations},
            "spec": {"holderIdentity": holder, "renewTime": renew, "leaseDurationSeconds": duration},
        })
    }

    #[test]
    fn leases_give_live_peers_except_self() {
        let leases = [
            lease(
                "apiserver-a",
                "apiserver-a_1",
                5,
                3600,
                Some("10.0.0.1:6443"),
            ),
            lease(
                "apiserver-b",
                "apiserver-b_7",
                5,
                3600,
                Some("10.0.0.2:6443"),
            ),
            lease(
                "apiserver-c",
                "apiserver-c_1",
                7200,
                3600,
                Some("10.0.0.3:6443"),
            ),
            lease("apiserver-d", "apiserver-d_1", 5, 3600, None),
            lease("apiserver-e", "", 5, 3600, Some("10.0.0.5:6443")),
        ];
        let mut other = lease("kube-scheduler", "x", 5, 3600, Some("10.0.0.9:6443"));
        other["metadata"]["labels"] = json!({});
        let all: Vec<&Value> = leases.iter().chain([&other]).collect();
        let peers = peers_from_leases(
            all.into_iter(),
            &"apiserver-a".into(),
            "https",
            SystemTime::now(),
        );
        assert_eq!(
            peers,
            [PeerSpec {
                name: "apiserver-b".into(),
                url: "https://10.0.0.2:6443".parse().unwrap(),
                generation: "apiserver-b_7".into(),
            }],
            "self, expired, address-less, holder-less and unlabelled leases are skipped"
        );
    }

    #[test]
    fn a_lease_duration_past_the_end_of_time_never_expires_and_panics_nothing() {
        let forever = lease("apiserver-b", "b_1", 5, u64::MAX, Some("10.0.0.2:6443"));
        let peers = peers_from_leases(
            [&forever].into_iter(),
            &"a".into(),
            "https",
            SystemTime::now(),
        );
        assert_eq!(peers.len(), 1, "{peers:?}");
    }

    #[test]
    fn endpoint_slices_give_ready_addresses_except_self() {
        let slice = json!({
            "ports": [{"name": "https", "port": 6443}],
            "endpoints": [
                {"addresses": ["10.0.0.1"], "conditions": {"ready": true}},
                {"addresses": ["10.0.0.2"], "conditions": {"ready": true}},
                {"addresses": ["10.0.0.3"], "conditions": {"ready": false}},
                {"addresses": ["fd00::4"]},
            ],
        });
        let peers = peers_from_slices([&slice].into_iter(), "10.0.0.1:6443", "https");
        let names: Vec<_> = peers.iter().map(|p| p.name.as_str().to_owned()).collect();
        assert_eq!(names, ["10.0.0.2:6443", "[fd00::4]:6443"]);
        assert_eq!(
            peers[1].url,
            "https://[fd00::4]:6443".parse::<Uri>().unwrap()
        );
    }

    #[test]
    fn watch_events_update_the_set_and_errors_end_the_watch() {
        let mut objects = BTreeMap::new();
        let mut rv = String::new();
        let obj = json!({"metadata": {"name": "apiserver-b", "namespace": "kube-system", "resourceVersion": "7"}});
        assert!(
            apply(
                &mut objects,
                &mut rv,
                &json!({"type": "ADDED", "object": obj})
            )
            .unwrap()
        );
        assert_eq!(rv, "7");
        assert!(
            !apply(
                &mut objects,
                &mut rv,
                &json!({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}})
            )
            .unwrap()
        );
        assert_eq!(rv, "9");
        assert!(
            apply(
                &mut objects,
                &mut rv,
                &json!({"type": "DELETED", "object": obj})
            )
            .unwrap()
        );
        assert!(objects.is_empty());
        assert!(
            apply(
                &mut objects,
                &mut rv,
                &json!({"type": "ERROR", "object": {"message": "too old resource version"}})
            )
            .is_err()
        );
    }
}
