//! Why a kit could not be written, in words an operator can act on.

use std::path::PathBuf;

use crate::arch::Arch;
use crate::kit::KitError;
use crate::stage::StageError;

/// Whose move it is, for the exit code (`error::Error::exit_code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The config, the command line or the kit directory asks for something that
    /// cannot be done; nothing was fetched.
    Usage,
    /// A keadm release or an image could not be fetched or verified.
    Fetch,
    /// The kit could not be written.
    Output,
    /// A kit, directory or archive, is not what `batch bundle` wrote (`--verify`,
    /// `--extract`).
    Broken,
}

/// A failure of `batch bundle`. Every message names the file, image or registry and says
/// what to do.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error(
        "The config {} gives no keadm.keadmVersion to bundle (it is empty, or every node has a \
         keadmBinDir). Set keadm.keadmVersion to a KubeEdge release such as v1.23.1.",
        config.display()
    )]
    NoVersion { config: PathBuf },

    #[error(
        "keadm.archGroup in {} is empty, so the bundle does not know which arches the kit is \
         for. List the nodes' arches there (amd64, arm64, arm).",
        config.display()
    )]
    NoArchGroup { config: PathBuf },

    #[error("{reason}. Fix the image reference in {source_name}.")]
    BadImage { reason: String, source_name: String },

    #[error(
        "The keadmCmd of node {node} in {} takes --{flag} from the environment variable \
         {variable}, which is not set here, and that flag chooses the images the kit carries. \
         Export {variable} with the value the site uses, then bundle again (the variables that \
         hold passwords and the join token may stay unset).",
        config.display()
    )]
    UnsetVariable {
        config: PathBuf,
        node: String,
        flag: String,
        variable: String,
    },

    #[error(
        "The registry mirror {url} for {registry} is plain HTTP, so anyone on the network path \
         could swap the images the nodes will run. Use an https:// mirror, or pass \
         --insecure-http to accept the risk on a network you trust."
    )]
    PlainHttpMirror { registry: String, url: String },

    /// A keadm download the staging rules refuse before anything is fetched.
    #[error("{0} Nothing was downloaded.")]
    UnsafeDownload(#[source] StageError),

    #[error(
        "Refusing to write the kit into {}: it holds {files}, which no earlier `batch bundle` \
         wrote (not listed in its kit.json). A run refuses files the kit does not list, so \
         write the kit into an empty or new directory, or remove those files.",
        dir.display()
    )]
    NotAKit { dir: PathBuf, files: String },

    #[error(
        "The docker config file {} cannot be read: {reason}. Fix it (`docker login` writes \
         it), or point DOCKER_CONFIG at the directory of another config.json.",
        path.display()
    )]
    Credentials { path: PathBuf, reason: String },

    #[error(transparent)]
    Stage(#[from] StageError),

    #[error(
        "There is no kit at {}. Give the kit directory `batch bundle --into` wrote, or the kit \
         archive `batch bundle --archive` wrote (--extract takes only an archive), and check \
         the path.",
        path.display()
    )]
    NoKit { path: PathBuf },

    #[error(
        "Refusing to extract the kit archive {} into {}: {holds}. Extract into a new or empty \
         directory, so that it holds the kit and nothing else, or remove what is there first.",
        archive.display(),
        dir.display()
    )]
    ExtractInto {
        archive: PathBuf,
        dir: PathBuf,
        /// What is there: `it holds a, b`, `it is not a directory`.
        holds: String,
    },

    #[error(
        "Cannot write the kit archive {} there: {reason}. Give --archive the path of a file \
         outside the kit directory.",
        archive.display()
    )]
    ArchivePlace { archive: PathBuf, reason: String },

    /// Every problem the kit check found, one per line, in the run's words.
    #[error("{}", lines(problems))]
    KitBroken { problems: Vec<KitError> },

    #[error(
        "The sha512 file {} of the kit archive {} {reason}, so the archive cannot be verified. \
         Copy it again from the machine that wrote the archive: `batch bundle --archive` writes \
         it beside the archive.",
        sidecar.display(),
        archive.display()
    )]
    Sidecar {
        archive: PathBuf,
        sidecar: PathBuf,
        /// `does not exist`, `does not hold a sha512 digest ...`.
        reason: String,
    },

    #[error(
        "The sha512 of the kit archive {} is {actual}, but {} gives {expected}, so the archive \
         or its sha512 file was damaged or altered after `batch bundle` wrote them. Copy both \
         again from the machine that ran `keadm-batch batch bundle --archive`, or write them \
         again there.{}",
        archive.display(),
        sidecar.display(),
        inside.as_ref().map(|e| format!("\n{e}")).unwrap_or_default()
    )]
    ArchiveMismatch {
        archive: PathBuf,
        sidecar: PathBuf,
        expected: String,
        actual: String,
        /// What the check of the kit inside found, when it found something: which file
        /// the damage is in.
        inside: Option<Box<BundleError>>,
    },

    #[error(
        "The sha512 of the kit archive {} is {actual}, but --expect-sha512 gives {expected}, so \
         nothing was extracted: it is not the archive that digest was given for (it was damaged \
         or replaced on the way). Get the archive again from the machine that ran `keadm-batch \
         batch bundle --archive`, and check the digest with whoever gave it to you.{}",
        archive.display(),
        inside.as_ref().map(|e| format!("\n{e}")).unwrap_or_default()
    )]
    PinnedMismatch {
        archive: PathBuf,
        expected: String,
        actual: String,
        /// As [`BundleError::ArchiveMismatch`]'s.
        inside: Option<Box<BundleError>>,
    },

    #[error(
        "--expect-sha512 pins a kit archive's sha512, and {} is a directory. Verify the archive \
         with it before it is extracted, or verify the directory without it and compare the \
         kit.json sha256 it prints with the one `batch bundle` printed.",
        path.display()
    )]
    PinForDirectory { path: PathBuf },

    #[error(
        "The kit archive {} cannot be read as a tar archive: {error}. It is damaged or cut \
         short: copy it again with its sha512 file, or write it again with `batch bundle \
         --archive` on the connected machine.",
        archive.display()
    )]
    ArchiveUnreadable { archive: PathBuf, error: String },

    #[error(
        "Refusing the kit archive {}: its entry {entry:?} {reason}. A kit archive holds the \
         kit's regular files only, at paths inside it; write it again with `batch bundle \
         --archive` on the connected machine.",
        archive.display()
    )]
    ArchiveUnsafe {
        archive: PathBuf,
        entry: String,
        reason: String,
    },

    #[error(
        "Cannot reach {registry} for the image {image} after {attempts} attempt(s): {error}. \
         Check the network and the proxy environment variables (HTTPS_PROXY, NO_PROXY), or \
         map the registry to one you can reach with --registry-mirror."
    )]
    Unreachable {
        image: String,
        registry: String,
        attempts: u32,
        error: String,
    },

    #[error(
        "The registry {registry} has no image {image} (it answered {status}). Check the name \
         and tag (keadmCmd's --image-repository and --kubeedge-version, --sandbox-image), or \
         push the image to that registry."
    )]
    NotFound {
        image: String,
        registry: String,
        status: String,
    },

    #[error(
        "The registry {registry} wants credentials for the image {image}, and {source_name} \
         has none for it. Log in with `docker login`, or point DOCKER_CONFIG at the directory \
         of a config.json that has them."
    )]
    NeedsLogin {
        image: String,
        registry: String,
        source_name: String,
    },

    #[error(
        "The registry {registry} refused the image {image} ({status}) with the credentials \
         from {source_name}. Check them with `docker login`, and that the account may pull \
         that repository."
    )]
    Denied {
        image: String,
        registry: String,
        status: String,
        source_name: String,
    },

    #[error(
        "Could not get a pull token for the image {image} from {realm}: {error}. Check the \
         network and the credentials in {source_name}."
    )]
    Token {
        image: String,
        realm: String,
        error: String,
        source_name: String,
    },

    #[error(
        "The registry {registry} answered {status} for the image {image}. Retry later, or use \
         another registry or mirror (--registry-mirror)."
    )]
    Status {
        image: String,
        registry: String,
        status: String,
    },

    #[error(
        "The registry {registry} redirected the request for the image {image} to the plain-HTTP \
         address {to}, so it was not sent: whoever is on the network path could read or swap \
         what comes back. Use a registry or mirror whose redirects stay on https, or pass \
         --insecure-http to accept the risk on a network you trust."
    )]
    PlainHttpRedirect {
        image: String,
        registry: String,
        to: String,
    },

    #[error(
        "The registry {registry} sent headers for the image {image} that are larger than the \
         HTTP client takes (408 KiB, 100 headers), which no registry sends, so the answer was \
         refused. Check the registry, or use another one (--registry-mirror)."
    )]
    HeadersTooLarge { image: String, registry: String },

    #[error(
        "The {what} of the image {image} from {registry} is longer than the {size} bytes its \
         manifest gives: the registry sent more, so the download was cut off at that size, and \
         nothing was written for this image. Retry, or check the registry."
    )]
    Oversized {
        image: String,
        registry: String,
        what: String,
        size: u64,
    },

    #[error(
        "The registry {registry} sent a manifest for the image {image} that cannot be used: \
         {reason}. Check that it is a Docker (schema 2) or OCI image."
    )]
    BadManifest {
        image: String,
        registry: String,
        reason: String,
    },

    #[error(
        "The image {image} at {registry} has no linux/{arch} build (it has {available}), so \
         nodes of arch {arch} could not run it. Remove {arch} from keadm.archGroup, or use an \
         image built for it."
    )]
    NoPlatform {
        image: String,
        registry: String,
        arch: Arch,
        available: String,
    },

    #[error(
        "The {what} of the image {image} from {registry} has the digest {actual}, but {expected} \
         was expected. The registry or a proxy on the way altered it, so nothing was written \
         for this image. Retry, or check the registry."
    )]
    DigestMismatch {
        image: String,
        registry: String,
        what: String,
        expected: String,
        actual: String,
    },

    #[error(
        "The {what} of the image {image} at {registry} is {size} bytes, more than the limit of \
         {limit} bytes (--max-package-bytes). Raise the limit if the image is genuine."
    )]
    TooLarge {
        image: String,
        registry: String,
        what: String,
        size: u64,
        limit: u64,
    },

    #[error(
        "Could not {action} {}: {error}. Check that you can write there and that the disk has \
         space.",
        path.display()
    )]
    Io {
        action: &'static str,
        path: PathBuf,
        error: String,
    },
}

impl BundleError {
    pub fn failure(&self) -> Failure {
        use BundleError::*;
        match self {
            NoVersion { .. }
            | NoArchGroup { .. }
            | BadImage { .. }
            | UnsetVariable { .. }
            | PlainHttpMirror { .. }
            | UnsafeDownload(_)
            | NotAKit { .. }
            | Credentials { .. } => Failure::Usage,
            Stage(_)
            | Unreachable { .. }
            | NotFound { .. }
            | NeedsLogin { .. }
            | Denied { .. }
            | Token { .. }
            | Status { .. }
            | BadManifest { .. }
            | NoPlatform { .. }
            | DigestMismatch { .. }
            | PlainHttpRedirect { .. }
            | HeadersTooLarge { .. }
            | Oversized { .. }
            | TooLarge { .. } => Failure::Fetch,
            NoKit { .. } | ExtractInto { .. } | ArchivePlace { .. } | PinForDirectory { .. } => {
                Failure::Usage
            }
            KitBroken { .. }
            | Sidecar { .. }
            | ArchiveMismatch { .. }
            | PinnedMismatch { .. }
            | ArchiveUnreadable { .. }
            | ArchiveUnsafe { .. } => Failure::Broken,
            Io { .. } => Failure::Output,
        }
    }

    /// The error for the problems the kit check found (at least one).
    pub(crate) fn broken(problems: Vec<KitError>) -> BundleError {
        BundleError::KitBroken { problems }
    }

    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        error: std::io::Error,
    ) -> BundleError {
        BundleError::Io {
            action,
            path: path.into(),
            error: error.to_string(),
        }
    }
}

/// Each of `problems` on a line of its own.
fn lines(problems: &[KitError]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}
