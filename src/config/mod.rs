//! The config loader: read and parse the file (keadm's schema with yaml.v2's leniency),
//! then validate it into a [`Config`] with every value resolved and every problem
//! reported at once, each naming the file, line, node, field and fix.

pub mod load;
pub mod schema;
pub mod template;
pub mod validate;
pub mod yaml;

use std::fmt;
use std::path::{Path, PathBuf};

pub use validate::{
    AuthSpec, Config, CopyFile, HostKeyPolicy, NodeSpec, PackageMode, PinnedDigest, SshSpec,
};
use yaml::Pos;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Warning,
    Error,
}

/// One problem found in a config file.
#[derive(Debug, Clone, PartialEq)]
pub struct Diagnostic {
    pub severity: Severity,
    pub pos: Option<Pos>,
    /// The node it concerns, as `node 2 "edge-b"`.
    pub subject: Option<String>,
    /// A sentence fragment: what is wrong.
    pub message: String,
    /// What to do about it.
    pub fix: Option<String>,
}

impl Diagnostic {
    pub fn error(
        pos: Option<Pos>,
        subject: Option<String>,
        message: String,
        fix: Option<String>,
    ) -> Diagnostic {
        Diagnostic {
            severity: Severity::Error,
            pos,
            subject,
            message,
            fix,
        }
    }

    pub fn warning(
        pos: Option<Pos>,
        subject: Option<String>,
        message: String,
        fix: Option<String>,
    ) -> Diagnostic {
        Diagnostic {
            severity: Severity::Warning,
            pos,
            subject,
            message,
            fix,
        }
    }

    /// `config.yaml:14:9: node 2 "edge-b": ssh.ip is empty; set it to ...`
    pub fn render(&self, file: &Path) -> String {
        let mut out = file.display().to_string();
        if let Some(pos) = self.pos {
            out.push_str(&format!(":{}:{}", pos.line, pos.col));
        }
        out.push_str(": ");
        if let Some(subject) = &self.subject {
            out.push_str(subject);
            out.push_str(": ");
        }
        out.push_str(&self.message);
        match &self.fix {
            Some(fix) => {
                out.push_str("; ");
                out.push_str(fix);
                if !fix.ends_with('.') && !fix.ends_with('?') {
                    out.push('.');
                }
            }
            None => out.push('.'),
        }
        out
    }
}

/// A config that cannot be used: every error found, and the warnings beside them.
#[derive(Debug, Clone)]
pub struct ConfigError {
    pub file: PathBuf,
    pub diagnostics: Vec<Diagnostic>,
}

impl ConfigError {
    /// The errors, in file order (those about the file as a whole last).
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        let mut errors: Vec<&Diagnostic> = self
            .diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .collect();
        errors.sort_by_key(|d| d.pos.map_or((usize::MAX, 0), |p| (p.line, p.col)));
        errors.into_iter()
    }

    pub fn warnings(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Warning)
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self.errors().count();
        for diag in self.errors() {
            writeln!(f, "{}", diag.render(&self.file))?;
        }
        write!(
            f,
            "{} has {count} problem{}; no node was touched.",
            self.file.display(),
            if count == 1 { "" } else { "s" }
        )
    }
}

impl std::error::Error for ConfigError {}

/// A valid config and the warnings found on the way.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: Config,
    pub warnings: Vec<Diagnostic>,
}

/// Reads, parses and validates the config file at `path`.
pub fn load(path: &Path, env: &dyn validate::Environment) -> Result<Loaded, ConfigError> {
    let fail = |diagnostics| ConfigError {
        file: path.to_path_buf(),
        diagnostics,
    };
    let text = load::read_file(path).map_err(|message| {
        fail(vec![Diagnostic {
            severity: Severity::Error,
            pos: None,
            subject: None,
            message: message.trim_end_matches('.').to_string(),
            fix: None,
        }])
    })?;
    let mut diags = Vec::new();
    let raw = match load::read(&text, &mut diags) {
        Ok(raw) => raw,
        Err(syntax) => {
            diags.push(syntax);
            return Err(fail(diags));
        }
    };
    let config = validate::validate(raw, path, env, &mut diags);
    match config {
        Some(config) if !diags.iter().any(|d| d.severity == Severity::Error) => Ok(Loaded {
            config,
            warnings: diags,
        }),
        _ => Err(fail(diags)),
    }
}
