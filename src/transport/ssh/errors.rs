//! Reading libssh2's errors: which codes mean "try again", which mean the connection
//! itself failed, and the [`TransportError`] each becomes.

use std::time::{Duration, Instant};

use libssh2_sys::{
    LIBSSH2_ERROR_BANNER_RECV, LIBSSH2_ERROR_BANNER_SEND, LIBSSH2_ERROR_SOCKET_DISCONNECT,
    LIBSSH2_ERROR_SOCKET_RECV, LIBSSH2_ERROR_SOCKET_SEND, LIBSSH2_ERROR_SOCKET_TIMEOUT,
    LIBSSH2_ERROR_TIMEOUT,
};
use ssh2::ErrorCode;

use crate::transport::{ConnectSpec, Endpoint, TransportError};

pub(super) fn is_code(e: &ssh2::Error, code: i32) -> bool {
    e.code() == ErrorCode::Session(code)
}

/// The connection itself failed (reset, closed, timed out at socket level), as opposed
/// to the node refusing something.
pub(super) fn is_socket_error(e: &ssh2::Error) -> bool {
    matches!(
        e.code(),
        ErrorCode::Session(
            LIBSSH2_ERROR_BANNER_RECV
                | LIBSSH2_ERROR_BANNER_SEND
                | LIBSSH2_ERROR_SOCKET_SEND
                | LIBSSH2_ERROR_SOCKET_DISCONNECT
                | LIBSSH2_ERROR_SOCKET_TIMEOUT
                | LIBSSH2_ERROR_SOCKET_RECV
        )
    )
}

/// A libssh2 timeout in milliseconds. 0 would mean "no timeout" to libssh2, so it never
/// rounds down to it.
pub(super) fn clamp_ms(d: Duration) -> u32 {
    d.as_millis().clamp(1, u32::MAX as u128) as u32
}

/// A failure of the handshake during `phase` of connecting.
pub(super) fn connect_error(
    spec: &ConnectSpec,
    deadline: Instant,
    phase: &'static str,
    e: ssh2::Error,
) -> TransportError {
    if is_code(&e, LIBSSH2_ERROR_TIMEOUT) || Instant::now() >= deadline {
        return TransportError::ConnectTimeout {
            endpoint: spec.endpoint.clone(),
            phase,
            after: spec.connect_timeout,
        };
    }
    TransportError::Handshake {
        endpoint: spec.endpoint.clone(),
        message: e.message().to_string(),
        transient: is_socket_error(&e),
    }
}

/// A failure of the connected session while doing `what`.
pub(super) fn session_error(endpoint: &Endpoint, what: &str, e: ssh2::Error) -> TransportError {
    TransportError::Session {
        endpoint: endpoint.clone(),
        what: what.to_string(),
        message: e.message().to_string(),
        transient: is_socket_error(&e),
    }
}

/// `what` ("running the command") did not finish by its deadline.
pub(super) fn timeout(endpoint: &Endpoint, what: &str, started: Instant) -> TransportError {
    let mut what = what.to_string();
    if let Some(first) = what.get(..1) {
        what = first.to_uppercase() + &what[1..];
    }
    TransportError::Timeout {
        endpoint: endpoint.clone(),
        what,
        after: started.elapsed(),
    }
}
