//! Image references, read the way containerd's CRI plugin normalizes what keadm asks for:
//! `kubeedge/installation-package:v1.23.1` is `docker.io/kubeedge/installation-package:v1.23.1`,
//! `busybox` is `docker.io/library/busybox:latest`, and a first component with a `.` or a
//! `:`, or `localhost`, is a registry host. The normalized name is what an imported image
//! must be called for the runtime to find it when keadm asks.

use std::fmt;

/// Docker Hub's name in references, and the host its registry API answers on.
pub(crate) const DOCKER_HUB: &str = "docker.io";
pub(crate) const DOCKER_HUB_API: &str = "registry-1.docker.io";

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ImageRef {
    /// `docker.io`, `registry.k8s.io`, `127.0.0.1:5000`.
    pub registry: String,
    /// `kubeedge/installation-package`, `library/busybox`, `pause`.
    pub repository: String,
    /// `v1.23.1`; `latest` when neither a tag nor a digest is given.
    pub tag: Option<String>,
    /// `sha256:<64 hex>`.
    pub digest: Option<String>,
}

impl ImageRef {
    /// Parses and normalizes a reference; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<ImageRef, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("an image reference is empty".into());
        }
        let (name, digest) = match text.split_once('@') {
            Some((name, digest)) => {
                let hex = digest.strip_prefix("sha256:").unwrap_or("");
                if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(format!(
                        "the digest in {text:?} is not sha256:<64 hex characters>"
                    ));
                }
                (name, Some(digest.to_ascii_lowercase()))
            }
            None => (text, None),
        };
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
                || tag.len() > 128
                || tag.starts_with(['.', '-'])
                || !tag
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b)))
        {
            return Err(format!("the tag {tag:?} in {text:?} is not a valid tag"));
        }
        let (registry, path) = match name.split_once('/') {
            Some((first, rest))
                if first.contains(['.', ':'])
                    || first == "localhost"
                    || first != first.to_lowercase() =>
            {
                (first.to_string(), rest.to_string())
            }
            _ => (DOCKER_HUB.to_string(), name.to_string()),
        };
        let (host, port) = registry.split_once(':').unwrap_or((&registry, "1"));
        if host.is_empty()
            || !host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-.".contains(&b))
            || port.is_empty()
            || !port.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(format!(
                "the registry {registry:?} in {text:?} is not a host name with an optional port"
            ));
        }
        let registry = if registry == "index.docker.io" {
            DOCKER_HUB.to_string()
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
            return Err(format!(
                "the repository {path:?} in {text:?} is not a valid name (lower-case letters, \
                 digits, '.', '_', '-', separated by '/')"
            ));
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
            registry,
            repository,
            tag,
            digest,
        })
    }

    /// What the registry's manifest endpoint is asked for: the digest when there is one.
    pub fn reference(&self) -> &str {
        self.digest
            .as_deref()
            .or(self.tag.as_deref())
            .unwrap_or("latest")
    }

    /// The repository's last component: `installation-package`.
    pub fn basename(&self) -> &str {
        self.repository
            .rsplit('/')
            .next()
            .unwrap_or(&self.repository)
    }

    /// The archive's file name in `<arch>/images/`: `installation-package_v1.23.1.tar`, or
    /// with a digest `pause_sha256-<first 16 hex>.tar`. `long` spells out the registry and
    /// the whole repository, for two images whose short names would collide.
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
    /// The full normalized name: `docker.io/kubeedge/installation-package:v1.23.1`, with
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

    fn parsed(text: &str) -> String {
        ImageRef::parse(text).unwrap().to_string()
    }

    #[test]
    fn references_are_normalized_as_containerd_does() {
        assert_eq!(
            parsed("kubeedge/installation-package:v1.23.1"),
            "docker.io/kubeedge/installation-package:v1.23.1"
        );
        assert_eq!(parsed("busybox"), "docker.io/library/busybox:latest");
        assert_eq!(
            parsed("index.docker.io/library/busybox:1"),
            "docker.io/library/busybox:1"
        );
        assert_eq!(
            parsed("registry.k8s.io/pause:3.9"),
            "registry.k8s.io/pause:3.9"
        );
        assert_eq!(
            parsed("127.0.0.1:5000/edge/installation-package:v1"),
            "127.0.0.1:5000/edge/installation-package:v1"
        );
        assert_eq!(parsed("localhost/pause"), "localhost/pause:latest");
        let digest = format!("sha256:{}", "a".repeat(64));
        let pinned = ImageRef::parse(&format!("registry.k8s.io/pause@{digest}")).unwrap();
        assert_eq!(pinned.reference(), digest);
        assert_eq!(pinned.tag, None);
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

    #[test]
    fn malformed_references_are_refused_with_a_reason() {
        for (text, reason) in [
            ("", "empty"),
            ("kubeedge/X", "not a valid name"),
            ("kubeedge/x:", "not a valid tag"),
            ("kubeedge/x:a/b", "not a valid name"),
            ("x@sha256:abc", "not sha256:<64"),
            ("x@md5:aaaa", "not sha256:<64"),
            ("registry.k8s.io/", "not a valid name"),
            ("Bad Repo/x", "not a host name"),
            ("host:port/x", "not a host name"),
        ] {
            let err = ImageRef::parse(text).unwrap_err();
            assert!(err.contains(reason), "{text:?}: {err}");
        }
    }
}
