#!/usr/bin/env python3
"""Checks on the rendered Kubernetes manifests that no schema expresses.

    manifests.py security FILE...        every container meets the restricted profile, or its
                                         pod says why not
    manifests.py namespaces FILE...      every namespaced object names its namespace (an object
                                         without one lands in kubectl's current namespace)
    manifests.py agent-configs FILE DIR  writes each agent ConfigMap's agent.toml into DIR
    manifests.py rules FILE OUT          writes each PrometheusRule's spec (a Prometheus rule
                                         file) into OUT, for promtool
    manifests.py alert-coverage RULES TESTS
                                         every alert in RULES fires in some case of TESTS
                                         (a `promtool test rules` file)

FILE is a multi-document YAML stream as `kubectl kustomize` prints it.
"""
import pathlib
import sys

import yaml

WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob", "ReplicaSet"}
# A pod departs from the restricted profile only where this annotation names the field and
# says why: "runAsNonRoot: the socket is root-owned ...".
EXCEPTIONS = "wattledger.io/security-exceptions"


def documents(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def pod_template(obj):
    spec = obj.get("spec", {})
    if obj["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    return spec["template"]


def security_problems(obj):
    """What in one workload departs from the restricted profile without a stated reason."""
    template = pod_template(obj)
    pod = template.get("spec", {})
    reasons = template.get("metadata", {}).get("annotations", {}).get(EXCEPTIONS, "")
    excused = lambda field: f"{field}:" in reasons
    name = f'{obj["kind"]}/{obj["metadata"]["name"]}'
    problems = []

    def need(ok, field, what):
        if not ok and not excused(field):
            problems.append(f"{name}: {what} (or say why in the pod annotation {EXCEPTIONS}: '{field}: ...')")

    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        need(not pod.get(flag), flag, f"{flag} is set")
    for volume in pod.get("volumes", []):
        need("hostPath" not in volume, "hostPath", f"volume {volume['name']} is a hostPath")
    pod_sc = pod.get("securityContext", {})
    containers = pod.get("initContainers", []) + pod.get("containers", [])
    if not containers:
        problems.append(f"{name}: no containers")
    for c in containers:
        sc = c.get("securityContext", {})
        effective = lambda key: sc.get(key, pod_sc.get(key))
        where = f"container {c['name']}"
        need(effective("runAsNonRoot") is True and effective("runAsUser") != 0,
             "runAsNonRoot", f"{where} may run as root")
        need(sc.get("allowPrivilegeEscalation") is False, "allowPrivilegeEscalation",
             f"{where} does not set allowPrivilegeEscalation: false")
        need(sc.get("readOnlyRootFilesystem") is True, "readOnlyRootFilesystem",
             f"{where} does not set readOnlyRootFilesystem: true")
        need(not sc.get("privileged"), "privileged", f"{where} is privileged")
        caps = sc.get("capabilities", {})
        need("ALL" in caps.get("drop", []), "capabilities", f"{where} does not drop ALL capabilities")
        need(not caps.get("add"), "capabilities", f"{where} adds capabilities {caps.get('add')}")
        seccomp = (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type")
        need(seccomp == "RuntimeDefault", "seccompProfile", f"{where} has no RuntimeDefault seccomp profile")
        resources = c.get("resources", {})
        for kind, key in (("requests", "cpu"), ("requests", "memory"), ("limits", "memory")):
            if key not in resources.get(kind, {}):
                problems.append(f"{name}: {where} has no {kind}.{key}")
    return problems


def security(paths):
    problems, checked = [], 0
    for path in paths:
        for obj in documents(path):
            if obj.get("kind") in WORKLOADS:
                checked += 1
                problems += [f"{path}: {p}" for p in security_problems(obj)]
    for p in problems:
        print(p, file=sys.stderr)
    print(f"security contexts: {checked} workloads checked, {len(problems)} problems")
    return 1 if problems or not checked else 0


# Kinds without a namespace; every other kind we ship is namespaced.
CLUSTER_SCOPED = {
    "Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
    "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "PriorityClass",
    "RuntimeClass", "StorageClass", "AdmissionCheck", "AdmissionCheckParameters",
    "ClusterQueue", "ResourceFlavor", "ClusterIssuer",
}


def namespaces(paths):
    problems, checked = [], 0
    for path in paths:
        for obj in documents(path):
            kind, meta = obj["kind"], obj["metadata"]
            checked += 1
            where = f'{path}: {kind}/{meta["name"]}'
            if kind in CLUSTER_SCOPED and "namespace" in meta:
                problems.append(f"{where} is cluster-scoped but names namespace {meta['namespace']}")
            if kind not in CLUSTER_SCOPED and not meta.get("namespace"):
                problems.append(f"{where} names no namespace")
    for p in problems:
        print(p, file=sys.stderr)
    print(f"namespaces: {checked} objects checked, {len(problems)} problems")
    return 1 if problems else 0


def agent_configs(path, out):
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = 0
    for obj in documents(path):
        if obj.get("kind") == "ConfigMap" and "agent.toml" in obj.get("data", {}):
            (out / f'{obj["metadata"]["name"]}.toml').write_text(obj["data"]["agent.toml"])
            written += 1
    print(f"{path}: {written} agent config(s)")
    return 0 if written else 1


def rules(path, out):
    groups = []
    for obj in documents(path):
        if obj.get("kind") == "PrometheusRule":
            groups += obj["spec"]["groups"]
    if not groups:
        print(f"{path}: no PrometheusRule", file=sys.stderr)
        return 1
    pathlib.Path(out).write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return 0


def alert_coverage(rules_path, tests_path):
    with open(rules_path) as f:
        alerts = {r["alert"] for g in yaml.safe_load(f)["groups"] for r in g["rules"] if "alert" in r}
    with open(tests_path) as f:
        tests = yaml.safe_load(f)["tests"]
    fired = {
        case["alertname"]
        for test in tests
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    missing = sorted(alerts - fired)
    for name in missing:
        print(f"{tests_path}: no case fires {name}", file=sys.stderr)
    print(f"alerts: {len(alerts)} defined, {len(alerts & fired)} fired by a test")
    return 1 if missing else 0


def main(argv):
    if len(argv) >= 2 and argv[0] == "security":
        return security(argv[1:])
    if len(argv) >= 2 and argv[0] == "namespaces":
        return namespaces(argv[1:])
    if len(argv) == 3 and argv[0] == "agent-configs":
        return agent_configs(argv[1], argv[2])
    if len(argv) == 3 and argv[0] == "rules":
        return rules(argv[1], argv[2])
    if len(argv) == 3 and argv[0] == "alert-coverage":
        return alert_coverage(argv[1], argv[2])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
