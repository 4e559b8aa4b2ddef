# Goes before the command that runs keadm (keadm's own `cd <dir> && ./keadm <cmd>`, which
# follows this text as the plan has it): records the shell's process group in
# $KB_PGID_FILE, so a deadline can kill the whole tree on the node (kill.sh, stop.sh),
# then takes stdin from /dev/null (`yes |` still feeds a reset): nothing the control host
# sends can reach keadm. The record is the group id and its leader's start time, written
# after removing any earlier record, so kill.sh can tell our group from an unrelated one
# that got the same number later.
# Parameters:
#   KB_PGID_FILE  the record: .keadm-batch.<node index>.pgid in the upload dir (one per
#                 config node: two nodes of a config may be one host)
# Exit: the command's.
# shellcheck source=lib.sh
. ./lib.sh
{ rm -f -- "$KB_PGID_FILE"; read -r _ _ _ _ kb_pgid _ < /proc/$$/stat && kb_start_time < /proc/"$kb_pgid"/stat && echo "$kb_pgid $kb_start" > "$KB_PGID_FILE"; } 2>/dev/null
exec < /dev/null
