//! The transport: one connection to one node, used by one worker thread.
//!
//! The pipeline sees a node through two traits: a [`Connector`] opens a [`Connection`],
//! which runs commands (with stdin, a deadline and the operator's abort) and names the
//! host key it was checked by. [`SshConnector`] is the production engine on libssh2; the
//! unit tests use a scripted in-memory fake (`fake`) that records every command.
//!
//! [`SshConnection`] wraps one `ssh2::Session`. libssh2 sessions are not safe to share
//! between threads (a blocking call on one channel blocks the whole session, and channels
//! freed from several threads are unsound), so a connection is created, used and dropped
//! on the worker thread that owns the node.
//!
//! Every operation takes a deadline; errors say which node, which user and what to do.

mod error;
mod jump;
mod known_hosts;
mod pace;
mod socket;
mod ssh;

use std::cell::Cell;
use std::fmt;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::redact::Secret;

/// The host-key policy is the config's own type: the plan resolves it per node and the
/// transport acts on it, with no second enum to map between.
pub use crate::config::HostKeyPolicy;
pub use error::TransportError;
pub use jump::close_all as close_jump_connections;
pub use known_hosts::{host_entry, sha256_fingerprint};
pub use pace::{DEFAULT_HANDSHAKES_PER_HOST, describe as describe_pace};
pub use ssh::SshConnection;

/// Opens connections. Shared by every worker thread of a run.
pub trait Connector: Sync {
    /// Connects and authenticates within `spec.connect_timeout`.
    fn connect(&self, spec: &ConnectSpec) -> Result<Box<dyn Connection>, TransportError>;
}

/// One authenticated connection to one node, used by one worker thread.
pub trait Connection {
    /// Runs `command`, streaming `stdin` (then EOF) to it and its merged stdout and stderr
    /// into `output`. At `deadline` the command is killed on the node and `Err(Timeout)`
    /// returned; once the abort check answers true, it is killed and `Err(Aborted)`
    /// returned. Either way the connection stays usable for a cleanup command.
    ///
    /// A `stdin` that answers `WouldBlock` has nothing to send yet: it is asked again
    /// after the next output has gone to `output`. That is how a command's answer can
    /// depend on what the command printed first, in one channel (`pipeline::exchange`).
    fn exec(
        &mut self,
        command: &str,
        stdin: Option<&mut dyn Read>,
        deadline: Instant,
        output: &mut dyn Write,
    ) -> Result<RemoteExit, TransportError> {
        self.exec_until(command, stdin, &Cell::new(deadline), output)
    }

    /// [`Connection::exec`] with a deadline that may move while the command runs: it is
    /// read at every wait. The one-channel exchange sets keadm's deadline once the
    /// node's facts are in, and the prepare step's until then.
    fn exec_until(
        &mut self,
        command: &str,
        stdin: Option<&mut dyn Read>,
        deadline: &Cell<Instant>,
        output: &mut dyn Write,
    ) -> Result<RemoteExit, TransportError>;

    /// Makes every later wait ask `check`; `None` removes it (to run a cleanup command
    /// after an abort).
    fn set_abort(&mut self, check: Option<AbortCheck>);

    /// With `true`, a later command past its deadline is not killed: `Err(Timeout)` is
    /// returned at once and the command left running, its channel open, for the caller to
    /// stop (the run's keadm gets SIGTERM and a grace period, as root under sudo, which
    /// the transport's own kill as the login user cannot give it). The channel stays open
    /// because a command whose output is closed dies of SIGPIPE at its next line, before
    /// its cleanup is done. An abort or refused output still kills it. `false`, the
    /// default, kills at the deadline.
    fn leave_at_deadline(&mut self, leave: bool);

    /// The output of the command left running at its deadline, once the caller has
    /// stopped it: read into `output` until the node ends it or `deadline`, then its
    /// channel closed. How it ended, if it did; `Ok(None)` when no command was left.
    fn finish_left(
        &mut self,
        output: &mut dyn Write,
        deadline: Instant,
    ) -> Result<Option<RemoteExit>, TransportError>;

    /// Kills the command left running at its deadline as the transport kills at a
    /// deadline it keeps (every command this connection runs on the node, as the login
    /// user, within a second whatever the node sends), and closes its channel unread: for
    /// a command whose stop found nothing to stop, or whose deadline was not keadm's.
    fn kill_left(&mut self);

    /// The node's host key as `SHA256:<base64>`, as OpenSSH prints it.
    fn host_key_fingerprint(&self) -> String;

    /// The node's host key as a known-hosts line has it: `<type> <base64>`.
    fn host_key(&self) -> Option<String>;
}

/// The production [`Connector`]: libssh2 through the `ssh2` crate.
#[derive(Clone, Copy, Debug, Default)]
pub struct SshConnector;

impl Connector for SshConnector {
    fn connect(&self, spec: &ConnectSpec) -> Result<Box<dyn Connection>, TransportError> {
        Ok(Box::new(SshConnection::connect(spec)?))
    }
}

/// Answers whether the operator asked to cancel running commands.
pub type AbortCheck = std::sync::Arc<dyn Fn() -> bool + Send + Sync>;

/// Where a node's sshd listens.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// A host name or an IP literal, never bracketed (`::1`, not `[::1]`).
    pub host: String,
    pub port: u16,
}

impl Endpoint {
    /// Builds an endpoint; brackets around an IPv6 literal are dropped so that every
    /// later formatting step can add them exactly where they are needed.
    pub fn new(host: impl Into<String>, port: u16) -> Endpoint {
        let host = host.into();
        let host = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            Some(inner) => inner.to_string(),
            None => host,
        };
        Endpoint { host, port }
    }
}

impl fmt::Display for Endpoint {
    /// `host:port`, with brackets around IPv6 literals (`[::1]:22`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// How to log in.
#[derive(Clone, Debug)]
pub enum Auth {
    Password(Secret),
    PrivateKey {
        path: PathBuf,
        passphrase: Option<Secret>,
    },
    /// An ssh-agent. `socket: None` means `$SSH_AUTH_SOCK`; a path avoids touching the
    /// process environment, which parallel workers and tests share.
    Agent {
        socket: Option<PathBuf>,
    },
}

impl Auth {
    /// The method's name as used in messages ("the password", "the key /k").
    fn describe(&self) -> String {
        match self {
            Auth::Password(_) => "the password".to_string(),
            Auth::PrivateKey { path, .. } => format!("the private key {}", path.display()),
            Auth::Agent { .. } => "every key offered by the ssh-agent".to_string(),
        }
    }
}

/// Everything needed to open one connection.
#[derive(Clone, Debug)]
pub struct ConnectSpec {
    pub endpoint: Endpoint,
    pub username: String,
    pub auth: Auth,
    pub host_key_policy: HostKeyPolicy,
    /// The OpenSSH-format known-hosts file read (and, under `AcceptNew`, appended to).
    pub known_hosts: PathBuf,
    /// Bounds TCP connect, SSH handshake, host-key check and authentication together.
    pub connect_timeout: Duration,
    /// Seconds between keepalive probes once connected; 0 turns them off.
    pub keepalive_secs: u32,
    /// A jump host (bastion) to reach the node through, as `ssh -J` does. Its own host
    /// key and auth are checked by its own spec; its connect time counts against this
    /// spec's `connect_timeout`.
    pub jump: Option<Box<ConnectSpec>>,
    /// How many connections the nodes behind `jump` share (`--jump-connections`): each
    /// node is a channel on the one with the fewest. 0 counts as 1.
    pub jump_connections: usize,
    /// At most this many handshakes (TCP connect to authentication done) in flight to
    /// this spec's endpoint at once, in this process (`pace`); the wait for a turn counts
    /// against `connect_timeout`.
    pub handshakes_per_host: usize,
}

/// How a remote command ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RemoteExit {
    Code(i32),
    /// The signal name without `SIG`, as sshd reports it (`KILL`).
    Signal(String),
}

impl RemoteExit {
    /// The signal `name` an SSH server reported in its exit-signal message. The name is
    /// the server's word, and it reaches transcripts, the log and the console: a name
    /// as signals are named (`KILL`, `RTMIN+3`: capitals, digits, `+`, `_`, `-`, at most
    /// 32) is kept; anything else is shown in quotes, on one line, escaped and short,
    /// so it reads as the server's text and cannot forge a line or drive a terminal.
    pub fn signal(name: &str) -> RemoteExit {
        let plain = (1..=32).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b"+_-".contains(&b));
        if plain {
            RemoteExit::Signal(name.to_string())
        } else {
            RemoteExit::Signal(format!("\"{}\"", crate::node_text::one_line(name, 32)))
        }
    }

    pub fn success(&self) -> bool {
        *self == RemoteExit::Code(0)
    }
}

impl fmt::Display for RemoteExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RemoteExit::Code(code) => write!(f, "exit status {code}"),
            RemoteExit::Signal(sig) => write!(f, "killed by signal {sig}"),
        }
    }
}

#[cfg(test)]
pub(crate) mod fake;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_brackets_only_ipv6() {
        assert_eq!(Endpoint::new("10.0.0.1", 22).to_string(), "10.0.0.1:22");
        assert_eq!(Endpoint::new("[::1]", 2222).to_string(), "[::1]:2222");
        assert_eq!(Endpoint::new("::1", 22).host, "::1");
    }

    #[test]
    fn remote_exit_display() {
        assert_eq!(RemoteExit::Code(3).to_string(), "exit status 3");
        assert_eq!(
            RemoteExit::Signal("KILL".into()).to_string(),
            "killed by signal KILL"
        );
    }

    #[test]
    fn a_signal_name_from_the_server_is_a_signal_name_or_shown_as_quoted_text() {
        for name in ["KILL", "TERM", "RTMIN+3", "XCPU"] {
            assert_eq!(RemoteExit::signal(name), RemoteExit::Signal(name.into()));
        }
        let forged = "KILL\u{1b}]0;owned\u{7}\nSuccessfully processed node edge-9";
        let RemoteExit::Signal(shown) = RemoteExit::signal(forged) else {
            panic!("a signal name stays a signal");
        };
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        assert_eq!(
            shown,
            "\"KILL\\x1b]0;owned\\x07 | Successfu... (25 more characters)\""
        );
        for odd in ["", "kill", &"A".repeat(33), "KILL TERM"] {
            let RemoteExit::Signal(shown) = RemoteExit::signal(odd) else {
                panic!("a signal name stays a signal");
            };
            assert!(shown.starts_with('"'), "{odd:?} -> {shown}");
        }
    }
}
