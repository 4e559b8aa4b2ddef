# Runs the script in KB_SCRIPT under sudo, finding out whether sudo needs a password:
# `sudo -n` first; when sudo refuses that, `sudo -S`, which reads the password line the
# control host sends first on stdin, its script reading stdin up to the marker line after
# it first (KB_SKIP_TO_MARK, skip_to_mark.sh as sent). The script is `sh -c`'s argument,
# sent once, never part of this script's text.
# Parameters:
#   KB_SCRIPT        the script
#   KB_SKIP_TO_MARK  skip_to_mark.sh, as sent
# Prints: KB_SUDO nopasswd or KB_SUDO password, before the script's own output.
# Exit: the script's, or sudo's.
if sudo -n true 2>/dev/null; then
  echo 'KB_SUDO nopasswd'; sudo -n sh -c "$KB_SCRIPT"
else
  echo 'KB_SUDO password'; sudo -S -p '' sh -c "$KB_SKIP_TO_MARK$KB_SCRIPT"
fi
