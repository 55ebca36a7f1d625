"""Lines a test session shows at the end (the control plane it ran on, what a real Prometheus said), by section,
also when pytest-xdist runs it: each worker hands its sections to the controller, which alone prints them."""

from __future__ import annotations

from typing import Any

import pytest

__all__ = ["hand_over", "lines", "take_over", "write"]

SECTIONS = pytest.StashKey[dict[str, list[str]]]()
_WORKER_KEY = "summary_sections"


def lines(config: pytest.Config, section: str) -> list[str]:
    """The section's lines, to append to; shown under its title in the terminal summary."""
    return config.stash.setdefault(SECTIONS, {}).setdefault(section, [])


def hand_over(config: pytest.Config) -> None:
    """On an xdist worker (at its session's end): its sections go to the controller; elsewhere nothing."""
    output: dict[str, Any] | None = getattr(config, "workeroutput", None)
    if output is not None:
        output[_WORKER_KEY] = config.stash.get(SECTIONS, {}).copy()


def take_over(config: pytest.Config, worker: Any) -> None:
    """On the controller, as a worker ends: its sections join the session's; a line two workers both saw (their
    control planes are alike) once."""
    for section, new in getattr(worker, "workeroutput", {}).get(_WORKER_KEY, {}).items():
        have = lines(config, section)
        have.extend(line for line in new if line not in have)


def write(terminalreporter: pytest.TerminalReporter) -> None:
    for section, got in terminalreporter.config.stash.get(SECTIONS, {}).items():
        if got:
            terminalreporter.write_sep("-", section)
            for line in got:
                terminalreporter.write_line(line)
