# Removes relay lines from the login user's authorized_keys, as the login user in its
# home ($HOME): the lines tagged KB_RUN_TAG (this run's; none at the start of a
# run), and every relay line whose expiry has passed by the node's clock, with the copies
# those lines served. Lines of another run or shard still serving stay.
#
# Byte-exact under LC_ALL=C (a UTF-8 locale makes grep call a file with a Latin-1 byte
# binary), the tag matched as the line's last field: grep writes the kept lines to a new
# file beside the old one (keeping its mode), the removed lines are counted, and only
# when the two add up to the old file (and it did not change meanwhile) is the new one
# renamed into place. Anything else leaves the file as it was.
# Parameters:
#   KB_LINE_SHAPE  the shape of every line the relay writes, up to its tag's random part (an ERE)
#   KB_RUN_TAG     the random part of this run's tag, or empty
# Prints: KB_RELAY_KEPT <why> when it left the file as it was although lines were to go.
# Exit: 0.
( kb_kept() { echo "KB_RELAY_KEPT $*"; exit 0; }
LC_ALL=C; export LC_ALL
umask 077
case $HOME in /*) ;; *) exit 0;; esac
kb_ak=$HOME/.ssh/authorized_keys
kb_new=$HOME/.ssh/.authorized_keys.keadm-batch.$$
kb_shape=$KB_LINE_SHAPE
kb_tags=$KB_RUN_TAG
kb_now=$(date +%Y%m%d%H%M%S 2>/dev/null)
case $kb_now in [0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]) ;; *) kb_now=;; esac
if [ -f "$kb_ak" ] && [ -n "$kb_now" ]; then
  kb_seen=$(grep -a -E -- "${kb_shape}[0-9A-Za-z_-]+\$" "$kb_ak" 2>/dev/null | sed -n 's/^.*,expiry-time="\([0-9]*\)" .* keadm-batch-relay-\([0-9A-Za-z_-]*\)$/\1 \2/p')
  while read -r kb_e kb_t; do
    [ -n "$kb_t" ] || continue
    case "|$kb_tags|" in *"|$kb_t|"*) continue;; esac
    if [ "1${kb_e%??????}" -lt "1${kb_now%??????}" ] || { [ "${kb_e%??????}" = "${kb_now%??????}" ] && [ "1${kb_e#????????}" -lt "1${kb_now#????????}" ]; }; then
      kb_tags=$kb_tags${kb_tags:+|}$kb_t
    fi
  done <<KB_SEEN
$kb_seen
KB_SEEN
fi
[ -n "$kb_tags" ] || exit 0
kb_ifs=$IFS; IFS='|'
for kb_t in $kb_tags; do rm -f -- "$HOME/.keadm-batch-relay-$kb_t."*; done
IFS=$kb_ifs
kb_drop="${kb_shape}($kb_tags)\$"
[ -e "$kb_ak" ] || exit 0
grep -a -q -E -- "$kb_drop" "$kb_ak"; kb_st=$?
[ "$kb_st" = 1 ] && exit 0
[ "$kb_st" = 0 ] || kb_kept "grep cannot read the login user's authorized_keys (exit $kb_st)"
[ ! -L "$kb_ak" ] || kb_kept "the login user's .ssh/authorized_keys is a symbolic link"
if [ ! -f "$kb_ak" ] || [ ! -w "$kb_ak" ]; then kb_kept "the login user's .ssh/authorized_keys is not a file it can write"; fi
if ! { rm -f -- "$kb_new" && cp -p -- "$kb_ak" "$kb_new"; }; then rm -f -- "$kb_new"; kb_kept "cannot make a new authorized_keys beside the old one"; fi
kb_old=$(( $(wc -c < "$kb_ak") ))
grep -a -v -E -- "$kb_drop" "$kb_ak" > "$kb_new"; kb_st=$?
[ "$kb_st" -le 1 ] || { rm -f -- "$kb_new"; kb_kept "grep cannot filter the login user's authorized_keys (exit $kb_st)"; }
kb_gone=$(( $(grep -a -E -- "$kb_drop" "$kb_ak" | wc -c) ))
kb_left=$(( $(wc -c < "$kb_new") ))
kb_end=0; [ $(( $(tail -c 1 -- "$kb_ak" | wc -l) )) = 1 ] || kb_end=1
if [ $(( kb_left + kb_gone )) != $(( kb_old + kb_end )) ] || [ "$kb_gone" = 0 ]; then rm -f -- "$kb_new"; kb_kept "the filter's output does not add up to the file ($kb_left bytes kept and $kb_gone removed of $kb_old)"; fi
[ $(( $(wc -c < "$kb_ak") )) = "$kb_old" ] || { rm -f -- "$kb_new"; kb_kept "it changed while it was being cleared"; }
mv -f -- "$kb_new" "$kb_ak" || { rm -f -- "$kb_new"; kb_kept "cannot rename the new authorized_keys into place"; }
) </dev/null 2>/dev/null
