//! The config loader: read and parse the file (keadm's schema with yaml.v2's leniency),
//! then validate it into a [`Config`] with every value resolved and every problem
//! reported at once, each naming the file, line, node, field and fix.

pub mod copy_from;
pub mod diagnostic;
pub mod environment;
pub mod load;
pub mod model;
pub mod schema;
pub mod template;
pub mod validate;
pub mod yaml;

use std::path::Path;

pub use diagnostic::{ConfigError, Diagnostic, Severity};
pub use environment::{Environment, ProcessEnvironment};
pub use model::{
    AuthSpec, Config, CopyFile, HostKeyPolicy, NodeSpec, PackageMode, PinnedDigest, SshSpec,
};

/// A valid config and the warnings found on the way.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: Config,
    pub warnings: Vec<Diagnostic>,
}

/// Reads, parses and validates the config file at `path`.
pub fn load(path: &Path, env: &dyn Environment) -> Result<Loaded, ConfigError> {
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
