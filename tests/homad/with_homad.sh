#!/usr/bin/env bash
# Runs a command with a homad of its own: HOMA_DAEMON names that homad's
# socket, so every libhoma runtime the command creates is in daemon mode.
#
#   with_homad.sh HOMAD_EXE COMMAND [ARGS...]
#
# Exits with the command's status; homad is stopped afterwards (also on
# failure) and must exit cleanly.
set -uo pipefail
homad=$1
shift
sock=$(mktemp -u /tmp/homad-with.XXXXXX.sock)
"$homad" --socket "$sock" &
hpid=$!
trap 'kill $hpid 2>/dev/null; wait $hpid 2>/dev/null; rm -f "$sock"' EXIT
for _ in $(seq 200); do
    [[ -S $sock ]] && break
    kill -0 $hpid 2>/dev/null || { echo "with_homad: homad did not start" >&2; exit 1; }
    sleep 0.05
done
HOMA_DAEMON=$sock "$@"
rc=$?
kill -TERM $hpid
wait $hpid
hrc=$?
trap - EXIT
rm -f "$sock"
if [[ $hrc -ne 0 ]]; then
    echo "with_homad: homad exited with status $hrc" >&2
    [[ $rc -ne 0 ]] || rc=1
fi
exit $rc
