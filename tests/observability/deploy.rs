//! The compose stack and the Kubernetes manifests: pinned images, paths into the repository
//! and kubeadm's, and configs that `mvproxy check-config` accepts.

use super::*;

#[test]
fn compose_stack_is_pinned_and_wired_to_the_repository_files() {
    let compose = yaml("deploy/compose.yaml");
    let services = compose["services"].as_mapping().expect("services").clone();
    let mut images = Vec::new();
    for (name, svc) in &services {
        let name = s(name);
        let image = s(&svc["image"]);
        let (repo_part, tag) = image
            .rsplit_once(':')
            .unwrap_or_else(|| panic!("{name}: image {image} has no tag"));
        assert!(
            !repo_part.is_empty() && tag != "latest" && tag.chars().any(|c| c.is_ascii_digit()),
            "{name}: {image} is not pinned"
        );
        images.push(repo_part.to_owned());
        for v in seq(&svc["volumes"]) {
            let src = s(&v).split(':').next().unwrap_or_default();
            if src.starts_with('.') {
                assert!(
                    repo().join("deploy").join(src).exists(),
                    "{name}: mounts missing {src}"
                );
            }
        }
        for p in seq(&svc["ports"]) {
            assert!(
                s(&p).starts_with("127.0.0.1:"),
                "{name}: port {} not on loopback",
                s(&p)
            );
        }
    }
    for want in [
        "otel/opentelemetry-collector-contrib",
        "grafana/grafana",
        "grafana/tempo",
        "jaegertracing/jaeger",
        "prom/prometheus",
    ] {
        assert!(
            images.iter().any(|i| i == want),
            "{want} not in the stack: {images:?}"
        );
    }
    let collector = &compose["services"]["otel-collector"];
    let config_arg = seq(&collector["command"])
        .iter()
        .map(|a| s(a).to_owned())
        .find(|a| a.starts_with("--config="))
        .expect("--config");
    let in_container = config_arg.trim_start_matches("--config=");
    assert!(
        seq(&collector["volumes"])
            .iter()
            .any(|v| s(v) == format!("../otel-collector/config.yaml:{in_container}:ro")),
        "the collector does not mount otel-collector/config.yaml at {in_container}"
    );
    let prom_cmd: Vec<String> = seq(&compose["services"]["prometheus"]["command"])
        .iter()
        .map(|a| s(a).to_owned())
        .collect();
    assert!(
        prom_cmd.contains(&"--enable-feature=exemplar-storage".to_owned()),
        "{prom_cmd:?}"
    );
    // Hosts the configs name are services of the stack.
    let names: BTreeSet<String> = keys(&compose["services"]).into_iter().collect();
    let ds = read("dashboards/provisioning/datasources/mvproxy.yaml");
    for host in ["prometheus:9090", "tempo:3200", "jaeger:16686"] {
        assert!(ds.contains(&format!("http://{host}")), "datasource {host}");
        assert!(names.contains(host.split(':').next().unwrap_or_default()));
    }
    assert!(names.contains("otel-collector"));
}

/// Every config the Kubernetes manifests ship, with kubeadm's pki paths replaced by `pki`.
fn kubernetes_configs(pki: &Path) -> Vec<(String, String)> {
    let fix = |t: &str| t.replace("/etc/kubernetes/pki/", &format!("{}/", pki.display()));
    let mut out = vec![(
        "static-pod/config.yaml".to_owned(),
        fix(&read("deploy/kubernetes/static-pod/config.yaml")),
    )];
    for doc in yaml_docs("deploy/kubernetes/configmap.yaml") {
        for (k, v) in doc["data"].as_mapping().into_iter().flatten() {
            out.push((format!("configmap {}", s(k)), fix(s(v))));
        }
    }
    out
}

async fn check_config(dir: &Path, text: &str) -> (i32, String) {
    let path = dir.join("config.yaml");
    std::fs::write(&path, text).expect("write config");
    let out = tokio::time::timeout(
        PATIENCE,
        tokio::process::Command::new(mvproxy_bin())
            .args(["check-config", "--config"])
            .arg(&path)
            .output(),
    )
    .await
    .expect("check-config hung")
    .expect("run mvproxy");
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[tokio::test]
async fn kubernetes_manifests_use_kubeadm_paths_and_configs_mvproxy_accepts() {
    // RBAC: read identity Leases in kube-system and EndpointSlices in default.
    let rbac = yaml_docs("deploy/kubernetes/rbac.yaml");
    let kind = |k: &str| {
        rbac.iter()
            .filter(|d| s(&d["kind"]) == k)
            .cloned()
            .collect::<Vec<_>>()
    };
    let sa = &kind("ServiceAccount")[0];
    let sa_name = s(&sa["metadata"]["name"]).to_owned();
    let roles = kind("Role");
    for (ns, group, resource) in [
        ("kube-system", "coordination.k8s.io", "leases"),
        ("default", "discovery.k8s.io", "endpointslices"),
    ] {
        let role = roles
            .iter()
            .find(|r| {
                s(&r["metadata"]["namespace"]) == ns
                    && seq(&r["rules"])
                        .iter()
                        .any(|rule| seq(&rule["resources"]).iter().any(|x| s(x) == resource))
            })
            .unwrap_or_else(|| panic!("no Role for {resource} in {ns}"));
        let rule = &seq(&role["rules"])[0];
        assert_eq!(s(&seq(&rule["apiGroups"])[0]), group);
        let verbs: BTreeSet<String> = seq(&rule["verbs"])
            .iter()
            .map(|v| s(v).to_owned())
            .collect();
        assert_eq!(
            verbs,
            ["get", "list", "watch"].map(str::to_owned).into(),
            "read-only {resource}"
        );
        let role_name = s(&role["metadata"]["name"]);
        assert!(
            kind("RoleBinding")
                .iter()
                .any(|b| s(&b["roleRef"]["name"]) == role_name
                    && s(&b["metadata"]["namespace"]) == ns
                    && seq(&b["subjects"]).iter().any(|x| s(&x["name"]) == sa_name
                        && s(&x["namespace"]) == s(&sa["metadata"]["namespace"]))),
            "{role_name} not bound to the ServiceAccount"
        );
    }
    // The proxy beside each API server: the DaemonSet (with the ServiceAccount and ConfigMap)
    // and the static pod, both on the host network with kubeadm's pki, pinned to this version.
    let version = env!("CARGO_PKG_VERSION");
    let ds = &yaml_docs("deploy/kubernetes/daemonset.yaml")[0];
    let static_pod = &yaml_docs("deploy/kubernetes/static-pod/mvproxy.yaml")[0];
    assert_eq!(
        s(&ds["spec"]["template"]["spec"]["serviceAccountName"]),
        sa_name
    );
    for spec in [&ds["spec"]["template"]["spec"], &static_pod["spec"]] {
        assert_eq!(spec["hostNetwork"].as_bool(), Some(true));
        let container = &seq(&spec["containers"])[0];
        assert_eq!(s(&container["image"]), format!("mvproxy:{version}"));
        assert!(
            seq(&spec["volumes"])
                .iter()
                .any(|v| s(&v["hostPath"]["path"]) == "/etc/kubernetes/pki")
        );
        assert_eq!(s(&seq(&container["args"])[0]), "serve");
    }
    let cm = &yaml_docs("deploy/kubernetes/configmap.yaml")[0];
    assert!(
        seq(&ds["spec"]["template"]["spec"]["volumes"])
            .iter()
            .any(|v| s(&v["configMap"]["name"]) == s(&cm["metadata"]["name"])),
        "the DaemonSet does not mount the ConfigMap"
    );

    // Each shipped config is one mvproxy accepts, with the kubeadm defaults for the peer CA
    // and the front-proxy client certificate, and front-proxy identity: the peers are other
    // mvproxies, which pass a peer's discovery reads on only from a front-proxy client.
    let pki = TempDir::new("pki");
    for f in [
        "ca.crt",
        "apiserver.crt",
        "apiserver.key",
        "front-proxy-ca.crt",
        "front-proxy-client.crt",
        "front-proxy-client.key",
    ] {
        std::fs::write(pki.path().join(f), "placeholder").expect("pki file");
    }
    let dir = TempDir::new("k8s-config");
    let configs = kubernetes_configs(pki.path());
    assert!(configs.len() >= 4, "{configs:?}");
    for (name, text) in &configs {
        assert!(
            text.contains(&format!("peer-ca-file: {}/ca.crt", pki.path().display())),
            "{name}"
        );
        assert!(
            text.contains(&format!(
                "proxy-client-cert-file: {}/front-proxy-client.crt",
                pki.path().display()
            )),
            "{name}"
        );
        assert!(
            text.lines().any(|l| l == "identity: front-proxy")
                && text.contains(&format!(
                    "requestheader-client-ca-file: {}/front-proxy-ca.crt",
                    pki.path().display()
                )),
            "{name}: {text}"
        );
        let (code, out) = check_config(dir.path(), text).await;
        assert_eq!(code, 0, "{name}: {out}");
        assert!(out.contains("valid"), "{name}: {out}");
    }
    // Switching a shipped config to a cluster peer source, or dropping the users' CA that
    // front-proxy identity needs: what must change is refused with the field named, and the
    // changed config is valid.
    let (_, base) = &configs[0];
    for (line, field) in [
        ("peer-source: leases", "peer:"),
        ("peer-source: endpointslices", "peer:"),
    ] {
        let (code, out) = check_config(dir.path(), &format!("{base}\n{line}\n")).await;
        assert_eq!(code, 2, "{line}: {out}");
        assert!(out.contains(field), "{out}");
    }
    let without_client_ca: String = base
        .lines()
        .filter(|l| !l.starts_with("client-ca-file:"))
        .map(|l| format!("{l}\n"))
        .collect();
    let (code, out) = check_config(dir.path(), &without_client_ca).await;
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("client-ca-file"), "{out}");
    let without_peers: String = base
        .lines()
        .take_while(|l| !l.starts_with("peers:"))
        .chain(
            base.lines()
                .skip_while(|l| !l.starts_with("peers:"))
                .skip(1)
                .skip_while(|l| l.starts_with("  - ")),
        )
        .map(|l| format!("{l}\n"))
        .collect();
    let (code, out) =
        check_config(dir.path(), &format!("{without_peers}peer-source: leases\n")).await;
    assert_eq!(code, 0, "{without_peers}: {out}");

    let kubeadm = yaml_docs("deploy/kubernetes/kubeadm-config.yaml");
    let cluster = kubeadm
        .iter()
        .find(|d| s(&d["kind"]) == "ClusterConfiguration")
        .expect("ClusterConfiguration");
    assert!(
        seq(&cluster["apiServer"]["extraArgs"])
            .iter()
            .any(|a| s(&a["name"]) == "peer-ca-file"
                && s(&a["value"]) == "/etc/kubernetes/pki/ca.crt"),
        "{cluster:?}"
    );
    assert!(kubeadm.iter().any(|d| s(&d["kind"]) == "InitConfiguration"
        && d["localAPIEndpoint"]["advertiseAddress"].is_string()));
}
