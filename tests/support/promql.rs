//! Just enough PromQL reading to check dashboards and rules against what mvproxy exports:
//! which metric names an expression selects, with which label matchers, and which labels its
//! `by`/`without`/`on`/`ignoring`/`group_*` clauses name. Parsing proper (is the expression
//! valid?) is promtool's job; this only has to be right on expressions promtool accepts.

use std::collections::BTreeSet;

/// A vector selector: `name{label op "value", ...}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    pub metric: String,
    /// Label names of the matchers, in order.
    pub labels: Vec<String>,
}

/// What an expression refers to.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Refs {
    pub selectors: Vec<Selector>,
    /// Label names in grouping and matching clauses.
    pub grouping: BTreeSet<String>,
}

impl Refs {
    /// The metric names selected.
    pub fn metrics(&self) -> BTreeSet<String> {
        self.selectors.iter().map(|s| s.metric.clone()).collect()
    }
}

const CLAUSES: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];
const KEYWORDS: [&str; 8] = [
    "and", "or", "unless", "bool", "offset", "inf", "nan", "atan2",
];
/// Aggregation operators: a grouping clause may stand between them and their parenthesis.
const AGGREGATIONS: [&str; 14] = [
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// Reads the metric names, matchers and grouping labels of `expr`.
pub fn refs(expr: &str) -> Refs {
    let chars: Vec<char> = expr.chars().collect();
    let mut out = Refs::default();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' || c == '`' {
            i = skip_string(&chars, i);
        } else if c == '[' {
            // range or subquery: durations only
            while i < chars.len() && chars[i] != ']' {
                i += 1;
            }
            i += 1;
        } else if c == '{' {
            // a selector without a metric name: only matchers
            let (_, next) = matchers(&chars, i);
            i = next;
        } else if c == '#' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c.is_ascii_digit() || c == '.' {
            while i < chars.len() && (is_ident(chars[i]) || chars[i] == '.') {
                i += 1;
            }
        } else if is_ident_start(c) {
            let start = i;
            while i < chars.len() && is_ident(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut j = i;
            while j < chars.len() && chars[j].is_whitespace() {
                j += 1;
            }
            let next = chars.get(j).copied();
            if CLAUSES.contains(&word.as_str()) {
                if next == Some('(') {
                    let close = find_close(&chars, j, '(', ')');
                    let inner: String = chars[j + 1..close].iter().collect();
                    for l in inner.split(',').map(str::trim).filter(|l| !l.is_empty()) {
                        out.grouping.insert(l.to_owned());
                    }
                    i = close + 1;
                }
            } else if next == Some('(')
                || KEYWORDS.contains(&word.to_ascii_lowercase().as_str())
                || AGGREGATIONS.contains(&word.as_str())
            {
                // a function or aggregation, or an operator keyword
            } else {
                let labels = if next == Some('{') {
                    let (labels, after) = matchers(&chars, j);
                    i = after;
                    labels
                } else {
                    Vec::new()
                };
                out.selectors.push(Selector {
                    metric: word,
                    labels,
                });
            }
        } else {
            i += 1;
        }
    }
    out
}

/// Index after the string literal that starts at `i`.
fn skip_string(chars: &[char], i: usize) -> usize {
    let quote = chars[i];
    let mut k = i + 1;
    while k < chars.len() && chars[k] != quote {
        if chars[k] == '\\' && quote != '`' {
            k += 1;
        }
        k += 1;
    }
    k + 1
}

/// Index of the bracket closing the one at `open_at`.
fn find_close(chars: &[char], open_at: usize, open: char, close: char) -> usize {
    let mut depth = 0;
    let mut k = open_at;
    while k < chars.len() {
        let c = chars[k];
        if c == '"' || c == '\'' || c == '`' {
            k = skip_string(chars, k);
            continue;
        }
        if c == open {
            depth += 1;
        } else if c == close {
            depth -= 1;
            if depth == 0 {
                return k;
            }
        }
        k += 1;
    }
    chars.len().saturating_sub(1)
}

/// The label names of the matchers in the braces at `open_at`, and the index after them.
fn matchers(chars: &[char], open_at: usize) -> (Vec<String>, usize) {
    let close = find_close(chars, open_at, '{', '}');
    let mut labels = Vec::new();
    let mut k = open_at + 1;
    while k < close {
        let c = chars[k];
        if c == '"' || c == '\'' || c == '`' {
            k = skip_string(chars, k);
        } else if is_ident_start(c) {
            let start = k;
            while k < close && is_ident(chars[k]) {
                k += 1;
            }
            labels.push(chars[start..k].iter().collect());
        } else {
            k += 1;
        }
    }
    (labels, close + 1)
}

/// Grafana's template variables replaced as a dashboard would at query time: the interval
/// macros by durations, every other `$var` / `${var}` / `${var:fmt}` by `value`.
pub fn substitute_grafana(expr: &str, value: &str) -> String {
    let mut s = expr
        .replace("$__rate_interval", "5m")
        .replace("${__rate_interval}", "5m")
        .replace("$__interval", "1m")
        .replace("${__interval}", "1m")
        .replace("$__range", "5m")
        .replace("${__range}", "5m");
    let mut out = String::with_capacity(s.len());
    let chars: Vec<char> = std::mem::take(&mut s).chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '$' && chars.get(i + 1) == Some(&'{') {
            let close = chars[i..]
                .iter()
                .position(|&c| c == '}')
                .map_or(chars.len(), |p| i + p);
            out.push_str(value);
            i = close + 1;
        } else if chars[i] == '$' && chars.get(i + 1).is_some_and(|&c| is_ident_start(c)) {
            i += 1;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push_str(value);
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}

/// The metric and label names of a Grafana `label_values(metric{...}, label)` variable query.
pub fn label_values(query: &str) -> Option<(Refs, String)> {
    let inner = query
        .trim()
        .strip_prefix("label_values(")?
        .strip_suffix(')')?;
    let (selector, label) = inner.rsplit_once(',')?;
    Some((refs(selector), label.trim().to_owned()))
}

/// Sample names and their label names in a classic-text (0.0.4) exposition.
pub fn scrape_samples(text: &str) -> std::collections::BTreeMap<String, BTreeSet<String>> {
    let mut out: std::collections::BTreeMap<String, BTreeSet<String>> = Default::default();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let name_end = line
            .find(|c: char| c == '{' || c.is_whitespace())
            .unwrap_or(line.len());
        let name = &line[..name_end];
        let labels = out.entry(name.to_owned()).or_default();
        if line[name_end..].starts_with('{') {
            let chars: Vec<char> = line.chars().collect();
            let (ls, _) = matchers(&chars, line[..name_end].chars().count());
            labels.extend(ls);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(expr: &str) -> Vec<String> {
        refs(expr).metrics().into_iter().collect()
    }

    #[test]
    fn finds_metric_names_not_functions_labels_or_keywords() {
        let e = r#"histogram_quantile(0.99, sum by (route, le) (rate(mvproxy_request_duration_seconds_bucket{instance=~"$i", peer=~"a|b"}[5m])))"#;
        let r = refs(e);
        assert_eq!(names(e), ["mvproxy_request_duration_seconds_bucket"]);
        assert_eq!(r.selectors[0].labels, ["instance", "peer"]);
        assert_eq!(
            r.grouping.iter().map(String::as_str).collect::<Vec<_>>(),
            ["le", "route"]
        );
    }

    #[test]
    fn binary_operations_recording_rules_and_clauses() {
        let e = "instance:mvproxy_rerouted_requests:rate5m\n  / on (job, instance)\ninstance:mvproxy_requests:rate5m > 0.05 and on(job) sum without (code) (rate(mvproxy_requests_total{route=\"peer\",code!~\"4..\"}[5m] offset 1m))";
        assert_eq!(
            names(e),
            [
                "instance:mvproxy_requests:rate5m",
                "instance:mvproxy_rerouted_requests:rate5m",
                "mvproxy_requests_total",
            ]
        );
        let r = refs(e);
        for l in ["job", "instance", "code"] {
            assert!(r.grouping.contains(l), "{l} in {:?}", r.grouping);
        }
        assert!(!r.grouping.contains("route"));
    }

    #[test]
    fn label_values_inside_strings_are_not_names() {
        assert_eq!(
            names(r#"sum(x_total{a="sum(y_total)", b='z_total'})"#),
            ["x_total"]
        );
        assert_eq!(names("1 - up"), ["up"]);
        assert!(names("vector(1) * 2e3").is_empty());
    }

    #[test]
    fn grafana_variables_are_substituted() {
        assert_eq!(
            substitute_grafana(
                r#"rate(m{a=~"$a", b=~"${b}|", c=~"${c:regex}"}[$__rate_interval]) [$__interval] [$__range]"#,
                ".*"
            ),
            r#"rate(m{a=~".*", b=~".*|", c=~".*"}[5m]) [1m] [5m]"#
        );
    }

    #[test]
    fn label_values_queries() {
        let (r, label) = label_values("label_values(mvproxy_peer_up{job=\"x\"}, peer)").unwrap();
        assert_eq!(r.selectors[0].metric, "mvproxy_peer_up");
        assert_eq!(r.selectors[0].labels, ["job"]);
        assert_eq!(label, "peer");
        assert!(label_values("query_result(up)").is_none());
    }

    #[test]
    fn scrape_lines() {
        let text =
            "# HELP a_total x\n# TYPE a_total counter\na_total{route=\"peer\",peer=\"b\"} 1\nb 2\n";
        let s = scrape_samples(text);
        assert_eq!(
            s["a_total"].iter().map(String::as_str).collect::<Vec<_>>(),
            ["peer", "route"]
        );
        assert!(s["b"].is_empty());
    }
}
