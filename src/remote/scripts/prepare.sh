# The prepare step: creates and checks the upload dir, prints `uname -m`, and the size
# and recorded sha256 (sidecar) of each file the control host may skip uploading. Runs
# with the privileges the later steps will have (under sudo for non-root logins).
#
# The dir must be a real directory owned by the user we act as, not writable by others,
# and every parent must be owned by root or that user and not writable by others unless
# sticky (like /tmp): then nobody else can swap a file between our upload and our run.
#
# Parameters:
#   KB_DIR     the upload dir
#   KB_VERIFY  non-empty: also print the sha256 the node computes of each file
#   $@         the names of the files in the upload dir the control host asks about
# Prints: KB_ARCH <uname -m>; KB_BAD <why> when the dir cannot be trusted (and stops),
# else KB_DIR_OK; KB_FILE <index> <size> <sidecar's sha256> for each file there with its
# sidecar, and with KB_VERIFY KB_SHA <index> <sha256> for each file there. Files are
# named by their index in $@, never by name: a name is data, and appears in no output.
# Exit: 0, also when the dir is refused (KB_BAD says so).
umask 077
d=$KB_DIR
echo "KB_ARCH $(uname -m)"
me=$(id -u)
if [ -L "$d" ]; then echo "KB_BAD $d is a symbolic link; remove it or choose another remoteDir"; exit 0; fi
[ -d "$d" ] || err=$(mkdir -p "$d" 2>&1) || { echo "KB_BAD cannot create $d: $err"; exit 0; }
# Every path from the dir up to /, each refused if it is a symlink; then one `stat` for
# all of them (a fork per path costs on a fleet of small nodes). In a function, so the
# list does not take the file names' place in $@.
kb_stat_paths() {
  set --
  p="$d"
  while :; do
    if [ -L "$p" ]; then echo "KB_BAD $p is a symbolic link"; return 1; fi
    set -- "$@" "$p"
    [ "$p" = / ] && break
    # The parent without forking dirname: strip the last component.
    case "$p" in */*) q=${p%/*}; p=${q:-/} ;; *) break ;; esac
  done
  st=$(stat -c '%u %a %n' -- "$@" 2>/dev/null) || { echo "KB_BAD cannot stat the directories of $d"; return 1; }
}
kb_stat_paths || exit 0
while read -r u a n; do
  if [ "$u" != 0 ] && [ "$u" != "$me" ]; then echo "KB_BAD $n is owned by uid $u, not by root or uid $me"; exit 0; fi
  m=$(( 0$a ))
  if [ "$n" = "$d" ]; then
    if [ "$u" != "$me" ]; then echo "KB_BAD $d is owned by uid $u, not uid $me"; exit 0; fi
    if [ $(( m & 022 )) -ne 0 ]; then echo "KB_BAD $d is writable by other users (mode $a)"; exit 0; fi
  elif [ $(( m & 022 )) -ne 0 ] && [ $(( m & 01000 )) -eq 0 ]; then echo "KB_BAD $n is writable by other users (mode $a)"; exit 0; fi
done <<KB_STAT
$st
KB_STAT
echo KB_DIR_OK
# A file or sidecar the script cannot read is reported as not there (so it is uploaded
# again): its size is the digits a `wc` that succeeded printed, its leading blanks
# (BSD's) cut by parameter expansion (`$(( $(wc ...) ))` of nothing is an error that ends
# a dash script), and the sum is cleared first, so a sidecar that cannot be read leaves
# none rather than the file before's.
kb_i=0
for kb_f in "$@"; do
  if [ -f "$d/$kb_f" ] && [ -f "$d/$kb_f.sha256" ]; then
    kb_sum=; read -r kb_sum < "$d/$kb_f.sha256"
    kb_size=$(wc -c < "$d/$kb_f") || kb_size=; kb_size=${kb_size##*[!0-9]}
    [ -n "$kb_size" ] && [ -n "$kb_sum" ] && echo "KB_FILE $kb_i $kb_size ${kb_sum%% *}"
  fi
  if [ -n "$KB_VERIFY" ] && [ -f "$d/$kb_f" ]; then echo "KB_SHA $kb_i $(sha256sum < "$d/$kb_f" | cut -c1-64)"; fi
  kb_i=$((kb_i + 1))
done
