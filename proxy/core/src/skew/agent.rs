//! Who a client is, read from its `User-Agent` (and, when it carries one, the front-proxy
//! identity), as a bounded name fit for a metric label.
//!
//! client-go writes `{program}/{version} ({os}/{arch}) kubernetes/{commit}`
//! (`DefaultKubernetesUserAgent`, kubernetes `staging/src/k8s.io/client-go/rest/config.go`),
//! and `rest.AddUserAgent` appends `/{suffix}`. kube-controller-manager, run with
//! `--use-service-account-credentials`, gives each controller a client whose suffix is the
//! controller's ServiceAccount user name (`system:serviceaccount:kube-system:<controller>`,
//! `staging/src/k8s.io/controller-manager/pkg/clientbuilder/client_builder_dynamic.go`);
//! without it the suffix is the controller's name. kubectl and operators built on client-go or
//! controller-runtime use the bare form.
//!
//! A `User-Agent` is whatever a client sends, so parsing never fails and never grows with the
//! input: at most [`SCAN_BYTES`] are read, non-UTF-8 bytes end a token, and every part is cut
//! to a fixed length. The raw header never becomes a label; only [`Agent::client`] does.

/// Bytes of a `User-Agent` read at most (client-go's are under 200).
pub const SCAN_BYTES: usize = 1024;
/// Longest program name kept.
pub const MAX_PROGRAM: usize = 64;
/// Longest version kept.
pub const MAX_VERSION: usize = 32;
/// Longest controller name (a `rest.AddUserAgent` suffix that is not a ServiceAccount) kept.
pub const MAX_COMPONENT: usize = 63;
/// Longest ServiceAccount namespace (a DNS label) kept.
pub const MAX_NAMESPACE: usize = 63;
/// Longest ServiceAccount name (a DNS subdomain) kept.
pub const MAX_NAME: usize = 253;
/// The program of an agent that sent no usable `User-Agent`.
pub const UNKNOWN_PROGRAM: &str = "unknown";

const SA_PREFIX: &str = "system:serviceaccount:";

/// A ServiceAccount, as `system:serviceaccount:{namespace}:{name}` names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServiceAccount {
    /// The ServiceAccount's namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

/// What a `User-Agent` says about its client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Agent {
    /// The program (`kubectl`, `kube-controller-manager`, `manager`…), or [`UNKNOWN_PROGRAM`].
    pub program: String,
    /// Its version as written (`v1.31.2`), if any.
    pub version: Option<String>,
    /// The ServiceAccount the client runs as, from the `User-Agent` suffix or the front-proxy
    /// identity.
    pub service_account: Option<ServiceAccount>,
    /// A `rest.AddUserAgent` suffix that is not a ServiceAccount (a controller's name).
    pub component: Option<String>,
}

impl Agent {
    /// The `client` label: `program`, `program (sa namespace/name)` or `program (component)`.
    /// At most about 400 characters, whatever the input.
    pub fn client(&self) -> String {
        match (&self.service_account, &self.component) {
            (Some(sa), _) => format!("{} (sa {}/{})", self.program, sa.namespace, sa.name),
            (None, Some(c)) => format!("{} ({c})", self.program),
            (None, None) => self.program.clone(),
        }
    }

    /// Replaces the ServiceAccount with the one an authenticated front-proxy identity names
    /// (`X-Remote-User: system:serviceaccount:…`); other user names are not kept (a person's
    /// name is no label).
    pub fn with_identity(mut self, user: Option<&[u8]>) -> Self {
        if let Some(sa) = user.and_then(|u| service_account(&String::from_utf8_lossy(u))) {
            self.service_account = Some(sa);
            self.component = None;
        }
        self
    }
}

/// Reads a `User-Agent` header value (any bytes).
pub fn parse(user_agent: &[u8]) -> Agent {
    let text = String::from_utf8_lossy(&user_agent[..user_agent.len().min(SCAN_BYTES)]);
    let text = text.trim_start();
    let (program, rest) = token(text, MAX_PROGRAM, is_name_char);
    let (version, rest) = match rest.strip_prefix('/') {
        Some(after) => {
            let (v, rest) = token(after, MAX_VERSION, is_name_char);
            ((!v.is_empty()).then_some(v), rest)
        }
        None => (None, rest),
    };
    let (service_account, component) = suffix(rest);
    Agent {
        program: if program.is_empty() {
            UNKNOWN_PROGRAM.to_owned()
        } else {
            program
        },
        version,
        service_account,
        component,
    }
}

/// `system:serviceaccount:{namespace}:{name}`, each part within its length and character set.
pub fn service_account(user: &str) -> Option<ServiceAccount> {
    let rest = user.strip_prefix(SA_PREFIX)?;
    let (namespace, name) = rest.split_once(':')?;
    let dns = |s: &str, max: usize| {
        !s.is_empty()
            && s.len() <= max
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.'))
    };
    (dns(namespace, MAX_NAMESPACE) && dns(name, MAX_NAME)).then(|| ServiceAccount {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    })
}

/// After `program/version`: client-go's ` (os/arch) project/commit[/suffix]`. The suffix is a
/// ServiceAccount user name or a controller's name; anything else is ignored.
fn suffix(rest: &str) -> (Option<ServiceAccount>, Option<String>) {
    let Some(platform) = rest.strip_prefix(" (") else {
        return (None, None);
    };
    let Some((_, after)) = platform.split_once(") ") else {
        return (None, None);
    };
    let tail = after.split(char::is_whitespace).next().unwrap_or_default();
    let mut parts = tail.splitn(3, '/');
    let (Some(_project), Some(_commit), Some(suffix)) = (parts.next(), parts.next(), parts.next())
    else {
        return (None, None);
    };
    if suffix.starts_with(SA_PREFIX) {
        let (sa, _) = token(
            suffix,
            SA_PREFIX.len() + MAX_NAMESPACE + 1 + MAX_NAME,
            |c| is_name_char(c) || c == ':',
        );
        return (service_account(&sa), None);
    }
    let (component, _) = token(suffix, MAX_COMPONENT, |c| is_name_char(c) || c == ':');
    (None, (!component.is_empty()).then_some(component))
}

/// The longest prefix of `s` made of `ok` characters, cut to `max` characters, and what
/// follows the whole run of `ok` characters.
fn token(s: &str, max: usize, ok: impl Fn(char) -> bool) -> (String, &str) {
    let end = s.find(|c: char| !ok(c)).unwrap_or(s.len());
    (s[..end].chars().take(max).collect(), &s[end..])
}

/// Characters of program names and versions: ASCII letters, digits, `.`, `_`, `-`, `+`.
fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '+')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(ns: &str, name: &str) -> Option<ServiceAccount> {
        Some(ServiceAccount {
            namespace: ns.to_owned(),
            name: name.to_owned(),
        })
    }

    /// User-Agent, program, version, service account, component, client label.
    type Case = (
        &'static [u8],
        &'static str,
        Option<&'static str>,
        Option<ServiceAccount>,
        Option<&'static str>,
        &'static str,
    );

    #[test]
    fn real_user_agents() {
        // (User-Agent, program, version, service account, component, client label)
        #[rustfmt::skip]
        let cases: Vec<Case> = vec![
            (b"kubectl/v1.31.0 (linux/amd64) kubernetes/9edcffc",
             "kubectl", Some("v1.31.0"), None, None, "kubectl"),
            (b"kubectl1.34/v1.34.1 (darwin/arm64) kubernetes/93248f9",
             "kubectl1.34", Some("v1.34.1"), None, None, "kubectl1.34"),
            (b"kube-controller-manager/v1.31.2 (linux/amd64) kubernetes/abc123/system:serviceaccount:kube-system:generic-garbage-collector",
             "kube-controller-manager", Some("v1.31.2"), sa("kube-system", "generic-garbage-collector"), None,
             "kube-controller-manager (sa kube-system/generic-garbage-collector)"),
            (b"kube-controller-manager/v1.34.0 (linux/amd64) kubernetes/f28b4c9/shared-informers",
             "kube-controller-manager", Some("v1.34.0"), None, Some("shared-informers"),
             "kube-controller-manager (shared-informers)"),
            (b"kube-controller-manager/v1.31.2 (linux/amd64) kubernetes/abc123/leader-election",
             "kube-controller-manager", Some("v1.31.2"), None, Some("leader-election"),
             "kube-controller-manager (leader-election)"),
            (b"kube-scheduler/v1.33.4 (linux/amd64) kubernetes/74cdb42/scheduler",
             "kube-scheduler", Some("v1.33.4"), None, Some("scheduler"), "kube-scheduler (scheduler)"),
            (b"kubelet/v1.31.2 (linux/amd64) kubernetes/5864a46",
             "kubelet", Some("v1.31.2"), None, None, "kubelet"),
            (b"kube-apiserver/v1.34.0 (linux/amd64) kubernetes/f28b4c9",
             "kube-apiserver", Some("v1.34.0"), None, None, "kube-apiserver"),
            // controller-runtime operators built without version ldflags
            (b"manager/v0.0.0 (linux/amd64) kubernetes/$Format",
             "manager", Some("v0.0.0"), None, None, "manager"),
            (b"cert-manager-cainjector/v1.14.4 (linux/amd64) cert-manager/f8df2a7b0b",
             "cert-manager-cainjector", Some("v1.14.4"), None, None, "cert-manager-cainjector"),
            // client-go with an unknown version and commit
            (b"e2e.test/unknown (linux/amd64) kubernetes/unknown",
             "e2e.test", Some("unknown"), None, None, "e2e.test"),
            (b"Go-http-client/1.1", "Go-http-client", Some("1.1"), None, None, "Go-http-client"),
            (b"Go-http-client/2.0", "Go-http-client", Some("2.0"), None, None, "Go-http-client"),
            (b"curl/8.5.0", "curl", Some("8.5.0"), None, None, "curl"),
            (b"Helm/3.14.0", "Helm", Some("3.14.0"), None, None, "Helm"),
            (b"OpenAPI-Generator/29.0.0/python", "OpenAPI-Generator", Some("29.0.0"), None, None, "OpenAPI-Generator"),
            (b"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36",
             "Mozilla", Some("5.0"), None, None, "Mozilla"),
            (b"argocd-application-controller/v2.10.1+5b8b5bc (linux/amd64) kubernetes/$Format/system:serviceaccount:argocd:argocd-application-controller",
             "argocd-application-controller", Some("v2.10.1+5b8b5bc"), sa("argocd", "argocd-application-controller"), None,
             "argocd-application-controller (sa argocd/argocd-application-controller)"),
        ];
        for (ua, program, version, service_account, component, client) in cases {
            let a = parse(ua);
            let shown = String::from_utf8_lossy(ua);
            assert_eq!(a.program, program, "{shown}");
            assert_eq!(a.version.as_deref(), version, "{shown}");
            assert_eq!(a.service_account, service_account, "{shown}");
            assert_eq!(a.component.as_deref(), component, "{shown}");
            assert_eq!(a.client(), client, "{shown}");
        }
    }

    #[test]
    fn malformed_user_agents_are_bounded_and_never_panic() {
        let huge = vec![b'a'; 10 * 1024];
        let mut huge_sa = b"op/v1 (linux/amd64) kubernetes/abc/system:serviceaccount:".to_vec();
        huge_sa.extend(vec![b'n'; 10 * 1024]);
        let mut non_utf8 = b"kube\xff\xfectl/v1.31.0 (linux/amd64) kubernetes/abc".to_vec();
        non_utf8.extend([0xc3, 0x28]);
        #[rustfmt::skip]
        let cases: Vec<(Vec<u8>, &str, Option<&str>)> = vec![
            (Vec::new(), UNKNOWN_PROGRAM, None),
            (b"   ".to_vec(), UNKNOWN_PROGRAM, None),
            (b"/v1.2.3".to_vec(), UNKNOWN_PROGRAM, Some("v1.2.3")),
            (b"(compatible)".to_vec(), UNKNOWN_PROGRAM, None),
            (b"\xff\xfe\xfd".to_vec(), UNKNOWN_PROGRAM, None),
            (non_utf8, "kube", None),
            (b"kubectl/".to_vec(), "kubectl", None),
            (b"kubectl/v1 (".to_vec(), "kubectl", Some("v1")),
            (b"kubectl/v1 (linux/amd64".to_vec(), "kubectl", Some("v1")),
            (b"kubectl/v1 (linux/amd64) kubernetes".to_vec(), "kubectl", Some("v1")),
            (b"kubectl/v1 (linux/amd64) kubernetes/abc/".to_vec(), "kubectl", Some("v1")),
            (b"prog\"ram{x=\"y\"}/1".to_vec(), "prog", None),
            (b"a/b/c/d/e".to_vec(), "a", Some("b")),
            (huge.clone(), "", None),
            (huge_sa, "op", Some("v1")),
        ];
        for (ua, program, version) in cases {
            let a = parse(&ua);
            let shown = String::from_utf8_lossy(&ua[..ua.len().min(80)]).into_owned();
            if program.is_empty() {
                assert_eq!(a.program, "a".repeat(MAX_PROGRAM), "{shown}");
            } else {
                assert_eq!(a.program, program, "{shown}");
            }
            assert_eq!(a.version.as_deref(), version, "{shown}");
            assert!(a.client().len() <= 400, "{shown}: {}", a.client().len());
            assert!(
                a.client().chars().all(|c| c.is_ascii_graphic() || c == ' '),
                "{shown}: {}",
                a.client()
            );
        }
        // An over-long ServiceAccount is not one (a DNS subdomain is at most 253 characters).
        let mut long = b"op/v1 (l/a) k/c/system:serviceaccount:ns:".to_vec();
        long.extend(vec![b'x'; 254]);
        assert_eq!(parse(&long).service_account, None);
        assert_eq!(parse(&long).client(), "op");
    }

    #[test]
    fn the_front_proxy_identity_names_the_service_account() {
        let a = parse(b"kubectl/v1.31.0 (linux/amd64) kubernetes/9edcffc")
            .with_identity(Some(b"system:serviceaccount:ci:deployer"));
        assert_eq!(a.client(), "kubectl (sa ci/deployer)");
        // it wins over what the User-Agent claims
        let a = parse(b"op/v1 (linux/amd64) kubernetes/abc/system:serviceaccount:kube-system:x")
            .with_identity(Some(b"system:serviceaccount:team-a:op"));
        assert_eq!(a.service_account, sa("team-a", "op"));
        // a person's name is not kept
        let a = parse(b"kubectl/v1.31.0").with_identity(Some(b"kubernetes-admin"));
        assert_eq!(a.client(), "kubectl");
        let a = parse(b"kubectl/v1.31.0").with_identity(Some(b"system:serviceaccount:Bad:x"));
        assert_eq!(a.client(), "kubectl");
        let a = parse(b"kubectl/v1.31.0").with_identity(None);
        assert_eq!(a.client(), "kubectl");
    }
}
