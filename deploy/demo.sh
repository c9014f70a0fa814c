#!/usr/bin/env bash
# Runs the demo on a fresh Debian/Ubuntu machine: installs the PostgreSQL server if it is
# missing (the demo starts a private cluster from its binaries), then builds the server and
# the agent and runs `wattledger demo` with any arguments given (e.g. --days 7, --listen
# 127.0.0.1:9090). The demo starts the agent for its live node (see README, "The demo").
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${DATABASE_URL:-}" ] && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  echo "== installing PostgreSQL (once; the demo runs a private server from its binaries)"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >/dev/null
fi
cargo build --release -p wattledger-cli -p wattledger-agent
exec target/release/wattledger demo "$@"
