"""`python -m bench.operator_main PORT [mpiop run flags...]`: `mpiop run`, with its Prometheus metrics on PORT.

The benchmark needs the operator's own request counters from a separate process (its own RSS and CPU).
When `mpiop run` serves /metrics itself (`--metrics-addr`), this passes 127.0.0.1:PORT and turns the
probes off (no fixed ports to collide with); otherwise it serves the default registry on PORT first.
Either way the unchanged `mpiop run` entry point runs.
"""

from __future__ import annotations

import argparse
import sys

from prometheus_client import start_http_server

from mpiop.cli import main as mpiop_main
from mpiop.process import add_run_arguments


def _run_flags() -> set[str]:
    parser = argparse.ArgumentParser(add_help=False)
    add_run_arguments(parser)
    return {flag for action in parser._actions for flag in action.option_strings}


def main() -> int:
    port, args = int(sys.argv[1]), sys.argv[2:]
    flags = _run_flags()
    if "--metrics-addr" in flags:
        args = ["--metrics-addr", f"127.0.0.1:{port}", *args]
        if "--health-addr" in flags:
            args = ["--health-addr", "0", *args]
    else:
        start_http_server(port, addr="127.0.0.1")
    return mpiop_main(["run", *args])


if __name__ == "__main__":
    sys.exit(main())
