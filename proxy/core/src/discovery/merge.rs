//! Peer-aggregated discovery: one `/apis` document built from every API server's own.
//!
//! While a control plane is upgraded, its kube-apiservers serve different group-versions. Since
//! 1.35, kube-apiserver answers `/apis` with the union of all servers' documents, so that a client
//! sees every group-version some server can serve and the Mixed Version Proxy forwards requests
//! for it. mvproxy must answer with the same document, so this module follows upstream's
//! `peer_aggregated_handler.go` (k8s.io/apiserver, `pkg/endpoints/discovery/aggregated`) and
//! apimachinery's `MergePreservingRelativeOrder` step by step (`pkg/util/sort/sort.go` in k8s.io/apimachinery
//! kubernetes-1.36.0), quirks included:
//!
//! - the local server has no precedence: servers are processed in ascending ID order, and the
//!   first server to list a resource supplies every field of it except verbs and subresources;
//! - ordering comes from the servers' lists only, never from version priority, so ties fall back
//!   to plain string order (`v1 < v1alpha1 < v2`).
//!
//! The module is pure and deterministic: the same inputs give the same bytes, whatever the order
//! of `peers` (server IDs being distinct). Hash maps are only looked up; everything iterated into
//! the output is ordered, by a BTreeMap or by an explicit list of names.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, HashSet};

use sha2::{Digest, Sha512};

use super::types::{
    ApiGroupDiscovery, ApiGroupDiscoveryList, ApiResourceDiscovery, ApiSubresourceDiscovery,
    ApiVersionDiscovery,
};

#[cfg(test)]
mod tests;

/// Result of merging: `Unchanged` means serve the local document's bytes as they are
/// (upstream returns local unchanged, §2.3 step 1 and 6).
#[derive(Debug, Clone, PartialEq)]
pub enum Merged {
    /// Serve the local document's bytes as they are.
    Unchanged,
    /// The merged groups, in priority order.
    Changed(Vec<ApiGroupDiscovery>),
}

/// Merge by upstream's algorithm. `local` is the local server's /apis groups, `peers` each peer's
/// groups (core group "" already excluded by the caller, and GV exclusion already applied).
/// Server IDs (local included) are processed in ascending lexicographic order.
///
/// Beyond upstream's two "return local" cases, the result is also `Unchanged` when the merged
/// groups equal `local` (say, a peer serving a subset of local's groups): upstream re-encodes
/// the same content then, and serving local's own bytes keeps `/apis` byte-identical to the
/// `profile=nopeer` document.
pub fn merge(
    local_id: &str,
    local: &[ApiGroupDiscovery],
    peers: &[(&str, &[ApiGroupDiscovery])],
) -> Merged {
    // Step 1. Upstream keys this by server ID in a map, so a later entry with the same ID
    // replaces an earlier one (a peer reusing the local ID replaces local).
    let mut by_server: BTreeMap<&str, &[ApiGroupDiscovery]> = BTreeMap::new();
    by_server.insert(local_id, local);
    for &(id, groups) in peers {
        by_server.insert(id, groups);
    }
    if by_server.len() <= 1 {
        return Merged::Unchanged;
    }

    // Steps 2 and 3: the BTreeMap yields servers in ascending ID order.
    let local_names = group_names(local);
    let mut merged_groups = BTreeMap::new();
    let mut all_group_names = Vec::with_capacity(by_server.len());
    let mut content_changed = false;
    let mut group_name_lists_are_identical = true;
    for groups in by_server.values() {
        content_changed |= process_server_groups(groups, &mut merged_groups);
        let names = group_names(groups);
        group_name_lists_are_identical &= names == local_names;
        all_group_names.push(names);
    }

    // Step 6.
    if !content_changed && group_name_lists_are_identical {
        return Merged::Unchanged;
    }
    let order = if group_name_lists_are_identical {
        local_names
    } else {
        merge_order(&all_group_names)
    };
    let groups = take_in_order(merged_groups, &order);
    // The addition described above: equal content is served as local's own bytes.
    if groups.as_slice() == local {
        Merged::Unchanged
    } else {
        Merged::Changed(groups)
    }
}

/// Step 3 for one server: adds its groups to `merged`, new ones as they are, known ones through
/// [`merge_versions_across_group`]. Returns whether a known group changed.
fn process_server_groups<'a>(
    groups: &'a [ApiGroupDiscovery],
    merged: &mut BTreeMap<&'a str, Cow<'a, ApiGroupDiscovery>>,
) -> bool {
    let mut changed = false;
    for group in groups {
        match merged.entry(group.name()) {
            Entry::Vacant(e) => {
                e.insert(Cow::Borrowed(group));
            }
            Entry::Occupied(mut e) => {
                if let Some(m) = merge_versions_across_group(e.get(), group) {
                    e.insert(Cow::Owned(m));
                    changed = true;
                }
            }
        }
    }
    changed
}

/// Step 4: merges group `b` into the already merged `a`; `None` means `a` stays as it is.
///
/// Like upstream, a different version-name list counts as a change even when the merged
/// versions come out equal to `a`'s (e.g. `b` lists a subset of them).
fn merge_versions_across_group(
    a: &ApiGroupDiscovery,
    b: &ApiGroupDiscovery,
) -> Option<ApiGroupDiscovery> {
    let mut versions: BTreeMap<&str, Cow<'_, ApiVersionDiscovery>> = a
        .versions
        .iter()
        .map(|v| (v.version.as_str(), Cow::Borrowed(v)))
        .collect();
    let mut content_merged = false;
    for v in &b.versions {
        match versions.entry(&v.version) {
            Entry::Vacant(e) => {
                e.insert(Cow::Borrowed(v));
            }
            Entry::Occupied(mut e) => {
                if let Some(m) = merge_resources_across_version(e.get(), v) {
                    e.insert(Cow::Owned(m));
                    content_merged = true;
                }
            }
        }
    }

    let a_names: Vec<&str> = a.versions.iter().map(|v| v.version.as_str()).collect();
    let b_names: Vec<&str> = b.versions.iter().map(|v| v.version.as_str()).collect();
    let order = merged_order_of_two(a_names, b_names, content_merged)?;
    Some(ApiGroupDiscovery {
        metadata: a.metadata.clone(),
        versions: take_in_order(versions, &order),
    })
}

/// Step 5: merges version `b` into the already merged `a`; `None` means `a` stays as it is.
/// The result keeps `a`'s version name and freshness.
fn merge_resources_across_version(
    a: &ApiVersionDiscovery,
    b: &ApiVersionDiscovery,
) -> Option<ApiVersionDiscovery> {
    let mut resources: BTreeMap<&str, Cow<'_, ApiResourceDiscovery>> = a
        .resources
        .iter()
        .map(|r| (r.resource.as_str(), Cow::Borrowed(r)))
        .collect();
    let mut content_changed = false;
    for r in &b.resources {
        match resources.entry(&r.resource) {
            Entry::Vacant(e) => {
                e.insert(Cow::Borrowed(r));
            }
            Entry::Occupied(mut e) => {
                if **e.get() != *r {
                    let m = merge_resource_capabilities(e.get(), r);
                    e.insert(Cow::Owned(m));
                    content_changed = true;
                }
            }
        }
    }

    let a_names: Vec<&str> = a.resources.iter().map(|r| r.resource.as_str()).collect();
    let b_names: Vec<&str> = b.resources.iter().map(|r| r.resource.as_str()).collect();
    let order = merged_order_of_two(a_names, b_names, content_changed)?;
    Some(ApiVersionDiscovery {
        freshness: a.freshness.clone(),
        resources: take_in_order(resources, &order),
        version: a.version.clone(),
    })
}

/// Step 5, a resource two servers describe differently: verbs are the sorted union,
/// subresources the union by name (`b`'s entry wins a clash) sorted by name, and every other
/// field is `a`'s, or `b`'s when `a` has no resource name.
fn merge_resource_capabilities(
    a: &ApiResourceDiscovery,
    b: &ApiResourceDiscovery,
) -> ApiResourceDiscovery {
    let verbs: BTreeSet<&str> = a.verbs.iter().chain(&b.verbs).map(String::as_str).collect();
    let mut subresources: BTreeMap<&str, &ApiSubresourceDiscovery> = BTreeMap::new();
    for s in a.subresources.iter().chain(&b.subresources) {
        subresources.insert(&s.subresource, s);
    }

    let mut merged = if a.resource.is_empty() { b } else { a }.clone();
    merged.verbs = verbs.into_iter().map(str::to_owned).collect();
    merged.subresources = subresources.into_values().cloned().collect();
    merged
}

/// The ordering rule shared by steps 4 and 5, given the name lists of `a` and `b`: `None` when
/// nothing changed and the lists are identical (keep `a`), `a`'s order when only content
/// changed, else the relative-order-preserving merge of both lists.
fn merged_order_of_two<'a>(
    a_names: Vec<&'a str>,
    b_names: Vec<&'a str>,
    content_changed: bool,
) -> Option<Vec<&'a str>> {
    if a_names == b_names {
        content_changed.then_some(a_names)
    } else {
        Some(merge_order(&[a_names, b_names]))
    }
}

/// Takes the entries named in `order` out of `map`, in that order. Removing them means a name
/// listed twice yields its entry once, as upstream's `orderedAPIVersionList` does.
fn take_in_order<T: Clone>(mut map: BTreeMap<&str, Cow<'_, T>>, order: &[&str]) -> Vec<T> {
    order
        .iter()
        .filter_map(|name| map.remove(*name))
        .map(Cow::into_owned)
        .collect()
}

fn group_names(groups: &[ApiGroupDiscovery]) -> Vec<&str> {
    groups.iter().map(ApiGroupDiscovery::name).collect()
}

/// apimachinery's MergePreservingRelativeOrder: shortcut to the first input list containing every
/// unique item (no duplicates), else Kahn's topological sort with a lexicographic min-heap,
/// else (cycle) a plain sort.
pub fn merge_preserving_relative_order(lists: &[Vec<&str>]) -> Vec<String> {
    merge_order(lists).into_iter().map(str::to_owned).collect()
}

/// [`merge_preserving_relative_order`] without copying the names (step 7).
fn merge_order<'a>(lists: &[Vec<&'a str>]) -> Vec<&'a str> {
    // Precedence graph: one node per unique item, and an edge from each item to the one after
    // it in any list. A repeated edge counts once toward the in-degree.
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut names: Vec<&'a str> = Vec::new();
    let mut node = |name: &'a str| {
        *index.entry(name).or_insert_with(|| {
            names.push(name);
            names.len() - 1
        })
    };
    let mut edges: BTreeSet<(usize, usize)> = BTreeSet::new();
    for list in lists {
        for &item in list {
            node(item);
        }
        for pair in list.windows(2) {
            edges.insert((node(pair[0]), node(pair[1])));
        }
    }

    if let Some(list) = lists
        .iter()
        .find(|l| l.len() == names.len() && is_unique(l))
    {
        return list.clone();
    }

    let mut in_degree = vec![0usize; names.len()];
    let mut successors: Vec<Vec<usize>> = vec![Vec::new(); names.len()];
    for &(from, to) in &edges {
        in_degree[to] += 1;
        successors[from].push(to);
    }
    let mut ready: BinaryHeap<Reverse<(&str, usize)>> = in_degree
        .iter()
        .enumerate()
        .filter(|&(_, &d)| d == 0)
        .map(|(i, _)| Reverse((names[i], i)))
        .collect();
    let mut sorted = Vec::with_capacity(names.len());
    while let Some(Reverse((name, i))) = ready.pop() {
        sorted.push(name);
        for &next in &successors[i] {
            in_degree[next] -= 1;
            if in_degree[next] == 0 {
                ready.push(Reverse((names[next], next)));
            }
        }
    }

    // Items left over are on, or after, a cycle: the lists disagree on their order, or a list
    // repeats an item back to back. Upstream then gives up on precedence entirely.
    if sorted.len() < names.len() {
        names.sort_unstable();
        return names;
    }
    sorted
}

fn is_unique(list: &[&str]) -> bool {
    let mut seen = HashSet::with_capacity(list.len());
    list.iter().all(|item| seen.insert(*item))
}

/// Encodes the list as compact JSON and returns (body, etag) where etag is the quoted
/// uppercase-hex SHA-512 of the body: "\"ABC…\"" (128 hex chars inside quotes).
///
/// Encoding these types cannot fail (they hold only strings, sequences and options). Should it
/// ever, both body and ETag are empty, and an empty ETag means "no ETag" as upstream's
/// `calculateETag` failure does.
pub fn encode_with_etag(list: &ApiGroupDiscoveryList) -> (Vec<u8>, String) {
    match serde_json::to_vec(list) {
        Ok(body) => {
            let etag = etag_of(&body);
            (body, etag)
        }
        Err(_) => (Vec::new(), String::new()),
    }
}

/// The quoted uppercase-hex SHA-512 of `body`, upstream's discovery ETag.
pub fn etag_of(body: &[u8]) -> String {
    format!("\"{:X}\"", Sha512::digest(body))
}
