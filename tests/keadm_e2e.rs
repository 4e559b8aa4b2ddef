//! A real `keadm join`, end to end, when a real keadm is at hand: set `KEADM_E2E_BIN` to
//! a keadm binary (KubeEdge's release, or one built from its source) and run
//! `cargo test --test main keadm_e2e -- --ignored --nocapture`. It is ignored otherwise
//! (there is no keadm to ship with the tests), and fails when asked for without the
//! variable.
//!
//! What is real: keadm, keadm-batch, sshd, containerd and runc (Debian's), and the image
//! import. The node has no registry to reach (its containerd's registries all point at a
//! closed loopback port), so keadm's "Pull Images" passes only because keadm-batch
//! imported the offline directory's archives first, and "Copy resources from the image"
//! runs a real pod sandbox (the pause image) and a real container (the
//! installation-package, busybox-static inside) through runc.
//!
//! What stands in: cloudcore (tests/common/cloudcore.rs, for the keadm releases that ask
//! it whether the node name is free), edgecore (the installation-package's
//! `/usr/local/bin/edgecore` is a script that writes the certificate files keadm join
//! waits for), and systemd (a `systemctl` that starts the unit keadm wrote by its
//! `ExecStart=` line and calls a unit active only once started; the test nodes run no
//! init). Its script is tested on its own, without keadm.
//!
//! The harness keeps every path keadm join writes private to the node: tmpfs mounts in
//! the node's mount namespace over /etc/kubeedge, /var/lib/kubeedge, /var/log/kubeedge,
//! /etc/systemd/system and /run/systemd, and /usr/local/bin bound from a directory in the
//! node's /tmp that containerd, in a mount namespace of its own, binds at the same path,
//! so the edgecore that keadm's container copies to the host path /usr/local/bin lands
//! on the node. Mount points missing on the machine are made empty and removed after.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;

use crate::common::cloudcore::{FakeCloudcore, now, token};
use crate::common::containerd::{Containerd, ENDPOINT, SANDBOX_IMAGE};
use crate::common::fake_release::{ChecksumFile, FakeRelease};
use crate::common::fleet::{Fleet, Node};
use crate::common::image_archive::{EDGECORE, docker_archive, host_arch, oci_archive};
use crate::common::scenario::{Scenario, VERSION};

/// The pause image keadm up to 1.15 pulls besides the installation-package.
const KUBEEDGE_PAUSE: &str = "kubeedge/pause:3.6";

/// The paths keadm join writes, each a tmpfs in the node's mount namespace.
const PRIVATE_DIRS: [&str; 5] = [
    "/etc/kubeedge",
    "/var/lib/kubeedge",
    "/var/log/kubeedge",
    "/etc/systemd/system",
    "/run/systemd",
];

/// The node's systemctl, answering as systemd (252, Debian 12's) would for what keadm and
/// pre-flight ask: `start UNIT` runs the unit's `ExecStart=` in the background and marks
/// it started; `stop` ends that process and, as systemd does, returns only once it has
/// exited (SIGTERM, then SIGKILL after 90 s, `TimeoutStopSec`'s default): keadm's upgrade
/// and rollback copy the new edgecore over /usr/local/bin/edgecore right after the stop,
/// which fails with "text file busy" while the old one still runs. `is-active [--quiet]
/// UNIT` says `active` (0) for a started unit and `inactive` (3) otherwise, so pre-flight
/// sees no edgecore before the join; `enable` and `disable` mark the unit, and
/// `list-unit-files` lists the unit files as systemd 252 does (`edgecore.service enabled
/// enabled`; a disabled one is `disabled enabled`, its PRESET column Debian's), which is
/// how keadm decides to stop edgecore through systemd rather than with `pkill`; anything
/// else (`daemon-reload`) succeeds. A started unit stays active until stopped even when
/// its process has exited: the real edgecore keeps running, its stand-in exits once it has
/// written the certificates. A unit runs in a session of its own, as under
/// systemd, so a real edgecore outlives the SSH session of the keadm that started it
/// (tests/cloud_e2e.rs). Every call is logged to the node's /tmp/systemctl.log.
/// The `KB_SYSTEMCTL_*` variables move its files, for the test of the script itself.
pub(crate) const SYSTEMCTL: &str = r#"#!/bin/sh
# systemctl (test stand-in): the test node runs no init.
units=${KB_SYSTEMCTL_UNITS:-/etc/systemd/system}
run=${KB_SYSTEMCTL_RUN:-/run/systemd}
logs=${KB_SYSTEMCTL_LOGS:-/var/log/kubeedge}
echo "systemctl $*" >> "${KB_SYSTEMCTL_LOG:-/tmp/systemctl.log}"
verb='' unit='' quiet=''
for a in "$@"; do
  case $a in
    -q|--quiet) quiet=1 ;;
    -*) ;;
    *) if [ -z "$verb" ]; then verb=$a; elif [ -z "$unit" ]; then unit=${a%.service}; fi ;;
  esac
done
started="$run/$unit.started"
alive() {
  kill -0 "$1" 2>/dev/null || return 1
  st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)
  [ -n "$st" ] && [ "$st" != Z ]
}
stop() {
  [ -f "$started" ] || return 0
  pid=$(cat "$started")
  rm -f "$started"
  alive "$pid" || return 0
  kill "$pid" 2>/dev/null
  n=0
  while alive "$pid" && [ "$n" -lt 900 ]; do sleep 0.1; n=$((n + 1)); done
  alive "$pid" && kill -9 "$pid" 2>/dev/null
  return 0
}
case $verb in
  start|restart)
    [ "$verb" = restart ] && stop
    exec_start=$(sed -n 's/^ExecStart=//p' "$units/$unit.service" 2>/dev/null)
    [ -n "$exec_start" ] || { echo "no ExecStart in $units/$unit.service" >&2; exit 5; }
    # shellcheck disable=SC2086 # ExecStart= is a command line: split into its words
    setsid $exec_start > "$logs/$unit.log" 2>&1 < /dev/null &
    echo $! > "$started"
    ;;
  stop) stop ;;
  enable) [ -n "$unit" ] && touch "$run/$unit.enabled" ;;
  disable) rm -f "$run/$unit.enabled" ;;
  list-unit-files)
    echo 'UNIT FILE        STATE    PRESET'
    for f in "$units"/*.service; do
      [ -f "$f" ] || continue
      u=${f##*/}
      u=${u%.service}
      s=disabled
      [ -f "$run/$u.enabled" ] && s=enabled
      echo "$u.service $s enabled"
    done
    ;;
  is-active)
    if [ -n "$unit" ] && [ -f "$started" ]; then state=active code=0; else state=inactive code=3; fi
    [ -n "$quiet" ] || echo "$state"
    exit $code
    ;;
esac
exit 0
"#;

/// Removes, when dropped, the empty mount points the test had to make on the machine.
pub(crate) struct MadeMountPoints(pub(crate) Vec<PathBuf>);

impl Drop for MadeMountPoints {
    fn drop(&mut self) {
        for dir in self.0.iter().rev() {
            let _ = fs::remove_dir(dir);
        }
    }
}

/// The release version `keadm version` reports (`GitVersion:"v1.15.4"`): the
/// installation-package tag the test's images carry, and the config's `keadmVersion`.
pub(crate) fn keadm_version(keadm: &std::path::Path) -> String {
    let out = Command::new(keadm).arg("version").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text
        .split("GitVersion:\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_default();
    assert!(
        version.starts_with('v') && !version.starts_with("v0.0.0"),
        "KEADM_E2E_BIN={} reports no release version ({text:?}). Build keadm with its version set (KubeEdge's `make` does).",
        keadm.display()
    );
    version.to_string()
}

/// Whether `keadm join --help` lists `flag`: the test passes only the flags this keadm
/// has (`--with-mqtt` went away in later releases).
fn join_has_flag(keadm: &std::path::Path, flag: &str) -> bool {
    let help = Command::new(keadm)
        .args(["join", "--help"])
        .output()
        .unwrap_or_else(|e| panic!("KEADM_E2E_BIN={}: {e}", keadm.display()));
    String::from_utf8_lossy(&help.stdout).contains(&format!("--{flag}"))
}

#[test]
#[ignore = "needs a real keadm binary: run with --ignored and KEADM_E2E_BIN set (README, Tests)"]
fn a_real_keadm_joins_with_images_only_from_the_offline_directory() {
    let keadm = std::env::var_os("KEADM_E2E_BIN").map(PathBuf::from).expect(
        "KEADM_E2E_BIN is not set. Point it at a real keadm binary to run keadm join end to end.",
    );
    let keadm_bytes =
        fs::read(&keadm).unwrap_or_else(|e| panic!("KEADM_E2E_BIN={}: {e}", keadm.display()));

    let fleet = Fleet::builder().nodes(1).start();
    let node = fleet.node(0);
    let _made = MadeMountPoints(
        PRIVATE_DIRS
            .iter()
            .map(PathBuf::from)
            .filter(|dir| !dir.exists())
            .collect(),
    );
    let usr_local_bin = usr_local_bin_with_systemctl(node);
    let setup = node.shell(&format!(
        "set -e
         for d in {dirs}; do mkdir -p $d; mount -t tmpfs keadm-e2e $d; done
         mkdir /run/systemd/system
         mount --bind /tmp/usr-local-bin /usr/local/bin",
        dirs = PRIVATE_DIRS.join(" ")
    ));
    assert!(setup.status.success(), "node setup: {setup:?}");
    let runtime = Containerd::start_sharing(node, &[(&usr_local_bin, "/usr/local/bin")]);
    let cloudcore = FakeCloudcore::start();

    let version = keadm_version(&keadm);
    let mut cmd = format!(
        "join --cloudcore-ipport=127.0.0.1:{hub} --certport={port} --edgenode-name={{name}} --token={token} --kubeedge-version={version} --remote-runtime-endpoint={ENDPOINT}",
        // Pre-flight connects to both of cloudcore's ports from the node: the stand-in
        // serves the certificate port, and the hub's port only has to answer.
        hub = crate::common::fleet::closing_port(),
        port = cloudcore.port,
        token = token(&cloudcore.ca_hash(), now() + 3600),
    );
    if join_has_flag(&keadm, "with-mqtt") {
        // keadm up to 1.15 also pulls eclipse-mosquitto unless told not to.
        cmd.push_str(" --with-mqtt=false");
    }
    let sc = Scenario::new(&fleet)
        .cmd(&cmd)
        .arch_group(&format!("[{}]", host_arch()))
        .node_yaml("timeoutSeconds: 600")
        .preflight("warn");
    // The config names the real keadm's version, which the pre-flight image check uses.
    fs::write(
        sc.path("config.yaml"),
        sc.config_text().replace(
            &format!("keadmVersion: {VERSION}"),
            &format!("keadmVersion: {version}"),
        ),
    )
    .unwrap();
    FakeRelease::new(&version, host_arch())
        .with_binary(&keadm_bytes)
        .write_offline(&sc.path("packages"), ChecksumFile::Matching);
    let images = sc.path("packages").join(host_arch()).join("images");
    docker_archive(
        &images.join(format!("installation-package_{version}.tar")),
        &format!("kubeedge/installation-package:{version}"),
    );
    oci_archive(&images.join("pause_3.6.tar"), SANDBOX_IMAGE);
    // keadm up to 1.15 also asks for its own pause image (`EdgeSet`'s third-party set);
    // later ones never look at it. Pre-flight knows which this keadm asks for: without
    // the archive, it names the image, and that is its only finding (exit 1); a later
    // keadm's node has none (exit 0). A probe that failed prints no table (exit 3, say),
    // so the status is checked before what it printed.
    let probe = sc.run(&["--preflight-only"]);
    let minor: u32 = version
        .split('.')
        .nth(1)
        .and_then(|m| m.parse().ok())
        .unwrap();
    probe.status(if minor <= 15 { 1 } else { 0 });
    let extra_missing = probe
        .stdout
        .contains("docker.io/kubeedge/pause:3.6 is not in containerd");
    assert_eq!(
        extra_missing,
        minor <= 15,
        "pre-flight on keadm's own images:\n{}",
        probe.stdout
    );
    assert!(
        !probe.stdout.contains("edgecore is already running"),
        "{}",
        probe.stdout
    );
    docker_archive(&images.join("kubeedge-pause_3.6.tar"), KUBEEDGE_PAUSE);
    // With every archive there, pre-flight finds nothing on the node.
    let probe = sc.run(&["--preflight-only"]);
    probe.status(0);
    assert!(
        probe
            .stdout
            .lines()
            .any(|l| l.starts_with("edge-00 ") && l.trim_end().ends_with(" none")),
        "{}",
        probe.stdout
    );

    let out = sc.run(&[]);
    let transcript = out.transcript(0);
    let tail: Vec<&str> = transcript.lines().rev().take(20).collect();
    eprintln!(
        "keadm_e2e: the transcript's last lines:\n{}",
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    );
    assert_eq!(
        out.code(),
        0,
        "keadm-batch failed.\n{transcript}\ncontainerd:\n{}\nsystemctl calls: {:?}",
        runtime.log(),
        fs::read_to_string(node.tmp_path("systemctl.log"))
    );
    // Imported by keadm-batch, before keadm ran; found by keadm, never pulled.
    let package = format!("docker.io/kubeedge/installation-package:{version}");
    runtime.assert_has(&[&package, SANDBOX_IMAGE]);
    // keadm-batch's pre-flight knew which images this keadm asks for, and saw them all
    // provided by the offline directory; it found nothing else either (under warn a
    // finding is a console warning: `edge-00: pre-flight: ...`).
    assert!(!transcript.contains("image_missing"), "{transcript}");
    out.stderr_lacks(": pre-flight: ");
    assert!(
        !out.log_lines().iter().any(|l| l.contains("pre-flight")),
        "{:?}",
        out.log_lines()
    );
    let imported = transcript.find("imported installation-package_");
    let pulled = transcript.find("Pull Images");
    let copied = transcript.find("Copy resources from the image to the management directory");
    assert!(
        imported.is_some() && pulled > imported && copied > pulled,
        "keadm's steps are not all there, or not after the import:\n{transcript}"
    );
    assert!(!transcript.contains("pull Images failed"), "{transcript}");
    // The container keadm ran copied edgecore out of the image onto the node, and the
    // unit keadm wrote started it.
    assert_eq!(fs::read(usr_local_bin.join("edgecore")).unwrap(), EDGECORE);
    let unit = node.shell("cat /etc/systemd/system/edgecore.service");
    assert!(
        String::from_utf8_lossy(&unit.stdout).contains("ExecStart=/usr/local/bin/edgecore"),
        "{unit:?}"
    );
    let certs = node.shell("cat /etc/kubeedge/certs/server.crt");
    assert!(
        String::from_utf8_lossy(&certs.stdout).contains("edgecore stand-in"),
        "edgecore did not run: {certs:?}"
    );
}

/// Runs the stand-in systemctl with `args`, its files under `dir`; returns the exit code
/// and what it printed.
fn stand_in_systemctl(dir: &std::path::Path, args: &[&str]) -> (i32, String) {
    let script = dir.join("systemctl");
    if !script.exists() {
        fs::write(&script, SYSTEMCTL).unwrap();
        fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    }
    let out = Command::new(&script)
        .args(args)
        .env("KB_SYSTEMCTL_UNITS", dir)
        .env("KB_SYSTEMCTL_RUN", dir)
        .env("KB_SYSTEMCTL_LOGS", dir)
        .env("KB_SYSTEMCTL_LOG", dir.join("calls.log"))
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// The stand-in systemctl answers as systemd would, so pre-flight (which asks
/// `systemctl is-active --quiet edgecore`) sees no edgecore before the join: inactive
/// (3) until started, active (0) from `start` to `stop`. Runs without a real keadm.
#[test]
fn the_stand_in_systemctl_says_a_unit_is_active_only_once_started() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    assert_eq!(
        stand_in_systemctl(dir, &["is-active", "--quiet", "edgecore"]),
        (3, String::new()),
        "before the join"
    );
    assert_eq!(
        stand_in_systemctl(dir, &["is-active", "edgecore.service"]),
        (3, "inactive\n".into())
    );
    fs::write(
        dir.join("edgecore.service"),
        format!(
            "[Service]\nExecStart=/usr/bin/touch {}\n",
            dir.join("started").display()
        ),
    )
    .unwrap();
    assert_eq!(stand_in_systemctl(dir, &["daemon-reload"]).0, 0);
    assert_eq!(stand_in_systemctl(dir, &["enable", "edgecore"]).0, 0);
    assert_eq!(
        stand_in_systemctl(dir, &["is-active", "--quiet", "edgecore"]).0,
        3,
        "enabled is not started"
    );
    assert_eq!(stand_in_systemctl(dir, &["start", "edgecore"]).0, 0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !dir.join("started").exists() {
        assert!(std::time::Instant::now() < deadline, "ExecStart never ran");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(
        stand_in_systemctl(dir, &["is-active", "edgecore"]),
        (0, "active\n".into())
    );
    assert_eq!(stand_in_systemctl(dir, &["stop", "edgecore"]).0, 0);
    assert_eq!(
        stand_in_systemctl(dir, &["is-active", "--quiet", "edgecore"]).0,
        3
    );
    // A unit without ExecStart cannot start.
    fs::write(dir.join("other.service"), "[Service]\n").unwrap();
    assert_eq!(stand_in_systemctl(dir, &["start", "other"]).0, 5);
    let calls = fs::read_to_string(dir.join("calls.log")).unwrap();
    assert!(
        calls.starts_with("systemctl is-active --quiet edgecore\n"),
        "{calls}"
    );
}

/// What keadm's upgrade and rollback need of systemd: `stop` returns once the unit's
/// process has exited (keadm then writes over its executable), and `list-unit-files`
/// shows the unit the way keadm greps it (`| grep enabled | grep edgecore`), enabled or
/// not, as systemd 252 prints it.
#[test]
fn the_stand_in_systemctl_stops_as_systemd_does_and_lists_its_units() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    // A service that takes a second to exit once told to, as edgecore takes its time.
    let service = dir.join("slow-exit");
    fs::write(
        &service,
        "#!/bin/sh\ntrap 'sleep 1; exit 0' TERM\nwhile :; do sleep 0.1; done\n",
    )
    .unwrap();
    fs::set_permissions(&service, fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(
        dir.join("edgecore.service"),
        format!("[Service]\nExecStart={}\n", service.display()),
    )
    .unwrap();
    assert_eq!(stand_in_systemctl(dir, &["enable", "edgecore"]).0, 0);
    assert_eq!(
        stand_in_systemctl(dir, &["list-unit-files"]),
        (
            0,
            "UNIT FILE        STATE    PRESET\nedgecore.service enabled enabled\n".into()
        )
    );
    assert_eq!(stand_in_systemctl(dir, &["start", "edgecore"]).0, 0);
    let pid: i32 = fs::read_to_string(dir.join("edgecore.started"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let running = |pid: i32| {
        fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            !stat
                .rsplit_once(") ")
                .is_some_and(|(_, s)| s.starts_with('Z'))
        })
    };
    assert!(running(pid), "the unit's process does not run");
    assert_eq!(stand_in_systemctl(dir, &["stop", "edgecore.service"]).0, 0);
    assert!(!running(pid), "stop returned while {pid} still runs");
    assert_eq!(
        stand_in_systemctl(dir, &["disable", "edgecore.service"]).0,
        0
    );
    assert_eq!(
        stand_in_systemctl(dir, &["list-unit-files"]).1,
        "UNIT FILE        STATE    PRESET\nedgecore.service disabled enabled\n"
    );
    // Stopping a unit that is not running succeeds, as systemd's does.
    assert_eq!(stand_in_systemctl(dir, &["stop", "edgecore"]).0, 0);
}

/// The node's /usr/local/bin (a directory in its /tmp) holding the stand-in systemctl.
pub(crate) fn usr_local_bin_with_systemctl(node: &Node) -> PathBuf {
    let usr_local_bin = node.tmp_path("usr-local-bin");
    fs::create_dir_all(&usr_local_bin).unwrap();
    fs::write(usr_local_bin.join("systemctl"), SYSTEMCTL).unwrap();
    fs::set_permissions(
        usr_local_bin.join("systemctl"),
        fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    usr_local_bin
}
