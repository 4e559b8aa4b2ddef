# Receives the release tarball on stdin into the upload dir and, as it arrives, unpacks
# the keadm binary inside it to a temporary name; then checks the tarball's sha512 and
# the binary's size, gives the binary mode 0755 and removes the tarball.
#
# Unpacking as it arrives, not after the sha512 check, is what leaves the node little to
# do after the last byte: one `sha512sum` of the tarball, where unpacking all of keadm
# then took ten nodes sharing two cores seconds per wave (bench/README.md). It is safe
# because `tar -O` writes only the entry to its stdout, never a path of the archive's
# choosing, and nothing moves the binary into place before the check has passed. A `tar`
# that stops reading once it has the entry leaves the rest to a `cat`, so `tee` still
# writes the whole tarball.
#
# Parameters:
#   KB_DIR      the upload dir
#   KB_TAR_TMP  the tarball's temporary name in it
#   KB_BIN_TMP  the binary's temporary name in it
#   KB_SHA512   the tarball's sha512
#   KB_ENTRY    the binary's path inside the tarball
#   KB_SIZE     the binary's size, in bytes
# Prints: KB_TARBALL_FAILED on any failure.
# Exit: 0 when the binary is there whole; 3 on any failure, after removing both
# temporary files and reading the rest of stdin (so the sender is not left writing into
# a closed channel): the caller falls back to sending the binary.
if umask 077 && cd "$KB_DIR" &&
  tee "$KB_TAR_TMP" | { gzip -dc | tar -xOf - "$KB_ENTRY" > "$KB_BIN_TMP"; kb_s=$?; cat > /dev/null; exit $kb_s; } &&
  s=$(sha512sum "$KB_TAR_TMP") && [ "${s%% *}" = "$KB_SHA512" ] && [ $(( $(wc -c < "$KB_BIN_TMP") )) = "$KB_SIZE" ] &&
  chmod 755 -- "$KB_BIN_TMP" && rm -f -- "$KB_TAR_TMP"; then
  :
else
  rm -f -- "$KB_TAR_TMP" "$KB_BIN_TMP"; cat > /dev/null; echo KB_TARBALL_FAILED; exit 3
fi
