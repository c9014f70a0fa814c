#!/usr/bin/env python3
"""JSON Schemas from the projects' CustomResourceDefinitions, and validation of rendered
manifests against them.

The CRDs are the projects' own files, read from ../shared/fixtures/crds/ beside the checkout
(SOURCES.md there says which release of each). This repository keeps only the script's own
good/bad cases, in tests/fixtures/crds/selftest/.
Core kinds (Deployment, DaemonSet, ...) are not handled here: kubernetes-validate checks
them. This script covers the custom resources it cannot: prometheus-operator, cert-manager
and Kueue objects.

Requirements: Python 3.11 with PyYAML; `validate` and `selftest` also need `jsonschema`.
Neither is in the standard library: the test runner pip-installs them into a venv
(`pip install pyyaml jsonschema`, or `pip install check-jsonschema`, which brings both).

Usage:
  crd_schemas.py generate OUT_DIR      one <kind>_<version>.json per kind and served version
  crd_schemas.py validate [FILE|-]     validate a rendered multi-document YAML stream
                                       (CRDs found in the stream are used as well)
  crd_schemas.py selftest              run tests/fixtures/crds/selftest/{good,bad}-*.yaml
All modes take --crds DIR to read CRDs from elsewhere than ../shared/fixtures/crds.

Exit status: 0 valid, 1 invalid documents or a failed self-test, 2 bad usage or input.

The conversion follows openapi2jsonschema (the script kubeconform ships), with the
Kubernetes structural-schema rules spelt out:
  * apiVersion and kind are required and pinned to the one group/version and kind;
  * an object that lists `properties` rejects any other property (additionalProperties:
    false), so a misspelt field fails, unless it has x-kubernetes-preserve-unknown-fields;
  * x-kubernetes-int-or-string accepts an integer or a string;
  * x-kubernetes-embedded-resource objects also accept apiVersion, kind and metadata;
  * nullable: true also accepts null; x-kubernetes-list-type: set means unique items;
  * the root `metadata`, which CRDs leave as a bare object, gets the ObjectMeta fields so
    a misspelt `lables` fails too (the one addition over openapi2jsonschema).
CEL rules (x-kubernetes-validations) cannot be evaluated here and are not checked.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CRD_DIR = REPO_ROOT.parent / "shared" / "fixtures" / "crds"
SELFTEST_DIR = REPO_ROOT / "tests" / "fixtures" / "crds" / "selftest"
JSON_SCHEMA_DIALECT = "http://json-schema.org/draft-07/schema#"
MAX_MESSAGE_CHARS = 300

# The ObjectMeta fields a manifest may set or a server may echo back
# (k8s.io/apimachinery/pkg/apis/meta/v1 ObjectMeta).
OBJECT_META_PROPERTIES: dict[str, Any] = {
    "name": {"type": "string"},
    "generateName": {"type": "string"},
    "namespace": {"type": "string"},
    "selfLink": {"type": "string"},
    "uid": {"type": "string"},
    "resourceVersion": {"type": "string"},
    "generation": {"type": "integer"},
    "creationTimestamp": {"type": ["string", "null"]},
    "deletionTimestamp": {"type": "string"},
    "deletionGracePeriodSeconds": {"type": "integer"},
    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
    "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    "ownerReferences": {"type": "array", "items": {"type": "object"}},
    "finalizers": {"type": "array", "items": {"type": "string"}},
    "managedFields": {"type": "array", "items": {"type": "object"}},
}

# Keywords whose value is one subschema, and those whose value is a list of them
# (`properties` and `additionalProperties` are handled by name).
SINGLE_SUBSCHEMA = ("items", "not")
LIST_OF_SUBSCHEMAS = ("allOf", "anyOf", "oneOf")


class InputError(Exception):
    """Unreadable or malformed input: a CRD, a manifest stream, a missing file."""


class ManifestLoader(yaml.SafeLoader):
    """A safe loader that keeps timestamps as strings, as Kubernetes' YAML-to-JSON does;
    PyYAML would otherwise turn `2025-01-01T00:00:00Z` into a datetime and fail `string`."""


ManifestLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load_documents(text: str) -> list[Any]:
    """Every non-empty document of a YAML stream."""
    return [doc for doc in yaml.load_all(text, Loader=ManifestLoader) if doc is not None]


# ---------------------------------------------------------------------------- conversion


def convert_node(node: dict[str, Any], in_junctor: bool = False) -> dict[str, Any]:
    """One OpenAPI v3 structural-schema node as JSON Schema (a new dict; input untouched).

    `in_junctor` is true inside allOf/anyOf/oneOf/not branches: structural schemas only put
    value constraints there, and a strict branch would reject the fields the outer node
    declares, so branches are never made strict."""
    out = dict(node)

    if "properties" in out:
        out["properties"] = {name: convert_node(sub) for name, sub in out["properties"].items()}
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = convert_node(out["additionalProperties"])
    for keyword in SINGLE_SUBSCHEMA:
        if isinstance(out.get(keyword), dict):
            out[keyword] = convert_node(out[keyword], in_junctor=keyword == "not")
    for keyword in LIST_OF_SUBSCHEMAS:
        if keyword in out:
            out[keyword] = [convert_node(branch, in_junctor=True) for branch in out[keyword]]

    if out.get("x-kubernetes-int-or-string"):
        # controller-gen already emits anyOf integer/string; hand-written CRDs may not.
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])

    if out.get("x-kubernetes-embedded-resource"):
        properties = out.setdefault("properties", {})
        properties.setdefault("apiVersion", {"type": "string"})
        properties.setdefault("kind", {"type": "string"})
        properties.setdefault("metadata", {"type": "object"})

    if out.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]

    if isinstance(out.get("pattern"), str):
        out["pattern"] = python_pattern(out["pattern"])

    if out.get("x-kubernetes-list-type") == "set":
        out["uniqueItems"] = True

    strict = (
        "properties" in out
        and "additionalProperties" not in out
        and out.get("x-kubernetes-preserve-unknown-fields") is not True
        and not in_junctor
    )
    if strict:
        out["additionalProperties"] = False
    return out


# Go's RE2 lets inline flags follow `^` (Kueue writes "^(?i)[a-z]..."); Python's `re`
# wants global flags first. Both read "(?i)^..." the same way.
LEADING_FLAGS_AFTER_ANCHOR = re.compile(r"^\^(\(\?[a-zA-Z]+\))")


def python_pattern(pattern: str) -> str:
    """A CRD `pattern` (Go RE2) that Python's `re`, used by jsonschema, compiles alike."""
    translated = LEADING_FLAGS_AFTER_ANCHOR.sub(r"\1^", pattern)
    try:
        re.compile(translated)
    except re.error as error:
        raise InputError(f"pattern {pattern!r} is not valid in Python: {error}") from error
    return translated


def to_json_schema(openapi: dict[str, Any], group: str, version: str, kind: str) -> dict[str, Any]:
    """The JSON Schema of one served CRD version, rooted at the whole object."""
    schema = convert_node(openapi)
    schema["$schema"] = JSON_SCHEMA_DIALECT
    properties = schema.setdefault("properties", {})
    if (
        "additionalProperties" not in schema
        and schema.get("x-kubernetes-preserve-unknown-fields") is not True
    ):
        schema["additionalProperties"] = False

    properties["apiVersion"] = {"type": "string", "enum": [f"{group}/{version}"]}
    properties["kind"] = {"type": "string", "enum": [kind]}
    schema["required"] = sorted(set(schema.get("required", [])) | {"apiVersion", "kind"})

    crd_meta = properties.get("metadata", {})
    properties["metadata"] = {
        "type": "object",
        "properties": {**OBJECT_META_PROPERTIES, **crd_meta.get("properties", {})},
        "additionalProperties": False,
    }
    return schema


@dataclass(frozen=True)
class VersionSchema:
    """One (group, version, kind) a CRD serves, with its JSON Schema."""

    group: str
    version: str
    kind: str
    schema: dict[str, Any]
    deprecation: str | None
    cluster_scoped: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def file_name(self) -> str:
        return f"{self.kind.lower()}_{self.version}.json"


def served_versions(crd: dict[str, Any], source: str) -> Iterator[VersionSchema]:
    """The served versions of one CRD document; a CRD without schemas is an input error."""
    spec = crd.get("spec", {})
    group, kind = spec.get("group"), spec.get("names", {}).get("kind")
    if not group or not kind:
        raise InputError(f"{source}: CRD without spec.group or spec.names.kind")
    for entry in spec.get("versions", []):
        if not entry.get("served"):
            continue
        openapi = entry.get("schema", {}).get("openAPIV3Schema")
        if not isinstance(openapi, dict):
            raise InputError(f"{source}: {kind} {entry.get('name')} has no openAPIV3Schema")
        deprecation = None
        if entry.get("deprecated"):
            deprecation = (
                entry.get("deprecationWarning") or f"{group}/{entry['name']} {kind} is deprecated"
            )
        schema = to_json_schema(openapi, group, entry["name"], kind)
        cluster_scoped = spec.get("scope") == "Cluster"
        yield VersionSchema(group, entry["name"], kind, schema, deprecation, cluster_scoped)


def schemas_of_crds(docs: list[Any], source: str) -> list[VersionSchema]:
    """The served versions of the CustomResourceDefinitions among docs; other kinds ignored."""
    schemas = []
    for doc in docs:
        if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
            schemas.extend(served_versions(doc, source))
    return schemas


def load_schemas(crd_dir: Path) -> list[VersionSchema]:
    """Every served version of every CRD under crd_dir."""
    if not crd_dir.is_dir():
        raise InputError(
            f"{crd_dir} is missing: the CRDs are read from shared/fixtures/crds beside the "
            "checkout (or pass --crds DIR)"
        )
    schemas = []
    for path in sorted(crd_dir.rglob("*.yaml")):
        schemas.extend(schemas_of_crds(parse_stream(read_file(path), str(path)), str(path)))
    if not schemas:
        raise InputError(f"no CustomResourceDefinition found under {crd_dir}")
    return schemas


def generate(crd_dir: Path, out_dir: Path) -> int:
    out_dir.mkdir(parents=True, exist_ok=True)
    written: set[str] = set()
    for entry in load_schemas(crd_dir):
        # <kind>_<version>.json drops the group: two CRDs sharing kind and version would
        # overwrite each other silently.
        if entry.file_name in written:
            raise InputError(f"two CRDs produce {entry.file_name}; rename one kind")
        written.add(entry.file_name)
        target = out_dir / entry.file_name
        target.write_text(json.dumps(entry.schema, indent=2, sort_keys=True) + "\n")
        print(f"wrote {target} ({entry.api_version} {entry.kind})")
    return 0


# ---------------------------------------------------------------------------- validation


@dataclass
class Report:
    """What a validation run did: lines to show, and the failures that make it fail."""

    checked: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def object_label(doc: dict[str, Any], index: int) -> str:
    """`Kind/name` for messages; position in the stream when the name is missing."""
    metadata = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    name = metadata.get("name") or f"<document {index}>"
    return f"{doc.get('kind', '<no kind>')}/{name}"


def field_path(error_path: Any) -> str:
    """jsonschema's path deque as `spec.endpoints[0].port`; `(root)` for the object itself."""
    text = ""
    for part in error_path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(root)"


def short(message: str) -> str:
    # jsonschema quotes the whole offending value; a pod template would drown the report.
    return message if len(message) <= MAX_MESSAGE_CHARS else message[:MAX_MESSAGE_CHARS] + "..."


def validate_documents(docs: list[Any], schemas: list[VersionSchema]) -> Report:
    """Check every document whose apiVersion/kind a CRD serves; list the others as skipped."""
    import jsonschema  # only this mode needs it; `generate` runs with PyYAML alone

    by_api = {(s.api_version, s.kind): s for s in schemas}  # a later schema wins
    kinds_of_group = {(s.group, s.kind) for s in schemas}
    report = Report()
    for index, doc in enumerate(docs):
        if not isinstance(doc, dict):
            report.failures.append(f"<document {index}>: (root): not a mapping")
            continue
        label = object_label(doc, index)
        api_version, kind = str(doc.get("apiVersion", "")), str(doc.get("kind", ""))
        entry = by_api.get((api_version, kind))
        if entry is None:
            group = api_version.rpartition("/")[0]
            if (group, kind) in kinds_of_group:
                report.failures.append(
                    f"{label}: apiVersion: {api_version} is not a served version of {kind}"
                )
            else:
                report.skipped.append(
                    f"skipped {label} ({api_version or '<no apiVersion>'}: no CRD schema)"
                )
            continue
        report.checked.append(f"checked {label} against {entry.file_name}")
        if entry.deprecation:
            report.warnings.append(f"warning: {label}: {entry.deprecation}")
        metadata = doc.get("metadata")
        if entry.cluster_scoped and isinstance(metadata, dict) and metadata.get("namespace"):
            # The API server silently drops it; usually kustomize's `namespace:` set it
            # because it does not know the custom kind is cluster-scoped.
            report.warnings.append(
                f"warning: {label}: metadata.namespace is set on a cluster-scoped kind"
            )
        validator = jsonschema.Draft7Validator(entry.schema)
        for error in sorted(
            validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path))
        ):
            report.failures.append(
                f"{label}: {field_path(error.absolute_path)}: {short(error.message)}"
            )
    return report


def print_report(report: Report) -> None:
    for line in report.checked + report.skipped + report.warnings:
        print(line)
    for line in report.failures:
        print(f"INVALID {line}", file=sys.stderr)
    print(
        f"{len(report.checked)} checked, {len(report.skipped)} skipped, "
        f"{len(report.failures)} error(s)"
    )


def validate(crd_dir: Path, source: str) -> int:
    """Validate a stream against the projects' CRDs and against any CRD the stream itself
    installs (the project's own CRDs ship in the same kustomization as their objects); a
    CRD in the stream wins over a shared one of the same group, version and kind."""
    text = sys.stdin.read() if source == "-" else read_file(Path(source))
    docs = parse_stream(text, source)
    schemas = load_schemas(crd_dir) + schemas_of_crds(docs, source)
    report = validate_documents(docs, schemas)
    print_report(report)
    return 1 if report.failures else 0


def read_file(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as error:
        raise InputError(f"cannot read {path}: {error.strerror}") from error


def parse_stream(text: str, source: str) -> list[Any]:
    try:
        return load_documents(text)
    except yaml.YAMLError as error:
        raise InputError(f"{source}: not valid YAML: {error}") from error


# ---------------------------------------------------------------------------- self-test

EXPECT_LINE = re.compile(r"^#\s*expect:\s*(.+?)\s*$", re.MULTILINE)


def check_case(path: Path, schemas: list[VersionSchema]) -> str | None:
    """The problem with one self-test case, or None when it behaves as its name says."""
    text = path.read_text()
    report = validate_documents(parse_stream(text, str(path)), schemas)
    failures = "\n  ".join(report.failures)
    if path.name.startswith("good-"):
        if report.failures:
            return f"expected valid, got:\n  {failures}"
        if not report.checked or report.skipped:
            return "every document of a good case must be checked against a schema"
        return None
    if path.name.startswith("bad-"):
        expected = EXPECT_LINE.findall(text)
        if not expected:
            return "a bad case needs at least one '# expect: TEXT' line"
        missing = [wanted for wanted in expected if wanted not in failures]
        if missing:
            return f"expected failures containing {missing}, got:\n  {failures or '(none)'}"
        return None
    return "name must start with good- or bad-"


def selftest(crd_dir: Path) -> int:
    """Every generated schema must be valid draft-07; good-*.yaml must be checked against
    a schema and pass; bad-*.yaml must fail, and each `# expect: TEXT` line in a bad file
    must appear in its failures, so a bad file cannot pass by failing for another reason."""
    import jsonschema

    schemas = load_schemas(crd_dir)
    cases = sorted(SELFTEST_DIR.glob("*.yaml"))
    if not cases:
        raise InputError(f"no self-test cases under {SELFTEST_DIR}")
    failed = 0
    for entry in schemas:
        # A generated schema that is not itself valid JSON Schema would check nothing.
        try:
            jsonschema.Draft7Validator.check_schema(entry.schema)
        except jsonschema.SchemaError as error:
            failed += 1
            print(f"FAIL {entry.file_name}: {short(error.message)}", file=sys.stderr)
    for path in cases:
        problem = check_case(path, schemas)
        print(f"{'FAIL' if problem else 'ok'} {path.name}")
        if problem:
            failed += 1
            print(f"  {problem}", file=sys.stderr)
    print(f"{len(schemas)} schema(s), {len(cases)} case(s), {failed} failed")
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description="JSON Schemas from the projects' CRDs, and manifest validation against them."
    )
    parser.add_argument(
        "--crds", type=Path, default=DEFAULT_CRD_DIR, help="folder of CRD YAML files"
    )
    modes = parser.add_subparsers(dest="mode", required=True)
    modes.add_parser("generate", help="write JSON Schemas").add_argument("out_dir", type=Path)
    modes.add_parser("validate", help="validate rendered manifests").add_argument(
        "source", nargs="?", default="-", help="YAML stream file, or - for stdin (default)"
    )
    modes.add_parser("selftest", help="run the good-/bad- fixtures")
    args = parser.parse_args()
    try:
        if args.mode == "generate":
            return generate(args.crds, args.out_dir)
        if args.mode == "validate":
            return validate(args.crds, args.source)
        return selftest(args.crds)
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
