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
    /// full. Refused, with the reason: empty text, an image id (`sha256:...`), a tag,
    /// registry host or repository path component that does not follow the distribution
    /// spec's grammar (a component is runs of lower-case letters and digits joined by `.`,
    /// `_`, `__` or `-`s; so also docker's `<none>:<none>`, blanks, upper case, a leading
    /// `-` or `.`), a digest that is not `sha256:<64 hex>`.
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
            && !follows_tag_rule(tag)
        {
            return Err(ParseError(format!(
                "the tag {tag:?} in {text:?} is not a valid tag: {TAG_RULE}"
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
        if !follows_host_rule(registry) {
            return Err(ParseError(format!(
                "the registry {registry:?} in {text:?} is not a host name with an optional \
                 port: {HOST_RULE}"
            )));
        }
        let registry = if registry == LEGACY_DOCKER_HUB {
            DOCKER_HUB
        } else {
            registry
        };
        if let Some(part) = path
            .split('/')
            .find(|part| !follows_path_component_rule(part))
        {
            return Err(ParseError(format!(
                "the repository {path:?} in {text:?} is not a valid name: its component \
                 {part:?} does not follow {PATH_COMPONENT_RULE}"
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

/// The distribution spec's rule for a repository path component, in words and as its
/// grammar writes it, for messages.
const PATH_COMPONENT_RULE: &str = "the distribution spec's rule for a path component, \
     lower-case letters and digits in runs joined by one '.', one or two '_' or any number \
     of '-' ([a-z0-9]+((\\.|_|__|-+)[a-z0-9]+)*), so it neither starts nor ends with a \
     separator";
/// The distribution spec's rule for a tag, for messages.
const TAG_RULE: &str = "the distribution spec's rule for a tag is letters, digits, '_', '.' \
     and '-', at most 128, not starting with '.' or '-' ([A-Za-z0-9_][A-Za-z0-9._-]{0,127})";
/// The distribution spec's rule for a registry host, for messages.
const HOST_RULE: &str = "the distribution spec's rule for a host is names of letters, \
     digits and '-' joined by '.', each starting and ending with a letter or digit, then \
     ':<port digits>' if a port is given";

/// Whether `part` is a path component by the distribution spec's grammar:
/// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`. So a component never starts with `-` or `.`,
/// which an archive named after it must not (`safe_name`), and is never `.` or `..`.
fn follows_path_component_rule(part: &str) -> bool {
    let bytes = part.as_bytes();
    let in_run = |i: usize| {
        bytes
            .get(i)
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    let mut i = 0;
    loop {
        // A run of letters and digits, then the end or a separator and the next run.
        if !in_run(i) {
            return false;
        }
        while in_run(i) {
            i += 1;
        }
        match bytes.get(i) {
            None => return true,
            Some(b'.') => i += 1,
            Some(b'_') => {
                i += if bytes.get(i + 1) == Some(&b'_') {
                    2
                } else {
                    1
                }
            }
            Some(b'-') => {
                while bytes.get(i) == Some(&b'-') {
                    i += 1;
                }
            }
            Some(_) => return false,
        }
    }
}

/// Whether `tag` is a tag by the distribution spec's grammar:
/// `[A-Za-z0-9_][A-Za-z0-9._-]{0,127}`.
fn follows_tag_rule(tag: &str) -> bool {
    tag.len() <= MAX_TAG_CHARS
        && tag
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
        && tag
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
}

/// Whether `registry` is a host with an optional port by the distribution reference
/// grammar's `domain`: components of letters, digits and `-` that start and end with a
/// letter or digit, joined by `.`, then `:<digits>`. (Its bracketed IPv6 form is not
/// taken: no runtime keadm-batch drives lists one, and an archive name could not hold it.)
fn follows_host_rule(registry: &str) -> bool {
    let (host, port) = match registry.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (registry, None),
    };
    let component = |c: &str| {
        let bytes = c.as_bytes();
        bytes.first().is_some_and(u8::is_ascii_alphanumeric)
            && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
            && bytes
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || *b == b'-')
    };
    host.split('.').all(component)
        && port.is_none_or(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
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
            // The distribution spec's path components: runs of [a-z0-9] joined by '.',
            // '_', '__' or '-'s, so no separator at either end, none other in a row.
            ("-x:1", "does not follow the distribution spec's rule"),
            (".x", "does not follow the distribution spec's rule"),
            ("_x", "does not follow the distribution spec's rule"),
            ("kubeedge/-x:1", "its component \"-x\""),
            ("kubeedge/.x:1", "its component \".x\""),
            ("kubeedge/x-:1", "its component \"x-\""),
            ("kubeedge/x.:1", "its component \"x.\""),
            ("kubeedge/x..y:1", "its component \"x..y\""),
            ("kubeedge/x___y:1", "its component \"x___y\""),
            ("kubeedge/x._y:1", "its component \"x._y\""),
            ("kubeedge/x-.y:1", "its component \"x-.y\""),
            ("registry.k8s.io/./x", "its component \".\""),
            ("registry.k8s.io/../x", "its component \"..\""),
            // Registry hosts: the spec's domain components, joined by '.'.
            (".foo/x", "not a host name"),
            ("-foo.io/x", "not a host name"),
            ("foo-.io/x", "not a host name"),
            ("a..b/x", "not a host name"),
            ("foo.io./x", "not a host name"),
        ] {
            let err = ImageRef::parse(text)
                .err()
                .unwrap_or_else(|| panic!("{text:?} parsed"));
            assert!(err.to_string().contains(reason), "{text:?}: {err}");
        }
    }

    #[test]
    fn what_the_distribution_spec_allows_is_accepted() {
        for (given, stored) in [
            ("kubeedge/a--b:1", "docker.io/kubeedge/a--b:1"),
            ("kubeedge/a__b:1", "docker.io/kubeedge/a__b:1"),
            ("kubeedge/a.b_c-d:1", "docker.io/kubeedge/a.b_c-d:1"),
            ("a---b/0/9x", "docker.io/a---b/0/9x:latest"),
            (
                "registry.k8s.io/pause:_3.9-x",
                "registry.k8s.io/pause:_3.9-x",
            ),
            ("my-registry.io/a:B", "my-registry.io/a:B"),
            ("Upper.Example:1/a:1", "Upper.Example:1/a:1"),
        ] {
            assert_eq!(full(given), stored, "{given}");
        }
    }

    /// The reason names the rule broken and shows the reference escaped: a control
    /// character in it reaches no console raw.
    #[test]
    fn a_refusal_names_the_rule_and_shows_the_reference_escaped() {
        let err = ImageRef::parse("kubeedge/-x\u{1b}[2J:1")
            .unwrap_err()
            .to_string();
        assert!(!err.contains('\u{1b}'), "{err}");
        assert_eq!(
            err,
            "the repository \"kubeedge/-x\\u{1b}[2J\" in \"kubeedge/-x\\u{1b}[2J:1\" is not a \
             valid name: its component \"-x\\u{1b}[2J\" does not follow the distribution \
             spec's rule for a path component, lower-case letters and digits in runs joined \
             by one '.', one or two '_' or any number of '-' ([a-z0-9]+((\\.|_|__|-+)[a-z0-9]+)*), \
             so it neither starts nor ends with a separator"
        );
        let err = ImageRef::parse("x:.1\n").unwrap_err().to_string();
        assert_eq!(
            err,
            "the tag \".1\" in \"x:.1\" is not a valid tag: the distribution spec's rule for \
             a tag is letters, digits, '_', '.' and '-', at most 128, not starting with '.' \
             or '-' ([A-Za-z0-9_][A-Za-z0-9._-]{0,127})"
        );
        let err = ImageRef::parse("x:a\nb").unwrap_err().to_string();
        assert!(err.starts_with("the tag \"a\\nb\" in \"x:a\\nb\""), "{err}");
        let err = ImageRef::parse("-foo.io/x").unwrap_err().to_string();
        assert_eq!(
            err,
            "the registry \"-foo.io\" in \"-foo.io/x\" is not a host name with an optional \
             port: the distribution spec's rule for a host is names of letters, digits and \
             '-' joined by '.', each starting and ending with a letter or digit, then \
             ':<port digits>' if a port is given"
        );
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
