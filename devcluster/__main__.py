"""`python -m devcluster up|status|down`: the local real control plane, for humans and tests.

Not part of the product: this package is in neither the wheel nor the operator image.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from devcluster import background


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devcluster", description="a local real control plane (etcd + kube-apiserver + ...)"
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    up = actions.add_parser("up", help="start it in the background; prints `export KUBECONFIG=...`")
    up.add_argument("--no-scheduler", action="store_true", help="do not start kube-scheduler")
    actions.add_parser("status", help="show whether it runs, and its processes")
    actions.add_parser("down", help="stop it and every process it started")
    args = parser.parse_args(argv)
    if args.action == "up":
        return background.up(scheduler=not args.no_scheduler)
    if args.action == "status":
        return background.status()
    return background.down()


if __name__ == "__main__":
    sys.exit(main())
