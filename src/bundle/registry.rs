//! A small Docker Registry HTTP API v2 client, blocking, over the reqwest client staging
//! already uses: manifests (OCI and Docker schema 2, indexes and lists narrowed to one
//! platform), blobs verified by sha256, token auth (`WWW-Authenticate: Bearer realm=...`)
//! and basic auth with the docker client's logins, retries with backoff. Only pulls.

use std::collections::HashMap;
use std::io::{self, Read, Seek, Write};
use std::path::Path;
use std::time::Duration;

use base64::Engine;
use reqwest::StatusCode;
use reqwest::blocking::{Client, Response};
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tempfile::NamedTempFile;

use super::DOCKER_HUB_API;
use super::credentials::Credentials;
use super::error::BundleError;
use crate::arch::Arch;
use crate::backoff::backoff;
use crate::image_ref::{DOCKER_HUB, ImageRef};
use crate::stage::{Meter, Meters, error_chain};

pub(crate) const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub(crate) const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";

/// A manifest or index is a few KiB; this bounds what a hostile registry can make us hold.
const MAX_MANIFEST_BYTES: u64 = 4 << 20;

/// A content descriptor, as manifests and indexes list them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Descriptor {
    #[serde(rename = "mediaType", default)]
    pub media_type: String,
    pub digest: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Platform {
    pub architecture: String,
    pub os: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

impl RegistrySettings {
    /// The plain-HTTP rule, before anything is fetched: a mirror may be `http://` only
    /// with `--insecure-http`, since whoever is on the path could swap the image a tag
    /// names.
    pub fn check_plain_http(&self) -> Result<(), BundleError> {
        for (registry, url) in &self.mirrors {
            if url.to_ascii_lowercase().starts_with("http://") && !self.insecure_http {
                return Err(BundleError::PlainHttpMirror {
                    registry: registry.clone(),
                    url: url.clone(),
                });
            }
        }
        Ok(())
    }
}

impl Platform {
    /// Whether an image for this platform runs on nodes of `arch`: keadm's `arm` build is
    /// ARMv7, so `arm` wants v7 (or no variant), and `arm64` v8 (or none).
    fn serves(&self, arch: Arch) -> Option<u8> {
        if self.os != "linux" || self.architecture != arch.as_str() {
            return None;
        }
        let preferred = match arch {
            Arch::Arm => "v7",
            Arch::Arm64 => "v8",
            Arch::Amd64 => "",
        };
        match self.variant.as_deref() {
            None | Some("") => Some(1),
            Some(variant) if variant == preferred => Some(2),
            Some(_) => None,
        }
    }

    fn for_arch(arch: Arch) -> Platform {
        Platform {
            architecture: arch.as_str().into(),
            os: "linux".into(),
            variant: (arch == Arch::Arm).then(|| "v7".into()),
        }
    }
}

impl std::fmt::Display for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(variant) = &self.variant {
            write!(f, "/{variant}")?;
        }
        Ok(())
    }
}

/// The fields of a manifest or index this client reads.
#[derive(Deserialize)]
struct ManifestDoc {
    #[serde(rename = "schemaVersion", default)]
    schema_version: u32,
    #[serde(rename = "mediaType", default)]
    media_type: Option<String>,
    #[serde(default)]
    manifests: Option<Vec<Descriptor>>,
    #[serde(default)]
    config: Option<Descriptor>,
    #[serde(default)]
    layers: Option<Vec<Descriptor>>,
}

/// A manifest exactly as the registry sent it (its digest is over these bytes).
#[derive(Clone, Debug)]
pub(crate) struct Manifest {
    pub bytes: Vec<u8>,
    pub media_type: String,
    /// `sha256:<hex>`.
    pub digest: String,
}

/// One platform's image, resolved: its manifest, config and layers.
#[derive(Debug)]
pub(crate) struct Resolved {
    pub manifest: Manifest,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
    /// From the index when the tag was multi-platform; from the image config otherwise.
    pub platform: Option<Platform>,
    /// The registry as messages name it.
    pub registry: String,
}

/// How to reach registries.
#[derive(Clone, Debug)]
pub struct RegistrySettings {
    /// Registry name (`docker.io`, `registry.k8s.io`) to the base URL requests for its
    /// images go to instead (`--registry-mirror`).
    pub mirrors: Vec<(String, String)>,
    /// A mirror may be plain `http://`.
    pub insecure_http: bool,
    /// The largest blob accepted (`--max-package-bytes`).
    pub max_blob_bytes: u64,
    pub retries: u32,
    pub retry_base_delay: Duration,
    /// The docker client's config file, for logins.
    pub docker_config: Option<std::path::PathBuf>,
    /// Where blob downloads say how far they are.
    pub meters: Meters,
}

/// Where one registry's requests go.
#[derive(Clone, Debug)]
struct Place {
    /// `https://registry-1.docker.io`, a mirror's URL; no trailing slash.
    base: String,
    /// `host[:port]` of `base`, for logins.
    host: String,
    /// The registry as messages name it.
    label: String,
}

/// How one attempt went wrong.
enum Failure {
    Transient(String),
    Status(StatusCode),
    Fatal(Box<BundleError>),
}

impl From<BundleError> for Failure {
    fn from(error: BundleError) -> Failure {
        Failure::Fatal(Box::new(error))
    }
}

pub(crate) struct Registry {
    client: Client,
    settings: RegistrySettings,
    credentials: Credentials,
    /// The `Authorization` value that worked, per base URL and repository.
    auth: HashMap<(String, String), String>,
}

impl Registry {
    pub(crate) fn new(settings: RegistrySettings) -> Result<Registry, BundleError> {
        let credentials =
            Credentials::load(settings.docker_config.as_deref()).map_err(|reason| {
                BundleError::Credentials {
                    path: settings.docker_config.clone().unwrap_or_default(),
                    reason,
                }
            })?;
        let client = Client::builder()
            .user_agent(concat!("keadm-batch/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(15))
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| {
                BundleError::Stage(crate::stage::StageError::HttpClient {
                    error: error_chain(&e),
                })
            })?;
        Ok(Registry {
            client,
            settings,
            credentials,
            auth: HashMap::new(),
        })
    }

    /// The manifest of `image` for `arch`: an index or list is narrowed to the arch's entry.
    pub(crate) fn resolve(
        &mut self,
        image: &ImageRef,
        arch: Arch,
    ) -> Result<Resolved, BundleError> {
        let place = self.place(image.registry());
        let top = self.manifest(&place, image, image.manifest_reference())?;
        let doc = parse_doc(&top, image, &place)?;
        let (manifest, doc, platform) = if is_index(&top.media_type, &doc) {
            let entries = doc.manifests.unwrap_or_default();
            let chosen = entries
                .iter()
                .filter_map(|d| {
                    let rank = d.platform.as_ref()?.serves(arch)?;
                    Some((rank, d))
                })
                .max_by_key(|(rank, _)| *rank)
                .map(|(_, d)| d.clone());
            let Some(chosen) = chosen else {
                let available: Vec<String> = entries
                    .iter()
                    .filter_map(|d| d.platform.as_ref().map(ToString::to_string))
                    .filter(|p| !p.starts_with("unknown/"))
                    .collect();
                return Err(BundleError::NoPlatform {
                    image: image.to_string(),
                    registry: place.label,
                    arch,
                    available: if available.is_empty() {
                        "no platform at all".into()
                    } else {
                        available.join(", ")
                    },
                });
            };
            let manifest = self.manifest(&place, image, &chosen.digest)?;
            let doc = parse_doc(&manifest, image, &place)?;
            if is_index(&manifest.media_type, &doc) {
                return Err(bad_manifest(
                    image,
                    &place,
                    "its index points at another index, which keadm-batch does not follow",
                ));
            }
            (manifest, doc, chosen.platform)
        } else {
            (top, doc, None)
        };
        if doc.schema_version != 2 {
            return Err(bad_manifest(
                image,
                &place,
                &format!(
                    "it is schema version {} (media type {}), and only schema 2 can be imported",
                    doc.schema_version, manifest.media_type
                ),
            ));
        }
        let Some(config) = doc.config else {
            return Err(bad_manifest(image, &place, "it has no config"));
        };
        let layers = doc.layers.unwrap_or_default();
        for descriptor in std::iter::once(&config).chain(&layers) {
            sha256_hex(&descriptor.digest).ok_or_else(|| {
                bad_manifest(
                    image,
                    &place,
                    &format!(
                        "it names the blob {:?}, which is not a sha256 digest",
                        descriptor.digest
                    ),
                )
            })?;
        }
        Ok(Resolved {
            manifest,
            config,
            layers,
            platform,
            registry: place.label,
        })
    }

    /// Downloads the blob `descriptor` of `image` into a new temporary file in `dir`,
    /// checking its size and sha256. `what` names it in messages ("config", "layer 2").
    pub(crate) fn blob(
        &mut self,
        image: &ImageRef,
        descriptor: &Descriptor,
        what: &str,
        dir: &Path,
    ) -> Result<NamedTempFile, BundleError> {
        let place = self.place(image.registry());
        let limit = self.settings.max_blob_bytes;
        if descriptor.size > limit {
            return Err(BundleError::TooLarge {
                image: image.to_string(),
                registry: place.label,
                what: what.into(),
                size: descriptor.size,
                limit,
            });
        }
        let expected = descriptor.digest.clone();
        let file = tempfile::Builder::new()
            .prefix(super::TEMPORARY_PREFIX)
            .tempfile_in(dir)
            .map_err(|e| BundleError::io("create a temporary file in", dir, e))?;
        let path = format!("blobs/{expected}");
        let (retries, delay) = (self.settings.retries, self.settings.retry_base_delay);
        with_retries(retries, delay, image, &place, || {
            let response = self.get(&place, image, &path, None)?;
            let response = self.check_status(response, image, &place, Some(what))?;
            let label = format!("{image} {what}");
            let mut meter = Meter::start(&self.settings.meters, &label, Some(descriptor.size));
            save(response, &file, descriptor.size, &mut meter)
                .map_err(|failure| match failure {
                    SaveFailure::Local(e) => {
                        Failure::from(BundleError::io("write", file.path(), e))
                    }
                    SaveFailure::Broken(reason) => Failure::Transient(reason),
                    SaveFailure::Oversized => Failure::from(BundleError::DigestMismatch {
                        image: image.to_string(),
                        registry: place.label.clone(),
                        what: what.into(),
                        expected: format!("{expected} ({} bytes)", descriptor.size),
                        actual: format!("a body of more than {} bytes", descriptor.size),
                    }),
                })
                .and_then(|actual| {
                    if actual == expected {
                        Ok(())
                    } else {
                        Err(Failure::from(BundleError::DigestMismatch {
                            image: image.to_string(),
                            registry: place.label.clone(),
                            what: what.into(),
                            expected: expected.clone(),
                            actual,
                        }))
                    }
                })
        })?;
        Ok(file)
    }

    fn place(&self, registry: &str) -> Place {
        let mirror = self
            .settings
            .mirrors
            .iter()
            .find(|(name, _)| name == registry)
            .map(|(_, url)| url.trim_end_matches('/').to_string());
        let (base, label) = match mirror {
            Some(url) => (url.clone(), format!("{url} (the mirror for {registry})")),
            None if registry == DOCKER_HUB => {
                (format!("https://{DOCKER_HUB_API}"), DOCKER_HUB.to_string())
            }
            None => (format!("https://{registry}"), registry.to_string()),
        };
        let host = base
            .split_once("://")
            .map_or(base.as_str(), |(_, rest)| rest)
            .split('/')
            .next()
            .unwrap_or_default()
            .to_string();
        Place { base, host, label }
    }

    /// The manifest `reference` (a tag or a digest) of `image`'s repository, verified
    /// against the digest when `reference` is one, and against the registry's
    /// `Docker-Content-Digest` when it says one.
    fn manifest(
        &mut self,
        place: &Place,
        image: &ImageRef,
        reference: &str,
    ) -> Result<Manifest, BundleError> {
        let accept = [OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST].join(", ");
        let path = format!("manifests/{reference}");
        let (retries, delay) = (self.settings.retries, self.settings.retry_base_delay);
        let (bytes, content_type, announced) = with_retries(retries, delay, image, place, || {
            let response = self.get(place, image, &path, Some(&accept))?;
            let response = self.check_status(response, image, place, None)?;
            if response.url().scheme() == "http"
                && place.base.starts_with("https://")
                && !self.settings.insecure_http
            {
                return Err(Failure::from(bad_manifest(
                    image,
                    place,
                    &format!(
                        "it was redirected to the plain-HTTP address {}",
                        response.url()
                    ),
                )));
            }
            let header = |name: &str| {
                response
                    .headers()
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string)
            };
            let content_type = header(CONTENT_TYPE.as_str())
                .map(|t| t.split(';').next().unwrap_or_default().trim().to_string());
            let announced = header("docker-content-digest");
            let mut bytes = Vec::new();
            response
                .take(MAX_MANIFEST_BYTES + 1)
                .read_to_end(&mut bytes)
                .map_err(|e| Failure::Transient(error_chain(&e)))?;
            Ok((bytes, content_type, announced))
        })?;
        if bytes.len() as u64 > MAX_MANIFEST_BYTES {
            return Err(bad_manifest(
                image,
                place,
                &format!("it is larger than {MAX_MANIFEST_BYTES} bytes"),
            ));
        }
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(&bytes)));
        let expected = if reference.starts_with("sha256:") {
            Some(reference.to_string())
        } else {
            announced.filter(|d| d.starts_with("sha256:"))
        };
        if let Some(expected) = expected
            && expected != digest
        {
            return Err(BundleError::DigestMismatch {
                image: image.to_string(),
                registry: place.label.clone(),
                what: "manifest".into(),
                expected,
                actual: digest,
            });
        }
        let from_body = serde_json::from_slice::<ManifestDoc>(&bytes)
            .ok()
            .and_then(|d| d.media_type);
        let media_type = from_body.or(content_type).unwrap_or_default();
        Ok(Manifest {
            bytes,
            media_type,
            digest,
        })
    }

    /// A GET of `/v2/<repository>/<path>`, answering one authentication challenge.
    fn get(
        &mut self,
        place: &Place,
        image: &ImageRef,
        path: &str,
        accept: Option<&str>,
    ) -> Result<Response, Failure> {
        let url = format!("{}/v2/{}/{path}", place.base, image.repository());
        let key = (place.base.clone(), image.repository().to_string());
        let mut challenged = false;
        loop {
            let mut request = self.client.get(&url);
            if let Some(accept) = accept {
                request = request.header(ACCEPT, accept);
            }
            if let Some(auth) = self.auth.get(&key) {
                request = request.header(AUTHORIZATION, auth);
            }
            let response = request.send().map_err(|e| {
                if e.is_builder() || e.is_redirect() {
                    Failure::from(BundleError::Unreachable {
                        image: image.to_string(),
                        registry: place.label.clone(),
                        attempts: 1,
                        error: error_chain(&e),
                    })
                } else {
                    Failure::Transient(error_chain(&e))
                }
            })?;
            if response.status() == StatusCode::UNAUTHORIZED && !challenged {
                challenged = true;
                let challenge = response
                    .headers()
                    .get(WWW_AUTHENTICATE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                let auth = self.authenticate(place, image, &challenge)?;
                self.auth.insert(key.clone(), auth);
                continue;
            }
            return Ok(response);
        }
    }

    /// The `Authorization` value that answers `challenge`: a bearer token from the
    /// challenge's realm (with the login, when there is one), or the login itself.
    fn authenticate(
        &self,
        place: &Place,
        image: &ImageRef,
        challenge: &str,
    ) -> Result<String, Failure> {
        let login = self.credentials.for_host(&place.host).cloned();
        let source_name = self.credentials_source();
        let (scheme, params) = parse_challenge(challenge);
        if scheme.eq_ignore_ascii_case("basic") || scheme.is_empty() {
            let Some(login) = login else {
                return Err(Failure::from(BundleError::NeedsLogin {
                    image: image.to_string(),
                    registry: place.label.clone(),
                    source_name,
                }));
            };
            let pair = format!("{}:{}", login.user, login.password);
            return Ok(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(pair)
            ));
        }
        let realm = params.get("realm").cloned().unwrap_or_default();
        let token_error = |error: String| {
            Failure::from(BundleError::Token {
                image: image.to_string(),
                realm: realm.clone(),
                error,
                source_name: source_name.clone(),
            })
        };
        if !scheme.eq_ignore_ascii_case("bearer") || realm.is_empty() {
            return Err(token_error(format!(
                "the registry asks for {challenge:?}, which keadm-batch cannot answer"
            )));
        }
        let scope = params
            .get("scope")
            .cloned()
            .unwrap_or_else(|| format!("repository:{}:pull", image.repository()));
        let mut query = vec![("scope", scope.as_str())];
        if let Some(service) = params.get("service") {
            query.push(("service", service.as_str()));
        }
        let url = reqwest::Url::parse_with_params(&realm, &query)
            .map_err(|e| token_error(format!("the realm is not a URL ({e})")))?;
        let mut request = self.client.get(url);
        // The login goes only where the registry itself is, or over https.
        if let Some(login) = &login
            && (realm.starts_with("https://") || realm.contains(&format!("://{}/", place.host)))
        {
            request = request.basic_auth(&login.user, Some(&login.password));
        }
        let response = request.send().map_err(|e| token_error(error_chain(&e)))?;
        let status = response.status();
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(Failure::from(self.refused(image, place, status)));
        }
        if !status.is_success() {
            return Err(token_error(format!(
                "the token service answered {}",
                status_text(status)
            )));
        }
        let mut body = Vec::new();
        response
            .take(1 << 20)
            .read_to_end(&mut body)
            .map_err(|e| token_error(error_chain(&e)))?;
        let answer: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| token_error(format!("its answer is not JSON ({e})")))?;
        let token = answer
            .get("token")
            .or_else(|| answer.get("access_token"))
            .and_then(|t| t.as_str())
            .filter(|t| !t.is_empty())
            .ok_or_else(|| token_error("its answer holds no token".into()))?;
        Ok(format!("Bearer {token}"))
    }

    fn credentials_source(&self) -> String {
        match &self.credentials.source {
            Some(path) => path.display().to_string(),
            None => match &self.settings.docker_config {
                Some(path) => format!("{} (which does not exist)", path.display()),
                None => "the docker config file (none found)".into(),
            },
        }
    }

    /// NeedsLogin without a login for the host, Denied with one.
    fn refused(&self, image: &ImageRef, place: &Place, status: StatusCode) -> BundleError {
        if self.credentials.for_host(&place.host).is_none() {
            BundleError::NeedsLogin {
                image: image.to_string(),
                registry: place.label.clone(),
                source_name: self.credentials_source(),
            }
        } else {
            BundleError::Denied {
                image: image.to_string(),
                registry: place.label.clone(),
                status: status_text(status),
                source_name: self.credentials_source(),
            }
        }
    }

    /// `response` when it is a success; what its status means otherwise. `blob` names a
    /// blob that was asked for (a missing blob is a broken image, not a missing one).
    fn check_status(
        &self,
        response: Response,
        image: &ImageRef,
        place: &Place,
        blob: Option<&str>,
    ) -> Result<Response, Failure> {
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        if status.is_server_error()
            || status == StatusCode::REQUEST_TIMEOUT
            || status == StatusCode::TOO_MANY_REQUESTS
        {
            return Err(Failure::Status(status));
        }
        let error = match (status, blob) {
            (StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN, _) => {
                self.refused(image, place, status)
            }
            (StatusCode::NOT_FOUND, None) => BundleError::NotFound {
                image: image.to_string(),
                registry: place.label.clone(),
                status: format!("{}{}", status_text(status), registry_error_code(response)),
            },
            (StatusCode::NOT_FOUND, Some(what)) => bad_manifest(
                image,
                place,
                &format!("its {what} is missing from the registry (404 Not Found)"),
            ),
            _ => BundleError::Status {
                image: image.to_string(),
                registry: place.label.clone(),
                status: status_text(status),
            },
        };
        Err(Failure::from(error))
    }
}

/// Runs `attempt` up to `1 + retries` times, with backoff between attempts.
fn with_retries<T>(
    retries: u32,
    base_delay: Duration,
    image: &ImageRef,
    place: &Place,
    mut attempt: impl FnMut() -> Result<T, Failure>,
) -> Result<T, BundleError> {
    let attempts = retries.saturating_add(1);
    let mut number = 1;
    loop {
        let reason = match attempt() {
            Ok(value) => return Ok(value),
            Err(Failure::Fatal(error)) => return Err(*error),
            Err(Failure::Status(status)) if number >= attempts => {
                return Err(BundleError::Status {
                    image: image.to_string(),
                    registry: place.label.clone(),
                    status: format!("{} (after {attempts} attempts)", status_text(status)),
                });
            }
            Err(Failure::Transient(error)) if number >= attempts => {
                return Err(BundleError::Unreachable {
                    image: image.to_string(),
                    registry: place.label.clone(),
                    attempts,
                    error,
                });
            }
            Err(Failure::Status(status)) => format!("HTTP status {}", status_text(status)),
            Err(Failure::Transient(error)) => error,
        };
        let delay = backoff(base_delay, number);
        log::warn!(
            "pulling {image} from {} failed ({reason}); retrying in {:.1} s (attempt {} of {attempts})",
            place.label,
            delay.as_secs_f64(),
            number + 1
        );
        std::thread::sleep(delay);
        number += 1;
    }
}

fn parse_doc(
    manifest: &Manifest,
    image: &ImageRef,
    place: &Place,
) -> Result<ManifestDoc, BundleError> {
    serde_json::from_slice(&manifest.bytes)
        .map_err(|e| bad_manifest(image, place, &format!("it is not a manifest ({e})")))
}

fn is_index(media_type: &str, doc: &ManifestDoc) -> bool {
    media_type == OCI_INDEX
        || media_type == DOCKER_LIST
        || (doc.manifests.is_some() && doc.config.is_none())
}

fn bad_manifest(image: &ImageRef, place: &Place, reason: &str) -> BundleError {
    BundleError::BadManifest {
        image: image.to_string(),
        registry: place.label.clone(),
        reason: reason.to_string(),
    }
}

/// The hex of a `sha256:<64 hex>` digest.
pub(crate) fn sha256_hex(digest: &str) -> Option<&str> {
    let hex = digest.strip_prefix("sha256:")?;
    (hex.len() == 64
        && hex
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()))
    .then_some(hex)
}

/// The platform an image config declares, for an image that is not multi-platform.
pub(crate) fn config_platform(config: &[u8]) -> Option<Platform> {
    #[derive(Deserialize)]
    struct Config {
        architecture: Option<String>,
        os: Option<String>,
        variant: Option<String>,
    }
    let config: Config = serde_json::from_slice(config).ok()?;
    Some(Platform {
        architecture: config.architecture?,
        os: config.os.unwrap_or_else(|| "linux".into()),
        variant: config.variant,
    })
}

/// Whether an image whose config declares `platform` (if it declares one) runs on `arch`.
pub(crate) fn platform_for(arch: Arch, declared: Option<Platform>) -> Result<Platform, Platform> {
    match declared {
        None => Ok(Platform::for_arch(arch)),
        Some(platform) if platform.serves(arch).is_some() => Ok(platform),
        Some(platform) => Err(platform),
    }
}

/// ` (MANIFEST_UNKNOWN)`: the registry's error code from a JSON error body, when there is one.
fn registry_error_code(response: Response) -> String {
    let mut body = Vec::new();
    let _ = response.take(64 * 1024).read_to_end(&mut body);
    serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| {
            v.get("errors")?
                .get(0)?
                .get("code")?
                .as_str()
                .map(str::to_string)
        })
        .map(|code| format!(" ({code})"))
        .unwrap_or_default()
}

/// `Bearer realm="...",service="..."` into its scheme and parameters.
fn parse_challenge(header: &str) -> (String, HashMap<String, String>) {
    let header = header.trim();
    let (scheme, rest) = header.split_once(' ').unwrap_or((header, ""));
    let mut params = HashMap::new();
    let mut chars = rest.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if key.is_empty() {
            break;
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| *c != ',') {
                value.push(c);
            }
        }
        params.insert(key.trim().to_ascii_lowercase(), value.trim().to_string());
    }
    (scheme.to_string(), params)
}

enum SaveFailure {
    Local(io::Error),
    Broken(String),
    Oversized,
}

/// Streams `response` into `file` (from its start), expecting exactly `size` bytes, telling
/// `meter` how far it is; returns the sha256 as `sha256:<hex>`.
fn save(
    mut response: Response,
    file: &NamedTempFile,
    size: u64,
    meter: &mut Meter,
) -> Result<String, SaveFailure> {
    let mut out = file.as_file();
    out.set_len(0)
        .and_then(|()| out.rewind())
        .map_err(SaveFailure::Local)?;
    let mut hasher = Sha256::new();
    let mut received = 0u64;
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = match response.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(SaveFailure::Broken(format!(
                    "the transfer broke off after {received} bytes: {}",
                    error_chain(&e)
                )));
            }
        };
        received += n as u64;
        if received > size {
            return Err(SaveFailure::Oversized);
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n]).map_err(SaveFailure::Local)?;
        meter.advance(received);
    }
    meter.finish(received);
    if received < size {
        return Err(SaveFailure::Broken(format!(
            "the transfer ended after {received} of {size} bytes"
        )));
    }
    out.flush().map_err(SaveFailure::Local)?;
    Ok(format!("sha256:{}", hex::encode(hasher.finalize())))
}

fn status_text(status: StatusCode) -> String {
    match status.canonical_reason() {
        Some(reason) => format!("{} {reason}", status.as_u16()),
        None => status.as_u16().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_are_parsed_with_quotes_and_commas() {
        let (scheme, params) = parse_challenge(
            r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/busybox:pull,push""#,
        );
        assert_eq!(scheme, "Bearer");
        assert_eq!(params["realm"], "https://auth.docker.io/token");
        assert_eq!(params["service"], "registry.docker.io");
        assert_eq!(params["scope"], "repository:library/busybox:pull,push");
        let (scheme, params) = parse_challenge(r#"Basic realm=basic-realm"#);
        assert_eq!(
            (scheme.as_str(), params["realm"].as_str()),
            ("Basic", "basic-realm")
        );
        assert_eq!(parse_challenge("").0, "");
    }

    fn platform(architecture: &str, variant: Option<&str>) -> Platform {
        Platform {
            architecture: architecture.into(),
            os: "linux".into(),
            variant: variant.map(str::to_string),
        }
    }

    #[test]
    fn platforms_serve_the_release_arches() {
        assert!(platform("amd64", None).serves(Arch::Amd64).is_some());
        assert!(
            platform("arm64", Some("v8")).serves(Arch::Arm64)
                > platform("arm64", None).serves(Arch::Arm64)
        );
        assert!(platform("arm", Some("v7")).serves(Arch::Arm).is_some());
        assert!(platform("arm", Some("v6")).serves(Arch::Arm).is_none());
        assert!(platform("arm64", None).serves(Arch::Amd64).is_none());
        let windows = Platform {
            os: "windows".into(),
            ..platform("amd64", None)
        };
        assert!(windows.serves(Arch::Amd64).is_none());
        assert_eq!(platform("arm", Some("v7")).to_string(), "linux/arm/v7");
    }

    #[test]
    fn a_single_platform_image_must_declare_the_arch_or_nothing() {
        let amd64 = config_platform(br#"{"architecture":"amd64","os":"linux","rootfs":{}}"#);
        assert_eq!(
            platform_for(Arch::Amd64, amd64.clone()),
            Ok(platform("amd64", None))
        );
        assert_eq!(
            platform_for(Arch::Arm64, amd64),
            Err(platform("amd64", None))
        );
        assert_eq!(
            platform_for(Arch::Arm, None),
            Ok(platform("arm", Some("v7")))
        );
        assert_eq!(config_platform(b"{}"), None);
    }

    #[test]
    fn only_lowercase_sha256_digests_are_accepted() {
        let hex = "ab".repeat(32);
        assert_eq!(sha256_hex(&format!("sha256:{hex}")), Some(hex.as_str()));
        assert_eq!(sha256_hex(&format!("sha256:{}", hex.to_uppercase())), None);
        assert_eq!(sha256_hex(&format!("sha512:{hex}")), None);
        assert_eq!(sha256_hex("sha256:../../etc"), None);
    }
}
