//! `--preflight-only`'s report on stdout: a table with one row per node and what was
//! seen, then each finding once with its nodes and what to do about it (a fleet's table
//! would repeat the same fix under every node); after it, when the image check ran, the
//! sandbox images each site's runtimes are configured with, as the `--sandbox-image`
//! flags of the next `batch bundle`. With `--output json`, the same as one JSON document
//! (its shape is in docs/summary.md, "--preflight-only --output json").
//!
//! ```text
//! NODE     ADDRESS                 FINDINGS
//! edge-00  10.0.0.1:22             none
//! edge-01  10.0.0.2:22             [edgecore_running] edgecore is already running on this node, ... (pid 42)
//!
//! What to do, once per finding:
//! edgecore_running, 1 node: edge-01
//!   edgecore is already running on this node, so keadm join would stop at its first check.
//!   -> Leave the node out if it is joined already, ...
//!
//! Sandbox images the nodes' runtimes are configured with, as flags for the next `keadm-batch batch bundle`:
//! site store-1: --sandbox-image registry.k8s.io/pause:3.9 --sandbox-image registry.k8s.io/pause:3.6
//! no site: --sandbox-image registry.k8s.io/pause:3.6
//! ```

use std::fmt::Write as _;

use serde::Serialize;

use crate::diagnosis::{Finding, FindingId};
use crate::outcome::{Phase, ProbeError, Probed};

/// The ADDRESS column's width: `[2001:db8::31]:2222` fits.
const ADDRESS_WIDTH: usize = 22;

/// What `--preflight-only` learned about one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// Not a join command: there is nothing to probe.
    NotAJoin,
    /// The probe ran; what it found (nothing, on a clean node).
    Ran(Probed),
    /// Connecting or probing failed.
    Failed(ProbeError),
    /// The operator stopped the probes before this node's turn.
    NotStarted,
}

impl Probe {
    /// The probe's result as the pipeline returns it, its findings in one order on every
    /// node (by id, then detail), so that a fleet's table reads down its columns.
    pub fn of(result: Result<Probed, ProbeError>) -> Probe {
        match result {
            Ok(mut probed) => {
                probed
                    .findings
                    .sort_by(|a, b| (a.id, &a.detail).cmp(&(b.id, &b.detail)));
                Probe::Ran(probed)
            }
            Err(error) => Probe::Failed(error),
        }
    }

    /// Whether the node needs the operator's attention: it has findings or could not be
    /// probed.
    pub fn needs_attention(&self) -> bool {
        match self {
            Probe::Ran(probed) => !probed.findings.is_empty(),
            Probe::Failed(_) => true,
            Probe::NotAJoin | Probe::NotStarted => false,
        }
    }

    /// Whether the node's turn came (it may still have failed).
    pub fn started(&self) -> bool {
        !matches!(self, Probe::NotStarted)
    }

    /// The sandbox image the probe read from the node's runtime.
    fn sandbox_image(&self) -> Option<&str> {
        match self {
            Probe::Ran(probed) => probed.sandbox_image.as_deref(),
            _ => None,
        }
    }
}

/// One node's row: who it is and what its probe gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub name: String,
    /// `host:port`, as the plan shows it.
    pub address: String,
    /// Its site (`crate::plan::Site` in words): `site:`, else its proxyJump host.
    pub site: Option<String>,
    pub probe: Probe,
}

/// Every node's row, in config order, and whether the image check ran (offline images
/// in play): only that check reads the runtimes' sandbox images.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub rows: Vec<Row>,
    pub image_check: bool,
}

/// The sandbox images of one site's join nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SiteSandbox {
    /// The site in words; `None` groups the nodes that have none.
    pub site: Option<String>,
    /// Each image once, in the order of the first node that wants it.
    pub sandbox_images: Vec<String>,
    /// `--sandbox-image A --sandbox-image B`, ready for `batch bundle`.
    pub flags: String,
    /// The join nodes whose sandbox image was not read (not probed, or the runtime did
    /// not say): their rows say why.
    pub not_read: Vec<String>,
}

impl Report {
    /// The table, header first, rows in the order given; then the sandbox images per
    /// site when the image check ran.
    pub fn text(&self) -> String {
        let mut out = table(&self.rows);
        let found = by_id(self.rows.iter().filter_map(|row| match &row.probe {
            Probe::Ran(probed) => Some((row.name.as_str(), probed.findings.as_slice())),
            _ => None,
        }));
        if !found.is_empty() {
            out.push_str("\nWhat to do, once per finding:\n");
            out.push_str(&grouped(&found, ""));
        }
        if self.image_check {
            out.push_str("\nSandbox images the nodes' runtimes are configured with, as flags for the next `keadm-batch batch bundle`:\n");
            for site in self.sites() {
                let label = match &site.site {
                    Some(name) => format!("site {name}"),
                    None => "no site".to_string(),
                };
                let not_read = format!(
                    "not read on {} (see {} row above)",
                    site.not_read.join(", "),
                    if site.not_read.len() == 1 {
                        "its"
                    } else {
                        "their"
                    }
                );
                match (site.flags.is_empty(), site.not_read.is_empty()) {
                    (false, true) => {
                        let _ = writeln!(out, "{label}: {}", site.flags);
                    }
                    (false, false) => {
                        let _ = writeln!(out, "{label}: {}\n  {not_read}", site.flags);
                    }
                    (true, _) => {
                        let _ = writeln!(out, "{label}: {not_read}");
                    }
                }
            }
        }
        out
    }

    /// The join nodes grouped by site, in the order of each site's first node, with the
    /// sandbox images their runtimes want.
    pub fn sites(&self) -> Vec<SiteSandbox> {
        let mut sites: Vec<SiteSandbox> = Vec::new();
        for row in self.rows.iter().filter(|r| r.probe != Probe::NotAJoin) {
            let at = match sites.iter().position(|s| s.site == row.site) {
                Some(at) => at,
                None => {
                    sites.push(SiteSandbox {
                        site: row.site.clone(),
                        sandbox_images: Vec::new(),
                        flags: String::new(),
                        not_read: Vec::new(),
                    });
                    sites.len() - 1
                }
            };
            let site = &mut sites[at];
            match row.probe.sandbox_image() {
                Some(image) if !site.sandbox_images.iter().any(|i| i == image) => {
                    site.sandbox_images.push(image.to_string());
                }
                Some(_) => {}
                None => site.not_read.push(row.name.clone()),
            }
        }
        for site in &mut sites {
            site.flags = site
                .sandbox_images
                .iter()
                .map(|image| format!("--sandbox-image {image}"))
                .collect::<Vec<_>>()
                .join(" ");
        }
        sites
    }

    /// `--output json`: every node, and the sites' sandbox images when the image check
    /// ran, as one pretty JSON document with a final newline.
    pub fn json(&self) -> String {
        let nodes = self
            .rows
            .iter()
            .map(|row| {
                let (probe, findings, error) = match &row.probe {
                    Probe::NotAJoin => ("not_a_join", None, None),
                    Probe::Ran(probed) => ("ran", Some(probed.findings.as_slice()), None),
                    Probe::Failed(error) => ("failed", None, Some(error)),
                    Probe::NotStarted => ("not_started", None, None),
                };
                JsonNode {
                    name: &row.name,
                    address: &row.address,
                    site: row.site.as_deref(),
                    probe,
                    findings,
                    sandbox_image: row.probe.sandbox_image(),
                    error: error.map(|e| JsonError {
                        phase: e.phase,
                        reason: &e.reason,
                    }),
                }
            })
            .collect();
        let document = JsonReport {
            version: 1,
            nodes,
            sites: self.image_check.then(|| self.sites()),
        };
        let mut text = serde_json::to_string_pretty(&document).unwrap_or_default();
        text.push('\n');
        text
    }
}

#[derive(Serialize)]
struct JsonReport<'a> {
    /// The format version: it changes when a field changes meaning.
    version: u32,
    nodes: Vec<JsonNode<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sites: Option<Vec<SiteSandbox>>,
}

#[derive(Serialize)]
struct JsonNode<'a> {
    name: &'a str,
    address: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    site: Option<&'a str>,
    /// `ran`, `failed`, `not_a_join` or `not_started`.
    probe: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    findings: Option<&'a [Finding]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sandbox_image: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<JsonError<'a>>,
}

#[derive(Serialize)]
struct JsonError<'a> {
    phase: Phase,
    reason: &'a str,
}

/// Each finding seen on `nodes` (a node, as its name or its index, and its findings), in
/// [`FindingId`]'s order, with the nodes that have it, each once and in the order given.
pub fn by_id<'a, N: Copy + PartialEq>(
    nodes: impl IntoIterator<Item = (N, &'a [Finding])>,
) -> Vec<(FindingId, Vec<N>)> {
    let mut found: Vec<(FindingId, Vec<N>)> = Vec::new();
    for (name, findings) in nodes {
        for finding in findings {
            match found.iter_mut().find(|(id, _)| *id == finding.id) {
                Some((_, names)) if names.last() == Some(&name) => {}
                Some((_, names)) => names.push(name),
                None => found.push((finding.id, vec![name])),
            }
        }
    }
    found.sort_by_key(|(id, _)| *id);
    found
}

/// Each finding once: its id, how many nodes have it and which, what it is and what to do
/// about it, every line after `indent`:
///
/// ```text
/// runtime_socket_missing, 12 nodes: edge-00..edge-11
///   The container runtime socket keadm join will use does not exist, ...
///   -> Install and start containerd (or the node's runtime), ...
/// ```
pub fn grouped(found: &[(FindingId, Vec<&str>)], indent: &str) -> String {
    let mut out = String::new();
    for (id, names) in found {
        let finding = Finding {
            id: *id,
            detail: String::new(),
        };
        let _ = writeln!(
            out,
            "{indent}{id}, {}: {}\n{indent}  {}\n{indent}  -> {}",
            crate::waves::nodes(names.len()),
            super::names::compact(names),
            finding.message(),
            finding.suggested_action()
        );
    }
    out
}

/// The table, header first, rows in the order given: each finding's id and what was seen,
/// its fix once below the table.
fn table(rows: &[Row]) -> String {
    let width = rows.iter().map(|r| r.name.len()).max().unwrap_or(4).max(4);
    let mut out = String::new();
    let line = |out: &mut String, name: &str, address: &str, text: &dyn std::fmt::Display| {
        let _ = writeln!(
            out,
            "{name:<width$}  {address:<ADDRESS_WIDTH$}  {text}",
            width = width
        );
    };
    line(&mut out, "NODE", "ADDRESS", &"FINDINGS");
    for row in rows {
        let (name, address) = (row.name.as_str(), row.address.as_str());
        match &row.probe {
            Probe::NotAJoin => line(&mut out, name, address, &"none (not a join)"),
            Probe::Ran(probed) if probed.findings.is_empty() => {
                line(&mut out, name, address, &"none")
            }
            Probe::Ran(probed) => {
                for (i, finding) in probed.findings.iter().enumerate() {
                    // The node's name and address only on its first line.
                    let (name, address) = if i == 0 { (name, address) } else { ("", "") };
                    line(
                        &mut out,
                        name,
                        address,
                        &format_args!("[{}] {finding}", finding.id),
                    );
                }
            }
            Probe::Failed(error) => line(
                &mut out,
                name,
                address,
                &format_args!("not probed: {error}"),
            ),
            Probe::NotStarted => line(
                &mut out,
                name,
                address,
                &"not probed: the probes were stopped before this node's turn",
            ),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnosis::FindingId;
    use crate::outcome::Phase;

    fn row(name: &str, probe: Probe) -> Row {
        Row {
            name: name.into(),
            address: "10.0.0.1:22".into(),
            site: None,
            probe,
        }
    }

    fn ran(findings: Vec<Finding>) -> Probe {
        Probe::Ran(Probed {
            findings,
            sandbox_image: None,
        })
    }

    /// A clean node of `site` whose runtime's sandbox image is `sandbox`.
    fn at_site(name: &str, site: Option<&str>, sandbox: Option<&str>) -> Row {
        Row {
            site: site.map(str::to_string),
            ..row(
                name,
                Probe::Ran(Probed {
                    findings: Vec::new(),
                    sandbox_image: sandbox.map(str::to_string),
                }),
            )
        }
    }

    fn table_rows() -> Vec<Row> {
        vec![
            row("edge-00", ran(Vec::new())),
            row(
                "edge-001",
                ran(vec![
                    Finding {
                        id: FindingId::EdgecoreRunning,
                        detail: "pid 42".into(),
                    },
                    Finding {
                        id: FindingId::BashMissing,
                        detail: String::new(),
                    },
                ]),
            ),
            row("r", Probe::NotAJoin),
            row(
                "edge-03",
                Probe::Failed(ProbeError {
                    phase: Phase::Connecting,
                    reason: "failed to connect to edge-03".into(),
                }),
            ),
            row("edge-04", Probe::NotStarted),
        ]
    }

    #[test]
    fn the_table_has_a_row_per_node_and_each_finding_s_fix_once_below_it() {
        let mut rows = table_rows();
        // A second node with one of the first's findings: its fix is still given once.
        rows.insert(
            2,
            row(
                "edge-02",
                ran(vec![Finding {
                    id: FindingId::BashMissing,
                    detail: String::new(),
                }]),
            ),
        );
        let fix = |id| {
            Finding {
                id,
                detail: String::new(),
            }
            .suggested_action()
        };
        let expected = format!(
            "\
NODE      ADDRESS                 FINDINGS
edge-00   10.0.0.1:22             none
edge-001  10.0.0.1:22             [edgecore_running] edgecore is already running on this node, so keadm join would stop at its first check (pid 42)
                                  [bash_missing] bash is not installed; keadm runs its checks through bash and without it always reports that edgecore is already running.
edge-02   10.0.0.1:22             [bash_missing] bash is not installed; keadm runs its checks through bash and without it always reports that edgecore is already running.
r         10.0.0.1:22             none (not a join)
edge-03   10.0.0.1:22             not probed: failed to connect to edge-03
edge-04   10.0.0.1:22             not probed: the probes were stopped before this node's turn

What to do, once per finding:
edgecore_running, 1 node: edge-001
  edgecore is already running on this node, so keadm join would stop at its first check.
  -> {}
bash_missing, 2 nodes: edge-001, edge-02
  bash is not installed; keadm runs its checks through bash and without it always reports that edgecore is already running.
  -> {}
",
            fix(FindingId::EdgecoreRunning),
            fix(FindingId::BashMissing)
        );
        let report = Report {
            rows,
            image_check: false,
        };
        assert_eq!(
            report.text(),
            expected,
            "no sandbox section without the image check"
        );
        let attention: Vec<bool> = report
            .rows
            .iter()
            .map(|r| r.probe.needs_attention())
            .collect();
        assert_eq!(attention, [false, true, true, false, true, false]);
        assert!(!report.rows[5].probe.started() && report.rows[4].probe.started());
    }

    #[test]
    fn short_names_keep_the_header_width() {
        let report = Report {
            rows: vec![row("a", ran(Vec::new()))],
            image_check: false,
        };
        assert_eq!(
            report.text(),
            "NODE  ADDRESS                 FINDINGS\na     10.0.0.1:22             none\n"
        );
    }

    #[test]
    fn each_site_gets_its_runtimes_sandbox_images_as_bundle_flags() {
        let pause = |v: &str| format!("registry.k8s.io/pause:{v}");
        let rows = vec![
            at_site("a", Some("store-1"), Some(&pause("3.9"))),
            at_site("b", None, Some(&pause("3.6"))),
            at_site("c", Some("store-1"), Some(&pause("3.6"))),
            at_site("d", Some("store-1"), Some(&pause("3.9"))),
            at_site("e", Some("store-1"), None),
            at_site("f", Some("behind 10.0.0.9:22"), None),
            row("g", Probe::NotAJoin),
            row("h", Probe::NotStarted),
        ];
        let report = Report {
            rows,
            image_check: true,
        };
        let text = report.text();
        let section = text
            .split_once("\n\n")
            .expect("a section after the table")
            .1;
        assert_eq!(
            section,
            "\
Sandbox images the nodes' runtimes are configured with, as flags for the next `keadm-batch batch bundle`:
site store-1: --sandbox-image registry.k8s.io/pause:3.9 --sandbox-image registry.k8s.io/pause:3.6
  not read on e (see its row above)
no site: --sandbox-image registry.k8s.io/pause:3.6
  not read on h (see its row above)
site behind 10.0.0.9:22: not read on f (see its row above)
"
        );
        let json: serde_json::Value = serde_json::from_str(&report.json()).unwrap();
        assert_eq!(
            json["sites"],
            serde_json::json!([
                {
                    "site": "store-1",
                    "sandbox_images": [pause("3.9"), pause("3.6")],
                    "flags": "--sandbox-image registry.k8s.io/pause:3.9 --sandbox-image registry.k8s.io/pause:3.6",
                    "not_read": ["e"]
                },
                {
                    "site": null,
                    "sandbox_images": [pause("3.6")],
                    "flags": "--sandbox-image registry.k8s.io/pause:3.6",
                    "not_read": ["h"]
                },
                {
                    "site": "behind 10.0.0.9:22",
                    "sandbox_images": [],
                    "flags": "",
                    "not_read": ["f"]
                }
            ])
        );
        assert_eq!(json["nodes"][0]["site"], "store-1");
        assert_eq!(json["nodes"][0]["sandbox_image"], pause("3.9"));
    }

    #[test]
    fn the_json_document_has_each_node_with_its_findings_or_its_error() {
        let report = Report {
            rows: table_rows(),
            image_check: false,
        };
        let text = report.json();
        assert!(text.ends_with("}\n"), "one document, one final newline");
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "version": 1,
                "nodes": [
                    {"name": "edge-00", "address": "10.0.0.1:22", "probe": "ran", "findings": []},
                    {"name": "edge-001", "address": "10.0.0.1:22", "probe": "ran", "findings": [
                        {"id": "edgecore_running", "detail": "pid 42"},
                        {"id": "bash_missing", "detail": ""}
                    ]},
                    {"name": "r", "address": "10.0.0.1:22", "probe": "not_a_join"},
                    {"name": "edge-03", "address": "10.0.0.1:22", "probe": "failed",
                     "error": {"phase": "connecting", "reason": "failed to connect to edge-03"}},
                    {"name": "edge-04", "address": "10.0.0.1:22", "probe": "not_started"}
                ]
            }),
            "no sites without the image check, which reads the sandbox images"
        );
    }
}
