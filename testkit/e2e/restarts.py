"""Jobs whose first attempt fails on purpose and whose next attempt runs, on the real node: the launcher's own pod
name tells it which attempt it is. Shared by the evidence scenarios and the kubectl plugin's."""

from __future__ import annotations

from devcluster.pi_job import SAMPLES

POD_NAME = [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
MPIRUN = "mpi-wait-hosts mpirun.openmpi --allow-run-as-root -n 4"
PI = "/usr/local/bin/pi-openmpi"

# 5 s in, rank 3 sends SIGQUIT to its worker's sshd (PID 1; SIGTERM would make it exit 0, a Succeeded pod), so
# the worker container fails and takes the ranks and the Open MPI daemon with it. mpirun's exit is held, so that
# mpiop sees the worker fail first. (`$$` is the kubelet's escape for `$`.)
WORKER_DIES = ('if [ "$OMPI_COMM_WORLD_RANK" = 3 ]; then (sleep 5; kill -QUIT 1) & fi; '
               f'exec {PI} 2000000 30')


def first_attempt_runs(launcher_pod: str, ranks: str, hold_exit: bool = False, then: str = "") -> str:
    """The launcher's script: attempt 1 (the launcher's own pod name tells) runs `ranks` under mpirun, holding
    mpirun's exit 3 s if asked, as a wrapper script's clean-up would; every later attempt runs `then` under mpirun
    (by default the pi job)."""
    run = f"{MPIRUN} sh -c '{ranks}'"
    first = f"{run}; code=$$?; sleep 3; exit $$code" if hold_exit else f"exec {run}"
    later = f"{MPIRUN} sh -c '{then}'" if then else f"{MPIRUN} {PI} {SAMPLES}"
    return f'if [ "$POD_NAME" = {launcher_pod} ]; then {first}; fi; exec {later}'
