//! The shell text that talks to a node's container runtime: which runtime serves the CRI
//! socket keadm join dials, the read-only probe of its images and sandbox image (for the
//! pre-flight check and for skipping imports), and the import of offline image archives.
//!
//! Everything here queries or changes only the node itself: the runtime's CLI over its
//! local socket, `containerd config dump`, `crio config`, iSulad's daemon.json. Nothing
//! asks a registry anything.

use super::SIDECAR_SUFFIX;
use crate::image_ref::ImageRef;
use crate::node_text::{MESSAGE_CHARS, one_line};
use crate::shell::shell_quote;

/// A container runtime keadm join can use, as the runtime itself says what it is (see
/// [`IDENTIFY`]), never guessed from its socket's name: a containerd listens wherever its
/// config says.
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

/// The word the probe prints for each runtime it can tell (`KB_RT_KIND`), and the names
/// that runtime gives itself, as a `case` pattern: CRI's `RuntimeName` (`crictl version`)
/// or the name of the process that holds its socket.
const KINDS: [(&str, &str); 4] = [
    ("containerd", "containerd"),
    ("docker", "docker|cri-dockerd"),
    ("crio", "cri-o|crio"),
    ("isulad", "isulad|iSulad"),
];

impl Runtime {
    /// The runtime the probe's word `kind` names, serving `socket`; `told` is how the
    /// probe learnt it (for an unknown runtime, what it asked).
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

    /// Every runtime the probe can tell, as serving `socket`, with its word.
    fn known(socket: &str) -> impl Iterator<Item = (&'static str, Runtime)> {
        KINDS
            .iter()
            .map(move |(kind, _)| (*kind, Runtime::of_kind(kind, socket, "")))
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
    /// runtime is configured with, or nothing). They run with the script's privilege,
    /// which is the run's: the runtime's socket is root's.
    fn functions(&self) -> String {
        let crictl = |socket: &str| {
            format!(
                "command -v crictl >/dev/null 2>&1 && crictl --runtime-endpoint {} info 2>/dev/null | sed -n 's/.*\"sandboxImage\": *\"\\([^\"]*\\)\".*/\\1/p' | head -n 1",
                shell_quote(&format!("unix://{socket}"))
            )
        };
        let crictl_list = |socket: &str| {
            format!(
                "command -v crictl >/dev/null 2>&1 || return 3; {}",
                listed_by(
                    &format!(
                        "crictl --runtime-endpoint {} images",
                        shell_quote(&format!("unix://{socket}"))
                    ),
                    "NR > 1 && $2 != \"<none>\" { print $1 \":\" $2 }"
                )
            )
        };
        let (list, sandbox) = match self {
            Runtime::Containerd { socket } => (
                format!(
                    "[ -n \"$kb_tool\" ] || {{ {}; return; }}\n  ctr --connect-timeout 10s --address {} -n k8s.io images ls -q",
                    crictl_list(socket),
                    shell_quote(socket)
                ),
                format!(
                    "kb_s=$({})\n  [ -n \"$kb_s\" ] || kb_s=$(containerd config dump 2>/dev/null | sed -n 's/^[[:space:]]*sandbox\\(_image\\)\\{{0,1\\}}[[:space:]]*=[[:space:]]*\"\\([^\"]*\\)\".*/\\2/p' | head -n 1)\n  printf '%s' \"$kb_s\"",
                    crictl(socket)
                ),
            ),
            Runtime::Docker => (
                "[ -n \"$kb_tool\" ] || return 3\n  docker images --format '{{.Repository}}:{{.Tag}}'".to_string(),
                "return 0".to_string(),
            ),
            Runtime::CriO => (
                "[ \"$kb_tool\" = podman ] || return 3\n  podman images --format '{{.Repository}}:{{.Tag}}'".to_string(),
                "crio config 2>/dev/null | sed -n 's/^[[:space:]]*pause_image[[:space:]]*=[[:space:]]*\"\\([^\"]*\\)\".*/\\1/p' | head -n 1".to_string(),
            ),
            Runtime::Isulad => (
                format!(
                    "[ -n \"$kb_tool\" ] || return 3\n  {}",
                    listed_by("isula images", "NR > 1 { print $1 \":\" $2 }")
                ),
                "sed -n 's/.*\"pod-sandbox-image\"[[:space:]]*:[[:space:]]*\"\\([^\"]*\\)\".*/\\1/p' /etc/isulad/daemon.json 2>/dev/null | head -n 1".to_string(),
            ),
            Runtime::Unknown { socket, .. } => (crictl_list(socket), crictl(socket)),
        };
        // The first of the runtime's CLIs on the node, in `$kb_tool`; a loop only where
        // there is a choice.
        let find_tool = match self.tools() {
            [] => String::new(),
            [tool] => format!("kb_tool=\ncommand -v {tool} >/dev/null 2>&1 && kb_tool={tool}\n"),
            tools => format!(
                "kb_tool=\nfor kb_t in {}; do command -v \"$kb_t\" >/dev/null 2>&1 && {{ kb_tool=$kb_t; break; }}; done\n",
                tools.join(" ")
            ),
        };
        let mut s =
            format!("kb_list() {{\n  {list}\n}}\nkb_sandbox() {{\n  {sandbox}\n}}\n{find_tool}");
        if let Runtime::Containerd { .. } = self {
            // containerd keeps a name as the archive wrote it, and CRI looks images up by
            // their full name: a short name (`kubeedge/x:1`) is not the image keadm asks for.
            s.push_str("echo KB_RT_EXACT\n");
        }
        s
    }
}

/// The image references in what `cli` prints as a table, picked out by the awk `program`.
/// The table is read whole before awk sees it: in a pipe the CLI's failure would be lost,
/// and an empty list said instead. A failing CLI returns 1, never the 3 that says there
/// is none.
fn listed_by(cli: &str, program: &str) -> String {
    format!("kb_table=$({cli}) || return 1; printf '%s\\n' \"$kb_table\" | awk '{program}'")
}

/// Asks the runtime at `$kb_sock` what it is, in this order: CRI's `RuntimeName`
/// (`crictl version`), containerd's own API (`ctr version`), then the name of the process
/// that holds the socket (its inodes in /proc/net/unix, the process among /proc/*/fd
/// whose name says a runtime, else the lowest pid: socket activation leaves systemd
/// holding a socket too). The first that answers decides. A runtime gets 5 s to answer on
/// its own local socket; one that holds it without answering costs that once per CLI.
/// Sets `kb_kind` to a word of [`KINDS`] or `unknown`, and `kb_told` to how it was told
/// (or, when it could not be, what was asked). Where nothing is at the socket's path no
/// CLI is asked: each would wait out its timeout on a socket that is not there.
const IDENTIFY: &str = r#"kb_kind=
kb_told=
kb_tried=
kb_try() { kb_tried="${kb_tried:+$kb_tried; }$1"; }
if [ ! -e "$kb_sock" ]; then
  kb_kind=unknown; kb_told="nothing is at $kb_sock: no runtime listens there"
elif command -v crictl >/dev/null 2>&1; then
  if kb_o=$(crictl --runtime-endpoint "unix://$kb_sock" --timeout 5s version 2>&1); then
    kb_n=$(printf '%s\n' "$kb_o" | sed -n 's/^RuntimeName:[[:space:]]*//p' | head -n 1)
    [ -n "$kb_n" ] && kb_kind=$(kb_kind_of "$kb_n") && kb_told="crictl version says RuntimeName $kb_n"
  fi
  [ -n "$kb_kind" ] || kb_try "crictl version: $(printf '%s\n' "$kb_o" | tail -n 1)"
else kb_try "crictl is not installed"
fi
if [ -z "$kb_kind" ]; then
  if ! command -v ctr >/dev/null 2>&1; then kb_try "ctr is not installed"
  elif kb_o=$(ctr --connect-timeout 5s --address "$kb_sock" version 2>&1); then
    kb_kind=containerd; kb_told="ctr version answers on it"
  else kb_try "ctr version: $(printf '%s\n' "$kb_o" | tail -n 1)"
  fi
fi
if [ -z "$kb_kind" ]; then
  kb_inos=$(awk -v p="$kb_sock" '{ n = $8; for (i = 9; i <= NF; i++) n = n " " $i } n == p { printf " %s", $7 }' /proc/net/unix 2>/dev/null)
  kb_pids=
  # ls names each directory before its entries only when given more than one argument.
  [ -n "$kb_inos" ] && kb_pids=$(ls -l /dev/null /proc/[0-9]*/fd 2>/dev/null | awk -v inos="$kb_inos " '
    /^\/proc\/[0-9]+\/fd:$/ { split($0, p, "/"); pid = p[3]; next }
    $NF ~ /^socket:\[[0-9]+\]$/ && index(inos, " " substr($NF, 9, length($NF) - 9) " ") && !seen[pid]++ { print pid }' | sort -n)
  kb_first=
  for kb_p in $kb_pids; do
    read -r kb_n < "/proc/$kb_p/comm" 2>/dev/null || continue
    [ -n "$kb_first" ] || kb_first="$kb_n (pid $kb_p)"
    kb_k=$(kb_kind_of "$kb_n")
    if [ "$kb_k" != unknown ]; then kb_kind=$kb_k; kb_told="its socket is held by $kb_n (pid $kb_p)"; break; fi
  done
  if [ -z "$kb_kind" ] && [ -n "$kb_first" ]; then kb_kind=unknown; kb_told="its socket is held by $kb_first"
  elif [ -z "$kb_kind" ]; then kb_try "no process this probe can see holds the socket"
  fi
fi
[ -n "$kb_kind" ] || { kb_kind=unknown; kb_told=$kb_tried; }
printf 'KB_RT_SOCKET %s\nKB_RT_KIND %s\nKB_RT_TOLD %s\n' "$kb_sock" "$kb_kind" "$kb_told"
"#;

/// The shell function `kb_kind_of NAME`: the word of [`KINDS`] for a runtime's own name,
/// else `unknown`.
fn kind_of_function() -> String {
    let mut s = String::from("kb_kind_of() {\n  case $1 in\n");
    for (kind, names) in KINDS {
        s.push_str(&format!("    {names}) echo {kind} ;;\n"));
    }
    s.push_str("    *) echo unknown ;;\n  esac\n}\n");
    s
}

/// Lists the runtime's images as `KB_RT_IMAGE <ref>` lines and `KB_RT_LISTED`, or says
/// why it could not (`KB_RT_LIST_FAILED <why>`, `KB_RT_UNLISTED`).
const LIST: &str = r#"if [ -n "$kb_sock" ] && [ ! -e "$kb_sock" ]; then echo KB_RT_UNLISTED
elif kb_out=$(kb_list 2>&1); then
  printf '%s\n' "$kb_out" | while IFS= read -r kb_l; do [ -n "$kb_l" ] && printf 'KB_RT_IMAGE %s\n' "$kb_l"; done
  echo KB_RT_LISTED
else
  kb_rc=$?
  if [ "$kb_rc" = 3 ] && [ -z "$kb_out" ]; then echo KB_RT_UNLISTED
  else printf 'KB_RT_LIST_FAILED %s\n' "$(printf '%s\n' "$kb_out" | tail -n 3 | tr '\n' ' ')"
  fi
fi
"#;

/// The read-only probe of the runtime at `socket` (a path, as
/// `kubeedge::preflight::runtime_socket` gives it): what runtime it is (`KB_RT_SOCKET`,
/// `KB_RT_KIND`, `KB_RT_TOLD`, see [`IDENTIFY`]), the node's `uname -m` (`KB_RT_ARCH`),
/// the runtime's CLI (`KB_RT_TOOL <cli>`, or `KB_RT_NO_TOOL`), its images (see [`LIST`]),
/// its sandbox image (`KB_RT_SANDBOX <ref>`) and `KB_RT_DONE` last. Run it with the
/// privilege the run has (the pre-flight check and the prepare step both do): a runtime's
/// socket and its processes' /proc entries are root's. Read it with
/// [`parse_runtime_facts`].
pub fn runtime_probe_script(socket: &str) -> String {
    let mut s = format!("kb_sock={}\n", shell_quote(socket));
    s.push_str(&kind_of_function());
    s.push_str(IDENTIFY);
    // A runtime without a CLI to find leaves it empty, never what the node's environment
    // held.
    s.push_str("kb_tool=\ncase $kb_kind in\n");
    for (kind, runtime) in Runtime::known(socket) {
        s.push_str(&format!("{kind})\n{};;\n", runtime.functions()));
    }
    let unknown = Runtime::Unknown {
        socket: socket.to_string(),
        why: String::new(),
    };
    s.push_str(&format!("*)\n{};;\nesac\n", unknown.functions()));
    s.push_str("echo \"KB_RT_ARCH $(uname -m)\"\n");
    s.push_str(
        "if [ -n \"$kb_tool\" ]; then echo \"KB_RT_TOOL $kb_tool\"; else echo KB_RT_NO_TOOL; fi\n",
    );
    s.push_str(LIST);
    // Nothing at the socket: no CLI is asked (each would wait out its timeout).
    s.push_str("kb_sb=\n[ -e \"$kb_sock\" ] && kb_sb=$(kb_sandbox 2>/dev/null)\n[ -n \"$kb_sb\" ] && echo \"KB_RT_SANDBOX $kb_sb\"\necho KB_RT_DONE\n");
    s
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
    let mut s = format!("cd {} || exit 1\n", shell_quote(dir));
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

/// Removes the image archives `files` (names in `dir`) and their sidecars once their
/// images are in the runtime, with the node's privilege (the upload dir is root's under
/// sudo). Only regular files are counted; each archive that is still there afterwards
/// prints `KB_RM_KEPT <name>`, and the script ends with `KB_RM_DONE <removed> <bytes>`.
/// It never fails the script: an upload dir it cannot enter prints `KB_RM_NODIR`.
pub fn remove_archives_script(dir: &str, files: &[String]) -> String {
    let names: Vec<String> = files.iter().map(|f| shell_quote(f)).collect();
    format!(
        r#"cd {dir} 2>/dev/null || {{ echo KB_RM_NODIR; exit 0; }}
kb_n=0; kb_b=0
set -- {names}
for kb_f in "$@"; do
  rm -f -- "$kb_f{SIDECAR_SUFFIX}" 2>/dev/null
  if [ ! -f "$kb_f" ]; then continue; fi
  kb_s=$(( $(wc -c < "$kb_f") ))
  rm -f -- "$kb_f" 2>/dev/null
  if [ -e "$kb_f" ]; then echo "KB_RM_KEPT $kb_f"; else kb_n=$(( kb_n + 1 )); kb_b=$(( kb_b + kb_s )); fi
done
echo "KB_RM_DONE $kb_n $kb_b"
"#,
        dir = shell_quote(dir),
        names = names.join(" ")
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
                .args(["-c", &format!("{}kb_kind_of {name}", kind_of_function())])
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
        let unknown = Runtime::of_kind("unknown", socket, "");
        for runtime in Runtime::known(socket).map(|(_, r)| r).chain([unknown]) {
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
