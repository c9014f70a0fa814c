"""Rendering the Kubernetes manifests as an installer would, for the checks beside this file.

`render(dir)` is `kubectl kustomize dir`, parsed. `with_settings(...)` writes a copy of one of
our overlays with its settings changed the way README.md tells a user to change them (the
`namespace:` line, the `release` label, the `images:` entry, more `components:`), so a check
can render an install in another namespace, for another Prometheus, from another registry.
Kustomize refuses absolute paths and files outside a kustomization's folder, so the copy is
written under the repository (target/) and names the overlay's folders relative to itself.
"""

import os
import pathlib
import subprocess

import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
KUBERNETES = REPO / "deploy" / "kubernetes"
OVERLAYS = sorted(p for p in (KUBERNETES / "overlays").iterdir() if p.is_dir())
KUEUE = KUBERNETES / "kueue"
IMAGE_NAME = "wattledger"


def documents(text):
    return [d for d in yaml.safe_load_all(text) if d]


def kustomize(path):
    r = subprocess.run(["kubectl", "kustomize", str(path)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {path}: {r.stderr.strip()}")
    return r.stdout


def render(path):
    return documents(kustomize(path))


def load(path):
    with open(path) as f:
        return documents(f.read())


def with_settings(overlay, into, namespace=None, release=None, image=None, components=()):
    """A copy of `overlay`'s kustomization.yaml in the folder `into`, with the settings given
    changed as the overlay's comments say to change them; returns the folder."""
    overlay, into = pathlib.Path(overlay).resolve(), pathlib.Path(into).resolve()
    into.mkdir(parents=True, exist_ok=True)
    k = yaml.safe_load((overlay / "kustomization.yaml").read_text())
    moved = lambda p: os.path.relpath(overlay / p, into)
    for field in ("resources", "components", "transformers"):
        if field in k:
            k[field] = [moved(p) for p in k[field]]
    if components:
        k["components"] = k.get("components", []) + [os.path.relpath(c, into) for c in components]
    if namespace is not None:
        if "namespace" not in k:
            raise ValueError(f"{overlay}: no `namespace:` line to change")
        k["namespace"] = namespace
    if release is not None:
        entries = [e for e in k.get("labels", []) if "release" in e.get("pairs", {})]
        if len(entries) != 1:
            raise ValueError(f"{overlay}: no one `labels:` entry with `release` to change")
        entries[0]["pairs"]["release"] = release
    if image is not None:
        entries = [e for e in k.get("images", []) if e.get("name") == IMAGE_NAME]
        if len(entries) != 1:
            raise ValueError(f"{overlay}: no one `images:` entry named {IMAGE_NAME} to change")
        name, _, tag = image.rpartition(":")
        entries[0]["newName"], entries[0]["newTag"] = name, tag
    (into / "kustomization.yaml").write_text(yaml.safe_dump(k, sort_keys=False))
    return into
