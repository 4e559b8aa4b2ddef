# Goes right after a step the command takes first (--reset-first's
# `keadm reset edge --force` before a join, --backup's `keadm backup edge` before an
# upgrade), which precedes this text; the command follows it. Prints the first step's exit
# status on a line of its own, and lets the command run only when that was 0.
# Parameters:
#   KB_FIRST_STEP    the first step's name, as the line names it
#   KB_FIRST_FAILED  the exit status when the first step failed
# Prints: keadm-batch: <KB_FIRST_STEP> exited with status <status>
# Exit: KB_FIRST_FAILED when the first step did not exit with 0; else the script goes on.
kb_first=$?
echo "keadm-batch: $KB_FIRST_STEP exited with status $kb_first"
[ "$kb_first" -eq 0 ] || exit "$KB_FIRST_FAILED"
