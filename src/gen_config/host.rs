//! One node as a source file describes it, whatever the file's kind: the values a CSV
//! row or an inventory host gives, each with its place, checked into a [`SourceNode`] by
//! one set of rules, so a CSV row and an Ansible host are refused for the same reasons
//! with the same words.

use std::collections::BTreeMap;

use crate::arch::Arch;
use crate::config::Diagnostic;
use crate::config::model::{SITE_NAME_FIX, is_site_name};
use crate::config::yaml::Pos;
use crate::kube_name;

/// What a value is for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Field {
    Name,
    Address,
    Port,
    User,
    KeyFile,
    Sudo,
    Arch,
    Site,
    /// `k=v,k=v` (or `;` between pairs), or a mapping.
    Labels,
    /// One label: its key is the column's or the group's name.
    Label(String),
}

/// A value as the file wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Text(String),
    /// A YAML inventory's `labels:` mapping.
    Pairs(Vec<(String, String)>),
}

/// One host or row: where it is, what its source calls it, and its values with their
/// places. A later value of the same field wins (Ansible's precedence is in the order).
#[derive(Debug, Clone, PartialEq)]
pub struct RawHost {
    pub pos: Pos,
    /// The inventory's host name, or the CSV row's name cell (empty when it has none).
    pub source_name: String,
    pub values: Vec<(Field, Value, Pos)>,
}

impl RawHost {
    pub fn new(pos: Pos, source_name: &str) -> RawHost {
        RawHost {
            pos,
            source_name: source_name.to_string(),
            values: Vec::new(),
        }
    }

    pub fn set(&mut self, field: Field, value: Value, pos: Pos) {
        self.values.push((field, value, pos));
    }

    /// The last value given for `field`.
    fn last(&self, field: &Field) -> Option<(&Value, Pos)> {
        self.values
            .iter()
            .rev()
            .find(|(f, _, _)| f == field)
            .map(|(_, v, p)| (v, *p))
    }

    /// The last text given for `field`, when it is not empty.
    fn text(&self, field: &Field) -> Option<(&str, Pos)> {
        match self.last(field)? {
            (Value::Text(text), pos) if !text.trim().is_empty() => Some((text.trim(), pos)),
            _ => None,
        }
    }
}

/// A node ready to be written into the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceNode {
    /// Where the source describes it (the host's first line, the CSV row's line).
    pub line: usize,
    pub name: String,
    pub address: String,
    pub port: u16,
    pub user: String,
    pub key_file: Option<String>,
    pub sudo: Option<bool>,
    pub arch: Option<Arch>,
    pub site: Option<String>,
    pub labels: BTreeMap<String, String>,
}

/// The login user of a node that names none: keadm's configs log in as root.
pub const DEFAULT_USER: &str = "root";

/// `host` checked: the node, or every problem with it (each a full sentence with its
/// place and fix, about `subject`: `row 12` or `host "web01"`).
pub fn check(host: &RawHost, subject: &str) -> Result<SourceNode, Vec<Diagnostic>> {
    let mut problems = Vec::new();
    let mut problem = |pos: Pos, message: String, fix: String| {
        problems.push(Diagnostic::error(
            Some(pos),
            Some(subject.to_string()),
            message,
            Some(fix),
        ));
    };
    let name = match host.text(&Field::Name) {
        Some((name, pos)) => {
            if let Some(why) = kube_name::problem(name) {
                problem(
                    pos,
                    format!("the name `{name}` cannot be a Kubernetes Node name: {why}"),
                    format!(
                        "use a name of {}, such as `{}`",
                        kube_name::RULE,
                        kube_name::suggestion(name)
                    ),
                );
            }
            name.to_string()
        }
        None => {
            problem(
                host.pos,
                "it has no name".into(),
                "give each node a name, the Node name it joins the cluster under".into(),
            );
            String::new()
        }
    };
    let address = match host.text(&Field::Address) {
        Some((address, pos)) => {
            if address.contains(char::is_whitespace) || address.contains(['\'', '"', '\0']) {
                problem(
                    pos,
                    format!("the address `{address}` has spaces or quotes"),
                    "write the node's IP address or host name alone".into(),
                );
            }
            address.to_string()
        }
        // As Ansible does, a host without an address is reached by its name.
        None => name.clone(),
    };
    let port = match host.text(&Field::Port) {
        Some((port, pos)) => match port.parse::<u16>() {
            Ok(port) if port > 0 => port,
            _ => {
                problem(
                    pos,
                    format!("the port `{port}` is not a port"),
                    "write the node's SSH port as a number from 1 to 65535, or leave it out for 22"
                        .into(),
                );
                22
            }
        },
        None => 22,
    };
    let user = host
        .text(&Field::User)
        .map_or(DEFAULT_USER.to_string(), |(u, _)| u.to_string());
    let key_file = host.text(&Field::KeyFile).map(|(k, _)| k.to_string());
    let sudo = host.text(&Field::Sudo).and_then(|(value, pos)| {
        let flag = truth(value);
        if flag.is_none() {
            problem(
                pos,
                format!("`{value}` is not true or false"),
                "write true or false (yes, no, 1 and 0 work too)".into(),
            );
        }
        flag
    });
    let arch = host.text(&Field::Arch).and_then(|(value, pos)| {
        let arch = Arch::from_name(value).or_else(|| Arch::from_uname(value).ok());
        if arch.is_none() {
            problem(
                pos,
                format!("the arch `{value}` is not one keadm publishes"),
                "write amd64, arm64 or arm (x86_64, aarch64 and armv7l work too), or leave it out"
                    .into(),
            );
        }
        arch
    });
    let site = host.text(&Field::Site).and_then(|(site, pos)| {
        if is_site_name(site) {
            Some(site.to_string())
        } else {
            problem(
                pos,
                format!("site `{site}` is not a site name"),
                SITE_NAME_FIX.into(),
            );
            None
        }
    });
    let mut labels = BTreeMap::new();
    for (field, value, pos) in &host.values {
        let pairs = match (field, value) {
            // An empty cell of a `label:KEY` column: no label.
            (Field::Label(key), Value::Text(value)) if !value.trim().is_empty() => {
                vec![(key.clone(), value.trim().to_string())]
            }
            (Field::Labels, Value::Pairs(pairs)) => pairs.clone(),
            (Field::Labels, Value::Text(text)) => match label_pairs(text) {
                Ok(pairs) => pairs,
                Err(part) => {
                    problem(
                        *pos,
                        format!("the label `{part}` is not key=value"),
                        "write labels as key=value pairs separated by commas or semicolons, such as zone=eu,tier=edge".into(),
                    );
                    continue;
                }
            },
            _ => continue,
        };
        for (key, value) in pairs {
            match label_problem(&key, &value) {
                Some(why) => problem(
                    *pos,
                    format!("the label `{key}={value}` cannot be a Kubernetes label: {why}"),
                    "use a key of letters, digits, `-`, `_` and `.` (at most 63, starting and ending with a letter or digit, optionally after a DNS prefix and `/`) and a value of the same characters".into(),
                ),
                None => {
                    labels.insert(key, value);
                }
            }
        }
    }
    if problems.is_empty() {
        Ok(SourceNode {
            line: host.pos.line,
            name,
            address,
            port,
            user,
            key_file,
            sudo,
            arch,
            site,
            labels,
        })
    } else {
        Err(problems)
    }
}

/// `true`/`false` as Ansible and YAML 1.1 write them.
pub fn truth(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "y" | "on" | "1" => Some(true),
        "false" | "no" | "n" | "off" | "0" => Some(false),
        _ => None,
    }
}

/// `zone=eu,tier=edge` (or `;` between pairs) as pairs; the part that is not `k=v` as
/// the error. Empty parts are skipped.
fn label_pairs(text: &str) -> Result<Vec<(String, String)>, String> {
    text.split([',', ';'])
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .map(|part| match part.split_once('=') {
            Some((key, value)) => Ok((key.trim().to_string(), value.trim().to_string())),
            None => Err(part.to_string()),
        })
        .collect()
}

/// Why `key=value` is not a Kubernetes label (the API server's rules, the ones the
/// config's own `labels` are checked by); `None` when it is.
fn label_problem(key: &str, value: &str) -> Option<String> {
    crate::placement::qualified_name_problem(key)
        .map(|why| format!("its key {why}"))
        .or_else(|| {
            crate::placement::label_value_problem(value).map(|why| format!("its value {why}"))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(line: usize) -> Pos {
        Pos { line, col: 1 }
    }

    fn host(values: &[(Field, &str)]) -> RawHost {
        let mut host = RawHost::new(at(3), "web01");
        for (field, value) in values {
            host.set(field.clone(), Value::Text(value.to_string()), at(3));
        }
        host
    }

    #[test]
    fn a_host_becomes_a_node_with_defaults() {
        let node = check(
            &host(&[
                (Field::Name, "web01"),
                (Field::Labels, "zone=eu; tier=edge"),
                (Field::Label("rack".into()), "r1"),
                (Field::Arch, "aarch64"),
                (Field::Sudo, "yes"),
            ]),
            "row 2",
        )
        .unwrap();
        assert_eq!(node.address, "web01");
        assert_eq!(node.port, 22);
        assert_eq!(node.user, "root");
        assert_eq!(node.arch, Some(Arch::Arm64));
        assert_eq!(node.sudo, Some(true));
        assert_eq!(node.line, 3);
        assert_eq!(
            node.labels.into_iter().collect::<Vec<_>>(),
            [
                ("rack".to_string(), "r1".to_string()),
                ("tier".into(), "edge".into()),
                ("zone".into(), "eu".into())
            ]
        );
    }

    #[test]
    fn every_problem_is_a_sentence_with_its_fix() {
        let problems = check(
            &host(&[
                (Field::Name, "Web_01"),
                (Field::Port, "70000"),
                (Field::Arch, "riscv64"),
                (Field::Labels, "zone"),
                (Field::Site, "a b"),
                (Field::Sudo, "maybe"),
            ]),
            "row 2",
        )
        .unwrap_err();
        let text: Vec<String> = problems
            .iter()
            .map(|d| d.render(std::path::Path::new("hosts.csv")))
            .collect();
        assert_eq!(text.len(), 6, "{text:#?}");
        assert_eq!(
            text[0],
            "hosts.csv:3:1: row 2: the name `Web_01` cannot be a Kubernetes Node name: it has uppercase letters; use a name of lowercase letters, digits, '-' and '.', at most 253 characters, in dot-separated parts of at most 63 that start and end with a letter or digit, such as `web-01`."
        );
        assert!(
            text[1].contains("the port `70000` is not a port; write"),
            "{}",
            text[1]
        );
        assert!(text.iter().all(|t| t.ends_with('.')), "{text:#?}");
    }

    #[test]
    fn labels_follow_the_api_servers_rules() {
        assert_eq!(label_problem("zone", "eu"), None);
        assert_eq!(label_problem("example.com/zone", ""), None);
        assert!(label_problem("-zone", "eu").is_some());
        assert!(label_problem("zone", "e u").is_some());
        assert!(label_problem("Bad_Prefix/zone", "eu").is_some());
    }
}
