//! Stamps the binary with what `keadm-batch --version` reports besides the version: the
//! git commit it was built from and the build date. Operators compare these with a release
//! when they check a control host for CVEs.
//!
//! - `KEADM_BATCH_GIT_COMMIT`: taken from the environment when set (scripts/release.sh
//!   sets it, with `-dirty` for a tree with uncommitted changes; a build from a source
//!   tarball, which has no .git, can too), else `git rev-parse --short=12 HEAD`, else
//!   `unknown`.
//! - `KEADM_BATCH_BUILD_DATE`: UTC, RFC 3339 to the second; `SOURCE_DATE_EPOCH` when set
//!   (reproducible builds), else the time this script ran.
//! - `KEADM_BATCH_TARGET`: the target triple, since a glibc and a musl build of one
//!   version differ in what they need from the host.
//! - `KEADM_BATCH_LIBSSH2`, `KEADM_BATCH_ZLIB` and `KEADM_BATCH_LIBLZMA`: the versions of
//!   the libssh2, zlib and liblzma compiled into the binary, read from the headers their -sys crates built them with
//!   (cargo passes a direct dependent the `DEP_<links>_*` variables of a crate that
//!   `links` a native library). libssh2-sys always builds its bundled libssh2 unless
//!   `LIBSSH2_SYS_USE_PKG_CONFIG` is set, and libz-sys builds zlib under the `vendored`
//!   feature (liblzma is always built, with its `static` feature); otherwise the library
//!   is the system's, linked dynamically, and this says so. OpenSSL's version is asked of the library at run time (`openssl::version`).
//! - `KEADM_BATCH_LIBZSTD_LINKED`: whether libzstd is compiled in (zstd-sys builds its
//!   bundled copy unless `ZSTD_SYS_USE_PKG_CONFIG` is set); its version is asked at run time.

// println! is how a build script speaks to cargo (clippy.toml refuses it in the crate).
#![allow(clippy::disallowed_macros)]

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn main() {
    println!("cargo:rerun-if-env-changed=KEADM_BATCH_GIT_COMMIT");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    println!("cargo:rerun-if-changed=build.rs");

    let commit = match std::env::var("KEADM_BATCH_GIT_COMMIT") {
        Ok(commit) if !commit.is_empty() => commit,
        _ => git_commit().unwrap_or_else(|| "unknown".to_string()),
    };
    println!("cargo:rustc-env=KEADM_BATCH_GIT_COMMIT={commit}");

    let built = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(epoch) => {
            let seconds: u64 = epoch.trim().parse().unwrap_or_else(|_| {
                panic!("SOURCE_DATE_EPOCH `{epoch}` is not a number of seconds since 1970.")
            });
            UNIX_EPOCH + Duration::from_secs(seconds)
        }
        Err(_) => SystemTime::now(),
    };
    println!(
        "cargo:rustc-env=KEADM_BATCH_BUILD_DATE={}",
        humantime::format_rfc3339_seconds(built)
    );
    println!(
        "cargo:rustc-env=KEADM_BATCH_TARGET={}",
        std::env::var("TARGET").unwrap_or_default()
    );
    // DEP_SSH2_ROOT is set only when libssh2-sys built its bundled copy.
    let libssh2 = std::env::var_os("DEP_SSH2_ROOT")
        .and_then(|_| header_define("DEP_SSH2_INCLUDE", "libssh2.h", "LIBSSH2_VERSION"));
    println!("cargo:rustc-env=KEADM_BATCH_LIBSSH2={}", linked(libssh2));
    // libz-sys is a direct dependency only under `vendored`, which builds zlib.
    let zlib = std::env::var_os("DEP_Z_ROOT")
        .and_then(|_| header_define("DEP_Z_INCLUDE", "zlib.h", "ZLIB_VERSION"));
    println!("cargo:rustc-env=KEADM_BATCH_ZLIB={}", linked(zlib));
    // liblzma's version.h spells the version as three numbers.
    let liblzma = std::env::var_os("DEP_LZMA_ROOT").and_then(|_| {
        let part = |name| header_define("DEP_LZMA_INCLUDE", "lzma/version.h", name);
        Some(format!(
            "{}.{}.{}",
            part("LZMA_VERSION_MAJOR")?,
            part("LZMA_VERSION_MINOR")?,
            part("LZMA_VERSION_PATCH")?
        ))
    });
    println!("cargo:rustc-env=KEADM_BATCH_LIBLZMA={}", linked(liblzma));
    // zstd-sys compiles its bundled libzstd unless this asks it for the system's (we do
    // not enable its `pkg-config` feature); the version itself is asked at run time.
    println!("cargo:rerun-if-env-changed=ZSTD_SYS_USE_PKG_CONFIG");
    let libzstd = match std::env::var_os("ZSTD_SYS_USE_PKG_CONFIG") {
        Some(_) => "the system library",
        None => "built in",
    };
    println!("cargo:rustc-env=KEADM_BATCH_LIBZSTD_LINKED={libzstd}");
}

/// `1.11.2 (built in)` for a library compiled into the binary, else what we know.
fn linked(built_in: Option<String>) -> String {
    match built_in {
        Some(version) => format!("{version} (built in)"),
        None => "the system library".to_string(),
    }
}

/// The value of `#define NAME value` in `header` (quotes removed), found in the include
/// directory (or comma-separated list of them) that the environment variable
/// `include_var` names.
fn header_define(include_var: &str, header: &str, name: &str) -> Option<String> {
    let dirs = std::env::var(include_var).ok()?;
    let text = dirs
        .split(',')
        .find_map(|dir| std::fs::read_to_string(PathBuf::from(dir).join(header)).ok())?;
    let prefix = format!("#define {name} ");
    text.lines()
        .filter_map(|line| line.strip_prefix(&prefix))
        .map(|rest| rest.trim().trim_matches('"').to_string())
        .next()
}

/// The commit of the work tree, or None outside a git checkout (or without git). Asks cargo
/// to run this script again when HEAD moves (a commit, a checkout), so the stamp follows
/// the tree without rerunning on every build.
fn git_commit() -> Option<String> {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let hash = git(&["rev-parse", "--short=12", "HEAD"])?;
    // In a worktree .git is a file; --git-path names the files that really move. A file
    // that does not exist (packed-refs before the first `git gc`) is not named: cargo
    // would run this script, and so build the crate again, on every build.
    for path in ["HEAD", "packed-refs"] {
        if let Some(file) = git(&["rev-parse", "--git-path", path])
            && PathBuf::from(&file).exists()
        {
            println!("cargo:rerun-if-changed={}", PathBuf::from(file).display());
        }
    }
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"])
        && let Some(file) = git(&["rev-parse", "--git-path", &branch])
    {
        println!("cargo:rerun-if-changed={}", PathBuf::from(file).display());
    }
    Some(hash)
}
