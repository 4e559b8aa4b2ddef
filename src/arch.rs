//! CPU architectures keadm publishes builds for, and the mapping from `uname -m`.
//!
//! keadm maps `armv6l` to `arm` and anything unknown to an empty string (which later fails
//! as a missing file). We refuse both up front with a message that says why: the `arm`
//! release is built with GOARM=7, so it cannot run on ARMv6, and there are no riscv64, 386,
//! ppc64le or s390x builds at all.

use std::fmt;

/// An architecture with a `keadm-<ver>-linux-<arch>.tar.gz` release asset.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    Amd64,
    Arm64,
    Arm,
}

impl Arch {
    /// Every arch keadm releases, in the order the release workflow lists them.
    pub const ALL: [Arch; 3] = [Arch::Amd64, Arch::Arm64, Arch::Arm];

    /// The name used in release asset names and in `keadm.archGroup`.
    pub fn as_str(self) -> &'static str {
        match self {
            Arch::Amd64 => "amd64",
            Arch::Arm64 => "arm64",
            Arch::Arm => "arm",
        }
    }

    /// Parses an `archGroup` value. Only the three asset names are accepted, exactly as
    /// written in the release, so a typo is reported instead of staging nothing.
    pub fn from_name(name: &str) -> Option<Arch> {
        Arch::ALL.into_iter().find(|arch| arch.as_str() == name)
    }

    /// Maps the output of `uname -m` on a node (surrounding whitespace is ignored).
    pub fn from_uname(machine: &str) -> Result<Arch, UnsupportedArch> {
        match machine.trim() {
            "x86_64" | "amd64" => Ok(Arch::Amd64),
            "aarch64" | "arm64" => Ok(Arch::Arm64),
            // armv8l is a 64-bit CPU running a 32-bit userland: it runs ARMv7 binaries.
            "armv7l" | "armv8l" | "arm" => Ok(Arch::Arm),
            other => Err(UnsupportedArch {
                machine: other.to_string(),
            }),
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `uname -m` value that no keadm release can run on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnsupportedArch {
    /// The trimmed `uname -m` output.
    pub machine: String,
}

impl fmt::Display for UnsupportedArch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.machine.as_str() {
            "armv6l" => write!(
                f,
                "keadm's arm build needs ARMv7; this node reports armv6l, so no keadm release \
                 can run on it."
            ),
            "" => write!(
                f,
                "keadm publishes no build for this node: `uname -m` printed nothing \
                 (keadm releases exist for amd64, arm64 and arm)."
            ),
            machine => write!(
                f,
                "keadm publishes no build for {machine} (keadm releases exist for amd64, \
                 arm64 and arm)."
            ),
        }
    }
}

impl std::error::Error for UnsupportedArch {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uname_values_of_supported_machines_map_to_release_arches() {
        for (machine, arch) in [
            ("x86_64", Arch::Amd64),
            ("amd64", Arch::Amd64),
            ("aarch64", Arch::Arm64),
            ("arm64", Arch::Arm64),
            ("armv7l", Arch::Arm),
            ("armv8l", Arch::Arm),
            ("arm", Arch::Arm),
            ("x86_64\n", Arch::Amd64),
            ("  aarch64 \r\n", Arch::Arm64),
        ] {
            assert_eq!(Arch::from_uname(machine), Ok(arch), "uname -m {machine:?}");
        }
    }

    #[test]
    fn armv6_is_refused_because_the_arm_release_needs_armv7() {
        let err = Arch::from_uname("armv6l\n").unwrap_err();
        assert_eq!(err.machine, "armv6l");
        assert!(
            err.to_string()
                .starts_with("keadm's arm build needs ARMv7; this node reports armv6l"),
            "{err}"
        );
    }

    #[test]
    fn machines_without_a_keadm_release_are_refused_by_name() {
        for machine in [
            "riscv64",
            "i686",
            "i386",
            "ppc64le",
            "s390x",
            "loongarch64",
            "mips",
            "X86_64",
        ] {
            let err = Arch::from_uname(machine).unwrap_err();
            assert_eq!(err.machine, machine);
            assert!(
                err.to_string()
                    .starts_with(&format!("keadm publishes no build for {machine} ")),
                "{err}"
            );
        }
    }

    #[test]
    fn empty_uname_output_is_refused_with_a_readable_message() {
        let err = Arch::from_uname(" \n").unwrap_err();
        assert_eq!(err.machine, "");
        assert!(
            err.to_string()
                .starts_with("keadm publishes no build for this node: `uname -m` printed nothing"),
            "{err}"
        );
    }

    #[test]
    fn names_round_trip_and_only_asset_names_parse() {
        for arch in Arch::ALL {
            assert_eq!(Arch::from_name(arch.as_str()), Some(arch));
            assert_eq!(arch.to_string(), arch.as_str());
        }
        for name in ["x86_64", "aarch64", "AMD64", " amd64", "armv7l", ""] {
            assert_eq!(Arch::from_name(name), None, "{name:?}");
        }
    }

    #[test]
    fn serde_uses_the_lowercase_asset_names() {
        assert_eq!(serde_json::to_string(&Arch::Arm64).unwrap(), "\"arm64\"");
        assert_eq!(serde_json::from_str::<Arch>("\"arm\"").unwrap(), Arch::Arm);
        assert!(serde_json::from_str::<Arch>("\"x86_64\"").is_err());
    }
}
