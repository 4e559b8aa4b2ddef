use super::*;

/// A summary of three nodes: one joined and Ready, one failed in keadm (token_invalid),
/// one skipped; a site relayed 300 bytes.
fn summary(config: &str) -> Summary {
    let node = |index: usize, phase: &str, extra: &str| {
        format!(
            r#"{{"index":{index},"name":"n{index}","address":"127.0.0.1","phase":"{phase}",
               "bytes_uploaded":1000,"uploads_skipped":0,"connect_attempts":1,
               "started_at":100,"finished_at":110{extra}}}"#
        )
    };
    let nodes = [
        node(
            0,
            "succeeded",
            r#","steps":{"connect":0.2,"prepare":1.5,"upload":3,"run":40},
               "cluster":{"node_name":"n0","ready_after":12,"ready_after_start":55.5}"#,
        ),
        node(
            1,
            "failed",
            r#","steps":{"connect":0.3,"prepare":1,"upload":2,"run":700},
               "failure_class":"token_invalid""#,
        ),
        node(2, "skipped", r#","steps":{}"#),
    ];
    let json = format!(
        r#"{{"version":1,"tool":"t","run_id":"20261202T0000Z-ab12","config":{config},
           "started_at":1764633600.5,"finished_at":1764633700.25,"interrupted":false,
           "totals":{{"selected":3,"succeeded":1,"failed":1,"timed_out":0,"skipped":1,
           "interrupted":0}},"nodes":[{}],
           "sites":[{{"site":"a","nodes":2,"uplink_copies":1,"uplink_bytes":100,
           "peer_copies":1,"peer_bytes":300}}]}}"#,
        nodes.join(","),
        config = serde_json::to_string(config).unwrap(),
    );
    serde_json::from_str(&json).unwrap()
}

fn lines(text: &str) -> Vec<&str> {
    text.lines().collect()
}

#[test]
fn nodes_are_counted_by_final_phase_and_class() {
    let text = render(&summary("batch.yaml"));
    let l = lines(&text);
    assert!(l.contains(&"# TYPE keadm_batch_nodes gauge"));
    assert!(l.contains(&"keadm_batch_nodes{phase=\"succeeded\"} 1"));
    assert!(l.contains(&"keadm_batch_nodes{phase=\"failed\"} 1"));
    assert!(l.contains(&"keadm_batch_nodes{phase=\"skipped\"} 1"));
    assert!(l.contains(&"keadm_batch_nodes{phase=\"timed_out\"} 0"));
    assert!(l.contains(&"keadm_batch_nodes{phase=\"interrupted\"} 0"));
    assert!(l.contains(&"keadm_batch_node_failures{class=\"token_invalid\"} 1"));
    // Every class is listed, so an alert on `> 0` sees a series from the first run on.
    assert!(l.contains(&"keadm_batch_node_failures{class=\"already_joined\"} 0"));
    assert_eq!(
        l.iter()
            .filter(|x| x.starts_with("keadm_batch_node_failures{"))
            .count(),
        FailureClass::ALL.len()
    );
}

#[test]
fn step_times_are_histograms_in_seconds() {
    let text = render(&summary("batch.yaml"));
    let l = lines(&text);
    assert!(l.contains(&"# TYPE keadm_batch_phase_duration_seconds histogram"));
    // The skipped node reached no step: two observations.
    assert!(l.contains(&"keadm_batch_phase_duration_seconds_count{phase=\"run\"} 2"));
    assert!(l.contains(&"keadm_batch_phase_duration_seconds_sum{phase=\"run\"} 740.0"));
    // 40 s is under 60; 700 s is past the last bucket, counted only in +Inf.
    assert!(l.contains(&"keadm_batch_phase_duration_seconds_bucket{le=\"60.0\",phase=\"run\"} 1"));
    assert!(l.contains(&"keadm_batch_phase_duration_seconds_bucket{le=\"600.0\",phase=\"run\"} 1"));
    assert!(l.contains(&"keadm_batch_phase_duration_seconds_bucket{le=\"+Inf\",phase=\"run\"} 2"));
    assert!(l.contains(&"keadm_batch_phase_duration_seconds_count{phase=\"ready\"} 1"));
    assert!(l.contains(&"keadm_batch_phase_duration_seconds_sum{phase=\"ready\"} 12.0"));
    // From the node's start to Ready: what the node took to come up.
    assert!(l.contains(&"# TYPE keadm_batch_node_ready_seconds histogram"));
    assert!(l.contains(&"keadm_batch_node_ready_seconds_count 1"));
    assert!(l.contains(&"keadm_batch_node_ready_seconds_sum 55.5"));
    assert!(l.contains(&"keadm_batch_node_ready_seconds_bucket{le=\"30.0\"} 0"));
    assert!(l.contains(&"keadm_batch_node_ready_seconds_bucket{le=\"60.0\"} 1"));
    assert!(l.contains(&"keadm_batch_phase_duration_seconds_count{phase=\"connect\"} 2"));
}

/// Counters carry `_total` in their TYPE line too: the Prometheus text parsers match
/// samples to the TYPE line's name exactly.
#[test]
fn counters_and_timestamps_are_in_base_units() {
    let text = render(&summary("batch.yaml"));
    let l = lines(&text);
    assert!(l.contains(&"# TYPE keadm_batch_uploaded_bytes_total counter"));
    assert!(l.contains(&"keadm_batch_uploaded_bytes_total 3000"));
    assert!(l.contains(&"# TYPE keadm_batch_relayed_bytes_total counter"));
    assert!(l.contains(&"keadm_batch_relayed_bytes_total 300"));
    assert!(l.contains(&"keadm_batch_run_start_timestamp_seconds 1764633600.5"));
    assert!(l.contains(&"keadm_batch_run_end_timestamp_seconds 1764633700.25"));
    assert!(
        l.contains(&"keadm_batch_run_info{run_id=\"20261202T0000Z-ab12\",config=\"batch.yaml\"} 1")
    );
    assert!(
        !text.contains("n0") && !text.contains("127.0.0.1"),
        "{text}"
    );
}

#[test]
fn a_config_path_is_escaped_as_a_label_value() {
    let text = render(&summary("/etc/a \"b\"\\c\nd.yaml"));
    assert!(
        text.contains(r#"config="/etc/a \"b\"\\c\nd.yaml"} 1"#),
        "{text}"
    );
    // The newline did not end the line: every line is a comment or a sample.
    for line in text.lines() {
        assert!(
            line.starts_with('#') || line.starts_with("keadm_batch_"),
            "{line}"
        );
    }
}

#[test]
fn the_file_is_replaced_whole_and_readable_by_node_exporter() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keadm_batch.prom");
    std::fs::write(&path, "old").unwrap();
    write(&summary("batch.yaml"), &path).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("keadm_batch_nodes{phase=\"failed\"} 1"));
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644);
    // No temporary file left beside it.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("keadm_batch.prom")]);
}

fn live_started(path: &Path) -> Live {
    let live = Live::default();
    live.start(
        Some(path),
        "20261202T0000Z-ab12",
        Path::new("batch.yaml"),
        1764633600.5,
    );
    live
}

/// Makes the last write look 10 s old, so the next finished node rewrites the file.
fn age(live: &Live) {
    let mut state = live.lock();
    let state = state.as_mut().unwrap();
    state.last = Instant::now().checked_sub(REFRESH).unwrap();
}

#[test]
fn a_run_in_progress_has_its_start_and_finished_nodes_but_no_end() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keadm_batch.prom");
    let live = live_started(&path);
    let first = std::fs::read_to_string(&path).unwrap();
    assert!(first.contains("keadm_batch_run_start_timestamp_seconds 1764633600.5"));
    assert!(first.contains("keadm_batch_nodes{phase=\"succeeded\"} 0"));
    assert!(
        !first.contains("keadm_batch_run_end_timestamp_seconds"),
        "{first}"
    );
    assert!(
        !first.contains("keadm_batch_relayed_bytes_total"),
        "{first}"
    );

    let done = summary("batch.yaml");
    age(&live);
    live.node_finished(|| done.nodes[..2].to_vec());
    let second = std::fs::read_to_string(&path).unwrap();
    assert!(
        second.contains("keadm_batch_nodes{phase=\"failed\"} 1"),
        "{second}"
    );
    assert!(
        second.contains("keadm_batch_nodes{phase=\"skipped\"} 0"),
        "{second}"
    );
    assert!(
        !second.contains("keadm_batch_run_end_timestamp_seconds"),
        "{second}"
    );

    live.finish(&done);
    let last = std::fs::read_to_string(&path).unwrap();
    assert_eq!(last, render(&done));
    // Nothing rewrites the file after the run's last write.
    std::fs::remove_file(&path).unwrap();
    live.node_finished(|| panic!("no live write after the end"));
    assert!(!path.exists());
}

#[test]
fn a_write_waits_for_ten_seconds_and_for_no_other_writer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keadm_batch.prom");
    let live = live_started(&path);
    // Just written: a node finishing now does not rewrite it.
    live.node_finished(|| panic!("rewritten before 10 s"));
    // Another worker is writing: this one does not wait for it, nor write.
    age(&live);
    let held = live.lock();
    live.node_finished(|| panic!("two writers at once"));
    drop(held);
    live.node_finished(|| summary("batch.yaml").nodes);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains("keadm_batch_nodes{phase=\"succeeded\"} 1"),
        "{text}"
    );
}
