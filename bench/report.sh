#!/usr/bin/env bash
# What report.html costs at 5,000 nodes, against baselines measured in the same run:
#  - writing it: `batch report DIR` (reads summary.json, writes the page) against
#    `batch merge DIR --output json` (reads and checks the same summary the same way, and
#    prints it), so the difference is the page alone; time (median of RUNS) and peak RSS.
#    Target: under 1 s and under 20 MiB more than the baseline.
#  - showing it: headless Chromium loading the page to its `load` event and the script's
#    first pass, against a plain HTML page of the same size (the same rows' text in <pre>).
#    Target: under 2 s.
#   bench/report.sh [NODES] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
nodes="${1:-5000}"
runs="${2:-5}"
# KEADM_BATCH=/path/to/keadm-batch measures that binary (a release build) instead.
# shellcheck source=bench/lib/timing.sh
. bench/lib/timing.sh
bench_binary
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/run/nodes"

# A summary of NODES nodes in 10 sites: 3% failed in four classes, 1% timed out, each
# with a transcript path, phases and a cluster check, as a run writes them.
python3 - "$nodes" "$work/run" <<'PY'
import json, random, sys
n, run = int(sys.argv[1]), sys.argv[2]
random.seed(7)
classes = ["token_invalid", "unreachable", "already_joined", "runtime_missing"]
t0 = 1_780_000_000.0
nodes = []
totals = dict(selected=n, succeeded=0, failed=0, timed_out=0, skipped=0, interrupted=0)
for i in range(n):
    start = t0 + (i // 100) * 20 + random.random() * 5
    steps = dict(connect=random.uniform(0.1, 2), prepare=random.uniform(0.1, 1),
                 upload=random.uniform(1, 30), run=random.uniform(5, 60))
    node = dict(index=i, name=f"edge-{i:05d}", address=f"10.{i // 65536}.{i // 256 % 256}.{i % 256}:22",
                bytes_uploaded=17_000_000, uploads_skipped=0, connect_attempts=1, steps=steps,
                started_at=start, transcript=f"{run}/nodes/{i + 1}-edge-{i:05d}.log",
                site=f"site-{i % 10}", arch="arm64")
    r = random.random()
    if r < 0.03:
        node.update(phase="failed", failed_in="running", failure_class=classes[i % 4],
                    error=f"failed to execute keadm command ./keadm join: Process exited with status 1",
                    last_output="Error: token is expired <b>x</b>", exit_status=1)
        totals["failed"] += 1
    elif r < 0.04:
        node.update(phase="timed_out", failed_in="running", error="keadm did not finish within 600 s")
        totals["timed_out"] += 1
    else:
        node.update(phase="succeeded", exit_status=0,
                    cluster=dict(node_name=node["name"], registered_after=3.0, ready_after=random.uniform(5, 20)))
        totals["succeeded"] += 1
    node["finished_at"] = start + sum(steps.values()) + node.get("cluster", {}).get("ready_after", 0)
    nodes.append(node)
summary = dict(version=1, tool="keadm-batch bench", run_id="bench", config="/etc/fleet/edge.yaml",
               command_line="keadm-batch batch -c /etc/fleet/edge.yaml", started_at=t0,
               finished_at=max(x["finished_at"] for x in nodes), interrupted=False, totals=totals,
               nodes=nodes,
               sites=[dict(site=f"site-{s}", nodes=n // 10, uplink_copies=1, uplink_bytes=17_000_000,
                           peer_copies=n // 10 - 1, peer_bytes=17_000_000 * (n // 10 - 1)) for s in range(10)])
with open(f"{run}/summary.json", "w") as f:
    json.dump(summary, f, indent=2)
PY

peak() {
  /usr/bin/time -o "$work/rss" -f '%M' "$@" > /dev/null 2>&1 || true
  tail -1 "$work/rss"
}

# The baseline exits 1 (the summary has failed nodes), as a merge of such a run does.
base=$(time_runs "$runs" "$bin" batch merge "$work/run" --output json)
report=$(time_runs "$runs" "$bin" batch report "$work/run")
base_rss=$(peak "$bin" batch merge "$work/run" --output json)
report_rss=$(peak "$bin" batch report "$work/run")
size=$(stat -c %s "$work/run/report.html")

printf 'nodes: %s, runs: %s (median)\n' "$nodes" "$runs"
printf 'baseline (batch merge --output json): %.3f s, peak RSS %s KiB\n' "$base" "$base_rss"
printf 'batch report:                          %.3f s, peak RSS %s KiB  (%.2fx the baseline; +%.3f s, +%.1f MiB; targets < 1 s, < 20 MiB)\n' \
  "$report" "$report_rss" "$(echo "$report / $base" | bc -l)" "$(echo "$report - $base" | bc -l)" \
  "$(echo "($report_rss - $base_rss) / 1024" | bc -l)"
printf 'report.html: %s bytes\n' "$size"

if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  echo 'chromium or chromedriver missing (scripts/setup.sh installs them): no render figures'
  exit 0
fi
# The plain page: the same bytes as text, no script, no layout beyond a <pre>.
python3 - "$work/run/report.html" "$work/plain.html" <<'PY'
import html, sys
text = open(sys.argv[1], encoding="utf-8").read()
with open(sys.argv[2], "w", encoding="utf-8") as f:
    f.write("<!DOCTYPE html><meta charset=utf-8><title>plain</title><pre>" + html.escape(text) + "</pre>")
PY
python3 bench/lib/render_time.py "$runs" "$work/run/report.html" "$work/plain.html"
