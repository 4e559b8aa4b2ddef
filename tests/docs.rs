//! The docs' examples are the code's output, so they cannot drift: each fenced block
//! marked `<!-- doc-check: NAME -->` in README.md or docs/*.md is compared with what the
//! binary (or the library) produces for it. A changed output fails here until the doc
//! shows the new one.

use std::path::Path;

use crate::common::test::Test;
use keadm_batch::diagnosis::FailureClass;
use keadm_batch::report::summary::Summary;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(doc: &str) -> String {
    std::fs::read_to_string(repo().join(doc)).unwrap()
}

/// The fenced blocks of `doc` marked `<!-- doc-check: name -->`, without their fences.
fn blocks(doc: &str, name: &str) -> Vec<String> {
    let text = read(doc);
    let marker = format!("<!-- doc-check: {name} -->");
    let mut found = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim() != marker {
            continue;
        }
        let fence = lines.next().unwrap_or_default();
        assert!(
            fence.starts_with("```"),
            "{doc}: {marker} is not followed by a fence"
        );
        let mut block = String::new();
        for line in lines.by_ref() {
            if line.starts_with("```") {
                break;
            }
            block.push_str(line);
            block.push('\n');
        }
        found.push(block);
    }
    assert!(!found.is_empty(), "{doc} has no block marked {marker}");
    found
}

/// The one block of `doc` marked `<!-- doc-check: name -->`; other areas' tests compare
/// their output with it too.
pub(crate) fn one_block(doc: &str, name: &str) -> String {
    let mut found = blocks(doc, name);
    assert_eq!(found.len(), 1, "{doc}: one block named {name}");
    found.remove(0)
}

/// README.md and docs/config.md show what a fresh gen-config file gets from a dry run.
#[test]
fn the_validation_example_is_a_fresh_gen_config_files_real_output() {
    let out = Test::new().args(["batch", "gen-config"]).run();
    out.status(0);
    let dry = Test::in_dir(&out.dir)
        .env("HOME", out.path("home"))
        .args(["batch", "-c", "config.yaml", "--dry-run"])
        .run();
    dry.status(2);
    let shown = format!(
        "$ keadm-batch batch -c config.yaml --dry-run\n{}",
        dry.stderr
    );
    for doc in ["README.md", "docs/config.md"] {
        assert_eq!(
            one_block(doc, "gen-config-validation"),
            shown,
            "{doc}'s validation example is not what a fresh gen-config file prints"
        );
    }
}

/// README.md's dry-run example is the start of the example config's real plan.
#[test]
fn the_readme_dry_run_example_is_the_plans_real_beginning() {
    let out = Test::in_dir(repo())
        .env("HOME", "/root")
        .args(["batch", "-c", "batch_config.example.yaml", "--dry-run"])
        .run();
    out.status(0);
    let block = one_block("README.md", "readme-dry-run");
    let mut lines: Vec<&str> = block.lines().collect();
    assert_eq!(
        lines.remove(0),
        "$ keadm-batch batch -c batch_config.example.yaml --dry-run"
    );
    assert_eq!(lines.pop(), Some("..."), "the example ends with ...");
    let real: Vec<&str> = out.stdout.lines().take(lines.len()).collect();
    assert_eq!(lines, real, "README.md's dry-run example has drifted");
}

/// docs/summary.md's example is a summary as keadm-batch writes it (every field, in
/// order), and its log lines are the nodes' keadm lines.
#[test]
fn the_summary_example_is_a_summary_and_its_log_is_keadms() {
    let block = one_block("docs/summary.md", "summary-example");
    let summary: Summary = serde_json::from_str(&block).expect("the example parses");
    let written = serde_json::to_value(&summary).unwrap();
    let shown: serde_json::Value = serde_json::from_str(&block).unwrap();
    assert_eq!(
        written, shown,
        "docs/summary.md's example has fields keadm-batch does not write"
    );
    assert_eq!(summary.totals.selected, summary.nodes.len());
    let mut log: Vec<String> = one_block("docs/summary.md", "summary-example-log")
        .lines()
        .map(str::to_string)
        .collect();
    let mut expected: Vec<String> = summary.nodes.iter().map(|n| n.log_line()).collect();
    log.sort();
    expected.sort();
    assert_eq!(log, expected);
}

/// Every failure class is documented where summary.json and the README list them.
#[test]
fn every_failure_class_is_documented() {
    let summary_md = read("docs/summary.md");
    let readme = read("README.md");
    for class in FailureClass::ALL {
        let id = format!("`{}`", class.as_str());
        assert!(summary_md.contains(&id), "docs/summary.md lacks {id}");
        assert!(readme.contains(&id), "README.md lacks {id}");
    }
}

/// Every pre-flight finding is documented where summary.json's `preflight` and keadm's
/// failure modes are described.
#[test]
fn every_pre_flight_finding_is_documented() {
    let summary_md = read("docs/summary.md");
    let kubeedge_md = read("docs/kubeedge.md");
    for finding in keadm_batch::diagnosis::FindingId::ALL {
        let id = format!("`{}`", finding.as_str());
        assert!(summary_md.contains(&id), "docs/summary.md lacks {id}");
        assert!(kubeedge_md.contains(&id), "docs/kubeedge.md lacks {id}");
    }
}

/// The man page's EXIT STATUS and README.md's exit-code table list the same codes.
#[test]
fn the_man_page_and_the_readme_agree_on_exit_codes() {
    let man = Test::new().args(["man"]).run();
    man.status(0);
    let mut from_man: Vec<i32> = keadm_batch::cli::EXIT_STATUS
        .iter()
        .map(|(code, _)| *code)
        .collect();
    for code in &from_man {
        assert!(
            man.stdout.contains(&format!(".TP\n\\fB{code}\\fR\n")),
            "the man page lacks exit status {code}"
        );
    }
    let readme = read("README.md");
    let table = readme
        .split("### Exit codes")
        .nth(1)
        .expect("README.md has an exit-code table");
    let mut from_readme: Vec<i32> = table
        .lines()
        .take_while(|l| !l.starts_with("##"))
        .filter_map(|l| l.strip_prefix("| "))
        .filter_map(|l| l.split(' ').next()?.parse().ok())
        .collect();
    from_man.sort();
    from_readme.sort();
    assert_eq!(from_man, from_readme);
}

/// README.md says what `-q` prints as the code prints it (tests/run.rs checks the code):
/// a line per node that did not succeed, then the one-line result.
#[test]
fn the_readme_says_what_quiet_prints() {
    let readme = read("README.md")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        readme.contains(
            "`-q` prints only errors: a line for each node that did not succeed, as it \
             finishes, and the final result, one line whether the run succeeded or not."
        ),
        "README.md's `-q` sentence is not what -q does"
    );
}
