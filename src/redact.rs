//! The one place that knows what is secret and masks it in every output.
//!
//! Passwords, passphrases, values read with `{{env "X"}}` and `--token` values are
//! wrapped in [`Secret`] as soon as they are read, so they cannot be printed by accident
//! (`Debug` and `Display` both show `***`). Text that may contain them (the rendered
//! command, remote output, error messages) goes through a [`Redactor`] before it is
//! written anywhere.

use std::fmt;

/// The mask written wherever a secret would appear.
pub const MASK: &str = "***";

/// A secret string. It prints as `***`; only [`Secret::expose`] gives the value.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The real value, for the one place that must send it (auth, sudo's stdin).
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(MASK)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(MASK)
    }
}

/// Masks a known set of secret values, and `--token` values, in any text.
#[derive(Clone, Debug, Default)]
pub struct Redactor {
    /// Longest first, so a secret that contains another is masked whole.
    secrets: Vec<Secret>,
}

impl Redactor {
    pub fn new() -> Redactor {
        Redactor::default()
    }

    /// Adds a value to mask. Values shorter than 3 characters are ignored: masking every
    /// `a` in a transcript would destroy it and hide nothing of worth.
    pub fn add(&mut self, secret: &Secret) {
        if secret.expose().chars().count() >= 3 && !self.secrets.contains(secret) {
            self.secrets.push(secret.clone());
            self.secrets
                .sort_by_key(|s| std::cmp::Reverse(s.expose().len()));
        }
    }

    /// The length in bytes of the longest secret (0 when there is none).
    pub fn longest(&self) -> usize {
        self.secrets.first().map_or(0, |s| s.expose().len())
    }

    pub fn extend<'a>(&mut self, secrets: impl IntoIterator<Item = &'a Secret>) {
        for secret in secrets {
            self.add(secret);
        }
    }

    /// The text with every known secret, every `--token` value and every word shaped
    /// like a join token replaced by `***`.
    pub fn redact(&self, text: &str) -> String {
        let mut out = mask_token_shaped(&mask_token_flags(text));
        for secret in &self.secrets {
            if out.contains(secret.expose()) {
                out = out.replace(secret.expose(), MASK);
            }
        }
        out
    }
}

/// Masks the value of `--token=V` and `--token V` (keadm join's flag), whatever it is.
pub fn mask_token_flags(text: &str) -> String {
    const FLAG: &str = "--token";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find(FLAG) {
        let after = &rest[pos + FLAG.len()..];
        out.push_str(&rest[..pos + FLAG.len()]);
        let (sep, value_start) = if let Some(stripped) = after.strip_prefix('=') {
            ("=", stripped)
        } else if after.starts_with([' ', '\t']) {
            let trimmed = after.trim_start_matches([' ', '\t']);
            (&after[..after.len() - trimmed.len()], trimmed)
        } else {
            // `--token-file` or similar: not the flag we mask.
            rest = after;
            continue;
        };
        let value_len = token_value_len(value_start);
        out.push_str(sep);
        if value_len > 0 {
            out.push_str(MASK);
        }
        rest = &value_start[value_len..];
    }
    out.push_str(rest);
    out
}

/// Masks every word shaped like a KubeEdge join token: 64 hex digits (the CA hash), a
/// dot, then a JWT (three base64url parts joined by dots). A token that no config names
/// (a node's leftover, another cluster's) is still a credential.
pub fn mask_token_shaped(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut i = 0;
    while i + 64 < bytes.len() {
        // Exactly 64 hex digits: none just before (`-t<token>` still counts).
        let starts_word = i == 0 || !bytes[i - 1].is_ascii_hexdigit();
        if starts_word && let Some(len) = token_shape_len(&bytes[i..]) {
            out.push_str(&text[copied..i]);
            out.push_str(MASK);
            i += len;
            copied = i;
        } else {
            i += 1;
        }
    }
    out.push_str(&text[copied..]);
    out
}

/// The length of the join token at the start of `b`, if one is there.
fn token_shape_len(b: &[u8]) -> Option<usize> {
    let hex = b.iter().take_while(|c| c.is_ascii_hexdigit()).count();
    if hex != 64 || b.get(64) != Some(&b'.') {
        return None;
    }
    let is_b64url = |c: &u8| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'_';
    let mut at = 65;
    for part in 0..3 {
        let len = b[at..].iter().take_while(|c| is_b64url(c)).count();
        if len == 0 {
            return None;
        }
        at += len;
        if part < 2 {
            if b.get(at) != Some(&b'.') {
                return None;
            }
            at += 1;
        }
    }
    Some(at)
}

/// Length of a shell word starting at `s`, honouring simple quotes.
fn token_value_len(s: &str) -> usize {
    let mut quote: Option<char> = None;
    for (i, c) in s.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            // Tokens are `<hex>.<JWT>`: base64url and dots. Anything else ends the value,
            // so the `:` after a token in an error message survives.
            None if c.is_ascii_alphanumeric() || "._-+/=".contains(c) => {}
            None => return i,
        }
    }
    s.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_never_prints() {
        let s = Secret::new("hunter22");
        assert_eq!(format!("{s} {s:?}"), "*** ***");
    }

    #[test]
    fn token_flag_values_are_masked() {
        assert_eq!(
            mask_token_flags("join --token=abc.def --x=1"),
            "join --token=*** --x=1"
        );
        assert_eq!(mask_token_flags("join --token abc.def"), "join --token ***");
        assert_eq!(
            mask_token_flags("join --token='a b' && ls"),
            "join --token=*** && ls"
        );
        assert_eq!(mask_token_flags("--token-file=/x"), "--token-file=/x");
        assert_eq!(
            mask_token_flags("x --token=a.b: failed"),
            "x --token=***: failed"
        );
    }

    #[test]
    fn known_secrets_are_masked_longest_first() {
        let mut r = Redactor::new();
        r.add(&Secret::new("pass"));
        r.add(&Secret::new("password1"));
        r.add(&Secret::new("ab"));
        assert_eq!(r.redact("x password1 pass ab"), "x *** *** ab");
    }

    /// Security finding 2: a word shaped like a KubeEdge join token (64 hex digits, a
    /// dot, a JWT) is masked wherever it stands, even when no config names it.
    #[test]
    fn token_shaped_words_are_masked_anywhere() {
        let token = format!(
            "{}.eyJhbGciOiJIUzI1NiJ9.eyJleHAiOjE4MDAwMDAwMDB9.c2ln-bmF0_dXJl",
            "0f".repeat(32)
        );
        let r = Redactor::new();
        assert_eq!(
            r.redact(&format!("edgecore: token \"{token}\" is invalid")),
            "edgecore: token \"***\" is invalid"
        );
        assert_eq!(r.redact(&format!("-t{token}")), "-t***");
        // Not a token: too few hex digits, or no JWT after the dot.
        let hex = "0f".repeat(32);
        assert_eq!(
            r.redact(&format!("{hex}.notajwt")),
            format!("{hex}.notajwt")
        );
        assert_eq!(r.redact("abc.eyJ.eyJ.x"), "abc.eyJ.eyJ.x");
    }
}
