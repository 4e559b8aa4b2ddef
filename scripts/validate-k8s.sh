#!/usr/bin/env bash
# Validates docs/kubernetes/*.yaml offline against the Kubernetes JSON schemas bundled in
# the PyPI package kubernetes-validate (no cluster, no network after the install):
# strict mode, so unknown fields are errors too.
#   scripts/validate-k8s.sh            # against Kubernetes 1.37 (the package's default)
#   K8S_VERSION=1.33 scripts/validate-k8s.sh
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${KEADM_BATCH_K8S_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/keadm-batch/k8s-validate-venv}"
if [ ! -x "$venv/bin/kubernetes-validate" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet 'kubernetes-validate==1.37.0'
fi
args=(--strict)
[ -n "${K8S_VERSION:-}" ] && args+=(-k "$K8S_VERSION")
"$venv/bin/kubernetes-validate" "${args[@]}" docs/kubernetes/*.yaml
