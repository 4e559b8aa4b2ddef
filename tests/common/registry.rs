//! A real container registry on loopback for `batch bundle` tests: Debian's
//! `docker-registry` (the distribution registry), started by the test with filesystem
//! storage in a temp dir, optionally behind htpasswd basic auth, and images pushed to it
//! from the test over the registry HTTP API (no docker daemon): one-layer images from
//! tests/common/image_archive.rs, and multi-arch indexes over them.
//!
//! ```ignore
//! let registry = LocalRegistry::start();
//! registry.push_index("kubeedge/installation-package", "v1.23.1", Format::Oci, &["amd64", "arm64"]);
//! // bundle with --registry-mirror docker.io=<registry.url()> --insecure-http
//! let facts = check_archive(&kit.join("amd64/images/installation-package_v1.23.1.tar"));
//! ```

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::image_archive::{Format, TestImage, sha256};

const REGISTRY: &str = "/usr/bin/docker-registry";
const HTPASSWD: &str = "/usr/bin/htpasswd";

/// How the registry asks clients to authenticate.
#[derive(Clone)]
enum Auth {
    None,
    /// htpasswd basic auth with this user and password.
    Basic(String, String),
    /// Token auth: tokens from `realm`, signed by `issuer`; the test pushes with `push_token`.
    Token {
        realm: String,
        issuer: TokenIssuer,
        push_token: String,
    },
}

/// Signs registry tokens (RS256 JWTs with the certificate in `x5c`), as a token service
/// such as Docker Hub's does; the registry trusts the certificate.
#[derive(Clone)]
pub struct TokenIssuer {
    key: openssl::pkey::PKey<openssl::pkey::Private>,
    cert: openssl::x509::X509,
}

/// The service and issuer names the token-auth registry checks tokens for.
pub const TOKEN_SERVICE: &str = "test-registry";
const TOKEN_ISSUER: &str = "test-issuer";

impl TokenIssuer {
    pub fn new() -> TokenIssuer {
        let key =
            openssl::pkey::PKey::from_rsa(openssl::rsa::Rsa::generate(2048).unwrap()).unwrap();
        let mut name = openssl::x509::X509NameBuilder::new().unwrap();
        name.append_entry_by_text("CN", TOKEN_ISSUER).unwrap();
        let name = name.build();
        let mut cert = openssl::x509::X509Builder::new().unwrap();
        cert.set_version(2).unwrap();
        cert.set_subject_name(&name).unwrap();
        cert.set_issuer_name(&name).unwrap();
        cert.set_pubkey(&key).unwrap();
        cert.set_not_before(&openssl::asn1::Asn1Time::days_from_now(0).unwrap())
            .unwrap();
        cert.set_not_after(&openssl::asn1::Asn1Time::days_from_now(2).unwrap())
            .unwrap();
        let serial = openssl::bn::BigNum::from_u32(1)
            .unwrap()
            .to_asn1_integer()
            .unwrap();
        cert.set_serial_number(&serial).unwrap();
        cert.sign(&key, openssl::hash::MessageDigest::sha256())
            .unwrap();
        TokenIssuer {
            key,
            cert: cert.build(),
        }
    }

    /// A token for `actions` (`pull`, `push`) on each repository of `repositories`.
    pub fn token(&self, repositories: &[&str], actions: &[&str]) -> String {
        use base64::Engine;
        let url = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let der = self.cert.to_der().unwrap();
        let header = serde_json::json!({
            "typ": "JWT",
            "alg": "RS256",
            "x5c": [base64::engine::general_purpose::STANDARD.encode(der)],
        });
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let access: Vec<serde_json::Value> = repositories
            .iter()
            .map(|name| serde_json::json!({"type": "repository", "name": name, "actions": actions}))
            .collect();
        let claims = serde_json::json!({
            "iss": TOKEN_ISSUER,
            "sub": "",
            "aud": TOKEN_SERVICE,
            "exp": now + 3600,
            "nbf": now - 60,
            "iat": now - 60,
            "jti": format!("{now}-{}", repositories.join(",")),
            "access": access,
        });
        let signed = format!(
            "{}.{}",
            url.encode(header.to_string()),
            url.encode(claims.to_string())
        );
        let mut signer =
            openssl::sign::Signer::new(openssl::hash::MessageDigest::sha256(), &self.key).unwrap();
        signer.update(signed.as_bytes()).unwrap();
        format!("{signed}.{}", url.encode(signer.sign_to_vec().unwrap()))
    }

    fn cert_pem(&self) -> Vec<u8> {
        self.cert.to_pem().unwrap()
    }
}

/// A `docker-registry serve` on 127.0.0.1. Dropping it kills the process it started and
/// removes its storage.
pub struct LocalRegistry {
    child: Child,
    dir: tempfile::TempDir,
    port: u16,
    auth: Auth,
    client: reqwest::blocking::Client,
}

impl LocalRegistry {
    pub fn start() -> LocalRegistry {
        LocalRegistry::spawn(Auth::None)
    }

    /// A registry that asks for `user` and `password` (htpasswd, bcrypt) on every request.
    pub fn start_with_login(user: &str, password: &str) -> LocalRegistry {
        LocalRegistry::spawn(Auth::Basic(user.to_string(), password.to_string()))
    }

    /// A registry that asks for a bearer token from `realm` (the challenge names it, with
    /// [`TOKEN_SERVICE`] and the scope), accepting the tokens `issuer` signs.
    pub fn start_with_tokens(
        realm: &str,
        issuer: &TokenIssuer,
        repositories: &[&str],
    ) -> LocalRegistry {
        LocalRegistry::spawn(Auth::Token {
            realm: realm.to_string(),
            issuer: issuer.clone(),
            push_token: issuer.token(repositories, &["pull", "push"]),
        })
    }

    fn spawn(auth: Auth) -> LocalRegistry {
        assert!(
            Path::new(REGISTRY).exists(),
            "{REGISTRY} is missing: install Debian's docker-registry package (scripts/setup.sh)"
        );
        let mut dir = tempfile::Builder::new()
            .prefix("keadm-batch-registry")
            .tempdir()
            .unwrap();
        let auth_config = match &auth {
            Auth::Basic(user, password) => {
                let out = Command::new(HTPASSWD)
                    .args(["-Bbn", user, password])
                    .output()
                    .expect("run htpasswd (apache2-utils)");
                assert!(out.status.success(), "htpasswd failed");
                std::fs::write(dir.path().join("htpasswd"), &out.stdout).unwrap();
                format!(
                    "auth:\n  htpasswd:\n    realm: test-realm\n    path: {}\n",
                    dir.path().join("htpasswd").display()
                )
            }
            Auth::Token { realm, issuer, .. } => {
                std::fs::write(dir.path().join("issuer.pem"), issuer.cert_pem()).unwrap();
                format!(
                    "auth:\n  token:\n    realm: {realm}\n    service: {TOKEN_SERVICE}\n    issuer: {TOKEN_ISSUER}\n    rootcertbundle: {}\n",
                    dir.path().join("issuer.pem").display()
                )
            }
            Auth::None => String::new(),
        };
        let client = reqwest::blocking::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        // A free port, then the registry on it; another process may take the port in
        // between, so a registry that exits at once is started again on another one.
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let config = dir.path().join("config.yml");
            std::fs::write(
                &config,
                format!(
                    "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n  secret: keadm-batch-test\n{auth_config}",
                    dir.path().join("data").display()
                ),
            )
            .unwrap();
            let log = std::fs::File::create(dir.path().join("registry.log")).unwrap();
            let child = Command::new(REGISTRY)
                .arg("serve")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .expect("start docker-registry");
            let mut registry = LocalRegistry {
                child,
                dir,
                port,
                auth: auth.clone(),
                client: client.clone(),
            };
            if registry.wait_ready() {
                return registry;
            }
            let _ = registry.child.kill();
            let _ = registry.child.wait();
            dir = std::mem::replace(&mut registry.dir, tempfile::tempdir().unwrap());
        }
        panic!("docker-registry did not start on loopback after 5 attempts");
    }

    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            // 200 without auth, 401 with it: either way it answers.
            if self
                .client
                .get(format!("{}/v2/", self.url()))
                .send()
                .is_ok()
            {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// `http://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:<port>`, as image names and docker logins spell it.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The registry's own log, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    fn request(&self, method: reqwest::Method, url: &str) -> reqwest::blocking::RequestBuilder {
        let request = self.client.request(method, url);
        match &self.auth {
            Auth::Basic(user, password) => request.basic_auth(user, Some(password)),
            Auth::Token { push_token, .. } => request.bearer_auth(push_token),
            Auth::None => request,
        }
    }

    /// Uploads one blob (monolithic upload: POST, then PUT with the digest).
    pub fn push_blob(&self, repo: &str, bytes: &[u8]) {
        let response = self
            .request(
                reqwest::Method::POST,
                &format!("{}/v2/{repo}/blobs/uploads/", self.url()),
            )
            .send()
            .unwrap();
        assert_eq!(response.status(), 202, "start upload: {}", self.log());
        let location = response.headers()["location"].to_str().unwrap().to_string();
        let location = if location.starts_with("http") {
            location
        } else {
            format!("{}{location}", self.url())
        };
        let separator = if location.contains('?') { '&' } else { '?' };
        let response = self
            .request(
                reqwest::Method::PUT,
                &format!("{location}{separator}digest={}", sha256(bytes)),
            )
            .header("content-type", "application/octet-stream")
            .body(bytes.to_vec())
            .send()
            .unwrap();
        assert_eq!(response.status(), 201, "finish upload: {}", self.log());
    }

    /// Puts a manifest (or index) under `reference` (a tag or its digest).
    pub fn push_manifest(&self, repo: &str, reference: &str, media_type: &str, bytes: &[u8]) {
        let response = self
            .request(
                reqwest::Method::PUT,
                &format!("{}/v2/{repo}/manifests/{reference}", self.url()),
            )
            .header("content-type", media_type)
            .body(bytes.to_vec())
            .send()
            .unwrap();
        let status = response.status();
        assert_eq!(
            status,
            201,
            "put manifest {repo}:{reference}: {}\n{}",
            response.text().unwrap_or_default(),
            self.log()
        );
    }

    /// Pushes a single-platform image as `repo:tag`; returns it.
    pub fn push_image(&self, repo: &str, tag: &str, arch: &str, format: Format) -> TestImage {
        let image = TestImage::marked(repo, arch, format);
        self.push_blob(repo, &image.config);
        self.push_blob(repo, &image.layer);
        self.push_manifest(repo, tag, format.manifest(), &image.manifest);
        image
    }

    /// Pushes one image per arch by digest and an index (or manifest list) over them as
    /// `repo:tag`; returns the images.
    pub fn push_index(
        &self,
        repo: &str,
        tag: &str,
        format: Format,
        arches: &[&str],
    ) -> Vec<TestImage> {
        let mut images = Vec::new();
        let mut entries = Vec::new();
        for arch in arches {
            let image = TestImage::marked(repo, arch, format);
            self.push_blob(repo, &image.config);
            self.push_blob(repo, &image.layer);
            let digest = sha256(&image.manifest);
            self.push_manifest(repo, &digest, format.manifest(), &image.manifest);
            let mut platform = serde_json::json!({"architecture": arch, "os": "linux"});
            if *arch == "arm64" {
                platform["variant"] = "v8".into();
            }
            entries.push(serde_json::json!({
                "mediaType": format.manifest(),
                "digest": digest,
                "size": image.manifest.len(),
                "platform": platform,
            }));
            images.push(image);
        }
        let index = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": format.index(),
            "manifests": entries,
        }))
        .unwrap();
        self.push_manifest(repo, tag, format.index(), &index);
        images
    }
}

impl Drop for LocalRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a well-formed image archive holds.
#[derive(Debug)]
pub struct ArchiveFacts {
    /// `io.containerd.image.name`.
    pub name: String,
    /// `org.opencontainers.image.ref.name`.
    pub tag: Option<String>,
    pub architecture: String,
    /// The content of `etc/image` in the layer.
    pub layer_file: String,
    pub blobs: usize,
}

/// Reads an OCI image-layout archive and checks it as an importer would: `oci-layout`,
/// `index.json` with one image, every blob's sha256 equal to its name, the manifest's
/// config and layers present with their sizes. Panics on any fault.
pub fn check_archive(path: &Path) -> ArchiveFacts {
    let mut files: std::collections::HashMap<String, Vec<u8>> = Default::default();
    let mut archive = tar::Archive::new(std::fs::File::open(path).unwrap());
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        if entry.header().entry_type().is_dir() {
            continue;
        }
        let name = entry.path().unwrap().display().to_string();
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).unwrap();
        files.insert(name, bytes);
    }
    let layout: serde_json::Value = serde_json::from_slice(&files["oci-layout"]).unwrap();
    assert_eq!(layout["imageLayoutVersion"], "1.0.0");
    let mut blobs = 0;
    for (name, bytes) in &files {
        if let Some(hex) = name.strip_prefix("blobs/sha256/") {
            assert_eq!(
                sha256(bytes),
                format!("sha256:{hex}"),
                "{name} in {}",
                path.display()
            );
            blobs += 1;
        }
    }
    let blob = |digest: &str| -> &Vec<u8> {
        let hex = digest.strip_prefix("sha256:").unwrap();
        files
            .get(&format!("blobs/sha256/{hex}"))
            .unwrap_or_else(|| panic!("{} lacks the blob {digest}", path.display()))
    };
    let index: serde_json::Value = serde_json::from_slice(&files["index.json"]).unwrap();
    let entries = index["manifests"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{index}");
    let entry = &entries[0];
    let manifest_bytes = blob(entry["digest"].as_str().unwrap());
    assert_eq!(manifest_bytes.len() as u64, entry["size"].as_u64().unwrap());
    let manifest: serde_json::Value = serde_json::from_slice(manifest_bytes).unwrap();
    let config = blob(manifest["config"]["digest"].as_str().unwrap());
    assert_eq!(
        config.len() as u64,
        manifest["config"]["size"].as_u64().unwrap()
    );
    let config: serde_json::Value = serde_json::from_slice(config).unwrap();
    let mut layer_file = String::new();
    for layer in manifest["layers"].as_array().unwrap() {
        let bytes = blob(layer["digest"].as_str().unwrap());
        assert_eq!(bytes.len() as u64, layer["size"].as_u64().unwrap());
        let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(&bytes[..]));
        for file in tar.entries().unwrap() {
            let mut file = file.unwrap();
            if file.path().unwrap() == Path::new("etc/image") {
                file.read_to_string(&mut layer_file).unwrap();
            }
        }
    }
    assert_eq!(
        entry["platform"]["architecture"], config["architecture"],
        "index.json and the config disagree on the arch"
    );
    ArchiveFacts {
        name: entry["annotations"]["io.containerd.image.name"]
            .as_str()
            .unwrap()
            .to_string(),
        tag: entry["annotations"]["org.opencontainers.image.ref.name"]
            .as_str()
            .map(str::to_string),
        architecture: config["architecture"].as_str().unwrap().to_string(),
        layer_file,
        blobs,
    }
}

/// Every file under `dir`, '/'-separated and relative to it, sorted.
pub fn files_under(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path: PathBuf = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                out.push(path.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}
