#!/usr/bin/env bash
# A real fleet, end to end: N real KubeEdge edge nodes (each an sshd, a containerd, and the
# edgecore a real `keadm join` installs) joined by keadm-batch to a real cloud (etcd,
# kube-apiserver, cloudcore) on loopback, the run waiting through the kubeconfig for every
# Node to be Ready. Two cases in one run, on the same fleet made fresh before each:
#   bastion  every node reached through one bastion sshd (`ssh.proxyJump`) with OpenSSH's
#            default MaxStartups (10:30:100) and `LogLevel VERBOSE`
#   direct   the same nodes reached directly: the baseline
# Printed per case: nodes Ready (kubectl, and summary.json), wall time, the bastion's
# authentications (`Accepted` lines in its log), per node time to Ready (median, slowest;
# summary.json's cluster.ready_after_start), peak RSS of keadm-batch (GNU time), the
# machine's load; then the ratio bastion / direct, and what the joined fleet costs idle.
#
# The cloud and the nodes come from scripts outside this repository (bench/README.md says
# what each must do):
#   KECLOUD_SCRIPTS=DIR  cloud-up.sh, cloud-down.sh, node-up.sh NAME IP, node-down.sh NAME,
#                        mkimage.py                                          (required)
#   KECLOUD=DIR          their state ($KECLOUD/state) and lock   (default /var/tmp/kecloud)
#   KECLOUD_BIN=DIR      keadm, edgecore and kubectl of one KubeEdge release ($KECLOUD/bin)
#   PAUSE_BIN=FILE       a static pause binary for the sandbox image ($KECLOUD/images/pause)
# The run holds an exclusive lock (flock) on $KECLOUD/cloud.lock from before it starts the
# cloud until the cloud and every node are down again, also on failure or Ctrl-C: whoever
# else uses the cloud takes the same lock, and waits.
#
#   KECLOUD_SCRIPTS=/path/to/kecloud bench/real-fleet.sh            # 20 nodes
#   N=3 KECLOUD_SCRIPTS=/path/to/kecloud bench/real-fleet.sh        # a quick look
# Knobs (environment): N (nodes, 20), C (maxRunNum, N up to 50), READY_TIMEOUT (seconds,
# 600), RELAY (keadm-batch's --relay, off: the bastion's nodes would otherwise form a site
# and read keadm from each other, and the cases would differ in more than the bastion),
# CASES ("bastion direct"), UP_P (nodes started or stopped at once, 4), STAGING (keadm-batch's
# staging dir; one outside the work dir keeps keadm's compressed copies for the next run),
# COPY_WAIT (seconds to wait for those copies, 300), OURS_ARGS (more keadm-batch flags for
# both cases, such as --jump-connections 4), KEADM_BATCH (a release binary to
# measure instead of building one), KEEP=1 (keep the work dir). Root only.
set -euo pipefail
cd "$(dirname "$0")/.."

N="${N:-20}"
C="${C:-$(( N < 50 ? N : 50 ))}"
READY_TIMEOUT="${READY_TIMEOUT:-600}"
RELAY="${RELAY:-off}"
CASES="${CASES:-bastion direct}"
UP_P="${UP_P:-4}"
COPY_WAIT="${COPY_WAIT:-300}"
KECLOUD="${KECLOUD:-/var/tmp/kecloud}"
KECLOUD_BIN="${KECLOUD_BIN:-$KECLOUD/bin}"
PAUSE_BIN="${PAUSE_BIN:-$KECLOUD/images/pause}"
S="$KECLOUD/state"
# The nodes' addresses and kubelet read-only ports: 127.43.x.y:2222 (a range of their own
# on loopback), ports 11010, 11020, ... on 127.0.0.1 (the edgecores share the host's
# network; keadm's default 10350 would be taken by the first). The bastion: 127.43.255.1.
BASTION_IP=127.43.255.1
PORT_BASE=11000

die() { echo "bench: $*" >&2; exit 1; }
[ -n "${KECLOUD_SCRIPTS:-}" ] || die "set KECLOUD_SCRIPTS to the directory of the cloud and node scripts (cloud-up.sh, node-up.sh, ...; bench/README.md, real-fleet.sh)"
for f in cloud-up.sh cloud-down.sh node-up.sh node-down.sh mkimage.py; do
  [ -f "$KECLOUD_SCRIPTS/$f" ] || die "no $f in KECLOUD_SCRIPTS=$KECLOUD_SCRIPTS"
done
for b in keadm edgecore kubectl; do
  [ -x "$KECLOUD_BIN/$b" ] || die "no $b in KECLOUD_BIN=$KECLOUD_BIN (a KubeEdge release's keadm and edgecore, and kubectl)"
done
[ -x "$PAUSE_BIN" ] || die "no pause binary at $PAUSE_BIN (a static build of Kubernetes' build/pause/linux/pause.c; set PAUSE_BIN)"
[ -x /bin/busybox ] || die "needs /bin/busybox (busybox-static): the installation-package image's shell"
for tool in flock python3 bc ss; do command -v "$tool" >/dev/null || die "needs $tool"; done
if [ "$N" -lt 1 ] || [ "$N" -gt 2000 ]; then die "N must be 1-2000"; fi
VERSION=$("$KECLOUD_BIN/keadm" version | sed -n 's/.*GitVersion:"\([^"]*\)".*/\1/p')
[ -n "$VERSION" ] || die "cannot read the version of $KECLOUD_BIN/keadm"
kubectl() { "$KECLOUD_BIN/kubectl" --kubeconfig "$S/pki/admin.kubeconfig" "$@"; }

# bench_start, busy, sshd_common.
# shellcheck source=bench/lib/fleet.sh
. bench/lib/fleet.sh
bench_start kb-realfleet
lib="$PWD/bench/lib"
STAGING="${STAGING:-$work/staging}"

name_of() { printf 'rf-%03d' "$1"; }
ip_of() { echo "127.43.$(( $1 / 250 )).$(( $1 % 250 + 1 ))"; }
names=()
for i in $(seq "$N"); do names+=("$(name_of "$i")"); done

# What the exit has to undo, in this order: a keadm-batch run still going, the sampler, the
# nodes, the cloud (the bastion's sshd is in `pids`, which bench_cleanup kills). The lock
# is fd 9's: it goes when the script ends, after all of this.
kb_pid=""; sampler_pid=""; nodes_started=0; cloud_started=0
# shellcheck disable=SC2317 # called by bench_cleanup, the EXIT trap
bench_on_exit() {
  if [ -n "$kb_pid" ] && kill -0 "$kb_pid" 2>/dev/null; then
    echo "==> stopping the keadm-batch run (process group $kb_pid)"
    kill -TERM -- "-$kb_pid" 2>/dev/null || true
    for _ in $(seq 150); do kill -0 "$kb_pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL -- "-$kb_pid" 2>/dev/null || true
  fi
  [ -z "$sampler_pid" ] || kill "$sampler_pid" 2>/dev/null || true
  if [ "$nodes_started" = 1 ]; then
    echo "==> stopping the $N nodes"
    fleet_down
    for name in "${names[@]}"; do rm -rf "${S:?}/nodes/$name"; done
    kubectl delete node --ignore-not-found --wait=false "${names[@]}" >/dev/null 2>&1 || true
  fi
  if [ "$cloud_started" = 1 ]; then
    echo "==> stopping the cloud"
    "$KECLOUD_SCRIPTS/cloud-down.sh" >> "$work/cloud.log" 2>&1 || true
  fi
}

# fleet_down: every node stopped (node-down.sh: its containers, containerd, and its pid
# namespace with sshd and edgecore); UP_P at a time.
fleet_down() {
  printf '%s\n' "${names[@]}" | xargs -P "$UP_P" -n 1 "$KECLOUD_SCRIPTS/node-down.sh" >> "$work/nodes.log" 2>&1 || true
}

# fleet_fresh: the fleet as new: every node stopped, what it kept outside its keys removed
# (containerd's images and state, what keadm and edgecore wrote; its tmpfs went with it),
# started again, and no Node of its name left in the cluster.
fleet_fresh() {
  local t0 name i
  t0=$(date +%s.%N)
  [ "$nodes_started" = 0 ] || fleet_down
  for name in "${names[@]}"; do
    [ -d "$S/nodes/$name" ] || continue
    find "$S/nodes/$name" -mindepth 1 -maxdepth 1 ! -name 'id_ed25519*' ! -name 'host_ed25519*' \
      ! -name made-mountpoints -exec rm -rf {} +
  done
  kubectl delete node --ignore-not-found "${names[@]}" >/dev/null
  nodes_started=1
  for i in $(seq "$N"); do echo "$(name_of "$i") $(ip_of "$i")"; done \
    | xargs -P "$UP_P" -L 1 "$KECLOUD_SCRIPTS/node-up.sh" >> "$work/nodes.log" 2>&1 \
    || die "a node did not start: see the end of $work/nodes.log (KEEP=1 keeps it)"
  for name in "${names[@]}"; do
    if [ ! -S "$S/nodes/$name/tmp/containerd/containerd.sock" ] || [ ! -f "$S/nodes/$name/sshd.pid" ]; then
      die "node $name has no sshd or containerd after node-up.sh: see $work/nodes.log"
    fi
  done
  printf '    %s nodes fresh in %.1f s\n' "$N" "$(echo "$(date +%s.%N) - $t0" | bc -l)"
}

# The offline kit keadm-batch sends: keadm's release tarball and checksum file (from
# KECLOUD_BIN's keadm) and the two images keadm join runs, as OCI archives (no registry
# here): the installation-package (busybox and KECLOUD_BIN's edgecore) and the sandbox.
echo "==> offline kit for keadm $VERSION"
kit="$work/kit/amd64"
mkdir -p "$kit/images" "$work/rel/keadm-$VERSION-linux-amd64/keadm"
cp "$KECLOUD_BIN/keadm" "$work/rel/keadm-$VERSION-linux-amd64/keadm/"
tar -C "$work/rel" -czf "$kit/keadm-$VERSION-linux-amd64.tar.gz" "keadm-$VERSION-linux-amd64"
(cd "$kit" && sha512sum "keadm-$VERSION-linux-amd64.tar.gz" | cut -d' ' -f1 > "checksum_keadm-$VERSION-linux-amd64.tar.gz.txt")
python3 "$KECLOUD_SCRIPTS/mkimage.py" "$kit/images/installation-package_$VERSION.tar" \
  "docker.io/kubeedge/installation-package:$VERSION" --cmd /bin/sh bin/ tmp/ bin/busybox=@/bin/busybox \
  'bin/sh->busybox' 'bin/sleep->busybox' 'bin/cp->busybox' "usr/local/bin/edgecore=@$KECLOUD_BIN/edgecore" > /dev/null
python3 "$KECLOUD_SCRIPTS/mkimage.py" "$kit/images/pause_3.6.tar" registry.k8s.io/pause:3.6 \
  --entrypoint /pause "pause=@$PAUSE_BIN" > /dev/null

# Each joined node holds about 6 inotify instances (its edgecore's kubelet: cAdvisor, the
# plugin prober, config watches; its containerd), all root's, and Linux allows a user 128 by
# default: past that, edgecore's kubelet fails "Failed to start cAdvisor: inotify_init: too
# many open files" and the node never registers. Said before anything starts.
inotify_max=$(cat /proc/sys/fs/inotify/max_user_instances)
inotify_used=$( { find /proc/[0-9]*/fd -lname 'anon_inode:inotify' 2>/dev/null || true; } | wc -l)
if [ $(( inotify_used + 6 * N + 4 )) -gt "$inotify_max" ]; then
  echo "bench: warning: $N nodes need about $(( 6 * N + 4 )) inotify instances and $inotify_used of fs.inotify.max_user_instances $inotify_max are in use: nodes past the limit will not register (raise it: sysctl fs.inotify.max_user_instances=$(( (inotify_used + 6 * N + 64) / 64 * 64 )))" >&2
fi

mkdir -p "$KECLOUD"
exec 9> "$KECLOUD/cloud.lock"
if ! flock -n 9; then
  echo "==> waiting for $KECLOUD/cloud.lock (someone else is using the cloud)"
  flock 9
fi

echo "==> the cloud (etcd, kube-apiserver, cloudcore on 127.0.0.1)"
cloud_started=1
"$KECLOUD_SCRIPTS/cloud-up.sh" > "$work/cloud.log" 2>&1 || { tail -5 "$work/cloud.log" >&2; die "cloud-up.sh failed"; }
if [ ! -s "$S/token" ] || [ ! -f "$S/pki/admin.kubeconfig" ]; then
  die "cloud-up.sh left no $S/token or $S/pki/admin.kubeconfig"
fi
node_limit=$(sed -n 's/^ *nodeLimit: *\([0-9]*\).*/\1/p' "$S/cloudcore/cloudcore.yaml" 2>/dev/null | head -1)
echo "    cloudcore's nodeLimit: ${node_limit:-unknown} ($S/cloudcore/cloudcore.yaml)"
if [ -n "$node_limit" ] && [ "$node_limit" -lt "$N" ]; then
  die "cloudcore's nodeLimit is $node_limit, below the $N nodes: raise it in $S/cloudcore/cloudcore.yaml"
fi
cc_log="$S/logs/cloudcore.log"

echo "==> $N edge nodes (node-up.sh: sshd on 127.43.x.y:2222, containerd; $UP_P at a time)"
fleet_fresh

echo "==> the bastion: sshd on $BASTION_IP:2222, default MaxStartups, LogLevel VERBOSE"
b="$work/bastion-sshd"; mkdir -p "$b"
ssh-keygen -q -t ed25519 -N '' -C bench-bastion-host -f "$b/host_key"
ssh-keygen -q -t ed25519 -N '' -C bench-bastion -f "$b/id_ed25519"
cp "$b/id_ed25519.pub" "$b/authorized_keys"
cat > "$b/sshd_config" <<CFG
ListenAddress $BASTION_IP:2222
HostKey $b/host_key
$(sshd_common)
AuthorizedKeysFile $b/authorized_keys
LogLevel VERBOSE
CFG
/usr/sbin/sshd -D -f "$b/sshd_config" -E "$b/sshd.log" < /dev/null &
pids+=("$!")
for _ in $(seq 100); do (exec 3<>"/dev/tcp/$BASTION_IP/2222") 2>/dev/null && break; sleep 0.05; done
echo "    $(/usr/sbin/sshd -T -f "$b/sshd_config" 2>/dev/null | grep -i '^maxstartups')"

# config_header: what every config of the run starts with, up to `nodes:`.
config_header() {
  cat <<EOF
keadm:
  download:
    enable: false
  offlinePackageDir: $work/kit
  keadmVersion: $VERSION
  archGroup: [amd64]
  cmdTplArgs:
    cloudcore: 127.0.0.1:10000
    version: $VERSION
maxRunNum: $C
timeoutSeconds: 900
nodes:
EOF
}

# node_ssh I: node I's ssh block (its own key, made by node-up.sh).
node_ssh() {
  cat <<EOF
    ssh:
      ip: $(ip_of "$1")
      port: 2222
      username: root
      auth:
        type: privateKey
        privateKeyAuth:
          privateKeyPath: $S/nodes/$(name_of "$1")/id_ed25519
EOF
}

# write_config FILE CASE: the batch config joining every node; CASE bastion adds its
# proxyJump. Each node's kubelet gets a read-only port of its own.
write_config() {
  local file=$1 case=$2 i name
  {
    config_header
    for i in $(seq "$N"); do
      name=$(name_of "$i")
      echo "  - nodeName: $name"
      echo "    keadmCmd: 'join --cloudcore-ipport={{.cloudcore}} --certport=10002 --kubeedge-version={{.version}} --edgenode-name=$name --remote-runtime-endpoint=unix:///tmp/containerd/containerd.sock --cgroupdriver=cgroupfs --token={{env \"KEADM_TOKEN\"}} --set modules.edged.tailoredKubeletConfig.readOnlyPort=$(( PORT_BASE + 10 * i ))'"
      node_ssh "$i"
      [ "$case" != bastion ] || cat <<EOF
      proxyJump:
        ip: $BASTION_IP
        port: 2222
        username: root
        auth:
          type: privateKey
          privateKeyAuth:
            privateKeyPath: $b/id_ed25519
EOF
    done
  } > "$file"
}

KEADM_TOKEN=$(cat "$S/token"); export KEADM_TOKEN

# The first run stages keadm and starts its zstd and xz copies (processes that outlive it):
# one node, `keadm version`, untimed; the cases start once the copies are there, so both
# send the same bytes and neither shares the cores with the copies.
echo "==> staging keadm (one node, keadm version) and waiting for its compressed copies"
mkdir -p "$work/warmup"
{ config_header; printf '  - nodeName: warmup\n    keadmCmd: version\n'; node_ssh 1; } > "$work/warmup/config.yaml"
# (fd 9, the lock, is closed for keadm-batch: the copies it starts outlive it.)
(cd "$work/warmup" && "$bin" batch -c config.yaml --no-cluster --known-hosts "$work/known_hosts" \
  --staging-dir "$STAGING" --run-dir "$work/warmup/run" -q 9>&-) > "$work/warmup/out.log" 2>&1 \
  || { tail -5 "$work/warmup/out.log" >&2; die "the staging run failed"; }
t0=$(date +%s)
until ls "$STAGING"/bin/amd64/keadm-*.xz "$STAGING"/bin/amd64/keadm-*.zst >/dev/null 2>&1; do
  if [ $(( $(date +%s) - t0 )) -ge "$COPY_WAIT" ]; then
    echo "    no zstd and xz copies of keadm in $STAGING after $COPY_WAIT s (they are made at the lowest CPU priority: the machine is busy); the cases may send different forms of keadm: see their bytes per node"
    break
  fi
  sleep 1
done
echo "    waited $(( $(date +%s) - t0 )) s for the copies after the staging run"

sampler() { # every 2 s: unix time, load1, MemAvailable in MiB
  while :; do
    echo "$(date +%s) $(cut -d' ' -f1 /proc/loadavg) $(awk '/^MemAvailable:/ { print int($2 / 1024) }' /proc/meminfo)"
    sleep 2
  done
}

# run_case CASE: the fleet made fresh, then keadm-batch joins it (waiting for Ready), and
# the case's figures.
failed_any=0
run_case() {
  local case=$1 d="$work/$1" rc=0 b_from cc_from name pid
  mkdir -p "$d"
  printf '%s\n' "${names[@]}" > "$d/names"
  echo "==> $case: $N nodes$([ "$case" = bastion ] && echo " through root@$BASTION_IP:2222"), maxRunNum $C, --relay $RELAY"
  fleet_fresh
  write_config "$d/config.yaml" "$case"
  b_from=$(( $(wc -l < "$b/sshd.log") + 1 ))
  cc_from=$(( $( (wc -l < "$cc_log") 2>/dev/null || echo 0) + 1 ))
  sampler > "$d/samples" & sampler_pid=$!
  busy > "$d/busy"
  # In a process group of its own (setsid execs in place: $! is its leader), so the exit
  # trap can stop it and all it started; in the background, so a signal reaches the trap
  # at once.
  # shellcheck disable=SC2086 # OURS_ARGS is split into its flags on purpose
  ( cd "$d" && exec setsid /usr/bin/time -f '%e %M' -o "$d/time" "$bin" batch -c config.yaml \
      --kubeconfig "$S/pki/admin.kubeconfig" --ready-timeout "$READY_TIMEOUT" \
      --known-hosts "$work/known_hosts" --staging-dir "$STAGING" --run-dir "$d/run" \
      --relay "$RELAY" ${OURS_ARGS:-} 9>&- ) > "$d/out.log" 2>&1 &
  kb_pid=$!
  wait "$kb_pid" || rc=$?
  kb_pid=""
  busy >> "$d/busy"
  kill "$sampler_pid" 2>/dev/null || true; wait "$sampler_pid" 2>/dev/null || true; sampler_pid=""
  kubectl get nodes -o json > "$d/nodes.json" 2>/dev/null || true
  {
    echo "exit=$rc"
    echo "bastion_auth=$(tail -n +"$b_from" "$b/sshd.log" | grep -c 'Accepted [a-z-]* for ' || true)"
    echo "bastion_conn=$(tail -n +"$b_from" "$b/sshd.log" | grep -c 'Connection from ' || true)"
    echo "bastion_drop=$(tail -n +"$b_from" "$b/sshd.log" | grep -c 'past MaxStartups' || true)"
    echo "cc_lines=$(tail -n +"$cc_from" "$cc_log" 2>/dev/null | wc -l)"
    echo "cc_errors=$(tail -n +"$cc_from" "$cc_log" 2>/dev/null | grep '^E[0-9]' | grep -vc 'Query lease .* not found' || true)"
    echo "cc_limit=$(tail -n +"$cc_from" "$cc_log" 2>/dev/null | grep -c 'reach node limit' || true)"
  } > "$d/counts"
  [ -f "$d/time" ] || echo "0 0" > "$d/time"
  python3 "$lib/real_fleet.py" case "$case" "$d"
  # A node that is not Ready: the end of its edgecore's log, read through its sshd's root
  # (its /var/log/kubeedge is a tmpfs in its own mount namespace), kept in the work dir.
  if [ "$rc" != 0 ]; then
    failed_any=1
    echo "    keadm-batch's recap: $d/out.log (KEEP=1 keeps it); its last lines:"
    tail -4 "$d/out.log" | sed 's/^/      /'
    for name in $(python3 -c 'import json,sys; print(" ".join(n["name"] for n in json.load(open(sys.argv[1]))["nodes"] if n["phase"] != "succeeded"))' "$d/run/summary.json" 2>/dev/null); do
      pid=$(cat "$S/nodes/$name/sshd.pid" 2>/dev/null || true)
      if [ -z "$pid" ] || ! cp "/proc/$pid/root/var/log/kubeedge/edgecore.log" "$d/edgecore-$name.log" 2>/dev/null; then
        echo "    $name: no edgecore.log to read (its sshd is gone, or keadm never started edgecore)"
        continue
      fi
      echo "    $name's edgecore.log ($d/edgecore-$name.log), last error lines:"
      grep -E '^[EF][0-9]{4}' "$d/edgecore-$name.log" | tail -3 | cut -c1-300 | sed 's/^/      /'
    done
  fi
}

for case in $CASES; do
  case "$case" in bastion|direct) run_case "$case" ;; *) die "unknown case $case (bastion, direct)" ;; esac
done
read -r -a case_list <<< "$CASES"
[ "${#case_list[@]}" -lt 2 ] || python3 "$lib/real_fleet.py" compare "$work/${case_list[0]}" "$work/${case_list[1]}"

echo "==> what the joined fleet costs, idle (10 s), after the last case"
python3 "$lib/real_fleet.py" usage "$S" "${names[@]}"
echo "    machine: $(free -m | awk '/^Mem:/ { print $3 " MiB used, " $7 " MiB available" }'), load $(cut -d' ' -f1-3 /proc/loadavg), inotify instances in use: $(find /proc/[0-9]*/fd -lname 'anon_inode:inotify' 2>/dev/null | wc -l) of fs.inotify.max_user_instances $(cat /proc/sys/fs/inotify/max_user_instances) per user"
exit "$failed_any"
