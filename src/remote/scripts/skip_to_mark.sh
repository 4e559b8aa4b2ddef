# Put before a script that `sudo -S` runs: reads stdin up to and including the line
# KB_STDIN_MARK, which the control host sends after the sudo password. That is one line
# when sudo read the password, two when it did not prompt (cached credentials, a NOPASSWD
# rule for sh but not for true), so the password never reaches the script's stdin, nor
# keadm's.
# Parameters: none.
# Exit: 124, with none of the script run, when the input is out of step; else the
# script's own.
IFS= read -r kb_l || exit 124
[ "$kb_l" = KB_STDIN_MARK ] || { IFS= read -r kb_l && [ "$kb_l" = KB_STDIN_MARK ]; } || { echo 'keadm-batch: the input after the sudo password was out of step' >&2; exit 124; }
