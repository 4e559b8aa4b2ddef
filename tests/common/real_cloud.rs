//! A real KubeEdge cloud on loopback, for the end-to-end test against real binaries
//! (tests/cloud_e2e.rs): etcd, kube-apiserver and cloudcore, each started by the test
//! from binaries built outside the repository, on free ports of 127.0.0.1, with a PKI
//! the harness makes with the `openssl` command.
//!
//! ```ignore
//! let bins = CloudBinaries::from_env().expect("KECLOUD_BIN is not set"); // an #[ignore] test
//! let cloud = RealCloud::start(&bins);
//! // keadmCmd: join --cloudcore-ipport=127.0.0.1:{cloud.hub_port} --certport={cloud.cert_port} --token={cloud.token()}
//! let nodes = cloud.nodes();                                     // `kubectl get nodes -o json`'s items
//! ```
//!
//! `KECLOUD_BIN` is a directory holding `etcd`, `kube-apiserver`, `kubectl`, `cloudcore`,
//! `keadm` and `edgecore`; `KECLOUD_CRDS` is KubeEdge's `build/crds` directory of the same
//! release as cloudcore (what `keadm init` would install). A variable that is set but
//! names something missing fails the test, and so does an unset one: the tests that use
//! them are `#[ignore]`d, run only with `--ignored`.
//!
//! `KECLOUD_OLD_BIN` is a directory holding `keadm` and `edgecore` of an older release than
//! `KECLOUD_BIN`'s (built the same way), for the upgrade test (tests/cloud_upgrade_e2e.rs):
//! its nodes join at the older release and are upgraded to `KECLOUD_BIN`'s. Unset, or set
//! to a place without them, that test fails.
//!
//! What the cloud is: kube-apiserver with `Node,RBAC` authorization, its serving
//! certificate for 127.0.0.1, an admin client certificate (`system:masters`) in the
//! kubeconfig the tool is given; the `kubeedge` namespace and KubeEdge's CRDs;
//! cloudcore with cloudhub's websocket and certificate ports, its unix socket and its
//! monitor server on loopback, and iptablesManager, cloudStream and router off (nothing
//! of the machine's own network is touched). There is no controller-manager: nothing
//! marks a silent node NotReady, and nothing deletes a Node but the tool.
//!
//! Dropping it stops what it started, by pid, and removes its directory.

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long each of etcd, kube-apiserver and cloudcore may take to answer after it was
/// started (on a busy 2-core machine kube-apiserver takes about 20 s).
const START_TIMEOUT: Duration = Duration::from_secs(180);

/// The binaries the real cloud and its edge nodes are made of.
pub struct CloudBinaries {
    dir: PathBuf,
    pub crds: PathBuf,
}

impl CloudBinaries {
    /// The binaries `KECLOUD_BIN` and `KECLOUD_CRDS` name; `None` when `KECLOUD_BIN` is
    /// unset. Fails the test, naming what is missing, when either names an incomplete
    /// place.
    pub fn from_env() -> Option<CloudBinaries> {
        let dir = PathBuf::from(std::env::var_os("KECLOUD_BIN")?);
        let crds = std::env::var_os("KECLOUD_CRDS").map(PathBuf::from).unwrap_or_else(|| {
            panic!("KECLOUD_BIN is set but KECLOUD_CRDS is not: point it at KubeEdge's build/crds directory (the release cloudcore was built from).")
        });
        assert!(
            crds.join("devices").is_dir(),
            "KECLOUD_CRDS={} has no devices/ directory: it must be KubeEdge's build/crds.",
            crds.display()
        );
        let bins = CloudBinaries { dir, crds };
        for name in [
            "etcd",
            "kube-apiserver",
            "kubectl",
            "cloudcore",
            "keadm",
            "edgecore",
        ] {
            bins.path(name);
        }
        Some(bins)
    }

    /// `KECLOUD_BIN/name`, which must be a file.
    pub fn path(&self, name: &str) -> PathBuf {
        file_in("KECLOUD_BIN", &self.dir, name)
    }

    /// `KECLOUD_BIN`'s keadm and edgecore, the release the cloud's nodes join at (or are
    /// upgraded to).
    pub fn release(&self) -> Release {
        Release {
            var: "KECLOUD_BIN",
            dir: self.dir.clone(),
        }
    }
}

/// keadm and edgecore of one KubeEdge release, in one directory.
pub struct Release {
    /// The variable that named the directory, for messages.
    var: &'static str,
    dir: PathBuf,
}

impl Release {
    /// The older release `KECLOUD_OLD_BIN` names; `None` when it is unset. Fails the test
    /// when the directory lacks keadm or edgecore.
    pub fn old_from_env() -> Option<Release> {
        let release = Release {
            var: "KECLOUD_OLD_BIN",
            dir: PathBuf::from(std::env::var_os("KECLOUD_OLD_BIN")?),
        };
        release.keadm();
        release.edgecore();
        Some(release)
    }

    pub fn keadm(&self) -> PathBuf {
        file_in(self.var, &self.dir, "keadm")
    }

    pub fn edgecore(&self) -> PathBuf {
        file_in(self.var, &self.dir, "edgecore")
    }
}

/// `dir/name`, which must be a file; `var` named `dir`.
fn file_in(var: &str, dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    assert!(
        path.is_file(),
        "{var}={} has no {name}: build it (or link it) there.",
        dir.display()
    );
    path
}

/// A free TCP port on 127.0.0.1 (bound and let go: nothing else here takes ports from
/// the kernel's ephemeral range in between).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs `command`, failing the test with its output unless it succeeds.
fn run_ok(what: &str, command: &mut Command) -> Output {
    let out = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The PKI of the cloud, under `dir`: a CA, kube-apiserver's serving certificate for
/// 127.0.0.1, an admin client certificate in group `system:masters`, the service-account
/// key pair.
fn make_pki(dir: &Path) {
    let openssl = |what: &str, args: &[&str]| {
        run_ok(what, Command::new("openssl").current_dir(dir).args(args));
    };
    openssl("the CA key", &["genrsa", "-out", "ca.key", "2048"]);
    openssl(
        "the CA",
        &[
            "req",
            "-x509",
            "-new",
            "-key",
            "ca.key",
            "-days",
            "2",
            "-subj",
            "/CN=cloud-e2e-ca",
            "-out",
            "ca.crt",
        ],
    );
    openssl(
        "the service-account key",
        &["genrsa", "-out", "sa.key", "2048"],
    );
    openssl(
        "the service-account public key",
        &["rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"],
    );
    for (name, subject, ext) in [
        (
            "apiserver",
            "/CN=kube-apiserver",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
        ),
        (
            "admin",
            "/O=system:masters/CN=cloud-e2e-admin",
            "extendedKeyUsage=clientAuth\n",
        ),
    ] {
        fs::write(dir.join(format!("{name}.ext")), ext).unwrap();
        let (key, csr, crt, ext) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.crt"),
            format!("{name}.ext"),
        );
        openssl(name, &["genrsa", "-out", &key, "2048"]);
        openssl(
            name,
            &["req", "-new", "-key", &key, "-subj", subject, "-out", &csr],
        );
        openssl(
            name,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &ext,
                "-out",
                &crt,
            ],
        );
    }
}

pub struct RealCloud {
    dir: tempfile::TempDir,
    /// Started in this order; stopped in the reverse one.
    processes: Vec<(&'static str, Child)>,
    kubectl: PathBuf,
    /// The admin's kubeconfig (client certificate, `system:masters`).
    pub kubeconfig: PathBuf,
    /// cloudhub's websocket port (`--cloudcore-ipport`).
    pub hub_port: u16,
    /// cloudhub's certificate port (`--certport`).
    pub cert_port: u16,
}

impl RealCloud {
    /// Starts etcd, kube-apiserver and cloudcore, and waits until cloudcore has written
    /// the join token.
    pub fn start(bins: &CloudBinaries) -> RealCloud {
        RealCloud::start_with(bins, None)
    }

    /// [`RealCloud::start`] with cloudhub's `nodeLimit` set (`None`: cloudcore's default).
    pub fn start_with(bins: &CloudBinaries, node_limit: Option<u32>) -> RealCloud {
        let dir = tempfile::Builder::new()
            .prefix("cloud-e2e-")
            .tempdir_in("/var/tmp")
            .unwrap();
        let pki = dir.path().join("pki");
        fs::create_dir_all(&pki).unwrap();
        make_pki(&pki);
        let api_port = free_port();
        let kubeconfig = dir.path().join("admin.kubeconfig");
        fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\n\
                 clusters:\n- name: cloud-e2e\n  cluster: {{server: 'https://127.0.0.1:{api_port}', certificate-authority: '{p}/ca.crt'}}\n\
                 users:\n- name: admin\n  user: {{client-certificate: '{p}/admin.crt', client-key: '{p}/admin.key'}}\n\
                 contexts:\n- name: cloud-e2e\n  context: {{cluster: cloud-e2e, user: admin}}\n\
                 current-context: cloud-e2e\n",
                p = pki.display()
            ),
        )
        .unwrap();
        let mut cloud = RealCloud {
            kubectl: bins.path("kubectl"),
            kubeconfig,
            hub_port: free_port(),
            cert_port: free_port(),
            processes: Vec::new(),
            dir,
        };
        let (etcd_port, peer_port, metrics_port) = (free_port(), free_port(), free_port());
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let data = cloud.path("etcd");
        cloud.spawn(
            "etcd",
            Command::new(bins.path("etcd"))
                .arg("--name=cloud-e2e")
                .arg(format!("--data-dir={}", data.display()))
                .arg(format!("--listen-client-urls={etcd_url}"))
                .arg(format!("--advertise-client-urls={etcd_url}"))
                .arg(format!("--listen-peer-urls={peer_url}"))
                .arg(format!("--initial-advertise-peer-urls={peer_url}"))
                .arg(format!("--initial-cluster=cloud-e2e={peer_url}"))
                .arg(format!(
                    "--listen-metrics-urls=http://127.0.0.1:{metrics_port}"
                )),
        );
        let p = |f: &str| pki.join(f).display().to_string();
        cloud.spawn(
            "kube-apiserver",
            Command::new(bins.path("kube-apiserver"))
                .arg(format!("--etcd-servers={etcd_url}"))
                .args([
                    "--bind-address=127.0.0.1",
                    "--advertise-address=127.0.0.1",
                    "--endpoint-reconciler-type=none",
                    "--authorization-mode=Node,RBAC",
                    "--service-cluster-ip-range=198.19.96.0/24",
                    "--service-account-issuer=https://kubernetes.default.svc",
                    "--profiling=false",
                ])
                .arg(format!("--secure-port={api_port}"))
                .arg(format!("--tls-cert-file={}", p("apiserver.crt")))
                .arg(format!("--tls-private-key-file={}", p("apiserver.key")))
                .arg(format!("--client-ca-file={}", p("ca.crt")))
                .arg(format!("--service-account-key-file={}", p("sa.pub")))
                .arg(format!(
                    "--service-account-signing-key-file={}",
                    p("sa.key")
                )),
        );
        cloud.wait_for("kube-apiserver", |cloud| {
            cloud.kubectl(&["get", "--raw", "/readyz"]).status.success()
        });
        cloud.kubectl_ok(&["create", "namespace", "kubeedge"]);
        let crds = bins.crds.display().to_string();
        cloud.kubectl_ok(&["apply", "--server-side", "-R", "-f", &crds]);
        cloud.start_cloudcore(bins, node_limit);
        cloud
    }

    /// The ConfigMap `cloudcore` (key `cloudcore.yaml`, with `nodeLimit`) and the
    /// Deployment `cloudcore` (with `replicas`) in kubeedge, as KubeEdge's Helm chart and
    /// keadm init make them (manifests/charts/cloudcore): what keadm-batch reads for the
    /// cloud's capacity. Nothing runs the Deployment here (no controller-manager).
    pub fn chart_objects(&self, node_limit: u32, replicas: u32) {
        let manifest = self.path("chart-objects.yaml");
        fs::write(
            &manifest,
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cloudcore\n  namespace: kubeedge\n  labels: {{k8s-app: kubeedge, kubeedge: cloudcore}}\ndata:\n  cloudcore.yaml: |\n    apiVersion: cloudcore.config.kubeedge.io/v1alpha2\n    kind: CloudCore\n    modules:\n      cloudHub:\n        advertiseAddress:\n        - 127.0.0.1\n        nodeLimit: {node_limit}\n        websocket:\n          enable: true\n          port: {hub}\n\
                 ---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: cloudcore\n  namespace: kubeedge\n  labels: {{k8s-app: kubeedge, kubeedge: cloudcore}}\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels: {{k8s-app: kubeedge, kubeedge: cloudcore}}\n  template:\n    metadata:\n      labels: {{k8s-app: kubeedge, kubeedge: cloudcore}}\n    spec:\n      containers:\n      - name: cloudcore\n        image: kubeedge/cloudcore:v1.23.1\n",
                hub = self.hub_port
            ),
        )
        .unwrap();
        self.kubectl_ok(&["apply", "-f", &manifest.display().to_string()]);
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Starts `command` as `name`, its output in `<name>.log`.
    fn spawn(&mut self, name: &'static str, command: &mut Command) {
        let log = fs::File::create(self.path(&format!("{name}.log"))).unwrap();
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        self.processes.push((name, child));
    }

    /// The CPU time (user and system, in seconds) the process started as `name` has used.
    pub fn cpu_seconds(&self, name: &str) -> f64 {
        let (_, child) = self
            .processes
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("no process {name} was started"));
        let stat = fs::read_to_string(format!("/proc/{}/stat", child.id())).unwrap();
        // Past the command's parentheses: state is field 3, utime and stime 14 and 15.
        let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
        let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
        // SAFETY: sysconf(_SC_CLK_TCK) reads a constant of the system.
        ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
    }

    /// The log of the process started as `name`.
    pub fn log(&self, name: &str) -> String {
        fs::read_to_string(self.path(&format!("{name}.log"))).unwrap_or_default()
    }

    /// Waits until `ready` holds, failing with `name`'s log after [`START_TIMEOUT`] or
    /// as soon as it has exited.
    fn wait_for(&mut self, name: &str, ready: impl Fn(&RealCloud) -> bool) {
        let deadline = Instant::now() + START_TIMEOUT;
        while !ready(self) {
            let child = self
                .processes
                .iter_mut()
                .find(|(n, _)| *n == name)
                .map(|(_, child)| child)
                .unwrap();
            if let Ok(Some(status)) = child.try_wait() {
                panic!("{name} exited ({status}):\n{}", self.log(name));
            }
            assert!(
                Instant::now() < deadline,
                "{name} did not come up within {START_TIMEOUT:?}:\n{}",
                self.log(name)
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// cloudcore from its defaults, with what differs here in a config of its own (it
    /// reads a partial config over its defaults).
    fn start_cloudcore(&mut self, bins: &CloudBinaries, node_limit: Option<u32>) {
        let state = self.path("cloudcore");
        fs::create_dir_all(&state).unwrap();
        let file = |name: &str| state.join(name).display().to_string();
        let mut config = serde_json::json!({
            "kubeAPIConfig": {"kubeConfig": self.kubeconfig, "master": ""},
            "commonConfig": {"monitorServer": {"bindAddress": format!("127.0.0.1:{}", free_port())}},
            "modules": {
                "cloudHub": {
                    "advertiseAddress": ["127.0.0.1"],
                    "dnsNames": ["localhost"],
                    "websocket": {"address": "127.0.0.1", "port": self.hub_port},
                    "https": {"address": "127.0.0.1", "port": self.cert_port},
                    "quic": {"enable": false, "address": "127.0.0.1"},
                    "unixsocket": {"enable": true, "address": format!("unix://{}", file("kubeedge.sock"))},
                    // None on disk: cloudcore keeps its CA and certificate in secrets.
                    "tlsCAFile": file("rootCA.crt"),
                    "tlsCAKeyFile": file("rootCA.key"),
                    "tlsCertFile": file("server.crt"),
                    "tlsPrivateKeyFile": file("server.key"),
                },
                "iptablesManager": {"enable": false},
                "cloudStream": {"enable": false},
                "router": {"enable": false},
            },
        });
        if let Some(limit) = node_limit {
            config["modules"]["cloudHub"]["nodeLimit"] = serde_json::json!(limit);
        }
        let path = state.join("cloudcore.yaml");
        fs::write(&path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
        self.spawn(
            "cloudcore",
            Command::new(bins.path("cloudcore"))
                .arg("--config")
                .arg(&path),
        );
        self.wait_for("cloudcore", |cloud| {
            cloud
                .kubectl(&["-n", "kubeedge", "get", "secret", "tokensecret"])
                .status
                .success()
                && std::net::TcpStream::connect(("127.0.0.1", cloud.cert_port)).is_ok()
        });
    }

    /// The join token cloudcore keeps in the `tokensecret` secret (what `keadm gettoken`
    /// prints).
    pub fn token(&self) -> String {
        let out = self.kubectl_ok(&[
            "-n",
            "kubeedge",
            "get",
            "secret",
            "tokensecret",
            "-o",
            "jsonpath={.data.tokendata}",
        ]);
        use base64::Engine as _;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(out.stdout.trim_ascii())
            .expect("tokensecret's tokendata is base64");
        String::from_utf8(decoded).unwrap()
    }

    /// `kubectl` against the cloud, as its admin.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .expect("run kubectl")
    }

    /// [`RealCloud::kubectl`], failing the test unless it succeeds.
    pub fn kubectl_ok(&self, args: &[&str]) -> Output {
        run_ok(&format!("kubectl {}", args.join(" ")), &mut {
            let mut c = Command::new(&self.kubectl);
            c.arg("--kubeconfig").arg(&self.kubeconfig).args(args);
            c
        })
    }

    /// The Node objects, as the API server lists them.
    pub fn nodes(&self) -> Vec<serde_json::Value> {
        let out = self.kubectl_ok(&["get", "nodes", "-o", "json"]);
        let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        list["items"].as_array().cloned().unwrap_or_default()
    }

    /// The Node named `name`, if the API server has one.
    pub fn node(&self, name: &str) -> Option<serde_json::Value> {
        self.nodes()
            .into_iter()
            .find(|n| n["metadata"]["name"] == name)
    }
}

/// A Node's `Ready` condition, as (status, reason, message).
pub fn ready_condition(node: &serde_json::Value) -> Option<(String, String, String)> {
    let conditions = node["status"]["conditions"].as_array()?;
    let ready = conditions.iter().find(|c| c["type"] == "Ready")?;
    let text = |key: &str| ready[key].as_str().unwrap_or_default().to_string();
    Some((text("status"), text("reason"), text("message")))
}

impl Drop for RealCloud {
    fn drop(&mut self) {
        for (_, child) in self.processes.iter_mut().rev() {
            // SAFETY: plain kill(2) on a process this harness started.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
