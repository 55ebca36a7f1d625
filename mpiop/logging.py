"""structlog set-up: JSON lines in a cluster, coloured key=value lines for humans.

Reconcile lines carry `job` (namespace/name) and `reconcile_id` through contextvars bound by the manager,
so every line a reconcile logs, at any depth, can be grepped or joined by either. Libraries that log
through the standard library (aiohttp, kubernetes_asyncio) are rendered the same way, so a cluster's log
pipeline sees only JSON. Every string value of every line is escaped (`mpiop.printable`): a job's name, a pod's
termination message or a posted path is a tenant's, and a console shows the log raw.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal


def _import_structlog_without_rich() -> None:
    """Import structlog with `rich` hidden from it, unless stderr is a terminal (or either is imported already).

    structlog imports rich, where it is installed (a dev tool's dependency, not mpiop's: the image has none), for
    its console renderer's pretty tracebacks and its traceback transformer, ~70 ms of a start's ~0.5 s of imports.
    Neither is used by `configure` (every line's traceback is formatted as text first) but for a library's
    exception logged through the standard library in console format, which structlog then renders as plain text,
    as in the image. The entry of None in sys.modules makes `import rich` fail, and only while structlog loads.
    """
    if "structlog" in sys.modules or "rich" in sys.modules or sys.stderr is None or sys.stderr.isatty():
        return
    sys.modules["rich"] = None  # type: ignore[assignment]
    try:
        import structlog  # noqa: F401
    finally:
        del sys.modules["rich"]


_import_structlog_without_rich()

import structlog  # noqa: E402

from mpiop.printable import printable  # noqa: E402

get_logger = structlog.get_logger

LogFormat = Literal["json", "console"]


_MULTILINE = frozenset({"exception", "stack"})  # a traceback keeps its lines


def escape_values(logger: object, method: str, event: structlog.typing.EventDict) -> structlog.typing.EventDict:
    """Each string value escaped by `printable`: one `str.isprintable()` a value when there is nothing to escape."""
    for key, value in event.items():
        if type(value) is str and not value.isprintable():
            event[key] = printable(value, newlines=key in _MULTILINE)
    return event


def configure(log_format: LogFormat = "console", level: str = "info") -> None:
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if log_format == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            escape_values,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    *([structlog.processors.format_exc_info] if log_format == "json" else []), escape_values,
                    renderer],
    ))
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(numeric)
