//! The shell text that talks to a node's container runtime: which runtime serves the CRI
//! socket keadm join dials, the read-only probe of its images and sandbox image (for the
//! pre-flight check and for skipping imports), and the import of offline image archives.
//!
//! Everything here queries or changes only the node itself: the runtime's CLI over its
//! local socket, `containerd config dump`, `crio config`, iSulad's daemon.json. Nothing
//! asks a registry anything.

use super::SIDECAR_SUFFIX;
use super::script::{with_values, with_values_and_words};
use crate::image_ref::ImageRef;
use crate::node_text::{MESSAGE_CHARS, one_line};
use crate::shell::shell_quote;

/// A container runtime keadm join can use, as the runtime itself says what it is (see
/// [`runtime_probe_script`]), never guessed from its socket's name: a containerd listens
/// wherever its config says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Runtime {
    /// containerd (also k3s's), driven with `ctr --address <socket> -n k8s.io`: CRI's
    /// images live in the `k8s.io` namespace.
    Containerd { socket: String },
    /// docker behind cri-dockerd, driven with the docker CLI on its own socket.
    Docker,
    /// CRI-O, whose containers-storage podman and skopeo write.
    CriO,
    /// iSulad, driven with `isula`.
    Isulad,
    /// A runtime keadm-batch could not tell, or cannot import into: `why` says what it
    /// asked and what answered.
    Unknown { socket: String, why: String },
}

impl Runtime {
    /// The runtime the probe's word `kind` (lib.sh's `kb_kind_of`) names, serving
    /// `socket`; `told` is how the probe learnt it (for an unknown runtime, what it
    /// asked).
    fn of_kind(kind: &str, socket: &str, told: &str) -> Runtime {
        let socket = socket.to_string();
        match kind {
            "containerd" => Runtime::Containerd { socket },
            "docker" => Runtime::Docker,
            "crio" => Runtime::CriO,
            "isulad" => Runtime::Isulad,
            _ => Runtime::Unknown {
                socket,
                why: told.to_string(),
            },
        }
    }

    /// Whether `other` is this runtime: the same kind at the same socket. How it was
    /// told (an unknown runtime's `why`) does not count.
    pub fn is_same(&self, other: &Runtime) -> bool {
        match (self, other) {
            (Runtime::Containerd { socket: a }, Runtime::Containerd { socket: b })
            | (Runtime::Unknown { socket: a, .. }, Runtime::Unknown { socket: b, .. }) => a == b,
            _ => std::mem::discriminant(self) == std::mem::discriminant(other),
        }
    }

    /// The runtime in words, for messages: `containerd (/run/containerd/containerd.sock)`.
    pub fn name(&self) -> String {
        match self {
            Runtime::Containerd { socket } => format!("containerd ({socket})"),
            Runtime::Docker => "docker (through cri-dockerd)".to_string(),
            Runtime::CriO => "CRI-O".to_string(),
            Runtime::Isulad => "iSulad".to_string(),
            Runtime::Unknown { socket, .. } => format!("the runtime at {socket}"),
        }
    }

    /// The CLIs that can import into it, in the order they are tried (lib.sh's
    /// `kb_find_tool` tries them on the node).
    pub fn tools(&self) -> &'static [&'static str] {
        match self {
            Runtime::Containerd { .. } => &["ctr"],
            Runtime::Docker => &["docker"],
            Runtime::CriO => &["podman", "skopeo"],
            Runtime::Isulad => &["isula"],
            Runtime::Unknown { .. } => &[],
        }
    }

    /// What an operator would run on the node to import `file` by hand: words for the
    /// transcript and the recap, never sent to a node.
    pub fn manual_import(&self, file: &str) -> String {
        let file = shell_quote(file);
        match self {
            Runtime::Containerd { socket } => format!(
                "ctr --address {} -n k8s.io images import {file}",
                shell_quote(socket)
            ),
            Runtime::Docker => format!("docker load -i {file}"),
            Runtime::CriO => format!(
                "podman load -i {file} (or skopeo copy docker-archive:{file} containers-storage:<image>)"
            ),
            Runtime::Isulad => format!("isula load -i {file}"),
            Runtime::Unknown { .. } => format!(
                "the runtime's own import command on {file} (containerd: ctr -n k8s.io images import; docker: docker load -i; CRI-O: podman load -i; iSulad: isula load -i)"
            ),
        }
    }

    /// The word the probe prints for it (`KB_RT_KIND`), which the import script
    /// takes (scripts/runtime_import.sh).
    fn kind(&self) -> &'static str {
        match self {
            Runtime::Containerd { .. } => "containerd",
            Runtime::Docker => "docker",
            Runtime::CriO => "crio",
            Runtime::Isulad => "isulad",
            Runtime::Unknown { .. } => "unknown",
        }
    }
}

/// The read-only probe of the runtime at `socket` (a path, as
/// `kubeedge::preflight::runtime_socket` gives it): what runtime it is (`KB_RT_SOCKET`,
/// `KB_RT_KIND`, `KB_RT_TOLD`: the runtime's own answer, see the script), the node's
/// `uname -m` (`KB_RT_ARCH`), the runtime's CLI (`KB_RT_TOOL <cli>`, or
/// `KB_RT_NO_TOOL`), its images (`KB_RT_IMAGE`, `KB_RT_LISTED`, or why not), its sandbox
/// image (`KB_RT_SANDBOX <ref>`) and `KB_RT_DONE` last. Run it with the privilege the
/// run has (the pre-flight check and the prepare step both do): a runtime's socket and
/// its processes' /proc entries are root's. Read it with [`parse_runtime_facts`].
/// scripts/runtime_probe.sh.
pub fn runtime_probe_script(socket: &str) -> String {
    with_values(
        include_str!("scripts/runtime_probe.sh"),
        &[("KB_SOCK", socket)],
    )
}

/// What [`runtime_probe_script`] (or the listing after [`import_script`]) found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeFacts {
    /// The runtime at the socket, as it said what it is; `None` when the probe did not
    /// get that far (and after an import, which does not ask).
    pub runtime: Option<Runtime>,
    /// How the runtime was told (`ctr version answers on it`), or what was asked when it
    /// could not be.
    pub told: Option<String>,
    /// `uname -m`.
    pub machine: Option<String>,
    /// The runtime CLI found on the node; `None` when none of [`Runtime::tools`] is there.
    pub tool: Option<String>,
    /// Whether the images were listed (`images` is then the whole list).
    pub listed: bool,
    /// The images listed, in full. For containerd, which CRI asks by full name, only names
    /// it stores in full count.
    pub images: Vec<ImageRef>,
    /// Why listing failed, in the CLI's words.
    pub list_error: Option<String>,
    /// The sandbox image the runtime is configured with, when it could be read.
    pub sandbox: Option<ImageRef>,
    /// Whether the probe printed its last line.
    pub done: bool,
}

impl RuntimeFacts {
    /// Whether the runtime listed `image`.
    pub fn has(&self, image: &ImageRef) -> bool {
        self.images.contains(image)
    }
}

/// Reads the `KB_RT_` lines of `output`; `None` when there are none.
pub fn parse_runtime_facts(output: &str) -> Option<RuntimeFacts> {
    let mut facts = RuntimeFacts::default();
    let mut seen = false;
    let mut exact = false;
    let (mut socket, mut kind) = (None, None);
    for line in output.lines() {
        let line = line.trim_end();
        let Some(rest) = line.strip_prefix("KB_RT_") else {
            continue;
        };
        seen = true;
        let (key, value) = rest.split_once(' ').unwrap_or((rest, ""));
        match key {
            "SOCKET" => socket = Some(one_line(value, MESSAGE_CHARS)),
            "KIND" => kind = Some(value.trim().to_string()),
            "TOLD" => facts.told = Some(one_line(value.trim(), MESSAGE_CHARS)),
            "ARCH" => facts.machine = Some(one_line(value, 64)),
            "TOOL" => facts.tool = Some(one_line(value, 64)),
            "EXACT" => exact = true,
            "IMAGE" => {
                if let Some(image) = ImageRef::parse(value).ok()
                    && (!exact || image.to_string() == value.trim())
                    && !facts.images.contains(&image)
                {
                    facts.images.push(image);
                }
            }
            "LISTED" => facts.listed = true,
            "LIST_FAILED" => facts.list_error = Some(one_line(value.trim(), MESSAGE_CHARS)),
            "SANDBOX" => facts.sandbox = ImageRef::parse(value).ok(),
            "DONE" => facts.done = true,
            _ => {}
        }
    }
    if let (Some(socket), Some(kind)) = (socket, kind) {
        let told = facts.told.as_deref().unwrap_or("");
        facts.runtime = Some(Runtime::of_kind(&kind, &socket, told));
    }
    seen.then_some(facts)
}

/// How `skopeo copy` picks one image out of an archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InArchive {
    /// A docker-archive `RepoTags` entry: `docker-archive:<file>:<tag>`.
    DockerTag(String),
    /// An OCI `org.opencontainers.image.ref.name`: `oci-archive:<file>:<name>`.
    OciRefName(String),
    /// Not by name: skopeo cannot copy it.
    Unnamed,
}

/// One archive to import, and the images it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveImport {
    /// Its name in the upload directory.
    pub file: String,
    /// Each image: its full reference, and where skopeo finds it in the archive.
    pub images: Vec<(String, InArchive)>,
}

/// The words that stand for `archive` among scripts/runtime_import.sh's positional
/// parameters: its file, then how many `skopeo copy` pairs follow and the pairs, for
/// CRI-O on a node without podman. Other runtimes, and archives skopeo cannot pick images
/// out of by name, have none.
fn import_words(runtime: &Runtime, archive: &ArchiveImport) -> Vec<String> {
    let copies: Option<Vec<[String; 2]>> = match runtime {
        Runtime::CriO => archive
            .images
            .iter()
            .map(|(reference, in_archive)| {
                let source = match in_archive {
                    InArchive::DockerTag(tag) => ["docker-archive:", &archive.file, ":", tag],
                    InArchive::OciRefName(name) => ["oci-archive:", &archive.file, ":", name],
                    InArchive::Unnamed => return None,
                };
                Some([source.concat(), ["containers-storage:", reference].concat()])
            })
            .collect(),
        _ => None,
    };
    let copies = copies.unwrap_or_default();
    let mut words = vec![archive.file.clone(), copies.len().to_string()];
    words.extend(copies.into_iter().flatten());
    words
}

/// Imports `archives` from `dir` into `runtime`, in order, then lists the runtime's images
/// again (as [`runtime_probe_script`] does, without the sandbox). Each archive reports
/// `KB_IMPORTED <index>`; the first failure prints the CLI's output, then
/// `KB_IMPORT_FAILED <index> <status>`, and stops the script with status 3. Run it with
/// the node's privilege (the runtime's socket is root's). scripts/runtime_import.sh.
pub fn import_script(dir: &str, runtime: &Runtime, archives: &[ArchiveImport]) -> String {
    let words: Vec<String> = archives
        .iter()
        .flat_map(|archive| import_words(runtime, archive))
        .collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let socket = match runtime {
        Runtime::Containerd { socket } | Runtime::Unknown { socket, .. } => socket.as_str(),
        _ => "",
    };
    with_values_and_words(
        include_str!("scripts/runtime_import.sh"),
        &[
            ("KB_DIR", dir),
            ("KB_RUNTIME", runtime.kind()),
            ("KB_SOCK", socket),
        ],
        Some(&words),
    )
}

/// What [`import_script`] reported.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// The indexes of the archives imported.
    pub imported: Vec<usize>,
    /// The archive that failed and the CLI's exit status.
    pub failed: Option<(usize, i32)>,
    /// The runtime's images afterwards.
    pub after: Option<RuntimeFacts>,
}

pub fn parse_import(output: &str) -> ImportReport {
    let mut report = ImportReport::default();
    for line in output.lines() {
        let line = line.trim_end();
        if let Some(index) = line.strip_prefix("KB_IMPORTED ") {
            if let Ok(index) = index.trim().parse() {
                report.imported.push(index);
            }
        } else if let Some(rest) = line.strip_prefix("KB_IMPORT_FAILED ")
            && let Some((index, status)) = rest.split_once(' ')
            && let (Ok(index), Ok(status)) = (index.parse(), status.trim().parse())
        {
            report.failed = Some((index, status));
        }
    }
    report.after = parse_runtime_facts(output);
    report
}

/// Removes the image archives `files` (names in `dir`) and their sidecars once their
/// images are in the runtime, with the node's privilege (the upload dir is root's under
/// sudo). Only regular files are counted; each archive that is still there afterwards
/// prints `KB_RM_KEPT <name>`, and the script ends with `KB_RM_DONE <removed> <bytes>`.
/// It never fails the script: an upload dir it cannot enter prints `KB_RM_NODIR`.
/// scripts/runtime_remove.sh.
pub fn remove_archives_script(dir: &str, files: &[String]) -> String {
    let files: Vec<&str> = files.iter().map(String::as_str).collect();
    with_values_and_words(
        include_str!("scripts/runtime_remove.sh"),
        &[("KB_DIR", dir), ("KB_SIDECAR", SIDECAR_SUFFIX)],
        Some(&files),
    )
}

/// What [`remove_archives_script`] reported: `None` when it did not get to its end.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Removed {
    /// How many archives went, and their bytes.
    pub files: u64,
    pub bytes: u64,
    /// The archives still there.
    pub kept: Vec<String>,
    /// The upload dir could not be entered.
    pub no_dir: bool,
}

pub fn parse_removed(output: &str) -> Option<Removed> {
    let mut removed = Removed::default();
    let mut done = false;
    for line in output.lines().map(str::trim_end) {
        if line == "KB_RM_NODIR" {
            removed.no_dir = true;
            done = true;
        } else if let Some(name) = line.strip_prefix("KB_RM_KEPT ") {
            removed.kept.push(name.to_string());
        } else if let Some(rest) = line.strip_prefix("KB_RM_DONE ")
            && let Some((files, bytes)) = rest.split_once(' ')
            && let (Ok(files), Ok(bytes)) = (files.parse(), bytes.parse())
        {
            removed.files = files;
            removed.bytes = bytes;
            done = true;
        }
    }
    done.then_some(removed)
}

/// The lines of `output` that are the CLI's own words (no `KB_` lines), for messages.
pub fn cli_output(output: &str) -> String {
    one_line(
        &output
            .lines()
            .filter(|l| !l.starts_with("KB_"))
            .collect::<Vec<_>>()
            .join("\n"),
        MESSAGE_CHARS,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;
    use std::process::Command;

    /// Writes an executable `name` into `bin` with `body` as its shell text.
    fn fake_tool(bin: &Path, name: &str, body: &str) {
        let path = bin.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// A scratch directory with an empty `bin` in it, for [`run`]'s PATH.
    fn scratch_bin() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        (dir, bin)
    }

    /// Runs `script` with only `bin` on PATH, after linking the basic tools the scripts
    /// and the fakes use into it: the machine's own ctr or crictl must not answer.
    fn run(bin: &Path, script: &str) -> (String, Option<i32>) {
        for tool in [
            "uname", "sed", "head", "awk", "tail", "tr", "cat", "ls", "sort",
        ] {
            let link = bin.join(tool);
            if !link.exists() {
                let real = ["/usr/bin", "/bin"]
                    .iter()
                    .map(|d| Path::new(d).join(tool))
                    .find(|p| p.exists())
                    .unwrap();
                std::os::unix::fs::symlink(real, link).unwrap();
            }
        }
        let out = Command::new("/bin/sh")
            .args(["-c", script])
            .env("PATH", bin)
            .output()
            .unwrap();
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            out.status.code(),
        )
    }

    /// What the probe of `socket` found, run with only `bin` on PATH.
    fn probe(bin: &Path, socket: &str) -> RuntimeFacts {
        let (out, code) = run(bin, &runtime_probe_script(socket));
        assert_eq!(code, Some(0), "{out}");
        let facts = parse_runtime_facts(&out).unwrap();
        assert!(facts.done, "{out}");
        facts
    }

    /// The runtime the probe told, in words, and how it told it.
    fn told(facts: &RuntimeFacts) -> (String, String) {
        (
            facts.runtime.as_ref().unwrap().name(),
            facts.told.clone().unwrap(),
        )
    }

    #[test]
    fn a_runtime_is_asked_what_it_is_by_cri_s_runtime_name_first() {
        let (dir, bin) = scratch_bin();
        // A socket there, under a name that would mislead a guess: the runtime's own
        // answer decides.
        let socket = |name: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, "").unwrap();
            path.to_str().unwrap().to_string()
        };
        let containerd = socket("isulad.sock");
        for (runtime_name, socket, expected) in [
            (
                "containerd",
                containerd.clone(),
                format!("containerd ({containerd})"),
            ),
            (
                "docker",
                socket("containerd.sock"),
                "docker (through cri-dockerd)".to_string(),
            ),
            ("cri-o", socket("isulad.sock"), "CRI-O".to_string()),
            ("iSulad", socket("crio.sock"), "iSulad".to_string()),
        ] {
            fake_tool(
                &bin,
                "crictl",
                &format!(
                    "case \"$*\" in *' version') printf 'Version:  0.1.0\\nRuntimeName:  {runtime_name}\\nRuntimeVersion:  1.0\\n';; *) exit 1;; esac"
                ),
            );
            let facts = probe(&bin, &socket);
            assert_eq!(
                told(&facts),
                (
                    expected,
                    format!("crictl version says RuntimeName {runtime_name}")
                )
            );
        }
        // A runtime that names itself, but not as one keadm-batch imports into.
        fake_tool(
            &bin,
            "crictl",
            "case \"$*\" in *' version') echo 'RuntimeName: frakti';; *) exit 1;; esac",
        );
        let frakti = socket("containerd.sock");
        let facts = probe(&bin, &frakti);
        assert_eq!(
            facts.runtime,
            Some(Runtime::Unknown {
                socket: frakti,
                why: "crictl version says RuntimeName frakti".into()
            })
        );
    }

    #[test]
    fn the_names_runtimes_give_themselves_map_to_the_runtimes() {
        for (name, kind) in [
            ("containerd", "containerd"),
            ("cri-dockerd", "docker"),
            ("docker", "docker"),
            ("crio", "crio"),
            ("cri-o", "crio"),
            ("isulad", "isulad"),
            ("iSulad", "isulad"),
            ("dockerd", "unknown"),
            ("systemd", "unknown"),
        ] {
            let out = Command::new("sh")
                .args([
                    "-c",
                    &crate::remote::script::sendable(". ./lib.sh\nkb_kind_of \"$1\"\n"),
                    "sh",
                    name,
                ])
                .output()
                .unwrap();
            assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{kind}\n"));
        }
    }

    #[test]
    fn without_crictl_ctr_version_tells_containerd_else_what_was_asked_is_said() {
        let (dir, bin) = scratch_bin();
        let state = dir.path().join("images.txt");
        fake_ctr(&bin, &state);
        let socket = dir.path().join("ctd.sock");
        std::fs::write(&socket, "").unwrap();
        let socket = socket.to_str().unwrap();
        let facts = probe(&bin, socket);
        assert_eq!(
            told(&facts),
            (
                format!("containerd ({socket})"),
                "ctr version answers on it".to_string()
            )
        );
        // Nothing is at the socket's path: unknown at once, no CLI asked (each would wait
        // for its timeout on a socket that is not there).
        std::fs::remove_file(socket).unwrap();
        let asked = dir.path().join("asked");
        for cli in ["crictl", "ctr"] {
            fake_tool(
                &bin,
                cli,
                &format!("echo {cli} >> {}\nsleep 5", asked.display()),
            );
        }
        let facts = probe(&bin, socket);
        let Some(Runtime::Unknown { why, .. }) = &facts.runtime else {
            panic!("{facts:?}")
        };
        assert_eq!(
            why,
            &format!("nothing is at {socket}: no runtime listens there")
        );
        assert!(
            !asked.exists(),
            "a CLI was asked about a socket that is not there"
        );
        assert!(!facts.listed, "{facts:?}");
    }

    #[test]
    fn without_any_cli_the_process_that_holds_the_socket_is_named() {
        let (dir, bin) = scratch_bin();
        // This test process holds it; its name is no runtime's, so it is named as it is.
        let socket = dir.path().join("held.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let facts = probe(&bin, socket.to_str().unwrap());
        let comm = std::fs::read_to_string("/proc/self/comm").unwrap();
        let Some(Runtime::Unknown { why, .. }) = &facts.runtime else {
            panic!("{facts:?}")
        };
        assert_eq!(
            why,
            &format!(
                "its socket is held by {} (pid {})",
                comm.trim_end(),
                std::process::id()
            )
        );
    }

    /// Issue 29, finding 8: the probe and every runtime's import, as odd as a config and
    /// a kit may make them (quotes and spaces in the socket, the dir and the archive
    /// names; images picked by tag, by OCI name and not at all), pass Debian's shellcheck
    /// for POSIX sh in every form they are sent in.
    #[test]
    fn every_script_passes_shellcheck_for_every_runtime() {
        use crate::remote::sent_forms::{Forms, LS_OF_PROC_FDS, assert_forms_posix_sh};
        let archive = |file: &str, images| ArchiveImport {
            file: file.into(),
            images,
        };
        let archives = [
            archive(
                "image-it's \"a\".tar",
                vec![
                    (
                        "docker.io/a/b:1".into(),
                        InArchive::DockerTag("a/b:1".into()),
                    ),
                    ("docker.io/a/c:1".into(), InArchive::OciRefName("c".into())),
                ],
            ),
            archive(
                "image-b.tar",
                vec![("docker.io/a/d:1".into(), InArchive::Unnamed)],
            ),
        ];
        let socket = "/run/it's here/containerd.sock";
        assert_forms_posix_sh(
            "the runtime probe",
            &runtime_probe_script(socket),
            Forms::Every,
            &[LS_OF_PROC_FDS],
        );
        for kind in ["containerd", "docker", "crio", "isulad", "unknown"] {
            let runtime = Runtime::of_kind(kind, socket, "");
            assert_forms_posix_sh(
                &format!("the import into {}", runtime.name()),
                &import_script("/srv/edge nodes/it's", &runtime, &archives),
                Forms::Every,
                &[],
            );
        }
        assert_eq!(
            Runtime::of_kind("containerd", "/run/containerd/containerd.sock", "")
                .manual_import("image-a.tar"),
            "ctr --address /run/containerd/containerd.sock -n k8s.io images import image-a.tar"
        );
    }

    /// A fake `ctr` that answers like containerd's: lists what `images.txt` holds, imports
    /// by appending the archive's first line, and fails for a missing socket.
    fn fake_ctr(bin: &Path, state: &Path) {
        fake_tool(
            bin,
            "ctr",
            &format!(
                "while [ $# -gt 0 ]; do case $1 in --address) sock=$2; shift 2;; --connect-timeout|-n) shift 2;; *) break;; esac; done\n\
                 [ -S \"$sock\" ] || [ -f \"$sock\" ] || {{ echo \"ctr: failed to dial \\\"$sock\\\": connection error\" >&2; exit 1; }}\n\
                 case \"$1 $2\" in\n\
                 'version ') printf 'Client:\\n  Version:  1.6.20\\nServer:\\n  Version:  1.6.20\\n';;\n\
                 'images ls') cat {state} 2>/dev/null; echo sha256:0123;;\n\
                 'images import') [ -f \"$3\" ] || {{ echo \"ctr: open $3: no such file\" >&2; exit 1; }}; head -n 1 \"$3\" >> {state}; echo \"unpacking $(head -n 1 \"$3\")...done\";;\n\
                 *) exit 2;;\n\
                 esac",
                state = shell_quote(&state.display().to_string())
            ),
        );
        fake_tool(
            bin,
            "containerd",
            "[ \"$1 $2\" = 'config dump' ] && printf 'version = 2\\n[plugins]\\n  [plugins.\"io.containerd.grpc.v1.cri\"]\\n    sandbox_image = \"registry.k8s.io/pause:3.6\"\\n'",
        );
    }

    #[test]
    fn the_containerd_probe_lists_images_and_the_sandbox_image() {
        let (dir, bin) = scratch_bin();
        let state = dir.path().join("images.txt");
        std::fs::write(
            &state,
            "docker.io/kubeedge/installation-package:v1.23.1\nkubeedge/installation-package:v1.22.0\n",
        )
        .unwrap();
        fake_ctr(&bin, &state);
        let socket = dir.path().join("containerd.sock");
        std::fs::write(&socket, "").unwrap();
        let facts = probe(&bin, socket.to_str().unwrap());
        assert!(facts.listed, "{facts:?}");
        assert_eq!(facts.tool.as_deref(), Some("ctr"));
        assert_eq!(
            facts.images,
            [ImageRef::parse("kubeedge/installation-package:v1.23.1").unwrap()],
            "image ids are not references, and a short name is not what CRI asks for"
        );
        assert_eq!(
            facts.sandbox,
            ImageRef::parse("registry.k8s.io/pause:3.6").ok(),
            "{facts:?}"
        );
        assert!(facts.machine.is_some());
    }

    /// A name the runtime lists that is no reference by the distribution spec's grammar
    /// (containerd stores any name `ctr images tag` is given) is left out of the listing:
    /// the rest of it stands, the list counts as listed, and nothing is an error. keadm
    /// asks for no such name, so leaving it out costs nothing.
    #[test]
    fn a_listed_name_that_is_no_reference_is_left_out_of_the_listing() {
        let output = "KB_RT_SOCKET /run/containerd/containerd.sock\nKB_RT_KIND containerd\n\
            KB_RT_EXACT\n\
            KB_RT_IMAGE docker.io/kubeedge/-x:1\n\
            KB_RT_IMAGE docker.io/library/.hidden:1\n\
            KB_RT_IMAGE docker.io/kubeedge/x__-y:1\n\
            KB_RT_IMAGE -registry.io/x:1\n\
            KB_RT_IMAGE docker.io/kubeedge/installation-package:v1.23.1\n\
            KB_RT_LISTED\nKB_RT_SANDBOX registry.k8s.io/.pause:3.6\nKB_RT_DONE\n";
        let facts = parse_runtime_facts(output).unwrap();
        assert_eq!(
            facts.images,
            [ImageRef::parse("kubeedge/installation-package:v1.23.1").unwrap()]
        );
        assert!(facts.listed && facts.done, "{facts:?}");
        assert_eq!(facts.list_error, None);
        assert_eq!(facts.sandbox, None, "{facts:?}");
        assert_eq!(
            facts.runtime.map(|r| r.name()).as_deref(),
            Some("containerd (/run/containerd/containerd.sock)")
        );
    }

    /// Issue 29, finding 8: a CLI that fails to list (crictl for a containerd without
    /// ctr, isula) is a list that failed, in the CLI's words, never an empty list: its
    /// status was lost in the pipe to awk, and the image check then said every image
    /// was missing.
    #[test]
    fn a_list_whose_cli_fails_is_not_an_empty_list() {
        for (runtime_name, cli, words) in [
            (
                "containerd",
                "crictl",
                "rpc error: code = Unavailable desc = connection refused",
            ),
            ("iSulad", "isula", "Cannot connect to the iSulad daemon"),
        ] {
            let (dir, bin) = scratch_bin();
            let socket = dir.path().join("rt.sock");
            std::fs::write(&socket, "").unwrap();
            // crictl tells the runtime; the listing CLI then fails.
            let fails = format!("echo '{words}' >&2; exit 1");
            fake_tool(
                &bin,
                "crictl",
                &format!(
                    "case \"$*\" in *' version') echo 'RuntimeName: {runtime_name}';; *) {fails};; esac"
                ),
            );
            if cli != "crictl" {
                fake_tool(&bin, cli, &fails);
            }
            let facts = probe(&bin, socket.to_str().unwrap());
            assert!(!facts.listed, "{runtime_name}: {facts:?}");
            assert!(
                facts.list_error.as_deref().unwrap_or("").contains(words),
                "{runtime_name}: {facts:?}"
            );
        }
    }

    #[test]
    fn a_containerd_that_stops_answering_is_quoted_and_crictl_can_still_list() {
        let (dir, bin) = scratch_bin();
        // crictl tells containerd; ctr then fails to list: the CLI's words.
        fake_tool(
            &bin,
            "crictl",
            "case \"$*\" in *' version') echo 'RuntimeName: containerd';; *images*) printf 'IMAGE TAG IMAGE ID SIZE\\nregistry.k8s.io/pause 3.6 6270bb605e12e 302kB\\nx <none> 1 1\\n';; *info*) echo '  \"sandboxImage\": \"registry.k8s.io/pause:3.6\",';; esac",
        );
        fake_ctr(&bin, &dir.path().join("images.txt"));
        // The socket is there (crictl answers on it); ctr's fake dials only a file it can
        // see, and this one it cannot.
        let gone = dir.path().join("gone.sock");
        std::fs::create_dir(&gone).unwrap();
        let gone = gone.to_str().unwrap();
        let facts = probe(&bin, gone);
        assert_eq!(
            facts.runtime.as_ref().unwrap().name(),
            format!("containerd ({gone})")
        );
        assert!(!facts.listed);
        assert!(
            facts
                .list_error
                .as_deref()
                .unwrap()
                .contains("failed to dial"),
            "{facts:?}"
        );
        // Without ctr, crictl lists.
        std::fs::remove_file(bin.join("ctr")).unwrap();
        let facts = probe(&bin, gone);
        assert_eq!(facts.tool, None);
        assert!(facts.listed, "{facts:?}");
        assert_eq!(
            facts.images,
            [ImageRef::parse("registry.k8s.io/pause:3.6").unwrap()]
        );
        assert_eq!(
            facts.sandbox,
            ImageRef::parse("registry.k8s.io/pause:3.6").ok()
        );
    }

    #[test]
    fn import_runs_each_archive_and_lists_again() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        let up = dir.path().join("up");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&up).unwrap();
        let state = dir.path().join("images.txt");
        fake_ctr(&bin, &state);
        let socket = dir.path().join("containerd.sock");
        std::fs::write(&socket, "").unwrap();
        std::fs::write(
            up.join("image-a.tar"),
            "docker.io/kubeedge/installation-package:v1.23.1\n",
        )
        .unwrap();
        std::fs::write(up.join("image-b.tar"), "registry.k8s.io/pause:3.6\n").unwrap();
        let runtime = Runtime::of_kind("containerd", socket.to_str().unwrap(), "");
        let archive = |file: &str| ArchiveImport {
            file: file.into(),
            images: vec![],
        };
        let script = import_script(
            up.to_str().unwrap(),
            &runtime,
            &[archive("image-a.tar"), archive("image-b.tar")],
        );
        let (out, code) = run(&bin, &script);
        assert_eq!(code, Some(0), "{out}");
        let report = parse_import(&out);
        assert_eq!(report.imported, [0, 1]);
        assert_eq!(report.failed, None);
        let after = report.after.unwrap();
        assert!(after.listed);
        assert_eq!(after.images.len(), 2, "{out}");
        assert!(cli_output(&out).contains("unpacking registry.k8s.io/pause:3.6...done"));

        // A missing file stops the import at that archive, with the CLI's words.
        let script = import_script(
            up.to_str().unwrap(),
            &runtime,
            &[
                archive("image-a.tar"),
                archive("image-gone.tar"),
                archive("image-b.tar"),
            ],
        );
        let (out, code) = run(&bin, &script);
        assert_eq!(code, Some(3));
        let report = parse_import(&out);
        assert_eq!(report.imported, [0]);
        assert_eq!(report.failed, Some((1, 1)));
        assert!(
            cli_output(&out).contains("open image-gone.tar: no such file"),
            "{out}"
        );
    }

    #[test]
    fn cri_o_imports_with_podman_else_skopeo_by_name() {
        let runtime = Runtime::CriO;
        let archive = |file: &str, images| ArchiveImport {
            file: file.into(),
            images,
        };
        let named = archive(
            "image-x.tar",
            vec![
                (
                    "docker.io/a/b:1".into(),
                    InArchive::DockerTag("a/b:1".into()),
                ),
                (
                    "docker.io/a/c:2".into(),
                    InArchive::OciRefName("c:2".into()),
                ),
            ],
        );
        assert_eq!(
            import_words(&runtime, &named),
            [
                "image-x.tar",
                "2",
                "docker-archive:image-x.tar:a/b:1",
                "containers-storage:docker.io/a/b:1",
                "oci-archive:image-x.tar:c:2",
                "containers-storage:docker.io/a/c:2"
            ]
        );
        let unnamed = archive(
            "image-y.tar",
            vec![("docker.io/a/b:1".into(), InArchive::Unnamed)],
        );
        assert_eq!(import_words(&runtime, &unnamed), ["image-y.tar", "0"]);
        // Only CRI-O's import reads the pairs.
        assert_eq!(import_words(&Runtime::Docker, &named), ["image-x.tar", "0"]);

        // Without podman, skopeo copies each image by name; an archive it cannot pick
        // them out of fails with why, and stops the import.
        let (dir, bin) = scratch_bin();
        let log = dir.path().join("log");
        fake_tool(
            &bin,
            "skopeo",
            &format!("printf '<%s>' \"$@\" >> {}; echo >> {0}", log.display()),
        );
        let up = dir.path().to_str().unwrap();
        let (out, code) = run(
            &bin,
            &import_script(up, &runtime, std::slice::from_ref(&named)),
        );
        assert_eq!(code, Some(0), "{out}");
        assert_eq!(parse_import(&out).imported, [0]);
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            "<copy><docker-archive:image-x.tar:a/b:1><containers-storage:docker.io/a/b:1>\n\
             <copy><oci-archive:image-x.tar:c:2><containers-storage:docker.io/a/c:2>\n"
        );
        let (out, code) = run(
            &bin,
            &import_script(up, &runtime, &[unnamed, named.clone()]),
        );
        assert_eq!(code, Some(3), "{out}");
        assert_eq!(parse_import(&out).failed, Some((0, 1)));
        assert!(cli_output(&out).contains("install podman"), "{out}");
        // With podman, podman loads the archive.
        fake_tool(&bin, "podman", "echo \"podman $*\"");
        let (out, code) = run(&bin, &import_script(up, &runtime, &[named]));
        assert_eq!(code, Some(0), "{out}");
        assert!(out.contains("podman load -i image-x.tar"), "{out}");
    }
}
