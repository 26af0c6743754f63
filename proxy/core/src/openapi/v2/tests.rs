use prost::Message;
use serde_json::json;

use super::*;

/// A peer serving `scheduling.k8s.io/v1alpha2` (the local server does not) and `apps/v1`.
fn peer_doc() -> Value {
    json!({
        "swagger": "2.0",
        "paths": {
            "/apis/apps/v1/deployments": {"get": {"responses": {"200": {"schema": {"$ref": "#/definitions/io.k8s.api.apps.v1.DeploymentList"}}}}},
            "/apis/scheduling.k8s.io/": {"get": {"responses": {"200": {"schema": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.APIGroup"}}}}},
            "/apis/scheduling.k8s.io/v1alpha2/namespaces/{namespace}/workloads": {
                "parameters": [{"$ref": "#/parameters/body-2Y1dVQaQ"}],
                "get": {"responses": {"200": {"schema": {"$ref": "#/definitions/io.k8s.api.scheduling.v1alpha2.WorkloadList"}}}}
            }
        },
        "definitions": {
            "io.k8s.api.apps.v1.DeploymentList": {"type": "object"},
            "io.k8s.apimachinery.pkg.apis.meta.v1.APIGroup": {"type": "object", "description": "peer's"},
            "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions": {"type": "object", "description": "peer's"},
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {"type": "object", "description": "peer's"},
            "io.k8s.api.scheduling.v1alpha2.WorkloadList": {"properties": {"items": {"items": {"$ref": "#/definitions/io.k8s.api.scheduling.v1alpha2.Workload"}}}},
            "io.k8s.api.scheduling.v1alpha2.Workload": {
                "properties": {
                    "metadata": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"},
                    "spec": {"allOf": [{"$ref": "#/definitions/io.k8s.api.scheduling.v1alpha2.WorkloadSpec"}]}
                },
                "x-kubernetes-group-version-kind": [{"group": "scheduling.k8s.io", "kind": "Workload", "version": "v1alpha2"}]
            },
            "io.k8s.api.scheduling.v1alpha2.WorkloadSpec": {"properties": {"podGroups": {"type": "array", "x-kubernetes-list-type": "map"}}},
            "io.k8s.api.scheduling.v1alpha2.Unreferenced": {"type": "object"}
        },
        "parameters": {
            "body-2Y1dVQaQ": {"in": "body", "schema": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions"}},
            "unused-XYZ": {"in": "query"}
        }
    })
}

fn local_doc() -> Value {
    json!({
        "swagger": "2.0",
        "paths": {"/apis/apps/v1/deployments": {"get": {"description": "local's"}}},
        "definitions": {
            "io.k8s.api.apps.v1.DeploymentList": {"type": "object", "description": "local's"},
            "io.k8s.apimachinery.pkg.apis.meta.v1.APIGroup": {"type": "object", "description": "local's"},
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {"type": "object", "description": "local's"}
        }
    })
}

fn routed(doc: &DocPath, peer: &ServerName) -> bool {
    peer.as_str() == "b" && doc.group_version().0 == "scheduling.k8s.io"
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn the_paths_routed_to_the_peer_and_what_they_reference_that_local_lacks() {
    let peer = peer_doc();
    let selections = select(
        &Names::of_json(&local_doc()),
        &[("b".into(), &peer)],
        routed,
    );
    assert_eq!(
        selections,
        vec![Selection {
            paths: set(&[
                "/apis/scheduling.k8s.io/",
                "/apis/scheduling.k8s.io/v1alpha2/namespaces/{namespace}/workloads"
            ]),
            definitions: set(&[
                "io.k8s.api.scheduling.v1alpha2.Workload",
                "io.k8s.api.scheduling.v1alpha2.WorkloadList",
                "io.k8s.api.scheduling.v1alpha2.WorkloadSpec",
                "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
            ]),
            parameters: set(&["body-2Y1dVQaQ"]),
        }]
    );
}

#[test]
fn json_merge_adds_the_selection_and_keeps_every_local_entry() {
    let peer = peer_doc();
    let mut local = local_doc();
    let sel = select(&Names::of_json(&local), &[("b".into(), &peer)], routed);
    merge_json(&mut local, &[(&peer, &sel[0])]);
    assert_eq!(
        local["definitions"]["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]["description"],
        "local's"
    );
    assert_eq!(
        local["paths"]["/apis/apps/v1/deployments"]["get"]["description"],
        "local's"
    );
    assert_eq!(
        local["definitions"]["io.k8s.api.scheduling.v1alpha2.Workload"],
        peer["definitions"]["io.k8s.api.scheduling.v1alpha2.Workload"]
    );
    assert!(
        local["definitions"]
            .get("io.k8s.api.scheduling.v1alpha2.Unreferenced")
            .is_none()
    );
    assert_eq!(
        local["parameters"]["body-2Y1dVQaQ"],
        peer["parameters"]["body-2Y1dVQaQ"]
    );
    assert!(local["parameters"].get("unused-XYZ").is_none());
}

#[test]
fn v2_paths_name_their_group_version() {
    assert_eq!(
        doc_of_path("/apis/scheduling.k8s.io/v1alpha2/workloads"),
        Some(DocPath::GroupVersion {
            group: "scheduling.k8s.io".into(),
            version: "v1alpha2".into()
        })
    );
    assert_eq!(
        doc_of_path("/apis/scheduling.k8s.io/"),
        Some(DocPath::Group {
            group: "scheduling.k8s.io".into()
        })
    );
    assert_eq!(
        doc_of_path("/api/v1/pods"),
        Some(DocPath::Core {
            version: "v1".into()
        })
    );
    assert_eq!(doc_of_path("/version/"), None);
    assert_eq!(doc_of_path("/apis/"), None);
}

/// gnostic's `Document` with the fields a test sets: `swagger` (1) besides the merged ones.
#[derive(Clone, PartialEq, Message)]
struct TestDocument {
    #[prost(string, tag = "1")]
    swagger: String,
    #[prost(message, optional, tag = "8")]
    paths: Option<proto::Paths>,
    #[prost(message, optional, tag = "9")]
    definitions: Option<proto::NamedList>,
}

fn named(names: &[&str]) -> Vec<proto::Named> {
    names
        .iter()
        .map(|n| proto::Named {
            name: (*n).to_owned(),
            value: Bytes::from(format!("\x0a\x03{}", &n[..3])),
        })
        .collect()
}

#[test]
fn protobuf_merge_appends_the_selected_entries_to_the_local_document() {
    let local = TestDocument {
        swagger: "2.0".into(),
        paths: Some(proto::Paths {
            path: named(&["/apis/apps/v1/deployments"]),
        }),
        definitions: Some(proto::NamedList {
            additional_properties: named(&["ObjectMeta"]),
        }),
    };
    let peer = TestDocument {
        swagger: "2.0".into(),
        paths: Some(proto::Paths {
            path: named(&["/apis/apps/v1/deployments", "/apis/s/v1/workloads"]),
        }),
        definitions: Some(proto::NamedList {
            additional_properties: named(&["ObjectMeta", "Workload", "Unreferenced"]),
        }),
    };
    let local_bytes = Bytes::from(local.encode_to_vec());
    let sel = Selection {
        paths: set(&["/apis/s/v1/workloads"]),
        definitions: set(&["Workload"]),
        parameters: BTreeSet::new(),
    };
    let merged =
        merge_protobuf(&local_bytes, &[(Bytes::from(peer.encode_to_vec()), &sel)]).expect("merge");
    assert!(merged.starts_with(&local_bytes));
    let decoded = TestDocument::decode(merged.as_slice()).expect("one document");
    assert_eq!(decoded.swagger, "2.0");
    let names = |l: Vec<proto::Named>| l.into_iter().map(|n| n.name).collect::<Vec<_>>();
    assert_eq!(
        names(decoded.paths.expect("paths").path),
        ["/apis/apps/v1/deployments", "/apis/s/v1/workloads"]
    );
    let defs = decoded
        .definitions
        .expect("definitions")
        .additional_properties;
    assert_eq!(
        defs.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(),
        ["ObjectMeta", "Workload"]
    );
    assert_eq!(defs[1].value, Bytes::from_static(b"\x0a\x03Wor"));
    let local_names = Names::of_protobuf(&merged).expect("decodes");
    assert!(local_names.definitions.contains("Workload"));
}
