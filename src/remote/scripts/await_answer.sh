# Ends the prepare step's script in the one-channel exchange: prints KB_FACTS_END once
# the node's facts are out, reads the rest of the script from stdin (the control host's
# answer: a line count, then that many lines) and runs it in this same shell, so a node
# costs one exec channel. The shell's `read` takes a pipe one byte at a time, so what
# follows the answer on stdin (the upload) is left there for the answer's own receive
# script. An answer cut short runs not at all: a half script could move files it never
# received.
# Parameters: none.
# Exit: 203 when the answer did not arrive whole; 0 for the empty answer ("stop here");
# else the answer's own.
echo KB_FACTS_END
IFS= read -r kb_n || exit 203
case $kb_n in ''|*[!0-9]*) exit 203 ;; esac
kb_answer=
while [ "$kb_n" -gt 0 ]; do
  IFS= read -r kb_l || exit 203
  kb_answer="$kb_answer$kb_l
"
  kb_n=$((kb_n - 1))
done
eval "$kb_answer"
