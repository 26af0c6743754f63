#!/usr/bin/env bash
# Writes the seed corpora (fuzz/corpus/<target>/seed-*) from the real discovery documents in
# fixtures/discovery/ and the examples in deploy/, trimmed so they stay small: each aggregated
# document keeps its first groups only. Needs jq. Run from anywhere; it overwrites seed-* files
# and leaves the inputs the fuzzers found alone.
set -euo pipefail
cd "$(dirname "$0")/.."
fx=fixtures/discovery
c=fuzz/corpus
mkdir -p "$c"/{classify,accept,discovery,merge,identity,config,kubeconfig,peers,warning}

# the first N groups of an aggregated document, compact
head_groups() { jq -c --argjson n "$2" '.items |= .[:$n]' "$1"; }
new=$(head_groups $fx/kube-apiserver-1.34-dev/aggregated_v2.json 5)
old=$(head_groups $fx/kube-apiserver-1.31-dev/aggregated_v2.json 5)
# 1.31's resource.k8s.io (podschedulingcontexts, v1alpha3): what only the old release serves
old_resource=$(jq -c '.items |= map(select(.metadata.name == "resource.k8s.io"))' \
  $fx/kube-apiserver-1.31-dev/aggregated_v2.json)
oauth=$(jq -c . $fx/openshift-oauth-apiserver-k8s-1.34.1/aggregated_v2.json)

# discovery: aggregated (v2 and v2beta1 share the schema), legacy documents, content types
printf '%s' "$new" >"$c/discovery/seed-aggregated-1.34"
printf '%s' "$old_resource" >"$c/discovery/seed-aggregated-1.31-resource"
printf '%s' "$oauth" >"$c/discovery/seed-aggregated-openshift-oauth"
jq -c . $fx/k0s-v1.21.0-legacy/api/index.json >"$c/discovery/seed-legacy-apiversions"
jq -c '.groups |= .[:4]' $fx/k0s-v1.21.0-legacy/apis/index.json >"$c/discovery/seed-legacy-apigrouplist"
jq -c '.resources |= .[:4]' $fx/k0s-v1.21.0-legacy/apis/apps/v1/index.json >"$c/discovery/seed-legacy-apiresourcelist"
printf 'application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList' >"$c/discovery/seed-content-type-v2"
printf 'application/json; as=APIGroupDiscoveryList; v=v2beta1; g=apidiscovery.k8s.io' >"$c/discovery/seed-content-type-v2beta1"

# merge: local, then peers, NUL-separated
printf '%s\0%s' "$new" "$old" >"$c/merge/seed-1.34-1.31"
printf '%s\0%s\0%s' "$old" "$new" "$old_resource" >"$c/merge/seed-1.31-1.34-resource"
printf '%s\0%s' "$new" "$oauth" >"$c/merge/seed-1.34-openshift-oauth"

# classify: the first byte picks the method (0 GET, 1 POST, 4 DELETE, 8 WATCH)
for t in \
  '\x00/api/v1/namespaces/default/pods?watch=true&resourceVersion=10' \
  '\x01/apis/resource.k8s.io/v1alpha3/namespaces/default/podschedulingcontexts' \
  '\x00/apis/coordination.k8s.io/v1beta1/namespaces/kube-system/leasecandidates/x/status' \
  '\x00/api/v1/watch/namespaces/default/configmaps?fieldSelector=metadata.name%3Dcm' \
  '\x04/apis/apps/v1/namespaces/default/deployments?labelSelector=a%3Db' \
  '\x00/api/v1/namespaces/default/services/web:8080/proxy/path/..%2F..%2Fx' \
  '\x00/apis/apps/v1' '\x00/apis' '\x00/api' '\x00/healthz?verbose' \
  '\x08/apis/batch/v1/jobs' '\x00http://127.0.0.1:6443/api/v1/nodes/n1'; do
  printf '%b' "$t" >"$c/classify/seed-$(printf '%s' "$t" | cksum | cut -d' ' -f1)"
done

# accept: what kubectl, client-go and mvproxy itself send
for a in \
  'application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json' \
  'application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer' \
  'application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList' \
  'application/com.github.proto-openapi.spec.v2@v1.0+protobuf' \
  'application/json, */*;q=0.8' '*/*' ''; do
  printf '%s' "$a" >"$c/accept/seed-$(printf '%s' "$a" | cksum | cut -d' ' -f1)"
done

# identity: header names, prefix, user, groups, then request headers
printf 'X-Remote-User\0X-Remote-Uid\0X-Remote-Group\0X-Remote-Extra-\0alice\0system:masters,dev\0X-Remote-User: mallory\nx-remote-group: system:masters\nX-Remote-Extra-Scopes: all\nAuthorization: Bearer t\nImpersonate-User: bob' \
  >"$c/identity/seed-default-names"
printf 'X-Auth-User\0\0X-Auth-Groups\0X-Auth-Extra-\0bob\0\0x-auth-user: root\nx-auth-extra-a: b\nx-remote-user: root' \
  >"$c/identity/seed-custom-names"

# config: the deployed example, and a few shapes of error
sed -n '/^[a-z]/,$p' deploy/kubernetes/static-pod/config.yaml >"$c/config/seed-static-pod"
printf 'local: http://127.0.0.1:8080\npeers: ["b=http://127.0.0.1:8081"]\nserver-id: a\n' >"$c/config/seed-minimal"
printf 'local: https://10.0.0.1:6443\nidentity: front-proxy\npeer-source: leases\nmax-connections: 0\n' >"$c/config/seed-errors"

# kubeconfig: inline and file credentials
cat >"$c/kubeconfig/seed-admin" <<'YAML'
apiVersion: v1
kind: Config
current-context: admin@kubernetes
contexts:
  - name: admin@kubernetes
    context: {cluster: kubernetes, user: admin}
clusters:
  - name: kubernetes
    cluster: {server: "https://10.0.0.1:6443", certificate-authority: ca.crt}
users:
  - name: admin
    user: {client-certificate-data: Q0VSVA==, client-key-data: S0VZ}
YAML
printf 'current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\nclusters: [{name: k, cluster: {server: "http://127.0.0.1:8080"}}]\n' \
  >"$c/kubeconfig/seed-anonymous"

# peers: identity Leases and the kubernetes EndpointSlice, as an API server lists them
cat >"$c/peers/seed-leases" <<'JSON'
[{"metadata":{"name":"apiserver-abc","namespace":"kube-system","labels":{"apiserver.kubernetes.io/identity":"kube-apiserver"},"annotations":{"kubernetes.io/peer-advertise-address":"10.0.0.2:6443"}},"spec":{"holderIdentity":"apiserver-abc_1","leaseDurationSeconds":3600,"renewTime":"2026-09-21T10:00:00.000000Z"}},{"metadata":{"name":"apiserver-self","labels":{"apiserver.kubernetes.io/identity":"kube-apiserver"},"annotations":{"kubernetes.io/peer-advertise-address":"10.0.0.1:6443"}},"spec":{"holderIdentity":"x"}}]
JSON
# a duration past the end of time (SystemTime + Duration once panicked on it)
cat >"$c/peers/seed-lease-forever" <<'JSON'
[{"metadata":{"name":"apiserver-b","labels":{"apiserver.kubernetes.io/identity":"kube-apiserver"},"annotations":{"kubernetes.io/peer-advertise-address":"10.0.0.2:6443"}},"spec":{"holderIdentity":"b_1","leaseDurationSeconds":18446744073709551615,"renewTime":"2026-09-21T10:00:00.000000Z"}}]
JSON
cat >"$c/peers/seed-endpointslices" <<'JSON'
[{"metadata":{"name":"kubernetes","namespace":"default"},"addressType":"IPv4","ports":[{"name":"https","port":6443,"protocol":"TCP"}],"endpoints":[{"addresses":["10.0.0.1"],"conditions":{"ready":true}},{"addresses":["10.0.0.2"],"conditions":{"ready":true}},{"addresses":["10.0.0.3"],"conditions":{"ready":false}}]}]
JSON
du -sh "$c"

# warning: a request's group, version, resource, then Warning header values, NUL-separated
printf 'policy\000v1beta1\000podsecuritypolicies\000299 - "policy/v1beta1 PodSecurityPolicy is deprecated in v1.21+, unavailable in v1.25+"' >"$c/warning/seed-psp"
printf '\000v1\000componentstatuses\000299 - "v1 ComponentStatus is deprecated in v1.19+"' >"$c/warning/seed-componentstatus"
printf 'example.com\000v1alpha1\000widgets\000299 - "a \\"webhook\\" said", 199 agent:1 "x" "Wed, 21 Oct 2015 07:28:00 GMT"\000299 - "example.com/v1alpha1 Widget is deprecated; use example.com/v1 Widget"' >"$c/warning/seed-several"
