//! The node as a source of its site: whether it can serve at all (learnt in the prepare
//! step, which also clears what earlier runs left), the line that makes it serve a
//! payload, and clearing this run's lines once nobody reads from it.
//!
//! Every step in the login user's home runs as the login user (`remote::relay`): the
//! clearings on their own (the prepare step's before its `sudo`, the final one on a
//! connection of its own), the serve line under sudo by dropping to it.

use std::io::Cursor;
use std::time::{Duration, Instant};

use super::node::NodeRelay;
use crate::node_text::{CappedBuffer, STEP_OUTPUT_CAP};
use crate::pipeline::{Context, Run};
use crate::plan::NodePlan;
use crate::remote::Privilege;
use crate::remote::relay::{
    Login, Serve, clear_script, direct_command, forced_command_refusal, kept_reason,
    not_serving_reason, serve_probe_as_login, serve_probe_as_root, serve_script,
    stale_fetch_files_script,
};
use crate::report::transcript::Transcript;

/// How long the run's line on a source may serve should nobody remove it: long past any
/// site's work in one run, short enough that a crashed run leaves no lasting key.
const SERVE_LIFETIME: Duration = Duration::from_secs(6 * 3600);

impl Run<'_, '_> {
    /// What the prepare step runs as the login user, before its `sudo` when it has one,
    /// on a relaying node: the clearing of earlier runs' expired lines, and the check
    /// that the login user's home can take this run's.
    pub(in crate::pipeline) fn relay_prepare_as_login(&self) -> String {
        if !self.relay_active() {
            return String::new();
        }
        format!("{}{}", clear_script(None), serve_probe_as_login())
    }

    /// What the prepare step runs with the run's privilege on a relaying node, after the
    /// upload dir is checked: the fetch files an earlier run left there, and under sudo
    /// the check that root can work in the login user's home as that user.
    pub(in crate::pipeline) fn relay_prepare_privileged(&self) -> String {
        if !self.relay_active() {
            return String::new();
        }
        let mut script = stale_fetch_files_script(&self.node.upload_dir);
        if self.node.sudo {
            script.push_str(&serve_probe_as_root(&self.node.ssh.username));
        }
        script
    }

    /// What the prepare step's output `text` says about the relay: why the node cannot
    /// serve (said once here), and why an earlier run's lines were left in place.
    pub(in crate::pipeline) fn learn_relay_prepared(&mut self, text: &str) {
        if !self.relay_active() {
            return;
        }
        if let Some(why) = kept_reason(text) {
            self.transcript.note(&format!(
                "an earlier run's expired relay lines were left in the login user's authorized_keys: {why}"
            ));
        }
        if let Some(why) = not_serving_reason(text) {
            self.transcript
                .note(&format!("this node serves no copy to its site: {why}"));
            self.relay_no_serve = Some(why);
        }
    }

    /// Why the node cannot serve its copy of the payload `name`: what the prepare step
    /// found, or (for a login's own home) a forced command authorized_keys cannot carry,
    /// which is said here. `None` when it can.
    pub(super) fn serve_refusal(&mut self, name: &str) -> Option<String> {
        if let Some(why) = &self.relay_no_serve {
            return Some(why.clone());
        }
        if self.node.sudo {
            // The forced command reads the login user's copy, whose path the node checks.
            return None;
        }
        let tmp = self.temp_name(name);
        let why = forced_command_refusal(&direct_command(&self.node.upload_dir, &tmp, name))?;
        self.transcript.note(&format!(
            "this node serves no copy of {name} to its site: {why}"
        ));
        Some(why)
    }

    /// The line that makes the node a source of its copy of keadm at the temporary name
    /// `tmp` (or at keadm's final name): for the seed and for nodes that read from a peer.
    pub(in crate::pipeline) fn serve_line(&self, tmp: &str) -> String {
        self.relay
            .as_ref()
            .map(|claimed| self.serve_line_of(claimed, tmp))
            .unwrap_or_default()
    }

    /// The line that makes the node a source of `claimed`'s payload at `tmp` (or at its
    /// final name); empty when the node does not serve it.
    pub(super) fn serve_line_of(&self, claimed: &NodeRelay, tmp: &str) -> String {
        if !claimed.serve || self.host_key.is_none() {
            return String::new();
        }
        let node = self.node;
        let serve = Serve {
            dir: &node.upload_dir,
            tmp,
            name: &claimed.name,
            sha256: &claimed.sha256,
            size: claimed.size,
            public_key: &claimed.key.public_line,
            from: claimed.relay.addresses(&claimed.site).unwrap_or_default(),
            tag: claimed.relay.tag(),
            lifetime_secs: SERVE_LIFETIME.as_secs(),
            login: if node.sudo {
                Login::Sudo(&node.ssh.username)
            } else {
                Login::Own
            },
        };
        serve_script(&serve).unwrap_or_else(|why| {
            // Refused at the claim already (see `serve_refusal`), so never reached.
            log::warn!("{}: serves no copy of {}: {why}", node.name, claimed.name);
            String::new()
        })
    }
}

impl Run<'_, '_> {
    /// The node is done: the site's sources nobody reads from any more serve no more
    /// (all of them when it was the site's last).
    pub(in crate::pipeline) fn relay_done(&mut self) {
        let (Some(relay), Some(site)) = (self.ctx.relay.as_ref(), self.node.site.as_ref()) else {
            return;
        };
        unserve_all(&relay.node_done(site, self.node.index), self.ctx);
    }
}

/// How many sources are cleared at once: each is a connection of its own.
const CLEARED_AT_ONCE: usize = 16;

/// Removes this run's relay line from every node of `sources`, [`CLEARED_AT_ONCE`] at a
/// time: one after another, a site's sources held its last node (and the run's end) for
/// a connection each, 1.5 s in bench/sites.sh. The threads are the node pool's kind
/// ([`crate::pool::joined`]): they use libssh2 and OpenSSL, so each has exited before
/// this returns. Should no thread start, the sources are cleared on this one.
pub fn unserve_all(sources: &[NodePlan], ctx: &Context) {
    if let [source] = sources {
        unserve(source, ctx);
        return;
    }
    if sources.is_empty() {
        return;
    }
    let threads = rayon::ThreadPoolBuilder::new()
        .num_threads(sources.len().min(CLEARED_AT_ONCE))
        .thread_name(|i| format!("keadm-batch-unserve-{i}"));
    let cleared = crate::pool::joined(threads, |pool| {
        pool.scope(|scope| {
            for source in sources {
                scope.spawn(move |_| unserve(source, ctx));
            }
        })
    });
    if cleared.is_err() {
        for source in sources {
            unserve(source, ctx);
        }
    }
}

/// Removes this run's relay lines (and expired ones) from `node`'s authorized_keys: a
/// connection of its own, as the login user (whose file it is), within the node's step
/// deadline. The script, which names the run's tag, goes on `sh -s`'s stdin, not on a
/// command line other users of the node can read. Best effort: the line expires by
/// itself, and a later run removes it then; a clearing that left the file as it was says
/// why on the console.
///
/// A source that served image archives from its upload dir removes them then, on the same
/// connection, and says so in its transcript (its pipeline has written it out by then).
fn unserve(node: &NodePlan, ctx: &Context) {
    let Some(relay) = ctx.relay.as_ref() else {
        return;
    };
    let archives = relay.take_after_serving(node.index);
    let transcript = archives
        .as_ref()
        .and_then(|_| {
            let path = ctx.run_dir.transcript_path(node.index, &node.name);
            Transcript::reopen(&path, node.redactor.clone(), 64 << 10).ok()
        })
        .map(|t| t.labelled(&node.name))
        .unwrap_or_else(|| Transcript::in_memory(node.redactor.clone()));
    let mut run = Run::new(node, ctx, transcript);
    let mut conn = match run.connect() {
        Ok(conn) => conn,
        Err(e) => {
            log::debug!("{}: cannot connect to remove the relay key", node.name);
            if archives.is_some() {
                run.transcript.note(&format!(
                    "the image archives this node served stay in {}: cannot connect to remove them ({})",
                    node.upload_dir, e.message
                ));
            }
            return;
        }
    };
    let mut out = CappedBuffer::new(STEP_OUTPUT_CAP);
    let deadline = Instant::now() + node.deadlines.step;
    let mut script = Cursor::new(clear_script(Some(relay.tag())).into_bytes());
    match conn.exec("sh -s", Some(&mut script), deadline, &mut out) {
        Err(e) => log::debug!("{}: cannot remove the relay key: {e}", node.name),
        Ok(_) => {
            if let Some(why) = kept_reason(&out.text()) {
                log::warn!(
                    "{}: this run's relay lines were left in the login user's authorized_keys, where they expire by themselves: {why}",
                    node.name
                );
            }
        }
    }
    // Nobody of the site reads from it any more (the relay's word), whether or not its
    // line could go. Only a node without sudo serves from its upload dir, so the login
    // user is the run's privilege there.
    if let Some(archives) = archives {
        run.remove_archives(
            conn.as_mut(),
            &archives.files,
            &archives.runtime,
            Privilege::Login,
        );
    }
}
