//! Which OpenAPI document a request path names.
//!
//! kube-apiserver serves `/openapi/v2` and `/openapi/v3` as exact paths and everything under
//! `/openapi/v3/` as one document each, named by the rest of the path (kube-openapi
//! `pkg/handler3/handler.go`, `RegisterOpenAPIV3VersionedService` and `HandleGroupVersion`).
//! Only the spellings kube-openapi itself writes into the index are recognised here; any
//! other (escapes, empty segments, paths that name no group-version) is left to the local
//! server as a non-resource path, which answers it as it always did.

/// An OpenAPI path mvproxy routes by its group-version or answers itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenApiPath {
    /// `/openapi/v2`.
    V2,
    /// `/openapi/v3`.
    V3Index,
    /// `/openapi/v3/{api,apis}/…`: one group-version's (or group's) document.
    V3Doc(DocPath),
}

/// The document of `/openapi/v3/<path>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DocPath {
    /// `api/{version}`: the core group.
    Core {
        /// The version.
        version: String,
    },
    /// `apis/{group}`: the group's discovery endpoint.
    Group {
        /// The group.
        group: String,
    },
    /// `apis/{group}/{version}`.
    GroupVersion {
        /// The group.
        group: String,
        /// The version.
        version: String,
    },
}

impl DocPath {
    /// Reads an index key (`apis/apps/v1`) or the path after `/openapi/v3/`.
    pub fn parse(rest: &str) -> Option<Self> {
        let segment_ok = |s: &str| {
            s.bytes().any(|b| b.is_ascii_alphanumeric())
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
        };
        let mut parts = rest.split('/');
        let doc = match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some("api"), Some(version), None, None) => Self::Core {
                version: version.to_owned(),
            },
            (Some("apis"), Some(group), None, None) => Self::Group {
                group: group.to_owned(),
            },
            (Some("apis"), Some(group), Some(version), None) => Self::GroupVersion {
                group: group.to_owned(),
                version: version.to_owned(),
            },
            _ => return None,
        };
        let ok = match &doc {
            Self::Core { version } => segment_ok(version),
            Self::Group { group } => segment_ok(group),
            Self::GroupVersion { group, version } => segment_ok(group) && segment_ok(version),
        };
        ok.then_some(doc)
    }

    /// The group and, unless this is a group's document, the version.
    pub fn group_version(&self) -> (&str, Option<&str>) {
        match self {
            Self::Core { version } => ("", Some(version)),
            Self::Group { group } => (group, None),
            Self::GroupVersion { group, version } => (group, Some(version)),
        }
    }
}

impl OpenApiPath {
    /// The OpenAPI document `path` (percent-encoded, as received) names, if any.
    pub fn parse(path: &str) -> Option<Self> {
        match path {
            "/openapi/v2" => Some(Self::V2),
            "/openapi/v3" => Some(Self::V3Index),
            _ => path
                .strip_prefix("/openapi/v3/")
                .and_then(DocPath::parse)
                .map(Self::V3Doc),
        }
    }

    /// Low-cardinality route for span names.
    pub fn route_template(&self) -> &'static str {
        match self {
            Self::V2 => "/openapi/v2",
            Self::V3Index => "/openapi/v3",
            Self::V3Doc(DocPath::Core { .. }) => "/openapi/v3/api/{version}",
            Self::V3Doc(DocPath::Group { .. }) => "/openapi/v3/apis/{group}",
            Self::V3Doc(DocPath::GroupVersion { .. }) => "/openapi/v3/apis/{group}/{version}",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_documents_and_group_versions() {
        assert_eq!(OpenApiPath::parse("/openapi/v2"), Some(OpenApiPath::V2));
        assert_eq!(
            OpenApiPath::parse("/openapi/v3"),
            Some(OpenApiPath::V3Index)
        );
        assert_eq!(
            OpenApiPath::parse("/openapi/v3/apis/scheduling.k8s.io/v1alpha2"),
            Some(OpenApiPath::V3Doc(DocPath::GroupVersion {
                group: "scheduling.k8s.io".into(),
                version: "v1alpha2".into()
            }))
        );
        assert_eq!(
            OpenApiPath::parse("/openapi/v3/api/v1"),
            Some(OpenApiPath::V3Doc(DocPath::Core {
                version: "v1".into()
            }))
        );
        assert_eq!(
            OpenApiPath::parse("/openapi/v3/apis/apps"),
            Some(OpenApiPath::V3Doc(DocPath::Group {
                group: "apps".into()
            }))
        );
    }

    #[test]
    fn other_spellings_stay_non_resource() {
        for p in [
            "/openapi/v2/",
            "/openapi/v3/",
            "/openapi/v3/apis",
            "/openapi/v3/api",
            "/openapi/v3/version",
            "/openapi/v3/.well-known/openid-configuration",
            "/openapi/v3/apis//v1",
            "/openapi/v3/apis/apps/v1/",
            "/openapi/v3/apis/apps/v1/extra",
            "/openapi/v3/apis/ap%70s/v1",
            "//openapi/v3",
            "/openapi/v3/apis/..",
        ] {
            assert_eq!(OpenApiPath::parse(p), None, "{p}");
        }
    }
}
