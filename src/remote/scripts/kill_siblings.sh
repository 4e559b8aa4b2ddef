# Run by the SSH engine on a second channel after a deadline or an abort: kills the
# process group of every other child of this connection's sshd (sshd starts each command
# in its own session, so its pid is its process group). Plain POSIX sh over /proc, so
# BusyBox nodes work too. Runs as the login user.
# Parameters: none.
# Exit: 0.
me=$$; parent=$PPID
for d in /proc/[0-9]*; do
  p=${d#/proc/}
  [ "$p" = "$me" ] && continue
  read -r st < "$d/stat" 2>/dev/null || continue
  st=${st##*) }; st=${st#* }; pp=${st%% *}; st=${st#* }; pg=${st%% *}
  [ "$pp" = "$parent" ] && [ "$pg" != "$me" ] && kill -s KILL -- "-$pg" 2>/dev/null
done
exit 0
