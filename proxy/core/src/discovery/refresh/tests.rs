use super::*;
use crate::classify::Gvr;
use crate::discovery::fetch::FetchError;
use crate::testkit::{fetch_failed, upstream, view};

fn gvs(list: &[&str]) -> BTreeSet<GroupVersion> {
    list.iter()
        .map(|gv| {
            let (g, v) = gv.split_once('/').unwrap_or(("", gv));
            (g.to_owned(), v.to_owned())
        })
        .collect()
}

#[test]
fn exclusion_grace_transitions() {
    let start = Instant::now();
    let secs = |s: u64| start + Duration::from_secs(s);
    let grace = EXCLUSION_GRACE.as_secs();
    // (at, the local extensions then, changed?, recently left after)
    let steps: &[(u64, &[&str], bool, &[&str])] = &[
        (0, &["crd.example/v1"], true, &[]),
        (1, &["crd.example/v1"], false, &[]),
        // the CRD is deleted: its group-version stays excluded from peers
        (10, &[], true, &["crd.example/v1"]),
        (10 + grace - 1, &[], false, &["crd.example/v1"]),
        // five minutes after it left, the grace is over
        (10 + grace, &[], true, &[]),
        (10 + grace + 1, &[], false, &[]),
        // it comes back, leaves again, and comes back within the grace: no longer "left"
        (1000, &["crd.example/v1"], true, &[]),
        (1001, &[], true, &["crd.example/v1"]),
        (1002, &["crd.example/v1"], true, &[]),
        // three leave at different times; each has its own five minutes
        (
            2000,
            &["a.example/v1", "b.example/v1"],
            true,
            &["crd.example/v1"],
        ),
        (
            2001,
            &["b.example/v1"],
            true,
            &["a.example/v1", "crd.example/v1"],
        ),
        (
            2100,
            &[],
            true,
            &["a.example/v1", "b.example/v1", "crd.example/v1"],
        ),
        (2000 + grace, &[], true, &["a.example/v1", "b.example/v1"]),
        (2001 + grace, &[], true, &["b.example/v1"]),
        (2100 + grace, &[], true, &[]),
    ];
    let mut e = Exclusions::default();
    for &(at, current, changed, left) in steps {
        assert_eq!(
            e.update(gvs(current), secs(at)),
            changed,
            "at {at}s: changed"
        );
        let got: BTreeSet<GroupVersion> = e.left.keys().cloned().collect();
        assert_eq!(got, gvs(left), "at {at}s: recently left");
    }
}

/// A cache for the server `local`, whose peers `factory` builds, reading the time from
/// `clock`.
fn cache(factory: UpstreamFactory, clock: Clock) -> Arc<Cache> {
    Cache::with_clock(
        upstream("local", "http://127.0.0.1:1"),
        factory,
        RefreshSettings {
            interval: Duration::from_secs(30),
            max_document_bytes: 1 << 20,
        },
        Arc::new(Metrics::register(&mut Default::default())),
        clock,
    )
}

/// Peers' upstreams as [`upstream`] builds them, never connected to.
fn peers() -> UpstreamFactory {
    Box::new(|name, url| Ok(upstream(name.as_str(), &url.to_string())))
}

fn peer(name: &str, url: &str, generation: &str) -> PeerSpec {
    PeerSpec {
        name: name.into(),
        url: url.parse().unwrap(),
        generation: generation.to_owned(),
    }
}

/// The peer set as the cache publishes it: name and URL after the local server.
fn published(cache: &Cache) -> Vec<(String, String)> {
    cache
        .load()
        .servers
        .iter()
        .filter(|s| !s.local)
        .map(|s| (s.name.to_string(), s.url.clone()))
        .collect()
}

#[tokio::test]
async fn peer_set_transitions() {
    let factory: UpstreamFactory = Box::new(|name, url| {
        // a peer whose TLS name cannot be used is ignored, as a bad --peer-server-name is
        if name.as_str() == "broken" {
            return Err(UpstreamError::ServerName {
                name: "not a name!".to_owned(),
                source: rustls::pki_types::ServerName::try_from("not a name!").unwrap_err(),
            });
        }
        Ok(upstream(name.as_str(), &url.to_string()))
    });
    let cache = cache(factory, Arc::new(Instant::now));
    let b = "http://127.0.0.2:6443";
    let woken = |cache: &Cache, name: &str| {
        let wake = cache.lock().members[&ServerName::from(name)].wake.clone();
        // notify_one stores a permit, so a wake-up already sent completes at once
        async move {
            tokio::time::timeout(Duration::ZERO, wake.notified())
                .await
                .is_ok()
        }
    };
    assert!(
        !cache.lock().peers_synced,
        "not synced before the first report"
    );

    /// (step, peers reported, published peers after, the snapshot changed?)
    type Step<'a> = (&'a str, Vec<PeerSpec>, Vec<(&'a str, &'a str)>, bool);
    let steps: Vec<Step<'_>> = vec![
        ("first report, empty", vec![], vec![], true),
        (
            "b joins",
            vec![peer("b", b, "1")],
            vec![("b", "http://127.0.0.2:6443/")],
            true,
        ),
        (
            "same set",
            vec![peer("b", b, "1")],
            vec![("b", "http://127.0.0.2:6443/")],
            false,
        ),
        (
            "b restarts",
            vec![peer("b", b, "2")],
            vec![("b", "http://127.0.0.2:6443/")],
            false,
        ),
        (
            "b moves",
            vec![peer("b", "http://127.0.0.3:6443", "2")],
            vec![("b", "http://127.0.0.3:6443/")],
            true,
        ),
        (
            "a bad peer is ignored",
            vec![
                peer("b", "http://127.0.0.3:6443", "2"),
                peer("broken", b, "1"),
            ],
            vec![("b", "http://127.0.0.3:6443/")],
            false,
        ),
        ("b leaves", vec![], vec![], true),
    ];
    for (step, peers, want, changed) in steps {
        let before = cache.load();
        cache.set_peers(peers);
        let after = cache.load();
        assert!(cache.lock().peers_synced, "{step}: synced");
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(n, u)| ((*n).to_owned(), (*u).to_owned()))
            .collect();
        assert_eq!(published(&cache), want, "{step}");
        assert_eq!(!Arc::ptr_eq(&before, &after), changed, "{step}: published");
        match step {
            "b joins" => assert!(
                !woken(&cache, "b").await,
                "a new peer's task fetches at start"
            ),
            "b restarts" => assert!(woken(&cache, "b").await, "{step}: refetch"),
            _ => {}
        }
    }
}

/// The exclusion grace through the cache itself: fetch results recorded on a hand-moved
/// clock, the published snapshot read after each.
#[test]
fn a_crd_that_left_stays_excluded_from_peers_for_five_minutes() {
    let start = Instant::now();
    let now = Arc::new(Mutex::new(start));
    let clock: Clock = {
        let now = now.clone();
        Arc::new(move || *now.lock().unwrap())
    };
    let cache = cache(peers(), clock);
    cache.set_peers(vec![peer("b", "http://127.0.0.2:6443", "1")]);
    let widgets = crate::classify::Gvr::new("crd.example", "v1", "widgets");
    let pods = ("", "v1", "pods");
    let with_crd = || view(&[pods, ("crd.example", "v1", "widgets")]);
    let record = |name: &str, v: Arc<ServerView>| {
        cache.record_for_test(&name.into(), Ok(Arc::try_unwrap(v).unwrap()));
    };
    record("b", with_crd());
    let grace = EXCLUSION_GRACE.as_secs();
    // (seconds after start, local serves the CRD?, b is a route for it after)
    let steps: &[(u64, bool, bool)] = &[
        (0, true, false),
        (10, false, false),
        (10 + grace - 1, false, false),
        (10 + grace, false, true),
        (10 + grace + 5, true, false),
    ];
    for &(at, local_crd, routed) in steps {
        *now.lock().unwrap() = start + Duration::from_secs(at);
        record("local", if local_crd { with_crd() } else { view(&[pods]) });
        let snap = cache.load();
        assert_eq!(
            snap.peers_serving(&widgets) == [ServerName::from("b")],
            routed,
            "at {at}s: b routed for the CRD's GVR"
        );
        assert_eq!(
            snap.excluded()
                .contains(&("crd.example".to_owned(), "v1".to_owned())),
            !routed,
            "at {at}s: excluded"
        );
    }
}

#[test]
fn a_failed_version_read_keeps_the_release_of_an_unchanged_surface() {
    use crate::discovery::side::{Release, ServerVersion};
    let cache = cache(peers(), Arc::new(Instant::now));
    let v131 = ServerVersion::from_json(br#"{"gitVersion":"v1.31.0"}"#);
    let old = || Arc::try_unwrap(view(&[("", "v1", "pods")])).unwrap();
    let new = || Arc::try_unwrap(view(&[("", "v1", "pods"), ("", "v1", "nodes")])).unwrap();
    let release = |cache: &Cache| {
        cache.servers()[0]
            .view
            .as_ref()
            .and_then(|v| v.version.clone())
            .and_then(|v| v.release)
    };
    let local: ServerName = "local".into();
    cache.record_for_test(&local, Ok(old().with_version(v131.clone())));
    let r131 = Some(Release {
        major: 1,
        minor: 31,
    });
    assert_eq!(release(&cache), r131);
    // the same surface, /version unread: still 1.31
    cache.record_for_test(&local, Ok(old()));
    assert_eq!(release(&cache), r131);
    // then down: the last view keeps its release
    cache.record_for_test(&local, Err(fetch_failed("local", "connection refused")));
    assert_eq!(release(&cache), r131);
    // another surface with /version unread: the release is not known
    cache.record_for_test(&local, Ok(new()));
    assert_eq!(release(&cache), None);
}

/// The failure keeps its origin up to where it is shown; the same failure again is no
/// change (nothing republished), another one is.
#[test]
fn a_failure_is_kept_typed_and_republished_only_when_it_reads_differently() {
    let cache = cache(peers(), Arc::new(Instant::now));
    let local: ServerName = "local".into();
    cache.record_for_test(&local, Err(fetch_failed("local", "connection refused")));
    let first = cache.load();
    let error = cache.servers()[0].error.clone();
    assert!(
        matches!(
            error.as_deref(),
            Some(RefreshError::Fetch(FetchError::Request { path, .. })) if path == "/api"
        ),
        "{error:?}"
    );
    cache.record_for_test(&local, Err(fetch_failed("local", "connection refused")));
    assert!(Arc::ptr_eq(&first, &cache.load()), "the same failure again");
    cache.record_for_test(&local, Err(fetch_failed("local", "connection reset")));
    assert!(!Arc::ptr_eq(&first, &cache.load()), "another failure");
    let shown = cache.servers()[0].error.as_ref().map(ToString::to_string);
    assert_eq!(
        shown.as_deref(),
        Some("GET /api: local could not be reached: connection reset")
    );
}

#[tokio::test]
async fn a_suspect_peer_is_out_of_the_routing_until_a_probe_succeeds() {
    let cache = cache(peers(), Arc::new(Instant::now));
    cache.set_peers(vec![
        peer("b", "http://127.0.0.2:6443", "1"),
        peer("c", "http://127.0.0.3:6443", "1"),
    ]);
    let gvrs = [("scheduling.k8s.io", "v1alpha2", "workloads")];
    let gvr = Gvr::new("scheduling.k8s.io", "v1alpha2", "workloads");
    cache.record_for_test(&"local".into(), Ok(Arc::try_unwrap(view(&[])).unwrap()));
    for p in ["b", "c"] {
        cache.record_for_test(&p.into(), Ok(Arc::try_unwrap(view(&gvrs)).unwrap()));
    }
    let up = |cache: &Cache| -> Vec<String> {
        cache
            .load()
            .serving(&gvr)
            .map(|s| s.up.iter().map(ToString::to_string).collect())
            .unwrap_or_default()
    };
    let health = |cache: &Cache, name: &str| {
        cache
            .servers()
            .iter()
            .find(|s| s.name.as_str() == name)
            .map(ServerState::health)
    };
    assert_eq!(up(&cache), ["b", "c"]);
    let b_woken = cache.lock().members[&ServerName::from("b")].wake.clone();
    let refused = ProxyError::Transport {
        upstream: "b".into(),
        failure: crate::error::TransportFailure::Other,
        cause: "tcp connect error: Connection refused".into(),
        written: false,
    };

    cache.suspect(&"b".into(), &refused);
    assert_eq!(up(&cache), ["c"], "out of the routing at once");
    assert_eq!(health(&cache, "b"), Some("suspect"));
    let shown = cache.servers()[1].error.as_ref().map(ToString::to_string);
    assert!(
        shown
            .as_deref()
            .is_some_and(|e| e.contains("Connection refused")),
        "{shown:?}"
    );
    assert!(
        tokio::time::timeout(Duration::ZERO, b_woken.notified())
            .await
            .is_ok(),
        "its refresher is woken to probe it"
    );
    // A failed probe keeps it suspect and shows its own failure, the request's beside it;
    // the local server is never marked.
    cache.record_for_test(&"b".into(), Err(fetch_failed("b", "probe refused")));
    assert_eq!(health(&cache, "b"), Some("suspect"));
    assert_eq!(up(&cache), ["c"]);
    let b = cache.servers()[1].clone();
    let shown = b
        .error
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(shown.contains("probe refused"), "{shown}");
    let first = b
        .suspected_by
        .as_ref()
        .map(|(e, _)| e.to_string())
        .unwrap_or_default();
    assert!(first.contains("Connection refused"), "{first}");
    cache.suspect(&"local".into(), &refused);
    assert_eq!(health(&cache, "local"), Some("up"));
    // A probe that succeeds brings it back.
    cache.record_for_test(&"b".into(), Ok(Arc::try_unwrap(view(&gvrs)).unwrap()));
    assert_eq!(health(&cache, "b"), Some("up"));
    assert_eq!(up(&cache), ["b", "c"]);
    let b = cache.servers()[1].clone();
    assert!(b.error.is_none() && b.error_at.is_none() && b.suspected_by.is_none());
    // A failed scheduled fetch of a server never suspected is "down".
    cache.record_for_test(&"c".into(), Err(fetch_failed("c", "connection refused")));
    assert_eq!(health(&cache, "c"), Some("down"));
}

#[test]
fn backoff_doubles_up_to_the_interval() {
    let cap = Duration::from_secs(30);
    let got: Vec<_> = (1..=8).map(|n| backoff(n, cap).as_millis()).collect();
    assert_eq!(got, [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000]);
    assert_eq!(backoff(1000, cap), cap);
}

/// `mvproxy_server_info` follows each server's `/version`: a restart on a new release moves
/// the server's one series to the new `gitVersion` (what the overview dashboard annotates),
/// a failed read of an unchanged surface keeps it, and a peer that leaves takes it along.
#[tokio::test]
async fn the_server_info_series_follows_each_servers_version() {
    use crate::discovery::side::ServerVersion;
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Arc::new(Metrics::register(&mut registry));
    let cache = Cache::with_clock(
        upstream("local", "http://127.0.0.1:1"),
        peers(),
        RefreshSettings {
            interval: Duration::from_secs(30),
            max_document_bytes: 1 << 20,
        },
        metrics,
        Arc::new(Instant::now),
    );
    cache.set_peers(vec![peer("b", "http://127.0.0.2:6443", "1")]);
    let info = || {
        let (text, _) = mvproxy_telemetry::metrics::encode(&registry, false).unwrap();
        let mut lines: Vec<String> = text
            .lines()
            .filter(|l| l.starts_with("mvproxy_server_info{"))
            .map(str::to_owned)
            .collect();
        lines.sort_unstable();
        lines
    };
    let at = |git: &str, gvrs: &[(&str, &str, &str)]| {
        Ok(Arc::try_unwrap(view(gvrs))
            .unwrap()
            .with_version(ServerVersion::from_json(
                format!(r#"{{"gitVersion":"{git}"}}"#).as_bytes(),
            )))
    };
    let pods = [("", "v1", "pods")];
    cache.record_for_test(&"local".into(), at("v1.35.4", &pods));
    cache.record_for_test(&"b".into(), at("v1.35.4", &pods));
    assert_eq!(
        info(),
        [
            r#"mvproxy_server_info{server="b",git_version="v1.35.4"} 1"#,
            r#"mvproxy_server_info{server="local",git_version="v1.35.4"} 1"#,
        ]
    );
    cache.record_for_test(&"b".into(), Err(fetch_failed("b", "connection refused")));
    cache.record_for_test(
        &"b".into(),
        at("v1.36.3", &[("", "v1", "pods"), ("", "v1", "nodes")]),
    );
    cache.record_for_test(&"local".into(), Ok(Arc::try_unwrap(view(&pods)).unwrap()));
    assert_eq!(
        info(),
        [
            r#"mvproxy_server_info{server="b",git_version="v1.36.3"} 1"#,
            r#"mvproxy_server_info{server="local",git_version="v1.35.4"} 1"#,
        ]
    );
    cache.set_peers(vec![]);
    assert_eq!(
        info(),
        [r#"mvproxy_server_info{server="local",git_version="v1.35.4"} 1"#]
    );
}
