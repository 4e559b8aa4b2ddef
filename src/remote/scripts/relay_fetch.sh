# A node of a relaying site fetches a payload from its source node into the upload dir
# with its own ssh client, bound to its own address, and checks its size and sha256
# before anything moves it. The read stops at the payload's size plus one byte and ssh's
# stderr at KB_ERR_CAP bytes; ssh's own exit status is kept through the pipe. Where
# util-linux's prlimit works, the kernel holds ssh's writes to that size (RLIMIT_FSIZE)
# and ssh writes the copy itself; elsewhere the copy goes through `head -c`. The run's
# key comes on stdin, up to its last line (never on a command line); it and the source's
# host key are written to 0600 files beside the copy and removed whatever happens. A
# read still going after KB_LIMIT seconds is stopped by the node's `timeout`. A node
# whose CPU has AES instructions asks for AES-GCM first.
# Parameters:
#   KB_DIR      the upload dir
#   KB_TMP      the temporary name the copy is written to there
#   KB_KEY_END  the last line of the key on stdin
#   KB_ALIAS    the alias the source's host key is known by
#   KB_KNOWN    the source's host key, as a known_hosts line under that alias
#   KB_BIND     the node's own address (what the source's from= admits)
#   KB_PORT, KB_USER, KB_HOST  the source's sshd
#   KB_SIZE     the payload's size, in bytes
#   KB_ERR_CAP  how much of ssh's stderr is kept, in bytes
#   KB_LIMIT    how long the read may take, in seconds
#   KB_HASHER   what checks the sha256: openssl or sha256sum
#   KB_SHA256   the sha256 the control host verified
#   KB_MODE     the copy's mode, in octal
# Prints: KB_RELAY_FAILED <why> on any failure.
# Exit: 0 when the copy is there whole; 1 on any failure, after removing it.
umask 077 && cd "$KB_DIR" || exit 1
kb_k=$KB_TMP.key; kb_h=$KB_TMP.hosts; kb_e=$KB_TMP.err
trap 'rm -f -- "$kb_k" "$kb_h" "$kb_e"' EXIT; trap 'exit 1' HUP INT TERM
kb_fail() { rm -f -- "$KB_TMP"; echo "KB_RELAY_FAILED $*"; exit 1; }
command -v ssh >/dev/null 2>&1 || kb_fail the node has no ssh client
if ! { while IFS= read -r kb_l; do printf '%s\n' "$kb_l"; [ "$kb_l" = "$KB_KEY_END" ] && break; done > "$kb_k" && printf '%s\n' "$KB_KNOWN" > "$kb_h"; }; then kb_fail cannot write the relay key; fi
kb_over=$((KB_SIZE + 1))
set -- ssh -F /dev/null -n -i "$kb_k" -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=yes \
  -o UserKnownHostsFile="$kb_h" -o GlobalKnownHostsFile=/dev/null -o HostKeyAlias="$KB_ALIAS" \
  -o ConnectTimeout=10 -o ServerAliveInterval=5 -o ServerAliveCountMax=3 -o LogLevel=ERROR \
  -b "$KB_BIND" -p "$KB_PORT" -l "$KB_USER"
grep -qw aes /proc/cpuinfo 2>/dev/null && set -- "$@" -c aes128-gcm@openssh.com,chacha20-poly1305@openssh.com,aes128-ctr
kb_cap=; prlimit --fsize=1 --core=0 true </dev/null >/dev/null 2>&1 && kb_cap=1 && set -- prlimit --fsize="$kb_over" --core=0 "$@"
command -v timeout >/dev/null 2>&1 && set -- timeout "$KB_LIMIT" "$@"
if [ -n "$kb_cap" ]; then
  kb_st=$( { { "$@" "$KB_HOST" fetch > "$KB_TMP" 2>&4 3>&- 4>&-; echo "$?" >&3; } 4>&1 | head -c "$KB_ERR_CAP" > "$kb_e" 3>&-; } 3>&1 )
else
  kb_st=$( { { { "$@" "$KB_HOST" fetch 2>&4 3>&- 4>&-; echo "$?" >&3; } | head -c "$kb_over" > "$KB_TMP" 3>&- 4>&-; } 4>&1 | head -c "$KB_ERR_CAP" > "$kb_e" 3>&-; } 3>&1 )
fi
[ -f "$KB_TMP" ] || kb_fail cannot write the copy
kb_got=$(( $(wc -c < "$KB_TMP") ))
[ "$kb_got" -le "$KB_SIZE" ] || kb_fail the source sent more than "$KB_SIZE" bytes
[ "$kb_st" != 124 ] || kb_fail the read did not end within "$KB_LIMIT" s
[ "$kb_st" = 0 ] || kb_fail "$(head -c 300 "$kb_e" | tr '\n' ' ')"
[ "$kb_got" = "$KB_SIZE" ] || kb_fail the copy from "$KB_HOST" has "$kb_got" bytes, not "$KB_SIZE"
if [ "$KB_HASHER" = openssl ]; then kb_s=$(openssl dgst -sha256 -r < "$KB_TMP") || kb_s=
else kb_s=$(sha256sum < "$KB_TMP") || kb_s=
fi
[ "${kb_s%% *}" = "$KB_SHA256" ] || kb_fail the copy from "$KB_HOST" does not have the sha256 this machine verified
chmod "$KB_MODE" -- "$KB_TMP"
