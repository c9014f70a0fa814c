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
    manifests.py second-apply FILE...    no rendered field is one that another writer owns
                                         (a cainjector's caBundle, a Secret a script or
                                         cert-manager makes): `kubectl apply` would reset it
                                         on every upgrade
    manifests.py json-patch FILE KIND NAME PATCH
                                         PATCH (RFC 6902, as `kubectl patch --type=json`
                                         takes it) applies to the rendered KIND/NAME: a
                                         `replace` of a member the manifest leaves out fails
                                         on the API server, and so here

FILE is a multi-document YAML stream as `kubectl kustomize` prints it.
"""
import pathlib
import re
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


# Secrets the install's scripts write (README.md's steps); a rendered one of the same name
# would be put back to its rendered value by the next apply, undoing the script.
SCRIPTS = {
    "deploy/kubernetes/mint-tokens.sh": r"^mint (\S+) ",
    "deploy/kubernetes/components/webhook/make-tls-secret.sh": r"create secret tls (\S+) ",
}


def script_secrets():
    root = pathlib.Path(__file__).resolve().parents[2]
    names = set()
    for script, pattern in SCRIPTS.items():
        found = re.findall(pattern, (root / script).read_text(), re.M)
        if not found:
            raise RuntimeError(f"{script}: no Secret found by {pattern!r}")
        names |= set(found)
    return names


def second_apply(paths):
    problems, checked = [], 0
    scripted = script_secrets()
    for path in paths:
        objects = documents(path)
        certified = {o["spec"]["secretName"] for o in objects if o["kind"] == "Certificate"}
        for obj in objects:
            checked += 1
            where = f'{path}: {obj["kind"]}/{obj["metadata"]["name"]}'
            if obj["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
                for hook in obj["webhooks"]:
                    if "caBundle" in hook.get("clientConfig", {}):
                        problems.append(f"{where}: webhook {hook['name']} sets caBundle, which cert-manager's "
                                        "cainjector or make-tls-secret.sh writes: each apply would reset it")
            if obj["kind"] == "Secret":
                name = obj["metadata"]["name"]
                if name in scripted:
                    problems.append(f"{where}: a script of the install writes this Secret; each apply would reset it")
                if name in certified:
                    problems.append(f"{where}: cert-manager writes this Secret; each apply would reset it")
    for p in problems:
        print(p, file=sys.stderr)
    print(f"second apply: {checked} objects checked, {len(problems)} fields another writer owns")
    return 1 if problems else 0


def pointer(doc, path):
    """The parent container and last token of a JSON Pointer (RFC 6901)."""
    tokens = [t.replace("~1", "/").replace("~0", "~") for t in path.split("/")[1:]]
    for t in tokens[:-1]:
        doc = doc[int(t)] if isinstance(doc, list) else doc[t]
    return doc, tokens[-1]


def json_patch(path, kind, name, patch_path):
    import json
    target = next((o for o in documents(path) if o["kind"] == kind and o["metadata"]["name"] == name), None)
    if target is None:
        print(f"{path}: no {kind}/{name}", file=sys.stderr)
        return 1
    for op in json.loads(pathlib.Path(patch_path).read_text()):
        try:
            parent, last = pointer(target, op["path"])
            if isinstance(parent, list):
                index = len(parent) if last == "-" else int(last)
                if op["op"] == "add":
                    parent.insert(index, op["value"])
                elif op["op"] == "replace":
                    parent[index] = op["value"]
                else:
                    raise ValueError(f"op {op['op']} is not checked here")
            elif op["op"] == "add":
                parent[last] = op["value"]
            elif op["op"] == "replace":
                if last not in parent:
                    raise KeyError(f"replace: {op['path']} is not there (RFC 6902 4.3)")
                parent[last] = op["value"]
            else:
                raise ValueError(f"op {op['op']} is not checked here")
        except (KeyError, IndexError, ValueError, TypeError) as e:
            print(f"{patch_path}: {op['op']} {op['path']} on {kind}/{name}: {e}", file=sys.stderr)
            return 1
    print(f"{patch_path}: applies to {kind}/{name}")
    return 0


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
    if len(argv) == 5 and argv[0] == "json-patch":
        return json_patch(*argv[1:])
    if len(argv) >= 2 and argv[0] == "second-apply":
        return second_apply(argv[1:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
