#!/usr/bin/env python3
"""A Prometheus configuration that scrapes what the ServiceMonitors of a rendered overlay
select, the way the Prometheus operator would, with the pods standing on loopback ports:

    scrape_config.py RENDERED.yaml SECRET=FILE... CONTAINER_PORT=LOCAL_PORT...

For each ServiceMonitor endpoint: the Services its selector selects in its namespace, the
Service port its `port` names, the workload pods that Service selects and the container port
its targetPort reaches; that container port must be one given as CONTAINER_PORT=LOCAL_PORT
(grafana.sh runs the demo's server and agent there), or the endpoint is left out and said so.
The job is the operator's: `serviceMonitor/<namespace>/<name>/<index>`, with its relabelings
(`job` from the Service's name, `namespace`, `service`, `pod`, `endpoint`) and then the
endpoint's own `relabelings`, fed the `__meta_kubernetes_*` labels a Kubernetes discovery would
give; path, scheme and bearer token (SECRET=FILE: the file holding that Secret's `token`) are
the endpoint's. The scrape interval is the test's (2 s), not the ServiceMonitor's. Fails if a
given CONTAINER_PORT is scraped by no ServiceMonitor, or a ServiceMonitor selects nothing.
"""

import json
import socket
import sys

import kustomize
from references import Install, resolve_port

# The operator's relabelings before an endpoint's own (prometheus-operator's
# generateServiceMonitorConfig, with jobLabel unset).
OPERATOR_RELABELINGS = [
    {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
    {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
    {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
    {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
    {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job"},
    {"source_labels": ["__meta_kubernetes_endpoint_port_name"], "target_label": "endpoint"},
]
# ServiceMonitor RelabelConfig fields → Prometheus relabel_config fields.
RELABEL_FIELDS = {
    "sourceLabels": "source_labels", "separator": "separator", "targetLabel": "target_label",
    "regex": "regex", "modulus": "modulus", "replacement": "replacement", "action": "action",
}


def relabeling(r):
    out = {}
    for k, v in r.items():
        if k not in RELABEL_FIELDS:
            raise ValueError(f"relabeling field {k} is not translated here")
        out[RELABEL_FIELDS[k]] = v.lower() if k == "action" else v
    return out


def config(objects, secrets, ports):
    install = Install(objects)
    jobs, used, notes = [], set(), []
    for sm in install.of("ServiceMonitor"):
        ns, sm_name = sm["metadata"]["namespace"], sm["metadata"]["name"]
        match = sm["spec"]["selector"].get("matchLabels", {})
        services = [s for s in install.of("Service", ns)
                    if all(s["metadata"].get("labels", {}).get(k) == v for k, v in match.items())]
        if not services:
            notes.append(f"ServiceMonitor {ns}/{sm_name}: selects no Service (its component is not in the overlay)")
            continue
        for i, ep in enumerate(sm["spec"]["endpoints"]):
            targets = []
            for svc in services:
                port = next(q for q in svc["spec"]["ports"] if q.get("name") == ep["port"])
                pods = install.selected(svc["spec"]["selector"], ns)
                for w in pods:
                    for number in resolve_port(port.get("targetPort", port["port"]), [w]):
                        if number not in ports:
                            notes.append(f"ServiceMonitor {ns}/{sm_name}: {svc['metadata']['name']}'s pods "
                                         f"on {number}: not run here")
                            continue
                        used.add(number)
                        container = next(c["name"] for c in w["spec"]["template"]["spec"]["containers"]
                                         if any(p["containerPort"] == number for p in c.get("ports", [])))
                        targets.append({
                            "targets": [f"127.0.0.1:{ports[number]}"],
                            "labels": {
                                "__meta_kubernetes_namespace": ns,
                                "__meta_kubernetes_service_name": svc["metadata"]["name"],
                                "__meta_kubernetes_pod_name": f"{w['metadata']['name']}-0",
                                "__meta_kubernetes_pod_container_name": container,
                                "__meta_kubernetes_pod_node_name": socket.gethostname(),
                                "__meta_kubernetes_endpoint_port_name": ep["port"],
                            },
                        })
            if not targets:
                continue
            job = {
                "job_name": f"serviceMonitor/{ns}/{sm_name}/{i}",
                "metrics_path": ep.get("path", "/metrics"),
                "scheme": ep.get("scheme", "http"),
                "static_configs": targets,
                "relabel_configs": OPERATOR_RELABELINGS + [relabeling(r) for r in ep.get("relabelings", [])],
            }
            auth = ep.get("authorization")
            if auth:
                secret = auth["credentials"]["name"]
                if secret not in secrets:
                    raise ValueError(f"ServiceMonitor {ns}/{sm_name} wants the Secret {secret}: give SECRET=FILE")
                job["authorization"] = {"type": auth.get("type", "Bearer"), "credentials_file": secrets[secret]}
            jobs.append(job)
    unused = set(ports) - used
    if unused:
        raise ValueError(f"no ServiceMonitor scrapes container port(s) {sorted(unused)}")
    return {
        "global": {"scrape_interval": "2s", "scrape_timeout": "2s", "evaluation_interval": "2s"},
        "scrape_configs": jobs,
    }, notes


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    secrets, ports = {}, {}
    for arg in argv[1:]:
        k, _, v = arg.partition("=")
        if k.isdigit():
            ports[int(k)] = int(v)
        else:
            secrets[k] = v
    try:
        cfg, notes = config(kustomize.load(argv[0]), secrets, ports)
    except (ValueError, StopIteration) as e:
        print(f"scrape_config: {e}", file=sys.stderr)
        return 1
    for n in notes:
        print(f"scrape_config: {n}", file=sys.stderr)
    json.dump(cfg, sys.stdout, indent=1)  # JSON is YAML
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
