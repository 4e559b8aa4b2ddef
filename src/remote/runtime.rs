//! The shell text that talks to a node's container runtime: which runtime serves the CRI
//! socket keadm join dials, the read-only probe of its images and sandbox image (for the
//! pre-flight check and for skipping imports), and the import of offline image archives.
//!
//! Everything here queries or changes only the node itself: the runtime's CLI over its
//! local socket, `containerd config dump`, `crio config`, iSulad's daemon.json. Nothing
//! asks a registry anything.

use crate::image_ref::ImageRef;
use crate::node_text::{MESSAGE_CHARS, one_line};
use crate::shell::shell_quote;

/// A container runtime keadm join can use, told by the path of its CRI socket.
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
    /// A socket keadm-batch cannot tell: it imports nothing into it.
    Unknown { socket: String },
}

impl Runtime {
    /// The runtime serving `socket` (a path, as `kubeedge::preflight::runtime_socket`
    /// gives it), by the names the runtimes give their sockets: containerd's
    /// `containerd.sock` (and k3s's `/run/k3s/containerd/`), `cri-dockerd.sock` (and the
    /// old `dockershim.sock`), `crio.sock`, `isulad.sock`.
    pub fn for_socket(socket: &str) -> Runtime {
        let lower = socket.to_ascii_lowercase();
        if lower.contains("cri-dockerd") || lower.contains("dockershim") {
            Runtime::Docker
        } else if lower.contains("containerd") {
            Runtime::Containerd {
                socket: socket.to_string(),
            }
        } else if lower.contains("crio") || lower.contains("cri-o") {
            Runtime::CriO
        } else if lower.contains("isulad") {
            Runtime::Isulad
        } else {
            Runtime::Unknown {
                socket: socket.to_string(),
            }
        }
    }

    /// The runtime in words, for messages: `containerd (/run/containerd/containerd.sock)`.
    pub fn name(&self) -> String {
        match self {
            Runtime::Containerd { socket } => format!("containerd ({socket})"),
            Runtime::Docker => "docker (through cri-dockerd)".to_string(),
            Runtime::CriO => "CRI-O".to_string(),
            Runtime::Isulad => "iSulad".to_string(),
            Runtime::Unknown { socket } => format!("the runtime at {socket}"),
        }
    }

    /// The CLIs that can import into it, in the order they are tried.
    pub fn tools(&self) -> &'static [&'static str] {
        match self {
            Runtime::Containerd { .. } => &["ctr"],
            Runtime::Docker => &["docker"],
            Runtime::CriO => &["podman", "skopeo"],
            Runtime::Isulad => &["isula"],
            Runtime::Unknown { .. } => &[],
        }
    }

    /// What an operator would run on the node to import `file` by hand.
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

    /// Shell functions `kb_list` (prints one image reference per line; `$kb_tool` is the
    /// runtime's CLI found, or empty) and `kb_sandbox` (prints the sandbox image the
    /// runtime is configured with, or nothing). Both run as `$KB_SUDO`.
    fn functions(&self) -> String {
        let crictl = |socket: &str| {
            format!(
                "command -v crictl >/dev/null 2>&1 && $KB_SUDO crictl --runtime-endpoint {} info 2>/dev/null | sed -n 's/.*\"sandboxImage\": *\"\\([^\"]*\\)\".*/\\1/p' | head -n 1",
                shell_quote(&format!("unix://{socket}"))
            )
        };
        let crictl_list = |socket: &str| {
            format!(
                "command -v crictl >/dev/null 2>&1 || return 3; $KB_SUDO crictl --runtime-endpoint {} images | awk 'NR > 1 && $2 != \"<none>\" {{ print $1 \":\" $2 }}'",
                shell_quote(&format!("unix://{socket}"))
            )
        };
        let (list, sandbox) = match self {
            Runtime::Containerd { socket } => (
                format!(
                    "[ -n \"$kb_tool\" ] || {{ {}; return; }}\n  $KB_SUDO ctr --connect-timeout 10s --address {} -n k8s.io images ls -q",
                    crictl_list(socket),
                    shell_quote(socket)
                ),
                format!(
                    "kb_s=$({})\n  [ -n \"$kb_s\" ] || kb_s=$($KB_SUDO containerd config dump 2>/dev/null | sed -n 's/^[[:space:]]*sandbox\\(_image\\)\\{{0,1\\}}[[:space:]]*=[[:space:]]*\"\\([^\"]*\\)\".*/\\2/p' | head -n 1)\n  printf '%s' \"$kb_s\"",
                    crictl(socket)
                ),
            ),
            Runtime::Docker => (
                "[ -n \"$kb_tool\" ] || return 3\n  $KB_SUDO docker images --format '{{.Repository}}:{{.Tag}}'".to_string(),
                "return 0".to_string(),
            ),
            Runtime::CriO => (
                "[ \"$kb_tool\" = podman ] || return 3\n  $KB_SUDO podman images --format '{{.Repository}}:{{.Tag}}'".to_string(),
                "$KB_SUDO crio config 2>/dev/null | sed -n 's/^[[:space:]]*pause_image[[:space:]]*=[[:space:]]*\"\\([^\"]*\\)\".*/\\1/p' | head -n 1".to_string(),
            ),
            Runtime::Isulad => (
                "[ -n \"$kb_tool\" ] || return 3\n  $KB_SUDO isula images | awk 'NR > 1 { print $1 \":\" $2 }'".to_string(),
                "sed -n 's/.*\"pod-sandbox-image\"[[:space:]]*:[[:space:]]*\"\\([^\"]*\\)\".*/\\1/p' /etc/isulad/daemon.json 2>/dev/null | head -n 1".to_string(),
            ),
            Runtime::Unknown { socket } => (crictl_list(socket), crictl(socket)),
        };
        let mut s = format!(
            "kb_list() {{\n  {list}\n}}\nkb_sandbox() {{\n  {sandbox}\n}}\nkb_tool=\nfor kb_t in {}; do command -v \"$kb_t\" >/dev/null 2>&1 && {{ kb_tool=$kb_t; break; }}; done\n",
            match self.tools() {
                [] => "''".to_string(),
                tools => tools.join(" "),
            }
        );
        if let Runtime::Containerd { .. } = self {
            // containerd keeps a name as the archive wrote it, and CRI looks images up by
            // their full name: a short name (`kubeedge/x:1`) is not the image keadm asks for.
            s.push_str("echo KB_RT_EXACT\n");
        }
        s
    }
}

/// Lists the runtime's images as `KB_RT_IMAGE <ref>` lines and `KB_RT_LISTED`, or says
/// why it could not (`KB_RT_LIST_FAILED <why>`, `KB_RT_UNLISTED`).
const LIST: &str = r#"if kb_out=$(kb_list 2>&1); then
  printf '%s\n' "$kb_out" | while IFS= read -r kb_l; do [ -n "$kb_l" ] && printf 'KB_RT_IMAGE %s\n' "$kb_l"; done
  echo KB_RT_LISTED
else
  kb_rc=$?
  if [ "$kb_rc" = 3 ] && [ -z "$kb_out" ]; then echo KB_RT_UNLISTED
  else printf 'KB_RT_LIST_FAILED %s\n' "$(printf '%s\n' "$kb_out" | tail -n 3 | tr '\n' ' ')"
  fi
fi
"#;

/// The read-only probe of `runtime`: the node's `uname -m` (`KB_RT_ARCH`), the runtime's
/// CLI (`KB_RT_TOOL <cli>`, or `KB_RT_NO_TOOL`), its images (see [`LIST`]), its sandbox
/// image (`KB_RT_SANDBOX <ref>`) and `KB_RT_DONE` last. With `try_sudo`, a non-root login
/// asks through `sudo -n` where sudo needs no password (the pre-flight probe runs before
/// the node's privilege is known); otherwise it runs as it is (the prepare step already
/// runs with the node's privilege). Read it with [`parse_runtime_facts`].
pub fn runtime_probe_script(runtime: &Runtime, try_sudo: bool) -> String {
    let mut s = String::from("KB_SUDO=\n");
    if try_sudo {
        s.push_str(
            "[ \"$(id -u)\" != 0 ] && command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null && KB_SUDO='sudo -n'\n",
        );
    }
    s.push_str(&runtime.functions());
    s.push_str("echo \"KB_RT_ARCH $(uname -m)\"\n");
    s.push_str(
        "if [ -n \"$kb_tool\" ]; then echo \"KB_RT_TOOL $kb_tool\"; else echo KB_RT_NO_TOOL; fi\n",
    );
    s.push_str(LIST);
    s.push_str("kb_sb=$(kb_sandbox 2>/dev/null)\n[ -n \"$kb_sb\" ] && echo \"KB_RT_SANDBOX $kb_sb\"\necho KB_RT_DONE\n");
    s
}

/// What [`runtime_probe_script`] (or the listing after [`import_script`]) found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeFacts {
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
    for line in output.lines() {
        let line = line.trim_end();
        let Some(rest) = line.strip_prefix("KB_RT_") else {
            continue;
        };
        seen = true;
        let (key, value) = rest.split_once(' ').unwrap_or((rest, ""));
        match key {
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

/// The command that imports `archive` (in the current directory) into `runtime`.
fn import_command(runtime: &Runtime, archive: &ArchiveImport) -> String {
    let file = shell_quote(&archive.file);
    match runtime {
        Runtime::Containerd { socket } => format!(
            "ctr --connect-timeout 10s --address {} -n k8s.io images import {file}",
            shell_quote(socket)
        ),
        Runtime::Docker => format!("docker load -i {file}"),
        Runtime::CriO => {
            let copies: Option<Vec<String>> = archive
                .images
                .iter()
                .map(|(reference, in_archive)| {
                    let source = match in_archive {
                        InArchive::DockerTag(tag) => {
                            format!("docker-archive:{}:{tag}", archive.file)
                        }
                        InArchive::OciRefName(name) => {
                            format!("oci-archive:{}:{name}", archive.file)
                        }
                        InArchive::Unnamed => return None,
                    };
                    Some(format!(
                        "skopeo copy {} {}",
                        shell_quote(&source),
                        shell_quote(&format!("containers-storage:{reference}"))
                    ))
                })
                .collect();
            let skopeo = match copies {
                Some(copies) if !copies.is_empty() => copies.join(" && "),
                _ => "{ echo 'skopeo cannot pick these images out of the archive by name; install podman' >&2; false; }".to_string(),
            };
            format!(
                "if command -v podman >/dev/null 2>&1; then podman load -i {file}; else {skopeo}; fi"
            )
        }
        Runtime::Isulad => format!("isula load -i {file}"),
        Runtime::Unknown { .. } => {
            "{ echo 'keadm-batch cannot tell which runtime this is' >&2; false; }".to_string()
        }
    }
}

/// Imports `archives` from `dir` into `runtime`, in order, then lists the runtime's images
/// again (as [`runtime_probe_script`] does, without the sandbox). Each archive reports
/// `KB_IMPORTED <index>`; the first failure prints the CLI's output, then
/// `KB_IMPORT_FAILED <index> <status>`, and stops the script with status 3. Run it with
/// the node's privilege (the runtime's socket is root's).
pub fn import_script(dir: &str, runtime: &Runtime, archives: &[ArchiveImport]) -> String {
    let mut s = format!("cd {} || exit 1\nKB_SUDO=\n", shell_quote(dir));
    s.push_str(&runtime.functions());
    for (index, archive) in archives.iter().enumerate() {
        s.push_str(&format!(
            "if kb_out=$({} 2>&1); then printf '%s\\n' \"$kb_out\"; echo 'KB_IMPORTED {index}'; \
             else kb_rc=$?; printf '%s\\n' \"$kb_out\"; echo \"KB_IMPORT_FAILED {index} $kb_rc\"; exit 3; fi\n",
            import_command(runtime, archive)
        ));
    }
    s.push_str(LIST);
    s.push_str("echo KB_RT_DONE\n");
    s
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

    /// Runs `script` with only `bin` on PATH, after linking the basic tools the scripts
    /// and the fakes use into it: the machine's own ctr or crictl must not answer.
    fn run(bin: &Path, script: &str) -> (String, Option<i32>) {
        for tool in ["uname", "id", "sed", "head", "awk", "tail", "tr", "cat"] {
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

    #[test]
    fn runtimes_are_told_by_their_sockets() {
        let cases = [
            (
                "/run/containerd/containerd.sock",
                "containerd (/run/containerd/containerd.sock)",
            ),
            (
                "/run/k3s/containerd/containerd.sock",
                "containerd (/run/k3s/containerd/containerd.sock)",
            ),
            ("/var/run/cri-dockerd.sock", "docker (through cri-dockerd)"),
            ("/var/run/dockershim.sock", "docker (through cri-dockerd)"),
            ("/var/run/crio/crio.sock", "CRI-O"),
            ("/run/isulad.sock", "iSulad"),
            ("/run/frakti.sock", "the runtime at /run/frakti.sock"),
        ];
        for (socket, name) in cases {
            assert_eq!(Runtime::for_socket(socket).name(), name, "{socket}");
        }
        assert_eq!(
            Runtime::for_socket("/run/containerd/containerd.sock").manual_import("image-a.tar"),
            "ctr --address /run/containerd/containerd.sock -n k8s.io images import image-a.tar"
        );
        assert!(Runtime::for_socket("/x.sock").tools().is_empty());
    }

    #[test]
    fn the_scripts_are_valid_sh_for_every_runtime() {
        let archive = ArchiveImport {
            file: "image-it's.tar".into(),
            images: vec![
                (
                    "docker.io/a/b:1".into(),
                    InArchive::DockerTag("a/b:1".into()),
                ),
                ("docker.io/a/c:1".into(), InArchive::OciRefName("c".into())),
            ],
        };
        for socket in [
            "/run/containerd/containerd.sock",
            "/run/cri-dockerd.sock",
            "/run/crio/crio.sock",
            "/run/isulad.sock",
            "/run/x.sock",
        ] {
            let runtime = Runtime::for_socket(socket);
            for script in [
                runtime_probe_script(&runtime, true),
                import_script("/tmp/it's", &runtime, std::slice::from_ref(&archive)),
            ] {
                let status = Command::new("sh")
                    .args(["-n", "-c", &script])
                    .status()
                    .unwrap();
                assert!(status.success(), "{script}");
            }
        }
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
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let state = dir.path().join("images.txt");
        std::fs::write(
            &state,
            "docker.io/kubeedge/installation-package:v1.23.1\nkubeedge/installation-package:v1.22.0\n",
        )
        .unwrap();
        fake_ctr(&bin, &state);
        let socket = dir.path().join("containerd.sock");
        std::fs::write(&socket, "").unwrap();
        let runtime = Runtime::for_socket(socket.to_str().unwrap());
        let (out, code) = run(&bin, &runtime_probe_script(&runtime, false));
        assert_eq!(code, Some(0), "{out}");
        let facts = parse_runtime_facts(&out).unwrap();
        assert!(facts.done && facts.listed, "{out}");
        assert_eq!(facts.tool.as_deref(), Some("ctr"));
        assert_eq!(
            facts.images,
            [ImageRef::parse("kubeedge/installation-package:v1.23.1").unwrap()],
            "image ids are not references, and a short name is not what CRI asks for"
        );
        assert_eq!(
            facts.sandbox,
            ImageRef::parse("registry.k8s.io/pause:3.6").ok(),
            "{out}"
        );
        assert!(facts.machine.is_some());

        // The runtime is down: the CLI's words.
        std::fs::remove_file(&socket).unwrap();
        let (out, _) = run(&bin, &runtime_probe_script(&runtime, false));
        let facts = parse_runtime_facts(&out).unwrap();
        assert!(!facts.listed);
        assert!(
            facts
                .list_error
                .as_deref()
                .unwrap()
                .contains("failed to dial"),
            "{out}"
        );
    }

    #[test]
    fn without_the_cli_the_probe_says_so_and_crictl_can_still_list() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let runtime = Runtime::for_socket("/run/isulad.sock");
        let (out, _) = run(&bin, &runtime_probe_script(&runtime, false));
        let facts = parse_runtime_facts(&out).unwrap();
        assert_eq!(facts.tool, None);
        assert!(
            !facts.listed && facts.list_error.is_none() && facts.done,
            "{out}"
        );

        fake_tool(
            &bin,
            "crictl",
            "case \"$*\" in *images*) printf 'IMAGE TAG IMAGE ID SIZE\\nregistry.k8s.io/pause 3.6 6270bb605e12e 302kB\\nx <none> 1 1\\n';; *info*) echo '  \"sandboxImage\": \"registry.k8s.io/pause:3.6\",';; esac",
        );
        let runtime = Runtime::for_socket("/run/containerd/containerd.sock");
        let (out, _) = run(&bin, &runtime_probe_script(&runtime, false));
        let facts = parse_runtime_facts(&out).unwrap();
        assert_eq!(facts.tool, None);
        assert!(facts.listed, "{out}");
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
        let runtime = Runtime::for_socket(socket.to_str().unwrap());
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
        let archive = ArchiveImport {
            file: "image-x.tar".into(),
            images: vec![
                (
                    "docker.io/a/b:1".into(),
                    InArchive::DockerTag("a/b:1".into()),
                ),
                (
                    "docker.io/a/c:2".into(),
                    InArchive::OciRefName("c:2".into()),
                ),
            ],
        };
        assert_eq!(
            import_command(&runtime, &archive),
            "if command -v podman >/dev/null 2>&1; then podman load -i image-x.tar; else skopeo copy docker-archive:image-x.tar:a/b:1 containers-storage:docker.io/a/b:1 && skopeo copy oci-archive:image-x.tar:c:2 containers-storage:docker.io/a/c:2; fi"
        );
        let unnamed = ArchiveImport {
            file: "image-y.tar".into(),
            images: vec![("docker.io/a/b:1".into(), InArchive::Unnamed)],
        };
        assert!(import_command(&runtime, &unnamed).contains("install podman"));
    }
}
