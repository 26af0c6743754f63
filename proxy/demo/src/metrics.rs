//! What the proxies say about themselves: their `/metrics`, scraped over HTTP as Prometheus
//! would, and the skew from `/debug/discovery`.
//!
//! The report's own counts come from the client's side; these come from mvproxy's side, and
//! the reconciliation compares the two. Scraping the admin listener (rather than reading the
//! registry in-process) checks the exposition operators scrape too.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::client::{Client, ClientError};

/// The families the report uses, summed over the proxies scraped.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Scrape {
    /// `mvproxy_rerouted_request_total`, by GVR (`group/version/resource`, core `v1/…`),
    /// summed over `code`; the discovery fetches the family also counts are left out.
    pub(crate) rerouted: BTreeMap<String, u64>,
    /// `mvproxy_rerouted_request_total`, by `code`.
    pub(crate) rerouted_by_code: BTreeMap<u16, u64>,
    /// `mvproxy_requests_total{route="peer",peer=""}`: requests only peers serve, answered
    /// `503` by mvproxy because every one of those peers was down.
    pub(crate) peers_down: u64,
    /// `mvproxy_discovery_cache_lookups_total{result="hit"}`.
    pub(crate) lookup_hits: u64,
    /// `mvproxy_discovery_cache_lookups_total{result="miss"}`.
    pub(crate) lookup_misses: u64,
    /// `mvproxy_discovery_merges_total{result="hit"}`: a cached merge served.
    pub(crate) merges_cached: u64,
    /// `mvproxy_discovery_merges_total{result="miss"}`: a merge built.
    pub(crate) merges_built: u64,
    /// `mvproxy_discovery_merge_duration_seconds`: `(le, cumulative count)`.
    pub(crate) merge_buckets: Vec<(f64, u64)>,
    pub(crate) merge_seconds: f64,
    pub(crate) merge_count: u64,
    /// `mvproxy_skew_requests_total`, by (`client`, GVR, `side`).
    pub(crate) skew: BTreeMap<SkewKey, u64>,
    /// `mvproxy_target_missing_requests_total`, by (`client`, GVR), summed over `target` (the
    /// demo's proxies have one).
    pub(crate) target_missing: BTreeMap<(String, String), u64>,
}

/// A series of `mvproxy_skew_requests_total`: client, GVR (`group/version/resource`), side.
pub(crate) type SkewKey = (String, String, String);

impl Scrape {
    /// Sum of all reroutes.
    pub(crate) fn rerouted_total(&self) -> u64 {
        self.rerouted.values().sum()
    }

    /// Adds another proxy's numbers.
    pub(crate) fn add(&mut self, other: &Scrape) {
        add_counts(&mut self.rerouted, &other.rerouted);
        add_counts(&mut self.rerouted_by_code, &other.rerouted_by_code);
        self.peers_down += other.peers_down;
        self.lookup_hits += other.lookup_hits;
        self.lookup_misses += other.lookup_misses;
        self.merges_cached += other.merges_cached;
        self.merges_built += other.merges_built;
        self.merge_seconds += other.merge_seconds;
        self.merge_count += other.merge_count;
        add_buckets(&mut self.merge_buckets, &other.merge_buckets);
        add_counts(&mut self.skew, &other.skew);
        add_counts(&mut self.target_missing, &other.target_missing);
    }

    /// What happened between `earlier` and `self` (counters only grow while proxies run).
    pub(crate) fn since(&self, earlier: &Scrape) -> Scrape {
        Scrape {
            rerouted: counts_since(&self.rerouted, &earlier.rerouted),
            rerouted_by_code: counts_since(&self.rerouted_by_code, &earlier.rerouted_by_code),
            peers_down: self.peers_down.saturating_sub(earlier.peers_down),
            lookup_hits: self.lookup_hits.saturating_sub(earlier.lookup_hits),
            lookup_misses: self.lookup_misses.saturating_sub(earlier.lookup_misses),
            merges_cached: self.merges_cached.saturating_sub(earlier.merges_cached),
            merges_built: self.merges_built.saturating_sub(earlier.merges_built),
            merge_buckets: self
                .merge_buckets
                .iter()
                .map(|&(le, n)| {
                    let before = earlier
                        .merge_buckets
                        .iter()
                        .find(|(l, _)| *l == le)
                        .map_or(0, |(_, n)| *n);
                    (le, n.saturating_sub(before))
                })
                .collect(),
            merge_seconds: (self.merge_seconds - earlier.merge_seconds).max(0.0),
            merge_count: self.merge_count.saturating_sub(earlier.merge_count),
            skew: counts_since(&self.skew, &earlier.skew),
            target_missing: counts_since(&self.target_missing, &earlier.target_missing),
        }
    }

    /// The upper bound of the bucket holding the `q` quantile of merge durations, if any.
    pub(crate) fn merge_quantile_le(&self, q: f64) -> Option<f64> {
        if self.merge_count == 0 {
            return None;
        }
        let rank = (q * self.merge_count as f64).ceil() as u64;
        self.merge_buckets
            .iter()
            .find(|(_, n)| *n >= rank.max(1))
            .map(|(le, _)| *le)
    }
}

/// Adds `from`'s counts to `into`'s, series by series.
fn add_counts<K: Ord + Clone>(into: &mut BTreeMap<K, u64>, from: &BTreeMap<K, u64>) {
    for (k, v) in from {
        *into.entry(k.clone()).or_default() += v;
    }
}

/// What each series counted between `earlier` and `now`; series that did not grow are left
/// out.
fn counts_since<K: Ord + Clone>(
    now: &BTreeMap<K, u64>,
    earlier: &BTreeMap<K, u64>,
) -> BTreeMap<K, u64> {
    now.iter()
        .map(|(k, v)| {
            let before = earlier.get(k).copied().unwrap_or(0);
            (k.clone(), v.saturating_sub(before))
        })
        .filter(|(_, v)| *v > 0)
        .collect()
}

fn add_buckets(into: &mut Vec<(f64, u64)>, from: &[(f64, u64)]) {
    for &(le, n) in from {
        match into.iter_mut().find(|(l, _)| *l == le) {
            Some((_, m)) => *m += n,
            None => into.push((le, n)),
        }
    }
    into.sort_by(|a, b| a.0.total_cmp(&b.0));
}

/// Scrapes one proxy's admin listener (`http://127.0.0.1:PORT`).
pub(crate) async fn scrape(client: &Client, admin: &str) -> Result<Scrape, ClientError> {
    let text = client.get_text(&format!("{admin}/metrics")).await?;
    Ok(parse(&text))
}

/// Reads the Prometheus text exposition; lines it does not need are skipped.
pub(crate) fn parse(text: &str) -> Scrape {
    let mut s = Scrape::default();
    for line in text.lines() {
        let Some(sample) = Sample::parse(line) else {
            continue;
        };
        let count = sample.value.max(0.0) as u64;
        match sample.name {
            // As upstream, the family also counts peers' discovery fetches, with no resource:
            // those are not requests the workload sent.
            "mvproxy_rerouted_request_total" if !sample.label("resource").is_empty() => {
                *s.rerouted.entry(sample.gvr()).or_default() += count;
                let code = sample.label("code").parse().unwrap_or(0);
                *s.rerouted_by_code.entry(code).or_default() += count;
            }
            "mvproxy_requests_total"
                if sample.label("route") == "peer" && sample.label("peer").is_empty() =>
            {
                s.peers_down += count;
            }
            "mvproxy_discovery_cache_lookups_total" => match sample.label("result") {
                "hit" => s.lookup_hits += count,
                "miss" => s.lookup_misses += count,
                _ => {}
            },
            "mvproxy_discovery_merges_total" => match sample.label("result") {
                "hit" => s.merges_cached += count,
                "miss" => s.merges_built += count,
                _ => {}
            },
            "mvproxy_discovery_merge_duration_seconds_bucket" => {
                let le = match sample.label("le") {
                    "+Inf" => f64::INFINITY,
                    le => match le.parse() {
                        Ok(le) => le,
                        Err(_) => continue,
                    },
                };
                add_buckets(&mut s.merge_buckets, &[(le, count)]);
            }
            "mvproxy_discovery_merge_duration_seconds_sum" => s.merge_seconds += sample.value,
            "mvproxy_discovery_merge_duration_seconds_count" => s.merge_count += count,
            "mvproxy_skew_requests_total" => {
                let key = (
                    sample.label("client").to_owned(),
                    sample.gvr(),
                    sample.label("side").to_owned(),
                );
                *s.skew.entry(key).or_default() += count;
            }
            "mvproxy_target_missing_requests_total" => {
                let key = (sample.label("client").to_owned(), sample.gvr());
                *s.target_missing.entry(key).or_default() += count;
            }
            _ => {}
        }
    }
    s
}

/// One sample line: `name{label="value",…} value [timestamp]`.
struct Sample<'a> {
    name: &'a str,
    labels: Vec<(&'a str, String)>,
    value: f64,
}

impl<'a> Sample<'a> {
    fn parse(line: &'a str) -> Option<Self> {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            return None;
        }
        let name_end = line.find(['{', ' '])?;
        let name = &line[..name_end];
        let mut rest = &line[name_end..];
        let mut labels = Vec::new();
        if let Some(after) = rest.strip_prefix('{') {
            let (parsed, remaining) = parse_labels(after)?;
            labels = parsed;
            rest = remaining;
        }
        let value = rest.split_whitespace().next()?.parse().ok()?;
        Some(Self {
            name,
            labels,
            value,
        })
    }

    fn label(&self, key: &str) -> &str {
        self.labels
            .iter()
            .find(|(k, _)| *k == key)
            .map_or("", |(_, v)| v.as_str())
    }

    /// The series' `group`, `version` and `resource` labels as `group/version/resource`, or
    /// `version/resource` for core: as [`mvproxy_core::classify::Gvr`] displays it.
    fn gvr(&self) -> String {
        let (group, version, resource) = (
            self.label("group"),
            self.label("version"),
            self.label("resource"),
        );
        if group.is_empty() {
            format!("{version}/{resource}")
        } else {
            format!("{group}/{version}/{resource}")
        }
    }
}

/// Parses `k="v",k2="v2"}` (escapes `\\`, `\"`, `\n`), returning the labels and what follows.
fn parse_labels(mut s: &str) -> Option<(Vec<(&str, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        s = s.trim_start_matches([',', ' ']);
        if let Some(rest) = s.strip_prefix('}') {
            return Some((labels, rest));
        }
        let eq = s.find('=')?;
        let key = s[..eq].trim();
        let mut chars = s[eq + 1..].char_indices();
        if chars.next()?.1 != '"' {
            return None;
        }
        let mut value = String::new();
        let mut escaped = false;
        let mut end = None;
        for (i, c) in chars {
            match (escaped, c) {
                (true, 'n') => {
                    value.push('\n');
                    escaped = false;
                }
                (true, c) => {
                    value.push(c);
                    escaped = false;
                }
                (false, '\\') => escaped = true,
                (false, '"') => {
                    end = Some(eq + 1 + i + 1);
                    break;
                }
                (false, c) => value.push(c),
            }
        }
        labels.push((key, value));
        s = &s[end?..];
    }
}

/// `/debug/discovery`'s skew: each GVR not served by every server, with the servers.
pub(crate) async fn skew(
    client: &Client,
    admin: &str,
) -> Result<Vec<(String, Vec<String>)>, ClientError> {
    #[derive(Deserialize)]
    struct Debug {
        #[serde(default)]
        skew: Vec<Entry>,
    }
    #[derive(Deserialize)]
    struct Entry {
        gvr: String,
        servers: Vec<String>,
    }
    let text = client.get_text(&format!("{admin}/debug/discovery")).await?;
    let debug: Debug = serde_json::from_str(&text).map_err(|source| ClientError::Decode {
        url: format!("{admin}/debug/discovery"),
        source,
    })?;
    let mut out: Vec<(String, Vec<String>)> = debug
        .skew
        .into_iter()
        .map(|e| {
            let mut servers = e.servers;
            servers.sort();
            (e.gvr, servers)
        })
        .collect();
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP mvproxy_rerouted_request_total Requests forwarded to a peer.
# TYPE mvproxy_rerouted_request_total counter
mvproxy_rerouted_request_total{code="200",group="resource.k8s.io",version="v1beta2",resource="resourceclaims"} 7
mvproxy_rerouted_request_total{code="201",group="",version="v1",resource="pods"} 2
mvproxy_rerouted_request_total{code="200",group="",version="",resource=""} 40
mvproxy_requests_total{route="peer",reason="peer_only",peer="",code="503",method="GET"} 3
mvproxy_requests_total{route="peer",reason="peer_only",peer="apiserver-2",code="200",method="GET"} 9
mvproxy_requests_total{route="local",reason="no_peer",peer="",code="404",method="GET"} 1
mvproxy_discovery_cache_lookups_total{result="hit"} 40
mvproxy_discovery_cache_lookups_total{result="miss"} 2
mvproxy_discovery_merges_total{result="miss"} 1
mvproxy_discovery_merges_total{result="hit"} 5
mvproxy_discovery_merge_duration_seconds_sum 0.0002
mvproxy_discovery_merge_duration_seconds_count 1
mvproxy_discovery_merge_duration_seconds_bucket{le="0.0001"} 0
mvproxy_discovery_merge_duration_seconds_bucket{le="0.00025"} 1
mvproxy_discovery_merge_duration_seconds_bucket{le="+Inf"} 1
mvproxy_skew_requests_total{client="kube-controller-manager (sa kube-system/generic-garbage-collector)",group="flowcontrol.apiserver.k8s.io",version="v1beta3",resource="flowschemas",side="old_only"} 4
mvproxy_skew_requests_total{client="kubectl",group="",version="v1",resource="pods",side="partial"} 1
mvproxy_target_missing_requests_total{client="kubectl",group="flowcontrol.apiserver.k8s.io",version="v1beta3",resource="flowschemas",target="v1.34.0-demo"} 6
odd{label="a \"quoted\" \\ value"} 1
"#;

    #[test]
    fn reads_the_families_the_report_uses() {
        let s = parse(TEXT);
        assert_eq!(s.rerouted["resource.k8s.io/v1beta2/resourceclaims"], 7);
        assert_eq!(s.rerouted["v1/pods"], 2);
        assert_eq!(s.rerouted_total(), 9);
        assert_eq!(s.rerouted_by_code[&201], 2);
        assert_eq!(s.peers_down, 3);
        assert_eq!((s.lookup_hits, s.lookup_misses), (40, 2));
        assert_eq!((s.merges_built, s.merges_cached), (1, 5));
        assert_eq!(s.merge_count, 1);
        assert_eq!(s.merge_quantile_le(0.99), Some(0.00025));
        let key = |c: &str, g: &str, side: &str| (c.to_owned(), g.to_owned(), side.to_owned());
        assert_eq!(
            s.skew,
            [
                (
                    key(
                        "kube-controller-manager (sa kube-system/generic-garbage-collector)",
                        "flowcontrol.apiserver.k8s.io/v1beta3/flowschemas",
                        "old_only"
                    ),
                    4
                ),
                (key("kubectl", "v1/pods", "partial"), 1),
            ]
            .into_iter()
            .collect()
        );
        assert_eq!(
            s.target_missing,
            [(
                (
                    "kubectl".to_owned(),
                    "flowcontrol.apiserver.k8s.io/v1beta3/flowschemas".to_owned()
                ),
                6
            )]
            .into_iter()
            .collect()
        );
    }

    #[test]
    fn sums_and_differences() {
        let one = parse(TEXT);
        let mut two = one.clone();
        two.add(&one);
        assert_eq!(two.rerouted_total(), 18);
        assert_eq!(two.merge_buckets[1], (0.00025, 2));
        let delta = two.since(&one);
        assert_eq!(delta.rerouted, one.rerouted);
        assert_eq!(delta.peers_down, 3);
        assert_eq!(delta.skew, one.skew);
        assert_eq!(delta.target_missing, one.target_missing);
        assert_eq!(
            one.since(&one),
            Scrape {
                merge_buckets: one.merge_buckets.iter().map(|&(le, _)| (le, 0)).collect(),
                ..Scrape::default()
            }
        );
    }

    #[test]
    fn label_values_with_escapes() {
        let s =
            Sample::parse(r#"odd{label="a \"quoted\" \\ value",b="x"} 1.5 1700000000"#).unwrap();
        assert_eq!(s.label("label"), r#"a "quoted" \ value"#);
        assert_eq!(s.label("b"), "x");
        assert_eq!(s.value, 1.5);
        assert!(Sample::parse("# comment").is_none());
        assert!(Sample::parse(r#"broken{label="x} 1"#).is_none());
    }
}
