//! Deprecation warnings in kube-apiserver's responses: the `Warning` header, read as RFC 7234
//! and Kubernetes write it, and the release of removal its text names.
//!
//! kube-apiserver answers a request for a deprecated API with `Warning: 299 - "<text>"`, the
//! text being `<group/version> <Kind> is deprecated in v1.X+, unavailable in v1.Y+; use
//! <group/version> <Kind>` (the removal and the replacement only when known):
//! `WarningMessage` in k8s.io/apiserver, pkg/endpoints/deprecation/deprecation.go
//! (<https://github.com/kubernetes/kubernetes/blob/master/staging/src/k8s.io/apiserver/pkg/endpoints/deprecation/deprecation.go>);
//! a CustomResourceDefinition's deprecated version gets `<group/version> <Kind> is deprecated`
//! or its own `deprecationWarning`. The header's grammar is RFC 7234 section 5.5
//! (<https://www.rfc-editor.org/rfc/rfc7234#section-5.5>): `warn-code SP warn-agent SP
//! warn-text [SP warn-date]`, comma-separated, the text a quoted-string with backslash
//! escapes. This parser follows `ParseWarningHeader` in k8s.io/apimachinery,
//! pkg/util/net/http.go
//! (<https://github.com/kubernetes/kubernetes/blob/master/staging/src/k8s.io/apimachinery/pkg/util/net/http.go>),
//! which client-go uses on the same headers: three-digit code, agent without spaces or control
//! characters, quoted text, optional quoted date, `,` before the next warning; a malformed
//! warning ends the parse of its header value (as upstream's does) without error.
//!
//! Only the response's headers are read; they reach the client unchanged. Whatever bytes a
//! server sends, nothing here panics, and a release of removal is only ever a [`Release`] of
//! major 1 and a minor below [`MAX_MINOR`], so the `removed_in` label takes at most that many
//! values.

use crate::classify::Gvr;
use crate::discovery::side::Release;

/// The warn-code of a persistent warning, which kube-apiserver uses for every warning.
pub const MISCELLANEOUS_PERSISTENT_WARNING: u16 = 299;

/// Minors of a release of removal accepted below this; anything else is "unknown".
pub const MAX_MINOR: u32 = 100;

/// One warning of a `Warning` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// The three-digit warn-code.
    pub code: u16,
    /// The warn-agent (`-` from kube-apiserver).
    pub agent: String,
    /// The warn-text, unescaped.
    pub text: String,
}

/// Every well-formed warning of one `Warning` header value, in order, up to the first
/// malformed one.
pub fn parse(value: &[u8]) -> Vec<Warning> {
    let Ok(mut rest) = std::str::from_utf8(value) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    while !rest.trim().is_empty() {
        match parse_one(rest) {
            Some((w, remainder)) => {
                out.push(w);
                rest = remainder;
            }
            None => break,
        }
    }
    out
}

/// One warning and what follows it (after a `,`), or `None` when malformed.
fn parse_one(header: &str) -> Option<(Warning, &str)> {
    let header = header.trim();
    let (code, after) = header.split_once(' ')?;
    let (agent, text_and_rest) = after.split_once(' ')?;
    if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let code: u16 = code.parse().ok()?;
    if agent.is_empty() || agent.chars().any(char::is_control) {
        return None;
    }
    let (text, rest) = quoted(text_and_rest)?;
    if text.chars().any(char::is_control) {
        return None;
    }
    let mut rest = rest.trim_start();
    if let Some(date) = rest.strip_prefix('"') {
        // warn-date: quoted, no escapes.
        let end = date.find('"')?;
        rest = date[end + 1..].trim_start();
    }
    let rest = match rest.strip_prefix(',') {
        Some(next) => next.trim_start(),
        None if rest.is_empty() => rest,
        None => return None,
    };
    Some((
        Warning {
            code,
            agent: agent.to_owned(),
            text,
        },
        rest,
    ))
}

/// A quoted-string at the start of `s` (backslash escapes any byte), and what follows.
fn quoted(s: &str) -> Option<(String, &str)> {
    let body = s.strip_prefix('"')?;
    let mut text = String::new();
    let mut escaping = false;
    for (i, c) in body.char_indices() {
        match c {
            '"' if !escaping => return Some((text, &body[i + 1..])),
            '\\' if !escaping => escaping = true,
            _ => {
                text.push(c);
                escaping = false;
            }
        }
    }
    None
}

/// A deprecation of the API a request used, as its warning says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deprecation {
    /// The release the warning says removes it, when it names one (and it is plausible).
    pub removed_in: Option<Release>,
}

/// The deprecation of `gvr` among a response's `Warning` header values, if one of them is
/// kube-apiserver's deprecation warning for the group-version requested: its text starts with
/// that group-version, one word (the kind), then `is deprecated`. A warning about anything
/// else (an admission webhook's, a field's) does not count.
pub fn deprecation<'a>(
    gvr: &Gvr,
    values: impl IntoIterator<Item = &'a [u8]>,
) -> Option<Deprecation> {
    let gv = if gvr.group.is_empty() {
        gvr.version.as_str().to_owned()
    } else {
        format!("{}/{}", gvr.group, gvr.version)
    };
    for value in values {
        for w in parse(value) {
            if w.code != MISCELLANEOUS_PERSISTENT_WARNING {
                continue;
            }
            let Some(after_gv) = w.text.strip_prefix(gv.as_str()) else {
                continue;
            };
            let mut words = after_gv.split(' ');
            let (Some(""), Some(kind), Some("is"), Some(deprecated)) =
                (words.next(), words.next(), words.next(), words.next())
            else {
                continue;
            };
            if kind.is_empty() || !deprecated.starts_with("deprecated") {
                continue;
            }
            return Some(Deprecation {
                removed_in: removed_in(&w.text),
            });
        }
    }
    None
}

/// `unavailable in v1.25+` → 1.25.
fn removed_in(text: &str) -> Option<Release> {
    let (_, after) = text.split_once("unavailable in v")?;
    let (major, after) = after.split_once('.')?;
    let minor_len = after
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(after.len());
    let (minor, after) = after.split_at(minor_len);
    if !after.starts_with('+') || major != "1" || minor.is_empty() || minor.len() > 2 {
        return None;
    }
    let minor: u32 = minor.parse().ok()?;
    (minor < MAX_MINOR).then_some(Release { major: 1, minor })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(code: u16, agent: &str, text: &str) -> Warning {
        Warning {
            code,
            agent: agent.into(),
            text: text.into(),
        }
    }

    #[test]
    fn warnings_as_kube_apiserver_and_rfc_7234_write_them() {
        assert_eq!(
            parse(br#"299 - "policy/v1beta1 PodSecurityPolicy is deprecated in v1.21+, unavailable in v1.25+""#),
            vec![w(
                299,
                "-",
                "policy/v1beta1 PodSecurityPolicy is deprecated in v1.21+, unavailable in v1.25+"
            )]
        );
        // several, with a date, escapes, extra spaces
        assert_eq!(
            parse(
                br#"  299 - "a \"quoted\" word",  199 proxy:8080 "b\\c" "Wed, 21 Oct 2015 07:28:00 GMT" , 299 - "third""#
            ),
            vec![
                w(299, "-", r#"a "quoted" word"#),
                w(199, "proxy:8080", r"b\c"),
                w(299, "-", "third"),
            ]
        );
        // a malformed warning ends the parse; what came before stays
        assert_eq!(parse(br#"299 - "ok", 2999 - "x""#), vec![w(299, "-", "ok")]);
        for bad in [
            &b""[..],
            b"299",
            b"299 -",
            b"299 - unquoted",
            b"299 - \"unterminated",
            b"29 - \"x\"",
            b"abc - \"x\"",
            b"299 - \"x\" junk",
            b"299 - \"x\" \"unterminated date",
            b"299 - \"\x01\"",
            b"\xff\xfe",
        ] {
            assert_eq!(parse(bad), vec![], "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn deprecations_of_the_requested_group_version_with_their_release_of_removal() {
        let psp = Gvr::new("policy", "v1beta1", "podsecuritypolicies");
        let value = br#"299 - "policy/v1beta1 PodSecurityPolicy is deprecated in v1.21+, unavailable in v1.25+""#;
        assert_eq!(
            deprecation(&psp, [&value[..]]),
            Some(Deprecation {
                removed_in: Some(Release {
                    major: 1,
                    minor: 25
                })
            })
        );
        // core group: the group-version is the version alone
        let cs = Gvr::new("", "v1", "componentstatuses");
        assert_eq!(
            deprecation(
                &cs,
                [&b"299 - \"v1 ComponentStatus is deprecated in v1.19+\""[..]]
            ),
            Some(Deprecation { removed_in: None })
        );
        // a CRD's default warning names no release
        let crd = Gvr::new("example.com", "v1alpha1", "widgets");
        assert_eq!(
            deprecation(
                &crd,
                [&b"299 - \"example.com/v1alpha1 Widget is deprecated; use example.com/v1 Widget\""[..]]
            ),
            Some(Deprecation { removed_in: None })
        );
        // the second header value carries it
        assert_eq!(
            deprecation(
                &psp,
                [&b"299 - \"a webhook said something\""[..], &value[..]]
            )
            .and_then(|d| d.removed_in),
            Some(Release {
                major: 1,
                minor: 25
            })
        );
        // not a deprecation of what was requested
        for other in [
            &b"299 - \"spec.foo is deprecated\""[..],
            b"299 - \"policy/v1 PodDisruptionBudget is deprecated in v1.99+\"",
            b"199 - \"policy/v1beta1 PodSecurityPolicy is deprecated\"",
            b"299 - \"policy/v1beta1PodSecurityPolicy is deprecated\"",
            b"299 - \"policy/v1beta1 PodSecurityPolicy is fine\"",
        ] {
            assert_eq!(
                deprecation(&psp, [other]),
                None,
                "{}",
                String::from_utf8_lossy(other)
            );
        }
        // implausible releases of removal are unknown, never a new label value
        for text in [
            "unavailable in v1.1000+",
            "unavailable in v2.25+",
            "unavailable in v1.25",
            "unavailable in v1.+",
            "unavailable in v1.123+",
        ] {
            let value = format!("299 - \"policy/v1beta1 PodSecurityPolicy is deprecated, {text}\"");
            assert_eq!(
                deprecation(&psp, [value.as_bytes()]),
                Some(Deprecation { removed_in: None }),
                "{text}"
            );
        }
    }
}
