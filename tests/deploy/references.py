#!/usr/bin/env python3
"""Every name one rendered object gives another must lead to an object that is there, in the
right namespace, on the right port: what the API server, the kubelet, kube-proxy, the
Prometheus operator and cert-manager would look up when the manifests are applied.

    references.py check NAMESPACE RELEASE FILE...
        FILE... are one install's rendered streams (an overlay, with the Kueue controller);
        NAMESPACE is its `namespace:`, RELEASE the `release` label Prometheus selects by
        (`-` where the install has no monitoring).
    references.py settings OUT_DIR
        renders every overlay (with ../kueue) in another namespace, for another Prometheus
        release and from another registry, as README.md says to set each, plus the optional
        components (token-authenticated and fail-closed webhook, the nvidia RuntimeClass), and
        runs `check` on each, with the image checked too; the optional render is left in
        OUT_DIR/production-optional.yaml for the agent's --check-config.

What `check` holds (each rule names what it would catch):
  - every namespaced object is in NAMESPACE, but for a Service whose annotation
    wattledger.io/namespace says where its pods are (the dcgm-exporter's);
  - a pod's ServiceAccount, ConfigMaps, Secrets and PriorityClass exist (Secrets: rendered,
    made by a Certificate, or one of the Secrets README.md's steps make); no runtimeClassName
    unless allowed (a missing RuntimeClass makes the API server refuse every pod);
  - a Service selects pods and each targetPort is one of their ports; a PodDisruptionBudget
    and a NetworkPolicy select pods; a NetworkPolicy that isolates pods lets in every port a
    Service sends them;
  - a ServiceMonitor selects a Service on a port it has, with a known token Secret, and every
    metrics port of ours has a ServiceMonitor; ServiceMonitors and PrometheusRules carry
    `release: RELEASE`;
  - the webhook calls a Service of the install on a port that reaches a container port a
    managed control plane can reach (443 or 10250), on the admission path, from a server whose
    TLS listener is that port and whose WATTLEDGER_WEBHOOK_AUTH says how the API server gets
    in; it never sends kube-system's pods or NAMESPACE's; with cert-manager, the Certificate
    names that Service in NAMESPACE, its Secret is what the server mounts, and inject-ca-from
    names it;
  - the agent's server URL and its dcgm-exporter URL, and the Kueue controller's --server,
    name Services that exist, on their ports; the exporter's URL names the exporter's
    namespace; an agent reading its kubelet's /pods has the node's address from the downward
    API, the token and CA it names mounted, and a ClusterRole the kubelet accepts for it;
  - a (Cluster)RoleBinding's ServiceAccount is in the namespace it is bound in;
  - every container image names a registry and a tag (and is IMAGE, with `settings`).
"""

import sys
import tomllib
import urllib.parse

import kustomize

WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet"}
CLUSTER_SCOPED = {
    "Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
    "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "PriorityClass",
    "RuntimeClass", "AdmissionCheck", "AdmissionCheckParameters", "ClusterIssuer",
}
# Made by README.md's install steps, not rendered (tests/deploy/install_steps.py walks the
# steps and checks each is made before what waits for it).
STEP_SECRETS = {
    "wattledger-database", "wattledger-signing-key", "wattledger-agent-token",
    "wattledger-metrics-token", "wattledger-kueue-token", "wattledger-webhook-tls",
}
# The ports GKE's private clusters open from the control plane to nodes and pods by default
# (and EKS's recommended node security group): a webhook's pod must listen on one.
CONTROL_PLANE_PORTS = {443, 10250}
ADMISSION_PATH = "/v1/admission/kubernetes"
WEBHOOK_AUTH = {"open", "token"}
HOME_NAMESPACE = "wattledger.io/namespace"
OUR_IMAGES = ("wattledger", "wattledger-agent", "wattledger-kueue")


class Install:
    def __init__(self, objects):
        self.objects = objects

    def of(self, kind, namespace=None):
        return [o for o in self.objects if o["kind"] == kind
                and (namespace is None or o["metadata"].get("namespace") == namespace)]

    def get(self, kind, name, namespace=None):
        for o in self.of(kind, namespace):
            if o["metadata"]["name"] == name:
                return o
        return None

    def workloads(self, namespace=None):
        return [o for k in WORKLOADS for o in self.of(k, namespace)]

    def selected(self, selector, namespace):
        """Workloads in `namespace` whose pods carry every label of `selector`."""
        match = selector.get("matchLabels", selector) if selector else {}
        return [w for w in self.workloads(namespace)
                if match and all(pod_labels(w).get(k) == v for k, v in match.items())]


def name(o):
    ns = o["metadata"].get("namespace")
    return f'{o["kind"]}/{ns + "/" if ns else ""}{o["metadata"]["name"]}'


def pod_spec(w):
    return w["spec"]["template"]["spec"]


def pod_labels(w):
    return w["spec"]["template"]["metadata"].get("labels", {})


def containers(w):
    s = pod_spec(w)
    return s.get("initContainers", []) + s.get("containers", [])


def container_ports(w):
    return {(p.get("name"), p["containerPort"]) for c in containers(w) for p in c.get("ports", [])}


def resolve_port(target, workloads):
    """The container port numbers a Service's targetPort (name or number) reaches."""
    found = set()
    for w in workloads:
        for pname, number in container_ports(w):
            if target in (pname, number):
                found.add(number)
    return found


def env(container):
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def service_url(url, namespace, install, problems, who):
    """The Service a URL's host names (a short name in the caller's namespace, or
    <service>.<namespace>.svc[.cluster.local]) must exist with the URL's port."""
    u = urllib.parse.urlsplit(url)
    parts = u.hostname.split(".")
    if len(parts) == 1:
        svc_name, svc_ns = parts[0], namespace
    elif len(parts) >= 3 and parts[2] == "svc":
        svc_name, svc_ns = parts[0], parts[1]
    else:
        problems.append(f"{who}: {url} is not a Service of the cluster")
        return None
    svc = install.get("Service", svc_name, svc_ns)
    if svc is None:
        problems.append(f"{who}: {url} names Service {svc_ns}/{svc_name}, which is not there")
        return None
    port = u.port or (443 if u.scheme == "https" else 80)
    if port not in {p["port"] for p in svc["spec"]["ports"]}:
        problems.append(f"{who}: {url}: Service {svc_ns}/{svc_name} has no port {port}")
    return svc


def check(objects, namespace, release, image=None, allow_runtime_class=False):
    install = Install(objects)
    p = []

    # Namespaces.
    for o in objects:
        meta = o["metadata"]
        if o["kind"] == "Namespace":
            if meta["name"] != namespace:
                p.append(f"{name(o)}: the install's namespace is {namespace}")
            continue
        if o["kind"] in CLUSTER_SCOPED:
            continue
        home = meta.get("annotations", {}).get(HOME_NAMESPACE, namespace)
        if meta.get("namespace") != home:
            p.append(f"{name(o)}: should be in namespace {home}")

    # What pods need.
    certificate_secrets = {(c["metadata"]["namespace"], c["spec"]["secretName"])
                           for c in install.of("Certificate")}
    for w in install.workloads():
        ns, spec, who = w["metadata"]["namespace"], pod_spec(w), name(w)
        sa = spec.get("serviceAccountName", "default")
        if sa != "default" and install.get("ServiceAccount", sa, ns) is None:
            p.append(f"{who}: ServiceAccount {sa} is not in {ns}")
        pc = spec.get("priorityClassName")
        if pc and not pc.startswith("system-") and install.get("PriorityClass", pc) is None:
            p.append(f"{who}: PriorityClass {pc} is not there")
        if "runtimeClassName" in spec and not allow_runtime_class:
            p.append(f"{who}: runtimeClassName {spec['runtimeClassName']}: the API server refuses "
                     "every pod where that RuntimeClass is missing; make it optional (a component)")
        configmaps, secrets = set(), set()
        for v in spec.get("volumes", []):
            if "configMap" in v:
                configmaps.add(v["configMap"]["name"])
            if "secret" in v:
                secrets.add(v["secret"]["secretName"])
        for c in containers(w):
            for e in c.get("envFrom", []):
                if "configMapRef" in e:
                    configmaps.add(e["configMapRef"]["name"])
                if "secretRef" in e:
                    secrets.add(e["secretRef"]["name"])
            for e in c.get("env", []):
                ref = e.get("valueFrom", {})
                if "configMapKeyRef" in ref:
                    configmaps.add(ref["configMapKeyRef"]["name"])
                if "secretKeyRef" in ref:
                    secrets.add(ref["secretKeyRef"]["name"])
        for cm in sorted(configmaps):
            if install.get("ConfigMap", cm, ns) is None:
                p.append(f"{who}: ConfigMap {cm} is not in {ns}")
        for s in sorted(secrets):
            if (install.get("Secret", s, ns) is None and (ns, s) not in certificate_secrets
                    and s not in STEP_SECRETS):
                p.append(f"{who}: Secret {s} is neither rendered, nor a Certificate's, nor made by a step")
        for c in containers(w):
            img = c["image"]
            repo, _, tag = img.rpartition(":")
            if "." not in img.split("/")[0] or "/" not in img or not tag or "/" in tag:
                p.append(f"{who}: image {img} names no registry or no tag")
            ours = any(str(x).endswith(b) for x in c.get("command", []) for b in OUR_IMAGES) \
                or repo.endswith("/wattledger")
            if image and ours and img != image:
                p.append(f"{who}: container {c['name']} runs {img}, not the overlay's image {image}")

    # Services, disruption budgets, network policies.
    for svc in install.of("Service"):
        ns = svc["metadata"]["namespace"]
        if HOME_NAMESPACE in svc["metadata"].get("annotations", {}):
            continue  # its pods are another project's (the dcgm-exporter)
        pods = install.selected(svc["spec"].get("selector", {}), ns)
        if not pods:
            p.append(f"{name(svc)}: its selector selects no pods")
        for port in svc["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            if pods and not resolve_port(target, pods):
                p.append(f"{name(svc)}: port {port['port']} targets {target}, which its pods do not have")
    for pdb in install.of("PodDisruptionBudget"):
        if not install.selected(pdb["spec"]["selector"], pdb["metadata"]["namespace"]):
            p.append(f"{name(pdb)}: selects no pods")
    policies = install.of("NetworkPolicy")
    for np in policies:
        if not install.selected(np["spec"]["podSelector"], np["metadata"]["namespace"]):
            p.append(f"{name(np)}: selects no pods")
    for svc in install.of("Service"):
        ns = svc["metadata"]["namespace"]
        pods = install.selected(svc["spec"].get("selector", {}), ns)
        isolating = [np for np in policies if "Ingress" in np["spec"].get("policyTypes", ["Ingress"])
                     and set(map(id, install.selected(np["spec"]["podSelector"], ns))) & set(map(id, pods))]
        if not isolating:
            continue
        for port in svc["spec"]["ports"]:
            numbers = resolve_port(port.get("targetPort", port["port"]), pods)
            allowed = any(
                not rule.get("ports") or any(
                    q.get("port") is None or q["port"] in numbers or resolve_port(q["port"], pods) & numbers
                    for q in rule["ports"])
                for np in isolating for rule in np["spec"].get("ingress", []))
            if not allowed:
                p.append(f"{name(svc)}: port {port['port']} (pods' {sorted(numbers)}) is let in by no "
                         f"NetworkPolicy of {', '.join(name(n) for n in isolating)}")

    # Monitoring.
    monitors = install.of("ServiceMonitor")
    scraped = set()
    for sm in monitors:
        ns = sm["metadata"]["namespace"]
        if release != "-" and sm["metadata"].get("labels", {}).get("release") != release:
            p.append(f"{name(sm)}: label release is not {release}: Prometheus would not select it")
        match = sm["spec"]["selector"].get("matchLabels", {})
        services = [s for s in install.of("Service", ns)
                    if all(s["metadata"].get("labels", {}).get(k) == v for k, v in match.items())]
        if not services:
            p.append(f"{name(sm)}: selects no Service in {ns}")
        for ep in sm["spec"]["endpoints"]:
            for s in services:
                ports = {q.get("name"): q for q in s["spec"]["ports"]}
                if ep.get("port") not in ports:
                    p.append(f"{name(sm)}: {name(s)} has no port named {ep.get('port')}")
                else:
                    scraped.add((name(s), ep["port"]))
            cred = ep.get("authorization", {}).get("credentials")
            if cred and cred["name"] not in STEP_SECRETS and install.get("Secret", cred["name"], ns) is None:
                p.append(f"{name(sm)}: token Secret {cred['name']} is made by nothing")
    for pr in install.of("PrometheusRule"):
        if release != "-" and pr["metadata"].get("labels", {}).get("release") != release:
            p.append(f"{name(pr)}: label release is not {release}: Prometheus would not select it")
    if monitors:
        for s in install.of("Service"):
            if HOME_NAMESPACE in s["metadata"].get("annotations", {}):
                continue
            for q in s["spec"]["ports"]:
                if q.get("name") == "metrics" and (name(s), "metrics") not in scraped:
                    p.append(f"{name(s)}: its metrics port has no ServiceMonitor")

    # The admission webhook.
    for cfg in install.of("MutatingWebhookConfiguration") + install.of("ValidatingWebhookConfiguration"):
        for hook in cfg["webhooks"]:
            p += webhook_problems(install, cfg, hook, namespace)

    # URLs in configuration.
    for w in install.workloads():
        ns = w["metadata"]["namespace"]
        for c in containers(w):
            for arg in c.get("args", []):
                if str(arg).startswith("--server="):
                    service_url(arg.split("=", 1)[1], ns, install, p, f"{name(w)} {c['name']}")
        for v in pod_spec(w).get("volumes", []):
            cm = install.get("ConfigMap", v.get("configMap", {}).get("name"), ns) if "configMap" in v else None
            if cm is None or "agent.toml" not in cm.get("data", {}):
                continue
            toml = tomllib.loads(cm["data"]["agent.toml"])
            who = f"{name(cm)} agent.toml"
            service_url(toml["agent"]["server"], ns, install, p, f"{who} agent.server")
            for d in toml.get("dcgm", []):
                svc = service_url(d["url"], ns, install, p, f"{who} [[dcgm]] url")
                if svc is not None and HOME_NAMESPACE not in svc["metadata"].get("annotations", {}):
                    p.append(f"{who}: the exporter's Service {name(svc)} does not say where its pods are")
            for r in toml.get("podresources", []):
                if "kubelet" in r:
                    p += kubelet_problems(install, w, r["kubelet"], f"{who} [podresources.kubelet]")

    # Bindings.
    for b in install.of("ClusterRoleBinding") + install.of("RoleBinding"):
        for s in b.get("subjects", []):
            if s["kind"] != "ServiceAccount":
                continue
            sa = [o for o in install.of("ServiceAccount") if o["metadata"]["name"] == s["name"]]
            if sa and s.get("namespace") not in {o["metadata"]["namespace"] for o in sa}:
                p.append(f"{name(b)}: binds ServiceAccount {s.get('namespace')}/{s['name']}, which is in "
                         f"{', '.join(sorted(o['metadata']['namespace'] for o in sa))}")
    return p


# Where Kubernetes mounts a pod's service-account token when it automounts one.
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount/"
# The kubelet's names for `GET /pods`: nodes/pods with fine-grained authorization (1.33+),
# nodes/proxy before.
KUBELET_PODS = {"nodes/pods", "nodes/proxy"}


def kubelet_problems(install, w, kubelet, who):
    """An agent asking its kubelet for `/pods` needs the node's address in its environment,
    the token and CA it names mounted, and its ServiceAccount bound to a ClusterRole the kubelet
    accepts for `GET /pods`."""
    p = []
    spec, ns = pod_spec(w), w["metadata"]["namespace"]
    url = kubelet.get("url", "https://127.0.0.1:10250/pods")
    agent = next(c for c in spec["containers"] if c["name"] == "agent")
    from_field = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
                  for e in agent.get("env", [])}
    if "{node_ip}" in url and from_field.get("WATTLEDGER_AGENT_NODE_IP") not in ("status.hostIP", "status.hostIPs[0].ip"):
        p.append(f"{who}: url {url} names {{node_ip}}, and the agent has no WATTLEDGER_AGENT_NODE_IP "
                 "from the downward API's status.hostIP")
    if "127.0.0.1" in url and not spec.get("hostNetwork"):
        p.append(f"{who}: url {url} is the pod's own loopback, not the node's (no hostNetwork)")
    if not url.startswith("https://"):
        return p
    sa_name = spec.get("serviceAccountName", "default")
    sa = install.get("ServiceAccount", sa_name, ns) or {}
    automount = spec.get("automountServiceAccountToken", sa.get("automountServiceAccountToken", True))
    for key, default in (("token_file", SA_DIR + "token"), ("ca_file", None)):
        path = kubelet.get(key, default)
        if path and path.startswith(SA_DIR) and not automount:
            p.append(f"{who}: {key} {path} is the service-account mount, and the pod mounts no token")
    roles = {b["roleRef"]["name"] for b in install.of("ClusterRoleBinding")
             if b["roleRef"]["kind"] == "ClusterRole"
             and any(s["kind"] == "ServiceAccount" and s["name"] == sa_name and s.get("namespace") == ns
                     for s in b.get("subjects", []))}
    granted = any(r.get("apiGroups") == [""] and "get" in r.get("verbs", []) and KUBELET_PODS & set(r.get("resources", []))
                  for role in roles for r in (install.get("ClusterRole", role) or {}).get("rules", []))
    if not granted:
        p.append(f"{who}: ServiceAccount {ns}/{sa_name} is bound to no ClusterRole with get on "
                 f"{' or '.join(sorted(KUBELET_PODS))}: the kubelet answers 403")
    return p


def webhook_problems(install, cfg, hook, namespace):
    p, who = [], f'{name(cfg)} {hook["name"]}'
    excluded = set()
    for expr in hook.get("namespaceSelector", {}).get("matchExpressions", []):
        if expr["key"] == "kubernetes.io/metadata.name" and expr["operator"] == "NotIn":
            excluded |= set(expr["values"])
    for ns in ("kube-system", namespace):
        if ns not in excluded:
            p.append(f"{who}: sends the pods of {ns} (the server's own pods could wait on themselves)")
    if not hook.get("matchConditions"):
        p.append(f"{who}: no matchConditions: every pod, GPU or not, waits on wattledger")
    ref = hook["clientConfig"].get("service")
    if ref is None:
        return p + [f"{who}: calls a URL, not the install's Service"]
    svc = install.get("Service", ref["name"], ref["namespace"])
    servers = []
    if svc is None or ref["namespace"] != namespace:
        p.append(f"{who}: calls Service {ref['namespace']}/{ref['name']}, not one of the install's in {namespace}")
    else:
        servers = install.selected(svc["spec"]["selector"], namespace)
        p += listener_problems(who, svc, ref, servers)
    inject = cfg["metadata"].get("annotations", {}).get("cert-manager.io/inject-ca-from")
    if not inject:
        return p
    cert_ns, _, cert_name = inject.partition("/")
    cert = install.get("Certificate", cert_name, cert_ns)
    if cert is None or cert_ns != namespace:
        return p + [f"{who}: inject-ca-from {inject} names no Certificate of the install in {namespace}"]
    want = {f"{ref['name']}.{namespace}.svc", f"{ref['name']}.{namespace}.svc.cluster.local"}
    if not want <= set(cert["spec"].get("dnsNames", [])):
        p.append(f"{name(cert)}: DNS names {cert['spec'].get('dnsNames')} lack {sorted(want)}")
    issuer = cert["spec"]["issuerRef"]
    if issuer.get("kind", "Issuer") == "Issuer" and install.get("Issuer", issuer["name"], namespace) is None:
        p.append(f"{name(cert)}: Issuer {issuer['name']} is not in {namespace}")
    mounted = {v["secret"]["secretName"] for w in servers for v in pod_spec(w).get("volumes", []) if "secret" in v}
    if servers and cert["spec"]["secretName"] not in mounted:
        p.append(f"{name(cert)}: its Secret {cert['spec']['secretName']} is not what the server mounts")
    return p


def listener_problems(who, svc, ref, servers):
    """The Service port the webhook calls must reach the server's TLS listener, on a port a
    managed control plane can reach, with the API server's way in said."""
    p = []
    port = next((q for q in svc["spec"]["ports"] if q["port"] == ref.get("port", 443)), None)
    if ref.get("path") != ADMISSION_PATH:
        p.append(f"{who}: path {ref.get('path')} is not {ADMISSION_PATH}")
    if port is None:
        return p + [f"{who}: {name(svc)} has no port {ref.get('port', 443)}"]
    numbers = resolve_port(port.get("targetPort", port["port"]), servers)
    if not numbers or not numbers <= CONTROL_PLANE_PORTS:
        p.append(f"{who}: reaches the pods on {sorted(numbers)}; a managed control plane "
                 f"reaches pods on {sorted(CONTROL_PLANE_PORTS)} only (GKE private clusters)")
    for w in servers:
        for c in pod_spec(w)["containers"]:
            e = env(c)
            if "WATTLEDGER_TLS_LISTEN" not in e:
                continue
            listen = int(e["WATTLEDGER_TLS_LISTEN"].rpartition(":")[2])
            if listen not in numbers:
                p.append(f"{who}: {name(w)} listens for TLS on {listen}, the Service sends {sorted(numbers)}")
            if e.get("WATTLEDGER_WEBHOOK_AUTH") not in WEBHOOK_AUTH:
                p.append(f"{who}: {name(w)} sets no WATTLEDGER_WEBHOOK_AUTH ({'|'.join(sorted(WEBHOOK_AUTH))}): "
                         "its default asks the API server for a token EKS, GKE and AKS cannot send")
    return p


def report(what, problems):
    for x in problems:
        print(f"{what}: {x}", file=sys.stderr)
    print(f"   {what}: {'ok' if not problems else f'{len(problems)} problems'}")
    return not problems


# The settings README.md tells a user to change, each to something else than its default.
NAMESPACE, RELEASE, IMAGE = "gpu-finops", "monitoring", "registry.example.org/platform/wattledger:1.2.3"
OPTIONAL = ["webhook-token", "webhook-fail-closed", "agent-nvidia-runtime", "agent-kubelet",
            "agent-kubelet-proxy"]


def settings(out):
    ok = True
    out = kustomize.REPO / out
    kueue = kustomize.render(kustomize.with_settings(kustomize.KUEUE, out / "kueue", namespace=NAMESPACE, image=IMAGE))
    for overlay in kustomize.OVERLAYS:
        has_monitoring = any("monitoring" in c for c in
                             kustomize.yaml.safe_load((overlay / "kustomization.yaml").read_text()).get("components", []))
        release = RELEASE if has_monitoring else None
        d = kustomize.with_settings(overlay, out / overlay.name, namespace=NAMESPACE, release=release, image=IMAGE)
        objects = kustomize.render(d) + kueue
        ok &= report(f"{overlay.name} in {NAMESPACE}{f', release {release}' if release else ''}, {IMAGE}",
                     check(objects, NAMESPACE, release or "-", image=IMAGE))
    # The optional components, on the production overlay in the other namespace too.
    extra = [kustomize.KUBERNETES / "components" / c for c in OPTIONAL]
    d = kustomize.with_settings(kustomize.KUBERNETES / "overlays" / "production", out / "production-optional",
                                namespace=NAMESPACE, release=RELEASE, image=IMAGE, components=extra)
    objects = kustomize.render(d) + kueue
    problems = check(objects, NAMESPACE, RELEASE, image=IMAGE, allow_runtime_class=True)
    server = next(w for w in Install(objects).workloads() if w["metadata"]["name"] == "wattledger")
    agent = next(w for w in Install(objects).workloads() if w["metadata"]["name"] == "wattledger-agent")
    hook = Install(objects).of("MutatingWebhookConfiguration")[0]["webhooks"][0]
    if env(server["spec"]["template"]["spec"]["containers"][0]).get("WATTLEDGER_WEBHOOK_AUTH") != "token":
        problems.append("components/webhook-token: the server does not ask for a token")
    if hook["failurePolicy"] != "Fail":
        problems.append("components/webhook-fail-closed: failurePolicy is not Fail")
    if pod_spec(agent).get("runtimeClassName") != "nvidia":
        problems.append("components/agent-nvidia-runtime: the agent has no runtimeClassName nvidia")
    toml = tomllib.loads(Install(objects).get("ConfigMap", next(
        v["configMap"]["name"] for v in pod_spec(agent)["volumes"] if "configMap" in v), NAMESPACE)["data"]["agent.toml"])
    if not any("kubelet" in r for r in toml.get("podresources", [])):
        problems.append("components/agent-kubelet: the agent's config has no [podresources.kubelet]")
    # What --check-config reads in tests/deploy/run.sh.
    (out / "production-optional.yaml").write_text(kustomize.yaml.safe_dump_all(objects))
    ok &= report(f"production + {', '.join(OPTIONAL)} in {NAMESPACE}", problems)
    return ok


def main(argv):
    if len(argv) >= 4 and argv[0] == "check":
        objects = [o for f in argv[3:] for o in kustomize.load(f)]
        return 0 if report(f"{', '.join(argv[3:])} in {argv[1]}", check(objects, argv[1], argv[2])) else 1
    if len(argv) == 2 and argv[0] == "settings":
        return 0 if settings(argv[1]) else 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
