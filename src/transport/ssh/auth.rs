//! Logging in: password, private key file or ssh-agent, with errors that say which
//! method the node rejected or why it could not even be tried.

use std::time::Instant;

use libssh2_sys::{
    LIBSSH2_ERROR_AUTHENTICATION_FAILED, LIBSSH2_ERROR_FILE, LIBSSH2_ERROR_KEYFILE_AUTH_FAILED,
    LIBSSH2_ERROR_PUBLICKEY_UNVERIFIED, LIBSSH2_ERROR_TIMEOUT,
};
use ssh2::Session;

use super::errors::{is_code, is_socket_error};
use crate::transport::{Auth, ConnectSpec, TransportError};

pub(super) fn authenticate(
    session: &Session,
    spec: &ConnectSpec,
    deadline: Instant,
) -> Result<(), TransportError> {
    let endpoint = &spec.endpoint;
    let user = spec.username.as_str();
    let setup = |message: String| TransportError::AuthSetup {
        endpoint: endpoint.clone(),
        user: user.to_string(),
        message,
    };
    let rejected = || TransportError::AuthRejected {
        endpoint: endpoint.clone(),
        user: user.to_string(),
        method: spec.auth.describe(),
    };
    let classify = |e: ssh2::Error| -> TransportError {
        if is_code(&e, LIBSSH2_ERROR_TIMEOUT) || Instant::now() >= deadline {
            TransportError::ConnectTimeout {
                endpoint: endpoint.clone(),
                phase: "authenticating",
                after: spec.connect_timeout,
            }
        } else if is_socket_error(&e) {
            TransportError::Session {
                endpoint: endpoint.clone(),
                what: "authenticating".to_string(),
                message: e.message().to_string(),
                transient: true,
            }
        } else if is_code(&e, LIBSSH2_ERROR_AUTHENTICATION_FAILED)
            || is_code(&e, LIBSSH2_ERROR_PUBLICKEY_UNVERIFIED)
        {
            rejected()
        } else if is_code(&e, LIBSSH2_ERROR_FILE) || is_code(&e, LIBSSH2_ERROR_KEYFILE_AUTH_FAILED)
        {
            let Auth::PrivateKey { path, .. } = &spec.auth else {
                return setup(e.message().to_string());
            };
            setup(format!(
                "the private key {} cannot be loaded; the passphrase is wrong or the key is in a format libssh2 cannot read ({})",
                path.display(),
                e.message()
            ))
        } else {
            setup(e.message().to_string())
        }
    };

    match &spec.auth {
        Auth::Password(password) => session
            .userauth_password(user, password.expose())
            .map_err(classify)?,
        Auth::PrivateKey { path, passphrase } => {
            // libssh2 reports a missing file as a generic key error; say what it is.
            if let Err(e) = std::fs::metadata(path) {
                return Err(setup(format!(
                    "the private key file {} cannot be read: {e}",
                    path.display()
                )));
            }
            session
                .userauth_pubkey_file(user, None, path, passphrase.as_ref().map(|p| p.expose()))
                .map_err(classify)?
        }
        Auth::Agent { socket } => {
            let mut agent = session
                .agent()
                .map_err(|e| setup(format!("libssh2 cannot start an ssh-agent client: {e}")))?;
            if let Some(socket) = socket {
                agent.set_identity_path(socket).map_err(|e| {
                    setup(format!(
                        "cannot use the agent socket {}: {e}",
                        socket.display()
                    ))
                })?;
            }
            let where_ = match socket {
                Some(s) => s.display().to_string(),
                None => "$SSH_AUTH_SOCK".to_string(),
            };
            agent.connect().map_err(|e| {
                setup(format!(
                    "cannot reach the ssh-agent at {where_}: {}",
                    e.message()
                ))
            })?;
            agent
                .list_identities()
                .map_err(|e| setup(format!("cannot list the ssh-agent's keys: {}", e.message())))?;
            let identities = agent
                .identities()
                .map_err(|e| setup(format!("cannot list the ssh-agent's keys: {}", e.message())))?;
            if identities.is_empty() {
                return Err(setup(format!("the ssh-agent at {where_} holds no keys")));
            }
            let mut last = None;
            for identity in &identities {
                match agent.userauth(user, identity) {
                    Ok(()) => {
                        last = None;
                        break;
                    }
                    Err(e) => last = Some(e),
                }
            }
            let _ = agent.disconnect();
            if let Some(e) = last {
                return Err(classify(e));
            }
        }
    }
    if session.authenticated() {
        Ok(())
    } else {
        Err(rejected())
    }
}
