//! `--dry-run`: the plan per node, in words, with secrets masked. Printed on stdout.
//! Before it, [`check_local_packages`] reads every local input staging will read, and the
//! run's own listing of the offline image archives (`stage::OfflineImages::list`) reads,
//! hashes and checks them against the kit; the plan shows what it found.

use std::fmt::Write;
use std::path::Path;
use std::time::Duration;

use crate::arch::Arch;
use crate::config::{AuthSpec, PackageMode, SshSpec};
use crate::node_text::escape_controls;
use crate::options::RelayMode;
use crate::placement::Placement;
use crate::plan::{KeadmSource, NodePlan, Plan, StagingPlan, display_address};
use crate::safe_name::shown_path;
use crate::stage::{ImageArchive, ImageSources, OfflineImages, StageError, Stager, is_plain_http};
use crate::waves::Rollout;

/// Offline mode: stages every `archGroup` package exactly as the run will (the package
/// is there, its checksum file and pin agree with it, it unpacks within the size limit),
/// but into a temporary directory that is removed at once, so a dry run that passes means
/// staging will pass, and nothing is left behind. Download mode reads nothing local
/// before the download (which a dry run does not make), so there is nothing to check.
pub fn check_local_packages(staging: &StagingPlan, config_path: &Path) -> Result<(), StageError> {
    if !matches!(staging.mode, PackageMode::Offline { .. }) {
        return Ok(());
    }
    let scratch = tempfile::Builder::new()
        .prefix("keadm-batch-dry-run-")
        .tempdir()
        .map_err(|e| StageError::io("create", std::env::temp_dir(), e))?;
    let mut settings = staging.stage_settings(config_path, crate::stage::Meters::Off);
    settings.base_dir = scratch.path().to_path_buf();
    Stager::open(settings)?.stage_all()?;
    Ok(())
}

/// The whole plan as text; `images` are the offline image archives the run would list.
/// `kubeconfig` names the kubeconfig the run reads and its context, one line; `cluster`
/// is what the run will verify in the cluster, one line (app has asked it);
/// `ready`, how long a node it verifies may take to be Ready, part of each wave's gate;
/// `joins`, how the joins are paced to the cloud (`None` when no join is selected).
pub fn render(
    plan: &Plan,
    images: Option<&OfflineImages>,
    kubeconfig: &str,
    cluster: &str,
    joins: Option<&str>,
    rollout: &Rollout,
    ready: Option<Duration>,
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Plan for {}", plan.config_path.display());
    let _ = writeln!(
        out,
        "  nodes:       {} of {} selected, at most {} at once",
        plan.nodes.len(),
        plan.total_in_config,
        plan.max_run_num
    );
    let _ = writeln!(
        out,
        "  handshakes:  {}",
        crate::transport::describe_pace(plan.handshakes_per_host)
    );
    if let Some(shard) = plan.shard {
        let _ = writeln!(out, "  shard:       {shard}");
    }
    let _ = writeln!(out, "  known hosts: {}", plan.known_hosts.display());
    match &plan.staging {
        Some(staging) => {
            let source = match &staging.mode {
                PackageMode::Download { url: None } => "download from GitHub releases".to_string(),
                PackageMode::Download { url: Some(url) } => format!("download from {url}"),
                PackageMode::Offline { dir } => format!("offline packages in {}", dir.display()),
            };
            let arches = if staging.arch_group.is_empty() {
                "none up front; each node's arch on demand".to_string()
            } else {
                staging
                    .arch_group
                    .iter()
                    .map(|a| a.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let _ = writeln!(
                out,
                "  keadm:       {} ({source}), staged in {}; arches: {arches}",
                staging.version,
                staging.base_dir.display()
            );
            let _ = writeln!(out, "  verify:      {}", verification(staging));
            let _ = writeln!(
                out,
                "  size limit:  {} per download and per unpacked package",
                size(staging.max_package_bytes)
            );
        }
        None => {
            let _ = writeln!(
                out,
                "  keadm:       nothing to stage (every selected node has keadmBinDir)"
            );
        }
    }
    let _ = writeln!(out, "  kubeconfig:  {kubeconfig}");
    let _ = writeln!(out, "  cluster:     {cluster}");
    if let Some(joins) = joins {
        let _ = writeln!(out, "  joins:       {joins}");
    }
    render_waves(&mut out, &plan.nodes, rollout, ready);
    render_sites(&mut out, plan, images.is_some());
    if let (Some(images), Some(sources)) = (images, &plan.offline_images) {
        render_images(&mut out, images, sources);
        render_extras(&mut out, plan, images);
    }
    for node in &plan.nodes {
        out.push('\n');
        render_node(&mut out, node, images);
    }
    out
}

/// A rollout in waves: how many and how they follow, the gate, what a failed wave does,
/// then each wave's nodes and tolerance. Nothing for a run not in waves.
fn render_waves(out: &mut String, nodes: &[NodePlan], rollout: &Rollout, ready: Option<Duration>) {
    if !rollout.in_waves() {
        return;
    }
    let pause = match rollout.pause.as_secs() {
        0 => String::new(),
        secs => format!(", {secs}s apart (--wave-pause)"),
    };
    let _ = writeln!(
        out,
        "  waves:       {}, one after another{pause}",
        rollout.waves.len()
    );
    let _ = writeln!(
        out,
        "  gate:        each node's keadm command exits 0{}",
        match ready {
            Some(timeout) => format!(
                ", and each node the cluster line verifies is Ready (an upgrade's on its new version) within {} s (--ready-timeout)",
                timeout.as_secs()
            ),
            None => "; nothing is waited for in the cluster".to_string(),
        }
    );
    let _ = writeln!(
        out,
        "  on failure:  a wave in which more nodes fail the gate than its tolerance allows stops the rollout: no node of a later wave is touched, and --retry-failed goes on from there"
    );
    for wave in &rollout.waves {
        let names: Vec<&str> = wave
            .positions
            .iter()
            .filter_map(|&p| nodes.get(p))
            .map(|n| n.name.as_str())
            .collect();
        let may_fail = match wave.tolerance {
            Some(t) => format!("at most {t} may fail"),
            None => "any may fail".to_string(),
        };
        let _ = writeln!(
            out,
            "  {:<13}{}, {may_fail} ({}): {}",
            format!("wave {}:", wave.number),
            crate::waves::nodes(names.len()),
            wave.rule(),
            names.join(", ")
        );
    }
}

/// The sites, their seed order and what is relayed among their nodes (keadm, and the
/// offline image archives when the run has some).
fn render_sites(out: &mut String, plan: &Plan, archives: bool) {
    let sites = crate::plan::sites(&plan.nodes);
    // A config without sites plans as it always did.
    if sites.is_empty() {
        return;
    }
    let relay = match plan.relay {
        RelayMode::Off => "off: every node gets keadm from this machine",
        RelayMode::Auto => {
            "auto: in each site the first node to need keadm or an image archive gets it from this machine, the others from a node of the site that has it (copyFrom files always come from this machine)"
        }
    };
    let _ = writeln!(out, "  relay:       {relay}");
    for (site, members) in sites {
        let line = site_line(
            plan.relay,
            &plan.nodes,
            site,
            &members,
            archives,
            &crate::plan::site_addresses::resolve_here,
        );
        let _ = writeln!(out, "{line}");
    }
}

/// One site's line: its nodes, seed order and what is relayed among them, or why
/// nothing is when a node's address does not resolve here (see
/// [`crate::plan::site_addresses::site_addresses`]).
fn site_line(
    relay: RelayMode,
    nodes: &[NodePlan],
    site: &crate::plan::Site,
    members: &[usize],
    archives: bool,
    resolve: &dyn Fn(&str) -> std::io::Result<Vec<std::net::IpAddr>>,
) -> String {
    const SHOWN: usize = 5;
    let relayed = members
        .iter()
        .filter(|&&i| nodes[i].keadm == KeadmSource::Staged)
        .count();
    let order: Vec<&str> = members
        .iter()
        .take(SHOWN)
        .map(|&i| nodes[i].name.as_str())
        .collect();
    let more = members.len().saturating_sub(SHOWN);
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    let joining = members
        .iter()
        .filter(|&&i| nodes[i].keadm_args.is_join() || nodes[i].keadm_args.is_edge_upgrade())
        .count();
    let unresolved = || {
        let plans: Vec<&NodePlan> = members.iter().map(|&i| &nodes[i]).collect();
        crate::plan::site_addresses::site_addresses(&plans, resolve).err()
    };
    let what = match (relay, relayed > 1, archives && joining > 1) {
        (RelayMode::Off, _, _) | (_, false, false) => None,
        (_, true, false) => Some(format!("keadm relayed among {relayed} nodes")),
        (_, false, true) => Some(format!("the image archives relayed among {joining} nodes")),
        (_, true, true) => Some(format!(
            "keadm relayed among {relayed} nodes, the image archives among {joining}"
        )),
    };
    let what = match what.map(|what| (what, unresolved())) {
        None => "nothing relayed".to_string(),
        Some((_, Some(why))) => format!("nothing relayed: {}", escape_controls(&why)),
        Some((what, None)) => what,
    };
    format!(
        "  site {site}: {} nodes, seed order {}{more}; {what}",
        members.len(),
        order.join(", ")
    )
}

/// Each arch's image archives: the file, its size and the images it provides, one line
/// per arch.
fn render_images(out: &mut String, images: &OfflineImages, sources: &ImageSources) {
    let arches: Vec<String> = by_arch(images)
        .map(|(arch, archives)| {
            let files: Vec<String> = archives
                .iter()
                .map(|a| {
                    let provides: Vec<String> =
                        a.images.iter().map(|i| i.reference.to_string()).collect();
                    format!(
                        "{} ({}: {})",
                        shown_path(&a.source),
                        size(a.size),
                        provides.join(", ")
                    )
                })
                .collect();
            format!("{arch}: {}", files.join(", "))
        })
        .collect();
    let _ = if arches.is_empty() {
        let source = match sources {
            ImageSources::Layout { dir } => format!("{}/<arch>/images", shown_path(dir)),
            ImageSources::Listed { .. } => "keadm.offlineImages".to_string(),
        };
        writeln!(
            out,
            "  images:      no archive in {source}; pre-flight checks that the nodes' runtimes have what keadm join asks for"
        )
    } else {
        writeln!(out, "  images:      {}", arches.join("; "))
    };
}

/// The site's own images (keadm.extraImages) and, for each arch the run stages or has
/// archives for, those no archive provides: the pre-flight image check expects those in
/// the nodes' runtimes, so the operator learns of a kit bundled without them before any
/// node is touched.
fn render_extras(out: &mut String, plan: &Plan, images: &OfflineImages) {
    if plan.extra_images.is_empty() {
        return;
    }
    let mut arches: Vec<Arch> = plan
        .staging
        .as_ref()
        .map(|s| s.arch_group.clone())
        .unwrap_or_default();
    for (arch, _) in by_arch(images) {
        if !arches.contains(&arch) {
            arches.push(arch);
        }
    }
    let gaps: Vec<String> = arches
        .iter()
        .filter_map(|&arch| {
            let provided = images.provided(arch);
            let missing: Vec<String> = plan
                .extra_images
                .iter()
                .filter(|image| !provided.contains(image))
                .map(ToString::to_string)
                .collect();
            (!missing.is_empty())
                .then(|| format!("no archive for {arch} provides {}", missing.join(", ")))
        })
        .collect();
    let listed: Vec<String> = plan.extra_images.iter().map(ToString::to_string).collect();
    let _ = writeln!(
        out,
        "  extras:      {} (keadm.extraImages); {}",
        listed.join(", "),
        if gaps.is_empty() {
            "the archives provide them".to_string()
        } else {
            format!(
                "{}; pre-flight expects those in the nodes' runtimes",
                gaps.join("; ")
            )
        }
    );
}

/// The arches that have archives, with them.
fn by_arch(images: &OfflineImages) -> impl Iterator<Item = (Arch, &[ImageArchive])> {
    Arch::ALL
        .into_iter()
        .map(|arch| (arch, images.for_arch(arch)))
        .filter(|(_, archives)| !archives.is_empty())
}

/// What a join node gets of `images`: its arch's archives, by their file names (on the
/// node, each is named by its sha256).
fn node_images(node: &NodePlan, images: &OfflineImages) -> String {
    let per_arch: Vec<String> = by_arch(images)
        .map(|(arch, archives)| {
            let names: Vec<String> = archives.iter().map(ImageArchive::file_name).collect();
            format!("if {arch}: {}", names.join(", "))
        })
        .collect();
    if per_arch.is_empty() {
        return "none; pre-flight checks that the runtime has what keadm join asks for".to_string();
    }
    format!(
        "{}; those whose images the runtime lacks are sent to {} as image-<sha256>.tar and imported before keadm runs",
        per_arch.join("; "),
        node.upload_dir
    )
}

/// How packages are verified: pins first, then checksum files, and what is accepted.
fn verification(staging: &StagingPlan) -> String {
    let checksum = if staging.allow_unverified {
        "the release's checksum file, or none (used unverified: --allow-unverified)"
    } else {
        "the release's checksum file, required"
    };
    let mut text = if staging.pins.is_empty() {
        checksum.to_string()
    } else {
        let pinned: Vec<&str> = staging.pins.keys().map(|arch| arch.as_str()).collect();
        format!(
            "sha512 pinned for {} (keadm.download.sha512); other arches: {checksum}",
            pinned.join(", ")
        )
    };
    let plain_http =
        matches!(&staging.mode, PackageMode::Download { url: Some(url) } if is_plain_http(url));
    if plain_http && staging.insecure_http {
        text.push_str("; plain HTTP accepted (--insecure-http)");
    }
    text
}

/// `512 MiB`, or bytes when not a whole number of MiB.
fn size(bytes: u64) -> String {
    const MIB: u64 = 1 << 20;
    if bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{bytes} bytes")
    }
}

fn auth_line(ssh: &SshSpec) -> String {
    match &ssh.auth {
        AuthSpec::PrivateKey { path, .. } => format!("{} ({})", ssh.auth.kind(), path.display()),
        other => other.kind().to_string(),
    }
}

fn render_node(out: &mut String, node: &NodePlan, images: Option<&OfflineImages>) {
    let r = &node.redactor;
    let _ = writeln!(out, "node {} {}", node.index + 1, node.name);
    let _ = writeln!(out, "  address:   {}", node.address());
    let _ = writeln!(
        out,
        "  login:     {} with {}{}",
        node.ssh.username,
        auth_line(&node.ssh),
        if node.sudo {
            ", command under sudo"
        } else {
            ""
        }
    );
    // A chain of jump hosts, the nearest first (the last is the one reached directly).
    let mut hop = node.ssh.proxy_jump.as_deref();
    while let Some(jump) = hop {
        let _ = writeln!(
            out,
            "  via:       {}@{} with {}",
            jump.username,
            display_address(&jump.host, jump.port),
            auth_line(jump)
        );
        hop = jump.proxy_jump.as_deref();
    }
    let _ = writeln!(out, "  host keys: {}", node.host_key_policy.as_str());
    let _ = writeln!(
        out,
        "  deadlines: connect {}s, command {}s, kill grace {}s, retries {}",
        node.deadlines.connect.as_secs(),
        node.deadlines.command.as_secs(),
        node.deadlines.kill_grace.as_secs(),
        node.retries
    );
    match &node.copy_from {
        Some(dir) if node.copy_files.is_empty() => {
            let _ = writeln!(out, "  upload:    nothing ({} is empty)", dir.display());
        }
        Some(dir) => {
            let files: Vec<String> = node
                .copy_files
                .iter()
                .map(|f| format!("{} ({:04o})", f.name, f.mode))
                .collect();
            let _ = writeln!(
                out,
                "  upload:    from {} to {}/: {}",
                dir.display(),
                node.upload_dir,
                files.join(", ")
            );
        }
        None => {}
    }
    match &node.keadm {
        KeadmSource::Staged => {
            let _ = writeln!(
                out,
                "  keadm:     staged binary for the node's arch (uname -m), uploaded to {}/keadm",
                node.upload_dir
            );
        }
        KeadmSource::OnNode(dir) => {
            let _ = writeln!(
                out,
                "  keadm:     already on the node in {dir} (keadmBinDir), not uploaded"
            );
        }
    }
    if let Some(images) =
        images.filter(|_| node.keadm_args.is_join() || node.keadm_args.is_edge_upgrade())
    {
        let _ = writeln!(out, "  images:    {}", node_images(node, images));
    }
    let _ = writeln!(out, "  exec dir:  {}", node.exec_dir);
    if let Some(first) = &node.first_step {
        let _ = writeln!(
            out,
            "  first:     {} ({}; the command runs only if it exits with 0)",
            first.command,
            first.kind.flag()
        );
    }
    let _ = writeln!(out, "  command:   {}", r.redact(&node.command));
    placement_lines(out, &node.placement);
    if let Some(task) = &node.edge_task {
        let _ = writeln!(out, "  after:     {}", edge_task_after(task));
    }
}

/// A join's labels and taints, which its command carries as keadm's flags.
fn placement_lines(out: &mut String, placement: &Placement) {
    if !placement.labels.is_empty() {
        let labels: Vec<String> = placement
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = writeln!(out, "  labels:    {}", labels.join(", "));
    }
    if !placement.taints.is_empty() {
        let taints: Vec<String> = placement.taints.iter().map(|t| t.to_string()).collect();
        let _ = writeln!(
            out,
            "  taints:    {} (set when the Node first registers; changing them later needs a reset and a new join)",
            taints.join(", ")
        );
    }
}

/// What the run checks after an upgrade-family command, for the dry run.
fn edge_task_after(task: &crate::plan::EdgeTaskPlan) -> String {
    let mut after = format!(
        "{} is read: its success decides the node",
        crate::remote::UPGRADE_REPORT
    );
    if task.task == crate::keadm_cmd::EdgeTask::Upgrade {
        after.push_str(&match &task.target_version {
            Some(v) => format!("; the running edgecore must be {v}"),
            None => "; the running edgecore must be the report's toVersion".to_string(),
        });
    }
    if let Some(rollback) = &task.rollback {
        after.push_str(&format!(
            "; on a failed upgrade: {rollback} (--rollback-on-failure)"
        ));
    }
    after
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Site;

    /// A site one of whose nodes is a host name that does not resolve here relays
    /// nothing, and its line says why; resolved, it relays.
    /// The plan lists the waves with their nodes and tolerance, the gate (with the
    /// cluster's Ready wait when there is one) and what a failed wave does.
    #[test]
    fn the_plan_shows_the_waves_and_their_gate() {
        use crate::options::Amount;
        use crate::waves::{Shape, plan};
        let nodes: Vec<NodePlan> = (0..5).map(NodePlan::sample).collect();
        let shape = Shape {
            size: Some(Amount::Nodes(2)),
            max_fail: Some(Amount::Percent(50)),
            ..Shape::default()
        };
        let rollout = Rollout {
            waves: plan(5, &shape, &[]),
            pause: Duration::from_secs(90),
        };
        let mut out = String::new();
        render_waves(&mut out, &nodes, &rollout, Some(Duration::from_secs(300)));
        assert_eq!(
            out,
            "  waves:       3, one after another, 90s apart (--wave-pause)\n\
             \x20 gate:        each node's keadm command exits 0, and each node the cluster line verifies is Ready (an upgrade's on its new version) within 300 s (--ready-timeout)\n\
             \x20 on failure:  a wave in which more nodes fail the gate than its tolerance allows stops the rollout: no node of a later wave is touched, and --retry-failed goes on from there\n\
             \x20 wave 1:      2 nodes, at most 1 may fail (--max-fail 50%: at most 1 of 2): n0, n1\n\
             \x20 wave 2:      2 nodes, at most 1 may fail (--max-fail 50%: at most 1 of 2): n2, n3\n\
             \x20 wave 3:      1 node, at most 0 may fail (--max-fail 50%: at most 0 of 1): n4\n"
        );
        let mut out = String::new();
        render_waves(&mut out, &nodes, &rollout, None);
        assert!(out.contains("  gate:        each node's keadm command exits 0; nothing is waited for in the cluster\n"), "{out}");
        // A run not in waves plans as it always did.
        let mut out = String::new();
        render_waves(&mut out, &nodes, &Rollout::default(), None);
        assert_eq!(out, "");
    }

    #[test]
    fn a_site_whose_name_does_not_resolve_says_why_it_relays_nothing() {
        let nodes: Vec<NodePlan> = (0..2)
            .map(|i| {
                let mut node = NodePlan::sample(i);
                node.ssh.host = if i == 0 {
                    "10.0.0.1".into()
                } else {
                    "edge-b.lan".into()
                };
                node
            })
            .collect();
        let site = Site::Named("store-1".into());
        let fails = |_: &str| -> std::io::Result<Vec<std::net::IpAddr>> {
            Err(std::io::Error::other("Name or service not known"))
        };
        let line = site_line(RelayMode::Auto, &nodes, &site, &[0, 1], false, &fails);
        assert_eq!(
            line,
            "  site store-1: 2 nodes, seed order n0, n1; nothing relayed: the ssh.ip edge-b.lan of n1 does not resolve on this machine (Name or service not known), and a source admits its readers by address"
        );
        let resolves = |_: &str| -> std::io::Result<Vec<std::net::IpAddr>> {
            Ok(vec!["10.0.0.2".parse().unwrap()])
        };
        let line = site_line(RelayMode::Auto, &nodes, &site, &[0, 1], false, &resolves);
        assert!(line.ends_with("; keadm relayed among 2 nodes"), "{line}");
    }
}
