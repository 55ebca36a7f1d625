"""The bench's bare client makes a job's objects as mpiop does."""

from __future__ import annotations

from bench.harness import bench_job, is_launcher, owned_objects
from mpiop import names


def test_exactly_the_launcher_is_held_back_until_the_workers_exist() -> None:
    made = owned_objects(bench_job("order", workers=3))
    held_back = [o["metadata"]["name"] for o in made if is_launcher(o)]
    assert held_back == ["order-launcher"]
    assert [o["metadata"]["labels"][names.JOB_ROLE_LABEL] for o in made if o["kind"] == "Pod" and not is_launcher(o)] \
        == [names.WORKER_ROLE] * 3
