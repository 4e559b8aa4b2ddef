#!/usr/bin/env bash
# Sites benchmark: S sites of N nodes each, every site behind ONE shaped uplink shared by
# its nodes, a real Go binary of keadm's size class as the payload, and three contenders
# in one run:
#   off     keadm-batch --relay off: every node gets its own copy over the site's uplink
#   auto    keadm-batch --relay auto: one copy over each uplink, the rest from peers
#   floor   by hand: one xz copy over the uplink to the site's first node, then plain
#           copies from that node to the others over the site's own network, all at once
# The links: on `lo`, each site gets two htb classes (to the site, from the site), RATE
# each, matched by u32 filters on the pair (this machine's 127.0.0.1, a node of the site):
# what the control host sends to or gets from a site's nodes shares that site's classes,
# while node-to-node traffic (the relay's `ssh -b <own address>`, the floor's fan-out
# from the first node's address) has neither end at 127.0.0.1 and stays unshaped, as a
# site's LAN. Traffic of every other address takes htb's direct path. The shaping is
# removed on exit, also on failure or Ctrl-C.
#
# The uplink's bytes come from the htb classes' own counters. The last line is
# machine-readable:
#   sites: uplink_copies=U relay_vs_off=R relay_vs_floor=F
# U: bytes the busiest site's downlink class carried in the auto run, over one xz copy of
# keadm; R and F: the auto run's time over the off run's and over the floor's.
#
#   bench/sites.sh                         # 2 sites x 20 nodes, 20 Mbit/s, maxRunNum 40
#   S=2 N=5 RATE=50mbit bench/sites.sh     # a quick look
# Knobs (environment): S N C (maxRunNum) RATE (tc syntax) BENCH_KEADM (default
# /usr/bin/containerd, Debian's Go build) KEEP=1 (keep the work dir). Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"

S="${S:-2}"; N="${N:-20}"; C="${C:-40}"; RATE="${RATE:-20mbit}"
BENCH_KEADM="${BENCH_KEADM:-/usr/bin/containerd}"
VERSION=v1.23.1
NODES=$(( S * N ))
for tool in tc xz bc ssh; do
  command -v "$tool" >/dev/null || { echo "bench: needs $tool (iproute2, xz-utils, bc, openssh-client)" >&2; exit 1; }
done
[ -f "$BENCH_KEADM" ] || { echo "bench: no payload at $BENCH_KEADM; set BENCH_KEADM" >&2; exit 1; }
if tc qdisc show dev lo | grep -qv 'noqueue'; then
  echo "bench: lo already has a qdisc ($(tc qdisc show dev lo | head -1)); not touching it" >&2
  exit 1
fi

# A range of its own, so this bench neither shares addresses nor shaping with another.
node_net=127.250
# shellcheck source=bench/lib/fleet.sh
. "$repo/bench/lib/fleet.sh"
# A failure inside a command substitution cannot set KEEP: it leaves a mark instead.
bench_on_exit() { tc qdisc del dev lo root 2>/dev/null || true; [ ! -e "$work/failed" ] || KEEP=1; }
bench_start keadm-sites
start_fleet "$NODES"
ssh_opts
site_of() { echo $(( $1 / N )); }

# ---------------------------------------------------------------- the uplinks
# Site k: class 1:(0x100+2k) to the site, 1:(0x101+2k) from it.
echo "==> shaping lo: $S sites of $N nodes, one $RATE uplink each way per site"
tc qdisc add dev lo root handle 1: htb default 0 direct_qlen 10000
down_class() { printf '1:%x' $(( 0x100 + 2 * $1 )); }
up_class() { printf '1:%x' $(( 0x101 + 2 * $1 )); }
for k in $(seq 0 $(( S - 1 ))); do
  for class in "$(down_class "$k")" "$(up_class "$k")"; do
    tc class add dev lo parent 1: classid "$class" htb rate "$RATE" ceil "$RATE" quantum 65536
    tc qdisc add dev lo parent "$class" handle "${class#1:}:" pfifo limit 1000
  done
done
for i in $(seq 0 $(( NODES - 1 ))); do
  h=$(host_of "$i"); k=$(site_of "$i")
  tc filter add dev lo parent 1: protocol ip prio 1 u32 \
    match ip src 127.0.0.1/32 match ip dst "$h/32" flowid "$(down_class "$k")"
  tc filter add dev lo parent 1: protocol ip prio 1 u32 \
    match ip src "$h/32" match ip dst 127.0.0.1/32 flowid "$(up_class "$k")"
done
# Bytes a class has carried so far.
class_bytes() { tc -s class show dev lo classid "$1" | awk '/Sent/ { print $2; exit }'; }

# ---------------------------------------------------------------- the payload
make_release sites 0 0 "$BENCH_KEADM"
keadm="$work/sites/keadm"
size=$(stat -c %s "$keadm")
echo "==> payload: $BENCH_KEADM behind a shell header, $size bytes"
{
  printf 'keadm:\n  download:\n    enable: false\n  keadmVersion: %s\n  archGroup: [amd64]\n  offlinePackageDir: %s\n' "$VERSION" "$work/sites/packages"
  printf 'maxRunNum: %s\nnodes:\n' "$C"
  for i in $(seq 0 $(( NODES - 1 ))); do
    printf '  - nodeName: edge-%04d\n    site: site-%s\n    keadmCmd: join --cloudcore-ipport=127.0.0.1:10000 --edgenode-name=edge-%04d\n    ssh:\n      ip: %s\n      username: root\n      auth:\n        type: privateKey\n        privateKeyAuth:\n          privateKeyPath: %s\n' \
      "$i" "$(site_of "$i")" "$i" "$(host_of "$i")" "$work/id_ed25519"
  done
} > "$work/sites/config.yaml"

# ours RUNDIR RELAY: keadm-batch; prints seconds; fails on failure.
ours() {
  local rd=$1 relay=$2 t0
  t0=$(date +%s.%N)
  ( cd "$work/sites" && "$bin" batch -c config.yaml --known-hosts "$work/known_hosts" \
      --host-key-policy accept-new --preflight off --staging-dir "$work/sites/staging" \
      --run-dir "$rd" --relay "$relay" -q ) >"$work/sites/out-$rd.log" 2>&1 \
    || { echo "bench: keadm-batch failed, see $work/sites/out-$rd.log:" >&2; tail -5 "$work/sites/out-$rd.log" >&2; touch "$work/failed"; exit 1; }
  echo "$(date +%s.%N) - $t0" | bc -l
}

# Staging and the xz copy happen once, untimed: the contest compares transfers.
echo "==> staging (the xz copy, once)"
clear_nodes
( cd "$work/sites" && "$bin" batch -c config.yaml --only edge-0000 --known-hosts "$work/known_hosts" \
    --host-key-policy accept-new --preflight off --staging-dir "$work/sites/staging" \
    --run-dir warm -q ) >"$work/sites/out-warm.log" 2>&1 \
  || { echo "bench: the warm-up run failed:" >&2; tail -5 "$work/sites/out-warm.log" >&2; KEEP=1; exit 1; }
# The first run makes the xz copy beside itself, in a process it does not wait for: the
# contest starts once the copy is in the cache.
for _ in $(seq 600); do
  ls "$work"/sites/staging/bin/amd64/keadm-*.xz >/dev/null 2>&1 && break
  sleep 0.5
done
xz_copy=$(ls "$work"/sites/staging/bin/amd64/keadm-*.xz | head -1)
xzsize=$(stat -c %s "$xz_copy")
echo "    xz copy: $xzsize bytes ($(printf '%.3f' "$(ratio "$xzsize" "$size")")x)"

join='./keadm join --cloudcore-ipport=127.0.0.1:10000 --edgenode-name=edge'
# floor: per site at once, the xz copy over the uplink to its first node, then the
# binary from that node's address to every other node of the site, all at once.
floor() {
  local t0 k
  t0=$(date +%s.%N)
  for k in $(seq 0 $(( S - 1 ))); do
    (
      first=$(( k * N ))
      ssh "${ssh_opts[@]}" "root@$(host_of "$first")" \
        "mkdir -p /tmp/kb-base && cd /tmp/kb-base && xz -dc > keadm && chmod 0755 keadm && $join" < "$xz_copy"
      for i in $(seq $(( first + 1 )) $(( first + N - 1 ))); do
        ssh "${ssh_opts[@]}" -b "$(host_of "$first")" "root@$(host_of "$i")" \
          "mkdir -p /tmp/kb-base && cd /tmp/kb-base && cat > keadm && chmod 0755 keadm && $join" < "$keadm" &
      done
      wait
    ) &
  done
  wait
  echo "$(date +%s.%N) - $t0" | bc -l
}

echo "==> floor"
clear_nodes
t_floor=$(floor)
echo "==> keadm-batch --relay off"
clear_nodes
t_off=$(ours run-off off)
echo "==> keadm-batch --relay auto"
clear_nodes
before=(); for k in $(seq 0 $(( S - 1 ))); do before[k]=$(class_bytes "$(down_class "$k")"); done
t_auto=$(ours run-auto auto)
busiest=0
for k in $(seq 0 $(( S - 1 ))); do
  b=$(( $(class_bytes "$(down_class "$k")") - before[k] ))
  printf '    site %s: %s bytes over its downlink with --relay auto (%.2f xz copies)\n' "$k" "$b" "$(ratio "$b" "$xzsize")"
  [ "$b" -gt "$busiest" ] && busiest=$b
done

# Every node ends with the staged binary.
for i in $(seq 0 $(( NODES - 1 ))); do
  cmp -s "/proc/${node_pid[$i]}/root/tmp/kubeedge/keadm/keadm" "$keadm" \
    || { echo "bench: node $i's keadm differs after the auto run" >&2; KEEP=1; exit 1; }
done
grep '^site ' "$work/sites/out-run-auto.log" || true
python3 - "$work/sites/run-auto/summary.json" <<'PY'
import json, sys
for s in json.load(open(sys.argv[1])).get("sites", []):
    print("    summary.json: %(site)s: %(uplink_copies)s over the uplink (%(uplink_bytes)s bytes), %(peer_copies)s from peers" % s)
PY

printf '    floor %.2f s, --relay off %.2f s, --relay auto %.2f s\n' "$t_floor" "$t_off" "$t_auto"
printf 'sites: uplink_copies=%.3f relay_vs_off=%.3f relay_vs_floor=%.3f\n' \
  "$(ratio "$busiest" "$xzsize")" "$(ratio "$t_auto" "$t_off")" "$(ratio "$t_auto" "$t_floor")"
