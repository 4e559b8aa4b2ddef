//! Reaching a node through a jump host (bastion), as `ssh -J` does.
//!
//! libssh2 can only run a session over a socket, so the target session gets one end of a
//! `UnixStream::pair()`, and a bridge thread moves bytes between the other end and a
//! `direct-tcpip` channel opened on the jump host's session. The jump session is created,
//! used and dropped on that bridge thread only (the one-session-per-thread rule), and the
//! thread ends when either side closes: when the target connection is dropped, or when
//! the jump connection dies.

use std::io::{self, Read, Write};
use std::os::fd::BorrowedFd;
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use ssh2::{Channel, Session};

use super::{Endpoint, TransportError, socket};

/// The jump host's side of a bridge: its session and the socket under it. The SSH engine
/// implements it for its connection, so this module needs nothing of the engine's.
pub(super) trait JumpSession {
    fn session(&self) -> &Session;
    fn socket(&self) -> BorrowedFd<'_>;
}

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
    /// Starts the bridge thread, which calls `open_leg` (connect to the jump host and
    /// open a forwarded channel to `target`) and then relays. Returns the socket the
    /// target session must use. `open_leg` runs on the bridge thread, so the jump
    /// session is created, used and dropped there.
    pub(super) fn open<J: JumpSession + 'static>(
        jump: &Endpoint,
        target: &Endpoint,
        deadline: Instant,
        open_leg: impl FnOnce() -> Result<(J, Channel), TransportError> + Send + 'static,
    ) -> Result<(UnixStream, Bridge), TransportError> {
        let wrap = |source: TransportError| TransportError::Jump {
            endpoint: target.clone(),
            jump: jump.clone(),
            source: Box::new(source),
        };
        let left = deadline.saturating_duration_since(Instant::now());
        let (ours, theirs) = UnixStream::pair().map_err(|source| {
            wrap(TransportError::Connect {
                endpoint: jump.clone(),
                source,
            })
        })?;
        let (tx, rx) = mpsc::channel();
        let handle = thread::Builder::new()
            .name(format!("jump {jump}"))
            .spawn(move || match open_leg() {
                Ok((conn, channel)) => {
                    if tx.send(Ok(())).is_ok() {
                        relay(&conn, channel, theirs);
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
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

/// Moves bytes both ways until either side closes or fails.
fn relay(conn: &impl JumpSession, mut channel: Channel, mut sock: UnixStream) {
    if sock.set_nonblocking(true).is_err() {
        return;
    }
    conn.session().set_blocking(false);
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
            let _ = conn.session().keepalive_send();
            let mut jump_events = socket::wanted(conn.session());
            if !to_local.is_empty() && to_remote.is_empty() {
                // Backpressure from the target session: waiting for the socket pair to
                // drain. Polling the jump socket's pending input would only spin.
                jump_events = PollFlags::empty();
            }
            let mut sock_events = PollFlags::empty();
            if to_remote.is_empty() && !sock_eof {
                sock_events |= PollFlags::IN;
            }
            if !to_local.is_empty() {
                sock_events |= PollFlags::OUT;
            }
            let mut fds = [
                PollFd::from_borrowed_fd(conn.socket(), jump_events),
                PollFd::new(&sock, sock_events),
            ];
            // The 250 ms cap covers wake-ups libssh2's internal buffering could hide.
            let _ = socket::wait(&mut fds, Duration::from_millis(250));
        }
    }
    let _ = channel.close();
}
