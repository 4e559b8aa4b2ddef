#!/usr/bin/env bash
# Builds the release into dist/ and checks it. For amd64 and arm64:
#   keadm-batch-<version>-linux-<arch>.tar.gz   the binary, README.md, LICENSE,
#                                               THIRD-PARTY-LICENSES.txt (what is linked
#                                               in), completions (bash, zsh, fish) and
#                                               the man page
#   keadm-batch_<version>_<arch>.deb            the same, installed under /usr
#   keadm-batch-<version>-1.<rpm arch>.rpm
# and keadm-batch-<version>-image.oci.tar, one OCI image for both arches (FROM scratch: the
# binary, busybox-static as /bin/sh, Mozilla's CA certificates from Debian's
# ca-certificates; see Containerfile). Every artifact gets KubeEdge's checksum file,
# checksum_<artifact>.txt: the bare sha512 hex digest.
#
# What the release takes from outside is pinned by hash, so that a file changed on a
# registry, a mirror, the way or in a cache cannot get in (docs/decisions.md): zig and
# cargo-zigbuild are installed with pip --require-hashes from
# scripts/release-requirements.txt, and the image's busybox-static and ca-certificates
# .debs must have the SHA256 that apt's signed index gives for the version it names (a
# cached one that does not is fetched again; a fetched one that does not fails the
# script). The image's CA bundle is made from that ca-certificates package, never copied
# from the build host, where a CA added locally would otherwise ship.
#
# The binaries are static (musl; OpenSSL and zlib built in through the `vendored` feature,
# libssh2 and liblzma always) and stripped. The checks, which fail the script: no dynamic dependency beyond
# libc, libm, libpthread, libdl and ld-linux, no GLIBC symbol version above 2.17 (both for
# a glibc fallback build), no symbol table, `--version` names the commit and the built-in
# libraries, and the binary taken out of each package runs `--version` and a `--dry-run`
# of batch_config.example.yaml (arm64 under qemu-user-static). The docs/kubernetes Jobs
# must name the image this script tags.
#
# What cannot be had on this machine (a rustup target, zig, qemu, buildah) is skipped with
# a line that says so, and everything else is still built and checked. REQUIRE_ALL=1 makes
# a skip an error (for a real release). Runs as root on Debian: missing tools come from apt.
#   scripts/release.sh
#   ARCHES=amd64 scripts/release.sh
#   REQUIRE_ALL=1 scripts/release.sh
#   IMAGE=registry.example.com/keadm-batch scripts/release.sh   # the image's name (no tag)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

# Tools from PyPI for the arm64 cross build (zig is the C cross compiler and linker for
# OpenSSL, libssh2, zlib and liblzma; cargo-zigbuild drives it), pinned by version and by
# each wheel's sha256 in this file, the one place to change them.
zig_requirements=scripts/release-requirements.txt
# glibc fallback (a target whose musl std cannot be installed): symbols no newer than this.
GLIBC_MAX=2.17

arches=${ARCHES:-amd64 arm64}
image=${IMAGE:-registry.example.com/keadm-batch}
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
dist=$repo/dist
target=${CARGO_TARGET_DIR:-$repo/target}
work=$target/release-work
tools=$target/release-tools
started=$(date +%s)

say() { printf 'release: %s\n' "$*"; }
skipped=()
skip() {
    printf 'release: SKIPPED: %s\n' "$*" >&2
    skipped+=("$*")
}
fail() {
    printf 'release: FAILED: %s\n' "$*" >&2
    exit 1
}
elapsed() { echo "$(($(date +%s) - started)) s"; }

[ -n "$version" ] || fail "Cannot read the package version from Cargo.toml. Check its version = \"x.y.z\" line."
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [ "$commit" != unknown ] && ! git diff-index --quiet HEAD -- 2>/dev/null; then
    commit="$commit-dirty"
fi
# build.rs stamps this into --version; archives get the commit's time as their mtime.
export KEADM_BATCH_GIT_COMMIT=$commit
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
say "keadm-batch $version, commit $commit, arches: $arches"

# --- tools -------------------------------------------------------------------------------

# apt_install PACKAGE...: installs what is missing (as root, from the Debian mirror).
apt_updated=0
apt_install() {
    local missing=() pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || missing+=("$pkg")
    done
    [ "${#missing[@]}" -eq 0 ] && return 0
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
        return 1
    fi
    say "installing ${missing[*]} (apt)"
    if [ "$apt_updated" = 0 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get update -qq || return 1
        apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
        >/dev/null || return 1
}

apt_install binutils dpkg-dev rpm ca-certificates python3-venv ||
    fail "Cannot install binutils, dpkg-dev, rpm, ca-certificates and python3-venv, which the checks and the packages need. Run as root on Debian, or install them first."

# rust_target TRIPLE: installed, or installed now by rustup. rustup downloads from
# static.rust-lang.org, which a CI with only package registries cannot reach: that is
# asked once, quickly, instead of letting every `rustup target add` wait for its timeout.
rustup_server=${RUSTUP_DIST_SERVER:-https://static.rust-lang.org}
rustup_reachable=
rust_target() {
    rustup target list --installed 2>/dev/null | grep -qx "$1" && return 0
    command -v rustup >/dev/null || return 1
    if [ -z "$rustup_reachable" ]; then
        if timeout 20 python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=15)' \
            "$rustup_server/dist/channel-rust-stable.toml.sha256" >/dev/null 2>&1; then
            rustup_reachable=yes
        else
            rustup_reachable=no
            say "$rustup_server cannot be reached: rustup cannot add targets here"
        fi
    fi
    [ "$rustup_reachable" = yes ] || return 1
    say "rustup target add $1"
    timeout 600 rustup target add "$1" >/dev/null 2>&1
}

# zig and cargo-zigbuild, in a venv of their own under target/, with their caches there too
# (zig builds musl's C library for the target once). pip takes only wheels whose sha256 the
# requirements file lists, and every requirement must have one, so neither a changed wheel
# on PyPI or on the way nor an unpinned dependency gets into the build. A venv is reused
# only if it was installed from the requirements file as it is now (a copy is kept in it):
# one from before the hashes, or from other pins, is made again.
zig_bin=$tools/zig/bin
[ -s "$zig_requirements" ] ||
    fail "$zig_requirements is missing or empty, and the arm64 build installs zig and cargo-zigbuild only by the hashes in it. Restore it with git checkout -- $zig_requirements."
zig_pins=$(sed -n 's/^\([A-Za-z0-9_.-]*==[^ ]*\).*/\1/p' "$zig_requirements" | xargs)
export ZIG_GLOBAL_CACHE_DIR=${ZIG_GLOBAL_CACHE_DIR:-$tools/zig-cache}
export CARGO_ZIGBUILD_CACHE_DIR=${CARGO_ZIGBUILD_CACHE_DIR:-$tools/zigbuild-cache}
have_zig() {
    local log=$tools/zig-pip.log
    if cmp -s "$zig_requirements" "$tools/zig/release-requirements.txt" &&
        "$zig_bin/cargo-zigbuild" --version >/dev/null 2>&1 &&
        "$zig_bin/python" -m ziglang version >/dev/null 2>&1; then
        return 0
    fi
    say "installing $zig_pins from PyPI (hash-pinned in $zig_requirements)"
    rm -rf "$tools/zig"
    mkdir -p "$tools"
    python3 -m venv "$tools/zig" || return 1
    # No --no-deps: pip then also refuses a dependency that the file does not pin by hash.
    if ! "$zig_bin/pip" install --disable-pip-version-check --require-hashes \
        --only-binary=:all: -r "$zig_requirements" >"$log" 2>&1; then
        rm -rf "$tools/zig"
        if grep -qi 'do not match the hashes' "$log"; then
            fail "pip refused the wheels it was served for $zig_pins, because their sha256 is not the one in $zig_requirements (pip's report: $log). Nothing was installed. If that file's hashes were changed on purpose, check them against wheels you downloaded and hashed yourself; otherwise the wheels were altered on the way or on the index, and the release must not be built with them."
        fi
        sed 's/^/    /' "$log" >&2
        say "pip could not install $zig_requirements (its output is above)"
        return 1
    fi
    cp "$zig_requirements" "$tools/zig/release-requirements.txt"
}

# runner ARCH: how to run that arch's binaries here ("" natively), or fails.
host_arch=$(dpkg --print-architecture 2>/dev/null || uname -m)
runner() {
    local qemu
    if [ "$1" = "$host_arch" ]; then echo ""; return 0; fi
    case $1 in amd64) qemu=qemu-x86_64-static ;; arm64) qemu=qemu-aarch64-static ;; esac
    command -v "$qemu" >/dev/null || apt_install qemu-user-static >/dev/null || return 1
    command -v "$qemu"
}

# --- build -------------------------------------------------------------------------------

# build ARCH: builds the binary and sets bin to its path, or returns 1 having said why. musl
# first; a glibc build against GLIBC_MAX's symbols through zig when the musl std is not to be
# had. It runs in the script's own shell (not in a $(...)), so a fail in it, such as wheels
# that do not match their hashes, ends the script instead of skipping the arch.
build() {
    local arch=$1 musl gnu
    case $arch in
        amd64) musl=x86_64-unknown-linux-musl gnu=x86_64-unknown-linux-gnu ;;
        arm64) musl=aarch64-unknown-linux-musl gnu=aarch64-unknown-linux-gnu ;;
        *) say "unknown arch $arch (amd64 or arm64)"; return 1 ;;
    esac
    local cargo_args=(--locked --profile dist --features vendored --quiet)
    if rust_target "$musl"; then
        if [ "$arch" = amd64 ] && [ "$host_arch" = amd64 ] &&
            { command -v musl-gcc >/dev/null || apt_install musl-tools; }; then
            say "building $arch: $musl with musl-gcc (musl-tools)"
            CC_x86_64_unknown_linux_musl=musl-gcc AR_x86_64_unknown_linux_musl=ar \
                cargo build "${cargo_args[@]}" --target "$musl" || return 1
            bin=$target/$musl/dist/keadm-batch
            return 0
        fi
        if have_zig; then
            say "building $arch: $musl with cargo-zigbuild"
            PATH=$zig_bin:$PATH cargo zigbuild "${cargo_args[@]}" --target "$musl" || return 1
            bin=$target/$musl/dist/keadm-batch
            return 0
        fi
        say "no C compiler for $musl: neither musl-gcc (amd64 only) nor zig from PyPI"
        return 1
    fi
    say "cannot install the rust target $musl; trying $gnu against glibc $GLIBC_MAX"
    if rust_target "$gnu" && have_zig; then
        say "building $arch: $gnu.$GLIBC_MAX with cargo-zigbuild"
        PATH=$zig_bin:$PATH cargo zigbuild "${cargo_args[@]}" --target "$gnu.$GLIBC_MAX" ||
            return 1
        bin=$target/$gnu/dist/keadm-batch
        return 0
    fi
    say "no $gnu.$GLIBC_MAX build either: the rust target $gnu cannot be installed, or zig cannot"
    return 1
}

# --- checks ------------------------------------------------------------------------------

# check_linkage BINARY: static, or glibc's own libraries only at GLIBC_MAX or older; stripped.
check_linkage() {
    local bin=$1 lib newest
    for lib in $(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
        case $lib in
            libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | ld-linux*.so.*) ;;
            *) fail "$bin needs $lib at run time, and only libc, libm, libpthread, libdl and ld-linux may be shared libraries. Build with --features vendored (OpenSSL and zlib built in) for a musl target." ;;
        esac
    done
    newest=$(readelf -W -V "$bin" | { grep -o 'GLIBC_[0-9][0-9.]*' || true; } | sed 's/^GLIBC_//' | sort -uV | tail -n1)
    if [ -n "$newest" ] &&
        [ "$(printf '%s\n%s\n' "$newest" "$GLIBC_MAX" | sort -V | tail -n1)" != "$GLIBC_MAX" ]; then
        fail "$bin uses a GLIBC_$newest symbol, and the release must run on glibc $GLIBC_MAX (RHEL/CentOS 7). Build for musl, or for <triple>.$GLIBC_MAX with cargo-zigbuild."
    fi
    if readelf -S -W "$bin" | grep -Eq ' \.(symtab|debug_info) '; then
        fail "$bin is not stripped. Build it with --profile dist."
    fi
    local needed
    needed=$(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | xargs)
    say "  linkage: ${needed:-static, no shared library}${newest:+; newest glibc symbol: $newest}; stripped"
}

# check_runs ARCH BINARY WHAT: --version names the commit and the built-in libraries, and
# a --dry-run of the example config passes.
check_runs() {
    local arch=$1 bin=$2 what=$3 run text
    run=$(runner "$arch") || {
        skip "running the $arch binary from the $what: no qemu-user-static"
        return 0
    }
    text=$($run "$bin" --version) || fail "The binary from the $what does not run: '$bin --version' failed."
    for want in "commit:  $commit" "libssh2: .*(built in)" "OpenSSL: OpenSSL .*(built in)" \
        "zlib: .*(built in)" "liblzma: .*(built in)" "libzstd: .*(built in)"; do
        grep -q "^$want" <<<"$text" || fail "The binary from the $what prints no line '$want' for --version:
$text"
    done
    rm -rf "$work/dry-run"
    mkdir -p "$work/dry-run"
    $run "$bin" batch -c batch_config.example.yaml --dry-run \
        --known-hosts "$work/dry-run/known_hosts" --staging-dir "$work/dry-run/staging" \
        >"$work/dry-run/out.txt" 2>&1 ||
        fail "The binary from the $what fails a --dry-run of batch_config.example.yaml: $(tail -n5 "$work/dry-run/out.txt")"
    grep -q edge-plc-03 "$work/dry-run/out.txt" || fail "The binary from the $what printed no plan for a --dry-run of batch_config.example.yaml."
    say "  runs from the $what${run:+ (under $(basename "$run"))}: --version, --dry-run of batch_config.example.yaml"
}

# The Jobs must name the image this script tags.
check_manifests() {
    local file line
    for file in docs/kubernetes/*.yaml; do
        while read -r line; do
            [ "$line" = "image: $image:$version" ] ||
                fail "$file names the image '${line#image: }', but the release tags it $image:$version. Change the Job, or set IMAGE."
        done < <(grep -E '^\s*image:' "$file" | sed 's/^ *//')
    done
    say "docs/kubernetes names $image:$version"
}

# --- packages ----------------------------------------------------------------------------

checksum() {
    # KubeEdge's format: checksum_<file>.txt holds the bare sha512 hex digest.
    sha512sum "$1" | cut -d' ' -f1 >"$(dirname "$1")/checksum_$(basename "$1").txt"
}

# write_docs ARCH BINARY DIR: completions and the man page, written by the binary itself.
write_docs() {
    local run
    run=$(runner "$1") || run=$(runner "$host_arch")
    mkdir -p "$3/completions" "$3/man"
    $run "$2" completions bash >"$3/completions/keadm-batch.bash"
    $run "$2" completions zsh >"$3/completions/_keadm-batch"
    $run "$2" completions fish >"$3/completions/keadm-batch.fish"
    $run "$2" man >"$3/man/keadm-batch.1"
}

summary="Enroll KubeEdge edge nodes in bulk over SSH"
description=$(sed -n 's/^description = "\(.*\)"$/\1/p' Cargo.toml | head -n1)

# is_static BINARY: needs no shared library (the musl build; the glibc fallback needs libc).
is_static() { [ -z "$(readelf -d "$1" | sed -n '/(NEEDED)/p')" ]; }

make_tarball() {
    local arch=$1 bin=$2 name="keadm-batch-$version-linux-$1"
    local top="$work/$arch/tar/$name"
    rm -rf "$work/$arch/tar"
    mkdir -p "$top"
    install -m 0755 "$bin" "$top/keadm-batch"
    install -m 0644 README.md LICENSE "$work/$arch/THIRD-PARTY-LICENSES.txt" "$top/"
    cp -a "$work/$arch/docs/." "$top/"
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
        -C "$work/$arch/tar" -cf - "$name" | gzip -9n >"$dist/$name.tar.gz"
    checksum "$dist/$name.tar.gz"
}

# install_tree ARCH BINARY ROOT ZSH_DIR: the installed layout both packages share.
install_tree() {
    local d=$work/$1/docs root=$3
    rm -rf "$root"
    install -D -m 0755 "$2" "$root/usr/bin/keadm-batch"
    install -D -m 0644 README.md "$root/usr/share/doc/keadm-batch/README.md"
    install -D -m 0644 "$d/completions/keadm-batch.bash" "$root/usr/share/bash-completion/completions/keadm-batch"
    install -D -m 0644 "$d/completions/_keadm-batch" "$root$4/_keadm-batch"
    install -D -m 0644 "$d/completions/keadm-batch.fish" "$root/usr/share/fish/vendor_completions.d/keadm-batch.fish"
    install -d "$root/usr/share/man/man1"
    gzip -9n <"$d/man/keadm-batch.1" >"$root/usr/share/man/man1/keadm-batch.1.gz"
}

make_deb() {
    local arch=$1 root="$work/$1/deb/root" file="keadm-batch_${version}_$1.deb"
    install_tree "$arch" "$2" "$root" /usr/share/zsh/vendor-completions
    install -D -m 0644 LICENSE "$root/usr/share/doc/keadm-batch/copyright"
    install -m 0644 "$work/$arch/THIRD-PARTY-LICENSES.txt" "$root/usr/share/doc/keadm-batch/"
    mkdir -p "$root/DEBIAN"
    local depends="" linkage="A static binary: OpenSSL, libssh2, zlib and liblzma are built in, so it
 needs no shared library from the host."
    if ! is_static "$2"; then
        depends="Depends: libc6 (>= $GLIBC_MAX)"
        linkage="OpenSSL, libssh2, zlib and liblzma are built in; it needs glibc $GLIBC_MAX or later."
    fi
    cat >"$root/DEBIAN/control" <<CONTROL
Package: keadm-batch
Version: $version
Architecture: $arch
Maintainer: ${MAINTAINER:-keadm-batch maintainers <keadm-batch@localhost>}
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Section: admin
Priority: optional${depends:+
$depends}
Description: $summary
 $description.
 .
 $linkage
CONTROL
    SOURCE_DATE_EPOCH=$epoch dpkg-deb -Zxz --root-owner-group --build "$root" "$dist/$file" >/dev/null
    checksum "$dist/$file"
}

make_rpm() {
    local arch=$1 rpm_arch root="$work/$1/rpm/root" top="$work/$1/rpm/top"
    case $arch in amd64) rpm_arch=x86_64 ;; arm64) rpm_arch=aarch64 ;; esac
    install_tree "$arch" "$2" "$root" /usr/share/zsh/site-functions
    install -D -m 0644 LICENSE "$root/usr/share/licenses/keadm-batch/LICENSE"
    install -m 0644 "$work/$arch/THIRD-PARTY-LICENSES.txt" "$root/usr/share/licenses/keadm-batch/"
    rm -rf "$top"
    mkdir -p "$top"
    local requires="" linkage="A static binary: OpenSSL, libssh2, zlib and liblzma are built in."
    if ! is_static "$2"; then
        requires="Requires: glibc >= $GLIBC_MAX"
        linkage="OpenSSL, libssh2, zlib and liblzma are built in; it needs glibc $GLIBC_MAX or later."
    fi
    cat >"$top/keadm-batch.spec" <<SPEC
Name: keadm-batch
Version: $version
Release: 1
Summary: $summary
License: Apache-2.0
# The dependencies are known (none for the static build), so none are generated.
AutoReqProv: no
$requires
# The binary is stripped already and must stay byte for byte the checked one; gzip
# payloads and sha256 file digests are what rpm 4.11 (RHEL/CentOS 7) reads.
%global debug_package %{nil}
%global __os_install_post %{nil}
%global _build_id_links none
%global _binary_payload w9.gzdio
%global _binary_filedigest_algorithm 8

%description
$description. $linkage

%install
cp -a $root/. %{buildroot}/

%files
/usr/bin/keadm-batch
%doc /usr/share/doc/keadm-batch/README.md
%license /usr/share/licenses/keadm-batch/LICENSE
%license /usr/share/licenses/keadm-batch/THIRD-PARTY-LICENSES.txt
/usr/share/man/man1/keadm-batch.1.gz
/usr/share/bash-completion/completions/keadm-batch
/usr/share/zsh/site-functions/_keadm-batch
/usr/share/fish/vendor_completions.d/keadm-batch.fish
SPEC
    SOURCE_DATE_EPOCH=$epoch rpmbuild -bb --quiet --nodeps --target "$rpm_arch-linux" \
        --define "_topdir $top" --define "use_source_date_epoch_as_buildtime 1" \
        --define "clamp_mtime_to_source_date_epoch 1" "$top/keadm-batch.spec" >/dev/null
    local file="keadm-batch-$version-1.$rpm_arch.rpm"
    mv "$top/RPMS/$rpm_arch/$file" "$dist/$file"
    checksum "$dist/$file"
}

# check_packages ARCH BINARY: takes the binary out of each package, checks it is the one
# built, and runs it.
check_packages() {
    local arch=$1 bin=$2 rpm_arch x="$work/$1/extract" file
    case $arch in amd64) rpm_arch=x86_64 ;; arm64) rpm_arch=aarch64 ;; esac
    rm -rf "$x"
    mkdir -p "$x/tar" "$x/deb" "$x/rpm"
    for file in "keadm-batch-$version-linux-$arch.tar.gz" "keadm-batch_${version}_$arch.deb" \
        "keadm-batch-$version-1.$rpm_arch.rpm"; do
        [ "$(cat "$dist/checksum_$file.txt")" = "$(sha512sum "$dist/$file" | cut -d' ' -f1)" ] ||
            fail "checksum_$file.txt does not hold the sha512 of $file."
    done
    tar -xzf "$dist/keadm-batch-$version-linux-$arch.tar.gz" -C "$x/tar"
    dpkg-deb -x "$dist/keadm-batch_${version}_$arch.deb" "$x/deb"
    rpm2archive - <"$dist/keadm-batch-$version-1.$rpm_arch.rpm" | tar -xz -C "$x/rpm"
    # rpm 4.11 cannot read a zstd payload and would refuse the package.
    if rpm -qp --requires "$dist/keadm-batch-$version-1.$rpm_arch.rpm" 2>/dev/null | grep -q Zstd; then
        fail "The rpm needs rpmlib(PayloadIsZstd), which rpm on RHEL/CentOS 7 lacks. Keep _binary_payload at w9.gzdio in the spec."
    fi
    for file in "tar/keadm-batch-$version-linux-$arch/keadm-batch" deb/usr/bin/keadm-batch \
        rpm/usr/bin/keadm-batch; do
        cmp -s "$bin" "$x/$file" || fail "$x/$file is not the binary that was built and checked."
    done
    for what in tarball deb rpm; do
        case $what in
            tarball) file="$x/tar/keadm-batch-$version-linux-$arch/keadm-batch" ;;
            *) file="$x/${what}/usr/bin/keadm-batch" ;;
        esac
        check_runs "$arch" "$file" "$arch $what"
    done
}

# --- image -------------------------------------------------------------------------------

# The image's Debian packages, of the image's arch, come from Debian's mirror through a
# private apt state per arch under target/ (the host's sources and keys, its own lists), so
# the host's apt configuration and lists stay as they are.
declare -A debs
# fetch_debs ARCH PACKAGE...: sets debs[PACKAGE] to the path of the .deb of the version apt's
# index names now, whose sha256 is the one that index gives for it. apt checked the index
# against the archive's signed Release file, so a .deb altered in the cache, on the mirror
# or on the way is not used: a cached one that does not match (or any other file of the
# package beside it) is removed and fetched again, and a fetched one that does not match
# fails the script. Returns 1, having said why, when the mirror cannot be had.
fetch_debs() {
    local arch=$1 dir="$tools/apt-$1" pkg line name hash file log
    shift
    local apt=(apt-get -qq -o "APT::Architecture=$arch" -o "APT::Architectures::=$arch"
        -o "Dir::State::Lists=$dir/lists" -o "Dir::Cache=$dir/cache" -o Debug::NoLocking=1)
    mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial" "$dir/deb"
    log=$dir/apt.log
    # Every run, so the hashes are those of what the mirror has now; where it cannot be
    # reached, the lists of an earlier run still hold signed hashes for the cached files.
    LC_ALL=C "${apt[@]}" update >"$dir/update.log" 2>&1 ||
        say "apt-get update for $arch failed ($dir/update.log); using the $arch package lists of an earlier run, if any"
    for pkg in "$@"; do
        # One line for the version apt would fetch: 'URI' FILE SIZE SHA256:HEX.
        if ! line=$(LC_ALL=C "${apt[@]}" download --print-uris "$pkg:$arch" 2>"$log") ||
            [ "$(wc -l <<<"$line")" != 1 ] || [ -z "$line" ]; then
            say "apt's $arch index has no $pkg ($log): the Debian mirror cannot be reached, or the host's apt sources do not hold it"
            return 1
        fi
        read -r _ name _ hash <<<"$line"
        case $hash in
            SHA256:*) hash=${hash#SHA256:} ;;
            *) fail "apt gives '$hash' as the hash of $pkg:$arch ($name), and the release checks the .deb against a SHA256. Use apt sources whose index has SHA256 fields (Debian's do)." ;;
        esac
        # Anything else of the package here goes: other versions, copies, apt's .FAILED.
        for file in "$dir/deb/${pkg}"_*; do
            if [ -e "$file" ] && [ "$file" != "$dir/deb/$name" ]; then rm -f "$file"; fi
        done
        if [ -e "$dir/deb/$name" ] && [ "$(sha256sum "$dir/deb/$name" | cut -d' ' -f1)" != "$hash" ]; then
            say "the cached $name is not the one apt's $arch index names (its sha256 differs); fetching it again"
            rm -f "$dir/deb/$name"
        fi
        if [ ! -e "$dir/deb/$name" ]; then
            if ! (cd "$dir/deb" && LC_ALL=C "${apt[@]}" download "$pkg:$arch") >"$log" 2>&1; then
                if grep -qi 'hash sum mismatch' "$log"; then
                    rm -f "$dir/deb/$name" "$dir/deb/$name.FAILED"
                    fail "The $name that the Debian mirror served does not have the SHA256 that apt's $arch index gives for it ($log). Do not build the image with it: retry later or with another mirror in the host's apt sources, and find out who altered it."
                fi
                say "cannot download $pkg:$arch from the Debian mirror ($log)"
                return 1
            fi
            [ -e "$dir/deb/$name" ] ||
                fail "apt-get download $pkg:$arch wrote no $name into $dir/deb. Check what it wrote there and in $log."
            if [ "$(sha256sum "$dir/deb/$name" | cut -d' ' -f1)" != "$hash" ]; then
                rm -f "$dir/deb/$name"
                fail "The $name that the Debian mirror served does not have the SHA256 that apt's $arch index gives for it ($hash), so it was removed. Do not build the image with it: retry later or with another mirror in the host's apt sources, and find out who altered it."
            fi
        fi
        debs[$pkg]=$dir/deb/$name
    done
}

# image_tree ARCH BINARY: the arch's root file system for the Containerfile.
image_tree() {
    local arch=$1 root="$work/image/$1" ca="$work/$1/ca-certificates" applet run crt count
    fetch_debs "$arch" busybox-static ca-certificates || return 1
    rm -rf "$root" "$ca"
    mkdir -p "$root/usr/local/bin" "$root/bin" "$root/etc/ssl/certs" "$root/tmp" \
        "$root/usr/share/doc/keadm-batch" "$root/usr/share/doc/busybox-static" \
        "$root/usr/share/doc/ca-certificates" "$ca"
    install -m 0755 "$2" "$root/usr/local/bin/keadm-batch"
    install -m 0644 LICENSE README.md "$work/$arch/THIRD-PARTY-LICENSES.txt" \
        "$root/usr/share/doc/keadm-batch/"
    chmod 1777 "$root/tmp"
    dpkg-deb --fsys-tarfile "${debs[busybox-static]}" | tar -xO ./bin/busybox >"$root/bin/busybox"
    dpkg-deb --fsys-tarfile "${debs[busybox-static]}" | tar -xO ./usr/share/doc/busybox-static/copyright \
        >"$root/usr/share/doc/busybox-static/copyright"
    chmod 0755 "$root/bin/busybox"
    # The CA bundle is Mozilla's roots as Debian's ca-certificates packages them, put
    # together as update-ca-certificates does (each file in turn, a newline added where one
    # lacks it), in byte order so every host writes the same file. It is never the build
    # host's /etc/ssl, where a CA added on that host would ship in the image.
    dpkg-deb --fsys-tarfile "${debs[ca-certificates]}" |
        tar -x -C "$ca" ./usr/share/ca-certificates/mozilla ./usr/share/doc/ca-certificates/copyright
    while IFS= read -r -d '' crt; do
        cat "$crt"
        [ -z "$(tail -c1 "$crt")" ] || echo
    done < <(find "$ca/usr/share/ca-certificates/mozilla" -name '*.crt' -print0 | LC_ALL=C sort -z) \
        >"$root/etc/ssl/certs/ca-certificates.crt"
    chmod 0644 "$root/etc/ssl/certs/ca-certificates.crt"
    count=$(grep -c -- '-----BEGIN CERTIFICATE-----' "$root/etc/ssl/certs/ca-certificates.crt" || true)
    [ "$count" -gt 0 ] ||
        fail "${debs[ca-certificates]} holds no certificate under usr/share/ca-certificates/mozilla, so the image would have no CA bundle. Check that package's layout and change image_tree to match."
    install -m 0644 "$ca/usr/share/doc/ca-certificates/copyright" "$root/usr/share/doc/ca-certificates/"
    say "  image linux/$arch: busybox-static $(dpkg-deb -f "${debs[busybox-static]}" Version), ca-certificates $(dpkg-deb -f "${debs[ca-certificates]}" Version) ($count certificates)"
    # Every applet as a link in /bin, so the Jobs' `sh -c` finds mkdir, cat, ls...
    run=$(runner "$arch") || { say "cannot run $arch binaries here to list busybox's applets: no qemu-user-static"; return 1; }
    for applet in $($run "$root/bin/busybox" --list); do
        [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
    done
    printf 'root:x:0:0:root:/root:/bin/sh\nnonroot:x:65532:65532:nonroot:/tmp:/bin/sh\n' >"$root/etc/passwd"
    printf 'root:x:0:\nnonroot:x:65532:\n' >"$root/etc/group"
}

# build_image ARCH...: one OCI image index for the arches, written as an OCI archive.
build_image() {
    local storage="$work/buildah" platforms="" arch file="keadm-batch-$version-image.oci.tar"
    for arch in "$@"; do platforms="$platforms${platforms:+,}linux/$arch"; done
    local buildah=(buildah --root "$storage/root" --runroot "$storage/run" --storage-driver vfs)
    "${buildah[@]}" manifest rm "$image:$version" >/dev/null 2>&1 || true
    "${buildah[@]}" build --quiet --platform "$platforms" --manifest "$image:$version" \
        --timestamp "$epoch" --label "org.opencontainers.image.version=$version" \
        --label "org.opencontainers.image.revision=$commit" \
        --label "org.opencontainers.image.licenses=Apache-2.0" \
        -f Containerfile "$work/image" >/dev/null || return 1
    rm -f "$dist/$file"
    "${buildah[@]}" manifest push --quiet --all "$image:$version" \
        "oci-archive:$dist/$file:$image:$version" >/dev/null || return 1
    checksum "$dist/$file"
}

# check_image ARCH...: unpacks each arch's image from the archive and runs its binary, and
# its shell, as the Jobs do.
check_image() {
    local file="$dist/keadm-batch-$version-image.oci.tar" arch root run out
    for arch in "$@"; do
        root="$work/image-check/$arch"
        rm -rf "$root"
        mkdir -p "$root"
        python3 - "$file" "$arch" "$root" "$image:$version" <<'PY' || fail "Cannot unpack the $arch image from $file."
import json, sys, tarfile, io
archive, arch, root, ref = sys.argv[1:]
with tarfile.open(archive) as oci:
    blob = lambda d: oci.extractfile("blobs/sha256/" + d.split(":", 1)[1]).read()
    top = json.load(oci.extractfile("index.json"))
    named = [m for m in top["manifests"] if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == ref]
    if not named:
        sys.exit(f"no image named {ref} in the archive")
    index = json.loads(blob(named[0]["digest"]))
    manifest = next(m for m in index["manifests"] if m["platform"]["architecture"] == arch)
    for layer in json.loads(blob(manifest["digest"]))["layers"]:
        with tarfile.open(fileobj=io.BytesIO(blob(layer["digest"]))) as t:
            # The "tar" filter (Python 3.11.4 and later) keeps links inside root.
            t.extractall(root, **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))
PY
        run=$(runner "$arch") || { skip "running the $arch image's binary: no qemu-user-static"; continue; }
        if [ -z "$run" ]; then
            out=$(env -i PATH=/usr/local/bin:/bin "$(command -v chroot)" "$root" /bin/sh -c 'keadm-batch --version')
        else
            # No binfmt_misc here for a chroot: qemu runs the image's binary and its shell.
            out=$($run "$root/usr/local/bin/keadm-batch" --version)
            $run "$root/bin/sh" -c 'true' || fail "The $arch image's /bin/sh does not run."
        fi
        grep -q "^commit:  $commit" <<<"$out" || fail "The $arch image's keadm-batch --version does not name commit $commit: $out"
        say "  image $image:$version linux/$arch: keadm-batch --version ->"
        sed 's/^/      /' <<<"$out"
    done
}

# --- main --------------------------------------------------------------------------------

check_manifests
rm -rf "$dist"
mkdir -p "$dist" "$work"
built=()
declare -A bins
for arch in $arches; do
    if ! build "$arch"; then
        skip "$arch: could not build (see the lines above)"
        continue
    fi
    say "built $arch in $(elapsed): $bin ($(stat -c %s "$bin") bytes)"
    check_linkage "$bin"
    rm -rf "$work/$arch/docs"
    write_docs "$arch" "$bin" "$work/$arch/docs"
    # The licenses of the C libraries and crates inside, for the target it was built for.
    python3 scripts/third-party-licenses.py "$(basename "$(dirname "$(dirname "$bin")")")" vendored \
        >"$work/$arch/THIRD-PARTY-LICENSES.txt"
    make_tarball "$arch" "$bin"
    make_deb "$arch" "$bin"
    make_rpm "$arch" "$bin"
    check_packages "$arch" "$bin"
    built+=("$arch")
    bins[$arch]=$bin
done
[ "${#built[@]}" -gt 0 ] || fail "Nothing was built; the lines above say why."

image_arches=()
if command -v buildah >/dev/null || apt_install buildah; then
    for arch in "${built[@]}"; do
        if ! is_static "${bins[$arch]}"; then
            skip "the $arch image: FROM scratch needs a static binary, and this $arch build links glibc"
        elif image_tree "$arch" "${bins[$arch]}"; then
            image_arches+=("$arch")
        else
            skip "the $arch image: its busybox-static and ca-certificates, or qemu to list busybox's applets, cannot be had (see the lines above)"
        fi
    done
    if [ "${#image_arches[@]}" -gt 0 ]; then
        if build_image "${image_arches[@]}"; then
            check_image "${image_arches[@]}"
        else
            skip "the image: buildah failed (see above)"
        fi
    fi
else
    skip "the image: buildah is not installed and apt cannot install it"
fi

say "done in $(elapsed); dist/:"
for file in "$dist"/*; do printf '    %-52s %10s bytes\n' "$(basename "$file")" "$(stat -c %s "$file")"; done
if [ "${#skipped[@]}" -gt 0 ]; then
    say "skipped on this machine:"
    printf '    %s\n' "${skipped[@]}"
    [ "${REQUIRE_ALL:-0}" = 1 ] && fail "REQUIRE_ALL=1, and ${#skipped[@]} part(s) of the release were skipped (listed above)."
fi
exit 0
