//! Why staging failed, in words an operator can act on.

use std::path::PathBuf;

use crate::arch::Arch;
use crate::kit::KitError;

/// A staging failure. Every message is a full sentence that names the URL or path
/// involved and says what to do about it.
///
/// Causes are kept as text rather than as `io::Error`/`reqwest::Error` so the error can be
/// cloned: one failed staging of an arch is handed to every worker that asked for it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StageError {
    #[error(
        "keadmVersion is empty, so there is no keadm package to stage. Set keadm.keadmVersion \
         to a release tag such as v1.21.0."
    )]
    EmptyVersion,

    #[error(
        "keadmVersion {version:?} cannot be part of a file name (it contains '/' or a NUL \
         byte). Set keadm.keadmVersion to a release tag such as v1.21.0."
    )]
    BadVersion { version: String },

    #[error(
        "Could not create the staging directory {}: {error}. Check the permissions of its \
         parent, or choose another directory with --staging-dir.",
        path.display()
    )]
    CreateDir { path: PathBuf, error: String },

    #[error(
        "Refusing to use the staging directory {}: {reason}. Another user could swap the keadm \
         binary there before it is uploaded. Remove it (or fix its owner and mode), or choose a \
         directory only you can write with --staging-dir.",
        path.display()
    )]
    UnsafeDir { path: PathBuf, reason: String },

    #[error(
        "The staging directory {} has '..' in its path, so the directories it passes through \
         cannot be checked one by one. Give --staging-dir a path without '..'.",
        path.display()
    )]
    DotDotInStagingDir { path: PathBuf },

    #[error(
        "Cannot reach the staging directory {} through /proc/self/fd. Its parent can be \
         changed by other users, so keadm-batch uses it only through the directory it opened, \
         and that needs /proc. Mount /proc, or choose a directory only you can write with \
         --staging-dir.",
        path.display()
    )]
    NoProcFd { path: PathBuf },

    #[error(
        "Could not lock {}: {error}. Check that the staging directory is writable, or choose \
         another one with --staging-dir.",
        path.display()
    )]
    Lock { path: PathBuf, error: String },

    #[error(
        "Could not set up the HTTP client for downloads: {error}. Check the proxy environment \
         variables (HTTPS_PROXY, HTTP_PROXY, NO_PROXY), or use offline mode."
    )]
    HttpClient { error: String },

    #[error("Downloading {url} failed with HTTP status {status}. {hint}")]
    HttpStatus {
        url: String,
        status: String,
        /// What to do, which depends on whose fault the status is.
        hint: &'static str,
    },

    #[error(
        "Cannot download {url}: {error}. Fix keadm.download.url (it needs a scheme such as \
         https:// and a host)."
    )]
    BadUrl { url: String, error: String },

    #[error(
        "Downloading {url} failed after {attempts} attempt(s): {error}. Check the network \
         connection and the proxy environment variables (HTTPS_PROXY, NO_PROXY), or use \
         offline mode."
    )]
    Transfer {
        url: String,
        attempts: u32,
        error: String,
    },

    #[error(
        "{setting} {url} is plain HTTP, so anyone on the network path could swap the keadm \
         package, and the checksum file beside it, that then runs as root on the nodes. Pin \
         the tarballs' digests in keadm.download.sha512 (for {arches}), use an https:// \
         mirror, or pass --insecure-http to accept the risk on a network you trust."
    )]
    PlainHttp {
        /// Where the URL was given: `keadm.download.url` or `--download-url`.
        setting: &'static str,
        url: String,
        arches: String,
    },

    #[error(
        "Downloading {url} was redirected to {to}, which is plain HTTP, so the redirect \
         was not followed: anyone on the network path could swap what it returns. Pin the tarballs' digests in \
         keadm.download.sha512, use a mirror that stays on https://, or pass --insecure-http \
         to accept the risk on a network you trust."
    )]
    RedirectedToPlainHttp { url: String, to: String },

    #[error(
        "Refusing {url}: {reason}. The limit is {limit} bytes (--max-package-bytes); a keadm \
         release tarball is about 25 MB, so check keadm.download.url, and raise the limit only \
         if the package is genuine."
    )]
    DownloadTooLarge {
        url: String,
        reason: String,
        limit: u64,
    },

    #[error(
        "Refusing to unpack {package}: {reason}. The limit is {limit} bytes \
         (--max-package-bytes); unpacked, a keadm release holds about 85 MB, so check that \
         this is keadm's release tarball, and raise the limit only if it is genuine."
    )]
    UnpackTooLarge {
        package: String,
        reason: String,
        limit: u64,
    },

    #[error(
        "The checksum file {source_name} does not hold a sha512 digest (128 hex characters); it \
         reads {content:?}. Check that the mirror serves KubeEdge's checksum files unchanged."
    )]
    BadChecksumFile {
        source_name: String,
        content: String,
    },

    #[error(
        "The sha512 digest of {package} is {actual}, but {checksum_source} expects {expected}. \
         The package is corrupt or was tampered with, so it was not used or cached. Retry, \
         or check the mirror, the offline package or the pinned digest."
    )]
    ChecksumMismatch {
        package: String,
        checksum_source: String,
        expected: String,
        actual: String,
    },

    #[error(
        "The checksum file {checksum_source} gives {checksum} as the sha512 digest of \
         {package}, but {pin_source} pins {pin}. One of them is wrong, so nothing was used or \
         cached: check the pin against the release's published checksum, and if the pin is \
         right, the mirror or offline directory holds altered files."
    )]
    PinConflict {
        package: String,
        checksum_source: String,
        checksum: String,
        pin_source: String,
        pin: String,
    },

    #[error(
        "There is no checksum file at {checksum_source}, so {package} cannot be verified. Put \
         the release's checksum file there, pin the tarball's sha512 in \
         keadm.download.sha512.{arch}, or pass --allow-unverified to use it unverified."
    )]
    ChecksumMissing {
        package: String,
        checksum_source: String,
        arch: Arch,
    },

    #[error(
        "The offline package {} does not exist. Put keadm's release tarball for {arch} there \
         (keadm.offlinePackageDir/<arch>/keadm-<version>-linux-<arch>.tar.gz).",
        path.display()
    )]
    OfflineMissing { arch: Arch, path: PathBuf },

    #[error(
        "A node reported arch {arch}, which is not in keadm.archGroup, and offline mode cannot \
         stage packages on demand. Add {arch} to keadm.archGroup and put its package at {}.",
        path.display()
    )]
    OfflineArchNotInGroup { arch: Arch, path: PathBuf },

    /// A file of a `batch bundle` kit does not match the kit's manifest.
    #[error(transparent)]
    Kit(#[from] KitError),

    #[error(
        "Could not read the package {package} as a gzip-compressed tar archive: {error}. The \
         file is damaged or is not a keadm release tarball."
    )]
    BadArchive { package: String, error: String },

    #[error(
        "Refusing to unpack {package}: its entry {entry:?} {reason}. Use an unmodified keadm \
         release tarball."
    )]
    UnsafeEntry {
        package: String,
        entry: String,
        reason: String,
    },

    #[error(
        "The package {package} has no keadm binary at {expected} (a regular file is required). \
         Check that it is keadm's release tarball for this version and arch."
    )]
    MissingBinary { package: String, expected: String },

    #[error(
        "Cannot read the image archive {}: {reason}. Use a docker-archive or OCI archive tar \
         as `docker save`, `ctr export`, `nerdctl save` or `skopeo copy` write them, and copy \
         it again if it was cut short.",
        path.display()
    )]
    ImageArchiveUnreadable { path: PathBuf, reason: String },

    #[error(
        "The image archive {} names no image (no RepoTags in its manifest.json, no image name \
         in its index.json), so the runtime would import it under no name keadm asks for. Save \
         the image again under its full name, for example `docker save \
         kubeedge/installation-package:v1.23.1 -o FILE` or `ctr -n k8s.io images export FILE \
         docker.io/kubeedge/installation-package:v1.23.1`.",
        path.display()
    )]
    ImageArchiveUnnamed { path: PathBuf },

    #[error(
        "The image archive {} cannot be used: its {manifest} names the image {name:?}, which \
         is not a valid image reference ({reason}), so the runtime cannot import it under that \
         name. Save the image again under a valid name, for example `docker save \
         kubeedge/installation-package:v1.23.0-beta.0 -o FILE` (a tag has no '+': keadm asks \
         for a development build's images by the release it builds on).",
        path.display()
    )]
    ImageArchiveBadName {
        path: PathBuf,
        manifest: &'static str,
        name: String,
        reason: String,
    },

    #[error(
        "Cannot list the image archives in {}: {error}. Check that the directory is readable, \
         or fix keadm.offlineImages.",
        path.display()
    )]
    ImageDir { path: PathBuf, error: String },

    #[error(
        "Could not copy the image archive {} into {}: {error}. The run sends the nodes a \
         private copy of each archive, made in the system's temporary directory; make room \
         there, or point TMPDIR at a filesystem with space.",
        archive.display(),
        dir.display()
    )]
    ImageCopy {
        archive: PathBuf,
        dir: PathBuf,
        error: String,
    },

    #[error(
        "The image archive `{}` was not used: {why}. No node was touched. Rename the file \
         (to `{instead}`, say) and run again. `batch bundle` names every file that way, so in \
         a kit such a name means the kit was changed after it was written: bundle it again.",
        crate::safe_name::shown_path(path)
    )]
    ImageArchiveName {
        path: PathBuf,
        /// [`crate::safe_name::Refusal`]'s.
        why: String,
        instead: String,
    },

    /// Only the `pack-copy` process's own error; a run that started it goes on without
    /// the copy.
    #[error("Could not make the {format} copy of {}: {error}.", binary.display())]
    PackedCopy {
        format: super::CopyFormat,
        binary: PathBuf,
        error: String,
    },

    #[error(
        "Could not {action} {}: {error}. Check that this user can read and write there and \
         that the disk has space, or choose another staging directory with --staging-dir.",
        path.display()
    )]
    Io {
        action: &'static str,
        path: PathBuf,
        error: String,
    },
}

impl StageError {
    /// A non-2xx answer. 4xx: the URL is wrong (version, mirror); 5xx: the server is.
    pub(crate) fn http_status(url: &str, status: String, server_side: bool) -> Self {
        let hint = if server_side {
            "The server is failing; retry later, use another mirror (keadm.download.url), or \
             use offline mode (keadm.download.enable: false with keadm.offlinePackageDir)."
        } else {
            "Check keadm.keadmVersion (release tags start with 'v') and keadm.download.url, or \
             use offline mode (keadm.download.enable: false with keadm.offlinePackageDir)."
        };
        StageError::HttpStatus {
            url: url.to_string(),
            status,
            hint,
        }
    }

    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        error: std::io::Error,
    ) -> Self {
        StageError::Io {
            action,
            path: path.into(),
            error: error.to_string(),
        }
    }
}
