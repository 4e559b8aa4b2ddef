//! The values options take: the value enums several subcommands share and their
//! conversion into the typed options, and the parsers that check a value as clap reads it
//! (a usage error, exit 2, names what the option takes).

use clap::ValueEnum;

use crate::config::HostKeyPolicy;
use crate::diagnosis::FailureClass;
use crate::options::{Amount, OutputFormat, RegistryMirror, Shard};

#[derive(ValueEnum, Clone, Copy, Debug)]
pub(super) enum PolicyArg {
    AcceptNew,
    Strict,
    Off,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OutputArg {
    Text,
    Json,
}

/// A run's and `batch merge`'s `--output`: their results also as JUnit XML.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RunOutputArg {
    Text,
    Json,
    Junit,
}

/// The policy `--host-key-policy` names.
pub(super) fn host_key_policy_of(arg: PolicyArg) -> HostKeyPolicy {
    match arg {
        PolicyArg::AcceptNew => HostKeyPolicy::AcceptNew,
        PolicyArg::Strict => HostKeyPolicy::Strict,
        PolicyArg::Off => HostKeyPolicy::Off,
    }
}

/// The format `--output` names; text when it names none.
pub(super) fn output_format(arg: Option<OutputArg>) -> OutputFormat {
    match arg {
        Some(OutputArg::Json) => OutputFormat::Json,
        Some(OutputArg::Text) | None => OutputFormat::Text,
    }
}

/// The format a run's (or `batch merge`'s) `--output` names; text when it names none.
pub(super) fn run_output_format(arg: Option<RunOutputArg>) -> OutputFormat {
    match arg {
        Some(RunOutputArg::Json) => OutputFormat::Json,
        Some(RunOutputArg::Junit) => OutputFormat::Junit,
        Some(RunOutputArg::Text) | None => OutputFormat::Text,
    }
}

/// `--class`: a failure class id, with `-` accepted for `_`.
pub(super) fn parse_class(text: &str) -> Result<FailureClass, crate::diagnosis::UnknownClass> {
    text.parse()
}

pub(super) fn parse_shard(text: &str) -> Result<Shard, String> {
    let (i, n) = text
        .split_once('/')
        .ok_or_else(|| format!("`{text}` is not of the form I/N, such as 2/4"))?;
    let index: u64 = i
        .trim()
        .parse()
        .map_err(|_| format!("`{i}` is not a shard number"))?;
    let count: u64 = n
        .trim()
        .parse()
        .map_err(|_| format!("`{n}` is not a shard count"))?;
    if count == 0 || index == 0 || index > count {
        return Err(format!(
            "shard {index}/{count} does not exist: I must be between 1 and N"
        ));
    }
    Ok(Shard { index, count })
}

/// `--wave N|P%`: at least one node, at most all of them.
pub(super) fn parse_wave(text: &str) -> Result<Amount, String> {
    parse_amount(text)
        .ok()
        .filter(|amount| !matches!(amount, Amount::Nodes(0) | Amount::Percent(0)))
        .ok_or_else(|| {
            format!(
                "`{}` is no wave size: write a number of nodes, at least 1 (5), or a share of the selected nodes from 1% to 100% (25%)",
                text.trim()
            )
        })
}

/// `--max-fail N|P%`: 0 (no failure tolerated) or more.
pub(super) fn parse_max_fail(text: &str) -> Result<Amount, String> {
    parse_amount(text)
}

/// `5` or `25%` (at most 100%).
fn parse_amount(text: &str) -> Result<Amount, String> {
    let text = text.trim();
    let amount = match text.strip_suffix('%') {
        Some(share) => share
            .trim()
            .parse::<u8>()
            .ok()
            .filter(|p| *p <= 100)
            .map(Amount::Percent),
        None => text.parse::<usize>().ok().map(Amount::Nodes),
    };
    amount.ok_or_else(|| {
        format!(
            "`{text}` is neither a number of nodes (5) nor a share of them from 0% to 100% (25%)"
        )
    })
}

/// Every duration flag (`--wave-pause`, `--drain-timeout`, `--timeout`,
/// `--connect-timeout`, `--ready-timeout`, `--kill-grace`): `90`, `90s`, `5m`, `1h`.
pub(super) fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let text = text.trim();
    let digits = text.len() - text.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let (number, unit) = text.split_at(digits);
    let unit_secs = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => 0,
    };
    number
        .parse::<u64>()
        .ok()
        .filter(|_| unit_secs > 0)
        .and_then(|n| n.checked_mul(unit_secs))
        .map(std::time::Duration::from_secs)
        .ok_or_else(|| {
            format!(
                "`{text}` is not a duration: write seconds (90 or 90s), minutes (5m) or hours (1h)"
            )
        })
}

/// `--registry-mirror HOST=URL`: URL must be http:// or https://.
pub(super) fn parse_mirror(text: &str) -> Result<RegistryMirror, String> {
    let (registry, url) = text.split_once('=').ok_or_else(|| {
        format!("`{text}` is not of the form HOST=URL, such as docker.io=https://mirror.example")
    })?;
    let (registry, url) = (registry.trim(), url.trim());
    if registry.is_empty() || registry.contains('/') {
        return Err(format!(
            "`{registry}` is not a registry host such as docker.io or registry.k8s.io"
        ));
    }
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    if !matches!(scheme.as_deref(), Some("http" | "https")) || url.ends_with("://") {
        return Err(format!(
            "`{url}` is not a registry URL such as https://mirror.example or http://127.0.0.1:5000"
        ));
    }
    Ok(RegistryMirror {
        registry: registry.to_string(),
        url: url.to_string(),
    })
}

/// `--expect-sha512 HEX`: a sha512 in hex, lowercased.
pub(super) fn parse_sha512(text: &str) -> Result<String, String> {
    let text = text.trim();
    match crate::digest::sha512_hex_problem(text) {
        Some(problem) => Err(format!(
            "{text:?} is not a sha512 digest (128 hex characters): it {problem}. Give the digest of the kit archive as `sha512sum FILE.tar` prints it"
        )),
        None => Ok(text.to_ascii_lowercase()),
    }
}

/// `--max-package-bytes`: `536870912`, `512MiB`, `1GiB`, `64KiB`.
pub(super) fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let digits = text.len() - text.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let (number, unit) = text.split_at(digits);
    let shift = match unit.trim() {
        "" => 0,
        "KiB" => 10,
        "MiB" => 20,
        "GiB" => 30,
        other => {
            return Err(format!(
                "`{other}` is not a size unit; write bytes, or a number with KiB, MiB or GiB"
            ));
        }
    };
    let number: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a size such as 512MiB"))?;
    match number.checked_mul(1 << shift) {
        Some(0) => Err("the size must be at least 1 byte".to_string()),
        Some(bytes) => Ok(bytes),
        None => Err(format!("`{text}` is too large")),
    }
}

/// `--drain-timeout`: a duration as [`parse_duration`] reads it, of at least a second.
pub(super) fn parse_timeout(text: &str) -> Result<std::time::Duration, String> {
    parse_duration(text).and_then(|timeout| {
        if timeout.is_zero() {
            Err("a timeout must be at least 1 s".to_string())
        } else {
            Ok(timeout)
        }
    })
}

/// `--timeout`, `--connect-timeout`, `--ready-timeout`: a timeout as [`parse_timeout`]
/// reads it, in the whole seconds the options keep.
pub(super) fn parse_timeout_seconds(text: &str) -> Result<u64, String> {
    parse_timeout(text).map(|timeout| timeout.as_secs())
}

/// `--kill-grace`: a duration as [`parse_duration`] reads it, from 0 (kill at once) to a
/// day.
pub(super) fn parse_grace_seconds(text: &str) -> Result<u64, String> {
    parse_duration(text).and_then(|grace| match grace.as_secs() {
        seconds @ 0..=86_400 => Ok(seconds),
        _ => Err("a kill grace period can be at most a day (86400s, 24h)".to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_sizes_take_binary_units() {
        assert_eq!(parse_size("1000"), Ok(1000));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert!(parse_size("0").is_err());
        assert!(
            parse_size("12MB")
                .unwrap_err()
                .contains("`MB` is not a size unit")
        );
        assert!(parse_size("MiB").is_err());
        assert!(
            parse_size("99999999999999GiB")
                .unwrap_err()
                .contains("too large")
        );
    }
}
