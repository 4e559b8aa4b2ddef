//! [`SshConnection`]: connect, exec with streaming, SFTP upload, on one `ssh2::Session`.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use ssh2::{BlockDirections, Channel, ErrorCode, ExtendedData, MethodType, Session};

use super::jump::Bridge;
use super::known_hosts;
use super::{AbortCheck, Auth, ConnectSpec, Endpoint, RemoteExit, TransportError};
use crate::remote::KILL_SIBLINGS;

// libssh2 error codes we act on (ssh2 does not re-export libssh2-sys, and adding it as a
// dependency for a dozen constants is not worth it). Values from libssh2.h.
const ERR_BANNER_RECV: i32 = -2;
const ERR_BANNER_SEND: i32 = -3;
const ERR_SOCKET_SEND: i32 = -7;
const ERR_TIMEOUT: i32 = -9;
const ERR_SOCKET_DISCONNECT: i32 = -13;
const ERR_FILE: i32 = -16;
const ERR_AUTHENTICATION_FAILED: i32 = -18;
const ERR_PUBLICKEY_UNVERIFIED: i32 = -19;
const ERR_CHANNEL_CLOSED: i32 = -26;
const ERR_CHANNEL_EOF_SENT: i32 = -27;
const ERR_SOCKET_TIMEOUT: i32 = -30;
const ERR_EAGAIN: i32 = -37;
const ERR_SOCKET_RECV: i32 = -43;
const ERR_KEYFILE_AUTH_FAILED: i32 = -48;

/// Key exchanges, fastest first. curve25519 costs about a tenth of the CPU of OpenSSH's
/// default sntrup761 hybrid; the rest stay as fallbacks for older servers.
const KEX_PREFERENCE: &[&str] = &[
    "curve25519-sha256",
    "curve25519-sha256@libssh.org",
    "ecdh-sha2-nistp256",
    "ecdh-sha2-nistp384",
    "ecdh-sha2-nistp521",
];

/// Ciphers, fastest first: AES-GCM uses AES-NI and carries its own MAC, which makes the
/// 40+ MiB keadm upload CPU-cheaper than chacha20-poly1305 on both ends.
const CIPHER_PREFERENCE: &[&str] = &[
    "aes128-gcm@openssh.com",
    "aes256-gcm@openssh.com",
    "aes128-ctr",
    "aes192-ctr",
    "aes256-ctr",
    "chacha20-poly1305@openssh.com",
];

/// The size of each SFTP write: libssh2 waits for every write's acknowledgements before
/// returning, so small writes cost one round trip each (8 KiB writes give 0.3 MiB/s at
/// 20 ms RTT; 1 MiB writes give about 25 MiB/s).
const SFTP_CHUNK: usize = 1 << 20;

/// The longest single poll(2) wait in the exec loop, so keepalives and the deadline are
/// checked even if a wake-up were missed.
const MAX_POLL: Duration = Duration::from_millis(250);

/// One authenticated SSH connection to one node.
///
/// Not shared between threads: create it, use it and drop it on one worker thread.
pub struct SshConnection {
    pub(super) session: Session,
    /// The socket's fd, owned by `session`; kept for poll(2) in the non-blocking loops.
    pub(super) fd: RawFd,
    endpoint: Endpoint,
    fingerprint: String,
    /// Asked between socket waits; true ends a running command like a deadline would
    /// (the operator's second Ctrl-C).
    abort: Option<AbortCheck>,
    /// Declared after `session` so it drops after it: the session's end of the socket
    /// pair closes first, which is what ends the bridge thread that `Bridge` joins.
    _bridge: Option<Bridge>,
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
        let endpoint = &spec.endpoint;
        let mut session = Session::new().map_err(|e| TransportError::Session {
            endpoint: endpoint.clone(),
            what: "creating the SSH session".to_string(),
            message: e.message().to_string(),
            transient: false,
        })?;
        set_preferences(&session);
        let (fd, bridge) = match &spec.jump {
            Some(jump) => {
                let (stream, bridge) = Bridge::open(jump, endpoint, deadline)?;
                let fd = stream.as_raw_fd();
                session.set_tcp_stream(stream);
                (fd, Some(bridge))
            }
            None => {
                let tcp = connect_tcp(spec, deadline)?;
                // Nagle only delays the many small packets of handshake, auth and exec.
                let _ = tcp.set_nodelay(true);
                let fd = tcp.as_raw_fd();
                session.set_tcp_stream(tcp);
                (fd, None)
            }
        };

        let fingerprint = match handshake_and_auth(&mut session, spec, deadline) {
            Ok(fingerprint) => fingerprint,
            Err(e) => {
                // The session holds the bridge's socket end: it must go first, or
                // joining the bridge thread would wait for it forever.
                drop(session);
                drop(bridge);
                return Err(e);
            }
        };

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
            fd,
            endpoint: endpoint.clone(),
            fingerprint,
            abort: None,
            _bridge: bridge,
        })
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The node's host key as `SHA256:<base64>`, as OpenSSH prints it.
    pub fn host_key_fingerprint(&self) -> String {
        self.fingerprint.clone()
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

    /// Makes every later wait ask `check`; once it answers true, the running command is
    /// killed on the node and the call returns `Err(Aborted)`.
    /// `None` removes the check (to run a cleanup command after an abort).
    pub fn set_abort(&mut self, check: Option<AbortCheck>) {
        self.abort = check;
    }

    /// Runs `command` via exec. Streams `stdin` (if any) and then sends EOF, while
    /// streaming the merged stdout and stderr into `output` as it arrives.
    ///
    /// The session runs non-blocking around poll(2), so large input and output in both
    /// directions never deadlock and the deadline is exact. At the deadline the command's
    /// process group is killed on the node (see `kill_remote`), the channel is closed and
    /// `Err(Timeout)` is returned; the connection stays usable.
    ///
    /// `stdin` is read on this thread between socket waits, so it should be a reader
    /// that does not stall (a file or memory); a stalled reader delays the deadline.
    pub fn exec(
        &mut self,
        command: &str,
        stdin: Option<&mut dyn Read>,
        deadline: Instant,
        output: &mut dyn Write,
    ) -> Result<RemoteExit, TransportError> {
        let started = Instant::now();
        let what = "running the command".to_string();
        let _mode = NonBlocking::enter(&self.session);

        let mut channel = self.retry(deadline, started, &what, |s| s.channel_session())?;
        self.retry(deadline, started, &what, |_| {
            channel.handle_extended_data(ExtendedData::Merge)
        })?;
        self.retry(deadline, started, &what, |_| channel.exec(command))?;

        let result = self.pump(&mut channel, stdin, deadline, started, output);
        match result {
            Ok(()) => {}
            Err(TransportError::Timeout { .. }) => {
                self.kill_remote(&mut channel);
                return Err(self.timeout(&what, started));
            }
            Err(TransportError::Aborted { endpoint }) => {
                // The kill must not itself be aborted.
                let check = self.abort.take();
                self.kill_remote(&mut channel);
                self.abort = check;
                return Err(TransportError::Aborted { endpoint });
            }
            Err(e) => return Err(e),
        }
        self.retry(deadline, started, &what, |_| channel.wait_close())?;

        let signal = channel.exit_signal().ok().and_then(|s| s.exit_signal);
        match signal {
            Some(sig) if !sig.is_empty() => Ok(RemoteExit::Signal(sig)),
            _ => {
                let code = channel
                    .exit_status()
                    .map_err(|e| self.session_error(&what, e))?;
                Ok(RemoteExit::Code(code))
            }
        }
    }

    /// Moves stdin to the channel and the channel's output to `output` until the remote
    /// side sends EOF.
    fn pump(
        &self,
        channel: &mut Channel,
        mut stdin: Option<&mut dyn Read>,
        deadline: Instant,
        started: Instant,
        output: &mut dyn Write,
    ) -> Result<(), TransportError> {
        let what = "running the command";
        let mut out_buf = vec![0u8; 64 * 1024];
        let mut in_buf: Vec<u8> = Vec::new();
        let mut in_pos = 0;
        let mut in_done = stdin.is_none();
        let mut eof_sent = false;

        loop {
            let mut progress = self.drain(channel, &mut out_buf, output)?;
            if channel.eof() {
                return Ok(());
            }

            if !eof_sent {
                if in_pos == in_buf.len()
                    && !in_done
                    && let Some(reader) = stdin.as_mut()
                {
                    in_buf.resize(256 * 1024, 0);
                    let n = read_retrying(&mut **reader, &mut in_buf).map_err(|source| {
                        TransportError::LocalRead {
                            endpoint: self.endpoint.clone(),
                            source,
                        }
                    })?;
                    in_buf.truncate(n);
                    in_pos = 0;
                    in_done = n == 0;
                }
                if in_pos < in_buf.len() {
                    match channel.write(&in_buf[in_pos..]) {
                        Ok(n) => {
                            in_pos += n;
                            progress |= n > 0;
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => {
                            // The command stopped reading (it exited, or closed stdin):
                            // what it did not take is not ours to force on it. Keep
                            // reading its output; a dead connection shows up there.
                            log::debug!("{}: stdin no longer accepted: {e}", self.endpoint);
                            in_done = true;
                            in_pos = in_buf.len();
                            eof_sent = true;
                        }
                    }
                } else if in_done {
                    match channel.send_eof() {
                        Ok(()) => {
                            eof_sent = true;
                            progress = true;
                        }
                        Err(e) if is_code(&e, ERR_EAGAIN) => {}
                        Err(e)
                            if is_code(&e, ERR_CHANNEL_CLOSED)
                                || is_code(&e, ERR_CHANNEL_EOF_SENT) =>
                        {
                            eof_sent = true;
                        }
                        Err(e) => return Err(self.session_error(what, e)),
                    }
                }
                // A write can make libssh2 read and queue incoming packets, which the
                // socket no longer shows as readable: read them before waiting.
                progress |= self.drain(channel, &mut out_buf, output)?;
            }

            if !progress {
                self.wait(deadline, started, what)?;
            }
        }
    }

    /// Reads whatever output is available now; true if any was.
    fn drain(
        &self,
        channel: &mut Channel,
        buf: &mut [u8],
        output: &mut dyn Write,
    ) -> Result<bool, TransportError> {
        let mut any = false;
        loop {
            match channel.read(buf) {
                Ok(0) => return Ok(any),
                Ok(n) => {
                    any = true;
                    output
                        .write_all(&buf[..n])
                        .map_err(|source| TransportError::OutputWrite {
                            endpoint: self.endpoint.clone(),
                            source,
                        })?;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(any),
                Err(e) => {
                    return Err(TransportError::Session {
                        endpoint: self.endpoint.clone(),
                        what: "reading the command's output".to_string(),
                        message: e.to_string(),
                        transient: true,
                    });
                }
            }
        }
    }

    /// Best effort after a deadline: kill the command's process group on the node and
    /// close the channel, each bounded by a short timeout so a dead peer cannot hold us.
    ///
    /// The RFC 4254 "signal" request would be the direct way, but ssh2 0.9 does not expose
    /// it (and libssh2 refuses a second request on an exec'd channel). Closing the channel
    /// is not enough: sshd keeps a non-pty command running until it exits. So a second
    /// channel runs [`KILL_SIBLINGS`], which kills the process group of every other
    /// command sshd started on this connection. Exec calls on one connection are
    /// sequential, so that is exactly the timed-out one. Like the signal request, this
    /// runs as the login user: a command it cannot signal (one running under sudo as
    /// another user) survives.
    fn kill_remote(&self, channel: &mut Channel) {
        self.session.set_blocking(true);
        self.session.set_timeout(2000);
        let killed = (|| -> Result<(), ssh2::Error> {
            let mut killer = self.session.channel_session()?;
            killer.exec(KILL_SIBLINGS)?;
            let mut sink = Vec::new();
            let _ = killer.read_to_end(&mut sink);
            killer.wait_close()
        })();
        if let Err(e) = killed {
            log::debug!(
                "{}: could not kill the timed-out command: {e}",
                self.endpoint
            );
        }
        self.session.set_timeout(1000);
        let _ = channel.close();
        let _ = channel.wait_close();
        self.session.set_timeout(0);
        self.session.set_blocking(false);
    }

    /// Uploads `local` to `remote_path` over SFTP (created or truncated, then chmod
    /// `mode`, which the remote umask cannot narrow), in 1 MiB writes. Returns the bytes
    /// sent.
    pub fn upload_sftp(
        &mut self,
        local: &mut dyn Read,
        remote_path: &str,
        mode: u32,
        deadline: Instant,
    ) -> Result<u64, TransportError> {
        let started = Instant::now();
        let what = format!("uploading {remote_path}");
        // Blocking calls, each bounded by the time left; `_timeout` restores "no timeout".
        let _timeout = BlockingTimeout(&self.session);
        let arm = |conn: &SshConnection| -> Result<(), TransportError> {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(conn.timeout(&what, started));
            }
            conn.session.set_timeout(clamp_ms(left));
            Ok(())
        };
        let sftp_err = |conn: &SshConnection, step: &str, e: ssh2::Error| {
            if is_code(&e, ERR_TIMEOUT) {
                conn.timeout(&what, started)
            } else {
                TransportError::Sftp {
                    endpoint: conn.endpoint.clone(),
                    what: format!("{step} {remote_path}"),
                    message: e.message().to_string(),
                }
            }
        };

        arm(self)?;
        let sftp = self.session.sftp().map_err(|e| {
            if is_code(&e, ERR_TIMEOUT) {
                self.timeout(&what, started)
            } else if is_socket_error(&e) {
                self.session_error("starting SFTP", e)
            } else {
                TransportError::SftpUnavailable {
                    endpoint: self.endpoint.clone(),
                    message: e.message().to_string(),
                }
            }
        })?;
        arm(self)?;
        let mut file = sftp
            .open_mode(
                remote_path,
                ssh2::OpenFlags::WRITE | ssh2::OpenFlags::CREATE | ssh2::OpenFlags::TRUNCATE,
                (mode & 0o7777) as i32,
                ssh2::OpenType::File,
            )
            .map_err(|e| sftp_err(self, "opening", e))?;

        let mut buf = vec![0u8; SFTP_CHUNK];
        let mut total = 0u64;
        loop {
            let n = read_full(local, &mut buf).map_err(|source| TransportError::LocalRead {
                endpoint: self.endpoint.clone(),
                source,
            })?;
            if n == 0 {
                break;
            }
            arm(self)?;
            file.write_all(&buf[..n]).map_err(|e| {
                if e.kind() == io::ErrorKind::TimedOut {
                    self.timeout(&what, started)
                } else {
                    TransportError::Sftp {
                        endpoint: self.endpoint.clone(),
                        what: format!("writing {remote_path}"),
                        message: e.to_string(),
                    }
                }
            })?;
            total += n as u64;
        }

        arm(self)?;
        let stat = ssh2::FileStat {
            size: None,
            uid: None,
            gid: None,
            perm: Some(mode & 0o7777),
            atime: None,
            mtime: None,
        };
        file.setstat(stat)
            .map_err(|e| sftp_err(self, "setting the mode of", e))?;
        arm(self)?;
        file.close().map_err(|e| sftp_err(self, "closing", e))?;
        Ok(total)
    }

    /// Calls `op` until it stops returning EAGAIN, waiting on the socket in between.
    fn retry<T>(
        &self,
        deadline: Instant,
        started: Instant,
        what: &str,
        mut op: impl FnMut(&Session) -> Result<T, ssh2::Error>,
    ) -> Result<T, TransportError> {
        loop {
            match op(&self.session) {
                Ok(v) => return Ok(v),
                Err(e) if is_code(&e, ERR_EAGAIN) => self.wait(deadline, started, what)?,
                Err(e) => return Err(self.session_error(what, e)),
            }
        }
    }

    /// Waits until the socket is ready in the direction libssh2 is blocked on, the next
    /// keepalive is due, or the deadline passes (then `Err(Timeout)`).
    fn wait(&self, deadline: Instant, started: Instant, what: &str) -> Result<(), TransportError> {
        let now = Instant::now();
        if now >= deadline {
            return Err(self.timeout(what, started));
        }
        if self.abort.as_ref().is_some_and(|check| check()) {
            return Err(TransportError::Aborted {
                endpoint: self.endpoint.clone(),
            });
        }
        let mut limit = (deadline - now).min(MAX_POLL);
        match self.session.keepalive_send() {
            Ok(secs) if secs > 0 => limit = limit.min(Duration::from_secs(secs.into())),
            Ok(_) => {}
            Err(e) if is_code(&e, ERR_EAGAIN) => {}
            Err(e) => return Err(self.session_error("sending a keepalive", e)),
        }
        let events = match self.session.block_directions() {
            BlockDirections::Inbound => libc::POLLIN,
            BlockDirections::Outbound => libc::POLLOUT,
            BlockDirections::Both => libc::POLLIN | libc::POLLOUT,
            // Blocked on the channel (its window), not the socket: input will unblock it.
            BlockDirections::None => libc::POLLIN,
        };
        let mut pfd = libc::pollfd {
            fd: self.fd,
            events,
            revents: 0,
        };
        let ms = limit.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
        // SAFETY: one valid pollfd for the duration of the call.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc < 0 {
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(TransportError::Session {
                    endpoint: self.endpoint.clone(),
                    what: what.to_string(),
                    message: format!("poll failed: {err}"),
                    transient: false,
                });
            }
        }
        Ok(())
    }

    fn timeout(&self, what: &str, started: Instant) -> TransportError {
        let mut what = what.to_string();
        if let Some(first) = what.get(..1) {
            what = first.to_uppercase() + &what[1..];
        }
        TransportError::Timeout {
            endpoint: self.endpoint.clone(),
            what,
            after: started.elapsed(),
        }
    }

    fn session_error(&self, what: &str, e: ssh2::Error) -> TransportError {
        TransportError::Session {
            endpoint: self.endpoint.clone(),
            what: what.to_string(),
            message: e.message().to_string(),
            transient: is_socket_error(&e),
        }
    }
}

/// Puts the session in non-blocking mode for the guard's lifetime.
struct NonBlocking<'a>(&'a Session);

impl<'a> NonBlocking<'a> {
    fn enter(session: &'a Session) -> NonBlocking<'a> {
        session.set_blocking(false);
        NonBlocking(session)
    }
}

impl Drop for NonBlocking<'_> {
    fn drop(&mut self) {
        self.0.set_blocking(true);
    }
}

/// Restores "no timeout" on blocking calls when an upload ends, however it ends.
struct BlockingTimeout<'a>(&'a Session);

impl Drop for BlockingTimeout<'_> {
    fn drop(&mut self) {
        self.0.set_timeout(0);
    }
}

fn is_code(e: &ssh2::Error, code: i32) -> bool {
    e.code() == ErrorCode::Session(code)
}

/// The connection itself failed (reset, closed, timed out at socket level), as opposed
/// to the node refusing something.
fn is_socket_error(e: &ssh2::Error) -> bool {
    matches!(
        e.code(),
        ErrorCode::Session(
            ERR_BANNER_RECV
                | ERR_BANNER_SEND
                | ERR_SOCKET_SEND
                | ERR_SOCKET_DISCONNECT
                | ERR_SOCKET_TIMEOUT
                | ERR_SOCKET_RECV
        )
    )
}

fn clamp_ms(d: Duration) -> u32 {
    // 0 would mean "no timeout" to libssh2, so never round down to it.
    d.as_millis().clamp(1, u32::MAX as u128) as u32
}

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
fn set_preferences(session: &Session) {
    for (method, preferred) in [
        (MethodType::Kex, KEX_PREFERENCE),
        (MethodType::CryptCs, CIPHER_PREFERENCE),
        (MethodType::CryptSc, CIPHER_PREFERENCE),
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
fn handshake_and_auth(
    session: &mut Session,
    spec: &ConnectSpec,
    deadline: Instant,
) -> Result<String, TransportError> {
    // The host-key types to ask for depend on what the known-hosts file records for
    // this node, and are fixed once the handshake starts.
    let recorded = known_hosts::prefer_recorded_types(session, spec)?;
    session.set_timeout(remaining_ms(spec, deadline, "starting the SSH handshake")?);
    session
        .handshake()
        .map_err(|e| connect_error(spec, deadline, "performing the SSH handshake", e))?;
    let fingerprint = known_hosts::session_fingerprint(session);
    known_hosts::verify(session, spec, &recorded)?;
    session.set_timeout(remaining_ms(spec, deadline, "authenticating")?);
    authenticate(session, spec, deadline)?;
    Ok(fingerprint)
}

fn connect_error(
    spec: &ConnectSpec,
    deadline: Instant,
    phase: &'static str,
    e: ssh2::Error,
) -> TransportError {
    if is_code(&e, ERR_TIMEOUT) || Instant::now() >= deadline {
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

fn authenticate(
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
        if is_code(&e, ERR_TIMEOUT) || Instant::now() >= deadline {
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
        } else if is_code(&e, ERR_AUTHENTICATION_FAILED) || is_code(&e, ERR_PUBLICKEY_UNVERIFIED) {
            rejected()
        } else if is_code(&e, ERR_FILE) || is_code(&e, ERR_KEYFILE_AUTH_FAILED) {
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

/// Fills `buf` as far as the reader allows; 0 only at end of input.
fn read_full(reader: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

fn read_retrying(reader: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match reader.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            other => return other,
        }
    }
}
