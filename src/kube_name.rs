//! Node names as Kubernetes takes them: an RFC 1123 subdomain (lowercase ASCII letters,
//! digits, `-` and `.`; at most 253 characters; dot-separated labels of 1 to 63, each
//! starting and ending with a letter or digit). The API server refuses any other Node
//! name, and edgecore refuses any other `hostnameOverride` (its config validation checks
//! it as a node name). keadm-batch holds `nodeName` to it at validation, and the cluster
//! layer again before a name goes into an API path, where `/`, `?` or `%` would address
//! another object.
//!
//! A leaf: it depends on nothing else in the crate.

/// The rule in words, for messages.
pub const RULE: &str = "lowercase letters, digits, '-' and '.', at most 253 characters, in dot-separated parts of at most 63 that start and end with a letter or digit";

/// What breaks the rule in `name`, in words; `None` when it is a Node name.
pub fn problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return Some("it is empty");
    }
    if name.len() > 253 {
        return Some("it is longer than 253 characters");
    }
    if name.chars().any(|c| c.is_ascii_uppercase()) {
        return Some("it has uppercase letters");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
    {
        return Some("it has characters other than lowercase letters, digits, '-' and '.'");
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Some("it has an empty part between dots");
        }
        if label.len() > 63 {
            return Some("a part between dots is longer than 63 characters");
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Some("a part between dots starts or ends with '-'");
        }
    }
    None
}

/// A Node name close to `name`, for a message's fix: lowercased, each other character
/// a `-`, dots and dashes trimmed where a part may not have them.
pub fn suggestion(name: &str) -> String {
    let mapped: String = name
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '.') => c,
            _ => '-',
        })
        .collect();
    let parts: Vec<String> = mapped
        .split('.')
        .map(|p| p.trim_matches('-').chars().take(63).collect::<String>())
        .map(|p| p.trim_matches('-').to_string())
        .filter(|p| !p.is_empty())
        .collect();
    let joined: String = parts.join(".").chars().take(253).collect();
    let joined = joined.trim_matches(|c| c == '-' || c == '.').to_string();
    if joined.is_empty() {
        "edge-0".to_string()
    } else {
        joined
    }
}

/// Whether `name` is a Node name.
pub fn is_node_name(name: &str) -> bool {
    problem(name).is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names_are_rfc_1123_subdomains() {
        for good in ["edge-0", "a", "1.10", "edge-00.site-a", &"a".repeat(63)] {
            assert!(is_node_name(good), "{good}");
        }
        let long = format!("{}.{}", "a".repeat(63), "b".repeat(190));
        assert_eq!(long.len(), 254);
        for (bad, why) in [
            ("", "it is empty"),
            ("Edge-0", "it has uppercase letters"),
            ("edge_0", "it has characters other than"),
            ("worker-1?x", "it has characters other than"),
            ("a/b", "it has characters other than"),
            ("edge-0 ", "it has characters other than"),
            ("-edge", "starts or ends with '-'"),
            ("edge-.x", "starts or ends with '-'"),
            ("edge..x", "an empty part"),
            (".edge", "an empty part"),
            (&"a".repeat(64), "longer than 63"),
            (&long, "longer than 253"),
        ] {
            let said = problem(bad).unwrap_or_default();
            assert!(said.contains(why), "{bad:?}: {said}");
            assert!(is_node_name(&suggestion(bad)), "{bad:?}");
        }
        assert_eq!(suggestion("Edge_01"), "edge-01");
    }
}
