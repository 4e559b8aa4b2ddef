//! keadm join's `--token`: what can be learned from it without any secret.
//!
//! A token is `<caHash>.<JWT header>.<JWT payload>.<JWT signature>` (kubeedge
//! `pkg/security/token/token.go`): the lowercase hex sha256 of cloudcore's CA certificate
//! (DER), then an HS256 JWT whose payload is only `{"exp":<unix seconds>}`. Nothing here
//! checks the signature (that needs the CA key), and nothing here ever puts the token, or
//! any part of it but the public CA hash, into a message: a valid token mints node
//! certificates for any name until it expires.

use std::fmt;

use base64::Engine as _;
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

use crate::utc::rfc3339;

/// How long after the last node starts the token may still be needed. keadm join's last
/// step waits up to 300 s for edgecore to fetch its certificate, and that fetch is the
/// first (and only) time the token is checked, so a token that lives until the last node
/// starts but not this much longer can still fail that node.
pub const USE_MARGIN_SECS: u64 = 300;

/// What a join token says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinToken {
    /// Lowercase hex sha256 of the CA certificate (DER) the token was issued under. Public:
    /// `curl -sk https://<cloudcore>:10002/ca.crt | sha256sum` gives the same.
    pub ca_hash: String,
    /// The JWT's `exp` claim in unix seconds; `None` when the payload has no `exp` (never
    /// the case for tokens cloudcore makes, and then the token does not expire).
    pub expires_at: Option<u64>,
}

/// Why a string is not a join token. The messages never contain the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error(
        "The join token has {parts} dot-separated parts; keadm join expects 4 (<CA hash>.<JWT header>.<JWT payload>.<JWT signature>), as printed by `keadm gettoken`."
    )]
    WrongShape { parts: usize },
    #[error(
        "The join token does not start with a CA hash (64 lowercase hex characters); copy the whole output of `keadm gettoken`."
    )]
    BadCaHash,
    #[error(
        "The join token's JWT payload is not valid base64url; copy the whole output of `keadm gettoken`."
    )]
    BadEncoding,
    #[error("The join token's JWT payload is not a JSON object: {0}.")]
    BadPayload(String),
    #[error("The join token's `exp` claim is not a unix time in seconds.")]
    BadExpiry,
}

/// Parses a join token. Whitespace around it (a pasted newline) is ignored.
pub fn parse(token: &str) -> Result<JoinToken, TokenError> {
    let parts: Vec<&str> = token.trim().split('.').collect();
    if parts.len() != 4 {
        return Err(TokenError::WrongShape { parts: parts.len() });
    }
    let ca_hash = parts[0];
    // keadm compares the hash as a string with lowercase hex, so uppercase would never match.
    if ca_hash.len() != 64
        || !ca_hash
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return Err(TokenError::BadCaHash);
    }
    let payload = base64url_decode(parts[2]).ok_or(TokenError::BadEncoding)?;
    let claims: serde_json::Value =
        serde_json::from_slice(&payload).map_err(|e| TokenError::BadPayload(e.to_string()))?;
    let object = claims
        .as_object()
        .ok_or_else(|| TokenError::BadPayload("it is not an object".to_string()))?;
    let expires_at = match object.get("exp") {
        None | Some(serde_json::Value::Null) => None,
        // jwt v5 writes whole seconds, but NumericDate also reads fractions; accept both.
        Some(serde_json::Value::Number(n)) => Some(match n.as_u64() {
            Some(secs) => secs,
            None => match n.as_f64() {
                Some(f) if f.is_finite() && f >= 0.0 => f.floor() as u64,
                _ => return Err(TokenError::BadExpiry),
            },
        }),
        Some(_) => return Err(TokenError::BadExpiry),
    };
    Ok(JoinToken {
        ca_hash: ca_hash.to_string(),
        expires_at,
    })
}

/// Whether a token is still good for the whole batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifetime {
    /// It outlives the batch (or has no expiry).
    Ok,
    /// It expires at `at`, at or before `needed_until`: the estimated start of the last
    /// node plus [`USE_MARGIN_SECS`].
    ExpiresMidBatch { at: u64, needed_until: u64 },
    /// It expired at `at`, at or before now.
    Expired { at: u64 },
}

/// Compares the token's expiry with `now` and the batch's estimated duration until the
/// last node starts (see [`batch_estimate`]). All times are unix seconds. Prefer
/// cloudcore's clock (the `Date:` header of its `/ca.crt` answer) for `now` when there is
/// one: cloudcore checks `exp` with no leeway against its own clock.
pub fn check_lifetime(token: &JoinToken, now: u64, batch_seconds: u64) -> Lifetime {
    let Some(at) = token.expires_at else {
        return Lifetime::Ok;
    };
    let needed_until = now
        .saturating_add(batch_seconds)
        .saturating_add(USE_MARGIN_SECS);
    if at <= now {
        Lifetime::Expired { at }
    } else if at <= needed_until {
        Lifetime::ExpiresMidBatch { at, needed_until }
    } else {
        Lifetime::Ok
    }
}

impl Lifetime {
    /// Whether the batch can use the token.
    pub fn is_ok(&self) -> bool {
        matches!(self, Lifetime::Ok)
    }

    /// A full-sentence explanation for the operator, or `None` for [`Lifetime::Ok`]. It
    /// states when the token expires (UTC) and how to get a fresh one, never the token.
    pub fn message(&self, now: u64) -> Option<String> {
        const FRESH: &str = "Get a fresh token on the cloud side with `keadm gettoken` \
             (or `kubectl -n kubeedge get secret tokensecret -o jsonpath='{.data.tokendata}' | base64 -d`) \
             and run again. If it prints the same token, cloudcore has stopped refreshing it \
             (it gives up after one failed refresh); restarting cloudcore makes a new one.";
        match *self {
            Lifetime::Ok => None,
            Lifetime::Expired { at } => Some(format!(
                "The join token (--token) expired at {} ({} ago), so every node would time out waiting for its certificate. {FRESH}",
                rfc3339(at),
                human_duration(now.saturating_sub(at))
            )),
            Lifetime::ExpiresMidBatch { at, needed_until } => Some(format!(
                "The join token (--token) expires at {} (in {}), but the batch needs it until about {} (the estimated start of the last node plus {} min for edgecore to fetch its certificate), so the last nodes would fail. {FRESH}",
                rfc3339(at),
                human_duration(at.saturating_sub(now)),
                rfc3339(needed_until),
                USE_MARGIN_SECS / 60
            )),
        }
    }
}

/// Seconds from the start of the batch until its last node would start:
/// `(ceil(nodes / max_run_num) - 1) × per_node_secs`, rounded up.
///
/// The pool keeps `max_run_num` nodes busy and starts the next as one finishes, so with
/// equal per-node times nodes start in waves of `max_run_num`, and the last wave starts
/// after all the earlier ones. A `max_run_num` of 0 counts as 1, as in the pool. The time
/// the last node itself takes is not included; [`check_lifetime`] adds the token's own use
/// margin.
pub fn batch_estimate(nodes: usize, max_run_num: usize, per_node_secs: f64) -> u64 {
    if nodes == 0 || !per_node_secs.is_finite() || per_node_secs <= 0.0 {
        return 0;
    }
    let waves_before_last = nodes.div_ceil(max_run_num.max(1)) - 1;
    (waves_before_last as f64 * per_node_secs).ceil() as u64
}

/// A rough, readable duration: `45 s`, `12 min`, `3 h 5 min`, `2 d 4 h`.
fn human_duration(secs: u64) -> String {
    match secs {
        0..60 => format!("{secs} s"),
        60..3600 => format!("{} min", secs / 60),
        3600..86_400 => format!("{} h {} min", secs / 3600, (secs % 3600) / 60),
        _ => format!("{} d {} h", secs / 86_400, (secs % 86_400) / 3600),
    }
}

/// base64url as JWTs carry it (unpadded, RFC 7515), lenient about bits past the last byte.
const JWT_BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::RequireNone)
        .with_decode_allow_trailing_bits(true),
);

/// Decodes a JWT segment: base64url, or standard base64 from a token that was re-encoded
/// on the way, with or without `=` padding.
fn base64url_decode(text: &str) -> Option<Vec<u8>> {
    let url_safe: String = text
        .trim_end_matches('=')
        .chars()
        .map(|c| match c {
            '+' => '-',
            '/' => '_',
            c => c,
        })
        .collect();
    JWT_BASE64.decode(url_safe).ok()
}

impl fmt::Display for JoinToken {
    /// Only the public parts: the CA hash's first 12 characters and the expiry.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `ca_hash` is a public field, so it may be shorter than a real one.
        let short = self.ca_hash.get(..12).unwrap_or(&self.ca_hash);
        write!(f, "token for CA sha256:{short}…")?;
        match self.expires_at {
            Some(at) => write!(f, ", expires {}", rfc3339(at)),
            None => write!(f, ", no expiry"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CA: &str = "4b1ea5f5cd0a6a1a12c6b2b07db7a7e38b3bcb7ac0b7dfb3b6c0f0a2d0f1e2c3";

    fn b64url(bytes: &[u8]) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    }

    fn token_with(payload: &str) -> String {
        format!(
            "{CA}.{}.{}.c2lnbmF0dXJl",
            b64url(br#"{"alg":"HS256","typ":"JWT"}"#),
            b64url(payload.as_bytes())
        )
    }

    #[test]
    fn parses_the_real_payload_from_kubeedge_issue_5417() {
        let token =
            format!("{CA}.eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJleHAiOjE3MDcyOTU3MDV9.sig");
        let parsed = parse(&token).unwrap();
        assert_eq!(parsed.ca_hash, CA);
        assert_eq!(parsed.expires_at, Some(1_707_295_705));
        assert_eq!(parse(&format!(" {token}\n")).unwrap(), parsed);
    }

    #[test]
    fn decoder_agrees_with_the_encoder_for_every_length() {
        let data: Vec<u8> = (0..=255u8).collect();
        for len in 0..40 {
            let encoded = b64url(&data[..len]);
            assert_eq!(base64url_decode(&encoded).unwrap(), &data[..len], "{len}");
            let padded = format!("{encoded}{}", "=".repeat((4 - encoded.len() % 4) % 4));
            assert_eq!(base64url_decode(&padded).unwrap(), &data[..len], "{len}");
        }
        assert_eq!(base64url_decode("a"), None);
        assert_eq!(base64url_decode("ab$d"), None);
    }

    #[test]
    fn decoder_reads_either_alphabet_any_padding_and_ignores_stray_bits() {
        let bytes = [0xfb, 0xef, 0xff, 0x00];
        for text in [
            "--__AA",
            "++//AA",
            "-+_/AA",
            "--__AA==",
            "--__AA====",
            "--__AB",
        ] {
            assert_eq!(
                base64url_decode(text).as_deref(),
                Some(&bytes[..]),
                "{text}"
            );
        }
        assert_eq!(base64url_decode("").as_deref(), Some(&b""[..]));
        assert_eq!(base64url_decode("=="), Some(Vec::new()));
        assert_eq!(base64url_decode("ab=c"), None);
        assert_eq!(base64url_decode("abcde"), None);
        assert_eq!(base64url_decode("ab.c"), None);
    }

    #[test]
    fn expiry_forms() {
        let exp = |p: &str| parse(&token_with(p)).map(|t| t.expires_at);
        assert_eq!(exp(r#"{"exp":1700000000}"#), Ok(Some(1_700_000_000)));
        assert_eq!(exp(r#"{"exp":1700000000.75}"#), Ok(Some(1_700_000_000)));
        assert_eq!(exp(r#"{"exp":1.7e9}"#), Ok(Some(1_700_000_000)));
        assert_eq!(exp(r#"{}"#), Ok(None));
        assert_eq!(exp(r#"{"exp":"soon"}"#), Err(TokenError::BadExpiry));
        assert_eq!(exp(r#"{"exp":-5}"#), Err(TokenError::BadExpiry));
        assert!(matches!(exp("[1]"), Err(TokenError::BadPayload(_))));
        assert!(matches!(exp("not json"), Err(TokenError::BadPayload(_))));
    }

    #[test]
    fn malformed_tokens_are_refused_without_echoing_them() {
        let secret_part = "eyJleHAiOjE3MDcyOTU3MDV9";
        let cases = [
            (
                format!("{CA}.{secret_part}"),
                TokenError::WrongShape { parts: 2 },
            ),
            (String::new(), TokenError::WrongShape { parts: 1 }),
            (
                format!("{}.a.{secret_part}.c", CA.to_uppercase()),
                TokenError::BadCaHash,
            ),
            (format!("abc.a.{secret_part}.c"), TokenError::BadCaHash),
            (format!("{CA}.a.{secret_part}!.c"), TokenError::BadEncoding),
        ];
        for (token, want) in cases {
            let err = parse(&token).unwrap_err();
            assert_eq!(err, want, "{token}");
            let msg = err.to_string();
            assert!(!msg.contains(secret_part) && !msg.contains(CA), "{msg}");
            assert!(msg.ends_with('.'), "{msg}");
        }
    }

    #[test]
    fn lifetime_against_now_and_the_batch() {
        let t = JoinToken {
            ca_hash: CA.into(),
            expires_at: Some(10_000),
        };
        assert_eq!(
            check_lifetime(&t, 10_000, 0),
            Lifetime::Expired { at: 10_000 }
        );
        assert_eq!(
            check_lifetime(&t, 20_000, 0),
            Lifetime::Expired { at: 10_000 }
        );
        assert_eq!(
            check_lifetime(&t, 9_000, 800),
            Lifetime::ExpiresMidBatch {
                at: 10_000,
                needed_until: 10_100
            }
        );
        // jwt v5 accepts a token only while `now < exp`, so the last second does not count.
        assert_eq!(
            check_lifetime(&t, 9_000, 700),
            Lifetime::ExpiresMidBatch {
                at: 10_000,
                needed_until: 10_000
            }
        );
        assert_eq!(check_lifetime(&t, 9_000, 699), Lifetime::Ok);
        let forever = JoinToken {
            ca_hash: CA.into(),
            expires_at: None,
        };
        assert_eq!(check_lifetime(&forever, u64::MAX, u64::MAX), Lifetime::Ok);
        assert_eq!(
            check_lifetime(&t, 0, u64::MAX),
            Lifetime::ExpiresMidBatch {
                at: 10_000,
                needed_until: u64::MAX
            }
        );
    }

    #[test]
    fn lifetime_messages_say_when_and_what_to_do() {
        assert_eq!(Lifetime::Ok.message(0), None);
        // 2024-02-07T08:48:25Z is the expiry of the token in kubeedge issue 5417.
        let expired = Lifetime::Expired { at: 1_707_295_705 }
            .message(1_707_295_705 + 3 * 3600 + 120)
            .unwrap();
        assert!(
            expired.contains("expired at 2024-02-07T08:48:25Z (3 h 2 min ago)"),
            "{expired}"
        );
        assert!(expired.contains("`keadm gettoken`"), "{expired}");
        let mid = Lifetime::ExpiresMidBatch {
            at: 1_707_295_705,
            needed_until: 1_707_299_305,
        }
        .message(1_707_295_705 - 1500)
        .unwrap();
        assert!(
            mid.contains("expires at 2024-02-07T08:48:25Z (in 25 min)"),
            "{mid}"
        );
        assert!(mid.contains("until about 2024-02-07T09:48:25Z"), "{mid}");
        assert!(mid.contains("`keadm gettoken`"), "{mid}");
    }

    #[test]
    fn rfc3339_and_durations() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400 + 86_399), "2000-02-29T23:59:59Z");
        assert_eq!(rfc3339(1_786_028_306), "2026-08-06T14:58:26Z");
        assert_eq!(human_duration(59), "59 s");
        assert_eq!(human_duration(60), "1 min");
        assert_eq!(human_duration(3 * 86_400 + 7200 + 59), "3 d 2 h");
    }

    #[test]
    fn batch_estimate_counts_waves_before_the_last() {
        assert_eq!(batch_estimate(0, 10, 60.0), 0);
        assert_eq!(batch_estimate(1, 10, 60.0), 0);
        assert_eq!(batch_estimate(10, 10, 60.0), 0);
        assert_eq!(batch_estimate(11, 10, 60.0), 60);
        assert_eq!(batch_estimate(1000, 10, 45.5), 99 * 45 + 50);
        assert_eq!(batch_estimate(3, 0, 10.0), 20);
        assert_eq!(batch_estimate(3, 1, f64::NAN), 0);
    }

    #[test]
    fn display_shows_only_public_parts() {
        let t = parse(&token_with(r#"{"exp":0}"#)).unwrap();
        assert_eq!(
            t.to_string(),
            "token for CA sha256:4b1ea5f5cd0a…, expires 1970-01-01T00:00:00Z"
        );
    }
}
