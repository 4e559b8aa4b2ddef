# After a join past its deadline: the last 40 lines of edgecore's log, from journald or
# else from the log file (a join that timed out waiting for its certificates says why
# only there). Reads only.
# Parameters: none.
# Exit: 0 when either source had it.
journalctl -u edgecore -n 40 --no-pager 2>/dev/null | grep -v '^-- ' || tail -n 40 /var/log/kubeedge/edgecore.log 2>/dev/null
