//! Finalizers only some releases' kube-controller-manager removes: the harm of the skew that no
//! proxy can route around.
//!
//! A finalizer keeps an object (and then its namespace) from going away until a controller
//! removes it. When the API server that admits an object stamps a finalizer that only a newer
//! kube-controller-manager removes, and the controller-manager that leads is older, the
//! object's deletion waits until the upgrade reaches the controller-manager; a rollback can
//! strand objects the same way. mvproxy cannot fix that, but it sees the deletion's response
//! and can say which objects wait and on which release ([`super::deletions`]).
//!
//! The catalog is data, verified against the Kubernetes sources of each release in it
//! (`k8s.io/kubernetes` v1.35.4, v1.36.3 and v1.37.2): every finalizer constant under `pkg/`
//! and `plugin/` was compared between them, and only the entries below appear or disappear.
//! Finalizers every release in that range removes (`kubernetes.io/pvc-protection`,
//! `kubernetes.io/pv-protection`, `kubernetes.io/vac-protection`,
//! `resource.kubernetes.io/delete-protection`, `networking.k8s.io/service-cidr-finalizer`,
//! `batch.kubernetes.io/job-tracking`) are not in it: no skew of these releases strands them.

use crate::discovery::side::Release;

/// A finalizer whose remover runs only in some releases of kube-controller-manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finalizer {
    /// The finalizer as it appears in `metadata.finalizers`.
    pub name: &'static str,
    /// The API group of the objects it is put on.
    pub group: &'static str,
    /// Their resource (plural).
    pub resource: &'static str,
    /// The kube-controller-manager controller that removes it (`--controllers` name).
    pub controller: &'static str,
    /// The first release whose controller-manager runs that controller.
    pub since: Release,
    /// The first release whose controller-manager no longer runs it, if any.
    pub until: Option<Release>,
}

impl Finalizer {
    /// Whether a kube-controller-manager of `release` runs the controller that removes it.
    pub fn removed_by(&self, release: Release) -> bool {
        self.since <= release && self.until.is_none_or(|u| release < u)
    }

    /// The releases whose controller-manager removes it, as the `release` label says it:
    /// `1.36+`, or `1.30-1.35` when a later release dropped the controller.
    pub fn releases(&self) -> String {
        match self.until {
            None => format!("{}+", self.since),
            Some(u) => format!("{}-{}.{}", self.since, u.major, u.minor.saturating_sub(1)),
        }
    }
}

const fn release(minor: u32) -> Release {
    Release { major: 1, minor }
}

/// Every finalizer of the catalog.
pub const CATALOG: &[Finalizer] = &[
    // Stamped on every new PodGroup by 1.36's `PodGroupProtection` admission plugin
    // (k8s.io/kubernetes v1.36.3 plugin/pkg/admission/scheduling/podgroupprotection/admission.go,
    // <https://github.com/kubernetes/kubernetes/blob/v1.36.3/plugin/pkg/admission/scheduling/podgroupprotection/admission.go>),
    // defined in pkg/apis/scheduling/types.go (`PodGroupProtectionFinalizer`), removed only
    // by the `podgroup-protection-controller` of kube-controller-manager
    // (pkg/controller/scheduling/podgroupprotection/podgroup_protection_controller.go,
    // registered in cmd/kube-controller-manager/app/scheduling.go), which 1.35.4 has not:
    // v1.35.4 has no pkg/controller/scheduling and no such constant. Still in v1.37.2.
    Finalizer {
        name: "scheduling.k8s.io/podgroup-protection",
        group: "scheduling.k8s.io",
        resource: "podgroups",
        controller: "podgroup-protection-controller",
        since: release(36),
        until: None,
    },
];

/// The catalog's entry for `finalizer` on an object of `group`/`resource`, if any.
pub fn lookup(group: &str, resource: &str, finalizer: &str) -> Option<&'static Finalizer> {
    CATALOG
        .iter()
        .find(|f| f.name == finalizer && f.group == group && f.resource == resource)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn podgroup_protection_is_removed_only_from_1_36_on() {
        let f = lookup(
            "scheduling.k8s.io",
            "podgroups",
            "scheduling.k8s.io/podgroup-protection",
        )
        .expect("in the catalog");
        assert_eq!(f.controller, "podgroup-protection-controller");
        assert!(!f.removed_by(release(35)));
        assert!(f.removed_by(release(36)));
        assert!(f.removed_by(release(37)));
        assert_eq!(f.releases(), "1.36+");
    }

    #[test]
    fn a_finalizer_is_known_only_on_the_resource_it_protects() {
        // the same name on another resource, and finalizers every release removes
        assert!(lookup("", "pods", "scheduling.k8s.io/podgroup-protection").is_none());
        assert!(lookup("", "persistentvolumeclaims", "kubernetes.io/pvc-protection").is_none());
        assert!(lookup("scheduling.k8s.io", "podgroups", "kubernetes").is_none());
    }

    #[test]
    fn a_controller_a_later_release_dropped_is_named_by_its_last_release() {
        let f = Finalizer {
            name: "example.k8s.io/gone",
            group: "example.k8s.io",
            resource: "things",
            controller: "thing-controller",
            since: release(30),
            until: Some(release(36)),
        };
        assert!(f.removed_by(release(35)));
        assert!(!f.removed_by(release(36)));
        assert!(!f.removed_by(release(29)));
        assert_eq!(f.releases(), "1.30-1.35");
    }
}
