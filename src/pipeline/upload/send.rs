//! Sending the uploads: each file the node lacks to a temporary name, as a packed copy,
//! the release tarball or itself, and what to say when a send fails (a full disk).

use super::*;

impl Run<'_, '_> {
    /// Uploads each file that the node lacks to a temporary name. Returns the renames
    /// (temporary name, final name, sha256) to perform before the files are used, and,
    /// with `defer_last`, the last upload when it is left for the run's own channel (its
    /// rename is [`Deferred::to_move`], not among the others).
    pub(in crate::pipeline) fn upload(
        &mut self,
        conn: &mut dyn Connection,
        uploads: Vec<Upload>,
        facts: &NodeFacts,
        privilege: Privilege,
        defer_last: bool,
    ) -> Result<(Vec<Move>, Option<Deferred>), StepError> {
        self.timed(Phase::Uploading, |run| {
            let node = run.node;
            let mut moves = Vec::new();
            let count = uploads.len();
            // Files stream over exec (`cat >`, one channel; under sudo inside `sudo sh -c`),
            // read through the exec loop's small buffer. Not SFTP: libssh2 holds each 1 MiB
            // write until it is acknowledged, about 2 MiB per worker (118 MiB peak at
            // maxRunNum 50, against 33 MiB over exec) and a round trip per MiB on slow links
            // (see bench/README.md and docs/decisions.md).
            for (position, upload) in uploads.into_iter().enumerate() {
                if run.already_there(facts, &upload) {
                    continue;
                }
                let tmp = run.temp_name(&upload.name);
                let last = defer_last && position + 1 == count;
                // The last upload rides in the run's own channel, as a packed copy of the
                // binary or else the release tarball when it has one (only keadm has either, and keadm
                // comes last): one exec (two or three round trips) less per node, which is
                // what a fleet of many small nodes (the benchmark's W3) and every node
                // behind a long round trip pays for, and a node that serves its site (the
                // relay) serves what arrives there. Should the node fail to unpack it
                // there, keadm does not run and the caller sends the next form.
                if last && !matches!(upload.form(), Form::Itself) {
                    return Ok((moves, Some(run.defer(upload))));
                }
                let deadline = Instant::now() + node.deadlines.upload(upload.size);
                let start = Instant::now();
                let mut sent = None;
                if let Some(gzipped) = &upload.gzipped {
                    sent = run.upload_gzipped(conn, &upload, gzipped, &tmp, privilege)?;
                }
                if sent.is_none() && last {
                    return Ok((moves, Some(run.defer(upload))));
                }
                if sent.is_none() {
                    let script = upload.and_then(remote::receive_script(
                        &node.upload_dir,
                        &tmp,
                        upload.mode,
                        upload.size,
                        upload.check(),
                        Encoding::Plain,
                    ));
                    let (result, output) =
                        run.send_file(conn, &script, &upload.local, privilege, deadline)?;
                    // The node removed it already; its bytes crossed the wire.
                    if result.as_ref().is_ok_and(|exit| !exit.success())
                        && let Some(err) = upload.arrived_altered(&output)
                    {
                        run.bytes_uploaded += upload.size;
                        return Err(err);
                    }
                    let err = match result {
                        Ok(exit) if exit.success() => None,
                        Ok(exit) => Some(StepError::new(
                            Phase::Uploading,
                            format!(
                                "Cannot upload the file {}: the node answered {exit}{}.",
                                upload.name,
                                match one_line(&output, MESSAGE_CHARS) {
                                    said if said.is_empty() => String::new(),
                                    said => format!(" ({said})"),
                                }
                            ),
                        )),
                        Err(e) => Some(upload_error(&upload, e)),
                    };
                    if let Some(err) = err {
                        return Err(run.explain_upload_failure(conn, err, &upload, &tmp, privilege));
                    }
                    sent = Some(upload.size);
                }
                let bytes = sent.unwrap_or(0);
                run.bytes_uploaded += bytes;
                run.transcript.note(&format!(
                    "uploaded {} ({} bytes, mode {:04o}) in {:.2}s",
                    upload.name,
                    bytes,
                    upload.mode,
                    start.elapsed().as_secs_f64()
                ));
                moves.push((tmp, upload.name, upload.sha256));
            }
            Ok((moves, None))
        })
    }

    /// Sends the gzip-compressed copy over exec stdin; the node decompresses it to `tmp`
    /// and checks its size. Returns the bytes sent, or `None` when the node could not
    /// (the caller then sends the file as it is).
    fn upload_gzipped(
        &mut self,
        conn: &mut dyn Connection,
        upload: &Upload,
        gzipped: &Gzipped,
        tmp: &str,
        privilege: Privilege,
    ) -> Result<Option<u64>, StepError> {
        let script = upload.and_then(remote::receive_script(
            &self.node.upload_dir,
            tmp,
            upload.mode,
            upload.size,
            upload.check(),
            Encoding::Gzip,
        ));
        let packed = Packed {
            path: &gzipped.path,
            size: gzipped.size,
            // The deadline allows for the node's gunzip of the whole file.
            deadline_bytes: upload.size,
            script,
            sent: format!(
                "sent {} gzip-compressed ({} bytes for its {}); the node decompressed it",
                upload.name, gzipped.size, upload.size
            ),
            failed: format!("the node could not decompress {}", upload.name),
            instead: "sending it as it is",
        };
        self.upload_packed(conn, upload, packed, privilege)
    }

    /// Sends `packed` over exec stdin into its script, which writes the upload to its
    /// temporary name. Returns the bytes sent, or `None`, noting why, when the node could
    /// not unpack it (the caller then sends the next form). Bytes that went out count
    /// either way: they crossed the wire.
    fn upload_packed(
        &mut self,
        conn: &mut dyn Connection,
        upload: &Upload,
        packed: Packed<'_>,
        privilege: Privilege,
    ) -> Result<Option<u64>, StepError> {
        let deadline = Instant::now() + self.node.deadlines.upload(packed.deadline_bytes);
        let (result, output) =
            self.send_file(conn, &packed.script, packed.path, privilege, deadline)?;
        let exit = result.map_err(|e| upload_error(upload, e))?;
        if exit.success() {
            self.transcript.note(&packed.sent);
            return Ok(Some(packed.size));
        }
        self.bytes_uploaded += packed.size;
        // Unpacked, but not to what was sent: sending it as it is would not mend that.
        if let Some(err) = upload.arrived_altered(&output) {
            return Err(err);
        }
        self.transcript.note(&format!(
            "{} ({exit}: {}); {}",
            packed.failed,
            one_line(&output, MESSAGE_CHARS),
            packed.instead
        ));
        Ok(None)
    }

    /// Streams the local file at `path` into `script` on the node, with `privilege`.
    /// Returns how the script ended and what it printed.
    fn send_file(
        &self,
        conn: &mut dyn Connection,
        script: &str,
        path: &Path,
        privilege: Privilege,
        deadline: Instant,
    ) -> Result<(Result<RemoteExit, TransportError>, String), StepError> {
        let mut file = open_local(path)?;
        let mut output = CappedBuffer::new(STEP_OUTPUT_CAP);
        let result = exec_as(
            conn,
            script,
            privilege,
            password_of(self.node),
            Some(&mut file),
            deadline,
            &mut output,
        );
        Ok((result, output.text()))
    }

    /// After a failed upload: removes the partial temporary file and, when the dir has
    /// less room than the file needs, says so: the receiving command's own failure need
    /// not name the cause (in the run's channel it is only exit status 201). A timed-out
    /// upload is left as it is: the connection may be stuck, and another round trip would
    /// wait on it again.
    pub(in crate::pipeline) fn explain_upload_failure(
        &mut self,
        conn: &mut dyn Connection,
        err: StepError,
        upload: &Upload,
        tmp: &str,
        privilege: Privilege,
    ) -> StepError {
        if err.ending == Phase::TimedOut {
            return err;
        }
        let dir = &self.node.upload_dir;
        let mut output = CappedBuffer::new(STEP_OUTPUT_CAP);
        let deadline = Instant::now() + self.node.deadlines.step.min(Duration::from_secs(10));
        let probe = exec_as(
            conn,
            &remote::upload_failed_script(dir, tmp),
            privilege,
            password_of(self.node),
            None,
            deadline,
            &mut output,
        );
        let free_kib = match probe {
            Ok(_) => remote::parse_free_kib(&output.text()),
            Err(_) => None,
        };
        match free_kib {
            Some(free) if free.saturating_mul(1024) < upload.size => {
                self.transcript.note(&err.message);
                StepError {
                    message: format!(
                        "Cannot upload the file {}: no space left on device in {dir} on the node ({} KiB needed, {free} KiB free). Free some space there, or set remoteDir to a directory on a larger filesystem.",
                        upload.name,
                        upload.size.div_ceil(1024),
                    ),
                    ..err
                }
            }
            _ => err,
        }
    }
}
