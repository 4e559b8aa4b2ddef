# shellcheck shell=bash
# Shared by the benches in bench/ (sourced, not run): their start (bench_start), the sshd
# fleet on loopback, the fake offline keadm releases, keadm-batch's configs and the ssh
# options of the OpenSSH baselines. Expects `work` (the bench's work dir), `pids` (an array
# the caller's EXIT trap kills; bench_start sets both) and `VERSION`; sets `node_pid` (each
# node's sshd, pid 1 of its namespace) and `fleet_size`. A caller may set `node_sshd_extra[i]` to lines appended to
# node i's sshd_config (bench/ciphers.sh restricts each node to one cipher this way), and
# `node_netns[i]` to a network namespace of its own making (`ip netns add`, with node i's
# address on an interface and up), in which node i's sshd then runs: bench/sites.sh puts
# each node in one this way and redefines host_of to give the addresses it chose.

# bench_binary and median.
# shellcheck source=bench/lib/timing.sh
. "$(dirname "${BASH_SOURCE[0]}")/timing.sh"

# host_of I [NET]: node I's address, 127.252.x.y unless the caller sets `node_net` (other
# first two octets, so that two benches on one machine neither share ports nor each
# other's shaping), or its twin in NET (shaped.sh's relay listens on 127.253.x.y, outside
# the shaped range, and forwards to the node).
host_of() { echo "${2:-${node_net:-127.252}}.$(( $1 / 250 )).$(( $1 % 250 + 2 ))"; }
node_pid=()
node_netns=()

# node_net_enter I: sets `net_enter` to the words that run a command in node I's network
# namespace (node_netns[I]; nsenter execs the command, so a background job's $! stays the
# command's pid), or to none when the node has no namespace of its own.
node_net_enter() {
  net_enter=()
  [ -z "${node_netns[$1]:-}" ] || net_enter=(nsenter --net="/run/netns/${node_netns[$1]}" --)
}

# bench_start PREFIX: what every bench does first, from the repository's root: refuse to
# run but as root, install sshd (scripts/setup.sh), build the release binary (`bin`;
# KEADM_BATCH names one instead), make
# the work dir (`work`, /var/tmp/PREFIX.XXXXXX) and trap EXIT (and INT, TERM) to kill
# `pids`, run `bench_on_exit` if the caller defined one, and remove the work dir unless
# KEEP=1.
bench_start() {
  if [ "$(id -u)" != 0 ]; then
    echo "bench: run as root (it starts sshd processes in private namespaces)" >&2
    exit 1
  fi
  command -v /usr/bin/time >/dev/null || { echo "bench: needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
  bash scripts/setup.sh
  # KEADM_BATCH=/path/to/keadm-batch measures that binary (a release build) instead: no
  # build on a machine shared with others.
  [ -n "${KEADM_BATCH:-}" ] || echo "==> building keadm-batch (release)"
  bench_binary
  work="$(mktemp -d "/var/tmp/$1.XXXXXX")"
  pids=()
  trap bench_cleanup EXIT
  trap 'exit 130' INT TERM
}

bench_cleanup() {
  if declare -F bench_on_exit >/dev/null; then bench_on_exit; fi
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ "${KEEP:-}" = 1 ]; then echo "bench: work dir kept: $work"; else rm -rf "$work"; fi
}

# sshd_common: the sshd_config lines every bench's sshd shares: no pid file and no PAM,
# root by key only, no DNS lookups, nothing printed at login.
sshd_common() {
  printf '%s\n' 'PidFile none' 'UsePAM no' 'StrictModes no' 'PermitRootLogin prohibit-password' \
    'PasswordAuthentication no' 'KbdInteractiveAuthentication no' 'UseDNS no' 'PrintMotd no'
}

# start_fleet N: N `sshd -D` nodes on 127.252.x.y:22 (host_of), each in its own mount and
# pid namespace (and network namespace, where node_netns says) with a private tmpfs /tmp
# and a home of its own for root (whose .ssh/authorized_keys the site relay adds its run's
# line to); root's key in $work/id_ed25519.
start_fleet() {
  fleet_size=$1
  ssh-keygen -q -t ed25519 -N '' -C bench -f "$work/id_ed25519"
  cp "$work/id_ed25519.pub" "$work/authorized_keys"
  ssh-keygen -q -t ed25519 -N '' -C bench-host -f "$work/host_key"
  echo "==> starting $fleet_size sshd nodes (tmpfs /tmp each)"
  local start i d h parent child net_enter
  start=$(date +%s.%N)
  for i in $(seq 0 $(( fleet_size - 1 ))); do
    d="$work/node$i"; mkdir -p "$d/home" && chmod 0700 "$d/home"
    cat > "$d/sshd_config" <<CFG
ListenAddress $(host_of "$i"):22
HostKey $work/host_key
$(sshd_common)
AuthorizedKeysFile $work/authorized_keys .ssh/authorized_keys
PrintLastLog no
MaxStartups 1000
LogLevel VERBOSE
Subsystem sftp /usr/lib/openssh/sftp-server
CFG
    [ -z "${node_sshd_extra[$i]:-}" ] || printf '%s\n' "${node_sshd_extra[$i]}" >> "$d/sshd_config"
    node_net_enter "$i"
    "${net_enter[@]}" unshare --mount --pid --fork --kill-child --mount-proc --propagation private -- sh -c "
      mount -t tmpfs -o mode=1777 tmpfs /tmp &&
      mount --bind '$d/home' /root &&
      exec /usr/sbin/sshd -D -f '$d/sshd_config' -E '$d/sshd.log'" </dev/null 2>"$d/start.log" &
    pids+=("$!")
  done
  for i in $(seq 0 $(( fleet_size - 1 ))); do
    h=$(host_of "$i")
    node_net_enter "$i"
    # shellcheck disable=SC2016 # $1 is the inner bash's
    "${net_enter[@]}" bash -c 'for _ in $(seq 400); do
        if (exec 3<>"/dev/tcp/$1/22") 2>/dev/null; then break; fi
        sleep 0.025
      done' probe "$h"
    parent=${pids[$i]}
    child=$(cat "/proc/$parent/task/$parent/children" 2>/dev/null | awk '{print $1}')
    [ -n "$child" ] || { echo "bench: node $i did not start: $(cat "$work/node$i/start.log")" >&2; exit 1; }
    node_pid[$i]=$child
  done
  printf '    fleet up in %.1f s\n' "$(echo "$(date +%s.%N) - $start" | bc -l)"
}

# Empties every node's /tmp (the tmpfs lives in the node's namespace; reach it via /proc).
clear_nodes() {
  local i
  for i in $(seq 0 $(( fleet_size - 1 ))); do
    find "/proc/${node_pid[$i]}/root/tmp/" -mindepth 1 -maxdepth 1 -exec rm -rf {} + 2>/dev/null || true
  done
}

# make_release NAME SIZE_MIB SLEEP [ELF]: a keadm that is a shell script (join sleeps, then
# exits 0) followed by SIZE MiB of random bytes, or by the ELF's bytes.
make_release() {
  local name=$1 size=$2 sleep=$3 elf=${4:-}
  local r="$work/$name/rel/keadm-$VERSION-linux-amd64"
  mkdir -p "$r/keadm" "$work/$name/packages/amd64"
  echo "$VERSION" > "$r/version"
  printf '#!/bin/sh\n[ %s = 0 ] || sleep %s\nexit 0\n' "$sleep" "$sleep" > "$r/keadm/keadm"
  if [ -n "$elf" ]; then cat "$elf" >> "$r/keadm/keadm"
  else head -c "$(( size * 1048576 ))" /dev/urandom >> "$r/keadm/keadm"; fi
  chmod 0755 "$r/keadm/keadm"
  local tgz="$work/$name/packages/amd64/keadm-$VERSION-linux-amd64.tar.gz"
  tar -cf - -C "$work/$name/rel" "keadm-$VERSION-linux-amd64" | gzip > "$tgz"
  sha512sum "$tgz" | cut -d' ' -f1 > "$work/$name/packages/amd64/checksum_keadm-$VERSION-linux-amd64.tar.gz.txt"
  cp "$r/keadm/keadm" "$work/$name/keadm"
}

# make_config NAME NODES MAXRUN [FILE]: keadm-batch's config for nodes 0..NODES-1 (FILE,
# config.yaml by default, in $work/NAME), reached at `host_of I $entry_net` (the nodes
# themselves unless the caller sets entry_net).
make_config() {
  local name=$1 n=$2 c=$3 file=${4:-config.yaml} i
  {
    printf 'keadm:\n  download:\n    enable: false\n  keadmVersion: %s\n  archGroup: [amd64]\n  offlinePackageDir: %s\n' "$VERSION" "$work/$name/packages"
    printf 'maxRunNum: %s\nnodes:\n' "$c"
    for i in $(seq 0 $(( n - 1 ))); do
      printf '  - nodeName: edge-%04d\n    keadmCmd: join --cloudcore-ipport=127.0.0.1:10000 --edgenode-name=edge-%04d\n    ssh:\n      ip: %s\n      username: root\n      auth:\n        type: privateKey\n        privateKeyAuth:\n          privateKeyPath: %s\n' \
        "$i" "$i" "$(host_of "$i" "${entry_net:-}")" "$work/id_ed25519"
    done
  } > "$work/$name/$file"
}

ssh_opts() {
  ssh_opts=(-F /dev/null -i "$work/id_ed25519" -o BatchMode=yes -o StrictHostKeyChecking=no
    -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o ConnectTimeout=30
    -c aes128-gcm@openssh.com -o KexAlgorithms=curve25519-sha256)
}

# CPU seconds the whole machine spent busy (user, nice, system, irq, softirq) so far:
# on loopback both ends share the cores, so this is the run's total cost. Other
# processes on the machine count too; keep it quiet while benchmarking.
busy() { awk -v hz="$(getconf CLK_TCK)" '/^cpu /{printf "%.2f\n", ($2+$3+$4+$7+$8)/hz}' /proc/stat; }

# The middle value; of an even count, the mean of the two middle ones.
ratio() { echo "$1 / $2" | bc -l; }
