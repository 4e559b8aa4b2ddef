//! Why a kit could not be written, in words an operator can act on.

use std::path::PathBuf;

use crate::arch::Arch;
use crate::stage::StageError;

/// Whose move it is, for the exit code (`error::Error::exit_code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The config, the command line or the output directory asks for something that
    /// cannot be done; nothing was fetched.
    Usage,
    /// A keadm release or an image could not be fetched or verified.
    Fetch,
    /// The kit could not be written.
    Output,
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
            | TooLarge { .. } => Failure::Fetch,
            Io { .. } => Failure::Output,
        }
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
