//! `--preflight-only`'s table on stdout: one row per node, and for each finding what was
//! seen and what to do about it.
//!
//! ```text
//! NODE     ADDRESS                 FINDINGS
//! edge-00  10.0.0.1:22             none
//! edge-01  10.0.0.2:22             edgecore is already running on this node, ... (pid 42)
//!                                    -> Leave the node out if it is joined already, ...
//! ```

use std::fmt::Write as _;

use crate::diagnosis::Finding;
use crate::outcome::ProbeError;

/// The ADDRESS column's width: `[2001:db8::31]:2222` fits.
const ADDRESS_WIDTH: usize = 22;

/// What `--preflight-only` learned about one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// Not a join command: there is nothing to probe.
    NotAJoin,
    /// The probe ran; what it found (nothing, on a clean node).
    Ran(Vec<Finding>),
    /// Connecting or probing failed.
    Failed(ProbeError),
    /// The operator stopped the probes before this node's turn.
    NotStarted,
}

impl Probe {
    /// The probe's result as the pipeline returns it.
    pub fn of(result: Result<Vec<Finding>, ProbeError>) -> Probe {
        match result {
            Ok(findings) => Probe::Ran(findings),
            Err(error) => Probe::Failed(error),
        }
    }

    /// Whether the node needs the operator's attention: it has findings or could not be
    /// probed.
    pub fn needs_attention(&self) -> bool {
        match self {
            Probe::Ran(findings) => !findings.is_empty(),
            Probe::Failed(_) => true,
            Probe::NotAJoin | Probe::NotStarted => false,
        }
    }

    /// Whether the node's turn came (it may still have failed).
    pub fn started(&self) -> bool {
        !matches!(self, Probe::NotStarted)
    }
}

/// One node's row: who it is and what its probe gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub name: String,
    /// `host:port`, as the plan shows it.
    pub address: String,
    pub probe: Probe,
}

/// The whole table, header first, rows in the order given.
pub fn render(rows: &[Row]) -> String {
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
            Probe::Ran(findings) if findings.is_empty() => line(&mut out, name, address, &"none"),
            Probe::Ran(findings) => {
                for (i, finding) in findings.iter().enumerate() {
                    // The node's name and address only on its first line.
                    let (name, address) = if i == 0 { (name, address) } else { ("", "") };
                    line(&mut out, name, address, finding);
                    line(
                        &mut out,
                        "",
                        "",
                        &format_args!("  -> {}", finding.suggested_action()),
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
            probe,
        }
    }

    #[test]
    fn the_table_has_a_row_per_node_and_an_action_per_finding() {
        let rows = [
            row("edge-00", Probe::Ran(Vec::new())),
            row(
                "edge-001",
                Probe::Ran(vec![
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
        ];
        let expected = "\
NODE      ADDRESS                 FINDINGS
edge-00   10.0.0.1:22             none
edge-001  10.0.0.1:22             edgecore is already running on this node, so keadm join would stop at its first check (pid 42)
                                    -> Leave the node out if it is joined already, or reset it first with `keadm reset edge --force` (--reset-first).
                                  bash is not installed; keadm runs its checks through bash and without it always reports that edgecore is already running.
                                    -> Install bash on the node (for example `apk add bash` on Alpine, `opkg install bash` on OpenWrt).
r         10.0.0.1:22             none (not a join)
edge-03   10.0.0.1:22             not probed: failed to connect to edge-03
edge-04   10.0.0.1:22             not probed: the probes were stopped before this node's turn
";
        assert_eq!(render(&rows), expected);
        let attention: Vec<bool> = rows.iter().map(|r| r.probe.needs_attention()).collect();
        assert_eq!(attention, [false, true, false, true, false]);
        assert!(!rows[4].probe.started() && rows[3].probe.started());
    }

    #[test]
    fn short_names_keep_the_header_width() {
        assert_eq!(
            render(&[row("a", Probe::Ran(Vec::new()))]),
            "NODE  ADDRESS                 FINDINGS\na     10.0.0.1:22             none\n"
        );
    }
}
