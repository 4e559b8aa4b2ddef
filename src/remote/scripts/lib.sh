# The shell functions several node scripts share. Not sent as it is: a script that
# reads `. ./lib.sh` gets, in that line's place, only the functions below it calls
# (src/remote/script.rs), so a node is never sent one it does not use. Each function
# starts on a line of its own, `name() {`, and ends with a line `}`.

# has COMMAND: whether COMMAND is on PATH. Exit 0 when it is, else 1.
has() { command -v "$1" >/dev/null 2>&1; }

# kb_edgecore_pids: leaves the pids of the node's edgecore processes in $ec, each after a
# space (empty when none runs). /proc/*/comm needs no tool at all; pidof (what keadm
# itself runs) also matches an argv[0] of edgecore. The pre-flight probe, the check after
# a reset, the check after an upgrade and `batch status` call it.
kb_edgecore_pids() {
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
}

# kb_management_dir_state: leaves in $kd why /etc/kubeedge ($KE, which it sets) stops a
# join, by keadm join's own rule (its management-directory check): nothing when the
# directory is absent or empty (an empty one is often a mount point, as on read-only-root
# devices), else the count and first names of its entries, that it cannot be read, or
# that it is not a directory. One rule for the pre-flight probe and the check after a
# reset, so a node the reset left clean is one the next join's pre-flight finds clean.
# shellcheck disable=SC2034 # $kd is this function's result, which its callers read
kb_management_dir_state() {
  KE=/etc/kubeedge
  kd=
  if [ -d "$KE" ]; then
    if ! l=$(ls -A "$KE" 2>&1); then kd="cannot read $KE: $l"
    elif [ -n "$l" ]; then
      kd="$(printf '%s\n' "$l" | wc -l | tr -d ' ') entries: $(printf '%s\n' "$l" | head -n 6 | tr '\n' ' ' | sed 's/ $//')"
    fi
  elif [ -e "$KE" ] || [ -L "$KE" ]; then
    kd="$KE is not a directory"
  fi
}

# kb_logged_version PID: prints the version edgecore process PID logged as it started
# (klog's `I1202 04:02:50.700000 3794 server.go:107] Version: v1.23.1`, the third field
# its pid), from the journal under systemd or from /var/log/kubeedge/edgecore.log (its
# last MB) otherwise; nothing when it logged none. edgecore has no `--version` (it
# ignores the flag and starts a second edgecore), so no script runs it.
kb_logged_version() {
  { journalctl "_PID=$1" -o cat --no-pager 2>/dev/null; tail -c 1000000 /var/log/kubeedge/edgecore.log 2>/dev/null; } | awk -v p="$1" '$3 == p && $5 == "Version:" { v = $6 } END { print v }'
}

# kb_config_version: prints edgecore.yaml's `edgecoreVersion`, which edgecore rewrites
# to its own as it starts; nothing when there is none.
kb_config_version() {
  sed -n 's/^[[:space:]]*edgecoreVersion:[[:space:]]*//p' /etc/kubeedge/config/edgecore.yaml 2>/dev/null | head -n 1 | tr -d "\"' "
}

# kb_hostname_override: prints edgecore.yaml's `hostnameOverride` (the Node name edgecore
# registers under) as the file has it, quotes and all: the reader checks it is a Node
# name. The check after an upgrade and the node's identity call it.
kb_hostname_override() {
  sed -n 's/^[[:space:]]*hostnameOverride:[[:space:]]*//p' /etc/kubeedge/config/edgecore.yaml 2>/dev/null | head -n 1
}

# kb_start_time: reads a `/proc/<pid>/stat` line on stdin and leaves field 22 (the
# process's start time) in $kb_start, split as the shell splits words. run.sh records it
# with the group; kill.sh and stop.sh compare it. Exit 1 when there is no line.
kb_start_time() {
  read -r _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ kb_start _
}

# kb_recorded_group: leaves in $g the process group run.sh recorded in $KB_PGID_FILE.
# Exit 1 where there is no record, a malformed one, or a leader alive that is not the
# process that made it (its start time differs): then nothing may be signalled. A leader
# that is gone is fine: no other process can hold that number while the group lives.
kb_recorded_group() {
  read -r g st < "$KB_PGID_FILE" || return 1
  case "$g" in ''|*[!0-9]*) return 1 ;; esac
  [ "$g" -gt 1 ] && [ -n "$st" ] || return 1
  if [ -r /proc/"$g"/stat ]; then kb_start_time < /proc/"$g"/stat; [ "$kb_start" = "$st" ] || return 1; fi
}

# kb_kind_of NAME: prints the word for the runtime that calls itself NAME (CRI's
# RuntimeName, or the name of the process that holds its socket): containerd, docker,
# crio or isulad (the words src/remote/runtime.rs reads), else unknown.
kb_kind_of() {
  case $1 in
    containerd) echo containerd ;;
    docker|cri-dockerd) echo docker ;;
    cri-o|crio) echo crio ;;
    isulad|iSulad) echo isulad ;;
    *) echo unknown ;;
  esac
}

# kb_find_tool: leaves in $kb_tool the first CLI of the runtime $kb_kind (a word of
# kb_kind_of) on PATH that can import into it, in runtime.rs's Runtime::tools order, or
# nothing. For containerd it prints KB_RT_EXACT: containerd keeps a name as the archive
# wrote it, and CRI looks images up by their full name, so a short name (kubeedge/x:1)
# is not the image keadm asks for.
# shellcheck disable=SC2154 # $kb_kind is the caller's: the probe's finding, the import's KB_RUNTIME
kb_find_tool() {
  kb_tool=
  case $kb_kind in
    containerd) has ctr && kb_tool=ctr; echo KB_RT_EXACT ;;
    docker) has docker && kb_tool=docker ;;
    crio) for kb_t in podman skopeo; do has "$kb_t" && { kb_tool=$kb_t; break; }; done ;;
    isulad) has isula && kb_tool=isula ;;
  esac
}

# kb_crictl_list: prints the images crictl lists on the runtime at $KB_SOCK, one
# reference per line. The table is read whole before awk sees it: in a pipe crictl's
# failure would be lost, and an empty list said instead. Exit 3 when there is no
# crictl, 1 when it fails.
kb_crictl_list() {
  has crictl || return 3
  kb_table=$(crictl --runtime-endpoint "unix://$KB_SOCK" images) || return 1
  printf '%s\n' "$kb_table" | awk 'NR > 1 && $2 != "<none>" { print $1 ":" $2 }'
}

# kb_list: prints the images of the runtime $kb_kind at $KB_SOCK, one reference per line,
# with its CLI $kb_tool (kb_find_tool's). Exit 3 when there is no CLI to ask, else 0, or
# the CLI's failure (1 where its table is read whole, as kb_crictl_list's).
# shellcheck disable=SC2154 # $kb_kind is the caller's: the probe's finding, the import's KB_RUNTIME
kb_list() {
  case $kb_kind in
    containerd)
      [ -n "$kb_tool" ] || { kb_crictl_list; return; }
      ctr --connect-timeout 10s --address "$KB_SOCK" -n k8s.io images ls -q ;;
    docker)
      [ -n "$kb_tool" ] || return 3
      docker images --format '{{.Repository}}:{{.Tag}}' ;;
    crio)
      [ "$kb_tool" = podman ] || return 3
      podman images --format '{{.Repository}}:{{.Tag}}' ;;
    isulad)
      [ -n "$kb_tool" ] || return 3
      kb_table=$(isula images) || return 1
      printf '%s\n' "$kb_table" | awk 'NR > 1 { print $1 ":" $2 }' ;;
    *) kb_crictl_list ;;
  esac
}

# kb_rt_list [SOCKET]: lists the runtime's images (kb_list) as KB_RT_IMAGE <ref> lines
# and KB_RT_LISTED, or says why it could not: KB_RT_LIST_FAILED <the CLI's last words>,
# or KB_RT_UNLISTED when there is no CLI to ask or nothing at SOCKET (then none is asked).
# The runtime probe and the import call it.
kb_rt_list() {
  if [ -n "$1" ] && [ ! -e "$1" ]; then echo KB_RT_UNLISTED
  elif kb_out=$(kb_list 2>&1); then
    printf '%s\n' "$kb_out" | while IFS= read -r kb_l; do [ -n "$kb_l" ] && printf 'KB_RT_IMAGE %s\n' "$kb_l"; done
    echo KB_RT_LISTED
  else
    kb_rc=$?
    if [ "$kb_rc" = 3 ] && [ -z "$kb_out" ]; then echo KB_RT_UNLISTED
    else printf 'KB_RT_LIST_FAILED %s\n' "$(printf '%s\n' "$kb_out" | tail -n 3 | tr '\n' ' ')"
    fi
  fi
}

# kb_no WHY...: the relay's serve scripts and probes end here when the node cannot serve:
# prints KB_RELAY_NOT_SERVING and why, and exits 0 (each runs in a subshell of its own,
# so the rest of the node's script goes on).
kb_no() { echo "KB_RELAY_NOT_SERVING $*"; exit 0; }

# kb_home_check: ends the script with kb_no unless $kb_home (the login user's home) is an
# absolute path that can stand inside an authorized_keys forced command's quotes.
# shellcheck disable=SC2154 # $kb_home is the caller's: $HOME, or the home root passes on
kb_home_check() {
  case $kb_home in /*) ;; *) kb_no the login user has no home;; esac
  case $kb_home in *\"*|*\\*|*"'"*|*[[:cntrl:]]*) kb_no "the login user's home has a quote, a backslash or a control character in its name";; esac
}

# kb_ak_refused: as the login user, prints why its authorized_keys ($kb_ak, in $kb_home)
# cannot take a line, or returns 1 when it can. A symlink is refused even where the
# login user could write through it: the clearing replaces the file by a rename, which
# would replace the link.
kb_ak_refused() {
  if [ -L "$kb_ak" ]; then echo "the login user's .ssh/authorized_keys is a symbolic link"
  elif [ -e "$kb_ak" ] && { [ ! -f "$kb_ak" ] || [ ! -w "$kb_ak" ]; }; then echo "the login user's .ssh/authorized_keys is not a file it can write"
  elif [ -e "$kb_home/.ssh" ] && { [ ! -d "$kb_home/.ssh" ] || [ ! -w "$kb_home/.ssh" ]; }; then echo "the login user's .ssh is not a directory it can write"
  elif [ ! -e "$kb_home/.ssh" ] && [ ! -w "$kb_home" ]; then echo "the login user cannot write its home"
  else return 1; fi
}

# kb_ak_check: sets $kb_ak, the login user's authorized_keys in $kb_home, and ends the
# script with kb_no when it cannot take a line (kb_ak_refused).
kb_ak_check() {
  kb_ak=$kb_home/.ssh/authorized_keys
  kb_why=$(kb_ak_refused) && kb_no "$kb_why"
}

# kb_expiry SECS WHY: leaves in $kb_exp the node's local time SECS seconds from now as
# authorized_keys' expiry-time reads it (YYYYMMDDhhmmss), or ends the script with
# kb_no WHY when the node's date cannot tell it.
kb_expiry() {
  kb_exp=$(date -d "@$(( $(date +%s) + $1 ))" +%Y%m%d%H%M%S 2>/dev/null)
  case $kb_exp in [0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]) ;; *) kb_no "$2";; esac
}

# kb_login_user: as root under sudo, finds the login user $KB_USER (kb_pw, its passwd
# line; kb_uid, kb_gid), or ends the script with kb_no.
kb_login_user() {
  kb_pw=$(getent passwd "$KB_USER" 2>/dev/null | head -n 1)
  kb_uid=$(printf '%s\n' "$kb_pw" | cut -d: -f3)
  kb_gid=$(printf '%s\n' "$kb_pw" | cut -d: -f4)
  case $kb_uid:$kb_gid in :*|*:|*[!0-9:]*) kb_no "getent passwd does not know the login user $KB_USER";; esac
}

# kb_drop_tool: after kb_login_user, prints the way this node runs a command as the login
# user (util-linux's setpriv or runuser, else su, each tried with `id -u`), or returns 1
# when there is none.
kb_drop_tool() {
  if [ "$(setpriv --reuid="$kb_uid" --regid="$kb_gid" --init-groups -- id -u 2>/dev/null </dev/null)" = "$kb_uid" ]; then echo setpriv
  elif [ "$(runuser -u "$KB_USER" -- id -u 2>/dev/null </dev/null)" = "$kb_uid" ]; then echo runuser
  elif [ "$(su -s /bin/sh "$KB_USER" -c 'id -u' 2>/dev/null </dev/null)" = "$kb_uid" ]; then echo su
  else return 1; fi
}

# kb_no_drop: ends the script with kb_no: root cannot run a command as the login user.
kb_no_drop() { kb_no "none of setpriv, runuser and su runs a command as $KB_USER here, and root does not work in its home"; }

# kb_serve: as the login user in its home $kb_home, appends the line that lets the site's
# nodes read this node's copy of a file to its authorized_keys, or ends the script with
# kb_no and why. With KB_COPY (under sudo) it first writes the copy root sends on stdin
# into $kb_home/KB_COPY, checks its size (KB_SIZE) and serves that; else the forced
# command is KB_COMMAND. `restrict` turns off forwarding, ptys and user rc; from= admits
# only KB_FROM; expiry-time ends it KB_LIFETIME seconds from now by the node's own clock
# (its local time, as sshd reads it), should nobody remove it. The line, KB_KEY and the
# tag KB_TAG last, starts a line of its own even when the file's last line has no line
# break. relay_serve.sh and relay_serve_copy.sh call it.
kb_serve() {
  kb_home_check
  umask 077
  kb_ak_check
  kb_expiry "$KB_LIFETIME" "the node's date cannot tell the time $KB_LIFETIME s from now"
  if [ -n "$KB_COPY" ]; then
    kb_copy=$kb_home/$KB_COPY
    if ! { rm -f -- "$kb_copy.new" && ( set -C && cat > "$kb_copy.new" ) && [ $(( $(wc -c < "$kb_copy.new") )) = "$KB_SIZE" ] && chmod 400 -- "$kb_copy.new" && rm -f -- "$kb_copy" && mv -f -- "$kb_copy.new" "$kb_copy"; }; then rm -f -- "$kb_copy.new"; kb_no "cannot write its copy in the login user's home"; fi
    kb_cmd="cat -- '$kb_copy'"
  else
    kb_cmd=$KB_COMMAND
  fi
  [ -d "$kb_home/.ssh" ] || mkdir -m 700 -- "$kb_home/.ssh" || kb_no "cannot make the login user's .ssh"
  kb_pre=
  [ -s "$kb_ak" ] && [ $(( $(tail -c 1 -- "$kb_ak" | wc -l) )) = 0 ] && kb_pre='
'
  printf '%srestrict,from="%s",command="%s",expiry-time="%s" %s %s\n' "$kb_pre" "$KB_FROM" "$kb_cmd" "$kb_exp" "$KB_KEY" "$KB_TAG" >> "$kb_ak" || kb_no "cannot add its line to the login user's authorized_keys"
}
