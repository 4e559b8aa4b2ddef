//! One node, start to finish: connect, prepare (mkdir + checks + `uname -m` + sidecars in
//! one round trip), upload what is missing, run keadm. Each step is timed and has its own
//! deadline; the result is a [`NodeOutcome`]. The pipeline never prints: everything it has
//! to say goes into the node's transcript and outcome.

use std::fs::File;
use std::io::Read;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::arch::Arch;
use crate::backoff::backoff;
use crate::cancel::Cancel;
use crate::config::{AuthSpec, HostKeyPolicy, SshSpec};
use crate::kubeedge::{classify, preflight};
use crate::node_text::{CappedBuffer, MESSAGE_CHARS, STEP_OUTPUT_CAP, one_line};
use crate::options::PreflightMode;
use crate::outcome::{NodeOutcome, Phase, PreflightFinding, StepTimes, now};
use crate::plan::{KeadmSource, NodePlan};
use crate::remote::{self, NodeFacts, Privilege};
use crate::report::RunDir;
use crate::report::progress::Progress;
use crate::report::transcript::Transcript;
use crate::stage::Stager;
use crate::transport::{self, ConnectSpec, Endpoint, RemoteExit, SshConnection, TransportError};

/// What every node's pipeline shares.
pub struct Context<'a> {
    /// None when no node needs a staged binary.
    pub stager: Option<&'a Stager>,
    pub known_hosts: PathBuf,
    pub run_dir: &'a RunDir,
    pub cancel: &'a Cancel,
    pub verify_remote: bool,
    /// Makes temporary upload names unique per run.
    pub run_token: String,
    /// Base of the connect retry backoff (1 s by default; tests shorten it).
    pub retry_base: Duration,
    /// Told of every phase change, for the live status line.
    pub progress: &'a Progress,
    pub preflight: PreflightMode,
    /// The largest staged binary, for the pre-flight disk check.
    pub binary_size_hint: u64,
}

/// Seconds between SSH keepalives while a command runs: a dead peer is noticed within
/// a few of these instead of at the command deadline.
const KEEPALIVE_SECS: u32 = 15;

/// A step's failure: the phase it happened in and a one-line reason.
struct StepError {
    phase: Phase,
    message: String,
    /// The node's final phase: Failed, TimedOut, Interrupted (the operator's second
    /// Ctrl-C) or Skipped (strict pre-flight left it untouched).
    ending: Phase,
    exit_status: Option<i32>,
}

impl StepError {
    fn new(phase: Phase, message: impl Into<String>) -> StepError {
        StepError {
            phase,
            message: message.into(),
            ending: Phase::Failed,
            exit_status: None,
        }
    }

    /// The error of a transport call made during `phase`, prefixed with what was done.
    fn transport(phase: Phase, context: String, err: TransportError) -> StepError {
        StepError {
            phase,
            ending: match err {
                TransportError::Aborted { .. } => Phase::Interrupted,
                TransportError::Timeout { .. } => Phase::TimedOut,
                _ => Phase::Failed,
            },
            message: format!("{context}: {err}"),
            exit_status: None,
        }
    }
}

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
}

/// `--preflight-only`: connects and runs only the read-only probe. Changes nothing.
pub fn preflight_only(node: &NodePlan, ctx: &Context) -> Result<Vec<PreflightFinding>, String> {
    let mut run = Run::new(node, ctx, Transcript::in_memory(node.redactor.clone()));
    let result = run.connect().and_then(|mut conn| run.preflight(&mut conn));
    match result {
        Ok(()) => Ok(run.findings),
        Err(e) => Err(node.redactor.redact(&e.message)),
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
                "{}: cannot write the transcript {}: {err}",
                node.name,
                transcript_path.display()
            );
            Transcript::in_memory(node.redactor.clone())
        });
    let mut run = Run::new(node, ctx, transcript);
    let result = run.all_steps();
    let (phase, failed_in, error, exit_status) = match result {
        Ok(()) => (Phase::Succeeded, None, None, Some(0)),
        Err(e) => {
            let phase = e.ending;
            run.transcript
                .note(&format!("{}: {}", phase.as_str(), e.message));
            (
                phase,
                Some(e.phase),
                // Defence in depth: whatever path node text took into the message, it
                // reaches the console and the log only with control characters escaped.
                Some(crate::node_text::escape_controls(
                    &node.redactor.redact(&e.message),
                )),
                e.exit_status,
            )
        }
    };
    // Why a join failed, read from what keadm (and edgecore) printed.
    let classifiable = matches!(phase, Phase::Failed | Phase::TimedOut)
        && (node.keadm_args.is_join() || failed_in == Some(Phase::Running));
    let failure_class = classifiable.then(|| {
        classify::classify(&run.transcript.tail(80), phase == Phase::TimedOut)
            .as_str()
            .to_string()
    });
    if let Some(class) = &failure_class {
        run.transcript.note(&format!("failure class: {class}"));
    }
    run.transcript.finish();
    ctx.progress.phase(node.index, &node.name, phase);
    NodeOutcome {
        index: node.index,
        name: node.name.clone(),
        address: node.address(),
        phase,
        failed_in,
        error,
        failure_class,
        preflight: std::mem::take(&mut run.findings),
        exit_status,
        arch: run.arch.map(|a| a.as_str().to_string()),
        bytes_uploaded: run.bytes_uploaded,
        uploads_skipped: run.uploads_skipped,
        connect_attempts: run.connect_attempts,
        steps: run.steps,
        started_at,
        finished_at: now(),
        transcript: Some(transcript_path.display().to_string()),
    }
}

fn connect_spec(
    ssh: &SshSpec,
    policy: HostKeyPolicy,
    jump_policy: Option<HostKeyPolicy>,
    known_hosts: &std::path::Path,
    timeout: Duration,
) -> ConnectSpec {
    ConnectSpec {
        endpoint: Endpoint::new(ssh.host.clone(), ssh.port),
        username: ssh.username.clone(),
        auth: match &ssh.auth {
            AuthSpec::Password(p) => transport::Auth::Password(p.clone()),
            AuthSpec::PrivateKey { path, passphrase } => transport::Auth::PrivateKey {
                path: path.clone(),
                passphrase: passphrase.clone(),
            },
            AuthSpec::Agent => transport::Auth::Agent { socket: None },
        },
        // Both policies are resolved by the plan: the flag, then the host's own setting,
        // then the file's default.
        host_key_policy: match policy {
            HostKeyPolicy::AcceptNew => transport::HostKeyPolicy::AcceptNew,
            HostKeyPolicy::Strict => transport::HostKeyPolicy::Strict,
            HostKeyPolicy::Off => transport::HostKeyPolicy::Off,
        },
        known_hosts: known_hosts.to_path_buf(),
        connect_timeout: timeout,
        keepalive_secs: KEEPALIVE_SECS,
        jump: ssh.proxy_jump.as_ref().map(|j| {
            let jump_policy = jump_policy.unwrap_or(policy);
            Box::new(connect_spec(j, jump_policy, None, known_hosts, timeout))
        }),
    }
}

/// An uploaded file to rename into place: (temporary name, final name, sha256).
type Move = (String, String, String);

/// Counts the bytes read through it.
struct Counting<'a, R> {
    inner: R,
    count: &'a std::cell::Cell<u64>,
}

impl<R: Read> Read for Counting<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.set(self.count.get() + n as u64);
        Ok(n)
    }
}

/// The exit status of the run's script when receiving the deferred upload failed.
const RECEIVE_FAILED: i32 = 201;

/// The last upload, sent on the run's stdin instead of its own channel.
struct Deferred {
    upload: Upload,
    tmp: String,
}

/// A file to put on the node, unless it is there already.
struct Upload {
    local: PathBuf,
    name: String,
    mode: u32,
    size: u64,
    sha256: String,
    /// The release tarball to send instead, when it is much smaller than the file.
    tarball: Option<TarballSource>,
}

/// The release tarball a binary came from, and where the binary sits inside it.
struct TarballSource {
    path: PathBuf,
    size: u64,
    sha512: String,
    entry: String,
}

/// Send the tarball only when it saves at least this share of the bytes: an
/// incompressible binary would only cost the node gunzip time.
const TARBALL_MAX_RATIO: f64 = 0.8;

/// The tarball of `staged`, if sending it beats sending the binary.
fn tarball_source(staged: &crate::stage::StagedBinary) -> Option<TarballSource> {
    let size = staged.tarball_size;
    ((size as f64) < TARBALL_MAX_RATIO * staged.binary_size as f64).then(|| TarballSource {
        path: staged.tarball.clone(),
        size,
        sha512: staged.tarball_sha512.clone(),
        entry: staged.tarball_entry.clone(),
    })
}

/// Whether any package staged so far is worth sending as its tarball (then the prepare
/// step asks the node for tar, gzip and sha512sum).
fn tarball_may_pay_off(stager: &Stager) -> bool {
    Arch::ALL
        .iter()
        .filter_map(|arch| stager.staged(*arch))
        .any(|staged| tarball_source(&staged).is_some())
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
        }
    }

    fn all_steps(&mut self) -> Result<(), StepError> {
        let mut conn = self.connect()?;
        let cancel = self.ctx.cancel.clone();
        conn.set_abort(Some(std::sync::Arc::new(move || cancel.aborting())));
        if self.ctx.preflight != PreflightMode::Off && self.node.keadm_args.is_join() {
            self.preflight(&mut conn)?;
        }
        let (facts, privilege) = self.prepare(&mut conn)?;
        let uploads = self.wanted_uploads(&facts)?;
        let (moves, deferred) = self.upload(&mut conn, uploads, &facts, privilege)?;
        self.run_keadm(&mut conn, &moves, deferred, privilege)
    }

    /// The read-only pre-flight probe, one round trip before anything changes on the
    /// node. In strict mode a finding skips the node untouched.
    fn preflight(&mut self, conn: &mut SshConnection) -> Result<(), StepError> {
        self.timed(Phase::Preparing, |run| {
            let node = run.node;
            let needed: u64 =
                node.copy_files.iter().map(|f| f.size).sum::<u64>() + run.ctx.binary_size_hint;
            let script = remote::preflight_probe_script(
                &node.upload_dir,
                &preflight::runtime_socket(&node.keadm_args),
                needed,
            );
            let mut output = CappedBuffer::new(STEP_OUTPUT_CAP);
            let deadline = Instant::now() + node.deadlines.step;
            conn.exec(&script, None, deadline, &mut output)
                .map_err(|e| {
                    StepError::transport(
                        Phase::Preparing,
                        "failed to run the pre-flight probe".to_string(),
                        e,
                    )
                })?;
            let findings = preflight::parse(&output.text());
            for finding in &findings {
                run.transcript.note(&format!(
                    "pre-flight: {finding}; {}",
                    finding.suggested_action()
                ));
                if run.ctx.preflight == PreflightMode::Warn {
                    log::warn!("{}: pre-flight: {finding}", node.name);
                }
            }
            run.findings = findings
                .iter()
                .map(|f| PreflightFinding {
                    id: f.id.as_str().to_string(),
                    detail: f.detail.clone(),
                })
                .collect();
            if run.ctx.preflight == PreflightMode::Strict && !findings.is_empty() {
                let first = &findings[0];
                let more = if findings.len() > 1 {
                    format!(" (and {} more finding(s))", findings.len() - 1)
                } else {
                    String::new()
                };
                return Err(StepError {
                    phase: Phase::Preparing,
                    message: format!(
                        "skipped by pre-flight: {first}{more}; {}",
                        first.suggested_action()
                    ),
                    ending: Phase::Skipped,
                    exit_status: None,
                });
            }
            Ok(())
        })
    }

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
        let slot = match phase {
            Phase::Connecting => &mut self.steps.connect,
            Phase::Preparing => &mut self.steps.prepare,
            Phase::Uploading => &mut self.steps.upload,
            _ => &mut self.steps.run,
        };
        // Adds up: the pre-flight probe and the prepare round trip both count as preparing.
        *slot = Some(slot.unwrap_or(0.0) + start.elapsed().as_secs_f64());
        result
    }

    fn connect(&mut self) -> Result<SshConnection, StepError> {
        self.timed(Phase::Connecting, |run| {
            let spec = connect_spec(
                &run.node.ssh,
                run.node.host_key_policy,
                run.node.jump_host_key_policy,
                &run.ctx.known_hosts,
                run.node.deadlines.connect,
            );
            let attempts = 1 + run.node.retries;
            let mut attempt = 0;
            loop {
                attempt += 1;
                run.connect_attempts = attempt;
                let start = Instant::now();
                match SshConnection::connect(&spec) {
                    Ok(conn) => {
                        run.transcript.note(&format!(
                            "connected to {} as {} in {:.2}s (host key {})",
                            run.node.address(),
                            run.node.ssh.username,
                            start.elapsed().as_secs_f64(),
                            conn.host_key_fingerprint()
                        ));
                        return Ok(conn);
                    }
                    Err(err)
                        if err.is_transient()
                            && attempt < attempts
                            && !run.ctx.cancel.stopping() =>
                    {
                        let delay = backoff(run.ctx.retry_base, attempt);
                        run.transcript.note(&format!(
                            "attempt {attempt} of {attempts} failed: {err} Retrying in {:.1}s.",
                            delay.as_secs_f64()
                        ));
                        std::thread::sleep(delay);
                    }
                    Err(err) => {
                        let tries = if attempt > 1 {
                            format!(" (after {attempt} attempts)")
                        } else {
                            String::new()
                        };
                        return Err(StepError::new(
                            Phase::Connecting,
                            format!("failed to connect to {}{tries}: {err}", run.node.name),
                        ));
                    }
                }
            }
        })
    }

    /// Prepares the upload dir and learns the node's arch and what is already there, in
    /// one round trip. For non-root logins it also learns whether sudo needs a password.
    fn prepare(&mut self, conn: &mut SshConnection) -> Result<(NodeFacts, Privilege), StepError> {
        self.timed(Phase::Preparing, |run| {
            let node = run.node;
            let mut names: Vec<&str> = node.copy_files.iter().map(|f| f.name.as_str()).collect();
            if node.keadm == KeadmSource::Staged {
                names.push("keadm");
            }
            let mut script = remote::prepare_script(&node.upload_dir, &names, run.ctx.verify_remote);
            if node.keadm == KeadmSource::Staged && run.ctx.stager.is_some_and(tarball_may_pay_off) {
                script.push_str(remote::TOOLS_PROBE);
            }
            let password_line = password_of(node).map(remote::password_preamble);
            let (command, stdin) = if node.sudo {
                (remote::with_sudo_probe(&script), password_line.clone())
            } else {
                (script, None)
            };
            let mut output = CappedBuffer::new(STEP_OUTPUT_CAP);
            let deadline = Instant::now() + node.deadlines.step;
            let mut stdin_reader = stdin.as_deref().map(str::as_bytes);
            let exit = conn
                .exec(&command, stdin_reader.as_mut().map(|r| r as &mut dyn Read), deadline, &mut output)
                .map_err(|e| StepError::transport(Phase::Preparing, format!("failed to prepare {}", node.upload_dir), e))?;
            let text = output.text();
            let facts = remote::parse_facts(&text, &names);
            let privilege = match (node.sudo, facts.sudo_needs_password) {
                (false, _) => Privilege::Login,
                (true, Some(false)) => Privilege::SudoNoPassword,
                (true, _) => Privilege::SudoPassword,
            };
            if privilege == Privilege::SudoPassword && password_line.is_none() {
                return Err(StepError::new(
                    Phase::Preparing,
                    format!(
                        "sudo on the node needs a password, but {} logs in without one; give {} passwordless sudo, or use password auth",
                        node.name, node.ssh.username
                    ),
                ));
            }
            if let Some(problem) = &facts.dir_problem {
                let hint = if text.contains("incorrect password") || text.contains("Sorry, try again") {
                    " (sudo rejected the login password)"
                } else {
                    ""
                };
                return Err(StepError::new(
                    Phase::Preparing,
                    format!("the upload dir {} cannot be used{hint}: {problem}{}", node.upload_dir, if exit.success() { String::new() } else { format!(" ({exit})") }),
                ));
            }
            run.transcript.note(&format!(
                "prepared {} ({}), uname -m: {}",
                node.upload_dir,
                match privilege {
                    Privilege::Login => "as the login user",
                    Privilege::SudoNoPassword => "under passwordless sudo",
                    Privilege::SudoPassword => "under sudo with the login password",
                },
                facts.machine.as_deref().unwrap_or("?")
            ));
            Ok((facts, privilege))
        })
    }

    /// The files to upload: copyFrom files and, unless keadmBinDir says keadm is there
    /// already, the staged keadm for the node's arch.
    fn wanted_uploads(&mut self, facts: &NodeFacts) -> Result<Vec<Upload>, StepError> {
        let node = self.node;
        let mut uploads = Vec::new();
        for file in &node.copy_files {
            uploads.push(Upload {
                local: file.path.clone(),
                name: file.name.clone(),
                mode: file.mode,
                size: file.size,
                sha256: file.sha256.clone(),
                tarball: None,
            });
        }
        if node.keadm == KeadmSource::Staged {
            let machine = facts.machine.clone().unwrap_or_default();
            let arch = Arch::from_uname(&machine)
                .map_err(|e| StepError::new(Phase::Preparing, e.to_string()))?;
            self.arch = Some(arch);
            let stager = self.ctx.stager.ok_or_else(|| {
                StepError::new(
                    Phase::Preparing,
                    "no keadm binary was staged for this run".to_string(),
                )
            })?;
            let staged = stager
                .for_node(arch)
                .map_err(|e| StepError::new(Phase::Preparing, e.to_string()))?;
            uploads.push(Upload {
                local: staged.binary.clone(),
                name: "keadm".into(),
                mode: 0o755,
                size: staged.binary_size,
                sha256: staged.binary_sha256.clone(),
                tarball: tarball_source(&staged).filter(|_| facts.can_unpack_tarball()),
            });
        }
        Ok(uploads)
    }

    /// Uploads each file that the node lacks to a temporary name. Returns the renames
    /// (temporary name, final name, sha256) the run step performs before keadm starts.
    fn upload(
        &mut self,
        conn: &mut SshConnection,
        uploads: Vec<Upload>,
        facts: &NodeFacts,
        privilege: Privilege,
    ) -> Result<(Vec<Move>, Option<Deferred>), StepError> {
        self.timed(Phase::Uploading, |run| {
            let node = run.node;
            let mut moves = Vec::new();
            let count = uploads.len();
            // Files stream over exec (`cat >`, one channel; under sudo inside `sudo sh -c`),
            // read through the exec loop's small buffer. Not SFTP: libssh2 holds each 1 MiB
            // write until it is acknowledged, about 2 MiB per worker (118 MiB peak at
            // maxRunNum 50, against 33 MiB over exec) and a round trip per MiB on slow links
            // (see bench/README.md and docs/decisions.md).
            for (position, upload) in uploads.into_iter().enumerate() {
                let already = if run.ctx.verify_remote {
                    facts
                        .computed_sha256
                        .iter()
                        .any(|(name, sha)| *name == upload.name && *sha == upload.sha256)
                } else {
                    facts.existing.iter().any(|f| {
                        f.name == upload.name && f.size == upload.size && f.sidecar == upload.sha256
                    })
                };
                if already {
                    run.uploads_skipped += 1;
                    run.transcript.note(&format!(
                        "{} is already on the node (sha256 {}), not uploaded",
                        upload.name,
                        &upload.sha256[..12]
                    ));
                    continue;
                }
                let tmp = remote::temp_name(&upload.name, &run.ctx.run_token, node.index);
                let deadline = Instant::now() + node.deadlines.upload(upload.size);
                let start = Instant::now();
                let open = |path: &PathBuf| {
                    File::open(path).map_err(|e| {
                        StepError::new(
                            Phase::Uploading,
                            format!("failed to open local file {}: {e}", path.display()),
                        )
                    })
                };
                let mut sent = None;
                if let Some(tarball) = &upload.tarball {
                    sent = run.upload_tarball(conn, &upload, tarball, &tmp, privilege)?;
                }
                // The last plain upload rides in the run's own channel: one exec (and one
                // remote shell) less per node, which is what a fleet of many small nodes
                // pays for (the benchmark's W3).
                if sent.is_none() && position + 1 == count {
                    moves.push((tmp.clone(), upload.name.clone(), upload.sha256.clone()));
                    return Ok((moves, Some(Deferred { upload, tmp })));
                }
                if sent.is_none() {
                    let mut file = open(&upload.local)?;
                    let script =
                        remote::receive_script(&node.upload_dir, &tmp, upload.mode, upload.size);
                    let mut output = CappedBuffer::new(STEP_OUTPUT_CAP);
                    let result = exec_as(
                        conn,
                        &script,
                        privilege,
                        password_of(node),
                        Some(&mut file),
                        deadline,
                        &mut output,
                    );
                    let err = match result {
                        Ok(exit) if exit.success() => None,
                        Ok(exit) => Some(StepError::new(
                            Phase::Uploading,
                            format!(
                                "failed to upload file {}: the node answered {exit}: {}",
                                upload.name,
                                one_line(&output.text(), MESSAGE_CHARS)
                            ),
                        )),
                        Err(e) => Some(upload_error(&upload, e)),
                    };
                    if let Some(err) = err {
                        return Err(run.explain_upload_failure(conn, err, &upload, &tmp, privilege));
                    }
                    sent = Some(upload.size);
                }
                let bytes = sent.unwrap_or(0);
                run.bytes_uploaded += bytes;
                run.transcript.note(&format!(
                    "uploaded {} ({} bytes, mode {:04o}) in {:.2}s",
                    upload.name,
                    bytes,
                    upload.mode,
                    start.elapsed().as_secs_f64()
                ));
                moves.push((tmp, upload.name, upload.sha256));
            }
            Ok((moves, None))
        })
    }

    fn run_keadm(
        &mut self,
        conn: &mut SshConnection,
        moves: &[Move],
        deferred: Option<Deferred>,
        privilege: Privilege,
    ) -> Result<(), StepError> {
        self.timed(Phase::Running, |run| {
            let node = run.node;
            let mut script = String::new();
            if let Some(d) = &deferred {
                // A subshell, so its umask and cd do not reach keadm.
                script.push_str(&format!(
                    "( {} ) || exit {RECEIVE_FAILED}\n",
                    remote::receive_script(&node.upload_dir, &d.tmp, d.upload.mode, d.upload.size)
                ));
            }
            if !moves.is_empty() {
                script.push_str(&remote::finalize_script(&node.upload_dir, moves));
                script.push_str(" || exit 125\n");
            }
            script.push_str(&remote::run_script(
                &node.upload_dir,
                node.index,
                &node.command,
            ));
            run.transcript
                .note(&format!("running: {}", node.redactor.redact(&node.command)));
            let mut deadline = Instant::now() + node.deadlines.command;
            let mut file = match &deferred {
                Some(d) => {
                    // Room for the transfer (1 s per MiB), not a whole upload deadline:
                    // the command's own deadline must stay what the operator set.
                    deadline +=
                        node.deadlines.upload_per_mib * (d.upload.size.div_ceil(1 << 20) as u32);
                    Some(File::open(&d.upload.local).map_err(|e| {
                        StepError::new(
                            Phase::Uploading,
                            format!(
                                "failed to open local file {}: {e}",
                                d.upload.local.display()
                            ),
                        )
                    })?)
                }
                None => None,
            };
            let read_from_file = std::cell::Cell::new(0u64);
            let mut counted = file.as_mut().map(|f| Counting {
                inner: f,
                count: &read_from_file,
            });
            let result = exec_as(
                conn,
                &script,
                privilege,
                password_of(node),
                counted.as_mut().map(|c| c as &mut dyn Read),
                deadline,
                &mut run.transcript,
            );
            // The connection broke before the whole file was handed over: an upload failure.
            if let (Some(d), Err(e)) = (&deferred, &result)
                && read_from_file.get() < d.upload.size
                && !matches!(
                    e,
                    TransportError::Aborted { .. } | TransportError::Timeout { .. }
                )
            {
                return Err(StepError::new(
                    Phase::Uploading,
                    format!("failed to upload file {}: {e}", d.upload.name),
                ));
            }
            if let (Some(d), Ok(RemoteExit::Code(code))) = (&deferred, &result) {
                if *code == RECEIVE_FAILED {
                    let err = StepError::new(
                        Phase::Uploading,
                        format!(
                            "failed to upload file {}: the node could not write it",
                            d.upload.name
                        ),
                    );
                    return Err(run.explain_upload_failure(conn, err, &d.upload, &d.tmp, privilege));
                }
                run.bytes_uploaded += d.upload.size;
                run.transcript.note(&format!(
                    "uploaded {} ({} bytes, mode {:04o}) in the run's channel",
                    d.upload.name, d.upload.size, d.upload.mode
                ));
            }
            match result {
                Ok(RemoteExit::Code(0)) => {
                    run.transcript.note("keadm exited with status 0");
                    Ok(())
                }
                Ok(exit) => {
                    let code = match &exit {
                        RemoteExit::Code(c) => Some(*c),
                        RemoteExit::Signal(_) => None,
                    };
                    let last = run.transcript.tail(1).pop();
                    let detail = last
                        .map(|l| format!(" (last output: {})", one_line(&l, 200)))
                        .unwrap_or_default();
                    let status = match &exit {
                        RemoteExit::Code(c) => format!("Process exited with status {c}"),
                        RemoteExit::Signal(s) => format!("Process exited from signal {s}"),
                    };
                    Err(StepError {
                        phase: Phase::Running,
                        message: format!(
                            "failed to execute keadm command {}: {status}{detail}",
                            node.command
                        ),
                        ending: Phase::Failed,
                        exit_status: code,
                    })
                }
                Err(TransportError::Timeout { .. }) => {
                    let killed = run.kill(conn, privilege);
                    if node.keadm_args.is_join() {
                        run.edgecore_log(conn, privilege);
                    }
                    Err(StepError {
                        phase: Phase::Running,
                        message: format!(
                            "the keadm command ran past its {} s deadline and {}",
                            node.deadlines.command.as_secs(),
                            if killed {
                                "was killed on the node"
                            } else {
                                "could not be confirmed killed on the node"
                            }
                        ),
                        ending: Phase::TimedOut,
                        exit_status: None,
                    })
                }
                Err(TransportError::Aborted { .. }) => {
                    // Under sudo the command belongs to root: kill it as root too.
                    let killed = run.kill(conn, privilege);
                    Err(StepError {
                        phase: Phase::Running,
                        message: format!(
                            "cancelled by the operator; the keadm command {} on the node",
                            if killed {
                                "was killed"
                            } else {
                                "could not be confirmed killed"
                            }
                        ),
                        ending: Phase::Interrupted,
                        exit_status: None,
                    })
                }
                Err(e) => Err(StepError::transport(
                    Phase::Running,
                    format!("failed to execute keadm command {}", node.command),
                    e,
                )),
            }
        })
    }

    /// Appends the last lines of edgecore's log to the transcript: a join that timed out
    /// waiting for certificates says why only there.
    fn edgecore_log(&mut self, conn: &mut SshConnection, privilege: Privilege) {
        let deadline = Instant::now() + self.node.deadlines.step;
        self.transcript
            .note("the last lines of edgecore's log follow");
        let _ = exec_as(
            conn,
            remote::EDGECORE_LOG,
            privilege,
            password_of(self.node),
            None,
            deadline,
            &mut self.transcript,
        );
    }

    /// After a failed upload: removes the partial temporary file and, when the dir has
    /// less room than the file needs, says so. SFTP servers report a full disk only as
    /// "Failure", which names no cause. A timed-out upload is left as it is: the
    /// connection may be stuck, and another round trip would wait on it again.
    fn explain_upload_failure(
        &mut self,
        conn: &mut SshConnection,
        err: StepError,
        upload: &Upload,
        tmp: &str,
        privilege: Privilege,
    ) -> StepError {
        if err.ending == Phase::TimedOut {
            return err;
        }
        let dir = &self.node.upload_dir;
        let mut output = CappedBuffer::new(STEP_OUTPUT_CAP);
        let deadline = Instant::now() + self.node.deadlines.step.min(Duration::from_secs(10));
        let probe = exec_as(
            conn,
            &remote::upload_failed_script(dir, tmp),
            privilege,
            password_of(self.node),
            None,
            deadline,
            &mut output,
        );
        let free_kib = match probe {
            Ok(_) => remote::parse_free_kib(&output.text()),
            Err(_) => None,
        };
        match free_kib {
            Some(free) if free.saturating_mul(1024) < upload.size => {
                self.transcript.note(&err.message);
                StepError {
                    message: format!(
                        "failed to upload file {}: no space left on device in {dir} on the node ({} KiB needed, {free} KiB free)",
                        upload.name,
                        upload.size.div_ceil(1024),
                    ),
                    ..err
                }
            }
            _ => err,
        }
    }

    /// Sends the release tarball over exec stdin; the node checks its sha512 and unpacks
    /// the binary to `tmp`. Returns the bytes sent, or `None` when the node could not
    /// unpack it (the caller then sends the binary itself).
    fn upload_tarball(
        &mut self,
        conn: &mut SshConnection,
        upload: &Upload,
        tarball: &TarballSource,
        tmp: &str,
        privilege: Privilege,
    ) -> Result<Option<u64>, StepError> {
        let node = self.node;
        let tar_tmp = remote::temp_name(
            &format!("{}.tar.gz", upload.name),
            &self.ctx.run_token,
            self.node.index,
        );
        let script = remote::receive_tarball_script(
            &node.upload_dir,
            &tar_tmp,
            tmp,
            &tarball.sha512,
            &tarball.entry,
            upload.size,
        );
        let mut file = File::open(&tarball.path).map_err(|e| {
            StepError::new(
                Phase::Uploading,
                format!("failed to open local file {}: {e}", tarball.path.display()),
            )
        })?;
        let deadline = Instant::now() + node.deadlines.upload(tarball.size);
        let mut output = CappedBuffer::new(STEP_OUTPUT_CAP);
        let exit = exec_as(
            conn,
            &script,
            privilege,
            password_of(node),
            Some(&mut file),
            deadline,
            &mut output,
        )
        .map_err(|e| upload_error(upload, e))?;
        if exit.success() {
            self.transcript.note(&format!(
                "sent the release tarball ({} bytes for a {}-byte binary); the node checked its sha512 and unpacked {}",
                tarball.size, upload.size, tarball.entry
            ));
            return Ok(Some(tarball.size));
        }
        // Bytes that went out still count: they crossed the wire.
        self.bytes_uploaded += tarball.size;
        self.transcript.note(&format!(
            "the node could not unpack the release tarball ({exit}: {}); sending the binary instead",
            one_line(&output.text(), MESSAGE_CHARS)
        ));
        Ok(None)
    }

    /// Kills the command's process group on the node through a fresh channel.
    fn kill(&mut self, conn: &mut SshConnection, privilege: Privilege) -> bool {
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

/// The login password, which sudo may need on stdin.
fn password_of(node: &NodePlan) -> Option<&str> {
    match &node.ssh.auth {
        AuthSpec::Password(p) => Some(p.expose()),
        _ => None,
    }
}

/// Runs `script` with `privilege` (one `sudo sh -c` around it for non-root logins). When
/// sudo needs the password it goes first on stdin, then `body`: the one place that feeds
/// sudo, so the password never lands in a file or on keadm's stdin.
fn exec_as(
    conn: &mut SshConnection,
    script: &str,
    privilege: Privilege,
    password: Option<&str>,
    body: Option<&mut dyn Read>,
    deadline: Instant,
    output: &mut dyn std::io::Write,
) -> Result<RemoteExit, TransportError> {
    let command = remote::wrap(script, privilege);
    let line = password
        .filter(|_| privilege.needs_password_line())
        .map(remote::password_preamble)
        .unwrap_or_default();
    let prefix = std::io::Cursor::new(line.into_bytes());
    match body {
        Some(body) => {
            let mut stdin = prefix.chain(body);
            conn.exec(&command, Some(&mut stdin), deadline, output)
        }
        None if !prefix.get_ref().is_empty() => {
            let mut stdin = prefix;
            conn.exec(&command, Some(&mut stdin), deadline, output)
        }
        None => conn.exec(&command, None, deadline, output),
    }
}

fn upload_error(upload: &Upload, err: TransportError) -> StepError {
    StepError::transport(
        Phase::Uploading,
        format!("failed to upload file {}", upload.name),
        err,
    )
}
