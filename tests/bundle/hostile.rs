//! `batch bundle` against a registry that is out to harm the machine that bundles
//! (tests/common/hostile_registry.rs): whatever it sends is bounded before it is buffered
//! (a manifest, an index or a token at a few MiB, a blob at the size its manifest gives,
//! an image at `--max-package-bytes`), refused with the image, the registry and the limit
//! named, and leaves no file in the kit. Credentials go nowhere the registry could not
//! send them itself, and never in plain text unless the operator accepted plain HTTP.

use std::path::Path;
use std::time::Duration;

use super::{INSTALLATION_PACKAGE, JOIN, offline_config, release_server, scratch};
use crate::common::hostile_registry::{Framing, HostileRegistry, Reply};
use crate::common::http_server::HttpServer;
use crate::common::image_archive::{Format, TestImage, sha256};
use crate::common::registry::files_under;
use crate::common::scenario::VERSION;
use crate::common::test::{Output, Test};

/// The sandbox image a join of keadm v1.23.1 needs, which these tests spoil.
const PAUSE: &str = "registry.k8s.io/pause:3.9";
const PAUSE_MANIFEST: &str = "/v2/pause/manifests/3.9";
/// What the bundle may take in memory at most, whatever a registry sends: the binary
/// itself and a few MiB of manifest.
const PEAK_RSS_KIB: u64 = 64 * 1024;

/// The images a join of keadm v1.23.1 needs, for amd64, as a registry serves them.
struct Images {
    pause: TestImage,
}

/// Serves the join's images from `registry` as a registry would, for a test to spoil
/// one answer of.
fn serve_images(registry: &HostileRegistry) -> Images {
    let package = TestImage::marked(INSTALLATION_PACKAGE, "amd64", Format::Oci);
    let pause = TestImage::marked("pause", "amd64", Format::Docker);
    serve_image(registry, INSTALLATION_PACKAGE, VERSION, &package);
    serve_image(registry, "pause", "3.9", &pause);
    Images { pause }
}

fn serve_image(registry: &HostileRegistry, repo: &str, tag: &str, image: &TestImage) {
    registry.reply(
        &format!("/v2/{repo}/manifests/{tag}"),
        Reply::ok(image.manifest.clone()),
    );
    for blob in [&image.config, &image.layer] {
        registry.reply(&blob_path(repo, blob), Reply::ok(blob.clone()));
    }
}

fn blob_path(repo: &str, bytes: &[u8]) -> String {
    format!("/v2/{repo}/blobs/{}", sha256(bytes))
}

/// A scratch directory with the one-node config for amd64.
fn site() -> tempfile::TempDir {
    let tmp = scratch();
    offline_config(tmp.path(), "[amd64]", JOIN);
    tmp
}

/// `batch bundle -o kit` in `dir`, both registries mapped to `registry`, releases from
/// `releases`.
fn bundle(dir: &Path, registry: &str, releases: &str) -> Test {
    Test::in_dir(dir)
        .env("HOME", dir)
        .args(["batch", "bundle", "-c", "config.yaml", "-o", "kit"])
        .args(["--download-url", releases])
        .args(["--registry-mirror", &format!("docker.io={registry}")])
        .args(["--registry-mirror", &format!("registry.k8s.io={registry}")])
        .arg("--staging-dir")
        .arg(dir.join("bundle-staging"))
}

/// [`bundle`] from a plain-HTTP `registry` and release server (`--insecure-http`).
fn plain_bundle(dir: &Path, registry: &HostileRegistry, releases: &HttpServer) -> Test {
    bundle(dir, &registry.base_url(), &releases.url("/releases")).arg("--insecure-http")
}

/// Runs `test`, which must end within a minute; returns its output and peak RSS in KiB.
fn measured(test: Test) -> (Output, u64) {
    test.spawn().wait_measured(Duration::from_secs(60))
}

/// The bundle failed with exit 3 within the memory bound, and left no file in the kit
/// directory: neither a kit file nor a temporary.
fn refused_leaving_nothing(dir: &Path, (out, peak_kib): &(Output, u64)) {
    out.status(3);
    let kit = dir.join("kit");
    let left = if kit.exists() {
        files_under(&kit)
    } else {
        Vec::new()
    };
    assert_eq!(left, Vec::<String>::new(), "{}", out.stderr);
    assert!(
        *peak_kib < PEAK_RSS_KIB,
        "the bundle took {peak_kib} KiB:\n{}",
        out.stderr
    );
}

/// How the client names a mirror in its messages.
fn mirror(registry: &HostileRegistry) -> String {
    format!("{} (the mirror for registry.k8s.io)", registry.base_url())
}

/// A manifest or index of gigabytes, with or without a length, in chunks or not, is cut
/// off at 4 MiB, whether it is the tag's or the one an index names for the arch; one
/// that announces more is refused before it is read.
#[test]
fn a_manifest_of_gigabytes_is_refused_at_4_mib() {
    let tmp = site();
    let registry = HostileRegistry::start("127.0.0.1");
    let images = serve_images(&registry);
    let releases = release_server("#!/bin/sh\n");
    let platform_manifest = format!("/v2/pause/manifests/{}", sha256(&images.pause.manifest));
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": Format::Oci.index(),
        "manifests": [{
            "mediaType": Format::Oci.manifest(),
            "digest": sha256(&images.pause.manifest),
            "size": images.pause.manifest.len(),
            "platform": {"architecture": "amd64", "os": "linux"},
        }],
    }))
    .unwrap();
    let cases = [
        (
            "8 GiB with its length",
            Reply::zeros(8 << 30, Framing::Length),
        ),
        ("endless, no length", Reply::endless(Framing::Close)),
        ("endless, chunked", Reply::endless(Framing::Chunked)),
    ];
    for (what, reply) in cases {
        registry.reply(PAUSE_MANIFEST, reply.clone());
        let run = measured(plain_bundle(tmp.path(), &registry, &releases));
        refused_leaving_nothing(tmp.path(), &run);
        run.0.stderr_has(&format!(
            "The registry {} sent a manifest for the image {PAUSE} that cannot be used: it is larger than 4 MiB (4194304 bytes), which no manifest or index is.",
            mirror(&registry)
        ));
        assert_eq!(registry.hits(PAUSE_MANIFEST), 1, "{what}: not retried");

        // The same as the manifest an index names for amd64.
        registry.reply(PAUSE_MANIFEST, Reply::ok(index.clone()));
        registry.reply(&platform_manifest, reply);
        let run = measured(plain_bundle(tmp.path(), &registry, &releases));
        refused_leaving_nothing(tmp.path(), &run);
        run.0
            .stderr_has("that cannot be used: it is larger than 4 MiB");
        serve_image(&registry, "pause", "3.9", &images.pause);
        registry.clear_requests();
    }
    assert_eq!(releases.total_hits(), 0, "manifests come first");
}

/// A layer whose registry sends more than the manifest's size for it, endlessly or with
/// a length that says so, is cut off at that size (announced: not read at all), and the
/// bundle removes what it wrote.
#[test]
fn a_layer_longer_than_its_manifest_says_is_cut_off_at_its_size() {
    let tmp = site();
    let registry = HostileRegistry::start("127.0.0.1");
    let images = serve_images(&registry);
    let releases = release_server("#!/bin/sh\n");
    let layer = blob_path("pause", &images.pause.layer);
    let size = images.pause.layer.len();
    for reply in [
        Reply::zeros(8 << 30, Framing::Length),
        Reply::endless(Framing::Close),
        Reply::endless(Framing::Chunked),
    ] {
        registry.reply(&layer, reply);
        let run = measured(plain_bundle(tmp.path(), &registry, &releases));
        refused_leaving_nothing(tmp.path(), &run);
        run.0.stderr_has(&format!(
            "The layer 1 for linux/amd64 of the image {PAUSE} from {} is longer than the {size} bytes its manifest gives: the registry sent more, so the download was cut off at that size, and nothing was written for this image.",
            mirror(&registry)
        ));
        assert_eq!(registry.hits(&layer), 1, "not retried");
        registry.clear_requests();
    }
}

/// An image config is read into memory, so it is held to the size of a manifest; and an
/// image whose config and layers together are more than `--max-package-bytes` is refused
/// as soon as its manifest is read: before any release or blob is downloaded.
#[test]
fn a_config_or_an_image_too_large_is_refused_before_anything_is_downloaded() {
    let tmp = site();
    let registry = HostileRegistry::start("127.0.0.1");
    let images = serve_images(&registry);
    let releases = release_server("#!/bin/sh\n");
    let config = blob_path("pause", &images.pause.config);
    let spoiled = |edit: &dyn Fn(&mut serde_json::Value)| {
        let mut manifest: serde_json::Value =
            serde_json::from_slice(&images.pause.manifest).unwrap();
        edit(&mut manifest);
        registry.reply(
            PAUSE_MANIFEST,
            Reply::ok(serde_json::to_vec(&manifest).unwrap()),
        );
    };
    spoiled(&|m| m["config"]["size"] = (64u64 << 20).into());
    let run = measured(plain_bundle(tmp.path(), &registry, &releases));
    refused_leaving_nothing(tmp.path(), &run);
    run.0.stderr_has(&format!(
        "The registry {} sent a manifest for the image {PAUSE} that cannot be used: its config is 67108864 bytes, more than the 4 MiB (4194304 bytes) an image config may be.",
        mirror(&registry)
    ));
    assert_eq!(registry.hits(&config), 0);

    // Three layers of 400 KiB each are within a limit of 1 MiB, but not together.
    spoiled(&|m| {
        let layer = m["layers"][0].clone();
        m["layers"] = (0..3u8)
            .map(|i| {
                let mut layer = layer.clone();
                layer["digest"] = sha256(&[i]).into();
                layer["size"] = (400u64 << 10).into();
                layer
            })
            .collect();
    });
    let limited =
        plain_bundle(tmp.path(), &registry, &releases).args(["--max-package-bytes", "1MiB"]);
    let run = measured(limited);
    refused_leaving_nothing(tmp.path(), &run);
    let total = 3 * (400 << 10) + images.pause.config.len();
    run.0.stderr_has(&format!(
        "The build for amd64 (its config and 3 layers together) of the image {PAUSE} at {} is {total} bytes, more than the limit of 1048576 bytes (--max-package-bytes).",
        mirror(&registry)
    ));
    assert_eq!(releases.total_hits(), 0, "refused before any release");
    assert_eq!(registry.hits(&config), 0, "refused before any blob");

    // The help says what the limit bounds: a whole image, not one of its layers.
    let help = Test::new().args(["batch", "bundle", "--help"]).run();
    help.status(0);
    let flat = help.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    let option = flat
        .split("--max-package-bytes <SIZE> ")
        .nth(1)
        .and_then(|rest| rest.split(" --").next())
        .unwrap_or_else(|| panic!("batch bundle --help lacks --max-package-bytes:\n{flat}"));
    assert!(
        option.contains("an image (its config and layers together)"),
        "batch bundle --help describes --max-package-bytes as: {option}"
    );
}

/// An https registry that redirects to plain HTTP, for a manifest or a blob, is refused
/// before the request goes out in plain text: the plain-HTTP server sees nothing.
#[test]
fn an_https_registry_that_redirects_to_plain_http_is_refused_before_the_request() {
    let tmp = site();
    let tls = HostileRegistry::start_tls("127.0.0.1");
    let images = serve_images(&tls);
    let plain = HostileRegistry::start("127.0.0.1");
    serve_images(&plain);
    let config = blob_path("pause", &images.pause.config);
    for path in [PAUSE_MANIFEST.to_string(), config.clone()] {
        serve_images(&tls);
        tls.reply(&path, Reply::redirect(&plain.url(&path)));
        // The releases are never reached: the manifests and configs come first.
        let run = measured(
            bundle(tmp.path(), &tls.base_url(), "https://127.0.0.1:1/releases")
                .env("SSL_CERT_FILE", tls.certificate()),
        );
        refused_leaving_nothing(tmp.path(), &run);
        run.0.stderr_has(&format!(
            "The registry {} redirected the request for the image {PAUSE} to the plain-HTTP address {}, so it was not sent: whoever is on the network path could read or swap what comes back.",
            mirror(&tls),
            plain.url(&path)
        ));
        assert_eq!(plain.requests().len(), 0, "{path} went out in plain text");
    }
    // With --insecure-http the operator accepts plain HTTP, redirects included.
    let releases = release_server("#!/bin/sh\n");
    bundle(tmp.path(), &tls.base_url(), &releases.url("/releases"))
        .arg("--insecure-http")
        .env("SSL_CERT_FILE", tls.certificate())
        .run()
        .status(0);
    assert_eq!(plain.hits(&config), 1, "the config came over plain HTTP");
}

/// The docker config's login for `host` (`user:password`), in `dir/docker`.
fn docker_login(dir: &Path, host: &str, login: &str) -> std::path::PathBuf {
    use base64::Engine;
    let docker = dir.join("docker");
    std::fs::create_dir_all(&docker).unwrap();
    let auth = base64::engine::general_purpose::STANDARD.encode(login);
    std::fs::write(
        docker.join("config.json"),
        format!(r#"{{"auths": {{"{host}": {{"auth": "{auth}"}}}}}}"#),
    )
    .unwrap();
    docker
}

fn basic(login: &str) -> String {
    use base64::Engine;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(login)
    )
}

/// A registry behind a login that redirects its blobs to another host (as registries do
/// to a CDN): the other host gets the requests, never the login.
#[test]
fn a_redirect_to_another_host_carries_no_credentials() {
    let tmp = site();
    let registry = HostileRegistry::start("127.0.0.1");
    let images = serve_images(&registry);
    let host = registry
        .base_url()
        .trim_start_matches("http://")
        .to_string();
    registry.require(&basic("puller:s3cret"), r#"Basic realm="hostile""#);
    let other = HostileRegistry::start("127.0.0.2");
    serve_images(&other);
    for blob in [&images.pause.config, &images.pause.layer] {
        let path = blob_path("pause", blob);
        registry.reply(&path, Reply::redirect(&other.url(&path)));
    }
    let releases = release_server("#!/bin/sh\n");
    let docker = docker_login(tmp.path(), &host, "puller:s3cret");
    let out = plain_bundle(tmp.path(), &registry, &releases)
        .env("DOCKER_CONFIG", &docker)
        .run();
    out.status(0);
    let logged_in = registry
        .requests()
        .iter()
        .filter(|r| r.header("authorization") == Some(basic("puller:s3cret").as_str()))
        .count();
    assert!(logged_in > 0, "the registry itself got the login");
    let elsewhere = other.requests();
    assert_eq!(elsewhere.len(), 2, "both blobs came from the other host");
    for request in elsewhere {
        assert_eq!(request.header("authorization"), None, "{request:?}");
    }
}

/// A token realm the registry names elsewhere gets the login only over https, as the
/// docker client sends it (Docker Hub's realm is auth.docker.io): a plain-HTTP realm on
/// another host gets an anonymous token request, whatever its URL holds.
#[test]
fn a_token_realm_on_another_host_gets_the_login_only_over_https() {
    let releases = release_server("#!/bin/sh\n");
    for tls in [false, true] {
        let tmp = site();
        let registry = HostileRegistry::start("127.0.0.1");
        serve_images(&registry);
        let host = registry
            .base_url()
            .trim_start_matches("http://")
            .to_string();
        let tokens = if tls {
            HostileRegistry::start_tls("127.0.0.2")
        } else {
            HostileRegistry::start("127.0.0.2")
        };
        tokens.reply("/token", Reply::ok(r#"{"token": "t0k3n"}"#));
        // The realm's URL names the registry's host, which must not count as the same host.
        registry.require(
            "Bearer t0k3n",
            &format!(
                r#"Bearer realm="{}?via=://{host}/",service="hostile""#,
                tokens.url("/token")
            ),
        );
        let docker = docker_login(tmp.path(), &host, "puller:s3cret");
        let mut test = plain_bundle(tmp.path(), &registry, &releases).env("DOCKER_CONFIG", &docker);
        if tls {
            test = test.env("SSL_CERT_FILE", tokens.certificate());
        }
        test.run().status(0);
        let asked = tokens.requests();
        assert!(!asked.is_empty());
        let expected = tls.then(|| basic("puller:s3cret"));
        for request in asked {
            assert_eq!(
                request.header("authorization"),
                expected.as_deref(),
                "tls {tls}: {request:?}"
            );
        }
    }
}

/// A token service that answers gigabytes is cut off at 1 MiB, and the message says so.
#[test]
fn a_token_answer_of_gigabytes_is_refused_at_1_mib() {
    let tmp = site();
    let registry = HostileRegistry::start("127.0.0.1");
    serve_images(&registry);
    let tokens = HostileRegistry::start("127.0.0.2");
    let realm = tokens.url("/token");
    registry.require("Bearer t0k3n", &format!(r#"Bearer realm="{realm}""#));
    let releases = release_server("#!/bin/sh\n");
    for reply in [
        Reply::zeros(8 << 30, Framing::Length),
        Reply::endless(Framing::Close),
        Reply::endless(Framing::Chunked),
    ] {
        tokens.reply("/token", reply);
        let run = measured(plain_bundle(tmp.path(), &registry, &releases));
        refused_leaving_nothing(tmp.path(), &run);
        run.0.stderr_has(&format!(
            "Could not get a pull token for the image docker.io/{INSTALLATION_PACKAGE}:{VERSION} from {realm}: its answer is larger than 1 MiB (1048576 bytes), which no token is."
        ));
    }
}

/// A manifest or a blob whose bytes are not those of its digest is refused, and nothing
/// is written for the image.
#[test]
fn a_manifest_or_blob_that_does_not_match_its_digest_is_refused() {
    let tmp = site();
    let registry = HostileRegistry::start("127.0.0.1");
    let images = serve_images(&registry);
    let releases = release_server("#!/bin/sh\n");
    let other = TestImage::marked("other", "amd64", Format::Docker);

    // The tag's manifest, with the registry's own Docker-Content-Digest.
    let announced = sha256(&other.manifest);
    registry.reply(
        PAUSE_MANIFEST,
        Reply::ok(images.pause.manifest.clone()).header("Docker-Content-Digest", &announced),
    );
    let run = measured(plain_bundle(tmp.path(), &registry, &releases));
    refused_leaving_nothing(tmp.path(), &run);
    run.0.stderr_has(&format!(
        "The manifest of the image {PAUSE} from {} has the digest {}, but {announced} was expected.",
        mirror(&registry),
        sha256(&images.pause.manifest)
    ));

    // The manifest an index names by digest.
    let digest = sha256(&images.pause.manifest);
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": Format::Docker.index(),
        "manifests": [{
            "mediaType": Format::Docker.manifest(),
            "digest": digest,
            "size": images.pause.manifest.len(),
            "platform": {"architecture": "amd64", "os": "linux"},
        }],
    }))
    .unwrap();
    registry.reply(PAUSE_MANIFEST, Reply::ok(index));
    registry.reply(
        &format!("/v2/pause/manifests/{digest}"),
        Reply::ok(other.manifest.clone()),
    );
    let run = measured(plain_bundle(tmp.path(), &registry, &releases));
    refused_leaving_nothing(tmp.path(), &run);
    run.0.stderr_has(&format!(
        "The manifest of the image {PAUSE} from {} has the digest {announced}, but {digest} was expected.",
        mirror(&registry)
    ));

    // A layer of the right size with other bytes.
    serve_image(&registry, "pause", "3.9", &images.pause);
    let layer = blob_path("pause", &images.pause.layer);
    let mut forged = images.pause.layer.clone();
    let last = forged.len() - 1;
    forged[last] ^= 1;
    registry.reply(&layer, Reply::ok(forged.clone()));
    let run = measured(plain_bundle(tmp.path(), &registry, &releases));
    refused_leaving_nothing(tmp.path(), &run);
    run.0.stderr_has(&format!(
        "The layer 1 for linux/amd64 of the image {PAUSE} from {} has the digest {}, but {} was expected.",
        mirror(&registry),
        sha256(&forged),
        sha256(&images.pause.layer)
    ));
}

/// Headers that never end are cut off by the HTTP client at its buffer's size, and
/// refused for good: another attempt would get the same.
#[test]
fn endless_headers_are_refused() {
    let tmp = site();
    let registry = HostileRegistry::start("127.0.0.1");
    serve_images(&registry);
    let releases = release_server("#!/bin/sh\n");
    registry.reply(PAUSE_MANIFEST, Reply::EndlessHeader);
    let run = measured(plain_bundle(tmp.path(), &registry, &releases));
    refused_leaving_nothing(tmp.path(), &run);
    run.0.stderr_has(&format!(
        "The registry {} sent headers for the image {PAUSE} that are larger than the HTTP client takes (408 KiB, 100 headers), which no registry sends, so the answer was refused.",
        mirror(&registry)
    ));
    assert_eq!(registry.hits(PAUSE_MANIFEST), 1, "not retried");
}

/// What a registry says is its own text: an error code, a platform's name, a media type
/// full of terminal escapes and line breaks reaches the console escaped, on the line it
/// belongs to.
#[test]
fn a_registry_s_words_reach_the_console_escaped() {
    const FORGED: &str = "\u{1b}]0;owned\u{7}\u{1b}[2K\rFORGED: every image is fine\n";
    let tmp = site();
    let registry = HostileRegistry::start("127.0.0.1");
    serve_images(&registry);
    let releases = release_server("#!/bin/sh\n");
    let no_escape = |out: &Output| {
        assert!(!out.stderr.contains('\u{1b}'), "{:?}", out.stderr);
        assert!(!out.stderr.contains('\u{7}'), "{:?}", out.stderr);
        assert!(
            !out.stderr.lines().any(|l| l.starts_with("FORGED")),
            "{}",
            out.stderr
        );
    };

    // An error code in a 404's body.
    let body = serde_json::json!({"errors": [{"code": FORGED, "message": "no"}]});
    registry.reply(
        PAUSE_MANIFEST,
        Reply::status(404, serde_json::to_vec(&body).unwrap()),
    );
    let out = plain_bundle(tmp.path(), &registry, &releases).run();
    out.status(3).stderr_has("\\x1b]0;owned\\x07");
    no_escape(&out);

    // The platforms of an index that has none for the arch.
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": Format::Docker.index(),
        "manifests": [{
            "mediaType": Format::Docker.manifest(),
            "digest": format!("sha256:{}", "0".repeat(64)),
            "size": 10,
            "platform": {"architecture": "riscv64", "os": FORGED},
        }],
    }))
    .unwrap();
    registry.reply(PAUSE_MANIFEST, Reply::ok(index));
    let out = plain_bundle(tmp.path(), &registry, &releases).run();
    out.status(3).stderr_has("\\x1b]0;owned\\x07");
    no_escape(&out);

    // A manifest of schema 1 whose media type is the forgery.
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 1,
        "mediaType": FORGED,
    }))
    .unwrap();
    registry.reply(PAUSE_MANIFEST, Reply::ok(manifest));
    let out = plain_bundle(tmp.path(), &registry, &releases).run();
    out.status(3).stderr_has("\\x1b]0;owned\\x07");
    no_escape(&out);
}
