//! `batch gen-config`: writes the commented config template from `templates/`.

use std::io::{self, Write};
use std::path::PathBuf;

use serde::Serialize;
use tinytemplate::TinyTemplate;

use crate::options::GenConfigOptions;

const TEMPLATE: &str = include_str!("../templates/config.yaml");

/// The KubeEdge release the template suggests.
pub const DEFAULT_KEADM_VERSION: &str = "v1.23.1";

#[derive(Serialize)]
struct Context {
    tool_version: &'static str,
    keadm_version: &'static str,
}

/// The template's text.
pub fn render() -> String {
    let mut tt = TinyTemplate::new();
    // The template is YAML, not HTML: nothing may be escaped.
    tt.set_default_formatter(&tinytemplate::format_unescaped);
    tt.add_template("config", TEMPLATE)
        .expect("the built-in template parses");
    tt.render(
        "config",
        &Context {
            tool_version: env!("CARGO_PKG_VERSION"),
            keadm_version: DEFAULT_KEADM_VERSION,
        },
    )
    .expect("the built-in template renders")
}

/// Why gen-config wrote no template.
#[derive(Debug, thiserror::Error)]
pub enum GenConfigError {
    #[error(
        "{} already exists. Pass --force to overwrite it, or -o to write elsewhere.",
        path.display()
    )]
    Exists { path: PathBuf },
    #[error("{} could not be created: {source}. Check that its directory exists and is writable.", path.display())]
    Create {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{} could not be written: {source}. Check the free space and permissions there.", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Writes the template, refusing to overwrite an existing file without `--force`.
pub fn run(options: &GenConfigOptions) -> Result<(), GenConfigError> {
    let path = &options.output;
    let mut open = std::fs::OpenOptions::new();
    open.write(true);
    if options.force {
        open.create(true).truncate(true);
    } else {
        open.create_new(true);
    }
    let mut file = open.open(path).map_err(|source| {
        if source.kind() == io::ErrorKind::AlreadyExists {
            GenConfigError::Exists { path: path.clone() }
        } else {
            GenConfigError::Create {
                path: path.clone(),
                source,
            }
        }
    })?;
    file.write_all(render().as_bytes())
        .and_then(|_| file.sync_all())
        .map_err(|source| GenConfigError::Write {
            path: path.clone(),
            source,
        })?;
    eprintln!(
        "Config template written to {}. Fill in the REQUIRED values, then run `keadm-batch batch -c {} --dry-run`.",
        path.display(),
        path.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn template_renders_with_go_placeholders_intact() {
        let text = super::render();
        assert!(text.contains("--cloudcore-ipport={{.cloudcore}}"), "{text}");
        assert!(text.contains("keadmVersion: v1.23.1"));
        assert!(!text.contains("url: \"\""));
        assert!(!text.contains("copyFrom: \"\""));
    }
}
