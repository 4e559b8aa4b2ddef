//! Where `batch merge --into` may write: not in a shard's run directory, not inside one
//! and not around one. The merged summary.json in a shard's own directory replaces that
//! shard's results, and one inside or around it mixes the merged files with a shard's.

use std::fmt;
use std::path::{Component, Path, PathBuf};

use super::MergeError;

/// How `--into` lies to one of the run directories being merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overlap {
    Same,
    Inside,
    Around,
}

impl fmt::Display for Overlap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Overlap::Same => "is the run directory",
            Overlap::Inside => "is inside the run directory",
            Overlap::Around => "contains the run directory",
        })
    }
}

/// Refuses an `into` that is, is inside or contains one of `dirs`, comparing the paths as
/// they resolve. Only looks the paths up: nothing is read or written, so the caller runs
/// it before anything else.
pub fn check_into(into: &Path, dirs: &[PathBuf]) -> Result<(), MergeError> {
    let target = resolved(into).map_err(|source| MergeError::IntoUnresolved {
        into: into.to_path_buf(),
        source,
    })?;
    for dir in dirs {
        let shard = dir.canonicalize().map_err(|source| MergeError::NotADir {
            dir: dir.clone(),
            source,
        })?;
        let overlap = if target == shard {
            Overlap::Same
        } else if target.starts_with(&shard) {
            Overlap::Inside
        } else if shard.starts_with(&target) {
            Overlap::Around
        } else {
            continue;
        };
        return Err(MergeError::IntoAShard {
            into: into.to_path_buf(),
            overlap,
            dir: dir.clone(),
        });
    }
    Ok(())
}

/// `path` as it will resolve once the merge has created it, part by part: a part that
/// exists is followed as the kernel would (links and all), one that does not is a plain
/// directory the merge makes, so a `..` after it leads back to where it was made.
fn resolved(path: &Path) -> std::io::Result<PathBuf> {
    let mut real = PathBuf::from("/");
    // How many of `real`'s last parts do not exist yet.
    let mut missing = 0usize;
    for part in std::path::absolute(path)?.components() {
        match part {
            Component::Normal(name) if missing == 0 => match real.join(name).canonicalize() {
                Ok(followed) => real = followed,
                Err(_) => {
                    real.push(name);
                    missing = 1;
                }
            },
            Component::Normal(name) => {
                real.push(name);
                missing += 1;
            }
            // `real` is canonical up to its missing parts, so its lexical parent is the
            // one `..` reaches.
            Component::ParentDir => {
                real.pop();
                missing = missing.saturating_sub(1);
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    Ok(real)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_not_made_yet_resolves_as_the_merge_will_make_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("shard1")).unwrap();
        std::os::unix::fs::symlink("shard1", root.join("link")).unwrap();
        for (path, expected) in [
            ("shard1", "shard1"),
            ("link/new/deeper", "shard1/new/deeper"),
            ("new/../shard1", "shard1"),
            ("new/./x/../../link/..", ""),
            ("link/..", ""),
            // Back out of a directory not made yet, then through a link into a shard.
            ("new/../link/sub", "shard1/sub"),
        ] {
            assert_eq!(
                resolved(&root.join(path)).unwrap(),
                root.join(expected),
                "{path}"
            );
        }
    }

    #[test]
    fn a_sibling_whose_name_starts_like_a_shards_is_no_overlap() {
        let dir = tempfile::tempdir().unwrap();
        let shard = dir.path().join("shard1");
        std::fs::create_dir(&shard).unwrap();
        check_into(
            &dir.path().join("shard1-merged"),
            std::slice::from_ref(&shard),
        )
        .unwrap();
        let err = check_into(&shard.join("m"), std::slice::from_ref(&shard)).unwrap_err();
        assert!(
            matches!(
                err,
                MergeError::IntoAShard {
                    overlap: Overlap::Inside,
                    ..
                }
            ),
            "{err}"
        );
    }
}
