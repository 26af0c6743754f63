//! The facts: which groups and versions each release serves at `/apis` (in its priority
//! order) and every resource of them, with the releases that serve it.
//!
//! Read off kube-apiserver's own aggregated discovery documents (`kube-apiserver-1.31-dev` and
//! `-1.34-dev` in `fixtures/discovery/`); `super::tests` renders both
//! releases from this table and compares them with those documents, field by field. Resources
//! are listed per group-version in name order, as kube-apiserver lists them.

use super::{
    ALL, APPROVAL, BOTH, CL, CREATE, EXT, NEW, NONE, NS, OLD, RW, Res, SCALE, STATUS, res,
};

/// `(group, versions in the release's order)`, in the order the release lists its groups.
pub(super) type GroupOrder = &'static [(&'static str, &'static [&'static str])];

/// Kubernetes 1.31.
#[rustfmt::skip]
pub(super) const GROUPS_1_31: GroupOrder = &[
    ("apiregistration.k8s.io", &["v1"]),
    ("apps", &["v1"]),
    ("events.k8s.io", &["v1"]),
    ("authentication.k8s.io", &["v1", "v1beta1", "v1alpha1"]),
    ("authorization.k8s.io", &["v1"]),
    ("autoscaling", &["v2", "v1"]),
    ("batch", &["v1"]),
    ("certificates.k8s.io", &["v1", "v1alpha1"]),
    ("networking.k8s.io", &["v1", "v1beta1"]),
    ("policy", &["v1"]),
    ("rbac.authorization.k8s.io", &["v1"]),
    ("storage.k8s.io", &["v1", "v1alpha1"]),
    ("admissionregistration.k8s.io", &["v1", "v1beta1", "v1alpha1"]),
    ("apiextensions.k8s.io", &["v1"]),
    ("scheduling.k8s.io", &["v1"]),
    ("coordination.k8s.io", &["v1"]),
    ("node.k8s.io", &["v1"]),
    ("discovery.k8s.io", &["v1"]),
    ("flowcontrol.apiserver.k8s.io", &["v1", "v1beta3"]),
    ("internal.apiserver.k8s.io", &["v1alpha1"]),
    ("resource.k8s.io", &["v1alpha3"]),
    ("storagemigration.k8s.io", &["v1alpha1"]),
];

/// Kubernetes 1.34.
#[rustfmt::skip]
pub(super) const GROUPS_1_34: GroupOrder = &[
    ("apiregistration.k8s.io", &["v1"]),
    ("apps", &["v1"]),
    ("events.k8s.io", &["v1"]),
    ("authentication.k8s.io", &["v1"]),
    ("authorization.k8s.io", &["v1"]),
    ("autoscaling", &["v2", "v1"]),
    ("batch", &["v1"]),
    ("certificates.k8s.io", &["v1", "v1beta1", "v1alpha1"]),
    ("networking.k8s.io", &["v1", "v1beta1"]),
    ("policy", &["v1"]),
    ("rbac.authorization.k8s.io", &["v1"]),
    ("storage.k8s.io", &["v1", "v1beta1", "v1alpha1"]),
    ("admissionregistration.k8s.io", &["v1", "v1beta1", "v1alpha1"]),
    ("apiextensions.k8s.io", &["v1"]),
    ("scheduling.k8s.io", &["v1"]),
    ("coordination.k8s.io", &["v1", "v1beta1", "v1alpha2"]),
    ("node.k8s.io", &["v1"]),
    ("discovery.k8s.io", &["v1"]),
    ("resource.k8s.io", &["v1beta2", "v1beta1", "v1alpha3"]),
    ("flowcontrol.apiserver.k8s.io", &["v1"]),
    ("internal.apiserver.k8s.io", &["v1alpha1"]),
    ("storagemigration.k8s.io", &["v1alpha1"]),
];

/// Every resource of either release: `(group, version, resources)`.
#[rustfmt::skip]
pub(super) const RESOURCES: &[(&str, &str, &[Res])] = &[
    ("apiregistration.k8s.io", "v1", &[
        res("apiservices", "apiservice", "APIService", CL, RW, &[], EXT, &[STATUS], BOTH),
    ]),
    ("apps", "v1", &[
        res("controllerrevisions", "controllerrevision", "ControllerRevision", NS, RW, &[], NONE, &[], BOTH),
        res("daemonsets", "daemonset", "DaemonSet", NS, RW, &["ds"], ALL, &[STATUS], BOTH),
        res("deployments", "deployment", "Deployment", NS, RW, &["deploy"], ALL, &[SCALE, STATUS], BOTH),
        res("replicasets", "replicaset", "ReplicaSet", NS, RW, &["rs"], ALL, &[SCALE, STATUS], BOTH),
        res("statefulsets", "statefulset", "StatefulSet", NS, RW, &["sts"], ALL, &[SCALE, STATUS], BOTH),
    ]),
    ("events.k8s.io", "v1", &[
        res("events", "event", "Event", NS, RW, &["ev"], NONE, &[], BOTH),
    ]),
    ("authentication.k8s.io", "v1", &[
        res("selfsubjectreviews", "selfsubjectreview", "SelfSubjectReview", CL, CREATE, &[], NONE, &[], BOTH),
        res("tokenreviews", "tokenreview", "TokenReview", CL, CREATE, &[], NONE, &[], BOTH),
    ]),
    ("authentication.k8s.io", "v1beta1", &[
        res("selfsubjectreviews", "selfsubjectreview", "SelfSubjectReview", CL, CREATE, &[], NONE, &[], OLD),
    ]),
    ("authentication.k8s.io", "v1alpha1", &[
        res("selfsubjectreviews", "selfsubjectreview", "SelfSubjectReview", CL, CREATE, &[], NONE, &[], OLD),
    ]),
    ("authorization.k8s.io", "v1", &[
        res("localsubjectaccessreviews", "localsubjectaccessreview", "LocalSubjectAccessReview", NS, CREATE, &[], NONE, &[], BOTH),
        res("selfsubjectaccessreviews", "selfsubjectaccessreview", "SelfSubjectAccessReview", CL, CREATE, &[], NONE, &[], BOTH),
        res("selfsubjectrulesreviews", "selfsubjectrulesreview", "SelfSubjectRulesReview", CL, CREATE, &[], NONE, &[], BOTH),
        res("subjectaccessreviews", "subjectaccessreview", "SubjectAccessReview", CL, CREATE, &[], NONE, &[], BOTH),
    ]),
    ("autoscaling", "v2", &[
        res("horizontalpodautoscalers", "horizontalpodautoscaler", "HorizontalPodAutoscaler", NS, RW, &["hpa"], ALL, &[STATUS], BOTH),
    ]),
    ("autoscaling", "v1", &[
        res("horizontalpodautoscalers", "horizontalpodautoscaler", "HorizontalPodAutoscaler", NS, RW, &["hpa"], ALL, &[STATUS], BOTH),
    ]),
    ("batch", "v1", &[
        res("cronjobs", "cronjob", "CronJob", NS, RW, &["cj"], ALL, &[STATUS], BOTH),
        res("jobs", "job", "Job", NS, RW, &[], ALL, &[STATUS], BOTH),
    ]),
    ("certificates.k8s.io", "v1", &[
        res("certificatesigningrequests", "certificatesigningrequest", "CertificateSigningRequest", CL, RW, &["csr"], NONE, &[APPROVAL, STATUS], BOTH),
    ]),
    ("certificates.k8s.io", "v1beta1", &[
        res("clustertrustbundles", "clustertrustbundle", "ClusterTrustBundle", CL, RW, &[], NONE, &[], NEW),
    ]),
    ("certificates.k8s.io", "v1alpha1", &[
        res("clustertrustbundles", "clustertrustbundle", "ClusterTrustBundle", CL, RW, &[], NONE, &[], BOTH),
    ]),
    ("networking.k8s.io", "v1", &[
        res("ingressclasses", "ingressclass", "IngressClass", CL, RW, &[], NONE, &[], BOTH),
        res("ingresses", "ingress", "Ingress", NS, RW, &["ing"], NONE, &[STATUS], BOTH),
        res("ipaddresses", "ipaddress", "IPAddress", CL, RW, &["ip"], NONE, &[], NEW),
        res("networkpolicies", "networkpolicy", "NetworkPolicy", NS, RW, &["netpol"], NONE, &[], BOTH),
        res("servicecidrs", "servicecidr", "ServiceCIDR", CL, RW, &[], NONE, &[STATUS], NEW),
    ]),
    ("networking.k8s.io", "v1beta1", &[
        res("ipaddresses", "ipaddress", "IPAddress", CL, RW, &["ip"], NONE, &[], BOTH),
        res("servicecidrs", "servicecidr", "ServiceCIDR", CL, RW, &[], NONE, &[STATUS], BOTH),
    ]),
    ("policy", "v1", &[
        res("poddisruptionbudgets", "poddisruptionbudget", "PodDisruptionBudget", NS, RW, &["pdb"], NONE, &[STATUS], BOTH),
    ]),
    ("rbac.authorization.k8s.io", "v1", &[
        res("clusterrolebindings", "clusterrolebinding", "ClusterRoleBinding", CL, RW, &[], NONE, &[], BOTH),
        res("clusterroles", "clusterrole", "ClusterRole", CL, RW, &[], NONE, &[], BOTH),
        res("rolebindings", "rolebinding", "RoleBinding", NS, RW, &[], NONE, &[], BOTH),
        res("roles", "role", "Role", NS, RW, &[], NONE, &[], BOTH),
    ]),
    ("storage.k8s.io", "v1", &[
        res("csidrivers", "csidriver", "CSIDriver", CL, RW, &[], NONE, &[], BOTH),
        res("csinodes", "csinode", "CSINode", CL, RW, &[], NONE, &[], BOTH),
        res("csistoragecapacities", "csistoragecapacity", "CSIStorageCapacity", NS, RW, &[], NONE, &[], BOTH),
        res("storageclasses", "storageclass", "StorageClass", CL, RW, &["sc"], NONE, &[], BOTH),
        res("volumeattachments", "volumeattachment", "VolumeAttachment", CL, RW, &[], NONE, &[STATUS], BOTH),
    ]),
    ("storage.k8s.io", "v1beta1", &[
        res("volumeattributesclasses", "volumeattributesclass", "VolumeAttributesClass", CL, RW, &["vac"], NONE, &[], NEW),
    ]),
    ("storage.k8s.io", "v1alpha1", &[
        res("volumeattributesclasses", "volumeattributesclass", "VolumeAttributesClass", CL, RW, &["vac"], NONE, &[], BOTH),
    ]),
    ("admissionregistration.k8s.io", "v1", &[
        res("mutatingwebhookconfigurations", "mutatingwebhookconfiguration", "MutatingWebhookConfiguration", CL, RW, &[], EXT, &[], BOTH),
        res("validatingadmissionpolicies", "validatingadmissionpolicy", "ValidatingAdmissionPolicy", CL, RW, &[], EXT, &[STATUS], BOTH),
        res("validatingadmissionpolicybindings", "validatingadmissionpolicybinding", "ValidatingAdmissionPolicyBinding", CL, RW, &[], EXT, &[], BOTH),
        res("validatingwebhookconfigurations", "validatingwebhookconfiguration", "ValidatingWebhookConfiguration", CL, RW, &[], EXT, &[], BOTH),
    ]),
    ("admissionregistration.k8s.io", "v1beta1", &[
        res("validatingadmissionpolicies", "validatingadmissionpolicy", "ValidatingAdmissionPolicy", CL, RW, &[], EXT, &[STATUS], BOTH),
        res("validatingadmissionpolicybindings", "validatingadmissionpolicybinding", "ValidatingAdmissionPolicyBinding", CL, RW, &[], EXT, &[], BOTH),
    ]),
    ("admissionregistration.k8s.io", "v1alpha1", &[
        res("mutatingadmissionpolicies", "mutatingadmissionpolicy", "MutatingAdmissionPolicy", CL, RW, &[], EXT, &[], NEW),
        res("mutatingadmissionpolicybindings", "mutatingadmissionpolicybinding", "MutatingAdmissionPolicyBinding", CL, RW, &[], EXT, &[], NEW),
        res("validatingadmissionpolicies", "validatingadmissionpolicy", "ValidatingAdmissionPolicy", CL, RW, &[], EXT, &[STATUS], OLD),
        res("validatingadmissionpolicybindings", "validatingadmissionpolicybinding", "ValidatingAdmissionPolicyBinding", CL, RW, &[], EXT, &[], OLD),
    ]),
    ("apiextensions.k8s.io", "v1", &[
        res("customresourcedefinitions", "customresourcedefinition", "CustomResourceDefinition", CL, RW, &["crd", "crds"], EXT, &[STATUS], BOTH),
    ]),
    ("scheduling.k8s.io", "v1", &[
        res("priorityclasses", "priorityclass", "PriorityClass", CL, RW, &["pc"], NONE, &[], BOTH),
    ]),
    ("coordination.k8s.io", "v1", &[
        res("leases", "lease", "Lease", NS, RW, &[], NONE, &[], BOTH),
    ]),
    ("coordination.k8s.io", "v1beta1", &[
        res("leasecandidates", "leasecandidate", "LeaseCandidate", NS, RW, &[], NONE, &[], NEW),
    ]),
    ("coordination.k8s.io", "v1alpha2", &[
        res("leasecandidates", "leasecandidate", "LeaseCandidate", NS, RW, &[], NONE, &[], NEW),
    ]),
    ("node.k8s.io", "v1", &[
        res("runtimeclasses", "runtimeclass", "RuntimeClass", CL, RW, &[], NONE, &[], BOTH),
    ]),
    ("discovery.k8s.io", "v1", &[
        res("endpointslices", "endpointslice", "EndpointSlice", NS, RW, &[], NONE, &[], BOTH),
    ]),
    ("resource.k8s.io", "v1beta2", &[
        res("deviceclasses", "deviceclass", "DeviceClass", CL, RW, &[], NONE, &[], NEW),
        res("resourceclaims", "resourceclaim", "ResourceClaim", NS, RW, &[], NONE, &[STATUS], NEW),
        res("resourceclaimtemplates", "resourceclaimtemplate", "ResourceClaimTemplate", NS, RW, &[], NONE, &[], NEW),
        res("resourceslices", "resourceslice", "ResourceSlice", CL, RW, &[], NONE, &[], NEW),
    ]),
    ("resource.k8s.io", "v1beta1", &[
        res("deviceclasses", "deviceclass", "DeviceClass", CL, RW, &[], NONE, &[], NEW),
        res("resourceclaims", "resourceclaim", "ResourceClaim", NS, RW, &[], NONE, &[STATUS], NEW),
        res("resourceclaimtemplates", "resourceclaimtemplate", "ResourceClaimTemplate", NS, RW, &[], NONE, &[], NEW),
        res("resourceslices", "resourceslice", "ResourceSlice", CL, RW, &[], NONE, &[], NEW),
    ]),
    ("resource.k8s.io", "v1alpha3", &[
        res("deviceclasses", "deviceclass", "DeviceClass", CL, RW, &[], NONE, &[], NEW),
        res("devicetaintrules", "devicetaintrule", "DeviceTaintRule", CL, RW, &[], NONE, &[], NEW),
        res("podschedulingcontexts", "podschedulingcontext", "PodSchedulingContext", NS, RW, &[], NONE, &[STATUS], OLD),
        res("resourceclaimparameters", "resourceclaimparameters", "ResourceClaimParameters", NS, RW, &[], NONE, &[], OLD),
        res("resourceclaims", "resourceclaim", "ResourceClaim", NS, RW, &[], NONE, &[STATUS], BOTH),
        res("resourceclaimtemplates", "resourceclaimtemplate", "ResourceClaimTemplate", NS, RW, &[], NONE, &[], BOTH),
        res("resourceclasses", "resourceclass", "ResourceClass", CL, RW, &[], NONE, &[], OLD),
        res("resourceclassparameters", "resourceclassparameters", "ResourceClassParameters", NS, RW, &[], NONE, &[], OLD),
        res("resourceslices", "resourceslice", "ResourceSlice", CL, RW, &[], NONE, &[], BOTH),
    ]),
    ("flowcontrol.apiserver.k8s.io", "v1", &[
        res("flowschemas", "flowschema", "FlowSchema", CL, RW, &[], NONE, &[STATUS], BOTH),
        res("prioritylevelconfigurations", "prioritylevelconfiguration", "PriorityLevelConfiguration", CL, RW, &[], NONE, &[STATUS], BOTH),
    ]),
    ("flowcontrol.apiserver.k8s.io", "v1beta3", &[
        res("flowschemas", "flowschema", "FlowSchema", CL, RW, &[], NONE, &[STATUS], OLD),
        res("prioritylevelconfigurations", "prioritylevelconfiguration", "PriorityLevelConfiguration", CL, RW, &[], NONE, &[STATUS], OLD),
    ]),
    ("internal.apiserver.k8s.io", "v1alpha1", &[
        res("storageversions", "storageversion", "StorageVersion", CL, RW, &[], NONE, &[STATUS], BOTH),
    ]),
    ("storagemigration.k8s.io", "v1alpha1", &[
        res("storageversionmigrations", "storageversionmigration", "StorageVersionMigration", CL, RW, &[], NONE, &[STATUS], BOTH),
    ]),
];
