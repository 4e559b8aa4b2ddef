//! Why a `keadm join` failed, read from its transcript and, after a timeout, the tail of
//! the edgecore log (the fragments and why they mean what they do: docs/kubeedge.md).
//!
//! keadm exits 1 for every failure and tells the cause only in text, so classes are
//! recognised by the message fragments keadm, containerd and edgecore print. Step lines
//! and errors go through klog, whose `file:line` changes between versions, so only the
//! text is matched, case-insensitively.

pub use crate::diagnosis::{FailureClass, UnknownClass};
use crate::diagnosis::{Finding, FindingId};

/// Message fragments, lowercase, per class. Within one line the first class that matches
/// wins, so the specific token and CA messages come before the generic certificate-fetch
/// ones, and the runtime's `connection refused` is claimed before anything about cloudcore.
const RULES: &[(FailureClass, &[&str])] = &[
    (
        FailureClass::CaMismatch,
        // edgecore: `failed to validate CA certificate. tokenCAhash: <a>, CAhash: <b>`
        &["failed to validate ca certificate", "tokencahash"],
    ),
    (
        FailureClass::TokenInvalid,
        &[
            "token is expired",
            "token validation failure",
            "credentials are in the wrong format",
            "token signature is invalid",
            "token is malformed",
            "code: 401",
        ],
    ),
    (
        FailureClass::AlreadyJoined,
        &["edgecore is already running on this node"],
    ),
    (
        FailureClass::DirtyManagementDir,
        &[
            "is not clean, please remove it first",
            // containerd still holds the sandbox of an interrupted join (older keadm);
            // `keadm reset edge` removes it, exactly as for /etc/kubeedge leftovers.
            "failed to reserve sandbox name",
        ],
    ),
    (
        FailureClass::NameTaken,
        &["node already exists or internal error occurred"],
    ),
    (
        FailureClass::RuntimeMissing,
        &[
            "failed to new remote image service",
            "unknown service runtime.v1",
            "only support unix socket endpoint",
            "expected cgroupspath to be of format",
            "cgroup driver",
            "cni plugin not initialized",
            // edgecore's edged (its kubelet) refusing its configuration and exiting, seen
            // on a real v1.23.1 node: `Start edged failed, err: failed to run Kubelet:
            // invalid configuration: cgroup [...] has some missing paths`.
            "start edged failed",
        ],
    ),
    (
        FailureClass::ImagePullStalled,
        &[
            "pull images failed",
            "failed to pull image",
            "no match for platform in manifest",
            // Step 6's sandbox has 20 s to start, and in that time containerd must pull
            // its pause image: a deadline there is a stalled pull.
            "copy resources failed: rpc error: code = deadlineexceeded",
        ],
    ),
    (
        FailureClass::CloudcoreUnreachable,
        &[
            "error making request: get \"https://",
            "get current host and port failed",
            "failed to get ca certificate",
            "failed to request the cloudcore server",
            "failed to get edge certificate from the cloudcore",
            // edgehub after the join: the websocket port (10000) does not answer.
            "will reconnect after",
        ],
    ),
];

/// The class of a failed or timed-out keadm command.
///
/// `lines` is the transcript, followed (for joins that timed out waiting for their
/// certificate) by the last lines of the edgecore log. The last line that matches a known
/// message decides, because edgecore restarts every 10 s and its newest complaint is the
/// current one. With nothing recognised, a run our own deadline cut off (`timed_out`)
/// while keadm was pulling an image ([`stopped_pulling`]) is a stalled pull: keadm has no
/// timeout there.
pub fn classify(lines: &[String], timed_out: bool) -> FailureClass {
    if let Some((class, _)) = cause(lines) {
        return class;
    }
    if timed_out && stopped_pulling(lines) {
        return FailureClass::ImagePullStalled;
    }
    FailureClass::Unknown
}

/// What `keadm upgrade edge` logs before it pulls the installation-package image of its
/// target (`Begin to download v1.23.1 of edgecore`), and the lines it logs once it has the
/// image, lowercase.
const UPGRADE_PULL_BEGINS: &str = "begin to download";
const UPGRADE_PULL_DONE: &[&str] = &["upgrade process start", "upgrade process successful"];

/// Whether keadm was pulling an image where the transcript ends: a join's last step is
/// `Pull Images`, or an upgrade's last progress line is `Begin to download`, with none
/// of the lines it logs once it has the image after it. Lines of neither kind (keadm's
/// `Pulling ...`, our own notes) do not count.
fn stopped_pulling(lines: &[String]) -> bool {
    lines
        .iter()
        .rev()
        .find_map(|line| {
            if let Some(step) = step_of(line) {
                return Some(step.title.eq_ignore_ascii_case("Pull Images"));
            }
            let text = klog_text(line)?.trim().to_lowercase();
            if text.starts_with(UPGRADE_PULL_BEGINS) {
                Some(true)
            } else if UPGRADE_PULL_DONE.iter().any(|done| text.starts_with(done)) {
                Some(false)
            } else {
                None
            }
        })
        .unwrap_or(false)
}

/// A join's class, given what pre-flight found on the node before anything changed: on a
/// node where edgecore already ran, a failure of the steps that follow (the image import,
/// an unrecognised keadm failure, a stalled pull) is the stale join's doing, and
/// `already_joined`'s fix (leave it out, or reset it first) is what the operator needs;
/// likewise `/etc/kubeedge` leftovers for `dirty_management_dir`. A failure to reach,
/// log in to or prepare the node keeps its own class: it says nothing of the old join.
/// Returns the class and, when pre-flight decided it, why.
pub fn with_findings(class: FailureClass, findings: &[Finding]) -> (FailureClass, Option<String>) {
    let consequence = matches!(
        class,
        FailureClass::RuntimeMissing | FailureClass::ImagePullStalled | FailureClass::Unknown
    );
    if !consequence {
        return (class, None);
    }
    let found = |id: FindingId| findings.iter().find(|f| f.id == id);
    let stale = found(FindingId::EdgecoreRunning)
        .map(|f| (FailureClass::AlreadyJoined, "edgecore running", f))
        .or_else(|| {
            found(FindingId::ManagementDirNotClean).map(|f| {
                (
                    FailureClass::DirtyManagementDir,
                    "/etc/kubeedge not clean",
                    f,
                )
            })
        });
    let Some((stale, what, finding)) = stale else {
        return (class, None);
    };
    let detail = if finding.detail.is_empty() {
        String::new()
    } else {
        format!(": {}", finding.detail)
    };
    (
        stale,
        Some(format!(
            "pre-flight found {what} on the node before anything changed{detail}; the step's own class was {class}"
        )),
    )
}

/// A numbered keadm step line, such as `5. Pull Images`.
/// The newest line that names a known cause, and its class: what a node that joined
/// but never registered says in edgecore's log.
pub fn cause(lines: &[String]) -> Option<(FailureClass, String)> {
    lines.iter().rev().find_map(|line| {
        let lower = line.to_lowercase();
        RULES
            .iter()
            .find(|(_, fragments)| fragments.iter().any(|f| lower.contains(f)))
            .map(|(class, _)| (*class, line.clone()))
    })
}

/// The newest error or fatal klog line (`E1206 05:51:12.556670 19899 kubelet.go:1493] ...`,
/// possibly behind a journald prefix): when no known cause matches, edgecore's own last
/// complaint is still the best lead (a real node out of inotify instances logs `"Failed to
/// start cAdvisor" err="inotify_init: too many open files"` and stops), and it is quoted
/// rather than "no cause".
pub fn last_error(lines: &[String]) -> Option<&str> {
    lines.iter().rev().map(String::as_str).find(|line| {
        let Some((header, _)) = line.split_once("] ") else {
            return false;
        };
        header.contains(".go:")
            && header.split_whitespace().any(|word| {
                let mut chars = word.chars();
                matches!(chars.next(), Some('E' | 'F'))
                    && word.len() == 5
                    && chars.all(|c| c.is_ascii_digit())
            })
    })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The number keadm printed. With `--pre-run` every step after the first is one
    /// higher than without, so compare titles rather than numbers.
    pub number: u32,
    /// The text after the number, e.g. `Pull Images`.
    pub title: String,
}

/// The last keadm step the transcript reached, the cheapest way to tell where a run that
/// was killed stopped. Step lines are klog lines (`I0806 14:58:26.123456 12345
/// join.go:78] 5. Pull Images`), possibly behind a journald prefix.
pub fn last_step(lines: &[String]) -> Option<Step> {
    lines.iter().rev().find_map(|line| step_of(line))
}

/// The text of a klog line (`I0806 14:58:26.123456 12345 join.go:78] 5. Pull Images`,
/// possibly behind a journald prefix): what follows its header. A klog header names the Go
/// source file, which keeps the same words in other text from counting.
fn klog_text(line: &str) -> Option<&str> {
    let (header, text) = line.split_once("] ")?;
    header.contains(".go:").then_some(text)
}

fn step_of(line: &str) -> Option<Step> {
    let text = klog_text(line)?;
    let (number, title) = text.trim_end().split_once(". ")?;
    if number.is_empty() || number.len() > 2 || !number.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(Step {
        number: number.parse().ok()?,
        title: title.trim().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn the_last_error_line_of_edgecore_is_found_behind_a_journald_prefix() {
        let log = [
            "E1206 05:40:00.000000 100 edged.go:10] an older error".to_string(),
            "Dec 06 05:41:00 edge-3 edgecore[4242]: E1206 05:41:00.123456 4242 kubelet.go:1493] \"Failed to start cAdvisor\" err=\"inotify_init: too many open files\"".to_string(),
            "I1206 05:41:01.000000 4242 edged.go:20] an info line after it".to_string(),
            "Error 42 in words, not a klog line] ".to_string(),
        ];
        let line = last_error(&log).expect("the kubelet's error");
        assert!(line.contains("inotify_init: too many open files"), "{line}");
        assert_eq!(last_error(&log[2..]), None);
    }

    #[test]
    fn what_preflight_found_decides_a_stale_node_s_class() {
        let finding = |id, detail: &str| Finding {
            id,
            detail: detail.to_string(),
        };
        let running = [
            finding(FindingId::ManagementDirNotClean, "3 entries"),
            finding(FindingId::EdgecoreRunning, "pid 12"),
        ];
        let dirty = [finding(FindingId::ManagementDirNotClean, "")];
        let class = |class, findings: &[Finding]| with_findings(class, findings).0;
        assert_eq!(
            class(FailureClass::RuntimeMissing, &running),
            FailureClass::AlreadyJoined
        );
        assert_eq!(
            class(FailureClass::Unknown, &running),
            FailureClass::AlreadyJoined
        );
        assert_eq!(
            class(FailureClass::Unknown, &dirty),
            FailureClass::DirtyManagementDir
        );
        // What says nothing of the old join keeps its class.
        for own in [
            FailureClass::Unreachable,
            FailureClass::Auth,
            FailureClass::TokenInvalid,
        ] {
            assert_eq!(class(own, &running), own);
        }
        assert_eq!(
            class(FailureClass::RuntimeMissing, &[]),
            FailureClass::RuntimeMissing
        );
        assert_eq!(
            with_findings(FailureClass::AlreadyJoined, &running),
            (FailureClass::AlreadyJoined, None)
        );
        assert_eq!(
            with_findings(FailureClass::Unknown, &dirty).1.as_deref(),
            Some(
                "pre-flight found /etc/kubeedge not clean on the node before anything changed; the step's own class was unknown"
            )
        );
    }

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_string).collect()
    }

    /// Fixtures our own deadline cut off; every other fixture ended on its own.
    const TIMED_OUT: &[&str] = &["image_pull_stalled.log", "unknown.timeout.log"];

    #[test]
    fn every_fixture_is_classified_as_its_name_says() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/transcripts");
        let mut seen = std::collections::BTreeSet::new();
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            let file = path.file_name().unwrap().to_str().unwrap().to_string();
            let want: FailureClass = file.split('.').next().unwrap().parse().unwrap();
            let text = std::fs::read_to_string(&path).unwrap();
            let got = classify(&lines(&text), TIMED_OUT.contains(&file.as_str()));
            assert_eq!(got, want, "{file}");
            seen.insert(want);
        }
        assert_eq!(
            seen.len(),
            FailureClass::ALL
                .iter()
                .filter(|c| c.read_from_output())
                .count(),
            "a fixture per class read from keadm's output: {seen:?}"
        );
    }

    #[test]
    fn the_newest_recognised_message_wins() {
        let log = lines(
            "E0806 15:00:01.000000 4242 certmanager.go:82] failed to apply the edge certs, err: failed to get CA certificate, err: Get \"https://10.0.0.1:10002/ca.crt\": dial tcp 10.0.0.1:10002: connect: connection refused\n\
             E0806 15:00:11.000000 4243 certmanager.go:82] failed to apply the edge certs, err: failed to get edge certificate from the cloudcore, error: failed to call http, code: 401, message: token validation failure, err: token has invalid claims: token is expired",
        );
        assert_eq!(classify(&log, false), FailureClass::TokenInvalid);
        let mut reversed = log.clone();
        reversed.reverse();
        assert_eq!(
            classify(&reversed, false),
            FailureClass::CloudcoreUnreachable
        );
    }

    #[test]
    fn within_a_line_the_specific_class_wins() {
        let runtime = "Error: edge node join failed: failed to new remote image service, err: validate service connection: validate CRI v1 image API for endpoint \"unix:///run/containerd/containerd.sock\": rpc error: code = Unavailable desc = connection error: desc = \"transport: Error while dialing: dial unix /run/containerd/containerd.sock: connect: connection refused\"";
        assert_eq!(
            classify(&lines(runtime), false),
            FailureClass::RuntimeMissing
        );
        let old_token = "F0806 15:00:11.000000 4243 certmanager.go:82] failed to apply the edge certs, err: failed to get edge certificate from the cloudcore, error: failed to call http, code: 401, message: token validation failure, err: Token is expired";
        assert_eq!(
            classify(&lines(old_token), false),
            FailureClass::TokenInvalid
        );
    }

    #[test]
    fn a_deadline_during_the_pull_is_a_stalled_pull_and_elsewhere_unknown() {
        let t = lines(
            "I0806 14:58:26.123456   12345 join.go:78] 4. Create the necessary directories\n\
             I0806 14:58:26.223456   12345 join_others.go:183] 5. Pull Images\n\
             I0806 14:58:26.323456   12345 image.go:40] Pulling kubeedge/installation-package:v1.23.0 ...",
        );
        assert_eq!(classify(&t, true), FailureClass::ImagePullStalled);
        assert_eq!(classify(&t, false), FailureClass::Unknown);
        let t = lines("I0806 14:58:26.123456   12345 join.go:78] 9. Run EdgeCore daemon");
        assert_eq!(classify(&t, true), FailureClass::Unknown);
        assert_eq!(classify(&[], true), FailureClass::Unknown);
    }

    /// An upgrade our deadline cut off after keadm's `Begin to download` and before it
    /// had the image was pulling it: a stalled pull, as for a join at `Pull Images`.
    #[test]
    fn a_deadline_during_an_upgrade_s_download_is_a_stalled_pull() {
        let t = lines(
            "WARNING: The upgrade command no longer automatically execute backup.\n\
             I1202 10:00:01.000000    1 upgrade.go:121] Begin to download v1.23.1 of edgecore\n\
             [keadm-batch] timed_out: keadm upgrade edge did not finish within 600 s",
        );
        assert_eq!(classify(&t, true), FailureClass::ImagePullStalled);
        assert_eq!(classify(&t, false), FailureClass::Unknown);
        // Past the download, the deadline says nothing of a pull.
        let mut past = t.clone();
        past.insert(
            2,
            "I1202 10:00:02.000000    1 upgrade.go:132] Upgrade process start ...".into(),
        );
        assert_eq!(classify(&past, true), FailureClass::Unknown);
        // The words without klog's header are not keadm's.
        let echoed = lines("[keadm-batch] Begin to download the kit");
        assert_eq!(classify(&echoed, true), FailureClass::Unknown);
    }

    #[test]
    fn last_step_reads_klog_step_lines_only() {
        let t = lines(
            "I0806 14:58:26.123456   12345 join.go:78] 1. Executing pre-run script: /root/pre.sh\n\
             I0806 14:58:26.123456   12345 join.go:78] 2. Check KubeEdge edgecore process status\n\
             Aug 06 14:58:27 edge-1 keadm[12345]: I0806 14:58:27.000001   12345 join.go:94] 3. Check if the management directory is clean\n\
             [keadm-batch] 1. not a keadm step\n\
             W0806 14:58:28.000000   12345 common.go:190] could not fetch a KubeEdge version from the internet: 3. nope",
        );
        assert_eq!(
            last_step(&t),
            Some(Step {
                number: 3,
                title: "Check if the management directory is clean".into()
            })
        );
        assert_eq!(last_step(&lines("Error: x")), None);
    }
}
