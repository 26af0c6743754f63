#!/usr/bin/env python3
"""Compares two aggregated discovery documents (apidiscovery.k8s.io/v2 APIGroupDiscoveryList):
group order, version order per group, resource order per version, and each resource's and
version's content. Writes every difference to OUT (one per line) and exits 1 if there is any.

usage: compare_apis.py MVPROXY.json UPSTREAM.json OUT.txt
"""
import json
import sys


def index(doc):
    groups = []
    content = {}
    for g in doc.get("items", []):
        name = g.get("metadata", {}).get("name", "")
        groups.append(name)
        versions = []
        for v in g.get("versions", []):
            versions.append(v["version"])
            resources = [r["resource"] for r in v.get("resources", [])]
            content[(name, v["version"])] = {
                "order": resources,
                "freshness": v.get("freshness"),
                "resources": {r["resource"]: r for r in v.get("resources", [])},
            }
        content[(name,)] = versions
    return groups, content


def main():
    a_path, b_path, out_path = sys.argv[1:4]
    with open(a_path, encoding="utf-8") as f:
        a = json.load(f)
    with open(b_path, encoding="utf-8") as f:
        b = json.load(f)
    ga, ca = index(a)
    gb, cb = index(b)
    diffs = []
    if ga != gb:
        diffs.append(f"group order: mvproxy {ga} / upstream {gb}")
    for g in sorted(set(ga) | set(gb)):
        va, vb = ca.get((g,)), cb.get((g,))
        if va is None or vb is None:
            diffs.append(f"group {g}: only in {'upstream' if va is None else 'mvproxy'}")
            continue
        if va != vb:
            diffs.append(f"{g}: version order mvproxy {va} / upstream {vb}")
        for v in sorted(set(va) & set(vb)):
            xa, xb = ca[(g, v)], cb[(g, v)]
            if xa["order"] != xb["order"]:
                diffs.append(f"{g}/{v}: resource order mvproxy {xa['order']} / upstream {xb['order']}")
            if xa["freshness"] != xb["freshness"]:
                diffs.append(f"{g}/{v}: freshness mvproxy {xa['freshness']} / upstream {xb['freshness']}")
            for r in sorted(set(xa["resources"]) & set(xb["resources"])):
                if xa["resources"][r] != xb["resources"][r]:
                    diffs.append(f"{g}/{v}/{r}: mvproxy {json.dumps(xa['resources'][r], sort_keys=True)} / "
                                 f"upstream {json.dumps(xb['resources'][r], sort_keys=True)}")
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(f"{len(ga)} groups in mvproxy's /apis, {len(gb)} in upstream's; {len(diffs)} differences\n")
        for d in diffs:
            f.write(d + "\n")
    sys.exit(1 if diffs else 0)


if __name__ == "__main__":
    main()
