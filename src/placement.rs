//! The labels and taints asked of a node (docs/config.md, "Labels and taints"): the rules
//! Kubernetes holds them to, their merge (all nodes < the site < the node), how they reach
//! `keadm join`, and how a Node is compared with them.
//!
//! keadm join takes labels as `--labels k=v,...` (pflag's string slice: repeated flags
//! add up) and taints only through `--set`, which writes into edgecore.yaml's
//! `modules.edged.tailoredKubeletConfig.registerWithTaints` (keadm's `util.ParseSet`).
//! Two of KubeEdge's CVEs were values concatenated into a keadm shell command, so every
//! value goes into a flag of its own, shell-quoted, and only values that passed the
//! Kubernetes rules get there. `ParseSet` reads a value that parses as a Go int, float or
//! bool as that type (and then refuses it for a string field), so each `--set` value is
//! also double-quoted inside, which `ParseSet` strips.
//!
//! It depends only on the shell quoting it shares with the plan and on `kube_name`'s rule
//! for a DNS subdomain (a label key's prefix).

use std::collections::BTreeMap;
use std::fmt;

use crate::shell::shell_quote;

/// What a taint does to pods that do not tolerate it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl TaintEffect {
    pub const ALL: [TaintEffect; 3] = [
        TaintEffect::NoSchedule,
        TaintEffect::PreferNoSchedule,
        TaintEffect::NoExecute,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }

    /// The effect as the API writes it (case-sensitive, as the API server takes it).
    pub fn parse(text: &str) -> Option<TaintEffect> {
        TaintEffect::ALL.into_iter().find(|e| e.as_str() == text)
    }
}

/// One taint: `key=value:Effect`, as `kubectl taint` writes it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Taint {
    pub key: String,
    /// Empty when the taint has none.
    pub value: String,
    pub effect: TaintEffect,
}

impl fmt::Display for Taint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.value.is_empty() {
            write!(f, "{}:{}", self.key, self.effect.as_str())
        } else {
            write!(f, "{}={}:{}", self.key, self.value, self.effect.as_str())
        }
    }
}

impl Taint {
    /// Reads `key=value:Effect` or `key:Effect`, each part held to Kubernetes' rules; the
    /// error says which part breaks which rule.
    pub fn parse(text: &str) -> Result<Taint, String> {
        let Some((key_value, effect)) = text.rsplit_once(':') else {
            return Err(format!(
                "taint `{text}` has no effect: write it as key=value:Effect or key:Effect"
            ));
        };
        let (key, value) = key_value.split_once('=').unwrap_or((key_value, ""));
        Taint::checked(key, value, effect)
    }

    /// A taint from its parts, each held to Kubernetes' rules.
    pub fn checked(key: &str, value: &str, effect: &str) -> Result<Taint, String> {
        if let Some(why) = qualified_name_problem(key) {
            return Err(format!("taint key `{key}` {why}"));
        }
        if let Some(why) = label_value_problem(value) {
            return Err(format!("taint value `{value}` {why}"));
        }
        let Some(effect) = TaintEffect::parse(effect) else {
            return Err(format!(
                "taint effect `{effect}` is none of NoSchedule, PreferNoSchedule and NoExecute"
            ));
        };
        Ok(Taint {
            key: key.to_string(),
            value: value.to_string(),
            effect,
        })
    }
}

/// The labels and taints a node is to have.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    pub labels: BTreeMap<String, String>,
    /// In the order they were merged; one per key and effect, as the API keeps them.
    pub taints: Vec<Taint>,
}

/// Where edgecore keeps the taints a node registers with, in Go's field names: keadm's
/// `ParseSet` maps json names to fields only for paths without an index, so a path with
/// `[N]` must be written as the Go fields (keadm's own test does so).
const TAINTS_FIELD: &str = "Modules.Edged.TailoredKubeletConfig.RegisterWithTaints";

impl Placement {
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.taints.is_empty()
    }

    /// `self` with `over` laid over it: a label of the same key and a taint of the same
    /// key and effect in `over` win.
    pub fn overlaid(&self, over: &Placement) -> Placement {
        let mut labels = self.labels.clone();
        labels.extend(over.labels.clone());
        let mut taints: Vec<Taint> = self
            .taints
            .iter()
            .filter(|t| {
                !over
                    .taints
                    .iter()
                    .any(|o| o.key == t.key && o.effect == t.effect)
            })
            .cloned()
            .collect();
        taints.extend(over.taints.iter().cloned());
        Placement { labels, taints }
    }

    /// The flags that ask keadm join for these labels and taints, each value a word of
    /// its own, shell-quoted: ` --labels zone=eu --set '...'`, or empty.
    pub fn join_flags(&self) -> String {
        let mut out = String::new();
        for (key, value) in &self.labels {
            out.push_str(" --labels ");
            out.push_str(&shell_quote(&format!("{key}={value}")));
        }
        for (index, taint) in self.taints.iter().enumerate() {
            let field =
                |name: &str, value: &str| format!("{TAINTS_FIELD}[{index}].{name}=\"{value}\"");
            let mut fields = vec![field("Key", &taint.key)];
            if !taint.value.is_empty() {
                fields.push(field("Value", &taint.value));
            }
            fields.push(field("Effect", taint.effect.as_str()));
            out.push_str(" --set ");
            out.push_str(&shell_quote(&fields.join(",")));
        }
        out
    }

    /// A rendered keadmCmd with the flags of [`Placement::join_flags`] put right after
    /// its `join`, so they stay inside keadm's part of the shell text whatever follows
    /// it (`&& echo done`). A command that does not start with `join` is returned as it
    /// is (validation refuses labels and taints on such a command).
    pub fn into_join(&self, command: &str) -> String {
        let flags = self.join_flags();
        let trimmed = command.trim_start();
        match trimmed.strip_prefix("join") {
            Some(rest)
                if !flags.is_empty()
                    && (rest.is_empty() || rest.starts_with(char::is_whitespace)) =>
            {
                format!(
                    "{}join{flags}{rest}",
                    &command[..command.len() - trimmed.len()]
                )
            }
            _ => command.to_string(),
        }
    }

    /// How a Node's labels and taints differ from these, one phrase each (`label zone is
    /// us, not eu`); empty when the Node has every one. Labels and taints the config does
    /// not ask for are the cluster's own business and are not compared.
    pub fn differences(&self, labels: &BTreeMap<String, String>, taints: &[Taint]) -> Vec<String> {
        let mut out = Vec::new();
        for (key, wanted) in &self.labels {
            match labels.get(key) {
                None => out.push(format!("label {key} is missing (asked {key}={wanted})")),
                Some(has) if has != wanted => {
                    out.push(format!("label {key} is `{has}`, not `{wanted}`"))
                }
                Some(_) => {}
            }
        }
        for taint in &self.taints {
            if taints.contains(taint) {
                continue;
            }
            match taints
                .iter()
                .find(|t| t.key == taint.key && t.effect == taint.effect)
            {
                Some(has) => out.push(format!("taint {has} is not {taint}")),
                None => out.push(format!("taint {taint} is missing")),
            }
        }
        out
    }

    /// `zone=eu,tier=edge; taints dedicated=edge:NoSchedule`, for plans and tables.
    pub fn describe(&self) -> String {
        let labels: Vec<String> = self
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let taints: Vec<String> = self.taints.iter().map(Taint::to_string).collect();
        match (labels.is_empty(), taints.is_empty()) {
            (_, true) => format!("labels {}", labels.join(",")),
            (true, false) => format!("taints {}", taints.join(",")),
            (false, false) => format!("labels {}; taints {}", labels.join(","), taints.join(",")),
        }
    }
}

/// What breaks Kubernetes' rule for a label key (and a taint key) in `key`: an optional
/// DNS subdomain prefix and `/`, then a name of at most 63 characters, alphanumerics with
/// `-`, `_` and `.` inside. `None` when it is one.
pub fn qualified_name_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            return Some("has an empty prefix before `/`".into());
        }
        if let Some(why) = crate::kube_name::problem(prefix) {
            return Some(format!(
                "has the prefix `{prefix}`, which is no DNS subdomain: {why}"
            ));
        }
    }
    if name.is_empty() {
        return Some("has no name (the part after any `/` is empty)".into());
    }
    name_part_problem(name).map(|why| format!("is not a label key: its name {why}"))
}

/// What breaks Kubernetes' rule for a label value (and a taint value): empty, or at most
/// 63 characters, alphanumerics with `-`, `_` and `.` inside.
pub fn label_value_problem(value: &str) -> Option<String> {
    if value.is_empty() {
        return None;
    }
    name_part_problem(value).map(|why| format!("is not a label value: it {why}"))
}

fn name_part_problem(text: &str) -> Option<String> {
    if text.len() > 63 {
        return Some("is longer than 63 characters".into());
    }
    if !text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Some("has characters other than letters, digits, `-`, `_` and `.`".into());
    }
    if !text.starts_with(|c: char| c.is_ascii_alphanumeric())
        || !text.ends_with(|c: char| c.is_ascii_alphanumeric())
    {
        return Some("does not start and end with a letter or digit".into());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placement(labels: &[(&str, &str)], taints: &[&str]) -> Placement {
        Placement {
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            taints: taints.iter().map(|t| Taint::parse(t).unwrap()).collect(),
        }
    }

    #[test]
    fn keys_and_values_follow_kubernetes_rules() {
        for good in ["zone", "topology.kubernetes.io/zone", "a_b.c-d", "A1"] {
            assert_eq!(qualified_name_problem(good), None, "{good}");
        }
        for bad in [
            "",
            "/zone",
            "Example.com/zone",
            "zone/",
            "-zone",
            "zo ne",
            "a/b/c",
            &"x".repeat(64),
        ] {
            assert!(qualified_name_problem(bad).is_some(), "{bad}");
        }
        for good in ["", "eu", "1", "true", "a.b_c-d"] {
            assert_eq!(label_value_problem(good), None, "{good}");
        }
        for bad in ["e u", "eu-", "a,b", "a=b", "$(id)", "'", &"x".repeat(64)] {
            assert!(label_value_problem(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn taints_read_as_kubectl_writes_them() {
        let t = Taint::parse("dedicated=edge:NoSchedule").unwrap();
        assert_eq!((t.key.as_str(), t.value.as_str()), ("dedicated", "edge"));
        assert_eq!(t.effect, TaintEffect::NoSchedule);
        assert_eq!(t.to_string(), "dedicated=edge:NoSchedule");
        let t = Taint::parse("example.com/gpu:NoExecute").unwrap();
        assert_eq!(t.to_string(), "example.com/gpu:NoExecute");
        assert_eq!(
            Taint::parse("gpu=yes").unwrap_err(),
            "taint `gpu=yes` has no effect: write it as key=value:Effect or key:Effect"
        );
        assert_eq!(
            Taint::parse("gpu=yes:noschedule").unwrap_err(),
            "taint effect `noschedule` is none of NoSchedule, PreferNoSchedule and NoExecute"
        );
        assert!(
            Taint::parse("gpu=a;b:NoSchedule")
                .unwrap_err()
                .starts_with("taint value `a;b`")
        );
    }

    #[test]
    fn the_node_wins_over_the_site_and_the_site_over_all() {
        let all = placement(
            &[("zone", "eu"), ("tier", "edge")],
            &["a=1:NoSchedule", "b:NoExecute"],
        );
        let site = placement(&[("zone", "berlin")], &["a=2:NoSchedule"]);
        let node = placement(&[("tier", "gpu")], &[]);
        let merged = all.overlaid(&site).overlaid(&node);
        assert_eq!(merged.labels["zone"], "berlin");
        assert_eq!(merged.labels["tier"], "gpu");
        let taints: Vec<String> = merged.taints.iter().map(Taint::to_string).collect();
        assert_eq!(taints, ["b:NoExecute", "a=2:NoSchedule"]);
    }

    #[test]
    fn flags_go_right_after_join_each_value_quoted() {
        let p = placement(
            &[("zone", "eu"), ("num", "123")],
            &["dedicated=true:NoSchedule", "gpu:NoExecute"],
        );
        assert_eq!(
            p.into_join("join --token=x && echo done"),
            "join --labels num=123 --labels zone=eu \
             --set 'Modules.Edged.TailoredKubeletConfig.RegisterWithTaints[0].Key=\"dedicated\",Modules.Edged.TailoredKubeletConfig.RegisterWithTaints[0].Value=\"true\",Modules.Edged.TailoredKubeletConfig.RegisterWithTaints[0].Effect=\"NoSchedule\"' \
             --set 'Modules.Edged.TailoredKubeletConfig.RegisterWithTaints[1].Key=\"gpu\",Modules.Edged.TailoredKubeletConfig.RegisterWithTaints[1].Effect=\"NoExecute\"' \
             --token=x && echo done"
        );
        assert_eq!(p.into_join("reset edge"), "reset edge");
        assert_eq!(p.into_join("joinx"), "joinx");
        assert_eq!(Placement::default().into_join("join -t x"), "join -t x");
    }

    /// What the flags say reaches keadm as the words the shell makes of them: run
    /// through `sh`, each flag's value is one argument, with nothing expanded.
    #[test]
    fn the_shell_hands_keadm_one_word_per_value() {
        let p = placement(&[("zone", "eu")], &["k=v:NoSchedule"]);
        let script = format!("printf '%s\\n'{}", p.join_flags());
        let out = std::process::Command::new("sh")
            .args(["-c", &script])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            "--labels\nzone=eu\n--set\nModules.Edged.TailoredKubeletConfig.RegisterWithTaints[0].Key=\"k\",Modules.Edged.TailoredKubeletConfig.RegisterWithTaints[0].Value=\"v\",Modules.Edged.TailoredKubeletConfig.RegisterWithTaints[0].Effect=\"NoSchedule\"\n"
        );
    }

    /// The command a node runs with them passes `shellcheck -s sh`.
    #[test]
    fn the_join_with_its_flags_is_posix_sh() {
        let p = placement(
            &[("topology.kubernetes.io/zone", "eu"), ("empty", "")],
            &["dedicated=true:NoSchedule", "gpu:NoExecute"],
        );
        let command = crate::plan::keadm_command(
            "/tmp/kubeedge/keadm",
            &p.into_join("join --cloudcore-ipport=10.0.0.1:10000 --token=x"),
        );
        crate::shell::shellcheck::assert_posix_sh(
            "keadm join with labels and taints",
            &command,
            &[],
        );
    }

    #[test]
    fn a_node_is_compared_on_what_is_asked_only() {
        let asked = placement(
            &[("zone", "eu"), ("tier", "edge")],
            &["dedicated=edge:NoSchedule", "gpu:NoExecute"],
        );
        let labels: BTreeMap<String, String> = [("zone", "us"), ("extra", "x")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let taints = vec![
            Taint::parse("dedicated=other:NoSchedule").unwrap(),
            Taint::parse("node.kubernetes.io/unreachable:NoExecute").unwrap(),
        ];
        assert_eq!(
            asked.differences(&labels, &taints),
            [
                "label tier is missing (asked tier=edge)",
                "label zone is `us`, not `eu`",
                "taint dedicated=other:NoSchedule is not dedicated=edge:NoSchedule",
                "taint gpu:NoExecute is missing",
            ]
        );
        let matching = placement(&[("zone", "us")], &["gpu:NoExecute"]);
        assert!(
            matching
                .differences(&labels, &[Taint::parse("gpu:NoExecute").unwrap()])
                .is_empty()
        );
    }
}
