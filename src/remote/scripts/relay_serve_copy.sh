# The login user's part of the relay's serve step under sudo, which root runs as the
# login user (relay_serve_sudo.sh) with the node's copy of the file on stdin: writes
# that copy in the login user's home and appends the line that serves it to its
# authorized_keys (lib.sh's kb_serve).
# Parameters:
#   $1           the login user's home
#   KB_COMMAND   empty (the forced command reads the copy)
#   KB_COPY      the copy's name in the home (the run's tag and the payload's sha256)
#   KB_SIZE      the copy's size in bytes
#   KB_FROM, KB_KEY, KB_TAG, KB_LIFETIME  as for relay_serve.sh
# Prints: KB_RELAY_NOT_SERVING <why> when it does not serve.
# Exit: 0.
# shellcheck source=lib.sh
. ./lib.sh
kb_home=$1
kb_serve
