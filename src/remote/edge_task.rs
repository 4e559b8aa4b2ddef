//! The edge's upgrade family (`keadm upgrade edge`, `backup edge`, `rollback edge`,
//! `config-update`) on the node: each writes its result to [`UPGRADE_REPORT`] (keadm's
//! `JSONFileReporter`: `{"event","success","fromVersion","toVersion","errorMessage"}`),
//! and nothing else removes that file, so an old one could be taken for a new result. The
//! plan's command removes it before keadm runs ([`REMOVE_REPORT`]); after keadm, one
//! read-only round trip ([`EDGE_TASK_CHECK`]) prints the new report, the version the
//! running edgecore says it is, and the Node name edgecore registers under, which
//! [`parse_edge_task_check`] reads.
//!
//! A command that did not happen writes no report: `keadm upgrade edge` whose `[y/N]`
//! prompt was not answered `y` logs `aborted upgrade operation` and exits 0 before its
//! reporter is set up.

use std::sync::LazyLock;

use serde::{Deserialize, Serialize};

use crate::node_text::{escape_controls, one_line};

/// Where keadm writes the result of the edge's upgrade family.
pub const UPGRADE_REPORT: &str = "/etc/kubeedge/upgrade_report.json";

/// Put before keadm in the plan's command, so the report after it is this run's.
pub const REMOVE_REPORT: &str = "rm -f /etc/kubeedge/upgrade_report.json";

/// What an upgrade's script prints, before exiting 0 without running keadm, when the
/// running edgecore already is its target ([`unless_running`]).
pub const ALREADY_RUNS: &str = "keadm-batch: edgecore already runs ";

/// Put before an upgrade with a known target: a node whose running edgecore already is
/// `version` (as it logged when it started, else as edgecore.yaml says) is left alone, so
/// a rerun of an upgrade touches only the nodes not done yet (as KubeEdge's
/// NodeUpgradeJob and k0sctl skip them). scripts/unless_running.sh.
pub fn unless_running(version: &str) -> String {
    super::script::with_values(
        include_str!("scripts/unless_running.sh"),
        &[("KB_TARGET", version.trim_start_matches('v'))],
    )
}

/// Prints edgecore.yaml's `containerRuntimeEndpoint` (the runtime an upgrade pulls
/// through). Read-only, as the login user (keadm writes edgecore.yaml readable by all).
pub const EDGECORE_RUNTIME_ENDPOINT: &str = "sed -n 's/^[[:space:]]*containerRuntimeEndpoint:[[:space:]]*//p' /etc/kubeedge/config/edgecore.yaml 2>/dev/null | head -n 1";

/// The socket path in what [`EDGECORE_RUNTIME_ENDPOINT`] printed (`unix:///run/x.sock`
/// → `/run/x.sock`); `None` unless it is an absolute path of plain characters (the node's
/// text goes into later scripts, quoted, and into messages).
pub fn runtime_endpoint(said: &str) -> Option<String> {
    let line = said
        .lines()
        .next()?
        .trim()
        .trim_matches(|c| c == '"' || c == '\'');
    let path = line.strip_prefix("unix://").unwrap_or(line);
    (path.starts_with('/')
        && path.len() <= 256
        && path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c)))
    .then(|| path.to_string())
}

/// keadm's line when `upgrade edge`'s prompt was not answered `y`.
pub const ABORTED_LINE: &str = "aborted upgrade operation";

/// How much of the report is read: keadm's is one short JSON object; a node that put a
/// huge file there gets its first 4 KiB read.
const REPORT_BYTES: usize = 4096;

/// The check (scripts/edge_task_check.sh): POSIX sh, read-only, run with the
/// privileges keadm had. The running
/// edgecore's version is the one that process logged as it started (matched by its pid,
/// so an edgecore that failed to start, or the file at /usr/local/bin, is not taken for
/// it), else edgecore.yaml's `edgecoreVersion` (`KB_CONFIGURED`). keadm starts edgecore
/// as its last step, so the check gives it up to 15 s to appear and log its version.
pub static EDGE_TASK_CHECK: LazyLock<String> =
    LazyLock::new(|| super::script::sendable(include_str!("scripts/edge_task_check.sh")));

/// keadm's report, as `upgrade_reporter.go` writes it. Its texts are the node's: bounded
/// and escaped when read.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct UpgradeReport {
    pub event: String,
    pub success: bool,
    #[serde(rename = "fromVersion", default)]
    pub from_version: String,
    #[serde(rename = "toVersion", default)]
    pub to_version: String,
    #[serde(
        rename = "errorMessage",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub error_message: Option<String>,
}

/// What the report file held after keadm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReportRead {
    /// No file: keadm did not get to its reporter.
    Missing,
    /// A file that is not keadm's JSON (its first characters, escaped).
    Unreadable(String),
    Read(UpgradeReport),
}

/// What [`EDGE_TASK_CHECK`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeTaskCheck {
    /// Whether the check printed its last line.
    pub finished: bool,
    pub report: ReportRead,
    /// `None` when no edgecore runs; else the version it logged as it started (`None`
    /// inside when its log line was not found).
    pub running: Option<Option<String>>,
    /// edgecore.yaml's `edgecoreVersion`: what the last edgecore that started wrote.
    pub configured: Option<String>,
    /// edgecore.yaml's `hostnameOverride`: the Node name edgecore registers under.
    pub node_name: Option<String>,
}

impl EdgeTaskCheck {
    /// The running edgecore's version, when one runs: the one it logged, else
    /// edgecore.yaml's.
    pub fn running_version(&self) -> Option<&str> {
        let running = self.running.as_ref()?;
        running.as_deref().or(self.configured.as_deref())
    }

    /// Whether [`EdgeTaskCheck::running_version`] comes from edgecore.yaml, its log line
    /// not found.
    pub fn version_from_config(&self) -> bool {
        matches!(self.running, Some(None)) && self.configured.is_some()
    }
}

/// Reads the check's output (the node's lines, in order).
pub fn parse_edge_task_check(text: &str) -> EdgeTaskCheck {
    let mut check = EdgeTaskCheck {
        finished: false,
        report: ReportRead::Missing,
        running: None,
        configured: None,
        node_name: None,
    };
    for line in text.lines() {
        let line = line.trim_end();
        if let Some(json) = line.strip_prefix("KB_REPORT ") {
            check.report = read_report(json);
        } else if line == "KB_REPORT_NONE" {
            check.report = ReportRead::Missing;
        } else if let Some(rest) = line.strip_prefix("KB_RUNNING ") {
            let version = rest.split_once(' ').and_then(|(_, said)| version_in(said));
            check.running = Some(version);
        } else if line == "KB_RUNNING_NONE" {
            check.running = None;
        } else if let Some(said) = line.strip_prefix("KB_CONFIGURED") {
            check.configured = version_in(said);
        } else if let Some(name) = line.strip_prefix("KB_NODE_NAME") {
            check.node_name = super::identity::node_name_said(name);
        } else if line == "KB_EDGE_TASK_CHECKED" {
            check.finished = true;
        }
    }
    check
}

fn read_report(json: &str) -> ReportRead {
    let json = json.get(..REPORT_BYTES.min(json.len())).unwrap_or(json);
    match serde_json::from_str::<UpgradeReport>(json.trim()) {
        Ok(mut report) => {
            let clean = |s: &str, chars| escape_controls(&one_line(s, chars));
            report.event = clean(&report.event, 40);
            report.from_version = clean(&report.from_version, 80);
            report.to_version = clean(&report.to_version, 80);
            report.error_message = report.error_message.map(|m| clean(&m, 1000));
            ReportRead::Read(report)
        }
        Err(_) => ReportRead::Unreadable(escape_controls(&one_line(json, 120))),
    }
}

/// The version in what the node said of edgecore (its log's `v1.23.1`): its last word
/// that looks like a version (`KubeEdge v1.23.1` → `v1.23.1`).
pub fn version_in(said: &str) -> Option<String> {
    said.split_whitespace()
        .rev()
        .find(|w| {
            w.strip_prefix('v')
                .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
        })
        .filter(|w| w.len() <= 80)
        .map(escape_controls)
}

/// Whether two KubeEdge versions are the same release: `v1.23.1` and `1.23.1` are.
pub fn same_version(a: &str, b: &str) -> bool {
    a.trim_start_matches('v') == b.trim_start_matches('v')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote::sent_forms::{Forms, assert_forms_posix_sh};

    #[test]
    fn the_check_is_posix_sh() {
        assert_forms_posix_sh("the edge task check", &EDGE_TASK_CHECK, Forms::Every, &[]);
        // Sent as the login user, before the prepare step.
        assert_forms_posix_sh(
            "edgecore.yaml's runtime endpoint",
            EDGECORE_RUNTIME_ENDPOINT,
            Forms::Login,
            &[],
        );
    }

    /// The check run by `sh` on this machine, with the report and edgecore.yaml moved
    /// under `dir` (processes: this machine's, where no edgecore runs in this test's view
    /// of interest, so only the report and the name are asserted).
    #[test]
    fn the_check_reads_a_report_and_a_node_name_for_real() {
        let dir = tempfile::tempdir().unwrap();
        let report = dir.path().join("upgrade_report.json");
        let config = dir.path().join("edgecore.yaml");
        std::fs::write(
            &report,
            "{\"event\":\"Backup\",\"success\":true,\"fromVersion\":\"\",\"toVersion\":\"v1.23.0\"}",
        )
        .unwrap();
        std::fs::write(
            &config,
            "modules:\n  edged:\n    hostnameOverride: edge-7\n",
        )
        .unwrap();
        let script = EDGE_TASK_CHECK
            .replace(
                "/etc/kubeedge/upgrade_report.json",
                report.to_str().unwrap(),
            )
            .replace(
                "/etc/kubeedge/config/edgecore.yaml",
                config.to_str().unwrap(),
            )
            // No edgecore in this machine's view is waited for: no 15 s sleep here.
            .replace("\"$n\" -ge 15", "\"$n\" -ge 0");
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&script)
            .output()
            .unwrap();
        let check = parse_edge_task_check(&String::from_utf8_lossy(&out.stdout));
        assert!(check.finished, "{}", String::from_utf8_lossy(&out.stderr));
        let ReportRead::Read(read) = check.report else {
            panic!("no report read")
        };
        assert_eq!((read.event.as_str(), read.success), ("Backup", true));
        assert_eq!(check.node_name.as_deref(), Some("edge-7"));
        std::fs::remove_file(&report).unwrap();
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&script)
            .output()
            .unwrap();
        assert_eq!(
            parse_edge_task_check(&String::from_utf8_lossy(&out.stdout)).report,
            ReportRead::Missing
        );
    }

    #[test]
    fn a_report_a_running_edgecore_and_its_node_name_are_read() {
        let check = parse_edge_task_check(
            "KB_REPORT {\"event\":\"Upgrade\",\"success\":true,\"fromVersion\":\"v1.23.0\",\"toVersion\":\"v1.23.1\"}\n\
             KB_RUNNING 4242 v1.23.1\n\
             KB_CONFIGURED v1.23.1\n\
             KB_NODE_NAME edge-1\n\
             KB_EDGE_TASK_CHECKED\n",
        );
        assert!(check.finished);
        assert_eq!(
            check.report,
            ReportRead::Read(UpgradeReport {
                event: "Upgrade".into(),
                success: true,
                from_version: "v1.23.0".into(),
                to_version: "v1.23.1".into(),
                error_message: None,
            })
        );
        assert_eq!(check.running_version(), Some("v1.23.1"));
        assert_eq!(check.node_name.as_deref(), Some("edge-1"));
    }

    #[test]
    fn no_report_no_edgecore_and_a_bad_report_are_told_apart() {
        let check = parse_edge_task_check("KB_REPORT_NONE\nKB_RUNNING_NONE\nKB_NODE_NAME \n");
        assert!(!check.finished);
        assert_eq!(check.report, ReportRead::Missing);
        assert_eq!(check.running, None);
        assert_eq!(check.node_name, None);
        let check = parse_edge_task_check("KB_REPORT not json \x1b[31m\nKB_RUNNING 7 \n");
        assert!(matches!(&check.report, ReportRead::Unreadable(s) if !s.contains('\x1b')));
        assert_eq!(check.running, Some(None));
    }

    #[test]
    fn a_failed_report_keeps_its_message_bounded_and_escaped() {
        let long = "x".repeat(5000);
        let check = parse_edge_task_check(&format!(
            "KB_REPORT {{\"event\":\"Upgrade\",\"success\":false,\"fromVersion\":\"v1.23.0\",\"toVersion\":\"v1.23.1\",\"errorMessage\":\"failed to pull image \\u001b[2J{long}\"}}\n"
        ));
        // Past 4 KiB the JSON is cut and so unreadable: a node cannot make us read more.
        assert!(matches!(check.report, ReportRead::Unreadable(_)));
        let check = parse_edge_task_check(
            "KB_REPORT {\"event\":\"Upgrade\",\"success\":false,\"fromVersion\":\"v1.23.0\",\"toVersion\":\"v1.23.1\",\"errorMessage\":\"failed to pull image \\u001b[2J x\"}\n",
        );
        let ReportRead::Read(report) = check.report else {
            panic!("not read")
        };
        assert!(!report.success);
        let message = report.error_message.unwrap();
        assert!(message.starts_with("failed to pull image"), "{message}");
        assert!(!message.contains('\x1b'), "{message}");
    }

    #[test]
    fn the_skip_of_an_upgrade_done_already_is_posix_sh_and_compares_versions() {
        let script = unless_running("v1.23.1");
        assert_forms_posix_sh("the upgrade's skip", &script, Forms::Every, &[]);
        // The script run by sh with a /proc, an edgecore.log and an edgecore.yaml of this
        // test's own (this machine's /proc holds other tests' edgecores; no journal).
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().display().to_string();
        std::fs::create_dir_all(dir.path().join("proc/4242")).unwrap();
        std::fs::write(dir.path().join("proc/4242/comm"), "edgecore\n").unwrap();
        let run = |log: &str, config: &str| {
            std::fs::write(dir.path().join("edgecore.log"), log).unwrap();
            std::fs::write(dir.path().join("edgecore.yaml"), config).unwrap();
            let script = script
                .replace("/proc/[0-9]*", &format!("{root}/proc/[0-9]*"))
                .replace("${p#/proc/}", &format!("${{p#{root}/proc/}}"))
                .replace("if has pidof", "if false")
                .replace("journalctl", "false")
                .replace(
                    "/var/log/kubeedge/edgecore.log",
                    &format!("{root}/edgecore.log"),
                )
                .replace(
                    "/etc/kubeedge/config/edgecore.yaml",
                    &format!("{root}/edgecore.yaml"),
                );
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("{script}echo ran"))
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).to_string()
        };
        let logged = |pid: u32, version: &str| {
            format!("I1202 10:00:00.000000    {pid} server.go:107] Version: {version}\n")
        };
        let skipped = format!("{ALREADY_RUNS}v1.23.1, so keadm upgrade edge was not run\n");
        // The running edgecore logged the target: the upgrade is not run.
        assert_eq!(run(&logged(4242, "v1.23.1"), ""), skipped);
        // It logged another version: the upgrade runs, whatever edgecore.yaml says.
        assert_eq!(
            run(&logged(4242, "v1.23.0"), "edgecoreVersion: v1.23.1\n"),
            "ran\n"
        );
        // Another process's line is not this one's; edgecore.yaml says then.
        assert_eq!(
            run(&logged(7, "v1.23.1"), "edgecoreVersion: v1.23.0\n"),
            "ran\n"
        );
        assert_eq!(
            run(&logged(7, "v1.23.0"), "edgecoreVersion: v1.23.1\n"),
            skipped
        );
        // No edgecore runs: the upgrade runs.
        std::fs::remove_dir_all(dir.path().join("proc/4242")).unwrap();
        assert_eq!(
            run(&logged(4242, "v1.23.1"), "edgecoreVersion: v1.23.1\n"),
            "ran\n"
        );
    }

    #[test]
    fn the_runtime_endpoint_is_a_plain_absolute_path() {
        assert_eq!(
            runtime_endpoint("unix:///tmp/containerd/containerd.sock\n").as_deref(),
            Some("/tmp/containerd/containerd.sock")
        );
        assert_eq!(
            runtime_endpoint("\"unix:///run/k3s/containerd/containerd.sock\"").as_deref(),
            Some("/run/k3s/containerd/containerd.sock")
        );
        for bad in [
            "",
            "tcp://10.0.0.1:1234",
            "unix://run/x",
            "/run/$(reboot).sock",
        ] {
            assert_eq!(runtime_endpoint(bad), None, "{bad}");
        }
    }

    #[test]
    fn versions_are_read_from_what_edgecore_prints() {
        assert_eq!(version_in("KubeEdge v1.23.1").as_deref(), Some("v1.23.1"));
        assert_eq!(
            version_in("v1.22.0-beta.0").as_deref(),
            Some("v1.22.0-beta.0")
        );
        assert_eq!(version_in("no version here"), None);
        assert!(same_version("v1.23.1", "1.23.1"));
        assert!(!same_version("v1.23.1", "v1.23.0"));
    }

    #[test]
    fn the_node_name_must_be_a_node_name() {
        let check = parse_edge_task_check("KB_NODE_NAME edge; rm -rf /\n");
        assert_eq!(check.node_name, None);
        let check = parse_edge_task_check("KB_NODE_NAME \"edge-2\"\n");
        assert_eq!(check.node_name.as_deref(), Some("edge-2"));
    }
}
