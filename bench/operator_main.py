"""`python -m bench.operator_main [mpiop run flags...]`: `mpiop run`, its Prometheus metrics served either way.

The bench compares this checkout's operator with older ones (`PYTHONPATH` from another worktree), and those
may not serve /metrics themselves: there this takes `--metrics-addr=HOST:PORT` out of the flags (and
`--health-addr=...`, which they do not know either) and serves the default registry on that address first.
Either way the unchanged `mpiop run` entry point runs.
"""

from __future__ import annotations

import argparse
import sys

from prometheus_client import start_http_server

from mpiop.cli import main as mpiop_main
from mpiop.run_flags import add_run_arguments


def _run_flags() -> set[str]:
    parser = argparse.ArgumentParser(add_help=False)
    add_run_arguments(parser)
    return {flag for action in parser._actions for flag in action.option_strings}


def main() -> int:
    args, flags = sys.argv[1:], _run_flags()
    known = [a for a in args if not a.startswith("--") or a.split("=", 1)[0] in flags]
    if "--metrics-addr" not in flags:
        (address,) = (a.split("=", 1)[1] for a in args if a.startswith("--metrics-addr="))
        host, _, port = address.rpartition(":")
        start_http_server(int(port), addr=host)
    return mpiop_main(["run", *known])


if __name__ == "__main__":
    sys.exit(main())
