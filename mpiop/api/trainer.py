"""The progress a job reports about itself: Kubeflow Trainer's `status.trainerStatus` (KEP-2779), same shape.

So a callback written for Trainer's TrainJob works against an MPIJob with a changed URL. Only the job writes it
(mpiop's status endpoint); mpiop reads its lastUpdatedTime for the stall deadline (policies/stall).
"""

from __future__ import annotations

from pydantic import Field

from mpiop.api.base import ApiModel, Time

METRICS_LIMIT = 32  # the metrics one report may carry (the status is read by every watcher of the job)
METRIC_CHARS = 128


class Metric(ApiModel):
    """One training metric, as the job reported it."""

    name: str = Field(min_length=1, max_length=METRIC_CHARS,
                      description='A label the job chose for the metric, e.g. "loss", "eval_accuracy".')
    value: str = Field(min_length=1, max_length=METRIC_CHARS,
                       description='The metric\'s value, serialized as a string, e.g. "0.2347".')


class TrainerStatus(ApiModel):
    """mpiop extension (Kubeflow Trainer's trainerStatus, KEP-2779): the training progress the job last reported."""

    progress_percentage: int | None = Field(
        default=None, ge=0, le=100, json_schema_extra={"format": "int32"},
        description="How complete the training is, 0 to 100, as the job estimates it; empty if unknown.",
    )
    estimated_remaining_seconds: int | None = Field(
        default=None, ge=0, le=2**31 - 1, json_schema_extra={"format": "int32"},
        description="The job's estimate of the training time left, in seconds; empty if unknown.",
    )
    metrics: list[Metric] | None = Field(
        default=None, max_length=METRICS_LIMIT,
        description="The job's current metrics (name and value strings), replaced whole by each report.",
    )
    last_updated_time: Time | None = Field(
        default=None,
        description=("When the job observed these values (the time mpiop received them when the job sent none); "
                     "the progress deadline (annotation mpiop.kubeflow.org/progress-deadline-seconds) counts "
                     "from it."),
    )

    def summary(self) -> str:
        """`40% done, about 120s left, loss=0.3`: what a condition message says of the report."""
        parts = []
        if self.progress_percentage is not None:
            parts.append(f"{self.progress_percentage}% done")
        if self.estimated_remaining_seconds is not None:
            parts.append(f"about {self.estimated_remaining_seconds}s left")
        parts += [f"{m.name}={m.value}" for m in (self.metrics or [])[:4]]
        return ", ".join(parts) or "no values"
