//! One node, start to finish: connect, prepare (mkdir + checks + `uname -m` + sidecars in
//! one round trip), put the offline images into the runtime (joins), upload what is
//! missing, run keadm. Each step is timed and has its own
//! deadline; the result is a [`NodeOutcome`]. The pipeline never prints: everything it has
//! to say goes into the node's transcript and outcome.
//!
//! It reaches the node only through [`transport::Connector`], so every branch can be
//! unit-tested against the scripted fake transport. The steps live in submodules by
//! concern: `connect` (the connect spec, retries and backoff), `prepare` (the pre-flight
//! probe and the preparatory round trip), `images` (offline image archives: which the
//! runtime lacks, their upload and import), `upload` (what to send and how, and why an
//! upload failed), `run` (keadm, its deadline and the kill) and `privilege` (the one place
//! that wraps scripts for sudo and feeds it the password).

mod after_join;
mod connect;
mod edge_task;
mod exchange;
mod first_step;
mod identity;
mod images;
mod prepare;
mod privilege;
pub mod relay;
mod reset_check;
mod run;
mod status;
mod upload;

pub use status::status_only;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::arch::Arch;
use crate::cancel::Cancel;
use crate::diagnosis::FailureClass;
use crate::image_ref::ImageRef;
use crate::kubeedge::classify;
use crate::options::PreflightMode;
use crate::outcome::{NodeOutcome, Phase, PreflightFinding, ProbeError, Probed, StepTimes, now};
use crate::plan::NodePlan;
use crate::remote::{NodeFacts, Privilege};
use crate::report::RunDir;
use crate::report::progress::Progress;
use crate::report::transcript::Transcript;
use crate::stage::{OfflineImages, Stager};
use crate::transport::{self, Connection, TransportError};
use exchange::Exchanged;

pub use after_join::edgecore_state;
pub use edge_task::roll_back;
pub use identity::identity;

/// What every node's pipeline shares.
pub struct Context<'a> {
    /// Opens the connections: the SSH engine in production, a scripted fake in tests.
    pub connector: &'a dyn transport::Connector,
    /// None when no node needs a staged binary.
    pub stager: Option<&'a Stager>,
    pub known_hosts: PathBuf,
    /// The shared connections per jump host (`--jump-connections`).
    pub jump_connections: usize,
    pub run_dir: &'a RunDir,
    pub cancel: &'a Cancel,
    pub verify_remote: bool,
    /// Makes temporary upload names unique per run.
    pub run_token: String,
    /// Base of the connect retry backoff (1 s by default; tests shorten it).
    pub retry_base: Duration,
    /// `--handshakes-per-host`: at most this many SSH handshakes in flight to one sshd.
    pub handshakes_per_host: usize,
    /// Told of every phase change, for the live status line.
    pub progress: &'a Progress,
    pub preflight: PreflightMode,
    /// The largest staged binary, for the pre-flight disk check.
    pub binary_size_hint: u64,
    /// The offline image archives per arch, listed on the control host before any node:
    /// `Some` when the run is set up for images without a registry (keadm.offlineImages,
    /// or an `<arch>/images` directory in the offline directory), even with no archive.
    /// Joins then get their arch's archives imported, and the pre-flight probe checks the
    /// images keadm will ask for.
    pub offline_images: Option<&'a OfflineImages>,
    /// keadm.keadmVersion: the version keadm join asks for without --kubeedge-version.
    pub keadm_version: Option<&'a str>,
    /// keadm.extraImages: checked by the pre-flight image check as keadm's own are.
    pub extra_images: &'a [ImageRef],
    /// The sites' relay, when `--relay auto` and some site has two or more nodes.
    pub relay: Option<std::sync::Arc<relay::Relay>>,
}

/// A step's failure: the phase it happened in and the reason, in sentences.
struct StepError {
    phase: Phase,
    message: String,
    /// The node's final phase: Failed, TimedOut, Interrupted (the operator's second
    /// Ctrl-C) or Skipped (strict pre-flight left it untouched).
    ending: Phase,
    exit_status: Option<i32>,
    /// keadm-batch's own failure class (it could not connect, log in, upload...); `None`
    /// when keadm ran and its output decides the class.
    class: Option<FailureClass>,
    /// For a failed keadm command, the last line it printed: shown beside keadm's line,
    /// never inside it.
    last_output: Option<String>,
}

impl StepError {
    /// A failure of `phase`. An upload's failure is of class `upload`; other phases
    /// set their class with [`StepError::class`].
    fn new(phase: Phase, message: impl Into<String>) -> StepError {
        StepError {
            phase,
            message: message.into(),
            ending: Phase::Failed,
            exit_status: None,
            class: (phase == Phase::Uploading).then_some(FailureClass::Upload),
            last_output: None,
        }
    }

    fn class(self, class: FailureClass) -> StepError {
        StepError {
            class: Some(class),
            ..self
        }
    }

    /// The error of a transport call made during `phase`: `context`, a sentence saying
    /// what could not be done, then the transport's own sentences saying why.
    fn transport(phase: Phase, context: String, err: TransportError) -> StepError {
        let class = match phase {
            // keadm ran (or was about to): its output decides.
            Phase::Running => None,
            Phase::Uploading if !matches!(err, TransportError::Aborted { .. }) => {
                Some(FailureClass::Upload)
            }
            _ => transport_class(&err),
        };
        StepError {
            phase,
            ending: match err {
                TransportError::Aborted { .. } => Phase::Interrupted,
                TransportError::Timeout { .. } => Phase::TimedOut,
                _ => Phase::Failed,
            },
            message: format!("{context} {err}"),
            exit_status: None,
            class,
            last_output: None,
        }
    }
}

/// The class of a connection or command that failed before keadm ran; `None` for the
/// operator's abort, which is no failure of the node.
fn transport_class(err: &TransportError) -> Option<FailureClass> {
    Some(match err {
        TransportError::Aborted { .. } | TransportError::OutputWrite { .. } => return None,
        TransportError::Jump { source, .. } => return transport_class(source),
        TransportError::AuthRejected { .. } | TransportError::AuthSetup { .. } => {
            FailureClass::Auth
        }
        TransportError::HostKeyChanged { .. }
        | TransportError::HostKeyUnknown { .. }
        | TransportError::HostKeyRevoked { .. }
        | TransportError::HostKeyNotVerifiable { .. }
        | TransportError::KnownHosts { .. } => FailureClass::HostKey,
        TransportError::AdmissionRefused { .. } => FailureClass::SshAdmissionRefused,
        TransportError::LocalRead { .. } => FailureClass::Upload,
        // Neither the network nor the login: the node (or what runs on it) misbehaved.
        TransportError::EndlessOutput { .. } => FailureClass::Unknown,
        // Refused, unresolvable, silent, a failed handshake, a lost connection, a step
        // past its deadline: the node could not be reached (or stopped answering).
        TransportError::Resolve { .. }
        | TransportError::Refused { .. }
        | TransportError::Connect { .. }
        | TransportError::ConnectTimeout { .. }
        | TransportError::PaceTimeout { .. }
        | TransportError::Handshake { .. }
        | TransportError::Session { .. }
        | TransportError::Timeout { .. } => FailureClass::Unreachable,
    })
}

/// One node's pipeline while it runs: what it has learned and counted so far.
struct Run<'a, 'c> {
    node: &'a NodePlan,
    ctx: &'a Context<'c>,
    transcript: Transcript,
    steps: StepTimes,
    arch: Option<Arch>,
    bytes_uploaded: u64,
    uploads_skipped: u32,
    connect_attempts: u32,
    findings: Vec<PreflightFinding>,
    /// The runtime's sandbox image, as the pre-flight image check read it.
    sandbox_image: Option<String>,
    /// The control host's clock when the pre-flight probe was sent, for the clock check.
    probe_sent: Option<std::time::SystemTime>,
    /// With `--reset-first`, how `keadm reset edge --force` ended.
    reset_exit_status: Option<i32>,
    /// Whether a reset command exited with 0 and the node was checked clean after it.
    reset_verified: bool,
    /// The node's part in its site's relay, once claimed.
    relay: Option<relay::NodeRelay>,
    /// The node's host key as verified at connect, for the site's nodes that read from it.
    host_key: Option<String>,
    /// Why the node cannot serve its site, as the prepare step found.
    relay_no_serve: Option<String>,
    /// The runtime the transcript last said keadm will use: said again only for another
    /// runtime, never for other words about the same one.
    runtime_noted: Option<crate::remote::Runtime>,
    /// The edge's upgrade family: keadm's report, the running edgecore, backup, rollback.
    edge_task: Option<crate::outcome::EdgeTaskRecord>,
    /// An upgrade's runtime socket, as edgecore.yaml names it.
    upgrade_runtime: Option<String>,
    /// The image archives the node serves to its site from its upload dir.
    archives_served: Vec<String>,
}

/// `--preflight-only`: connects and runs only the read-only probe. Changes nothing.
/// The operator's second Ctrl-C aborts a probe under way, as it aborts a run.
pub fn preflight_only(node: &NodePlan, ctx: &Context) -> Result<Probed, ProbeError> {
    let mut run = Run::new(node, ctx, Transcript::in_memory(node.redactor.clone()));
    let result = run.connect().and_then(|mut conn| {
        let conn = conn.as_mut();
        run.abort_on_second_interrupt(conn);
        run.preflight(conn)
    });
    match result {
        Ok(()) => Ok(Probed {
            findings: run.findings,
            sandbox_image: run.sandbox_image,
        }),
        Err(e) => Err(ProbeError {
            phase: e.phase,
            reason: node.redactor.redact(&e.message),
        }),
    }
}

/// Processes one node and returns its outcome. Never panics on node behaviour.
pub fn process(node: &NodePlan, ctx: &Context) -> NodeOutcome {
    let started_at = now();
    let transcript_path = ctx.run_dir.transcript_path(node.index, &node.name);
    let transcript = Transcript::create(&transcript_path, node.redactor.clone())
        .map(|t| t.labelled(&node.name))
        .unwrap_or_else(|err| {
            log::warn!(
                "Cannot write the transcript {} of node {}: {err}. Its notes are kept in memory only.",
                transcript_path.display(),
                node.name
            );
            Transcript::in_memory(node.redactor.clone())
        });
    let mut run = Run::new(node, ctx, transcript);
    let result = run.all_steps();
    let mut own_class = None;
    let mut last_output = None;
    let (phase, failed_in, error, exit_status) = match result {
        Ok(()) => (Phase::Succeeded, None, None, Some(0)),
        Err(e) => {
            let phase = e.ending;
            run.transcript
                .note(&format!("{}: {}", phase.as_str(), e.message));
            own_class = e.class;
            // Defence in depth: whatever path node text took into a message, it reaches
            // the console and the log only with control characters escaped.
            let clean = |text: &str| crate::node_text::escape_controls(&node.redactor.redact(text));
            last_output = e.last_output.as_deref().map(clean);
            (phase, Some(e.phase), Some(clean(&e.message)), e.exit_status)
        }
    };
    // Why the node failed: keadm-batch's own class when it never got keadm to run (or to
    // the end of its upload), else read from what keadm (and edgecore) printed.
    let failure_class = if matches!(phase, Phase::Failed | Phase::TimedOut) {
        let keadm_decides = node.keadm_args.is_join() || failed_in == Some(Phase::Running);
        own_class.or_else(|| {
            keadm_decides
                .then(|| classify::classify(&run.transcript.tail(80), phase == Phase::TimedOut))
        })
    } else {
        None
    };
    // A join on a node pre-flight found joined already: that is the cause to fix.
    let (failure_class, decided_by) = match failure_class {
        Some(class) if node.keadm_args.is_join() => {
            let (class, why) = classify::with_findings(class, &run.findings);
            (Some(class), why)
        }
        other => (other, None),
    };
    if let Some(class) = &failure_class {
        let why = decided_by
            .map(|why| format!(" ({why})"))
            .unwrap_or_default();
        run.transcript.note(&format!("failure class: {class}{why}"));
    }
    // Written out before the relay is told: a source cleared now (this node, or another
    // that served it) adds its removal's note to its transcript file.
    run.transcript.finish();
    run.relay_done();
    ctx.progress.phase(node.index, &node.name, phase);
    NodeOutcome {
        index: node.index,
        name: node.name.clone(),
        address: node.address(),
        phase,
        failed_in,
        error,
        last_output,
        failure_class,
        task: Some(node.keadm_args.task()),
        preflight: std::mem::take(&mut run.findings),
        exit_status,
        reset_exit_status: run.reset_exit_status,
        reset_verified: run.reset_verified,
        arch: run.arch,
        bytes_uploaded: run.bytes_uploaded,
        uploads_skipped: run.uploads_skipped,
        connect_attempts: run.connect_attempts,
        steps: run.steps,
        started_at,
        finished_at: now(),
        transcript: Some(transcript_path.display().to_string()),
        cluster: None,
        upgrade: run.edge_task.take(),
        wave: None,
        site: None,
        drain: None,
    }
}

impl<'a, 'c> Run<'a, 'c> {
    fn new(node: &'a NodePlan, ctx: &'a Context<'c>, transcript: Transcript) -> Self {
        Run {
            node,
            ctx,
            transcript,
            steps: StepTimes::default(),
            arch: None,
            bytes_uploaded: 0,
            uploads_skipped: 0,
            connect_attempts: 0,
            findings: Vec::new(),
            sandbox_image: None,
            reset_exit_status: None,
            reset_verified: false,
            relay: None,
            host_key: None,
            relay_no_serve: None,
            probe_sent: None,
            runtime_noted: None,
            edge_task: None,
            upgrade_runtime: None,
            archives_served: Vec::new(),
        }
    }

    /// Lets the operator's second Ctrl-C abort whatever runs on `conn` (the first one
    /// only stops new nodes from starting).
    fn abort_on_second_interrupt(&self, conn: &mut dyn Connection) {
        let cancel = self.ctx.cancel.clone();
        conn.set_abort(Some(std::sync::Arc::new(move || cancel.aborting())));
    }

    fn all_steps(&mut self) -> Result<(), StepError> {
        self.relay_head_start();
        let mut conn = self.connect()?;
        let conn = conn.as_mut();
        self.abort_on_second_interrupt(conn);
        self.host_key = conn.host_key();
        let preflight = self.ctx.preflight != PreflightMode::Off && self.node.keadm_args.is_join();
        let probe_in_prepare = preflight && self.preflight_rides_with_prepare();
        if preflight && !probe_in_prepare {
            self.preflight(conn)?;
        }
        if self.node.keadm_args.is_edge_upgrade() && self.images_in_play().is_some() {
            self.read_upgrade_runtime(conn);
        }
        let (facts, privilege) = if self.exchange_fits() {
            match self.exchange(conn, probe_in_prepare)? {
                Exchanged::Done => return Ok(()),
                Exchanged::Refused(facts, privilege, upload) => {
                    return self.upload_and_run(conn, vec![upload], &facts, privilege);
                }
                Exchanged::Separate(facts, privilege) => (facts, privilege),
            }
        } else {
            self.prepare(conn, probe_in_prepare)?
        };
        self.offline_images(conn, &facts, privilege)?;
        let uploads = self.wanted_uploads(&facts)?;
        self.upload_and_run(conn, uploads, &facts, privilege)
    }

    /// Uploads what the node lacks and runs keadm. The binary's best packed copy rides in
    /// the run's channel; when the node cannot unpack it, keadm does not run and the next
    /// form (the other copy, the tarball, then the binary) goes, then the run again. Each
    /// refusal takes one form away and the binary itself is never refused, so this ends.
    ///
    /// A node that reads keadm from a node of its site sends the rest first, then reads
    /// keadm and runs it in one channel; should the read fail, keadm goes the direct way.
    fn upload_and_run(
        &mut self,
        conn: &mut dyn Connection,
        mut uploads: Vec<upload::Upload>,
        facts: &NodeFacts,
        privilege: Privilege,
    ) -> Result<(), StepError> {
        let mut moves = Vec::new();
        if let Some(keadm) = self.relay_from_peer(&mut uploads, facts) {
            let (sent, _) = self.upload(conn, uploads, facts, privilege, false)?;
            moves = sent;
            if !self.run_relayed(conn, &moves, privilege)? {
                return Ok(());
            }
            uploads = vec![keadm];
        }
        let (more, mut deferred) = self.upload(conn, uploads, facts, privilege, true)?;
        moves.extend(more);
        while let Some(refused) = self.run_keadm(conn, &moves, deferred, privilege)? {
            let (more, next) = self.upload(conn, vec![refused], facts, privilege, true)?;
            moves.extend(more);
            deferred = next;
        }
        Ok(())
    }

    /// Runs one step as `phase`: tells the progress line, and adds the time it took to
    /// the step's total.
    fn timed<T>(
        &mut self,
        phase: Phase,
        f: impl FnOnce(&mut Self) -> Result<T, StepError>,
    ) -> Result<T, StepError> {
        self.ctx
            .progress
            .phase(self.node.index, &self.node.name, phase);
        let start = Instant::now();
        let result = f(self);
        self.add_time(phase, start);
        result
    }

    /// Adds the time since `start` to `phase`'s total. Adds up: the pre-flight probe and
    /// the prepare round trip both count as preparing.
    fn add_time(&mut self, phase: Phase, start: Instant) {
        let slot = match phase {
            Phase::Connecting => &mut self.steps.connect,
            Phase::Preparing => &mut self.steps.prepare,
            Phase::Uploading => &mut self.steps.upload,
            _ => &mut self.steps.run,
        };
        *slot = Some(slot.unwrap_or(0.0) + start.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests;
