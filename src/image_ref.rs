//! Container image references, written out in full as the container runtimes store them.
//!
//! keadm asks the runtime for `kubeedge/installation-package:<version>`, containerd names
//! an image imported from a `docker save` archive `docker.io/kubeedge/installation-package:
//! <version>`, and docker lists it as `kubeedge/installation-package:<version>`. They are
//! one image. Every reference keadm-batch compares (what keadm will ask for, what an
//! archive provides, what a node's runtime lists) is first written out in full the way
//! the CRI and containerd do (the rules of the distribution `reference` package's
//! `ParseNormalizedNamed`): a registry host (`docker.io` when the first path component
//! names none), `library/` for docker.io's one-word names, and `:latest` when neither a
//! tag nor a digest is given.
//!
//! A leaf: it depends on nothing else in the crate.

use std::fmt;

/// The registry of references that name none.
const DEFAULT_DOMAIN: &str = "docker.io";
/// docker.io's old name, which the runtimes store as docker.io.
const LEGACY_DEFAULT_DOMAIN: &str = "index.docker.io";

/// An image reference in full: `registry/path[:tag][@digest]`, with a tag or a digest.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ImageRef {
    /// `registry/path`, e.g. `docker.io/kubeedge/installation-package`.
    name: String,
    tag: Option<String>,
    /// `sha256:<hex>`.
    digest: Option<String>,
}

impl ImageRef {
    /// Reads a reference in any form a tool prints or an operator writes
    /// (`pause:3.9`, `kubeedge/installation-package:v1.23.1`,
    /// `registry.k8s.io/pause:3.9`, `localhost:5000/x@sha256:...`) and writes it out in
    /// full. `None` for text that cannot be a reference: empty, blank inside, an image
    /// id (`sha256:...`), docker's `<none>:<none>`, or an upper-case repository path.
    pub fn parse(text: &str) -> Option<ImageRef> {
        let text = text.trim();
        if text.is_empty()
            || text.chars().any(|c| c.is_whitespace() || c.is_control())
            || text.contains('<')
            || text.starts_with("sha256:")
        {
            return None;
        }
        let (rest, digest) = match text.split_once('@') {
            Some((rest, digest)) if !digest.is_empty() => (rest, Some(digest.to_string())),
            Some(_) => return None,
            None => (text, None),
        };
        // A tag is after the last ':' that follows the last '/' (a ':' before it belongs
        // to the registry's port).
        let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match rest[last_slash..].rfind(':') {
            Some(i) => {
                let at = last_slash + i;
                let tag = &rest[at + 1..];
                if tag.is_empty() {
                    return None;
                }
                (&rest[..at], Some(tag.to_string()))
            }
            None => (rest, None),
        };
        if name.is_empty() || name.starts_with('/') || name.ends_with('/') || name.contains("//") {
            return None;
        }
        let (domain, path) = match name.split_once('/') {
            Some((first, path))
                if first.contains(['.', ':'])
                    || first == "localhost"
                    || first.to_lowercase() != first =>
            {
                (first, path.to_string())
            }
            _ => (DEFAULT_DOMAIN, name.to_string()),
        };
        let domain = if domain == LEGACY_DEFAULT_DOMAIN {
            DEFAULT_DOMAIN
        } else {
            domain
        };
        // Repository paths are lower case; the runtimes refuse anything else.
        if path.to_lowercase() != path {
            return None;
        }
        let path = if domain == DEFAULT_DOMAIN && !path.contains('/') {
            format!("library/{path}")
        } else {
            path
        };
        let tag = if tag.is_none() && digest.is_none() {
            Some("latest".to_string())
        } else {
            tag
        };
        Some(ImageRef {
            name: format!("{domain}/{path}"),
            tag,
            digest,
        })
    }

    /// `registry/path`, without tag or digest.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The last component of the path: `installation-package`, `pause`.
    pub fn short_name(&self) -> &str {
        self.name.rsplit('/').next().unwrap_or(&self.name)
    }

    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
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
            .unwrap_or_else(|| panic!("{text} did not parse"))
            .to_string()
    }

    /// The cases of the distribution reference package's normalization that runtimes show.
    #[test]
    fn references_are_written_out_as_the_runtimes_store_them() {
        for (given, stored) in [
            (
                "kubeedge/installation-package:v1.23.1",
                "docker.io/kubeedge/installation-package:v1.23.1",
            ),
            (
                "docker.io/kubeedge/installation-package:v1.23.1",
                "docker.io/kubeedge/installation-package:v1.23.1",
            ),
            ("busybox", "docker.io/library/busybox:latest"),
            (
                "index.docker.io/library/busybox:1",
                "docker.io/library/busybox:1",
            ),
            ("registry.k8s.io/pause:3.9", "registry.k8s.io/pause:3.9"),
            ("localhost/pause:3.9", "localhost/pause:3.9"),
            (
                "localhost:5000/kubeedge/x:v1",
                "localhost:5000/kubeedge/x:v1",
            ),
            ("127.0.0.1:5000/x", "127.0.0.1:5000/x:latest"),
            (
                "my-registry.io/installation-package:v1.10.0",
                "my-registry.io/installation-package:v1.10.0",
            ),
            (
                "registry.k8s.io/pause@sha256:abcd",
                "registry.k8s.io/pause@sha256:abcd",
            ),
            (
                "registry.k8s.io/pause:3.9@sha256:abcd",
                "registry.k8s.io/pause:3.9@sha256:abcd",
            ),
        ] {
            assert_eq!(full(given), stored, "{given}");
        }
    }

    #[test]
    fn what_is_no_reference_is_refused() {
        for text in [
            "",
            " ",
            "a b:1",
            "sha256:0123abcd",
            "<none>:<none>",
            "x:",
            "x@",
            "/x",
            "x//y",
            "kubeedge/X:1",
        ] {
            assert_eq!(ImageRef::parse(text), None, "{text:?}");
        }
    }

    #[test]
    fn parts() {
        let image = ImageRef::parse("kubeedge/installation-package:v1.23.1").unwrap();
        assert_eq!(image.name(), "docker.io/kubeedge/installation-package");
        assert_eq!(image.short_name(), "installation-package");
        assert_eq!(image.tag(), Some("v1.23.1"));
        assert_eq!(
            ImageRef::parse("pause:3.9"),
            ImageRef::parse("docker.io/library/pause:3.9")
        );
    }
}
