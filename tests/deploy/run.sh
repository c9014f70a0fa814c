#!/usr/bin/env bash
# The deployment files, checked with the real tools that own each format (tests/run calls it
# after building the binaries; it needs kubectl, promtool, openssl and target/venv with
# kubernetes-validate, jsonschema and PyYAML; it installs cel-python there when missing):
#   - every overlay, the Kueue base and the Grafana dashboards render with `kubectl kustomize`,
#     twice to the same bytes (a second apply finds nothing to change);
#   - every object validates with kubernetes-validate (strict) against the oldest and newest
#     Kubernetes versions we support, and every custom resource against its project's CRD;
#   - every container meets the restricted profile, or its pod says why;
#   - no rendered field is one another writer owns (manifests.py second-apply);
#   - every reference between objects leads somewhere, as rendered and in another namespace,
#     release and registry with the optional components (references.py);
#   - the webhook's matchConditions send exactly the GPU pods, by a CEL library (webhook_cel.py);
#   - README.md's install paths, walked step by step against the rendered objects, need nothing
#     a step before did not make, and the uninstall leaves nothing (install_steps.py);
#   - every agent ConfigMap passes `wattledger-agent --check-config`;
#   - the PrometheusRule passes `promtool check rules`, and `promtool test rules` fires each
#     alert, with two server replicas; two dashboard panels are evaluated the same way;
#   - the webhook's certificate script makes a certificate valid for the Service's names and a
#     caBundle patch that applies to the rendered webhook;
#   - the container image's runtime file system runs every binary (image.sh);
#   - the Grafana dashboards' queries return data from a real Prometheus scraping through the
#     ServiceMonitors (grafana.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
# Oldest and newest Kubernetes minor versions the manifests support.
K8S_VERSIONS=(1.30 1.34)
py=target/venv/bin/python
out=target/deploy
rm -rf "$out" && mkdir -p "$out"
"$py" -c 'import celpy' 2>/dev/null || target/venv/bin/pip install -q 'cel-python==0.5.0'

echo "== deploy: rendering with kubectl kustomize ($(kubectl version --client 2>/dev/null | grep -i kustomize))"
targets=(deploy/kubernetes/overlays/* deploy/kubernetes/kueue deploy/grafana)
for dir in "${targets[@]}"; do
  name=$(echo "${dir#deploy/}" | tr / -)
  kubectl kustomize "$dir" > "$out/$name.yaml"
  # Rendered again, to the same bytes: what a second apply (an upgrade) sends is what the
  # first made, so it changes nothing.
  kubectl kustomize "$dir" | cmp -s - "$out/$name.yaml" \
    || { echo "deploy: $dir renders differently the second time" >&2; exit 1; }
  echo "   $dir: $(grep -c '^kind:' "$out/$name.yaml") objects, the same twice"
done
# Applied on its own before ../kueue (an apply cannot make a CRD and an object of its kind).
cp deploy/kubernetes/kueue/crd.yaml "$out/kubernetes-kueue-crd.yaml"
rendered=("$out"/*.yaml)

echo "== deploy: kubernetes-validate --strict against ${K8S_VERSIONS[*]}"
for v in "${K8S_VERSIONS[@]}"; do
  for f in "${rendered[@]}"; do
    # Custom resources only warn here; crd_schemas.py below validates them.
    if ! report=$(target/venv/bin/kubernetes-validate -k "$v" --strict --quiet "$f" 2>&1); then
      echo "$report" >&2; echo "deploy: $f is not valid for Kubernetes $v" >&2; exit 1
    fi
  done
  echo "   Kubernetes $v: ${#rendered[@]} files valid"
done

echo "== deploy: custom resources against their CRDs (../shared/fixtures/crds)"
"$py" tests/deploy/crd_schemas.py selftest >/dev/null
: > "$out/crd-report.txt"
for f in "${rendered[@]}"; do
  # The Kueue objects with the CRD they are applied after.
  [ "$f" = "$out/kubernetes-kueue.yaml" ] && f_with_crds=("$out/kubernetes-kueue-crd.yaml") || f_with_crds=()
  { for c in "${f_with_crds[@]}"; do cat "$c"; echo ---; done; cat "$f"; } \
    | "$py" tests/deploy/crd_schemas.py validate - >> "$out/crd-report.txt" 2>&1 \
    || { cat "$out/crd-report.txt" >&2; echo "deploy: custom resources in $f do not match their CRDs" >&2; exit 1; }
done
# A kind without a schema is only skipped there: each custom kind we ship must have met one.
for kind in ServiceMonitor PrometheusRule Certificate Issuer AdmissionCheck AdmissionCheckParameters; do
  grep -q "^checked $kind/" "$out/crd-report.txt" \
    || { echo "deploy: no $kind was checked against its CRD schema" >&2; exit 1; }
done
if grep -q '^warning' "$out/crd-report.txt"; then
  grep '^warning' "$out/crd-report.txt" >&2; echo "deploy: fix the warnings above" >&2; exit 1
fi
echo "   $(grep -c '^checked' "$out/crd-report.txt") custom resources valid against their CRDs"

echo "== deploy: security contexts and namespaces"
"$py" tests/deploy/manifests.py security "${rendered[@]}"
# deploy/grafana alone leaves the namespace to whoever includes it (components/monitoring).
"$py" tests/deploy/manifests.py namespaces "$out"/kubernetes-*.yaml

echo "== deploy: a second apply resets nothing another writer owns"
"$py" tests/deploy/manifests.py second-apply "${rendered[@]}" | sed 's/^/   /'

echo "== deploy: every reference leads to its object, in wattledger and in another namespace"
for f in "$out"/kubernetes-overlays-*.yaml; do
  release=kube-prometheus-stack
  grep -q '^kind: ServiceMonitor' "$f" || release=-
  "$py" tests/deploy/references.py check wattledger "$release" "$f" "$out/kubernetes-kueue.yaml"
done
"$py" tests/deploy/references.py settings "$out/settings"

echo "== deploy: the webhook's matchConditions, evaluated with cel-python against real pods"
"$py" tests/deploy/webhook_cel.py $(grep -l '^kind: MutatingWebhookConfiguration' "$out"/kubernetes-overlays-*.yaml)

echo "== deploy: README.md's install paths, step by step"
"$py" tests/deploy/install_steps.py

echo "== deploy: the agents' ConfigMaps pass wattledger-agent --check-config"
# The overlays, and production with every optional component (references.py settings above).
# The agent reads the CA file it names at start: the service-account mount a pod would have
# is made here, with a cluster CA of its own.
sa="$out/serviceaccount"
mkdir -p "$sa"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=kubernetes \
  -days 1 -keyout "$sa/ca.key" -out "$sa/ca.crt" 2>/dev/null
for f in "$out"/kubernetes-overlays-*.yaml "$out/settings/production-optional.yaml"; do
  configs="$out/agent-configs/$(basename "$f" .yaml)"
  "$py" tests/deploy/manifests.py agent-configs "$f" "$configs" >/dev/null
  sed -i "s#/var/run/secrets/kubernetes.io/serviceaccount/#$sa/#g" "$configs"/*.toml
  for toml in "$configs"/*.toml; do
    WATTLEDGER_AGENT_NODE=gpu-node-1 WATTLEDGER_AGENT_NODE_IP=10.0.3.17 WATTLEDGER_AGENT_TOKEN=collector-token \
      target/debug/wattledger-agent --check-config --config "$toml" > "$out/check-config.txt" 2>&1 \
      || { cat "$out/check-config.txt" >&2; echo "deploy: $toml (from $f) fails --check-config" >&2; exit 1; }
    echo "   $(basename "$f" .yaml): $(grep -c 'source:' "$out/check-config.txt") sources ($(grep 'source:' "$out/check-config.txt" | sed 's/.*source: //' | paste -sd, -))"
  done
done

echo "== deploy: promtool check rules / test rules"
"$py" tests/deploy/manifests.py rules "$out/kubernetes-overlays-production.yaml" "$out/wattledger-rules.yaml"
cp tests/deploy/alerts.test.yaml "$out/"
promtool check rules "$out/wattledger-rules.yaml" | sed 's/^/   /'
"$py" tests/deploy/manifests.py alert-coverage "$out/wattledger-rules.yaml" "$out/alerts.test.yaml"
promtool test rules "$out/alerts.test.yaml" | sed 's/^/   /'
"$py" tests/deploy/grafana_check.py rules deploy/grafana/operations.json "$out/operations-panels.yaml" | sed 's/^/   /'
cp tests/deploy/panels.test.yaml "$out/"
promtool test rules "$out/panels.test.yaml" | sed 's/^/   /'

echo "== deploy: the webhook's certificate without cert-manager"
bash deploy/kubernetes/components/webhook/make-tls-secret.sh --out "$out/tls" >/dev/null
openssl verify -CAfile "$out/tls/ca.crt" "$out/tls/tls.crt" | sed 's/^/   /'
for name in wattledger.wattledger.svc wattledger.wattledger.svc.cluster.local; do
  openssl x509 -in "$out/tls/tls.crt" -noout -checkhost "$name" | grep -q 'does match' \
    || { echo "deploy: the webhook certificate is not valid for $name" >&2; exit 1; }
done
echo "   valid for wattledger.wattledger.svc(.cluster.local)"
"$py" tests/deploy/manifests.py json-patch "$out/kubernetes-overlays-production-without-cert-manager.yaml" \
  MutatingWebhookConfiguration wattledger-gpu-admission "$out/tls/cabundle-patch.json" | sed 's/^/   /'

bash tests/deploy/image.sh
bash tests/deploy/grafana.sh
echo "== deploy: ok"
