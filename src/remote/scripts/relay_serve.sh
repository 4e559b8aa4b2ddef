# The relay's serve step on a node whose login user works in its own home (root, or
# `sudo: false`): appends the line that lets the site's nodes read this node's copy of a
# file, from the upload dir, to the login user's authorized_keys (lib.sh's kb_serve). A
# node that cannot serve prints why, and the rest of the node's script goes on.
# Parameters:
#   KB_COMMAND   the forced command that serves the copy (relay.rs's direct_command)
#   KB_COPY      empty (kb_serve's copy is for sudo nodes)
#   KB_SIZE      the copy's size in bytes (read only with KB_COPY)
#   KB_FROM      the site's addresses, comma-separated, what from= admits
#   KB_KEY       the relay key's public half, `ssh-ed25519 <base64>`
#   KB_TAG       the run's tag, the line's last field
#   KB_LIFETIME  how long the line may serve, in seconds, should nobody remove it
# Prints: KB_RELAY_NOT_SERVING <why> when it does not serve.
# Exit: 0.
(
# shellcheck source=lib.sh
. ./lib.sh
kb_home=$HOME
kb_serve
) </dev/null 2>/dev/null
