//! One exec channel per node where it fits. The prepare script (with the pre-flight
//! probe when that rides along) prints the node's facts and [`remote::FACTS_END`]; the
//! control host decides from them what the node lacks and answers on the same channel's
//! stdin with the rest of the script (receive the upload, move it into place, run keadm)
//! and the upload behind it (see [`remote::await_answer`]). A node then costs what
//! OpenSSH's one exec costs: no second channel open and exec request, which are two round
//! trips on a long link.
//!
//! Under sudo the whole script runs in the sudo probe's `sudo sh -c` (see
//! [`remote::with_sudo_probe`]), so the answer runs as root too; when the node says sudo
//! wants the password, the password lines go first on stdin, and only then (after the
//! facts) the answer. It fits any node without offline image archives (their import is
//! a step of its own) and copyFrom files (keadm is then the only upload). keadm comes in
//! the answer as a packed copy (zstd, xz), the release tarball or itself, whichever the node can
//! unpack; when it would come in channels of its own (a node that reads it from a node of
//! its site), the node is told to stop after its facts and the separate steps go on with
//! the facts already learnt.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io::{self, Cursor, Read, Write};
use std::rc::Rc;
use std::time::Instant;

use super::privilege::password_of;
use super::relay::Role;
use super::run::{Clocked, LineScan, SendTimes, WatchReceived, transcript_error};
use super::upload::{Deferred, Upload, open_local};
use super::{Run, StepError};
use crate::node_text::{CappedBuffer, STEP_OUTPUT_CAP};
use crate::outcome::Phase;
use crate::remote::{self, FACTS_END, NodeFacts, Privilege, SUDO_WANTS_PASSWORD};
use crate::transport::{Connection, RemoteExit, TransportError};

/// How the one-channel exchange left the node.
#[expect(
    clippy::large_enum_variant,
    reason = "one value per node, moved once: boxing buys nothing"
)]
pub(super) enum Exchanged {
    /// keadm ran in the channel; the node's result is decided.
    Done,
    /// The node could not unpack a packed copy of the binary or the release tarball, so keadm
    /// did not run: the upload goes the next way with the run, in a channel of its own.
    Refused(NodeFacts, Privilege, Upload),
    /// Nothing ran after the facts: the separate steps go on with them.
    Separate(NodeFacts, Privilege),
}

/// What goes to the node once its facts are in.
#[expect(
    clippy::large_enum_variant,
    reason = "one value per node, moved once: boxing buys nothing"
)]
enum Decision {
    /// The run's script, with this upload behind it (or none: keadm is there already).
    Run(NodeFacts, Privilege, Option<Deferred>),
    /// Stop after the facts; the separate steps go on.
    Separate(NodeFacts, Privilege),
    /// Stop after the facts; the node fails with this.
    Failed(StepError),
}

/// The upload the answer carries.
#[expect(
    clippy::large_enum_variant,
    reason = "one value per node, moved once: boxing buys nothing"
)]
enum Carried {
    Nothing,
    Upload(Deferred),
    /// It comes in channels of its own: the node reads keadm from a node of its site.
    OwnChannel,
}

/// What the channel's stdin has to send: the sudo password lines once the node asks for
/// them, then the answer once it is decided. Nothing more comes once it is `closed`.
#[derive(Default)]
struct Stdin {
    queue: VecDeque<Box<dyn Read>>,
    closed: bool,
}

impl Stdin {
    fn push(&mut self, reader: Box<dyn Read>) {
        self.queue.push_back(reader);
    }

    /// The last thing to send; after it, the end of input.
    fn close_with(&mut self, reader: Box<dyn Read>) {
        self.queue.push_back(reader);
        self.closed = true;
    }
}

type StdinSlot = RefCell<Stdin>;

/// The channel's stdin: what is queued, then `WouldBlock` until more is (the transport
/// then asks again after the next output), and the end of input once closed.
struct Answer<'s>(&'s StdinSlot);

impl Read for Answer<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut stdin = self.0.borrow_mut();
        while let Some(front) = stdin.queue.front_mut() {
            match front.read(buf)? {
                0 if !buf.is_empty() => {
                    stdin.queue.pop_front();
                }
                n => return Ok(n),
            }
        }
        if stdin.closed {
            Ok(0)
        } else {
            Err(io::ErrorKind::WouldBlock.into())
        }
    }
}

/// The channel's output: the facts up to [`FACTS_END`], whose line makes the decision;
/// after it, the run's output into the transcript.
struct Exchange<'x, 'a, 'c> {
    run: &'x mut Run<'a, 'c>,
    with_preflight: bool,
    names: &'x [&'a str],
    facts: CappedBuffer,
    /// A partial line of the facts.
    line: LineScan,
    /// What was decided, and when (the run's time counts from then).
    decided: Option<(Decision, Instant)>,
    watch: WatchReceived,
    stdin: &'x StdinSlot,
    /// The channel's deadline: the prepare step's, then the run's from the decision on.
    deadline: &'x Cell<Instant>,
    /// When the upload behind the answer left.
    times: Rc<SendTimes>,
    started: Instant,
}

impl Write for Exchange<'_, '_, '_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.decided.is_some() {
            return self.after_facts(buf).map(|()| buf.len());
        }
        let (facts, stdin) = (&mut self.facts, self.stdin);
        let password = self.run.node.sudo.then(|| password_of(self.run.node));
        if let Some(rest) = self.line.until(buf, FACTS_END, |line| {
            // Sudo's probe chose `sudo -S`: the password lines go first, or, without a
            // password, the end of input, so sudo fails at once instead of waiting.
            if let Some(password) = password
                && line.strip_suffix(b"\n") == Some(SUDO_WANTS_PASSWORD.as_bytes())
            {
                let mut stdin = stdin.borrow_mut();
                match password {
                    Some(p) => stdin.push(Box::new(Cursor::new(remote::password_preamble(p)))),
                    None => stdin.close_with(Box::new(io::empty())),
                }
            }
            facts.write_all(line)
        })? {
            self.decide();
            self.after_facts(rest)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        match self.decided {
            Some((Decision::Run(..), _)) => self.watch.finish(&mut self.run.transcript),
            Some(_) => Ok(()),
            None => self.facts.write_all(&self.line.take()),
        }
    }
}

impl Exchange<'_, '_, '_> {
    /// Output after the facts: the run's, into the transcript. Once the node was told to
    /// stop it prints nothing more.
    fn after_facts(&mut self, buf: &[u8]) -> io::Result<()> {
        match self.decided {
            Some((Decision::Run(..), _)) => self.watch.pass(buf, &mut self.run.transcript),
            _ => Ok(()),
        }
    }

    /// Reads the facts, decides, and puts the answer in the slot.
    fn decide(&mut self) {
        let now = Instant::now();
        self.run.add_time(Phase::Preparing, self.started);
        let text = self.facts.text();
        let (decision, answer) = self
            .run
            .decide(&text, self.with_preflight, self.names, &self.times)
            .unwrap_or_else(|err| (Decision::Failed(err), stop()));
        if let Decision::Run(_, _, deferred) = &decision {
            let upload = deferred.as_ref().map(|d| d.sent().1);
            // keadm's deadline starts now, as it would in a channel of its own, with
            // room for the upload; and only an upload has a line to wait for.
            self.deadline
                .set(now + self.run.keadm_time(upload.unwrap_or(0)));
            self.watch =
                WatchReceived::new(upload.is_some()).announcing(self.run.relay_announcer());
        }
        self.decided = Some((decision, now));
        self.stdin.borrow_mut().close_with(answer);
    }
}

/// The answer that stops the node after its facts: nothing more runs there.
fn stop() -> Box<dyn Read> {
    Box::new(Cursor::new(remote::answer("")))
}

impl<'a> Run<'a, '_> {
    /// Whether the node goes through [`Run::exchange`]: no image archives, no copyFrom
    /// files.
    pub(super) fn exchange_fits(&self) -> bool {
        self.images_in_play().is_none() && self.node.copy_files.is_empty()
    }

    /// Prepares, uploads and runs keadm in one exec channel where the facts allow; see
    /// the module's comment.
    pub(super) fn exchange(
        &mut self,
        conn: &mut dyn Connection,
        with_preflight: bool,
    ) -> Result<Exchanged, StepError> {
        let node = self.node;
        self.ctx
            .progress
            .phase(node.index, &node.name, Phase::Preparing);
        let started = Instant::now();
        let (mut script, names) = self.prepare_script(with_preflight);
        script.push_str(&remote::await_answer());
        if node.sudo {
            script = remote::with_sudo_probe(&script);
        }
        // The relay's steps in the login user's home run as the login user, first.
        let script = format!("{}{script}", self.relay_prepare_as_login());
        // The prepare step's deadline until the facts are in, then the run's.
        let deadline = Cell::new(started + node.deadlines.step);
        let slot: StdinSlot = RefCell::default();
        let times = Rc::new(SendTimes::default());
        self.probe_sent = Some(std::time::SystemTime::now());
        let mut exchange = Exchange {
            run: self,
            with_preflight,
            names: &names,
            facts: CappedBuffer::new(STEP_OUTPUT_CAP),
            line: LineScan::default(),
            decided: None,
            watch: WatchReceived::new(false),
            stdin: &slot,
            deadline: &deadline,
            times: times.clone(),
            started,
        };
        // Past keadm's deadline keadm is stopped with a grace period (`Run::stop`); past
        // the prepare step's, what runs is killed below.
        conn.leave_at_deadline(true);
        let result = conn.exec_until(&script, Some(&mut Answer(&slot)), &deadline, &mut exchange);
        conn.leave_at_deadline(false);
        let flushed = exchange.flush();
        let Exchange {
            facts,
            decided,
            watch,
            ..
        } = exchange;
        flushed.map_err(transcript_error)?;
        if matches!(result, Err(TransportError::Timeout { .. }))
            && !matches!(decided, Some((Decision::Run(..), _)))
        {
            conn.kill_left();
        }
        let decision = match decided {
            Some((decision, at)) => {
                self.add_time(Phase::Running, at);
                Some(decision)
            }
            None => {
                self.add_time(Phase::Preparing, started);
                None
            }
        };
        match decision {
            // The script ended before its facts were out: the upload dir cannot be used,
            // or the connection broke. Said as the prepare step says it.
            None => {
                let exit = result.map_err(|e| self.prepare_failed(e))?;
                let (facts, privilege) =
                    self.learn_prepared(&facts.text(), with_preflight, &names, &exit)?;
                Ok(Exchanged::Separate(facts, privilege))
            }
            Some(Decision::Failed(err)) => Err(err),
            Some(Decision::Separate(facts, privilege)) => {
                result.map_err(|e| self.prepare_failed(e))?;
                Ok(Exchanged::Separate(facts, privilege))
            }
            Some(Decision::Run(facts, privilege, deferred)) => {
                self.relay_settle(watch.seen(), deferred.as_ref().map(|d| d.sent().1));
                let refused =
                    self.keadm_result(conn, result, deferred, &watch, &times, privilege)?;
                Ok(match refused {
                    Some(upload) => Exchanged::Refused(facts, privilege, upload),
                    None => Exchanged::Done,
                })
            }
        }
    }

    /// The decision, from the facts the node printed: the answer's script and the upload
    /// behind it, or an answer of nothing.
    fn decide(
        &mut self,
        text: &str,
        with_preflight: bool,
        names: &[&str],
        times: &Rc<SendTimes>,
    ) -> Result<(Decision, Box<dyn Read>), StepError> {
        let (facts, privilege) =
            self.learn_prepared(text, with_preflight, names, &RemoteExit::Code(0))?;
        let deferred = match self.carried(&facts)? {
            Carried::OwnChannel => return Ok((Decision::Separate(facts, privilege), stop())),
            Carried::Nothing => None,
            Carried::Upload(deferred) => Some(deferred),
        };
        let file = match &deferred {
            Some(d) => Some(Clocked {
                inner: open_local(d.sent().0)?,
                times: times.clone(),
            }),
            None => None,
        };
        self.transcript.note(&format!(
            "one exec channel: the run's script{} follows the node's facts on the prepare step's channel",
            match &deferred {
                Some(d) => format!(" and {}", d.upload.name),
                None => String::new(),
            }
        ));
        let arrival = deferred.as_ref().map(|d| d.arrival(&self.node.upload_dir));
        let script = remote::answer(&self.keadm_script(&[], arrival));
        self.ctx
            .progress
            .phase(self.node.index, &self.node.name, Phase::Running);
        let answer: Box<dyn Read> = match file {
            Some(file) => Box::new(Cursor::new(script).chain(file)),
            None => Box::new(Cursor::new(script)),
        };
        Ok((Decision::Run(facts, privilege, deferred), answer))
    }

    /// What the answer carries: keadm, unless it is there already. Without copyFrom
    /// files keadm is the only upload there can be.
    fn carried(&mut self, facts: &NodeFacts) -> Result<Carried, StepError> {
        let Some(upload) = self.wanted_uploads(facts)?.pop() else {
            return Ok(Carried::Nothing);
        };
        if self.already_there(facts, &upload) {
            return Ok(Carried::Nothing);
        }
        // A node that reads keadm from a node of its site, or waits for one to have it,
        // does that in channels of its own (see `Run::upload_and_run`).
        if matches!(
            self.relay_claim(&upload, facts),
            Some(Role::From { .. } | Role::Wait)
        ) {
            return Ok(Carried::OwnChannel);
        }
        Ok(Carried::Upload(self.defer(upload)))
    }
}
