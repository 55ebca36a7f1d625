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

import structlog

from mpiop.printable import printable

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
