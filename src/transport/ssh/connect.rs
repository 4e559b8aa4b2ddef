//! Opening a connection: the socket (direct TCP, or a jump host's forwarded channel), the
//! algorithm preferences, the handshake and the host-key check, within one deadline.

use std::io;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Instant;

use ssh2::{MethodType, Session};

use super::SshConnection;
use super::auth::authenticate;
use super::errors::{clamp_ms, handshake_error};
use crate::transport::known_hosts;
use crate::transport::{ConnectSpec, TransportError};

/// Key exchanges, fastest first. curve25519 costs about a tenth of the CPU of OpenSSH's
/// default sntrup761 hybrid; the rest stay as fallbacks for older servers.
const KEX_PREFERENCE: &[&str] = &[
    "curve25519-sha256",
    "curve25519-sha256@libssh.org",
    "ecdh-sha2-nistp256",
    "ecdh-sha2-nistp384",
    "ecdh-sha2-nistp521",
];

/// Ciphers, cheapest for the control host first, on a CPU with AES instructions (AES-NI
/// and PCLMULQDQ, or ARMv8's AES and PMULL). libssh2 is built from vendor/libssh2-sys,
/// patched so that OpenSSL encrypts each packet's blocks in one call: AES-GCM then runs at
/// OpenSSL's bulk speed, where stock libssh2 made one call per 16-byte block and its
/// chacha20-poly1305 is its own portable C. bench/ciphers.sh, control-host CPU-s per GiB
/// sent: see bench/README.md (issue 47); AES-GCM is also what sshd decrypts the cheapest
/// (chacha20 costs it about 30 % more). The rest stay as fallbacks.
const CIPHER_PREFERENCE_AES: &[&str] = &[
    "aes128-gcm@openssh.com",
    "aes256-gcm@openssh.com",
    "chacha20-poly1305@openssh.com",
    "aes128-ctr",
    "aes192-ctr",
    "aes256-ctr",
];

/// Without AES instructions, AES in software costs more than libssh2's own
/// chacha20-poly1305, so chacha20 goes first, as in OpenSSH's own order.
const CIPHER_PREFERENCE_NO_AES: &[&str] = &[
    "chacha20-poly1305@openssh.com",
    "aes128-ctr",
    "aes192-ctr",
    "aes256-ctr",
    "aes128-gcm@openssh.com",
    "aes256-gcm@openssh.com",
];

/// The cipher order for this machine's CPU.
fn cipher_preference() -> &'static [&'static str] {
    if cpu_has_aes() {
        CIPHER_PREFERENCE_AES
    } else {
        CIPHER_PREFERENCE_NO_AES
    }
}

/// Whether the CPU encrypts AES-GCM in hardware: AES rounds and the carry-less multiply
/// GHASH needs.
fn cpu_has_aes() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("aes")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("aes")
            && std::arch::is_aarch64_feature_detected!("pmull")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

/// The socket the session runs over: a TCP connection to the node, or, with a jump host,
/// one end of a socket pair whose other end the jump host's shared connection relays.
pub(super) fn open_socket(
    spec: &ConnectSpec,
    deadline: Instant,
) -> Result<Arc<OwnedFd>, TransportError> {
    match &spec.jump {
        Some(jump) => {
            let stream = crate::transport::jump::open(
                jump,
                spec.jump_connections,
                &spec.endpoint,
                deadline,
                || {
                    // The hub's own connection: a chain beyond this jump host goes through
                    // that host's hub in turn, with the same number of connections.
                    let mut jump = jump.as_ref().clone();
                    jump.jump_connections = spec.jump_connections;
                    Box::new(move || SshConnection::connect(&jump))
                },
            )?;
            Ok(Arc::new(OwnedFd::from(stream)))
        }
        None => {
            let tcp = connect_tcp(spec, deadline)?;
            // Nagle only delays the many small packets of handshake, auth and exec.
            let _ = tcp.set_nodelay(true);
            Ok(Arc::new(OwnedFd::from(tcp)))
        }
    }
}

/// The time left until `deadline` as libssh2's millisecond timeout, or `ConnectTimeout`
/// naming `phase` when none is left.
fn remaining_ms(
    spec: &ConnectSpec,
    deadline: Instant,
    phase: &'static str,
) -> Result<u32, TransportError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(TransportError::ConnectTimeout {
            endpoint: spec.endpoint.clone(),
            phase,
            after: spec.connect_timeout,
        });
    }
    Ok(clamp_ms(left))
}

fn connect_tcp(spec: &ConnectSpec, deadline: Instant) -> Result<TcpStream, TransportError> {
    let endpoint = &spec.endpoint;
    let addrs: Vec<SocketAddr> = (endpoint.host.as_str(), endpoint.port)
        .to_socket_addrs()
        .map_err(|source| TransportError::Resolve {
            endpoint: endpoint.clone(),
            source,
        })?
        .collect();
    let mut last: Option<io::Error> = None;
    for addr in &addrs {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match TcpStream::connect_timeout(addr, left) {
            Ok(stream) => return Ok(stream),
            Err(e) => {
                log::debug!("{endpoint}: connecting to {addr} failed: {e}");
                last = Some(e);
            }
        }
    }
    Err(match last {
        None if addrs.is_empty() => TransportError::Resolve {
            endpoint: endpoint.clone(),
            source: io::Error::new(io::ErrorKind::NotFound, "the name has no addresses"),
        },
        Some(e) if e.kind() == io::ErrorKind::ConnectionRefused => TransportError::Refused {
            endpoint: endpoint.clone(),
        },
        Some(e)
            if !matches!(
                e.kind(),
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
            ) =>
        {
            TransportError::Connect {
                endpoint: endpoint.clone(),
                source: e,
            }
        }
        _ => TransportError::ConnectTimeout {
            endpoint: endpoint.clone(),
            phase: "opening the TCP connection",
            after: spec.connect_timeout,
        },
    })
}

/// Moves the preferred algorithms to the front of what this libssh2 build supports,
/// keeping every other supported one as a fallback.
pub(super) fn set_preferences(session: &Session) {
    for (method, preferred) in [
        (MethodType::Kex, KEX_PREFERENCE),
        (MethodType::CryptCs, cipher_preference()),
        (MethodType::CryptSc, cipher_preference()),
    ] {
        let Ok(supported) = session.supported_algs(method) else {
            continue;
        };
        let mut order: Vec<&str> = preferred
            .iter()
            .copied()
            .filter(|p| supported.contains(p))
            .collect();
        order.extend(supported.iter().copied().filter(|s| !preferred.contains(s)));
        if let Err(e) = session.method_pref(method, &order.join(",")) {
            log::debug!("libssh2 refused the algorithm preference {order:?}: {e}");
        }
    }
}

/// Handshake, host-key check and authentication; returns the host key fingerprint.
pub(super) fn handshake_and_auth(
    session: &mut Session,
    spec: &ConnectSpec,
    deadline: Instant,
) -> Result<String, TransportError> {
    // The host-key types to ask for depend on what the known-hosts file records for
    // this node, and are fixed once the handshake starts.
    let recorded = known_hosts::prefer_recorded_types(session, spec)?;
    session.set_timeout(remaining_ms(spec, deadline, "starting the SSH handshake")?);
    if let Err(e) = session.handshake() {
        return Err(handshake_error(session, spec, deadline, e));
    }
    let fingerprint = known_hosts::session_fingerprint(session);
    known_hosts::verify(session, spec, &recorded)?;
    session.set_timeout(remaining_ms(spec, deadline, "authenticating")?);
    authenticate(session, spec, deadline)?;
    Ok(fingerprint)
}
