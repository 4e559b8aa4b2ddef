//! [`TransportError`]: why a connection or a command failed, as sentences that name the
//! node and, where there is one, the fix.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use super::Endpoint;
use crate::node_text::EndlessLine;

/// Why a transport operation failed. Messages are full sentences naming the node.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("Could not resolve the address of {endpoint}: {source}.")]
    Resolve {
        endpoint: Endpoint,
        source: io::Error,
    },

    #[error(
        "The node at {endpoint} refused the connection. Check that sshd runs on the node and listens on that address and port."
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

    #[error(
        "Connecting to the node at {endpoint} timed out after {:.1} s while waiting for its turn at that sshd: \
         {limit} other SSH handshakes with it were in flight all that time (--handshakes-per-host {limit}). \
         Raise connectTimeoutSeconds (--connect-timeout), or --handshakes-per-host if that sshd's MaxStartups admits more.",
        .waited.as_secs_f64()
    )]
    PaceTimeout {
        endpoint: Endpoint,
        limit: usize,
        waited: Duration,
    },

    /// sshd closed the connection before its SSH banner: what it does past MaxStartups.
    #[error(
        "The sshd at {endpoint} closed the connection before the SSH handshake ({detail}), as sshd does with connections past its MaxStartups limit of unauthenticated connections. \
         Raise MaxStartups (and PerSourceMaxStartups) on {}, or lower --handshakes-per-host.",
        .endpoint.host
    )]
    AdmissionRefused { endpoint: Endpoint, detail: String },

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

    #[error("The SSH connection to the node at {endpoint} failed while {what}: {message}.")]
    Session {
        endpoint: Endpoint,
        what: String,
        message: String,
        /// Set when the failure is at socket level (connection lost), not a refusal by the node.
        transient: bool,
    },

    #[error("Could not reach the node at {endpoint} through the jump host {jump}. {source}")]
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

    /// The node sent output the tool refuses to hold (see [`EndlessLine`]); the command
    /// was killed.
    #[error(
        "The node at {endpoint} {line}. keadm-batch stopped reading it and killed the command; a node that works prints its lines in full."
    )]
    EndlessOutput {
        endpoint: Endpoint,
        line: EndlessLine,
    },
}

impl TransportError {
    /// The error of a write of the node's output into `output`'s writer that failed:
    /// the node's own fault when the writer refused an endless line, else ours.
    pub fn output_write(endpoint: &Endpoint, source: io::Error) -> TransportError {
        let endpoint = endpoint.clone();
        match source.downcast::<EndlessLine>() {
            Ok(line) => TransportError::EndlessOutput { endpoint, line },
            Err(source) => TransportError::OutputWrite { endpoint, source },
        }
    }

    /// The same error again, for each of several nodes that waited on one attempt (a
    /// shared jump connection that could not be opened). An `io::Error` is rebuilt from
    /// its kind and text, which is all a message or a class reads of it.
    pub(super) fn duplicate(&self) -> TransportError {
        let io = |e: &io::Error| io::Error::new(e.kind(), e.to_string());
        match self {
            TransportError::Resolve { endpoint, source } => TransportError::Resolve {
                endpoint: endpoint.clone(),
                source: io(source),
            },
            TransportError::Refused { endpoint } => TransportError::Refused {
                endpoint: endpoint.clone(),
            },
            TransportError::Connect { endpoint, source } => TransportError::Connect {
                endpoint: endpoint.clone(),
                source: io(source),
            },
            TransportError::ConnectTimeout {
                endpoint,
                phase,
                after,
            } => TransportError::ConnectTimeout {
                endpoint: endpoint.clone(),
                phase,
                after: *after,
            },
            TransportError::Handshake {
                endpoint,
                message,
                transient,
            } => TransportError::Handshake {
                endpoint: endpoint.clone(),
                message: message.clone(),
                transient: *transient,
            },
            TransportError::PaceTimeout {
                endpoint,
                limit,
                waited,
            } => TransportError::PaceTimeout {
                endpoint: endpoint.clone(),
                limit: *limit,
                waited: *waited,
            },
            TransportError::AdmissionRefused { endpoint, detail } => {
                TransportError::AdmissionRefused {
                    endpoint: endpoint.clone(),
                    detail: detail.clone(),
                }
            }
            TransportError::AuthRejected {
                endpoint,
                user,
                method,
            } => TransportError::AuthRejected {
                endpoint: endpoint.clone(),
                user: user.clone(),
                method: method.clone(),
            },
            TransportError::AuthSetup {
                endpoint,
                user,
                message,
            } => TransportError::AuthSetup {
                endpoint: endpoint.clone(),
                user: user.clone(),
                message: message.clone(),
            },
            TransportError::HostKeyChanged {
                endpoint,
                host_entry,
                fingerprint,
                known_hosts,
            } => TransportError::HostKeyChanged {
                endpoint: endpoint.clone(),
                host_entry: host_entry.clone(),
                fingerprint: fingerprint.clone(),
                known_hosts: known_hosts.clone(),
            },
            TransportError::HostKeyUnknown {
                endpoint,
                fingerprint,
                known_hosts,
            } => TransportError::HostKeyUnknown {
                endpoint: endpoint.clone(),
                fingerprint: fingerprint.clone(),
                known_hosts: known_hosts.clone(),
            },
            TransportError::HostKeyRevoked {
                endpoint,
                fingerprint,
                known_hosts,
                line,
            } => TransportError::HostKeyRevoked {
                endpoint: endpoint.clone(),
                fingerprint: fingerprint.clone(),
                known_hosts: known_hosts.clone(),
                line: *line,
            },
            TransportError::HostKeyNotVerifiable {
                endpoint,
                fingerprint,
                known_hosts,
                line,
                covered_by,
            } => TransportError::HostKeyNotVerifiable {
                endpoint: endpoint.clone(),
                fingerprint: fingerprint.clone(),
                known_hosts: known_hosts.clone(),
                line: *line,
                covered_by: covered_by.clone(),
            },
            TransportError::KnownHosts { path, message } => TransportError::KnownHosts {
                path: path.clone(),
                message: message.clone(),
            },
            TransportError::Timeout {
                endpoint,
                what,
                after,
            } => TransportError::Timeout {
                endpoint: endpoint.clone(),
                what: what.clone(),
                after: *after,
            },
            TransportError::Session {
                endpoint,
                what,
                message,
                transient,
            } => TransportError::Session {
                endpoint: endpoint.clone(),
                what: what.clone(),
                message: message.clone(),
                transient: *transient,
            },
            TransportError::Jump {
                endpoint,
                jump,
                source,
            } => TransportError::Jump {
                endpoint: endpoint.clone(),
                jump: jump.clone(),
                source: Box::new(source.duplicate()),
            },
            TransportError::Aborted { endpoint } => TransportError::Aborted {
                endpoint: endpoint.clone(),
            },
            TransportError::LocalRead { endpoint, source } => TransportError::LocalRead {
                endpoint: endpoint.clone(),
                source: io(source),
            },
            TransportError::OutputWrite { endpoint, source } => TransportError::OutputWrite {
                endpoint: endpoint.clone(),
                source: io(source),
            },
            // Only a running command meets endless output; kept as its sentence.
            TransportError::EndlessOutput { endpoint, .. } => TransportError::Session {
                endpoint: endpoint.clone(),
                what: "reading the output".to_string(),
                message: self.to_string(),
                transient: false,
            },
        }
    }

    /// Whether a retry with backoff may succeed: the network or the node's sshd was not
    /// (yet) there. Authentication failures, host-key problems and command deadlines are
    /// final, because retrying them only repeats the same answer (or locks accounts).
    pub fn is_transient(&self) -> bool {
        match self {
            TransportError::Refused { .. }
            | TransportError::ConnectTimeout { .. }
            | TransportError::PaceTimeout { .. } => true,
            // Retried on its own budget, within the connect deadline (pipeline::connect).
            TransportError::AdmissionRefused { .. } => false,
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

    /// Whether sshd (the node's, or a jump host's) dropped the connection before its
    /// banner, as it does past MaxStartups.
    pub fn is_admission_refused(&self) -> bool {
        match self {
            TransportError::AdmissionRefused { .. } => true,
            TransportError::Jump { source, .. } => source.is_admission_refused(),
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
            | TransportError::PaceTimeout { endpoint, .. }
            | TransportError::AdmissionRefused { endpoint, .. }
            | TransportError::Handshake { endpoint, .. }
            | TransportError::AuthRejected { endpoint, .. }
            | TransportError::AuthSetup { endpoint, .. }
            | TransportError::HostKeyChanged { endpoint, .. }
            | TransportError::HostKeyUnknown { endpoint, .. }
            | TransportError::HostKeyRevoked { endpoint, .. }
            | TransportError::HostKeyNotVerifiable { endpoint, .. }
            | TransportError::Timeout { endpoint, .. }
            | TransportError::Aborted { endpoint }
            | TransportError::Session { endpoint, .. }
            | TransportError::LocalRead { endpoint, .. }
            | TransportError::OutputWrite { endpoint, .. }
            | TransportError::EndlessOutput { endpoint, .. } => Some(endpoint),
        }
    }
}
