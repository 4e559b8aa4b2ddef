# The prepare step's check, as root under sudo, that root can run the serve step's part
# in the login user's home as that user (relay_serve_sudo.sh): the login user is known,
# and setpriv, runuser or su runs a command as it.
# Parameters:
#   KB_USER  the login user
# Prints: KB_RELAY_NOT_SERVING <why> when it cannot serve.
# Exit: 0.
(
# shellcheck source=lib.sh
. ./lib.sh
kb_login_user
kb_drop_tool >/dev/null || kb_no_drop
) </dev/null 2>/dev/null
