//! report.html of a real run (20 sshd nodes on loopback: three failing in three classes,
//! two hostile), opened in a headless Chromium: a row per node, the failed nodes under
//! their class with its fix, the filters narrowing the rows, transcript links that
//! resolve (also from a copy of the run directory), and nothing of the nodes' run as
//! script. The screenshot it keeps is docs/images/report.png's source.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::common::browser::Browser;
use crate::common::fleet::{Fleet, refused_endpoint};
use crate::common::hostile::{self, HostileKeadm};
use crate::common::scenario::Scenario;

const NODES: usize = 20;
/// keadm says the token expired: `token_invalid`.
const TOKEN: usize = 3;
/// Its port refuses connections: `unreachable`.
const REFUSED: usize = 7;
/// keadm finds edgecore running: `already_joined`.
const JOINED: usize = 11;
/// keadm prints markup meant to run in the report.
const MARKUP: usize = 15;
/// The hostile fixture's terminal escapes and forged log line.
const ESCAPES: usize = 17;

/// What the markup node prints as its last line: were it markup, `window.pwned` is set.
const PAYLOAD: &str = r#"<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>"#;

fn run() -> (tempfile::TempDir, PathBuf, serde_json::Value) {
    let fleet = Fleet::builder().nodes(NODES).start();
    for (node, marker) in [(TOKEN, "token"), (JOINED, "joined"), (MARKUP, "markup")] {
        std::fs::write(fleet.node(node).tmp_path(marker), "").unwrap();
    }
    hostile::mark(fleet.node(ESCAPES), HostileKeadm::PrintsEscapes);
    let keadm = hostile::keadm()
        .runs("if [ -e /tmp/token ]; then echo 'Error: token is expired' >&2; exit 1; fi")
        .runs("if [ -e /tmp/joined ]; then echo 'Error: edgecore is already running on this node, please run reset to clean up first' >&2; exit 1; fi")
        .runs(&format!("if [ -e /tmp/markup ]; then echo '{PAYLOAD}'; exit 1; fi"))
        .runs("sleep 0.$(($$ % 7))");
    let mut sc = Scenario::new(&fleet)
        .keadm(keadm)
        .max_run_num(5)
        .endpoint_for(REFUSED, refused_endpoint());
    for i in 0..NODES {
        sc = sc.node_yaml_for(i, if i < 10 { "site: north" } else { "site: south" });
    }
    let out = sc.run(&[]);
    out.status(1);
    let summary = out.summary();
    // Keep the run past the fleet: the scenario's directory holds it.
    let run_dir = std::fs::canonicalize(out.latest_run()).unwrap();
    let keep = tempfile::tempdir().unwrap();
    let copy = keep.path().join("run");
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(&run_dir)
        .arg(&copy)
        .status()
        .unwrap();
    assert!(status.success());
    (keep, copy, summary)
}

#[test]
fn the_report_of_a_real_run_reads_in_a_browser() {
    let (_keep, run_dir, summary) = run();
    let classes: Vec<(&str, &str)> = summary["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| Some((n["name"].as_str()?, n["failure_class"].as_str()?)))
        .collect();
    assert!(
        classes.contains(&("edge-03", "token_invalid")),
        "{classes:?}"
    );
    assert!(classes.contains(&("edge-07", "unreachable")), "{classes:?}");
    assert!(
        classes.contains(&("edge-11", "already_joined")),
        "{classes:?}"
    );
    let report = run_dir.join("report.html");
    assert!(report.is_file(), "the run wrote no report.html");

    let browser = Browser::start();
    browser.open(&report);
    let shown = || browser.text("#shown-count").unwrap_or_default();
    // The page's script ran: it counted the rows.
    assert_eq!(shown(), "20 of 20 nodes");
    assert_eq!(browser.count_shown("#timeline .node-row"), NODES);
    assert_eq!(browser.text("#exit-status").as_deref(), Some("1"));
    let count = |outcome: &str| browser.text(&format!("#counts [data-outcome={outcome}] .count"));
    assert_eq!(count("succeeded").as_deref(), Some("15"));
    assert_eq!(count("failed").as_deref(), Some("5"));
    // Every row has its phases as bars; a succeeded node went through all four.
    let phases = browser.eval(
        "return Array.from(document.querySelectorAll('.node-row[data-name=\"edge-00\"] .bar')).map(b => b.dataset.phase);",
        json!([]),
    );
    let phases: Vec<String> = serde_json::from_value(phases).unwrap();
    let steps = &summary["nodes"][0]["steps"];
    let expected: Vec<&str> = ["connect", "prepare", "upload", "run"]
        .into_iter()
        .filter(|step| steps[step].is_number())
        .collect();
    assert_eq!(phases, expected, "{steps}");
    assert!(
        expected.contains(&"connect") && expected.contains(&"run"),
        "{steps}"
    );
    let bar_width = browser.eval(
        "return document.querySelector('.node-row[data-name=\"edge-00\"] .bar[data-phase=run]').getBoundingClientRect().width;",
        json!([]),
    );
    assert!(bar_width.as_f64().unwrap() >= 1.0, "{bar_width}");

    // The failures under their classes, each with its fix and its nodes.
    for (class, node) in [
        ("token_invalid", "edge-03"),
        ("unreachable", "edge-07"),
        ("already_joined", "edge-11"),
    ] {
        let section = format!("#failures section.failure-class[data-class={class}]");
        let names = browser
            .text(&format!("{section} ul.fix"))
            .unwrap_or_default();
        assert!(names.contains(node), "{class}: {names}");
        let fix = browser
            .text(&format!("{section} p.fix"))
            .unwrap_or_default();
        assert!(fix.starts_with("Fix: ") && fix.len() > 20, "{class}: {fix}");
    }

    // The hostile node's text is text, and ran nothing.
    assert_eq!(
        browser.eval("return typeof window.pwned;", json!([])),
        json!("undefined")
    );
    let markup = browser
        .text(".node-row[data-name=\"edge-15\"] .node-error")
        .unwrap_or_default();
    assert!(markup.contains(PAYLOAD), "{markup}");
    assert_eq!(
        browser.eval(
            "return document.querySelectorAll('img, #rows script').length;",
            json!([])
        ),
        json!(0)
    );
    let escapes = browser
        .text(".node-row[data-name=\"edge-17\"] .node-error")
        .unwrap_or_default();
    assert!(
        !escapes.contains('\u{1b}') && !escapes.contains('\u{7}'),
        "{escapes:?}"
    );

    // Filters: by name, by outcome, by class, by site; the count follows.
    browser.type_into("#filter-text", "edge-11");
    assert_eq!(shown(), "1 of 20 nodes");
    assert_eq!(browser.count_shown("#timeline .node-row"), 1);
    assert!(browser.url().contains("#q=edge-11"), "{}", browser.url());
    browser.type_into("#filter-text", "");
    browser.choose("#filter-outcome", "failed");
    assert_eq!(shown(), "5 of 20 nodes");
    browser.choose("#filter-class", "unreachable");
    assert_eq!(shown(), "1 of 20 nodes");
    browser.choose("#filter-class", "");
    browser.choose("#filter-outcome", "");
    browser.choose("#filter-site", "south");
    assert_eq!(shown(), "10 of 20 nodes");
    browser.choose("#filter-site", "");

    // Grouped by site: a header per site, its rows under it.
    browser.choose("#group-by", "site");
    let groups = browser.eval(
        "return Array.from(document.querySelectorAll('#rows .group-row')).map(g => g.textContent);",
        json!([]),
    );
    assert_eq!(
        groups,
        json!(["site north: 10 of 10 nodes", "site south: 10 of 10 nodes"])
    );
    browser.choose("#group-by", "none");

    // Sorted by duration: the slowest first.
    browser.choose("#sort-by", "duration");
    let durations = browser.eval(
        "return Array.from(document.querySelectorAll('#rows .node-row')).map(r => parseFloat(r.dataset.duration));",
        json!([]),
    );
    let durations: Vec<f64> = serde_json::from_value(durations).unwrap();
    assert!(durations.windows(2).all(|w| w[0] >= w[1]), "{durations:?}");

    // Zoomed to the first half: a bar past it is out of the track's view.
    let span: f64 = browser
        .eval(
            "return parseFloat(document.getElementById('timeline').dataset.span);",
            json!([]),
        )
        .as_f64()
        .unwrap();
    browser.eval(
        "const to = document.getElementById('zoom-to'); to.value = arguments[0]; to.dispatchEvent(new Event('change'));",
        json!([format!("{:.3}", span / 2.0)]),
    );
    let scale = browser.eval(
        "return getComputedStyle(document.getElementById('timeline')).getPropertyValue('--span');",
        json!([]),
    );
    let zoomed: f64 = scale.as_str().unwrap().trim().parse().unwrap();
    assert!((zoomed - span / 2.0).abs() < 0.01, "{zoomed} vs {span}");
    browser.click("#zoom-reset");

    // The page made no error on its console (a refused script would be one).
    assert_eq!(browser.console_errors(), Vec::<String>::new());

    // The page as it opens, for the screenshot.
    browser.choose("#sort-by", "start");
    screenshot(&browser);

    // A transcript link resolves, in the copy of the run directory.
    let href = browser
        .eval(
            "return document.querySelector('#failures section[data-class=token_invalid] a.transcript').getAttribute('href');",
            json!([]),
        )
        .as_str()
        .unwrap()
        .to_string();
    assert!(!href.starts_with('/') && !href.contains("://"), "{href}");
    let resolved = browser
        .eval(
            "return document.querySelector('#failures section[data-class=token_invalid] a.transcript').href;",
            json!([]),
        )
        .as_str()
        .unwrap()
        .to_string();
    browser.click("#failures section[data-class=token_invalid] a.transcript");
    // The click navigates on its own time: wait for the transcript to be the page.
    let url = browser.wait_for_url(|url| url.ends_with(".log"));
    assert!(url == resolved, "{url} is not the link's {resolved}");
    assert!(
        url.starts_with(&format!("file://{}/nodes/", run_dir.display())),
        "{url}"
    );
    let text = browser.eval("return document.body.innerText;", json!([]));
    assert!(
        text.as_str().unwrap().contains("token is expired"),
        "{url}: {text}"
    );
}

/// The screenshot, kept where the test's output is (and, with KEADM_BATCH_SCREENSHOT set
/// to a path, there too: docs/images/report.png is made that way).
fn screenshot(browser: &Browser) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    browser.screenshot(&dir.join("report.png"));
    if let Some(path) = std::env::var_os("KEADM_BATCH_SCREENSHOT") {
        browser.full_page_screenshot(Path::new(&path), 1400, 2400);
    }
    let png = std::fs::read(dir.join("report.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "the screenshot is not a PNG");
}

/// `batch report RUN_DIR` writes the page again from summary.json, and from the journal
/// of a run that never wrote one; `batch merge --into` writes the merged run's, whose
/// links lead into the shards; a directory with neither is refused with what to do.
#[test]
fn batch_report_and_merge_write_the_page() {
    use crate::common::fake_keadm::FakeKeadm;
    use crate::common::test::Test;
    use std::os::unix::fs::PermissionsExt;

    let fleet = Fleet::builder().nodes(2).start();
    let sc = Scenario::new(&fleet).keadm(FakeKeadm::new().prints("joined"));
    sc.run(&["--run-dir", "one"]).status(0);
    let page = sc.path("one/report.html");
    let first = std::fs::read_to_string(&page).unwrap();
    assert!(first.contains("data-name=\"edge-01\""), "{first}");
    assert_eq!(
        std::fs::metadata(&page).unwrap().permissions().mode() & 0o777,
        0o600
    );

    // Again, from summary.json alone.
    std::fs::remove_file(&page).unwrap();
    let out = Test::in_dir(sc.dir.path())
        .args(["batch", "report", "one"])
        .run();
    out.status(0).stdout_has("one/report.html");
    let again = std::fs::read_to_string(&page).unwrap();
    assert_eq!(again.matches("class=\"node-row\"").count(), 2);

    // A run that died before its summary: the journal serves.
    std::fs::remove_file(sc.path("one/summary.json")).unwrap();
    std::fs::remove_file(&page).unwrap();
    Test::in_dir(sc.dir.path())
        .args(["batch", "report", "one"])
        .run()
        .status(0);
    let from_journal = std::fs::read_to_string(&page).unwrap();
    assert_eq!(from_journal.matches("class=\"node-row\"").count(), 2);

    // The merged run's page, its transcript links into the shard beside it.
    sc.run(&["--run-dir", "two"]).status(0);
    Test::in_dir(sc.dir.path())
        .args(["batch", "merge", "two", "--into", "merged"])
        .run()
        .status(0);
    let merged = std::fs::read_to_string(sc.path("merged/report.html")).unwrap();
    assert!(
        merged.contains("href=\"../two/nodes/1-edge-00.log\""),
        "{merged}"
    );

    let out = Test::in_dir(sc.dir.path())
        .args(["batch", "report", "nowhere"])
        .run();
    out.status(2).stderr_has("nowhere");
    assert!(!sc.path("nowhere").exists());
}

/// `batch report` with no run directory writes the page of batch_runs/latest, and prints
/// where it is.
#[test]
fn batch_report_defaults_to_the_latest_run() {
    use crate::common::fake_keadm::FakeKeadm;
    use crate::common::test::Test;

    let fleet = Fleet::builder().nodes(1).start();
    let sc = Scenario::new(&fleet).keadm(FakeKeadm::new().prints("joined"));
    let out = sc.run(&[]);
    out.status(0);
    let page = out.latest_run().join("report.html");
    std::fs::remove_file(&page).unwrap();
    let out = Test::in_dir(sc.dir.path()).args(["batch", "report"]).run();
    out.status(0);
    assert!(page.exists(), "{}", out.stderr);
    assert_eq!(
        std::fs::canonicalize(out.stdout.trim()).unwrap(),
        std::fs::canonicalize(&page).unwrap()
    );
}

/// With a kubeconfig, each joined node's row shows how long it took from its start to its
/// Node Ready (summary.json's `cluster.ready_after_start`), with both figures as its
/// tooltip: keadm join exits only after edgecore ran a while, so the time from keadm's
/// exit alone is often 0.
#[test]
fn a_ready_node_s_row_shows_its_time_from_its_start_to_ready() {
    use crate::common::apiserver::{Behaviour, FakeApiServer, keadm_exited};
    use crate::common::fake_keadm::FakeKeadm;
    use crate::common::scenario::remote_keadm;
    use std::time::Duration;

    let fleet = Fleet::builder().nodes(2).start();
    let api = FakeApiServer::start();
    for (i, node) in fleet.nodes().iter().enumerate() {
        let calls = remote_keadm(node).with_extension("calls");
        api.node_on(
            &Scenario::name(i),
            move || keadm_exited(&calls),
            Behaviour::ReadyAfter(Duration::from_millis(300)),
        );
    }
    let sc = Scenario::new(&fleet).keadm(FakeKeadm::new().prints("Install Complete!"));
    let kubeconfig = api.kubeconfig().display().to_string();
    let out = sc.run(&["--kubeconfig", &kubeconfig]);
    out.status(0);
    let summary = out.summary();
    let browser = Browser::start();
    browser.open(&out.latest_run().join("report.html"));
    for i in 0..2 {
        let node = &summary["nodes"][i];
        let cluster = &node["cluster"];
        let since_start = cluster["ready_after_start"].as_f64().unwrap();
        let ready = cluster["ready_after"].as_f64().unwrap();
        let row = format!(
            ".node-row[data-name=\"{}\"] .node-time .ready",
            Scenario::name(i)
        );
        assert_eq!(
            browser.text(&row).as_deref(),
            Some(format!("Ready {since_start:.1} s").as_str()),
            "{node}"
        );
        let title = browser.eval(
            "return document.querySelector(arguments[0]).title;",
            json!([row]),
        );
        assert_eq!(
            title,
            json!(format!(
                "Ready {since_start:.1} s after the node's start, {ready:.1} s after keadm exited"
            )),
            "{node}"
        );
    }
}
