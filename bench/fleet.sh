#!/usr/bin/env bash
# Fleet benchmark: keadm-batch against the floor OpenSSH sets on this machine, measured in
# the same run. Starts N real sshd nodes on loopback (each with a private tmpfs /tmp in its
# own mount and pid namespace), builds fake offline keadm releases, and runs:
#   W1  NODES1 nodes, SIZE1 MiB incompressible keadm, maxRunNum C1
#       baseline: one `ssh -c aes128-gcm@openssh.com -o KexAlgorithms=curve25519-sha256`
#       per node streaming keadm over stdin, `xargs -P C1`
#   W2  W1 again with keadm already on every node; baseline: ssh running only keadm join
#   W3  NODES3 nodes, SIZE3 MiB keadm whose join sleeps SLEEP3 s, maxRunNum C3
#   W4  bytes on the wire per node for a compressible real ELF (W4_ELF) vs its size
#   shard  (not in the default list) what one pod of docs/kubernetes/shards-job.yaml needs:
#       SHARD_NODES nodes, maxRunNum SHARD_C, the real ELF SHARD_ELF as keadm; a cold run
#       (nothing staged: it stages and starts the xz copy, as every pod of the Job does,
#       its staging being an emptyDir) then a warm one; wall, CPU-s, peak RSS of each, and
#       of the xz copy's process beside the cold run
# Prints each figure as a ratio to its baseline, and keadm-batch's peak RSS.
#
#   bench/fleet.sh                      # everything at full size, median of REPS=3
#   QUICK=1 bench/fleet.sh              # scaled down: 20 nodes, 8 MiB, 60 nodes for W3
#   WORKLOADS="w1 w2" REPS=1 bench/fleet.sh
# Knobs (environment): NODES1 SIZE1 C1 NODES3 SIZE3 C3 SLEEP3 NODES4 W4_ELF REPS
# SHARD_NODES SHARD_C SHARD_ELF KEADM_BATCH (measure that binary instead of building one)
# WORKLOADS KEEP=1 (keep the work dir), BASE_WRAP (the same in front of the baseline's xargs), OURS_WRAP (a profiler in front of keadm-batch, e.g.
# OURS_WRAP='perf record -g -o /tmp/kb-{run}.perf --'; {run} becomes the run's name). Needs root (namespaces, sshd on 127.x:22).
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
# shellcheck source=bench/lib/fleet.sh
. "$repo/bench/lib/fleet.sh"

if [ "${QUICK:-}" = 1 ]; then
  : "${NODES1:=20}" "${SIZE1:=8}" "${C1:=10}" "${NODES3:=60}" "${SIZE3:=1}" "${C3:=20}" "${NODES4:=5}" "${REPS:=1}"
fi
NODES1="${NODES1:-100}"; SIZE1="${SIZE1:-40}"; C1="${C1:-50}"
NODES3="${NODES3:-500}"; SIZE3="${SIZE3:-1}"; C3="${C3:-100}"; SLEEP3="${SLEEP3:-2}"
NODES4="${NODES4:-10}"; REPS="${REPS:-3}"
SHARD_NODES="${SHARD_NODES:-100}"; SHARD_C="${SHARD_C:-50}"
WORKLOADS="${WORKLOADS:-w1 w2 w3 w4}"
if [ -z "${W4_ELF:-}" ]; then
  # A Go binary of the Kubernetes family is the closest stand-in for keadm: kubectl if one
  # is installed (the Google Cloud SDK ships several), else the largest ELF in /usr/bin.
  W4_ELF=$( { command -v kubectl; ls -S /usr/lib/google-cloud-sdk/bin/kubectl* 2>/dev/null; } | head -1 || true)
fi
if [ -z "${W4_ELF:-}" ]; then
  W4_ELF=$(for f in $(ls -S /usr/bin); do
    [ -f "/usr/bin/$f" ] && [ "$(head -c4 "/usr/bin/$f" | od -An -c | tr -d ' ')" = '177ELF' ] && { echo "/usr/bin/$f"; break; }
  done)
fi
SHARD_ELF="${SHARD_ELF:-$W4_ELF}"
VERSION=v1.23.1

bench_start keadm-bench

fleet_size=0
for w in $WORKLOADS; do
  case $w in
    w1|w2) [ "$NODES1" -gt "$fleet_size" ] && fleet_size=$NODES1 ;;
    w3) [ "$NODES3" -gt "$fleet_size" ] && fleet_size=$NODES3 ;;
    w4) [ "$NODES4" -gt "$fleet_size" ] && fleet_size=$NODES4 ;;
    shard) [ "$SHARD_NODES" -gt "$fleet_size" ] && fleet_size=$SHARD_NODES ;;
  esac
done

# ---------------------------------------------------------------- the fleet
start_fleet "$fleet_size"

# ---------------------------------------------------------------- runners
ssh_opts
export -f host_of

# baseline NODES C UPLOAD(1|0) KEADM: one ssh per node, C at a time; prints seconds.
baseline() {
  local n=$1 c=$2 upload=$3 keadm=$4 remote
  if [ "$upload" = 1 ]; then
    remote='mkdir -p /tmp/kb-base && cat > /tmp/kb-base/keadm && chmod 0755 /tmp/kb-base/keadm && cd /tmp/kb-base && ./keadm join --cloudcore-ipport=127.0.0.1:10000 --edgenode-name=edge'
  else
    remote='cd /tmp/kb-base && ./keadm join --cloudcore-ipport=127.0.0.1:10000 --edgenode-name=edge'
  fi
  local t0 t1 c0
  c0=$(busy); t0=$(date +%s.%N)
  seq 0 $(( n - 1 )) | ${BASE_WRAP:-} env BENCH_KEADM="$keadm" BENCH_UPLOAD="$upload" BENCH_REMOTE="$remote" \
    xargs -P "$c" -I{} bash -c '
      h=$(host_of {})
      if [ "$BENCH_UPLOAD" = 1 ]; then ssh "$@" "root@$h" "$BENCH_REMOTE" < "$BENCH_KEADM"
      else ssh "$@" "root@$h" "$BENCH_REMOTE" < /dev/null; fi || echo "baseline: node {} failed" >&2' \
      _ "${ssh_opts[@]}"
  t1=$(date +%s.%N)
  echo "$(busy) - $c0" | bc -l > "$work/lastcpu"
  echo "$t1 - $t0" | bc -l
}

# ours NAME RUNDIR [ARGS...]: runs keadm-batch; prints "seconds rss_kib"; fails on failure.
# $work/NAME/rss keeps GNU time's `%e %U %S %M` (wall, user, sys, peak RSS in KiB).
ours() {
  local name=$1 rd=$2; shift 2
  local t0 t1 rss wrap=${OURS_WRAP:-}
  wrap=${wrap//\{run\}/$rd}
  local c0
  c0=$(busy); t0=$(date +%s.%N)
  ( cd "$work/$name" && /usr/bin/time -f '%e %U %S %M' -o "$work/$name/rss" $wrap "$bin" batch -c config.yaml \
      --known-hosts "$work/known_hosts" --host-key-policy off --preflight off --staging-dir "$work/$name/staging" \
      --run-dir "$rd" -q "$@" ) >"$work/$name/out.log" 2>&1 \
    || { echo "bench: keadm-batch failed, see $work/$name/out.log:" >&2; tail -5 "$work/$name/out.log" >&2; KEEP=1; exit 1; }
  t1=$(date +%s.%N)
  echo "$(busy) - $c0" | bc -l > "$work/lastcpu"
  rss=$(tail -1 "$work/$name/rss" | awk '{print $4}')
  echo "$(echo "$t1 - $t0" | bc -l) $rss"
}

report() { # LABEL OURS BASE TARGET RSS OURS_CPU BASE_CPU
  printf '%-4s keadm-batch %7.2f s   baseline %7.2f s   ratio %5.2fx (target <= %s)   peak RSS %s MiB   machine CPU %.1f s vs %.1f s\n' \
    "$1" "$2" "$3" "$(ratio "$2" "$3")" "$4" "$(( $5 / 1024 ))" "$6" "$7"
}
results=()

# ---------------------------------------------------------------- W1 and W2
if [[ " $WORKLOADS " == *" w1 "* || " $WORKLOADS " == *" w2 "* ]]; then
  echo "==> W1/W2: $NODES1 nodes, $SIZE1 MiB incompressible keadm, maxRunNum $C1, median of $REPS"
  make_release w1 "$SIZE1" 0
  make_config w1 "$NODES1" "$C1"
  b1=(); o1=(); r1=(); b2=(); o2=(); r2=(); cb1=(); co1=(); cb2=(); co2=()
  for rep in $(seq "$REPS"); do
    clear_nodes
    b1+=("$(baseline "$NODES1" "$C1" 1 "$work/w1/keadm")")
    cb1+=("$(cat "$work/lastcpu")")
    clear_nodes
    read -r t rss < <(ours w1 "run-w1-$rep"); o1+=("$t"); r1+=("$rss")
    co1+=("$(cat "$work/lastcpu")")
    # W2: keadm is on every node now (ours in its dir, the baseline's in /tmp/kb-base).
    for i in $(seq 0 $(( NODES1 - 1 ))); do
      mkdir -p "/proc/${node_pid[$i]}/root/tmp/kb-base"
      cp "$work/w1/keadm" "/proc/${node_pid[$i]}/root/tmp/kb-base/keadm"
    done
    b2+=("$(baseline "$NODES1" "$C1" 0 "$work/w1/keadm")")
    cb2+=("$(cat "$work/lastcpu")")
    read -r t rss < <(ours w1 "run-w2-$rep"); o2+=("$t"); r2+=("$rss")
    co2+=("$(cat "$work/lastcpu")")
    sent=$(grep -o '"bytes_uploaded": [0-9]*' "$work/w1/run-w2-$rep/summary.json" | awk '{s+=$2} END {printf "%d\n", s}')
    [ "$sent" = 0 ] || echo "bench: W2 uploaded $sent bytes; expected none" >&2
    printf '    rep %s: W1 ours %.2f s (%.1f CPU-s) base %.2f s (%.1f CPU-s); W2 ours %.2f s (%.1f CPU-s) base %.2f s (%.1f CPU-s)\n' \
      "$rep" "${o1[-1]}" "${co1[-1]}" "${b1[-1]}" "${cb1[-1]}" "${o2[-1]}" "${co2[-1]}" "${b2[-1]}" "${cb2[-1]}"
  done
  clear_nodes
  W1=$(printf '%s\n' "${o1[@]}" | median); B1=$(printf '%s\n' "${b1[@]}" | median)
  W2=$(printf '%s\n' "${o2[@]}" | median); B2=$(printf '%s\n' "${b2[@]}" | median)
  R1=$(printf '%s\n' "${r1[@]}" | sort -n | tail -1); R2=$(printf '%s\n' "${r2[@]}" | sort -n | tail -1)
  [[ " $WORKLOADS " == *" w1 "* ]] && results+=("$(report W1 "$W1" "$B1" "1.0x, RSS <= 64 MiB" "$R1" "$(printf '%s\n' "${co1[@]}" | median)" "$(printf '%s\n' "${cb1[@]}" | median)")")
  [[ " $WORKLOADS " == *" w2 "* ]] && results+=("$(report W2 "$W2" "$B2" 1.2x "$R2" "$(printf '%s\n' "${co2[@]}" | median)" "$(printf '%s\n' "${cb2[@]}" | median)")")
fi

# ---------------------------------------------------------------- W3
if [[ " $WORKLOADS " == *" w3 "* ]]; then
  echo "==> W3: $NODES3 nodes, $SIZE3 MiB keadm, join sleeps $SLEEP3 s, maxRunNum $C3, median of $REPS"
  make_release w3 "$SIZE3" "$SLEEP3"
  make_config w3 "$NODES3" "$C3"
  b3=(); o3=(); r3=(); cb3=(); co3=()
  for rep in $(seq "$REPS"); do
    clear_nodes
    b3+=("$(baseline "$NODES3" "$C3" 1 "$work/w3/keadm")")
    cb3+=("$(cat "$work/lastcpu")")
    clear_nodes
    read -r t rss < <(ours w3 "run-w3-$rep"); o3+=("$t"); r3+=("$rss")
    co3+=("$(cat "$work/lastcpu")")
    printf '    rep %s: ours %.2f s (%.1f CPU-s) base %.2f s (%.1f CPU-s)\n' "$rep" "${o3[-1]}" "${co3[-1]}" "${b3[-1]}" "${cb3[-1]}"
  done
  clear_nodes
  W3=$(printf '%s\n' "${o3[@]}" | median); B3=$(printf '%s\n' "${b3[@]}" | median)
  R3=$(printf '%s\n' "${r3[@]}" | sort -n | tail -1)
  results+=("$(report W3 "$W3" "$B3" 0.85x "$R3" "$(printf '%s\n' "${co3[@]}" | median)" "$(printf '%s\n' "${cb3[@]}" | median)")")
fi

# ---------------------------------------------------------------- W4
if [[ " $WORKLOADS " == *" w4 "* ]]; then
  echo "==> W4: bytes on the wire for $W4_ELF ($(stat -L -c %s "$W4_ELF") bytes) as keadm, $NODES4 nodes"
  make_release w4 0 0 "$W4_ELF"
  make_config w4 "$NODES4" "$NODES4"
  clear_nodes
  for i in $(seq 0 $(( NODES4 - 1 ))); do : > "$work/node$i/sshd.log"; done
  read -r t rss < <(ours w4 run-w4)
  size=$(stat -c %s "$work/w4/keadm")
  tgz=$(stat -c %s "$work/w4/packages/amd64/keadm-$VERSION-linux-amd64.tar.gz")
  sent=$(grep -o '"bytes_uploaded": [0-9]*' "$work/w4/run-w4/summary.json" | awk '{s+=$2} END {printf "%d\n", s}')
  per_node=$(( sent / NODES4 ))
  # Cross-check: what each node's sshd says it received (all packets, crypto included).
  wire=$(for i in $(seq 0 $(( NODES4 - 1 ))); do cat "$work/node$i/sshd.log"; done | grep -o 'Transferred: sent [0-9]*, received [0-9]*' | awk '{s+=$5} END {printf "%d\n", s}')
  same=0
  for i in $(seq 0 $(( NODES4 - 1 ))); do
    cmp -s "$work/w4/keadm" "/proc/${node_pid[$i]}/root/tmp/kubeedge/keadm/keadm" && same=$(( same + 1 ))
  done
  results+=("$(printf 'W4   %d bytes/node sent for a %d-byte keadm (tarball %d): ratio %.3fx (target <= 0.35x); sshd received %d bytes/node in all (%.3fx); %d/%d nodes byte-identical; %.2f s; peak RSS %d MiB' \
    "$per_node" "$size" "$tgz" "$(ratio "$per_node" "$size")" "$(( wire / NODES4 ))" "$(ratio "$(( wire / NODES4 ))" "$size")" "$same" "$NODES4" "$t" "$(( rss / 1024 ))")")
  clear_nodes
fi

# ---------------------------------------------------------------- shard
# sample_shard STAGING: every 0.2 s until the run whose --staging-dir is STAGING and the
# xz copy it started have both ended, one line: seconds, the run's RSS (KiB) and CPU
# ticks (its own user+sys), the copy's the same (0 while there is none). The run may reap
# the copy before it ends (then GNU time counts the copy in the run's figures), so each
# process is read from /proc on its own; the last line before each ended is its total
# (short by at most one interval). A pod's memory is the sum of both at one time.
sample_shard() {
  local staging=$1 main='' copy='' t0 mr mc cr cc
  t0=$(date +%s.%N)
  proc_fig() { # PID -> "rss_kib ticks", or nothing once it has ended
    local rss st
    rss=$(awk '/^VmRSS:/{print $2}' "/proc/$1/status" 2>/dev/null) || return 0
    st=$(cut -d' ' -f14,15 "/proc/$1/stat" 2>/dev/null) || return 0
    [ -n "$rss" ] && echo "$rss $(( ${st% *} + ${st#* } ))"
  }
  for _ in $(seq 6000); do
    [ -n "$main" ] || main=$(pgrep -f -- "^$bin batch .*--staging-dir $staging( |\$)" | head -1 || true)
    if [ -n "$main" ] && [ -z "$copy" ]; then
      copy=$(pgrep -P "$main" -f '^keadm-batch pack-copy xz' | head -1 || true)
    fi
    read -r mr mc < <(if [ -n "$main" ]; then proc_fig "$main"; fi; echo) || true
    read -r cr cc < <(if [ -n "$copy" ]; then proc_fig "$copy"; fi; echo) || true
    if [ -n "$main" ] && [ -z "$mr" ] && { [ -z "$copy" ] || [ -z "$cr" ]; }; then break; fi
    printf '%s %s %s %s %s\n' "$(echo "$(date +%s.%N) - $t0" | bc -l)" "${mr:-0}" "${mc:-0}" "${cr:-0}" "${cc:-0}"
    sleep 0.2
  done
}

# shard_fig RSSFILE SAMPLES: GNU time's line of the run, then from the samples: the run's
# own peak and CPU-s, the copy's, and the highest sum of both RSS (MiB, CPU-s).
shard_fig() {
  local hz
  hz=$(getconf CLK_TCK)
  read -r e u s m < <(tail -1 "$1")
  awk -v hz="$hz" -v e="$e" -v u="$u" -v s="$s" -v m="$m" '
    { if ($2 > 0) { mr = ($2 > mr ? $2 : mr); mc = $3; mt = $1 }
      if ($4 > 0) { cr = ($4 > cr ? $4 : cr); cc = $5; ct = $1; if (mt == $1) cat = $5 }
      if ($2 + $4 > sum) sum = $2 + $4 }
    END {
      printf "wall %.2f s, user+sys %.2f CPU-s (%.2f cores), peak RSS %.0f MiB (GNU time); ", e, u + s, (u + s) / e, m / 1024
      printf "sampled: run %.2f CPU-s, %.0f MiB", mc / hz, mr / 1024
      if (cr > 0) printf "; xz copy %.2f CPU-s (%.2f of them while the run ran), %.0f MiB, ended %.1f s after the run began; run + copy at once: peak %.0f MiB, %.2f cores over the run", cc / hz, cat / hz, cr / 1024, ct, sum / 1024, (mc + cat) / hz / e
      printf "\n" }' "$2"
}

if [[ " $WORKLOADS " == *" shard "* ]]; then
  echo "==> shard: $SHARD_NODES nodes, keadm $SHARD_ELF ($(stat -L -c %s "$SHARD_ELF") bytes), maxRunNum $SHARD_C, $REPS rep(s), cold then warm"
  make_release shard 0 0 "$SHARD_ELF"
  make_config shard "$SHARD_NODES" "$SHARD_C"
  for rep in $(seq "$REPS"); do
    # Cold: a staging dir no run has used, as a pod's emptyDir.
    rm -rf "$work/shard/staging"
    clear_nodes
    sample_shard "$work/shard/staging" > "$work/shard/cold-$rep.samples" &
    sampler=$!
    read -r t rss < <(ours shard "run-cold-$rep")
    wait "$sampler"
    results+=("$(printf 'shard rep %s cold: %s' "$rep" "$(shard_fig "$work/shard/rss" "$work/shard/cold-$rep.samples")")")
    ls "$work"/shard/staging/bin/amd64/keadm-*.xz >/dev/null 2>&1 || echo "bench: the cold run left no xz copy" >&2
    # Warm: the same staging dir, release staged and its xz copy made; the nodes emptied.
    clear_nodes
    sample_shard "$work/shard/staging" > "$work/shard/warm-$rep.samples" &
    sampler=$!
    read -r t rss < <(ours shard "run-warm-$rep")
    wait "$sampler"
    results+=("$(printf 'shard rep %s warm: %s' "$rep" "$(shard_fig "$work/shard/rss" "$work/shard/warm-$rep.samples")")")
    printf '%s\n' "${results[@]: -2}"
  done
  clear_nodes
fi

echo
echo "==> results ($(nproc) cores; W1/W2 ${NODES1}x${SIZE1} MiB C=$C1; W3 ${NODES3}x${SIZE3} MiB C=$C3 sleep ${SLEEP3}s; median of $REPS)"
printf '%s\n' "${results[@]}"
