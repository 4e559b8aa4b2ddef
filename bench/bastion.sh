#!/usr/bin/env bash
# Bastion benchmark: NODES loopback sshd nodes reached through one bastion sshd, at
# maxRunNum C, under each MaxStartups of STARTUPS on the bastion (sshd's default
# 10:30:100, then CIS's 10:30:60), against the same fleet reached directly in the same run.
# Cases, each on nodes emptied before it:
#   direct    keadm-batch batch, no bastion: the baseline every ratio is to
#   bastion   keadm-batch batch with every node's proxyJump on the bastion
#   floor     OpenSSH's floor: one ControlMaster connection to the bastion, started
#             first, and per node `ssh -o ProxyCommand='ssh -S <ctl> -W %h:%p bastion'`
#             streaming keadm and running its join, `xargs -P C`
# Prints per case: failed nodes, the bastion's authentications (its `Accepted` log lines,
# LogLevel VERBOSE) and the connections it dropped past MaxStartups, wall time, and the
# ratio to direct. keadm is a small fake (a shell script whose join exits 0), so the run
# measures connections, not transfers. keadm-batch runs with --relay off, so that the
# bastion's nodes (one site) and the direct ones (none) do the same work.
#
#   bench/bastion.sh
#   NODES=40 C=20 STARTUPS=10:30:60 bench/bastion.sh      # smaller
# Knobs (environment): NODES (200) C (50) KEADM_MIB (0: MiB of incompressible bytes in the
# fake keadm, to measure bulk bytes through the bastion instead of connections) STARTUPS ("10:30:100 10:30:60") CASES ("direct
# bastion floor") KEADM_BATCH (measure that binary instead of building one) KEEP=1 (keep
# the work dir). Needs root (namespaces, sshd on 127.x:22).
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
# shellcheck source=bench/lib/fleet.sh
. "$repo/bench/lib/fleet.sh"

NODES="${NODES:-200}"; C="${C:-50}"
KEADM_MIB="${KEADM_MIB:-0}"
STARTUPS="${STARTUPS:-10:30:100 10:30:60}"
CASES="${CASES:-direct bastion floor}"
VERSION=v1.23.1
# The nodes' addresses, apart from bench/fleet.sh's, and the bastion's outside them.
node_net=127.241
bastion=127.240.0.1

bench_start keadm-bastion
start_fleet "$NODES"
ssh_opts
export -f host_of
export node_net

# ---------------------------------------------------------------- configs
make_release bastion "$KEADM_MIB" 0
make_config bastion "$NODES" "$C" direct.yaml
# The same nodes, each reached through the bastion: a proxyJump block under its ssh.
jump="      proxyJump:\n        ip: '$bastion'\n        port: 22\n        username: root\n        auth:\n          type: privateKey\n          privateKeyAuth:\n            privateKeyPath: $work/id_ed25519"
sed "/^          privateKeyPath:/a\\
$jump" "$work/bastion/direct.yaml" > "$work/bastion/bastion.yaml"
[ "$(grep -c '^      proxyJump:' "$work/bastion/bastion.yaml")" = "$NODES" ] \
  || { echo "bench: the bastion config has no proxyJump for every node" >&2; exit 1; }

# ---------------------------------------------------------------- the bastion
bastion_pid=''
# start_bastion SPEC: the bastion's sshd with MaxStartups SPEC, its log emptied. Its config
# is the nodes' (start_fleet's) on the bastion's address, with TCP forwarding and its own
# MaxStartups (sshd keeps the last MaxStartups it reads, so the nodes' line goes).
start_bastion() {
  local d="$work/bastion-sshd"
  mkdir -p "$d"
  { sed -e "s/^ListenAddress .*/ListenAddress $bastion:22/" -e '/^MaxStartups /d' -e '/^Subsystem /d' \
      "$work/node0/sshd_config"
    printf 'AllowTcpForwarding yes\nMaxStartups %s\n' "$1"
  } > "$d/sshd_config"
  : > "$d/sshd.log"
  /usr/sbin/sshd -D -f "$d/sshd_config" -E "$d/sshd.log" </dev/null &
  bastion_pid=$!
  pids+=("$bastion_pid")
  for _ in $(seq 400); do
    if (exec 3<>"/dev/tcp/$bastion/22") 2>/dev/null; then break; fi
    sleep 0.025
  done
  # The probe above was an unauthenticated connection: let sshd see it go first.
  sleep 0.5
  : > "$d/sshd.log"
}

stop_bastion() {
  kill "$bastion_pid" 2>/dev/null || true
  wait "$bastion_pid" 2>/dev/null || true
}

# bastion_counts: "authentications dropped" from the bastion's log since it started.
bastion_counts() {
  local log="$work/bastion-sshd/sshd.log"
  echo "$(grep -c 'Accepted publickey' "$log" || true) $(grep -c 'past MaxStartups' "$log" || true)"
}

# ---------------------------------------------------------------- runners
# ours CONFIG RUNDIR: keadm-batch on CONFIG; prints "seconds failed". A run with failed
# nodes exits 1, which is a figure here, not an error.
ours() {
  local config=$1 rd=$2 t0 t1 failed
  t0=$(date +%s.%N)
  ( cd "$work/bastion" && "$bin" batch -c "$config" --known-hosts "$work/known_hosts" \
      --host-key-policy off --preflight off --relay off --staging-dir "$work/bastion/staging" \
      --run-dir "$rd" -q ${OURS_ARGS:-} ) >"$work/bastion/$rd.log" 2>&1 || true
  t1=$(date +%s.%N)
  [ -f "$work/bastion/$rd/summary.json" ] \
    || { echo "bench: keadm-batch wrote no summary, see $work/bastion/$rd.log:" >&2; tail -5 "$work/bastion/$rd.log" >&2; KEEP=1; exit 1; }
  failed=$(python3 -c 'import json,sys; print(sum(n["phase"] != "succeeded" for n in json.load(open(sys.argv[1]))["nodes"]))' \
    "$work/bastion/$rd/summary.json")
  echo "$(echo "$t1 - $t0" | bc -l) $failed"
}

# floor NAME: the ControlMaster floor; prints "seconds failed".
floor() {
  local ctl="$work/bastion/ctl" t0 t1 failed remote
  ssh "${ssh_opts[@]}" -M -S "$ctl" -o ControlPersist=no -f -N "root@$bastion"
  remote='mkdir -p /tmp/kb-base && cat > /tmp/kb-base/keadm && chmod 0755 /tmp/kb-base/keadm && cd /tmp/kb-base && ./keadm join --cloudcore-ipport=127.0.0.1:10000 --edgenode-name=edge'
  t0=$(date +%s.%N)
  # shellcheck disable=SC2016 # $h and $BENCH_* are the inner bash's
  seq 0 $(( NODES - 1 )) | env BENCH_KEADM="$work/bastion/keadm" BENCH_REMOTE="$remote" \
    BENCH_PROXY="ssh -F /dev/null -o ControlMaster=no -S $ctl -W %h:%p root@$bastion" \
    xargs -P "$C" -I{} bash -c '
      h=$(host_of {})
      ssh "$@" -o ProxyCommand="$BENCH_PROXY" "root@$h" "$BENCH_REMOTE" < "$BENCH_KEADM" \
        || echo "floor: node {} failed"' _ "${ssh_opts[@]}" > "$work/bastion/$1.log" 2>&1
  t1=$(date +%s.%N)
  ssh -F /dev/null -S "$ctl" -O exit "root@$bastion" 2>/dev/null || true
  failed=$(grep -c '^floor: node [0-9]* failed$' "$work/bastion/$1.log" || true)
  echo "$(echo "$t1 - $t0" | bc -l) $failed"
}

results=()
line() { # LABEL SECONDS FAILED AUTHS DROPPED
  local r='-'
  [ -z "${direct:-}" ] || r=$(printf '%.2fx' "$(ratio "$2" "$direct")")
  results+=("$(printf '%-42s failed %3d/%d   bastion auths %4s (dropped %4s)   wall %7.2f s   ratio to direct %s' \
    "$1" "$3" "$NODES" "$4" "$5" "$2" "$r")")
  echo "    ${results[-1]}"
}

# ---------------------------------------------------------------- the cases
direct=''
if [[ " $CASES " == *" direct "* ]]; then
  echo "==> direct: $NODES nodes, maxRunNum $C"
  clear_nodes
  read -r t failed < <(ours direct.yaml run-direct)
  direct=$t
  line "keadm-batch, direct" "$t" "$failed" - -
fi
for spec in $STARTUPS; do
  echo "==> bastion with MaxStartups $spec"
  if [[ " $CASES " == *" bastion "* ]]; then
    start_bastion "$spec"
    clear_nodes
    read -r t failed < <(ours bastion.yaml "run-bastion-${spec//:/-}")
    read -r auths dropped < <(bastion_counts)
    line "keadm-batch, proxyJump ($spec)" "$t" "$failed" "$auths" "$dropped"
    stop_bastion
  fi
  if [[ " $CASES " == *" floor "* ]]; then
    start_bastion "$spec"
    clear_nodes
    read -r t failed < <(floor "floor-${spec//:/-}")
    read -r auths dropped < <(bastion_counts)
    line "ssh ControlMaster + -W ($spec)" "$t" "$failed" "$auths" "$dropped"
    stop_bastion
  fi
done
clear_nodes

echo
echo "==> results ($(nproc) cores; $NODES nodes, maxRunNum/xargs -P $C; keadm-batch $("$bin" --version 2>/dev/null | awk '/^commit:/{print $2}'))"
printf '%s\n' "${results[@]}"
