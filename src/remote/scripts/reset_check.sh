# The check after `keadm reset` exited with 0, read-only, run with the privileges keadm
# had: that the node is clean, as keadm's reset promises. No process named edgecore, no
# edgecore unit (the unit file keadm writes, /etc/systemd/system/edgecore.service, nor
# one systemd still has loaded), no /etc/kubeedge, or an empty one (keadm join's own
# rule: an empty directory is often a mount point).
# Parameters: none.
# Prints: KB_LEFT pid|unit|path <what> for each thing left; KB_RESET_CHECKED last.
# Exit: 0.
# shellcheck source=lib.sh
. ./lib.sh
left() { printf 'KB_LEFT %s %s\n' "$1" "$2"; }
kb_edgecore_pids
for p in $ec; do left pid "$p"; done
u=/etc/systemd/system/edgecore.service
if [ -e "$u" ] || [ -L "$u" ]; then left unit "$u"; fi
# systemd's view, where it runs: the unit still active (or on its way), or loaded from a
# file that is still there (another directory than keadm's). A unit whose file is gone
# but which systemd has not reloaded yet, and which is stopped, is not left.
SD=/run/systemd/system
if has systemctl && [ -d "$SD" ]; then
  st=$(systemctl show -p ActiveState -p FragmentPath edgecore.service 2>/dev/null)
  as=$(printf '%s\n' "$st" | sed -n 's/^ActiveState=//p')
  fp=$(printf '%s\n' "$st" | sed -n 's/^FragmentPath=//p')
  case $as in
    active|activating|reloading|deactivating) left unit "edgecore.service is $as in systemd" ;;
  esac
  if [ -n "$fp" ] && [ "$fp" != "$u" ] && { [ -e "$fp" ] || [ -L "$fp" ]; }; then left unit "$fp"; fi
fi
kb_management_dir_state
if [ -n "$kd" ]; then left path "$KE ($kd)"; fi
echo KB_RESET_CHECKED
