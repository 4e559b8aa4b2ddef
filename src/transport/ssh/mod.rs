//! [`SshConnection`]: connect and exec with streaming, on one `ssh2::Session`.
//!
//! `connect` opens the socket (directly or through a jump host) and runs the handshake;
//! `auth` logs in; `exec` runs commands in a non-blocking loop around poll(2); `errors`
//! reads libssh2's error codes. The [`Connection`](super::Connection) methods are in
//! `exec`.

mod auth;
mod connect;
mod errors;
mod exec;

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::Instant;

use ssh2::{MethodType, Session};

use super::jump::JumpSession;
use super::pace;
use super::{AbortCheck, ConnectSpec, Endpoint, TransportError};

/// One authenticated SSH connection to one node.
///
/// Not shared between threads: create it, use it and drop it on one worker thread.
pub struct SshConnection {
    session: Session,
    /// The socket under `session`, which holds the other reference; kept for poll(2) in
    /// the non-blocking loops. Declared after `session`, so it closes after the session
    /// has said goodbye on it.
    socket: Arc<OwnedFd>,
    endpoint: Endpoint,
    fingerprint: String,
    /// Asked between socket waits; true ends a running command like a deadline would
    /// (the operator's second Ctrl-C).
    abort: Option<AbortCheck>,
    /// See [`Connection::leave_at_deadline`].
    leave_at_deadline: bool,
    /// The command left running at its deadline, its channel open (see
    /// [`Connection::finish_left`]).
    left: Option<ssh2::Channel>,
}

impl std::fmt::Debug for SshConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SshConnection")
            .field("endpoint", &self.endpoint)
            .field("fingerprint", &self.fingerprint)
            .finish()
    }
}

impl SshConnection {
    /// TCP connect, SSH handshake, host-key check and authentication, all within
    /// `spec.connect_timeout`. Afterwards blocking calls have no timeout (each operation
    /// takes its own deadline) and keepalives are on.
    pub fn connect(spec: &ConnectSpec) -> Result<SshConnection, TransportError> {
        let deadline = Instant::now() + spec.connect_timeout;
        // This handshake's turn at the sshd it is made with (`pace`), held from the TCP
        // connect until authentication is done or has failed: dropped on every return.
        // With a jump host, the jump's own connect below takes its turn at the bastion.
        let _turn = pace::turn(spec, deadline)?;
        let endpoint = &spec.endpoint;
        let mut session = Session::new().map_err(|e| TransportError::Session {
            endpoint: endpoint.clone(),
            what: "creating the SSH session".to_string(),
            message: e.message().to_string(),
            transient: false,
        })?;
        connect::set_preferences(&session);
        let socket = connect::open_socket(spec, deadline)?;
        session.set_tcp_stream(Arc::clone(&socket));

        let fingerprint = connect::handshake_and_auth(&mut session, spec, deadline)?;

        session.set_timeout(0);
        if spec.keepalive_secs > 0 {
            session.set_keepalive(true, spec.keepalive_secs);
        }
        log::debug!(
            "Connected to {endpoint} as {} (host key {fingerprint}, kex {}, cipher {})",
            spec.username,
            session.methods(MethodType::Kex).unwrap_or("?"),
            session.methods(MethodType::CryptCs).unwrap_or("?"),
        );
        Ok(SshConnection {
            session,
            socket,
            endpoint: endpoint.clone(),
            fingerprint,
            abort: None,
            leave_at_deadline: false,
            left: None,
        })
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The negotiated key exchange and client-to-server cipher, for logs and benchmarks.
    pub fn negotiated(&self) -> (String, String) {
        (
            self.session
                .methods(MethodType::Kex)
                .unwrap_or("")
                .to_string(),
            self.session
                .methods(MethodType::CryptCs)
                .unwrap_or("")
                .to_string(),
        )
    }
}

/// A connection to a jump host carries the channels to the nodes behind it.
impl JumpSession for SshConnection {
    fn session(&self) -> &Session {
        &self.session
    }

    fn socket(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }

    fn is_lost(&self, e: &ssh2::Error) -> bool {
        errors::is_socket_error(e)
    }
}
