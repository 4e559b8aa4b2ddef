//! Running a command: exec on a fresh channel, stdin in and merged output out in one
//! non-blocking loop around poll(2), the deadline and the operator's abort checked
//! between waits, and the command killed on the node when either ends it.

use std::cell::Cell;
use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use libssh2_sys::{
    LIBSSH2_ERROR_CHANNEL_CLOSED, LIBSSH2_ERROR_CHANNEL_EOF_SENT, LIBSSH2_ERROR_EAGAIN,
};
use rustix::event::PollFd;
use ssh2::{Channel, ExtendedData, Session};

use super::SshConnection;
use super::errors::{is_code, session_error, timeout};
use crate::remote::KILL_SIBLINGS;
use crate::transport::{AbortCheck, Connection, RemoteExit, TransportError, socket};

/// The longest single poll(2) wait in the exec loop, so keepalives and the deadline are
/// checked even if a wake-up were missed.
const MAX_POLL: Duration = Duration::from_millis(250);

/// The most output one turn of the exec loop reads before it checks the deadline and the
/// abort again: a node that floods faster than we read cannot keep us in the read.
const READ_PER_TURN: usize = 256 * 1024;

/// The kill after a deadline or an abort: how long it may take, and how much of the kill
/// command's output it reads (it prints nothing; a node that answers with a flood gets
/// this much read and no more). Then closing the timed-out channel gets [`CLOSE_TIME`].
const KILL_TIME: Duration = Duration::from_millis(1000);
const KILL_OUTPUT_CAP: u64 = 64 * 1024;
const CLOSE_TIME: Duration = Duration::from_millis(500);

impl Connection for SshConnection {
    /// Runs `command` via exec. Streams `stdin` (if any) and then sends EOF, while
    /// streaming the merged stdout and stderr into `output` as it arrives.
    ///
    /// The session runs non-blocking around poll(2), so large input and output in both
    /// directions never deadlock and the deadline is exact. At the deadline the command's
    /// process group is killed on the node (see `kill_remote`), unless the caller asked
    /// to stop it itself (`leave_at_deadline`), the channel is closed and `Err(Timeout)`
    /// is returned; the connection stays usable.
    ///
    /// `stdin` is read on this thread between socket waits, so it should be a reader
    /// that does not stall (a file or memory); a stalled reader delays the deadline. One
    /// that answers `WouldBlock` is asked again after the next output.
    fn exec_until(
        &mut self,
        command: &str,
        stdin: Option<&mut dyn Read>,
        deadline: &Cell<Instant>,
        output: &mut dyn Write,
    ) -> Result<RemoteExit, TransportError> {
        let started = Instant::now();
        let what = "running the command";
        let _mode = NonBlocking::enter(&self.session);

        let mut channel = self.retry(deadline, started, what, |s| s.channel_session())?;
        self.retry(deadline, started, what, |_| {
            channel.handle_extended_data(ExtendedData::Merge)
        })?;
        self.retry(deadline, started, what, |_| channel.exec(command))?;

        let result = self.pump(&mut channel, stdin, deadline, started, output);
        match result {
            Ok(()) => {}
            Err(TransportError::Timeout { .. }) if self.leave_at_deadline => {
                // Kept open, unread, until the caller has stopped the command: its output
                // waits in the channel's window meanwhile.
                self.left = Some(channel);
                return Err(timeout(&self.endpoint, what, started));
            }
            Err(TransportError::Timeout { .. }) => {
                self.kill_remote(&mut channel);
                return Err(timeout(&self.endpoint, what, started));
            }
            Err(TransportError::Aborted { endpoint }) => {
                // The kill must not itself be aborted.
                let check = self.abort.take();
                self.kill_remote(&mut channel);
                self.abort = check;
                return Err(TransportError::Aborted { endpoint });
            }
            // We stopped reading its output: the command must not run on unwatched.
            Err(
                e @ (TransportError::OutputWrite { .. } | TransportError::EndlessOutput { .. }),
            ) => {
                self.kill_remote(&mut channel);
                return Err(e);
            }
            Err(e) => return Err(e),
        }
        self.retry(deadline, started, what, |_| channel.wait_close())?;

        match signal_exit(&channel) {
            Some(exit) => Ok(exit),
            None => {
                let code = channel
                    .exit_status()
                    .map_err(|e| session_error(&self.endpoint, what, e))?;
                Ok(RemoteExit::Code(code))
            }
        }
    }

    /// Once `check` answers true, the running command is killed on the node and `exec`
    /// returns `Err(Aborted)`.
    fn set_abort(&mut self, check: Option<AbortCheck>) {
        self.abort = check;
    }

    fn leave_at_deadline(&mut self, leave: bool) {
        self.leave_at_deadline = leave;
    }

    fn kill_left(&mut self) {
        if let Some(mut channel) = self.left.take() {
            let _mode = NonBlocking::enter(&self.session);
            self.kill_remote(&mut channel);
        }
    }

    fn finish_left(
        &mut self,
        output: &mut dyn Write,
        deadline: Instant,
    ) -> Result<Option<RemoteExit>, TransportError> {
        let Some(mut channel) = self.left.take() else {
            return Ok(None);
        };
        let what = "reading the stopped command's last output";
        let started = Instant::now();
        let _mode = NonBlocking::enter(&self.session);
        let deadline = Cell::new(deadline);
        let pumped = self.pump(&mut channel, None, &deadline, started, output);
        deadline.set(Instant::now() + CLOSE_TIME);
        let _ = self.retry(&deadline, started, what, |_| channel.close());
        let closed = self.retry(&deadline, started, what, |_| channel.wait_close());
        pumped?;
        closed?;
        Ok(Some(signal_exit(&channel).unwrap_or_else(|| {
            RemoteExit::Code(channel.exit_status().unwrap_or(-1))
        })))
    }

    fn host_key_fingerprint(&self) -> String {
        self.fingerprint.clone()
    }

    fn host_key(&self) -> Option<String> {
        let (blob, _) = self.session.host_key()?;
        // The blob starts with its type's name as an SSH string.
        let len = u32::from_be_bytes(blob.get(..4)?.try_into().ok()?) as usize;
        let name = std::str::from_utf8(blob.get(4..4 + len)?).ok()?;
        use base64::Engine;
        Some(format!(
            "{name} {}",
            base64::engine::general_purpose::STANDARD.encode(blob)
        ))
    }
}

impl SshConnection {
    /// Moves stdin to the channel and the channel's output to `output` until the remote
    /// side sends EOF.
    fn pump(
        &self,
        channel: &mut Channel,
        mut stdin: Option<&mut dyn Read>,
        deadline: &Cell<Instant>,
        started: Instant,
        output: &mut dyn Write,
    ) -> Result<(), TransportError> {
        let what = "running the command";
        let mut out_buf = vec![0u8; 64 * 1024];
        // Allocated once, only with a stdin; `in_buf[in_pos..in_end]` is still to send.
        let mut in_buf = vec![0u8; if stdin.is_some() { 256 * 1024 } else { 0 }];
        let (mut in_pos, mut in_end) = (0, 0);
        let mut in_done = stdin.is_none();
        let mut eof_sent = false;

        loop {
            // Every turn, whatever the node sends: a flood leaves no turn idle, so waiting
            // for one to check would let it hold the deadline and Ctrl-C off.
            self.check(deadline, started, what)?;
            let mut progress = self.drain(channel, &mut out_buf, output)?;
            if channel.eof() {
                return Ok(());
            }

            if !eof_sent {
                if in_pos == in_end
                    && !in_done
                    && let Some(reader) = stdin.as_mut()
                {
                    (in_pos, in_end) = (0, 0);
                    match read_retrying(&mut **reader, &mut in_buf) {
                        Ok(n) => {
                            in_end = n;
                            in_done = n == 0;
                        }
                        // Nothing to send until more output has been read (see
                        // `Connection::exec`): wait on the socket like any idle turn.
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(source) => {
                            return Err(TransportError::LocalRead {
                                endpoint: self.endpoint.clone(),
                                source,
                            });
                        }
                    }
                }
                if in_pos < in_end {
                    match channel.write(&in_buf[in_pos..in_end]) {
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
                            in_pos = in_end;
                            eof_sent = true;
                        }
                    }
                } else if in_done {
                    match channel.send_eof() {
                        Ok(()) => {
                            eof_sent = true;
                            progress = true;
                        }
                        Err(e) if is_code(&e, LIBSSH2_ERROR_EAGAIN) => {}
                        Err(e)
                            if is_code(&e, LIBSSH2_ERROR_CHANNEL_CLOSED)
                                || is_code(&e, LIBSSH2_ERROR_CHANNEL_EOF_SENT) =>
                        {
                            eof_sent = true;
                        }
                        Err(e) => return Err(session_error(&self.endpoint, what, e)),
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

    /// Reads the output available now, at most [`READ_PER_TURN`] bytes; true if any was.
    fn drain(
        &self,
        channel: &mut Channel,
        buf: &mut [u8],
        output: &mut dyn Write,
    ) -> Result<bool, TransportError> {
        let mut read = 0;
        while read < READ_PER_TURN {
            match channel.read(buf) {
                Ok(0) => break,
                Ok(n) => {
                    read += n;
                    output
                        .write_all(&buf[..n])
                        .map_err(|source| TransportError::output_write(&self.endpoint, source))?;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
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
        Ok(read > 0)
    }

    /// Best effort after a deadline, an abort or output we refused: kill the command's
    /// process group on the node and close the channel, within [`KILL_TIME`] and
    /// [`CLOSE_TIME`] whatever the node does, so a dead or hostile peer cannot hold us.
    ///
    /// The RFC 4254 "signal" request would be the direct way, but ssh2 0.9 does not expose
    /// it (and libssh2 refuses a second request on an exec'd channel). Closing the channel
    /// is not enough: sshd keeps a non-pty command running until it exits. So a second
    /// channel runs [`KILL_SIBLINGS`], which kills the process group of every other
    /// command sshd started on this connection. Exec calls on one connection are
    /// sequential, so that is exactly the timed-out one. Like the signal request, this
    /// runs as the login user: a command it cannot signal (one running under sudo as
    /// another user) survives.
    ///
    /// It runs in the same non-blocking loop as any command, so the abort (where one is
    /// set) and its own deadline hold on every turn, and what the kill command prints is
    /// read up to [`KILL_OUTPUT_CAP`] and dropped.
    fn kill_remote(&self, channel: &mut Channel) {
        let what = "killing the command on the node";
        let started = Instant::now();
        let deadline = Cell::new(started + KILL_TIME);
        let killed = (|| {
            let mut killer = self.retry(&deadline, started, what, |s| s.channel_session())?;
            self.retry(&deadline, started, what, |_| killer.exec(&KILL_SIBLINGS))?;
            let mut sink = Dropped::up_to(KILL_OUTPUT_CAP);
            let pumped = self.pump(&mut killer, None, &deadline, started, &mut sink);
            deadline.set(Instant::now() + CLOSE_TIME);
            let _ = self.retry(&deadline, started, what, |_| killer.close());
            pumped
        })();
        if let Err(e) = killed {
            log::debug!(
                "{}: could not kill the timed-out command: {e}",
                self.endpoint
            );
        }
        deadline.set(Instant::now() + CLOSE_TIME);
        let _ = self.retry(&deadline, started, what, |_| channel.close());
        let _ = self.retry(&deadline, started, what, |_| channel.wait_close());
    }

    /// Calls `op` until it stops returning EAGAIN, waiting on the socket in between.
    fn retry<T>(
        &self,
        deadline: &Cell<Instant>,
        started: Instant,
        what: &str,
        mut op: impl FnMut(&Session) -> Result<T, ssh2::Error>,
    ) -> Result<T, TransportError> {
        loop {
            match op(&self.session) {
                Ok(v) => return Ok(v),
                Err(e) if is_code(&e, LIBSSH2_ERROR_EAGAIN) => {
                    self.wait(deadline, started, what)?
                }
                Err(e) => return Err(session_error(&self.endpoint, what, e)),
            }
        }
    }

    /// `Err(Timeout)` past the deadline, `Err(Aborted)` once the operator's abort says so.
    fn check(
        &self,
        deadline: &Cell<Instant>,
        started: Instant,
        what: &str,
    ) -> Result<(), TransportError> {
        if Instant::now() >= deadline.get() {
            return Err(timeout(&self.endpoint, what, started));
        }
        if self.abort.as_ref().is_some_and(|check| check()) {
            return Err(TransportError::Aborted {
                endpoint: self.endpoint.clone(),
            });
        }
        Ok(())
    }

    /// Waits until the socket is ready in the direction libssh2 is blocked on, the next
    /// keepalive is due, or the deadline passes (then `Err(Timeout)`).
    fn wait(
        &self,
        deadline: &Cell<Instant>,
        started: Instant,
        what: &str,
    ) -> Result<(), TransportError> {
        self.check(deadline, started, what)?;
        let now = Instant::now();
        let mut limit = deadline.get().saturating_duration_since(now).min(MAX_POLL);
        match self.session.keepalive_send() {
            Ok(secs) if secs > 0 => limit = limit.min(Duration::from_secs(secs.into())),
            Ok(_) => {}
            Err(e) if is_code(&e, LIBSSH2_ERROR_EAGAIN) => {}
            Err(e) => return Err(session_error(&self.endpoint, "sending a keepalive", e)),
        }
        let mut fds = [PollFd::new(&*self.socket, socket::wanted(&self.session))];
        socket::wait(&mut fds, limit).map_err(|err| TransportError::Session {
            endpoint: self.endpoint.clone(),
            what: what.to_string(),
            message: format!("poll failed: {err}"),
            transient: false,
        })
    }
}

/// A writer that drops what it is given, and fails once more than its cap has come.
struct Dropped {
    left: u64,
}

impl Dropped {
    fn up_to(cap: u64) -> Dropped {
        Dropped { left: cap }
    }
}

impl Write for Dropped {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.left = self
            .left
            .checked_sub(buf.len() as u64)
            .ok_or_else(|| io::Error::other("the kill command printed more than it ever does"))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
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

fn read_retrying(reader: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match reader.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            other => return other,
        }
    }
}

/// How the command ended when the server reported a signal: its name, checked as
/// [`RemoteExit::signal`] checks the server's words.
fn signal_exit(channel: &Channel) -> Option<RemoteExit> {
    let name = channel.exit_signal().ok()?.exit_signal?;
    (!name.is_empty()).then(|| RemoteExit::signal(&name))
}
