"""The `mpiop` command line: run the operator and print the CRD. (The local dev control plane is a
separate tool, `python -m devcluster`, that is not part of the product.)"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from mpiop import KUBERNETES_VERSION, __version__


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mpiop",
        description="mpiop: a Kubernetes operator for MPIJobs (kubeflow.org/v2beta1).",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser("version", help="print mpiop's version and the Kubernetes version it is tested against")
    commands.add_parser("crd", help="print the MPIJob CustomResourceDefinition (YAML), as committed in crds/")

    from mpiop.run_flags import add_run_arguments

    add_run_arguments(commands.add_parser("run", help="run the operator"))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.command == "version":
        print(f"mpiop {__version__} (kubeflow.org/v2beta1; tested against Kubernetes {KUBERNETES_VERSION})")
        return 0
    if args.command == "crd":
        from mpiop.api.crd import crd_yaml

        sys.stdout.write(crd_yaml())
        return 0
    if args.command == "run":
        from mpiop.process import run_from_args

        return run_from_args(args)
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
