//! The extraction from kube-apiserver's Status messages, and the recording through the hook.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use http::header::CONTENT_TYPE;
use http::{HeaderName, HeaderValue, Method, Response, StatusCode};
use http_body_util::BodyExt;
use prometheus_client::registry::Registry;
use serde_json::json;

use super::*;
use crate::classify::classify;
use crate::discovery::side::{Release, ServerVersion};
use crate::discovery::{ServerState, Snapshot};
use crate::plumbing::{Body, ServerName, full};
use crate::skew::SkewClients;
use crate::testkit::view;
use mvproxy_telemetry::metrics::Metrics;

/// The message kube-apiserver 1.37.2 answered a list of podgroups with, after 1.36.3 wrote one.
const MESSAGE: &str = r#"failed to read one or more podgroups.scheduling.k8s.io from the storage: StorageError: corrupt object, Code: 7, Key: /registry/podgroups/ns1/o1, ResourceVersion: 0, AdditionalErrorMsg: object not decodable revision=677: no kind "PodGroup" is registered for version "scheduling.k8s.io/v1alpha2" in scheme "pkg/runtime/scheme.go:111" (and 4 more)"#;

fn status(message: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "code": 500,
    }))
    .unwrap()
}

fn podgroup() -> Unreadable {
    Unreadable {
        key: Some("/registry/podgroups/ns1/o1".into()),
        group: "scheduling.k8s.io".into(),
        version: "v1alpha2".into(),
        kind: Some("PodGroup".into()),
    }
}

/// The same Status as client-go's typed and metadata clients get it: Kubernetes protobuf
/// (`k8s\0`, `runtime.Unknown` {1: TypeMeta {1: apiVersion, 2: kind}, 2: raw}, raw a
/// `metav1.Status` with its message at field 3), written with test-only messages.
fn status_protobuf(kind: &str, message: &str) -> Vec<u8> {
    use prost::Message;
    #[derive(Clone, PartialEq, prost::Message)]
    struct TypeMeta {
        #[prost(string, tag = "1")]
        api_version: String,
        #[prost(string, tag = "2")]
        kind: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct Unknown {
        #[prost(message, optional, tag = "1")]
        type_meta: Option<TypeMeta>,
        #[prost(bytes = "vec", tag = "2")]
        raw: Vec<u8>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct Status {
        #[prost(string, tag = "2")]
        status: String,
        #[prost(string, tag = "3")]
        message: String,
        #[prost(int32, tag = "6")]
        code: i32,
    }
    let raw = Status {
        status: "Failure".into(),
        message: message.into(),
        code: 500,
    }
    .encode_to_vec();
    let mut out = b"k8s\0".to_vec();
    Unknown {
        type_meta: Some(TypeMeta {
            api_version: "v1".into(),
            kind: kind.into(),
        }),
        raw,
    }
    .encode(&mut out)
    .unwrap();
    out
}

#[test]
fn the_message_reaches_protobuf_clients_too() {
    assert_eq!(
        parse(Format::Protobuf, &status_protobuf("Status", MESSAGE)),
        Ok(podgroup())
    );
    assert_eq!(
        parse(Format::Protobuf, &status_protobuf("Pod", MESSAGE)),
        Err(Skip::NotStatus)
    );
    assert_eq!(
        parse(
            Format::Protobuf,
            &status_protobuf("Status", "etcdserver: timeout")
        ),
        Err(Skip::NotUndecodable)
    );
    let body = status_protobuf("Status", MESSAGE);
    for cut in 0..body.len() {
        let _ = parse(Format::Protobuf, &body[..cut]);
    }
    assert_eq!(
        parse(Format::Protobuf, &status(MESSAGE)),
        Err(Skip::NotStatus)
    );
}

#[test]
fn the_message_of_1_37_names_the_key_the_stored_version_and_the_kind() {
    assert_eq!(parse(Format::Json, &status(MESSAGE)), Ok(podgroup()));
    let reinit = format!("storage is (re)initializing: {MESSAGE}");
    assert_eq!(parse(Format::Json, &status(&reinit)), Ok(podgroup()));
    // a core kind, no key named
    let core =
        r#"object not decodable: no kind "Pod" is registered for version "v9" in scheme "x""#;
    let got = parse_message(core).unwrap();
    assert_eq!((got.group.as_str(), got.version.as_str()), ("", "v9"));
    assert_eq!((got.key, got.kind.as_deref()), (None, Some("Pod")));
}

#[test]
fn anything_else_is_skipped_without_a_panic() {
    assert_eq!(parse(Format::Json, b""), Err(Skip::NotStatus));
    assert_eq!(
        parse(Format::Json, b"\xff\xfe{\"kind\":\"Status\"}"),
        Err(Skip::NotStatus)
    );
    assert_eq!(parse(Format::Json, b"garbage"), Err(Skip::NotStatus));
    assert_eq!(
        parse(Format::Json, br#"{"kind":"Pod","message":"x"}"#),
        Err(Skip::NotStatus)
    );
    assert_eq!(
        parse(Format::Json, br#"{"kind":"Status"}"#),
        Err(Skip::NotStatus)
    );
    assert_eq!(
        parse(Format::Json, &status("etcdserver: request timed out")),
        Err(Skip::NotUndecodable)
    );
    // truncated: the body, the message at every byte
    let body = status(MESSAGE);
    assert_eq!(
        parse(Format::Json, &body[..body.len() / 2]),
        Err(Skip::NotStatus)
    );
    for end in 0..MESSAGE.len() {
        let _ = parse_message(&MESSAGE[..end]);
    }
    let cut = &MESSAGE[..MESSAGE.find("v1alpha2").unwrap()];
    assert_eq!(parse_message(cut), Err(Skip::NoGroupVersion));
    // a group-version that could not be a label value
    let odd = MESSAGE.replace("scheduling.k8s.io/v1alpha2", "Evil Group/v1{x}");
    assert_eq!(parse_message(&odd), Err(Skip::NoGroupVersion));
    // huge: a body past the bound, a key past its own
    let huge = status(&"not decodable ".repeat(10_000));
    assert_eq!(parse(Format::Json, &huge), Err(Skip::TooLarge));
    let long_key = MESSAGE.replace("/registry/", &format!("/registry/{}é", "k".repeat(600)));
    let got = parse_message(&long_key).unwrap();
    assert!(got.key.is_some_and(|k| k.len() <= MAX_KEY));
    // not UTF-8 inside the message (escaped as JSON allows): read, not trusted
    let odd = br#"{"kind":"Status","message":"\ud800 not decodable: no kind \"K\u00e9\" is registered for version \"g/v1\""}"#;
    assert!(matches!(
        parse(Format::Json, odd),
        Ok(_) | Err(Skip::NotStatus)
    ));
}

#[test]
fn the_list_is_bounded_and_one_object_is_one_entry() {
    let u = Undecodable::default();
    let t = SystemTime::UNIX_EPOCH;
    for _ in 0..3 {
        u.note(&podgroup(), "g/v/r".into(), "b", Some("1.37".into()), t);
    }
    assert_eq!(u.report().len(), 1);
    assert_eq!(u.report()[0].count, 3);
    for i in 0..(MAX_LISTED + 5) {
        let mut found = podgroup();
        found.key = Some(format!("/registry/podgroups/ns1/o{i}"));
        u.note(&found, "g/v/r".into(), "b", None, t);
    }
    let listed = u.report();
    assert_eq!(listed.len(), MAX_LISTED);
    assert_eq!(
        listed[0].key.as_deref(),
        Some(format!("/registry/podgroups/ns1/o{}", MAX_LISTED + 4).as_str())
    );
}

fn server(name: &str, local: bool, minor: u32) -> ServerState {
    let mut s = ServerState::new(name.into(), format!("http://{name}"), local);
    s.attempted = true;
    s.up = true;
    let v = view(&[("scheduling.k8s.io", "v1beta1", "podgroups")]);
    let git = format!("v1.{minor}.2");
    s.view = Some(Arc::new(
        Arc::try_unwrap(v)
            .expect("fresh view")
            .with_version(Some(ServerVersion {
                release: Some(Release { major: 1, minor }),
                git_version: git,
            })),
    ));
    s
}

fn failed_response(content_type: &str, status: StatusCode, body: Vec<u8>) -> Response<Body> {
    let mut resp = Response::new(full(body));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_str(content_type).unwrap());
    resp
}

fn lines(registry: &Registry) -> Vec<String> {
    let (text, _) = mvproxy_telemetry::metrics::encode(registry, false).unwrap();
    text.lines()
        .filter(|l| l.starts_with("mvproxy_undecodable_objects_total{"))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn a_list_1_37_cannot_read_is_counted_and_listed_with_the_server() {
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::register(&mut registry));
    let r = Arc::new(SkewClients::new(
        10,
        metrics,
        HeaderName::from_static("x-remote-user"),
    ));
    let snap = Snapshot::build(
        vec![server("a", true, 36), server("b", false, 37)],
        &BTreeSet::new(),
        BTreeMap::new(),
        true,
    );
    let list = classify(
        &Method::GET,
        "/apis/scheduling.k8s.io/v1beta1/namespaces/ns1/podgroups",
        None,
    );
    let peer = ServerName::from("b");
    let body = status(MESSAGE);
    let resp = r.failed(
        &snap,
        &list,
        Some(&peer),
        failed_response(
            "application/json",
            StatusCode::INTERNAL_SERVER_ERROR,
            body.clone(),
        ),
    );
    // the client gets the Status unchanged
    let got = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&got[..], &body[..]);
    let want = "mvproxy_undecodable_objects_total{group=\"scheduling.k8s.io\",version=\"v1alpha2\",resource=\"podgroups\",server_release=\"1.37\"} 1";
    assert_eq!(lines(&registry), [want]);
    let report = r.report(&snap);
    let e = &report["undecodable_objects"][0];
    assert_eq!(e["key"], "/registry/podgroups/ns1/o1", "{report}");
    assert_eq!(
        (&e["stored_group"], &e["stored_version"], &e["kind"]),
        (
            &json!("scheduling.k8s.io"),
            &json!("v1alpha2"),
            &json!("PodGroup")
        )
    );
    assert_eq!(e["requested"], "scheduling.k8s.io/v1beta1/podgroups");
    assert_eq!(
        (&e["server"], &e["server_release"]),
        (&json!("b"), &json!("1.37"))
    );
    assert_eq!(e["count"], 1);
    assert_eq!(report["max_undecodable_objects"], MAX_LISTED);

    // a list is answered 429 with the same message while the watch cache cannot initialise
    let reinit = status(&format!(
        "storage is (re)initializing: failed to list: {MESSAGE}"
    ));
    let resp = r.failed(
        &snap,
        &list,
        Some(&peer),
        failed_response("application/json", StatusCode::TOO_MANY_REQUESTS, reinit),
    );
    let _ = resp.into_body().collect().await.unwrap();
    assert_eq!(r.report(&snap)["undecodable_objects"][0]["count"], 2);

    // not looked at: another status, YAML, a GVR no server serves
    let made_up = classify(
        &Method::GET,
        "/apis/scheduling.k8s.io/v1alpha9/podgroups",
        None,
    );
    for (info, ct, code) in [
        (&list, "application/json", StatusCode::SERVICE_UNAVAILABLE),
        (&list, "application/yaml", StatusCode::INTERNAL_SERVER_ERROR),
        (
            &made_up,
            "application/json",
            StatusCode::INTERNAL_SERVER_ERROR,
        ),
    ] {
        let resp = r.failed(&snap, info, None, failed_response(ct, code, body.clone()));
        let _ = resp.into_body().collect().await.unwrap();
    }
    assert_eq!(lines(&registry), [want.replace("} 1", "} 2")]);
}
