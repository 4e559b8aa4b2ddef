//! The docs' examples are the code's output, so they cannot drift: each fenced block
//! marked `<!-- doc-check: NAME -->` in README.md or docs/*.md is compared with what the
//! binary (or the library) produces for it. A changed output fails here until the doc
//! shows the new one.

use std::path::Path;

use crate::common::test::Test;
use keadm_batch::bundle::BundleError;
use keadm_batch::diagnosis::{FailureClass, FindingId};
use keadm_batch::error::{Error, Interruption, OutputError, UsageError};
use keadm_batch::kit::KitError;
use keadm_batch::plan::SelectionError;
use keadm_batch::report::merge::MergeError;
use keadm_batch::report::summary::Summary;
use keadm_batch::stage::StageError;

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

/// The fields of a JSON document as paths (`nodes[].findings[].id`), arrays' items
/// merged: what a document's shape promises, whatever its values.
fn json_fields(value: &serde_json::Value, at: &str, out: &mut std::collections::BTreeSet<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, inner) in map {
                let path = if at.is_empty() {
                    key.clone()
                } else {
                    format!("{at}.{key}")
                };
                out.insert(path.clone());
                json_fields(inner, &path, out);
            }
        }
        serde_json::Value::Array(items) => {
            for item in items {
                json_fields(item, &format!("{at}[]"), out);
            }
        }
        _ => {}
    }
}

/// Every field of `real`, a JSON document keadm-batch printed, is in the example of
/// `doc` marked `<!-- doc-check: name -->`: what the tool writes is documented. Other
/// areas' tests call it with the output they got.
pub(crate) fn documented_fields(doc: &str, name: &str, real: &serde_json::Value) {
    let example: serde_json::Value = serde_json::from_str(&one_block(doc, name))
        .unwrap_or_else(|e| panic!("{doc}'s example {name} does not parse: {e}"));
    let (mut shown, mut written) = Default::default();
    json_fields(&example, "", &mut shown);
    json_fields(real, "", &mut written);
    let undocumented: Vec<&String> = written.difference(&shown).collect();
    assert!(
        undocumented.is_empty(),
        "{doc}'s example {name} lacks fields keadm-batch writes: {undocumented:?}"
    );
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

/// The backticked words in `text` that look like ids (`low_disk`), in order.
fn ids_in(text: &str) -> Vec<&str> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|word| {
            !word.is_empty() && word.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
        })
        .collect()
}

/// The pre-flight finding ids docs/summary.md and docs/kubeedge.md list are the code's,
/// all of them and nothing else.
#[test]
fn the_documented_finding_ids_are_the_codes() {
    let code: Vec<&str> = FindingId::ALL.iter().map(|id| id.as_str()).collect();
    let summary_md = read("docs/summary.md");
    let row = summary_md
        .lines()
        .find(|l| l.starts_with("| `preflight` |"))
        .expect("docs/summary.md has a `preflight` row");
    let listed = row
        .split_once("objects with `id` (")
        .and_then(|(_, rest)| rest.split_once(')'))
        .expect("the `preflight` row lists the ids in parentheses")
        .0;
    assert_eq!(ids_in(listed), code, "docs/summary.md's `preflight` row");
    let kubeedge_md = read("docs/kubeedge.md");
    let table: Vec<&str> = kubeedge_md
        .split("| finding | why it fails the join |")
        .nth(1)
        .expect("docs/kubeedge.md has the findings table")
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| ids_in(l).first().copied())
        .collect();
    assert_eq!(table, code, "docs/kubeedge.md's findings table");
}

/// The man page's EXIT STATUS: each code with its text, roff escapes undone.
fn man_exit_codes() -> Vec<(i32, String)> {
    let man = Test::new().args(["man"]).run();
    man.status(0);
    let section = man
        .stdout
        .split(".SH \"EXIT STATUS\"")
        .nth(1)
        .expect("the man page has an EXIT STATUS section")
        .split("\n.SH")
        .next()
        .unwrap()
        .to_string();
    section
        .split(".TP\n")
        .skip(1)
        .map(|entry| {
            let (head, text) = entry.split_once('\n').unwrap();
            let code = head.trim_start_matches("\\fB").trim_end_matches("\\fR");
            let text = text.replace("\\-", "-").replace("\\e", "\\");
            (code.parse().unwrap(), text)
        })
        .collect()
}

/// README.md's exit-code table: each code with its text.
fn readme_exit_codes() -> Vec<(i32, String)> {
    let readme = read("README.md");
    readme
        .split("### Exit codes")
        .nth(1)
        .expect("README.md has an exit-code table")
        .lines()
        .take_while(|l| !l.starts_with("##"))
        .filter_map(|l| l.strip_prefix("| "))
        .filter_map(|l| {
            let (code, text) = l.split_once(" | ")?;
            Some((code.parse().ok()?, text.to_string()))
        })
        .collect()
}

/// For each kind of failure, the exit code the code gives it is documented, in the man page
/// and in README.md, as covering that kind; and docs/summary.md's exit codes are the code's.
#[test]
fn each_failure_exits_with_the_code_the_docs_give_it() {
    let path = std::path::PathBuf::from;
    let io = || std::io::Error::from(std::io::ErrorKind::StorageFull);
    let cases: Vec<(Error, &str)> = vec![
        (
            UsageError::from(SelectionError::OnlyMatchesNothing {
                patterns: vec!["edge-9*".into()],
            })
            .into(),
            "command line",
        ),
        (
            UsageError::UnsafeDownload(StageError::PlainHttp {
                setting: keadm_batch::stage::CONFIG_DOWNLOAD_URL,
                url: "http://mirror".into(),
                arches: "amd64".into(),
            })
            .into(),
            "http",
        ),
        (
            BundleError::NoVersion {
                config: path("config.yaml"),
            }
            .into(),
            "bundle",
        ),
        (StageError::EmptyVersion.into(), "stag"),
        (
            StageError::Kit(KitError::NotListed {
                file: path("kit/amd64/x.tar"),
                manifest: path("kit/kit.json"),
            })
            .into(),
            "kit",
        ),
        (
            StageError::ImageArchiveUnnamed {
                path: path("kit/amd64/images/x.tar"),
            }
            .into(),
            "image archive",
        ),
        (
            StageError::ImageArchiveName {
                path: path("kit/amd64/images/a b.tar"),
                why: "its file name `a b.tar` holds ` `".into(),
                instead: "a_b.tar".into(),
            }
            .into(),
            "file name",
        ),
        (
            BundleError::PinnedMismatch {
                archive: path("kit.tar"),
                expected: "ab".repeat(64),
                actual: "cd".repeat(64),
                inside: None,
            }
            .into(),
            "--expect-sha512",
        ),
        (
            BundleError::PinForDirectory { path: path("kit") }.into(),
            "--expect-sha512",
        ),
        (
            BundleError::NotFound {
                image: "kubeedge/installation-package:v1.23.1".into(),
                registry: "docker.io".into(),
                status: "404 Not Found".into(),
            }
            .into(),
            "bundle",
        ),
        (
            Error::NodesFailed {
                failed: 1,
                total: 2,
                run_dir: "run".into(),
            },
            "did not succeed",
        ),
        (Error::Findings { nodes: 1, total: 2 }, "--preflight-only"),
        (
            Error::MergedNodesFailed {
                failed: 1,
                total: 2,
                dirs: "s1, s2".into(),
                log: None,
            },
            "merge",
        ),
        (OutputError::Stdout(io()).into(), "standard output"),
        (
            BundleError::Io {
                action: "write",
                path: path("kit/kit.json"),
                error: "No space left on device".into(),
            }
            .into(),
            "kit",
        ),
        (
            Interruption::Probes {
                probed: 1,
                total: 2,
            }
            .into(),
            "ctrl-c",
        ),
    ];
    let man = man_exit_codes();
    let readme = readme_exit_codes();
    for (error, words) in &cases {
        let code = error.exit_code();
        for (doc, table) in [("the man page", &man), ("README.md", &readme)] {
            let text = table
                .iter()
                .find(|(c, _)| *c == code)
                .map(|(_, text)| text.to_lowercase())
                .unwrap_or_else(|| panic!("{doc} has no exit status {code}"));
            assert!(
                text.contains(words),
                "{error}\n  exits {code}, but {doc}'s text for {code} says nothing of {words:?}: {text}"
            );
        }
    }

    // docs/summary.md: every exit code it names is one the code has, and its two claims
    // about `batch merge` are what merge's errors exit with.
    let summary_md = read("docs/summary.md");
    let documented: Vec<i32> = man.iter().map(|(code, _)| *code).collect();
    // "(exit 2)", "exits 1", "exits with 0": keadm-batch's own codes ("exited with 0" is
    // keadm's, "exit status" a field).
    for pattern in ["(exit ", "exits with ", "exits "] {
        for (at, _) in summary_md.match_indices(pattern) {
            let digits: String = summary_md[at + pattern.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if let Ok(code) = digits.parse::<i32>() {
                assert!(
                    documented.contains(&code),
                    "docs/summary.md names exit code {code}, which the man page does not list"
                );
            }
        }
    }
    let duplicate: Error = UsageError::from(MergeError::Duplicate {
        node: "edge-1".into(),
        first: "s1".into(),
        second: "s2".into(),
    })
    .into();
    let merged_failed = &cases
        .iter()
        .find(|(e, _)| matches!(e, Error::MergedNodesFailed { .. }))
        .unwrap()
        .0;
    for claim in [
        format!("both directories (exit {})", duplicate.exit_code()),
        format!(
            "the command exits {} when some node did not succeed",
            merged_failed.exit_code()
        ),
    ] {
        // Read as prose: however the paragraph happens to be wrapped.
        let flat = summary_md.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(flat.contains(&claim), "docs/summary.md lacks {claim:?}");
    }
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
