//! The pre-flight probe for `keadm join`: what would stop keadm before it changes
//! anything (edgecore running, a management dir that is not empty, the runtime's socket,
//! a noexec or full upload dir, no bash), as `KB_PF` lines that `kubeedge::preflight`
//! reads.

use crate::shell::shell_quote;

/// The pre-flight probe for `keadm join`: POSIX sh, read-only, one round trip. Run it with
/// the privileges keadm will have (as root, or inside [`super::wrap`]), then give its output to
/// `kubeedge::preflight::parse`, which knows the finding ids it prints.
/// `needed_bytes` is the size of the files still to upload; 0 skips the disk check.
pub fn preflight_probe_script(upload_dir: &str, runtime_socket: &str, needed_bytes: u64) -> String {
    let mut s = String::new();
    s.push_str(&format!("UP={}\n", shell_quote(upload_dir)));
    s.push_str(&format!("SOCK={}\n", shell_quote(runtime_socket)));
    s.push_str(&format!("NEED_KIB={}\n", needed_bytes.div_ceil(1024)));
    s.push_str(PREFLIGHT_PROBE_BODY);
    s
}

/// The part of [`preflight_probe_script`] that does not depend on its arguments. `MOUNTS` is a variable so
/// the unit tests can feed it a mount table of their own.
const PREFLIGHT_PROBE_BODY: &str = r#"MOUNTS=/proc/mounts
pf() { printf 'KB_PF %s %s\n' "$1" "$2"; }
has() { command -v "$1" >/dev/null 2>&1; }
# 1. edgecore: /proc/*/comm needs no tool at all; pidof (what keadm itself runs) also
# matches an argv[0] of edgecore. Each node has its own pid namespace, so this sees
# only the node's processes.
ec=
for p in /proc/[0-9]*; do
  read -r c 2>/dev/null < "$p/comm" || continue
  [ "$c" = edgecore ] && ec="$ec ${p#/proc/}"
done
if has pidof; then
  for p in $(pidof edgecore 2>/dev/null); do
    case "$ec " in *" $p "*) ;; *) ec="$ec $p";; esac
  done
fi
if [ -n "$ec" ]; then pf edgecore_running "pid$ec"
elif has systemctl && [ -d /run/systemd/system ] && systemctl is-active --quiet edgecore 2>/dev/null; then
  pf edgecore_running "edgecore.service is active"
fi
# 2. /etc/kubeedge must be absent or empty: keadm refuses any entry in it.
if [ -d /etc/kubeedge ]; then
  if ! l=$(ls -A /etc/kubeedge 2>&1); then pf management_dir_not_clean "cannot read /etc/kubeedge: $l"
  elif [ -n "$l" ]; then
    pf management_dir_not_clean "$(printf '%s\n' "$l" | wc -l | tr -d ' ') entries: $(printf '%s\n' "$l" | head -n 6 | tr '\n' ' ')"
  fi
elif [ -e /etc/kubeedge ] || [ -L /etc/kubeedge ]; then
  pf management_dir_not_clean "/etc/kubeedge is not a directory"
fi
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
echo KB_PF_DONE
"#;
