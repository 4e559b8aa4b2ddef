//! `keadm-batch batch gen-config`'s arguments, and their conversion into
//! [`GenConfigOptions`].

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::options::{Command, GenConfigOptions, GroupsAs, SourceFormat};

#[derive(Args, Debug)]
pub(super) struct GenConfigArgs {
    /// Where to write it.
    #[arg(short, long, value_name = "FILE", default_value = "config.yaml")]
    output: PathBuf,
    /// Overwrite an existing file.
    #[arg(long)]
    force: bool,
    /// Take the nodes from this CSV file or Ansible inventory (columns and variables:
    /// docs/config.md, "Configs from a CSV file or an Ansible inventory").
    #[arg(long, value_name = "FILE")]
    from: Option<PathBuf>,
    /// How to read --from's file, instead of telling by its extension and content.
    #[arg(long, value_name = "FORMAT", requires = "from")]
    format: Option<FormatArg>,
    /// What an Ansible inventory's groups become: each host's site (the group that
    /// lists it), or labels (`<group>: "true"` for every group it is in).
    #[arg(long, value_name = "AS", default_value = "site", requires = "from")]
    groups: GroupsArg,
}

/// `gen-config --format`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum FormatArg {
    /// A CSV file with a header row.
    Csv,
    /// An Ansible inventory in its INI dialect.
    Ini,
    /// An Ansible inventory in YAML.
    Yaml,
}

/// `gen-config --groups`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum GroupsArg {
    Site,
    Labels,
}

/// The options `batch gen-config` names.
pub(super) fn command_of(args: GenConfigArgs) -> Command {
    let GenConfigArgs {
        output,
        force,
        from,
        format,
        groups,
    } = args;
    Command::GenConfig(GenConfigOptions {
        output,
        force,
        from,
        format: format.map(|format| match format {
            FormatArg::Csv => SourceFormat::Csv,
            FormatArg::Ini => SourceFormat::AnsibleIni,
            FormatArg::Yaml => SourceFormat::AnsibleYaml,
        }),
        groups: match groups {
            GroupsArg::Site => GroupsAs::Site,
            GroupsArg::Labels => GroupsAs::Labels,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::tests::run;

    #[test]
    fn gen_config_defaults_to_config_yaml() {
        assert_eq!(
            run(&["keadm-batch", "batch", "gen-config"]).unwrap(),
            Command::GenConfig(GenConfigOptions {
                from: None,
                format: None,
                groups: GroupsAs::Site,
                output: "config.yaml".into(),
                force: false
            })
        );
    }
}
