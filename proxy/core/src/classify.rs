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

use compact_str::CompactString;
use http::Method;

/// group/version/resource; core group is "".
///
/// Its parts are [`CompactString`]s, kept inline up to 24 bytes: every resource request is
/// classified, and owned `String`s cost it four allocations and frees (bench/PERF_NOTES.md,
/// eighteenth round).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gvr {
    /// The API group (`""` for core).
    pub group: CompactString,
    /// The version.
    pub version: CompactString,
    /// The resource (plural).
    pub resource: CompactString,
}

impl Gvr {
    /// A GVR from its parts.
    pub fn new(
        group: impl Into<CompactString>,
        version: impl Into<CompactString>,
        resource: impl Into<CompactString>,
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
/// What a request path is, as kube-apiserver's RequestInfo reads it.
pub enum RequestInfo {
    /// A resource request, with its GVR.
    Resource(ResourceRequest),
    /// A discovery document.
    Discovery(DiscoveryPath),
    /// An OpenAPI document (`/openapi/v2`, `/openapi/v3`, `/openapi/v3/apis/{group}/{version}`):
    /// non-resource to upstream, routed by its group-version here (`crate::classify::openapi`; merged and routed by `crate::openapi`).
    OpenApi(openapi::OpenApiPath),
    /// Anything else (`/healthz`, `/version`, …).
    NonResource,
}

#[derive(Debug, Clone, PartialEq, Eq)]
/// A resource request.
pub struct ResourceRequest {
    /// Its group, version and resource.
    pub gvr: Gvr,
    /// `None` where upstream has the empty namespace (cluster-scoped or all namespaces).
    pub namespace: Option<CompactString>,
    /// The object's name, if the path names one.
    pub name: Option<CompactString>,
    /// The subresource (`status`, `log`, `proxy`, …).
    pub subresource: Option<CompactString>,
    /// kube verb: get, list, watch, create, update, patch, delete, deletecollection, proxy, ...
    /// Empty for HTTP methods upstream has no verb for (OPTIONS, CONNECT, ...).
    pub verb: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
/// A discovery path.
pub enum DiscoveryPath {
    /// `/api`
    Api,
    /// `/apis`
    Apis,
    /// `/api/v1`
    CoreVersion {
        /// The version.
        version: String,
    },
    /// `/apis/apps`
    Group {
        /// The group.
        group: String,
    },
    /// `/apis/apps/v1`
    GroupVersion {
        /// The group.
        group: String,
        /// The version.
        version: String,
    },
}

/// Classifies a request as kube-apiserver's `NewRequestInfo` would.
///
/// `path` is the URI path (percent-encoded as received), `query` the raw query
/// string without '?'.
pub fn classify(method: &Method, path: &str, query: Option<&str>) -> RequestInfo {
    if let Some(openapi) = openapi::OpenApiPath::parse(path) {
        return RequestInfo::OpenApi(openapi);
    }
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
            RequestInfo::OpenApi(path) => Some(path.route_template()),
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

fn non_empty(s: &str) -> Option<CompactString> {
    (!s.is_empty()).then(|| CompactString::from(s))
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
        // Split at each '/' byte found by a plain scan: `str::split('/')` searches with
        // `memchr` from each segment, several times the cost on a path of a few short
        // segments (bench/PERF_NOTES.md, eighteenth round). A '/' byte is always a character
        // boundary, so every `get` below succeeds.
        let mut rest = (!trimmed.is_empty()).then_some(trimmed);
        while let Some(s) = rest {
            let (seg, tail) = match s.bytes().position(|b| b == b'/') {
                Some(at) => (s.get(..at).unwrap_or_default(), s.get(at + 1..)),
                None => (s, None),
            };
            if let Some(keep) = first.get_mut(len) {
                *keep = seg;
            }
            len += 1;
            rest = tail;
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

pub mod openapi;

#[cfg(test)]
mod tests;
