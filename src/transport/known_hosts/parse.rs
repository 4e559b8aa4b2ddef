//! Reading an OpenSSH known-hosts file ourselves: markers, host patterns, hashed names.

use base64::Engine as _;
use base64::alphabet;
use base64::engine::{GeneralPurpose, GeneralPurposeConfig};

/// The marker a line starts with, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Marker {
    Plain,
    CertAuthority,
    Revoked,
}

/// How a line's host field matches a host name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum HostMatch {
    No,
    /// By the name itself, plain or hashed.
    Exact,
    /// Only by this wildcard pattern of the line.
    Pattern(String),
}

/// One parseable line of the file.
#[derive(Debug)]
pub(super) struct Entry {
    /// 1-based, counting every line of the file.
    pub(super) line: usize,
    pub(super) marker: Marker,
    hosts: Hosts,
    /// The host field as written, for messages.
    pub(super) hosts_text: String,
    pub(super) key_type: String,
    /// The public key blob, as a server sends it.
    pub(super) key: Vec<u8>,
}

impl Entry {
    /// Whether this line's host field covers `lookup` (`host`, or `[host]:port` off port
    /// 22). Names compare case-insensitively, as OpenSSH lower-cases both sides.
    pub(super) fn matches(&self, lookup: &str) -> HostMatch {
        match &self.hosts {
            Hosts::Hashed { salt, hash } => {
                // OpenSSH hashes the lower-cased name; a name hashed as written by another
                // tool is tried too, as it costs one HMAC.
                let lower = lookup.to_ascii_lowercase();
                let found = hmac_sha1(salt, lower.as_bytes()).as_ref() == Some(hash)
                    || (lower != lookup
                        && hmac_sha1(salt, lookup.as_bytes()).as_ref() == Some(hash));
                if found {
                    HostMatch::Exact
                } else {
                    HostMatch::No
                }
            }
            Hosts::Patterns => match_pattern_list(&self.hosts_text, lookup),
        }
    }
}

#[derive(Debug)]
enum Hosts {
    /// `|1|<base64 salt>|<base64 HMAC-SHA1 of the name>`, as `HashKnownHosts` writes.
    Hashed { salt: Vec<u8>, hash: Vec<u8> },
    /// A comma-separated list of names and patterns, the entry's `hosts_text`.
    Patterns,
}

/// Every line we can read, in file order. Comments, blank lines and lines we cannot
/// parse (unknown markers, bad base64, RSA1 keys) are skipped; they stay in the file,
/// which is only ever appended to.
pub(super) fn parse(text: &str) -> Vec<Entry> {
    text.lines()
        .enumerate()
        .filter_map(|(i, line)| parse_line(i + 1, line))
        .collect()
}

fn parse_line(number: usize, line: &str) -> Option<Entry> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let mut fields = line.split_whitespace();
    let mut first = fields.next()?;
    // Markers are case-sensitive in OpenSSH; an unknown one makes the line invalid.
    let marker = match first {
        "@cert-authority" => Marker::CertAuthority,
        "@revoked" => Marker::Revoked,
        m if m.starts_with('@') => return None,
        _ => Marker::Plain,
    };
    if marker != Marker::Plain {
        first = fields.next()?;
    }
    let hosts = if first.starts_with('|') {
        parse_hashed(first)?
    } else {
        Hosts::Patterns
    };
    let key_type = fields.next()?;
    let key = base64_decode(fields.next()?)?;
    // The blob names its own type; a line whose two names differ is corrupt.
    if key_type_of(&key) != Some(key_type) {
        return None;
    }
    Some(Entry {
        line: number,
        marker,
        hosts,
        hosts_text: first.to_string(),
        key_type: key_type.to_string(),
        key,
    })
}

fn parse_hashed(field: &str) -> Option<Hosts> {
    let (salt, hash) = field.strip_prefix("|1|")?.split_once('|')?;
    let salt = base64_decode(salt)?;
    let hash = base64_decode(hash)?;
    (!salt.is_empty() && hash.len() == 20).then_some(Hosts::Hashed { salt, hash })
}

/// OpenSSH's `match_hostname`: a negated pattern (`!p`) that matches excludes the host
/// whatever else matches; otherwise any positive pattern that matches includes it.
fn match_pattern_list(list: &str, lookup: &str) -> HostMatch {
    let name = lookup.to_ascii_lowercase();
    let mut found = HostMatch::No;
    for pattern in list.split(',') {
        let (negated, pattern) = match pattern.strip_prefix('!') {
            Some(p) => (true, p),
            None => (false, pattern),
        };
        if !glob(name.as_bytes(), pattern.to_ascii_lowercase().as_bytes()) {
            continue;
        }
        if negated {
            return HostMatch::No;
        }
        if !pattern.contains(['*', '?']) {
            found = HostMatch::Exact;
        } else if found == HostMatch::No {
            found = HostMatch::Pattern(pattern.to_string());
        }
    }
    found
}

/// `*` matches any run of characters (`:`, `]` and `.` included), `?` any one.
fn glob(text: &[u8], pattern: &[u8]) -> bool {
    let (mut t, mut p) = (0, 0);
    // Where the last `*` was, and the text position it is currently made to cover up to.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && (pattern[p] == b'?' || pattern[p] == text[t]) {
            t += 1;
            p += 1;
        } else if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p + 1, t));
            p += 1;
        } else if let Some((after, covered)) = star {
            // Let the `*` swallow one more character and try again from there.
            star = Some((after, covered + 1));
            p = after;
            t = covered + 1;
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// The type name a key blob starts with (an SSH string: 4-byte length, then the name).
pub(super) fn key_type_of(blob: &[u8]) -> Option<&str> {
    let len = u32::from_be_bytes(blob.get(..4)?.try_into().ok()?) as usize;
    let name = std::str::from_utf8(blob.get(4..4usize.checked_add(len)?)?).ok()?;
    (!name.is_empty()).then_some(name)
}

fn hmac_sha1(key: &[u8], data: &[u8]) -> Option<Vec<u8>> {
    use openssl::{hash::MessageDigest, pkey::PKey, sign::Signer};
    let key = PKey::hmac(key).ok()?;
    let mut signer = Signer::new(MessageDigest::sha1(), &key).ok()?;
    signer.update(data).ok()?;
    signer.sign_to_vec().ok()
}

/// Standard base64 with padding, as known-hosts lines carry keys and salts. Padding is
/// required; bits past the last byte are not checked (libcrypto's decoder, which read
/// these files before, did not check them either).
const KEY_BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true),
);

pub(super) fn base64_encode(bytes: &[u8]) -> String {
    KEY_BASE64.encode(bytes)
}

pub(super) fn base64_decode(text: &str) -> Option<Vec<u8>> {
    KEY_BASE64.decode(text).ok()
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A key blob as the wire format has it: the type name as an SSH string, then `body`.
    pub(crate) fn blob(key_type: &str, body: &[u8]) -> Vec<u8> {
        let mut out = (key_type.len() as u32).to_be_bytes().to_vec();
        out.extend_from_slice(key_type.as_bytes());
        out.extend_from_slice(body);
        out
    }

    pub(crate) fn key_text(key_type: &str, body: &[u8]) -> String {
        format!("{key_type} {}", base64_encode(&blob(key_type, body)))
    }

    #[test]
    fn comments_blank_and_unparseable_lines_are_skipped_and_line_numbers_kept() {
        let a = key_text("ssh-ed25519", b"A");
        let text = format!(
            "# comment\n\n   \n{a} trailing-host-field-missing\nhost1 {a} a comment\n\
             host2 ssh-ed25519 !!!notbase64\nhost3 ssh-rsa {}\n@unknown-marker host4 {a}\n\
             host5\n  host6 {a}\r\n",
            base64_encode(&blob("ssh-ed25519", b"mismatched type")),
        );
        let entries = parse(&text);
        let lines: Vec<(usize, &str)> = entries
            .iter()
            .map(|e| (e.line, e.hosts_text.as_str()))
            .collect();
        assert_eq!(lines, [(5, "host1"), (10, "host6")]);
        assert_eq!(entries[0].key_type, "ssh-ed25519");
        assert_eq!(entries[0].key, blob("ssh-ed25519", b"A"));
        assert_eq!(entries[0].marker, Marker::Plain);
    }

    #[test]
    fn markers_are_read() {
        let a = key_text("ssh-ed25519", b"A");
        let entries = parse(&format!(
            "@revoked * {a}\n@cert-authority *.example.com {a}\n@Revoked h {a}\n"
        ));
        assert_eq!(
            entries.len(),
            2,
            "markers are case-sensitive, as in OpenSSH"
        );
        assert_eq!(entries[0].marker, Marker::Revoked);
        assert_eq!(entries[0].hosts_text, "*");
        assert_eq!(entries[1].marker, Marker::CertAuthority);
        assert_eq!(entries[1].hosts_text, "*.example.com");
    }

    fn host_match(hosts: &str, lookup: &str) -> HostMatch {
        let entries = parse(&format!("{hosts} {}\n", key_text("ssh-ed25519", b"A")));
        assert_eq!(entries.len(), 1, "{hosts}");
        entries[0].matches(lookup)
    }

    #[test]
    fn plain_names_match_exactly_and_case_insensitively() {
        assert_eq!(host_match("10.0.0.1", "10.0.0.1"), HostMatch::Exact);
        assert_eq!(host_match("10.0.0.1", "10.0.0.10"), HostMatch::No);
        assert_eq!(
            host_match("a,b,node.example", "node.example"),
            HostMatch::Exact
        );
        // Upper-case names in either place (the fleet's nodes are IP addresses, so this is
        // only tested here).
        assert_eq!(
            host_match("Node-A.Example", "node-a.example"),
            HostMatch::Exact
        );
        assert_eq!(
            host_match("node-a.example", "NODE-A.example"),
            HostMatch::Exact
        );
        // A plain `host` line is port 22 only; other ports are `[host]:port`.
        assert_eq!(host_match("10.0.0.1", "[10.0.0.1]:2222"), HostMatch::No);
        assert_eq!(
            host_match("[10.0.0.1]:2222", "[10.0.0.1]:2222"),
            HostMatch::Exact
        );
        assert_eq!(host_match("[10.0.0.1]:2222", "10.0.0.1"), HostMatch::No);
    }

    #[test]
    fn wildcards_and_negation_match_as_in_openssh() {
        let pattern = |p: &str| HostMatch::Pattern(p.to_string());
        assert_eq!(host_match("10.0.0.*", "10.0.0.17"), pattern("10.0.0.*"));
        assert_eq!(host_match("10.0.0.*", "10.0.1.17"), HostMatch::No);
        assert_eq!(host_match("10.0.0.?", "10.0.0.7"), pattern("10.0.0.?"));
        assert_eq!(host_match("10.0.0.?", "10.0.0.17"), HostMatch::No);
        assert_eq!(host_match("*", "anything"), pattern("*"));
        assert_eq!(
            host_match("*.Example.COM", "edge1.example.com"),
            pattern("*.Example.COM")
        );
        assert_eq!(host_match("a*b*c", "axxbyyc"), pattern("a*b*c"));
        assert_eq!(host_match("a*b*c", "axxbyy"), HostMatch::No);
        assert_eq!(
            host_match("[10.0.*]:*", "[10.0.3.4]:2222"),
            pattern("[10.0.*]:*")
        );
        assert_eq!(host_match("[10.0.*]:*", "10.0.3.4"), HostMatch::No);
        // A negated pattern that matches excludes the host whatever else matches.
        assert_eq!(host_match("10.0.0.*,!10.0.0.5", "10.0.0.5"), HostMatch::No);
        assert_eq!(
            host_match("!10.0.0.5,10.0.0.*", "10.0.0.6"),
            pattern("10.0.0.*")
        );
        assert_eq!(host_match("!10.0.0.5", "10.0.0.6"), HostMatch::No);
        // An exact name wins over a pattern on the same line.
        assert_eq!(
            host_match("10.0.0.*,10.0.0.5", "10.0.0.5"),
            HostMatch::Exact
        );
    }

    #[test]
    fn hashed_names_match_their_host_only() {
        // Made by `ssh-keygen -H` from `node.example ...` and `[10.0.0.7]:2222 ...`.
        let key =
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICNga3oayKGghpJbhpiiBWyD7NwBcmOI/yXgq3AOMj2v";
        let text = format!(
            "|1|GDAapdZObj2Hq819VEZ04ITuxU4=|/zG77F+GRwXnaL8WKNWXYF3dPyo= {key}\n\
             |1|oj08ThQMYPtZskVDT0cXKOlbvZQ=|3xHv0bK+RbwkEYtNYvh3l/qmsAY= {key}\n\
             |1|broken {key}\n|2|GDAapdZObj2Hq819VEZ04ITuxU4=|/zG77F+GRwXnaL8WKNWXYF3dPyo= {key}\n"
        );
        let entries = parse(&text);
        assert_eq!(entries.len(), 2, "malformed hashes are skipped");
        assert_eq!(entries[0].matches("node.example"), HostMatch::Exact);
        assert_eq!(entries[0].matches("Node.Example"), HostMatch::Exact);
        assert_eq!(entries[0].matches("node.example2"), HostMatch::No);
        assert_eq!(entries[0].matches("[10.0.0.7]:2222"), HostMatch::No);
        assert_eq!(entries[1].matches("[10.0.0.7]:2222"), HostMatch::Exact);
        assert_eq!(entries[1].matches("10.0.0.7"), HostMatch::No);
    }

    #[test]
    fn key_type_is_read_from_the_blob() {
        assert_eq!(
            key_type_of(&blob("ssh-ed25519", b"xyz")),
            Some("ssh-ed25519")
        );
        assert_eq!(key_type_of(&blob("", b"")), None);
        assert_eq!(key_type_of(&[0, 0, 0, 9, b'a']), None);
        assert_eq!(key_type_of(&[0, 0]), None);
    }

    #[test]
    fn base64_round_trips() {
        for data in [&b""[..], b"f", b"fo", b"foo", b"foobar"] {
            assert_eq!(base64_decode(&base64_encode(data)).as_deref(), Some(data));
        }
        assert_eq!(base64_encode(b"fo"), "Zm8=");
        assert_eq!(base64_decode("!!!!"), None);
    }

    #[test]
    fn base64_matches_rfc4648_and_what_libcrypto_accepted() {
        // RFC 4648's test vectors.
        for (data, text) in [
            (&b""[..], ""),
            (b"f", "Zg=="),
            (b"fo", "Zm8="),
            (b"foo", "Zm9v"),
            (b"foob", "Zm9vYg=="),
            (b"fooba", "Zm9vYmE="),
            (b"foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64_encode(data), text);
            assert_eq!(base64_decode(text).as_deref(), Some(data), "{text}");
        }
        // Both base64 symbols beyond letters and digits are the standard alphabet's.
        assert_eq!(base64_encode(&[0xfb, 0xff]), "+/8=");
        assert_eq!(base64_decode("+/8=").as_deref(), Some(&[0xfb, 0xff][..]));
        assert_eq!(base64_decode("-_8="), None);
        // Unpadded text was refused, and nonzero bits past the last byte were ignored.
        assert_eq!(base64_decode("Zg"), None);
        assert_eq!(base64_decode("Zm8"), None);
        assert_eq!(base64_decode("Zh==").as_deref(), Some(&b"f"[..]));
        assert_eq!(base64_decode("Zg=a"), None);
    }
}
