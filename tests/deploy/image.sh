#!/usr/bin/env bash
# The container image's runtime stage, assembled as deploy/container/Containerfile describes it
# and run for real: no container engine runs on this machine (no Docker daemon; buildah and
# podman cannot pull the base images without a registry), so this stands in for `podman run`.
#
# - The file system of gcr.io/distroless/cc-debian12 from the Debian 12 packages that image is
#   built from (libc6, libgcc-s1, libstdc++6, libgomp1, libssl3), with its /etc/passwd
#   (nonroot = 65532) and /tmp, plus the binaries the Containerfile copies to /usr/local/bin.
# - Mounted read-only (a private mount namespace), entered with chroot as the Containerfile's
#   USER: each binary's --help, the agent's --check-config on the config the Kubernetes
#   manifests render, and the server serving /health against a real PostgreSQL.
#
# A binary that needs a shared library the image lacks, or writes to its root file system,
# fails here. Uses target/debug (same dynamic linkage as the release build the image holds).
# Needs root (chroot, mount namespace) and apt-get download.
set -euo pipefail
cd "$(dirname "$0")/../.."
containerfile=deploy/container/Containerfile
work=$(mktemp -d /tmp/wattledger-image.XXXXXX)
chmod 755 "$work"   # the PostgreSQL below runs as postgres
pg_pid=""
server_pid=""
cleanup() {
  # Whatever still runs in the image (the server): the processes whose root is its rootfs.
  for proc in /proc/[0-9]*; do
    [ "$(readlink "$proc/root" 2>/dev/null)" = "$work/rootfs" ] && kill "${proc#/proc/}" 2>/dev/null
  done
  [ -n "$server_pid" ] && wait "$server_pid" 2>/dev/null || true
  [ -n "$pg_pid" ] && as_pg "$bin/pg_ctl" -D "$work/pg" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "image: $*" >&2; exit 1; }

# What the Containerfile says: the binaries it installs and the user it runs as.
mapfile -t binaries < <(grep -o 'target/release/[a-z-]*' "$containerfile" | sed 's|target/release/||' | sort -u)
[ "${#binaries[@]}" -ge 3 ] || fail "expected the server, agent and kueue binaries in $containerfile"
user=$(sed -n 's/^USER \([0-9]*\):\([0-9]*\)$/\1:\2/p' "$containerfile")
[ -n "$user" ] && [ "${user%%:*}" != 0 ] || fail "$containerfile must name a numeric non-root USER"
grep -q '^FROM gcr.io/distroless/cc-debian12:nonroot$' "$containerfile" \
  || fail "the runtime base changed: update the package list in this test to match it"

echo "== image: assembling distroless/cc-debian12 from Debian packages"
rootfs="$work/rootfs"
mkdir -p "$rootfs" "$work/debs"
packages=(libc6 libgcc-s1 libstdc++6 libgomp1 libssl3)
if ! (cd "$work/debs" && apt-get download -qq "${packages[@]}" >/dev/null 2>&1); then
  apt-get update -qq   # a fresh machine has no package lists yet
  (cd "$work/debs" && apt-get download -qq "${packages[@]}" >/dev/null)
fi
for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$rootfs"; done
mkdir -p "$rootfs/etc" "$rootfs/tmp" "$rootfs/usr/local/bin" "$rootfs/etc/wattledger"
chmod 1777 "$rootfs/tmp"
# distroless' /etc/passwd and /etc/group (base/base.bzl): root, nobody, nonroot.
cat > "$rootfs/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
PASSWD
printf 'root:x:0:\nnobody:x:65534:\ntty:x:5:\nstaff:x:50:\nnonroot:x:65532:\n' > "$rootfs/etc/group"
for b in "${binaries[@]}"; do
  [ -x "target/debug/$b" ] || fail "target/debug/$b is not built (cargo build --bins)"
  install -m 0755 "target/debug/$b" "$rootfs/usr/local/bin/$b"
done

# The agent config the manifests ship, as the DaemonSet mounts it.
kubectl kustomize deploy/kubernetes/overlays/production > "$work/rendered.yaml"
target/venv/bin/python - "$work/rendered.yaml" "$rootfs/etc/wattledger/agent.toml" <<'PY'
import sys, yaml
for doc in yaml.safe_load_all(open(sys.argv[1])):
    if doc and doc.get("kind") == "ConfigMap" and "agent.toml" in doc.get("data", {}):
        open(sys.argv[2], "w").write(doc["data"]["agent.toml"])
        break
else:
    sys.exit("no ConfigMap with agent.toml in the production overlay")
PY
# Where the DaemonSet mounts the Secret wattledger-agent-token.
mkdir -p "$rootfs/var/run/secrets/wattledger"
echo "collector-token-from-the-secret" > "$rootfs/var/run/secrets/wattledger/token"

# Runs a command in the image: read-only root, the image's user, no environment but the
# VAR=value words given before the command.
in_image() {
  local envs=(PATH=/usr/local/bin)
  while [[ "$1" == *=* ]]; do envs+=("$1"); shift; done
  unshare --mount -- sh -c '
    rootfs=$1; user=$2; shift 2
    mount --bind "$rootfs" "$rootfs" && mount -o remount,bind,ro "$rootfs" "$rootfs"
    exec "$@"' sh "$rootfs" "$user" \
    env -i "${envs[@]}" "$(command -v chroot)" --userspec="$user" "$rootfs" "$@"
}

echo "== image: each binary runs as $user on a read-only root"
for b in "${binaries[@]}"; do
  out=$(in_image "/usr/local/bin/$b" --help 2>&1) \
    || fail "$b --help failed in the image: $out"
  echo "   $b --help: $(echo "$out" | head -1)"
done
if in_image /usr/local/bin/wattledger-agent --config /nonexistent >/dev/null 2>&1; then
  fail "the agent started without its config"
fi
out=$(in_image WATTLEDGER_AGENT_NODE=gpu-node-1 \
  /usr/local/bin/wattledger-agent --check-config --config /etc/wattledger/agent.toml 2>&1) \
  || fail "wattledger-agent --check-config rejected the manifests' agent.toml: $out"
echo "$out" | sed 's/^/   /'

echo "== image: the server serves /health against PostgreSQL, on a read-only root"
bin=$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb | sort -V | tail -1)")
mkdir -p "$work/pg" && chown postgres: "$work/pg" 2>/dev/null || true
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
as_pg "$bin/initdb" -D "$work/pg" -U postgres -A trust >/dev/null
as_pg "$bin/pg_ctl" -D "$work/pg" -o "-c listen_addresses=127.0.0.1 -p $port -k $work/pg" -l "$work/pg/log" -w start >/dev/null
pg_pid=started
http_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
in_image DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres" \
  WATTLEDGER_JWT_SECRET="image-test-signing-key-of-32-bytes-or-more" \
  WATTLEDGER_LISTEN="127.0.0.1:$http_port" RUST_LOG=warn \
  /usr/local/bin/wattledger serve > "$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 100); do
  health=$(curl -fsS "http://127.0.0.1:$http_port/health" 2>/dev/null) && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log" >&2; fail "the server exited in the image"; }
  sleep 0.2
done
[ -n "${health:-}" ] || { cat "$work/server.log" >&2; fail "/health did not answer"; }
echo "   /health: $health"
echo "$health" | grep -q '"database":true' || fail "the server in the image does not see its database"
echo "== image: ok"
