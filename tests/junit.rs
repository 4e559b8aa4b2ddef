//! `--junit FILE` and `--output junit` on a real run of sshd nodes on loopback: the file
//! is the document printed, the JUnit schema Jenkins' and GitLab's readers take accepts it
//! (tests/fixtures/junit/JUnit.xsd, checked with `xmllint --schema`), and it says which
//! node failed and why; `batch merge` writes the same for the merged run.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::fake_keadm::FakeKeadm;
use crate::common::fleet::Fleet;
use crate::common::scenario::Scenario;
use crate::common::test::Test;

fn schema() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/junit/JUnit.xsd")
}

/// `xmllint --schema`'s verdict on `file`: Ok, or its complaint.
fn validate(file: &Path) -> Result<(), String> {
    let out = Command::new("xmllint")
        .arg("--noout")
        .arg("--schema")
        .arg(schema())
        .arg(file)
        .output()
        .expect("xmllint (Debian's libxml2-utils, scripts/setup.sh installs it)");
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The value of the XPath expression `expr` in `file`, as xmllint reads it.
fn xpath(file: &Path, expr: &str) -> String {
    let out = Command::new("xmllint")
        .arg("--xpath")
        .arg(expr)
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{expr}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let value = String::from_utf8(out.stdout).unwrap();
    // xmllint ends what it prints with a line break of its own.
    value.strip_suffix('\n').unwrap_or(&value).to_string()
}

#[test]
fn a_run_writes_junit_that_the_schema_accepts_and_names_the_failure() {
    let fleet = Fleet::builder().nodes(3).start();
    std::fs::write(fleet.node(1).tmp_path("fail"), "").unwrap();
    let sc = Scenario::new(&fleet)
        .keadm(
            FakeKeadm::new()
                .prints("I0806 join.go:78] 10. Install Complete!")
                .runs("if [ -e /tmp/fail ]; then echo 'Error: <b>token</b> ]]> expired' >&2; exit 1; fi"),
        )
        // A site of one node: a class of its own, and no relay.
        .node_yaml_for(0, "site: store-1");
    let out = sc.run(&["--junit", "reports/junit.xml", "--output", "junit"]);
    out.status(1);
    // The file's directory is the operator's to make; here it is not there yet.
    assert!(
        out.stderr
            .contains("Could not write the JUnit XML file (--junit)"),
        "{}",
        out.stderr
    );
    std::fs::create_dir(sc.path("reports")).unwrap();
    std::fs::remove_dir_all(sc.path("batch_runs")).unwrap();
    let out = sc.run(&["--junit", "reports/junit.xml", "--output", "junit"]);
    out.status(1);
    let file = sc.path("reports/junit.xml");
    let written = std::fs::read_to_string(&file).unwrap();
    assert_eq!(
        out.stdout, written,
        "--output junit prints what --junit writes"
    );
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert!(!sc.path("reports/junit.xml.tmp").exists());
    validate(&file).unwrap_or_else(|e| panic!("{e}\n{written}"));

    let summary = out.summary();
    let class = summary["nodes"][1]["failure_class"].as_str().unwrap();
    assert_eq!(
        xpath(&file, "string(/testsuites/testsuite/@name)"),
        "config.yaml"
    );
    assert_eq!(xpath(&file, "count(//testcase)"), "3");
    assert_eq!(xpath(&file, "string(//testsuite/@tests)"), "3");
    assert_eq!(xpath(&file, "string(//testsuite/@failures)"), "1");
    assert_eq!(xpath(&file, "string(//testsuite/@errors)"), "0");
    assert_eq!(xpath(&file, "string(//testsuite/@skipped)"), "0");
    let failing = Scenario::name(1);
    assert_eq!(
        xpath(
            &file,
            &format!("string(//testcase[@name='{failing}']/failure/@type)")
        ),
        class
    );
    let message = xpath(
        &file,
        &format!("string(//testcase[@name='{failing}']/failure/@message)"),
    );
    assert_eq!(
        message,
        summary["nodes"][1]["error"].as_str().unwrap().to_owned()
            + &format!(
                " (last output: {})",
                summary["nodes"][1]["last_output"].as_str().unwrap()
            )
    );
    assert!(message.contains("<b>token</b> ]]> expired"), "{message}");
    // The transcript's tail, ending where the transcript ends.
    let tail = xpath(
        &file,
        &format!("string(//testcase[@name='{failing}']/failure)"),
    );
    let transcript = out.transcript(1);
    let last = transcript
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap();
    assert!(tail.trim_end().ends_with(last), "{tail}\n---\n{transcript}");
    assert!(tail.contains("Error: <b>token</b> ]]> expired"), "{tail}");
    // The others passed: no child at all.
    for i in [0, 2] {
        let name = Scenario::name(i);
        assert_eq!(
            xpath(&file, &format!("count(//testcase[@name='{name}']/*)")),
            "0",
            "{written}"
        );
    }
    assert_eq!(
        xpath(
            &file,
            &format!(
                "string(//testcase[@name='{}']/@classname)",
                Scenario::name(0)
            )
        ),
        "store-1"
    );
    assert_eq!(
        xpath(
            &file,
            &format!("string(//testcase[@name='{failing}']/@classname)")
        ),
        "keadm-batch"
    );

    // batch merge of the run: the same cases, the same failure.
    let run_dir = std::fs::canonicalize(out.latest_run()).unwrap();
    let merged = Test::in_dir(sc.dir.path())
        .args(["batch", "merge"])
        .arg(&run_dir)
        .args(["--output", "junit", "--junit", "merged.xml"])
        .run();
    merged.status(1);
    let merged_file = sc.path("merged.xml");
    assert_eq!(
        merged.stdout,
        std::fs::read_to_string(&merged_file).unwrap()
    );
    validate(&merged_file).unwrap_or_else(|e| panic!("{e}\n{}", merged.stdout));
    assert_eq!(xpath(&merged_file, "count(//testcase)"), "3");
    assert_eq!(
        xpath(
            &merged_file,
            &format!("string(//testcase[@name='{failing}']/failure/@type)")
        ),
        class
    );
    assert_eq!(
        xpath(
            &merged_file,
            &format!("string(//testcase[@name='{failing}']/failure)")
        ),
        tail,
        "the merged run's failure reads the shard's transcript"
    );
}

/// The schema is no rubber stamp: it refuses what the readers would not take.
#[test]
fn the_schema_refuses_what_junit_readers_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let good = r#"<testsuites><testsuite name="s" tests="1" failures="1" errors="0" time="1.5" timestamp="2026-01-02T03:04:05Z"><testcase name="n" classname="c" time="0.25"><failure type="auth" message="m">tail</failure></testcase></testsuite></testsuites>"#;
    let path = dir.path().join("j.xml");
    std::fs::write(&path, good).unwrap();
    validate(&path).unwrap();
    for bad in [
        // No classname.
        good.replace(r#" classname="c""#, ""),
        // A count that is no count.
        good.replace(r#"tests="1""#, r#"tests="one""#),
        // A negative time.
        good.replace(r#"time="0.25""#, r#"time="-1""#),
        // Two verdicts for one case.
        good.replace("</failure>", "</failure><skipped/>"),
        // An element the format does not have.
        good.replace("<failure", "<script/><failure"),
    ] {
        std::fs::write(&path, &bad).unwrap();
        assert!(validate(&path).is_err(), "accepted: {bad}");
    }
}

/// Another local user's uid, for files planted where ours go.
const NOBODY: u32 = 65534;

/// `--junit FILE` is written through a temporary of our own, randomly named: a
/// `FILE.tmp` another user made beforehand (the name the temporary had) gets not a byte,
/// and FILE ends up ours, 0600. That another user's file is refused whatever its name is
/// the unit test in src/report/files.rs.
#[test]
fn a_planted_junit_temporary_is_not_written_into() {
    use std::os::unix::fs::MetadataExt;
    let fleet = Fleet::builder().nodes(1).start();
    let sc = Scenario::new(&fleet);
    let planted = sc.path("junit.xml.tmp");
    std::fs::write(&planted, "").unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o666)).unwrap();
    std::os::unix::fs::chown(&planted, Some(NOBODY), Some(NOBODY)).unwrap();
    let out = sc.run(&["--junit", "junit.xml"]);
    out.status(0);
    let planted_meta = std::fs::metadata(&planted).unwrap();
    assert_eq!(planted_meta.len(), 0, "the planted file was written into");
    assert_eq!(planted_meta.uid(), NOBODY);
    let meta = std::fs::symlink_metadata(sc.path("junit.xml")).unwrap();
    assert_eq!(
        meta.uid(),
        crate::common::own_uid(),
        "junit.xml is another user's file"
    );
    assert_eq!(meta.mode() & 0o777, 0o600);
    assert!(
        std::fs::read_to_string(sc.path("junit.xml"))
            .unwrap()
            .contains("<testcase")
    );
    // No temporary of ours is left beside it.
    let left: Vec<String> = std::fs::read_dir(sc.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains("junit") && name != "junit.xml" && name != "junit.xml.tmp")
        .collect();
    assert_eq!(left, Vec::<String>::new());
}

/// `--run-dir DIR` that another user owns, or that anyone may write, is refused before
/// any node is touched, with the fix; nothing is written into it.
#[test]
fn a_run_dir_another_user_could_change_is_refused() {
    let fleet = Fleet::builder().nodes(1).start();
    let sc = Scenario::new(&fleet);
    let theirs = sc.path("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(NOBODY), Some(NOBODY)).unwrap();
    let open = sc.path("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let their_nodes = sc.path("ours-but-their-nodes");
    std::fs::create_dir_all(their_nodes.join("nodes")).unwrap();
    std::fs::set_permissions(&their_nodes, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(their_nodes.join("nodes"), Some(NOBODY), Some(NOBODY)).unwrap();
    for (dir, shown, reason) in [
        (
            &theirs,
            theirs.clone(),
            format!(
                "it is owned by uid {NOBODY}, not by this user (uid {})",
                crate::common::own_uid()
            ),
        ),
        (
            &open,
            open.clone(),
            "it is writable by group or others (mode 777)".to_string(),
        ),
        (
            &their_nodes,
            their_nodes.join("nodes"),
            format!(
                "it is owned by uid {NOBODY}, not by this user (uid {})",
                crate::common::own_uid()
            ),
        ),
    ] {
        let out = sc.run(&["--run-dir", dir.to_str().unwrap()]);
        out.status(2).stderr_has(&format!(
            "keadm-batch: error: --run-dir: {} cannot hold the run's results: {reason}",
            shown.display()
        ));
        out.stderr_has("No node was touched.");
        let left: Vec<_> = walk(dir);
        assert!(
            left == ["nodes"] && shown.ends_with("nodes") || left.is_empty(),
            "{}: {left:?}",
            dir.display()
        );
        assert!(
            crate::common::fake_keadm::calls(&crate::common::scenario::remote_keadm(fleet.node(0)))
                .is_empty(),
            "keadm ran"
        );
    }
}

/// Every path under `dir`, relative to it.
fn walk(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(at) = todo.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            found.push(path.strip_prefix(dir).unwrap().display().to_string());
            if path.is_dir() {
                todo.push(path);
            }
        }
    }
    found.sort();
    found
}
