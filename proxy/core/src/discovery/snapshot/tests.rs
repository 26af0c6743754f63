//! What a snapshot answers, built from server states as the refresher builds it.

use super::*;
use crate::discovery::side::{Release, ServerVersion, Side};
use crate::testkit::{group_names, view};

fn state(
    name: &str,
    local: bool,
    view: Option<Arc<ServerView>>,
    release: Option<&str>,
) -> ServerState {
    let mut s = ServerState::new(name.into(), format!("http://{name}"), local);
    s.attempted = true;
    s.up = view.is_some();
    s.view = view.map(|v| {
        let minor = release.unwrap_or_default();
        let version = release.map(|_| ServerVersion {
            git_version: format!("v1.{minor}.0"),
            release: Release::from_version_info(&format!("v1.{minor}.0"), "1", minor),
        });
        Arc::new(
            Arc::try_unwrap(v)
                .expect("fresh view")
                .with_version(version),
        )
    });
    s
}

#[test]
fn the_merged_apis_is_built_once_per_snapshot() {
    let snap = Snapshot::build(
        vec![
            state(
                "a",
                true,
                Some(view(&[("apps", "v1", "deployments")])),
                None,
            ),
            state("b", false, Some(view(&[("batch", "v1", "jobs")])), None),
        ],
        &BTreeSet::new(),
        BTreeMap::new(),
        true,
    );
    let (first, cached) = snap.merged().expect("local fetched");
    assert!(!cached, "built on first use");
    let (second, cached) = snap.merged().expect("local fetched");
    assert!(cached, "then served from the snapshot");
    assert!(Arc::ptr_eq(&first, &second));
    assert_eq!(group_names(&first.aggregated), ["apps", "batch"]);

    let unfetched = Snapshot::build(
        vec![state("a", true, None, None)],
        &BTreeSet::new(),
        BTreeMap::new(),
        true,
    );
    assert!(
        unfetched.merged().is_none(),
        "nothing to merge before local is fetched"
    );
}

#[test]
fn local_extensions_and_recent_ones_are_not_routed_to_peers() {
    let crd = ("crd.example", "v1", "widgets");
    let gone = ("gone.example", "v1", "gadgets");
    let recently: BTreeSet<GroupVersion> = [("gone.example".to_owned(), "v1".to_owned())].into();
    let snap = Snapshot::build(
        vec![
            state("a", true, Some(view(&[("", "v1", "pods"), crd])), None),
            state(
                "b",
                false,
                Some(view(&[crd, gone, ("batch", "v1", "jobs")])),
                None,
            ),
        ],
        &recently,
        BTreeMap::new(),
        true,
    );
    let b = [ServerName::from("b")];
    assert!(
        snap.peers_serving(&Gvr::new("crd.example", "v1", "widgets"))
            .is_empty()
    );
    assert!(
        snap.peers_serving(&Gvr::new("gone.example", "v1", "gadgets"))
            .is_empty()
    );
    assert_eq!(snap.peers_serving(&Gvr::new("batch", "v1", "jobs")), b);
    assert_eq!(
        snap.excluded().iter().cloned().collect::<Vec<_>>(),
        [
            ("crd.example".to_owned(), "v1".to_owned()),
            ("gone.example".to_owned(), "v1".to_owned())
        ]
    );
}

#[test]
fn the_side_of_the_skew_comes_from_each_servers_release() {
    let snap = Snapshot::build(
        vec![
            state(
                "a",
                true,
                Some(view(&[("", "v1", "pods"), ("new.example", "v1", "things")])),
                Some("34"),
            ),
            state(
                "b",
                false,
                Some(view(&[("", "v1", "pods"), ("old.example", "v1", "things")])),
                Some("31"),
            ),
        ],
        &BTreeSet::new(),
        BTreeMap::new(),
        true,
    );
    assert_eq!(
        snap.skew_side(&Gvr::new("", "v1", "pods")),
        None,
        "served by all"
    );
    assert_eq!(
        snap.skew_side(&Gvr::new("new.example", "v1", "things")),
        Some(Side::NewOnly)
    );
    assert_eq!(
        snap.skew_side(&Gvr::new("old.example", "v1", "things")),
        Some(Side::OldOnly)
    );
}
