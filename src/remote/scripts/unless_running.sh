# Goes before an upgrade with a known target version: a node whose running edgecore
# already is that version (as it logged when it started, else as edgecore.yaml says) is
# left alone, so a rerun of an upgrade touches only the nodes not done yet (as KubeEdge's
# NodeUpgradeJob and k0sctl skip them).
# Parameters:
#   KB_TARGET  the target version, without its leading v (1.23.1)
# Prints: keadm-batch: edgecore already runs <version>, so keadm upgrade edge was not run
# Exit: 0, ending the script, when edgecore already runs the target; else the script
# goes on.
# shellcheck source=lib.sh
. ./lib.sh
kb_edgecore_pids
kb_pid=
for p in $ec; do kb_pid=$p; break; done
if [ -n "$kb_pid" ]; then
  kb_v=$(kb_logged_version "$kb_pid")
  [ -n "$kb_v" ] || kb_v=$(kb_config_version)
  if [ "${kb_v#v}" = "$KB_TARGET" ]; then echo "keadm-batch: edgecore already runs $kb_v, so keadm upgrade edge was not run"; exit 0; fi
fi
