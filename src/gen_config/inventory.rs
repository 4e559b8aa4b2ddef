//! An Ansible inventory, whichever dialect wrote it: groups with their variables and
//! children, hosts with theirs, each in the order and at the place the file gave them;
//! then each host's variables resolved as Ansible resolves them (the `all` group's, then
//! each group's by depth and name, a child's over its parent's, then the host's own) into
//! the node values gen-config writes.

use std::collections::{BTreeSet, HashMap};

use super::host::{Field, RawHost, Value};
use crate::config::Diagnostic;
use crate::config::yaml::Pos;
use crate::options::GroupsAs;

/// The most hosts one pattern may expand to: `h[0:9999999]` is a typo, not a fleet.
const MAX_EXPANDED: usize = 100_000;

/// The variables gen-config reads, and what each is for. Ansible's older `ansible_ssh_*`
/// spellings are read as it reads them.
fn field_of(var: &str) -> Option<Field> {
    Some(match var {
        "node_name" => Field::Name,
        "ansible_host" | "ansible_ssh_host" => Field::Address,
        "ansible_port" | "ansible_ssh_port" => Field::Port,
        "ansible_user" | "ansible_ssh_user" => Field::User,
        "ansible_ssh_private_key_file" | "ansible_private_key_file" => Field::KeyFile,
        "ansible_become" => Field::Sudo,
        "arch" => Field::Arch,
        "site" => Field::Site,
        "labels" => Field::Labels,
        _ => return None,
    })
}

#[derive(Debug, Default)]
struct Group {
    name: String,
    vars: Vec<(String, Value, Pos)>,
    children: Vec<(String, Pos)>,
}

#[derive(Debug)]
struct Host {
    name: String,
    /// Where the file first names it.
    pos: Pos,
    /// The groups that list it, in the order they do.
    groups: Vec<usize>,
    vars: Vec<(String, Value, Pos)>,
}

/// An inventory as a parser reads it.
#[derive(Debug, Default)]
pub struct Inventory {
    groups: Vec<Group>,
    group_index: HashMap<String, usize>,
    hosts: Vec<Host>,
    host_index: HashMap<String, usize>,
}

impl Inventory {
    /// The group `name`, made when it is new.
    pub fn group(&mut self, name: &str) -> usize {
        if let Some(&i) = self.group_index.get(name) {
            return i;
        }
        self.groups.push(Group {
            name: name.to_string(),
            ..Group::default()
        });
        self.group_index
            .insert(name.to_string(), self.groups.len() - 1);
        self.groups.len() - 1
    }

    pub fn group_var(&mut self, group: &str, var: &str, value: Value, pos: Pos) {
        let g = self.group(group);
        self.groups[g].vars.push((var.to_string(), value, pos));
    }

    pub fn child(&mut self, parent: &str, child: &str, pos: Pos) {
        self.group(child);
        let p = self.group(parent);
        self.groups[p].children.push((child.to_string(), pos));
    }

    /// Adds the hosts `pattern` names (`web[01:50].example.com`, `db:2222`) to `group`,
    /// and returns them, for their variables.
    pub fn hosts_of_pattern(
        &mut self,
        group: &str,
        pattern: &str,
        pos: Pos,
    ) -> Result<Vec<usize>, Diagnostic> {
        let (names, port) = host_pattern(pattern).map_err(|(message, fix)| {
            Diagnostic::error(
                Some(pos),
                Some(format!("host pattern `{pattern}`")),
                message,
                Some(fix),
            )
        })?;
        let g = self.group(group);
        let mut hosts = Vec::with_capacity(names.len());
        for name in names {
            let h = match self.host_index.get(&name) {
                Some(&h) => h,
                None => {
                    self.hosts.push(Host {
                        name: name.clone(),
                        pos,
                        groups: Vec::new(),
                        vars: Vec::new(),
                    });
                    self.host_index.insert(name, self.hosts.len() - 1);
                    self.hosts.len() - 1
                }
            };
            if !self.hosts[h].groups.contains(&g) {
                self.hosts[h].groups.push(g);
            }
            if let Some(port) = &port {
                self.hosts[h]
                    .vars
                    .push(("ansible_port".into(), Value::Text(port.clone()), pos));
            }
            hosts.push(h);
        }
        Ok(hosts)
    }

    pub fn host_var(&mut self, host: usize, var: &str, value: Value, pos: Pos) {
        self.hosts[host].vars.push((var.to_string(), value, pos));
    }

    /// Every host, in the order the file first names them, with its values resolved;
    /// a cycle of children is an error at the line that closes it.
    pub fn resolve(self, groups_as: GroupsAs) -> Result<Vec<RawHost>, Vec<Diagnostic>> {
        let depth = self.depths()?;
        // Each group's parents, to walk up from the groups that list a host.
        let mut parents: Vec<Vec<usize>> = vec![Vec::new(); self.groups.len()];
        for (p, group) in self.groups.iter().enumerate() {
            for (child, _) in &group.children {
                parents[self.group_index[child]].push(p);
            }
        }
        let special = |name: &str| matches!(name, "all" | "ungrouped");
        let mut raw = Vec::with_capacity(self.hosts.len());
        for host in &self.hosts {
            let mut member: BTreeSet<usize> = BTreeSet::new();
            let mut todo = host.groups.clone();
            while let Some(g) = todo.pop() {
                if member.insert(g) {
                    todo.extend(&parents[g]);
                }
            }
            let mut ordered: Vec<usize> = member.iter().copied().collect();
            ordered.sort_by(|a, b| {
                (depth[*a], &self.groups[*a].name).cmp(&(depth[*b], &self.groups[*b].name))
            });
            let mut out = RawHost::new(host.pos, &host.name);
            out.set(Field::Name, Value::Text(host.name.clone()), host.pos);
            match groups_as {
                GroupsAs::Site => {
                    if let Some(&g) = host
                        .groups
                        .iter()
                        .find(|&&g| !special(&self.groups[g].name))
                    {
                        out.set(
                            Field::Site,
                            Value::Text(self.groups[g].name.clone()),
                            host.pos,
                        );
                    }
                }
                GroupsAs::Labels => {
                    for &g in &ordered {
                        let name = &self.groups[g].name;
                        if !special(name) {
                            out.set(
                                Field::Label(name.clone()),
                                Value::Text("true".into()),
                                host.pos,
                            );
                        }
                    }
                }
            }
            // `all`'s variables first (depth 0), the host's own last.
            let all = self.group_index.get("all").copied();
            let group_vars = all
                .filter(|g| !member.contains(g))
                .into_iter()
                .chain(ordered.iter().copied())
                .flat_map(|g| self.groups[g].vars.iter());
            for (var, value, pos) in group_vars.chain(host.vars.iter()) {
                if let Some(field) = field_of(var) {
                    out.set(field, value.clone(), *pos);
                }
            }
            raw.push(out);
        }
        Ok(raw)
    }

    /// Each group's depth as Ansible counts it (`all` 0, a group under it 1, a child one
    /// more than its deepest parent); a cycle is an error.
    fn depths(&self) -> Result<Vec<usize>, Vec<Diagnostic>> {
        let n = self.groups.len();
        let mut depth = vec![usize::MAX; n];
        let mut has_parent = vec![false; n];
        for group in &self.groups {
            for (child, _) in &group.children {
                has_parent[self.group_index[child]] = true;
            }
        }
        // A walk down from every top group; a group met again on its own path is a cycle.
        let mut on_path = vec![false; n];
        fn visit(
            inv: &Inventory,
            g: usize,
            d: usize,
            depth: &mut [usize],
            on_path: &mut [bool],
        ) -> Result<(), Diagnostic> {
            on_path[g] = true;
            if depth[g] == usize::MAX || depth[g] < d {
                depth[g] = d;
            }
            for (child, pos) in &inv.groups[g].children {
                let c = inv.group_index[child];
                if on_path[c] {
                    return Err(Diagnostic::error(
                        Some(*pos),
                        Some(format!("group `{}`", inv.groups[g].name)),
                        format!("its child `{child}` is also its parent, a cycle"),
                        Some("remove one of the two :children entries".into()),
                    ));
                }
                if depth[c] == usize::MAX || depth[c] < d + 1 {
                    visit(inv, c, d + 1, depth, on_path)?;
                }
            }
            on_path[g] = false;
            Ok(())
        }
        for (g, group) in self.groups.iter().enumerate() {
            if !has_parent[g] {
                let d = usize::from(group.name != "all");
                visit(self, g, d, &mut depth, &mut on_path).map_err(|e| vec![e])?;
            }
        }
        if let Some(g) = depth.iter().position(|&d| d == usize::MAX) {
            // Only groups in a cycle are never reached from a top group.
            let (child, pos) = self.groups[g].children.first().cloned().unwrap_or_default();
            return Err(vec![Diagnostic::error(
                Some(pos),
                Some(format!("group `{}`", self.groups[g].name)),
                format!("its children lead back to it (through `{child}`), a cycle"),
                Some("remove one of the :children entries that close the cycle".into()),
            )]);
        }
        Ok(depth)
    }
}

/// Every host of `inventory` checked into a node, for the readers' tests.
#[cfg(test)]
pub fn test_nodes(inventory: Inventory, groups_as: GroupsAs) -> Vec<super::host::SourceNode> {
    let hosts = inventory.resolve(groups_as).unwrap();
    hosts
        .iter()
        .map(|h| super::host::check(h, "host").unwrap())
        .collect()
}

/// The host names `pattern` stands for, and the port it gives (`db:2222`): Ansible's
/// ranges `[01:50]` (zero-padded when the start is), `[a:f]` and `[0:100:10]`, any
/// number of them. The error is a message and its fix.
fn host_pattern(pattern: &str) -> Result<(Vec<String>, Option<String>), (String, String)> {
    let (pattern, port) = match pattern.rsplit_once(':') {
        // `host:22`, but not an IPv6 address or a range's colon.
        Some((host, port))
            if !host.contains(':')
                && !port.contains(']')
                && !port.is_empty()
                && port.chars().all(|c| c.is_ascii_digit()) =>
        {
            (host, Some(port.to_string()))
        }
        _ => (pattern, None),
    };
    let mut names = Vec::new();
    expand(pattern, &mut names)?;
    Ok((names, port))
}

fn expand(pattern: &str, out: &mut Vec<String>) -> Result<(), (String, String)> {
    let Some(open) = pattern.find('[') else {
        out.push(pattern.to_string());
        return Ok(());
    };
    let Some(close) = pattern[open..].find(']').map(|i| open + i) else {
        return Err((
            "its `[` is never closed".into(),
            "write a range as [01:50] or [a:f]".into(),
        ));
    };
    let (head, inner, tail) = (
        &pattern[..open],
        &pattern[open + 1..close],
        &pattern[close + 1..],
    );
    let bounds: Vec<&str> = inner.split(':').collect();
    let bad = || {
        (
            format!("`[{inner}]` is not a range"),
            "write a range as [start:end] or [start:end:step], such as [01:50] or [a:f]".into(),
        )
    };
    if bounds.len() < 2 || bounds.len() > 3 || bounds[1].is_empty() {
        return Err(bad());
    }
    let step: usize = match bounds.get(2) {
        Some(step) => step.parse().ok().filter(|&s| s > 0).ok_or_else(bad)?,
        None => 1,
    };
    let (start, end) = (
        if bounds[0].is_empty() { "0" } else { bounds[0] },
        bounds[1],
    );
    let items: Vec<String> = if let (Ok(a), Ok(b)) = (start.parse::<u64>(), end.parse::<u64>()) {
        if a > b {
            return Err((
                format!("the range `[{inner}]` ends before it starts"),
                "write the smaller number first".into(),
            ));
        }
        if (b - a) / step as u64 >= MAX_EXPANDED as u64 {
            return Err(too_many(inner));
        }
        let width = if start.len() > 1 && start.starts_with('0') {
            start.len()
        } else {
            0
        };
        (a..=b)
            .step_by(step)
            .map(|i| format!("{i:0width$}"))
            .collect()
    } else {
        let letter = |s: &str| {
            let mut chars = s.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) if c.is_ascii_alphabetic() => Some(c),
                _ => None,
            }
        };
        let (Some(a), Some(b)) = (letter(start), letter(end)) else {
            return Err(bad());
        };
        if a > b {
            return Err((
                format!("the range `[{inner}]` ends before it starts"),
                "write the earlier letter first".into(),
            ));
        }
        (a..=b).step_by(step).map(String::from).collect()
    };
    for item in items {
        expand(&format!("{head}{item}{tail}"), out)?;
        if out.len() > MAX_EXPANDED {
            return Err(too_many(inner));
        }
    }
    Ok(())
}

fn too_many(inner: &str) -> (String, String) {
    (
        format!("the range `[{inner}]` stands for more than {MAX_EXPANDED} hosts"),
        "check the range's bounds".into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(pattern: &str) -> Vec<String> {
        host_pattern(pattern).unwrap().0
    }

    #[test]
    fn ranges_expand_as_ansible_expands_them() {
        assert_eq!(
            names("web[01:03].example.com"),
            [
                "web01.example.com",
                "web02.example.com",
                "web03.example.com"
            ]
        );
        assert_eq!(names("db-[a:c]"), ["db-a", "db-b", "db-c"]);
        assert_eq!(names("n[0:10:5]"), ["n0", "n5", "n10"]);
        assert_eq!(names("r[1:2]-[a:b]"), ["r1-a", "r1-b", "r2-a", "r2-b"]);
        assert_eq!(names("web[1:1000]").len(), 1000);
        assert_eq!(
            host_pattern("db01:2222").unwrap(),
            (vec!["db01".to_string()], Some("2222".to_string()))
        );
        assert_eq!(host_pattern("2001:db8::1").unwrap().1, None);
        assert!(
            host_pattern("web[05:01]")
                .unwrap_err()
                .0
                .contains("ends before it starts")
        );
        assert!(host_pattern("web[01").is_err());
        assert!(
            host_pattern("web[0:9999999]")
                .unwrap_err()
                .0
                .contains("more than")
        );
    }

    #[test]
    fn children_inherit_and_override_in_ansibles_order() {
        let at = |line| Pos { line, col: 1 };
        let text = |s: &str| Value::Text(s.into());
        let mut inv = Inventory::default();
        inv.group_var("all", "ansible_user", text("admin"), at(1));
        inv.group_var("europe", "ansible_port", text("2200"), at(2));
        inv.group_var("berlin", "ansible_port", text("2201"), at(3));
        inv.child("europe", "berlin", at(4));
        let h = inv.hosts_of_pattern("berlin", "b1", at(5)).unwrap()[0];
        inv.hosts_of_pattern("cameras", "b1", at(6)).unwrap();
        inv.host_var(h, "ansible_host", text("10.0.0.1"), at(5));
        let node = test_nodes(inv, GroupsAs::Labels).remove(0);
        assert_eq!(node.user, "admin");
        assert_eq!(node.port, 2201, "the child's variable wins");
        assert_eq!(node.address, "10.0.0.1");
        assert_eq!(node.line, 5);
        assert_eq!(
            node.labels.keys().collect::<Vec<_>>(),
            ["berlin", "cameras", "europe"]
        );
    }

    #[test]
    fn a_cycle_of_children_is_an_error() {
        let at = |line| Pos { line, col: 1 };
        let mut inv = Inventory::default();
        inv.child("a", "b", at(1));
        inv.child("b", "a", at(2));
        inv.hosts_of_pattern("a", "h", at(3)).unwrap();
        let problems = inv.resolve(GroupsAs::Site).unwrap_err();
        assert!(problems[0].message.contains("cycle"), "{problems:?}");
    }
}
