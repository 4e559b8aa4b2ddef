//! keadm's upgrade family stood in for on a test node, the way keadm v1.23.1 does it
//! (`keadm/cmd/keadm/app/cmd/edge/{upgrade,backup,rollback}.go` and
//! `pkg/upgrade/edge/upgrade_reporter.go`, summarised in docs/kubeedge.md):
//!
//! - `upgrade edge [--toVersion V] [--force]` prints keadm's warning, asks `Are you sure
//!   you want to proceed? [y/N]: ` unless `--force`, and on any answer but `y` logs
//!   `aborted upgrade operation` and exits 0 writing no report. Otherwise it stops
//!   edgecore, installs the new one, starts it, and writes
//!   `{"event":"Upgrade","success":true,"fromVersion":..,"toVersion":..}` to
//!   /etc/kubeedge/upgrade_report.json; a failed image pull writes `success: false` with
//!   keadm's errorMessage and exits 1.
//! - `backup edge` copies edgecore to /etc/kubeedge/backup/<current version>/ (event
//!   Backup); `rollback edge [--historical-version V]` puts a backup back (the newest
//!   without the flag) and starts it (event Rollback).
//!
//! The node's edgecore is a small real executable ([`fake_edgecore`]) whose version is in
//! its own file. As a real edgecore v1.23 does when it starts, it logs klog's
//! `I1202 10:00:00.000000 <pid> server.go:107] Version: <version>` (to
//! /var/log/kubeedge/edgecore.log, the log keadm gives an edgecore it starts without
//! systemd; private to the node) and rewrites edgecore.yaml's `edgecoreVersion`; like the
//! real one it has no `--version`. It lives at /tmp/edge/edgecore in the node's private
//! /tmp and also writes its version to /tmp/edge/running-version, which the stand-in API
//! server reads (`FakeApiServer::edge_node`).
//!
//! Faults, each a file in the node's /tmp: `kb-upgrade-fails` (the image pull fails),
//! `kb-upgrade-hangs` (the image pull hangs for two minutes),
//! `kb-installs` (the upgrade installs the version this file names instead of the
//! target), `kb-backup-fails`, `kb-rollback-fails`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use super::apiserver::FakeApiServer;
use super::edge_state::edge_etc;
use super::fake_keadm::FakeKeadm;
use super::fleet::Node;

/// The stand-in's shell, run by the fake keadm after it recorded its call.
const EDGE_TASKS: &str = r#"kb_edge=/tmp/edge
kb_report() {
  m=
  [ -n "$5" ] && m=$(printf ',"errorMessage":"%s"' "$5")
  printf '{"event":"%s","success":%s,"fromVersion":"%s","toVersion":"%s"%s}' "$1" "$2" "$3" "$4" "$m" > /etc/kubeedge/upgrade_report.json
}
kb_current() { sed -n 's/^edgecoreVersion: *//p' /etc/kubeedge/config/edgecore.yaml 2>/dev/null | head -n 1; }
kb_stop() {
  for p in /proc/[0-9]*; do
    read -r c 2>/dev/null < "$p/comm" || continue
    [ "$c" = edgecore ] && kill "${p#/proc/}" 2>/dev/null
  done
  sleep 0.2
}
kb_start() { setsid "$kb_edge/edgecore" "$kb_edge/running-version" >/dev/null 2>&1 < /dev/null & }
kb_put() { cp "$1" "$kb_edge/edgecore.new" && chmod 755 "$kb_edge/edgecore.new" && mv -f "$kb_edge/edgecore.new" "$kb_edge/edgecore"; }
kb_install() {
  cp "$kb_edge/fake-edgecore" "$kb_edge/built" && printf 'KBVERSION=%s\n' "$1" >> "$kb_edge/built" && kb_put "$kb_edge/built"
}
kb_code=0
kb_task="$1 $2"
[ $# -ge 2 ] && shift 2
case $kb_task in
"upgrade edge")
  to=v1.23.1 force= aborted=
  while [ $# -gt 0 ]; do
    case $1 in
      --toVersion=*) to=${1#*=} ;;
      --toVersion) to=$2; shift ;;
      --force|--force=true) force=1 ;;
    esac
    shift
  done
  echo 'WARNING: The upgrade command no longer automatically execute backup.'
  if [ -z "$force" ]; then
    printf 'Are you sure you want to proceed? [y/N]: '
    IFS= read -r a || a=
    case $a in
      y|Y) ;;
      *) echo 'I1202 10:00:00.000000    1 upgrade.go:65] aborted upgrade operation'; aborted=1 ;;
    esac
  fi
  if [ -z "$aborted" ]; then
    from=$(kb_current)
    [ -n "$from" ] || from=unknown
    echo "I1202 10:00:01.000000    1 upgrade.go:121] Begin to download $to of edgecore"
    # A pull that hangs: keadm has no deadline of its own there.
    [ -e /tmp/kb-upgrade-hangs ] && sleep 120
    if [ -e /tmp/kb-upgrade-fails ]; then
      e="failed to get edgecore binary, err: failed to pull image kubeedge/installation-package:$to, err: rpc error: code = Unknown desc = failed to resolve reference"
      echo "Error: $e" >&2
      kb_report Upgrade false "$from" "$to" "$e"
      kb_code=1
    else
      echo 'I1202 10:00:02.000000    1 upgrade.go:132] Upgrade process start ...'
      kb_stop
      v=$to
      [ -e /tmp/kb-installs ] && v=$(cat /tmp/kb-installs)
      kb_install "$v"
      kb_start
      echo 'I1202 10:00:03.000000    1 upgrade.go:148] Upgrade process successful'
      kb_report Upgrade true "$from" "$to"
    fi
  fi
  ;;
"backup edge")
  from=$(kb_current)
  if [ -z "$from" ] || [ -e /tmp/kb-backup-fails ]; then
    e="cannot get the required current version"
    echo "Error: $e" >&2
    kb_report Backup false "" "$from" "$e"
    kb_code=1
  else
    mkdir -p "/etc/kubeedge/backup/$from" && cp "$kb_edge/edgecore" "/etc/kubeedge/backup/$from/edgecore"
    echo 'I1202 10:00:00.000000    1 backup.go:99] backup process successful'
    kb_report Backup true "" "$from"
  fi
  ;;
"rollback edge")
  hv=
  while [ $# -gt 0 ]; do
    case $1 in
      --historical-version=*) hv=${1#*=} ;;
      --historical-version) hv=$2; shift ;;
    esac
    shift
  done
  from=$(kb_current)
  [ -n "$hv" ] || hv=$(ls -t /etc/kubeedge/backup 2>/dev/null | head -n 1)
  if [ -e /tmp/kb-rollback-fails ] || [ -z "$hv" ] || [ ! -e "/etc/kubeedge/backup/$hv/edgecore" ]; then
    e="no historical version is found in backup dir /etc/kubeedge/backup/"
    echo "Error: $e" >&2
    kb_report Rollback false "$from" "$hv" "$e"
    kb_code=1
  else
    echo 'I1202 10:00:00.000000    1 rollback.go:118] rollback process start ...'
    kb_stop
    kb_put "/etc/kubeedge/backup/$hv/edgecore"
    kb_start
    echo 'I1202 10:00:01.000000    1 rollback.go:137] rollback process successful'
    kb_report Rollback true "$from" "$hv"
  fi
  ;;
esac
echo "$id end $(date +%s.%N) $kb_code" >> "$rec"
exit "$kb_code"
"#;

/// A fake keadm that does the upgrade family as keadm v1.23.1 does.
pub fn keadm() -> FakeKeadm {
    FakeKeadm::new().runs(EDGE_TASKS)
}

/// A small real executable standing in for edgecore, built once per test process with
/// rustc: its version is what follows the last `KBVERSION=` in its own file (appended by
/// whoever installs it); it logs and writes that version as edgecore does (see the module
/// doc), writes it to the path it is given, and sleeps.
pub fn fake_edgecore() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("kb-fake-edgecore-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let source = dir.join("fake_edgecore.rs");
        std::fs::write(
            &source,
            r#"use std::io::Read;
fn main() {
    let mut exe = Vec::new();
    std::fs::File::open("/proc/self/exe").unwrap().read_to_end(&mut exe).unwrap();
    let marker: Vec<u8> = ["KBVER", "SION="].concat().into_bytes();
    let version = exe
        .windows(marker.len())
        .rposition(|w| w == marker.as_slice())
        .map(|at| {
            let rest = &exe[at + marker.len()..];
            let end = rest.iter().position(|b| *b == b'\n').unwrap_or(rest.len());
            String::from_utf8_lossy(&rest[..end]).to_string()
        })
        .unwrap_or_default();
    // As edgecore v1.23 starts: its version logged with its pid, and written into
    // edgecore.yaml; it has no --version.
    let pid = std::process::id();
    let _ = std::fs::create_dir_all("/var/log/kubeedge");
    if let Ok(mut log) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open("/var/log/kubeedge/edgecore.log")
    {
        use std::io::Write;
        let _ = writeln!(log, "I1202 10:00:00.000000    {pid} server.go:107] Version: {version}");
    }
    let config = "/etc/kubeedge/config/edgecore.yaml";
    if let Ok(text) = std::fs::read_to_string(config) {
        let mut kept: String = text
            .lines()
            .filter(|l| !l.starts_with("edgecoreVersion:"))
            .map(|l| format!("{l}\n"))
            .collect();
        kept.push_str(&format!("edgecoreVersion: {version}\n"));
        let _ = std::fs::write(config, kept);
    }
    if let Some(path) = std::env::args().nth(1) {
        let _ = std::fs::write(path, &version);
    }
    loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}
"#,
        )
        .unwrap();
        let out = dir.join("fake-edgecore");
        let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
        let built = Command::new(rustc)
            .args(["--edition", "2021", "-O", "-o"])
            .arg(&out)
            .arg(&source)
            .output()
            .expect("rustc runs");
        assert!(built.status.success(), "rustc: {built:?}");
        out
    })
}

/// Gives `node` an /etc of its own with edgecore's config (its Node name
/// `hostnameOverride: <node_name>`) and starts edgecore `version` from /tmp/edge.
pub fn edgecore_running(node: &Node, node_name: &str, version: &str) {
    edge_etc(node, node_name);
    // A /var/log of the node's own, for edgecore's log.
    node.shell_ok("mkdir -p /tmp/var-log && mount --bind /tmp/var-log /var/log");
    let dir = node.tmp_path("edge");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(fake_edgecore(), dir.join("fake-edgecore")).unwrap();
    node.shell_ok(&format!(
        "cd /tmp/edge && cp fake-edgecore edgecore && printf 'KBVERSION=%s\\n' {version} >> edgecore\n\
         setsid /tmp/edge/edgecore /tmp/edge/running-version >/dev/null 2>&1 < /dev/null &\n\
         for _ in $(seq 200); do [ \"$(cat /tmp/edge/running-version 2>/dev/null)\" = {version} ] && exit 0; sleep 0.02; done; exit 1"
    ));
}

/// The version the node's edgecore said when it last started.
pub fn running_version(node: &Node) -> Option<String> {
    std::fs::read_to_string(node.tmp_path("edge/running-version"))
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// The version the node's running edgecore logged as it started, read on the node as
/// the tool reads it (`none` when no edgecore runs).
pub fn version_on_node(node: &Node) -> String {
    let out = node.shell(
        "for p in /proc/[0-9]*; do read -r c < \"$p/comm\" 2>/dev/null || continue; \
         [ \"$c\" = edgecore ] && { awk -v p=\"${p#/proc/}\" '$3 == p && $5 == \"Version:\" { v = $6 } END { print v }' /var/log/kubeedge/edgecore.log; exit; }; done; echo none",
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Makes a fault on `node` (a file in its private /tmp: `kb-upgrade-fails`, ...).
pub fn fault(node: &Node, name: &str, contents: &str) {
    std::fs::write(node.tmp_path(name), contents).unwrap();
}

/// The node's Node in the stand-in API server, kept as its edgecore would keep it: Ready
/// on the version the node's edgecore last started as, and NotReady while that version
/// is the one a `kb-sick-on-<version>` file in the node's /tmp names.
pub fn node_in_cluster(api: &FakeApiServer, node: &Node, name: &str) {
    let version_file = node.tmp_path("edge/running-version");
    let tmp = node.tmp_path("");
    let read = move |file: &Path| {
        std::fs::read_to_string(file)
            .ok()
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let version = {
        let file = version_file.clone();
        move || read(&file)
    };
    let not_ready =
        move || read(&version_file).is_some_and(|v| tmp.join(format!("kb-sick-on-{v}")).exists());
    api.edge_node(name, version, not_ready);
}
