#!/usr/bin/env bash
# Sites benchmark: S sites of N nodes each, every site behind ONE shaped uplink shared by
# its nodes, a real Go binary of keadm's size class as the payload, and three contenders
# in one run:
#   off     keadm-batch --relay off: every node gets its own copy over the site's uplink
#   auto    keadm-batch --relay auto: one copy over each uplink, the rest from peers
#   floor   by hand: one xz copy over the uplink to the site's first node, then plain
#           copies from that node to the others over the site's own network, all at once
# The network, all in namespaces of the script's own making (the machine's root namespace
# gets no interface, nothing is routed or bridged to the machine's own interfaces):
#   kbs-ctl     the control host: keadm-batch, the floor's ssh; uplink k is its veth upK,
#               198.19.K.1/30, with a route to site K's LAN through the site's end
#   kbs-siteK   site K's switch and router: bridge br0 (198.18.K.1/24, the site's LAN) with
#               one veth port per node, and the uplink's other end (uplink), 198.19.K.2/30
#   kbs-nodeI   node I: its sshd (in its own mount and pid namespace too, bench/lib/fleet.sh)
#               on eth0, 198.18.K.(J+2)/24 for the site's J-th node; no default route, only
#               the LAN and the control host's 198.19.K.1 through 198.18.K.1
# Each uplink is shaped with htb on both ends, RATE each way: egress of kbs-ctl's upK
# carries what goes to the site, egress of the site's end what comes from it. Node-to-node
# traffic (the relay's reads, the floor's fan-out) stays on the bridge, unshaped. All of
# it (processes in those namespaces, the namespaces, and with them their links and qdiscs)
# is removed on exit, also on failure or Ctrl-C; the script refuses to start if one of its
# namespaces' names exists already.
#
# The uplink's bytes come from the htb classes' own counters. The last line is
# machine-readable:
#   sites: uplink_copies=U relay_vs_off=R relay_vs_floor=F
# U: bytes the busiest site's uplink carried to the site in the auto run, over one xz copy
# of keadm (the smaller of its two packed copies); R and F: the auto run's time over the
# off run's and over the floor's. The contest starts once both the zstd and the xz copy
# are made, so every run sends what a warm run sends.
#
#   bench/sites.sh                         # 2 sites x 20 nodes, 20 Mbit/s, maxRunNum 40
#   S=2 N=5 RATE=50mbit bench/sites.sh     # a quick look
# Knobs (environment): S N C (maxRunNum) RATE (tc syntax) BENCH_KEADM (default
# /usr/bin/containerd, Debian's Go build) STAGING (keadm-batch's staging dir; one outside
# the work dir keeps the packed copies for the next run: they are made at the lowest CPU
# priority and take minutes on a busy machine) KEEP=1 (keep the work dir). Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"

S="${S:-2}"; N="${N:-20}"; C="${C:-40}"; RATE="${RATE:-20mbit}"
BENCH_KEADM="${BENCH_KEADM:-/usr/bin/containerd}"
VERSION=v1.23.1
NODES=$(( S * N ))
for tool in ip tc nsenter xz bc ssh; do
  command -v "$tool" >/dev/null || { echo "bench: needs $tool (iproute2, util-linux, xz-utils, bc, openssh-client)" >&2; exit 1; }
done
[ -f "$BENCH_KEADM" ] || { echo "bench: no payload at $BENCH_KEADM; set BENCH_KEADM" >&2; exit 1; }
# A site's LAN is one /24 (.1 its router, .2 on its nodes), a site's number an octet.
if [ "$S" -lt 1 ] || [ "$S" -gt 256 ] || [ "$N" -lt 2 ] || [ "$N" -gt 253 ]; then
  echo "bench: S must be 1-256 and N 2-253" >&2; exit 1
fi

# The namespaces, by name; none may exist before the run (another run's, or someone
# else's of the same name: the exit would remove them).
ctl_ns=kbs-ctl
site_ns() { echo "kbs-site$1"; }
node_ns() { echo "kbs-node$1"; }
existing=" $(ip netns list | awk '{ print $1 }' | tr '\n' ' ') "
for ns in "$ctl_ns" $(for k in $(seq 0 $(( S - 1 ))); do site_ns "$k"; done) \
    $(for i in $(seq 0 $(( NODES - 1 ))); do node_ns "$i"; done); do
  case "$existing" in *" $ns "*)
    echo "bench: network namespace $ns exists already (another run's?); not touching it" >&2
    exit 1;;
  esac
done

# shellcheck source=bench/lib/fleet.sh
. "$repo/bench/lib/fleet.sh"
site_of() { echo $(( $1 / N )); }
# Node I's address on its site's LAN (fleet.sh's host_of, redefined: its sshd listens
# there, the config names it, the relay's readers bind to it).
host_of() { echo "198.18.$(( $1 / N )).$(( $1 % N + 2 ))"; }
ctl_addr() { echo "198.19.$1.1"; }

# The namespaces this run made, removed on exit with whatever still runs in them (the
# nodes' sshd and their sessions, a keadm-batch or ssh that Ctrl-C or a failure left).
made_ns=()
bench_on_exit() {
  local ns pid
  # The nodes first, as bench_cleanup would (waited for, so bash reports no killed job).
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  for ns in "${made_ns[@]}"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
  done
  for ns in "${made_ns[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  [ ! -e "$work/failed" ] || KEEP=1
}
bench_start keadm-sites

# ns_add NAME: a namespace with lo up and no IPv6 (nothing but the bench's own packets
# crosses a shaped link).
ns_add() {
  ip netns add "$1"
  made_ns+=("$1")
  ip -n "$1" link set dev lo up
  if [ -d /proc/sys/net/ipv6 ]; then
    nsenter --net="/run/netns/$1" -- sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
  fi
}
# shape NS DEV: DEV's egress through one htb class of RATE (1:10, all of its traffic).
shape() {
  tc -n "$1" qdisc add dev "$2" root handle 1: htb default 10
  tc -n "$1" class add dev "$2" parent 1: classid 1:10 htb rate "$RATE" ceil "$RATE" quantum 65536
  tc -n "$1" qdisc add dev "$2" parent 1:10 handle 10: pfifo limit 1000
}
# Bytes the uplink of site K has carried to the site so far.
down_bytes() { tc -n "$ctl_ns" -s class show dev "up$1" classid 1:10 | awk '/Sent/ { print $2; exit }'; }
in_ctl() { ip netns exec "$ctl_ns" "$@"; }

# ---------------------------------------------------------------- the network
echo "==> network: $S sites of $N nodes, each site a bridge behind one $RATE uplink each way"
ns_add "$ctl_ns"
for k in $(seq 0 $(( S - 1 ))); do
  sns=$(site_ns "$k")
  ns_add "$sns"
  nsenter --net="/run/netns/$sns" -- sysctl -qw net.ipv4.ip_forward=1
  ip -n "$sns" link add br0 type bridge
  ip -n "$sns" addr add "198.18.$k.1/24" dev br0
  ip -n "$sns" link set dev br0 up
  ip -n "$ctl_ns" link add "up$k" type veth peer name uplink netns "$sns"
  ip -n "$ctl_ns" addr add "$(ctl_addr "$k")/30" dev "up$k"
  ip -n "$sns" addr add "198.19.$k.2/30" dev uplink
  ip -n "$ctl_ns" link set dev "up$k" up
  ip -n "$sns" link set dev uplink up
  ip -n "$ctl_ns" route add "198.18.$k.0/24" via "198.19.$k.2"
  shape "$ctl_ns" "up$k"   # to the site
  shape "$sns" uplink      # from the site
  for j in $(seq 0 $(( N - 1 ))); do
    i=$(( k * N + j )); nns=$(node_ns "$i")
    ns_add "$nns"
    ip -n "$sns" link add "n$j" type veth peer name eth0 netns "$nns"
    ip -n "$sns" link set dev "n$j" master br0 up
    ip -n "$nns" addr add "$(host_of "$i")/24" dev eth0
    ip -n "$nns" link set dev eth0 up
    ip -n "$nns" route add "$(ctl_addr "$k")/32" via "198.18.$k.1"
    node_netns[i]=$nns
  done
done

start_fleet "$NODES"
ssh_opts

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
  ( cd "$work/sites" && in_ctl "$bin" batch -c config.yaml --known-hosts "$work/known_hosts" \
      --host-key-policy accept-new --preflight off --staging-dir "$STAGING" \
      --run-dir "$rd" --relay "$relay" -q ) >"$work/sites/out-$rd.log" 2>&1 \
    || { printf 'bench: keadm-batch failed after %.2f s, see %s:\n' "$(echo "$(date +%s.%N) - $t0" | bc -l)" "$work/sites/out-$rd.log" >&2
         tail -5 "$work/sites/out-$rd.log" >&2; touch "$work/failed"; exit 1; }
  echo "$(date +%s.%N) - $t0" | bc -l
}

STAGING="${STAGING:-$work/sites/staging}"
# Staging and the packed copies happen once, untimed: the contest compares transfers.
echo "==> staging (the zstd and xz copies, once)"
clear_nodes
( cd "$work/sites" && in_ctl "$bin" batch -c config.yaml --only edge-0000 --known-hosts "$work/known_hosts" \
    --host-key-policy accept-new --preflight off --staging-dir "$STAGING" \
    --run-dir warm -q ) >"$work/sites/out-warm.log" 2>&1 \
  || { echo "bench: the warm-up run failed:" >&2; tail -5 "$work/sites/out-warm.log" >&2; KEEP=1; exit 1; }
# The first run makes the zstd and xz copies beside itself, in processes it does not wait
# for: the contest starts once both are in the cache (a node gets the one that suits it).
for _ in $(seq 1200); do
  ls "$STAGING"/bin/amd64/keadm-*.xz "$STAGING"/bin/amd64/keadm-*.zst >/dev/null 2>&1 && break
  sleep 0.5
done
xz_copy=$(ls "$STAGING"/bin/amd64/keadm-*.xz | head -1)
xzsize=$(stat -c %s "$xz_copy")
echo "    xz copy: $xzsize bytes ($(printf '%.3f' "$(ratio "$xzsize" "$size")")x)"
zst_copy=$(ls "$STAGING"/bin/amd64/keadm-*.zst 2>/dev/null | head -1 || true)
[ -z "$zst_copy" ] || echo "    zstd copy: $(stat -c %s "$zst_copy") bytes ($(printf '%.3f' "$(ratio "$(stat -c %s "$zst_copy")" "$size")")x)"

join='./keadm join --cloudcore-ipport=127.0.0.1:10000 --edgenode-name=edge'
# floor: per site at once, the xz copy over the uplink to its first node, then from that
# node (an ssh client in its network namespace, reading the copy it has just unpacked) to
# every other node of the site over the bridge, all at once.
floor() {
  local t0 k
  t0=$(date +%s.%N)
  for k in $(seq 0 $(( S - 1 ))); do
    (
      first=$(( k * N ))
      in_ctl ssh "${ssh_opts[@]}" "root@$(host_of "$first")" \
        "mkdir -p /tmp/kb-base && cd /tmp/kb-base && xz -dc > keadm && chmod 0755 keadm && $join" < "$xz_copy"
      for i in $(seq $(( first + 1 )) $(( first + N - 1 ))); do
        nsenter --net="/run/netns/$(node_ns "$first")" -- ssh "${ssh_opts[@]}" "root@$(host_of "$i")" \
          "mkdir -p /tmp/kb-base && cd /tmp/kb-base && cat > keadm && chmod 0755 keadm && $join" \
          < "/proc/${node_pid[$first]}/root/tmp/kb-base/keadm" &
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
printf '    %.2f s\n' "$t_floor"
echo "==> keadm-batch --relay off"
clear_nodes
t_off=$(ours run-off off)
printf '    %.2f s\n' "$t_off"
echo "==> keadm-batch --relay auto"
clear_nodes
before=(); for k in $(seq 0 $(( S - 1 ))); do before[k]=$(down_bytes "$k"); done
t_auto=$(ours run-auto auto)
busiest=0
for k in $(seq 0 $(( S - 1 ))); do
  b=$(( $(down_bytes "$k") - before[k] ))
  printf '    site %s: %s bytes over its uplink to the site with --relay auto (%.2f xz copies)\n' "$k" "$b" "$(ratio "$b" "$xzsize")"
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
