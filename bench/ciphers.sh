#!/usr/bin/env bash
# Cipher benchmark: the control host's CPU seconds per GiB sent, keadm-batch (libssh2)
# against OpenSSH's client, for each cipher both offer. One sshd node per cipher on
# loopback, each restricted to that one cipher (`Ciphers` in its sshd_config), so
# keadm-batch negotiates it whatever its own preference order. Per cipher, alternating,
# REPS times:
#   ours    keadm-batch uploading an incompressible SIZE MiB keadm (sent raw: neither its
#           tarball nor an xz copy would be smaller), minus the same run with keadm
#           already on the node (the fixed cost of a run: staging check, handshake, exec)
#   ssh     `ssh -c CIPHER root@node 'cat > F' < keadm` (the client process only), minus
#           `ssh -c CIPHER root@node true`
# CPU is user+sys of the control-side process (/usr/bin/time); the node's CPU (its sshd
# and everything under it, from the node sshd's cutime+cstime) is printed beside it.
#
#   bench/ciphers.sh                       # 512 MiB, REPS=2
#   SIZE=256 REPS=3 bench/ciphers.sh
#   CIPHERS="aes128-gcm@openssh.com chacha20-poly1305@openssh.com" bench/ciphers.sh
# Knobs (environment): SIZE (MiB) REPS CIPHERS KEEP=1 (keep the work dir). Needs root.
# Its nodes listen on 127.251.0.x, so it can run beside fleet.sh or shaped.sh (127.252),
# though their load still skews the figures (CPU seconds less than wall times).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib/fleet.sh
. bench/lib/fleet.sh
SIZE="${SIZE:-512}"; REPS="${REPS:-2}"
# What the bundled libssh2 offers and OpenSSH 9.2's sshd accepts by default (libssh2's
# CBC, arcfour, blowfish and cast modes are off there unless named; CIPHERS can name them).
CIPHERS="${CIPHERS:-aes128-gcm@openssh.com aes256-gcm@openssh.com aes128-ctr aes192-ctr aes256-ctr chacha20-poly1305@openssh.com}"
read -r -a ciphers <<< "$CIPHERS"
VERSION=v1.23.1
bench_start keadm-ciphers

# Nodes on 127.251.0.x: not the 127.252 of fleet.sh and shaped.sh, whose nodes (and
# shaping) may be up at the same time.
node_net=127.251
node_sshd_extra=()
for i in "${!ciphers[@]}"; do node_sshd_extra[$i]="Ciphers ${ciphers[$i]}"; done
start_fleet "${#ciphers[@]}"

echo "==> a fake offline release with a $SIZE MiB incompressible keadm"
make_release c "$SIZE" 0
make_config c "${#ciphers[@]}" 1
keadm="$work/c/keadm"
bytes=$(stat -c %s "$keadm")
gib=$(echo "$bytes / 1073741824" | bc -l)

# The node's CPU so far: its sshd (pid 1 of the node's namespace) reaps every connection's
# processes, so their user+sys time ends up in its cutime+cstime.
node_cpu() {
  awk -v hz="$(getconf CLK_TCK)" '{sub(/.*\) /, ""); printf "%.2f\n", ($14 + $15) / hz}' "/proc/${node_pid[$1]}/stat"
}

# timed I OUT CMD...: runs CMD; writes "wall user+sys node_cpu" to OUT; returns CMD's status.
timed() {
  local i=$1 out=$2; shift 2
  local n0 rc=0
  n0=$(node_cpu "$i")
  /usr/bin/time -f '%e %U %S' -o "$out.time" "$@" || rc=$?
  sleep 0.3 # the node's connection processes exit (and are reaped) after the client
  awk -v n="$(echo "$(node_cpu "$i") - $n0" | bc -l)" 'END {printf "%s %.2f %.2f\n", $1, $2 + $3, n}' "$out.time" > "$out"
  return $rc
}

# ours I RUN: keadm-batch on node I alone; prints the bytes it uploaded ("fail" on failure,
# its last line of output to stderr: a cipher the node does not take fails the handshake).
ours() {
  local i=$1 rd=$2
  if timed "$i" "$work/c/$rd.cpu" "$bin" batch -c "$work/c/config.yaml" --only "$(printf 'edge-%04d' "$i")" \
      --known-hosts "$work/known_hosts" --host-key-policy off --preflight off \
      --staging-dir "$work/c/staging" --max-package-bytes $(( 2 * bytes + 1048576 )) \
      --run-dir "$work/c/$rd" -q >"$work/c/$rd.log" 2>&1; then
    grep -o '"bytes_uploaded": [0-9]*' "$work/c/$rd/summary.json" | awk '{s+=$2} END {printf "%d\n", s}'
  else
    echo "bench: keadm-batch on node $i: $(grep -o '"error": "[^"]*' "$work/c/$rd/summary.json" 2>/dev/null | cut -c11- | head -n 1 || tail -n 1 "$work/c/$rd.log")" >&2
    echo fail
  fi
}

# theirs I CIPHER RUN UPLOAD(1|0): one OpenSSH client; "ok" or "fail".
theirs() {
  local i=$1 cipher=$2 rd=$3 upload=$4 opts=() o skip=0
  ssh_opts
  for o in "${ssh_opts[@]}"; do # ssh_opts' own -c, replaced by CIPHER
    if [ "$skip" = 1 ]; then skip=0; continue; fi
    if [ "$o" = -c ]; then skip=1; continue; fi
    opts+=("$o")
  done
  local remote=true input=/dev/null
  [ "$upload" = 1 ] && { remote='cat > /tmp/kb-ssh-keadm'; input=$keadm; }
  if timed "$i" "$work/c/$rd.cpu" ssh "${opts[@]}" -c "$cipher" "root@$(host_of "$i")" "$remote" \
      <"$input" 2>"$work/c/$rd.log"; then echo ok
  else echo "bench: ssh to node $i: $(tail -n 1 "$work/c/$rd.log")" >&2; echo fail; fi
}

echo "==> staging the release once"
[ "$(ours 0 warmup)" != fail ] || { echo "bench: the first keadm-batch run failed; see above" >&2; exit 1; }
clear_nodes

declare -A ours_cpu ssh_cpu ours_wall ssh_wall ours_node ssh_node status
uploaded=
per_gib() { echo "($1 - $2) / $gib" | bc -l; } # UPLOAD_RUN FIXED_RUN, CPU-s per GiB
last() { awk '{if (NF) printf "%.2f", $NF; else printf "n/a"}' <<< "$1"; }
for rep in $(seq "$REPS"); do
  for i in "${!ciphers[@]}"; do
    c=${ciphers[$i]}
    run_ours() {
      local up fix
      up=$(ours "$i" "o-$i-$rep"); fix=$(ours "$i" "f-$i-$rep")
      if [ "$up" = fail ] || [ "$fix" = fail ]; then status[$c]+=" keadm-batch-failed"; return; fi
      [ "$up" = "$bytes" ] || echo "bench: $c: keadm-batch uploaded $up bytes for a $bytes-byte keadm (expected it raw)" >&2
      [ "$fix" = 0 ] || echo "bench: $c: the run with keadm on the node uploaded $fix bytes" >&2
      [[ " ${uploaded:-} " == *" $up "* ]] || uploaded+=" $up"
      read -r w u n < "$work/c/o-$i-$rep.cpu"; read -r _ fu fn < "$work/c/f-$i-$rep.cpu"
      ours_cpu[$c]+=" $(per_gib "$u" "$fu")"; ours_node[$c]+=" $(per_gib "$n" "$fn")"; ours_wall[$c]+=" $w"
    }
    run_theirs() {
      if [ "$(theirs "$i" "$c" "s-$i-$rep" 1)" = fail ] || [ "$(theirs "$i" "$c" "t-$i-$rep" 0)" = fail ]; then
        status[$c]+=" ssh-failed"; return
      fi
      read -r w u n < "$work/c/s-$i-$rep.cpu"; read -r _ fu fn < "$work/c/t-$i-$rep.cpu"
      ssh_cpu[$c]+=" $(per_gib "$u" "$fu")"; ssh_node[$c]+=" $(per_gib "$n" "$fn")"; ssh_wall[$c]+=" $w"
    }
    clear_nodes
    # Alternate which goes first, so neither always runs on a warmer page cache.
    if [ $(( (rep + i) % 2 )) = 1 ]; then run_ours; run_theirs; else run_theirs; run_ours; fi
    printf '    rep %s %-30s keadm-batch %s CPU-s/GiB (%s s)   ssh %s CPU-s/GiB (%s s)%s\n' "$rep" "$c" \
      "$(last "${ours_cpu[$c]:-}")" "$(last "${ours_wall[$c]:-}")" "$(last "${ssh_cpu[$c]:-}")" "$(last "${ssh_wall[$c]:-}")" "${status[$c]:-}"
  done
done
clear_nodes

med() { if [ -z "$1" ]; then echo n/a; else tr ' ' '\n' <<< "$1" | grep . | median; fi; }
f2() { if [ "$1" = n/a ]; then echo n/a; else printf '%.2f' "$1"; fi; }
echo
echo "==> results ($(nproc) cores; keadm $bytes bytes, bytes_uploaded per keadm-batch upload: ${uploaded:-none}; median of $REPS; CPU-s per GiB sent, fixed cost of a run subtracted)"
printf '| %-29s | %-21s | %-24s | %-5s | %-24s | %-27s |\n' cipher "keadm-batch CPU-s/GiB" "OpenSSH client CPU-s/GiB" ratio \
  "wall per upload (kb/ssh)" "node CPU-s/GiB (kb/ssh)"
printf '|%s|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..31})" "$(printf -- '-%.0s' {1..23})" "$(printf -- '-%.0s' {1..26})" \
  "$(printf -- '-%.0s' {1..7})" "$(printf -- '-%.0s' {1..26})" "$(printf -- '-%.0s' {1..29})"
for c in "${ciphers[@]}"; do
  o=$(med "${ours_cpu[$c]:-}"); s=$(med "${ssh_cpu[$c]:-}")
  r=$(awk -v a="$o" -v b="$s" 'BEGIN {if (a != "n/a" && b != "n/a" && b > 0) printf "%.1fx", a / b; else print "n/a"}')
  printf '| %-29s | %-21s | %-24s | %-5s | %-24s | %-27s |%s\n' "$c" "$(f2 "$o")" "$(f2 "$s")" "$r" \
    "$(f2 "$(med "${ours_wall[$c]:-}")") / $(f2 "$(med "${ssh_wall[$c]:-}")") s" \
    "$(f2 "$(med "${ours_node[$c]:-}")") / $(f2 "$(med "${ssh_node[$c]:-}")")" "${status[$c]:-}"
done
