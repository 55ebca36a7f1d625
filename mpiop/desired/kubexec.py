"""Exec launch's pods: mpirun's remote agent is `kubexec.sh` (from the job's ConfigMap), which runs a command in
one of the job's pods through the Kubernetes exec API with the launcher's own token, instead of ssh.

The launcher gets kubectl from an init container of `--kubectl-image` (an image with `sh`, `cp` and `kubectl` on
its PATH: upstream's registry.k8s.io/kubectl is distroless, and Kubernetes 1.34 has no image volumes by default,
so nothing could copy out of it) into an emptyDir, its ServiceAccount's token (desired.launcher_rbac), and the
variables that point its MPI at the agent (desired.env.exec_launch_env). Workers need no sshd and no SSH key: by
default they wait (and stop at once on SIGTERM, which a bare `sleep` as PID 1 would ignore for the grace period);
a command of the user's own still wins. Everything here runs as any UID, on a read-only root filesystem.
"""

from __future__ import annotations

import copy
from typing import Any

from mpiop import names
from mpiop.api.v2beta1 import MPIJob

SCRIPT_NAME = "kubexec.sh"
AGENT_PATH = f"{names.CONFIG_MOUNT_PATH}/{SCRIPT_NAME}"
KUBECTL_VOLUME = "mpiop-kubectl"
KUBECTL_DIR = "/opt/mpiop-kubectl"
KUBECTL_PATH = f"{KUBECTL_DIR}/kubectl"
DELIVERY_CONTAINER = "mpiop-kubectl-delivery"
WORKER_WAIT_COMMAND = ["/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"]
# Seconds kubexec.sh waits for a pod to run before it execs (a launcher may start before its workers do).
POD_WAIT_SECONDS = 120
TERMINATION_LOG = "/dev/termination-log"  # the kubelet's default terminationMessagePath
# Restricted Pod Security Standard for the init container; the launcher container's own securityContext wins.
_HARDENED = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": True}

SCRIPT = r"""#!/bin/sh
# mpirun's remote agent under mpiop's exec launch: `kubexec.sh [ssh options] HOST COMMAND...` runs COMMAND in
# HOST's pod of this job through the Kubernetes exec API, as ssh would: stdin, stdout, stderr and the exit
# code pass through. HOST is a hostfile name (<pod>.<service>.<namespace>.svc...) or a bare pod name.
while [ $# -gt 0 ]; do
  case "$1" in
    -o|-p|-l|-i|-F|-E) shift; [ $# -gt 0 ] && shift ;;  # ssh options with a value: nothing to do here
    -*) shift ;;
    *) break ;;
  esac
done
if [ $# -lt 2 ]; then
  echo "kubexec.sh: usage: kubexec.sh HOST COMMAND..." >&2
  exit 255
fi
host=${1%%.*}
shift
pod=$host
container=$MPIOP_WORKER_CONTAINER
if [ "$host" = "$MPIOP_LAUNCHER_HOST" ]; then
  pod=$MPIOP_LAUNCHER_POD
  container=$MPIOP_LAUNCHER_CONTAINER
fi
kubectl() { "$MPIOP_KUBECTL" --namespace "$MPIOP_NAMESPACE" --cache-dir "$MPIOP_KUBECTL_CACHE" "$@"; }
waited=0
until [ "$(kubectl get pod "$pod" -o 'jsonpath={.status.phase}' 2>/dev/null)" = Running ]; do
  if [ "$waited" -ge "$MPIOP_POD_WAIT_SECONDS" ]; then
    echo "kubexec.sh: pod $pod is not Running after ${waited}s" >&2
    kubectl get pod "$pod" >&2
    exit 255
  fi
  sleep 1
  waited=$((waited + 1))
done
# kubectl runs in the background so that a TERM, INT or HUP sent to this agent (mpirun aborting, PRRTE or Hydra
# stopping its launch agents) reaches it, as TERM: a background command starts with INT ignored. Its stdin is
# this agent's, through fd 3: sh gives a background command /dev/null before its own `<&0` would apply.
# Spelled out, not through the kubectl function: a function in the background is a subshell, and $! would be
# that shell, which a TERM would end without reaching kubectl.
kubectl_pid=
signals=0
trap 'signals=$((signals + 1)); [ -z "$kubectl_pid" ] || kill -TERM "$kubectl_pid" 2>/dev/null' TERM INT HUP
if ( exec 3<&0 ) 2>/dev/null; then exec 3<&0; else exec 3</dev/null; fi  # a closed stdin reads as empty
"$MPIOP_KUBECTL" --namespace "$MPIOP_NAMESPACE" --cache-dir "$MPIOP_KUBECTL_CACHE" \
  exec -i "$pod" --container "$container" -- /bin/sh -c "$*" <&3 3<&- &
kubectl_pid=$!
exec 3<&-
[ "$signals" -eq 0 ] || kill -TERM "$kubectl_pid" 2>/dev/null  # a signal came before its pid was known
while :; do
  seen=$signals
  wait "$kubectl_pid"
  code=$?
  # Over 128 with a trap taken meanwhile: the signal ended the wait, not kubectl; wait for kubectl's own code.
  [ "$code" -gt 128 ] && [ "$seen" -ne "$signals" ] || break
done
trap - TERM INT HUP
# 126/127: the runtime could not start the command; 1: kubectl's own error. An image without /bin/sh says so
# only in the runtime's words, amid mpirun's: say it plainly, naming the pod, for the job's failure report.
case "$code" in
  1|126|127)
    why=$(kubectl exec "$pod" --container "$container" -- /bin/sh -c : 2>&1 </dev/null | tr '\n' ' ')
    case "$why" in
      *'"/bin/sh"'*)
        said="kubexec.sh: pod $pod cannot run /bin/sh (container $container): exec launch starts every remote"
        said="$said command with /bin/sh -c, so the image needs one"
        echo "$said; the runtime said: $why" >&2
        # Also the launcher's termination message: mpirun's help texts follow in the log, past its last lines.
        if [ -w "$MPIOP_TERMINATION_LOG" ]; then echo "$said" > "$MPIOP_TERMINATION_LOG"; fi
        exit 127 ;;
    esac ;;
esac
exit "$code"
"""


def _main_container(job: MPIJob, role: str) -> dict[str, Any]:
    replica = job.spec.launcher if role == names.LAUNCHER_ROLE else job.spec.worker
    containers = ((replica.template.get("spec") or {}).get("containers") if replica else None) or [{}]
    main: dict[str, Any] = containers[0]
    return main


def _container_name(job: MPIJob, role: str) -> str:
    return str(_main_container(job, role).get("name") or "")


def agent_env(job: MPIJob, attempt: int) -> list[dict[str, str]]:
    """What kubexec.sh reads: where kubectl is, and which pod and container each hostfile name is."""
    return [
        {"name": "MPIOP_KUBECTL", "value": KUBECTL_PATH},
        {"name": "MPIOP_KUBECTL_CACHE", "value": f"{KUBECTL_DIR}/cache"},
        {"name": "MPIOP_NAMESPACE", "value": job.metadata.namespace},
        {"name": "MPIOP_LAUNCHER_HOST", "value": names.launcher_name(job)},
        {"name": "MPIOP_LAUNCHER_POD", "value": names.launcher_name(job, attempt)},
        {"name": "MPIOP_LAUNCHER_CONTAINER", "value": _container_name(job, names.LAUNCHER_ROLE)},
        {"name": "MPIOP_WORKER_CONTAINER", "value": _container_name(job, names.WORKER_ROLE)},
        {"name": "MPIOP_POD_WAIT_SECONDS", "value": str(POD_WAIT_SECONDS)},
        {"name": "MPIOP_TERMINATION_LOG", "value": _termination_log(job)},
    ]


def _termination_log(job: MPIJob) -> str:
    return str(_main_container(job, names.LAUNCHER_ROLE).get("terminationMessagePath") or TERMINATION_LOG)


def launcher_pod(pod: dict[str, Any], job: MPIJob, kubectl_image: str) -> None:
    """Run under the job's launcher account with its token, and get kubectl before the main container starts."""
    spec = pod["spec"]
    spec["serviceAccountName"] = names.launcher_account_name(job)
    spec["automountServiceAccountToken"] = True
    spec.setdefault("volumes", []).append({"name": KUBECTL_VOLUME, "emptyDir": {}})
    main = spec["containers"][0]
    main.setdefault("volumeMounts", []).append({"name": KUBECTL_VOLUME, "mountPath": KUBECTL_DIR})
    security = {**_HARDENED, **copy.deepcopy(main.get("securityContext") or {})}
    delivery = {
        "name": DELIVERY_CONTAINER,
        "image": kubectl_image,
        "command": ["/bin/sh", "-c", f'cp "$(command -v kubectl)" {KUBECTL_PATH} && mkdir -p {KUBECTL_DIR}/cache'],
        "volumeMounts": [{"name": KUBECTL_VOLUME, "mountPath": KUBECTL_DIR}],
        "securityContext": security,
    }
    spec["initContainers"] = [delivery, *(spec.get("initContainers") or [])]


def worker_pod(pod: dict[str, Any]) -> None:
    main = pod["spec"]["containers"][0]
    if not main.get("command") and not main.get("args"):
        main["command"] = list(WORKER_WAIT_COMMAND)
