//! `batch status`'s one round trip to a node: whether edgecore runs (its pids), its
//! version (the one the running edgecore logged as it started, else edgecore.yaml's
//! `edgecoreVersion`: edgecore has no `--version`, and running it starts a second
//! edgecore), and the version of the keadm a run of the config would use. Read-only: it
//! starts nothing but keadm's `version`, and writes nothing. It also prints the edge
//! certificate edgecore connects with (edgecore.yaml's `edgeHub.tlsCertFile`, else
//! KubeEdge's default /etc/kubeedge/certs/server.crt) as PEM text, since nodes may have no
//! openssl: the control host reads its expiry ([`crate::cert_expiry`]). [`parse_status`]
//! reads its `KB_ST` lines.

use crate::node_text::one_line;

/// Where keadm join installs edgecore.
pub const EDGECORE_BIN: &str = "/usr/local/bin/edgecore";

/// Where keadm join has edgecore keep the certificate it connects to cloudcore with
/// (KubeEdge v1.23's `constants.DefaultCertFile`, edgecore.yaml's `edgeHub.tlsCertFile`).
pub const EDGE_CERT: &str = "/etc/kubeedge/certs/server.crt";

/// The line the probe prints last: output without it is a probe that did not finish.
const DONE: &str = "KB_ST_DONE";

/// The probe (scripts/status_probe.sh) for a node whose keadm would be `keadm` (keadmBinDir's, or the one a run
/// uploads into the node's upload dir). Run it with the privileges keadm would have: the
/// upload dir is root's under sudo.
pub fn status_probe_script(keadm: &str) -> String {
    super::script::with_values(
        include_str!("scripts/status_probe.sh"),
        &[
            ("KEADM", keadm),
            ("EC_BIN", EDGECORE_BIN),
            ("CERT", EDGE_CERT),
        ],
    )
}

/// The longest version text kept, in characters.
const VERSION_CHARS: usize = 120;
/// The most edgecore pids kept.
const MAX_PIDS: usize = 16;

/// What [`status_probe_script`] told of a node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeStatus {
    /// Whether the probe printed its last line.
    pub finished: bool,
    /// The pids of the processes named edgecore; empty when none runs.
    pub edgecore_pids: Vec<u32>,
    /// The edgecore binary found (/usr/local/bin/edgecore, else on PATH), when there is one.
    pub edgecore_path: Option<String>,
    /// The running edgecore's version as it logged it (`v1.20.0`), else edgecore.yaml's
    /// `edgecoreVersion`; `None` when neither says one.
    pub edgecore_version: Option<String>,
    /// keadm's version (`v1.20.0`, from `keadm version`'s GitVersion, else its first
    /// line), when the keadm the config would use is on the node.
    pub keadm_version: Option<String>,
    /// The edge certificate edgecore connects with.
    pub cert: EdgeCert,
}

/// What the node's edge certificate says of its expiry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum EdgeCert {
    /// There is none (the node never joined, or was reset).
    #[default]
    None,
    /// It is there, but the login cannot read it.
    Unreadable { path: String },
    /// Its notAfter, in unix seconds.
    Expires { path: String, not_after: i64 },
    /// Its text is not a certificate whose expiry can be read (why, in a few words).
    Invalid { path: String, why: &'static str },
}

/// Reads the probe's output: only its own lines count, each bounded and escaped (the
/// node's output is untrusted); a pid that is not a number is left out.
pub fn parse_status(output: &str) -> NodeStatus {
    let mut status = NodeStatus::default();
    let mut cert_path = None;
    let mut pem = String::new();
    for line in output.lines() {
        let line = line.trim_end_matches('\r');
        if line == DONE {
            status.finished = true;
        } else if let Some(pids) = line.strip_prefix("KB_ST_EDGECORE_PIDS") {
            status.edgecore_pids = pids
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .take(MAX_PIDS)
                .collect();
        } else if let Some(rest) = line.strip_prefix("KB_ST_EDGECORE ") {
            let (path, version) = rest.split_once(' ').unwrap_or((rest, ""));
            status.edgecore_path = Some(one_line(path, VERSION_CHARS));
            status.edgecore_version =
                Some(one_line(version, VERSION_CHARS)).filter(|v| !v.is_empty());
        } else if let Some(version) = line.strip_prefix("KB_ST_KEADM ") {
            status.keadm_version = Some(keadm_version(version));
        } else if let Some(path) = line.strip_prefix("KB_ST_CERT_UNREADABLE ") {
            status.cert = EdgeCert::Unreadable {
                path: one_line(path, VERSION_CHARS),
            };
        } else if let Some(path) = line.strip_prefix("KB_ST_CERT_PATH ") {
            cert_path = Some(one_line(path, VERSION_CHARS));
        } else if let Some(text) = line.strip_prefix("KB_ST_CERT ") {
            pem.push_str(text);
            pem.push('\n');
        }
    }
    if let Some(path) = cert_path {
        status.cert = match crate::cert_expiry::not_after(&pem) {
            Ok(not_after) => EdgeCert::Expires { path, not_after },
            Err(why) => EdgeCert::Invalid { path, why },
        };
    }
    status
}

/// keadm's version from the first line of `keadm version`
/// (`version: version.Info{Major:"1", Minor:"20", GitVersion:"v1.20.0", ...}`): the
/// GitVersion, else the line itself.
fn keadm_version(line: &str) -> String {
    let git = line
        .split_once("GitVersion:\"")
        .and_then(|(_, rest)| rest.split_once('"'))
        .map(|(version, _)| version)
        .filter(|v| !v.is_empty());
    one_line(git.unwrap_or(line), VERSION_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote::sent_forms::{Forms, assert_forms_posix_sh};
    use crate::shell::shell_quote;

    #[test]
    fn the_probe_is_posix_sh_as_the_login_user_and_under_sudo() {
        let script = status_probe_script("/srv/it's \"kb\"/keadm");
        assert_forms_posix_sh("the status probe", &script, Forms::Every, &[]);
    }

    /// Run here with a keadm and an edgecore of our own on PATH: what it prints is what
    /// the parser reads, and a keadm that is not there is none.
    #[test]
    fn the_probe_run_by_sh_reads_the_versions() {
        let dir = tempfile::tempdir().unwrap();
        let keadm = dir.path().join("keadm");
        std::fs::write(
            &keadm,
            "#!/bin/sh\necho 'version: version.Info{Major:\"1\", Minor:\"23\", GitVersion:\"v1.23.1\", GitCommit:\"abc\"}'\n",
        )
        .unwrap();
        // edgecore is never run (it has no --version: it would start a second edgecore).
        let edgecore = dir.path().join("edgecore");
        let ran = dir.path().join("edgecore-ran");
        std::fs::write(
            &edgecore,
            format!(
                "#!/bin/sh\ntouch '{}'\necho 'KubeEdge v9.9.9'\n",
                ran.display()
            ),
        )
        .unwrap();
        let config = dir.path().join("edgecore.yaml");
        std::fs::write(&config, "edgecoreVersion: v1.23.1\nmodules: {}\n").unwrap();
        let cert = dir.path().join("server.crt");
        std::fs::write(&cert, crate::cert_expiry::test_pem(10)).unwrap();
        use std::os::unix::fs::PermissionsExt;
        for f in [&keadm, &edgecore] {
            std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let run = |keadm: &str| {
            let out = std::process::Command::new("sh")
                // Not this machine's own edgecore, should it have one: the one on PATH.
                .args([
                    "-c",
                    &status_probe_script(keadm)
                        .replace(
                            &format!("EC_BIN={}", crate::shell::shell_quote(EDGECORE_BIN)),
                            "EC_BIN=/nonexistent/edgecore",
                        )
                        .replace(
                            "/etc/kubeedge/config/edgecore.yaml",
                            config.to_str().unwrap(),
                        )
                        .replace(
                            &format!("CERT={}", shell_quote(EDGE_CERT)),
                            &format!("CERT={}", shell_quote(cert.to_str().unwrap())),
                        )
                        // This machine's view holds other tests' edgecores: none is looked at.
                        .replace("/proc/[0-9]*", "/nonexistent/[0-9]*")
                        .replace("if has pidof", "if false"),
                ])
                .env("PATH", format!("{}:/usr/bin:/bin", dir.path().display()))
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            parse_status(&String::from_utf8_lossy(&out.stdout))
        };
        let status = run(keadm.to_str().unwrap());
        assert!(status.finished);
        assert_eq!(status.keadm_version.as_deref(), Some("v1.23.1"));
        // No edgecore runs: edgecore.yaml's edgecoreVersion says the version.
        assert_eq!(status.edgecore_version.as_deref(), Some("v1.23.1"));
        assert!(!ran.exists(), "the probe ran edgecore");
        assert_eq!(
            status.edgecore_path.as_deref(),
            Some(edgecore.to_str().unwrap())
        );
        // The certificate's PEM came back whole, and its notAfter is read here.
        match &status.cert {
            EdgeCert::Expires { path, not_after } => {
                assert_eq!(path, cert.to_str().unwrap());
                assert!(*not_after > 1_700_000_000, "{not_after}");
            }
            other => panic!("{other:?}"),
        }
        let status = run(dir.path().join("nothing").to_str().unwrap());
        assert_eq!(status.keadm_version, None);
        // edgecore.yaml's tlsCertFile names another file, which is not there.
        std::fs::write(
            &config,
            "modules:\n  edgeHub:\n    tlsCertFile: /nonexistent/server.crt\n",
        )
        .unwrap();
        assert_eq!(run(keadm.to_str().unwrap()).cert, EdgeCert::None);
    }

    #[test]
    fn node_text_is_bounded_and_escaped() {
        let long = "v".repeat(5000);
        let output = format!(
            "KB_ST_EDGECORE_PIDS 12 x 34\nKB_ST_EDGECORE /usr/local/bin/edgecore KubeEdge\x1b]0;pwned\x07 {long}\nKB_ST_KEADM {long}\n"
        );
        let status = parse_status(&output);
        assert!(!status.finished);
        assert_eq!(status.edgecore_pids, [12, 34]);
        let version = status.edgecore_version.unwrap();
        assert!(
            version.starts_with("KubeEdge\\x1b]0;pwned\\x07 vvv"),
            "{version}"
        );
        assert!(version.len() < 200, "{version}");
        assert!(status.keadm_version.unwrap().len() < 200);
        assert_eq!(keadm_version("keadm 1.2"), "keadm 1.2");
    }
}
