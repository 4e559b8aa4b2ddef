//! The driver thread of one hub: it alone creates, drives (non-blocking) and drops the
//! jump host's session and every channel on it, in one poll(2) loop that answers the
//! nodes' requests, opens their channels one at a time (libssh2 keeps one channel open in
//! progress per session) and relays every open channel to its node's socket, each channel
//! a bounded step per pass so that none starves the others.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use libssh2_sys::LIBSSH2_ERROR_EAGAIN;
use rustix::event::{PollFd, PollFlags};
use ssh2::{Channel, ErrorCode};

use super::{Connect, JumpSession, Request, Shared, State, hubs};
use crate::transport::{Endpoint, TransportError, socket};

/// Bytes a channel moves per direction per pass: bounds both the memory held per channel
/// and how long one busy channel keeps the others waiting.
const CHUNK: usize = 32 * 1024;

/// How long a hub with no channel and no request stays connected before it ends: nodes
/// that follow one another in a pool reconnect within it and reuse the connection.
const LINGER: Duration = Duration::from_secs(5);

/// The longest sleep while channels are open: a safety net behind
/// [`Driver::input_buffered`], which finds what libssh2 holds for a channel already
/// served in a pass before the driver sleeps.
const BUFFERED_DATA_WAIT: Duration = Duration::from_millis(100);

/// How many times a hub connects: once, and once more after its connection dies.
const CONNECTS: u32 = 2;

/// Starts a hub's driver thread; it connects (with `connect`) when the first request
/// arrives.
pub(super) fn start<J: JumpSession>(
    jump: Endpoint,
    connect: Connect<J>,
) -> io::Result<Arc<Shared>> {
    let (wake, wake_rx) = UnixStream::pair()?;
    wake.set_nonblocking(true)?;
    wake_rx.set_nonblocking(true)?;
    let shared = Arc::new(Shared {
        jump: jump.clone(),
        state: Mutex::new(State::default()),
        wake,
        thread: Mutex::new(None),
    });
    let driver = Driver {
        shared: Arc::clone(&shared),
        connect,
        conn: None,
        connects: 0,
        wake: wake_rx,
        waiting: VecDeque::new(),
        opening: None,
        relays: Vec::new(),
        closing: Vec::new(),
        lost: false,
        idle_since: Instant::now(),
        turn: 0,
    };
    let handle = thread::Builder::new()
        .name(format!("jump {jump}"))
        .spawn(move || driver.run())?;
    *shared.thread.lock().unwrap_or_else(|p| p.into_inner()) = Some(handle);
    Ok(shared)
}

struct Driver<J> {
    shared: Arc<Shared>,
    connect: Connect<J>,
    conn: Option<J>,
    /// Connections made so far (see [`CONNECTS`]).
    connects: u32,
    wake: UnixStream,
    /// Requests taken from the queue, oldest first.
    waiting: VecDeque<Request>,
    /// The request whose channel open is in progress: libssh2 must be called again with
    /// the same arguments until it completes, so it is never abandoned half-way.
    opening: Option<Request>,
    relays: Vec<Relay>,
    /// Channels whose node is gone, being closed (non-blocking, so over several passes).
    closing: Vec<Channel>,
    /// Set when the connection to the jump host turned out to be dead during a pass.
    lost: bool,
    idle_since: Instant,
    /// Where the next pass starts, so no channel always goes first.
    turn: usize,
}

/// One node's channel and the socket its session runs over.
struct Relay {
    channel: Channel,
    sock: UnixStream,
    to_remote: Vec<u8>,
    to_local: Vec<u8>,
    sock_eof: bool,
    remote_eof: bool,
}

enum Step {
    Progress(bool),
    /// The node or its channel is finished: close the channel, drop the socket.
    Done,
    /// The connection to the jump host is gone.
    Lost,
}

impl<J: JumpSession> Driver<J> {
    fn run(mut self) {
        let mut buf = vec![0u8; CHUNK];
        loop {
            self.drain_wake();
            if self.take_requests() {
                break;
            }
            self.expire();
            if self.conn.is_none() && !self.waiting.is_empty() {
                self.connect();
                continue;
            }
            let mut progress = false;
            if self.conn.is_some() {
                progress |= self.open_next();
                progress |= self.pump(&mut buf);
                progress |= self.close_finished(&mut buf);
            }
            if self.lost {
                self.lose();
                continue;
            }
            self.publish_load();
            if self.is_idle() {
                if self.idle_since.elapsed() >= LINGER && self.leave() {
                    break;
                }
            } else {
                self.idle_since = Instant::now();
            }
            if !progress && !self.input_buffered() {
                self.wait();
            }
        }
        // Channels before the session they belong to.
        self.relays.clear();
        self.closing.clear();
        self.conn = None;
    }

    fn drain_wake(&mut self) {
        let mut sink = [0u8; 64];
        while matches!(self.wake.read(&mut sink), Ok(n) if n > 0) {}
    }

    /// Moves queued requests to `waiting`; true when the hub is told to stop.
    fn take_requests(&mut self) -> bool {
        let mut state = self.shared.state();
        self.waiting.extend(state.requests.drain(..));
        state.stop
    }

    /// Drops requests whose node has given up (it reports its own timeout).
    fn expire(&mut self) {
        let now = Instant::now();
        self.waiting.retain(|r| r.deadline > now);
    }

    /// Connects to the jump host for the waiting requests, or fails them all with why
    /// it could not.
    fn connect(&mut self) {
        if self.connects >= CONNECTS {
            let jump = self.shared.jump.clone();
            for request in self.waiting.drain(..) {
                let _ = request.reply.send(Err(TransportError::Session {
                    endpoint: jump.clone(),
                    what: "keeping the shared connection to the jump host".to_string(),
                    message: "the connection was lost again after it had been re-established \
                              once; check the jump host's sshd (its log, MaxStartups, \
                              MaxSessions) and the network to it"
                        .to_string(),
                    transient: false,
                }));
            }
            return;
        }
        let attempt = (self.connect)();
        // The requests queued while connecting were waiting on this attempt too.
        let _ = self.take_requests();
        match attempt {
            Ok(conn) => {
                conn.session().set_blocking(false);
                self.connects += 1;
                if self.connects > 1 {
                    log::info!(
                        "The connection to the jump host {} was lost; it has been re-established for the nodes still waiting for it.",
                        self.shared.jump
                    );
                }
                self.conn = Some(conn);
            }
            // A connection that never came up is not a lost one: the next request tries
            // again, as a node connecting on its own would.
            Err(e) => {
                for request in self.waiting.drain(..) {
                    let _ = request.reply.send(Err(e.duplicate()));
                }
            }
        }
    }

    /// Starts or continues the channel open of the oldest request.
    fn open_next(&mut self) -> bool {
        if self.opening.is_none() {
            self.opening = self.waiting.pop_front();
        }
        let (Some(request), Some(conn)) = (&self.opening, &self.conn) else {
            return false;
        };
        let target = &request.target;
        match conn
            .session()
            .channel_direct_tcpip(&target.host, target.port, None)
        {
            Ok(channel) => {
                let Some(request) = self.opening.take() else {
                    return false;
                };
                match socket_pair() {
                    Ok((ours, theirs)) => {
                        // A node that gave up meanwhile drops its end: the relay sees it
                        // closed and closes the channel.
                        let _ = request.reply.send(Ok(theirs));
                        self.relays.push(Relay {
                            channel,
                            sock: ours,
                            to_remote: Vec::new(),
                            to_local: Vec::new(),
                            sock_eof: false,
                            remote_eof: false,
                        });
                    }
                    Err(source) => {
                        let _ = request.reply.send(Err(TransportError::Connect {
                            endpoint: request.target.clone(),
                            source,
                        }));
                        self.closing.push(channel);
                    }
                }
                true
            }
            Err(e) if e.code() == ErrorCode::Session(LIBSSH2_ERROR_EAGAIN) => false,
            Err(e) if conn.is_lost(&e) => {
                self.lost = true;
                false
            }
            Err(e) => {
                let Some(request) = self.opening.take() else {
                    return false;
                };
                let _ = request.reply.send(Err(TransportError::Session {
                    endpoint: self.shared.jump.clone(),
                    what: format!("opening a forwarded connection to {}", request.target),
                    message: e.message().to_string(),
                    // "connect failed" is the target not (yet) listening; other reasons,
                    // such as "administratively prohibited" (AllowTcpForwarding no), are
                    // final.
                    transient: e.message().contains("connect failed"),
                }));
                true
            }
        }
    }

    /// One step of every relay, starting at a different one each pass.
    fn pump(&mut self, buf: &mut [u8]) -> bool {
        let Some(conn) = &self.conn else {
            return false;
        };
        let mut progress = false;
        let count = self.relays.len();
        let mut finished = Vec::new();
        for k in 0..count {
            let i = (self.turn + k) % count;
            match self.relays[i].step(conn, buf) {
                Step::Progress(p) => progress |= p,
                Step::Done => finished.push(i),
                Step::Lost => {
                    self.lost = true;
                    return progress;
                }
            }
        }
        self.turn = self.turn.wrapping_add(1);
        finished.sort_unstable();
        for i in finished.into_iter().rev() {
            let relay = self.relays.swap_remove(i);
            self.closing.push(relay.channel);
            progress = true;
        }
        progress
    }

    /// Continues closing the channels of finished relays; a closed one is freed.
    fn close_finished(&mut self, buf: &mut [u8]) -> bool {
        let before = self.closing.len();
        self.closing.retain_mut(|channel| {
            // A read of the channel's own may be half-sent (a window adjust): libssh2
            // sends nothing else on the session until it is finished, so it is read on.
            let _ = channel.read(buf);
            match channel.close() {
                Err(e) => e.code() == ErrorCode::Session(LIBSSH2_ERROR_EAGAIN),
                Ok(()) => false,
            }
        });
        self.closing.len() != before
    }

    /// The connection to the jump host died: every channel on it is gone (their nodes
    /// see their sockets close) and the request being opened waits for the next one.
    fn lose(&mut self) {
        log::debug!("The connection to the jump host {} died.", self.shared.jump);
        self.relays.clear();
        self.closing.clear();
        if let Some(request) = self.opening.take() {
            self.waiting.push_front(request);
        }
        self.conn = None;
        self.lost = false;
    }

    fn publish_load(&self) {
        let mut state = self.shared.state();
        state.connected = self.conn.is_some();
        state.load = state.requests.len()
            + self.waiting.len()
            + usize::from(self.opening.is_some())
            + self.relays.len();
    }

    fn is_idle(&self) -> bool {
        self.relays.is_empty()
            && self.closing.is_empty()
            && self.waiting.is_empty()
            && self.opening.is_none()
    }

    /// Leaves the registry unless a request came in meanwhile; true when left.
    fn leave(&self) -> bool {
        let mut hubs = hubs();
        let mut state = self.shared.state();
        if !state.requests.is_empty() {
            return false;
        }
        state.closed = true;
        hubs.retain(|(_, shared)| !Arc::ptr_eq(shared, &self.shared));
        true
    }

    /// Whether libssh2 already holds what the open in progress or a relay waits for. A
    /// call for one channel reads every packet that has arrived, so the answer to the
    /// open, or data or an EOF for a channel served earlier in the pass, can sit in its
    /// buffers with nothing left on the socket for poll(2) to see: without this check it
    /// waited there for up to [`BUFFERED_DATA_WAIT`], on every round trip of a node's
    /// handshake and commands.
    fn input_buffered(&mut self) -> bool {
        if self.opening.is_some() && self.open_next() {
            return true;
        }
        self.relays.iter().any(Relay::has_buffered_input)
    }

    /// Sleeps until the jump socket, a node socket or the wake-up socket is ready.
    fn wait(&self) {
        let mut limit = if self.relays.is_empty() && self.closing.is_empty() {
            LINGER
        } else {
            BUFFERED_DATA_WAIT
        };
        if let Some(next) = self.waiting.iter().map(|r| r.deadline).min() {
            limit = limit.min(next.saturating_duration_since(Instant::now()));
        }
        let mut fds = Vec::with_capacity(self.relays.len() + 2);
        fds.push(PollFd::new(&self.wake, PollFlags::IN));
        if let Some(conn) = &self.conn {
            // Every relay blocked on its node's socket (backpressure): polling the jump
            // socket's pending input would only spin.
            let wants_input = self.opening.is_some()
                || !self.closing.is_empty()
                || self
                    .relays
                    .iter()
                    .any(|r| !r.to_remote.is_empty() || (r.to_local.is_empty() && !r.remote_eof));
            let events = if wants_input {
                socket::wanted(conn.session())
            } else {
                PollFlags::empty()
            };
            // The jump host's sshd never runs a session on this connection, so it never
            // turns Nagle's algorithm off on its side: each small packet it relays waits
            // for our acknowledgement of the one before, and a delayed one held every
            // round trip of every node's handshake and commands for up to 40 ms (through
            // a bastion whose sshd had TCP_NODELAY forced on, 20 nodes took 1.4x instead
            // of 1.75x as long as directly). Acknowledging at once releases them.
            socket::ack_at_once(conn.socket());
            fds.push(PollFd::from_borrowed_fd(conn.socket(), events));
        }
        for relay in &self.relays {
            let mut events = PollFlags::empty();
            if relay.to_remote.is_empty() && !relay.sock_eof {
                events |= PollFlags::IN;
            }
            if !relay.to_local.is_empty() {
                events |= PollFlags::OUT;
            }
            fds.push(PollFd::new(&relay.sock, events));
        }
        let _ = socket::wait(&mut fds, limit);
    }
}

impl Relay {
    /// Whether data or an EOF for this channel waits in libssh2's buffers and the next
    /// step would take it.
    fn has_buffered_input(&self) -> bool {
        self.to_local.is_empty()
            && !self.remote_eof
            && (self.channel.read_window().available > 0 || self.channel.eof())
    }

    /// Moves at most one chunk each way.
    fn step(&mut self, conn: &impl JumpSession, buf: &mut [u8]) -> Step {
        // A failed channel call: the whole connection, or this channel only.
        let failed = || match ssh2::Error::last_session_error(conn.session()) {
            Some(e) if conn.is_lost(&e) => Step::Lost,
            _ => Step::Done,
        };
        let mut progress = false;

        // Once the node behind has closed, nothing more goes to it.
        if self.to_remote.is_empty() && !self.sock_eof && !self.remote_eof {
            match self.sock.read(buf) {
                Ok(0) => self.sock_eof = true,
                Ok(n) => self.to_remote.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => self.sock_eof = true,
            }
        }
        if !self.to_remote.is_empty() {
            // Retried until written: a packet libssh2 sent in part must be finished by
            // the same call before the session sends anything else.
            match send(&mut self.channel, &mut self.to_remote) {
                Ok(sent) => progress |= sent,
                Err(_) => return failed(),
            }
        }
        // The node's session is gone and all it sent is on its way.
        if self.sock_eof && self.to_remote.is_empty() {
            return Step::Done;
        }

        if self.to_local.is_empty() && !self.remote_eof {
            match self.channel.read(buf) {
                Ok(0) if self.channel.eof() => self.remote_eof = true,
                Ok(0) => {}
                Ok(n) => self.to_local.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return failed(),
            }
        }
        if !self.to_local.is_empty() {
            match send(&mut self.sock, &mut self.to_local) {
                Ok(sent) => progress |= sent,
                // The node's session is gone: what was on its way to it is dropped.
                Err(_) => {
                    self.to_local.clear();
                    self.sock_eof = true;
                }
            }
        }
        if self.remote_eof && self.to_local.is_empty() && self.to_remote.is_empty() {
            return Step::Done;
        }
        Step::Progress(progress)
    }
}

/// Writes what `pending` holds to `to` and drops what was written; whether anything was.
/// Nothing written for now (`WouldBlock`) is not an error.
fn send(to: &mut impl Write, pending: &mut Vec<u8>) -> io::Result<bool> {
    match to.write(pending) {
        Ok(n) => {
            pending.drain(..n);
            Ok(n > 0)
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
        Err(e) => Err(e),
    }
}

fn socket_pair() -> io::Result<(UnixStream, UnixStream)> {
    let (ours, theirs) = UnixStream::pair()?;
    ours.set_nonblocking(true)?;
    Ok((ours, theirs))
}
