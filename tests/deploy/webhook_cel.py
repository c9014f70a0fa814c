#!/usr/bin/env python3
"""The admission webhook's matchConditions, evaluated by a CEL implementation (cel-python)
against pods, as the API server evaluates them before it calls the webhook:

    webhook_cel.py FILE...     rendered streams holding the MutatingWebhookConfiguration

Every pod that asks for a GPU the server meters (nvidia.com/gpu, nvidia.com/mig-*,
amd.com/gpu, as a limit or a request, in a container or an init container) must be sent, and
no other; no expression may fail to evaluate on any pod, because under failurePolicy Fail an
evaluation error refuses the pod.

The pods are the real ones of ../shared/fixtures/kubernetes (captured or published Pod
objects, and the pod of the captured AdmissionReview), each as it is (none asks for a GPU)
and each with a GPU request put into it as a pod's author would write one. No GPU pod was
captured there, so the GPU pods are those real pods given GPUs; the edit is `ask()` below.
"""

import copy
import json
import pathlib
import sys

import celpy
import celpy.evaluation

import kustomize

FIXTURES = kustomize.REPO.parent / "shared" / "fixtures" / "kubernetes"

# (what a pod's author writes, where) → whether the server meters it. The values are written
# as authors write them: a number, or a quantity string.
GPU_ASKS = [
    ("limits", "nvidia.com/gpu", 1, "containers"),
    ("limits", "nvidia.com/gpu", "8", "containers"),
    ("requests", "nvidia.com/gpu", 1, "containers"),
    ("limits", "nvidia.com/mig-1g.5gb", 1, "containers"),
    ("requests", "nvidia.com/mig-3g.40gb", "2", "containers"),
    ("limits", "amd.com/gpu", 1, "containers"),
    ("limits", "nvidia.com/gpu", 1, "initContainers"),
    ("requests", "nvidia.com/mig-1g.10gb", 1, "initContainers"),
    ("limits", "amd.com/gpu", 2, "initContainers"),
]
OTHER_ASKS = [
    ("limits", "memory", "1Gi", "containers"),
    ("requests", "cpu", "500m", "initContainers"),
    # Time-sliced NVIDIA GPUs renamed by the device plugin, and other vendors' devices: the
    # server does not meter them, so they must not wait on it.
    ("limits", "nvidia.com/gpu.shared", 1, "containers"),
    ("limits", "gpu.intel.com/i915", 1, "containers"),
    ("limits", "example.com/gpu", 1, "initContainers"),
]


class StrictHas(celpy.evaluation.Evaluator):
    """cel-python answers has(e.f) false when e itself is missing; cel-go, the API server's
    CEL, fails it ("no such key"), as the CEL spec says. Evaluate e first, as cel-go does, so
    an unguarded field fails here too."""

    def macro_has_eval(self, exprlist):
        node = exprlist
        while node.data != "member_dot":
            if len(node.children) != 1:
                return super().macro_has_eval(exprlist)
            node = node.children[0]
        operand = self.visit(node.children[0])
        if isinstance(operand, celpy.CELEvalError):
            return operand
        return super().macro_has_eval(exprlist)

    def sub_evaluator(self, ast):
        # The bodies of exists() and all() run in a sub-evaluator: keep them strict too.
        return StrictHas(ast, activation=self.activation)


class StrictRunner(celpy.InterpretedRunner):
    def evaluate(self, context):
        return StrictHas(ast=self.ast, activation=self.new_activation()).evaluate(context)


def real_pods():
    pods = {}
    for f in sorted((FIXTURES / "pods").glob("*.json")):
        pods[f.name] = json.loads(f.read_text())
    review = json.loads((FIXTURES / "admissionreview-v1-pod-create-request.json").read_text())
    pods["admissionreview-v1-pod-create-request.json"] = review["request"]["object"]
    if len(pods) < 2:
        raise RuntimeError(f"{FIXTURES}: too few pods")
    return pods, review["request"]


def ask(pod, where, field, resource, value):
    """The pod with `resource` asked for under resources.`field` of its first container, or
    of a new init container when `where` is initContainers and it has none."""
    pod = copy.deepcopy(pod)
    spec = pod["spec"]
    group = spec.setdefault(where, [])
    if not group:
        group.append({"name": "setup", "image": spec["containers"][0]["image"]})
    c = group[0]
    if not isinstance(c.get("resources"), dict):
        c["resources"] = {}
    c["resources"].setdefault(field, {})[resource] = value
    return pod


def conditions(paths):
    found = []
    for path in paths:
        for obj in kustomize.load(path):
            if obj["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
                for hook in obj["webhooks"]:
                    found.append((f"{path}: {hook['name']}", hook.get("matchConditions", [])))
    return found


def evaluate(programs, pod, request):
    """Whether the API server would call the webhook (every condition true), or the error."""
    activation = {
        "object": celpy.json_to_cel(pod),
        "oldObject": celpy.json_to_cel(None),
        "request": celpy.json_to_cel(dict(request, object=pod)),
    }
    for name, program in programs:
        try:
            result = program.evaluate(activation)
        except celpy.CELEvalError as e:
            return f"condition {name} fails to evaluate: {e}"
        if isinstance(result, celpy.CELEvalError):
            return f"condition {name} fails to evaluate: {result}"
        if not isinstance(result, celpy.celtypes.BoolType):
            return f"condition {name} is not a boolean: {result!r}"
        if not result:
            return False
    return True


def library_selftest(env):
    """The library fails an unguarded field as the API server does, so `no error` means
    something: a pod without init containers has no field to iterate, and a container
    without resources none to test with has()."""
    pod = celpy.json_to_cel({"spec": {"containers": [{"name": "a"}]}})
    for expr in ("object.spec.initContainers.exists(c, true)",
                 "object.spec.containers.exists(c, has(c.resources.limits))"):
        try:
            result = env.program(env.compile(expr)).evaluate({"object": pod})
        except celpy.CELEvalError:
            continue
        if not isinstance(result, celpy.CELEvalError):
            return False
    return True


def main(paths):
    env = celpy.Environment(runner_class=StrictRunner)
    if not library_selftest(env):
        print("webhook_cel: cel-python evaluates a missing field without an error", file=sys.stderr)
        return 1
    pods, request = real_pods()
    cases = []
    for pod_name, pod in pods.items():
        cases.append((pod_name, pod, False))
        for field, resource, value, where in GPU_ASKS:
            cases.append((f"{pod_name} + {where} {field} {resource}: {value}",
                          ask(pod, where, field, resource, value), True))
        for field, resource, value, where in OTHER_ASKS:
            cases.append((f"{pod_name} + {where} {field} {resource}: {value}",
                          ask(pod, where, field, resource, value), False))
    hooks = conditions(paths)
    if not hooks:
        print("webhook_cel: no webhook in " + ", ".join(paths), file=sys.stderr)
        return 1
    failures = 0
    for who, conds in hooks:
        if not conds:
            print(f"{who}: no matchConditions: every pod is sent, GPU or not", file=sys.stderr)
            failures += 1
            continue
        programs = [(c["name"], env.program(env.compile(c["expression"]))) for c in conds]
        bad = []
        for case, pod, want in cases:
            got = evaluate(programs, pod, request)
            if got is not want:
                bad.append(f"{case}: {'sent' if want else 'not sent'} expected, got {got}")
        for b in bad:
            print(f"{who}: {b}", file=sys.stderr)
        failures += len(bad)
        sent = sum(1 for _, _, want in cases if want)
        print(f"   {who}: {len(cases)} pods ({sent} asking for GPUs) evaluated, {len(bad)} wrong")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]) if sys.argv[1:] else (print(__doc__, file=sys.stderr) or 2))
