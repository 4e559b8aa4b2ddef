#!/usr/bin/env bash
# Shaped-link benchmark: every node behind its own rate-limited link, a real Go binary of
# keadm's size class as the payload, and five contenders measured alternately in one run:
#   ours    keadm-batch (offline release, maxRunNum C), warm: the release staged and its
#           zstd and xz copies made by an earlier run (the nodes have zstd: they get the
#           zstd copy)
#   raw     OpenSSH, the binary on stdin: `cat > keadm && ./keadm join ...`, xargs -P C
#   floor   OpenSSH, the xz-compressed binary on stdin: `xz -dc > keadm && ./keadm join ...`
#           (the hand-made floor: the fewest bytes a one-line pipe sends; "the xz pipe")
#   zst     OpenSSH, keadm-batch's zstd copy on stdin: `zstd -dcq > keadm && ./keadm join`
#           (the same bytes keadm-batch sends, by hand: keadm-batch's own floor)
#   cold    keadm-batch with nothing staged and no xz copy cached (a staging dir of its
#           own per rep): the first run of a keadm version
#   tgz     OpenSSH, the release tarball as it is on stdin: `tar -xzOf - .../keadm/keadm >
#           keadm && ./keadm join ...` (what a cold run must not be slower than)
# Each node's 127.x address gets two htb classes on `lo` (to the node, from the node), each
# RATE, matched by u32 filters; traffic of every other address takes htb's direct path,
# unshaped, so other users of loopback are not slowed. The shaping is removed on exit,
# also on failure or Ctrl-C.
# With RTT_MS > 0 every contender reaches node i through bench/lib/delay_relay.py, which
# listens on 127.253.x.y:22 (outside the shaped range, so the client-to-relay hop is
# plain loopback) and forwards to the node's 127.252.x.y:22 (the shaped hop), each chunk
# RTT_MS/2 late each way; the run then also prints each contender's time per node and
# keadm-batch's excess over the one-exec floor in round trips.
#
#   bench/shaped.sh                            # 20 nodes at 20 Mbit/s, maxRunNum 10
#   NODES=10 RATE=50mbit REPS=3 bench/shaped.sh
#   RTT_MS=100 NODES=10 bench/shaped.sh       # and 100 ms added per round trip
# Knobs (environment): NODES C RATE (tc syntax) REPS XZ_LEVEL (the floor's, when
# keadm-batch made no xz copy to share; default 6) RTT_MS (added per round trip through
# the delaying relay; default 0, no relay)
# CPU (each node's CPU budget in cores, such as 0.25 for a small ARM board's share: every
# node's sshd, and so all it runs, in a cgroup of its own with that CFS quota; default
# none, the nodes share the machine's cores)
# BENCH_KEADM (the binary to ship; default /usr/bin/containerd, Debian's Go build of
# containerd, else the largest ELF in /usr/bin) KEEP=1 (keep the work dir). Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"

NODES="${NODES:-20}"; C="${C:-10}"; RATE="${RATE:-20mbit}"; REPS="${REPS:-1}"; XZ_LEVEL="${XZ_LEVEL:-6}"
RTT_MS="${RTT_MS:-0}"; CPU="${CPU:-}"
if [ -z "${BENCH_KEADM:-}" ]; then
  if [ -x /usr/bin/containerd ]; then BENCH_KEADM=/usr/bin/containerd
  else
    BENCH_KEADM=$(for f in $(ls -S /usr/bin); do
      [ -f "/usr/bin/$f" ] && [ "$(head -c4 "/usr/bin/$f" | od -An -c | tr -d ' ')" = '177ELF' ] && { echo "/usr/bin/$f"; break; }
    done)
  fi
fi
VERSION=v1.23.1
for tool in tc xz zstd bc /usr/bin/time python3; do
  command -v "$tool" >/dev/null || { echo "bench: needs $tool (iproute2, xz-utils, zstd, bc, time, python3)" >&2; exit 1; }
done
if tc qdisc show dev lo | grep -qv 'noqueue'; then
  echo "bench: lo already has a qdisc ($(tc qdisc show dev lo | head -1)); not touching it" >&2
  exit 1
fi

# shellcheck source=bench/lib/fleet.sh
. "$repo/bench/lib/fleet.sh"
# Runs on exit (bench_start's trap), also on failure or Ctrl-C.
bench_on_exit() {
  tc qdisc del dev lo root 2>/dev/null || true
  for g in "${cpu_groups[@]}"; do
    # Back to the root group, then the group (now empty) goes.
    while read -r p; do echo "$p" > "$cpu_root/cgroup.procs" 2>/dev/null || true; done < "$g/cgroup.procs" 2>/dev/null
    rmdir "$g" 2>/dev/null || true
  done
}
cpu_groups=()
bench_start keadm-shaped
start_fleet "$NODES"

# ---------------------------------------------------------------- the nodes' CPU
# cgroup v2's cpu.max where the cpu controller is there, else v1's CFS quota.
if [ -n "$CPU" ]; then
  period=100000
  quota=$(printf '%.0f' "$(echo "$CPU * $period" | bc -l)")
  if grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    cpu_root=/sys/fs/cgroup
    echo +cpu > "$cpu_root/cgroup.subtree_control" 2>/dev/null || true
  elif [ -w /sys/fs/cgroup/cpu/cgroup.procs ]; then
    cpu_root=/sys/fs/cgroup/cpu
  else
    echo "bench: CPU=$CPU needs a cgroup cpu controller (v2 cpu.max or v1 cpu.cfs_quota_us)" >&2; exit 1
  fi
  echo "==> each node's CPU: $CPU of a core ($quota us per $period us, $cpu_root)"
  for i in $(seq 0 $(( NODES - 1 ))); do
    g="$cpu_root/keadm-bench-node$i-$$"
    mkdir "$g"; cpu_groups+=("$g")
    if [ -e "$g/cpu.max" ]; then echo "$quota $period" > "$g/cpu.max"
    else echo "$period" > "$g/cpu.cfs_period_us"; echo "$quota" > "$g/cpu.cfs_quota_us"; fi
    echo "${node_pid[$i]}" > "$g/cgroup.procs"
  done
fi
ssh_opts
export -f host_of

# ---------------------------------------------------------------- the links
# Class 1:(2i+0x100) carries what is sent to node i, 1:(2i+0x101) what node i sends.
# Unclassified packets (htb's `default` names no class) go out directly, unshaped.
echo "==> shaping lo: $NODES nodes, $RATE each way per node"
tc qdisc add dev lo root handle 1: htb default 0 direct_qlen 10000
for i in $(seq 0 $(( NODES - 1 ))); do
  h=$(host_of "$i")
  for side in 0 1; do
    dir=dst; [ "$side" = 1 ] && dir=src
    id=$(printf '%x' $(( 0x100 + 2 * i + side )))
    tc class add dev lo parent 1: classid "1:$id" htb rate "$RATE" ceil "$RATE" quantum 65536
    tc qdisc add dev lo parent "1:$id" handle "$id:" pfifo limit 1000
    tc filter add dev lo parent 1: protocol ip prio 1 u32 match ip "$dir" "$h/32" flowid "1:$id"
  done
done

# ---------------------------------------------------------------- the added round trip
# Every contender connects to `host_of I $entry_net`: the node itself, or with RTT_MS the
# relay's twin address, whose traffic to the node then crosses the node's shaped link.
entry_net=127.252
if [ "$RTT_MS" != 0 ]; then
  entry_net=127.253
  echo "==> delay relay: $RTT_MS ms added per round trip, $entry_net.x.y:22 -> node:22"
  routes=()
  for i in $(seq 0 $(( NODES - 1 ))); do routes+=("$(host_of "$i" "$entry_net"):22=$(host_of "$i"):22"); done
  python3 "$repo/bench/lib/delay_relay.py" "$RTT_MS" "${routes[@]}" >"$work/relay.out" 2>"$work/relay.log" &
  pids+=("$!")
  for _ in $(seq 200); do grep -q ready "$work/relay.out" && break; sleep 0.05; done
  grep -q ready "$work/relay.out" || { echo "bench: the relay did not start: $(cat "$work/relay.log")" >&2; exit 1; }
fi
export BENCH_NET=$entry_net

# ---------------------------------------------------------------- the payload
make_release shaped 0 0 "$BENCH_KEADM"
keadm="$work/shaped/keadm"
size=$(stat -c %s "$keadm")
tgz_path="$work/shaped/packages/amd64/keadm-$VERSION-linux-amd64.tar.gz"
tgz=$(stat -c %s "$tgz_path")
echo "==> payload: $BENCH_KEADM behind a shell header, $size bytes (gzip tarball $tgz)"
make_config shaped "$NODES" "$C"
make_config shaped 1 1 warm.yaml

# ---------------------------------------------------------------- contenders
join='./keadm join --cloudcore-ipport=127.0.0.1:10000 --edgenode-name=edge'
# openssh MODE(raw|floor|tgz) TIMES: one ssh per node, C at a time; prints seconds, and
# appends each ssh's start and end to TIMES.
openssh() {
  local mode=$1 times=$2 remote input t0
  if [ "$mode" = raw ]; then
    remote="mkdir -p /tmp/kb-base && cd /tmp/kb-base && cat > keadm && chmod 0755 keadm && $join"
    input=$keadm
  elif [ "$mode" = zst ]; then
    remote="mkdir -p /tmp/kb-base && cd /tmp/kb-base && zstd -dcq > keadm && chmod 0755 keadm && $join"
    input=$work/keadm.zst
  elif [ "$mode" = tgz ]; then
    remote="mkdir -p /tmp/kb-base && cd /tmp/kb-base && tar -xzOf - keadm-$VERSION-linux-amd64/keadm/keadm > keadm && chmod 0755 keadm && $join"
    input=$tgz_path
  else
    remote="mkdir -p /tmp/kb-base && cd /tmp/kb-base && xz -dc > keadm && chmod 0755 keadm && $join"
    input=$work/keadm.xz
  fi
  t0=$(date +%s.%N)
  seq 0 $(( NODES - 1 )) | env BENCH_INPUT="$input" BENCH_REMOTE="$remote" BENCH_TIMES="$times" \
    xargs -P "$C" -I{} bash -c '
      s=$(date +%s.%N)
      ssh "$@" "root@$(host_of {} "$BENCH_NET")" "$BENCH_REMOTE" < "$BENCH_INPUT" || echo "bench: node {} failed" >&2
      echo "$s $(date +%s.%N)" >> "$BENCH_TIMES"' \
      _ "${ssh_opts[@]}"
  echo "$(date +%s.%N) - $t0" | bc -l
}

# ours RUNDIR [CONFIG] [STAGING]: keadm-batch; prints seconds; fails on failure.
ours() {
  local rd=$1 config=${2:-config.yaml} staging=${3:-$work/shaped/staging} t0
  t0=$(date +%s.%N)
  ( cd "$work/shaped" && "$bin" batch -c "$config" --known-hosts "$work/known_hosts" \
      --host-key-policy off --preflight off --staging-dir "$staging" --run-dir "$rd" -q ) \
    >"$work/shaped/out.log" 2>&1 \
    || { echo "bench: keadm-batch failed, see $work/shaped/out.log:" >&2; tail -5 "$work/shaped/out.log" >&2; KEEP=1; exit 1; }
  echo "$(date +%s.%N) - $t0" | bc -l
}

# have_copies STAGING: whether the zstd and xz copies are both in STAGING.
have_copies() { ls "$1"/bin/amd64/keadm-*.xz "$1"/bin/amd64/keadm-*.zst >/dev/null 2>&1; }

# wait_copy STAGING: waits for the zstd and xz copies a keadm-batch run started in
# STAGING (their processes outlive a run that ends first) and prints how long that took;
# the next contender should not share the cores with them.
wait_copy() {
  local t0 i
  t0=$(date +%s.%N)
  for i in $(seq 6000); do
    have_copies "$1" && break
    sleep 0.1
  done
  have_copies "$1" || { echo "bench: no zstd and xz copies in $1 after 600 s" >&2; exit 1; }
  echo "$(date +%s.%N) - $t0" | bc -l
}

# The first run stages the release and starts its xz copy (once per binary), timed apart,
# on one node, then waits for the copy, so the warm contest below compares transfers.
clear_nodes
first=$(ours run-warm warm.yaml)
printf '    first run (staging, 1 node): %.2f s; its copies landed %.2f s after it\n' "$first" "$(wait_copy "$work/shaped/staging")"

# The floor sends the same bytes as keadm-batch: its xz copy from the staging dir, when
# the warm-up made one; else `xz -XZ_LEVEL` of the binary (kept across runs: compressing
# 50-80 MB takes a minute or more on a busy machine).
floor_xz=$(ls "$work"/shaped/staging/bin/amd64/keadm-*.xz 2>/dev/null | head -1 || true)
if [ -z "$floor_xz" ]; then
  cache=/var/tmp/keadm-shaped-cache; mkdir -p "$cache"
  floor_xz="$cache/$(sha256sum "$keadm" | cut -c1-64).xz$XZ_LEVEL"
  [ -s "$floor_xz" ] || { xz -"$XZ_LEVEL" -T0 -c "$keadm" > "$floor_xz.part" && mv "$floor_xz.part" "$floor_xz"; }
fi
ln -s "$floor_xz" "$work/keadm.xz"
xzsize=$(stat -L -c %s "$work/keadm.xz")
echo "    floor's xz stream ($floor_xz): $xzsize bytes ($(printf '%.3f' "$(ratio "$xzsize" "$size")")x)"
ln -s "$(ls "$work"/shaped/staging/bin/amd64/keadm-*.zst | head -1)" "$work/keadm.zst"
zstsize=$(stat -L -c %s "$work/keadm.zst")
echo "    keadm-batch's zstd copy: $zstsize bytes ($(printf '%.3f' "$(ratio "$zstsize" "$size")")x)"

# Exec channels (sessions) the nodes' sshd opened so far, all nodes together.
sessions() { cat "$work"/node*/sshd.log | grep -c 'Starting session' || true; }

o=(); r=(); f=(); z=(); c=(); t=(); ours_sessions=0; floor_sessions=0; cold_sent=0
for rep in $(seq "$REPS"); do
  clear_nodes; s0=$(sessions); f+=("$(openssh floor "$work/times-floor")")
  floor_sessions=$(( floor_sessions + $(sessions) - s0 ))
  clear_nodes; s0=$(sessions); o+=("$(ours "run-$rep")")
  ours_sessions=$(( ours_sessions + $(sessions) - s0 ))
  clear_nodes; z+=("$(openssh zst "$work/times-zst")")
  clear_nodes; r+=("$(openssh raw "$work/times-raw")")
  clear_nodes; t+=("$(openssh tgz "$work/times-tgz")")
  # Cold: a staging dir no run has used, so nothing is staged and no xz copy is cached.
  clear_nodes; c+=("$(ours "cold-$rep" config.yaml "$work/shaped/staging-cold-$rep")")
  landed=$(wait_copy "$work/shaped/staging-cold-$rep")
  cold_sent=$(grep -o '"bytes_uploaded": [0-9]*' "$work/shaped/cold-$rep/summary.json" | awk '{s+=$2} END {printf "%d\n", s}')
  printf '    rep %s: keadm-batch %.2f s, floor %.2f s, zstd pipe %.2f s, raw %.2f s, tarball pipe %.2f s, keadm-batch cold %.2f s (its copies landed %.2f s after it)\n' \
    "$rep" "${o[-1]}" "${f[-1]}" "${z[-1]}" "${r[-1]}" "${t[-1]}" "${c[-1]}" "$landed"
done
# The last keadm-batch run's binaries, checked on every node. This untimed run also times
# the node's work after the last byte on the node's own clock (the nodes share the host's):
# inside each node's mount namespace only, `zstd -dcq` becomes `cat | zstd -dcq`, with the time
# it started (the transfer's start, give or take a process start) and the time `cat` saw
# the end of its input (the last byte's arrival) written to the node's /tmp; the node's
# pgid file is written once the binary is unpacked, checked and in place, right before
# keadm starts.
cp "$(command -v zstd)" "$work/zstd-real"
cat > "$work/zstd-stopwatch" <<EOF
#!/bin/sh
case "\$*" in
  -dcq) date +%s.%N > /tmp/.kb-bench-start
       { cat; date +%s.%N > /tmp/.kb-bench-eof; } | exec $work/zstd-real -dcq ;;
  *) exec $work/zstd-real "\$@" ;;
esac
EOF
chmod 0755 "$work/zstd-stopwatch"
for i in $(seq 0 $(( NODES - 1 ))); do
  nsenter -t "${node_pid[$i]}" -m mount --bind "$work/zstd-stopwatch" "$(command -v zstd)"
done
clear_nodes
ours run-check >/dev/null
node_side=$(python3 - "$NODES" "${node_pid[@]}" <<'PY'
import os, statistics, sys
n, pids = int(sys.argv[1]), sys.argv[2:]
after, shares = [], []
for i in range(n):
    root = "/proc/%s/root/tmp" % pids[i]
    try:
        start = float(open(root + "/.kb-bench-start").read())
        eof = float(open(root + "/.kb-bench-eof").read())
        placed = os.stat(root + "/kubeedge/keadm/.keadm-batch.%d.pgid" % i).st_mtime
    except (OSError, ValueError):
        continue
    transfer = max(eof - start, 1e-3)
    after.append(placed - eof)
    shares.append((placed - eof) / transfer)
if after:
    print("node-side time after the last byte, on the node's clock: median %.3f s, %.1f%% of the node's transfer (max %.1f%%; target <= 10%%; %d of %d nodes)"
          % (statistics.median(after), 100 * statistics.median(shares), 100 * max(shares), len(after), n))
else:
    print("node-side time after the last byte, on the node's clock: not measured (no node unpacked a zstd copy)")
PY
)
same=0
for i in $(seq 0 $(( NODES - 1 ))); do
  cmp -s "$keadm" "/proc/${node_pid[$i]}/root/tmp/kubeedge/keadm/keadm" && same=$(( same + 1 ))
done
sent=$(grep -o '"bytes_uploaded": [0-9]*' "$work/shaped/run-check/summary.json" | awk '{s+=$2} END {printf "%d\n", s}')
per_node=$(( sent / NODES ))
clear_nodes

O=$(printf '%s\n' "${o[@]}" | median); F=$(printf '%s\n' "${f[@]}" | median); R=$(printf '%s\n' "${r[@]}" | median)
Z=$(printf '%s\n' "${z[@]}" | median)
CO=$(printf '%s\n' "${c[@]}" | median); T=$(printf '%s\n' "${t[@]}" | median)
echo
echo "==> results ($(nproc) cores; $NODES nodes at $RATE, maxRunNum $C; median of $REPS)"
printf 'keadm-batch %7.2f s   floor (xz on stdin) %7.2f s   raw OpenSSH %7.2f s\n' "$O" "$F" "$R"
printf 'keadm-batch / floor %.2fx (target <= 1.05x)   keadm-batch / raw %.2fx (target <= 0.25x)\n' \
  "$(ratio "$O" "$F")" "$(ratio "$O" "$R")"
printf 'cold: keadm-batch %7.2f s   tarball pipe %7.2f s   cold / tarball pipe %.2fx (target <= 1.10x)   cold / warm %.2fx\n' \
  "$CO" "$T" "$(ratio "$CO" "$T")" "$(ratio "$CO" "$O")"
printf 'warm keadm-batch / tarball pipe %.2fx (target <= 0.80x)   warm / xz pipe %.2fx   xz pipe / tarball pipe %.2fx%s\n' \
  "$(ratio "$O" "$T")" "$(ratio "$O" "$F")" "$(ratio "$F" "$T")" "${CPU:+   (each node $CPU of a core)}"
better=$T; [ "$(echo "$F < $T" | bc -l)" = 1 ] && better=$F
printf 'warm keadm-batch / zstd pipe (the same bytes) %.2fx   warm / the better of the gzip and xz pipes %.2fx   zstd pipe %.2f s\n' \
  "$(ratio "$O" "$Z")" "$(ratio "$O" "$better")" "$Z"
printf 'cold: bytes per node %d (tarball %d, xz copy %d, zstd copy %d)\n' "$(( cold_sent / NODES ))" "$tgz" "$xzsize" "$zstsize"
printf 'bytes per node %d for a %d-byte keadm: %.3fx (target <= 0.20x; floor %.3fx, tarball %.3fx); %d/%d nodes byte-identical\n' \
  "$per_node" "$size" "$(ratio "$per_node" "$size")" "$(ratio "$xzsize" "$size")" "$(ratio "$tgz" "$size")" "$same" "$NODES"
echo "$node_side"
# The node's work after the last byte (unpack, hash, move into place), from each timed
# run's transcripts: the time from the control host handing the SSH engine the last byte
# to the node's "received" line, an upper bound (bytes still in socket buffers and on the
# link count as node time), against the transfer from first to last byte.
python3 - "$work"/shaped/run-[0-9]*/ <<'PY'
import glob, re, statistics, sys
pat = re.compile(r"node-side time after the last byte: at most ([0-9.]+) s \(the transfer, first to last byte: ([0-9.]+) s\)")
found = [(float(a), float(t)) for d in sys.argv[1:] for f in glob.glob(d + "**/*.log", recursive=True)
         for a, t in pat.findall(open(f, errors="replace").read())]
if not found:
    print("node-side time after the last byte, upper bound from the control host: not in the transcripts (nothing was sent in the run's channel)")
else:
    # The control host's first-to-last-byte time falls short of the link's by what the
    # buffers held, so it is no denominator for a share: seconds only.
    print("node-side time after the last byte, upper bound from the control host: median %.3f s, max %.3f s (%d uploads)"
          % (statistics.median(a for a, _ in found), max(a for a, _ in found), len(found)))
PY

[ "$RTT_MS" != 0 ] || exit 0
# Time per node: keadm-batch's from summary.json (each node's started_at to finished_at,
# connect included), OpenSSH's from each ssh's start to its end; medians over all nodes
# of all reps.
per_node_ours() {
  python3 - "$work"/shaped/run-[0-9]*/summary.json <<'PY'
import json, sys
for path in sys.argv[1:]:
    for n in json.load(open(path))["nodes"]:
        s = n["steps"]
        print(n["finished_at"] - n["started_at"], *(s[k] or 0 for k in ("connect", "prepare", "upload", "run")))
PY
}
span() { awk '{printf "%.6f\n", $2 - $1}' "$1" | median; }
col() { per_node_ours | awk -v c="$1" '{print $c}' | median; }
PO=$(col 1); PF=$(span "$work/times-floor"); PR=$(span "$work/times-raw")
rtt=$(echo "$RTT_MS / 1000" | bc -l)
echo
echo "==> per node, $RTT_MS ms added per round trip (median over $NODES nodes x $REPS reps)"
printf 'keadm-batch %.2f s (connect %.2f, prepare %.2f, upload %.2f, run %.2f)   floor %.2f s   raw OpenSSH %.2f s\n' \
  "$PO" "$(col 2)" "$(col 3)" "$(col 4)" "$(col 5)" "$PF" "$PR"
printf 'keadm-batch per node - floor per node: %+.2f s = %+.2f round trips (target <= +1)\n' \
  "$(echo "$PO - $PF" | bc -l)" "$(echo "($PO - $PF) / $rtt" | bc -l)"
printf 'exec channels per node: keadm-batch %.2f, floor %.2f\n' \
  "$(ratio "$ours_sessions" $(( NODES * REPS )))" "$(ratio "$floor_sessions" $(( NODES * REPS )))"
