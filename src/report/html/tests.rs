use super::*;
use crate::keadm_cmd::Task;
use crate::outcome::{ClusterCheck, StepTimes};

pub(super) fn node(index: usize, name: &str, phase: Phase) -> NodeOutcome {
    serde_json::from_value(serde_json::json!({
        "index": index, "name": name, "address": format!("127.0.0.{}:22", index + 1),
        "phase": phase, "bytes_uploaded": 0, "uploads_skipped": 0, "connect_attempts": 1,
        "started_at": 100.0 + index as f64, "finished_at": 110.0 + index as f64,
        "steps": {"connect": 0.5, "prepare": 1.0, "upload": 2.0, "run": 3.0},
    }))
    .unwrap()
}

fn summary(nodes: Vec<NodeOutcome>) -> Summary {
    let mut summary: Summary = serde_json::from_value(serde_json::json!({
        "version": 1, "tool": "t", "run_id": "run-1", "config": "/etc/fleet.yaml",
        "started_at": 100.0, "finished_at": 130.0, "interrupted": false,
        "totals": {"selected": 0, "succeeded": 0, "failed": 0, "timed_out": 0,
                   "skipped": 0, "interrupted": 0},
        "nodes": [],
    }))
    .unwrap();
    summary.totals = crate::report::summary::Totals::of(&nodes);
    summary.nodes = nodes;
    summary
}

#[test]
fn phases_follow_each_other_and_the_ready_wait_comes_last() {
    let mut n = node(0, "edge-a", Phase::Succeeded);
    n.cluster = Some(ClusterCheck {
        node_name: "edge-a".into(),
        ready_after: Some(2.5),
        ..ClusterCheck::default()
    });
    let bars = bars(&n, 100.0);
    let got: Vec<(&str, &str, &str)> = bars
        .iter()
        .map(|b| (b.phase, b.start.as_str(), b.length.as_str()))
        .collect();
    // The second left until it finished is the ready wait's too.
    assert_eq!(
        got,
        [
            ("connect", "0.000", "0.500"),
            ("prepare", "0.500", "1.000"),
            ("upload", "1.500", "2.000"),
            ("run", "3.500", "3.000"),
            ("ready", "6.500", "3.500"),
        ]
    );
}

#[test]
fn a_node_that_failed_connecting_shows_the_time_it_spent_there() {
    let mut n = node(0, "edge-a", Phase::Failed);
    n.steps = StepTimes::default();
    n.steps.connect = Some(0.0);
    n.failed_in = Some(Phase::Connecting);
    let bars = bars(&n, 100.0);
    assert_eq!(bars.len(), 1);
    assert_eq!(
        (bars[0].phase, bars[0].length.as_str()),
        ("connect", "10.000")
    );
}

#[test]
fn hostile_node_text_is_escaped_and_no_script_runs_but_ours() {
    let name = "<img src=x onerror=\"window.pwned=1\">\x1b[31m";
    let mut n = node(0, name, Phase::Failed);
    n.error = Some("</script><script>window.pwned=2</script>".into());
    n.failure_class = Some(FailureClass::TokenInvalid);
    n.site = Some("<b>site</b>".into());
    let page = render(&summary(vec![n]), Path::new("/runs/x"));
    assert!(!page.contains("<img"), "{page}");
    assert!(!page.contains("<b>site"), "{page}");
    assert!(!page.contains("<script>window"), "{page}");
    assert!(!page.contains('\x1b'), "{page}");
    assert!(page.contains("&#60;img src=x onerror=&#34;"), "{page}");
    // One script element: the page's own, allowed by its hash alone.
    assert_eq!(page.matches("<script").count(), 1);
    let hash = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(SCRIPT.as_bytes()));
    assert!(
        page.contains(&format!("script-src &#39;sha256-{hash}&#39;")),
        "{page}"
    );
    assert!(page.contains(&format!("<script>{SCRIPT}</script>")));
}

#[test]
fn failures_are_grouped_by_class_with_the_fix() {
    let mut a = node(0, "a", Phase::Failed);
    a.failure_class = Some(FailureClass::Auth);
    let mut b = node(1, "b", Phase::TimedOut);
    b.failure_class = Some(FailureClass::Auth);
    let c = node(2, "c", Phase::Failed);
    let ok = node(3, "d", Phase::Succeeded);
    let groups = failures(&[a, b, c, ok], Path::new("/r"));
    let got: Vec<(&str, usize)> = groups
        .iter()
        .map(|g| (g.class.as_str(), g.nodes.len()))
        .collect();
    assert_eq!(got, [("auth", 2), ("unclassified", 1)]);
    assert_eq!(groups[0].fix, FailureClass::Auth.suggested_fix(Task::Other));
}

/// A class whose nodes ran different commands gets the fix for each, named by its
/// command: an upgrade's stalled pull is not told to retry with --reset-first.
#[test]
fn a_class_s_fix_is_the_one_for_each_command_its_nodes_ran() {
    let mut join = node(0, "j", Phase::Failed);
    join.failure_class = Some(FailureClass::ImagePullStalled);
    join.task = Some(Task::Join);
    let mut upgrade = node(1, "u", Phase::TimedOut);
    upgrade.failure_class = Some(FailureClass::ImagePullStalled);
    upgrade.task = Some(Task::Upgrade);
    let groups = failures(&[join.clone(), upgrade.clone()], Path::new("/r"));
    let fix = &groups[0].fix;
    let (for_join, for_upgrade) = fix
        .split_once("keadm upgrade edge: ")
        .expect("the upgrade's fix, named");
    assert!(for_join.starts_with("keadm join: "), "{fix}");
    assert!(for_join.contains("--reset-first"), "{fix}");
    assert!(!for_upgrade.contains("--reset-first"), "{fix}");
    // Nodes of one command: its fix alone, unlabelled.
    let groups = failures(&[upgrade], Path::new("/r"));
    assert_eq!(
        groups[0].fix,
        FailureClass::ImagePullStalled.suggested_fix(Task::Upgrade)
    );
}

#[test]
fn each_site_names_its_slowest_node_and_longest_phase() {
    let mut a = node(0, "a", Phase::Succeeded);
    a.site = Some("north".into());
    let mut b = node(1, "b", Phase::Succeeded);
    b.site = Some("north".into());
    b.steps.upload = Some(7.25);
    let c = node(2, "c", Phase::Succeeded);
    let rows = site_rows(&summary(vec![a, b, c]));
    let got: Vec<(&str, usize, &str, &str)> = rows
        .iter()
        .map(|r| {
            (
                r.site.as_str(),
                r.nodes,
                r.slowest.as_str(),
                r.slowest_phase.as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("north", 2, "b", "upload 7.25 s (b)"),
            ("(no site)", 1, "c", "run 3.00 s (c)"),
        ]
    );
}
