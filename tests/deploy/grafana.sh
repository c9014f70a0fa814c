#!/usr/bin/env bash
# The Grafana dashboards (deploy/grafana/) against live data: the demo (`wattledger demo
# --days 2`, with its real agent serving its own /metrics) on loopback, scraped by a real
# Prometheus every 2 s while a scheduler asks for admission decisions. Prometheus scrapes what
# the production overlay's ServiceMonitors select, as the Prometheus operator would
# (scrape_config.py: their selectors, ports, paths, token and relabelings, with the server's
# and the agent's container ports standing on the demo's loopback ports), so the job and
# label names the dashboards and alerts use are the ones a cluster gets. Then every panel
# query of both dashboards is parsed by promtool, run through Prometheus's HTTP API (it must
# answer at least one series, not all NaN) and held to the metric names the server and the
# agent export (grafana_check.py); both expositions must pass `promtool check metrics`; and
# deploy/grafana must render with kubectl kustomize. About 30 s.
#
# Needs target/debug/wattledger and target/debug/wattledger-agent (cargo build), the
# PostgreSQL server binaries, Prometheus and promtool (apt-get install postgresql prometheus),
# kubectl, and PyYAML (target/venv, or the system's python3).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
bin=$root/target/debug
# World-readable, so the embedded PostgreSQL (run as the postgres user under root) can enter.
work=$(mktemp -d /tmp/wattledger-grafana.XXXXXX) && chmod 755 "$work"
demo_pid=""
prometheus_pid=""
asker_pid=""
cleanup() {
  [ -n "$asker_pid" ] && kill "$asker_pid" 2>/dev/null || true
  [ -n "$prometheus_pid" ] && kill "$prometheus_pid" 2>/dev/null || true
  if [ -n "$demo_pid" ]; then
    kill -TERM "$demo_pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$demo_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$demo_pid" 2>/dev/null || true
  fi
  # The demo's agent (killed with the demo when it exits cleanly) and embedded PostgreSQL
  # (left running by design) are this run's own: stop them by what the demo logged.
  agent_pid=$(sed -n 's/.*wattledger-agent (pid \([0-9]*\)).*/\1/p' "$work/demo.err" 2>/dev/null | head -1)
  [ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null || true
  if [ -f "$work/data/postgres/PG_VERSION" ]; then
    as=()
    [ "$(id -u)" = 0 ] && as=(runuser -u postgres --)
    "${as[@]}" "$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)/pg_ctl" \
      -D "$work/data/postgres" -m immediate stop >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "grafana: $*" >&2
  for log in demo.err prometheus.log; do
    [ -f "$work/$log" ] && { echo "--- $log (tail)" >&2; tail -20 "$work/$log" >&2; }
  done
  exit 1
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

for tool in prometheus promtool; do
  command -v "$tool" >/dev/null || fail "$tool is not installed (apt-get install prometheus)"
done
[ -x "$bin/wattledger" ] && [ -x "$bin/wattledger-agent" ] \
  || fail "build first: cargo build -p wattledger-cli -p wattledger-agent"

command -v kubectl >/dev/null || fail "kubectl is not installed (apt-get install kubernetes-client)"
py=python3
[ -x target/venv/bin/python ] && py=target/venv/bin/python
maps=$(kubectl kustomize deploy/grafana | grep -c '^kind: ConfigMap') \
  || fail "kubectl kustomize deploy/grafana failed"
[ "$maps" = 2 ] || fail "deploy/grafana renders $maps ConfigMaps, not 2"
echo "grafana: kubectl kustomize deploy/grafana renders 2 dashboard ConfigMaps"
kubectl kustomize deploy/kubernetes/overlays/production >"$work/production.yaml" \
  || fail "kubectl kustomize deploy/kubernetes/overlays/production failed"

api_port=$(free_port)
agent_port=$(free_port)
prom_port=$(free_port)
export WATTLEDGER_DATA_DIR=$work/data
export WATTLEDGER_JWT_SECRET=$(python3 -c 'import secrets; print(secrets.token_hex(32))')
unset DATABASE_URL
# The demo's agent inherits the environment: it serves its /metrics here.
WATTLEDGER_AGENT_METRICS_LISTEN=127.0.0.1:$agent_port \
  "$bin/wattledger" demo --days 2 --no-close --listen "127.0.0.1:$api_port" \
  >"$work/demo.out" 2>"$work/demo.err" &
demo_pid=$!
for _ in $(seq 180); do
  grep -q '^Serving the API' "$work/demo.out" 2>/dev/null && break
  kill -0 "$demo_pid" 2>/dev/null || fail "the demo exited"
  sleep 0.5
done
grep -q '^Serving the API' "$work/demo.out" || fail "the demo did not serve within 90 s"
echo "grafana: demo serving on 127.0.0.1:$api_port, its agent's /metrics on 127.0.0.1:$agent_port"

token=$("$bin/wattledger" token mint --role operator --sub prometheus --ttl-s 3600)
# As the Secret the server's ServiceMonitor names would hold it.
printf '%s' "$token" >"$work/metrics-token"
# A scheduler asking twice a second (dry runs: nothing is reserved), so the admission panels
# have decisions in every rate window.
scheduler=$("$bin/wattledger" token mint --role scheduler --sub grafana-test --ttl-s 3600)
while sleep 0.5; do
  curl -fsS -o /dev/null -H "Authorization: Bearer $scheduler" -H 'content-type: application/json' \
    -d '{"tenant": "acme-research", "gpus": 1, "duration_s": 600, "dry_run": true}' \
    "http://127.0.0.1:$api_port/v1/admission" || true
done &
asker_pid=$!
# The server's container port 8080 and the agent's 9465 are the demo's loopback ports here.
"$py" tests/deploy/scrape_config.py "$work/production.yaml" \
  "wattledger-metrics-token=$work/metrics-token" "8080=$api_port" "9465=$agent_port" \
  >"$work/prometheus.yml" || fail "no scrape configuration from the ServiceMonitors"
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" >"$work/prometheus.log" 2>&1 &
prometheus_pid=$!
prom=http://127.0.0.1:$prom_port

# Ready when both targets have been scraped at least 4 times (a rate needs two samples in
# its window; the demo's first attribution figures need one).
scrapes() {
  curl -fsS "$prom/api/v1/query" --data-urlencode 'query=count_over_time(up[1m]) and up == 1' \
    | python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]
print(min(int(x["value"][1]) for x in r) if len(r) == 2 else 0)'
}
for _ in $(seq 60); do
  n=$(scrapes 2>/dev/null || echo 0)
  [ "$n" -ge 6 ] && break
  kill -0 "$prometheus_pid" 2>/dev/null || fail "Prometheus exited"
  sleep 1
done
[ "$n" -ge 6 ] || fail "Prometheus did not scrape both targets 6 times in 60 s (got ${n:-0})"

# The names the server and the agent export, from their own scrapes.
curl -fsS -H "Authorization: Bearer $token" "http://127.0.0.1:$api_port/metrics" >"$work/server.prom" \
  || fail "GET /metrics on the server"
curl -fsS "http://127.0.0.1:$agent_port/metrics" >"$work/agent.prom" || fail "GET /metrics on the agent"
for scrape in server agent; do
  promtool check metrics <"$work/$scrape.prom" >"$work/$scrape.lint" 2>&1 \
    || fail "promtool check metrics on the $scrape's /metrics: $(cat "$work/$scrape.lint")"
done
sed -n 's/^# TYPE \([a-z0-9_]*\) .*/\1/p' "$work/server.prom" "$work/agent.prom" | sort -u >"$work/exported"

python3 tests/deploy/grafana_check.py "$prom" "$work/exported" \
  deploy/grafana/fleet.json deploy/grafana/operations.json \
  || fail "a dashboard query failed (above)"
echo "grafana: every panel of both dashboards answers from live data"
