//! The node's relay steps, on the pipeline's [`Run`]: claiming its role for a payload,
//! the line that makes it a source, reading a payload from a peer of its site (keadm in
//! the run's channel, image archives each in a channel of their own), falling back to
//! this machine, and clearing the sources' lines when nobody reads from them any more.

use std::io::Cursor;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::key::RelayKey;
use super::site::{Relay, Role};
use crate::node_text::{CappedBuffer, MESSAGE_CHARS, STEP_OUTPUT_CAP, one_line};
use crate::outcome::Phase;
use crate::pipeline::privilege::{exec_as, password_of};
use crate::pipeline::run::WatchReceived;
use crate::pipeline::upload::{Arrival, Move, Upload};
use crate::pipeline::{Run, StepError};
use crate::plan::{KeadmSource, NodePlan, Site};
use crate::remote::relay::{Fetch, RELAY_FAILED, RELAY_FAILED_LINE, Source, not_serving_reason};
use crate::remote::{self, NodeFacts, Privilege, Sha256Tool};
use crate::transport::{Connection, RemoteExit};

/// A node's part in its site's relay, for one payload (keadm for its arch, or an offline
/// image archive).
pub(in crate::pipeline) struct NodeRelay {
    pub(super) relay: Arc<Relay>,
    pub(super) site: Site,
    /// The payload's name in the upload dir.
    pub(super) name: String,
    pub(super) sha256: String,
    pub(super) size: u64,
    /// The key that reads this payload from its sources.
    pub(super) key: Arc<RelayKey>,
    role: Role,
    /// What the node checks a copy with.
    hasher: Sha256Tool,
    /// Whether the node can serve this payload at all (see [`Run::serve_refusal`]).
    can_serve: bool,
    /// Whether the node serves its copy to the site once it has it.
    pub(super) serve: bool,
}

impl NodeRelay {
    /// Takes `role` (after a wait), serving when it can and the site still needs sources.
    fn take_role(&mut self, role: Role, node: &NodePlan) {
        self.serve = self.can_serve
            && matches!(role, Role::Seed | Role::From { .. })
            && self.relay.serves_if_worth(&self.site, &self.sha256, node);
        self.role = role;
    }
}

/// The longest a node waits for its site's first node to connect and prepare.
const HEAD_START: Duration = Duration::from_secs(3);

/// Why a fetch from a peer failed, from what its script printed: node text, so one
/// short line with its control characters escaped, as every node text reaches the
/// console (`-v` prints the transcript's notes).
fn fetch_failure(output: &str) -> String {
    output
        .lines()
        .rev()
        .find_map(|l| {
            l.strip_prefix(RELAY_FAILED_LINE)
                .map(|why| one_line(why, MESSAGE_CHARS))
        })
        .unwrap_or_default()
}

impl Run<'_, '_> {
    /// The relay and the node's site, when the node's site relays.
    pub(super) fn relay_site(&self) -> Option<(&Arc<Relay>, &Site)> {
        let relay = self.ctx.relay.as_ref()?;
        let site = self.node.site.as_ref()?;
        relay.addresses(site).map(|_| (relay, site))
    }

    /// Whether the node's prepare step asks for its tools and clears earlier runs'
    /// relay lines: when its site relays and it gets keadm or image archives from here.
    pub(in crate::pipeline) fn relay_active(&self) -> bool {
        self.relay_site().is_some()
            && (self.node.keadm == KeadmSource::Staged || self.images_in_play().is_some())
    }

    /// The node's part in its site's relay for `upload`, claimed now: `None` when its
    /// site relays nothing.
    fn claim_payload(&mut self, upload: &Upload, hasher: Sha256Tool) -> Option<NodeRelay> {
        self.relay_site()?;
        let can_serve = self.serve_refusal(&upload.name).is_none();
        let (relay, site) = self.relay_site()?;
        let (role, key) = relay.claim_keyed(site, upload.sha256(), can_serve);
        let key = key?;
        let mut claimed = NodeRelay {
            relay: relay.clone(),
            site: site.clone(),
            name: upload.name.clone(),
            sha256: upload.sha256().to_string(),
            size: upload.size,
            key,
            role: Role::Direct,
            hasher,
            can_serve,
            serve: false,
        };
        claimed.take_role(role, self.node);
        Some(claimed)
    }

    /// The node's role for `upload` (keadm), claimed once: `None` when its site relays
    /// nothing, or the node cannot check a copy's sha256.
    pub(in crate::pipeline) fn relay_claim(
        &mut self,
        upload: &Upload,
        facts: &NodeFacts,
    ) -> Option<Role> {
        if let Some(claimed) = &self.relay {
            return Some(claimed.role.clone());
        }
        let hasher = facts.sha256_tool()?;
        if upload.name != "keadm" || !self.relay_active() {
            return None;
        }
        let claimed = self.claim_payload(upload, hasher)?;
        let role = claimed.role.clone();
        self.relay = Some(claimed);
        Some(role)
    }

    /// Tells the relay, when the node's copy of keadm is in, that the node holds it.
    pub(in crate::pipeline) fn relay_announcer(&self) -> Option<Box<dyn FnOnce()>> {
        self.announcer_of(self.relay.as_ref()?)
    }

    /// Tells the relay, once called, that the node holds `claimed`'s payload: `None` when
    /// the node does not serve it.
    fn announcer_of(&self, claimed: &NodeRelay) -> Option<Box<dyn FnOnce()>> {
        if !claimed.serve {
            return None;
        }
        let node = self.node;
        let source = Source {
            host: claimed
                .relay
                .address_of(node.index)
                .unwrap_or(&node.ssh.host)
                .to_string(),
            port: node.ssh.port,
            user: node.ssh.username.clone(),
            host_key: self.host_key.clone()?,
        };
        let (relay, site, sha256, index) = (
            claimed.relay.clone(),
            claimed.site.clone(),
            claimed.sha256.clone(),
            node.index,
        );
        Some(Box::new(move || relay.holds(&site, &sha256, index, source)))
    }

    /// After a run that carried keadm from this machine: a seed that did not get it
    /// hands its role on; a copy that arrived is counted as crossing the uplink.
    pub(in crate::pipeline) fn relay_settle(&mut self, received: bool, sent: Option<u64>) {
        let Some(claimed) = &mut self.relay else {
            return;
        };
        settle(claimed, received, sent);
    }

    /// Waits, abortably, for a source of `claimed`'s payload while a seed is on its way;
    /// a node whose wait runs out, or that becomes the seed, gets it the direct way.
    fn wait_for_source(&mut self, claimed: &mut NodeRelay) {
        let name = claimed.name.clone();
        self.transcript
            .note(&format!("waiting for a node of the site to have {name}"));
        let limit = self.node.deadlines.upload(claimed.size);
        let cancel = self.ctx.cancel;
        let since = Instant::now();
        let role = claimed.relay.wait(
            &claimed.site,
            &claimed.sha256,
            claimed.can_serve,
            limit,
            || cancel.stopping(),
        );
        self.transcript.note(&format!(
            "waited {:.2} s for a node of the site",
            since.elapsed().as_secs_f64()
        ));
        claimed.take_role(role, self.node);
        if claimed.role == Role::Direct {
            self.transcript.note(&format!(
                "no node of the site had {name} in time: getting it from this machine"
            ));
        }
    }

    /// When the node reads keadm from a node of its site: takes keadm out of `uploads`
    /// and returns it (it goes the direct way should the read fail). Waits for a source
    /// while a seed is on its way.
    pub(in crate::pipeline) fn relay_from_peer(
        &mut self,
        uploads: &mut Vec<Upload>,
        facts: &NodeFacts,
    ) -> Option<Upload> {
        let keadm = uploads.last().filter(|u| u.name == "keadm")?;
        if self.node_has(facts, keadm) {
            return None;
        }
        if self.relay_claim(keadm, facts)? == Role::Wait {
            let mut claimed = self.relay.take()?;
            self.wait_for_source(&mut claimed);
            self.relay = Some(claimed);
        }
        let role = &self.relay.as_ref()?.role;
        matches!(role, Role::From { .. }).then(|| uploads.pop().expect("keadm is last"))
    }

    /// The script that reads `claimed`'s payload from its source into `tmp` with `mode`
    /// and checks it; `None` when the node reads from no peer.
    fn fetch_script_of(&mut self, claimed: &NodeRelay, tmp: &str, mode: u32) -> Option<String> {
        let Role::From { source, .. } = &claimed.role else {
            return None;
        };
        self.transcript.note(&format!(
            "reading {} from {} of the site {}, not from this machine",
            claimed.name, source.host, claimed.site
        ));
        let bind = claimed
            .relay
            .address_of(self.node.index)
            .unwrap_or(&self.node.ssh.host);
        Some(remote::relay::fetch_script(&Fetch {
            dir: &self.node.upload_dir,
            tmp,
            source,
            bind,
            sha256: &claimed.sha256,
            size: claimed.size,
            mode,
            hasher: claimed.hasher,
            limit_secs: self.fetch_limit(claimed).as_secs(),
        }))
    }

    /// How long a read from a peer may take before the node gives up on it: what a direct
    /// upload of the payload may take.
    fn fetch_limit(&self, claimed: &NodeRelay) -> Duration {
        self.node.deadlines.upload(claimed.size)
    }

    /// Tells the relay how a read of `claimed`'s payload from a peer ended, and says so in
    /// the transcript: when it failed (`why`), the node gets the payload from this machine.
    fn fetch_ended(&mut self, claimed: &NodeRelay, received: bool, failed: Option<String>) {
        let Role::From {
            node: source_node,
            source,
        } = &claimed.role
        else {
            return;
        };
        let (relay, site) = (&claimed.relay, &claimed.site);
        relay.read_done(site, &claimed.sha256, *source_node, received);
        if let Some(why) = failed {
            self.transcript.note(&format!(
                "reading {} from {} failed ({why}); getting it from this machine instead",
                claimed.name, source.host
            ));
        } else if received {
            relay.count(site, claimed.size, true);
            self.transcript.note(&format!(
                "{} came from {} of the site ({} bytes), checked against the sha256 this machine verified",
                claimed.name, source.host, claimed.size
            ));
        }
    }

    /// Reads keadm from the site's source into place and runs it, in one channel. `true`
    /// when the read failed and keadm did not run: it goes the direct way (the reason is
    /// in the transcript).
    pub(in crate::pipeline) fn run_relayed(
        &mut self,
        conn: &mut dyn Connection,
        moves: &[Move],
        privilege: Privilege,
    ) -> Result<bool, StepError> {
        let claimed = self.relay.take().expect("claimed before");
        let tmp = self.temp_name("keadm");
        let Some(script) = self.fetch_script_of(&claimed, &tmp, 0o755) else {
            self.relay = Some(claimed);
            return Ok(true);
        };
        let arrival = Arrival {
            script,
            failed: RELAY_FAILED,
            to_move: (tmp, "keadm".to_string(), claimed.sha256.clone()),
        };
        // The read has its own limit on the node; keadm keeps its whole deadline after it.
        let time = self.node.deadlines.command + self.fetch_limit(&claimed);
        let key = claimed.key.clone();
        let announce = self.announcer_of(&claimed);
        self.relay = Some(claimed);
        let outcome = self.timed(Phase::Running, |run| {
            let script = run.keadm_script(moves, Some(arrival));
            let deadline = Instant::now() + time;
            let mut key = Cursor::new(key.private_openssh.clone().into_bytes());
            let watch = WatchReceived::new(true).announcing(announce);
            let (result, watch) =
                run.exec_run_script(conn, &script, privilege, Some(&mut key), deadline, watch)?;
            Ok((result, watch.seen()))
        })?;
        let (result, received) = outcome;
        let claimed = self.relay.take().expect("claimed before");
        let failed = (!received && matches!(result, Ok(RemoteExit::Code(RELAY_FAILED))))
            .then(|| fetch_failure(&self.transcript.tail(usize::MAX).join("\n")));
        self.fetch_ended(&claimed, received, failed.clone());
        self.relay = Some(claimed);
        if failed.is_some() {
            return Ok(true);
        }
        self.timed(Phase::Running, |run| {
            run.keadm_ended(conn, result, privilege)
        })?;
        Ok(false)
    }

    /// Uploads image archives (`uploads`, each checked by its sha256) the way the node's
    /// site relays them: the first node of the site to need one gets it from this machine
    /// and serves it; the others read it from a node that has it, and get it from this
    /// machine should that fail. Returns the renames into place, as [`Run::upload`] does.
    /// A node whose site relays nothing gets them all from this machine.
    pub(in crate::pipeline) fn upload_relaying(
        &mut self,
        conn: &mut dyn Connection,
        uploads: Vec<Upload>,
        facts: &NodeFacts,
        privilege: Privilege,
        hasher: Sha256Tool,
    ) -> Result<Vec<Move>, StepError> {
        if self.relay_site().is_none() {
            return Ok(self.upload(conn, uploads, facts, privilege, false)?.0);
        }
        let mut moves = Vec::new();
        // Archives a seed is on its way for come last: the node seeds or reads the others
        // meanwhile, so a site's archives cross its uplink side by side.
        let mut waiting = Vec::new();
        for upload in uploads {
            let Some(claimed) = self.claim_payload(&upload, hasher) else {
                moves.extend(self.upload(conn, vec![upload], facts, privilege, false)?.0);
                continue;
            };
            if claimed.role == Role::Wait {
                waiting.push((upload, claimed));
            } else {
                moves.extend(self.relay_or_upload(conn, upload, claimed, facts, privilege)?);
            }
        }
        for (upload, mut claimed) in waiting {
            self.wait_for_source(&mut claimed);
            moves.extend(self.relay_or_upload(conn, upload, claimed, facts, privilege)?);
        }
        Ok(moves)
    }

    /// Gets one archive as `claimed` says: from a peer (falling back to this machine), or
    /// from this machine, serving it afterwards when the site needs sources.
    fn relay_or_upload(
        &mut self,
        conn: &mut dyn Connection,
        upload: Upload,
        mut claimed: NodeRelay,
        facts: &NodeFacts,
        privilege: Privilege,
    ) -> Result<Vec<Move>, StepError> {
        if let Some(received) = self.fetch_from_peer(conn, &upload, &claimed, privilege)? {
            return Ok(vec![received]);
        }
        if matches!(claimed.role, Role::From { .. }) {
            // The read failed: this node gets it directly and serves nobody.
            claimed.role = Role::Direct;
            claimed.serve = false;
        }
        self.serves_archive(&claimed);
        let tmp = self.temp_name(&upload.name);
        let upload = upload.then(self.serve_line_of(&claimed, &tmp));
        let announce = self.announcer_of(&claimed);
        let before = self.bytes_uploaded;
        let result = self.upload(conn, vec![upload], facts, privilege, false);
        let received = matches!(&result, Ok((moves, _)) if !moves.is_empty());
        settle(&mut claimed, received, Some(self.bytes_uploaded - before));
        if let (true, Some(announce)) = (received, announce) {
            announce();
        }
        Ok(result?.0)
    }

    /// Remembers that the node serves `claimed`'s archive from its upload dir, so the
    /// archive stays there after the import until the node serves no more. Under sudo
    /// the node serves a copy in the login user's home ([`Run::serve_line_of`]), which
    /// its relay line takes along, so the upload dir's need not stay.
    fn serves_archive(&mut self, claimed: &NodeRelay) {
        if claimed.serve && !self.node.sudo {
            self.archives_served.push(claimed.name.clone());
        }
    }

    /// Reads one archive from the peer `claimed` names into its temporary name, checked
    /// by size and sha256, in a channel of its own (the run's key on stdin). `None`, with
    /// the reason in the transcript, when the node reads from no peer or the read failed.
    fn fetch_from_peer(
        &mut self,
        conn: &mut dyn Connection,
        upload: &Upload,
        claimed: &NodeRelay,
        privilege: Privilege,
    ) -> Result<Option<Move>, StepError> {
        let tmp = self.temp_name(&upload.name);
        let Some(fetch) = self.fetch_script_of(claimed, &tmp, upload.mode) else {
            return Ok(None);
        };
        let script = format!("{fetch}{}", self.serve_line_of(claimed, &tmp));
        // The read stops itself at its limit; the check and the serve line get a step.
        let deadline = Instant::now() + self.fetch_limit(claimed) + self.node.deadlines.step;
        let mut output = CappedBuffer::new(STEP_OUTPUT_CAP);
        let mut key = Cursor::new(claimed.key.private_openssh.clone().into_bytes());
        let result = self.timed(Phase::Uploading, |run| {
            Ok(exec_as(
                conn,
                &script,
                privilege,
                password_of(run.node),
                Some(&mut key),
                deadline,
                &mut output,
            ))
        })?;
        let exit = result.map_err(|e| {
            StepError::transport(
                Phase::Uploading,
                format!("Cannot read {} from a node of the site.", upload.name),
                e,
            )
        })?;
        if !exit.success() {
            let why = match fetch_failure(&output.text()) {
                why if why.is_empty() => exit.to_string(),
                why => why,
            };
            self.fetch_ended(claimed, false, Some(why));
            return Ok(None);
        }
        self.fetch_ended(claimed, true, None);
        self.serves_archive(claimed);
        if let Some(why) = not_serving_reason(&output.text()) {
            self.transcript.note(&format!(
                "this node serves no copy of {} to its site: {why}",
                upload.name
            ));
        } else if let Some(announce) = self.announcer_of(claimed) {
            announce();
        }
        Ok(Some((tmp, upload.name.clone(), claimed.sha256.clone())))
    }

    /// Before the node connects: lets its site's first node go first (see
    /// [`Relay::head_start`]), at most [`HEAD_START`].
    pub(in crate::pipeline) fn relay_head_start(&mut self) {
        if !self.relay_active() {
            return;
        }
        let Some((relay, site)) = self.relay_site() else {
            return;
        };
        let cancel = self.ctx.cancel;
        let waited = relay.head_start(site, self.node.index, HEAD_START, || cancel.stopping());
        if !waited.is_zero() {
            self.transcript.note(&format!(
                "waited {:.2} s for the site's first node to connect and prepare",
                waited.as_secs_f64()
            ));
        }
    }

    /// The node knows what it needs: its site's other nodes need not wait for it.
    pub(in crate::pipeline) fn relay_knows_its_needs(&self) {
        if let Some((relay, site)) = self.relay_site() {
            relay.head_start_over(site);
        }
    }
}

/// After a copy of `claimed`'s payload was sent from this machine (`sent` bytes): a seed
/// that did not get it hands its role on; a copy that arrived is counted as crossing the
/// uplink.
fn settle(claimed: &mut NodeRelay, received: bool, sent: Option<u64>) {
    if claimed.role == Role::Seed && !received {
        claimed.relay.seed_failed(&claimed.site, &claimed.sha256);
        // Handed on once: should this node's next form fail too, another node may be
        // seeding by then, and its slot is not this node's to give away.
        claimed.role = Role::Direct;
    }
    if let (true, Some(bytes)) = (received, sent) {
        claimed.relay.count(&claimed.site, bytes, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fetch's failure line is node text: under `-v` it reaches the console, so it
    /// comes as one short line with its control characters escaped.
    #[test]
    fn a_fetch_failure_is_one_escaped_line() {
        let output = format!(
            "noise\n{RELAY_FAILED_LINE} \u{1b}]0;owned\u{7}\u{1b}[2J Permission denied\r\n"
        );
        assert_eq!(
            fetch_failure(&output),
            "\\x1b]0;owned\\x07\\x1b[2J Permission denied"
        );
        assert_eq!(fetch_failure("no line of ours\n"), "");
    }
}
