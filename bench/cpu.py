"""CPU seconds each process spent over a window: the simulated cluster's components, the operator, the bench.

On 2 shared cores the burst's milestones are set by the CPU every process needs, not by the operator's alone;
this says where it went (`floor_cpu_s`, `burst_cpu_s` in the JSON).
"""

from __future__ import annotations

import os
from pathlib import Path


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """Started at a window's beginning, `stop()` gives each named process's CPU seconds within it."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.started = {name: cpu_seconds(pid) for name, pid in pids.items()}

    def stop(self) -> dict[str, float]:
        spent = {name: round(cpu_seconds(pid) - self.started[name], 2) for name, pid in self.pids.items()}
        spent["total"] = round(sum(spent.values()), 2)
        return spent
