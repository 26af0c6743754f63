//! What no proxy can fix across the skew: a PodGroup keeps `scheduling.k8s.io/podgroup-protection`
//! until a 1.36 kube-controller-manager removes it, so while a 1.35 one leads its deletion
//! waits. mvproxy counts the deletion in `mvproxy_deletions_waiting_total` and lists the object
//! in `/debug/clients` with the controller-manager releases running; once a 1.36 one writes,
//! deletions are no longer judged waiting.

use bytes::Bytes;
use http::{Method, StatusCode};
use integration::*;

const KUBECTL: &str = "kubectl/v1.36.3 (linux/amd64) kubernetes/5a0f4d1";
const KCM_135: &str =
    "kube-controller-manager/v1.35.4 (linux/amd64) kubernetes/1ee4e5a/resourcequota-controller";
const KCM_136: &str =
    "kube-controller-manager/v1.36.3 (linux/amd64) kubernetes/5a0f4d1/resourcequota-controller";
const PODGROUPS: &str = "/apis/scheduling.k8s.io/v1alpha2/namespaces/team-a/podgroups";
const SERIES: &str = "mvproxy_deletions_waiting_total{group=\"scheduling.k8s.io\",version=\"v1alpha2\",resource=\"podgroups\",finalizer=\"scheduling.k8s.io/podgroup-protection\",release=\"1.36+\"}";

/// Creates a PodGroup (with the finalizer 1.36's admission stamps, unless `bare`) and deletes
/// it through the proxy; returns the `DELETE` response's object.
async fn create_and_delete(p: &Proxy, name: &str, bare: bool) -> serde_json::Value {
    let finalizers = if bare {
        serde_json::json!([])
    } else {
        serde_json::json!(["scheduling.k8s.io/podgroup-protection"])
    };
    let body = serde_json::json!({
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "team-a", "finalizers": finalizers},
    });
    let headers = [
        ("user-agent", KUBECTL),
        ("content-type", "application/json"),
    ];
    let url = format!("{}{PODGROUPS}", p.url());
    let r = request(Method::POST, &url, &headers, Bytes::from(body.to_string()))
        .await
        .unwrap();
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    let r = request(
        Method::DELETE,
        &format!("{url}/{name}"),
        &headers,
        Bytes::new(),
    )
    .await
    .unwrap();
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    r.json()
}

/// A write by a controller-manager through the proxy (a ConfigMap, as any controller might).
async fn controller_manager_writes(p: &Proxy, agent: &str, name: &str) {
    let body = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
    });
    let r = request(
        Method::POST,
        &format!("{}/api/v1/namespaces/kube-system/configmaps", p.url()),
        &[("user-agent", agent), ("content-type", "application/json")],
        Bytes::from(body.to_string()),
    )
    .await
    .unwrap();
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
}

async fn waiting_count(p: &Proxy) -> u64 {
    let scrape = get(&format!("{}/metrics", p.admin_url()), &[])
        .await
        .unwrap()
        .text();
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(SERIES)?.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_podgroup_deletion_waiting_on_a_1_36_controller_manager_is_counted_and_listed() {
    let old = standin_release(
        "apiserver-old",
        &fixture("kube-apiserver-1.35.4/aggregated_v2.json"),
        "v1.35.4",
    )
    .await;
    let new = standin_release(
        "apiserver-new",
        &fixture("kube-apiserver-1.36.3/aggregated_v2.json"),
        "v1.36.3",
    )
    .await;
    let args = proxy_args(
        "apiserver-old",
        &old.url(),
        &[("apiserver-new", &new.url())],
    );
    let p = Proxy::serve(&args).await;
    p.ready().await;
    crate::cluster::wait_all_up(&p).await;

    // No controller-manager through this proxy yet: the servers' releases stand in, and a
    // 1.35 one may lead.
    let deleted = create_and_delete(&p, "train-1", false).await;
    assert!(
        deleted["metadata"]["deletionTimestamp"].is_string(),
        "{deleted}"
    );
    assert_eq!(waiting_count(&p).await, 1);

    // A 1.35 controller-manager writes: it leads, and cannot remove the finalizer.
    controller_manager_writes(&p, KCM_135, "quota-1").await;
    create_and_delete(&p, "train-2", false).await;
    // a PodGroup without the finalizer is gone at once: nothing waits
    create_and_delete(&p, "bare", true).await;
    assert_eq!(waiting_count(&p).await, 2);

    let d = get(&format!("{}/debug/clients", p.admin_url()), &[])
        .await
        .unwrap()
        .json();
    let waiting = d["deletions_waiting"].as_array().unwrap();
    assert_eq!(waiting.len(), 2, "{d}");
    let newest = &waiting[0];
    assert_eq!(newest["name"], "train-2", "{d}");
    assert_eq!(newest["namespace"], "team-a");
    assert_eq!(newest["group"], "scheduling.k8s.io");
    assert_eq!(newest["version"], "v1alpha2");
    assert_eq!(newest["resource"], "podgroups");
    assert_eq!(newest["finalizer"], "scheduling.k8s.io/podgroup-protection");
    assert_eq!(newest["controller"], "podgroup-protection-controller");
    assert_eq!(newest["removed_by_release"], "1.36+");
    assert_eq!(
        newest["controller_manager_releases"],
        serde_json::json!(["1.35"])
    );
    assert_eq!(newest["judged_by"], "controller_managers");
    assert_eq!(waiting[1]["name"], "train-1");
    assert_eq!(waiting[1]["judged_by"], "api_servers");
    assert_eq!(
        waiting[1]["controller_manager_releases"],
        serde_json::json!(["1.35", "1.36"])
    );
    assert_eq!(d["controller_managers"][0]["version"], "v1.35.4", "{d}");

    // A 1.36 controller-manager writes too: it runs the controller, nothing more waits.
    controller_manager_writes(&p, KCM_136, "quota-2").await;
    create_and_delete(&p, "train-3", false).await;
    assert_eq!(waiting_count(&p).await, 2);

    p.kill().await;
    old.shutdown().await;
    new.shutdown().await;
}
