//! Ansible's INI inventory dialect, read by hand: it is not INI. A section's lines are
//! hosts followed by `key=value` variables (split as a shell splits words, quotes and all,
//! with `#` starting a comment), `[group:vars]` lines are `key=value` with spaces allowed
//! around `=`, `[group:children]` lines name groups, and a host line may be a pattern
//! (`web[01:50].example.com`) or carry a port (`db:2222`). No INI crate reads that
//! (they want one `key=value` per line and unique keys), and the dialect is small.

use super::host::Value;
use super::inventory::Inventory;
use crate::config::Diagnostic;
use crate::config::yaml::Pos;

enum Section {
    Hosts(String),
    Vars(String),
    Children(String),
}

/// Reads `text` into an inventory, or every line it cannot read.
pub fn read(text: &str) -> Result<Inventory, Vec<Diagnostic>> {
    let mut inventory = Inventory::default();
    let mut problems = Vec::new();
    let mut section = Section::Hosts("ungrouped".into());
    for (index, raw) in text.lines().enumerate() {
        let line = raw.trim();
        let indent = raw.len() - raw.trim_start().len();
        let pos = Pos {
            line: index + 1,
            col: indent + 1,
        };
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(inner) = line.strip_prefix('[').and_then(|l| l.split_once(']')) {
            let (name, rest) = inner;
            if !rest.trim().is_empty() && !rest.trim_start().starts_with(['#', ';']) {
                problems.push(problem(
                    pos,
                    format!("`{line}` has text after its `]`"),
                    "write a section header alone on its line, such as [berlin] or [berlin:vars]",
                ));
                continue;
            }
            let name = name.trim();
            section = match name.rsplit_once(':') {
                Some((group, "vars")) => Section::Vars(group.to_string()),
                Some((group, "children")) => Section::Children(group.to_string()),
                Some((_, kind)) => {
                    problems.push(problem(
                        pos,
                        format!("the section `[{name}]` is of the unknown kind `{kind}`"),
                        "write [group], [group:vars] or [group:children]",
                    ));
                    continue;
                }
                None => Section::Hosts(name.to_string()),
            };
            let (Section::Hosts(group) | Section::Vars(group) | Section::Children(group)) =
                &section;
            if group.is_empty() || group.contains(char::is_whitespace) {
                problems.push(problem(
                    pos,
                    format!("`{line}` names no group"),
                    "name the group in the brackets, such as [berlin]",
                ));
                continue;
            }
            inventory.group(group);
            continue;
        }
        match &section {
            Section::Hosts(group) => {
                let words = match words(line) {
                    Ok(words) => words,
                    Err(message) => {
                        problems.push(problem(pos, message, "close every quote on the line"));
                        continue;
                    }
                };
                let Some((pattern, vars)) = words.split_first() else {
                    continue;
                };
                let hosts = match inventory.hosts_of_pattern(group, pattern, pos) {
                    Ok(hosts) => hosts,
                    Err(problem) => {
                        problems.push(problem);
                        continue;
                    }
                };
                for var in vars {
                    let Some((key, value)) = var.split_once('=') else {
                        problems.push(problem(
                            pos,
                            format!("`{var}` after the host is not key=value"),
                            "write each host variable as key=value, such as ansible_host=10.0.0.1, and quote a value with spaces",
                        ));
                        continue;
                    };
                    let col = raw.find(key).map_or(pos.col, |c| c + 1);
                    for &host in &hosts {
                        inventory.host_var(
                            host,
                            key,
                            Value::Text(value.to_string()),
                            Pos {
                                line: pos.line,
                                col,
                            },
                        );
                    }
                }
            }
            Section::Vars(group) => {
                let Some((key, value)) = line.split_once('=') else {
                    problems.push(problem(
                        pos,
                        format!("`{line}` in [{group}:vars] is not key=value"),
                        "write each group variable as key=value, such as ansible_user=admin",
                    ));
                    continue;
                };
                let value = unquote(value.trim());
                inventory.group_var(group, key.trim(), Value::Text(value), pos);
            }
            Section::Children(group) => {
                let child = line.split_whitespace().next().unwrap_or(line);
                inventory.child(group, child, pos);
            }
        }
    }
    if problems.is_empty() {
        Ok(inventory)
    } else {
        Err(problems)
    }
}

fn problem(pos: Pos, message: String, fix: &str) -> Diagnostic {
    Diagnostic::error(Some(pos), None, message, Some(fix.into()))
}

/// A `:vars` value without the one pair of quotes around it.
fn unquote(value: &str) -> String {
    for quote in ['"', '\''] {
        if value.len() >= 2 && value.starts_with(quote) && value.ends_with(quote) {
            return value[1..value.len() - 1].to_string();
        }
    }
    value.to_string()
}

/// A host line split as Ansible splits it (shlex, with comments): words apart at
/// whitespace, quotes kept together and removed, `\` escaping in double quotes and bare
/// words, and a `#` that starts a word starting a comment.
fn words(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '#' if !in_word => break,
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err("a single quote on the line is never closed".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => word.push(c),
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err("a double quote on the line is never closed".into()),
                        },
                        Some(c) => word.push(c),
                        None => return Err("a double quote on the line is never closed".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(c) = chars.next() {
                    word.push(c);
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gen_config::inventory::test_nodes;
    use crate::options::GroupsAs;

    const INVENTORY: &str = "\
mail.example.com ansible_host=192.0.2.5

[berlin]
b[01:03].example.com ansible_user=pi  # three cameras
b10 ansible_host=\"192.0.2.10\" labels='zone=eu,tier=cam' ansible_become=True

[berlin:vars]
ansible_port = 2222
arch=arm64

[europe:children]
berlin

[europe:vars]
ansible_ssh_private_key_file=~/.ssh/europe

[all:vars]
ansible_user=admin
";

    #[test]
    fn an_ini_inventory_resolves_as_ansible_reads_it() {
        let nodes = test_nodes(read(INVENTORY).unwrap(), GroupsAs::Site);
        assert_eq!(nodes.len(), 5);
        assert_eq!(nodes[0].name, "mail.example.com");
        assert_eq!(nodes[0].user, "admin");
        assert_eq!(nodes[0].site, None);
        assert_eq!(nodes[0].port, 22);
        let b02 = &nodes[2];
        assert_eq!(b02.name, "b02.example.com");
        assert_eq!((b02.user.as_str(), b02.port), ("pi", 2222));
        assert_eq!(b02.site.as_deref(), Some("berlin"));
        assert_eq!(b02.key_file.as_deref(), Some("~/.ssh/europe"));
        assert_eq!(b02.line, 4);
        let b10 = &nodes[4];
        assert_eq!(b10.address, "192.0.2.10");
        assert_eq!(b10.sudo, Some(true));
        assert_eq!(b10.labels["tier"], "cam");
        assert_eq!(b10.user, "admin");
    }

    #[test]
    fn lines_it_cannot_read_are_errors_at_their_lines() {
        let problems =
            read("[web]\nw1 ansible_port\n[web:nope]\n[db:vars]\nflag\n[db]\nw2 x='open\n")
                .unwrap_err();
        let lines: Vec<usize> = problems.iter().map(|p| p.pos.unwrap().line).collect();
        assert_eq!(lines, [2, 3, 5, 7], "{problems:#?}");
        assert_eq!(
            problems[0].render(std::path::Path::new("hosts")),
            "hosts:2:1: `ansible_port` after the host is not key=value; write each host variable as key=value, such as ansible_host=10.0.0.1, and quote a value with spaces."
        );
    }

    #[test]
    fn words_split_as_shlex_splits_them() {
        assert_eq!(
            words(r#"h a="x y" b='p q' c=d\ e # note"#).unwrap(),
            ["h", "a=x y", "b=p q", "c=d e"]
        );
    }
}
