//! A scripted in-memory transport for unit tests, in the manner of hyperfine's mock
//! executor: no sockets and no sshd. Each exec is answered by the first rule whose
//! pattern occurs in the command (output, then an exit status or a [`TransportError`]);
//! every connect and every command, with the stdin bytes it received, is recorded for
//! the test to assert on. Connects can be made to fail a given number of times.

use std::cell::Cell;
use std::io::{Read, Write};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{AbortCheck, ConnectSpec, Connection, Connector, Endpoint, RemoteExit, TransportError};
use crate::remote::{ANSWER_CUT, FACTS_END, STDIN_MARK, SUDO_WANTS_PASSWORD};

/// Makes the error a reply or a failed connect ends with, for the node at hand.
type MakeError = Box<dyn Fn(&Endpoint) -> TransportError + Send>;

/// What the fake node does with one command.
pub(crate) struct Reply {
    output: Vec<u8>,
    /// Reads at most this many stdin bytes (then the "connection" breaks, or the command
    /// stops reading); `None` reads all of it.
    reads: Option<usize>,
    ending: Ending,
}

enum Ending {
    Exit(RemoteExit),
    Error(MakeError),
}

impl Reply {
    /// Exits with `code`, printing nothing.
    pub(crate) fn exit(code: i32) -> Reply {
        Reply {
            output: Vec::new(),
            reads: None,
            ending: Ending::Exit(RemoteExit::Code(code)),
        }
    }

    /// Exits 0, printing nothing.
    pub(crate) fn ok() -> Reply {
        Reply::exit(0)
    }

    /// Ends with the error `make` builds, after any output.
    pub(crate) fn error(make: impl Fn(&Endpoint) -> TransportError + Send + 'static) -> Reply {
        Reply {
            output: Vec::new(),
            reads: None,
            ending: Ending::Error(Box::new(make)),
        }
    }

    /// Runs past its deadline (the real engine has killed it by then).
    pub(crate) fn timeout() -> Reply {
        Reply::error(|endpoint| TransportError::Timeout {
            endpoint: endpoint.clone(),
            what: "Running the command".to_string(),
            after: Duration::from_secs(2),
        })
    }

    /// Cancelled by the operator's abort (the real engine has killed it by then).
    pub(crate) fn aborted() -> Reply {
        Reply::error(|endpoint| TransportError::Aborted {
            endpoint: endpoint.clone(),
        })
    }

    /// The connection breaks under the command.
    pub(crate) fn connection_lost() -> Reply {
        Reply::error(|endpoint| TransportError::Session {
            endpoint: endpoint.clone(),
            what: "running the command".to_string(),
            message: "connection reset by peer".to_string(),
            transient: true,
        })
    }

    /// Prints `text` (stdout and stderr are merged, as over SSH) before it ends.
    pub(crate) fn printing(mut self, text: &str) -> Reply {
        self.output.extend_from_slice(text.as_bytes());
        self
    }

    /// Reads only the first `bytes` of its stdin.
    pub(crate) fn reading_at_most(mut self, bytes: usize) -> Reply {
        self.reads = Some(bytes);
        self
    }
}

struct Rule {
    pattern: String,
    reply: Reply,
    /// Answers only once, then gives way to later rules.
    once: bool,
}

/// One command the fake node received.
#[derive(Clone, Debug)]
pub(crate) struct Exec {
    pub command: String,
    /// What it read from stdin; `None` when it was given no stdin at all.
    pub stdin: Option<Vec<u8>>,
    /// Whether an abort check was set while it ran.
    pub abort_set: bool,
    /// Whether it was to be left running at its deadline (`Connection::leave_at_deadline`).
    pub left_at_deadline: bool,
    /// Whether it ran in the channel of the exec before it: the answer of a one-channel
    /// exchange (`remote::await_answer`).
    pub same_channel: bool,
}

#[derive(Default)]
struct State {
    rules: Vec<Rule>,
    connect_failures: Vec<MakeError>,
    connects: Vec<ConnectSpec>,
    execs: Vec<Exec>,
}

/// The scripted transport; clones share one script and one record.
#[derive(Clone, Default)]
pub(crate) struct FakeTransport {
    state: Arc<Mutex<State>>,
}

/// Exit status and output for a command no rule matches, as a shell would say it.
const NO_RULE: i32 = 127;

impl FakeTransport {
    pub(crate) fn new() -> FakeTransport {
        FakeTransport::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Answers every command that contains `pattern` with `reply`. Rules are tried in
    /// the order they were added; the first that matches answers.
    pub(crate) fn on(self, pattern: &str, reply: Reply) -> FakeTransport {
        self.add(pattern, reply, false)
    }

    /// Like [`FakeTransport::on`], but only for the first matching command.
    pub(crate) fn once(self, pattern: &str, reply: Reply) -> FakeTransport {
        self.add(pattern, reply, true)
    }

    fn add(self, pattern: &str, reply: Reply, once: bool) -> FakeTransport {
        self.state().rules.push(Rule {
            pattern: pattern.to_string(),
            reply,
            once,
        });
        self
    }

    /// Makes the next `times` connects fail with the error `make` builds.
    pub(crate) fn failing_connects(
        self,
        times: usize,
        make: impl Fn(&Endpoint) -> TransportError + Send + Clone + 'static,
    ) -> FakeTransport {
        for _ in 0..times {
            self.state().connect_failures.push(Box::new(make.clone()));
        }
        self
    }

    /// Every connect attempt, failed ones included.
    pub(crate) fn connects(&self) -> Vec<ConnectSpec> {
        self.state().connects.clone()
    }

    /// Every command run, in order.
    pub(crate) fn execs(&self) -> Vec<Exec> {
        self.state().execs.clone()
    }

    /// The commands that contain `pattern`.
    pub(crate) fn execs_with(&self, pattern: &str) -> Vec<Exec> {
        self.execs()
            .into_iter()
            .filter(|e| e.command.contains(pattern))
            .collect()
    }
}

impl Connector for FakeTransport {
    fn connect(&self, spec: &ConnectSpec) -> Result<Box<dyn Connection>, TransportError> {
        let mut state = self.state();
        state.connects.push(spec.clone());
        if !state.connect_failures.is_empty() {
            let make = state.connect_failures.remove(0);
            return Err(make(&spec.endpoint));
        }
        Ok(Box::new(FakeConnection {
            transport: self.clone(),
            endpoint: spec.endpoint.clone(),
            abort: None,
            leave_at_deadline: false,
            left: false,
        }))
    }
}

/// A connection to the fake node.
struct FakeConnection {
    transport: FakeTransport,
    endpoint: Endpoint,
    abort: Option<AbortCheck>,
    leave_at_deadline: bool,
    /// Whether a command was left running at its deadline and not yet finished.
    left: bool,
}

impl Connection for FakeConnection {
    fn exec_until(
        &mut self,
        command: &str,
        stdin: Option<&mut dyn Read>,
        deadline: &Cell<Instant>,
        output: &mut dyn Write,
    ) -> Result<RemoteExit, TransportError> {
        let result = self.exec_played(command, stdin, deadline, output);
        // A command left running at its deadline, as the SSH engine leaves it.
        self.left |=
            self.leave_at_deadline && matches!(result, Err(TransportError::Timeout { .. }));
        result
    }

    fn set_abort(&mut self, check: Option<AbortCheck>) {
        self.abort = check;
    }

    fn leave_at_deadline(&mut self, leave: bool) {
        self.leave_at_deadline = leave;
    }

    fn finish_left(
        &mut self,
        _output: &mut dyn Write,
        _deadline: Instant,
    ) -> Result<Option<RemoteExit>, TransportError> {
        self.left = false;
        Ok(None)
    }

    /// Recorded as the command the SSH engine runs for it.
    fn kill_left(&mut self) {
        if std::mem::take(&mut self.left) {
            let _ = self.play(
                &crate::remote::KILL_SIBLINGS,
                None,
                &mut std::io::sink(),
                false,
            );
        }
    }

    fn host_key_fingerprint(&self) -> String {
        "SHA256:fake-host-key".to_string()
    }

    fn host_key(&self) -> Option<String> {
        Some("ssh-ed25519 AAAAfake".to_string())
    }
}

impl FakeConnection {
    /// `command` as the rules answer it: on its own, or as a one-channel exchange.
    fn exec_played(
        &mut self,
        command: &str,
        stdin: Option<&mut dyn Read>,
        _deadline: &Cell<Instant>,
        output: &mut dyn Write,
    ) -> Result<RemoteExit, TransportError> {
        if !command.contains(FACTS_END) {
            return self.play(command, stdin, output, false);
        }
        // The one-channel exchange (`remote::await_answer`), played as the node's shell
        // plays it: the first matching rule answers the script up to the facts; when that
        // exits 0 the node prints FACTS_END and reads the framed answer, which the rules
        // then answer as a command of its own, run in the same channel, with the rest of
        // stdin as its stdin.
        let mut printed = Vec::new();
        let first = self.play(command, None, &mut Both(output, &mut printed), false)?;
        if first != RemoteExit::Code(0) {
            return Ok(first);
        }
        self.write(output, format!("{FACTS_END}\n").as_bytes())?;
        let Some(stdin) = stdin else {
            return Ok(RemoteExit::Code(ANSWER_CUT));
        };
        // Under `sudo -S` the script first reads stdin up to the mark after the password,
        // as `remote::wrap` has it do.
        let wants_password = String::from_utf8_lossy(&printed)
            .lines()
            .any(|l| l == SUDO_WANTS_PASSWORD);
        if wants_password
            && !std::iter::from_fn(|| read_line(&mut *stdin))
                .take(2)
                .any(|line| line == STDIN_MARK)
        {
            return Ok(RemoteExit::Code(124));
        }
        let Some(count) = read_line(&mut *stdin).and_then(|n| n.parse::<usize>().ok()) else {
            return Ok(RemoteExit::Code(ANSWER_CUT));
        };
        let mut script = String::new();
        for _ in 0..count {
            match read_line(&mut *stdin) {
                Some(line) => script.push_str(&format!("{line}\n")),
                None => return Ok(RemoteExit::Code(ANSWER_CUT)),
            }
        }
        if count == 0 {
            return Ok(RemoteExit::Code(0));
        }
        self.play(&script, Some(stdin), output, true)
    }

    /// Answers `command` by the first matching rule and records it; `same_channel` when
    /// it is the answer of a one-channel exchange.
    fn play(
        &mut self,
        command: &str,
        stdin: Option<&mut dyn Read>,
        output: &mut dyn Write,
        same_channel: bool,
    ) -> Result<RemoteExit, TransportError> {
        let mut state = self.transport.state();
        let found = state
            .rules
            .iter()
            .position(|rule| command.contains(&rule.pattern));
        let rule = match found {
            Some(i) if state.rules[i].once => Some(state.rules.remove(i)),
            _ => None,
        };
        let reply = match (&rule, found) {
            (Some(rule), _) => Some(&rule.reply),
            (None, Some(i)) => Some(&state.rules[i].reply),
            (None, None) => None,
        };
        let mut received = stdin.is_some().then(Vec::new);
        if let (Some(reader), Some(buf)) = (stdin, received.as_mut()) {
            match reply.and_then(|r| r.reads) {
                Some(limit) => reader.take(limit as u64).read_to_end(buf),
                None => reader.read_to_end(buf),
            }
            .map_err(|source| TransportError::LocalRead {
                endpoint: self.endpoint.clone(),
                source,
            })?;
        }
        let result = match reply {
            Some(reply) => self
                .write(output, &reply.output)
                .and_then(|()| match &reply.ending {
                    Ending::Exit(exit) => Ok(exit.clone()),
                    Ending::Error(make) => Err(make(&self.endpoint)),
                }),
            None => self
                .write(output, b"fake transport: no rule matches this command\n")
                .map(|()| RemoteExit::Code(NO_RULE)),
        };
        // An answer that brought no upload had, as far as a test can tell, no stdin.
        let received = received.filter(|bytes| !(same_channel && bytes.is_empty()));
        state.execs.push(Exec {
            command: command.to_string(),
            stdin: received,
            abort_set: self.abort.is_some(),
            left_at_deadline: self.leave_at_deadline,
            same_channel,
        });
        result
    }

    fn write(&self, output: &mut dyn Write, bytes: &[u8]) -> Result<(), TransportError> {
        output
            .write_all(bytes)
            .map_err(|source| TransportError::output_write(&self.endpoint, source))
    }
}

/// Writes to both.
struct Both<'o>(&'o mut dyn Write, &'o mut Vec<u8>);

impl Write for Both<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write_all(buf)?;
        self.1.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// One line of `reader`, read a byte at a time as a shell's `read` does, so what follows
/// it stays unread; `None` at the end of input, or while it has nothing yet.
fn read_line(reader: &mut dyn Read) -> Option<String> {
    let mut line = Vec::new();
    let mut byte = [0u8];
    loop {
        match reader.read(&mut byte) {
            Ok(1) if byte[0] == b'\n' => return String::from_utf8(line).ok(),
            Ok(1) => line.push(byte[0]),
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ConnectSpec {
        ConnectSpec {
            endpoint: Endpoint::new("10.0.0.9", 22),
            username: "root".into(),
            auth: super::super::Auth::Agent { socket: None },
            host_key_policy: super::super::HostKeyPolicy::AcceptNew,
            known_hosts: "/dev/null".into(),
            connect_timeout: Duration::from_secs(1),
            keepalive_secs: 0,
            jump_connections: 1,
            jump: None,
            handshakes_per_host: 1,
        }
    }

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    #[test]
    fn answers_by_the_first_matching_rule_and_records_commands_and_stdin() {
        let fake = FakeTransport::new()
            .once("probe", Reply::exit(3).printing("first\n"))
            .on("probe", Reply::ok().printing("later\n"))
            .on("cat", Reply::ok().reading_at_most(4));
        let mut conn = fake.connect(&spec()).unwrap();
        assert_eq!(conn.host_key_fingerprint(), "SHA256:fake-host-key");
        let mut out = Vec::new();
        let exit = conn.exec("probe", None, far(), &mut out).unwrap();
        assert_eq!(
            (exit, out.as_slice()),
            (RemoteExit::Code(3), &b"first\n"[..])
        );
        let mut out = Vec::new();
        assert!(conn.exec("probe", None, far(), &mut out).unwrap().success());
        assert_eq!(out, b"later\n");
        let mut stdin: &[u8] = b"0123456789";
        conn.exec("cat > f", Some(&mut stdin), far(), &mut Vec::new())
            .unwrap();
        let mut out = Vec::new();
        let exit = conn.exec("unknown", None, far(), &mut out).unwrap();
        assert_eq!(exit, RemoteExit::Code(NO_RULE));

        let execs = fake.execs();
        assert_eq!(execs.len(), 4);
        assert_eq!(execs[0].stdin, None);
        assert_eq!(execs[2].stdin.as_deref(), Some(&b"0123"[..]));
        assert_eq!(fake.execs_with("probe").len(), 2);
    }

    #[test]
    fn connects_fail_as_scripted_then_succeed() {
        let fake = FakeTransport::new().failing_connects(2, |endpoint| TransportError::Refused {
            endpoint: endpoint.clone(),
        });
        assert!(matches!(
            fake.connect(&spec()).err(),
            Some(TransportError::Refused { .. })
        ));
        assert!(fake.connect(&spec()).is_err());
        let mut conn = fake.connect(&spec()).unwrap();
        assert_eq!(fake.connects().len(), 3);
        conn.set_abort(Some(Arc::new(|| true)));
        let fake = fake.on("sleep", Reply::timeout());
        let err = conn
            .exec("sleep 9", None, far(), &mut Vec::new())
            .unwrap_err();
        assert!(matches!(err, TransportError::Timeout { .. }), "{err:?}");
        assert!(fake.execs()[0].abort_set);
    }
}
