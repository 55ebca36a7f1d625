"""Report a training job's progress to mpiop, with nothing but the Python standard library.

Copy this file into a training image, or `from mpiop.progress_client import ProgressReporter`. In a pod of an
MPIJob, mpiop sets MPIOP_STATUS_URL (where to post), MPIOP_STATUS_TOKEN (the file holding the pod's token, which
the kubelet renews) and MPIOP_STATUS_CA (the CA of mpiop's certificate); every rank sees them (mpirun passes them
on). Outside such a pod (the variables unset) reporting does nothing, so the same script runs anywhere.

    reporter = ProgressReporter(total_steps=1000)
    for step in range(1000):
        train_one_step()
        reporter.step(step + 1, loss=f"{loss:.4f}")   # posts at most every `every` seconds, ETA estimated

A failed post is printed to stderr and training goes on: progress is best effort. The body is Kubeflow
Trainer's trainerStatus (KEP-2779), so a Trainer callback works once pointed at MPIOP_STATUS_URL.

Checkpoint when mpiop stops the job (a suspend, an eviction, activeDeadlineSeconds: docs/api.md, "Checkpointing
when mpiop stops a job"). mpiop tells the launcher by SIGTERM and answers progress posts with the stop's reason and
deadline; `stop_requested()` says whether either reached this process:

    progress_client.install_stop_handler()            # once, in the main thread: SIGTERM sets a flag
    for step in range(1000):
        train_one_step()
        reporter.step(step + 1)
        if progress_client.stop_requested():           # or: if progress_client.report(...).should_stop
            save_checkpoint(); break
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

URL_ENV, TOKEN_ENV, CA_ENV = "MPIOP_STATUS_URL", "MPIOP_STATUS_TOKEN", "MPIOP_STATUS_CA"
_told: dict[str, object] = {"signal": None, "stop": None}  # the SIGTERM received, mpiop's last stop notice


@dataclass(frozen=True)
class Answer:
    """What a post got: the HTTP status (None: not sent) and, while the job is stopping, mpiop's
    {"reason": "Suspended|Disrupted|DeadlineExceeded", "deadline": "<RFC 3339>"}."""

    code: int | None
    stop: dict[str, object] | None = None
    retry_after: float | None = None  # a refusal's Retry-After (429, 503): seconds before mpiop takes another post

    @property
    def should_stop(self) -> bool:
        """Checkpoint now: mpiop is stopping the job (this answer said so, or a stop signal came)."""
        return self.stop is not None or stop_requested()


def install_stop_handler(signals: tuple[int, ...] = (signal.SIGTERM,)) -> None:
    """Catch SIGTERM (mpirun/mpiexec pass on the kubelet's): it sets the flag `stop_requested()` reads instead of
    ending the process at once, so the training loop checkpoints at its next step. Call it in the main thread."""
    def note(signum: int, frame: FrameType | None) -> None:
        _told["signal"] = signum

    for signum in signals:
        signal.signal(signum, note)


def stop_requested() -> bool:
    """Whether mpiop is stopping the job: a stop signal came (install_stop_handler), or a post was answered so."""
    return _told["signal"] is not None or _told["stop"] is not None


def post_status(progress_percentage: int | None = None, estimated_remaining_seconds: int | None = None,
                metrics: dict[str, object] | None = None, timeout: float = 5.0) -> int | None:
    """Post one report; the HTTP status (202 accepted), or None when not in an MPIJob's pod or unreachable."""
    return report(progress_percentage, estimated_remaining_seconds, metrics, timeout).code


def report(progress_percentage: int | None = None, estimated_remaining_seconds: int | None = None,
           metrics: dict[str, object] | None = None, timeout: float = 5.0) -> Answer:
    """Post one report, and say whether to checkpoint now: `if report(...).should_stop: save()`."""
    url, token_path, ca_path = (os.environ.get(n) for n in (URL_ENV, TOKEN_ENV, CA_ENV))
    if not url or not token_path:
        return Answer(None)
    report: dict[str, object] = {"lastUpdatedTime": dt.datetime.now(dt.timezone.utc)  # noqa: UP017
                                                    .strftime("%Y-%m-%dT%H:%M:%SZ")}  # (Python < 3.11 too)
    if progress_percentage is not None:
        report["progressPercentage"] = max(0, min(100, int(progress_percentage)))
    if estimated_remaining_seconds is not None:
        report["estimatedRemainingSeconds"] = max(0, int(estimated_remaining_seconds))
    if metrics:
        report["metrics"] = [{"name": str(k), "value": str(v)} for k, v in metrics.items()]
    try:
        token = Path(token_path).read_text().strip()  # read each time: the kubelet renews the token
        request = urllib.request.Request(url, data=json.dumps({"trainerStatus": report}).encode(), method="POST",
                                         headers={"Authorization": f"Bearer {token}",
                                                  "Content-Type": "application/json"})
        context = ssl.create_default_context(cafile=ca_path or None)
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            code, answer = int(response.status), response.read()
    except urllib.error.HTTPError as error:
        print(f"mpiop progress: refused ({error.code}): {error.read()[:300]!r}", file=sys.stderr)
        return Answer(int(error.code), retry_after=retry_after_seconds(error.headers.get("Retry-After")))
    except (OSError, ValueError) as error:
        print(f"mpiop progress: not sent: {error}", file=sys.stderr)
        return Answer(None)
    return Answer(code, _stop_notice(answer))


def retry_after_seconds(value: str | None) -> float | None:
    """Retry-After's delay in seconds (at most an hour); None when absent or an HTTP date (mpiop sends seconds)."""
    if value is None or not value.strip().isdigit():
        return None
    return float(min(int(value), 3600))


def _stop_notice(answer: bytes) -> dict[str, object] | None:
    """The answer's stop notice, remembered for stop_requested(); None when there is none (or no JSON)."""
    try:
        decoded = json.loads(answer or b"{}")
    except ValueError:
        return None
    stop = decoded.get("stop") if isinstance(decoded, dict) else None
    if isinstance(stop, dict):
        _told["stop"] = stop
        return stop
    return None


class ProgressReporter:
    """Steps done out of `total_steps`, posted at most every `every` seconds, with an ETA from the pace so far.

    Only one rank need report (e.g. rank 0); more are harmless: mpiop keeps the last report of the job. A refusal
    with Retry-After (mpiop's per-pod budget, a full review queue) holds the next post back that long.
    """

    def __init__(self, total_steps: int, every: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.total_steps = max(1, total_steps)
        self.every = every
        self.clock = clock
        self.started = self.clock()
        self.last_post: float | None = None
        self.next_post = self.started  # no post before this (every, or a refusal's Retry-After, after the last)

    def step(self, done: int, force: bool = False, **metrics: object) -> int | None:
        """Record `done` steps; post if `every` seconds passed since the last post (or `force`, or the last step)."""
        now = self.clock()
        if not force and done < self.total_steps and self.last_post is not None and now < self.next_post:
            return None
        self.last_post = now
        elapsed = now - self.started
        remaining = elapsed / done * (self.total_steps - done) if done > 0 else None
        answer = report(int(100 * min(done, self.total_steps) / self.total_steps),
                        None if remaining is None else round(remaining), metrics)
        self.next_post = now + max(self.every, answer.retry_after or 0.0)
        return answer.code
