use quick_junit::{NonSuccessKind, Report, TestCaseStatus};

use super::*;
use crate::diagnosis::FailureClass;
use crate::report::summary::{RunFacts, Summary};

fn node(index: usize, name: &str, phase: Phase, error: Option<&str>) -> NodeOutcome {
    let mut node = NodeOutcome::not_run(index, name, "127.0.0.1:22", phase, "");
    node.error = error.map(str::to_string);
    node.started_at = 1_000.0;
    node.finished_at = 1_002.5;
    node
}

fn summary(nodes: Vec<NodeOutcome>) -> Summary {
    let mut summary = Summary::of_run(
        RunFacts {
            run_id: "r",
            config: Path::new("/srv/fleet/stores.yaml"),
            started_at: 1_000.0,
            interrupted: false,
            stager: None,
            sites: &[],
            waves: &[],
        },
        nodes,
    );
    summary.finished_at = 1_010.0;
    summary
}

fn parse(text: &str) -> Report {
    Report::deserialize_from_str(text).unwrap_or_else(|e| panic!("{e}:\n{text}"))
}

#[test]
fn a_node_of_each_phase_is_its_own_kind_of_case() {
    let dir = tempfile::tempdir().unwrap();
    let transcript = dir.path().join("2-edge-b.log");
    let lines: Vec<String> = (1..=50).map(|i| format!("line {i}")).collect();
    std::fs::write(&transcript, lines.join("\n") + "\n").unwrap();
    let mut failed = node(
        1,
        "edge-b",
        Phase::Failed,
        Some("keadm exited with status 1"),
    );
    failed.failure_class = Some(FailureClass::TokenInvalid);
    failed.last_output = Some("Error: token expired".into());
    failed.transcript = Some(transcript.display().to_string());
    let mut timed_out = node(2, "edge-c", Phase::TimedOut, Some("no answer in 60 s"));
    timed_out.finished_at = 1_060.0;
    let mut nodes = vec![
        node(0, "edge-a", Phase::Succeeded, None),
        failed,
        timed_out,
        node(
            3,
            "edge-d",
            Phase::Skipped,
            Some("pre-flight: edgecore_running"),
        ),
        node(
            4,
            "edge-e",
            Phase::Interrupted,
            Some("interrupted before it started"),
        ),
    ];
    for node in &mut nodes[..2] {
        node.site = Some("store-1".to_string());
    }
    let text = document(&summary(nodes));
    let report = parse(&text);
    assert_eq!(report.test_suites.len(), 1);
    let suite = &report.test_suites[0];
    assert_eq!(suite.name.as_str(), "stores.yaml");
    assert_eq!(
        (suite.tests, suite.failures, suite.errors, suite.skipped),
        (5, 2, 1, 1)
    );
    assert_eq!(suite.time, Some(Duration::from_secs(10)));
    assert!(
        text.contains("timestamp=\"1970-01-01T00:16:40Z\""),
        "{text}"
    );
    let cases = &suite.test_cases;
    let names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["edge-a", "edge-b", "edge-c", "edge-d", "edge-e"]);
    let classes: Vec<&str> = cases
        .iter()
        .map(|c| c.classname.as_ref().unwrap().as_str())
        .collect();
    assert_eq!(classes, ["store-1", "store-1", NO_SITE, NO_SITE, NO_SITE]);
    assert_eq!(cases[0].status, TestCaseStatus::success());
    assert_eq!(cases[0].time, Some(Duration::from_millis(2500)));
    assert_eq!(cases[2].time, Some(Duration::from_secs(60)));

    let TestCaseStatus::NonSuccess {
        kind,
        message,
        ty,
        description,
        ..
    } = &cases[1].status
    else {
        panic!("{:?}", cases[1].status)
    };
    assert_eq!(*kind, NonSuccessKind::Failure);
    assert_eq!(ty.as_ref().unwrap().as_str(), "token_invalid");
    assert_eq!(
        message.as_ref().unwrap().as_str(),
        "keadm exited with status 1 (last output: Error: token expired)"
    );
    // The transcript's last 30 lines, not one more.
    let description = description.as_ref().unwrap().as_str();
    assert!(description.contains("line 21\n"), "{description}");
    assert!(description.trim_end().ends_with("line 50"), "{description}");
    assert!(!description.contains("line 20\n"), "{description}");

    // A timeout with no class has its phase as the type; no transcript, no text.
    let TestCaseStatus::NonSuccess {
        kind,
        ty,
        description,
        ..
    } = &cases[2].status
    else {
        panic!("{:?}", cases[2].status)
    };
    assert_eq!(*kind, NonSuccessKind::Failure);
    assert_eq!(ty.as_ref().unwrap().as_str(), "timed_out");
    assert!(description.is_none());

    let TestCaseStatus::Skipped { message, .. } = &cases[3].status else {
        panic!("{:?}", cases[3].status)
    };
    assert_eq!(
        message.as_ref().unwrap().as_str(),
        "pre-flight: edgecore_running"
    );
    let TestCaseStatus::NonSuccess { kind, ty, .. } = &cases[4].status else {
        panic!("{:?}", cases[4].status)
    };
    assert_eq!(*kind, NonSuccessKind::Error);
    assert_eq!(ty.as_ref().unwrap().as_str(), "interrupted");
}

#[test]
fn hostile_node_text_stays_text() {
    let dir = tempfile::tempdir().unwrap();
    let transcript = dir.path().join("1-x.log");
    std::fs::write(
        &transcript,
        "ok\n<script>alert(1)</script>\n]]><![CDATA[\x1b[31mred\x07\x00\u{fffe}\rcr\n&amp; \"quoted\" 'single'\n",
    )
    .unwrap();
    let name = "edge\"><script>alert('n')</script>]]>\x1b\x00";
    let mut hostile = node(
        0,
        name,
        Phase::Failed,
        Some("<script>x</script>\nsecond ]]> line\x1b[2J\u{ffff}"),
    );
    hostile.transcript = Some(transcript.display().to_string());
    hostile.failure_class = Some(FailureClass::Unknown);
    hostile.site = Some("<site>&\"".to_string());
    let text = document(&summary(vec![hostile]));
    // Nothing of the node's reaches the XML as markup, or as a character XML refuses.
    assert!(!text.contains("<script"), "{text}");
    assert!(!text.contains("]]>"), "{text}");
    assert!(!text.contains("<![CDATA["), "{text}");
    assert!(
        !text
            .chars()
            .any(|c| (c.is_control() && !matches!(c, '\n' | '\t'))
                || matches!(c, '\u{fffe}' | '\u{ffff}')),
        "{text:?}"
    );
    // And it reads back as the text it was, escaped.
    let report = parse(&text);
    let case = &report.test_suites[0].test_cases[0];
    assert_eq!(
        case.name.as_str(),
        "edge\"><script>alert('n')</script>]]>\\x1b\\x00"
    );
    assert_eq!(case.classname.as_ref().unwrap().as_str(), "<site>&\"");
    let TestCaseStatus::NonSuccess {
        message,
        description,
        ..
    } = &case.status
    else {
        panic!("{:?}", case.status)
    };
    assert_eq!(
        message.as_ref().unwrap().as_str(),
        "<script>x</script> | second ]]> line\\x1b[2J\\u{ffff}"
    );
    let description = description.as_ref().unwrap().as_str();
    assert!(
        description.contains("]]><![CDATA[\\x1b[31mred\\x07\\x00\\u{fffe}\\x0d"),
        "{description:?}"
    );
    assert!(description.contains("<script>alert(1)</script>"));
    assert!(description.contains("&amp; \"quoted\" 'single'"));
}

#[test]
fn a_long_transcript_is_read_from_its_end_only() {
    let dir = tempfile::tempdir().unwrap();
    let transcript = dir.path().join("1-x.log");
    let long_line = "y".repeat(5_000);
    let mut text = "x".repeat(200 << 10);
    text.push('\n');
    text.push_str(&long_line);
    text.push_str("\nlast\n");
    std::fs::write(&transcript, &text).unwrap();
    let tail = transcript_tail(&transcript.display().to_string()).unwrap();
    // The 200 KiB line began before the window: left out, not shown in part.
    assert!(!tail.contains('x'));
    assert!(tail.contains(&"y".repeat(LINE_CHARS)));
    assert!(!tail.contains(&"y".repeat(LINE_CHARS + 1)));
    assert!(tail.ends_with("last\n"));
    assert!(transcript_tail("/nonexistent/1-x.log").is_none());
}

#[test]
fn the_file_is_written_whole_and_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("junit.xml");
    std::fs::write(&path, "old").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let nodes = vec![node(0, "edge-a", Phase::Succeeded, None)];
    emit(&summary(nodes), &Some(path.clone()), OutputFormat::Text).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(parse(&text).test_suites[0].tests, 1);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert!(!dir.path().join("junit.xml.tmp").exists());
    let err = emit(
        &summary(Vec::new()),
        &Some(dir.path().join("missing/junit.xml")),
        OutputFormat::Text,
    )
    .unwrap_err();
    assert!(err.to_string().contains("missing/junit.xml"), "{err}");
}

/// The tail is read only from a regular file in a real `nodes` directory, whatever was
/// put in their place after `batch merge` checked them: a symbolic link to a secret
/// file, a `nodes` that links to a directory holding one, a FIFO that would block.
#[test]
fn a_transcript_swapped_for_a_link_or_a_fifo_is_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let secret_dir = dir.path().join("secret");
    std::fs::create_dir(&secret_dir).unwrap();
    let secret = secret_dir.join("1-edge-0.log");
    std::fs::write(&secret, "TOP-SECRET-LINE-42\n").unwrap();
    let nodes = dir.path().join("shard").join("nodes");
    std::fs::create_dir_all(&nodes).unwrap();
    let transcript = nodes.join("1-edge-0.log");

    std::fs::write(&transcript, "keadm said no\n").unwrap();
    assert_eq!(
        transcript_tail(transcript.to_str().unwrap()).as_deref(),
        Some("\nkeadm said no\n")
    );

    std::fs::remove_file(&transcript).unwrap();
    std::os::unix::fs::symlink(&secret, &transcript).unwrap();
    assert_eq!(transcript_tail(transcript.to_str().unwrap()), None);

    std::fs::remove_dir_all(&nodes).unwrap();
    std::os::unix::fs::symlink(&secret_dir, &nodes).unwrap();
    assert_eq!(transcript_tail(transcript.to_str().unwrap()), None);

    std::fs::remove_file(&nodes).unwrap();
    std::fs::create_dir(&nodes).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &transcript,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    assert_eq!(transcript_tail(transcript.to_str().unwrap()), None);
}
