//! keadm's command line, read the way keadm reads it: the one place that knows which
//! subcommand a rendered `keadmCmd` runs and what the flags keadm-batch checks hold (the
//! join token, the node name, cloudcore's address and cert port, the runtime endpoint, the
//! cgroup driver).
//!
//! keadm parses its flags with spf13/pflag, which accepts, for a flag that takes a value,
//! `--token=V`, `--token V`, `-t V`, `-t=V` and `-tV`; the last one given wins. The
//! command also passes through `sh` on the node, so words are split and unquoted as a
//! shell would (`'...'`, `"..."`, backslashes), and `&&`, `||`, `;`, `|` and `&` end the
//! keadm part. Masking, the token checks, the node-name checks and pre-flight all read
//! the command through this module, so no spelling slips past one of them.
//!
//! A leaf: it depends on nothing else in the crate.

/// The flags of `keadm join` that keadm-batch reads, with their short forms
/// (keadm's `join` command, `keadm/cmd/keadm/app/cmd/edge/join_others.go`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinFlag {
    Token,
    EdgeNodeName,
    CloudCoreIpPort,
    CertPort,
    RemoteRuntimeEndpoint,
    /// The cgroup driver keadm writes into edgecore's config (default `cgroupfs`).
    CgroupDriver,
}

impl JoinFlag {
    pub const ALL: [JoinFlag; 6] = [
        JoinFlag::Token,
        JoinFlag::EdgeNodeName,
        JoinFlag::CloudCoreIpPort,
        JoinFlag::CertPort,
        JoinFlag::RemoteRuntimeEndpoint,
        JoinFlag::CgroupDriver,
    ];

    /// The long name, without dashes.
    pub fn long(self) -> &'static str {
        match self {
            JoinFlag::Token => "token",
            JoinFlag::EdgeNodeName => "edgenode-name",
            JoinFlag::CloudCoreIpPort => "cloudcore-ipport",
            JoinFlag::CertPort => "certport",
            JoinFlag::RemoteRuntimeEndpoint => "remote-runtime-endpoint",
            JoinFlag::CgroupDriver => "cgroupdriver",
        }
    }
}

/// `keadm join`'s flags that take a value, long name and shorthand. Every one of them
/// takes a value, so `--name V` always consumes `V`.
const JOIN_VALUE_FLAGS: &[(&str, Option<char>)] = &[
    ("cloudcore-ipport", Some('e')),
    ("edgenode-name", Some('i')),
    ("remote-runtime-endpoint", Some('p')),
    ("token", Some('t')),
    ("certport", Some('s')),
    ("labels", Some('l')),
    ("kubeedge-version", None),
    ("cgroupdriver", None),
    ("certpath", None),
    ("tarballpath", None),
    ("image-repository", None),
    ("hub-protocol", None),
    ("set", None),
    ("pre-run", None),
    ("post-run", None),
    ("runtimetype", None),
];

/// The flags that take a value of the edge's upgrade family (`upgrade edge`, `backup
/// edge`, `rollback edge`, `config-update`; keadm's `AddBaseFlags`, `AddUpgradeFlags`,
/// `AddRollbackFlags`, `AddConfigUpdateFlags`). None has a shorthand.
const EDGE_TASK_VALUE_FLAGS: &[(&str, Option<char>)] = &[
    ("config", None),
    ("pre-run", None),
    ("post-run", None),
    ("toVersion", None),
    ("image", None),
    ("image-digest", None),
    ("upgradeID", None),
    ("historyID", None),
    ("fromVersion", None),
    ("type", None),
    ("historical-version", None),
    ("set", None),
];

/// One of the edge's upgrade family of commands, each of which writes its result to
/// `/etc/kubeedge/upgrade_report.json` (keadm's `JSONFileReporter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EdgeTask {
    /// `keadm upgrade edge`: asks `[y/N]` unless `--force`.
    Upgrade,
    /// `keadm backup edge`: copies edgecore, its config and its database under
    /// `/etc/kubeedge/backup/<version>/`.
    Backup,
    /// `keadm rollback edge`: puts a backup back and starts edgecore.
    Rollback,
    /// `keadm config-update --set k=v`: rewrites edgecore.yaml and restarts edgecore.
    ConfigUpdate,
}

impl EdgeTask {
    /// The `event` keadm writes into upgrade_report.json for this command.
    pub fn report_event(self) -> &'static str {
        match self {
            EdgeTask::Upgrade => "Upgrade",
            EdgeTask::Backup => "Backup",
            EdgeTask::Rollback => "Rollback",
            EdgeTask::ConfigUpdate => "ConfigUpdate",
        }
    }

    /// The command as the operator would type it.
    pub fn command(self) -> &'static str {
        match self {
            EdgeTask::Upgrade => "keadm upgrade edge",
            EdgeTask::Backup => "keadm backup edge",
            EdgeTask::Rollback => "keadm rollback edge",
            EdgeTask::ConfigUpdate => "keadm config-update",
        }
    }
}

/// What a node's keadmCmd does, as far as what to do about its failure depends on it:
/// a failed join is retried after a reset, an upgrade can be rolled back, and so on. The
/// snake_case ids are what summary.json's `task` holds.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Task {
    /// `keadm join`.
    Join,
    /// `keadm reset` of an edge node (`reset edge`, or `reset` alone).
    Reset,
    /// `keadm upgrade edge`.
    Upgrade,
    /// `keadm backup edge`.
    Backup,
    /// `keadm rollback edge`.
    Rollback,
    /// `keadm config-update`.
    ConfigUpdate,
    /// Any other keadmCmd (`reset cloud`, `version`...). A task this version does not
    /// know (in a file written by a newer one) reads as this too.
    #[serde(other)]
    Other,
}

impl Task {
    pub const ALL: [Task; 7] = [
        Task::Join,
        Task::Reset,
        Task::Upgrade,
        Task::Backup,
        Task::Rollback,
        Task::ConfigUpdate,
        Task::Other,
    ];

    /// The command as the operator would type it, to label what is said of it.
    pub fn command(self) -> &'static str {
        match self {
            Task::Join => "keadm join",
            Task::Reset => "keadm reset edge",
            Task::Upgrade => EdgeTask::Upgrade.command(),
            Task::Backup => EdgeTask::Backup.command(),
            Task::Rollback => EdgeTask::Rollback.command(),
            Task::ConfigUpdate => EdgeTask::ConfigUpdate.command(),
            Task::Other => "another keadm command",
        }
    }
}

impl From<EdgeTask> for Task {
    fn from(task: EdgeTask) -> Task {
        match task {
            EdgeTask::Upgrade => Task::Upgrade,
            EdgeTask::Backup => Task::Backup,
            EdgeTask::Rollback => Task::Rollback,
            EdgeTask::ConfigUpdate => Task::ConfigUpdate,
        }
    }
}

/// Whether keadm's `subcommand` (`join`, `reset`, `upgrade`, `backup`, `rollback`,
/// `config-update`) has the flag `long`: for the tests that check the keadm commands
/// keadm-batch tells the operator to run.
#[cfg(test)]
pub(crate) fn keadm_has_flag(subcommand: &str, long: &str) -> bool {
    // The boolean flags of those commands the fixes may name; the rest take a value.
    let booleans: &[&str] = match subcommand {
        "reset" | "upgrade" => &["force"],
        _ => &[],
    };
    let values = match subcommand {
        "join" => JOIN_VALUE_FLAGS,
        "upgrade" | "backup" | "rollback" | "config-update" => EDGE_TASK_VALUE_FLAGS,
        _ => &[],
    };
    booleans.contains(&long) || values.iter().any(|(name, _)| *name == long)
}

/// klog's global flags keadm accepts before or after any subcommand, which take a value.
const GLOBAL_VALUE_FLAGS: &[(&str, Option<char>)] = &[
    ("v", Some('v')),
    ("stderrthreshold", None),
    ("vmodule", None),
    ("log-file", None),
    ("log-dir", None),
];

/// One flag as it was given.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FlagUse {
    /// The long name (a shorthand is translated), without dashes.
    name: String,
    value: String,
    /// Given as `--name=` or `-x=` with nothing after the `=`.
    empty_with_equals: bool,
}

/// A keadm command line, parsed once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeadmCommand {
    /// The positional words after `keadm`: `["join"]`, `["reset", "edge"]`.
    positional: Vec<String>,
    flags: Vec<FlagUse>,
}

impl KeadmCommand {
    /// Reads a rendered keadmCmd (`join --token=...`) or a whole remote command
    /// (`cd /dir && ./keadm join ...`, `yes | ./keadm reset`).
    pub fn parse(command: &str) -> KeadmCommand {
        let segments = shell_segments(command);
        // The segment that runs keadm, else the first: keadmCmd itself starts with the
        // subcommand.
        let args: &[String] = segments
            .iter()
            .find_map(|words| {
                let first = words.first()?;
                (first.rsplit('/').next() == Some("keadm")).then(|| &words[1..])
            })
            .or_else(|| segments.first().map(Vec::as_slice))
            .unwrap_or(&[]);
        let mut parsed = KeadmCommand::default();
        parsed.read_flags(args);
        parsed
    }

    fn read_flags(&mut self, args: &[String]) {
        // Join's shorthands apply once `join` is the subcommand; before that only the
        // global ones do (pflag would refuse join's flags there anyway).
        let table = |positional: &[String]| -> Vec<(&'static str, Option<char>)> {
            let mut t = GLOBAL_VALUE_FLAGS.to_vec();
            match positional.first().map(String::as_str) {
                Some("join") => t.extend_from_slice(JOIN_VALUE_FLAGS),
                Some("upgrade" | "backup" | "rollback" | "config-update") => {
                    t.extend_from_slice(EDGE_TASK_VALUE_FLAGS)
                }
                _ => {}
            }
            t
        };
        let mut i = 0;
        while i < args.len() {
            let arg = &args[i];
            i += 1;
            if arg == "--" {
                self.positional.extend(args[i..].iter().cloned());
                break;
            }
            if let Some(long) = arg.strip_prefix("--").filter(|l| !l.is_empty()) {
                match long.split_once('=') {
                    Some((name, value)) => self.push(name, value, true),
                    None => {
                        let takes_value = table(&self.positional).iter().any(|(n, _)| *n == long);
                        if takes_value {
                            // pflag takes the next word whatever it looks like.
                            let value = args.get(i).map_or("", String::as_str);
                            i += 1;
                            self.push(long, value, false);
                        } else {
                            self.push(long, "", false);
                        }
                    }
                }
                continue;
            }
            if let Some(shorts) = arg.strip_prefix('-').filter(|s| !s.is_empty()) {
                let table = table(&self.positional);
                for (at, c) in shorts.char_indices() {
                    let Some((name, _)) = table.iter().find(|(_, s)| *s == Some(c)) else {
                        // A boolean shorthand (or one we do not know): the next character
                        // is another shorthand, as pflag reads `-abc`.
                        continue;
                    };
                    let rest = &shorts[at + c.len_utf8()..];
                    if let Some(value) = rest.strip_prefix('=') {
                        self.push(name, value, true);
                    } else if !rest.is_empty() {
                        self.push(name, rest, false);
                    } else {
                        let value = args.get(i).map_or("", String::as_str);
                        i += 1;
                        self.push(name, value, false);
                    }
                    break;
                }
                continue;
            }
            self.positional.push(arg.clone());
        }
    }

    fn push(&mut self, name: &str, value: &str, equals: bool) {
        self.flags.push(FlagUse {
            name: name.to_string(),
            value: value.to_string(),
            empty_with_equals: equals && value.is_empty(),
        });
    }

    /// The subcommand: the first positional word (`join`, `reset`, `upgrade`...).
    pub fn subcommand(&self) -> Option<&str> {
        self.positional.first().map(String::as_str)
    }

    /// Whether this is `keadm join`, the only command pre-flight and the token checks
    /// are for.
    pub fn is_join(&self) -> bool {
        self.subcommand() == Some("join")
    }

    /// Whether this is `keadm reset` of an edge node (`reset edge`, or `reset` alone,
    /// which resets whatever the node runs): the reset whose result is checked on the
    /// node. `reset cloud` is not an edge's.
    pub fn is_edge_reset(&self) -> bool {
        self.subcommand() == Some("reset")
            && self.positional.get(1).is_none_or(|second| second == "edge")
    }

    /// Whether this is `keadm reset` with no second word: keadm v1.22 and later print
    /// that it is "no longer supported after version v1.22" and act only where they find
    /// edgecore or cloudcore running (they exit 0 on a node where edgecore is stopped,
    /// leaving /etc/kubeedge); `reset edge` is the command for an edge node.
    pub fn is_bare_reset(&self) -> bool {
        self.subcommand() == Some("reset") && self.positional.len() == 1
    }

    /// Which of the edge's upgrade family this command is: `upgrade edge`, `backup
    /// edge`, `rollback edge` (the second word must be `edge`: `upgrade cloud` is not an
    /// edge's) or `config-update`.
    pub fn edge_task(&self) -> Option<EdgeTask> {
        let second = self.positional.get(1).map(String::as_str);
        match (self.subcommand()?, second) {
            ("upgrade", Some("edge")) => Some(EdgeTask::Upgrade),
            ("backup", Some("edge")) => Some(EdgeTask::Backup),
            ("rollback", Some("edge")) => Some(EdgeTask::Rollback),
            ("config-update", _) => Some(EdgeTask::ConfigUpdate),
            _ => None,
        }
    }

    /// What the command does, for the fixes of its failures.
    pub fn task(&self) -> Task {
        if self.is_join() {
            Task::Join
        } else if self.is_edge_reset() {
            Task::Reset
        } else {
            self.edge_task().map_or(Task::Other, Task::from)
        }
    }

    /// Whether this is `keadm upgrade edge`.
    pub fn is_edge_upgrade(&self) -> bool {
        self.edge_task() == Some(EdgeTask::Upgrade)
    }

    /// The value keadm will use for a join flag: the last one given, `None` when the
    /// flag is absent or that value is empty.
    pub fn join_flag(&self, flag: JoinFlag) -> Option<&str> {
        if !self.is_join() {
            return None;
        }
        self.value(flag.long())
    }

    /// The last value of a long flag, whatever the subcommand; `None` when absent or
    /// empty.
    pub fn value(&self, long: &str) -> Option<&str> {
        self.flags
            .iter()
            .rev()
            .find(|f| f.name == long)
            .map(|f| f.value.as_str())
            .filter(|v| !v.is_empty())
    }

    /// A boolean flag as keadm's flag parser reads it: `Some(true)` for `--name` alone or
    /// `--name=true` (any spelling Go's `strconv.ParseBool` takes), `Some(false)` for
    /// `--name=false`, the last use winning; `None` when the flag is absent or its value
    /// is none of these (keadm would refuse the command).
    pub fn bool_flag(&self, long: &str) -> Option<bool> {
        let last = self.flags.iter().rev().find(|f| f.name == long)?;
        match last.value.as_str() {
            "" if !last.empty_with_equals => Some(true),
            "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
            "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
            _ => None,
        }
    }

    /// The join token, in any spelling.
    pub fn token(&self) -> Option<&str> {
        // `--token` is a secret whatever the subcommand; `-t` only for join, where it is
        // the token's shorthand.
        self.join_flag(JoinFlag::Token)
            .or_else(|| self.value(JoinFlag::Token.long()))
    }

    /// `--edgenode-name`, in any spelling.
    pub fn edgenode_name(&self) -> Option<&str> {
        self.join_flag(JoinFlag::EdgeNodeName)
    }

    /// Flags written with `=` and nothing after it (`--token=`), usually an empty
    /// template value, as `--<long name>`.
    pub fn empty_flags(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for flag in self.flags.iter().filter(|f| f.empty_with_equals) {
            let name = format!("--{}", flag.name);
            if !out.contains(&name) {
                out.push(name);
            }
        }
        out
    }
}

/// Splits shell text into simple commands (lists of unquoted words), at `&&`, `||`, `;`,
/// `|`, `&` and newlines; redirections and their targets are dropped.
fn shell_segments(text: &str) -> Vec<Vec<String>> {
    let mut segments: Vec<Vec<String>> = vec![Vec::new()];
    let mut word = String::new();
    let mut in_word = false;
    let mut skip_next_word = false;
    let mut chars = text.chars().peekable();
    let end_word = |word: &mut String,
                    in_word: &mut bool,
                    skip: &mut bool,
                    segments: &mut Vec<Vec<String>>| {
        if *in_word {
            if *skip {
                *skip = false;
            } else if let Some(last) = segments.last_mut() {
                last.push(std::mem::take(word));
            }
        }
        word.clear();
        *in_word = false;
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    word.push(q);
                }
            }
            '"' => {
                in_word = true;
                while let Some(q) = chars.next() {
                    match q {
                        '"' => break,
                        '\\' if matches!(chars.peek(), Some('"' | '\\' | '$' | '`')) => {
                            word.extend(chars.next());
                        }
                        _ => word.push(q),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some('\n') | None => {}
                    Some(next) => word.push(next),
                }
            }
            ';' | '&' | '|' | '\n' => {
                end_word(&mut word, &mut in_word, &mut skip_next_word, &mut segments);
                if c == '&' && word.is_empty() && chars.peek() == Some(&'>') {
                    // `&>file`: a redirection, not a list operator.
                    chars.next();
                    skip_next_word = true;
                    continue;
                }
                if matches!(chars.peek(), Some(&n) if n == c && c != ';' && c != '\n') {
                    chars.next();
                }
                segments.push(Vec::new());
            }
            '<' | '>' => {
                // An fd number glued to the operator (`2>`) is not a word.
                if in_word && word.chars().all(|d| d.is_ascii_digit()) {
                    word.clear();
                    in_word = false;
                }
                end_word(&mut word, &mut in_word, &mut skip_next_word, &mut segments);
                while matches!(chars.peek(), Some('>' | '<' | '&')) {
                    chars.next();
                }
                skip_next_word = true;
            }
            c if c.is_whitespace() => {
                end_word(&mut word, &mut in_word, &mut skip_next_word, &mut segments);
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    end_word(&mut word, &mut in_word, &mut skip_next_word, &mut segments);
    segments.retain(|s| !s.is_empty());
    segments
}

/// keadm's `GetCurrentVersion` for a version it accepts as written: `1.23.1` becomes
/// `v1.23.1`; anything that is not `[v]MAJOR.MINOR.PATCH[suffix]` is `None` (keadm then
/// falls back to its own version).
pub fn release_version(text: &str) -> Option<String> {
    let bare = text.strip_prefix('v').unwrap_or(text);
    let number = |part: &str| {
        !part.is_empty()
            && part.bytes().all(|b| b.is_ascii_digit())
            && (part == "0" || !part.starts_with('0'))
    };
    let mut parts = bare.splitn(3, '.');
    let (major, minor, rest) = (parts.next()?, parts.next()?, parts.next()?);
    let patch_len = rest.bytes().take_while(u8::is_ascii_digit).count();
    let (patch, suffix) = rest.split_at(patch_len);
    let suffix_ok = suffix
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '+'));
    (number(major) && number(minor) && number(patch) && suffix_ok).then(|| format!("v{bare}"))
}

/// `(major, minor)` of a release version (`v1.15.4`, `1.15.4`).
pub fn major_minor(version: &str) -> Option<(u32, u32)> {
    let release = release_version(version)?;
    let mut parts = release[1..].split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(cmd: &str) -> Option<String> {
        KeadmCommand::parse(cmd).token().map(str::to_string)
    }

    #[test]
    fn the_edge_tasks_are_told_apart_and_their_flags_read() {
        let upgrade = KeadmCommand::parse("upgrade edge --toVersion v1.23.1 --force");
        assert_eq!(upgrade.edge_task(), Some(EdgeTask::Upgrade));
        assert_eq!(upgrade.value("toVersion"), Some("v1.23.1"));
        assert_eq!(upgrade.bool_flag("force"), Some(true));
        let upgrade =
            KeadmCommand::parse("cd /x && yes | ./keadm upgrade edge --toVersion=v1.22.1");
        assert!(upgrade.is_edge_upgrade());
        assert_eq!(upgrade.value("toVersion"), Some("v1.22.1"));
        assert_eq!(upgrade.bool_flag("force"), None);
        let rollback = KeadmCommand::parse("rollback edge --historical-version v1.22.0");
        assert_eq!(rollback.edge_task(), Some(EdgeTask::Rollback));
        assert_eq!(rollback.value("historical-version"), Some("v1.22.0"));
        assert_eq!(
            KeadmCommand::parse("backup edge").edge_task(),
            Some(EdgeTask::Backup)
        );
        assert_eq!(
            KeadmCommand::parse("config-update --set a=b").edge_task(),
            Some(EdgeTask::ConfigUpdate)
        );
        for not_edge in [
            "upgrade cloud --advertise-address=x",
            "upgrade",
            "join",
            "reset edge",
        ] {
            assert_eq!(
                KeadmCommand::parse(not_edge).edge_task(),
                None,
                "{not_edge}"
            );
        }
    }

    #[test]
    fn every_spelling_of_the_token_is_read() {
        for cmd in [
            "join --token=abc.def --x=1",
            "join --cloudcore-ipport=h:1 --token abc.def",
            "join -t abc.def",
            "join -t=abc.def",
            "join -tabc.def",
            "join --token='abc.def' --x",
            "join --token \"abc.def\"",
            "join -i n -t 'abc.def'",
            "cd /tmp/kubeedge/keadm && ./keadm join -e h:10000 -tabc.def",
            "join --token=old -t abc.def",
        ] {
            assert_eq!(token(cmd).as_deref(), Some("abc.def"), "{cmd}");
        }
    }

    #[test]
    fn what_is_not_the_token_is_not_read_as_it() {
        assert_eq!(token("join --token-file=/x"), None);
        assert_eq!(
            token("join --token-file=/x --token=t").as_deref(),
            Some("t")
        );
        assert_eq!(token("join x--token=t"), None);
        assert_eq!(token("join --token="), None);
        assert_eq!(token("join --token= --x"), None);
        assert_eq!(token("reset edge --force"), None);
        // `-t` is the token only for join.
        assert_eq!(token("reset -t abc"), None);
        // pflag reads `-token=x` as `-t` with the value `oken=x`.
        assert_eq!(token("join -token=x").as_deref(), Some("oken=x"));
        // After `--`, words are arguments, not flags.
        assert_eq!(token("join -- --token=x"), None);
    }

    #[test]
    fn the_subcommand_is_found_where_keadm_runs() {
        let join = |c: &str| KeadmCommand::parse(c).is_join();
        assert!(join("join --cloudcore-ipport=1.2.3.4:10000 --token=x"));
        assert!(join("cd /tmp/kubeedge/keadm && ./keadm join --x=1"));
        assert!(join("keadm join"));
        assert!(join("/usr/local/bin/keadm join --token=x"));
        assert!(join("cd /x&&./keadm join"));
        assert!(join("join -t x > /tmp/out 2>&1"));
        assert!(!join("cd /opt/keadm && ./keadm reset"));
        assert!(!join("reset edge --force"));
        assert!(!join("cd /x && yes | ./keadm reset edge"));
        assert!(!join("deprecated join"));
        assert!(!join(""));
        assert!(!join("keadm"));
        assert_eq!(
            KeadmCommand::parse("cd /x && yes | ./keadm reset edge").subcommand(),
            Some("reset")
        );
    }

    #[test]
    fn join_flags_in_every_spelling_last_one_wins() {
        let c = KeadmCommand::parse(
            "join -e 10.0.0.1:10000 -s=10003 -iedge-1 --remote-runtime-endpoint unix:///x.sock --edgenode-name=edge-2",
        );
        assert_eq!(
            c.join_flag(JoinFlag::CloudCoreIpPort),
            Some("10.0.0.1:10000")
        );
        assert_eq!(c.join_flag(JoinFlag::CertPort), Some("10003"));
        assert_eq!(c.edgenode_name(), Some("edge-2"));
        assert_eq!(
            c.join_flag(JoinFlag::RemoteRuntimeEndpoint),
            Some("unix:///x.sock")
        );
        // A redirection's target is not the flag's value.
        let c = KeadmCommand::parse("join -i n1 >/tmp/log -t tok");
        assert_eq!(c.edgenode_name(), Some("n1"));
        assert_eq!(c.token(), Some("tok"));
    }

    #[test]
    fn empty_values_written_with_equals_are_listed() {
        assert_eq!(
            KeadmCommand::parse("join --token= --x=1 --y= -i=").empty_flags(),
            vec!["--token", "--y", "--edgenode-name"]
        );
        assert!(
            KeadmCommand::parse("join --token=a")
                .empty_flags()
                .is_empty()
        );
    }
}
