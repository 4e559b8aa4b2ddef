# Which Node a node is, as the node itself says before anything runs on it (read-only):
# edgecore.yaml's hostnameOverride and nodeIP (when the file is there), the host name
# (edgecore's default Node name), and the node's addresses (`ip -o addr`, else
# `hostname -I`), the first 64. --drain and --delete-nodes write to a Node only when it
# is this node's.
# Parameters: none.
# Prints: KB_NODE_NAME and KB_NODE_IP, or KB_NO_EDGECORE_YAML; KB_HOSTNAME; a KB_ADDR line
# per address and KB_ADDRS_LISTED when it could list them; KB_IDENTITY_END last.
# Exit: 0.
# shellcheck source=lib.sh
. ./lib.sh
f=/etc/kubeedge/config/edgecore.yaml
if [ -f "$f" ]; then
  echo "KB_NODE_NAME $(kb_hostname_override)"
  echo "KB_NODE_IP $(sed -n 's/^[[:space:]]*nodeIP:[[:space:]]*//p' "$f" 2>/dev/null | head -n 1)"
else
  echo KB_NO_EDGECORE_YAML
fi
echo "KB_HOSTNAME $(uname -n)"
if command -v ip >/dev/null 2>&1 && kb_a=$(ip -o addr show 2>/dev/null); then
  printf '%s\n' "$kb_a" | awk '{ print "KB_ADDR " $4 }' | head -n 64
  echo KB_ADDRS_LISTED
elif kb_a=$(hostname -I 2>/dev/null); then
  for a in $kb_a; do echo "KB_ADDR $a"; done | head -n 64
  echo KB_ADDRS_LISTED
fi
echo KB_IDENTITY_END
