"""The bench's CPU accounting per process: what attributes a burst's extra time to a component."""

from __future__ import annotations

import subprocess
import sys
import time

from bench.cpu import CpuMeter, cpu_seconds


def test_cpu_meter_counts_a_busy_process_and_not_an_idle_one() -> None:
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # idle until killed
    try:
        meter = CpuMeter({"busy": busy.pid, "idle": idle.pid})
        deadline = time.monotonic() + 30
        while cpu_seconds(busy.pid) - meter.started["busy"] < 0.3 and time.monotonic() < deadline:
            time.sleep(0.05)  # poll interval: the busy child's CPU time, read off /proc
        spent = meter.stop()
    finally:
        for child in (busy, idle):
            child.kill()
            child.wait()
    assert spent["busy"] >= 0.3
    assert spent["idle"] < 0.1
    assert spent["total"] == round(spent["busy"] + spent["idle"], 2)


def test_a_process_that_is_gone_counts_nothing() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert cpu_seconds(child.pid) == 0.0
