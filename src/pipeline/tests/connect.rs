//! Connecting: the spec from the plan, retries with backoff on transient failures, none
//! on permanent ones or once the operator stops the run.

use super::*;
use crate::outcome::Phase;
use crate::pipeline::connect::connect_spec;
use crate::transport::{Auth, Endpoint, TransportError};

fn refused(endpoint: &Endpoint) -> TransportError {
    TransportError::Refused {
        endpoint: endpoint.clone(),
    }
}

fn not_admitted(endpoint: &Endpoint) -> TransportError {
    TransportError::AdmissionRefused {
        endpoint: endpoint.clone(),
        detail: "it said \"Exceeded MaxStartups\"".into(),
    }
}

fn healthy() -> FakeTransport {
    FakeTransport::new()
        .on(sent::RUN, Reply::ok())
        .on(sent::PREPARE, prepared(""))
}

#[test]
fn transient_failures_are_retried_with_backoff_until_the_node_answers() {
    let h = Harness::new(healthy().failing_connects(2, refused));
    let outcome = h.process(&node(vec![]));
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    assert_eq!(outcome.connect_attempts, 3);
    assert_eq!(h.fake.connects().len(), 3);
    let text = transcript(&outcome);
    for attempt in [1, 2] {
        assert!(
            text.contains(&format!(
                "Attempt {attempt} of 3 failed. The node at 10.0.0.9:22 refused the connection."
            )),
            "{text}"
        );
    }
    assert!(text.contains("Retrying in 0.0 s."), "{text}");
    assert!(
        text.contains("connected to 10.0.0.9:22 as root in")
            && text.contains("SHA256:fake-host-key"),
        "{text}"
    );
}

#[test]
fn retries_end_at_the_nodes_limit_with_sentences_naming_the_node() {
    let h = Harness::new(healthy().failing_connects(3, refused));
    let outcome = h.process(&node(vec![]));
    assert_eq!(outcome.phase, Phase::Failed);
    assert_eq!(outcome.failed_in, Some(Phase::Connecting));
    assert_eq!(outcome.connect_attempts, 3);
    assert_eq!(
        outcome.error.as_deref(),
        Some(
            "Cannot connect to node edge-0 after 3 attempts. The node at 10.0.0.9:22 refused the connection. \
             Check that sshd runs on the node and listens on that address and port."
        )
    );
    assert!(h.execs().is_empty());
}

#[test]
fn a_connection_not_admitted_is_retried_within_the_connect_deadline_without_spending_retries() {
    // More refusals than `retries` (2) allows: they have their own budget.
    let h = Harness::new(healthy().failing_connects(5, not_admitted));
    let outcome = h.process(&node(vec![]));
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    assert_eq!(outcome.connect_attempts, 6);
    let text = transcript(&outcome);
    for attempt in 1..=5 {
        assert!(
            text.contains(&format!(
                "Attempt {attempt} was not admitted. The sshd at 10.0.0.9:22 closed the connection before the SSH handshake"
            )),
            "{text}"
        );
    }
    assert!(
        text.contains("(within the connect deadline of 1 s)"),
        "{text}"
    );
}

#[test]
fn a_connection_never_admitted_fails_as_ssh_admission_refused_naming_the_fix() {
    let h = Harness::new(healthy().failing_connects(10_000, not_admitted));
    let mut plan = node(vec![]);
    plan.deadlines.connect = Duration::from_millis(100);
    let started = std::time::Instant::now();
    let outcome = h.process(&plan);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(outcome.phase, Phase::Failed);
    assert_eq!(outcome.failed_in, Some(Phase::Connecting));
    assert_eq!(
        outcome.failure_class,
        Some(crate::diagnosis::FailureClass::SshAdmissionRefused)
    );
    assert!(outcome.connect_attempts > 3, "{}", outcome.connect_attempts);
    let error = outcome.error.unwrap();
    assert!(
        error.starts_with(&format!(
            "Cannot connect to node edge-0 after {} attempts. The sshd at 10.0.0.9:22 closed the connection before the SSH handshake",
            outcome.connect_attempts
        )),
        "{error}"
    );
    assert!(
        error.ends_with(
            "Raise MaxStartups (and PerSourceMaxStartups) on 10.0.0.9, or lower --handshakes-per-host."
        ),
        "{error}"
    );
}

#[test]
fn permanent_failures_are_not_retried() {
    let rejected = |endpoint: &Endpoint| TransportError::AuthRejected {
        endpoint: endpoint.clone(),
        user: "root".into(),
        method: "the password".into(),
    };
    let h = Harness::new(healthy().failing_connects(1, rejected));
    let outcome = h.process(&node(vec![]));
    assert_eq!(outcome.connect_attempts, 1);
    assert_eq!(
        outcome.error.as_deref(),
        Some(
            "Cannot connect to node edge-0. The node at 10.0.0.9:22 rejected the password for user root."
        )
    );
}

#[test]
fn no_retry_once_the_operator_stops_the_run() {
    let h = Harness::new(healthy().failing_connects(1, refused));
    h.cancel.request();
    let outcome = h.process(&node(vec![]));
    assert_eq!(outcome.connect_attempts, 1);
    assert_eq!(outcome.failed_in, Some(Phase::Connecting));
}

#[test]
fn the_connect_spec_carries_the_plans_policies_auth_and_jump_host() {
    let h = Harness::new(healthy());
    let mut plan = node(vec![]);
    plan.host_key_policy = HostKeyPolicy::Strict;
    h.process(&plan);
    let spec = &h.fake.connects()[0];
    assert_eq!(spec.endpoint, Endpoint::new("10.0.0.9", 22));
    assert_eq!(spec.username, "root");
    assert_eq!(spec.host_key_policy, HostKeyPolicy::Strict);
    assert!(matches!(&spec.auth, Auth::Password(p) if p.expose() == PASSWORD));
    assert_eq!(spec.connect_timeout, Duration::from_secs(1));
    assert_eq!(
        spec.handshakes_per_host,
        crate::transport::DEFAULT_HANDSHAKES_PER_HOST
    );
    assert_eq!(spec.known_hosts, h.dir.path().join("known_hosts"));
    assert!(spec.jump.is_none());

    let mut ssh = plan.ssh.clone();
    let mut bastion = ssh.clone();
    bastion.host = "[fd00::1]".into();
    bastion.auth = AuthSpec::Agent;
    ssh.proxy_jump = Some(Box::new(bastion));
    let kh = Path::new("/kh");
    let timeout = Duration::from_secs(4);
    let spec = connect_spec(&ssh, HostKeyPolicy::Off, &[], kh, timeout, 3);
    let jump = spec.jump.as_deref().unwrap();
    assert_eq!(jump.endpoint.to_string(), "[fd00::1]:22");
    assert_eq!(
        jump.handshakes_per_host, 3,
        "the bastion is paced as the node"
    );
    assert_eq!(
        jump.host_key_policy,
        HostKeyPolicy::Off,
        "the node's, by default"
    );
    assert!(matches!(jump.auth, Auth::Agent { socket: None }));
    let spec = connect_spec(
        &ssh,
        HostKeyPolicy::Off,
        &[HostKeyPolicy::Strict],
        kh,
        timeout,
        3,
    );
    assert_eq!(spec.jump.unwrap().host_key_policy, HostKeyPolicy::Strict);
}
