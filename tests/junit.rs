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
