//! Peers found in the cluster: identity Leases and the `default/kubernetes` EndpointSlices,
//! read from the local API server with the proxy's token, by watch. Peers appear, restart and
//! leave while mvproxy runs.

use std::time::{Duration, SystemTime};

use http::{Method, StatusCode};
use integration::*;
use serde_json::{Value, json};

use crate::cluster::wait_discovery;

fn lease(name: &str, holder: &str, address: &str, renewed_ago: Duration) -> Value {
    let renew = humantime_rfc3339(SystemTime::now() - renewed_ago);
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": "kube-system",
            "labels": {"apiserver.kubernetes.io/identity": "kube-apiserver"},
            "annotations": {"kubernetes.io/peer-advertise-address": address},
        },
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 3600, "renewTime": renew},
    })
}

/// RFC 3339 with microseconds, as Kubernetes' MicroTime.
fn humantime_rfc3339(t: SystemTime) -> String {
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
    let out = std::process::Command::new("date")
        .args([
            "-u",
            "-d",
            &format!("@{secs}"),
            "+%Y-%m-%dT%H:%M:%S.000000Z",
        ])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

async fn ids(p: &Proxy) -> Vec<String> {
    let v = get(&format!("{}/debug/discovery", p.admin_url()), &[])
        .await
        .unwrap()
        .json();
    v["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect()
}

async fn wait_ids(p: &Proxy, want: &[&str]) {
    let want: Vec<String> = want.iter().map(|s| (*s).to_owned()).collect();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let got = ids(p).await;
        if got == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "servers {got:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn peers_come_and_go_with_the_identity_leases() {
    let a = standin("apiserver-a", &apis_134()).await;
    let b = standin("apiserver-b", &apis_131()).await;
    let b_addr = b.addr.to_string();
    a.insert(
        "coordination.k8s.io",
        "v1",
        "leases",
        Some("kube-system"),
        lease(
            "apiserver-a",
            "apiserver-a_1",
            "127.0.0.1:1",
            Duration::ZERO,
        ),
    );
    a.insert(
        "coordination.k8s.io",
        "v1",
        "leases",
        Some("kube-system"),
        lease(
            "apiserver-b",
            "apiserver-b_1",
            &b_addr,
            Duration::from_secs(5),
        ),
    );
    // a server that stopped two hours ago without deleting its lease
    a.insert(
        "coordination.k8s.io",
        "v1",
        "leases",
        Some("kube-system"),
        lease(
            "apiserver-c",
            "apiserver-c_1",
            "127.0.0.1:2",
            Duration::from_secs(7200),
        ),
    );

    let dir = tempdir::TempDir::new("token");
    let token = dir.path().join("token");
    std::fs::write(&token, "sa-token-1\n").unwrap();
    let mut args = proxy_args("apiserver-a", &a.url(), &[]);
    args.extend(
        [
            "--peer-source",
            "leases",
            "--peer-scheme",
            "http",
            "--peer-source-token-file",
            token.to_str().unwrap(),
        ]
        .map(str::to_owned),
    );
    let p = Proxy::serve(&args).await;
    p.ready().await;
    wait_ids(&p, &["apiserver-a", "apiserver-b"]).await;
    crate::cluster::wait_all_up(&p).await;
    let r = get(&format!("{}{OLD_ONLY}", p.url()), &[]).await.unwrap();
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("x-standin-server"), "apiserver-b");
    let lease_reads = requests_for(&a, "/leases");
    assert!(
        lease_reads
            .iter()
            .any(|r| r.path_and_query.contains("watch=1")),
        "watched, not polled"
    );
    assert!(
        lease_reads
            .iter()
            .all(|r| r.headers["authorization"] == "Bearer sa-token-1")
    );

    // the peer leaves: its GVRs are forgotten, the request gets local's own 404
    let del = request(
        Method::DELETE,
        &format!(
            "{}/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/apiserver-b",
            a.url()
        ),
        &[],
        Default::default(),
    )
    .await
    .unwrap();
    assert_eq!(del.status, StatusCode::OK, "{}", del.text());
    wait_ids(&p, &["apiserver-a"]).await;
    let r = get(&format!("{}{OLD_ONLY}", p.url()), &[]).await.unwrap();
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.header("x-standin-server"), "apiserver-a");

    // it comes back (a restart: new holder identity), without restarting mvproxy
    a.insert(
        "coordination.k8s.io",
        "v1",
        "leases",
        Some("kube-system"),
        lease("apiserver-b", "apiserver-b_2", &b_addr, Duration::ZERO),
    );
    wait_ids(&p, &["apiserver-a", "apiserver-b"]).await;
    wait_discovery(&p, |s| s.iter().all(|s| s["up"] == true)).await;
    let r = get(&format!("{}{OLD_ONLY}", p.url()), &[]).await.unwrap();
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("x-standin-server"), "apiserver-b");
}

#[tokio::test]
async fn peers_follow_the_kubernetes_service_endpoint_slices() {
    let a = standin("apiserver-a", &apis_134()).await;
    let b = standin("apiserver-b", &apis_131()).await;
    let slice = |name: &str, port: u16| {
        json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": "default", "labels": {"kubernetes.io/service-name": "kubernetes"}},
            "addressType": "IPv4",
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
            "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}],
        })
    };
    a.insert(
        "discovery.k8s.io",
        "v1",
        "endpointslices",
        Some("default"),
        slice("kubernetes-a", a.addr.port()),
    );
    a.insert(
        "discovery.k8s.io",
        "v1",
        "endpointslices",
        Some("default"),
        slice("kubernetes-b", b.addr.port()),
    );
    let mut args = proxy_args("apiserver-a", &a.url(), &[]);
    args.extend(["--peer-source", "endpointslices", "--peer-scheme", "http"].map(str::to_owned));
    let p = Proxy::serve(&args).await;
    p.ready().await;
    let b_name = format!("127.0.0.1:{}", b.addr.port());
    wait_ids(&p, &["apiserver-a", &b_name]).await;
    crate::cluster::wait_all_up(&p).await;
    let r = get(&format!("{}{OLD_ONLY}", p.url()), &[]).await.unwrap();
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("x-standin-server"), "apiserver-b");

    let del = request(
        Method::DELETE,
        &format!(
            "{}/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/kubernetes-b",
            a.url()
        ),
        &[],
        Default::default(),
    )
    .await
    .unwrap();
    assert_eq!(del.status, StatusCode::OK);
    wait_ids(&p, &["apiserver-a"]).await;
}

#[tokio::test]
async fn peers_can_be_read_through_a_kubeconfig() {
    let a = standin("apiserver-a", &apis_134()).await;
    let b = standin("apiserver-b", &apis_131()).await;
    // the leases live on another server than the local one: only the kubeconfig leads there
    let cluster = standin("cluster", &apis_134()).await;
    cluster.insert(
        "coordination.k8s.io",
        "v1",
        "leases",
        Some("kube-system"),
        lease(
            "apiserver-b",
            "apiserver-b_1",
            &b.addr.to_string(),
            Duration::ZERO,
        ),
    );
    let dir = tempdir::TempDir::new("kubeconfig");
    let kubeconfig = dir.path().join("config");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: mvproxy\ncontexts:\n- name: mvproxy\n  context: {{cluster: c, user: u}}\nclusters:\n- name: c\n  cluster: {{server: '{}'}}\nusers:\n- name: u\n  user: {{token: kc-token}}\n",
            cluster.url()
        ),
    )
    .unwrap();
    let mut args = proxy_args("apiserver-a", &a.url(), &[]);
    args.extend(
        [
            "--peer-source",
            "leases",
            "--peer-scheme",
            "http",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
        ]
        .map(str::to_owned),
    );
    let p = Proxy::serve(&args).await;
    p.ready().await;
    wait_ids(&p, &["apiserver-a", "apiserver-b"]).await;
    let reads = requests_for(&cluster, "/leases");
    assert!(
        !reads.is_empty()
            && reads
                .iter()
                .all(|r| r.headers["authorization"] == "Bearer kc-token")
    );
    assert!(
        requests_for(&a, "/leases").is_empty(),
        "not read from the local server"
    );
}
