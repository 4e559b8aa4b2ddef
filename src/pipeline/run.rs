//! Running keadm: one script that receives the deferred last upload, moves the uploads
//! into place and runs the command; its exits 201 (the upload could not be written) and
//! 125 (the files could not be moved into place); and, at the deadline or the operator's
//! abort, the kill of the command's process group on the node.

use std::cell::Cell;
use std::io::{self, Read, Write};
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::privilege::{exec_as, password_of};
use super::upload::{
    Arrival, Deferred, Move, RECEIVE_FAILED, Upload, finalize_line, open_local, upload_error,
};
use super::{Run, StepError};
use crate::node_text::{CappedBuffer, EndlessLine, MAX_PENDING_LINE, STEP_OUTPUT_CAP, one_line};
use crate::outcome::Phase;
use crate::remote::relay::NOT_SERVING_LINE;
use crate::remote::{self, Privilege};
use crate::transport::{Connection, RemoteExit, TransportError};

/// The exit status of the run's script when its first step (`--reset-first`'s reset,
/// `--backup`'s backup) failed, so the command did not run (the step's own status is in
/// the line [`remote::first_exit`] reads).
pub(super) const FIRST_FAILED: i32 = 202;

/// How long the output a stopped command printed before it ended may take to arrive.
const LAST_OUTPUT_TIME: Duration = Duration::from_secs(2);

/// The line the run's script prints once the deferred upload is on the node, before it
/// moves anything or runs keadm: a connection that breaks before this line is an upload
/// that failed, whatever share of the file had left the control host (a packed copy is
/// read whole long before the node has unpacked it).
const RECEIVED: &str = "KB_RECEIVED";

/// Follows the run's output for the [`RECEIVED`] line: passes the output on without it
/// and notes when it went by. Until then output is passed on a line at a time (the
/// receiving script prints little); after it, as it comes. It keeps no writer of its
/// own, so the one-channel exchange can pass output through it to a transcript it
/// shares with its other work.
pub(super) struct WatchReceived {
    /// Whether there is a line to wait for (an upload rides in the channel).
    waits: bool,
    /// When the line went by.
    seen_at: Option<Instant>,
    line: LineScan,
    /// Called once when the line goes by (the site relay learns a node holds its copy),
    /// unless the node said before it that it does not serve.
    on_seen: Option<Box<dyn FnOnce()>>,
}

impl WatchReceived {
    /// A watch for the line, when `waits` (an upload rides in the channel); without,
    /// output passes as it comes.
    pub(super) fn new(waits: bool) -> WatchReceived {
        WatchReceived {
            waits,
            seen_at: None,
            line: LineScan::default(),
            on_seen: None,
        }
    }

    /// The same, calling `on_seen` once when the line goes by.
    pub(super) fn announcing(mut self, on_seen: Option<Box<dyn FnOnce()>>) -> WatchReceived {
        self.on_seen = on_seen;
        self
    }

    /// Whether the node has the upload: the line went by, or there was none to wait for.
    pub(super) fn seen(&self) -> bool {
        !self.waits || self.seen_at.is_some()
    }

    /// Passes `buf` on to `inner`, keeping back a partial line until the marker is seen.
    pub(super) fn pass(&mut self, buf: &[u8], inner: &mut dyn Write) -> io::Result<()> {
        if self.seen() {
            return inner.write_all(buf);
        }
        let on_seen = &mut self.on_seen;
        let each = |line: &[u8]| {
            // A node whose serve line says it does not serve is no source to announce.
            if line.starts_with(NOT_SERVING_LINE.as_bytes()) {
                *on_seen = None;
            }
            inner.write_all(line)
        };
        match self.line.until(buf, RECEIVED, each)? {
            Some(rest) => {
                self.seen_at = Some(Instant::now());
                if let Some(on_seen) = self.on_seen.take() {
                    on_seen();
                }
                inner.write_all(rest)
            }
            None => Ok(()),
        }
    }

    /// Passes on the partial line kept back, at the end of the output.
    pub(super) fn finish(&mut self, inner: &mut dyn Write) -> io::Result<()> {
        inner.write_all(&self.line.take())?;
        inner.flush()
    }
}

/// Scans a node's output for a line that is exactly one of the tool's markers, holding
/// the unfinished line between writes. That line is bounded: a node that sends more than
/// [`MAX_PENDING_LINE`] bytes without a line break is refused with an [`EndlessLine`]
/// error, not buffered on.
#[derive(Default)]
pub(super) struct LineScan {
    partial: Vec<u8>,
    /// The start of the last whole line, for the error.
    last: Vec<u8>,
}

impl LineScan {
    /// Every whole line of `buf` before the `marker` line goes to `each`, and what
    /// follows the marker line is returned. `None` when `buf` ends before the marker.
    pub(super) fn until<'b>(
        &mut self,
        buf: &'b [u8],
        marker: &'static str,
        mut each: impl FnMut(&[u8]) -> io::Result<()>,
    ) -> io::Result<Option<&'b [u8]>> {
        let mut rest = buf;
        loop {
            let end = rest.iter().position(|&b| b == b'\n');
            let taken = end.map_or(rest.len(), |at| at + 1);
            if self.partial.len() + taken > MAX_PENDING_LINE + 1 {
                // Only the unfinished line's start is kept for the error, never more.
                return Err(EndlessLine::error(&self.partial, &self.last, marker));
            }
            self.partial.extend_from_slice(&rest[..taken]);
            rest = &rest[taken..];
            if end.is_none() {
                return Ok(None);
            }
            let whole = std::mem::take(&mut self.partial);
            if whole.strip_suffix(b"\n") == Some(marker.as_bytes()) {
                return Ok(Some(rest));
            }
            each(&whole)?;
            self.last.clear();
            self.last.extend_from_slice(&whole[..whole.len().min(128)]);
        }
    }

    /// The unfinished line, at the end of the output.
    pub(super) fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.partial)
    }
}

/// When the deferred upload left the control host: its first byte and its end read from
/// the local file. The end is read once the SSH engine has taken the last byte, which may
/// still sit in socket buffers and on the link, so the time from it to the node's
/// [`RECEIVED`] line bounds the node's work after the last byte from above.
#[derive(Default)]
pub(super) struct SendTimes {
    first: Cell<Option<Instant>>,
    end: Cell<Option<Instant>>,
}

/// Reads `inner`, noting in `times` when its first byte and its end were read.
pub(super) struct Clocked<R> {
    pub(super) inner: R,
    pub(super) times: Rc<SendTimes>,
}

impl<R: Read> Read for Clocked<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let slot = if n > 0 {
            &self.times.first
        } else {
            &self.times.end
        };
        if slot.get().is_none() && !buf.is_empty() {
            slot.set(Some(Instant::now()));
        }
        Ok(n)
    }
}

/// A writer through a [`WatchReceived`] into `inner`.
struct Watched<'w> {
    watch: WatchReceived,
    inner: &'w mut dyn Write,
}

impl Write for Watched<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.watch.pass(buf, self.inner).map(|()| buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.watch.finish(self.inner)
    }
}

/// The error of a transcript that cannot be written.
pub(super) fn transcript_error(err: io::Error) -> StepError {
    StepError::new(
        Phase::Running,
        format!("Cannot write the node's transcript: {err}."),
    )
}

impl Run<'_, '_> {
    /// Receives the deferred upload, moves the uploads into place and runs keadm. Returns
    /// the deferred upload back, without the form it went as, when the node could not
    /// unpack that form: keadm did not run, and the caller sends the next form.
    pub(super) fn run_keadm(
        &mut self,
        conn: &mut dyn Connection,
        moves: &[Move],
        deferred: Option<Deferred>,
        privilege: Privilege,
    ) -> Result<Option<Upload>, StepError> {
        self.timed(Phase::Running, |run| {
            let node = run.node;
            let arrival = deferred.as_ref().map(|d| d.arrival(&node.upload_dir));
            let script = run.keadm_script(moves, arrival);
            let deadline =
                Instant::now() + run.keadm_time(deferred.as_ref().map_or(0, |d| d.sent().1));
            let times = Rc::new(SendTimes::default());
            let mut file = match &deferred {
                Some(d) => Some(Clocked {
                    inner: open_local(d.sent().0)?,
                    times: times.clone(),
                }),
                None => None,
            };
            let watch = WatchReceived::new(deferred.is_some()).announcing(run.relay_announcer());
            let (result, watch) = run.exec_run_script(
                conn,
                &script,
                privilege,
                file.as_mut().map(|f| f as &mut dyn Read),
                deadline,
                watch,
            )?;
            run.relay_settle(watch.seen(), deferred.as_ref().map(|d| d.sent().1));
            run.keadm_result(conn, result, deferred, &watch, &times, privilege)
        })
    }

    /// Runs the run's `script` with `privilege`, `stdin` after sudo's password lines when
    /// sudo wants it, its output through `watch` into the transcript; how it ended, and the
    /// watch (whether the received line went by).
    pub(super) fn exec_run_script(
        &mut self,
        conn: &mut dyn Connection,
        script: &str,
        privilege: Privilege,
        stdin: Option<&mut dyn Read>,
        deadline: Instant,
        watch: WatchReceived,
    ) -> Result<(Result<RemoteExit, TransportError>, WatchReceived), StepError> {
        let mut output = Watched {
            watch,
            inner: &mut self.transcript,
        };
        // Past its deadline keadm is stopped by `stop`, as the run's privilege, with a
        // grace period, not killed by the transport.
        conn.leave_at_deadline(true);
        let result = exec_as(
            conn,
            script,
            privilege,
            password_of(self.node),
            stdin,
            deadline,
            &mut output,
        );
        conn.leave_at_deadline(false);
        output.flush().map_err(transcript_error)?;
        Ok((result, output.watch))
    }

    /// The run's script: receive the deferred upload, move the uploads into place, run
    /// the command (after `--reset-first`'s reset). Notes the command in the transcript.
    pub(super) fn keadm_script(&mut self, moves: &[Move], arrival: Option<Arrival>) -> String {
        let node = self.node;
        let mut script = String::new();
        let mut moves = moves.to_vec();
        if let Some(arrival) = arrival {
            // A subshell, so its umask and cd do not reach keadm. A node that will serve
            // its copy to its site says so before the received line, which lets the site
            // read from it.
            script.push_str(&format!(
                "( {} ) || exit {}\n{}echo {RECEIVED}\n",
                arrival.script,
                arrival.failed,
                self.serve_line(&arrival.to_move.0)
            ));
            moves.push(arrival.to_move);
        }
        script.push_str(&finalize_line(&node.upload_dir, &moves));
        let mut command = match &node.first_step {
            Some(first) => remote::first_then(
                first.kind.what(),
                &first.command,
                &node.command,
                FIRST_FAILED,
            ),
            None => node.command.clone(),
        };
        // An upgrade whose target the node already runs is not run again (nor backed up).
        if let Some(target) = node
            .edge_task
            .as_ref()
            .filter(|t| t.task == crate::keadm_cmd::EdgeTask::Upgrade)
            .and_then(|t| t.target_version.as_deref())
        {
            command = format!("{}{command}", remote::unless_running(target));
        }
        // Before anything else: an upgrade that stops early must not leave an old report
        // to be read as its own.
        if node.edge_task.is_some() {
            command = format!("{}\n{command}", remote::REMOVE_REPORT);
        }
        script.push_str(&remote::run_script(&node.upload_dir, node.index, &command));
        self.transcript
            .note(&format!("running: {}", node.redactor.redact(&node.command)));
        script
    }

    /// How long the run may take: the command's deadline, plus room for the transfer of
    /// an upload of `upload_size` bytes in its channel (1 s per MiB), not a whole upload
    /// deadline: the command's own deadline must stay what the operator set.
    pub(super) fn keadm_time(&self, upload_size: u64) -> Duration {
        let deadlines = &self.node.deadlines;
        deadlines.command + deadlines.upload_per_mib * (upload_size.div_ceil(1 << 20) as u32)
    }

    /// What the run's script's end means, with `watch` telling whether the deferred
    /// upload was on the node (the [`RECEIVED`] line went by) and when, and `times` when
    /// it left. Returns the deferred upload back, without the form it went as, when the
    /// node could not unpack that form.
    pub(super) fn keadm_result(
        &mut self,
        conn: &mut dyn Connection,
        result: Result<RemoteExit, TransportError>,
        deferred: Option<Deferred>,
        watch: &WatchReceived,
        times: &SendTimes,
        privilege: Privilege,
    ) -> Result<Option<Upload>, StepError> {
        let received = watch.seen();
        let (result, deferred) = match (result, deferred) {
            // The connection broke before the node had the whole file: an upload
            // failure.
            (Err(e), Some(d))
                if !received
                    && !matches!(
                        e,
                        TransportError::Aborted { .. } | TransportError::Timeout { .. }
                    ) =>
            {
                return Err(upload_error(&d.upload, e));
            }
            pair => pair,
        };
        if let (Some(d), Ok(RemoteExit::Code(code))) = (deferred, &result) {
            let sent = d.sent().1;
            if *code == RECEIVE_FAILED
                && let Some(form) = d.packed_as()
            {
                // Its bytes crossed the wire all the same.
                self.bytes_uploaded += sent;
                let next = d.upload.next_form();
                self.transcript.note(&format!(
                    "the node could not unpack {form} in the run's channel, so keadm did not run; sending {} instead",
                    next.sent_as()
                ));
                return Ok(Some(next));
            }
            if *code == RECEIVE_FAILED {
                let err = StepError::new(
                    Phase::Uploading,
                    format!(
                        "Cannot upload the file {}: the node could not write it.",
                        d.upload.name
                    ),
                );
                return Err(self.explain_upload_failure(conn, err, &d.upload, &d.tmp, privilege));
            }
            self.bytes_uploaded += sent;
            if let Some(note) = d.sent_note() {
                self.transcript.note(&note);
            }
            self.transcript.note(&format!(
                "uploaded {} ({sent} bytes, mode {:04o}) in the run's channel",
                d.upload.name, d.upload.mode
            ));
            if let (Some(first), Some(end), Some(at)) =
                (times.first.get(), times.end.get(), watch.seen_at)
            {
                // What the benchmark reads: the node's work after the last byte, at
                // most, against the transfer.
                self.transcript.note(&format!(
                    "node-side time after the last byte: at most {:.3} s (the transfer, first to last byte: {:.3} s)",
                    at.saturating_duration_since(end).as_secs_f64(),
                    end.saturating_duration_since(first).as_secs_f64()
                ));
            }
        }
        self.keadm_ended(conn, result, privilege).map(|()| None)
    }

    /// The node's last line of output, as one short escaped line for the record.
    pub(super) fn last_words(&self) -> Option<String> {
        self.transcript.tail(1).pop().map(|l| one_line(&l, 200))
    }

    /// What the run's exit (or transport failure) means for the node.
    pub(super) fn keadm_ended(
        &mut self,
        conn: &mut dyn Connection,
        result: Result<RemoteExit, TransportError>,
        privilege: Privilege,
    ) -> Result<(), StepError> {
        let node = self.node;
        if let Some(first) = &node.first_step {
            self.first_step_ended(first, &result)?;
        }
        match result {
            Ok(RemoteExit::Code(0)) => {
                self.transcript.note("keadm exited with status 0");
                if node.keadm_args.is_edge_reset() {
                    self.verify_reset(conn, privilege)?;
                }
                if let Some(task) = &node.edge_task {
                    self.check_edge_task(conn, privilege, task, Ok(()))?;
                }
                Ok(())
            }
            Ok(exit) => {
                let code = match &exit {
                    RemoteExit::Code(c) => Some(*c),
                    RemoteExit::Signal(_) => None,
                };
                let status = match &exit {
                    RemoteExit::Code(c) => format!("Process exited with status {c}"),
                    RemoteExit::Signal(s) => format!("Process exited from signal {s}"),
                };
                // keadm's own line (`failed to execute keadm command %s: %v`), exactly:
                // readers of batch_process_log.txt match on it, up to the status at its
                // end. What keadm printed last goes beside it, not into it.
                let failed = StepError {
                    phase: Phase::Running,
                    message: format!("failed to execute keadm command {}: {status}", node.command),
                    ending: Phase::Failed,
                    exit_status: code,
                    class: None,
                    last_output: self.last_words(),
                };
                match &node.edge_task {
                    // What keadm's report says of the failure goes beside keadm's line.
                    Some(task) => self.check_edge_task(conn, privilege, task, Err(failed)),
                    None => Err(failed),
                }
            }
            Err(TransportError::Timeout { .. }) => {
                // What keadm printed last before its deadline, not what the node's logs
                // read below add to the transcript.
                let last_output = self.last_words();
                let how = self.stop(conn, privilege);
                if node.keadm_args.is_join() {
                    self.edgecore_log(conn, privilege);
                }
                if let Some(task) = &node.edge_task {
                    // Cut off half way, the upgrade may have stopped edgecore.
                    self.edge_task_began(task);
                    self.roll_back_if_planned(conn, privilege);
                }
                Err(StepError {
                    phase: Phase::Running,
                    message: format!(
                        "The keadm command ran past its {} s deadline and {}.",
                        node.deadlines.command.as_secs(),
                        how
                    ),
                    ending: Phase::TimedOut,
                    exit_status: None,
                    class: None,
                    last_output,
                })
            }
            Err(TransportError::Aborted { .. }) => {
                // Under sudo the command belongs to root: kill it as root too.
                let killed = self.kill(conn, privilege);
                Err(StepError {
                    phase: Phase::Running,
                    message: format!(
                        "Cancelled by the operator; the keadm command {} on the node.",
                        if killed {
                            "was killed"
                        } else {
                            "could not be confirmed killed"
                        }
                    ),
                    ending: Phase::Interrupted,
                    exit_status: None,
                    class: None,
                    last_output: None,
                })
            }
            // keadm's own line for any failed run, whatever the error says after it.
            Err(e) => Err(StepError::new(
                Phase::Running,
                format!("failed to execute keadm command {}: {e}", node.command),
            )),
        }
    }

    /// Appends the last lines of edgecore's log to the transcript: a join that timed out
    /// waiting for certificates says why only there.
    fn edgecore_log(&mut self, conn: &mut dyn Connection, privilege: Privilege) {
        let deadline = Instant::now() + self.node.deadlines.step;
        self.transcript
            .note("the last lines of edgecore's log follow");
        let _ = exec_as(
            conn,
            &remote::EDGECORE_LOG,
            privilege,
            password_of(self.node),
            None,
            deadline,
            &mut self.transcript,
        );
    }

    /// Stops the command's process group on the node after its deadline, through a fresh
    /// channel with the run's privilege: SIGTERM, the grace period, SIGKILL
    /// ([`remote::stop_script`]). Notes in the transcript which signal ended it, and
    /// returns how the failure's message says it (`was stopped on the node (SIGTERM)`).
    /// Where the run's group was not found (the deadline came before the script got to
    /// keadm), what this connection runs on the node is killed as the transport would.
    fn stop(&mut self, conn: &mut dyn Connection, privilege: Privilege) -> String {
        conn.set_abort(None);
        let grace = self.node.deadlines.kill_grace.as_secs();
        let mut output = CappedBuffer::new(STEP_OUTPUT_CAP);
        let deadline = Instant::now() + self.node.deadlines.kill_grace + self.node.deadlines.step;
        let result = exec_as(
            conn,
            &remote::stop_script(&self.node.upload_dir, self.node.index, grace),
            privilege,
            password_of(self.node),
            None,
            deadline,
            &mut output,
        );
        let term = "the deadline passed: sent SIGTERM to the command's process group";
        let stopped = match &result {
            Ok(_) => remote::parse_stopped(&output.text()),
            Err(_) => None,
        };
        let (note, said) = match (stopped, &result) {
            (Some(remote::Stopped::ByTerm), _) => (
                format!("{term}; it exited within the grace period"),
                "was stopped on the node (SIGTERM)".to_string(),
            ),
            (Some(remote::Stopped::ByKill), _) if grace == 0 => (
                "the deadline passed: sent SIGKILL to the command's process group (--kill-grace 0)"
                    .to_string(),
                "was killed on the node (SIGKILL)".to_string(),
            ),
            (Some(remote::Stopped::ByKill), _) => (
                format!("{term}; it did not exit within {grace} s of SIGTERM: sent SIGKILL"),
                format!("was killed on the node (SIGKILL, {grace} s after SIGTERM)"),
            ),
            (Some(remote::Stopped::Gone), _) => (
                "the deadline passed: nothing of the command's process group was running any more; killed what else this connection ran on the node".to_string(),
                "was killed on the node".to_string(),
            ),
            (None, Ok(_)) => (
                "the deadline passed: the node had no record of the command's process group (the script had not reached keadm); killed what this connection ran on the node".to_string(),
                "was killed on the node".to_string(),
            ),
            (None, Err(e)) => (
                format!("the deadline passed: the stop of the command's process group could not be confirmed ({e})"),
                "could not be confirmed killed on the node".to_string(),
            ),
        };
        if matches!(
            stopped,
            Some(remote::Stopped::ByTerm | remote::Stopped::ByKill)
        ) {
            // What it printed while it stopped (its cleanup): already sent, since nothing
            // of it runs any more, so a short wait reads it.
            let _ = conn.finish_left(&mut self.transcript, Instant::now() + LAST_OUTPUT_TIME);
        } else {
            conn.kill_left();
        }
        self.transcript.note(&note);
        said
    }

    /// Kills the command's process group on the node through a fresh channel.
    fn kill(&mut self, conn: &mut dyn Connection, privilege: Privilege) -> bool {
        // This cleanup must run even when the operator has asked to abort.
        conn.set_abort(None);
        let mut output = CappedBuffer::new(STEP_OUTPUT_CAP);
        let deadline = Instant::now() + self.node.deadlines.step;
        let result = exec_as(
            conn,
            &remote::kill_script(&self.node.upload_dir, self.node.index),
            privilege,
            password_of(self.node),
            None,
            deadline,
            &mut output,
        );
        let ok = matches!(result, Ok(RemoteExit::Code(0)));
        self.transcript.note(&format!(
            "kill of the command's process group {}",
            if ok {
                "succeeded"
            } else {
                "failed (the command may have ended already)"
            }
        ));
        result.is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What [`WatchReceived`] passes on when `text` is written in two pieces cut at
    /// `cut`, and whether it saw the line.
    fn watched(text: &[u8], cut: usize) -> (String, bool) {
        let mut out = Vec::new();
        let mut watched = Watched {
            watch: WatchReceived::new(true),
            inner: &mut out,
        };
        watched.write_all(&text[..cut]).unwrap();
        watched.write_all(&text[cut..]).unwrap();
        watched.flush().unwrap();
        let seen = watched.watch.seen();
        (String::from_utf8(out).unwrap(), seen)
    }

    /// Review finding 2: a node that never ends its line while the receipt is awaited
    /// is refused once the line passes its cap, with what it sent, not buffered on.
    #[test]
    fn an_endless_line_before_the_receipt_is_refused_at_its_cap() {
        let mut out = Vec::new();
        let mut watched = Watched {
            watch: WatchReceived::new(true),
            inner: &mut out,
        };
        watched.write_all(b"receiving\nKB_ARCH").unwrap();
        let zeros = vec![0u8; 16 * 1024];
        let err = (0..64)
            .find_map(|_| watched.write_all(&zeros).err())
            .expect("a line of 1 MiB was taken");
        assert!(watched.watch.line.partial.len() <= MAX_PENDING_LINE);
        let text = err.to_string();
        assert!(text.contains("without a line break"), "{text}");
        assert!(text.contains("KB_ARCH\\x00\\x00"), "{text}");
        assert!(text.len() < 400, "{text}");
    }

    /// The marker is dropped and noted however the output is cut into writes, and the
    /// rest passes through in order.
    #[test]
    fn the_received_line_is_noted_and_dropped_wherever_the_writes_cut_it() {
        let text = format!("receiving\n{RECEIVED}\nkeadm says hello\npartial");
        for cut in 0..text.len() {
            assert_eq!(
                watched(text.as_bytes(), cut),
                ("receiving\nkeadm says hello\npartial".to_string(), true),
                "cut at {cut}"
            );
        }
        // Without the marker nothing is lost, and nothing is noted.
        let text = b"KB_XZ_FAILED\nno newline";
        assert_eq!(
            watched(text, 5),
            (String::from_utf8(text.to_vec()).unwrap(), false)
        );
    }

    /// A node whose serve line printed that it does not serve is not announced as a
    /// source when its copy is in; one that served is.
    #[test]
    fn a_node_that_says_it_does_not_serve_is_not_announced() {
        for (said, announced) in [
            (
                "KB_RELAY_NOT_SERVING the login user's .ssh/authorized_keys is a symbolic link\n",
                false,
            ),
            ("", true),
        ] {
            let called = std::rc::Rc::new(Cell::new(false));
            let flag = called.clone();
            let mut out = Vec::new();
            let mut watch =
                WatchReceived::new(true).announcing(Some(Box::new(move || flag.set(true))));
            let text = format!("receiving\n{said}{RECEIVED}\nkeadm says hello\n");
            watch.pass(text.as_bytes(), &mut out).unwrap();
            assert!(watch.seen());
            assert_eq!(called.get(), announced, "{said}");
            assert_eq!(
                String::from_utf8(out).unwrap(),
                format!("receiving\n{said}keadm says hello\n")
            );
        }
    }
}
