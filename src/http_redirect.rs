//! How keadm-batch's HTTP clients follow redirects, the same for staging's downloads and
//! the bundle's registry client: as reqwest's default policy does (at most ten; the
//! `Authorization` header dropped when the scheme, host or port changes), but never from
//! https to plain HTTP unless plain HTTP is accepted for the request. Checking the
//! answer's URL afterwards would be too late: the request, and whatever it carries, would
//! have gone out in plain text, and the plain-HTTP server would have answered it.

use std::error::Error;
use std::fmt;

use reqwest::redirect::Policy;

/// The most redirects one request follows, as reqwest's default policy.
const MAX_REDIRECTS: usize = 10;

/// A redirect from https to the plain-HTTP address it holds, not followed.
#[derive(Debug)]
struct PlainHttpRedirect(String);

impl fmt::Display for PlainHttpRedirect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a redirect from https to the plain-HTTP address {}",
            self.0
        )
    }
}

impl Error for PlainHttpRedirect {}

/// The redirect policy for a client whose requests may (`plain_http_ok`) or may not be
/// redirected from https to plain HTTP. A refused redirect fails the request with an
/// error that [`refused_downgrade`] recognises.
pub fn policy(plain_http_ok: bool) -> Policy {
    Policy::custom(move |attempt| {
        if attempt.previous().len() > MAX_REDIRECTS {
            return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
        }
        let from_https = attempt.previous().iter().any(|u| u.scheme() == "https");
        if from_https && attempt.url().scheme() == "http" && !plain_http_ok {
            let to = attempt.url().to_string();
            return attempt.error(PlainHttpRedirect(to));
        }
        attempt.follow()
    })
}

/// The plain-HTTP address a request was redirected to and [`policy`] refused to follow,
/// when that is why `error` happened.
pub fn refused_downgrade<'a>(error: &'a (dyn Error + 'static)) -> Option<&'a str> {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(refused) = error.downcast_ref::<PlainHttpRedirect>() {
            return Some(&refused.0);
        }
        next = error.source();
    }
    None
}
