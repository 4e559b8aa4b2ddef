#!/usr/bin/env bash
# Validates and dry-runs a generated 10,000-node config, and prints the time next to a
# baseline measured in the same run: the same binary printing its --help (process start
# and exit, the floor for any invocation). Target: under 1 second on a 2-core machine.
#   bench/validate.sh [NODES] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
nodes="${1:-10000}"
runs="${2:-5}"
# KEADM_BATCH=/path/to/keadm-batch measures that binary (a release build) instead.
# shellcheck source=bench/lib/timing.sh
. bench/lib/timing.sh
bench_binary
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

python3 - "$nodes" > "$work/config.yaml" <<'PY'
import sys
n = int(sys.argv[1])
print("keadm:\n  keadmVersion: v1.23.1\n  archGroup: [amd64, arm64]\n  cmdTplArgs:\n    cloud: 192.0.2.10:10000\n    token: abc.def\nmaxRunNum: 50\nx-ssh: &ssh\n  username: root\n  auth:\n    type: password\n    passwordAuth:\n      password: pw-secret\nnodes:")
for i in range(n):
    print(f"  - nodeName: edge-{i:05d}\n    keadmCmd: 'join --cloudcore-ipport={{{{.cloud}}}} --edgenode-name=edge-{i:05d} --token={{{{.token}}}}'\n    ssh:\n      <<: *ssh\n      ip: 10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}")
PY


base=$(time_runs "$runs" "$bin" --help)
dry=$(time_runs "$runs" "$bin" batch -c "$work/config.yaml" --dry-run --known-hosts "$work/kh")
rss=$( { /usr/bin/time -f '%M' "$bin" batch -c "$work/config.yaml" --dry-run --known-hosts "$work/kh" > /dev/null; } 2>&1 | tail -1)
printf 'nodes: %s, runs: %s (median)\n' "$nodes" "$runs"
printf 'baseline (--help):        %.3f s\n' "$base"
printf 'validate + dry-run:       %.3f s  (%.1fx the baseline; target < 1 s)\n' "$dry" "$(echo "$dry / $base" | bc -l)"
printf 'peak RSS:                 %s KiB\n' "$rss"
