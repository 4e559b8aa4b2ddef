# Goes after the prepare step when the node may get a packed copy of the binary (zstd or
# xz) or the release tarball instead of the binary: prints the tools that actually work.
# Each is run on empty input, so a stub such as /bin/false in place of tar does not
# count. A dozen tiny processes per node, so the pipeline adds it only when it may pay off.
# Parameters: none.
# Prints: KB_TOOLS, then each working tool of sha512sum, gzip, tar, xz, zstd, sha256sum,
# openssl after a space.
# Exit: 0.
kb_t=
command -v sha512sum >/dev/null 2>&1 && sha512sum </dev/null >/dev/null 2>&1 && kb_t="$kb_t sha512sum"
command -v gzip >/dev/null 2>&1 && echo | gzip -c 2>/dev/null | gzip -dc >/dev/null 2>&1 && kb_t="$kb_t gzip"
command -v tar >/dev/null 2>&1 && tar -cf - /dev/null 2>/dev/null | tar -tf - >/dev/null 2>&1 && kb_t="$kb_t tar"
command -v xz >/dev/null 2>&1 && echo | xz -c 2>/dev/null | xz -dc >/dev/null 2>&1 && kb_t="$kb_t xz"
command -v zstd >/dev/null 2>&1 && echo | zstd -qc 2>/dev/null | zstd -dcq >/dev/null 2>&1 && kb_t="$kb_t zstd"
command -v sha256sum >/dev/null 2>&1 && sha256sum </dev/null >/dev/null 2>&1 && kb_t="$kb_t sha256sum"
# OpenSSL counts only when it prints sha256("abc") in sha256sum's shape.
command -v openssl >/dev/null 2>&1 && kb_o=$(printf abc | openssl dgst -sha256 -r 2>/dev/null) && [ "${kb_o%% *}" = ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad ] && kb_t="$kb_t openssl"
echo "KB_TOOLS$kb_t"
