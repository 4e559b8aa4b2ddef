//! `summary.json`: the whole run for scripts, written at the end (atomically, via a
//! temporary file). Its format is documented in docs/summary.md; `version` changes
//! whenever a field changes meaning.

use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::outcome::{NodeOutcome, Phase};

pub const SUMMARY_VERSION: u32 = 1;

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
            match o.phase {
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
    pub arch: String,
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
    pub started_at: f64,
    pub finished_at: f64,
    pub interrupted: bool,
    pub totals: Totals,
    #[serde(default)]
    pub packages: Vec<StagedPackage>,
    pub nodes: Vec<NodeOutcome>,
    /// For a summary made by `batch merge`: the run directories it combines.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub merged_from: Vec<String>,
}

impl Summary {
    pub fn write(&self, path: &Path) -> io::Result<()> {
        let text = serde_json::to_string_pretty(self).map_err(io::Error::other)?;
        let tmp = path.with_extension("json.tmp");
        super::files::write(&tmp, (text + "\n").as_bytes())?;
        std::fs::rename(&tmp, path)
    }

    pub fn read(path: &Path) -> io::Result<Summary> {
        let text = std::fs::read_to_string(path)?;
        serde_json::from_str(&text).map_err(io::Error::other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
