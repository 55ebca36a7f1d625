"""The `mpiop` command line: run the operator, print the CRD, and manage a local dev control plane."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from mpiop import __version__


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mpiop",
        description="mpiop: a Kubernetes operator for MPIJobs (kubeflow.org/v2beta1).",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser("version", help="print mpiop's version and the pinned Kubernetes version")
    commands.add_parser("crd", help="print the MPIJob CustomResourceDefinition (YAML), as committed in crds/")

    dev = commands.add_parser("dev-cluster", help="a local real control plane (etcd + kube-apiserver + ...)")
    dev_commands = dev.add_subparsers(dest="dev_command", metavar="ACTION", required=True)
    dev_up = dev_commands.add_parser("up", help="start it in the background; prints `export KUBECONFIG=...`")
    dev_up.add_argument("--no-scheduler", action="store_true", help="do not start kube-scheduler")
    dev_commands.add_parser("status", help="show whether it runs, and its processes")
    dev_commands.add_parser("down", help="stop it and every process it started")

    from mpiop.controller.options import add_run_arguments

    add_run_arguments(commands.add_parser("run", help="run the operator"))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.command == "version":
        from mpiop.devcluster.versions import KUBERNETES_VERSION

        print(f"mpiop {__version__} (kubeflow.org/v2beta1; tested against Kubernetes {KUBERNETES_VERSION})")
        return 0
    if args.command == "crd":
        from mpiop.api.crd import crd_yaml

        sys.stdout.write(crd_yaml())
        return 0
    if args.command == "dev-cluster":
        from mpiop.devcluster import background

        if args.dev_command == "up":
            return background.up(scheduler=not args.no_scheduler)
        if args.dev_command == "status":
            return background.status()
        return background.down()
    if args.command == "run":
        from mpiop.controller.options import run_from_args

        return run_from_args(args)
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
