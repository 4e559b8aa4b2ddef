//! Reaching nodes through a jump host (bastion), as `ssh -J` with a ControlMaster does:
//! every node behind the same jump host rides one shared, authenticated connection to
//! it (a "hub"), each node a `direct-tcpip` channel on it.
//!
//! libssh2 can only run a session over a socket, so a node's session gets one end of a
//! `UnixStream::pair()` and the hub relays the other end to the node's channel. libssh2
//! sessions are single-threaded, so one driver thread per hub (`driver`) owns the jump
//! session and every channel on it; node workers reach it only through its request queue
//! and a wake-up socket that its poll(2) loop watches. Hubs are found in a process-wide
//! registry by the jump host's identity (address, user, auth, host-key policy and the
//! chain beyond it), created by the first node that needs one, and end once idle (or at
//! the end of the run, [`close_all`]).
//!
//! This module works on the small [`JumpSession`] trait and so needs nothing of the SSH
//! engine's; the engine gives it a way to connect.

mod driver;

use std::collections::VecDeque;
use std::io::Write;
use std::os::fd::BorrowedFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, MutexGuard, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use ssh2::Session;

use super::{Auth, ConnectSpec, Endpoint, TransportError};

/// The jump host's side: its session and the socket under it. The SSH engine implements
/// it for its connection.
pub(super) trait JumpSession: Send + 'static {
    fn session(&self) -> &Session;
    fn socket(&self) -> BorrowedFd<'_>;
    /// Whether `e` means the connection itself is gone (reset, closed), not a refusal.
    fn is_lost(&self, e: &ssh2::Error) -> bool;
}

/// Opens the shared connection to a jump host; called on the hub's driver thread, once,
/// and once more if that connection dies.
pub(super) type Connect<J> = Box<dyn FnMut() -> Result<J, TransportError> + Send>;

/// A node's request to the driver: a channel to `target`, answered by `deadline` (or
/// given up by the node).
struct Request {
    target: Endpoint,
    deadline: Instant,
    reply: mpsc::SyncSender<Result<UnixStream, TransportError>>,
}

/// What a hub's workers and its driver share.
struct Shared {
    jump: Endpoint,
    state: Mutex<State>,
    /// Written to (one byte) after a request is queued or the hub is told to close; the
    /// driver's poll(2) watches the other end.
    wake: UnixStream,
    thread: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Default)]
struct State {
    requests: VecDeque<Request>,
    /// Channels open plus requests not yet answered, for "least channels first".
    load: usize,
    /// Set by the driver as it leaves (idle, or told to by [`close_all`]); a closed hub
    /// takes no more requests.
    closed: bool,
    /// Set by [`close_all`]: the driver closes its channels and ends.
    stop: bool,
    /// Whether the driver holds a live connection, for the message of a node that gave
    /// up waiting.
    connected: bool,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wake(&self) {
        // A full socket buffer already holds a wake-up; nothing more is needed.
        let _ = (&self.wake).write(&[1]);
    }
}

/// The identity of a jump host's connection: everything that decides whether two nodes
/// may share it. A digest, so secrets are compared without being held or shown as text.
#[derive(Clone, Copy, PartialEq, Eq)]
struct HubKey([u8; 32]);

impl HubKey {
    fn of(spec: &ConnectSpec) -> HubKey {
        let mut hash = Sha256::new();
        let mut hop = Some(spec);
        while let Some(spec) = hop {
            let field = |hash: &mut Sha256, bytes: &[u8]| {
                hash.update((bytes.len() as u64).to_be_bytes());
                hash.update(bytes);
            };
            field(&mut hash, spec.endpoint.to_string().as_bytes());
            field(&mut hash, spec.username.as_bytes());
            match &spec.auth {
                Auth::Password(p) => {
                    field(&mut hash, b"password");
                    field(&mut hash, p.expose().as_bytes());
                }
                Auth::PrivateKey { path, passphrase } => {
                    field(&mut hash, b"key");
                    field(&mut hash, path.as_os_str().as_encoded_bytes());
                    field(
                        &mut hash,
                        passphrase
                            .as_ref()
                            .map_or(&b""[..], |p| p.expose().as_bytes()),
                    );
                }
                Auth::Agent { socket } => {
                    field(&mut hash, b"agent");
                    field(
                        &mut hash,
                        socket
                            .as_ref()
                            .map_or(&b""[..], |s| s.as_os_str().as_encoded_bytes()),
                    );
                }
            }
            field(&mut hash, format!("{:?}", spec.host_key_policy).as_bytes());
            field(&mut hash, spec.known_hosts.as_os_str().as_encoded_bytes());
            hop = spec.jump.as_deref();
        }
        HubKey(hash.finalize().into())
    }
}

/// Every live hub, by key; up to `connections` per key.
static HUBS: Mutex<Vec<(HubKey, Arc<Shared>)>> = Mutex::new(Vec::new());

fn hubs() -> MutexGuard<'static, Vec<(HubKey, Arc<Shared>)>> {
    HUBS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Opens a channel from the jump host `jump` to `target` on a shared connection and
/// returns the socket the target's session must run over. `connections` bounds the
/// shared connections to this jump host (the least loaded is used, a new one opened while
/// fewer exist and every one is busy); `connect` opens one, on its driver thread.
pub(super) fn open<J: JumpSession>(
    jump: &ConnectSpec,
    connections: usize,
    target: &Endpoint,
    deadline: Instant,
    connect: impl FnOnce() -> Connect<J>,
) -> Result<UnixStream, TransportError> {
    let wrap = |source: TransportError| TransportError::Jump {
        endpoint: target.clone(),
        jump: jump.endpoint.clone(),
        source: Box::new(source),
    };
    let left = deadline.saturating_duration_since(Instant::now());
    let (tx, rx) = mpsc::sync_channel(1);
    let request = Request {
        target: target.clone(),
        deadline,
        reply: tx,
    };
    let hub: Arc<Shared> = {
        let key = HubKey::of(jump);
        let mut hubs = hubs();
        let mine = hubs
            .iter()
            .filter(|(k, shared)| *k == key && !shared.state().closed)
            .map(|(_, shared)| (shared.state().load, Arc::clone(shared)))
            .min_by_key(|(load, _)| *load);
        let count = hubs.iter().filter(|(k, _)| *k == key).count();
        let hub = match mine {
            Some((load, hub)) if load == 0 || count >= connections.max(1) => hub,
            _ => {
                let hub = driver::start(jump.endpoint.clone(), connect()).map_err(|source| {
                    wrap(TransportError::Connect {
                        endpoint: jump.endpoint.clone(),
                        source,
                    })
                })?;
                hubs.push((key, Arc::clone(&hub)));
                hub
            }
        };
        // Queued under the registry's lock: a driver leaves the registry under it too,
        // so a request never lands on a hub that has just decided to end.
        let mut state = hub.state();
        state.requests.push_back(request);
        state.load += 1;
        drop(state);
        hub
    };
    hub.wake();
    // A second of grace: the driver's own deadlines fire at `deadline` and it then
    // reports the precise reason.
    let wait = deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(1);
    match rx.recv_timeout(wait) {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) => Err(wrap(e)),
        // A late answer finds no receiver and its channel is closed.
        Err(_) => Err(wrap(TransportError::ConnectTimeout {
            endpoint: jump.endpoint.clone(),
            phase: if hub.state().connected {
                "waiting for it to open a forwarded connection to the node"
            } else {
                "waiting for the shared connection to it to be set up"
            },
            after: left,
        })),
    }
}

/// Ends every hub: their channels are closed and their connections to the jump hosts
/// said goodbye to, and their threads joined. For the end of a run, so that no thread
/// outlives it waiting on a socket.
pub fn close_all() {
    let all: Vec<Arc<Shared>> = hubs().drain(..).map(|(_, shared)| shared).collect();
    for shared in &all {
        let mut state = shared.state();
        state.stop = true;
        state.closed = true;
        drop(state);
        shared.wake();
    }
    for shared in all {
        let handle = shared
            .thread
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(handle) = handle {
            let _ = handle.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::redact::Secret;
    use crate::transport::HostKeyPolicy;

    fn spec(host: &str, password: &str) -> ConnectSpec {
        ConnectSpec {
            endpoint: Endpoint::new(host, 22),
            username: "jump".into(),
            auth: Auth::Password(Secret::new(password)),
            host_key_policy: HostKeyPolicy::AcceptNew,
            known_hosts: "/kh".into(),
            connect_timeout: Duration::from_secs(10),
            keepalive_secs: 15,
            jump: None,
            jump_connections: 1,
            handshakes_per_host: 8,
        }
    }

    #[test]
    fn nodes_share_a_jump_connection_only_with_the_same_host_login_policy_and_chain() {
        let key = HubKey::of(&spec("10.0.0.1", "pw"));
        let mut same = spec("10.0.0.1", "pw");
        // Deadlines are the node's, not the connection's identity.
        same.connect_timeout = Duration::from_secs(3);
        assert!(HubKey::of(&same) == key);

        let mut others = vec![spec("10.0.0.2", "pw"), spec("10.0.0.1", "other")];
        let mut user = spec("10.0.0.1", "pw");
        user.username = "root".into();
        others.push(user);
        let mut policy = spec("10.0.0.1", "pw");
        policy.host_key_policy = HostKeyPolicy::Off;
        others.push(policy);
        let mut chained = spec("10.0.0.1", "pw");
        chained.jump = Some(Box::new(spec("10.0.0.9", "pw")));
        others.push(chained);
        let mut key_file = spec("10.0.0.1", "pw");
        key_file.auth = Auth::PrivateKey {
            path: "/k".into(),
            passphrase: None,
        };
        others.push(key_file);
        for other in &others {
            assert!(HubKey::of(other) != key, "{other:?}");
        }
    }
}
