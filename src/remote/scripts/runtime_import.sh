# Imports offline image archives from the upload dir into the node's container runtime,
# in order, then lists the runtime's images again (as the runtime probe does, without
# the sandbox). Run it with the node's privilege: the runtime's socket is root's.
# Parameters:
#   KB_DIR      the upload dir, where the archives are
#   KB_RUNTIME  the runtime: containerd, docker, crio, isulad or unknown (lib.sh's
#               kb_kind_of words)
#   KB_SOCK     the runtime's socket (containerd's ctr dials it, and crictl for a
#               runtime keadm-batch cannot tell), else empty
#   $@          each archive: its file name in KB_DIR, then COUNT, then for CRI-O (used
#               when the node has skopeo but no podman) COUNT pairs SOURCE DEST for
#               `skopeo copy` (docker-archive:FILE:TAG or oci-archive:FILE:NAME, and
#               containers-storage:REF); COUNT is 0 for other runtimes, and where skopeo
#               cannot pick the images out by name
# Prints: each archive's CLI output, then KB_IMPORTED <index> (from 0); at the first
# failure, KB_IMPORT_FAILED <index> <status>; then the list (lib.sh's kb_rt_list), and
# KB_RT_DONE last.
# Exit: 0; 1 when the upload dir cannot be entered; 3 at the first archive that fails.
# shellcheck source=lib.sh
. ./lib.sh
cd "$KB_DIR" || exit 1
kb_kind=$KB_RUNTIME
kb_find_tool
# kb_import FILE COUNT [SOURCE DEST]...: imports the archive FILE with the runtime's CLI.
kb_import() {
  kb_f=$1; kb_n=$2; shift 2
  case $kb_kind in
    containerd) ctr --connect-timeout 10s --address "$KB_SOCK" -n k8s.io images import "$kb_f" ;;
    docker) docker load -i "$kb_f" ;;
    crio)
      if has podman; then podman load -i "$kb_f"
      elif [ "$kb_n" -gt 0 ]; then
        while [ "$kb_n" -gt 0 ]; do skopeo copy "$1" "$2" || return; shift 2; kb_n=$(( kb_n - 1 )); done
      else echo 'skopeo cannot pick these images out of the archive by name; install podman' >&2; false
      fi ;;
    isulad) isula load -i "$kb_f" ;;
    *) echo 'keadm-batch cannot tell which runtime this is' >&2; false ;;
  esac
}
kb_i=0
while [ "$#" -gt 1 ]; do
  if kb_out=$(kb_import "$@" 2>&1); then printf '%s\n' "$kb_out"; echo "KB_IMPORTED $kb_i"
  else kb_rc=$?; printf '%s\n' "$kb_out"; echo "KB_IMPORT_FAILED $kb_i $kb_rc"; exit 3
  fi
  shift $(( 2 + $2 * 2 ))
  kb_i=$(( kb_i + 1 ))
done
kb_rt_list ""
echo KB_RT_DONE
