//! Container image references, written out in full as the container runtimes store them.
//!
//! keadm asks the runtime for `kubeedge/installation-package:<version>`, containerd names
//! an image imported from a `docker save` archive `docker.io/kubeedge/installation-package:
//! <version>`, and docker lists it as `kubeedge/installation-package:<version>`. They are
//! one image. Every reference keadm-batch handles (what keadm will ask for, what an
//! archive provides, what a node's runtime lists, what `bundle` pulls from a registry and
//! names its archives after) is first written out in full the way the CRI and containerd
//! do (the rules of the distribution `reference` package's `ParseNormalizedNamed`): a
//! registry host (`docker.io` when the first path component names none: it has no `.` or
//! `:`, is not `localhost`, and is lower case), `library/` for docker.io's one-word names,
//! and `:latest` when neither a tag nor a digest is given.
//!
//! A leaf: it depends on nothing else in the crate.

use std::fmt;

/// The registry of references that name none: Docker Hub, as references spell it.
pub const DOCKER_HUB: &str = "docker.io";
/// docker.io's old name, which the runtimes store as docker.io.
const LEGACY_DOCKER_HUB: &str = "index.docker.io";
/// The longest tag the distribution rules allow.
const MAX_TAG_CHARS: usize = 128;

/// An image reference in full: `registry/repository[:tag][@digest]`, with a tag or a
/// digest (or both).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ImageRef {
    /// `docker.io`, `registry.k8s.io`, `127.0.0.1:5000`.
    registry: String,
    /// `kubeedge/installation-package`, `library/busybox`, `pause`.
    repository: String,
    tag: Option<String>,
    /// `sha256:<64 lowercase hex>`.
    digest: Option<String>,
}

/// Text that is not an image reference; the message says what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(String);

impl ImageRef {
    /// Reads a reference in any form a tool prints or an operator writes
    /// (`pause:3.9`, `kubeedge/installation-package:v1.23.1`,
    /// `registry.k8s.io/pause:3.9`, `localhost:5000/x@sha256:<hex>`) and writes it out in
    /// full. Refused, with the reason: empty text, an image id (`sha256:...`), an invalid
    /// tag, digest, registry host or repository path (lower-case letters, digits, `.`,
    /// `_`, `-`, separated by `/`; so also docker's `<none>:<none>`, blanks, upper case).
    pub fn parse(text: &str) -> Result<ImageRef, ParseError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(ParseError("an image reference is empty".into()));
        }
        if text.starts_with("sha256:") {
            return Err(ParseError(format!(
                "{text:?} is an image id, not an image reference"
            )));
        }
        let (name, digest) = match text.split_once('@') {
            Some((name, digest)) => {
                let hex = digest.strip_prefix("sha256:").unwrap_or("");
                if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(ParseError(format!(
                        "the digest in {text:?} is not sha256:<64 hex characters>"
                    )));
                }
                (name, Some(digest.to_ascii_lowercase()))
            }
            None => (text, None),
        };
        // A tag is after the last ':' that follows the last '/' (a ':' before it belongs
        // to the registry's port).
        let last_slash = name.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match name[last_slash..].rfind(':') {
            Some(i) => {
                let (name, tag) = name.split_at(last_slash + i);
                (name, Some(tag[1..].to_string()))
            }
            None => (name, None),
        };
        if let Some(tag) = &tag
            && (tag.is_empty()
                || tag.len() > MAX_TAG_CHARS
                || tag.starts_with(['.', '-'])
                || !tag
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b)))
        {
            return Err(ParseError(format!(
                "the tag {tag:?} in {text:?} is not a valid tag (letters, digits, '_', '.', \
                 '-', at most {MAX_TAG_CHARS}, not starting with '.' or '-')"
            )));
        }
        let (registry, path) = match name.split_once('/') {
            Some((first, rest))
                if first.contains(['.', ':'])
                    || first == "localhost"
                    || first != first.to_lowercase() =>
            {
                (first, rest.to_string())
            }
            _ => (DOCKER_HUB, name.to_string()),
        };
        let (host, port) = registry.split_once(':').unwrap_or((registry, "1"));
        if host.is_empty()
            || !host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-.".contains(&b))
            || port.is_empty()
            || !port.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(ParseError(format!(
                "the registry {registry:?} in {text:?} is not a host name with an optional port"
            )));
        }
        let registry = if registry == LEGACY_DOCKER_HUB {
            DOCKER_HUB
        } else {
            registry
        };
        if path.is_empty()
            || path.split('/').any(|part| {
                part.is_empty()
                    || !part.bytes().all(|b| {
                        b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b)
                    })
            })
        {
            return Err(ParseError(format!(
                "the repository {path:?} in {text:?} is not a valid name (lower-case letters, \
                 digits, '.', '_', '-', separated by '/')"
            )));
        }
        let repository = if registry == DOCKER_HUB && !path.contains('/') {
            format!("library/{path}")
        } else {
            path
        };
        let tag = if tag.is_none() && digest.is_none() {
            Some("latest".to_string())
        } else {
            tag
        };
        Ok(ImageRef {
            registry: registry.to_string(),
            repository,
            tag,
            digest,
        })
    }

    /// The registry host, with its port if any: `docker.io`, `127.0.0.1:5000`.
    pub fn registry(&self) -> &str {
        &self.registry
    }

    /// The repository path inside the registry: `kubeedge/installation-package`,
    /// `library/busybox`.
    pub fn repository(&self) -> &str {
        &self.repository
    }

    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    /// `sha256:<hex>`, when the reference pins one.
    pub fn digest(&self) -> Option<&str> {
        self.digest.as_deref()
    }

    /// The repository's last component: `installation-package`, `pause`.
    pub fn basename(&self) -> &str {
        self.repository
            .rsplit('/')
            .next()
            .unwrap_or(&self.repository)
    }

    /// What a registry's manifest endpoint is asked for: the digest when there is one,
    /// else the tag.
    pub fn manifest_reference(&self) -> &str {
        self.digest
            .as_deref()
            .or(self.tag.as_deref())
            .unwrap_or("latest")
    }

    /// The file name of this image's archive in an offline directory's `<arch>/images/`:
    /// `installation-package_v1.23.1.tar`, or with a digest only
    /// `pause_sha256-<first 16 hex>.tar`. `long` spells out the registry and the whole
    /// repository, for two images whose short names would collide.
    pub fn archive_name(&self, long: bool) -> String {
        let stem = if long {
            format!("{}/{}", self.registry, self.repository)
        } else {
            self.basename().to_string()
        };
        let version = match (&self.tag, &self.digest) {
            (Some(tag), _) => tag.clone(),
            (None, Some(digest)) => digest.replace(':', "-").chars().take(23).collect(),
            (None, None) => "latest".into(),
        };
        format!("{stem}_{version}.tar").replace(['/', ':'], "_")
    }
}

impl fmt::Display for ImageRef {
    /// The full name: `docker.io/kubeedge/installation-package:v1.23.1`, with
    /// `@sha256:...` when pinned by digest.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full(text: &str) -> String {
        ImageRef::parse(text)
            .unwrap_or_else(|e| panic!("{text} did not parse: {e}"))
            .to_string()
    }

    /// The cases of the distribution reference package's normalization that runtimes show.
    #[test]
    fn references_are_written_out_as_the_runtimes_store_them() {
        let digest = format!("sha256:{}", "ab".repeat(32));
        for (given, stored) in [
            (
                "kubeedge/installation-package:v1.23.1".to_string(),
                "docker.io/kubeedge/installation-package:v1.23.1".to_string(),
            ),
            (
                "docker.io/kubeedge/installation-package:v1.23.1".into(),
                "docker.io/kubeedge/installation-package:v1.23.1".into(),
            ),
            ("busybox".into(), "docker.io/library/busybox:latest".into()),
            (
                "index.docker.io/library/busybox:1".into(),
                "docker.io/library/busybox:1".into(),
            ),
            (
                "registry.k8s.io/pause:3.9".into(),
                "registry.k8s.io/pause:3.9".into(),
            ),
            ("localhost/pause".into(), "localhost/pause:latest".into()),
            (
                "localhost:5000/kubeedge/x:v1".into(),
                "localhost:5000/kubeedge/x:v1".into(),
            ),
            ("127.0.0.1:5000/x".into(), "127.0.0.1:5000/x:latest".into()),
            (
                "my-registry.io/installation-package:v1.10.0".into(),
                "my-registry.io/installation-package:v1.10.0".into(),
            ),
            (
                format!("registry.k8s.io/pause@sha256:{}", "AB".repeat(32)),
                format!("registry.k8s.io/pause@{digest}"),
            ),
            (
                format!("registry.k8s.io/pause:3.9@{digest}"),
                format!("registry.k8s.io/pause:3.9@{digest}"),
            ),
        ] {
            assert_eq!(full(&given), stored, "{given}");
        }
    }

    #[test]
    fn what_is_no_reference_is_refused_with_a_reason() {
        for (text, reason) in [
            ("", "empty"),
            (" ", "empty"),
            ("a b:1", "not a valid name"),
            ("sha256:0123abcd", "an image id"),
            ("<none>:<none>", "not a valid tag"),
            ("x:", "not a valid tag"),
            ("kubeedge/x:a/b", "not a valid name"),
            ("x@", "not sha256:<64"),
            ("x@sha256:abc", "not sha256:<64"),
            ("x@md5:aaaa", "not sha256:<64"),
            ("/x", "not a valid name"),
            ("x//y", "not a valid name"),
            ("registry.k8s.io/", "not a valid name"),
            ("kubeedge/X:1", "not a valid name"),
            ("Bad Repo/x", "not a host name"),
            ("host:port/x", "not a host name"),
        ] {
            let err = ImageRef::parse(text)
                .err()
                .unwrap_or_else(|| panic!("{text:?} parsed"));
            assert!(err.to_string().contains(reason), "{text:?}: {err}");
        }
    }

    #[test]
    fn parts() {
        let image = ImageRef::parse("kubeedge/installation-package:v1.23.1").unwrap();
        assert_eq!(image.registry(), "docker.io");
        assert_eq!(image.repository(), "kubeedge/installation-package");
        assert_eq!(image.basename(), "installation-package");
        assert_eq!(image.tag(), Some("v1.23.1"));
        assert_eq!(image.digest(), None);
        assert_eq!(image.manifest_reference(), "v1.23.1");
        assert_eq!(
            ImageRef::parse("pause:3.9"),
            ImageRef::parse("docker.io/library/pause:3.9")
        );
        let digest = format!("sha256:{}", "a".repeat(64));
        let pinned = ImageRef::parse(&format!("registry.k8s.io/pause@{digest}")).unwrap();
        assert_eq!(pinned.manifest_reference(), digest);
        assert_eq!(pinned.tag(), None);
        assert_eq!(
            pinned.archive_name(false),
            "pause_sha256-aaaaaaaaaaaaaaaa.tar"
        );
    }

    #[test]
    fn archive_names_follow_the_kit_layout() {
        let image = ImageRef::parse("kubeedge/installation-package:v1.23.1").unwrap();
        assert_eq!(
            image.archive_name(false),
            "installation-package_v1.23.1.tar"
        );
        assert_eq!(
            image.archive_name(true),
            "docker.io_kubeedge_installation-package_v1.23.1.tar"
        );
        let pause = ImageRef::parse("127.0.0.1:5000/pause:3.9").unwrap();
        assert_eq!(pause.archive_name(false), "pause_3.9.tar");
        assert_eq!(pause.archive_name(true), "127.0.0.1_5000_pause_3.9.tar");
    }
}
