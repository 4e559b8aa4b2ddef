//! Why a node failed: [`FailureClass`], its id, its title and its fix for each command.

use std::fmt;
use std::str::FromStr;

use crate::keadm_cmd::Task;

/// A failed or timed-out node's failure class. The snake_case ids ([`FailureClass::as_str`])
/// are what summary.json holds and `--class` takes.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    /// edgecore already runs on the node (or bash is missing, which keadm reports the same way).
    AlreadyJoined,
    /// `/etc/kubeedge` holds leftovers, or containerd holds a sandbox from an interrupted join.
    DirtyManagementDir,
    /// cloudcore already has a node of that name (or failed to look it up).
    NameTaken,
    /// The node could not reach cloudcore's HTTPS port, or `--cloudcore-ipport` is malformed.
    CloudcoreUnreachable,
    /// cloudcore refused the token: expired, malformed, or badly signed.
    TokenInvalid,
    /// The token's CA hash is not the CA cloudcore serves.
    CaMismatch,
    /// Pulling the installation-package (or pause) image failed or hung.
    ImagePullStalled,
    /// The container runtime is missing, has CRI disabled, or uses another cgroup driver.
    RuntimeMissing,
    /// keadm-batch could not reach the node's sshd: refused, no route, no answer within the
    /// connect deadline, a failed SSH handshake, or a connection lost before keadm ran.
    Unreachable,
    /// The node's sshd (or its jump host's) closed the connection before its SSH banner
    /// on every try within the connect deadline, as sshd does past `MaxStartups`.
    SshAdmissionRefused,
    /// The node (or its jump host) rejected the login, or the key could not be used.
    Auth,
    /// The node's host key is not one the known-hosts file trusts: changed, unknown under
    /// the strict policy, revoked, or covered only by a pattern.
    HostKey,
    /// sudo needs a password the login does not have, or rejected it.
    Sudo,
    /// The node's `uname -m` has no keadm build, or its arch's package could not be staged.
    Arch,
    /// The upload directory cannot be used, or a file could not be put on the node.
    Upload,
    /// keadm join exited 0, but no Node of the node's name appeared in the cluster within
    /// `--ready-timeout` (edgecore's log, fetched then, names the cause).
    NotRegistered,
    /// The Node appeared but was not Ready within `--ready-timeout` (its Ready condition
    /// says why).
    NotReady,
    /// `keadm reset` exited with 0, but the node is not clean: edgecore still runs, its
    /// unit is still there, or /etc/kubeedge still exists (or the check could not finish).
    ResetIncomplete,
    /// `--backup`'s `keadm backup edge` failed, so the upgrade did not run: nothing changed.
    BackupFailed,
    /// `keadm upgrade edge` (or another of its family) failed: it exited non-zero, or its
    /// report (/etc/kubeedge/upgrade_report.json) says `success: false`.
    UpgradeFailed,
    /// keadm exited 0 but wrote no report: nothing was done (an unanswered `[y/N]`).
    UpgradeNotDone,
    /// The report says the upgrade succeeded, but the edgecore that runs on the node is
    /// not the target version (or none runs), or the report names another version.
    VersionMismatch,
    /// `--drain`: the node's Node could not be cordoned, or its pods were not all evicted
    /// and gone within `--drain-timeout` (a PodDisruptionBudget refused, a pod stayed
    /// terminating). Nothing ran on the node.
    DrainFailed,
    /// The node and the cluster disagree on which Node is this node's: edgecore.yaml on the
    /// node names another Node than the config's `nodeName` (or `--edgenode-name`), or the
    /// Node of that name is not this node's (no KubeEdge edge Node, none of the node's
    /// addresses). Nothing in the cluster was written for it.
    NameMismatch,
    /// With a kubeconfig: the join's Node turned Ready, but its labels or taints are not
    /// the ones the config asks for (the error lists each difference).
    LabelsMismatch,
    /// None of the above was recognised. A class this version does not know (in a file
    /// written by a newer one) reads as this too, so the node's record is not lost.
    #[serde(other)]
    Unknown,
}

impl FailureClass {
    /// Every class, in the order a recap lists them.
    pub const ALL: [FailureClass; 26] = [
        FailureClass::AlreadyJoined,
        FailureClass::DirtyManagementDir,
        FailureClass::NameTaken,
        FailureClass::CloudcoreUnreachable,
        FailureClass::TokenInvalid,
        FailureClass::CaMismatch,
        FailureClass::ImagePullStalled,
        FailureClass::RuntimeMissing,
        FailureClass::Unreachable,
        FailureClass::SshAdmissionRefused,
        FailureClass::Auth,
        FailureClass::HostKey,
        FailureClass::Sudo,
        FailureClass::Arch,
        FailureClass::Upload,
        FailureClass::NotRegistered,
        FailureClass::NotReady,
        FailureClass::ResetIncomplete,
        FailureClass::BackupFailed,
        FailureClass::UpgradeFailed,
        FailureClass::UpgradeNotDone,
        FailureClass::VersionMismatch,
        FailureClass::DrainFailed,
        FailureClass::NameMismatch,
        FailureClass::LabelsMismatch,
        FailureClass::Unknown,
    ];

    /// The id used in summary.json and by `--class`.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::AlreadyJoined => "already_joined",
            FailureClass::DirtyManagementDir => "dirty_management_dir",
            FailureClass::NameTaken => "name_taken",
            FailureClass::CloudcoreUnreachable => "cloudcore_unreachable",
            FailureClass::TokenInvalid => "token_invalid",
            FailureClass::CaMismatch => "ca_mismatch",
            FailureClass::ImagePullStalled => "image_pull_stalled",
            FailureClass::RuntimeMissing => "runtime_missing",
            FailureClass::Unreachable => "unreachable",
            FailureClass::SshAdmissionRefused => "ssh_admission_refused",
            FailureClass::Auth => "auth",
            FailureClass::HostKey => "host_key",
            FailureClass::Sudo => "sudo",
            FailureClass::Arch => "arch",
            FailureClass::Upload => "upload",
            FailureClass::NotRegistered => "not_registered",
            FailureClass::NotReady => "not_ready",
            FailureClass::ResetIncomplete => "reset_incomplete",
            FailureClass::BackupFailed => "backup_failed",
            FailureClass::UpgradeFailed => "upgrade_failed",
            FailureClass::UpgradeNotDone => "upgrade_not_done",
            FailureClass::VersionMismatch => "version_mismatch",
            FailureClass::DrainFailed => "drain_failed",
            FailureClass::NameMismatch => "name_mismatch",
            FailureClass::LabelsMismatch => "labels_mismatch",
            FailureClass::Unknown => "unknown",
        }
    }

    /// Whether the class is read from what keadm (and edgecore) printed; the others are
    /// keadm-batch's own failures before keadm ran, decided from the step that failed.
    pub fn read_from_output(self) -> bool {
        !matches!(
            self,
            FailureClass::Unreachable
                | FailureClass::SshAdmissionRefused
                | FailureClass::Auth
                | FailureClass::HostKey
                | FailureClass::Sudo
                | FailureClass::Arch
                | FailureClass::Upload
                | FailureClass::NotRegistered
                | FailureClass::NotReady
                | FailureClass::ResetIncomplete
                | FailureClass::BackupFailed
                | FailureClass::UpgradeFailed
                | FailureClass::UpgradeNotDone
                | FailureClass::VersionMismatch
                | FailureClass::DrainFailed
                | FailureClass::NameMismatch
                | FailureClass::LabelsMismatch
        )
    }

    /// A short heading for the recap's groups.
    pub fn title(self) -> &'static str {
        match self {
            FailureClass::AlreadyJoined => "Already joined (edgecore running)",
            FailureClass::DirtyManagementDir => "Dirty management directory",
            FailureClass::NameTaken => "Node name taken",
            FailureClass::CloudcoreUnreachable => "cloudcore unreachable",
            FailureClass::TokenInvalid => "Join token expired or invalid",
            FailureClass::CaMismatch => "CA mismatch",
            FailureClass::ImagePullStalled => "Image pull failed or stalled",
            FailureClass::RuntimeMissing => "Container runtime missing or misconfigured",
            FailureClass::Unreachable => "Node unreachable over SSH",
            FailureClass::SshAdmissionRefused => {
                "sshd refused to admit the connection (MaxStartups)"
            }
            FailureClass::Auth => "SSH login rejected",
            FailureClass::HostKey => "Host key not trusted",
            FailureClass::Sudo => "sudo refused",
            FailureClass::Arch => "No keadm for the node's arch",
            FailureClass::Upload => "Upload failed",
            FailureClass::NotRegistered => "Joined, but never registered in the cluster",
            FailureClass::NotReady => "Registered, but not Ready",
            FailureClass::ResetIncomplete => "Reset left the node unclean",
            FailureClass::BackupFailed => "Backup before the upgrade failed",
            FailureClass::UpgradeFailed => "Upgrade failed",
            FailureClass::UpgradeNotDone => "Upgrade not done",
            FailureClass::VersionMismatch => "Running edgecore is not the target version",
            FailureClass::DrainFailed => "Not drained (nothing ran on the node)",
            FailureClass::NameMismatch => "The node is not the Node of its name",
            FailureClass::LabelsMismatch => "Ready, but not the labels or taints asked for",
            FailureClass::Unknown => "Unrecognised failure",
        }
    }

    /// What to do about it on a node whose keadmCmd does `task`, in full sentences that
    /// an operator can follow as printed: a join is retried after a reset
    /// (`--reset-first`), an upgrade may be rolled back, and the other commands are
    /// simply retried, so the same class needs other words for each. keadm's own flags
    /// are written in backticks (`--image` in keadmCmd, or inside a whole `keadm ...`
    /// command); keadm-batch's flags outside them or in a `--retry-failed ...` span.
    pub fn suggested_fix(self, task: Task) -> String {
        let join = task == Task::Join;
        let retry = retry(task);
        match self {
            FailureClass::AlreadyJoined if join => format!(
                "edgecore already runs on these nodes, so they were probably joined before. \
                 Leave them out, or {retry}. If nothing named edgecore runs there, install \
                 bash: without it keadm always reports that edgecore is running."
            ),
            FailureClass::AlreadyJoined => format!(
                "keadm printed that edgecore already runs on these nodes, which is keadm \
                 join's first check: the node's transcript shows which command printed it. \
                 Run `keadm reset edge --force` there first if the node is to be joined \
                 again; otherwise check keadmCmd, and {retry}."
            ),
            FailureClass::DirtyManagementDir if join => "/etc/kubeedge (or containerd) holds \
                 leftovers of an earlier join. Retry this class with --reset-first, which runs \
                 `keadm reset edge --force` before the join."
                .to_string(),
            FailureClass::DirtyManagementDir => format!(
                "keadm printed that /etc/kubeedge (or containerd) holds leftovers of an \
                 earlier join, which is keadm join's second check: the node's transcript \
                 shows which command printed it. Run `keadm reset edge --force` there first \
                 if the node is to be joined again; otherwise check keadmCmd, and {retry}."
            ),
            FailureClass::NameTaken => format!(
                "cloudcore already has a node with this name (the name keadm join gives the \
                 node), or answered 500 when asked. Give each node a \
                 unique name, or delete the stale node on the cloud side (`kubectl delete \
                 node <name>`), and {retry}."
            ),
            FailureClass::CloudcoreUnreachable if join => format!(
                "The nodes could not reach cloudcore over HTTPS. Check that \
                 `--cloudcore-ipport` in keadmCmd is host:port, that the certificate port \
                 (`--certport` in keadmCmd, default 10002; 30002 behind the Helm NodePort \
                 service) is open from the nodes, and, for x509 errors, the nodes' clocks \
                 and the names in cloudcore's certificate. Then {retry}."
            ),
            FailureClass::CloudcoreUnreachable => format!(
                "The nodes could not reach cloudcore over HTTPS. Check that the cloudcore \
                 address in /etc/kubeedge/config/edgecore.yaml (modules.edgeHub) is one the \
                 nodes can reach, that its ports (10000 and 10002; 30000 and 30002 behind \
                 the Helm NodePort service) are open from the nodes, and, for x509 errors, \
                 the nodes' clocks and the names in cloudcore's certificate. Then {retry}."
            ),
            FailureClass::TokenInvalid => format!(
                "cloudcore refused the join token: it has expired or is not a valid token. \
                 Get a fresh one on the cloud side with `keadm gettoken`, put it in the \
                 config, and {retry}."
            ),
            FailureClass::CaMismatch => format!(
                "The token's CA hash is not cloudcore's CA: the token comes from another \
                 cluster, or cloudcore's CA was replaced. Get the token from this cluster \
                 with `keadm gettoken`, put it in the config, and {retry}."
            ),
            FailureClass::ImagePullStalled if join => format!(
                "The kubeedge/installation-package image (or the runtime's pause image) \
                 could not be pulled, or the pull hung. Check that the nodes reach the \
                 registry (or name a mirror with `--image-repository` in keadmCmd), that \
                 the image exists for their architecture, or preload the images on \
                 air-gapped nodes (`keadm-batch batch bundle` puts them in the kit); then \
                 {retry}."
            ),
            FailureClass::ImagePullStalled if task == Task::Upgrade => format!(
                "The kubeedge/installation-package image of the target version could not be \
                 pulled through the node's container runtime, or the pull hung until the \
                 command's deadline (--timeout; keadm has none there). keadm pulls before it \
                 stops edgecore, so the old edgecore still runs. Check that the nodes reach \
                 the registry (or name a mirror with `--image` in keadmCmd) and that the \
                 image exists for their architecture and for `--toVersion` in keadmCmd, or \
                 preload it on \
                 air-gapped nodes (`keadm-batch batch bundle` puts it in the kit); then \
                 {retry}."
            ),
            FailureClass::ImagePullStalled => format!(
                "An image could not be pulled through the node's container runtime, or the \
                 pull hung until the command's deadline (--timeout). Check that the nodes \
                 reach the registry and that the image exists for their architecture, or \
                 preload it on air-gapped nodes; then {retry}."
            ),
            FailureClass::RuntimeMissing if join => format!(
                "keadm could not use the container runtime, or keadm-batch could not import \
                 the offline images into it (the node's error says which, and the command \
                 to run by hand). Install and start containerd (or name its socket with \
                 `--remote-runtime-endpoint=unix://<socket>` in keadmCmd), make sure \
                 \"cri\" is not in disabled_plugins in /etc/containerd/config.toml, and \
                 give `--cgroupdriver=systemd` in keadmCmd when containerd uses \
                 SystemdCgroup = true. Then {retry}."
            ),
            FailureClass::RuntimeMissing => format!(
                "keadm could not use the container runtime, or keadm-batch could not import \
                 the offline images into it (the node's error says which, and the command \
                 to run by hand). Install and start containerd, check that \
                 containerRuntimeEndpoint in /etc/kubeedge/config/edgecore.yaml names its \
                 socket (keadm uses that runtime), and make sure \"cri\" is not in \
                 disabled_plugins in /etc/containerd/config.toml. Then {retry}."
            ),
            FailureClass::Unreachable => "keadm-batch could not reach sshd on these nodes, \
                 or lost the connection before keadm ran. Check that each node is up, that \
                 ssh.ip and ssh.port are right, that sshd runs and that no firewall drops the \
                 port (a jump host needs the same from it); raise connectTimeoutSeconds or \
                 retries for slow links. Nothing changed on a node that was never reached; \
                 retry this class when it answers."
                .to_string(),
            FailureClass::SshAdmissionRefused => "The sshd these nodes were reached through (the \
                 node's, or the jump host's that the node's error names) closed each connection \
                 before its SSH banner, on every try within the connect deadline: sshd does \
                 that to connections past its MaxStartups limit of unauthenticated ones (its log \
                 says `drop connection ... past MaxStartups`). Raise MaxStartups (and \
                 PerSourceMaxStartups) on that host, or lower --handshakes-per-host (default 8) \
                 so that fewer handshakes are in flight to it at once; nothing changed on these \
                 nodes, so retry this class then."
                .to_string(),
            FailureClass::Auth => "The nodes (or their jump host) rejected the SSH login. \
                 Check ssh.username and the password, passwordEnv, private key or agent named \
                 in ssh.auth, and that sshd allows that method for that user. Failed logins \
                 are not retried, so a lockout policy is not tripped; retry this class once \
                 the login works by hand (`ssh user@node`)."
                .to_string(),
            FailureClass::HostKey => "The nodes' host keys are not ones the known-hosts file \
                 trusts: a changed, revoked or, under the strict policy, unknown key, or a \
                 host covered only by a pattern. Check each key out of band, then fix the \
                 known-hosts file as the node's error says (`ssh-keygen -R` for a changed \
                 key, `ssh-keyscan` for a new one) and retry this class."
                .to_string(),
            FailureClass::Sudo => "sudo on these nodes needs a password that the login does \
                 not have, or rejected the login password. Give the login user passwordless \
                 sudo for sh, log in with the user's password (sudo uses it), or log in as \
                 root; then retry this class."
                .to_string(),
            FailureClass::Arch => "No keadm could be had for these nodes' arch: their \
                 `uname -m` has no keadm build (armv6l, or an arch keadm does not publish), \
                 or the package for their arch, which is not in keadm.archGroup, could not be \
                 staged. Add the arch to keadm.archGroup (and its package to \
                 offlinePackageDir in offline mode), or leave the nodes out; then retry this \
                 class."
                .to_string(),
            FailureClass::Upload => "The files could not be put on these nodes: the upload \
                 directory cannot be used (owner, symbolic link, writable by others), it is \
                 full, or the transfer broke. The node's error says which. Fix the directory \
                 or set remoteDir to a usable one on a filesystem with room, and retry this \
                 class."
                .to_string(),
            FailureClass::NotRegistered if join => format!(
                "keadm join exited 0, but edgecore never registered the node in the cluster. \
                 The node's error quotes the cause from edgecore's log: for a certificate or \
                 token error check the cloudcore address in `--cloudcore-ipport` in keadmCmd \
                 (the advertise address in cloudcore's certificate), that ports 10000 and \
                 10002 (or the Helm NodePorts) are open from the node, the token's lifetime \
                 (`keadm gettoken` for a fresh one) and the node's clock. Without \
                 `--edgenode-name` in keadmCmd the node registers under its hostname. Then \
                 {retry}."
            ),
            FailureClass::NotRegistered => format!(
                "{} succeeded on the node, but the cluster has no Node of the name waited \
                 for (the hostnameOverride in /etc/kubeedge/config/edgecore.yaml, else the \
                 config's nodeName). `kubectl get nodes -o wide` shows the name edgecore \
                 registered under, and `journalctl -u edgecore` on the node why it did not \
                 connect.{} Then {retry}.",
                task.command(),
                rolled_back(task)
            ),
            FailureClass::NotReady if join => {
                "The Node registered but did not turn Ready. Its Ready condition, quoted in \
                 the node's error, says why: for `network plugin not ready` install a CNI \
                 config on the node (/etc/cni/net.d), for a cgroup driver mismatch give \
                 `--cgroupdriver` in keadmCmd to match the runtime; `kubectl describe node \
                 <name>` shows the rest. Once fixed, retry this class: it checks them again \
                 (add --reset-first if the join must be redone)."
                    .to_string()
            }
            FailureClass::NotReady => format!(
                "{} succeeded on the node, but its Node was not Ready on the expected \
                 version in time: the node's error quotes the version and condition the Node \
                 showed. `kubectl describe node <name>` says why, and `journalctl -u \
                 edgecore` on the node what edgecore logged.{} Then {retry}.",
                task.command(),
                rolled_back(task)
            ),
            FailureClass::ResetIncomplete => "keadm reset exited with 0, but the node is not \
                 clean: the node's error names what is left (edgecore's pids, its unit, \
                 /etc/kubeedge). A join there would fail as already joined or dirty. Stop \
                 what still runs (`systemctl stop edgecore`, or kill the pids), remove what \
                 is left (`systemctl disable edgecore`, then the unit file and \
                 /etc/kubeedge), and retry this class: the reset runs again and is checked \
                 again."
                .to_string(),
            FailureClass::BackupFailed => format!(
                "`keadm backup edge` failed, so nothing changed on these nodes{}. The node's \
                 error quotes keadm's last line: keadm backs up only an edgecore whose \
                 version it can read (from the Node through edgecore's metaServer, else \
                 edgecore.yaml's edgeCoreVersion) and needs room under /etc/kubeedge/backup. \
                 Fix that and {retry}.",
                if task == Task::Upgrade {
                    " (the upgrade was not run)"
                } else {
                    ""
                }
            ),
            FailureClass::UpgradeFailed => match task {
                Task::Upgrade => format!(
                    "keadm's upgrade failed on these nodes: the node's error quotes the \
                     report's errorMessage (or keadm's last line). `failed to pull image` \
                     means the installation-package image of the target version is not in \
                     the node's runtime and cannot be pulled: preload it or name a mirror \
                     with `--image` in keadmCmd. edgecore may have been stopped (`systemctl \
                     status edgecore` says whether it runs): with --rollback-on-failure the \
                     node was rolled back (its outcome says whether that brought it back); \
                     otherwise run `keadm rollback edge --historical-version=<the version \
                     before>` on it, or fix the cause and {retry}. {MUTUALLY_EXCLUSIVE}"
                ),
                Task::Backup => format!(
                    "`keadm backup edge` failed on these nodes, so nothing changed: the \
                     node's error quotes the report's errorMessage (or keadm's last line). \
                     keadm backs up only an edgecore whose version it can read and needs \
                     room under /etc/kubeedge/backup. Fix that and {retry}. \
                     {MUTUALLY_EXCLUSIVE}"
                ),
                Task::Rollback => format!(
                    "`keadm rollback edge` failed on these nodes: the node's error quotes the \
                     report's errorMessage (or keadm's last line). `no historical version is \
                     found` means /etc/kubeedge/backup has no backup of that version (`ls \
                     /etc/kubeedge/backup` lists them; `keadm rollback edge \
                     --historical-version=<version>` names one). edgecore may have been \
                     stopped: `systemctl status edgecore` says whether it runs. Fix the \
                     cause and {retry}. {MUTUALLY_EXCLUSIVE}"
                ),
                Task::ConfigUpdate => format!(
                    "`keadm config-update` failed on these nodes: the node's error quotes the \
                     report's errorMessage (or keadm's last line), for example a key given \
                     with `--set` in keadmCmd that edgecore.yaml does not have. `systemctl status \
                     edgecore` says whether edgecore still runs. Fix keadmCmd or the cause \
                     and {retry}. {MUTUALLY_EXCLUSIVE}"
                ),
                Task::Join | Task::Reset | Task::Other => format!(
                    "keadm's command failed on these nodes: the node's error quotes keadm's \
                     report or its last line. Read the node's transcript, fix the cause and \
                     {retry}."
                ),
            },
            FailureClass::UpgradeNotDone if task == Task::Upgrade => format!(
                "keadm exited with 0 but wrote no /etc/kubeedge/upgrade_report.json, so \
                 nothing was done: `keadm upgrade edge` asks `[y/N]` (unless given `--force` in \
                 keadmCmd) and on any other answer logs `aborted upgrade operation` and exits 0. keadm-batch \
                 answers the prompt itself (`yes |`), so a keadmCmd that reads its input from \
                 elsewhere, or a keadm that never reached its reporter, is the cause: read \
                 the transcript, fix keadmCmd and {retry}."
            ),
            FailureClass::UpgradeNotDone => format!(
                "{} exited with 0 but wrote no /etc/kubeedge/upgrade_report.json (or a \
                 report of another command), so it did not get to do its work: read the \
                 transcript for what keadm printed, fix keadmCmd and {retry}.",
                task.command()
            ),
            FailureClass::VersionMismatch => format!(
                "{} reported success, but the edgecore that runs on the node is not {}, or \
                 none runs. On the node, `systemctl status edgecore` says whether it runs, and \
                 the version it logged as it started is in its log (`journalctl -u edgecore | \
                 grep Version`, or /var/log/kubeedge/edgecore.log without systemd); do not \
                 run edgecore itself to ask, which starts a second edgecore. {}",
                task.command(),
                match task {
                    Task::Upgrade => "the target version",
                    Task::Rollback => "the version rolled back to",
                    _ => "the version keadm's report names",
                },
                if task == Task::Upgrade {
                    format!(
                        "The installation-package image may hold another version than its tag \
                         says, or edgecore failed to start. With --rollback-on-failure the node \
                         was rolled back; otherwise run `keadm rollback edge \
                         --historical-version=<the version before>` there, or fix the cause \
                         and {retry}."
                    )
                } else {
                    format!("edgecore may have failed to start: fix that and {retry}.")
                }
            ),
            FailureClass::DrainFailed if join => "A join is never drained (its Node does not \
                 exist yet), so this class is not a join's: read the node's transcript for \
                 what failed, and retry this class."
                .to_string(),
            FailureClass::DrainFailed => "The node's Node could not be cordoned, or its pods \
                 were not evicted and gone within --drain-timeout, so its command did not run \
                 and it was uncordoned again (unless it was cordoned before the run). The \
                 node's error names the pods left and why: for a PodDisruptionBudget that \
                 refuses, add replicas elsewhere or loosen its minAvailable or maxUnavailable \
                 (`kubectl get pdb -A` shows which allow no disruption); for a pod that stays \
                 terminating, check that the node's edgecore is connected to cloudcore. Then \
                 raise --drain-timeout if the pods only need longer, and retry this class \
                 (`--retry-failed --class drain_failed --drain`)."
                .to_string(),
            FailureClass::Unknown => "The cause was not recognised. Read the node's \
                 transcript and its edgecore log (`journalctl -u edgecore -xe` or \
                 /var/log/kubeedge/edgecore.log)."
                .to_string(),
            FailureClass::NameMismatch => "The config's nodeName and the node disagree on \
                 which Node is this node's, so nothing in the cluster was changed or trusted \
                 for it: the error names the Node, what the \
                 node's /etc/kubeedge/config/edgecore.yaml says (`grep hostnameOverride \
                 /etc/kubeedge/config/edgecore.yaml` on the node) and what the Node shows \
                 (`kubectl get node NAME -o wide --show-labels`). Set the config's nodeName to \
                 the node's own Node name, or fix the node's hostnameOverride if it was copied \
                 from another node, and retry this class (`--retry-failed --class \
                 name_mismatch`)."
                .to_string(),
            FailureClass::LabelsMismatch if join => "The Node is Ready, but its labels or \
                 taints are not the config's: the error lists each difference. A label changed \
                 on the cluster side since the join is put back with `kubectl label node NAME \
                 KEY=VALUE --overwrite` (or change the config to what the Node should keep). \
                 Taints take effect only when a Node first registers, so a taint that differs \
                 needs the node joined again: retry this class with --reset-first, which runs \
                 `keadm reset edge --force` before the join (delete the Node first with \
                 `kubectl delete node NAME`, or it keeps its old taints)."
                .to_string(),
            FailureClass::LabelsMismatch => "Only a join sets a node's labels and taints, so \
                 this class is not this command's: read the node's transcript, check the \
                 Node's labels with `kubectl get node NAME --show-labels`, and retry this \
                 class."
                .to_string(),
        }
    }

    /// The fixes of this class for the tasks its nodes ran, each fix once: one when they
    /// all need the same words, else one per distinct fix, each starting with the
    /// commands it is for (`keadm reset edge, keadm upgrade edge: ...`). What the recap
    /// and report.html print under a class.
    pub fn fixes_for(self, tasks: impl IntoIterator<Item = Task>) -> Vec<String> {
        let mut tasks: Vec<Task> = tasks.into_iter().collect();
        tasks.sort();
        tasks.dedup();
        let mut fixes: Vec<(Vec<&str>, String)> = Vec::new();
        for task in tasks {
            let fix = self.suggested_fix(task);
            match fixes.iter_mut().find(|(_, f)| *f == fix) {
                Some((commands, _)) => commands.push(task.command()),
                None => fixes.push((vec![task.command()], fix)),
            }
        }
        if fixes.len() == 1 {
            return fixes.into_iter().map(|(_, fix)| fix).collect();
        }
        fixes
            .into_iter()
            .map(|(commands, fix)| format!("{}: {fix}", commands.join(", ")))
            .collect()
    }
}

/// How a failed node is run again: a join whose keadm ran has left /etc/kubeedge behind,
/// which keadm join refuses, so it is retried after `keadm reset edge --force`; any
/// other command is retried as it is (the recap's next command carries the run's flags).
fn retry(task: Task) -> String {
    if task == Task::Join {
        "retry this class with --reset-first, which runs `keadm reset edge --force` before \
         the join"
            .to_string()
    } else {
        "retry this class".to_string()
    }
}

/// What became of an upgrade that failed after keadm: rolled back or not.
fn rolled_back(task: Task) -> &'static str {
    if task == Task::Upgrade {
        " With --rollback-on-failure the node was rolled back; otherwise run `keadm \
         rollback edge --historical-version=<the version before>` there if it must go back."
    } else {
        ""
    }
}

/// What keadm's upgrade family says when an earlier one of them was killed.
const MUTUALLY_EXCLUSIVE: &str = "`the mutually exclusive command is being executed` means an \
     earlier keadm of the family was killed: remove /etc/kubeedge/idempotency_record first.";

impl fmt::Display for FailureClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `--class` value that names no class.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a failure class. Use one of: {list}.", list = class_list())]
pub struct UnknownClass(pub String);

fn class_list() -> String {
    FailureClass::ALL.map(FailureClass::as_str).join(", ")
}

impl FromStr for FailureClass {
    type Err = UnknownClass;

    /// Takes the snake_case id; dashes are accepted for underscores.
    fn from_str(s: &str) -> Result<FailureClass, UnknownClass> {
        let wanted = s.trim().replace('-', "_");
        FailureClass::ALL
            .into_iter()
            .find(|c| c.as_str() == wanted)
            .ok_or_else(|| UnknownClass(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_unknown_ids_are_refused() {
        for class in FailureClass::ALL {
            assert_eq!(class.as_str().parse::<FailureClass>(), Ok(class));
            assert_eq!(class.to_string(), class.as_str());
            for task in Task::ALL {
                assert!(class.suggested_fix(task).ends_with('.'), "{class} {task:?}");
            }
            assert!(!class.title().is_empty());
        }
        assert_eq!("token-invalid".parse(), Ok(FailureClass::TokenInvalid));
        let err = "token_expired".parse::<FailureClass>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "`token_expired` is not a failure class. Use one of: already_joined, \
             dirty_management_dir, name_taken, cloudcore_unreachable, token_invalid, \
             ca_mismatch, image_pull_stalled, runtime_missing, unreachable, ssh_admission_refused, auth, host_key, \
             sudo, arch, upload, not_registered, not_ready, reset_incomplete, backup_failed, \
             upgrade_failed, upgrade_not_done, version_mismatch, drain_failed, name_mismatch, labels_mismatch, unknown."
        );
    }

    /// Under a class whose nodes ran several commands, each fix is labelled with every
    /// command it is for: a fix two commands share names both, never only the first.
    #[test]
    fn each_fix_is_labelled_with_every_command_it_is_for() {
        let tasks = [Task::Join, Task::Reset, Task::Upgrade, Task::Backup];
        for class in FailureClass::ALL {
            let fixes = class.fixes_for(tasks);
            if fixes.len() == 1 {
                assert!(
                    tasks.iter().all(|t| class.suggested_fix(*t) == fixes[0]),
                    "{class}"
                );
                continue;
            }
            for task in tasks {
                let fix = class.suggested_fix(task);
                let shown: Vec<&String> = fixes.iter().filter(|f| f.ends_with(&fix)).collect();
                assert_eq!(shown.len(), 1, "{class} {task:?}: {fixes:?}");
                let label = shown[0].strip_suffix(&fix).unwrap();
                assert!(
                    label
                        .split(", ")
                        .any(|c| c.trim_end_matches(": ") == task.command()),
                    "{class}: the fix for {} is labelled {label:?}",
                    task.command()
                );
            }
        }
    }

    /// summary.json and journal.jsonl hold exactly the ids `as_str` names, as before these
    /// were enums.
    #[test]
    fn serde_writes_and_reads_the_same_ids_as_as_str() {
        for class in FailureClass::ALL {
            let json = serde_json::to_string(&class).unwrap();
            assert_eq!(json, format!("\"{}\"", class.as_str()));
            assert_eq!(serde_json::from_str::<FailureClass>(&json).unwrap(), class);
        }
        assert_eq!(
            serde_json::from_str::<FailureClass>("\"a_class_from_the_future\"").unwrap(),
            FailureClass::Unknown
        );
    }
}
