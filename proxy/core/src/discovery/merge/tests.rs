use super::*;
use crate::discovery::types::{GroupVersionKind, ObjectMeta};

// ---- MergePreservingRelativeOrder -------------------------------------------------------------

fn order(lists: &[&[&str]]) -> Vec<String> {
    let lists: Vec<Vec<&str>> = lists.iter().map(|l| l.to_vec()).collect();
    merge_preserving_relative_order(&lists)
}

#[test]
fn order_spec_examples() {
    assert_eq!(order(&[&["a", "b", "c"], &["b", "c"]]), ["a", "b", "c"]);
    assert_eq!(order(&[&["a", "c"], &["b", "c"]]), ["a", "b", "c"]);
    // Contradicting lists, but the first one holds every item, so the shortcut returns it.
    assert_eq!(order(&[&["a", "b"], &["b", "a"]]), ["a", "b"]);
}

/// A named case: input lists and the expected order.
type OrderCase<'a> = (&'a str, &'a [&'a [&'a str]], &'a [&'a str]);

/// The cases of apimachinery's `pkg/util/sort/sort_test.go` (`TestSortDiscoveryGroupsTopo`).
#[test]
fn order_upstream_cases() {
    let cases: &[OrderCase<'_>] = &[
        (
            "consensus ordering",
            &[
                &["A", "B", "C", "D"],
                &["A", "B", "C", "D"],
                &["A", "X", "Z", "D"],
                &["Z", "Y"],
                &["Q"],
            ],
            &["A", "B", "C", "Q", "X", "Z", "D", "Y"],
        ),
        ("empty input", &[], &[]),
        (
            "single peer",
            &[&["foo", "bar", "baz"]],
            &["foo", "bar", "baz"],
        ),
        (
            "conflicting orderings",
            &[&["A", "B"], &["B", "A"]],
            &["A", "B"],
        ),
        (
            "empty list merged with non-empty list",
            &[&[], &["A", "B", "C"]],
            &["A", "B", "C"],
        ),
        ("multiple empty lists merged", &[&[], &[], &[]], &[]),
        (
            "lexical tiebreak at beginning",
            &[&["C", "D", "E"], &["B", "D", "E"], &["A", "D", "E"]],
            &["A", "B", "C", "D", "E"],
        ),
        (
            "lexical tiebreak in middle",
            &[&["A", "D", "E"], &["A", "C", "E"], &["A", "B", "E"]],
            &["A", "B", "C", "D", "E"],
        ),
        (
            "conflicting orderings of 3 lists",
            &[&["A", "B", "C"], &["B", "C", "A"], &["C", "A", "B"]],
            &["A", "B", "C"],
        ),
        (
            "conflicting ordering with different list lengths",
            &[&["A", "B", "C", "D"], &["B", "A"], &["C", "D"]],
            &["A", "B", "C", "D"],
        ),
        (
            "conflicting partial lists",
            &[&["A", "B"], &["C", "D"], &["B", "A"]],
            &["A", "B", "C", "D"],
        ),
        (
            "cycle",
            &[&["A", "B"], &["B", "C"], &["C", "A"]],
            &["A", "B", "C"],
        ),
    ];
    for (name, input, want) in cases {
        assert_eq!(order(input), *want, "{name}");
    }
}

#[test]
fn order_cycle_falls_back_to_plain_sort() {
    // No list holds all four items, and d->c (first list) contradicts c->d (second).
    assert_eq!(
        order(&[&["z", "d", "c"], &["c", "d", "a"]]),
        ["a", "c", "d", "z"]
    );
    // An item repeated back to back is an edge to itself, hence a cycle too.
    assert_eq!(order(&[&["b", "b"], &["a"]]), ["a", "b"]);
}

#[test]
fn order_shortcut_takes_the_first_complete_list() {
    assert_eq!(
        order(&[&["b", "c", "a"], &["a", "b", "c"]]),
        ["b", "c", "a"]
    );
    assert_eq!(
        order(&[&["a", "b", "c"], &["b", "c", "a"]]),
        ["a", "b", "c"]
    );
    // A list with a duplicate is never the shortcut, even at the right length.
    assert_eq!(order(&[&["b", "b", "a"], &["a", "c"]]), ["a", "b", "c"]);
}

#[test]
fn order_is_not_kube_version_aware() {
    assert_eq!(order(&[&["v1"], &["v2"]]), ["v1", "v2"]);
    assert_eq!(
        order(&[&["v1beta1"], &["v1alpha1"], &["v1"]]),
        ["v1", "v1alpha1", "v1beta1"]
    );
}

// ---- merge: synthetic documents -----------------------------------------------------------------

fn resource(name: &str, verbs: &[&str]) -> ApiResourceDiscovery {
    ApiResourceDiscovery {
        categories: Vec::new(),
        resource: name.to_owned(),
        response_kind: Some(GroupVersionKind {
            group: String::new(),
            kind: format!("Kind-{name}"),
            version: String::new(),
        }),
        scope: "Namespaced".to_owned(),
        short_names: Vec::new(),
        singular_resource: format!("single-{name}"),
        subresources: Vec::new(),
        verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
    }
}

fn subresource(name: &str, verbs: &[&str]) -> ApiSubresourceDiscovery {
    ApiSubresourceDiscovery {
        accepted_types: Vec::new(),
        response_kind: None,
        subresource: name.to_owned(),
        verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
    }
}

fn version(name: &str, resources: Vec<ApiResourceDiscovery>) -> ApiVersionDiscovery {
    ApiVersionDiscovery {
        freshness: Some("Current".to_owned()),
        resources,
        version: name.to_owned(),
    }
}

fn group(name: &str, versions: Vec<ApiVersionDiscovery>) -> ApiGroupDiscovery {
    ApiGroupDiscovery {
        metadata: ObjectMeta {
            name: name.to_owned(),
        },
        versions,
    }
}

/// A group with one version holding resources with `get` and `list`.
fn simple(name: &str, ver: &str, resources: &[&str]) -> ApiGroupDiscovery {
    let resources = resources
        .iter()
        .map(|r| resource(r, &["get", "list"]))
        .collect();
    group(name, vec![version(ver, resources)])
}

fn changed(m: Merged) -> Vec<ApiGroupDiscovery> {
    match m {
        Merged::Changed(groups) => groups,
        Merged::Unchanged => panic!("expected a changed document"),
    }
}

fn names(groups: &[ApiGroupDiscovery]) -> Vec<&str> {
    groups.iter().map(ApiGroupDiscovery::name).collect()
}

fn find<'a>(groups: &'a [ApiGroupDiscovery], g: &str, v: &str) -> &'a ApiVersionDiscovery {
    groups
        .iter()
        .find(|x| x.name() == g)
        .and_then(|x| x.versions.iter().find(|x| x.version == v))
        .unwrap_or_else(|| panic!("{g}/{v} missing"))
}

fn find_resource<'a>(
    groups: &'a [ApiGroupDiscovery],
    g: &str,
    v: &str,
    r: &str,
) -> &'a ApiResourceDiscovery {
    find(groups, g, v)
        .resources
        .iter()
        .find(|x| x.resource == r)
        .unwrap_or_else(|| panic!("{g}/{v} {r} missing"))
}

#[test]
fn no_peers_is_unchanged() {
    let local = vec![simple("apps", "v1", &["deployments"])];
    assert_eq!(merge("a", &local, &[]), Merged::Unchanged);
    assert_eq!(merge("a", &[], &[]), Merged::Unchanged);
}

#[test]
fn identical_peer_is_unchanged() {
    let local = vec![
        simple("apps", "v1", &["deployments"]),
        simple("batch", "v1", &["jobs"]),
    ];
    let peer = local.clone();
    assert_eq!(merge("a", &local, &[("b", &peer)]), Merged::Unchanged);
    assert_eq!(merge("b", &local, &[("a", &peer)]), Merged::Unchanged);
}

#[test]
fn peer_serving_a_subset_is_unchanged() {
    // Upstream counts differing name lists as a change, but the merged content equals local's,
    // so local's bytes are served.
    let deployments = version("v1", vec![resource("deployments", &["get"])]);
    let local = vec![
        group(
            "apps",
            vec![deployments.clone(), version("v1beta1", vec![])],
        ),
        simple("batch", "v1", &["jobs", "cronjobs"]),
    ];
    let peer = vec![
        group("apps", vec![deployments]),
        simple("batch", "v1", &["cronjobs"]),
    ];
    assert_eq!(merge("a", &local, &[("b", &peer)]), Merged::Unchanged);
    assert_eq!(merge("b", &local, &[("a", &peer)]), Merged::Unchanged);
}

#[test]
fn peer_adds_group_version_and_resource() {
    let local = vec![simple("apps", "v1", &["deployments"])];
    let peer = vec![
        group(
            "apps",
            vec![version(
                "v1",
                vec![
                    resource("deployments", &["get", "list"]),
                    resource("statefulsets", &["get"]),
                ],
            )],
        ),
        simple("batch", "v1", &["jobs"]),
    ];
    let merged = changed(merge("a", &local, &[("b", &peer)]));
    assert_eq!(names(&merged), ["apps", "batch"]);
    let apps = find(&merged, "apps", "v1");
    let resources: Vec<_> = apps.resources.iter().map(|r| r.resource.as_str()).collect();
    assert_eq!(resources, ["deployments", "statefulsets"]);
}

#[test]
fn differing_verbs_become_the_sorted_union() {
    let local = vec![group(
        "apps",
        vec![version(
            "v1",
            vec![resource("deployments", &["watch", "get", "list"])],
        )],
    )];
    let peer = vec![group(
        "apps",
        vec![version(
            "v1",
            vec![resource("deployments", &["patch", "get", "create"])],
        )],
    )];
    let merged = changed(merge("a", &local, &[("b", &peer)]));
    let d = find_resource(&merged, "apps", "v1", "deployments");
    assert_eq!(d.verbs, ["create", "get", "list", "patch", "watch"]);
}

#[test]
fn subresources_union_later_server_wins_sorted_by_name() {
    let mut a = resource("deployments", &["get"]);
    a.subresources = vec![
        subresource("status", &["get"]),
        subresource("scale", &["get"]),
    ];
    let mut b = resource("deployments", &["get"]);
    b.subresources = vec![
        subresource("status", &["get", "patch", "update"]),
        subresource("ephemeral", &["get"]),
    ];
    let local = vec![group("apps", vec![version("v1", vec![a])])];
    let peer = vec![group("apps", vec![version("v1", vec![b])])];
    let merged = changed(merge("a", &local, &[("b", &peer)]));
    let d = find_resource(&merged, "apps", "v1", "deployments");
    let subs: Vec<_> = d
        .subresources
        .iter()
        .map(|s| (s.subresource.as_str(), s.verbs.join(",")))
        .collect();
    assert_eq!(
        subs,
        [
            ("ephemeral", "get".to_owned()),
            ("scale", "get".to_owned()),
            ("status", "get,patch,update".to_owned()),
        ]
    );
}

#[test]
fn first_server_by_id_supplies_other_fields_and_freshness() {
    // Local is "b-local": the peer "a-peer" sorts first, so its fields win although the
    // local server is the one answering.
    let mut local_r = resource("widgets", &["get"]);
    local_r.short_names = vec!["wl".to_owned()];
    local_r.scope = "Cluster".to_owned();
    let mut peer_r = resource("widgets", &["list"]);
    peer_r.short_names = vec!["wp".to_owned()];
    peer_r.categories = vec!["all".to_owned()];
    let mut peer_v = version("v1", vec![peer_r]);
    peer_v.freshness = Some("Stale".to_owned());
    let local = vec![group("example.com", vec![version("v1", vec![local_r])])];
    let peer = vec![group("example.com", vec![peer_v])];

    let merged = changed(merge("b-local", &local, &[("a-peer", &peer)]));
    let v = find(&merged, "example.com", "v1");
    assert_eq!(v.freshness.as_deref(), Some("Stale"));
    let w = &v.resources[0];
    assert_eq!(w.short_names, ["wp"]);
    assert_eq!(w.categories, ["all"]);
    assert_eq!(w.scope, "Namespaced");
    assert_eq!(w.verbs, ["get", "list"]);
}

#[test]
fn nameless_resource_takes_fields_from_the_later_server() {
    let mut a = resource("", &["get"]);
    a.response_kind = None;
    let b = resource("", &["list"]);
    let merged = merge_resource_capabilities(&a, &b);
    assert_eq!(merged.response_kind, b.response_kind);
    assert_eq!(merged.verbs, ["get", "list"]);
}

#[test]
fn version_order_is_relative_order_not_version_priority() {
    let local = vec![group(
        "example.com",
        vec![version("v1", vec![]), version("v1beta1", vec![])],
    )];
    let peer = vec![group(
        "example.com",
        vec![version("v2", vec![]), version("v1", vec![])],
    )];
    let merged = changed(merge("a", &local, &[("b", &peer)]));
    let versions: Vec<_> = merged[0]
        .versions
        .iter()
        .map(|v| v.version.as_str())
        .collect();
    assert_eq!(versions, ["v2", "v1", "v1beta1"]);

    // Unrelated versions: plain string order, so v1 stays preferred over v2.
    let peer = vec![group("example.com", vec![version("v2", vec![])])];
    let local = vec![group("example.com", vec![version("v1", vec![])])];
    let merged = changed(merge("a", &local, &[("b", &peer)]));
    let versions: Vec<_> = merged[0]
        .versions
        .iter()
        .map(|v| v.version.as_str())
        .collect();
    assert_eq!(versions, ["v1", "v2"]);
}

#[test]
fn group_order_follows_the_first_server_by_id() {
    let local = vec![
        simple("apps", "v1", &["deployments"]),
        simple("batch", "v1", &["jobs"]),
    ];
    let peer: Vec<_> = local.iter().rev().cloned().collect();
    // Local first: the shortcut returns local's own order, so nothing changes.
    assert_eq!(merge("a", &local, &[("b", &peer)]), Merged::Unchanged);
    // Peer first: its order wins.
    let merged = changed(merge("b", &local, &[("a", &peer)]));
    assert_eq!(names(&merged), ["batch", "apps"]);
}

#[test]
fn content_change_with_same_group_lists_keeps_local_order() {
    let local = vec![
        simple("zeta.io", "v1", &["zs"]),
        simple("alpha.io", "v1", &["as"]),
    ];
    let peer = vec![
        simple("zeta.io", "v1", &["zs", "more"]),
        simple("alpha.io", "v1", &["as"]),
    ];
    let merged = changed(merge("a", &local, &[("b", &peer)]));
    assert_eq!(names(&merged), ["zeta.io", "alpha.io"]);
}

// ---- merge: real discovery documents ------------------------------------------------------------

const V134: &str = "kube-apiserver-1.34-dev/aggregated_v2.json";
const V131: &str = "kube-apiserver-1.31-dev/aggregated_v2.json";
const OAUTH: &str = "openshift-oauth-apiserver-k8s-1.34.1/aggregated_v2.json";

fn fixture(path: &str) -> Vec<ApiGroupDiscovery> {
    let full = format!(
        "{}/../../fixtures/discovery/{path}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("read {full}: {e}"));
    let list: ApiGroupDiscoveryList =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("decode {full}: {e}"));
    list.items
}

/// Every (group, version, resource) of `groups`, to check that the merge is a union.
fn gvrs(groups: &[ApiGroupDiscovery]) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for g in groups {
        for v in &g.versions {
            out.insert((g.name().to_owned(), v.version.clone(), String::new()));
            for r in &v.resources {
                out.insert((g.name().to_owned(), v.version.clone(), r.resource.clone()));
            }
        }
    }
    out
}

fn version_names<'a>(groups: &'a [ApiGroupDiscovery], g: &str) -> Vec<&'a str> {
    groups
        .iter()
        .find(|x| x.name() == g)
        .map(|x| x.versions.iter().map(|v| v.version.as_str()).collect())
        .unwrap_or_default()
}

#[test]
fn fixture_old_peer_and_new_local() {
    let new = fixture(V134);
    let old = fixture(V131);
    let merged = changed(merge("apiserver-a", &new, &[("apiserver-b", &old)]));

    let union: BTreeSet<_> = gvrs(&new).union(&gvrs(&old)).cloned().collect();
    assert_eq!(gvrs(&merged), union);

    // Both servers serve the same 22 groups, but 1.34 lists resource.k8s.io before
    // flowcontrol/internal and 1.31 after them, so the lists differ and step 6 runs the
    // order merge on [1.34's list, 1.31's list] ("apiserver-a" < "apiserver-b"). 1.34's list
    // holds every group, so the shortcut returns it: the group order is the local one.
    assert_eq!(names(&merged), names(&new));
    assert_eq!(
        names(&merged)[18..21],
        [
            "resource.k8s.io",
            "flowcontrol.apiserver.k8s.io",
            "internal.apiserver.k8s.io"
        ]
    );

    // Versions: each group's longer list holds every version, so the shortcut applies again.
    assert_eq!(
        version_names(&merged, "flowcontrol.apiserver.k8s.io"),
        ["v1", "v1beta3"]
    );
    assert_eq!(
        version_names(&merged, "resource.k8s.io"),
        ["v1beta2", "v1beta1", "v1alpha3"]
    );
    assert_eq!(
        version_names(&merged, "authentication.k8s.io"),
        ["v1", "v1beta1", "v1alpha1"]
    );
    assert_eq!(
        version_names(&merged, "certificates.k8s.io"),
        ["v1", "v1beta1", "v1alpha1"]
    );

    // resource.k8s.io/v1alpha3: 1.34 has [deviceclasses, devicetaintrules, resourceclaims,
    // resourceclaimtemplates, resourceslices], 1.31 has [podschedulingcontexts,
    // resourceclaimparameters, resourceclaims, resourceclaimtemplates, resourceclasses,
    // resourceclassparameters, resourceslices]. Neither holds all nine, so Kahn's sort runs;
    // the min-heap picks deviceclasses, devicetaintrules, then podschedulingcontexts and
    // resourceclaimparameters (which must precede resourceclaims), then the shared chain with
    // 1.31's resourceclasses and resourceclassparameters before resourceslices.
    let alpha3 = find(&merged, "resource.k8s.io", "v1alpha3");
    let resources: Vec<_> = alpha3
        .resources
        .iter()
        .map(|r| r.resource.as_str())
        .collect();
    assert_eq!(
        resources,
        [
            "deviceclasses",
            "devicetaintrules",
            "podschedulingcontexts",
            "resourceclaimparameters",
            "resourceclaims",
            "resourceclaimtemplates",
            "resourceclasses",
            "resourceclassparameters",
            "resourceslices",
        ]
    );
    assert_eq!(
        find(&merged, "flowcontrol.apiserver.k8s.io", "v1beta3"),
        find(&old, "flowcontrol.apiserver.k8s.io", "v1beta3")
    );
    assert_eq!(
        find(&merged, "resource.k8s.io", "v1beta2"),
        find(&new, "resource.k8s.io", "v1beta2")
    );
}

#[test]
fn fixture_group_order_follows_server_id_not_locality() {
    let new = fixture(V134);
    let old = fixture(V131);
    // Local now sorts after the peer, so the 1.31 list comes first and the shortcut returns it.
    let merged = changed(merge("apiserver-c", &new, &[("apiserver-b", &old)]));
    assert_eq!(names(&merged), names(&old));
}

#[test]
fn fixture_aggregated_server_as_further_peer() {
    let new = fixture(V134);
    let old = fixture(V131);
    let oauth = fixture(OAUTH);
    let merged = changed(merge(
        "apiserver-a",
        &new,
        &[("apiserver-b", &old), ("apiserver-c", &oauth)],
    ));
    let all = names(&merged);
    assert!(all.contains(&"oauth.openshift.io") && all.contains(&"user.openshift.io"));
    assert_eq!(all.len(), 24);
    assert_eq!(version_names(&merged, "user.openshift.io"), ["v1"]);

    // No list holds all 24 groups now, so Kahn's sort runs, and the two kube-apiserver lists
    // contradict each other (1.34: resource -> flowcontrol; 1.31: flowcontrol -> internal ->
    // resource). That cycle makes upstream fall back to a plain sort of all group names.
    let mut sorted = all.clone();
    sorted.sort_unstable();
    assert_eq!(all, sorted);
}

// ---- encoding, ETag and determinism -------------------------------------------------------------

fn encoded(m: Merged) -> (Vec<u8>, String) {
    encode_with_etag(&ApiGroupDiscoveryList::v2(changed(m)))
}

#[test]
fn same_inputs_give_identical_bytes_whatever_the_peer_order() {
    let (new, old, oauth) = (fixture(V134), fixture(V131), fixture(OAUTH));
    let first = encoded(merge(
        "apiserver-a",
        &new,
        &[("apiserver-b", &old), ("apiserver-c", &oauth)],
    ));
    let again = encoded(merge(
        "apiserver-a",
        &new,
        &[("apiserver-b", &old), ("apiserver-c", &oauth)],
    ));
    let swapped = encoded(merge(
        "apiserver-a",
        &new,
        &[("apiserver-c", &oauth), ("apiserver-b", &old)],
    ));
    assert_eq!(first, again);
    assert_eq!(first, swapped);
}

#[test]
fn etag_is_quoted_uppercase_sha512_of_the_compact_body() {
    let list = ApiGroupDiscoveryList::v2(fixture(V134));
    let (body, etag) = encode_with_etag(&list);
    assert_eq!(
        body,
        serde_json::to_vec(&list).unwrap_or_else(|e| panic!("{e}"))
    );
    assert!(!body.contains(&b'\n'));

    let hex = etag
        .strip_prefix('"')
        .and_then(|e| e.strip_suffix('"'))
        .unwrap_or_else(|| panic!("not quoted: {etag}"));
    assert_eq!(hex.len(), 128);
    assert!(
        hex.chars().all(|c| matches!(c, '0'..='9' | 'A'..='F')),
        "{hex}"
    );
    let want: String = Sha512::digest(&body)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect();
    assert_eq!(hex, want);

    assert_eq!(encode_with_etag(&list), (body, etag.clone()));
    let other = ApiGroupDiscoveryList::v2(fixture(V131));
    assert_ne!(encode_with_etag(&other).1, etag);
}

#[test]
fn empty_list_has_an_etag_too() {
    let (body, etag) = encode_with_etag(&ApiGroupDiscoveryList::v2(Vec::new()));
    assert_eq!(
        body,
        br#"{"apiVersion":"apidiscovery.k8s.io/v2","items":[],"kind":"APIGroupDiscoveryList","metadata":{}}"#
    );
    assert_eq!(etag.len(), 130);
}
