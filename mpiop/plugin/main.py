"""The `kubectl-mpijob` command: `kubectl mpijob status|attempts|logs|exec NAME`, from the user's kubeconfig.

Every answer is read with the user's own credentials and RBAC through mpiop's client (`mpiop.kube`); `exec` hands
over to `kubectl exec` (the exec API is a streaming protocol this client does not speak). A missing job, pod, rank
or attempt is one line on stderr and exit status 1.
"""

from __future__ import annotations

import asyncio
import codecs
import datetime as dt
import os
import re
import shutil
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO, TypeVar

import click
import yaml

from mpiop import names
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import MPIJob
from mpiop.kube.access import ConfigError
from mpiop.kube.client import CONFIGMAPS, MPIJOBS, PODS, ApiError, KubeClient
from mpiop.plugin import views
from mpiop.plugin.hostfile import RankError, hosts, pod_of_rank
from mpiop.printable import printable

T = TypeVar("T")
DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"
_POD_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")  # a DNS-1123 subdomain


@dataclass
class Target:
    """Where the command points: kubeconfig, context and namespace (the context's, else `default`)."""

    kubeconfig: str | None
    context: str | None
    namespace: str


def kubeconfig_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of the kubeconfig's (current) context, as kubectl picks it; `default` without one."""
    path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or str(Path("~/.kube/config"))
    try:
        config = yaml.safe_load(Path(path).expanduser().read_text()) or {}
    except (OSError, yaml.YAMLError):
        return "default"
    name = context or config.get("current-context")
    for entry in config.get("contexts") or []:
        if entry.get("name") == name:
            return str((entry.get("context") or {}).get("namespace") or "default")
    return "default"


def _run(target: Target, work: Callable[[KubeClient], Awaitable[T]]) -> T:
    async def main() -> T:
        try:
            kube = await KubeClient.connect(target.kubeconfig, context=target.context)
        except ConfigError as error:
            raise click.ClickException(f"cannot use the kubeconfig: {error}") from error
        try:
            return await work(kube)
        except ApiError as error:
            raise click.ClickException(error.message.splitlines()[0] if error.message else str(error)) from error
        finally:
            await kube.close()

    return asyncio.run(main())


async def read_job(kube: KubeClient, namespace: str, name: str) -> JSON:
    job = await kube.get_or_none(MPIJOBS, namespace, name)
    if job is None:
        raise click.ClickException(f'mpijob "{name}" not found in namespace "{namespace}"')
    return job


async def attempt_config_maps(kube: KubeClient, job: MPIJob) -> list[JSON]:
    listed = await kube.list(CONFIGMAPS, job.metadata.namespace,
                             labelSelector=f"{names.JOB_NAME_LABEL}={job.metadata.name},{names.ATTEMPT_LABEL}")
    items: list[JSON] = listed["items"]
    return items


async def job_pods(kube: KubeClient, job: MPIJob) -> list[JSON]:
    listed = await kube.list(PODS, job.metadata.namespace, labelSelector=f"{names.JOB_NAME_LABEL}={job.metadata.name}")
    items: list[JSON] = listed["items"]
    return items


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


# -- resolving a rank, worker or launcher to a pod ----------------------------------------------------------------
@dataclass(frozen=True)
class Which:
    rank: int | None
    worker: int | None
    launcher: bool

    def check(self) -> None:
        if sum((self.rank is not None, self.worker is not None, self.launcher)) > 1:
            raise click.UsageError("give one of --rank, --worker and --launcher")


async def pod_name(kube: KubeClient, job: MPIJob, which: Which, attempt: int) -> str:
    """The pod of `which` in `attempt` (the launcher when nothing is given)."""
    if which.worker is not None:
        if not 0 <= which.worker < job.spec.worker_replicas:
            raise click.ClickException(f"worker {which.worker} is not in mpijob {job.metadata.name} "
                                       f"(workers 0-{job.spec.worker_replicas - 1})")
        return names.worker_name(job, which.worker)
    if which.rank is None:
        return names.launcher_name(job, attempt)
    config = await kube.get_or_none(CONFIGMAPS, job.metadata.namespace, names.config_map_name(job))
    hostfile = ((config or {}).get("data") or {}).get(names.HOSTFILE_NAME)
    if hostfile is None:
        raise click.ClickException(f"mpijob {job.metadata.name} has no hostfile yet "
                                   f"(ConfigMap {names.config_map_name(job)}): no rank is placed")
    try:
        pod = pod_of_rank(hosts(hostfile, names.launcher_name(job), names.launcher_name(job, attempt)), which.rank).pod
    except RankError as error:
        raise click.ClickException(f"mpijob {job.metadata.name}: {error}") from error
    if not _POD_NAME.fullmatch(pod):  # the hostfile is the namespace's to write: it may name anything
        raise click.ClickException(f"mpijob {job.metadata.name}: the hostfile's host for rank {which.rank} is "
                                   f'"{printable(pod[:100])}", not a pod name')
    return pod


def check_ours(job: MPIJob, pod: JSON, which: Which) -> None:
    """A pod found by --rank (through the hostfile ConfigMap, which the job's namespace may write) or --worker is
    used only if the job controls it (its ownerReference's uid) and it carries the job's labels: else an exec or a
    log meant for the job would reach any pod of the namespace."""
    if which.rank is None and which.worker is None:
        return
    labels = (pod.get("metadata") or {}).get("labels") or {}
    ours = labels.get(names.JOB_NAME_LABEL) == job.metadata.name and labels.get(
        names.OPERATOR_NAME_LABEL) == names.OPERATOR_NAME
    if not (names.controlled_by(job, pod) and ours):
        asked = f"rank {which.rank}" if which.rank is not None else f"worker {which.worker}"
        raise click.ClickException(f'pod "{printable(pod["metadata"]["name"])}" ({asked}) is not a pod of mpijob '
                                   f"{job.metadata.name}: it is not controlled by the job or lacks its labels")


def default_container(pod: JSON) -> str:
    """As kubectl picks it: the default-container annotation, else the first container."""
    annotated = ((pod.get("metadata") or {}).get("annotations") or {}).get(DEFAULT_CONTAINER_ANNOTATION)
    return str(annotated or pod["spec"]["containers"][0]["name"])


def _attempt(job: MPIJob, asked: int | None) -> int:
    current = views.attempt_of(job)
    if asked is None:
        return current
    if not 0 <= asked <= current:
        raise click.ClickException(f"mpijob {job.metadata.name} has no attempt {asked} (attempts 0-{current})")
    return asked


# -- the command line ------------------------------------------------------------------------------------------------
def _target(ctx: click.Context, namespace: str | None, kubeconfig: str | None, context: str | None) -> Target:
    parent: dict[str, str | None] = ctx.find_root().params
    kubeconfig = kubeconfig or parent.get("kubeconfig")
    context = context or parent.get("context")
    namespace = namespace or parent.get("namespace") or kubeconfig_namespace(kubeconfig, context)
    return Target(kubeconfig, context, namespace)


F = TypeVar("F", bound=Callable[..., Any])


def connection_options(command: F) -> F:
    """-n/--namespace, --kubeconfig and --context, on the group and on each verb, as kubectl takes them."""
    for option in reversed([
        click.option("-n", "--namespace", help="The job's namespace (default: the kubeconfig context's)."),
        click.option("--kubeconfig", help="The kubeconfig to use (default: $KUBECONFIG, else ~/.kube/config)."),
        click.option("--context", help="The kubeconfig context to use (default: its current context)."),
    ]):
        command = option(command)
    return command


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@connection_options
def main(namespace: str | None, kubeconfig: str | None, context: str | None) -> None:
    """kubectl mpijob: an MPIJob's status, attempts, any rank's logs and a shell in its pods, read with your
    kubeconfig and RBAC."""


@main.command()
@click.argument("name")
@connection_options
@click.pass_context
def status(ctx: click.Context, name: str, namespace: str | None, kubeconfig: str | None, context: str | None) -> None:
    """The job's state, milestones, attempts, excluded nodes, reported progress and its last failure."""
    target = _target(ctx, namespace, kubeconfig, context)

    async def read(kube: KubeClient) -> str:
        raw = await read_job(kube, target.namespace, name)
        config_maps = await attempt_config_maps(kube, MPIJob.model_validate(raw))
        return views.status_text(raw, config_maps, _now())

    click.echo(_run(target, read), nl=False)


@main.command()
@click.argument("name")
@connection_options
@click.pass_context
def attempts(ctx: click.Context, name: str, namespace: str | None, kubeconfig: str | None,
             context: str | None) -> None:
    """A table of the job's attempts: state, launcher pod (kept for its log), what failed, the logs' ConfigMap."""
    target = _target(ctx, namespace, kubeconfig, context)

    async def read(kube: KubeClient) -> str:
        raw = await read_job(kube, target.namespace, name)
        job = MPIJob.model_validate(raw)
        config_maps, pods = await asyncio.gather(attempt_config_maps(kube, job), job_pods(kube, job))
        return views.attempts_table(raw, config_maps, pods, _now())

    click.echo(_run(target, read), nl=False)


def which_options(command: F) -> F:
    for option in reversed([
        click.option("--rank", type=click.IntRange(min=0), help="The pod that MPI rank N runs on (the hostfile's "
                     "hosts in order, `slots` ranks each)."),
        click.option("--worker", type=click.IntRange(min=0), help="Worker pod I (<job>-worker-I)."),
        click.option("--launcher", is_flag=True, help="The launcher pod (the default): mpirun's output."),
        click.option("-c", "--container", help="The container (default: the pod's default container)."),
    ]):
        command = option(command)
    return command


@main.command()
@click.argument("name")
@which_options
@click.option("--attempt", type=click.IntRange(min=0), help="Attempt K (default: the current one). When its pods "
              "are gone, the log saved in ConfigMap <job>-attempt-K.")
@click.option("-f", "--follow", is_flag=True, help="Stream the log while the pod runs.")
@connection_options
@click.pass_context
def logs(ctx: click.Context, name: str, rank: int | None, worker: int | None, launcher: bool, container: str | None,
         attempt: int | None, follow: bool, namespace: str | None, kubeconfig: str | None,
         context: str | None) -> None:
    """The log of the launcher, a worker or the pod of an MPI rank, in this attempt or a past one."""
    which = Which(rank, worker, launcher)
    which.check()
    target = _target(ctx, namespace, kubeconfig, context)
    _run(target, lambda kube: _print_log(kube, target.namespace, name, which, container, attempt, follow))


async def _print_log(kube: KubeClient, namespace: str, name: str, which: Which, container: str | None,
                     asked: int | None, follow: bool) -> None:
    job = MPIJob.model_validate(await read_job(kube, namespace, name))
    attempt = _attempt(job, asked)
    pod_of = await pod_name(kube, job, which, attempt)
    pod = await kube.get_or_none(PODS, namespace, pod_of)
    if pod is not None:
        check_ours(job, pod, which)
    if pod is not None and views.pod_attempt(pod) in (attempt, None):
        await _pod_log(kube, namespace, pod, container, follow)
        return
    # The pod is gone (or not made yet): its log as the attempt's ConfigMap saved it, when the attempt failed.
    saved = await kube.get_or_none(CONFIGMAPS, namespace, names.attempt_config_map_name(job, attempt))
    current = attempt == views.attempt_of(job)
    if saved is None and not current:
        raise click.ClickException(f"the pods of attempt {attempt} are gone, and so is ConfigMap "
                                   f"{names.attempt_config_map_name(job, attempt)} (mpiop keeps the last attempts')")
    try:
        if saved is None:
            raise views.SavedLogMissingError(pod_of)
        key, text = views.saved_log(saved, pod_of, container)
    except views.SavedLogMissingError as error:
        if current:  # why it is gone, and where its ranks' output is: the launcher's log
            launcher = await kube.get_or_none(PODS, namespace, names.launcher_name(job, attempt))
            kept = launcher is not None and views.pod_attempt(launcher) in (attempt, None)
            raise click.ClickException(views.missing_pod(job, pod_of, attempt, launcher_kept=kept,
                                                         saved=saved)) from error
        raise click.ClickException(str(error)) from error
    click.echo(f"# {pod_of}, attempt {attempt}: from ConfigMap {saved['metadata']['name']} key {key} "
               "(the pod is gone; its last lines)", err=True)
    out = LogOutput()
    out.write((text if text.endswith("\n") else text + "\n").encode(), final=True)


async def _pod_log(kube: KubeClient, namespace: str, pod: JSON, container: str | None, follow: bool) -> None:
    name = pod["metadata"]["name"]
    query = {"container": container or default_container(pod)}
    path = PODS.path(namespace, name, "log")
    out = LogOutput()
    if not follow:
        out.write(await kube.request_raw("GET", path, query=query, accept="*/*"), final=True)
        return
    async for chunk in kube.stream(path, {**query, "follow": "true"}):
        out.write(chunk)
    out.write(b"", final=True)


class LogOutput:
    """Where a log goes: to a file or a pipe its bytes as they are (as `kubectl logs` writes them); to a terminal
    each control and format character escaped, line breaks and tabs kept (`printable`): a tenant's pods wrote it,
    and a terminal obeys the escape sequences in it."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self.escape = self.out.isatty()
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a chunk may end inside a character

    def write(self, chunk: bytes, final: bool = False) -> None:
        if self.escape:
            self.out.write(printable(self._decoder.decode(chunk, final), newlines=True))
        else:
            self.out.buffer.write(chunk)
        self.out.flush()


@main.command(name="exec", context_settings={"ignore_unknown_options": True})
@click.argument("name")
@which_options
@click.option("-i", "--stdin", is_flag=True, help="Pass stdin to the command.")
@click.option("-t", "--tty", is_flag=True, help="Stdin is a TTY.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@connection_options
@click.pass_context
def exec_(ctx: click.Context, name: str, rank: int | None, worker: int | None, launcher: bool, container: str | None,
          stdin: bool, tty: bool, command: tuple[str, ...], namespace: str | None, kubeconfig: str | None,
          context: str | None) -> None:
    """Run COMMAND in the pod of a rank, a worker or the launcher (current attempt): kubectl mpijob exec NAME
    --rank 3 -- hostname."""
    which = Which(rank, worker, launcher)
    which.check()
    target = _target(ctx, namespace, kubeconfig, context)

    async def resolve(kube: KubeClient) -> tuple[str, str]:
        job = MPIJob.model_validate(await read_job(kube, target.namespace, name))
        pod_of = await pod_name(kube, job, which, views.attempt_of(job))
        pod = await kube.get_or_none(PODS, target.namespace, pod_of)
        if pod is None:
            raise click.ClickException(f'pod "{pod_of}" of mpijob {name} not found in namespace "{target.namespace}"')
        check_ours(job, pod, which)
        return pod_of, container or default_container(pod)

    pod_of, chosen = _run(target, resolve)
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise click.ClickException("kubectl is not on PATH: exec runs `kubectl exec`")
    argv = [kubectl, *(["--kubeconfig", target.kubeconfig] if target.kubeconfig else []),
            *(["--context", target.context] if target.context else []), "exec", "-n", target.namespace, pod_of,
            "-c", chosen, *(["-i"] if stdin else []), *(["-t"] if tty else []), "--", *command]
    sys.stdout.flush()
    os.execv(kubectl, argv)


def run() -> None:
    """The `kubectl-mpijob` executable: kubectl runs it for `kubectl mpijob ...`, which its usage lines say."""
    main(prog_name="kubectl mpijob")


if __name__ == "__main__":
    run()
