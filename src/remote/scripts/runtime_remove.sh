# Removes image archives from the upload dir, and their sidecars, once their images are
# in the runtime, with the node's privilege (the upload dir is root's under sudo). Only
# regular files are counted. It never fails the script.
# Parameters:
#   KB_DIR      the upload dir
#   KB_SIDECAR  the suffix of an archive's sidecar file
#   $@          the archives' names in KB_DIR
# Prints: KB_RM_KEPT <name> for each archive still there afterwards, then
# KB_RM_DONE <removed> <bytes>; KB_RM_NODIR alone when the upload dir cannot be entered.
# Exit: 0.
cd "$KB_DIR" 2>/dev/null || { echo KB_RM_NODIR; exit 0; }
kb_n=0; kb_b=0
for kb_f in "$@"; do
  rm -f -- "$kb_f$KB_SIDECAR" 2>/dev/null
  if [ ! -f "$kb_f" ]; then continue; fi
  kb_s=$(( $(wc -c < "$kb_f") ))
  rm -f -- "$kb_f" 2>/dev/null
  if [ -e "$kb_f" ]; then echo "KB_RM_KEPT $kb_f"; else kb_n=$(( kb_n + 1 )); kb_b=$(( kb_b + kb_s )); fi
done
echo "KB_RM_DONE $kb_n $kb_b"
