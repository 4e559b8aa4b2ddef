# The read-only probe of the container runtime at a socket (the one keadm join dials):
# what runtime it is, as the runtime itself says, the node's `uname -m`, the runtime's
# CLI, its images and its sandbox image. Run it with the privilege the run has: a
# runtime's socket and its processes' /proc entries are root's. Nothing here asks a
# registry anything. src/remote/runtime.rs reads its lines.
#
# What the runtime is, asked in this order: CRI's RuntimeName (`crictl version`),
# containerd's own API (`ctr version`), then the name of the process that holds the
# socket (its inodes in /proc/net/unix, the process among /proc/*/fd whose name says a
# runtime, else the lowest pid: socket activation leaves systemd holding a socket too).
# The first that answers decides. A runtime gets 5 s to answer on its own local socket;
# one that holds it without answering costs that once per CLI. Where nothing is at the
# socket's path no CLI is asked: each would wait out its timeout on a socket that is not
# there.
# Parameters:
#   KB_SOCK  the socket's path
# Prints: KB_RT_SOCKET <path>, KB_RT_KIND <containerd|docker|crio|isulad|unknown>,
# KB_RT_TOLD <how it was told, or what was asked>, KB_RT_EXACT (containerd),
# KB_RT_ARCH <uname -m>, KB_RT_TOOL <cli> or KB_RT_NO_TOOL, the list (lib.sh's
# kb_rt_list), KB_RT_SANDBOX <ref> when the runtime names one, KB_RT_DONE last.
# Exit: 0.
# shellcheck source=lib.sh
. ./lib.sh
kb_sock=$KB_SOCK
# kb_sandbox: prints the sandbox image the runtime $kb_kind is configured with, or
# nothing.
kb_crictl_sandbox() {
  has crictl && crictl --runtime-endpoint "unix://$kb_sock" info 2>/dev/null | sed -n 's/.*"sandboxImage": *"\([^"]*\)".*/\1/p' | head -n 1
}
kb_sandbox() {
  case $kb_kind in
    containerd)
      kb_s=$(kb_crictl_sandbox)
      [ -n "$kb_s" ] || kb_s=$(containerd config dump 2>/dev/null | sed -n 's/^[[:space:]]*sandbox\(_image\)\{0,1\}[[:space:]]*=[[:space:]]*"\([^"]*\)".*/\2/p' | head -n 1)
      printf '%s' "$kb_s" ;;
    docker) return 0 ;;
    crio) crio config 2>/dev/null | sed -n 's/^[[:space:]]*pause_image[[:space:]]*=[[:space:]]*"\([^"]*\)".*/\1/p' | head -n 1 ;;
    isulad) sed -n 's/.*"pod-sandbox-image"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p' /etc/isulad/daemon.json 2>/dev/null | head -n 1 ;;
    *) kb_crictl_sandbox ;;
  esac
}
# What the runtime is: kb_kind a word of kb_kind_of or unknown, kb_told how it was told.
kb_kind=
kb_told=
kb_tried=
kb_try() { kb_tried="${kb_tried:+$kb_tried; }$1"; }
if [ ! -e "$kb_sock" ]; then
  kb_kind=unknown; kb_told="nothing is at $kb_sock: no runtime listens there"
elif command -v crictl >/dev/null 2>&1; then
  if kb_o=$(crictl --runtime-endpoint "unix://$kb_sock" --timeout 5s version 2>&1); then
    kb_n=$(printf '%s\n' "$kb_o" | sed -n 's/^RuntimeName:[[:space:]]*//p' | head -n 1)
    [ -n "$kb_n" ] && kb_kind=$(kb_kind_of "$kb_n") && kb_told="crictl version says RuntimeName $kb_n"
  fi
  [ -n "$kb_kind" ] || kb_try "crictl version: $(printf '%s\n' "$kb_o" | tail -n 1)"
else kb_try "crictl is not installed"
fi
if [ -z "$kb_kind" ]; then
  if ! command -v ctr >/dev/null 2>&1; then kb_try "ctr is not installed"
  elif kb_o=$(ctr --connect-timeout 5s --address "$kb_sock" version 2>&1); then
    kb_kind=containerd; kb_told="ctr version answers on it"
  else kb_try "ctr version: $(printf '%s\n' "$kb_o" | tail -n 1)"
  fi
fi
if [ -z "$kb_kind" ]; then
  kb_inos=$(awk -v p="$kb_sock" '{ n = $8; for (i = 9; i <= NF; i++) n = n " " $i } n == p { printf " %s", $7 }' /proc/net/unix 2>/dev/null)
  kb_pids=
  # ls names each directory before its entries only when given more than one argument.
  # shellcheck disable=SC2012 # ls -l names each /proc/<pid>/fd entry's target, socket:[inode], which is what the awk after it reads; the names are digits
  [ -n "$kb_inos" ] && kb_pids=$(ls -l /dev/null /proc/[0-9]*/fd 2>/dev/null | awk -v inos="$kb_inos " '
    /^\/proc\/[0-9]+\/fd:$/ { split($0, p, "/"); pid = p[3]; next }
    $NF ~ /^socket:\[[0-9]+\]$/ && index(inos, " " substr($NF, 9, length($NF) - 9) " ") && !seen[pid]++ { print pid }' | sort -n)
  kb_first=
  for kb_p in $kb_pids; do
    read -r kb_n < "/proc/$kb_p/comm" 2>/dev/null || continue
    [ -n "$kb_first" ] || kb_first="$kb_n (pid $kb_p)"
    kb_k=$(kb_kind_of "$kb_n")
    if [ "$kb_k" != unknown ]; then kb_kind=$kb_k; kb_told="its socket is held by $kb_n (pid $kb_p)"; break; fi
  done
  if [ -z "$kb_kind" ] && [ -n "$kb_first" ]; then kb_kind=unknown; kb_told="its socket is held by $kb_first"
  elif [ -z "$kb_kind" ]; then kb_try "no process this probe can see holds the socket"
  fi
fi
[ -n "$kb_kind" ] || { kb_kind=unknown; kb_told=$kb_tried; }
printf 'KB_RT_SOCKET %s\nKB_RT_KIND %s\nKB_RT_TOLD %s\n' "$kb_sock" "$kb_kind" "$kb_told"
# The runtime's CLI (none for a runtime keadm-batch cannot tell), then what it lists.
kb_find_tool
echo "KB_RT_ARCH $(uname -m)"
if [ -n "$kb_tool" ]; then echo "KB_RT_TOOL $kb_tool"; else echo KB_RT_NO_TOOL; fi
kb_rt_list "$kb_sock"
# Nothing at the socket: no CLI is asked (each would wait out its timeout).
kb_sb=
[ -e "$kb_sock" ] && kb_sb=$(kb_sandbox 2>/dev/null)
[ -n "$kb_sb" ] && echo "KB_RT_SANDBOX $kb_sb"
echo KB_RT_DONE
