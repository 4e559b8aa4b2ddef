//! `keadm-batch batch bundle`'s arguments, and their conversion into [`BundleOptions`], or
//! at the site into [`VerifyOptions`] (`--verify`) or [`ExtractOptions`] (`--extract`).

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::command;
use super::values::{OutputArg, output_format, parse_mirror, parse_sha512, parse_size};
use crate::options::{
    BundleOptions, Command, ExtractOptions, RegistryMirror, Verbosity, VerifyOptions,
};

#[derive(Args, Debug)]
#[command(group(
    clap::ArgGroup::new("fetching")
        .multiple(true)
        .args([
            "config",
            "archive",
            "download_url",
            "registry_mirror",
            "sandbox_image",
            "image",
            "insecure_http",
            "max_package_bytes",
            "staging_dir",
        ])
))]
#[command(group(clap::ArgGroup::new("site").args(["verify", "extract"])))]
pub(super) struct BundleArgs {
    /// Path to the config file (keadm's format) of the air-gapped run.
    #[arg(
        short = 'c',
        long = "config",
        value_name = "FILE",
        required_unless_present_any = ["verify", "extract"]
    )]
    config: Option<PathBuf>,

    /// The kit directory: new, empty, or a kit an earlier bundle wrote (with --extract: the
    /// directory the archive is unpacked into, new or empty).
    #[arg(short = 'o', long = "into", value_name = "DIR")]
    into: Option<PathBuf>,

    /// `json` also prints what was written (each file with its sha256, kit.json's, the
    /// archive's) as one JSON document on stdout; `text`, the default, reports on stderr
    /// only. Any other value is the kit directory, the old spelling of --into, with a
    /// warning.
    #[arg(long, value_name = "FORMAT")]
    output: Option<PathBuf>,

    /// Also write the kit as one uncompressed tar, FILE, with its sha512 in FILE.sha512
    /// (without --into, only these two).
    #[arg(long, value_name = "FILE")]
    archive: Option<PathBuf>,

    /// At the site, with no config: check a copied kit, its directory or its archive (with
    /// the archive's .sha512 file), against its kit.json, and print kit.json's sha256.
    #[arg(
        long,
        value_name = "PATH",
        conflicts_with_all = ["fetching", "into", "output", "extract"]
    )]
    verify: Option<PathBuf>,

    /// At the site, with no config: verify the kit archive FILE, unpack it into the new or
    /// empty directory --into DIR (or -o DIR), and check it there.
    #[arg(long, value_name = "FILE", conflicts_with = "fetching")]
    extract: Option<PathBuf>,

    /// With --verify or --extract of a kit archive: the sha512 (128 hex characters) it must
    /// have, as given to you by whoever wrote it, by another way than the archive came. Its
    /// FILE.tar.sha512, which anyone who can replace the archive can replace too, is then
    /// not read.
    #[arg(long, value_name = "HEX", value_parser = parse_sha512, requires = "site")]
    expect_sha512: Option<String>,

    /// Download keadm releases from this directory URL instead of keadm.download.url
    /// (default: the config's download.url when downloads are enabled, else GitHub releases).
    #[arg(long, value_name = "URL")]
    download_url: Option<String>,

    /// Pull the images of registry HOST (as image names spell it: docker.io,
    /// registry.k8s.io, host:port) from the registry at URL instead; repeatable.
    #[arg(long, value_name = "HOST=URL", value_parser = parse_mirror)]
    registry_mirror: Vec<RegistryMirror>,

    /// The runtime's sandbox ("pause") image to bundle, replacing the default
    /// registry.k8s.io/pause:3.9; repeatable. keadm sets none: it is the runtime's own
    /// setting (containerd's sandbox_image; see `crictl info`).
    #[arg(long, value_name = "IMAGE")]
    sandbox_image: Vec<String>,

    /// An image of the site's own (CNI, edgemesh, a workload) to bundle for every arch
    /// besides those keadm.extraImages lists; repeatable. It is for this bundle only: list
    /// the images the site always needs in keadm.extraImages.
    #[arg(long, value_name = "IMAGE")]
    image: Vec<String>,

    /// Accept a plain http:// download URL for arches without a keadm.download.sha512 pin,
    /// and plain http:// registry mirrors.
    #[arg(long)]
    insecure_http: bool,

    /// The largest keadm package to download, the most its unpacked files may hold, and
    /// the most an image (its config and layers together) may hold: bytes, or a number
    /// with KiB, MiB or GiB (default 512MiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    max_package_bytes: Option<u64>,

    /// Where keadm packages are staged on this machine (default: keadm's /tmp/kubeedge/keadm).
    #[arg(long, value_name = "DIR")]
    staging_dir: Option<PathBuf>,

    /// Print only errors and the final result.
    #[arg(short, long)]
    quiet: bool,
}

/// `batch bundle`'s kit directory (the one `--extract` unpacks into, too) and output
/// format from `--into`/`-o` and `--output`; no directory when neither names one.
/// `--output` was the kit directory before it became the format, as it is for a run; the
/// rule that keeps both working: its value is the format when it is one of the format
/// words (`text`, `json`), and otherwise the kit directory, with a deprecation note (a
/// directory named like a format word is written `--into json` or `--output ./json`).
fn bundle_places(into: Option<PathBuf>, output: Option<PathBuf>) -> Result<Places, clap::Error> {
    let format = output
        .as_deref()
        .and_then(|value| value.to_str())
        .and_then(|value| OutputArg::from_str(value, false).ok());
    let (into, deprecations) = match (into, format, output) {
        (into, Some(_), _) | (into, None, None) => (into, Vec::new()),
        (Some(into), None, Some(old)) => {
            return Err(command().error(
                clap::error::ErrorKind::ArgumentConflict,
                format!(
                    "--into {} and --output {} both name the kit directory. Give it once, with --into (--output takes the format, text or json).",
                    into.display(),
                    old.display()
                ),
            ));
        }
        (None, None, Some(old)) => {
            let note = format!(
                "--output {dir} names the kit directory, an old spelling that still works: write --into {dir} (or -o {dir}). --output now takes the format, text or json, as it does for a run.",
                dir = old.display()
            );
            (Some(old), vec![note])
        }
    };
    Ok(Places {
        into,
        format,
        deprecations,
    })
}

/// What [`bundle_places`] read from the command line.
struct Places {
    /// The kit directory, when one was named.
    into: Option<PathBuf>,
    /// The format, when `--output` named one.
    format: Option<OutputArg>,
    /// A sentence for each old spelling used.
    deprecations: Vec<String>,
}

/// What `batch bundle` does: write a kit, verify one or extract one.
pub(super) fn command_of(bundle: Box<BundleArgs>) -> Result<Command, clap::Error> {
    if let Some(path) = bundle.verify {
        return Ok(Command::VerifyKit(VerifyOptions {
            path,
            expect_sha512: bundle.expect_sha512,
        }));
    }
    let Places {
        into,
        format,
        deprecations,
    } = bundle_places(bundle.into, bundle.output)?;
    let missing =
        |what: &str| command().error(clap::error::ErrorKind::MissingRequiredArgument, what);
    if let Some(archive) = bundle.extract {
        if format == Some(OutputArg::Json) {
            return Err(command().error(
                clap::error::ErrorKind::ArgumentConflict,
                "--output json is for writing a kit: --extract reports what it checked as text on stderr. Name the directory to unpack into with --into DIR (or -o DIR).",
            ));
        }
        let into = into.ok_or_else(|| {
            missing(
                "the directory to unpack into is required: `keadm-batch batch bundle --extract FILE.tar --into DIR` (or -o DIR)",
            )
        })?;
        return Ok(Command::ExtractKit(ExtractOptions {
            archive,
            into,
            expect_sha512: bundle.expect_sha512,
            deprecations,
        }));
    }
    if into.is_none() && bundle.archive.is_none() {
        return Err(missing(
            "the kit directory is required: `keadm-batch batch bundle -c config.yaml --into DIR` (or -o DIR), or --archive FILE.tar for the kit as one file",
        ));
    }
    // clap has required it without --verify or --extract.
    let config = bundle
        .config
        .ok_or_else(|| missing("batch bundle needs -c FILE"))?;
    Ok(Command::Bundle(Box::new(BundleOptions {
        config,
        into,
        archive: bundle.archive,
        output: output_format(format),
        deprecations,
        staging_dir: bundle.staging_dir,
        download_url: bundle.download_url,
        insecure_http: bundle.insecure_http,
        max_package_bytes: bundle.max_package_bytes,
        registry_mirrors: bundle.registry_mirror,
        sandbox_images: bundle.sandbox_image,
        extra_images: bundle.image,
        verbosity: if bundle.quiet {
            Verbosity::Quiet
        } else {
            Verbosity::Normal
        },
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::tests::run;
    use crate::options::OutputFormat;

    #[test]
    fn bundle_takes_extra_images_which_verify_has_no_use_for() {
        let bundle = |extra: &[&str]| {
            let mut args = vec!["k", "batch", "bundle"];
            args.extend(extra);
            run(&args)
        };
        let Command::Bundle(opts) = bundle(&[
            "-c",
            "c.yaml",
            "-o",
            "kit",
            "--image",
            "docker.io/kubeedge/edgemesh-agent:v1.15.0",
            "--image",
            "registry.example:5000/site/app:1.2",
        ])
        .unwrap() else {
            panic!()
        };
        assert_eq!(
            opts.extra_images,
            [
                "docker.io/kubeedge/edgemesh-agent:v1.15.0",
                "registry.example:5000/site/app:1.2"
            ]
        );
        assert!(bundle(&["--verify", "kit", "--image", "a:1"]).is_err());
    }

    #[test]
    fn bundle_takes_config_output_mirrors_and_sandbox_images() {
        let Command::Bundle(opts) = run(&[
            "k",
            "batch",
            "bundle",
            "-c",
            "c.yaml",
            "-o",
            "kit",
            "--registry-mirror",
            "docker.io=http://127.0.0.1:5000",
            "--registry-mirror",
            "registry.k8s.io=https://mirror.example/",
            "--sandbox-image",
            "registry.k8s.io/pause:3.6",
        ])
        .unwrap() else {
            panic!()
        };
        assert_eq!(opts.config, PathBuf::from("c.yaml"));
        assert_eq!(opts.into, Some(PathBuf::from("kit")));
        assert_eq!(opts.registry_mirrors[0].registry, "docker.io");
        assert_eq!(opts.registry_mirrors[1].url, "https://mirror.example/");
        assert_eq!(opts.sandbox_images, ["registry.k8s.io/pause:3.6"]);
        for bad in ["docker.io", "docker.io=mirror", "=http://x", "a/b=http://x"] {
            let err = run(&[
                "k",
                "batch",
                "bundle",
                "-c",
                "c",
                "-o",
                "d",
                "--registry-mirror",
                bad,
            ]);
            assert!(err.is_err(), "{bad}");
        }
        assert!(
            run(&["k", "batch", "bundle", "-c", "c"]).is_err(),
            "-o is required"
        );
    }

    #[test]
    fn bundle_verifies_and_extracts_without_a_config_and_archives_with_or_without_a_directory() {
        assert_eq!(
            run(&["k", "batch", "bundle", "--verify", "kit.tar"]).unwrap(),
            Command::VerifyKit(VerifyOptions {
                path: "kit.tar".into(),
                expect_sha512: None,
            })
        );
        assert_eq!(
            run(&["k", "batch", "bundle", "--extract", "kit.tar", "-o", "kit"]).unwrap(),
            Command::ExtractKit(ExtractOptions {
                archive: "kit.tar".into(),
                into: "kit".into(),
                expect_sha512: None,
                deprecations: Vec::new(),
            })
        );
        let Command::Bundle(opts) = run(&[
            "k",
            "batch",
            "bundle",
            "-c",
            "c.yaml",
            "--archive",
            "kit.tar",
        ])
        .unwrap() else {
            panic!()
        };
        assert_eq!((opts.into, opts.archive), (None, Some("kit.tar".into())));
        for refused in [
            &["k", "batch", "bundle", "--extract", "kit.tar"][..],
            &["k", "batch", "bundle", "--verify", "kit", "-c", "c.yaml"],
            &["k", "batch", "bundle", "--verify", "kit", "-o", "d"],
            &[
                "k",
                "batch",
                "bundle",
                "--extract",
                "kit.tar",
                "-o",
                "d",
                "--archive",
                "x.tar",
            ],
            &[
                "k",
                "batch",
                "bundle",
                "--extract",
                "kit.tar",
                "-o",
                "d",
                "-c",
                "c.yaml",
            ],
        ] {
            let err = run(refused).unwrap_err();
            assert!(err.use_stderr(), "{refused:?} is a usage error");
        }
    }

    /// `--expect-sha512 HEX` goes with --verify and --extract only, and takes a sha512 in
    /// hex in any case, lowercased.
    #[test]
    fn expect_sha512_takes_a_sha512_for_verify_and_extract_only() {
        let digest = "Ab".repeat(64);
        let pinned = Some("ab".repeat(64));
        assert_eq!(
            run(&[
                "k",
                "batch",
                "bundle",
                "--verify",
                "k.tar",
                "--expect-sha512",
                &digest
            ])
            .unwrap(),
            Command::VerifyKit(VerifyOptions {
                path: "k.tar".into(),
                expect_sha512: pinned.clone(),
            })
        );
        let args = [
            "--extract",
            "k.tar",
            "-o",
            "kit",
            "--expect-sha512",
            &digest,
        ];
        let Command::ExtractKit(options) =
            run(&[&["k", "batch", "bundle"][..], &args].concat()).unwrap()
        else {
            panic!()
        };
        assert_eq!(options.expect_sha512, pinned);
        let err = run(&[
            "k",
            "batch",
            "bundle",
            "--verify",
            "k.tar",
            "--expect-sha512",
            "a1",
        ])
        .unwrap_err()
        .to_string();
        assert!(
            err.contains(
                "\"a1\" is not a sha512 digest (128 hex characters): it is 2 hex characters long"
            ),
            "{err}"
        );
        let without_site = run(&[
            "k",
            "batch",
            "bundle",
            "-c",
            "c.yaml",
            "-o",
            "kit",
            "--expect-sha512",
            &digest,
        ]);
        assert!(without_site.unwrap_err().use_stderr());
    }

    #[test]
    fn extract_s_directory_is_into_or_o_as_the_kit_directory_is() {
        let extract = |extra: &[&str]| {
            let mut args = vec!["k", "batch", "bundle", "--extract", "kit.tar"];
            args.extend_from_slice(extra);
            run(&args)
        };
        let into = |into: &str, deprecations: &[&str]| {
            Command::ExtractKit(ExtractOptions {
                archive: "kit.tar".into(),
                into: into.into(),
                expect_sha512: None,
                deprecations: deprecations.iter().map(ToString::to_string).collect(),
            })
        };
        assert_eq!(extract(&["--into", "kit"]).unwrap(), into("kit", &[]));
        assert_eq!(
            extract(&["-o", "kit", "--output", "text"]).unwrap(),
            into("kit", &[])
        );
        // --output DIR, the old long spelling of -o, still names it, with the warning.
        assert_eq!(
            extract(&["--output", "old-kit"]).unwrap(),
            into(
                "old-kit",
                &[
                    "--output old-kit names the kit directory, an old spelling that still works: write --into old-kit (or -o old-kit). --output now takes the format, text or json, as it does for a run."
                ]
            )
        );
        let err = extract(&[]).unwrap_err();
        assert!(
            err.to_string().contains(
                "the directory to unpack into is required: `keadm-batch batch bundle --extract FILE.tar --into DIR`"
            ),
            "{err}"
        );
        let err = extract(&["--into", "kit", "--output", "json"]).unwrap_err();
        assert!(
            err.to_string()
                .contains("--output json is for writing a kit: --extract reports"),
            "{err}"
        );
        let err = extract(&["--into", "a", "--output", "b"]).unwrap_err();
        assert!(
            err.to_string().contains("both name the kit directory"),
            "{err}"
        );
        for refused in [
            &["--verify", "kit", "--into", "d"][..],
            &["--verify", "kit", "--output", "json"],
        ] {
            let mut args = vec!["k", "batch", "bundle"];
            args.extend_from_slice(refused);
            assert!(run(&args).unwrap_err().use_stderr(), "{refused:?}");
        }
    }

    #[test]
    fn bundle_s_kit_directory_is_into_or_o_and_output_is_its_format() {
        let bundle = |extra: &[&str]| {
            let mut args = vec!["k", "batch", "bundle", "-c", "c.yaml"];
            args.extend_from_slice(extra);
            run(&args)
        };
        for spelling in [&["--into", "kit"][..], &["-o", "kit"]] {
            let Command::Bundle(opts) = bundle(spelling).unwrap() else {
                panic!()
            };
            assert_eq!(opts.into, Some(PathBuf::from("kit")), "{spelling:?}");
            assert_eq!(opts.output, OutputFormat::Text);
            assert!(opts.deprecations.is_empty());
        }
        let Command::Bundle(opts) = bundle(&["-o", "kit", "--output", "json"]).unwrap() else {
            panic!()
        };
        assert_eq!(
            (opts.into, opts.output),
            (Some(PathBuf::from("kit")), OutputFormat::Json)
        );
        // The old spelling: any other value of --output is the kit directory, with a
        // warning that names the new one.
        let Command::Bundle(opts) = bundle(&["--output", "old-kit"]).unwrap() else {
            panic!()
        };
        assert_eq!(opts.into, Some(PathBuf::from("old-kit")));
        assert_eq!(opts.output, OutputFormat::Text);
        assert_eq!(
            opts.deprecations,
            [
                "--output old-kit names the kit directory, an old spelling that still works: write --into old-kit (or -o old-kit). --output now takes the format, text or json, as it does for a run."
            ]
        );
        let err = bundle(&["--into", "a", "--output", "b"]).unwrap_err();
        assert!(err.use_stderr());
        assert!(
            err.to_string().contains(
                "--into a and --output b both name the kit directory. Give it once, with --into"
            ),
            "{err}"
        );
        for missing in [&[][..], &["--output", "json"]] {
            let err = bundle(missing).unwrap_err();
            assert!(
                err.to_string().contains(
                    "the kit directory is required: `keadm-batch batch bundle -c config.yaml --into DIR`"
                ),
                "{missing:?}: {err}"
            );
        }
    }
}
