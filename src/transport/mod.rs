//! The SSH transport: one connection to one node, used by one worker thread.
//!
//! [`SshConnection`] wraps one `ssh2::Session`. libssh2 sessions are not safe to share
//! between threads (a blocking call on one channel blocks the whole session, and channels
//! freed from several threads are unsound), so a connection is created, used and dropped
//! on the worker thread that owns the node.
//!
//! Every operation takes a deadline; errors say which node, which user and what to do.

mod jump;
mod known_hosts;
mod ssh;

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use crate::redact::Secret;

pub use known_hosts::{host_entry, sha256_fingerprint};
pub use ssh::SshConnection;

/// Answers whether the operator asked to cancel running commands.
pub type AbortCheck = std::sync::Arc<dyn Fn() -> bool + Send + Sync>;

/// Where a node's sshd listens.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// A host name or an IP literal, never bracketed (`::1`, not `[::1]`).
    pub host: String,
    pub port: u16,
}

impl Endpoint {
    /// Builds an endpoint; brackets around an IPv6 literal are dropped so that every
    /// later formatting step can add them exactly where they are needed.
    pub fn new(host: impl Into<String>, port: u16) -> Endpoint {
        let host = host.into();
        let host = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            Some(inner) => inner.to_string(),
            None => host,
        };
        Endpoint { host, port }
    }
}

impl fmt::Display for Endpoint {
    /// `host:port`, with brackets around IPv6 literals (`[::1]:22`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// How to log in.
#[derive(Clone, Debug)]
pub enum Auth {
    Password(Secret),
    PrivateKey {
        path: PathBuf,
        passphrase: Option<Secret>,
    },
    /// An ssh-agent. `socket: None` means `$SSH_AUTH_SOCK`; a path avoids touching the
    /// process environment, which parallel workers and tests share.
    Agent {
        socket: Option<PathBuf>,
    },
}

impl Auth {
    /// The method's name as used in messages ("the password", "the key /k").
    fn describe(&self) -> String {
        match self {
            Auth::Password(_) => "the password".to_string(),
            Auth::PrivateKey { path, .. } => format!("the private key {}", path.display()),
            Auth::Agent { .. } => "every key offered by the ssh-agent".to_string(),
        }
    }
}

/// What to do with the node's host key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HostKeyPolicy {
    /// Trust on first use: unknown hosts are recorded, a changed key is fatal.
    #[default]
    AcceptNew,
    /// Only hosts already in the known-hosts file are accepted.
    Strict,
    /// Any key is accepted, as keadm does.
    Off,
}

/// Everything needed to open one connection.
#[derive(Clone, Debug)]
pub struct ConnectSpec {
    pub endpoint: Endpoint,
    pub username: String,
    pub auth: Auth,
    pub host_key_policy: HostKeyPolicy,
    /// The OpenSSH-format known-hosts file read (and, under `AcceptNew`, appended to).
    pub known_hosts: PathBuf,
    /// Bounds TCP connect, SSH handshake, host-key check and authentication together.
    pub connect_timeout: Duration,
    /// Seconds between keepalive probes once connected; 0 turns them off.
    pub keepalive_secs: u32,
    /// A jump host (bastion) to reach the node through, as `ssh -J` does. Its own host
    /// key and auth are checked by its own spec; its connect time counts against this
    /// spec's `connect_timeout`.
    pub jump: Option<Box<ConnectSpec>>,
}

/// How a remote command ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RemoteExit {
    Code(i32),
    /// The signal name without `SIG`, as sshd reports it (`KILL`).
    Signal(String),
}

impl RemoteExit {
    pub fn success(&self) -> bool {
        *self == RemoteExit::Code(0)
    }
}

impl fmt::Display for RemoteExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RemoteExit::Code(code) => write!(f, "exit status {code}"),
            RemoteExit::Signal(sig) => write!(f, "killed by signal {sig}"),
        }
    }
}

/// Why a transport operation failed. Messages are full sentences naming the node.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("Could not resolve the address of {endpoint}: {source}.")]
    Resolve {
        endpoint: Endpoint,
        source: io::Error,
    },

    #[error(
        "The node at {endpoint} refused the connection; is sshd running and listening on that address and port?"
    )]
    Refused { endpoint: Endpoint },

    #[error("Could not connect to the node at {endpoint}: {source}.")]
    Connect {
        endpoint: Endpoint,
        source: io::Error,
    },

    #[error("Connecting to the node at {endpoint} timed out after {:.1} s while {phase}.", .after.as_secs_f64())]
    ConnectTimeout {
        endpoint: Endpoint,
        phase: &'static str,
        after: Duration,
    },

    #[error("The SSH handshake with the node at {endpoint} failed: {message}.")]
    Handshake {
        endpoint: Endpoint,
        message: String,
        /// Socket-level failures (reset, closed) are worth a retry; algorithm mismatches are not.
        transient: bool,
    },

    #[error("The node at {endpoint} rejected {method} for user {user}.")]
    AuthRejected {
        endpoint: Endpoint,
        user: String,
        method: String,
    },

    #[error("Could not log in to the node at {endpoint} as {user}: {message}.")]
    AuthSetup {
        endpoint: Endpoint,
        user: String,
        message: String,
    },

    #[error(
        "The host key of the node at {endpoint} has changed: it now presents {fingerprint}, which does not match the key recorded in {}. \
         This can mean the node was reinstalled, or that someone is intercepting the connection. \
         After checking the new key out of band, remove the old entry with: ssh-keygen -R '{host_entry}' -f {}",
        .known_hosts.display(), .known_hosts.display()
    )]
    HostKeyChanged {
        endpoint: Endpoint,
        host_entry: String,
        fingerprint: String,
        known_hosts: PathBuf,
    },

    #[error(
        "The node at {endpoint} is not in {} and the host-key policy is strict; it presents {fingerprint}. \
         After checking that key, add it with: ssh-keyscan -p {} {} >> {} (or connect once with the accept-new policy).",
        .known_hosts.display(), .endpoint.port, .endpoint.host, .known_hosts.display()
    )]
    HostKeyUnknown {
        endpoint: Endpoint,
        fingerprint: String,
        known_hosts: PathBuf,
    },

    #[error(
        "The node at {endpoint} presents the host key {fingerprint}, which line {line} of {} marks as @revoked, so it is refused. \
         A revoked key stays untrusted: give the node a new host key, check it out of band and record it with: ssh-keyscan -p {} {} >> {} \
         (and delete any other line that still lists the revoked key). If the @revoked line itself is wrong, delete that line instead.",
        .known_hosts.display(), .endpoint.port, .endpoint.host, .known_hosts.display()
    )]
    HostKeyRevoked {
        endpoint: Endpoint,
        fingerprint: String,
        known_hosts: PathBuf,
        line: usize,
    },

    #[error(
        "The node at {endpoint} presents the host key {fingerprint}, but line {line} of {} covers it only by {covered_by}. \
         keadm-batch does not treat a host that a pattern or @cert-authority line covers as unknown, so it neither connects nor records the key. \
         After checking the key out of band, add a plain entry for the node with: ssh-keyscan -p {} {} >> {} \
         (or skip host-key checking knowingly with --host-key-policy off).",
        .known_hosts.display(), .endpoint.port, .endpoint.host, .known_hosts.display()
    )]
    HostKeyNotVerifiable {
        endpoint: Endpoint,
        fingerprint: String,
        known_hosts: PathBuf,
        line: usize,
        /// What covers the host, as a phrase: "the wildcard pattern `10.0.*`, ...".
        covered_by: String,
    },

    #[error("Could not use the known-hosts file {}: {message}.", .path.display())]
    KnownHosts { path: PathBuf, message: String },

    #[error("{what} on the node at {endpoint} did not finish within {:.1} s.", .after.as_secs_f64())]
    Timeout {
        endpoint: Endpoint,
        what: String,
        after: Duration,
    },

    #[error(
        "The node at {endpoint} offers no SFTP subsystem ({message}); its sshd_config has no usable `Subsystem sftp` line."
    )]
    SftpUnavailable { endpoint: Endpoint, message: String },

    #[error("SFTP failed on the node at {endpoint} while {what}: {message}.")]
    Sftp {
        endpoint: Endpoint,
        what: String,
        message: String,
    },

    #[error("The SSH connection to the node at {endpoint} failed while {what}: {message}.")]
    Session {
        endpoint: Endpoint,
        what: String,
        message: String,
        /// Set when the failure is at socket level (connection lost), not a refusal by the node.
        transient: bool,
    },

    #[error("Could not reach the node at {endpoint} through the jump host {jump}: {source}")]
    Jump {
        endpoint: Endpoint,
        jump: Endpoint,
        source: Box<TransportError>,
    },

    #[error("The command on the node at {endpoint} was cancelled by the operator and killed.")]
    Aborted { endpoint: Endpoint },

    #[error("Reading the local input for the node at {endpoint} failed: {source}.")]
    LocalRead {
        endpoint: Endpoint,
        source: io::Error,
    },

    #[error("Writing the output of the node at {endpoint} failed: {source}.")]
    OutputWrite {
        endpoint: Endpoint,
        source: io::Error,
    },
}

impl TransportError {
    /// Whether a retry with backoff may succeed: the network or the node's sshd was not
    /// (yet) there. Authentication failures, host-key problems and command deadlines are
    /// final, because retrying them only repeats the same answer (or locks accounts).
    pub fn is_transient(&self) -> bool {
        match self {
            TransportError::Refused { .. } | TransportError::ConnectTimeout { .. } => true,
            TransportError::Connect { source, .. } => matches!(
                source.kind(),
                io::ErrorKind::ConnectionReset
                    | io::ErrorKind::ConnectionAborted
                    | io::ErrorKind::TimedOut
                    | io::ErrorKind::HostUnreachable
                    | io::ErrorKind::NetworkUnreachable
                    | io::ErrorKind::AddrNotAvailable
                    | io::ErrorKind::Interrupted
            ),
            TransportError::Jump { source, .. } => source.is_transient(),
            TransportError::Handshake { transient, .. }
            | TransportError::Session { transient, .. } => *transient,
            _ => false,
        }
    }

    /// The node this error is about, when there is one.
    pub fn endpoint(&self) -> Option<&Endpoint> {
        match self {
            TransportError::KnownHosts { .. } => None,
            TransportError::Resolve { endpoint, .. }
            | TransportError::Refused { endpoint }
            | TransportError::Jump { endpoint, .. }
            | TransportError::Connect { endpoint, .. }
            | TransportError::ConnectTimeout { endpoint, .. }
            | TransportError::Handshake { endpoint, .. }
            | TransportError::AuthRejected { endpoint, .. }
            | TransportError::AuthSetup { endpoint, .. }
            | TransportError::HostKeyChanged { endpoint, .. }
            | TransportError::HostKeyUnknown { endpoint, .. }
            | TransportError::HostKeyRevoked { endpoint, .. }
            | TransportError::HostKeyNotVerifiable { endpoint, .. }
            | TransportError::Timeout { endpoint, .. }
            | TransportError::SftpUnavailable { endpoint, .. }
            | TransportError::Sftp { endpoint, .. }
            | TransportError::Aborted { endpoint }
            | TransportError::Session { endpoint, .. }
            | TransportError::LocalRead { endpoint, .. }
            | TransportError::OutputWrite { endpoint, .. } => Some(endpoint),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_brackets_only_ipv6() {
        assert_eq!(Endpoint::new("10.0.0.1", 22).to_string(), "10.0.0.1:22");
        assert_eq!(Endpoint::new("[::1]", 2222).to_string(), "[::1]:2222");
        assert_eq!(Endpoint::new("::1", 22).host, "::1");
    }

    #[test]
    fn remote_exit_display() {
        assert_eq!(RemoteExit::Code(3).to_string(), "exit status 3");
        assert_eq!(
            RemoteExit::Signal("KILL".into()).to_string(),
            "killed by signal KILL"
        );
    }
}
