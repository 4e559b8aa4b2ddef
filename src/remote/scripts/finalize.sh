# Moves uploaded temporary files into place in the upload dir and writes their sidecars
# (<name>.sha256, the sha256 of what was sent, which the prepare step reads back). Every
# rename is within one directory, so each file appears whole or not at all.
# Parameters:
#   KB_DIR     the upload dir
#   KB_EXIT    the exit status when a file cannot be moved into place
#   $@         triples: the temporary name, the final name, the sha256
# Exit: KB_EXIT when the dir or a file cannot be moved into place, at the first
# failure; else it ends with status 0 and the script goes on.
cd "$KB_DIR" || exit "$KB_EXIT"
while [ "$#" -ge 3 ]; do
  { mv -f -- "$1" "$2" && printf '%s\n' "$3" > "$2.sha256"; } || exit "$KB_EXIT"
  shift 3
done
