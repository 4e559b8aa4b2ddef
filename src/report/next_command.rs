//! The one command the recap suggests after a run in which some node did not succeed:
//! `--retry-failed` with the run's own flags and their values, built from the typed
//! options (never from argv), so that pasted as printed it checks the same host keys,
//! asks the same cluster and rolls out in the same waves.

use crate::options::{
    DEFAULT_DRAIN_TIMEOUT_SECS, DEFAULT_READY_TIMEOUT_SECS, PreflightMode, RelayMode, RunOptions,
};
use crate::shell::shell_quote;

/// `keadm-batch batch -c FILE --retry-failed --wave 25% --max-fail 0 --known-hosts ...`.
///
/// Left out on purpose: the selection (`--only`, `--class`: the retry selects the nodes
/// that did not succeed), what the run only printed or wrote elsewhere (`--dry-run`,
/// `--output`, `--junit`, `--metrics`, `-q`, `-v`, whose files the retry would replace)
/// and `--run-dir` (a retry needs a new one). `--retry-failed` reads the earlier run from
/// batch_runs/latest, which a `--run-dir` run leaves alone, so after one the nodes that
/// did not succeed, `not_succeeded`, are named with `--only`.
pub fn retry(options: &RunOptions, not_succeeded: &[&str]) -> String {
    let select = match &options.run_dir {
        Some(_) => format!("--only {}", shell_quote(&not_succeeded.join(","))),
        None => "--retry-failed".to_string(),
    };
    let mut words: Vec<String> = vec![
        "keadm-batch batch -c".into(),
        shell_quote(&options.config.display().to_string()),
        select,
    ];
    let mut flag = |name: &str, value: Option<String>| {
        if let Some(value) = value {
            words.push(format!("--{name} {}", shell_quote(&value)));
        }
    };
    let string = |v: &Option<std::path::PathBuf>| v.as_ref().map(|p| p.display().to_string());
    flag(
        "shard",
        options.shard.map(|s| format!("{}/{}", s.index, s.count)),
    );
    flag("max-run-num", options.max_run_num.map(|n| n.to_string()));
    for (name, count) in [
        ("handshakes-per-host", options.handshakes_per_host),
        ("jump-connections", options.jump_connections),
    ] {
        flag(name, count.map(|n| n.to_string()));
    }
    flag("canary", options.canary.map(|n| n.to_string()));
    flag("wave", options.wave.map(|a| a.to_string()));
    flag("max-fail", options.max_fail.map(|a| a.to_string()));
    flag(
        "wave-pause",
        options.wave_pause.map(|d| format!("{}s", d.as_secs())),
    );
    flag("timeout", options.timeout_seconds.map(|s| s.to_string()));
    flag(
        "kill-grace",
        options.kill_grace_seconds.map(|s| s.to_string()),
    );
    flag(
        "connect-timeout",
        options.connect_timeout_seconds.map(|s| s.to_string()),
    );
    flag(
        "host-key-policy",
        options.host_key_policy.map(|p| p.as_str().to_string()),
    );
    flag("known-hosts", string(&options.known_hosts));
    flag(
        "max-package-bytes",
        options.max_package_bytes.map(|b| b.to_string()),
    );
    flag(
        "preflight",
        match options.preflight {
            PreflightMode::Warn => None,
            PreflightMode::Off => Some("off".into()),
            PreflightMode::Strict => Some("strict".into()),
        },
    );
    flag(
        "relay",
        (options.relay == RelayMode::Off).then(|| "off".into()),
    );
    flag("kubeconfig", string(&options.kubeconfig));
    flag("context", options.context.clone());
    flag(
        "ready-timeout",
        (options.ready_timeout_seconds != DEFAULT_READY_TIMEOUT_SECS
            && options.ready_timeout_seconds != 0)
            .then(|| options.ready_timeout_seconds.to_string()),
    );
    flag(
        "drain-timeout",
        options
            .drain
            .filter(|d| d.as_secs() != DEFAULT_DRAIN_TIMEOUT_SECS)
            .map(|d| format!("{}s", d.as_secs())),
    );
    let counts = [
        ("cloud-node-limit", options.cloud_node_limit),
        ("joins-in-flight", options.joins_in_flight.map(|n| n as u64)),
    ];
    for (name, count) in counts {
        flag(name, count.map(|n| n.to_string()));
    }
    flag("staging-dir", string(&options.staging_dir));
    for (name, on) in [
        ("allow-unverified", options.allow_unverified),
        ("insecure-http", options.insecure_http),
        ("reset-first", options.reset_first),
        ("backup", options.backup),
        ("rollback-on-failure", options.rollback_on_failure),
        ("verify-remote", options.verify_remote),
        ("no-wait", options.no_wait),
        ("delete-nodes", options.delete_nodes),
        ("drain", options.drain.is_some()),
        ("token-from-cluster", options.token_from_cluster),
        ("no-cluster", options.no_cluster),
    ] {
        if on {
            words.push(format!("--{name}"));
        }
    }
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use super::*;
    use crate::config::HostKeyPolicy;
    use crate::options::{Amount, Shard};

    #[test]
    fn the_retry_carries_the_run_s_flags_with_their_values_quoted() {
        let plain = RunOptions {
            config: "config.yaml".into(),
            ready_timeout_seconds: 300,
            ..RunOptions::default()
        };
        assert_eq!(
            retry(&plain, &[]),
            "keadm-batch batch -c config.yaml --retry-failed"
        );
        let full = RunOptions {
            config: "site a.yaml".into(),
            only: vec![crate::options::Selector::Name("edge-*".into())],
            shard: Some(Shard { index: 2, count: 4 }),
            handshakes_per_host: Some(4),
            jump_connections: Some(2),
            wave: Some(Amount::Percent(25)),
            max_fail: Some(Amount::Nodes(0)),
            canary: Some(2),
            wave_pause: Some(Duration::from_secs(90)),
            host_key_policy: Some(HostKeyPolicy::Strict),
            known_hosts: Some(PathBuf::from("/etc/ssh/fleet hosts")),
            kubeconfig: Some(PathBuf::from("/root/.kube/config")),
            context: Some("prod".into()),
            preflight: PreflightMode::Off,
            staging_dir: Some(PathBuf::from("/var/tmp/stage")),
            run_dir: Some(PathBuf::from("/tmp/run")),
            junit: Some(PathBuf::from("j.xml")),
            ready_timeout_seconds: 600,
            drain: Some(Duration::from_secs(120)),
            backup: true,
            cloud_node_limit: Some(2000),
            joins_in_flight: Some(4),
            ..RunOptions::default()
        };
        assert_eq!(
            retry(&full, &["edge-1", "edge-7"]),
            "keadm-batch batch -c 'site a.yaml' --only edge-1,edge-7 --shard 2/4 --handshakes-per-host 4 --jump-connections 2 --canary 2 --wave '25%' --max-fail 0 --wave-pause 90s --host-key-policy strict --known-hosts '/etc/ssh/fleet hosts' --preflight off --kubeconfig /root/.kube/config --context prod --ready-timeout 600 --drain-timeout 120s --cloud-node-limit 2000 --joins-in-flight 4 --staging-dir /var/tmp/stage --backup --drain"
        );
    }

    /// A run with `--run-dir` left batch_runs/latest alone, so `--retry-failed` would
    /// read another run: its nodes that did not succeed are named instead.
    #[test]
    fn a_run_dir_run_is_retried_by_name() {
        let options = RunOptions {
            config: "c.yaml".into(),
            ready_timeout_seconds: 300,
            run_dir: Some(PathBuf::from("/srv/runs/s1")),
            ..RunOptions::default()
        };
        assert_eq!(
            retry(&options, &["edge-1", "edge 2"]),
            "keadm-batch batch -c c.yaml --only 'edge-1,edge 2'"
        );
        let options = RunOptions {
            run_dir: None,
            ..options
        };
        assert_eq!(
            retry(&options, &["edge-1"]),
            "keadm-batch batch -c c.yaml --retry-failed"
        );
    }

    /// A run kept away from the cluster ($KUBECONFIG set) is retried away from it too.
    #[test]
    fn a_run_without_the_cluster_is_retried_without_it() {
        let options = RunOptions {
            config: "c.yaml".into(),
            ready_timeout_seconds: 300,
            no_cluster: true,
            ..RunOptions::default()
        };
        assert_eq!(
            retry(&options, &[]),
            "keadm-batch batch -c c.yaml --retry-failed --no-cluster"
        );
    }
}
