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

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/../../fixtures/openapi/kube-apiserver-1.36.3/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn is_v1alpha2(doc: &DocPath) -> bool {
    doc.group_version() == ("scheduling.k8s.io", Some("v1alpha2"))
}

/// The real 1.36.3 document as JSON and as protobuf list the same paths, definitions and
/// parameters: the gnostic field numbers read here are the ones kube-openapi writes.
#[test]
fn a_real_protobuf_document_names_what_its_json_names() {
    let json: Value = serde_json::from_slice(&fixture("openapi_v2.json")).expect("JSON");
    let from_pb = Names::of_protobuf(&fixture("openapi_v2.pb")).expect("protobuf");
    let from_json = Names::of_json(&json);
    assert!(from_json.paths.len() > 100, "{}", from_json.paths.len());
    assert_eq!(from_pb.paths, from_json.paths);
    assert_eq!(from_pb.definitions, from_json.definitions);
    assert_eq!(from_pb.parameters, from_json.parameters);
}

/// A local document without `scheduling.k8s.io/v1alpha2` (as 1.35 has none) merged with the
/// real 1.36.3 one: every v1alpha2 path and what it references come in, in both formats, and
/// the protobuf entries are the real document's bytes.
#[test]
fn a_real_group_version_merged_into_a_document_without_it() {
    let peer_json: Value = serde_json::from_slice(&fixture("openapi_v2.json")).expect("JSON");
    let peer_pb = Bytes::from(fixture("openapi_v2.pb"));
    let mut local_json = peer_json.clone();
    let paths = local_json["paths"].as_object_mut().expect("paths");
    paths.retain(|p, _| !doc_of_path(p).is_some_and(|d| is_v1alpha2(&d)));
    let defs = local_json["definitions"]
        .as_object_mut()
        .expect("definitions");
    defs.retain(|d, _| !d.starts_with("io.k8s.api.scheduling.v1alpha2."));
    let local_names = Names::of_json(&local_json);
    let sel = select(&local_names, &[("b".into(), &peer_json)], |d, _| {
        is_v1alpha2(d)
    });
    assert!(
        sel[0]
            .paths
            .contains("/apis/scheduling.k8s.io/v1alpha2/namespaces/{namespace}/workloads/{name}")
    );
    assert!(
        sel[0]
            .definitions
            .contains("io.k8s.api.scheduling.v1alpha2.WorkloadSpec")
    );
    assert!(
        sel[0]
            .definitions
            .iter()
            .all(|d| d.starts_with("io.k8s.api.scheduling.v1alpha2.")),
        "only what the local document lacks: {:?}",
        sel[0].definitions
    );
    let mut merged = local_json.clone();
    merge_json(&mut merged, &[(&peer_json, &sel[0])]);
    assert_eq!(
        merged, peer_json,
        "the local document plus v1alpha2 is the whole one"
    );

    // The same in protobuf: a local document with the same entries, then the merge.
    let parts = proto::Parts::decode(&peer_pb).expect("protobuf");
    let keep = |l: &[proto::Named], names: &HashSet<String>| -> Vec<proto::Named> {
        l.iter()
            .filter(|n| names.contains(&n.name))
            .cloned()
            .collect()
    };
    let local_pb = proto::Parts {
        paths: Some(proto::Paths {
            path: keep(
                &parts.paths.as_ref().expect("paths").path,
                &local_names.paths,
            ),
        }),
        definitions: Some(proto::NamedList {
            additional_properties: keep(
                &parts
                    .definitions
                    .as_ref()
                    .expect("definitions")
                    .additional_properties,
                &local_names.definitions,
            ),
        }),
        parameters: parts.parameters.clone(),
    }
    .encode();
    let merged_pb =
        merge_protobuf(&Bytes::from(local_pb), &[(peer_pb.clone(), &sel[0])]).expect("merge");
    let merged_names = Names::of_protobuf(&merged_pb).expect("decodes as one document");
    let whole = Names::of_json(&peer_json);
    assert_eq!(merged_names.paths, whole.paths);
    assert_eq!(merged_names.definitions, whole.definitions);
    let workload = |doc: &[u8]| {
        proto::Parts::decode(doc)
            .expect("protobuf")
            .definitions
            .expect("definitions")
            .additional_properties
            .into_iter()
            .find(|n| n.name == "io.k8s.api.scheduling.v1alpha2.Workload")
            .expect("Workload")
    };
    assert_eq!(workload(&merged_pb), workload(&peer_pb));
}
