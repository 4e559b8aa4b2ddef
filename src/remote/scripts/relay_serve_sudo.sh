# The relay's serve step as root under sudo: the upload dir is root's alone, so root
# hands the node's copy of the file on stdin to the login user, who writes it into its
# home and serves it from there (relay_serve_copy.sh). Everything in the login user's
# home runs as the login user: a home is its to change, so a step there as root could be
# turned, by a symlink, into root writing anywhere. With setpriv its real, effective and
# saved ids all become the user's, and its groups.
# Parameters:
#   KB_USER      the login user
#   KB_SERVED    the node's copy, in the upload dir
#   KB_AS_LOGIN  the script the login user runs: relay_serve_copy.sh with its values
# Prints: KB_RELAY_NOT_SERVING <why> when it does not serve.
# Exit: 0.
(
# shellcheck source=lib.sh
. ./lib.sh
kb_login_user
kb_home=$(printf '%s\n' "$kb_pw" | cut -d: -f6)
kb_how=$(kb_drop_tool) || kb_no_drop
# kb_as SCRIPT ARG0 ARGS...: runs `sh -c SCRIPT ARG0 ARGS...` as the login user.
kb_as() {
  case $kb_how in
    setpriv) setpriv --reuid="$kb_uid" --regid="$kb_gid" --init-groups -- sh -c "$@" ;;
    runuser) runuser -u "$KB_USER" -- sh -c "$@" ;;
    *) su -s /bin/sh "$KB_USER" -c "$@" ;;
  esac
}
kb_as "$KB_AS_LOGIN" kb "$kb_home" < "$KB_SERVED"
) 2>/dev/null
