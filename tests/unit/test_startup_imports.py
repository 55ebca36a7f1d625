"""What `import mpiop.process` (the start of every `mpiop run`) loads: none of the modules the process does not use,
or only uses late (a restarted mpiop is not ready until its imports are done). Asserted by name, never by time:
the figures are printed (`pytest -s`), and `python -m bench.startup` times exec to ready and first reconcile."""

from __future__ import annotations

import json
import re
import subprocess
import sys

# Each: why the process must not import it at its start.
NOT_AT_START = {
    "rich": "structlog's pretty tracebacks, hidden from structlog (mpiop.logging): ~70 ms with pygments",
    "pygments": "rich's syntax highlighting",
    "yaml": "a kubeconfig's parser, imported when one is read (mpiop.kube.access); in a cluster none is",
    "kubernetes_asyncio": "only for a kubeconfig user with an exec plugin or auth-provider (mpiop.kube.access)",
    "mpiop.plugin": "the kubectl plugin, a client of its own",
    "mpiop.api.crd": "`mpiop crd`: the CRD generated from the models",
    "mpiop.api.podtemplate": "the CRD's pod template schema",
    "mpiop.progress_client": "what a job's pods post with, not the operator",
    "click": "the plugin's command line",
    "devcluster": "dev tooling",
    "testkit": "dev tooling",
    "bench": "dev tooling",
    "pytest": "dev tooling",
    "hypothesis": "dev tooling",
}

SCRIPT = """
import json, sys
import mpiop.process
print(json.dumps({name: ("absent" if name not in sys.modules else "hidden" if sys.modules[name] is None else "loaded")
                  for name in sys.argv[1:]}))
"""


def imported_at_start(*names: str) -> dict[str, str]:
    """For each name: loaded, hidden (None in sys.modules) or absent, after `import mpiop.process` in a fresh
    interpreter whose stderr is a pipe, as in a cluster (not a terminal)."""
    done = subprocess.run([sys.executable, "-c", SCRIPT, *names], check=True, capture_output=True, text=True)
    result: dict[str, str] = json.loads(done.stdout)
    return result


def import_times(top: int = 15) -> list[tuple[int, str]]:
    """`python -X importtime -c "import mpiop.process"`: the `top` largest cumulative entries (us, module)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", "import mpiop.process"], check=True,
                          capture_output=True, text=True)
    entries = [(int(m[1]), m[2].strip()) for m in re.finditer(r"import time:\s+\d+ \|\s+(\d+) \|(.*)", done.stderr)]
    return sorted(entries, reverse=True)[:top]


def test_the_process_imports_none_of_what_it_does_not_use_at_start() -> None:
    found = imported_at_start(*NOT_AT_START)
    for cumulative, module in import_times():  # printed for the reader (pytest -s), asserted nowhere
        print(f"{cumulative / 1000:8.1f} ms  {module}")
    loaded = {name: NOT_AT_START[name] for name, state in found.items() if state == "loaded"}
    assert not loaded, f"imported by `import mpiop.process`: {loaded}"


def test_rich_is_hidden_from_structlog_only_while_it_loads() -> None:
    """The guard leaves no None behind in sys.modules: anything else may still import rich (where installed)."""
    found = imported_at_start("structlog", "structlog.dev", "rich")
    assert found == {"structlog": "loaded", "structlog.dev": "loaded", "rich": "absent"}


LOGGED = """
import logging, sys
import mpiop.process
from mpiop import logging as mpiop_logging
mpiop_logging.configure(sys.argv[1])
try:
    raise ValueError("boom")
except ValueError:
    logging.getLogger("aiohttp.server").exception("Error handling request")
"""


def test_a_librarys_traceback_is_logged_as_plain_text_in_either_format() -> None:
    """A standard-library record's exception (aiohttp's, say): JSON's `exception` field, or console's lines."""
    for log_format, marks in (("json", ('"exception": "Traceback (most recent call last):', "ValueError: boom")),
                              ("console", ("Error handling request", "Traceback (most recent call last):",
                                           'File "<string>", line 7', "ValueError: boom"))):
        done = subprocess.run([sys.executable, "-c", LOGGED, log_format], check=True, capture_output=True, text=True)
        for mark in marks:
            assert mark in done.stderr, (log_format, mark, done.stderr)
