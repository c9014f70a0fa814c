#!/usr/bin/env python3
"""Walks the install paths of deploy/kubernetes/README.md, step by step, against the objects
each step makes, as the API server and the controllers would meet them:

    install_steps.py [README]

The README's "Install" section holds the paths: each ```sh block whose comments number its
steps (`# 1. ...`) is one path, a block opening with `# After any install` continues every
path before it, and a sentence "step N applies `overlays/X`" makes another path of the block
above with X applied at step N. The "Uninstall" block closes every path.

Each command is modelled by what it makes and what it needs (a command the walker does not
know fails the walk, so the README cannot grow a step nobody checked):
  kubectl create namespace NS / kubectl -n NS create secret ... NAME
  kubectl apply -k DIR        the rendered objects; a Certificate also makes its Secret
  kubectl apply -f FILE       the file's objects
  kubectl wait ... crd/NAME   needs the CRD from an earlier step
  kubectl label node ...      nothing
  mint-tokens.sh              needs the server Deployment up, so every Secret its pods use
                              made before; makes the Secrets it mints
  make-tls-secret.sh          needs the webhook made before; makes wattledger-webhook-tls
  kubectl delete -k DIR / -f FILE   removes those objects, a Namespace everything in it, a
                              CRD its objects; an object already gone fails (kubectl says
                              NotFound)

What must hold: a namespaced object's namespace exists (or comes in the same apply, which
kubectl sends first); an object of a custom kind has its CRD from an earlier step, or from a
project the path needs (the Prometheus operator, cert-manager, Kueue); a step that waits on a
workload finds every Secret and ConfigMap of its pods made before it; by the end of the path
every Secret any pod uses has been made; after the uninstall nothing is left; steps are
numbered 1, 2, ... in order; every overlay is installed by some path. And the image step: the
README builds IMAGE with podman, buildah and Docker from deploy/container/Containerfile, pushes
it, and its `images:` edit, made to every overlay a path applies and to kueue, puts IMAGE in
every container of ours.
"""

import pathlib
import re
import shlex
import sys

import yaml

import kustomize
import references

README = kustomize.KUBERNETES / "README.md"
BUILTIN_GROUPS = {
    "", "apps", "batch", "policy", "networking.k8s.io", "rbac.authorization.k8s.io",
    "admissionregistration.k8s.io", "scheduling.k8s.io", "apiextensions.k8s.io",
    "node.k8s.io", "storage.k8s.io", "autoscaling", "coordination.k8s.io",
}
# The projects an install path needs installed first, by the API groups their CRDs serve.
PREREQUISITES = {
    "monitoring.coreos.com": "the Prometheus operator",
    "cert-manager.io": "cert-manager",
    "kueue.x-k8s.io": "Kueue",
}
# Namespaces a path needs from those projects (the dcgm-exporter's Service goes into the GPU
# operator's).
PREREQUISITE_NAMESPACES = {"gpu-operator": "the NVIDIA GPU operator"}
WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet"}
SCRIPTS = {
    "deploy/kubernetes/mint-tokens.sh": "mint",
    "deploy/kubernetes/components/webhook/make-tls-secret.sh": "tls",
}
BUILDERS = {"podman", "buildah", "docker"}


class WalkError(Exception):
    pass


def group(obj):
    api = obj["apiVersion"]
    return api.rpartition("/")[0] if "/" in api else ""


def key(obj):
    m = obj["metadata"]
    return (obj["kind"], m.get("namespace"), m["name"])


def pod_refs(w):
    """The Secrets and ConfigMaps a workload's pods cannot start without."""
    spec = w["spec"]["template"]["spec"]
    refs = set()
    for v in spec.get("volumes", []):
        if "secret" in v and not v["secret"].get("optional"):
            refs.add(("Secret", v["secret"]["secretName"]))
        if "configMap" in v and not v["configMap"].get("optional"):
            refs.add(("ConfigMap", v["configMap"]["name"]))
    for c in spec.get("initContainers", []) + spec.get("containers", []):
        for e in c.get("envFrom", []):
            for kind, field in (("Secret", "secretRef"), ("ConfigMap", "configMapRef")):
                if field in e and not e[field].get("optional"):
                    refs.add((kind, e[field]["name"]))
        for e in c.get("env", []):
            for kind, field in (("Secret", "secretKeyRef"), ("ConfigMap", "configMapKeyRef")):
                ref = e.get("valueFrom", {}).get(field)
                if ref and not ref.get("optional"):
                    refs.add((kind, ref["name"]))
    return refs


class Cluster:
    """What the steps have made so far."""

    def __init__(self, path_name):
        self.path = path_name
        self.objects = {}
        self.crds = set()  # group/kind made by a CRD
        self.needed = []  # (step, workload, kind, name): pods waiting on a name

    def has(self, kind, namespace, name):
        return (kind, namespace, name) in self.objects

    def make(self, obj, step):
        self.objects[key(obj)] = obj
        if obj["kind"] == "CustomResourceDefinition":
            spec = obj["spec"]
            self.crds.add((spec["group"], spec["names"]["kind"]))
        if obj["kind"] == "Certificate":  # cert-manager writes its Secret
            m = obj["metadata"]
            self.objects[("Secret", m["namespace"], obj["spec"]["secretName"])] = {"made by": name_of(obj)}

    def fail(self, step, why):
        raise WalkError(f"{self.path}, step {step}: {why}")

    def apply(self, step, objects, what):
        same = {key(o) for o in objects}
        for o in objects:
            ns = o["metadata"].get("namespace")
            if ns and not self.has("Namespace", None, ns) and ("Namespace", None, ns) not in same \
                    and ns not in PREREQUISITE_NAMESPACES:
                self.fail(step, f"{what}: {name_of(o)} goes into namespace {ns}, which no step has made")
            g = group(o)
            if g not in BUILTIN_GROUPS and g not in PREREQUISITES and (g, o["kind"]) not in self.crds:
                made_here = any(c["kind"] == "CustomResourceDefinition" and c["spec"]["group"] == g
                                for c in objects)
                why = ("its CRD is in the same apply: kubectl cannot map a kind its API server does not "
                       "serve yet (apply the CRD first, and wait for it)") if made_here else "no step made its CRD"
                self.fail(step, f"{what}: {name_of(o)} is of kind {g}/{o['kind']}: {why}")
        for o in objects:
            self.make(o, step)
        for o in objects:
            if o["kind"] in WORKLOAD_KINDS:
                ns = o["metadata"]["namespace"]
                for kind, name in pod_refs(o):
                    self.needed.append((step, o, kind, ns, name))

    def waits_for(self, step, kind, namespace, name, why):
        w = self.objects.get((kind, namespace, name))
        if w is None:
            self.fail(step, f"{why} waits for {kind} {namespace}/{name}, which no earlier step made")
        for ref_kind, ref_name in sorted(pod_refs(w)):
            if not self.has(ref_kind, namespace, ref_name):
                self.fail(step, f"{why} waits for {kind} {namespace}/{name}, whose pods wait for "
                                f"{ref_kind} {ref_name}, which no earlier step made")

    def delete(self, step, objects, what):
        for o in objects:
            if key(o) not in self.objects:
                self.fail(step, f"{what}: {name_of(o)} is already gone (kubectl delete says NotFound and "
                                "stops with an error): delete in the other order")
        for o in objects:
            self.objects.pop(key(o), None)
            if o["kind"] == "Namespace":
                ns = o["metadata"]["name"]
                for k in [k for k in self.objects if k[1] == ns]:
                    del self.objects[k]
            if o["kind"] == "CustomResourceDefinition":
                g, kind = o["spec"]["group"], o["spec"]["names"]["kind"]
                self.crds.discard((g, kind))
                for k in [k for k, v in self.objects.items()
                          if k[0] == kind and isinstance(v, dict) and v.get("apiVersion", "").startswith(g + "/")]:
                    del self.objects[k]

    def finish(self):
        for step, w, kind, ns, name in self.needed:
            if not self.has(kind, ns, name):
                raise WalkError(f"{self.path}: {name_of(w)} (step {step}) waits for {kind} {ns}/{name}, "
                                "which no step makes")


def name_of(o):
    if "made by" in o:
        return o["made by"]
    m = o["metadata"]
    return f'{o["kind"]}/{m.get("namespace") + "/" if m.get("namespace") else ""}{m["name"]}'


def script_secrets(script):
    text = (kustomize.REPO / script).read_text()
    if SCRIPTS[script] == "mint":
        return re.findall(r"^mint (\S+) ", text, re.M)
    return re.findall(r"create secret tls (\S+) ", text)


def commands(block):
    """(step number, argv) for each command of a sh block, `&&` chains split."""
    step, out = 0, []
    lines = block.splitlines()
    text = []
    for line in lines:
        m = re.match(r"#\s*(\d+)\.\s", line)
        if m:
            number = int(m.group(1))
            if number != step + 1:
                raise WalkError(f"steps are numbered {step} then {number}: {line}")
            step = number
            continue
        if line.strip().startswith("#") or not line.strip():
            continue
        text.append((step, line))
    for s, line in text:
        for part in re.split(r"\s&&\s", line):
            argv = shlex.split(part)
            env = {}
            while argv and re.match(r"^[A-Z_]+=", argv[0]):
                k, _, v = argv.pop(0).partition("=")
                env[k] = v
            out.append((s, env, argv))
    return out


def run(cluster, step, env, argv, overlay_for):
    line = " ".join(argv)
    if not argv:
        return
    if argv[0] == "kubectl":
        args = argv[1:]
        namespace = None
        if args[:1] == ["-n"]:
            namespace, args = args[1], args[2:]
        if args[:2] == ["create", "namespace"]:
            cluster.make({"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": args[2]}}, step)
            return
        if args[:2] == ["create", "secret"] and namespace:
            cluster.make({"kind": "Secret", "apiVersion": "v1",
                          "metadata": {"name": args[3], "namespace": namespace}}, step)
            return
        if args[0] in ("apply", "delete") and len(args) >= 3 and args[1] in ("-k", "-f"):
            target = kustomize.REPO / overlay_for(args[2])
            line = " ".join(argv[:-1] + [overlay_for(args[2])])
            objects = kustomize.render(target) if args[1] == "-k" else kustomize.load(target)
            if args[0] == "apply":
                cluster.apply(step, objects, line)
            else:
                cluster.delete(step, objects, line)
            return
        if args[0] == "wait":
            crds = [a.split("/", 1)[1] for a in args if a.startswith("crd/")]
            for name in crds:
                if not cluster.has("CustomResourceDefinition", None, name):
                    cluster.fail(step, f"{line}: no earlier step made CRD {name}")
            if crds:
                return
        if args[:2] == ["label", "node"]:
            return
    script = argv[0]
    if script in SCRIPTS:
        namespace = env.get("NAMESPACE", "wattledger")
        if SCRIPTS[script] == "mint":
            cluster.waits_for(step, "Deployment", namespace, "wattledger", script)
        else:
            if not cluster.has("MutatingWebhookConfiguration", None, "wattledger-gpu-admission"):
                cluster.fail(step, f"{script} patches MutatingWebhookConfiguration wattledger-gpu-admission, "
                                   "which no earlier step made")
        for s in script_secrets(script):
            cluster.make({"kind": "Secret", "apiVersion": "v1",
                          "metadata": {"name": s, "namespace": namespace}}, step)
        return
    cluster.fail(step, f"the walker does not know what `{line}` makes or needs: teach it")


def sections(readme):
    """The text of `## Install` up to the next `## ` heading."""
    m = re.search(r"^## Install\n(.*?)(?=^## )", readme, re.M | re.S)
    if not m:
        raise WalkError("README: no `## Install` section")
    return m.group(1)


def sh_blocks(text):
    return [(m.start(), m.group(1)) for m in re.finditer(r"```sh\n(.*?)```", text, re.S)]


def image_step(install):
    """IMAGE from the README's image block, after checking the block builds and pushes it with
    each builder from the Containerfile, and that the `images:` edit shown names it."""
    block = next((b for _, b in sh_blocks(install) if re.search(r"^IMAGE=", b, re.M)), None)
    if block is None:
        raise WalkError("README: no block sets IMAGE= and builds it")
    image = re.search(r"^IMAGE=(\S+)", block, re.M).group(1)
    built, pushed = set(), set()
    for _, env, argv in commands(block):
        if not argv:
            continue
        tool = argv[0]
        if tool in BUILDERS and argv[1] == "build":
            if "deploy/container/Containerfile" not in argv or "$IMAGE" not in argv or argv[-1] != ".":
                raise WalkError(f"README: `{' '.join(argv)}` does not build deploy/container/Containerfile "
                                "from the repository root as $IMAGE")
            built.add(tool)
        elif tool in BUILDERS and argv[1:] == ["push", "$IMAGE"]:
            pushed.add(tool)
    if built != BUILDERS or pushed != BUILDERS:
        raise WalkError(f"README: the image is built with {sorted(built)} and pushed with {sorted(pushed)}, "
                        f"not each of {sorted(BUILDERS)}")
    edits = [yaml.safe_load(m.group(1)) for m in re.finditer(r"```yaml\n(images:.*?)```", install, re.S)]
    entries = [e for d in edits for e in d["images"] if e.get("name") == kustomize.IMAGE_NAME]
    if not entries or any(f'{e["newName"]}:{e["newTag"]}' != image for e in entries):
        raise WalkError(f"README: the `images:` edit shown does not name {image}")
    return image


def paths(install):
    """Each path: (name, [(step, env, argv)], overlay substitution)."""
    blocks = sh_blocks(install)
    found, continuations = [], []
    for start, block in blocks:
        first = block.lstrip().splitlines()[0] if block.strip() else ""
        if first.startswith("# After any install"):
            continuations.append(commands(block))
        elif re.search(r"^#\s*1\.\s", block, re.M):
            found.append((start, block))
    result = []
    for start, block in found:
        cmds = commands(block)
        applies = [a[3] for _, _, a in cmds if a[:3] == ["kubectl", "apply", "-k"] and "/overlays/" in a[3]]
        if len(applies) != 1:
            raise WalkError(f"README: a path applies {len(applies)} overlays: {block.splitlines()[0]}")
        overlay = applies[0]
        result.append((overlay, cmds, {}))
        # "step N applies `overlays/X`" after the block, before the next heading.
        after = install[start:]
        after = after[after.index("```", 6) + 3:]
        after = after[: after.find("\n### ") if "\n### " in after else len(after)]
        for m in re.finditer(r"step (\d+) applies `(overlays/[\w-]+)`", after):
            result.append((f"deploy/kubernetes/{m.group(2)}", cmds, {overlay: f"deploy/kubernetes/{m.group(2)}"}))
    return result, continuations


def uninstall_block(readme):
    m = re.search(r"^### Uninstall\n.*?```sh\n(.*?)```", readme, re.M | re.S)
    if not m:
        raise WalkError("README: no Uninstall block")
    return [(0, env, argv) for _, env, argv in commands(m.group(1))]


def walk(readme_path):
    readme = pathlib.Path(readme_path).read_text()
    install = sections(readme)
    image = image_step(install)
    found, continuations = paths(install)
    uninstall = uninstall_block(readme)
    walked = set()
    for overlay, cmds, subst in found:
        name = overlay.rpartition("/")[2]
        cluster = Cluster(name)
        mapped = lambda target: subst.get(target, target)
        for step, env, argv in cmds:
            run(cluster, step, env, argv, mapped)
        for more in continuations:
            for step, env, argv in more:
                run(cluster, f"after {name}, {step}", env, argv, mapped)
        cluster.finish()
        # The uninstall block names the production overlay: the one this path applied instead.
        default = "deploy/kubernetes/overlays/production"
        for _, env, argv in uninstall:
            run(cluster, "uninstall", env, argv, lambda t: overlay if t == default else t)
        left = sorted(name_of(o) for o in cluster.objects.values())
        if left:
            raise WalkError(f"{name}: the uninstall leaves {', '.join(left)}")
        walked.add(name)
        print(f"   {name}: {len(cmds)} commands, then {sum(map(len, continuations))} (Kueue) and the "
              f"uninstall: each name made before a step needs it, nothing left after")
    missing = {p.name for p in kustomize.OVERLAYS} - walked
    if missing:
        raise WalkError(f"README: no path installs {', '.join(sorted(missing))}")
    # The image edit, made where README.md says: in each overlay a path applies, and in kueue.
    out = kustomize.REPO / "target" / "deploy" / "install-image"
    kueue = kustomize.render(kustomize.with_settings(kustomize.KUEUE, out / "kueue", image=image))
    for name in sorted(walked):
        objects = kustomize.render(kustomize.with_settings(
            kustomize.KUBERNETES / "overlays" / name, out / name, image=image)) + kueue
        wrong = [p for p in references.check(objects, "wattledger", "-", image=image) if "image" in p]
        if wrong:
            raise WalkError(f"{name} with the README's images: edit: " + "; ".join(wrong))
    print(f"   the image step: {image} built with {', '.join(sorted(BUILDERS))}, and every container of "
          f"ours runs it after the README's images: edit")


def main(argv):
    try:
        walk(argv[0] if argv else README)
    except WalkError as e:
        print(f"install_steps: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
