//! Reading libssh2's errors: which codes mean "try again", which mean the connection
//! itself failed, and the [`TransportError`] each becomes.

use std::time::{Duration, Instant};

use libssh2_sys::{
    LIBSSH2_ERROR_BANNER_RECV, LIBSSH2_ERROR_BANNER_SEND, LIBSSH2_ERROR_SOCKET_DISCONNECT,
    LIBSSH2_ERROR_SOCKET_RECV, LIBSSH2_ERROR_SOCKET_SEND, LIBSSH2_ERROR_SOCKET_TIMEOUT,
    LIBSSH2_ERROR_TIMEOUT,
};
use ssh2::{ErrorCode, Session};

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
fn connect_error(
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

/// A failure of the handshake itself. sshd drops a connection past its MaxStartups
/// before its banner: it writes `Exceeded MaxStartups` and closes (a reset, as the
/// client's banner is unread), and libssh2, which reads lines until one starts with
/// `SSH-`, reports a socket error while "getting banner". A connection closed with no
/// line at all (the reset can discard the line) is taken for the same. A connection lost
/// after the server's SSH banner, or a line of another server, is not.
pub(super) fn handshake_error(
    session: &Session,
    spec: &ConnectSpec,
    deadline: Instant,
    e: ssh2::Error,
) -> TransportError {
    let in_time = !is_code(&e, LIBSSH2_ERROR_TIMEOUT)
        && !is_code(&e, LIBSSH2_ERROR_SOCKET_TIMEOUT)
        && Instant::now() < deadline;
    if in_time
        && is_socket_error(&e)
        && let Some(detail) = admission_detail(session.banner_bytes())
    {
        return TransportError::AdmissionRefused {
            endpoint: spec.endpoint.clone(),
            detail,
        };
    }
    connect_error(spec, deadline, "performing the SSH handshake", e)
}

/// What sshd said when it closed before the handshake, when that reads as a refusal to
/// admit the connection: nothing, or one of sshd's lines for it (`Exceeded MaxStartups`;
/// `Not allowed at this time`, OpenSSH 9.8's PerSourcePenalties).
fn admission_detail(banner: Option<&[u8]>) -> Option<String> {
    let Some(line) = banner else {
        return Some("it sent no SSH banner".to_string());
    };
    let line = String::from_utf8_lossy(line);
    let sshd_words = ["Exceeded MaxStartups", "Not allowed at this time"];
    sshd_words
        .iter()
        .any(|w| line.contains(w))
        .then(|| format!("it said \"{}\"", crate::node_text::one_line(&line, 64)))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sshd_s_refusals_and_silence_read_as_admission_refused_other_lines_do_not() {
        assert_eq!(
            admission_detail(None).as_deref(),
            Some("it sent no SSH banner")
        );
        assert_eq!(
            admission_detail(Some(b"Exceeded MaxStartups")).as_deref(),
            Some("it said \"Exceeded MaxStartups\"")
        );
        assert!(admission_detail(Some(b"Not allowed at this time")).is_some());
        assert_eq!(admission_detail(Some(b"HTTP/1.1 400 Bad Request")), None);
        assert_eq!(admission_detail(Some(b"SSH-2.0-OpenSSH_9.2p1")), None);
    }
}
