//! The path table of kube-apiserver's RequestInfo, case by case.

use super::*;

const GET: Method = Method::GET;
const HEAD: Method = Method::HEAD;
const POST: Method = Method::POST;
const PUT: Method = Method::PUT;
const PATCH: Method = Method::PATCH;
const DELETE: Method = Method::DELETE;
const OPTIONS: Method = Method::OPTIONS;

fn res(
    group: &str,
    version: &str,
    resource: &str,
    namespace: &str,
    name: &str,
    subresource: &str,
    verb: &'static str,
) -> RequestInfo {
    RequestInfo::Resource(ResourceRequest {
        gvr: Gvr::new(group, version, resource),
        namespace: non_empty(namespace),
        name: non_empty(name),
        subresource: non_empty(subresource),
        verb,
    })
}

fn disc(path: DiscoveryPath) -> RequestInfo {
    RequestInfo::Discovery(path)
}

fn core_version(version: &str) -> RequestInfo {
    disc(DiscoveryPath::CoreVersion {
        version: version.into(),
    })
}

fn group(group: &str) -> RequestInfo {
    disc(DiscoveryPath::Group {
        group: group.into(),
    })
}

fn group_version(group: &str, version: &str) -> RequestInfo {
    disc(DiscoveryPath::GroupVersion {
        group: group.into(),
        version: version.into(),
    })
}

const NON: RequestInfo = RequestInfo::NonResource;

fn run(method: &Method, url: &str) -> RequestInfo {
    let (path, query) = match url.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (url, None),
    };
    classify(method, path, query)
}

fn check(cases: &[(Method, &str, RequestInfo)]) {
    for (method, url, want) in cases {
        assert_eq!(&run(method, url), want, "{method} {url:?}");
    }
}

// Upstream TestGetAPIRequestInfo, successCases (requestinfo_test.go).
#[test]
#[rustfmt::skip]
fn upstream_get_api_request_info() {
    check(&[
        // resource paths
        (GET, "/api/v1/namespaces", res("", "v1", "namespaces", "", "", "", "list")),
        (GET, "/api/v1/namespaces/other", res("", "v1", "namespaces", "other", "other", "", "get")),
        (GET, "/api/v1/namespaces/other/pods", res("", "v1", "pods", "other", "", "", "list")),
        (GET, "/api/v1/namespaces/other/pods/foo", res("", "v1", "pods", "other", "foo", "", "get")),
        (HEAD, "/api/v1/namespaces/other/pods/foo", res("", "v1", "pods", "other", "foo", "", "get")),
        (GET, "/api/v1/pods", res("", "v1", "pods", "", "", "", "list")),
        (HEAD, "/api/v1/pods", res("", "v1", "pods", "", "", "", "list")),
        // special verbs
        (GET, "/api/v1/proxy/namespaces/other/pods/foo", res("", "v1", "pods", "other", "foo", "", "proxy")),
        (GET, "/api/v1/proxy/namespaces/other/pods/foo/subpath/not/a/subresource", res("", "v1", "pods", "other", "foo", "", "proxy")),
        (GET, "/api/v1/watch/pods", res("", "v1", "pods", "", "", "", "watch")),
        (GET, "/api/v1/pods?watch=true", res("", "v1", "pods", "", "", "", "watch")),
        (GET, "/api/v1/pods?watch=false", res("", "v1", "pods", "", "", "", "list")),
        (GET, "/api/v1/watch/namespaces/other/pods", res("", "v1", "pods", "other", "", "", "watch")),
        (GET, "/api/v1/namespaces/other/pods?watch=1", res("", "v1", "pods", "other", "", "", "watch")),
        (GET, "/api/v1/namespaces/other/pods?watch=0", res("", "v1", "pods", "other", "", "", "list")),
        // subresource identification
        (GET, "/api/v1/namespaces/other/pods/foo/status", res("", "v1", "pods", "other", "foo", "status", "get")),
        (GET, "/api/v1/namespaces/other/pods/foo/proxy/subpath", res("", "v1", "pods", "other", "foo", "proxy", "get")),
        (PUT, "/api/v1/namespaces/other/finalize", res("", "v1", "namespaces", "other", "other", "finalize", "update")),
        (PUT, "/api/v1/namespaces/other/status", res("", "v1", "namespaces", "other", "other", "status", "update")),
        // verb identification
        (PATCH, "/api/v1/namespaces/other/pods/foo", res("", "v1", "pods", "other", "foo", "", "patch")),
        (DELETE, "/api/v1/namespaces/other/pods/foo", res("", "v1", "pods", "other", "foo", "", "delete")),
        (POST, "/api/v1/namespaces/other/pods", res("", "v1", "pods", "other", "", "", "create")),
        // deletecollection verb identification
        (DELETE, "/api/v1/nodes", res("", "v1", "nodes", "", "", "", "deletecollection")),
        (DELETE, "/api/v1/namespaces", res("", "v1", "namespaces", "", "", "", "deletecollection")),
        (DELETE, "/api/v1/namespaces/other/pods", res("", "v1", "pods", "other", "", "", "deletecollection")),
        (DELETE, "/apis/extensions/v1/namespaces/other/pods", res("extensions", "v1", "pods", "other", "", "", "deletecollection")),
        // api group identification
        (POST, "/apis/extensions/v1/namespaces/other/pods", res("extensions", "v1", "pods", "other", "", "", "create")),
        // api version identification
        (POST, "/apis/extensions/v1beta3/namespaces/other/pods", res("extensions", "v1beta3", "pods", "other", "", "", "create")),
    ]);
}

// Upstream TestGetAPIRequestInfo, errorCases: all "not a resource
// request"; the discovery-shaped ones are Discovery here.
#[test]
#[rustfmt::skip]
fn upstream_get_api_request_info_non_resource() {
    check(&[
        (GET, "/", NON),
        (GET, "/api/version/", core_version("version")),
        (GET, "/apis/group/version/", group_version("group", "version")),
        (GET, "/badprefix/version/resource", NON),
        (GET, "/apis/version/resource", group_version("version", "resource")),
    ]);
}

// Upstream TestGetNonAPIRequestInfo.
#[test]
#[rustfmt::skip]
fn upstream_get_non_api_request_info() {
    check(&[
        (GET, "/api/version/resource", res("", "version", "resource", "", "", "", "list")),
        (GET, "/apis/group/version/resource/name/subresource", res("group", "version", "resource", "", "name", "subresource", "get")),
        (GET, "/api/version/resource/name/subresource", res("", "version", "resource", "", "name", "subresource", "get")),
        (GET, "/apis/batch/v1/job", res("batch", "v1", "job", "", "", "", "list")),
        (GET, "/apis/batch/v1/job/foo", res("batch", "v1", "job", "", "foo", "", "get")),
        (GET, "/apis/batch/v1/job/foo/scale", res("batch", "v1", "job", "", "foo", "scale", "get")),
        (GET, "/not-api/version/resource", NON),
        (GET, "/apis/extensions/v1beta1", group_version("extensions", "v1beta1")),
        (GET, "/apis/extensions/v1beta1/", group_version("extensions", "v1beta1")),
        (GET, "/api/version", core_version("version")),
        (GET, "/api", disc(DiscoveryPath::Api)),
        (GET, "/", NON),
        (GET, "", NON),
    ]);
}

// Upstream TestSelectorParsing (and the older TestFieldSelectorParsing), as its
// (method, url, expected name, expected verb) rows: a metadata.name field selector names
// the single object of a list/watch of group/version/resource.
#[test]
#[rustfmt::skip]
fn upstream_selector_parsing() {
    let cases: &[(Method, &str, &str, &'static str)] = &[
        (GET, "/apis/group/version/resource", "", "list"),
        (GET, "/apis/group/version/resource?fieldSelector=metadata.name=name1", "name1", "list"),
        (GET, "/apis/group/version/resource?watch=true&fieldSelector=metadata.name=name1", "name1", "watch"),
        (GET, "/apis/group/version/resource?fieldSelector=foo=bar&labelSelector=baz=qux", "", "list"),
        (GET, "/apis/group/version/resource?fieldSelector=metadata.name=name1,foo", "", "list"),
        (GET, "/apis/group/version/resource?fieldSelector=metadata.name=name1,foo&watch=true", "", "watch"),
        (GET, "/apis/group/version/resource?fieldSelector=metadata.name=name1,foo&watch=false", "", "list"),
        (DELETE, "/apis/group/version/resource?fieldSelector=foo=bar&labelSelector=baz=qux", "", "deletecollection"),
        (GET, "/apis/group/version/resource?fieldSelector=metadata.name=foo&fieldSelector=metadata.name=bar&labelSelector=foo=bar&labelSelector=foo=baz", "foo", "list"),
        (GET, "/apis/group/version/resource/name?fieldSelector=foo=bar&labelSelector=foo=bar", "name", "get"),
        (GET, "/apis/group/version/watch/resource?fieldSelector=metadata.name=foo&labelSelector=foo=bar", "", "watch"),
        (GET, "/apis/group/version/watch/resource/name?fieldSelector=metadata.name=foo&labelSelector=foo=bar", "name", "watch"),
    ];
    for (method, url, name, verb) in cases {
        let want = res("group", "version", "resource", "", name, "", verb);
        assert_eq!(run(method, url), want, "{method} {url:?}");
    }
}

// Further cases derived from reading requestinfo.go.
#[test]
#[rustfmt::skip]
fn discovery_paths() {
    check(&[
        (GET, "/apis", disc(DiscoveryPath::Apis)),
        (GET, "/apis/", disc(DiscoveryPath::Apis)),
        (GET, "/api/", disc(DiscoveryPath::Api)),
        (GET, "/api/v1", core_version("v1")),
        (GET, "/apis/apps", group("apps")),
        (GET, "/apis/apps/v1", group_version("apps", "v1")),
        (GET, "/apis/apps/v1?timeout=32s", group_version("apps", "v1")),
        (GET, "/ap%69s/apps", group("apps")),
        // Not the canonical spelling: left to the apiserver.
        (GET, "//apis", NON),
        (GET, "/apis//", NON),
        (GET, "/apis/apps//", NON),
        (GET, "/apis//v1", NON),
        (GET, "/healthz", NON),
        (
            GET,
            "/openapi/v2",
            RequestInfo::OpenApi(crate::classify::openapi::OpenApiPath::V2),
        ),
        (GET, "/version", NON),
        (GET, "/apiss/apps/v1/deployments", NON),
        (GET, "/API/v1/pods", NON),
    ]);
}

#[test]
#[rustfmt::skip]
fn verbs() {
    check(&[
        (POST, "/apis/apps/v1/namespaces/ns/deployments", res("apps", "v1", "deployments", "ns", "", "", "create")),
        (PUT, "/apis/apps/v1/namespaces/ns/deployments/d", res("apps", "v1", "deployments", "ns", "d", "", "update")),
        (PUT, "/apis/apps/v1/namespaces/ns/deployments/d/scale", res("apps", "v1", "deployments", "ns", "d", "scale", "update")),
        (PATCH, "/apis/apps/v1/namespaces/ns/deployments/d/status", res("apps", "v1", "deployments", "ns", "d", "status", "patch")),
        (DELETE, "/api/v1/namespaces/ns", res("", "v1", "namespaces", "ns", "ns", "", "delete")),
        (DELETE, "/apis/apps/v1/deployments", res("apps", "v1", "deployments", "", "", "", "deletecollection")),
        (POST, "/api/v1/namespaces/ns/pods/p/eviction", res("", "v1", "pods", "ns", "p", "eviction", "create")),
        (OPTIONS, "/api/v1/pods", res("", "v1", "pods", "", "", "", "")),
        (Method::from_bytes(b"get").unwrap(), "/api/v1/pods", res("", "v1", "pods", "", "", "", "")),
        // The path prefix wins over the method.
        (POST, "/api/v1/watch/pods", res("", "v1", "pods", "", "", "", "watch")),
        (DELETE, "/api/v1/proxy/nodes/n1", res("", "v1", "nodes", "", "n1", "", "proxy")),
        // A watch param only turns a nameless get into a watch.
        (GET, "/api/v1/namespaces/ns/pods/p?watch=true", res("", "v1", "pods", "ns", "p", "", "get")),
        (DELETE, "/api/v1/pods?watch=true", res("", "v1", "pods", "", "", "", "deletecollection")),
        // A selector name does not turn deletecollection into delete.
        (DELETE, "/api/v1/pods?fieldSelector=metadata.name%3Dp", res("", "v1", "pods", "", "", "", "deletecollection")),
    ]);
}

#[test]
#[rustfmt::skip]
fn special_verb_prefixes() {
    check(&[
        (GET, "/apis/apps/v1/watch/namespaces/ns/deployments/d", res("apps", "v1", "deployments", "ns", "d", "", "watch")),
        (GET, "/api/v1/watch/namespaces/ns/pods/p/status", res("", "v1", "pods", "ns", "p", "status", "watch")),
        (GET, "/api/v1/watch/namespaces/ns", res("", "v1", "namespaces", "ns", "ns", "", "watch")),
        (GET, "/api/v1/proxy/nodes/n1:10250/metrics", res("", "v1", "nodes", "", "n1:10250", "", "proxy")),
        // Too few parts after the prefix: upstream errors (500).
        (GET, "/api/v1/watch", NON),
        (GET, "/api/v1/proxy/", NON),
        (GET, "/apis/apps/v1/watch", NON),
        // Only directly after the version is it a verb.
        (GET, "/api/v1/pods/watch", res("", "v1", "pods", "", "watch", "", "get")),
        (GET, "/api/v1/namespaces/ns/watch", res("", "v1", "watch", "ns", "", "", "list")),
    ]);
}

#[test]
#[rustfmt::skip]
fn namespaces() {
    check(&[
        (GET, "/api/v1/namespaces/ns/status", res("", "v1", "namespaces", "ns", "ns", "status", "get")),
        (GET, "/api/v1/namespaces/ns/finalize/extra", res("", "v1", "namespaces", "ns", "ns", "finalize", "get")),
        (GET, "/api/v1/namespaces/ns/configmaps/c", res("", "v1", "configmaps", "ns", "c", "", "get")),
        (GET, "/api/v1/namespaces/ns/namespaces/x", res("", "v1", "namespaces", "ns", "x", "", "get")),
        (GET, "/apis/rbac.authorization.k8s.io/v1/namespaces/ns/roles", res("rbac.authorization.k8s.io", "v1", "roles", "ns", "", "", "list")),
        (GET, "/apis/apps/v1/namespaces", res("apps", "v1", "namespaces", "", "", "", "list")),
        // Empty namespace segment: upstream's namespace is "" too.
        (GET, "/api/v1/namespaces//pods", res("", "v1", "pods", "", "", "", "list")),
    ]);
}

/// `GET /api/v1/pods?{query}` for each `(query, name, verb)`: a list or watch of every
/// namespace's pods, of the one named `name` if not empty.
fn check_pods_query(cases: &[(&str, &str, &'static str)]) {
    for &(query, name, verb) in cases {
        let url = format!("/api/v1/pods?{query}");
        assert_eq!(
            run(&GET, &url),
            res("", "v1", "pods", "", name, "", verb),
            "GET {url:?}"
        );
    }
}

#[test]
#[rustfmt::skip]
fn watch_query_values() {
    // Upstream: any first value other than "0" or "false" (any case) is a
    // watch, including an empty one; later values are ignored.
    check_pods_query(&[
        ("watch", "", "watch"),
        ("watch=", "", "watch"),
        ("watch=FALSE", "", "list"),
        ("watch=f", "", "watch"),
        ("watch=yes", "", "watch"),
        ("watch=0&watch=1", "", "list"),
        ("watch=1&watch=0", "", "watch"),
        ("wat%63h=1", "", "watch"),
        ("watch=%31", "", "watch"),
        ("Watch=1", "", "list"),
        ("resourceVersion=0&watch=true&allowWatchBookmarks=true", "", "watch"),
        // Pairs with ';' or a bad escape are dropped by Go's ParseQuery.
        ("watch=1;x", "", "list"),
        ("watch=%zz&watch=1", "", "watch"),
        // EqualFold folds U+017F to 's' when options decode; ToLower does not.
        ("watch=fal%C5%BFe", "", "list"),
        ("watch=fal%C5%BFe&limit=x", "", "watch"),
    ]);
}

#[test]
#[rustfmt::skip]
fn field_selector_names() {
    check(&[
        (GET, "/api/v1/namespaces/ns/pods?fieldSelector=metadata.name%3Dp&watch=1", res("", "v1", "pods", "ns", "p", "", "watch")),
    ]);
    check_pods_query(&[
        ("fieldSelector=metadata.name==p", "p", "list"),
        ("fieldSelector=metadata.name!=p", "", "list"),
        ("fieldSelector=spec.nodeName=n,metadata.name=p", "p", "list"),
        // Sorted term order decides between two names.
        ("fieldSelector=metadata.name=b,metadata.name=a", "a", "list"),
        ("fieldSelector=metadata.name=a\\,b", "a,b", "list"),
        ("fieldSelector=metadata.name=a\\x", "", "list"),
        ("fieldSelector=metadata.name===p", "", "list"),
        ("fieldSelector=metadata.name=p,", "p", "list"),
        ("fieldSelector=+metadata.name=p", "", "list"),
        // Not a valid path segment name.
        ("fieldSelector=metadata.name=..", "", "list"),
        ("fieldSelector=metadata.name=a%2Fb", "", "list"),
        ("fieldSelector=metadata.name=a%25b", "", "list"),
        // Another list option failing to decode drops the name.
        ("fieldSelector=metadata.name=p&limit=abc", "", "list"),
        ("fieldSelector=metadata.name=p&timeoutSeconds=&watch=1", "", "watch"),
        ("fieldSelector=metadata.name=p&limit=500&timeoutSeconds=-1", "p", "list"),
    ]);
}

#[test]
#[rustfmt::skip]
fn path_decoding_and_odd_segments() {
    check(&[
        // Upstream splits the decoded path, so an encoded '/' splits too.
        (GET, "/api/v1/namespaces/a%2Fb/pods", res("", "v1", "b", "a", "pods", "", "get")),
        (GET, "/api/v1/namespaces/d%C3%A9v/pods", res("", "v1", "pods", "dév", "", "", "list")),
        (GET, "/api/v1/pods/a+b", res("", "v1", "pods", "", "a+b", "", "get")),
        (GET, "/api/v1/pods/%FF", res("", "v1", "pods", "", "\u{FFFD}", "", "get")),
        // Go's server rejects these before kube-apiserver sees them.
        (GET, "/api/v1/pods/%zz", NON),
        (GET, "/api/v1/pods/%4", NON),
        (GET, "/api/v1/pods/a\tb", NON),
        (GET, "/api/v1/pods?watch=\n", NON),
        (GET, "api/v1/pods", NON),
        (GET, "*", NON),
        // Leading/trailing slashes are trimmed; inner empty segments count.
        (GET, "//api/v1/pods//", res("", "v1", "pods", "", "", "", "list")),
        (GET, "/api//v1/pods", res("", "", "v1", "", "pods", "", "get")),
        (GET, "/apis/apps//foo", res("apps", "", "foo", "", "", "", "list")),
        (GET, "/api/v1/pods//status", res("", "v1", "pods", "", "", "status", "list")),
        (GET, "/apis//v1/pods", res("", "v1", "pods", "", "", "", "list")),
        (GET, "/api/v1/../", res("", "v1", "..", "", "", "", "list")),
    ]);
}

#[test]
#[rustfmt::skip]
fn route_templates() {
    let cases: &[(Method, &str, Option<&str>)] = &[
        (GET, "/", None),
        (GET, "/healthz", None),
        (GET, "/api", Some("/api")),
        (GET, "/apis", Some("/apis")),
        (GET, "/api/v1", Some("/api/{version}")),
        (GET, "/apis/apps", Some("/apis/{group}")),
        (GET, "/apis/apps/v1", Some("/apis/{group}/{version}")),
        (GET, "/api/v1/nodes", Some("/api/{version}/{resource}")),
        (GET, "/api/v1/nodes/n", Some("/api/{version}/{resource}/{name}")),
        (GET, "/api/v1/nodes/n/status", Some("/api/{version}/{resource}/{name}/{subresource}")),
        (GET, "/api/v1/namespaces/ns/pods", Some("/api/{version}/namespaces/{namespace}/{resource}")),
        (GET, "/api/v1/namespaces/ns/pods/p", Some("/api/{version}/namespaces/{namespace}/{resource}/{name}")),
        (GET, "/api/v1/namespaces/ns/pods/p/log", Some("/api/{version}/namespaces/{namespace}/{resource}/{name}/{subresource}")),
        (GET, "/apis/apps/v1/deployments", Some("/apis/{group}/{version}/{resource}")),
        (GET, "/apis/rbac.authorization.k8s.io/v1/clusterroles/r", Some("/apis/{group}/{version}/{resource}/{name}")),
        (GET, "/apis/apiregistration.k8s.io/v1/apiservices/a/status", Some("/apis/{group}/{version}/{resource}/{name}/{subresource}")),
        (GET, "/apis/apps/v1/namespaces/ns/deployments", Some("/apis/{group}/{version}/namespaces/{namespace}/{resource}")),
        (GET, "/apis/apps/v1/namespaces/ns/deployments/d", Some("/apis/{group}/{version}/namespaces/{namespace}/{resource}/{name}")),
        (GET, "/apis/apps/v1/namespaces/ns/deployments/d/scale", Some("/apis/{group}/{version}/namespaces/{namespace}/{resource}/{name}/{subresource}")),
        // Namespace objects are cluster-scoped.
        (GET, "/api/v1/namespaces", Some("/api/{version}/{resource}")),
        (GET, "/api/v1/namespaces/ns", Some("/api/{version}/{resource}/{name}")),
        (PUT, "/api/v1/namespaces/ns/finalize", Some("/api/{version}/{resource}/{name}/{subresource}")),
        // Deprecated prefixes and selector names describe the target.
        (GET, "/api/v1/watch/namespaces/ns/pods/p", Some("/api/{version}/namespaces/{namespace}/{resource}/{name}")),
        (GET, "/api/v1/proxy/nodes/n/a/b", Some("/api/{version}/{resource}/{name}")),
        (GET, "/api/v1/pods?watch=1&fieldSelector=metadata.name%3Dp", Some("/api/{version}/{resource}/{name}")),
        (GET, "/api/v1/pods//status", Some("/api/{version}/{resource}/{name}/{subresource}")),
    ];
    for (method, url, want) in cases {
        assert_eq!(run(method, url).route_template(), *want, "{method} {url:?}");
    }
}

#[test]
fn gvr_display() {
    assert_eq!(
        Gvr::new("apps", "v1", "deployments").to_string(),
        "apps/v1/deployments"
    );
    assert_eq!(Gvr::new("", "v1", "pods").to_string(), "v1/pods");
}

/// Odd inputs: every call must return, never panic.
#[test]
fn never_panics() {
    let pieces = [
        "",
        "/",
        "//",
        "api",
        "apis",
        "v1",
        "apps",
        "watch",
        "proxy",
        "namespaces",
        "status",
        "finalize",
        "%",
        "%zz",
        "%2F",
        "%2f%2F",
        "%e2%82",
        "%FF",
        "ü",
        "日本",
        "..",
        ".",
        "+",
        "?",
        "#",
        "\u{0}",
        "\u{7f}",
        "\u{FFFD}",
        "%%",
        "a%",
    ];
    let queries = [
        None,
        Some(""),
        Some("&"),
        Some("watch"),
        Some("watch=%"),
        Some("fieldSelector=\\"),
        Some("fieldSelector=metadata.name=%E2%82"),
        Some("fieldSelector=,,=,!=,==,\\,"),
        Some("fieldSelector=metadata.name=ſ&watch=ſ&limit=99999999999999999999"),
        Some(";;;&&&==="),
    ];
    let methods = [
        GET,
        DELETE,
        POST,
        OPTIONS,
        Method::from_bytes(b"BREW").unwrap(),
    ];

    let mut inputs: Vec<String> = Vec::new();
    for a in pieces {
        for b in pieces {
            inputs.push(format!("/{a}/{b}"));
            inputs.push(format!("{a}{b}/x/y/z"));
            inputs.push(format!("/apis/{a}/v1/{b}/namespaces/{a}/{b}"));
        }
    }
    inputs.push(String::new());
    inputs.push("/".repeat(10_000));
    inputs.push("/api".repeat(5_000));
    inputs.push(format!("/api/v1/{}", "%".repeat(1_001)));
    inputs.push(format!("/apis/g/v/{}", "ü/".repeat(3_000)));
    // A small deterministic generator over an awkward alphabet.
    let alphabet: Vec<char> = "/%aApi0F9zw.+;=&?\\,é日\u{0}".chars().collect();
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..400 {
        let len = (state % 40) as usize;
        let mut s = String::new();
        for _ in 0..len {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            s.push(alphabet[(state % alphabet.len() as u64) as usize]);
        }
        inputs.push(s);
    }

    for (i, path) in inputs.iter().enumerate() {
        let method = &methods[i % methods.len()];
        for query in queries {
            let outcome = std::panic::catch_unwind(|| {
                let info = classify(method, path, query);
                let _ = info.route_template();
                info
            });
            assert!(outcome.is_ok(), "panicked on {method} {path:?} {query:?}");
        }
        let (p, q) = path.split_once('?').unwrap_or((path, ""));
        let _ = classify(method, p, Some(q)).route_template();
    }
    assert!(inputs.len() > 300, "only {} inputs", inputs.len());
}
