# Receives a file on stdin into the upload dir under a temporary name, with its mode:
# over exec, for nodes without SFTP and under sudo. Its size is checked after the
# producer ends (a connection that breaks mid-stream ends the remote `cat` as an ordinary
# end of input, and a short file must never go further) and, with a sha256, its digest
# too, before anything moves it into place.
#
# A packed file is unpacked as it arrives. What is unpacked is hashed on the way, through
# a `tee`, so nothing is read again after the last byte. A plain copy checked by OpenSSL
# goes straight to the file and is hashed after the last byte, from the page cache (0.04 s
# for a 29 MB image archive fed at 20 Mbit/s), where a `tee` would put a second pipe in
# the way of every byte; `sha256sum`, five times slower, always hashes on the way. POSIX
# sh has no `pipefail`: a producer that fails part-way is caught by the digest, a `tee`
# that cannot write (a full disk) by the size.
#
# Parameters:
#   KB_DIR          the upload dir
#   KB_TMP          the temporary name in it
#   KB_MODE         the file's mode, in octal (644, 755)
#   KB_SIZE         the size the file must have, in bytes (unpacked)
#   KB_UNPACK       empty for the bytes as they arrive, else what they are packed with:
#                   gzip, zstd or xz
#   KB_SHA256       empty for no digest check, else the sha256 the file must have
#   KB_HASHER       what checks it: openssl or sha256sum
#   KB_FAILED       what a failure does: keep (leaves the file to the caller), remove
#                   (removes it), drain (removes it and reads the rest of stdin, so the
#                   sender is not left writing into a closed channel)
#   KB_FAILED_LINE  what a failure that removes the file prints (KB_GZIP_FAILED), or empty
# Prints: KB_SHA256_GOT <the node's digest> when the digest differs.
# Exit: 0 when the file is there whole; 3 when it failed and was removed; with
# KB_FAILED=keep, the failed step's status.
kb_unpack() {
  case $KB_UNPACK in
    '') cat ;;
    gzip) gzip -dc ;;
    zstd) zstd -dcq ;;
    xz) xz -dc ;;
    *) return 2 ;;
  esac
}
kb_hash() {
  if [ "$KB_HASHER" = openssl ]; then openssl dgst -sha256 -r; else sha256sum; fi
}
kb_write() {
  if [ -z "$KB_SHA256" ]; then
    kb_unpack > "$KB_TMP"
  elif [ "$KB_HASHER" = openssl ] && [ -z "$KB_UNPACK" ]; then
    cat > "$KB_TMP" && s=$(kb_hash < "$KB_TMP") && kb_digest_is
  else
    s=$(kb_unpack | tee "$KB_TMP" | kb_hash) && kb_digest_is
  fi
}
kb_digest_is() {
  [ "${s%% *}" = "$KB_SHA256" ] || { echo "KB_SHA256_GOT ${s%% *}"; false; }
}
if umask 077 && cd "$KB_DIR" && kb_write && [ $(( $(wc -c < "$KB_TMP") )) = "$KB_SIZE" ] && chmod "$KB_MODE" -- "$KB_TMP"; then
  :
else
  kb_s=$?
  [ "$KB_FAILED" = keep ] && exit "$kb_s"
  rm -f -- "$KB_TMP"
  [ "$KB_FAILED" = drain ] && cat > /dev/null
  [ -n "$KB_FAILED_LINE" ] && echo "$KB_FAILED_LINE"
  exit 3
fi
