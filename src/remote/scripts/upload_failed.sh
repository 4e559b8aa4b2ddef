# After a failed upload: removes the partial temporary file (it may be what filled the
# disk) and prints the space left in the upload dir.
# Parameters:
#   KB_DIR  the upload dir
#   KB_TMP  the temporary name in it
# Prints: KB_FREE <KiB free in the upload dir's file system>.
# Exit: 0 when it could tell; else the failed step's status.
cd "$KB_DIR" && rm -f -- "$KB_TMP" && df -Pk . | awk 'NR == 2 { print "KB_FREE " $4 }'
