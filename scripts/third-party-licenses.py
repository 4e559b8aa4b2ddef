#!/usr/bin/env python3
"""Writes the licenses of what a release binary contains, for scripts/release.sh to ship
next to it: the C libraries that -sys crates compile in (OpenSSL, libssh2, zlib,
liblzma, libzstd, mimalloc), whose licenses ask that binary copies carry their notices, and every crate
linked into the binary for TARGET with FEATURES (cargo metadata; build-time-only crates
and proc-macros are left out, since none of their code is in the binary). Identical
license texts are printed once, with the crates that carry them.

    scripts/third-party-licenses.py TARGET FEATURES > THIRD-PARTY-LICENSES.txt
"""

import json
import pathlib
import subprocess
import sys

# The C sources a -sys crate builds from, and where their license is inside the crate.
C_LIBRARIES = {
    "openssl-src": ("OpenSSL", ["openssl/LICENSE.txt"]),
    "libssh2-sys": ("libssh2", ["libssh2/COPYING"]),
    "libz-sys": ("zlib", ["src/zlib/LICENSE"]),
    "libmimalloc-sys": ("mimalloc", ["c_src/mimalloc/v2/LICENSE"]),
    "liblzma-sys": ("liblzma (XZ Utils)", ["xz/COPYING", "xz/COPYING.0BSD"]),
    "zstd-sys": ("libzstd (Zstandard)", ["zstd/LICENSE", "zstd/COPYING"]),
}
LICENSE_FILE_PREFIXES = ("license", "licence", "copying", "notice", "unlicense")


def reachable(meta, follow):
    """The packages reached from the root through dependencies that `follow(dep, pkg)`
    accepts, transitively."""
    packages = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    root = meta["resolve"]["root"]
    seen, todo = {root}, [root]
    while todo:
        for dep in nodes[todo.pop()]["deps"]:
            if dep["pkg"] not in seen and follow(dep, packages[dep["pkg"]]):
                seen.add(dep["pkg"])
                todo.append(dep["pkg"])
    seen.discard(root)
    return sorted((packages[i] for i in seen), key=lambda p: (p["name"], p["version"]))


def linked_crates(meta):
    """The crates whose code is in the binary: normal dependencies, not proc-macros (which
    run in the compiler) and not build dependencies (which run in build scripts)."""
    return reachable(
        meta,
        lambda dep, pkg: any(k["kind"] is None for k in dep["dep_kinds"])
        and not any("proc-macro" in t["kind"] for t in pkg["targets"]),
    )


def c_source_crates(meta):
    """The crates that carry C sources compiled into the binary. openssl-src is a build
    dependency of openssl-sys (its build script compiles OpenSSL), so build dependencies
    are followed here; dev-dependencies are not."""
    return [
        p
        for p in reachable(meta, lambda dep, pkg: any(k["kind"] != "dev" for k in dep["dep_kinds"]))
        if p["name"] in C_LIBRARIES
    ]


def license_texts(pkg):
    """The license files at the top of a crate's directory."""
    root = pathlib.Path(pkg["manifest_path"]).parent
    files = [
        f
        for f in sorted(root.iterdir())
        if f.is_file() and f.name.lower().startswith(LICENSE_FILE_PREFIXES)
    ]
    if pkg.get("license_file"):
        named = root / pkg["license_file"]
        if named.is_file() and named not in files:
            files.append(named)
    return [f.read_text(errors="replace").strip() for f in files]


def main():
    target, features = sys.argv[1], sys.argv[2]
    meta = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--locked", "--format-version", "1",
             "--features", features, "--filter-platform", target],
            check=True, capture_output=True, text=True,
        ).stdout
    )
    packages = linked_crates(meta)
    root = next(p for p in meta["packages"] if p["id"] == meta["resolve"]["root"])
    out = [
        f"Third-party software in keadm-batch {root['version']} ({target})",
        "",
        "keadm-batch is Apache-2.0 (LICENSE). The binary contains the C libraries and",
        "the Rust crates below; their licenses follow.",
        "",
        "C libraries compiled into the binary:",
    ]
    c_texts = []
    for pkg in c_source_crates(meta):
        name, paths = C_LIBRARIES[pkg["name"]]
        out.append(f"  {name} (built by the crate {pkg['name']} {pkg['version']})")
        base = pathlib.Path(pkg["manifest_path"]).parent
        for path in paths:
            c_texts.append((name, (base / path).read_text(errors="replace").strip()))
    out += ["", "Rust crates linked into the binary (name, version, license):"]
    by_text = {}
    for pkg in packages:
        out.append(f"  {pkg['name']} {pkg['version']}: {pkg.get('license') or 'see its license file'}")
        for text in license_texts(pkg):
            by_text.setdefault(text, []).append(f"{pkg['name']} {pkg['version']}")
    for name, text in c_texts:
        out += ["", "=" * 79, f"{name}", "=" * 79, "", text]
    for text, users in by_text.items():
        out += ["", "=" * 79, "Used by: " + ", ".join(users), "=" * 79, "", text]
    print("\n".join(out))


if __name__ == "__main__":
    main()
