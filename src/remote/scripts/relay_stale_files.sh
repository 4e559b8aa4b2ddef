# At the start of a run on a node of a relaying site, with the run's privilege: removes
# the key files a fetch of an earlier run left in the upload dir when its node died
# mid-way (a fetch removes its own whatever else happens), once a day old, so a
# concurrent run's fetch keeps its own.
# Parameters:
#   KB_DIR  the upload dir
# Exit: find's; nothing depends on it.
( cd "$KB_DIR" 2>/dev/null && find . ! -name . -prune \( -name '.*.tmp.key' -o -name '.*.tmp.hosts' -o -name '.*.tmp.err' \) -type f -mtime +0 -exec rm -f -- {} + ) 2>/dev/null
