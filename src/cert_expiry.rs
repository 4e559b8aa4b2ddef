//! When an X.509 certificate in PEM expires (its notAfter), read on the control host:
//! nodes may have no openssl, so `batch status` fetches the edge certificate's PEM text
//! and parses it here, with the OpenSSL the binary already links (docs/decisions.md, "The
//! edge certificate's expiry is read on the control host"). A leaf: it depends on
//! nothing else in the crate.

use openssl::asn1::Asn1Time;
use openssl::x509::X509;

/// The certificate's notAfter in unix seconds, from the first certificate in `pem`; the
/// error says, in a few words, why there is none.
pub fn not_after(pem: &str) -> Result<i64, &'static str> {
    let cert = X509::from_pem(pem.as_bytes()).map_err(|_| "not a PEM certificate")?;
    let epoch = Asn1Time::from_unix(0).map_err(|_| "no epoch")?;
    let diff = epoch
        .diff(cert.not_after())
        .map_err(|_| "its notAfter cannot be read")?;
    Ok(i64::from(diff.days) * 86_400 + i64::from(diff.secs))
}

/// Whole days from `now` to `not_after` (unix seconds), rounded down: 0 on its last day,
/// negative once past it.
pub fn days_left(not_after: i64, now: i64) -> i64 {
    (not_after - now).div_euclid(86_400)
}

/// A self-signed certificate made here, valid for `days` from now, in PEM (for tests).
#[cfg(test)]
pub fn test_pem(days: u32) -> String {
    use openssl::{hash::MessageDigest, pkey::PKey, rsa::Rsa, x509::X509Builder};
    let key = PKey::from_rsa(Rsa::generate(2048).unwrap()).unwrap();
    let mut b = X509Builder::new().unwrap();
    b.set_pubkey(&key).unwrap();
    b.set_not_before(&Asn1Time::days_from_now(0).unwrap())
        .unwrap();
    b.set_not_after(&Asn1Time::days_from_now(days).unwrap())
        .unwrap();
    b.sign(&key, MessageDigest::sha256()).unwrap();
    String::from_utf8(b.build().to_pem().unwrap()).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_after_is_read_from_the_first_certificate() {
        let ten = not_after(&format!("{}{}", test_pem(10), test_pem(400))).unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        assert!((ten - now - 10 * 86_400).abs() < 120, "{ten} {now}");
        // Whole days: a second after the certificate was made less than 10 are left (the
        // test's clock can read the very second the certificate was made in).
        assert_eq!(days_left(ten, ten - 10 * 86_400), 10);
        assert_eq!(days_left(ten, ten - 10 * 86_400 + 1), 9);
        assert_eq!(days_left(now - 1, now), -1);
        assert_eq!(not_after("garbage"), Err("not a PEM certificate"));
    }
}
