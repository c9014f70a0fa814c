#!/usr/bin/env python3
"""The test binaries a build made, from `cargo test --no-run --message-format=json` on stdin:
one line per binary, tab-separated: a name (package, target and kind, as cargo test names
them), the package's folder (cargo test runs each binary there) and the executable.
tests/run runs them in two lanes."""
import json
import os
import sys

for line in sys.stdin:
    if not line.startswith("{"):
        continue
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    if not m.get("profile", {}).get("test"):
        continue
    folder = os.path.dirname(m["manifest_path"])
    # "path+file:///…/collectors#wattledger-agent@0.1.0", or "path+file:///…/wattledger#0.1.0"
    # when the package is named after its folder.
    spec = m["package_id"].rsplit("#", 1)[-1]
    package = spec.split("@")[0] if "@" in spec else os.path.basename(folder)
    target = m["target"]
    name = f"{package} {'/'.join(target['kind'])} {target['name']}"
    print("\t".join([name, folder, m["executable"]]))
