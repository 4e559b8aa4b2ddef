//! Reaching a node through a jump host (bastion), as `ssh -J` does.
//!
//! libssh2 can only run a session over a socket, so the target session gets one end of a
//! `UnixStream::pair()`, and a bridge thread moves bytes between the other end and a
//! `direct-tcpip` channel opened on the jump host's session. The jump session is created,
//! used and dropped on that bridge thread only (the one-session-per-thread rule), and the
//! thread ends when either side closes: when the target connection is dropped, or when
//! the jump connection dies.

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use ssh2::{BlockDirections, Channel};

use super::ssh::SshConnection;
use super::{ConnectSpec, Endpoint, TransportError};

/// The bridge thread of one jumped connection. Dropping it waits for the thread, which
/// ends once the target session (which owns the other socket end) is gone.
pub(super) struct Bridge {
    handle: Option<JoinHandle<()>>,
}

impl Drop for Bridge {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

impl Bridge {
    /// Connects to the jump host, opens a channel to `target` and starts relaying.
    /// Returns the socket the target session must use.
    pub(super) fn open(
        jump: &ConnectSpec,
        target: &Endpoint,
        deadline: Instant,
    ) -> Result<(UnixStream, Bridge), TransportError> {
        let wrap = |source: TransportError| TransportError::Jump {
            endpoint: target.clone(),
            jump: jump.endpoint.clone(),
            source: Box::new(source),
        };
        let left = deadline.saturating_duration_since(Instant::now());
        let mut jump = jump.clone();
        // The jump leg spends the target's connect budget, not a budget of its own.
        jump.connect_timeout = jump.connect_timeout.min(left);
        let (ours, theirs) = UnixStream::pair().map_err(|source| {
            wrap(TransportError::Connect {
                endpoint: jump.endpoint.clone(),
                source,
            })
        })?;
        let (tx, rx) = mpsc::channel();
        let target_for_thread = target.clone();
        let handle = thread::Builder::new()
            .name(format!("jump {}", jump.endpoint))
            .spawn(move || {
                let opened = open_channel(&jump, &target_for_thread, deadline);
                match opened {
                    Ok((conn, channel)) => {
                        if tx.send(Ok(())).is_ok() {
                            relay(&conn, channel, theirs);
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            })
            .map_err(|source| {
                wrap(TransportError::Connect {
                    endpoint: target.clone(),
                    source,
                })
            })?;
        // A second of grace: the thread's own deadlines fire at `deadline` and it then
        // reports the precise reason.
        let wait = deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(1);
        match rx.recv_timeout(wait) {
            Ok(Ok(())) => Ok((
                ours,
                Bridge {
                    handle: Some(handle),
                },
            )),
            Ok(Err(e)) => {
                let _ = handle.join();
                Err(wrap(e))
            }
            // The thread finishes on its own once its deadlines pass; it is not joined
            // here so this call returns on time.
            Err(_) => Err(TransportError::ConnectTimeout {
                endpoint: target.clone(),
                phase: "connecting through the jump host",
                after: left,
            }),
        }
    }
}

fn open_channel(
    jump: &ConnectSpec,
    target: &Endpoint,
    deadline: Instant,
) -> Result<(SshConnection, Channel), TransportError> {
    let conn = SshConnection::connect(jump)?;
    let left = deadline.saturating_duration_since(Instant::now());
    conn.session
        .set_timeout(left.as_millis().clamp(1, u32::MAX as u128) as u32);
    let channel = conn
        .session
        .channel_direct_tcpip(&target.host, target.port, None)
        .map_err(|e| TransportError::Session {
            endpoint: jump.endpoint.clone(),
            what: format!("opening a forwarded connection to {target}"),
            message: e.message().to_string(),
            // "connect failed" is the target not (yet) listening; other reasons, such
            // as "administratively prohibited" (AllowTcpForwarding no), are final.
            transient: e.message().contains("connect failed") || e.message().contains("Timed out"),
        })?;
    conn.session.set_timeout(0);
    Ok((conn, channel))
}

/// Moves bytes both ways until either side closes or fails.
fn relay(conn: &SshConnection, mut channel: Channel, mut sock: UnixStream) {
    if sock.set_nonblocking(true).is_err() {
        return;
    }
    conn.session.set_blocking(false);
    let mut buf = vec![0u8; 64 * 1024];
    let mut to_remote: Vec<u8> = Vec::new();
    let mut to_local: Vec<u8> = Vec::new();
    let mut sock_eof = false;
    loop {
        let mut progress = false;

        if to_remote.is_empty() && !sock_eof {
            match sock.read(&mut buf) {
                // The target session is gone: nothing more to relay.
                Ok(0) => sock_eof = true,
                Ok(n) => to_remote.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => break,
            }
        }
        if sock_eof && to_remote.is_empty() {
            break;
        }
        if !to_remote.is_empty() {
            match channel.write(&to_remote) {
                Ok(n) => {
                    to_remote.drain(..n);
                    progress |= n > 0;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => break,
            }
        }

        if to_local.is_empty() {
            match channel.read(&mut buf) {
                Ok(0) if channel.eof() => break,
                Ok(0) => {}
                Ok(n) => to_local.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => break,
            }
        }
        if !to_local.is_empty() {
            match sock.write(&to_local) {
                Ok(n) => {
                    to_local.drain(..n);
                    progress |= n > 0;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => break,
            }
        }

        if !progress {
            let _ = conn.session.keepalive_send();
            let mut jump_events = match conn.session.block_directions() {
                BlockDirections::Outbound => libc::POLLOUT,
                BlockDirections::Both => libc::POLLIN | libc::POLLOUT,
                _ => libc::POLLIN,
            };
            if !to_local.is_empty() && to_remote.is_empty() {
                // Backpressure from the target session: waiting for the socket pair to
                // drain. Polling the jump socket's pending input would only spin.
                jump_events = 0;
            }
            let mut sock_events = 0;
            if to_remote.is_empty() && !sock_eof {
                sock_events |= libc::POLLIN;
            }
            if !to_local.is_empty() {
                sock_events |= libc::POLLOUT;
            }
            let mut fds = [
                libc::pollfd {
                    fd: conn.fd,
                    events: jump_events,
                    revents: 0,
                },
                libc::pollfd {
                    fd: sock.as_raw_fd(),
                    events: sock_events,
                    revents: 0,
                },
            ];
            // SAFETY: two valid pollfds for the duration of the call. The 250 ms cap
            // covers wake-ups libssh2's internal buffering could hide.
            unsafe { libc::poll(fds.as_mut_ptr(), 2, 250) };
        }
    }
    let _ = channel.close();
}
