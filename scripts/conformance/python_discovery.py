"""The official Kubernetes Python client's discovery, compared with aggregated discovery.

The Python client (`kubernetes.dynamic`) reads legacy discovery only: `/api`, `/apis`, then
every `/api/v1` and `/apis/{group}/{version}` the group list names. Through a proxy, the
group/version/resources it finds must be those the aggregated `/apis` (v2) and `/api` list.

usage: python_discovery.py KUBECONFIG CACHE_DIR
prints "N GVRs, same as aggregated discovery" and exits 0, or the differences and exits 1.
"""

import json
import os
import sys

from kubernetes import config, dynamic
from kubernetes.dynamic import discovery

V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


def legacy_gvrs(api_client, cache_dir):
    client = dynamic.DynamicClient(
        api_client, cache_file=os.path.join(cache_dir, "discovery.json"), discoverer=discovery.EagerDiscoverer
    )
    d = client.resources
    out = set()
    for prefix, groups in d.parse_api_groups(request_resources=True).items():
        if prefix not in ("api", "apis"):
            continue
        for group, versions in groups.items():
            for version, rg in versions.items():
                for kind, resources in rg.resources.items():
                    for r in resources:
                        name = getattr(r, "name", None)
                        if name and "/" not in name and not kind.endswith("List"):
                            out.add(f"{group}/{version}/{name}" if group else f"{version}/{name}")
    return out


def aggregated_gvrs(api_client):
    out = set()
    for path in ("/api", "/apis"):
        resp = api_client.call_api(
            path, "GET", header_params={"Accept": V2}, _preload_content=False, auth_settings=["BearerToken"]
        )[0]
        doc = json.loads(resp.data)
        for g in doc["items"]:
            group = g.get("metadata", {}).get("name", "")
            for v in g["versions"]:
                for r in v.get("resources") or []:
                    out.add(f"{group}/{v['version']}/{r['resource']}" if group else f"{v['version']}/{r['resource']}")
    return out


def main(kubeconfig, cache_dir):
    api_client = config.new_client_from_config(config_file=kubeconfig)
    legacy, aggregated = legacy_gvrs(api_client, cache_dir), aggregated_gvrs(api_client)
    if legacy == aggregated:
        print(f"{len(legacy)} GVRs, same as aggregated discovery")
        return 0
    print(f"only in legacy: {sorted(legacy - aggregated)}; only in aggregated: {sorted(aggregated - legacy)}")
    return 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
