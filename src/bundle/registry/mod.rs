//! A small Docker Registry HTTP API v2 client, blocking, over the reqwest client staging
//! already uses: manifests (OCI and Docker schema 2, indexes and lists narrowed to one
//! platform), blobs verified by sha256, token auth (`WWW-Authenticate: Bearer realm=...`)
//! and basic auth with the docker client's logins, retries with backoff. Only pulls.
//!
//! Here: the settings, the client and where each registry's requests go. `http` sends
//! requests (authentication challenges, statuses, retries), `body` reads the small
//! answers whole within bounds, `manifest` resolves a tag to one platform's manifest,
//! `blob` downloads and verifies blobs.

mod blob;
mod body;
mod http;
mod manifest;

use std::collections::HashMap;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::blocking::Client;

use super::DOCKER_HUB_API;
use super::credentials::Credentials;
use super::error::BundleError;
use crate::image_ref::{DOCKER_HUB, ImageRef};
use crate::stage::{Meters, error_chain};

#[cfg(test)]
pub(crate) use manifest::OCI_MANIFEST;
pub(crate) use manifest::{
    Manifest, OCI_INDEX, Platform, Resolved, config_platform, platform_for, sha256_hex,
};

/// How long a connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// How to reach registries.
#[derive(Clone, Debug)]
pub struct RegistrySettings {
    /// Registry name (`docker.io`, `registry.k8s.io`) to the base URL requests for its
    /// images go to instead (`--registry-mirror`).
    pub mirrors: Vec<(String, String)>,
    /// A mirror may be plain `http://`.
    pub insecure_http: bool,
    /// The most an image's config and layers together may hold (`--max-package-bytes`),
    /// so each blob too.
    pub max_image_bytes: u64,
    pub retries: u32,
    pub retry_base_delay: Duration,
    /// How long a request waits for the answer to begin, and each read for more of it.
    pub timeout: Duration,
    /// The docker client's config file, for logins.
    pub docker_config: Option<std::path::PathBuf>,
    /// Where blob downloads say how far they are.
    pub meters: Meters,
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
            .connect_timeout(settings.timeout.min(CONNECT_TIMEOUT))
            // In the blocking client this bounds the wait for headers and for each read,
            // not the whole transfer.
            .timeout(settings.timeout)
            .redirect(crate::http_redirect::policy(settings.insecure_http))
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
}

fn bad_manifest(image: &ImageRef, place: &Place, reason: &str) -> BundleError {
    BundleError::BadManifest {
        image: image.to_string(),
        registry: place.label.clone(),
        reason: reason.to_string(),
    }
}
