//! `batch gen-config`: writes the commented config template from `templates/`, or with
//! `--from FILE` the same config with its nodes taken from a CSV file or an Ansible
//! inventory (INI or YAML), each node under a comment naming its line there. Every row is
//! checked first; one that cannot become a node is an error naming its file, line and
//! fix, and then nothing is written. The file is written whole or not at all.

mod ansible_ini;
mod ansible_yaml;
mod csv_rows;
mod host;
mod inventory;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

use crate::arch::Arch;
use crate::config::Diagnostic;
use crate::console::console_line;
use crate::node_text::one_line;
use crate::options::{GenConfigOptions, GroupsAs, SourceFormat};
use crate::report::files;
use host::SourceNode;

/// The template: plain YAML with comments, whose only placeholders are the two markers
/// below. Everything else, keadm's `{{.key}}` placeholders included, is written as is.
const TEMPLATE: &str = include_str!("../templates/config.yaml");

/// Replaced by this tool's version.
const TOOL_VERSION_MARKER: &str = "@TOOL_VERSION@";
/// Replaced by [`DEFAULT_KEADM_VERSION`]. `@` cannot start a YAML value, so a marker
/// left in the output would fail to parse rather than pass for a value.
const KEADM_VERSION_MARKER: &str = "@KEADM_VERSION@";

/// The KubeEdge release the template suggests.
pub const DEFAULT_KEADM_VERSION: &str = "v1.23.1";

/// The template's text.
pub fn render() -> String {
    TEMPLATE
        .replace(TOOL_VERSION_MARKER, env!("CARGO_PKG_VERSION"))
        .replace(KEADM_VERSION_MARKER, DEFAULT_KEADM_VERSION)
}

/// Why gen-config wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum GenConfigError {
    #[error(
        "{} already exists. Pass --force to overwrite it, or -o to write elsewhere.",
        path.display()
    )]
    Exists { path: PathBuf },
    #[error("{} could not be written: {source}. Check that its directory exists and is writable, and the free space there.", path.display())]
    Create {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{} could not be read: {source}. Check the path given to --from and that it is readable.", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Rows or hosts that cannot become nodes, each with its line and fix.
    #[error("{}", render_problems(file, problems))]
    Source {
        file: PathBuf,
        problems: Vec<Diagnostic>,
    },
}

/// Every problem on its own line, in file order, then the count and that nothing was
/// written.
fn render_problems(file: &Path, problems: &[Diagnostic]) -> String {
    let mut sorted: Vec<&Diagnostic> = problems.iter().collect();
    sorted.sort_by_key(|d| d.pos.map_or((usize::MAX, 0), |p| (p.line, p.col)));
    let mut out = String::new();
    for problem in sorted {
        let _ = writeln!(out, "{}", problem.render(file));
    }
    let _ = write!(
        out,
        "{} has {} problem{}; no config was written.",
        file.display(),
        problems.len(),
        if problems.len() == 1 { "" } else { "s" }
    );
    out
}

/// Writes the template, or the config from `--from`'s file, refusing to overwrite an
/// existing file without `--force`.
pub fn run(options: &GenConfigOptions) -> Result<(), GenConfigError> {
    let path = &options.output;
    let (text, nodes) = match &options.from {
        None => (render(), None),
        Some(from) => {
            let (text, count) = from_file(from, options.format, options.groups)?;
            (text, Some(count))
        }
    };
    let written = if options.force {
        files::replace(path, text.as_bytes())
    } else {
        files::create_whole(path, text.as_bytes())
    };
    written.map_err(|source| {
        if source.kind() == io::ErrorKind::AlreadyExists {
            GenConfigError::Exists { path: path.clone() }
        } else {
            GenConfigError::Create {
                path: path.clone(),
                source,
            }
        }
    })?;
    match nodes {
        None => console_line!(
            "Config template written to {}. Fill in the REQUIRED values, then run `keadm-batch batch -c {} --dry-run`.",
            path.display(),
            path.display()
        ),
        Some(count) => console_line!(
            "Config with {count} node{} written to {}. Fill in the REQUIRED values (cloudcore and the token), then run `keadm-batch batch -c {} --dry-run`.",
            if count == 1 { "" } else { "s" },
            path.display(),
            path.display()
        ),
    }
    Ok(())
}

/// The config for the nodes `file` lists, and how many there are.
pub fn from_file(
    file: &Path,
    format: Option<SourceFormat>,
    groups: GroupsAs,
) -> Result<(String, usize), GenConfigError> {
    let read = |source| GenConfigError::Read {
        path: file.to_path_buf(),
        source,
    };
    let bytes = std::fs::read(file).map_err(read)?;
    let text = String::from_utf8(bytes).map_err(|_| GenConfigError::Source {
        file: file.to_path_buf(),
        problems: vec![Diagnostic::error(
            None,
            None,
            "it is not UTF-8 text".into(),
            Some("save the file as UTF-8".into()),
        )],
    })?;
    // Spreadsheets save "CSV UTF-8" with a byte order mark, which would be part of the
    // first column's name.
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let format = format.unwrap_or_else(|| detect(file, text));
    let failed = |problems| GenConfigError::Source {
        file: file.to_path_buf(),
        problems,
    };
    let raw = match format {
        SourceFormat::Csv => csv_rows::hosts(text),
        SourceFormat::AnsibleIni => ansible_ini::read(text).and_then(|inv| inv.resolve(groups)),
        SourceFormat::AnsibleYaml => ansible_yaml::read(text).and_then(|inv| inv.resolve(groups)),
    }
    .map_err(failed)?;
    let nodes = checked(&raw, format).map_err(failed)?;
    Ok((render_nodes(file, format, &nodes), nodes.len()))
}

/// How to read `file`: by its extension, else by its first line that says.
fn detect(file: &Path, text: &str) -> SourceFormat {
    let extension = file
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase());
    match extension.as_deref() {
        Some("csv" | "tsv") => return SourceFormat::Csv,
        Some("ini" | "cfg") => return SourceFormat::AnsibleIni,
        Some("yaml" | "yml") => return SourceFormat::AnsibleYaml,
        _ => {}
    }
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with(';'))
        .unwrap_or("");
    if first.starts_with('[') {
        SourceFormat::AnsibleIni
    } else if first == "---" || (first.ends_with(':') && !first.contains(' ')) {
        SourceFormat::AnsibleYaml
    } else if !first.contains('=') && first.contains([',', ';', '\t']) {
        SourceFormat::Csv
    } else {
        // A bare list of hosts is an INI inventory of ungrouped hosts.
        SourceFormat::AnsibleIni
    }
}

/// Every host checked, and no name twice; or every problem.
fn checked(
    raw: &[host::RawHost],
    format: SourceFormat,
) -> Result<Vec<SourceNode>, Vec<Diagnostic>> {
    let mut problems = Vec::new();
    let mut nodes = Vec::with_capacity(raw.len());
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (i, host) in raw.iter().enumerate() {
        let subject = match format {
            SourceFormat::Csv => format!("row {}", i + 1),
            _ => format!("host `{}`", host.source_name),
        };
        match host::check(host, &subject) {
            Ok(node) => {
                if let Some(line) = seen.insert(node.name.clone(), node.line) {
                    problems.push(Diagnostic::error(
                        Some(host.pos),
                        Some(subject),
                        format!("the name `{}` is already the name of the node on line {line}", node.name),
                        Some("give every node its own name: results and the cluster's Nodes are keyed by it".into()),
                    ));
                }
                nodes.push(node);
            }
            Err(mut found) => problems.append(&mut found),
        }
    }
    if nodes.is_empty() && problems.is_empty() {
        problems.push(Diagnostic::error(
            None,
            None,
            "it lists no host".into(),
            Some(match format {
                SourceFormat::Csv => "add a row for each node below the header".into(),
                _ => "list the nodes under a group, or under all: hosts:".into(),
            }),
        ));
    }
    if problems.is_empty() {
        Ok(nodes)
    } else {
        Err(problems)
    }
}

/// The template's `keadmCmd` for a node named `name`.
fn keadm_cmd(name: &str) -> String {
    let line = TEMPLATE
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("keadmCmd: "))
        .unwrap_or_default();
    line.replace(TEMPLATE_NODE_NAME, name)
}

/// The template's example node's name, in its `keadmCmd`.
const TEMPLATE_NODE_NAME: &str = "edge-node-1";
/// The template's arch list, replaced by the arches the nodes name.
const TEMPLATE_ARCHES: &str = "  archGroup:\n    - amd64\n";
/// Where the template's nodes start: what comes before is kept.
const TEMPLATE_NODES: &str = "\nnodes:\n";

/// The config: the template's keadm section and run-wide settings, with `archGroup` the
/// arches the nodes name (amd64 when none does), then the nodes.
fn render_nodes(file: &Path, format: SourceFormat, nodes: &[SourceNode]) -> String {
    let template = render();
    let top = &template[..template.find(TEMPLATE_NODES).unwrap_or(template.len())];
    let mut arches: Vec<Arch> = Vec::new();
    for arch in nodes.iter().filter_map(|n| n.arch) {
        if !arches.contains(&arch) {
            arches.push(arch);
        }
    }
    if arches.is_empty() {
        arches.push(Arch::Amd64);
    }
    let arch_list: String = arches
        .iter()
        .map(|a| format!("    - {}\n", a.as_str()))
        .collect();
    let mut out = top.replacen(TEMPLATE_ARCHES, &format!("  archGroup:\n{arch_list}"), 1);
    let source = one_line(&file.display().to_string(), 200);
    let kind = match format {
        SourceFormat::Csv => "a CSV file",
        SourceFormat::AnsibleIni => "an Ansible INI inventory",
        SourceFormat::AnsibleYaml => "an Ansible YAML inventory",
    };
    let _ = write!(
        out,
        "\n\n# {} node{} from {source} ({kind}), each under the line it comes from. A node\n\
         # without a key file logs in through ssh-agent (auth type agent, an extension).\n\
         nodes:\n",
        nodes.len(),
        if nodes.len() == 1 { "" } else { "s" },
    );
    for node in nodes {
        let _ = writeln!(out, "  # {source}:{}", node.line);
        let _ = writeln!(out, "  - nodeName: {}", scalar(&node.name));
        let _ = writeln!(out, "    keadmCmd: {}", keadm_cmd(&node.name));
        if let Some(site) = &node.site {
            let _ = writeln!(out, "    site: {}", scalar(site));
        }
        if !node.labels.is_empty() {
            out.push_str("    labels:\n");
            for (key, value) in &node.labels {
                let _ = writeln!(out, "      {}: {}", scalar(key), quoted(value));
            }
        }
        out.push_str("    ssh:\n");
        let _ = writeln!(out, "      ip: {}", scalar(&node.address));
        let _ = writeln!(out, "      port: {}", node.port);
        let _ = writeln!(out, "      username: {}", scalar(&node.user));
        if let Some(sudo) = node.sudo {
            let _ = writeln!(out, "      sudo: {sudo}");
        }
        out.push_str("      auth:\n");
        match &node.key_file {
            Some(key) => {
                let _ = write!(
                    out,
                    "        type: privateKey\n        privateKeyAuth:\n          privateKeyPath: {}\n",
                    scalar(key)
                );
            }
            None => out.push_str("        type: agent\n"),
        }
    }
    out
}

/// `text` as a YAML scalar: plain where YAML 1.1 reads it back as the same string, else
/// double-quoted (a JSON string is a YAML double-quoted scalar).
fn scalar(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '/' | '~' | '@'))
        && (text.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '/' || c == '~')
            || text.starts_with("./")
            || text.starts_with("../"))
        && text != "~"
        // Not a number, a boolean or null as yaml.v2 reads them (10.0.0.1 has three dots).
        && !(text.starts_with(|c: char| c.is_ascii_digit()) && text.matches('.').count() < 2)
        && host::truth(text).is_none()
        && !matches!(text.to_ascii_lowercase().as_str(), "null" | "true" | "false");
    if plain {
        text.to_string()
    } else {
        quoted(text)
    }
}

/// `text` double-quoted.
fn quoted(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| "\"\"".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_renders_with_go_placeholders_intact() {
        let text = super::render();
        assert!(text.contains("--cloudcore-ipport={{.cloudcore}}"), "{text}");
        assert!(text.contains("keadmVersion: v1.23.1"));
        assert!(!text.contains("url: \"\""));
        assert!(!text.contains("copyFrom: \"\""));
    }

    #[test]
    fn every_marker_is_replaced() {
        let text = render();
        assert!(TEMPLATE.contains(TOOL_VERSION_MARKER));
        assert_eq!(TEMPLATE.matches(KEADM_VERSION_MARKER).count(), 3);
        assert!(!text.contains('@'), "{text}");
        assert_eq!(
            text.lines().next(),
            Some(concat!(
                "# keadm-batch configuration, generated by keadm-batch ",
                env!("CARGO_PKG_VERSION"),
                "."
            ))
        );
    }

    #[test]
    fn scalars_are_plain_only_where_yaml_reads_them_back_as_text() {
        for plain in [
            "web01",
            "10.0.0.1",
            "./id_edge",
            "~/.ssh/id",
            "/k",
            "user@x",
        ] {
            assert_eq!(scalar(plain), plain);
        }
        for (text, quoted) in [
            ("yes", "\"yes\""),
            ("1.5", "\"1.5\""),
            ("22", "\"22\""),
            ("~", "\"~\""),
            ("", "\"\""),
            (".5", "\".5\""),
            ("a: b", "\"a: b\""),
            ("it's \"x\"", "\"it's \\\"x\\\"\""),
            ("null", "\"null\""),
        ] {
            assert_eq!(scalar(text), quoted);
        }
    }

    #[test]
    fn a_spreadsheets_byte_order_mark_and_the_format_by_content() {
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("export");
        std::fs::write(&csv, "\u{feff}Name;Address\nedge-1;10.0.0.1\n").unwrap();
        assert_eq!(detect(&csv, "Name;Address\n"), SourceFormat::Csv);
        let (text, count) = from_file(&csv, None, GroupsAs::Site).unwrap();
        assert_eq!(count, 1);
        assert!(text.contains("\n  - nodeName: edge-1\n"), "{text}");
        let p = Path::new("hosts");
        assert_eq!(detect(p, "# fleet\n[web]\nw1\n"), SourceFormat::AnsibleIni);
        assert_eq!(detect(p, "all:\n  hosts:\n"), SourceFormat::AnsibleYaml);
        assert_eq!(
            detect(p, "w1 ansible_host=10.0.0.1\n"),
            SourceFormat::AnsibleIni
        );
        assert_eq!(
            detect(Path::new("x.yml"), "[web]"),
            SourceFormat::AnsibleYaml
        );
    }

    #[test]
    fn output_is_the_committed_snapshot() {
        // The same bytes the CLI test compares, so both change with the version.
        assert_eq!(render(), include_str!("../tests/snapshots/gen-config.yaml"));
    }
}
