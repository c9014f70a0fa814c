"""Checks every panel query of the Grafana dashboards against a live Prometheus.

Run by tests/deploy/grafana.sh once Prometheus has scraped the demo's server and agent:

    grafana_check.py PROMETHEUS_URL EXPORTED_NAMES_FILE DASHBOARD.json...

and by tests/deploy/run.sh, to evaluate panels on series made up to the purpose with
`promtool test rules` (panels.test.yaml):

    grafana_check.py rules DASHBOARD.json OUT.yaml

which writes each panel target that uses no template variable as a recording rule named
`panel:p<panel id>_<refId>`, with Grafana's interval macros at RULE_MACROS.

For each dashboard: its template variables are resolved as Grafana would with "All"
selected (every value of the variable's label_values query, as a regex alternation); then
every panel target, with the variables and Grafana's interval macros substituted, must
parse (promtool check rules, on a rules file holding the expression), must answer at least
one series through /api/v1/query (not all NaN, as a quantile of nothing is), and may name
only wattledger_* metrics the server or the agent exports. One line per panel; the exit
status is 1 if any check failed.
"""

import json
import re
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request

# Grafana's macros at the scrape interval grafana.sh configures (2 s): $__rate_interval is
# at least four scrapes, so a rate always has two samples in its window.
MACROS = {
    "$__rate_interval": "10s",
    "$__interval": "2s",
    "$__range": "1m",
}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
# The macros for `rules`, at panels.test.yaml's 1m interval: three samples per rate window.
RULE_MACROS = {
    "$__rate_interval": "3m",
    "$__interval": "1m",
    "$__range": "10m",
}


def query(prometheus, path, params):
    url = f"{prometheus}{path}?{urllib.parse.urlencode(params, doseq=True)}"
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"{path} {params}: {body}")
    return body["data"]


def substitute(expr, values):
    for macro, value in MACROS.items():
        expr = expr.replace(macro, value)
    # Longest names first, so $site does not eat the start of $sites.
    for name in sorted(values, key=len, reverse=True):
        expr = expr.replace("${" + name + "}", values[name]).replace("$" + name, values[name])
    return expr


def regex_escape(value):
    """A value as Grafana puts it in a PromQL regex matcher: each regex metacharacter behind
    a backslash, written twice inside the PromQL string."""
    return re.sub(r"([$^*{}\[\]'+?.()|])", r"\\\\\1", value.replace("\\", "\\\\\\\\"))


def resolve_variables(prometheus, dashboard):
    """Each query variable's values with "All" selected: `a|b|c`."""
    values = {}
    for v in dashboard.get("templating", {}).get("list", []):
        if v["type"] != "query":
            continue
        q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", q.strip())
        if not m:
            raise RuntimeError(f"variable {v['name']}: not a label_values query: {q}")
        selector, label = substitute(m.group(1), values), m.group(2)
        found = query(prometheus, f"/api/v1/label/{label}/values", {"match[]": selector})
        if not found:
            raise RuntimeError(f"variable {v['name']}: {q} found no values")
        values[v["name"]] = "|".join(regex_escape(x) for x in found)
    return values


def panels(items):
    for p in items:
        yield p
        yield from panels(p.get("panels", []))


def parses(expr):
    """promtool's parser on the expression, as a recording rule; the error if it fails."""
    rule = {"groups": [{"name": "panel", "rules": [{"record": "panel:check", "expr": expr}]}]}
    with tempfile.NamedTemporaryFile("w", suffix=".yml") as f:
        json.dump(rule, f)  # JSON is YAML
        f.flush()
        r = subprocess.run(["promtool", "check", "rules", f.name], capture_output=True, text=True)
    return None if r.returncode == 0 else (r.stdout + r.stderr).strip()


def metric_names(expr):
    names = set()
    for name in re.findall(r"\bwattledger_[a-z0-9_]+", expr):
        for suffix in HISTOGRAM_SUFFIXES:
            if name.endswith(suffix):
                names.add(name[: -len(suffix)])
                break
        else:
            names.add(name)
    return names


def rules(dashboard_path, out):
    dashboard = json.load(open(dashboard_path))
    recorded = []
    for panel in panels(dashboard["panels"]):
        for t in panel.get("targets", []):
            expr = t["expr"]
            for macro, value in RULE_MACROS.items():
                expr = expr.replace(macro, value)
            if "$" in expr:
                continue
            recorded.append({"record": f"panel:p{panel['id']}_{t['refId']}", "expr": expr})
    with open(out, "w") as f:
        json.dump({"groups": [{"name": dashboard["title"], "rules": recorded}]}, f, indent=1)
    print(f"{dashboard_path}: {len(recorded)} panel targets as recording rules in {out}")
    return 0


def main():
    if sys.argv[1:2] == ["rules"] and len(sys.argv) == 4:
        return rules(sys.argv[2], sys.argv[3])
    prometheus, exported_file, dashboards = sys.argv[1], sys.argv[2], sys.argv[3:]
    exported = set(open(exported_file).read().split())
    failures = []
    for path in dashboards:
        dashboard = json.load(open(path))
        name = dashboard["title"]
        values = resolve_variables(prometheus, dashboard)
        for panel in panels(dashboard["panels"]):
            targets = panel.get("targets", [])
            if panel["type"] == "row" or not targets:
                continue
            series = 0
            for t in targets:
                expr = substitute(t["expr"], values)
                where = f"{name} / {panel['title']} / {expr}"
                unknown = metric_names(expr) - exported
                if unknown:
                    failures.append(f"{where}: not exported: {', '.join(sorted(unknown))}")
                error = parses(expr)
                if error:
                    failures.append(f"{where}: promtool: {error}")
                    continue
                result = query(prometheus, "/api/v1/query", {"query": expr})["result"]
                if not result:
                    failures.append(f"{where}: no series")
                elif all(r["value"][1] == "NaN" for r in result):
                    failures.append(f"{where}: every series is NaN")
                series += len(result)
            print(f"{name} | {panel['title']} | {series} series")
    for f in failures:
        print(f"FAIL {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
