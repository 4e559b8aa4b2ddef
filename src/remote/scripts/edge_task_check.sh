# The read-only round trip after the edge's upgrade family (keadm upgrade edge, backup
# edge, rollback edge, config-update), run with the privileges keadm had: keadm's report,
# the version the running edgecore says it is, and the Node name edgecore registers
# under. The running edgecore's version is the one that process logged as it started
# (matched by its pid, so an edgecore that failed to start, or the file at
# /usr/local/bin, is not taken for it), else edgecore.yaml's edgecoreVersion. keadm
# starts edgecore as its last step, so the check gives it up to 15 s to appear and log
# its version.
# Parameters: none.
# Prints: KB_REPORT <the report's first 4 KiB on one line> or KB_REPORT_NONE;
# KB_RUNNING <pid> <version> or KB_RUNNING_NONE; KB_CONFIGURED <edgecoreVersion>;
# KB_NODE_NAME <hostnameOverride>; KB_EDGE_TASK_CHECKED last.
# Exit: 0.
# shellcheck source=lib.sh
. ./lib.sh
f=/etc/kubeedge/upgrade_report.json
if [ -f "$f" ]; then
  printf 'KB_REPORT '
  head -c 4096 "$f" | tr '\n\r' '  '
  echo
else
  echo 'KB_REPORT_NONE'
fi
n=0
while :; do
  kb_edgecore_pids
  [ -n "$ec" ] || [ "$n" -ge 15 ] && break
  n=$((n + 1))
  sleep 1
done
pid=
for p in $ec; do pid=$p; break; done
if [ -n "$pid" ]; then
  n=0
  while :; do
    v=$(kb_logged_version "$pid")
    [ -n "$v" ] || [ "$n" -ge 15 ] && break
    n=$((n + 1))
    sleep 1
  done
  echo "KB_RUNNING $pid $v"
else
  echo 'KB_RUNNING_NONE'
fi
echo "KB_CONFIGURED $(kb_config_version)"
name=$(kb_hostname_override)
echo "KB_NODE_NAME $name"
echo KB_EDGE_TASK_CHECKED
