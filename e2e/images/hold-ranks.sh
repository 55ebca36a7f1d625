#!/bin/sh
# A worker's PID 1 that outlives its kubelet's SIGTERM while the ranks on it checkpoint (e2e/test_graceful_stop.py).
# An evicted worker gets SIGTERM at once, while mpiop stops the launcher; and when a container's PID 1 exits, the
# kernel kills every process in it, the ranks that sshd or `kubectl exec` started there too. So this runs its
# arguments (e.g. mpi-sshd; none: it just waits) in the background and, once TERMed, waits until no process's
# command line matches $HOLD_WHILE (default: the checkpointing scripts and the MPI daemons that report their end
# to mpirun: under exec launch, an evicted worker that went with its ranks but before its orted left mpirun
# waiting past the 25 s grace), then exits; the kubelet's terminationGracePeriodSeconds still bounds it.
pattern=${HOLD_WHILE:-'[c]heckpoint\.py|[o]rted|[h]ydra_pmi_proxy'}  # [c]: this grep's own line does not match
term=0
trap 'term=1' TERM INT
child=
if [ $# -gt 0 ]; then
  "$@" &
  child=$!
fi
while [ "$term" = 0 ] && { [ -z "$child" ] || kill -0 "$child" 2>/dev/null; }; do
  sleep 1 &
  wait $! 2>/dev/null
done
started=$(date +%s)
while grep -qaE "$pattern" /proc/[0-9]*/cmdline 2>/dev/null; do
  sleep 0.2
done
echo "hold-ranks: TERM=$term; no rank left after $(( $(date +%s) - started )) s"
[ -z "$child" ] || kill -TERM "$child" 2>/dev/null
exit 0
