//! Why the cluster could not be used, in sentences that say which kubeconfig, which
//! server and what to do. Raised before any node is touched (exit 2).

use std::fmt;

/// Where the kubeconfig came from, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KubeconfigSource {
    /// `--kubeconfig FILE`.
    CommandLine(std::path::PathBuf),
    /// The config file's `kubeconfig`.
    ConfigFile(std::path::PathBuf),
    /// `$KUBECONFIG`, as kubectl reads it (a list of files, merged).
    Environment(String),
}

impl fmt::Display for KubeconfigSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KubeconfigSource::CommandLine(path) => {
                write!(f, "the kubeconfig {} (--kubeconfig)", path.display())
            }
            KubeconfigSource::ConfigFile(path) => {
                write!(
                    f,
                    "the kubeconfig {} (the config's kubeconfig)",
                    path.display()
                )
            }
            KubeconfigSource::Environment(value) => write!(f, "the kubeconfig $KUBECONFIG={value}"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(
        "Could not read {source_of}: {error}. Fix the file (`kubectl --kubeconfig FILE get nodes` reads it the same way), or leave out the kubeconfig to run without checking the cluster. No node was touched."
    )]
    Kubeconfig {
        source_of: KubeconfigSource,
        error: String,
    },
    #[error(
        "Could not make a client for {server} from {source_of}: {error}. Check the cluster's certificate-authority, the user's credentials and any proxy-url in it. No node was touched."
    )]
    Client {
        source_of: KubeconfigSource,
        server: String,
        error: String,
    },
    #[error(
        "The API server {server} could not be asked {what}: {error}. Check that it is up and reachable from this machine (`kubectl get nodes` with the same kubeconfig), or leave out the kubeconfig to run without checking the cluster. No node was touched."
    )]
    Api {
        server: String,
        what: String,
        error: String,
    },
    #[error(
        "The kubeconfig's user may not {denied} ({server} answered the access review so). Every run with a kubeconfig needs get, list and watch on nodes{more}; grant them (docs/kubeedge.md has a ClusterRole that does), or leave out the kubeconfig. No node was touched."
    )]
    Denied {
        server: String,
        denied: String,
        more: String,
    },
}
