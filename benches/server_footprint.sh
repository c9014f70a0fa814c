#!/usr/bin/env bash
# Server footprint, for the Kubernetes requests and limits: peak RSS and CPU of the `wattledger`
# process (server, attribution worker, admission, webhook dispatcher; the demo also runs its
# simulated live node in it) while the demo seeds and attributes DAYS (default 2) days of a
# 160-GPU cluster, and then while it serves CLIENTS (default 8) concurrent clients reading the
# API, /metrics and the dashboard for DURATION seconds (default 60).
# Baseline in the same script: the same process idle for 10 s before the load.
#
#   bash benches/server_footprint.sh          # figures go to stdout, see BENCHMARKS.md
set -euo pipefail
cd "$(dirname "$0")/.."
days=${DAYS:-2}; clients=${CLIENTS:-8}; duration=${DURATION:-60}
cargo build -q --release -p wattledger-cli -p wattledger-agent
work=$(mktemp -d)
chmod 755 "$work"   # the demo's embedded PostgreSQL runs as the postgres user under root
stop() {
  kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true
  # The embedded PostgreSQL outlives the demo by design (the next run reuses it): stop it.
  if [ -f "$work/data/postgres/PG_VERSION" ]; then
    as=(); [ "$(id -u)" = 0 ] && as=(runuser -u postgres --)
    "${as[@]}" "$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)/pg_ctl" \
      -D "$work/data/postgres" -m immediate stop >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap stop EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

target/release/wattledger --data-dir "$work/data" --listen "127.0.0.1:$port" \
  demo --days "$days" --no-close > "$work/demo.out" 2> "$work/demo.log" &
pid=$!
# RSS every 200 ms: kB.
( while kill -0 "$pid" 2>/dev/null; do
    awk '/VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null >> "$work/rss"; sleep 0.2
  done ) &
cpu_s() { awk '{print ($14 + $15) / 100}' "/proc/$pid/stat"; } # utime + stime, in s at 100 Hz
until grep -q 'Admin token' "$work/demo.out" 2>/dev/null; do
  kill -0 "$pid" 2>/dev/null || { tail -20 "$work/demo.log"; echo "the demo exited" >&2; exit 1; }
  sleep 1
done
sleep 1
seed_peak=$(sort -n "$work/rss" | tail -1)
seed_cpu=$(cpu_s)
token=$(grep -A1 'Admin token' "$work/demo.out" | tail -1)

: > "$work/rss"; c0=$(cpu_s); sleep 10; c1=$(cpu_s)
idle_rss=$(sort -n "$work/rss" | tail -1)

: > "$work/rss"
python3 - "$port" "$token" "$clients" "$duration" > "$work/load" <<'PY'
import sys, threading, time, urllib.request
port, token, clients, duration = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
paths = ["/v1/usage?group_by=tenant,model", "/v1/usage?group_by=site,hour", "/metrics",
         "/v1/metrics/efficiency?group_by=site", "/v1/jobs?limit=100", "/health"]
ok, bad, lock = [0], [0], threading.Lock()
def client(i):
    end, n = time.time() + duration, i
    while time.time() < end:
        req = urllib.request.Request(f"http://127.0.0.1:{port}{paths[n % len(paths)]}",
                                     headers={"Authorization": f"Bearer {token}"})
        n += 1
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                r.read(); good = r.status == 200
        except Exception:
            good = False
        with lock:
            (ok if good else bad)[0] += 1
threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
[t.start() for t in threads]; [t.join() for t in threads]
print(ok[0], bad[0])
PY
c2=$(cpu_s)
read -r ok bad < "$work/load"
load_rss=$(sort -n "$work/rss" | tail -1)
hwm=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
[ "$bad" = 0 ] || { echo "$bad requests failed (of $((ok + bad)))" >&2; exit 1; }
[ "$ok" -gt 0 ] || { echo "no request answered" >&2; exit 1; }

mib() { awk -v k="$1" 'BEGIN { printf "%.0f MiB", k / 1024 }'; }
echo "seed + attribution of $days days: peak RSS $(mib "$seed_peak"), CPU ${seed_cpu} s"
echo "idle 10 s (baseline):             RSS $(mib "$idle_rss"), CPU $(awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%.2f", b - a }') s = $(awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%.1f", (b - a) / 10 * 100 }') % of a core"
echo "$clients clients for ${duration} s:          peak RSS $(mib "$load_rss"), $ok requests ($(awk -v n="$ok" -v d="$duration" 'BEGIN { printf "%.0f", n / d }')/s, all 200), CPU $(awk -v a="$c1" -v b="$c2" 'BEGIN { printf "%.1f", b - a }') s = $(awk -v a="$c1" -v b="$c2" -v d="$duration" 'BEGIN { printf "%.0f", (b - a) / d * 100 }') % of a core"
echo "process peak (VmHWM):              $(mib "$hwm")"
