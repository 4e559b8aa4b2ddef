//! `summary.json`: the whole run for scripts, written at the end (atomically, via a
//! temporary file). Its format is documented in docs/summary.md; `version` changes
//! whenever a field changes meaning.

use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::arch::Arch;
use crate::outcome::{NodeOutcome, Phase, SiteTraffic, now};
use crate::redact;
use crate::stage::Stager;
use crate::waves::WaveRecord;

pub const SUMMARY_VERSION: u32 = 1;

/// The final phases a run's nodes are counted by, in the order the totals, the metrics
/// and report.html list them.
pub const FINAL_PHASES: [Phase; 5] = [
    Phase::Succeeded,
    Phase::Failed,
    Phase::TimedOut,
    Phase::Skipped,
    Phase::Interrupted,
];

/// The final phase a node counts as: its own, or failed for a phase that is not final (a
/// node that never finished, in a run cut short).
pub fn counted_as(phase: Phase) -> Phase {
    match phase {
        Phase::Succeeded | Phase::TimedOut | Phase::Skipped | Phase::Interrupted => phase,
        _ => Phase::Failed,
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub selected: usize,
    pub succeeded: usize,
    pub failed: usize,
    pub timed_out: usize,
    pub skipped: usize,
    pub interrupted: usize,
}

impl Totals {
    pub fn of(outcomes: &[NodeOutcome]) -> Totals {
        let mut t = Totals {
            selected: outcomes.len(),
            ..Totals::default()
        };
        for o in outcomes {
            match counted_as(o.phase) {
                Phase::Succeeded => t.succeeded += 1,
                Phase::TimedOut => t.timed_out += 1,
                Phase::Skipped => t.skipped += 1,
                Phase::Interrupted => t.interrupted += 1,
                _ => t.failed += 1,
            }
        }
        t
    }

    pub fn not_succeeded(&self) -> usize {
        self.selected - self.succeeded
    }
}

/// A staged keadm package, as the summary records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StagedPackage {
    pub arch: Arch,
    pub version: String,
    pub tarball_sha512: String,
    pub verified: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub version: u32,
    pub tool: String,
    pub run_id: String,
    pub config: String,
    /// The command line that started the run, shell-quoted, secrets masked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_line: Option<String>,
    pub started_at: f64,
    pub finished_at: f64,
    pub interrupted: bool,
    pub totals: Totals,
    #[serde(default)]
    pub packages: Vec<StagedPackage>,
    pub nodes: Vec<NodeOutcome>,
    /// What each site with two or more nodes moved over its uplink and among its nodes,
    /// with `--relay auto`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sites: Vec<SiteTraffic>,
    /// A rollout in waves: what became of each wave, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waves: Vec<WaveRecord>,
    /// For a summary made by `batch merge`: the run directories it combines.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub merged_from: Vec<String>,
}

/// What a run knows about itself when its last node has finished, beyond the outcomes.
#[derive(Debug, Clone, Copy)]
pub struct RunFacts<'a> {
    pub run_id: &'a str,
    /// The config file, as given on the command line.
    pub config: &'a Path,
    /// Seconds since the Unix epoch.
    pub started_at: f64,
    /// Whether the operator stopped the run.
    pub interrupted: bool,
    /// The stager, when the run staged packages.
    pub stager: Option<&'a Stager>,
    /// What the sites moved (empty without a relay).
    pub sites: &'a [SiteTraffic],
    /// What became of each wave (empty when the run was not in waves).
    pub waves: &'a [WaveRecord],
}

impl Summary {
    /// The summary of a run that has just finished with these outcomes (in config order).
    pub fn of_run(facts: RunFacts, nodes: Vec<NodeOutcome>) -> Summary {
        Summary {
            version: SUMMARY_VERSION,
            tool: format!("keadm-batch {}", env!("CARGO_PKG_VERSION")),
            run_id: facts.run_id.to_string(),
            config: facts.config.display().to_string(),
            command_line: Some(masked_command_line(std::env::args())),
            started_at: facts.started_at,
            finished_at: now(),
            interrupted: facts.interrupted,
            totals: Totals::of(&nodes),
            packages: facts.stager.map(staged_packages).unwrap_or_default(),
            nodes,
            sites: facts.sites.to_vec(),
            waves: facts.waves.to_vec(),
            merged_from: Vec::new(),
        }
    }

    /// What the run exits with, as `error::Error::exit_code` maps it: 130 for a run the
    /// operator stopped, 1 when a node did not succeed, else 0.
    pub fn exit_status(&self) -> i32 {
        if self.interrupted {
            130
        } else if self.totals.not_succeeded() > 0 {
            1
        } else {
            0
        }
    }

    pub fn write(&self, path: &Path) -> io::Result<()> {
        let text = serde_json::to_string_pretty(self).map_err(io::Error::other)?;
        super::files::replace(path, (text + "\n").as_bytes())
    }
}

/// A command line as a shell would take it back, with whatever looks like a secret
/// masked: `--token` values, words shaped like a join token, and passwords in URLs.
pub fn masked_command_line(args: impl IntoIterator<Item = String>) -> String {
    let quoted: Vec<String> = args
        .into_iter()
        .map(|arg| crate::shell::shell_quote(&mask_url_password(&arg)))
        .collect();
    redact::mask_token_shaped(&redact::mask_token_flags(&quoted.join(" ")))
}

/// `scheme://user:password@host` with the password masked, wherever it is in `arg`.
fn mask_url_password(arg: &str) -> String {
    let mut out = String::with_capacity(arg.len());
    let mut rest = arg;
    while let Some(scheme_end) = rest.find("://") {
        let (head, tail) = rest.split_at(scheme_end + 3);
        out.push_str(head);
        let authority_end = tail.find(['/', '?', '#', ' ']).unwrap_or(tail.len());
        let authority = &tail[..authority_end];
        match authority.rfind('@') {
            Some(at) => {
                let userinfo = &authority[..at];
                match userinfo.find(':') {
                    Some(colon) => {
                        out.push_str(&userinfo[..=colon]);
                        out.push_str(redact::MASK);
                    }
                    None => out.push_str(userinfo),
                }
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        rest = &tail[authority_end..];
    }
    out.push_str(rest);
    out
}

/// Every package the stager holds, in release order.
fn staged_packages(stager: &Stager) -> Vec<StagedPackage> {
    Arch::ALL
        .iter()
        .filter_map(|arch| stager.staged(*arch))
        .map(|b| StagedPackage {
            arch: b.arch,
            version: stager.settings().version.clone(),
            tarball_sha512: b.tarball_sha512.clone(),
            verified: b.verified,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_keeps_no_secret() {
        let token = format!("{}.{}", "a".repeat(64), "eyJh.eyJi.c2ln");
        let line = masked_command_line(
            [
                "keadm-batch",
                "batch",
                "-c",
                "my config.yaml",
                "--token",
                "s3cret",
                &format!("--token={token}"),
                &token,
                "--kubeconfig=https://admin:hunter2@10.0.0.1:6443/x",
            ]
            .map(String::from),
        );
        assert!(!line.contains("s3cret"), "{line}");
        assert!(!line.contains("hunter2"), "{line}");
        assert!(!line.contains(&"a".repeat(64)), "{line}");
        assert!(line.contains("'my config.yaml'"), "{line}");
        assert!(line.contains("https://admin:"), "{line}");
        assert!(line.contains("@10.0.0.1:6443/x"), "{line}");
    }

    /// Security finding 7: summary.json is owner-only.
    #[test]
    fn the_summary_is_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("summary.json");
        let summary: Summary = serde_json::from_str(
            r#"{"version":1,"tool":"t","run_id":"r","config":"c","started_at":0,"finished_at":0,
               "interrupted":false,"totals":{"selected":0,"succeeded":0,"failed":0,
               "timed_out":0,"skipped":0,"interrupted":0},"nodes":[]}"#,
        )
        .unwrap();
        summary.write(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
