"""`mpiop run`: the process around the manager (clients, leader election, probes, signals); its flags: run_flags.py.

SIGTERM/SIGINT: stop taking work, finish in-flight reconciles, release the lease, exit 0. A leader that
cannot renew its lease within the renew deadline cancels its workers at once and exits 1, like client-go's
OnStoppedLeading, so the Pod restarts as a clean standby. A background task that dies (an informer, a
worker, the elector: see controller/supervisor.py) is logged, fails /healthz, and the process stops the
same orderly way and exits 1, so Kubernetes restarts it.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import signal

import uvloop

from mpiop import logging as mpiop_logging
from mpiop import metrics, process_resources, status_serving
from mpiop.controller.manager import Manager
from mpiop.controller.supervisor import Supervisor
from mpiop.desired.status_report import StatusEndpoint
from mpiop.kube.client import KubeClient
from mpiop.leader import LeaderElector, LeadershipLostError
from mpiop.run_flags import config_from_args, election_from_args, own_namespace
from mpiop.server import Checks, Servers, health_app, metrics_app, request_errors
from mpiop.serving.status_endpoint import OwnPod

__all__ = ["health_checks", "run", "run_from_args", "supervise"]

log = mpiop_logging.get_logger(__name__)

async def supervise(manager: Manager, elector: LeaderElector | None, stop: asyncio.Event) -> int:
    """Run the manager (behind the elector, if any) until `stop`; the process's exit code.

    1 when a background task died (the manager's supervisor stopped it) or the lease was lost.
    """
    supervisor = manager.supervisor
    supervisor.stop_on_failure(stop)
    if elector is None:
        try:
            await manager.run(stop)
        except Exception as error:  # the manager itself is supervised too
            supervisor.fail("manager", error)
        return 1 if supervisor.failures else 0
    release = asyncio.Event()  # set once the manager has finished: then the elector gives the lease up
    election = asyncio.create_task(elector.run(release), name="leader-election")
    work = asyncio.create_task(manager.run(stop, leading=elector.leading), name="manager")
    try:
        await asyncio.wait([election, work], return_when=asyncio.FIRST_COMPLETED)
        if work.done():
            release.set()
            await election
            if (crashed := work.exception()) is not None:  # a crashed manager still released the lease
                supervisor.fail("manager", crashed)
            return 1 if supervisor.failures else 0
        # The election ended on its own: the lease is lost (or the elector crashed). Stop writing at once.
        work.cancel()
        await asyncio.gather(work, return_exceptions=True)
        ended = election.exception()
        if ended is not None and not isinstance(ended, LeadershipLostError):
            supervisor.fail("leader-election", ended)
        log.error("leader election lost: stopped reconciling, exiting", error=str(ended))
        return 1
    finally:
        for task in (election, work):
            task.cancel()
        await asyncio.gather(election, work, return_exceptions=True)


def health_checks(manager: Manager, elector: LeaderElector | None) -> Checks:
    tasks = manager.supervisor.healthz

    def synced() -> str | None:
        return None if manager.synced.is_set() else "informer caches not synced yet"

    def standing() -> str | None:
        if elector is None or elector.healthy():
            return None
        return "no successful look at the lease within the lease duration"

    def renewing() -> str | None:
        if elector is None or not elector.leading.is_set() or elector.is_leader():
            return None
        return "leading, but the lease was not renewed within the renew deadline"

    return Checks(healthz={"ping": lambda: None, "background-tasks": tasks, "leader-election": renewing},
                  readyz={"informers": synced, "background-tasks": tasks, "leader-election": standing})


async def run(args: argparse.Namespace) -> int:
    process_resources.set_up()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    election = election_from_args(args)
    config = config_from_args(args)
    serving = status_serving.ServingConfig.from_args(args)
    # Its own client, outside the QPS bucket: a backlog of reconcile writes must never delay a renewal.
    lease_client = None if election is None else await KubeClient.connect(
        args.kubeconfig, qps=0, burst=10, observer=metrics.observe_request, field_manager=args.field_manager)
    elector = None if election is None or lease_client is None else LeaderElector(
        lease_client, election, on_change=lambda leading: metrics.IS_LEADER.set(1 if leading else 0))
    client = await KubeClient.connect(args.kubeconfig, qps=args.kube_api_qps, burst=args.kube_api_burst,
                                      observer=metrics.observe_request, field_manager=args.field_manager,
                                      write_guard=elector.guard_write if elector is not None else None)
    servers = Servers()
    trimmer = asyncio.create_task(process_resources.trim_every(garbage=request_errors), name="malloc-trim")
    try:
        # Unguarded (a standby may not write through `client`): the CA's Secret, made by whoever starts first.
        certificates = await status_serving.status_certificates(serving, lease_client or client, own_namespace())
        if certificates is not None:
            config.settings = dataclasses.replace(config.settings,
                                                  status_endpoint=StatusEndpoint(serving.url, certificates.ca_pem))
        manager = Manager(client, config, Supervisor())
        await manager.preflight()
        metrics.IS_LEADER.set(0 if elector is not None else 1)
        await servers.start(health_app(health_checks(manager, elector)), args.health_addr, "health probes",
                            limits=serving.limits)
        await servers.start(metrics_app(), args.metrics_addr, "metrics", limits=serving.limits)
        # Unguarded (the standby may not write through `client`): this one label, on the process's own pod.
        own_pod = None if certificates is None else OwnPod.from_env()
        labelled = None if own_pod is None else (own_pod, lease_client or client)
        if labelled is not None:
            await labelled[0].mark(labelled[1], serving=False)
        status_server = None if certificates is None else asyncio.create_task(status_serving.serve_status(
            servers, manager, client, serving, certificates, elector.leading if elector is not None else None,
            labelled, own_namespace()), name="status-endpoint")
        if status_server is not None:  # a port it cannot bind stops the process, as a dead informer does
            status_server.add_done_callback(
                lambda task: None if task.cancelled() or task.exception() is None
                else manager.supervisor.fail("status-endpoint", task.exception()))
        log.info("mpiop starting", namespace=args.namespace or "(all)", workers=args.workers,
                 gang_scheduling=args.gang_scheduling or "off", default_launch=args.default_launch,
                 leader_election=election.identity if election else "off", field_manager=args.field_manager)
        code = await supervise(manager, elector, stop)
        if status_server is not None:
            status_server.cancel()
            await asyncio.gather(status_server, return_exceptions=True)
        if labelled is not None:  # no post is routed to a process that stopped serving (a restarting container)
            await labelled[0].mark(labelled[1], serving=False)
    finally:
        trimmer.cancel()
        await servers.stop()
        await client.close()
        if lease_client is not None:
            await lease_client.close()
    log.info("mpiop stopped", exit_code=code)
    return code


def run_from_args(args: argparse.Namespace) -> int:
    mpiop_logging.configure(args.log_format, args.log_level)
    # uvloop (libuv): each request, watch chunk and timer costs the operator less CPU than asyncio's own loop.
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(run(args))
