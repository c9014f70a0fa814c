#!/usr/bin/env bash
# Runs the demo on a fresh Debian/Ubuntu machine: installs the PostgreSQL server if it is
# missing (the demo starts a private cluster from its binaries), then builds and runs
# `wattledger demo` with any arguments given (e.g. --days 7, --listen 127.0.0.1:9090).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${DATABASE_URL:-}" ] && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  echo "== installing PostgreSQL (once; the demo runs a private server from its binaries)"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >/dev/null
fi
exec cargo run --release -p wattledger -- demo "$@"
