//! Manifests: a tag resolved to one platform's manifest (an OCI index or Docker manifest
//! list narrowed to the arch's entry), each verified against its digest, and the
//! platforms images are for.

use reqwest::header::CONTENT_TYPE;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::body::{BodyFailure, MAX_DOCUMENT_BYTES, limit_text, read_whole, registry_words};
use super::http::with_retries;
use super::{Failure, Place, Registry, bad_manifest};
use crate::arch::Arch;
use crate::bundle::error::BundleError;
use crate::image_ref::ImageRef;

pub(crate) const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub(crate) const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";

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

impl Registry {
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
                    .map(|p| registry_words(&p))
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
                    doc.schema_version,
                    registry_words(&manifest.media_type)
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
        self.check_sizes(image, &place, arch, &config, &layers)?;
        Ok(Resolved {
            manifest,
            config,
            layers,
            platform,
            registry: place.label,
        })
    }

    /// Refuses, before anything is downloaded, a `config` larger than a manifest may be
    /// (it is read into memory) and an image whose blobs together are more than
    /// `--max-package-bytes`: what a registry makes the bundle write for one image is
    /// bounded by what its manifest declares (`blob` holds each blob to its size).
    fn check_sizes(
        &self,
        image: &ImageRef,
        place: &Place,
        arch: Arch,
        config: &Descriptor,
        layers: &[Descriptor],
    ) -> Result<(), BundleError> {
        if config.size > MAX_DOCUMENT_BYTES {
            return Err(bad_manifest(
                image,
                place,
                &format!(
                    "its config is {} bytes, more than the {} an image config may be",
                    config.size,
                    limit_text(MAX_DOCUMENT_BYTES)
                ),
            ));
        }
        let limit = self.settings.max_image_bytes;
        let total = layers
            .iter()
            .try_fold(config.size, |sum, layer| sum.checked_add(layer.size))
            .unwrap_or(u64::MAX);
        if total > limit {
            let layers = match layers.len() {
                1 => "1 layer".to_string(),
                n => format!("{n} layers"),
            };
            return Err(BundleError::TooLarge {
                image: image.to_string(),
                registry: place.label.clone(),
                what: format!("build for {arch} (its config and {layers} together)"),
                size: total,
                limit,
            });
        }
        Ok(())
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
        let timeout = self.settings.timeout;
        let (bytes, content_type, announced) = with_retries(retries, delay, image, place, || {
            let response = self.get(place, image, &path, Some(&accept))?;
            let response = self.check_status(response, image, place, None)?;
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
            let bytes =
                read_whole(response, MAX_DOCUMENT_BYTES, timeout).map_err(
                    |failure| match failure {
                        BodyFailure::Broken(reason) => Failure::Transient(reason),
                        BodyFailure::TooLarge => Failure::from(bad_manifest(
                            image,
                            place,
                            &format!(
                                "it is larger than {}, which no manifest or index is",
                                limit_text(MAX_DOCUMENT_BYTES)
                            ),
                        )),
                    },
                )?;
            Ok((bytes, content_type, announced))
        })?;
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

#[cfg(test)]
mod tests {
    use super::*;

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
