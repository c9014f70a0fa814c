#!/usr/bin/env bash
# For clusters without cert-manager: makes a private CA and the webhook's serving certificate,
# stores them in the Secret wattledger-webhook-tls and puts the CA in the webhook's caBundle.
# Run it right after `kubectl apply -k` (it patches the webhook that apply made; the server's
# pods wait for the Secret until then, and the webhook's failurePolicy Ignore lets pods through),
# and again before the certificate expires (DAYS, default 365): the server reloads it in place.
#
#   deploy/kubernetes/components/webhook/make-tls-secret.sh            # applies with kubectl
#   deploy/kubernetes/components/webhook/make-tls-secret.sh --out DIR  # only writes the files
#
# NAMESPACE (wattledger) and SERVICE (wattledger) name where the server runs: the overlay's
# `namespace:`.
set -euo pipefail
namespace=${NAMESPACE:-wattledger}
service=${SERVICE:-wattledger}
days=${DAYS:-365}
webhook=wattledger-gpu-admission
out=""
if [ "${1:-}" = "--out" ]; then
  mkdir -p "${2:?--out needs a folder}"
  out=$(cd "$2" && pwd)
fi
if [ -z "$out" ] && ! kubectl get mutatingwebhookconfiguration "$webhook" >/dev/null; then
  echo "make-tls-secret.sh: no MutatingWebhookConfiguration $webhook yet: apply the overlay first" >&2
  exit 1
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
openssl req -x509 -newkey rsa:3072 -nodes -sha256 -days "$days" \
  -subj "/CN=wattledger webhook CA" -keyout ca.key -out ca.crt 2>/dev/null
openssl req -newkey rsa:3072 -nodes -sha256 -subj "/CN=$service.$namespace.svc" \
  -keyout tls.key -out tls.csr 2>/dev/null
printf 'subjectAltName=DNS:%s,DNS:%s.%s,DNS:%s.%s.svc,DNS:%s.%s.svc.cluster.local\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n' \
  "$service" "$service" "$namespace" "$service" "$namespace" "$service" "$namespace" > ext.cnf
openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 \
  -days "$days" -extfile ext.cnf -out tls.crt 2>/dev/null
ca_bundle=$(base64 -w0 < ca.crt)
# `add`, not `replace`: the manifest leaves caBundle out (an apply would reset it), and JSON
# Patch's replace fails on a member that is not there; add sets it either way.
patch="[{\"op\":\"add\",\"path\":\"/webhooks/0/clientConfig/caBundle\",\"value\":\"$ca_bundle\"}]"
if [ -n "$out" ]; then
  cp ca.crt tls.crt tls.key "$out/"
  echo "$patch" > "$out/cabundle-patch.json"
  echo "wrote ca.crt, tls.crt, tls.key and cabundle-patch.json to $out"
  exit 0
fi
kubectl -n "$namespace" create secret tls wattledger-webhook-tls --cert=tls.crt --key=tls.key \
  --dry-run=client -o yaml | kubectl apply -f -
kubectl patch mutatingwebhookconfiguration "$webhook" --type=json -p "$patch"
echo "the webhook's certificate is in $namespace/wattledger-webhook-tls and its CA in $webhook"
