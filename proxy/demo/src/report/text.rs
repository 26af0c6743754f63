//! The report as text, for people: one function per section of [`text`].

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::{Counts, Report};
use crate::plan::NODES;

/// The report for people: a heading, the segment table, the answers, latencies, discovery,
/// the skew, the clients on each side of it, the prediction made before the upgrade and the
/// reconciliation, blank-line separated.
pub(crate) fn text(r: &Report) -> String {
    let mut out = String::new();
    let sections: [fn(&mut String, &Report); 9] = [
        heading_text,
        segments_text,
        answers_text,
        latency_text,
        discovery_text,
        skew_text,
        readiness_text,
        before_upgrade_text,
        reconciliation_text,
    ];
    for (i, section) in sections.into_iter().enumerate() {
        if i > 0 {
            let _ = writeln!(out);
        }
        section(&mut out, r);
    }
    out
}

/// The run's one-line description and its workload.
fn heading_text(w: &mut String, r: &Report) {
    let _ = writeln!(
        w,
        "mvproxy demo: rolling upgrade of {} from {} to {}, through mvproxy{}",
        r.nodes
            .iter()
            .map(|n| n.name.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        r.releases.old,
        r.releases.new,
        if r.interrupted {
            " (INTERRUPTED: numbers so far)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        w,
        "seed {} · {} req/s · {:.1} s of traffic planned · {:.1} s wall, {:.1} s of it settling between steps",
        r.workload.seed,
        r.workload.rate,
        r.workload.duration_seconds,
        r.wall_seconds,
        r.settle_seconds
    );
}

/// One row per segment, and the total.
fn segments_text(w: &mut String, r: &Report) {
    let header = [
        "phase",
        "segment",
        "nodes",
        "sent",
        "local",
        "rerouted",
        "404s avoided",
        "503s",
        "true 404s",
        "p99 local",
        "p99 peer",
    ];
    let mut rows: Vec<Vec<String>> = Vec::new();
    for p in &r.phases {
        for (i, s) in p.segments.iter().enumerate() {
            let name = if i == 0 {
                p.name.clone()
            } else {
                String::new()
            };
            rows.push(row(
                name,
                format!("{:?}", s.kind).to_lowercase(),
                s.nodes.join(" "),
                &s.counts,
            ));
        }
    }
    rows.push(row(
        "total".to_owned(),
        String::new(),
        String::new(),
        &r.total,
    ));
    table(w, &header, &rows, 3);
}

/// What the clients got, and where the reroutes went.
fn answers_text(w: &mut String, r: &Report) {
    let t = &r.total;
    let _ = writeln!(
        w,
        "{} of {} requests answered ({} lost); {} answers contradicted their counterfactual.",
        t.answered, t.sent, t.lost, t.unexpected
    );
    for e in &t.unexpected_examples {
        let _ = writeln!(
            w,
            "  unexpected: #{} {} {} via {}: expected {:?}, got {} from {}{}",
            e.seq,
            e.method,
            e.path,
            e.node,
            e.expect,
            e.status
                .map_or_else(|| "no answer".to_owned(), |s| s.to_string()),
            e.answered_by.as_deref().unwrap_or("mvproxy"),
            e.error
                .as_deref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default()
        );
    }
    let _ = writeln!(w, "rerouted by group: {}", joined(&t.rerouted_by_group));
    let _ = writeln!(w, "rerouted by peer:  {}", joined(&t.rerouted_by_peer));
}

/// Client-side latency, local and through a peer.
fn latency_text(w: &mut String, r: &Report) {
    let t = &r.total;
    let lat = [
        ("served locally", &t.latency_ms.local),
        ("via a peer (one more hop)", &t.latency_ms.peer),
    ];
    let rows: Vec<Vec<String>> = lat
        .iter()
        .map(|(name, p)| {
            vec![
                format!("  {name}"),
                p.count.to_string(),
                ms(p.p50),
                ms(p.p95),
                ms(p.p99),
            ]
        })
        .collect();
    table(
        w,
        &["latency, client-side", "n", "p50", "p95", "p99"],
        &rows,
        1,
    );
}

/// Merged discovery and the routing index, by the proxies' metrics.
fn discovery_text(w: &mut String, r: &Report) {
    let t = &r.total;
    let px = &t.proxies;
    let _ = writeln!(
        w,
        "discovery: {} GET /apis ({} merged 200s, {} 304s); routing-index lookups {} hit, {} miss ({})",
        t.discovery.requests,
        t.discovery.merged,
        t.discovery.not_modified,
        px.cache_lookups_hit,
        px.cache_lookups_miss,
        px.cache_hit_ratio.map_or_else(
            || "no lookups".to_owned(),
            |r| format!("{:.1}% hits", 100.0 * r)
        )
    );
    let _ = writeln!(
        w,
        "merges: {} built (mean {}, p99 ≤ {}), {} served from the cache",
        px.merges_built,
        ms_unit(px.merge_latency_mean_ms),
        ms_unit(px.merge_latency_p99_le_ms),
        px.merges_cached
    );
}

/// The nodes serving each GVR of the skew, at the end of each phase.
fn skew_text(w: &mut String, r: &Report) {
    let _ = writeln!(
        w,
        "skew: GVRs not served by every node, and the nodes serving each at the end of each phase"
    );
    let mut header = vec!["  gvr".to_owned()];
    header.extend(r.phases.iter().map(|p| p.name.clone()));
    let rows: Vec<Vec<String>> = r
        .skew
        .iter()
        .map(|row| {
            let mut cells = vec![format!("  {}", row.gvr)];
            for p in &r.phases {
                let by = row.served_by.get(&p.name).cloned().unwrap_or_default();
                cells.push(match by.len() {
                    0 => "-".to_owned(),
                    NODES => "all".to_owned(),
                    _ => by
                        .iter()
                        .map(|n| n.trim_start_matches("apiserver-"))
                        .collect::<Vec<_>>()
                        .join(","),
                });
            }
            cells
        })
        .collect();
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    table(w, &header, &rows, 1);
}

/// The client's side against the proxies' metrics, check by check.
fn reconciliation_text(w: &mut String, r: &Report) {
    let t = &r.total;
    let px = &t.proxies;
    let _ = writeln!(
        w,
        "reconciliation with the 3 proxies' /metrics and /debug/discovery: {}",
        if r.reconciled { "OK, exact" } else { "FAILED" }
    );
    let _ = writeln!(
        w,
        "  each request was checked against the discovery of the server the load balancer picked;"
    );
    let _ = writeln!(
        w,
        "  false 404s avoided = {} = {} rerouted (mvproxy_rerouted_request_total) + {} answered 503",
        t.false_404s_avoided, px.rerouted_request_total, px.peers_down_503_total
    );
    let _ = writeln!(
        w,
        "  because every server of the GVR was restarting (mvproxy_requests_total{{route=\"peer\",peer=\"\"}})"
    );
    for c in &t.checks {
        let _ = writeln!(
            w,
            "  [{}] {}: {} vs {}",
            if c.ok { "ok" } else { "FAIL" },
            c.name,
            c.expected,
            c.measured
        );
    }
    for p in &r.phases {
        for (i, s) in p.segments.iter().enumerate() {
            for c in s.counts.checks.iter().filter(|c| !c.ok) {
                let _ = writeln!(
                    w,
                    "  [FAIL] {} segment {}: {}: {} vs {}",
                    p.name, i, c.name, c.expected, c.measured
                );
            }
        }
    }
}

/// The clients that used APIs one release does not serve, per side.
fn readiness_text(w: &mut String, r: &Report) {
    let sections = [
        (
            format!(
                "clients that used APIs {} does not serve (they break after the upgrade; side=\"old_only\")",
                r.releases.new
            ),
            &r.readiness.breaks_after_upgrade,
        ),
        (
            format!(
                "clients that used APIs only {} serves (they break on a rollback; side=\"new_only\")",
                r.releases.new
            ),
            &r.readiness.breaks_on_rollback,
        ),
    ];
    for (i, (title, clients)) in sections.into_iter().enumerate() {
        if i > 0 {
            let _ = writeln!(w);
        }
        let _ = writeln!(w, "{title}:");
        if clients.is_empty() {
            let _ = writeln!(w, "  none");
            continue;
        }
        let rows: Vec<Vec<String>> = clients
            .iter()
            .map(|c| {
                vec![
                    format!("  {}", c.client),
                    c.requests.to_string(),
                    c.counted_by_mvproxy.to_string(),
                    c.gvrs.len().to_string(),
                ]
            })
            .collect();
        table(
            w,
            &[
                "  client",
                "requests",
                "mvproxy_skew_requests_total",
                "gvrs",
            ],
            &rows,
            1,
        );
        for c in clients {
            let _ = writeln!(w, "  {}: {}", c.client, top_gvrs(&c.gvrs, GVRS_SHOWN));
        }
    }
}

/// The prediction of `all-old` beside what `all-new` did.
fn before_upgrade_text(w: &mut String, r: &Report) {
    let b = &r.before_upgrade;
    let _ = writeln!(
        w,
        "Before the upgrade: what target {} breaks, counted during all-old (mvproxy_target_missing_requests_total), beside all-new:",
        b.target
    );
    if b.rows.is_empty() {
        let _ = writeln!(w, "  none");
    } else {
        let rows: Vec<Vec<String>> = b
            .rows
            .iter()
            .map(|p| {
                vec![
                    format!("  {}", p.client),
                    p.gvr.clone(),
                    p.sent_before.to_string(),
                    p.predicted.to_string(),
                    p.sent_after.to_string(),
                    p.not_found_after.to_string(),
                ]
            })
            .collect();
        table(
            w,
            &[
                "  client",
                "gvr",
                "sent all-old",
                "predicted",
                "sent all-new",
                "404 all-new",
            ],
            &rows,
            2,
        );
    }
    let _ = writeln!(
        w,
        "  prediction held: {}",
        if b.held { "yes" } else { "NO" }
    );
}

/// GVRs listed per client in the text report.
const GVRS_SHOWN: usize = 3;

/// The `n` most requested GVRs, `gvr count` joined, and how many more.
fn top_gvrs(gvrs: &BTreeMap<String, u64>, n: usize) -> String {
    let mut items: Vec<(&String, &u64)> = gvrs.iter().collect();
    items.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let mut text = items
        .iter()
        .take(n)
        .map(|(g, c)| format!("{g} {c}"))
        .collect::<Vec<_>>()
        .join(" · ");
    if items.len() > n {
        let _ = write!(text, " · {} more", items.len() - n);
    }
    text
}

fn row(phase: String, segment: String, nodes: String, c: &Counts) -> Vec<String> {
    vec![
        phase,
        segment,
        nodes,
        c.sent.to_string(),
        c.served_locally.to_string(),
        c.rerouted.to_string(),
        c.false_404s_avoided.to_string(),
        c.unavailable_503.to_string(),
        c.true_404s.to_string(),
        ms_unit(c.latency_ms.local.p99),
        ms_unit(c.latency_ms.peer.p99),
    ]
}

/// Writes rows under a header; columns from `first_numeric` on are right-aligned.
fn table(w: &mut String, header: &[&str], rows: &[Vec<String>], first_numeric: usize) {
    let cols = header.len();
    let width: Vec<usize> = (0..cols)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .chain(std::iter::once(header[i].chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |w: &mut String, cells: Vec<&str>| {
        let mut text = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i > 0 {
                text.push_str("  ");
            }
            let pad = width[i].saturating_sub(cell.chars().count());
            if i >= first_numeric {
                text.push_str(&" ".repeat(pad));
                text.push_str(cell);
            } else {
                text.push_str(cell);
                text.push_str(&" ".repeat(pad));
            }
        }
        let _ = writeln!(w, "{}", text.trim_end());
    };
    line(w, header.to_vec());
    for r in rows {
        line(w, r.iter().map(String::as_str).collect());
    }
}

fn joined(map: &BTreeMap<String, u64>) -> String {
    if map.is_empty() {
        return "none".to_owned();
    }
    let mut items: Vec<(&String, &u64)> = map.iter().collect();
    items.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    items
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(" · ")
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"))
}

fn ms_unit(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2} ms"))
}

#[cfg(test)]
mod tests;
