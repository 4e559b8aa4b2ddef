//! What the pre-flight probe found: [`FindingId`] and [`Finding`], with what each means
//! and what to do about it.

use std::fmt;

/// What the probe can find. Each is something keadm join would trip over.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum FindingId {
    /// A process named edgecore runs, or edgecore.service is active (keadm's check 1).
    EdgecoreRunning,
    /// `/etc/kubeedge` exists and is not an empty directory (keadm's check 2).
    ManagementDirNotClean,
    /// The container runtime socket keadm will dial is missing (fails before step 5).
    RuntimeSocketMissing,
    /// The upload directory is on a `noexec` mount, so `./keadm` cannot run there.
    UploadDirNoexec,
    /// Less free space where the upload goes than the files need.
    LowDisk,
    /// No `bash`: keadm runs its checks through `bash -c` and misreports without it.
    BashMissing,
    /// The node's clock is off the control host's by more than a minute; certificates
    /// and the join token are checked against clocks.
    ClockSkew,
    /// The runtime keadm will use has another cgroup driver than the one keadm writes
    /// for edgecore (`--cgroupdriver`, default cgroupfs).
    CgroupDriverMismatch,
    /// cloudcore's port (of `--cloudcore-ipport`) or its certificate port (`--certport`)
    /// does not accept a TCP connection from the node.
    CloudcoreUnreachableFromNode,
    /// An image keadm join needs (installation-package, the runtime's sandbox image) or
    /// keadm.extraImages lists is neither in the node's runtime nor in an offline image
    /// archive for the node's arch.
    ImageMissing,
    /// The probe did not print its last line, or one of its checks could not run (the
    /// image check without the runtime's answer), so any of the above may be missing.
    ProbeIncomplete,
}

impl FindingId {
    /// Every finding, in the order the probe checks them.
    pub const ALL: [FindingId; 11] = [
        FindingId::EdgecoreRunning,
        FindingId::ManagementDirNotClean,
        FindingId::RuntimeSocketMissing,
        FindingId::UploadDirNoexec,
        FindingId::LowDisk,
        FindingId::BashMissing,
        FindingId::ClockSkew,
        FindingId::CgroupDriverMismatch,
        FindingId::CloudcoreUnreachableFromNode,
        FindingId::ImageMissing,
        FindingId::ProbeIncomplete,
    ];

    /// The id the probe prints, also fit for JSON and tables.
    pub fn as_str(self) -> &'static str {
        match self {
            FindingId::EdgecoreRunning => "edgecore_running",
            FindingId::ManagementDirNotClean => "management_dir_not_clean",
            FindingId::RuntimeSocketMissing => "runtime_socket_missing",
            FindingId::UploadDirNoexec => "upload_dir_noexec",
            FindingId::LowDisk => "low_disk",
            FindingId::BashMissing => "bash_missing",
            FindingId::ClockSkew => "clock_skew",
            FindingId::CgroupDriverMismatch => "cgroup_driver_mismatch",
            FindingId::CloudcoreUnreachableFromNode => "cloudcore_unreachable_from_node",
            FindingId::ImageMissing => "image_missing",
            FindingId::ProbeIncomplete => "probe_incomplete",
        }
    }

    /// The finding a probe line names; `None` for an id this version does not know.
    pub fn from_probe(id: &str) -> Option<FindingId> {
        FindingId::ALL.into_iter().find(|f| f.as_str() == id)
    }
}

impl fmt::Display for FindingId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One thing the probe found on one node; summary.json records these under `preflight`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Finding {
    pub id: FindingId,
    /// What exactly was seen on this node (pids, entries, paths, sizes); may be empty.
    pub detail: String,
}

impl Finding {
    /// What is wrong, as a fixed sentence.
    pub fn message(&self) -> &'static str {
        match self.id {
            FindingId::EdgecoreRunning => {
                "edgecore is already running on this node, so keadm join would stop at its first check."
            }
            FindingId::ManagementDirNotClean => {
                "/etc/kubeedge is not empty, so keadm join would stop at its second check."
            }
            FindingId::RuntimeSocketMissing => {
                "The container runtime socket keadm join will use does not exist, so the join would fail before pulling images."
            }
            FindingId::UploadDirNoexec => {
                "The upload directory is on a noexec mount, so the uploaded keadm could not run there."
            }
            FindingId::LowDisk => {
                "The upload directory's filesystem has less free space than the files to upload need."
            }
            FindingId::BashMissing => {
                "bash is not installed; keadm runs its checks through bash and without it always reports that edgecore is already running."
            }
            FindingId::ClockSkew => {
                "The node's clock is more than a minute off the control host's, so edgecore would reject cloudcore's certificates (or they its own) as not yet or no longer valid."
            }
            FindingId::CgroupDriverMismatch => {
                "The container runtime uses another cgroup driver than the one keadm join will write for edgecore, so keadm's first container would fail to start."
            }
            FindingId::CloudcoreUnreachableFromNode => {
                "cloudcore does not answer a TCP connection from the node, so keadm join could not get the node's certificate or edgecore could not connect."
            }
            FindingId::ImageMissing => {
                "The container runtime lacks an image keadm join needs or keadm.extraImages lists, and no offline image archive provides it, so it would have to be pulled from a registry."
            }
            FindingId::ProbeIncomplete => {
                "The pre-flight probe did not finish, or one of its checks could not run, so its findings are incomplete."
            }
        }
    }

    /// What to do about it, as a fixed sentence.
    pub fn suggested_action(&self) -> &'static str {
        match self.id {
            FindingId::EdgecoreRunning => {
                "Leave the node out if it is joined already, or reset it first with `keadm reset edge --force` (--reset-first)."
            }
            FindingId::ManagementDirNotClean => {
                "Run `keadm reset edge --force` on the node (or use --reset-first), or remove /etc/kubeedge if nothing in it is needed."
            }
            FindingId::RuntimeSocketMissing => {
                "Install and start containerd (or the node's runtime), or pass --remote-runtime-endpoint=unix://<socket> in keadmCmd."
            }
            FindingId::UploadDirNoexec => {
                "Set remoteDir to a directory on a filesystem mounted without noexec, for example /var/lib/keadm-batch."
            }
            FindingId::LowDisk => {
                "Free space on that filesystem, or set remoteDir to a directory on a larger one."
            }
            FindingId::BashMissing => {
                "Install bash on the node (for example `apk add bash` on Alpine, `opkg install bash` on OpenWrt)."
            }
            FindingId::ClockSkew => {
                "Set the node's clock: run an NTP client (chrony, systemd-timesyncd, `ntpd -q`) on it, or set it once with `date -s`; boards without a battery-backed clock (RTC) start in the past after every power-off and need NTP at boot."
            }
            FindingId::CgroupDriverMismatch => {
                "Make the two agree: pass --cgroupdriver=systemd in keadmCmd when the runtime uses systemd (containerd's SystemdCgroup = true, docker's native.cgroupdriver=systemd), or change the runtime's config to the driver keadm writes and restart it."
            }
            FindingId::CloudcoreUnreachableFromNode => {
                "Make --cloudcore-ipport name an address of cloudcore the node can reach (cloudcore's advertise address, modules.cloudHub.advertiseAddress, which its certificate must also name), open the port in any firewall between the edge and the cloud, and behind NAT or the Helm chart's NodePort service give the forwarded certificate port with --certport (30002 for the chart)."
            }
            FindingId::ImageMissing => {
                "Put an archive of each missing image in the offline directory's <arch>/images (keadm-batch batch bundle writes them) or list one in keadm.offlineImages, or make sure the node can reach a registry that has the image (for keadm's own, --image-repository in keadmCmd names a mirror)."
            }
            FindingId::ProbeIncomplete => {
                "Fix what the detail says was not checked and why (the node's shell must be a POSIX sh, sudo must work without a terminal, the container runtime must answer on its socket), then run --preflight-only again."
            }
        }
    }
}

impl fmt::Display for Finding {
    /// `message (detail)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.detail.is_empty() {
            f.write_str(self.message())
        } else {
            write!(
                f,
                "{} ({})",
                self.message().trim_end_matches('.'),
                self.detail
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// summary.json holds exactly the ids `as_str` names, as before these were enums.
    #[test]
    fn serde_writes_and_reads_the_same_ids_as_as_str() {
        for id in FindingId::ALL {
            let json = serde_json::to_string(&id).unwrap();
            assert_eq!(json, format!("\"{}\"", id.as_str()));
            assert_eq!(serde_json::from_str::<FindingId>(&json).unwrap(), id);
        }
        let finding = Finding {
            id: FindingId::LowDisk,
            detail: "900 KiB free in /tmp, 50 MiB needed".into(),
        };
        assert_eq!(
            serde_json::to_string(&finding).unwrap(),
            r#"{"id":"low_disk","detail":"900 KiB free in /tmp, 50 MiB needed"}"#
        );
    }
}
