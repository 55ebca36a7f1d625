"""`mpiop run`: flags, and the process around the manager (client, logging, signals)."""

from __future__ import annotations

import argparse
import asyncio
import signal

import structlog

from mpiop import logging as mpiop_logging
from mpiop import metrics
from mpiop.controller.manager import Manager, ManagerConfig
from mpiop.kube.client import KubeClient

log = structlog.get_logger(__name__)


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    parser.add_argument("--namespace", default=None,
                        help="watch one namespace (default: all namespaces)")
    parser.add_argument("--workers", type=int, default=8, help="reconcile workers (default 8)")
    parser.add_argument("--kube-api-qps", type=float, default=50.0, help="client-side QPS to the apiserver")
    parser.add_argument("--kube-api-burst", type=int, default=100, help="client-side burst to the apiserver")
    parser.add_argument("--log-format", choices=("json", "console"), default="console")
    parser.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    parser.add_argument("--cluster-domain", default="",
                        help="append this domain to hostfile names, e.g. cluster.local (default: none)")
    parser.add_argument("--resync-seconds", type=float, default=300.0, help="re-reconcile every job this often")


def config_from_args(args: argparse.Namespace) -> ManagerConfig:
    if args.workers < 1:
        raise SystemExit("--workers must be at least 1")
    return ManagerConfig(namespace=args.namespace or None, workers=args.workers, cluster_domain=args.cluster_domain,
                         resync_seconds=args.resync_seconds)


async def run(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    client = await KubeClient.connect(args.kubeconfig, qps=args.kube_api_qps, burst=args.kube_api_burst,
                                      observer=metrics.observe_request)
    try:
        manager = Manager(client, config_from_args(args))
        log.info("mpiop starting", namespace=args.namespace or "(all)", workers=args.workers)
        await manager.run(stop)
    finally:
        await client.close()
    log.info("mpiop stopped")
    return 0


def run_from_args(args: argparse.Namespace) -> int:
    mpiop_logging.configure(args.log_format, args.log_level)
    return asyncio.run(run(args))
