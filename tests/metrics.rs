//! `--metrics FILE` on real sshd nodes: the file a run leaves is read with Prometheus'
//! own text parser (Python's `prometheus_client.parser`, as scripts/setup.sh installs it)
//! and says what the run did.

use std::path::Path;

use serde_json::Value;

use crate::common::fake_keadm::FakeKeadm;
use crate::common::fleet::Fleet;
use crate::common::scenario::Scenario;

/// The families in the file, as Prometheus' parser reads them: each family's name, its
/// type and its samples (name, labels, value), as JSON.
fn parse(path: &Path) -> Value {
    const PARSE: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = {}
for f in text_string_to_metric_families(open(sys.argv[1]).read()):
    assert f.name not in out, "family twice: " + f.name
    out[f.name] = {"type": f.type, "samples": [[s.name, s.labels, s.value] for s in f.samples]}
print(json.dumps(out))
"#;
    // Debian's Python, which the Debian package installs into (a `python3` earlier on
    // PATH, pyenv's say, does not see it).
    let out = std::process::Command::new("/usr/bin/python3")
        .args(["-c", PARSE])
        .arg(path)
        .output()
        .expect("/usr/bin/python3 runs (scripts/setup.sh installs python3-prometheus-client)");
    assert!(
        out.status.success(),
        "Prometheus' parser refused {}:\n{}\n--- the file:\n{}",
        path.display(),
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(path).unwrap_or_default()
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The value of the family's sample named `sample` whose labels include `labels`.
fn value(families: &Value, family: &str, sample: &str, labels: &[(&str, &str)]) -> f64 {
    let f = &families[family];
    f["samples"]
        .as_array()
        .unwrap_or_else(|| panic!("no family {family} in {families}"))
        .iter()
        .find(|s| s[0] == sample && labels.iter().all(|(k, v)| s[1][k].as_str() == Some(v)))
        .unwrap_or_else(|| panic!("no {sample}{labels:?} in {f}"))[2]
        .as_f64()
        .unwrap()
}

#[test]
fn a_run_leaves_metrics_that_prometheus_parses() {
    let fleet = Fleet::builder().nodes(3).start();
    std::fs::write(fleet.node(1).tmp_path("fail"), "").unwrap();
    let sc =
        Scenario::new(&fleet).keadm(FakeKeadm::new().runs("if [ -e /tmp/fail ]; then exit 1; fi"));
    let textfiles = tempfile::tempdir().unwrap();
    let path = textfiles.path().join("keadm_batch.prom");
    let out = sc.run(&["--metrics", path.to_str().unwrap()]);
    out.status(1);
    let summary = out.summary();
    let class = summary["nodes"][1]["failure_class"]
        .as_str()
        .unwrap_or_else(|| panic!("node 1 has no failure class: {summary}"));

    let m = parse(&path);
    assert_eq!(m["keadm_batch_nodes"]["type"], "gauge");
    for (phase, n) in [
        ("succeeded", 2.0),
        ("failed", 1.0),
        ("timed_out", 0.0),
        ("skipped", 0.0),
        ("interrupted", 0.0),
    ] {
        assert_eq!(
            value(
                &m,
                "keadm_batch_nodes",
                "keadm_batch_nodes",
                &[("phase", phase)]
            ),
            n,
            "{phase}"
        );
    }
    let failures = "keadm_batch_node_failures";
    assert_eq!(value(&m, failures, failures, &[("class", class)]), 1.0);
    let classes = m[failures]["samples"].as_array().unwrap();
    let total: f64 = classes.iter().map(|s| s[2].as_f64().unwrap()).sum();
    assert_eq!(total, 1.0, "{classes:?}");

    let h = "keadm_batch_phase_duration_seconds";
    assert_eq!(m[h]["type"], "histogram");
    // Every node ran keadm, the failing one too.
    assert_eq!(
        value(&m, h, &format!("{h}_count"), &[("phase", "run")]),
        3.0
    );
    assert_eq!(
        value(
            &m,
            h,
            &format!("{h}_bucket"),
            &[("phase", "run"), ("le", "+Inf")]
        ),
        3.0
    );
    assert_eq!(
        value(&m, h, &format!("{h}_count"), &[("phase", "connect")]),
        3.0
    );
    // No cluster was checked: no node waited for Ready.
    assert_eq!(
        value(&m, h, &format!("{h}_count"), &[("phase", "ready")]),
        0.0
    );

    // Counters are counters to Prometheus' parser, not untyped `_total` samples.
    let up = "keadm_batch_uploaded_bytes";
    assert_eq!(m[up]["type"], "counter");
    let uploaded: u64 = summary["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["bytes_uploaded"].as_u64().unwrap())
        .sum();
    assert!(uploaded > 0, "{summary}");
    assert_eq!(value(&m, up, &format!("{up}_total"), &[]), uploaded as f64);
    assert_eq!(m["keadm_batch_relayed_bytes"]["type"], "counter");

    let start = "keadm_batch_run_start_timestamp_seconds";
    let end = "keadm_batch_run_end_timestamp_seconds";
    assert_eq!(
        value(&m, start, start, &[]),
        summary["started_at"].as_f64().unwrap()
    );
    assert_eq!(
        value(&m, end, end, &[]),
        summary["finished_at"].as_f64().unwrap()
    );
    let info = "keadm_batch_run_info";
    let run_id = summary["run_id"].as_str().unwrap();
    let config = summary["config"].as_str().unwrap();
    assert_eq!(
        value(&m, info, info, &[("run_id", run_id), ("config", config)]),
        1.0
    );
    // No node's name became a label value.
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(!text.contains(&Scenario::name(0)), "{text}");
}

/// `batch merge --metrics FILE`: the merged shards' figures in one file Prometheus parses,
/// counted over every shard; a file that cannot be written is an error that names it.
#[test]
fn a_merge_writes_the_fleet_s_metrics() {
    use crate::common::test::Test;
    let fleet = Fleet::builder().nodes(4).start();
    std::fs::write(fleet.node(3).tmp_path("fail"), "").unwrap();
    let sc =
        Scenario::new(&fleet).keadm(FakeKeadm::new().runs("if [ -e /tmp/fail ]; then exit 1; fi"));
    sc.run(&["--shard", "1/2", "--run-dir", "s1"]);
    sc.run(&["--shard", "2/2", "--run-dir", "s2"]);
    let path = sc.path("merged.prom");
    let out = Test::in_dir(sc.dir.path())
        .args(["batch", "merge", "s1", "s2", "--metrics"])
        .arg(&path)
        .run();
    out.status(1);
    let m = parse(&path);
    let nodes = |phase| {
        value(
            &m,
            "keadm_batch_nodes",
            "keadm_batch_nodes",
            &[("phase", phase)],
        )
    };
    assert_eq!(nodes("succeeded"), 3.0);
    assert_eq!(nodes("failed"), 1.0);

    let out = Test::in_dir(sc.dir.path())
        .args([
            "batch",
            "merge",
            "s1",
            "s2",
            "--metrics",
            "no/such/dir/m.prom",
        ])
        .run();
    out.stderr_has("Could not write the metrics file (--metrics)")
        .stderr_has("no/such/dir/m.prom");
    assert_ne!(out.code(), 0);
}
