# What a node that never registered says of its edgecore, once its wait has ended: the
# last 30 lines of edgecore's log (as edgecore_log.sh reads it), then one marker line and
# its hostname (a node joined without --edgenode-name registers under it); the markers
# last, so the log cannot push them out of the transcript's tail. Reads only.
# Parameters: none.
# Prints: the log lines; kb-edgecore: running (or not running); kb-hostname: <name>.
# Exit: 0.
journalctl -u edgecore -n 30 --no-pager 2>/dev/null | grep -v '^-- ' || tail -n 30 /var/log/kubeedge/edgecore.log 2>/dev/null
if pidof edgecore >/dev/null 2>&1 || pgrep -x edgecore >/dev/null 2>&1; then echo 'kb-edgecore: running'; else echo 'kb-edgecore: not running'; fi
echo "kb-hostname: $(hostname 2>/dev/null || cat /proc/sys/kernel/hostname)"
