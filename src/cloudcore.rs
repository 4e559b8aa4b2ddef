//! What the control host can ask cloudcore before any node is touched, with the same
//! requests `keadm join` makes: whether a node name is already registered
//! (`GET /node/<name>`, only 404 means free) and the CA certificate (`GET /ca.crt`), whose
//! sha256 the join token's first part must equal. cloudcore's https port serves these
//! without credentials; like keadm, the server certificate is not verified here, because
//! the CA hash check is what authenticates the cluster.

use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::keadm_cmd::{JoinFlag, KeadmCommand};

/// keadm's default `--certport`.
pub const DEFAULT_CERT_PORT: u16 = 10002;

/// Where cloudcore's https port is, from a rendered `keadm join` command:
/// the host of `--cloudcore-ipport` and `--certport` (default 10002).
pub fn endpoint(command: &KeadmCommand) -> Option<(String, u16)> {
    let ipport = command.join_flag(JoinFlag::CloudCoreIpPort)?;
    let host = match ipport.rsplit_once(':') {
        Some((host, _port)) => host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        None => ipport.to_string(),
    };
    if host.is_empty() || host.contains('{') {
        return None;
    }
    let port = command
        .join_flag(JoinFlag::CertPort)
        .and_then(|p| p.parse().ok())
        .unwrap_or(DEFAULT_CERT_PORT);
    Some((host, port))
}

/// Why cloudcore could not be asked something. Each reads as a clause that follows a
/// colon in the sentence of the check that asked (see `kubeedge::before_run`).
#[derive(Debug, thiserror::Error)]
pub enum CloudcoreError {
    #[error("no HTTPS client could be made ({0})")]
    Client(#[source] reqwest::Error),
    #[error("{url} did not answer ({source})")]
    NoAnswer {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("{url} answered HTTP {status}")]
    Status {
        url: String,
        status: reqwest::StatusCode,
    },
    #[error("{url} broke off its answer ({source})")]
    BrokeOff {
        url: String,
        #[source]
        source: reqwest::Error,
    },
}

pub struct Cloudcore {
    base: String,
    client: reqwest::blocking::Client,
}

impl Cloudcore {
    /// A client for cloudcore at `host:port`, with a short deadline: an unreachable
    /// cloudcore must not hold up the start of a batch.
    pub fn new(host: &str, port: u16, timeout: Duration) -> Result<Cloudcore, CloudcoreError> {
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_string()
        };
        let client = reqwest::blocking::Client::builder()
            .danger_accept_invalid_certs(true)
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()
            .map_err(CloudcoreError::Client)?;
        Ok(Cloudcore {
            base: format!("https://{host}:{port}"),
            client,
        })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// Whether cloudcore already knows `name` (keadm's rule: anything but 404 is taken).
    pub fn node_registered(&self, name: &str) -> Result<bool, CloudcoreError> {
        let url = format!("{}/node/{name}", self.base);
        let response = self
            .client
            .get(&url)
            .send()
            .map_err(|source| CloudcoreError::NoAnswer {
                url: url.clone(),
                source,
            })?;
        Ok(response.status() != reqwest::StatusCode::NOT_FOUND)
    }

    /// sha256 (lowercase hex) of cloudcore's CA certificate as served at /ca.crt.
    pub fn ca_hash(&self) -> Result<String, CloudcoreError> {
        let url = format!("{}/ca.crt", self.base);
        let response = self
            .client
            .get(&url)
            .send()
            .map_err(|source| CloudcoreError::NoAnswer {
                url: url.clone(),
                source,
            })?;
        if !response.status().is_success() {
            return Err(CloudcoreError::Status {
                url,
                status: response.status(),
            });
        }
        let body = response
            .bytes()
            .map_err(|source| CloudcoreError::BrokeOff { url, source })?;
        Ok(hex::encode(Sha256::digest(&body)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_from_join_commands() {
        assert_eq!(
            endpoint(&KeadmCommand::parse(
                "join --cloudcore-ipport=192.0.2.10:10000 --token=x"
            )),
            Some(("192.0.2.10".into(), 10002))
        );
        assert_eq!(
            endpoint(&KeadmCommand::parse(
                "join --cloudcore-ipport 192.0.2.10:30000 --certport=30002"
            )),
            Some(("192.0.2.10".into(), 30002))
        );
        assert_eq!(
            endpoint(&KeadmCommand::parse(
                "join --cloudcore-ipport=[2001:db8::1]:10000"
            )),
            Some(("2001:db8::1".into(), 10002))
        );
        assert_eq!(endpoint(&KeadmCommand::parse("reset edge --force")), None);
    }
}
