//! Blobs: downloaded into a temporary file, checked for their size and sha256 as they
//! arrive, with progress through the stage's meters.

use std::io::{self, Read, Seek, Write};
use std::path::Path;
use std::time::Duration;

use reqwest::blocking::Response;
use sha2::{Digest, Sha256};
use tempfile::NamedTempFile;

use super::body::Deadline;
use super::http::with_retries;
use super::manifest::Descriptor;
use super::{Failure, Registry};
use crate::bundle::error::BundleError;
use crate::image_ref::ImageRef;
use crate::stage::{Meter, error_chain};

impl Registry {
    /// Downloads the layer `descriptor` of `image` into a new temporary file in `dir`,
    /// checking its size and sha256. `what` names it in messages ("layer 2 for ...").
    pub(crate) fn layer(
        &mut self,
        image: &ImageRef,
        descriptor: &Descriptor,
        what: &str,
        dir: &Path,
    ) -> Result<NamedTempFile, BundleError> {
        self.blob(image, descriptor, what, dir, None)
    }

    /// Downloads the config `descriptor` of `image` as [`Registry::layer`] does; it is
    /// read into memory, so, like a manifest, it must arrive whole within the timeout
    /// (its size was held to a manifest's when the manifest was read).
    pub(crate) fn config(
        &mut self,
        image: &ImageRef,
        descriptor: &Descriptor,
        dir: &Path,
    ) -> Result<NamedTempFile, BundleError> {
        let within = self.settings.timeout;
        self.blob(image, descriptor, "config", dir, Some(within))
    }

    /// Downloads the blob `descriptor`; with `whole_within`, the transfer must end in
    /// that time.
    fn blob(
        &mut self,
        image: &ImageRef,
        descriptor: &Descriptor,
        what: &str,
        dir: &Path,
        whole_within: Option<Duration>,
    ) -> Result<NamedTempFile, BundleError> {
        let place = self.place(image.registry());
        let limit = self.settings.max_image_bytes;
        if descriptor.size > limit {
            return Err(BundleError::TooLarge {
                image: image.to_string(),
                registry: place.label,
                what: what.into(),
                size: descriptor.size,
                limit,
            });
        }
        let expected = descriptor.digest.clone();
        let file = tempfile::Builder::new()
            .prefix(crate::bundle::TEMPORARY_PREFIX)
            .tempfile_in(dir)
            .map_err(|e| BundleError::io("create a temporary file in", dir, e))?;
        let path = format!("blobs/{expected}");
        let (retries, delay) = (self.settings.retries, self.settings.retry_base_delay);
        with_retries(retries, delay, image, &place, || {
            let response = self.get(&place, image, &path, None)?;
            let response = self.check_status(response, image, &place, Some(what))?;
            let label = format!("{image} {what}");
            let mut meter = Meter::start(&self.settings.meters, &label, Some(descriptor.size));
            let deadline = whole_within.map(Deadline::start);
            save(response, &file, descriptor.size, deadline, &mut meter)
                .map_err(|failure| match failure {
                    SaveFailure::Local(e) => {
                        Failure::from(BundleError::io("write", file.path(), e))
                    }
                    SaveFailure::Broken(reason) => Failure::Transient(reason),
                    SaveFailure::Oversized => Failure::from(BundleError::Oversized {
                        image: image.to_string(),
                        registry: place.label.clone(),
                        what: what.into(),
                        size: descriptor.size,
                    }),
                })
                .and_then(|actual| {
                    if actual == expected {
                        Ok(())
                    } else {
                        Err(Failure::from(BundleError::DigestMismatch {
                            image: image.to_string(),
                            registry: place.label.clone(),
                            what: what.into(),
                            expected: expected.clone(),
                            actual,
                        }))
                    }
                })
        })?;
        Ok(file)
    }
}

enum SaveFailure {
    Local(io::Error),
    Broken(String),
    Oversized,
}

/// Streams `response` into `file` (from its start), expecting exactly `size` bytes, telling
/// `meter` how far it is; returns the sha256 as `sha256:<hex>`. An answer that announces
/// more than `size` is refused unread, and no byte past `size` is written. With
/// `deadline`, the transfer must end by then.
fn save(
    mut response: Response,
    file: &NamedTempFile,
    size: u64,
    deadline: Option<Deadline>,
    meter: &mut Meter,
) -> Result<String, SaveFailure> {
    if response
        .content_length()
        .is_some_and(|length| length > size)
    {
        return Err(SaveFailure::Oversized);
    }
    let mut out = file.as_file();
    out.set_len(0)
        .and_then(|()| out.rewind())
        .map_err(SaveFailure::Local)?;
    let mut hasher = Sha256::new();
    let mut received = 0u64;
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        if let Some(deadline) = &deadline {
            deadline.check().map_err(SaveFailure::Broken)?;
        }
        let n = match response.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(SaveFailure::Broken(format!(
                    "the transfer broke off after {received} bytes: {}",
                    error_chain(&e)
                )));
            }
        };
        received += n as u64;
        if received > size {
            return Err(SaveFailure::Oversized);
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n]).map_err(SaveFailure::Local)?;
        meter.advance(received);
    }
    meter.finish(received);
    if received < size {
        return Err(SaveFailure::Broken(format!(
            "the transfer ended after {received} of {size} bytes"
        )));
    }
    out.flush().map_err(SaveFailure::Local)?;
    Ok(format!("sha256:{}", hex::encode(hasher.finalize())))
}
