# The prepare step's check, as the login user in its home ($HOME), that the node can
# serve its copy of a file to its site (relay_serve.sh's checks): a home that can stand
# in a forced command, an authorized_keys it can write, a date that can tell a line's
# expiry.
# Parameters: none.
# Prints: KB_RELAY_NOT_SERVING <why> when it cannot serve.
# Exit: 0.
(
# shellcheck source=lib.sh
. ./lib.sh
kb_home=$HOME
kb_home_check
kb_ak_check
kb_expiry 60 "the node's date cannot tell the time of a line's expiry"
) </dev/null 2>/dev/null
