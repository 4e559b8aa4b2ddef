//! The pre-flight probe for `keadm join`: what would stop keadm before it changes
//! anything (edgecore running, a management dir that is not empty, the runtime's socket,
//! a noexec or full upload dir, no bash), and what only the node can see of the join
//! (cloudcore's ports from the node, the node's clock, the runtime's cgroup driver), as
//! `KB_PF` lines that `kubeedge::preflight` reads.

/// The pre-flight probe for `keadm join` (scripts/preflight_probe.sh): POSIX sh,
/// read-only, one round trip. Run it with
/// the privileges keadm will have (as root, or inside [`super::wrap`]), then give its output to
/// `kubeedge::preflight::parse`, which knows the finding ids it prints.
/// `needed_bytes` is the size of the files still to upload; 0 skips the disk check.
/// `join` is what keadmCmd says of cloudcore and the cgroup driver
/// (`kubeedge::preflight::join_side`).
pub fn preflight_probe_script(
    upload_dir: &str,
    runtime_socket: &str,
    needed_bytes: u64,
    join: &JoinSide,
) -> String {
    let (host, port, cert_port) = match &join.cloudcore {
        Some(c) => (
            c.host.as_str(),
            c.port.map(|p| p.to_string()).unwrap_or_default(),
            c.cert_port.to_string(),
        ),
        None => ("", String::new(), String::new()),
    };
    super::script::with_values(
        include_str!("scripts/preflight_probe.sh"),
        &[
            ("UP", upload_dir),
            ("SOCK", runtime_socket),
            ("NEED_KIB", &needed_bytes.div_ceil(1024).to_string()),
            ("CC_HOST", host),
            ("CC_PORT", &port),
            ("CC_CERTPORT", &cert_port),
            ("CC_WAIT", &CONNECT_DEADLINE_SECS.to_string()),
            ("CGD", &join.cgroup_driver),
            ("CGD_FROM", &join.cgroup_driver_from),
        ],
    )
}

/// How long the node waits for each of cloudcore's ports to accept a TCP connection. The
/// ports are tried at once, so the probe waits this long at most: a port that answers
/// does so in milliseconds, and one that drops the SYN would hold keadm for minutes.
pub const CONNECT_DEADLINE_SECS: u32 = 3;

/// What the probe checks of a join from the node's side, as keadmCmd says it. The
/// default checks neither.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JoinSide {
    /// cloudcore's ports the node must reach; `None` when keadmCmd names no cloudcore.
    pub cloudcore: Option<CloudcorePorts>,
    /// The cgroup driver keadm will write for edgecore; empty skips the check.
    pub cgroup_driver: String,
    /// Where that driver comes from, in words (`--cgroupdriver=systemd`).
    pub cgroup_driver_from: String,
}

/// cloudcore's address as a join dials it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudcorePorts {
    /// The host of `--cloudcore-ipport`, without brackets.
    pub host: String,
    /// The port of `--cloudcore-ipport` (cloudhub's websocket), when it names one.
    pub port: Option<u16>,
    /// `--certport` (keadm's default 10002), where the node gets its certificate.
    pub cert_port: u16,
}
