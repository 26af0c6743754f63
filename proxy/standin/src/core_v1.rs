//! The built-in core/v1 surface (`/api`), as kube-apiserver 1.34 serves it.
//!
//! The discovery fixtures hold only `/apis`, so the core group is a table here: the
//! resources mvproxy's tests and the demo touch, with the kinds, verbs, short names,
//! singular names, categories and subresources of upstream's `api/discovery/api__v1.json`.

use crate::discovery::{
    ApiGroupDiscovery, ApiResourceDiscovery, ApiSubresourceDiscovery, ApiVersionDiscovery,
    GroupVersionKind, ObjectMeta,
};

/// One core/v1 resource.
struct Resource {
    name: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    categories: &'static [&'static str],
    verbs: &'static [&'static str],
    subresources: &'static [Sub],
}

/// A subresource: name, response kind as (group, version, kind) with empty meaning
/// "the containing group-version", and verbs.
type Sub = (
    &'static str,
    (&'static str, &'static str, &'static str),
    &'static [&'static str],
);

const ALL: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
const GET_PATCH_UPDATE: &[&str] = &["get", "patch", "update"];
const CREATE_GET: &[&str] = &["create", "get"];
const PROXY: &[&str] = &["create", "delete", "get", "patch", "update"];

const RESOURCES: &[Resource] = &[
    Resource {
        name: "configmaps",
        singular: "configmap",
        kind: "ConfigMap",
        namespaced: true,
        short_names: &["cm"],
        categories: &[],
        verbs: ALL,
        subresources: &[],
    },
    Resource {
        name: "endpoints",
        singular: "endpoints",
        kind: "Endpoints",
        namespaced: true,
        short_names: &["ep"],
        categories: &[],
        verbs: ALL,
        subresources: &[],
    },
    Resource {
        name: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        short_names: &["ev"],
        categories: &[],
        verbs: ALL,
        subresources: &[],
    },
    Resource {
        name: "namespaces",
        singular: "namespace",
        kind: "Namespace",
        namespaced: false,
        short_names: &["ns"],
        categories: &[],
        verbs: &[
            "create", "delete", "get", "list", "patch", "update", "watch",
        ],
        subresources: &[
            ("finalize", ("", "", "Namespace"), &["update"]),
            ("status", ("", "", "Namespace"), GET_PATCH_UPDATE),
        ],
    },
    Resource {
        name: "nodes",
        singular: "node",
        kind: "Node",
        namespaced: false,
        short_names: &["no"],
        categories: &[],
        verbs: ALL,
        subresources: &[
            ("proxy", ("", "", "NodeProxyOptions"), PROXY),
            ("status", ("", "", "Node"), GET_PATCH_UPDATE),
        ],
    },
    Resource {
        name: "persistentvolumeclaims",
        singular: "persistentvolumeclaim",
        kind: "PersistentVolumeClaim",
        namespaced: true,
        short_names: &["pvc"],
        categories: &[],
        verbs: ALL,
        subresources: &[(
            "status",
            ("", "", "PersistentVolumeClaim"),
            GET_PATCH_UPDATE,
        )],
    },
    Resource {
        name: "persistentvolumes",
        singular: "persistentvolume",
        kind: "PersistentVolume",
        namespaced: false,
        short_names: &["pv"],
        categories: &[],
        verbs: ALL,
        subresources: &[("status", ("", "", "PersistentVolume"), GET_PATCH_UPDATE)],
    },
    Resource {
        name: "pods",
        singular: "pod",
        kind: "Pod",
        namespaced: true,
        short_names: &["po"],
        categories: &["all"],
        verbs: ALL,
        subresources: &[
            ("attach", ("", "", "PodAttachOptions"), CREATE_GET),
            ("binding", ("", "", "Binding"), &["create"]),
            ("ephemeralcontainers", ("", "", "Pod"), GET_PATCH_UPDATE),
            ("eviction", ("policy", "v1", "Eviction"), &["create"]),
            ("exec", ("", "", "PodExecOptions"), CREATE_GET),
            ("log", ("", "", "Pod"), &["get"]),
            ("portforward", ("", "", "PodPortForwardOptions"), CREATE_GET),
            ("proxy", ("", "", "PodProxyOptions"), PROXY),
            ("status", ("", "", "Pod"), GET_PATCH_UPDATE),
        ],
    },
    Resource {
        name: "secrets",
        singular: "secret",
        kind: "Secret",
        namespaced: true,
        short_names: &[],
        categories: &[],
        verbs: ALL,
        subresources: &[],
    },
    Resource {
        name: "serviceaccounts",
        singular: "serviceaccount",
        kind: "ServiceAccount",
        namespaced: true,
        short_names: &["sa"],
        categories: &[],
        verbs: ALL,
        subresources: &[(
            "token",
            ("authentication.k8s.io", "v1", "TokenRequest"),
            &["create"],
        )],
    },
    Resource {
        name: "services",
        singular: "service",
        kind: "Service",
        namespaced: true,
        short_names: &["svc"],
        categories: &["all"],
        verbs: ALL,
        subresources: &[
            ("proxy", ("", "", "ServiceProxyOptions"), PROXY),
            ("status", ("", "", "Service"), GET_PATCH_UPDATE),
        ],
    },
];

/// The core group (`""`, version `v1`) in aggregated form. The demo's catalog uses it for
/// both releases it models: 1.31 serves the same core resources, and routing keys on
/// group, version and resource only.
pub fn core_group() -> ApiGroupDiscovery {
    ApiGroupDiscovery {
        metadata: ObjectMeta::default(),
        versions: vec![ApiVersionDiscovery {
            freshness: Some("Current".to_owned()),
            resources: RESOURCES.iter().map(resource).collect(),
            version: "v1".to_owned(),
        }],
    }
}

fn resource(r: &Resource) -> ApiResourceDiscovery {
    ApiResourceDiscovery {
        categories: strings(r.categories),
        resource: r.name.to_owned(),
        response_kind: Some(gvk(("", "", r.kind))),
        scope: if r.namespaced {
            "Namespaced"
        } else {
            "Cluster"
        }
        .to_owned(),
        short_names: strings(r.short_names),
        singular_resource: r.singular.to_owned(),
        subresources: r
            .subresources
            .iter()
            .map(|&(name, kind, verbs)| ApiSubresourceDiscovery {
                accepted_types: Vec::new(),
                response_kind: Some(gvk(kind)),
                subresource: name.to_owned(),
                verbs: strings(verbs),
            })
            .collect(),
        verbs: strings(r.verbs),
    }
}

fn gvk((group, version, kind): (&str, &str, &str)) -> GroupVersionKind {
    GroupVersionKind {
        group: group.to_owned(),
        kind: kind.to_owned(),
        version: version.to_owned(),
    }
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|&s| s.to_owned()).collect()
}
