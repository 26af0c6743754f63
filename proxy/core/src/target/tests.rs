//! Reading a target and judging requests against it.

use std::sync::Arc;

use super::*;
use crate::discovery::Snapshot;
use crate::testkit::snapshot;

/// A fresh directory under the system's temporary one, removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(files: &[(&str, &str)]) -> Dir {
        let path = std::env::temp_dir().join(format!(
            "mvproxy-target-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(&path).unwrap();
        for (name, body) in files {
            std::fs::write(path.join(name), body).unwrap();
        }
        Dir(path)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const CORE: &str = r#"{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","metadata":{},"items":[{"metadata":{},"versions":[{"version":"v1","resources":[{"resource":"pods","responseKind":{"group":"","version":"v1","kind":"Pod"},"scope":"Namespaced","singularResource":"pod","verbs":["get"]}]}]}]}"#;
const APIS: &str = r#"{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","metadata":{},"items":[
 {"metadata":{"name":"flowcontrol.apiserver.k8s.io"},"versions":[{"version":"v1","resources":[{"resource":"flowschemas","scope":"Cluster","singularResource":"flowschema","verbs":["get"]}]}]},
 {"metadata":{"name":"apps"},"versions":[{"version":"v1","resources":[{"resource":"deployments","scope":"Namespaced","singularResource":"deployment","verbs":["get"]}]}]}]}"#;

fn staging(version: Option<&str>) -> Dir {
    let mut files = vec![("api.json", CORE), ("apis.json", APIS)];
    if let Some(v) = version {
        files.push(("version.json", v));
    }
    Dir::new(&files)
}

#[test]
fn a_directory_is_read_and_labelled_by_its_git_version_else_custom() {
    let dir = staging(Some(
        r#"{"major":"1","minor":"37","gitVersion":"v1.37.0-rc.1"}"#,
    ));
    let t = Target::from_dir(&dir.0).unwrap();
    assert_eq!(t.label(), "v1.37.0-rc.1");
    assert!(t.serves(&Gvr::new("", "v1", "pods")));
    assert!(t.serves(&Gvr::new("apps", "v1", "deployments")));
    assert!(!t.serves(&Gvr::new("apps", "v1beta1", "deployments")));
    let without = staging(None);
    assert_eq!(Target::from_dir(&without.0).unwrap().label(), CUSTOM_TARGET);
}

#[test]
fn a_malformed_file_is_named_with_the_json_path_of_the_fault() {
    let bad_resource = APIS.replace(r#""resource":"deployments""#, r#""resource":7"#);
    let dir = Dir::new(&[("api.json", CORE), ("apis.json", &bad_resource)]);
    let e = Target::from_dir(&dir.0).unwrap_err();
    let TargetError::Malformed { file, path, .. } = &e else {
        panic!("{e:?}");
    };
    assert!(file.ends_with("apis.json"), "{e}");
    assert_eq!(path, "items[1].versions[0].resources[0].resource", "{e}");
    assert!(e.to_string().contains("apis.json: at items[1]"), "{e}");

    // `kubectl get --raw /apis` saves the legacy APIGroupList: refused at `kind`.
    let legacy = r#"{"kind":"APIGroupList","apiVersion":"v1","groups":[]}"#;
    let dir = Dir::new(&[("api.json", CORE), ("apis.json", legacy)]);
    let e = Target::from_dir(&dir.0).unwrap_err();
    assert!(e.to_string().contains("at kind"), "{e}");

    let empty_version = APIS.replace(r#""version":"v1""#, r#""version":"""#);
    let dir = Dir::new(&[("api.json", CORE), ("apis.json", &empty_version)]);
    let e = Target::from_dir(&dir.0).unwrap_err();
    assert!(
        e.to_string().contains("at items[0].versions[0].version"),
        "{e}"
    );

    let dir = Dir::new(&[("api.json", "{"), ("apis.json", APIS)]);
    let e = Target::from_dir(&dir.0).unwrap_err();
    assert!(e.to_string().contains("api.json"), "{e}");

    let dir = Dir::new(&[
        ("api.json", CORE),
        ("apis.json", APIS),
        ("version.json", "[]"),
    ]);
    let e = Target::from_dir(&dir.0).unwrap_err();
    assert!(e.to_string().contains("version.json: at ."), "{e}");

    let dir = Dir::new(&[("apis.json", APIS)]);
    let e = Target::from_dir(&dir.0).unwrap_err();
    assert!(
        matches!(&e, TargetError::Read { file, .. } if file.ends_with("api.json")),
        "{e}"
    );
}

#[test]
fn only_built_in_apis_something_serves_are_judged_missing() {
    let dir = staging(None);
    let t = Target::from_dir(&dir.0).unwrap();
    let snap = snapshot(&[
        ("", "v1", "pods"),
        ("flowcontrol.apiserver.k8s.io", "v1beta3", "flowschemas"),
        ("widgets.example.com", "v1", "widgets"),
    ]);
    let judge = |g: &str, v: &str, r: &str| t.judge(&Gvr::new(g, v, r), &snap);
    assert_eq!(
        judge("", "v1", "pods"),
        Verdict::Fine,
        "served by the target"
    );
    assert_eq!(
        judge("flowcontrol.apiserver.k8s.io", "v1beta3", "flowschemas"),
        Verdict::Missing,
        "a running server serves it, the target does not"
    );
    assert_eq!(
        t.use_instead(&Gvr::new(
            "flowcontrol.apiserver.k8s.io",
            "v1beta3",
            "flowschemas"
        )),
        Some("v1")
    );
    assert_eq!(
        judge("widgets.example.com", "v1", "widgets"),
        Verdict::Fine,
        "a CRD's group is no release's"
    );
    assert_eq!(
        judge("apps", "v9", "made-up"),
        Verdict::Fine,
        "nothing serves it anywhere: not counted, so clients cannot grow the label set"
    );
    // Before discovery is synced, what the catalog's releases serve is judged already.
    let empty = Snapshot::default();
    assert_eq!(
        t.judge(&Gvr::new("", "v1", "configmaps"), &empty),
        Verdict::Missing,
        "every catalog release serves configmaps; this target does not"
    );
    assert_eq!(t.use_instead(&Gvr::new("", "v1", "configmaps")), None);
}

#[test]
fn a_catalog_release_serves_what_its_server_served() {
    let t = Target::from_catalog("1.36").unwrap();
    assert_eq!(t.label(), "1.36");
    assert!(t.serves(&Gvr::new("apps", "v1", "deployments")));
    assert!(!t.serves(&Gvr::new(
        "flowcontrol.apiserver.k8s.io",
        "v1beta3",
        "flowschemas"
    )));
    let snap = Arc::new(snapshot(&[(
        "flowcontrol.apiserver.k8s.io",
        "v1beta3",
        "flowschemas",
    )]));
    assert_eq!(
        t.judge(
            &Gvr::new("flowcontrol.apiserver.k8s.io", "v1beta3", "flowschemas"),
            &snap
        ),
        Verdict::Missing
    );
    assert_eq!(
        t.use_instead(&Gvr::new(
            "flowcontrol.apiserver.k8s.io",
            "v1beta3",
            "flowschemas"
        )),
        Some("v1")
    );
}

/// A GVR the target lacks is judged two ways: the target release cannot serve it whatever its
/// configuration, or it can once turned on (its every-API capture lists it).
#[test]
fn a_missing_gvr_is_judged_by_what_the_target_can_serve_at_all() {
    let t = Target::from_catalog("1.36").unwrap();
    let empty = Snapshot::default();
    // An alpha API 1.33 and 1.34 can serve, replaced by v1beta1 in 1.35: no 1.36 serves it.
    let svm = Gvr::new(
        "storagemigration.k8s.io",
        "v1alpha1",
        "storageversionmigrations",
    );
    assert_eq!(
        t.judge(&svm, &empty),
        Verdict::Missing,
        "a built-in group, never on 1.36"
    );
    assert_eq!(Verdict::Missing.availability(), Some("never"));
    // A beta API 1.36 serves only when turned on.
    let taints = Gvr::new("resource.k8s.io", "v1beta2", "devicetaintrules");
    assert!(!t.serves(&taints));
    assert_eq!(t.judge(&taints, &empty), Verdict::OffByDefault);
    assert_eq!(Verdict::OffByDefault.availability(), Some("off_by_default"));
    assert_eq!(runtime_config(&taints), "resource.k8s.io/v1beta2=true");
    assert_eq!(runtime_config(&Gvr::new("", "v1", "pods")), "api/v1=true");
    // What it serves by default is fine.
    assert_eq!(
        t.judge(&Gvr::new("apps", "v1", "deployments"), &empty),
        Verdict::Fine
    );
}

#[test]
fn a_directory_of_a_catalog_release_can_serve_what_that_release_can() {
    // a staging 1.36 server whose saved documents list only pods and deployments
    let dir = staging(Some(r#"{"major":"1","minor":"36","gitVersion":"v1.36.3"}"#));
    let t = Target::from_dir(&dir.0).unwrap();
    let empty = Snapshot::default();
    assert_eq!(
        t.judge(&Gvr::new("", "v1", "configmaps"), &empty),
        Verdict::OffByDefault,
        "1.36 serves configmaps; this server was not configured to"
    );
    assert_eq!(
        t.judge(
            &Gvr::new(
                "storagemigration.k8s.io",
                "v1alpha1",
                "storageversionmigrations"
            ),
            &empty
        ),
        Verdict::Missing
    );
}
