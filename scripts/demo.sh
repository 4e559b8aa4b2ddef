#!/usr/bin/env bash
# A real enrollment without owning edge nodes: on a fresh Debian machine, as root, this
# installs OpenSSH's server if missing, starts three (NODES) simulated edge nodes (real sshd
# processes on 127.0.99.11:22 and up, each with its own /tmp and root password in a private
# mount namespace), builds a small fake offline keadm release whose `keadm join` records
# its arguments on the node, writes a config, runs `keadm-batch batch -c` against it,
# shows the results, and stops every process it started.
#   scripts/demo.sh            # keep nothing
#   KEEP=1 scripts/demo.sh     # keep the demo directory for a look around
#   KEADM_BATCH=dist/.../keadm-batch scripts/demo.sh   # a given binary instead of a fresh build
#   NODES=50 JOIN_SECONDS=3 FAIL="edge-7 edge-23=name edge-31=runtime" scripts/demo.sh
#                              # a bigger fleet whose joins take up to 3 s, three failing
#                              # (already joined by default, or =name / =runtime)
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"

if [ "$(id -u)" != 0 ]; then
  echo "demo: run as root (it starts sshd processes in private mount namespaces)" >&2
  exit 1
fi
bash scripts/setup.sh
# KEADM_BATCH=/path/to/keadm-batch runs that binary (a release build, or a wrapper that
# runs one in a chroot or under qemu) instead of building one.
if [ -n "${KEADM_BATCH:-}" ]; then
  bin="$KEADM_BATCH"
else
  echo "==> building keadm-batch"
  cargo build --release --quiet
  bin="$repo/target/release/keadm-batch"
fi

nodes="${NODES:-3}"
if [ "$nodes" -lt 1 ] || [ "$nodes" -gt 240 ]; then echo "demo: NODES must be 1..240" >&2; exit 2; fi
demo="$(mktemp -d /var/tmp/keadm-batch-demo.XXXXXX)"
pids=()
cleanup() {
  # unshare ignores SIGTERM while it waits; SIGKILL ends it, and --kill-child takes the
  # node's sshd (pid 1 of its namespace, so every session too) with it.
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ "${KEEP:-}" = 1 ]; then echo "demo directory kept: $demo"; else rm -rf "$demo"; fi
}
trap cleanup EXIT

password="demo-root-$$"
shadow="$demo/shadow"
hash="$(openssl passwd -6 "$password")"
awk -F: -v OFS=: -v h="$hash" '$1 == "root" { $2 = h } { print }' /etc/shadow > "$shadow"
chmod 0640 "$shadow"

echo "==> starting $nodes edge nodes"
for i in $(seq "$nodes"); do
  node="$demo/node$i"
  mkdir -p "$node/tmp" "$node/home"
  chmod 1777 "$node/tmp"
  ssh-keygen -q -t ed25519 -N '' -f "$node/host_key"
  cat > "$node/sshd_config" <<CFG
ListenAddress 127.0.99.$((10 + i)):22
HostKey $node/host_key
PidFile none
UsePAM no
StrictModes no
PermitRootLogin yes
PasswordAuthentication yes
KbdInteractiveAuthentication no
AuthorizedKeysFile none
Subsystem sftp /usr/lib/openssh/sftp-server
CFG
  unshare --mount --pid --fork --kill-child --mount-proc --propagation private -- sh -c "
    mount --bind '$node/tmp' /tmp &&
    mount --bind '$shadow' /etc/shadow &&
    mount --bind '$node/home' /root &&
    exec /usr/sbin/sshd -D -f '$node/sshd_config' -E '$node/sshd.log'" &
  pids+=("$!")
done
for i in $(seq "$nodes"); do
  for _ in $(seq 100); do
    if (exec 3<>/dev/tcp/127.0.99.$((10 + i))/22) 2>/dev/null; then break; fi
    sleep 0.05
  done
done

echo "==> building a fake offline keadm release (v1.23.1, amd64)"
release="$demo/release/keadm-v1.23.1-linux-amd64"
mkdir -p "$release/keadm" "$demo/packages/amd64"
echo v1.23.1 > "$release/version"
cat > "$release/keadm/keadm" <<KEADM
#!/bin/sh
# A stand-in for keadm: prints keadm join's steps and records how it was called.
join_seconds=${JOIN_SECONDS:-0}
fail="${FAIL:-}"
KEADM
cat >> "$release/keadm/keadm" <<'KEADM'
echo "$(date -u +%FT%TZ) keadm $*" >> /tmp/kubeedge/keadm/joined.txt
name=$(printf '%s\n' "$@" | sed -n 's/^--edgenode-name=//p')
if [ "$join_seconds" -gt 0 ]; then sleep $(( $(od -An -N1 -tu1 /dev/urandom) % (join_seconds + 1) )); fi
for f in $fail; do
  # FAIL entries are names, or name=cause with cause one of already, name, runtime.
  case "$f" in
    "$name"|"$name="*) cause=${f#"$name"}; cause=${cause#=} ;;
    *) continue ;;
  esac
  echo "I1130 join.go:78] 1. Check KubeEdge edgecore process status" >&2
  case "$cause" in
    name)
      echo "I1130 join.go:99] 3. Check if the node name is valid" >&2
      echo "Error: node already exists or internal error occurred, cannot register again" >&2 ;;
    runtime)
      echo "I1130 join.go:134] 4. Create the necessary directories" >&2
      echo 'Error: edge node join failed: failed to new remote image service, err: validate service connection: validate CRI v1 image API for endpoint "unix:///run/containerd/containerd.sock": rpc error: code = Unavailable desc = connection error: desc = "transport: Error while dialing: dial unix /run/containerd/containerd.sock: connect: no such file or directory"' >&2 ;;
    *)
      echo "Error: EdgeCore is already running on this node, please run reset to clean up first" >&2 ;;
  esac
  exit 1
done
for step in "1. Check KubeEdge edgecore process status" "2. Check if the management directory is clean" \
            "3. Check if the node name is valid" "4. Create the necessary directories" "5. Pull Images" \
            "9. Run EdgeCore daemon" "10. Install Complete!"; do
  echo "I1130 join.go:78] $step" >&2
done
KEADM
chmod 0755 "$release/keadm/keadm"
tar -czf "$demo/packages/amd64/keadm-v1.23.1-linux-amd64.tar.gz" -C "$demo/release" keadm-v1.23.1-linux-amd64
sha512sum "$demo/packages/amd64/keadm-v1.23.1-linux-amd64.tar.gz" | cut -d' ' -f1 \
  > "$demo/packages/amd64/checksum_keadm-v1.23.1-linux-amd64.tar.gz.txt"

cat > "$demo/config.yaml" <<CFG
keadm:
  download:
    enable: false
  keadmVersion: v1.23.1
  archGroup: [amd64]
  offlinePackageDir: ./packages
  cmdTplArgs:
    cloudcore: 127.0.99.1:10000
maxRunNum: ${MAX_RUN_NUM:-2}
x-ssh: &ssh
  username: root
  auth:
    type: password
    passwordAuth:
      passwordEnv: DEMO_NODE_PASSWORD
nodes:
CFG
for i in $(seq "$nodes"); do
  cat >> "$demo/config.yaml" <<CFG
  - nodeName: edge-$i
    keadmCmd: 'join --cloudcore-ipport={{.cloudcore}} --edgenode-name=edge-$i --token={{env "DEMO_TOKEN"}}'
    ssh:
      <<: *ssh
      ip: 127.0.99.$((10 + i))
CFG
done

cd "$demo"
export DEMO_NODE_PASSWORD="$password"
export DEMO_TOKEN="0123456789abcdef.eyJhbGciOiJIUzI1NiJ9.demo"
echo "==> the config"
cat config.yaml
echo
echo "==> keadm-batch batch -c config.yaml --dry-run"
"$bin" batch -c config.yaml --dry-run --known-hosts "$demo/known_hosts" --staging-dir "$demo/staging" | head -40
echo
echo "==> keadm-batch batch -c config.yaml --preflight off"
echo "    (pre-flight is off: the simulated nodes have no container runtime and no cloudcore"
echo "    listens at 127.0.99.1; on real nodes leave it on, it is the default)"
status=0
"$bin" batch -c config.yaml --known-hosts "$demo/known_hosts" --staging-dir "$demo/staging" --preflight off || status=$?
echo
echo "==> batch_process_log.txt"
cat batch_process_log.txt
echo
echo "==> what each node's keadm was called with (read from the node's own /tmp)"
for i in $(seq "$nodes" | head -5); do
  # The node did receive the real token; the demo does not print it either.
  printf 'edge-%s: ' "$i"
  sed 's/--token=[^ ]*/--token=(received; not shown)/' "$demo/node$i/tmp/kubeedge/keadm/joined.txt" 2>/dev/null || echo "(nothing)"
done
echo
echo "==> the run directory"
find batch_runs/latest/ -type f | sort | head -8
echo
echo "==> the transcript of edge-1"
cat batch_runs/latest/nodes/1-edge-1.log
echo
echo "keadm-batch exited with status $status"
exit "$status"
