# Stops the process group run.sh recorded, after its deadline, checked as kill.sh checks
# it: SIGTERM to the group, so keadm and the operator's scripts under it can clean up,
# then a wait of up to the grace period for every live process of the group to be gone,
# then SIGKILL to what is left; with no grace, SIGKILL at once. The group is watched in
# /proc (state, parent, group after the command's name, as kill_siblings.sh reads them,
# cut out by expansion: no fork per process), so a zombie its parent has yet to reap does
# not count as running. The wait is in tenths of a second where `sleep` takes them (GNU,
# BusyBox), else in seconds.
# Parameters:
#   KB_PGID_FILE    the record run.sh wrote
#   KB_GRACE_TENTHS the grace period, in tenths of a second
# Prints: KB_STOP exited (gone within the grace period), KB_STOP killed (SIGKILL) or
# KB_STOP gone (nothing of it was running).
# Exit: 1 when there is no record of ours; else 0.
# shellcheck source=lib.sh
. ./lib.sh
kb_recorded_group || exit 1
kb_alive() {
  for kb_d in /proc/[0-9]*; do
    read -r kb_s < "$kb_d/stat" 2>/dev/null || continue
    kb_s=${kb_s##*) }; kb_r=${kb_s#* }; kb_r=${kb_r#* }
    [ "${kb_r%% *}" = "$g" ] && [ "${kb_s%% *}" != Z ] && return 0
  done
  return 1
}
kb_alive || { echo 'KB_STOP gone'; exit 0; }
kb_left=$KB_GRACE_TENTHS
if [ "$kb_left" -gt 0 ]; then
  kill -s TERM -- -"$g" 2>/dev/null
  while [ "$kb_left" -gt 0 ] && kb_alive; do
    if sleep 0.1 2>/dev/null; then kb_left=$((kb_left - 1)); else sleep 1; kb_left=$((kb_left - 10)); fi
  done
  kb_alive || { echo 'KB_STOP exited'; exit 0; }
fi
kill -s KILL -- -"$g" 2>/dev/null
echo 'KB_STOP killed'
