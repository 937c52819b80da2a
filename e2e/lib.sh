# Helpers e2e/cluster.sh and e2e/nodes.sh share; sourced, with $dir set to
# the cluster's folder (absolute: processes are recognised by it).

# free_ports N: N distinct free ports, all held open until all are chosen
# (one at a time, the kernel may hand the same port out twice).
free_ports() {
  python3 -c 'import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))' "$1"
}

# alive NAME: the process started as NAME for this DIR still runs.
alive() {
  local pidfile="$dir/run/$1.pid" pid cmdline state
  [ -f "$pidfile" ] || return 1
  pid=$(cat "$pidfile")
  # The pid must still be ours: a reused pid belongs to another command line.
  # A process in the middle of execve (setsid becoming NAME) reads as an
  # empty command line for a moment, as a zombie does: only the zombie is
  # gone, the other is read once more.
  for _ in $(seq 1 50); do
    [ -d "/proc/$pid" ] || return 1
    cmdline=$(tr '\0' ' ' 2>/dev/null < "/proc/$pid/cmdline")
    if [ -n "$cmdline" ]; then
      case $cmdline in *"$dir"*) return 0 ;; *) return 1 ;; esac
    fi
    state=$(sed -E 's/.*\) ([A-Za-z]).*/\1/' 2>/dev/null < "/proc/$pid/stat")
    case $state in Z | X | "") return 1 ;; esac
    sleep 0.02
  done
  return 1
}
