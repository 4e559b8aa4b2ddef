#!/usr/bin/env bash
# The release's two proofs, as root on Debian, after scripts/release.sh has filled dist/:
#   1. the amd64 binary from the release tarball runs a real batch against the demo fleet
#      (scripts/demo.sh: sshd nodes on loopback) from inside a minimal Debian root file
#      system (debootstrap --variant=minbase, from Debian's mirror) that has no libssl and
#      no libcrypto at all;
#   2. the arm64 binary from its tarball runs the same batch under qemu-user-static.
# The root file system is kept in WORK (default /var/tmp/keadm-batch-release-proof) and
# reused; SUITE picks the Debian release (default bookworm).
#   scripts/release-proof.sh
#   SUITE=bullseye WORK=/srv/proof scripts/release-proof.sh
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
work=${WORK:-/var/tmp/keadm-batch-release-proof}
suite=${SUITE:-bookworm}
root=$work/rootfs-$suite

[ "$(id -u)" = 0 ] || { echo "release-proof: run as root (debootstrap, chroot, sshd nodes)" >&2; exit 1; }
for arch in amd64 arm64; do
    [ -f "dist/keadm-batch-$version-linux-$arch.tar.gz" ] ||
        { echo "release-proof: dist/keadm-batch-$version-linux-$arch.tar.gz is missing; run scripts/release.sh" >&2; exit 1; }
done
command -v debootstrap >/dev/null && command -v qemu-aarch64-static >/dev/null ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap qemu-user-static >/dev/null

mkdir -p "$work"
for arch in amd64 arm64; do
    rm -rf "${work:?}/$arch"
    mkdir -p "$work/$arch"
    tar -xzf "dist/keadm-batch-$version-linux-$arch.tar.gz" -C "$work/$arch" --strip-components=1
done

echo "==> proof 1: amd64, from a $suite root file system without libssl"
if [ ! -x "$root/bin/sh" ]; then
    debootstrap --variant=minbase "$suite" "$root" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 ||
        { tail -n 20 "$work/debootstrap.log" >&2; exit 1; }
fi
install -m 0755 "$work/amd64/keadm-batch" "$root/usr/local/bin/keadm-batch"
ssl=$(find "$root" -xdev \( -name 'libssl*' -o -name 'libcrypto*' \) -print)
if [ -n "$ssl" ]; then
    echo "release-proof: the root file system has OpenSSL's libraries:" >&2
    echo "$ssl" >&2
    exit 1
fi
echo "libssl or libcrypto files in $root: none"
echo "dpkg in the chroot: $(chroot "$root" dpkg-query -W -f '${Package} ' 'libssl*' 'openssl' 2>&1 | tr '\n' ' ')"
echo "ldd in the chroot: $(chroot "$root" ldd /usr/local/bin/keadm-batch 2>&1 || true)"
chroot "$root" /usr/local/bin/keadm-batch --version
# The demo's files are under /var/tmp: a private mount namespace shows them at the same
# path inside the root file system (and /proc), and runs the binary there.
cat >"$work/keadm-batch-in-chroot" <<WRAP
#!/bin/sh
export KB_ROOT='$root' KB_CWD="\$PWD"
exec unshare --mount --propagation private -- /bin/sh -c '
  mount --bind /var/tmp "\$KB_ROOT/var/tmp" && mount -t proc proc "\$KB_ROOT/proc" &&
  exec chroot "\$KB_ROOT" /bin/sh -c "cd \\"\\\$KB_CWD\\" && exec /usr/local/bin/keadm-batch \\"\\\$@\\"" keadm-batch "\$@"' sh "\$@"
WRAP
chmod 0755 "$work/keadm-batch-in-chroot"
KEADM_BATCH=$work/keadm-batch-in-chroot bash scripts/demo.sh

echo
echo "==> proof 2: arm64 under qemu-user-static"
cat >"$work/keadm-batch-arm64" <<WRAP
#!/bin/sh
exec qemu-aarch64-static '$work/arm64/keadm-batch' "\$@"
WRAP
chmod 0755 "$work/keadm-batch-arm64"
"$work/keadm-batch-arm64" --version
file "$work/arm64/keadm-batch" 2>/dev/null || true
KEADM_BATCH=$work/keadm-batch-arm64 bash scripts/demo.sh
cd "$repo"
