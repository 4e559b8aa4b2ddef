//! Ansible's YAML inventory: top-level groups (usually `all`), each a mapping of `hosts`
//! (host name or pattern to its variables), `vars` and `children` (group name to the same
//! shape). Read with the config's own YAML tree, so every host and value keeps its line.

use super::host::Value;
use super::inventory::Inventory;
use crate::config::Diagnostic;
use crate::config::yaml::{self, Node, Pos};

/// Reads `text` into an inventory, or every place it cannot read.
pub fn read(text: &str) -> Result<Inventory, Vec<Diagnostic>> {
    let root = match yaml::parse(text) {
        Ok((Some(root), _)) => root,
        Ok((None, _)) => {
            return Err(vec![Diagnostic::error(
                None,
                None,
                "the inventory is empty".into(),
                Some("list the hosts under all: hosts:".into()),
            )]);
        }
        Err(error) => {
            return Err(vec![Diagnostic::error(
                Some(error.pos),
                None,
                format!("it is not YAML ({})", error.message),
                Some("fix the YAML syntax at that place".into()),
            )]);
        }
    };
    let mut reader = Reader {
        inventory: Inventory::default(),
        problems: Vec::new(),
    };
    match &root {
        Node::Map { entries, .. } => {
            for (key, value) in entries {
                if let Some(name) = reader.key(key) {
                    reader.group(&name, value);
                }
            }
        }
        other => reader.problem(
            other.pos(),
            format!("the inventory is {}, not a mapping of groups", other.kind()),
            "start it with `all:`, then its `hosts:`, `vars:` and `children:`",
        ),
    }
    if reader.problems.is_empty() {
        Ok(reader.inventory)
    } else {
        Err(reader.problems)
    }
}

struct Reader {
    inventory: Inventory,
    problems: Vec<Diagnostic>,
}

impl Reader {
    fn problem(&mut self, pos: Pos, message: String, fix: &str) {
        self.problems.push(Diagnostic::error(
            Some(pos),
            None,
            message,
            Some(fix.into()),
        ));
    }

    fn key(&mut self, key: &Node) -> Option<String> {
        match key.key_text() {
            Some(text) if !text.is_empty() => Some(text.to_string()),
            _ => {
                self.problem(
                    key.pos(),
                    "a key here is not a name".into(),
                    "name groups and hosts with plain text",
                );
                None
            }
        }
    }

    /// The entries of `node` when it is a mapping; nothing (`berlin:`) is an empty one.
    fn entries<'a>(&mut self, node: &'a Node, what: &str) -> Option<&'a [(Node, Node)]> {
        match node {
            Node::Map { entries, .. } => Some(entries),
            node if node.is_null() => Some(&[]),
            node => {
                self.problem(
                    node.pos(),
                    format!("{what} is {}, not a mapping", node.kind()),
                    "write it as a mapping of names to their settings (an empty value is fine)",
                );
                None
            }
        }
    }

    fn group(&mut self, name: &str, node: &Node) {
        self.inventory.group(name);
        let Some(entries) = self.entries(node, &format!("group `{name}`")) else {
            return;
        };
        for (key, value) in entries {
            match key.key_text() {
                Some("hosts") => {
                    let Some(hosts) = self.entries(value, &format!("`{name}`'s hosts")) else {
                        continue;
                    };
                    for (host, vars) in hosts {
                        let Some(pattern) = self.key(host) else {
                            continue;
                        };
                        match self.inventory.hosts_of_pattern(name, &pattern, host.pos()) {
                            Ok(hosts) => self.vars(vars, &format!("host `{pattern}`"), |inv, var, value, pos| {
                                for &h in &hosts {
                                    inv.host_var(h, var, value.clone(), pos);
                                }
                            }),
                            Err(problem) => self.problems.push(problem),
                        }
                    }
                }
                Some("vars") => self.vars(value, &format!("`{name}`'s vars"), |inv, var, value, pos| {
                    inv.group_var(name, var, value, pos)
                }),
                Some("children") => {
                    let Some(children) = self.entries(value, &format!("`{name}`'s children")) else {
                        continue;
                    };
                    for (child, def) in children {
                        if let Some(child_name) = self.key(child) {
                            self.inventory.child(name, &child_name, child.pos());
                            self.group(&child_name, def);
                        }
                    }
                }
                _ => self.problem(
                    key.pos(),
                    format!(
                        "group `{name}` has `{}`, which is not hosts, vars or children",
                        key.key_text().unwrap_or("?")
                    ),
                    "put hosts under `hosts:`, variables under `vars:` and groups under `children:`",
                ),
            }
        }
    }

    /// Each variable of the mapping `node`, as text, or as pairs when it is a mapping of
    /// text (`labels: {zone: eu}`); others are kept as text only when gen-config does not
    /// read them, so an inventory's own structured variables do not stop it.
    fn vars(
        &mut self,
        node: &Node,
        what: &str,
        mut put: impl FnMut(&mut Inventory, &str, Value, Pos),
    ) {
        let Some(entries) = self.entries(node, what) else {
            return;
        };
        for (key, node) in entries {
            let Some(var) = self.key(key) else {
                continue;
            };
            let value = match node {
                Node::Scalar { value, .. } => Value::Text(value.clone()),
                Node::Map { entries, .. }
                    if entries.iter().all(|(k, v)| {
                        matches!((k, v), (Node::Scalar { .. }, Node::Scalar { .. }))
                    }) =>
                {
                    Value::Pairs(
                        entries
                            .iter()
                            .filter_map(|(k, v)| match (k, v) {
                                (Node::Scalar { value: k, .. }, Node::Scalar { value: v, .. }) => {
                                    Some((k.clone(), v.clone()))
                                }
                                _ => None,
                            })
                            .collect(),
                    )
                }
                // A list or nested mapping: only an error for a variable gen-config reads.
                other => {
                    if matches!(
                        var.as_str(),
                        "node_name"
                            | "ansible_host"
                            | "ansible_port"
                            | "ansible_user"
                            | "site"
                            | "labels"
                    ) {
                        self.problem(
                            other.pos(),
                            format!("`{var}` is {}", other.kind()),
                            "write it as one value (labels as a mapping of key to value)",
                        );
                    }
                    continue;
                }
            };
            put(&mut self.inventory, &var, value, node.pos());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gen_config::inventory::test_nodes;
    use crate::options::GroupsAs;

    const INVENTORY: &str = "\
all:
  vars:
    ansible_user: admin
  hosts:
    mail.example.com:
  children:
    berlin:
      hosts:
        b[01:02]:
          ansible_become: yes
        b10:
          ansible_host: 192.0.2.10
          labels:
            zone: eu
      vars:
        ansible_port: 2222
    europe:
      children:
        berlin:
      vars:
        arch: x86_64
";

    #[test]
    fn a_yaml_inventory_resolves_as_ansible_reads_it() {
        let nodes = test_nodes(read(INVENTORY).unwrap(), GroupsAs::Labels);
        assert_eq!(nodes.len(), 4);
        assert_eq!(nodes[0].name, "mail.example.com");
        assert_eq!(nodes[0].line, 5);
        assert!(nodes[0].labels.is_empty());
        let b01 = &nodes[1];
        assert_eq!(
            (b01.user.as_str(), b01.port, b01.sudo),
            ("admin", 2222, Some(true))
        );
        assert_eq!(b01.arch, Some(crate::arch::Arch::Amd64));
        assert_eq!(b01.line, 9);
        assert_eq!(b01.labels.keys().collect::<Vec<_>>(), ["berlin", "europe"]);
        assert_eq!(nodes[3].labels["zone"], "eu");
        assert_eq!(nodes[3].address, "192.0.2.10");
    }

    #[test]
    fn a_wrong_shape_is_an_error_at_its_place() {
        let problems = read("all:\n  hosts:\n    - web01\n").unwrap_err();
        assert_eq!(
            problems[0].render(std::path::Path::new("inv.yaml")),
            "inv.yaml:3:5: `all`'s hosts is a list, not a mapping; write it as a mapping of names to their settings (an empty value is fine)."
        );
    }
}
