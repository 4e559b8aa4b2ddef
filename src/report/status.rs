//! `batch status`'s report on stdout: a table with one row per node, then why each node
//! that did not answer did not; with `--output json`, the same as one JSON document (its
//! shape is in docs/status.md).
//!
//! ```text
//! NODE     ADDRESS      SSH          EDGECORE          EDGECORE VERSION  KEADM    CERT EXPIRES       LAST RUN                CLUSTER
//! edge-00  10.0.0.1:22  ok           running (pid 42)  KubeEdge v1.20.0  v1.20.0  2026-12-16 (9d) !  -                       -
//! edge-01  10.0.0.2:22  unreachable  -                 -                 -        -                  failed (token_invalid)  -
//!
//! edge-01: Cannot connect to 10.0.0.2:22: connection refused.
//! ```
//!
//! A `!` marks an edge certificate that expires within `--cert-warn-days` (or has
//! expired); [`StatusReport::cert_warnings`] says why that matters.

use std::fmt::Write as _;

use serde::Serialize;

use crate::cert_expiry::days_left;
use crate::diagnosis::FailureClass;
use crate::options::OutputFormat;
use crate::outcome::{NodeOutcome, Phase, ProbeError};
use crate::remote::{EdgeCert, NodeStatus};

/// The format version of the JSON document: it changes when a field changes meaning.
pub const STATUS_JSON_VERSION: u32 = 1;

/// What asking one node gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asked {
    /// The node answered.
    Answered(NodeStatus),
    /// It could not be reached, or did not finish answering.
    Failed(ProbeError),
    /// The operator stopped before this node's turn.
    NotAsked,
}

/// One node's row.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusRow {
    pub name: String,
    /// `host:port`, as the plan shows it.
    pub address: String,
    pub asked: Asked,
    /// The node's outcome in the latest run in the current directory (along its chain of
    /// retries), when it is in it.
    pub last_run: Option<NodeOutcome>,
    /// The cluster's view of the node, with a kubeconfig.
    pub cluster: Option<ClusterView>,
}

/// What the cluster has under a node's Node name (one list for the whole status).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClusterView {
    /// The Node name a join of this node registers under.
    pub node_name: String,
    /// Whether the cluster has a Node by that name.
    pub registered: bool,
    /// `Ready`, `NotReady` or `Unknown` (null when not registered).
    pub ready: Option<&'static str>,
    /// The Node's age as kubectl shows it (`3h`), when it has one.
    pub age: Option<String>,
    /// When the config gives the node labels or taints and the Node exists: how the
    /// Node's differ from them, one phrase each (empty when it has them all).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub labels_differ: Option<Vec<String>>,
}

impl ClusterView {
    /// The CLUSTER cell: `Ready 3h`, `NotReady 5m`, or `no Node`; then, when the config
    /// gives the node labels or taints, whether the Node has them (`labels as asked`, or
    /// the class a run's Ready gate would give it, with the differences:
    /// `labels_mismatch (label zone is `us`, not `eu`)`).
    fn cell(&self) -> String {
        let state = match (self.ready, &self.age) {
            (Some(ready), Some(age)) => format!("{ready} {age}"),
            (Some(ready), None) => ready.to_string(),
            (None, _) => "no Node".to_string(),
        };
        match &self.labels_differ {
            None => state,
            Some(differ) if differ.is_empty() => format!("{state}, labels as asked"),
            Some(differ) => format!(
                "{state}, {} ({})",
                FailureClass::LabelsMismatch,
                differ.join("; ")
            ),
        }
    }
}

/// Every selected node's row, in config order, and the run directory the last outcomes
/// come from.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusReport {
    pub rows: Vec<StatusRow>,
    /// The latest run directory, when there is one.
    pub last_run_dir: Option<String>,
    /// When the nodes were asked, in unix seconds: what certificate expiries count from.
    pub now: i64,
    /// `--cert-warn-days`: a certificate that expires within this many days is warned of.
    pub cert_warn_days: u32,
}

/// What the table and the document say of one node's edge certificate (the document's
/// `edge_cert`).
#[derive(Serialize)]
struct CertView<'a> {
    path: Option<&'a str>,
    /// Its notAfter: unix seconds here, RFC 3339 in the document.
    #[serde(serialize_with = "rfc3339")]
    not_after: Option<i64>,
    /// Whole days from now to its notAfter, negative once past it.
    days_left: Option<i64>,
    /// Whether it expires within `--cert-warn-days`, or has expired.
    expiring: bool,
    /// Why its expiry is unknown, when there is a file whose expiry cannot be read.
    error: Option<&'static str>,
}

fn rfc3339<S: serde::Serializer>(at: &Option<i64>, to: S) -> Result<S::Ok, S::Error> {
    match at {
        Some(at) => to.serialize_str(&crate::utc::rfc3339((*at).max(0) as u64)),
        None => to.serialize_none(),
    }
}

/// No certificate, or one whose expiry is unknown.
const NO_CERT: CertView<'static> = CertView {
    path: None,
    not_after: None,
    days_left: None,
    expiring: false,
    error: None,
};

/// Why an edge certificate the login cannot read has no expiry shown.
const UNREADABLE: &str = "the login cannot read it";

impl StatusReport {
    fn cert<'a>(&self, cert: &'a EdgeCert) -> CertView<'a> {
        match cert {
            EdgeCert::None => NO_CERT,
            EdgeCert::Unreadable { path } => CertView {
                path: Some(path),
                error: Some(UNREADABLE),
                ..NO_CERT
            },
            EdgeCert::Invalid { path, why } => CertView {
                path: Some(path),
                error: Some(why),
                ..NO_CERT
            },
            EdgeCert::Expires { path, not_after } => {
                let left = days_left(*not_after, self.now);
                CertView {
                    path: Some(path),
                    not_after: Some(*not_after),
                    days_left: Some(left),
                    expiring: left < i64::from(self.cert_warn_days),
                    error: None,
                }
            }
        }
    }

    /// The CERT EXPIRES cell: `2027-01-05 (30d)`, with ` !` when it is within the
    /// threshold, `expired 2026-12-01 !`, `unreadable`, `invalid`, or `-`.
    fn cert_cell(&self, cert: &EdgeCert) -> String {
        let view = self.cert(cert);
        let mark = if view.expiring { " !" } else { "" };
        match (view.not_after, view.days_left, view.error) {
            (Some(at), Some(left), _) if left < 0 => format!("expired {}{mark}", day(at)),
            (Some(at), Some(left), _) => format!("{} ({left}d){mark}", day(at)),
            (_, _, Some(UNREADABLE)) => "unreadable".into(),
            (_, _, Some(_)) => "invalid".into(),
            _ => "-".into(),
        }
    }

    /// One sentence for each node whose edge certificate expires within the threshold
    /// or has expired, for the operator's stderr.
    pub fn cert_warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        for row in &self.rows {
            let Asked::Answered(status) = &row.asked else {
                continue;
            };
            let view = self.cert(&status.cert);
            let (Some(at), Some(left)) = (view.not_after, view.days_left) else {
                continue;
            };
            if !view.expiring {
                continue;
            }
            let when = if left < 0 {
                format!("expired on {}", crate::utc::rfc3339(at.max(0) as u64))
            } else {
                format!(
                    "expires in {left} day{} ({}), within --cert-warn-days {}",
                    if left == 1 { "" } else { "s" },
                    crate::utc::rfc3339(at.max(0) as u64),
                    self.cert_warn_days
                )
            };
            out.push(format!(
                "{}: its edge certificate {} {when}. KubeEdge renews it only while the node is connected to cloudcore, and a node still offline when it expires cannot reconnect until it is joined again: keep the node online (and check that its edgecore runs), or plan its rejoin.",
                row.name,
                view.path.unwrap_or("")
            ));
        }
        out
    }
}

/// `2026-12-16` for unix seconds.
fn day(unix: i64) -> String {
    crate::utc::rfc3339(unix.max(0) as u64)[..10].to_string()
}

impl StatusReport {
    /// How many nodes did not answer (unreachable, or their status could not be read).
    pub fn not_answered(&self) -> usize {
        self.rows
            .iter()
            .filter(|row| matches!(row.asked, Asked::Failed(_)))
            .count()
    }

    /// How many nodes were asked before the operator stopped.
    pub fn asked(&self) -> usize {
        self.rows
            .iter()
            .filter(|row| row.asked != Asked::NotAsked)
            .count()
    }

    /// The report in `format`: the table, or the JSON document.
    pub fn render(&self, format: OutputFormat) -> String {
        match format {
            OutputFormat::Json => self.json(),
            // `batch status --output` offers no JUnit (the command line refuses it).
            OutputFormat::Text | OutputFormat::Junit => self.text(),
        }
    }

    /// The table, then a line for each node that did not answer.
    pub fn text(&self) -> String {
        let header = [
            "NODE",
            "ADDRESS",
            "SSH",
            "EDGECORE",
            "EDGECORE VERSION",
            "KEADM",
            "CERT EXPIRES",
            "LAST RUN",
            "CLUSTER",
        ];
        let mut cells: Vec<[String; 9]> = vec![header.map(String::from)];
        for row in &self.rows {
            let none = || "-".to_string();
            let (ssh, edgecore, edgecore_version, keadm, cert) = match &row.asked {
                Asked::Answered(status) => (
                    "ok".to_string(),
                    edgecore_cell(status),
                    status.edgecore_version.clone().unwrap_or_else(none),
                    status.keadm_version.clone().unwrap_or_else(none),
                    self.cert_cell(&status.cert),
                ),
                Asked::Failed(error) if error.phase == Phase::Connecting => {
                    ("unreachable".to_string(), none(), none(), none(), none())
                }
                Asked::Failed(_) => ("no answer".to_string(), none(), none(), none(), none()),
                Asked::NotAsked => ("not asked".to_string(), none(), none(), none(), none()),
            };
            cells.push([
                row.name.clone(),
                row.address.clone(),
                ssh,
                edgecore,
                edgecore_version,
                keadm,
                cert,
                row.last_run.as_ref().map_or_else(none, last_run_cell),
                // The cluster's view: the Node's Ready state and age, with a kubeconfig.
                row.cluster.as_ref().map_or_else(none, ClusterView::cell),
            ]);
        }
        let widths: Vec<usize> = (0..header.len())
            .map(|c| {
                cells
                    .iter()
                    .map(|r| r[c].chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in &cells {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                if c + 1 == row.len() {
                    line.push_str(cell);
                } else {
                    let pad = widths[c] - cell.chars().count();
                    let _ = write!(line, "{cell}{}  ", " ".repeat(pad));
                }
            }
            let _ = writeln!(out, "{}", line.trim_end());
        }
        let failed: Vec<_> = self
            .rows
            .iter()
            .filter_map(|row| match &row.asked {
                Asked::Failed(error) => Some((row, error)),
                _ => None,
            })
            .collect();
        if !failed.is_empty() {
            out.push('\n');
            for (row, error) in failed {
                let _ = writeln!(out, "{}: {}", row.name, error.reason);
            }
        }
        match &self.last_run_dir {
            Some(dir) => {
                let _ = writeln!(out, "\nLast run: {dir}.");
            }
            None => out.push_str("\nLast run: none in this directory (no batch_runs/latest).\n"),
        }
        out
    }

    /// `--output json`: one pretty document with a final newline.
    pub fn json(&self) -> String {
        let nodes = self
            .rows
            .iter()
            .map(|row| JsonNode::of(row, self))
            .collect();
        let document = JsonStatus {
            version: STATUS_JSON_VERSION,
            last_run_dir: self.last_run_dir.as_deref(),
            nodes,
        };
        let mut text = serde_json::to_string_pretty(&document).unwrap_or_default();
        text.push('\n');
        text
    }
}

/// The EDGECORE cell.
fn edgecore_cell(status: &NodeStatus) -> String {
    if status.edgecore_pids.is_empty() {
        return "not running".to_string();
    }
    let pids: Vec<String> = status.edgecore_pids.iter().map(u32::to_string).collect();
    format!("running (pid {})", pids.join(" "))
}

/// The LAST RUN cell: the phase, with the failure class when there is one.
fn last_run_cell(outcome: &NodeOutcome) -> String {
    match outcome.failure_class {
        Some(class) => format!("{} ({class})", outcome.phase.as_str()),
        None => outcome.phase.as_str().to_string(),
    }
}

#[derive(Serialize)]
struct JsonStatus<'a> {
    version: u32,
    last_run_dir: Option<&'a str>,
    nodes: Vec<JsonNode<'a>>,
}

/// One node in the document. Every field is always there (null when unknown), so
/// readers need not test for keys.
#[derive(Serialize)]
struct JsonNode<'a> {
    name: &'a str,
    address: &'a str,
    /// `answered`, `unreachable` (the connection or the login failed), `no_answer` (the
    /// status script could not run to its end) or `not_asked` (stopped by Ctrl-C).
    ssh: &'static str,
    /// Why the node did not answer, in one line.
    error: Option<&'a str>,
    /// Whether a process named edgecore runs; null when the node did not answer.
    edgecore_running: Option<bool>,
    edgecore_pids: Vec<u32>,
    /// The edgecore binary asked (/usr/local/bin/edgecore, else the one on PATH).
    edgecore_path: Option<&'a str>,
    edgecore_version: Option<&'a str>,
    keadm_version: Option<&'a str>,
    /// The edge certificate edgecore connects with: null when the node did not answer or
    /// has none.
    edge_cert: Option<CertView<'a>>,
    last_run: Option<JsonLastRun<'a>>,
    /// The cluster's view of the node: null without a kubeconfig.
    cluster: Option<&'a ClusterView>,
}

#[derive(Serialize)]
struct JsonLastRun<'a> {
    phase: Phase,
    failure_class: Option<FailureClass>,
    error: Option<&'a str>,
    finished_at: f64,
}

impl<'a> JsonNode<'a> {
    fn of(row: &'a StatusRow, report: &StatusReport) -> JsonNode<'a> {
        let status = match &row.asked {
            Asked::Answered(status) => Some(status),
            _ => None,
        };
        JsonNode {
            name: &row.name,
            address: &row.address,
            ssh: match &row.asked {
                Asked::Answered(_) => "answered",
                Asked::Failed(error) if error.phase == Phase::Connecting => "unreachable",
                Asked::Failed(_) => "no_answer",
                Asked::NotAsked => "not_asked",
            },
            error: match &row.asked {
                Asked::Failed(error) => Some(&error.reason),
                _ => None,
            },
            edgecore_running: status.map(|s| !s.edgecore_pids.is_empty()),
            edgecore_pids: status.map(|s| s.edgecore_pids.clone()).unwrap_or_default(),
            edgecore_path: status.and_then(|s| s.edgecore_path.as_deref()),
            edgecore_version: status.and_then(|s| s.edgecore_version.as_deref()),
            keadm_version: status.and_then(|s| s.keadm_version.as_deref()),
            edge_cert: status
                .filter(|s| s.cert != EdgeCert::None)
                .map(|s| report.cert(&s.cert)),
            last_run: row.last_run.as_ref().map(|outcome| JsonLastRun {
                phase: outcome.phase,
                failure_class: outcome.failure_class,
                error: outcome.error.as_deref(),
                finished_at: outcome.finished_at,
            }),
            cluster: row.cluster.as_ref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> StatusReport {
        let mut failed = NodeOutcome::not_run(
            1,
            "edge-01",
            "10.0.0.2:22",
            Phase::Failed,
            "keadm join exited with status 1",
        );
        failed.failure_class = Some(FailureClass::TokenInvalid);
        StatusReport {
            rows: vec![
                StatusRow {
                    name: "edge-00".into(),
                    address: "10.0.0.1:22".into(),
                    asked: Asked::Answered(NodeStatus {
                        finished: true,
                        edgecore_pids: vec![42],
                        edgecore_path: Some("/usr/local/bin/edgecore".into()),
                        edgecore_version: Some("KubeEdge v1.20.0".into()),
                        keadm_version: Some("v1.20.0".into()),
                        cert: EdgeCert::Expires {
                            path: "/etc/kubeedge/certs/server.crt".into(),
                            not_after: NOW + 9 * 86_400 + 3600,
                        },
                    }),
                    last_run: None,
                    cluster: None,
                },
                StatusRow {
                    name: "edge-01".into(),
                    address: "10.0.0.2:22".into(),
                    asked: Asked::Failed(ProbeError {
                        phase: Phase::Connecting,
                        reason: "Cannot connect to 10.0.0.2:22: connection refused.".into(),
                    }),
                    last_run: Some(failed),
                    cluster: None,
                },
            ],
            last_run_dir: Some("batch_runs/x".into()),
            now: NOW,
            cert_warn_days: 30,
        }
    }

    /// 2026-12-06T00:00:00Z.
    const NOW: i64 = 1_796_515_200;

    #[test]
    fn the_table_aligns_its_columns_and_says_why_a_node_did_not_answer() {
        assert_eq!(
            report().text(),
            "NODE     ADDRESS      SSH          EDGECORE          EDGECORE VERSION  KEADM    CERT EXPIRES       LAST RUN                CLUSTER\n\
             edge-00  10.0.0.1:22  ok           running (pid 42)  KubeEdge v1.20.0  v1.20.0  2026-12-15 (9d) !  -                       -\n\
             edge-01  10.0.0.2:22  unreachable  -                 -                 -        -                  failed (token_invalid)  -\n\
             \n\
             edge-01: Cannot connect to 10.0.0.2:22: connection refused.\n\
             \n\
             Last run: batch_runs/x.\n"
        );
        assert_eq!(report().not_answered(), 1);
        let warnings = report().cert_warnings();
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].starts_with("edge-00: its edge certificate /etc/kubeedge/certs/server.crt expires in 9 days (2026-12-15T01:00:00Z), within --cert-warn-days 30. KubeEdge renews it only while the node is connected"),
            "{}",
            warnings[0]
        );
        let mut calm = report();
        calm.cert_warn_days = 9;
        assert!(calm.cert_warnings().is_empty());
        assert!(
            calm.text().contains(" 2026-12-15 (9d)  "),
            "{}",
            calm.text()
        );
    }

    #[test]
    fn an_expired_or_unreadable_certificate_says_so() {
        let mut report = report();
        let Asked::Answered(status) = &mut report.rows[0].asked else {
            unreachable!()
        };
        status.cert = EdgeCert::Expires {
            path: "/c".into(),
            not_after: NOW - 5 * 86_400,
        };
        assert!(
            report.text().contains(" expired 2026-12-01 !  "),
            "{}",
            report.text()
        );
        let warnings = report.cert_warnings();
        assert!(
            warnings[0].starts_with("edge-00: its edge certificate /c expired on 2026-12-01T00:00:00Z. KubeEdge renews it"),
            "{warnings:?}"
        );
        let json: serde_json::Value = serde_json::from_str(&report.json()).unwrap();
        assert_eq!(json["nodes"][0]["edge_cert"]["days_left"], -5);
        let Asked::Answered(status) = &mut report.rows[0].asked else {
            unreachable!()
        };
        status.cert = EdgeCert::Unreadable { path: "/c".into() };
        assert!(report.text().contains(" unreadable  "), "{}", report.text());
        assert!(report.cert_warnings().is_empty());
        let json: serde_json::Value = serde_json::from_str(&report.json()).unwrap();
        let cert = &json["nodes"][0]["edge_cert"];
        assert_eq!(cert["error"], "the login cannot read it");
        assert_eq!(cert["not_after"], serde_json::Value::Null);
        assert_eq!(cert["expiring"], false);
    }

    #[test]
    fn the_json_has_every_field_on_every_node() {
        let json: serde_json::Value = serde_json::from_str(&report().json()).unwrap();
        assert_eq!(json["version"], 1);
        let nodes = json["nodes"].as_array().unwrap();
        let keys = |n: &serde_json::Value| {
            let mut k: Vec<String> = n.as_object().unwrap().keys().cloned().collect();
            k.sort();
            k
        };
        assert_eq!(keys(&nodes[0]), keys(&nodes[1]));
        assert_eq!(nodes[0]["edgecore_running"], true);
        assert_eq!(nodes[0]["edgecore_pids"], serde_json::json!([42]));
        assert_eq!(nodes[0]["cluster"], serde_json::Value::Null);
        assert_eq!(nodes[1]["ssh"], "unreachable");
        assert_eq!(nodes[1]["edgecore_running"], serde_json::Value::Null);
        assert_eq!(nodes[1]["last_run"]["failure_class"], "token_invalid");
        assert_eq!(nodes[0]["edge_cert"]["days_left"], 9);
        assert_eq!(nodes[0]["edge_cert"]["expiring"], true);
        assert_eq!(nodes[0]["edge_cert"]["not_after"], "2026-12-15T01:00:00Z");
        assert_eq!(nodes[1]["edge_cert"], serde_json::Value::Null);
    }
}
