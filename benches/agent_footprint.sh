#!/usr/bin/env bash
# Agent footprint: RSS and CPU of `wattledger-agent` reading an 8-GPU dcgm-exporter scrape and
# one vLLM endpoint at 1 Hz, pushing to a loopback receiver, for DURATION seconds (default 300).
# Baseline in the same script: the same agent with no sources (runtime, spool, pusher only).
#
#   bash benches/agent_footprint.sh            # figures go to stdout, see BENCHMARKS.md
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${DURATION:-300}
cargo build -q --release -p wattledger-agent
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

# The node: 8 GPUs from the real exporter's metric set, and a vLLM endpoint; a receiver
# that answers every push 200.
python3 - "$work" <<'PY'
import sys, re
real = open("../shared/fixtures/dcgm/dcgm-exporter-metrics.prom").read()
out = []
for g in range(8):
    for line in real.splitlines():
        if line.startswith("#"):
            if g == 0: out.append(line)
            continue
        out.append(line.replace("GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e", f"GPU-{g:08d}-0000-0000-0000-000000000000").replace('gpu="0"', f'gpu="{g}"'))
open(sys.argv[1] + "/dcgm", "w").write("\n".join(out) + "\n")
open(sys.argv[1] + "/vllm", "w").write(open("../shared/fixtures/inference/vllm-metrics-docs-example.prom").read())
PY
cat > "$work/serve.py" <<'PY'
import http.server, sys, os
root = sys.argv[1]
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        body = open(os.path.join(root, self.path.strip("/")), "rb").read()
        self.send_response(200); self.send_header("content-length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def do_POST(self):
        self.rfile.read(int(self.headers["content-length"]))
        body = b'{"inserted":0}'
        self.send_response(200); self.send_header("content-type", "application/json"); self.send_header("content-length", str(len(body))); self.end_headers(); self.wfile.write(body)
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), H).serve_forever()
PY
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 "$work/serve.py" "$work" "$port" &
sleep 0.5

config() { # $1 = name, $2 = with sources (1/0)
  cat > "$work/$1.toml" <<TOML
[agent]
server = "http://127.0.0.1:$port"
token = "bench"
site = "s1"
node = "n1"
spool_dir = "$work/spool-$1"
TOML
  if [ "$2" = 1 ]; then cat >> "$work/$1.toml" <<TOML
[[dcgm]]
url = "http://127.0.0.1:$port/dcgm"
interval_s = 1
[[tokens]]
url = "http://127.0.0.1:$port/vllm"
job = "j"
interval_s = 1
TOML
  fi
}

measure() { # $1 = name
  RUST_LOG=warn target/release/wattledger-agent --config "$work/$1.toml" 2>"$work/$1.log" &
  local pid=$!
  sleep "$duration"
  local ticks hz rss
  ticks=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  hz=$(getconf CLK_TCK)
  rss=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
  kill "$pid"; wait "$pid" 2>/dev/null || true
  python3 -c "print(f'$1: peak RSS {$rss/1024:.1f} MiB, CPU {$ticks/$hz:.2f} s in ${duration} s = {100*$ticks/$hz/$duration:.3f} % of a core')"
}

config idle 0
config node 1
measure idle &
measure node &
wait
grep -c . "$work/node.log" >/dev/null && grep -iE "warn|error" "$work/node.log" | head -3 || true
