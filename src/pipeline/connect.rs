//! Connecting: the node's connect spec from its plan, and retries with backoff on
//! transient failures (refused, reset, timed out before authentication), and on an sshd
//! that dropped the connection before its banner (MaxStartups) within the connect
//! deadline.

use std::path::Path;
use std::time::{Duration, Instant};

use super::{Run, StepError, transport_class};
use crate::backoff::backoff;
use crate::config::{AuthSpec, HostKeyPolicy, SshSpec};
use crate::outcome::Phase;
use crate::plan::NodePlan;
use crate::transport::{self, ConnectSpec, Connection, Endpoint, TransportError};

/// Seconds between SSH keepalives while a command runs: a dead peer is noticed within
/// a few of these instead of at the command deadline.
const KEEPALIVE_SECS: u32 = 15;

/// The transport's view of a node's `ssh` settings. The policies (the node's, then one
/// per jump host, nearest first) are resolved by the plan: the flag, then the host's own
/// setting, then the file's default.
pub(super) fn connect_spec(
    ssh: &SshSpec,
    policy: HostKeyPolicy,
    jump_policies: &[HostKeyPolicy],
    known_hosts: &Path,
    timeout: Duration,
    handshakes_per_host: usize,
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
        host_key_policy: policy,
        known_hosts: known_hosts.to_path_buf(),
        connect_timeout: timeout,
        keepalive_secs: KEEPALIVE_SECS,
        jump_connections: 1,
        jump: ssh.proxy_jump.as_ref().map(|j| {
            let (jump_policy, beyond) = match jump_policies.split_first() {
                Some((first, beyond)) => (*first, beyond),
                None => (policy, &[][..]),
            };
            Box::new(connect_spec(
                j,
                jump_policy,
                beyond,
                known_hosts,
                timeout,
                handshakes_per_host,
            ))
        }),
        handshakes_per_host,
    }
}

impl Run<'_, '_> {
    /// Connects, retrying transient failures up to the node's `retries` with backoff,
    /// unless the operator has asked to stop.
    pub(super) fn connect(&mut self) -> Result<Box<dyn Connection>, StepError> {
        self.timed(Phase::Connecting, |run| {
            let node = run.node;
            let mut spec = connect_spec(
                &node.ssh,
                node.host_key_policy,
                &node.jump_host_key_policies,
                &run.ctx.known_hosts,
                node.deadlines.connect,
                run.ctx.handshakes_per_host,
            );
            spec.jump_connections = run.ctx.jump_connections;
            let attempts = 1 + node.retries;
            let mut attempt = 0;
            // An sshd that drops the connection before its banner is retried sooner and
            // without spending `retries`, for as long as the connect deadline lasts from
            // the first refusal: turns at that sshd come free within milliseconds.
            let mut refusals = 0;
            let mut refused_since: Option<Instant> = None;
            loop {
                attempt += 1;
                run.connect_attempts = attempt;
                let start = Instant::now();
                match run.ctx.connector.connect(&spec) {
                    Ok(conn) => {
                        run.transcript.note(&format!(
                            "connected to {} as {} in {:.2}s (host key {})",
                            node.address(),
                            node.ssh.username,
                            start.elapsed().as_secs_f64(),
                            conn.host_key_fingerprint()
                        ));
                        return Ok(conn);
                    }
                    Err(err) if err.is_admission_refused() && !run.ctx.cancel.stopping() => {
                        let since = *refused_since.get_or_insert(start);
                        refusals += 1;
                        let delay = backoff(run.ctx.retry_base / 4, refusals);
                        if since.elapsed() + delay >= node.deadlines.connect {
                            return Err(connect_failed(node, attempt, &err));
                        }
                        run.transcript.note(&format!(
                            "Attempt {attempt} was not admitted. {err} Retrying in {:.2} s \
                             (within the connect deadline of {:.0} s).",
                            delay.as_secs_f64(),
                            node.deadlines.connect.as_secs_f64()
                        ));
                        std::thread::sleep(delay);
                    }
                    Err(err)
                        if err.is_transient()
                            && attempt < attempts
                            && !run.ctx.cancel.stopping() =>
                    {
                        let delay = backoff(run.ctx.retry_base, attempt);
                        run.transcript.note(&format!(
                            "Attempt {attempt} of {attempts} failed. {err} Retrying in {:.1} s.",
                            delay.as_secs_f64()
                        ));
                        std::thread::sleep(delay);
                    }
                    Err(err) => return Err(connect_failed(node, attempt, &err)),
                }
            }
        })
    }
}

/// The node's failure after `attempt` attempts to connect ended in `err`.
fn connect_failed(node: &NodePlan, attempt: u32, err: &TransportError) -> StepError {
    let tries = if attempt > 1 {
        format!(" after {attempt} attempts")
    } else {
        String::new()
    };
    let mut error = StepError::new(
        Phase::Connecting,
        format!("Cannot connect to node {}{tries}. {err}", node.name),
    );
    error.class = transport_class(err);
    error
}
