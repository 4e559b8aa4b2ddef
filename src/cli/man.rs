//! `keadm-batch man`: the manual page, made from the clap command, with the exit codes.

use super::command;

/// The exit codes, for the manual page (README.md, "Exit codes", says the same at length).
pub const EXIT_STATUS: [(i32, &str); 5] = [
    (
        0,
        "Every selected node succeeded, or --retry-failed found nothing to retry.",
    ),
    (
        1,
        "At least one selected node did not succeed (failed, timed out or skipped); --preflight-only found something on some node; batch merge combined a node that did not succeed; batch status could not reach some node (or it did not answer); or keadm-batch could not write its own files (the run directory, the log, standard output, the kit of batch bundle).",
    ),
    (
        2,
        "The config or the command line is invalid (for batch merge also: a shard's file it refuses), or the join batch as a whole would fail (an expired token, another cluster's CA, names taken), or a keadm download would be plain HTTP without pins or --insecure-http, or a keadmCmd's --image-repository makes no valid image reference; batch bundle also refuses an invalid image name, a plain-HTTP registry mirror, a kit directory (--into) that is not a kit, an --archive path that is a directory or inside the kit directory, and a docker config.json it cannot read; batch bundle --verify a path that is neither a directory nor a file, and --extract into a directory that is not empty; an --expect-sha512 that is no sha512, or given for a directory; an image archive that keadm.offlineImages names whose file name is outside the accepted names. No node was touched.",
    ),
    (
        3,
        "The keadm packages or the offline images could not be staged (download, checksum or pin mismatch, offline package, a kit file that does not match its kit.json, an image archive that cannot be read or names no image or has a file name outside the accepted names, unpacking, a package over --max-package-bytes); no node was touched. batch bundle: a release or an image could not be fetched or verified. batch bundle --verify or --extract: a kit file that does not match its kit.json or has a name outside the accepted ones, or a kit archive that does not match its .sha512 file (or --expect-sha512) or cannot be read (each named).",
    ),
    (
        130,
        "Interrupted by Ctrl-C or SIGTERM; the results so far are written.",
    ),
];

/// Text for roff: backslashes and hyphens escaped, no line starting with a control dot.
fn roff_text(text: &str) -> String {
    let text = text.replace('\\', "\\e").replace('-', "\\-");
    match text.strip_prefix('.') {
        Some(rest) => format!("\\&.{rest}"),
        None => text,
    }
}

/// Writes the manual page: one complete page, keadm-batch(1), that describes every
/// command and option itself (clap_mangen's own page would refer to a page per
/// subcommand, which nobody generates) and has an EXIT STATUS section.
pub fn write_man_page(out: &mut dyn std::io::Write) -> std::io::Result<()> {
    let mut cmd = command();
    cmd.build();
    let top = clap_mangen::Man::new(cmd.clone());
    top.render_title(out)?;
    top.render_name_section(out)?;
    top.render_synopsis_section(out)?;
    top.render_description_section(out)?;
    top.render_options_section(out)?;
    // Every command, with the path that reaches it, then each one's options.
    let mut commands: Vec<(String, clap::Command)> = Vec::new();
    for sub in cmd.get_subcommands().filter(|c| c.get_name() != "help") {
        commands.push((sub.get_name().to_string(), sub.clone()));
        for inner in sub.get_subcommands().filter(|c| c.get_name() != "help") {
            commands.push((
                format!("{} {}", sub.get_name(), inner.get_name()),
                inner.clone(),
            ));
        }
    }
    writeln!(out, ".SH COMMANDS")?;
    for (path, sub) in &commands {
        writeln!(
            out,
            ".TP\n\\fBkeadm\\-batch {}\\fR\n{}",
            roff_text(path),
            roff_text(&sub.get_about().map(ToString::to_string).unwrap_or_default())
        )?;
    }
    for (path, sub) in &commands {
        if sub
            .get_arguments()
            .all(|a| matches!(a.get_id().as_str(), "help" | "version"))
        {
            continue;
        }
        let mut section = Vec::new();
        clap_mangen::Man::new(sub.clone()).render_options_section(&mut section)?;
        let heading = format!(".SH \"{} OPTIONS\"", path.to_uppercase());
        let section = String::from_utf8_lossy(&section).replace(".SH OPTIONS", &heading);
        out.write_all(section.as_bytes())?;
    }
    writeln!(out, ".SH \"EXIT STATUS\"")?;
    for (code, meaning) in EXIT_STATUS {
        writeln!(out, ".TP\n\\fB{code}\\fR\n{}", roff_text(meaning))?;
    }
    top.render_version_section(out)
}
