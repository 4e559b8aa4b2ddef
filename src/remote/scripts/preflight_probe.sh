# The pre-flight probe for `keadm join`, read-only, one round trip, run with the
# privileges keadm will have: what would stop keadm before it changes anything (edgecore
# running, a management dir that is not empty, the runtime's socket, a noexec or full
# upload dir, no bash), and what only the node can see of the join (cloudcore's ports from
# the node, the node's clock, the runtime's cgroup driver). `kubeedge::preflight` reads
# its lines and knows the finding ids.
# Parameters:
#   UP           the upload dir
#   SOCK         the runtime endpoint keadm will dial (unix://... or a path)
#   NEED_KIB     the KiB still to upload; 0 skips the disk check
#   CC_HOST      cloudcore's host as the join dials it; empty skips the check of its ports
#   CC_PORT      cloudhub's port (--cloudcore-ipport's), or empty
#   CC_CERTPORT  the certificate port (--certport)
#   CC_WAIT      how long each port may take to accept a TCP connection, in seconds
#   CGD          the cgroup driver keadm will write for edgecore; empty skips the check
#   CGD_FROM     where that driver comes from, in words (--cgroupdriver=systemd)
# (MOUNTS, the mount table, is set here: the unit tests feed it one of their own.)
# Prints: KB_PF <finding id> <detail> per finding; KB_PF_CLOCK <epoch seconds>;
# KB_PF_DONE last.
# Exit: 0.
# shellcheck source=lib.sh
. ./lib.sh
MOUNTS=/proc/mounts
pf() { printf 'KB_PF %s %s\n' "$1" "$2"; }
# 1. edgecore: each node has its own pid namespace, so this sees only the node's processes.
kb_edgecore_pids
if [ -n "$ec" ]; then pf edgecore_running "pid$ec"
elif has systemctl && [ -d /run/systemd/system ] && systemctl is-active --quiet edgecore 2>/dev/null; then
  pf edgecore_running "edgecore.service is active"
fi
# 2. /etc/kubeedge must be absent or empty: keadm refuses any entry in it.
kb_management_dir_state
if [ -n "$kd" ]; then pf management_dir_not_clean "$kd"; fi
# 3. The runtime socket keadm will dial; name other well-known sockets that do exist.
case $SOCK in
  unix://*) s=${SOCK#unix://} ;;
  *://*) s=; pf runtime_socket_missing "$SOCK is not a unix:// endpoint; keadm supports only unix sockets" ;;
  *) s=$SOCK ;;
esac
if [ -n "$s" ] && [ ! -S "$s" ]; then
  if [ -e "$s" ]; then d="$s is not a socket"; else d="$s does not exist"; fi
  alt=
  for a in /run/containerd/containerd.sock /run/k3s/containerd/containerd.sock \
           /var/run/crio/crio.sock /var/run/cri-dockerd.sock /run/isulad.sock; do
    [ "$a" != "$s" ] && [ -S "$a" ] && alt="$alt unix://$a"
  done
  [ -n "$alt" ] && d="$d; found$alt"
  pf runtime_socket_missing "$d"
fi
# 4 and 5 look at the upload dir or, before its first upload, its nearest existing parent.
# Each step cuts the last component off by parameter expansion (a node may have no
# dirname, and `$(dirname ...)` failing left the walk looping to the step's deadline), so
# the walk ends at / at the latest; one that reaches no directory leaves 4 and 5 undone.
e=$UP
while [ ! -d "$e" ]; do
  case $e in
    /) e=; break ;;
    */*) e=${e%/*}; e=${e:-/} ;;
    *) e=; break ;;
  esac
done
if [ -z "$e" ]; then
  pf probe_incomplete "the noexec and free disk checks did not run: no directory holds $UP"
else
  e=$(cd "$e" 2>/dev/null && pwd -P) || e=/
  # The mount that holds it is the longest mount point that prefixes it; of equals, the
  # last one listed is on top. Mount points are octal-escaped in the table.
  r=$(awk -v p="$e" '{ m = $2; gsub(/\\040/, " ", m); gsub(/\\011/, "\t", m)
    if ((m == "/" || p == m || index(p, m "/") == 1) && length(m) >= best) { best = length(m); o = $4; mp = m } }
    END { if (mp != "") print o " " mp }' "$MOUNTS" 2>/dev/null)
  case ",${r%% *}," in
    *,noexec,*) pf upload_dir_noexec "$e is on ${r#* }, mounted noexec" ;;
  esac
  # A df that fails or tells no free size is a check that did not run, in df's words
  # (asked again for them: the probe writes no file to keep them in), never a pass.
  if [ "$NEED_KIB" -gt 0 ]; then
    if ! d=$(df -Pk "$e" 2>/dev/null); then
      why=$(df -Pk "$e" 2>&1 >/dev/null | head -n 3 | tr '\n' ' ')
      pf probe_incomplete "the free disk check did not run: df -Pk $e failed: ${why:-it said nothing}"
    else
      free=$(printf '%s\n' "$d" | awk 'NR == 2 { print $4 }')
      case $free in
        ''|*[!0-9]*) pf probe_incomplete "the free disk check did not run: df -Pk $e told no free size: $(printf '%s\n' "$d" | head -n 3 | tr '\n' ' ')" ;;
        *) [ "$free" -lt "$NEED_KIB" ] && pf low_disk "$free $NEED_KIB $e" ;;
      esac
    fi
  fi
fi
# 6. keadm runs `bash -c "pidof edgecore"`, `/bin/bash <pre-run>` and its service start.
has bash || pf bash_missing "no bash on PATH ($PATH)"
# 7. The node's clock, which the control host compares with its own: certificates and
# the join token are checked against clocks.
if t=$(date +%s 2>&1) && case $t in ''|*[!0-9]*) false ;; esac; then echo "KB_PF_CLOCK $t"
else pf probe_incomplete "the clock check did not run: date +%s said: $(printf '%s\n' "$t" | head -n 1)"
fi
# 8. The cgroup driver of the runtime at the socket keadm dials against the one keadm
# writes for edgecore. The probe runs as the login user, who may not be allowed to ask
# the runtime itself, so the runtime is told by its socket: cri-dockerd's is docker's,
# CRI-O's and iSulad's are not checked, any other is a containerd's (k3s's keeps its
# config apart).
if [ -n "$CGD" ] && [ -n "$s" ] && [ -S "$s" ]; then
  rt=containerd; cfg=/etc/containerd/config.toml; drv=; from=
  case $s in
    *docker*) rt=docker ;;
    *crio*|*isulad*) rt= ;;
    /run/k3s/*) cfg=/var/lib/rancher/k3s/agent/etc/containerd/config.toml ;;
  esac
  systemd_cgroup() { awk '/^[[:space:]]*SystemdCgroup[[:space:]]*=[[:space:]]*true/ { f = 1 } END { exit !f }'; }
  if [ "$rt" = docker ]; then
    if ! has docker; then pf probe_incomplete "the cgroup driver check did not run: $s is docker's (cri-dockerd), and docker is not on PATH"
    elif d=$(docker info --format '{{.CgroupDriver}}' 2>&1) && [ -n "$d" ]; then drv=$d; from="docker info"
    else pf probe_incomplete "the cgroup driver check did not run: docker info failed: $(printf '%s\n' "$d" | head -n 2 | tr '\n' ' ')"
    fi
  elif [ "$rt" = containerd ]; then
    if [ "$cfg" = /etc/containerd/config.toml ] && has containerd && d=$(containerd config dump 2>/dev/null); then from="containerd config dump"
    elif [ -r "$cfg" ]; then d=$(cat "$cfg"); from=$cfg
    elif [ -e "$cfg" ]; then d=; pf probe_incomplete "the cgroup driver check did not run: $cfg cannot be read"
    else d=; from="no $cfg, so containerd's default"
    fi
    if [ -n "$from" ]; then
      if printf '%s\n' "$d" | systemd_cgroup; then drv=systemd; from="SystemdCgroup = true in $from"
      else drv=cgroupfs; from="no SystemdCgroup = true in $from"
      fi
    fi
  fi
  if [ -n "$drv" ] && [ "$drv" != "$CGD" ]; then
    pf cgroup_driver_mismatch "$rt uses $drv ($from); keadm will write $CGD for edgecore ($CGD_FROM)"
  fi
fi
# 9. cloudcore's ports as the node reaches them: a TCP connect each, all at once (each
# in the background, printing its own line), so the probe waits one deadline at most.
if [ -n "$CC_HOST" ]; then
  if has bash && has timeout; then how=bash
  elif has nc; then how=nc
  else how=; pf probe_incomplete "the check that the node reaches cloudcore at $CC_HOST did not run: the node has neither bash with timeout nor nc"
  fi
  if [ -n "$how" ]; then
    # cc_try PORT WHAT: one port, its line only when it does not answer.
    cc_try() {
      if [ "$how" = bash ]; then why=$(timeout "$CC_WAIT" bash -c ": <\"/dev/tcp/\$1/\$2\"" kb "$CC_HOST" "$1" 2>&1); rc=$?
      else why=$(nc -z -w "$CC_WAIT" "$CC_HOST" "$1" 2>&1); rc=$?
      fi
      [ "$rc" = 0 ] && return 0
      why=$(printf '%s\n' "$why" | head -n 1)
      why=${why##*: }
      [ "$rc" = 124 ] && why="no answer within $CC_WAIT s"
      pf cloudcore_unreachable_from_node "$CC_HOST:$1 ($2): ${why:-$how could not connect within $CC_WAIT s}"
    }
    [ -n "$CC_PORT" ] && cc_try "$CC_PORT" "cloudhub's port, from --cloudcore-ipport" &
    cc_try "$CC_CERTPORT" "the certificate port, --certport" &
    wait
  fi
fi
echo KB_PF_DONE
