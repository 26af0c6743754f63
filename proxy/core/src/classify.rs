//! Request classification, parsed the way kube-apiserver parses it.
//!
//! The proxy decides where a request goes (this server, a peer, or a merged
//! discovery answer) from what the request *is*: which group/version/resource,
//! which verb, which namespace and name. kube-apiserver derives exactly that
//! from the URL in `RequestInfoFactory.NewRequestInfo`
//! (k8s.io/apiserver/pkg/endpoints/request/requestinfo.go), and every later
//! decision upstream — authorization, the mixed-version peer proxy, audit —
//! keys on its answer. If we parsed paths our own way, odd spellings (double
//! slashes, `%2F`, the deprecated `/watch/` prefix, `?watch=` values) would
//! route differently from how the apiserver behind us understands them. So
//! [`classify`] reproduces that function step by step, as a pure function
//! of method, path and query.
//!
//! Deliberate differences from upstream, all on inputs upstream never
//! routes on or that the apiserver rejects anyway:
//! * Upstream only says "not a resource request"; we split that into
//!   [`RequestInfo::Discovery`] for the canonical discovery paths and
//!   [`RequestInfo::NonResource`] for everything else.
//! * Paths Go's HTTP server refuses with 400 before any handler runs (not
//!   starting with `/`, raw control bytes, malformed `%` escapes) and the
//!   `/watch` or `/proxy` prefix with nothing after it (upstream answers 500)
//!   are `NonResource`, so they go to the local apiserver, which gives the
//!   real error.
//! * Go strings may hold any bytes; ours are UTF-8, so bytes that decode to
//!   invalid UTF-8 become U+FFFD in names. Which segment is which, and so the
//!   group/version/resource and verb, is unaffected.
//! * The name taken from `fieldSelector=metadata.name=...` is dropped upstream
//!   when *any* list option fails to decode. We check the options that can fail
//!   except `labelSelector`, whose grammar we do not re-implement; a request
//!   with an invalid label selector is refused by the apiserver anyway.

use std::borrow::Cow;
use std::fmt;

use http::Method;

/// group/version/resource; core group is "".
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gvr {
    pub group: String,
    pub version: String,
    pub resource: String,
}

impl Gvr {
    pub fn new(
        group: impl Into<String>,
        version: impl Into<String>,
        resource: impl Into<String>,
    ) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            resource: resource.into(),
        }
    }
}

impl fmt::Display for Gvr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}/{}", self.version, self.resource)
        } else {
            write!(f, "{}/{}/{}", self.group, self.version, self.resource)
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestInfo {
    Resource(ResourceRequest),
    Discovery(DiscoveryPath),
    NonResource,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceRequest {
    pub gvr: Gvr,
    /// `None` where upstream has the empty namespace (cluster-scoped or all namespaces).
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
    /// kube verb: get, list, watch, create, update, patch, delete, deletecollection, proxy, ...
    /// Empty for HTTP methods upstream has no verb for (OPTIONS, CONNECT, ...).
    pub verb: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiscoveryPath {
    /// `/api`
    Api,
    /// `/apis`
    Apis,
    /// `/api/v1`
    CoreVersion { version: String },
    /// `/apis/apps`
    Group { group: String },
    /// `/apis/apps/v1`
    GroupVersion { group: String, version: String },
}

/// Classifies a request as kube-apiserver's `NewRequestInfo` would.
///
/// `path` is the URI path (percent-encoded as received), `query` the raw query
/// string without '?'.
pub fn classify(method: &Method, path: &str, query: Option<&str>) -> RequestInfo {
    let query = query.unwrap_or("");
    let Some(decoded) = request_path(path, query) else {
        return RequestInfo::NonResource;
    };
    let segs = Segments::split(&decoded);

    // Upstream: fewer than three parts, an unknown prefix, or a group prefix
    // with fewer than four parts is not a resource request.
    if segs.len < 3 {
        return discovery(&decoded, &segs);
    }
    let grouped = match segs.get(0) {
        "api" => false,
        "apis" => true,
        _ => return RequestInfo::NonResource,
    };
    let mut at = 1;
    let mut group = "";
    if grouped {
        if segs.len < 4 {
            return discovery(&decoded, &segs);
        }
        group = segs.get(at);
        at += 1;
    }
    let version = segs.get(at);
    at += 1;

    let mut verb = match segs.get(at) {
        special @ ("watch" | "proxy") => {
            if segs.len - at < 2 {
                return RequestInfo::NonResource;
            }
            at += 1;
            if special == "watch" { "watch" } else { "proxy" }
        }
        _ => method_verb(method),
    };

    let mut namespace = "";
    if segs.get(at) == "namespaces" && segs.len - at > 1 {
        namespace = segs.get(at + 1);
        // `/namespaces/{ns}/{x}` names a resource inside the namespace unless
        // `x` is a subresource of the namespace object itself.
        if segs.len - at > 2 && !matches!(segs.get(at + 2), "status" | "finalize") {
            at += 2;
        }
    }

    // What is left reads resource/name/subresource/anything-else; the proxy
    // verb passes its whole tail through, so it has no subresource.
    let parts = segs.len - at;
    let resource = segs.get(at);
    let mut name = Cow::Borrowed(if parts >= 2 { segs.get(at + 1) } else { "" });
    let subresource = if parts >= 3 && verb != "proxy" {
        segs.get(at + 2)
    } else {
        ""
    };

    if name.is_empty() && verb == "get" {
        let list = ListQuery::parse(query);
        verb = if list.watch { "watch" } else { "list" };
        if let Some(selected) = list.selected_name {
            name = Cow::Owned(selected);
        }
    }
    if name.is_empty() && verb == "delete" {
        verb = "deletecollection";
    }

    RequestInfo::Resource(ResourceRequest {
        gvr: Gvr::new(group, version, resource),
        namespace: non_empty(namespace),
        name: non_empty(&name),
        subresource: non_empty(subresource),
        verb,
    })
}

impl RequestInfo {
    /// Low-cardinality templated route for span names, e.g.
    /// "/apis/{group}/{version}/namespaces/{namespace}/{resource}/{name}/{subresource}",
    /// "/api/{version}/{resource}", "/apis/{group}", "/apis"; None for non-resource paths.
    ///
    /// The template describes the parsed request rather than the literal path:
    /// the deprecated `/watch/` and `/proxy/` prefixes are left out, a name
    /// taken from a `metadata.name` field selector shows as `{name}`, and a
    /// namespace object (`/api/v1/namespaces/foo`) is the cluster-scoped
    /// resource it is.
    pub fn route_template(&self) -> Option<&'static str> {
        match self {
            RequestInfo::NonResource => None,
            RequestInfo::Discovery(path) => Some(match path {
                DiscoveryPath::Api => "/api",
                DiscoveryPath::Apis => "/apis",
                DiscoveryPath::CoreVersion { .. } => "/api/{version}",
                DiscoveryPath::Group { .. } => "/apis/{group}",
                DiscoveryPath::GroupVersion { .. } => "/apis/{group}/{version}",
            }),
            RequestInfo::Resource(req) => Some(req.route_template()),
        }
    }
}

impl ResourceRequest {
    fn route_template(&self) -> &'static str {
        let core = self.gvr.group.is_empty();
        let namespace_object = self.gvr.resource == "namespaces" && self.namespace == self.name;
        let namespaced = self.namespace.is_some() && !namespace_object;
        let depth = if self.subresource.is_some() {
            2
        } else if self.name.is_some() {
            1
        } else {
            0
        };
        match (core, namespaced, depth) {
            (true, false, 0) => "/api/{version}/{resource}",
            (true, false, 1) => "/api/{version}/{resource}/{name}",
            (true, false, _) => "/api/{version}/{resource}/{name}/{subresource}",
            (true, true, 0) => "/api/{version}/namespaces/{namespace}/{resource}",
            (true, true, 1) => "/api/{version}/namespaces/{namespace}/{resource}/{name}",
            (true, true, _) => {
                "/api/{version}/namespaces/{namespace}/{resource}/{name}/{subresource}"
            }
            (false, false, 0) => "/apis/{group}/{version}/{resource}",
            (false, false, 1) => "/apis/{group}/{version}/{resource}/{name}",
            (false, false, _) => "/apis/{group}/{version}/{resource}/{name}/{subresource}",
            (false, true, 0) => "/apis/{group}/{version}/namespaces/{namespace}/{resource}",
            (false, true, 1) => "/apis/{group}/{version}/namespaces/{namespace}/{resource}/{name}",
            (false, true, _) => {
                "/apis/{group}/{version}/namespaces/{namespace}/{resource}/{name}/{subresource}"
            }
        }
    }
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

fn method_verb(method: &Method) -> &'static str {
    match *method {
        Method::POST => "create",
        Method::GET | Method::HEAD => "get",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "",
    }
}

/// The decoded path upstream splits (Go's `req.URL.Path`), or `None` where
/// Go's server rejects the request line before kube-apiserver sees it.
fn request_path<'a>(path: &'a str, query: &str) -> Option<Cow<'a, str>> {
    let ctl = |b: u8| b < 0x20 || b == 0x7f;
    if !path.starts_with('/') || path.bytes().any(ctl) || query.bytes().any(ctl) {
        return None;
    }
    // Go decodes the whole path before upstream splits it, so `%2F` splits too.
    unescape(path, false)
}

/// Only these leading segments can matter: prefix, group, version, special
/// verb, "namespaces", namespace, resource, name, subresource.
const MAX_SEGMENTS: usize = 9;

/// Upstream's `splitPath` — trim every leading and trailing '/', split on '/'
/// — keeping the first segments and the total count, without allocating.
struct Segments<'a> {
    first: [&'a str; MAX_SEGMENTS],
    len: usize,
}

impl<'a> Segments<'a> {
    fn split(path: &'a str) -> Self {
        let mut first = [""; MAX_SEGMENTS];
        let mut len = 0;
        let trimmed = path.trim_matches('/');
        if !trimmed.is_empty() {
            for (slot, seg) in trimmed.split('/').enumerate() {
                if let Some(keep) = first.get_mut(slot) {
                    *keep = seg;
                }
                len += 1;
            }
        }
        Self { first, len }
    }

    fn get(&self, i: usize) -> &'a str {
        self.first.get(i).copied().unwrap_or("")
    }
}

/// Refines upstream's "not a resource request" for short paths: the canonical
/// spellings of the discovery endpoints (one leading '/', at most one trailing
/// '/', no empty segment) are discovery, anything else is left to the apiserver.
fn discovery(decoded: &str, segs: &Segments<'_>) -> RequestInfo {
    let canonical = !decoded.starts_with("//")
        && !decoded.ends_with("//")
        && (0..segs.len).all(|i| !segs.get(i).is_empty());
    if !canonical {
        return RequestInfo::NonResource;
    }
    let path = match (segs.len, segs.get(0)) {
        (1, "api") => DiscoveryPath::Api,
        (1, "apis") => DiscoveryPath::Apis,
        (2, "api") => DiscoveryPath::CoreVersion {
            version: segs.get(1).to_owned(),
        },
        (2, "apis") => DiscoveryPath::Group {
            group: segs.get(1).to_owned(),
        },
        (3, "apis") => DiscoveryPath::GroupVersion {
            group: segs.get(1).to_owned(),
            version: segs.get(2).to_owned(),
        },
        _ => return RequestInfo::NonResource,
    };
    RequestInfo::Discovery(path)
}

/// What upstream reads from the query of a get-without-name: whether it is a
/// watch, and the single object a `metadata.name` field selector pins it to.
struct ListQuery {
    watch: bool,
    selected_name: Option<String>,
}

impl ListQuery {
    fn parse(query: &str) -> Self {
        let mut watch = None;
        let mut field_selector = None;
        let mut limit = None;
        let mut timeout_seconds = None;
        // Go's url.ParseQuery: '&'-separated pairs; a pair containing ';' or a
        // bad escape is dropped; later values of a key never win.
        for pair in query.split('&') {
            if pair.is_empty() || pair.contains(';') {
                continue;
            }
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let Some(key) = unescape(key, true) else {
                continue;
            };
            let slot = match &*key {
                "watch" => &mut watch,
                "fieldSelector" => &mut field_selector,
                "limit" => &mut limit,
                "timeoutSeconds" => &mut timeout_seconds,
                _ => continue,
            };
            let Some(value) = unescape(value, true) else {
                continue;
            };
            if slot.is_none() {
                *slot = Some(value);
            }
        }

        // Upstream decodes all list options at once; if any fails it keeps
        // only `watch` (compared after ToLower instead of EqualFold) and
        // ignores the field selector.
        let ints_ok = [&limit, &timeout_seconds]
            .into_iter()
            .flatten()
            .all(|v| v.parse::<i64>().is_ok());
        let selector = match &field_selector {
            Some(sel) if ints_ok => field_selector_name(sel),
            Some(_) => Err(InvalidSelector),
            None if ints_ok => Ok(None),
            None => Err(InvalidSelector),
        };
        let decoded = selector.is_ok();
        let watch = watch.is_some_and(|v| v != "0" && !is_false(&v, decoded));
        let selected_name = selector
            .ok()
            .flatten()
            .filter(|name| valid_path_segment_name(name));
        Self {
            watch,
            selected_name,
        }
    }
}

/// Upstream's "false": `strings.EqualFold(v, "false")` when list options
/// decoded, `strings.ToLower(v) == "false"` otherwise. Unicode simple case
/// folding adds exactly one non-ASCII match, U+017F LATIN SMALL LETTER LONG S.
fn is_false(v: &str, fold: bool) -> bool {
    let mut chars = v.chars();
    for want in ['f', 'a', 'l', 's', 'e'] {
        match chars.next() {
            Some(c) if c.to_ascii_lowercase() == want => {}
            Some('\u{17F}') if fold && want == 's' => {}
            _ => return false,
        }
    }
    chars.next().is_none()
}

/// apimachinery `path.IsValidPathSegmentName`.
fn valid_path_segment_name(name: &str) -> bool {
    name != "." && name != ".." && !name.contains(['/', '%'])
}

struct InvalidSelector;

/// `fields.ParseSelector(sel).RequiresExactMatch("metadata.name")`: the
/// selector must parse as a whole; the answer is the value of the first
/// `metadata.name=` / `metadata.name==` term in sorted term order.
fn field_selector_name(sel: &str) -> Result<Option<String>, InvalidSelector> {
    let mut best: Option<(&str, String)> = None;
    for term in split_terms(sel) {
        if term.is_empty() {
            continue;
        }
        let (lhs, op, rhs) = split_term(term).ok_or(InvalidSelector)?;
        let value = unescape_selector_value(rhs)?;
        if lhs == "metadata.name" && op != "!=" && best.as_ref().is_none_or(|(t, _)| term < *t) {
            best = Some((term, value));
        }
    }
    Ok(best.map(|(_, value)| value))
}

/// Field selector terms split on ',' not escaped by '\'.
fn split_terms(sel: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(sel);
    std::iter::from_fn(move || {
        let current = rest?;
        let mut escaped = false;
        for (i, c) in current.char_indices() {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == ',' {
                rest = current.get(i + 1..);
                return current.get(..i);
            }
        }
        rest = None;
        Some(current)
    })
}

/// Splits a term at the first operator; at each position "!=" is tried before
/// "==" before "=", as upstream does.
fn split_term(term: &str) -> Option<(&str, &'static str, &str)> {
    let bytes = term.as_bytes();
    let at = bytes
        .iter()
        .enumerate()
        .position(|(i, &b)| b == b'=' || (b == b'!' && bytes.get(i + 1) == Some(&b'=')))?;
    let op = match (bytes.get(at), bytes.get(at + 1)) {
        (Some(b'!'), _) => "!=",
        (_, Some(b'=')) => "==",
        _ => "=",
    };
    Some((term.get(..at)?, op, term.get(at + op.len()..)?))
}

/// `fields.UnescapeValue`: `\\`, `\,` and `\=` are the only escapes, and bare
/// ',' or '=' are errors.
fn unescape_selector_value(rhs: &str) -> Result<String, InvalidSelector> {
    let mut out = String::with_capacity(rhs.len());
    let mut escaped = false;
    for c in rhs.chars() {
        match (escaped, c) {
            (true, '\\' | ',' | '=') => {
                out.push(c);
                escaped = false;
            }
            (true, _) | (false, ',' | '=') => return Err(InvalidSelector),
            (false, '\\') => escaped = true,
            (false, _) => out.push(c),
        }
    }
    if escaped {
        return Err(InvalidSelector);
    }
    Ok(out)
}

/// Go's `url` unescaping: `%XX` with two hex digits, anything else after '%'
/// is an error; `plus_as_space` for query components. Bytes that do not form
/// UTF-8 become U+FFFD.
fn unescape(s: &str, plus_as_space: bool) -> Option<Cow<'_, str>> {
    let needs_work = s.contains('%') || (plus_as_space && s.contains('+'));
    if !needs_work {
        return Some(Cow::Borrowed(s));
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'%' => {
                let hi = bytes.get(i + 1).copied().and_then(hex_value)?;
                let lo = bytes.get(i + 2).copied().and_then(hex_value)?;
                out.push((hi << 4) | lo);
                i += 3;
            }
            b'+' if plus_as_space => {
                out.push(b' ');
                i += 1;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    Some(Cow::Owned(match String::from_utf8(out) {
        Ok(decoded) => decoded,
        Err(err) => String::from_utf8_lossy(err.as_bytes()).into_owned(),
    }))
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
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

    // Upstream TestSelectorParsing (and the older TestFieldSelectorParsing):
    // a metadata.name field selector names the single object of a list/watch.
    #[test]
    #[rustfmt::skip]
    fn upstream_selector_parsing() {
        check(&[
            (GET, "/apis/group/version/resource", res("group", "version", "resource", "", "", "", "list")),
            (GET, "/apis/group/version/resource?fieldSelector=metadata.name=name1", res("group", "version", "resource", "", "name1", "", "list")),
            (GET, "/apis/group/version/resource?watch=true&fieldSelector=metadata.name=name1", res("group", "version", "resource", "", "name1", "", "watch")),
            (GET, "/apis/group/version/resource?fieldSelector=foo=bar&labelSelector=baz=qux", res("group", "version", "resource", "", "", "", "list")),
            (GET, "/apis/group/version/resource?fieldSelector=metadata.name=name1,foo", res("group", "version", "resource", "", "", "", "list")),
            (GET, "/apis/group/version/resource?fieldSelector=metadata.name=name1,foo&watch=true", res("group", "version", "resource", "", "", "", "watch")),
            (GET, "/apis/group/version/resource?fieldSelector=metadata.name=name1,foo&watch=false", res("group", "version", "resource", "", "", "", "list")),
            (DELETE, "/apis/group/version/resource?fieldSelector=foo=bar&labelSelector=baz=qux", res("group", "version", "resource", "", "", "", "deletecollection")),
            (GET, "/apis/group/version/resource?fieldSelector=metadata.name=foo&fieldSelector=metadata.name=bar&labelSelector=foo=bar&labelSelector=foo=baz", res("group", "version", "resource", "", "foo", "", "list")),
            (GET, "/apis/group/version/resource/name?fieldSelector=foo=bar&labelSelector=foo=bar", res("group", "version", "resource", "", "name", "", "get")),
            (GET, "/apis/group/version/watch/resource?fieldSelector=metadata.name=foo&labelSelector=foo=bar", res("group", "version", "resource", "", "", "", "watch")),
            (GET, "/apis/group/version/watch/resource/name?fieldSelector=metadata.name=foo&labelSelector=foo=bar", res("group", "version", "resource", "", "name", "", "watch")),
        ]);
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
            (GET, "/openapi/v2", NON),
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

    #[test]
    #[rustfmt::skip]
    fn watch_query_values() {
        // Upstream: any first value other than "0" or "false" (any case) is a
        // watch, including an empty one; later values are ignored.
        check(&[
            (GET, "/api/v1/pods?watch", res("", "v1", "pods", "", "", "", "watch")),
            (GET, "/api/v1/pods?watch=", res("", "v1", "pods", "", "", "", "watch")),
            (GET, "/api/v1/pods?watch=FALSE", res("", "v1", "pods", "", "", "", "list")),
            (GET, "/api/v1/pods?watch=f", res("", "v1", "pods", "", "", "", "watch")),
            (GET, "/api/v1/pods?watch=yes", res("", "v1", "pods", "", "", "", "watch")),
            (GET, "/api/v1/pods?watch=0&watch=1", res("", "v1", "pods", "", "", "", "list")),
            (GET, "/api/v1/pods?watch=1&watch=0", res("", "v1", "pods", "", "", "", "watch")),
            (GET, "/api/v1/pods?wat%63h=1", res("", "v1", "pods", "", "", "", "watch")),
            (GET, "/api/v1/pods?watch=%31", res("", "v1", "pods", "", "", "", "watch")),
            (GET, "/api/v1/pods?Watch=1", res("", "v1", "pods", "", "", "", "list")),
            (GET, "/api/v1/pods?resourceVersion=0&watch=true&allowWatchBookmarks=true", res("", "v1", "pods", "", "", "", "watch")),
            // Pairs with ';' or a bad escape are dropped by Go's ParseQuery.
            (GET, "/api/v1/pods?watch=1;x", res("", "v1", "pods", "", "", "", "list")),
            (GET, "/api/v1/pods?watch=%zz&watch=1", res("", "v1", "pods", "", "", "", "watch")),
            // EqualFold folds U+017F to 's' when options decode; ToLower does not.
            (GET, "/api/v1/pods?watch=fal%C5%BFe", res("", "v1", "pods", "", "", "", "list")),
            (GET, "/api/v1/pods?watch=fal%C5%BFe&limit=x", res("", "v1", "pods", "", "", "", "watch")),
        ]);
    }

    #[test]
    #[rustfmt::skip]
    fn field_selector_names() {
        check(&[
            (GET, "/api/v1/namespaces/ns/pods?fieldSelector=metadata.name%3Dp&watch=1", res("", "v1", "pods", "ns", "p", "", "watch")),
            (GET, "/api/v1/pods?fieldSelector=metadata.name==p", res("", "v1", "pods", "", "p", "", "list")),
            (GET, "/api/v1/pods?fieldSelector=metadata.name!=p", res("", "v1", "pods", "", "", "", "list")),
            (GET, "/api/v1/pods?fieldSelector=spec.nodeName=n,metadata.name=p", res("", "v1", "pods", "", "p", "", "list")),
            // Sorted term order decides between two names.
            (GET, "/api/v1/pods?fieldSelector=metadata.name=b,metadata.name=a", res("", "v1", "pods", "", "a", "", "list")),
            (GET, "/api/v1/pods?fieldSelector=metadata.name=a\\,b", res("", "v1", "pods", "", "a,b", "", "list")),
            (GET, "/api/v1/pods?fieldSelector=metadata.name=a\\x", res("", "v1", "pods", "", "", "", "list")),
            (GET, "/api/v1/pods?fieldSelector=metadata.name===p", res("", "v1", "pods", "", "", "", "list")),
            (GET, "/api/v1/pods?fieldSelector=metadata.name=p,", res("", "v1", "pods", "", "p", "", "list")),
            (GET, "/api/v1/pods?fieldSelector=+metadata.name=p", res("", "v1", "pods", "", "", "", "list")),
            // Not a valid path segment name.
            (GET, "/api/v1/pods?fieldSelector=metadata.name=..", res("", "v1", "pods", "", "", "", "list")),
            (GET, "/api/v1/pods?fieldSelector=metadata.name=a%2Fb", res("", "v1", "pods", "", "", "", "list")),
            (GET, "/api/v1/pods?fieldSelector=metadata.name=a%25b", res("", "v1", "pods", "", "", "", "list")),
            // Another list option failing to decode drops the name.
            (GET, "/api/v1/pods?fieldSelector=metadata.name=p&limit=abc", res("", "v1", "pods", "", "", "", "list")),
            (GET, "/api/v1/pods?fieldSelector=metadata.name=p&timeoutSeconds=&watch=1", res("", "v1", "pods", "", "", "", "watch")),
            (GET, "/api/v1/pods?fieldSelector=metadata.name=p&limit=500&timeoutSeconds=-1", res("", "v1", "pods", "", "p", "", "list")),
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
}
