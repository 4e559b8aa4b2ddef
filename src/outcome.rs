//! What happened to one node: its phase, its error, and the time each step took. The
//! pipeline produces these; the report only consumes them.

use serde::{Deserialize, Serialize};

use crate::arch::Arch;
use crate::diagnosis::FailureClass;
use crate::keadm_cmd::Task;
pub use crate::remote::UpgradeReport;

/// One pre-flight finding: its id (`edgecore_running`...) and what was seen.
pub use crate::diagnosis::Finding as PreflightFinding;

/// A node's phase. The first seven are on the way; the rest are final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Pending,
    /// `--drain`: the node's Node is cordoned and its pods evicted, before anything runs.
    Draining,
    Connecting,
    Preparing,
    Uploading,
    Running,
    /// keadm join exited 0; the cluster is watched for its Node to register and be Ready.
    Verifying,
    Succeeded,
    Failed,
    TimedOut,
    Skipped,
    Interrupted,
}

impl Phase {
    pub fn is_final(self) -> bool {
        matches!(
            self,
            Phase::Succeeded
                | Phase::Failed
                | Phase::TimedOut
                | Phase::Skipped
                | Phase::Interrupted
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "pending",
            Phase::Draining => "draining",
            Phase::Connecting => "connecting",
            Phase::Preparing => "preparing",
            Phase::Uploading => "uploading",
            Phase::Running => "running",
            Phase::Verifying => "verifying",
            Phase::Succeeded => "succeeded",
            Phase::Failed => "failed",
            Phase::TimedOut => "timed_out",
            Phase::Skipped => "skipped",
            Phase::Interrupted => "interrupted",
        }
    }
}

/// Seconds spent in each step; `None` for a step not reached.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepTimes {
    pub connect: Option<f64>,
    pub prepare: Option<f64>,
    pub upload: Option<f64>,
    pub run: Option<f64>,
}

impl StepTimes {
    /// The seconds of every step reached; 0 when none was. (A float `sum` of nothing is
    /// -0.0, which printed as `-0.0s` for skipped nodes.)
    pub fn total(&self) -> f64 {
        [self.connect, self.prepare, self.upload, self.run]
            .iter()
            .flatten()
            .fold(0.0, |total, secs| total + secs)
    }

    /// Whether any step was reached, i.e. the node was started at all.
    pub fn started(&self) -> bool {
        [self.connect, self.prepare, self.upload, self.run]
            .iter()
            .any(Option::is_some)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeOutcome {
    /// 0-based position in the config's `nodes`.
    pub index: usize,
    pub name: String,
    pub address: String,
    /// The final phase.
    pub phase: Phase,
    /// Where it stopped, for failures: the phase that was under way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_in: Option<Phase>,
    /// One line, secrets masked: the text after `Failed to process node <name>: ` in
    /// batch_process_log.txt, so for a failed keadm command exactly keadm's line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// For a failed keadm command, the last line it printed (one line, secrets masked).
    /// Kept apart from `error`, whose keadm line ends with the exit status, as readers
    /// of batch_process_log.txt expect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_output: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_class: Option<FailureClass>,
    /// What the node's keadmCmd does (`join`, `reset`, `upgrade`...): the fix of its
    /// failure class depends on it. Absent for a node that never ran, and in files
    /// written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<Task>,
    /// The keadm command's exit status, when it ran to the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_status: Option<i32>,
    /// With `--reset-first`: the exit status of `keadm reset edge --force`, when it ran to
    /// the end. The join runs only after a reset that exited with 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_exit_status: Option<i32>,
    /// A reset command (`keadm reset`, `reset edge`) exited with 0 and the node was then
    /// checked clean: no edgecore process or unit, no /etc/kubeedge. The nodes whose Node
    /// object may be deleted from the cluster afterwards are these.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reset_verified: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<Arch>,
    pub bytes_uploaded: u64,
    /// Uploads skipped because the node already had the identical file.
    pub uploads_skipped: u32,
    pub connect_attempts: u32,
    pub steps: StepTimes,
    /// Seconds since the Unix epoch.
    pub started_at: f64,
    pub finished_at: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript: Option<String>,
    /// What the pre-flight probe found (join commands).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preflight: Vec<PreflightFinding>,
    /// What the cluster showed of a join's node after keadm exited (with a kubeconfig).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterCheck>,
    /// For the edge's upgrade family (`upgrade edge`, `backup edge`, `rollback edge`,
    /// `config-update`): keadm's report, the running edgecore's version, the backup and
    /// the rollback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<EdgeTaskRecord>,
    /// In a rollout in waves: the node's wave, 1-based.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wave: Option<usize>,
    /// The node's site: its `site:`, else `behind <jump host>` (stamped on the run's
    /// outcomes at the end, so the summary, the JUnit classes and the report's groups
    /// agree; journal lines do not carry it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<String>,
    /// With `--drain`: what became of the node's Node (cordoned, drained, uncordoned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<DrainRecord>,
}

/// What `--drain` did with a node's Node, from before its command to its final outcome
/// (docs/summary.md).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct DrainRecord {
    /// The Node: `--edgenode-name`, else the node's nodeName.
    pub node_name: String,
    /// Why it was neither cordoned nor drained: a join (no Node yet), or no Node of
    /// that name in the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_drained: Option<String>,
    /// The Node was cordoned for the node's command, by this run or before it.
    pub cordoned: bool,
    /// It was cordoned before the run by someone else, so this run leaves it cordoned.
    pub already_cordoned: bool,
    /// The earlier keadm-batch run (its id) that cordoned it and left it cordoned; this
    /// run takes that cordon as its own and lifts it when the node succeeds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub earlier_run: Option<String>,
    /// The pods evicted, as `namespace/name`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evicted: Vec<String>,
    /// Seconds the cordon and the drain took.
    #[serde(default)]
    pub seconds: f64,
    /// Uncordoned again: after the node succeeded, or after a drain that failed.
    pub uncordoned: bool,
    /// The Node was gone when the node succeeded (a reset's, deleted with
    /// `--delete-nodes`): nothing was left to uncordon.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
    /// Why it could not be uncordoned, when that was tried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncordon_error: Option<String>,
}

impl DrainRecord {
    /// Whether the run leaves the Node cordoned.
    pub fn left_cordoned(&self) -> bool {
        self.cordoned && !self.uncordoned && !self.deleted
    }
}

/// What the run learned of an upgrade-family command on the node.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct EdgeTaskRecord {
    /// keadm's event name for the command: `Upgrade`, `Backup`, `Rollback`, `ConfigUpdate`.
    pub task: String,
    /// What keadm wrote to /etc/kubeedge/upgrade_report.json, read right after it;
    /// `None` when it wrote nothing (the file is removed before the command).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<UpgradeReport>,
    /// An upgrade's target: its `--toVersion` (without it, the report's `toVersion` is checked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_version: Option<String>,
    /// What the running edgecore's executable said it is, after the command; `None` when
    /// no edgecore ran (or it said no version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_version: Option<String>,
    /// Whether a process named edgecore ran after the command.
    #[serde(default)]
    pub edgecore_running: bool,
    /// edgecore.yaml's `hostnameOverride`: the Node name edgecore registers under, which
    /// the Ready gate waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// An upgrade whose target the running edgecore already was: keadm was not run.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unchanged: bool,
    /// `--backup`: the exit status of `keadm backup edge`, run first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_exit_status: Option<i32>,
    /// `--rollback-on-failure`: what the rollback did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<RollbackRecord>,
}

impl EdgeTaskRecord {
    /// The version the node ran before the command, as its report says: what a failed
    /// upgrade rolls back to. keadm writes `unknown` when it could not tell.
    pub fn version_before(&self) -> Option<String> {
        let from = &self.report.as_ref()?.from_version;
        (from.starts_with('v') && from != "unknown").then(|| from.clone())
    }
}

/// A failed upgrade's `keadm rollback edge` and what it brought back.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RollbackRecord {
    /// The rollback exited 0, its report says success, edgecore runs the version it went
    /// back to, and (with a kubeconfig) the Node was Ready on it again.
    pub succeeded: bool,
    /// The version rolled back to (`--historical-version`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_status: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<UpgradeReport>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_version: Option<String>,
    /// With a kubeconfig: whether the Node was Ready on the old version within
    /// `--ready-timeout` of the rollback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// Why it did not succeed, in a sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A join's node as the cluster showed it after keadm exited 0: the times are seconds
/// from keadm's exit (0 for a Node that was there already), on this machine's clock. For a
/// reset (with a kubeconfig), what became of its Node object.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ClusterCheck {
    /// The Node name waited for: `--edgenode-name`, else the node's nodeName.
    pub node_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registered_after: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_after: Option<f64>,
    /// Seconds from the node's start (`started_at`, before its connect) to the Node being
    /// Ready (an upgrade's: Ready on the new version), on this machine's clock: the time a
    /// node takes to come up. `ready_after` alone misleads for joins, since keadm join
    /// exits only once edgecore has run for a while (its certificates written), so the
    /// Node is often Ready by then and `ready_after` 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_after_start: Option<f64>,
    /// The Ready condition when the wait ended (`reason: message`), when it was not Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    /// The Node's kubelet version when it was Ready (edgecore's: `v1.32.10-kubeedge-v1.23.1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// A verified reset with `--delete-nodes`: `true` when its Node object was deleted,
    /// `false` when the cluster had none by that name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted: Option<bool>,
    /// Why the Node object of a reset could not be deleted (it is left behind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_error: Option<String>,
    /// A reset without `--delete-nodes`: the cluster still has its Node object (`Ready,
    /// 3d old`), listed in the recap as left behind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left_behind: Option<String>,
}

/// What `--preflight-only`'s probe of one node found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Probed {
    pub findings: Vec<PreflightFinding>,
    /// The sandbox image the runtime keadm join will use is configured with, when the
    /// image check ran (offline images in play) and could read it.
    pub sandbox_image: Option<String>,
}

/// Why `--preflight-only` could not probe a node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct ProbeError {
    /// The step that failed: connecting, or the probe itself.
    pub phase: Phase,
    /// One line, secrets masked, as a node's `error` in summary.json.
    pub reason: String,
}

impl NodeOutcome {
    pub fn succeeded(&self) -> bool {
        self.phase == Phase::Succeeded
    }

    /// What the node's keadmCmd did, [`Task::Other`] when not recorded.
    pub fn task(&self) -> Task {
        self.task.unwrap_or(Task::Other)
    }

    /// The error as the console shows it: keadm's line, then the last output it printed.
    pub fn error_with_output(&self) -> Option<String> {
        let error = self.error.as_deref()?;
        Some(match &self.last_output {
            Some(last) => format!("{error} (last output: {last})"),
            None => error.to_string(),
        })
    }

    /// keadm's line in `batch_process_log.txt`.
    pub fn log_line(&self) -> String {
        match (&self.phase, &self.error) {
            (Phase::Succeeded, _) => format!("Successfully processed node {}", self.name),
            (_, Some(error)) => {
                format!("Failed to process node {}: {}", self.name, one_line(error))
            }
            (phase, None) => format!("Failed to process node {}: {}", self.name, phase.as_str()),
        }
    }

    /// An outcome for a node that never ran (skipped by policy, or not started before an
    /// interrupt).
    pub fn not_run(
        index: usize,
        name: &str,
        address: &str,
        phase: Phase,
        reason: &str,
    ) -> NodeOutcome {
        let now = now();
        NodeOutcome {
            index,
            name: name.to_string(),
            address: address.to_string(),
            phase,
            failed_in: None,
            error: Some(reason.to_string()),
            last_output: None,
            failure_class: None,
            task: None,
            exit_status: None,
            reset_exit_status: None,
            reset_verified: false,
            arch: None,
            bytes_uploaded: 0,
            uploads_skipped: 0,
            connect_attempts: 0,
            steps: StepTimes::default(),
            started_at: now,
            finished_at: now,
            transcript: None,
            preflight: Vec::new(),
            cluster: None,
            upgrade: None,
            wave: None,
            site: None,
            drain: None,
        }
    }
}

/// Error text on one line: a multi-line error would break keadm's one-line-per-node log.
pub fn one_line(text: &str) -> String {
    text.split(['\n', '\r'])
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" | ")
}

pub fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// What the sites moved, per site, for the summary and the recap.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteTraffic {
    pub site: String,
    pub nodes: usize,
    /// Copies of relayed payloads this machine sent over the site's uplink.
    pub uplink_copies: u32,
    pub uplink_bytes: u64,
    /// Copies the site's nodes got from each other.
    pub peer_copies: u32,
    pub peer_bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A journal line as keadm-batch wrote it while classes, arches and finding ids were
    /// strings: it still reads, and writes back byte for byte (docs/summary.md).
    #[test]
    fn outcomes_read_and_write_the_same_json_as_before() {
        let line = r#"{"index":2,"name":"edge-2","address":"10.0.0.2:22","phase":"failed","failed_in":"running","error":"keadm join exited with status 1","failure_class":"token_invalid","exit_status":1,"arch":"arm64","bytes_uploaded":1024,"uploads_skipped":1,"connect_attempts":1,"steps":{"connect":0.1,"prepare":0.2,"upload":0.3,"run":4.0},"started_at":1700000000.5,"finished_at":1700000005.0,"transcript":"batch_runs/x/nodes/3-edge-2.log","preflight":[{"id":"management_dir_not_clean","detail":"2 entries: ca certs"},{"id":"probe_incomplete","detail":"it printed nothing more"}]}"#;
        let outcome: NodeOutcome = serde_json::from_str(line).unwrap();
        assert_eq!(outcome.failure_class, Some(FailureClass::TokenInvalid));
        assert_eq!(outcome.arch, Some(Arch::Arm64));
        assert_eq!(
            outcome.preflight[0].id,
            crate::diagnosis::FindingId::ManagementDirNotClean
        );
        assert_eq!(serde_json::to_string(&outcome).unwrap(), line);
    }

    /// summary.json gives a Ready node's time from its start beside the time from
    /// keadm's exit, and reads files written before it was recorded.
    #[test]
    fn the_cluster_check_records_ready_from_the_node_s_start() {
        let check = ClusterCheck {
            node_name: "edge-1".into(),
            registered_after: Some(0.0),
            ready_after: Some(0.0),
            ready_after_start: Some(31.25),
            ..ClusterCheck::default()
        };
        assert_eq!(
            serde_json::to_string(&check).unwrap(),
            r#"{"node_name":"edge-1","registered_after":0.0,"ready_after":0.0,"ready_after_start":31.25}"#
        );
        let old: ClusterCheck =
            serde_json::from_str(r#"{"node_name":"edge-1","ready_after":2.5}"#).unwrap();
        assert_eq!(old.ready_after_start, None);
    }

    #[test]
    fn a_node_that_never_started_took_zero_seconds_not_minus_zero() {
        let steps = StepTimes::default();
        assert!(!steps.started());
        assert_eq!(format!("{:.1}", steps.total()), "0.0");
    }

    #[test]
    fn log_lines_match_keadm() {
        let mut o = NodeOutcome::not_run(
            0,
            "edge-1",
            "1.2.3.4:22",
            Phase::Failed,
            "boom\nsecond line",
        );
        assert_eq!(
            o.log_line(),
            "Failed to process node edge-1: boom | second line"
        );
        // The last output goes to the console and the summary, never into keadm's line.
        o.error = Some("failed to execute keadm command x: Process exited with status 3".into());
        o.last_output = Some("Error: boom".into());
        assert_eq!(
            o.log_line(),
            "Failed to process node edge-1: failed to execute keadm command x: Process exited with status 3"
        );
        assert_eq!(
            o.error_with_output().unwrap(),
            "failed to execute keadm command x: Process exited with status 3 (last output: Error: boom)"
        );
        o.phase = Phase::Succeeded;
        assert_eq!(o.log_line(), "Successfully processed node edge-1");
    }
}
