//! What validation says about a config file: one [`Diagnostic`] per problem, each with
//! the position it concerns, and the [`ConfigError`] that carries them all when the file
//! cannot be used. A leaf: every other config module reports through these.

use std::fmt;
use std::path::{Path, PathBuf};

use super::yaml::Pos;

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
            ..Diagnostic::error(pos, subject, message, fix)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn at(line: usize, col: usize) -> Option<Pos> {
        Some(Pos { line, col })
    }

    #[test]
    fn a_diagnostic_renders_as_one_sentence_with_its_place_and_fix() {
        let file = Path::new("c.yaml");
        let full = Diagnostic::error(
            at(14, 9),
            Some("node 2 \"edge-b\"".into()),
            "ssh.ip is empty".into(),
            Some("set ssh.ip to the node's IP address or host name".into()),
        );
        assert_eq!(
            full.render(file),
            "c.yaml:14:9: node 2 \"edge-b\": ssh.ip is empty; set ssh.ip to the node's IP address or host name."
        );
        let question = Diagnostic::warning(
            at(3, 1),
            None,
            "x is not a known field".into(),
            Some("did you mean `y`?".into()),
        );
        assert_eq!(
            question.render(file),
            "c.yaml:3:1: x is not a known field; did you mean `y`?"
        );
        let bare = Diagnostic::error(None, None, "the file is empty".into(), None);
        assert_eq!(bare.render(file), "c.yaml: the file is empty.");
    }

    #[test]
    fn errors_are_listed_in_file_order_and_counted() {
        let error = |pos, message: &str| Diagnostic::error(pos, None, message.into(), None);
        let config_error = ConfigError {
            file: PathBuf::from("c.yaml"),
            diagnostics: vec![
                error(None, "whole file"),
                error(at(9, 3), "second"),
                Diagnostic::warning(at(1, 1), None, "a warning".into(), None),
                error(at(2, 5), "first"),
            ],
        };
        assert_eq!(config_error.warnings().count(), 1);
        assert_eq!(
            config_error.to_string(),
            "c.yaml:2:5: first.\nc.yaml:9:3: second.\nc.yaml: whole file.\n\
             c.yaml has 3 problems; no node was touched."
        );
    }
}
