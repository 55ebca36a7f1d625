"""The ConfigMap that keeps a failed attempt's logs (policies/evidence): `<job>-attempt-<n>`, size-bounded.

Each log keeps its last LOG_BYTES, and all the data (with the failure's summary) ATTEMPT_BYTES: the logs
share what is left in order (the launcher's first), so a hundred failed workers get a fair tail each rather
than the first four getting all of it. A ConfigMap holds at most 1 MiB; the bound keeps a job's K attempts
small in etcd.
"""

from __future__ import annotations

from typing import Any

from mpiop import names
from mpiop.api.v2beta1 import MPIJob

LOG_BYTES = 64 * 1024
ATTEMPT_BYTES = 256 * 1024
SUMMARY_BYTES = 4 * 1024
SUMMARY_KEY = "failure"
PROGRESS_KEY = "progress.json"  # the job's last progress report (status.trainerStatus), small: bounded by the CRD


def log_key(pod: str, container: str | None) -> str:
    """`<pod>.<container>.log` (`<pod>.log` when no container started): a valid ConfigMap key."""
    return f"{pod}.{container}.log" if container else f"{pod}.log"


def tail_bytes(text: str, size: int) -> str:
    """The last `size` bytes of `text` (UTF-8), starting at a line when one starts within them."""
    encoded = text.encode()
    if len(encoded) <= size:
        return text
    kept = encoded[len(encoded) - size:].decode("utf-8", errors="ignore")
    cut = kept.find("\n")
    return kept[cut + 1:] if 0 <= cut < len(kept) - 1 else kept


def config_map(job: MPIJob, attempt: int, summary: str, logs: list[tuple[str, str]],
               progress: str = "") -> dict[str, Any]:
    """The attempt's ConfigMap: the failure's summary, the last progress report, and each (key, log text),
    ATTEMPT_BYTES in all."""
    data = {SUMMARY_KEY: tail_bytes(summary, SUMMARY_BYTES)}
    if progress:
        data[PROGRESS_KEY] = tail_bytes(progress, SUMMARY_BYTES)
    left = ATTEMPT_BYTES - sum(len(v.encode()) for v in data.values())
    for position, (key, text) in enumerate(logs):
        share = min(LOG_BYTES, left // (len(logs) - position))
        data[key] = tail_bytes(text, share)
        left -= len(data[key].encode())
    labels = {**names.job_labels(job), names.ATTEMPT_LABEL: str(attempt)}
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": names.owned_metadata(job, names.attempt_config_map_name(job, attempt), labels),
            "data": data}
