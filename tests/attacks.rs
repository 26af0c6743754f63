//! Attacks mvproxy held when tried by hand, kept as regression tests: request smuggling
//! through ambiguous message framing, and path traversal spellings that would route one way
//! in mvproxy and mean another thing to the API server behind it.
//!
//! Each test asserts on what the stand-in API servers *recorded*, not only on the status the
//! client saw: the attack succeeds if an upstream receives a request mvproxy never routed.

use std::net::SocketAddr;

use http::Method;
use integration::conn::{RawAnswer, ReadUntil, raw_exchange};
use integration::*;
use mvproxy_core::classify::{RequestInfo, classify};

use crate::cluster::Cluster;

/// A path segment no legitimate request in these tests carries: any recorded request whose
/// path holds it was smuggled.
const SMUGGLED: &str = "smuggled";

/// Writes `bytes` as they are and reads every response until the proxy closes the
/// connection: every request sent here makes it close (`Connection: close`, a refusal, or
/// framing it will not reuse the connection after). No half-close: hyper reads one as the
/// client leaving and drops the request in flight.
async fn exchange(addr: SocketAddr, bytes: &[u8]) -> RawAnswer {
    raw_exchange(addr, bytes, false, ReadUntil::Closed).await
}

/// Every request either stand-in recorded whose path contains `needle`.
fn reached(c: &Cluster, needle: &str) -> Vec<String> {
    [&c.a, &c.b]
        .into_iter()
        .flat_map(|s| requests_for(s, needle))
        .map(|r| r.path_and_query)
        .collect()
}

/// A `POST` of configmaps whose framing headers are `framing`, with `body` as its bytes.
fn post(framing: &str, body: &str) -> String {
    post_to(CONFIGMAPS, framing, body)
}

/// A `POST` to `path` whose framing headers are `framing`, with `body` as its bytes.
fn post_to(path: &str, framing: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\
         Content-Type: application/json\r\n{framing}\r\n{body}"
    )
}

/// A second request hidden where one reading of the framing sees body and the other sees a
/// new request.
fn hidden(tag: &str) -> String {
    format!("GET /api/v1/namespaces/{SMUGGLED}-{tag}/secrets HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
}

/// A chunked body that ends at once, then the request hidden as `tag`.
fn last_chunk_then_hidden(tag: &str) -> String {
    format!("0\r\n\r\n{}", hidden(tag))
}

/// A `POST` to `path` with Content-Length and Transfer-Encoding together (in either order): by
/// Content-Length the hidden request is body, by chunked framing it is a second request.
fn content_length_and_chunked(path: &str, tag: &str, chunked_first: bool) -> String {
    let body = last_chunk_then_hidden(tag);
    let cl = format!("Content-Length: {}\r\n", body.len());
    let te = "Transfer-Encoding: chunked\r\n";
    let framing = if chunked_first {
        format!("{te}{cl}")
    } else {
        format!("{cl}{te}")
    };
    post_to(path, &framing, &body)
}

/// A `POST` to `path` with two differing Content-Length headers: by the first the hidden
/// request is a request, by the second it is body.
fn two_content_lengths(path: &str, tag: &str) -> String {
    let hidden = hidden(tag);
    post_to(
        path,
        &format!(
            "Content-Length: 2\r\nContent-Length: {}\r\n",
            2 + hidden.len()
        ),
        &format!("{{}}{hidden}"),
    )
}

/// What mvproxy does with a request whose framing is ambiguous.
enum Expect {
    /// `400`, or the connection closed unanswered.
    Refused,
    /// Read by its chunked framing, answered, and the connection closed.
    ChunkedThenClosed,
}

#[tokio::test]
async fn ambiguous_framing_is_refused_and_no_smuggled_request_reaches_an_upstream() {
    let c = Cluster::start().await;

    // Content-Length shorter than the chunked body: by Content-Length the rest is a request.
    let short_chunk = format!("{:x}\r\n{}\r\n0\r\n\r\n", 4 + hidden("short").len(), {
        let mut s = String::from("{}\r\n");
        s.push_str(&hidden("short"));
        s
    });
    // Both framings (RFC 9112 section 6.3): Transfer-Encoding wins, the Content-Length is
    // dropped, and the connection is closed after the answer, so nothing after the chunked
    // body is read as a request. Every other ambiguity is refused with 400. The peer route's
    // cases are the same on the peer hop (proxy A to proxy B to apiserver-b), where a desync
    // would poison a pooled connection between the proxies.
    let cases: Vec<(&str, String, Expect)> = vec![
        (
            "Content-Length then Transfer-Encoding",
            content_length_and_chunked(CONFIGMAPS, "te-cl", false),
            Expect::ChunkedThenClosed,
        ),
        (
            "Transfer-Encoding then Content-Length",
            content_length_and_chunked(CONFIGMAPS, "cl-te", true),
            Expect::ChunkedThenClosed,
        ),
        (
            "short Content-Length with a chunked body",
            post(
                "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n",
                &short_chunk,
            ),
            Expect::ChunkedThenClosed,
        ),
        (
            "two differing Content-Length headers",
            two_content_lengths(CONFIGMAPS, "two-cl"),
            Expect::Refused,
        ),
        (
            "chunked, identity",
            post(
                "Transfer-Encoding: chunked, identity\r\n",
                &last_chunk_then_hidden("identity"),
            ),
            Expect::Refused,
        ),
        (
            "chunked then a second Transfer-Encoding line",
            post(
                "Transfer-Encoding: chunked\r\nTransfer-Encoding: x\r\n",
                &last_chunk_then_hidden("two-te"),
            ),
            Expect::Refused,
        ),
        (
            "obfuscated xchunked",
            post(
                "Transfer-Encoding: xchunked\r\n",
                &last_chunk_then_hidden("xchunked"),
            ),
            Expect::Refused,
        ),
        (
            "space before the colon",
            post(
                "Transfer-Encoding : chunked\r\n",
                &last_chunk_then_hidden("space"),
            ),
            Expect::Refused,
        ),
        (
            "chunked folded onto a continuation line",
            post(
                "Transfer-Encoding:\r\n chunked\r\n",
                &last_chunk_then_hidden("folded"),
            ),
            Expect::Refused,
        ),
        (
            "peer route: Content-Length then Transfer-Encoding",
            content_length_and_chunked(OLD_ONLY, "peer-cl-te", false),
            Expect::ChunkedThenClosed,
        ),
        (
            "peer route: two differing Content-Length headers",
            two_content_lengths(OLD_ONLY, "peer-two-cl"),
            Expect::Refused,
        ),
    ];

    let mut forwarded = 0;
    for (what, bytes, expect) in cases {
        let answer = exchange(c.proxy_a.listen, bytes.as_bytes()).await;
        let (codes, text) = (answer.codes(), answer.text);
        // At most one response on the connection: the hidden request was never read as a
        // request of its own.
        match expect {
            Expect::Refused => assert!(
                codes.is_empty() || codes == [400],
                "{what}: {codes:?} {text}"
            ),
            Expect::ChunkedThenClosed => {
                assert_eq!(codes.len(), 1, "{what}: {text}");
                forwarded += 1;
            }
        }
    }
    let smuggled = reached(&c, SMUGGLED);
    assert!(
        smuggled.is_empty(),
        "smuggled requests reached an upstream: {smuggled:?}"
    );
    // No refused POST was forwarded (not even with a truncated body); those forwarded carry
    // one framing only, so the API server cannot read their body another way.
    let mut posts = requests_for(&c.a, CONFIGMAPS);
    posts.extend(requests_for(&c.b, OLD_ONLY));
    assert_eq!(posts.len(), forwarded, "{posts:?}");
    for p in &posts {
        let te = p.headers.get(http::header::TRANSFER_ENCODING);
        assert_eq!(te.map(|v| v.as_bytes()), Some(&b"chunked"[..]), "{p:?}");
        assert!(
            !p.headers.contains_key(http::header::CONTENT_LENGTH),
            "{p:?}"
        );
    }
    assert!(requests_for(&c.b, CONFIGMAPS).is_empty());
    assert!(requests_for(&c.a, OLD_ONLY).is_empty());

    // The same connection handling still serves a well-framed request.
    let before = requests_for(&c.a, CONFIGMAPS).len();
    let body = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"fine"}}"#;
    let answer = exchange(
        c.proxy_a.listen,
        post(
            &format!("Content-Length: {}\r\nConnection: close\r\n", body.len()),
            body,
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(answer.codes(), [201], "{}", answer.text);
    assert_eq!(requests_for(&c.a, CONFIGMAPS).len(), before + 1);
}

/// A `GET` of `target` as sent, closing after the answer.
fn get_raw(target: &str) -> String {
    format!("GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
}

#[tokio::test]
async fn traversal_spellings_are_forwarded_verbatim_to_the_server_their_classification_names() {
    let c = Cluster::start().await;
    const A: &str = "apiserver-a";
    const B: &str = "apiserver-b";
    // Only 1.31 (apiserver-b) serves resource.k8s.io/v1alpha3 podschedulingcontexts; both
    // serve core configmaps. kube-apiserver does not clean paths before `NewRequestInfo`
    // (k8s.io/apiserver/pkg/endpoints/request/requestinfo.go splits the raw `URL.Path`, so
    // `..` is a segment like any other, and `%2e%2e` and `%2F` are decoded first), and its
    // handler chain has no `http.ServeMux` that would clean them either. So a path that
    // "cleans" to a peer-only resource is, to the API server, a request for resource `..`
    // of the core group: served locally, and the path must reach it unchanged.
    let cases: [(&str, (&str, &str, &str), &str); 8] = [
        (
            "/api/v1/../../apis/resource.k8s.io/v1alpha3/namespaces/default/podschedulingcontexts",
            ("", "v1", ".."),
            A,
        ),
        (
            "/api/v1/%2e%2e/%2E%2E/apis/resource.k8s.io/v1alpha3/namespaces/default/podschedulingcontexts",
            ("", "v1", ".."),
            A,
        ),
        (
            "/api/v1/namespaces/default/configmaps/%2e%2e%2f%2e%2e%2f%2e%2e%2f%2e%2e%2fapis/resource.k8s.io/v1alpha3/podschedulingcontexts",
            ("", "v1", "configmaps"),
            A,
        ),
        (
            "/apis/resource.k8s.io/v1alpha3/namespaces/default/podschedulingcontexts/../../../../../../api/v1/namespaces/default/secrets",
            ("resource.k8s.io", "v1alpha3", "podschedulingcontexts"),
            B,
        ),
        (
            "/apis/resource.k8s.io/v1alpha3/namespaces/default/podschedulingcontexts/%2e%2e%2F%2e%2e%2Fconfigmaps",
            ("resource.k8s.io", "v1alpha3", "podschedulingcontexts"),
            B,
        ),
        (
            "//apis/resource.k8s.io/v1alpha3//namespaces/default/podschedulingcontexts",
            ("resource.k8s.io", "v1alpha3", ""),
            A,
        ),
        (
            "/apis//resource.k8s.io/v1alpha3/namespaces/default/podschedulingcontexts",
            ("", "resource.k8s.io", "v1alpha3"),
            A,
        ),
        (
            "/api/v1/namespaces\\..\\..\\..\\apis/resource.k8s.io/v1alpha3/namespaces/default/podschedulingcontexts",
            ("", "v1", "namespaces\\..\\..\\..\\apis"),
            A,
        ),
    ];

    for (i, (path, (group, version, resource), server)) in cases.iter().enumerate() {
        // The routing decision mvproxy takes, spelled out: which GVR the path names.
        match classify(&Method::GET, path, None) {
            RequestInfo::Resource(r) => {
                assert_eq!(
                    (
                        r.gvr.group.as_str(),
                        r.gvr.version.as_str(),
                        r.gvr.resource.as_str()
                    ),
                    (*group, *version, *resource),
                    "{path}"
                );
            }
            other => panic!("{path}: {other:?}"),
        }

        let target = format!("{path}?case={i}");
        let answer = exchange(c.proxy_a.listen, get_raw(&target).as_bytes()).await;
        let (codes, text) = (answer.codes(), answer.text);
        let at_a: Vec<_> = requests_for(&c.a, &format!("case={i}"));
        let at_b: Vec<_> = requests_for(&c.b, &format!("case={i}"));
        if codes == [400] && text.contains(r#""reason":"BadRequest""#) {
            // Refused outright: then nothing may have been forwarded.
            assert!(
                at_a.is_empty() && at_b.is_empty(),
                "{path}: refused but forwarded"
            );
            continue;
        }
        assert_eq!(codes.len(), 1, "{path}: {text}");
        // The server the classification names answered, and only it received the request,
        // byte for byte as the client sent it (no cleaning, no re-encoding).
        let answered = text.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(mvproxy_standin::SERVER_HEADER)
                .then(|| v.trim())
        });
        assert_eq!(answered, Some(*server), "{path}: {text}");
        let (hit, miss) = if *server == A {
            (at_a, at_b)
        } else {
            (at_b, at_a)
        };
        assert!(
            miss.is_empty(),
            "{path}: also reached the other server: {miss:?}"
        );
        let forwarded: Vec<_> = hit.iter().map(|r| r.path_and_query.as_str()).collect();
        assert_eq!(forwarded, [target.as_str()], "{path}");
    }
}
