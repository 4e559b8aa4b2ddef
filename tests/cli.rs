//! The binary before any node is touched: gen-config, validation errors (golden files,
//! exact text and exit codes), dry runs, and the command line itself.

use std::path::Path;

use crate::common::fake_keadm::FakeKeadm;
use crate::common::fake_release::{Built, ChecksumFile, FakeRelease};
use crate::common::fleet::Fleet;
use crate::common::http_server::{HttpServer, Route};
use crate::common::scenario::Scenario;
use crate::common::test::{Test, golden};

fn fixtures() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures"))
}

#[test]
fn every_invalid_fixture_exits_2_with_its_exact_message() {
    let dir = fixtures().join("invalid");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    names.sort();
    assert!(names.len() >= 30, "{names:?}");
    for name in names {
        let out = Test::in_dir(&dir)
            .args(["batch", "-c", &name, "--dry-run"])
            .run();
        let (status, stdout, stderr) = (out.code(), out.stdout, out.stderr);
        assert_eq!(status, 2, "{name}: exit status\n{stderr}");
        assert_eq!(stdout, "", "{name}: a failed validation prints no plan");
        assert!(!stderr.contains("panicked"), "{name}: {stderr}");
        // Paths resolve against the current directory; keep the checkout's location out of the golden files.
        let stderr = stderr.replace(&fixtures().display().to_string(), "$FIXTURES");
        golden(
            &format!("fixtures/invalid/{}.stderr", name.trim_end_matches(".yaml")),
            &stderr,
        );
    }
}

#[test]
fn keadms_own_template_lists_every_empty_required_field() {
    let dir = fixtures().join("invalid");
    let out = Test::in_dir(&dir)
        .args(["batch", "-c", "keadm-gen-config-master.yaml", "--dry-run"])
        .run();
    let (status, stderr) = (out.code(), out.stderr);
    assert_eq!(status, 2);
    for field in [
        "keadmVersion is empty",
        "keadmCmd is empty",
        "ssh.ip is empty",
        "password is empty",
    ] {
        assert!(stderr.contains(field), "{field}: {stderr}");
    }
    // `url: ""` and `copyFrom: ""` mean "not set" rather than keadm's broken URL and path.
    assert!(!stderr.contains("url"), "{stderr}");
    assert!(!stderr.contains("copyFrom"), "{stderr}");
}

#[test]
fn keadms_template_filled_in_dry_runs() {
    let dir = fixtures().join("valid");
    let out = Test::in_dir(&dir)
        .args([
            "batch",
            "-c",
            "keadm-gen-config-master-filled.yaml",
            "--dry-run",
        ])
        .run();
    let (status, stdout, stderr) = (out.code(), out.stdout, out.stderr);
    assert_eq!(status, 0, "{stderr}");
    assert!(stdout.contains("node 1 edge-node"), "{stdout}");
    assert!(stdout.contains("--token=***"), "{stdout}");
    assert!(
        !stdout.contains("abcdef.eyJhbGciOi"),
        "the token leaked: {stdout}"
    );
    assert!(
        !stdout.contains("s3cret-pw"),
        "the password leaked: {stdout}"
    );
}

#[test]
fn yaml_1_1_oddities_read_as_keadm_reads_them() {
    let dir = fixtures().join("valid");
    let out = Test::in_dir(&dir)
        .args([
            "batch",
            "-c",
            "yaml11-oddities.yaml",
            "--dry-run",
            "--known-hosts",
            "/etc/keadm-batch/known_hosts",
        ])
        .run();
    let (status, stdout, stderr) = (out.code(), out.stdout, out.stderr);
    assert_eq!(status, 0, "{stderr}");
    golden("fixtures/valid/yaml11-oddities.stdout", &stdout);
    golden("fixtures/valid/yaml11-oddities.stderr", &stderr);
    assert!(
        stdout.contains("at most 3 at once"),
        "the last maxRunNum wins"
    );
    assert!(
        stdout.contains("address:   192.0.2.31:22"),
        "0x16 is 22: {stdout}"
    );
    assert!(stdout.contains("[2001:db8::31]:2222"), "{stdout}");
    assert!(stderr.contains("appears again"), "{stderr}");
}

#[test]
fn example_config_dry_runs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Test::in_dir(root)
        .args(["batch", "-c", "batch_config.example.yaml", "--dry-run"])
        .run();
    let (status, stdout, stderr) = (out.code(), out.stdout, out.stderr);
    assert_eq!(status, 0, "{stderr}");
    assert_eq!(stderr, "");
    assert!(stdout.contains("3 of 3 selected"));
    assert!(stdout.contains("cd /usr/local/bin && yes | ./keadm reset edge --force"));
    assert!(stdout.contains("--token=***"));
    assert!(!stdout.contains("change-me"));
}

#[test]
fn gen_config_writes_a_template_that_validates_once_filled() {
    let out = Test::new().args(&["batch", "gen-config"]).run();
    out.status(0);
    let written = std::fs::read_to_string(out.path("config.yaml")).unwrap();
    golden("snapshots/gen-config.yaml", &written);
    // As written, it names exactly the values left to fill in.
    let cmd = |args: &[&str]| {
        Test::in_dir(&out.dir)
            .env("HOME", out.path("home"))
            .args(args)
            .run()
    };
    let first = cmd(&["batch", "-c", "config.yaml", "--dry-run"]);
    assert_eq!(first.status.code(), Some(2));
    let stderr = &first.stderr;
    assert!(
        stderr.contains("ssh.ip is empty") && stderr.contains("password is empty"),
        "{stderr}"
    );
    let filled = written
        .replace("ip: \"\"  ", "ip: 192.0.2.9")
        .replace("password: \"\"  ", "password: pw  ")
        .replace("token: \"\"  ", "token: 0814fda185db6ddb8324d682653b1b389fb6b41ed2eac2235897e47e3496ee07.eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJleHAiOjQxMDI0NDQ4MDB9.bm90LWEtcmVhbC1zaWduYXR1cmU ");
    std::fs::write(out.path("config.yaml"), filled).unwrap();
    let second = cmd(&["batch", "-c", "config.yaml", "--dry-run"]);
    assert_eq!(second.status.code(), Some(0), "{}", second.stderr);
    assert_eq!(second.stderr, "", "no warnings on our own template");
}

#[test]
fn gen_config_refuses_to_overwrite_without_force() {
    let out = Test::new()
        .file("mine.yaml", "precious")
        .args(&["batch", "gen-config", "-o", "mine.yaml"])
        .run();
    out.status(2)
        .stderr_has("mine.yaml already exists. Pass --force to overwrite it");
    assert_eq!(
        std::fs::read_to_string(out.path("mine.yaml")).unwrap(),
        "precious"
    );
    let out = Test::new()
        .file("mine.yaml", "precious")
        .args(&["batch", "gen-config", "-o", "mine.yaml", "--force"])
        .run();
    out.status(0);
    assert!(
        std::fs::read_to_string(out.path("mine.yaml"))
            .unwrap()
            .contains("keadmVersion")
    );
}

#[test]
fn help_is_documented() {
    let out = Test::new().args(&["batch", "--help"]).run();
    out.status(0);
    golden("snapshots/help-batch.txt", &out.stdout);
    let out = Test::new().args(&["--help"]).run();
    out.status(0);
    golden("snapshots/help.txt", &out.stdout);
}

#[test]
fn missing_config_file_is_named() {
    Test::new()
        .args(&["batch", "-c", "nope.yaml", "--dry-run"])
        .run()
        .status(2)
        .stderr_has("The config file nope.yaml does not exist; create one with `keadm-batch batch gen-config -o nope.yaml`.");
}

#[test]
fn no_config_flag_is_a_usage_error() {
    Test::new()
        .args(&["batch"])
        .run()
        .status(2)
        .stderr_has("a config file is required");
}

const TWO_NODES: &str = "keadm:\n  keadmVersion: v1.23.1\nnodes:\n  - nodeName: edge-a\n    keadmCmd: join --edgenode-name=edge-a\n    ssh: {ip: 192.0.2.1, username: root, auth: {type: agent}}\n  - nodeName: core-b\n    keadmCmd: join --edgenode-name=core-b\n    ssh: {ip: 192.0.2.2, username: ops, auth: {type: agent}}\n";

/// A dry run of [`TWO_NODES`] with `--only pattern`.
fn only(pattern: &str) -> crate::common::test::Output {
    Test::new()
        .config(TWO_NODES)
        .args(["batch", "-c", "config.yaml", "--dry-run", "--only", pattern])
        .run()
}

#[test]
fn only_selects_by_glob_and_refuses_to_select_nothing() {
    for pattern in ["edge-*", "[ec]*-[!b]"] {
        only(pattern)
            .status(0)
            .stdout_has("1 of 2 selected")
            .stdout_has("node 1 edge-a");
    }
    only("nothing-*")
        .status(2)
        .stderr_has("--only nothing-* matches no node in the config");
    only("edge-[a")
        .status(2)
        .stderr_has("`edge-[a` is not a valid glob");
}

#[test]
fn klogs_verbosity_level_and_json_without_a_summary_are_refused_clearly() {
    Test::new()
        .config(TWO_NODES)
        .args(&["batch", "-c", "config.yaml", "--dry-run", "-v", "4"])
        .run()
        .status(2)
        .stderr_has("keadm-batch's -v takes no level")
        .stderr_lacks("subcommand");
    // --preflight-only has a JSON document of its own (tests/preflight.rs); a dry run
    // prints a plan for people.
    let dry_json = [
        "batch",
        "-c",
        "config.yaml",
        "--dry-run",
        "--output",
        "json",
    ];
    let out = Test::new().config(TWO_NODES).args(dry_json).run();
    out.status(2)
        .stderr_has("--output json prints a run's summary.json, which --dry-run does not produce");
    assert_eq!(out.stdout, "");
}

#[test]
fn a_run_dir_that_cannot_be_made_is_named() {
    let config = "keadm:\n  keadmBinDir: /usr/local/bin\nnodes:\n  - nodeName: edge-a\n    keadmCmd: reset\n    ssh: {ip: 127.0.0.1, port: 1, username: root, auth: {type: agent}}\n";
    let out = Test::new()
        .config(config)
        .file("a-file", "not a directory")
        .args(&["batch", "-c", "config.yaml", "--run-dir", "a-file/x"])
        .run();
    out.status(1)
        .stderr_has("Could not create the run directory a-file/x: ")
        .stderr_lacks("under");
}

#[test]
fn non_root_logins_run_under_sudo_and_flags_override_the_file() {
    Test::new()
        .config(TWO_NODES)
        .args(&[
            "batch",
            "-c",
            "config.yaml",
            "--dry-run",
            "--timeout",
            "42",
            "--host-key-policy",
            "strict",
            "--max-run-num",
            "7",
        ])
        .run()
        .status(0)
        .stdout_has("at most 7 at once")
        .stdout_has("ops with ssh-agent, command under sudo")
        .stdout_has("host keys: strict")
        .stdout_has("command 42s");
}

#[test]
fn password_env_and_env_template_values_are_masked() {
    const SECRET_PATH: &str = "very-secret-path";
    let config = "keadm:\n  keadmVersion: v1.23.1\nnodes:\n  - nodeName: edge-a\n    keadmCmd: 'join --edgenode-name=edge-a --certpath={{env \"SECRET_PATH\"}}'\n    ssh:\n      ip: 192.0.2.1\n      username: root\n      auth:\n        type: password\n        passwordAuth:\n          passwordEnv: NODE_PW\n";
    let out = Test::new()
        .config(config)
        .env("NODE_PW", "pw-from-env")
        .env("SECRET_PATH", SECRET_PATH)
        .args(&["batch", "-c", "config.yaml", "--dry-run"])
        .run();
    out.status(0)
        .stdout_has("--certpath=***")
        .stderr_lacks("pw-from-env")
        .stderr_lacks(SECRET_PATH);
    for secret in ["pw-from-env", SECRET_PATH] {
        assert!(
            !out.stdout.contains(secret),
            "{secret} leaked: {}",
            out.stdout
        );
    }

    // A real run with both: the password logs in and the path reaches keadm, whose output
    // repeats it; neither may reach the console, the log, the transcript or the run's files.
    let fleet = Fleet::builder().nodes(1).start();
    let password = fleet.root_password().expose().to_string();
    let sc = Scenario::new(&fleet)
        .keadm(FakeKeadm::new().runs("echo \"keadm got: $*\""))
        .cmd("join --edgenode-name={name} --certpath={{env \"SECRET_PATH\"}}");
    let config = sc.config_text().replacen(
        &format!("password: '{password}'"),
        "passwordEnv: NODE_PW",
        1,
    );
    assert!(!config.contains(&password));
    std::fs::write(sc.path("config.yaml"), config).unwrap();
    let run = sc
        .command(&["--output", "json"])
        .env("NODE_PW", &password)
        .env("SECRET_PATH", SECRET_PATH)
        .run();
    run.status(0);
    let latest = sc.path("batch_runs/latest");
    let mut written = vec![
        ("stdout".to_string(), run.stdout.clone()),
        ("stderr".to_string(), run.stderr.clone()),
    ];
    let mut files = vec![
        sc.path("batch_process_log.txt"),
        latest.join("summary.json"),
        latest.join("journal.jsonl"),
    ];
    let transcripts: Vec<_> = std::fs::read_dir(latest.join("nodes"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    assert_eq!(transcripts.len(), 1, "{transcripts:?}");
    files.extend(transcripts);
    for file in files {
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        written.push((file.display().to_string(), text));
    }
    let transcript = &written.last().unwrap().1;
    assert!(
        transcript.contains("keadm got: join --edgenode-name=edge-00 --certpath=***"),
        "keadm's output is in the transcript, masked: {transcript}"
    );
    for (source, text) in &written {
        for secret in [password.as_str(), SECRET_PATH] {
            assert!(
                !text.contains(secret),
                "{secret:?} leaked into {source}: {text}"
            );
        }
    }
}

#[test]
fn completions_and_man_page_cover_every_flag() {
    let out = Test::new().args(&["completions", "bash"]).run();
    out.status(0);
    for flag in [
        "--retry-failed",
        "--max-fail",
        "--canary",
        "--wave",
        "--wave-pause",
        "--host-key-policy",
        "--dry-run",
    ] {
        assert!(out.stdout.contains(flag), "bash completion lacks {flag}");
    }
    let out = Test::new().args(&["man"]).run();
    out.status(0);
    assert!(out.stdout.contains(".TH keadm-batch 1"));
    assert_eq!(
        out.stdout.matches(".TH ").count(),
        1,
        "one complete page, not several pages glued together"
    );
    for flag in ["retry\\-failed", "\\-\\-force", "\\-\\-into"] {
        assert!(
            out.stdout.contains(flag),
            "the man page documents {flag} itself"
        );
    }
    assert!(
        !out.stdout.contains("keadm\\-batch\\-batch(1)") && !out.stdout.contains("(1)\n"),
        "the page refers to no other page: nobody generates them"
    );
    assert!(out.stdout.contains(".SH \"EXIT STATUS\""));
    for code in ["0", "1", "2", "3", "130"] {
        assert!(
            out.stdout.contains(&format!(".TP\n\\fB{code}\\fR\n")),
            "exit status {code}"
        );
    }
    Test::new().args(&["completions", "tcsh"]).run().status(2);
}

// Staging rules, checked through the binary for their exit codes. The one node listens
// nowhere (127.0.0.1:1): these runs end at staging or before, or fail the node at once.

const VERSION: &str = "v1.23.1";
const WRONG_DIGEST: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// A config staging keadm for amd64, with `keadm_extra` under `keadm:` from line 4 on.
fn staging_config(keadm_extra: &str) -> String {
    format!(
        "keadm:\n  keadmVersion: {VERSION}\n  archGroup: [amd64]\n{keadm_extra}retries: 0\nnodes:\n  - nodeName: edge-a\n    keadmCmd: reset edge\n    ssh: {{ip: 127.0.0.1, port: 1, username: root, auth: {{type: agent}}}}\n"
    )
}

/// `download:` with `url` and, when given, an amd64 pin on line 7, column 14.
fn download_yaml(url: &str, pin: Option<&str>) -> String {
    let mut yaml = format!("  download:\n    url: {url}\n");
    if let Some(pin) = pin {
        yaml.push_str(&format!("    sha512:\n      amd64: {pin}\n"));
    }
    yaml
}

/// Serves the amd64 release (without its checksum file) under `/kubeedge`.
fn publish(server: &HttpServer) -> Built {
    let release = FakeRelease::new(VERSION, "amd64");
    let built = release.build();
    server.route(
        &format!("/kubeedge/{}", release.file_name()),
        Route::ok(built.bytes.clone()),
    );
    built
}

fn staging_args() -> [&'static str; 5] {
    ["batch", "-c", "config.yaml", "--staging-dir", "staging"]
}

#[test]
fn a_plain_http_mirror_without_pins_is_refused_before_any_download() {
    let server = HttpServer::start();
    publish(&server);
    let url = server.url("/kubeedge");
    let config = staging_config(&download_yaml(&url, None));
    for extra in [&[][..], &["--dry-run"][..]] {
        let out = Test::new()
            .config(&config)
            .args(&staging_args())
            .args(extra)
            .run();
        out.status(2)
            .stderr_has(&format!("keadm.download.url {url} is plain HTTP"))
            .stderr_has("keadm.download.sha512 (for amd64)")
            .stderr_has("--insecure-http");
        assert!(!out.path("staging").exists(), "nothing staged");
        assert!(!out.path("batch_process_log.txt").exists());
    }
    assert_eq!(server.total_hits(), 0, "nothing was downloaded");
    // A pin is one way out.
    let built = FakeRelease::new(VERSION, "amd64").build();
    Test::new()
        .config(&staging_config(&download_yaml(&url, Some(&built.sha512))))
        .args(&staging_args())
        .args(&["--dry-run"])
        .run()
        .status(0)
        .stdout_has("  verify:      sha512 pinned for amd64 (keadm.download.sha512); other arches: the release's checksum file, required\n");
    // --insecure-http, for a trusted network, the other.
    Test::new()
        .config(&config)
        .args(&staging_args())
        .args(&["--dry-run", "--insecure-http"])
        .run()
        .status(0)
        .stdout_has("plain HTTP accepted (--insecure-http)");
}

#[test]
fn a_plain_http_mirror_with_a_wrong_pin_fails_staging_with_exit_3() {
    let server = HttpServer::start();
    let built = publish(&server);
    let url = server.url("/kubeedge");
    let out = Test::new()
        .config(&staging_config(&download_yaml(&url, Some(WRONG_DIGEST))))
        .args(&staging_args())
        .run();
    out.status(3)
        .stderr_has(&built.sha512)
        .stderr_has(WRONG_DIGEST)
        .stderr_has("keadm.download.sha512.amd64 (config.yaml:7:14)")
        .stderr_has(&format!("{url}/keadm-v1.23.1-linux-amd64.tar.gz"));
    assert!(
        !out.path("batch_process_log.txt").exists(),
        "no node was touched"
    );
}

#[test]
fn an_https_mirror_with_a_wrong_pin_fails_staging_with_exit_3() {
    let server = HttpServer::start_tls();
    let built = publish(&server);
    let url = server.url("/kubeedge");
    let cert = server.certificate().display().to_string();
    let out = Test::new()
        .config(&staging_config(&download_yaml(&url, Some(WRONG_DIGEST))))
        .env("SSL_CERT_FILE", &cert)
        .args(&staging_args())
        .run();
    out.status(3)
        .stderr_has(&built.sha512)
        .stderr_has(WRONG_DIGEST)
        .stderr_has("keadm.download.sha512.amd64 (config.yaml:7:14)");
    assert!(
        !out.path("batch_process_log.txt").exists(),
        "no node was touched"
    );
    assert_eq!(
        server.hits("/kubeedge/keadm-v1.23.1-linux-amd64.tar.gz"),
        1,
        "the download went through TLS"
    );
}

/// An https mirror that redirects to plain HTTP is refused before the redirect is
/// followed: the plain-HTTP server sees no request (what went out would have gone in
/// plain text), and the error names both URLs.
#[test]
fn an_https_mirror_that_redirects_to_plain_http_is_refused() {
    let plain = HttpServer::start();
    publish(&plain);
    let tarball = "/kubeedge/keadm-v1.23.1-linux-amd64.tar.gz";
    let checksum = "/kubeedge/checksum_keadm-v1.23.1-linux-amd64.tar.gz.txt";
    let built = FakeRelease::new(VERSION, "amd64").build();
    plain.route(checksum, Route::ok(format!("{}\n", built.sha512)));
    let tls = HttpServer::start_tls();
    tls.route(tarball, Route::redirect(&plain.url(tarball)));
    tls.route(checksum, Route::redirect(&plain.url(checksum)));
    let cert = tls.certificate().display().to_string();
    let config = staging_config(&download_yaml(&tls.url("/kubeedge"), None));

    let out = Test::new()
        .config(&config)
        .env("SSL_CERT_FILE", &cert)
        .args(&staging_args())
        .run();
    out.status(3)
        .stderr_has(&format!(
            "Downloading {} was redirected to {}, which is plain HTTP",
            tls.url(tarball),
            plain.url(tarball)
        ))
        .stderr_has("--insecure-http");
    assert!(
        !out.path("batch_process_log.txt").exists(),
        "no node was touched"
    );
    assert_eq!(
        plain.total_hits(),
        0,
        "the redirect to plain HTTP was followed:\n{}",
        out.stderr
    );
    // A pin vouches for the bytes whatever way they came.
    let pinned = staging_config(&download_yaml(&tls.url("/kubeedge"), Some(&built.sha512)));
    Test::new()
        .config(&pinned)
        .env("SSL_CERT_FILE", &cert)
        .args(&staging_args())
        .run()
        .status(1)
        .stderr_lacks("plain HTTP");
}

/// Writes the amd64 release into `packages/amd64/` of `test`, without a checksum file.
fn offline_package(test: Test) -> (Test, Built) {
    let (built, _) = FakeRelease::new(VERSION, "amd64")
        .write_offline(&test.path().join("packages"), ChecksumFile::Absent);
    (test, built)
}

const OFFLINE: &str = "  download:\n    enable: false\n    sha512:\n      amd64: PIN\n  offlinePackageDir: packages\n";

#[test]
fn an_offline_package_with_a_wrong_pin_fails_staging_with_exit_3() {
    let (test, built) = offline_package(Test::new());
    let out = test
        .config(&staging_config(&OFFLINE.replace("PIN", WRONG_DIGEST)))
        .args(&staging_args())
        .run();
    out.status(3)
        .stderr_has(&built.sha512)
        .stderr_has(WRONG_DIGEST)
        .stderr_has("keadm.download.sha512.amd64 (config.yaml:7:14)")
        .stderr_has("packages/amd64/keadm-v1.23.1-linux-amd64.tar.gz");
    assert!(
        !out.path("batch_process_log.txt").exists(),
        "no node was touched"
    );
}

#[test]
fn a_package_without_checksum_file_or_pin_needs_allow_unverified() {
    let offline = "  download:\n    enable: false\n  offlinePackageDir: packages\n";
    // Refused by default, and with the old --require-checksum, which is now the default.
    for extra in [&[][..], &["--require-checksum"][..]] {
        let (test, _) = offline_package(Test::new());
        test.config(&staging_config(offline))
            .args(&staging_args())
            .args(extra)
            .run()
            .status(3)
            .stderr_has("There is no checksum file at ")
            .stderr_has("checksum_keadm-v1.23.1-linux-amd64.tar.gz.txt")
            .stderr_has("--allow-unverified");
    }
    // Accepted with a warning, and marked unverified; the node then fails to connect.
    let (test, built) = offline_package(Test::new());
    let out = test
        .config(&staging_config(offline))
        .args(&staging_args())
        .args(&["--allow-unverified"])
        .run();
    out.status(1)
        .stderr_has("warning: there is no checksum file at ")
        .stderr_has("unverified (--allow-unverified)");
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.path("batch_runs/latest/summary.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(summary["packages"][0]["verified"], false, "{summary}");
    assert_eq!(
        summary["packages"][0]["tarball_sha512"],
        built.sha512.as_str()
    );
}

#[test]
fn require_checksum_is_kept_but_contradicts_allow_unverified() {
    Test::new()
        .config(TWO_NODES)
        .args(&[
            "batch",
            "-c",
            "config.yaml",
            "--dry-run",
            "--require-checksum",
        ])
        .run()
        .status(0);
    Test::new()
        .config(TWO_NODES)
        .args(&[
            "batch",
            "-c",
            "config.yaml",
            "--dry-run",
            "--require-checksum",
            "--allow-unverified",
        ])
        .run()
        .status(2)
        .stderr_has("cannot be used with");
}

#[test]
fn max_package_bytes_shows_in_the_plan() {
    Test::new()
        .config(TWO_NODES)
        .args(&["batch", "-c", "config.yaml", "--dry-run"])
        .run()
        .status(0)
        .stdout_has("  size limit:  512 MiB per download and per unpacked package\n");
    Test::new()
        .config(TWO_NODES)
        .args(&[
            "batch",
            "-c",
            "config.yaml",
            "--dry-run",
            "--max-package-bytes",
            "64MiB",
        ])
        .run()
        .status(0)
        .stdout_has("  size limit:  64 MiB per download and per unpacked package\n");
    Test::new()
        .config(TWO_NODES)
        .args(&[
            "batch",
            "-c",
            "config.yaml",
            "--dry-run",
            "--max-package-bytes",
            "12MB",
        ])
        .run()
        .status(2)
        .stderr_has("`MB` is not a size unit");
}

/// A dry run reads every local input staging will read (offline mode), and fails as the
/// run would, with exit 3, without a staging dir or any result file left behind.
#[test]
fn a_dry_run_checks_the_offline_packages_staging_will_read() {
    let offline = "  download:\n    enable: false\n  offlinePackageDir: packages\n";
    let dry = |test: Test, keadm: &str| {
        let out = test
            .config(&staging_config(keadm))
            .args(&staging_args())
            .arg("--dry-run")
            .run();
        assert!(!out.path("staging").exists(), "the dry run staged nothing");
        assert!(!out.path("batch_process_log.txt").exists());
        out
    };
    // No package at all.
    dry(Test::new(), offline)
        .status(3)
        .stderr_has("packages/amd64/keadm-v1.23.1-linux-amd64.tar.gz");
    // A checksum file that does not match the package.
    let test = Test::new();
    FakeRelease::new(VERSION, "amd64").write_offline(
        &test.path().join("packages"),
        ChecksumFile::Holding(WRONG_DIGEST),
    );
    let out = dry(test, offline);
    out.status(3).stderr_has(WRONG_DIGEST);
    assert_eq!(out.stdout, "", "no plan for a config whose staging fails");
    // A pin the package does not match.
    let (test, built) = offline_package(Test::new());
    dry(test, &OFFLINE.replace("PIN", WRONG_DIGEST))
        .status(3)
        .stderr_has(&built.sha512);
    // A good package passes, and the plan is printed.
    let test = Test::new();
    FakeRelease::new(VERSION, "amd64")
        .write_offline(&test.path().join("packages"), ChecksumFile::Matching);
    dry(test, offline)
        .status(0)
        .stdout_has("Plan for config.yaml");
}

/// `--image-repository` that makes no image reference keadm could ask for (a trailing
/// `/`): refused by the dry run, the run and `batch bundle` alike, with one message, before
/// anything is fetched or any node is touched.
#[test]
fn an_image_repository_keadm_cannot_use_is_refused_as_bundle_refuses_it() {
    let config = "keadm:\n  keadmVersion: v1.23.1\n  archGroup: [amd64]\nretries: 0\nnodes:\n  - nodeName: edge-a\n    keadmCmd: join --cloudcore-ipport=192.0.2.10:10000 --edgenode-name=edge-a --image-repository=harbor.example:8443/edge/\n    ssh: {ip: 127.0.0.1, port: 1, username: root, auth: {type: agent}}\n";
    let run = |args: &[&str]| Test::new().config(config).args(args).run();
    let bundle = run(&["batch", "bundle", "-c", "config.yaml", "-o", "kit"]);
    bundle
        .status(2)
        .stderr_has("\"harbor.example:8443/edge//installation-package:v1.23.1\"");
    let expected: Vec<&str> = bundle
        .stderr
        .lines()
        .filter(|l| l.starts_with("keadm-batch: error:"))
        .collect();
    assert_eq!(expected.len(), 1, "{}", bundle.stderr);
    for args in [
        &["batch", "-c", "config.yaml", "--dry-run"][..],
        &["batch", "-c", "config.yaml", "--staging-dir", "staging"][..],
    ] {
        let out = run(args);
        out.status(2);
        assert_eq!(out.stdout, "", "{args:?}: no plan");
        let errors: Vec<&str> = out
            .stderr
            .lines()
            .filter(|l| l.starts_with("keadm-batch: error:"))
            .collect();
        assert_eq!(errors, expected, "{args:?}");
        assert!(
            !out.path("staging").exists() && !out.path("batch_process_log.txt").exists(),
            "{args:?}: nothing was staged and no node was touched"
        );
    }
}

/// `keadm-batch ... | head` where head has quit: output ends quietly, with the command's
/// own exit status, no "Broken pipe" error and no panic.
#[test]
fn a_reader_that_quits_early_ends_the_output_quietly() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    for args in [
        &["man"][..],
        &["completions", "bash"],
        &["batch", "-c", "batch_config.example.yaml", "--dry-run"],
    ] {
        let out = Test::in_dir(repo).args(args).closed_stdout().run();
        assert_eq!(out.code(), 0, "{args:?}: {}", out.stderr);
        out.stderr_lacks("Broken pipe").stderr_lacks("panicked");
    }
}
