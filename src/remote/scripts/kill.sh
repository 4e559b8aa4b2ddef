# After a deadline or an abort: kills the process group run.sh recorded, only if its
# leader is still the process that made the record (same start time) or is gone.
# `kill -s KILL --` is the spelling dash, bash and busybox all accept.
# Parameters:
#   KB_PGID_FILE  the record run.sh wrote
# Exit: 1 when there is no record of ours; else kill's.
# shellcheck source=lib.sh
. ./lib.sh
kb_recorded_group || exit 1
kill -s KILL -- -"$g"
