#!/usr/bin/env bash
# Mints the API tokens the in-cluster clients use, with the server's own signing key, and
# stores each in its Secret (created or replaced):
#   wattledger-agent-token    collector  the agents' pushes
#   wattledger-metrics-token  operator   Prometheus' scrape of /metrics (components/monitoring)
#   wattledger-kueue-token    scheduler  the Kueue AdmissionCheck controller (../kueue)
# Each token's id is recorded (`wattledger token list` in the server's container shows them,
# `wattledger token revoke <jti>` revokes one on every replica at once); tokens minted before
# ids existed are refused since, so run this once after upgrading from such a version.
# Run after `kubectl apply -k` (and, without cert-manager, after make-tls-secret.sh), and again
# to rotate them (TTL_DAYS, default 365, at most WATTLEDGER_TOKEN_MAX_TTL; the old tokens stay
# valid until they expire or are revoked). Prometheus and the Kueue controller read the new
# token by themselves, and so do the agents (they read their token file again when the
# kubelet swaps the Secret's files, within a minute or two; no restart). NAMESPACE
# (wattledger) is the overlay's `namespace:`.
set -euo pipefail
namespace=${NAMESPACE:-wattledger}
ttl_s=$(( ${TTL_DAYS:-365} * 86400 ))
# The server mints, so it must be up. A Secret its pods mount that nothing is about to make
# would hold the rollout forever: name it now instead of timing out. (cert-manager makes its
# Certificate's Secret itself, within seconds.)
template='{range .spec.template.spec.volumes[*]}{.secret.secretName}{" "}{end}{range .spec.template.spec.containers[*].env[*]}{.valueFrom.secretKeyRef.name}{" "}{end}'
certificates=$(kubectl -n "$namespace" get certificates -o jsonpath='{.items[*].spec.secretName}' 2>/dev/null || true)
missing=()
for secret in $(kubectl -n "$namespace" get deployment wattledger -o jsonpath="$template"); do
  kubectl -n "$namespace" get secret "$secret" >/dev/null 2>&1 && continue
  printf '%s\n' $certificates | grep -qx "$secret" && continue
  missing+=("$secret")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "mint-tokens.sh: the server's pods wait for Secret(s) in $namespace: ${missing[*]}" >&2
  echo "  (wattledger-webhook-tls: run components/webhook/make-tls-secret.sh first; the others are step 1 of README.md's install)" >&2
  exit 1
fi
kubectl -n "$namespace" rollout status deployment/wattledger --timeout=5m >/dev/null
mint() { # secret role subject
  local token
  token=$(kubectl -n "$namespace" exec deployment/wattledger -c server -- \
    wattledger token mint --role "$2" --sub "$3" --ttl-s "$ttl_s" --by mint-tokens.sh)
  kubectl -n "$namespace" create secret generic "$1" --from-literal=token="$token" \
    --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  echo "$namespace/$1: a $2 token for $3, valid ${TTL_DAYS:-365} days"
}
mint wattledger-agent-token collector kubernetes-agents
mint wattledger-metrics-token operator prometheus
mint wattledger-kueue-token scheduler kueue-admission-check
