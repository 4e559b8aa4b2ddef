//! `labels` and `taints` at the top level, under `sites` and on a node: each held to
//! Kubernetes' rules at its line, then merged for each node, all < site < node
//! (docs/config.md, "Labels and taints").

use std::collections::BTreeMap;

use super::validator::Validator;
use crate::config::schema::{RawConfig, RawPlacement, RawTaint, Spanned};
use crate::placement::{Placement, Taint, label_value_problem, qualified_name_problem};

/// The run-wide and per-site labels and taints, checked.
#[derive(Default)]
pub(super) struct Placements {
    all: Placement,
    sites: BTreeMap<String, Placement>,
}

impl Placements {
    /// The top level's and every site's, each problem reported at its line.
    pub(super) fn read(v: &mut Validator, raw: &RawConfig) -> Placements {
        let all = placement(v, &raw.placement, "", None);
        let mut sites = BTreeMap::new();
        for site in &raw.sites {
            let path = format!("sites.{}.", site.name.value);
            let placement = placement(v, &site.placement, &path, None);
            let Some(name) = v.site(&Some(site.name.clone()), None) else {
                continue;
            };
            let used = raw
                .nodes
                .iter()
                .any(|n| n.site.as_ref().or(raw.site.as_ref()).map(|s| &s.value) == Some(&name));
            if !used {
                v.warn(
                    Some(site.name.pos),
                    None,
                    format!("sites names the site `{name}`, which no node is in, so its labels and taints apply to no node"),
                    Some("check the spelling against the nodes' `site:` values".into()),
                );
            }
            sites.insert(name, placement);
        }
        Placements { all, sites }
    }

    /// A node's labels and taints: the run-wide ones, then its site's, then its own.
    /// `None` when its own have a problem (reported).
    pub(super) fn for_node(
        &self,
        v: &mut Validator,
        own: &RawPlacement,
        site: Option<&str>,
        subject: &str,
    ) -> Option<Placement> {
        let before = v.error_count();
        let own = placement(v, own, "", Some(subject));
        if v.error_count() > before {
            return None;
        }
        let site = site
            .and_then(|s| self.sites.get(s))
            .cloned()
            .unwrap_or_default();
        Some(self.all.overlaid(&site).overlaid(&own))
    }
}

/// One `labels` and `taints` pair; `path` is where it sits (`sites.berlin-1.`), for the
/// messages. Entries with a problem are reported and left out.
fn placement(
    v: &mut Validator,
    raw: &RawPlacement,
    path: &str,
    subject: Option<&str>,
) -> Placement {
    let subj = || subject.map(str::to_string);
    let mut out = Placement::default();
    for (key, value) in &raw.labels {
        if let Some(why) = qualified_name_problem(&key.value) {
            v.error(
                Some(key.pos),
                subj(),
                format!("{path}labels has the key `{}`, which {why}", shown(&key.value)),
                "write the key as Kubernetes takes it: an optional DNS prefix and `/`, then at most 63 letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit, such as topology.kubernetes.io/zone",
            );
            continue;
        }
        if let Some(why) = label_value_problem(&value.value) {
            v.error(
                Some(value.pos),
                subj(),
                format!(
                    "{path}labels.{} is `{}`, which {why}",
                    key.value,
                    shown(&value.value)
                ),
                "write a value of at most 63 letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit (or an empty value), such as eu-west",
            );
            continue;
        }
        out.labels.insert(key.value.clone(), value.value.clone());
    }
    for raw_taint in &raw.taints {
        let (pos, parsed) = match raw_taint {
            RawTaint::Text(written) => (written.pos, Taint::parse(&written.value)),
            RawTaint::Fields {
                pos,
                key,
                value,
                effect,
            } => {
                let parsed = Taint::checked(text(key), text(value), text(effect));
                // The message points at the part that is wrong.
                let at = match &parsed {
                    Err(why) if why.starts_with("taint key") => key.as_ref(),
                    Err(why) if why.starts_with("taint value") => value.as_ref(),
                    Err(_) => effect.as_ref(),
                    Ok(_) => None,
                };
                (at.map_or(*pos, |s| s.pos), parsed)
            }
        };
        match parsed {
            Ok(taint) => {
                if let Some(first) = out
                    .taints
                    .iter()
                    .find(|t| t.key == taint.key && t.effect == taint.effect)
                {
                    v.error(
                        Some(pos),
                        subj(),
                        format!("{path}taints lists {} after {first}: a Node has one taint per key and effect", taint),
                        "keep one of the two",
                    );
                    continue;
                }
                out.taints.push(taint);
            }
            Err(why) => v.error(
                Some(pos),
                subj(),
                format!("{path}taints has an entry whose {}", shown(why.trim_start_matches("taint "))),
                "write the taint as kubectl taint takes it, key=value:Effect or key:Effect, with a key and value as for labels and an effect of NoSchedule, PreferNoSchedule or NoExecute, such as dedicated=edge:NoSchedule",
            ),
        }
    }
    out
}

/// A part of a taint written as a mapping; absent is empty (as the API reads it).
fn text(field: &Option<Spanned<String>>) -> &str {
    field.as_ref().map_or("", |s| s.value.as_str())
}

/// Text from the file as the message shows it: control characters escaped, so a
/// message stays one harmless line.
fn shown(text: &str) -> String {
    crate::node_text::escape_controls(text)
}

#[cfg(test)]
mod tests {
    use crate::config::validate::tests::{GOOD, check, rendered};

    /// GOOD's node `a` in site s1, and a node `b` in no site.
    fn config(top: &str, node_a: &str) -> String {
        let a = GOOD.replace("  ssh:\n", &format!("  site: s1\n{node_a}  ssh:\n"));
        format!(
            "{a}- nodeName: b\n  keadmCmd: 'join --edgenode-name=b'\n  ssh:\n    ip: 10.0.0.2\n    username: root\n    auth:\n      type: agent\n{top}"
        )
    }

    #[test]
    fn labels_and_taints_merge_all_then_site_then_node() {
        let (config, diags) = check(&config(
            "labels: {zone: eu, tier: edge}\ntaints: [dedicated=edge:NoSchedule]\nsites:\n  s1:\n    labels: {zone: berlin}\n    taints:\n      - {key: dedicated, value: site, effect: NoSchedule}\n",
            "  labels: {tier: gpu}\n  taints: ['gpu:NoExecute']\n",
        ));
        assert!(diags.is_empty(), "{}", rendered(&diags));
        let config = config.unwrap();
        let a = &config.nodes[0].placement;
        assert_eq!(
            a.describe(),
            "labels tier=gpu,zone=berlin; taints dedicated=site:NoSchedule,gpu:NoExecute"
        );
        let b = &config.nodes[1].placement;
        assert_eq!(
            b.describe(),
            "labels tier=edge,zone=eu; taints dedicated=edge:NoSchedule"
        );
    }

    #[test]
    fn each_bad_label_or_taint_is_named_at_its_line_with_the_node() {
        let (config, diags) = check(&config(
            "sites:\n  s1:\n    labels: {'bad key': x}\n  unused: {}\n",
            "  labels: {zone: 'a;b'}\n  taints: [gpu=x, {key: gpu, effect: Never}, 'a=1:NoSchedule', 'a=2:NoSchedule']\n",
        ));
        assert!(config.is_none());
        assert_eq!(
            rendered(&diags),
            [
                "c.yaml:28:14: sites.s1.labels has the key `bad key`, which is not a label key: its name has characters other than letters, digits, `-`, `_` and `.`; write the key as Kubernetes takes it: an optional DNS prefix and `/`, then at most 63 letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit, such as topology.kubernetes.io/zone.",
                "c.yaml:29:3: sites names the site `unused`, which no node is in, so its labels and taints apply to no node; check the spelling against the nodes' `site:` values.",
                "c.yaml:10:18: node 1 \"a\": labels.zone is `a;b`, which is not a label value: it has characters other than letters, digits, `-`, `_` and `.`; write a value of at most 63 letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit (or an empty value), such as eu-west.",
                "c.yaml:11:12: node 1 \"a\": taints has an entry whose `gpu=x` has no effect: write it as key=value:Effect or key:Effect; write the taint as kubectl taint takes it, key=value:Effect or key:Effect, with a key and value as for labels and an effect of NoSchedule, PreferNoSchedule or NoExecute, such as dedicated=edge:NoSchedule.",
                "c.yaml:11:38: node 1 \"a\": taints has an entry whose effect `Never` is none of NoSchedule, PreferNoSchedule and NoExecute; write the taint as kubectl taint takes it, key=value:Effect or key:Effect, with a key and value as for labels and an effect of NoSchedule, PreferNoSchedule or NoExecute, such as dedicated=edge:NoSchedule.",
                "c.yaml:11:64: node 1 \"a\": taints lists a=2:NoSchedule after a=1:NoSchedule: a Node has one taint per key and effect; keep one of the two.",
            ]
            .join("\n")
        );
    }

    #[test]
    fn a_join_that_cannot_carry_them_is_refused() {
        // Node b's keadmCmd as `command`, with `top` at the top level: the error said.
        let refused = |top: &str, command: &str, said: &str| {
            let text = config(top, "").replace(
                "keadmCmd: 'join --edgenode-name=b'",
                &format!("keadmCmd: '{command}'"),
            );
            let shown = rendered(&check(&text).1);
            assert!(shown.contains(said), "{shown}");
        };
        refused(
            "labels: {zone: eu}\n",
            "--v 4 join --edgenode-name=b",
            "node 2 \"b\": keadmCmd runs keadm join, but does not start with `join` and a blank, right after which the node's labels and taints go",
        );
        refused(
            "labels: {zone: eu}\n",
            "join;echo",
            "keadmCmd runs keadm join, but does not start with `join` and a blank",
        );
        let text = config("", "").replace(
            "keadmCmd: 'join --edgenode-name=b'\n",
            "keadmCmd: 'reset edge'\n  labels: {zone: eu}\n",
        );
        let (config, diags) = check(&text);
        assert!(config.is_some());
        assert!(
            rendered(&diags).contains("node 2 \"b\": the node has labels or taints of its own, but its keadmCmd is no join"),
            "{}",
            rendered(&diags)
        );
        refused(
            "taints: ['a:NoSchedule']\n",
            "join --edgenode-name=b --set modules.edged.tailoredKubeletConfig.registerWithTaints[0].key=x",
            "keadmCmd sets registerWithTaints through --set",
        );
    }
}
