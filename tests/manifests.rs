//! The shipped Kubernetes manifests (`deploy/kubernetes/`) against the command line they
//! start: the static pod's and the DaemonSet's `serve` arguments, their environment and the
//! configuration files they mount (the static pod's `config.yaml`, every key of the
//! ConfigMap) go through `mvproxy check-config` as the container would see them, so a flag
//! renamed, a key mistyped or a certificate path not mounted fails here. The probes and
//! container ports must be the ports the configuration listens on.
//!
//! The container's filesystem is made from the manifest's volumes: each hostPath a directory
//! of a fake node holding what kubeadm puts there, each ConfigMap a directory of its keys;
//! every absolute path in the arguments and the configuration is mapped through the
//! volumeMounts (a path outside every mount is a failure: the container could not read it).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use integration::*;
use serde_yaml_ng::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("read manifest");
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("manifest parses"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} missing in {v:?}"))
}

/// Files kubeadm writes to /etc/kubernetes/pki on a control-plane node
/// (https://kubernetes.io/docs/setup/best-practices/certificates/): the only ones a manifest
/// may rely on finding there.
const KUBEADM_PKI: &[&str] = &[
    "ca.crt",
    "ca.key",
    "apiserver.crt",
    "apiserver.key",
    "apiserver-kubelet-client.crt",
    "apiserver-kubelet-client.key",
    "front-proxy-ca.crt",
    "front-proxy-ca.key",
    "front-proxy-client.crt",
    "front-proxy-client.key",
    "sa.key",
    "sa.pub",
];

/// A container of a manifest, ready to run `check-config` as it would run `serve`.
struct Container {
    args: Vec<String>,
    env: BTreeMap<String, String>,
    /// mountPath -> directory standing in for the volume.
    mounts: Vec<(String, PathBuf)>,
    /// containerPort by port name.
    ports: BTreeMap<String, u64>,
    /// (port, scheme) of the readiness and liveness probes.
    probes: Vec<(u64, String)>,
}

impl Container {
    /// `pod_spec`'s container "mvproxy", on node `node` (its `spec.nodeName`), with its volumes
    /// made under `root`: hostPaths from `host` (path on the node -> what to write there),
    /// ConfigMaps from `config_maps` (name -> key -> content).
    fn new(
        pod_spec: &Value,
        node: &str,
        root: &Path,
        host: &BTreeMap<&str, Vec<(String, String)>>,
        config_maps: &BTreeMap<String, BTreeMap<String, String>>,
    ) -> Self {
        let c = pod_spec["containers"]
            .as_sequence()
            .expect("containers")
            .iter()
            .find(|c| c["name"] == "mvproxy")
            .expect("a container named mvproxy");
        let mut env = BTreeMap::new();
        for e in c["env"].as_sequence().into_iter().flatten() {
            let value = match e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                Some("spec.nodeName") => node.to_owned(),
                Some(other) => panic!("fieldRef {other} not modelled"),
                None => expand(str_of(e, "value"), &env),
            };
            env.insert(str_of(e, "name").to_owned(), value);
        }
        let args = c["args"]
            .as_sequence()
            .expect("args")
            .iter()
            .map(|a| expand(a.as_str().expect("arg"), &env))
            .collect();
        let mut volumes = BTreeMap::new();
        for v in pod_spec["volumes"].as_sequence().expect("volumes") {
            let dir = root.join(str_of(v, "name"));
            std::fs::create_dir_all(&dir).expect("volume dir");
            if let Some(path) = v["hostPath"]["path"].as_str() {
                let files = host
                    .get(path)
                    .unwrap_or_else(|| panic!("hostPath {path}: nothing known on the node"));
                for (name, content) in files {
                    std::fs::write(dir.join(name), content).expect("write host file");
                }
            } else if let Some(name) = v["configMap"]["name"].as_str() {
                let data = config_maps
                    .get(name)
                    .unwrap_or_else(|| panic!("ConfigMap {name} is not in deploy/kubernetes"));
                for (key, content) in data {
                    std::fs::write(dir.join(key), content).expect("write configmap key");
                }
            } else {
                panic!("volume kind not modelled: {v:?}");
            }
            volumes.insert(str_of(v, "name").to_owned(), dir);
        }
        let mounts = c["volumeMounts"]
            .as_sequence()
            .expect("volumeMounts")
            .iter()
            .map(|m| {
                (
                    str_of(m, "mountPath").to_owned(),
                    volumes[str_of(m, "name")].clone(),
                )
            })
            .collect();
        let ports = c["ports"]
            .as_sequence()
            .expect("ports")
            .iter()
            .map(|p| {
                (
                    str_of(p, "name").to_owned(),
                    p["containerPort"].as_u64().expect("containerPort"),
                )
            })
            .collect();
        let probes = ["readinessProbe", "livenessProbe"]
            .iter()
            .map(|p| {
                let get = &c[*p]["httpGet"];
                (
                    get["port"].as_u64().expect("probe port"),
                    get["scheme"].as_str().unwrap_or("HTTP").to_owned(),
                )
            })
            .collect();
        Container {
            args,
            env,
            mounts,
            ports,
            probes,
        }
    }

    /// Where the container's `path` is in this test's filesystem.
    fn host_path(&self, path: &str) -> PathBuf {
        let (mount, dir) = self
            .mounts
            .iter()
            .filter(|(m, _)| path.starts_with(&format!("{m}/")))
            .max_by_key(|(m, _)| m.len())
            .unwrap_or_else(|| panic!("{path} is under no volumeMount of the container"));
        dir.join(&path[mount.len() + 1..])
    }

    /// `mvproxy check-config` with the container's `serve` arguments and environment, every
    /// path mapped through the mounts (the configuration file's too). Its status line.
    fn check_config(&self, scratch: &Path) -> String {
        assert_eq!(
            self.args.first().map(String::as_str),
            Some("serve"),
            "{:?}",
            self.args
        );
        let mut args = vec!["check-config".to_owned()];
        for arg in &self.args[1..] {
            let (flag, value) = arg
                .split_once('=')
                .unwrap_or_else(|| panic!("{arg}: write flags as --flag=value"));
            let value = if flag == "--config" {
                let file = self.host_path(value);
                let mut yaml: Value = serde_yaml_ng::from_str(
                    &std::fs::read_to_string(&file)
                        .unwrap_or_else(|e| panic!("{value} ({}): {e}", file.display())),
                )
                .expect("config parses");
                for (_, v) in yaml.as_mapping_mut().expect("config is a map").iter_mut() {
                    if let Some(p) = v.as_str().filter(|p| p.starts_with('/')) {
                        *v = Value::from(self.host_path(p).to_string_lossy().into_owned());
                    }
                }
                let mapped = scratch.join("config.yaml");
                std::fs::write(&mapped, serde_yaml_ng::to_string(&yaml).expect("yaml"))
                    .expect("write mapped config");
                mapped.to_string_lossy().into_owned()
            } else if value.starts_with('/') {
                self.host_path(value).to_string_lossy().into_owned()
            } else {
                value.to_owned()
            };
            args.push(format!("{flag}={value}"));
        }
        let out = Command::new(mvproxy_bin())
            .args(&args)
            .env_clear()
            .envs(&self.env)
            .output()
            .expect("run mvproxy");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{args:?}: {}{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    /// The ports the manifest declares and probes are the ones the configuration listens on.
    fn assert_ports(&self, status: &str, admin_tls: bool) {
        let port_of = |what: &str| -> u64 {
            let addr = status
                .split(&format!("{what} "))
                .nth(1)
                .and_then(|s| s.split([',', ')']).next())
                .unwrap_or_else(|| panic!("no {what} in {status}"));
            addr.rsplit(':')
                .next()
                .and_then(|p| p.parse().ok())
                .expect("port")
        };
        assert_eq!(self.ports["https"], port_of("listen"), "{status}");
        assert_eq!(self.ports["admin"], port_of("admin"), "{status}");
        let scheme = if admin_tls { "HTTPS" } else { "HTTP" };
        for (port, s) in &self.probes {
            assert_eq!(
                *port, self.ports["admin"],
                "a probe on another port: {status}"
            );
            assert_eq!(
                s, scheme,
                "probe scheme against the admin listener: {status}"
            );
        }
    }
}

/// `$(VAR)` references, as the kubelet expands them in args and env values.
fn expand(s: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = s.to_owned();
    for (k, v) in env {
        out = out.replace(&format!("$({k})"), v);
    }
    assert!(
        !out.contains("$("),
        "{s}: a variable the container does not define"
    );
    out
}

fn kubeadm_pki() -> Vec<(String, String)> {
    KUBEADM_PKI
        .iter()
        .map(|f| ((*f).to_owned(), format!("placeholder for kubeadm's {f}\n")))
        .collect()
}

#[test]
fn the_static_pods_command_line_is_valid() {
    let dir = tempdir::TempDir::new("manifest-static-pod");
    let deploy = repo().join("deploy/kubernetes/static-pod");
    let pod = documents(&deploy.join("mvproxy.yaml")).remove(0);
    assert_eq!(str_of(&pod, "kind"), "Pod");
    // The manifest's instructions: config.yaml goes to /etc/kubernetes/mvproxy on the node.
    let config = std::fs::read_to_string(deploy.join("config.yaml")).expect("config.yaml");
    let host = BTreeMap::from([
        ("/etc/kubernetes/pki", kubeadm_pki()),
        (
            "/etc/kubernetes/mvproxy",
            vec![("config.yaml".to_owned(), config)],
        ),
    ]);
    let c = Container::new(&pod["spec"], "cp-1", dir.path(), &host, &BTreeMap::new());
    let status = c.check_config(dir.path());
    assert!(
        status.contains("valid (local https://10.0.0.1:6443/, 2 peer(s)"),
        "{status}"
    );
    c.assert_ports(&status, false);
}

#[test]
fn the_daemonsets_command_line_is_valid_on_every_node_of_the_configmap() {
    let dir = tempdir::TempDir::new("manifest-daemonset");
    let deploy = repo().join("deploy/kubernetes");
    let ds = documents(&deploy.join("daemonset.yaml")).remove(0);
    assert_eq!(str_of(&ds, "kind"), "DaemonSet");
    let mut config_maps = BTreeMap::new();
    for cm in documents(&deploy.join("configmap.yaml")) {
        let data = cm["data"]
            .as_mapping()
            .expect("data")
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().expect("key").to_owned(),
                    v.as_str().expect("value").to_owned(),
                )
            })
            .collect::<BTreeMap<_, _>>();
        config_maps.insert(str_of(&cm["metadata"], "name").to_owned(), data);
    }
    let host = BTreeMap::from([("/etc/kubernetes/pki", kubeadm_pki())]);
    let nodes: Vec<String> = config_maps["mvproxy-config"]
        .keys()
        .map(|k| k.trim_end_matches(".yaml").to_owned())
        .collect();
    assert_eq!(nodes, ["cp-1", "cp-2", "cp-3"]);
    for (i, node) in nodes.iter().enumerate() {
        let root = dir.path().join(node);
        let c = Container::new(
            &ds["spec"]["template"]["spec"],
            node,
            &root,
            &host,
            &config_maps,
        );
        let status = c.check_config(&root);
        assert!(
            status.contains(&format!(
                "valid (local https://10.0.0.{}:6443/, 2 peer(s)",
                i + 1
            )),
            "{node}: {status}"
        );
        c.assert_ports(&status, true);
    }
}
