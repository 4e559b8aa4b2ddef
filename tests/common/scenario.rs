//! End-to-end scenarios: a fleet of real sshd nodes, an offline keadm release whose
//! `keadm` is a fake script, a config pointing at the nodes, and the keadm-batch binary
//! run against them in a scratch directory.
//!
//! ```ignore
//! let fleet = Fleet::builder().nodes(3).start();
//! let sc = Scenario::new(&fleet).keadm(FakeKeadm::new().prints("joined"));
//! sc.run(&[]).status(0);           // writes config.yaml and runs `batch -c config.yaml`
//! ```

use std::path::PathBuf;

use super::fake_keadm::FakeKeadm;
use super::fake_release::{ChecksumFile, FakeRelease};
use super::fleet::{Fleet, Node, TEST_USER};
use super::test::{Output, Test};

pub const VERSION: &str = "v1.23.1";

/// How a node in the generated config logs in.
#[derive(Clone, Debug)]
pub enum Login {
    Password(String),
    Key(PathBuf),
    KeyWithPassphrase(PathBuf, String),
    Agent,
}

pub struct Scenario<'f> {
    pub fleet: &'f Fleet,
    pub dir: tempfile::TempDir,
    pub keadm: FakeKeadm,
    pub login: Login,
    /// Extra YAML lines for every node (indented 4 spaces), e.g. `"timeoutSeconds: 2"`.
    pub node_extra: Vec<String>,
    /// Extra top-level YAML lines.
    pub top_extra: Vec<String>,
    pub keadm_cmd: String,
    pub max_run_num: usize,
    /// Which fleet nodes are in the config (all by default).
    pub nodes: Option<Vec<usize>>,
    pub arch_group: String,
    /// Extra YAML lines for one node (fleet index → lines).
    pub node_extra_for: std::collections::HashMap<usize, Vec<String>>,
    /// Nodes whose config points somewhere else than their sshd (a tarpit, say).
    pub endpoint_for: std::collections::HashMap<usize, keadm_batch::transport::Endpoint>,
    pub username: String,
    /// Extra YAML lines under each node's `ssh:` (indented 6 spaces), e.g. `"sudo: false"`.
    pub ssh_extra: Vec<String>,
    /// `--preflight` mode; off unless a test asks, so runs stay one concern each (and no
    /// test ever asks the config's cloudcore address anything).
    pub preflight: String,
    /// Extra YAML lines under `keadm:` (indented 2 spaces), e.g. `"offlineImages: {}"`.
    pub keadm_extra: Vec<String>,
    /// Fleet nodes whose keadmCmd is another than [`Scenario::keadm_cmd`].
    pub keadm_cmd_for: std::collections::HashMap<usize, String>,
    /// `--staging-dir`, when not the scenario's own `staging/`.
    pub staging: Option<PathBuf>,
    /// `keadmVersion` ([`VERSION`] unless a test runs another release's keadm).
    pub keadm_version: String,
}

impl<'f> Scenario<'f> {
    pub fn new(fleet: &'f Fleet) -> Scenario<'f> {
        let dir = tempfile::Builder::new()
            .prefix("keadm-batch-run")
            .tempdir_in("/var/tmp")
            .unwrap();
        Scenario {
            fleet,
            dir,
            keadm: FakeKeadm::new(),
            login: Login::Password(fleet.root_password().expose().to_string()),
            node_extra: Vec::new(),
            top_extra: Vec::new(),
            node_extra_for: Default::default(),
            endpoint_for: Default::default(),
            keadm_cmd:
                "join --cloudcore-ipport=127.0.0.1:10000 --edgenode-name={name} --token=abc.def"
                    .into(),
            max_run_num: 5,
            nodes: None,
            arch_group: "[amd64]".into(),
            username: "root".into(),
            ssh_extra: Vec::new(),
            preflight: "off".into(),
            keadm_extra: Vec::new(),
            keadm_cmd_for: Default::default(),
            staging: None,
            keadm_version: VERSION.into(),
        }
    }

    /// The config's `keadmVersion` (a test that writes its own packages for it).
    pub fn keadm_version(mut self, version: &str) -> Self {
        self.keadm_version = version.to_string();
        self
    }

    /// An extra line under `keadm:`.
    pub fn keadm_yaml(mut self, line: &str) -> Self {
        self.keadm_extra.push(line.to_string());
        self
    }

    /// Fleet node `i`'s keadmCmd (`{name}` is its node name).
    pub fn cmd_for(mut self, i: usize, cmd: &str) -> Self {
        self.keadm_cmd_for.insert(i, cmd.to_string());
        self
    }

    /// The offline directory's image archives for this machine's arch
    /// (`packages/<arch>/images`), where a test puts the archives it writes; the packages
    /// are written first.
    pub fn images_dir(&self) -> PathBuf {
        self.packages_dir()
            .join(super::image_archive::host_arch())
            .join("images")
    }

    /// The offline directory (`keadm.offlinePackageDir`), its packages written.
    pub fn packages_dir(&self) -> PathBuf {
        self.ensure_packages();
        self.path("packages")
    }

    pub fn preflight(mut self, mode: &str) -> Self {
        self.preflight = mode.to_string();
        self
    }

    pub fn ssh_yaml(mut self, line: &str) -> Self {
        self.ssh_extra.push(line.to_string());
        self
    }

    /// Logs in as the fleet's non-root [`TEST_USER`] instead of root.
    pub fn login_as_test_user(mut self, login: Login) -> Self {
        self.username = TEST_USER.to_string();
        self.login = login;
        self
    }

    pub fn arch_group(mut self, group: &str) -> Self {
        self.arch_group = group.to_string();
        self
    }

    pub fn keadm(mut self, fake: FakeKeadm) -> Self {
        self.keadm = fake;
        self
    }

    pub fn login(mut self, login: Login) -> Self {
        self.login = login;
        self
    }

    pub fn cmd(mut self, cmd: &str) -> Self {
        self.keadm_cmd = cmd.to_string();
        self
    }

    pub fn node_yaml(mut self, line: &str) -> Self {
        self.node_extra.push(line.to_string());
        self
    }

    /// An extra YAML line for fleet node `i` only.
    pub fn node_yaml_for(mut self, i: usize, line: &str) -> Self {
        self.node_extra_for
            .entry(i)
            .or_default()
            .push(line.to_string());
        self
    }

    /// Points fleet node `i`'s config entry at `endpoint` instead of its sshd.
    pub fn endpoint_for(mut self, i: usize, endpoint: keadm_batch::transport::Endpoint) -> Self {
        self.endpoint_for.insert(i, endpoint);
        self
    }

    pub fn top_yaml(mut self, line: &str) -> Self {
        self.top_extra.push(line.to_string());
        self
    }

    pub fn max_run_num(mut self, n: usize) -> Self {
        self.max_run_num = n;
        self
    }

    pub fn only_nodes(mut self, nodes: &[usize]) -> Self {
        self.nodes = Some(nodes.to_vec());
        self
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn staging_dir(&self) -> PathBuf {
        self.staging.clone().unwrap_or_else(|| self.path("staging"))
    }

    /// Stages into `dir` instead of the scenario's own directory: runs of several
    /// scenarios then stage a real keadm (and make its xz copy) once.
    pub fn staging_in(mut self, dir: &std::path::Path) -> Self {
        self.staging = Some(dir.to_path_buf());
        self
    }

    /// The node name used for fleet node `i`.
    pub fn name(i: usize) -> String {
        format!("edge-{i:02}")
    }

    /// Writes the offline packages unless `packages/` exists: a test may have written its
    /// own, or removed one on purpose.
    fn ensure_packages(&self) {
        if !self.path("packages").exists() {
            self.write_packages();
        }
    }

    /// Writes the offline packages (every arch) with the fake keadm inside.
    fn write_packages(&self) {
        for arch in ["amd64", "arm64", "arm"] {
            // A comment names the arch, so a test can tell which build a node received.
            let script = format!("{}# arch={arch}\n", self.keadm.script());
            FakeRelease::new(VERSION, arch)
                .with_binary(script.as_bytes())
                .write_offline(&self.path("packages"), ChecksumFile::Matching);
        }
    }

    fn auth_yaml(&self) -> String {
        match &self.login {
            Login::Password(pw) => format!(
                "auth:\n        type: password\n        passwordAuth:\n          password: '{pw}'"
            ),
            Login::Key(path) => format!(
                "auth:\n        type: privateKey\n        privateKeyAuth:\n          privateKeyPath: {}",
                path.display()
            ),
            Login::KeyWithPassphrase(path, pass) => format!(
                "auth:\n        type: privateKey\n        privateKeyAuth:\n          privateKeyPath: {}\n          passphrase: '{pass}'",
                path.display()
            ),
            Login::Agent => "auth:\n        type: agent".to_string(),
        }
    }

    pub fn node_block(&self, i: usize, node: &Node) -> String {
        let name = Scenario::name(i);
        let (host, port) = match self.endpoint_for.get(&i) {
            Some(e) => (e.host.as_str(), e.port),
            None => (node.host(), node.port()),
        };
        let cmd = self.keadm_cmd_for.get(&i).unwrap_or(&self.keadm_cmd);
        let mut s = format!(
            "  - nodeName: {name}\n    keadmCmd: '{}'\n    ssh:\n      ip: '{}'\n      port: {}\n      username: {}\n      {}\n",
            cmd.replace("{name}", &name),
            host,
            port,
            self.username,
            self.auth_yaml()
        );
        for extra in &self.ssh_extra {
            s.push_str(&format!("      {extra}\n"));
        }
        // Per-node lines first: one indented two more (`"  connectTimeoutSeconds: 1"`)
        // then still belongs to the ssh block above.
        for extra in self
            .node_extra_for
            .get(&i)
            .into_iter()
            .flatten()
            .chain(&self.node_extra)
        {
            s.push_str(&format!("    {extra}\n"));
        }
        s
    }

    pub fn config_text(&self) -> String {
        let mut s = format!(
            "keadm:\n  download:\n    enable: false\n  keadmVersion: {}\n  archGroup: {}\n  offlinePackageDir: {}\nmaxRunNum: {}\n",
            self.keadm_version,
            self.arch_group,
            self.path("packages").display(),
            self.max_run_num
        );
        let at = s.find("maxRunNum:").unwrap();
        let keadm_lines: String = self
            .keadm_extra
            .iter()
            .map(|l| format!("  {l}\n"))
            .collect();
        s.insert_str(at, &keadm_lines);
        for extra in &self.top_extra {
            s.push_str(extra);
            s.push('\n');
        }
        s.push_str("nodes:\n");
        let picked: Vec<usize> = self
            .nodes
            .clone()
            .unwrap_or_else(|| (0..self.fleet.nodes().len()).collect());
        for i in picked {
            s.push_str(&self.node_block(i, self.fleet.node(i)));
        }
        s
    }

    /// Writes config and packages (if absent) and returns the launch of
    /// `batch -c config.yaml` against the fleet, with `extra` arguments.
    pub fn command(&self, extra: &[&str]) -> Test {
        self.ensure_packages();
        let config = self.path("config.yaml");
        if !config.exists() {
            std::fs::write(&config, self.config_text()).unwrap();
        }
        Test::in_dir(self.dir.path())
            .env("HOME", self.dir.path())
            .args(["batch", "-c", "config.yaml", "--known-hosts"])
            .arg(self.fleet.known_hosts())
            .arg("--staging-dir")
            .arg(self.staging_dir())
            .arg("--preflight")
            .arg(&self.preflight)
            .args(extra)
    }

    pub fn run(&self, extra: &[&str]) -> Output {
        self.command(extra).run()
    }
}

/// What a batch run leaves in its directory.
impl Output {
    /// `batch_process_log.txt`, as lines.
    pub fn log_lines(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("batch_process_log.txt"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    pub fn log_has(&self, line: &str) -> &Self {
        let lines = self.log_lines();
        assert!(
            lines.iter().any(|l| l == line),
            "log lacks {line:?}:\n{}\n--- stderr:\n{}",
            lines.join("\n"),
            self.stderr
        );
        self
    }

    pub fn log_line_starting(&self, prefix: &str) -> String {
        let lines = self.log_lines();
        lines
            .iter()
            .find(|l| l.starts_with(prefix))
            .cloned()
            .unwrap_or_else(|| {
                panic!(
                    "no log line starts with {prefix:?}:\n{}\n--- stderr:\n{}",
                    lines.join("\n"),
                    self.stderr
                )
            })
    }

    /// `--preflight-only` found nothing: its table has a row whose findings are `none`.
    pub fn preflight_found_nothing(&self) -> &Self {
        assert!(
            self.stdout.lines().any(|l| l.ends_with("none")),
            "{}",
            self.stdout
        );
        self
    }

    pub fn latest_run(&self) -> PathBuf {
        self.dir.join("batch_runs").join("latest")
    }

    pub fn transcript(&self, i: usize) -> String {
        self.transcript_if_any(i)
            .unwrap_or_else(|(path, e)| panic!("{}: {e}", path.display()))
    }

    /// Fleet node `i`'s transcript, or its path and why it cannot be read (a node a
    /// stopped rollout never started has none).
    pub fn transcript_if_any(&self, i: usize) -> Result<String, (PathBuf, std::io::Error)> {
        let path =
            self.latest_run()
                .join("nodes")
                .join(format!("{}-{}.log", i + 1, Scenario::name(i)));
        std::fs::read_to_string(&path).map_err(|e| (path, e))
    }

    pub fn summary(&self) -> serde_json::Value {
        let text = std::fs::read_to_string(self.latest_run().join("summary.json")).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    /// Fleet node `i`'s entry in summary.json, found by its name.
    pub fn node_summary(&self, i: usize) -> serde_json::Value {
        let name = Scenario::name(i);
        self.summary()["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == name.as_str())
            .unwrap_or_else(|| panic!("{name} not in the summary"))
            .clone()
    }
}

/// The path of keadm in a node's default remote dir.
pub fn remote_keadm(node: &Node) -> PathBuf {
    node.tmp_path("kubeedge/keadm/keadm")
}
